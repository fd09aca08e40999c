//! The catalog of a series: one SQLite file with a row per run and, for the runs analysed in
//! detail, the call sites of their faults; the Parquet traces stay in the run directories and
//! the catalog points to them.

use std::path::{Path, PathBuf};

use rusqlite::{Connection, OpenFlags, params};
use serde::Serialize;

use fltrace_analyze::{FaultCounts, GroupBy, Symbolizer, group_fault_counts};
use fltrace_trace::{Recording, files};

use crate::series::{RunRecord, SeriesFile, run_dir};
use crate::stats::{Ratio, SampleStats, ratio_of_means, summarize};
use crate::{Error, Mode};

const SCHEMA: &str = "
CREATE TABLE series (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE runs (
    id INTEGER PRIMARY KEY,
    workload TEXT NOT NULL,
    config TEXT NOT NULL,
    mode TEXT NOT NULL,
    rep INTEGER NOT NULL,
    command TEXT NOT NULL,
    start_unix_ns INTEGER NOT NULL,
    wall_s REAL NOT NULL,
    user_s REAL NOT NULL,
    sys_s REAL NOT NULL,
    max_rss_kb INTEGER NOT NULL,
    exit_code INTEGER,
    signal INTEGER,
    status TEXT NOT NULL,
    error TEXT,
    faults INTEGER,
    allocs INTEGER,
    samples INTEGER,
    local_mb INTEGER,
    max_mb INTEGER,
    detailed INTEGER NOT NULL,
    dir TEXT NOT NULL,
    UNIQUE (workload, config, rep)
);
CREATE TABLE sites (
    run_id INTEGER NOT NULL REFERENCES runs(id),
    rank INTEGER NOT NULL,
    function TEXT NOT NULL,
    file TEXT NOT NULL,
    line INTEGER NOT NULL,
    lib TEXT NOT NULL,
    count INTEGER NOT NULL,
    reads INTEGER NOT NULL,
    writes INTEGER NOT NULL,
    wrprotect INTEGER NOT NULL,
    first_touches INTEGER NOT NULL,
    fetches INTEGER NOT NULL
);
CREATE TABLE traces (
    run_id INTEGER NOT NULL REFERENCES runs(id),
    pid INTEGER NOT NULL,
    kind TEXT NOT NULL,
    path TEXT NOT NULL
);
";

/// The trace tables a run may have, by the kind in their file names.
const TRACE_KINDS: [&str; 8] = [
    "faults",
    "stacks",
    "mmaps",
    "allocs",
    "allocstacks",
    "allocsums",
    "access",
    "accessstacks",
];

/// What building a catalog found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Built {
    /// Runs catalogued.
    pub runs: usize,
    /// Of those, runs whose call sites were analysed.
    pub detailed: usize,
    /// Call-site rows.
    pub sites: usize,
}

impl From<rusqlite::Error> for Error {
    fn from(source: rusqlite::Error) -> Error {
        Error::Sqlite(source)
    }
}

