//! Signals: SIGBUS stays the runtime's, and is never blocked.

use std::ffi::c_int;

use super::{missing, real, set_errno};
use crate::sigbus;

/// The C library's `sigaction`.
pub fn real_sigaction(sig: c_int, act: *const libc::sigaction, old: *mut libc::sigaction) -> c_int {
    match real!(
        c"sigaction",
        unsafe extern "C" fn(c_int, *const libc::sigaction, *mut libc::sigaction) -> c_int
    ) {
        // SAFETY: C's contract, passed on.
        Some(f) => unsafe { f(sig, act, old) },
        None => missing(),
    }
}

/// # Safety
/// C's `sigaction`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn sigaction(
    sig: c_int,
    act: *const libc::sigaction,
    old: *mut libc::sigaction,
) -> c_int {
    if !sigbus::active() {
        return real_sigaction(sig, act, old);
    }
    if sig == libc::SIGBUS {
        if !old.is_null() {
            // SAFETY: C's contract: a writable sigaction.
            unsafe { *old = sigbus::program_action() };
        }
        if !act.is_null() {
            // SAFETY: C's contract: a valid sigaction.
            sigbus::set_program_action(unsafe { &*act });
        }
        return 0;
    }
    if act.is_null() {
        return real_sigaction(sig, act, old);
    }
    // No handler runs with SIGBUS blocked: a fault on the region in it would kill the
    // process instead of reaching the runtime's handler.
    // SAFETY: C's contract: a valid sigaction.
    let mut ours = unsafe { *act };
    if let Some(mask) = sigbus::without_bus(&ours.sa_mask) {
        ours.sa_mask = mask;
    }
    real_sigaction(sig, &ours, old)
}

type SignalFn = unsafe extern "C" fn(c_int, libc::sighandler_t) -> libc::sighandler_t;

/// `signal` and its BSD name: with SIGBUS, the program's action changes, not the process's.
fn bsd_signal_with(
    f: Option<SignalFn>,
    sig: c_int,
    handler: libc::sighandler_t,
) -> libc::sighandler_t {
    if sig == libc::SIGBUS && sigbus::active() {
        let old = sigbus::program_action().sa_sigaction;
        // SAFETY: sigaction is plain data; all-zero is valid.
        let mut action: libc::sigaction = unsafe { std::mem::zeroed() };
        action.sa_sigaction = handler;
        action.sa_flags = libc::SA_RESTART;
        sigbus::set_program_action(&action);
        return old;
    }
    match f {
        // SAFETY: C's contract, passed on.
        Some(f) => unsafe { f(sig, handler) },
        None => {
            set_errno(libc::ENOSYS);
            libc::SIG_ERR
        }
    }
}

/// # Safety
/// C's `signal`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn signal(sig: c_int, handler: libc::sighandler_t) -> libc::sighandler_t {
    bsd_signal_with(real!(c"signal", SignalFn), sig, handler)
}

/// # Safety
/// C's `bsd_signal`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn bsd_signal(sig: c_int, handler: libc::sighandler_t) -> libc::sighandler_t {
    bsd_signal_with(real!(c"bsd_signal", SignalFn), sig, handler)
}

/// # Safety
/// C's `sysv_signal`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn sysv_signal(
    sig: c_int,
    handler: libc::sighandler_t,
) -> libc::sighandler_t {
    if sig == libc::SIGBUS && sigbus::active() {
        let old = sigbus::program_action().sa_sigaction;
        // SAFETY: sigaction is plain data; all-zero is valid.
        let mut action: libc::sigaction = unsafe { std::mem::zeroed() };
        action.sa_sigaction = handler;
        action.sa_flags = libc::SA_RESETHAND | libc::SA_NODEFER;
        sigbus::set_program_action(&action);
        return old;
    }
    match real!(c"sysv_signal", SignalFn) {
        // SAFETY: C's contract, passed on.
        Some(f) => unsafe { f(sig, handler) },
        None => {
            set_errno(libc::ENOSYS);
            libc::SIG_ERR
        }
    }
}

type MaskFn = unsafe extern "C" fn(c_int, *const libc::sigset_t, *mut libc::sigset_t) -> c_int;

fn mask_with(
    f: Option<MaskFn>,
    how: c_int,
    set: *const libc::sigset_t,
    old: *mut libc::sigset_t,
) -> c_int {
    let Some(f) = f else {
        return missing();
    };
    let stripped = (how != libc::SIG_UNBLOCK)
        .then(|| sigbus::without_bus(set))
        .flatten();
    let set = stripped
        .as_ref()
        .map_or(set, |s| s as *const libc::sigset_t);
    // SAFETY: C's contract, passed on.
    unsafe { f(how, set, old) }
}

/// # Safety
/// C's `sigprocmask`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn sigprocmask(
    how: c_int,
    set: *const libc::sigset_t,
    old: *mut libc::sigset_t,
) -> c_int {
    mask_with(real!(c"sigprocmask", MaskFn), how, set, old)
}

/// # Safety
/// C's `pthread_sigmask`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn pthread_sigmask(
    how: c_int,
    set: *const libc::sigset_t,
    old: *mut libc::sigset_t,
) -> c_int {
    mask_with(real!(c"pthread_sigmask", MaskFn), how, set, old)
}

/// # Safety
/// C's `sigsuspend`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn sigsuspend(mask: *const libc::sigset_t) -> c_int {
    let Some(f) = real!(
        c"sigsuspend",
        unsafe extern "C" fn(*const libc::sigset_t) -> c_int
    ) else {
        return missing();
    };
    let stripped = sigbus::without_bus(mask);
    let mask = stripped
        .as_ref()
        .map_or(mask, |s| s as *const libc::sigset_t);
    // SAFETY: C's contract, passed on.
    unsafe { f(mask) }
}
