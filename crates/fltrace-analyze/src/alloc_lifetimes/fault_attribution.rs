//! The rule both pairings share for the faults malloc takes on its own bookkeeping (a chunk
//! header just below a block): which block such a fault counts for, and how long after it the
//! block's call may be recorded.

use fltrace_trace::VirtAddr;

use super::BlockKind;

/// How long after a fault the call whose chunk header it wrote may be recorded.
pub(super) const CALL_SLACK_NS: u64 = 50_000_000;
/// How many blocks born after a fault may be the one whose header it wrote.
pub(super) const UNBORN_BIRTHS: u32 = 64;

/// How far below a heap block the allocator keeps its bookkeeping: glibc's chunk header
/// (previous size, size).
pub(super) const CHUNK_HEADER: u64 = 16;

/// Whether `addr` is where glibc's malloc writes bookkeeping while returning a block of `kind`
/// at `start` of `size` bytes: the chunk's header just below it or, splitting the free space,
/// the size field of what remains just past its chunk. Either can be the first touch of a
/// page, taken inside `malloc`; such a fault counts for the block the call returned.
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
