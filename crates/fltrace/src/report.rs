//! `fltrace report`.

use std::io::{BufWriter, IsTerminal, Write};

use anyhow::{Context, bail};

use fltrace_analyze::{
    FaultReport, GroupBy, ThreadBy, alloc_processes, folded_counts, group_faults_by_thread,
    leak_age_ns, write_original_reports, write_pprof_counts,
};
use fltrace_render::report::{alloc_tables, faults, threads};

use crate::cli::{By, ReportArgs, ReportFormat};
use crate::load::{Allocs, load_counts, load_with};

/// What a report is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    /// Faults by their own stacks.
    Faults(GroupBy),
    /// Allocations (`--allocs`).
    Allocs(GroupBy),
    /// Memory still allocated at the end (`--leaks`).
    Leaks,
    /// Faults by the allocation site of the memory they hit (`--by alloc-site`).
    AllocSite,
    /// Faults by process, thread or thread name (`--by pid|tid|comm`).
    Threads(ThreadBy),
}

impl Mode {
    /// The mode the flags ask for, or why they do not go together.
    fn of(args: &ReportArgs) -> anyhow::Result<Mode> {
        let group_by = |by: Option<By>| by.unwrap_or(By::Line).group_by().unwrap_or(GroupBy::Line);
        let mode = match (args.allocs, args.leaks, args.by) {
            (true, _, Some(By::AllocSite)) => bail!(
                "--by alloc-site groups faults; --allocs groups allocations by stack, function, line or dso"
            ),
            (true, _, Some(by)) if by.thread_by().is_some() => {
                bail!(
                    "--by comm, pid and tid group faults; --allocs groups allocations by stack, function, line or dso"
                )
            }
            (true, _, by) => Mode::Allocs(group_by(by)),
            (_, true, Some(_)) => bail!("--leaks lists whole stacks: --by does not apply"),
            (_, true, None) => Mode::Leaks,
            (false, false, Some(By::AllocSite)) => Mode::AllocSite,
            (false, false, by) => match by.and_then(By::thread_by) {
                Some(threads) => Mode::Threads(threads),
                None => Mode::Faults(group_by(by)),
            },
        };
        let whole_recording = matches!(mode, Mode::Allocs(_) | Mode::Leaks);
        if whole_recording && args.selection.time.is_some() {
            bail!("--time selects faults; --allocs and --leaks cover the whole recording");
        }
        if !whole_recording && args.older_ms.is_some() {
            bail!("--older-ms applies to --leaks and --allocs");
        }
        Ok(mode)
    }
}

pub fn run(args: ReportArgs) -> anyhow::Result<()> {
    if matches!(args.format, ReportFormat::Folded | ReportFormat::Pprof) {
        return export(&args);
    }
    let out = report(&args)?;
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
fn export(args: &ReportArgs) -> anyhow::Result<()> {
    if args.allocs || args.leaks {
        bail!("--format folded and pprof export the faults' stacks: not with --allocs or --leaks");
    }
    if args.by.is_some() {
        bail!("--format folded and pprof export whole stacks: --by does not apply");
    }
    let pprof = args.format == ReportFormat::Pprof;
    if pprof && args.output.is_none() && std::io::stdout().is_terminal() {
        bail!("a pprof profile is binary: give --output FILE or redirect stdout");
    }
    let loaded = load_counts(&args.selection)?;
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
        folded_counts(loaded.counted_sources())
            .iter()
            .try_for_each(|(stack, count)| writeln!(out, "{stack} {count}"))
    };
    written
        .and_then(|()| out.flush())
        .with_context(|| format!("writing {name}"))
}

