//! `fltrace record`.

use std::io::{IsTerminal, Write};
use std::process::ExitCode;
use std::sync::atomic::Ordering;

use anyhow::{Context, bail};

use fltrace_capture::interrupt_counter;
use fltrace_capture::{
    AllocTracing, Credentials, FarMemory, Options, Progress, Target, find_preload_library,
};

use crate::cli::RecordArgs;

pub fn run(args: RecordArgs) -> anyhow::Result<ExitCode> {
    if args.access_samples
        && fltrace_capture::access::availability() == fltrace_capture::access::Availability::None
    {
        bail!(
            "no hardware memory-access sampling on this machine: --access-samples needs Intel PEBS (mem-loads/mem-stores) or AMD IBS op, and neither is available"
        );
    }
    let far_memory = match (args.local_mb, args.max_mb) {
        (Some(l), Some(m)) if l > m => bail!("-L ({l} MB) must not exceed -M ({m} MB)"),
        (Some(_), None) | (None, Some(_)) => bail!("-L and -M go together: give both or neither"),
        (Some(local_mb), Some(max_mb)) => Some(far_memory(&args, local_mb, max_mb)?),
        (None, None) => None,
    };
    let target = match (args.pid, args.command.is_empty()) {
        (Some(pid), _) => Target::Pid(pid),
        (None, false) => Target::Command(args.command.clone()),
        (None, true) => bail!("no command given: fltrace record [OPTIONS] -- <command> [args...]"),
    };
    if !args.dir.is_dir() {
        bail!("output directory {} does not exist", args.dir.display());
    }
    let mut options = Options::new(args.dir.clone());
    options.stack_bytes = args.stack_size & !7;
    options.buffer_mb = args.buffer_mb as usize;
    options.read_live_stacks = !args.exact_stacks;
    if far_memory.is_some() && args.pid.is_some() {
        bail!("-L/-M apply to a command fltrace starts, not to a running process (-p)");
    }
    options.far_memory = far_memory;
    if args.access_samples {
        // The kernel caps sampling rates; above the cap it would refuse or throttle.
        let max_rate = fltrace_capture::sys::max_sample_rate().unwrap_or(u64::MAX);
        if args.freq > max_rate {
            bail!(
                "--freq {} is above this kernel's limit of {max_rate} samples per second (kernel.perf_event_max_sample_rate)",
                args.freq
            );
        }
    }
    options.access_samples = args.access_samples.then_some(args.freq);
    if args.allocs {
        options.allocs = Some(if args.pid.is_some() {
            if !fltrace_capture::uprobes_available() {
                bail!(
                    "--allocs with -p needs uprobes on the running process's allocator, and this kernel has none (CONFIG_UPROBE_EVENTS); start the program under `fltrace record --allocs -- <command>` instead"
                );
            }
            AllocTracing::Uprobes
        } else {
            AllocTracing::Preload(find_preload_library()?)
        });
    }
    if let Some(dir) = &args.backing_dir {
        if options.far_memory.is_some() {
            bail!("--backing-dir and -L/-M both serve the heap: give one of them");
        }
        if args.pid.is_some() {
            bail!(
                "--backing-dir applies to a command fltrace starts, not to a running process (-p)"
            );
        }
        if !dir.is_dir() {
            bail!("backing directory {} does not exist", dir.display());
        }
        options.heap_backing = Some(fltrace_capture::HeapBacking {
            library: find_preload_library()?,
            dir: dir
                .canonicalize()
                .with_context(|| format!("resolving {}", dir.display()))?,
        });
    }
    options.credentials = credentials(&args)?;

    let stop = interrupt_counter()?;

    let show_progress = !args.quiet && std::io::stderr().is_terminal();
    let mut shown = false;
    let summary = fltrace_capture::record(&target, &options, &stop, |p: &Progress| {
        if show_progress {
            let secs = p.elapsed.as_secs_f64().max(1e-3);
            // Not eprint!, which panics when the terminal is gone (SIGHUP): the recording
            // must still be finished.
            let _ = write!(
                std::io::stderr(),
                "\rfltrace: {} faults, {:.0}/s, {} lost  ",
                p.faults,
                p.faults as f64 / secs,
                p.lost
            );
            shown = true;
        }
    })?;
    if shown {
        let _ = write!(std::io::stderr(), "\r\x1b[K");
    }
    let mut err = std::io::stderr().lock();
    if !args.quiet {
        let _ = writeln!(
            err,
            "fltrace: {} faults from {} process{}, {} lost, {} stacks truncated, recorder peak {} MB; trace in {}",
            summary.faults,
            summary.pids.len(),
            if summary.pids.len() == 1 { "" } else { "es" },
            summary.lost,
            summary.stacks_truncated,
            fltrace_capture::sys::own_peak_rss_mb(),
            args.dir.display()
        );
    }
    if stop.load(Ordering::Relaxed) > 0 {
        // Interrupted: say how the command ended, the exit status being fltrace's own too.
        let ended = match (args.pid, summary.exit_code, summary.signal) {
            (Some(pid), _, _) => format!("process {pid} was left running"),
            (None, Some(code), _) => format!("the command exited with status {code}"),
            (None, None, Some(signal)) => format!("the command was killed by signal {signal}"),
            (None, None, None) => "the command ended".to_owned(),
        };
        let _ = writeln!(
            err,
            "fltrace: interrupted; {ended}; the recording is complete"
        );
    }
    if summary.far_memory_exhausted {
        let _ = writeln!(
            err,
            "fltrace: error: the program ran out of far memory: it needs more than -M {} MB",
            args.max_mb.unwrap_or(0)
        );
    }
    if let Some(allocs) = summary.allocs
        && !args.quiet
    {
        let _ = writeln!(
            err,
            "fltrace: {} allocation calls with {} distinct stacks",
            allocs.events, allocs.stacks
        );
        if allocs.dropped > 0 || allocs.corrupt_chunks > 0 {
            let _ = writeln!(
                err,
                "fltrace: warning: {} allocation records could not be written and {} log chunks were damaged",
                allocs.dropped, allocs.corrupt_chunks
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
    Ok(ExitCode::from(summary.shell_status()))
}

fn far_memory(args: &RecordArgs, local_mb: u64, max_mb: u64) -> anyhow::Result<FarMemory> {
    Ok(FarMemory::checked(
        find_preload_library()?,
        local_mb,
        max_mb,
        args.policy.name(),
        args.handlers,
        args.busy_poll,
    )?)
}

fn credentials(args: &RecordArgs) -> anyhow::Result<Option<Credentials>> {
    Ok(match (&args.user, args.drop_privileges) {
        (Some(user), _) => Some(Credentials::of_user(user)?),
        (None, true) => Some(Credentials::of_sudo_user()?),
        (None, false) => None,
    })
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
    let mut kept = Vec::new();
    for pid in summary.traced_pids() {
        for (path, rows) in fltrace_trace::files::readable(dir, pid) {
            let name = path.file_name().map_or_else(
                || path.display().to_string(),
                |n| n.to_string_lossy().into_owned(),
            );
            kept.push(match rows {
                Ok(rows) => format!("{name} ({rows} rows)"),
                Err(e) => format!("{name} (unreadable: {})", fltrace_trace::error_chain(&e)),
            });
        }
    }
    let _ = writeln!(
        err,
        "fltrace: kept: {}",
        if kept.is_empty() {
            "nothing".to_owned()
        } else {
            kept.join(", ")
        }
    );
    let _ = match (summary.exit_code, summary.signal) {
        (Some(code), _) => writeln!(err, "fltrace: the program exited with status {code}"),
        (None, Some(signal)) => writeln!(err, "fltrace: the program was killed by signal {signal}"),
        (None, None) => Ok(()),
    };
}
