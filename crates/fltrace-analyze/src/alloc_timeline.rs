//! The heap over time, for `visualize --allocs`: how much each allocation site held alive
//! through the run (heaptrack's "consumed" chart), how many allocations and temporary ones
//! there were, and the process's resident memory beside it.
//!
//! An [`AllocPass`] follows the heap in intervals of equal length ([`Timeline`]): in each, the
//! moment the heap was highest (looked at after the calls of each nanosecond, as the peak is)
//! and what each site held then, so that the highest point of the series is the heap's peak,
//! exactly; an interval without calls holds what the last one ended with.

use std::ops::Range;

use fltrace_trace::{ProcessTrace, Recording};
use rustc_hash::FxHashMap;

use crate::alloc_lifetimes::{AllocPass, ByStack, PassTotals, exec_times};
use crate::group::alloc_site;
use crate::{Location, ResolvedStacks};

/// The intervals of a timeline are no shorter than the allocation clock's tick: calls are
/// stamped to about a millisecond.
pub const MIN_STEP_NS: u64 = fltrace_trace::ALLOC_CLOCK_TICK_NS;

/// The heap followed over time in equal intervals, inside an [`AllocPass`]
/// ([`AllocPass::keep_timeline`]): each heap block counts for a *slot*, one per site shown
/// and one for the others.
#[derive(Debug, Clone)]
pub struct Timeline {
    start_ns: u64,
    step_ns: u64,
    intervals: usize,
    /// The slot of each stack; stacks without one go to the last slot (`others`).
    slots: ByStack<u32>,
    others: usize,
    /// Heap bytes alive now, per slot.
    live: Vec<u64>,
    /// What the last group of calls left, per slot, and its sum.
    end_state: Vec<u64>,
    end_heap: u64,
    /// The interval the last group of calls fell in.
    current: Option<usize>,
    series: AllocSeries,
}

/// The heap over time, as a [`Timeline`] followed it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AllocSeries {
    /// The start of the first interval, in ns since the epoch.
    pub start_ns: u64,
    /// The length of every interval.
    pub step_ns: u64,
    /// Slots per interval: the sites shown, then one for every other site.
    pub slots: usize,
    /// The intervals, in order.
    pub intervals: Vec<Interval>,
    /// Per interval, `slots` values: the heap bytes of each slot when the heap was highest in
    /// the interval.
    pub by_slot: Vec<u64>,
}

/// One interval of an [`AllocSeries`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Interval {
    /// When the heap was highest in the interval (after the calls of that nanosecond), `None`
    /// when no call came in it: it holds what the interval before ended with.
    pub high_ns: Option<u64>,
    /// Heap bytes alive then.
    pub heap_bytes: u64,
    /// Heap allocations made in the interval.
    pub allocs: u64,
    /// Frees in the interval that made their block a temporary allocation (heaptrack's rule).
    pub temporary: u64,
}

impl AllocSeries {
    /// The heap bytes of each slot at interval `i`'s highest moment.
    pub fn slots_at(&self, i: usize) -> &[u64] {
        &self.by_slot[i * self.slots..(i + 1) * self.slots]
    }

    /// The start of interval `i`, in ns since the epoch.
    pub fn interval_start(&self, i: usize) -> u64 {
        self.start_ns + i as u64 * self.step_ns
    }

    /// The interval with the most heap, the first of equals, and that heap.
    pub fn highest(&self) -> Option<(usize, &Interval)> {
        let mut best: Option<(usize, &Interval)> = None;
        for (i, interval) in self.intervals.iter().enumerate() {
            if best.is_none_or(|(_, b)| interval.heap_bytes > b.heap_bytes) {
                best = Some((i, interval));
            }
        }
        best
    }
}

