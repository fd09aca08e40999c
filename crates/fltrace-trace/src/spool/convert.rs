//! Converting allocation logs into a process's allocation tables: the events merged by time
//! into `fltrace-data-allocs-<pid>.parquet`, their stacks deduplicated into
//! `fltrace-data-allocstacks-<pid>.parquet`, and last the totals.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use fltrace_runtime_abi::alloclog::MAX_FRAMES;

use super::alloc_log::{Item, LiveLog, log_name};
use crate::tables::EncodedGroup;
use crate::{
    AllocEvent, AllocPassSummary, AllocTotals, AllocWriter, CodeAddr, Error, Origin,
    PairingFactory, Stack, StackWriter, files,
};

/// Says in `pid`'s stats file how many of its stack definitions were refused, if any: a
/// line `<unix time> alloc_stacks_refused:<n>` after the recorder's own. A line that cannot
/// be written is a warning: the summary says the count too, and the tables are whole.
pub fn note_refused(out_dir: &Path, pid: u32, converted: Option<&Converted>) {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let Some(refused) = converted.map(|c| c.refused_stacks).filter(|&n| n > 0) else {
        return;
    };
    let path = files::stats(out_dir, pid);
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let line = crate::stats::format_line(now, &[("alloc_stacks_refused", refused)]);
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
pub enum FullLogs {
    /// The recorder that wrote it removes it once read, so that the tables have room.
    Remove,
    /// A command that only reads the recording (recovering a killed recorder's spool)
    /// deletes nothing in it.
    Keep,
}

/// What a conversion hands its calls to besides the tables.
#[derive(Clone, Copy, Default)]
pub struct Watchers<'a> {
    /// Pairs them at record time ([`crate::PairCalls`]).
    pub pairing: Option<&'a PairingFactory>,
    /// A live view, told them as they are converted ([`Conversion::watch`]).
    pub live: Option<&'a crate::live::LiveAllocSink>,
}

/// Converts the logs of `pid` in spool directory `spool`: see [`AllocLogs::convert`]; the
/// calls go to `watch` too.
pub fn convert_spooled(
    spool: &Path,
    pid: u32,
    first_generation: u32,
    out_dir: &Path,
    metadata: &super::SpoolMetadata,
    full_logs: FullLogs,
    watch: Watchers<'_>,
) -> Result<Option<Converted>, Error> {
    let Watchers { pairing, live } = watch;
    let (mono_offset, recording) = (metadata.mono_offset, metadata.recording.as_str());
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
        pairing,
    )?;
    if let Some(sink) = live {
        conversion.watch(pid, sink.clone());
    }
    for (image, mut log) in logs.into_iter().enumerate() {
        let generation = first_generation + image as u32;
        let floor = image_start.get(&generation).copied().unwrap_or(0);
        conversion.convert_image(&mut log, generation, floor)?;
    }
    let (converted, totals, paired) = conversion.finish()?;
    write_pairing(out_dir, &origin, paired, &image_start)?;
    // Last: a totals file says its process's tables were written to the end.
    crate::write_alloc_totals(&files::alloc_totals(out_dir, pid), origin, &totals)?;
    Ok(Some(converted))
}

/// Writes what the pairing at record time found ([`crate::write_alloc_stats`]) into the
/// recording, if it is what a report's own pass over the calls will find: the same execs
/// ended the blocks (the first mapping of each address-space generation after the first, up
/// to the last call: a generation the recorder saw but no log carried, or a start it learnt
/// late, would differ). Otherwise nothing is written and reports pair the calls themselves.
pub fn write_pairing(
    out_dir: &Path,
    origin: &Origin,
    paired: Option<AllocPassSummary>,
    image_start: &HashMap<u32, u64>,
) -> Result<(), Error> {
    let Some(summary) = paired else {
        return Ok(());
    };
    let mut execs: Vec<u64> = image_start
        .iter()
        .filter(|&(&generation, &time)| generation > 0 && time > 0 && time <= summary.last_event_ns)
        .map(|(_, &time)| time)
        .collect();
    execs.sort_unstable();
    if execs != summary.execs {
        log::debug!(
            "allocations of process {}: the pairing's execs {:?} are not the recording's {execs:?}; reports pair the calls themselves",
            origin.pid,
            summary.execs
        );
        return Ok(());
    }
    crate::write_alloc_stats(
        &files::alloc_stats(out_dir, origin.pid),
        origin.clone(),
        &summary,
    )
}

