//! Which memory enters the region besides the allocator's blocks: reservations, their commits
//! and uncommits, and the ranges the kernel keeps instead.
//!
//! Managed runtimes (HotSpot, V8, Go's) reserve their heaps as `PROT_NONE` address space and
//! commit parts of it in place later: `mmap(MAP_FIXED, PROT_READ|PROT_WRITE)` or `mprotect`;
//! they uncommit with `mmap(MAP_FIXED, PROT_NONE)` or `madvise(MADV_DONTNEED)`. A reservation
//! (an anonymous private `PROT_NONE` mapping, a hint honoured where it is free) is placed in
//! the region's reservation area, after the heap's `-M`: address space only, registered with
//! the rest of the region and inaccessible. Its commits are emulated like any anonymous
//! memory: faulted, counted, evicted and fetched; an uncommit frees their local and far pages.
//!
//! The rule for `-M`: reserved address space costs nothing; committed pages count against it
//! with the heap's live blocks, and a commit that would take the two past `-M` ends the program
//! as an exhausted `-M` does.
//!
//! Only read-write memory is emulated (`UFFDIO_MOVE` moves pages between read-write mappings
//! only, and the handler copies pages it can read). A range of the region made executable,
//! read-only or inaccessible while it holds pages, or replaced by a mapping of a file, is
//! taken out: its evicted pages are brought back, it leaves the runtime's accounting and is
//! unregistered, and the kernel keeps it (the recorder counts it in `memory_unemulated`).
//! Made read-write again, it is registered again and the pages it holds are taken back in;
//! unmapped or uncommitted, it returns to the region's own state.
//!
//! Lock order: this module's lock, then the region's.

use std::ffi::c_void;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

use spinning_top::Spinlock;

use crate::region::{PAGE, Region};
use crate::{sys, uffd};

/// The page is not in the region's own state: the kernel keeps it (unregistered, or a mapping
/// the runtime does not emulate), or, in the heap, it is not read-write.
const OUT: u8 = 1;
/// A reservation-area page committed read-write: counts against `-M`.
const COMMITTED: u8 = 2;

/// Free extents of the reservation area at most (address-ordered, merged); a free that would
/// need more leaves its address space unused (counted in `lost_bytes`).
const EXTENT_CAP: usize = 1 << 16;

/// The reservation area's bookkeeping, outside the region.
struct Maps {
    /// One byte per region page: `OUT`, `COMMITTED`.
    flags: *mut u8,
    /// Free extents `(start, end)`, sorted, disjoint, not adjacent.
    extents: *mut (usize, usize),
    len: usize,
    /// Address space freed but not recorded (the extent table was full).
    lost_bytes: usize,
}

// SAFETY: the pointers refer to this module's private mappings, used under `MAPS`'s lock (the
// flags also read without it by the thread that holds it across fork, see `outside`).
unsafe impl Send for Maps {}

static MAPS: Spinlock<Option<Maps>> = Spinlock::new(None);
/// `Maps::flags`, for `outside` in a forked child (which holds the lock) and the cheap check
/// on `free`.
static FLAGS: std::sync::atomic::AtomicPtr<u8> =
    std::sync::atomic::AtomicPtr::new(std::ptr::null_mut());
/// Pages committed in reservations now.
static COMMITTED_PAGES: AtomicU64 = AtomicU64::new(0);
/// Pages taken out now.
static OUT_PAGES: AtomicU64 = AtomicU64::new(0);

/// Sets up the bookkeeping for `region`'s reservation area; without it (no address space for
/// it), reservations go to the kernel as before.
pub fn init(region: &Region) {
    let (start, end) = region.reserve_area();
    if start >= end {
        return;
    }
    let flags = sys::map_anonymous(region.pages, libc::MAP_NORESERVE);
    let extents_bytes = EXTENT_CAP * std::mem::size_of::<(usize, usize)>();
    let extents = sys::map_anonymous(extents_bytes, libc::MAP_NORESERVE);
    if flags.is_null() || extents.is_null() {
        return;
    }
    region.publish_own(2, flags as usize, region.pages);
    region.publish_own(3, extents as usize, extents_bytes);
    let extents = extents.cast::<(usize, usize)>();
    // SAFETY: the table just mapped has room for EXTENT_CAP entries.
    unsafe { extents.write((start, end)) };
    FLAGS.store(flags, Relaxed);
    *MAPS.lock() = Some(Maps {
        flags,
        extents,
        len: 1,
        lost_bytes: 0,
    });
}

