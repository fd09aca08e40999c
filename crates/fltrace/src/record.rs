//! `fltrace record`.

use std::io::{IsTerminal, Write};
use std::process::ExitCode;
use std::sync::atomic::Ordering;

use fltrace_capture::interrupt_counter;
use fltrace_capture::{Progress, Request, SummaryLine, ThisMachine};

use anyhow::Context as _;

use crate::cli::RecordArgs;

pub fn run(args: RecordArgs) -> anyhow::Result<ExitCode> {
    let request = Request {
        dir: args.dir.clone(),
        pids: args.pid.clone(),
        children: !args.no_children,
        command: args.command.clone(),
        local_mb: args.local_mb,
        max_mb: args.max_mb,
        policy: args.policy,
        handlers: args.handlers,
        busy_poll: args.busy_poll,
        stack_bytes: args.stack_size,
        stack_cap: Some(args.max_stack_copy),
        buffer_mb: args.buffer_mb.map(|mb| mb as usize),
        exact_stacks: args.exact_stacks,
        user: args.user.clone(),
        drop_privileges: args.drop_privileges,
        allocs: args.allocs,
        access_samples: args.access_samples.then_some(args.freq),
        backing_dir: args.backing_dir.clone(),
    };
    // `-o DIR` is created as runs and sweep create theirs, and removed again (when still
    // empty) if the request is refused.
    let created = !args.dir.exists();
    if created {
        std::fs::create_dir_all(&args.dir)
            .with_context(|| format!("creating {}", args.dir.display()))?;
    }
    let resolved = request.resolve(&ThisMachine);
    if resolved.is_err() && created {
        let _ = std::fs::remove_dir(&args.dir);
    }
    let (target, mut options) = resolved?;
    if !args.no_cache {
        options.build_id_cache = fltrace_trace::BuildIdCache::from_env();
        options.cache_limit = fltrace_trace::BuildIdCache::limit_from_env();
    }

    // On unless turned off; bench/allocs.sh measures both.
    options.drain_allocs = std::env::var_os(DRAIN_ENV).is_none_or(|v| v != "0");

    let stop = interrupt_counter()?;

    let show_progress = !args.quiet && std::io::stderr().is_terminal();
    let mut shown = false;
    let summary = fltrace_capture::record(&target, &options, &stop, |p: &Progress| {
        if show_progress {
            // Not eprint!, which panics when the terminal is gone (SIGHUP): the recording
            // must still be finished.
            let _ = write!(std::io::stderr(), "\rfltrace: {}  ", p.status());
            shown = true;
        }
    })?;
    if shown {
        let _ = write!(std::io::stderr(), "\r\x1b[K");
    }
    let context = fltrace_capture::SummaryContext {
        dir: &args.dir,
        asked_pids: &args.pid,
        quiet: args.quiet,
        interrupted: stop.load(Ordering::Relaxed) > 0,
        max_mb: args.max_mb,
        peak_rss_mb: fltrace_capture::sys::own_peak_rss_mb(),
    };
    let mut err = std::io::stderr().lock();
    for line in summary.lines(&context) {
        match line {
            SummaryLine::Said(text) => {
                let _ = writeln!(err, "fltrace: {text}");
            }
            SummaryLine::Info(text) => log::info!("{text}"),
        }
    }
    Ok(ExitCode::from(summary.record_status()))
}

/// `record --allocs` converts the allocation logs of large processes while the program runs
/// (the drain) unless this is `0`: then every log converts after the program ends.
pub const DRAIN_ENV: &str = "FLTRACE_ALLOCS_DRAIN";
