//! The malloc family, served from the managed region.
//!
//! glibc's malloc takes its memory with internal `brk` and `mmap` calls that cannot be
//! interposed, so the runtime replaces the allocator: blocks come from talc over the region.
//! Each block carries a 16-byte header just before the pointer handed out (its span and
//! alignment), since C's `free` is not told the size. Blocks of 64 KiB and more are page
//! aligned, so their pages are whole. A freed block's pages stay mapped while local memory has
//! room, as a program's allocator keeps freed memory (so reusing it costs no fault); under the
//! limit they are discarded on free (they read as zeros and cost no local memory afterwards).
//! Blocks below 64 KiB are rounded up to jemalloc's size classes (their usable size says so,
//! as jemalloc's does): with exact sizes, a buffer grown by steps left holes that long-lived
//! blocks split (redis with 1000-byte values touched 1.3x the pages it does under jemalloc).
//!
//! Blocks below 64 KiB come from pools, one per doubling of the size class, each taking chunks
//! of the region: a freed block is reused by blocks of about its size, never split for others
//! (as jemalloc's slabs keep classes apart). A pool keeps its chunks for good.
//!
//! Until the region exists (the dynamic linker and `pthread_create` allocate while the runtime
//! starts), and for the handler threads (which must never fault on the region they serve),
//! blocks come from a static bootstrap arena and are never freed.

use std::alloc::Layout;
use std::ptr::null_mut;
use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};

use talc::source::Manual;

use crate::block_header::{HEADER, Header, header};
use crate::region::PAGE;
use crate::{region, sys};

/// Blocks at least this large are page aligned.
pub const LARGE: usize = 64 * 1024;
/// `calloc` blocks at least this large read as fresh zero pages (glibc's mmap threshold).
const CALLOC_FRESH: usize = 128 * 1024;
const MAGIC: usize = 0xf17a_0000_0000_0000;

type Talc = talc::base::Talc<Manual, talc::DefaultBinning>;

/// Large blocks, and the chunks the pools take.
static TALC: spinning_top::Spinlock<Talc> = spinning_top::Spinlock::new(Talc::new(Manual));

/// Pools of blocks below [`LARGE`], one per doubling of the size class: a freed block is
/// reused by blocks of about its size and never split for another size, as jemalloc's slabs
/// keep each class apart. In one heap, long-lived small blocks landed in the holes that
/// freed buffers of other sizes left, and every buffer then took fresh pages (redis with
/// 1000-byte values: 1.03x-1.25x the faults it takes under jemalloc).
const POOL_COUNT: usize = 10;

/// Words of a pool's talc metadata (its free lists' heads), kept in the pool's static
/// `meta`: outside the region, the heads of pools whose chunks the limit evicted cost no
/// fetch.
const POOL_META_WORDS: usize = talc::min_first_heap_size::<talc::DefaultBinning>() / 8 + 1;

struct Pool {
    talc: Talc,
    meta: [usize; POOL_META_WORDS],
    /// Chunks taken so far.
    chunks: u32,
}

/// What the large blocks' heap keeps after each block (its tag, rounded to its unit): a chunk
/// asks for this much less than its pages, so that the tag does not spill onto a page of its
/// own and the next chunk can start on the next page.
const CHUNK_TAIL: usize = talc::base::CHUNK_UNIT;

static POOLS: [spinning_top::Spinlock<Pool>; POOL_COUNT] = [const {
    spinning_top::Spinlock::new(Pool {
        talc: Talc::new(Manual),
        meta: [0; POOL_META_WORDS],
        chunks: 0,
    })
}; POOL_COUNT];

/// The pools of the C library's own blocks below [`LARGE`] (its stdio buffers and `FILE`s,
/// its directory streams), whose chunks are kept local (`Region::make_local`) when faults are
/// served in the thread: the C library hands them to the kernel from calls no wrapper
/// reaches, and the kernel's access to a missing page would fail there. Their chunks are
/// small (a block's class twice, at least 16 KiB), within an eighth of the limit in all;
/// beyond it the C library's blocks come from the program's pools.
static LOCAL_POOLS: [spinning_top::Spinlock<Pool>; POOL_COUNT] = [const {
    spinning_top::Spinlock::new(Pool {
        talc: Talc::new(Manual),
        meta: [0; POOL_META_WORDS],
        chunks: 0,
    })
}; POOL_COUNT];

/// The chunk a pool of the C library's blocks takes: two of its largest blocks, at least
/// 16 KiB.
fn local_chunk_bytes(pool: usize) -> usize {
    (2 * (128 << pool)).max(16 << 10)
}

