//! The live heap blocks of an [`super::AllocPass`], looked up by address: small blocks in
//! hashed 4 KiB granules, the rest (and every block, once faults are attributed) in a
//! [`RangeMap`].
//!
//! A pass without faults only asks which live blocks a new one overlaps and which starts at
//! a freed address: a hash lookup of a granule or three and a scan of the few blocks that
//! start in them, where the ordered map's binary searches and moves took most of the time
//! of pairing at record time (issue 40); the block added last waits outside the granules,
//! where the free of a temporary finds it. Faults ask for the block below an address, which
//! only the ordered map answers: the first fault moves every block there for good.

use rustc_hash::FxHashMap;

use fltrace_trace::VirtAddr;

use crate::range_map::RangeMap;

/// Blocks of at most this many bytes are kept by granule.
const SMALL: u64 = 1 << GRANULE_SHIFT;
/// Granules of 4 KiB: a dense heap of small blocks puts a dozen or so in each.
const GRANULE_SHIFT: u32 = 12;
/// Emptied granules' vectors kept for reuse, so that a granule filled and emptied over and
/// over does not allocate each time.
const SPARE_VECS: usize = 64;

/// One small block: `[start, end)` and its slot.
#[derive(Debug, Clone, Copy)]
struct Small {
    start: VirtAddr,
    end: VirtAddr,
    slot: u32,
}

/// Live heap blocks, `[start, end)` each with a slot, that never overlap (as [`RangeMap`]
/// keeps them: a block is added only once what it overlaps was taken).
#[derive(Debug)]
pub(crate) struct HeapIndex {
    /// Blocks of at most [`SMALL`] bytes by the granule of their start; `None` once faults
    /// need the ordered map for every block.
    small: Option<FxHashMap<u64, Vec<Small>>>,
    /// Larger blocks, or every block.
    ordered: RangeMap<u32>,
    spare: Vec<Vec<Small>>,
    /// The small block added last, kept out of the granules until another comes: a block
    /// freed before the next allocation (a temporary, most blocks of many programs) then
    /// never touches the hash map. Always `None` once every block is ordered.
    last: Option<Small>,
    /// The largest small block added so far: a block overlapping a query's start starts
    /// less than this far below it, so that a query of a heap of small blocks looks at one
    /// granule most of the time.
    reach: u64,
}

impl Default for HeapIndex {
    fn default() -> Self {
        HeapIndex::new()
    }
}

impl HeapIndex {
    /// An index that keeps small blocks by granule until [`HeapIndex::ordered`] is called.
    pub(crate) fn new() -> HeapIndex {
        HeapIndex {
            small: Some(FxHashMap::default()),
            ordered: RangeMap::default(),
            spare: Vec::new(),
            last: None,
            reach: 0,
        }
    }

    /// Every block in the ordered map, for lookups of the block below an address.
    pub(crate) fn ordered(&mut self) -> &RangeMap<u32> {
        if let Some(small) = self.small.take() {
            let mut all: Vec<Small> = small.into_values().flatten().collect();
            all.extend(self.last.take());
            all.sort_unstable_by_key(|b| b.start);
            for b in all {
                self.ordered.insert(b.start, b.end, b.slot);
            }
            self.spare = Vec::new();
        }
        &self.ordered
    }

    /// Removes and returns, lowest first, every block overlapping `[start, end)` (an empty
    /// query overlaps a block only by its start), as [`RangeMap::take_overlapping`].
    pub(crate) fn take_overlapping(
        &mut self,
        start: VirtAddr,
        end: VirtAddr,
    ) -> Vec<(VirtAddr, VirtAddr, u32)> {
        let mut taken = if self.ordered.is_empty() {
            Vec::new()
        } else {
            self.ordered.take_overlapping(start, end)
        };
        let Some(small) = &mut self.small else {
            return taken;
        };
        let end = end.max(start.saturating_add(1));
        // A small block overlapping the query starts within it, or below it by less than
        // `reach` bytes and ends past its start.
        let overlaps = |b: &Small| b.start < end && (b.start >= start || b.end > start);
        let low = start.get().saturating_sub(self.reach.saturating_sub(1)) >> GRANULE_SHIFT;
        let high = (end.get() - 1) >> GRANULE_SHIFT;
        let before = taken.len();
        if let Some(b) = self.last.filter(overlaps) {
            self.last = None;
            taken.push((b.start, b.end, b.slot));
        }
        let in_use = small.len() as u64;
        let mut take_from = |granule: u64, blocks: &mut Vec<Small>| {
            let mut i = 0;
            while i < blocks.len() {
                if overlaps(&blocks[i]) {
                    let b = blocks.swap_remove(i);
                    taken.push((b.start, b.end, b.slot));
                } else {
                    i += 1;
                }
            }
            blocks.is_empty().then_some(granule)
        };
        let mut emptied = Vec::new();
        if high - low < in_use {
            for granule in low..=high {
                if let Some(blocks) = small.get_mut(&granule) {
                    emptied.extend(take_from(granule, blocks));
                }
            }
        } else {
            // A query wider than the granules in use: each of them, not each it spans.
            for (&granule, blocks) in small.iter_mut() {
                if (low..=high).contains(&granule) {
                    emptied.extend(take_from(granule, blocks));
                }
            }
        }
        for granule in emptied {
            if let Some(blocks) = small.remove(&granule)
                && self.spare.len() < SPARE_VECS
            {
                self.spare.push(blocks);
            }
        }
        if taken.len() > before {
            taken.sort_unstable_by_key(|&(s, _, _)| s);
        }
        taken
    }

