//! The recording loop: opens the events, runs the target, drains the ring buffers and feeds
//! each record to the process model until the target is gone.

use std::borrow::Cow;
use std::collections::hash_map::Entry;
use std::ffi::OsString;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use linux_perf_event_reader::{
    EventRecord, Mmap2FileId, RawData, RawEventRecord, RecordParseInfo, RecordType,
};
use rustc_hash::{FxHashMap, FxHashSet};

use fltrace_trace::{FileOffset, Mapping, VirtAddr, keys};

use crate::Error;
use crate::child::ChildGuard;
use crate::process::{FaultSample, Process, RemapCall, SessionMeta};
use crate::ring::{RingBuffer, page_size};
use crate::sys::{self, PerfEvent, Tracepoint, perf_event_attr};
use crate::target::{Credentials, PendingChild};
use crate::unwind::ElfCache;

/// What to trace.
#[derive(Debug, Clone)]
pub enum Target {
    /// Start this command (program and arguments; the program is searched in `PATH`).
    Command(Vec<OsString>),
    /// Attach to these running processes and all their threads (with `children`, also the
    /// descendants they have now) until they exit or recording stops. Children forked later
    /// are traced either way.
    Pids {
        /// The processes asked for (`-p PID,PID`).
        pids: Vec<i32>,
        /// Whether their existing descendants are attached too.
        children: bool,
    },
}

/// How allocations are traced.
#[derive(Debug, Clone)]
pub enum AllocTracing {
    /// Preload this library (the interposer) into the command fltrace starts.
    Preload(PathBuf),
    /// Uprobes on the C library's allocator of a running process (`-p`).
    Uprobes,
}

/// How to record.
#[derive(Debug, Clone)]
pub struct Options {
    /// Where the trace files go.
    pub dir: PathBuf,
    /// Bytes of user stack copied with each fault for unwinding (a multiple of 8).
    pub stack_bytes: u32,
    /// Ring buffer size per CPU, in MiB (rounded up to a power of two pages).
    pub buffer_mb: usize,
    /// Run the command as this user.
    pub credentials: Option<Credentials>,
    /// Complete stacks deeper than the copy by reading the live process's stack (see
    /// `LiveStack`); off, stacks end where the copy ends.
    pub read_live_stacks: bool,
    /// Emulate far memory (`-L`/`-M`) by preloading the runtime into the command.
    pub far_memory: Option<crate::FarMemory>,
    /// Trace allocations (`--allocs`).
    pub allocs: Option<AllocTracing>,
    /// Convert the allocation logs of large processes while the program runs (else all at
    /// the end).
    pub drain_allocs: bool,
    /// Sample memory accesses with the PMU (`--access-samples`), this many per second.
    pub access_samples: Option<u64>,
    /// Back the command's heap with files of a directory (`--backing-dir`).
    pub heap_backing: Option<crate::HeapBacking>,
    /// Keep every file holding code in this build-ID cache while its process lives (`None`:
    /// `--no-cache`), pruned to `cache_limit` bytes at the end.
    pub build_id_cache: Option<fltrace_trace::BuildIdCache>,
    /// The most the cache may hold of its own, bytes.
    pub cache_limit: u64,
}

impl Options {
    /// Defaults: 8 KiB of stack per fault; beyond that, a thread's outer frames come from its
    /// previous stack where both hold the same frame at the same address, else from the live
    /// process (`KnownFrames`, `LiveStack`). Together they complete 99.5% of the stacks of a
    /// compiler, an interpreter and a database (docs/BENCHMARKS.md), where 2 KiB and the live
    /// process alone gave 59-94%. The ring is sized by [`ring_mb_for`], as the kernel reserves
    /// the whole copy in the ring for every fault.
    pub fn new(dir: PathBuf) -> Options {
        Options {
            dir,
            stack_bytes: DEFAULT_STACK_BYTES,
            buffer_mb: ring_mb_for(DEFAULT_STACK_BYTES),
            credentials: None,
            read_live_stacks: true,
            far_memory: None,
            allocs: None,
            drain_allocs: true,
            access_samples: None,
            heap_backing: None,
            build_id_cache: None,
            cache_limit: fltrace_trace::build_id_cache::DEFAULT_LIMIT_BYTES,
        }
    }
}

/// Bytes of user stack copied with each fault by default.
pub const DEFAULT_STACK_BYTES: u32 = 8192;

/// The default ring buffer per CPU, MiB, for a stack copy of `stack_bytes`: the kernel reserves
/// the whole copy in the ring for every fault, so the ring grows with the copy to hold as many
/// faults as 64 MiB did at 2 KiB (about 29,000: enough for fault-dense programs on a busy
/// machine, where smaller rings lost records), from 64 MiB up to 512 MiB.
pub fn ring_mb_for(stack_bytes: u32) -> usize {
    (stack_bytes as usize * 32 / 1024).clamp(64, 512)
}

/// Reported while recording.
#[derive(Debug, Clone, Copy)]
pub struct Progress {
    /// Faults recorded so far.
    pub faults: u64,
    /// Records the kernel had to drop so far.
    pub lost: u64,
    /// Time since the start.
    pub elapsed: Duration,
}

impl Progress {
    /// Faults recorded per second so far (over at least a millisecond, so that the first
    /// report is not a division by zero).
    pub fn faults_per_second(&self) -> f64 {
        self.faults as f64 / self.elapsed.as_secs_f64().max(1e-3)
    }
}

/// How a recording ended.
#[derive(Debug, Clone)]
pub struct Summary {
    /// The first traced process (the command, or the attached pid).
    pub root_pid: u32,
    /// Every process that left a trace.
    pub pids: Vec<u32>,
    /// The running processes fltrace attached to (`-p`), with their names (`comm`), in the
    /// order attached: those asked for, each followed by its descendants.
    pub attached: Vec<(u32, String)>,
    /// The command's exit code, if it exited normally.
    pub exit_code: Option<i32>,
    /// The signal that killed the command, if one did.
    pub signal: Option<i32>,
    /// Faults recorded.
    pub faults: u64,
    /// Fault records the kernel dropped because fltrace fell behind.
    pub lost: u64,
    /// Faults whose stack lacks its outer frames (`fltrace_trace::StackEnd::Truncated`).
    pub stacks_truncated: u64,
    /// Whether a process ran out of the far memory `-M` allowed.
    pub far_memory_exhausted: bool,
    /// With `--allocs`: what the conversion of the allocation logs found, summed over
    /// processes.
    pub allocs: Option<crate::Converted>,
    /// With `--access-samples`: what was sampled.
    pub access: Option<crate::access::AccessSummary>,
    /// The first error writing the trace (a full disk, say), with its causes. From then on
    /// the program ran to its end untraced; what was written before stays.
    pub trace_error: Option<String>,
    /// With `trace_error`: how long after the start the trace stopped being written.
    pub trace_stopped: Option<Duration>,
    /// What keeping the code files in the build-ID cache did and cost (`None`: no cache).
    pub cache: Option<crate::CacheSummary>,
}

/// How the traced program ended, as far as the recording saw.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ending {
    /// It exited with this code (0 for a process fltrace attached to: it is left running).
    Exited(i32),
    /// This signal killed it.
    Killed(i32),
    /// Neither was seen.
    Unknown,
}

impl Summary {
    /// How the program ended: its exit code if it has one, else the signal that killed it.
    pub fn ending(&self) -> Ending {
        match (self.exit_code, self.signal) {
            (Some(code), _) => Ending::Exited(code),
            (None, Some(signal)) => Ending::Killed(signal),
            (None, None) => Ending::Unknown,
        }
    }

    /// The command's status as a shell gives it, for fltrace to exit with: its exit code,
    /// 128 + the signal that killed it, 0 when it neither exited nor was killed (attached).
    pub fn shell_status(&self) -> u8 {
        match self.ending() {
            Ending::Exited(code) => code as u8,
            Ending::Killed(signal) => 128 + signal as u8,
            Ending::Unknown => 0,
        }
    }

    /// What `fltrace record` exits with: [`RECORDING_FAILED`] when the trace could not be
    /// written whole (a table lost or cut short: a full disk, a refused output), else the
    /// command's status ([`Summary::shell_status`]).
    pub fn record_status(&self) -> u8 {
        if self.trace_error.is_some() {
            RECORDING_FAILED
        } else {
            self.shell_status()
        }
    }