/// The pool of a block of `total` bytes (its size class), if below [`LARGE`].
fn pool_of(total: usize) -> Option<usize> {
    if total >= LARGE {
        return None;
    }
    if total <= 128 {
        return Some(0);
    }
    // 129..=256 is pool 1, ..., 32769..65535 pool 9.
    Some((usize::BITS - (total - 1).leading_zeros()) as usize - 7)
}

/// Bytes of a pool's first chunk of the region, and the most it takes at a time: chunks
/// double as the pool grows (a small program's few blocks take little of `-M`), and large ones
/// keep a server's classes apart from its large blocks (with 128 KiB chunks between them,
/// redis with 1000-byte values took 1.05x the faults it takes under jemalloc, 1.00x with
/// 1 MiB ones).
const FIRST_CHUNK: usize = 2 * LARGE;
const MAX_CHUNK: usize = 16 * LARGE;

/// The chunk a pool takes after `chunks` chunks.
fn chunk_bytes(chunks: u32) -> usize {
    (FIRST_CHUNK << chunks.min(16)).min(MAX_CHUNK)
}

#[repr(C, align(4096))]
struct Arena([u8; 1 << 20]);
static mut ARENA: Arena = Arena([0; 1 << 20]);
static ARENA_USED: AtomicUsize = AtomicUsize::new(0);

fn arena_range() -> (usize, usize) {
    let base = (&raw const ARENA) as usize;
    (base, base + (1 << 20))
}

/// Gives the region to the allocator.
///
/// # Safety
/// `base..base+len` must be memory the allocator may own for the rest of the process.
pub unsafe fn claim(base: usize, len: usize) -> bool {
    // SAFETY: guaranteed by the caller.
    unsafe { TALC.lock().claim(base as *mut u8, len) }.is_some()
}

/// A block's size rounded up to its size class, four classes per doubling as jemalloc's:
/// a freed block fits the next request of its class exactly, so a program that grows a
/// buffer by steps (redis's list nodes, 1 KiB to 8 KiB by reallocation) reuses the steps'
/// blocks rather than splitting and scattering them.
fn size_class(total: usize) -> Option<usize> {
    if total <= 128 {
        return total.checked_next_multiple_of(HEADER);
    }
    let step = 1 << ((usize::BITS - 1 - (total - 1).leading_zeros()) - 2);
    total.checked_next_multiple_of(step)
}

fn block_layout(size: usize, align: usize) -> Option<(Layout, usize)> {
    let align = align.max(HEADER).next_power_of_two();
    let align = if size >= LARGE {
        align.max(PAGE)
    } else {
        align
    };
    let offset = align.max(HEADER);
    let total = offset.checked_add(size.max(1))?;
    let total = if total < LARGE {
        size_class(total)?
    } else {
        total
    };
    Some((Layout::from_size_align(total, align).ok()?, offset))
}

fn arena_alloc(size: usize, align: usize) -> *mut u8 {
    let Some((layout, offset)) = block_layout(size, align) else {
        return null_mut();
    };
    let (base, end) = arena_range();
    let mut used = ARENA_USED.load(Relaxed);
    loop {
        let start = (base + used + layout.align() - 1) & !(layout.align() - 1);
        let next = start + layout.size() - base;
        if start + layout.size() > end {
            return null_mut();
        }
        match ARENA_USED.compare_exchange(used, next, Relaxed, Relaxed) {
            Ok(_) => {
                let ptr = (start + offset) as *mut u8;
                // SAFETY: the header lies inside the block just reserved.
                unsafe {
                    header(ptr).write(Header {
                        offset: offset | MAGIC,
                        usable: layout.size() - offset,
                    })
                };
                return ptr;
            }
            Err(now) => used = now,
        }
    }
}

/// Allocates `size` bytes aligned to `align`. Null when the size is absurd; exits with a clear
/// message when the region of `-M` MB is exhausted.
pub fn allocate(size: usize, align: usize) -> *mut u8 {
    allocate_for(size, align, false)
}

