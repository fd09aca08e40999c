//! The streaming pass ([`AllocPass`]): the events paired into blocks in one pass in time
//! order, faults attributed on the way, in memory bounded by the live blocks and the stacks.

use std::collections::BTreeMap;

use rustc_hash::{FxHashMap, FxHashSet};

use fltrace_trace::{AllocCall, AllocEvent, Fault, VirtAddr};

use super::fault_attribution::{CALL_SLACK_NS, CHUNK_HEADER, UNBORN_BIRTHS, chunk_header_at};
use super::heap_index::HeapIndex;
use super::totals::SizeHistogram;
use super::{
    AllocBlock, AllocSiteTotals, AllocStats, BlockKind, LastAlloc, MAP_ANONYMOUS, failed_mapping,
    page_end,
};
use crate::alloc_timeline::{AllocSeries, Timeline};
use crate::range_map::RangeMap;

/// A block alive in an [`AllocPass`].
#[derive(Debug, Clone, Copy)]
struct LiveBlock {
    /// Its index among every block in the order they came to life (as in
    /// [`Lifetimes::blocks`]): how many blocks came after a fault.
    serial: u64,
    /// Index of the event of the call that allocated it (for a remnant, the original call).
    event: u64,
    /// That call's time.
    allocated_ns: u64,
    stack_id: u32,
    kind: BlockKind,
    addr: VirtAddr,
    size: u64,
    remnant: bool,
}

/// What a stack allocated, as far as the pass has come.
#[derive(Debug, Clone, Copy)]
struct StackState {
    /// The kind of memory of its first block.
    kind: BlockKind,
    /// Every total but the leaks (known at the end); the peak's are those of the last peak
    /// the stack was looked at (see `dirty`).
    totals: AllocSiteTotals,
    /// Heap bytes and blocks of the stack alive now.
    live_bytes: u64,
    live_allocs: u64,
    /// Bytes and blocks of mappings of the stack alive now (remnants of cut ones included).
    mapped_bytes: u64,
    mapped_allocs: u64,
    /// The most heap bytes of the stack alive at once so far.
    most_live_bytes: u64,
    /// Whether they changed since the last peak (the stack is then in [`AllocPass::dirty`]).
    dirty: bool,
}

impl StackState {
    fn new(kind: BlockKind) -> StackState {
        StackState {
            kind,
            totals: AllocSiteTotals::default(),
            live_bytes: 0,
            live_allocs: 0,
            mapped_bytes: 0,
            mapped_allocs: 0,
            most_live_bytes: 0,
            dirty: false,
        }
    }
}

/// Something kept per stack id: in a table indexed by id while the ids come dense from 0 (as
/// every table fltrace writes has them), in a map beyond, so that no id sizes the table.
#[derive(Debug, Clone)]
pub(crate) struct ByStack<T> {
    dense: Vec<Option<T>>,
    sparse: FxHashMap<u32, T>,
    /// Entries in `dense`.
    dense_entries: usize,
}

impl<T> Default for ByStack<T> {
    fn default() -> Self {
        ByStack {
            dense: Vec::new(),
            sparse: FxHashMap::default(),
            dense_entries: 0,
        }
    }
}

/// How far beyond twice its entries the dense table may grow.
const DENSE_SLACK: usize = 1 << 16;

impl<T> ByStack<T> {
    #[inline]
    pub(crate) fn get_mut(&mut self, id: u32) -> Option<&mut T> {
        match self.dense.get_mut(id as usize) {
            Some(entry) => entry.as_mut(),
            None if self.sparse.is_empty() => None,
            None => self.sparse.get_mut(&id),
        }
    }

    /// The entry of `id`, made by `make` if there is none.
    #[inline]
    pub(crate) fn get_or_insert_with(&mut self, id: u32, make: impl FnOnce() -> T) -> &mut T {
        let slot = id as usize;
        if slot >= self.dense.len() && slot < DENSE_SLACK + 2 * self.dense_entries {
            self.dense.resize_with(slot + 1, || None);
        }
        match self.dense.get_mut(slot) {
            Some(entry) => {
                if entry.is_none() {
                    self.dense_entries += 1;
                }
                entry.get_or_insert_with(make)
            }
            None => self.sparse.entry(id).or_insert_with(make),
        }
    }

    /// Every entry, in no order.
    pub(crate) fn iter(&self) -> impl Iterator<Item = (u32, &T)> + '_ {
        self.dense
            .iter()
            .enumerate()
            .filter_map(|(id, entry)| Some((id as u32, entry.as_ref()?)))
            .chain(self.sparse.iter().map(|(&id, entry)| (id, entry)))
    }

    /// Every entry, by id.
    pub(crate) fn sorted(&self) -> Vec<(u32, &T)> {
        let mut all: Vec<(u32, &T)> = self
            .dense
            .iter()
            .enumerate()
            .filter_map(|(id, entry)| Some((id as u32, entry.as_ref()?)))
            .collect();
        if !self.sparse.is_empty() {
            all.extend(self.sparse.iter().map(|(&id, entry)| (id, entry)));
            all.sort_unstable_by_key(|&(id, _)| id);
        }
        all
    }
}

