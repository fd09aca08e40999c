//! The managed region: every page's state, fault resolution, and eviction to the backing store.
//!
//! The region is one range of address space of `-M` MB registered with userfaultfd for missing
//! and write-protect faults; a second range of the same size is the backing store that emulates
//! far memory, page for page. Page state lives outside both (the handler must never fault on
//! the region itself).
//!
//! A missing page is filled from the store if it was evicted, else with zeros; a page filled
//! for a read is mapped write-protected so that the first write is seen (it becomes dirty).
//! When more than the local limit is resident, pages are evicted in the policy's order: a dirty
//! page is write-protected *before* it is copied, so no write can slip in between copy and drop,
//! then dropped with `MADV_DONTNEED`; a clean page is just dropped.
//!
//! Where the kernel has `UFFDIO_MOVE` (and the policy needs no write tracking), pages are
//! instead moved between region and store, in runs: no copy, no write-protection, no page
//! held in both, and a write racing an eviction either goes with the page or faults after.
//! The store is then registered for missing faults too (a move's destination must be), so
//! nothing may read a store page that is not there: the handler only moves from it, or copies
//! from a page it knows is present.

use std::sync::atomic::{AtomicBool, AtomicI32, AtomicPtr, Ordering::Relaxed, Ordering::Release};

use fltrace_runtime_abi::{LOG_LEN, Shared, kind};
use spinning_top::Spinlock;

use crate::breakdown::{add, now_ns};
use crate::sys;
use crate::uffd::{self, Msg};

mod placing;

/// The page size the runtime manages (x86_64 base pages).
pub const PAGE: usize = 4096;

const RESIDENT: u8 = 1;
const DIRTY: u8 = 2;
const IN_STORE: u8 = 4;
const REFERENCED: u8 = 8;
/// Served for a thread that has not faulted since: the kernel retries the access only once
/// the thread runs again, without a second fault event, so evicting the page before that
/// would take another fill for the same access (a first touch seen as a fetch, one fault
/// counted twice, and at worst a thread that never gets past the access).
const PINNED: u8 = 16;

/// Threads whose last served page is remembered (by thread id modulo this).
const PIN_SLOTS: usize = 256;

/// How victims are chosen.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Policy {
    /// In the order pages were brought in (the original tool's policy).
    Fifo,
    /// FIFO with a second chance for pages written since they were last considered: writes
    /// are what the runtime can observe (through write-protect faults); reads are invisible.
    Clock,
    /// FIFO with a second chance for pages that came back soon after they were evicted: a
    /// page fetched within `-L` evictions of its own eviction would have stayed with twice the
    /// local memory, so it is likely hot. Costs no faults of its own (the fetch is seen anyway).
    Refault,
}

/// Page metadata and the eviction queue, behind the region lock.
struct Pages {
    state: *mut u8,
    /// Ticket of each page's newest queue entry; older entries are stale.
    ticket: *mut u32,
    queue: *mut (u32, u32),
    queue_cap: usize,
    head: usize,
    len: usize,
    next_ticket: u32,
    resident: usize,
    /// The eviction count at each page's last eviction (`Refault`).
    evicted_at: *mut u32,
    /// Pages evicted so far.
    evictions: u32,
    /// Resident pages whose far copy is kept (clean, `IN_STORE`).
    clean_copies: usize,
    /// Evicted pages held in the store (`IN_STORE`, not resident).
    far: usize,
    /// Store pages whose copy is to be released, released together (one `MADV_DONTNEED` per
    /// run, so one TLB shootdown per batch rather than per page).
    releases: [u32; RELEASE_BATCH],
    release_len: usize,
    /// Per thread (slot `tid % PIN_SLOTS`): (thread id, the page last served for it), the
    /// page `PINNED` until that thread's next fault.
    pins: [(u32, u32); PIN_SLOTS],
}

/// Store copies released together.
const RELEASE_BATCH: usize = 64;

// SAFETY: the raw pointers refer to the runtime's private metadata mapping, only touched
// under the region lock.
unsafe impl Send for Pages {}

/// The managed region.
pub struct Region {
    /// First address of the region.
    pub base: usize,
    /// Size in pages: the heap's, then the reservation area's.
    pub pages: usize,
    /// Pages of the heap (`-M`), the region's first part; the reservation area follows.
    pub heap_pages: usize,
    /// Pages from the base up to the end of the highest reservation ever made: what a forked
    /// child's adoption looks through.
    span_used: std::sync::atomic::AtomicUsize,
    store: usize,
    /// The userfaultfd, or -1 when unmanaged (no limit); a forked child replaces it with its
    /// own.
    uffd: AtomicI32,
    limit: usize,
    policy: Policy,
    inner: Spinlock<Pages>,
    /// The page shared with the recorder (a forked child maps its own).
    shared: AtomicPtr<Shared>,
    /// Evict a batch ahead of need after serving faults (`FLTRACE_RT_EVICT_AHEAD`).
    evict_ahead: bool,
    /// Free local pages the eviction ahead of need makes.
    ahead: usize,
    /// Most clean resident pages whose far copy is kept.
    clean_cap: usize,
    /// Pages move between region and store (`UFFDIO_MOVE`) instead of being copied.
    moving: bool,
    /// Set in a child forked without exec: its copy of the region is plain memory (the
    /// kernel does not carry the userfaultfd registration over), so nothing is managed.
    detached: AtomicBool,
}

// SAFETY: `shared` points to a mapping that lives for the process; all mutation of page
// metadata is under `inner`, and the counters are atomics.
unsafe impl Sync for Region {}
// SAFETY: as above.
unsafe impl Send for Region {}

static ZERO_PAGE: [u8; PAGE] = [0; PAGE];

/// Most pages evicted in one batch: one write-protect and one `MADV_DONTNEED` (one TLB
/// shootdown) per run of contiguous pages in it.
pub const EVICT_BATCH: usize = 128;

