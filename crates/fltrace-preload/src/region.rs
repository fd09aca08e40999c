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
//!
//! A fault is served ([`Region::serve`]) either by a handler thread that read it from the
//! userfaultfd (the faulting thread sleeps in the kernel meanwhile), or by the faulting thread
//! itself, from its `SIGBUS` handler (`UFFD_FEATURE_SIGBUS`, `crate::sigbus`): then no thread
//! sleeps or is woken for a fault. The page lock is held only for the bookkeeping and for
//! eviction batches; the fill itself (the ioctl that places the page) runs outside it, the
//! page marked `FILLING` meanwhile, so that threads faulting at once fill their pages at once.
//! The lock is taken in signal handlers: every other holder blocks signals while it holds it.

use std::sync::atomic::{
    AtomicBool, AtomicI32, AtomicPtr, AtomicU8, Ordering::Relaxed, Ordering::Release,
    Ordering::SeqCst,
};

use fltrace_runtime_abi::{LOG_LEN, Shared, kind};
use spinning_top::Spinlock;

use crate::breakdown::add;
use crate::sys;
use crate::uffd::{self, Msg};

mod eviction;
mod fork;
mod page_moves;
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
/// Being filled by a thread outside the page lock: another thread faulting on it waits for
/// the fill, and eviction does not see it (it is not in the queue yet).
const FILLING: u8 = 32;
/// Chosen for eviction (or, under clock, for write-protection again) and not done yet: a
/// system call that pins the page waits until it is, then brings it back (`crate::pins`).
const EVICTING: u8 = 64;
/// Given back (freed, unmapped) while being filled: the filler drops what it placed.
const DISCARDED: u8 = 128;

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

/// Page metadata and the eviction queue, behind the region lock. The page states
/// ([`Region::state`]) are atomics beside it: they change under the lock, and are read without
/// it by threads waiting for a fill or an eviction to end.
struct Pages {
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
    /// Each page's state bits, in the metadata mapping.
    states: *const AtomicU8,
    /// Per page, set when it is kept local for good (`make_local`): never evicted.
    local: *const AtomicU8,
    /// Pages kept local.
    local_pages: std::sync::atomic::AtomicUsize,
    /// Faults are served in the faulting thread (`SIGBUS`), not by handler threads.
    in_thread: bool,
    /// Why not, when not (`fltrace_runtime_abi::path_reason`).
    thread_reason: u64,
}

/// A fault to serve, from either path.
#[derive(Debug, Clone, Copy)]
pub struct Fault {
    /// The faulting address.
    pub addr: usize,
    /// The faulting thread.
    pub tid: u32,
    /// The access was a write.
    pub write: bool,
    /// The page was present and write-protected.
    pub wp: bool,
    /// When the fault reached its server (a handler's read of the message, or the start of
    /// the faulting thread's own handler), CLOCK_MONOTONIC ns.
    pub start_ns: u64,
}

// SAFETY: `shared` points to a mapping that lives for the process; all mutation of page
// metadata is under `inner`, and the counters are atomics.
unsafe impl Sync for Region {}
// SAFETY: as above.
unsafe impl Send for Region {}

static ZERO_PAGE: [u8; PAGE] = [0; PAGE];

/// Most pages evicted in one batch: one write-protect and one `MADV_DONTNEED` (one TLB
/// shootdown) per run of contiguous pages in it.
pub const EVICT_BATCH: usize = 512;

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
    /// Faults are served in the faulting thread (the userfaultfd has `FEATURE_SIGBUS`).
    pub in_thread: bool,
    /// Why not, when not (`fltrace_runtime_abi::path_reason`), for the recorder.
    pub thread_reason: u64,
}

impl Default for Tuning {
    fn default() -> Self {
        Tuning {
            evict_ahead: true,
            clean_copies_percent: 10,
            move_pages: false,
            reserve_pages: 0,
            in_thread: false,
            thread_reason: 0,
        }
    }
}

