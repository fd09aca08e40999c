//! Faults captured by a BPF program (`bpf/record.bpf.c`, C built with clang, loaded with aya):
//! each fault of the traced processes with its user registers and the live part of its
//! thread's stack, and each major-fault mark, in one ring shared by all CPUs ([`BpfRing`]).
//! The recorder keeps the `tgids` table (the processes traced: the program adds their
//! children itself) and each thread's stack bounds (`stacks`: the program finds a stack's
//! mapping at the thread's first fault; the recorder lowers its top to just above the thread's
//! outermost frame once it knows it, so that the copies stop there).
//!
//! The loading helpers are public for the system tools' own BPF object.

mod record;
mod ring;

use std::os::fd::{AsFd, AsRawFd, RawFd};

use aya::maps::{HashMap as BpfHashMap, MapData, PerCpuArray};
use aya::programs::perf_event::{PerfEventConfig, PerfEventScope, SamplePolicy, SoftwareEvent};
use aya::programs::{PerfEvent, RawTracePoint};
use aya::{Ebpf, EbpfLoader};

pub use record::{BpfFault, BpfRecord, FAULT_CAPPED, FAULT_KERNEL, FAULT_NO_BOUNDS};
pub use ring::{BpfRing, Slot};

static OBJECT: &[u8] = aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/record.bpf.o"));

/// The default bound of each fault's stack copy, bytes: a stack 2,000 calls of 80 bytes
/// deep (160,000 bytes) is copied whole.
pub const DEFAULT_STACK_CAP: u32 = 256 << 10;

/// The largest copy the program can make (`MAX_CHUNKS` pieces of 64 KiB).
pub const MAX_STACK_CAP: u32 = 8 << 20;

/// Why the BPF capture could not start (the recorder then falls back to per-CPU perf rings).
#[derive(Debug, thiserror::Error)]
#[error("{what}: {cause}")]
pub struct Unavailable {
    what: String,
    cause: String,
}

impl Unavailable {
    fn new(what: impl Into<String>, cause: impl std::fmt::Display) -> Unavailable {
        Unavailable {
            what: what.into(),
            cause: error_chain(&cause.to_string(), None),
        }
    }

