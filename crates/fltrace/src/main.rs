//! `fltrace`: the command line over the capture, trace, analysis and rendering crates.

mod archive;
mod bpf_tools;
mod cli;
mod diff;
mod export;
mod heatmap;
mod list;
mod load;
mod logger;
mod record;
mod report;
mod runs;
mod script;
mod sweep;
mod system;
mod top;
mod values;
mod visualize;
mod wss;

use std::io::Write;
use std::process::ExitCode;

use clap::Parser;

fn main() -> ExitCode {
    let cli = match cli::Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => {
            // clap prints help and version to stdout with success, usage errors to stderr.
            let _ = e.print();
            if let Some(hint) = missing_separator_hint(&e) {
                eprintln!("{hint}");
            }
            return if e.use_stderr() {
                ExitCode::from(2)
            } else {
                ExitCode::SUCCESS
            };
        }
    };
    logger::init(cli.verbose);
    match run(cli) {
        Ok(code) => code,
        Err(err) => {
            if is_broken_pipe(&err) {
                return ExitCode::SUCCESS;
            }
            let mut stderr = std::io::stderr().lock();
            let _ = write!(stderr, "fltrace: {err}");
            for cause in err.chain().skip(1) {
                let _ = write!(stderr, ": {cause}");
            }
            let _ = writeln!(stderr);
            ExitCode::from(1)
        }
    }
}

/// The commands that run a program after their own flags.
const RUNS_A_COMMAND: [&str; 5] = ["record", "top", "wss", "sweep", "runs"];

/// A hint when a flag of the traced program was read as fltrace's: `fltrace record ls -l`
/// needs `--` before the program (`fltrace record -- ls -l`).
fn missing_separator_hint(error: &clap::Error) -> Option<String> {
    if error.kind() != clap::error::ErrorKind::UnknownArgument {
        return None;
    }
    let args: Vec<String> = std::env::args().skip(1).collect();
    let command = args.iter().find(|a| !a.starts_with('-'))?;
    if !RUNS_A_COMMAND.contains(&command.as_str()) || args.iter().any(|a| a == "--") {
        return None;
    }
    Some(format!(
        "hint: put `--` before the program to run, so that its flags stay its own: fltrace {command} [OPTIONS] -- PROGRAM [ARGS]"
    ))
}

fn run(cli: cli::Cli) -> anyhow::Result<ExitCode> {
    match cli.command {
        cli::Command::Record(args) => record::run(args),
        cli::Command::Top(args) => top::run(args),
        cli::Command::Report(mut args) => {
            let opened = open_recording(&mut args.selection.dir)?;
            args.selection.named = Some(opened.named.clone());
            report::run(args, &opened).map(|()| ExitCode::SUCCESS)
        }
        cli::Command::Visualize(mut args) => {
            let opened = open_recording(&mut args.selection.dir)?;
            args.selection.named = Some(opened.named.clone());
            visualize::run(args, &opened).map(|()| ExitCode::SUCCESS)
        }
        cli::Command::Sweep(args) => sweep::run(args).map(|()| ExitCode::SUCCESS),
        cli::Command::Wss(args) => wss::run(args),
        cli::Command::Heatmap(mut args) => {
            let opened = open_recording(&mut args.selection.dir)?;
            args.selection.named = Some(opened.named.clone());
            heatmap::run(args, &opened).map(|()| ExitCode::SUCCESS)
        }
        cli::Command::System(command) => system::run(command),
        cli::Command::Archive(mut args) => {
            let opened = open_recording(&mut args.dir)?;
            archive::run(args, &opened).map(|()| ExitCode::SUCCESS)
        }
        cli::Command::Cache(command) => archive::cache(command).map(|()| ExitCode::SUCCESS),
        cli::Command::List(args) => list::run(args).map(|()| ExitCode::SUCCESS),
        cli::Command::Script(mut args) => {
            let _opened = open_recording(&mut args.selection.dir)?;
            args.selection.named = Some(_opened.named.clone());
            script::run(args).map(|()| ExitCode::SUCCESS)
        }
        cli::Command::Export(mut args) => {
            // The default output goes beside the directory named, not into a copy made to
            // recover spools in.
            let named = args.dir.clone();
            let _opened = open_recording(&mut args.dir)?;
            args.output
                .get_or_insert_with(|| named.join("fltrace-export"));
            export::run(args).map(|()| ExitCode::SUCCESS)
        }
        cli::Command::Diff(args) => diff::run(args).map(|()| ExitCode::SUCCESS),
        cli::Command::Runs(args) => runs::run(args),
        cli::Command::Analyze(args) => runs::analyze(args).map(|()| ExitCode::SUCCESS),
        cli::Command::Count(args) => bpf_tools::count(args),
        cli::Command::Faults(args) => bpf_tools::faults(args),
        cli::Command::Ffaults(args) => bpf_tools::ffaults(args),
        cli::Command::Memleak(args) => bpf_tools::memleak(args),
        cli::Command::Triage(args) => bpf_tools::triage(args),
    }
}

/// `fltrace report | head` must end quietly.
fn is_broken_pipe(err: &anyhow::Error) -> bool {
    err.chain().any(|cause| {
        cause
            .downcast_ref::<std::io::Error>()
            .is_some_and(|e| e.kind() == std::io::ErrorKind::BrokenPipe)
    })
}

/// Opens the recording at `dir` (recovering a killed recorder's allocation logs) and points
/// `dir` to where its files are read while the returned value lives.
pub fn open_recording(
    dir: &mut std::path::PathBuf,
) -> anyhow::Result<fltrace_analyze::OpenedRecording> {
    let opened = fltrace_analyze::OpenedRecording::open_recovering(dir, |copied| {
        eprintln!("fltrace: {copied}");
    })?;
    dir.clone_from(&opened.dir);
    Ok(opened)
}