/// One step of waiting for another thread that is working (without sleeping: the waiter may
/// be in a signal handler, where a sleep on a futex would need that thread to wake it): spins
/// for about the time the page lock is held, then yields the CPU to a holder that was
/// preempted.
fn backoff(spins: &mut u32) {
    *spins = spins.saturating_add(1);
    if *spins < 4096 {
        std::hint::spin_loop();
    } else {
        // SAFETY: sched_yield has no preconditions.
        unsafe { libc::sched_yield() };
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
        // States, tickets, the queue, eviction counts, and a byte per page for memory kept
        // local (`make_local`).
        let meta_bytes = pages + pages * 4 + queue_cap * 8 + pages * 4 + pages;
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
            states: meta.cast(),
            // SAFETY: after the eviction counts, within the metadata mapping.
            local: unsafe { meta.add(pages * 9 + queue_cap * 8) }.cast(),
            local_pages: std::sync::atomic::AtomicUsize::new(0),
            in_thread: uffd >= 0 && tuning.in_thread,
            thread_reason: tuning.thread_reason,
        };
        // Half the limit may be held for system calls in progress at once.
        crate::pins::set_budget(limit / 2);
        // Said before where the region is: the recorder tells the path once it knows both.
        region.publish_path();
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

    /// Whether faults are served in the faulting thread (`SIGBUS`).
    pub fn in_thread(&self) -> bool {
        self.in_thread
    }

    /// Tells the recorder how faults are served, and on the handler-thread path why.
    fn publish_path(&self) {
        let shared = self.shared();
        let (path, reason) = if self.uffd() < 0 {
            (0, 0)
        } else if self.in_thread {
            (fltrace_runtime_abi::path::IN_THREAD, 0)
        } else {
            (fltrace_runtime_abi::path::THREADS, self.thread_reason)
        };
        shared.fault_path.store(path, Relaxed);
        shared.fault_path_reason.store(reason, Relaxed);
    }

    /// Page `idx`'s state bits.
    fn state(&self, idx: usize) -> &AtomicU8 {
        debug_assert!(idx < self.pages);
        // SAFETY: idx < pages, within the state array of the metadata mapping, which lives as
        // long as the region; AtomicU8 has the layout of u8.
        unsafe { &*self.states.add(idx) }
    }

    /// The page lock. Spins briefly, then yields the CPU to a holder that was preempted: it
    /// is taken in signal handlers, where sleeping on a futex would need a wake-up by the
    /// holder. Callers outside a handler (thread or signal) block signals first when faults
    /// are served in the thread ([`Region::lock_outside_handler`]).
    fn lock(&self) -> spinning_top::guard::SpinlockGuard<'_, Pages> {
        let mut spins = 0u32;
        loop {
            if let Some(guard) = self.inner.try_lock() {
                return guard;
            }
            backoff(&mut spins);
        }
    }

    /// The page lock taken by a program thread outside the `SIGBUS` handler (freeing memory,
    /// unmapping it, forking): with faults served in the thread, its signals are blocked while
    /// it holds the lock, since a signal handler of the program run meanwhile could fault on
    /// the region, and the `SIGBUS` handler would then wait for a lock its own thread holds.
    fn lock_outside_handler(
        &self,
    ) -> (
        Option<sys::SignalsBlocked>,
        spinning_top::guard::SpinlockGuard<'_, Pages>,
    ) {
        let blocked = self.in_thread.then(sys::SignalsBlocked::all);
        (blocked, self.lock())
    }

    /// Lets the threads waiting in the kernel on the page at `addr` retry (handler-thread
    /// path; in the thread, the faulting thread retries when its handler returns).
    fn wake(&self, addr: usize) {
        if !self.in_thread {
            let _ = uffd::wake(self.uffd(), addr as u64, PAGE as u64);
        }
    }

    /// Wakes the threads left waiting on faults already served (a lost wake), counted in
    /// `rt_stuck_wakes`: called by a handler idle for a poll's timeout.
    pub fn wake_stuck(&self) {
        let (start, len) = (self.base as u64, (self.pages * PAGE) as u64);
        let woken = uffd::wake_if_waiting(self.uffd(), start, len);
        if woken > 0 {
            self.shared()
                .breakdown
                .stuck_wakes
                .fetch_add(woken, Relaxed);
        }
    }

    /// Waits, without the lock, until page `idx` has none of the `bits`: a fill or an
    /// eviction by another thread, a few microseconds.
    fn wait_while(&self, idx: usize, bits: u8) {
        let mut spins = 0u32;
        while self.state(idx).load(SeqCst) & bits != 0 {
            backoff(&mut spins);
        }
    }

    /// The index of the page at `addr`, which lies in the region.
    pub fn page_index(&self, addr: usize) -> usize {
        (addr - self.base) / PAGE
    }

    /// Whether page `idx` is kept local for good.
    fn is_local(&self, idx: usize) -> bool {
        // SAFETY: idx < pages, within the metadata mapping; AtomicU8 has u8's layout.
        unsafe { &*self.local.add(idx) }.load(SeqCst) != 0
    }

    /// Whether the page at `addr` is in the region and kept local for good.
    pub fn is_local_addr(&self, addr: usize) -> bool {
        self.contains(addr) && self.is_local((addr - self.base) / PAGE)
    }

    /// Keeps the whole pages of `[addr, addr + len)` local for good, brought in now and
    /// writable, if that keeps all such pages within an eighth of the limit; false if not.
    /// For memory that the C library hands to the kernel itself (its stdio buffers, its
    /// directory streams): on the in-thread path the kernel's own access to a missing page
    /// fails (`EFAULT`), and no wrapper reaches those calls.
    pub fn make_local(&self, addr: usize, len: usize) -> bool {
        let start = addr & !(PAGE - 1);
        let end = (addr + len).next_multiple_of(PAGE);
        if !self.managed() || !self.contains(start) || end > self.base + self.pages * PAGE {
            return false;
        }
        let count = (end - start) / PAGE;
        let most = (self.limit / 8).max(16);
        let mut now = self.local_pages.load(Relaxed);
        loop {
            if now + count > most {
                return false;
            }
            match self
                .local_pages
                .compare_exchange(now, now + count, Relaxed, Relaxed)
            {
                Ok(_) => break,
                Err(seen) => now = seen,
            }
        }
        // Marked before the states are read, which eviction does the other way round (as a
        // system call's pin, `crate::pins`); then each page is brought in and made writable
        // by a write of this thread, a fault served like the program's.
        for idx in (start - self.base) / PAGE..(end - self.base) / PAGE {
            // SAFETY: as in `is_local`.
            unsafe { &*self.local.add(idx) }.store(1, SeqCst);
        }
        std::sync::atomic::fence(SeqCst);
        for page in (start..end).step_by(PAGE) {
            self.settle((page - self.base) / PAGE);
            crate::syscalls::touch(page, true);
        }
        true
    }

    /// For a system call's pin of page `idx`, published before: waits for an eviction of the
    /// page that began before the pin to end (it is done, or given up, a few microseconds
    /// later) and says whether the page is resident. One that is not, the caller's touch
    /// brings in; none can be evicted while the pin stands (`crate::pins`).
    pub fn settle(&self, idx: usize) -> bool {
        self.wait_while(idx, EVICTING);
        self.state(idx).load(SeqCst) & RESIDENT != 0
    }

    /// Resolves one page fault reported by the userfaultfd, whose message was read at
    /// `read_ns` (CLOCK_MONOTONIC).
    pub fn handle_fault(&self, msg: &Msg, read_ns: u64) {
        self.serve(&Fault {
            addr: msg.address as usize,
            tid: msg.ptid,
            write: msg.flags & uffd::PAGEFAULT_FLAG_WRITE != 0,
            wp: msg.flags & uffd::PAGEFAULT_FLAG_WP != 0,
            start_ns: read_ns,
        });
    }

    /// Resolves one page fault, on either path: the page is filled (from the store, or with
    /// zeros) or made writable, counted, logged for the recorder, and on the handler-thread
    /// path the faulting thread is woken.
    pub fn serve(&self, fault: &Fault) {
        let addr = fault.addr & !(PAGE - 1);
        if !self.contains(addr) {
            self.wake(addr);
            return;
        }
        let idx = (addr - self.base) / PAGE;
        let shared = self.shared();
        let breakdown = &shared.breakdown;
        let locking = sys::monotonic_ns_vdso();
        let mut pages = self.lock();
        add(&breakdown.lock_wait_ns, sys::monotonic_ns_vdso() - locking);
        // A thread faults again only once it has run past its previous fault: that page
        // may go now.
        self.unpin(&mut pages, fault.tid);
        let state = self.state(idx).load(Relaxed);
        if state & EVICTING != 0 {
            // Being written out by another thread, without the lock: once it is gone it is
            // fetched as any evicted page.
            drop(pages);
            self.wait_while(idx, EVICTING);
            return self.serve(fault);
        }
        if state & FILLING != 0 {
            // Another thread's fault is filling it, outside the lock: this one waits for
            // that fill and only retries. Logged: the thread's fault has its row.
            drop(pages);
            self.wait_while(idx, FILLING);
            let mut pages = self.lock();
            if self.state(idx).load(Relaxed) & RESIDENT != 0 {
                self.pin(&mut pages, fault.tid, idx);
            }
            drop(pages);
            breakdown.resolved_elsewhere.fetch_add(1, Relaxed);
            let entry = self.log(fault.tid, addr, kind::WAKE, fault.start_ns);
            self.log_done(entry);
            self.wake(addr);
            return;
        }
        if state & RESIDENT != 0 {
            // A missing page the runtime holds local: filled again if the program dropped it.
            if !fault.wp && self.refill_dropped(&mut pages, fault, idx) {
                return;
            }
            // A write to a clean page, reported as such or as a write to the missing page
            // that another thread's read brought in meanwhile: resolved here either way, so
            // the second case costs no second round trip.
            let write_to_clean = fault.wp || (fault.write && state & DIRTY == 0);
            if write_to_clean {
                // First write to a clean page: from now on it differs from the store, whose
                // copy is released (eviction writes a fresh one).
                if state & IN_STORE != 0 {
                    self.state(idx).fetch_and(!IN_STORE, Relaxed);
                    pages.clean_copies -= 1;
                    self.queue_release(&mut pages, idx);
                }
                self.state(idx)
                    .fetch_or(DIRTY | self.written_reference(), Relaxed);
                self.pin(&mut pages, fault.tid, idx);
                // Counted and logged before the thread runs again (see `log`).
                shared.faults.fetch_add(1, Relaxed);
                shared.faults_wp.fetch_add(1, Relaxed);
                let entry = self.log(fault.tid, addr, kind::WRPROTECT, fault.start_ns);
                // Pinned for this thread until it faults again: no eviction takes the page
                // before the protection is lifted, outside the lock.
                drop(pages);
                let filling = sys::monotonic_ns_vdso();
                let _ = uffd::unprotect(self.uffd(), addr as u64, PAGE as u64);
                add(&breakdown.fill_ns, sys::monotonic_ns_vdso() - filling);
                self.log_done(entry);
            } else {
                // Another thread's fault brought it in first. Logged too: the thread's fault
                // has its row in the trace.
                breakdown.resolved_elsewhere.fetch_add(1, Relaxed);
                self.pin(&mut pages, fault.tid, idx);
                drop(pages);
                let entry = self.log(fault.tid, addr, kind::WAKE, fault.start_ns);
                self.log_done(entry);
                self.wake(addr);
            }
            return;
        }
        // Missing, or write-protected but evicted meanwhile (the thread retries after wake):
        // either way the page comes back. Room is made first, while the faulting thread still
        // waits: local memory never exceeds the limit, and a single-threaded program sees the
        // same evictions on every run.
        let write = fault.write || fault.wp;
        let evicting = sys::monotonic_ns_vdso();
        let (mut pages, evicted) = self.evict_over_limit(pages, self.limit.saturating_sub(1));
        if evicted {
            add(&breakdown.evict_ns, sys::monotonic_ns_vdso() - evicting);
        }
        let state = self.state(idx).load(Relaxed);
        if state & (RESIDENT | FILLING | EVICTING) != 0 {
            // Brought in (or being brought in) by another thread while the lock was let go
            // for the eviction: served as if found so.
            drop(pages);
            return self.serve(fault);
        }
        let fetched = state & IN_STORE != 0;
        // Counted and logged before the fill lets the thread run again (see `log`).
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
        // The page's place in local memory is taken now, so that threads filling at once
        // never go beyond the limit together.
        self.state(idx).store(state | FILLING, SeqCst);
        pages.resident += 1;
        drop(pages);
        let entry = self.log(
            fault.tid,
            addr,
            if fetched { kind::FETCH } else { kind::ZERO },
            fault.start_ns,
        );
        let filling = sys::monotonic_ns_vdso();
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
        add(&breakdown.fill_ns, sys::monotonic_ns_vdso() - filling);
        let mut pages = self.lock();
        let state = self.state(idx).load(Relaxed);
        if copied.is_err() {
            // Not filled: the thread faults again. The fault logged above only woke it, and
            // counts so; the recorder may have read the entry as a fill already, which flags
            // the row as the retry's entry will anyway.
            for counter in counted {
                counter.fetch_sub(1, Relaxed);
            }
            pages.resident -= 1;
            let discarded = state & DISCARDED != 0;
            self.state(idx)
                .store(if discarded { 0 } else { state & !FILLING }, SeqCst);
            if discarded {
                pages.far -= usize::from(fetched);
            }
            drop(pages);
            breakdown.resolved_elsewhere.fetch_add(1, Relaxed);
            self.log_retract(entry, addr);
            self.wake(addr);
            return;
        }
        if state & DISCARDED != 0 {
            // Given back while it was filled: it reads as zeros from now on, as asked.
            sys::madvise(addr, PAGE, libc::MADV_DONTNEED);
            pages.resident -= 1;
            pages.far -= usize::from(fetched);
            self.state(idx).store(0, SeqCst);
            self.publish(&pages);
            drop(pages);
            self.log_done(entry);
            return;
        }
        // A page fetched for a write is dirty at once: its far copy is stale, and released.
        // One fetched for a read keeps its copy (evicting it again costs no copy) while the
        // copies held twice stay within their bound; beyond it the copy goes, and the page
        // counts as dirty (copied if evicted).
        // A moved page left no copy behind.
        let keep_copy = fetched && !write && !self.moving && pages.clean_copies < self.clean_cap;
        let refaulted = self.policy == Policy::Refault && fetched && {
            // SAFETY: idx < pages.
            let evicted_at = unsafe { *pages.evicted_at.add(idx) };
            (pages.evictions.wrapping_sub(evicted_at) as usize) <= self.limit
        };
        let state = RESIDENT
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
        self.state(idx).store(state, SeqCst);
        if fetched && !keep_copy && !self.moving {
            self.queue_release(&mut pages, idx);
        }
        pages.clean_copies += usize::from(keep_copy);
        pages.far -= usize::from(fetched);
        self.pin(&mut pages, fault.tid, idx);
        self.enqueue(&mut pages, idx);
        self.publish(&pages);
        drop(pages);
        self.log_done(entry);
    }

    /// The counts of local and far memory, for the recorder.
    fn publish(&self, pages: &Pages) {
        let shared = self.shared();
        let resident = (pages.resident * PAGE) as u64;
        shared.resident.store(resident, Relaxed);
        shared.memory_used.fetch_max(resident, Relaxed);
        shared.far.store((pages.far * PAGE) as u64, Relaxed);
    }

    /// Logs a handled fault for the recorder and returns the entry's slot. Called before the
    /// call that lets the faulting thread run again: once it runs, the program may end (a
    /// child's `_exit` after its last read) and take this thread with it, and the fault's row
    /// would be left without its entry. Threads log at once (each serves its own faults): a
    /// slot is taken from the head, written, then marked written by its sequence number.
    fn log(&self, tid: u32, addr: usize, kind: u32, read_ns: u64) -> usize {
        let shared = self.shared();
        let head = shared.log_head.fetch_add(1, Relaxed);
        let slot = head as usize % LOG_LEN;
        let entry = &shared.log[slot];
        // A reader that saw the slot's previous round must see it change under it.
        entry.seq.store(0, Relaxed);
        std::sync::atomic::fence(Release);
        entry.tid.store(u64::from(tid), Relaxed);
        entry
            .page_and_kind
            .store(addr as u64 | u64::from(kind), Relaxed);
        entry.read_ns.store(read_ns, Relaxed);
        entry.done_ns.store(sys::monotonic_ns_vdso(), Relaxed);
        // Release: the entry is complete before the reader sees it marked.
        entry.seq.store(head + 1, Release);
        slot
    }

    /// The fault logged in `slot` is resolved now (the recorder reads entries rounds later).
    fn log_done(&self, slot: usize) {
        self.shared().log[slot]
            .done_ns
            .store(sys::monotonic_ns_vdso(), Relaxed);
    }

    /// The fill logged in `slot` failed: the fault only woke its thread, to fault again.
    fn log_retract(&self, slot: usize, addr: usize) {
        self.shared().log[slot]
            .page_and_kind
            .store(addr as u64 | u64::from(kind::WAKE), Relaxed);
        self.log_done(slot);
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
        let (_blocked, mut pages) = self.lock_outside_handler();
        // Pages being written out by another thread, without the lock, are waited for: they
        // left the count of local pages, and their store copies are being made.
        while let Some(idx) = ((start - self.base) / PAGE..(end - self.base) / PAGE)
            .find(|&idx| self.state(idx).load(SeqCst) & EVICTING != 0)
        {
            drop(pages);
            self.wait_while(idx, EVICTING);
            pages = self.lock();
        }
        let mut run_start = None;
        let mut had_store = false;
        for page in (start..end).step_by(PAGE) {
            let idx = (page - self.base) / PAGE;
            let state = self.state(idx);
            let old = state.load(Relaxed);
            if self.is_local(idx) && old & RESIDENT != 0 && old & FILLING == 0 {
                // Kept local: it stays resident (the kernel may be handed it again by code
                // that no wrapper reaches), cleared by hand to read as zeros.
                if let Some(s) = run_start.take() {
                    sys::madvise(s, page - s, libc::MADV_DONTNEED);
                }
                // SAFETY: a whole page of the region, resident and writable (kept so), given
                // back by its owner.
                unsafe { std::ptr::write_bytes(page as *mut u8, 0, PAGE) };
                continue;
            }
            had_store |= old & IN_STORE != 0;
            if old & FILLING != 0 {
                // Its filler counts it, and drops it once filled.
                state.store(old | DISCARDED, SeqCst);
                run_start.get_or_insert(page);
                continue;
            }
            let resident = old & RESIDENT != 0;
            if resident {
                pages.resident -= 1;
                if old & IN_STORE != 0 {
                    pages.clean_copies -= 1;
                }
                run_start.get_or_insert(page);
            } else {
                pages.far -= usize::from(old & IN_STORE != 0);
            }
            if !resident && let Some(s) = run_start.take() {
                sys::madvise(s, page - s, libc::MADV_DONTNEED);
            }
            state.store(0, SeqCst);
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
