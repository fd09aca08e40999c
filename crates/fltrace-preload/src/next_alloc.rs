//! The allocator the program has without this library: the next definition of `malloc` after
//! ours, which is jemalloc, tcmalloc or mimalloc when the program links one (Debian's
//! redis-server links jemalloc) and the C library's otherwise.
//!
//! Every block goes back to the allocator that made it: `free`, `realloc`,
//! `malloc_usable_size` and jemalloc's `*allocx` calls all go to the same library as `malloc`.
//! (Forwarding `malloc` to glibc while the program's `malloc_usable_size` went to jemalloc
//! crashed redis.) The functions are found once, at the first call, with
//! `dlsym(RTLD_NEXT)`; while they are looked up, the C library may allocate (an error
//! message for a name that is missing), and those few blocks come from a static arena here.
//! When the next `malloc` is glibc's, its `__libc_*` names are called directly.

use std::ffi::{CStr, c_void};
use std::ptr::null_mut;
use std::sync::atomic::{AtomicU8, AtomicUsize, Ordering::*};

use crate::region::PAGE;

unsafe extern "C" {
    fn __libc_malloc(size: usize) -> *mut c_void;
    fn __libc_calloc(count: usize, size: usize) -> *mut c_void;
    fn __libc_realloc(ptr: *mut c_void, size: usize) -> *mut c_void;
    fn __libc_free(ptr: *mut c_void);
    fn __libc_memalign(align: usize, size: usize) -> *mut c_void;
    fn __libc_valloc(size: usize) -> *mut c_void;
    fn __libc_pvalloc(size: usize) -> *mut c_void;
}

const UNRESOLVED: u8 = 0;
const RESOLVING: u8 = 1;
/// The next `malloc` is the C library's.
const GLIBC: u8 = 2;
/// Another allocator's (`FNS` holds its functions).
const OTHER: u8 = 3;

static MODE: AtomicU8 = AtomicU8::new(UNRESOLVED);

/// Indexes into `FNS`, with the names they are looked up by.
const MALLOC: usize = 0;
const FREE: usize = 1;
const CALLOC: usize = 2;
const REALLOC: usize = 3;
const MEMALIGN: usize = 4;
const POSIX_MEMALIGN: usize = 5;
const ALIGNED_ALLOC: usize = 6;
const USABLE_SIZE: usize = 7;
const MALLOCX: usize = 8;
const RALLOCX: usize = 9;
const XALLOCX: usize = 10;
const SALLOCX: usize = 11;
const DALLOCX: usize = 12;
const SDALLOCX: usize = 13;
const NALLOCX: usize = 14;
const NAMES: [&CStr; 15] = [
    c"malloc",
    c"free",
    c"calloc",
    c"realloc",
    c"memalign",
    c"posix_memalign",
    c"aligned_alloc",
    c"malloc_usable_size",
    c"mallocx",
    c"rallocx",
    c"xallocx",
    c"sallocx",
    c"dallocx",
    c"sdallocx",
    c"nallocx",
];

/// The functions found, or 0.
static FNS: [AtomicUsize; NAMES.len()] = [const { AtomicUsize::new(0) }; NAMES.len()];

/// Where blocks asked for while the functions are being looked up come from. They are never
/// given back: a few dozen bytes, once per process.
const BOOT_SIZE: usize = 64 * 1024;
#[repr(C, align(16))]
struct BootArena([u8; BOOT_SIZE]);
static mut BOOT: BootArena = BootArena([0; BOOT_SIZE]);
static BOOT_USED: AtomicUsize = AtomicUsize::new(0);
const BOOT_HEADER: usize = 16;

fn boot_range() -> (usize, usize) {
    let base = (&raw const BOOT) as usize;
    (base, base + BOOT_SIZE)
}

fn in_boot(ptr: *mut c_void) -> bool {
    let (base, end) = boot_range();
    (ptr as usize) > base && (ptr as usize) < end
}