/// Whether region page `idx` is one the kernel keeps (taken out of emulation). Read without
/// the lock: by a forked child's only thread, which holds it since `lock_for_fork`.
pub fn outside(idx: usize) -> bool {
    let flags = FLAGS.load(Relaxed);
    // SAFETY: the flags map has a byte per region page; callers pass region page indexes.
    !flags.is_null() && unsafe { *flags.add(idx) } & OUT != 0
}

/// Bytes committed in reservations now.
pub fn committed_bytes() -> usize {
    COMMITTED_PAGES.load(Relaxed) as usize * PAGE
}

/// Takes the lock across fork (see `crate::before_fork`).
pub fn lock_for_fork() {
    std::mem::forget(MAPS.lock());
}

/// Releases it after fork, in parent and child.
pub fn unlock_after_fork() {
    // SAFETY: `lock_for_fork` left the lock held by this thread.
    unsafe { MAPS.force_unlock() };
}

/// The region, when placement is on and the caller may use it (not a handler thread, which
/// never touches the region it serves).
fn region() -> Option<&'static Region> {
    if FLAGS.load(Relaxed).is_null() || crate::on_handler_thread() {
        return None;
    }
    crate::region_ready()
}

/// Whether `flags` describe anonymous private memory the runtime may hold (not a thread's
/// stack, which grows or is guarded on its own, nor huge pages).
fn anonymous_private(flags: i32) -> bool {
    flags & libc::MAP_ANONYMOUS != 0
        && flags & 3 == libc::MAP_PRIVATE
        && flags & (libc::MAP_STACK | libc::MAP_GROWSDOWN | libc::MAP_HUGETLB) == 0
}

const RW: i32 = libc::PROT_READ | libc::PROT_WRITE;

fn set_errno(code: i32) {
    // SAFETY: the thread's errno location is always valid.
    unsafe { *libc::__errno_location() = code };
}

/// `[start, end)` of `[addr, addr + len)` in whole pages, the end rounded up as the kernel
/// does; `None` if it wraps.
fn pages_of(addr: usize, len: usize) -> Option<(usize, usize)> {
    let end = addr.checked_add(len)?.checked_next_multiple_of(PAGE)?;
    Some((addr & !(PAGE - 1), end))
}

/// The part of `[start, end)` in `[lo, hi)`, if any.
fn clip(start: usize, end: usize, lo: usize, hi: usize) -> Option<(usize, usize)> {
    let (s, e) = (start.max(lo), end.min(hi));
    (s < e).then_some((s, e))
}

/// `mmap`, for what placement handles: reservations (anonymous private `PROT_NONE` mappings
/// without `MAP_FIXED`), and every `MAP_FIXED` mapping over the region. `None`: the caller
/// goes on as before (the heap for read-write anonymous memory, else the kernel).
pub fn map(
    addr: *mut c_void,
    len: usize,
    prot: i32,
    flags: i32,
    fd: i32,
    offset: i64,
) -> Option<*mut c_void> {
    if len == 0 {
        return None;
    }
    let region = region()?;
    let (start, end) = pages_of(addr as usize, len)?;
    let region_end = region.base + region.pages * PAGE;
    if flags & libc::MAP_FIXED != 0 {
        clip(start, end, region.base, region_end)?;
        let mut maps = MAPS.lock();
        let maps = maps.as_mut()?;
        let inside = start >= region.base && end <= region_end;
        if inside && anonymous_private(flags) && (prot == RW || prot == libc::PROT_NONE) {
            if prot == RW {
                commit(region, maps, start, end);
            } else {
                uncommit(region, maps, start, end);
            }
            return Some(start as *mut c_void);
        }
        // Replaced by memory the runtime does not emulate: the kernel's from now on.
        let (s, e) = clip(start, end, region.base, region_end)?;
        region.discard(s, e - s);
        mark(region, maps, s, e, OUT, true);
        release_commits(region, maps, s, e);
        return Some(kernel_map(addr, len, prot, flags, fd, offset));
    }
    if prot != libc::PROT_NONE || !anonymous_private(flags) {
        return None;
    }
    let (area_start, area_end) = region.reserve_area();
    let mut guard = MAPS.lock();
    let maps = guard.as_mut()?;
    let size = end - start;
    if flags & libc::MAP_FIXED_NOREPLACE != 0 {
        clip(start, end, region.base, region_end)?;
        if start < area_start || end > area_end || !take_at(maps, start, size) {
            set_errno(libc::EEXIST);
            return Some(libc::MAP_FAILED);
        }
        reserved(region, start, size);
        return Some(start as *mut c_void);
    }
    let hinted =
        (start >= area_start && end <= area_end && take_at(maps, start, size)).then_some(start);
    match hinted.or_else(|| take_first(maps, size)) {
        Some(at) => {
            reserved(region, at, size);
            Some(at as *mut c_void)
        }
        None => {
            drop(guard);
            region
                .shared()
                .placement
                .reserved_outside
                .fetch_add(size as u64, Relaxed);
            report_area_full(size);
            None
        }
    }
}

