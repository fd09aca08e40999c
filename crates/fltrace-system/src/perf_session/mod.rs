//! Opening events on every CPU for a scope (the whole system, processes and their children, a
//! command started here, a cgroup), reading their rings in time order with the side-band
//! records that name processes and their mappings, and stopping on Ctrl-C, SIGTERM, a
//! duration or the command's end.

use std::borrow::Cow;
use std::collections::HashMap;
use std::os::fd::AsRawFd;
use std::os::unix::process::ExitStatusExt;
use std::process::ExitStatus;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use linux_perf_event_reader::{
    EventRecord, RawEventRecord, RecordParseInfo, RecordType, SampleRecord,
};
use perf_event_open_sys::bindings::{
    self as b, PERF_RECORD_LOST, PERF_RECORD_SAMPLE, PERF_SAMPLE_ADDR, PERF_SAMPLE_CALLCHAIN,
    PERF_SAMPLE_CPU, PERF_SAMPLE_IDENTIFIER, PERF_SAMPLE_RAW, PERF_SAMPLE_REGS_USER,
    PERF_SAMPLE_STACK_USER, PERF_SAMPLE_TID, PERF_SAMPLE_TIME, perf_event_attr,
};

use fltrace_capture::perf::{
    PerfEvent, REG_BP, REG_IP, REG_SP, RingBuffer, TracefsUprobes, online_cpus, parse_info,
};
use fltrace_trace::Mapping;

use crate::procfs;
use crate::tracefs::TracepointFormat;
use crate::{Error, Scope};

pub(crate) mod unwound;

/// Records handled between two readings of the rings during a long batch.
const DRAIN_EVERY: usize = 8;

/// What to open.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Source {
    /// A tracepoint, with its raw fields.
    Tracepoint {
        /// Its group (`oom`).
        group: Cow<'static, str>,
        /// Its name (`mark_victim`).
        name: Cow<'static, str>,
    },
    /// The software event of major page faults, with the fault address.
    MajorFaults,
    /// A software event (`PERF_COUNT_SW_*`), at each occurrence, with the address of faults.
    Software {
        /// Its `PERF_COUNT_SW_*` number.
        config: u32,
    },
    /// A user function's entry, or its return, with the argument and result registers.
    Uprobe {
        /// The ELF file.
        path: std::path::PathBuf,
        /// The function's offset in the file.
        offset: u64,
        /// At its return.
        ret: bool,
    },
}

impl Source {
    /// The tracepoint `group:name`.
    pub const fn tracepoint(group: &'static str, name: &'static str) -> Source {
        Source::Tracepoint {
            group: Cow::Borrowed(group),
            name: Cow::Borrowed(name),
        }
    }

    /// How a user reads it: `syscalls:sys_enter_brk`, `software 2`, `uprobe PATH+OFFSET`.
    pub fn describe(&self) -> String {
        match self {
            Source::Tracepoint { group, name } => format!("{group}:{name}"),
            Source::MajorFaults => "major-faults".to_owned(),
            Source::Software { config } => format!("software event {config}"),
            Source::Uprobe { path, offset, ret } => format!(
                "{} {}+0x{offset:x}",
                if *ret { "uretprobe" } else { "uprobe" },
                path.display()
            ),
        }
    }
}

/// x86_64 perf register numbers of a function's arguments (rdi, rsi, rdx, rcx, r8, r9) and
/// its result (rax), as `Sample::args` holds them.
const ARG_REGS: [u64; 7] = [5, 4, 3, 2, 16, 17, 0];

/// Which user stack each sample carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StackMode {
    /// None.
    None,
    /// The kernel's frame-pointer walk of the user stack (`PERF_SAMPLE_CALLCHAIN`).
    Callchain,
    /// The user registers and this many bytes of user stack, for DWARF unwinding here.
    Dwarf(u32),
    /// As [`StackMode::Dwarf`], and the kernel's stack in `Sample::callchain`.
    DwarfAndKernel(u32),
    /// The kernel's stack only, in `Sample::callchain`.
    KernelCallchain,
}

/// How the perf events is opened.
#[derive(Debug, Clone, Copy)]
pub struct Options {
    /// Stacks of samples.
    pub stack: StackMode,
    /// Whether mapping side-band records (`mmap2`) are wanted.
    pub mappings: bool,
    /// Ring buffer pages per CPU (a power of two).
    pub ring_pages: usize,
    /// One sample every this many events (1: every event).
    pub sample_period: u64,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            stack: StackMode::None,
            mappings: false,
            ring_pages: 64,
            sample_period: 1,
        }
    }
}

