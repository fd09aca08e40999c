//! Uprobes defined in tracefs (`uprobe_events`) and opened as tracepoints, for events that
//! tasks inherit.
//!
//! The uprobe PMU cannot be inherited: the kernel builds a child's copy of each event at fork
//! and clone by reading the probed file's name again from `config1`, a pointer into the memory
//! of the process that opened the event, but in the forking process (and checks that process's
//! privileges). Every fork or thread creation of a traced program then failed with EFAULT.
//! A tracefs definition is named once, when it is written here; its tracepoint id is all a copy
//! needs (as `perf probe` events, which `perf record` inherits).

use std::collections::HashSet;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

/// Where tracefs is (mounted if it is not), when it can define uprobes.
fn tracefs_root() -> std::io::Result<PathBuf> {
    let root = crate::perf_abi::tracefs()?;
    if root.join("uprobe_events").exists() {
        Ok(root)
    } else {
        Err(std::io::Error::new(
            std::io::ErrorKind::NotFound,
            format!(
                "{} has no uprobe_events (a kernel without CONFIG_UPROBE_EVENTS)",
                root.display()
            ),
        ))
    }
}

/// The events of this process's probes are in the group `fltrace_<pid>`.
const GROUP_PREFIX: &str = "fltrace_";

/// Probe names unique in this process (several tracers can run in one fltrace).
static NEXT_NAME: AtomicU64 = AtomicU64::new(0);

/// Uprobe definitions of this process, removed when dropped: drop it after the perf events
/// opened on them are closed (the kernel refuses to remove a probe in use).
pub struct TracefsUprobes {
    root: PathBuf,
    group: String,
    names: Vec<String>,
}

impl TracefsUprobes {
    /// Finds tracefs, and removes the probes left behind by fltrace processes that are gone (a
    /// crash or a kill skips the removal).
    pub fn new() -> std::io::Result<TracefsUprobes> {
        let root = tracefs_root()?;
        remove_orphans(&root);
        Ok(TracefsUprobes {
            root,
            group: format!("{GROUP_PREFIX}{}", std::process::id()),
            names: Vec::new(),
        })
    }

    /// Defines a probe (or a return probe) at `offset` of `file`; its tracepoint id.
    pub fn define(&mut self, file: &Path, offset: u64, is_return: bool) -> std::io::Result<u64> {
        let file = file.to_str().filter(|f| !f.contains(char::is_whitespace));
        let Some(file) = file else {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                "tracefs takes no file name with a space or a non-UTF-8 byte",
            ));
        };
        let name = format!("p{}", NEXT_NAME.fetch_add(1, Ordering::Relaxed));
        let kind = if is_return { 'r' } else { 'p' };
        let definition = format!("{kind}:{}/{name} {file}:{offset:#x}\n", self.group);
        write_definition(&self.root, &definition)?;
        self.names.push(name);
        let name = self.names.last().map(String::as_str).unwrap_or_default();
        let id = self
            .root
            .join("events")
            .join(&self.group)
            .join(name)
            .join("id");
        std::fs::read_to_string(&id)?
            .trim()
            .parse()
            .map_err(|_| std::io::Error::new(std::io::ErrorKind::InvalidData, "unreadable id"))
    }
}

impl Drop for TracefsUprobes {
    fn drop(&mut self) {
        for name in &self.names {
            // Nothing to do if it fails: the next fltrace removes it as an orphan.
            let _ = write_definition(&self.root, &format!("-:{}/{name}\n", self.group));
        }
    }
}

/// Appends one line to uprobe_events (writing without O_APPEND would remove every probe).
fn write_definition(root: &Path, line: &str) -> std::io::Result<()> {
    std::fs::OpenOptions::new()
        .append(true)
        .open(root.join("uprobe_events"))?
        .write_all(line.as_bytes())
}

/// Removes the probes of `fltrace_<pid>` groups whose process is gone.
fn remove_orphans(root: &Path) {
    let Ok(defined) = std::fs::read_to_string(root.join("uprobe_events")) else {
        return;
    };
    let mut alive = HashSet::new();
    for line in defined.lines() {
        // "p:fltrace_123/p4 /usr/lib/x86_64-linux-gnu/libc.so.6:0x..."
        let Some((group, name)) = line
            .split_whitespace()
            .next()
            .and_then(|probe| probe.split_once(':'))
            .and_then(|(_, event)| event.split_once('/'))
        else {
            continue;
        };
        let Some(pid) = group
            .strip_prefix(GROUP_PREFIX)
            .and_then(|p| p.parse::<u32>().ok())
        else {
            continue;
        };
        if alive.contains(&pid) {
            continue;
        }
        if Path::new(&format!("/proc/{pid}")).exists() {
            alive.insert(pid);
            continue;
        }
        let _ = write_definition(root, &format!("-:{group}/{name}\n"));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The C library's `malloc`: a file and an offset tracefs accepts.
    fn malloc_of_libc() -> (PathBuf, u64) {
        let maps = std::fs::read_to_string("/proc/self/maps").expect("own maps");
        let libc = maps
            .lines()
            .filter_map(|l| l.split_whitespace().nth(5))
            .find(|p| p.contains("/libc.so"))
            .map(PathBuf::from)
            .expect("a C library");
        let offsets = crate::uprobes::function_offsets(&libc, &["malloc"]).expect("libc's ELF");
        let offset = offsets[0].expect("malloc's offset");
        (libc, offset)
    }

    fn defined() -> String {
        std::fs::read_to_string(tracefs_root().expect("tracefs").join("uprobe_events"))
            .expect("uprobe_events")
    }

    /// Defined probes have an id and are gone once dropped; a group of a process that is gone
    /// (an fltrace killed) is removed by the next one.
    #[test]
    fn probes_are_removed_when_dropped_and_orphans_by_the_next() {
        let (libc, offset) = malloc_of_libc();
        let mut probes = TracefsUprobes::new().expect("tracefs");
        let entry = probes.define(&libc, offset, false).expect("an entry probe");
        let exit = probes.define(&libc, offset, true).expect("a return probe");
        assert_ne!(entry, exit);
        // Other tests of this process define probes in the same group: these two by name.
        let ours: Vec<String> = probes
            .names
            .iter()
            .map(|name| format!(":{}/{name} ", probes.group))
            .collect();
        assert_eq!(ours.len(), 2);
        assert!(ours.iter().all(|p| defined().contains(p)), "{}", defined());
        drop(probes);
        assert!(!ours.iter().any(|p| defined().contains(p)), "{}", defined());

        // No process has this pid (above the kernel's largest pid_max).
        let orphan = format!("{GROUP_PREFIX}4294967295");
        let line = format!("p:{orphan}/p0 {}:{offset:#x}\n", libc.display());
        write_definition(&tracefs_root().expect("tracefs"), &line).expect("an orphan defined");
        let next = TracefsUprobes::new().expect("tracefs");
        assert!(!defined().contains(&format!(":{orphan}/")), "{}", defined());
        drop(next);
    }
}
