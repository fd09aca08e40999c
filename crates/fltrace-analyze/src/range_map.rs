//! Address ranges that do not overlap, looked up by address: live blocks, and which mapping
//! covered an address.

use rustc_hash::FxHashMap;

use fltrace_trace::{Mapping, VirtAddr};

/// Half-open ranges `[start, end)` that never overlap, keyed by start.
///
/// Sorted runs of at most [`RUN`] ranges, found by a binary search over each run's first
/// start: a lookup is two binary searches and a change moves at most a run's entries. The
/// allocation pass looks a live block up, adds or removes one at every call, and a balanced
/// tree took 300 instructions for each (`std`'s B-tree: a linear search per node, four levels
/// for a thousand blocks, rebalancing on removal).
#[derive(Debug, Clone)]
pub(crate) struct RangeMap<V> {
    /// Non-empty, each sorted by start, the runs in order.
    runs: Vec<Vec<Range<V>>>,
    /// The first start of each run.
    firsts: Vec<VirtAddr>,
}

/// One range of a [`RangeMap`].
#[derive(Debug, Clone, Copy)]
struct Range<V> {
    start: VirtAddr,
    end: VirtAddr,
    value: V,
}

/// The most ranges of a run: a run twice as long is split in two.
const RUN: usize = 64;

impl<V> Default for RangeMap<V> {
    fn default() -> Self {
        RangeMap {
            runs: Vec::new(),
            firsts: Vec::new(),
        }
    }
}

impl<V: Copy + PartialEq> RangeMap<V> {
    /// The run and place of the last range starting at or below `addr`.
    fn last_at_or_below(&self, addr: VirtAddr) -> Option<(usize, usize)> {
        let run = self
            .firsts
            .partition_point(|&first| first <= addr)
            .checked_sub(1)?;
        let place = self.runs[run].partition_point(|r| r.start <= addr) - 1;
        Some((run, place))
    }

    /// The run and place of the first range starting above `addr`.
    fn first_above(&self, addr: VirtAddr) -> Option<(usize, usize)> {
        let run = self.firsts.partition_point(|&first| first <= addr);
        let (run, place) = match run.checked_sub(1) {
            Some(below) => {
                let place = self.runs[below].partition_point(|r| r.start <= addr);
                if place < self.runs[below].len() {
                    (below, place)
                } else {
                    (run, 0)
                }
            }
            None => (run, 0),
        };
        (run < self.runs.len()).then_some((run, place))
    }

    fn at(&self, (run, place): (usize, usize)) -> &Range<V> {
        &self.runs[run][place]
    }

    /// Removes the range at `(run, place)`.
    fn remove_at(&mut self, (run, place): (usize, usize)) -> Range<V> {
        let removed = self.runs[run].remove(place);
        if self.runs[run].is_empty() {
            self.runs.remove(run);
            self.firsts.remove(run);
        } else if place == 0 {
            self.firsts[run] = self.runs[run][0].start;
        }
        removed
    }

    /// Whether it holds no range.
    #[inline]
    pub(crate) fn is_empty(&self) -> bool {
        self.runs.is_empty()
    }

    /// The range holding `addr`, as `(start, end, value)`.
    pub(crate) fn get(&self, addr: VirtAddr) -> Option<(VirtAddr, VirtAddr, V)> {
        let r = self.at(self.last_at_or_below(addr)?);
        (addr < r.end).then_some((r.start, r.end, r.value))
    }

    /// The values of the range starting within `slack` bytes above `addr` and of the last one
    /// starting at or below it, whether or not they hold it.
    pub(crate) fn neighbours(&self, addr: VirtAddr, slack: u64) -> [Option<V>; 2] {
        let above = self
            .first_above(addr)
            .map(|at| self.at(at))
            .filter(|r| r.start <= addr.saturating_add(slack))
            .map(|r| r.value);
        let below = self.last_at_or_below(addr).map(|at| self.at(at).value);
        [above, below]
    }

    /// The range starting exactly at `start`.
    #[cfg(any(test, feature = "oracle"))]
    pub(crate) fn starting_at(&self, start: VirtAddr) -> Option<(VirtAddr, V)> {
        let r = self.at(self.last_at_or_below(start)?);
        (r.start == start).then_some((r.end, r.value))
    }