/// Tuning of a region beyond its size and policy.
#[derive(Debug, Clone, Copy)]
pub struct Tuning {
    /// Evict a batch ahead of need after serving faults.
    pub evict_ahead: bool,
    /// Most clean resident pages whose far copy is kept, percent of the limit.
    pub clean_copies_percent: usize,
    /// Move pages with `UFFDIO_MOVE` (the userfaultfd must have `FEATURE_MOVE`).
    pub move_pages: bool,
    /// Pages of address space after the heap for the program's reservations
    /// (`crate::placement`): mapped `PROT_NONE`, registered with the rest.
    pub reserve_pages: usize,
}

impl Default for Tuning {
    fn default() -> Self {
        Tuning {
            evict_ahead: true,
            clean_copies_percent: 10,
            move_pages: false,
            reserve_pages: 0,
        }
    }
}

/// Attempts of a move the kernel asks to retry (`EAGAIN`) before giving up on it for now.
const MOVE_TRIES: usize = 1000;

/// Says once on stderr that a move failed in a way the runtime does not expect.
fn report_move_error(error: &std::io::Error) {
    static REPORTED: AtomicBool = AtomicBool::new(false);
    if !REPORTED.swap(true, Relaxed) {
        let mut code = [0; 20];
        sys::write_stderr(&[
            b"fltrace: far memory: UFFDIO_MOVE failed (errno ",
            sys::decimal(error.raw_os_error().unwrap_or(0) as u64, &mut code),
            b"); the page stays where it is and the move is tried again\n",
        ]);
    }
}

/// Calls `f(first, count)` for each run of consecutive indexes in sorted `indexes`.
fn for_runs(indexes: &[usize], mut f: impl FnMut(usize, usize)) {
    let mut i = 0;
    while i < indexes.len() {
        let mut n = 1;
        while i + n < indexes.len() && indexes[i + n] == indexes[i] + n {
            n += 1;
        }
        f(indexes[i], n);
        i += n;
    }
}

impl Region {
    /// Maps a region of `heap_pages` pages followed by `tuning.reserve_pages` for reservations,
    /// a store of the same size and the metadata; `uffd` is registered over the region unless
    /// it is -1. Returns `None` when the address space cannot be had.
    pub fn create(
        heap_pages: usize,
        limit: usize,
        policy: Policy,
        uffd: i32,
        shared: *const Shared,
        tuning: Tuning,
    ) -> Option<Region> {
        let pages = heap_pages.checked_add(tuning.reserve_pages)?;
        let bytes = pages.checked_mul(PAGE)?;
        let base = sys::map_anonymous(bytes, libc::MAP_NORESERVE);
        if base.is_null() {
            return None;
        }
        // One fault and one eviction per base page: the accounting is per 4 KiB.
        sys::madvise(base as usize, bytes, libc::MADV_NOHUGEPAGE);
        // Reserved address space is inaccessible until the program commits it.
        if tuning.reserve_pages > 0 {
            let reserve = base as usize + heap_pages * PAGE;
            // SAFETY: the reservation area of the mapping just made.
            unsafe {
                libc::mprotect(
                    reserve as *mut libc::c_void,
                    tuning.reserve_pages * PAGE,
                    libc::PROT_NONE,
                )
            };
        }
        let store = if uffd >= 0 {
            sys::map_anonymous(bytes, libc::MAP_NORESERVE)
        } else {
            base
        };
        // Resident pages never exceed the limit, at most the heap's pages: the queue holds at
        // most one live entry per resident page, half its capacity.
        let queue_cap = heap_pages * 2;
        let meta_bytes = pages + pages * 4 + queue_cap * 8 + pages * 4;
        let meta = sys::map_anonymous(meta_bytes, libc::MAP_NORESERVE);
        if store.is_null() || meta.is_null() {
            return None;
        }
        if uffd >= 0 {
            let mode = uffd::REGISTER_MODE_MISSING | uffd::REGISTER_MODE_WP;
            if uffd::register(uffd, base as u64, bytes as u64, mode).is_err() {
                return None;
            }
        }
        // Clock learns of writes through write-protection, which a moved page loses.
        let moving = uffd >= 0
            && tuning.move_pages
            && policy != Policy::Clock
            && uffd::register(
                uffd,
                store as u64,
                bytes as u64,
                uffd::REGISTER_MODE_MISSING,
            )
            .is_ok();
        let inner = Pages {
            state: meta,
            // SAFETY: offsets within the metadata mapping of `meta_bytes`, 4- and 8-aligned
            // because `pages` is a multiple of 8 (the region is whole megabytes).
            ticket: unsafe { meta.add(pages) }.cast(),
            // SAFETY: as above.
            queue: unsafe { meta.add(pages * 5) }.cast(),
            queue_cap,
            head: 0,
            len: 0,
            next_ticket: 1,
            resident: 0,
            // SAFETY: as above, after the queue.
            evicted_at: unsafe { meta.add(pages * 5 + queue_cap * 8) }.cast(),
            evictions: 0,
            clean_copies: 0,
            far: 0,
            releases: [0; RELEASE_BATCH],
            release_len: 0,
            pins: [(0, 0); PIN_SLOTS],
        };
        let limit = limit.max(1);
        let region = Region {
            base: base as usize,
            pages,
            heap_pages,
            span_used: std::sync::atomic::AtomicUsize::new(heap_pages),
            store: store as usize,
            uffd: AtomicI32::new(uffd),
            limit,
            policy,
            evict_ahead: tuning.evict_ahead,
            ahead: (limit / 64).min(EVICT_BATCH),
            clean_cap: limit.saturating_mul(tuning.clean_copies_percent.min(100)) / 100,
            moving,
            inner: Spinlock::new(inner),
            shared: AtomicPtr::new(shared.cast_mut()),
            detached: AtomicBool::new(false),
        };
        region.shared().limit.store((limit * PAGE) as u64, Relaxed);
        region
            .shared()
            .region_start
            .store(region.base as u64, Relaxed);
        region.shared().region_len.store(bytes as u64, Relaxed);
        region.publish_placement(
            store as usize,
            meta as usize,
            meta_bytes,
            tuning.reserve_pages,
        );
        Some(region)
    }

