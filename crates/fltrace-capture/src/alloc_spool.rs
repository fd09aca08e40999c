//! The recorder's side of `record --allocs`: where the preloaded tracer writes its logs, and
//! their conversion into each process's allocation tables once the program is done.
//!
//! The logs (`fltrace_runtime_abi::alloclog`) live in a private directory beside the output
//! until conversion. Each thread's chunks are in time order; the threads' streams are merged
//! by time, so conversion holds one chunk per thread in memory, not the whole log.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};
use std::ffi::OsString;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use fltrace_runtime_abi::alloclog::{
    CHUNK_HEADER_SIZE, CHUNK_SIZE, CLOCK_SIZE, Clock, Decoder, HEADER_SIZE, MAGIC, MAX_FRAMES,
    Record,
};
use fltrace_runtime_abi::env;
use fltrace_trace::{
    AllocCall, AllocEvent, AllocTotals, AllocWriter, CodeAddr, Origin, Stack, StackWriter,
    VirtAddr, files,
};

use crate::{Credentials, Error};

/// Where the tracer's logs go, and the clock page it reads its times from.
#[derive(Debug)]
pub struct AllocLogs {
    dir: PathBuf,
    /// The directory, open and `flock`ed for as long as the recording runs: how the next
    /// `record` tells a live recorder's spool from one a killed recorder left behind.
    _lock: std::fs::File,
    ticker: Option<std::thread::JoinHandle<()>>,
    stop: Arc<AtomicBool>,
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
        let clock = ClockPage(map);
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

    /// Converts the logs of `pid` (one per image: execs start a new one) into
    /// `fltrace-data-allocs-<pid>.parquet` and its stack table; the first log's stacks belong
    /// to address-space generation `first_generation`, the next to the one after. `mono_offset` turns
    /// CLOCK_MONOTONIC into the Unix-epoch times of the fault table. Returns the events
    /// written, or `None` if the process left no log. The tables are those of recording
    /// `recording`.
    pub fn convert(
        &self,
        pid: u32,
        first_generation: u32,
        out_dir: &Path,
        mono_offset: u64,
        recording: &str,
    ) -> Result<Option<Converted>, Error> {
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
        converted
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
        let path = spool.join(format!("log-{pid}.{image}"));
        // A log is a shared mapping that only grows; the cap refuses a file planted in its
        // place that could not be one.
        match files::read_capped(&path, LOG_CAP) {
            Ok(bytes) => logs.push((path, bytes)),
            Err(fltrace_trace::Error::Io { source, .. })
                if source.kind() == std::io::ErrorKind::NotFound =>
            {
                break;
            }
            Err(e) => return Err(e.into()),
        }
    }
    if logs.is_empty() {
        return Ok(None);
    }
    // A log that stopped because its file system filled is in memory now: its file goes, so
    // that the tables have room (on the same file system, they would not be written at all).
    if full_logs == FullLogs::Remove {
        for (path, bytes) in &logs {
            if log_stopped_ns(bytes).is_some() {
                let _ = std::fs::remove_file(path);
            }
        }
    }
    // An image's calls come after its exec, but the millisecond clock can put the first
    // ones before it: each image's times start no earlier than its first mapping.
    let image_start = image_starts(&files::mmaps(out_dir, pid))?;
    let origin = Origin::new(recording, pid);
    let mut allocs = BackgroundWriter::start(AllocWriter::create_for(
        &files::allocs(out_dir, pid),
        origin.clone(),
    )?);
    let mut stack_writer =
        StackWriter::create_for(&files::alloc_stacks(out_dir, pid), origin.clone())?;
    let mut stacks = Stacks::default();
    let mut totals = AllocTotals::default();
    let mut converted = Converted::default();
    for (image, (path, bytes)) in logs.iter().enumerate() {
        let generation = first_generation + image as u32;
        let (streams, stopped_ns) = thread_streams(path, bytes, &mut converted)?;
        let mut first_ns = None;
        let floor = image_start.get(&generation).copied().unwrap_or(0);
        if stacks.local.len() <= generation as usize {
            stacks.local.resize(generation as usize + 1, Vec::new());
        }
        let mut merge = Merge::new(streams, mono_offset);
        let mut frames = [0u64; MAX_FRAMES];
        while let Some(item) = merge.next(&mut frames) {
            match item {
                Item::Stack(local_id, len) => {
                    stacks.define(generation, local_id, &frames[..len], &mut stack_writer)?;
                }
                Item::Event(mut event) => {
                    event.time_ns = event.time_ns.max(floor);
                    if event.stack_id != AllocEvent::NO_STACK {
                        event.stack_id = stacks.global(generation, event.stack_id);
                    }
                    first_ns.get_or_insert(event.time_ns);
                    totals.add(&event);
                    allocs.push(event)?;
                    converted.events += 1;
                }
            }
        }
        if let Some(stopped) = stopped_ns {
            let after = stopped
                .wrapping_add(mono_offset)
                .saturating_sub(first_ns.unwrap_or(u64::MAX));
            converted.add(&Converted {
                stopped_after_ns: Some(after),
                ..Converted::default()
            });
        }
        converted.corrupt_chunks += merge.corrupt;
    }
    allocs.finish()?;
    stack_writer.finish()?;
    // Last: a totals file says its process's tables were written to the end.
    fltrace_trace::write_alloc_totals(
        &files::alloc_totals(out_dir, pid),
        origin,
        &totals.totals(),
    )?;
    converted.stacks = stacks.next;
    Ok(Some(converted))
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
    sender: Option<std::sync::mpsc::SyncSender<Vec<AllocEvent>>>,
    thread: Option<std::thread::JoinHandle<Result<(), Error>>>,
}

