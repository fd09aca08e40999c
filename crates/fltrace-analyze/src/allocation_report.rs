//! The figures of the allocation reports (`report --allocs`, `--leaks`, `--by alloc-site`)
//! over one or more processes: per-process totals, their sums, sites ranked, stacks that read
//! the same merged, and what each site allocated beside the faults in it.

use std::ops::Range;

use rustc_hash::FxHashMap;

use fltrace_trace::{AllocEvent, Fault, FaultFlags, ProcessTrace, Recording};

#[cfg(any(test, feature = "oracle"))]
use crate::alloc_lifetimes::{AllocBlock, Lifetimes, attribute_faults};
use crate::alloc_lifetimes::{
    AllocPass, AllocSiteTotals, AllocStats, BlockHit, BlockKind, PassTotals, SizeHistogram,
    exec_times,
};
use crate::group::{
    AllocGroup, AllocSiteGroup, FaultOrigin, GroupBy, OriginCounts, OriginSource, group_allocs,
    group_origins_by_alloc_site,
};
#[cfg(any(test, feature = "oracle"))]
use crate::group::{AllocSource, count_origins};
use crate::range_map::MappingIndex;
use crate::{Loaded, Location, ResolvedStacks};

/// One process's allocations, paired and totalled.
pub struct AllocProcess<'a> {
    /// The process's trace (its allocation events only on the whole-table path).
    pub trace: &'a ProcessTrace,
    /// Its fault stacks, resolved.
    pub stacks: &'a ResolvedStacks,
    /// Its allocation stacks, resolved.
    pub alloc_stacks: &'a ResolvedStacks,
    /// Its totals per allocating stack.
    pub stats: AllocStats,
    /// Its faults counted by where they landed, their stack and flags.
    pub origins: OriginCounts,
}

impl<'a> AllocProcess<'a> {
    /// Pairs and totals the allocations of `trace` held whole in memory (the faults too);
    /// leaks are the blocks alive at its end that were allocated at least `min_leak_age_ns`
    /// before it. What [`AllocProcess::streamed`] computes in one pass: kept as its oracle and
    /// for traces loaded whole.
    #[cfg(any(test, feature = "oracle"))]
    pub fn new(
        trace: &'a ProcessTrace,
        stacks: &'a ResolvedStacks,
        alloc_stacks: &'a ResolvedStacks,
        min_leak_age_ns: u64,
    ) -> AllocProcess<'a> {
        let lifetimes = Lifetimes::of_trace(trace);
        let stats = AllocStats::new(&trace.allocs, &lifetimes, trace.end_ns(), min_leak_age_ns);
        let hits = attribute_faults(&lifetimes, &trace.faults);
        let origins = count_origins(&AllocSource {
            trace,
            stacks,
            alloc_stacks,
            lifetimes: &lifetimes,
            hits: &hits,
        });
        AllocProcess {
            trace,
            stacks,
            alloc_stacks,
            stats,
            origins,
        }
    }

    /// The allocations of `trace` as [`stream_allocs`] paired them.
    pub fn streamed(
        trace: &'a ProcessTrace,
        stacks: &'a ResolvedStacks,
        alloc_stacks: &'a ResolvedStacks,
        streamed: &StreamedAllocs,
        min_leak_age_ns: u64,
    ) -> AllocProcess<'a> {
        let stats = streamed.totals.stats(streamed.end_ns(), min_leak_age_ns);
        let origins = streamed
            .origins
            .iter()
            .map(|(&(origin, stack_id, flags), &(count, _))| (origin, stack_id, flags, count))
            .collect();
        AllocProcess {
            trace,
            stacks,
            alloc_stacks,
            stats,
            origins,
        }
    }
}

/// How old, in nanoseconds, a block alive at the end must be to count as leaked, for
/// `--older MS` (none: every block alive at the end).
pub fn leak_age_ns(older_ms: Option<u64>) -> u64 {
    older_ms.unwrap_or(0).saturating_mul(1_000_000)
}