    /// The processes whose files the recording may have written: those that left a trace,
    /// else the root process (a recording that failed early may have written its files).
    pub fn traced_pids(&self) -> Vec<u32> {
        if self.pids.is_empty() {
            vec![self.root_pid]
        } else {
            self.pids.clone()
        }
    }
}

/// `fltrace record`'s own exit status when the recording was not kept whole, whatever the
/// command's: 125, as `timeout`, `env` and `chroot` say that they, not the command, failed.
pub const RECORDING_FAILED: u8 = 125;

/// Notes when the trace stopped being written: the first time an error is seen.
fn note_stop(error: &Option<String>, stopped: &mut Option<Duration>, started: Instant) {
    if error.is_some() && stopped.is_none() {
        *stopped = Some(started.elapsed());
    }
}

/// Keeps the first trace-writing error; the recording goes on waiting for the program.
fn keep_first(first: &mut Option<String>, result: Result<(), Error>) {
    if let Err(e) = result
        && first.is_none()
    {
        *first = Some(fltrace_trace::error_chain(&e));
    }
}

/// Byte offsets of the fault tracepoints' fields (both tracepoints share one layout), and
/// how to read the `mremap` samples that share their ring.
#[derive(Clone, Copy)]
struct FaultFields {
    address: usize,
    error_code: usize,
    remap: Option<RemapFields>,
    unmap: Option<UnmapFields>,
}

/// The `munmap` system call's entry tracepoint: its id and where its arguments lie.
#[derive(Clone, Copy)]
struct UnmapFields {
    enter_id: u16,
    addr: usize,
    len: usize,
}

impl UnmapFields {
    fn open(tracefs: &std::path::Path) -> Option<UnmapFields> {
        let enter = Tracepoint::open(tracefs, "syscalls", "sys_enter_munmap").ok()?;
        let word = |name| enter.field(name).filter(|f| f.1 == 8).map(|f| f.0);
        Some(UnmapFields {
            enter_id: u16::try_from(enter.id).ok()?,
            addr: word("addr")?,
            len: word("len")?,
        })
    }
}

/// The `mremap` system call's tracepoints: the ids their samples start with (`common_type`)
/// and the byte offsets of the fields that say which mapping grew or moved where.
#[derive(Clone, Copy)]
struct RemapFields {
    enter_id: u16,
    exit_id: u16,
    addr: usize,
    old_len: usize,
    new_len: usize,
    ret: usize,
}

impl RemapFields {
    fn open(tracefs: &std::path::Path) -> Option<RemapFields> {
        let enter = Tracepoint::open(tracefs, "syscalls", "sys_enter_mremap").ok()?;
        let exit = Tracepoint::open(tracefs, "syscalls", "sys_exit_mremap").ok()?;
        let word = |tp: &Tracepoint, name| tp.field(name).filter(|f| f.1 == 8).map(|f| f.0);
        Some(RemapFields {
            enter_id: u16::try_from(enter.id).ok()?,
            exit_id: u16::try_from(exit.id).ok()?,
            addr: word(&enter, "addr")?,
            old_len: word(&enter, "old_len")?,
            new_len: word(&enter, "new_len")?,
            ret: word(&exit, "ret")?,
        })
    }
}

/// The ring buffers of one CPU.
struct CpuRings {
    faults: RingBuffer,
    major: Option<RingBuffer>,
}

/// Records `target` until it ends (or, for an attached process, until `stop` becomes
/// non-zero). `stop` counts interrupt requests: the first is passed on to the command, the
/// second kills it.
pub fn record(
    target: &Target,
    options: &Options,
    stop: &AtomicUsize,
    mut progress: impl FnMut(&Progress),
) -> Result<Summary, Error> {
    let mut session = Session::set_up(target, options)?;
    let ended = session.run(stop, &mut progress);
    Ok(session.finish(ended, options))
}

/// A recording once set up: the events open, the command running, the side captures
/// running.
struct Session {
    root_pid: u32,
    /// Whether the command was started by fltrace (not attached to).
    started_command: bool,
    child: ChildGuard,
    /// The command's process group, when fltrace started the command.
    group: Option<crate::CommandGroup>,
    /// The processes attached to (`-p`), with their names.
    attached: Vec<(u32, String)>,
    events: Vec<PerfEvent>,
    rings: Vec<CpuRings>,
    state: State,
    alloc_logs: Option<crate::AllocLogs>,
    attached_allocs: Option<crate::uprobes::AttachedAllocs>,
    access: Option<crate::access::AccessCapture>,
    mono_offset: u64,
    recording: String,
}

/// How the event loop ended.
struct Ended {
    /// The command's wait status (0 for an attached process).
    exit_status: Option<i32>,
    /// The command's peak resident memory from wait4, in bytes.
    rusage_hwm: u64,
    /// The first error writing the trace.
    trace_error: Option<String>,
    /// When the trace stopped being written, after the start.
    trace_stopped: Option<Duration>,
    /// The start of the recording.
    started: Instant,
}