    /// The shared counters.
    pub fn shared(&self) -> &Shared {
        // SAFETY: `shared` points to a live, initialised mapping (see `create`).
        unsafe { &*self.shared.load(Relaxed) }
    }

    /// The userfaultfd, or -1 when unmanaged.
    pub fn uffd(&self) -> i32 {
        self.uffd.load(Relaxed)
    }

    /// Whether `addr` lies in the region (the heap or the reservation area).
    pub fn contains(&self, addr: usize) -> bool {
        addr >= self.base && addr < self.base + self.pages * PAGE
    }

    /// Whether pages move between region and store (`UFFDIO_MOVE`).
    pub fn moves_pages(&self) -> bool {
        self.moving
    }

    /// Whether pages are managed (a limit is enforced).
    pub fn managed(&self) -> bool {
        self.uffd() >= 0 && !self.detached.load(Relaxed)
    }

    /// Resolves one page fault reported by the userfaultfd, whose message was read at
    /// `read_ns` (CLOCK_MONOTONIC).
    pub fn handle_fault(&self, msg: &Msg, read_ns: u64) {
        let addr = (msg.address as usize) & !(PAGE - 1);
        if !self.contains(addr) {
            let _ = uffd::wake(self.uffd(), addr as u64, PAGE as u64);
            return;
        }
        let idx = (addr - self.base) / PAGE;
        let shared = self.shared();
        let breakdown = &shared.breakdown;
        let locking = now_ns();
        let mut pages = self.inner.lock();
        add(&breakdown.lock_wait_ns, now_ns() - locking);
        // A thread faults again only once it has run past its previous fault: that page
        // may go now.
        Self::unpin(&mut pages, msg.ptid);
        // SAFETY: idx < pages, within the state array.
        let state = unsafe { &mut *pages.state.add(idx) };
        if *state & RESIDENT != 0 {
            // A missing page the runtime holds local: filled again if the program dropped it.
            if msg.flags & uffd::PAGEFAULT_FLAG_WP == 0
                && self.refill_dropped(&mut pages, msg, idx, read_ns)
            {
                return;
            }
            // SAFETY: idx < pages, within the state array.
            let state = unsafe { &mut *pages.state.add(idx) };
            // A write to a clean page, reported as such or as a write to the missing page
            // that another thread's read brought in meanwhile: resolved here either way, so
            // the second case costs no second round trip.
            let write_to_clean = msg.flags & uffd::PAGEFAULT_FLAG_WP != 0
                || (msg.flags & uffd::PAGEFAULT_FLAG_WRITE != 0 && *state & DIRTY == 0);
            if write_to_clean {
                // First write to a clean page: from now on it differs from the store, whose
                // copy is released (eviction writes a fresh one).
                if *state & IN_STORE != 0 {
                    *state &= !IN_STORE;
                    pages.clean_copies -= 1;
                    self.queue_release(&mut pages, idx);
                }
                // SAFETY: idx < pages.
                let state = unsafe { &mut *pages.state.add(idx) };
                *state |= DIRTY | self.written_reference();
                Self::pin(&mut pages, msg.ptid, idx);
                // Counted and logged before the thread runs again (see `log`).
                shared.faults.fetch_add(1, Relaxed);
                shared.faults_wp.fetch_add(1, Relaxed);
                let entry = self.log(msg.ptid, addr, kind::WRPROTECT, read_ns);
                let filling = now_ns();
                let _ = uffd::write_protect(self.uffd(), addr as u64, PAGE as u64, false);
                add(&breakdown.fill_ns, now_ns() - filling);
                self.log_done(entry);
            } else {
                // Another thread's fault brought it in first. Logged too: the thread's fault
                // has its row in the trace.
                breakdown.resolved_elsewhere.fetch_add(1, Relaxed);
                Self::pin(&mut pages, msg.ptid, idx);
                self.log(msg.ptid, addr, kind::WAKE, read_ns);
                let _ = uffd::wake(self.uffd(), addr as u64, PAGE as u64);
            }
            return;
        }
        // Missing, or write-protected but evicted meanwhile (the thread retries after wake):
        // either way the page comes back. Room is made first, while the faulting thread still
        // waits: local memory never exceeds the limit, and a single-threaded program sees the
        // same evictions on every run.
        let write = msg.flags & (uffd::PAGEFAULT_FLAG_WRITE | uffd::PAGEFAULT_FLAG_WP) != 0;
        let evicting = now_ns();
        if self.evict_over_limit(&mut pages, self.limit.saturating_sub(1)) {
            add(&breakdown.evict_ns, now_ns() - evicting);
        }
        // SAFETY: idx < pages, within the state array.
        let state = unsafe { &mut *pages.state.add(idx) };
        let fetched = *state & IN_STORE != 0;
        // Counted and logged before the fill wakes the thread (see `log`).
        let counted = [
            &shared.faults,
            if write {
                &shared.faults_w
            } else {
                &shared.faults_r
            },
            if fetched {
                &shared.faults_fetch
            } else {
                &shared.faults_zp
            },
        ];
        for counter in counted {
            counter.fetch_add(1, Relaxed);
        }
        let entry = self.log(
            msg.ptid,
            addr,
            if fetched { kind::FETCH } else { kind::ZERO },
            read_ns,
        );
        let filling = now_ns();
        let copied = if self.moving {
            self.fill_moving(addr, idx, fetched)
        } else {
            let src = if fetched {
                self.store + idx * PAGE
            } else {
                ZERO_PAGE.as_ptr() as usize
            };
            uffd::copy(self.uffd(), addr as u64, src as u64, PAGE as u64, !write)
        };
        add(&breakdown.fill_ns, now_ns() - filling);
        if copied.is_err() {
            // Not filled: the thread faults again. The fault logged above only woke it, and
            // counts so; the recorder may have read the entry as a fill already, which flags
            // the row as the retry's entry will anyway.
            for counter in counted {
                counter.fetch_sub(1, Relaxed);
            }
            breakdown.resolved_elsewhere.fetch_add(1, Relaxed);
            self.log_retract(entry, addr);
            let _ = uffd::wake(self.uffd(), addr as u64, PAGE as u64);
            return;
        }
        self.log_done(entry);
        // A page fetched for a write is dirty at once: its far copy is stale, and released.
        // One fetched for a read keeps its copy (evicting it again costs no copy) while the
        // copies held twice stay within their bound; beyond it the copy goes, and the page
        // counts as dirty (copied if evicted).
        // A moved page left no copy behind.
        let keep_copy = fetched && !write && !self.moving && pages.clean_copies < self.clean_cap;
        if fetched && !keep_copy && !self.moving {
            self.queue_release(&mut pages, idx);
        }
        let refaulted = self.policy == Policy::Refault && fetched && {
            // SAFETY: idx < pages.
            let evicted_at = unsafe { *pages.evicted_at.add(idx) };
            (pages.evictions.wrapping_sub(evicted_at) as usize) <= self.limit
        };
        // SAFETY: idx < pages.
        let state = unsafe { &mut *pages.state.add(idx) };
        *state = RESIDENT
            | if keep_copy { IN_STORE } else { 0 }
            | if write {
                DIRTY | self.written_reference()
            } else if (fetched && !keep_copy) || self.moving {
                // Its only copy is here now: eviction must write it out (a page filled
                // without write-protection, when moving, is treated as written).
                DIRTY
            } else {
                0
            }
            | if refaulted { REFERENCED } else { 0 };
        pages.clean_copies += usize::from(keep_copy);
        pages.far -= usize::from(fetched);
        Self::pin(&mut pages, msg.ptid, idx);
        self.enqueue(&mut pages, idx);
        pages.resident += 1;
        let resident = (pages.resident * PAGE) as u64;
        shared.resident.store(resident, Relaxed);
        shared.memory_used.fetch_max(resident, Relaxed);
        shared.far.store((pages.far * PAGE) as u64, Relaxed);
    }

