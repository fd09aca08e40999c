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
    if args.damon {
        bail!("{}", damon_status());
    }
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
        let _ = writeln!(out, "{line}");
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
        fltrace_render::wss_plot(&points, &format!("working set of process {pid}"), &plot)?;
        eprintln!("fltrace: {} and {}", path.display(), plot.display());
    }
    if let Some(mut child) = child {
        // Sampling stopped early (duration or Ctrl-C): the command is left to finish.
        let status = child.wait().context("waiting for the command")?;
        return Ok(ExitCode::from(status.code().unwrap_or(1) as u8));
    }
    Ok(ExitCode::SUCCESS)
}

/// What DAMON offers here, in one line. fltrace never stops, reconfigures or adds schemes to a
/// monitor it did not start.
fn damon_status() -> String {
    let admin = std::path::Path::new("/sys/kernel/mm/damon/admin/kdamonds");
    let Ok(count) = std::fs::read_to_string(admin.join("nr_kdamonds")) else {
        return "this kernel has no DAMON sysfs interface (/sys/kernel/mm/damon/admin); use fltrace wss without --damon".into();
    };
    let count: usize = count.trim().parse().unwrap_or(0);
    let running: Vec<usize> = (0..count)
        .filter(|i| {
            std::fs::read_to_string(admin.join(i.to_string()).join("state"))
                .is_ok_and(|s| s.trim() == "on")
        })
        .collect();
    if running.is_empty() {
        "DAMON is free here, but fltrace cannot start a monitor of its own yet; use fltrace wss without --damon".into()
    } else {
        format!(
            "DAMON is in use by a monitor fltrace did not start (kdamond {}) and the kernel allows no second one; fltrace leaves it alone (reading its damon:damon_aggregated events read-only is not implemented yet); use fltrace wss without --damon",
            running
                .iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>()
                .join(", ")
        )
    }
}
