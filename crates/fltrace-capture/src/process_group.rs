//! The traced command as a process group: every process it starts is signalled with it, and
//! dies with the recorder even when the recorder is killed (`PR_SET_PDEATHSIG` reaches only
//! the command's first process, not the processes it starts).

use std::io;
use std::os::fd::{AsRawFd as _, OwnedFd};

use rustix::process::Signal;

/// The command's process group (its first process's pid), while the recording runs: a
/// watchdog process kills the whole group if the recorder dies before saying it is done.
#[derive(Debug)]
pub struct CommandGroup {
    pgid: i32,
    /// The write end of the watchdog's pipe: a byte says "done", end-of-file without one
    /// says the recorder died.
    watchdog: OwnedFd,
}

impl CommandGroup {
    /// The process group to signal.
    pub fn pgid(&self) -> i32 {
        self.pgid
    }

    /// Starts the watchdog of group `pgid`.
    pub(crate) fn watch(pgid: i32) -> io::Result<CommandGroup> {
        let (read_end, write_end) = crate::os::pipe_cloexec()?;
        let read_fd = read_end.as_raw_fd();
        // libc from fork to exit: rustix has no safe fork.
        // SAFETY: fork; the children below only make async-signal-safe calls.
        let middle = unsafe { libc::fork() };
        if middle < 0 {
            return Err(io::Error::last_os_error());
        }
        if middle == 0 {
            // SAFETY: in the forked children, system calls on plain values only.
            unsafe {
                // Forked twice so that the watchdog is nobody's zombie: the middle process
                // exits at once and the watchdog is adopted by init.
                if libc::fork() != 0 {
                    libc::_exit(0);
                }
                // Away from the recorder's terminal and signals (a Ctrl-C to the recorder's
                // group must not end it), its directory (a file system to unmount) and its
                // descriptors, the pipe's read end kept as 0.
                libc::setsid();
                libc::chdir(c"/".as_ptr());
                for signal in [
                    libc::SIGINT,
                    libc::SIGQUIT,
                    libc::SIGHUP,
                    libc::SIGTERM,
                    libc::SIGPIPE,
                ] {
                    libc::signal(signal, libc::SIG_IGN);
                }
                libc::dup2(read_fd, 0);
                libc::syscall(libc::SYS_close_range, 1u32, u32::MAX, 0u32);
                libc::prctl(libc::PR_SET_NAME, c"fltrace-watch".as_ptr());
                let mut byte = 0u8;
                loop {
                    let n = libc::read(0, (&mut byte as *mut u8).cast(), 1);
                    if n == 1 {
                        libc::_exit(0);
                    }
                    if n < 0 && *libc::__errno_location() == libc::EINTR {
                        continue;
                    }
                    // The recorder is gone without a word: so is its command.
                    libc::kill(-pgid, libc::SIGKILL);
                    libc::_exit(0);
                }
            }
        }
        drop(read_end);
        // The middle process exits at once; an error would mean it is reaped already.
        let _ = crate::os::reap(middle, true);
        Ok(CommandGroup {
            pgid,
            watchdog: write_end,
        })
    }

    /// Sends `signal` to every process of the group.
    pub(crate) fn signal(&self, signal: Signal) {
        crate::os::signal_group(self.pgid, signal);
    }
}

/// The recording is done with the command: the watchdog ends without killing.
impl Drop for CommandGroup {
    fn drop(&mut self) {
        // A watchdog gone already (killed) has nothing left to be told.
        let _ = rustix::io::write(&self.watchdog, &[1]);
    }
}

/// Whether this process's group is the foreground group of the terminal on its standard
/// input (an interactive shell's job).
pub(crate) fn owns_terminal() -> bool {
    let stdin = std::io::stdin();
    rustix::termios::isatty(&stdin)
        && rustix::termios::tcgetpgrp(&stdin).is_ok_and(|group| group == rustix::process::getpgrp())
}
