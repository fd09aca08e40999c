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
//! Covered: `read`, `write`, `pread`, `pwrite`, the vector forms, `recv`, `recvfrom`,
//! `recvmsg`, `send`, `sendto`, `sendmsg`, `epoll_wait` and `epoll_pwait`, `poll`, `ppoll`,
//! `select`, `pselect`, `fread`, `fwrite`, the `exec` calls that take arrays, `posix_spawn`,
//! `system`, `popen`, and the waits of condition variables, semaphores, barriers, read-write
//! locks and timed mutexes (whose futex the kernel reads; glibc aborts on `EFAULT` there);
//! in `crate::syscall_args`, the calls that take paths or small arguments (`open`, the `stat`
//! family, `pipe`, `wait4`, the socket addresses and options, `getrandom`, `sigaltstack` ...).
//! Not covered: raw `syscall(2)`, `ioctl`, `recvmmsg`/`sendmmsg`, `io_uring`: on memory of the
//! region that is not resident they fail with `EFAULT` on this path.
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

/// The C library's `sigaction`.
pub fn real_sigaction(sig: c_int, act: *const libc::sigaction, old: *mut libc::sigaction) -> c_int {
    match real!(
        c"sigaction",
        unsafe extern "C" fn(c_int, *const libc::sigaction, *mut libc::sigaction) -> c_int
    ) {
        // SAFETY: C's contract, passed on.
        Some(f) => unsafe { f(sig, act, old) },
        None => missing(),
    }
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

/// Whether a call that read a whole piece goes on with the next.
#[derive(Clone, Copy)]
enum More {
    /// Never: a read of a pipe, a socket, a terminal returns what the first piece got.
    Never,
    /// While pieces are whole: a write, or a read of a regular file.
    WhileWhole,
    /// As `WhileWhole` if `fd` is a regular file or a block device, else `Never` (asked
    /// only when a second piece is wanted).
    IfFile(c_int),
}

fn is_file(fd: c_int) -> bool {
    // SAFETY: stat is plain data; fstat fills it.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: a valid out-pointer; a bad descriptor fails.
    (unsafe { libc::syscall(libc::SYS_fstat, fd, &mut st) } == 0)
        && matches!(st.st_mode & libc::S_IFMT, libc::S_IFREG | libc::S_IFBLK)
}

/// Whether a read of `fd` that stopped `done` bytes in (a call at file offset `at`, or at the
/// descriptor's own offset) had more to give: the kernel stopped short of data it had, so a
/// missing page of the buffer stopped it. A regular file has more while its size is beyond
/// the offset; anything else while it is readable now.
fn more_to_read(fd: c_int, at: Option<i64>, done: usize) -> bool {
    // SAFETY: stat is plain data; fstat fills it.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: a valid out-pointer; a bad descriptor fails.
    if unsafe { libc::syscall(libc::SYS_fstat, fd, &mut st) } != 0 {
        return false;
    }
    match st.st_mode & libc::S_IFMT {
        libc::S_IFREG => {
            let position = match at {
                Some(offset) => offset.saturating_add(done as i64),
                // SAFETY: lseek with SEEK_CUR only reads the offset.
                None => unsafe { libc::syscall(libc::SYS_lseek, fd, 0, libc::SEEK_CUR) },
            };
            position >= 0 && position < st.st_size
        }
        libc::S_IFBLK => true,
        _ => readable_now(fd),
    }
}

/// Whether `fd` has data to read now (a read would not block).
fn readable_now(fd: c_int) -> bool {
    let mut pfd = libc::pollfd {
        fd,
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: one valid pollfd; straight to the kernel (this library wraps poll).
    (unsafe { libc::syscall(libc::SYS_poll, &mut pfd, 1, 0) } > 0)
        && pfd.revents & libc::POLLIN != 0
}

/// Most pieces of a vector passed at once.
const PIECE_IOVS: usize = 64;

/// Most pages looked at after a call stopped short: a chunk the kernel copies at once (a
/// socket buffer's, a file page's) fails whole when any page of it is missing.
const TOUCH_AHEAD: usize = 16;

/// The data of a call: one buffer, or a vector's buffers, as one run of bytes.
#[derive(Clone, Copy)]
enum Data<'a> {
    One(usize, usize),
    Vector(&'a [libc::iovec]),
}

impl Data<'_> {
    fn len(&self) -> usize {
        match self {
            Data::One(_, len) => *len,
            Data::Vector(iovs) => iovs.iter().map(|v| v.iov_len).sum(),
        }
    }

    /// The buffers of bytes `[from, to)`: at most [`PIECE_IOVS`], with where they end
    /// (short of `to` when more would be needed).
    fn segments(
        &self,
        from: usize,
        to: usize,
        out: &mut [libc::iovec; PIECE_IOVS],
    ) -> (usize, usize) {
        match *self {
            Data::One(addr, _) => {
                out[0] = libc::iovec {
                    iov_base: (addr + from) as *mut c_void,
                    iov_len: to - from,
                };
                (1, to)
            }
            Data::Vector(iovs) => {
                let (mut n, mut at) = (0, 0usize);
                for v in iovs {
                    let (start, end) = (at, at + v.iov_len);
                    at = end;
                    if end <= from || v.iov_len == 0 {
                        continue;
                    }
                    if start >= to || n == PIECE_IOVS {
                        return (n, start.min(to));
                    }
                    let skip = from.saturating_sub(start);
                    out[n] = libc::iovec {
                        iov_base: (v.iov_base as usize + skip) as *mut c_void,
                        iov_len: end.min(to) - start - skip,
                    };
                    n += 1;
                }
                (n, to)
            }
        }
    }

    /// The address of byte `offset` and how many bytes follow it in its buffer.
    fn at(&self, offset: usize) -> Option<(usize, usize)> {
        match *self {
            Data::One(addr, len) => (offset < len).then(|| (addr + offset, len - offset)),
            Data::Vector(iovs) => {
                let mut at = 0;
                for v in iovs {
                    if offset < at + v.iov_len {
                        return Some((v.iov_base as usize + offset - at, at + v.iov_len - offset));
                    }
                    at += v.iov_len;
                }
                None
            }
        }
    }
}

/// Where the piece from byte `from` ends: its pages of the region within what may be held
/// now, its buffers within [`PIECE_IOVS`].
fn piece_end(region: &Region, data: &Data, from: usize, total: usize) -> usize {
    let mut segs = [libc::iovec {
        iov_base: std::ptr::null_mut(),
        iov_len: 0,
    }; PIECE_IOVS];
    let (n, end) = data.segments(from, total, &mut segs);
    let pages = |v: &libc::iovec| {
        pages_of(region, v.iov_base as usize, v.iov_len).map_or(0, |(a, b)| b - a)
    };
    let wanted: usize = segs[..n].iter().map(pages).sum();
    let mut budget = pins::grant(wanted);
    if budget >= wanted {
        return end;
    }
    let mut at = from;
    for v in &segs[..n] {
        let (addr, len) = (v.iov_base as usize, v.iov_len);
        let Some((first, last)) = pages_of(region, addr, len) else {
            at += len;
            continue;
        };
        if last - first <= budget {
            budget -= last - first;
            at += len;
            continue;
        }
        let cut = (region.base + (first + budget) * PAGE)
            .saturating_sub(addr)
            .min(len);
        return (at + cut).max(from + 1);
    }
    at.max(from + 1)
}

/// Holds (pins, without touching) the region's pages of bytes `[from, to)`.
fn pin_data(region: &Region, data: &Data, from: usize, to: usize, tid: u32) -> Held {
    let mut segs = [libc::iovec {
        iov_base: std::ptr::null_mut(),
        iov_len: 0,
    }; PIECE_IOVS];
    let (n, _) = data.segments(from, to, &mut segs);
    let mut ranges = Ranges::new();
    for v in &segs[..n] {
        if let Some(pages) = pages_of(region, v.iov_base as usize, v.iov_len) {
            ranges.add(pages);
        }
    }
    let mut held = Held {
        pins: [const { None }; RANGES],
    };
    for (slot, &(first, end)) in ranges.ranges[..ranges.len].iter().enumerate() {
        held.pins[slot] = Some(pins::pin(tid, first, end));
        for idx in first..end {
            region.settle(idx);
        }
    }
    held
}

/// After a call stopped short at byte `from` (or failed with `EFAULT`): touches the pages
/// from there on, at most [`TOUCH_AHEAD`], until one is a fault, served in this thread.
/// Whether one was: then a missing (or write-protected) page stopped the kernel, and the call
/// goes on; else the call's result is the kernel's own.
fn touch_ahead(
    region: &Region,
    data: &Data,
    from: usize,
    to: usize,
    writes: bool,
    tid: u32,
) -> bool {
    let before = sigbus::served(tid);
    let (mut offset, mut looked) = (from, 0);
    while offset < to && looked < TOUCH_AHEAD {
        let Some((addr, contiguous)) = data.at(offset) else {
            break;
        };
        if region.contains(addr) {
            touch(addr, writes);
            looked += 1;
            if sigbus::served(tid) != before {
                region
                    .shared()
                    .breakdown
                    .syscall_faults
                    .fetch_add(1, Relaxed);
                return true;
            }
        }
        offset += contiguous.min(PAGE - addr % PAGE);
    }
    false
}

/// How many bytes a read of `fd` (at file offset `at`, or the descriptor's own; `waitall`:
/// a socket read that waits for all of `len`) will write, as far as can be known before it,
/// and whether the read must be cut to that many (else it may give more than was counted on,
/// and the kernel would meet pages not made present). A regular file gives what lies between
/// the offset and its end; a pipe, a socket or a terminal what it holds now (`FIONREAD`), or
/// when it holds nothing a first page's worth, a read then waiting as it would (a datagram is
/// never cut: what does not fit is dropped); anything else all of `len`.
fn read_expect(fd: c_int, at: Option<i64>, len: usize, waitall: bool) -> (usize, bool) {
    // SAFETY: stat is plain data; fstat fills it.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: a valid out-pointer; a bad descriptor fails (and so will the read).
    if unsafe { libc::syscall(libc::SYS_fstat, fd, &mut st) } != 0 {
        return (0, false);
    }
    let kind = st.st_mode & libc::S_IFMT;
    if kind == libc::S_IFREG {
        let position = match at {
            Some(offset) => offset,
            // SAFETY: lseek with SEEK_CUR only reads the offset.
            None => unsafe { libc::syscall(libc::SYS_lseek, fd, 0, libc::SEEK_CUR) },
        };
        let left = (st.st_size - position.max(0)).max(0) as usize;
        return (left.min(len), false);
    }
    if waitall || !matches!(kind, libc::S_IFIFO | libc::S_IFSOCK | libc::S_IFCHR) {
        return (len, false);
    }
    let mut held: c_int = 0;
    // SAFETY: FIONREAD writes an int; refused by descriptors that do not count.
    if unsafe { libc::ioctl(fd, libc::FIONREAD, &mut held) } != 0 {
        return (len, false);
    }
    let datagram = kind == libc::S_IFSOCK && is_datagram(fd);
    match usize::try_from(held).unwrap_or(0) {
        0 if datagram => (len, false),
        0 => (len.min(PAGE), true),
        held => (held.min(len), !datagram),
    }
}

/// A call on `data` (the kernel writes it when `writes`: a read) in pieces that may be held
/// at once, each held (no eviction takes its pages) while the call runs, its pages that the
/// kernel will touch touched first by this thread (its faults, served and recorded as the
/// kernel's own would have been on the handler-thread path): all of a write's, what a read
/// will get as far as that can be known (`read_expect`), a read cut to that where it could
/// give more. Should the kernel still meet a missing page (data arrived meanwhile), it stops
/// short or fails with `EFAULT`; the page is brought in and the call goes on from there.
/// `call(done, buffers)` makes the call for the buffers of bytes from `done` on; a read goes
/// on after a short piece only while data is there.
fn lazy_call(
    region: &Region,
    data: Data,
    writes: bool,
    more: More,
    (fd, at): (c_int, Option<i64>),
    mut call: impl FnMut(usize, &[libc::iovec]) -> isize,
) -> isize {
    lazy_call_with(region, data, writes, more, (fd, at, false), &mut call)
}

/// [`lazy_call`] of a socket read that waits for all of its length (`MSG_WAITALL`).
fn lazy_call_with(
    region: &Region,
    data: Data,
    writes: bool,
    more: More,
    (fd, at, waitall): (c_int, Option<i64>, bool),
    call: &mut dyn FnMut(usize, &[libc::iovec]) -> isize,
) -> isize {
    let tid = sys::gettid();
    let total = data.len();
    let (mut done, mut more) = (0usize, more);
    region
        .shared()
        .breakdown
        .syscalls_prepared
        .fetch_add(1, Relaxed);
    loop {
        let end = piece_end(region, &data, done, total);
        let held = pin_data(region, &data, done, end, tid);
        // What the kernel will touch of the piece, touched now; a read is cut to it where it
        // could give more.
        let (expect, cut) = if writes {
            let at = at.map(|offset| offset + done as i64);
            read_expect(fd, at, end - done, waitall)
        } else {
            (end - done, false)
        };
        touch_range(region, &data, (done, done + expect), writes, tid);
        let end = if cut { done + expect.max(1) } else { end };
        loop {
            let mut segs = [libc::iovec {
                iov_base: std::ptr::null_mut(),
                iov_len: 0,
            }; PIECE_IOVS];
            let (n, covered) = data.segments(done, end, &mut segs);
            let got = call(done, &segs[..n]);
            let error = errno();
            if got > 0 {
                done += got as usize;
            }
            if got >= 0 && done == covered {
                if covered == end {
                    break;
                }
                continue;
            }
            let result = if done > 0 { done as isize } else { got };
            // A short read with nothing more to give is the kernel's own result: a missing
            // page of the buffer after it is none of its business. (A short write's rest is
            // written anyway; a failure with EFAULT is a copy that met a missing page.)
            let stopped_by_a_page = match got {
                0 => false,
                g if g < 0 => error == libc::EFAULT,
                _ => !writes || more_to_read(fd, at, done),
            };
            if !stopped_by_a_page || !touch_ahead(region, &data, done, covered, writes, tid) {
                drop(held);
                set_errno(error);
                return result;
            }
        }
        drop(held);
        if done >= total || cut {
            return done as isize;
        }
        if let More::IfFile(fd) = more {
            more = if is_file(fd) {
                More::WhileWhole
            } else {
                More::Never
            };
        }
        if matches!(more, More::Never) {
            return done as isize;
        }
    }
}

/// Touches the region's pages of bytes `[from, to)` of `data`, each once (with a write where
/// the kernel writes), counting those that were faults.
fn touch_range(region: &Region, data: &Data, (from, to): (usize, usize), writes: bool, tid: u32) {
    let before = sigbus::served(tid);
    let mut offset = from;
    while offset < to {
        let Some((addr, contiguous)) = data.at(offset) else {
            break;
        };
        if region.contains(addr) {
            touch(addr, writes);
        }
        offset += contiguous.min(PAGE - addr % PAGE).min(to - offset);
    }
    let faults = sigbus::served(tid).wrapping_sub(before);
    region
        .shared()
        .breakdown
        .syscall_faults
        .fetch_add(u64::from(faults), Relaxed);
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

// ---------------------------------------------------------------------------------------
// read and write

type ReadFn = unsafe extern "C" fn(c_int, *mut c_void, usize) -> isize;
type WriteFn = unsafe extern "C" fn(c_int, *const c_void, usize) -> isize;

/// # Safety
/// C's `read`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn read(fd: c_int, buf: *mut c_void, count: usize) -> isize {
    let Some(f) = real!(c"read", ReadFn) else {
        return missing() as isize;
    };
    match region_for(buf as usize, count) {
        // SAFETY: C's contract, passed on.
        None => unsafe { f(fd, buf, count) },
        Some(region) => lazy_call(
            region,
            Data::One(buf as usize, count),
            true,
            More::IfFile(fd),
            (fd, None),
            |_, v| {
                // SAFETY: a piece of the caller's buffer.
                unsafe { f(fd, v[0].iov_base, v[0].iov_len) }
            },
        ),
    }
}

/// # Safety
/// C's `write`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn write(fd: c_int, buf: *const c_void, count: usize) -> isize {
    let Some(f) = real!(c"write", WriteFn) else {
        return missing() as isize;
    };
    match region_for(buf as usize, count) {
        // SAFETY: C's contract, passed on.
        None => unsafe { f(fd, buf, count) },
        Some(region) => lazy_call(
            region,
            Data::One(buf as usize, count),
            false,
            More::WhileWhole,
            (fd, None),
            |_, v| {
                // SAFETY: a piece of the caller's buffer.
                unsafe { f(fd, v[0].iov_base, v[0].iov_len) }
            },
        ),
    }
}

