//! Allocations: the blocks the recorded allocator and mapping calls made, how long each lived,
//! totals per allocating stack, and which block each fault landed in.
//!
//! Everything here works on the recorded events alone, without symbols. The events mean:
//!
//! - the malloc family (`malloc`, `calloc`, `valloc`, `pvalloc`, `memalign`, `aligned_alloc`,
//!   `posix_memalign`) makes a *heap* block `[addr, addr + size)`; `addr == 0` is a failure;
//! - `realloc`/`reallocarray` frees `old_addr` and makes a new block with its own stack; with
//!   `addr == 0` it only frees (`size == 0`) or fails and leaves `old_addr` alive (`size > 0`);
//! - `free` ends a block; frees of addresses no live block starts at are counted and ignored;
//! - anonymous `mmap` (`MAP_ANONYMOUS` in the flags) makes a *mapping* block, its size rounded
//!   up to pages; `munmap` cuts its range out of mapping blocks (what remains of a cut block
//!   lives on as a *remnant*); `mremap` ends a mapping block and, like `realloc`, makes a new
//!   one at its new place and size with its own stack (only for blocks made by recorded calls);
//!   growing the break (`brk`/`sbrk`) makes a mapping block of the growth, shrinking it cuts;
//! - `malloc_usable_size` is a query and changes nothing.
//!
//! Times are the calls' entry times. A block lives from its call's time up to, not including,
//! the time of the call that ends it; a fault at the very nanosecond of a call comes after it.

use std::collections::BTreeMap;

use fltrace_trace::{AllocEvent, Fault, Mapping, VirtAddr};

/// Mappings are made and unmapped in whole pages.
const PAGE: u64 = 4096;
/// `MAP_ANONYMOUS` on Linux.
const MAP_ANONYMOUS: u64 = 0x20;

/// What kind of memory a block is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum BlockKind {
    /// Made by the malloc family.
    Heap,
    /// An anonymous mapping, or memory the break grew by.
    Mapping,
}

impl BlockKind {
    /// `heap` or `mapping`.
    pub fn name(self) -> &'static str {
        match self {
            BlockKind::Heap => "heap",
            BlockKind::Mapping => "mapping",
        }
    }
}

/// A block of memory over its lifetime. Its range never changes: when `munmap` cuts part of a
/// mapping block, the block ends and what remains continues as new remnant blocks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AllocBlock {
    /// Index, in the events, of the call that allocated it (for a remnant, the original call).
    pub event: u32,
    /// That call's stack id ([`AllocEvent::NO_STACK`] when it was recorded without one).
    pub stack_id: u32,
    /// Heap or mapping.
    pub kind: BlockKind,
    /// First address.
    pub addr: VirtAddr,
    /// Bytes (a heap block's requested size; a mapping's size in whole pages).
    pub size: u64,
    /// When it came to life: its call's time, or for a remnant the time of the cut.
    pub start_ns: u64,
    /// When it ended, `None` if it was still alive at the end of the trace.
    pub end_ns: Option<u64>,
    /// Whether it is what remained of an earlier block after `munmap` or `mremap` cut it, not
    /// a new allocation.
    pub remnant: bool,
    /// Whether its free was temporary by heaptrack's rule (see [`LastAlloc`]).
    pub temporary: bool,
}

impl AllocBlock {
    /// One past the last address.
    pub fn end(&self) -> VirtAddr {
        self.addr.saturating_add(self.size)
    }

    /// Whether the block was alive at `time_ns`.
    pub fn alive_at(&self, time_ns: u64) -> bool {
        self.start_ns <= time_ns && self.end_ns.is_none_or(|end| end > time_ns)
    }
}

fn failed_mapping(addr: VirtAddr) -> bool {
    // MAP_FAILED is -1; a recorder may also write 0.
    addr.is_null() || addr.get() == u64::MAX
}

fn page_end(addr: VirtAddr, size: u64) -> VirtAddr {
    addr.saturating_add(size).align_up(PAGE)
}

/// The size and stack of the process's last heap allocation, for temporaries, as heaptrack
/// counts them: a free is temporary when the freed block's size and stack are those of the
/// last allocation, in any thread, with no free since (any free of a live block forgets the
/// last allocation; failed calls, whose events heaptrack never sees, change nothing). The
/// freed block need not be the last one made: a loop that makes two same-sized blocks at one
/// line and frees the first counts one temporary.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct LastAlloc {
    /// Its requested size.
    size: u64,
    /// Its stack id.
    stack_id: u32,
}

/// Indexes `0..len` in order of `time(i)`, equal times in index order.
#[cfg(any(test, feature = "oracle"))]
fn time_order(len: usize, time: impl Fn(usize) -> u64) -> Vec<u32> {
    let mut order: Vec<u32> = (0..len as u32).collect();
    if !(1..len).all(|i| time(i - 1) <= time(i)) {
        order.sort_by_key(|&i| time(i as usize));
    }
    order
}

/// When the process exec'd, ascending: the first time a mapping of each address-space
/// generation after the first was reported.
pub fn exec_times(mappings: &[Mapping]) -> Vec<u64> {
    let mut first: BTreeMap<u32, u64> = BTreeMap::new();
    for mapping in mappings
        .iter()
        .filter(|m| m.generation > 0 && m.time_ns > 0)
    {
        let time = first.entry(mapping.generation).or_insert(mapping.time_ns);
        *time = (*time).min(mapping.time_ns);
    }
    let mut times: Vec<u64> = first.into_values().collect();
    times.sort_unstable();
    times
}

/// The end of a trace: its last allocation event or fault, whichever is later.
pub fn trace_end_ns(events: &[AllocEvent], faults: &[Fault]) -> u64 {
    let last_event = events.iter().map(|e| e.time_ns).max().unwrap_or(0);
    let last_fault = faults.iter().map(|f| f.time_ns).max().unwrap_or(0);
    last_event.max(last_fault)
}

mod fault_attribution;
mod heap_index;
mod one_pass;
#[cfg(test)]
mod tests;
mod totals;
// The tests' oracle of the one pass, not in the binary: built for this crate's tests and for
// the `oracle` feature that the other crates' tests turn on.
#[cfg(any(test, feature = "oracle"))]
mod whole_table;

pub(crate) use one_pass::ByStack;
pub use one_pass::{AllocPass, BlockHit, LargeBlock, LiveStackFigures, OutOfOrder, PassTotals};
pub use totals::{AllocSiteTotals, AllocStats, SizeHistogram};
#[cfg(any(test, feature = "oracle"))]
pub use whole_table::{Lifetimes, attribute_faults};
