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

    /// Whether the call makes a heap block and gives none back: malloc and its zeroed and
    /// aligned kin, not realloc.
    pub fn is_new_heap_block(self) -> bool {
        matches!(
            self,
            AllocCall::Malloc
                | AllocCall::Calloc
                | AllocCall::Valloc
                | AllocCall::Pvalloc
                | AllocCall::Memalign
                | AllocCall::AlignedAlloc
                | AllocCall::PosixMemalign
        )
    }
}

/// How often the allocation clock moves on, the resolution of [`AllocEvent::time_ns`]: a call's
/// recorded time is the last tick before it, so it may precede the call by a tick (by more when
/// the recorder's ticking thread was kept off a CPU).
pub const ALLOC_CLOCK_TICK_NS: u64 = 1_000_000;

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

/// The calls of one (stack, call, size): a row of `fltrace-data-allocsums-<pid>.parquet`,
/// the totals heaptrack keeps per allocation site, which answer "which stacks allocate how
/// much" without reading every event.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct AllocTotal {
    /// The calls' stack in the allocation stack table.
    pub stack_id: u32,
    /// The call.
    pub call: AllocCall,
    /// The size asked for (see [`AllocEvent::size`]).
    pub size: u64,
    /// Calls made.
    pub count: u64,
    /// Their sizes summed (saturating at `u64::MAX`).
    pub bytes: u64,
}

/// Sums events into [`AllocTotal`]s: every event recorded with a stack counts, failed calls
/// included, so that the totals are exactly the sums over the event table's rows that have
/// a stack (the frees and `munmap`s have none).
#[derive(Debug, Default)]
pub struct AllocTotals {
    by_key: std::collections::HashMap<TotalKey, (u64, u64), FastHash>,
    /// The keys counted lately, each with the counts not yet in `by_key`, in a slot chosen
    /// by the key: a program's calls of a few hundred stacks and sizes, in any order, cost
    /// a comparison each instead of a hash table's lookup. Made on the first call.
    recent: Option<Box<[Recent; RECENT]>>,
}

/// Stack id, call and size.
type TotalKey = (u32, AllocCall, u64);

/// A key counted lately and its counts not yet in the map; no calls: an empty slot.
#[derive(Debug, Clone, Copy)]
struct Recent {
    key: TotalKey,
    counts: (u64, u64),
}

/// Slots of [`AllocTotals::recent`]: 32 KiB.
const RECENT: usize = 1024;

/// The slot of `key`: a multiplicative hash, which spreads consecutive sizes over the
/// slots without collisions.
fn recent_slot((stack_id, call, size): TotalKey) -> usize {
    let mixed = size ^ (u64::from(stack_id) << 32) ^ ((call as u64) << 56);
    (mixed.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> (64 - RECENT.trailing_zeros())) as usize
}

impl AllocTotals {
    /// Counts `event`, if it has a stack.
    #[inline]
    pub fn add(&mut self, event: &AllocEvent) {
        if event.stack_id == AllocEvent::NO_STACK {
            return;
        }
        let key = (event.stack_id, event.call, event.size);
        let recent = self.recent.get_or_insert_with(|| {
            Box::new(
                [Recent {
                    key: (0, AllocCall::Malloc, 0),
                    counts: (0, 0),
                }; RECENT],
            )
        });
        let slot = &mut recent[recent_slot(key)];
        if slot.counts.0 == 0 || slot.key != key {
            if slot.counts.0 != 0 {
                let (count, bytes) = slot.counts;
                add_counts(self.by_key.entry(slot.key).or_default(), count, bytes);
            }
            *slot = Recent {
                key,
                counts: (0, 0),
            };
        }
        add_call(&mut slot.counts, event.size);
    }

    /// The counts of the recent keys not yet in the map.
    fn recent(&self) -> impl Iterator<Item = &Recent> {
        self.recent
            .iter()
            .flat_map(|recent| recent.iter())
            .filter(|slot| slot.counts.0 != 0)
    }

    /// Adds the totals of other events: counted apart (on several threads), the same totals.
    pub fn merge(&mut self, other: AllocTotals) {
        for slot in other.recent() {
            let (count, bytes) = slot.counts;
            add_counts(self.by_key.entry(slot.key).or_default(), count, bytes);
        }
        for (key, (count, bytes)) in other.by_key {
            add_counts(self.by_key.entry(key).or_default(), count, bytes);
        }
    }

    /// The totals, by stack, call and size.
    pub fn totals(&self) -> Vec<AllocTotal> {
        let mut by_key = self.by_key.clone();
        for slot in self.recent() {
            let (count, bytes) = slot.counts;
            add_counts(by_key.entry(slot.key).or_default(), count, bytes);
        }
        let mut totals: Vec<AllocTotal> = by_key.into_iter().map(AllocTotal::of).collect();
        totals.sort_unstable();
        totals
    }
}

impl AllocTotal {
    /// The total of a key and its counts (calls, bytes).
    fn of(((stack_id, call, size), (count, bytes)): (TotalKey, (u64, u64))) -> AllocTotal {
        AllocTotal {
            stack_id,
            call,
            size,
            count,
            bytes,
        }
    }
}

/// One call of `size` bytes counted in `total` (calls, bytes).
#[inline]
fn add_call(total: &mut (u64, u64), size: u64) {
    total.0 += 1;
    total.1 = total.1.saturating_add(size);
}

