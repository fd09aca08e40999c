//! Where the handled faults' time goes, beyond what the handler times itself: TLB shootdowns
//! and IPIs counted by perf tracepoint counters on the process, and the CPU and run-queue time
//! of the program's and the handler's threads from schedstat. Written into the shared page now
//! and then by a handler and once more at exit.
//!
//! No allocation: fixed arrays, raw descriptors, stack buffers.

use std::sync::atomic::{AtomicI32, AtomicU32, AtomicU64, Ordering::Relaxed};

use fltrace_runtime_abi::Shared;
use perf_event_open_sys::bindings::{
    PERF_COUNT_SW_CONTEXT_SWITCHES, PERF_FLAG_FD_CLOEXEC, PERF_TYPE_SOFTWARE, PERF_TYPE_TRACEPOINT,
    perf_event_attr,
};

/// The counters: remote TLB shootdowns, local ones, IPIs sent, context switches.
const COUNTERS: usize = 4;
static FDS: [AtomicI32; COUNTERS] = [const { AtomicI32::new(-1) }; COUNTERS];

/// Thread ids of the handler threads (0: free slot).
static HANDLER_TIDS: [AtomicU32; 64] = [const { AtomicU32::new(0) }; 64];

/// Adds `ns` to a sum.
pub fn add(sum: &AtomicU64, ns: u64) {
    sum.fetch_add(ns, Relaxed);
}

/// Notes the calling thread as a handler (their schedstat is summed apart).
pub fn register_handler() {
    // SAFETY: gettid has no preconditions.
    let tid = unsafe { libc::gettid() } as u32;
    for slot in &HANDLER_TIDS {
        if slot.compare_exchange(0, tid, Relaxed, Relaxed).is_ok() {
            return;
        }
    }
}

/// In a forked child: forgets the parent's handler threads and closes the counters inherited
/// from it (they would go on counting the parent's events), before its own are opened.
pub fn forget_parent() {
    for slot in &HANDLER_TIDS {
        slot.store(0, Relaxed);
    }
    for fd in &FDS {
        let fd = fd.swap(-1, Relaxed);
        if fd >= 0 {
            // SAFETY: closing the child's copy of a descriptor of ours.
            unsafe { libc::close(fd) };
        }
    }
}

/// How many handler threads have started.
pub fn handler_count() -> u64 {
    HANDLER_TIDS
        .iter()
        .filter(|slot| slot.load(Relaxed) != 0)
        .count() as u64
}

/// Opens the counters on the calling thread and every thread it (and they) will create
/// (`inherit`). Called before the handler threads and the program's threads exist. A counter
/// the kernel refuses (no tracefs, unprivileged) stays closed and reads as 0.
/// The tracepoint counters only when asked for (`tracepoints`, `FLTRACE_RT_TLB_COUNT=1`): each
/// costs the program 30-50 ms at exit.
pub fn open_counters(tracepoints: bool) {
    let (tlb, ipi) = if tracepoints {
        (
            tracepoint_id(c"/sys/kernel/tracing/events/tlb/tlb_flush/id")
                .or_else(|| tracepoint_id(c"/sys/kernel/debug/tracing/events/tlb/tlb_flush/id")),
            tracepoint_id(c"/sys/kernel/tracing/events/ipi/ipi_send_cpumask/id").or_else(|| {
                tracepoint_id(c"/sys/kernel/debug/tracing/events/ipi/ipi_send_cpumask/id")
            }),
        )
    } else {
        (None, None)
    };
    // reason: 1 remote shootdown (received), 2 local shootdown, 3 local mm shootdown.
    let specs: [(u32, Option<u64>, Option<&core::ffi::CStr>); COUNTERS] = [
        (PERF_TYPE_TRACEPOINT, tlb, Some(c"reason == 1")),
        (
            PERF_TYPE_TRACEPOINT,
            tlb,
            Some(c"reason == 2 || reason == 3"),
        ),
        (PERF_TYPE_TRACEPOINT, ipi, None),
        (
            PERF_TYPE_SOFTWARE,
            Some(u64::from(PERF_COUNT_SW_CONTEXT_SWITCHES)),
            None,
        ),
    ];
    for (slot, (kind, config, filter)) in FDS.iter().zip(specs) {
        let Some(config) = config else { continue };
        // SAFETY: perf_event_attr is plain data; all-zero is its default.
        let mut attr: perf_event_attr = unsafe { std::mem::zeroed() };
        attr.type_ = kind;
        attr.size = std::mem::size_of::<perf_event_attr>() as u32;
        attr.config = config;
        attr.set_inherit(1);
        attr.set_exclude_hv(1);
        // SAFETY: a valid attr; pid 0 and cpu -1: this thread (and its descendants) anywhere.
        let fd = unsafe {
            perf_event_open_sys::perf_event_open(&mut attr, 0, -1, -1, PERF_FLAG_FD_CLOEXEC.into())
        };
        if fd < 0 {
            continue;
        }
        if let Some(filter) = filter {
            // SAFETY: an open perf event and a NUL-terminated filter the kernel only reads.
            let ret =
                unsafe { perf_event_open_sys::ioctls::SET_FILTER(fd, filter.as_ptr().cast_mut()) };
            if ret < 0 {
                // Unfiltered, the count would mean something else: better none.
                // SAFETY: closing our own descriptor.
                unsafe { libc::close(fd) };
                continue;
            }
        }
        slot.store(fd, Relaxed);
    }
}

/// Reads a tracepoint's id from tracefs.
fn tracepoint_id(path: &core::ffi::CStr) -> Option<u64> {
    let mut buf = [0u8; 32];
    let n = read_file(path, &mut buf)?;
    parse_u64(buf[..n].split(|b| b.is_ascii_whitespace()).next()?)
}

