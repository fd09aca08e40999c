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

use rustc_hash::{FxHashMap, FxHashSet};

use fltrace_trace::{AllocCall, AllocEvent, Fault, Mapping, ProcessTrace, VirtAddr};

use crate::alloc_timeline::{AllocSeries, Timeline};
use crate::range_map::RangeMap;

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
pub struct Block {
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

impl Block {
    /// One past the last address.
    pub fn end(&self) -> VirtAddr {
        self.addr.saturating_add(self.size)
    }

    /// Whether the block was alive at `time_ns`.
    pub fn alive_at(&self, time_ns: u64) -> bool {
        self.start_ns <= time_ns && self.end_ns.is_none_or(|end| end > time_ns)
    }
}

/// The blocks of one process, paired from its allocation events.
#[derive(Debug, Clone, Default)]
pub struct Lifetimes {
    /// Every block in the order it came to life (so `start_ns` never decreases).
    pub blocks: Vec<Block>,
    /// Indexes of the events of allocation calls that failed (returned no block).
    pub failed: Vec<u32>,
    /// Frees and reallocs of addresses where no heap block was alive.
    pub unknown_frees: u64,
    /// Heap blocks ended because a new block was handed out over them: a `free` entered in one
    /// thread after a `malloc` in another entered and got the memory, or a free not recorded.
    /// The next free of such a block's address is taken as its own and ignored.
    pub overlaps: u64,
    /// When live heap bytes were highest (the first such time), in ns; 0 without heap blocks.
    pub peak_ns: u64,
    /// Live heap bytes then.
    pub peak_bytes: u64,
}

/// The size and stack of the process's last heap allocation, for temporaries, as heaptrack
/// counts them: a free is temporary when the freed block's size and stack are those of the
/// last allocation, in any thread, with no free since (any free of a live block forgets the
/// last allocation; failed calls, whose events heaptrack never sees, change nothing). The
/// freed block need not be the last one made: a loop that makes two same-sized blocks at one
/// line and frees the first counts one temporary.
type LastAlloc = Option<(u64, u32)>;

/// The state of the pairing, apart from the blocks.
#[derive(Default)]
struct Live {
    heap: RangeMap<u32>,
    mappings: RangeMap<u32>,
    last: LastAlloc,
    /// Addresses of heap blocks ended by an overlap, with how many frees of them to ignore.
    pending: FxHashMap<VirtAddr, u32>,
    heap_bytes: u64,
}

impl Lifetimes {
    /// Pairs `events` into blocks. `execs` are the times the process exec'd (see
    /// [`exec_times`]): every block alive then ends with the address space. Events need not be
    /// sorted; equal times keep their order.
    pub fn new(events: &[AllocEvent], execs: &[u64]) -> Lifetimes {
        let mut lifetimes = Lifetimes::default();
        let mut live = Live::default();
        let order = time_order(events.len(), |i| events[i].time_ns);
        let mut execs = execs.iter().copied().peekable();
        let mut position = 0;
        while position < order.len() {
            let time = events[order[position] as usize].time_ns;
            while let Some(exec) = execs.next_if(|&exec| exec <= time) {
                lifetimes.end_all(&mut live, exec);
            }
            // All calls of one nanosecond happened together: the peak is looked at after them.
            while let Some(&i) = order.get(position) {
                if events[i as usize].time_ns != time {
                    break;
                }
                lifetimes.apply(&mut live, i, &events[i as usize]);
                position += 1;
            }
            if live.heap_bytes > lifetimes.peak_bytes {
                lifetimes.peak_bytes = live.heap_bytes;
                lifetimes.peak_ns = time;
            }
        }
        lifetimes
    }

    /// Pairs the allocation events of `trace`, ending blocks at each exec.
    pub fn of_trace(trace: &ProcessTrace) -> Lifetimes {
        Lifetimes::new(&trace.allocs, &exec_times(&trace.mappings))
    }