    /// Fills the missing page `idx` at `addr` when pages move: an evicted page is moved back
    /// from the store, a new one filled with zeros, both writable (nothing needs to know
    /// whether they are written: eviction moves them either way).
    fn fill_moving(&self, addr: usize, idx: usize, fetched: bool) -> std::io::Result<()> {
        let zeros = || {
            uffd::copy(
                self.uffd(),
                addr as u64,
                ZERO_PAGE.as_ptr() as u64,
                PAGE as u64,
                false,
            )
        };
        if !fetched {
            return zeros();
        }
        let far = self.store + idx * PAGE;
        let error = match self.move_retrying(addr, far, PAGE, 0) {
            (_, None) => return Ok(()),
            (_, Some(e)) => e,
        };
        match error.raw_os_error() {
            // Brought in meanwhile: the waiting threads only need waking.
            Some(libc::EEXIST) => uffd::wake(self.uffd(), addr as u64, PAGE as u64),
            // Nothing in the store: the page was a hole when evicted (given back to the
            // kernel behind the allocator's back), so it reads as zeros.
            Some(libc::ENOENT) => zeros(),
            // The store page is there but cannot move (shared with a child after fork):
            // copied, and the store's copy dropped. Only then: copying from a store page that
            // is not there would fault into this very handler and hang it.
            Some(libc::EBUSY) => {
                let copied = uffd::copy(self.uffd(), addr as u64, far as u64, PAGE as u64, false);
                if copied.is_ok() {
                    sys::madvise(far, PAGE, libc::MADV_DONTNEED);
                }
                copied
            }
            // Left missing: the thread faults again and the move is tried again.
            _ => {
                report_move_error(&error);
                Err(error)
            }
        }
    }

    /// `UFFDIO_MOVE` of `len` bytes from `src` to `dst`, tried again while the kernel says
    /// to (`EAGAIN` without progress: a page in migration, a page table changing under it).
    fn move_retrying(
        &self,
        dst: usize,
        src: usize,
        len: usize,
        mode: u64,
    ) -> (u64, Option<std::io::Error>) {
        for _ in 0..MOVE_TRIES {
            let (moved, error) =
                uffd::move_pages(self.uffd(), dst as u64, src as u64, len as u64, mode);
            match &error {
                Some(e) if moved == 0 && e.raw_os_error() == Some(libc::EAGAIN) => {
                    // SAFETY: sched_yield has no preconditions.
                    unsafe { libc::sched_yield() };
                }
                _ => return (moved, error),
            }
        }
        (0, Some(std::io::Error::from_raw_os_error(libc::EAGAIN)))
    }

    /// Moves the victims (sorted, resident) to the store, a run of contiguous pages per call;
    /// returns how many of them could be neither moved nor copied and stay resident (first in
    /// `victims`, reordered).
    fn move_out(&self, victims: &mut [usize]) -> usize {
        let mut kept = [0usize; EVICT_BATCH];
        let mut kept_len = 0;
        for_runs(victims, |first, n| {
            let mut done = 0;
            while done < n {
                let at = first + done;
                let (moved, error) = self.move_retrying(
                    self.store + at * PAGE,
                    self.base + at * PAGE,
                    (n - done) * PAGE,
                    uffd::MOVE_MODE_ALLOW_SRC_HOLES,
                );
                done += moved as usize / PAGE;
                if let Some(e) = error.as_ref().filter(|_| moved == 0) {
                    // A page shared with a child after fork cannot move: copied out (it is
                    // there, so the copy cannot fault). Any other page stays resident.
                    let busy = e.raw_os_error() == Some(libc::EBUSY);
                    if !busy {
                        report_move_error(e);
                    }
                    if !busy || !self.copy_out(at) {
                        kept[kept_len] = at;
                        kept_len += 1;
                    }
                    done += 1;
                }
            }
        });
        let kept = &kept[..kept_len];
        victims.sort_unstable_by_key(|v| !kept.contains(v));
        kept_len
    }

