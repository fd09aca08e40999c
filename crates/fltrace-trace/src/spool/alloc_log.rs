//! Reading an allocation log (`fltrace_runtime_abi::alloclog`) as its threads write it or
//! once they are done: each thread's chunks are in time order, and the threads' streams are
//! merged by time, so a reader holds one record per thread, not the log.

use std::cmp::Reverse;
use std::collections::binary_heap::PeekMut;
use std::collections::{BinaryHeap, HashMap, VecDeque};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;

use fltrace_runtime_abi::alloclog::{
    CHUNK_HEADER_SIZE, CHUNK_SIZE, CallRecord, Cursor, Decoder, HEADER_SIZE, MAGIC, MAX_FRAMES,
    Record,
};

use crate::{AllocCall, AllocEvent, Error, VirtAddr};

/// The name of the log of image `image` (execs count up from 0) of process `pid`.
pub fn log_name(pid: u32, image: u32) -> String {
    format!("log-{pid}.{image}")
}

/// The largest allocation log read: far above a long run's (about 6 bytes a call).
const LOG_CAP: u64 = 64 << 30;

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
pub struct LiveLog {
    path: PathBuf,
    /// Closed once the log is copied into memory: an open file removed keeps its blocks.
    file: Option<std::fs::File>,
    bytes: LogBytes,
    /// CLOCK_MONOTONIC to the tables' Unix-epoch times.
    pub(crate) mono_offset: u64,
    /// The offset of the next chunk not yet given to its thread's stream.
    scan: usize,
    streams: Vec<Stream>,
    by_tid: HashMap<u32, usize>,
    /// The streams that have a record ahead, by its time.
    heap: BinaryHeap<Reverse<(u64, usize)>>,
    /// Chunks whose bytes did not decode (cut short at the first bad record).
    pub(crate) corrupt: u64,
    /// Where stack definitions are decoded, before their stream keeps their frames.
    scratch: Box<[u64; MAX_FRAMES]>,
    /// Whether every writer is gone: a chunk with nothing published is skipped, not waited
    /// for, and a thread's last chunk ends where its bytes do.
    complete: bool,
}

/// One thread's records, decoded up to [`AHEAD`] ahead.
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
    /// The next records, decoded ahead so the merge knows the first one's time: several at
    /// a time, as a chunk's published length and the decoder's place are looked up once for
    /// them, not once a record. A stack definition is always the last (its frames are in
    /// `frames`).
    ahead: VecDeque<(u64, Item)>,
    /// Time of the item handed out last.
    last_time: u64,
    /// When the chunk its thread is writing was last read to what it published (see
    /// [`OPEN_CHUNK_EVERY`]).
    open_chunk_read: Option<std::time::Instant>,
    /// The frames of the stack definition ahead, if one is: only those, so
    /// that a log naming many threads costs little per thread.
    frames: Vec<u64>,
}

/// Records a stream decodes ahead at most.
const AHEAD: usize = 32;

/// How often the chunk a thread is still writing is read while the log is live, when the
/// log has that one thread. Followed as it grew, its cache lines went back and forth
/// between the reader's CPU and the program's: the program's loop of 8M calls took 12%
/// longer. A busy thread fills its chunk in milliseconds, and the chunks it left are read
/// whole. With more threads every record published before a look is read (the drain's
/// watermark rule, which keeps their merge in time order).
const OPEN_CHUNK_EVERY: std::time::Duration = std::time::Duration::from_millis(50);

/// Bytes of a chunk available for records.
const RECORD_SPACE: usize = CHUNK_SIZE - CHUNK_HEADER_SIZE;