    fn from_error(
        what: impl Into<String>,
        error: &(dyn std::error::Error + 'static),
    ) -> Unavailable {
        Unavailable {
            what: what.into(),
            cause: error_chain(&error.to_string(), error.source()),
        }
    }
}

fn error_chain(first: &str, mut source: Option<&(dyn std::error::Error + 'static)>) -> String {
    let mut text = first.to_owned();
    while let Some(e) = source {
        text.push_str(": ");
        text.push_str(&e.to_string());
        source = e.source();
    }
    text
}

/// `struct bounds`.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
struct Bounds {
    low: u64,
    top: u64,
}

// SAFETY: two u64s, no padding.
unsafe impl aya::Pod for Bounds {}

/// What the program counted (`counts`, summed over CPUs).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Counts {
    /// Records that found no room in the ring: faults (and major-fault marks) lost.
    pub lost: u64,
    /// Their bytes.
    pub lost_bytes: u64,
    /// New processes of the traced tree left untraced (the table of processes full).
    pub children_lost: u64,
    /// Faults whose stack mapping could not be looked up (nothing copied).
    pub no_bounds: u64,
    /// Fault records written.
    pub faults: u64,
    /// Stack bytes copied.
    pub stack_bytes: u64,
    /// Stack bytes the copies skipped (pages not present, noted as holes in their records).
    pub hole_bytes: u64,
    /// Copies that ended at a page not present, all their holes taken.
    pub holes_full: u64,
}

/// The capture running in the kernel.
pub struct BpfCapture {
    ebpf: Ebpf,
    ring: BpfRing,
    /// The ring's map, whose descriptor is polled.
    _events: aya::maps::Map,
    ring_fd: RawFd,
    tgids: BpfHashMap<MapData, u32, u8>,
    stacks: BpfHashMap<MapData, u32, Bounds>,
    counts: PerCpuArray<MapData, u64>,
    /// Whether major faults are marked (their software event could be opened).
    pub majors: bool,
    /// Whether faults the kernel takes on user memory are recorded.
    pub kernel_faults: bool,
}

/// Raises RLIMIT_MEMLOCK: kernels before 5.11 charge BPF maps to it.
pub fn raise_memlock() {
    let unlimited = libc::rlimit {
        rlim_cur: libc::RLIM_INFINITY,
        rlim_max: libc::RLIM_INFINITY,
    };
    // SAFETY: setrlimit reads a valid struct; failure only matters on old kernels.
    unsafe { libc::setrlimit(libc::RLIMIT_MEMLOCK, &unlimited) };
}

/// Whether the kernel refused for lack of privilege (EPERM anywhere in the error's chain).
pub fn refused_for_privilege(error: &(dyn std::error::Error + 'static)) -> bool {
    let mut cause = Some(error);
    while let Some(e) = cause {
        if e.downcast_ref::<std::io::Error>()
            .and_then(std::io::Error::raw_os_error)
            == Some(libc::EPERM)
        {
            return true;
        }
        cause = e.source();
    }
    false
}

impl BpfCapture {
    /// Loads the program with a ring of `ring_bytes` (a power of two of pages) and stack
    /// copies of at most `stack_cap` bytes, and attaches it: nothing is traced until
    /// [`BpfCapture::trace`] names a process. The recorder is woken when an eighth of the ring
    /// waits, and, unless `wake_records` is 0, when a CPU has written that many records since
    /// it last woke it. `cpus` are the CPUs to watch for major faults.
    pub fn start(
        ring_bytes: usize,
        stack_cap: u32,
        wake_records: u32,
        cpus: &[i32],
    ) -> Result<BpfCapture, Unavailable> {
        let started = std::time::Instant::now();
        raise_memlock();
        let cap = stack_cap.min(MAX_STACK_CAP) & !7;
        let wake = (ring_bytes / 8) as u32;
        let (pidns_dev, pidns_ino) = own_pid_namespace().unwrap_or((0, 0));
        let mut ebpf = EbpfLoader::new()
            .override_global("pidns_dev", &pidns_dev, true)
            .override_global("pidns_ino", &pidns_ino, true)
            .override_global("stack_cap", &cap, true)
            .override_global("wake_bytes", &wake, true)
            .override_global("wake_records", &wake_records, true)
            .map_max_entries("events", ring_bytes as u32)
            .load(OBJECT)
            .map_err(|e| Unavailable::from_error("loading the BPF program", &e))?;
        // In a pid namespace of its own, the recorder names processes by their ids there.
        let tgids = take_hash(&mut ebpf, if pidns_ino != 0 { "ns_tgids" } else { "tgids" })?;
        let stacks = take_hash(&mut ebpf, "stacks")?;
        let counts = PerCpuArray::try_from(
            ebpf.take_map("counts")
                .ok_or_else(|| Unavailable::new("BPF map counts", "missing"))?,
        )
        .map_err(|e| Unavailable::from_error("BPF map counts", &e))?;
        let events = ebpf
            .take_map("events")
            .ok_or_else(|| Unavailable::new("BPF map events", "missing"))?;
        let ring_fd = match &events {
            aya::maps::Map::RingBuf(data) => data.fd().as_fd().as_raw_fd(),
            _ => return Err(Unavailable::new("BPF map events", "not a ring buffer")),
        };
        let ring = BpfRing::map(ring_fd, ring_bytes)
            .map_err(|e| Unavailable::new("mapping the BPF ring", e))?;

        // Processes first: a child made meanwhile is followed from its start.
        attach_raw(&mut ebpf, "new_task", "task_newtask")?;
        attach_raw(&mut ebpf, "task_exit", "sched_process_exit")?;
        attach_raw(&mut ebpf, "task_exec", "sched_process_exec")?;
        let majors = attach_majors(&mut ebpf, cpus)
            .inspect_err(|e| log::warn!("major faults will not be marked: {e}"))
            .is_ok();
        let kernel_faults = attach_faults(&mut ebpf)?;
        if !kernel_faults {
            log::warn!("faults the kernel takes on user memory will not be recorded");
        }
        log::debug!(
            "BPF program loaded and attached in {:.3} s",
            started.elapsed().as_secs_f64()
        );
        Ok(BpfCapture {
            ebpf,
            ring,
            _events: events,
            ring_fd,
            tgids,
            stacks,
            counts,
            majors,
            kernel_faults,
        })
    }

    /// Traces process `tgid` (as this process sees it; and, from now on, the processes it
    /// makes).
    pub fn trace(&mut self, tgid: u32) -> std::io::Result<()> {
        self.tgids
            .insert(tgid, 1, 0)
            .map_err(|e| std::io::Error::other(e.to_string()))
    }

    /// The copies of thread `tid`'s stack between `low` and `top` stop at `top`.
    pub fn set_stack_top(&mut self, tid: u32, low: u64, top: u64) {
        // A failure leaves the copies going to the mapping's end, as before.
        let _ = self.stacks.insert(tid, Bounds { low, top }, 0);
    }

    /// The ring.
    pub fn ring(&mut self) -> &mut BpfRing {
        &mut self.ring
    }

    /// The ring's descriptor, readable when the program woke the recorder.
    pub fn ring_fd(&self) -> RawFd {
        self.ring_fd
    }

    /// What the program counted so far.
    pub fn counts(&self) -> Counts {
        let sum = |index: u32| -> u64 {
            self.counts
                .get(&index, 0)
                .map(|values| values.iter().sum())
                .unwrap_or(0)
        };
        Counts {
            lost: sum(0),
            lost_bytes: sum(1),
            children_lost: sum(2),
            no_bounds: sum(3),
            faults: sum(4),
            stack_bytes: sum(5),
            hole_bytes: sum(6),
            holes_full: sum(7),
        }
    }

    /// Detaches the programs (the kernel then unregisters their tracepoints) and frees the
    /// maps.
    pub fn close(self) {
        drop(self.ebpf);
    }
}

/// The device and inode of this process's pid namespace, when it is not the first one (whose
/// inode is fixed: `PROC_PID_INIT_INO`).
fn own_pid_namespace() -> Option<(u64, u64)> {
    use std::os::unix::fs::MetadataExt;
    const PROC_PID_INIT_INO: u64 = 0xEFFF_FFFC;
    let ns = std::fs::metadata("/proc/self/ns/pid").ok()?;
    (ns.ino() != PROC_PID_INIT_INO).then(|| (ns.dev(), ns.ino()))
}

fn take_hash<V: aya::Pod>(
    ebpf: &mut Ebpf,
    name: &str,
) -> Result<BpfHashMap<MapData, u32, V>, Unavailable> {
    let map = ebpf
        .take_map(name)
        .ok_or_else(|| Unavailable::new(format!("BPF map {name}"), "missing"))?;
    BpfHashMap::try_from(map).map_err(|e| Unavailable::from_error(format!("BPF map {name}"), &e))
}

fn attach_raw(ebpf: &mut Ebpf, program: &str, tracepoint: &str) -> Result<(), Unavailable> {
    let what = || format!("BPF program {program} on {tracepoint}");
    let p: &mut RawTracePoint = ebpf
        .program_mut(program)
        .ok_or_else(|| Unavailable::new(what(), "missing"))?
        .try_into()
        .map_err(|e| Unavailable::from_error(what(), &e))?;
    p.load().map_err(|e| Unavailable::from_error(what(), &e))?;
    p.attach(tracepoint)
        .map_err(|e| Unavailable::from_error(what(), &e))?;
    Ok(())
}

/// The fault program on both fault tracepoints; whether the kernel one (optional) is attached.
fn attach_faults(ebpf: &mut Ebpf) -> Result<bool, Unavailable> {
    let what = || "BPF program fault".to_owned();
    let p: &mut RawTracePoint = ebpf
        .program_mut("fault")
        .ok_or_else(|| Unavailable::new(what(), "missing"))?
        .try_into()
        .map_err(|e| Unavailable::from_error(what(), &e))?;
    p.load().map_err(|e| Unavailable::from_error(what(), &e))?;
    p.attach("page_fault_user")
        .map_err(|e| Unavailable::from_error("BPF program fault on page_fault_user", &e))?;
    Ok(p.attach("page_fault_kernel").is_ok())
}

/// The major-fault software event on every CPU, all processes (the program keeps the traced
/// ones): no ring, only the program.
fn attach_majors(ebpf: &mut Ebpf, cpus: &[i32]) -> Result<(), Unavailable> {
    let what = || "BPF program major_fault on the major-fault event".to_owned();
    let p: &mut PerfEvent = ebpf
        .program_mut("major_fault")
        .ok_or_else(|| Unavailable::new(what(), "missing"))?
        .try_into()
        .map_err(|e| Unavailable::from_error(what(), &e))?;
    p.load().map_err(|e| Unavailable::from_error(what(), &e))?;
    for &cpu in cpus {
        p.attach(
            PerfEventConfig::Software(SoftwareEvent::PageFaultsMaj),
            PerfEventScope::AllProcessesOneCpu { cpu: cpu as u32 },
            SamplePolicy::Period(1),
            false,
        )
        .map_err(|e| Unavailable::from_error(what(), &e))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The program loads and attaches on this kernel, and a fault of a traced process comes
    /// back with its address, registers and the live stack from the stack pointer up, in the
    /// order made; a process not traced leaves nothing.
    #[test]
    fn faults_of_a_traced_process_come_with_their_stacks() {
        let cpus = crate::perf_abi::online_cpus().expect("CPUs");
        let mut capture =
            BpfCapture::start(4 << 20, DEFAULT_STACK_CAP, 0, &cpus).expect("BPF loads");
        // A child that touches 16 fresh pages once told to go.
        let (go_read, go_write) = rustix::pipe::pipe().expect("pipe");
        // SAFETY: the child only makes system calls and writes its own memory before _exit.
        let child = unsafe { libc::fork() };
        if child == 0 {
            let mut byte = [0u8];
            let _ = rustix::io::read(&go_read, &mut byte);
            unsafe {
                let p = libc::mmap(
                    std::ptr::null_mut(),
                    16 * 4096,
                    libc::PROT_READ | libc::PROT_WRITE,
                    libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                    -1,
                    0,
                )
                .cast::<u8>();
                for i in 0..16 {
                    p.add(i * 4096).write_volatile(1);
                }
                libc::_exit(0);
            }
        }
        capture.trace(child as u32).expect("traced");
        rustix::io::write(&go_write, b"g").expect("go");
        crate::os::reap(child, true).expect("reaped");
        let ring = capture.ring();
        let (mut pos, head) = ring.readable();
        let mut faults = Vec::new();
        while pos < head {
            let Some((slot, next)) = ring.record_at(pos) else {
                break;
            };
            if let Slot::Record(bytes) = slot
                && let Some(BpfRecord::Fault(f)) = BpfRecord::parse(bytes)
            {
                assert_eq!(f.pid, child as u32);
                assert!(f.stack_low <= f.regs.1 && f.regs.1 < f.stack_top, "{f:?}");
                assert!(f.stack.len() as u64 <= f.stack_top - f.regs.1);
                faults.push((f.time_ns, f.addr, f.stack.len()));
            }
            pos = next;
        }
        ring.consume(pos);
        let pages: Vec<_> = faults
            .windows(2)
            .filter(|w| w[1].1 == w[0].1 + 4096)
            .collect();
        assert!(pages.len() >= 15, "16 pages in a row: {faults:x?}");
        assert!(faults.windows(2).all(|w| w[0].0 <= w[1].0), "{faults:?}");
        assert!(
            faults.iter().all(|f| f.2 > 0),
            "a copy with each: {faults:?}"
        );
        let counts = capture.counts();
        assert_eq!(counts.lost, 0);
        assert_eq!(counts.faults, faults.len() as u64);
    }
}
