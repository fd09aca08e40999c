//! The recorder's side of `record --allocs`: where the preloaded tracer writes its logs, and
//! their conversion into each process's allocation tables once the program is done.
//!
//! The logs (`fltrace_runtime_abi::alloclog`) live in a private directory beside the output
//! until conversion. Each thread's chunks are in time order; the threads' streams are merged
//! by time, so conversion holds one record per thread in memory, not the whole log. The logs
//! of large processes are converted while the program runs ([`Drain`]), the rest at the end.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap, VecDeque};
use std::ffi::OsString;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use fltrace_runtime_abi::alloclog::{
    CHUNK_HEADER_SIZE, CHUNK_SIZE, CLOCK_SIZE, Clock, Cursor, Decoder, HEADER_SIZE, MAGIC,
    MAX_FRAMES, Record,
};
use fltrace_runtime_abi::env;
use fltrace_trace::{
    AllocCall, AllocEvent, AllocTotals, AllocWriter, CodeAddr, Origin, Stack, StackWriter,
    VirtAddr, files,
};

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
}

impl std::fmt::Debug for AllocLogs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AllocLogs").field("dir", &self.dir).finish()
    }
}

/// How often the clock word moves on: the resolution of allocation times.
const TICK: std::time::Duration = std::time::Duration::from_millis(1);