/// [`allocate`], for the C library itself when `for_libc` (its block is kept local where
/// faults are served in the thread, see [`LOCAL_POOLS`]).
pub fn allocate_for(size: usize, align: usize, for_libc: bool) -> *mut u8 {
    let region = crate::region_ready().filter(|_| !crate::on_handler_thread());
    let Some(region) = region else {
        return arena_alloc(size, align);
    };
    let Some((layout, offset)) = block_layout(size, align) else {
        return null_mut();
    };
    let local = (for_libc && region.in_thread())
        .then(|| allocate_local_block(region, layout))
        .flatten();
    let Some(base) = local.or_else(|| allocate_block(layout)) else {
        out_of_memory(region, size);
    };
    let committed = crate::placement::committed_bytes();
    if committed > 0 {
        // Memory committed in reservations counts against -M with the heap's blocks.
        let shared = region.shared();
        let live = shared
            .memory_allocd
            .load(Relaxed)
            .saturating_sub(shared.memory_freed.load(Relaxed)) as usize;
        if live + layout.size() + committed > region.heap_pages * PAGE {
            out_of_memory(region, size);
        }
    }
    // SAFETY: `base + offset` is inside the block, its header before it.
    let ptr = unsafe { base.add(offset) };
    // SAFETY: as above.
    unsafe {
        header(ptr).write(Header {
            offset: offset | MAGIC,
            usable: layout.size() - offset,
        })
    };
    if size >= PAGE && !region.has_room(size) {
        // Freed memory kept while there was room may since have been evicted: under the
        // limit a block's whole pages start as fresh zero pages, not fetches of what a
        // freed block left there.
        region.discard(ptr as usize, size);
    }
    region
        .shared()
        .memory_allocd
        .fetch_add((layout.size() - offset) as u64, Relaxed);
    ptr
}

/// A block of `layout` from its pool, or from the large blocks' heap.
fn allocate_block(layout: Layout) -> Option<*mut u8> {
    let Some(index) = pool_of(layout.size()) else {
        // SAFETY: the layout has a non-zero size.
        return unsafe { TALC.lock().allocate(layout) }.map(|b| b.as_ptr());
    };
    let mut pool = POOLS[index].lock();
    if pool.talc.is_metadata_established() {
        // SAFETY: as above.
        if let Some(block) = unsafe { pool.talc.allocate(layout) } {
            return Some(block.as_ptr());
        }
    } else {
        let meta = (&raw mut pool.meta).cast::<u8>();
        // SAFETY: the pool's own static words, given to its talc for good (under its lock).
        unsafe { pool.talc.claim(meta, POOL_META_WORDS * 8) }?;
    }
    // The pool's lock before the large heap's, always (and so across fork).
    // Near the end of `-M`, a smaller chunk than the pool's next may still fit.
    let mut chunk = chunk_bytes(pool.chunks);
    let base = loop {
        // SAFETY: a page-aligned layout of non-zero size.
        let block = unsafe {
            TALC.lock()
                .allocate(Layout::from_size_align(chunk - CHUNK_TAIL, PAGE).ok()?)
        };
        match block {
            Some(block) => break block.as_ptr(),
            None if chunk > FIRST_CHUNK => chunk /= 2,
            None => return None,
        }
    };
    pool.chunks += 1;
    // SAFETY: a block of the region, the pool's for good.
    unsafe { pool.talc.claim(base, chunk - CHUNK_TAIL) }?;
    // SAFETY: as above.
    unsafe { pool.talc.allocate(layout) }.map(|b| b.as_ptr())
}

/// A block of `layout` from the C library's local pools, if it is below [`LARGE`] and its
/// pool has room or may take a chunk kept local.
fn allocate_local_block(region: &region::Region, layout: Layout) -> Option<*mut u8> {
    let index = pool_of(layout.size())?;
    let mut pool = LOCAL_POOLS[index].lock();
    if pool.talc.is_metadata_established() {
        // SAFETY: the layout has a non-zero size.
        if let Some(block) = unsafe { pool.talc.allocate(layout) } {
            return Some(block.as_ptr());
        }
    } else {
        let meta = (&raw mut pool.meta).cast::<u8>();
        // SAFETY: the pool's own static words, given to its talc for good (under its lock).
        unsafe { pool.talc.claim(meta, POOL_META_WORDS * 8) }?;
    }
    let chunk = local_chunk_bytes(index);
    // SAFETY: a page-aligned layout of non-zero size.
    let base = unsafe {
        TALC.lock()
            .allocate(Layout::from_size_align(chunk - CHUNK_TAIL, PAGE).ok()?)
    }?
    .as_ptr();
    if !region.make_local(base as usize, chunk - CHUNK_TAIL) {
        // Over the share kept local: the block comes from the program's pools.
        // SAFETY: just allocated with this layout.
        unsafe {
            TALC.lock().deallocate(
                base,
                Layout::from_size_align(chunk - CHUNK_TAIL, PAGE).ok()?,
            )
        };
        return None;
    }
    pool.chunks += 1;
    // SAFETY: a block of the region, the pool's for good.
    unsafe { pool.talc.claim(base, chunk - CHUNK_TAIL) }?;
    // SAFETY: as above.
    unsafe { pool.talc.allocate(layout) }.map(|b| b.as_ptr())
}