/// The width tables fit: `COLUMNS` if set, else the terminal's on stdout, else
/// [`faults::DEFAULT_WIDTH`].
fn terminal_width() -> usize {
    if let Some(columns) = std::env::var("COLUMNS")
        .ok()
        .and_then(|c| c.trim().parse::<usize>().ok())
        .filter(|&c| c > 0)
    {
        return columns;
    }
    let mut size = libc::winsize {
        ws_row: 0,
        ws_col: 0,
        ws_xpixel: 0,
        ws_ypixel: 0,
    };
    // SAFETY: TIOCGWINSZ writes one winsize into `size`, which outlives the call.
    let got = unsafe { libc::ioctl(libc::STDOUT_FILENO, libc::TIOCGWINSZ, &mut size) };
    if got == 0 && size.ws_col > 0 {
        usize::from(size.ws_col)
    } else {
        faults::DEFAULT_WIDTH
    }
}

/// Writes the original's report files and returns what goes to stdout.
fn report(args: &ReportArgs) -> anyhow::Result<String> {
    let mode = Mode::of(args)?;
    // Only the reports of faults by their own stacks stream; the others need each fault's
    // address and time to find the block it landed in.
    let loaded = match mode {
        Mode::Faults(_) => load_counts(&args.selection)?,
        Mode::Threads(_) => load_with(&args.selection, Allocs::Skip)?,
        _ => load_with(&args.selection, Allocs::Required)?,
    };
    write_original_reports(&loaded)?;
    // The faults table says it in its footer; elsewhere it must not mix with the data.
    let in_table = matches!(mode, Mode::Faults(_)) && args.format == ReportFormat::Table;
    if !in_table && let Some(note) = loaded.tracer_note() {
        eprintln!("fltrace: {note}");
    }
    let format = args.format.tabular().render();
    if let Mode::Faults(by) = mode {
        let report = FaultReport::of(loaded.counted(), by, args.top);
        let width = (!args.wide).then(terminal_width);
        return Ok(faults::faults_fit(&loaded, &report, format, width)?);
    }
    if let Mode::Threads(by) = mode {
        let groups = group_faults_by_thread(loaded.traces.iter().map(|(t, _)| t), by);
        return Ok(threads::threads(&groups, by, args.top, format)?);
    }
    let (processes, without) = alloc_processes(&loaded, leak_age_ns(args.older_ms));
    for pid in without {
        // Named on stderr: stdout may be CSV or JSON.
        eprintln!("fltrace: process {pid} was recorded without allocations, left out");
    }
    let (top, older_ms) = (args.top, args.older_ms);
    Ok(match mode {
        Mode::Allocs(by) => alloc_tables::allocs(&loaded, &processes, by, top, older_ms, format),
        Mode::Leaks => alloc_tables::leaks(&loaded, &processes, top, older_ms, format),
        _ => alloc_tables::by_alloc_site(&loaded, &processes, top, format),
    }?)
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;
    use crate::cli::{Cli, Command};

    fn mode(flags: &[&str]) -> anyhow::Result<Mode> {
        let argv = ["fltrace", "report"].iter().chain(flags);
        match Cli::try_parse_from(argv).map(|cli| cli.command) {
            Ok(Command::Report(args)) => Mode::of(&args),
            _ => bail!("not a report command line"),
        }
    }

    /// The flags choose what the report is about; those that do not go together are refused.
    #[test]
    fn modes_of_the_flags() {
        assert_eq!(mode(&[]).unwrap(), Mode::Faults(GroupBy::Line));
        assert_eq!(mode(&["--by", "dso"]).unwrap(), Mode::Faults(GroupBy::Dso));
        assert_eq!(
            mode(&["--allocs", "--by", "stack"]).unwrap(),
            Mode::Allocs(GroupBy::Stack)
        );
        assert_eq!(mode(&["--leaks", "--older-ms", "3"]).unwrap(), Mode::Leaks);
        assert_eq!(mode(&["--by", "alloc-site"]).unwrap(), Mode::AllocSite);
        for flags in [
            &["--allocs", "--by", "alloc-site"][..],
            &["--leaks", "--by", "line"],
            &["--allocs", "--time", "1..2"],
            &["--older", "5"],
        ] {
            assert!(mode(flags).is_err(), "{flags:?}");
        }
    }
}
