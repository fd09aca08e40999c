//! `read` and `write`, at an offset (`pread`, `pwrite`) and on vectors (`readv` and the
//! rest): the buffers taken in pieces (`super::pieces`).

use std::ffi::{c_int, c_void};

use super::pieces::{Data, More, lazy_call};
use super::{Buf, errno, hold, missing, real, region_for, set_errno};
use crate::sigbus;

type ReadFn = unsafe extern "C" fn(c_int, *mut c_void, usize) -> isize;
type WriteFn = unsafe extern "C" fn(c_int, *const c_void, usize) -> isize;

/// # Safety
/// C's `read`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn read(fd: c_int, buf: *mut c_void, count: usize) -> isize {
    let Some(f) = real!(c"read", ReadFn) else {
        return missing() as isize;
    };
    match region_for(buf as usize, count) {
        // SAFETY: C's contract, passed on.
        None => unsafe { f(fd, buf, count) },
        Some(region) => lazy_call(
            region,
            Data::One(buf as usize, count),
            true,
            More::IfFile(fd),
            (fd, None),
            |_, v| {
                // SAFETY: a piece of the caller's buffer.
                unsafe { f(fd, v[0].iov_base, v[0].iov_len) }
            },
        ),
    }
}

/// # Safety
/// C's `write`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn write(fd: c_int, buf: *const c_void, count: usize) -> isize {
    let Some(f) = real!(c"write", WriteFn) else {
        return missing() as isize;
    };
    match region_for(buf as usize, count) {
        // SAFETY: C's contract, passed on.
        None => unsafe { f(fd, buf, count) },
        Some(region) => lazy_call(
            region,
            Data::One(buf as usize, count),
            false,
            More::WhileWhole,
            (fd, None),
            |_, v| {
                // SAFETY: a piece of the caller's buffer.
                unsafe { f(fd, v[0].iov_base, v[0].iov_len) }
            },
        ),
    }
}

type PreadFn = unsafe extern "C" fn(c_int, *mut c_void, usize, i64) -> isize;
type PwriteFn = unsafe extern "C" fn(c_int, *const c_void, usize, i64) -> isize;

fn pread_with(f: PreadFn, fd: c_int, buf: *mut c_void, count: usize, offset: i64) -> isize {
    match region_for(buf as usize, count) {
        // SAFETY: C's contract, passed on.
        None => unsafe { f(fd, buf, count, offset) },
        Some(region) => lazy_call(
            region,
            Data::One(buf as usize, count),
            true,
            More::IfFile(fd),
            (fd, Some(offset)),
            |done, v| {
                // SAFETY: a piece of the caller's buffer, at its offset in the file.
                unsafe { f(fd, v[0].iov_base, v[0].iov_len, offset + done as i64) }
            },
        ),
    }
}

fn pwrite_with(f: PwriteFn, fd: c_int, buf: *const c_void, count: usize, offset: i64) -> isize {
    match region_for(buf as usize, count) {
        // SAFETY: C's contract, passed on.
        None => unsafe { f(fd, buf, count, offset) },
        Some(region) => lazy_call(
            region,
            Data::One(buf as usize, count),
            false,
            More::WhileWhole,
            (fd, Some(offset)),
            |done, v| {
                // SAFETY: as above.
                unsafe { f(fd, v[0].iov_base, v[0].iov_len, offset + done as i64) }
            },
        ),
    }
}

/// # Safety
/// C's `pread`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn pread(fd: c_int, buf: *mut c_void, count: usize, offset: i64) -> isize {
    match real!(c"pread", PreadFn) {
        Some(f) => pread_with(f, fd, buf, count, offset),
        None => missing() as isize,
    }
}

/// # Safety
/// C's `pread64`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn pread64(fd: c_int, buf: *mut c_void, count: usize, offset: i64) -> isize {
    match real!(c"pread64", PreadFn) {
        Some(f) => pread_with(f, fd, buf, count, offset),
        None => missing() as isize,
    }
}

/// # Safety
/// C's `pwrite`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn pwrite(fd: c_int, buf: *const c_void, count: usize, offset: i64) -> isize {
    match real!(c"pwrite", PwriteFn) {
        Some(f) => pwrite_with(f, fd, buf, count, offset),
        None => missing() as isize,
    }
}

/// # Safety
/// C's `pwrite64`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn pwrite64(
    fd: c_int,
    buf: *const c_void,
    count: usize,
    offset: i64,
) -> isize {
    match real!(c"pwrite64", PwriteFn) {
        Some(f) => pwrite_with(f, fd, buf, count, offset),
        None => missing() as isize,
    }
}

// ---------------------------------------------------------------------------------------
// Vectors

