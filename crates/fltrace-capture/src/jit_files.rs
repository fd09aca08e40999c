//! Keeping the files in which JITs name their code: perf maps (`/tmp/perf-PID.map`) and
//! jitdumps (`jit-PID.dump`), copied into the recording when the process ends, since the
//! runtime or the next process of that pid deletes or overwrites them later.
//!
//! Both are opened while the process lives and held open, so that its end, a deletion or a
//! container's mount namespace going away does not lose them: a jitdump through
//! `/proc/PID/map_files` as soon as its mapping is seen (the JIT maps it as a marker for perf),
//! a perf map through `/proc/PID/root/tmp/perf-NSPID.map` (the process's own `/tmp` and its pid
//! in its own pid namespace, as perf reads it) once the process has mapped anonymous code, again
//! every [`POLL_INTERVAL`] until it is there. A process gone before that has its perf map read
//! from this namespace's `/tmp` at its end, as before.

use std::collections::HashMap;
use std::fs::File;
use std::io::{Read, Write};
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime};

use fltrace_trace::Mapping;

/// How often perf maps not found yet are looked for again.
pub(crate) const POLL_INTERVAL: Duration = Duration::from_millis(100);

/// How far before a process's start its perf map may seem written: file times come from a
/// coarse clock, a few milliseconds behind.
const MTIME_SLACK: Duration = Duration::from_millis(20);

/// What is known of one process's JIT files.
#[derive(Default)]
struct JitProcess {
    /// It mapped anonymous executable memory: a JIT's code, which a perf map may name.
    jit_code: bool,
    perf_map: Option<File>,
    jitdump: Option<File>,
    /// The jitdump's path as the process mapped it, where it could not be opened at once.
    jitdump_path: Option<String>,
    /// Its effective uid, which its perf map must belong to; read with its namespace pid.
    uid: Option<u32>,
    /// When it started: a perf map last written before was an earlier process's of its pid.
    started: Option<SystemTime>,
    /// Another process was given its pid: the files named by the pid from then on are that
    /// one's, so what was not opened by then is not looked for again.
    pid_reused: bool,
}

/// The JIT files of the traced processes.
#[derive(Default)]
pub(crate) struct JitFiles {
    processes: HashMap<u32, JitProcess>,
    last_poll: Option<Instant>,
}

/// Whether `path` names a jitdump, `jit-<pid>.dump` (perf's rule).
fn is_jitdump(path: &str) -> bool {
    let name = path.rsplit('/').next().unwrap_or(path);
    name.strip_prefix("jit-")
        .and_then(|rest| rest.strip_suffix(".dump"))
        .is_some_and(|pid| !pid.is_empty() && pid.bytes().all(|b| b.is_ascii_digit()))
}

/// The pid of `pid` in its own pid namespace and its effective uid, from `/proc/PID/status`.
fn ns_pid_and_uid(pid: u32) -> Option<(u32, u32)> {
    let status = crate::procfs::status(pid).ok()?;
    // Kernels before 4.1 give no NSpid: no pid namespaces to tell apart.
    Some((status.ns_pid.unwrap_or(pid), status.euid?))
}

/// Opens the perf map at `path` if it is a regular file of `uid` (never through a symbolic
/// link: the traced program could point one at any file) written since `started`: one left
/// by an earlier process of the pid would name other code.
fn open_perf_map(path: &Path, uid: Option<u32>, started: Option<SystemTime>) -> Option<File> {
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_CLOEXEC)
        .open(path)
        .ok()?;
    let metadata = file.metadata().ok()?;
    let owned = uid.is_none_or(|uid| metadata.uid() == uid);
    let stale = started.is_some_and(|started| {
        metadata
            .modified()
            .is_ok_and(|written| written + MTIME_SLACK < started)
    });
    (metadata.is_file() && owned && !stale).then_some(file)
}

