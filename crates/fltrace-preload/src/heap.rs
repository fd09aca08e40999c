//! The library's own heap, for what its Rust code allocates (the unwinder's module tables and
//! caches). It must never be the allocator the library intercepts: that would recurse into
//! ourselves or, with far memory on, put our bookkeeping into the emulated far memory. So it
//! is talc over memory mapped with raw system calls.

use std::alloc::{GlobalAlloc, Layout};

use talc::source::Manual;

use crate::sys;

type Talc = talc::base::Talc<Manual, talc::DefaultBinning>;

/// Memory is mapped in pieces of at least this size.
const GROWTH: usize = 4 << 20;

/// The `#[global_allocator]` of the preload library.
pub struct PrivateHeap(spinning_top::Spinlock<Talc>);

impl PrivateHeap {
    /// An empty heap; it maps memory when first used.
    pub const fn new() -> Self {
        PrivateHeap(spinning_top::Spinlock::new(Talc::new(Manual)))
    }

    /// Locks the heap across fork (see `crate::before_fork`).
    pub fn lock_for_fork(&self) {
        std::mem::forget(self.0.lock());
    }

    /// Unlocks after fork, in parent and child.
    pub fn unlock_after_fork(&self) {
        // SAFETY: `lock_for_fork` left the lock held by this thread.
        unsafe { self.0.force_unlock() };
    }
}

impl Default for PrivateHeap {
    fn default() -> Self {
        Self::new()
    }
}

// SAFETY: talc hands out distinct, suitably aligned blocks; the spinlock serialises access.
unsafe impl GlobalAlloc for PrivateHeap {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let mut talc = self.0.lock();
        // SAFETY: GlobalAlloc callers never pass a zero-sized layout.
        if let Some(block) = unsafe { talc.allocate(layout) } {
            return block.as_ptr();
        }
        let len = (layout.size() + layout.align() + 4096)
            .max(GROWTH)
            .next_multiple_of(4096);
        let memory = sys::map_anonymous(len, 0);
        if memory.is_null() {
            return std::ptr::null_mut();
        }
        // SAFETY: a fresh private mapping that nothing else uses; talc owns it from now on.
        if unsafe { talc.claim(memory, len) }.is_none() {
            return std::ptr::null_mut();
        }
        // SAFETY: as above.
        unsafe { talc.allocate(layout) }.map_or(std::ptr::null_mut(), |b| b.as_ptr())
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: `ptr` came from `alloc` with this layout (GlobalAlloc's contract).
        unsafe { self.0.lock().deallocate(ptr, layout) }
    }
}