    /// Adds a range (replacing one at the same start); the caller has removed whatever
    /// overlapped it.
    pub(crate) fn insert(&mut self, start: VirtAddr, end: VirtAddr, value: V) {
        let range = Range { start, end, value };
        // The run of the last range starting at or below, else the first run.
        let run = self
            .firsts
            .partition_point(|&first| first <= start)
            .saturating_sub(1);
        let Some(entries) = self.runs.get_mut(run) else {
            self.runs.push(vec![range]);
            self.firsts.push(start);
            return;
        };
        let place = entries.partition_point(|r| r.start < start);
        if entries.get(place).is_some_and(|r| r.start == start) {
            entries[place] = range;
            return;
        }
        entries.insert(place, range);
        if place == 0 {
            self.firsts[run] = start;
        }
        if entries.len() >= 2 * RUN {
            let upper = entries.split_off(RUN);
            self.firsts.insert(run + 1, upper[0].start);
            self.runs.insert(run + 1, upper);
        }
    }

    /// Removes the range starting exactly at `start`, giving its end and value.
    pub(crate) fn remove_starting_at(&mut self, start: VirtAddr) -> Option<(VirtAddr, V)> {
        let at = self.last_at_or_below(start)?;
        (self.at(at).start == start).then(|| {
            let r = self.remove_at(at);
            (r.end, r.value)
        })
    }

    /// Removes the range starting at `start` if it holds `value` (it may have been replaced).
    #[cfg(any(test, feature = "oracle"))]
    pub(crate) fn remove_if(&mut self, start: VirtAddr, value: V) -> bool {
        match self.last_at_or_below(start) {
            Some(at) if self.at(at).start == start && self.at(at).value == value => {
                self.remove_at(at);
                true
            }
            _ => false,
        }
    }

    /// Removes and returns, lowest first, every range overlapping `[start, end)`; an empty
    /// query overlaps a range only by its start.
    pub(crate) fn take_overlapping(
        &mut self,
        start: VirtAddr,
        end: VirtAddr,
    ) -> Vec<(VirtAddr, VirtAddr, V)> {
        let end = end.max(start.saturating_add(1));
        let mut taken = Vec::new();
        // Ranges are disjoint and sorted: walk down from the last one starting before `end`
        // until one ends before `start`.
        while let Some(at) = self.last_at_or_below(VirtAddr::new(end.get() - 1)) {
            let r = *self.at(at);
            if r.end <= start && r.start < start {
                break;
            }
            self.remove_at(at);
            taken.push((r.start, r.end, r.value));
        }
        taken.reverse();
        taken
    }

    /// Whether [`take_overlapping`](Self::take_overlapping) would take any range: its first
    /// look, without taking.
    #[inline]
    pub(crate) fn overlaps_any(&self, start: VirtAddr, end: VirtAddr) -> bool {
        let end = end.max(start.saturating_add(1));
        self.last_at_or_below(VirtAddr::new(end.get() - 1))
            .is_some_and(|at| {
                let r = self.at(at);
                !(r.end <= start && r.start < start)
            })
    }

    /// Lays `[start, end)` over whatever it overlaps: the parts of older ranges it does not
    /// cover keep their values.
    pub(crate) fn overlay(&mut self, start: VirtAddr, end: VirtAddr, value: V) {
        for (s, e, old) in self.take_overlapping(start, end) {
            if s < start {
                self.insert(s, start, old);
            }
            if e > end {
                self.insert(end, e, old);
            }
        }
        self.insert(start, end, value);
    }

    /// Removes every range, lowest first.
    pub(crate) fn drain(&mut self) -> impl Iterator<Item = (VirtAddr, VirtAddr, V)> + use<V> {
        self.firsts.clear();
        std::mem::take(&mut self.runs)
            .into_iter()
            .flatten()
            .map(|r| (r.start, r.end, r.value))
    }
}

/// Which mapping covered an address, in each address-space generation: a later mapping over the
/// same addresses replaces an earlier one, as [`fltrace_trace::ProcessTrace::mapping_at`]
/// decides, but in logarithmic time.
#[derive(Debug, Clone, Default)]
pub struct MappingIndex {
    generations: FxHashMap<u32, RangeMap<usize>>,
}

impl MappingIndex {
    /// Indexes `mappings`, in the order they were reported.
    pub fn new(mappings: &[Mapping]) -> MappingIndex {
        let mut generations: FxHashMap<u32, RangeMap<usize>> = FxHashMap::default();
        for (i, mapping) in mappings.iter().enumerate() {
            if mapping.start >= mapping.end {
                continue;
            }
            generations.entry(mapping.generation).or_default().overlay(
                mapping.start,
                mapping.end,
                i,
            );
        }
        MappingIndex { generations }
    }

