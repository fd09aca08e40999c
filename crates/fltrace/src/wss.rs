//! `fltrace wss`: working-set size over time.

use std::fmt::Write as _;
use std::io::Write as _;
use std::process::ExitCode;
use std::sync::atomic::Ordering;
use std::time::Instant;

use anyhow::{Context, bail};

use fltrace_capture::wss;

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
    if args.damon {
        return damon(&args, pid, child, &stop);
    }
    if args.pages {
        return pages(&args, pid, child, &stop);
    }
    let started = Instant::now();
    let mut out = std::io::stdout().lock();
    if args.format == Format::Csv {
        writeln!(out, "time_s,wss_bytes,rss_bytes")?;
    }
    let mut trace = String::from("time_s,start,end,referenced_bytes,rss_bytes,path\n");
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
            let _ = writeln!(
                trace,
                "{secs:.3},{:#x},{:#x},{},{},{}",
                m.start, m.end, m.referenced, m.rss, m.path
            );
        }
        points.push((secs, sample.wss(), sample.rss()));
        stop.load(Ordering::Relaxed) == 0 && args.duration.is_none_or(|d| started.elapsed() < d)
    })?;
    let path = fltrace_trace::files::path(&args.dir, "wss", pid as u32, "csv");
    fltrace_trace::files::create(&path)?
        .write_all(trace.as_bytes())
        .with_context(|| format!("writing {}", path.display()))?;
    let plot = fltrace_trace::files::path(&args.dir, "wss", pid as u32, "svg");
    if !points.is_empty() {
        let mut out = std::io::BufWriter::new(fltrace_trace::files::create(&plot)?);
        fltrace_render::wss_plot(&points, &format!("working set of process {pid}"), &mut out)
            .map_err(anyhow::Error::from)
            .and_then(|()| Ok(out.flush()?))
            .with_context(|| format!("writing {}", plot.display()))?;
        eprintln!("fltrace: {} and {}", path.display(), plot.display());
    }
    if let Some(mut child) = child {
        // Sampling stopped early (duration or Ctrl-C): the command is left to finish.
        let status = child.wait().context("waiting for the command")?;
        return Ok(ExitCode::from(status.code().unwrap_or(1) as u8));
    }
    Ok(ExitCode::SUCCESS)
}

