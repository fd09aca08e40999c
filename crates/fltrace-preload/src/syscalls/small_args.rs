//! Wrappers of the C library's calls whose small arguments the kernel reads or writes in the
//! program's memory: paths (`open`, `stat`, `rename`...), addresses of sockets, the structs
//! the kernel fills (`stat`, `pipe`'s descriptors). With faults served in the faulting thread
//! the kernel's access to a missing page of them fails (`EFAULT`): each is held resident and
//! touched first, as the buffers of the other `crate::syscalls` wrappers are (the whole of
//! each: they are small, and the kernel reads or writes all of them).

use std::ffi::{c_char, c_int, c_uint, c_void};

use crate::syscalls::{Buf, held_call, real, region_of, set_errno, string_buf};

/// The bytes of a `T` at `p` that the kernel writes (none for a null pointer).
fn out<T>(p: *mut T) -> Buf {
    Buf::written(
        p.cast(),
        if p.is_null() {
            0
        } else {
            std::mem::size_of::<T>()
        },
    )
}

/// The bytes of a `T` at `p` that the kernel reads (none for a null pointer).
fn input<T>(p: *const T) -> Buf {
    Buf::read(
        p.cast(),
        if p.is_null() {
            0
        } else {
            std::mem::size_of::<T>()
        },
    )
}

/// A wrapper: the C library's function `$cname`, its arguments' buffers held for the call;
/// `$fail` (errno ENOSYS) where the C library lacks it.
macro_rules! held {
    ($name:ident, $cname:literal, ($($arg:ident: $ty:ty),*) -> $ret:ty, [$($buf:expr),*], $fail:expr) => {
        /// # Safety
        /// C's function of this name.
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn $name($($arg: $ty),*) -> $ret {
            let Some(f) = real!($cname, unsafe extern "C" fn($($ty),*) -> $ret) else {
                set_errno(libc::ENOSYS);
                return $fail;
            };
            let bufs = [$($buf),*];
            // SAFETY: C's contract, passed on.
            held_call(region_of(&bufs), &bufs, || unsafe { f($($arg),*) })
        }
    };
}

// Opening files. `open`'s mode is variadic in C: on x86_64 a variadic integer travels in the
// register a fixed one would, so it is declared outright and passed on (read by the kernel
// only with O_CREAT or O_TMPFILE).
held!(open, c"open", (path: *const c_char, flags: c_int, mode: c_uint) -> c_int, [string_buf(path)], -1);
held!(open64, c"open64", (path: *const c_char, flags: c_int, mode: c_uint) -> c_int, [string_buf(path)], -1);
held!(openat, c"openat", (dirfd: c_int, path: *const c_char, flags: c_int, mode: c_uint) -> c_int,
    [string_buf(path)], -1);
held!(openat64, c"openat64", (dirfd: c_int, path: *const c_char, flags: c_int, mode: c_uint) -> c_int,
    [string_buf(path)], -1);
held!(creat, c"creat", (path: *const c_char, mode: libc::mode_t) -> c_int, [string_buf(path)], -1);
held!(fopen, c"fopen", (path: *const c_char, mode: *const c_char) -> *mut libc::FILE,
    [string_buf(path), string_buf(mode)], std::ptr::null_mut());
held!(fopen64, c"fopen64", (path: *const c_char, mode: *const c_char) -> *mut libc::FILE,
    [string_buf(path), string_buf(mode)], std::ptr::null_mut());
held!(freopen, c"freopen",
    (path: *const c_char, mode: *const c_char, stream: *mut libc::FILE) -> *mut libc::FILE,
    [string_buf(path), string_buf(mode)], std::ptr::null_mut());
held!(opendir, c"opendir", (path: *const c_char) -> *mut libc::DIR, [string_buf(path)],
    std::ptr::null_mut());

// Names.
held!(rename, c"rename", (old: *const c_char, new: *const c_char) -> c_int,
    [string_buf(old), string_buf(new)], -1);
held!(renameat, c"renameat",
    (olddir: c_int, old: *const c_char, newdir: c_int, new: *const c_char) -> c_int,
    [string_buf(old), string_buf(new)], -1);
held!(renameat2, c"renameat2",
    (olddir: c_int, old: *const c_char, newdir: c_int, new: *const c_char, flags: c_uint) -> c_int,
    [string_buf(old), string_buf(new)], -1);
held!(link, c"link", (old: *const c_char, new: *const c_char) -> c_int,
    [string_buf(old), string_buf(new)], -1);
held!(linkat, c"linkat",
    (olddir: c_int, old: *const c_char, newdir: c_int, new: *const c_char, flags: c_int) -> c_int,
    [string_buf(old), string_buf(new)], -1);