/// Address space `[at, at + size)` was reserved.
fn reserved(region: &Region, at: usize, size: usize) {
    region.note_span_used(at + size);
    region
        .shared()
        .placement
        .reserved
        .fetch_add(size as u64, Relaxed);
}

/// `munmap` of memory in the region's reservation area, or of a range of the heap the kernel
/// keeps (which returns to the heap's own state first). `None`: the caller goes on (the heap's
/// blocks, or the kernel).
pub fn unmap(addr: *mut c_void, len: usize) -> Option<i32> {
    let region = region()?;
    let (start, end) = pages_of(addr as usize, len)?;
    let region_end = region.base + region.pages * PAGE;
    let (area_start, _) = region.reserve_area();
    clip(start, end, region.base, region_end)?;
    let mut guard = MAPS.lock();
    let maps = guard.as_mut()?;
    if let Some((s, e)) = clip(start, end, region.base, area_start) {
        restore(region, maps, s, e, RW);
    }
    let Some((s, e)) = clip(start, end, area_start, region_end) else {
        // Only the heap: its blocks are the caller's to free.
        return None;
    };
    if start < region.base || end > region_end {
        // Beyond the region too: the outside parts are the kernel's to unmap.
        for (os, oe) in [(start, region.base), (region_end, end)] {
            if os < oe {
                // SAFETY: a range outside the region, as the program asked.
                unsafe { libc::syscall(libc::SYS_munmap, os, oe - os) };
            }
        }
    }
    uncommit(region, maps, s, e);
    give_back(region, maps, s, e - s);
    if start < area_start {
        // The heap part, as the caller would: its pages read as zeros.
        region.discard(start.max(region.base), area_start - start.max(region.base));
    }
    Some(0)
}

/// `mprotect` over the region: read-write commits (taking back what the kernel kept), any
/// other protection takes the range out of emulation if it holds pages. `None` outside.
pub fn protect(addr: *mut c_void, len: usize, prot: i32) -> Option<i32> {
    let region = region()?;
    let (start, end) = pages_of(addr as usize, len)?;
    let region_end = region.base + region.pages * PAGE;
    let (s, e) = clip(start, end, region.base, region_end)?;
    let (area_start, _) = region.reserve_area();
    let mut guard = MAPS.lock();
    let maps = guard.as_mut()?;
    if prot == RW {
        // SAFETY: the program's own range, as it asked.
        let ret = unsafe { libc::syscall(libc::SYS_mprotect, addr, len, prot) };
        if ret == 0 {
            take_back(region, maps, s, e);
            if let Some((cs, ce)) = clip(s, e, area_start, region_end) {
                add_commits(region, maps, cs, ce);
            }
        }
        return Some(kernel_status(ret));
    }
    // Inaccessible reserved memory with nothing in it is the area's own state; the heap's
    // blocks must be read-write, else they are the kernel's until unmapped or freed.
    let stateless_none = prot == libc::PROT_NONE && s >= area_start && !region.has_pages(s, e - s);
    if !stateless_none {
        take_out(region, maps, s, e);
    }
    release_commits(region, maps, s, e);
    // SAFETY: the program's own range, as it asked.
    let ret = unsafe { libc::syscall(libc::SYS_mprotect, addr, len, prot) };
    Some(kernel_status(ret))
}

