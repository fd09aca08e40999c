//! Who calls the allocator: the C library for itself, or the program.
//!
//! The C library allocates its stdio buffers, `FILE`s and directory streams with `malloc` and
//! hands them to the kernel from its own calls (`fgets` refilling a buffer, `readdir`), which
//! no wrapper reaches. Where faults are served in the faulting thread, the kernel's access to
//! a missing page of them would fail (`EFAULT`): such blocks are kept local
//! (`crate::managed_malloc`'s local pools). The exported allocation functions are trampolines
//! that pass their return address on, so that the allocator knows its caller.

use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};

/// The C library's executable segments, `[start, end)` pairs (0 until known).
static LIBC_TEXT: [AtomicUsize; 8] = [const { AtomicUsize::new(0) }; 8];

/// Whether `caller` (a return address) lies in the C library's code.
pub fn is_libc(caller: usize) -> bool {
    LIBC_TEXT.chunks(2).any(|range| {
        let (start, end) = (range[0].load(Relaxed), range[1].load(Relaxed));
        start <= caller && caller < end
    })
}

/// Finds the C library's executable segments (once the runtime starts).
pub fn init() {
    if LIBC_TEXT[1].load(Relaxed) != 0 {
        return;
    }
    extern "C" fn each(
        info: *mut libc::dl_phdr_info,
        _size: usize,
        data: *mut std::ffi::c_void,
    ) -> i32 {
        // SAFETY: the loader passes a valid info; `data` is the address looked for.
        let (info, wanted) = unsafe { (&*info, data as usize) };
        if info.dlpi_phdr.is_null() {
            return 0;
        }
        // SAFETY: dlpi_phnum program headers at dlpi_phdr.
        let headers = unsafe { std::slice::from_raw_parts(info.dlpi_phdr, info.dlpi_phnum.into()) };
        let text = headers
            .iter()
            .filter(|h| h.p_type == libc::PT_LOAD && h.p_flags & libc::PF_X != 0);
        let range = |h: &libc::Elf64_Phdr| {
            let start = info.dlpi_addr as usize + h.p_vaddr as usize;
            (start, start + h.p_memsz as usize)
        };
        if !text
            .clone()
            .map(range)
            .any(|(s, e)| s <= wanted && wanted < e)
        {
            return 0;
        }
        for (slot, (start, end)) in LIBC_TEXT.chunks(2).zip(text.map(range)) {
            slot[0].store(start, Relaxed);
            slot[1].store(end, Relaxed);
        }
        1
    }
    // A function of the C library that this library does not replace (the address of one it
    // replaces would be its own).
    let wanted = libc::getpid as *const () as usize;
    // SAFETY: a callback of the right type; it only reads what the loader passes.
    unsafe { libc::dl_iterate_phdr(Some(each), wanted as *mut std::ffi::c_void) };
}

/// Exported allocation functions that jump to their implementations with their return
/// address as one more argument (the register after their own).
#[cfg(target_arch = "x86_64")]
mod trampolines {
    use std::ffi::c_void;

    use crate::interpose;

    /// # Safety
    /// C's `malloc`.
    #[unsafe(naked)]
    #[unsafe(no_mangle)]
    pub unsafe extern "C" fn malloc(_size: usize) -> *mut c_void {
        std::arch::naked_asm!("mov rsi, [rsp]", "jmp {f}", f = sym interpose::malloc_from)
    }

    /// # Safety
    /// C's `calloc`.
    #[unsafe(naked)]
    #[unsafe(no_mangle)]
    pub unsafe extern "C" fn calloc(_count: usize, _size: usize) -> *mut c_void {
        std::arch::naked_asm!("mov rdx, [rsp]", "jmp {f}", f = sym interpose::calloc_from)
    }

    /// # Safety
    /// C's `realloc`.
    #[unsafe(naked)]
    #[unsafe(no_mangle)]
    pub unsafe extern "C" fn realloc(_ptr: *mut c_void, _size: usize) -> *mut c_void {
        std::arch::naked_asm!("mov rdx, [rsp]", "jmp {f}", f = sym interpose::realloc_from)
    }