held!(symlink, c"symlink", (target: *const c_char, path: *const c_char) -> c_int,
    [string_buf(target), string_buf(path)], -1);
held!(symlinkat, c"symlinkat", (target: *const c_char, dirfd: c_int, path: *const c_char) -> c_int,
    [string_buf(target), string_buf(path)], -1);
held!(unlink, c"unlink", (path: *const c_char) -> c_int, [string_buf(path)], -1);
held!(unlinkat, c"unlinkat", (dirfd: c_int, path: *const c_char, flags: c_int) -> c_int,
    [string_buf(path)], -1);
held!(remove, c"remove", (path: *const c_char) -> c_int, [string_buf(path)], -1);
held!(mkdir, c"mkdir", (path: *const c_char, mode: libc::mode_t) -> c_int, [string_buf(path)], -1);
held!(mkdirat, c"mkdirat", (dirfd: c_int, path: *const c_char, mode: libc::mode_t) -> c_int,
    [string_buf(path)], -1);
held!(rmdir, c"rmdir", (path: *const c_char) -> c_int, [string_buf(path)], -1);
held!(chdir, c"chdir", (path: *const c_char) -> c_int, [string_buf(path)], -1);
held!(access, c"access", (path: *const c_char, mode: c_int) -> c_int, [string_buf(path)], -1);
held!(faccessat, c"faccessat", (dirfd: c_int, path: *const c_char, mode: c_int, flags: c_int) -> c_int,
    [string_buf(path)], -1);
held!(chmod, c"chmod", (path: *const c_char, mode: libc::mode_t) -> c_int, [string_buf(path)], -1);
held!(fchmodat, c"fchmodat",
    (dirfd: c_int, path: *const c_char, mode: libc::mode_t, flags: c_int) -> c_int,
    [string_buf(path)], -1);
held!(chown, c"chown", (path: *const c_char, uid: libc::uid_t, gid: libc::gid_t) -> c_int,
    [string_buf(path)], -1);
held!(truncate, c"truncate", (path: *const c_char, len: libc::off_t) -> c_int, [string_buf(path)], -1);
held!(readlink, c"readlink", (path: *const c_char, buf: *mut c_char, size: usize) -> isize,
    [string_buf(path), Buf::written(buf.cast(), size)], -1);
held!(readlinkat, c"readlinkat",
    (dirfd: c_int, path: *const c_char, buf: *mut c_char, size: usize) -> isize,
    [string_buf(path), Buf::written(buf.cast(), size)], -1);
held!(getcwd, c"getcwd", (buf: *mut c_char, size: usize) -> *mut c_char,
    [Buf::written(buf.cast(), if buf.is_null() { 0 } else { size })], std::ptr::null_mut());

// Files' status.
held!(stat, c"stat", (path: *const c_char, st: *mut libc::stat) -> c_int,
    [string_buf(path), out(st)], -1);
held!(stat64, c"stat64", (path: *const c_char, st: *mut libc::stat64) -> c_int,
    [string_buf(path), out(st)], -1);
held!(lstat, c"lstat", (path: *const c_char, st: *mut libc::stat) -> c_int,
    [string_buf(path), out(st)], -1);
held!(lstat64, c"lstat64", (path: *const c_char, st: *mut libc::stat64) -> c_int,
    [string_buf(path), out(st)], -1);
held!(fstat, c"fstat", (fd: c_int, st: *mut libc::stat) -> c_int, [out(st)], -1);
held!(fstat64, c"fstat64", (fd: c_int, st: *mut libc::stat64) -> c_int, [out(st)], -1);
held!(fstatat, c"fstatat",
    (dirfd: c_int, path: *const c_char, st: *mut libc::stat, flags: c_int) -> c_int,
    [string_buf(path), out(st)], -1);
held!(fstatat64, c"fstatat64",
    (dirfd: c_int, path: *const c_char, st: *mut libc::stat64, flags: c_int) -> c_int,
    [string_buf(path), out(st)], -1);
held!(statx, c"statx",
    (dirfd: c_int, path: *const c_char, flags: c_int, mask: c_uint, st: *mut libc::statx) -> c_int,
    [string_buf(path), out(st)], -1);
held!(statfs, c"statfs", (path: *const c_char, st: *mut libc::statfs) -> c_int,
    [string_buf(path), out(st)], -1);
held!(statvfs, c"statvfs", (path: *const c_char, st: *mut libc::statvfs) -> c_int,
    [string_buf(path), out(st)], -1);

