//! Finding recordings in a directory and loading a process's trace.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::SystemTime;

use crate::tables::TableReader;
use crate::{
    AllocEvent, AllocRowGroups, Completeness, Error, Fault, FaultKey, FaultRowGroups, Mapping,
    Stack, completeness, files, read_allocs, read_faults, read_mappings, read_stacks,
};

/// Footer keys of the faults file ([`FORMAT`](keys::FORMAT) is in every table's footer).
pub mod keys {
    /// The table layout, [`FORMAT_VERSION`](crate::FORMAT_VERSION); absent in layout 1.
    pub const FORMAT: &str = "fltrace.format";
    /// Identifies one `fltrace record` run; shared by all processes it traced.
    pub const SESSION: &str = "fltrace.session";
    /// Start of the run, nanoseconds since the Unix epoch.
    pub const START_NS: &str = "fltrace.start_ns";
    /// The traced command line, arguments joined by spaces.
    pub const COMMAND: &str = "fltrace.command";
    /// The parent process id, when the process was forked during the run.
    pub const PARENT: &str = "fltrace.parent";
    /// The pid the kernel gave the process, when its files name another: a process that
    /// reused the pid of an earlier one of the run ([`files::reused_pid`](crate::files::reused_pid)).
    pub const OS_PID: &str = "fltrace.os_pid";
    /// Version of fltrace that wrote the file.
    pub const VERSION: &str = "fltrace.version";
    /// The name (`comm`) of each thread, one line per thread and address-space generation:
    /// `<generation> <tid> <comm>` (the comm as the kernel last named the thread in that
    /// generation: exec names it after the program, `prctl(PR_SET_NAME)` renames it).
    /// Absent in recordings made before fltrace stored names.
    pub const THREADS: &str = "fltrace.threads";
    /// In a checkpoint footer only (never in a finished file's last footer): the offset just
    /// past the previous checkpoint's footer, 0 for the first.
    pub const CHECKPOINT: &str = "fltrace.checkpoint";
    /// The CRC-32 (IEEE) of each column chunk the footer describes, 8 hexadecimal digits,
    /// row group by row group and column by column, separated by spaces.
    pub const CRC32: &str = "fltrace.crc32";
    /// The keys with which fltrace reads a file, not part of what the recording says.
    pub const INTERNAL: [&str; 2] = [CHECKPOINT, CRC32];
}

/// A table without its final footer, read up to its last checkpoint: one the recorder never
/// finished, or one of a finished recording cut since (a copy that stopped short).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnfinishedTable {
    /// The table's kind: `faults`, `stacks`, ...
    pub kind: &'static str,
    /// The process.
    pub pid: u32,
    /// The file.
    pub path: PathBuf,
    /// Rows recovered.
    pub rows: u64,
    /// The file's bytes.
    pub len: u64,
    /// Where its last intact checkpoint ends: what follows is lost.
    pub checkpoint_end: u64,
    /// Its size when the recording finished, from the checksums file: `Some` for a file cut
    /// since, `None` for a recording never finished.
    pub finished_len: Option<u64>,
}

/// What identifies a recording.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecordingId {
    /// Unique id of the run.
    pub id: String,
    /// Start, nanoseconds since the Unix epoch.
    pub start_ns: u64,
    /// The traced command line.
    pub command: String,
}

/// One `fltrace record` run: the processes it traced, found by their faults files.
#[derive(Debug, Clone)]
pub struct Recording {
    /// The directory holding the files.
    pub dir: PathBuf,
    /// Its identity.
    pub session: RecordingId,
    pids: Vec<u32>,
    /// When its newest faults file was last written.
    modified: Option<SystemTime>,
}

/// An error and its sources, in one line, without the file's name.
fn error_without_path(error: &Error) -> String {
    match error {
        // These say only the file's name, given beside.
        Error::Io { source, .. } => crate::error_chain(source),
        Error::Parquet { source, .. } => crate::error_chain(source),
        Error::Format { message, .. } => message.clone(),
        other => crate::error_chain(other),
    }
}

/// A faults file that could not be read.
#[derive(Debug)]
pub struct Unreadable {
    /// The file.
    pub path: PathBuf,
    /// Why.
    pub error: Error,
    modified: Option<SystemTime>,
}