/// One sample of a source.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Sample {
    /// Index of its source in the list the events was opened with.
    pub source: usize,
    /// Process id.
    pub pid: u32,
    /// Thread id.
    pub tid: u32,
    /// CPU.
    pub cpu: u32,
    /// CLOCK_MONOTONIC, nanoseconds.
    pub time_ns: u64,
    /// The address of a fault event (`PERF_SAMPLE_ADDR`).
    pub addr: u64,
    /// The tracepoint's raw record (decode with its [`TracepointFormat`]).
    pub raw: Vec<u8>,
    /// User ip, sp and bp, with [`StackMode::Dwarf`].
    pub regs: Option<(u64, u64, u64)>,
    /// Bytes of user stack from sp, with [`StackMode::Dwarf`].
    pub stack: Vec<u8>,
    /// User frames innermost first, with [`StackMode::Callchain`]; kernel frames with
    /// [`StackMode::DwarfAndKernel`].
    pub callchain: Vec<u64>,
    /// A uprobe's arguments (rdi, rsi, rdx, rcx, r8, r9) and result (rax).
    pub args: [u64; 7],
}

/// A record read from the rings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Record {
    /// An event.
    Sample(Sample),
    /// A thread was named, or exec'd a new program (`exec`).
    Comm {
        /// Process id.
        pid: u32,
        /// Thread id.
        tid: u32,
        /// The new name.
        comm: String,
        /// Whether it came with an exec.
        exec: bool,
        /// CLOCK_MONOTONIC, ns.
        time_ns: u64,
    },
    /// A thread or process was created.
    Fork {
        /// The new process id.
        pid: u32,
        /// The creating process.
        ppid: u32,
        /// The new thread id.
        tid: u32,
        /// The creating thread.
        ptid: u32,
        /// CLOCK_MONOTONIC, ns.
        time_ns: u64,
    },
    /// A thread ended.
    Exit {
        /// Process id.
        pid: u32,
        /// Thread id.
        tid: u32,
        /// CLOCK_MONOTONIC, ns.
        time_ns: u64,
    },
    /// A new mapping.
    Mmap {
        /// Process id.
        pid: u32,
        /// Thread id.
        tid: u32,
        /// CLOCK_MONOTONIC, ns.
        time_ns: u64,
        /// The mapping (time_ns 0, generation 0).
        mapping: Mapping,
    },
}

impl Record {
    fn time_ns(&self) -> u64 {
        match self {
            Record::Sample(s) => s.time_ns,
            Record::Comm { time_ns, .. }
            | Record::Fork { time_ns, .. }
            | Record::Exit { time_ns, .. }
            | Record::Mmap { time_ns, .. } => *time_ns,
        }
    }
}

/// What the handlers of the perf events can ask: names of threads, times.
pub struct Context {
    comms: HashMap<u32, String>,
    start_mono_ns: u64,
    /// Unix time minus monotonic time, ns.
    wall_offset_ns: i128,
    /// Records lost because a ring was full.
    pub lost: u64,
}

impl Context {
    /// The name of thread `tid`: from side-band records, else /proc, else `?`.
    pub fn comm(&self, tid: u32) -> String {
        self.comms
            .get(&tid)
            .cloned()
            .or_else(|| procfs::comm(tid).ok())
            .unwrap_or_else(|| "?".to_owned())
    }

    /// Seconds since the events started, of a monotonic time.
    pub fn seconds(&self, mono_ns: u64) -> f64 {
        mono_ns.saturating_sub(self.start_mono_ns) as f64 / 1e9
    }

    /// Unix time in ns of a monotonic time.
    pub fn wall_ns(&self, mono_ns: u64) -> i128 {
        mono_ns as i128 + self.wall_offset_ns
    }

    fn observe(&mut self, record: &Record) {
        match record {
            Record::Comm { tid, comm, .. } => {
                self.comms.insert(*tid, comm.clone());
            }
            Record::Fork { tid, ptid, .. } => {
                if let Some(name) = self
                    .comms
                    .get(ptid)
                    .cloned()
                    .or_else(|| procfs::comm(*ptid).ok())
                {
                    self.comms.insert(*tid, name);
                }
            }
            _ => {}
        }
    }
}

