//! The C library's calls that hand memory to the kernel, and its signal calls, wrapped for
//! faults served in the faulting thread (`crate::sigbus`).
//!
//! With `UFFD_FEATURE_SIGBUS`, the kernel answers its own access to a missing or
//! write-protected page of the region with `EFAULT` instead of waiting for a handler: a
//! `read(2)` into evicted memory would fail, or stop short. So each wrapper below first holds
//! the buffers' pages of the region (`crate::pins`: no eviction takes them until the call
//! returns), touches each from user mode (the program's own fault, served in its thread and
//! recorded with its stack, as the kernel's fault would have been on the handler-thread path;
//! a page the kernel writes is touched with a write), then makes the call. A buffer larger
//! than local memory allows to hold at once is taken in pieces: a read of a regular file or a
//! write goes on piece after piece as the kernel's own call would (a short piece ends it), a
//! read of anything else returns after its first piece (a short read, as a pipe or a socket
//! may give). A datagram is never split.
//!
//! Covered, one module per kind of call: `read`, `write`, `pread`, `pwrite` and the vector
//! forms (`read_write`, their buffers taken in pieces by `pieces`); `recv`, `recvfrom`,
//! `recvmsg`, `send`, `sendto`, `sendmsg` (`sockets`); `epoll_wait` and `epoll_pwait`, `poll`,
//! `ppoll`, `select`, `pselect` (`poll`); `fread`, `fwrite` (`stdio`); the `exec` calls that
//! take arrays, `posix_spawn`, `system`, `popen` (`exec`); the waits of condition variables,
//! semaphores, barriers, read-write locks and timed mutexes (`futex_waits`: the kernel reads
//! their futex; glibc aborts on `EFAULT` there); the calls that take paths or small arguments
//! (`small_args`: `open`, the `stat` family, `pipe`, `wait4`, the socket addresses and
//! options, `getrandom`, `sigaltstack` ...). `signals` keeps SIGBUS the runtime's.
//! `ioctl` (its argument's size from the request), `recvmmsg`/`sendmmsg`, and raw `syscall(2)`
//! for the calls above, `getrandom` and `futex` (`raw`). Not covered: the other raw calls,
//! `io_uring` and `aio` (the kernel reaches their buffers later, from its own threads), an
//! `ioctl` argument that points to more memory: on memory of the region that is not resident
//! they fail with `EFAULT` on this path.
//!
//! Calls inside the C library (stdio's own reads into its buffers, `readdir`) cannot be
//! wrapped: what the C library allocates for itself is kept resident instead
//! (`crate::managed_malloc`'s pools for it).
//!
//! Nothing is done on the handler-thread path, or for memory outside the region: the kernel's
//! faults wait for a handler there.

use std::ffi::{CStr, c_char, c_int, c_void};
use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};

use crate::pins::{self, Pin};
use crate::region::{PAGE, Region};
use crate::{sigbus, sys};

mod exec;
mod futex_waits;
mod pieces;
mod poll;
// x86_64 only: `syscall`'s six arguments are taken as fixed ones, and the kernel is called
// with its own instruction (elsewhere the C library's `syscall` would be this one again).
#[cfg(target_arch = "x86_64")]
mod raw;
mod read_write;
mod signals;
mod small_args;
mod sockets;
mod stdio;

pub(crate) use signals::real_sigaction;

/// The next definition of `name` after this library (the C library's), found once.
pub(crate) fn next_fn(name: &CStr, cache: &AtomicUsize) -> usize {
    let mut f = cache.load(Relaxed);
    if f == 0 {
        // SAFETY: dlsym with a valid name; it may allocate, which goes to our allocator.
        f = unsafe { libc::dlsym(libc::RTLD_NEXT, name.as_ptr()) } as usize;
        cache.store(f, Relaxed);
    }
    f
}

/// The C library's function `$name` of type `$ty`, or `None` where it has none.
macro_rules! real {
    ($name:literal, $ty:ty) => {{
        static CACHE: ::std::sync::atomic::AtomicUsize = ::std::sync::atomic::AtomicUsize::new(0);
        let f = $crate::syscalls::next_fn($name, &CACHE);
        // SAFETY: the C library's function of that name has this type (C's declaration).
        (f != 0).then(|| unsafe { ::std::mem::transmute::<usize, $ty>(f) })
    }};
}
pub(crate) use real;

/// `ENOSYS` and -1 for a function the C library lacks.
pub(crate) fn missing() -> c_int {
    set_errno(libc::ENOSYS);
    -1
}

pub(crate) fn set_errno(code: c_int) {
    // SAFETY: the thread's errno location is always valid.
    unsafe { *libc::__errno_location() = code };
}

pub(crate) fn errno() -> c_int {
    // SAFETY: as above.
    unsafe { *libc::__errno_location() }
}

/// The region, when faults are served in the thread and `[addr, addr + len)` has pages in it.
fn region_for(addr: usize, len: usize) -> Option<&'static Region> {
    if len == 0 || !sigbus::active() {
        return None;
    }
    let region = crate::region_any()?;
    let end = addr.checked_add(len)?;
    let region_end = region.base + region.pages * PAGE;
    (region.in_thread() && region.managed() && addr < region_end && end > region.base)
        .then_some(region)
}

/// The region's pages `[first, end)` of `[addr, addr + len)`, if any.
fn pages_of(region: &Region, addr: usize, len: usize) -> Option<(usize, usize)> {
    let region_end = region.base + region.pages * PAGE;
    let start = addr.max(region.base);
    let end = addr.saturating_add(len).min(region_end);
    (len > 0 && start < end).then(|| (region.page_index(start), region.page_index(end - 1) + 1))
}