/// The error for an unreadable faults file: that its recording is corrupt when it finished
/// (its checksums say so), else that it cannot be read.
fn unreadable_or_corrupt(dir: &Path, broken: Unreadable) -> Error {
    let pid = broken
        .path
        .file_name()
        .and_then(|n| n.to_str())
        .and_then(|n| files::pid_of(n, "faults", "parquet"));
    if let Some(pid) = pid
        && let Err(corrupt @ Error::Corrupt { .. }) = crate::checksums::verify(dir, pid)
    {
        return corrupt;
    }
    Error::Unreadable {
        path: broken.path,
        reason: error_without_path(&broken.error),
    }
}

impl Recording {
    /// Every recording in `dir`, oldest first. A faults file that cannot be read is left out
    /// (see [`list_all`](Self::list_all)).
    pub fn list(dir: &Path) -> Result<Vec<Recording>, Error> {
        Ok(Self::list_all(dir)?.0)
    }

    /// Every recording in `dir`, oldest first, and the faults files that cannot be read.
    pub fn list_all(dir: &Path) -> Result<(Vec<Recording>, Vec<Unreadable>), Error> {
        let mut sessions: BTreeMap<(u64, String), Recording> = BTreeMap::new();
        let mut unreadable = Vec::new();
        for entry in std::fs::read_dir(dir).map_err(Error::io(dir))? {
            let entry = entry.map_err(Error::io(dir))?;
            let name = entry.file_name();
            let Some(pid) = name
                .to_str()
                .and_then(|n| files::pid_of(n, "faults", "parquet"))
            else {
                continue;
            };
            // Through links (a read-only recording is read through a directory of links to
            // it); a dangling one by its own.
            let modified = std::fs::metadata(entry.path())
                .or_else(|_| entry.metadata())
                .and_then(|m| m.modified())
                .ok();
            let table = match TableReader::open(&entry.path()) {
                Ok(table) => table,
                Err(error) => {
                    unreadable.push(Unreadable {
                        path: entry.path(),
                        error,
                        modified,
                    });
                    continue;
                }
            };
            let meta = table.metadata();
            let get = |key: &str| {
                meta.iter()
                    .find(|(k, _)| k == key)
                    .map(|(_, v)| v.clone())
                    .unwrap_or_default()
            };
            let session = RecordingId {
                id: get(keys::SESSION),
                start_ns: get(keys::START_NS).parse().unwrap_or(0),
                command: get(keys::COMMAND),
            };
            let recording = sessions
                .entry((session.start_ns, session.id.clone()))
                .or_insert_with(|| Recording {
                    dir: dir.to_owned(),
                    session,
                    pids: Vec::new(),
                    modified: None,
                });
            recording.pids.push(pid);
            recording.modified = recording.modified.max(modified);
        }
        let mut recordings: Vec<Recording> = sessions.into_values().collect();
        for recording in &mut recordings {
            recording.pids.sort_unstable();
        }
        unreadable.sort_by_key(|u| u.modified);
        Ok((recordings, unreadable))
    }

    /// The most recent recording in `dir`. A faults file that cannot be read and is not older
    /// than that recording is an error naming it: an older recording is never analysed in
    /// place of a newer one unsaid.
    pub fn latest(dir: &Path) -> Result<Recording, Error> {
        let (mut recordings, unreadable) = Self::list_all(dir)?;
        let latest = recordings.pop();
        let newest_modified = latest.as_ref().and_then(|r| r.modified);
        if let Some(broken) = unreadable
            .into_iter()
            .rev()
            .find(|u| latest.is_none() || u.modified >= newest_modified)
        {
            return Err(unreadable_or_corrupt(dir, broken));
        }
        latest.ok_or_else(|| Error::NoRecording(dir.to_owned()))
    }

    /// The most recent recording in `dir` that traced `pid`.
    pub fn with_pid(dir: &Path, pid: u32) -> Result<Recording, Error> {
        let (recordings, unreadable) = Self::list_all(dir)?;
        if let Some(broken) = unreadable
            .into_iter()
            .find(|u| u.path == files::faults(dir, pid))
        {
            return Err(unreadable_or_corrupt(dir, broken));
        }
        recordings
            .into_iter()
            .rev()
            .find(|r| r.pids.contains(&pid))
            .ok_or(Error::NoSuchProcess(pid))
    }