/// One process's tables being written from its logs, image after image.
pub struct Conversion {
    allocs: BackgroundWriter,
    /// The generation of the image being converted, once one is.
    generation: Option<u32>,
    stack_writer: StackWriter,
    stacks: Stacks,
    converted: Converted,
    /// The time of the last event written. A record a thread published late (it was held up
    /// between reading the clock and publishing) after later ones were written gets that
    /// time: the table stays in time order.
    last_ns: u64,
    /// The time of the current image's first event.
    first_ns: Option<u64>,
    frames: Box<[u64; MAX_FRAMES]>,
    /// What a live view is told, when one watches ([`Conversion::watch`]).
    live: Option<LiveTap>,
    /// Pairs the events at record time, if asked ([`crate::PairCalls`]), on this thread: a
    /// few at a time, while they are in the cache (the file thread read each batch cold).
    pairing: Option<Box<dyn crate::PairCalls>>,
    /// The events not paired yet, fewer than [`PAIR_EVERY`].
    unpaired: Vec<AllocEvent>,
    started: std::time::Instant,
    started_cpu: std::time::Duration,
    started_thread: std::thread::ThreadId,
}

/// The CPU time of the calling thread so far: the crate's one thread CPU clock, also the
/// clock of the timing measurements of the trace and analyze crates' tests.
#[expect(
    clippy::disallowed_methods,
    reason = "the trace crate's one clock_gettime, the thread CPU clock (the crate takes libc, not rustix)"
)]
pub fn thread_cpu() -> std::time::Duration {
    let mut now = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime fills the struct it is given.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut now) };
    std::time::Duration::new(now.tv_sec as u64, now.tv_nsec as u32)
}

impl Conversion {
    /// Creates the tables at `allocs` and `stacks`, of process and recording `origin`; the
    /// events are paired on the way by one of `pairing`'s, if given.
    pub fn create(
        allocs: &Path,
        stacks: &Path,
        origin: Origin,
        pairing: Option<&PairingFactory>,
    ) -> Result<Conversion, Error> {
        Ok(Conversion {
            allocs: BackgroundWriter::start(
                allocs,
                AllocWriter::create_for(allocs, origin.clone())?,
            ),
            generation: None,
            stack_writer: StackWriter::create_for(stacks, origin)?,
            stacks: Stacks::default(),
            converted: Converted::default(),
            last_ns: 0,
            first_ns: None,
            frames: Box::new([0; MAX_FRAMES]),
            live: None,
            unpaired: Vec::with_capacity(if pairing.is_some() { PAIR_EVERY } else { 0 }),
            pairing: pairing.map(|make| make()),
            started: std::time::Instant::now(),
            started_cpu: thread_cpu(),
            started_thread: std::thread::current().id(),
        })
    }

    /// Tells `sink` what is converted from now on (a live view, `fltrace top`), every
    /// [`LIVE_EVERY`] at most and at the end of each image: the stacks, the calls and the
    /// execs, as written into the tables. The first message says to forget what an earlier
    /// conversion of the process told.
    pub fn watch(&mut self, pid: u32, sink: crate::live::LiveAllocSink) {
        self.live = Some(LiveTap {
            sink,
            pending: crate::live::LiveAllocs {
                pid,
                restart: true,
                ..Default::default()
            },
            last_sent: std::time::Instant::now(),
        });
    }

    /// Hands the live view what it was not told yet, if anything.
    pub fn flush_live(&mut self) {
        let dropped = self.converted.dropped;
        if let Some(tap) = &mut self.live {
            tap.send(dropped);
        }
    }

