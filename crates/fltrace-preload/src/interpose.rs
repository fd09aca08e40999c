//! The exported C functions that replace the C library's: the malloc family, the mapping
//! calls and `brk`/`sbrk`.
//!
//! With far memory on (`-L/-M`), the malloc family is served from the managed region; without
//! it, by the C library's own allocator (`__libc_malloc` and friends, which glibc exports for
//! exactly this). With `--allocs`, every call is also handed to the tracer.

use std::ffi::c_void;

use fltrace_runtime_abi::alloclog::call;

use crate::alloc_tracer;
use crate::managed_malloc::{self, LARGE};
use crate::placement;
use crate::region::PAGE;
use crate::{far_memory, region_any, region_ready};

// Without far memory the malloc family goes to `backed`: the C library's allocator, or files
// of a backing directory when one is set.
use crate::backed;
use crate::next_alloc;

unsafe extern "C" {
    fn __sbrk(increment: isize) -> *mut c_void;
}

/// A C library function that glibc does not export under a second name, found once.
fn next_symbol(name: &core::ffi::CStr, cache: &std::sync::atomic::AtomicUsize) -> usize {
    use std::sync::atomic::Ordering::Relaxed;
    let mut f = cache.load(Relaxed);
    if f == 0 {
        // SAFETY: dlsym with a valid name; it may allocate, which goes to the C library.
        f = unsafe { libc::dlsym(libc::RTLD_NEXT, name.as_ptr()) } as usize;
        cache.store(f, Relaxed);
    }
    f
}

/// Bytes of a live block: cheap enough for every `free` (glibc's is read from its header).
///
/// # Safety
/// `ptr` must be a live block of the current allocator.
unsafe fn block_size(ptr: *mut c_void) -> usize {
    if far_memory() {
        return if managed_malloc::owns(ptr.cast()) {
            // SAFETY: a live block of ours.
            unsafe { managed_malloc::usable_size(ptr.cast()) }
        } else {
            0
        };
    }
    if backed::owns(ptr) {
        // SAFETY: a live block of the file-backed heap.
        return unsafe { backed::usable_size(ptr) };
    }
    if !next_alloc::is_glibc() {
        // SAFETY: a live block of the program's own allocator.
        return unsafe { next_alloc::usable_size(ptr) };
    }
    // glibc keeps a chunk's size (with three flag bits) in the word before the pointer.
    // SAFETY: every glibc block has that header.
    unsafe { *ptr.cast::<usize>().sub(1) & !7 }
}

/// Records the outcome of a traced call.
#[inline]
fn traced(entry: Option<alloc_tracer::Entry>, addr: u64, size: u64, old_addr: u64, detail: u64) {
    if let Some(entry) = entry {
        entry.finish(addr, size, old_addr, detail);
    }
}

fn set_errno(code: i32) {
    // SAFETY: the thread's errno location is always valid.
    unsafe { *libc::__errno_location() = code };
}

/// A raw system call's result, or `None` with errno set from the failure, as libc does.
fn kernel_result(ret: i64) -> Option<i64> {
    if ret < 0 {
        set_errno(
            std::io::Error::last_os_error()
                .raw_os_error()
                .unwrap_or(libc::EINVAL),
        );
        None
    } else {
        Some(ret)
    }
}

/// C's `malloc` called from `caller` (`crate::callers` exports `malloc`).
///
/// # Safety
/// C's `malloc`.
pub(crate) unsafe extern "C" fn malloc_from(size: usize, caller: usize) -> *mut c_void {
    let entry = alloc_tracer::enter(call::MALLOC);
    let ptr = if far_memory() {
        managed_malloc::allocate_for(size, 16, crate::callers::is_libc(caller)).cast()
    } else {
        // SAFETY: C's contract.
        unsafe { backed::malloc(size) }
    };
    traced(entry, ptr as u64, size as u64, 0, 0);
    ptr
}

