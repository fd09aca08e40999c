//! Waiting for descriptors: `epoll_wait`, `epoll_pwait`, `poll`, `ppoll`, `select`,
//! `pselect` (the kernel writes the events and the sets).

use std::ffi::c_int;

use super::{Buf, held_call, missing, real, region_of};
use crate::sigbus;

/// # Safety
/// C's `epoll_wait`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn epoll_wait(
    epfd: c_int,
    events: *mut libc::epoll_event,
    max: c_int,
    timeout: c_int,
) -> c_int {
    let Some(f) = real!(
        c"epoll_wait",
        unsafe extern "C" fn(c_int, *mut libc::epoll_event, c_int, c_int) -> c_int
    ) else {
        return missing();
    };
    let len = usize::try_from(max).unwrap_or(0) * std::mem::size_of::<libc::epoll_event>();
    let bufs = [Buf::written(events.cast(), len)];
    // SAFETY: C's contract, passed on.
    held_call(region_of(&bufs), &bufs, || unsafe {
        f(epfd, events, max, timeout)
    })
}

/// # Safety
/// C's `epoll_pwait`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn epoll_pwait(
    epfd: c_int,
    events: *mut libc::epoll_event,
    max: c_int,
    timeout: c_int,
    sigmask: *const libc::sigset_t,
) -> c_int {
    let Some(f) = real!(
        c"epoll_pwait",
        unsafe extern "C" fn(
            c_int,
            *mut libc::epoll_event,
            c_int,
            c_int,
            *const libc::sigset_t,
        ) -> c_int
    ) else {
        return missing();
    };
    let stripped = sigbus::without_bus(sigmask);
    let sigmask = stripped
        .as_ref()
        .map_or(sigmask, |s| s as *const libc::sigset_t);
    let len = usize::try_from(max).unwrap_or(0) * std::mem::size_of::<libc::epoll_event>();
    let bufs = [Buf::written(events.cast(), len)];
    // SAFETY: as above.
    held_call(region_of(&bufs), &bufs, || unsafe {
        f(epfd, events, max, timeout, sigmask)
    })
}

/// # Safety
/// C's `poll`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn poll(fds: *mut libc::pollfd, nfds: libc::nfds_t, timeout: c_int) -> c_int {
    let Some(f) = real!(
        c"poll",
        unsafe extern "C" fn(*mut libc::pollfd, libc::nfds_t, c_int) -> c_int
    ) else {
        return missing();
    };
    let bufs = [Buf::written(
        fds.cast(),
        nfds as usize * std::mem::size_of::<libc::pollfd>(),
    )];
    // SAFETY: as above.
    held_call(region_of(&bufs), &bufs, || unsafe { f(fds, nfds, timeout) })
}

/// # Safety
/// C's `ppoll`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ppoll(
    fds: *mut libc::pollfd,
    nfds: libc::nfds_t,
    timeout: *const libc::timespec,
    sigmask: *const libc::sigset_t,
) -> c_int {
    let Some(f) = real!(
        c"ppoll",
        unsafe extern "C" fn(
            *mut libc::pollfd,
            libc::nfds_t,
            *const libc::timespec,
            *const libc::sigset_t,
        ) -> c_int
    ) else {
        return missing();
    };
    let stripped = sigbus::without_bus(sigmask);
    let sigmask = stripped
        .as_ref()
        .map_or(sigmask, |s| s as *const libc::sigset_t);
    let bufs = [
        Buf::written(
            fds.cast(),
            nfds as usize * std::mem::size_of::<libc::pollfd>(),
        ),
        Buf::read(
            timeout.cast(),
            if timeout.is_null() {
                0
            } else {
                std::mem::size_of::<libc::timespec>()
            },
        ),
    ];
    // SAFETY: as above.
    held_call(region_of(&bufs), &bufs, || unsafe {
        f(fds, nfds, timeout, sigmask)
    })
}

fn fd_set_bufs(sets: [*mut libc::fd_set; 3], timeout: Buf) -> [Buf; 4] {
    let set = |p: *mut libc::fd_set| {
        Buf::written(
            p.cast(),
            if p.is_null() {
                0
            } else {
                std::mem::size_of::<libc::fd_set>()
            },
        )
    };
    [set(sets[0]), set(sets[1]), set(sets[2]), timeout]
}

/// # Safety
/// C's `select`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn select(
    nfds: c_int,
    r: *mut libc::fd_set,
    w: *mut libc::fd_set,
    e: *mut libc::fd_set,
    timeout: *mut libc::timeval,
) -> c_int {
    let Some(f) = real!(
        c"select",
        unsafe extern "C" fn(
            c_int,
            *mut libc::fd_set,
            *mut libc::fd_set,
            *mut libc::fd_set,
            *mut libc::timeval,
        ) -> c_int
    ) else {
        return missing();
    };
    let bufs = fd_set_bufs(
        [r, w, e],
        Buf::written(
            timeout.cast(),
            if timeout.is_null() {
                0
            } else {
                std::mem::size_of::<libc::timeval>()
            },
        ),
    );
    // SAFETY: as above.
    held_call(region_of(&bufs), &bufs, || unsafe {
        f(nfds, r, w, e, timeout)
    })
}

/// # Safety
/// C's `pselect`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn pselect(
    nfds: c_int,
    r: *mut libc::fd_set,
    w: *mut libc::fd_set,
    e: *mut libc::fd_set,
    timeout: *const libc::timespec,
    sigmask: *const libc::sigset_t,
) -> c_int {
    let Some(f) = real!(
        c"pselect",
        unsafe extern "C" fn(
            c_int,
            *mut libc::fd_set,
            *mut libc::fd_set,
            *mut libc::fd_set,
            *const libc::timespec,
            *const libc::sigset_t,
        ) -> c_int
    ) else {
        return missing();
    };
    let stripped = sigbus::without_bus(sigmask);
    let sigmask = stripped
        .as_ref()
        .map_or(sigmask, |s| s as *const libc::sigset_t);
    let bufs = fd_set_bufs(
        [r, w, e],
        Buf::read(
            timeout.cast(),
            if timeout.is_null() {
                0
            } else {
                std::mem::size_of::<libc::timespec>()
            },
        ),
    );
    // SAFETY: as above.
    held_call(region_of(&bufs), &bufs, || unsafe {
        f(nfds, r, w, e, timeout, sigmask)
    })
}