impl Timeline {
    /// A timeline over `span` (ns since the epoch) in at most `max_intervals` intervals of
    /// at least [`MIN_STEP_NS`]; `slot_of` gives the slot of each stack shown (from 0, fewer
    /// than `shown`), every other stack counting for slot `shown`.
    pub fn new(
        span: Range<u64>,
        max_intervals: usize,
        slot_of: &FxHashMap<u32, usize>,
        shown: usize,
    ) -> Timeline {
        let length = span.end.saturating_sub(span.start).max(1);
        let max_intervals = max_intervals.max(1) as u64;
        let step_ns = length.div_ceil(max_intervals).max(MIN_STEP_NS);
        let intervals = length.div_ceil(step_ns).max(1) as usize;
        let mut slots = ByStack::default();
        let mut ids: Vec<(&u32, &usize)> = slot_of.iter().collect();
        // In id order, so that the dense table grows in step with them.
        ids.sort_unstable();
        for (&stack_id, &slot) in ids {
            *slots.get_or_insert_with(stack_id, || 0) = slot.min(shown) as u32;
        }
        let count = shown + 1;
        Timeline {
            start_ns: span.start,
            step_ns,
            intervals,
            slots,
            others: shown,
            live: vec![0; count],
            end_state: vec![0; count],
            end_heap: 0,
            current: None,
            series: AllocSeries {
                start_ns: span.start,
                step_ns,
                slots: count,
                intervals: vec![Interval::default(); intervals],
                by_slot: vec![0; intervals * count],
            },
        }
    }

    fn interval(&self, time_ns: u64) -> usize {
        let i = time_ns.saturating_sub(self.start_ns) / self.step_ns;
        (i as usize).min(self.intervals - 1)
    }

    fn slot(&mut self, stack_id: u32) -> usize {
        match self.slots.get_mut(stack_id) {
            Some(&mut slot) => slot as usize,
            None => self.others,
        }
    }

    /// A heap block of `size` bytes of stack `stack_id` came to life at `time_ns`.
    #[inline]
    pub(crate) fn born(&mut self, stack_id: u32, size: u64, time_ns: u64, remnant: bool) {
        let slot = self.slot(stack_id);
        self.live[slot] += size;
        if !remnant {
            let i = self.interval(time_ns);
            self.series.intervals[i].allocs += 1;
        }
    }

    /// A heap block ended.
    #[inline]
    pub(crate) fn ended(&mut self, stack_id: u32, size: u64) {
        let slot = self.slot(stack_id);
        self.live[slot] -= size;
    }

    /// A free at `time_ns` made its block a temporary allocation.
    #[inline]
    pub(crate) fn temporary(&mut self, time_ns: u64) {
        let i = self.interval(time_ns);
        self.series.intervals[i].temporary += 1;
    }

    /// Every call of nanosecond `time_ns` is in; `heap_bytes` are alive.
    pub(crate) fn close(&mut self, time_ns: u64, heap_bytes: u64) {
        let i = self.interval(time_ns);
        if self.current != Some(i) {
            let from = self.current.map_or(0, |c| c + 1);
            self.hold_end_state(from..i);
            self.current = Some(i);
        }
        let slots = self.series.slots;
        let interval = &mut self.series.intervals[i];
        if interval.high_ns.is_none() || heap_bytes > interval.heap_bytes {
            interval.high_ns = Some(time_ns);
            interval.heap_bytes = heap_bytes;
            self.series.by_slot[i * slots..(i + 1) * slots].copy_from_slice(&self.live);
        }
        self.end_state.copy_from_slice(&self.live);
        self.end_heap = heap_bytes;
    }

    /// Intervals `range`, without calls, hold what the last group of calls left.
    fn hold_end_state(&mut self, range: Range<usize>) {
        let slots = self.series.slots;
        for i in range {
            self.series.intervals[i].heap_bytes = self.end_heap;
            self.series.by_slot[i * slots..(i + 1) * slots].copy_from_slice(&self.end_state);
        }
    }

    /// The series, every interval after the last call holding what it left.
    pub(crate) fn finish(mut self) -> AllocSeries {
        let from = self.current.map_or(0, |c| c + 1);
        self.hold_end_state(from..self.intervals);
        self.series
    }
}

/// How many sites a chart shows apart; the rest are summed as one.
pub const CHART_SITES: usize = 10;
/// Intervals of a chart: about one per pixel of its plot.
pub const CHART_INTERVALS: usize = 800;