/// Where a fault landed: the allocation stack and kind of the block.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BlockHit {
    /// The stack id of the call that allocated the block.
    pub stack_id: u32,
    /// Heap or mapping.
    pub kind: BlockKind,
}

/// A fault outside every live block, waiting for the blocks born after it: its chunk header
/// may be one malloc wrote before the call's recorded time ([`header_of_unborn`]).
#[derive(Debug, Clone, Copy)]
struct Unborn {
    fault: Fault,
    /// The latest birth that may still be its block.
    deadline_ns: u64,
    /// How many births may still be.
    births_left: u32,
}

/// The allocation events of one process paired into blocks in one pass in time order, with
/// the faults attributed to the block alive at their address on the way: what
/// [`Lifetimes::new`], [`AllocStats::new`] and [`attribute_faults`] compute, in memory
/// bounded by the live blocks and the distinct stacks instead of the calls.
///
/// Events come through [`AllocPass::event`] in time order (equal times in the order
/// recorded); faults through [`AllocPass::fault`] after every event of their time or
/// earlier and before any later one.
#[derive(Default)]
pub struct AllocPass {
    /// Live heap blocks; small ones in bitmaps until a fault needs them ordered.
    heap: HeapIndex,
    mappings: RangeMap<u32>,
    /// Live blocks, by the slot the maps hold; `free_slots` are ended ones to reuse.
    blocks: Vec<LiveBlock>,
    free_slots: Vec<u32>,
    /// The last heap allocation's size and stack, for temporaries.
    last: Option<LastAlloc>,
    /// Addresses of heap blocks ended by an overlap, with how many frees of them to ignore.
    pending: FxHashMap<VirtAddr, u32>,
    heap_bytes: u64,
    stacks: ByStack<StackState>,
    /// Stacks whose live heap changed since the last peak.
    dirty: Vec<u32>,
    /// Failed calls per stack, with the kind of the first.
    failed: FxHashMap<u32, (BlockKind, u64)>,
    heap_sizes: SizeHistogram,
    unknown_frees: u64,
    overlaps: u64,
    peak_ns: u64,
    peak_bytes: u64,
    /// Blocks born so far.
    births: u64,
    /// Events seen so far.
    events: u64,
    /// The time of the events seen last, and whether the peak was looked at after them.
    time: Option<u64>,
    group_open: bool,
    execs: Vec<u64>,
    next_exec: usize,
    /// The largest blocks born so far, if asked for ([`AllocPass::keep_largest`]).
    largest: Option<Largest>,
    unborn: std::collections::VecDeque<Unborn>,
    /// The heap over time, if asked for ([`AllocPass::keep_timeline`]).
    timeline: Option<Box<Timeline>>,
    /// Faults attributed, waiting for [`AllocPass::take_attributed`].
    attributed: Vec<(Fault, Option<BlockHit>)>,
    last_fault_ns: u64,
    /// Temporaries counted together by [`AllocPass::events`], for the tests.
    #[cfg(test)]
    pub(crate) temporaries_fused: u64,
}

/// A block among the largest an [`AllocPass`] kept, over its lifetime (as [`AllocBlock`] has it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LargeBlock {
    /// The stack of the call that allocated it.
    pub stack_id: u32,
    /// Heap or mapping.
    pub kind: BlockKind,
    /// First address.
    pub addr: VirtAddr,
    /// Bytes.
    pub size: u64,
    /// When it came to life (for a remnant, the time of the cut).
    pub start_ns: u64,
    /// When it ended, `None` if it was alive at the end.
    pub end_ns: Option<u64>,
    /// Whether it is what remained of a cut mapping.
    pub remnant: bool,
}

impl From<&AllocBlock> for LargeBlock {
    fn from(b: &AllocBlock) -> LargeBlock {
        LargeBlock {
            stack_id: b.stack_id,
            kind: b.kind,
            addr: b.addr,
            size: b.size,
            start_ns: b.start_ns,
            end_ns: b.end_ns,
            remnant: b.remnant,
        }
    }
}

/// The `count` largest non-empty blocks born so far, keyed by size and then birth (earlier
/// first among equal sizes, as a stable sort of the blocks by size puts them).
#[derive(Debug, Clone, Default)]
struct Largest {
    count: usize,
    blocks: BTreeMap<(u64, std::cmp::Reverse<u64>), LargeBlock>,
}

