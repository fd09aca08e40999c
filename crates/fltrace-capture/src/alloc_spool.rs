//! The recorder's side of `record --allocs`: where the preloaded tracer writes its logs, and
//! their conversion into each process's allocation tables once the program is done.
//!
//! The logs (`fltrace_runtime_abi::alloclog`) live in a private directory beside the output
//! until conversion. Reading them and writing the tables is the trace crate's
//! ([`fltrace_trace::spool`]), which also recovers the spool of a killed recorder; here the
//! logs of large processes are followed while the program runs ([`Drain`]), the rest
//! converted at the end.

use std::collections::HashMap;
use std::ffi::OsString;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use fltrace_runtime_abi::alloclog::{CLOCK_SIZE, Clock, MAGIC};
use fltrace_runtime_abi::env;
use fltrace_trace::live::LiveAllocSink;
use fltrace_trace::spool::{
    Conversion, DRAIN_ALLOCS, DRAIN_STACKS, FullLogs, LiveLog, METADATA_FILE, SpoolMetadata,
    Watchers, any_log_stopped, any_spool_log_stopped, convert_spooled, image_starts, lock_spool,
    log_bytes_taken, log_name, note_refused,
};
pub use fltrace_trace::spool::{
    Converted, Recovered, SPOOL_PREFIX, SpoolLogs, recover_stale_spools,
};
use fltrace_trace::{Origin, PairingFactory, files};

use crate::{Credentials, Error};

/// Where the tracer's logs go, and the clock page it reads its times from.
pub struct AllocLogs {
    dir: PathBuf,
    /// The directory, open and `flock`ed for as long as the recording runs: how the next
    /// `record` tells a live recorder's spool from one a killed recorder left behind.
    _lock: std::fs::File,
    ticker: Option<std::thread::JoinHandle<()>>,
    stop: Arc<AtomicBool>,
    clock: Option<Arc<ClockPage>>,
    /// Converting while the program runs, once started.
    drain: Option<Drain>,
    /// Pairs each process's calls as they are converted.
    pairing: Option<PairingFactory>,
    /// A live view told every call converted ([`AllocLogs::show_live`]).
    live: Option<LiveAllocSink>,
}

impl std::fmt::Debug for AllocLogs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AllocLogs").field("dir", &self.dir).finish()
    }
}

/// How often the clock word moves on: the resolution of allocation times.
const TICK: std::time::Duration =
    std::time::Duration::from_nanos(fltrace_trace::ALLOC_CLOCK_TICK_NS);

