//! `fltrace record`.

use std::io::{IsTerminal, Write};
use std::process::ExitCode;
use std::sync::atomic::Ordering;

use fltrace_capture::interrupt_counter;
use fltrace_capture::{Ending, Progress, Request, ThisMachine};

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
        policy: args.policy.name().to_owned(),
        handlers: args.handlers,
        busy_poll: args.busy_poll,
        stack_bytes: args.stack_size,
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

    // Opt-in until it holds on a full file system (its tables in the spool took the space
    // the end's conversion needed); bench/allocs.sh measures both.
    options.drain_allocs = std::env::var_os(DRAIN_ENV).is_some();

    let stop = interrupt_counter()?;

    let show_progress = !args.quiet && std::io::stderr().is_terminal();
    let mut shown = false;
    let summary = fltrace_capture::record(&target, &options, &stop, |p: &Progress| {
        if show_progress {
            // Not eprint!, which panics when the terminal is gone (SIGHUP): the recording
            // must still be finished.
            let _ = write!(
                std::io::stderr(),
                "\rfltrace: {} faults, {:.0}/s, {} lost  ",
                p.faults,
                p.faults_per_second(),
                p.lost
            );
            shown = true;
        }
    })?;
    if shown {
        let _ = write!(std::io::stderr(), "\r\x1b[K");
    }
    let mut err = std::io::stderr().lock();
    if !summary.attached.is_empty() && !args.quiet {
        let _ = writeln!(err, "fltrace: {}", attached_line(&summary.attached));
    }
    if !args.quiet {
        let _ = writeln!(
            err,
            "fltrace: {} from {} process{}, {} lost, {} with truncated stacks, recorder peak {} MB; trace in {}",
            fltrace_analyze::plural(summary.faults, "fault"),
            summary.pids.len(),
            if summary.pids.len() == 1 { "" } else { "es" },
            summary.lost,
            fltrace_analyze::truncated_share(summary.stacks_truncated, summary.faults),
            fltrace_capture::sys::own_peak_rss_mb(),
            args.dir.display()
        );
    }
    if stop.load(Ordering::Relaxed) > 0 {
        // Interrupted: say how the command ended, the exit status being fltrace's own too.
        let ended = match (args.pid.as_slice(), summary.ending()) {
            ([pid], _) if summary.attached.len() <= 1 => {
                format!("process {pid} was left running")
            }
            ([_, ..], _) => "the attached processes were left running".to_owned(),
            ([], Ending::Exited(code)) => format!("the command exited with status {code}"),
            ([], Ending::Killed(signal)) => format!("the command was killed by signal {signal}"),
            ([], Ending::Unknown) => "the command ended".to_owned(),
        };
        let _ = writeln!(
            err,
            "fltrace: interrupted; {ended}; the recording is complete"
        );
    }
    if stop.load(Ordering::Relaxed) == 0
        && args.pid.is_empty()
        && summary.trace_error.is_none()
        && let Ending::Killed(signal) = summary.ending()
    {
        let _ = writeln!(
            err,
            "fltrace: the command was killed by {}",
            signal_name(signal)
        );
    }
    if summary.far_memory_exhausted {
        let _ = writeln!(
            err,
            "fltrace: error: the program ran out of far memory: it needs more than -M {} MB",
            args.max_mb.unwrap_or(0)
        );
    }
    if let Some(allocs) = &summary.allocs
        && !args.quiet
    {
        let _ = writeln!(
            err,
            "fltrace: {} allocation calls with {} distinct stacks{}",
            allocs.events,
            allocs.stacks,
            match &allocs.probed {
                Some(probed) => format!(" (uprobes on {probed})"),
                None => String::new(),
            }
        );
        if let Some(after) = allocs.stopped_after_ns {
            let _ = writeln!(
                err,
                "fltrace: warning: an allocation log could not grow (is its file system full?): tracing stopped {:.3} s after the process's first call; {} calls kept, later ones not recorded",
                after as f64 / 1e9,
                allocs.events
            );
        }
        if (allocs.dropped > 0 && allocs.stopped_after_ns.is_none()) || allocs.corrupt_chunks > 0 {
            let _ = writeln!(
                err,
                "fltrace: warning: {} allocation records could not be written and {} log chunks were damaged",
                allocs.dropped, allocs.corrupt_chunks
            );
        }
        if allocs.refused_stacks > 0 {
            let _ = writeln!(
                err,
                "fltrace: warning: {} allocation stack definitions refused (the stacks kept per process are capped); their calls are kept without a stack",
                allocs.refused_stacks
            );
        }
    }
    if let Some(access) = summary.access
        && !args.quiet
    {
        let _ = writeln!(
            err,
            "fltrace: {} access samples (fltrace-data-access-<pid>.parquet), {} lost, sampling throttled {} times{}",
            access.samples,
            access.lost,
            access.throttled,
            if access.throttled > 0 {
                ": lower --freq"
            } else {
                ""
            }
        );
    }
    if let Some(cache) = &summary.cache {
        // Said when it stored something: a cache that had every file already is the usual
        // case and no news (`-v` says it).
        let stored = cache.linked + cache.copied + cache.pruned > 0;
        if !args.quiet && stored {
            let _ = writeln!(
                err,
                "fltrace: build-ID cache {}: {} files with frames ({} there already, {} linked, {} copied: {} bytes; {} without frames not kept), {:.1} ms opening, {:.1} ms storing{}",
                cache.root.display(),
                cache.files,
                cache.present,
                cache.linked,
                cache.copied,
                cache.copied_bytes,
                cache.without_frames,
                cache.open_time.as_secs_f64() * 1e3,
                cache.store_time.as_secs_f64() * 1e3,
                if cache.pruned > 0 {
                    format!(", {} older files pruned", cache.pruned)
                } else {
                    String::new()
                }
            );
        } else if !stored {
            log::info!(
                "build-ID cache {}: all {} files there already",
                cache.root.display(),
                cache.files
            );
        }
        for failed in &cache.failed {
            let _ = writeln!(
                err,
                "fltrace: warning: not kept in the build-ID cache: {failed}"
            );
        }
    }
    if summary.lost > 0 {
        let _ = writeln!(
            err,
            "fltrace: warning: the kernel dropped {} fault records; try a larger --buffer-mb",
            summary.lost
        );
    }
    if let Some(error) = &summary.trace_error {
        report_partial_trace(&mut err, error, &summary, &args.dir);
    }
    Ok(ExitCode::from(summary.record_status()))
}

