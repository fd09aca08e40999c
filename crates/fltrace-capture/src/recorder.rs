//! The recording: set up ([`setup`]: the events opened, the command started or the processes
//! attached), the event loop ([`event_loop`]: the ring buffers drained in time order until the
//! target is gone), the dispatch of each record to the process model ([`dispatch`]), and the
//! finish ([`finish`]: the tables closed, the side captures collected). The clocks and the
//! system calls the loop makes are in [`os`].

mod dispatch;
mod event_loop;
mod finish;
mod setup;

use std::ffi::OsString;
use std::path::PathBuf;
use std::sync::atomic::AtomicUsize;
use std::time::{Duration, Instant};

use crate::Error;
use crate::child::ChildGuard;
use crate::perf_abi::PerfEvent;
use crate::ring::RingBuffer;
use crate::target::Credentials;

use dispatch::State;
pub use setup::attach_tasks;

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

/// How each fault's stack is copied for unwinding.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StackCopy {
    /// The live part of the stack, from the stack pointer to the top of the thread's stack
    /// (just above its outermost frame once known), at most `cap` bytes, copied by a BPF
    /// program into one ring shared by all CPUs. Without BPF, a fixed copy of
    /// [`DEFAULT_STACK_BYTES`] with each perf sample, said in one line at the start.
    Live {
        /// The most copied, bytes.
        cap: u32,
    },
    /// A fixed copy of this many bytes (a multiple of 8) with each perf sample, in per-CPU
    /// rings (`--stack-size`).
    Fixed(u32),
}

/// How to record.
#[derive(Debug, Clone)]
pub struct Options {
    /// Where the trace files go.
    pub dir: PathBuf,
    /// How each fault's stack is copied.
    pub stack: StackCopy,
    /// The kernel memory of all the recording's rings together, MiB, whatever the number of
    /// CPUs ([`crate::budget::plan_rings`]).
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
    /// A live view to tell what is recorded as it is ([`crate::live`]; `fltrace top`).
    pub live: Option<crate::live::LiveFeed>,
    /// Run the command away from the terminal, which a full-screen view holds: reading
    /// `/dev/null`, its output and errors appended to this file, in a process group of its
    /// own (see [`crate::PendingChild::spawn_in_own_group`]).
    pub detached_output: Option<PathBuf>,
    /// Pairs each process's allocation calls as they are converted, so that reports read
    /// what it found (`fltrace-data-allocstats-<pid>.parquet`) instead of every call; `None`:
    /// reports pair them.
    pub pairing: Option<Pairing>,
}

/// What pairs allocation calls at record time: the analysis crate's pass, handed in by the
/// binary (capture does not depend on analysis).
#[derive(Clone)]
pub struct Pairing(pub fltrace_trace::PairingFactory);

impl std::fmt::Debug for Pairing {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Pairing")
    }
}

impl Options {
    /// Defaults: each fault's live stack, up to [`DEFAULT_STACK_CAP`] bytes (a stack 2,000
    /// calls of 80 bytes deep whole), in rings of [`DEFAULT_BUDGET_MB`] MiB in all; deeper,
    /// a thread's outer frames come from its previous stack where both hold the same frame
    /// at the same address, else from the live process (`KnownFrames`, `LiveStack`).
    pub fn new(dir: PathBuf) -> Options {
        Options {
            dir,
            stack: StackCopy::Live {
                cap: DEFAULT_STACK_CAP,
            },
            buffer_mb: DEFAULT_BUDGET_MB,
            credentials: None,
            read_live_stacks: true,
            far_memory: None,
            allocs: None,
            drain_allocs: true,
            access_samples: None,
            heap_backing: None,
            build_id_cache: None,
            cache_limit: fltrace_trace::build_id_cache::DEFAULT_LIMIT_BYTES,
            live: None,
            detached_output: None,
            pairing: None,
        }
    }
}

/// The default bound of the live stack copied with each fault, bytes.
pub use crate::bpf::DEFAULT_STACK_CAP;
/// The default kernel memory of a recording's rings, MiB.
pub use crate::budget::DEFAULT_BUDGET_MB;