impl Largest {
    fn born(&mut self, serial: u64, block: &LiveBlock, time: u64) {
        if block.size == 0 || self.count == 0 {
            return;
        }
        let key = (block.size, std::cmp::Reverse(serial));
        if self.blocks.len() >= self.count {
            match self.blocks.first_key_value() {
                Some((smallest, _)) if key > *smallest => {
                    self.blocks.pop_first();
                }
                _ => return,
            }
        }
        self.blocks.insert(
            key,
            LargeBlock {
                stack_id: block.stack_id,
                kind: block.kind,
                addr: block.addr,
                size: block.size,
                start_ns: time,
                end_ns: None,
                remnant: block.remnant,
            },
        );
    }

    fn ended(&mut self, serial: u64, size: u64, time: u64) {
        if let Some(b) = self.blocks.get_mut(&(size, std::cmp::Reverse(serial))) {
            b.end_ns = Some(time);
        }
    }
}

/// What a stack allocated so far and holds now ([`AllocPass::stack_figures`]): at the end
/// of the calls, its live blocks are its leaks (`report --allocs`, no `--older`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LiveStackFigures {
    /// Blocks made (remnants of cut mappings are not new ones).
    pub allocs: u64,
    /// Their bytes.
    pub bytes: u64,
    /// Bytes of its blocks alive now, heap and mappings.
    pub live_bytes: u64,
    /// Its blocks alive now.
    pub live_allocs: u64,
}

/// Events or faults given to an [`AllocPass`] out of time order: it cannot take them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OutOfOrder;

/// What an [`AllocPass`] leaves at the end: the totals, and the blocks still alive.
#[derive(Debug, Clone, Default)]
pub struct PassTotals {
    stacks: BTreeMap<u32, (BlockKind, AllocSiteTotals)>,
    live: Vec<LiveBlock>,
    heap_sizes: SizeHistogram,
    peak_ns: u64,
    peak_bytes: u64,
    unknown_frees: u64,
    overlaps: u64,
    /// The time of the last event.
    pub last_event_ns: u64,
    /// Blocks alive at the end.
    pub live_blocks: usize,
    /// The largest blocks, if the pass kept them ([`AllocPass::keep_largest`]): largest first,
    /// equal sizes in the order they came to life.
    pub largest: Vec<LargeBlock>,
    /// The most heap bytes of each stack alive at once.
    most_live: BTreeMap<u32, u64>,
    /// The heap over time, if the pass followed it ([`AllocPass::keep_timeline`]).
    pub timeline: Option<AllocSeries>,
}

impl AllocPass {
    /// A pass over a process that exec'd at `execs` (ascending, see [`exec_times`]).
    pub fn new(execs: &[u64]) -> AllocPass {
        AllocPass {
            execs: execs.to_vec(),
            ..AllocPass::default()
        }
    }

    /// Keeps the `count` largest blocks over their lifetimes, for [`PassTotals::largest`]:
    /// those [`crate::largest_blocks`] picks from [`Lifetimes`].
    pub fn keep_largest(&mut self, count: usize) {
        self.largest = Some(Largest {
            count,
            blocks: BTreeMap::new(),
        });
    }

    /// The process exec'd at `time_ns` (no earlier than the execs given before): every block
    /// ends there, once an event at or after it comes (as [`AllocPass::new`]'s execs do).
    pub fn exec_at(&mut self, time_ns: u64) {
        if self.execs.last().is_none_or(|&last| time_ns >= last) {
            self.execs.push(time_ns);
        }
    }

    /// Keeps every heap block in the ordered map from the start, as a pass attributing
    /// faults does after its first: for the tests, which compare both ways.
    #[cfg(test)]
    pub(crate) fn ordered_heap(&mut self) {
        self.heap.ordered();
    }

    /// The execs that ended blocks so far.
    pub fn execs_applied(&self) -> &[u64] {
        &self.execs[..self.next_exec]
    }

    /// Follows the heap over time in `timeline`, handed back by [`AllocPass::finish`] in
    /// [`PassTotals::timeline`].
    pub fn keep_timeline(&mut self, timeline: Timeline) {
        self.timeline = Some(Box::new(timeline));
    }

    /// Takes the next event.
    pub fn event(&mut self, event: &AllocEvent) -> Result<(), OutOfOrder> {
        let index = self.begin(event.time_ns)?;
        self.apply(index, event);
        Ok(())
    }

    /// Takes the next events, as [`AllocPass::event`] does one by one; a heap block
    /// allocated and freed by the next call at the same time (a temporary: most calls of
    /// many programs) is counted without going into the heap index and out again.
    pub fn events(&mut self, events: &[AllocEvent]) -> Result<(), OutOfOrder> {
        let mut i = 0;
        while let Some(event) = events.get(i) {
            if let Some(next) = events.get(i + 1)
                && self.temporary_pair(event, next)?
            {
                i += 2;
            } else {
                self.event(event)?;
                i += 1;
            }
        }
        Ok(())
    }