    /// The tables of this recording that were never finished (the recorder died first), by
    /// kind (`faults`, `stacks`...), pid and the rows recovered from each.
    pub fn unfinished_tables(&self) -> Result<Vec<UnfinishedTable>, Error> {
        let mut unfinished = Vec::new();
        for &pid in &self.pids {
            for kind in [
                "faults",
                "stacks",
                "mmaps",
                "allocs",
                "allocstacks",
                "allocsums",
            ] {
                let path = files::path(&self.dir, kind, pid, "parquet");
                if !path.is_file() {
                    continue;
                }
                if let Completeness::Recovered { rows, lost_bytes } = completeness(&path)? {
                    let len = std::fs::metadata(&path).map_err(Error::io(&path))?.len();
                    let name = path
                        .file_name()
                        .map(|n| n.to_string_lossy().into_owned())
                        .unwrap_or_default();
                    unfinished.push(UnfinishedTable {
                        kind,
                        pid,
                        rows,
                        len,
                        checkpoint_end: len.saturating_sub(lost_bytes),
                        finished_len: crate::checksums::recorded_size(&self.dir, pid, &name),
                        path,
                    });
                }
            }
        }
        Ok(unfinished)
    }

    /// The traced processes, ascending.
    pub fn pids(&self) -> &[u32] {
        &self.pids
    }

    /// The processes a command's `-p` picks: that one, or every process traced.
    pub fn chosen_pids(&self, pid: Option<u32>) -> Vec<u32> {
        match pid {
            Some(pid) => vec![pid],
            None => self.pids.clone(),
        }
    }

    /// The first process of the run: the command fltrace started or attached to.
    pub fn root_pid(&self) -> Option<u32> {
        self.session
            .id
            .split('-')
            .next()
            .and_then(|p| p.parse().ok())
            .filter(|p| self.pids.contains(p))
            .or_else(|| self.pids.first().copied())
    }

    /// Loads the trace of one process.
    pub fn load(&self, pid: u32) -> Result<ProcessTrace, Error> {
        self.check_pid(pid)?;
        let (faults, metadata) = read_faults(&files::faults(&self.dir, pid))?;
        self.assemble(pid, faults, metadata)
    }

    /// Loads the trace of one process without its faults (`faults` is empty; the footer
    /// metadata is read): stream them with [`Recording::fault_keys`], so that memory stays
    /// proportional to the stacks, not to the faults.
    pub fn load_without_faults(&self, pid: u32) -> Result<ProcessTrace, Error> {
        Ok(self.load_streaming_allocs(pid)?.0)
    }

    /// [`Recording::load_without_faults`] and [`Recording::fault_keys`] with the faults file
    /// opened once: the trace without its faults, and their keys to stream.
    pub fn load_streaming(
        &self,
        pid: u32,
    ) -> Result<(ProcessTrace, FaultRowGroups<FaultKey>), Error> {
        let row_groups = self.fault_keys(pid)?;
        let trace = self.assemble(pid, Vec::new(), row_groups.metadata())?;
        Ok((trace, row_groups))
    }

    /// As [`Recording::load_streaming`], without the allocation events either (`allocs` is
    /// empty; their stacks are read): stream them with [`Recording::alloc_row_groups`].
    pub fn load_streaming_allocs(
        &self,
        pid: u32,
    ) -> Result<(ProcessTrace, FaultRowGroups<FaultKey>), Error> {
        let row_groups = self.fault_keys(pid)?;
        let mut trace = self.assemble_with(pid, Vec::new(), row_groups.metadata(), false)?;
        trace.alloc_stacks = self.alloc_stacks(pid)?;
        Ok((trace, row_groups))
    }

    /// As [`Recording::load`], without the allocation events (`allocs` is empty; their stacks
    /// are read): stream them with [`Recording::alloc_row_groups`].
    pub fn load_without_alloc_events(&self, pid: u32) -> Result<ProcessTrace, Error> {
        self.check_pid(pid)?;
        let (faults, metadata) = read_faults(&files::faults(&self.dir, pid))?;
        let mut trace = self.assemble_with(pid, faults, metadata, false)?;
        trace.alloc_stacks = self.alloc_stacks(pid)?;
        Ok(trace)
    }

    /// The stacks of the allocation calls of `pid`, sorted by id; none without allocations.
    fn alloc_stacks(&self, pid: u32) -> Result<Vec<Stack>, Error> {
        if !self.has_allocs(pid) {
            return Ok(Vec::new());
        }
        let mut stacks = read_stacks(&files::alloc_stacks(&self.dir, pid))?;
        stacks.sort_unstable_by_key(|s| s.id);
        Ok(stacks)
    }

