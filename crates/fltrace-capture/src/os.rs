//! The clocks and the system calls of capture, each behind a safe function.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::sys::PerfEvent;

/// Now on the wall clock, ns since the Unix epoch: the trace's times.
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

/// CPU time (user and system) the recorder has used so far, all its threads, ns.
pub(crate) fn cpu_time_ns() -> u64 {
    // SAFETY: getrusage fills the struct it is given.
    let usage = unsafe {
        let mut usage: libc::rusage = std::mem::zeroed();
        libc::getrusage(libc::RUSAGE_SELF, &mut usage);
        usage
    };
    let ns = |t: libc::timeval| t.tv_sec as u64 * 1_000_000_000 + t.tv_usec as u64 * 1000;
    ns(usage.ru_utime) + ns(usage.ru_stime)
}

/// Runs the recorder ahead of the traced program in the scheduler, when allowed (root): a
/// recorder that falls behind loses records.
pub(super) fn become_urgent() {
    // SAFETY: setpriority on our own process; failure (not root) is harmless.
    unsafe { libc::setpriority(libc::PRIO_PROCESS, 0, -10) };
}

/// Sends `signal` to the command fltrace started (and has not reaped yet).
pub(super) fn signal_child(pid: i32, signal: i32) {
    // SAFETY: signalling our own child.
    unsafe {
        libc::kill(pid, signal);
    }
}

/// Whether process `pid` exists (a zombie does).
pub(super) fn process_alive(pid: i32) -> bool {
    // SAFETY: signal 0 only checks for existence.
    unsafe { libc::kill(pid, 0) == 0 || *libc::__errno_location() != libc::ESRCH }
}

/// A descriptor of process `pid` that becomes readable when it exits (`None` when the
/// kernel lacks pidfds or the process is gone).
pub(super) fn pidfd_open(pid: i32) -> Option<OwnedFd> {
    // SAFETY: pidfd_open takes a pid and flags and returns a new descriptor or -1.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) };
    // SAFETY: a non-negative return is a descriptor nothing else owns.
    (fd >= 0).then(|| unsafe { OwnedFd::from_raw_fd(fd as i32) })
}

/// Reaps child `pid` if it ended: its wait status and its peak resident memory, bytes.
pub(super) fn try_wait(pid: i32) -> Option<(i32, u64)> {
    let mut status = 0;
    // SAFETY: rusage is plain data for the kernel to fill.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: waiting for our own child with valid out-pointers.
    let ret = unsafe { libc::wait4(pid, &mut status, libc::WNOHANG, &mut usage) };
    (ret == pid).then(|| (status, usage.ru_maxrss as u64 * 1024))
}

/// Waits up to `timeout_ms` for the program to end (its pidfd readable), or just sleeps.
pub(super) fn wait_for_exit(pidfd: Option<&OwnedFd>, timeout_ms: i32) {
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

/// Waits until a ring buffer has data, the target exits (`pidfd`) or the timeout passes.
pub(super) fn poll_rings(events: &[PerfEvent], pidfd: Option<&OwnedFd>, timeout_ms: i32) {
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

/// A pipe whose ends close on exec: (read end, write end).
pub(crate) fn pipe_cloexec() -> io::Result<(i32, i32)> {
    let mut fds = [0; 2];
    // SAFETY: `fds` is a valid array of two ints for the kernel to fill.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok((fds[0], fds[1]))
}

pub(crate) fn close(fd: i32) {
    // SAFETY: closing a descriptor we own; errors on close of a pipe end are irrelevant.
    unsafe { libc::close(fd) };
}