    /// Takes `alloc` and `free` together, with what [`AllocPass::event`] would find for
    /// both, if `free` gives back the heap block `alloc` made, at the same time (no peak is
    /// looked at between them), nothing watches births (the largest blocks, a timeline,
    /// faults waiting for a block), no free of its address is to be ignored, and the block
    /// overlaps no live one.
    /// `Ok(false)`: not such a pair, nothing taken.
    #[inline]
    fn temporary_pair(
        &mut self,
        alloc: &AllocEvent,
        free: &AllocEvent,
    ) -> Result<bool, OutOfOrder> {
        if !alloc.call.is_new_heap_block()
            || free.call != AllocCall::Free
            || free.addr != alloc.addr
            || free.time_ns != alloc.time_ns
            || alloc.addr.is_null()
            || self.largest.is_some()
            || self.timeline.is_some()
            || !self.unborn.is_empty()
            || self.pending.contains_key(&alloc.addr)
        {
            return Ok(false);
        }
        let index = self.begin(alloc.time_ns)?;
        let (addr, size, stack_id) = (alloc.addr, alloc.size, alloc.stack_id);
        if !self.heap.overlaps_none(addr, addr.saturating_add(size)) {
            // It ends blocks: the calls one by one.
            self.apply(index, alloc);
            let index = self.begin(free.time_ns)?;
            self.apply(index, free);
            return Ok(true);
        }
        // What `push` and then `free` and `end_block` leave: a birth, the stack's totals
        // and most live bytes, a temporary; its live bytes, the heap's and the slots as
        // they were.
        self.births += 1;
        self.heap_sizes.add(size);
        let state = self
            .stacks
            .get_or_insert_with(stack_id, || StackState::new(BlockKind::Heap));
        state.totals.allocs += 1;
        state.totals.bytes = state.totals.bytes.saturating_add(size);
        state.totals.temporary += 1;
        state.most_live_bytes = state
            .most_live_bytes
            .max(state.live_bytes.saturating_add(size));
        if !state.dirty {
            state.dirty = true;
            self.dirty.push(stack_id);
        }
        self.last = None;
        self.begin(free.time_ns)?;
        #[cfg(test)]
        {
            self.temporaries_fused += 1;
        }
        Ok(true)
    }

    /// Moves the pass to an event at `time`: the peak looked at when the time moves on,
    /// waiting faults and execs up to it. The event's index.
    #[inline]
    fn begin(&mut self, time: u64) -> Result<u64, OutOfOrder> {
        match self.time {
            Some(last) if time < last => return Err(OutOfOrder),
            Some(last) if time > last => self.close_group(),
            _ => {}
        }
        // No block is born before this event: a fault waiting for one past its slack waits
        // no more.
        while let Some(u) = self.unborn.front().filter(|u| u.deadline_ns < time) {
            let fault = u.fault;
            self.unborn.pop_front();
            self.attributed.push((fault, None));
        }
        // Most passes have no exec left to apply.
        if self.next_exec < self.execs.len() {
            self.exec_until(time);
        }
        self.time = Some(time);
        self.group_open = true;
        let index = self.events;
        self.events += 1;
        Ok(index)
    }

