//! The live heap blocks of an [`super::AllocPass`], looked up by address: small blocks at
//! 8-byte aligned starts in bitmaps of the address space (and a hash map by start), the rest
//! (and every block, once faults are attributed) in a [`RangeMap`].
//!
//! A pass without faults only asks which live blocks a new one overlaps and which starts at
//! a freed address. Most new blocks overlap none: one or two words of a bitmap of 8-byte
//! units say so, where the ordered map's binary searches and moves, then hashed 4 KiB
//! granules of blocks scanned one by one, took most of the time of pairing at record time
//! (issue 40). The block added last waits outside the bitmaps, where the free of a temporary
//! finds it. Faults ask for the block below an address, which only the ordered map answers:
//! the first fault moves every block there for good.

use rustc_hash::FxHashMap;

use fltrace_trace::VirtAddr;

use crate::range_map::RangeMap;

/// Blocks of at most this many bytes are kept in the bitmaps.
const SMALL: u64 = 4096;
/// Bytes of a unit of the bitmaps, as a shift: blocks kept there start at a multiple of 8
/// (malloc's alignment is 16 on x86_64, some allocators hand out 8-byte blocks at 8), so
/// that no two of them share a unit and a freed block clears its units exactly.
const UNIT_SHIFT: u32 = 3;
/// Bytes of address space a leaf of the bitmaps covers, as a shift: 32 KiB, 4,096 units, a
/// 1 KiB leaf (both bitmaps).
const LEAF_SHIFT: u32 = 15;
/// Units of a leaf.
const LEAF_UNITS: u64 = 1 << (LEAF_SHIFT - UNIT_SHIFT);
/// Words of a leaf's bitmap.
const WORDS: usize = (LEAF_UNITS / 64) as usize;
/// No leaf cached.
const NO_LEAF: u64 = u64::MAX;
/// Leaves cached, by their key modulo this: 2 MiB of heap looked up without hashing.
const CACHED: usize = 64;

/// One small block: `[start, end)` and its slot.
#[derive(Debug, Clone, Copy)]
struct Small {
    start: VirtAddr,
    end: VirtAddr,
    slot: u32,
}

impl Small {
    /// Whether it overlaps `[start, end)`, `end > start` (an empty block overlaps by its start).
    #[inline]
    fn overlaps(&self, start: VirtAddr, end: VirtAddr) -> bool {
        self.start < end && (self.start >= start || self.end > start)
    }
}

/// The units of 32 KiB of address space.
#[derive(Debug, Clone)]
struct Leaf {
    /// Units some block of the bitmaps holds a byte of (an empty block: the unit of its start).
    covered: [u64; WORDS],
    /// Units a block starts at.
    starts: [u64; WORDS],
    /// Blocks with units here: the leaf goes when none is left.
    blocks: u32,
}

impl Leaf {
    const EMPTY: Leaf = Leaf {
        covered: [0; WORDS],
        starts: [0; WORDS],
        blocks: 0,
    };
}

/// The mask of bits `lo..=hi` of a word.
#[inline]
fn mask(lo: u64, hi: u64) -> u64 {
    (u64::MAX >> (63 - (hi - lo))) << lo
}

/// Small blocks at aligned starts: by start in a hash map (for frees), their units in
/// bitmaps by leaf (for the overlap check of a new block).
#[derive(Debug)]
struct Bitmaps {
    /// Every block, by start: its end and slot.
    blocks: FxHashMap<VirtAddr, (VirtAddr, u32)>,
    leaves: Vec<Leaf>,
    /// Leaves not in use, to reuse.
    unused: Vec<u32>,
    /// The leaves in use, by the address they cover shifted by [`LEAF_SHIFT`].
    by_key: FxHashMap<u64, u32>,
    /// Leaves looked up lately, (key, index) at the key modulo [`CACHED`]: a heap's calls
    /// stay in a few leaves.
    cached: [(u64, u32); CACHED],
    /// The largest block added so far: a block overlapping a query's start starts less than
    /// this far below it.
    reach: u64,
}