/// One process's heap over time ([`alloc_timeline`]): the sites shown and their series.
#[derive(Debug, Clone)]
pub struct AllocTimeline {
    /// The process.
    pub pid: u32,
    /// The sites shown apart, most heap first: where each allocated (as `report --allocs`
    /// names a site), and the most heap bytes its stacks held alive at once.
    pub sites: Vec<(Location, u64)>,
    /// Sites not shown apart (summed in the series' last slot).
    pub other_sites: usize,
    /// The series: a slot per site shown, then one for the others.
    pub series: AllocSeries,
    /// When the heap peaked, in ns since the epoch, and its bytes then.
    pub peak: (u64, u64),
    /// Heap allocations and temporary ones in all.
    pub allocs: u64,
    /// Temporary allocations in all.
    pub temporary: u64,
}

/// Follows the heap of process `pid` over `span` (ns since the epoch) in at most
/// `intervals` intervals, its events read a row group at a time: the `shown` sites that held
/// the most heap at once apart (ranked by the most each site's stacks held alive at once,
/// from `totals` of a pass over the same events), the others summed. `alloc_stacks` are the
/// process's allocation stacks, resolved, their rules applied as for `report --allocs`.
pub fn alloc_timeline(
    recording: &Recording,
    trace: &ProcessTrace,
    alloc_stacks: &ResolvedStacks,
    totals: &PassTotals,
    span: Range<u64>,
    shown: usize,
    intervals: usize,
) -> Result<AllocTimeline, fltrace_trace::Error> {
    // Sites as `report --allocs` groups them: by the line that allocated, heap only.
    let mut sites: Vec<(Location, u64)> = Vec::new();
    let mut site_of_stack: FxHashMap<u32, usize> = FxHashMap::default();
    let mut index: FxHashMap<Location, usize> = FxHashMap::default();
    for (stack_id, kind, _) in totals.stacks() {
        if kind != crate::BlockKind::Heap {
            continue;
        }
        let location = alloc_site(alloc_stacks, stack_id);
        let site = *index.entry(location.clone()).or_insert_with(|| {
            sites.push((location, 0));
            sites.len() - 1
        });
        sites[site].1 = sites[site]
            .1
            .saturating_add(totals.most_live_bytes(stack_id));
        site_of_stack.insert(stack_id, site);
    }
    let mut order: Vec<usize> = (0..sites.len()).filter(|&s| sites[s].1 > 0).collect();
    // Most first; ties by location, so that the choice does not depend on stack ids.
    order.sort_by(|&a, &b| {
        sites[b]
            .1
            .cmp(&sites[a].1)
            .then(sites[a].0.cmp(&sites[b].0))
    });
    let mut slot_of_site = vec![shown; sites.len()];
    for (slot, &site) in order.iter().take(shown).enumerate() {
        slot_of_site[site] = slot;
    }
    let slot_of: FxHashMap<u32, usize> = site_of_stack
        .iter()
        .map(|(&stack_id, &site)| (stack_id, slot_of_site[site]))
        .collect();
    let shown_sites: Vec<(Location, u64)> = order
        .iter()
        .take(shown)
        .map(|&site| sites[site].clone())
        .collect();
    let mut pass = AllocPass::new(&exec_times(&trace.mappings));
    pass.keep_timeline(Timeline::new(span, intervals, &slot_of, shown_sites.len()));
    for group in recording.alloc_row_groups(trace.pid)? {
        for event in &group? {
            pass.event(event)
                .map_err(|_| fltrace_trace::Error::Format {
                    path: fltrace_trace::files::allocs(&recording.dir, trace.pid),
                    message: "allocation events out of time order".into(),
                })?;
        }
    }
    let (followed, _) = pass.finish();
    let series = followed
        .timeline
        .clone()
        .unwrap_or_else(|| unreachable!("the pass was given a timeline"));
    let allocs = series.intervals.iter().map(|i| i.allocs).sum();
    let temporary = series.intervals.iter().map(|i| i.temporary).sum();
    Ok(AllocTimeline {
        pid: trace.pid,
        other_sites: order.len().saturating_sub(shown_sites.len()),
        sites: shown_sites,
        series,
        peak: followed.peak(),
        allocs,
        temporary,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use fltrace_trace::{AllocCall, AllocEvent, VirtAddr};

    fn event(time_ns: u64, call: AllocCall, addr: u64, size: u64, stack_id: u32) -> AllocEvent {
        AllocEvent {
            time_ns,
            tid: 1,
            call,
            addr: VirtAddr::new(addr),
            size,
            old_addr: VirtAddr::new(0),
            detail: 0,
            stack_id,
        }
    }

    /// Phases of a known heap: 64 MiB at stack 0 in the first interval, freed in the second,
    /// 8 MiB at stack 1 in the third, a temporary in the fourth; every interval's highest
    /// moment and what each slot held then, the empty ones holding the last state.
    #[test]
    fn intervals_hold_their_highest_moment() {
        let ms = 1_000_000;
        let slot_of = FxHashMap::from_iter([(0, 0), (1, 1)]);
        let mut pass = AllocPass::new(&[]);
        pass.keep_timeline(Timeline::new(0..6 * ms, 6, &slot_of, 2));
        let events = [
            event(ms / 2, AllocCall::Malloc, 0x1000, 32 << 20, 0),
            event(ms / 2 + 1, AllocCall::Malloc, 0x900_0000, 32 << 20, 0),
            event(ms + 5, AllocCall::Free, 0x1000, 0, 0),
            event(ms + 6, AllocCall::Free, 0x900_0000, 0, 0),
            event(2 * ms, AllocCall::Malloc, 0x1000, 8 << 20, 1),
            event(3 * ms, AllocCall::Malloc, 0x2000_0000, 100, 2),
            event(3 * ms + 1, AllocCall::Free, 0x2000_0000, 0, 2),
        ];
        for e in &events {
            pass.event(e).unwrap();
        }
        let (totals, _) = pass.finish();
        let series = totals.timeline.clone().unwrap();
        assert_eq!(series.step_ns, ms);
        assert_eq!(series.intervals.len(), 6);
        let heap: Vec<u64> = series.intervals.iter().map(|i| i.heap_bytes).collect();
        let mib = 1 << 20;
        assert_eq!(
            heap,
            [64 * mib, 32 * mib, 8 * mib, 8 * mib + 100, 8 * mib, 8 * mib]
        );
        assert_eq!(series.slots_at(0), [64 * mib, 0, 0]);
        assert_eq!(
            series.slots_at(1),
            [32 * mib, 0, 0],
            "highest after the first free"
        );
        assert_eq!(series.slots_at(3), [0, 8 * mib, 100]);
        assert_eq!(series.slots_at(5), [0, 8 * mib, 0], "after the last call");
        assert_eq!(series.intervals[0].high_ns, Some(ms / 2 + 1));
        assert_eq!(series.intervals[4].high_ns, None);
        let allocs: Vec<u64> = series.intervals.iter().map(|i| i.allocs).collect();
        assert_eq!(allocs, [2, 0, 1, 1, 0, 0]);
        let temporary: Vec<u64> = series.intervals.iter().map(|i| i.temporary).collect();
        // The first free follows a block of its size and stack: temporary, as heaptrack counts.
        assert_eq!(temporary, [0, 1, 0, 1, 0, 0]);
        assert_eq!(series.highest().map(|(i, _)| i), Some(0));
        assert_eq!(totals.peak(), (ms / 2 + 1, 64 * mib));
        assert_eq!(totals.most_live_bytes(0), 64 * mib);
        assert_eq!(totals.most_live_bytes(1), 8 * mib);
    }

    /// Intervals are never shorter than the allocation clock's tick, and cover the span.
    #[test]
    fn intervals_cover_the_span() {
        let none = FxHashMap::default();
        let t = Timeline::new(0..500_000, 800, &none, 0);
        assert_eq!((t.step_ns, t.intervals), (MIN_STEP_NS, 1));
        let t = Timeline::new(10..10 + 3_000_000_001, 800, &none, 0);
        assert_eq!(t.step_ns, 3_750_001);
        assert!(t.step_ns * t.intervals as u64 >= 3_000_000_001);
        assert_eq!(t.intervals, 800);
    }
}