    /// What each stack allocated so far and holds now, by stack id: for a live view, which
    /// reads it between events (`fltrace top --allocs`).
    pub fn stack_figures(&self) -> impl Iterator<Item = (u32, LiveStackFigures)> + '_ {
        self.stacks.iter().map(|(stack_id, state)| {
            (
                stack_id,
                LiveStackFigures {
                    allocs: state.totals.allocs,
                    bytes: state.totals.bytes,
                    live_bytes: state.live_bytes + state.mapped_bytes,
                    live_allocs: state.live_allocs + state.mapped_allocs,
                },
            )
        })
    }

    /// Takes the next fault; `more_events` says whether events of later times follow.
    /// Its block is known once [`AllocPass::take_attributed`] hands it out (at most 64 births
    /// or 50 ms of events later).
    pub fn fault(&mut self, fault: &Fault, more_events: bool) -> Result<(), OutOfOrder> {
        let time = fault.time_ns;
        if time < self.last_fault_ns || self.time.is_some_and(|t| time < t) {
            return Err(OutOfOrder);
        }
        self.last_fault_ns = time;
        self.close_group();
        // An exec ends the blocks only where a later event came to say so, as in
        // [`Lifetimes::new`].
        if more_events {
            self.exec_until(time);
        }
        let addr = fault.addr;
        let heap = self.heap.ordered();
        let found = heap
            .get(addr)
            .or_else(|| self.mappings.get(addr))
            .map(|(_, _, slot)| slot)
            .or_else(|| {
                heap.neighbours(addr, CHUNK_HEADER)
                    .into_iter()
                    .flatten()
                    .find(|&slot| live_chunk_header(&self.blocks[slot as usize], addr))
            });
        match found {
            Some(slot) => {
                let b = &self.blocks[slot as usize];
                self.attributed.push((
                    *fault,
                    Some(BlockHit {
                        stack_id: b.stack_id,
                        kind: b.kind,
                    }),
                ));
            }
            None => self.unborn.push_back(Unborn {
                fault: *fault,
                deadline_ns: time.saturating_add(CALL_SLACK_NS),
                births_left: UNBORN_BIRTHS,
            }),
        }
        Ok(())
    }

    /// The faults whose block is known, with it (`None`: outside every block), in no
    /// particular order.
    pub fn take_attributed(&mut self) -> std::vec::Drain<'_, (Fault, Option<BlockHit>)> {
        self.attributed.drain(..)
    }

    /// Whether faults wait for [`AllocPass::take_attributed`].
    #[inline]
    pub fn has_attributed(&self) -> bool {
        !self.attributed.is_empty()
    }

    /// Blocks alive now.
    #[inline]
    pub fn live_blocks(&self) -> usize {
        self.blocks.len() - self.free_slots.len()
    }

    /// Ends the pass: the faults still waiting are outside every block.
    pub fn finish(mut self) -> (PassTotals, Vec<(Fault, Option<BlockHit>)>) {
        self.close_group();
        let waiting: Vec<Unborn> = self.unborn.drain(..).collect();
        self.attributed
            .extend(waiting.into_iter().map(|u| (u.fault, None)));
        let mut stacks = BTreeMap::new();
        let mut most_live = BTreeMap::new();
        for (stack_id, state) in self.stacks.sorted() {
            stacks.insert(stack_id, (state.kind, state.totals));
            if state.most_live_bytes > 0 {
                most_live.insert(stack_id, state.most_live_bytes);
            }
        }
        for (&stack_id, &(kind, count)) in &self.failed {
            stacks
                .entry(stack_id)
                .or_insert((kind, AllocSiteTotals::default()))
                .1
                .failed += count;
        }
        let free: FxHashSet<u32> = self.free_slots.iter().copied().collect();
        let live: Vec<LiveBlock> = (0..self.blocks.len() as u32)
            .filter(|slot| !free.contains(slot))
            .map(|slot| self.blocks[slot as usize])
            .collect();
        let totals = PassTotals {
            stacks,
            live_blocks: live.len(),
            live,
            heap_sizes: self.heap_sizes,
            peak_ns: self.peak_ns,
            peak_bytes: self.peak_bytes,
            unknown_frees: self.unknown_frees,
            overlaps: self.overlaps,
            last_event_ns: self.time.unwrap_or(0),
            largest: self
                .largest
                .map(|l| l.blocks.into_values().rev().collect())
                .unwrap_or_default(),
            most_live,
            timeline: self.timeline.map(|t| t.finish()),
        };
        (totals, self.attributed)
    }

    /// Looks at the peak after the calls of one nanosecond.
    fn close_group(&mut self) {
        if !std::mem::take(&mut self.group_open) {
            return;
        }
        if let Some(timeline) = &mut self.timeline {
            timeline.close(self.time.unwrap_or(0), self.heap_bytes);
        }
        if self.heap_bytes > self.peak_bytes {
            self.peak_bytes = self.heap_bytes;
            self.peak_ns = self.time.unwrap_or(0);
            // Only the stacks changed since the last peak differ from what it holds.
            for stack_id in self.dirty.drain(..) {
                if let Some(state) = self.stacks.get_mut(stack_id) {
                    state.dirty = false;
                    state.totals.peak_bytes = state.live_bytes;
                    state.totals.peak_allocs = state.live_allocs;
                }
            }
        }
    }

    fn exec_until(&mut self, time: u64) {
        while let Some(&exec) = self.execs.get(self.next_exec).filter(|&&e| e <= time) {
            self.next_exec += 1;
            self.end_all(exec);
        }
    }

    fn apply(&mut self, index: u64, event: &AllocEvent) {
        let time = event.time_ns;
        match event.call {
            AllocCall::Malloc
            | AllocCall::Calloc
            | AllocCall::Valloc
            | AllocCall::Pvalloc
            | AllocCall::Memalign
            | AllocCall::AlignedAlloc
            | AllocCall::PosixMemalign => {
                if event.addr.is_null() {
                    self.fail(event);
                } else {
                    self.heap_block(index, event);
                }
            }
            AllocCall::Realloc | AllocCall::Reallocarray => {
                if event.addr.is_null() && event.size > 0 {
                    self.fail(event);
                    return;
                }
                if !event.old_addr.is_null() {
                    self.free(event.old_addr, time);
                }
                if !event.addr.is_null() {
                    self.heap_block(index, event);
                }
            }
            AllocCall::Free => {
                if !event.addr.is_null() {
                    self.free(event.addr, time);
                }
            }
            AllocCall::UsableSize => {}
            AllocCall::Mmap => {
                let anonymous = event.detail & 0xffff_ffff & MAP_ANONYMOUS != 0;
                if failed_mapping(event.addr) {
                    if anonymous {
                        self.fail(event);
                    }
                    return;
                }
                let end = page_end(event.addr, event.size);
                self.cut(event.addr, end, time);
                if anonymous {
                    self.mapping_block(index, event.stack_id, event.addr, end, time);
                }
            }
            AllocCall::Munmap => {
                self.cut(event.addr, page_end(event.addr, event.size), time);
            }
            AllocCall::Mremap => {
                if failed_mapping(event.addr) {
                    self.fail(event);
                    return;
                }
                let old = self.mappings.get(event.old_addr);
                // Read before the cut ends it.
                let old_stack = old.map(|(_, _, slot)| self.blocks[slot as usize].stack_id);
                if let Some((_, old_end, _)) = old {
                    self.cut(event.old_addr, old_end, time);
                }
                let end = page_end(event.addr, event.size);
                self.cut(event.addr, end, time);
                if let Some(old_stack) = old_stack {
                    let stack_id = if event.stack_id == AllocEvent::NO_STACK {
                        old_stack
                    } else {
                        event.stack_id
                    };
                    self.mapping_block(index, stack_id, event.addr, end, time);
                }
            }
            AllocCall::Brk | AllocCall::Sbrk => {
                let (old, new) = (event.old_addr, event.addr);
                if old.is_null() || failed_mapping(new) {
                    return;
                }
                if new > old {
                    self.cut(old, new, time);
                    self.mapping_block(index, event.stack_id, old, new, time);
                } else if new < old {
                    self.cut(new, old, time);
                }
            }
        }
    }

    fn fail(&mut self, event: &AllocEvent) {
        let kind = if event.call.is_heap() {
            BlockKind::Heap
        } else {
            BlockKind::Mapping
        };
        self.failed.entry(event.stack_id).or_insert((kind, 0)).1 += 1;
    }

    fn heap_block(&mut self, index: u64, event: &AllocEvent) {
        let (addr, size, time) = (event.addr, event.size, event.time_ns);
        let end = addr.saturating_add(size);
        if !self.heap.overlaps_none(addr, end) {
            for (start, _, slot) in self.heap.take_overlapping(addr, end) {
                self.overlaps += 1;
                *self.pending.entry(start).or_default() += 1;
                self.end_block(slot, time);
            }
        }
        let block = LiveBlock {
            serial: 0,
            event: index,
            allocated_ns: time,
            stack_id: event.stack_id,
            kind: BlockKind::Heap,
            addr,
            size,
            remnant: false,
        };
        let (slot, _) = self.push(block, time);
        self.heap.insert(addr, end, slot);
        self.last = Some(LastAlloc {
            size,
            stack_id: event.stack_id,
        });
    }

    fn free(&mut self, addr: VirtAddr, time: u64) {
        if !self.pending.is_empty()
            && let Some(pending) = self.pending.get_mut(&addr)
        {
            *pending -= 1;
            if *pending == 0 {
                self.pending.remove(&addr);
            }
            return;
        }
        match self.heap.remove_starting_at(addr) {
            Some((_, slot)) => {
                let b = self.blocks[slot as usize];
                if self.last.take()
                    == Some(LastAlloc {
                        size: b.size,
                        stack_id: b.stack_id,
                    })
                    && let Some(state) = self.stacks.get_mut(b.stack_id)
                {
                    state.totals.temporary += 1;
                    if let Some(timeline) = &mut self.timeline {
                        timeline.temporary(time);
                    }
                }
                self.end_block(slot, time);
            }
            None => self.unknown_frees += 1,
        }
    }

    fn mapping_block(
        &mut self,
        index: u64,
        stack_id: u32,
        addr: VirtAddr,
        end: VirtAddr,
        time: u64,
    ) {
        let block = LiveBlock {
            serial: 0,
            event: index,
            allocated_ns: time,
            stack_id,
            kind: BlockKind::Mapping,
            addr,
            size: end - addr,
            remnant: false,
        };
        let (slot, _) = self.push(block, time);
        self.mappings.insert(addr, end, slot);
    }

    fn cut(&mut self, start: VirtAddr, end: VirtAddr, time: u64) {
        if start >= end {
            return;
        }
        for (s, e, slot) in self.mappings.take_overlapping(start, end) {
            let old = self.blocks[slot as usize];
            self.end_block(slot, time);
            for (from, to) in [(s, start), (end, e)] {
                if from < to {
                    let remnant = LiveBlock {
                        addr: from,
                        size: to - from,
                        remnant: true,
                        ..old
                    };
                    let (slot, _) = self.push(remnant, time);
                    self.mappings.insert(from, to, slot);
                }
            }
        }
    }

    fn end_all(&mut self, time: u64) {
        let mut ended: Vec<u32> = self.heap.drain().into_iter().map(|(_, _, b)| b).collect();
        ended.extend(self.mappings.drain().map(|(_, _, b)| b));
        for slot in ended {
            self.end_block(slot, time);
        }
        self.last = None;
        self.pending.clear();
    }

    fn end_block(&mut self, slot: u32, time: u64) {
        let b = self.blocks[slot as usize];
        if let Some(largest) = &mut self.largest {
            largest.ended(b.serial, b.size, time);
        }
        if b.kind == BlockKind::Heap {
            self.heap_bytes -= b.size;
            self.live_heap(b.stack_id, |state| {
                state.live_bytes -= b.size;
                state.live_allocs -= 1;
            });
            if let Some(timeline) = &mut self.timeline {
                timeline.ended(b.stack_id, b.size);
            }
        } else if let Some(state) = self.stacks.get_mut(b.stack_id) {
            state.mapped_bytes -= b.size;
            state.mapped_allocs -= 1;
        }
        self.free_slots.push(slot);
    }

    fn live_heap(&mut self, stack_id: u32, change: impl FnOnce(&mut StackState)) {
        if let Some(state) = self.stacks.get_mut(stack_id) {
            change(state);
            if !state.dirty {
                state.dirty = true;
                self.dirty.push(stack_id);
            }
        }
    }

    /// A block comes to life while the largest blocks are kept or faults wait for a block
    /// born after them: out of [`AllocPass::push`]'s way, which most births take without.
    #[inline(never)]
    fn watch_birth(&mut self, block: &LiveBlock, time: u64) {
        if let Some(largest) = &mut self.largest {
            largest.born(block.serial, block, time);
        }
        // Faults waiting for a block born after them.
        if !self.unborn.is_empty() {
            let attributed = &mut self.attributed;
            self.unborn.retain_mut(|u| {
                if time > u.deadline_ns || u.births_left == 0 {
                    attributed.push((u.fault, None));
                    return false;
                }
                u.births_left -= 1;
                if live_chunk_header(block, u.fault.addr) {
                    attributed.push((
                        u.fault,
                        Some(BlockHit {
                            stack_id: block.stack_id,
                            kind: block.kind,
                        }),
                    ));
                    return false;
                }
                true
            });
        }
    }

    /// A block comes to life: its slot and serial.
    fn push(&mut self, mut block: LiveBlock, time: u64) -> (u32, u64) {
        block.serial = self.births;
        self.births += 1;
        if self.largest.is_some() || !self.unborn.is_empty() {
            self.watch_birth(&block, time);
        }
        let state = self
            .stacks
            .get_or_insert_with(block.stack_id, || StackState::new(block.kind));
        if !block.remnant {
            state.totals.allocs += 1;
            state.totals.bytes = state.totals.bytes.saturating_add(block.size);
            if block.kind == BlockKind::Heap {
                self.heap_sizes.add(block.size);
            }
        }
        if block.kind == BlockKind::Heap {
            self.heap_bytes += block.size;
            state.live_bytes += block.size;
            state.live_allocs += 1;
            state.most_live_bytes = state.most_live_bytes.max(state.live_bytes);
            if !state.dirty {
                state.dirty = true;
                self.dirty.push(block.stack_id);
            }
            if let Some(timeline) = &mut self.timeline {
                timeline.born(block.stack_id, block.size, time, block.remnant);
            }
        } else {
            state.mapped_bytes += block.size;
            state.mapped_allocs += 1;
        }
        let serial = block.serial;
        let slot = match self.free_slots.pop() {
            Some(slot) => {
                self.blocks[slot as usize] = block;
                slot
            }
            None => {
                self.blocks.push(block);
                (self.blocks.len() - 1) as u32
            }
        };
        (slot, serial)
    }
}

