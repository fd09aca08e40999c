//! Experiments rather than single recordings, as Heimdallr's `runs.sh` and analysis scripts
//! do: every workload under every configuration, repeated, in a shuffled order, each run in a
//! directory of its own (`workload=W/config=C/rep=N/`, hive-style partitions that DuckDB and
//! Spark read as one table), resumable; then a catalog of the series and statistics of its
//! run times.
//!
//! Recording stays in `fltrace-capture`: a run of a series' traced configuration is
//! `fltrace record` started as a child process, so that each run's fltrace is measured as a
//! whole; the sweep ([`sweep`]) records its steps in process through `fltrace_capture::record`,
//! since a step's figure is its fault count, not its time.

pub mod catalog;
mod config;
mod error;
pub mod invocation;
pub mod listing;
pub mod numa;
pub mod page;
mod series;
pub mod shuffle;
pub mod stats;
pub mod sweep;

pub use config::{
    Config, LocalMemory, Mode, ParseError, defaults, from_file, parse, preload_needed,
};
pub use error::Error;
pub use series::{
    Event, OLD_SERIES_FILE, Outcome, PlannedRun, RUN_FILE, RunRecord, SERIES_FILE, STDERR_FILE,
    STDOUT_FILE, SeriesFile, SeriesOptions, Workload, plan, run_dir, run_series, workloads,
};