/// A block of the boot arena (its size in the word before it), or null when it is full.
fn boot_alloc(size: usize, align: usize) -> *mut c_void {
    let align = align.max(BOOT_HEADER);
    let (base, _) = boot_range();
    let mut used = BOOT_USED.load(Relaxed);
    loop {
        let start = (base + used + BOOT_HEADER).next_multiple_of(align);
        let end = start + size.max(1);
        if end > base + BOOT_SIZE {
            set_errno(libc::ENOMEM);
            return null_mut();
        }
        match BOOT_USED.compare_exchange_weak(used, end - base, AcqRel, Relaxed) {
            Ok(_) => {
                // SAFETY: `start - 8 .. end` lies inside the arena and is ours alone now.
                unsafe { ((start - 8) as *mut usize).write(size) };
                return start as *mut c_void;
            }
            Err(now) => used = now,
        }
    }
}

fn boot_size(ptr: *mut c_void) -> usize {
    // SAFETY: a block of the arena has its size in the word before it.
    unsafe { ptr.cast::<usize>().sub(1).read() }
}

fn set_errno(code: i32) {
    // SAFETY: the thread's errno location is always valid.
    unsafe { *libc::__errno_location() = code };
}

/// The load address of the object defining `f`, or 0.
fn object_of(f: usize) -> usize {
    let mut info = std::mem::MaybeUninit::<libc::Dl_info>::zeroed();
    // SAFETY: dladdr fills the structure; it does not allocate.
    if unsafe { libc::dladdr(f as *const c_void, info.as_mut_ptr()) } == 0 {
        return 0;
    }
    // SAFETY: filled by the successful call above.
    unsafe { info.assume_init() }.dli_fbase as usize
}

/// The mode, looking the functions up on the first call.
#[inline]
fn mode() -> u8 {
    match MODE.load(Acquire) {
        m @ (GLIBC | OTHER) => m,
        _ => resolve(),
    }
}

#[cold]
fn resolve() -> u8 {
    if let Err(now) = MODE.compare_exchange(UNRESOLVED, RESOLVING, AcqRel, Acquire) {
        // Another call is looking up (this thread's, from inside dlsym, or another thread's):
        // it is served from the boot arena meanwhile.
        return now;
    }
    // SAFETY: dlsym with a valid name; what it allocates comes from the boot arena.
    let malloc = unsafe { libc::dlsym(libc::RTLD_NEXT, NAMES[MALLOC].as_ptr()) } as usize;
    let glibc = __libc_malloc as unsafe extern "C" fn(usize) -> *mut c_void as usize;
    let mode = if malloc == 0 || malloc == glibc {
        GLIBC
    } else {
        // Only the allocator's own functions: a name it lacks (jemalloc has no `pvalloc`)
        // would otherwise be found in the C library, which would then be handed its blocks.
        let owner = object_of(malloc);
        for (slot, name) in FNS.iter().zip(NAMES) {
            // SAFETY: as above.
            let f = unsafe { libc::dlsym(libc::RTLD_NEXT, name.as_ptr()) } as usize;
            if f != 0 && object_of(f) == owner {
                slot.store(f, Relaxed);
            }
        }
        FNS[MALLOC].store(malloc, Relaxed);
        OTHER
    };
    MODE.store(mode, Release);
    mode
}

/// The function at `index`, if the allocator has it.
fn function(index: usize) -> Option<usize> {
    match FNS[index].load(Relaxed) {
        0 => None,
        f => Some(f),
    }
}

macro_rules! call {
    ($index:expr, fn($($ty:ty),*) -> $ret:ty, $($arg:expr),*) => {{
        match function($index) {
            Some(f) => {
                // SAFETY: the allocator's function of that name, with its C signature.
                let f: unsafe extern "C" fn($($ty),*) -> $ret = unsafe { std::mem::transmute(f) };
                // SAFETY: the caller passes on C's contract.
                Some(unsafe { f($($arg),*) })
            }
            None => None,
        }
    }};
}

/// `malloc`.
///
/// # Safety
/// C's contract.
pub unsafe fn malloc(size: usize) -> *mut c_void {
    match mode() {
        // SAFETY: C's contract.
        GLIBC => unsafe { __libc_malloc(size) },
        OTHER => call!(MALLOC, fn(usize) -> *mut c_void, size).unwrap_or(null_mut()),
        _ => boot_alloc(size, 16),
    }
}