type PreadFn = unsafe extern "C" fn(c_int, *mut c_void, usize, i64) -> isize;
type PwriteFn = unsafe extern "C" fn(c_int, *const c_void, usize, i64) -> isize;

fn pread_with(f: PreadFn, fd: c_int, buf: *mut c_void, count: usize, offset: i64) -> isize {
    match region_for(buf as usize, count) {
        // SAFETY: C's contract, passed on.
        None => unsafe { f(fd, buf, count, offset) },
        Some(region) => lazy_call(
            region,
            Data::One(buf as usize, count),
            true,
            More::IfFile(fd),
            (fd, Some(offset)),
            |done, v| {
                // SAFETY: a piece of the caller's buffer, at its offset in the file.
                unsafe { f(fd, v[0].iov_base, v[0].iov_len, offset + done as i64) }
            },
        ),
    }
}

fn pwrite_with(f: PwriteFn, fd: c_int, buf: *const c_void, count: usize, offset: i64) -> isize {
    match region_for(buf as usize, count) {
        // SAFETY: C's contract, passed on.
        None => unsafe { f(fd, buf, count, offset) },
        Some(region) => lazy_call(
            region,
            Data::One(buf as usize, count),
            false,
            More::WhileWhole,
            (fd, Some(offset)),
            |done, v| {
                // SAFETY: as above.
                unsafe { f(fd, v[0].iov_base, v[0].iov_len, offset + done as i64) }
            },
        ),
    }
}

