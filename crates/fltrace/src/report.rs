//! `fltrace report`.

use std::io::{BufWriter, IsTerminal, Write};

use anyhow::{Context, bail};

use fltrace_analyze::{
    AllocStacks, FaultReport, FaultsHeld, OpenedRecording, ReportFlags, ReportMode,
    alloc_processes, call_tree, group_faults_by_thread, leak_age_ns, recording_line,
    write_folded_counts, write_original_reports, write_pprof_counts,
};
use fltrace_render::report::{ReportFormat, alloc_tables, call_tree as tree_text, faults, threads};

use crate::cli::ReportArgs;
use crate::load::load;

/// The report the flags ask for, or why they do not go together.
fn mode(args: &ReportArgs) -> Result<ReportMode, fltrace_analyze::ReportFlagsError> {
    ReportMode::of(&flags(args))
}

fn flags(args: &ReportArgs) -> ReportFlags {
    ReportFlags {
        by: args.by,
        call_graph: args.call_graph,
        allocs: args.allocs,
        leaks: args.leaks,
        csv: args.format == ReportFormat::Csv,
        time: args.selection.filters.time.is_some(),
        older_ms: args.older_ms.is_some(),
    }
}

/// `-o` with `--leaks` is the file, as everywhere: bcc's memleak spells the leaks' age
/// `-o MS`, so a number there is refused rather than written as a file of that name.
fn check_output(args: &ReportArgs) -> Result<(), crate::UsageError> {
    if let (true, Some(output)) = (args.leaks, &args.output)
        && let Some(ms) = output
            .to_str()
            .filter(|o| !o.is_empty() && o.bytes().all(|b| b.is_ascii_digit()))
    {
        return Err(crate::UsageError(format!(
            "report --leaks -o {ms}: -o is the file the report is written to; the leaks' age is \
             --older-ms {ms} (memleak's -o); to write a file of that name give -o ./{ms}"
        )));
    }
    Ok(())
}

pub fn run(args: ReportArgs, opened: &OpenedRecording) -> anyhow::Result<()> {
    check_output(&args)?;
    if args.format.is_export() {
        return export(&args, opened);
    }
    let out = report(&args, opened)?;
    if let Some(path) = &args.output {
        let mut file = fltrace_trace::files::create(path)?;
        return file
            .write_all(out.as_bytes())
            .and_then(|()| file.flush())
            .with_context(|| format!("writing {}", path.display()));
    }
    let mut stdout = std::io::stdout().lock();
    stdout.write_all(out.as_bytes())?;
    stdout.flush()?;
    Ok(())
}

/// `--format folded` and `--format pprof`: every fault's whole stack, for other tools.
fn export(args: &ReportArgs, opened: &OpenedRecording) -> anyhow::Result<()> {
    flags(args).check_export(args.legacy_csv.is_some())?;
    let pprof = args.format == ReportFormat::Pprof;
    if pprof && args.output.is_none() && std::io::stdout().is_terminal() {
        bail!("a pprof profile is binary: give --output FILE or redirect stdout");
    }
    let options = args.selection.load_options()?;
    let loaded = load(
        &options.holding(FaultsHeld::Counted, AllocStacks::Skip),
        Some(&opened.named),
    )?;
    eprintln!(
        "fltrace: {}",
        recording_line(&loaded.recording, &opened.named)
    );
    let (mut out, name): (Box<dyn Write>, String) = match &args.output {
        Some(path) => (
            Box::new(BufWriter::new(fltrace_trace::files::create(path)?)),
            path.display().to_string(),
        ),
        None => (
            Box::new(BufWriter::new(std::io::stdout().lock())),
            "stdout".to_owned(),
        ),
    };
    let written = if pprof {
        write_pprof_counts(loaded.counted_sources(), &mut out)
    } else {
        write_folded_counts(loaded.counted_sources(), &mut out)
    };
    written
        .and_then(|()| out.flush())
        .with_context(|| format!("writing {name}"))
}

/// Whether the command line is the original's `fltrace report` (the table of faults by line,
/// with only the recording chosen), which wrote its CSV files without being asked.
fn original_form(args: &ReportArgs) -> bool {
    args.by.is_none()
        && !args.allocs
        && !args.leaks
        && args.format == ReportFormat::Table
        && args.selection.filters.time.is_none()
}

