//! Whose events a system tool sees: one meaning for every tool, whichever mechanism counts.

use std::ffi::OsString;
use std::path::PathBuf;

/// The processes named with `-p` (each with its threads and the children it starts), a
/// command started here (with its children), narrowed to a cgroup and to a task name; with
/// neither processes nor a command, every process (of the cgroup, of the name).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Scope {
    /// Processes named with `-p`, with their threads and the children they start.
    pub pids: Vec<u32>,
    /// Only tasks of this cgroup directory.
    pub cgroup: Option<PathBuf>,
    /// Only threads of this name (`comm`).
    pub comm: Option<String>,
    /// A command to start and trace, with its children; the tool ends when it exits.
    pub command: Vec<OsString>,
}

impl Scope {
    /// The whole system.
    pub fn all() -> Scope {
        Scope::default()
    }

    /// Whether processes are named (-p or a command): events are then opened on them, and
    /// their user stacks DWARF-unwound in user space rather than walked by frame pointers in
    /// the kernel.
    pub fn names_processes(&self) -> bool {
        !self.pids.is_empty() || !self.command.is_empty()
    }

    /// Whether only processes named by pid or started here are asked about (no cgroup, no
    /// task name): memleak then reads their allocations with DWARF-unwound stacks.
    pub fn only_named_processes(&self) -> bool {
        self.names_processes() && self.cgroup.is_none() && self.comm.is_none()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn processes_are_named_by_pid_or_command_without_a_cgroup() {
        let pid = Scope {
            pids: vec![7],
            ..Scope::default()
        };
        assert!(pid.names_processes() && pid.only_named_processes());
        let command = Scope {
            command: vec!["true".into()],
            ..Scope::default()
        };
        assert!(command.names_processes() && command.only_named_processes());
        let named = Scope {
            comm: Some("x".into()),
            ..pid.clone()
        };
        assert!(named.names_processes() && !named.only_named_processes());
        let cgroup = Scope {
            cgroup: Some("/sys/fs/cgroup/x".into()),
            ..pid
        };
        assert!(cgroup.names_processes() && !cgroup.only_named_processes());
        let whole_cgroup = Scope {
            cgroup: Some("/sys/fs/cgroup/x".into()),
            ..Scope::default()
        };
        assert!(!whole_cgroup.names_processes());
        assert!(!Scope::all().names_processes());
    }
}