    /// Evicts the resident page `idx` by copying it to the store: write-protected first so
    /// that no write is lost, then copied into the (registered) store page, then dropped.
    /// False, and the page left resident and writable, if the copy fails.
    fn copy_out(&self, idx: usize) -> bool {
        let (addr, far) = ((self.base + idx * PAGE) as u64, self.store + idx * PAGE);
        let _ = uffd::write_protect(self.uffd(), addr, PAGE as u64, true);
        // A stale store page would make the copy a no-op (EEXIST).
        sys::madvise(far, PAGE, libc::MADV_DONTNEED);
        if uffd::copy(self.uffd(), far as u64, addr, PAGE as u64, false).is_ok() {
            sys::madvise(addr as usize, PAGE, libc::MADV_DONTNEED);
            true
        } else {
            let _ = uffd::write_protect(self.uffd(), addr, PAGE as u64, false);
            false
        }
    }

    /// Logs a handled fault for the recorder and returns the entry's slot. Called before the
    /// call that lets the faulting thread run again: once it runs, the program may end (a
    /// child's `_exit` after its last read) and take this thread with it, and the fault's row
    /// would be left without its entry.
    fn log(&self, tid: u32, addr: usize, kind: u32, read_ns: u64) -> usize {
        let shared = self.shared();
        let head = shared.log_head.load(Relaxed);
        let slot = head as usize % LOG_LEN;
        let entry = &shared.log[slot];
        entry.tid.store(u64::from(tid), Relaxed);
        entry
            .page_and_kind
            .store(addr as u64 | u64::from(kind), Relaxed);
        entry.read_ns.store(read_ns, Relaxed);
        entry.done_ns.store(now_ns(), Relaxed);
        // Release: the entry is complete before the reader sees the new head.
        shared.log_head.store(head + 1, Release);
        slot
    }

    /// The fault logged in `slot` is resolved now (the recorder reads entries rounds later).
    fn log_done(&self, slot: usize) {
        self.shared().log[slot].done_ns.store(now_ns(), Relaxed);
    }

    /// The fill logged in `slot` failed: the fault only woke its thread, to fault again.
    fn log_retract(&self, slot: usize, addr: usize) {
        self.shared().log[slot]
            .page_and_kind
            .store(addr as u64 | u64::from(kind::WAKE), Relaxed);
        self.log_done(slot);
    }

    fn enqueue(&self, pages: &mut Pages, idx: usize) {
        if pages.len == pages.queue_cap {
            self.compact(pages);
        }
        let ticket = pages.next_ticket;
        pages.next_ticket = pages.next_ticket.wrapping_add(1).max(1);
        // SAFETY: idx < pages and the slot index < queue_cap.
        unsafe {
            *pages.ticket.add(idx) = ticket;
            *pages.queue.add((pages.head + pages.len) % pages.queue_cap) = (idx as u32, ticket);
        }
        pages.len += 1;
    }

    /// Drops stale queue entries (pages freed or re-queued since); live entries are at most
    /// one per page, half the capacity.
    fn compact(&self, pages: &mut Pages) {
        let mut kept = 0;
        for i in 0..pages.len {
            // SAFETY: indexes within the queue and the ticket array.
            unsafe {
                let (idx, ticket) = *pages.queue.add((pages.head + i) % pages.queue_cap);
                if *pages.ticket.add(idx as usize) == ticket
                    && *pages.state.add(idx as usize) & RESIDENT != 0
                {
                    *pages.queue.add((pages.head + kept) % pages.queue_cap) = (idx, ticket);
                    kept += 1;
                }
            }
        }
        pages.len = kept;
    }