impl Session {
    /// Opens the tracepoints and events, forks the command (waiting before its exec) or
    /// attaches to the process, starts the allocation and access captures, and lets the
    /// command exec. Every error after the fork kills and reaps the child (see
    /// [`ChildGuard`]).
    fn set_up(target: &Target, options: &Options) -> Result<Session, Error> {
        // Before anything runs: a recording that could not be kept must not cost a run.
        fltrace_trace::files::check_output_dir(&options.dir)?;
        let tracefs =
            sys::tracefs().map_err(Error::kernel("tracefs (tracepoint ids and formats)"))?;
        let user_tp = Tracepoint::open(&tracefs, "exceptions", "page_fault_user")
            .map_err(Error::kernel("tracepoint exceptions:page_fault_user"))?;
        let kernel_tp = Tracepoint::open(&tracefs, "exceptions", "page_fault_kernel").ok();
        let fields = match (user_tp.field("address"), user_tp.field("error_code")) {
            // perf reports no mapping for memory that `mremap` grew or moved: the system
            // call's entry and return, in the fault ring, say which. Optional, as a kernel
            // may lack syscall tracepoints.
            (Some((address, 8)), Some((error_code, 8))) => FaultFields {
                address,
                error_code,
                remap: RemapFields::open(&tracefs),
                // Unmapped memory leaves the model, which then follows the live mappings.
                unmap: UnmapFields::open(&tracefs),
            },
            _ => {
                return Err(Error::Kernel {
                    what: "tracepoint exceptions:page_fault_user",
                    source: std::io::Error::from_raw_os_error(libc::EINVAL),
                    hint: " (unexpected field layout)",
                });
            }
        };
        let cpus = sys::online_cpus().map_err(Error::kernel("online CPUs"))?;

        // The runtime's shared pages, one per process: `<prefix>-<pid>`.
        let far_prefix = options.far_memory.as_ref().map(|_| {
            PathBuf::from(format!(
                "/dev/shm/fltrace-rt-{}-{}",
                std::process::id(),
                unix_now_ns()
            ))
        });
        let mut far_env = match (&options.far_memory, &far_prefix) {
            (Some(far), Some(prefix)) => {
                crate::runtime::check_userfaultfd()?;
                far.environment(prefix)
            }
            _ => Vec::new(),
        };
        crate::alloc_spool::recover_stale_spools(&options.dir, crate::SpoolLogs::Remove);
        let mut alloc_logs = match &options.allocs {
            Some(crate::AllocTracing::Preload(library)) => {
                let logs = crate::AllocLogs::create(&options.dir, options.credentials)?;
                if options.far_memory.is_none() {
                    far_env.push(("LD_PRELOAD".into(), crate::runtime::preload_value(library)));
                }
                far_env.push(logs.environment());
                Some(logs)
            }
            Some(crate::AllocTracing::Uprobes) | None => None,
        };
        if let Some(backing) = &options.heap_backing {
            if !far_env.iter().any(|(name, _)| name == "LD_PRELOAD") {
                far_env.push((
                    "LD_PRELOAD".into(),
                    crate::runtime::preload_value(&backing.library),
                ));
            }
            far_env.push(backing.environment());
        }
        let mut attached: Vec<(i32, Vec<i32>)> = Vec::new();
        let mut attached_names = Vec::new();
        // From here on, any error return drops `child`, which kills and reaps it.
        let (mut child, group, tasks, enable_on_exec) = match target {
            Target::Command(argv) => {
                let (child, group) =
                    PendingChild::spawn_in_own_group(argv, options.credentials, &far_env)?;
                let pid = child.pid();
                (ChildGuard::pending(child), group, vec![pid], true)
            }
            Target::Pids { pids, children } => {
                attached = attach_processes(pids, *children)?;
                attached_names = attached
                    .iter()
                    .map(|(pid, _)| (*pid as u32, process_name(*pid)))
                    .collect();
                let tasks = attached
                    .iter()
                    .flat_map(|(_, t)| t.iter().copied())
                    .collect();
                (ChildGuard::none(), None, tasks, false)
            }
        };
        let root_pid = child.pid().unwrap_or(tasks[0]) as u32;

        let mut fault_attr = sys::fault_tracepoint_attr(user_tp.id, options.stack_bytes, true);
        let mut kernel_attr = sys::fault_tracepoint_attr(
            kernel_tp.as_ref().map_or(0, |t| t.id),
            options.stack_bytes,
            false,
        );
        let mut major_attr = sys::major_fault_attr();
        // Laid out as the fault samples, whose ring they share; a stack copy of one word.
        let mut remap_attrs: Vec<perf_event_attr> = fields
            .remap
            .iter()
            .flat_map(|f| [f.enter_id, f.exit_id])
            .chain(fields.unmap.map(|f| f.enter_id))
            .map(|id| sys::fault_tracepoint_attr(u64::from(id), 8, false))
            .collect();
        for attr in [&mut fault_attr, &mut kernel_attr, &mut major_attr]
            .into_iter()
            .chain(remap_attrs.iter_mut())
        {
            attr.set_enable_on_exec(u64::from(enable_on_exec));
            // Wake the recorder when an eighth of the buffer is full, not on every fault.
            attr.set_watermark(1);
            attr.__bindgen_anon_2.wakeup_watermark = (options.buffer_mb * 1024 * 1024 / 8) as u32;
        }
        major_attr.__bindgen_anon_2.wakeup_watermark = 4096;

        let (events, rings) = open_events(
            &cpus,
            &tasks,
            &fault_attr,
            kernel_tp
                .is_some()
                .then_some(&kernel_attr)
                .into_iter()
                .chain(remap_attrs.iter())
                .collect(),
            &major_attr,
            options.buffer_mb,
        )?;
        if !enable_on_exec {
            for event in &events {
                event
                    .enable()
                    .map_err(Error::kernel("enabling perf events"))?;
            }
        }

        let start_ns = unix_now_ns();
        let mono_offset = start_ns.wrapping_sub(monotonic_now_ns());
        // The recording id of every table: unique across runs and, in practice, across
        // machines.
        let recording = format!("{root_pid}-{start_ns}");
        if let Some(logs) = &mut alloc_logs {
            logs.write_metadata(&recording, mono_offset)?;
            if options.drain_allocs {
                logs.start_drain(&recording, mono_offset);
            }
        }
        let metadata = vec![
            (keys::SESSION.to_owned(), recording.clone()),
            (keys::START_NS.to_owned(), start_ns.to_string()),
            (keys::COMMAND.to_owned(), command_line(target)),
            (
                keys::VERSION.to_owned(),
                env!("CARGO_PKG_VERSION").to_owned(),
            ),
        ];
        let mut state = State::new(
            root_pid,
            options,
            far_prefix,
            metadata,
            fields,
            (&fault_attr, &major_attr),
            mono_offset,
        );
        for (pid, _) in &attached {
            state.attach_existing(*pid as u32)?;
        }
        let attached_allocs = match (attached.first(), &options.allocs) {
            (Some((pid, _)), Some(crate::AllocTracing::Uprobes)) => {
                Some(crate::uprobes::AttachedAllocs::start(
                    *pid,
                    &tasks,
                    &options.dir,
                    mono_offset,
                    &recording,
                )?)
            }
            _ => None,
        };
        let access = match options.access_samples {
            Some(freq) => Some(crate::access::AccessCapture::start(
                crate::access::availability(),
                freq,
                &tasks,
                enable_on_exec,
                &options.dir,
                mono_offset,
                &recording,
            )?),
            None => None,
        };
        // Last: the command runs only once everything is in place. A failed exec has reaped
        // the child already.
        child.release()?;
        Ok(Session {
            root_pid,
            started_command: enable_on_exec,
            child,
            group,
            attached: attached_names,
            events,
            rings,
            state,
            alloc_logs,
            attached_allocs,
            access,
            mono_offset,
            recording,
        })
    }

    /// Reads records until the traced processes are gone (or, for
    /// an attached process, until `stop`), checkpointing the tables every second. Never
    /// returns early: a trace that cannot be written stops the reading, not the waiting.
    fn run(&mut self, stop: &AtomicUsize, progress: &mut impl FnMut(&Progress)) -> Ended {
        let root = self.child.pid();
        let root_pid = self.root_pid;
        let (rings, state) = (&mut self.rings, &mut self.state);
        let alloc_logs = &self.alloc_logs;

        // A recorder that falls behind loses records: when allowed (root), run ahead of the
        // traced program in the scheduler.
        // SAFETY: setpriority on our own process; failure (not root) is harmless.
        unsafe { libc::setpriority(libc::PRIO_PROCESS, 0, -10) };
        // Readable when the target exits, so that the end is noticed at once.
        let pidfd = pidfd_open(root_pid as i32);
        let started = Instant::now();
        // Records are handled in time order across CPUs, up to the newest time seen in the
        // previous round (perf's ordering rule): anything older has been written by now.
        let mut watermark = 0u64;
        let mut positions: Vec<Vec<(u64, u64)>> = vec![Vec::new(); rings.len()];
        let mut last_stats = Instant::now();
        let mut last_memory = Instant::now();
        let mut last_progress = Instant::now();
        let mut exit_status: Option<i32> = None;
        let mut rusage_hwm = 0;
        let mut stop_seen = 0;
        let mut stop_at: Option<Instant> = None;
        // Once the trace cannot be written, records are no longer read (the kernel drops
        // them; the program does not wait for fltrace) and fltrace only waits for the
        // program's end.
        let mut trace_error: Option<String> = None;
        let mut trace_stopped: Option<Duration> = None;
        loop {
            let mut drained = 0;
            if trace_error.is_none() {
                let (handled, newest) =
                    drain_in_time_order(rings, state, watermark, &mut positions);
                drained = handled;
                watermark = watermark.max(newest);
                for cpu in rings.iter_mut() {
                    if let Some(major) = &mut cpu.major {
                        drained += major.drain(|r| state.handle_major(r));
                    }
                }
                state.end_round(false);
                learn_images(alloc_logs, state);
                keep_first(&mut trace_error, state.error.take().map_or(Ok(()), Err));
                keep_first(&mut trace_error, state.finish_exited());
                note_stop(&trace_error, &mut trace_stopped, started);
            }

            if let Some(pid) = root {
                if exit_status.is_none()
                    && let Some((status, hwm)) = try_wait(pid)
                {
                    self.child.reaped();
                    exit_status = Some(status);
                    rusage_hwm = hwm;
                }
            } else if !self
                .attached
                .iter()
                .any(|&(pid, _)| process_alive(pid as i32))
            {
                // Attached: the recording ends when every process asked for is gone.
                exit_status = Some(0);
            }
            if exit_status.is_some() {
                if stop_seen > 0
                    && let Some(group) = &self.group
                {
                    // Interrupted: what the command started and left (a background job
                    // ignores SIGINT and SIGQUIT) ends with it, not untraced after fltrace.
                    group.signal(libc::SIGKILL);
                }
                if trace_error.is_none() {
                    // Every record of the exited tree is already in the buffers: one more
                    // pass.
                    drain_in_time_order(rings, state, u64::MAX, &mut positions);
                    for cpu in rings.iter_mut() {
                        if let Some(major) = &mut cpu.major {
                            major.drain(|r| state.handle_major(r));
                        }
                    }
                    state.end_round(true);
                    learn_images(alloc_logs, state);
                    keep_first(&mut trace_error, state.error.take().map_or(Ok(()), Err));
                    note_stop(&trace_error, &mut trace_stopped, started);
                }
                break;
            }

            let requests = stop.load(Ordering::Relaxed);
            if requests > stop_seen {
                stop_seen = requests;
                match root {
                    None => {
                        exit_status = Some(0);
                        continue;
                    }
                    // To every process of the command, at once, when it has a group of its
                    // own, which no terminal signals. In fltrace's own terminal job, only if
                    // the command is still there a moment later (the terminal signals the
                    // whole job: fltrace alone was signalled).
                    Some(_) if requests == 1 => {
                        let wait = match self.group {
                            Some(_) => Duration::ZERO,
                            None => Duration::from_millis(300),
                        };
                        stop_at = Some(Instant::now() + wait);
                    }
                    Some(pid) => match &self.group {
                        Some(group) => group.signal(libc::SIGKILL),
                        // SAFETY: signalling our own child.
                        None => unsafe {
                            libc::kill(pid, libc::SIGKILL);
                        },
                    },
                }
            }
            if let (Some(at), Some(pid)) = (stop_at, root)
                && Instant::now() >= at
            {
                // SIGINT whatever fltrace got: what a program ends on (SIGHUP may mean
                // "reload", SIGQUIT "dump core").
                match &self.group {
                    Some(group) => group.signal(libc::SIGINT),
                    // SAFETY: signalling our own child.
                    None => unsafe {
                        libc::kill(pid, libc::SIGINT);
                    },
                }
                stop_at = None;
            }

            if last_memory.elapsed() >= Duration::from_millis(100) {
                state.sample_memory();
                last_memory = Instant::now();
            }
            if last_stats.elapsed() >= Duration::from_secs(1) && trace_error.is_none() {
                // Each second, what was recorded becomes readable even if fltrace is killed.
                keep_first(&mut trace_error, state.checkpoint());
                if trace_error.is_none() {
                    keep_first(&mut trace_error, state.write_stats());
                }
                note_stop(&trace_error, &mut trace_stopped, started);
                last_stats = Instant::now();
            }
            if last_progress.elapsed() >= Duration::from_millis(250) {
                progress(&Progress {
                    faults: state.faults,
                    lost: state.lost,
                    elapsed: started.elapsed(),
                });
                last_progress = Instant::now();
            }
            if trace_error.is_some() {
                // The rings stay readable now that nobody reads them: wait on the program
                // alone.
                wait_for_exit(pidfd.as_ref(), 100);
            } else if drained == 0 {
                poll_rings(&self.events, pidfd.as_ref(), 100);
            }
        }
        Ended {
            exit_status,
            rusage_hwm,
            trace_error,
            trace_stopped,
            started,
        }
    }