impl LiveLog {
    /// Opens the log at `path`; `None` if there is none. `complete`: its writers are gone.
    pub fn open(path: &Path, mono_offset: u64, complete: bool) -> Result<Option<LiveLog>, Error> {
        let file = match std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
            .open(path)
        {
            Ok(file) => file,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(source) => {
                return Err(Error::Io {
                    path: path.to_owned(),
                    source,
                });
            }
        };
        let mut log = LiveLog {
            path: path.to_owned(),
            file: Some(file),
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
        Error::Io {
            path: self.path.clone(),
            source,
        }
    }

    /// Maps what the file holds now, and hands the chunks published since the last look to
    /// their threads' streams.
    pub fn refresh(&mut self) -> Result<(), Error> {
        if let Some(file) = self
            .file
            .as_ref()
            .filter(|_| !matches!(self.bytes, LogBytes::Copied(_)))
        {
            let len = file.metadata().map_err(|e| self.io_error(e))?.len();
            // A log is a shared mapping that only grows; the cap refuses a file planted in
            // its place that could not be one.
            if len > LOG_CAP {
                return Err(Error::Format {
                    path: self.path.clone(),
                    message: format!("{len} bytes, more than any allocation log"),
                });
            }
            if len > self.bytes.get().len() as u64 {
                // SAFETY: a read-only shared mapping of a file that only grows (the tracer
                // allocates its blocks before writing them), read within its length.
                let map = unsafe { memmap2::Mmap::map(file) }.map_err(|e| self.io_error(e))?;
                self.bytes = LogBytes::Mapped(map);
            }
        }
        let log = self.bytes.get();
        if log.len() < HEADER_SIZE || read_word(log, 0) != MAGIC {
            if self.complete {
                return Err(Error::Format {
                    path: self.path.clone(),
                    message: "not an fltrace allocation log".into(),
                });
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
                && let Some(data) = self.file.as_ref().and_then(|file| next_data(file, offset))
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
                    ahead: VecDeque::new(),
                    last_time: 0,
                    frames: Vec::new(),
                    open_chunk_read: None,
                });
                self.streams.len() - 1
            });
            self.streams[i].chunks.push_back(offset);
            self.scan += CHUNK_SIZE;
        }
        for i in 0..self.streams.len() {
            if self.streams[i].ahead.is_empty() {
                self.advance(i);
            }
        }
        Ok(())
    }

    /// Marks the log as complete (its writers are gone) and reads it to its end.
    pub fn complete(&mut self) -> Result<(), Error> {
        self.complete = true;
        self.refresh()
    }

    /// A stopped log (its file system filled) is copied into memory and its file removed,
    /// so that the tables have room. Only the chunks handed out are copied, and of them only
    /// the extents that hold data: the file's length and the header's word come from the
    /// traced program, which could plant a sparse file of 64 GiB. A log that cannot be
    /// copied stays where it is.
    pub(crate) fn remove_if_stopped(&mut self) {
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
        let Some(file) = &self.file else {
            return;
        };
        for (start, stop) in data_extents(file, end) {
            copy[start..stop].copy_from_slice(&log[start..stop]);
        }
        self.bytes = LogBytes::Copied(copy);
        self.file = None;
        let _ = std::fs::remove_file(&self.path);
    }

    /// Records the tracer could not write (its log could not grow).
    pub(crate) fn dropped(&self) -> u64 {
        read_word(self.bytes.get(), 24)
    }

    /// When the tracer stopped because the log could not grow, if it did.
    pub(crate) fn stopped_ns(&self) -> Option<u64> {
        log_stopped_ns(self.bytes.get())
    }

    /// Decodes stream `i`'s next items into `ahead`, which is empty, and queues the stream
    /// if it has any; leaves it without when its published records are all read.
    fn advance(&mut self, i: usize) {
        if let Some(time) = self.decode_ahead(i) {
            self.heap.push(Reverse((time, i)));
        }
    }

    /// Decodes stream `i`'s next items into `ahead`, which is empty; the time of the first,
    /// if there is one (the stream is not queued).
    fn decode_ahead(&mut self, i: usize) -> Option<u64> {
        self.decode(i, None)
    }

    /// Decodes stream `i`'s next records, `ahead` being empty. Events go to `to` as long as
    /// it takes them, handed out there and then, never copied into `ahead`; the first it
    /// refuses, and the items after it up to [`AHEAD`] or a stack definition, are kept ahead.
    /// The time of the first item ahead, if there is one.
    #[inline(always)]
    fn decode(&mut self, i: usize, mut to: Option<&mut Taking<'_>>) -> Option<u64> {
        let log = self.bytes.get();
        // A stream left unread with records published is not queued: with one thread no
        // other's records can pass it, and a second thread's first chunk makes `refresh`
        // read it again before anything is merged.
        let alone = self.streams.len() == 1 && !self.complete;
        let stream = &mut self.streams[i];
        let scratch = &mut self.scratch;
        // The time of the item before the next: handed out, or decoded ahead.
        let mut previous = stream.last_time;
        let mut taking = to.is_some();
        'chunks: while let Some(&chunk) = stream.chunks.front() {
            if alone
                && stream.chunks.len() == 1
                && stream
                    .open_chunk_read
                    .is_some_and(|at| at.elapsed() < OPEN_CHUNK_EVERY)
            {
                break;
            }
            let start = chunk + CHUNK_HEADER_SIZE;
            let used = (read_word(log, chunk + 8) as usize)
                .min(RECORD_SPACE)
                .min(log.len().saturating_sub(start));
            if stream.cut || stream.state.0 >= used {
                // Read to the end: a chunk is done once its thread has taken another (the
                // later chunk's `used` was read first, so this one's is final) or its
                // writers are gone.
                if stream.chunks.len() == 1 && !self.complete {
                    // Read to what is published: the next look at it waits (alone).
                    if alone {
                        stream.open_chunk_read = Some(std::time::Instant::now());
                    }
                    break;
                }
                stream.chunks.pop_front();
                stream.state = (0, Cursor::default());
                stream.cut = false;
                continue;
            }
            let mut decoder = Decoder::resume(&log[start..start + used], stream.state);
            while taking || stream.ahead.len() < AHEAD {
                if taking && let Some(to) = to.as_deref_mut() {
                    // The calls that come next share the stream's time: as many as `to`
                    // takes at that time go straight to it, checked once for the run.
                    let time_ns = stream.time.wrapping_add(self.mono_offset).max(previous);
                    let room = to.room_at(time_ns, i);
                    let tid = stream.tid;
                    let taken = decoder.calls(room, |record| {
                        to.out.push(alloc_event(record, time_ns, tid));
                    });
                    if taken > 0 {
                        to.room -= taken;
                        previous = time_ns;
                        stream.last_time = time_ns;
                    }
                }
                let record = decoder.next(scratch);
                match record {
                    None => break,
                    Some(Err(_)) => {
                        self.corrupt += 1;
                        stream.cut = true;
                        break;
                    }
                    Some(Ok(Record::Time(time))) => stream.time = time,
                    Some(Ok(Record::Stack { id, len })) => {
                        // Its definitions come out before the stream's next event; the time
                        // only places it among other threads.
                        stream.frames.clear();
                        stream.frames.extend_from_slice(&scratch[..len]);
                        stream.ahead.push_back((previous, Item::Stack(id, len)));
                        stream.state = decoder.state();
                        break 'chunks;
                    }
                    Some(Ok(Record::Call(record))) => {
                        // A call the run above left: `to` is full or takes none at its time
                        // (or there is no `to`). It and what follows wait ahead. Times are
                        // the clock's, about a millisecond coarse; a thread's calls never go
                        // back in time, so its order is kept.
                        taking = false;
                        let time_ns = stream.time.wrapping_add(self.mono_offset).max(previous);
                        previous = time_ns;
                        let event = alloc_event(&record, time_ns, stream.tid);
                        stream.ahead.push_back((time_ns, Item::Event(event)));
                    }
                }
            }
            stream.state = decoder.state();
            if stream.ahead.len() >= AHEAD {
                break;
            }
        }
        stream.ahead.front().map(|&(time, _)| time)
    }

    /// The next item in time order if it comes before `watermark`.
    pub(crate) fn next(&mut self, watermark: u64, frames: &mut [u64; MAX_FRAMES]) -> Option<Item> {
        // The stream stays at the top with its next time (one sift down), not popped and
        // pushed again: most logs have one thread, or one far ahead of the others.
        let mut top = self.heap.peek_mut()?;
        let Reverse((time, i)) = *top;
        if time >= watermark {
            return None;
        }
        let stream = &mut self.streams[i];
        let Some((time, item)) = stream.ahead.pop_front() else {
            PeekMut::pop(top);
            return None;
        };
        if let Item::Stack(_, len) = item {
            frames[..len].copy_from_slice(&stream.frames[..len]);
            stream.frames = Vec::new();
        }
        stream.last_time = time;
        match stream.ahead.front() {
            Some(&(next, _)) => *top = Reverse((next, i)),
            None => {
                PeekMut::pop(top);
                self.advance(i);
            }
        }
        Some(item)
    }
}

