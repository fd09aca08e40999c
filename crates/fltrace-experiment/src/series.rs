//! Running a series: every workload under every configuration, a number of times, each run
//! in its own directory `workload=W/config=C/rep=N/` with a `run.json` saying how it went.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant, SystemTime};

use fltrace_runtime_abi::env;
use serde::{Deserialize, Serialize};

use fltrace_trace::files;

use crate::Error;
use crate::config::{Config, LocalMemory, Mode, check_name};
use crate::numa::Binding;
use crate::shuffle::Rng;

/// The file that marks a run as done: one JSON object on one line, as engines' JSON readers
/// read by default (Spark's reads no pretty-printed file), so that the runs of a series read
/// as one table. Its name has no leading `_`: Spark skips such files even when named.
pub const RUN_FILE: &str = "run.json";
/// The file describing the series: workloads, configurations, repetitions and seed. The
/// leading `_` makes Spark and Hadoop, which read every other file under a directory they
/// are given, pass it by.
pub const SERIES_FILE: &str = "_series.json";
/// [`SERIES_FILE`] as older series named it, still read.
pub const OLD_SERIES_FILE: &str = "series.json";
/// The workload's (or fltrace's) standard output and error, in the run's directory.
pub const STDOUT_FILE: &str = "stdout.txt";
/// See [`STDOUT_FILE`].
pub const STDERR_FILE: &str = "stderr.txt";

/// A workload: a command line, split into words without a shell, and its name.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Workload {
    /// The `workload=NAME` directory level.
    pub name: String,
    /// Program and arguments.
    pub command: Vec<String>,
}

/// Splits workload command lines as a POSIX shell would split words (quotes, backslashes),
/// without running one, and names each after its program and arguments.
pub fn workloads(commands: &[String]) -> Result<Vec<Workload>, Error> {
    let mut out: Vec<Workload> = Vec::new();
    for line in commands {
        let command = shell_words::split(line)
            .map_err(|e| Error::Invalid(format!("workload `{line}`: {e}")))?;
        if command.is_empty() {
            return Err(Error::Invalid("an empty workload command was given".into()));
        }
        let base = workload_name(&command);
        let mut name = base.clone();
        let mut n = 2;
        while out.iter().any(|w| w.name == name) {
            name = format!("{base}-{n}");
            n += 1;
        }
        out.push(Workload { name, command });
    }
    Ok(out)
}

/// `allocs-sites` for `/tmp/x/allocs sites`: the program's file name and the arguments, with
/// characters that do not belong in a directory name or partition value replaced by `_`.
fn workload_name(command: &[String]) -> String {
    let program = Path::new(&command[0])
        .file_name()
        .map_or_else(|| command[0].clone(), |n| n.to_string_lossy().into_owned());
    let words = std::iter::once(program.as_str()).chain(command[1..].iter().map(String::as_str));
    let mut name: String = words
        .map(|w| {
            w.chars()
                .map(|c| {
                    if c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-') {
                        c
                    } else {
                        '_'
                    }
                })
                .collect::<String>()
        })
        .filter(|w| !w.is_empty())
        .collect::<Vec<_>>()
        .join("-");
    name.truncate(80);
    if name.starts_with('.') || name.is_empty() {
        name.insert(0, '_');
    }
    debug_assert!(check_name(&name).is_ok());
    name
}

/// One run of the plan.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PlannedRun {
    /// Index into the workloads.
    pub workload: usize,
    /// Index into the configurations.
    pub config: usize,
    /// Repetition, from 1.
    pub rep: u32,
}

/// The order of a series: configurations one after the other, as given (so that a dry
/// configuration's peaks are known before a later one needs them); within each, every
/// (workload, repetition) once, shuffled, so that drifts of the machine spread evenly.
pub fn plan(workloads: usize, configs: usize, reps: u32, seed: u64) -> Vec<PlannedRun> {
    let mut rng = Rng::new(seed);
    let mut runs = Vec::with_capacity(workloads * configs * reps as usize);
    for config in 0..configs {
        let mut block: Vec<PlannedRun> = (0..workloads)
            .flat_map(|workload| {
                (1..=reps).map(move |rep| PlannedRun {
                    workload,
                    config,
                    rep,
                })
            })
            .collect();
        rng.shuffle(&mut block);
        runs.extend(block);
    }
    runs
}