impl Bitmaps {
    fn new() -> Bitmaps {
        Bitmaps {
            blocks: FxHashMap::default(),
            leaves: Vec::new(),
            unused: Vec::new(),
            by_key: FxHashMap::default(),
            cached: [(NO_LEAF, 0); CACHED],
            reach: 0,
        }
    }

    /// Whether the bitmaps take `[start, end)`: small, at an aligned start.
    #[inline]
    fn fits(start: VirtAddr, end: VirtAddr) -> bool {
        start.get() & ((1 << UNIT_SHIFT) - 1) == 0 && end.get() - start.get() <= SMALL
    }

    /// The units of `[start, end)`, first and last: an empty block has the unit of its start.
    #[inline]
    fn units(start: VirtAddr, end: VirtAddr) -> (u64, u64) {
        let last = end.get().max(start.get().saturating_add(1)) - 1;
        (start.get() >> UNIT_SHIFT, last >> UNIT_SHIFT)
    }

    #[inline]
    fn leaf(&mut self, key: u64) -> Option<u32> {
        let cached = &mut self.cached[key as usize % CACHED];
        if cached.0 == key {
            return Some(cached.1);
        }
        let index = *self.by_key.get(&key)?;
        *cached = (key, index);
        Some(index)
    }

    /// Calls `each(leaf, base, lo, hi)` for every leaf in use holding units `first..=last`,
    /// `base` its first unit, `lo` and `hi` the first and last of those units in it: leaf by
    /// leaf over the range, or over the leaves in use when fewer than the range spans.
    fn spans(&mut self, first: u64, last: u64, mut each: impl FnMut(&mut Leaf, u64, u64, u64)) {
        let (first_key, last_key) = (first / LEAF_UNITS, last / LEAF_UNITS);
        let in_leaf = |key: u64| {
            let base = key * LEAF_UNITS;
            (
                base,
                first.max(base) - base,
                last.min(base + LEAF_UNITS - 1) - base,
            )
        };
        if last_key - first_key < self.by_key.len() as u64 {
            for key in first_key..=last_key {
                if let Some(index) = self.leaf(key) {
                    let (base, lo, hi) = in_leaf(key);
                    each(&mut self.leaves[index as usize], base, lo, hi);
                }
            }
        } else {
            for (&key, &index) in &self.by_key {
                if (first_key..=last_key).contains(&key) {
                    let (base, lo, hi) = in_leaf(key);
                    each(&mut self.leaves[index as usize], base, lo, hi);
                }
            }
        }
    }

    /// Whether any unit of `first..=last` is covered.
    #[inline]
    fn any_covered(&mut self, first: u64, last: u64) -> bool {
        // Most queries: a few words of one leaf.
        let key = first / LEAF_UNITS;
        if key == last / LEAF_UNITS {
            let Some(index) = self.leaf(key) else {
                return false;
            };
            let leaf = &self.leaves[index as usize];
            let (lo, hi) = (first % LEAF_UNITS, last % LEAF_UNITS);
            // A block of up to 64 units is in one word or two.
            let (w0, w1) = ((lo / 64) as usize, (hi / 64) as usize);
            if w1 - w0 <= 1 {
                let (first, second) = if w0 == w1 {
                    (mask(lo % 64, hi % 64), 0)
                } else {
                    (mask(lo % 64, 63), mask(0, hi % 64))
                };
                return leaf.covered[w0] & first | leaf.covered[w1] & second != 0;
            }
            return any_in(&leaf.covered, lo, hi);
        }
        let mut any = false;
        self.spans(first, last, |leaf, _, lo, hi| {
            any = any || any_in(&leaf.covered, lo, hi);
        });
        any
    }

