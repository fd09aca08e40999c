//! `fltrace runs`: a series of runs (workloads x configurations x repetitions), and
//! `fltrace analyze`: its catalog.

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use clap::Args;

use fltrace_experiment::catalog::Catalog;
use fltrace_experiment::invocation::{RunsAction, RunsRequest};
use fltrace_experiment::{SeriesOptions, listing, page};

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
    /// Seed of the shuffled order (default: a fresh one, recorded in DIR/_series.json).
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
    pub format: fltrace_render::TableFormat,
    /// Tables print every name and column whole, however wide (they fit the terminal's
    /// width, `COLUMNS`, by default).
    #[arg(long)]
    pub wide: bool,
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

/// The width tables fit: the terminal's, or none with `--wide`.
fn width(wide: bool) -> Option<usize> {
    (!wide).then(fltrace_render::table::terminal_width)
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
    let request = RunsRequest {
        catalog: args.catalog.clone(),
        list: args.list,
        stat: args.stat,
        run: args.run,
        output: args.output.clone(),
        commands: args.commands.clone(),
    };
    let (dir, commands) = match request.action()? {
        RunsAction::Page {
            catalog,
            id,
            output,
        } => {
            let run = Catalog::open(&catalog)?.run(id)?;
            page::write_new(&output, &page::page_of_run(&run)?)?;
            writeln!(std::io::stdout(), "{}", output.display())?;
            return Ok(ExitCode::SUCCESS);
        }
        RunsAction::List(catalog) => {
            let runs = Catalog::open(&catalog)?.runs()?;
            listing::write_runs(
                &mut std::io::stdout().lock(),
                &runs,
                args.format,
                width(args.wide),
            )?;
            return Ok(ExitCode::SUCCESS);
        }
        RunsAction::Stat(catalog) => {
            let rows = Catalog::open(&catalog)?.stats()?;
            listing::write_stats(
                &mut std::io::stdout().lock(),
                &rows,
                args.format,
                width(args.wide),
            )?;
            return Ok(ExitCode::SUCCESS);
        }
        RunsAction::Series { dir, commands } => (dir, commands),
    };
    let fltrace = std::env::current_exe().context("locating the fltrace binary")?;
    let options = SeriesOptions::new(
        dir.clone(),
        &commands,
        args.config.as_deref(),
        args.reps,
        args.seed,
        fltrace,
    )?;
    let stop = interrupt_counter()?;
    let outcome = fltrace_experiment::run_series(&options, &stop, |event| {
        eprintln!("fltrace runs: {}", event.line(&dir));
    })?;
    eprintln!("fltrace runs: {}", outcome.line(&dir));
    Ok(ExitCode::from(outcome.status()))
}
