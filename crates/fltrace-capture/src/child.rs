//! The one guard over a command fltrace starts (the recorder's and `fltrace wss`'s): whatever
//! path leaves the command's owner early (an error after the fork, a panic), the command is
//! killed and reaped, never left stopped, a zombie, or running on untraced.

use std::ffi::OsString;
use std::os::unix::process::ExitStatusExt as _;
use std::process::ExitStatus;

use crate::Error;
use crate::target::PendingChild;

/// The status a shell gives a command that ended so, for fltrace to exit with: its exit code,
/// or 128 + the signal that killed it; 0 when no command ran or it was left running.
pub fn shell_status(status: Option<ExitStatus>) -> u8 {
    match status.map(|s| (s.code(), s.signal())) {
        // Exit codes are 0..=255 on Linux: the cast keeps them whole.
        Some((Some(code), _)) => code as u8,
        Some((None, Some(signal))) => 128u8.wrapping_add(signal as u8),
        Some((None, None)) => 1,
        None => 0,
    }
}

/// The command fltrace started, from its fork to its reaping. Dropped before it was reaped,
/// it is killed (SIGKILL) and reaped.
#[derive(Debug)]
pub struct ChildGuard(Option<Child>);

#[derive(Debug)]
enum Child {
    /// Forked, waiting to exec the command.
    Pending(PendingChild),
    /// Running the command.
    Running(i32),
}

impl ChildGuard {
    /// No command (a process attached to): nothing to guard.
    pub fn none() -> ChildGuard {
        ChildGuard(None)
    }

    /// A forked child not yet released to exec.
    pub fn pending(child: PendingChild) -> ChildGuard {
        ChildGuard(Some(Child::Pending(child)))
    }

    /// Starts `argv` (searched in `PATH`) now, as the user fltrace runs as; with its pid.
    pub fn start(argv: &[OsString]) -> Result<(ChildGuard, i32), Error> {
        let pending = PendingChild::spawn(argv, None, &[])?;
        let pid = pending.pid();
        let mut guard = ChildGuard::pending(pending);
        guard.release()?;
        Ok((guard, pid))
    }

    /// The command's pid, until it is reaped.
    pub fn pid(&self) -> Option<i32> {
        match &self.0 {
            Some(Child::Pending(child)) => Some(child.pid()),
            Some(Child::Running(pid)) => Some(*pid),
            None => None,
        }
    }

    /// Lets the child exec the command. A failed exec has reaped it already.
    pub fn release(&mut self) -> Result<(), Error> {
        if let Some(Child::Pending(child)) = self.0.take() {
            self.0 = Some(Child::Running(child.release()?));
        }
        Ok(())
    }

    /// The command has been reaped (its status collected): nothing is left to clean up.
    pub fn reaped(&mut self) {
        self.0 = None;
    }

    /// Waits for the running command to end and reaps it; `None` when there is none.
    pub fn wait(mut self) -> Result<Option<ExitStatus>, Error> {
        let Some(pid) = self.pid() else {
            return Ok(None);
        };
        self.release()?;
        let reaped = crate::os::reap(pid, true).map_err(Error::Wait)?;
        self.reaped();
        Ok(reaped.map(|reaped| reaped.status))
    }
}

impl Drop for ChildGuard {
    fn drop(&mut self) {
        match self.0.take() {
            Some(Child::Pending(child)) => child.abort(),
            Some(Child::Running(pid)) => crate::os::kill_and_reap(pid),
            None => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wait_gives_the_commands_exit_status() {
        let (child, pid) =
            ChildGuard::start(&["sh".into(), "-c".into(), "exit 3".into()]).expect("starting sh");
        assert_eq!(child.pid(), Some(pid));
        let status = child.wait().expect("waiting").expect("a status");
        assert_eq!(status.code(), Some(3));
        assert_eq!(
            ChildGuard::none().wait().expect("nothing to wait for"),
            None
        );
    }

    #[test]
    fn a_dropped_guard_kills_and_reaps_its_command() {
        let (child, pid) =
            ChildGuard::start(&["sleep".into(), "60".into()]).expect("starting sleep");
        drop(child);
        // Reaped: the pid is no longer our child (ECHILD), neither running nor a zombie.
        let error = crate::os::reap(pid, false).expect_err("reaped already");
        assert_eq!(error.raw_os_error(), Some(libc::ECHILD));
    }

    #[test]
    fn a_missing_program_is_a_spawn_error() {
        let error =
            ChildGuard::start(&["/nonexistent/fltrace-test".into()]).expect_err("no such program");
        assert_eq!(error.to_string(), "cannot run `/nonexistent/fltrace-test`");
    }

    /// A wait status holds the code in its second byte, or the signal in its low bits.
    #[test]
    fn shell_status_is_the_exit_code_or_128_plus_the_signal() {
        assert_eq!(shell_status(Some(ExitStatus::from_raw(3 << 8))), 3);
        assert_eq!(shell_status(Some(ExitStatus::from_raw(255 << 8))), 255);
        assert_eq!(shell_status(Some(ExitStatus::from_raw(0))), 0);
        assert_eq!(shell_status(Some(ExitStatus::from_raw(libc::SIGKILL))), 137);
        assert_eq!(shell_status(None), 0);
    }
}