/// `madvise` over the region (from its first address): dropping advice forgets the pages (the
/// kernel drops those it keeps), advice about forks and huge pages is ignored (the region is
/// one whole, adopted whole by a forked child, and accounted per 4 KiB page), other advice goes
/// to the kernel. `None` outside the region.
pub fn advise(addr: *mut c_void, len: usize, advice: i32) -> Option<i32> {
    let region = crate::region_any().filter(|r| r.contains(addr as usize))?;
    match advice {
        libc::MADV_DONTNEED | libc::MADV_FREE | libc::MADV_REMOVE => {
            region.discard(addr as usize, len);
            if let (Some((start, end)), Some(maps)) = (pages_of(addr as usize, len), &*MAPS.lock())
            {
                let mut at = start;
                while let Some((s, e)) = next_run(region, maps, at, end, OUT, true) {
                    at = e;
                    sys::madvise(s, e - s, advice);
                }
            }
            Some(0)
        }
        libc::MADV_HUGEPAGE
        | libc::MADV_DONTFORK
        | libc::MADV_DOFORK
        | libc::MADV_WIPEONFORK
        | libc::MADV_KEEPONFORK => Some(0),
        _ => Some(kernel_status(sys::madvise(addr as usize, len, advice))),
    }
}

/// Before a freed heap block of `len` bytes at `ptr` is reused: whole pages of it the program
/// made other than read-write return to the heap's own state.
pub fn before_reuse(ptr: *mut u8, len: usize) {
    let flags = FLAGS.load(Relaxed);
    let Some(region) = crate::region_any().filter(|_| !flags.is_null()) else {
        return;
    };
    let (start, end) = (
        (ptr as usize).next_multiple_of(PAGE),
        (ptr as usize).saturating_add(len) & !(PAGE - 1),
    );
    let Some((s, e)) = clip(start, end, region.base, region.reserve_area().0) else {
        return;
    };
    let first = (s - region.base) / PAGE;
    // SAFETY: indexes of region pages, within the flags map. A live block's flags change only
    // by its owner, who is freeing it.
    let any_out = (first..(e - region.base) / PAGE).any(|i| unsafe { *flags.add(i) } & OUT != 0);
    if any_out && let Some(maps) = MAPS.lock().as_mut() {
        restore(region, maps, s, e, RW);
    }
}

/// Commits `[start, end)` read-write, as fresh zero pages.
fn commit(region: &Region, maps: &mut Maps, start: usize, end: usize) {
    region.discard(start, end - start);
    restore(region, maps, start, end, RW);
    // SAFETY: a range of the region, made accessible as the program asked.
    unsafe { libc::syscall(libc::SYS_mprotect, start, end - start, RW) };
    let (area_start, area_end) = region.reserve_area();
    if let Some((s, e)) = clip(start, end, area_start, area_end) {
        add_commits(region, maps, s, e);
    }
}

/// Uncommits `[start, end)`: its pages are gone, local and far, and it is inaccessible.
fn uncommit(region: &Region, maps: &mut Maps, start: usize, end: usize) {
    region.discard(start, end - start);
    restore(region, maps, start, end, libc::PROT_NONE);
    // SAFETY: a range of the region, made inaccessible as the program asked.
    unsafe { libc::syscall(libc::SYS_mprotect, start, end - start, libc::PROT_NONE) };
    let (area_start, _) = region.reserve_area();
    if start < area_start {
        // Heap pages that are not read-write are not the heap's own state.
        mark(region, maps, start, end.min(area_start), OUT, true);
    }
    release_commits(region, maps, start, end);
}

/// Counts the reservation pages of `[start, end)` that were not yet committed (or taken out) as
/// committed; ends the program if that takes its memory past `-M`.
fn add_commits(region: &Region, maps: &mut Maps, start: usize, end: usize) {
    let mut added = 0u64;
    for idx in page_indexes(region, start, end) {
        // SAFETY: region page indexes, within the flags map.
        let flag = unsafe { &mut *maps.flags.add(idx) };
        if *flag & (COMMITTED | OUT) == 0 {
            *flag |= COMMITTED;
            added += 1;
        }
    }
    let committed = COMMITTED_PAGES.fetch_add(added, Relaxed) + added;
    publish_committed(region, committed);
    let shared = region.shared();
    let heap = shared
        .memory_allocd
        .load(Relaxed)
        .saturating_sub(shared.memory_freed.load(Relaxed));
    let limit = (region.heap_pages * PAGE) as u64;
    if added > 0 && heap + committed * PAGE as u64 > limit {
        out_of_memory(region, added as usize * PAGE, heap);
    }
}

