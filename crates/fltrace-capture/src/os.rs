//! The clocks and the system calls of capture, each behind a safe function: through rustix
//! where it has a wrapper, libc where it has none (said at each such call). Every wait on a
//! child is [`reap`].

use std::io;
use std::os::fd::{AsFd, BorrowedFd, IntoRawFd as _, OwnedFd, RawFd};
use std::os::unix::process::ExitStatusExt as _;
use std::process::ExitStatus;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use rustix::event::{PollFd, PollFlags, Timespec};
use rustix::pipe::PipeFlags;
use rustix::process::{Pid, PidfdFlags, Signal};
use rustix::time::{ClockId, clock_gettime};

use crate::perf_abi::PerfEvent;

/// Now on the wall clock, ns since the Unix epoch: the trace's times.
pub(crate) fn unix_now_ns() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64)
}

/// Now on CLOCK_MONOTONIC, the clock of perf samples and tracepoint events, in ns.
pub fn monotonic_now_ns() -> u64 {
    let ts = clock_gettime(ClockId::Monotonic);
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// Time since boot, suspend included (CLOCK_BOOTTIME, the clock of process start times).
pub fn since_boot() -> std::time::Duration {
    let ts = clock_gettime(ClockId::Boottime);
    std::time::Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
}

/// Reads `buf.len()` bytes of process `pid`'s memory at `addr` into `buf`: the bytes read,
/// 0 when the range cannot be read (not mapped, the process gone). Capture's one reader of
/// another process's memory: the unwinder's live stack and GOT slots, the uprobe reader's
/// words.
#[expect(
    clippy::disallowed_methods,
    reason = "capture's one process_vm_readv (rustix has no wrapper)"
)]
pub(crate) fn read_process_memory(pid: i32, addr: u64, buf: &mut [u8]) -> usize {
    let local = libc::iovec {
        iov_base: buf.as_mut_ptr().cast(),
        iov_len: buf.len(),
    };
    let remote = libc::iovec {
        iov_base: addr as *mut libc::c_void,
        iov_len: buf.len(),
    };
    // SAFETY: `local` describes `buf`, ours and writable for its whole length; the kernel
    // checks the remote range and returns an error if it is not mapped.
    let n = unsafe { libc::process_vm_readv(pid, &local, 1, &remote, 1, 0) };
    usize::try_from(n).unwrap_or(0)
}

/// CPU time (user and system) the recorder has used so far, all its threads, ns: the
/// process's CPU clock, the sum getrusage's user and system times are scaled to.
pub(crate) fn cpu_time_ns() -> u64 {
    let ts = clock_gettime(ClockId::ProcessCPUTime);
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// Runs the recorder ahead of the traced program in the scheduler, when allowed (root): a
/// recorder that falls behind loses records.
pub(super) fn become_urgent() {
    // Not allowed (not root): the recorder runs at its usual priority.
    let _ = rustix::process::setpriority_process(None, -10);
}

/// A process id for rustix: `None` for 0 and below, which name no single process (and
/// which rustix's `Pid::from_raw` asserts against).
pub(crate) fn as_pid(raw: i32) -> Option<Pid> {
    if raw > 0 { Pid::from_raw(raw) } else { None }
}

/// Sends `signal` to process `pid`: a command fltrace started and has not reaped yet.
/// Fails only when it is gone, which the caller learns by reaping it.
pub(crate) fn signal_process(pid: i32, signal: Signal) {
    if let Some(pid) = as_pid(pid) {
        let _ = rustix::process::kill_process(pid, signal);
    }
}

/// Sends `signal` to every process of group `pgid`; the group may be gone already.
pub(crate) fn signal_group(pgid: i32, signal: Signal) {
    if let Some(pgid) = as_pid(pgid) {
        let _ = rustix::process::kill_process_group(pgid, signal);
    }
}

/// Whether process `pid` exists (a zombie does).
pub(super) fn process_alive(pid: i32) -> bool {
    // Signal 0 only checks for existence; EPERM says it exists as another user's.
    as_pid(pid).is_some_and(|pid| {
        !matches!(
            rustix::process::test_kill_process(pid),
            Err(rustix::io::Errno::SRCH)
        )
    })
}

/// A descriptor of process `pid` that becomes readable when it exits (`None` when the
/// kernel lacks pidfds or the process is gone).
pub(super) fn pidfd_open(pid: i32) -> Option<OwnedFd> {
    rustix::process::pidfd_open(as_pid(pid)?, PidfdFlags::empty()).ok()
}

/// How a child fltrace started ended, once reaped.
#[derive(Debug, Clone, Copy)]
pub struct Reaped {
    /// Its exit code, or the signal that killed it.
    pub status: ExitStatus,
    /// Its peak resident memory, bytes.
    pub peak_rss: u64,
    /// The CPU time it and its reaped children spent in user mode.
    pub user_cpu: Duration,
    /// The CPU time it and its reaped children spent in the kernel.
    pub system_cpu: Duration,
}

/// Reaps child `pid`: waits for its end (`block`), or only looks whether it ended (`None`
/// when not yet). Every wait on a child of capture (and of the experiment's runs) is this one,
/// interruptions (EINTR) retried here.
#[expect(
    clippy::disallowed_methods,
    reason = "capture's one wait4 (rustix's waitpid gives no resource usage)"
)]
pub fn reap(pid: i32, block: bool) -> io::Result<Option<Reaped>> {
    let flags = if block { 0 } else { libc::WNOHANG };
    loop {
        let mut status = 0;
        // SAFETY: rusage is plain data for the kernel to fill.
        let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
        // libc: rustix's waitpid does not give the child's resource usage (peak memory).
        // SAFETY: waiting for our own child with valid out-pointers.
        let ret = unsafe { libc::wait4(pid, &mut status, flags, &mut usage) };
        if ret == pid {
            let time = |t: libc::timeval| {
                Duration::from_secs(t.tv_sec.max(0) as u64)
                    + Duration::from_micros(t.tv_usec.max(0) as u64)
            };
            return Ok(Some(Reaped {
                status: ExitStatus::from_raw(status),
                peak_rss: usage.ru_maxrss.max(0) as u64 * 1024,
                user_cpu: time(usage.ru_utime),
                system_cpu: time(usage.ru_stime),
            }));
        }
        if ret == 0 {
            return Ok(None);
        }
        let error = io::Error::last_os_error();
        if error.kind() != io::ErrorKind::Interrupted {
            return Err(error);
        }
    }
}

