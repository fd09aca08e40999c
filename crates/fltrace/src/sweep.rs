//! `fltrace sweep`: the paper's method in one command. Measure the command's peak memory,
//! record it at local memory from `--from` down to `--to` percent of that peak, and tabulate
//! and plot faults and the code locations covering 95% of them.

use std::fmt::Write as _;
use std::io::Write as _;
use std::path::Path;
use std::sync::atomic::AtomicUsize;

use anyhow::{Context, bail};

use fltrace_analyze::{GroupBy, coverage, group_fault_counts};
use fltrace_capture::{Options, Target};
use fltrace_render::{SweepPoint, sweep_plot};
use fltrace_trace::Recording;

use crate::cli::{Selection, SweepArgs};
use crate::load::load_counts;
use crate::record::{far_memory_settings, interrupt_counter};

pub fn run(args: SweepArgs) -> anyhow::Result<()> {
    if args.to > args.from {
        bail!(
            "--to ({}%) must not exceed --from ({}%)",
            args.to,
            args.from
        );
    }
    std::fs::create_dir_all(&args.dir)
        .with_context(|| format!("creating {}", args.dir.display()))?;
    let stop = interrupt_counter()?;
    let target = Target::Command(args.command.clone());

    let baseline = args.dir.join("baseline");
    let peak = match peak_of(&baseline) {
        Some(peak) => peak,
        None => {
            eprintln!("fltrace sweep: measuring the peak memory of the command");
            record_into(&baseline, &target, None, &stop)?;
            peak_of(&baseline).context("the baseline run recorded no peak memory")?
        }
    };
    let peak_mb = peak.div_ceil(1 << 20).max(1);
    let max_mb = args.max_mb.unwrap_or((peak_mb * 2).max(peak_mb + 256));
    eprintln!("fltrace sweep: peak {peak_mb} MB; far memory -M {max_mb} MB per run");

    let percents: Vec<u32> = (args.to..=args.from)
        .rev()
        .step_by(args.step as usize)
        .collect();
    let mut points = Vec::new();
    let mut csv = String::from("local_percent,local_mb,max_mb,faults,fetches,locations_95\n");
    for (i, percent) in percents.iter().enumerate() {
        let local_mb = (peak_mb * u64::from(*percent) / 100).max(1);
        let dir = args.dir.join(format!("local-{percent:03}"));
        let state = if Recording::latest(&dir).is_ok() {
            "already recorded"
        } else {
            let far = far_memory_settings(local_mb, max_mb, args.policy, 1, false)?;
            record_into(&dir, &target, Some(far), &stop)?;
            "recorded"
        };
        if stop.load(std::sync::atomic::Ordering::Relaxed) > 0 {
            bail!("interrupted; run the same command again to resume");
        }
        let (faults, fetches, locations) = summarize(&dir)?;
        eprintln!(
            "fltrace sweep: [{}/{}] {percent:>3}% = {local_mb} MB local: {faults} faults, {locations} locations cover 95% ({state})",
            i + 1,
            percents.len()
        );
        let _ = writeln!(
            csv,
            "{percent},{local_mb},{max_mb},{faults},{fetches},{locations}"
        );
        points.push(SweepPoint {
            local_percent: f64::from(*percent),
            faults,
            locations_95: locations as u64,
        });
    }
    let csv_path = args.dir.join("sweep.csv");
    let mut file = fltrace_trace::files::create(&csv_path)?;
    file.write_all(csv.as_bytes())
        .with_context(|| format!("writing {}", csv_path.display()))?;
    let plot_path = args.dir.join("sweep.svg");
    let command = args
        .command
        .iter()
        .map(|a| a.to_string_lossy())
        .collect::<Vec<_>>()
        .join(" ");
    let mut plot = std::io::BufWriter::new(fltrace_trace::files::create(&plot_path)?);
    sweep_plot(
        &points,
        &format!("{command}: faults vs local memory"),
        &mut plot,
    )
    .map_err(anyhow::Error::from)
    .and_then(|()| Ok(plot.flush()?))
    .with_context(|| format!("writing {}", plot_path.display()))?;
    writeln!(
        std::io::stdout(),
        "{}\n{}",
        csv_path.display(),
        plot_path.display()
    )?;
    Ok(())
}

fn record_into(
    dir: &Path,
    target: &Target,
    far: Option<fltrace_capture::FarMemory>,
    stop: &AtomicUsize,
) -> anyhow::Result<()> {
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let mut options = Options::new(dir.to_owned());
    options.far_memory = far;
    let summary = fltrace_capture::record(target, &options, stop, |_| {})?;
    if let Some(error) = &summary.trace_error {
        bail!("writing the trace in {}: {error}", dir.display());
    }
    if summary.far_memory_exhausted {
        bail!(
            "the command ran out of far memory in {}; give a larger -M",
            dir.display()
        );
    }
    match (summary.exit_code, summary.signal) {
        (Some(0), _) => Ok(()),
        (Some(code), _) => bail!("the command exited with status {code} in {}", dir.display()),
        (None, Some(signal)) => bail!(
            "the command was killed by signal {signal} in {}",
            dir.display()
        ),
        (None, None) => Ok(()),
    }
}

/// The root process's peak memory in a recorded run.
fn peak_of(dir: &Path) -> Option<u64> {
    let recording = Recording::latest(dir).ok()?;
    let pid = recording.root_pid()?;
    fltrace_trace::stats::last_value(&fltrace_trace::files::stats(dir, pid), "memory_used")
        .ok()
        .flatten()
        .filter(|&v| v > 0)
}

/// Faults, fetches and the locations covering 95% of faults of a run.
fn summarize(dir: &Path) -> anyhow::Result<(u64, u64, usize)> {
    let loaded = load_counts(&Selection {
        dir: dir.to_owned(),
        pid: None,
        time: None,
        call_site: crate::cli::CallSiteArg::Program,
        include_tracer: false,
        archive: None,
    })?;
    let groups = group_fault_counts(loaded.counted(), GroupBy::Line);
    let fetches = groups.iter().map(|g| g.fetch).sum();
    Ok((loaded.total_faults(), fetches, coverage(&groups, 0.95)))
}