    /// Sets (or clears) the bits of `[start, end)`'s units, and counts the block in (or out
    /// of) each leaf it has units in.
    fn mark(&mut self, start: VirtAddr, end: VirtAddr, set: bool) {
        let (first, last) = Bitmaps::units(start, end);
        for key in first / LEAF_UNITS..=last / LEAF_UNITS {
            let index = match self.leaf(key) {
                Some(index) => index,
                None => {
                    let index = match self.unused.pop() {
                        Some(index) => index,
                        None => {
                            self.leaves.push(Leaf::EMPTY);
                            (self.leaves.len() - 1) as u32
                        }
                    };
                    self.by_key.insert(key, index);
                    self.cached[key as usize % CACHED] = (key, index);
                    index
                }
            };
            let base = key * LEAF_UNITS;
            let (lo, hi) = (
                first.max(base) - base,
                last.min(base + LEAF_UNITS - 1) - base,
            );
            let leaf = &mut self.leaves[index as usize];
            set_in(&mut leaf.covered, lo, hi, set);
            if base <= first {
                set_in(&mut leaf.starts, lo, lo, set);
            }
            if set {
                leaf.blocks += 1;
            } else {
                leaf.blocks -= 1;
                if leaf.blocks == 0 {
                    self.by_key.remove(&key);
                    self.unused.push(index);
                    let cached = &mut self.cached[key as usize % CACHED];
                    if cached.0 == key {
                        *cached = (NO_LEAF, 0);
                    }
                }
            }
        }
    }

    fn insert(&mut self, b: Small) {
        self.reach = self.reach.max(b.end - b.start);
        self.blocks.insert(b.start, (b.end, b.slot));
        self.mark(b.start, b.end, true);
    }

    fn remove_starting_at(&mut self, start: VirtAddr) -> Option<(VirtAddr, u32)> {
        let (end, slot) = self.blocks.remove(&start)?;
        self.mark(start, end, false);
        Some((end, slot))
    }

    /// Whether `[start, end)` (`end > start`) overlaps no block.
    #[inline]
    fn overlaps_none(&mut self, start: VirtAddr, end: VirtAddr) -> bool {
        let (first, last) = Bitmaps::units(start, end);
        self.blocks.is_empty() || !self.any_covered(first, last)
    }

    /// Moves every block overlapping `[start, end)` (`end > start`) into `taken`.
    fn take_overlapping(
        &mut self,
        start: VirtAddr,
        end: VirtAddr,
        taken: &mut Vec<(VirtAddr, VirtAddr, u32)>,
    ) {
        if self.overlaps_none(start, end) {
            return;
        }
        let last = Bitmaps::units(start, end).1;
        // A block overlapping the query starts within it, or below it by less than `reach`
        // bytes: the starts there, each looked up.
        let low = start.get().saturating_sub(self.reach.saturating_sub(1)) >> UNIT_SHIFT;
        let mut starts = Vec::new();
        self.spans(low, last, |leaf, base, lo, hi| {
            for word in lo / 64..=hi / 64 {
                let from = lo.max(word * 64) - word * 64;
                let to = hi.min(word * 64 + 63) - word * 64;
                let mut bits = leaf.starts[word as usize] & mask(from, to);
                while bits != 0 {
                    let unit = base + word * 64 + u64::from(bits.trailing_zeros());
                    starts.push(VirtAddr::new(unit << UNIT_SHIFT));
                    bits &= bits - 1;
                }
            }
        });
        for s in starts {
            if let Some(&(e, slot)) = self.blocks.get(&s)
                && (Small {
                    start: s,
                    end: e,
                    slot,
                })
                .overlaps(start, end)
            {
                self.remove_starting_at(s);
                taken.push((s, e, slot));
            }
        }
    }
}