    /// Closes every table as far as it goes, converts the allocation logs, stops the access
    /// capture and says how the recording ended.
    fn finish(self, ended: Ended, options: &Options) -> Summary {
        let Session {
            root_pid,
            started_command,
            child,
            group,
            attached,
            events,
            rings,
            mut state,
            mut alloc_logs,
            attached_allocs,
            access,
            mono_offset,
            recording,
        } = self;
        let Ended {
            exit_status,
            rusage_hwm,
            mut trace_error,
            mut trace_stopped,
            started,
        } = ended;
        // Reaped by the loop, or never run (a failed exec): nothing left to kill. The group's
        // watchdog is told so.
        drop(child);
        drop(group);
        // Closing the events makes the kernel unregister the tracepoints and free the ring
        // buffers: tens of milliseconds that can pass while the trace files are finished.
        let teardown = std::thread::spawn(move || drop((events, rings)));

        if let Some(process) = state.processes.get_mut(&root_pid) {
            process.counters.hwm = process.counters.hwm.max(rusage_hwm);
        }
        let status = exit_status.unwrap_or(0);
        let (exit_code, signal) = if !started_command {
            (Some(0), None)
        } else if libc::WIFSIGNALED(status) {
            (None, Some(libc::WTERMSIG(status)))
        } else {
            (Some(libc::WEXITSTATUS(status)), None)
        };
        // The logs are complete: their drain converts what is left while the tables close.
        if let Some(logs) = &alloc_logs {
            logs.program_ended();
        }
        // After a write error each table is still closed as far as it goes: what was written
        // before stays readable where the file system lets it.
        let (mut pids, finished) = state.finish_all();
        keep_first(&mut trace_error, finished);
        note_stop(&trace_error, &mut trace_stopped, started);
        let cache = state
            .code_cache
            .take()
            .map(|cache| cache.finish(options.cache_limit));
        pids.sort_unstable();
        let allocs = match (&mut alloc_logs, attached_allocs) {
            (_, Some(attached)) => match attached.finish() {
                Ok(done) => Some(done),
                Err(e) => {
                    keep_first(&mut trace_error, Err(e));
                    None
                }
            },
            (Some(logs), None) => {
                let mut total = crate::Converted::default();
                for &pid in &pids {
                    let generation = state.preload_generations.get(&pid).copied().unwrap_or(0);
                    let converted = match logs.convert(
                        pid,
                        generation,
                        &options.dir,
                        mono_offset,
                        &recording,
                    ) {
                        Ok(converted) => converted,
                        Err(e) => {
                            keep_first(&mut trace_error, Err(e));
                            None
                        }
                    };
                    if let Some(c) = converted {
                        total.add(&c);
                    }
                }
                Some(total)
            }
            (None, None) => None,
        };
        let access = match access.map(|a| a.finish()).transpose() {
            Ok(access) => access,
            Err(e) => {
                keep_first(&mut trace_error, Err(e));
                None
            }
        };
        note_stop(&trace_error, &mut trace_stopped, started);
        let _ = teardown.join();
        // Finished: what the recording wrote is fixed now, and its readers check it so.
        if trace_error.is_none() {
            for &pid in &pids {
                if let Err(e) = fltrace_trace::checksums::write(&options.dir, pid) {
                    keep_first(&mut trace_error, Err(e.into()));
                    break;
                }
            }
        }
        Summary {
            root_pid,
            pids,
            attached,
            exit_code,
            signal,
            faults: state.faults,
            lost: state.lost,
            stacks_truncated: state.truncated_total,
            far_memory_exhausted: state.far_exhausted,
            allocs,
            access,
            trace_error,
            trace_stopped,
            cache,
        }
    }
}

/// Tells the allocation logs' drain what the recorder knows of each process's images.
fn learn_images(alloc_logs: &Option<crate::AllocLogs>, state: &State) {
    let Some(logs) = alloc_logs else {
        return;
    };
    for process in state.processes.values() {
        if let Some((first, generation)) = process.preload_images() {
            logs.learn_image(process.pid, first, generation, || process.image_start_ns());
        }
    }
}

/// The traced command line, for the tables' metadata: the command's arguments, or an
/// attached process's `/proc/<pid>/cmdline`.
fn command_line(target: &Target) -> String {
    match target {
        Target::Command(argv) => argv
            .iter()
            .map(|a| a.to_string_lossy())
            .collect::<Vec<Cow<'_, str>>>()
            .join(" "),
        Target::Pids { pids, .. } => pids
            .iter()
            .map(|pid| process_command_line(*pid))
            .collect::<Vec<String>>()
            .join("; "),
    }
}

/// A running process's command line, from `/proc/<pid>/cmdline`.
fn process_command_line(pid: i32) -> String {
    std::fs::read(format!("/proc/{pid}/cmdline"))
        .map(|c| {
            String::from_utf8_lossy(&c)
                .replace('\0', " ")
                .trim_end()
                .to_owned()
        })
        .unwrap_or_default()
}

/// Waits up to `timeout_ms` for the program to end (its pidfd readable), or just sleeps.
fn wait_for_exit(pidfd: Option<&OwnedFd>, timeout_ms: i32) {
    match pidfd {
        Some(fd) => {
            let mut pfd = libc::pollfd {
                fd: fd.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            };
            // SAFETY: one valid pollfd.
            unsafe { libc::poll(&mut pfd, 1, timeout_ms) };
        }
        None => std::thread::sleep(Duration::from_millis(timeout_ms as u64)),
    }
}