/// # Safety
/// C's `free`: `ptr` is null or was returned by this allocator.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn free(ptr: *mut c_void) {
    if ptr.is_null() {
        return;
    }
    let mut entry = alloc_tracer::enter(call::FREE);
    if let Some(entry) = &mut entry
        // SAFETY: a live block of the current allocator (C's contract).
        && unsafe { block_size(ptr) } >= PAGE
    {
        entry.precise();
    }
    if !far_memory() {
        // SAFETY: C's contract.
        unsafe { backed::free(ptr) };
    } else if managed_malloc::owns(ptr.cast()) {
        // SAFETY: a live block of ours.
        unsafe { managed_malloc::free(ptr.cast()) };
    }
    traced(entry, ptr as u64, 0, 0, 0);
}

/// C's `calloc` called from `caller`.
///
/// # Safety
/// C's `calloc`.
pub(crate) unsafe extern "C" fn calloc_from(
    count: usize,
    size: usize,
    caller: usize,
) -> *mut c_void {
    let entry = alloc_tracer::enter(call::CALLOC);
    let total = count.checked_mul(size);
    let ptr = match total {
        Some(total) if far_memory() => {
            managed_malloc::allocate_zeroed_for(total, crate::callers::is_libc(caller)).cast()
        }
        // SAFETY: C's contract.
        Some(_) => unsafe { backed::calloc(count, size) },
        None => {
            set_errno(libc::ENOMEM);
            std::ptr::null_mut()
        }
    };
    traced(
        entry,
        ptr as u64,
        total.unwrap_or(u64::MAX as usize) as u64,
        0,
        0,
    );
    ptr
}

/// C's `realloc` called from `caller`.
///
/// # Safety
/// C's `realloc`.
pub(crate) unsafe extern "C" fn realloc_from(
    ptr: *mut c_void,
    size: usize,
    caller: usize,
) -> *mut c_void {
    let entry = alloc_tracer::enter(call::REALLOC);
    // SAFETY: C's contract.
    let new = unsafe { reallocate(ptr, size, crate::callers::is_libc(caller)) };
    traced(entry, new as u64, size as u64, ptr as u64, 0);
    new
}

/// `realloc` without tracing (`for_libc`: called by the C library for itself).
///
/// # Safety
/// C's `realloc`.
unsafe fn reallocate(ptr: *mut c_void, size: usize, for_libc: bool) -> *mut c_void {
    if !far_memory() {
        // SAFETY: C's contract.
        return unsafe { backed::realloc(ptr, size) };
    }
    if !ptr.is_null() && size == 0 {
        if managed_malloc::owns(ptr.cast()) {
            // SAFETY: a live block of ours.
            unsafe { managed_malloc::free(ptr.cast()) };
        }
        return std::ptr::null_mut();
    }
    if !ptr.is_null() && !managed_malloc::owns(ptr.cast()) {
        set_errno(libc::EINVAL);
        return std::ptr::null_mut();
    }
    // SAFETY: null or a live block of ours.
    unsafe { managed_malloc::reallocate_for(ptr.cast(), size, for_libc) }.cast()
}

/// C's `reallocarray` called from `caller`.
///
/// # Safety
/// C's `reallocarray`.
pub(crate) unsafe extern "C" fn reallocarray_from(
    ptr: *mut c_void,
    count: usize,
    size: usize,
    caller: usize,
) -> *mut c_void {
    let entry = alloc_tracer::enter(call::REALLOCARRAY);
    let total = count.checked_mul(size);
    let new = match total {
        // SAFETY: C's contract.
        Some(total) => unsafe { reallocate(ptr, total, crate::callers::is_libc(caller)) },
        None => {
            set_errno(libc::ENOMEM);
            std::ptr::null_mut()
        }
    };
    traced(
        entry,
        new as u64,
        total.unwrap_or(usize::MAX) as u64,
        ptr as u64,
        0,
    );
    new
}

