//! Sockets: `recv`, `recvfrom`, `recvmsg`, `send`, `sendto`, `sendmsg` (a datagram is never
//! split).

use std::ffi::{c_int, c_void};

use super::pieces::{Data, More, lazy_call, lazy_call_with};
use super::{Buf, RANGES, errno, held_call, hold, missing, real, region_of, set_errno};

/// Whether a socket keeps message boundaries (a send of it must not be split).
pub(super) fn is_datagram(fd: c_int) -> bool {
    let mut kind: c_int = 0;
    let mut len = std::mem::size_of::<c_int>() as libc::socklen_t;
    // SAFETY: valid out-pointers of the sizes given.
    let ok = unsafe {
        libc::getsockopt(
            fd,
            libc::SOL_SOCKET,
            libc::SO_TYPE,
            (&raw mut kind).cast(),
            &mut len,
        )
    } == 0;
    !ok || kind != libc::SOCK_STREAM
}

/// The address length's bytes, when both pointers are given.
fn name_bufs(addr: *mut libc::sockaddr, len: *mut libc::socklen_t) -> [Buf; 2] {
    if addr.is_null() || len.is_null() {
        return [Buf::read(std::ptr::null(), 0); 2];
    }
    // SAFETY: C's contract: `len` points to the address buffer's size.
    let size = unsafe { *len } as usize;
    [
        Buf::written(addr.cast(), size),
        Buf::written(len.cast(), std::mem::size_of::<libc::socklen_t>()),
    ]
}

type RecvFromFn = unsafe extern "C" fn(
    c_int,
    *mut c_void,
    usize,
    c_int,
    *mut libc::sockaddr,
    *mut libc::socklen_t,
) -> isize;

fn receive(
    (fd, flags): (c_int, c_int),
    f: impl Fn(*mut c_void, usize) -> isize,
    buf: *mut c_void,
    len: usize,
    names: [Buf; 2],
) -> isize {
    let bufs = [Buf::written(buf, len), names[0], names[1]];
    let Some(region) = region_of(&bufs) else {
        return f(buf, len);
    };
    if is_datagram(fd) {
        // A datagram the kernel fails to copy is dropped: the buffer is made present whole
        // first.
        return held_call(Some(region), &bufs, || f(buf, len));
    }
    let held_names = hold(region, &names);
    let waitall = flags & libc::MSG_WAITALL != 0;
    let got = lazy_call_with(
        region,
        Data::One(buf as usize, len),
        true,
        More::Never,
        (fd, None, waitall),
        &mut |_, v| f(v[0].iov_base, v[0].iov_len),
    );
    let saved = errno();
    drop(held_names);
    set_errno(saved);
    got
}

/// # Safety
/// C's `recv`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn recv(fd: c_int, buf: *mut c_void, len: usize, flags: c_int) -> isize {
    let Some(f) = real!(
        c"recv",
        unsafe extern "C" fn(c_int, *mut c_void, usize, c_int) -> isize
    ) else {
        return missing() as isize;
    };
    let names = name_bufs(std::ptr::null_mut(), std::ptr::null_mut());
    // SAFETY: C's contract, passed on.
    receive(
        (fd, flags),
        |b, n| unsafe { f(fd, b, n, flags) },
        buf,
        len,
        names,
    )
}

/// # Safety
/// C's `recvfrom`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn recvfrom(
    fd: c_int,
    buf: *mut c_void,
    len: usize,
    flags: c_int,
    addr: *mut libc::sockaddr,
    addrlen: *mut libc::socklen_t,
) -> isize {
    let Some(f) = real!(c"recvfrom", RecvFromFn) else {
        return missing() as isize;
    };
    let names = name_bufs(addr, addrlen);
    // SAFETY: as above.
    receive(
        (fd, flags),
        |b, n| unsafe { f(fd, b, n, flags, addr, addrlen) },
        buf,
        len,
        names,
    )
}

fn send_with(
    fd: c_int,
    buf: *const c_void,
    len: usize,
    name: Buf,
    f: impl Fn(usize, usize) -> isize,
) -> isize {
    let bufs = [Buf::read(buf, len), name];
    let Some(region) = region_of(&bufs) else {
        return f(buf as usize, len);
    };
    if is_datagram(fd) {
        // A datagram goes whole or not at all.
        return held_call(Some(region), &bufs, || f(buf as usize, len));
    }
    let held_name = hold(region, &[name]);
    let sent = lazy_call(
        region,
        Data::One(buf as usize, len),
        false,
        More::WhileWhole,
        (fd, None),
        |_, v| f(v[0].iov_base as usize, v[0].iov_len),
    );
    let saved = errno();
    drop(held_name);
    set_errno(saved);
    sent
}