    /// # Safety
    /// C's `reallocarray`.
    #[unsafe(naked)]
    #[unsafe(no_mangle)]
    pub unsafe extern "C" fn reallocarray(
        _ptr: *mut c_void,
        _count: usize,
        _size: usize,
    ) -> *mut c_void {
        std::arch::naked_asm!("mov rcx, [rsp]", "jmp {f}", f = sym interpose::reallocarray_from)
    }

    /// # Safety
    /// C's `posix_memalign`.
    #[unsafe(naked)]
    #[unsafe(no_mangle)]
    pub unsafe extern "C" fn posix_memalign(
        _out: *mut *mut c_void,
        _align: usize,
        _size: usize,
    ) -> i32 {
        std::arch::naked_asm!("mov rcx, [rsp]", "jmp {f}", f = sym interpose::posix_memalign_from)
    }

    /// # Safety
    /// C's `aligned_alloc`.
    #[unsafe(naked)]
    #[unsafe(no_mangle)]
    pub unsafe extern "C" fn aligned_alloc(_align: usize, _size: usize) -> *mut c_void {
        std::arch::naked_asm!("mov rdx, [rsp]", "jmp {f}", f = sym interpose::aligned_alloc_from)
    }

    /// # Safety
    /// C's `memalign`.
    #[unsafe(naked)]
    #[unsafe(no_mangle)]
    pub unsafe extern "C" fn memalign(_align: usize, _size: usize) -> *mut c_void {
        std::arch::naked_asm!("mov rdx, [rsp]", "jmp {f}", f = sym interpose::memalign_from)
    }
}

/// Elsewhere the caller is not known: every block is the program's.
#[cfg(not(target_arch = "x86_64"))]
mod trampolines {
    use std::ffi::c_void;

    use crate::interpose;

    /// # Safety
    /// C's `malloc`.
    #[unsafe(no_mangle)]
    pub unsafe extern "C" fn malloc(size: usize) -> *mut c_void {
        // SAFETY: C's contract.
        unsafe { interpose::malloc_from(size, 0) }
    }

    /// # Safety
    /// C's `calloc`.
    #[unsafe(no_mangle)]
    pub unsafe extern "C" fn calloc(count: usize, size: usize) -> *mut c_void {
        // SAFETY: C's contract.
        unsafe { interpose::calloc_from(count, size, 0) }
    }

    /// # Safety
    /// C's `realloc`.
    #[unsafe(no_mangle)]
    pub unsafe extern "C" fn realloc(ptr: *mut c_void, size: usize) -> *mut c_void {
        // SAFETY: C's contract.
        unsafe { interpose::realloc_from(ptr, size, 0) }
    }

    /// # Safety
    /// C's `reallocarray`.
    #[unsafe(no_mangle)]
    pub unsafe extern "C" fn reallocarray(
        ptr: *mut c_void,
        count: usize,
        size: usize,
    ) -> *mut c_void {
        // SAFETY: C's contract.
        unsafe { interpose::reallocarray_from(ptr, count, size, 0) }
    }

    /// # Safety
    /// C's `posix_memalign`.
    #[unsafe(no_mangle)]
    pub unsafe extern "C" fn posix_memalign(
        out: *mut *mut c_void,
        align: usize,
        size: usize,
    ) -> i32 {
        // SAFETY: C's contract.
        unsafe { interpose::posix_memalign_from(out, align, size, 0) }
    }

    /// # Safety
    /// C's `aligned_alloc`.
    #[unsafe(no_mangle)]
    pub unsafe extern "C" fn aligned_alloc(align: usize, size: usize) -> *mut c_void {
        // SAFETY: C's contract.
        unsafe { interpose::aligned_alloc_from(align, size, 0) }
    }

    /// # Safety
    /// C's `memalign`.
    #[unsafe(no_mangle)]
    pub unsafe extern "C" fn memalign(align: usize, size: usize) -> *mut c_void {
        // SAFETY: C's contract.
        unsafe { interpose::memalign_from(align, size, 0) }
    }
}