fn parse_u64(bytes: &[u8]) -> Option<u64> {
    if bytes.is_empty() {
        return None;
    }
    let mut n: u64 = 0;
    for &b in bytes {
        if !b.is_ascii_digit() {
            return None;
        }
        n = n.checked_mul(10)?.checked_add(u64::from(b - b'0'))?;
    }
    Some(n)
}

/// Reads up to `buf.len()` bytes of a file; the count read.
fn read_file(path: &core::ffi::CStr, buf: &mut [u8]) -> Option<usize> {
    // SAFETY: a NUL-terminated path.
    let fd = unsafe { libc::open(path.as_ptr(), libc::O_RDONLY | libc::O_CLOEXEC) };
    if fd < 0 {
        return None;
    }
    // SAFETY: reading into our buffer.
    let n = unsafe { crate::sys::read(fd, buf.as_mut_ptr(), buf.len()) };
    // SAFETY: closing our own descriptor.
    unsafe { libc::close(fd) };
    (n >= 0).then_some(n as usize)
}

/// Writes the counters and the threads' schedstat into the shared page.
pub fn refresh(shared: &Shared) {
    let b = &shared.breakdown;
    let targets = [
        &b.tlb_remote,
        &b.tlb_local,
        &b.ipi_sent,
        &b.context_switches,
    ];
    for (fd, target) in FDS.iter().zip(targets) {
        let fd = fd.load(Relaxed);
        if fd < 0 {
            continue;
        }
        let mut value = 0u64;
        // SAFETY: reading one u64 (read_format 0) into a valid location.
        let n = unsafe { crate::sys::read(fd, (&raw mut value).cast(), 8) };
        if n == 8 {
            target.store(value, Relaxed);
        }
    }
    let (program, handlers) = schedstat_sums();
    b.program_cpu_ns.store(program.0, Relaxed);
    b.program_run_delay_ns.store(program.1, Relaxed);
    b.handler_cpu_ns.store(handlers.0, Relaxed);
    b.handler_run_delay_ns.store(handlers.1, Relaxed);
}

/// (CPU ns, run-queue delay ns) of the program's threads and of the handler threads, summed
/// over `/proc/self/task/*/schedstat`. Threads that already exited are not counted.
fn schedstat_sums() -> ((u64, u64), (u64, u64)) {
    let mut program = (0, 0);
    let mut handlers = (0, 0);
    // SAFETY: a NUL-terminated path.
    let dir = unsafe {
        libc::open(
            c"/proc/self/task".as_ptr(),
            libc::O_RDONLY | libc::O_DIRECTORY | libc::O_CLOEXEC,
        )
    };
    if dir < 0 {
        return (program, handlers);
    }
    let mut entries = [0u8; 4096];
    loop {
        // SAFETY: getdents64 into our buffer.
        let n = unsafe {
            libc::syscall(
                libc::SYS_getdents64,
                dir,
                entries.as_mut_ptr(),
                entries.len(),
            )
        };
        if n <= 0 {
            break;
        }
        let mut offset = 0;
        while offset + 19 < n as usize {
            // struct linux_dirent64: ino u64, off i64, reclen u16, type u8, name.
            let reclen = u16::from_ne_bytes([entries[offset + 16], entries[offset + 17]]) as usize;
            if reclen == 0 {
                break;
            }
            let name = &entries[offset + 19..(offset + reclen).min(n as usize)];
            let name = &name[..name.iter().position(|&b| b == 0).unwrap_or(name.len())];
            offset += reclen;
            let Some(tid) = parse_u64(name) else { continue };
            let Some((cpu, delay)) = task_schedstat(name) else {
                continue;
            };
            let sums = if HANDLER_TIDS
                .iter()
                .any(|slot| u64::from(slot.load(Relaxed)) == tid)
            {
                &mut handlers
            } else {
                &mut program
            };
            sums.0 += cpu;
            sums.1 += delay;
        }
    }
    // SAFETY: closing our own descriptor.
    unsafe { libc::close(dir) };
    (program, handlers)
}

/// `/proc/self/task/<tid>/schedstat`: run time and run-queue delay, ns.
fn task_schedstat(tid: &[u8]) -> Option<(u64, u64)> {
    const PREFIX: &[u8] = b"/proc/self/task/";
    const SUFFIX: &[u8] = b"/schedstat\0";
    let mut path = [0u8; 64];
    if PREFIX.len() + tid.len() + SUFFIX.len() > path.len() {
        return None;
    }
    path[..PREFIX.len()].copy_from_slice(PREFIX);
    path[PREFIX.len()..PREFIX.len() + tid.len()].copy_from_slice(tid);
    path[PREFIX.len() + tid.len()..PREFIX.len() + tid.len() + SUFFIX.len()].copy_from_slice(SUFFIX);
    let path = core::ffi::CStr::from_bytes_until_nul(&path).ok()?;
    let mut buf = [0u8; 96];
    let n = read_file(path, &mut buf)?;
    let mut fields = buf[..n]
        .split(|b| b.is_ascii_whitespace())
        .filter(|f| !f.is_empty());
    Some((parse_u64(fields.next()?)?, parse_u64(fields.next()?)?))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The test's threads' schedstat reads, and they count as the program's.
    #[test]
    fn reads_own_schedstat() {
        let (program, handlers) = schedstat_sums();
        assert!(program.0 > 0, "cpu {}", program.0);
        assert_eq!(handlers, (0, 0));
    }

    #[test]
    fn parses_decimals() {
        assert_eq!(parse_u64(b"1234"), Some(1234));
        assert_eq!(parse_u64(b""), None);
        assert_eq!(parse_u64(b"12a"), None);
    }
}