fn out_of_memory(region: &region::Region, size: usize) -> ! {
    region.shared().m_exhausted.store(1, Relaxed);
    let mut mb = [0; 20];
    let mut want = [0; 20];
    sys::write_stderr(&[
        b"fltrace: out of far memory: no room for a block of ",
        sys::decimal(size as u64, &mut want),
        b" bytes within -M ",
        sys::decimal((region.heap_pages * PAGE / (1 << 20)) as u64, &mut mb),
        b" MB; raise -M\n",
    ]);
    // SAFETY: ending the process at once is the documented behaviour.
    unsafe { libc::_exit(12) }
}

/// Whether `ptr` is a block of ours.
pub fn owns(ptr: *mut u8) -> bool {
    let addr = ptr as usize;
    let (arena_base, arena_end) = arena_range();
    let in_arena = addr >= arena_base + HEADER && addr < arena_end;
    let in_region = crate::region_any().is_some_and(|r| r.contains(addr));
    // SAFETY: a pointer in one of our ranges has a readable header before it.
    (in_arena || in_region) && unsafe { (*header(ptr)).offset } & !0xffff_ffff == MAGIC
}

/// Usable bytes of a block.
///
/// # Safety
/// `ptr` must be a live block of ours.
pub unsafe fn usable_size(ptr: *mut u8) -> usize {
    // SAFETY: guaranteed by the caller.
    unsafe { (*header(ptr)).usable }
}

/// Frees a block.
///
/// # Safety
/// `ptr` must be a live block of ours.
pub unsafe fn free(ptr: *mut u8) {
    let (arena_base, arena_end) = arena_range();
    if (ptr as usize) >= arena_base && (ptr as usize) < arena_end {
        return;
    }
    // SAFETY: guaranteed by the caller.
    let Header { offset, usable } = unsafe { header(ptr).read() };
    let offset = offset & 0xffff_ffff;
    let Some(region) = crate::region_any() else {
        return;
    };
    if usable >= PAGE {
        // Pages the program made other than read-write are the heap's again.
        crate::placement::before_reuse(ptr, usable);
    }
    if usable >= PAGE && !region.has_room(usable) {
        // Under the limit its pages go back rather than some live page being evicted. Before
        // the block is given back: afterwards another thread may own it.
        region.discard(ptr as usize, usable);
    }
    // SAFETY: the header clears the tag so a double free is not taken for a block.
    unsafe { (*header(ptr)).offset = 0 };
    let align = if usable >= LARGE {
        offset.max(PAGE)
    } else {
        offset
    };
    let Some((layout, _)) = block_layout(usable, align) else {
        return;
    };
    let base = ptr.wrapping_sub(offset);
    // A block of a local chunk goes back to its local pool.
    let pools = if region.is_local_addr(base as usize) {
        &LOCAL_POOLS
    } else {
        &POOLS
    };
    match pool_of(layout.size()) {
        // SAFETY: the block was allocated from this pool with this layout (both recomputed
        // from the header).
        Some(index) => unsafe { pools[index].lock().talc.deallocate(base, layout) },
        // SAFETY: as above, from the large blocks' heap.
        None => unsafe { TALC.lock().deallocate(base, layout) },
    }
    region
        .shared()
        .memory_freed
        .fetch_add(usable as u64, Relaxed);
}

/// `calloc`: zeroed memory. The whole pages of a large block are discarded rather than
/// written, so that zeroing costs no faults; only partial pages at the ends are cleared by hand.
/// For the C library itself when `for_libc` (see [`allocate_for`]).
pub fn allocate_zeroed_for(size: usize, for_libc: bool) -> *mut u8 {
    let ptr = allocate_for(size, HEADER, for_libc);
    if ptr.is_null() {
        return ptr;
    }
    match crate::region_ready() {
        // Large blocks are fresh memory to glibc (mmap'd chunks, never cleared), and smaller
        // ones freed memory it clears by hand: discarding the latter would cost a fault per
        // page the program then touches, which it does not pay untraced.
        Some(region) if size >= CALLOC_FRESH && region.contains(ptr as usize) => {
            let start = ptr as usize;
            let first_page = (start + PAGE - 1) & !(PAGE - 1);
            let last_page = (start + size) & !(PAGE - 1);
            region.discard(start, size);
            // SAFETY: both ranges are inside the block.
            unsafe {
                std::ptr::write_bytes(ptr, 0, first_page - start);
                std::ptr::write_bytes(last_page as *mut u8, 0, start + size - last_page);
            }
        }
        // SAFETY: the block has `size` bytes.
        _ => unsafe { std::ptr::write_bytes(ptr, 0, size) },
    }
    ptr
}