/// The processes of `loaded` recorded with allocations, paired and totalled, leaks being the
/// blocks at least `min_leak_age_ns` old at the end; and the pids of those recorded without.
pub fn alloc_processes(loaded: &Loaded, min_leak_age_ns: u64) -> (Vec<AllocProcess<'_>>, Vec<u32>) {
    let mut processes = Vec::new();
    let mut without = Vec::new();
    for (i, ((trace, stacks), alloc_stacks)) in
        loaded.traces.iter().zip(&loaded.alloc_stacks).enumerate()
    {
        if !loaded.has_allocs(trace.pid) {
            without.push(trace.pid);
            continue;
        }
        processes.push(match loaded.streamed.get(i).and_then(Option::as_ref) {
            Some(streamed) => {
                AllocProcess::streamed(trace, stacks, alloc_stacks, streamed, min_leak_age_ns)
            }
            #[cfg(any(test, feature = "oracle"))]
            None => AllocProcess::new(trace, stacks, alloc_stacks, min_leak_age_ns),
            // Only the oracle's load leaves the events unpaired.
            #[cfg(not(any(test, feature = "oracle")))]
            None => unreachable!("the load pairs the allocations of every process that has them"),
        });
    }
    (processes, without)
}

/// A fault's key in [`StreamedAllocs::origins`]: where it landed, its stack and flags.
pub type OriginKey = (FaultOrigin, u32, FaultFlags);

/// One process's allocations paired in one pass in time order, its faults attributed to
/// blocks on the way ([`stream_allocs`]).
#[derive(Debug, Clone, Default)]
pub struct StreamedAllocs {
    /// The totals, and the blocks alive at the end.
    pub totals: PassTotals,
    /// The faults per (where they landed, stack, flags): how many, and the time of the last.
    pub origins: FxHashMap<OriginKey, (u64, u64)>,
}

impl StreamedAllocs {
    /// The totals the recorder's pairing wrote into the recording at record time
    /// (`fltrace-data-allocstats-<pid>.parquet`), without faults: what a report that counts
    /// no fault and no leak age needs, read instead of every call.
    pub fn from_record_time(summary: &fltrace_trace::AllocPassSummary) -> StreamedAllocs {
        StreamedAllocs {
            totals: PassTotals::from_summary(summary),
            origins: FxHashMap::default(),
        }
    }
}

impl StreamedAllocs {
    /// The end of the trace: its last allocation event or fault counted, whichever is later.
    pub fn end_ns(&self) -> u64 {
        let last_fault = self.origins.values().map(|&(_, last)| last).max();
        last_fault.unwrap_or(0).max(self.totals.last_event_ns)
    }

    /// Keeps the faults of the (stack, flags) that `keep` keeps.
    pub fn retain_faults(&mut self, keep: impl Fn(u32, FaultFlags) -> bool) {
        self.origins
            .retain(|&(_, stack_id, flags), _| keep(stack_id, flags));
    }

    /// Each distinct (fault stack, allocation stack of the block it hit), for
    /// [`crate::detect_allocators_counted`].
    pub fn hits(&self) -> impl Iterator<Item = (u32, Option<u32>)> + '_ {
        self.origins.keys().map(|&(origin, stack_id, _)| {
            let block = match origin {
                FaultOrigin::Block { stack_id, .. } => Some(stack_id),
                FaultOrigin::Outside { .. } => None,
            };
            (stack_id, block)
        })
    }
}

/// Pairs the allocation events of process `pid` of `recording` in one pass in time order, a
/// row group at a time, attributing its faults (those in `window`, ns since the epoch, and
/// kept by `keep`) to the blocks they landed in: memory follows the blocks alive at once and
/// the distinct stacks, not the calls. `trace` is the process without its faults and events
/// ([`Recording::load_streaming_allocs`]). Tables not in time order (none that fltrace
/// writes) are read whole and sorted.
pub fn stream_allocs(
    recording: &Recording,
    pid: u32,
    trace: &ProcessTrace,
    window: Option<Range<u64>>,
    keep: &dyn Fn(&Fault) -> bool,
) -> Result<StreamedAllocs, fltrace_trace::Error> {
    let keep =
        |fault: &Fault| window.as_ref().is_none_or(|w| w.contains(&fault.time_ns)) && keep(fault);
    stream(recording, pid, trace, FaultSource::Read(&keep), 0)
}

