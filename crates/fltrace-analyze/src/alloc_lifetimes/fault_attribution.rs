//! Which block each fault landed in ([`attribute_faults`]), and the rule both passes share for
//! the faults malloc takes on its own bookkeeping (a chunk header just below a block).

use fltrace_trace::{Fault, VirtAddr};

use super::{AllocBlock, BlockKind, Lifetimes, time_order};
use crate::range_map::RangeMap;

/// How long after a fault the call whose chunk header it wrote may be recorded.
pub(super) const CALL_SLACK_NS: u64 = 50_000_000;
/// How many blocks born after a fault may be the one whose header it wrote.
pub(super) const UNBORN_BIRTHS: u32 = 64;

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
pub(super) const CHUNK_HEADER: u64 = 16;

/// Whether `addr` is where glibc's malloc writes bookkeeping while returning block `b`: the
/// chunk's header just below it or, splitting the free space, the size field of what remains
/// just past its chunk. Either can be the first touch of a page, taken inside `malloc`; such a
/// fault counts for the block the call returned.
fn is_chunk_header(b: &AllocBlock, addr: VirtAddr) -> bool {
    chunk_header_at(b.kind, b.remnant, b.addr, b.size, addr)
}

/// [`is_chunk_header`] of a block of `kind` at `start` of `size` bytes.
pub(super) fn chunk_header_at(
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
pub(super) fn header_of_unborn(blocks: &[AllocBlock], born: usize, fault: &Fault) -> Option<u32> {
    blocks
        .get(born..)?
        .iter()
        .take(UNBORN_BIRTHS as usize)
        .take_while(|b| b.start_ns <= fault.time_ns.saturating_add(CALL_SLACK_NS))
        .position(|b| is_chunk_header(b, fault.addr))
        .map(|i| (born + i) as u32)
}