/// The reservation pages of `[start, end)` are committed no more.
fn release_commits(region: &Region, maps: &mut Maps, start: usize, end: usize) {
    let mut released = 0u64;
    for idx in page_indexes(region, start, end) {
        // SAFETY: region page indexes, within the flags map.
        let flag = unsafe { &mut *maps.flags.add(idx) };
        if *flag & COMMITTED != 0 {
            *flag &= !COMMITTED;
            released += 1;
        }
    }
    let committed = COMMITTED_PAGES.fetch_sub(released, Relaxed) - released;
    publish_committed(region, committed);
}

fn publish_committed(region: &Region, pages: u64) {
    region
        .shared()
        .placement
        .committed
        .store(pages * PAGE as u64, Relaxed);
}

/// Region page indexes of `[start, end)` (both within the region).
fn page_indexes(region: &Region, start: usize, end: usize) -> std::ops::Range<usize> {
    (start - region.base) / PAGE..(end - region.base) / PAGE
}

/// Sets (`on`) or clears `flag` over `[start, end)`; keeps the count of pages taken out.
fn mark(region: &Region, maps: &mut Maps, start: usize, end: usize, flag: u8, on: bool) {
    let mut changed = 0u64;
    for idx in page_indexes(region, start, end) {
        // SAFETY: region page indexes, within the flags map.
        let f = unsafe { &mut *maps.flags.add(idx) };
        if (*f & flag != 0) != on {
            *f ^= flag;
            changed += 1;
        }
    }
    if flag == OUT && changed > 0 {
        let out = if on {
            OUT_PAGES.fetch_add(changed, Relaxed) + changed
        } else {
            OUT_PAGES.fetch_sub(changed, Relaxed) - changed
        };
        region
            .shared()
            .placement
            .taken_out
            .store(out * PAGE as u64, Relaxed);
    }
}

/// The first run of pages in `[from, end)` whose `flag` is `on`, as addresses.
fn next_run(
    region: &Region,
    maps: &Maps,
    from: usize,
    end: usize,
    flag: u8,
    on: bool,
) -> Option<(usize, usize)> {
    let (from, end) = clip(from, end, region.base, region.base + region.pages * PAGE)?;
    // SAFETY: region page indexes, within the flags map.
    let is = |idx: usize| (unsafe { *maps.flags.add(idx) } & flag != 0) == on;
    let mut indexes = page_indexes(region, from, end);
    let first = indexes.find(|&i| is(i))?;
    let last = indexes
        .find(|&i| !is(i))
        .unwrap_or((end - region.base) / PAGE);
    Some((region.base + first * PAGE, region.base + last * PAGE))
}

/// Returns the pages of `[start, end)` the kernel keeps to the region's own state, mapped
/// afresh (zeros) with protection `prot` and registered.
fn restore(region: &Region, maps: &mut Maps, start: usize, end: usize, prot: i32) {
    let mut at = start;
    while let Some((s, e)) = next_run(region, maps, at, end, OUT, true) {
        at = e;
        let flags = libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE | libc::MAP_FIXED;
        // SAFETY: a range of the region, replaced by fresh memory of the region's kind.
        let mapped = unsafe { sys::map(s, e - s, prot, flags, -1, 0) };
        if !mapped.is_null() && (!region.managed() || register(region, s, e)) {
            mark(region, maps, s, e, OUT, false);
        }
    }
}

/// Registers `[start, end)` with the region's userfaultfd, as the region is.
fn register(region: &Region, start: usize, end: usize) -> bool {
    let mode = uffd::REGISTER_MODE_MISSING | uffd::REGISTER_MODE_WP;
    uffd::register(region.uffd(), start as u64, (end - start) as u64, mode).is_ok()
}

