//! `fltrace wss`: working-set size over time.

use std::io::Write as _;
use std::process::ExitCode;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Instant;

use anyhow::{Context, bail};

use fltrace_capture::damon::{self, DamonStatus, MonitorConfig, Operations};
use fltrace_capture::wss::{self, IdleBitmap, PAGE_IDLE_BITMAP};
use fltrace_trace::{RangeSample, RangeTraceKind, RangeTraceWriter};

use crate::cli::{Format, WssArgs};
use crate::record::interrupt_counter;

pub fn run(args: WssArgs) -> anyhow::Result<ExitCode> {
    let stop = interrupt_counter()?;
    let mut child = None;
    let pid = match (args.pid, args.command.split_first()) {
        (Some(pid), _) => pid,
        (None, Some((program, rest))) => {
            let spawned = std::process::Command::new(program)
                .args(rest)
                .spawn()
                .with_context(|| format!("cannot run `{}`", program.to_string_lossy()))?;
            let pid = spawned.id() as i32;
            child = Some(spawned);
            pid
        }
        (None, None) => bail!("give a command (fltrace wss -- <command>) or a process (-p PID)"),
    };
    // The command is killed on the way out of --damon and --pages, as before.
    let mut child = KillOnDrop(child);
    if args.damon {
        return with_damon(&args, pid, &stop);
    }
    if args.pages {
        return pages(&args, pid, &stop);
    }
    let started = Instant::now();
    let mut out = std::io::stdout().lock();
    if args.format == Format::Csv {
        writeln!(out, "time_s,wss_bytes,rss_bytes")?;
    }
    let mut trace = RangeTraceWriter::new(RangeTraceKind::ReferencedBytes);
    let mut points = Vec::new();
    wss::sample(pid, args.interval, |sample| {
        let secs = sample.elapsed.as_secs_f64();
        let line = match args.format {
            Format::Csv => format!("{secs:.3},{},{}", sample.wss(), sample.rss()),
            _ => format!(
                "{secs:8.2} s  wss {:9.1} MB  rss {:9.1} MB",
                sample.wss() as f64 / 1048576.0,
                sample.rss() as f64 / 1048576.0
            ),
        };
        stop_on_error(writeln!(out, "{line}"), &stop);
        for m in &sample.mappings {
            trace.push_referenced(&range(secs, m.start, m.end, m.referenced), m.rss, &m.path);
        }
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
    if let Some(mut command) = child.0.take() {
        // Sampling stopped early (duration or Ctrl-C): the command is left to finish.
        let status = command.wait().context("waiting for the command")?;
        return Ok(ExitCode::from(status.code().unwrap_or(1) as u8));
    }
    Ok(ExitCode::SUCCESS)
}

/// The command fltrace started, killed and reaped when dropped.
struct KillOnDrop(Option<std::process::Child>);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        if let Some(mut command) = self.0.take() {
            let _ = command.kill();
            let _ = command.wait();
        }
    }
}

fn range(
    time_s: f64,
    start: fltrace_trace::VirtAddr,
    end: fltrace_trace::VirtAddr,
    value: u64,
) -> RangeSample {
    RangeSample {
        time_s,
        start,
        end,
        value,
    }
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
    let mut out = std::io::stdout().lock();
    writeln!(out, "time_s,wss_bytes,rss_bytes")?;
    let mut trace = RangeTraceWriter::new(RangeTraceKind::DamonAccesses);
    let started_ns = fltrace_capture::monotonic_now_ns();
    // Our own virtual-address monitor reports the process's addresses already.
    let operations = match &own {
        Some((monitor, _)) => monitor.operations,
        None => Operations::Paddr,
    };
    // The machine's monitor aggregates every few seconds; ours every --damon-aggr.
    let quiet_ns = own.as_ref().map_or(1_000_000_000, |(_, c)| c.aggr_us * 500);
    damon::watch_process(
        pid,
        operations,
        quiet_ns,
        args.duration,
        stop,
        |aggregation| {
            let secs = aggregation.time_ns.saturating_sub(started_ns) as f64 / 1e9;
            for r in &aggregation.ranges {
                trace.push_accesses(&range(secs, r.start, r.end, u64::from(r.nr_accesses)));
            }
            stop_on_error(
                writeln!(
                    out,
                    "{secs:.3},{},{}",
                    aggregation.accessed_bytes, aggregation.resident_bytes
                ),
                stop,
            );
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
    let mut out = std::io::stdout().lock();
    writeln!(out, "time_s,wss_bytes,rss_bytes")?;
    let mut trace = RangeTraceWriter::new(RangeTraceKind::ReferencedBytes);
    let started = Instant::now();
    let keep_going =
        || stop.load(Ordering::Relaxed) == 0 && args.duration.is_none_or(|d| started.elapsed() < d);
    if keep_going() {
        wss::sample_pages(pid, args.interval, &bitmap, |sample| {
            let secs = sample.elapsed.as_secs_f64();
            for (start, end) in sample.runs() {
                trace.push_referenced(
                    &range(secs, start, end, end - start),
                    end - start,
                    "[pages]",
                );
            }
            stop_on_error(
                writeln!(out, "{secs:.3},{},{}", sample.wss(), sample.rss()),
                stop,
            );
            keep_going()
        })?;
    }
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