/// C's `posix_memalign` called from `caller`.
///
/// # Safety
/// C's `posix_memalign`.
pub(crate) unsafe extern "C" fn posix_memalign_from(
    out: *mut *mut c_void,
    align: usize,
    size: usize,
    caller: usize,
) -> i32 {
    if !align.is_power_of_two() || !align.is_multiple_of(std::mem::size_of::<usize>()) {
        return libc::EINVAL;
    }
    let entry = alloc_tracer::enter(call::POSIX_MEMALIGN);
    let ptr = aligned(align, size, caller);
    traced(entry, ptr as u64, size as u64, 0, align as u64);
    if ptr.is_null() {
        return libc::ENOMEM;
    }
    // SAFETY: `out` is a valid pointer per C's contract.
    unsafe { *out = ptr };
    0
}

/// An aligned block from the current allocator, untraced, for `caller`.
fn aligned(align: usize, size: usize, caller: usize) -> *mut c_void {
    if far_memory() {
        managed_malloc::allocate_for(size, align, crate::callers::is_libc(caller)).cast()
    } else {
        // SAFETY: C's contract; the alignment was checked by the caller.
        unsafe { backed::memalign(align, size) }
    }
}

/// C's `aligned_alloc` called from `caller`.
///
/// # Safety
/// C's `aligned_alloc`.
pub(crate) unsafe extern "C" fn aligned_alloc_from(
    align: usize,
    size: usize,
    caller: usize,
) -> *mut c_void {
    aligned_call(call::ALIGNED_ALLOC, align, size, caller)
}

fn aligned_call(which: u8, align: usize, size: usize, caller: usize) -> *mut c_void {
    if !align.is_power_of_two() {
        set_errno(libc::EINVAL);
        return std::ptr::null_mut();
    }
    let entry = alloc_tracer::enter(which);
    let ptr = aligned(align, size, caller);
    traced(entry, ptr as u64, size as u64, 0, align as u64);
    ptr
}

/// C's `memalign` called from `caller`.
///
/// # Safety
/// C's `memalign`.
pub(crate) unsafe extern "C" fn memalign_from(
    align: usize,
    size: usize,
    caller: usize,
) -> *mut c_void {
    aligned_call(call::MEMALIGN, align, size, caller)
}

/// # Safety
/// C's `valloc`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn valloc(size: usize) -> *mut c_void {
    let entry = alloc_tracer::enter(call::VALLOC);
    let ptr = if far_memory() {
        managed_malloc::allocate(size, PAGE).cast()
    } else {
        // SAFETY: C's contract.
        unsafe { backed::valloc(size) }
    };
    traced(entry, ptr as u64, size as u64, 0, 0);
    ptr
}

/// # Safety
/// C's `pvalloc`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn pvalloc(size: usize) -> *mut c_void {
    let entry = alloc_tracer::enter(call::PVALLOC);
    let ptr = if far_memory() {
        managed_malloc::allocate(size.div_ceil(PAGE).max(1) * PAGE, PAGE).cast()
    } else {
        // SAFETY: C's contract.
        unsafe { backed::pvalloc(size) }
    };
    traced(entry, ptr as u64, size as u64, 0, 0);
    ptr
}

/// # Safety
/// C's `malloc_usable_size`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn malloc_usable_size(ptr: *mut c_void) -> usize {
    let entry = alloc_tracer::enter(call::USABLE_SIZE);
    let size = if ptr.is_null() {
        0
    } else if !far_memory() && backed::owns(ptr) {
        // SAFETY: a live block of the file-backed heap.
        unsafe { backed::usable_size(ptr) }
    } else if !far_memory() {
        // SAFETY: C's contract: a block of the program's own allocator.
        unsafe { next_alloc::usable_size(ptr) }
    } else if managed_malloc::owns(ptr.cast()) {
        // SAFETY: a live block of ours.
        unsafe { managed_malloc::usable_size(ptr.cast()) }
    } else {
        0
    };
    traced(entry, ptr as u64, size as u64, 0, 0);
    size
}

