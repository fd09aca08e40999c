//! The program's heap backed by files of a directory (`record --backing-dir`, a series'
//! `pmem_dir`): Heimdallr's PMEM mode, where a DAX file system's files hold the allocations.
//!
//! With `FLTRACE_RT_BACKING_DIR` set (and no far-memory emulation, which serves the heap
//! itself), each process creates `heap-<pid>-<n>` in that directory, reserves address space,
//! and maps the file `MAP_SHARED` into it piece by piece as the heap grows, so the file grows
//! with the heap. The malloc family is served from there by talc; a block header before each
//! pointer keeps its span, as in `managed_malloc`.
//!
//! Whatever was allocated before the library's constructor ran (the dynamic linker's blocks)
//! stays with the program's own allocator, and ownership is decided by address: a pointer inside
//! the mapped file is ours, any other belongs to that allocator. A child forked without exec
//! would share the mapped file with its parent, so it copies the heap into a file of its own
//! before it goes on, while the parent waits (a fork costs a copy of the heap).
//!
//! The files stay when the process ends: whoever set the directory removes them (the series
//! runner does, unless asked to keep them).

use std::alloc::Layout;
use std::ffi::c_void;
use std::ptr::null_mut;
use std::sync::atomic::{AtomicI32, AtomicU8, AtomicUsize, Ordering::*};

use fltrace_runtime_abi::env;
use talc::source::Manual;

use crate::block_header::{HEADER, Header, header};
use crate::region::PAGE;
use crate::sys;

use crate::next_alloc;

/// Address space reserved for the heap: far more than a workload here uses, and costing
/// nothing until mapped.
const RESERVE: usize = 1 << 40;
/// The file grows by at least this much at a time.
const GROWTH: usize = 4 << 20;
/// Blocks at least this large are page aligned, and their pages are given back to the file
/// system (a hole punched) when freed.
const LARGE: usize = 64 * 1024;
const MAGIC: usize = 0xf17b_0000_0000_0000;

const OFF: u8 = 0;
const READY: u8 = 1;
/// A child forked without exec: the heap is its parent's too.
const FORKED: u8 = 2;

static STATE: AtomicU8 = AtomicU8::new(OFF);
/// Start of the reserved range; `MAPPED` bytes from it are mapped from the file.
static BASE: AtomicUsize = AtomicUsize::new(0);
static MAPPED: AtomicUsize = AtomicUsize::new(0);

type Talc = talc::base::Talc<Manual, talc::DefaultBinning>;

struct Heap {
    talc: Talc,
    /// The heap's end as talc knows it (0 before the first piece).
    end: usize,
    /// The backing file.
    fd: i32,
}

static HEAP: spinning_top::Spinlock<Heap> = spinning_top::Spinlock::new(Heap {
    talc: Talc::new(Manual),
    end: 0,
    fd: -1,
});

/// Whether the heap is file-backed in this process (new blocks come from the file).
pub fn serving() -> bool {
    STATE.load(Acquire) == READY
}

/// Whether `ptr` lies in the file-backed heap.
pub fn owns(ptr: *const c_void) -> bool {
    let base = BASE.load(Acquire);
    let addr = ptr as usize;
    base != 0 && addr >= base + HEADER && addr < base + MAPPED.load(Acquire)
}

fn block_layout(size: usize, align: usize) -> Option<(Layout, usize)> {
    let align = align.max(HEADER).checked_next_power_of_two()?;
    let align = if size >= LARGE {
        align.max(PAGE)
    } else {
        align
    };
    let total = align.checked_add(size.max(1))?;
    Some((Layout::from_size_align(total, align).ok()?, align))
}