    /// Evicts until at most `target` pages are resident. Victims are taken in batches of up to
    /// [`EVICT_BATCH`] so that neighbouring pages share one write-protect and one
    /// `MADV_DONTNEED` call: a sequential scan evicts runs of contiguous pages.
    fn evict_over_limit(&self, pages: &mut Pages, target: usize) -> bool {
        if pages.resident <= target {
            return false;
        }
        let shared = self.shared();
        let breakdown = &shared.breakdown;
        shared.evict_ops.fetch_add(1, Relaxed);
        // Going a little below the target makes the next faults free of eviction work.
        let target = target.saturating_sub(self.ahead);
        // At most half the queue gets a second chance per call: a sweep that went all the way
        // round would evict the very pages it just spared, before they could be written again.
        let mut chances = pages.len / 2;
        // Pinned pages are passed over at most this often per call: when every resident page
        // is pinned (a limit of fewer pages than faulting threads), eviction goes on anyway.
        let mut pins_spared = PIN_SLOTS;
        while pages.resident > target && pages.len > 0 {
            let mut victims = [0usize; EVICT_BATCH];
            let mut count = 0;
            while count < EVICT_BATCH && pages.resident - count > target && pages.len > 0 {
                // SAFETY: the queue is non-empty; indexes are within their arrays.
                let (idx, ticket) = unsafe { *pages.queue.add(pages.head) };
                pages.head = (pages.head + 1) % pages.queue_cap;
                pages.len -= 1;
                let idx = idx as usize;
                // SAFETY: idx < pages.
                let (state, current) =
                    unsafe { (&mut *pages.state.add(idx), *pages.ticket.add(idx)) };
                if current != ticket || *state & RESIDENT == 0 {
                    continue;
                }
                if *state & PINNED != 0 && pins_spared > 0 {
                    pins_spared -= 1;
                    if self.pinned_thread_lives(pages, idx) {
                        // Its thread has not run since the page was served: back in the
                        // queue, as if brought in now.
                        self.enqueue(pages, idx);
                        continue;
                    }
                    *state &= !PINNED;
                }
                if self.policy != Policy::Fifo && *state & REFERENCED != 0 && chances > 0 {
                    chances -= 1;
                    // Second chance; under clock a dirty page is protected again so that the
                    // next write is seen.
                    *state &= !REFERENCED;
                    if self.policy == Policy::Clock && *state & DIRTY != 0 {
                        let addr = self.base + idx * PAGE;
                        let _ = uffd::write_protect(self.uffd(), addr as u64, PAGE as u64, true);
                    }
                    self.enqueue(pages, idx);
                    continue;
                }
                victims[count] = idx;
                count += 1;
            }
            let victims = &mut victims[..count];
            victims.sort_unstable();
            if self.moving {
                let moving = now_ns();
                let kept = self.move_out(victims);
                add(&breakdown.evict_copy_ns, now_ns() - moving);
                for &idx in &victims[..kept] {
                    self.enqueue(pages, idx);
                }
                for &idx in &victims[kept..] {
                    // SAFETY: idx < pages.
                    let state = unsafe { &mut *pages.state.add(idx) };
                    *state = (*state & !(RESIDENT | DIRTY | REFERENCED | PINNED)) | IN_STORE;
                    // SAFETY: idx < pages.
                    unsafe { *pages.evicted_at.add(idx) = pages.evictions };
                    pages.evictions = pages.evictions.wrapping_add(1);
                }
                let evicted = count - kept;
                shared.evict_writes.fetch_add(evicted as u64, Relaxed);
                pages.resident -= evicted;
                pages.far += evicted;
                shared.far.store((pages.far * PAGE) as u64, Relaxed);
                shared.evict_pages_done.fetch_add(evicted as u64, Relaxed);
                if evicted == 0 {
                    // Nothing would move: stop rather than spin on the same pages.
                    break;
                }
                continue;
            }
            // Block writers on the dirty victims first, then copy: no write can be lost between.
            let protecting = now_ns();
            for_runs(victims, |first, n| {
                // SAFETY: indexes < pages.
                let dirty = |i: usize| unsafe { *pages.state.add(i) } & DIRTY != 0;
                if (first..first + n).any(dirty) {
                    let _ = uffd::write_protect(
                        self.uffd(),
                        (self.base + first * PAGE) as u64,
                        (n * PAGE) as u64,
                        true,
                    );
                }
            });
            let copying = now_ns();
            add(&breakdown.evict_wp_ns, copying - protecting);
            for &idx in victims.iter() {
                // SAFETY: idx < pages.
                let state = unsafe { &mut *pages.state.add(idx) };
                if *state & IN_STORE != 0 {
                    // Its copy stays as the far page; no longer held twice.
                    pages.clean_copies -= 1;
                }
                if *state & DIRTY != 0 {
                    let addr = self.base + idx * PAGE;
                    // SAFETY: both pages are mapped and PAGE bytes long; the region page is
                    // resident (reading it cannot fault) and no longer writable.
                    unsafe {
                        std::ptr::copy_nonoverlapping(
                            addr as *const u8,
                            (self.store + idx * PAGE) as *mut u8,
                            PAGE,
                        )
                    };
                    *state |= IN_STORE;
                    shared.evict_writes.fetch_add(1, Relaxed);
                }
                *state &= !(RESIDENT | DIRTY | REFERENCED | PINNED);
                pages.far += usize::from(*state & IN_STORE != 0);
                // SAFETY: idx < pages.
                unsafe { *pages.evicted_at.add(idx) = pages.evictions };
                pages.evictions = pages.evictions.wrapping_add(1);
            }
            let dropping = now_ns();
            add(&breakdown.evict_copy_ns, dropping - copying);
            for_runs(victims, |first, n| {
                sys::madvise(self.base + first * PAGE, n * PAGE, libc::MADV_DONTNEED);
            });
            add(&breakdown.evict_drop_ns, now_ns() - dropping);
            pages.resident -= count;
            shared.evict_pages_done.fetch_add(count as u64, Relaxed);
            shared.far.store((pages.far * PAGE) as u64, Relaxed);
        }
        true
    }

    /// Pins page `idx`, just served for thread `tid`, until that thread faults again; the page
    /// that last held the thread's slot, another thread's, loses its pin.
    fn pin(pages: &mut Pages, tid: u32, idx: usize) {
        let slot = tid as usize % PIN_SLOTS;
        let (old_tid, old_idx) = pages.pins[slot];
        if old_tid != 0 && old_tid != tid {
            // SAFETY: indexes in the slots are < pages.
            unsafe { *pages.state.add(old_idx as usize) &= !PINNED };
        }
        pages.pins[slot] = (tid, idx as u32);
        // SAFETY: idx < pages.
        unsafe { *pages.state.add(idx) |= PINNED };
    }

    /// Thread `tid` faults again: the page last served for it is no longer pinned.
    fn unpin(pages: &mut Pages, tid: u32) {
        let slot = tid as usize % PIN_SLOTS;
        let (old_tid, old_idx) = pages.pins[slot];
        if old_tid == tid {
            pages.pins[slot] = (0, 0);
            // SAFETY: indexes in the slots are < pages.
            unsafe { *pages.state.add(old_idx as usize) &= !PINNED };
        }
    }

    /// Whether the pin of page `idx` still stands: the thread it was served for has not
    /// faulted since and still exists (one that ended will never retry). Asked only when a
    /// pinned page reaches the head of the queue.
    fn pinned_thread_lives(&self, pages: &mut Pages, idx: usize) -> bool {
        let Some(slot) = pages
            .pins
            .iter()
            .position(|&(t, i)| t != 0 && i as usize == idx)
        else {
            return false;
        };
        let tid = pages.pins[slot].0;
        // SAFETY: tgkill with signal 0 only checks that the thread exists in this process.
        let lives = unsafe { libc::syscall(libc::SYS_tgkill, libc::getpid(), tid, 0) } == 0;
        if !lives {
            pages.pins[slot] = (0, 0);
        }
        lives
    }