impl AllocLogs {
    /// Makes the private directory under `out_dir`, owned by the user the command runs as.
    pub fn create(out_dir: &Path, credentials: Option<Credentials>) -> Result<AllocLogs, Error> {
        let dir = out_dir.join(format!(
            "{SPOOL_PREFIX}{}-{}",
            std::process::id(),
            crate::recorder::unix_now_ns()
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
            .store(crate::recorder::monotonic_now_ns(), Ordering::Relaxed);
        clock.get().magic.store(MAGIC, Ordering::Release);
        let stop = logs.stop.clone();
        let ticker = std::thread::Builder::new()
            .name("fltrace-clock".into())
            .spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    let now = crate::recorder::monotonic_now_ns();
                    clock.get().now_ns.store(now, Ordering::Relaxed);
                    std::thread::sleep(TICK);
                }
            })
            .map_err(io)?;
        logs.ticker = Some(ticker);
        Ok(logs)
    }

    /// The environment variable that turns the tracer on.
    pub fn environment(&self) -> (OsString, OsString) {
        (
            env::name(env::ALLOCS).into(),
            self.dir.join("log").into_os_string(),
        )
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
            mono_offset,
            recording,
            FullLogs::Remove,
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
            // Totals of a conversion that did not end would not be the events' sums.
            let _ = std::fs::remove_file(&totals);
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

/// Says in `pid`'s stats file how many of its stack definitions were refused, if any: a
/// line `<unix time> alloc_stacks_refused:<n>` after the recorder's own. A line that cannot
/// be written is a warning: the summary says the count too, and the tables are whole.
fn note_refused(out_dir: &Path, pid: u32, converted: Option<&Converted>) {
    use std::io::Write;
    let Some(refused) = converted.map(|c| c.refused_stacks).filter(|&n| n > 0) else {
        return;
    };
    let path = files::stats(out_dir, pid);
    let line = fltrace_trace::stats::format_line(
        crate::recorder::unix_now_ns() / 1_000_000_000,
        &[("alloc_stacks_refused", refused)],
    );
    std::fs::OpenOptions::new()
        .append(true)
        .create(true)
        .mode(0o644)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(&path)
        .and_then(|mut file| file.write_all(line.as_bytes()))
        .unwrap_or_else(|e| log::warn!("{}: {e}", path.display()));
}

/// What converting does with a log that stopped because its file system filled.
#[derive(Clone, Copy, PartialEq, Eq)]
enum FullLogs {
    /// The recorder that wrote it removes it once read, so that the tables have room.
    Remove,
    /// A command that only reads the recording (recovering a killed recorder's spool)
    /// deletes nothing in it.
    Keep,
}

/// Converts the logs of `pid` in spool directory `spool`: see [`AllocLogs::convert`].
fn convert_spooled(
    spool: &Path,
    pid: u32,
    first_generation: u32,
    out_dir: &Path,
    mono_offset: u64,
    recording: &str,
    full_logs: FullLogs,
) -> Result<Option<Converted>, Error> {
    let mut logs = Vec::new();
    for image in 0.. {
        match LiveLog::open(&spool.join(log_name(pid, image)), mono_offset, true)? {
            Some(log) => logs.push(log),
            None => break,
        }
    }
    if logs.is_empty() {
        return Ok(None);
    }
    // A log that stopped because its file system filled is in memory now: its file goes, so
    // that the tables have room (on the same file system, they would not be written at all).
    if full_logs == FullLogs::Remove {
        for log in &mut logs {
            log.remove_if_stopped();
        }
    }
    let image_start = image_starts(&files::mmaps(out_dir, pid))?;
    let origin = Origin::new(recording, pid);
    let mut conversion = Conversion::create(
        &files::allocs(out_dir, pid),
        &files::alloc_stacks(out_dir, pid),
        origin.clone(),
    )?;
    for (image, mut log) in logs.into_iter().enumerate() {
        let generation = first_generation + image as u32;
        let floor = image_start.get(&generation).copied().unwrap_or(0);
        conversion.convert_image(&mut log, generation, floor)?;
    }
    let (converted, totals) = conversion.finish()?;
    // Last: a totals file says its process's tables were written to the end.
    fltrace_trace::write_alloc_totals(&files::alloc_totals(out_dir, pid), origin, &totals)?;
    Ok(Some(converted))
}

/// The name of the log of image `image` (execs count up from 0) of process `pid`.
fn log_name(pid: u32, image: u32) -> String {
    format!("log-{pid}.{image}")
}

/// One process's tables being written from its logs, image after image.
struct Conversion {
    allocs: BackgroundWriter,
    stack_writer: StackWriter,
    stacks: Stacks,
    totals: AllocTotals,
    converted: Converted,
    /// The time of the last event written. A record a thread published late (it was held up
    /// between reading the clock and publishing) after later ones were written gets that
    /// time: the table stays in time order.
    last_ns: u64,
    /// The time of the current image's first event.
    first_ns: Option<u64>,
    frames: Box<[u64; MAX_FRAMES]>,
}

impl Conversion {
    fn create(allocs: &Path, stacks: &Path, origin: Origin) -> Result<Conversion, Error> {
        Ok(Conversion {
            allocs: BackgroundWriter::start(AllocWriter::create_for(allocs, origin.clone())?),
            stack_writer: StackWriter::create_for(stacks, origin)?,
            stacks: Stacks::default(),
            totals: AllocTotals::default(),
            converted: Converted::default(),
            last_ns: 0,
            first_ns: None,
            frames: Box::new([0; MAX_FRAMES]),
        })
    }

    /// Writes the records of `log` (image of address-space generation `generation`, whose
    /// times start no earlier than `floor`) that come before `watermark`. Returns the events
    /// written.
    fn convert(
        &mut self,
        log: &mut LiveLog,
        generation: u32,
        floor: u64,
        watermark: u64,
    ) -> Result<u64, Error> {
        if self.stacks.local.len() <= generation as usize {
            self.stacks
                .local
                .resize(generation as usize + 1, LocalIds::default());
        }
        let mut written = 0;
        while let Some(item) = log.next(watermark, &mut self.frames) {
            match item {
                Item::Stack(local_id, len) => {
                    self.stacks.define(
                        generation,
                        local_id,
                        &self.frames[..len],
                        &mut self.stack_writer,
                    )?;
                }
                Item::Event(mut event) => {
                    // An image's calls come after its exec, but the millisecond clock can
                    // put the first ones before it: each image's times start no earlier
                    // than its first mapping.
                    event.time_ns = event.time_ns.max(floor).max(self.last_ns);
                    self.last_ns = event.time_ns;
                    if event.stack_id != AllocEvent::NO_STACK {
                        event.stack_id = self.stacks.global(generation, event.stack_id);
                    }
                    self.first_ns.get_or_insert(event.time_ns);
                    self.totals.add(&event);
                    self.allocs.push(event)?;
                    written += 1;
                }
            }
        }
        self.converted.events += written;
        Ok(written)
    }

    /// Writes every record of `log`, complete, and what its header says.
    fn convert_image(
        &mut self,
        log: &mut LiveLog,
        generation: u32,
        floor: u64,
    ) -> Result<(), Error> {
        log.complete()?;
        self.convert(log, generation, floor, u64::MAX)?;
        self.end_image(log);
        Ok(())
    }

    /// Takes in what the header of `log`, converted to its end, says: the records dropped,
    /// when the tracer stopped, the chunks that did not decode.
    fn end_image(&mut self, log: &LiveLog) {
        let first_ns = self.first_ns.take();
        self.converted.dropped += log.dropped();
        if let Some(stopped) = log.stopped_ns() {
            let after = stopped
                .wrapping_add(log.mono_offset)
                .saturating_sub(first_ns.unwrap_or(u64::MAX));
            self.converted.add(&Converted {
                stopped_after_ns: Some(after),
                ..Converted::default()
            });
        }
        self.converted.corrupt_chunks += log.corrupt;
    }

    /// Makes what was written so far readable, should the conversion never end.
    fn checkpoint(&mut self) -> Result<(), Error> {
        self.allocs.checkpoint()
    }

    /// Finishes both tables; returns what was converted and the totals per (stack, call,
    /// size).
    fn finish(mut self) -> Result<(Converted, Vec<fltrace_trace::AllocTotal>), Error> {
        self.allocs.finish()?;
        self.stack_writer.finish()?;
        self.converted.stacks = self.stacks.next;
        self.converted.refused_stacks = self.stacks.refused;
        Ok((self.converted, self.totals.totals()))
    }
}
/// The largest allocation log read: far above a long run's (about 6 bytes a call).
const LOG_CAP: u64 = 64 << 30;

/// The name of the metadata file in a spool directory (the tracer's files start with `log`).
const METADATA_FILE: &str = "recording";

/// What converting a spool's logs needs that is not in them, written when the recording
/// starts.
#[derive(Debug, Clone, PartialEq, Eq)]
struct SpoolMetadata {
    /// The recording id of the tables.
    recording: String,
    /// CLOCK_MONOTONIC to Unix-epoch nanoseconds.
    mono_offset: u64,
}

impl SpoolMetadata {
    fn to_text(&self) -> String {
        format!(
            "recording {}\nmono_offset {}\n",
            self.recording, self.mono_offset
        )
    }

    fn parse(text: &str) -> Option<SpoolMetadata> {
        let mut recording = None;
        let mut mono_offset = None;
        for line in text.lines() {
            match line.split_once(' ') {
                Some(("recording", value)) if !value.is_empty() => {
                    recording = Some(value.to_owned());
                }
                Some(("mono_offset", value)) => mono_offset = value.parse().ok(),
                _ => {}
            }
        }
        Some(SpoolMetadata {
            recording: recording?,
            mono_offset: mono_offset?,
        })
    }
}

/// Events handed in batches to a thread that encodes them: decoding and merging the logs and
/// encoding Parquet each take about half the time of a conversion, so on two cores they
/// overlap.
struct BackgroundWriter {
    batch: Vec<AllocEvent>,
    sender: Option<std::sync::mpsc::SyncSender<ToWriter>>,
    thread: Option<std::thread::JoinHandle<Result<(), Error>>>,
}

/// What the writer thread is given.
enum ToWriter {
    Events(Vec<AllocEvent>),
    /// Write what was given so far and a checkpoint.
    Checkpoint,
}

/// Events per batch handed to the writer thread.
const BATCH: usize = 1 << 16;

impl BackgroundWriter {
    fn start(mut writer: AllocWriter) -> BackgroundWriter {
        let (sender, receiver) = std::sync::mpsc::sync_channel::<ToWriter>(4);
        let thread = std::thread::spawn(move || {
            for message in receiver {
                match message {
                    ToWriter::Events(batch) => {
                        for event in batch {
                            writer.push(event)?;
                        }
                    }
                    ToWriter::Checkpoint => writer.checkpoint()?,
                }
            }
            Ok(writer.finish()?)
        });
        BackgroundWriter {
            batch: Vec::with_capacity(BATCH),
            sender: Some(sender),
            thread: Some(thread),
        }
    }

    fn push(&mut self, event: AllocEvent) -> Result<(), Error> {
        self.batch.push(event);
        if self.batch.len() == BATCH {
            let batch = std::mem::replace(&mut self.batch, Vec::with_capacity(BATCH));
            self.send(ToWriter::Events(batch))?;
        }
        Ok(())
    }

    /// Has every event pushed so far written, and a checkpoint after them.
    fn checkpoint(&mut self) -> Result<(), Error> {
        if !self.batch.is_empty() {
            let batch = std::mem::replace(&mut self.batch, Vec::with_capacity(BATCH));
            self.send(ToWriter::Events(batch))?;
        }
        self.send(ToWriter::Checkpoint)
    }

    fn send(&mut self, message: ToWriter) -> Result<(), Error> {
        match &self.sender {
            // The writer only hangs up after an error, which `finish` returns.
            Some(sender) if sender.send(message).is_err() => self.finish(),
            _ => Ok(()),
        }
    }

    /// Writes what is left and waits for the writer.
    fn finish(&mut self) -> Result<(), Error> {
        if !self.batch.is_empty()
            && let Some(sender) = &self.sender
        {
            let _ = sender.send(ToWriter::Events(std::mem::take(&mut self.batch)));
        }
        self.sender = None;
        match self.thread.take() {
            Some(thread) => thread.join().unwrap_or_else(|_| {
                Err(Error::Kernel {
                    what: "the allocation table writer",
                    source: std::io::Error::other("it panicked"),
                    hint: "",
                })
            }),
            None => Ok(()),
        }
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

/// The name of a spool directory, before `<recorder pid>-<unix ns>`.
pub const SPOOL_PREFIX: &str = ".fltrace-allocs-";

/// Opens spool directory `dir` (never through a link) and takes its lock; `try_only` fails
/// at once when another process holds it.
fn lock_spool(dir: &Path, try_only: bool) -> std::io::Result<std::fs::File> {
    use std::os::fd::AsRawFd;
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_DIRECTORY | libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(dir)?;
    let mode = if try_only {
        libc::LOCK_EX | libc::LOCK_NB
    } else {
        libc::LOCK_EX
    };
    // SAFETY: flock on a descriptor we own; the lock goes with it.
    if unsafe { libc::flock(file.as_raw_fd(), mode) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(file)
}

/// A process whose allocations a killed recorder left in its spool, now in its tables.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Recovered {
    /// The spool they were in (now removed).
    pub spool: PathBuf,
    /// The process.
    pub pid: u32,
    /// What its conversion found.
    pub converted: Converted,
}

/// What recovery does with a stale spool's logs once they are in the tables.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SpoolLogs {
    /// Left where they are: a command that only reads a recording deletes nothing in it.
    Keep,
    /// Removed (by `record`, which writes in the directory anyway).
    Remove,
}

/// Converts the spools of recorders that are gone (killed before they could convert them)
/// into their recordings' allocation tables, then (with [`SpoolLogs::Remove`]) removes what
/// those recorders wrote there: a
/// spool whose lock is free and whose recorder pid no longer runs. Only a spool fltrace made
/// is touched: a directory (not a link) with the spool's name, owned by the user running
/// this command (or, for root, by the owner of `out_dir`), holding its metadata file. Only
/// the files a recorder writes there are removed, then the directory if that empties it;
/// anything else is left and named in a warning. A process whose tables exist already is
/// left as it is; a spool that does not convert loses its logs, with a warning. Returns the
/// processes recovered.
pub fn recover_stale_spools(out_dir: &Path, logs: SpoolLogs) -> Vec<Recovered> {
    use std::os::unix::fs::MetadataExt;
    let mut recovered = Vec::new();
    let Ok(entries) = std::fs::read_dir(out_dir) else {
        return recovered;
    };
    // SAFETY: geteuid cannot fail.
    let user = unsafe { libc::geteuid() };
    let dir_owner = std::fs::metadata(out_dir).map(|m| m.uid()).ok();
    let writable = std::ffi::CString::new(out_dir.as_os_str().as_encoded_bytes())
        // SAFETY: a NUL-terminated path.
        .is_ok_and(|dir| unsafe { libc::access(dir.as_ptr(), libc::W_OK) } == 0);
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(recorder) = name
            .to_str()
            .and_then(|n| n.strip_prefix(SPOOL_PREFIX))
            .and_then(|rest| rest.split('-').next())
            .and_then(|pid| pid.parse::<i32>().ok())
        else {
            continue;
        };
        // Between making its spool and locking it a live recorder holds no lock yet, but its
        // pid runs; a dead pid with a free lock is certainly stale.
        // SAFETY: signal 0 only checks for existence.
        let alive = unsafe { libc::kill(recorder, 0) } == 0
            || std::io::Error::last_os_error().raw_os_error() == Some(libc::EPERM);
        if alive {
            continue;
        }
        let path = entry.path();
        // `symlink_metadata`: a link named like a spool is not one.
        let Ok(metadata) = std::fs::symlink_metadata(&path) else {
            continue;
        };
        let owner_ok = metadata.uid() == user || (user == 0 && Some(metadata.uid()) == dir_owner);
        if !metadata.is_dir() || !owner_ok {
            log::warn!(
                "left {} alone: named like an fltrace allocation spool, but not a directory of yours",
                path.display()
            );
            continue;
        }
        let spool_metadata = match read_spool_metadata(&path) {
            Ok(metadata) => metadata,
            Err(why) => {
                log::warn!(
                    "left {} alone: named like an fltrace allocation spool, but {why}{}",
                    path.display(),
                    contents_note(&path)
                );
                continue;
            }
        };
        if !writable {
            // Its tables could not be written: the logs stay for a command that can.
            log::warn!(
                "left {}, the allocation logs of a recorder that was killed: they are converted by the next fltrace command run by a user who can write {}",
                path.display(),
                out_dir.display()
            );
            continue;
        }
        // Held while converting: another fltrace recovering the same spool skips it.
        let Ok(_lock) = lock_spool(&path, true) else {
            continue;
        };
        let why_not = recover_spool(&path, &spool_metadata, out_dir, &mut recovered).err();
        if logs == SpoolLogs::Keep {
            if let Some(reason) = why_not {
                log::warn!(
                    "the allocation logs in {}, left by a recorder that was killed, are lost: {reason}",
                    path.display()
                );
            }
            continue;
        }
        let foreign = remove_spool_files(&path);
        if !foreign.is_empty() {
            log::warn!(
                "left {}: it holds files fltrace did not write ({}); remove them yourself",
                path.display(),
                foreign.join(", ")
            );
        }
        match why_not {
            Some(reason) => log::warn!(
                "removed the logs in {}, left by a recorder that was killed: {reason}",
                path.display()
            ),
            None => log::info!(
                "removed the logs in {}, left by a recorder that was killed, once converted",
                path.display()
            ),
        }
    }
    recovered
}

/// The spool's metadata, or why the directory is not taken for a spool.
fn read_spool_metadata(spool: &Path) -> Result<SpoolMetadata, String> {
    match files::read_capped(&spool.join(METADATA_FILE), METADATA_CAP) {
        Ok(bytes) => std::str::from_utf8(&bytes)
            .ok()
            .and_then(SpoolMetadata::parse)
            .ok_or_else(|| format!("its `{METADATA_FILE}` file is not a spool's metadata")),
        Err(fltrace_trace::Error::Io { source, .. })
            if source.kind() == std::io::ErrorKind::NotFound =>
        {
            Err(format!("it has no `{METADATA_FILE}` metadata file"))
        }
        Err(e) => Err(format!("its metadata is unreadable ({e})")),
    }
}

/// The largest metadata file: two short lines.
const METADATA_CAP: u64 = 4096;

/// ` (it holds: a, b)`: the first names in a directory left alone, so the user can judge it.
fn contents_note(dir: &Path) -> String {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return String::new();
    };
    let mut names: Vec<String> = entries
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    if names.is_empty() {
        return String::new();
    }
    names.sort();
    let more = names.len().saturating_sub(5);
    names.truncate(5);
    let more = if more > 0 {
        format!(" and {more} more")
    } else {
        String::new()
    };
    format!(" (it holds: {}{more})", names.join(", "))
}