/// Maps `len` more bytes of the file at the heap's end and hands them to talc.
fn grow(heap: &mut Heap, len: usize) -> bool {
    let base = BASE.load(Acquire);
    let mapped = MAPPED.load(Acquire);
    // Small blocks take a piece of GROWTH bytes; a larger block takes what it needs (talc
    // merges the free tail of the heap with the new piece).
    let Some(len) = len.checked_next_multiple_of(PAGE).map(|l| l.max(GROWTH)) else {
        return false;
    };
    if len > RESERVE - mapped {
        return false;
    }
    // Space is reserved in the file system now, so that a full one fails this allocation
    // rather than killing the program with SIGBUS on a later write (glibc writes the blocks
    // itself where the file system cannot preallocate).
    // SAFETY: a plain system call on our own descriptor.
    let sized = unsafe { libc::posix_fallocate(heap.fd, mapped as i64, len as i64) } == 0;
    if !sized {
        return false;
    }
    let prot = libc::PROT_READ | libc::PROT_WRITE;
    let flags = libc::MAP_SHARED | libc::MAP_FIXED;
    // SAFETY: `base + mapped .. + len` is inside our reservation, unused so far.
    let piece = unsafe { sys::map(base + mapped, len, prot, flags, heap.fd, mapped) };
    if piece.is_null() {
        return false;
    }
    if heap.end == 0 {
        // SAFETY: the mapped piece is the allocator's for the rest of the process.
        match unsafe { heap.talc.claim(piece, len) } {
            Some(end) => heap.end = end.as_ptr() as usize,
            None => return false,
        }
    } else if let Some(end) = std::ptr::NonNull::new(heap.end as *mut u8) {
        // SAFETY: the heap ends at `end`; the new piece continues it contiguously.
        heap.end = unsafe { heap.talc.extend(end, piece.add(len)) }.as_ptr() as usize;
    }
    MAPPED.store(mapped + len, Release);
    true
}

/// A block of the file-backed heap, or null (ENOMEM) when the file cannot grow.
fn allocate(size: usize, align: usize) -> *mut u8 {
    let Some((layout, offset)) = block_layout(size, align) else {
        return null_mut();
    };
    let mut heap = HEAP.lock();
    let block = loop {
        // SAFETY: the layout has a non-zero size.
        if let Some(block) = unsafe { heap.talc.allocate(layout) } {
            break block.as_ptr();
        }
        // Room for the block, its alignment and talc's bookkeeping in one piece.
        let want = layout.size() + layout.align() + PAGE;
        if !grow(&mut heap, want) {
            drop(heap);
            set_enomem();
            return null_mut();
        }
    };
    drop(heap);
    // SAFETY: `block + offset` is inside the block, its header before it.
    let ptr = unsafe { block.add(offset) };
    // SAFETY: as above.
    unsafe {
        header(ptr).write(Header {
            offset: offset | MAGIC,
            usable: size,
        })
    };
    ptr
}

fn set_enomem() {
    // SAFETY: the thread's errno location is always valid.
    unsafe { *libc::__errno_location() = libc::ENOMEM };
}

/// Usable bytes of a block of ours (0 for a pointer that is not one).
///
/// # Safety
/// `ptr` must be a live block of ours.
pub unsafe fn usable_size(ptr: *mut c_void) -> usize {
    let ptr = ptr.cast::<u8>();
    // SAFETY: guaranteed by the caller.
    let header = unsafe { &*header(ptr) };
    if header.offset & !0xffff_ffff == MAGIC {
        header.usable
    } else {
        0
    }
}

/// Gives a block of ours back.
///
/// # Safety
/// `ptr` must be a live block of ours.
unsafe fn release(ptr: *mut u8) {
    if STATE.load(Acquire) == FORKED {
        // The block is the parent's too.
        return;
    }
    // SAFETY: guaranteed by the caller.
    let Header { offset, usable } = unsafe { header(ptr).read() };
    if offset & !0xffff_ffff != MAGIC {
        return;
    }
    let offset = offset & 0xffff_ffff;
    if usable >= LARGE {
        // Punch the whole pages out of the file; talc's own tags lie past the usable bytes.
        let start = (ptr as usize).next_multiple_of(PAGE);
        let end = (ptr as usize + usable) & !(PAGE - 1);
        if end > start {
            sys::madvise(start, end - start, libc::MADV_REMOVE);
        }
    }
    // SAFETY: clearing the tag so that a double free is not taken for a block.
    unsafe { (*header(ptr)).offset = 0 };
    let Some((layout, _)) = block_layout(usable, offset) else {
        return;
    };
    // SAFETY: the block was allocated with this layout (recomputed from its header).
    unsafe { HEAP.lock().talc.deallocate(ptr.sub(offset), layout) };
}