impl LiveLog {
    /// Moves into `out` the events that [`next`](Self::next) would hand out next, at most
    /// `max`, as long as they are events of one thread: those of the thread first in time,
    /// until another thread's next item comes first, an event is at `watermark` or later, or
    /// a stack definition is next (which `next` hands out). The merge looks at the other
    /// threads once for the run, not once an event.
    pub(crate) fn next_events(
        &mut self,
        watermark: u64,
        out: &mut Vec<AllocEvent>,
        max: usize,
    ) -> usize {
        let Some(&Reverse((time, i))) = self.heap.peek() else {
            return 0;
        };
        if time >= watermark || max == 0 {
            return 0;
        }
        self.heap.pop();
        // The first item of every other thread: this one's run ends before it.
        let others = self
            .heap
            .peek()
            .map_or((u64::MAX, usize::MAX), |&Reverse(key)| key);
        let mut moved = 0;
        let mut front = Some(time);
        while let Some(time) = front
            && moved < max
            && time < watermark
            && (time, i) < others
        {
            let stream = &mut self.streams[i];
            let Some(&(_, Item::Event(event))) = stream.ahead.front() else {
                break;
            };
            stream.ahead.pop_front();
            stream.last_time = time;
            out.push(event);
            moved += 1;
            front = match stream.ahead.front() {
                Some(&(next, _)) => Some(next),
                // Decoded on as `next` does the moment a stream's items run out, the events
                // of the run moved out as they are decoded.
                None => {
                    let before = out.len();
                    let mut to = Taking {
                        out,
                        room: max - moved,
                        watermark,
                        others,
                    };
                    let front = self.decode(i, Some(&mut to));
                    moved += out.len() - before;
                    front
                }
            };
        }
        if let Some(time) = front {
            self.heap.push(Reverse((time, i)));
        }
        moved
    }
}