/// # Safety
/// C's `pread`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn pread(fd: c_int, buf: *mut c_void, count: usize, offset: i64) -> isize {
    match real!(c"pread", PreadFn) {
        Some(f) => pread_with(f, fd, buf, count, offset),
        None => missing() as isize,
    }
}

/// # Safety
/// C's `pread64`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn pread64(fd: c_int, buf: *mut c_void, count: usize, offset: i64) -> isize {
    match real!(c"pread64", PreadFn) {
        Some(f) => pread_with(f, fd, buf, count, offset),
        None => missing() as isize,
    }
}

/// # Safety
/// C's `pwrite`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn pwrite(fd: c_int, buf: *const c_void, count: usize, offset: i64) -> isize {
    match real!(c"pwrite", PwriteFn) {
        Some(f) => pwrite_with(f, fd, buf, count, offset),
        None => missing() as isize,
    }
}

/// # Safety
/// C's `pwrite64`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn pwrite64(
    fd: c_int,
    buf: *const c_void,
    count: usize,
    offset: i64,
) -> isize {
    match real!(c"pwrite64", PwriteFn) {
        Some(f) => pwrite_with(f, fd, buf, count, offset),
        None => missing() as isize,
    }
}

// ---------------------------------------------------------------------------------------
// Vectors

/// A vector call (`readv` and the rest): the array held at once, the buffers as one run of
/// bytes (`lazy_call`), `call(done, iov, count)` for the buffers from byte `done` on.
fn vector_call(
    (fd, at): (c_int, Option<i64>),
    iov: *const libc::iovec,
    count: c_int,
    writes: bool,
    more: More,
    mut call: impl FnMut(usize, *const libc::iovec, c_int) -> isize,
) -> isize {
    let count_usize = usize::try_from(count).unwrap_or(0);
    if iov.is_null() || count_usize == 0 || !sigbus::active() {
        return call(0, iov, count);
    }
    // SAFETY: C's contract: `count` iovecs at `iov`.
    let iovs = unsafe { std::slice::from_raw_parts(iov, count_usize) };
    let array = Buf::read(iov.cast(), std::mem::size_of_val(iovs));
    let Some(region) = region_for(array.addr, array.len).or_else(|| {
        iovs.iter()
            .find_map(|v| region_for(v.iov_base as usize, v.iov_len))
    }) else {
        return call(0, iov, count);
    };
    // The array is read where it is (the pieces' arrays are copies on this stack).
    let held_array = region_for(array.addr, array.len).map(|region| hold(region, &[array]));
    let result = lazy_call(
        region,
        Data::Vector(iovs),
        writes,
        more,
        (fd, at),
        |done, segs| {
            if done == 0 && segs.len() == iovs.len() {
                call(0, iov, count)
            } else {
                call(done, segs.as_ptr(), segs.len() as c_int)
            }
        },
    );
    let saved = errno();
    drop(held_array);
    set_errno(saved);
    result
}

type VecFn = unsafe extern "C" fn(c_int, *const libc::iovec, c_int) -> isize;
type VecAtFn = unsafe extern "C" fn(c_int, *const libc::iovec, c_int, i64) -> isize;
type VecAt2Fn = unsafe extern "C" fn(c_int, *const libc::iovec, c_int, i64, c_int) -> isize;