impl JitFiles {
    /// A mapping of `pid` was seen: opens the jitdump it maps, or notes the JIT code.
    pub(crate) fn mapped(&mut self, pid: u32, mapping: &Mapping) {
        if !mapping.is_exec() {
            return;
        }
        if !mapping.is_file() {
            let process = self.processes.entry(pid).or_default();
            if !process.jit_code {
                process.jit_code = true;
                Self::look_for_perf_map(pid, process);
            }
            return;
        }
        if !is_jitdump(&mapping.path) {
            return;
        }
        let process = self.processes.entry(pid).or_default();
        let map_files = format!(
            "/proc/{pid}/map_files/{:x}-{:x}",
            mapping.start.get(),
            mapping.end.get()
        );
        let through_root = format!("/proc/{pid}/root{}", mapping.path);
        match [map_files, through_root]
            .iter()
            .find_map(|path| fltrace_trace::files::open_input(Path::new(path)).ok())
        {
            Some(file) => process.jitdump = Some(file),
            None => process.jitdump_path = Some(mapping.path.clone()),
        }
    }

    /// Opens `pid`'s perf map if it is there yet.
    fn look_for_perf_map(pid: u32, process: &mut JitProcess) {
        let Some((ns_pid, uid)) = ns_pid_and_uid(pid) else {
            return;
        };
        process.uid = Some(uid);
        if process.started.is_none() {
            process.started = crate::procfs::start_time(pid);
        }
        let path = PathBuf::from(format!("/proc/{pid}/root/tmp/perf-{ns_pid}.map"));
        process.perf_map = open_perf_map(&path, Some(uid), process.started);
    }

    /// Looks again for the perf maps not found yet, at most every [`POLL_INTERVAL`].
    pub(crate) fn poll(&mut self) {
        let now = Instant::now();
        if self
            .last_poll
            .is_some_and(|last| now.duration_since(last) < POLL_INTERVAL)
        {
            return;
        }
        self.last_poll = Some(now);
        for (&pid, process) in &mut self.processes {
            if process.jit_code && process.perf_map.is_none() && !process.pid_reused {
                Self::look_for_perf_map(pid, process);
            }
        }
    }

    /// Another process was given `pid`, of a process that ended: see
    /// [`JitProcess::pid_reused`].
    pub(crate) fn pid_reused(&mut self, pid: u32) {
        if let Some(process) = self.processes.get_mut(&pid) {
            process.pid_reused = true;
        }
    }

    /// Copies the perf map and jitdump of `pid`, which has ended, into the recording in
    /// `dir`. A file that cannot be copied costs its names, not the recording (said in the log).
    pub(crate) fn finish(&mut self, dir: &Path, pid: u32) {
        let mut process = self.processes.remove(&pid).unwrap_or_default();
        if process.pid_reused {
            // The files under its pid's names are the later process's now.
            process.jitdump_path = None;
        }
        // Only a process seen mapping JIT code has a perf map to look for: a map under the
        // pid of one that never did is a stale file of an earlier process given that pid.
        let perf_map = process.perf_map.or_else(|| {
            (process.jit_code && !process.pid_reused)
                .then(|| {
                    let path = format!("/tmp/perf-{pid}.map");
                    open_perf_map(Path::new(&path), process.uid, process.started)
                })
                .flatten()
        });
        if let Some(file) = perf_map {
            copy(
                file,
                &fltrace_trace::files::perf_map(dir, pid),
                fltrace_trace::perf_map::PERF_MAP_CAP,
            );
        }
        let jitdump = process.jitdump.or_else(|| {
            let path = process.jitdump_path?;
            match fltrace_trace::files::open_input(Path::new(&path)) {
                Ok(file) => Some(file),
                Err(e) => {
                    log::warn!(
                        "the jitdump of process {pid} is gone: {}",
                        fltrace_trace::error_chain(&e)
                    );
                    None
                }
            }
        });
        if let Some(file) = jitdump {
            copy(
                file,
                &fltrace_trace::files::jitdump(dir, pid),
                fltrace_trace::jitdump::JITDUMP_CAP,
            );
        }
    }
}