/// jemalloc's non-standard API (`mallocx` and the rest), which programs linking jemalloc call
/// beside `malloc`: a block goes back to whoever made it, and the calls are traced as the
/// standard call each stands for (`mallocx` as `malloc`, `calloc` with `MALLOCX_ZERO`,
/// `memalign` with an alignment; `rallocx`/`xallocx` as `realloc`; `dallocx`/`sdallocx` as
/// `free`; `sallocx` as `malloc_usable_size`). With far memory or a file-backed heap, new
/// blocks come from there as `malloc`'s do.
mod jemalloc_api {
    /// `MALLOCX_ZERO`.
    pub const ZERO: i32 = 0x40;

    /// The alignment `MALLOCX_ALIGN`/`MALLOCX_LG_ALIGN` asks for (0: the default).
    pub fn alignment(flags: i32) -> usize {
        match flags & 0x3f {
            0 => 0,
            lg => 1 << lg,
        }
    }
}

/// Whether a block is the library's own (far memory or file-backed heap), not the program's
/// allocator's.
fn ours(ptr: *mut c_void) -> bool {
    if far_memory() {
        managed_malloc::owns(ptr.cast())
    } else {
        backed::owns(ptr)
    }
}

/// Gives back a block of ours.
///
/// # Safety
/// `ptr` is a live block of ours.
unsafe fn free_ours(ptr: *mut c_void) {
    if far_memory() {
        // SAFETY: guaranteed by the caller.
        unsafe { managed_malloc::free(ptr.cast()) };
    } else {
        // SAFETY: guaranteed by the caller.
        unsafe { backed::free(ptr) };
    }
}

/// Usable bytes of a block of ours.
///
/// # Safety
/// `ptr` is a live block of ours.
unsafe fn usable_ours(ptr: *mut c_void) -> usize {
    if far_memory() {
        // SAFETY: guaranteed by the caller.
        unsafe { managed_malloc::usable_size(ptr.cast()) }
    } else {
        // SAFETY: guaranteed by the caller.
        unsafe { backed::usable_size(ptr) }
    }
}

/// A new block for `mallocx`/`rallocx` where the library serves the heap itself; `None` when
/// the program's allocator does.
fn allocate_ours(size: usize, flags: i32) -> Option<*mut c_void> {
    if !far_memory() && !backed::serving() {
        return None;
    }
    let align = jemalloc_api::alignment(flags).max(16);
    let ptr = if far_memory() {
        managed_malloc::allocate(size, align).cast()
    } else {
        // SAFETY: a power of two at least 16.
        unsafe { backed::memalign(align, size) }
    };
    if !ptr.is_null() && flags & jemalloc_api::ZERO != 0 {
        // SAFETY: the block has `size` bytes.
        unsafe { std::ptr::write_bytes(ptr.cast::<u8>(), 0, size) };
    }
    Some(ptr)
}

/// # Safety
/// jemalloc's `mallocx`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn mallocx(size: usize, flags: i32) -> *mut c_void {
    let align = jemalloc_api::alignment(flags);
    let which = if flags & jemalloc_api::ZERO != 0 {
        call::CALLOC
    } else if align > 0 {
        call::MEMALIGN
    } else {
        call::MALLOC
    };
    let entry = alloc_tracer::enter(which);
    // SAFETY: jemalloc's contract.
    let ptr =
        allocate_ours(size, flags).unwrap_or_else(|| unsafe { next_alloc::mallocx(size, flags) });
    let detail = if which == call::MEMALIGN {
        align as u64
    } else {
        0
    };
    traced(entry, ptr as u64, size as u64, 0, detail);
    ptr
}