/// Open events and their rings.
pub struct PerfEvents {
    _events: Vec<PerfEvent>,
    rings: Vec<RingBuffer>,
    /// The file of each ring's event, which poll(2) waits on.
    ring_fds: Vec<std::os::fd::RawFd>,
    /// The id of each event to its source and parse layout.
    by_id: HashMap<u64, usize>,
    parse_infos: Vec<RecordParseInfo>,
    /// The formats of the sources (None for software events).
    pub formats: Vec<Option<TracepointFormat>>,
    child: Option<i32>,
    /// The processes named with -p: the events ends when all have exited.
    pids: Vec<i32>,
    cgroup_filter: Option<procfs::CgroupFilter>,
    comm_filter: Option<String>,
    /// Names, times and counters the handlers see.
    pub context: Context,
    /// What the events cannot see, one line each, for the user (a cgroup filtered in user
    /// space...).
    pub notes: Vec<String>,
    totals: std::sync::Arc<RunTotals>,
    /// Samples read from the rings, wanted or not.
    received: u64,
    sample_period: u64,
    /// Last: the kernel removes a probe only once its events are closed, and a mapped ring
    /// holds its event open.
    _uprobes: Option<TracefsUprobes>,
}

/// Samples the perf events handed on and records the kernel could not write, readable after the
/// events are consumed by a tool's run.
#[derive(Debug, Default)]
pub struct RunTotals {
    /// Samples handed to the tool.
    pub seen: std::sync::atomic::AtomicU64,
    /// Records lost because a ring was full.
    pub lost: std::sync::atomic::AtomicU64,
    /// Events read but which the tool could not judge (a hfaults fault whose process ended).
    pub unseen: std::sync::atomic::AtomicU64,
}

/// The attributes of `source`'s events; `id` is a tracepoint's (a uprobe's too: its tracefs
/// definition's).
fn attr_of(source: &Source, id: u64, stack: StackMode) -> perf_event_attr {
    let mut attr = perf_event_attr {
        size: std::mem::size_of::<perf_event_attr>() as u32,
        ..Default::default()
    };
    attr.sample_period = 1;
    attr.set_disabled(1);
    attr.set_use_clockid(1);
    attr.clockid = libc::CLOCK_MONOTONIC;
    attr.set_exclude_hv(1);
    let mut sample_type =
        PERF_SAMPLE_IDENTIFIER | PERF_SAMPLE_TID | PERF_SAMPLE_TIME | PERF_SAMPLE_CPU;
    match source {
        Source::Tracepoint { .. } => {
            attr.type_ = b::PERF_TYPE_TRACEPOINT;
            attr.config = id;
            sample_type |= PERF_SAMPLE_RAW;
        }
        Source::MajorFaults => {
            attr.type_ = b::PERF_TYPE_SOFTWARE;
            attr.config = u64::from(b::PERF_COUNT_SW_PAGE_FAULTS_MAJ);
            sample_type |= PERF_SAMPLE_ADDR;
        }
        Source::Software { config } => {
            attr.type_ = b::PERF_TYPE_SOFTWARE;
            attr.config = u64::from(*config);
            sample_type |= PERF_SAMPLE_ADDR;
        }
        Source::Uprobe { .. } => {
            attr.type_ = b::PERF_TYPE_TRACEPOINT;
            attr.config = id;
            sample_type |= PERF_SAMPLE_REGS_USER;
            attr.sample_regs_user =
                ARG_REGS.iter().fold(0, |regs, r| regs | (1 << r)) | user_stack_regs();
        }
    }
    match stack {
        StackMode::None => {}
        StackMode::Callchain => {
            sample_type |= PERF_SAMPLE_CALLCHAIN;
            attr.set_exclude_callchain_kernel(1);
        }
        StackMode::Dwarf(bytes) => {
            sample_type |= PERF_SAMPLE_REGS_USER | PERF_SAMPLE_STACK_USER;
            attr.sample_regs_user |= user_stack_regs();
            attr.sample_stack_user = bytes;
        }
        StackMode::KernelCallchain => {
            sample_type |= PERF_SAMPLE_CALLCHAIN;
            attr.set_exclude_callchain_user(1);
        }
        StackMode::DwarfAndKernel(bytes) => {
            sample_type |= PERF_SAMPLE_REGS_USER | PERF_SAMPLE_STACK_USER | PERF_SAMPLE_CALLCHAIN;
            attr.set_exclude_callchain_user(1);
            attr.sample_regs_user |= user_stack_regs();
            attr.sample_stack_user = bytes;
        }
    }
    attr.sample_type = u64::from(sample_type);
    attr
}