/// A vector call (`readv` and the rest): the array held at once, the buffers as one run of
/// bytes (`lazy_call`), `call(done, iov, count)` for the buffers from byte `done` on.
fn vector_call(
    (fd, at): (c_int, Option<i64>),
    iov: *const libc::iovec,
    count: c_int,
    writes: bool,
    more: More,
    mut call: impl FnMut(usize, *const libc::iovec, c_int) -> isize,
) -> isize {
    let count_usize = usize::try_from(count).unwrap_or(0);
    if iov.is_null() || count_usize == 0 || !sigbus::active() {
        return call(0, iov, count);
    }
    // SAFETY: C's contract: `count` iovecs at `iov`.
    let iovs = unsafe { std::slice::from_raw_parts(iov, count_usize) };
    let array = Buf::read(iov.cast(), std::mem::size_of_val(iovs));
    let Some(region) = region_for(array.addr, array.len).or_else(|| {
        iovs.iter()
            .find_map(|v| region_for(v.iov_base as usize, v.iov_len))
    }) else {
        return call(0, iov, count);
    };
    // The array is read where it is (the pieces' arrays are copies on this stack).
    let held_array = region_for(array.addr, array.len).map(|region| hold(region, &[array]));
    let result = lazy_call(
        region,
        Data::Vector(iovs),
        writes,
        more,
        (fd, at),
        |done, segs| {
            if done == 0 && segs.len() == iovs.len() {
                call(0, iov, count)
            } else {
                call(done, segs.as_ptr(), segs.len() as c_int)
            }
        },
    );
    let saved = errno();
    drop(held_array);
    set_errno(saved);
    result
}

type VecFn = unsafe extern "C" fn(c_int, *const libc::iovec, c_int) -> isize;
type VecAtFn = unsafe extern "C" fn(c_int, *const libc::iovec, c_int, i64) -> isize;
type VecAt2Fn = unsafe extern "C" fn(c_int, *const libc::iovec, c_int, i64, c_int) -> isize;

/// # Safety
/// C's `readv`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn readv(fd: c_int, iov: *const libc::iovec, count: c_int) -> isize {
    let Some(f) = real!(c"readv", VecFn) else {
        return missing() as isize;
    };
    // SAFETY: C's contract, passed on piece by piece.
    vector_call(
        (fd, None),
        iov,
        count,
        true,
        More::IfFile(fd),
        |_, v, n| unsafe { f(fd, v, n) },
    )
}

/// # Safety
/// C's `writev`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn writev(fd: c_int, iov: *const libc::iovec, count: c_int) -> isize {
    let Some(f) = real!(c"writev", VecFn) else {
        return missing() as isize;
    };
    // SAFETY: as above.
    vector_call(
        (fd, None),
        iov,
        count,
        false,
        More::WhileWhole,
        |_, v, n| unsafe { f(fd, v, n) },
    )
}

macro_rules! vector_at {
    ($name:ident, $cname:literal, $writes:expr, $more:expr) => {
        /// # Safety
        /// C's function of this name.
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn $name(
            fd: c_int,
            iov: *const libc::iovec,
            count: c_int,
            offset: i64,
        ) -> isize {
            let Some(f) = real!($cname, VecAtFn) else {
                return missing() as isize;
            };
            // SAFETY: C's contract, passed on piece by piece at each piece's offset.
            vector_call(
                (fd, Some(offset)),
                iov,
                count,
                $writes,
                $more(fd),
                |done, v, n| unsafe { f(fd, v, n, offset + done as i64) },
            )
        }
    };
}

vector_at!(preadv, c"preadv", true, More::IfFile);
vector_at!(preadv64, c"preadv64", true, More::IfFile);
vector_at!(pwritev, c"pwritev", false, |_| More::WhileWhole);
vector_at!(pwritev64, c"pwritev64", false, |_| More::WhileWhole);

macro_rules! vector_at2 {
    ($name:ident, $cname:literal, $writes:expr, $more:expr) => {
        /// # Safety
        /// C's function of this name.
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn $name(
            fd: c_int,
            iov: *const libc::iovec,
            count: c_int,
            offset: i64,
            flags: c_int,
        ) -> isize {
            let Some(f) = real!($cname, VecAt2Fn) else {
                return missing() as isize;
            };
            // An offset of -1 means the file's own: pieces then follow on from it.
            // SAFETY: as above.
            let at = (offset >= 0).then_some(offset);
            vector_call(
                (fd, at),
                iov,
                count,
                $writes,
                $more(fd),
                |done, v, n| unsafe {
                    f(
                        fd,
                        v,
                        n,
                        if offset < 0 {
                            offset
                        } else {
                            offset + done as i64
                        },
                        flags,
                    )
                },
            )
        }
    };
}

vector_at2!(preadv2, c"preadv2", true, More::IfFile);
vector_at2!(preadv64v2, c"preadv64v2", true, More::IfFile);
vector_at2!(pwritev2, c"pwritev2", false, |_| More::WhileWhole);
vector_at2!(pwritev64v2, c"pwritev64v2", false, |_| More::WhileWhole);