impl AllocLogs {
    /// Makes the private directory under `out_dir`, owned by the user the command runs as.
    pub fn create(out_dir: &Path, credentials: Option<Credentials>) -> Result<AllocLogs, Error> {
        let dir = out_dir.join(format!(
            "{SPOOL_PREFIX}{}-{}",
            std::process::id(),
            crate::os::unix_now_ns()
        ));
        let io = |source| fltrace_trace::Error::Io {
            path: dir.clone(),
            source,
        };
        std::fs::DirBuilder::new()
            .mode(0o700)
            .create(&dir)
            .map_err(io)?;
        // From here on, dropping `logs` removes the directory, whatever fails next.
        let lock = lock_spool(&dir, false).map_err(io)?;
        let mut logs = AllocLogs {
            dir: dir.clone(),
            _lock: lock,
            ticker: None,
            stop: Arc::new(AtomicBool::new(false)),
            clock: None,
            drain: None,
            pairing: None,
            live: None,
        };
        if let Some(c) = credentials {
            std::os::unix::fs::chown(&dir, Some(c.uid), Some(c.gid)).map_err(io)?;
        }
        // Read-write for the shared mapping; in our own new directory, so nothing to follow.
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .mode(0o644)
            .custom_flags(libc::O_NOFOLLOW)
            .open(dir.join("log-clock"))
            .map_err(io)?;
        // Blocks allocated, not a sparse set_len: on a full file system the store to the
        // mapping would be a SIGBUS; this way it is an error before the program starts.
        {
            use std::os::fd::AsRawFd;
            // SAFETY: sizing our own new file.
            let error = unsafe { libc::posix_fallocate(file.as_raw_fd(), 0, CLOCK_SIZE as i64) };
            if error != 0 {
                return Err(io(std::io::Error::from_raw_os_error(error)).into());
            }
        }
        // SAFETY: a shared mapping of the file just made; only this process writes it, through
        // atomics.
        let map = unsafe { memmap2::MmapMut::map_mut(&file) }.map_err(io)?;
        let clock = Arc::new(ClockPage(map));
        logs.clock = Some(clock.clone());
        clock
            .get()
            .now_ns
            .store(crate::os::monotonic_now_ns(), Ordering::Relaxed);
        clock.get().magic.store(MAGIC, Ordering::Release);
        let stop = logs.stop.clone();
        let ticker = std::thread::Builder::new()
            .name("fltrace-clock".into())
            .spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    let now = crate::os::monotonic_now_ns();
                    clock.get().now_ns.store(now, Ordering::Relaxed);
                    std::thread::sleep(TICK);
                }
            })
            .map_err(io)?;
        logs.ticker = Some(ticker);
        Ok(logs)
    }

    /// Pairs each process's calls as they are converted with one of `pairing`'s, so that
    /// reports read what it found (before [`AllocLogs::start_drain`]).
    pub fn pair_with(&mut self, pairing: Option<PairingFactory>) {
        self.pairing = pairing;
    }

    /// Tells `sink` every call as it is converted (before [`AllocLogs::start_drain`]): the
    /// drain then follows every process's logs from their first call, whatever their size,
    /// so that a live view sees them within [`fltrace_trace::spool::LIVE_EVERY`] or so; what
    /// converts at the end is told then.
    pub fn show_live(&mut self, sink: LiveAllocSink) {
        self.live = Some(sink);
    }

    /// The environment variable that turns the tracer on. Its path is absolute: a process
    /// that changed directory before starting a child (a shell's `cd`, `make -C`) would send
    /// the child looking for a relative one, and its allocations would go untraced.
    pub fn environment(&self) -> (OsString, OsString) {
        let log = self.dir.join("log");
        let log = std::path::absolute(&log).unwrap_or(log);
        (env::name(env::ALLOCS).into(), log.into_os_string())
    }

    /// Starts converting the logs of large processes while the program runs ([`Drain`]),
    /// into tables of recording `recording`; `mono_offset` turns CLOCK_MONOTONIC into the
    /// tables' Unix-epoch times. Without it (no thread), every log converts at the end.
    pub fn start_drain(&mut self, recording: &str, mono_offset: u64) {
        let Some(clock) = &self.clock else {
            return;
        };
        match Drain::start(
            self.dir.clone(),
            clock.clone(),
            recording.to_owned(),
            mono_offset,
            self.pairing.clone(),
            self.live.clone(),
        ) {
            Ok(drain) => self.drain = Some(drain),
            Err(e) => log::debug!("allocation logs convert at the end: {e}"),
        }
    }

    /// Tells the drain what the recorder knows of process `pid`: the generation of the first
    /// image that ran with the library, the current one, and when the current one began
    /// (asked only the first time).
    pub fn learn_image(
        &self,
        pid: u32,
        first_generation: u32,
        generation: u32,
        start_ns: impl FnOnce() -> Option<u64>,
    ) {
        let Some(drain) = &self.drain else {
            return;
        };
        let Ok(mut processes) = drain.shared.processes.lock() else {
            return;
        };
        let images = processes.entry(pid).or_insert_with(|| ProcessImages {
            first_generation,
            starts: HashMap::new(),
        });
        if !images.starts.contains_key(&generation)
            && let Some(start) = start_ns()
        {
            images.starts.insert(generation, start);
        }
    }

    /// The spool directory the library writes its logs into.
    pub(crate) fn dir(&self) -> &Path {
        &self.dir
    }

    /// Drops what the drain converted of `pid`'s logs (they convert again at the end): the
    /// recorder learnt they were not all that process's.
    pub(crate) fn forget_drained(&mut self, pid: u32) {
        if let Some(drain) = &mut self.drain {
            drain.join();
            if let Some(drained) = drain.drained.remove(&pid) {
                drained.abandon();
            }
        }
    }

    /// The program has ended: the drain converts what is left of the logs it follows.
    pub fn program_ended(&self) {
        if let Some(drain) = &self.drain {
            drain.shared.ended.store(true, Ordering::Release);
        }
    }

    /// Converts the logs of `pid` (one per image: execs start a new one) into
    /// `fltrace-data-allocs-<pid>.parquet` and its stack table; the first log's stacks belong
    /// to address-space generation `first_generation`, the next to the one after. `mono_offset` turns
    /// CLOCK_MONOTONIC into the Unix-epoch times of the fault table. Returns the events
    /// written, or `None` if the process left no log. The tables are those of recording
    /// `recording`. Call once the program has ended.
    pub fn convert(
        &mut self,
        pid: u32,
        first_generation: u32,
        out_dir: &Path,
        mono_offset: u64,
        recording: &str,
    ) -> Result<Option<Converted>, Error> {
        let drained = self.drain.as_mut().and_then(|drain| {
            drain.join();
            drain.drained.remove(&pid)
        });
        if let Some(drained) = drained {
            // The drain's tables go on from where the thread stopped, unless the recorder's
            // final word differs from what it was told or a log filled its file system (its
            // file must go before the tables are written).
            if drained.first_generation == first_generation && !any_log_stopped(&self.dir, pid) {
                let spool_tables = (drained.allocs_path.clone(), drained.stacks_path.clone());
                match drained.finish(
                    &self.dir,
                    first_generation,
                    out_dir,
                    mono_offset,
                    Origin::new(recording, pid),
                ) {
                    Ok(converted) => {
                        note_refused(out_dir, pid, converted.as_ref());
                        return Ok(converted);
                    }
                    Err(e) => {
                        log::debug!("allocations of process {pid} convert again: {e}");
                        let _ = std::fs::remove_file(spool_tables.0);
                        let _ = std::fs::remove_file(spool_tables.1);
                    }
                }
            } else {
                drained.abandon();
            }
        }
        let converted = convert_spooled(
            &self.dir,
            pid,
            first_generation,
            out_dir,
            &SpoolMetadata {
                recording: recording.to_owned(),
                mono_offset,
            },
            FullLogs::Remove,
            Watchers {
                pairing: self.pairing.as_ref(),
                live: self.live.as_ref(),
            },
        );
        if converted.is_err() {
            // A table a full disk left unreadable (not even its header written) would make
            // every reader of the recording fail: it goes, as the spool recovery's do. One
            // that reads back to a checkpoint stays.
            let (allocs, stacks, totals) = (
                files::allocs(out_dir, pid),
                files::alloc_stacks(out_dir, pid),
                files::alloc_totals(out_dir, pid),
            );
            let unreadable = (allocs.exists() && fltrace_trace::read_allocs(&allocs).is_err())
                || (stacks.exists() && fltrace_trace::read_stacks(&stacks).is_err());
            if unreadable {
                let _ = std::fs::remove_file(&allocs);
                let _ = std::fs::remove_file(&stacks);
            }
            // Totals of a conversion that did not end would not be the events' sums, nor
            // its pairing what they come to.
            let _ = std::fs::remove_file(&totals);
            let _ = std::fs::remove_file(files::alloc_stats(out_dir, pid));
        }
        let converted = converted?;
        note_refused(out_dir, pid, converted.as_ref());
        Ok(converted)
    }

    /// Writes what converting the logs needs besides them ([`SpoolMetadata`]) into the
    /// spool, so that the logs of a recorder killed before converting them can be converted
    /// by [`recover_stale_spools`].
    pub fn write_metadata(&self, recording: &str, mono_offset: u64) -> Result<(), Error> {
        use std::io::Write;
        let path = self.dir.join(METADATA_FILE);
        let text = SpoolMetadata {
            recording: recording.to_owned(),
            mono_offset,
        }
        .to_text();
        files::create_new(&path)?
            .write_all(text.as_bytes())
            .map_err(|source| fltrace_trace::Error::Io { path, source })?;
        Ok(())
    }
}