/// # Safety
/// C's `readv`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn readv(fd: c_int, iov: *const libc::iovec, count: c_int) -> isize {
    let Some(f) = real!(c"readv", VecFn) else {
        return missing() as isize;
    };
    // SAFETY: C's contract, passed on piece by piece.
    vector_call(
        (fd, None),
        iov,
        count,
        true,
        More::IfFile(fd),
        |_, v, n| unsafe { f(fd, v, n) },
    )
}

/// # Safety
/// C's `writev`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn writev(fd: c_int, iov: *const libc::iovec, count: c_int) -> isize {
    let Some(f) = real!(c"writev", VecFn) else {
        return missing() as isize;
    };
    // SAFETY: as above.
    vector_call(
        (fd, None),
        iov,
        count,
        false,
        More::WhileWhole,
        |_, v, n| unsafe { f(fd, v, n) },
    )
}

macro_rules! vector_at {
    ($name:ident, $cname:literal, $writes:expr, $more:expr) => {
        /// # Safety
        /// C's function of this name.
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn $name(
            fd: c_int,
            iov: *const libc::iovec,
            count: c_int,
            offset: i64,
        ) -> isize {
            let Some(f) = real!($cname, VecAtFn) else {
                return missing() as isize;
            };
            // SAFETY: C's contract, passed on piece by piece at each piece's offset.
            vector_call(
                (fd, Some(offset)),
                iov,
                count,
                $writes,
                $more(fd),
                |done, v, n| unsafe { f(fd, v, n, offset + done as i64) },
            )
        }
    };
}

vector_at!(preadv, c"preadv", true, More::IfFile);
vector_at!(preadv64, c"preadv64", true, More::IfFile);
vector_at!(pwritev, c"pwritev", false, |_| More::WhileWhole);
vector_at!(pwritev64, c"pwritev64", false, |_| More::WhileWhole);

macro_rules! vector_at2 {
    ($name:ident, $cname:literal, $writes:expr, $more:expr) => {
        /// # Safety
        /// C's function of this name.
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn $name(
            fd: c_int,
            iov: *const libc::iovec,
            count: c_int,
            offset: i64,
            flags: c_int,
        ) -> isize {
            let Some(f) = real!($cname, VecAt2Fn) else {
                return missing() as isize;
            };
            // An offset of -1 means the file's own: pieces then follow on from it.
            // SAFETY: as above.
            let at = (offset >= 0).then_some(offset);
            vector_call(
                (fd, at),
                iov,
                count,
                $writes,
                $more(fd),
                |done, v, n| unsafe {
                    f(
                        fd,
                        v,
                        n,
                        if offset < 0 {
                            offset
                        } else {
                            offset + done as i64
                        },
                        flags,
                    )
                },
            )
        }
    };
}

vector_at2!(preadv2, c"preadv2", true, More::IfFile);
vector_at2!(preadv64v2, c"preadv64v2", true, More::IfFile);
vector_at2!(pwritev2, c"pwritev2", false, |_| More::WhileWhole);
vector_at2!(pwritev64v2, c"pwritev64v2", false, |_| More::WhileWhole);

// ---------------------------------------------------------------------------------------
// Sockets

/// Whether a socket keeps message boundaries (a send of it must not be split).
fn is_datagram(fd: c_int) -> bool {
    let mut kind: c_int = 0;
    let mut len = std::mem::size_of::<c_int>() as libc::socklen_t;
    // SAFETY: valid out-pointers of the sizes given.
    let ok = unsafe {
        libc::getsockopt(
            fd,
            libc::SOL_SOCKET,
            libc::SO_TYPE,
            (&raw mut kind).cast(),
            &mut len,
        )
    } == 0;
    !ok || kind != libc::SOCK_STREAM
}

/// The address length's bytes, when both pointers are given.
fn name_bufs(addr: *mut libc::sockaddr, len: *mut libc::socklen_t) -> [Buf; 2] {
    if addr.is_null() || len.is_null() {
        return [Buf::read(std::ptr::null(), 0); 2];
    }
    // SAFETY: C's contract: `len` points to the address buffer's size.
    let size = unsafe { *len } as usize;
    [
        Buf::written(addr.cast(), size),
        Buf::written(len.cast(), std::mem::size_of::<libc::socklen_t>()),
    ]
}

type RecvFromFn = unsafe extern "C" fn(
    c_int,
    *mut c_void,
    usize,
    c_int,
    *mut libc::sockaddr,
    *mut libc::socklen_t,
) -> isize;

fn receive(
    (fd, flags): (c_int, c_int),
    f: impl Fn(*mut c_void, usize) -> isize,
    buf: *mut c_void,
    len: usize,
    names: [Buf; 2],
) -> isize {
    let bufs = [Buf::written(buf, len), names[0], names[1]];
    let Some(region) = region_of(&bufs) else {
        return f(buf, len);
    };
    if is_datagram(fd) {
        // A datagram the kernel fails to copy is dropped: the buffer is made present whole
        // first.
        return held_call(Some(region), &bufs, || f(buf, len));
    }
    let held_names = hold(region, &names);
    let waitall = flags & libc::MSG_WAITALL != 0;
    let got = lazy_call_with(
        region,
        Data::One(buf as usize, len),
        true,
        More::Never,
        (fd, None, waitall),
        &mut |_, v| f(v[0].iov_base, v[0].iov_len),
    );
    let saved = errno();
    drop(held_names);
    set_errno(saved);
    got
}

/// # Safety
/// C's `recv`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn recv(fd: c_int, buf: *mut c_void, len: usize, flags: c_int) -> isize {
    let Some(f) = real!(
        c"recv",
        unsafe extern "C" fn(c_int, *mut c_void, usize, c_int) -> isize
    ) else {
        return missing() as isize;
    };
    let names = name_bufs(std::ptr::null_mut(), std::ptr::null_mut());
    // SAFETY: C's contract, passed on.
    receive(
        (fd, flags),
        |b, n| unsafe { f(fd, b, n, flags) },
        buf,
        len,
        names,
    )
}

/// # Safety
/// C's `recvfrom`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn recvfrom(
    fd: c_int,
    buf: *mut c_void,
    len: usize,
    flags: c_int,
    addr: *mut libc::sockaddr,
    addrlen: *mut libc::socklen_t,
) -> isize {
    let Some(f) = real!(c"recvfrom", RecvFromFn) else {
        return missing() as isize;
    };
    let names = name_bufs(addr, addrlen);
    // SAFETY: as above.
    receive(
        (fd, flags),
        |b, n| unsafe { f(fd, b, n, flags, addr, addrlen) },
        buf,
        len,
        names,
    )
}

fn send_with(
    fd: c_int,
    buf: *const c_void,
    len: usize,
    name: Buf,
    f: impl Fn(usize, usize) -> isize,
) -> isize {
    let bufs = [Buf::read(buf, len), name];
    let Some(region) = region_of(&bufs) else {
        return f(buf as usize, len);
    };
    if is_datagram(fd) {
        // A datagram goes whole or not at all.
        return held_call(Some(region), &bufs, || f(buf as usize, len));
    }
    let held_name = hold(region, &[name]);
    let sent = lazy_call(
        region,
        Data::One(buf as usize, len),
        false,
        More::WhileWhole,
        (fd, None),
        |_, v| f(v[0].iov_base as usize, v[0].iov_len),
    );
    let saved = errno();
    drop(held_name);
    set_errno(saved);
    sent
}