/// Events per batch handed to the writer thread.
const BATCH: usize = 1 << 16;

impl BackgroundWriter {
    fn start(mut writer: AllocWriter) -> BackgroundWriter {
        let (sender, receiver) = std::sync::mpsc::sync_channel::<Vec<AllocEvent>>(4);
        let thread = std::thread::spawn(move || {
            for batch in receiver {
                for event in batch {
                    writer.push(event)?;
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
            self.send()?;
        }
        Ok(())
    }

    fn send(&mut self) -> Result<(), Error> {
        let batch = std::mem::replace(&mut self.batch, Vec::with_capacity(BATCH));
        match &self.sender {
            // The writer only hangs up after an error, which `finish` returns.
            Some(sender) if sender.send(batch).is_err() => self.finish(),
            _ => Ok(()),
        }
    }

    /// Writes what is left and waits for the writer.
    fn finish(&mut self) -> Result<(), Error> {
        if !self.batch.is_empty()
            && let Some(sender) = &self.sender
        {
            let _ = sender.send(std::mem::take(&mut self.batch));
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
/// metadata, the clock page, `log-<pid>.<image>`.
fn is_spool_file(name: &str) -> bool {
    let numbered = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    name == METADATA_FILE
        || name == "log-clock"
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
                    "recovered {} allocations of process {pid} from the spool of a killed recorder",
                    converted.events
                );
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

/// A thread id and the published bytes of its chunks, in file order.
type ThreadChunks<'a> = (u32, Vec<&'a [u8]>);

/// When the tracer writing `log` stopped because the log could not grow (its clock).
fn log_stopped_ns(log: &[u8]) -> Option<u64> {
    let word = |offset: usize| {
        log.get(offset..offset + 8)
            .and_then(|b| b.try_into().ok())
            .map(u64::from_ne_bytes)
    };
    if log.len() < HEADER_SIZE || word(0) != Some(MAGIC) {
        return None;
    }
    word(32).filter(|&t| t != 0)
}

/// The published bytes of each thread's chunks, in file order, by thread; and when the
/// tracer stopped because the log could not grow (its clock), if it did.
fn thread_streams<'a>(
    path: &Path,
    log: &'a [u8],
    converted: &mut Converted,
) -> Result<(Vec<ThreadChunks<'a>>, Option<u64>), Error> {
    let word = |offset: usize| -> u64 {
        log.get(offset..offset + 8)
            .and_then(|b| b.try_into().ok())
            .map_or(0, u64::from_ne_bytes)
    };
    if log.len() < HEADER_SIZE || word(0) != MAGIC {
        return Err(fltrace_trace::Error::Format {
            path: path.to_owned(),
            message: "not an fltrace allocation log".into(),
        }
        .into());
    }
    converted.dropped += word(24);
    let stopped_ns = log_stopped_ns(log);
    let end = (word(16) as usize).min(log.len());
    let mut by_tid: HashMap<u32, Vec<&[u8]>> = HashMap::new();
    let mut order = Vec::new();
    let mut offset = HEADER_SIZE;
    while offset + CHUNK_HEADER_SIZE <= end {
        let tid = word(offset) as u32;
        let start = offset + CHUNK_HEADER_SIZE;
        let used = (word(offset + 8) as usize)
            .min(CHUNK_SIZE - CHUNK_HEADER_SIZE)
            .min(log.len() - start);
        if used > 0 {
            let chunks = by_tid.entry(tid).or_insert_with(|| {
                order.push(tid);
                Vec::new()
            });
            chunks.push(&log[start..start + used]);
        }
        offset += CHUNK_SIZE;
    }
    Ok((
        order
            .into_iter()
            .map(|tid| (tid, by_tid.remove(&tid).unwrap_or_default()))
            .collect(),
        stopped_ns,
    ))
}

/// Stack ids: the log's, per image, to the table's, deduplicated by frames.
#[derive(Default)]
struct Stacks {
    /// By image, the table's id of each of the log's ids (ids are dense from 0).
    local: Vec<Vec<u32>>,
    by_frames: HashMap<(u32, Vec<u64>), u32>,
    next: u32,
}

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
            None => {
                let id = self.next;
                self.next += 1;
                writer.push(Stack {
                    end: fltrace_trace::StackEnd::Unknown,
                    id,
                    generation,
                    frames: key.1.iter().map(|&frame| CodeAddr::new(frame)).collect(),
                })?;
                self.by_frames.insert(key, id);
                id
            }
        };
        let image = &mut self.local[generation as usize];
        let slot = local_id as usize;
        if image.len() <= slot {
            image.resize(slot + 1, AllocEvent::NO_STACK);
        }
        image[slot] = id;
        Ok(())
    }

    fn global(&self, generation: u32, local_id: u32) -> u32 {
        self.local
            .get(generation as usize)
            .and_then(|image| image.get(local_id as usize))
            .copied()
            .unwrap_or(AllocEvent::NO_STACK)
    }
}

enum Item {
    Stack(u32, usize),
    Event(AllocEvent),
}

/// One thread's records, decoded lazily.
struct Stream<'a> {
    tid: u32,
    chunks: std::vec::IntoIter<&'a [u8]>,
    decoder: Option<Decoder<'a>>,
    /// CLOCK_MONOTONIC time of the records being decoded.
    time: u64,
    /// The next record, decoded ahead so the merge knows its time.
    ahead: Option<(u64, Item)>,
    /// Time of the item handed out last.
    last_time: u64,
    frames: Box<[u64; MAX_FRAMES]>,
}