/// `free`.
///
/// # Safety
/// C's contract: `ptr` is null or a live block of this allocator.
pub unsafe fn free(ptr: *mut c_void) {
    if ptr.is_null() || in_boot(ptr) {
        return;
    }
    match mode() {
        // SAFETY: C's contract.
        GLIBC => unsafe { __libc_free(ptr) },
        OTHER => {
            call!(FREE, fn(*mut c_void) -> (), ptr);
        }
        // Nothing but the boot arena has allocated yet.
        _ => {}
    }
}

/// `calloc`.
///
/// # Safety
/// C's contract.
pub unsafe fn calloc(count: usize, size: usize) -> *mut c_void {
    match mode() {
        // SAFETY: C's contract.
        GLIBC => unsafe { __libc_calloc(count, size) },
        OTHER => call!(CALLOC, fn(usize, usize) -> *mut c_void, count, size).unwrap_or(null_mut()),
        // The arena is zeroed and never reused.
        _ => match count.checked_mul(size) {
            Some(total) => boot_alloc(total, 16),
            None => {
                set_errno(libc::ENOMEM);
                null_mut()
            }
        },
    }
}

/// `realloc`.
///
/// # Safety
/// C's contract.
pub unsafe fn realloc(ptr: *mut c_void, size: usize) -> *mut c_void {
    if in_boot(ptr) {
        // A block of the arena moves to the allocator.
        // SAFETY: C's contract.
        let new = unsafe { malloc(size) };
        if !new.is_null() {
            // SAFETY: both blocks hold the bytes copied; they do not overlap.
            unsafe {
                std::ptr::copy_nonoverlapping(
                    ptr.cast::<u8>(),
                    new.cast::<u8>(),
                    boot_size(ptr).min(size),
                )
            };
        }
        return new;
    }
    match mode() {
        // SAFETY: C's contract.
        GLIBC => unsafe { __libc_realloc(ptr, size) },
        OTHER => {
            call!(REALLOC, fn(*mut c_void, usize) -> *mut c_void, ptr, size).unwrap_or(null_mut())
        }
        _ if ptr.is_null() => boot_alloc(size, 16),
        _ => null_mut(),
    }
}

/// `memalign` (the caller checked that `align` is a power of two).
///
/// # Safety
/// C's contract.
pub unsafe fn memalign(align: usize, size: usize) -> *mut c_void {
    match mode() {
        // SAFETY: C's contract.
        GLIBC => unsafe { __libc_memalign(align, size) },
        OTHER => other_aligned(align, size),
        _ => boot_alloc(size, align),
    }
}

/// An aligned block of the other allocator, by whichever of its aligned calls it has.
fn other_aligned(align: usize, size: usize) -> *mut c_void {
    if let Some(ptr) = call!(MEMALIGN, fn(usize, usize) -> *mut c_void, align, size) {
        return ptr;
    }
    let mut out = null_mut();
    let align_word = align.max(std::mem::size_of::<usize>());
    let pointer = &raw mut out;
    match call!(
        POSIX_MEMALIGN,
        fn(*mut *mut c_void, usize, usize) -> i32,
        pointer,
        align_word,
        size
    ) {
        Some(0) => out,
        Some(code) => {
            set_errno(code);
            null_mut()
        }
        None => call!(
            ALIGNED_ALLOC,
            fn(usize, usize) -> *mut c_void,
            align,
            size.next_multiple_of(align)
        )
        .unwrap_or(null_mut()),
    }
}

/// `valloc`.
///
/// # Safety
/// C's contract.
pub unsafe fn valloc(size: usize) -> *mut c_void {
    match mode() {
        // SAFETY: C's contract.
        GLIBC => unsafe { __libc_valloc(size) },
        // SAFETY: C's contract.
        _ => unsafe { memalign(PAGE, size) },
    }
}

/// `pvalloc`.
///
/// # Safety
/// C's contract.
pub unsafe fn pvalloc(size: usize) -> *mut c_void {
    match mode() {
        // SAFETY: C's contract.
        GLIBC => unsafe { __libc_pvalloc(size) },
        // SAFETY: C's contract.
        _ => unsafe { memalign(PAGE, size.div_ceil(PAGE).max(1) * PAGE) },
    }
}

