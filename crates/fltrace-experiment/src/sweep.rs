//! `fltrace sweep`, the paper's method: measure a command's peak memory, record it at local
//! memory from one share of that peak down to another, and tabulate faults and the code
//! locations covering 95% of them at each share.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};

use fltrace_analyze::{
    AllocStacks, FaultCounts, FaultsHeld, FrameRules, GroupBy, LoadOptions, ResolvedStacks,
    coverage, group_fault_counts,
};
use fltrace_capture::{EvictionPolicy, FarMemory, Options, Target, find_preload_library};
use fltrace_render::{SweepPoint, sweep_plot};
use fltrace_trace::Recording;

use crate::Error;

/// The run that measures the peak, in the sweep's directory.
pub const BASELINE_DIR: &str = "baseline";
/// The table of the sweep, in its directory.
pub const CSV_FILE: &str = "sweep.csv";
/// The plot of the sweep, in its directory.
pub const PLOT_FILE: &str = "sweep.svg";

/// One run of a sweep.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SweepStep {
    /// Local memory, percent of the peak.
    pub percent: u32,
    /// Local memory, MiB.
    pub local_mb: u64,
}

impl SweepStep {
    /// The run's directory in the sweep's.
    pub fn dir(&self, sweep: &Path) -> PathBuf {
        sweep.join(format!("local-{:03}", self.percent))
    }
}

/// The runs of a sweep, largest local memory first.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SweepPlan {
    /// The command's peak memory, MiB (rounded up, at least 1).
    pub peak_mb: u64,
    /// Far memory of every run, MiB.
    pub max_mb: u64,
    /// The runs.
    pub steps: Vec<SweepStep>,
}

impl SweepPlan {
    /// Shares from `from` down to `to` percent of `peak_bytes` in steps of `step` percent;
    /// far memory `max_mb`, by default twice the peak and at least 256 MB more than it.
    pub fn new(
        peak_bytes: u64,
        from: u32,
        to: u32,
        step: u32,
        max_mb: Option<u64>,
    ) -> Result<SweepPlan, Error> {
        check_shares(from, to, step)?;
        let peak_mb = peak_bytes.div_ceil(1 << 20).max(1);
        let steps = (to..=from)
            .rev()
            .step_by(step as usize)
            .map(|percent| SweepStep {
                percent,
                local_mb: (peak_mb * u64::from(percent) / 100).max(1),
            })
            .collect();
        Ok(SweepPlan {
            peak_mb,
            max_mb: max_mb.unwrap_or((peak_mb * 2).max(peak_mb + 256)),
            steps,
        })
    }
}

/// Refuses a range of shares with no run in it, before anything is recorded.
pub fn check_shares(from: u32, to: u32, step: u32) -> Result<(), Error> {
    if to > from {
        return Err(Error::Invalid(format!(
            "--to ({to}%) must not exceed --from ({from}%)"
        )));
    }
    if step == 0 {
        return Err(Error::Invalid("--step must be at least 1%".into()));
    }
    Ok(())
}

/// The peak memory of the root process of the latest recording in `dir`, if it recorded one.
pub fn peak_of(dir: &Path) -> Option<u64> {
    let recording = Recording::latest(dir).ok()?;
    let pid = recording.root_pid()?;
    fltrace_trace::stats::last_value(&fltrace_trace::files::stats(dir, pid), "memory_used")
        .ok()
        .flatten()
        .filter(|&v| v > 0)
}

/// Records `target` into `dir` (made if need be), under far memory if given; a run whose
/// trace is incomplete, that ran out of far memory or that failed is an error.
pub fn record_run(
    dir: &Path,
    target: &Target,
    far: Option<FarMemory>,
    stop: &AtomicUsize,
) -> Result<(), Error> {
    std::fs::create_dir_all(dir).map_err(Error::io(dir))?;
    let mut options = Options::new(dir.to_owned());
    options.far_memory = far;
    let summary = fltrace_capture::record(target, &options, stop, |_| {})?;
    let failed = |what: String| Err(Error::RunFailed(format!("{what} in {}", dir.display())));
    if let Some(error) = &summary.trace_error {
        return Err(Error::RunFailed(format!(
            "writing the trace in {}: {error}",
            dir.display()
        )));
    }
    if summary.far_memory_exhausted {
        return Err(Error::RunFailed(format!(
            "the command ran out of far memory in {}; give a larger -M",
            dir.display()
        )));
    }
    match (summary.exit_code, summary.signal) {
        (Some(0), _) | (None, None) => Ok(()),
        (Some(code), _) => failed(format!("the command exited with status {code}")),
        (None, Some(signal)) => failed(format!("the command was killed by signal {signal}")),
    }
}

