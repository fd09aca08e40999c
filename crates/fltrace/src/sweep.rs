//! `fltrace sweep`: the paper's method in one command. Measure the command's peak memory,
//! record it at local memory from `--from` down to `--to` percent of that peak, and tabulate
//! and plot faults and the code locations covering 95% of them.

use std::io::Write as _;
use std::sync::atomic::Ordering;

use anyhow::{Context, bail};

use fltrace_capture::{FarMemory, Target, find_preload_library, interrupt_counter};
use fltrace_experiment::sweep::{self, SweepPlan, SweepRow};
use fltrace_trace::Recording;

use crate::cli::{Selection, SweepArgs};
use crate::load::load_counts;

pub fn run(args: SweepArgs) -> anyhow::Result<()> {
    sweep::check_shares(args.from, args.to, args.step)?;
    std::fs::create_dir_all(&args.dir)
        .with_context(|| format!("creating {}", args.dir.display()))?;
    let stop = interrupt_counter()?;
    let target = Target::Command(args.command.clone());

    let baseline = args.dir.join(sweep::BASELINE_DIR);
    let peak = match sweep::peak_of(&baseline) {
        Some(peak) => peak,
        None => {
            eprintln!("fltrace sweep: measuring the peak memory of the command");
            sweep::record_run(&baseline, &target, None, &stop)?;
            sweep::peak_of(&baseline).context("the baseline run recorded no peak memory")?
        }
    };
    let plan = SweepPlan::new(peak, args.from, args.to, args.step, args.max_mb)?;
    eprintln!(
        "fltrace sweep: peak {} MB; far memory -M {} MB per run",
        plan.peak_mb, plan.max_mb
    );

    let mut rows = Vec::new();
    for (i, step) in plan.steps.iter().enumerate() {
        let dir = step.dir(&args.dir);
        let state = if Recording::latest(&dir).is_ok() {
            "already recorded"
        } else {
            let far = FarMemory::checked(
                find_preload_library()?,
                step.local_mb,
                plan.max_mb,
                args.policy.name(),
                1,
                false,
            )?;
            sweep::record_run(&dir, &target, Some(far), &stop)?;
            "recorded"
        };
        if stop.load(Ordering::Relaxed) > 0 {
            bail!("interrupted; run the same command again to resume");
        }
        let loaded = load_counts(&Selection {
            dir: dir.clone(),
            pid: None,
            time: None,
            tid: Vec::new(),
            comm: Vec::new(),
            call_site: crate::cli::CallSiteArg::Program,
            hide: None,
            focus: None,
            include_tracer: false,
            archive: None,
            salvage: false,
            named: None,
        })?;
        let row = SweepRow::of_counts(*step, plan.max_mb, loaded.counted());
        eprintln!(
            "fltrace sweep: [{}/{}] {:>3}% = {} MB local: {} faults, {} locations cover 95% ({state})",
            i + 1,
            plan.steps.len(),
            step.percent,
            step.local_mb,
            row.faults,
            row.locations_95
        );
        rows.push(row);
    }
    let csv_path = args.dir.join(sweep::CSV_FILE);
    sweep::write_csv(&csv_path, &rows)?;
    let plot_path = args.dir.join(sweep::PLOT_FILE);
    sweep::write_plot(&plot_path, &args.command, &rows)?;
    writeln!(
        std::io::stdout(),
        "{}\n{}",
        csv_path.display(),
        plot_path.display()
    )?;
    Ok(())
}