/// `malloc`: from the file when it backs the heap, else from the program's own allocator.
///
/// # Safety
/// C's contract.
pub unsafe fn malloc(size: usize) -> *mut c_void {
    if serving() {
        allocate(size, HEADER).cast()
    } else {
        // SAFETY: C's contract.
        unsafe { next_alloc::malloc(size) }
    }
}

/// `free` of either allocator's block.
///
/// # Safety
/// C's contract: `ptr` is a live block.
pub unsafe fn free(ptr: *mut c_void) {
    if owns(ptr) {
        // SAFETY: a live block of ours.
        unsafe { release(ptr.cast()) }
    } else {
        // SAFETY: C's contract.
        unsafe { next_alloc::free(ptr) }
    }
}

/// `calloc`.
///
/// # Safety
/// C's contract.
pub unsafe fn calloc(count: usize, size: usize) -> *mut c_void {
    if !serving() {
        // SAFETY: C's contract.
        return unsafe { next_alloc::calloc(count, size) };
    }
    let Some(total) = count.checked_mul(size) else {
        set_enomem();
        return null_mut();
    };
    let ptr = allocate(total, HEADER);
    if !ptr.is_null() {
        // Reused blocks hold old data; fresh file pages are zeros already, but telling them
        // apart costs more than clearing.
        // SAFETY: the block has `total` bytes.
        unsafe { std::ptr::write_bytes(ptr, 0, total) };
    }
    ptr.cast()
}

/// `realloc` of either allocator's block: a block of the C library stays with it.
///
/// # Safety
/// C's contract.
pub unsafe fn realloc(ptr: *mut c_void, size: usize) -> *mut c_void {
    if ptr.is_null() {
        // SAFETY: C's contract.
        return unsafe { malloc(size) };
    }
    if !owns(ptr) {
        // SAFETY: C's contract: a live block of the C library.
        return unsafe { next_alloc::realloc(ptr, size) };
    }
    if size == 0 {
        // SAFETY: a live block of ours.
        unsafe { release(ptr.cast()) };
        return null_mut();
    }
    // SAFETY: a live block of ours.
    let usable = unsafe { usable_size(ptr) };
    if size <= usable && size >= usable / 2 && serving() {
        return ptr;
    }
    // SAFETY: C's contract (in a forked child the new block comes from the C library).
    let new = unsafe { malloc(size) };
    if !new.is_null() {
        // SAFETY: both blocks hold at least the copied bytes and do not overlap.
        unsafe {
            std::ptr::copy_nonoverlapping(ptr.cast::<u8>(), new.cast::<u8>(), usable.min(size));
            release(ptr.cast());
        }
    }
    new
}

/// `memalign` (the caller checked that `align` is a power of two).
///
/// # Safety
/// C's contract.
pub unsafe fn memalign(align: usize, size: usize) -> *mut c_void {
    if serving() {
        allocate(size, align).cast()
    } else {
        // SAFETY: C's contract.
        unsafe { next_alloc::memalign(align, size) }
    }
}

/// `valloc`.
///
/// # Safety
/// C's contract.
pub unsafe fn valloc(size: usize) -> *mut c_void {
    if serving() {
        allocate(size, PAGE).cast()
    } else {
        // SAFETY: C's contract.
        unsafe { next_alloc::valloc(size) }
    }
}

/// `pvalloc`.
///
/// # Safety
/// C's contract.
pub unsafe fn pvalloc(size: usize) -> *mut c_void {
    if serving() {
        allocate(size.div_ceil(PAGE).max(1) * PAGE, PAGE).cast()
    } else {
        // SAFETY: C's contract.
        unsafe { next_alloc::pvalloc(size) }
    }
}

/// The pipe through which a forked child tells its parent that it has copied the heap.
static FORK_PIPE: [AtomicI32; 2] = [AtomicI32::new(-1), AtomicI32::new(-1)];

