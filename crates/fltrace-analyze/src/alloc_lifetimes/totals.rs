//! Totals per allocating stack ([`AllocSiteTotals`] in [`AllocStats`]) and the size
//! histograms, from the whole-table pairing.

use std::collections::BTreeMap;

#[cfg(any(test, feature = "oracle"))]
use rustc_hash::FxHashSet;

#[cfg(any(test, feature = "oracle"))]
use fltrace_trace::{AllocCall, AllocEvent};

use super::BlockKind;
#[cfg(any(test, feature = "oracle"))]
use super::Lifetimes;

/// Allocation counts by size, in power-of-two buckets: bucket 0 holds size 0, bucket `k`
/// sizes from `2^(k-1)` to `2^k - 1`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SizeHistogram {
    /// Allocations per bucket.
    pub counts: [u64; 65],
    /// Bytes per bucket.
    pub bytes: [u64; 65],
}

impl Default for SizeHistogram {
    fn default() -> Self {
        SizeHistogram {
            counts: [0; 65],
            bytes: [0; 65],
        }
    }
}

impl SizeHistogram {
    /// The bucket of `size`.
    pub fn bucket(size: u64) -> usize {
        (u64::BITS - size.leading_zeros()) as usize
    }

    /// The smallest and largest size of `bucket`.
    pub fn range(bucket: usize) -> (u64, u64) {
        match bucket {
            0 => (0, 0),
            64.. => (1 << 63, u64::MAX),
            k => (1 << (k - 1), (1 << k) - 1),
        }
    }

    /// Counts one allocation.
    pub fn add(&mut self, size: u64) {
        let bucket = Self::bucket(size);
        self.counts[bucket] += 1;
        self.bytes[bucket] = self.bytes[bucket].saturating_add(size);
    }

    /// The non-empty buckets as `(bucket, count, bytes)`, smallest first.
    pub fn buckets(&self) -> impl Iterator<Item = (usize, u64, u64)> + '_ {
        (0..65)
            .filter(|&b| self.counts[b] > 0)
            .map(|b| (b, self.counts[b], self.bytes[b]))
    }
}

impl std::ops::AddAssign<&SizeHistogram> for SizeHistogram {
    fn add_assign(&mut self, other: &SizeHistogram) {
        for bucket in 0..65 {
            self.counts[bucket] += other.counts[bucket];
            self.bytes[bucket] = self.bytes[bucket].saturating_add(other.bytes[bucket]);
        }
    }
}

/// Allocation totals of one stack (or of everything sharing a key).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct AllocSiteTotals {
    /// Allocations (remnants of cut mappings are not new ones).
    pub allocs: u64,
    /// Bytes allocated.
    pub bytes: u64,
    /// Allocation calls that failed.
    pub failed: u64,
    /// Allocations with memory still alive at the end of the trace, leaving out those younger
    /// than the leak age asked for.
    pub leaked_allocs: u64,
    /// Their bytes still alive.
    pub leaked_bytes: u64,
    /// Heap allocations whose free was temporary by heaptrack's rule (see [`LastAlloc`]).
    pub temporary: u64,
    /// Heap bytes alive at the heap peak.
    pub peak_bytes: u64,
    /// Heap blocks alive at the heap peak.
    pub peak_allocs: u64,
}

impl std::ops::AddAssign for AllocSiteTotals {
    fn add_assign(&mut self, other: AllocSiteTotals) {
        self.allocs += other.allocs;
        self.bytes = self.bytes.saturating_add(other.bytes);
        self.failed += other.failed;
        self.leaked_allocs += other.leaked_allocs;
        self.leaked_bytes = self.leaked_bytes.saturating_add(other.leaked_bytes);
        self.temporary += other.temporary;
        self.peak_bytes += other.peak_bytes;
        self.peak_allocs += other.peak_allocs;
    }
}

/// What one process allocated, per stack.
#[derive(Debug, Clone, Default)]
pub struct AllocStats {
    /// Totals per allocating stack id, with the kind of memory that stack allocates.
    pub stacks: BTreeMap<u32, (BlockKind, AllocSiteTotals)>,
    /// Sizes of the heap allocations.
    pub heap_sizes: SizeHistogram,
    /// When live heap bytes peaked, in ns (see [`Lifetimes::peak_ns`]).
    pub peak_ns: u64,
    /// Live heap bytes at the peak.
    pub peak_bytes: u64,
    /// The end of the trace the leaks were taken at.
    pub end_ns: u64,
    /// Frees of unknown addresses (see [`Lifetimes::unknown_frees`]).
    pub unknown_frees: u64,
    /// Blocks handed out over live ones (see [`Lifetimes::overlaps`]).
    pub overlaps: u64,
}

impl AllocStats {
    /// Totals per stack of `events`, paired into `lifetimes`. Leaks are the blocks alive at
    /// `end_ns` (see [`trace_end_ns`]) whose allocation is at least `min_leak_age_ns` older.
    #[cfg(any(test, feature = "oracle"))]
    pub fn new(
        events: &[AllocEvent],
        lifetimes: &Lifetimes,
        end_ns: u64,
        min_leak_age_ns: u64,
    ) -> AllocStats {
        let mut stats = AllocStats {
            peak_ns: lifetimes.peak_ns,
            peak_bytes: lifetimes.peak_bytes,
            end_ns,
            unknown_frees: lifetimes.unknown_frees,
            overlaps: lifetimes.overlaps,
            ..AllocStats::default()
        };
        let kind_of = |call: AllocCall| {
            if call.is_heap() {
                BlockKind::Heap
            } else {
                BlockKind::Mapping
            }
        };
        // A mapping cut in two is one leaked allocation, not two.
        let mut leaked_remnants: FxHashSet<u32> = FxHashSet::default();
        for block in &lifetimes.blocks {
            let totals = &mut stats
                .stacks
                .entry(block.stack_id)
                .or_insert((block.kind, AllocSiteTotals::default()))
                .1;
            if !block.remnant {
                totals.allocs += 1;
                totals.bytes = totals.bytes.saturating_add(block.size);
                if block.kind == BlockKind::Heap {
                    stats.heap_sizes.add(block.size);
                }
            }
            if block.temporary {
                totals.temporary += 1;
            }
            let allocated_ns = events.get(block.event as usize).map_or(0, |e| e.time_ns);
            if block.end_ns.is_none() && end_ns.saturating_sub(allocated_ns) >= min_leak_age_ns {
                if !block.remnant || leaked_remnants.insert(block.event) {
                    totals.leaked_allocs += 1;
                }
                totals.leaked_bytes = totals.leaked_bytes.saturating_add(block.size);
            }
            if block.kind == BlockKind::Heap
                && lifetimes.peak_bytes > 0
                && block.alive_at(lifetimes.peak_ns)
            {
                totals.peak_bytes += block.size;
                totals.peak_allocs += 1;
            }
        }
        for &index in &lifetimes.failed {
            if let Some(event) = events.get(index as usize) {
                stats
                    .stacks
                    .entry(event.stack_id)
                    .or_insert((kind_of(event.call), AllocSiteTotals::default()))
                    .1
                    .failed += 1;
            }
        }
        stats
    }

    /// The totals of every stack allocating `kind` of memory.
    pub fn total(&self, kind: BlockKind) -> AllocSiteTotals {
        let mut total = AllocSiteTotals::default();
        for (k, totals) in self.stacks.values() {
            if *k == kind {
                total += *totals;
            }
        }
        total
    }
}
