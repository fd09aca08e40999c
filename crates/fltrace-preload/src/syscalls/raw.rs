//! The calls whose buffers only their arguments' meaning tells: `ioctl`, `recvmmsg` and
//! `sendmmsg`, and raw `syscall(2)` for the calls above and `futex`.
//!
//! `ioctl` and `syscall` are also how this library itself reaches the kernel (its references
//! to them bind to these definitions, as the program's do), in signal handlers among other
//! places: what is not the program's far memory goes straight to the kernel with the
//! `syscall` instruction, as the C library's own definitions do, with no lookup of those.

use std::ffi::{c_int, c_long, c_uint, c_ulong, c_void};

use super::sockets::message_bufs;
use super::{Buf, RANGES, held_call, region_of, set_errno};

/// A system call with six arguments, the C library's way: -1 and `errno` on failure.
///
/// # Safety
/// The call's own contract.
unsafe fn raw(number: c_long, args: [c_long; 6]) -> c_long {
    let result: c_long;
    // SAFETY: the kernel's x86_64 calling convention; rcx and r11 are clobbered by it.
    unsafe {
        std::arch::asm!(
            "syscall",
            inlateout("rax") number => result,
            in("rdi") args[0], in("rsi") args[1], in("rdx") args[2],
            in("r10") args[3], in("r8") args[4], in("r9") args[5],
            lateout("rcx") _, lateout("r11") _,
            options(nostack),
        )
    };
    if (-4095..0).contains(&result) {
        set_errno(-result as c_int);
        return -1;
    }
    result
}

/// The bytes an `ioctl` request says its argument has: the size encoded in the request
/// (`_IOC_SIZE`), or for the requests older than that encoding, a small structure's worth
/// (an int, a `winsize`, a `termios`). Written when the kernel may write it (`_IOC_READ`, or
/// not said).
fn ioctl_buf(request: c_ulong, arg: usize) -> Buf {
    const DIR_SHIFT: u32 = 30;
    const SIZE_SHIFT: u32 = 16;
    const SIZE_MASK: c_ulong = (1 << 14) - 1;
    const READ: c_ulong = 2;
    const UNENCODED: usize = 64;
    let direction = request >> DIR_SHIFT;
    let size = ((request >> SIZE_SHIFT) & SIZE_MASK) as usize;
    let (len, writes) = if direction == 0 {
        (UNENCODED, true)
    } else {
        (size, direction & READ != 0)
    };
    Buf {
        addr: arg,
        len,
        writes,
    }
}

/// # Safety
/// C's `ioctl` (variadic in C: on x86_64 its argument travels in the register a fixed one
/// would).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ioctl(fd: c_int, request: c_ulong, arg: *mut c_void) -> c_int {
    let call = || {
        // SAFETY: C's contract, passed on.
        unsafe {
            raw(
                libc::SYS_ioctl,
                [fd as c_long, request as c_long, arg as c_long, 0, 0, 0],
            )
        }
    };
    let bufs = [ioctl_buf(request, arg as usize)];
    match region_of(&bufs) {
        None => call() as c_int,
        Some(region) => held_call(Some(region), &bufs, call) as c_int,
    }
}

/// Most buffers one `recvmmsg`/`sendmmsg` holds: messages beyond them are left for the next
/// call (both calls may handle fewer messages than asked, and say how many they did).
const MESSAGE_BUFS: usize = RANGES * 8;

/// The buffers of the first messages of `msgs` that fit in `out`; returns how many buffers
/// and how many messages.
fn messages_bufs(
    msgs: *mut libc::mmsghdr,
    count: c_uint,
    writes: bool,
    out: &mut [Buf; MESSAGE_BUFS],
) -> (usize, c_uint) {
    if msgs.is_null() {
        return (0, count);
    }
    let mut n = 0;
    let mut messages = 0;
    let mut one = [Buf::read(std::ptr::null(), 0); RANGES * 4];
    while messages < count {
        // SAFETY: C's contract: `count` messages.
        let msg = unsafe { msgs.add(messages as usize) };
        let len = message_bufs(msg.cast_const().cast(), writes, &mut one);
        // The message's buffers and its header, whose length the kernel writes back.
        if n + len + 1 > out.len() && messages > 0 {
            break;
        }
        out[n..n + len].copy_from_slice(&one[..len]);
        out[n + len] = Buf::written(msg.cast(), std::mem::size_of::<libc::mmsghdr>());
        n += len + 1;
        messages += 1;
    }
    (n, messages)
}

