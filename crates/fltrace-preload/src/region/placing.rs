//! What the region does for `crate::placement`, which decides what memory enters it besides
//! the allocator's blocks: pages taken out of emulation with their contents kept, pages taken
//! back in, pages the program dropped behind the runtime's back, and the ranges published to
//! the recorder.

use std::sync::atomic::Ordering::{Relaxed, SeqCst};

use fltrace_runtime_abi::kind;

use super::{
    DIRTY, EVICTING, FILLING, Fault, IN_STORE, Pages, RESIDENT, Region, ZERO_PAGE, for_runs,
};
use crate::breakdown::add;
use crate::region::PAGE;
use crate::sys;
use crate::uffd;

/// Pages asked of `mincore` at a time.
const MINCORE_CHUNK: usize = 4096;

impl Region {
    /// Publishes the reservation area's size and the runtime's own mappings (the store and the
    /// page metadata) for the recorder, which counts them as the runtime's, not the program's.
    pub(super) fn publish_placement(
        &self,
        store: usize,
        meta: usize,
        meta_bytes: usize,
        reserve_pages: usize,
    ) {
        let placement = &self.shared().placement;
        placement
            .reserve_len
            .store((reserve_pages * PAGE) as u64, Relaxed);
        if store != self.base {
            self.publish_own(0, store, self.pages * PAGE);
        }
        self.publish_own(1, meta, meta_bytes);
    }

    /// Publishes one of the runtime's own mappings in slot `slot`.
    pub fn publish_own(&self, slot: usize, start: usize, len: usize) {
        if let Some([s, l]) = self.shared().placement.own.get(slot) {
            s.store(start as u64, Relaxed);
            l.store(len as u64, Relaxed);
        }
    }

    /// The reservation area: `[start, end)`, after the heap.
    pub fn reserve_area(&self) -> (usize, usize) {
        (
            self.base + self.heap_pages * PAGE,
            self.base + self.pages * PAGE,
        )
    }

    /// Notes that the program holds address space up to `end` (a reservation).
    pub fn note_span_used(&self, end: usize) {
        let pages = (end.saturating_sub(self.base))
            .div_ceil(PAGE)
            .min(self.pages);
        self.span_used.fetch_max(pages, Relaxed);
    }

    /// Pages from the base up to the end of the highest reservation ever made: beyond, the
    /// region was never touched.
    pub(super) fn span_in_use(&self) -> usize {
        self.span_used.load(Relaxed).min(self.pages)
    }

    /// The page indexes of `[start, start + len)` within the region, whole pages.
    fn page_range(&self, start: usize, len: usize) -> Option<(usize, usize)> {
        let first = start.max(self.base).saturating_sub(self.base) / PAGE;
        let end = (start.saturating_add(len).min(self.base + self.pages * PAGE))
            .saturating_sub(self.base)
            .div_ceil(PAGE);
        (first < end).then_some((first, end))
    }

    /// Whether any page of `[start, start + len)` is local or far: what a change of
    /// protection must carry out of emulation.
    pub fn has_pages(&self, start: usize, len: usize) -> bool {
        let Some((first, end)) = self.page_range(start, len) else {
            return false;
        };
        let (_blocked, _pages) = self.lock_outside_handler();
        (first..end).any(|idx| {
            self.state(idx).load(Relaxed) & (RESIDENT | IN_STORE | FILLING | EVICTING) != 0
        })
    }

    /// Takes `[start, start + len)` out of the runtime's accounting with its contents left in
    /// place, for the kernel to keep from now on (the caller unregisters it): evicted pages
    /// are brought back from the store first, local ones stay, and none counts against the
    /// limit any more. The range must still be readable and writable (it is emulated).
    pub fn forget(&self, start: usize, len: usize) {
        let Some((first, end)) = self.page_range(start, len) else {
            return;
        };
        if !self.managed() {
            return;
        }
        let (_blocked, mut pages) = self.lock_outside_handler();
        // Pages another thread fills or writes out without the lock are waited for: their
        // counts and copies are settled once that ends.
        while let Some(idx) =
            (first..end).find(|&idx| self.state(idx).load(SeqCst) & (FILLING | EVICTING) != 0)
        {
            drop(pages);
            self.wait_while(idx, FILLING | EVICTING);
            pages = self.lock();
        }
        let mut releases = [0usize; 64];
        let mut release_len = 0;
        let mut fetched = 0u64;
        for idx in first..end {
            let state = self.state(idx).load(Relaxed);
            if state & RESIDENT != 0 {
                pages.resident -= 1;
                if state & IN_STORE != 0 {
                    // A clean copy held twice: the store's goes.
                    pages.clean_copies -= 1;
                    if release_len == releases.len() {
                        self.release_store(&releases);
                        release_len = 0;
                    }
                    releases[release_len] = idx;
                    release_len += 1;
                }
            } else if state & IN_STORE != 0 {
                let (addr, far) = (self.base + idx * PAGE, self.store + idx * PAGE);
                let placed = if self.moving {
                    self.move_retrying(addr, far, PAGE, 0).1.is_none()
                } else {
                    let copied =
                        uffd::copy(self.uffd(), addr as u64, far as u64, PAGE as u64, false);
                    if copied.is_ok() {
                        sys::madvise(far, PAGE, libc::MADV_DONTNEED);
                    }
                    copied.is_ok()
                };
                if !placed {
                    report_lost_page(addr);
                }
                pages.far -= 1;
                fetched += 1;
            }
            self.state(idx).store(0, SeqCst);
        }
        self.release_store(&releases[..release_len]);
        let placement = &self.shared().placement;
        placement.taken_out_fetches.fetch_add(fetched, Relaxed);
        self.publish(&pages);
    }