/// The directory of a run: `DIR/workload=W/config=C/rep=N`, hive-style partitions.
pub fn run_dir(dir: &Path, workload: &str, config: &str, rep: u32) -> PathBuf {
    dir.join(format!("workload={workload}"))
        .join(format!("config={config}"))
        .join(format!("rep={rep}"))
}

/// What `run.json` holds: how one run went.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunRecord {
    /// The workload's name.
    pub workload: String,
    /// The workload's command.
    pub command: Vec<String>,
    /// The configuration's name.
    pub config: String,
    /// What the configuration ran.
    pub mode: Mode,
    /// Repetition, from 1.
    pub rep: u32,
    /// Position in the series' order, from 1.
    pub order: usize,
    /// The series' shuffle seed.
    pub seed: u64,
    /// What was started: the workload, or fltrace with its options and the workload.
    pub launched: Vec<String>,
    /// `-L` and `-M` in MB, when far memory was emulated.
    pub local_mb: Option<u64>,
    /// See `local_mb`.
    pub max_mb: Option<u64>,
    /// When it started, ns since the Unix epoch.
    pub start_unix_ns: u64,
    /// Wall-clock seconds from start to exit.
    pub wall_s: f64,
    /// User CPU seconds of the process and everything it waited for (wait4's rusage).
    pub user_s: f64,
    /// System CPU seconds, likewise.
    pub sys_s: f64,
    /// Peak resident set in KiB (ru_maxrss: the largest of the process and its children).
    pub max_rss_kb: u64,
    /// Exit status, if it exited.
    pub exit_code: Option<i32>,
    /// The signal that killed it, if one did.
    pub signal: Option<i32>,
    /// Why it could not be started, if it could not.
    pub error: Option<String>,
    /// With `pmem_dir`: the run's directory of backing files.
    #[serde(default)]
    pub backing_dir: Option<PathBuf>,
    /// Bytes of the backing files when the run ended (their sizes added up: the heap the
    /// processes mapped from them).
    #[serde(default)]
    pub backing_bytes: Option<u64>,
    /// How many backing files there were (one per process image).
    #[serde(default)]
    pub backing_files: Option<u64>,
}

impl RunRecord {
    /// Exited with status 0.
    pub fn succeeded(&self) -> bool {
        self.exit_code == Some(0)
    }

    /// `ok`, `exit N`, `signal N` or `error`.
    pub fn status(&self) -> String {
        match (self.exit_code, self.signal, &self.error) {
            (Some(0), _, _) => "ok".into(),
            (Some(code), _, _) => format!("exit {code}"),
            (None, Some(signal), _) => format!("signal {signal}"),
            _ => "error".into(),
        }
    }

    /// Reads a run's `run.json`.
    pub fn read(run_dir: &Path) -> Result<RunRecord, Error> {
        let path = run_dir.join(RUN_FILE);
        let text = std::fs::read(&path).map_err(Error::io(&path))?;
        serde_json::from_slice(&text).map_err(|reason| Error::Json { path, reason })
    }
}

/// `_series.json`: what the series is, so that resuming continues the same one.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SeriesFile {
    /// The shuffle seed.
    pub seed: u64,
    /// Repetitions of each (workload, configuration).
    pub reps: u32,
    /// The workloads.
    pub workloads: Vec<Workload>,
    /// The configurations, in order.
    pub configs: Vec<Config>,
}

