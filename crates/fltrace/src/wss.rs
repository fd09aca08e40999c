//! `fltrace wss`: working-set size over time.

use std::io::Write as _;
use std::process::ExitCode;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Instant;

use anyhow::{Context, bail};

use fltrace_capture::ChildGuard;
use fltrace_capture::damon::{self, DamonStatus, MonitorConfig, Operations};
use fltrace_capture::wss::{self, IdleBitmap, PAGE_IDLE_BITMAP};

use crate::cli::{Format, WssArgs};
use fltrace_capture::interrupt_counter;

pub fn run(args: WssArgs) -> anyhow::Result<ExitCode> {
    // Said before anything starts: the rows stream as they come, one per interval.
    if args.format == Format::Json {
        bail!("wss prints a row per interval as it goes: --format table or csv");
    }
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
    let started = Instant::now();
    let mut out = std::io::stdout().lock();
    let mut rows = match args.format {
        Format::Csv => Some(WssRows::new(std::io::stdout().lock())?),
        _ => None,
    };
    let mut points = Vec::new();
    let trace = wss::trace_referenced(pid, args.interval, |sample| {
        let secs = sample.elapsed.as_secs_f64();
        let written = match &mut rows {
            Some(rows) => rows.row(secs, sample.wss(), sample.rss()),
            None => writeln!(
                out,
                "{secs:8.2} s  wss {:9.1} MB  rss {:9.1} MB",
                sample.wss() as f64 / 1048576.0,
                sample.rss() as f64 / 1048576.0
            ),
        };
        stop_on_error(written, &stop);
        points.push((secs, sample.wss(), sample.rss()));
        stop.load(Ordering::Relaxed) == 0 && args.duration.is_none_or(|d| started.elapsed() < d)
    })?;
    let path = fltrace_trace::files::path(&args.dir, "wss", pid as u32, "csv");
    trace.write(&path)?;
    let plot = fltrace_trace::files::path(&args.dir, "wss", pid as u32, "svg");
    if !points.is_empty() {
        let mut out = std::io::BufWriter::new(fltrace_trace::files::create(&plot)?);
        fltrace_render::wss_plot(&points, &format!("working set of process {pid}"), &mut out)
            .map_err(anyhow::Error::from)
            .and_then(|()| Ok(out.flush()?))
            .with_context(|| format!("writing {}", plot.display()))?;
        eprintln!("fltrace: {} and {}", path.display(), plot.display());
    }
    // Sampling stopped early (duration or Ctrl-C): the command is left to finish.
    Ok(match child.wait()? {
        Some(status) => ExitCode::from(status.code().unwrap_or(1) as u8),
        None => ExitCode::SUCCESS,
    })
}

/// `--damon`: DAMON's view. Where no monitor runs, fltrace starts one of its own (virtual
/// addresses of the process where the kernel has them) and removes it at the end. Where a
/// monitor fltrace did not start holds DAMON (as on the development machines), it is left
/// alone: its `damon:damon_aggregated` events are read, and the physical regions it found
/// accessed are translated to the process's pages through pagemap.
fn with_damon(args: &WssArgs, pid: i32, stop: &AtomicUsize) -> anyhow::Result<ExitCode> {
    let mut own = None;
    match damon::status() {
        DamonStatus::Absent => bail!(
            "this kernel has no DAMON sysfs interface (/sys/kernel/mm/damon/admin); use fltrace wss without --damon"
        ),
        DamonStatus::Free => {
            let config = MonitorConfig {
                sample_us: args.damon_sample.as_micros() as u64,
                aggr_us: args.damon_aggr.as_micros() as u64,
                update_us: args.damon_update.as_micros() as u64,
                regions: args.damon_regions,
            };
            let monitor = damon::OwnMonitor::start(
                std::path::Path::new(damon::SYSFS),
                pid as u32,
                config,
                &damon::system_ram(),
            )
            .context("starting a DAMON monitor")?;
            eprintln!(
                "fltrace: DAMON is free: started a monitor of fltrace's own ({} operations), removed at the end",
                if monitor.operations == Operations::Vaddr {
                    "virtual-address"
                } else {
                    "physical-address"
                }
            );
            own = Some((monitor, config));
        }
        DamonStatus::InUse(kdamonds) => eprintln!(
            "fltrace: DAMON is in use by a monitor fltrace did not start (kdamond {}); reading its damon:damon_aggregated events read-only, translated to process {pid}",
            kdamonds
                .iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>()
                .join(", ")
        ),
    }
    let mut rows = WssRows::new(std::io::stdout().lock())?;
    let trace = damon::trace_process(
        pid,
        own.as_ref().map(|(monitor, config)| (monitor, config)),
        args.duration,
        stop,
        |secs, aggregation| {
            let written = rows.row(secs, aggregation.accessed_bytes, aggregation.resident_bytes);
            stop_on_error(written, stop);
        },
    )?;
    // Our own monitor goes before the files are written: a failure below must not leave it.
    drop(own);
    let path = fltrace_trace::files::path(&args.dir, "damon", pid as u32, "csv");
    trace.write(&path)?;
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
    let mut rows = WssRows::new(std::io::stdout().lock())?;
    let started = Instant::now();
    let keep_going =
        || stop.load(Ordering::Relaxed) == 0 && args.duration.is_none_or(|d| started.elapsed() < d);
    let trace = wss::trace_pages(
        pid,
        args.interval,
        &bitmap,
        |sample| {
            let written = rows.row(sample.elapsed.as_secs_f64(), sample.wss(), sample.rss());
            stop_on_error(written, stop);
        },
        keep_going,
    )?;
    let path = fltrace_trace::files::path(&args.dir, "wss", pid as u32, "csv");
    trace.write(&path)?;
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

/// The `time_s,wss_bytes,rss_bytes` rows on stdout, each flushed as it comes: the command's
/// progress, read live by other programs.
struct WssRows<W: std::io::Write>(csv::Writer<W>);

impl<W: std::io::Write> WssRows<W> {
    fn new(out: W) -> std::io::Result<WssRows<W>> {
        let mut csv = csv::Writer::from_writer(out);
        csv.write_record(["time_s", "wss_bytes", "rss_bytes"])?;
        csv.flush()?;
        Ok(WssRows(csv))
    }

    fn row(&mut self, secs: f64, wss_bytes: u64, rss_bytes: u64) -> std::io::Result<()> {
        self.0.write_record([
            format!("{secs:.3}"),
            wss_bytes.to_string(),
            rss_bytes.to_string(),
        ])?;
        self.0.flush()
    }
}