/// # Safety
/// jemalloc's `rallocx`: `ptr` is a live block.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn rallocx(ptr: *mut c_void, size: usize, flags: i32) -> *mut c_void {
    let entry = alloc_tracer::enter(call::REALLOC);
    let new = if ours(ptr) {
        // SAFETY: a live block of ours.
        let usable = unsafe { usable_ours(ptr) };
        match allocate_ours(size, flags) {
            Some(new) if !new.is_null() => {
                // SAFETY: both blocks hold the bytes copied; they do not overlap; the old
                // block is ours.
                unsafe {
                    std::ptr::copy_nonoverlapping(
                        ptr.cast::<u8>(),
                        new.cast::<u8>(),
                        usable.min(size),
                    );
                    free_ours(ptr);
                }
                new
            }
            _ => std::ptr::null_mut(),
        }
    } else {
        // SAFETY: jemalloc's contract: a block of jemalloc's.
        unsafe { next_alloc::rallocx(ptr, size, flags) }
    };
    traced(entry, new as u64, size as u64, ptr as u64, 0);
    new
}

/// # Safety
/// jemalloc's `xallocx`: `ptr` is a live block.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn xallocx(ptr: *mut c_void, size: usize, extra: usize, flags: i32) -> usize {
    let entry = alloc_tracer::enter(call::REALLOC);
    let now = if ours(ptr) {
        // Blocks of ours never grow in place.
        // SAFETY: a live block of ours.
        unsafe { usable_ours(ptr) }
    } else {
        // SAFETY: jemalloc's contract.
        unsafe { next_alloc::xallocx(ptr, size, extra, flags) }
    };
    traced(entry, ptr as u64, now as u64, ptr as u64, 0);
    now
}

/// # Safety
/// jemalloc's `sallocx`: `ptr` is a live block.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn sallocx(ptr: *mut c_void, flags: i32) -> usize {
    let entry = alloc_tracer::enter(call::USABLE_SIZE);
    let size = if ours(ptr) {
        // SAFETY: a live block of ours.
        unsafe { usable_ours(ptr) }
    } else {
        // SAFETY: jemalloc's contract.
        unsafe { next_alloc::sallocx(ptr, flags) }
    };
    traced(entry, ptr as u64, size as u64, 0, 0);
    size
}

/// # Safety
/// jemalloc's `dallocx`: `ptr` is a live block.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn dallocx(ptr: *mut c_void, flags: i32) {
    // SAFETY: jemalloc's contract.
    unsafe { deallocx(ptr, None, flags) }
}

/// # Safety
/// jemalloc's `sdallocx`: `ptr` is a live block of `size` bytes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn sdallocx(ptr: *mut c_void, size: usize, flags: i32) {
    // SAFETY: jemalloc's contract.
    unsafe { deallocx(ptr, Some(size), flags) }
}

/// `dallocx`, or `sdallocx` given the size.
///
/// # Safety
/// jemalloc's contract.
unsafe fn deallocx(ptr: *mut c_void, size: Option<usize>, flags: i32) {
    let mut entry = alloc_tracer::enter(call::FREE);
    // SAFETY: a live block (jemalloc's contract).
    if let Some(entry) = &mut entry
        && unsafe { block_size(ptr) } >= PAGE
    {
        entry.precise();
    }
    if ours(ptr) {
        // SAFETY: a live block of ours.
        unsafe { free_ours(ptr) };
    } else if let Some(size) = size {
        // SAFETY: jemalloc's contract.
        unsafe { next_alloc::sdallocx(ptr, size, flags) };
    } else {
        // SAFETY: jemalloc's contract.
        unsafe { next_alloc::dallocx(ptr, flags) };
    }
    traced(entry, ptr as u64, 0, 0, 0);
}

/// # Safety
/// jemalloc's `nallocx`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nallocx(size: usize, flags: i32) -> usize {
    if far_memory() || backed::serving() {
        // What `mallocx` would give: blocks of ours have the size asked for.
        return size;
    }
    // SAFETY: jemalloc's contract.
    unsafe { next_alloc::nallocx(size, flags) }
}

fn raw_mmap(
    addr: *mut c_void,
    len: usize,
    prot: i32,
    flags: i32,
    fd: i32,
    offset: i64,
) -> *mut c_void {
    // SAFETY: the caller's arguments go to the kernel unchanged; it validates them.
    let ret = unsafe { libc::syscall(libc::SYS_mmap, addr, len, prot, flags, fd, offset) };
    kernel_result(ret).map_or(libc::MAP_FAILED, |addr| addr as *mut c_void)
}