/// The logs go when the recording ends, converted or not (an error stops the recording).
impl Drop for AllocLogs {
    fn drop(&mut self) {
        if let Some(drain) = &mut self.drain {
            drain.shared.stop.store(true, Ordering::Release);
            drain.join();
        }
        self.stop.store(true, Ordering::Relaxed);
        if let Some(ticker) = self.ticker.take() {
            let _ = ticker.join();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// The mapped clock page.
struct ClockPage(memmap2::MmapMut);

impl ClockPage {
    fn get(&self) -> &Clock {
        // SAFETY: the mapping is CLOCK_SIZE bytes, page-aligned; Clock is atomics.
        unsafe { &*self.0.as_ptr().cast::<Clock>() }
    }
}

/// Converting the logs while the program runs: a thread follows each large log as its
/// threads write it and writes its process's tables into the spool (renamed into place at the
/// end), so that when the program ends only the tail is left to convert. A process it could
/// not follow (an error, more large processes than [`MAX_DRAINS`]) is converted at the end
/// from its logs, as without it.
///
/// The tables are in time order, so events are written only up to a watermark: the value
/// `C` of the clock word read before looking at the logs, events before `C` only. A record
/// not yet published when its chunk was looked at may have an earlier time (its thread was
/// held up between reading the clock and publishing), but no call that depends on it (a
/// `free` of the block it returned) can have been written: that call began after the record
/// was published, so after the look, so it read a clock of at least `C`. Such a late record
/// gets the time of the last event written.
struct Drain {
    shared: Arc<DrainShared>,
    thread: Option<std::thread::JoinHandle<HashMap<u32, ProcessDrain>>>,
    /// What the thread handed back once it ended.
    drained: HashMap<u32, ProcessDrain>,
}

/// What the recorder tells the drain thread.
#[derive(Default)]
struct DrainShared {
    /// Per process with the library loaded: what the recorder learnt of its images.
    processes: Mutex<HashMap<u32, ProcessImages>>,
    /// Set once the program has ended: every log is complete.
    ended: AtomicBool,
    /// Set when the recording stops short: the thread ends at once.
    stop: AtomicBool,
}

/// A process's images, as the recorder learns them from the kernel's mapping records.
#[derive(Debug, Clone, Default)]
struct ProcessImages {
    /// The generation of the first image that ran with the library (its log's image 0).
    first_generation: u32,
    /// When each generation began: its first mapping, the floor of its calls' times.
    starts: HashMap<u32, u64>,
}

/// Processes whose logs are converted while the program runs, at most: each holds a writer
/// thread and a row group of events.
const MAX_DRAINS: usize = 4;
/// Processes whose logs are followed while the program runs when a live view watches: what
/// is beyond shows at the end.
const MAX_LIVE_DRAINS: usize = 64;
/// A process's logs are followed once its first log holds this much: smaller ones convert
/// at the end in moments.
const DRAIN_FROM_BYTES: u64 = 1 << 20;
/// The free space below which the drain gives up, so that its tables never take the room
/// the logs would have grown into: checked every [`LOOK_EVERY`], and a log grows far less
/// than this in that time.
const DRAIN_RESERVE: u64 = 32 << 20;
/// The most events a process's step converts while the program runs.
const STEP_EVENTS: u64 = 1 << 17;
/// How often new large logs are looked for, and the file system's free space.
const LOOK_EVERY: std::time::Duration = std::time::Duration::from_millis(20);
/// How often what was converted becomes readable, should the recorder be killed.
const CHECKPOINT_EVERY: std::time::Duration = std::time::Duration::from_secs(1);
/// The pause when there was nothing to convert, while following a log and while not.
const IDLE: std::time::Duration = std::time::Duration::from_millis(2);
const IDLE_UNUSED: std::time::Duration = std::time::Duration::from_millis(20);

/// The tables of one process being written in the spool while the program runs.
struct ProcessDrain {
    pid: u32,
    first_generation: u32,
    conversion: Conversion,
    /// The log image being converted (0: the library's first), and its log once it exists.
    image: u32,
    log: Option<LiveLog>,
    /// The floor each generation converted so far had.
    floors: HashMap<u32, u64>,
    /// Events converted before the program ended.
    live_events: u64,
    /// The tables in the spool.
    allocs_path: PathBuf,
    stacks_path: PathBuf,
}

impl ProcessDrain {
    fn create(
        spool: &Path,
        pid: u32,
        first_generation: u32,
        recording: &str,
        pairing: Option<&PairingFactory>,
        live: Option<&LiveAllocSink>,
    ) -> Result<ProcessDrain, Error> {
        let allocs_path = spool.join(format!("{DRAIN_ALLOCS}{pid}.parquet"));
        let stacks_path = spool.join(format!("{DRAIN_STACKS}{pid}.parquet"));
        let origin = Origin::new(recording, pid);
        let mut conversion = match Conversion::create(&allocs_path, &stacks_path, origin, pairing) {
            Ok(conversion) => conversion,
            Err(e) => {
                // Half made (one table, or one without its first checkpoint).
                let _ = std::fs::remove_file(&allocs_path);
                let _ = std::fs::remove_file(&stacks_path);
                return Err(e.into());
            }
        };
        if let Some(sink) = live {
            conversion.watch(pid, sink.clone());
        }
        Ok(ProcessDrain {
            pid,
            first_generation,
            conversion,
            image: 0,
            log: None,
            floors: HashMap::new(),
            live_events: 0,
            allocs_path,
            stacks_path,
        })
    }

    /// Converts what the logs hold before `watermark`; images whose start the recorder has
    /// not told yet wait. `ended`: the program has ended. Returns the events written.
    fn step(
        &mut self,
        spool: &Path,
        images: &ProcessImages,
        mono_offset: u64,
        watermark: u64,
        ended: bool,
    ) -> Result<u64, Error> {
        let mut written = 0;
        loop {
            let generation = self.first_generation + self.image;
            let Some(&floor) = images.starts.get(&generation) else {
                return Ok(written);
            };
            if self.log.is_none() {
                let path = spool.join(log_name(self.pid, self.image));
                match LiveLog::open(&path, mono_offset, false)? {
                    Some(log) => self.log = Some(log),
                    None => return Ok(written),
                }
            }
            // The next image's log is made after the exec that ended this one's threads.
            let complete = ended || spool.join(log_name(self.pid, self.image + 1)).exists();
            let Some(log) = self.log.as_mut() else {
                return Ok(written);
            };
            if complete {
                log.complete()?;
            } else {
                log.refresh()?;
            }
            let watermark = if complete { u64::MAX } else { watermark };
            // While the program runs, a step at a time: between steps the thread looks at
            // the room left for the logs.
            let most = if ended { u64::MAX } else { STEP_EVENTS };
            let converted = self
                .conversion
                .convert(log, generation, floor, watermark, most)?;
            written += converted;
            if !ended {
                self.live_events += converted;
            }
            self.floors.insert(generation, floor);
            if !complete || converted == most {
                return Ok(written);
            }
            self.conversion.end_image(log);
            self.log = None;
            self.image += 1;
        }
    }

    /// Converts the rest of the logs, now complete, and puts the tables into `out_dir`.
    /// `first_generation` and `image_start` are the recorder's final word.
    fn finish(
        mut self,
        spool: &Path,
        first_generation: u32,
        out_dir: &Path,
        mono_offset: u64,
        origin: Origin,
    ) -> Result<Option<Converted>, Error> {
        let image_start = image_starts(&files::mmaps(out_dir, self.pid))?;
        loop {
            let generation = first_generation + self.image;
            let log = match self.log.take() {
                Some(log) => Some(log),
                None => LiveLog::open(
                    &spool.join(log_name(self.pid, self.image)),
                    mono_offset,
                    true,
                )?,
            };
            let Some(mut log) = log else {
                break;
            };
            let floor = self
                .floors
                .get(&generation)
                .or(image_start.get(&generation))
                .copied()
                .unwrap_or(0);
            self.conversion.convert_image(&mut log, generation, floor)?;
            self.image += 1;
        }
        let (converted, totals, paired) = self.conversion.finish()?;
        log::debug!(
            "allocations of process {}: {} of {} events converted while the program ran",
            self.pid,
            self.live_events,
            converted.events
        );
        let allocs = files::allocs(out_dir, self.pid);
        let stacks = files::alloc_stacks(out_dir, self.pid);
        for (from, to) in [(&self.allocs_path, &allocs), (&self.stacks_path, &stacks)] {
            std::fs::rename(from, to).map_err(|source| fltrace_trace::Error::Io {
                path: to.clone(),
                source,
            })?;
        }
        fltrace_trace::spool::write_pairing(out_dir, &origin, paired, &image_start)?;
        // Last: a totals file says its process's tables were written to the end.
        fltrace_trace::write_alloc_totals(
            &files::alloc_totals(out_dir, self.pid),
            origin,
            &totals,
        )?;
        Ok(Some(converted))
    }

    /// Gives up: the tables in the spool go (their writer stopped first, so that their
    /// room is free once this returns), and the logs convert at the end.
    fn abandon(self) {
        let (allocs, stacks) = (self.allocs_path.clone(), self.stacks_path.clone());
        self.conversion.abandon();
        let _ = std::fs::remove_file(allocs);
        let _ = std::fs::remove_file(stacks);
    }
}

/// Why the drain gives up, if it must: a log stopped because its file system filled (the
/// end's conversion needs every byte its tables took), or, while the program runs, less than
/// [`DRAIN_RESERVE`] is left for the logs to grow into.
fn reason_to_give_up(spool: &Path, ended: bool) -> Option<String> {
    if any_spool_log_stopped(spool) {
        return Some("an allocation log filled its file system".into());
    }
    if ended {
        // The logs are complete: the tables take the same room here or at the end.
        return None;
    }
    let free = free_bytes(spool)?;
    (free < DRAIN_RESERVE).then(|| {
        format!(
            "{} MiB left on the file system, which the logs need more",
            free >> 20
        )
    })
}

/// Bytes an unprivileged writer may still take on the file system of `path`.
fn free_bytes(path: &Path) -> Option<u64> {
    use std::os::unix::ffi::OsStrExt;
    let path = std::ffi::CString::new(path.as_os_str().as_bytes()).ok()?;
    // SAFETY: statvfs fills the struct it is given, from a NUL-terminated path.
    let mut stat: libc::statvfs = unsafe { std::mem::zeroed() };
    if unsafe { libc::statvfs(path.as_ptr(), &mut stat) } != 0 {
        return None;
    }
    Some((stat.f_bavail as u64).saturating_mul(stat.f_frsize as u64))
}

/// The drain thread: see [`Drain`]. Returns the processes it converted so far: none once it
/// gave up (an error, a full file system), their tables removed, so that every log converts
/// at the end as without it.
fn drain_logs(
    spool: PathBuf,
    clock: Arc<ClockPage>,
    shared: Arc<DrainShared>,
    recording: String,
    mono_offset: u64,
    pairing: Option<PairingFactory>,
    live: Option<LiveAllocSink>,
) -> HashMap<u32, ProcessDrain> {
    // A live view is told every process's calls as they come: each is followed from its
    // first call, up to [`MAX_LIVE_DRAINS`].
    let (most, from_bytes) = if live.is_some() {
        (MAX_LIVE_DRAINS, 1)
    } else {
        (MAX_DRAINS, DRAIN_FROM_BYTES)
    };
    let mut drains: HashMap<u32, ProcessDrain> = HashMap::new();
    let give_up = |drains: &mut HashMap<u32, ProcessDrain>, why: &str| {
        if !drains.is_empty() {
            log::info!("the allocation logs convert after the program ends: {why}");
        }
        for (_, drain) in drains.drain() {
            drain.abandon();
        }
    };
    let mut last_look: Option<std::time::Instant> = None;
    let mut last_checkpoint = std::time::Instant::now();
    loop {
        if shared.stop.load(Ordering::Acquire) {
            break;
        }
        let ended = shared.ended.load(Ordering::Acquire);
        // Before any log is looked at: see [`Drain`].
        let watermark = clock
            .get()
            .now_ns
            .load(Ordering::Acquire)
            .wrapping_add(mono_offset);
        let known = match shared.processes.lock() {
            Ok(processes) => processes.clone(),
            Err(_) => break,
        };
        let look = last_look.is_none_or(|t| t.elapsed() >= LOOK_EVERY);
        if look || ended {
            last_look = Some(std::time::Instant::now());
            if let Some(why) = reason_to_give_up(&spool, ended) {
                give_up(&mut drains, &why);
                return drains;
            }
        }
        if drains.len() < most && look {
            let mut pids: Vec<u32> = known.keys().copied().collect();
            pids.sort_unstable();
            for pid in pids {
                if drains.len() >= most {
                    break;
                }
                if drains.contains_key(&pid)
                    || log_bytes_taken(&spool.join(log_name(pid, 0))) < from_bytes
                {
                    continue;
                }
                let first_generation = known[&pid].first_generation;
                match ProcessDrain::create(
                    &spool,
                    pid,
                    first_generation,
                    &recording,
                    pairing.as_ref(),
                    live.as_ref(),
                ) {
                    Ok(drain) => {
                        drains.insert(pid, drain);
                    }
                    Err(e) => {
                        give_up(&mut drains, &e.to_string());
                        return drains;
                    }
                }
            }
        }
        let mut written = 0;
        let checkpoint = last_checkpoint.elapsed() >= CHECKPOINT_EVERY;
        for (&pid, drain) in &mut drains {
            let Some(images) = known.get(&pid) else {
                continue;
            };
            let result = drain
                .step(&spool, images, mono_offset, watermark, ended)
                .and_then(|n| {
                    if checkpoint && !ended {
                        drain.conversion.checkpoint()?;
                    }
                    Ok(n)
                });
            match result {
                Ok(n) => written += n,
                Err(e) => {
                    // Most likely the file system (a table that cannot grow), which the
                    // other processes' tables share: every drain goes.
                    give_up(&mut drains, &format!("process {pid}: {e}"));
                    return drains;
                }
            }
        }
        if checkpoint {
            last_checkpoint = std::time::Instant::now();
        }
        if ended {
            break;
        }
        if written == 0 {
            std::thread::sleep(if drains.is_empty() { IDLE_UNUSED } else { IDLE });
        }
    }
    drains
}

impl Drain {
    fn start(
        spool: PathBuf,
        clock: Arc<ClockPage>,
        recording: String,
        mono_offset: u64,
        pairing: Option<PairingFactory>,
        live: Option<LiveAllocSink>,
    ) -> std::io::Result<Drain> {
        let shared = Arc::new(DrainShared::default());
        let thread_shared = shared.clone();
        let thread = std::thread::Builder::new()
            .name("fltrace-drain".into())
            .spawn(move || {
                drain_logs(
                    spool,
                    clock,
                    thread_shared,
                    recording,
                    mono_offset,
                    pairing,
                    live,
                )
            })?;
        Ok(Drain {
            shared,
            thread: Some(thread),
            drained: HashMap::new(),
        })
    }

    /// Waits for the thread, once the program has ended, and takes what it converted.
    fn join(&mut self) {
        self.shared.ended.store(true, Ordering::Release);
        if let Some(thread) = self.thread.take() {
            // A panic in the thread leaves nothing drained: the logs convert at the end.
            self.drained = thread.join().unwrap_or_default();
        }
    }
}