/// Catalogs the series in `dir` into a new SQLite file `output` (never overwritten). The first
/// repetition of each (workload, configuration), or every run with `all`, is analysed in
/// detail: its faults grouped by call site (`file:line`), as `fltrace report` shows them.
pub fn build(dir: &Path, output: &Path, all: bool) -> Result<Built, Error> {
    // The catalog points into the series: absolute paths, to be read from anywhere.
    let dir = &dir.canonicalize().map_err(Error::io(dir))?;
    let series = SeriesFile::read(dir)?.ok_or_else(|| {
        Error::Invalid(format!(
            "{} is not a series of `fltrace runs` (no {})",
            dir.display(),
            crate::SERIES_FILE
        ))
    })?;
    // Created here, refusing links and existing files; SQLite then opens what is there.
    files::create_new(output).map_err(|e| match e {
        fltrace_trace::Error::Io { source, .. }
            if source.kind() == std::io::ErrorKind::AlreadyExists =>
        {
            Error::Invalid(format!(
                "{} already exists: remove it or give another -o",
                output.display()
            ))
        }
        other => other.into(),
    })?;
    // NOFOLLOW: a link swapped in since is refused, not followed.
    let mut db = Connection::open_with_flags(
        output,
        OpenFlags::SQLITE_OPEN_READ_WRITE
            | OpenFlags::SQLITE_OPEN_NO_MUTEX
            | OpenFlags::SQLITE_OPEN_NOFOLLOW,
    )?;
    db.execute_batch(SCHEMA)?;
    let tx = db.transaction()?;
    for (key, value) in [
        ("dir", dir.to_string_lossy().into_owned()),
        ("seed", series.seed.to_string()),
        ("reps", series.reps.to_string()),
        (
            "configs",
            series
                .configs
                .iter()
                .map(|c| c.name.as_str())
                .collect::<Vec<_>>()
                .join(","),
        ),
    ] {
        tx.execute("INSERT INTO series VALUES (?1, ?2)", params![key, value])?;
    }
    let mut built = Built {
        runs: 0,
        detailed: 0,
        sites: 0,
    };
    let mut id = 0i64;
    for config in &series.configs {
        for workload in &series.workloads {
            for rep in 1..=series.reps {
                let run_dir = run_dir(dir, &workload.name, &config.name, rep);
                let Ok(run) = RunRecord::read(&run_dir) else {
                    continue;
                };
                id += 1;
                let recording = Recording::latest(&run_dir).ok();
                let counts = recording.as_ref().map(trace_counts).transpose()?;
                let detailed = recording.is_some() && (all || rep == 1);
                tx.execute(
                    "INSERT INTO runs VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12,
                     ?13, ?14, ?15, ?16, ?17, ?18, ?19, ?20, ?21, ?22)",
                    params![
                        id,
                        run.workload,
                        run.config,
                        mode_name(run.mode),
                        run.rep,
                        shell_words::join(&run.command),
                        run.start_unix_ns as i64,
                        run.wall_s,
                        run.user_s,
                        run.sys_s,
                        run.max_rss_kb as i64,
                        run.exit_code,
                        run.signal,
                        run.status(),
                        run.error,
                        counts.map(|c| c.faults as i64),
                        counts.and_then(|c| c.allocs).map(|n| n as i64),
                        counts.and_then(|c| c.samples).map(|n| n as i64),
                        run.local_mb.map(|n| n as i64),
                        run.max_mb.map(|n| n as i64),
                        detailed,
                        run_dir.to_string_lossy(),
                    ],
                )?;
                built.runs += 1;
                if let Some(recording) = &recording {
                    for &pid in recording.pids() {
                        for kind in TRACE_KINDS {
                            let path = files::path(&run_dir, kind, pid, "parquet");
                            if path.is_file() {
                                tx.execute(
                                    "INSERT INTO traces VALUES (?1, ?2, ?3, ?4)",
                                    params![id, pid, kind, path.to_string_lossy()],
                                )?;
                            }
                        }
                    }
                    if detailed {
                        built.detailed += 1;
                        built.sites += insert_sites(&tx, id, recording)?;
                    }
                }
            }
        }
    }
    tx.commit()?;
    Ok(built)
}

fn mode_name(mode: Mode) -> &'static str {
    match mode {
        Mode::Dry => "dry",
        Mode::Record => "record",
        Mode::Wss => "wss",
    }
}

#[derive(Debug, Clone, Copy)]
struct Counts {
    faults: u64,
    allocs: Option<u64>,
    samples: Option<u64>,
}

/// Row counts of a recording's tables, from the Parquet footers (nothing else is read).
fn trace_counts(recording: &Recording) -> Result<Counts, Error> {
    let dir = &recording.dir;
    let mut counts = Counts {
        faults: 0,
        allocs: None,
        samples: None,
    };
    for &pid in recording.pids() {
        counts.faults += parquet_rows(&files::faults(dir, pid))?.unwrap_or(0);
        if let Some(n) = parquet_rows(&files::allocs(dir, pid))? {
            *counts.allocs.get_or_insert(0) += n;
        }
        if let Some(n) = parquet_rows(&files::access(dir, pid))? {
            *counts.samples.get_or_insert(0) += n;
        }
    }
    Ok(counts)
}