    /// Adds a block; the caller has taken whatever overlapped it
    /// ([`HeapIndex::take_overlapping`]).
    pub(crate) fn insert(&mut self, start: VirtAddr, end: VirtAddr, slot: u32) {
        match &mut self.small {
            Some(small) if end.get().saturating_sub(start.get()) <= SMALL => {
                self.reach = self.reach.max(end.get().saturating_sub(start.get()));
                if let Some(b) = self.last.replace(Small { start, end, slot }) {
                    let spare = &mut self.spare;
                    small
                        .entry(b.start.get() >> GRANULE_SHIFT)
                        .or_insert_with(|| spare.pop().unwrap_or_default())
                        .push(b);
                }
            }
            _ => self.ordered.insert(start, end, slot),
        }
    }

    /// Removes the block starting exactly at `start`, giving its end and slot.
    pub(crate) fn remove_starting_at(&mut self, start: VirtAddr) -> Option<(VirtAddr, u32)> {
        if let Some(b) = self.last.filter(|b| b.start == start) {
            self.last = None;
            return Some((b.end, b.slot));
        }
        if let Some(small) = &mut self.small {
            let granule = start.get() >> GRANULE_SHIFT;
            if let Some(blocks) = small.get_mut(&granule)
                && let Some(i) = blocks.iter().position(|b| b.start == start)
            {
                let b = blocks.swap_remove(i);
                if blocks.is_empty()
                    && let Some(blocks) = small.remove(&granule)
                    && self.spare.len() < SPARE_VECS
                {
                    self.spare.push(blocks);
                }
                return Some((b.end, b.slot));
            }
        }
        self.ordered.remove_starting_at(start)
    }

    /// Removes every block, lowest first.
    pub(crate) fn drain(&mut self) -> Vec<(VirtAddr, VirtAddr, u32)> {
        let mut all: Vec<(VirtAddr, VirtAddr, u32)> = self.ordered.drain().collect();
        if let Some(small) = &mut self.small {
            all.extend(
                small
                    .drain()
                    .flat_map(|(_, blocks)| blocks)
                    .chain(self.last.take())
                    .map(|b| (b.start, b.end, b.slot)),
            );
            all.sort_unstable_by_key(|&(s, _, _)| s);
        }
        all
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Random blocks, small and large, empty ones among them, added over whatever they
    /// overlap, freed at random starts and drained: the index takes, removes and drains
    /// exactly what the ordered map does, block for block (none lost, none merged), before
    /// and after it moves every block into the ordered map.
    #[test]
    fn heap_index_is_the_ordered_map() {
        let mut seed = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = move |n: u64| {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed % n
        };
        let (mut taken_total, mut removed_total) = (0usize, 0usize);
        for round in 0..30 {
            let mut index = HeapIndex::new();
            let mut oracle: RangeMap<u32> = RangeMap::default();
            let mut live = 0usize;
            let mut added = vec![VirtAddr::new(0x10_0000)];
            for op in 0..3000u32 {
                if round % 3 == 1 && op == 1500 {
                    index.ordered();
                }
                let start = VirtAddr::new(0x10_0000 + next(400) * 48);
                if next(3) == 0 {
                    // Mostly a start added before, which may be gone since; often the last
                    // one (a temporary).
                    let start = match next(4) {
                        0 => start,
                        1 => added[added.len() - 1],
                        _ => added[next(added.len() as u64) as usize],
                    };
                    let (a, b) = (
                        index.remove_starting_at(start),
                        oracle.remove_starting_at(start),
                    );
                    assert_eq!(a, b, "round {round} op {op}: free of {start:?}");
                    removed_total += usize::from(a.is_some());
                    live -= usize::from(a.is_some());
                    continue;
                }
                let size = match next(10) {
                    0 => 0,
                    1 => SMALL,
                    2 => SMALL + 1 + next(3 * SMALL),
                    3 => next(40_000),
                    _ => 1 + next(600),
                };
                let end = VirtAddr::new(start.get() + size);
                let (a, b) = (
                    index.take_overlapping(start, end),
                    oracle.take_overlapping(start, end),
                );
                assert_eq!(a, b, "round {round} op {op}: [{start:?}, {end:?})");
                taken_total += a.len();
                live -= a.len();
                index.insert(start, end, op);
                oracle.insert(start, end, op);
                added.push(start);
                live += 1;
            }
            let drained = index.drain();
            assert_eq!(
                drained.len(),
                live,
                "round {round}: every live block drained"
            );
            assert_eq!(drained, oracle.drain().collect::<Vec<_>>());
        }
        // The random calls did what the test means them to: many overlaps and frees.
        assert!(taken_total > 10_000, "{taken_total} blocks taken");
        assert!(removed_total > 1_000, "{removed_total} blocks freed");
    }
}
