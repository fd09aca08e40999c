//! The few raw system calls the runtime makes. They go straight to the kernel: the runtime
//! interposes `mmap` and friends itself, so it must not call back into its own wrappers.

/// The raw `mmap` system call; null on failure.
///
/// # Safety
/// As `mmap(2)`: with `MAP_FIXED`, `addr..addr + len` must be the caller's to replace.
pub unsafe fn map(
    addr: usize,
    len: usize,
    prot: i32,
    flags: i32,
    fd: i32,
    offset: usize,
) -> *mut u8 {
    // SAFETY: guaranteed by the caller; the kernel validates the rest.
    let p = unsafe { libc::syscall(libc::SYS_mmap, addr, len, prot, flags, fd, offset) };
    if p < 0 {
        std::ptr::null_mut()
    } else {
        p as *mut u8
    }
}

/// `mmap` of fresh anonymous memory that the runtime does not manage (metadata, the region
/// itself before registration). Returns null on failure.
pub fn map_anonymous(len: usize, extra_flags: i32) -> *mut u8 {
    let flags = libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | extra_flags;
    // SAFETY: an anonymous private mapping with no address hint has no preconditions.
    unsafe { map(0, len, libc::PROT_READ | libc::PROT_WRITE, flags, -1, 0) }
}

/// CLOCK_MONOTONIC in ns through the system call, not the vDSO: the vDSO's first read faults
/// its data page in, a fault the trace would show at the program's call that got here. Kept
/// apart from [`monotonic_ns_vdso`] for the reads made before the program has touched the
/// vDSO (the allocation log's birth time, read as the library loads).
pub fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: a valid out-pointer on our stack.
    unsafe { libc::syscall(libc::SYS_clock_gettime, libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// CLOCK_MONOTONIC in ns through the vDSO (no system call, about 20 ns): the clock of the
/// handler's timings, the fault log's rows and the tracer's exact times, read where the vDSO's
/// page is long resident. The one `clock_gettime` call of the library: it cannot use
/// capture's clock (the library links no crate that allocates), and the system call beside it
/// ([`monotonic_ns`]) avoids the vDSO where a first read must not fault its page in.
#[expect(
    clippy::disallowed_methods,
    reason = "the preload library's one vDSO clock read; it stays apart from capture's"
)]
pub fn monotonic_ns_vdso() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: a valid out-pointer.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// A pipe whose ends close on exec, into `fds` (read end, write end); false on failure.
/// The library's one `pipe2` call.
#[expect(
    clippy::disallowed_methods,
    reason = "the library's one pipe2; it cannot use rustix (it stays lean)"
)]
pub fn pipe_cloexec(fds: &mut [i32; 2]) -> bool {
    // SAFETY: a pipe into a two-element array.
    unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) == 0 }
}

/// The raw `madvise` system call.
pub fn madvise(addr: usize, len: usize, advice: i32) -> i64 {
    // SAFETY: madvise validates the range; callers pass ranges of the runtime's region.
    unsafe { libc::syscall(libc::SYS_madvise, addr, len, advice) }
}

/// `rt_sigprocmask` straight to the kernel (the runtime interposes the C library's mask
/// calls); the old mask in `old` when given.
pub fn sigprocmask(how: i32, set: Option<&libc::sigset_t>, old: Option<&mut libc::sigset_t>) {
    let set = set.map_or(std::ptr::null(), |s| s as *const libc::sigset_t);
    let old = old.map_or(std::ptr::null_mut(), |o| o as *mut libc::sigset_t);
    // SAFETY: valid or null pointers to signal sets; 8 bytes is the kernel's sigset size.
    unsafe { libc::syscall(libc::SYS_rt_sigprocmask, how, set, old, 8) };
}

/// Every signal of the calling thread blocked while this lives, its mask restored after.
pub struct SignalsBlocked {
    old: libc::sigset_t,
}