/// `--damon`: DAMON's view. Where no monitor runs, fltrace starts one of its own (virtual
/// addresses of the process where the kernel has them) and removes it at the end. Where a
/// monitor fltrace did not start holds DAMON (as on the development machines), it is left
/// alone: its `damon:damon_aggregated` events are read, and the physical regions it found
/// accessed are translated to the process's pages through pagemap.
fn damon(
    args: &WssArgs,
    pid: i32,
    child: Option<std::process::Child>,
    stop: &std::sync::atomic::AtomicUsize,
) -> anyhow::Result<ExitCode> {
    use fltrace_capture::damon::{self, DamonStatus, FrameMap, MonitorConfig, Operations};
    let kill = |child: Option<std::process::Child>| {
        if let Some(mut c) = child {
            let _ = c.kill();
            let _ = c.wait();
        }
    };
    let mut own = None;
    match damon::status() {
        DamonStatus::Absent => {
            kill(child);
            bail!(
                "this kernel has no DAMON sysfs interface (/sys/kernel/mm/damon/admin); use fltrace wss without --damon"
            )
        }
        DamonStatus::Free => {
            let config = MonitorConfig {
                sample_us: args.damon_sample.as_micros() as u64,
                aggr_us: args.damon_aggr.as_micros() as u64,
                update_us: args.damon_update.as_micros() as u64,
                regions: args.damon_regions,
            };
            let ram = damon::system_ram();
            match damon::OwnMonitor::start(
                std::path::Path::new(damon::SYSFS),
                pid as u32,
                config,
                &ram,
            ) {
                Ok(monitor) => {
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
                Err(e) => {
                    kill(child);
                    return Err(anyhow::Error::new(e).context("starting a DAMON monitor"));
                }
            }
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
    let mut trace = String::from("time_s,start,end,nr_accesses\n");
    let started_ns = fltrace_capture::monotonic_now_ns();
    // Our own virtual-address monitor reports the process's addresses already.
    let virtual_regions = own
        .as_ref()
        .is_some_and(|(m, _)| m.operations == Operations::Vaddr);
    // Regions of one aggregation arrive together; a new one starts after a quiet spell of half
    // an aggregation interval (the machine's monitor aggregates every few seconds).
    let quiet_ns = own.as_ref().map_or(1_000_000_000, |(_, c)| c.aggr_us * 500);
    let mut batch: Vec<damon::AggregatedRegion> = Vec::new();
    let flush = |batch: &mut Vec<damon::AggregatedRegion>,
                 out: &mut std::io::StdoutLock<'_>,
                 trace: &mut String| {
        let Some(first) = batch.first() else {
            return;
        };
        if virtual_regions {
            let secs = first.time_ns.saturating_sub(started_ns) as f64 / 1e9;
            let mut accessed = 0;
            for region in batch.iter().filter(|r| r.nr_accesses > 0) {
                accessed += region.end - region.start;
                let _ = writeln!(
                    trace,
                    "{secs:.3},{:#x},{:#x},{}",
                    region.start, region.end, region.nr_accesses
                );
            }
            stop_on_error(
                writeln!(out, "{secs:.3},{accessed},{}", rss_bytes(pid)),
                stop,
            );
            batch.clear();
            return;
        }
        let Ok(frames) = FrameMap::of_process(pid) else {
            batch.clear();
            return;
        };
        let secs = first.time_ns.saturating_sub(started_ns) as f64 / 1e9;
        let mut accessed = 0u64;
        for region in batch.iter().filter(|r| r.nr_accesses > 0) {
            let mut pages: Vec<u64> = frames.pages_in(region.start, region.end).collect();
            pages.sort_unstable();
            accessed += pages.len() as u64 * 4096;
            let mut i = 0;
            while i < pages.len() {
                let mut n = 1;
                while i + n < pages.len() && pages[i + n] == pages[i] + n as u64 * 4096 {
                    n += 1;
                }
                let _ = writeln!(
                    trace,
                    "{secs:.3},{:#x},{:#x},{}",
                    pages[i],
                    pages[i] + n as u64 * 4096,
                    region.nr_accesses
                );
                i += n;
            }
        }
        stop_on_error(
            writeln!(out, "{secs:.3},{accessed},{}", frames.len() as u64 * 4096),
            stop,
        );
        batch.clear();
    };
    let alive = || std::path::Path::new(&format!("/proc/{pid}/maps")).exists() && !is_zombie(pid);
    damon::read_aggregated(args.duration, stop, alive, |region| {
        if batch
            .last()
            .is_some_and(|last| region.time_ns > last.time_ns + quiet_ns)
        {
            flush(&mut batch, &mut out, &mut trace);
        }
        batch.push(region);
    })?;
    flush(&mut batch, &mut out, &mut trace);
    // Our own monitor goes before the files are written: a failure below must not leave it.
    drop(own);
    let path = fltrace_trace::files::path(&args.dir, "damon", pid as u32, "csv");
    fltrace_trace::files::create(&path)?
        .write_all(trace.as_bytes())
        .with_context(|| format!("writing {}", path.display()))?;
    kill(child);
    Ok(ExitCode::SUCCESS)
}

/// `--pages`: every interval, the process's present pages are marked idle in the kernel's
/// idle page bitmap and read back at the end of it: the pages whose bit the kernel cleared
/// were accessed. Written to the trace as runs of accessed pages.
fn pages(
    args: &WssArgs,
    pid: i32,
    mut child: Option<std::process::Child>,
    stop: &std::sync::atomic::AtomicUsize,
) -> anyhow::Result<ExitCode> {
    use fltrace_capture::damon::FrameMap;
    use fltrace_capture::wss::{IdleBitmap, PAGE_IDLE_BITMAP};
    let mut kill = || {
        if let Some(mut c) = child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    };
    let bitmap = match IdleBitmap::open(std::path::Path::new(PAGE_IDLE_BITMAP)) {
        Ok(bitmap) => bitmap,
        Err(e) => {
            kill();
            bail!(
                "--pages needs idle page tracking ({PAGE_IDLE_BITMAP}: {e}; CONFIG_IDLE_PAGE_TRACKING and root); without --pages fltrace wss gives the referenced bytes of each mapping"
            );
        }
    };
    let mut out = std::io::stdout().lock();
    writeln!(out, "time_s,wss_bytes,rss_bytes")?;
    let mut trace = String::from("time_s,start,end,referenced_bytes,rss_bytes,path\n");
    let started = Instant::now();
    while stop.load(std::sync::atomic::Ordering::Relaxed) == 0
        && args.duration.is_none_or(|d| started.elapsed() < d)
        && std::path::Path::new(&format!("/proc/{pid}")).exists()
        && !is_zombie(pid)
    {
        let Ok(frames) = FrameMap::of_process(pid) else {
            break;
        };
        let pfns: Vec<u64> = frames.frames().iter().map(|(pfn, _)| *pfn).collect();
        bitmap.mark_idle(&pfns).context("marking pages idle")?;
        std::thread::sleep(args.interval);
        let accessed = bitmap
            .accessed(&pfns)
            .context("reading the idle page bitmap")?;
        let mut pages: Vec<u64> = frames
            .frames()
            .iter()
            .zip(&accessed)
            .filter(|(_, a)| **a)
            .map(|((_, vaddr), _)| *vaddr)
            .collect();
        pages.sort_unstable();
        let secs = started.elapsed().as_secs_f64();
        let mut i = 0;
        while i < pages.len() {
            let mut n = 1;
            while i + n < pages.len() && pages[i + n] == pages[i] + n as u64 * 4096 {
                n += 1;
            }
            let bytes = n as u64 * 4096;
            let _ = writeln!(
                trace,
                "{secs:.3},{:#x},{:#x},{bytes},{bytes},[pages]",
                pages[i],
                pages[i] + bytes
            );
            i += n;
        }
        stop_on_error(
            writeln!(
                out,
                "{secs:.3},{},{}",
                pages.len() as u64 * 4096,
                pfns.len() as u64 * 4096
            ),
            stop,
        );
    }
    let path = fltrace_trace::files::path(&args.dir, "wss", pid as u32, "csv");
    fltrace_trace::files::create(&path)?
        .write_all(trace.as_bytes())
        .with_context(|| format!("writing {}", path.display()))?;
    kill();
    Ok(ExitCode::SUCCESS)
}

/// The process's resident bytes now (0 if it is gone).
fn rss_bytes(pid: i32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/statm"))
        .ok()
        .and_then(|s| s.split_whitespace().nth(1)?.parse::<u64>().ok())
        .map_or(0, |pages| pages * 4096)
}

fn is_zombie(pid: i32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .map(|s| {
            s.rsplit(')')
                .next()
                .is_some_and(|rest| rest.trim_start().starts_with('Z'))
        })
        .unwrap_or(true)
}

/// A line written to stdout, or the end of sampling as on Ctrl-C when stdout is gone
/// (`fltrace wss --format csv | head`): the files are still written and the command ends
/// quietly.
fn stop_on_error(written: std::io::Result<()>, stop: &std::sync::atomic::AtomicUsize) {
    if written.is_err() {
        stop.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    }
}
