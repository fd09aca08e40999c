//! `fltrace wss`: working-set size over time.

use std::process::ExitCode;
use std::sync::atomic::{AtomicUsize, Ordering};

use anyhow::{Context as _, bail};

use fltrace_capture::ChildGuard;
use fltrace_capture::damon::{self, ChosenMonitor, MonitorConfig};
use fltrace_capture::wss::{self, IdleBitmap, PAGE_IDLE_BITMAP};
use fltrace_render::wss::{WssPrinter, csv_unless_json, write_wss_files};

use crate::cli::WssArgs;
use fltrace_capture::interrupt_counter;

pub fn run(args: WssArgs) -> anyhow::Result<ExitCode> {
    // `-o DIR` is created, as record, runs and sweep create theirs.
    std::fs::create_dir_all(&args.dir)
        .with_context(|| format!("creating {}", args.dir.display()))?;
    let stop = interrupt_counter()?;
    // The command is killed and reaped on the way out of --damon and --pages, and on errors.
    let (child, pid) = match (args.pid, args.command.is_empty()) {
        (Some(pid), _) => (ChildGuard::none(), pid),
        (None, false) => ChildGuard::start(&args.command)?,
        (None, true) => bail!("give a command (fltrace wss -- <command>) or a process (-p PID)"),
    };
    if args.damon {
        return with_damon(&args, pid, &stop);
    }
    if args.pages {
        return pages(&args, pid, &stop);
    }
    let mut rows = WssPrinter::new(std::io::stdout(), args.format)?;
    let trace = wss::trace_referenced(pid, args.interval, args.duration, &stop, |sample| {
        stop_on_error(rows.row(&sample.row()), &stop);
    })?;
    let written = write_wss_files(&args.dir, "wss", pid as u32, trace.ranges, &trace.curve)?;
    if let [path, plot] = &written[..] {
        eprintln!("fltrace: {} and {}", path.display(), plot.display());
    }
    // Sampling stopped early (duration or Ctrl-C): the command is left to finish.
    Ok(ExitCode::from(fltrace_capture::shell_status(child.wait()?)))
}

/// `--damon`: DAMON's view. Where no monitor runs, fltrace starts one of its own (virtual
/// addresses of the process where the kernel has them) and removes it at the end. Where a
/// monitor fltrace did not start holds DAMON (as on the development machines), it is left
/// alone: its `damon:damon_aggregated` events are read, and the physical regions it found
/// accessed are translated to the process's pages through pagemap.
fn with_damon(args: &WssArgs, pid: i32, stop: &AtomicUsize) -> anyhow::Result<ExitCode> {
    let config = MonitorConfig {
        sample_us: args.damon_sample.as_micros() as u64,
        aggr_us: args.damon_aggr.as_micros() as u64,
        update_us: args.damon_update.as_micros() as u64,
        regions: args.damon_regions,
    };
    let monitor = ChosenMonitor::choose(
        std::path::Path::new(damon::SYSFS),
        pid as u32,
        config,
        damon::system_ram,
    )?;
    eprintln!("fltrace: {monitor}");
    let mut rows = WssPrinter::new(std::io::stdout(), csv_unless_json(args.format))?;
    let trace = damon::trace_process(
        pid,
        monitor.own(),
        args.duration,
        stop,
        |secs, aggregation| stop_on_error(rows.row(&aggregation.row(secs)), stop),
    )?;
    // Our own monitor goes before the files are written: a failure below must not leave it.
    drop(monitor);
    write_wss_files(&args.dir, "damon", pid as u32, trace, &[])?;
    Ok(ExitCode::SUCCESS)
}

/// `--pages`: every interval, the process's present pages are marked idle in the kernel's
/// idle page bitmap and read back at the end of it: the pages whose bit the kernel cleared
/// were accessed. Written to the trace as runs of accessed pages.
fn pages(args: &WssArgs, pid: i32, stop: &AtomicUsize) -> anyhow::Result<ExitCode> {
    let bitmap = match IdleBitmap::open(std::path::Path::new(PAGE_IDLE_BITMAP)) {
        Ok(bitmap) => bitmap,
        Err(e) => bail!(
            "--pages needs idle page tracking ({PAGE_IDLE_BITMAP}: {e}; CONFIG_IDLE_PAGE_TRACKING and root); without --pages fltrace wss gives the referenced bytes of each mapping"
        ),
    };
    let mut rows = WssPrinter::new(std::io::stdout(), csv_unless_json(args.format))?;
    let trace = wss::trace_pages(pid, args.interval, &bitmap, args.duration, stop, |sample| {
        stop_on_error(rows.row(&sample.row()), stop)
    })?;
    write_wss_files(&args.dir, "wss", pid as u32, trace, &[])?;
    Ok(ExitCode::SUCCESS)
}

/// A line written to stdout, or the end of sampling as on Ctrl-C when stdout is gone
/// (`fltrace wss --format csv | head`): the files are still written and the command ends
/// quietly.
fn stop_on_error(written: std::io::Result<()>, stop: &AtomicUsize) {
    if written.is_err() {
        stop.fetch_add(1, Ordering::Relaxed);
    }
}