impl SeriesFile {
    /// Reads `DIR/_series.json` (or an older series' `series.json`), if there is one.
    pub fn read(dir: &Path) -> Result<Option<SeriesFile>, Error> {
        let mut path = dir.join(SERIES_FILE);
        if !path.exists() && dir.join(OLD_SERIES_FILE).exists() {
            path = dir.join(OLD_SERIES_FILE);
        }
        match std::fs::read(&path) {
            Ok(text) => serde_json::from_slice(&text)
                .map(Some)
                .map_err(|reason| Error::Json { path, reason }),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(Error::io(path)(e)),
        }
    }
}

/// What to run.
#[derive(Debug, Clone)]
pub struct SeriesOptions {
    /// The series' directory.
    pub dir: PathBuf,
    /// The workloads.
    pub workloads: Vec<Workload>,
    /// The configurations, in order.
    pub configs: Vec<Config>,
    /// Repetitions.
    pub reps: u32,
    /// The shuffle seed (a fresh one if none; a resumed series keeps its own).
    pub seed: Option<u64>,
    /// The fltrace binary that records.
    pub fltrace: PathBuf,
    /// The preloaded library that backs a dry run's heap with files (`pmem_dir`).
    pub preload: Option<PathBuf>,
}

impl SeriesOptions {
    /// The series of `commands` (one command line each, split into words without a shell)
    /// under the configurations of the file `config` (default: [`crate::defaults`]), with the
    /// preloaded library found when a configuration needs it.
    pub fn new(
        dir: PathBuf,
        commands: &[String],
        config: Option<&Path>,
        reps: u32,
        seed: Option<u64>,
        fltrace: PathBuf,
    ) -> Result<SeriesOptions, Error> {
        let configs = match config {
            Some(path) => crate::from_file(path)?,
            None => crate::defaults(),
        };
        let workloads = workloads(commands)?;
        let preload = if crate::preload_needed(&configs) {
            Some(fltrace_capture::find_preload_library()?)
        } else {
            None
        };
        Ok(SeriesOptions {
            dir,
            workloads,
            configs,
            reps,
            seed,
            fltrace,
            preload,
        })
    }
}

/// Told after each run, or when runs are found done.
#[derive(Debug)]
pub enum Event<'a> {
    /// The series starts: its seed, how many runs, how many are already done.
    Start {
        /// The shuffle seed.
        seed: u64,
        /// Runs in all.
        total: usize,
        /// Runs found done (resumed).
        done: usize,
    },
    /// A run ended.
    Ran {
        /// Its position, from 1.
        index: usize,
        /// Runs in all.
        total: usize,
        /// How it went.
        run: &'a RunRecord,
        /// The estimated time left (mean run time so far times runs left).
        left: Duration,
    },
}

impl Event<'_> {
    /// The line `fltrace runs` says of it, the series being in `dir`.
    pub fn line(&self, dir: &Path) -> String {
        match self {
            Event::Start { seed, total, done } if *done > 0 => {
                format!("{done} of {total} runs already done, resuming (seed {seed})")
            }
            Event::Start { seed, total, .. } => {
                format!("{total} runs (seed {seed}) in {}", dir.display())
            }
            Event::Ran {
                index,
                total,
                run,
                left,
            } => format!(
                "[{index}/{total}] {} config={} rep={}: {:.2} s, {}{}; about {} left",
                run.workload,
                run.config,
                run.rep,
                run.wall_s,
                run.status(),
                run.error
                    .as_deref()
                    .map(|e| format!(" ({e})"))
                    .unwrap_or_default(),
                human_duration(*left)
            ),
        }
    }
}

/// A time left as `42s`, `3m05s` or `2h10m`.
fn human_duration(d: Duration) -> String {
    let s = d.as_secs();
    match s {
        0..60 => format!("{s}s"),
        60..3600 => format!("{}m{:02}s", s / 60, s % 60),
        _ => format!("{}h{:02}m", s / 3600, s % 3600 / 60),
    }
}

/// How a series ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Outcome {
    /// Runs done in all, this time and before.
    pub done: usize,
    /// Runs that failed, of those done.
    pub failed: usize,
    /// Whether it stopped on an interrupt before the end.
    pub interrupted: bool,
}

