//! `fltrace runs`: a series of runs (workloads x configurations x repetitions), and
//! `fltrace analyze`: its catalog.

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Context, bail};
use clap::Args;

use fltrace_experiment::catalog::Catalog;
use fltrace_experiment::{Event, SeriesOptions, listing};

use crate::cli::Format;
use fltrace_capture::interrupt_counter;

#[derive(Debug, Args)]
pub struct RunsArgs {
    /// The series' directory (runs go to DIR/workload=W/config=C/rep=N/).
    #[arg(short = 'o', long = "output", value_name = "DIR")]
    pub output: Option<PathBuf>,
    /// Repetitions of each workload under each configuration.
    #[arg(short = 'n', long = "reps", value_name = "N", default_value_t = 3, value_parser = clap::value_parser!(u32).range(1..=10000))]
    pub reps: u32,
    /// TOML file of configurations (default: `dry`, untraced, and `record`).
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// Seed of the shuffled order (default: a fresh one, recorded in DIR/series.json).
    #[arg(long, value_name = "N")]
    pub seed: Option<u64>,
    /// With a catalog: list its runs.
    #[arg(long, requires = "catalog", conflicts_with_all = ["stat", "commands"])]
    pub list: bool,
    /// With a catalog: run time statistics per workload and configuration, with the overhead
    /// against the dry configuration.
    #[arg(long, requires = "catalog", conflicts_with = "commands")]
    pub stat: bool,
    /// With a catalog: write a self-contained HTML page plotting run ID's faults (or access
    /// samples) by time and address, with its allocations (to -o FILE, default run-ID.html).
    #[arg(long, value_name = "ID", requires = "catalog", conflicts_with_all = ["list", "stat", "commands"])]
    pub run: Option<i64>,
    /// Output format of --list and --stat.
    #[arg(long, value_enum, default_value = "table")]
    pub format: crate::cli::Format,
    /// The catalog made by `fltrace analyze` (for --list and --stat).
    #[arg(value_name = "CATALOG")]
    pub catalog: Option<PathBuf>,
    /// The workloads, one command line each, split into words without a shell:
    /// `-- './prog a' './prog b'`.
    #[arg(last = true, value_name = "COMMAND")]
    pub commands: Vec<String>,
}

#[derive(Debug, Args)]
pub struct AnalyzeArgs {
    /// The series' directory (made by `fltrace runs -o DIR`).
    #[arg(value_name = "DIR")]
    pub dir: PathBuf,
    /// The catalog to write (a new file).
    #[arg(
        short = 'o',
        long = "output",
        value_name = "FILE",
        default_value = "runs.sqlite"
    )]
    pub output: PathBuf,
    /// Analyse the call sites of every repetition, not only the first of each
    /// workload and configuration.
    #[arg(long)]
    pub all: bool,
}

/// `fltrace analyze DIR -o runs.sqlite`.
pub fn analyze(args: AnalyzeArgs) -> anyhow::Result<()> {
    let built = fltrace_experiment::catalog::build(&args.dir, &args.output, args.all)
        .with_context(|| format!("cataloguing {}", args.dir.display()))?;
    eprintln!(
        "fltrace analyze: {} runs, {} analysed in detail ({} call sites) in {}",
        built.runs,
        built.detailed,
        built.sites,
        args.output.display()
    );
    Ok(())
}