/// Anonymous private read-write mappings without a fixed address come from the region.
fn managed_mapping(addr: *mut c_void, prot: i32, flags: i32) -> bool {
    let excluded = libc::MAP_FIXED
        | libc::MAP_FIXED_NOREPLACE
        | libc::MAP_GROWSDOWN
        | libc::MAP_STACK
        | libc::MAP_HUGETLB
        | libc::MAP_SHARED;
    addr.is_null()
        && flags & libc::MAP_ANONYMOUS != 0
        && flags & libc::MAP_PRIVATE != 0
        && flags & excluded == 0
        && prot == libc::PROT_READ | libc::PROT_WRITE
}

/// # Safety
/// C's `mmap`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn mmap(
    addr: *mut c_void,
    len: usize,
    prot: i32,
    flags: i32,
    fd: i32,
    offset: i64,
) -> *mut c_void {
    let entry = alloc_tracer::enter(call::MMAP);
    let ptr = map(addr, len, prot, flags, fd, offset);
    let detail = (prot as u32 as u64) << 32 | flags as u32 as u64;
    let result = if ptr == libc::MAP_FAILED {
        0
    } else {
        ptr as u64
    };
    traced(entry, result, len as u64, 0, detail);
    ptr
}

/// `mmap` without tracing.
fn map(addr: *mut c_void, len: usize, prot: i32, flags: i32, fd: i32, offset: i64) -> *mut c_void {
    // Reservations, and mappings placed over the region (commits, uncommits, files).
    if let Some(ptr) = placement::map(addr, len, prot, flags, fd, offset) {
        return ptr;
    }
    if len > 0
        && managed_mapping(addr, prot, flags)
        && let Some(region) = region_ready()
        && !crate::on_handler_thread()
    {
        let size = len.div_ceil(PAGE) * PAGE;
        let ptr = managed_malloc::allocate(size.max(LARGE), PAGE);
        if !ptr.is_null() {
            // A fresh mapping reads as zeros: forget what earlier blocks left there.
            region.discard(ptr as usize, size.max(LARGE));
            return ptr.cast();
        }
    }
    raw_mmap(addr, len, prot, flags, fd, offset)
}

/// # Safety
/// C's `mmap64` (the same on 64-bit).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn mmap64(
    addr: *mut c_void,
    len: usize,
    prot: i32,
    flags: i32,
    fd: i32,
    offset: i64,
) -> *mut c_void {
    // SAFETY: same contract.
    unsafe { mmap(addr, len, prot, flags, fd, offset) }
}

/// # Safety
/// C's `munmap`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn munmap(addr: *mut c_void, len: usize) -> i32 {
    let entry = alloc_tracer::enter(call::MUNMAP);
    let ret = unmap(addr, len);
    traced(entry, addr as u64, len as u64, 0, 0);
    ret
}

/// `munmap` without tracing.
fn unmap(addr: *mut c_void, len: usize) -> i32 {
    if let Some(ret) = placement::unmap(addr, len) {
        return ret;
    }
    if let Some(region) = region_any().filter(|r| r.contains(addr as usize)) {
        if managed_malloc::owns(addr.cast()) {
            // SAFETY: a live block of ours.
            let usable = unsafe { managed_malloc::usable_size(addr.cast()) };
            if len >= usable.min(len.div_ceil(PAGE) * PAGE) && len.div_ceil(PAGE) * PAGE >= usable {
                // SAFETY: as above.
                unsafe { managed_malloc::free(addr.cast()) };
                return 0;
            }
        }
        // Part of a mapping: its pages read as zeros afterwards; the block stays allocated.
        region.discard(addr as usize, len);
        return 0;
    }
    // SAFETY: forwarded to the kernel unchanged.
    let ret = unsafe { libc::syscall(libc::SYS_munmap, addr, len) };
    kernel_result(ret).map_or(-1, |_| 0)
}