/// Writes the original's CSV files where `--legacy-csv` (or the original's form) asks, and
/// says where when that is not beside the recording. A file it may not replace (a planted
/// link) is an error either way.
fn write_legacy_csv(
    args: &ReportArgs,
    opened: &OpenedRecording,
    loaded: &fltrace_analyze::Loaded,
) -> anyhow::Result<()> {
    let (dir, moved) = match &args.legacy_csv {
        Some(Some(dir)) => (dir.clone(), false),
        Some(None) => (opened.outputs.dir.clone(), opened.outputs.moved),
        None if original_form(args) => (opened.outputs.dir.clone(), opened.outputs.moved),
        None => return Ok(()),
    };
    let written = match write_original_reports(loaded, &dir) {
        Ok(written) => written,
        // The original's side files on a full disk, or unasked in a directory that may not be
        // written (a read-only recording, with the current directory in it): the report
        // itself still prints.
        Err(e) if e.no_space_left() || (args.legacy_csv.is_none() && e.not_writable()) => {
            eprintln!(
                "fltrace: warning: {}: the report is printed only, its CSV not written",
                fltrace_trace::error_chain(&e)
            );
            return Ok(());
        }
        Err(e) => return Err(e.into()),
    };
    for path in written {
        if moved {
            eprintln!(
                "fltrace: {} is read-only: wrote {} into the current directory",
                opened.named.display(),
                path.display()
            );
        } else if opened.unpacked() {
            eprintln!("fltrace: wrote {}", path.display());
        }
    }
    Ok(())
}