/// The registers DWARF unwinding starts from.
fn user_stack_regs() -> u64 {
    (1 << REG_BP) | (1 << REG_SP) | (1 << REG_IP)
}

/// The sample layout of `source` events opened with `stack`, for parsing records built in
/// tests as the kernel lays them out.
#[cfg(test)]
pub fn parse_info_of(source: Source, stack: StackMode) -> RecordParseInfo {
    parse_info(&attr_of(&source, 0, stack))
}

impl PerfEvents {
    /// Opens `sources` for `scope` on every CPU and enables them.
    pub fn open(sources: &[Source], scope: &Scope, options: Options) -> Result<PerfEvents, Error> {
        let mut formats = Vec::new();
        let mut attrs = Vec::new();
        // Defined in tracefs: the uprobe PMU's events cannot be inherited.
        let mut uprobes: Option<TracefsUprobes> = None;
        for (index, source) in sources.iter().enumerate() {
            let (format, id) = match source {
                Source::Tracepoint { group, name } => {
                    let format = TracepointFormat::read(group, name)?;
                    let id = format.id;
                    (Some(format), id)
                }
                Source::MajorFaults | Source::Software { .. } => (None, 0),
                Source::Uprobe { path, offset, ret } => {
                    let definitions = match &mut uprobes {
                        Some(d) => d,
                        None => uprobes.insert(TracefsUprobes::new().map_err(Error::kernel(
                            "uprobes (tracefs's uprobe_events, CONFIG_UPROBE_EVENTS)",
                        ))?),
                    };
                    let id = definitions.define(path, *offset, *ret).map_err(|source| {
                        Error::Target {
                            what: format!("cannot place a uprobe in {}", path.display()),
                            source,
                        }
                    })?;
                    (None, id)
                }
            };
            let mut attr = attr_of(source, id, options.stack);
            attr.sample_period = options.sample_period.max(1);
            if index == 0 {
                // Side-band records come once, with the first source's events.
                attr.set_comm(1);
                attr.set_comm_exec(1);
                attr.set_task(1);
                attr.set_sample_id_all(1);
                if options.mappings {
                    attr.set_mmap(1);
                    attr.set_mmap2(1);
                    attr.set_mmap_data(1);
                }
            }
            formats.push(format);
            attrs.push(attr);
        }
        let mut notes = Vec::new();
        let mut child = None;
        let mut release = None;
        let mut cgroup_filter = None;
        let mut cgroup_dir = None;
        // (pid argument, flags) of each event per CPU: the threads of the processes named
        // and the command, whose children inherit the events; else every task on the CPU, or
        // the cgroup's.
        let mut tasks: Vec<(i32, u32)> = Vec::new();
        for &pid in &scope.pids {
            let tids = procfs::tasks(pid as i32).map_err(|source| Error::Target {
                what: format!("cannot trace process {pid}"),
                source,
            })?;
            tasks.extend(tids.into_iter().map(|t| (t, 0)));
        }
        let inherit = scope.names_processes();
        if let Some(path) = &scope.cgroup {
            let dir = std::fs::File::open(path).map_err(|source| Error::Target {
                what: format!("cannot open cgroup {}", path.display()),
                source,
            })?;
            let filter = procfs::CgroupFilter::new(path).map_err(|source| Error::Target {
                what: format!("{} is not a cgroup directory", path.display()),
                source,
            })?;
            if inherit {
                // Events of named processes are opened on them: their cgroup is checked here,
                // read now while they run (a process may end before its samples are read;
                // children take their parent's, see `run`).
                let mut filter = filter;
                for &pid in &scope.pids {
                    filter.contains(pid);
                }
                cgroup_filter = Some(filter);
            } else {
                // The kernel filters by cgroup where the perf_event controller is on the
                // hierarchy (cgroup v2, or a v1 perf_event mount); else fltrace does it.
                let probe = PerfEvent::open_with_flags(
                    &attrs[0],
                    dir.as_raw_fd(),
                    0,
                    b::PERF_FLAG_PID_CGROUP,
                );
                match probe {
                    Ok(_) => {
                        tasks.push((dir.as_raw_fd(), b::PERF_FLAG_PID_CGROUP));
                        cgroup_dir = Some(dir);
                    }
                    Err(e) => {
                        notes.push(format!(
                            "the kernel cannot filter by {} ({e}: no perf_event controller on its hierarchy); filtering by the /proc/PID/cgroup of each event's process instead",
                            path.display()
                        ));
                        cgroup_filter = Some(filter);
                    }
                }
            }
        }
        if !scope.command.is_empty() {
            let pending = fltrace_capture::PendingChild::spawn(&scope.command, None, &[])?;
            let pid = pending.pid();
            child = Some(pid);
            release = Some(pending);
            tasks.push((pid, 0));
        }
        if tasks.is_empty() {
            tasks.push((-1, 0));
        }
        let opened = open_events(sources, &attrs, &tasks, inherit, options.ring_pages);
        let (events, rings, by_id, ring_fds) = match opened {
            Ok(opened) => opened,
            Err(e) => {
                // The command never runs when its tracing cannot be set up.
                if let Some(pending) = release {
                    pending.abort();
                }
                return Err(e);
            }
        };
        drop(cgroup_dir);
        let parse_infos = attrs.iter().map(parse_info).collect();
        let (mono, wall) = (crate::clock::monotonic_ns(), crate::clock::realtime_ns());
        if let Some(pending) = release {
            pending.release()?;
        }
        Ok(PerfEvents {
            _events: events,
            _uprobes: uprobes,
            rings,
            ring_fds,
            by_id,
            parse_infos,
            formats,
            child,
            pids: scope.pids.iter().map(|&p| p as i32).collect(),
            cgroup_filter,
            comm_filter: scope.comm.clone(),
            context: Context {
                comms: HashMap::new(),
                start_mono_ns: mono,
                wall_offset_ns: wall as i128 - mono as i128,
                lost: 0,
            },
            notes,
            totals: Default::default(),
            received: 0,
            sample_period: options.sample_period.max(1),
        })
    }