/// # Safety
/// C's `mremap`. C declares it variadic (the new address follows with `MREMAP_FIXED`); on
/// x86_64 a variadic integer argument travels in the same register as a fixed one, so the
/// fifth parameter is declared outright (variadic definitions are unstable in Rust).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn mremap(
    old: *mut c_void,
    old_len: usize,
    new_len: usize,
    flags: i32,
    fixed_addr: usize,
) -> *mut c_void {
    let entry = alloc_tracer::enter(call::MREMAP);
    // SAFETY: C's contract.
    let new = unsafe { remap(old, old_len, new_len, flags, fixed_addr) };
    let result = if new == libc::MAP_FAILED {
        0
    } else {
        new as u64
    };
    traced(entry, result, new_len as u64, old as u64, 0);
    new
}

/// `mremap` without tracing.
///
/// # Safety
/// C's `mremap`.
unsafe fn remap(
    old: *mut c_void,
    old_len: usize,
    new_len: usize,
    flags: i32,
    fixed_addr: usize,
) -> *mut c_void {
    if region_any().is_some_and(|r| r.contains(old as usize)) && managed_malloc::owns(old.cast()) {
        if flags & libc::MREMAP_FIXED != 0 {
            set_errno(libc::EINVAL);
            return libc::MAP_FAILED;
        }
        // SAFETY: a live block of ours.
        let usable = unsafe { managed_malloc::usable_size(old.cast()) };
        if new_len <= usable {
            if let Some(region) = region_any() {
                region.discard(old as usize + new_len, usable - new_len);
            }
            return old;
        }
        if flags & libc::MREMAP_MAYMOVE == 0 {
            set_errno(libc::ENOMEM);
            return libc::MAP_FAILED;
        }
        let new = map(
            std::ptr::null_mut(),
            new_len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        );
        if new == libc::MAP_FAILED {
            return new;
        }
        // SAFETY: both blocks hold at least the copied bytes and do not overlap.
        unsafe {
            std::ptr::copy_nonoverlapping(old.cast::<u8>(), new.cast::<u8>(), old_len.min(usable));
            managed_malloc::free(old.cast());
        }
        return new;
    }
    let new_addr = if flags & libc::MREMAP_FIXED != 0 {
        fixed_addr
    } else {
        0
    };
    // SAFETY: forwarded to the kernel unchanged.
    let ret = unsafe { libc::syscall(libc::SYS_mremap, old, old_len, new_len, flags, new_addr) };
    kernel_result(ret).map_or(libc::MAP_FAILED, |addr| addr as *mut c_void)
}

/// # Safety
/// C's `madvise`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn madvise(addr: *mut c_void, len: usize, advice: i32) -> i32 {
    if let Some(ret) = placement::advise(addr, len, advice) {
        return ret;
    }
    let ret = crate::sys::madvise(addr as usize, len, advice);
    kernel_result(ret).map_or(-1, |_| 0)
}

/// # Safety
/// C's `mprotect`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn mprotect(addr: *mut c_void, len: usize, prot: i32) -> i32 {
    // Over the region: commits, and ranges that leave emulation or come back.
    if let Some(ret) = placement::protect(addr, len, prot) {
        return ret;
    }
    // SAFETY: forwarded to the kernel unchanged.
    let ret = unsafe { libc::syscall(libc::SYS_mprotect, addr, len, prot) };
    kernel_result(ret).map_or(-1, |_| 0)
}

/// With far memory on, the program's own `brk`/`sbrk` get a break inside the managed region:
/// a page-aligned block taken from it at the first call, which the break moves through. The
/// C library's malloc does not use these (the runtime replaced it), so only programs that move
/// the break themselves see it.
mod emulated_break {
    use std::sync::atomic::{AtomicUsize, Ordering::*};

    use crate::managed_malloc;
    use crate::region::PAGE;

    /// The most the break can grow: an eighth of the region, at most 1 GiB.
    fn capacity(region_bytes: usize) -> usize {
        (region_bytes / 8).min(1 << 30) / PAGE * PAGE
    }