/// Handles the readable records of all CPUs' fault rings in time order, those not newer than
/// `watermark`; leaves the rest for the next round. Returns how many were handled and the
/// newest timestamp readable.
///
/// Records of one process spread over CPUs as its threads migrate: handled CPU by CPU, a
/// thread's faults could be read before the exec or mmap records that explain them.
fn drain_in_time_order(
    rings: &mut [CpuRings],
    state: &mut State,
    watermark: u64,
    positions: &mut [Vec<(u64, u64)>],
) -> (usize, u64) {
    // Order matters less than losing records: a filling buffer is emptied whatever the time.
    let watermark = if rings.iter().any(|r| r.faults.half_full()) {
        u64::MAX
    } else {
        watermark
    };
    let mut newest = 0;
    let mut ends = Vec::with_capacity(rings.len());
    for (ring, list) in rings.iter().zip(positions.iter_mut()) {
        list.clear();
        let (mut pos, head) = ring.faults.readable();
        while pos < head {
            let Some((record, next)) = ring.faults.record_at(pos) else {
                log::error!("perf ring buffer: corrupt record header, skipping to head");
                pos = head;
                break;
            };
            let time = state.timestamp(&record);
            newest = newest.max(time);
            list.push((time, pos));
            pos = next;
        }
        ends.push(pos);
    }
    let mut next_index = vec![0usize; rings.len()];
    let mut handled = 0;
    loop {
        let mut best: Option<(u64, usize)> = None;
        for (i, list) in positions.iter().enumerate() {
            if let Some(&(time, _)) = list.get(next_index[i])
                && time <= watermark
                && best.is_none_or(|(t, _)| time < t)
            {
                best = Some((time, i));
            }
        }
        let Some((_, i)) = best else {
            break;
        };
        let (_, pos) = positions[i][next_index[i]];
        if let Some((record, _)) = rings[i].faults.record_at(pos) {
            state.handle(record);
        }
        next_index[i] += 1;
        handled += 1;
    }
    for (i, ring) in rings.iter_mut().enumerate() {
        let consumed = positions[i]
            .get(next_index[i])
            .map_or(ends[i], |&(_, pos)| pos);
        ring.faults.consume(consumed);
    }
    (handled, newest)
}

type Opened = (Vec<PerfEvent>, Vec<CpuRings>);

fn open_events(
    cpus: &[i32],
    tasks: &[i32],
    fault_attr: &perf_event_attr,
    // Events whose samples go to the fault ring, opened where the kernel allows.
    optional_attrs: Vec<&perf_event_attr>,
    major_attr: &perf_event_attr,
    buffer_mb: usize,
) -> Result<Opened, Error> {
    let data_pages = (buffer_mb.max(1) * 1024 * 1024 / page_size()).next_power_of_two();
    let mut events = Vec::new();
    let mut rings = Vec::new();
    for &cpu in cpus {
        let mut leader: Option<usize> = None;
        let mut major_leader: Option<usize> = None;
        let mut cpu_rings: Option<CpuRings> = None;
        for &task in tasks {
            let event = PerfEvent::open(fault_attr, task, cpu).map_err(Error::kernel(
                "perf_event_open on exceptions:page_fault_user",
            ))?;
            match leader {
                None => {
                    let ring = RingBuffer::map(&event, data_pages)
                        .map_err(Error::kernel("mapping the perf ring buffer"))?;
                    cpu_rings = Some(CpuRings {
                        faults: ring,
                        major: None,
                    });
                    leader = Some(events.len());
                }
                Some(i) => event
                    .set_output(&events[i])
                    .map_err(Error::kernel("redirecting perf output"))?,
            }
            let fault_index = leader.unwrap_or(events.len());
            events.push(event);
            for attr in &optional_attrs {
                // Without the kernel fault event, faults in system calls go unrecorded;
                // without mremap's, the memory it moves goes unnamed; without munmap's,
                // unmapped memory stays in the model. Nothing else.
                if let Ok(event) = PerfEvent::open(attr, task, cpu)
                    && event.set_output(&events[fault_index]).is_ok()
                {
                    events.push(event);
                }
            }
            if let Ok(event) = PerfEvent::open(major_attr, task, cpu) {
                match major_leader {
                    None => {
                        if let (Ok(ring), Some(rings)) =
                            (RingBuffer::map(&event, 16), cpu_rings.as_mut())
                        {
                            rings.major = Some(ring);
                            major_leader = Some(events.len());
                            events.push(event);
                        }
                    }
                    Some(i) => {
                        if event.set_output(&events[i]).is_ok() {
                            events.push(event);
                        }
                    }
                }
            }
        }
        rings.extend(cpu_rings);
    }
    Ok((events, rings))
}

/// Waits until a ring buffer has data, the target exits (`pidfd`) or the timeout passes.
fn poll_rings(events: &[PerfEvent], pidfd: Option<&OwnedFd>, timeout_ms: i32) {
    let mut fds: Vec<libc::pollfd> = events
        .iter()
        .map(|e| e.fd().as_raw_fd())
        .chain(pidfd.map(|fd| fd.as_raw_fd()))
        .map(|fd| libc::pollfd {
            fd,
            events: libc::POLLIN,
            revents: 0,
        })
        .collect();
    // SAFETY: `fds` is a valid array of pollfd for its length.
    unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, timeout_ms) };
}

/// The processes to attach to, each with its threads: `pids` and, with `children`, each
/// one's descendants as they are now (found through `/proc/<pid>/task/<tid>/children`),
/// breadth first, each process once. A descendant that exits meanwhile is left out; a pid
/// asked for that does not exist is an error.
pub fn attach_processes(pids: &[i32], children: bool) -> Result<Vec<(i32, Vec<i32>)>, Error> {
    let mut attached = Vec::new();
    let mut seen = FxHashSet::default();
    for &pid in pids {
        if !seen.insert(pid) {
            continue;
        }
        let tasks = attach_tasks(pid)?;
        let mut queue = std::collections::VecDeque::new();
        if children {
            queue.extend(children_of(&tasks));
        }
        attached.push((pid, tasks));
        while let Some(child) = queue.pop_front() {
            if !seen.insert(child) {
                continue;
            }
            // Gone since its parent's list was read: nothing to attach to.
            let Ok(tasks) = attach_tasks(child) else {
                continue;
            };
            queue.extend(children_of(&tasks));
            attached.push((child, tasks));
        }
    }
    Ok(attached)
}

/// The children of a process's threads, in pid order.
fn children_of(tasks: &[i32]) -> Vec<i32> {
    let pid = tasks.first().copied().unwrap_or(0);
    let mut children: Vec<i32> = tasks
        .iter()
        .filter_map(|tid| std::fs::read_to_string(format!("/proc/{pid}/task/{tid}/children")).ok())
        .flat_map(|list| {
            list.split_whitespace()
                .filter_map(|c| c.parse().ok())
                .collect::<Vec<i32>>()
        })
        .collect();
    children.sort_unstable();
    children.dedup();
    children
}

/// A process's name (`comm`), empty when it cannot be read.
fn process_name(pid: i32) -> String {
    std::fs::read_to_string(format!("/proc/{pid}/comm"))
        .map(|name| name.trim_end().to_owned())
        .unwrap_or_default()
}

/// The threads of a running process, its main thread first.
pub fn attach_tasks(pid: i32) -> Result<Vec<i32>, Error> {
    refuse_untraceable(pid)?;
    let dir = format!("/proc/{pid}/task");
    let entries = std::fs::read_dir(&dir).map_err(|source| Error::Attach { pid, source })?;
    let mut tasks: Vec<i32> = entries
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
        .collect();
    tasks.sort_unstable();
    // The main thread first: its id is the process id the trace is named after.
    tasks.retain(|&t| t != pid);
    tasks.insert(0, pid);
    Ok(tasks)
}

/// `PF_KTHREAD` in the flags of `/proc/PID/stat` (include/linux/sched.h).
const PF_KTHREAD: u64 = 0x0020_0000;

