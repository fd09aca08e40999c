//! The whole-table pairing: every event of a process held, every block kept ([`Lifetimes`]),
//! and the block each fault landed in ([`attribute_faults`]).
//! The oracle of the one pass ([`super::one_pass`]), which the tests compare it with, and
//! what a trace loaded whole uses (`FLTRACE_ALLOCS_WHOLE_TABLE`, the integration tests'
//! second run of every allocation report). Built for this crate's tests and under the
//! `oracle` feature, which only the other crates' tests turn on: not in the binary.

use rustc_hash::FxHashMap;

use fltrace_trace::{AllocCall, AllocEvent, Fault, ProcessTrace, VirtAddr};

use super::fault_attribution::{CALL_SLACK_NS, CHUNK_HEADER, UNBORN_BIRTHS, chunk_header_at};
use super::{
    AllocBlock, BlockKind, LastAlloc, MAP_ANONYMOUS, exec_times, failed_mapping, page_end,
    time_order,
};
use crate::range_map::RangeMap;

/// The blocks of one process, paired from its allocation events.
#[derive(Debug, Clone, Default)]
pub struct Lifetimes {
    /// Every block in the order it came to life (so `start_ns` never decreases).
    pub blocks: Vec<AllocBlock>,
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

/// The state of the pairing, apart from the blocks.
#[derive(Default)]
struct Live {
    heap: RangeMap<u32>,
    mappings: RangeMap<u32>,
    last: Option<LastAlloc>,
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
        let block = self.push(AllocBlock {
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
        live.last = Some(LastAlloc {
            size,
            stack_id: event.stack_id,
        });
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
                if live.last.take()
                    == Some(LastAlloc {
                        size: freed.size,
                        stack_id: freed.stack_id,
                    })
                {
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
        let block = self.push(AllocBlock {
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
                    let remnant = self.push(AllocBlock {
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

    fn push(&mut self, block: AllocBlock) -> u32 {
        self.blocks.push(block);
        (self.blocks.len() - 1) as u32
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

/// [`chunk_header_at`] of block `b`.
fn is_chunk_header(b: &AllocBlock, addr: VirtAddr) -> bool {
    chunk_header_at(b.kind, b.remnant, b.addr, b.size, addr)
}

/// The heap block, among those from `born` on (not yet born at the fault's time), whose chunk
/// header `fault` wrote during the call that returned it: the call's recorded time is the
/// recorder's clock read when the call ends, which can be well after the fault when the
/// thread was preempted in between (milliseconds on a busy machine).
fn header_of_unborn(blocks: &[AllocBlock], born: usize, fault: &Fault) -> Option<u32> {
    blocks
        .get(born..)?
        .iter()
        .take(UNBORN_BIRTHS as usize)
        .take_while(|b| b.start_ns <= fault.time_ns.saturating_add(CALL_SLACK_NS))
        .position(|b| is_chunk_header(b, fault.addr))
        .map(|i| (born + i) as u32)
}