/// Before fork: the heap is locked, so that the child copies it whole and consistent.
extern "C" fn before_fork() {
    if STATE.load(Acquire) != READY {
        return;
    }
    let mut fds = [-1; 2];
    if sys::pipe_cloexec(&mut fds) {
        FORK_PIPE[0].store(fds[0], Relaxed);
        FORK_PIPE[1].store(fds[1], Relaxed);
    }
    std::mem::forget(HEAP.lock());
}

/// In the parent: waits until the child has its own copy of the heap (or is gone), since
/// until then the child reads the file the parent writes.
extern "C" fn after_fork_parent() {
    if STATE.load(Acquire) != READY {
        return;
    }
    let (read_end, write_end) = (
        FORK_PIPE[0].swap(-1, Relaxed),
        FORK_PIPE[1].swap(-1, Relaxed),
    );
    if read_end >= 0 {
        let mut byte = 0u8;
        // SAFETY: our own descriptors; the read ends when the child writes or exits.
        unsafe {
            libc::close(write_end);
            while libc::read(read_end, (&raw mut byte).cast(), 1) < 0 && errno() == libc::EINTR {}
            libc::close(read_end);
        }
    }
    // SAFETY: `before_fork` left the lock held by this thread.
    unsafe { HEAP.force_unlock() };
}

/// In the child: the shared file is the parent's heap, so the child copies it into a file of
/// its own and maps that in its place; if it cannot, into private memory, and its new blocks
/// come from the C library from then on.
extern "C" fn after_fork_child() {
    if STATE.load(Acquire) != READY {
        return;
    }
    let base = BASE.load(Acquire);
    let mapped = MAPPED.load(Acquire);
    let own = sys::env_bytes(env::BACKING_DIR).and_then(|dir| copy_to_new_file(dir, base, mapped));
    if let Some(fd) = own {
        let mut heap_fd = fd;
        // SAFETY: the lock is held by this thread since `before_fork`; swapping descriptors.
        unsafe {
            std::mem::swap(&mut (*HEAP.data_ptr()).fd, &mut heap_fd);
            libc::close(heap_fd);
        }
    } else {
        STATE.store(FORKED, Release);
        if mapped > 0 {
            copy_to_private(base, mapped);
        }
    }
    let (read_end, write_end) = (
        FORK_PIPE[0].swap(-1, Relaxed),
        FORK_PIPE[1].swap(-1, Relaxed),
    );
    if write_end >= 0 {
        // SAFETY: our own descriptors.
        unsafe {
            libc::close(read_end);
            libc::write(write_end, b"x".as_ptr().cast(), 1);
            libc::close(write_end);
        }
    }
    // SAFETY: `before_fork` left the lock held by the forking thread, which is this one.
    unsafe { HEAP.force_unlock() };
}

/// A new backing file holding the heap's bytes, mapped over the heap; its descriptor.
fn copy_to_new_file(dir: &[u8], base: usize, mapped: usize) -> Option<i32> {
    let fd = create_file(dir).ok()?;
    let mut done = 0;
    while done < mapped {
        // SAFETY: reading from the mapped heap into our own file.
        let n = unsafe { libc::write(fd, (base + done) as *const c_void, mapped - done) };
        if n <= 0 {
            if n < 0 && errno() == libc::EINTR {
                continue;
            }
            // SAFETY: our own descriptor.
            unsafe { libc::close(fd) };
            return None;
        }
        done += n as usize;
    }
    if mapped > 0 {
        let prot = libc::PROT_READ | libc::PROT_WRITE;
        // SAFETY: replacing the heap's mapping by the same bytes from the new file.
        let piece = unsafe {
            sys::map(
                base,
                mapped,
                prot,
                libc::MAP_SHARED | libc::MAP_FIXED,
                fd,
                0,
            )
        };
        if piece.is_null() {
            // SAFETY: our own descriptor.
            unsafe { libc::close(fd) };
            return None;
        }
    }
    Some(fd)
}