/// Takes `[start, end)` out of emulation, contents kept: the kernel keeps it from now on.
fn take_out(region: &Region, maps: &mut Maps, start: usize, end: usize) {
    region.forget(start, end - start);
    if region.managed() {
        let mut at = start;
        while let Some((s, e)) = next_run(region, maps, at, end, OUT, false) {
            at = e;
            let _ = uffd::unregister(region.uffd(), s as u64, (e - s) as u64);
        }
    }
    mark(region, maps, start, end, OUT, true);
}

/// Takes the anonymous ranges of `[start, end)` the kernel kept back into emulation with the
/// pages they hold (made read-write again); a mapping of a file stays the kernel's.
fn take_back(region: &Region, maps: &mut Maps, start: usize, end: usize) {
    let mut at = start;
    while let Some((s, e)) = next_run(region, maps, at, end, OUT, true) {
        at = e;
        if !region.managed() || register(region, s, e) {
            mark(region, maps, s, e, OUT, false);
            region.adopt(s, e - s);
        }
    }
}

/// The `mmap` system call itself.
fn kernel_map(
    addr: *mut c_void,
    len: usize,
    prot: i32,
    flags: i32,
    fd: i32,
    offset: i64,
) -> *mut c_void {
    // SAFETY: the program's arguments, as it asked; the kernel validates them.
    let ret = unsafe { libc::syscall(libc::SYS_mmap, addr, len, prot, flags, fd, offset) };
    if ret < 0 {
        libc::MAP_FAILED
    } else {
        ret as *mut c_void
    }
}

/// A raw system call's result as libc gives it: 0, or -1 with errno set.
fn kernel_status(ret: i64) -> i32 {
    if ret < 0 {
        set_errno(
            std::io::Error::last_os_error()
                .raw_os_error()
                .unwrap_or(libc::EINVAL),
        );
        -1
    } else {
        0
    }
}

/// Takes `[at, at + size)` from the free extents if it is all free there.
fn take_at(maps: &mut Maps, at: usize, size: usize) -> bool {
    let end = at + size;
    let extents = extents(maps);
    let Some(i) = extents.iter().position(|&(s, e)| s <= at && end <= e) else {
        return false;
    };
    let (s, e) = extents[i];
    match (s == at, e == end) {
        (true, true) => remove_extent(maps, i),
        (true, false) => extents_mut(maps)[i].0 = end,
        (false, true) => extents_mut(maps)[i].1 = at,
        (false, false) => {
            if maps.len == EXTENT_CAP {
                return false;
            }
            extents_mut(maps)[i].1 = at;
            insert_extent(maps, i + 1, (end, e));
        }
    }
    true
}

/// Takes `size` bytes from the lowest free extent that has them.
fn take_first(maps: &mut Maps, size: usize) -> Option<usize> {
    let i = extents(maps).iter().position(|&(s, e)| e - s >= size)?;
    let at = extents(maps)[i].0;
    take_at(maps, at, size).then_some(at)
}

/// Gives `[at, at + size)` back to the free extents.
fn give_back(region: &Region, maps: &mut Maps, at: usize, size: usize) {
    let freed = free_extent(maps, at, size);
    let placement = &region.shared().placement;
    let _ = placement
        .reserved
        .fetch_update(Relaxed, Relaxed, |r| Some(r.saturating_sub(freed as u64)));
}

/// Adds `[at, at + size)` to the free extents, merged with those it overlaps or touches;
/// returns the bytes that were not free already.
fn free_extent(maps: &mut Maps, at: usize, size: usize) -> usize {
    let (mut start, mut end) = (at, at + size);
    let mut freed = size;
    let i = extents(maps).partition_point(|&(_, e)| e < start);
    while i < maps.len {
        let (s, e) = extents(maps)[i];
        if s > end {
            break;
        }
        let overlap = e.min(at + size).saturating_sub(s.max(at));
        freed -= overlap.min(freed);
        start = start.min(s);
        end = end.max(e);
        remove_extent(maps, i);
    }
    if maps.len == EXTENT_CAP {
        maps.lost_bytes += end - start;
    } else {
        insert_extent(maps, i, (start, end));
    }
    freed
}

fn extents(maps: &Maps) -> &[(usize, usize)] {
    // SAFETY: `len` entries of the table are initialised.
    unsafe { std::slice::from_raw_parts(maps.extents, maps.len) }
}