/// [`stream_allocs`] over `faults` held in memory (in any order; those a report keeps, of
/// process `pid`) rather than read: the allocation events are still streamed.
pub fn stream_allocs_over(
    recording: &Recording,
    pid: u32,
    trace: &ProcessTrace,
    faults: &[Fault],
) -> Result<StreamedAllocs, fltrace_trace::Error> {
    let sorted = if faults.is_sorted_by_key(|f| f.time_ns) {
        std::borrow::Cow::Borrowed(faults)
    } else {
        let mut sorted = faults.to_vec();
        // Stable: equal times keep their order, as the whole-table path takes them.
        sorted.sort_by_key(|f| f.time_ns);
        std::borrow::Cow::Owned(sorted)
    };
    stream(recording, pid, trace, FaultSource::Held(sorted), 0)
}

/// The `count` largest blocks of process `pid` over their lifetimes, largest first, equal
/// sizes in the order they came to life: what [`largest_blocks`] picks from its
/// [`Lifetimes`], its events read a row group at a time and its faults not at all, so that
/// memory follows the blocks alive at once and `count`, not the calls. `trace` is the
/// process without its faults and events ([`Recording::load_streaming_allocs`]). The
/// blocks are in `largest` of the totals, the time of the last event in `last_event_ns`.
pub fn stream_largest_blocks(
    recording: &Recording,
    pid: u32,
    trace: &ProcessTrace,
    count: usize,
) -> Result<PassTotals, fltrace_trace::Error> {
    Ok(stream(recording, pid, trace, FaultSource::None, count)?.totals)
}

/// The time of the last fault of process `pid` (0 for none), its faults read a row group at
/// a time.
pub fn last_fault_ns(recording: &Recording, pid: u32) -> Result<u64, fltrace_trace::Error> {
    let mut last = 0;
    for group in recording.fault_keys(pid)? {
        last = group?.iter().map(|f| f.time_ns).fold(last, u64::max);
    }
    Ok(last)
}

/// The faults of a pass as it reads them, a row group at a time.
type FaultGroups<'a> = Box<dyn Iterator<Item = Result<Vec<Fault>, fltrace_trace::Error>> + 'a>;

/// How many held faults a pass takes at a time.
const HELD_CHUNK: usize = 1 << 16;

/// The faults a pass attributes.
enum FaultSource<'a> {
    /// None.
    None,
    /// Those of the faults file that this keeps.
    Read(&'a dyn Fn(&Fault) -> bool),
    /// These, in time order.
    Held(std::borrow::Cow<'a, [Fault]>),
}

/// [`stream_allocs`] over the faults of `source`, the `largest` blocks kept.
fn stream(
    recording: &Recording,
    pid: u32,
    trace: &ProcessTrace,
    source: FaultSource<'_>,
    largest: usize,
) -> Result<StreamedAllocs, fltrace_trace::Error> {
    let execs = exec_times(&trace.mappings);
    let fault_groups = || -> Result<FaultGroups<'_>, fltrace_trace::Error> {
        Ok(match &source {
            FaultSource::Read(_) => Box::new(recording.fault_rows(pid)?),
            FaultSource::None => Box::new(std::iter::empty()),
            // A row group's worth at a time, as if read.
            FaultSource::Held(faults) => {
                Box::new(faults.chunks(HELD_CHUNK).map(|chunk| Ok(chunk.to_vec())))
            }
        })
    };
    let keep = match &source {
        FaultSource::Read(keep) => *keep,
        _ => &|_: &Fault| true,
    };
    let events = recording.alloc_row_groups(pid)?;
    if let Some(streamed) = pass(events, fault_groups()?, &execs, trace, keep, largest)? {
        return Ok(streamed);
    }
    let mut events: Vec<AllocEvent> = Vec::new();
    for group in recording.alloc_row_groups(pid)? {
        events.extend(group?);
    }
    let mut faults: Vec<Fault> = Vec::new();
    for group in fault_groups()? {
        faults.extend(group?.into_iter().filter(|f| keep(f)));
    }
    // Stable: equal times keep their order, as the whole-table path takes them.
    events.sort_by_key(|e| e.time_ns);
    faults.sort_by_key(|f| f.time_ns);
    let sorted = pass(
        std::iter::once(Ok(events)),
        std::iter::once(Ok(faults)),
        &execs,
        trace,
        keep,
        largest,
    )?;
    sorted.ok_or_else(|| fltrace_trace::Error::Format {
        path: fltrace_trace::files::allocs(&recording.dir, pid),
        message: "events out of time order after sorting".into(),
    })
}