/// Counts made apart added to `total`: sums of sizes saturate alike in any order, at the true
/// sum or `u64::MAX`.
fn add_counts(total: &mut (u64, u64), count: u64, bytes: u64) {
    total.0 += count;
    total.1 = total.1.saturating_add(bytes);
}

/// A multiply-rotate hash for the totals' small integer keys: counting runs once per
/// allocation while the recorder converts, where SipHash's cost showed.
#[derive(Debug, Default, Clone, Copy)]
struct FastHash;

impl std::hash::BuildHasher for FastHash {
    type Hasher = FastHasher;
    fn build_hasher(&self) -> FastHasher {
        FastHasher(0)
    }
}

struct FastHasher(u64);

impl std::hash::Hasher for FastHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.write_u64(u64::from(b));
        }
    }
    fn write_u8(&mut self, n: u8) {
        self.write_u64(u64::from(n));
    }
    fn write_u32(&mut self, n: u32) {
        self.write_u64(u64::from(n));
    }
    fn write_u64(&mut self, n: u64) {
        self.0 = (self.0.rotate_left(5) ^ n).wrapping_mul(0x51_7c_c1_b7_27_22_0a_95);
    }
    fn write_usize(&mut self, n: usize) {
        self.write_u64(n as u64);
    }
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
        assert!(AllocCall::Memalign.is_new_heap_block());
        assert!(!AllocCall::Realloc.is_new_heap_block() && !AllocCall::Free.is_new_heap_block());
    }

    /// Totals count every call with a stack by (stack, call, size), and nothing else.
    #[test]
    fn totals_sum_calls_with_a_stack() {
        let event = |call, size, stack_id| AllocEvent {
            time_ns: 0,
            tid: 1,
            call,
            addr: crate::VirtAddr::new(0x1000),
            size,
            old_addr: crate::VirtAddr::new(0),
            detail: 0,
            stack_id,
        };
        let mut totals = AllocTotals::default();
        for e in [
            event(AllocCall::Malloc, 16, 2),
            event(AllocCall::Malloc, 16, 2),
            event(AllocCall::Calloc, 16, 2),
            event(AllocCall::Malloc, u64::MAX, 1),
            event(AllocCall::Malloc, u64::MAX, 1),
            event(AllocCall::Free, 0, AllocEvent::NO_STACK),
        ] {
            totals.add(&e);
        }
        let total = |stack_id, call, size, count, bytes| AllocTotal {
            stack_id,
            call,
            size,
            count,
            bytes,
        };
        assert_eq!(
            totals.totals(),
            [
                total(1, AllocCall::Malloc, u64::MAX, 2, u64::MAX),
                total(2, AllocCall::Malloc, 16, 2, 32),
                total(2, AllocCall::Calloc, 16, 1, 16),
            ]
        );
    }

    /// More keys than recent slots, evicting each other, on two counters merged: the totals
    /// of every call counted one by one.
    #[test]
    fn keys_past_the_recent_slots_are_counted_exactly() {
        // Five times more keys than slots, in an order that makes them evict each other,
        // each key counted three times; half counted apart and merged.
        let mut expected = std::collections::BTreeMap::new();
        let (mut first, mut second) = (AllocTotals::default(), AllocTotals::default());
        for round in 0..3u64 {
            for i in 0..5 * RECENT as u64 {
                let size = (i * 7919 + round) % (5 * RECENT as u64);
                let stack_id = (i % 3) as u32;
                let call = if i % 5 == 0 {
                    AllocCall::Calloc
                } else {
                    AllocCall::Malloc
                };
                let event = AllocEvent {
                    time_ns: 0,
                    tid: 1,
                    call,
                    addr: crate::VirtAddr::new(0x1000),
                    size,
                    old_addr: crate::VirtAddr::new(0),
                    detail: 0,
                    stack_id,
                };
                if i % 2 == 0 { &mut first } else { &mut second }.add(&event);
                let entry = expected
                    .entry((stack_id, call, size))
                    .or_insert((0u64, 0u64));
                entry.0 += 1;
                entry.1 += size;
            }
        }
        first.merge(second);
        let expected: Vec<AllocTotal> = expected.into_iter().map(AllocTotal::of).collect();
        assert_eq!(first.totals(), expected);
    }

    /// Keys counted again and again, in runs or alternating, come out whole, and merged.
    #[test]
    fn runs_of_one_key_are_counted_whole_and_merged() {
        let event = |size, stack_id| AllocEvent {
            time_ns: 0,
            tid: 1,
            call: AllocCall::Malloc,
            addr: crate::VirtAddr::new(0x1000),
            size,
            old_addr: crate::VirtAddr::new(0),
            detail: 0,
            stack_id,
        };
        let (mut first, mut second) = (AllocTotals::default(), AllocTotals::default());
        for (size, stack_id) in [(8, 1), (8, 1), (32, 1), (8, 1), (8, 2), (8, 1)] {
            first.add(&event(size, stack_id));
        }
        for (size, stack_id) in [(8, 1), (32, 1), (32, 1)] {
            second.add(&event(size, stack_id));
        }
        let total = |stack_id, size, count, bytes| AllocTotal {
            stack_id,
            call: AllocCall::Malloc,
            size,
            count,
            bytes,
        };
        assert_eq!(
            first.totals(),
            [total(1, 8, 4, 32), total(1, 32, 1, 32), total(2, 8, 1, 8)]
        );
        first.merge(second);
        assert_eq!(
            first.totals(),
            [total(1, 8, 5, 40), total(1, 32, 3, 96), total(2, 8, 1, 8)]
        );
    }
}