    /// Writes the records of `log` (image of address-space generation `generation`, whose
    /// times start no earlier than `floor`) that come before `watermark`, at most
    /// `max_events` events. Returns the events written.
    pub fn convert(
        &mut self,
        log: &mut LiveLog,
        generation: u32,
        floor: u64,
        watermark: u64,
        max_events: u64,
    ) -> Result<u64, Error> {
        if self.stacks.local.len() <= generation as usize {
            self.stacks
                .local
                .resize(generation as usize + 1, LocalIds::default());
        }
        if self.generation != Some(generation) {
            self.generation = Some(generation);
            // An image after an exec: its blocks begin anew at its first mapping.
            if generation > 0 && floor > 0 {
                self.pair_unpaired();
                if let Some(pairing) = &mut self.pairing {
                    pairing.exec(floor);
                }
                if let Some(tap) = &mut self.live {
                    tap.pending.execs.push((tap.pending.events.len(), floor));
                }
            }
        }
        let mut written = 0;
        while written < max_events {
            // Most events come in runs of one thread, moved out of the log at once, straight
            // into the batch for the table, and handled there together.
            let start = self.allocs.batch.len();
            let most = (max_events - written)
                .min(PAIR_EVERY as u64)
                .min((BATCH - start) as u64) as usize;
            let moved = log.next_events(watermark, &mut self.allocs.batch, most);
            if moved > 0 {
                written += moved as u64;
                self.events(start, generation, floor)?;
                continue;
            }
            match log.next(watermark, &mut self.frames) {
                None => break,
                Some(Item::Stack(local_id, len)) => {
                    self.stacks.define(
                        generation,
                        local_id,
                        &self.frames[..len],
                        &mut self.stack_writer,
                        self.live.as_mut().map(|tap| &mut tap.pending.stacks),
                    )?;
                }
                // `next_events` moves every event that comes next; one here is written all
                // the same.
                Some(Item::Event(event)) => {
                    self.allocs.batch.push(event);
                    self.events(self.allocs.batch.len() - 1, generation, floor)?;
                    written += 1;
                }
            }
        }
        self.converted.events += written;
        if let Some(tap) = &mut self.live
            && tap.last_sent.elapsed() >= LIVE_EVERY
        {
            tap.send(self.converted.dropped + log.dropped());
        }
        Ok(written)
    }

    /// Takes in the events of the table's batch from `start` on, the next of image
    /// `generation` (whose times start no earlier than `floor`): their times and stacks made
    /// the table's, handed to the pairing and the live view, and the batch sent to the
    /// encoders once full.
    fn events(&mut self, start: usize, generation: u32, floor: u64) -> Result<(), Error> {
        let events = &mut self.allocs.batch[start..];
        for event in events.iter_mut() {
            // An image's calls come after its exec, but the millisecond clock can put the
            // first ones before it: each image's times start no earlier than its first
            // mapping.
            event.time_ns = event.time_ns.max(floor).max(self.last_ns);
            self.last_ns = event.time_ns;
            if event.stack_id != AllocEvent::NO_STACK {
                event.stack_id = self.stacks.global(generation, event.stack_id);
            }
        }
        if let Some(first) = events.first() {
            self.first_ns.get_or_insert(first.time_ns);
        }
        if let Some(tap) = &mut self.live {
            tap.pending.events.extend_from_slice(events);
        }
        if let Some(pairing) = &mut self.pairing {
            // A long run is paired as it is; short ones (threads taking turns) are gathered.
            if self.unpaired.is_empty() && events.len() >= PAIR_EVERY / 2 {
                pairing.events(events);
            } else {
                self.unpaired.extend_from_slice(events);
                if self.unpaired.len() >= PAIR_EVERY {
                    self.pair_unpaired();
                }
            }
        }
        if self.allocs.batch.len() >= BATCH {
            self.allocs.send_batch()?;
        }
        Ok(())
    }