/// Refuses a kernel thread (no user memory, no user stack: nothing would ever be recorded,
/// and the recording would wait for it forever) and a zombie (its memory is gone).
fn refuse_untraceable(pid: i32) -> Result<(), Error> {
    let path = format!("/proc/{pid}/stat");
    let stat = std::fs::read_to_string(&path).map_err(|source| Error::Attach { pid, source })?;
    // The command name in parentheses may hold spaces and parentheses: fields follow the last.
    let fields: Vec<&str> = stat
        .rsplit_once(')')
        .map(|(_, rest)| rest.split_ascii_whitespace().collect())
        .unwrap_or_default();
    // After the name: state (3rd field of the line), ..., flags (9th).
    let state = fields.first().copied().unwrap_or("");
    let flags: u64 = fields.get(6).and_then(|f| f.parse().ok()).unwrap_or(0);
    if flags & PF_KTHREAD != 0 {
        return Err(Error::NotTraceable {
            pid,
            why: "it is a kernel thread, which has no user memory to fault on",
        });
    }
    if state == "Z" || state == "X" {
        return Err(Error::NotTraceable {
            pid,
            why: "it is a zombie (it has exited; its parent has not reaped it)",
        });
    }
    Ok(())
}

fn pidfd_open(pid: i32) -> Option<OwnedFd> {
    // SAFETY: pidfd_open takes a pid and flags and returns a new descriptor or -1.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) };
    // SAFETY: a non-negative return is a descriptor nothing else owns.
    (fd >= 0).then(|| unsafe { OwnedFd::from_raw_fd(fd as i32) })
}

fn try_wait(pid: i32) -> Option<(i32, u64)> {
    let mut status = 0;
    // SAFETY: rusage is plain data for the kernel to fill.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: waiting for our own child with valid out-pointers.
    let ret = unsafe { libc::wait4(pid, &mut status, libc::WNOHANG, &mut usage) };
    (ret == pid).then(|| (status, usage.ru_maxrss as u64 * 1024))
}

fn process_alive(pid: i32) -> bool {
    // SAFETY: signal 0 only checks for existence.
    unsafe { libc::kill(pid, 0) == 0 || *libc::__errno_location() != libc::ESRCH }
}

pub(crate) fn unix_now_ns() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64)
}

/// Now on CLOCK_MONOTONIC, the clock of perf samples and tracepoint events, in ns.
pub fn monotonic_now_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid timespec for the kernel to fill.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// A record set aside until the process it belongs to is known.
struct Deferred {
    round: u64,
    kind: u32,
    misc: u16,
    bytes: Vec<u8>,
}

/// Everything the record handlers update.
///
/// Records are read CPU by CPU, so a child's first records can be read before the fork
/// record (on its parent's CPU) that introduces it. Such records are deferred until a whole
/// further round of reading has passed: by then the fork record, written before the child ran,
/// has been read. Likewise a process is finalised one round after its exit record.
struct State {
    root_pid: u32,
    /// Rounds of reading every ring buffer completed.
    round: u64,
    deferred: Vec<Deferred>,
    deferred_pids: FxHashSet<u32>,
    /// Replaying deferred records: create unknown processes instead of deferring again.
    replaying: bool,
    /// Processes whose files are complete: late records for them are dropped.
    finished_set: FxHashSet<u32>,
    /// What each new process is made with.
    session: SessionMeta,
    far_exhausted: bool,
    /// Per finished process, the generation its preloaded library's first image ran in.
    preload_generations: FxHashMap<u32, u32>,
    /// Threads of the far-memory runtime, whose faults are its own, not the program's.
    runtime_threads: FxHashSet<u32>,
    processes: FxHashMap<u32, Process>,
    /// What the handlers of every process use, borrowed beside it.
    caches: Caches,
    finished: Vec<u32>,
    /// Where the files holding code are kept by build ID (`None`: `--no-cache`).
    code_cache: Option<crate::code_cache::CodeCache>,
    /// The perf maps and jitdumps naming the processes' JIT code.
    jit_files: crate::jit_files::JitFiles,
    fields: FaultFields,
    /// Each thread's `mremap` in progress, from its entry record to its return record.
    remap_calls: FxHashMap<u32, RemapCall>,
    parse_info: RecordParseInfo,
    major_parse_info: RecordParseInfo,
    lost: u64,
    faults: u64,
    truncated_total: u64,
    /// The first error a handler met; handlers run inside ring-buffer callbacks.
    error: Option<Error>,
}

/// What the handlers of every process use: kept across records, so that they are read or
/// allocated once.
struct Caches {
    /// The ELF files mapped, parsed once for all processes.
    elf: ElfCache,
    /// The frames of the stack being unwound.
    frames: Vec<u64>,
    /// A sample's stack copy made contiguous when it wraps around the ring buffer.
    scratch: Vec<u8>,
}

fn u64_at(data: &RawData<'_>, offset: usize) -> Option<u64> {
    let bytes = data.get(offset..offset + 8)?.as_slice();
    Some(u64::from_ne_bytes(bytes.as_ref().try_into().ok()?))
}

impl State {
    /// Nothing read yet; `attrs` are the fault and major-fault events' attributes, whose
    /// sample layouts the records are parsed with.
    fn new(
        root_pid: u32,
        options: &Options,
        far_prefix: Option<PathBuf>,
        metadata: Vec<(String, String)>,
        fields: FaultFields,
        attrs: (&perf_event_attr, &perf_event_attr),
        mono_offset: u64,
    ) -> State {
        State {
            root_pid,
            round: 0,
            deferred: Vec::new(),
            deferred_pids: FxHashSet::default(),
            replaying: false,
            finished_set: FxHashSet::default(),
            session: SessionMeta {
                dir: options.dir.clone(),
                read_live_stacks: options.read_live_stacks,
                far_memory: far_prefix,
                metadata,
                collect_code_hits: options.build_id_cache.is_some(),
                mono_offset,
            },
            far_exhausted: false,
            preload_generations: FxHashMap::default(),
            runtime_threads: FxHashSet::default(),
            processes: FxHashMap::default(),
            caches: Caches {
                elf: ElfCache::default(),
                frames: Vec::with_capacity(128),
                scratch: Vec::new(),
            },
            finished: Vec::new(),
            code_cache: options
                .build_id_cache
                .clone()
                .map(crate::code_cache::CodeCache::start),
            jit_files: Default::default(),
            fields,
            remap_calls: FxHashMap::default(),
            parse_info: sys::parse_info(attrs.0),
            major_parse_info: sys::parse_info(attrs.1),
            lost: 0,
            faults: 0,
            truncated_total: 0,
            error: None,
        }
    }

    /// Process `pid`, made at its first record.
    fn process(&mut self, pid: u32) -> Result<&mut Process, Error> {
        Ok(self.process_and_caches(pid)?.0)
    }

    /// Process `pid`, made at its first record, and the caches its handlers use.
    fn process_and_caches(&mut self, pid: u32) -> Result<(&mut Process, &mut Caches), Error> {
        let process = match self.processes.entry(pid) {
            Entry::Occupied(entry) => entry.into_mut(),
            Entry::Vacant(entry) => entry.insert(Process::new(pid, None, &self.session)?),
        };
        Ok((process, &mut self.caches))
    }

    /// Keeps the file mapped at `start` in `pid` in the build-ID cache, if it holds code not
    /// kept yet: opened now, while the process lives, stored by the cache's thread.
    fn offer_to_cache(&mut self, pid: u32, start: VirtAddr) {
        if let (Some(cache), Some(process)) = (&mut self.code_cache, self.processes.get(&pid))
            && let Some(mapping) = process.mapping_starting(start)
        {
            cache.offer(pid, mapping);
        }
    }

    /// For an attached process: the mappings that exist already.
    fn attach_existing(&mut self, pid: u32) -> Result<(), Error> {
        let maps = std::fs::read_to_string(format!("/proc/{pid}/maps")).map_err(|source| {
            Error::Attach {
                pid: pid as i32,
                source,
            }
        })?;
        let (process, caches) = self.process_and_caches(pid)?;
        let mut mapped = Ok(());
        let mut starts = Vec::new();
        for mapping in maps.lines().filter_map(fltrace_trace::parse_procmaps_line) {
            starts.push(mapping.start);
            mapped = mapped.and_then(|()| process.map(mapping, &mut caches.elf));
        }
        for start in starts {
            if let Some(mapping) = self
                .processes
                .get(&pid)
                .and_then(|p| p.mapping_starting(start))
            {
                self.jit_files.mapped(pid, mapping);
            }
            self.offer_to_cache(pid, start);
        }
        Ok(mapped?)
    }

    /// The time of a record (0 for records without one: they are handled first).
    fn timestamp(&self, record: &crate::ring::RawRecord<'_>) -> u64 {
        RawEventRecord::new(
            RecordType(record.kind),
            record.misc,
            record.data,
            self.parse_info,
        )
        .timestamp()
        .unwrap_or(0)
    }

