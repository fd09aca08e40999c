//! Allocation events: the calls into the allocator and the mapping calls that `record --allocs`
//! sees through its preloaded interposer.

/// Which call an [`AllocEvent`] records. The numbers are stored in the trace: never reuse one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[repr(u8)]
pub enum AllocCall {
    /// `malloc(size)`.
    Malloc = 1,
    /// `calloc(n, size)`; `size` is the product.
    Calloc = 2,
    /// `realloc(old_addr, size)`.
    Realloc = 3,
    /// `reallocarray(old_addr, n, size)`; `size` is the product.
    Reallocarray = 4,
    /// `free(addr)`.
    Free = 5,
    /// `posix_memalign(&addr, align, size)`; `detail` is the alignment.
    PosixMemalign = 6,
    /// `aligned_alloc(align, size)`; `detail` is the alignment.
    AlignedAlloc = 7,
    /// `memalign(align, size)`; `detail` is the alignment.
    Memalign = 8,
    /// `valloc(size)`.
    Valloc = 9,
    /// `pvalloc(size)`.
    Pvalloc = 10,
    /// `malloc_usable_size(addr)`; `size` is the answer.
    UsableSize = 11,
    /// `mmap(.., size, prot, flags, ..)` returning `addr`; `detail` is `prot << 32 | flags`.
    Mmap = 12,
    /// `munmap(addr, size)`.
    Munmap = 13,
    /// `mremap(old_addr, .., size, ..)` returning `addr`.
    Mremap = 14,
    /// `brk(addr)`: the break moved from `old_addr` to `addr`.
    Brk = 15,
    /// `sbrk(increment)`: the break moved from `old_addr` to `addr`.
    Sbrk = 16,
}

impl AllocCall {
    /// Every call, in number order.
    pub const ALL: [AllocCall; 16] = [
        AllocCall::Malloc,
        AllocCall::Calloc,
        AllocCall::Realloc,
        AllocCall::Reallocarray,
        AllocCall::Free,
        AllocCall::PosixMemalign,
        AllocCall::AlignedAlloc,
        AllocCall::Memalign,
        AllocCall::Valloc,
        AllocCall::Pvalloc,
        AllocCall::UsableSize,
        AllocCall::Mmap,
        AllocCall::Munmap,
        AllocCall::Mremap,
        AllocCall::Brk,
        AllocCall::Sbrk,
    ];

    /// The call with number `n`.
    pub fn from_u8(n: u8) -> Option<AllocCall> {
        AllocCall::ALL.get(usize::from(n).checked_sub(1)?).copied()
    }

    /// The C function's name.
    pub fn name(self) -> &'static str {
        match self {
            AllocCall::Malloc => "malloc",
            AllocCall::Calloc => "calloc",
            AllocCall::Realloc => "realloc",
            AllocCall::Reallocarray => "reallocarray",
            AllocCall::Free => "free",
            AllocCall::PosixMemalign => "posix_memalign",
            AllocCall::AlignedAlloc => "aligned_alloc",
            AllocCall::Memalign => "memalign",
            AllocCall::Valloc => "valloc",
            AllocCall::Pvalloc => "pvalloc",
            AllocCall::UsableSize => "malloc_usable_size",
            AllocCall::Mmap => "mmap",
            AllocCall::Munmap => "munmap",
            AllocCall::Mremap => "mremap",
            AllocCall::Brk => "brk",
            AllocCall::Sbrk => "sbrk",
        }
    }

    /// Whether the call is one of the malloc family (a heap block), as opposed to a mapping
    /// call or a query.
    pub fn is_heap(self) -> bool {
        !matches!(
            self,
            AllocCall::UsableSize
                | AllocCall::Mmap
                | AllocCall::Munmap
                | AllocCall::Mremap
                | AllocCall::Brk
                | AllocCall::Sbrk
        )
    }
}

/// One call, as recorded when it returned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AllocEvent {
    /// When the call was made, nanoseconds since the Unix epoch (the faults' clock), to about
    /// a millisecond: the interposer reads a clock word the recorder updates every
    /// millisecond, as a finer clock read would double its cost. `munmap`, `mremap` and frees
    /// of blocks of a page or more are timed exactly, so that the faults of filling a block
    /// just before giving it back fall inside it. A thread's calls keep their order.
    pub time_ns: u64,
    /// Thread id.
    pub tid: u32,
    /// The call.
    pub call: AllocCall,
    /// The block returned (0 when the call failed); for `free` and `munmap` the block given
    /// back; for `brk`/`sbrk` the new break.
    pub addr: crate::VirtAddr,
    /// Bytes asked for (or given back by `munmap`, or answered by `malloc_usable_size`).
    pub size: u64,
    /// The block before `realloc`/`mremap`; the break before `brk`/`sbrk`; 0 otherwise.
    pub old_addr: crate::VirtAddr,
    /// Alignment of the aligned calls; `prot << 32 | flags` of `mmap`; 0 otherwise.
    pub detail: u64,
    /// The call's stack in the allocation stack table, or [`AllocEvent::NO_STACK`] (calls
    /// that only give memory back are recorded without one).
    pub stack_id: u32,
}

impl AllocEvent {
    /// `stack_id` of a call recorded without a stack.
    pub const NO_STACK: u32 = u32::MAX;
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Call numbers are stored: each maps back to itself and unknown ones are refused.
    #[test]
    fn call_numbers_round_trip() {
        for call in AllocCall::ALL {
            assert_eq!(AllocCall::from_u8(call as u8), Some(call));
        }
        assert_eq!(AllocCall::from_u8(0), None);
        assert_eq!(AllocCall::from_u8(17), None);
        assert!(AllocCall::Realloc.is_heap());
        assert!(!AllocCall::Mmap.is_heap());
    }
}
