//! Pages of the region held resident while a system call uses them.
//!
//! With faults served in the faulting thread (`UFFD_FEATURE_SIGBUS`), the kernel does not
//! wait for a missing page it touches on the program's behalf: the system call fails with
//! `EFAULT` (or stops short). So the wrappers of the calls that take buffers
//! (`crate::syscalls`) first pin the buffer's pages here, then touch each page from user mode
//! (a fault of the program's thread, served and recorded like any other), then make the call,
//! then unpin. Eviction passes over pinned pages ([`holds`]).
//!
//! A pin is published in a slot before the wrapper looks at the pages' states; eviction marks
//! a victim `EVICTING` before it reads the slots (both with a full fence between): either the
//! evictor sees the pin and spares the page, or the wrapper sees the mark, waits until the
//! eviction is done, and brings the page back.
//!
//! The pages pinned at once are bounded ([`set_budget`], half the local limit): a larger
//! buffer is taken in pieces, each pinned in turn, so that local memory stays within the
//! limit. A piece of [`MIN_PIECE`] pages is always granted, so that no call waits for another
//! to end (one may wait for data the other is to send).

use std::sync::atomic::{AtomicU32, AtomicUsize, Ordering::Relaxed, Ordering::SeqCst};

/// Slots for pins taken at once (a thread takes one per buffer of a call in progress).
const SLOTS: usize = 256;

/// A slot claimed but not yet published.
const CLAIMED: u32 = u32::MAX;

/// Pages a call may always pin, whatever the others hold: a datagram of 64 KiB and its
/// unaligned ends.
pub const MIN_PIECE: usize = 18;

struct Slot {
    /// The pinning thread (0: free, [`CLAIMED`]: being filled in).
    tid: AtomicU32,
    /// First page index pinned.
    first: AtomicUsize,
    /// One past the last.
    end: AtomicUsize,
}

static PINS: [Slot; SLOTS] = [const {
    Slot {
        tid: AtomicU32::new(0),
        first: AtomicUsize::new(0),
        end: AtomicUsize::new(0),
    }
}; SLOTS];

/// Slots published.
static ACTIVE: AtomicUsize = AtomicUsize::new(0);
/// Pages pinned, over all slots.
static PINNED: AtomicUsize = AtomicUsize::new(0);
/// Most pages pinned at once, beyond [`MIN_PIECE`] per call.
static BUDGET: AtomicUsize = AtomicUsize::new(usize::MAX);

/// Sets the most pages pinned at once (the region's, at its creation).
pub fn set_budget(pages: usize) {
    BUDGET.store(pages.max(MIN_PIECE), Relaxed);
}

/// How many of `want` pages a call may pin now: what the budget has left, at least
/// [`MIN_PIECE`].
pub fn grant(want: usize) -> usize {
    let left = BUDGET.load(Relaxed).saturating_sub(PINNED.load(Relaxed));
    want.min(left.max(MIN_PIECE))
}

/// A pin of pages `[first, end)`, released when dropped.
pub struct Pin {
    slot: usize,
    pages: usize,
}

/// Pins pages `[first, end)` for the calling thread `tid`. Published with a full fence: the
/// caller may read the pages' states right after.
pub fn pin(tid: u32, first: usize, end: usize) -> Pin {
    let mut spins = 0u32;
    let slot = loop {
        if let Some(slot) = (0..SLOTS).find(|&i| {
            PINS[i]
                .tid
                .compare_exchange(0, CLAIMED, Relaxed, Relaxed)
                .is_ok()
        }) {
            break slot;
        }
        // Every slot taken: another call ends soon, or its thread is gone.
        reclaim_dead();
        spins = spins.saturating_add(1);
        if spins > 16 {
            // SAFETY: sched_yield has no preconditions.
            unsafe { libc::sched_yield() };
        }
    };
    let pages = end - first;
    PINS[slot].first.store(first, Relaxed);
    PINS[slot].end.store(end, Relaxed);
    let now = PINNED.fetch_add(pages, Relaxed) + pages;
    if let Some(region) = crate::region_any() {
        region
            .shared()
            .breakdown
            .syscall_pinned_peak
            .fetch_max(now as u64, Relaxed);
    }
    ACTIVE.fetch_add(1, SeqCst);
    PINS[slot].tid.store(tid, SeqCst);
    std::sync::atomic::fence(SeqCst);
    Pin { slot, pages }
}

impl Drop for Pin {
    fn drop(&mut self) {
        release(self.slot, self.pages);
    }
}

fn release(slot: usize, pages: usize) {
    PINS[slot].tid.store(0, SeqCst);
    ACTIVE.fetch_sub(1, SeqCst);
    PINNED.fetch_sub(pages, Relaxed);
}

/// Whether a system call in progress holds page `idx`. The caller (eviction, under the page
/// lock) has marked the page and fenced before.
pub fn holds(idx: usize) -> bool {
    if ACTIVE.load(SeqCst) == 0 {
        return false;
    }
    PINS.iter().any(|slot| {
        let tid = slot.tid.load(SeqCst);
        tid != 0
            && tid != CLAIMED
            && (slot.first.load(Relaxed)..slot.end.load(Relaxed)).contains(&idx)
    })
}

/// Frees the slots of threads that no longer exist (one cancelled inside a call never
/// released its pin).
fn reclaim_dead() {
    // SAFETY: getpid has no preconditions.
    let pid = unsafe { libc::getpid() };
    for (i, slot) in PINS.iter().enumerate() {
        let tid = slot.tid.load(SeqCst);
        if tid == 0 || tid == CLAIMED {
            continue;
        }
        // SAFETY: tgkill with signal 0 only checks that the thread exists in this process.
        let gone = unsafe { libc::syscall(libc::SYS_tgkill, pid, tid, 0) } != 0
            && std::io::Error::last_os_error().raw_os_error() == Some(libc::ESRCH);
        if gone
            && slot
                .tid
                .compare_exchange(tid, CLAIMED, SeqCst, SeqCst)
                .is_ok()
        {
            let pages = slot.end.load(Relaxed) - slot.first.load(Relaxed);
            release(i, pages);
        }
    }
}

/// In a forked child: the parent's threads and their calls do not exist here.
pub fn forget_all() {
    for slot in &PINS {
        slot.tid.store(0, Relaxed);
    }
    ACTIVE.store(0, Relaxed);
    PINNED.store(0, Relaxed);
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A pin holds its pages until dropped; grants stay within the budget but never below the
    /// minimum piece.
    #[test]
    fn pins_hold_their_pages_and_grants_keep_the_budget() {
        set_budget(100);
        assert!(!holds(5));
        let pin = pin(1, 4, 10);
        assert!(holds(4) && holds(9) && !holds(10) && !holds(3));
        assert_eq!(grant(1000), 94);
        let big = self::pin(2, 100, 194);
        assert_eq!(grant(1000), MIN_PIECE);
        assert_eq!(grant(3), 3);
        drop(pin);
        drop(big);
        assert!(!holds(5) && !holds(150));
        assert_eq!(grant(1000), 100);
    }
}