/// Bytes of user stack copied with each fault where the copy is fixed: without BPF, 16 KiB
/// complete 99.5% of the stacks of a compiler, an interpreter, a database and two servers
/// (docs/BENCHMARKS.md), with `KnownFrames` and `LiveStack` for the outer frames.
pub const DEFAULT_STACK_BYTES: u32 = 16384;

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
pub struct RecordingOutcome {
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
    /// Fault records the kernel dropped because fltrace fell behind, and `lost_late`.
    pub lost: u64,
    /// Of `lost`, faults read after their process's files were closed (its end was read
    /// before them: a thread whose start the recording missed).
    pub lost_late: u64,
    /// Of `lost`, faults of processes not filed: a pid reused within the run more than 511
    /// times (the tables write pids as INT32).
    pub lost_unfiled: u64,
    /// Faults whose stack lacks its outer frames (`fltrace_trace::StackEnd::Truncated`).
    pub stacks_truncated: u64,
    /// Whether a process ran out of the far memory `-M` allowed.
    pub far_memory_exhausted: bool,
    /// Under far memory: processes whose images ran without the runtime (the preloaded
    /// library never loaded: a statically linked or set-user-ID program), with the
    /// executables. None of their memory was under the limit.
    pub far_unreached: Vec<(u32, String)>,
    /// Under far memory: what each process had outside the region (not under the limit) at
    /// the most, and its peak.
    pub far_outside: Vec<(u32, crate::unemulated::OutsidePeak)>,
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

impl RecordingOutcome {
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
    /// written whole (a table lost or cut short: a full disk, a refused output) or far memory
    /// was asked for and part of the program ran without it, else the command's status
    /// ([`RecordingOutcome::shell_status`]).
    pub fn record_status(&self) -> u8 {
        if self.trace_error.is_some() || !self.far_unreached.is_empty() {
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
/// Faults a far-memory runtime may log beyond what the recorder has read (the in-thread path
/// waits beyond): a fault's record takes its stack copy and some more, and the faults' ring is
/// at most half the budget. A live copy is usually far below its cap: counted at 16 KiB at
/// most, the backlog stays a bound the in-thread path can wait on.
pub(crate) fn far_backlog(options: &Options) -> u64 {
    let copy = match options.stack {
        StackCopy::Fixed(bytes) => bytes,
        StackCopy::Live { cap } => cap.min(16 << 10),
    } as usize;
    ((options.buffer_mb << 20) / 2 / (copy + 1024) * 3 / 4).max(256) as u64
}

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

/// The ring buffers of one CPU.
struct CpuRings {
    faults: RingBuffer,
    major: Option<RingBuffer>,
    /// The descriptor of each ring's event and the length of its mapping, so that the
    /// rings can be mapped again elsewhere (`finish::close_after_exit`).
    mapped: Vec<(std::os::fd::RawFd, usize)>,
}

/// Records `target` until it ends (or, for an attached process, until `stop` becomes
/// non-zero). `stop` counts interrupt requests: the first is passed on to the command, the
/// second kills it.
pub fn record(
    target: &Target,
    options: &Options,
    stop: &AtomicUsize,
    mut progress: impl FnMut(&Progress),
) -> Result<RecordingOutcome, Error> {
    let mut recording = ActiveRecording::set_up(target, options)?;
    let ended = recording.run(stop, &mut progress);
    Ok(recording.finish(ended, options))
}

/// A recording once set up: the events open, the command running, the side captures
/// running.
struct ActiveRecording {
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
    /// The faults' BPF program and its ring, when it carries them.
    bpf: Option<crate::bpf::BpfCapture>,
    /// The rings' sizes.
    plan: crate::budget::RingPlan,
    state: State,
    alloc_logs: Option<crate::AllocLogs>,
    attached_allocs: Option<crate::uprobes::AttachedAllocs>,
    access: Option<crate::access::AccessCapture>,
    mono_offset: u64,
    recording: String,
}

/// How the event loop ended.
struct Ended {
    /// How the command ended (exit code 0 for an attached process).
    exit_status: Option<std::process::ExitStatus>,
    /// The command's peak resident memory from wait4, in bytes.
    rusage_hwm: u64,
    /// The first error writing the trace.
    trace_error: Option<String>,
    /// When the trace stopped being written, after the start.
    trace_stopped: Option<Duration>,
    /// The start of the recording.
    started: Instant,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn summary(pids: Vec<u32>) -> RecordingOutcome {
        RecordingOutcome {
            root_pid: 10,
            pids,
            attached: Vec::new(),
            exit_code: Some(0),
            signal: None,
            faults: 0,
            lost: 0,
            lost_late: 0,
            lost_unfiled: 0,
            stacks_truncated: 0,
            far_memory_exhausted: false,
            far_unreached: Vec::new(),
            far_outside: Vec::new(),
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
        let exited = RecordingOutcome {
            exit_code: Some(3),
            ..summary(vec![10])
        };
        assert_eq!(exited.shell_status(), 3);
        let killed = RecordingOutcome {
            exit_code: None,
            signal: Some(9),
            ..summary(vec![10])
        };
        assert_eq!(killed.shell_status(), 137);
        let attached = RecordingOutcome {
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
        let both = RecordingOutcome {
            exit_code: Some(3),
            signal: Some(9),
            ..summary(vec![10])
        };
        assert_eq!(both.ending(), Ending::Exited(3));
        let killed = RecordingOutcome {
            exit_code: None,
            signal: Some(2),
            ..summary(vec![10])
        };
        assert_eq!(killed.ending(), Ending::Killed(2));
        let neither = RecordingOutcome {
            exit_code: None,
            ..summary(vec![10])
        };
        assert_eq!(neither.ending(), Ending::Unknown);
    }
}