impl PassTotals {
    /// What the pass found, for the recording ([`fltrace_trace::write_alloc_stats`]), its
    /// leaks those alive at the end whatever their age; `execs` the execs that ended blocks.
    pub fn summary(&self, execs: &[u64]) -> fltrace_trace::AllocPassSummary {
        let stats = self.stats(self.last_event_ns, 0);
        fltrace_trace::AllocPassSummary {
            stacks: stats
                .stacks
                .iter()
                .map(|(&stack_id, &(kind, t))| fltrace_trace::AllocStackStats {
                    stack_id,
                    mapping: kind == BlockKind::Mapping,
                    allocs: t.allocs,
                    bytes: t.bytes,
                    failed: t.failed,
                    leaked_allocs: t.leaked_allocs,
                    leaked_bytes: t.leaked_bytes,
                    temporary: t.temporary,
                    peak_bytes: t.peak_bytes,
                    peak_allocs: t.peak_allocs,
                    most_live_bytes: self.most_live_bytes(stack_id),
                })
                .collect(),
            peak_ns: self.peak_ns,
            peak_bytes: self.peak_bytes,
            unknown_frees: self.unknown_frees,
            overlaps: self.overlaps,
            last_event_ns: self.last_event_ns,
            live_blocks: self.live_blocks as u64,
            heap_sizes: self
                .heap_sizes
                .buckets()
                .map(|(bucket, count, bytes)| (bucket as u32, count, bytes))
                .collect(),
            execs: execs.to_vec(),
        }
    }