/// # Safety
/// C's `send`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn send(fd: c_int, buf: *const c_void, len: usize, flags: c_int) -> isize {
    let Some(f) = real!(
        c"send",
        unsafe extern "C" fn(c_int, *const c_void, usize, c_int) -> isize
    ) else {
        return missing() as isize;
    };
    // SAFETY: C's contract, passed on piece by piece.
    send_with(
        fd,
        buf,
        len,
        Buf::read(std::ptr::null(), 0),
        |at, n| unsafe { f(fd, at as *const c_void, n, flags) },
    )
}

/// # Safety
/// C's `sendto`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn sendto(
    fd: c_int,
    buf: *const c_void,
    len: usize,
    flags: c_int,
    addr: *const libc::sockaddr,
    addrlen: libc::socklen_t,
) -> isize {
    let Some(f) = real!(
        c"sendto",
        unsafe extern "C" fn(
            c_int,
            *const c_void,
            usize,
            c_int,
            *const libc::sockaddr,
            libc::socklen_t,
        ) -> isize
    ) else {
        return missing() as isize;
    };
    let name = Buf::read(
        addr.cast(),
        if addr.is_null() { 0 } else { addrlen as usize },
    );
    // SAFETY: as above.
    send_with(fd, buf, len, name, |at, n| unsafe {
        f(fd, at as *const c_void, n, flags, addr, addrlen)
    })
}

/// The buffers of a `msghdr`: itself, its name, its vector and buffers, its control data.
/// `None` when they are more than a call holds apart.
pub(super) fn message_bufs(
    msg: *const libc::msghdr,
    writes: bool,
    out: &mut [Buf; RANGES * 4],
) -> usize {
    if msg.is_null() {
        return 0;
    }
    // SAFETY: C's contract: a valid msghdr.
    let m = unsafe { &*msg };
    let mut n = 0;
    let mut push = |buf: Buf| {
        if n < out.len() && buf.len > 0 {
            out[n] = buf;
            n += 1;
        }
    };
    // The kernel writes the lengths and flags back (recvmsg).
    push(Buf {
        addr: msg as usize,
        len: std::mem::size_of::<libc::msghdr>(),
        writes,
    });
    push(Buf {
        addr: m.msg_name as usize,
        len: m.msg_namelen as usize,
        writes,
    });
    push(Buf {
        addr: m.msg_control as usize,
        len: m.msg_controllen,
        writes,
    });
    if !m.msg_iov.is_null() {
        push(Buf::read(
            m.msg_iov.cast(),
            m.msg_iovlen * std::mem::size_of::<libc::iovec>(),
        ));
        // SAFETY: C's contract: msg_iovlen iovecs.
        let iovs = unsafe { std::slice::from_raw_parts(m.msg_iov, m.msg_iovlen) };
        for v in iovs {
            push(Buf {
                addr: v.iov_base as usize,
                len: v.iov_len,
                writes,
            });
        }
    }
    n
}

/// # Safety
/// C's `recvmsg`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn recvmsg(fd: c_int, msg: *mut libc::msghdr, flags: c_int) -> isize {
    let Some(f) = real!(
        c"recvmsg",
        unsafe extern "C" fn(c_int, *mut libc::msghdr, c_int) -> isize
    ) else {
        return missing() as isize;
    };
    let mut bufs = [Buf::read(std::ptr::null(), 0); RANGES * 4];
    let n = message_bufs(msg, true, &mut bufs);
    // SAFETY: C's contract, passed on.
    held_call(region_of(&bufs[..n]), &bufs[..n], || unsafe {
        f(fd, msg, flags)
    })
}

/// # Safety
/// C's `sendmsg`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn sendmsg(fd: c_int, msg: *const libc::msghdr, flags: c_int) -> isize {
    let Some(f) = real!(
        c"sendmsg",
        unsafe extern "C" fn(c_int, *const libc::msghdr, c_int) -> isize
    ) else {
        return missing() as isize;
    };
    let mut bufs = [Buf::read(std::ptr::null(), 0); RANGES * 4];
    let n = message_bufs(msg, false, &mut bufs);
    // SAFETY: as above.
    held_call(region_of(&bufs[..n]), &bufs[..n], || unsafe {
        f(fd, msg, flags)
    })
}
