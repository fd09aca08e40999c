//! The process's end when `main` leaves through `pthread_exit`. glibc ends a process
//! (`exit(0)`) when its last thread returns, but the handler threads are threads too: with
//! only them left the process would live on for ever, serving no one. An idle handler looks
//! now and then, and ends it as glibc would have.

use core::ffi::c_void;
use core::sync::atomic::{AtomicBool, Ordering};

/// How long an idle handler waits for a fault before looking whether the program is gone.
pub const IDLE_CHECK_MS: i32 = 200;

/// Set once the process is being ended.
static EXITING: AtomicBool = AtomicBool::new(false);

/// If none of the program's threads is left (the main thread exited, a zombie, and only the
/// handlers run), ends the process with `exit(0)`, as glibc does after the last thread: the
/// program's `atexit` handlers run and its streams are flushed. From a thread of its own,
/// so that the handlers still serve the faults those handlers take on far memory.
pub fn end_if_only_handlers_left() {
    if EXITING.load(Ordering::Relaxed) || !only_handlers_left() {
        return;
    }
    if EXITING.swap(true, Ordering::AcqRel) {
        return;
    }
    let mut thread: libc::pthread_t = 0;
    // SAFETY: a plain function pointer and no argument.
    let error = unsafe {
        libc::pthread_create(
            &mut thread,
            core::ptr::null(),
            exit_main,
            core::ptr::null_mut(),
        )
    };
    if error != 0 {
        // No thread to spare: exit from here, which serves no fault meanwhile.
        // SAFETY: ending the process as glibc would.
        unsafe { libc::exit(0) };
    }
}

extern "C" fn exit_main(_: *mut c_void) -> *mut c_void {
    // SAFETY: ending the process as glibc would after its last thread.
    unsafe { libc::exit(0) }
}

/// Whether `/proc/self/stat` says the main thread is a zombie and every other thread is a
/// handler. Read with plain system calls into a buffer on the stack: nothing allocated.
fn only_handlers_left() -> bool {
    let mut buf = [0u8; 1024];
    // SAFETY: a NUL-terminated path; reading into a buffer of its size; closing our own fd.
    let len = unsafe {
        let fd = libc::open(
            c"/proc/self/stat".as_ptr(),
            libc::O_RDONLY | libc::O_CLOEXEC,
        );
        if fd < 0 {
            return false;
        }
        let n = crate::sys::read(fd, buf.as_mut_ptr(), buf.len());
        libc::close(fd);
        n
    };
    let Ok(len) = usize::try_from(len) else {
        return false;
    };
    match parse_stat(&buf[..len]) {
        Some((state, threads)) => state == b'Z' && threads == 1 + crate::breakdown::handler_count(),
        None => false,
    }
}

/// The state letter and thread count of a `/proc/PID/stat` line.
fn parse_stat(stat: &[u8]) -> Option<(u8, u64)> {
    // The name in parentheses may hold anything: the fields follow the last `)`.
    let close = stat.iter().rposition(|&b| b == b')')?;
    let mut fields = stat[close + 1..]
        .split(|&b| b == b' ')
        .filter(|f| !f.is_empty());
    let state = *fields.next()?.first()?;
    // num_threads is the 20th field, the 18th after the name.
    let threads = fields.nth(16)?;
    let mut value = 0u64;
    for &digit in threads {
        if !digit.is_ascii_digit() {
            return None;
        }
        value = value
            .checked_mul(10)?
            .checked_add(u64::from(digit - b'0'))?;
    }
    Some((state, value))
}

#[cfg(test)]
mod tests {
    use super::parse_stat;

    #[test]
    fn state_and_thread_count_follow_the_last_parenthesis() {
        let line = b"4242 (a) b (c)) Z 1 4242 4242 0 -1 4194560 0 0 0 0 0 0 0 0 20 0 3 0 1\n";
        assert_eq!(parse_stat(line), Some((b'Z', 3)));
        assert_eq!(parse_stat(b"1 (x) S 0"), None);
    }
}