/// Where [`LiveLog::decode`] hands a stream's events out: into `out`, `room` more at most,
/// as long as they come before `watermark` and before the first item of every other stream
/// (`others`: its time and stream).
struct Taking<'a> {
    out: &'a mut Vec<AllocEvent>,
    room: usize,
    watermark: u64,
    others: (u64, usize),
}

impl Taking<'_> {
    /// How many events of stream `i` at `time` may be taken.
    #[inline(always)]
    fn room_at(&self, time: u64, i: usize) -> usize {
        if time < self.watermark && (time, i) < self.others {
            self.room
        } else {
            0
        }
    }
}

// The decoder hands out calls numbered 1 to `call::LAST`: each is an `AllocCall`.
const _: () = assert!(AllocCall::ALL.len() == fltrace_runtime_abi::alloclog::call::LAST as usize);

/// The event of a decoded call of thread `tid` at `time_ns`.
#[inline(always)]
fn alloc_event(record: &CallRecord, time_ns: u64, tid: u32) -> AllocEvent {
    AllocEvent {
        time_ns,
        tid,
        call: AllocCall::ALL[usize::from(record.call) - 1],
        addr: VirtAddr::new(record.addr),
        size: record.size,
        old_addr: VirtAddr::new(record.old_addr),
        detail: record.detail,
        stack_id: record.stack_id,
    }
}