    /// The index, in the slice given to [`MappingIndex::new`], of the mapping that covered
    /// `addr` in `generation`.
    pub fn get(&self, generation: u32, addr: VirtAddr) -> Option<usize> {
        self.generations
            .get(&generation)?
            .get(addr)
            .map(|(_, _, i)| i)
    }
}

/// How faults outside any allocation are named after the memory they hit: `[mapping] /path`
/// for a file, `[anon]` for anonymous memory, the kernel's name for `[heap]`, `[stack]` and
/// the like, `[unknown]` outside every recorded mapping.
pub fn mapping_label(mapping: Option<&Mapping>) -> String {
    match mapping {
        None => "[unknown]".to_owned(),
        Some(m) if m.is_file() => format!("[mapping] {}", m.path),
        Some(m) if m.path.starts_with('[') => m.path.clone(),
        Some(_) => "[anon]".to_owned(),
    }
}

/// The address ranges of a process's mappings with short names, for labelling a map of
/// addresses: a file's base name (`libc.so.6`), the kernel's name for `[heap]`, `[stack]` and
/// the like, `[anon]` for anonymous memory. Sorted and disjoint: where mappings overlap, the
/// latest generation's latest mapping wins, as the process last saw its memory.
pub fn named_regions(mappings: &[Mapping]) -> Vec<(VirtAddr, VirtAddr, String)> {
    let mut order: Vec<usize> = (0..mappings.len()).collect();
    // Stable: within a generation, the order of reports stays.
    order.sort_by_key(|&i| mappings[i].generation);
    let mut ranges: RangeMap<usize> = RangeMap::default();
    for i in order {
        let mapping = &mappings[i];
        if mapping.start >= mapping.end {
            continue;
        }
        ranges.overlay(mapping.start, mapping.end, i);
    }
    ranges
        .drain()
        .map(|(start, end, i)| {
            let m = &mappings[i];
            let name = if m.is_file() {
                m.path.rsplit('/').next().unwrap_or(&m.path).to_owned()
            } else if m.path.starts_with('[') {
                m.path.clone()
            } else {
                "[anon]".to_owned()
            };
            (start, end, name)
        })
        .collect()
}