/// Whether any of bits `lo..=hi` of `words` is set.
#[inline]
fn any_in(words: &[u64; WORDS], lo: u64, hi: u64) -> bool {
    let (first, last) = ((lo / 64) as usize, (hi / 64) as usize);
    if first == last {
        return words[first] & mask(lo % 64, hi % 64) != 0;
    }
    words[first] & mask(lo % 64, 63) != 0
        || words[first + 1..last].iter().any(|&w| w != 0)
        || words[last] & mask(0, hi % 64) != 0
}

/// Sets or clears bits `lo..=hi` of `words`.
#[inline]
fn set_in(words: &mut [u64; WORDS], lo: u64, hi: u64, set: bool) {
    let (first, last) = ((lo / 64) as usize, (hi / 64) as usize);
    for (at, word) in words[first..=last].iter_mut().enumerate() {
        let from = if at == 0 { lo % 64 } else { 0 };
        let to = if first + at == last { hi % 64 } else { 63 };
        if set {
            *word |= mask(from, to);
        } else {
            *word &= !mask(from, to);
        }
    }
}

/// Live heap blocks, `[start, end)` each with a slot, that never overlap (as [`RangeMap`]
/// keeps them: a block is added only once what it overlaps was taken).
#[derive(Debug)]
pub(crate) struct HeapIndex {
    /// Small blocks at aligned starts; `None` once faults need the ordered map for every
    /// block.
    small: Option<Bitmaps>,
    /// The other blocks, or every block.
    ordered: RangeMap<u32>,
    /// The small block added last, kept out of the bitmaps until another comes: a block
    /// freed before the next allocation (a temporary, most blocks of many programs) then
    /// never touches them. Always `None` once every block is ordered.
    last: Option<Small>,
}

impl Default for HeapIndex {
    fn default() -> Self {
        HeapIndex::new()
    }
}

impl HeapIndex {
    /// An index that keeps small blocks in bitmaps until [`HeapIndex::ordered`] is called.
    pub(crate) fn new() -> HeapIndex {
        HeapIndex {
            small: Some(Bitmaps::new()),
            ordered: RangeMap::default(),
            last: None,
        }
    }

    /// Every block in the ordered map, for lookups of the block below an address.
    pub(crate) fn ordered(&mut self) -> &RangeMap<u32> {
        if let Some(small) = self.small.take() {
            let mut all: Vec<Small> = small
                .blocks
                .into_iter()
                .map(|(start, (end, slot))| Small { start, end, slot })
                .collect();
            all.extend(self.last.take());
            all.sort_unstable_by_key(|b| b.start);
            for b in all {
                self.ordered.insert(b.start, b.end, b.slot);
            }
        }
        &self.ordered
    }

    /// Whether `[start, end)` surely overlaps no block (an empty query: none starting at
    /// `start`), as most new blocks do: then [`HeapIndex::take_overlapping`] would take none.
    #[inline]
    pub(crate) fn overlaps_none(&mut self, start: VirtAddr, end: VirtAddr) -> bool {
        let Some(small) = &mut self.small else {
            return false;
        };
        let end = end.max(start.saturating_add(1));
        // A large block alive (a buffer, an arena) must not send every new block the slow way.
        !self.ordered.overlaps_any(start, end)
            && !self.last.is_some_and(|b| b.overlaps(start, end))
            && small.overlaps_none(start, end)
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
        let before = taken.len();
        if let Some(b) = self.last.filter(|b| b.overlaps(start, end)) {
            self.last = None;
            taken.push((b.start, b.end, b.slot));
        }
        small.take_overlapping(start, end, &mut taken);
        if taken.len() > before {
            taken.sort_unstable_by_key(|&(s, _, _)| s);
        }
        taken
    }