/// Writes the original's report files when asked and returns what goes to stdout.
fn report(args: &ReportArgs, opened: &OpenedRecording) -> anyhow::Result<String> {
    let mode = mode(args)?;
    let mut options = mode.load_options(&args.selection.load_options()?);
    // Totals and leaks whatever their age need no call read: the recorder paired them.
    options.allocs_from_record =
        matches!(mode, ReportMode::Allocs(_) | ReportMode::Leaks) && args.older_ms.is_none();
    let loaded = load(&options, Some(&opened.named))?;
    eprintln!(
        "fltrace: {}",
        recording_line(&loaded.recording, &opened.named)
    );
    write_legacy_csv(args, opened, &loaded)?;
    // The faults table says it in its footer; elsewhere it must not mix with the data.
    let in_table = matches!(mode, ReportMode::Faults(_)) && args.format == ReportFormat::Table;
    if !in_table && let Some(note) = loaded.tracer_note() {
        eprintln!("fltrace: {note}");
    }
    let format = args.format.tabular();
    let width = (!args.wide).then(faults::terminal_width);
    if let ReportMode::Faults(by) = mode {
        let report = FaultReport::of(loaded.counted(), by, args.top);
        return Ok(faults::faults_fit(&loaded, &report, format, width)?);
    }
    if let ReportMode::CallTree(order) = mode {
        let tree = call_tree(loaded.counted_sources(), order);
        return Ok(tree_text::call_tree(
            &tree,
            args.top,
            args.percent_limit,
            format,
            width,
        )?);
    }
    if let ReportMode::Threads(by) = mode {
        let groups = group_faults_by_thread(loaded.traces.iter().map(|(t, _)| t), by);
        return Ok(threads::threads(&groups, by, args.top, format, width)?);
    }
    let (processes, without) = alloc_processes(&loaded, leak_age_ns(args.older_ms));
    for pid in without {
        // Named on stderr: stdout may be CSV or JSON.
        eprintln!("fltrace: process {pid} was recorded without allocations, left out");
    }
    let (top, older_ms) = (args.top, args.older_ms);
    Ok(match mode {
        ReportMode::Allocs(by) => {
            alloc_tables::allocs(&loaded, &processes, by, top, older_ms, format, width)
        }
        ReportMode::Leaks => alloc_tables::leaks(&loaded, &processes, top, older_ms, format, width),
        _ => alloc_tables::by_alloc_site(&loaded, &processes, top, format, width),
    }?)
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;
    use crate::cli::{Cli, Command};
    use fltrace_analyze::{CallOrder, GroupBy};

    fn mode(flags: &[&str]) -> anyhow::Result<ReportMode> {
        let argv = ["fltrace", "report"].iter().chain(flags);
        match Cli::try_parse_from(argv).map(|cli| cli.command) {
            Ok(Command::Report(args)) => Ok(super::mode(&args)?),
            _ => bail!("not a report command line"),
        }
    }

    fn args(flags: &[&str]) -> ReportArgs {
        let argv = ["fltrace", "report"].iter().chain(flags);
        match Cli::try_parse_from(argv).map(|cli| cli.command) {
            Ok(Command::Report(args)) => args,
            other => panic!("not a report command line: {other:?}"),
        }
    }

    /// The original's CSV comes with the original's command line, or when asked for (into
    /// the directory given, if one is).
    #[test]
    fn legacy_csv_when_asked() {
        assert!(original_form(&args(&[])));
        assert!(original_form(&args(&[
            "-d", "x", "--pid", "3", "--top", "5"
        ])));
        for flags in [
            &["--by", "line"][..],
            &["--format", "json"],
            &["--allocs"],
            &["--time", "1..2"],
        ] {
            assert!(!original_form(&args(flags)), "{flags:?}");
        }
        assert_eq!(
            args(&["--legacy-csv", "--by", "dso"]).legacy_csv,
            Some(None)
        );
        assert_eq!(
            args(&["--legacy-csv", "out"]).legacy_csv,
            Some(Some("out".into()))
        );
        assert_eq!(args(&[]).legacy_csv, None);
    }

    /// With --leaks, `-o 5` is a file named 5 no one meant: refused, naming --older-ms; any
    /// other name, or a number without --leaks, is a file.
    #[test]
    fn leaks_output_is_not_an_age() {
        let error = check_output(&args(&["--leaks", "-o", "5"])).unwrap_err();
        assert!(error.0.contains("--older-ms 5"), "{error}");
        assert!(check_output(&args(&["--leaks", "-o", "./5"])).is_ok());
        assert!(check_output(&args(&["--leaks", "-o", "leaks.txt"])).is_ok());
        assert!(check_output(&args(&["-o", "5"])).is_ok());
    }

    /// memleak's age is `--older-ms`, and bcc's `-o` and `--older` still say the same.
    #[test]
    fn memleak_older_ms_and_bcc_spellings() {
        for flags in [["--older-ms", "7"], ["--older", "7"], ["-o", "7"]] {
            let argv = ["fltrace", "memleak"].iter().chain(&flags);
            match Cli::try_parse_from(argv).map(|cli| cli.command) {
                Ok(Command::Memleak(args)) => assert_eq!(args.older, 7, "{flags:?}"),
                other => panic!("{flags:?}: {other:?}"),
            }
        }
    }

    /// The flags choose what the report is about; those that do not go together are refused.
    #[test]
    fn modes_of_the_flags() {
        assert_eq!(mode(&[]).unwrap(), ReportMode::Faults(GroupBy::Line));
        assert_eq!(
            mode(&["--by", "dso"]).unwrap(),
            ReportMode::Faults(GroupBy::Dso)
        );
        assert_eq!(
            mode(&["--allocs", "--by", "stack"]).unwrap(),
            ReportMode::Allocs(GroupBy::Stack)
        );
        assert_eq!(
            mode(&["--leaks", "--older-ms", "3"]).unwrap(),
            ReportMode::Leaks
        );
        assert_eq!(
            mode(&["--by", "alloc-site"]).unwrap(),
            ReportMode::AllocSite
        );
        assert_eq!(
            mode(&["-g"]).unwrap(),
            ReportMode::CallTree(CallOrder::Caller)
        );
        assert_eq!(
            mode(&["-g", "callee"]).unwrap(),
            ReportMode::CallTree(CallOrder::Callee)
        );
        assert_eq!(
            mode(&["--call-graph", "callee", "--top", "3"]).unwrap(),
            ReportMode::CallTree(CallOrder::Callee)
        );
        for flags in [
            &["--allocs", "--by", "alloc-site"][..],
            &["--leaks", "--by", "line"],
            &["--allocs", "--time", "1..2"],
            &["--older", "5"],
            &["-g", "--by", "line"],
            &["-g", "--allocs"],
            &["-g", "--format", "csv"],
        ] {
            assert!(mode(flags).is_err(), "{flags:?}");
        }
    }
}