/// After a write error: the error, what of the trace reads back, and how the program ended
/// (it ran to its end untraced).
fn report_partial_trace(
    err: &mut impl Write,
    error: &str,
    summary: &fltrace_capture::Summary,
    dir: &std::path::Path,
) {
    let _ = writeln!(
        err,
        "fltrace: error: the trace could not be written completely: {error}"
    );
    if let Some(stopped) = summary.trace_stopped {
        let _ = writeln!(
            err,
            "fltrace: tracing stopped {:.3} s into the run; the program ran on untraced",
            stopped.as_secs_f64()
        );
    }
    let kept: Vec<String> = fltrace_trace::files::kept(dir, &summary.traced_pids())
        .iter()
        .map(ToString::to_string)
        .collect();
    let _ = writeln!(
        err,
        "fltrace: kept: {}",
        if kept.is_empty() {
            "nothing".to_owned()
        } else {
            kept.join(", ")
        }
    );
    let _ = match summary.ending() {
        Ending::Exited(code) => writeln!(err, "fltrace: the program exited with status {code}"),
        Ending::Killed(signal) => {
            writeln!(err, "fltrace: the program was killed by signal {signal}")
        }
        Ending::Unknown => Ok(()),
    };
}

/// `SIGSEGV` for 11: the name a user looks up, or the number for one without a name here.
fn signal_name(signal: i32) -> String {
    let name = match signal {
        libc::SIGHUP => "SIGHUP",
        libc::SIGINT => "SIGINT",
        libc::SIGQUIT => "SIGQUIT",
        libc::SIGILL => "SIGILL",
        libc::SIGTRAP => "SIGTRAP",
        libc::SIGABRT => "SIGABRT",
        libc::SIGBUS => "SIGBUS",
        libc::SIGFPE => "SIGFPE",
        libc::SIGKILL => "SIGKILL",
        libc::SIGUSR1 => "SIGUSR1",
        libc::SIGSEGV => "SIGSEGV",
        libc::SIGUSR2 => "SIGUSR2",
        libc::SIGPIPE => "SIGPIPE",
        libc::SIGALRM => "SIGALRM",
        libc::SIGTERM => "SIGTERM",
        libc::SIGSTKFLT => "SIGSTKFLT",
        libc::SIGXCPU => "SIGXCPU",
        libc::SIGXFSZ => "SIGXFSZ",
        libc::SIGVTALRM => "SIGVTALRM",
        libc::SIGPROF => "SIGPROF",
        libc::SIGSYS => "SIGSYS",
        _ => return format!("signal {signal}"),
    };
    name.to_owned()
}

/// Which running processes `-p` attached to: `attached to 3 processes: 12 (postgres), ...`.
fn attached_line(attached: &[(u32, String)]) -> String {
    let names: Vec<String> = attached
        .iter()
        .map(|(pid, comm)| format!("{pid} ({comm})"))
        .collect();
    format!(
        "attached to {} process{}: {}",
        attached.len(),
        if attached.len() == 1 { "" } else { "es" },
        names.join(", ")
    )
}

/// Set, `record --allocs` converts the allocation logs of large processes while the program
/// runs (the drain); unset, after it ends.
pub const DRAIN_ENV: &str = "FLTRACE_ALLOCS_DRAIN";