    /// Hands the pairing the events not paired yet.
    fn pair_unpaired(&mut self) {
        if let Some(pairing) = &mut self.pairing
            && !self.unpaired.is_empty()
        {
            pairing.events(&self.unpaired);
            self.unpaired.clear();
        }
    }

    /// Writes every record of `log`, complete, and what its header says.
    pub fn convert_image(
        &mut self,
        log: &mut LiveLog,
        generation: u32,
        floor: u64,
    ) -> Result<(), Error> {
        log.complete()?;
        self.convert(log, generation, floor, u64::MAX, u64::MAX)?;
        self.end_image(log);
        self.flush_live();
        Ok(())
    }

    /// Takes in what the header of `log`, converted to its end, says: the records dropped,
    /// when the tracer stopped, the chunks that did not decode.
    pub fn end_image(&mut self, log: &LiveLog) {
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
    pub fn checkpoint(&mut self) -> Result<(), Error> {
        self.allocs.checkpoint()
    }

    /// Gives up: the event table's writer stops without writing what it was given nor its
    /// footer, and both files are closed (the caller removes them).
    pub fn abandon(mut self) {
        self.allocs.abandon();
    }

    /// Finishes both tables; returns what was converted, the totals per (stack, call, size)
    /// and what the pairing found (if there was one and it took every event).
    pub fn finish(
        mut self,
    ) -> Result<(Converted, Vec<crate::AllocTotal>, Option<AllocPassSummary>), Error> {
        self.flush_live();
        self.allocs.finish()?;
        // A drain's conversion ends on another thread than it began: its CPU is not known.
        let own_cpu = if std::thread::current().id() == self.started_thread {
            let cpu = thread_cpu().saturating_sub(self.started_cpu);
            format!(" ({:.3} s of CPU)", cpu.as_secs_f64())
        } else {
            String::new()
        };
        log::debug!(
            "{}: {} events in {:.3} s{own_cpu}, {:.3} s of them waiting for the writer, which took {:.3} s of CPU",
            self.allocs.path.display(),
            self.converted.events,
            self.started.elapsed().as_secs_f64(),
            self.allocs.waited.as_secs_f64(),
            self.allocs
                .busy
                .lock()
                .map_or(0.0, |busy| busy.as_secs_f64())
        );
        self.pair_unpaired();
        let paired = self.pairing.take().and_then(|pairing| pairing.finish());
        self.stack_writer.finish()?;
        self.converted.stacks = self.stacks.next;
        self.converted.refused_stacks = self.stacks.refused;
        Ok((self.converted, self.allocs.totals.totals(), paired))
    }
}
/// Events handed to the record-time pairing at once: 48 KiB, still in the cache.
const PAIR_EVERY: usize = 1024;

/// How often a watched conversion tells its live view what it converted: within a view's
/// interval (a second by default) with room to spare.
pub const LIVE_EVERY: std::time::Duration = std::time::Duration::from_millis(50);

/// A live view watching a conversion, and what it was not told yet.
struct LiveTap {
    sink: crate::live::LiveAllocSink,
    pending: crate::live::LiveAllocs,
    last_sent: std::time::Instant,
}

impl LiveTap {
    /// Sends what is pending, if anything; `dropped`: the records dropped so far.
    fn send(&mut self, dropped: u64) {
        self.last_sent = std::time::Instant::now();
        let changed = dropped != self.pending.dropped;
        self.pending.dropped = dropped;
        if self.pending.is_empty() && !changed {
            return;
        }
        let pid = self.pending.pid;
        let sent = std::mem::replace(
            &mut self.pending,
            crate::live::LiveAllocs {
                pid,
                dropped,
                ..Default::default()
            },
        );
        (self.sink)(sent);
    }
}

/// Events handed in batches to threads that encode them: decoding and merging the logs is
/// about a third of a conversion's CPU and encoding Parquet the rest, so the batches, a row
/// group each, are encoded by [`ENCODERS`] threads at once and appended in order by a
/// thread that writes the file.
struct BackgroundWriter {
    /// The table written, for the error should its writer panic.
    path: PathBuf,
    batch: Vec<AllocEvent>,
    /// Batches the encoders are done with, to fill again.
    spare: std::sync::mpsc::Receiver<Vec<AllocEvent>>,
    /// To the encoders.
    sender: Option<std::sync::mpsc::SyncSender<Job>>,
    /// Each returns the totals of the events it encoded.
    encoders: Vec<std::thread::JoinHandle<AllocTotals>>,
    /// The totals per (stack, call, size) of every event, once the encoders have ended.
    totals: AllocTotals,
    /// The thread that writes the file.
    thread: Option<std::thread::JoinHandle<Result<(), Error>>>,
    /// The next job's place in the file, and the next batch's first row.
    next_job: u64,
    next_row: u64,
    /// Time spent waiting for the writer: with the writer's own, where a conversion's time
    /// goes (`record -vv`).
    waited: std::time::Duration,
    /// The encoders' and the file thread's CPU time, once they have ended.
    busy: std::sync::Arc<std::sync::Mutex<std::time::Duration>>,
    /// Set when the table is given up: the threads drop what they hold unwritten.
    abandoned: std::sync::Arc<std::sync::atomic::AtomicBool>,
}

/// What the encoders are given, numbered in file order.
enum Job {
    Events {
        number: u64,
        first: u64,
        events: Vec<AllocEvent>,
    },
    /// Write what was given so far and a checkpoint.
    Checkpoint { number: u64 },
}

/// What the file thread is handed, numbered as its job.
enum Encoded {
    Group(Result<EncodedGroup, Error>),
    Checkpoint,
}

/// Events per batch handed to the encoders: a row group.
const BATCH: usize = 1 << 16;
/// Threads encoding row groups at once.
const ENCODERS: usize = 2;

impl BackgroundWriter {
    fn start(path: &Path, mut writer: AllocWriter) -> BackgroundWriter {
        use std::sync::atomic::Ordering;
        use std::sync::{Arc, Mutex};
        let (sender, jobs) = std::sync::mpsc::sync_channel::<Job>(ENCODERS);
        let jobs = Arc::new(Mutex::new(jobs));
        let (done, encoded) = std::sync::mpsc::channel::<(u64, Encoded)>();
        let (recycle, spare) = std::sync::mpsc::channel::<Vec<AllocEvent>>();
        let abandoned = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let busy = Arc::new(Mutex::new(std::time::Duration::ZERO));
        let add_busy = |busy: &Arc<Mutex<std::time::Duration>>, spent| {
            if let Ok(mut total) = busy.lock() {
                *total += spent;
            }
        };
        let encoders = (0..ENCODERS)
            .map(|_| {
                let (jobs, done, given_up, busy) =
                    (jobs.clone(), done.clone(), abandoned.clone(), busy.clone());
                let recycle = recycle.clone();
                let mut encoder = writer.group_encoder();
                std::thread::spawn(move || {
                    let started = thread_cpu();
                    // Counted here, off the thread that decodes the logs.
                    let mut totals = AllocTotals::default();
                    loop {
                        let job = match jobs.lock() {
                            Ok(jobs) => jobs.recv(),
                            Err(_) => break,
                        };
                        let Ok(job) = job else {
                            break;
                        };
                        if given_up.load(Ordering::Acquire) {
                            break;
                        }
                        let (number, encoded) = match job {
                            Job::Events {
                                number,
                                first,
                                events,
                            } => {
                                for event in &events {
                                    totals.add(event);
                                }
                                let group = encoder.encode(first, &events);
                                // Back to the decoding thread, which fills it again while
                                // its pages are mapped and in the cache.
                                let _ = recycle.send(events);
                                (number, Encoded::Group(group))
                            }
                            Job::Checkpoint { number } => (number, Encoded::Checkpoint),
                        };
                        if done.send((number, encoded)).is_err() {
                            break;
                        }
                    }
                    add_busy(&busy, thread_cpu().saturating_sub(started));
                    totals
                })
            })
            .collect();
        drop(done);
        let (given_up, file_busy, file) = (abandoned.clone(), busy.clone(), path.to_owned());
        let thread = std::thread::spawn(move || {
            let started = thread_cpu();
            let result = (|| -> Result<(), Error> {
                // Encoded out of order by the encoders, written in order.
                let mut waiting = std::collections::BTreeMap::new();
                let mut next = 0;
                for (number, encoded) in encoded {
                    if given_up.load(Ordering::Acquire) {
                        return Ok(());
                    }
                    waiting.insert(number, encoded);
                    while let Some(encoded) = waiting.remove(&next) {
                        match encoded {
                            Encoded::Group(group) => writer.push_encoded(group?)?,
                            Encoded::Checkpoint => writer.checkpoint()?,
                        }
                        next += 1;
                    }
                }
                if given_up.load(Ordering::Acquire) {
                    return Ok(());
                }
                if !waiting.is_empty() {
                    return Err(Error::Write {
                        path: file,
                        source: "an allocation table encoder ended early".into(),
                    });
                }
                writer.finish()
            })();
            add_busy(&file_busy, thread_cpu().saturating_sub(started));
            result
        });
        BackgroundWriter {
            path: path.to_owned(),
            batch: Vec::with_capacity(BATCH),
            spare,
            sender: Some(sender),
            encoders,
            totals: AllocTotals::default(),
            thread: Some(thread),
            next_job: 0,
            next_row: 0,
            waited: std::time::Duration::ZERO,
            busy,
            abandoned,
        }
    }