    /// Counts `n` events the tool could not judge, for the exit status.
    pub fn add_unseen(&self, n: u64) {
        self.totals.unseen.fetch_add(n, Ordering::Relaxed);
    }

    /// Its counts of samples seen and lost, which outlive it.
    pub fn totals(&self) -> std::sync::Arc<RunTotals> {
        self.totals.clone()
    }

    /// The format of source `index` (a tracepoint).
    pub fn format(&self, index: usize) -> Option<&TracepointFormat> {
        self.formats.get(index).and_then(Option::as_ref)
    }

    /// The pid of the command started here.
    pub fn child_pid(&self) -> Option<u32> {
        self.child.map(|pid| pid as u32)
    }

    /// Whether processes were named with -p and none of them lives any more.
    fn all_named_exited(&self) -> bool {
        !self.pids.is_empty() && self.pids.iter().all(|&p| !procfs::alive(p as u32))
    }

    /// Reads every ring and returns the records in time order.
    fn drain(&mut self) -> Vec<Record> {
        let mut records = Vec::new();
        let mut lost = 0;
        let mut received = 0;
        for ring in &mut self.rings {
            ring.drain(|raw| {
                if raw.kind == PERF_RECORD_LOST {
                    lost += raw
                        .data
                        .get(8..16)
                        .and_then(|d| d.as_slice().as_ref().try_into().ok())
                        .map_or(0, u64::from_ne_bytes);
                    return;
                }
                if raw.kind == PERF_RECORD_SAMPLE {
                    received += 1;
                }
                let data = raw.data.as_slice();
                if let Some(record) =
                    parse_record(raw.kind, raw.misc, &data, &self.by_id, &self.parse_infos)
                {
                    records.push(record);
                }
            });
        }
        self.context.lost += lost;
        self.received += received;
        self.totals.lost.fetch_add(lost, Ordering::Relaxed);
        records.sort_by_key(Record::time_ns);
        records
    }

    fn wanted(&mut self, sample: &Sample) -> bool {
        if let Some(filter) = &mut self.cgroup_filter
            && !filter.contains(sample.pid)
        {
            return false;
        }
        if let Some(comm) = &self.comm_filter
            && self.context.comm(sample.tid) != *comm
        {
            return false;
        }
        true
    }