/// `realloc`, for the C library itself when `for_libc` (see [`allocate_for`]).
///
/// # Safety
/// `ptr` must be null or a live block of ours.
pub unsafe fn reallocate_for(ptr: *mut u8, size: usize, for_libc: bool) -> *mut u8 {
    if ptr.is_null() {
        return allocate_for(size, HEADER, for_libc);
    }
    // SAFETY: guaranteed by the caller.
    let usable = unsafe { usable_size(ptr) };
    if size <= usable && size >= usable / 2 && crate::region_ready().is_some() {
        return ptr;
    }
    let new = allocate_for(size, HEADER, for_libc);
    if !new.is_null() {
        // SAFETY: both blocks hold at least the copied length; they do not overlap.
        unsafe { std::ptr::copy_nonoverlapping(ptr, new, usable.min(size)) };
        // SAFETY: guaranteed by the caller.
        unsafe { free(ptr) };
    }
    new
}

/// Locks the allocator across fork, so the child does not inherit it locked by a thread that
/// does not exist there.
pub fn lock_for_fork() {
    for pool in LOCAL_POOLS.iter().chain(&POOLS) {
        std::mem::forget(pool.lock());
    }
    std::mem::forget(TALC.lock());
}

/// Unlocks after fork (in parent and child).
pub fn unlock_after_fork() {
    // SAFETY: `lock_for_fork` left the lock held by this thread, which now releases it.
    unsafe { TALC.force_unlock() };
    for pool in LOCAL_POOLS.iter().chain(&POOLS) {
        // SAFETY: as above.
        unsafe { pool.force_unlock() };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// jemalloc's classes where redis's blocks fall: a 1000-byte value (1,006 bytes of sds and
    /// our 16-byte header), a full list node, a 16 KiB reply chunk; a class is its own class,
    /// and a block's usable bytes give back its layout when it is freed.
    #[test]
    fn blocks_round_up_to_jemallocs_classes() {
        assert_eq!(size_class(1022), Some(1024));
        assert_eq!(size_class(1030), Some(1280));
        assert_eq!(size_class(8056), Some(8192));
        assert_eq!(size_class(16_416), Some(20_480));
        assert_eq!(size_class(40), Some(48));
        for total in 1..LARGE {
            let class = size_class(total).expect("a class");
            assert!(
                class >= total && class <= total + total / 4 + HEADER,
                "{total}"
            );
            assert_eq!(size_class(class), Some(class), "{total}");
        }
        for size in [1, 100, 1006, 8040, 16_400, 60_000, LARGE, 1 << 20] {
            let (layout, offset) = block_layout(size, HEADER).expect("a layout");
            let usable = layout.size() - offset;
            assert!(usable >= size);
            assert_eq!(block_layout(usable, offset).map(|l| l.0), Some(layout));
        }
    }

    /// Each pool holds one doubling of classes (a value's 1,024 and 1,280-byte blocks go to
    /// different pools), every class below LARGE has one, and a pool's first chunk holds two of
    /// its largest blocks; chunks double up to MAX_CHUNK.
    #[test]
    fn pools_hold_one_doubling_each() {
        assert_eq!(pool_of(16), Some(0));
        assert_eq!(pool_of(128), Some(0));
        assert_eq!(pool_of(144), Some(1));
        assert_eq!(pool_of(1024), Some(3));
        assert_eq!(pool_of(1280), Some(4));
        assert_eq!(pool_of(LARGE - 4096), Some(POOL_COUNT - 1));
        assert_eq!(pool_of(LARGE), None);
        assert_eq!(chunk_bytes(0), 128 << 10);
        assert_eq!(chunk_bytes(1), 256 << 10);
        assert_eq!(chunk_bytes(3), 1 << 20);
        assert_eq!(chunk_bytes(60), 1 << 20);
        assert_eq!(chunk_bytes(u32::MAX), 1 << 20);
        for total in 1..LARGE {
            let class = size_class(total).expect("a class");
            let Some(pool) = pool_of(class) else {
                assert!(class >= LARGE, "{total}");
                continue;
            };
            assert!(pool < POOL_COUNT, "{class}");
            assert!(class <= 128 << pool, "{class}");
            assert!(pool == 0 || class > 64 << pool, "{class}");
            // The first chunk holds a block of the pool's largest class with room to spare.
            assert!(chunk_bytes(0) >= 2 * (128 << pool), "{pool}");
        }
    }
}
