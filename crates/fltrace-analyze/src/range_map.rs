//! Address ranges that do not overlap, looked up by address: live blocks, and which mapping
//! covered an address.

use std::collections::BTreeMap;

use rustc_hash::FxHashMap;

use fltrace_trace::{Mapping, VirtAddr};

/// Half-open ranges `[start, end)` that never overlap, keyed by start.
#[derive(Debug, Clone)]
pub(crate) struct RangeMap<V> {
    map: BTreeMap<VirtAddr, (VirtAddr, V)>,
}

impl<V> Default for RangeMap<V> {
    fn default() -> Self {
        RangeMap {
            map: BTreeMap::new(),
        }
    }
}

impl<V: Copy + PartialEq> RangeMap<V> {
    /// The range holding `addr`, as `(start, end, value)`.
    pub(crate) fn get(&self, addr: VirtAddr) -> Option<(VirtAddr, VirtAddr, V)> {
        let (&start, &(end, value)) = self.map.range(..=addr).next_back()?;
        (addr < end).then_some((start, end, value))
    }

    /// The values of the range starting within `slack` bytes above `addr` and of the last one
    /// starting at or below it, whether or not they hold it.
    pub(crate) fn neighbours(&self, addr: VirtAddr, slack: u64) -> [Option<V>; 2] {
        let above = self
            .map
            .range(addr.saturating_add(1)..=addr.saturating_add(slack))
            .next()
            .map(|(_, &(_, value))| value);
        let below = self
            .map
            .range(..=addr)
            .next_back()
            .map(|(_, &(_, value))| value);
        [above, below]
    }

    /// The range starting exactly at `start`.
    pub(crate) fn starting_at(&self, start: VirtAddr) -> Option<(VirtAddr, V)> {
        self.map.get(&start).copied()
    }

    /// Adds a range; the caller has removed whatever overlapped it.
    pub(crate) fn insert(&mut self, start: VirtAddr, end: VirtAddr, value: V) {
        self.map.insert(start, (end, value));
    }

    /// Removes the range starting at `start` if it holds `value` (it may have been replaced).
    pub(crate) fn remove_if(&mut self, start: VirtAddr, value: V) -> bool {
        if self.map.get(&start).is_some_and(|&(_, v)| v == value) {
            self.map.remove(&start);
            true
        } else {
            false
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
        while let Some((&s, &(e, v))) = self.map.range(..end).next_back() {
            if e <= start && s < start {
                break;
            }
            self.map.remove(&s);
            taken.push((s, e, v));
        }
        taken.reverse();
        taken
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
    pub(crate) fn drain(&mut self) -> impl Iterator<Item = (VirtAddr, VirtAddr, V)> {
        std::mem::take(&mut self.map)
            .into_iter()
            .map(|(s, (e, v))| (s, e, v))
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