/// Kills child `pid` (SIGKILL) and reaps it: a command abandoned on an early exit.
pub(crate) fn kill_and_reap(pid: i32) {
    signal_process(pid, Signal::KILL);
    // Fails only if it was reaped already: nothing is left either way.
    let _ = reap(pid, true);
}

/// Waits up to `timeout_ms` for the program to end (its pidfd readable), or just sleeps.
pub(super) fn wait_for_exit(pidfd: Option<&OwnedFd>, timeout_ms: i32) {
    match pidfd {
        Some(fd) => {
            poll_readable(&[fd.as_fd()], timeout_ms);
        }
        None => std::thread::sleep(Duration::from_millis(timeout_ms as u64)),
    }
}

/// Waits until a ring buffer has data (the perf events' or the BPF ring `bpf_ring`), the
/// target exits (`pidfd`) or the timeout passes.
///
/// An event whose task is gone reports `POLLHUP` at once on every poll from then on: left
/// as it is, the recorder would spin on a CPU from its root's exit until the root can be
/// reaped, the time its address space takes to go (a tenth of a second with a large
/// allocation log), which the drain needs. Such events are marked in `hung_up` and left out
/// of later waits; their rings (children of that task may still write to them) are read at
/// least every [`HUNG_UP_POLL_MS`].
pub(super) fn poll_rings(
    events: &[PerfEvent],
    hung_up: &mut [bool],
    bpf_ring: Option<std::os::fd::RawFd>,
    pidfd: Option<&OwnedFd>,
    timeout_ms: i32,
) {
    // SAFETY: the BPF ring's descriptor stays open while the recording polls it.
    let ring = bpf_ring.map(|fd| unsafe { BorrowedFd::borrow_raw(fd) });
    let polled: Vec<usize> = (0..events.len())
        .filter(|&i| !hung_up.get(i).copied().unwrap_or(false))
        .collect();
    let fds: Vec<BorrowedFd<'_>> = polled
        .iter()
        .map(|&i| events[i].fd().as_fd())
        .chain(ring)
        .chain(pidfd.map(AsFd::as_fd))
        .collect();
    let timeout_ms = if polled.len() < events.len() {
        timeout_ms.min(HUNG_UP_POLL_MS)
    } else {
        timeout_ms
    };
    let revents = poll_readable(&fds, timeout_ms);
    for (&i, flags) in polled.iter().zip(revents) {
        if flags.contains(PollFlags::HUP)
            && let Some(mark) = hung_up.get_mut(i)
        {
            *mark = true;
        }
    }
}