    /// Adds a block; the caller has taken whatever overlapped it
    /// ([`HeapIndex::take_overlapping`]).
    pub(crate) fn insert(&mut self, start: VirtAddr, end: VirtAddr, slot: u32) {
        match &mut self.small {
            Some(small) if Bitmaps::fits(start, end) => {
                if let Some(b) = self.last.replace(Small { start, end, slot }) {
                    small.insert(b);
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
        if let Some(small) = &mut self.small
            && let Some(found) = small.remove_starting_at(start)
        {
            return Some(found);
        }
        self.ordered.remove_starting_at(start)
    }

    /// Removes every block, lowest first.
    pub(crate) fn drain(&mut self) -> Vec<(VirtAddr, VirtAddr, u32)> {
        let mut all: Vec<(VirtAddr, VirtAddr, u32)> = self.ordered.drain().collect();
        if let Some(small) = &mut self.small {
            all.extend(
                std::mem::replace(small, Bitmaps::new())
                    .blocks
                    .into_iter()
                    .map(|(start, (end, slot))| (start, end, slot))
                    .chain(self.last.take().map(|b| (b.start, b.end, b.slot))),
            );
            all.sort_unstable_by_key(|&(s, _, _)| s);
        }
        all
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Xorshift numbers: `below(n)` is in `0..n`.
    struct Numbers(u64);

    impl Numbers {
        fn below(&mut self, n: u64) -> u64 {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            self.0 % n
        }
    }

    /// Random calls on the index and on the ordered map alike: blocks placed by `start` and
    /// sized by `size` added over whatever they overlap, frees at random starts (often the
    /// block added last: a temporary); in every third round the index moves its blocks into
    /// the ordered map halfway. Both must take and remove exactly the same, block for block
    /// (none lost, none merged). At the end of each round the live blocks are freed one by one
    /// (or drained) and no leaf of the bitmaps keeps a bit set. Gives the blocks taken over
    /// others and freed.
    fn against_ordered_map(
        numbers: &mut Numbers,
        start: impl Fn(&mut Numbers) -> u64,
        size: impl Fn(&mut Numbers) -> u64,
    ) -> (usize, usize) {
        let (mut taken_total, mut removed_total) = (0usize, 0usize);
        for round in 0..30 {
            let mut index = HeapIndex::new();
            let mut oracle: RangeMap<u32> = RangeMap::default();
            let mut live = 0usize;
            let mut added = vec![VirtAddr::new(start(numbers))];
            for op in 0..3000u32 {
                if round % 3 == 1 && op == 1500 {
                    index.ordered();
                }
                let at = VirtAddr::new(start(numbers));
                if numbers.below(3) == 0 {
                    let at = match numbers.below(4) {
                        0 => at,
                        1 => added[added.len() - 1],
                        _ => added[numbers.below(added.len() as u64) as usize],
                    };
                    let (a, b) = (index.remove_starting_at(at), oracle.remove_starting_at(at));
                    assert_eq!(a, b, "round {round} op {op}: free of {at:?}");
                    removed_total += usize::from(a.is_some());
                    live -= usize::from(a.is_some());
                    continue;
                }
                let end = VirtAddr::new(at.get() + size(numbers));
                let none = index.overlaps_none(at, end);
                let (a, b) = (
                    index.take_overlapping(at, end),
                    oracle.take_overlapping(at, end),
                );
                assert_eq!(a, b, "round {round} op {op}: [{at:?}, {end:?})");
                assert!(
                    !none || b.is_empty(),
                    "round {round} op {op}: overlaps none"
                );
                taken_total += a.len();
                live -= a.len();
                index.insert(at, end, op);
                oracle.insert(at, end, op);
                added.push(at);
                live += 1;
            }
            if round % 2 == 0 {
                let drained = index.drain();
                assert_eq!(
                    drained.len(),
                    live,
                    "round {round}: every live block drained"
                );
                assert_eq!(drained, oracle.drain().collect::<Vec<_>>());
            } else {
                for (s, e, slot) in oracle.drain() {
                    assert_eq!(
                        index.remove_starting_at(s),
                        Some((e, slot)),
                        "round {round}"
                    );
                }
                assert_eq!(index.drain(), [], "round {round}");
            }
            if let Some(small) = &index.small {
                assert!(small.by_key.is_empty(), "round {round}: a leaf left in use");
                for leaf in &small.leaves {
                    assert_eq!(leaf.blocks, 0);
                    assert!(
                        leaf.covered.iter().chain(&leaf.starts).all(|&w| w == 0),
                        "round {round}: a bit left set"
                    );
                }
            }
        }
        (taken_total, removed_total)
    }

    /// Small blocks dense at 16-byte multiples in one leaf, some empty, some larger than the
    /// bitmaps take.
    #[test]
    fn heap_index_is_the_ordered_map() {
        let mut numbers = Numbers(0x9e37_79b9_7f4a_7c15);
        let (taken, removed) = against_ordered_map(
            &mut numbers,
            |n| 0x10_0000 + n.below(400) * 48,
            |n| match n.below(10) {
                0 => 0,
                1 => SMALL,
                2 => SMALL + 1 + n.below(3 * SMALL),
                3 => n.below(40_000),
                _ => 1 + n.below(600),
            },
        );
        // The random calls did what the test means them to: many overlaps and frees.
        assert!(taken > 10_000, "{taken} blocks taken");
        assert!(removed > 1_000, "{removed} blocks freed");
    }

    /// Blocks over four leaves, many at their edges and crossing them, at 8-byte starts (as
    /// some allocators give) and now and then at a start the bitmaps do not take (4 bytes
    /// off), with queries of up to a MiB (wider than the leaves in use): the same as the
    /// ordered map.
    #[test]
    fn bitmaps_across_leaves_and_unaligned_starts() {
        let mut numbers = Numbers(0x2545_f491_4f6c_dd1d);
        let leaf = 1u64 << LEAF_SHIFT;
        let (taken, removed) = against_ordered_map(
            &mut numbers,
            |n| {
                // A third of them within 64 bytes of a leaf's edge.
                let at = if n.below(3) == 0 {
                    (7 + n.below(4)) * leaf - 64 + n.below(16) * 8
                } else {
                    7 * leaf - leaf / 2 + n.below(4 * leaf / 8) * 8
                };
                if n.below(20) == 0 { at + 4 } else { at }
            },
            |n| match n.below(12) {
                0 => 0,
                1 => SMALL,
                2 => SMALL + 1 + n.below(3 * SMALL),
                3 => n.below(1 << 20),
                4 => 1 + n.below(8),
                _ => 1 + n.below(1500),
            },
        );
        assert!(taken > 10_000, "{taken} blocks taken");
        assert!(removed > 1_000, "{removed} blocks freed");
    }

    /// Setting, clearing and testing ranges of bits, within a word and across words, as a
    /// bit by bit model does.
    #[test]
    fn bitmap_ranges_are_bit_by_bit() {
        let mut numbers = Numbers(0x1234_5678_9abc_def1);
        let mut words = [0u64; WORDS];
        let mut model = vec![false; LEAF_UNITS as usize];
        let range = |n: &mut Numbers| {
            let lo = n.below(LEAF_UNITS);
            let len = if n.below(2) == 0 {
                n.below(70)
            } else {
                n.below(LEAF_UNITS)
            };
            (lo, (lo + len).min(LEAF_UNITS - 1))
        };
        for _ in 0..20_000 {
            let (lo, hi) = range(&mut numbers);
            let set = numbers.below(3) != 0;
            set_in(&mut words, lo, hi, set);
            model[lo as usize..=hi as usize].fill(set);
            let (lo, hi) = range(&mut numbers);
            assert_eq!(
                any_in(&words, lo, hi),
                model[lo as usize..=hi as usize].contains(&true),
                "{lo}..={hi}"
            );
        }
        for (unit, &bit) in model.iter().enumerate() {
            assert_eq!(words[unit / 64] >> (unit % 64) & 1 == 1, bit, "unit {unit}");
        }
    }
}