impl Outcome {
    /// What `fltrace runs` says at the end of the series in `dir`.
    pub fn line(&self, dir: &Path) -> String {
        if self.interrupted {
            format!(
                "interrupted after {} of the runs; run the same command again to resume",
                self.done
            )
        } else {
            format!(
                "{} runs done, {} failed; catalog them with `fltrace analyze {}`",
                self.done,
                self.failed,
                dir.display()
            )
        }
    }

    /// What `fltrace runs` exits with: 130 when interrupted, as a shell after Ctrl-C.
    pub fn status(&self) -> u8 {
        if self.interrupted { 130 } else { 0 }
    }
}

/// Runs (or resumes) a series. A run counts as done when its `run.json` exists; the directory
/// of a run that was cut short is cleared and the run made again. Failing runs are recorded
/// and the series goes on. After an interrupt (`stop` > 0) the current run is not recorded
/// and the series stops.
pub fn run_series(
    options: &SeriesOptions,
    stop: &AtomicUsize,
    mut event: impl FnMut(Event<'_>),
) -> Result<Outcome, Error> {
    let dir = &options.dir;
    if options.reps == 0 || options.workloads.is_empty() || options.configs.is_empty() {
        return Err(Error::Invalid(
            "a series needs at least one workload, configuration and repetition".into(),
        ));
    }
    // Bindings are checked before anything runs: a missing node is an error now, not a
    // failed run at the end.
    let bindings = options
        .configs
        .iter()
        .map(|c| {
            Binding::new(c.mem_node, c.cpu_node)
                .map_err(|e| Error::Invalid(format!("configuration `{}`: {e}", c.name)))
        })
        .collect::<Result<Vec<_>, _>>()?;
    for config in &options.configs {
        if let Some(pmem) = &config.pmem_dir {
            if !pmem.is_dir() {
                return Err(Error::Invalid(format!(
                    "configuration `{}`: pmem_dir {} is not a directory",
                    config.name,
                    pmem.display()
                )));
            }
            if config.preloads_itself() && options.preload.is_none() {
                return Err(Error::Invalid(format!(
                    "configuration `{}`: pmem_dir needs the preloaded library, which was not found",
                    config.name
                )));
            }
        }
    }
    std::fs::create_dir_all(dir).map_err(Error::io(dir))?;
    let _lock = lock(dir)?;
    let series = match SeriesFile::read(dir)? {
        Some(existing) => {
            let wanted = SeriesFile {
                seed: existing.seed,
                reps: options.reps,
                workloads: options.workloads.clone(),
                configs: options.configs.clone(),
            };
            if existing != wanted {
                return Err(Error::Invalid(format!(
                    "{} holds another series (its workloads, configurations or repetitions differ, see {}): resume it with the same arguments or use a new directory",
                    dir.display(),
                    dir.join(SERIES_FILE).display()
                )));
            }
            existing
        }
        None => {
            let series = SeriesFile {
                seed: options.seed.unwrap_or_else(crate::shuffle::fresh_seed),
                reps: options.reps,
                workloads: options.workloads.clone(),
                configs: options.configs.clone(),
            };
            write_json(&dir.join(SERIES_FILE), &series)?;
            series
        }
    };
    let order = plan(
        series.workloads.len(),
        series.configs.len(),
        series.reps,
        series.seed,
    );
    let total = order.len();
    let dir_of = |p: &PlannedRun| {
        run_dir(
            dir,
            &series.workloads[p.workload].name,
            &series.configs[p.config].name,
            p.rep,
        )
    };
    let already = order
        .iter()
        .filter(|p| dir_of(p).join(RUN_FILE).is_file())
        .count();
    event(Event::Start {
        seed: series.seed,
        total,
        done: already,
    });
    let mut done = already;
    let mut spent = Duration::ZERO;
    let mut ran = 0u32;
    for (i, planned) in order.iter().enumerate() {
        let run_dir = dir_of(planned);
        if run_dir.join(RUN_FILE).is_file() {
            continue;
        }
        if stop.load(Ordering::Relaxed) > 0 {
            break;
        }
        if run_dir.exists() {
            std::fs::remove_dir_all(&run_dir).map_err(Error::io(&run_dir))?;
        }
        std::fs::create_dir_all(&run_dir).map_err(Error::io(&run_dir))?;
        let workload = &series.workloads[planned.workload];
        let config = &series.configs[planned.config];
        let mut record = execute(
            options,
            &series,
            workload,
            config,
            &bindings[planned.config],
            &run_dir,
        )?;
        if stop.load(Ordering::Relaxed) > 0 {
            // Cut short: leave it to be made again.
            break;
        }
        record.rep = planned.rep;
        record.order = i + 1;
        let tmp = run_dir.join(".run.json.tmp");
        write_json(&tmp, &record)?;
        let path = run_dir.join(RUN_FILE);
        std::fs::rename(&tmp, &path).map_err(Error::io(&path))?;
        done += 1;
        ran += 1;
        spent += Duration::from_secs_f64(record.wall_s.max(0.0));
        let left = spent / ran * (total - done) as u32;
        event(Event::Ran {
            index: i + 1,
            total,
            run: &record,
            left,
        });
    }
    let failed = order
        .iter()
        .filter_map(|p| RunRecord::read(&dir_of(p)).ok())
        .filter(|r| !r.succeeded())
        .count();
    Ok(Outcome {
        done,
        failed,
        interrupted: done < total,
    })
}

/// Holds an exclusive lock on the series directory while it runs.
fn lock(dir: &Path) -> Result<File, Error> {
    let path = dir.join(".series.lock");
    let file = OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .mode(0o644)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(&path)
        .map_err(Error::io(&path))?;
    use std::os::fd::AsRawFd;
    // A series killed while it started a run leaves the lock with that run's forked child
    // until it execs (the descriptor is close-on-exec) or dies: a moment, which a resume
    // started right after the kill waits out rather than calling it another series.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(2);
    loop {
        // SAFETY: flock on an open descriptor.
        if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } == 0 {
            return Ok(file);
        }
        if std::time::Instant::now() >= deadline {
            return Err(Error::Invalid(format!(
                "another `fltrace runs` is running in {}",
                dir.display()
            )));
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

/// Creates a new file, refusing to follow a link or to clobber what is there.
fn create_new(path: &Path) -> Result<File, Error> {
    Ok(files::create_new(path)?)
}

fn write_json(path: &Path, value: &impl Serialize) -> Result<(), Error> {
    let mut file = files::create(path)?;
    let mut text = serde_json::to_vec(value).map_err(|source| Error::Json {
        path: path.to_owned(),
        reason: source,
    })?;
    text.push(b'\n');
    file.write_all(&text).map_err(Error::io(path))?;
    file.sync_all().map_err(Error::io(path))
}

/// The largest peak of the workload's successful dry runs so far, in KiB.
fn dry_peak_kb(dir: &Path, series: &SeriesFile, workload: &Workload) -> Option<u64> {
    series
        .configs
        .iter()
        .filter(|c| c.mode == Mode::Dry)
        .flat_map(|c| (1..=series.reps).map(move |rep| run_dir(dir, &workload.name, &c.name, rep)))
        .filter_map(|d| RunRecord::read(&d).ok())
        .filter(RunRecord::succeeded)
        .map(|r| r.max_rss_kb)
        .max()
}

/// `-L` and `-M` in MB for a configuration, or why they cannot be had.
fn far_memory_mb(
    dir: &Path,
    series: &SeriesFile,
    workload: &Workload,
    config: &Config,
) -> Result<Option<(u64, u64)>, String> {
    let Some(local) = config.local else {
        return Ok(None);
    };
    let peak_mb = dry_peak_kb(dir, series, workload).map(|kb| kb.div_ceil(1024).max(1));
    let local_mb = match local {
        LocalMemory::Mb(mb) => mb,
        LocalMemory::OfDryPeak(fraction) => {
            let peak = peak_mb.ok_or_else(|| {
                format!(
                    "local is a fraction of the dry peak, and workload `{}` has no successful dry run",
                    workload.name
                )
            })?;
            ((peak as f64 * fraction).ceil() as u64).max(1)
        }
    };
    let base = peak_mb.unwrap_or(local_mb).max(local_mb);
    let max_mb = config.max_mb.unwrap_or((base * 2).max(base + 256));
    Ok(Some((local_mb, max_mb)))
}

/// Starts one run, waits for it, and says how it went.
fn execute(
    options: &SeriesOptions,
    series: &SeriesFile,
    workload: &Workload,
    config: &Config,
    binding: &Binding,
    run_dir: &Path,
) -> Result<RunRecord, Error> {
    let mut record = RunRecord {
        workload: workload.name.clone(),
        command: workload.command.clone(),
        config: config.name.clone(),
        mode: config.mode,
        rep: 0,
        order: 0,
        seed: series.seed,
        launched: Vec::new(),
        local_mb: None,
        max_mb: None,
        start_unix_ns: unix_ns(),
        wall_s: 0.0,
        user_s: 0.0,
        sys_s: 0.0,
        max_rss_kb: 0,
        exit_code: None,
        signal: None,
        error: None,
        backing_dir: None,
        backing_bytes: None,
        backing_files: None,
    };
    let far = match far_memory_mb(&options.dir, series, workload, config) {
        Ok(far) => far,
        Err(message) => {
            record.error = Some(message);
            return Ok(record);
        }
    };
    let backing = match &config.pmem_dir {
        Some(pmem) => match backing_dir(pmem, workload, config, run_dir) {
            Ok(backing) => Some(backing),
            Err(e) => {
                record.error = Some(format!("backing directory in {}: {e}", pmem.display()));
                return Ok(record);
            }
        },
        None => None,
    };
    record.backing_dir.clone_from(&backing);
    let fltrace = options.fltrace.to_string_lossy().into_owned();
    let run_dir_arg = run_dir.to_string_lossy().into_owned();
    let launched: Vec<String> = match config.mode {
        Mode::Dry => workload.command.clone(),
        Mode::Record | Mode::Wss => {
            let subcommand = if config.mode == Mode::Record {
                "record"
            } else {
                "wss"
            };
            let mut argv = vec![fltrace, subcommand.into(), "-o".into(), run_dir_arg];
            argv.extend(config.record_flags());
            if let Some(backing) = &backing {
                argv.extend([
                    "--backing-dir".into(),
                    backing.to_string_lossy().into_owned(),
                ]);
            }
            if let Some((local_mb, max_mb)) = far {
                argv.extend([
                    "-L".into(),
                    local_mb.to_string(),
                    "-M".into(),
                    max_mb.to_string(),
                ]);
                record.local_mb = Some(local_mb);
                record.max_mb = Some(max_mb);
            }
            argv.push("--".into());
            argv.extend(workload.command.iter().cloned());
            argv
        }
    };
    record.launched = launched.clone();
    let stdout = create_new(&run_dir.join(STDOUT_FILE))?;
    let stderr = create_new(&run_dir.join(STDERR_FILE))?;
    let mut command = Command::new(&launched[0]);
    command
        .args(&launched[1..])
        .stdin(Stdio::null())
        .stdout(stdout)
        .stderr(stderr);
    if let (Mode::Dry, Some(backing), Some(preload)) = (config.mode, &backing, &options.preload) {
        command
            .env("LD_PRELOAD", fltrace_capture::preload_value(preload))
            .env(env::name(env::BACKING_DIR), backing);
    }
    let binding = binding.clone();
    // SAFETY: the hook only makes system calls (prctl, set_mempolicy, sched_setaffinity).
    unsafe {
        command.pre_exec(move || {
            // A run must not outlive a series that was killed: it would write into a
            // directory the resumed series clears.
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            binding.apply()
        });
    }
    record.start_unix_ns = unix_ns();
    let started = Instant::now();
    let child = match command.spawn() {
        Ok(child) => child,
        Err(e) => {
            record.error = Some(format!("could not start `{}`: {e}", launched[0]));
            return Ok(record);
        }
    };
    let reaped = fltrace_capture::reap(child.id() as i32, true)
        .and_then(|reaped| reaped.ok_or_else(|| std::io::Error::other("not reaped")))
        .map_err(Error::io(run_dir))?;
    record.wall_s = started.elapsed().as_secs_f64();
    record.user_s = reaped.user_cpu.as_secs_f64();
    record.sys_s = reaped.system_cpu.as_secs_f64();
    record.max_rss_kb = reaped.peak_rss / 1024;
    if let Some(backing) = &backing {
        let (files, bytes) = backing_sizes(backing).map_err(Error::io(backing))?;
        record.backing_files = Some(files);
        record.backing_bytes = Some(bytes);
        if !config.keep_backing {
            std::fs::remove_dir_all(backing).map_err(Error::io(backing))?;
        }
    }
    record.exit_code = reaped.status.code();
    record.signal = reaped.status.signal();
    Ok(record)
}

/// A new directory in `pmem` for one run's backing files, named after the series' process and
/// the run, so that runs of a resumed or of another series never share one.
fn backing_dir(
    pmem: &Path,
    workload: &Workload,
    config: &Config,
    run_dir: &Path,
) -> std::io::Result<PathBuf> {
    let rep = run_dir
        .file_name()
        .map(|n| n.to_string_lossy().replace('=', "-"))
        .unwrap_or_default();
    let dir = pmem.join(format!(
        "fltrace-{}-{}-{}-{rep}",
        std::process::id(),
        workload.name,
        config.name
    ));
    // mkdir neither follows a link in its place nor reuses what is there.
    std::fs::create_dir(&dir)?;
    Ok(dir)
}

/// The number of files in a backing directory and their sizes added up.
pub fn backing_sizes(dir: &Path) -> std::io::Result<(u64, u64)> {
    let mut files = 0;
    let mut bytes = 0;
    for entry in std::fs::read_dir(dir)? {
        let meta = entry?.metadata()?;
        if meta.is_file() {
            files += 1;
            bytes += meta.len();
        }
    }
    Ok((files, bytes))
}

fn unix_ns() -> u64 {
    SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `fltrace runs` says where a series starts or resumes, and each run's outcome.
    #[test]
    fn event_lines() {
        let dir = Path::new("out");
        let start = |done| Event::Start {
            seed: 7,
            total: 6,
            done,
        };
        assert_eq!(start(0).line(dir), "6 runs (seed 7) in out");
        assert_eq!(
            start(2).line(dir),
            "2 of 6 runs already done, resuming (seed 7)"
        );
        let run = RunRecord {
            workload: "scan".into(),
            command: vec!["./scan".into()],
            config: "record".into(),
            mode: Mode::Dry,
            rep: 2,
            order: 3,
            seed: 7,
            launched: Vec::new(),
            local_mb: None,
            max_mb: None,
            start_unix_ns: 0,
            wall_s: 1.234,
            user_s: 0.0,
            sys_s: 0.0,
            max_rss_kb: 0,
            exit_code: Some(1),
            signal: None,
            error: Some("boom".into()),
            backing_dir: None,
            backing_bytes: None,
            backing_files: None,
        };
        let ran = Event::Ran {
            index: 3,
            total: 6,
            run: &run,
            left: Duration::from_secs(90),
        };
        assert_eq!(
            ran.line(dir),
            "[3/6] scan config=record rep=2: 1.23 s, exit 1 (boom); about 1m30s left"
        );
    }

    #[test]
    fn human_durations() {
        assert_eq!(human_duration(Duration::from_secs(59)), "59s");
        assert_eq!(human_duration(Duration::from_secs(185)), "3m05s");
        assert_eq!(human_duration(Duration::from_secs(7800)), "2h10m");
    }

    /// A series written before `_series.json` (pretty-printed `series.json`) still reads,
    /// and a new one is written on one line under the new name.
    #[test]
    fn old_series_file_reads_and_new_one_is_one_line() {
        let dir = tempfile::tempdir().unwrap();
        let series = SeriesFile {
            seed: 7,
            reps: 2,
            workloads: workloads(&["true".to_owned()]).unwrap(),
            configs: crate::defaults(),
        };
        let pretty = serde_json::to_vec_pretty(&series).unwrap();
        std::fs::write(dir.path().join(OLD_SERIES_FILE), pretty).unwrap();
        assert_eq!(SeriesFile::read(dir.path()).unwrap(), Some(series.clone()));
        write_json(&dir.path().join(SERIES_FILE), &series).unwrap();
        let text = std::fs::read_to_string(dir.path().join(SERIES_FILE)).unwrap();
        assert_eq!(text.lines().count(), 1, "{text}");
        assert_eq!(SeriesFile::read(dir.path()).unwrap(), Some(series));
    }

    #[test]
    fn plan_runs_configurations_in_order_and_shuffles_within() {
        let order = plan(2, 3, 3, 11);
        assert_eq!(order.len(), 18);
        for (c, block) in order.chunks(6).enumerate() {
            assert!(block.iter().all(|p| p.config == c));
            let mut pairs: Vec<(usize, u32)> = block.iter().map(|p| (p.workload, p.rep)).collect();
            pairs.sort_unstable();
            assert_eq!(
                pairs,
                [(0, 1), (0, 2), (0, 3), (1, 1), (1, 2), (1, 3)],
                "every (workload, rep) once per configuration"
            );
        }
        assert_eq!(order, plan(2, 3, 3, 11), "the seed decides the order");
        let blocks: Vec<Vec<(usize, u32)>> = order
            .chunks(6)
            .map(|b| b.iter().map(|p| (p.workload, p.rep)).collect())
            .collect();
        assert!(
            blocks[0] != blocks[1] || blocks[1] != blocks[2],
            "each block is shuffled on"
        );
    }

    #[test]
    fn workloads_split_without_a_shell_and_get_names() {
        let w = workloads(&[
            "/tmp/x/allocs sites".into(),
            "scan 16 2".into(),
            "echo 'a b' \"c;d\" $HOME".into(),
            "scan 16 2".into(),
        ])
        .unwrap();
        assert_eq!(w[0].command, ["/tmp/x/allocs", "sites"]);
        assert_eq!(w[0].name, "allocs-sites");
        assert_eq!(w[1].name, "scan-16-2");
        assert_eq!(w[2].command, ["echo", "a b", "c;d", "$HOME"]);
        assert_eq!(w[2].name, "echo-a_b-c_d-_HOME");
        assert_eq!(w[3].name, "scan-16-2-2");
        assert!(workloads(&["echo 'unclosed".into()]).is_err());
        assert!(workloads(&["  ".into()]).is_err());
    }

    #[test]
    fn run_directories_are_hive_partitions() {
        assert_eq!(
            run_dir(Path::new("/s"), "scan", "dry", 2),
            Path::new("/s/workload=scan/config=dry/rep=2")
        );
    }

    /// The end of a series says how far it got, and how to resume or catalog it.
    #[test]
    fn the_outcome_says_how_to_go_on() {
        let done = Outcome {
            done: 4,
            failed: 1,
            interrupted: false,
        };
        assert_eq!(
            done.line(Path::new("s")),
            "4 runs done, 1 failed; catalog them with `fltrace analyze s`"
        );
        assert_eq!(done.status(), 0);
        let cut = Outcome {
            interrupted: true,
            ..done
        };
        assert_eq!(
            cut.line(Path::new("s")),
            "interrupted after 4 of the runs; run the same command again to resume"
        );
        assert_eq!(cut.status(), 130);
    }
}