fn parquet_rows(path: &Path) -> Result<Option<u64>, Error> {
    use parquet::file::reader::{FileReader, SerializedFileReader};
    let file = match std::fs::File::open(path) {
        Ok(file) => file,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(Error::io(path)(e)),
    };
    let reader = SerializedFileReader::new(file).map_err(|e| {
        Error::Invalid(format!(
            "{}: not a readable Parquet file: {e}",
            path.display()
        ))
    })?;
    Ok(Some(
        reader.metadata().file_metadata().num_rows().max(0) as u64
    ))
}

/// The call sites of a recording's faults, all processes together, largest first.
fn insert_sites(
    tx: &rusqlite::Transaction<'_>,
    id: i64,
    recording: &Recording,
) -> Result<usize, Error> {
    let mut symbolizer = Symbolizer::new();
    let mut processes = Vec::new();
    for &pid in recording.pids() {
        // The faults stream into per-stack counts: memory follows the stacks, not the faults.
        let trace = recording.load_without_faults(pid)?;
        let counts = FaultCounts::stream(recording.fault_keys(pid)?, None)?;
        processes.push((counts, symbolizer.resolve_stacks(&trace)));
    }
    let groups = group_fault_counts(processes.iter().map(|(c, s)| (c, s)), GroupBy::Line);
    let mut insert =
        tx.prepare("INSERT INTO sites VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12)")?;
    for (rank, group) in groups.iter().enumerate() {
        let l = &group.key.location;
        insert.execute(params![
            id,
            rank as i64 + 1,
            &*l.function,
            &*l.file,
            l.line,
            &*l.lib,
            group.count as i64,
            group.kinds[0] as i64,
            group.kinds[1] as i64,
            group.kinds[2] as i64,
            group.zero as i64,
            group.fetch as i64,
        ])?;
    }
    Ok(groups.len())
}

/// A run as the catalog has it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CatalogRun {
    /// The run's id in the catalog.
    pub id: i64,
    /// Workload name.
    pub workload: String,
    /// Configuration name.
    pub config: String,
    /// `dry`, `record` or `wss`.
    pub mode: String,
    /// Repetition, from 1.
    pub rep: u32,
    /// The workload's command line.
    pub command: String,
    /// Start, ns since the Unix epoch.
    pub start_unix_ns: i64,
    /// Wall-clock seconds.
    pub wall_s: f64,
    /// User CPU seconds.
    pub user_s: f64,
    /// System CPU seconds.
    pub sys_s: f64,
    /// Peak resident set, KiB.
    pub max_rss_kb: i64,
    /// `ok`, `exit N`, `signal N` or `error`.
    pub status: String,
    /// Faults recorded (traced runs).
    pub faults: Option<i64>,
    /// Allocation calls recorded (`--allocs`).
    pub allocs: Option<i64>,
    /// Access samples recorded.
    pub samples: Option<i64>,
    /// The run's directory.
    pub dir: PathBuf,
}

impl CatalogRun {
    /// The title of its page: id, workload, configuration, repetition and command.
    pub fn page_title(&self) -> String {
        format!(
            "run {}: {} config={} rep={} ({})",
            self.id, self.workload, self.config, self.rep, self.command
        )
    }
}

/// An open catalog.
pub struct Catalog {
    db: Connection,
}

impl Catalog {
    /// Opens a catalog read-only.
    pub fn open(path: &Path) -> Result<Catalog, Error> {
        if !path.is_file() {
            return Err(Error::Invalid(format!(
                "no catalog {} (make one with `fltrace analyze DIR -o {}`)",
                path.display(),
                path.display()
            )));
        }
        let db = Connection::open_with_flags(path, OpenFlags::SQLITE_OPEN_READ_ONLY)?;
        Ok(Catalog { db })
    }