    /// The totals of a [`PassTotals::summary`] read back: the leaks already in the stacks'
    /// totals (no live block is kept, so [`PassTotals::stats`] adds none, whatever the age).
    pub fn from_summary(summary: &fltrace_trace::AllocPassSummary) -> PassTotals {
        let mut heap_sizes = SizeHistogram::default();
        for &(bucket, count, bytes) in &summary.heap_sizes {
            if let Some(slot) = heap_sizes.counts.get_mut(bucket as usize) {
                *slot = count;
                heap_sizes.bytes[bucket as usize] = bytes;
            }
        }
        let kind = |mapping| {
            if mapping {
                BlockKind::Mapping
            } else {
                BlockKind::Heap
            }
        };
        PassTotals {
            stacks: summary
                .stacks
                .iter()
                .map(|s| {
                    let totals = AllocSiteTotals {
                        allocs: s.allocs,
                        bytes: s.bytes,
                        failed: s.failed,
                        leaked_allocs: s.leaked_allocs,
                        leaked_bytes: s.leaked_bytes,
                        temporary: s.temporary,
                        peak_bytes: s.peak_bytes,
                        peak_allocs: s.peak_allocs,
                    };
                    (s.stack_id, (kind(s.mapping), totals))
                })
                .collect(),
            live: Vec::new(),
            heap_sizes,
            peak_ns: summary.peak_ns,
            peak_bytes: summary.peak_bytes,
            unknown_frees: summary.unknown_frees,
            overlaps: summary.overlaps,
            last_event_ns: summary.last_event_ns,
            live_blocks: summary.live_blocks as usize,
            largest: Vec::new(),
            most_live: summary
                .stacks
                .iter()
                .filter(|s| s.most_live_bytes > 0)
                .map(|s| (s.stack_id, s.most_live_bytes))
                .collect(),
            timeline: None,
        }
    }