/// How hot a sample of a range trace draws: for reference bits the per cent of the range
/// referenced in the interval (at least 1 if any was), for DAMON the access count.
pub fn range_heat(kind: fltrace_trace::RangeTraceKind, sample: &fltrace_trace::RangeSample) -> u32 {
    match kind {
        fltrace_trace::RangeTraceKind::ReferencedBytes => {
            let len = sample.end.saturating_distance(sample.start).max(1);
            (sample.value.saturating_mul(100).div_ceil(len)).min(100) as u32
        }
        fltrace_trace::RangeTraceKind::DamonAccesses => {
            sample.value.min(u64::from(u32::MAX)) as u32
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const fn a(raw: u64) -> VirtAddr {
        VirtAddr::new(raw)
    }

    /// Overlap queries return exactly the touching ranges, including at their edges.
    #[test]
    fn overlapping_ranges() {
        let mut ranges = RangeMap::default();
        for (s, e) in [(0, 10), (10, 20), (30, 40)] {
            ranges.insert(a(s), a(e), s);
        }
        assert_eq!(ranges.get(a(9)), Some((a(0), a(10), 0)));
        assert_eq!(ranges.get(a(10)), Some((a(10), a(20), 10)));
        assert_eq!(ranges.get(a(25)), None);
        assert_eq!(ranges.take_overlapping(a(20), a(30)), vec![]);
        assert_eq!(
            ranges.take_overlapping(a(5), a(31)),
            vec![(a(0), a(10), 0), (a(10), a(20), 10), (a(30), a(40), 30)]
        );
        assert_eq!(ranges.get(a(0)), None);
        ranges.insert(a(50), a(50), 50);
        // A zero-length range is found by an empty query at its start only.
        assert_eq!(ranges.take_overlapping(a(51), a(51)), vec![]);
        assert_eq!(
            ranges.take_overlapping(a(50), a(50)),
            vec![(a(50), a(50), 50)]
        );
    }

    /// Thousands of random changes give what a sorted map of the same ranges gives, across
    /// the splits and removals of runs: every lookup, neighbour and overlap query.
    #[test]
    fn runs_answer_as_a_sorted_map_does() {
        use std::collections::BTreeMap;
        let mut ranges: RangeMap<u32> = RangeMap::default();
        let mut model: BTreeMap<u64, (u64, u32)> = BTreeMap::new();
        let mut seed = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = |bound: u64| {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed % bound
        };
        for i in 0..40_000u32 {
            let start = next(20_000);
            let end = start + next(40);
            match next(4) {
                0 | 1 => {
                    let taken = ranges.take_overlapping(a(start), a(end));
                    let query_end = end.max(start + 1);
                    let expected: Vec<(VirtAddr, VirtAddr, u32)> = model
                        .iter()
                        .filter(|&(&s, &(e, _))| s < query_end && (s >= start || e > start))
                        .map(|(&s, &(e, v))| (a(s), a(e), v))
                        .collect();
                    assert_eq!(taken, expected, "take_overlapping({start}, {end})");
                    for (s, _, _) in &taken {
                        model.remove(&s.get());
                    }
                    ranges.insert(a(start), a(end), i);
                    model.insert(start, (end, i));
                }
                2 => {
                    let found = model
                        .range(..=start)
                        .next_back()
                        .map(|(&s, &(_, v))| (s, v));
                    if let Some((s, v)) = found {
                        assert!(ranges.remove_if(a(s), v));
                        assert!(!ranges.remove_if(a(s), v));
                        model.remove(&s);
                    }
                }
                _ => {
                    let expected = model
                        .range(..=start)
                        .next_back()
                        .filter(|&(_, &(e, _))| start < e)
                        .map(|(&s, &(e, v))| (a(s), a(e), v));
                    assert_eq!(ranges.get(a(start)), expected);
                    let above = model
                        .range(start + 1..=start + 16)
                        .next()
                        .map(|(_, &(_, v))| v);
                    let below = model.range(..=start).next_back().map(|(_, &(_, v))| v);
                    assert_eq!(ranges.neighbours(a(start), 16), [above, below]);
                    assert_eq!(
                        ranges.starting_at(a(start)),
                        model.get(&start).map(|&(e, v)| (a(e), v))
                    );
                }
            }
        }
        let all: Vec<(VirtAddr, VirtAddr, u32)> = ranges.drain().collect();
        let expected: Vec<_> = model.iter().map(|(&s, &(e, v))| (a(s), a(e), v)).collect();
        assert_eq!(all, expected);
    }

    /// Regions are named shortly and a later generation's mapping wins over an earlier one.
    #[test]
    fn regions_have_short_names() {
        let mapping = |generation, start, end, path: &str| Mapping {
            generation,
            start: a(start),
            end: a(end),
            path: path.to_owned(),
            ..Mapping::default()
        };
        let regions = named_regions(&[
            mapping(0, 0x1000, 0x5000, "/usr/lib/libc.so.6"),
            mapping(1, 0x3000, 0x4000, "//anon"),
            mapping(1, 0x9000, 0xa000, "[heap]"),
        ]);
        assert_eq!(
            regions,
            vec![
                (a(0x1000), a(0x3000), "libc.so.6".to_owned()),
                (a(0x3000), a(0x4000), "[anon]".to_owned()),
                (a(0x4000), a(0x5000), "libc.so.6".to_owned()),
                (a(0x9000), a(0xa000), "[heap]".to_owned()),
            ]
        );
    }

    /// A later mapping replaces the middle of an earlier one; generations are apart.
    #[test]
    fn later_mappings_win() {
        let mapping = |generation, start, end, path: &str| Mapping {
            generation,
            start: a(start),
            end: a(end),
            path: path.into(),
            ..Mapping::default()
        };
        let mappings = [
            mapping(0, 0x1000, 0x9000, "//anon"),
            mapping(0, 0x3000, 0x4000, "/lib/x.so"),
            mapping(1, 0x1000, 0x2000, "[stack]"),
        ];
        let index = MappingIndex::new(&mappings);
        let at = |g, raw| index.get(g, a(raw));
        assert_eq!(
            (at(0, 0x2fff), at(0, 0x3000), at(0, 0x4000), at(0, 0x9000)),
            (Some(0), Some(1), Some(0), None)
        );
        assert_eq!(at(1, 0x1000), Some(2));
        let label = |raw| mapping_label(at(0, raw).map(|i| &mappings[i]));
        assert_eq!(label(0x1000), "[anon]");
        assert_eq!(label(0x3000), "[mapping] /lib/x.so");
        assert_eq!(label(0x9000), "[unknown]");
        assert_eq!(mapping_label(Some(&mappings[2])), "[stack]");
    }
}