    /// Every run, by id.
    pub fn runs(&self) -> Result<Vec<CatalogRun>, Error> {
        let mut query = self.db.prepare(
            "SELECT id, workload, config, mode, rep, command, start_unix_ns, wall_s, user_s,
                    sys_s, max_rss_kb, status, faults, allocs, samples, dir
             FROM runs ORDER BY id",
        )?;
        let rows = query.query_map([], |r| {
            Ok(CatalogRun {
                id: r.get(0)?,
                workload: r.get(1)?,
                config: r.get(2)?,
                mode: r.get(3)?,
                rep: r.get(4)?,
                command: r.get(5)?,
                start_unix_ns: r.get(6)?,
                wall_s: r.get(7)?,
                user_s: r.get(8)?,
                sys_s: r.get(9)?,
                max_rss_kb: r.get(10)?,
                status: r.get(11)?,
                faults: r.get(12)?,
                allocs: r.get(13)?,
                samples: r.get(14)?,
                dir: PathBuf::from(r.get::<_, String>(15)?),
            })
        })?;
        Ok(rows.collect::<Result<Vec<_>, _>>()?)
    }

    /// The run with catalog id `id`.
    pub fn run(&self, id: i64) -> Result<CatalogRun, Error> {
        self.runs()?
            .into_iter()
            .find(|r| r.id == id)
            .ok_or_else(|| Error::Invalid(format!("the catalog has no run {id} (see --list)")))
    }

    /// The configurations in series order.
    pub fn config_order(&self) -> Result<Vec<String>, Error> {
        let configs: String =
            self.db
                .query_row("SELECT value FROM series WHERE key = 'configs'", [], |r| {
                    r.get(0)
                })?;
        Ok(configs.split(',').map(str::to_owned).collect())
    }

    /// Statistics per (workload, configuration), in series order.
    pub fn stats(&self) -> Result<Vec<StatRow>, Error> {
        Ok(statistics(&self.runs()?, &self.config_order()?))
    }
}

/// Statistics of one workload under one configuration, over its successful runs.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct StatRow {
    /// Workload name.
    pub workload: String,
    /// Configuration name.
    pub config: String,
    /// Successful runs.
    pub runs: usize,
    /// Runs that failed (not counted in the figures).
    pub failed: usize,
    /// Wall-clock seconds over the successful runs.
    pub time: Option<SampleStats>,
    /// Mean time against the mean time of the same workload under the (first) dry
    /// configuration, with a 95% Welch/delta-method interval.
    pub overhead: Option<Ratio>,
    /// Mean faults recorded per run.
    pub faults: Option<f64>,
    /// Mean allocation calls recorded per run.
    pub allocs: Option<f64>,
}

/// Groups runs by (workload, configuration) and computes their statistics; the configurations
/// come in `config_order`, the workloads in order of first appearance.
pub fn statistics(runs: &[CatalogRun], config_order: &[String]) -> Vec<StatRow> {
    let mut workloads: Vec<&str> = Vec::new();
    for r in runs {
        if !workloads.contains(&r.workload.as_str()) {
            workloads.push(&r.workload);
        }
    }
    let dry = runs
        .iter()
        .filter(|r| r.mode == "dry")
        .min_by_key(|r| config_order.iter().position(|c| *c == r.config))
        .map(|r| r.config.clone());
    let times = |w: &str, c: &str| -> Vec<f64> {
        runs.iter()
            .filter(|r| r.workload == w && r.config == c && r.status == "ok")
            .map(|r| r.wall_s)
            .collect()
    };
    let mean = |values: Vec<i64>| -> Option<f64> {
        (!values.is_empty()).then(|| values.iter().sum::<i64>() as f64 / values.len() as f64)
    };
    let mut out = Vec::new();
    for config in config_order {
        for &workload in &workloads {
            let mine: Vec<&CatalogRun> = runs
                .iter()
                .filter(|r| r.workload == workload && r.config == *config)
                .collect();
            if mine.is_empty() {
                continue;
            }
            let ok: Vec<&&CatalogRun> = mine.iter().filter(|r| r.status == "ok").collect();
            let time = summarize(&times(workload, config));
            let base = dry.as_deref().and_then(|d| summarize(&times(workload, d)));
            let overhead = match (&time, &base) {
                (Some(t), Some(b)) => ratio_of_means(t, b, 0.95),
                _ => None,
            };
            out.push(StatRow {
                workload: workload.to_owned(),
                config: config.clone(),
                runs: ok.len(),
                failed: mine.len() - ok.len(),
                time,
                overhead,
                faults: mean(ok.iter().filter_map(|r| r.faults).collect()),
                allocs: mean(ok.iter().filter_map(|r| r.allocs).collect()),
            });
        }
    }
    out
}