    /// Stops the threads without writing what is left, and waits until the file is closed.
    fn abandon(&mut self) {
        self.abandoned
            .store(true, std::sync::atomic::Ordering::Release);
        self.batch = Vec::new();
        self.sender = None;
        for encoder in self.encoders.drain(..) {
            let _ = encoder.join();
        }
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }

    /// Hands the batch to the encoders.
    fn send_batch(&mut self) -> Result<(), Error> {
        let next = match self.spare.try_recv() {
            Ok(mut events) => {
                events.clear();
                events
            }
            Err(_) => Vec::with_capacity(BATCH),
        };
        let events = std::mem::replace(&mut self.batch, next);
        let first = self.next_row;
        self.next_row += events.len() as u64;
        let number = self.next_job;
        self.send(Job::Events {
            number,
            first,
            events,
        })
    }

    /// Has every event pushed so far written, and a checkpoint after them.
    fn checkpoint(&mut self) -> Result<(), Error> {
        if !self.batch.is_empty() {
            self.send_batch()?;
        }
        let number = self.next_job;
        self.send(Job::Checkpoint { number })
    }

    fn send(&mut self, job: Job) -> Result<(), Error> {
        self.next_job += 1;
        let started = std::time::Instant::now();
        let sent = self.sender.as_ref().map(|sender| sender.send(job));
        self.waited += started.elapsed();
        match sent {
            // The threads only hang up after an error, which `finish` returns.
            Some(Err(_)) => self.finish(),
            _ => Ok(()),
        }
    }

