//! The region across fork: the page lock held over it, and in the child its copy of the
//! region adopted under a userfaultfd of its own, or detached when it gets none.

use std::sync::atomic::Ordering::Relaxed;

use fltrace_runtime_abi::Shared;

use super::{
    DIRTY, DISCARDED, EVICTING, FILLING, IN_STORE, PAGE, PIN_SLOTS, PINNED, Policy, RESIDENT,
    Region,
};
use crate::sys;
use crate::uffd::{self};

impl Region {
    /// Takes the page lock across fork: a handler thread holding it when the process is
    /// copied would leave the child's copy locked for ever. Evicted pages stay in the store,
    /// which the child inherits (a copy-on-write copy, as the region's resident pages).
    pub fn lock_for_fork(&self) {
        std::mem::forget(self.lock());
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
        let mut pages = self.lock();
        // The parent's threads do not exist here, nor their system calls.
        for slot in 0..PIN_SLOTS {
            let (tid, idx) = pages.pins[slot];
            if tid != 0 {
                self.state(idx as usize).fetch_and(!PINNED, Relaxed);
            }
            pages.pins[slot] = (0, 0);
        }
        crate::pins::forget_all();
        // Pages a parent's thread was writing out when the process was copied (without the
        // lock): gone from the child's copy, or still there. They left the count of local
        // pages when chosen.
        for idx in 0..self.pages {
            let state = self.state(idx).load(Relaxed);
            if state & EVICTING == 0 {
                continue;
            }
            let mapped = |addr: usize| {
                let mut present = 0u8;
                // SAFETY: one page, one byte of result.
                (unsafe { libc::mincore(addr as *mut libc::c_void, PAGE, &mut present) } == 0)
                    && present & 1 != 0
            };
            if mapped(self.base + idx * PAGE) {
                // Its only copy that counts is here (a store copy of it is stale).
                self.state(idx).store(RESIDENT | DIRTY, Relaxed);
                pages.resident += 1;
                self.enqueue(&mut pages, idx);
            } else {
                let stored =
                    state & IN_STORE != 0 || (self.moving && mapped(self.store + idx * PAGE));
                self.state(idx)
                    .store(if stored { IN_STORE } else { 0 }, Relaxed);
                pages.far += usize::from(stored);
            }
        }
        // Pages a parent's thread was filling when the process was copied: the fill is done
        // in the child's copy, or not at all.
        for idx in 0..self.pages {
            let state = self.state(idx).load(Relaxed);
            if state & FILLING == 0 {
                continue;
            }
            let addr = self.base + idx * PAGE;
            let mut present = 0u8;
            // SAFETY: one page of the region, one byte of result.
            let mapped = unsafe { libc::mincore(addr as *mut libc::c_void, PAGE, &mut present) }
                == 0
                && present & 1 != 0;
            if mapped && state & DISCARDED == 0 {
                // Its only copy is here (a fetch took it from the store, or it was a zero fill).
                if state & IN_STORE != 0 {
                    pages.far -= 1;
                }
                self.state(idx).store(RESIDENT | DIRTY, Relaxed);
                self.enqueue(&mut pages, idx);
            } else {
                pages.resident -= 1;
                if state & DISCARDED != 0 {
                    pages.far -= usize::from(state & IN_STORE != 0);
                    self.state(idx).store(0, Relaxed);
                } else {
                    self.state(idx).store(state & IN_STORE, Relaxed);
                }
            }
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
            let state = self.state(idx).load(Relaxed);
            let resident = state & RESIDENT != 0;
            let wanted = if outside(idx) {
                None
            } else if !resident {
                Some(false)
            } else if !self.moving && (state & DIRTY == 0 || clock) && !self.is_local(idx) {
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
        // The child's path is its parent's (its userfaultfd got the same features).
        self.publish_path();
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
        let pages = self.lock();
        for idx in 0..self.span_in_use() {
            let state = self.state(idx).load(Relaxed);
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