    /// Drops the store's copies of pages `idxs` (sorted), a run at a time.
    fn release_store(&self, idxs: &[usize]) {
        for_runs(idxs, |first, n| {
            sys::madvise(self.store + first * PAGE, n * PAGE, libc::MADV_DONTNEED);
        });
    }

    /// Takes the pages present in `[start, start + len)` into the runtime's accounting, as
    /// local and dirty (their contents exist nowhere else): a range given back to emulation
    /// after the kernel kept it (the caller registered it again). Evicts at once if that
    /// takes local memory past the limit.
    pub fn adopt(&self, start: usize, len: usize) {
        let Some((first, end)) = self.page_range(start, len) else {
            return;
        };
        if !self.managed() {
            return;
        }
        let mut present = [0u8; MINCORE_CHUNK];
        let (_blocked, mut pages) = self.lock_outside_handler();
        let mut chunk = first;
        while chunk < end {
            let n = (end - chunk).min(MINCORE_CHUNK);
            // SAFETY: mincore writes one byte per page of the range into `present`, which has
            // room for `n`.
            let ret = unsafe {
                libc::mincore(
                    (self.base + chunk * PAGE) as *mut libc::c_void,
                    n * PAGE,
                    present.as_mut_ptr(),
                )
            };
            if ret == 0 {
                for (i, &byte) in present[..n].iter().enumerate() {
                    let idx = chunk + i;
                    let state = self.state(idx);
                    if byte & 1 != 0 && state.load(Relaxed) & (RESIDENT | FILLING) == 0 {
                        state.store(RESIDENT | DIRTY, SeqCst);
                        self.enqueue(&mut pages, idx);
                        pages.resident += 1;
                    }
                }
            }
            chunk += n;
        }
        if pages.resident >= self.limit {
            let started = sys::monotonic_ns_vdso();
            let (after, evicted) = self.evict_over_limit(pages, self.limit.saturating_sub(1));
            pages = after;
            if evicted {
                add(
                    &self.shared().breakdown.evict_ns,
                    sys::monotonic_ns_vdso() - started,
                );
            }
        }
        self.publish(&pages);
    }

    /// A missing-page fault on page `idx`, which the runtime holds local: unless another
    /// thread's fault brought it in meanwhile, the program dropped it behind the runtime's
    /// back (`madvise(MADV_DONTNEED)` by system call, as Go's runtime gives memory back), and
    /// it reads as zeros now. Then it is filled with zeros, counted as a first touch and logged;
    /// true when so (the fault is handled).
    pub(super) fn refill_dropped(&self, pages: &mut Pages, fault: &Fault, idx: usize) -> bool {
        let addr = self.base + idx * PAGE;
        let write = fault.write;
        // Not woken yet: the fault is counted and logged first (see `log`).
        let filled = uffd::copy_if_missing(
            self.uffd(),
            addr as u64,
            ZERO_PAGE.as_ptr() as u64,
            PAGE as u64,
            !write && !self.moving,
        );
        if filled.ok() != Some(true) {
            return false;
        }
        if self.state(idx).load(Relaxed) & IN_STORE != 0 {
            pages.clean_copies -= 1;
            self.queue_release(pages, idx);
        }
        let state = RESIDENT
            | if write {
                DIRTY | self.written_reference()
            } else if self.moving {
                DIRTY
            } else {
                0
            };
        self.state(idx).store(state, SeqCst);
        self.pin(pages, fault.tid, idx);
        let shared = self.shared();
        shared.faults.fetch_add(1, Relaxed);
        if write {
            shared.faults_w.fetch_add(1, Relaxed);
        } else {
            shared.faults_r.fetch_add(1, Relaxed);
        }
        shared.faults_zp.fetch_add(1, Relaxed);
        shared.placement.dropped_refills.fetch_add(1, Relaxed);
        let entry = self.log(fault.tid, addr, kind::ZERO, fault.start_ns);
        self.wake(addr);
        self.log_done(entry);
        true
    }

    /// Registers `[first, end)` (page indexes) with `uffd` in `mode`, except the pages
    /// `outside` says the kernel keeps (taken out of emulation, or a mapping of a file the
    /// kernel would refuse to register); false if a run could not be registered.
    pub(super) fn register_placed(
        &self,
        uffd: i32,
        mode: u64,
        first: usize,
        end: usize,
        outside: impl Fn(usize) -> bool,
    ) -> bool {
        let mut idx = first;
        while idx < end {
            if outside(idx) {
                idx += 1;
                continue;
            }
            let run = idx;
            while idx < end && !outside(idx) {
                idx += 1;
            }
            let (addr, len) = (self.base + run * PAGE, (idx - run) * PAGE);
            if uffd::register(uffd, addr as u64, len as u64, mode).is_err() {
                return false;
            }
        }
        true
    }
}

/// Says once that a page could not be brought back from the store when its range left
/// emulation: it reads as zeros from then on.
fn report_lost_page(addr: usize) {
    static TOLD: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
    if !TOLD.swap(true, Relaxed) {
        let mut digits = [0; 20];
        sys::write_stderr(&[
            b"fltrace: far memory: a page at ",
            sys::decimal(addr as u64, &mut digits),
            b" could not be brought back from far memory when its range left emulation; \
              it reads as zeros (said once)\n",
        ]);
    }
}