    /// The allocation events of `pid`, one row group at a time, in the order recorded.
    pub fn alloc_row_groups(&self, pid: u32) -> Result<AllocRowGroups, Error> {
        self.check_pid(pid)?;
        AllocRowGroups::open_table(&files::allocs(&self.dir, pid))
    }

    /// Every column of each fault of `pid`, one row group at a time.
    pub fn fault_rows(&self, pid: u32) -> Result<FaultRowGroups<Fault>, Error> {
        self.check_pid(pid)?;
        FaultRowGroups::open(&files::faults(&self.dir, pid))
    }

    /// The time, stack and flags of each fault of `pid`, one row group at a time.
    pub fn fault_keys(&self, pid: u32) -> Result<FaultRowGroups<FaultKey>, Error> {
        self.check_pid(pid)?;
        FaultRowGroups::open_keys(&files::faults(&self.dir, pid))
    }

    fn check_pid(&self, pid: u32) -> Result<(), Error> {
        if self.pids.contains(&pid) {
            Ok(())
        } else {
            Err(Error::NoSuchProcess(pid))
        }
    }

    /// The process's trace around `faults`: its stacks, mappings and allocations read.
    fn assemble(
        &self,
        pid: u32,
        faults: Vec<Fault>,
        metadata: Vec<(String, String)>,
    ) -> Result<ProcessTrace, Error> {
        self.assemble_with(pid, faults, metadata, true)
    }

    /// As [`Recording::assemble`], the allocations read only if `with_allocs`.
    fn assemble_with(
        &self,
        pid: u32,
        faults: Vec<Fault>,
        metadata: Vec<(String, String)>,
        with_allocs: bool,
    ) -> Result<ProcessTrace, Error> {
        let mut stacks = read_stacks(&files::stacks(&self.dir, pid))?;
        stacks.sort_unstable_by_key(|s| s.id);
        let mappings = read_mappings(&files::mmaps(&self.dir, pid))?;
        let (allocs, alloc_stacks) = if with_allocs {
            self.load_allocs(pid)?
        } else {
            (Vec::new(), Vec::new())
        };
        Ok(ProcessTrace {
            pid,
            faults,
            stacks,
            mappings,
            metadata,
            allocs,
            alloc_stacks,
        })
    }

    /// Whether the run recorded allocations (`record --allocs`) of `pid`.
    pub fn has_allocs(&self, pid: u32) -> bool {
        files::allocs(&self.dir, pid).is_file()
    }

    /// The allocation events of `pid` and their stacks, sorted by id; empty when the run did
    /// not record allocations.
    pub fn load_allocs(&self, pid: u32) -> Result<(Vec<AllocEvent>, Vec<Stack>), Error> {
        if !self.has_allocs(pid) {
            return Ok((Vec::new(), Vec::new()));
        }
        let allocs = read_allocs(&files::allocs(&self.dir, pid))?;
        let mut stacks = read_stacks(&files::alloc_stacks(&self.dir, pid))?;
        stacks.sort_unstable_by_key(|s| s.id);
        Ok((allocs, stacks))
    }
}

/// Everything recorded of one process.
#[derive(Debug, Clone)]
pub struct ProcessTrace {
    /// The process id.
    pub pid: u32,
    /// Its faults in the order they were recorded.
    pub faults: Vec<Fault>,
    /// Its stacks, sorted by id.
    pub stacks: Vec<Stack>,
    /// Its mappings in the order they appeared.
    pub mappings: Vec<Mapping>,
    /// The faults file's footer metadata.
    pub metadata: Vec<(String, String)>,
    /// Its allocation events in time order (empty without `record --allocs`).
    pub allocs: Vec<AllocEvent>,
    /// The stacks of its allocation calls, sorted by id.
    pub alloc_stacks: Vec<Stack>,
}

impl ProcessTrace {
    /// The end of the trace: its last fault or allocation event, whichever is later (0 for
    /// none; the faults only as far as they are loaded).
    pub fn end_ns(&self) -> u64 {
        let last_fault = self.faults.iter().map(|f| f.time_ns).max().unwrap_or(0);
        let last_event = self.allocs.iter().map(|e| e.time_ns).max().unwrap_or(0);
        last_fault.max(last_event)
    }