// Descriptors and sockets.
held!(pipe, c"pipe", (fds: *mut [c_int; 2]) -> c_int, [out(fds)], -1);
held!(pipe2, c"pipe2", (fds: *mut [c_int; 2], flags: c_int) -> c_int, [out(fds)], -1);
held!(socketpair, c"socketpair",
    (domain: c_int, kind: c_int, protocol: c_int, fds: *mut [c_int; 2]) -> c_int, [out(fds)], -1);
held!(bind, c"bind", (fd: c_int, addr: *const libc::sockaddr, len: libc::socklen_t) -> c_int,
    [Buf::read(addr.cast(), len as usize)], -1);
held!(connect, c"connect", (fd: c_int, addr: *const libc::sockaddr, len: libc::socklen_t) -> c_int,
    [Buf::read(addr.cast(), len as usize)], -1);
held!(accept, c"accept",
    (fd: c_int, addr: *mut libc::sockaddr, len: *mut libc::socklen_t) -> c_int,
    [address(addr, len), out(len)], -1);
held!(accept4, c"accept4",
    (fd: c_int, addr: *mut libc::sockaddr, len: *mut libc::socklen_t, flags: c_int) -> c_int,
    [address(addr, len), out(len)], -1);
held!(getsockname, c"getsockname",
    (fd: c_int, addr: *mut libc::sockaddr, len: *mut libc::socklen_t) -> c_int,
    [address(addr, len), out(len)], -1);
held!(getpeername, c"getpeername",
    (fd: c_int, addr: *mut libc::sockaddr, len: *mut libc::socklen_t) -> c_int,
    [address(addr, len), out(len)], -1);
held!(getsockopt, c"getsockopt",
    (fd: c_int, level: c_int, name: c_int, value: *mut c_void, len: *mut libc::socklen_t) -> c_int,
    [address(value.cast(), len), out(len)], -1);
held!(setsockopt, c"setsockopt",
    (fd: c_int, level: c_int, name: c_int, value: *const c_void, len: libc::socklen_t) -> c_int,
    [Buf::read(value, len as usize)], -1);
held!(getrandom, c"getrandom", (buf: *mut c_void, len: usize, flags: c_uint) -> isize,
    [Buf::written(buf, len)], -1);
held!(waitpid, c"waitpid", (pid: libc::pid_t, status: *mut c_int, options: c_int) -> libc::pid_t,
    [out(status)], -1);
held!(wait4, c"wait4",
    (pid: libc::pid_t, status: *mut c_int, options: c_int, usage: *mut libc::rusage) -> libc::pid_t,
    [out(status), out(usage)], -1);
held!(uname, c"uname", (buf: *mut libc::utsname) -> c_int, [out(buf)], -1);
held!(nanosleep, c"nanosleep", (req: *const libc::timespec, rem: *mut libc::timespec) -> c_int,
    [input(req), out(rem)], -1);
held!(clock_nanosleep, c"clock_nanosleep",
    (clock: libc::clockid_t, flags: c_int, req: *const libc::timespec, rem: *mut libc::timespec) -> c_int,
    [input(req), out(rem)], libc::ENOSYS);

/// A socket address buffer of the size `*len` says (none for null pointers).
fn address(addr: *mut libc::sockaddr, len: *mut libc::socklen_t) -> Buf {
    if addr.is_null() || len.is_null() {
        return Buf::read(std::ptr::null(), 0);
    }
    // SAFETY: C's contract: `len` points to the buffer's size (reading it may fault, served
    // in this thread).
    Buf::written(addr.cast(), unsafe { *len } as usize)
}

/// # Safety
/// C's `sigaltstack`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn sigaltstack(
    stack: *const libc::stack_t,
    old: *mut libc::stack_t,
) -> c_int {
    let Some(f) = real!(
        c"sigaltstack",
        unsafe extern "C" fn(*const libc::stack_t, *mut libc::stack_t) -> c_int
    ) else {
        set_errno(libc::ENOSYS);
        return -1;
    };
    // An alternate signal stack in the region (the program allocated it): the kernel writes
    // the signal frames there itself, and a missing page would end the process (SIGSEGV) on
    // the in-thread path. It is kept local, as far as the share kept local allows.
    if !stack.is_null()
        && crate::sigbus::active()
        // SAFETY: C's contract: a valid stack_t.
        && let stack_t = unsafe { &*stack }
        && stack_t.ss_flags & libc::SS_DISABLE == 0
        && let Some(region) = crate::region_any().filter(|r| r.contains(stack_t.ss_sp as usize))
    {
        region.make_local(stack_t.ss_sp as usize, stack_t.ss_size);
    }
    let bufs = [input(stack), out(old)];
    // SAFETY: C's contract, passed on.
    held_call(region_of(&bufs), &bufs, || unsafe { f(stack, old) })
}