/// # Safety
/// C's `send`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn send(fd: c_int, buf: *const c_void, len: usize, flags: c_int) -> isize {
    let Some(f) = real!(
        c"send",
        unsafe extern "C" fn(c_int, *const c_void, usize, c_int) -> isize
    ) else {
        return missing() as isize;
    };
    // SAFETY: C's contract, passed on piece by piece.
    send_with(
        fd,
        buf,
        len,
        Buf::read(std::ptr::null(), 0),
        |at, n| unsafe { f(fd, at as *const c_void, n, flags) },
    )
}

/// # Safety
/// C's `sendto`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn sendto(
    fd: c_int,
    buf: *const c_void,
    len: usize,
    flags: c_int,
    addr: *const libc::sockaddr,
    addrlen: libc::socklen_t,
) -> isize {
    let Some(f) = real!(
        c"sendto",
        unsafe extern "C" fn(
            c_int,
            *const c_void,
            usize,
            c_int,
            *const libc::sockaddr,
            libc::socklen_t,
        ) -> isize
    ) else {
        return missing() as isize;
    };
    let name = Buf::read(
        addr.cast(),
        if addr.is_null() { 0 } else { addrlen as usize },
    );
    // SAFETY: as above.
    send_with(fd, buf, len, name, |at, n| unsafe {
        f(fd, at as *const c_void, n, flags, addr, addrlen)
    })
}

/// The buffers of a `msghdr`: itself, its name, its vector and buffers, its control data.
/// `None` when they are more than a call holds apart.
fn message_bufs(msg: *const libc::msghdr, writes: bool, out: &mut [Buf; RANGES * 4]) -> usize {
    if msg.is_null() {
        return 0;
    }
    // SAFETY: C's contract: a valid msghdr.
    let m = unsafe { &*msg };
    let mut n = 0;
    let mut push = |buf: Buf| {
        if n < out.len() && buf.len > 0 {
            out[n] = buf;
            n += 1;
        }
    };
    // The kernel writes the lengths and flags back (recvmsg).
    push(Buf {
        addr: msg as usize,
        len: std::mem::size_of::<libc::msghdr>(),
        writes,
    });
    push(Buf {
        addr: m.msg_name as usize,
        len: m.msg_namelen as usize,
        writes,
    });
    push(Buf {
        addr: m.msg_control as usize,
        len: m.msg_controllen,
        writes,
    });
    if !m.msg_iov.is_null() {
        push(Buf::read(
            m.msg_iov.cast(),
            m.msg_iovlen * std::mem::size_of::<libc::iovec>(),
        ));
        // SAFETY: C's contract: msg_iovlen iovecs.
        let iovs = unsafe { std::slice::from_raw_parts(m.msg_iov, m.msg_iovlen) };
        for v in iovs {
            push(Buf {
                addr: v.iov_base as usize,
                len: v.iov_len,
                writes,
            });
        }
    }
    n
}

/// # Safety
/// C's `recvmsg`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn recvmsg(fd: c_int, msg: *mut libc::msghdr, flags: c_int) -> isize {
    let Some(f) = real!(
        c"recvmsg",
        unsafe extern "C" fn(c_int, *mut libc::msghdr, c_int) -> isize
    ) else {
        return missing() as isize;
    };
    let mut bufs = [Buf::read(std::ptr::null(), 0); RANGES * 4];
    let n = message_bufs(msg, true, &mut bufs);
    // SAFETY: C's contract, passed on.
    held_call(region_of(&bufs[..n]), &bufs[..n], || unsafe {
        f(fd, msg, flags)
    })
}

/// # Safety
/// C's `sendmsg`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn sendmsg(fd: c_int, msg: *const libc::msghdr, flags: c_int) -> isize {
    let Some(f) = real!(
        c"sendmsg",
        unsafe extern "C" fn(c_int, *const libc::msghdr, c_int) -> isize
    ) else {
        return missing() as isize;
    };
    let mut bufs = [Buf::read(std::ptr::null(), 0); RANGES * 4];
    let n = message_bufs(msg, false, &mut bufs);
    // SAFETY: as above.
    held_call(region_of(&bufs[..n]), &bufs[..n], || unsafe {
        f(fd, msg, flags)
    })
}

// ---------------------------------------------------------------------------------------
// Waiting for descriptors

/// # Safety
/// C's `epoll_wait`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn epoll_wait(
    epfd: c_int,
    events: *mut libc::epoll_event,
    max: c_int,
    timeout: c_int,
) -> c_int {
    let Some(f) = real!(
        c"epoll_wait",
        unsafe extern "C" fn(c_int, *mut libc::epoll_event, c_int, c_int) -> c_int
    ) else {
        return missing();
    };
    let len = usize::try_from(max).unwrap_or(0) * std::mem::size_of::<libc::epoll_event>();
    let bufs = [Buf::written(events.cast(), len)];
    // SAFETY: C's contract, passed on.
    held_call(region_of(&bufs), &bufs, || unsafe {
        f(epfd, events, max, timeout)
    })
}

/// # Safety
/// C's `epoll_pwait`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn epoll_pwait(
    epfd: c_int,
    events: *mut libc::epoll_event,
    max: c_int,
    timeout: c_int,
    sigmask: *const libc::sigset_t,
) -> c_int {
    let Some(f) = real!(
        c"epoll_pwait",
        unsafe extern "C" fn(
            c_int,
            *mut libc::epoll_event,
            c_int,
            c_int,
            *const libc::sigset_t,
        ) -> c_int
    ) else {
        return missing();
    };
    let stripped = sigbus::without_bus(sigmask);
    let sigmask = stripped
        .as_ref()
        .map_or(sigmask, |s| s as *const libc::sigset_t);
    let len = usize::try_from(max).unwrap_or(0) * std::mem::size_of::<libc::epoll_event>();
    let bufs = [Buf::written(events.cast(), len)];
    // SAFETY: as above.
    held_call(region_of(&bufs), &bufs, || unsafe {
        f(epfd, events, max, timeout, sigmask)
    })
}

/// # Safety
/// C's `poll`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn poll(fds: *mut libc::pollfd, nfds: libc::nfds_t, timeout: c_int) -> c_int {
    let Some(f) = real!(
        c"poll",
        unsafe extern "C" fn(*mut libc::pollfd, libc::nfds_t, c_int) -> c_int
    ) else {
        return missing();
    };
    let bufs = [Buf::written(
        fds.cast(),
        nfds as usize * std::mem::size_of::<libc::pollfd>(),
    )];
    // SAFETY: as above.
    held_call(region_of(&bufs), &bufs, || unsafe { f(fds, nfds, timeout) })
}