    fn handle(&mut self, record: crate::ring::RawRecord<'_>) {
        if self.error.is_some() {
            return;
        }
        if let Err(e) = self.handle_inner(record) {
            self.error = Some(e);
        }
    }

    fn handle_inner(&mut self, record: crate::ring::RawRecord<'_>) -> Result<(), Error> {
        const PERF_RECORD_LOST_SAMPLES: u32 = 13;
        if record.kind == PERF_RECORD_LOST_SAMPLES {
            self.lost += u64_at(&record.data, 0).unwrap_or(0);
            return Ok(());
        }
        let raw = RawEventRecord::new(
            RecordType(record.kind),
            record.misc,
            record.data,
            self.parse_info,
        );
        let Ok(parsed) = raw.parse() else {
            return Ok(());
        };
        let owner = match &parsed {
            EventRecord::Sample(s) => s.pid,
            EventRecord::Mmap2(m) => Some(m.pid),
            EventRecord::Comm(c) => Some(c.pid),
            EventRecord::Fork(f) if f.pid != f.ppid => Some(f.ppid),
            EventRecord::Exit(e) => Some(e.pid),
            _ => None,
        };
        if let Some(pid) = owner.filter(|p| *p > 0).map(|p| p as u32) {
            if self.finished_set.contains(&pid) {
                return Ok(());
            }
            let unknown = !self.processes.contains_key(&pid) && pid != self.root_pid;
            if !self.replaying && (unknown || self.deferred_pids.contains(&pid)) {
                self.deferred_pids.insert(pid);
                self.deferred.push(Deferred {
                    round: self.round,
                    kind: record.kind,
                    misc: record.misc,
                    bytes: record.data.as_slice().into_owned(),
                });
                return Ok(());
            }
        }
        match parsed {
            EventRecord::Sample(sample) => self.sample(&sample),
            EventRecord::Mmap2(m) if m.pid > 0 => {
                let time_ns = raw
                    .timestamp()
                    .map_or(0, |t| t.wrapping_add(self.session.mono_offset));
                let mapping = Mapping {
                    time_ns,
                    generation: 0,
                    start: VirtAddr::new(m.address),
                    end: VirtAddr::new(m.address + m.length),
                    pgoff: FileOffset::new(m.page_offset),
                    prot: m.protection,
                    flags: m.flags,
                    path: String::from_utf8_lossy(&m.path.as_slice()).into_owned(),
                    build_id: match &m.file_id {
                        Mmap2FileId::BuildId(id) => id.iter().map(|b| format!("{b:02x}")).collect(),
                        Mmap2FileId::InodeAndVersion(_) => String::new(),
                    },
                };
                let start = mapping.start;
                self.jit_files.mapped(m.pid as u32, &mapping);
                let mapped = self
                    .process_and_caches(m.pid as u32)
                    .and_then(|(p, caches)| Ok(p.map(mapping, &mut caches.elf)?));
                self.offer_to_cache(m.pid as u32, start);
                mapped
            }
            EventRecord::Comm(c) => {
                let name = String::from_utf8_lossy(&c.name.as_slice()).into_owned();
                let process = self.process(c.pid as u32)?;
                if c.is_execve {
                    process.exec();
                }
                process.set_thread_name(c.tid as u32, &name);
                if name == fltrace_runtime_abi::HANDLER_THREAD_NAME {
                    self.runtime_threads.insert(c.tid as u32);
                }
                Ok(())
            }
            EventRecord::Fork(f) if f.pid != f.ppid => {
                let (child, parent) = (f.pid as u32, f.ppid as u32);
                if !self.processes.contains_key(&child) {
                    let process = match self.processes.get(&parent) {
                        Some(parent) => {
                            let mut process = Process::fork_of(parent, child, &self.session)?;
                            process.inherit_stack(parent, f.ptid as u32);
                            process
                        }
                        None => Process::new(child, Some(parent), &self.session)?,
                    };
                    self.processes.insert(child, process);
                }
                // The child is named as the thread that forked it, until it execs.
                let name = self
                    .processes
                    .get(&parent)
                    .and_then(|p| p.thread_name(f.ptid as u32))
                    .map(str::to_owned);
                if let (Some(name), Some(process)) = (name, self.processes.get_mut(&child)) {
                    process.set_thread_name(child, &name);
                }
                Ok(())
            }
            EventRecord::Fork(f) => {
                // A new thread, named as the thread that made it.
                if let Some(process) = self.processes.get_mut(&(f.pid as u32))
                    && let Some(name) = process.thread_name(f.ptid as u32).map(str::to_owned)
                {
                    process.set_thread_name(f.tid as u32, &name);
                }
                Ok(())
            }
            EventRecord::Exit(e) if e.pid == e.tid => {
                if let Some(p) = self.processes.get_mut(&(e.pid as u32)) {
                    p.exited_round = Some(self.round);
                }
                Ok(())
            }
            EventRecord::Exit(e) => {
                // A thread ended: its last stack will not continue (its tid may be reused).
                if let Some(p) = self.processes.get_mut(&(e.pid as u32)) {
                    p.thread_exited(e.tid as u32);
                }
                Ok(())
            }
            EventRecord::Lost(l) => {
                self.lost += l.count;
                Ok(())
            }
            _ => Ok(()),
        }
    }

    fn sample(&mut self, sample: &linux_perf_event_reader::SampleRecord<'_>) -> Result<(), Error> {
        if sample
            .tid
            .is_some_and(|t| self.runtime_threads.contains(&(t as u32)))
        {
            return Ok(());
        }
        let (Some(pid), Some(tid), Some(raw), Some(regs)) = (
            sample.pid,
            sample.tid,
            sample.raw,
            sample.user_regs.as_ref(),
        ) else {
            return Ok(());
        };
        if let Some(unmap) = self.fields.unmap
            && raw
                .get(0..2)
                .and_then(|b| b.as_slice().as_ref().try_into().ok())
                == Some(unmap.enter_id.to_ne_bytes())
        {
            if let (Some(addr), Some(len)) = (u64_at(&raw, unmap.addr), u64_at(&raw, unmap.len))
                && let Some(process) = self.processes.get_mut(&(pid as u32))
            {
                process.unmap(addr, len);
            }
            return Ok(());
        }
        if let Some(remap) = self.fields.remap
            && let Some(kind) = raw
                .get(0..2)
                .and_then(|b| b.as_slice().as_ref().try_into().ok())
        {
            let kind = u16::from_ne_bytes(kind);
            if kind == remap.enter_id {
                if let (Some(old_start), Some(old_len), Some(new_len)) = (
                    u64_at(&raw, remap.addr),
                    u64_at(&raw, remap.old_len),
                    u64_at(&raw, remap.new_len),
                ) {
                    let call = RemapCall {
                        old_start,
                        old_len,
                        new_len,
                    };
                    self.remap_calls.insert(tid as u32, call);
                }
                return Ok(());
            }
            if kind == remap.exit_id {
                // An error return is -errno, in the last page of the address space.
                const MAX_ERRNO: u64 = 4095;
                if let Some(call) = self.remap_calls.remove(&(tid as u32))
                    && let Some(ret) = u64_at(&raw, remap.ret)
                    && ret < MAX_ERRNO.wrapping_neg()
                {
                    let time_ns = sample
                        .timestamp
                        .unwrap_or(0)
                        .wrapping_add(self.session.mono_offset);
                    let (process, caches) = self.process_and_caches(pid as u32)?;
                    return Ok(process.remap(&call, ret, time_ns, &mut caches.elf)?);
                }
                return Ok(());
            }
        }
        let (Some(addr), Some(error_code)) = (
            u64_at(&raw, self.fields.address),
            u64_at(&raw, self.fields.error_code),
        ) else {
            return Ok(());
        };
        let (Some(ip), Some(sp), Some(bp)) = (
            regs.get(sys::REG_IP),
            regs.get(sys::REG_SP),
            regs.get(sys::REG_BP),
        ) else {
            return Ok(());
        };
        let time_ns = sample
            .timestamp
            .unwrap_or(0)
            .wrapping_add(self.session.mono_offset);
        let (process, caches) = self.process_and_caches(pid as u32)?;
        let scratch = &mut caches.scratch;
        let stack: &[u8] = match &sample.user_stack {
            Some((data, dyn_size)) => {
                let len = (*dyn_size as usize).min(data.len());
                match data.get(0..len) {
                    Some(RawData::Single(bytes)) => bytes,
                    Some(split) => {
                        scratch.clear();
                        scratch.extend_from_slice(&split.as_slice());
                        scratch
                    }
                    None => &[],
                }
            }
            None => &[],
        };
        let fault = FaultSample {
            time_ns,
            tid: tid as u32,
            addr: VirtAddr::new(addr),
            error_code,
            regs: (ip, sp, bp),
            stack,
        };
        let before = process.counters.stacks_truncated;
        let result = process.fault(&fault, &mut caches.frames);
        self.truncated_total += process.counters.stacks_truncated - before;
        self.faults += 1;
        Ok(result?)
    }