    /// The stack with id `id`.
    pub fn stack(&self, id: u32) -> Option<&Stack> {
        match self.stacks.get(id as usize) {
            Some(stack) if stack.id == id => Some(stack),
            _ => self.stacks.iter().find(|s| s.id == id),
        }
    }

    /// The allocation stack with id `id`.
    pub fn alloc_stack(&self, id: u32) -> Option<&Stack> {
        match self.alloc_stacks.get(id as usize) {
            Some(stack) if stack.id == id => Some(stack),
            _ => self.alloc_stacks.iter().find(|s| s.id == id),
        }
    }

    /// The mapping that covered `addr` in address-space generation `generation`: the latest
    /// one reported, since a later mapping replaces an earlier one at the same address.
    pub fn mapping_at(&self, generation: u32, addr: crate::VirtAddr) -> Option<&Mapping> {
        self.mappings
            .iter()
            .rev()
            .find(|m| m.generation == generation && m.contains(addr))
    }

    /// The name (`comm`) of thread `tid` in generation `generation` ([`keys::THREADS`]).
    pub fn thread_name(&self, generation: u32, tid: u32) -> Option<&str> {
        self.thread_names()
            .find(|&(g, t, _)| g == generation && t == tid)
            .map(|(_, _, name)| name)
    }

    /// The name of the process in generation `generation`: its main thread's, else that of
    /// its first thread named.
    pub fn process_name_in(&self, generation: u32) -> Option<&str> {
        // The main thread's tid is the pid the kernel gave, which a reused pid's files do not
        // name.
        let main_tid = crate::files::reused_pid(self.pid).0;
        self.thread_name(generation, main_tid).or_else(|| {
            self.thread_names()
                .find(|&(g, _, _)| g == generation)
                .map(|(_, _, name)| name)
        })
    }

    /// Every (generation, tid, name) of [`keys::THREADS`].
    pub fn thread_names(&self) -> impl Iterator<Item = (u32, u32, &str)> {
        self.meta(keys::THREADS)
            .unwrap_or("")
            .lines()
            .filter_map(parse_thread_line)
    }

    /// A footer value.
    pub fn meta(&self, key: &str) -> Option<&str> {
        self.metadata
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }
}

/// The distinct names of process `pid`'s main thread, one per exec in order (`sh`, then
/// `cc1plus`), from a faults file's footer `metadata` ([`keys::THREADS`]); empty without.
pub fn main_thread_names(metadata: &[(String, String)], pid: u32) -> Vec<String> {
    let mut names: Vec<String> = Vec::new();
    let threads = metadata
        .iter()
        .find(|(k, _)| k == keys::THREADS)
        .map_or("", |(_, v)| v.as_str());
    for (_, tid, name) in threads.lines().filter_map(parse_thread_line) {
        if tid == crate::files::reused_pid(pid).0 && !names.iter().any(|n| n == name) {
            names.push(name.to_owned());
        }
    }
    names
}

/// One line of [`keys::THREADS`]: `<generation> <tid> <comm>`.
fn parse_thread_line(line: &str) -> Option<(u32, u32, &str)> {
    let mut fields = line.splitn(3, ' ');
    let generation = fields.next()?.parse().ok()?;
    let tid = fields.next()?.parse().ok()?;
    Some((generation, tid, fields.next()?))
}

/// The [`keys::THREADS`] value of `names` (generation, tid, comm): a comm's line breaks and
/// other control characters become `?`, so that each thread stays one line.
pub fn format_thread_names<'a>(names: impl IntoIterator<Item = (u32, u32, &'a str)>) -> String {
    let mut text = String::new();
    for (generation, tid, name) in names {
        let name: String = name
            .chars()
            .map(|c| if c.is_control() { '?' } else { c })
            .collect();
        text.push_str(&format!("{generation} {tid} {name}\n"));
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chosen_pids_are_the_one_asked_for_or_all() {
        let recording = Recording {
            dir: PathBuf::from("/r"),
            session: RecordingId {
                id: "3-1".to_owned(),
                start_ns: 1,
                command: "scan".to_owned(),
            },
            pids: vec![3, 5, 8],
            modified: None,
        };
        assert_eq!(recording.chosen_pids(None), [3, 5, 8]);
        assert_eq!(recording.chosen_pids(Some(5)), [5]);
    }
}