    fn apply(&mut self, live: &mut Live, index: u32, event: &AllocEvent) {
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
                    self.failed.push(index);
                } else {
                    self.heap_block(live, index, event);
                }
            }
            AllocCall::Realloc | AllocCall::Reallocarray => {
                if event.addr.is_null() && event.size > 0 {
                    // Failed: the old block stays.
                    self.failed.push(index);
                    return;
                }
                if !event.old_addr.is_null() {
                    self.free(live, event.old_addr, time);
                }
                if !event.addr.is_null() {
                    self.heap_block(live, index, event);
                }
            }
            AllocCall::Free => {
                if !event.addr.is_null() {
                    self.free(live, event.addr, time);
                }
            }
            AllocCall::UsableSize => {}
            AllocCall::Mmap => {
                let anonymous = event.detail & 0xffff_ffff & MAP_ANONYMOUS != 0;
                if failed_mapping(event.addr) {
                    if anonymous {
                        self.failed.push(index);
                    }
                    return;
                }
                let end = page_end(event.addr, event.size);
                // Whatever was mapped there before (MAP_FIXED) is replaced.
                self.cut(live, event.addr, end, time);
                if anonymous {
                    self.mapping_block(live, index, event.stack_id, event.addr, end, time);
                }
            }
            AllocCall::Munmap => {
                self.cut(live, event.addr, page_end(event.addr, event.size), time);
            }
            AllocCall::Mremap => {
                if failed_mapping(event.addr) {
                    self.failed.push(index);
                    return;
                }
                // The old size is not recorded: the block moves from `old_addr` to its end.
                let old = live.mappings.get(event.old_addr);
                if let Some((_, old_end, _)) = old {
                    self.cut(live, event.old_addr, old_end, time);
                }
                let end = page_end(event.addr, event.size);
                self.cut(live, event.addr, end, time);
                // A mapping not made by a recorded call may be a file: it is not followed.
                if let Some((_, _, block)) = old {
                    let stack_id = if event.stack_id == AllocEvent::NO_STACK {
                        self.blocks[block as usize].stack_id
                    } else {
                        event.stack_id
                    };
                    self.mapping_block(live, index, stack_id, event.addr, end, time);
                }
            }
            AllocCall::Brk | AllocCall::Sbrk => {
                let (old, new) = (event.old_addr, event.addr);
                if old.is_null() || failed_mapping(new) {
                    return;
                }
                if new > old {
                    self.cut(live, old, new, time);
                    self.mapping_block(live, index, event.stack_id, old, new, time);
                } else if new < old {
                    self.cut(live, new, old, time);
                }
            }
        }
    }

    fn heap_block(&mut self, live: &mut Live, index: u32, event: &AllocEvent) {
        let (addr, size, time) = (event.addr, event.size, event.time_ns);
        let end = addr.saturating_add(size);
        // The allocator handed out memory a live block still holds: that block's free is
        // racing in another thread (it entered after this call), or was not recorded.
        for (start, _, block) in live.heap.take_overlapping(addr, end) {
            self.overlaps += 1;
            *live.pending.entry(start).or_default() += 1;
            self.end_block(live, block, time);
        }
        let block = self.push(Block {
            event: index,
            stack_id: event.stack_id,
            kind: BlockKind::Heap,
            addr,
            size,
            start_ns: time,
            end_ns: None,
            remnant: false,
            temporary: false,
        });
        live.heap.insert(addr, end, block);
        live.heap_bytes += size;
        live.last = Some((size, event.stack_id));
    }

    fn free(&mut self, live: &mut Live, addr: VirtAddr, time: u64) {
        if let Some(pending) = live.pending.get_mut(&addr) {
            *pending -= 1;
            if *pending == 0 {
                live.pending.remove(&addr);
            }
            return;
        }
        match live.heap.starting_at(addr) {
            Some((_, block)) => {
                live.heap.remove_if(addr, block);
                let freed = &mut self.blocks[block as usize];
                if live.last.take() == Some((freed.size, freed.stack_id)) {
                    freed.temporary = true;
                }
                self.end_block(live, block, time);
            }
            None => self.unknown_frees += 1,
        }
    }

    fn mapping_block(
        &mut self,
        live: &mut Live,
        index: u32,
        stack_id: u32,
        addr: VirtAddr,
        end: VirtAddr,
        time: u64,
    ) {
        let block = self.push(Block {
            event: index,
            stack_id,
            kind: BlockKind::Mapping,
            addr,
            size: end - addr,
            start_ns: time,
            end_ns: None,
            remnant: false,
            temporary: false,
        });
        live.mappings.insert(addr, end, block);
    }

    /// Takes `[start, end)` out of the live mapping blocks.
    fn cut(&mut self, live: &mut Live, start: VirtAddr, end: VirtAddr, time: u64) {
        if start >= end {
            return;
        }
        for (s, e, block) in live.mappings.take_overlapping(start, end) {
            self.end_block(live, block, time);
            for (from, to) in [(s, start), (end, e)] {
                if from < to {
                    let old = &self.blocks[block as usize];
                    let remnant = self.push(Block {
                        addr: from,
                        size: to - from,
                        start_ns: time,
                        end_ns: None,
                        remnant: true,
                        ..old.clone()
                    });
                    live.mappings.insert(from, to, remnant);
                }
            }
        }
    }

    /// Ends every live block: the address space is gone.
    fn end_all(&mut self, live: &mut Live, time: u64) {
        let mut ended: Vec<u32> = live.heap.drain().map(|(_, _, b)| b).collect();
        ended.extend(live.mappings.drain().map(|(_, _, b)| b));
        for block in ended {
            self.end_block(live, block, time);
        }
        live.last = None;
        live.pending.clear();
    }

    fn end_block(&mut self, live: &mut Live, block: u32, time: u64) {
        let block = &mut self.blocks[block as usize];
        block.end_ns = Some(time);
        if block.kind == BlockKind::Heap {
            live.heap_bytes -= block.size;
        }
    }

    fn push(&mut self, block: Block) -> u32 {
        self.blocks.push(block);
        (self.blocks.len() - 1) as u32
    }
}

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
    totals: AllocTotals,
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
            totals: AllocTotals::default(),
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
pub type BlockHit = (u32, BlockKind);

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
    heap: RangeMap<u32>,
    mappings: RangeMap<u32>,
    /// Live blocks, by the slot the maps hold; `free_slots` are ended ones to reuse.
    blocks: Vec<LiveBlock>,
    free_slots: Vec<u32>,
    /// The last heap allocation's size and stack, for temporaries.
    last: LastAlloc,
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
}

/// A block among the largest an [`AllocPass`] kept, over its lifetime (as [`Block`] has it).
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