/// # Safety
/// C's `ppoll`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ppoll(
    fds: *mut libc::pollfd,
    nfds: libc::nfds_t,
    timeout: *const libc::timespec,
    sigmask: *const libc::sigset_t,
) -> c_int {
    let Some(f) = real!(
        c"ppoll",
        unsafe extern "C" fn(
            *mut libc::pollfd,
            libc::nfds_t,
            *const libc::timespec,
            *const libc::sigset_t,
        ) -> c_int
    ) else {
        return missing();
    };
    let stripped = sigbus::without_bus(sigmask);
    let sigmask = stripped
        .as_ref()
        .map_or(sigmask, |s| s as *const libc::sigset_t);
    let bufs = [
        Buf::written(
            fds.cast(),
            nfds as usize * std::mem::size_of::<libc::pollfd>(),
        ),
        Buf::read(
            timeout.cast(),
            if timeout.is_null() {
                0
            } else {
                std::mem::size_of::<libc::timespec>()
            },
        ),
    ];
    // SAFETY: as above.
    held_call(region_of(&bufs), &bufs, || unsafe {
        f(fds, nfds, timeout, sigmask)
    })
}

fn fd_set_bufs(sets: [*mut libc::fd_set; 3], timeout: Buf) -> [Buf; 4] {
    let set = |p: *mut libc::fd_set| {
        Buf::written(
            p.cast(),
            if p.is_null() {
                0
            } else {
                std::mem::size_of::<libc::fd_set>()
            },
        )
    };
    [set(sets[0]), set(sets[1]), set(sets[2]), timeout]
}

/// # Safety
/// C's `select`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn select(
    nfds: c_int,
    r: *mut libc::fd_set,
    w: *mut libc::fd_set,
    e: *mut libc::fd_set,
    timeout: *mut libc::timeval,
) -> c_int {
    let Some(f) = real!(
        c"select",
        unsafe extern "C" fn(
            c_int,
            *mut libc::fd_set,
            *mut libc::fd_set,
            *mut libc::fd_set,
            *mut libc::timeval,
        ) -> c_int
    ) else {
        return missing();
    };
    let bufs = fd_set_bufs(
        [r, w, e],
        Buf::written(
            timeout.cast(),
            if timeout.is_null() {
                0
            } else {
                std::mem::size_of::<libc::timeval>()
            },
        ),
    );
    // SAFETY: as above.
    held_call(region_of(&bufs), &bufs, || unsafe {
        f(nfds, r, w, e, timeout)
    })
}

/// # Safety
/// C's `pselect`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn pselect(
    nfds: c_int,
    r: *mut libc::fd_set,
    w: *mut libc::fd_set,
    e: *mut libc::fd_set,
    timeout: *const libc::timespec,
    sigmask: *const libc::sigset_t,
) -> c_int {
    let Some(f) = real!(
        c"pselect",
        unsafe extern "C" fn(
            c_int,
            *mut libc::fd_set,
            *mut libc::fd_set,
            *mut libc::fd_set,
            *const libc::timespec,
            *const libc::sigset_t,
        ) -> c_int
    ) else {
        return missing();
    };
    let stripped = sigbus::without_bus(sigmask);
    let sigmask = stripped
        .as_ref()
        .map_or(sigmask, |s| s as *const libc::sigset_t);
    let bufs = fd_set_bufs(
        [r, w, e],
        Buf::read(
            timeout.cast(),
            if timeout.is_null() {
                0
            } else {
                std::mem::size_of::<libc::timespec>()
            },
        ),
    );
    // SAFETY: as above.
    held_call(region_of(&bufs), &bufs, || unsafe {
        f(nfds, r, w, e, timeout, sigmask)
    })
}

// ---------------------------------------------------------------------------------------
// stdio with the program's buffers (a large fread or fwrite goes straight between the
// buffer and the kernel)

type StdioFn = unsafe extern "C" fn(*mut c_void, usize, usize, *mut libc::FILE) -> usize;

fn stdio_call(
    f: StdioFn,
    ptr: *mut c_void,
    size: usize,
    n: usize,
    stream: *mut libc::FILE,
    writes: bool,
    locked: bool,
) -> usize {
    let Some(total) = size.checked_mul(n) else {
        // SAFETY: C's contract, passed on.
        return unsafe { f(ptr, size, n, stream) };
    };
    let Some(region) = region_for(ptr as usize, total) else {
        // SAFETY: as above.
        return unsafe { f(ptr, size, n, stream) };
    };
    if locked {
        // One call to the program: no other thread's call on the stream between pieces.
        // SAFETY: a valid stream (C's contract).
        unsafe { flockfile(stream) };
    }
    // The C library reads and writes between the buffer and the kernel itself: each piece
    // is made present whole first.
    let mut done = 0usize;
    while done < total {
        let end = piece_end(region, &Data::One(ptr as usize, total), done, total);
        let at = ptr as usize + done;
        let bufs = [Buf {
            addr: at,
            len: end - done,
            writes,
        }];
        let wanted = end - done;
        // SAFETY: a piece of the caller's buffer, whole bytes.
        let got = held_call(Some(region), &bufs, || unsafe {
            f(at as *mut c_void, 1, wanted, stream)
        });
        done += got;
        if got != wanted {
            break;
        }
    }
    if locked {
        // SAFETY: locked above.
        unsafe { funlockfile(stream) };
    }
    done / size.max(1)
}

/// # Safety
/// C's `fread`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn fread(
    ptr: *mut c_void,
    size: usize,
    n: usize,
    stream: *mut libc::FILE,
) -> usize {
    match real!(c"fread", StdioFn) {
        Some(f) => stdio_call(f, ptr, size, n, stream, true, true),
        None => 0,
    }
}

/// # Safety
/// C's `fwrite`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn fwrite(
    ptr: *const c_void,
    size: usize,
    n: usize,
    stream: *mut libc::FILE,
) -> usize {
    match real!(c"fwrite", StdioFn) {
        Some(f) => stdio_call(f, ptr.cast_mut(), size, n, stream, false, true),
        None => 0,
    }
}

/// # Safety
/// C's `fread_unlocked`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn fread_unlocked(
    ptr: *mut c_void,
    size: usize,
    n: usize,
    stream: *mut libc::FILE,
) -> usize {
    match real!(c"fread_unlocked", StdioFn) {
        Some(f) => stdio_call(f, ptr, size, n, stream, true, false),
        None => 0,
    }
}

/// # Safety
/// C's `fwrite_unlocked`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn fwrite_unlocked(
    ptr: *const c_void,
    size: usize,
    n: usize,
    stream: *mut libc::FILE,
) -> usize {
    match real!(c"fwrite_unlocked", StdioFn) {
        Some(f) => stdio_call(f, ptr.cast_mut(), size, n, stream, false, false),
        None => 0,
    }
}

// ---------------------------------------------------------------------------------------
// Programs started: the kernel reads the path and the arrays, and a spawned child (which
// shares the memory, with the default action for SIGBUS) reads them too.

/// Adds a string's bytes (with its NUL) to `bufs`.
pub(crate) fn string_buf(s: *const c_char) -> Buf {
    if s.is_null() || !sigbus::active() {
        return Buf::read(std::ptr::null(), 0);
    }
    // SAFETY: C's contract: a NUL-terminated string (reading it may fault, in this thread).
    let len = unsafe { CStr::from_ptr(s) }.to_bytes_with_nul().len();
    Buf::read(s.cast(), len)
}