    /// What a write marks besides dirty: a reference, for clock (its recency signal).
    fn written_reference(&self) -> u8 {
        if self.policy == Policy::Clock {
            REFERENCED
        } else {
            0
        }
    }

    /// Queues the release of the store's copy of page `idx`: a resident page that is dirty
    /// will get a fresh one if evicted, and keeping the stale one would count it twice in the
    /// process's memory.
    fn queue_release(&self, pages: &mut Pages, idx: usize) {
        if pages.release_len == RELEASE_BATCH {
            self.flush_releases(pages);
        }
        pages.releases[pages.release_len] = idx as u32;
        pages.release_len += 1;
    }

    /// Releases the queued store copies, contiguous ones in one call. A page evicted since it
    /// was queued has its fresh far copy there (it is `IN_STORE` again, or not resident):
    /// that one stays.
    fn flush_releases(&self, pages: &mut Pages) {
        let mut idxs = [0usize; RELEASE_BATCH];
        let mut count = 0;
        for i in 0..pages.release_len {
            let idx = pages.releases[i] as usize;
            // SAFETY: queued indexes are < pages.
            let state = unsafe { *pages.state.add(idx) };
            if state & RESIDENT != 0 && state & IN_STORE == 0 {
                idxs[count] = idx;
                count += 1;
            }
        }
        pages.release_len = 0;
        let idxs = &mut idxs[..count];
        idxs.sort_unstable();
        let mut previous = usize::MAX;
        let mut unique = 0;
        for i in 0..idxs.len() {
            if idxs[i] != previous {
                previous = idxs[i];
                idxs[unique] = idxs[i];
                unique += 1;
            }
        }
        for_runs(&idxs[..unique], |first, n| {
            sys::madvise(self.store + first * PAGE, n * PAGE, libc::MADV_DONTNEED);
        });
    }

    /// After serving a read's faults: releases the queued far copies, and evicts a batch if
    /// local memory is nearly full, so that the next faults find room without waiting.
    pub fn after_faults(&self) {
        if !self.managed() {
            return;
        }
        let mut pages = self.inner.lock();
        if pages.release_len > 0 {
            self.flush_releases(&mut pages);
        }
        if !self.evict_ahead || self.ahead == 0 {
            return;
        }
        // Evict when fewer than a quarter of the batch's pages are free, down to a batch free.
        if pages.resident + self.ahead / 4 >= self.limit {
            let before = pages.resident;
            let started = now_ns();
            if self.evict_over_limit(&mut pages, self.limit - 1) {
                let breakdown = &self.shared().breakdown;
                add(&breakdown.evict_ns, now_ns() - started);
                add(
                    &breakdown.evict_ahead_pages,
                    before.saturating_sub(pages.resident) as u64,
                );
            }
        }
    }

    /// Whether `len` more bytes fit in local memory with room to spare (a batch of eviction
    /// ahead). Freed blocks stay mapped while they do, as the program's own allocator would
    /// keep them; only under the limit are their pages given back (on free, and when a block
    /// is allocated again over them).
    pub fn has_room(&self, len: usize) -> bool {
        if !self.managed() {
            return true;
        }
        let resident = self.shared().resident.load(Relaxed) as usize / PAGE;
        resident + len.div_ceil(PAGE) + self.ahead < self.limit
    }

    /// Forgets the contents of the whole pages in `[addr, addr + len)`: they read as zeros
    /// afterwards, locally and in the store (free, `munmap`, `MADV_DONTNEED`).
    pub fn discard(&self, addr: usize, len: usize) {
        let start = (addr + PAGE - 1) & !(PAGE - 1);
        let end = (addr + len) & !(PAGE - 1);
        if start >= end || !self.contains(start) {
            return;
        }
        let end = end.min(self.base + self.pages * PAGE);
        if !self.managed() {
            sys::madvise(start, end - start, libc::MADV_DONTNEED);
            return;
        }
        let mut pages = self.inner.lock();
        let mut run_start = None;
        let mut had_store = false;
        for page in (start..end).step_by(PAGE) {
            let idx = (page - self.base) / PAGE;
            // SAFETY: idx < pages.
            let state = unsafe { &mut *pages.state.add(idx) };
            had_store |= *state & IN_STORE != 0;
            let resident = *state & RESIDENT != 0;
            if resident {
                pages.resident -= 1;
                if *state & IN_STORE != 0 {
                    pages.clean_copies -= 1;
                }
                run_start.get_or_insert(page);
            } else {
                pages.far -= usize::from(*state & IN_STORE != 0);
            }
            if !resident && let Some(s) = run_start.take() {
                sys::madvise(s, page - s, libc::MADV_DONTNEED);
            }
            *state = 0;
        }
        if let Some(s) = run_start {
            sys::madvise(s, end - s, libc::MADV_DONTNEED);
        }
        if had_store {
            // The far copies of memory given back are gone too, or the store would keep
            // every page ever evicted for the rest of the run.
            let offset = start - self.base;
            sys::madvise(self.store + offset, end - start, libc::MADV_DONTNEED);
        }
        self.shared()
            .resident
            .store((pages.resident * PAGE) as u64, Relaxed);
        self.shared().far.store((pages.far * PAGE) as u64, Relaxed);
    }

    /// Takes the page lock across fork: a handler thread holding it when the process is
    /// copied would leave the child's copy locked for ever. Evicted pages stay in the store,
    /// which the child inherits (a copy-on-write copy, as the region's resident pages).
    pub fn lock_for_fork(&self) {
        std::mem::forget(self.inner.lock());
    }