/// Whether `name` is one of the files a recorder and its tracer write in a spool: the
/// metadata, the clock page, `log-<pid>.<image>`, the tables of a drain.
fn is_spool_file(name: &str) -> bool {
    let numbered = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    let drain_table = |prefix: &str| {
        name.strip_prefix(prefix)
            .and_then(|rest| rest.strip_suffix(".parquet"))
            .is_some_and(numbered)
    };
    name == METADATA_FILE
        || name == "log-clock"
        || drain_table(DRAIN_ALLOCS)
        || drain_table(DRAIN_STACKS)
        || name
            .strip_prefix("log-")
            .and_then(|rest| rest.split_once('.'))
            .is_some_and(|(pid, image)| numbered(pid) && numbered(image))
}

/// Removes from stale spool `spool` the regular files a recorder writes there, then the
/// directory if that empties it. Returns the names of what was left.
fn remove_spool_files(spool: &Path) -> Vec<String> {
    let mut left = Vec::new();
    let Ok(entries) = std::fs::read_dir(spool) else {
        return left;
    };
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        let regular = entry.file_type().is_ok_and(|t| t.is_file());
        if !(regular && is_spool_file(&name) && std::fs::remove_file(entry.path()).is_ok()) {
            left.push(name);
        }
    }
    left.sort();
    if left.is_empty() {
        let _ = std::fs::remove_dir(spool);
    }
    left
}