/// The next fault of `groups` that `keep` keeps, a row group at a time (`rows` holds the
/// current one from `at` on).
fn next_kept(
    groups: &mut impl Iterator<Item = Result<Vec<Fault>, fltrace_trace::Error>>,
    rows: &mut Vec<Fault>,
    at: &mut usize,
    keep: &dyn Fn(&Fault) -> bool,
) -> Result<Option<Fault>, fltrace_trace::Error> {
    loop {
        while let Some(fault) = rows.get(*at) {
            *at += 1;
            if keep(fault) {
                return Ok(Some(*fault));
            }
        }
        match groups.next() {
            None => return Ok(None),
            Some(group) => {
                *rows = group?;
                *at = 0;
            }
        }
    }
}

/// One pass over `events` and `faults` merged by time (a fault after the events of its
/// nanosecond); `None` if either is out of time order.
fn pass(
    events: impl Iterator<Item = Result<Vec<AllocEvent>, fltrace_trace::Error>>,
    mut faults: impl Iterator<Item = Result<Vec<Fault>, fltrace_trace::Error>>,
    execs: &[u64],
    trace: &ProcessTrace,
    keep: &dyn Fn(&Fault) -> bool,
    largest: usize,
) -> Result<Option<StreamedAllocs>, fltrace_trace::Error> {
    let mappings = MappingIndex::new(&trace.mappings);
    let mut origins: FxHashMap<OriginKey, (u64, u64)> = FxHashMap::default();
    let mut count = |fault: &Fault, hit: Option<BlockHit>| {
        let origin = match hit {
            Some(BlockHit { stack_id, kind }) => FaultOrigin::Block { stack_id, kind },
            None => {
                let generation = trace.stack(fault.stack_id).map_or(0, |s| s.generation);
                FaultOrigin::Outside {
                    mapping: mappings.get(generation, fault.addr),
                }
            }
        };
        let entry = origins
            .entry((origin, fault.stack_id, fault.flags))
            .or_insert((0, 0));
        entry.0 += 1;
        entry.1 = entry.1.max(fault.time_ns);
    };
    let mut pass = AllocPass::new(execs);
    if largest > 0 {
        pass.keep_largest(largest);
    }
    let (mut fault_rows, mut fault_at) = (Vec::new(), 0);
    let mut next_fault = next_kept(&mut faults, &mut fault_rows, &mut fault_at, keep)?;
    // Events a row group at a time, the faults before each event first: the loop over a
    // group's events is the pass's hot path.
    for group in events {
        for event in &group? {
            while let Some(fault) = next_fault.filter(|f| f.time_ns < event.time_ns) {
                if pass.fault(&fault, true).is_err() {
                    return Ok(None);
                }
                for (fault, hit) in pass.take_attributed() {
                    count(&fault, hit);
                }
                next_fault = next_kept(&mut faults, &mut fault_rows, &mut fault_at, keep)?;
            }
            if pass.event(event).is_err() {
                return Ok(None);
            }
            if pass.has_attributed() {
                for (fault, hit) in pass.take_attributed() {
                    count(&fault, hit);
                }
            }
        }
    }
    while let Some(fault) = next_fault {
        if pass.fault(&fault, false).is_err() {
            return Ok(None);
        }
        for (fault, hit) in pass.take_attributed() {
            count(&fault, hit);
        }
        next_fault = next_kept(&mut faults, &mut fault_rows, &mut fault_at, keep)?;
    }
    let (totals, attributed) = pass.finish();
    for (fault, hit) in &attributed {
        count(fault, *hit);
    }
    Ok(Some(StreamedAllocs { totals, origins }))
}

/// The sums over processes.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AllocSummary {
    /// Every heap block.
    pub heap: AllocSiteTotals,
    /// Every mapping.
    pub mappings: AllocSiteTotals,
    /// The heap blocks' sizes.
    pub sizes: SizeHistogram,
    /// Frees of unknown addresses.
    pub unknown_frees: u64,
    /// Blocks handed out while still alive.
    pub overlaps: u64,
}