/// Holds a path and NULL-terminated arrays of strings (and the arrays) for a call, in holds
/// of up to RANGES buffers each.
fn hold_args(path: *const c_char, arrays: &[*const *const c_char]) -> Vec<Held> {
    let mut bufs = Vec::new();
    bufs.push(string_buf(path));
    for &array in arrays {
        if array.is_null() {
            continue;
        }
        let mut count = 0;
        // SAFETY: C's contract: a NULL-terminated array of strings.
        while !unsafe { *array.add(count) }.is_null() {
            // SAFETY: as above.
            bufs.push(string_buf(unsafe { *array.add(count) }));
            count += 1;
        }
        bufs.push(Buf::read(
            array.cast(),
            (count + 1) * std::mem::size_of::<*const c_char>(),
        ));
    }
    bufs.retain(|b| b.len > 0);
    bufs.chunks(RANGES)
        .filter_map(|group| region_of(group).map(|region| hold(region, group)))
        .collect()
}

unsafe extern "C" {
    static environ: *const *const c_char;
    fn flockfile(stream: *mut libc::FILE);
    fn funlockfile(stream: *mut libc::FILE);
}

fn environment() -> *const *const c_char {
    // SAFETY: the C library's environment pointer, read once.
    unsafe { environ }
}

/// Arguments and environment held while `call` runs (only with faults served in the thread).
fn with_args<R>(
    path: *const c_char,
    arrays: &[*const *const c_char],
    call: impl FnOnce() -> R,
) -> R {
    if !sigbus::active() {
        return call();
    }
    let held = hold_args(path, arrays);
    let result = call();
    let saved = errno();
    drop(held);
    set_errno(saved);
    result
}

type ExecveFn =
    unsafe extern "C" fn(*const c_char, *const *const c_char, *const *const c_char) -> c_int;
type ExecvFn = unsafe extern "C" fn(*const c_char, *const *const c_char) -> c_int;

/// # Safety
/// C's `execve`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn execve(
    path: *const c_char,
    argv: *const *const c_char,
    envp: *const *const c_char,
) -> c_int {
    let Some(f) = real!(c"execve", ExecveFn) else {
        return missing();
    };
    // SAFETY: C's contract, passed on.
    with_args(path, &[argv, envp], || unsafe { f(path, argv, envp) })
}

/// # Safety
/// C's `execvpe`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn execvpe(
    file: *const c_char,
    argv: *const *const c_char,
    envp: *const *const c_char,
) -> c_int {
    let Some(f) = real!(c"execvpe", ExecveFn) else {
        return missing();
    };
    // SAFETY: as above.
    with_args(file, &[argv, envp], || unsafe { f(file, argv, envp) })
}

/// # Safety
/// C's `execv`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn execv(path: *const c_char, argv: *const *const c_char) -> c_int {
    let Some(f) = real!(c"execv", ExecvFn) else {
        return missing();
    };
    // SAFETY: as above.
    with_args(path, &[argv, environment()], || unsafe { f(path, argv) })
}

/// # Safety
/// C's `execvp`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn execvp(file: *const c_char, argv: *const *const c_char) -> c_int {
    let Some(f) = real!(c"execvp", ExecvFn) else {
        return missing();
    };
    // SAFETY: as above.
    with_args(file, &[argv, environment()], || unsafe { f(file, argv) })
}

/// # Safety
/// C's `fexecve`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn fexecve(
    fd: c_int,
    argv: *const *const c_char,
    envp: *const *const c_char,
) -> c_int {
    let Some(f) = real!(
        c"fexecve",
        unsafe extern "C" fn(c_int, *const *const c_char, *const *const c_char) -> c_int
    ) else {
        return missing();
    };
    // SAFETY: as above.
    with_args(std::ptr::null(), &[argv, envp], || unsafe {
        f(fd, argv, envp)
    })
}

type SpawnFn = unsafe extern "C" fn(
    *mut libc::pid_t,
    *const c_char,
    *const libc::posix_spawn_file_actions_t,
    *const libc::posix_spawnattr_t,
    *const *const c_char,
    *const *const c_char,
) -> c_int;

/// # Safety
/// C's `posix_spawn`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn posix_spawn(
    pid: *mut libc::pid_t,
    path: *const c_char,
    actions: *const libc::posix_spawn_file_actions_t,
    attr: *const libc::posix_spawnattr_t,
    argv: *const *const c_char,
    envp: *const *const c_char,
) -> c_int {
    let Some(f) = real!(c"posix_spawn", SpawnFn) else {
        return libc::ENOSYS;
    };
    // SAFETY: as above.
    with_args(path, &[argv, envp], || unsafe {
        f(pid, path, actions, attr, argv, envp)
    })
}

/// # Safety
/// C's `posix_spawnp`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn posix_spawnp(
    pid: *mut libc::pid_t,
    file: *const c_char,
    actions: *const libc::posix_spawn_file_actions_t,
    attr: *const libc::posix_spawnattr_t,
    argv: *const *const c_char,
    envp: *const *const c_char,
) -> c_int {
    let Some(f) = real!(c"posix_spawnp", SpawnFn) else {
        return libc::ENOSYS;
    };
    // SAFETY: as above.
    with_args(file, &[argv, envp], || unsafe {
        f(pid, file, actions, attr, argv, envp)
    })
}

/// # Safety
/// C's `system`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn system(command: *const c_char) -> c_int {
    let Some(f) = real!(c"system", unsafe extern "C" fn(*const c_char) -> c_int) else {
        return missing();
    };
    // SAFETY: as above.
    with_args(command, &[environment()], || unsafe { f(command) })
}

/// # Safety
/// C's `popen`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn popen(command: *const c_char, mode: *const c_char) -> *mut libc::FILE {
    let Some(f) = real!(
        c"popen",
        unsafe extern "C" fn(*const c_char, *const c_char) -> *mut libc::FILE
    ) else {
        set_errno(libc::ENOSYS);
        return std::ptr::null_mut();
    };
    // SAFETY: as above.
    with_args(command, &[environment()], || unsafe { f(command, mode) })
}

// ---------------------------------------------------------------------------------------
// Waits on futexes in the program's memory: the kernel reads the futex word; glibc ends the
// program when that read fails (`futex_fatal_error`).

/// Holds the objects of a wait.
fn with_objects<R>(objects: &[(*const c_void, usize)], call: impl FnOnce() -> R) -> R {
    let mut bufs = [Buf::read(std::ptr::null(), 0); 2];
    for (slot, &(addr, len)) in bufs.iter_mut().zip(objects) {
        // Written: the wait changes the object in user mode around the futex call, and a
        // write-protected page would fault the kernel's futex operations that write.
        *slot = Buf::written(addr.cast_mut(), len);
    }
    held_call(region_of(&bufs), &bufs, call)
}

macro_rules! wait_wrapper {
    ($name:ident, $cname:literal, ($($arg:ident: $ty:ty),*), [$($obj:ident),*]) => {
        /// # Safety
        /// C's function of this name.
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn $name($($arg: $ty),*) -> c_int {
            let Some(f) = real!($cname, unsafe extern "C" fn($($ty),*) -> c_int) else {
                return libc::ENOSYS;
            };
            // SAFETY: C's contract, passed on.
            with_objects(
                &[$(($obj as *const c_void, std::mem::size_of_val(unsafe { &*$obj }))),*],
                || unsafe { f($($arg),*) },
            )
        }
    };
}