/// Converts each process's logs in stale spool `spool` unless its tables exist; says why
/// not when the spool cannot be converted.
fn recover_spool(
    spool: &Path,
    metadata: &SpoolMetadata,
    out_dir: &Path,
    recovered: &mut Vec<Recovered>,
) -> Result<(), String> {
    let mut pids: Vec<u32> = std::fs::read_dir(spool)
        .map_err(|e| format!("it is unreadable ({e})"))?
        .flatten()
        .filter_map(|e| {
            let name = e.file_name();
            let (pid, _image) = name.to_str()?.strip_prefix("log-")?.split_once('.')?;
            pid.parse().ok()
        })
        .collect();
    pids.sort_unstable();
    pids.dedup();
    for pid in pids {
        if files::allocs(out_dir, pid).exists() || files::alloc_stacks(out_dir, pid).exists() {
            continue;
        }
        // The first image the library ran in: the command's first (0), or the parent's at a
        // fork, which is the child's first mapping's generation too.
        let first_generation = fltrace_trace::read_mappings(&files::mmaps(out_dir, pid))
            .ok()
            .and_then(|mappings| mappings.iter().map(|m| m.generation).min())
            .unwrap_or(0);
        match convert_spooled(
            spool,
            pid,
            first_generation,
            out_dir,
            metadata.mono_offset,
            &metadata.recording,
            FullLogs::Keep,
        ) {
            Ok(Some(converted)) => {
                log::warn!(
                    "recovered {} allocations of process {pid} from the spool of a killed recorder{}",
                    converted.events,
                    refused_note(&converted)
                );
                // A recording its recorder finished has its stats checksummed: the warning
                // is all that says it then.
                let finished = fltrace_trace::checksums::path(out_dir, pid).exists();
                if !finished {
                    note_refused(out_dir, pid, Some(&converted));
                }
                recovered.push(Recovered {
                    spool: spool.to_owned(),
                    pid,
                    converted,
                });
            }
            Ok(None) => {}
            Err(e) => {
                // Half-written tables would hide the loss.
                let _ = std::fs::remove_file(files::allocs(out_dir, pid));
                let _ = std::fs::remove_file(files::alloc_stacks(out_dir, pid));
                let _ = std::fs::remove_file(files::alloc_totals(out_dir, pid));
                return Err(format!("the logs of process {pid} do not convert ({e})"));
            }
        }
    }
    Ok(())
}

/// `; <n> stack definitions refused ...` when a conversion refused some.
fn refused_note(converted: &Converted) -> String {
    if converted.refused_stacks == 0 {
        return String::new();
    }
    format!(
        "; {} stack definitions refused (more than {STACK_FRAMES_CAP} frames), their calls kept without a stack",
        converted.refused_stacks
    )
}

