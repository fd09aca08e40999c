//! `fltrace record`.

use std::io::{IsTerminal, Write};
use std::process::ExitCode;
use std::sync::atomic::Ordering;

use fltrace_capture::interrupt_counter;
use fltrace_capture::{Progress, Request, SummaryLine, ThisMachine};

use anyhow::Context as _;

use crate::cli::{RecordArgs, RecordFlags};

pub fn run(args: RecordArgs) -> anyhow::Result<ExitCode> {
    let (target, options) = prepare(&args.recorder, &args.dir, &args.command)?;

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
    say_summary(
        &summary,
        &fltrace_capture::SummaryContext {
            dir: &args.dir,
            asked_pids: &args.recorder.pid,
            quiet: args.quiet,
            interrupted: stop.load(Ordering::Relaxed) > 0,
            max_mb: args.recorder.max_mb,
            peak_rss_mb: fltrace_capture::procfs::own_peak_rss_mb(),
        },
    );
    Ok(ExitCode::from(summary.record_status()))
}

/// Prints the lines a recording ends with on stderr (those for `-v` through the logger).
pub fn say_summary(
    summary: &fltrace_capture::RecordingOutcome,
    context: &fltrace_capture::SummaryContext,
) {
    let mut err = std::io::stderr().lock();
    for line in summary.lines(context) {
        match line {
            SummaryLine::Said(text) => {
                let _ = writeln!(err, "fltrace: {text}");
            }
            SummaryLine::Info(text) => log::info!("{text}"),
        }
    }
}

/// `record --allocs` converts the allocation logs of large processes while the program runs
/// (the drain) unless this is `0`: then every log converts after the program ends.
pub const DRAIN_ENV: &str = "FLTRACE_ALLOCS_DRAIN";

/// `record --allocs` pairs each process's calls while converting them and writes what the
/// reports need (`fltrace-data-allocstats-<pid>.parquet`) unless this is `0`: then reports
/// pair every call themselves.
pub const PAIR_ENV: &str = "FLTRACE_ALLOCS_PAIR";

/// The target and options `flags` ask for, recording into `dir` (created as runs and sweep
/// create theirs, and removed again, when still empty, if the request is refused).
pub fn prepare(
    flags: &RecordFlags,
    dir: &std::path::Path,
    command: &[std::ffi::OsString],
) -> anyhow::Result<(fltrace_capture::Target, fltrace_capture::Options)> {
    let request = Request {
        dir: dir.to_owned(),
        pids: flags.pid.clone(),
        children: !flags.no_children,
        command: command.to_vec(),
        local_mb: flags.local_mb,
        max_mb: flags.max_mb,
        policy: flags.policy,
        handlers: flags.handlers,
        busy_poll: flags.busy_poll,
        fault_path: flags.fault_path,
        stack_bytes: flags.stack_size,
        stack_cap: Some(flags.max_stack_copy),
        buffer_mb: flags.buffer_mb.map(|mb| mb as usize),
        exact_stacks: flags.exact_stacks,
        user: flags.user.clone(),
        drop_privileges: flags.drop_privileges,
        allocs: flags.allocs,
        access_samples: flags.access_samples.then_some(flags.freq),
        backing_dir: flags.backing_dir.clone(),
    };
    let created = !dir.exists();
    if created {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    }
    let resolved = request.resolve(&ThisMachine);
    if resolved.is_err() && created {
        let _ = std::fs::remove_dir(dir);
    }
    let (target, mut options) = resolved?;
    if !flags.no_cache {
        options.build_id_cache = fltrace_trace::BuildIdCache::from_env();
        options.cache_limit = fltrace_trace::BuildIdCache::limit_from_env();
    }
    // On unless turned off; bench/allocs.sh measures both.
    options.drain_allocs = std::env::var_os(DRAIN_ENV).is_none_or(|v| v != "0");
    // Reports then read each process's totals instead of pairing every call. On unless
    // turned off (FLTRACE_ALLOCS_PAIR=0), for bench/allocs.sh to measure what it costs.
    options.pairing = std::env::var_os(PAIR_ENV)
        .is_none_or(|v| v != "0")
        .then(|| fltrace_capture::Pairing(fltrace_analyze::record_time_pairing()));
    Ok((target, options))
}