type MmsgFn =
    unsafe extern "C" fn(c_int, *mut libc::mmsghdr, c_uint, c_int, *mut libc::timespec) -> c_int;

fn mmsg_call(
    name: &'static std::ffi::CStr,
    cache: &std::sync::atomic::AtomicUsize,
    (fd, msgs, count, flags, timeout): (c_int, *mut libc::mmsghdr, c_uint, c_int, usize),
    writes: bool,
) -> c_int {
    let f = super::next_fn(name, cache);
    if f == 0 {
        return super::missing();
    }
    // SAFETY: the C library's function of that name has this type (C's declaration; the
    // timeout is only `recvmmsg`'s, and `sendmmsg` ignores a fifth argument).
    let f = unsafe { std::mem::transmute::<usize, MmsgFn>(f) };
    let mut bufs = [Buf::read(std::ptr::null(), 0); MESSAGE_BUFS];
    let (n, count) = messages_bufs(msgs, count, writes, &mut bufs);
    let timeout = timeout as *mut libc::timespec;
    // SAFETY: C's contract, passed on, for the messages whose buffers are held.
    held_call(region_of(&bufs[..n]), &bufs[..n], || unsafe {
        f(fd, msgs, count, flags, timeout)
    })
}

/// # Safety
/// C's `recvmmsg`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn recvmmsg(
    fd: c_int,
    msgs: *mut libc::mmsghdr,
    count: c_uint,
    flags: c_int,
    timeout: *mut libc::timespec,
) -> c_int {
    static CACHE: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    mmsg_call(
        c"recvmmsg",
        &CACHE,
        (fd, msgs, count, flags, timeout as usize),
        true,
    )
}

/// # Safety
/// C's `sendmmsg`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn sendmmsg(
    fd: c_int,
    msgs: *mut libc::mmsghdr,
    count: c_uint,
    flags: c_int,
) -> c_int {
    static CACHE: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    mmsg_call(c"sendmmsg", &CACHE, (fd, msgs, count, flags, 0), false)
}

/// The buffers of a raw `futex` call: its word, read by the kernel, and for the operations
/// that take a second one (requeue, wake-op, which writes it) that one.
fn futex_bufs(args: &[c_long; 6]) -> [Buf; 2] {
    let op = args[1] as c_int & libc::FUTEX_CMD_MASK;
    let word = std::mem::size_of::<u32>();
    let second = match op {
        libc::FUTEX_REQUEUE | libc::FUTEX_CMP_REQUEUE | libc::FUTEX_CMP_REQUEUE_PI => {
            Buf::read(args[4] as *const c_void, word)
        }
        libc::FUTEX_WAKE_OP => Buf::written(args[4] as *mut c_void, word),
        _ => Buf::read(std::ptr::null(), 0),
    };
    [Buf::written(args[0] as *mut c_void, word), second]
}