/// The time each address-space generation of a process began: its first mapping.
fn image_starts(mmaps: &Path) -> Result<HashMap<u32, u64>, Error> {
    let mut starts: HashMap<u32, u64> = HashMap::new();
    if !mmaps.is_file() {
        return Ok(starts);
    }
    for mapping in fltrace_trace::read_mappings(mmaps)? {
        let start = starts.entry(mapping.generation).or_insert(mapping.time_ns);
        *start = (*start).min(mapping.time_ns);
    }
    Ok(starts)
}

/// What one process's conversion found.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Converted {
    /// Allocation events written.
    pub events: u64,
    /// Distinct stacks written.
    pub stacks: u32,
    /// Records the tracer could not write (its log could not grow).
    pub dropped: u64,
    /// Chunks whose bytes did not decode (cut short at the first bad record).
    pub corrupt_chunks: u64,
    /// Stack definitions refused: the frames kept per process are capped (a traced program
    /// could define any number); their calls are kept without a stack.
    pub refused_stacks: u64,
    /// When a log could not grow and its tracer stopped for good: nanoseconds after that
    /// log's first call (the earliest, over processes). Calls after it were not recorded.
    pub stopped_after_ns: Option<u64>,
    /// With `-p`: what the uprobes were placed on, `malloc, free, ... in libjemalloc.so.2`.
    pub probed: Option<String>,
}