    /// Adds to the losses the samples the kernel dropped without a record saying so: it writes
    /// its `LOST` record only at the next sample that fits, so the losses of a ring that
    /// filled at the end are never written. The events' own counters (one per sample, lost
    /// or not) give the samples there were.
    fn count_unreported_losses(&mut self) {
        let mut occurred = 0u64;
        for event in &self._events {
            let mut value = 0u64;
            // SAFETY: reads 8 bytes into `value` from an open perf event (read_format 0:
            // the counter's value alone).
            let n = unsafe {
                libc::read(
                    event.fd().as_raw_fd(),
                    (&mut value as *mut u64).cast(),
                    std::mem::size_of::<u64>(),
                )
            };
            if n != 8 {
                return;
            }
            // One sample every `sample_period` events of each event's own counter.
            occurred += value / self.sample_period;
        }
        let unreported = occurred.saturating_sub(self.received + self.context.lost);
        self.context.lost += unreported;
        self.totals.lost.fetch_add(unreported, Ordering::Relaxed);
    }

    /// Waits until a ring reaches its wake-up mark or `timeout` passes.
    fn wait_for_records(&self, timeout: Duration) {
        let mut fds: Vec<libc::pollfd> = self
            .ring_fds
            .iter()
            .map(|&fd| libc::pollfd {
                fd,
                events: libc::POLLIN,
                revents: 0,
            })
            .collect();
        // SAFETY: `fds` is a valid array of `fds.len()` pollfd structures for the call.
        let ready = unsafe {
            libc::poll(
                fds.as_mut_ptr(),
                fds.len() as libc::nfds_t,
                timeout.as_millis() as libc::c_int,
            )
        };
        // A ring whose event has ended (the command exited) polls as hung up at once.
        if ready > 0 && fds.iter().all(|f| f.revents & libc::POLLIN == 0) {
            std::thread::sleep(timeout);
        }
    }

    /// Hands every record to `each` until Ctrl-C or SIGTERM raise `stop`, `duration` passes or
    /// the command ends; `tick` is called every `interval` (with the monotonic time). Samples
    /// outside the scope's cgroup and name are dropped here. Returns the command's exit
    /// status, if one was started.
    pub fn run(
        &mut self,
        stop: &AtomicUsize,
        duration: Option<Duration>,
        interval: Option<Duration>,
        mut each: impl FnMut(&Context, Record),
        mut tick: impl FnMut(&Context, u64),
    ) -> Result<Option<std::process::ExitStatus>, Error> {
        let started = Instant::now();
        let mut next_tick = interval.map(|i| started + i);
        let mut status = None;
        loop {
            let last = stop.load(Ordering::Relaxed) > 0
                || duration.is_some_and(|d| started.elapsed() >= d)
                || status.is_some()
                || self.all_named_exited();
            if last {
                // Nothing more is written, so that the final reading and the events'
                // counters agree (see count_unreported_losses).
                for event in &self._events {
                    // SAFETY: an ioctl without arguments on an open perf event.
                    unsafe { perf_event_open_sys::ioctls::DISABLE(event.fd().as_raw_fd(), 0) };
                }
            }
            let mut pending: std::collections::VecDeque<Record> = self.drain().into();
            let mut handled = 0usize;
            while let Some(record) = pending.pop_front() {
                handled += 1;
                // Handling a sample (unwinding its stack) is slower than the kernel writes
                // them: the rings are emptied between handlings so that a burst does not
                // overflow them while earlier records are handled.
                if handled.is_multiple_of(DRAIN_EVERY) {
                    pending.extend(self.drain());
                }
                self.context.observe(&record);
                if let (Some(filter), Record::Fork { pid, ppid, .. }) =
                    (&mut self.cgroup_filter, &record)
                {
                    filter.inherit(*pid, *ppid);
                }
                if let Record::Sample(sample) = &record
                    && !self.wanted(sample)
                {
                    continue;
                }
                if matches!(record, Record::Sample(_)) {
                    self.totals.seen.fetch_add(1, Ordering::Relaxed);
                }
                each(&self.context, record);
            }
            if let (Some(at), Some(every)) = (next_tick, interval)
                && Instant::now() >= at
            {
                tick(&self.context, crate::clock::monotonic_ns());
                next_tick = Some(at + every);
            }
            if last {
                break;
            }
            if let Some(pid) = self.child
                && let Some(exit) = wait(pid, libc::WNOHANG)
            {
                // One more reading round collects what it did last.
                status = Some(exit);
                continue;
            }
            self.wait_for_records(Duration::from_millis(10));
        }
        if status.is_none()
            && let Some(pid) = self.child
        {
            // Stopped early: the command is left to finish, as `fltrace wss` does.
            status = wait(pid, 0);
        }
        self.count_unreported_losses();
        Ok(status)
    }
}