pub(crate) enum Item {
    Stack(u32, usize),
    Event(AllocEvent),
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

/// Whether any log of `pid` in `spool` stopped because its file system filled.
pub fn any_log_stopped(spool: &Path, pid: u32) -> bool {
    (0..)
        .map(|image| spool.join(log_name(pid, image)))
        .take_while(|path| path.exists())
        .any(|path| log_file_stopped(&path))
}

/// Whether any log in `spool`, of any process, stopped because its file system filled.
pub fn any_spool_log_stopped(spool: &Path) -> bool {
    let Ok(entries) = std::fs::read_dir(spool) else {
        return false;
    };
    entries.flatten().any(|entry| {
        let name = entry.file_name();
        let is_log = name
            .to_str()
            .and_then(|n| n.strip_prefix("log-"))
            .and_then(|rest| rest.split_once('.'))
            .is_some_and(|(pid, image)| {
                pid.bytes().all(|b| b.is_ascii_digit()) && image.bytes().all(|b| b.is_ascii_digit())
            });
        is_log && log_file_stopped(&entry.path())
    })
}

/// Whether the log at `path` stopped because its file system filled.
fn log_file_stopped(path: &Path) -> bool {
    use std::os::unix::fs::FileExt;
    let mut header = [0u8; 40];
    std::fs::File::open(path).is_ok_and(|file| file.read_exact_at(&mut header, 0).is_ok())
        && log_stopped_ns_of_header(&header)
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
pub fn log_bytes_taken(path: &Path) -> u64 {
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

#[cfg(test)]
mod tests {
    use super::*;
    use fltrace_runtime_abi::alloclog::{CallRecord, call};

    /// What a log hands out, comparable: an event, or a stack definition and its frames.
    #[derive(Debug, PartialEq)]
    enum Out {
        Event(AllocEvent),
        Stack(u32, Vec<u64>),
    }

    /// A log of three threads taking chunks in turn, their times interleaved (two of them
    /// at the very same times), stack definitions among their calls.
    fn three_threads_log(path: &Path) {
        let chunks = 9;
        let mut log = vec![0u8; HEADER_SIZE + chunks * CHUNK_SIZE];
        log[..8].copy_from_slice(&MAGIC.to_ne_bytes());
        let end = log.len() as u64;
        log[16..24].copy_from_slice(&end.to_ne_bytes());
        for k in 0..chunks {
            let thread = (k % 3) as u64;
            let offset = HEADER_SIZE + k * CHUNK_SIZE;
            let records = &mut log[offset + CHUNK_HEADER_SIZE..offset + CHUNK_SIZE];
            let (mut pos, mut cursor) = (0, Cursor::default());
            for j in 0..2000u64 {
                if j % 50 == 0 {
                    let time = 1_000_000 + (k as u64 / 3) * 100_000 + j / 50 * 1000;
                    cursor.put_time(records, &mut pos, time + thread % 2 * 500);
                }
                let stack_id = (k as u32) * 10 + (j / 500) as u32;
                if j % 500 == 0 {
                    cursor.put_stack(records, &mut pos, stack_id, &[0x401000 + j, 0x402000]);
                }
                let record = CallRecord {
                    call: if j % 2 == 0 { call::MALLOC } else { call::FREE },
                    addr: 0x5600_0000 + (thread << 20) + j * 48,
                    size: if j % 2 == 0 { 16 + j % 512 } else { 0 },
                    old_addr: 0,
                    detail: 0,
                    stack_id,
                };
                cursor.put_call(records, &mut pos, &record);
            }
            log[offset..offset + 8].copy_from_slice(&(100 + thread).to_ne_bytes());
            log[offset + 8..offset + 16].copy_from_slice(&(pos as u64).to_ne_bytes());
        }
        std::fs::write(path, log).unwrap();
    }

    /// Reads `log` with `next` alone, up to `watermark`, then to the end.
    fn by_next(log: &mut LiveLog, watermark: u64) -> Vec<Out> {
        let mut frames = Box::new([0u64; MAX_FRAMES]);
        let mut out = Vec::new();
        for watermark in [watermark, u64::MAX] {
            while let Some(item) = log.next(watermark, &mut frames) {
                out.push(match item {
                    Item::Event(event) => Out::Event(event),
                    Item::Stack(id, len) => Out::Stack(id, frames[..len].to_vec()),
                });
            }
        }
        out
    }

    /// Reads `log` as a conversion does: runs of events `most` at a time, `next` for the
    /// rest.
    fn by_runs(log: &mut LiveLog, watermark: u64, most: usize) -> Vec<Out> {
        let mut frames = Box::new([0u64; MAX_FRAMES]);
        let (mut out, mut run) = (Vec::new(), Vec::new());
        for watermark in [watermark, u64::MAX] {
            loop {
                run.clear();
                if log.next_events(watermark, &mut run, most) > 0 {
                    out.extend(run.iter().map(|&event| Out::Event(event)));
                    continue;
                }
                let Some(item) = log.next(watermark, &mut frames) else {
                    break;
                };
                out.push(match item {
                    Item::Event(event) => Out::Event(event),
                    Item::Stack(id, len) => Out::Stack(id, frames[..len].to_vec()),
                });
            }
        }
        out
    }

    /// A live log of one thread, whose open chunk is read only now and then, and then of
    /// two: the second thread's first chunk has the first's records published before it
    /// read at once, so the merge stays in time order (the second thread's calls began
    /// later than the first's last ones here, and come after them).
    #[test]
    fn a_second_thread_has_the_first_ones_open_chunk_read_before_the_merge() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("log-1.0");
        let mut log = vec![0u8; HEADER_SIZE + 2 * CHUNK_SIZE];
        log[..8].copy_from_slice(&MAGIC.to_ne_bytes());
        // One chunk taken, by thread 100.
        let publish = |log: &mut Vec<u8>, chunks: usize| {
            let end = (HEADER_SIZE + chunks * CHUNK_SIZE) as u64;
            log[16..24].copy_from_slice(&end.to_ne_bytes());
            std::fs::write(&path, &log).unwrap();
        };
        let mut writers = [(Cursor::default(), 0usize), (Cursor::default(), 0usize)];
        let mut write = |log: &mut Vec<u8>, k: usize, times: std::ops::Range<u64>| {
            let offset = HEADER_SIZE + k * CHUNK_SIZE;
            let (cursor, pos) = &mut writers[k];
            let records = &mut log[offset + CHUNK_HEADER_SIZE..offset + CHUNK_SIZE];
            for time in times {
                cursor.put_time(records, pos, time * 1000);
                let record = CallRecord {
                    call: call::MALLOC,
                    addr: 0x5600_0000 + time * 64,
                    size: 16,
                    old_addr: 0,
                    detail: 0,
                    stack_id: 0,
                };
                cursor.put_call(records, pos, &record);
            }
            log[offset..offset + 8].copy_from_slice(&(100 + k as u64).to_ne_bytes());
            log[offset + 8..offset + 16].copy_from_slice(&(*pos as u64).to_ne_bytes());
        };
        write(&mut log, 0, 1..11);
        publish(&mut log, 1);
        let mut live = LiveLog::open(&path, 0, false).unwrap().unwrap();
        let mut out = Vec::new();
        let drain = |live: &mut LiveLog, out: &mut Vec<AllocEvent>| {
            live.refresh().unwrap();
            while live.next_events(u64::MAX, out, 1000) > 0 {}
        };
        drain(&mut live, &mut out);
        assert_eq!(out.len(), 10);
        // More in the first thread's open chunk, then a second thread.
        write(&mut log, 0, 11..21);
        publish(&mut log, 1);
        drain(&mut live, &mut out);
        write(&mut log, 1, 15..26);
        publish(&mut log, 2);
        drain(&mut live, &mut out);
        let times: Vec<u64> = out.iter().map(|e| e.time_ns / 1000).collect();
        let mut expected: Vec<u64> = (1..21).chain(15..26).collect();
        expected.sort_unstable();
        assert_eq!(times, expected);
    }

    /// Events moved a run at a time come in the order `next` hands them out one by one,
    /// stack definitions between them where they were, with threads taking turns at equal
    /// times, up to a watermark and then on.
    #[test]
    fn runs_of_events_come_in_the_merge_order() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("log-1.0");
        three_threads_log(&path);
        let open = || LiveLog::open(&path, 7, true).unwrap().unwrap();
        let watermark = 7 + 1_000_000 + 100_000 + 20_500;
        let expected = by_next(&mut open(), watermark);
        assert_eq!(expected.len(), 9 * 2000 + 9 * 4);
        let tids: std::collections::BTreeSet<u32> = expected
            .iter()
            .filter_map(|out| match out {
                Out::Event(e) => Some(e.tid),
                Out::Stack(..) => None,
            })
            .collect();
        assert_eq!(tids.into_iter().collect::<Vec<_>>(), [100, 101, 102]);
        for most in [1, 7, 1024] {
            assert!(
                by_runs(&mut open(), watermark, most) == expected,
                "runs of at most {most} differ"
            );
        }
    }
}