/// A buffer of a call: the kernel reads it, or (`writes`) writes it.
#[derive(Clone, Copy)]
pub(crate) struct Buf {
    addr: usize,
    len: usize,
    writes: bool,
}

impl Buf {
    pub(crate) fn read(addr: *const c_void, len: usize) -> Buf {
        Buf {
            addr: addr as usize,
            len,
            writes: false,
        }
    }

    pub(crate) fn written(addr: *mut c_void, len: usize) -> Buf {
        Buf {
            addr: addr as usize,
            len,
            writes: true,
        }
    }
}

/// Most page ranges a call holds apart; beyond them neighbouring ones are merged.
const RANGES: usize = 8;

/// The buffers of one call, held: their pages stay resident until this is dropped.
struct Held {
    pins: [Option<Pin>; RANGES],
}

/// Page ranges of a call's buffers, merged where they touch.
struct Ranges {
    ranges: [(usize, usize); RANGES],
    len: usize,
}

impl Ranges {
    fn new() -> Ranges {
        Ranges {
            ranges: [(0, 0); RANGES],
            len: 0,
        }
    }

    fn add(&mut self, (first, end): (usize, usize)) {
        for range in &mut self.ranges[..self.len] {
            if first <= range.1 && end >= range.0 {
                *range = (range.0.min(first), range.1.max(end));
                return;
            }
        }
        if self.len == RANGES {
            // Full: merged into the nearest (more pages held, never fewer).
            let nearest = (0..RANGES)
                .min_by_key(|&i| {
                    let (a, b) = self.ranges[i];
                    if end <= a {
                        a - end
                    } else {
                        first.saturating_sub(b)
                    }
                })
                .unwrap_or(0);
            let range = &mut self.ranges[nearest];
            *range = (range.0.min(first), range.1.max(end));
            return;
        }
        self.ranges[self.len] = (first, end);
        self.len += 1;
    }
}

/// Holds `bufs` for a call: pins their pages of the region, waits for evictions of them
/// already under way, and touches each page (with a write where the kernel writes).
fn hold(region: &Region, bufs: &[Buf]) -> Held {
    let mut ranges = Ranges::new();
    for buf in bufs {
        if let Some(pages) = pages_of(region, buf.addr, buf.len) {
            ranges.add(pages);
        }
    }
    let tid = sys::gettid();
    let mut held = Held {
        pins: [const { None }; RANGES],
    };
    let mut brought = 0u64;
    for (slot, &(first, end)) in ranges.ranges[..ranges.len].iter().enumerate() {
        held.pins[slot] = Some(pins::pin(tid, first, end));
        for idx in first..end {
            brought += u64::from(!region.settle(idx));
        }
    }
    for buf in bufs {
        let Some((first, end)) = pages_of(region, buf.addr, buf.len) else {
            continue;
        };
        for idx in first..end {
            let page = region.base + idx * PAGE;
            touch(page.max(buf.addr), buf.writes);
        }
    }
    let breakdown = &region.shared().breakdown;
    breakdown.syscalls_prepared.fetch_add(1, Relaxed);
    breakdown.syscall_faults.fetch_add(brought, Relaxed);
    held
}

/// One access to the byte at `addr` from user mode: a fault if its page is missing (or, for
/// a write, write-protected), served in this thread.
pub(crate) fn touch(addr: usize, write: bool) {
    if write {
        // A locked add of zero: a write to the hardware (it faults on a write-protected
        // page) that changes nothing, even beside another thread's writes. In assembly: the
        // compiler may turn an atomic add of zero into a load.
        #[cfg(target_arch = "x86_64")]
        // SAFETY: `addr` is a byte of the caller's buffer, mapped read-write.
        unsafe {
            std::arch::asm!("lock add byte ptr [{0}], 0", in(reg) addr, options(nostack))
        };
        #[cfg(not(target_arch = "x86_64"))]
        {
            // SAFETY: as above; a compare-exchange writes the byte back.
            let byte = unsafe { &*(addr as *const std::sync::atomic::AtomicU8) };
            let value = byte.load(Relaxed);
            let _ = byte.compare_exchange(value, value, Relaxed, Relaxed);
        }
    } else {
        // SAFETY: a byte of the caller's buffer, mapped readable.
        unsafe { std::ptr::read_volatile(addr as *const u8) };
    }
}

/// A call whose buffers are all held at once (small ones, or those that cannot be split).
pub(crate) fn held_call<R>(region: Option<&Region>, bufs: &[Buf], call: impl FnOnce() -> R) -> R {
    let held = region.map(|region| hold(region, bufs));
    let result = call();
    let saved = errno();
    drop(held);
    set_errno(saved);
    result
}

/// The region if any of `bufs` has pages in it.
pub(crate) fn region_of(bufs: &[Buf]) -> Option<&'static Region> {
    bufs.iter().find_map(|b| region_for(b.addr, b.len))
}

/// Adds a string's bytes (with its NUL) to `bufs`.
pub(crate) fn string_buf(s: *const c_char) -> Buf {
    if s.is_null() || !sigbus::active() {
        return Buf::read(std::ptr::null(), 0);
    }
    // SAFETY: C's contract: a NUL-terminated string (reading it may fault, in this thread).
    let len = unsafe { CStr::from_ptr(s) }.to_bytes_with_nul().len();
    Buf::read(s.cast(), len)
}