impl Converted {
    /// Adds another process's figures.
    pub fn add(&mut self, other: &Converted) {
        self.events += other.events;
        self.stacks += other.stacks;
        self.dropped += other.dropped;
        self.corrupt_chunks += other.corrupt_chunks;
        self.refused_stacks += other.refused_stacks;
        self.stopped_after_ns = match (self.stopped_after_ns, other.stopped_after_ns) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
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

/// When the tracer writing `log` stopped because the log could not grow (its clock).
fn log_stopped_ns(log: &[u8]) -> Option<u64> {
    if log.len() < HEADER_SIZE || read_word(log, 0) != MAGIC {
        return None;
    }
    Some(read_word(log, 32)).filter(|&t| t != 0)
}

/// The word at `offset` of a log that its writers may still be changing; 0 beyond its end.
/// Acquire: the bytes a chunk's `used` publishes are visible once it is read.
fn read_word(log: &[u8], offset: usize) -> u64 {
    let Some(bytes) = log.get(offset..offset + 8) else {
        return 0;
    };
    // SAFETY: 8 readable bytes; a volatile read, as the traced program may be storing to
    // the word (an aligned store, so the read sees the old or the new value).
    let word = unsafe { std::ptr::read_volatile(bytes.as_ptr().cast::<[u8; 8]>()) };
    std::sync::atomic::fence(Ordering::Acquire);
    u64::from_ne_bytes(word)
}

/// The bytes of a log: mapped, so that it can be followed as it grows, or copied (a log that
/// stopped on a full file system, whose file goes before the tables are written) into
/// anonymous memory that holds only the extents with data.
enum LogBytes {
    Mapped(memmap2::Mmap),
    Copied(memmap2::MmapMut),
    /// A file with nothing in it yet.
    Empty,
}

impl LogBytes {
    fn get(&self) -> &[u8] {
        match self {
            LogBytes::Mapped(map) => map,
            LogBytes::Copied(map) => map,
            LogBytes::Empty => &[],
        }
    }
}

/// One image's log, read as its threads write it (see [`Drain`] for why the order of the
/// events handed out is their time order) or once they are done.
///
/// Each thread's chunks are in time order; the threads' streams are merged by time, so this
/// holds one record per thread, not the log.
struct LiveLog {
    path: PathBuf,
    file: std::fs::File,
    bytes: LogBytes,
    /// CLOCK_MONOTONIC to the tables' Unix-epoch times.
    mono_offset: u64,
    /// The offset of the next chunk not yet given to its thread's stream.
    scan: usize,
    streams: Vec<Stream>,
    by_tid: HashMap<u32, usize>,
    /// The streams that have a record ahead, by its time.
    heap: BinaryHeap<Reverse<(u64, usize)>>,
    /// Chunks whose bytes did not decode (cut short at the first bad record).
    corrupt: u64,
    /// Where stack definitions are decoded, before their stream keeps their frames.
    scratch: Box<[u64; MAX_FRAMES]>,
    /// Whether every writer is gone: a chunk with nothing published is skipped, not waited
    /// for, and a thread's last chunk ends where its bytes do.
    complete: bool,
}

/// One thread's records, decoded one ahead.
struct Stream {
    tid: u32,
    /// The offsets of its chunks not yet read to the end, in file order.
    chunks: VecDeque<usize>,
    /// Where decoding stopped in the first of them.
    state: (usize, Cursor),
    /// The first chunk did not decode beyond `state`.
    cut: bool,
    /// CLOCK_MONOTONIC time of the records being decoded.
    time: u64,
    /// The next record, decoded ahead so the merge knows its time.
    ahead: Option<(u64, Item)>,
    /// Time of the item handed out last.
    last_time: u64,
    /// The frames of the stack definition ahead, if that is what is ahead: only those, so
    /// that a log naming many threads costs little per thread.
    frames: Vec<u64>,
}

/// Bytes of a chunk available for records.
const RECORD_SPACE: usize = CHUNK_SIZE - CHUNK_HEADER_SIZE;

impl LiveLog {
    /// Opens the log at `path`; `None` if there is none. `complete`: its writers are gone.
    fn open(path: &Path, mono_offset: u64, complete: bool) -> Result<Option<LiveLog>, Error> {
        let file = match std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
            .open(path)
        {
            Ok(file) => file,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(source) => {
                return Err(fltrace_trace::Error::Io {
                    path: path.to_owned(),
                    source,
                }
                .into());
            }
        };
        let mut log = LiveLog {
            path: path.to_owned(),
            file,
            bytes: LogBytes::Empty,
            mono_offset,
            scan: HEADER_SIZE,
            streams: Vec::new(),
            by_tid: HashMap::new(),
            heap: BinaryHeap::new(),
            corrupt: 0,
            scratch: Box::new([0; MAX_FRAMES]),
            complete,
        };
        log.refresh()?;
        Ok(Some(log))
    }

    fn io_error(&self, source: std::io::Error) -> Error {
        fltrace_trace::Error::Io {
            path: self.path.clone(),
            source,
        }
        .into()
    }

    /// Maps what the file holds now, and hands the chunks published since the last look to
    /// their threads' streams.
    fn refresh(&mut self) -> Result<(), Error> {
        if !matches!(self.bytes, LogBytes::Copied(_)) {
            let len = self.file.metadata().map_err(|e| self.io_error(e))?.len();
            // A log is a shared mapping that only grows; the cap refuses a file planted in
            // its place that could not be one.
            if len > LOG_CAP {
                return Err(fltrace_trace::Error::Format {
                    path: self.path.clone(),
                    message: format!("{len} bytes, more than any allocation log"),
                }
                .into());
            }
            if len > self.bytes.get().len() as u64 {
                // SAFETY: a read-only shared mapping of a file that only grows (the tracer
                // allocates its blocks before writing them), read within its length.
                let map =
                    unsafe { memmap2::Mmap::map(&self.file) }.map_err(|e| self.io_error(e))?;
                self.bytes = LogBytes::Mapped(map);
            }
        }
        let log = self.bytes.get();
        if log.len() < HEADER_SIZE || read_word(log, 0) != MAGIC {
            if self.complete {
                return Err(fltrace_trace::Error::Format {
                    path: self.path.clone(),
                    message: "not an fltrace allocation log".into(),
                }
                .into());
            }
            // Made a moment ago: its header comes next.
            return Ok(());
        }
        let end = (read_word(log, 16) as usize).min(log.len());
        while self.scan + CHUNK_HEADER_SIZE <= end {
            let offset = self.scan;
            if !self.complete && offset + CHUNK_SIZE > log.len() {
                break;
            }
            // Chunks in a hole of the file hold nothing; reading their headers would map
            // the file's pages around them (readahead), a gigabyte for a sparse gigabyte.
            if self.complete
                && let Some(data) = next_data(&self.file, offset)
                && data >= offset + CHUNK_SIZE
            {
                self.scan += (data.min(end) - offset).max(CHUNK_SIZE) / CHUNK_SIZE * CHUNK_SIZE;
                continue;
            }
            // A thread publishes its first record as soon as it takes a chunk. Until the
            // writers are gone, one with nothing yet stops the look here: its thread's
            // earlier chunks must be seen before its later ones.
            if read_word(log, offset + 8) == 0 {
                if !self.complete {
                    break;
                }
                self.scan += CHUNK_SIZE;
                continue;
            }
            let tid = read_word(log, offset) as u32;
            let i = *self.by_tid.entry(tid).or_insert_with(|| {
                self.streams.push(Stream {
                    tid,
                    chunks: VecDeque::new(),
                    state: (0, Cursor::default()),
                    cut: false,
                    time: 0,
                    ahead: None,
                    last_time: 0,
                    frames: Vec::new(),
                });
                self.streams.len() - 1
            });
            self.streams[i].chunks.push_back(offset);
            self.scan += CHUNK_SIZE;
        }
        for i in 0..self.streams.len() {
            if self.streams[i].ahead.is_none() {
                self.advance(i);
            }
        }
        Ok(())
    }

    /// Marks the log as complete (its writers are gone) and reads it to its end.
    fn complete(&mut self) -> Result<(), Error> {
        self.complete = true;
        self.refresh()
    }

    /// A stopped log (its file system filled) is copied into memory and its file removed,
    /// so that the tables have room. Only the chunks handed out are copied, and of them only
    /// the extents that hold data: the file's length and the header's word come from the
    /// traced program, which could plant a sparse file of 64 GiB. A log that cannot be
    /// copied stays where it is.
    fn remove_if_stopped(&mut self) {
        let log = self.bytes.get();
        if log_stopped_ns(log).is_none() {
            return;
        }
        let end = (read_word(log, 16) as usize).clamp(HEADER_SIZE.min(log.len()), log.len());
        let mut copy = match memmap2::MmapOptions::new()
            .len(end.max(1))
            .no_reserve_swap()
            .map_anon()
        {
            Ok(copy) => copy,
            Err(e) => {
                log::debug!("{} stays: {e}", self.path.display());
                return;
            }
        };
        for (start, stop) in data_extents(&self.file, end) {
            copy[start..stop].copy_from_slice(&log[start..stop]);
        }
        self.bytes = LogBytes::Copied(copy);
        let _ = std::fs::remove_file(&self.path);
    }

    /// Records the tracer could not write (its log could not grow).
    fn dropped(&self) -> u64 {
        read_word(self.bytes.get(), 24)
    }

    /// When the tracer stopped because the log could not grow, if it did.
    fn stopped_ns(&self) -> Option<u64> {
        log_stopped_ns(self.bytes.get())
    }

    /// Decodes stream `i`'s next item into `ahead` and queues it; leaves it without one when
    /// its published records are all read.
    fn advance(&mut self, i: usize) {
        let log = self.bytes.get();
        let stream = &mut self.streams[i];
        let scratch = &mut self.scratch;
        loop {
            let Some(&chunk) = stream.chunks.front() else {
                return;
            };
            let start = chunk + CHUNK_HEADER_SIZE;
            let used = (read_word(log, chunk + 8) as usize)
                .min(RECORD_SPACE)
                .min(log.len().saturating_sub(start));
            if stream.cut || stream.state.0 >= used {
                // Read to the end: a chunk is done once its thread has taken another (the
                // later chunk's `used` was read first, so this one's is final) or its
                // writers are gone.
                if stream.chunks.len() == 1 && !self.complete {
                    return;
                }
                stream.chunks.pop_front();
                stream.state = (0, Cursor::default());
                stream.cut = false;
                continue;
            }
            let mut decoder = Decoder::resume(&log[start..start + used], stream.state);
            let record = decoder.next(scratch);
            stream.state = decoder.state();
            match record {
                None | Some(Err(_)) => {
                    self.corrupt += 1;
                    stream.cut = true;
                }
                Some(Ok(Record::Time(time))) => stream.time = time,
                Some(Ok(Record::Stack { id, len })) => {
                    // A stream has one item ahead at a time, so its definitions always come
                    // out before its next event; the time only places it among other threads.
                    let time = stream.last_time;
                    stream.frames.clear();
                    stream.frames.extend_from_slice(&scratch[..len]);
                    stream.ahead = Some((time, Item::Stack(id, len)));
                    self.heap.push(Reverse((time, i)));
                    return;
                }
                Some(Ok(Record::Call(record))) => {
                    let Some(call) = AllocCall::from_u8(record.call) else {
                        self.corrupt += 1;
                        stream.cut = true;
                        continue;
                    };
                    // Times are the clock's, about a millisecond coarse; a thread's calls
                    // never go back in time, so its order is kept.
                    let time_ns = stream
                        .time
                        .wrapping_add(self.mono_offset)
                        .max(stream.last_time);
                    stream.ahead = Some((
                        time_ns,
                        Item::Event(AllocEvent {
                            time_ns,
                            tid: stream.tid,
                            call,
                            addr: VirtAddr::new(record.addr),
                            size: record.size,
                            old_addr: VirtAddr::new(record.old_addr),
                            detail: record.detail,
                            stack_id: record.stack_id,
                        }),
                    ));
                    self.heap.push(Reverse((time_ns, i)));
                    return;
                }
            }
        }
    }

    /// The next item in time order if it comes before `watermark`.
    fn next(&mut self, watermark: u64, frames: &mut [u64; MAX_FRAMES]) -> Option<Item> {
        let &Reverse((time, i)) = self.heap.peek()?;
        if time >= watermark {
            return None;
        }
        self.heap.pop();
        let (time, item) = self.streams[i].ahead.take()?;
        if let Item::Stack(_, len) = item {
            frames[..len].copy_from_slice(&self.streams[i].frames[..len]);
            self.streams[i].frames = Vec::new();
        }
        self.streams[i].last_time = time;
        self.advance(i);
        Some(item)
    }
}

/// The offset of the first data in `file` at or after `from`; `usize::MAX` when there is
/// none, `None` when the file system cannot tell.
fn next_data(file: &std::fs::File, from: usize) -> Option<usize> {
    use std::os::fd::AsRawFd;
    // SAFETY: lseek on a descriptor we own; the offset it returns is checked.
    let at = unsafe { libc::lseek(file.as_raw_fd(), from as libc::off_t, libc::SEEK_DATA) };
    match usize::try_from(at) {
        Ok(at) => Some(at),
        Err(_) if std::io::Error::last_os_error().raw_os_error() == Some(libc::ENXIO) => {
            Some(usize::MAX)
        }
        Err(_) => None,
    }
}

/// The extents of `file` below `end` that hold data (`SEEK_DATA`/`SEEK_HOLE`); the whole
/// range where the file system cannot tell.
fn data_extents(file: &std::fs::File, end: usize) -> Vec<(usize, usize)> {
    use std::os::fd::AsRawFd;
    let seek = |from: usize, whence| {
        // SAFETY: lseek on a descriptor we own; the offset it returns is checked.
        let at = unsafe { libc::lseek(file.as_raw_fd(), from as libc::off_t, whence) };
        usize::try_from(at).ok()
    };
    let mut extents = Vec::new();
    let mut at = 0;
    while at < end {
        let Some(data) = seek(at, libc::SEEK_DATA) else {
            // ENXIO: no data after `at`; any other error: the file system cannot tell.
            if std::io::Error::last_os_error().raw_os_error() != Some(libc::ENXIO) {
                extents.push((at, end));
            }
            break;
        };
        if data >= end {
            break;
        }
        let hole = seek(data, libc::SEEK_HOLE).unwrap_or(end).min(end);
        if hole <= data {
            extents.push((data, end));
            break;
        }
        extents.push((data, hole));
        at = hole;
    }
    extents
}

/// Stack ids: the log's, per image, to the table's, deduplicated by frames.
///
/// The log's ids come from the traced program, so neither an id's value nor the number of
/// frames defined is trusted: the dense table of an image grows only in step with the
/// definitions it holds (ids out of step go to a map), and the frames kept are capped
/// ([`STACK_FRAMES_CAP`]); a definition beyond the cap is refused and counted.
#[derive(Default)]
struct Stacks {
    /// By image, the table's id of each of the log's ids (ids are dense from 0).
    local: Vec<LocalIds>,
    by_frames: HashMap<(u32, Vec<u64>), u32>,
    next: u32,
    /// Frames held in `by_frames`.
    frames_kept: usize,
    /// Definitions refused: their frames would have passed [`STACK_FRAMES_CAP`].
    refused: u64,
}

/// One image's ids: dense while they come in order, as the tracer hands them out.
#[derive(Default, Clone)]
struct LocalIds {
    dense: Vec<u32>,
    /// Ids too far beyond the definitions seen for the dense table.
    sparse: HashMap<u32, u32>,
    defined: usize,
}

/// The most stack frames kept per process: far above a real program's distinct stacks
/// (100,000 stacks of 100 frames are 10 million), and 128 MiB of frames at most.
const STACK_FRAMES_CAP: usize = 1 << 24;

/// How far beyond twice its definitions an image's dense id table may grow: the ids of
/// threads that define their stacks out of time order stay dense.
const DENSE_SLACK: usize = 1 << 16;

impl Stacks {
    fn define(
        &mut self,
        generation: u32,
        local_id: u32,
        frames: &[u64],
        writer: &mut StackWriter,
    ) -> Result<(), Error> {
        let key = (generation, frames.to_vec());
        let id = match self.by_frames.get(&key) {
            Some(&id) => id,
            None if self.frames_kept + frames.len() > STACK_FRAMES_CAP => {
                self.refused += 1;
                AllocEvent::NO_STACK
            }
            None => {
                let id = self.next;
                self.next += 1;
                writer.push(Stack {
                    end: fltrace_trace::StackEnd::Unknown,
                    id,
                    generation,
                    frames: key.1.iter().map(|&frame| CodeAddr::new(frame)).collect(),
                })?;
                self.frames_kept += frames.len();
                self.by_frames.insert(key, id);
                id
            }
        };
        let image = &mut self.local[generation as usize];
        image.defined += 1;
        let slot = local_id as usize;
        if slot < image.dense.len() {
            image.dense[slot] = id;
        } else if slot < DENSE_SLACK + 2 * image.defined {
            image.dense.resize(slot + 1, AllocEvent::NO_STACK);
            image.dense[slot] = id;
        } else {
            image.sparse.insert(local_id, id);
        }
        Ok(())
    }

    fn global(&self, generation: u32, local_id: u32) -> u32 {
        let Some(image) = self.local.get(generation as usize) else {
            return AllocEvent::NO_STACK;
        };
        match image.dense.get(local_id as usize) {
            Some(&id) => id,
            None => image
                .sparse
                .get(&local_id)
                .copied()
                .unwrap_or(AllocEvent::NO_STACK),
        }
    }
}

enum Item {
    Stack(u32, usize),
    Event(AllocEvent),
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
/// A process's logs are followed once its first log holds this much: smaller ones convert
/// at the end in moments.
const DRAIN_FROM_BYTES: u64 = 1 << 20;
/// How often new large logs are looked for.
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
    ) -> Result<ProcessDrain, Error> {
        let allocs_path = spool.join(format!("{DRAIN_ALLOCS}{pid}.parquet"));
        let stacks_path = spool.join(format!("{DRAIN_STACKS}{pid}.parquet"));
        let conversion =
            Conversion::create(&allocs_path, &stacks_path, Origin::new(recording, pid))?;
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
            let converted = self.conversion.convert(log, generation, floor, watermark)?;
            written += converted;
            if !ended {
                self.live_events += converted;
            }
            self.floors.insert(generation, floor);
            if !complete {
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
        let (converted, totals) = self.conversion.finish()?;
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
        // Last: a totals file says its process's tables were written to the end.
        fltrace_trace::write_alloc_totals(
            &files::alloc_totals(out_dir, self.pid),
            origin,
            &totals,
        )?;
        Ok(Some(converted))
    }

    /// Gives up: the tables in the spool go, and the logs convert at the end.
    fn abandon(self) {
        let (allocs, stacks) = (self.allocs_path.clone(), self.stacks_path.clone());
        drop(self);
        let _ = std::fs::remove_file(allocs);
        let _ = std::fs::remove_file(stacks);
    }
}

/// The names of the tables a drain writes in the spool, before `<pid>.parquet`.
const DRAIN_ALLOCS: &str = "allocs-";
const DRAIN_STACKS: &str = "stacks-";

/// Whether any log of `pid` in `spool` stopped because its file system filled.
fn any_log_stopped(spool: &Path, pid: u32) -> bool {
    use std::os::unix::fs::FileExt;
    (0..)
        .map_while(|image| std::fs::File::open(spool.join(log_name(pid, image))).ok())
        .any(|file| {
            let mut header = [0u8; 40];
            file.read_exact_at(&mut header, 0).is_ok() && log_stopped_ns_of_header(&header)
        })
}

/// [`log_stopped_ns`] of the first 40 bytes of a log.
fn log_stopped_ns_of_header(header: &[u8; 40]) -> bool {
    let word = |offset: usize| {
        let mut bytes = [0u8; 8];
        bytes.copy_from_slice(&header[offset..offset + 8]);
        u64::from_ne_bytes(bytes)
    };
    word(0) == MAGIC && word(32) != 0
}

/// Bytes taken in the log at `path` (the chunks handed out), 0 without one.
fn log_bytes_taken(path: &Path) -> u64 {
    use std::os::unix::fs::FileExt;
    let mut header = [0u8; 24];
    match std::fs::File::open(path) {
        Ok(file) if file.read_exact_at(&mut header, 0).is_ok() => {
            let mut next = [0u8; 8];
            next.copy_from_slice(&header[16..24]);
            u64::from_ne_bytes(next)
        }
        _ => 0,
    }
}

/// The drain thread: see [`Drain`]. Returns the processes it converted so far.
fn drain_logs(
    spool: PathBuf,
    clock: Arc<ClockPage>,
    shared: Arc<DrainShared>,
    recording: String,
    mono_offset: u64,
) -> HashMap<u32, ProcessDrain> {
    let mut drains: HashMap<u32, ProcessDrain> = HashMap::new();
    let mut given_up: std::collections::HashSet<u32> = Default::default();
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
        if drains.len() < MAX_DRAINS && last_look.is_none_or(|t| t.elapsed() >= LOOK_EVERY) {
            last_look = Some(std::time::Instant::now());
            let mut pids: Vec<u32> = known.keys().copied().collect();
            pids.sort_unstable();
            for pid in pids {
                if drains.len() >= MAX_DRAINS {
                    break;
                }
                if drains.contains_key(&pid)
                    || given_up.contains(&pid)
                    || log_bytes_taken(&spool.join(log_name(pid, 0))) < DRAIN_FROM_BYTES
                {
                    continue;
                }
                let first_generation = known[&pid].first_generation;
                match ProcessDrain::create(&spool, pid, first_generation, &recording) {
                    Ok(drain) => {
                        drains.insert(pid, drain);
                    }
                    Err(e) => {
                        log::debug!("allocations of process {pid} convert at the end: {e}");
                        given_up.insert(pid);
                    }
                }
            }
        }
        let mut written = 0;
        let mut failed = Vec::new();
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
                    log::debug!("allocations of process {pid} convert at the end: {e}");
                    failed.push(pid);
                }
            }
        }
        if checkpoint {
            last_checkpoint = std::time::Instant::now();
        }
        for pid in failed {
            if let Some(drain) = drains.remove(&pid) {
                drain.abandon();
            }
            given_up.insert(pid);
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
    ) -> std::io::Result<Drain> {
        let shared = Arc::new(DrainShared::default());
        let thread_shared = shared.clone();
        let thread = std::thread::Builder::new()
            .name("fltrace-drain".into())
            .spawn(move || drain_logs(spool, clock, thread_shared, recording, mono_offset))?;
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

#[cfg(test)]
mod tests {
    use super::SpoolMetadata;

    #[test]
    fn spool_metadata_reads_back_what_was_written() {
        let metadata = SpoolMetadata {
            recording: "4242-1795393791310439880".into(),
            mono_offset: u64::MAX - 7,
        };
        assert_eq!(SpoolMetadata::parse(&metadata.to_text()), Some(metadata));
        assert_eq!(SpoolMetadata::parse("recording 1-2\n"), None);
        assert_eq!(SpoolMetadata::parse("mono_offset x\nrecording 1-2\n"), None);
    }
}