impl PerfEvents {
    /// [`run`](Self::run) for a tool that prints as it goes: `each` and `tick` return the
    /// error of a row that could not be printed, the run goes on, and the first such error is
    /// returned when it ends. With an `interval`, `tick` is called once more at the end
    /// (`last` true, with the monotonic time) for the last partial interval; its error comes
    /// before the earlier ones.
    pub fn run_printing(
        &mut self,
        stop: &AtomicUsize,
        duration: Option<Duration>,
        interval: Option<Duration>,
        mut each: impl FnMut(&Context, Record) -> Result<(), Error>,
        mut tick: impl FnMut(&Context, u64, bool) -> Result<(), Error>,
    ) -> Result<Option<std::process::ExitStatus>, Error> {
        let (mut each_failure, mut tick_failure) = (None, None);
        let status = self.run(
            stop,
            duration,
            interval,
            |ctx, record| {
                if let Err(e) = each(ctx, record) {
                    each_failure.get_or_insert(e);
                }
            },
            |ctx, now| {
                if let Err(e) = tick(ctx, now, false) {
                    tick_failure.get_or_insert(e);
                }
            },
        )?;
        if interval.is_some() {
            tick(&self.context, crate::clock::monotonic_ns(), true)?;
        }
        match each_failure.or(tick_failure) {
            Some(e) => Err(e),
            None => Ok(status),
        }
    }
}

/// Open events, their rings (one per CPU), the source of each event id, and the file of each
/// ring's event.
type Opened = (
    Vec<PerfEvent>,
    Vec<RingBuffer>,
    HashMap<u64, usize>,
    Vec<std::os::fd::RawFd>,
);

/// The events of every source for every task on every CPU, enabled, one ring per CPU.
fn open_events(
    sources: &[Source],
    attrs: &[perf_event_attr],
    tasks: &[(i32, u32)],
    inherit: bool,
    ring_pages: usize,
) -> Result<Opened, Error> {
    let cpus = online_cpus().map_err(Error::kernel("the list of online CPUs"))?;
    let mut events = Vec::new();
    let mut rings = Vec::new();
    let mut by_id = HashMap::new();
    let mut ring_fds = Vec::new();
    for &cpu in &cpus {
        let mut leader: Option<usize> = None;
        for (index, attr) in attrs.iter().enumerate() {
            let mut attr = *attr;
            attr.set_inherit(u64::from(inherit));
            // The reader is woken when a quarter of the ring is used, not only at its poll
            // interval: a burst of samples with stack copies fills a ring in milliseconds.
            attr.set_watermark(1);
            attr.__bindgen_anon_2.wakeup_watermark = (ring_pages * 4096 / 4) as u32;
            for &(pid, flags) in tasks {
                let event = match PerfEvent::open_with_flags(&attr, pid, cpu, flags) {
                    Ok(event) => event,
                    // A thread of a named process ended while we opened its events.
                    Err(e) if pid > 0 && flags == 0 && e.raw_os_error() == Some(libc::ESRCH) => {
                        continue;
                    }
                    Err(e) => {
                        let name = sources[index].describe();
                        return Err(Error::kernel(format!("opening {name}"))(e));
                    }
                };
                match leader {
                    Some(l) => event
                        .set_output(&events[l])
                        .map_err(Error::kernel("sharing a ring buffer"))?,
                    None => {
                        rings.push(
                            RingBuffer::map(&event, ring_pages)
                                .map_err(Error::kernel("mapping a ring buffer"))?,
                        );
                        ring_fds.push(event.fd().as_raw_fd());
                        leader = Some(events.len());
                    }
                }
                by_id.insert(event.id().map_err(Error::kernel("an event's id"))?, index);
                events.push(event);
            }
        }
    }
    for event in &events {
        event.enable().map_err(Error::kernel("enabling events"))?;
    }
    Ok((events, rings, by_id, ring_fds))
}