    fn handle_major(&mut self, record: crate::ring::RawRecord<'_>) {
        let raw = RawEventRecord::new(
            RecordType(record.kind),
            record.misc,
            record.data,
            self.major_parse_info,
        );
        if let Ok(EventRecord::Sample(s)) = raw.parse()
            && let (Some(pid), Some(tid), Some(addr)) = (s.pid, s.tid, s.addr)
            && let Some(p) = self.processes.get_mut(&(pid as u32))
        {
            p.major(tid as u32, addr);
        }
    }

    fn sample_memory(&mut self) {
        for process in self
            .processes
            .values_mut()
            .filter(|p| p.exited_round.is_none())
        {
            process.sample_memory();
        }
    }

    /// Writes a checkpoint of every open process's tables (see [`Process::checkpoint`]).
    fn checkpoint(&mut self) -> Result<(), Error> {
        for process in self.processes.values_mut() {
            process.checkpoint()?;
        }
        Ok(())
    }

    fn write_stats(&mut self) -> Result<(), Error> {
        let now = unix_now_ns() / 1_000_000_000;
        for process in self.processes.values_mut() {
            process.write_stats(now, self.lost)?;
        }
        Ok(())
    }

    /// Processes whose exit was seen in an earlier pass: all their records are in by now.
    /// Ends a round of reading: replays the records deferred a round ago (all of them when
    /// `last`).
    fn end_round(&mut self, last: bool) {
        if let Some(cache) = &mut self.code_cache {
            for process in self.processes.values_mut() {
                for id in process.take_code_hits() {
                    cache.hit(&id);
                }
            }
        }
        self.jit_files.poll();
        let round = self.round;
        self.round += 1;
        if self.session.far_memory.is_some() {
            for process in self.processes.values_mut() {
                process.poll_runtime(round);
            }
        }
        let (ready, waiting): (Vec<Deferred>, Vec<Deferred>) = std::mem::take(&mut self.deferred)
            .into_iter()
            .partition(|d| last || d.round < round);
        if ready.is_empty() {
            self.deferred = waiting;
            return;
        }
        self.deferred_pids.clear();
        self.replaying = true;
        for d in &ready {
            self.handle(crate::ring::RawRecord {
                kind: d.kind,
                misc: d.misc,
                data: RawData::Single(&d.bytes),
            });
        }
        self.replaying = false;
        for d in &waiting {
            if let Some(pid) = owner_of_bytes(&d.bytes, d.kind) {
                self.deferred_pids.insert(pid);
            }
        }
        self.deferred = waiting;
    }

    /// Processes whose exit was read a round ago: all their records are in by now. The root
    /// stays open until the end: its peak memory comes from wait4 after it exits.
    fn finish_exited(&mut self) -> Result<(), Error> {
        let round = self.round;
        let exited: Vec<u32> = self
            .processes
            .iter()
            .filter(|(pid, p)| {
                p.exited_round.is_some_and(|r| r + 1 < round) && **pid != self.root_pid
            })
            .map(|(pid, _)| *pid)
            .collect();
        let now = unix_now_ns() / 1_000_000_000;
        for pid in exited {
            if let Some(process) = self.processes.remove(&pid) {
                self.finish_process(pid, process, now)?;
                self.finished_set.insert(pid);
            }
        }
        Ok(())
    }

    /// Finishes every process still open, each as far as it goes; returns the processes
    /// finished and the first error.
    fn finish_all(&mut self) -> (Vec<u32>, Result<(), Error>) {
        let now = unix_now_ns() / 1_000_000_000;
        let mut first = Ok(());
        for (pid, process) in std::mem::take(&mut self.processes) {
            let result = self.finish_process(pid, process, now);
            if first.is_ok() {
                first = result;
            }
        }
        (std::mem::take(&mut self.finished), first)
    }

    /// Writes out a process that is gone: its runtime's last counters, stats and tables.
    fn finish_process(&mut self, pid: u32, mut process: Process, now: u64) -> Result<(), Error> {
        if let Some(cache) = &mut self.code_cache {
            for id in process.take_code_hits() {
                cache.hit(&id);
            }
        }
        self.preload_generations
            .insert(pid, process.preload_generation.unwrap_or(0));
        process.poll_runtime(u64::MAX);
        self.far_exhausted |= process.far_memory_exhausted();
        // The tables are closed even when the stats line cannot be written (a full disk):
        // their footers may still fit, or be recoverable.
        let stats = process.write_stats(now, self.lost);
        let tables = process.finish();
        self.jit_files.finish(&self.session.dir, pid);
        self.finished.push(pid);
        match (stats, tables) {
            (Err(e), _) => Err(e.into()),
            (Ok(()), Err(e)) => Err(e.into()),
            (Ok(()), Ok(())) => Ok(()),
        }
    }
}

/// The process a deferred record belongs to: every deferred record kind starts with the pid
/// except fork, whose parent pid is its second field.
fn owner_of_bytes(bytes: &[u8], kind: u32) -> Option<u32> {
    const PERF_RECORD_FORK: u32 = 7;
    let offset = if kind == PERF_RECORD_FORK { 4 } else { 0 };
    let field = bytes.get(offset..offset + 4)?;
    Some(u32::from_ne_bytes(field.try_into().ok()?))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn summary(pids: Vec<u32>) -> Summary {
        Summary {
            root_pid: 10,
            pids,
            attached: Vec::new(),
            exit_code: Some(0),
            signal: None,
            faults: 0,
            lost: 0,
            stacks_truncated: 0,
            far_memory_exhausted: false,
            allocs: None,
            access: None,
            trace_error: None,
            trace_stopped: None,
            cache: None,
        }
    }

    #[test]
    fn traced_pids_fall_back_to_the_root_process() {
        assert_eq!(summary(vec![]).traced_pids(), vec![10]);
        assert_eq!(summary(vec![10, 11]).traced_pids(), vec![10, 11]);
    }

    #[test]
    fn shell_status_is_the_exit_code_or_128_plus_the_signal() {
        let exited = Summary {
            exit_code: Some(3),
            ..summary(vec![10])
        };
        assert_eq!(exited.shell_status(), 3);
        let killed = Summary {
            exit_code: None,
            signal: Some(9),
            ..summary(vec![10])
        };
        assert_eq!(killed.shell_status(), 137);
        let attached = Summary {
            exit_code: None,
            ..summary(vec![10])
        };
        assert_eq!(attached.shell_status(), 0);
    }

    #[test]
    fn faults_per_second_over_at_least_a_millisecond() {
        let progress = |faults, elapsed| Progress {
            faults,
            lost: 0,
            elapsed,
        };
        assert_eq!(
            progress(500, Duration::from_millis(250)).faults_per_second(),
            2000.0
        );
        assert_eq!(progress(3, Duration::ZERO).faults_per_second(), 3000.0);
    }

    /// The exit code wins over a signal; with neither the ending is unknown.
    #[test]
    fn ending_is_the_exit_code_else_the_signal() {
        let both = Summary {
            exit_code: Some(3),
            signal: Some(9),
            ..summary(vec![10])
        };
        assert_eq!(both.ending(), Ending::Exited(3));
        let killed = Summary {
            exit_code: None,
            signal: Some(2),
            ..summary(vec![10])
        };
        assert_eq!(killed.ending(), Ending::Killed(2));
        let neither = Summary {
            exit_code: None,
            ..summary(vec![10])
        };
        assert_eq!(neither.ending(), Ending::Unknown);
    }
}