/// Moves a private copy of the heap's bytes over the heap.
/// A child that cannot get its own copy must not run on: its writes would land in the
/// parent's heap.
fn copy_to_private(base: usize, mapped: usize) {
    let copy = sys::map_anonymous(mapped, 0);
    // SAFETY: both ranges hold `mapped` bytes and do not overlap; mremap moves the copy's
    // pages over the heap's mapping.
    let moved = !copy.is_null()
        && unsafe {
            std::ptr::copy_nonoverlapping(base as *const u8, copy, mapped);
            libc::syscall(
                libc::SYS_mremap,
                copy,
                mapped,
                mapped,
                libc::MREMAP_MAYMOVE | libc::MREMAP_FIXED,
                base,
            )
        } == base as i64;
    if !moved {
        sys::write_stderr(&[
            b"fltrace: a forked child could not copy the file-backed heap; it exits rather than write into its parent's\n",
        ]);
        // SAFETY: ends this (child) process at once, as nothing of it may run on.
        unsafe { libc::_exit(127) };
    }
}

fn warn(dir: &[u8], what: &[u8], errno: i32) {
    let mut code = [0; 20];
    sys::write_stderr(&[
        b"fltrace: backing directory ",
        dir,
        b": ",
        what,
        b" (errno ",
        sys::decimal(errno as u64, &mut code),
        b"): the heap stays in memory\n",
    ]);
}

fn errno() -> i32 {
    std::io::Error::last_os_error().raw_os_error().unwrap_or(0)
}

/// Creates `DIR/heap-<pid>-<n>` with the first free n.
fn create_file(dir: &[u8]) -> Result<i32, (&'static [u8], i32)> {
    let mut digits = [0; 20];
    // SAFETY: getpid has no preconditions.
    let pid = unsafe { libc::getpid() } as u64;
    // An exec keeps the pid, and the file of the image before it stays: number them.
    for n in 0..1000u64 {
        let mut path = [0u8; 4096];
        let mut len = 0;
        let mut n_digits = [0; 20];
        let parts: [&[u8]; 5] = [
            dir,
            b"/heap-",
            sys::decimal(pid, &mut digits),
            b"-",
            sys::decimal(n, &mut n_digits),
        ];
        for part in parts {
            if len + part.len() >= path.len() {
                return Err((b"the path is too long", libc::ENAMETOOLONG));
            }
            path[len..len + part.len()].copy_from_slice(part);
            len += part.len();
        }
        // The heap is the process's memory: only its owner may read it.
        // SAFETY: `path` is NUL-terminated (zeroed beyond `len`).
        let fd = unsafe {
            libc::open(
                path.as_ptr().cast(),
                libc::O_RDWR | libc::O_CREAT | libc::O_EXCL | libc::O_CLOEXEC | libc::O_NOFOLLOW,
                0o600,
            )
        };
        if fd >= 0 {
            return Ok(fd);
        }
        if errno() != libc::EEXIST {
            break;
        }
    }
    Err((b"cannot create the heap's file", errno()))
}

/// Creates the backing file and reserves the address range, once, when the library loads.
fn start() {
    let Some(dir) = sys::env_bytes(env::BACKING_DIR).filter(|d| !d.is_empty()) else {
        return;
    };
    if crate::far_memory() {
        sys::write_stderr(&[
            b"fltrace: far-memory emulation serves the heap: the backing directory is not used\n",
        ]);
        return;
    }
    let fd = match create_file(dir) {
        Ok(fd) => fd,
        Err((what, code)) => {
            warn(dir, what, code);
            return;
        }
    };
    let flags = libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE;
    // SAFETY: a fresh reservation at no fixed address.
    let base = unsafe { sys::map(0, RESERVE, libc::PROT_NONE, flags, -1, 0) };
    if base.is_null() {
        warn(dir, b"cannot reserve address space", errno());
        // SAFETY: closing our own descriptor.
        unsafe { libc::close(fd) };
        return;
    }
    HEAP.lock().fd = fd;
    BASE.store(base as usize, Release);
    // Before READY: whatever pthread_atfork allocates comes from the C library.
    // SAFETY: registering a plain function.
    unsafe {
        libc::pthread_atfork(
            Some(before_fork),
            Some(after_fork_parent),
            Some(after_fork_child),
        )
    };
    STATE.store(READY, Release);
}

/// Sets the heap up when the library is loaded, before `main`.
#[used]
#[unsafe(link_section = ".init_array")]
static INIT: extern "C" fn() = {
    extern "C" fn init() {
        start();
    }
    init
};
