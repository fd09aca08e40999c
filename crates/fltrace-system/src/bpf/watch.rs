//! What the in-kernel tools watch and for how long: the processes named with `-p`, a cgroup
//! or a task name, or a command started here (held before its exec until the probes are in
//! place); until a duration passes, an interrupt, or the processes end.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use fltrace_capture::PendingChild;

use super::{ProcessFilter, ProcessMaps};
use crate::{Error, Scope, procfs};

/// The processes, with the command forked and held before its exec.
pub struct Prepared {
    /// The filter the probes take: the pids given and the command's.
    pub filter: ProcessFilter,
    pending: Option<PendingChild>,
}

impl Prepared {
    /// Forks the command, if there is one (held until [`Prepared::start`]).
    pub fn new(scope: &Scope) -> Result<Prepared, Error> {
        let mut filter = ProcessFilter {
            tgids: scope.pids.clone(),
            cgroup: scope.cgroup.clone(),
            comm: scope.comm.clone(),
        };
        let pending = if scope.command.is_empty() {
            None
        } else {
            let child = PendingChild::spawn(&scope.command, None, &[])?;
            filter.tgids.push(child.pid() as u32);
            Some(child)
        };
        Ok(Prepared { filter, pending })
    }

    /// Ends the held command without running it (setting up the probes failed).
    pub fn abort(self) {
        if let Some(p) = self.pending {
            p.abort();
        }
    }

    /// Runs `set_up` (placing the probes), ending the held command if it fails.
    pub fn set_up<T>(
        self,
        set_up: impl FnOnce(&ProcessFilter) -> Result<T, Error>,
    ) -> Result<(T, Prepared), Error> {
        match set_up(&self.filter) {
            Ok(tool) => Ok((tool, self)),
            Err(e) => {
                self.abort();
                Err(e)
            }
        }
    }

    /// Lets the command run. It is ptrace-seized with PTRACE_O_TRACEEXIT only so that its
    /// mappings can be read at its exit, before the kernel drops them: its stacks are then
    /// named however quickly it ends.
    pub fn start(
        self,
        stop: std::sync::Arc<AtomicUsize>,
        duration: Option<Duration>,
        maps: Option<ProcessMaps>,
        pids: &[u32],
    ) -> Result<Watch, Error> {
        let child = match self.pending {
            Some(p) => {
                let pid = p.pid();
                // SAFETY: seizing our own child; failure leaves it untraced, which only
                // costs the names of a process that exits quickly.
                unsafe {
                    libc::ptrace(
                        libc::PTRACE_SEIZE,
                        pid,
                        0,
                        libc::PTRACE_O_TRACEEXIT as libc::c_long,
                    )
                };
                Some(p.release()?)
            }
            None => None,
        };
        Ok(Watch {
            child,
            maps,
            pids: pids.to_vec(),
            stop,
            started: Instant::now(),
            duration,
            ended: false,
        })
    }
}

/// A running watch; the command (if any) runs on to its end when it is dropped.
pub struct Watch {
    child: Option<i32>,
    /// Where the command's mappings are kept: read again when it stops at its exit.
    maps: Option<ProcessMaps>,
    /// Processes given with -p: watching ends when all have exited.
    pids: Vec<u32>,
    stop: std::sync::Arc<AtomicUsize>,
    started: Instant,
    duration: Option<Duration>,
    /// The processes watched (the -p ones, or the command) have all ended.
    ended: bool,
}

/// How often the stop conditions are looked at.
pub const POLL: Duration = Duration::from_millis(20);

impl Watch {
    /// Whether to stop: duration over, interrupted, or the command exited (reaped here).
    pub fn over(&mut self) -> bool {
        self.over_holding_exit(|_| {})
    }

    /// [`Watch::over`], running `at_exit` with the command's pid while it is held at its exit,
    /// its mappings still readable (a reader that lags behind the command catches up there).
    pub fn over_holding_exit(&mut self, at_exit: impl FnOnce(u32)) -> bool {
        if self.stop.load(Ordering::Relaxed) > 0
            || self.duration.is_some_and(|d| self.started.elapsed() >= d)
        {
            return true;
        }
        if !self.pids.is_empty() && self.pids.iter().all(|&p| !procfs::alive(p)) {
            self.ended = true;
            return true;
        }
        if let Some(pid) = self.child
            && let Some(status) = crate::child::wait(pid, libc::WNOHANG | libc::__WALL)
        {
            if !libc::WIFSTOPPED(status) {
                self.child = None;
                self.ended = true;
                return true;
            }
            let exiting = status >> 8 == (libc::SIGTRAP | (libc::PTRACE_EVENT_EXIT << 8));
            if exiting {
                if let Some(maps) = &self.maps {
                    maps.remember(pid as u32);
                }
                at_exit(pid as u32);
            }
            resume(pid, status);
        }
        false
    }

    /// Whether the watch ended because the processes watched did (not a duration or an
    /// interrupt).
    pub fn processes_ended(&self) -> bool {
        self.ended
    }

    /// Waits until [`Watch::over`].
    pub fn wait(&mut self) {
        while !self.over() {
            std::thread::sleep(POLL);
        }
    }
}

/// Resumes a stopped tracee: signals pass on, event stops carry none.
fn resume(pid: i32, status: i32) {
    let signal = if status >> 16 != 0 {
        0
    } else {
        libc::WSTOPSIG(status)
    };
    // SAFETY: resuming our own stopped tracee.
    unsafe { libc::ptrace(libc::PTRACE_CONT, pid, 0, signal as libc::c_long) };
}

impl Drop for Watch {
    fn drop(&mut self) {
        if let Some(pid) = self.child.take() {
            // The command runs on to its end after tracing stops; its stops are resumed.
            while let Some(status) = crate::child::wait(pid, libc::__WALL)
                && libc::WIFSTOPPED(status)
            {
                resume(pid, status);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    /// The hook runs once, after the command's exec and before the kernel drops its
    /// mappings: what a reader catching up there reads is the new image's.
    #[test]
    fn the_exit_hook_sees_the_commands_own_mappings() {
        let program = std::fs::canonicalize("/usr/bin/true").expect("coreutils' true");
        let scope = Scope {
            command: vec![program.clone().into_os_string()],
            ..Scope::all()
        };
        let prepared = Prepared::new(&scope).expect("the command forks");
        let mut watch = prepared
            .start(Arc::new(AtomicUsize::new(0)), None, None, &[])
            .expect("the command starts");
        let mut seen = Vec::new();
        while !watch.over_holding_exit(|pid| {
            let paths: Vec<String> = procfs::mappings(pid)
                .map(|maps| maps.into_iter().map(|m| m.path).collect())
                .unwrap_or_default();
            seen.push(paths);
        }) {
            std::thread::sleep(Duration::from_millis(1));
        }
        assert!(watch.processes_ended());
        assert_eq!(seen.len(), 1, "{seen:?}");
        let program = program.to_string_lossy();
        assert!(seen[0].iter().any(|p| *p == program), "{seen:?}");
    }
}
