//! `fltrace`: the command line over the capture, trace, analysis and rendering crates.

mod archive;
mod bpf_tools;
mod cli;
mod diff;
mod export;
mod heatmap;
mod hints;
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

/// Exit status of a command line fltrace does not take: clap's, and the same for flags that
/// parse but do not go together (`report --leaks -o 5`, `report --allocs --time`).
const USAGE_STATUS: u8 = 2;

/// A command line that parses but asks for something fltrace does not do, said with what to
/// type instead; exits with [`USAGE_STATUS`].
#[derive(Debug)]
pub struct UsageError(pub String);

impl std::fmt::Display for UsageError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for UsageError {}

fn main() -> ExitCode {
    let cli = match cli::Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => {
            // clap prints help and version to stdout with success, usage errors to stderr.
            let _ = e.print();
            let args: Vec<String> = std::env::args().skip(1).collect();
            if let Some(hint) = hints::hint(&e, &args) {
                eprintln!("{hint}");
            }
            return if e.use_stderr() {
                ExitCode::from(USAGE_STATUS)
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
            if is_usage(&err) {
                ExitCode::from(USAGE_STATUS)
            } else {
                ExitCode::from(1)
            }
        }
    }
}

/// Whether `err` is about the command line rather than the recording or the system.
fn is_usage(err: &anyhow::Error) -> bool {
    err.chain().any(|cause| {
        cause.downcast_ref::<UsageError>().is_some()
            || cause
                .downcast_ref::<fltrace_analyze::ReportFlagsError>()
                .is_some()
    })
}

fn run(cli: cli::Cli) -> anyhow::Result<ExitCode> {
    match cli.command {
        cli::Command::Record(args) => record::run(args),
        cli::Command::Top(args) => top::run(args),
        cli::Command::Report(mut args) => {
            let opened = open_selection(&mut args.selection)?;
            report::run(args, &opened).map(|()| ExitCode::SUCCESS)
        }
        cli::Command::Visualize(mut args) => {
            let opened = open_selection(&mut args.selection)?;
            visualize::run(args, &opened).map(|()| ExitCode::SUCCESS)
        }
        cli::Command::Sweep(args) => sweep::run(args).map(|()| ExitCode::SUCCESS),
        cli::Command::Wss(args) => wss::run(args),
        cli::Command::Heatmap(mut args) => {
            let opened = open_selection(&mut args.selection)?;
            heatmap::run(args, &opened).map(|()| ExitCode::SUCCESS)
        }
        cli::Command::System(command) => system::run(command),
        cli::Command::Archive(mut args) => {
            args.dir = args.recording.path();
            let opened = open_recording(&mut args.dir)?;
            archive::run(args, &opened).map(|()| ExitCode::SUCCESS)
        }
        cli::Command::Cache(command) => archive::cache(command).map(|()| ExitCode::SUCCESS),
        cli::Command::List(args) => list::run(args).map(|()| ExitCode::SUCCESS),
        cli::Command::Script(mut args) => {
            let _opened = open_selection(&mut args.selection)?;
            script::run(args).map(|()| ExitCode::SUCCESS)
        }
        cli::Command::Export(mut args) => {
            // The default output goes beside the directory named, not into a copy made to
            // recover spools in.
            let named = args.recording.path();
            args.dir = named.clone();
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

/// Opens the recording `selection` names (by position, `-d` or `-i`), pointing its `dir`
/// to where the files are read and keeping the name as given for notes.
fn open_selection(
    selection: &mut cli::Selection,
) -> anyhow::Result<fltrace_analyze::OpenedRecording> {
    selection.dir = selection.recording.path();
    let opened = open_recording(&mut selection.dir)?;
    selection.named = Some(opened.named.clone());
    Ok(opened)
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
