//! stdio with the program's buffers (a large `fread` or `fwrite` goes straight between the
//! buffer and the kernel).

use std::ffi::c_void;

use super::pieces::{Data, piece_end};
use super::{Buf, held_call, real, region_for};

unsafe extern "C" {
    fn flockfile(stream: *mut libc::FILE);
    fn funlockfile(stream: *mut libc::FILE);
}

type StdioFn = unsafe extern "C" fn(*mut c_void, usize, usize, *mut libc::FILE) -> usize;

fn stdio_call(
    f: StdioFn,
    ptr: *mut c_void,
    size: usize,
    n: usize,
    stream: *mut libc::FILE,
    writes: bool,
    locked: bool,
) -> usize {
    let Some(total) = size.checked_mul(n) else {
        // SAFETY: C's contract, passed on.
        return unsafe { f(ptr, size, n, stream) };
    };
    let Some(region) = region_for(ptr as usize, total) else {
        // SAFETY: as above.
        return unsafe { f(ptr, size, n, stream) };
    };
    if locked {
        // One call to the program: no other thread's call on the stream between pieces.
        // SAFETY: a valid stream (C's contract).
        unsafe { flockfile(stream) };
    }
    // The C library reads and writes between the buffer and the kernel itself: each piece
    // is made present whole first.
    let mut done = 0usize;
    while done < total {
        let end = piece_end(region, &Data::One(ptr as usize, total), done, total);
        let at = ptr as usize + done;
        let bufs = [Buf {
            addr: at,
            len: end - done,
            writes,
        }];
        let wanted = end - done;
        // SAFETY: a piece of the caller's buffer, whole bytes.
        let got = held_call(Some(region), &bufs, || unsafe {
            f(at as *mut c_void, 1, wanted, stream)
        });
        done += got;
        if got != wanted {
            break;
        }
    }
    if locked {
        // SAFETY: locked above.
        unsafe { funlockfile(stream) };
    }
    done / size.max(1)
}

/// # Safety
/// C's `fread`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn fread(
    ptr: *mut c_void,
    size: usize,
    n: usize,
    stream: *mut libc::FILE,
) -> usize {
    match real!(c"fread", StdioFn) {
        Some(f) => stdio_call(f, ptr, size, n, stream, true, true),
        None => 0,
    }
}

/// # Safety
/// C's `fwrite`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn fwrite(
    ptr: *const c_void,
    size: usize,
    n: usize,
    stream: *mut libc::FILE,
) -> usize {
    match real!(c"fwrite", StdioFn) {
        Some(f) => stdio_call(f, ptr.cast_mut(), size, n, stream, false, true),
        None => 0,
    }
}

/// # Safety
/// C's `fread_unlocked`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn fread_unlocked(
    ptr: *mut c_void,
    size: usize,
    n: usize,
    stream: *mut libc::FILE,
) -> usize {
    match real!(c"fread_unlocked", StdioFn) {
        Some(f) => stdio_call(f, ptr, size, n, stream, true, false),
        None => 0,
    }
}

/// # Safety
/// C's `fwrite_unlocked`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn fwrite_unlocked(
    ptr: *const c_void,
    size: usize,
    n: usize,
    stream: *mut libc::FILE,
) -> usize {
    match real!(c"fwrite_unlocked", StdioFn) {
        Some(f) => stdio_call(f, ptr.cast_mut(), size, n, stream, false, false),
        None => 0,
    }
}