/// A sweep as asked for: `fltrace sweep`'s flags.
#[derive(Debug, Clone)]
pub struct Sweep {
    /// Where the runs, the table and the plot go; runs already there are not repeated.
    pub dir: PathBuf,
    /// The command and its arguments.
    pub command: Vec<OsString>,
    /// Largest local memory, percent of the peak.
    pub from: u32,
    /// Smallest local memory, percent of the peak.
    pub to: u32,
    /// Step between runs, percent.
    pub step: u32,
    /// Far memory per run, MiB (default: [`SweepPlan::new`]'s).
    pub max_mb: Option<u64>,
    /// The far-memory runtime's eviction policy.
    pub policy: EvictionPolicy,
}

/// What a sweep says as it goes.
#[derive(Debug)]
pub enum SweepEvent<'a> {
    /// No peak recorded yet: the baseline run measures it.
    MeasuringPeak,
    /// The runs are planned.
    Planned(&'a SweepPlan),
    /// One run recorded (or found recorded before) and counted.
    Ran {
        /// Its place in the plan, from 0.
        index: usize,
        /// The plan.
        plan: &'a SweepPlan,
        /// Its figures.
        row: &'a SweepRow,
        /// Whether it was recorded now (else it was there already).
        recorded: bool,
        /// What loading its recording noted (unfinished, archive used, frames skipped).
        notes: &'a [String],
    },
}

impl SweepEvent<'_> {
    /// The lines `fltrace sweep` says of it on stderr, whole (`fltrace sweep: ...`; notes of
    /// a loaded run as `fltrace: ...`).
    pub fn lines(&self) -> Vec<String> {
        match self {
            SweepEvent::MeasuringPeak => {
                vec!["fltrace sweep: measuring the peak memory of the command".to_owned()]
            }
            SweepEvent::Planned(plan) => vec![format!(
                "fltrace sweep: peak {} MiB; far memory -M {} MiB per run",
                plan.peak_mb, plan.max_mb
            )],
            SweepEvent::Ran {
                index,
                plan,
                row,
                recorded,
                notes,
            } => {
                let mut lines: Vec<String> = notes
                    .iter()
                    .map(|note| format!("fltrace: {note}"))
                    .collect();
                lines.push(format!(
                    "fltrace sweep: [{}/{}] {:>3}% = {} MiB local: {} faults, {} locations cover 95% ({})",
                    index + 1,
                    plan.steps.len(),
                    row.local_percent,
                    row.local_mb,
                    row.faults,
                    row.locations_95,
                    if *recorded {
                        "recorded"
                    } else {
                        "already recorded"
                    }
                ));
                lines
            }
        }
    }
}

/// The files a sweep wrote.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SweepFiles {
    /// The table, [`CSV_FILE`].
    pub csv: PathBuf,
    /// The plot, [`PLOT_FILE`].
    pub plot: PathBuf,
}