/// # Safety
/// C's `syscall` (variadic in C: on x86_64 its six arguments travel in the registers fixed
/// ones would; unused ones are whatever the caller left there, as for the C library's).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn syscall(
    number: c_long,
    a1: c_long,
    a2: c_long,
    a3: c_long,
    a4: c_long,
    a5: c_long,
    a6: c_long,
) -> c_long {
    let args = [a1, a2, a3, a4, a5, a6];
    let pointer = |a: c_long| a as *mut c_void;
    // The buffers each call covered here hands the kernel; any other call, or one whose
    // buffers are not the program's far memory (this library's own calls among them), goes
    // straight to the kernel.
    let bufs = match number {
        libc::SYS_read | libc::SYS_pread64 => [
            Buf::written(pointer(a2), a3 as usize),
            Buf::read(std::ptr::null(), 0),
        ],
        libc::SYS_getrandom => [
            Buf::written(pointer(a1), a2 as usize),
            Buf::read(std::ptr::null(), 0),
        ],
        libc::SYS_write | libc::SYS_pwrite64 => [
            Buf::read(pointer(a2), a3 as usize),
            Buf::read(std::ptr::null(), 0),
        ],
        libc::SYS_ioctl => [
            ioctl_buf(a2 as c_ulong, a3 as usize),
            Buf::read(std::ptr::null(), 0),
        ],
        libc::SYS_futex => futex_bufs(&args),
        // Their messages' buffers are gathered by their wrappers; the vector itself is here.
        libc::SYS_recvmmsg | libc::SYS_sendmmsg => [
            Buf::read(
                pointer(a2),
                a3 as usize * std::mem::size_of::<libc::mmsghdr>(),
            ),
            Buf::read(std::ptr::null(), 0),
        ],
        _ => [Buf::read(std::ptr::null(), 0); 2],
    };
    let Some(region) = region_of(&bufs) else {
        // SAFETY: C's contract for that call, passed on.
        return unsafe { raw(number, args) };
    };
    // SAFETY (every arm): C's contract for that call, passed on to this library's wrapper of
    // it, which holds its buffers and makes the same call.
    unsafe {
        match number {
            libc::SYS_read => {
                super::read_write::read(a1 as c_int, pointer(a2), a3 as usize) as c_long
            }
            libc::SYS_write => {
                super::read_write::write(a1 as c_int, pointer(a2), a3 as usize) as c_long
            }
            libc::SYS_pread64 => {
                super::read_write::pread64(a1 as c_int, pointer(a2), a3 as usize, a4) as c_long
            }
            libc::SYS_pwrite64 => {
                super::read_write::pwrite64(a1 as c_int, pointer(a2), a3 as usize, a4) as c_long
            }
            libc::SYS_ioctl => ioctl(a1 as c_int, a2 as c_ulong, pointer(a3)) as c_long,
            libc::SYS_recvmmsg => recvmmsg(
                a1 as c_int,
                pointer(a2).cast(),
                a3 as c_uint,
                a4 as c_int,
                pointer(a5).cast(),
            ) as c_long,
            libc::SYS_sendmmsg => {
                sendmmsg(a1 as c_int, pointer(a2).cast(), a3 as c_uint, a4 as c_int) as c_long
            }
            _ => held_call(Some(region), &bufs, || raw(number, args)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ioctl_sizes_come_from_the_request() {
        // FIONREAD predates the encoding: a small structure's worth, written.
        let unencoded = ioctl_buf(libc::FIONREAD, 0x1000);
        assert_eq!(
            (unencoded.addr, unencoded.len, unencoded.writes),
            (0x1000, 64, true)
        );
        // RNDGETENTCNT is _IOR('R', 0, int): 4 bytes the kernel writes.
        let read = ioctl_buf(0x8004_5200, 0x2000);
        assert_eq!((read.len, read.writes), (4, true));
        // RNDADDTOENTCNT is _IOW('R', 1, int): 4 bytes the kernel reads.
        let written = ioctl_buf(0x4004_5201, 0x2000);
        assert_eq!((written.len, written.writes), (4, false));
    }

    #[test]
    fn raw_calls_say_failure_through_errno() {
        // SAFETY: closing a descriptor that cannot be open.
        let result = unsafe { raw(libc::SYS_close, [-1, 0, 0, 0, 0, 0]) };
        assert_eq!((result, super::super::errno()), (-1, libc::EBADF));
        // SAFETY: getpid has no preconditions.
        let pid = unsafe { raw(libc::SYS_getpid, [0; 6]) };
        assert_eq!(pid, std::process::id() as c_long);
    }
}