/// Merges the threads' streams by time.
struct Merge<'a> {
    streams: Vec<Stream<'a>>,
    heap: BinaryHeap<Reverse<(u64, usize)>>,
    mono_offset: u64,
    corrupt: u64,
}

impl<'a> Merge<'a> {
    fn new(threads: Vec<ThreadChunks<'a>>, mono_offset: u64) -> Merge<'a> {
        let mut merge = Merge {
            streams: threads
                .into_iter()
                .map(|(tid, chunks)| Stream {
                    tid,
                    chunks: chunks.into_iter(),
                    decoder: None,
                    time: 0,
                    ahead: None,
                    last_time: 0,
                    frames: Box::new([0; MAX_FRAMES]),
                })
                .collect(),
            heap: BinaryHeap::new(),
            mono_offset,
            corrupt: 0,
        };
        for i in 0..merge.streams.len() {
            merge.advance(i);
        }
        merge
    }

    /// Decodes stream `i`'s next item into `ahead` and queues it.
    fn advance(&mut self, i: usize) {
        let stream = &mut self.streams[i];
        loop {
            if stream.decoder.is_none() {
                let Some(chunk) = stream.chunks.next() else {
                    return;
                };
                stream.decoder = Some(Decoder::new(chunk));
            }
            let Some(decoder) = stream.decoder.as_mut() else {
                return;
            };
            match decoder.next(&mut stream.frames) {
                None => stream.decoder = None,
                Some(Err(_)) => {
                    self.corrupt += 1;
                    stream.decoder = None;
                }
                Some(Ok(Record::Time(time))) => stream.time = time,
                Some(Ok(Record::Stack { id, len })) => {
                    // A stream has one item ahead at a time, so its definitions always come
                    // out before its next event; the time only places it among other threads.
                    let time = stream.last_time;
                    stream.ahead = Some((time, Item::Stack(id, len)));
                    self.heap.push(Reverse((time, i)));
                    return;
                }
                Some(Ok(Record::Call(record))) => {
                    let Some(call) = AllocCall::from_u8(record.call) else {
                        self.corrupt += 1;
                        stream.decoder = None;
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

    fn next(&mut self, frames: &mut [u64; MAX_FRAMES]) -> Option<Item> {
        let Reverse((_, i)) = self.heap.pop()?;
        let (time, item) = self.streams[i].ahead.take()?;
        if let Item::Stack(_, len) = item {
            frames[..len].copy_from_slice(&self.streams[i].frames[..len]);
        }
        self.streams[i].last_time = time;
        self.advance(i);
        Some(item)
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