impl From<&Block> for LargeBlock {
    fn from(b: &Block) -> LargeBlock {
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
    stacks: BTreeMap<u32, (BlockKind, AllocTotals)>,
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
        let time = event.time_ns;
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
        self.exec_until(time);
        self.time = Some(time);
        self.group_open = true;
        let index = self.events;
        self.events += 1;
        self.apply(index, event);
        Ok(())
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
        let found = self
            .heap
            .get(addr)
            .or_else(|| self.mappings.get(addr))
            .map(|(_, _, slot)| slot)
            .or_else(|| {
                self.heap
                    .neighbours(addr, CHUNK_HEADER)
                    .into_iter()
                    .flatten()
                    .find(|&slot| live_chunk_header(&self.blocks[slot as usize], addr))
            });
        match found {
            Some(slot) => {
                let b = &self.blocks[slot as usize];
                self.attributed.push((*fault, Some((b.stack_id, b.kind))));
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
                .or_insert((kind, AllocTotals::default()))
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
        for (start, _, slot) in self.heap.take_overlapping(addr, end) {
            self.overlaps += 1;
            *self.pending.entry(start).or_default() += 1;
            self.end_block(slot, time);
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
        self.last = Some((size, event.stack_id));
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
                if self.last.take() == Some((b.size, b.stack_id))
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
        let mut ended: Vec<u32> = self.heap.drain().map(|(_, _, b)| b).collect();
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

    /// A block comes to life: its slot and serial.
    fn push(&mut self, mut block: LiveBlock, time: u64) -> (u32, u64) {
        block.serial = self.births;
        self.births += 1;
        if let Some(largest) = &mut self.largest {
            largest.born(block.serial, &block, time);
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
                if live_chunk_header(&block, u.fault.addr) {
                    attributed.push((u.fault, Some((block.stack_id, block.kind))));
                    return false;
                }
                true
            });
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
                    let totals = AllocTotals {
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
    pub fn stacks(&self) -> impl Iterator<Item = (u32, BlockKind, &AllocTotals)> + '_ {
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
                .or_insert((block.kind, AllocTotals::default()))
                .1;
            if !block.remnant || leaked_remnants.insert(block.event) {
                totals.leaked_allocs += 1;
            }
            totals.leaked_bytes = totals.leaked_bytes.saturating_add(block.size);
        }
        stats
    }
}

/// How long after a fault the call whose chunk header it wrote may be recorded.
const CALL_SLACK_NS: u64 = 50_000_000;
/// How many blocks born after a fault may be the one whose header it wrote.
const UNBORN_BIRTHS: u32 = 64;

/// [`is_chunk_header`] of a live block.
fn live_chunk_header(b: &LiveBlock, addr: VirtAddr) -> bool {
    chunk_header_at(b.kind, b.remnant, b.addr, b.size, addr)
}

fn failed_mapping(addr: VirtAddr) -> bool {
    // MAP_FAILED is -1; a recorder may also write 0.
    addr.is_null() || addr.get() == u64::MAX
}

fn page_end(addr: VirtAddr, size: u64) -> VirtAddr {
    addr.saturating_add(size).align_up(PAGE)
}

/// Indexes `0..len` in order of `time(i)`, equal times in index order.
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
pub struct AllocTotals {
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

impl std::ops::AddAssign for AllocTotals {
    fn add_assign(&mut self, other: AllocTotals) {
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
    pub stacks: BTreeMap<u32, (BlockKind, AllocTotals)>,
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
                .or_insert((block.kind, AllocTotals::default()))
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
                    .or_insert((kind_of(event.call), AllocTotals::default()))
                    .1
                    .failed += 1;
            }
        }
        stats
    }

    /// The totals of every stack allocating `kind` of memory.
    pub fn total(&self, kind: BlockKind) -> AllocTotals {
        let mut total = AllocTotals::default();
        for (k, totals) in self.stacks.values() {
            if *k == kind {
                total += *totals;
            }
        }
        total
    }
}

/// For each fault, the block it landed in: the heap block alive at the fault's time whose range
/// holds its address, else such a mapping block (heap blocks can lie inside mappings an
/// allocator made). Faults may come in any order; the answer is in their order.
///
/// One sweep over time: births and deaths of blocks are merged with the faults, live blocks
/// kept in ordered maps by address, so the cost is `O((faults + blocks) log blocks)`.
pub fn attribute_faults(lifetimes: &Lifetimes, faults: &[Fault]) -> Vec<Option<u32>> {
    let blocks = &lifetimes.blocks;
    let mut hits = vec![None; faults.len()];
    let mut deaths: Vec<(u64, u32)> = blocks
        .iter()
        .enumerate()
        .filter_map(|(i, b)| Some((b.end_ns?, i as u32)))
        .collect();
    deaths.sort_unstable();
    let (mut heap, mut mappings) = (RangeMap::default(), RangeMap::default());
    let (mut born, mut died) = (0, 0);
    for index in time_order(faults.len(), |i| faults[i].time_ns) {
        let fault = &faults[index as usize];
        let time = fault.time_ns;
        // Deaths first, so that a block born in a dead one's place is not removed with it.
        while let Some(&(_, block)) = deaths.get(died).filter(|(end, _)| *end <= time) {
            let b = &blocks[block as usize];
            match b.kind {
                BlockKind::Heap => heap.remove_if(b.addr, block),
                BlockKind::Mapping => mappings.remove_if(b.addr, block),
            };
            died += 1;
        }
        while let Some(b) = blocks.get(born).filter(|b| b.start_ns <= time) {
            // A block that came and went between two faults is never seen.
            if b.end_ns.is_none_or(|end| end > time) {
                let live = match b.kind {
                    BlockKind::Heap => &mut heap,
                    BlockKind::Mapping => &mut mappings,
                };
                live.insert(b.addr, b.end(), born as u32);
            }
            born += 1;
        }
        hits[index as usize] = heap
            .get(fault.addr)
            .or_else(|| mappings.get(fault.addr))
            .map(|(_, _, block)| block)
            .or_else(|| {
                heap.neighbours(fault.addr, CHUNK_HEADER)
                    .into_iter()
                    .flatten()
                    .find(|&b| is_chunk_header(&blocks[b as usize], fault.addr))
            })
            .or_else(|| header_of_unborn(blocks, born, fault));
    }
    hits
}

/// How far below a heap block the allocator keeps its bookkeeping: glibc's chunk header
/// (previous size, size).
const CHUNK_HEADER: u64 = 16;

/// Whether `addr` is where glibc's malloc writes bookkeeping while returning block `b`: the
/// chunk's header just below it or, splitting the free space, the size field of what remains
/// just past its chunk. Either can be the first touch of a page, taken inside `malloc`; such a
/// fault counts for the block the call returned.
fn is_chunk_header(b: &Block, addr: VirtAddr) -> bool {
    chunk_header_at(b.kind, b.remnant, b.addr, b.size, addr)
}

/// [`is_chunk_header`] of a block of `kind` at `start` of `size` bytes.
fn chunk_header_at(
    kind: BlockKind,
    remnant: bool,
    start: VirtAddr,
    size: u64,
    addr: VirtAddr,
) -> bool {
    if kind != BlockKind::Heap || remnant {
        return false;
    }
    // glibc's request2size: the size plus its size field, in 16-byte units, 32 at least.
    let chunk = (size.saturating_add(8 + 15) & !15).max(32);
    let next_size = start.saturating_add(chunk - 8);
    (start.saturating_sub(CHUNK_HEADER)..start).contains(&addr)
        || (next_size..next_size.saturating_add(8)).contains(&addr)
}

/// The heap block, among those from `born` on (not yet born at the fault's time), whose chunk
/// header `fault` wrote during the call that returned it: the call's recorded time is the
/// recorder's clock read when the call ends, which can be well after the fault when the
/// thread was preempted in between (milliseconds on a busy machine).
fn header_of_unborn(blocks: &[Block], born: usize, fault: &Fault) -> Option<u32> {
    blocks
        .get(born..)?
        .iter()
        .take(UNBORN_BIRTHS as usize)
        .take_while(|b| b.start_ns <= fault.time_ns.saturating_add(CALL_SLACK_NS))
        .position(|b| is_chunk_header(b, fault.addr))
        .map(|i| (born + i) as u32)
}

#[cfg(test)]
mod tests {
    use super::*;
    use fltrace_trace::CodeAddr;

    use fltrace_trace::FaultFlags;

    const MAP_PRIVATE_ANON: u64 = 0x22;

    fn ev(time_ns: u64, tid: u32, call: AllocCall, addr: u64, size: u64) -> AllocEvent {
        AllocEvent {
            time_ns,
            tid,
            call,
            addr: VirtAddr::new(addr),
            size,
            old_addr: VirtAddr::NULL,
            detail: 0,
            stack_id: time_ns as u32,
        }
    }

    fn malloc(t: u64, addr: u64, size: u64) -> AllocEvent {
        ev(t, 1, AllocCall::Malloc, addr, size)
    }

    fn free(t: u64, addr: u64) -> AllocEvent {
        AllocEvent {
            stack_id: AllocEvent::NO_STACK,
            ..ev(t, 1, AllocCall::Free, addr, 0)
        }
    }

    fn realloc(t: u64, old: u64, addr: u64, size: u64) -> AllocEvent {
        AllocEvent {
            old_addr: VirtAddr::new(old),
            ..ev(t, 1, AllocCall::Realloc, addr, size)
        }
    }

    fn mmap(t: u64, addr: u64, size: u64, flags: u64) -> AllocEvent {
        AllocEvent {
            detail: 3 << 32 | flags,
            ..ev(t, 1, AllocCall::Mmap, addr, size)
        }
    }

    fn fault(time_ns: u64, addr: u64) -> Fault {
        Fault {
            time_ns,
            pid: 1,
            tid: 1,
            ip: CodeAddr::new(0),
            addr: VirtAddr::new(addr),
            flags: FaultFlags(FaultFlags::WRITE),
            stack_id: 0,
        }
    }

    /// (addr, size, start, end, remnant) of every block.
    fn spans(l: &Lifetimes) -> Vec<(u64, u64, u64, Option<u64>, bool)> {
        l.blocks
            .iter()
            .map(|b| (b.addr.get(), b.size, b.start_ns, b.end_ns, b.remnant))
            .collect()
    }

    fn stats(events: &[AllocEvent], end: u64, age: u64) -> AllocStats {
        AllocStats::new(events, &Lifetimes::new(events, &[]), end, age)
    }

    /// A realloc chain: each step frees the previous block and is a new allocation of its
    /// own stack; a failed realloc leaves the block alive; realloc(p, 0) only frees.
    #[test]
    fn realloc_chains() {
        let events = [
            malloc(10, 0x1000, 16),
            realloc(20, 0x1000, 0x1000, 32), // in place
            realloc(30, 0x1000, 0x2000, 64), // moved
            realloc(40, 0x2000, 0, 1 << 40), // failed: 0x2000 stays
            realloc(50, 0x2000, 0, 0),       // a free
            realloc(60, 0, 0x3000, 8),       // a malloc
        ];
        let l = Lifetimes::new(&events, &[]);
        assert_eq!(
            spans(&l),
            vec![
                (0x1000, 16, 10, Some(20), false),
                (0x1000, 32, 20, Some(30), false),
                (0x2000, 64, 30, Some(50), false),
                (0x3000, 8, 60, None, false),
            ]
        );
        assert_eq!(l.failed, vec![3]);
        assert_eq!((l.unknown_frees, l.overlaps), (0, 0));
        // Each realloc freed the last allocation before allocating: temporaries; so did
        // realloc(p, 0) at 50, since the failed call at 40 is no allocation (heaptrack never
        // sees it).
        let temporary: Vec<bool> = l.blocks.iter().map(|b| b.temporary).collect();
        assert_eq!(temporary, vec![true, true, true, false]);
        let s = AllocStats::new(&events, &l, 100, 0);
        assert_eq!(s.stacks[&20].1.allocs, 1);
        assert_eq!(s.stacks[&40].1.failed, 1);
        let heap = s.total(BlockKind::Heap);
        assert_eq!((heap.allocs, heap.bytes, heap.failed), (4, 120, 1));
        assert_eq!((heap.leaked_allocs, heap.leaked_bytes), (1, 8));
        assert_eq!((s.peak_ns, s.peak_bytes), (30, 64));
    }

    /// A leak is what is alive at the end; the age filter hides young blocks; frees of
    /// unknown addresses and free(NULL) change nothing.
    #[test]
    fn leaks_and_age() {
        let events = [
            malloc(1_000_000, 0x1000, 100),
            malloc(2_000_000, 0x2000, 200),
            free(3_000_000, 0x9999),
            free(3_500_000, 0),
            malloc(9_000_000, 0x3000, 300),
        ];
        let s = stats(&events, 10_000_000, 0);
        let leaked = s.total(BlockKind::Heap);
        assert_eq!((leaked.leaked_allocs, leaked.leaked_bytes), (3, 600));
        assert_eq!(s.unknown_frees, 1);
        // At least 8 ms old at the end (10 ms): the one from 9 ms is hidden, the one from
        // 2 ms (exactly 8 ms old) is kept.
        let s = stats(&events, 10_000_000, 8_000_000);
        let leaked = s.total(BlockKind::Heap);
        assert_eq!((leaked.leaked_allocs, leaked.leaked_bytes), (2, 300));
        assert_eq!(s.stacks[&2_000_000].1.leaked_bytes, 200);
        assert_eq!(s.stacks[&9_000_000].1.leaked_bytes, 0);
    }

    /// Aligned calls make blocks of the size asked for at the address returned; a failed one
    /// makes none.
    #[test]
    fn aligned_allocs() {
        let aligned = |t, call, addr, size| AllocEvent {
            detail: 4096,
            ..ev(t, 1, call, addr, size)
        };
        let events = [
            aligned(1, AllocCall::PosixMemalign, 0x10000, 100),
            aligned(2, AllocCall::AlignedAlloc, 0x20000, 4096),
            aligned(3, AllocCall::Memalign, 0, 1 << 50),
            ev(4, 1, AllocCall::Valloc, 0x30000, 10),
            ev(5, 1, AllocCall::Pvalloc, 0x40000, 4096),
            ev(6, 1, AllocCall::Calloc, 0x50000, 24),
            ev(7, 1, AllocCall::UsableSize, 0x50000, 32),
            free(8, 0x20000),
        ];
        let l = Lifetimes::new(&events, &[]);
        assert_eq!(
            spans(&l),
            vec![
                (0x10000, 100, 1, None, false),
                (0x20000, 4096, 2, Some(8), false),
                (0x30000, 10, 4, None, false),
                (0x40000, 4096, 5, None, false),
                (0x50000, 24, 6, None, false),
            ]
        );
        assert_eq!(l.failed, vec![2]);
        assert!(l.blocks.iter().all(|b| b.kind == BlockKind::Heap));
        let s = stats(&events, 10, 0);
        let hist: Vec<(usize, u64, u64)> = s.heap_sizes.buckets().collect();
        // 10 in [8,16), 24 in [16,32), 100 in [64,128), twice 4096 in [4096,8192).
        assert_eq!(
            hist,
            vec![(4, 1, 10), (5, 1, 24), (7, 1, 100), (13, 2, 8192)]
        );
        assert_eq!(SizeHistogram::range(13), (4096, 8191));
        assert_eq!(
            (SizeHistogram::bucket(0), SizeHistogram::range(0)),
            (0, (0, 0))
        );
    }

    /// An anonymous mapping is a page-rounded block; munmap of its middle leaves two remnants
    /// that still count as one allocation; a file mapping is no block but replaces one.
    #[test]
    fn mmap_and_partial_munmap() {
        let events = [
            mmap(10, 0x10000, 5 * 4096 - 100, MAP_PRIVATE_ANON),
            ev(20, 1, AllocCall::Munmap, 0x11000, 4096),
            mmap(25, 0x40000, 4096, 0x01), // a shared file mapping
            ev(30, 1, AllocCall::Munmap, 0x13000, 2 * 4096), // the tail
            mmap(40, 0x50000, 2 * 4096, MAP_PRIVATE_ANON),
            mmap(45, 0x51000, 4096, 0x12), // MAP_FIXED file mapping over its second page
            mmap(50, 0, 4096, MAP_PRIVATE_ANON), // failed
        ];
        let l = Lifetimes::new(&events, &[]);
        assert_eq!(
            spans(&l),
            vec![
                (0x10000, 5 * 4096, 10, Some(20), false),
                (0x10000, 4096, 20, None, true),
                (0x12000, 3 * 4096, 20, Some(30), true),
                (0x12000, 4096, 30, None, true),
                (0x50000, 2 * 4096, 40, Some(45), false),
                (0x50000, 4096, 45, None, true),
            ]
        );
        assert!(l.blocks.iter().all(|b| b.kind == BlockKind::Mapping));
        assert_eq!(l.failed, vec![6]);
        let s = stats(&events, 100, 0);
        let m = s.total(BlockKind::Mapping);
        assert_eq!((m.allocs, m.bytes, m.failed), (2, 7 * 4096, 1));
        assert_eq!((m.leaked_allocs, m.leaked_bytes), (2, 3 * 4096));
        assert_eq!(s.peak_bytes, 0);
    }

    /// mremap moves a mapping block; brk growth is a block, shrinking cuts it.
    #[test]
    fn mremap_and_brk() {
        let events = [
            mmap(10, 0x10000, 4096, MAP_PRIVATE_ANON),
            AllocEvent {
                old_addr: VirtAddr::new(0x10000),
                ..ev(20, 1, AllocCall::Mremap, 0x80000, 3 * 4096)
            },
            AllocEvent {
                old_addr: VirtAddr::new(0x100000),
                ..ev(30, 1, AllocCall::Sbrk, 0x102000, 0x2000)
            },
            AllocEvent {
                old_addr: VirtAddr::new(0x102000),
                ..ev(40, 1, AllocCall::Brk, 0x101000, 0)
            },
        ];
        let l = Lifetimes::new(&events, &[]);
        assert_eq!(
            spans(&l),
            vec![
                (0x10000, 4096, 10, Some(20), false),
                (0x80000, 3 * 4096, 20, None, false),
                (0x100000, 0x2000, 30, Some(40), false),
                (0x100000, 0x1000, 40, None, true),
            ]
        );
        assert_eq!(l.blocks[1].stack_id, 20);
    }

    /// Temporaries as heaptrack counts them: a free whose block has the last allocation's size
    /// and stack, with no free between, in whichever thread; the freed block need not be the
    /// last one made.
    #[test]
    fn temporaries_by_heaptracks_rule() {
        let at = |tid, stack_id, e: AllocEvent| AllocEvent { tid, stack_id, ..e };
        let events = [
            at(1, 7, malloc(1, 0x1000, 10)), // freed by thread 2 at once: temporary
            at(2, 0, free(2, 0x1000)),
            at(1, 7, malloc(3, 0x2000, 10)), // same size and stack as the next: temporary
            at(1, 7, malloc(4, 0x3000, 10)), // a free came between: not temporary
            at(1, 0, free(5, 0x2000)),
            at(1, 0, free(6, 0x3000)),
            at(1, 8, malloc(7, 0x4000, 10)), // another stack was last: not temporary
            at(1, 9, malloc(8, 0x5000, 10)), // freed after an unknown free: temporary
            at(1, 0, free(9, 0x9000)),
            at(1, 0, free(10, 0x5000)),
            at(1, 0, free(11, 0x4000)),
            at(1, 9, malloc(12, 0x6000, 20)), // another size was last: not temporary
            at(1, 9, malloc(13, 0x7000, 30)),
            at(1, 9, malloc(14, 0, 1 << 40)), // failed: not an allocation
            at(1, 0, free(15, 0x6000)),
            at(1, 0, free(16, 0x7000)), // not temporary: a free came between
            at(1, 9, malloc(17, 0x8000, 40)), // alive at the end
        ];
        let l = Lifetimes::new(&events, &[]);
        let temporary: Vec<bool> = l.blocks.iter().map(|b| b.temporary).collect();
        assert_eq!(
            temporary,
            vec![true, true, false, false, true, false, false, false]
        );
        assert_eq!(l.unknown_frees, 1);
        let s = AllocStats::new(&events, &l, 100, 0);
        assert_eq!(s.stacks[&7].1.temporary, 2);
        assert_eq!(s.stacks[&9].1.temporary, 1);
        assert_eq!(s.total(BlockKind::Heap).temporary, 3);
        assert_pass_matches(&events, &[], &[]);
    }

    /// A free entered after a malloc in another thread that got the same memory: the new
    /// block ends the old one, and the late free is the old block's, not the new one's.
    #[test]
    fn free_racing_malloc() {
        let events = [
            malloc(1, 0x1000, 64),
            AllocEvent {
                tid: 2,
                ..malloc(5, 0x1000, 32)
            },
            free(6, 0x1000), // thread 1 freeing the first block
            AllocEvent {
                tid: 2,
                ..free(9, 0x1000)
            },
        ];
        let l = Lifetimes::new(&events, &[]);
        assert_eq!(
            spans(&l),
            vec![
                (0x1000, 64, 1, Some(5), false),
                (0x1000, 32, 5, Some(9), false),
            ]
        );
        assert_eq!((l.overlaps, l.unknown_frees), (1, 0));
    }

    /// The peak is the most heap alive after the calls of one nanosecond, and the per-stack
    /// bytes at the peak add up to it; mappings do not count.
    #[test]
    fn peak() {
        let events = [
            malloc(10, 0x1000, 100),
            malloc(20, 0x2000, 200),
            mmap(25, 0x100000, 1 << 20, MAP_PRIVATE_ANON),
            malloc(30, 0x3000, 300), // 600 alive...
            free(30, 0x1000),        // ...but not after 30 ns: 500
            free(40, 0x2000),        // 300
            malloc(50, 0x4000, 250), // 550: the peak
            malloc(60, 0x5000, 10),
            free(60, 0x3000), // 260
        ];
        let s = stats(&events, 100, 0);
        assert_eq!((s.peak_ns, s.peak_bytes), (50, 550));
        let at_peak: Vec<(u32, u64, u64)> = s
            .stacks
            .iter()
            .filter(|(_, (_, t))| t.peak_bytes > 0)
            .map(|(&id, (_, t))| (id, t.peak_bytes, t.peak_allocs))
            .collect();
        assert_eq!(at_peak, vec![(30, 300, 1), (50, 250, 1)]);
        assert_eq!(s.total(BlockKind::Heap).peak_bytes, 550);
    }

    /// glibc's bookkeeping written inside malloc counts for the block it returns: the chunk
    /// header below it and the size of the remainder past its chunk, also when the call's
    /// recorded time comes after the fault; other bytes around it do not.
    #[test]
    fn chunk_headers_count_for_their_block() {
        let events = [malloc(10, 0x2010, 4096)];
        let l = Lifetimes::new(&events, &[]);
        let faults = [
            fault(11, 0x2008), // its size field
            fault(11, 0x3018), // the remainder's size field: 0x2010 + 4112 - 8
            fault(11, 0x3010), // one past, not bookkeeping
            fault(9, 0x3018),  // the remainder's size, before the call's recorded time
            fault(9, 0x2010),  // the block itself before its allocation
        ];
        assert_eq!(
            attribute_faults(&l, &faults),
            vec![Some(0), Some(0), None, Some(0), None]
        );
    }

    /// Faults land in the block alive at their time holding their address: at the first and
    /// last byte, not one past; not before the allocation or from the free on; heap blocks
    /// before the mapping around them.
    #[test]
    fn attribution() {
        let events = [
            mmap(10, 0x10000, 0x10000, MAP_PRIVATE_ANON), // block 0
            malloc(20, 0x10100, 0x100),                   // block 1, inside the mapping
            malloc(30, 0x1000, 64),                       // block 2
            free(40, 0x1000),
            malloc(50, 0x1000, 32), // block 3, same address
            ev(60, 1, AllocCall::Munmap, 0x18000, 0x8000), // block 0 ends, remnant 4
        ];
        let l = Lifetimes::new(&events, &[]);
        assert_eq!(l.blocks.len(), 5);
        let faults = [
            fault(29, 0x1000),  // before block 2
            fault(30, 0x1000),  // block 2, at its allocation's nanosecond
            fault(39, 0x103f),  // its last byte
            fault(39, 0x1040),  // one past
            fault(40, 0x1000),  // freed
            fault(55, 0x101f),  // block 3
            fault(55, 0x1020),  // past block 3
            fault(20, 0x10100), // the heap block
            fault(20, 0x100ff), // the mapping around it
            fault(70, 0x17fff), // the remnant
            fault(70, 0x18000), // unmapped
            fault(59, 0x18000), // before the munmap
        ];
        let hits = attribute_faults(&l, &faults);
        assert_eq!(
            hits,
            vec![
                None,
                Some(2),
                Some(2),
                None,
                None,
                Some(3),
                None,
                Some(1),
                Some(0),
                Some(4),
                None,
                Some(0),
            ]
        );
    }

    /// An exec ends every block: faults after it at old addresses hit nothing and the blocks
    /// are no leaks.
    #[test]
    fn exec_ends_blocks() {
        let events = [malloc(10, 0x1000, 64), malloc(30, 0x2000, 64)];
        let l = Lifetimes::new(&events, &[20]);
        assert_eq!(l.blocks[0].end_ns, Some(20));
        assert_eq!(l.blocks[1].end_ns, None);
        let hits = attribute_faults(&l, &[fault(15, 0x1000), fault(25, 0x1000)]);
        assert_eq!(hits, vec![Some(0), None]);
        let mapping = |generation, time_ns| Mapping {
            generation,
            time_ns,
            ..Mapping::default()
        };
        let mappings = [
            mapping(0, 0),
            mapping(1, 50),
            mapping(1, 40),
            mapping(2, 90),
        ];
        assert_eq!(exec_times(&mappings), vec![40, 90]);
    }

    /// Events out of time order are paired in time order.
    #[test]
    fn unsorted_events() {
        let events = [free(20, 0x1000), malloc(10, 0x1000, 8)];
        let l = Lifetimes::new(&events, &[]);
        assert_eq!(spans(&l), vec![(0x1000, 8, 10, Some(20), false)]);
        assert_eq!(l.blocks[0].event, 1);
        assert_eq!(trace_end_ns(&events, &[fault(30, 0)]), 30);
    }

    /// The one pass against the whole-table path, on `events` (in time order) and `faults`:
    /// the same totals at every leak age and the same block for every fault.
    fn assert_pass_matches(events: &[AllocEvent], faults: &[Fault], execs: &[u64]) {
        let lifetimes = Lifetimes::new(events, execs);
        let hits = attribute_faults(&lifetimes, faults);
        let mut pass = AllocPass::new(execs);
        pass.keep_largest(7);
        let mut sorted: Vec<&Fault> = faults.iter().collect();
        sorted.sort_by_key(|f| f.time_ns);
        let mut next = sorted.into_iter().peekable();
        let mut got: Vec<(Fault, Option<BlockHit>)> = Vec::new();
        for event in events {
            while let Some(f) = next.next_if(|f| f.time_ns < event.time_ns) {
                pass.fault(f, true).unwrap();
            }
            pass.event(event).unwrap();
            got.extend(pass.take_attributed());
        }
        for f in next {
            pass.fault(f, false).unwrap();
        }
        let (totals, rest) = pass.finish();
        got.extend(rest);
        let largest: Vec<LargeBlock> = crate::largest_blocks(&lifetimes, 7)
            .into_iter()
            .map(LargeBlock::from)
            .collect();
        assert_eq!(totals.largest, largest);
        let end = trace_end_ns(events, faults);
        for age in [0, 1, 5, 1000] {
            let whole = AllocStats::new(events, &lifetimes, end, age);
            let streamed = totals.stats(end, age);
            assert_eq!(format!("{streamed:?}"), format!("{whole:?}"), "age {age}");
        }
        let mut expected: Vec<(u64, u64, Option<BlockHit>)> = faults
            .iter()
            .zip(&hits)
            .map(|(f, hit)| {
                let b = hit.map(|b| &lifetimes.blocks[b as usize]);
                (f.time_ns, f.addr.get(), b.map(|b| (b.stack_id, b.kind)))
            })
            .collect();
        let mut streamed: Vec<(u64, u64, Option<BlockHit>)> = got
            .iter()
            .map(|(f, hit)| (f.time_ns, f.addr.get(), *hit))
            .collect();
        expected.sort_unstable_by_key(|&(t, a, h)| (t, a, h.map(|(s, _)| s)));
        streamed.sort_unstable_by_key(|&(t, a, h)| (t, a, h.map(|(s, _)| s)));
        assert_eq!(streamed, expected);
    }

    /// The one pass gives what the whole-table path gives, on random calls of every kind
    /// from four threads over a small address range (overlaps, unknown frees, cuts, execs)
    /// and random faults, chunk headers of blocks born later among them.
    #[test]
    fn one_pass_matches_whole_table() {
        let mut seed = 0x2545_f491_4f6c_dd1du64;
        let mut next = move |n: u64| {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed % n
        };
        for round in 0..40 {
            let mut events = Vec::new();
            let mut faults = Vec::new();
            let mut time = 1;
            for _ in 0..400 {
                time += next(3);
                let addr = 0x10000 + next(64) * 0x100;
                let tid = next(4) as u32;
                let stack = next(6) as u32;
                let e = match next(10) {
                    0..=3 => ev(time, tid, AllocCall::Malloc, addr, next(600)),
                    4..=5 => free(time, addr),
                    6 => realloc(time, addr, addr + 0x100 * next(2), next(400)),
                    7 => mmap(
                        time,
                        0x10000 + next(16) * 4096,
                        next(3) * 4096 + 1,
                        MAP_PRIVATE_ANON,
                    ),
                    8 => ev(
                        time,
                        tid,
                        AllocCall::Munmap,
                        0x10000 + next(16) * 4096,
                        4096,
                    ),
                    _ => ev(time, tid, AllocCall::Malloc, 0, 10),
                };
                events.push(AllocEvent {
                    tid,
                    stack_id: stack,
                    ..e
                });
                for _ in 0..next(3) {
                    let at = time.saturating_sub(next(4)) + next(4);
                    faults.push(fault(at, 0x10000 + next(0x4000) - 16));
                }
            }
            let execs = if round % 4 == 0 {
                vec![time / 2]
            } else {
                Vec::new()
            };
            assert_pass_matches(&events, &faults, &execs);
        }
    }

    /// The size the sweep must handle in seconds: `cargo test --release -p fltrace-analyze
    /// -- --ignored --nocapture at_scale`.
    #[test]
    #[ignore = "a timing run, for release builds"]
    fn at_scale() {
        // 4M blocks over 8M events: a million live at a time, on 8 threads.
        let mut events = Vec::with_capacity(8_000_000);
        let addr = |i: u64| 0x1000_0000 + (i % 1_000_000) * 64;
        for i in 0..4_000_000u64 {
            if i >= 1_000_000 {
                events.push(AllocEvent {
                    tid: (i % 8) as u32,
                    ..free(2 * i, addr(i))
                });
            }
            events.push(AllocEvent {
                tid: (i % 8) as u32,
                stack_id: (i % 1000) as u32,
                ..malloc(2 * i + 1, addr(i), 48)
            });
        }
        let faults: Vec<Fault> = (0..10_000_000u64)
            .map(|i| fault(i * 4 / 5, 0x1000_0000 + (i * 7919) % 64_000_000))
            .collect();
        let started = std::time::Instant::now();
        let lifetimes = Lifetimes::new(&events, &[]);
        let paired = started.elapsed();
        let stats = AllocStats::new(&events, &lifetimes, 10_000_000, 0);
        let counted = started.elapsed() - paired;
        let hits = attribute_faults(&lifetimes, &faults);
        let all = started.elapsed();
        let attributed = hits.iter().filter(|h| h.is_some()).count();
        eprintln!(
            "{} blocks paired in {paired:?}, totals in {counted:?}; {attributed} of {} faults \
             attributed; {all:?} in all",
            lifetimes.blocks.len(),
            faults.len()
        );
        assert_eq!(stats.total(BlockKind::Heap).allocs, 4_000_000);
        assert!(all.as_secs() < 10);
    }
}
