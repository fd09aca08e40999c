//! A call on a buffer larger than may be held at once, taken in pieces: each piece's pages
//! held and touched first, the call going on from where a missing page stopped the kernel.

use std::ffi::{c_int, c_void};
use std::sync::atomic::Ordering::Relaxed;

use super::sockets::is_datagram;
use super::{Held, RANGES, Ranges, errno, pages_of, set_errno, touch};
use crate::region::{PAGE, Region};
use crate::{pins, sigbus, sys};

/// Whether a call that read a whole piece goes on with the next.
#[derive(Clone, Copy)]
pub(super) enum More {
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
pub(super) enum Data<'a> {
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
pub(super) fn piece_end(region: &Region, data: &Data, from: usize, total: usize) -> usize {
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
pub(super) fn lazy_call(
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
pub(super) fn lazy_call_with(
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
