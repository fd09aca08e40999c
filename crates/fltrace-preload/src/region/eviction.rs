//! The eviction policy: the queue of resident pages, the victims chosen over the limit, the
//! pages pinned while a thread's fault is being served, and the far copies released in
//! batches.

use std::sync::atomic::{Ordering::Relaxed, Ordering::SeqCst};

use super::{
    DIRTY, EVICT_BATCH, EVICTING, IN_STORE, PAGE, PIN_SLOTS, PINNED, Pages, Policy, REFERENCED,
    RELEASE_BATCH, RESIDENT, Region, for_runs,
};
use crate::breakdown::add;
use crate::sys;
use crate::uffd::{self};

impl Region {
    pub(super) fn enqueue(&self, pages: &mut Pages, idx: usize) {
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
    pub(super) fn compact(&self, pages: &mut Pages) {
        let mut kept = 0;
        for i in 0..pages.len {
            // SAFETY: indexes within the queue and the ticket array.
            unsafe {
                let (idx, ticket) = *pages.queue.add((pages.head + i) % pages.queue_cap);
                if *pages.ticket.add(idx as usize) == ticket
                    && self.state(idx as usize).load(Relaxed) & RESIDENT != 0
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
    /// `MADV_DONTNEED` call: a sequential scan evicts runs of contiguous pages. Each batch is
    /// chosen under the page lock and marked `EVICTING`; its pages are written out and dropped
    /// without the lock (threads fault and fill meanwhile, and wait only for those pages), and
    /// their states are set under it again. A batch's pages leave the count of local pages
    /// when chosen: while one is written out, the pages filled meanwhile may exceed the limit
    /// by that batch at most. Returns the lock, and whether anything was evicted.
    pub(super) fn evict_over_limit<'a>(
        &'a self,
        mut pages: spinning_top::guard::SpinlockGuard<'a, Pages>,
        target: usize,
    ) -> (spinning_top::guard::SpinlockGuard<'a, Pages>, bool) {
        if pages.resident <= target {
            return (pages, false);
        }
        let shared = self.shared();
        shared.evict_ops.fetch_add(1, Relaxed);
        // Going a little below the target makes the next faults free of eviction work.
        let target = target.saturating_sub(self.ahead);
        // At most half the queue gets a second chance per call: a sweep that went all the way
        // round would evict the very pages it just spared, before they could be written again.
        let mut chances = pages.len / 2;
        // Pinned pages are passed over at most this often per call: when every resident page
        // is pinned (a limit of fewer pages than faulting threads), eviction goes on anyway.
        let mut pins_spared = PIN_SLOTS;
        // Pages that system calls in progress hold are passed over at most once each per
        // call: the queue is gone round once at most.
        let mut held_spared = pages.len;
        while pages.resident > target && pages.len > 0 {
            let mut victims = [0usize; EVICT_BATCH];
            let count = self.choose_victims(
                &mut pages,
                target,
                &mut victims,
                (&mut chances, &mut pins_spared, &mut held_spared),
            );
            if count == 0 {
                continue;
            }
            let victims = &mut victims[..count];
            victims.sort_unstable();
            pages.resident -= count;
            drop(pages);
            let evicted = if self.moving {
                self.write_out_moving(victims)
            } else {
                self.write_out_copying(victims)
            };
            pages = self.lock();
            let kept = count - evicted;
            for &idx in &victims[..kept] {
                // Could not move: resident still, back in the queue.
                self.state(idx).fetch_and(!EVICTING, SeqCst);
                self.enqueue(&mut pages, idx);
            }
            for &idx in &victims[kept..] {
                let state = self.state(idx);
                let old = state.load(Relaxed);
                if old & IN_STORE != 0 {
                    pages.far += 1;
                }
                // SAFETY: idx < pages.
                unsafe { *pages.evicted_at.add(idx) = pages.evictions };
                pages.evictions = pages.evictions.wrapping_add(1);
                state.store(old & !EVICTING, SeqCst);
            }
            pages.resident += kept;
            shared.evict_pages_done.fetch_add(evicted as u64, Relaxed);
            shared.far.store((pages.far * PAGE) as u64, Relaxed);
            if evicted == 0 {
                // Nothing would move: stop rather than spin on the same pages.
                break;
            }
        }
        (pages, true)
    }

    /// Takes up to [`EVICT_BATCH`] victims from the queue's head into `victims` (marked
    /// `EVICTING`), passing over pages pinned for a thread, held by a system call or kept
    /// local, and giving the policy's second chances; returns how many.
    pub(super) fn choose_victims(
        &self,
        pages: &mut Pages,
        target: usize,
        victims: &mut [usize; EVICT_BATCH],
        (chances, pins_spared, held_spared): (&mut usize, &mut usize, &mut usize),
    ) -> usize {
        let breakdown = &self.shared().breakdown;
        let mut count = 0;
        while count < EVICT_BATCH && pages.resident - count > target && pages.len > 0 {
            // SAFETY: the queue is non-empty; indexes are within their arrays.
            let (idx, ticket) = unsafe { *pages.queue.add(pages.head) };
            pages.head = (pages.head + 1) % pages.queue_cap;
            pages.len -= 1;
            let idx = idx as usize;
            let state = self.state(idx);
            // SAFETY: idx < pages.
            let current = unsafe { *pages.ticket.add(idx) };
            if current != ticket || state.load(Relaxed) & RESIDENT == 0 {
                continue;
            }
            if state.load(Relaxed) & PINNED != 0 && *pins_spared > 0 {
                *pins_spared -= 1;
                if self.pinned_thread_lives(pages, idx) {
                    // Its thread has not run since the page was served: back in the queue,
                    // as if brought in now.
                    self.enqueue(pages, idx);
                    continue;
                }
                state.fetch_and(!PINNED, Relaxed);
            }
            // Marked before the system calls' pins are read, which a pin's taker does the
            // other way round: either this sees the pin, or the taker sees the mark and waits
            // for the eviction to end before it brings the page back.
            state.fetch_or(EVICTING, SeqCst);
            std::sync::atomic::fence(SeqCst);
            if self.is_local(idx) {
                // Kept local for good: out of the queue.
                state.fetch_and(!EVICTING, SeqCst);
                continue;
            }
            if *held_spared > 0 && crate::pins::holds(idx) {
                *held_spared -= 1;
                state.fetch_and(!EVICTING, SeqCst);
                breakdown.syscall_pins_spared.fetch_add(1, Relaxed);
                self.enqueue(pages, idx);
                continue;
            }
            if self.policy != Policy::Fifo && state.load(Relaxed) & REFERENCED != 0 && *chances > 0
            {
                *chances -= 1;
                // Second chance; under clock a dirty page is protected again so that the
                // next write is seen.
                state.fetch_and(!REFERENCED, Relaxed);
                if self.policy == Policy::Clock && state.load(Relaxed) & DIRTY != 0 {
                    let addr = self.base + idx * PAGE;
                    let _ = uffd::write_protect(self.uffd(), addr as u64, PAGE as u64, true);
                }
                state.fetch_and(!EVICTING, SeqCst);
                self.enqueue(pages, idx);
                continue;
            }
            if state.load(Relaxed) & IN_STORE != 0 {
                // Its far copy stays as the far page; no longer held twice.
                pages.clean_copies -= 1;
            }
            victims[count] = idx;
            count += 1;
        }
        count
    }

    /// Pins page `idx`, just served for thread `tid`, until that thread faults again; the page
    /// that last held the thread's slot, another thread's, loses its pin.
    pub(super) fn pin(&self, pages: &mut Pages, tid: u32, idx: usize) {
        let slot = tid as usize % PIN_SLOTS;
        let (old_tid, old_idx) = pages.pins[slot];
        if old_tid != 0 && old_tid != tid {
            self.state(old_idx as usize).fetch_and(!PINNED, Relaxed);
        }
        pages.pins[slot] = (tid, idx as u32);
        self.state(idx).fetch_or(PINNED, Relaxed);
    }

    /// Thread `tid` faults again: the page last served for it is no longer pinned.
    pub(super) fn unpin(&self, pages: &mut Pages, tid: u32) {
        let slot = tid as usize % PIN_SLOTS;
        let (old_tid, old_idx) = pages.pins[slot];
        if old_tid == tid {
            pages.pins[slot] = (0, 0);
            self.state(old_idx as usize).fetch_and(!PINNED, Relaxed);
        }
    }

    /// Whether the pin of page `idx` still stands: the thread it was served for has not
    /// faulted since and still exists (one that ended will never retry). Asked only when a
    /// pinned page reaches the head of the queue.
    pub(super) fn pinned_thread_lives(&self, pages: &mut Pages, idx: usize) -> bool {
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
    pub(super) fn written_reference(&self) -> u8 {
        if self.policy == Policy::Clock {
            REFERENCED
        } else {
            0
        }
    }

    /// Queues the release of the store's copy of page `idx`: a resident page that is dirty
    /// will get a fresh one if evicted, and keeping the stale one would count it twice in the
    /// process's memory.
    pub(super) fn queue_release(&self, pages: &mut Pages, idx: usize) {
        if pages.release_len == RELEASE_BATCH {
            self.flush_releases(pages);
        }
        pages.releases[pages.release_len] = idx as u32;
        pages.release_len += 1;
    }

    /// Releases the queued store copies, contiguous ones in one call. A page evicted since it
    /// was queued has its fresh far copy there (it is `IN_STORE` again, or not resident):
    /// that one stays.
    pub(super) fn flush_releases(&self, pages: &mut Pages) {
        let mut idxs = [0usize; RELEASE_BATCH];
        let mut count = 0;
        for i in 0..pages.release_len {
            let idx = pages.releases[i] as usize;
            let state = self.state(idx).load(Relaxed);
            // Not one being written out (its store page takes the fresh copy).
            if state & RESIDENT != 0 && state & (IN_STORE | EVICTING) == 0 {
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
        let mut pages = self.lock();
        if pages.release_len > 0 {
            self.flush_releases(&mut pages);
        }
        if !self.evict_ahead || self.ahead == 0 {
            return;
        }
        // Evict when fewer than a quarter of the batch's pages are free, down to a batch free.
        if pages.resident + self.ahead / 4 >= self.limit {
            let before = pages.resident;
            let started = sys::monotonic_ns_vdso();
            let (after, evicted) = self.evict_over_limit(pages, self.limit - 1);
            pages = after;
            if evicted {
                let breakdown = &self.shared().breakdown;
                add(&breakdown.evict_ns, sys::monotonic_ns_vdso() - started);
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
}