    static START: AtomicUsize = AtomicUsize::new(0);
    static END: AtomicUsize = AtomicUsize::new(0);
    static CURRENT: AtomicUsize = AtomicUsize::new(0);
    static LOCK: spinning_top::Spinlock<()> = spinning_top::Spinlock::new(());

    /// The break area, made on first use; `None` if the region has no room for it.
    fn area() -> Option<(usize, usize)> {
        if START.load(Acquire) == 0 {
            let region = crate::region_ready()?;
            let _guard = LOCK.lock();
            if START.load(Acquire) == 0 {
                let len = capacity(region.heap_pages * PAGE);
                let start = managed_malloc::allocate(len.max(PAGE), PAGE) as usize;
                if start == 0 {
                    return None;
                }
                END.store(start + len, Release);
                CURRENT.store(start, Release);
                START.store(start, Release);
            }
        }
        Some((START.load(Acquire), END.load(Acquire)))
    }

    /// Moves the break to `new`; pages given back read as zeros when taken again.
    fn set(new: usize) -> bool {
        let Some((start, end)) = area() else {
            return false;
        };
        if new < start || new > end {
            return false;
        }
        let old = CURRENT.swap(new, AcqRel);
        if new < old
            && let Some(region) = crate::region_any()
        {
            let first = new.next_multiple_of(PAGE);
            if old > first {
                region.discard(first, old - first);
            }
        }
        true
    }

    /// `sbrk`: the old break, or `None` (ENOMEM).
    pub fn sbrk(increment: isize) -> Option<usize> {
        area()?;
        let _guard = LOCK.lock();
        let old = CURRENT.load(Acquire);
        let new = old.checked_add_signed(increment)?;
        set(new).then_some(old)
    }

    /// `brk`: whether the break is now `addr`.
    pub fn brk(addr: usize) -> bool {
        // The area first: making it takes the lock.
        if area().is_none() {
            return false;
        }
        let _guard = LOCK.lock();
        set(addr)
    }
}

/// # Safety
/// C's `sbrk`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn sbrk(increment: isize) -> *mut c_void {
    let entry = alloc_tracer::enter(call::SBRK);
    let old = if far_memory() {
        match emulated_break::sbrk(increment) {
            Some(old) => old as *mut c_void,
            None => {
                set_errno(libc::ENOMEM);
                -1isize as *mut c_void
            }
        }
    } else {
        // SAFETY: C's contract.
        unsafe { __sbrk(increment) }
    };
    let failed = old as isize == -1;
    let new = if failed {
        0
    } else {
        (old as u64).wrapping_add(increment as u64)
    };
    traced(
        entry,
        new,
        increment as u64,
        if failed { 0 } else { old as u64 },
        0,
    );
    old
}

/// # Safety
/// C's `brk`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn brk(addr: *mut c_void) -> i32 {
    static NEXT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let entry = alloc_tracer::enter(call::BRK);
    if far_memory() {
        let old = emulated_break::sbrk(0).unwrap_or(0) as u64;
        let ok = emulated_break::brk(addr as usize);
        if !ok {
            set_errno(libc::ENOMEM);
        }
        let new = if ok { addr as u64 } else { old };
        traced(entry, new, new.wrapping_sub(old), old, 0);
        return if ok { 0 } else { -1 };
    }
    // SAFETY: sbrk(0) only reads the break.
    let old = unsafe { __sbrk(0) } as u64;
    let ret = match next_symbol(c"brk", &NEXT) {
        0 => {
            set_errno(libc::ENOSYS);
            -1
        }
        f => {
            // SAFETY: the C library's brk, by its name.
            let f: unsafe extern "C" fn(*mut c_void) -> i32 = unsafe { std::mem::transmute(f) };
            // SAFETY: C's contract.
            unsafe { f(addr) }
        }
    };
    let new = if ret == 0 { addr as u64 } else { old };
    traced(entry, new, new.wrapping_sub(old), old, 0);
    ret
}