    /// After fork, in the parent: unlock.
    pub fn resume(&self) {
        // SAFETY: `lock_for_fork` left the lock held by this thread, which now releases it.
        unsafe { self.inner.force_unlock() };
    }

    /// After fork, in the child (its only thread, the page lock held since `lock_for_fork`):
    /// manages its copy of the region under the same limit, a budget of its own, with `uffd`,
    /// its own userfaultfd (the kernel does not carry the parent's registration over), and
    /// `shared`, its own page for the recorder. The child starts with the parent's pages where
    /// they were: resident ones (shared copy-on-write) count against its limit, evicted ones
    /// are fetched from its copy of the store when touched. False if `uffd` cannot be
    /// registered; the lock is then still held.
    pub fn adopt_child(&self, uffd: i32, shared: *const Shared) -> bool {
        let bytes = (self.pages * PAGE) as u64;
        let mode = uffd::REGISTER_MODE_MISSING | uffd::REGISTER_MODE_WP;
        // Not what the kernel keeps (ranges taken out of emulation, files mapped over
        // reservations): registering those would fail, and their pages are the child's as
        // they are.
        let used = self.span_in_use();
        let outside = |idx| crate::placement::outside(idx);
        if !self.register_placed(uffd, mode, 0, used, outside)
            || (used < self.pages
                && uffd::register(
                    uffd,
                    (self.base + used * PAGE) as u64,
                    ((self.pages - used) * PAGE) as u64,
                    mode,
                )
                .is_err())
            || (self.moving
                && uffd::register(uffd, self.store as u64, bytes, uffd::REGISTER_MODE_MISSING)
                    .is_err())
        {
            return false;
        }
        let parent_uffd = self.uffd.swap(uffd, Relaxed);
        if parent_uffd >= 0 {
            // The parent's userfaultfd: of no use here, and not to be inherited further.
            // SAFETY: closing the child's copy of the descriptor.
            unsafe { libc::close(parent_uffd) };
        }
        self.shared.store(shared.cast_mut(), Relaxed);
        // SAFETY: the lock is held by this thread since `lock_for_fork` (see `resume`); the
        // guard taken here replaces it.
        unsafe { self.inner.force_unlock() };
        let mut pages = self.inner.lock();
        // The parent's threads do not exist here.
        for slot in 0..PIN_SLOTS {
            let (tid, idx) = pages.pins[slot];
            if tid != 0 {
                // SAFETY: indexes in the slots are < pages.
                unsafe { *pages.state.add(idx as usize) &= !PINNED };
            }
            pages.pins[slot] = (0, 0);
        }
        // Runs of pages by what the child's copy needs: a page missing here must be missing
        // in the child too (anything the child touched before this registration was filled
        // by the kernel, not from the store), and a clean page must be write-protected again
        // (fork leaves the child's copy writable) so that its first write is seen.
        let clock = self.policy == Policy::Clock;
        let mut run: Option<(usize, bool)> = None;
        let flush = |run: (usize, bool), end: usize| {
            let (first, protect) = run;
            let (addr, len) = (self.base + first * PAGE, (end - first) * PAGE);
            if protect {
                let _ = uffd::write_protect(uffd, addr as u64, len as u64, true);
            } else {
                sys::madvise(addr, len, libc::MADV_DONTNEED);
            }
        };
        for idx in 0..used {
            // SAFETY: idx < pages.
            let state = unsafe { *pages.state.add(idx) };
            let resident = state & RESIDENT != 0;
            let wanted = if outside(idx) {
                None
            } else if !resident {
                Some(false)
            } else if !self.moving && (state & DIRTY == 0 || clock) {
                Some(true)
            } else {
                None
            };
            if run.map(|r| r.1) != wanted {
                if let Some(r) = run.take() {
                    flush(r, idx);
                }
                run = wanted.map(|w| (idx, w));
            }
        }
        if let Some(r) = run {
            flush(r, used);
        }
        let shared = self.shared();
        shared.limit.store((self.limit * PAGE) as u64, Relaxed);
        shared.region_start.store(self.base as u64, Relaxed);
        shared.region_len.store(bytes, Relaxed);
        let resident = (pages.resident * PAGE) as u64;
        shared.resident.store(resident, Relaxed);
        shared.memory_used.store(resident, Relaxed);
        shared.far.store((pages.far * PAGE) as u64, Relaxed);
        true
    }

    /// After fork, in a child that could not get a userfaultfd of its own: copies every
    /// evicted page back from its copy of the store (plain memory here) and runs unmanaged.
    pub fn detach_child(&self) {
        // SAFETY: the child's copy of the lock is held by its only thread (`lock_for_fork`);
        // the guard taken here replaces it.
        unsafe { self.inner.force_unlock() };
        let pages = self.inner.lock();
        for idx in 0..self.span_in_use() {
            // SAFETY: idx < pages.
            let state = unsafe { *pages.state.add(idx) };
            if state & IN_STORE != 0 && state & RESIDENT == 0 {
                // SAFETY: both pages are mapped, unregistered in this process, PAGE long.
                unsafe {
                    std::ptr::copy_nonoverlapping(
                        (self.store + idx * PAGE) as *const u8,
                        (self.base + idx * PAGE) as *mut u8,
                        PAGE,
                    )
                };
            }
        }
        drop(pages);
        self.detached.store(true, Relaxed);
        let parent_uffd = self.uffd();
        if parent_uffd >= 0 {
            // SAFETY: closing the child's copy of the parent's descriptor.
            unsafe { libc::close(parent_uffd) };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Runs of consecutive indexes are found, single ones too.
    #[test]
    fn finds_runs() {
        let mut runs = Vec::new();
        for_runs(&[1, 2, 3, 7, 9, 10], |first, n| runs.push((first, n)));
        assert_eq!(runs, vec![(1, 3), (7, 1), (9, 2)]);
    }
}