pub fn run(args: RunsArgs) -> anyhow::Result<ExitCode> {
    if args.list || args.stat || args.run.is_some() {
        let Some(path) = &args.catalog else {
            bail!("--list, --stat and --run need a catalog: fltrace runs --stat runs.sqlite");
        };
        let catalog = Catalog::open(path)?;
        if let Some(id) = args.run {
            let run = catalog.run(id)?;
            let title = format!(
                "run {id}: {} config={} rep={} ({})",
                run.workload, run.config, run.rep, run.command
            );
            let page = fltrace_experiment::page::run_page(&run.dir, &title)
                .with_context(|| format!("run {id} in {}", run.dir.display()))?;
            let output = args
                .output
                .clone()
                .unwrap_or_else(|| PathBuf::from(format!("run-{id}.html")));
            let mut file = fltrace_trace::files::create_new(&output)
                .with_context(|| format!("creating {}", output.display()))?;
            file.write_all(page.as_bytes())
                .with_context(|| format!("writing {}", output.display()))?;
            writeln!(std::io::stdout(), "{}", output.display())?;
        } else if args.list {
            list(&catalog, args.format)?;
        } else {
            stat(&catalog, args.format)?;
        }
        return Ok(ExitCode::SUCCESS);
    }
    if args.catalog.is_some() {
        bail!("a catalog was given without --list or --stat; workloads go after `--`");
    }
    let Some(dir) = args.output.clone() else {
        bail!("give the series' directory: fltrace runs -o DIR [-n REPS] -- 'CMD 1' 'CMD 2' ...");
    };
    if args.commands.is_empty() {
        bail!("no workloads given: fltrace runs -o DIR -- 'CMD 1' 'CMD 2' ...");
    }
    let configs = match &args.config {
        Some(path) => fltrace_experiment::from_file(path)?,
        None => fltrace_experiment::defaults(),
    };
    let workloads = fltrace_experiment::workloads(&args.commands)?;
    // Record-mode configurations leave the library to `fltrace record`.
    let configs_need_preload = configs
        .iter()
        .any(fltrace_experiment::Config::preloads_itself);
    let options = SeriesOptions {
        dir: dir.clone(),
        workloads,
        configs,
        reps: args.reps,
        seed: args.seed,
        fltrace: std::env::current_exe().context("locating the fltrace binary")?,
        preload: if configs_need_preload {
            Some(fltrace_capture::find_preload_library()?)
        } else {
            None
        },
    };
    let stop = interrupt_counter()?;
    let outcome = fltrace_experiment::run_series(&options, &stop, |event| match event {
        Event::Start { seed, total, done } => {
            if done > 0 {
                eprintln!(
                    "fltrace runs: {done} of {total} runs already done, resuming (seed {seed})"
                );
            } else {
                eprintln!(
                    "fltrace runs: {total} runs (seed {seed}) in {}",
                    dir.display()
                );
            }
        }
        Event::Ran {
            index,
            total,
            run,
            left,
        } => eprintln!(
            "fltrace runs: [{index}/{total}] {} config={} rep={}: {:.2} s, {}{}; about {} left",
            run.workload,
            run.config,
            run.rep,
            run.wall_s,
            run.status(),
            run.error
                .as_deref()
                .map(|e| format!(" ({e})"))
                .unwrap_or_default(),
            listing::human_duration(left)
        ),
    })?;
    if outcome.interrupted {
        eprintln!(
            "fltrace runs: interrupted after {} of the runs; run the same command again to resume",
            outcome.done
        );
        return Ok(ExitCode::from(130));
    }
    eprintln!(
        "fltrace runs: {} runs done, {} failed; catalog them with `fltrace analyze {}`",
        outcome.done,
        outcome.failed,
        dir.display()
    );
    Ok(ExitCode::SUCCESS)
}

fn list(catalog: &Catalog, format: Format) -> anyhow::Result<()> {
    let runs = catalog.runs()?;
    let mut out = std::io::stdout().lock();
    match format {
        Format::Json => listing::write_runs_json(&mut out, &runs)?,
        Format::Csv => listing::write_runs_csv(&mut out, &runs)?,
        Format::Table => listing::write_runs_table(&mut out, &runs)?,
    }
    Ok(())
}

fn stat(catalog: &Catalog, format: Format) -> anyhow::Result<()> {
    let rows = catalog.stats()?;
    let mut out = std::io::stdout().lock();
    match format {
        Format::Json => listing::write_stats_json(&mut out, &rows)?,
        Format::Csv => listing::write_stats_csv(&mut out, &rows)?,
        Format::Table => listing::write_stats_table(&mut out, &rows)?,
    }
    Ok(())
}