impl Sweep {
    /// Measures the command's peak (once: a baseline run already there is read), records
    /// the command at each share of it (runs already there are read), counts each run's
    /// faults and writes the table and the plot. `stop` (Ctrl-C) ends it between runs.
    pub fn run(
        &self,
        stop: &AtomicUsize,
        mut on_event: impl FnMut(SweepEvent<'_>),
    ) -> Result<SweepFiles, Error> {
        check_shares(self.from, self.to, self.step)?;
        std::fs::create_dir_all(&self.dir).map_err(|source| Error::CreateDir {
            path: self.dir.clone(),
            source,
        })?;
        let target = Target::Command(self.command.clone());
        let baseline = self.dir.join(BASELINE_DIR);
        let peak = match peak_of(&baseline) {
            Some(peak) => peak,
            None => {
                on_event(SweepEvent::MeasuringPeak);
                record_run(&baseline, &target, None, stop)?;
                peak_of(&baseline).ok_or_else(|| {
                    Error::RunFailed("the baseline run recorded no peak memory".into())
                })?
            }
        };
        let plan = SweepPlan::new(peak, self.from, self.to, self.step, self.max_mb)?;
        on_event(SweepEvent::Planned(&plan));
        let mut rows = Vec::new();
        for (index, step) in plan.steps.iter().enumerate() {
            let dir = step.dir(&self.dir);
            let recorded = Recording::latest(&dir).is_err();
            if recorded {
                let far = FarMemory::checked(
                    find_preload_library()?,
                    step.local_mb,
                    plan.max_mb,
                    self.policy,
                    1,
                    false,
                )?;
                record_run(&dir, &target, Some(far), stop)?;
            }
            if stop.load(Ordering::Relaxed) > 0 {
                return Err(Error::Interrupted);
            }
            let options = LoadOptions::new(dir, FrameRules::with_config(None, None)?)
                .holding(FaultsHeld::Counted, AllocStacks::Skip);
            let loaded = fltrace_analyze::load(&options)?;
            let row = SweepRow::of_counts(*step, plan.max_mb, loaded.counted());
            let notes: Vec<String> = loaded
                .notes
                .iter()
                .cloned()
                .chain(loaded.skipped_notes())
                .collect();
            on_event(SweepEvent::Ran {
                index,
                plan: &plan,
                row: &row,
                recorded,
                notes: &notes,
            });
            rows.push(row);
        }
        let files = SweepFiles {
            csv: self.dir.join(CSV_FILE),
            plot: self.dir.join(PLOT_FILE),
        };
        write_csv(&files.csv, &rows)?;
        write_plot(&files.plot, &self.command, &rows)?;
        Ok(files)
    }
}

/// One row of the sweep's table.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct SweepRow {
    /// Local memory, percent of the peak.
    pub local_percent: u32,
    /// Local memory, MiB.
    pub local_mb: u64,
    /// Far memory, MiB.
    pub max_mb: u64,
    /// Faults of the run.
    pub faults: u64,
    /// Of them, fetches of evicted pages.
    pub fetches: u64,
    /// The fewest source lines that cover 95% of the faults.
    pub locations_95: usize,
}

impl SweepRow {
    /// The figures of one run from its counted faults (`Loaded::counted` of the binary).
    pub fn of_counts<'a>(
        step: SweepStep,
        max_mb: u64,
        counted: impl IntoIterator<Item = (&'a FaultCounts, &'a ResolvedStacks)> + Clone,
    ) -> SweepRow {
        let faults = counted.clone().into_iter().map(|(c, _)| c.total()).sum();
        let groups = group_fault_counts(counted, GroupBy::Line);
        SweepRow {
            local_percent: step.percent,
            local_mb: step.local_mb,
            max_mb,
            faults,
            fetches: groups.iter().map(|g| g.fetch).sum(),
            locations_95: coverage(&groups, 0.95),
        }
    }
}

impl SweepRow {
    /// The run as a point of the sweep's plot.
    pub fn point(&self) -> SweepPoint {
        SweepPoint {
            local_percent: f64::from(self.local_percent),
            faults: self.faults,
            locations_95: self.locations_95 as u64,
        }
    }
}

/// The title of the sweep's plot: the command line as given, then what is plotted.
pub fn plot_title(command: &[OsString]) -> String {
    let command = command
        .iter()
        .map(|a| a.to_string_lossy())
        .collect::<Vec<_>>()
        .join(" ");
    format!("{command}: faults vs local memory")
}

/// Writes the sweep's plot of `command`'s runs (a new file, or one of the user's own).
pub fn write_plot(path: &Path, command: &[OsString], rows: &[SweepRow]) -> Result<(), Error> {
    let points: Vec<SweepPoint> = rows.iter().map(SweepRow::point).collect();
    let title = plot_title(command);
    fltrace_trace::files::write_with(path, |out| sweep_plot(&points, &title, out))?;
    Ok(())
}

