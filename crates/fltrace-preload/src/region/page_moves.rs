//! Pages between the region and the store: moved (`UFFDIO_MOVE`, in runs) or copied and
//! dropped, both ways: the fill of a fetched page, the write-out of evicted ones.

use std::sync::atomic::{AtomicBool, Ordering::Relaxed, Ordering::SeqCst};

use super::{
    DIRTY, EVICT_BATCH, IN_STORE, PAGE, PINNED, REFERENCED, RESIDENT, Region, ZERO_PAGE, for_runs,
};
use crate::breakdown::add;
use crate::sys;
use crate::uffd::{self};

/// Attempts of a move the kernel asks to retry (`EAGAIN`) before giving up on it for now.
pub(super) const MOVE_TRIES: usize = 1000;

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

impl Region {
    /// Fills the missing page `idx` at `addr` when pages move: an evicted page is moved back
    /// from the store, a new one filled with zeros, both writable (nothing needs to know
    /// whether they are written: eviction moves them either way).
    pub(super) fn fill_moving(
        &self,
        addr: usize,
        idx: usize,
        fetched: bool,
    ) -> std::io::Result<()> {
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
    pub(super) fn move_retrying(
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
    pub(super) fn move_out(&self, victims: &mut [usize]) -> usize {
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
                let mut advanced = moved as usize / PAGE;
                if error.is_some() {
                    // After a partial move the kernel's count can fall short of the pages it
                    // moved (Linux 6.18 moves a run of pages at once and counted fewer): where
                    // the run stands is read back from the page tables, or the next call
                    // would find its first pages moved already (EEXIST) and keep them
                    // resident in the books while they are gone.
                    advanced = advanced.max(self.leading_absent(at, n - done));
                }
                done += advanced;
                if advanced > 0 {
                    continue;
                }
                let Some(e) = error else {
                    break;
                };
                // A page shared with a child after fork cannot move: copied out (it is
                // there, so the copy cannot fault). Any other page stays resident.
                let busy = e.raw_os_error() == Some(libc::EBUSY);
                if !busy {
                    report_move_error(&e);
                }
                if !busy || !self.copy_out(at) {
                    kept[kept_len] = at;
                    kept_len += 1;
                }
                done += 1;
            }
        });
        let kept = &kept[..kept_len];
        victims.sort_unstable_by_key(|v| !kept.contains(v));
        kept_len
    }

    /// How many of the `count` pages from page `first` on are not mapped, before the first
    /// that is (at most [`EVICT_BATCH`] looked at).
    pub(super) fn leading_absent(&self, first: usize, count: usize) -> usize {
        let count = count.min(EVICT_BATCH);
        let mut present = [0u8; EVICT_BATCH];
        // SAFETY: `count` pages of the region, one byte of result each.
        let ok = unsafe {
            libc::mincore(
                (self.base + first * PAGE) as *mut libc::c_void,
                count * PAGE,
                present.as_mut_ptr(),
            )
        } == 0;
        if !ok {
            return 0;
        }
        present[..count].iter().take_while(|&&p| p & 1 == 0).count()
    }

    /// Evicts the resident page `idx` by copying it to the store: write-protected first so
    /// that no write is lost, then copied into the (registered) store page, then dropped.
    /// False, and the page left resident and writable, if the copy fails.
    pub(super) fn copy_out(&self, idx: usize) -> bool {
        let (addr, far) = ((self.base + idx * PAGE) as u64, self.store + idx * PAGE);
        let _ = uffd::write_protect(self.uffd(), addr, PAGE as u64, true);
        // A stale store page would make the copy a no-op (EEXIST).
        sys::madvise(far, PAGE, libc::MADV_DONTNEED);
        if uffd::copy(self.uffd(), far as u64, addr, PAGE as u64, false).is_ok() {
            sys::madvise(addr as usize, PAGE, libc::MADV_DONTNEED);
            true
        } else {
            let _ = uffd::unprotect(self.uffd(), addr, PAGE as u64);
            false
        }
    }

    /// Moves the victims (sorted, `EVICTING`, resident) to the store, without the page lock:
    /// those that moved (first `kept` left in place, see `move_out`) become `IN_STORE`;
    /// returns how many moved.
    pub(super) fn write_out_moving(&self, victims: &mut [usize]) -> usize {
        let breakdown = &self.shared().breakdown;
        let moving = sys::monotonic_ns_vdso();
        let kept = self.move_out(victims);
        add(&breakdown.evict_copy_ns, sys::monotonic_ns_vdso() - moving);
        for &idx in &victims[kept..] {
            let state = self.state(idx);
            let old = state.load(Relaxed);
            state.store(
                (old & !(RESIDENT | DIRTY | REFERENCED | PINNED)) | IN_STORE,
                SeqCst,
            );
        }
        let evicted = victims.len() - kept;
        self.shared()
            .evict_writes
            .fetch_add(evicted as u64, Relaxed);
        evicted
    }

    /// Makes the store pages of the dirty victims (sorted) present, a run of them per call
    /// (`MADV_POPULATE_WRITE`), before they are copied into: otherwise each copy faults its
    /// store page in, and each of those faults is one more event for the recorder (a fault of
    /// the runtime's own memory, its stack copied through the signal frame on the in-thread
    /// path), which cost as much as the program's own fault. A kernel without the advice
    /// (before 5.14) leaves them to the copies' faults.
    pub(super) fn populate_store(&self, victims: &[usize]) {
        static UNSUPPORTED: AtomicBool = AtomicBool::new(false);
        if UNSUPPORTED.load(Relaxed) {
            return;
        }
        let dirty = |i: usize| self.state(i).load(Relaxed) & DIRTY != 0;
        for_runs(victims, |first, n| {
            if UNSUPPORTED.load(Relaxed) {
                return;
            }
            let mut i = first;
            while i < first + n {
                if !dirty(i) {
                    i += 1;
                    continue;
                }
                let run = i;
                while i < first + n && dirty(i) {
                    i += 1;
                }
                if sys::madvise(
                    self.store + run * PAGE,
                    (i - run) * PAGE,
                    libc::MADV_POPULATE_WRITE,
                ) != 0
                    && std::io::Error::last_os_error().raw_os_error() == Some(libc::EINVAL)
                {
                    UNSUPPORTED.store(true, Relaxed);
                    return;
                }
            }
        });
    }

    /// Writes the victims (sorted, `EVICTING`, resident) out by copying, without the page
    /// lock: dirty ones write-protected first (no write can be lost between), copied to the
    /// store, then all dropped. Returns how many were evicted (all).
    pub(super) fn write_out_copying(&self, victims: &[usize]) -> usize {
        let shared = self.shared();
        let breakdown = &shared.breakdown;
        let protecting = sys::monotonic_ns_vdso();
        for_runs(victims, |first, n| {
            let dirty = |i: usize| self.state(i).load(Relaxed) & DIRTY != 0;
            if (first..first + n).any(dirty) {
                let _ = uffd::write_protect(
                    self.uffd(),
                    (self.base + first * PAGE) as u64,
                    (n * PAGE) as u64,
                    true,
                );
            }
        });
        let copying = sys::monotonic_ns_vdso();
        add(&breakdown.evict_wp_ns, copying - protecting);
        self.populate_store(victims);
        for &idx in victims {
            let state = self.state(idx);
            let old = state.load(Relaxed);
            let mut new = old;
            if old & DIRTY != 0 {
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
                new |= IN_STORE;
                shared.evict_writes.fetch_add(1, Relaxed);
            }
            // Still marked as being evicted until it is dropped below.
            state.store(new & !(RESIDENT | DIRTY | REFERENCED | PINNED), SeqCst);
        }
        let dropping = sys::monotonic_ns_vdso();
        add(&breakdown.evict_copy_ns, dropping - copying);
        for_runs(victims, |first, n| {
            sys::madvise(self.base + first * PAGE, n * PAGE, libc::MADV_DONTNEED);
        });
        add(
            &breakdown.evict_drop_ns,
            sys::monotonic_ns_vdso() - dropping,
        );
        victims.len()
    }
}