    /// The most heap bytes of stack `stack_id` alive at once.
    pub fn most_live_bytes(&self, stack_id: u32) -> u64 {
        self.most_live.get(&stack_id).copied().unwrap_or(0)
    }

    /// Every stack that allocated (or failed to), by id: the kind of its memory and its
    /// totals (leaks are not counted here: see [`PassTotals::stats`]).
    pub fn stacks(&self) -> impl Iterator<Item = (u32, BlockKind, &AllocSiteTotals)> + '_ {
        self.stacks
            .iter()
            .map(|(&id, (kind, totals))| (id, *kind, totals))
    }

    /// When the heap peaked, in ns, and its bytes then.
    pub fn peak(&self) -> (u64, u64) {
        (self.peak_ns, self.peak_bytes)
    }

    /// The totals as [`AllocStats::new`] gives them: leaks are the blocks alive at `end_ns`
    /// allocated at least `min_leak_age_ns` before it.
    pub fn stats(&self, end_ns: u64, min_leak_age_ns: u64) -> AllocStats {
        let mut stats = AllocStats {
            stacks: self.stacks.clone(),
            heap_sizes: self.heap_sizes.clone(),
            peak_ns: self.peak_ns,
            peak_bytes: self.peak_bytes,
            end_ns,
            unknown_frees: self.unknown_frees,
            overlaps: self.overlaps,
        };
        // A mapping cut in two is one leaked allocation, not two.
        let mut leaked_remnants: FxHashSet<u64> = FxHashSet::default();
        for block in &self.live {
            if end_ns.saturating_sub(block.allocated_ns) < min_leak_age_ns {
                continue;
            }
            let totals = &mut stats
                .stacks
                .entry(block.stack_id)
                .or_insert((block.kind, AllocSiteTotals::default()))
                .1;
            if !block.remnant || leaked_remnants.insert(block.event) {
                totals.leaked_allocs += 1;
            }
            totals.leaked_bytes = totals.leaked_bytes.saturating_add(block.size);
        }
        stats
    }
}

/// [`is_chunk_header`] of a live block.
fn live_chunk_header(b: &LiveBlock, addr: VirtAddr) -> bool {
    chunk_header_at(b.kind, b.remnant, b.addr, b.size, addr)
}