/// Whether the next allocator is the C library's (whose chunk header the caller may read).
pub fn is_glibc() -> bool {
    mode() == GLIBC
}

/// `malloc_usable_size`.
///
/// # Safety
/// C's contract: `ptr` is a live block of this allocator.
pub unsafe fn usable_size(ptr: *mut c_void) -> usize {
    static GLIBC_USABLE: AtomicUsize = AtomicUsize::new(0);
    if ptr.is_null() {
        return 0;
    }
    if in_boot(ptr) {
        return boot_size(ptr);
    }
    match mode() {
        GLIBC => {
            let mut f = GLIBC_USABLE.load(Relaxed);
            if f == 0 {
                // SAFETY: dlsym with a valid name; glibc's own, as the mode says.
                f = unsafe { libc::dlsym(libc::RTLD_NEXT, c"malloc_usable_size".as_ptr()) }
                    as usize;
                GLIBC_USABLE.store(f, Relaxed);
            }
            if f == 0 {
                return 0;
            }
            // SAFETY: the C library's malloc_usable_size.
            let f: unsafe extern "C" fn(*mut c_void) -> usize = unsafe { std::mem::transmute(f) };
            // SAFETY: C's contract.
            unsafe { f(ptr) }
        }
        OTHER => call!(USABLE_SIZE, fn(*mut c_void) -> usize, ptr)
            .or_else(|| call!(SALLOCX, fn(*mut c_void, i32) -> usize, ptr, 0))
            .unwrap_or(0),
        _ => 0,
    }
}

/// jemalloc's `mallocx`; null when the allocator has none.
///
/// # Safety
/// jemalloc's contract.
pub unsafe fn mallocx(size: usize, flags: i32) -> *mut c_void {
    mode();
    call!(MALLOCX, fn(usize, i32) -> *mut c_void, size, flags).unwrap_or(null_mut())
}

/// jemalloc's `rallocx`.
///
/// # Safety
/// jemalloc's contract.
pub unsafe fn rallocx(ptr: *mut c_void, size: usize, flags: i32) -> *mut c_void {
    mode();
    call!(
        RALLOCX,
        fn(*mut c_void, usize, i32) -> *mut c_void,
        ptr,
        size,
        flags
    )
    .unwrap_or(null_mut())
}

/// jemalloc's `xallocx`.
///
/// # Safety
/// jemalloc's contract.
pub unsafe fn xallocx(ptr: *mut c_void, size: usize, extra: usize, flags: i32) -> usize {
    mode();
    call!(
        XALLOCX,
        fn(*mut c_void, usize, usize, i32) -> usize,
        ptr,
        size,
        extra,
        flags
    )
    .unwrap_or(0)
}

/// jemalloc's `sallocx`.
///
/// # Safety
/// jemalloc's contract.
pub unsafe fn sallocx(ptr: *mut c_void, flags: i32) -> usize {
    mode();
    call!(SALLOCX, fn(*mut c_void, i32) -> usize, ptr, flags).unwrap_or(0)
}

/// jemalloc's `dallocx`.
///
/// # Safety
/// jemalloc's contract.
pub unsafe fn dallocx(ptr: *mut c_void, flags: i32) {
    mode();
    call!(DALLOCX, fn(*mut c_void, i32) -> (), ptr, flags);
}

/// jemalloc's `sdallocx`.
///
/// # Safety
/// jemalloc's contract.
pub unsafe fn sdallocx(ptr: *mut c_void, size: usize, flags: i32) {
    mode();
    if call!(
        SDALLOCX,
        fn(*mut c_void, usize, i32) -> (),
        ptr,
        size,
        flags
    )
    .is_none()
    {
        call!(DALLOCX, fn(*mut c_void, i32) -> (), ptr, flags);
    }
}

/// jemalloc's `nallocx`.
///
/// # Safety
/// jemalloc's contract.
pub unsafe fn nallocx(size: usize, flags: i32) -> usize {
    mode();
    call!(NALLOCX, fn(usize, i32) -> usize, size, flags).unwrap_or(0)
}
