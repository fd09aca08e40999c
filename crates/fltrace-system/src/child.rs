//! The command a tool starts: waiting for it, the one place this crate calls waitpid(2).

/// The raw wait status of child `pid` once it has one to give (`flags`: `WNOHANG` polls,
/// `__WALL` also sees it stopped under ptrace), None while it has none or on error.
#[expect(
    clippy::disallowed_methods,
    reason = "the crate's one waitpid: capture's `reap` has no __WALL (ptraced children)"
)]
pub(crate) fn wait(pid: i32, flags: i32) -> Option<i32> {
    let mut status = 0;
    // SAFETY: waiting for our own child with a valid out-pointer.
    let ret = unsafe { libc::waitpid(pid, &mut status, flags) };
    (ret == pid).then_some(status)
}
