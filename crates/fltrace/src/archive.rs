//! `fltrace archive`: the binaries and debug files of a recording, keyed by build ID.

use std::io::Write as _;

use anyhow::Context;

use fltrace_analyze::{ARCHIVE_DIR, OpenedRecording};

use crate::cli::{ArchiveArgs, CacheCommand};

/// `fltrace cache list|prune`.
pub fn cache(command: CacheCommand) -> anyhow::Result<()> {
    let cache = fltrace_trace::BuildIdCache::from_env()
        .context("no build-ID cache: set FLTRACE_CACHE (or HOME, for ~/.cache/fltrace)")?;
    let mut stdout = std::io::stdout().lock();
    match command {
        CacheCommand::List => {
            let entries = cache.list()?;
            for entry in &entries {
                writeln!(stdout, "{}", entry.line())?;
            }
            let total = fltrace_trace::build_id_cache::listing_total(&entries, cache.root());
            writeln!(stdout, "{total}")?;
        }
        CacheCommand::Prune { max_size } => {
            let limit =
                max_size.map_or_else(fltrace_trace::BuildIdCache::limit_from_env, |mb| mb << 20);
            for line in cache.prune(limit, &[])?.lines(cache.root()) {
                writeln!(stdout, "{line}")?;
            }
        }
    }
    Ok(())
}

pub fn run(args: ArchiveArgs, opened: &OpenedRecording) -> anyhow::Result<()> {
    let traces = fltrace_analyze::traces_to_archive(&args.dir, args.pid)?;
    let output = args.output.unwrap_or_else(|| {
        if opened.outputs.moved {
            eprintln!(
                "fltrace: {} is read-only: the archive goes into the current directory",
                opened.named.display()
            );
        }
        opened.outputs.dir.join(ARCHIVE_DIR)
    });
    let (summary, warnings) = fltrace_analyze::archive_to(&traces, &args.dir, &output)?;
    for warning in warnings {
        eprintln!("fltrace: warning: {warning}");
    }
    // Written, not printed: `fltrace archive | head` ends quietly.
    let mut stdout = std::io::stdout().lock();
    for file in &summary.archived {
        writeln!(stdout, "{}", file.line())?;
    }
    for (path, why) in &summary.skipped {
        eprintln!("fltrace: not archived: {path}: {why}");
    }
    writeln!(stdout, "{}", summary.total_line(&output))?;
    Ok(())
}