/// Parses one ring record. Samples carry their event id first (`PERF_SAMPLE_IDENTIFIER`),
/// which says which source (and so which layout) they come from; side-band records come
/// from the first source's events.
pub fn parse_record(
    kind: u32,
    misc: u16,
    data: &[u8],
    by_id: &HashMap<u64, usize>,
    parse_infos: &[RecordParseInfo],
) -> Option<Record> {
    let raw_data = linux_perf_event_reader::RawData::Single(data);
    if kind == PERF_RECORD_SAMPLE {
        let id = u64::from_ne_bytes(data.get(..8)?.try_into().ok()?);
        let source = by_id.get(&id).copied().unwrap_or(0);
        let info = parse_infos.get(source)?;
        let sample =
            SampleRecord::parse::<byteorder_native::NativeEndian>(raw_data, misc, info).ok()?;
        return Some(Record::Sample(sample_of(source, &sample)));
    }
    let info = *parse_infos.first()?;
    let raw = RawEventRecord::new(RecordType(kind), misc, raw_data, info);
    let time_ns = raw.common_data().ok()?.timestamp.unwrap_or(0);
    match raw.parse().ok()? {
        EventRecord::Comm(c) => Some(Record::Comm {
            pid: c.pid as u32,
            tid: c.tid as u32,
            comm: String::from_utf8_lossy(&c.name.as_slice()).into_owned(),
            exec: c.is_execve,
            time_ns,
        }),
        EventRecord::Fork(f) => Some(Record::Fork {
            pid: f.pid as u32,
            ppid: f.ppid as u32,
            tid: f.tid as u32,
            ptid: f.ptid as u32,
            time_ns,
        }),
        EventRecord::Exit(f) => Some(Record::Exit {
            pid: f.pid as u32,
            tid: f.tid as u32,
            time_ns,
        }),
        EventRecord::Mmap2(m) => Some(Record::Mmap {
            pid: m.pid as u32,
            tid: m.tid as u32,
            time_ns,
            mapping: Mapping {
                start: fltrace_trace::VirtAddr::new(m.address),
                end: fltrace_trace::VirtAddr::new(m.address + m.length),
                pgoff: fltrace_trace::FileOffset::new(m.page_offset),
                prot: m.protection,
                flags: m.flags,
                path: String::from_utf8_lossy(&m.path.as_slice()).into_owned(),
                ..Mapping::default()
            },
        }),
        _ => None,
    }
}

mod byteorder_native {
    pub use byteorder::NativeEndian;
}

fn sample_of(source: usize, s: &SampleRecord<'_>) -> Sample {
    let regs = s.user_regs.as_ref().map(|r| {
        let reg = |n| r.get(n).unwrap_or(0);
        (reg(REG_IP), reg(REG_SP), reg(REG_BP))
    });
    let mut args = [0; 7];
    if let Some(r) = &s.user_regs {
        for (arg, &reg) in args.iter_mut().zip(&ARG_REGS) {
            *arg = r.get(reg).unwrap_or(0);
        }
    }
    let stack = match &s.user_stack {
        Some((data, dyn_size)) => {
            let len = (*dyn_size as usize).min(data.len());
            data.get(0..len)
                .map(|d| d.as_slice().into_owned())
                .unwrap_or_default()
        }
        None => Vec::new(),
    };
    // PERF_CONTEXT_* markers are the top 4095 values.
    const CONTEXT_MAX: u64 = (-4095i64) as u64;
    let callchain = s
        .callchain
        .as_ref()
        .map(|c| {
            (0..c.len())
                .filter_map(|i| c.get(i))
                .filter(|&ip| ip < CONTEXT_MAX && ip != 0)
                .collect()
        })
        .unwrap_or_default();
    Sample {
        source,
        pid: s.pid.unwrap_or(0) as u32,
        tid: s.tid.unwrap_or(0) as u32,
        cpu: s.cpu.unwrap_or(0),
        time_ns: s.timestamp.unwrap_or(0),
        addr: s.addr.unwrap_or(0),
        raw: s
            .raw
            .as_ref()
            .map(|r| r.as_slice().into_owned())
            .unwrap_or_default(),
        regs,
        stack,
        callchain,
        args,
    }
}

/// The exit status of child `pid`, once it has one (`flags` 0 waits for it).
fn wait(pid: i32, flags: i32) -> Option<ExitStatus> {
    crate::child::wait(pid, flags).map(ExitStatus::from_raw)
}