fn extents_mut(maps: &mut Maps) -> &mut [(usize, usize)] {
    // SAFETY: as above, borrowed mutably through `maps`.
    unsafe { std::slice::from_raw_parts_mut(maps.extents, maps.len) }
}

fn remove_extent(maps: &mut Maps, i: usize) {
    extents_mut(maps).copy_within(i + 1.., i);
    maps.len -= 1;
}

/// Inserts at `i` (the table has room).
fn insert_extent(maps: &mut Maps, i: usize, extent: (usize, usize)) {
    maps.len += 1;
    let table = extents_mut(maps);
    table.copy_within(i..table.len() - 1, i + 1);
    table[i] = extent;
}

/// Says once that a reservation did not fit the area: what the program commits in it is
/// not emulated (the recorder's `memory_unemulated` shows how much).
fn report_area_full(size: usize) {
    static TOLD: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
    if !TOLD.swap(true, Relaxed) {
        let mut digits = [0; 20];
        sys::write_stderr(&[
            b"fltrace: far memory: a reservation of ",
            sys::decimal((size >> 20) as u64, &mut digits),
            b" MB does not fit the reservation area (FLTRACE_RT_RESERVE_MB): the kernel \
              keeps it, and what is committed in it is not emulated (said once)\n",
        ]);
    }
}

fn out_of_memory(region: &Region, size: usize, heap: u64) -> ! {
    region.shared().m_exhausted.store(1, Relaxed);
    let (mut a, mut b, mut c, mut d) = ([0; 20], [0; 20], [0; 20], [0; 20]);
    sys::write_stderr(&[
        b"fltrace: out of far memory: committing ",
        sys::decimal(size as u64, &mut a),
        b" bytes of reserved memory takes the program past -M ",
        sys::decimal(((region.heap_pages * PAGE) >> 20) as u64, &mut b),
        b" MB (",
        sys::decimal((committed_bytes() >> 20) as u64, &mut c),
        b" MB committed, ",
        sys::decimal(heap >> 20, &mut d),
        b" MB of heap blocks); raise -M\n",
    ]);
    // SAFETY: ending the process at once is the documented behaviour.
    unsafe { libc::_exit(12) }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn maps_over(start: usize, end: usize) -> Maps {
        let extents = sys::map_anonymous(
            EXTENT_CAP * std::mem::size_of::<(usize, usize)>(),
            libc::MAP_NORESERVE,
        )
        .cast::<(usize, usize)>();
        assert!(!extents.is_null());
        // SAFETY: the fresh table has room.
        unsafe { extents.write((start, end)) };
        Maps {
            flags: std::ptr::null_mut(),
            extents,
            len: 1,
            lost_bytes: 0,
        }
    }

    /// Reservations come from the lowest free space, a hint is honoured where free, and space
    /// given back (in pieces, partly twice) merges into whole extents again.
    #[test]
    fn extents_take_and_merge() {
        let mut maps = maps_over(0x10000, 0x20000);
        assert_eq!(take_first(&mut maps, 0x4000), Some(0x10000));
        assert_eq!(take_first(&mut maps, 0x2000), Some(0x14000));
        assert!(take_at(&mut maps, 0x18000, 0x1000));
        assert!(!take_at(&mut maps, 0x18000, 0x1000));
        assert_eq!(
            extents(&maps),
            &[(0x16000, 0x18000), (0x19000, 0x20000)][..]
        );
        assert_eq!(take_first(&mut maps, 0x3000), Some(0x19000));
        // Trimmed like a runtime that over-reserves for alignment: head and tail apart, one
        // piece given back twice (counted once).
        assert_eq!(free_extent(&mut maps, 0x10000, 0x1000), 0x1000);
        assert_eq!(free_extent(&mut maps, 0x11000, 0x3000), 0x3000);
        assert_eq!(free_extent(&mut maps, 0x12000, 0x1000), 0);
        assert_eq!(free_extent(&mut maps, 0x14000, 0x2000), 0x2000);
        assert_eq!(free_extent(&mut maps, 0x18000, 0x1000), 0x1000);
        assert_eq!(free_extent(&mut maps, 0x19000, 0x3000), 0x3000);
        assert_eq!(extents(&maps), &[(0x10000, 0x20000)][..]);
    }
}
