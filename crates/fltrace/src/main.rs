//! `fltrace`: the command line over the capture, trace, analysis and rendering crates.

mod archive;
mod bpf_tools;
mod cli;
mod diff;
mod heatmap;
mod load;
mod logger;
mod record;
mod report;
mod runs;
mod script;
mod sweep;
mod system;
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
const RUNS_A_COMMAND: [&str; 4] = ["record", "wss", "sweep", "runs"];

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
        cli::Command::Report(args) => {
            recover_allocations(&args.selection.dir);
            report::run(args).map(|()| ExitCode::SUCCESS)
        }
        cli::Command::Visualize(args) => {
            recover_allocations(&args.selection.dir);
            visualize::run(args).map(|()| ExitCode::SUCCESS)
        }
        cli::Command::Sweep(args) => sweep::run(args).map(|()| ExitCode::SUCCESS),
        cli::Command::Wss(args) => wss::run(args),
        cli::Command::Heatmap(args) => {
            recover_allocations(&args.selection.dir);
            heatmap::run(args).map(|()| ExitCode::SUCCESS)
        }
        cli::Command::System(command) => system::run(command),
        cli::Command::Archive(args) => archive::run(args).map(|()| ExitCode::SUCCESS),
        cli::Command::Script(args) => script::run(args).map(|()| ExitCode::SUCCESS),
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

/// Converts the allocation logs a killed `record --allocs` left in `dir` into its tables
/// before they are read (it warns of each process recovered). The logs stay: a command that
/// reads a recording deletes nothing in it (the next `record` there removes them).
fn recover_allocations(dir: &std::path::Path) {
    fltrace_capture::recover_stale_spools(dir, fltrace_capture::SpoolLogs::Keep);
}