impl AllocSummary {
    /// The sums over `processes`.
    pub fn of(processes: &[AllocProcess<'_>]) -> AllocSummary {
        let mut summary = AllocSummary::default();
        for p in processes {
            summary.heap += p.stats.total(BlockKind::Heap);
            summary.mappings += p.stats.total(BlockKind::Mapping);
            summary.sizes += &p.stats.heap_sizes;
            summary.unknown_frees += p.stats.unknown_frees;
            summary.overlaps += p.stats.overlaps;
        }
        summary
    }
}

/// The allocation groups of `processes` by `by`.
pub fn group_process_allocs(processes: &[AllocProcess<'_>], by: GroupBy) -> Vec<AllocGroup> {
    group_allocs(processes.iter().map(|p| (&p.stats, p.alloc_stacks)), by)
}

/// The totals of `groups` added up: what a list under a report's table sums to.
pub fn sum_totals<'a>(groups: impl IntoIterator<Item = &'a AllocGroup>) -> AllocSiteTotals {
    let mut sum = AllocSiteTotals::default();
    for group in groups {
        sum += group.totals;
    }
    sum
}

/// The groups with a non-zero `key`, largest first (ties keep the order they came in).
pub fn rank_allocs(
    groups: &[AllocGroup],
    key: impl Fn(&AllocSiteTotals) -> u64,
) -> Vec<&AllocGroup> {
    let mut ranked: Vec<&AllocGroup> = groups.iter().filter(|g| key(&g.totals) > 0).collect();
    ranked.sort_by_key(|g| std::cmp::Reverse(key(&g.totals)));
    ranked
}

/// Stacks that differ only in addresses but read the same (a loop the compiler unrolled calls
/// from several places of one line) are one stack to a reader: merged, in the order each
/// first came.
pub fn merge_same_lines(groups: Vec<AllocGroup>) -> Vec<AllocGroup> {
    let mut merged: Vec<AllocGroup> = Vec::with_capacity(groups.len());
    let mut index = FxHashMap::default();
    for mut group in groups {
        group.key.addresses = None;
        match index.get(&(group.key.clone(), group.kind)) {
            Some(&i) => {
                let target: &mut AllocGroup = &mut merged[i];
                target.totals += group.totals;
            }
            None => {
                index.insert((group.key.clone(), group.kind), merged.len());
                merged.push(group);
            }
        }
    }
    merged
}

/// The `count` largest non-empty blocks, largest first (ties in the order they came to life).
#[cfg(any(test, feature = "oracle"))]
pub fn largest_blocks(lifetimes: &Lifetimes, count: usize) -> Vec<&AllocBlock> {
    let mut blocks: Vec<&AllocBlock> = lifetimes.blocks.iter().filter(|b| b.size > 0).collect();
    blocks.sort_by_key(|b| std::cmp::Reverse(b.size));
    blocks.truncate(count);
    blocks
}

/// Faults by the allocation site of the memory they hit, with what each site allocated.
#[derive(Debug, Clone)]
pub struct FaultsByAllocSite {
    /// Largest first ([`group_faults_by_alloc_site`]).
    pub groups: Vec<AllocSiteGroup>,
    /// Every fault.
    pub total: u64,
    /// Those in live blocks.
    pub in_blocks: u64,
    allocated: FxHashMap<(Location, BlockKind), AllocSiteTotals>,
}

impl FaultsByAllocSite {
    /// The faults of `processes` by the site of the block each landed in.
    pub fn of(processes: &[AllocProcess<'_>]) -> FaultsByAllocSite {
        let groups = group_origins_by_alloc_site(processes.iter().map(|p| OriginSource {
            trace: p.trace,
            stacks: p.stacks,
            alloc_stacks: p.alloc_stacks,
            origins: &p.origins,
        }));
        let allocated = group_process_allocs(processes, GroupBy::Line)
            .into_iter()
            .map(|g| ((g.key.location, g.kind), g.totals))
            .collect();
        let total = processes
            .iter()
            .flat_map(|p| p.origins.iter().map(|&(_, _, _, count)| count))
            .sum();
        let in_blocks = groups
            .iter()
            .filter(|g| g.kind.is_some())
            .map(|g| g.faults.count)
            .sum();
        FaultsByAllocSite {
            groups,
            total,
            in_blocks,
            allocated,
        }
    }

    /// What the site of `group` allocated (nothing outside blocks).
    pub fn allocated(&self, group: &AllocSiteGroup) -> AllocSiteTotals {
        group
            .kind
            .and_then(|kind| {
                self.allocated
                    .get(&(group.faults.key.location.clone(), kind))
            })
            .copied()
            .unwrap_or_default()
    }

    /// How many allocation sites the faults hit.
    pub fn sites(&self) -> usize {
        self.groups.iter().filter(|g| g.kind.is_some()).count()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_support::loc;
    use fltrace_trace::{CodeAddr, VirtAddr};

    use fltrace_trace::{AllocCall, AllocEvent, Fault, FaultFlags, FaultKind, Mapping};

    use crate::{FaultOrigin, count_faults_by_origin, count_faults_by_stack};

    fn event(time_ns: u64, call: AllocCall, addr: u64, size: u64, stack_id: u32) -> AllocEvent {
        AllocEvent {
            time_ns,
            tid: 1,
            call,
            addr: VirtAddr::new(addr),
            size,
            old_addr: VirtAddr::new(0),
            detail: if call == AllocCall::Mmap { 0x22 } else { 0 },
            stack_id,
        }
    }

    fn fault(time_ns: u64, addr: u64, flags: u16) -> Fault {
        Fault {
            time_ns,
            pid: 1,
            tid: 1,
            ip: CodeAddr::new(0),
            addr: VirtAddr::new(addr),
            flags: FaultFlags(flags),
            stack_id: 0,
        }
    }

    /// Stack 0 leaks 5000 bytes from `leak`, stack 1 frees its 100 bytes again; stack 2 maps
    /// 8 KiB and keeps it; stack 3, in an unrolled loop of the same line as stack 0, leaks 3000
    /// more. Faults: two in the 5000-byte block, one in the mapping, one in the heap outside
    /// any block, one nowhere.
    fn trace() -> ProcessTrace {
        let free = AllocEvent {
            stack_id: AllocEvent::NO_STACK,
            ..event(30, AllocCall::Free, 0x3000, 0, 0)
        };
        ProcessTrace {
            pid: 1,
            faults: vec![
                fault(15, 0x1000, FaultFlags::WRITE),
                fault(16, 0x1fff, 0),
                fault(45, 0x10_0000, FaultFlags::WRITE | FaultFlags::ZERO),
                fault(50, 0x8000, 0),
                fault(50, 0x9000_0000, 0),
            ],
            stacks: Vec::new(),
            mappings: vec![Mapping {
                start: VirtAddr::new(0),
                end: VirtAddr::new(0x10000),
                path: "[heap]".into(),
                ..Mapping::default()
            }],
            metadata: Vec::new(),
            allocs: vec![
                event(10, AllocCall::Malloc, 0x1000, 5000, 0),
                event(20, AllocCall::Malloc, 0x3000, 100, 1),
                free,
                event(40, AllocCall::Mmap, 0x10_0000, 8192, 2),
                event(41, AllocCall::Malloc, 0x4000, 3000, 3),
            ],
            alloc_stacks: Vec::new(),
        }
    }

    fn alloc_stacks() -> ResolvedStacks {
        let mut stacks = ResolvedStacks::default();
        stacks.insert(
            0,
            vec![loc("leak", 10), loc("main", 5)],
            [0x10, 0x50].map(CodeAddr::new).to_vec(),
        );
        stacks.insert(
            1,
            vec![loc("temporary", 20)],
            [0x20].map(CodeAddr::new).to_vec(),
        );
        stacks.insert(2, vec![loc("map", 30)], [0x30].map(CodeAddr::new).to_vec());
        stacks.insert(
            3,
            vec![loc("leak", 10), loc("main", 5)],
            [0x11, 0x50].map(CodeAddr::new).to_vec(),
        );
        stacks
    }

    fn fault_stacks() -> ResolvedStacks {
        let mut stacks = ResolvedStacks::default();
        stacks.insert(
            0,
            vec![loc("touch", 99)],
            [0x99].map(CodeAddr::new).to_vec(),
        );
        stacks
    }

    #[test]
    fn leak_age_from_milliseconds() {
        assert_eq!(leak_age_ns(None), 0);
        assert_eq!(leak_age_ns(Some(3)), 3_000_000);
        assert_eq!(leak_age_ns(Some(u64::MAX)), u64::MAX);
    }

    #[test]
    fn summary_sums_kinds_and_sizes() {
        let (trace, stacks, alloc_stacks) = (trace(), fault_stacks(), alloc_stacks());
        let process = AllocProcess::new(&trace, &stacks, &alloc_stacks, 0);
        // Two processes alike: every sum doubles.
        let processes = [
            process,
            AllocProcess::new(&trace, &stacks, &alloc_stacks, 0),
        ];
        let summary = AllocSummary::of(&processes);
        assert_eq!(
            (
                summary.heap.allocs,
                summary.heap.bytes,
                summary.heap.leaked_bytes
            ),
            (6, 16_200, 16_000)
        );
        assert_eq!(
            (summary.mappings.allocs, summary.mappings.bytes),
            (2, 16_384)
        );
        assert_eq!(summary.heap.temporary, 2);
        // 100 in [64, 128), 3000 in [2048, 4096), 5000 in [4096, 8192).
        let sizes: Vec<(usize, u64, u64)> = summary.sizes.buckets().collect();
        assert_eq!(sizes, vec![(7, 2, 200), (12, 2, 6000), (13, 2, 10_000)]);
    }

    #[test]
    fn size_histograms_add_bucket_by_bucket() {
        let mut a = SizeHistogram::default();
        a.add(1);
        a.add(100);
        let mut b = SizeHistogram::default();
        b.add(127);
        b.add(0);
        a += &b;
        let buckets: Vec<(usize, u64, u64)> = a.buckets().collect();
        assert_eq!(buckets, vec![(0, 1, 0), (1, 1, 1), (7, 2, 227)]);
    }

    /// Leaks by stack: the two stacks of one line read the same and become one; ranking
    /// leaves out what leaked nothing and puts most first.
    #[test]
    fn same_lines_merge_and_rank() {
        let (trace, stacks, alloc_stacks) = (trace(), fault_stacks(), alloc_stacks());
        let processes = [AllocProcess::new(&trace, &stacks, &alloc_stacks, 0)];
        let by_stack = group_process_allocs(&processes, GroupBy::Stack);
        assert_eq!(by_stack.len(), 4);
        let merged = merge_same_lines(by_stack);
        assert_eq!(merged.len(), 3);
        let leaks: Vec<(&str, u64, u64)> = rank_allocs(&merged, |t| t.leaked_bytes)
            .iter()
            .map(|g| {
                let t = &g.totals;
                (&*g.key.location.function, t.leaked_bytes, t.leaked_allocs)
            })
            .collect();
        assert_eq!(leaks, vec![("map", 8192, 1), ("leak", 8000, 2)]);
        let leaked = sum_totals(rank_allocs(&merged, |t| t.leaked_bytes));
        assert_eq!((leaked.leaked_bytes, leaked.leaked_allocs), (16_192, 3));
        assert_eq!(sum_totals(&merged).allocs, 4);
    }

    #[test]
    fn largest_blocks_first() {
        let lifetimes = Lifetimes::of_trace(&trace());
        let sizes: Vec<u64> = largest_blocks(&lifetimes, 3)
            .iter()
            .map(|b| b.size)
            .collect();
        assert_eq!(sizes, vec![8192, 5000, 3000]);
        assert_eq!(largest_blocks(&lifetimes, 10).len(), 4);
    }

    /// Faults by the site of the block they hit, with what the site allocated; the others by
    /// the mapping they hit.
    #[test]
    fn faults_by_alloc_site_with_allocations() {
        let (trace, stacks, alloc_stacks) = (trace(), fault_stacks(), alloc_stacks());
        let processes = [AllocProcess::new(&trace, &stacks, &alloc_stacks, 0)];
        let report = FaultsByAllocSite::of(&processes);
        assert_eq!((report.total, report.in_blocks, report.sites()), (5, 3, 2));
        let rows: Vec<(&str, u64, u64)> = report
            .groups
            .iter()
            .map(|g| {
                let allocated = report.allocated(g);
                (
                    &*g.faults.key.location.function,
                    g.faults.count,
                    allocated.bytes,
                )
            })
            .collect();
        assert_eq!(
            rows,
            vec![
                ("leak", 2, 8000),
                ("[heap]", 1, 0),
                ("[unknown]", 1, 0),
                ("map", 1, 8192)
            ]
        );
    }

    /// The same faults by allocation stack and kind (visualize --by-allocation), and by their
    /// own stack and kind.
    #[test]
    fn faults_by_origin_and_by_stack() {
        let trace = trace();
        let lifetimes = Lifetimes::of_trace(&trace);
        let mut by_origin = count_faults_by_origin(&trace, &lifetimes, |_| true);
        by_origin.sort();
        let heap = crate::BlockKind::Heap;
        let mapping = crate::BlockKind::Mapping;
        assert_eq!(
            by_origin,
            vec![
                (
                    FaultOrigin::Block {
                        stack_id: 0,
                        kind: heap
                    },
                    FaultKind::Read,
                    1
                ),
                (
                    FaultOrigin::Block {
                        stack_id: 0,
                        kind: heap
                    },
                    FaultKind::Write,
                    1
                ),
                (
                    FaultOrigin::Block {
                        stack_id: 2,
                        kind: mapping
                    },
                    FaultKind::Write,
                    1
                ),
                (FaultOrigin::Outside { mapping: None }, FaultKind::Read, 1),
                (
                    FaultOrigin::Outside { mapping: Some(0) },
                    FaultKind::Read,
                    1
                ),
            ]
        );
        let first_touches = count_faults_by_origin(&trace, &lifetimes, |f| f.has(FaultFlags::ZERO));
        assert_eq!(first_touches.len(), 1);
        let mut by_stack = count_faults_by_stack(&trace.faults, |_| true);
        by_stack.sort();
        assert_eq!(
            by_stack,
            vec![(0, FaultKind::Read, 3), (0, FaultKind::Write, 2)]
        );
    }

    #[test]
    fn range_heat_is_per_cent_or_count() {
        use fltrace_trace::{RangeSample, RangeTraceKind};
        let sample = |value| RangeSample {
            time_s: 1.0,
            start: VirtAddr::new(0x1000),
            end: VirtAddr::new(0x2000),
            value,
        };
        let referenced = RangeTraceKind::ReferencedBytes;
        assert_eq!(crate::range_heat(referenced, &sample(2048)), 50);
        assert_eq!(
            crate::range_heat(referenced, &sample(1)),
            1,
            "any is at least 1"
        );
        assert_eq!(crate::range_heat(referenced, &sample(1 << 20)), 100);
        assert_eq!(
            crate::range_heat(RangeTraceKind::DamonAccesses, &sample(7)),
            7
        );
    }
}

/// Where the time of a one-pass allocation report goes: `FLTRACE_BENCH_RECORDING=<a
/// recording's directory> cargo test --release -p fltrace-analyze alloc_pass_time --
/// --ignored --nocapture` reads the first process's events a row group at a time, then pairs
/// them too, and prints the CPU time per event. A measurement, not a test: nothing asserted.
#[cfg(test)]
mod timing {
    use super::*;

    fn thread_cpu_ns() -> u64 {
        fltrace_trace::thread_cpu().as_nanos() as u64
    }

    #[test]
    #[ignore]
    fn alloc_pass_time() {
        let Some(dir) = std::env::var_os("FLTRACE_BENCH_RECORDING") else {
            eprintln!("FLTRACE_BENCH_RECORDING names no recording");
            return;
        };
        let recording = Recording::latest(std::path::Path::new(&dir)).unwrap();
        let pid = *recording
            .pids()
            .iter()
            .find(|&&p| recording.has_allocs(p))
            .unwrap();
        let (trace, _) = recording.load_streaming_allocs(pid).unwrap();
        for round in 0..3 {
            let started = thread_cpu_ns();
            let mut events = 0u64;
            for group in recording.alloc_row_groups(pid).unwrap() {
                events += group.unwrap().len() as u64;
            }
            let read = thread_cpu_ns() - started;
            let started = thread_cpu_ns();
            let streamed = stream_allocs(&recording, pid, &trace, None, &|_| true).unwrap();
            let all = thread_cpu_ns() - started;
            let no_faults = thread_cpu_ns();
            stream_largest_blocks(&recording, pid, &trace, 0).unwrap();
            let no_faults = thread_cpu_ns() - no_faults;
            eprintln!(
                "round {round}: {events} events, reading {:.1} ns an event, reading and pairing with faults {:.1}, without {:.1} ({} alive at the end)",
                read as f64 / events as f64,
                all as f64 / events as f64,
                no_faults as f64 / events as f64,
                streamed.totals.live_blocks
            );
        }
    }
}