    /// Writes what is left and waits for the threads.
    fn finish(&mut self) -> Result<(), Error> {
        if !self.batch.is_empty() && self.sender.is_some() {
            let events = std::mem::take(&mut self.batch);
            let (number, first) = (self.next_job, self.next_row);
            self.next_job += 1;
            if let Some(sender) = &self.sender {
                let _ = sender.send(Job::Events {
                    number,
                    first,
                    events,
                });
            }
        }
        self.sender = None;
        let started = std::time::Instant::now();
        let mut encoders_ended = true;
        for encoder in self.encoders.drain(..) {
            match encoder.join() {
                Ok(totals) => self.totals.merge(totals),
                Err(_) => encoders_ended = false,
            }
        }
        let joined = self.thread.take().map(|thread| thread.join());
        self.waited += started.elapsed();
        match joined {
            Some(joined) => {
                joined.ok().filter(|_| encoders_ended).unwrap_or_else(|| {
                    Err(Error::Write {
                        path: self.path.clone(),
                        source: "the allocation table writer panicked".into(),
                    })
                })?;
                Ok(())
            }
            None => Ok(()),
        }
    }
}

/// A conversion dropped before it finished (an error on the way) leaves no thread writing
/// behind it into a file about to be removed.
impl Drop for BackgroundWriter {
    fn drop(&mut self) {
        if self.thread.is_some() {
            self.abandon();
        }
    }
}

/// `; <n> stack definitions refused ...` when a conversion refused some.
pub fn refused_note(converted: &Converted) -> String {
    if converted.refused_stacks == 0 {
        return String::new();
    }
    format!(
        "; {} stack definitions refused (more than {STACK_FRAMES_CAP} frames), their calls kept without a stack",
        converted.refused_stacks
    )
}

/// The time each address-space generation of a process began: its first mapping.
pub fn image_starts(mmaps: &Path) -> Result<HashMap<u32, u64>, Error> {
    let mut starts: HashMap<u32, u64> = HashMap::new();
    if !mmaps.is_file() {
        return Ok(starts);
    }
    for mapping in crate::read_mappings(mmaps)? {
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
pub const STACK_FRAMES_CAP: usize = 1 << 24;

/// How far beyond twice its definitions an image's dense id table may grow: the ids of
/// threads that define their stacks out of time order stay dense.
const DENSE_SLACK: usize = 1 << 16;

impl Stacks {
    /// Defines local stack `local_id` of image `generation`; a stack new to the table is
    /// also pushed onto `live`, if given.
    fn define(
        &mut self,
        generation: u32,
        local_id: u32,
        frames: &[u64],
        writer: &mut StackWriter,
        live: Option<&mut Vec<Stack>>,
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
                let stack = Stack {
                    end: crate::StackEnd::Unknown,
                    id,
                    generation,
                    frames: key.1.iter().map(|&frame| CodeAddr::new(frame)).collect(),
                };
                if let Some(live) = live {
                    live.push(stack.clone());
                }
                writer.push(stack)?;
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

/// Where the time of converting an allocation log goes: `FLTRACE_BENCH_LOG=<a log-PID.0 of
/// a spool> cargo test --release -p fltrace-trace log_convert_time -- --ignored --nocapture`
/// decodes and merges the log alone, then converts it into tables, and prints the CPU time
/// per event of the thread that decodes. A measurement, not a test: nothing is asserted.
#[cfg(test)]
mod timing {
    use super::*;

    #[test]
    #[ignore]
    fn log_convert_time() {
        let Some(path) = std::env::var_os("FLTRACE_BENCH_LOG") else {
            eprintln!("FLTRACE_BENCH_LOG names no log");
            return;
        };
        let path = PathBuf::from(path);
        let mut frames = Box::new([0u64; MAX_FRAMES]);
        for round in 0..3 {
            let started = thread_cpu();
            let mut log = LiveLog::open(&path, 0, true).unwrap().unwrap();
            let mut events = 0u64;
            while let Some(item) = log.next(u64::MAX, &mut frames) {
                events += u64::from(matches!(item, Item::Event(_)));
            }
            let decoded = thread_cpu() - started;
            let dir = tempfile::tempdir().unwrap();
            let started = thread_cpu();
            let mut log = LiveLog::open(&path, 0, true).unwrap().unwrap();
            let mut conversion = Conversion::create(
                &dir.path().join("a.parquet"),
                &dir.path().join("s.parquet"),
                Origin::new("1-2", 1),
                None,
            )
            .unwrap();
            conversion.convert_image(&mut log, 0, 0).unwrap();
            let converting = thread_cpu() - started;
            let waited = conversion.allocs.waited;
            conversion.finish().unwrap();
            eprintln!(
                "round {round}: {events} events, decoding and merging {:.1} ns an event, converting {:.1} ns an event on the decoding thread ({:.3} s of it waiting for the encoders)",
                decoded.as_nanos() as f64 / events as f64,
                converting.as_nanos() as f64 / events as f64,
                waited.as_secs_f64()
            );
        }
    }
}
