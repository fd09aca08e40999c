//! `fltrace archive`: the binaries and debug files of a recording, keyed by build ID.

use std::io::Write as _;

use anyhow::Context;

use fltrace_analyze::{ARCHIVE_DIR, OpenedRecording, find_recording};

use crate::cli::{ArchiveArgs, CacheCommand};

/// `fltrace cache list|prune`.
pub fn cache(command: CacheCommand) -> anyhow::Result<()> {
    let cache = fltrace_trace::BuildIdCache::from_env()
        .context("no build-ID cache: set FLTRACE_CACHE (or HOME, for ~/.cache/fltrace)")?;
    let mut stdout = std::io::stdout().lock();
    match command {
        CacheCommand::List => {
            let entries = cache.list()?;
            for e in &entries {
                let age = e.last_used.elapsed().map_or(0, |d| d.as_secs());
                writeln!(
                    stdout,
                    "{} {:>12} {} {:>8}s ago {}",
                    e.build_id,
                    e.bytes,
                    if e.shared { "linked" } else { "copied" },
                    age,
                    e.name
                )?;
            }
            let own: u64 = entries.iter().map(|e| e.own_bytes()).sum();
            writeln!(
                stdout,
                "{} files, {own} bytes of their own, in {}",
                entries.len(),
                cache.root().display()
            )?;
        }
        CacheCommand::Prune { max_size } => {
            let limit =
                max_size.map_or_else(fltrace_trace::BuildIdCache::limit_from_env, |mb| mb << 20);
            let pruned = cache.prune(limit, &[])?;
            for e in &pruned.removed {
                writeln!(stdout, "removed {} {}", e.build_id, e.name)?;
            }
            writeln!(
                stdout,
                "{} files removed, {} bytes of their own kept in {}",
                pruned.removed.len(),
                pruned.kept_bytes,
                cache.root().display()
            )?;
        }
    }
    Ok(())
}

pub fn run(args: ArchiveArgs, opened: &OpenedRecording) -> anyhow::Result<()> {
    let recording = find_recording(&args.dir, args.pid)?;
    let pids = recording.chosen_pids(args.pid);
    let mut traces = Vec::with_capacity(pids.len());
    for pid in pids {
        traces.push(
            recording
                .load_without_alloc_events(pid)
                .with_context(|| format!("loading the trace of process {pid}"))?,
        );
    }
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
        writeln!(
            stdout,
            "{} {}{}",
            file.build_id,
            file.path,
            if file.debuginfo {
                " (with debug file)"
            } else {
                ""
            }
        )?;
    }
    for (path, why) in &summary.skipped {
        eprintln!("fltrace: not archived: {path}: {why}");
    }
    writeln!(
        stdout,
        "{} files in {}",
        summary.archived.len(),
        output.display()
    )?;
    Ok(())
}