impl SignalsBlocked {
    /// Blocks every signal (the kernel leaves SIGKILL and SIGSTOP alone).
    pub fn all() -> SignalsBlocked {
        // SAFETY: sigset_t is plain data; sigfillset initialises it.
        let mut all: libc::sigset_t = unsafe { std::mem::zeroed() };
        // SAFETY: a valid set.
        unsafe { libc::sigfillset(&mut all) };
        // SAFETY: as above.
        let mut old: libc::sigset_t = unsafe { std::mem::zeroed() };
        sigprocmask(libc::SIG_BLOCK, Some(&all), Some(&mut old));
        SignalsBlocked { old }
    }

    /// The mask before.
    pub fn old(&self) -> &libc::sigset_t {
        &self.old
    }
}

impl Drop for SignalsBlocked {
    fn drop(&mut self) {
        sigprocmask(libc::SIG_SETMASK, Some(&self.old), None);
    }
}

/// The raw `write` system call (the runtime interposes the C library's).
pub fn write(fd: i32, bytes: &[u8]) -> isize {
    // SAFETY: writing from a valid slice.
    unsafe { libc::syscall(libc::SYS_write, fd, bytes.as_ptr(), bytes.len()) as isize }
}

/// The raw `read` system call (the runtime interposes the C library's).
///
/// # Safety
/// `buf` must be valid for `len` bytes of writes.
pub unsafe fn read(fd: i32, buf: *mut u8, len: usize) -> isize {
    // SAFETY: guaranteed by the caller.
    unsafe { libc::syscall(libc::SYS_read, fd, buf, len) as isize }
}

/// The calling thread's id.
pub fn gettid() -> u32 {
    // SAFETY: gettid has no preconditions.
    unsafe { libc::syscall(libc::SYS_gettid) as u32 }
}

/// Writes a message to standard error without allocating.
pub fn write_stderr(parts: &[&[u8]]) {
    for part in parts {
        // A short or failed write to stderr is ignored.
        write(2, part);
    }
}

/// Formats `value` in decimal into `buf`, returning the digits.
pub fn decimal(mut value: u64, buf: &mut [u8; 20]) -> &[u8] {
    let mut i = buf.len();
    loop {
        i -= 1;
        buf[i] = b'0' + (value % 10) as u8;
        value /= 10;
        if value == 0 || i == 0 {
            break;
        }
    }
    &buf[i..]
}

/// Reads a decimal environment variable without allocating.
pub fn env_u64(name: &core::ffi::CStr) -> Option<u64> {
    // SAFETY: getenv with a valid C string; the result is a C string or null.
    let value = unsafe { libc::getenv(name.as_ptr()) };
    if value.is_null() {
        return None;
    }
    // SAFETY: getenv returned a NUL-terminated string that lives while the environment does.
    let bytes = unsafe { core::ffi::CStr::from_ptr(value) }.to_bytes();
    let mut n: u64 = 0;
    for &b in bytes {
        if !b.is_ascii_digit() {
            return None;
        }
        n = n.checked_mul(10)?.checked_add(u64::from(b - b'0'))?;
    }
    (!bytes.is_empty()).then_some(n)
}

/// An environment variable's bytes, without allocating.
pub fn env_bytes(name: &core::ffi::CStr) -> Option<&'static [u8]> {
    // SAFETY: as in `env_u64`; the environment outlives the runtime's use of it at start-up.
    let value = unsafe { libc::getenv(name.as_ptr()) };
    // SAFETY: non-null getenv results are NUL-terminated strings.
    (!value.is_null()).then(|| unsafe { core::ffi::CStr::from_ptr(value) }.to_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Decimal formatting without allocation.
    #[test]
    fn formats_decimals() {
        let mut buf = [0; 20];
        assert_eq!(decimal(0, &mut buf), b"0");
        assert_eq!(decimal(1234567, &mut buf), b"1234567");
        assert_eq!(decimal(u64::MAX, &mut buf), b"18446744073709551615");
    }
}
