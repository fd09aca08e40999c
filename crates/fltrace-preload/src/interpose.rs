//! The exported C functions that replace the C library's: the malloc family and the anonymous
//! mapping calls.

use std::ffi::c_void;

use crate::alloc::{self, LARGE};
use crate::region::PAGE;
use crate::{region_any, region_ready};

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

/// # Safety
/// C's `malloc`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn malloc(size: usize) -> *mut c_void {
    alloc::allocate(size, 16).cast()
}

/// # Safety
/// C's `free`: `ptr` is null or was returned by this allocator.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn free(ptr: *mut c_void) {
    if !ptr.is_null() && alloc::owns(ptr.cast()) {
        // SAFETY: a live block of ours.
        unsafe { alloc::free(ptr.cast()) };
    }
}

/// # Safety
/// C's `calloc`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn calloc(count: usize, size: usize) -> *mut c_void {
    match count.checked_mul(size) {
        Some(total) => alloc::allocate_zeroed(total).cast(),
        None => {
            set_errno(libc::ENOMEM);
            std::ptr::null_mut()
        }
    }
}

/// # Safety
/// C's `realloc`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn realloc(ptr: *mut c_void, size: usize) -> *mut c_void {
    if !ptr.is_null() && size == 0 {
        // SAFETY: C's contract.
        unsafe { free(ptr) };
        return std::ptr::null_mut();
    }
    if !ptr.is_null() && !alloc::owns(ptr.cast()) {
        set_errno(libc::EINVAL);
        return std::ptr::null_mut();
    }
    // SAFETY: null or a live block of ours.
    unsafe { alloc::reallocate(ptr.cast(), size) }.cast()
}

/// # Safety
/// C's `reallocarray`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn reallocarray(ptr: *mut c_void, count: usize, size: usize) -> *mut c_void {
    match count.checked_mul(size) {
        // SAFETY: C's contract.
        Some(total) => unsafe { realloc(ptr, total) },
        None => {
            set_errno(libc::ENOMEM);
            std::ptr::null_mut()
        }
    }
}

/// # Safety
/// C's `posix_memalign`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn posix_memalign(out: *mut *mut c_void, align: usize, size: usize) -> i32 {
    if !align.is_power_of_two() || !align.is_multiple_of(std::mem::size_of::<usize>()) {
        return libc::EINVAL;
    }
    let ptr = alloc::allocate(size, align);
    if ptr.is_null() {
        return libc::ENOMEM;
    }
    // SAFETY: `out` is a valid pointer per C's contract.
    unsafe { *out = ptr.cast() };
    0
}

/// # Safety
/// C's `aligned_alloc`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aligned_alloc(align: usize, size: usize) -> *mut c_void {
    if !align.is_power_of_two() {
        set_errno(libc::EINVAL);
        return std::ptr::null_mut();
    }
    alloc::allocate(size, align).cast()
}

/// # Safety
/// C's `memalign`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn memalign(align: usize, size: usize) -> *mut c_void {
    // SAFETY: same contract.
    unsafe { aligned_alloc(align, size) }
}

/// # Safety
/// C's `valloc`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn valloc(size: usize) -> *mut c_void {
    alloc::allocate(size, PAGE).cast()
}

/// # Safety
/// C's `pvalloc`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn pvalloc(size: usize) -> *mut c_void {
    alloc::allocate(size.div_ceil(PAGE).max(1) * PAGE, PAGE).cast()
}

/// # Safety
/// C's `malloc_usable_size`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn malloc_usable_size(ptr: *mut c_void) -> usize {
    if ptr.is_null() || !alloc::owns(ptr.cast()) {
        return 0;
    }
    // SAFETY: a live block of ours.
    unsafe { alloc::usable_size(ptr.cast()) }
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
    if len > 0
        && managed_mapping(addr, prot, flags)
        && let Some(region) = region_ready()
    {
        let size = len.div_ceil(PAGE) * PAGE;
        let ptr = alloc::allocate(size.max(LARGE), PAGE);
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
    if let Some(region) = region_any().filter(|r| r.contains(addr as usize)) {
        if alloc::owns(addr.cast()) {
            // SAFETY: a live block of ours.
            let usable = unsafe { alloc::usable_size(addr.cast()) };
            if len >= usable.min(len.div_ceil(PAGE) * PAGE) && len.div_ceil(PAGE) * PAGE >= usable {
                // SAFETY: as above.
                unsafe { alloc::free(addr.cast()) };
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
    if region_any().is_some_and(|r| r.contains(old as usize)) && alloc::owns(old.cast()) {
        if flags & libc::MREMAP_FIXED != 0 {
            set_errno(libc::EINVAL);
            return libc::MAP_FAILED;
        }
        // SAFETY: a live block of ours.
        let usable = unsafe { alloc::usable_size(old.cast()) };
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
        // SAFETY: an anonymous private mapping request.
        let new = unsafe {
            mmap(
                std::ptr::null_mut(),
                new_len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        if new == libc::MAP_FAILED {
            return new;
        }
        // SAFETY: both blocks hold at least the copied bytes and do not overlap.
        unsafe {
            std::ptr::copy_nonoverlapping(old.cast::<u8>(), new.cast::<u8>(), old_len.min(usable));
            alloc::free(old.cast());
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
    if let Some(region) = region_any().filter(|r| r.contains(addr as usize)) {
        match advice {
            libc::MADV_DONTNEED | libc::MADV_FREE | libc::MADV_REMOVE => {
                region.discard(addr as usize, len)
            }
            // Huge pages would defeat per-page accounting; other advice is harmless.
            libc::MADV_HUGEPAGE => {}
            _ => {
                crate::sys::madvise(addr as usize, len, advice);
            }
        }
        return 0;
    }
    let ret = crate::sys::madvise(addr as usize, len, advice);
    kernel_result(ret).map_or(-1, |_| 0)
}