/// How long a wait lasts at most once some perf events' tasks are gone (see [`poll_rings`]).
pub(super) const HUNG_UP_POLL_MS: i32 = 5;

/// Waits until one of `fds` is readable or `timeout_ms` passes; an interruption (a signal
/// to stop) ends the wait early, which the callers' loops expect. What each descriptor
/// reported, in their order.
fn poll_readable(fds: &[BorrowedFd<'_>], timeout_ms: i32) -> Vec<PollFlags> {
    let mut pollfds: Vec<PollFd<'_>> = fds
        .iter()
        .map(|fd| PollFd::new(fd, PollFlags::IN))
        .collect();
    let timeout = Timespec {
        tv_sec: i64::from(timeout_ms / 1000),
        tv_nsec: i64::from(timeout_ms % 1000) * 1_000_000,
    };
    let _ = rustix::event::poll(&mut pollfds, Some(&timeout));
    pollfds.iter().map(PollFd::revents).collect()
}

/// A pipe whose ends close on exec: (read end, write end).
pub(crate) fn pipe_cloexec() -> io::Result<(OwnedFd, OwnedFd)> {
    Ok(rustix::pipe::pipe_with(PipeFlags::CLOEXEC)?)
}

/// [`pipe_cloexec`] as raw descriptors, for code around a fork that closes them itself
/// (the child of a threaded process may not run destructors); None on failure.
pub(crate) fn raw_pipe_cloexec() -> Option<(RawFd, RawFd)> {
    let (read, write) = pipe_cloexec().ok()?;
    Some((read.into_raw_fd(), write.into_raw_fd()))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A running `sh -c script`, left for the test to reap.
    fn spawn(script: &str) -> i32 {
        crate::target::PendingChild::spawn(&["sh".into(), "-c".into(), script.into()], None, &[])
            .and_then(crate::target::PendingChild::release)
            .expect("starting sh")
    }

    /// The status is decoded once: an exit code, or the signal that killed the child; a
    /// look at a child still running reaps nothing.
    #[test]
    fn reap_gives_the_exit_code_or_the_signal() {
        let exited = spawn("exit 3");
        let reaped = reap(exited, true).expect("waiting").expect("a status");
        assert_eq!(
            (reaped.status.code(), reaped.status.signal()),
            (Some(3), None)
        );
        assert!(reaped.peak_rss > 0);

        let running = spawn("sleep 60");
        assert!(reap(running, false).expect("looking").is_none());
        assert!(process_alive(running));
        signal_process(running, Signal::KILL);
        let reaped = reap(running, true).expect("waiting").expect("a status");
        assert_eq!(
            (reaped.status.code(), reaped.status.signal()),
            (None, Some(libc::SIGKILL))
        );
        assert!(!process_alive(running));
        assert_eq!(
            reap(running, false)
                .expect_err("reaped already")
                .raw_os_error(),
            Some(libc::ECHILD)
        );
    }

    /// A perf event whose task is gone (`POLLHUP` on every poll from then on) is marked and
    /// left out of the next waits; one whose task runs is not.
    #[test]
    fn events_of_tasks_gone_are_left_out_of_the_wait() {
        let child = spawn("sleep 60");
        let event = PerfEvent::open(&crate::perf_abi::sideband_attr(8), child, 0)
            .expect("a perf event on the child");
        // Without a ring an event reports POLLHUP all along; the recorder maps one for each.
        let _ring = crate::ring::RingBuffer::map(&event, 1).expect("its ring");
        let events = [event];
        let mut hung_up = [false];
        poll_rings(&events, &mut hung_up, None, None, 0);
        assert_eq!(hung_up, [false], "the child still runs");
        signal_process(child, Signal::KILL);
        reap(child, true).expect("waiting").expect("a status");
        poll_rings(&events, &mut hung_up, None, None, 1000);
        assert_eq!(hung_up, [true], "the child is gone");
        // Nothing left to wait on but the time: the shorter one.
        poll_rings(&events, &mut hung_up, None, None, 60_000);
        assert_eq!(hung_up, [true]);
    }

    /// 0 and negative ids (a group, every process) never reach a call meant for one process.
    #[test]
    fn only_positive_ids_are_processes() {
        assert!(as_pid(0).is_none() && as_pid(-1).is_none());
        assert!(!process_alive(0) && !process_alive(-1));
        assert_eq!(as_pid(1).map(Pid::as_raw_nonzero).map(|p| p.get()), Some(1));
    }
}
