//! Programs started (`exec`, `posix_spawn`, `system`, `popen`): the kernel reads the path and
//! the arrays, and a spawned child (which shares the memory, with the default action for
//! SIGBUS) reads them too.

use std::ffi::{c_char, c_int};

use super::{Buf, Held, RANGES, errno, hold, missing, real, region_of, set_errno, string_buf};
use crate::sigbus;

/// Holds a path and NULL-terminated arrays of strings (and the arrays) for a call, in holds
/// of up to RANGES buffers each.
fn hold_args(path: *const c_char, arrays: &[*const *const c_char]) -> Vec<Held> {
    let mut bufs = Vec::new();
    bufs.push(string_buf(path));
    for &array in arrays {
        if array.is_null() {
            continue;
        }
        let mut count = 0;
        // SAFETY: C's contract: a NULL-terminated array of strings.
        while !unsafe { *array.add(count) }.is_null() {
            // SAFETY: as above.
            bufs.push(string_buf(unsafe { *array.add(count) }));
            count += 1;
        }
        bufs.push(Buf::read(
            array.cast(),
            (count + 1) * std::mem::size_of::<*const c_char>(),
        ));
    }
    bufs.retain(|b| b.len > 0);
    bufs.chunks(RANGES)
        .filter_map(|group| region_of(group).map(|region| hold(region, group)))
        .collect()
}

unsafe extern "C" {
    static environ: *const *const c_char;
}

fn environment() -> *const *const c_char {
    // SAFETY: the C library's environment pointer, read once.
    unsafe { environ }
}

/// Arguments and environment held while `call` runs (only with faults served in the thread).
fn with_args<R>(
    path: *const c_char,
    arrays: &[*const *const c_char],
    call: impl FnOnce() -> R,
) -> R {
    if !sigbus::active() {
        return call();
    }
    let held = hold_args(path, arrays);
    let result = call();
    let saved = errno();
    drop(held);
    set_errno(saved);
    result
}

type ExecveFn =
    unsafe extern "C" fn(*const c_char, *const *const c_char, *const *const c_char) -> c_int;
type ExecvFn = unsafe extern "C" fn(*const c_char, *const *const c_char) -> c_int;

/// # Safety
/// C's `execve`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn execve(
    path: *const c_char,
    argv: *const *const c_char,
    envp: *const *const c_char,
) -> c_int {
    let Some(f) = real!(c"execve", ExecveFn) else {
        return missing();
    };
    // SAFETY: C's contract, passed on.
    with_args(path, &[argv, envp], || unsafe { f(path, argv, envp) })
}

/// # Safety
/// C's `execvpe`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn execvpe(
    file: *const c_char,
    argv: *const *const c_char,
    envp: *const *const c_char,
) -> c_int {
    let Some(f) = real!(c"execvpe", ExecveFn) else {
        return missing();
    };
    // SAFETY: as above.
    with_args(file, &[argv, envp], || unsafe { f(file, argv, envp) })
}

/// # Safety
/// C's `execv`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn execv(path: *const c_char, argv: *const *const c_char) -> c_int {
    let Some(f) = real!(c"execv", ExecvFn) else {
        return missing();
    };
    // SAFETY: as above.
    with_args(path, &[argv, environment()], || unsafe { f(path, argv) })
}

/// # Safety
/// C's `execvp`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn execvp(file: *const c_char, argv: *const *const c_char) -> c_int {
    let Some(f) = real!(c"execvp", ExecvFn) else {
        return missing();
    };
    // SAFETY: as above.
    with_args(file, &[argv, environment()], || unsafe { f(file, argv) })
}

/// # Safety
/// C's `fexecve`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn fexecve(
    fd: c_int,
    argv: *const *const c_char,
    envp: *const *const c_char,
) -> c_int {
    let Some(f) = real!(
        c"fexecve",
        unsafe extern "C" fn(c_int, *const *const c_char, *const *const c_char) -> c_int
    ) else {
        return missing();
    };
    // SAFETY: as above.
    with_args(std::ptr::null(), &[argv, envp], || unsafe {
        f(fd, argv, envp)
    })
}

type SpawnFn = unsafe extern "C" fn(
    *mut libc::pid_t,
    *const c_char,
    *const libc::posix_spawn_file_actions_t,
    *const libc::posix_spawnattr_t,
    *const *const c_char,
    *const *const c_char,
) -> c_int;

/// # Safety
/// C's `posix_spawn`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn posix_spawn(
    pid: *mut libc::pid_t,
    path: *const c_char,
    actions: *const libc::posix_spawn_file_actions_t,
    attr: *const libc::posix_spawnattr_t,
    argv: *const *const c_char,
    envp: *const *const c_char,
) -> c_int {
    let Some(f) = real!(c"posix_spawn", SpawnFn) else {
        return libc::ENOSYS;
    };
    // SAFETY: as above.
    with_args(path, &[argv, envp], || unsafe {
        f(pid, path, actions, attr, argv, envp)
    })
}

/// # Safety
/// C's `posix_spawnp`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn posix_spawnp(
    pid: *mut libc::pid_t,
    file: *const c_char,
    actions: *const libc::posix_spawn_file_actions_t,
    attr: *const libc::posix_spawnattr_t,
    argv: *const *const c_char,
    envp: *const *const c_char,
) -> c_int {
    let Some(f) = real!(c"posix_spawnp", SpawnFn) else {
        return libc::ENOSYS;
    };
    // SAFETY: as above.
    with_args(file, &[argv, envp], || unsafe {
        f(pid, file, actions, attr, argv, envp)
    })
}

/// # Safety
/// C's `system`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn system(command: *const c_char) -> c_int {
    let Some(f) = real!(c"system", unsafe extern "C" fn(*const c_char) -> c_int) else {
        return missing();
    };
    // SAFETY: as above.
    with_args(command, &[environment()], || unsafe { f(command) })
}

/// # Safety
/// C's `popen`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn popen(command: *const c_char, mode: *const c_char) -> *mut libc::FILE {
    let Some(f) = real!(
        c"popen",
        unsafe extern "C" fn(*const c_char, *const c_char) -> *mut libc::FILE
    ) else {
        set_errno(libc::ENOSYS);
        return std::ptr::null_mut();
    };
    // SAFETY: as above.
    with_args(command, &[environment()], || unsafe { f(command, mode) })
}