/// Writes the sweep's table (a new file, or one of the user's own).
pub fn write_csv(path: &Path, rows: &[SweepRow]) -> Result<(), Error> {
    let file = fltrace_trace::files::create(path)?;
    let mut csv = csv::Writer::from_writer(std::io::BufWriter::new(file));
    let written = (|| {
        if rows.is_empty() {
            csv.write_record([
                "local_percent",
                "local_mb",
                "max_mb",
                "faults",
                "fetches",
                "locations_95",
            ])?;
        }
        for row in rows {
            csv.serialize(row)?;
        }
        csv.flush()?;
        Ok::<(), csv::Error>(())
    })();
    written.map_err(|e| Error::Io {
        path: path.to_owned(),
        source: e.into(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Shares from --from down to --to, each at least 1 MB; far memory twice the peak and
    /// at least 256 MB more than it; an empty range is refused.
    #[test]
    fn plan_steps_down_from_the_peak() {
        let plan = SweepPlan::new(17 * (1 << 20) + 1, 100, 25, 25, None).unwrap();
        assert_eq!((plan.peak_mb, plan.max_mb), (18, 274));
        assert_eq!(
            plan.steps,
            vec![
                SweepStep {
                    percent: 100,
                    local_mb: 18
                },
                SweepStep {
                    percent: 75,
                    local_mb: 13
                },
                SweepStep {
                    percent: 50,
                    local_mb: 9
                },
                SweepStep {
                    percent: 25,
                    local_mb: 4
                },
            ]
        );
        let plan = SweepPlan::new(1000 << 20, 10, 1, 5, Some(5000)).unwrap();
        assert_eq!(plan.max_mb, 5000);
        assert_eq!(
            plan.steps.iter().map(|s| s.percent).collect::<Vec<_>>(),
            vec![10, 5]
        );
        let tiny = SweepPlan::new(1, 5, 5, 1, None).unwrap();
        assert_eq!(
            (tiny.peak_mb, tiny.max_mb, tiny.steps[0].local_mb),
            (1, 257, 1)
        );
        assert_eq!(
            SweepPlan::new(1 << 20, 20, 30, 5, None)
                .unwrap_err()
                .to_string(),
            "--to (30%) must not exceed --from (20%)"
        );
        assert_eq!(
            SweepStep {
                percent: 5,
                local_mb: 1
            }
            .dir(Path::new("s")),
            Path::new("s/local-005")
        );
    }

    /// The table has the header and columns it always had.
    #[test]
    fn plot_is_titled_with_the_command_and_has_a_point_per_run() {
        use std::os::unix::ffi::OsStringExt;
        let row = |local_percent, faults, locations_95| SweepRow {
            local_percent,
            local_mb: 4,
            max_mb: 274,
            faults,
            fetches: 0,
            locations_95,
        };
        assert_eq!(
            row(25, 12382, 2).point(),
            SweepPoint {
                local_percent: 25.0,
                faults: 12382,
                locations_95: 2
            }
        );
        let command: Vec<OsString> = vec![
            "./scan".into(),
            "16".into(),
            "a b".into(),
            OsString::from_vec(b"x\xff".to_vec()),
        ];
        assert_eq!(
            plot_title(&command),
            "./scan 16 a b x\u{fffd}: faults vs local memory"
        );
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(PLOT_FILE);
        write_plot(&path, &command[..2], &[row(100, 10, 1), row(50, 900, 3)]).unwrap();
        let svg = std::fs::read_to_string(&path).unwrap();
        assert!(svg.starts_with("<svg"), "{}", &svg[..40]);
        assert!(svg.contains("./scan 16: faults vs local memory"));
        // No runs, nothing drawn: an error naming the file.
        let error = write_plot(&path, &command[..2], &[]).unwrap_err();
        assert_eq!(
            fltrace_trace::error_chain(&error),
            format!("writing {}: no faults to draw", path.display())
        );
    }

    #[test]
    fn table_is_written_with_its_header() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(CSV_FILE);
        let row = SweepRow {
            local_percent: 25,
            local_mb: 4,
            max_mb: 274,
            faults: 12382,
            fetches: 8194,
            locations_95: 2,
        };
        write_csv(&path, &[row]).unwrap();
        assert_eq!(
            std::fs::read_to_string(&path).unwrap(),
            "local_percent,local_mb,max_mb,faults,fetches,locations_95\n25,4,274,12382,8194,2\n"
        );
        write_csv(&path, &[]).unwrap();
        assert_eq!(
            std::fs::read_to_string(&path).unwrap(),
            "local_percent,local_mb,max_mb,faults,fetches,locations_95\n"
        );
    }

    /// A run's line says its place, share, figures and whether it was recorded now, after
    /// the notes of loading it.
    #[test]
    fn a_run_is_said_with_its_place_and_figures() {
        let plan = SweepPlan::new(100 << 20, 100, 50, 25, None).unwrap();
        let row = SweepRow {
            local_percent: 75,
            local_mb: 75,
            max_mb: plan.max_mb,
            faults: 1234,
            fetches: 10,
            locations_95: 3,
        };
        let notes = ["unfinished".to_owned()];
        let event = SweepEvent::Ran {
            index: 1,
            plan: &plan,
            row: &row,
            recorded: false,
            notes: &notes,
        };
        assert_eq!(
            event.lines(),
            [
                "fltrace: unfinished",
                "fltrace sweep: [2/3]  75% = 75 MiB local: 1234 faults, 3 locations cover 95% (already recorded)",
            ]
        );
        assert_eq!(
            SweepEvent::Planned(&plan).lines(),
            [format!(
                "fltrace sweep: peak 100 MiB; far memory -M {} MiB per run",
                plan.max_mb
            )]
        );
    }
}