/// Copies `source` from its start into `output`, `cap` bytes at most (said when cut).
fn copy(source: File, output: &Path, cap: u64) {
    let result = fltrace_trace::files::create(output).and_then(|out| {
        let mut out = std::io::BufWriter::new(out);
        let copied = std::io::copy(&mut source.take(cap), &mut out)
            .and_then(|n| out.flush().map(|()| n))
            .map_err(|source| fltrace_trace::Error::Io {
                path: output.to_owned(),
                source,
            })?;
        Ok(copied)
    });
    match result {
        Ok(copied) if copied == cap => log::warn!(
            "{}: cut at {cap} bytes, the code named after that stays unnamed",
            output.display()
        ),
        Ok(_) => {}
        Err(e) => log::warn!("{}", fltrace_trace::error_chain(&e)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn jitdump_names_as_perf_finds_them() {
        assert!(is_jitdump("/app/jit-1234.dump"));
        assert!(is_jitdump("jit-1.dump"));
        assert!(!is_jitdump("/app/jit-.dump"));
        assert!(!is_jitdump("/app/jit-12a.dump"));
        assert!(!is_jitdump("/app/jit-12.dump.old"));
        assert!(!is_jitdump("/jit-1.dump/lib.so"));
    }

    /// A process whose pid went to another before its perf map was found: the map now under
    /// its pid's name is the later process's and is not copied as its own. Before, its end
    /// copied whatever `/tmp/perf-<pid>.map` held then.
    #[test]
    fn perf_map_of_a_reused_pid_is_not_taken() {
        // Above every pid: no process of the machine writes this map.
        let pid = fltrace_trace::files::PID_LIMIT + std::process::id();
        let map = PathBuf::from(format!("/tmp/perf-{pid}.map"));
        std::fs::write(&map, "1000 10 later_function\n").expect("perf map written");
        let dir = tempfile::tempdir().expect("tempdir");
        let copied = |reused: bool| {
            let mut files = JitFiles::default();
            let process = JitProcess {
                jit_code: true,
                ..JitProcess::default()
            };
            files.processes.insert(pid, process);
            if reused {
                files.pid_reused(pid);
            }
            let copy = fltrace_trace::files::perf_map(dir.path(), pid);
            let _ = std::fs::remove_file(&copy);
            files.finish(dir.path(), pid);
            copy.exists()
        };
        let (kept, reused) = (copied(false), copied(true));
        let _ = std::fs::remove_file(&map);
        assert_eq!((kept, reused), (true, false));
    }

    /// A process never seen mapping JIT code: a perf map under its pid was left by an earlier
    /// process of that pid and is not copied as its own. Before, a shell's recording kept the
    /// map a test's JIT workload had left hours earlier.
    #[test]
    fn perf_map_of_a_process_without_jit_code_is_not_taken() {
        let pid = fltrace_trace::files::PID_LIMIT + 1 + std::process::id();
        let map = PathBuf::from(format!("/tmp/perf-{pid}.map"));
        std::fs::write(&map, "1000 10 earlier_function\n").expect("perf map written");
        let dir = tempfile::tempdir().expect("tempdir");
        let mut files = JitFiles::default();
        files.processes.insert(pid, JitProcess::default());
        files.finish(dir.path(), pid);
        let copied = fltrace_trace::files::perf_map(dir.path(), pid).exists();
        let _ = std::fs::remove_file(&map);
        assert!(!copied);
    }

    /// A perf map under the pid of a JIT process, last written before the process started,
    /// was an earlier process's: it is not taken until written again. Before, it was copied
    /// as the process's and its names given to the JIT's code.
    #[test]
    fn perf_map_written_before_the_process_started_is_not_taken() {
        // This process's own pid: nothing else writes its map.
        let pid = std::process::id();
        let map = PathBuf::from(format!("/tmp/perf-{pid}.map"));
        let file = std::fs::File::create(&map).expect("perf map written");
        let hour_ago = SystemTime::now() - Duration::from_secs(3600);
        file.set_modified(hour_ago).expect("time set");
        let mut process = JitProcess {
            jit_code: true,
            ..JitProcess::default()
        };
        JitFiles::look_for_perf_map(pid, &mut process);
        let stale_taken = process.perf_map.is_some();
        file.set_modified(SystemTime::now()).expect("time set");
        JitFiles::look_for_perf_map(pid, &mut process);
        let fresh_taken = process.perf_map.is_some();
        let _ = std::fs::remove_file(&map);
        assert_eq!((stale_taken, fresh_taken), (false, true));
    }

    /// Our own status: the pid namespace of the tests is the machine's.
    #[test]
    fn reads_the_namespace_pid_and_uid() {
        let pid = std::process::id();
        // SAFETY: geteuid has no preconditions.
        let uid = unsafe { libc::geteuid() };
        assert_eq!(ns_pid_and_uid(pid), Some((pid, uid)));
    }
}