wait_wrapper!(pthread_cond_wait, c"pthread_cond_wait",
    (cond: *mut libc::pthread_cond_t, mutex: *mut libc::pthread_mutex_t), [cond, mutex]);
wait_wrapper!(pthread_cond_timedwait, c"pthread_cond_timedwait",
    (cond: *mut libc::pthread_cond_t, mutex: *mut libc::pthread_mutex_t, at: *const libc::timespec),
    [cond, mutex]);
wait_wrapper!(pthread_cond_clockwait, c"pthread_cond_clockwait",
    (cond: *mut libc::pthread_cond_t, mutex: *mut libc::pthread_mutex_t, clock: libc::clockid_t,
     at: *const libc::timespec),
    [cond, mutex]);
wait_wrapper!(pthread_barrier_wait, c"pthread_barrier_wait",
    (barrier: *mut libc::pthread_barrier_t), [barrier]);
wait_wrapper!(pthread_rwlock_rdlock, c"pthread_rwlock_rdlock",
    (lock: *mut libc::pthread_rwlock_t), [lock]);
wait_wrapper!(pthread_rwlock_wrlock, c"pthread_rwlock_wrlock",
    (lock: *mut libc::pthread_rwlock_t), [lock]);
wait_wrapper!(pthread_rwlock_timedrdlock, c"pthread_rwlock_timedrdlock",
    (lock: *mut libc::pthread_rwlock_t, at: *const libc::timespec), [lock]);
wait_wrapper!(pthread_rwlock_timedwrlock, c"pthread_rwlock_timedwrlock",
    (lock: *mut libc::pthread_rwlock_t, at: *const libc::timespec), [lock]);
wait_wrapper!(pthread_mutex_timedlock, c"pthread_mutex_timedlock",
    (mutex: *mut libc::pthread_mutex_t, at: *const libc::timespec), [mutex]);
wait_wrapper!(sem_wait, c"sem_wait", (sem: *mut libc::sem_t), [sem]);
wait_wrapper!(sem_timedwait, c"sem_timedwait",
    (sem: *mut libc::sem_t, at: *const libc::timespec), [sem]);

// ---------------------------------------------------------------------------------------
// Signals: SIGBUS stays the runtime's, and is never blocked.

/// # Safety
/// C's `sigaction`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn sigaction(
    sig: c_int,
    act: *const libc::sigaction,
    old: *mut libc::sigaction,
) -> c_int {
    if !sigbus::active() {
        return real_sigaction(sig, act, old);
    }
    if sig == libc::SIGBUS {
        if !old.is_null() {
            // SAFETY: C's contract: a writable sigaction.
            unsafe { *old = sigbus::program_action() };
        }
        if !act.is_null() {
            // SAFETY: C's contract: a valid sigaction.
            sigbus::set_program_action(unsafe { &*act });
        }
        return 0;
    }
    if act.is_null() {
        return real_sigaction(sig, act, old);
    }
    // No handler runs with SIGBUS blocked: a fault on the region in it would kill the
    // process instead of reaching the runtime's handler.
    // SAFETY: C's contract: a valid sigaction.
    let mut ours = unsafe { *act };
    if let Some(mask) = sigbus::without_bus(&ours.sa_mask) {
        ours.sa_mask = mask;
    }
    real_sigaction(sig, &ours, old)
}

type SignalFn = unsafe extern "C" fn(c_int, libc::sighandler_t) -> libc::sighandler_t;

/// `signal` and its BSD name: with SIGBUS, the program's action changes, not the process's.
fn bsd_signal_with(
    f: Option<SignalFn>,
    sig: c_int,
    handler: libc::sighandler_t,
) -> libc::sighandler_t {
    if sig == libc::SIGBUS && sigbus::active() {
        let old = sigbus::program_action().sa_sigaction;
        // SAFETY: sigaction is plain data; all-zero is valid.
        let mut action: libc::sigaction = unsafe { std::mem::zeroed() };
        action.sa_sigaction = handler;
        action.sa_flags = libc::SA_RESTART;
        sigbus::set_program_action(&action);
        return old;
    }
    match f {
        // SAFETY: C's contract, passed on.
        Some(f) => unsafe { f(sig, handler) },
        None => {
            set_errno(libc::ENOSYS);
            libc::SIG_ERR
        }
    }
}

/// # Safety
/// C's `signal`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn signal(sig: c_int, handler: libc::sighandler_t) -> libc::sighandler_t {
    bsd_signal_with(real!(c"signal", SignalFn), sig, handler)
}

/// # Safety
/// C's `bsd_signal`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn bsd_signal(sig: c_int, handler: libc::sighandler_t) -> libc::sighandler_t {
    bsd_signal_with(real!(c"bsd_signal", SignalFn), sig, handler)
}

/// # Safety
/// C's `sysv_signal`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn sysv_signal(
    sig: c_int,
    handler: libc::sighandler_t,
) -> libc::sighandler_t {
    if sig == libc::SIGBUS && sigbus::active() {
        let old = sigbus::program_action().sa_sigaction;
        // SAFETY: sigaction is plain data; all-zero is valid.
        let mut action: libc::sigaction = unsafe { std::mem::zeroed() };
        action.sa_sigaction = handler;
        action.sa_flags = libc::SA_RESETHAND | libc::SA_NODEFER;
        sigbus::set_program_action(&action);
        return old;
    }
    match real!(c"sysv_signal", SignalFn) {
        // SAFETY: C's contract, passed on.
        Some(f) => unsafe { f(sig, handler) },
        None => {
            set_errno(libc::ENOSYS);
            libc::SIG_ERR
        }
    }
}

type MaskFn = unsafe extern "C" fn(c_int, *const libc::sigset_t, *mut libc::sigset_t) -> c_int;

fn mask_with(
    f: Option<MaskFn>,
    how: c_int,
    set: *const libc::sigset_t,
    old: *mut libc::sigset_t,
) -> c_int {
    let Some(f) = f else {
        return missing();
    };
    let stripped = (how != libc::SIG_UNBLOCK)
        .then(|| sigbus::without_bus(set))
        .flatten();
    let set = stripped
        .as_ref()
        .map_or(set, |s| s as *const libc::sigset_t);
    // SAFETY: C's contract, passed on.
    unsafe { f(how, set, old) }
}

/// # Safety
/// C's `sigprocmask`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn sigprocmask(
    how: c_int,
    set: *const libc::sigset_t,
    old: *mut libc::sigset_t,
) -> c_int {
    mask_with(real!(c"sigprocmask", MaskFn), how, set, old)
}

/// # Safety
/// C's `pthread_sigmask`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn pthread_sigmask(
    how: c_int,
    set: *const libc::sigset_t,
    old: *mut libc::sigset_t,
) -> c_int {
    mask_with(real!(c"pthread_sigmask", MaskFn), how, set, old)
}

/// # Safety
/// C's `sigsuspend`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn sigsuspend(mask: *const libc::sigset_t) -> c_int {
    let Some(f) = real!(
        c"sigsuspend",
        unsafe extern "C" fn(*const libc::sigset_t) -> c_int
    ) else {
        return missing();
    };
    let stripped = sigbus::without_bus(mask);
    let mask = stripped
        .as_ref()
        .map_or(mask, |s| s as *const libc::sigset_t);
    // SAFETY: C's contract, passed on.
    unsafe { f(mask) }
}
