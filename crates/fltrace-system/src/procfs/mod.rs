//! What the tools read from /proc and /dev/kmsg, read here only: a process's name, threads,
//! maps, status, descriptors, cgroup, smaps and pages; the machine's counters, memory,
//! pressure, swap, mounts and kernel symbols ([`machine`]); the kernel log's records and
//! OOM lines. The readers capture already has (threads, maps, status, settings) are
//! capture's.
//!
//! A process can exit between any two reads: its readers answer an error or `None`, which
//! callers treat as the normal end of a process; a machine-wide file that cannot be read is
//! a [`ProcError`] the user hears about.

use std::collections::{BTreeMap, HashMap};
use std::io::{self, Read};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

pub use fltrace_capture::procfs::{Status, parse_status, sysctl, tasks};
use fltrace_trace::Mapping;

mod machine;

pub use machine::{
    Meminfo, Mount, Pressure, SwapDevice, Vmstat, kernel_functions, loadavg, meminfo, mounts,
    parse_kernel_functions, parse_meminfo, parse_mounts, parse_swaps, parse_vmstat, pressure,
    swap_active, swaps, vmstat,
};

/// A file of /proc that could not be read, or not understood.
#[derive(Debug, thiserror::Error)]
pub enum ProcError {
    /// Reading failed.
    #[error("{}: {reason}", path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// Why, said in the message (not a `source`, which would say it twice).
        reason: io::Error,
    },
    /// The text is not in the kernel's format.
    #[error("{}: not as expected", path.display())]
    Malformed {
        /// The file.
        path: PathBuf,
    },
}

impl ProcError {
    fn reading(path: impl Into<PathBuf>) -> impl FnOnce(io::Error) -> ProcError {
        let path = path.into();
        move |reason| ProcError::Read { path, reason }
    }

    /// Whether the file is not there (a process that exited, a kernel without the feature).
    pub fn is_missing(&self) -> bool {
        matches!(self, ProcError::Read { reason, .. } if reason.kind() == io::ErrorKind::NotFound)
    }
}

impl From<ProcError> for crate::Error {
    fn from(error: ProcError) -> crate::Error {
        match error {
            ProcError::Read { path, reason } => crate::Error::Io { path, reason },
            malformed @ ProcError::Malformed { .. } => {
                crate::Error::Unsupported(malformed.to_string())
            }
        }
    }
}

/// `/proc/PID/FILE`.
fn path_of(pid: impl std::fmt::Display, file: &str) -> PathBuf {
    PathBuf::from(format!("/proc/{pid}/{file}"))
}

/// Whether process (or thread) `pid` still exists, a zombie included.
pub fn alive(pid: u32) -> bool {
    Path::new(&format!("/proc/{pid}")).exists()
}

/// The name of process or thread `tid` (`/proc/TID/comm` without its newline).
pub fn comm(tid: u32) -> Result<String, ProcError> {
    let path = path_of(tid, "comm");
    let name = std::fs::read_to_string(&path).map_err(ProcError::reading(path))?;
    Ok(name.trim_end_matches('\n').to_owned())
}

/// `/proc/PID/status`, parsed (see [`Status`]).
pub fn status(pid: u32) -> Result<Status, ProcError> {
    fltrace_capture::procfs::status(pid).map_err(ProcError::reading(path_of(pid, "status")))
}

/// The mappings of `/proc/PID/maps`, in address order.
pub fn mappings(pid: u32) -> Result<Vec<Mapping>, ProcError> {
    fltrace_capture::procfs::mappings(pid).map_err(ProcError::reading(path_of(pid, "maps")))
}

/// Hands each line of `/proc/PID/maps` to `each` as read, without its newline (a process's
/// maps can be MBs: a far-memory program's, a database's).
pub fn for_each_maps_line(pid: u32, mut each: impl FnMut(&str)) -> Result<(), ProcError> {
    use std::io::BufRead;
    let path = path_of(pid, "maps");
    let file = std::fs::File::open(&path).map_err(ProcError::reading(&path))?;
    let mut reader = io::BufReader::new(file);
    let mut line = String::new();
    while reader
        .read_line(&mut line)
        .map_err(ProcError::reading(&path))?
        > 0
    {
        each(line.trim_end_matches('\n'));
        line.clear();
    }
    Ok(())
}

/// What descriptor `fd` of process `pid` names (`/proc/PID/fd/FD`).
pub fn fd_target(pid: u32, fd: i64) -> io::Result<PathBuf> {
    std::fs::read_link(path_of(pid, &format!("fd/{fd}")))
}

/// The processes now, by id (the numeric entries of /proc).
pub fn processes() -> Result<Vec<u32>, ProcError> {
    let entries = std::fs::read_dir("/proc").map_err(ProcError::reading("/proc"))?;
    Ok(entries
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse().ok())
        .collect())
}

/// The path of process `pid` in the hierarchy of `controller` (`memory`), from
/// /proc/PID/cgroup; the v2 path where no v1 hierarchy has it.
pub fn cgroup_of(pid: u32, controller: &str) -> Option<String> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/cgroup")).ok()?;
    parse_cgroup(&text, controller)
}

fn parse_cgroup(text: &str, controller: &str) -> Option<String> {
    let mut unified = None;
    for line in text.lines() {
        let mut parts = line.splitn(3, ':');
        let (_, controllers, path) = (parts.next()?, parts.next()?, parts.next()?);
        if controllers.split(',').any(|c| c == controller) {
            return Some(path.to_owned());
        }
        if controllers.is_empty() {
            unified = Some(path.to_owned());
        }
    }
    unified
}

/// Membership of processes in one cgroup, read from /proc/PID/cgroup (for hierarchies where
/// the kernel cannot filter perf events by cgroup, such as a v1 memory controller).
pub struct CgroupFilter {
    /// The controllers of the hierarchy (`memory`), empty for v2.
    controllers: Vec<String>,
    /// The group's path inside its hierarchy (`/fltrace-test`).
    relative: String,
    known: HashMap<u32, bool>,
}

impl CgroupFilter {
    /// The filter of the cgroup directory `path` (e.g. /sys/fs/cgroup/memory/test).
    pub fn new(path: &Path) -> io::Result<CgroupFilter> {
        let path = path.canonicalize()?;
        let mut best: Option<(PathBuf, Vec<String>)> = None;
        for mount in mounts().map_err(io::Error::other)? {
            if mount.fstype != "cgroup" && mount.fstype != "cgroup2" {
                continue;
            }
            if path.starts_with(&mount.dir)
                && best
                    .as_ref()
                    .is_none_or(|(m, _)| mount.dir.as_os_str().len() > m.as_os_str().len())
            {
                let controllers = if mount.fstype == "cgroup2" {
                    Vec::new()
                } else {
                    mount
                        .options
                        .iter()
                        .filter(|o| {
                            !matches!(
                                o.as_str(),
                                "rw" | "ro" | "relatime" | "nosuid" | "nodev" | "noexec"
                            )
                        })
                        .map(|o| {
                            o.strip_prefix("name=")
                                .map_or(o.to_owned(), |n| format!("name={n}"))
                        })
                        .collect()
                };
                best = Some((mount.dir, controllers));
            }
        }
        let (mount_point, controllers) = best.ok_or_else(|| {
            io::Error::other("not under a mounted cgroup hierarchy (/proc/self/mounts)")
        })?;
        let relative = path
            .strip_prefix(&mount_point)
            .map(|r| format!("/{}", r.display()))
            .unwrap_or_else(|_| "/".to_owned());
        Ok(CgroupFilter {
            controllers,
            relative,
            known: HashMap::new(),
        })
    }

    /// Whether process `pid` is in the group or below it (looked up once per process).
    pub fn contains(&mut self, pid: u32) -> bool {
        if let Some(&known) = self.known.get(&pid) {
            return known;
        }
        let inside = std::fs::read_to_string(format!("/proc/{pid}/cgroup"))
            .ok()
            .is_some_and(|text| self.matches(&text));
        self.known.insert(pid, inside);
        inside
    }

    /// Gives a new process its parent's membership, when the parent's is known: a child
    /// starts in its parent's cgroup, and may have ended before its own is read.
    pub fn inherit(&mut self, child: u32, parent: u32) {
        if let Some(&inside) = self.known.get(&parent) {
            self.known.entry(child).or_insert(inside);
        }
    }

    fn matches(&self, text: &str) -> bool {
        let controller = self.controllers.first().map_or("", String::as_str);
        let path = if controller.is_empty() {
            text.lines()
                .find_map(|l| l.strip_prefix("0::"))
                .map(str::to_owned)
        } else {
            parse_cgroup(text, controller)
        };
        path.is_some_and(|p| {
            self.relative == "/"
                || p == self.relative
                || p.starts_with(&format!("{}/", self.relative))
        })
    }
}

/// The kernel log (/dev/kmsg) from its oldest record kept, opened to read without blocking.
pub fn open_kmsg() -> io::Result<std::fs::File> {
    std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_CLOEXEC)
        .open("/dev/kmsg")
}

/// Hands each record of the kernel log `kmsg` ([`open_kmsg`]) to `each` as its prefix
/// (`PRI,SEQ,TS_USEC,FLAGS`) and message, until none is left; records overwritten before
/// they were read are skipped.
pub fn read_kmsg(kmsg: &mut std::fs::File, mut each: impl FnMut(&str, &str)) -> io::Result<()> {
    let mut buf = vec![0u8; 8192];
    loop {
        // Each read returns one record; EAGAIN at the end, EPIPE when records were overwritten.
        match kmsg.read(&mut buf) {
            Ok(0) => return Ok(()),
            Ok(n) => {
                let record = String::from_utf8_lossy(&buf[..n]);
                let (prefix, message) = record.split_once(';').unwrap_or(("", &*record));
                each(prefix, message);
            }
            Err(e) if e.raw_os_error() == Some(libc::EPIPE) => continue,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(()),
            Err(e) => return Err(e),
        }
    }
}

/// The kernel log from now on, read without blocking (/dev/kmsg).
pub struct Kmsg {
    file: Option<std::fs::File>,
    lines: Vec<String>,
}

impl Kmsg {
    /// Opens /dev/kmsg at its end; without it (no CAP_SYSLOG), lookups find nothing.
    pub fn open() -> Kmsg {
        let file = open_kmsg().ok();
        if let Some(f) = &file {
            use std::os::fd::AsRawFd;
            // SAFETY: seeking an open descriptor; SEEK_END on /dev/kmsg skips old messages.
            unsafe { libc::lseek(f.as_raw_fd(), 0, libc::SEEK_END) };
        }
        Kmsg {
            file,
            lines: Vec::new(),
        }
    }

    fn read_new(&mut self) {
        let Some(file) = &mut self.file else {
            return;
        };
        // A log that fails to read now has nothing more to give: the kill's line just lacks
        // its cgroup.
        let _ = read_kmsg(file, |_, message| {
            self.lines.push(message.trim_end().to_owned());
        });
        if self.lines.len() > 4096 {
            self.lines.drain(..2048);
        }
    }

    /// The memory cgroup whose limit led to the OOM kill of `victim`, from the kernel's
    /// `oom-kill:constraint=CONSTRAINT_MEMCG,...,oom_memcg=/...,...,pid=VICTIM,...` line.
    pub fn oom_memcg(&mut self, victim: u32) -> Option<String> {
        self.read_new();
        self.lines
            .iter()
            .rev()
            .find_map(|line| parse_oom_line(line, victim))
    }
}

/// `oom_memcg` of an `oom-kill:` line about `victim` (`/` for a global OOM).
pub fn parse_oom_line(line: &str, victim: u32) -> Option<String> {
    let rest = line.strip_prefix("oom-kill:")?;
    let mut memcg = None;
    let mut pid = None;
    for part in rest.split(',') {
        if let Some(v) = part.strip_prefix("oom_memcg=") {
            memcg = Some(v.to_owned());
        } else if let Some(v) = part.strip_prefix("pid=") {
            pid = v.parse::<u32>().ok();
        }
    }
    (pid == Some(victim)).then(|| memcg.unwrap_or_else(|| "/".to_owned()))
}

/// What kind of memory a mapping holds, for the fault tools.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MapKind {
    /// Huge pages of hugetlbfs (`KernelPageSize` above the base page).
    Hugetlb,
    /// Anonymous memory transparent huge pages may back (`THPeligible: 1`).
    ThpEligible,
    /// Anonymous or shared memory (swap-backed).
    Anon,
    /// A file.
    File,
}

/// One mapping of a process's smaps.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MapInfo {
    /// One past the last address.
    pub end: u64,
    /// Kind.
    pub kind: MapKind,
    /// Path or pseudo-name.
    pub path: String,
}

/// Parses /proc/PID/smaps into mappings by start address.
pub fn parse_smaps(text: &str) -> BTreeMap<u64, MapInfo> {
    let mut maps = BTreeMap::new();
    let mut current: Option<(u64, MapInfo)> = None;
    let page = fltrace_capture::page_size() as u64;
    for line in text.lines() {
        if let Some(mapping) = header(line) {
            if let Some((start, info)) = current.take() {
                maps.insert(start, info);
            }
            let kind = if mapping.is_file()
                && !mapping.path.starts_with("/SYSV")
                && !mapping.path.starts_with("/memfd:")
                && !mapping.path.starts_with("/dev/zero")
            {
                MapKind::File
            } else {
                MapKind::Anon
            };
            current = Some((
                mapping.start.get(),
                MapInfo {
                    end: mapping.end.get(),
                    kind,
                    path: mapping.path,
                },
            ));
            continue;
        }
        let Some((_, info)) = &mut current else {
            continue;
        };
        if let Some(v) = line.strip_prefix("KernelPageSize:") {
            let kb: u64 = v.trim().trim_end_matches("kB").trim().parse().unwrap_or(0);
            if kb * 1024 > page {
                info.kind = MapKind::Hugetlb;
            }
        } else if let Some(v) = line.strip_prefix("THPeligible:")
            && v.trim() == "1"
            && info.kind == MapKind::Anon
        {
            info.kind = MapKind::ThpEligible;
        }
    }
    if let Some((start, info)) = current {
        maps.insert(start, info);
    }
    maps
}

/// A maps line (`start-end perms ...`), not a smaps attribute line (`Name:  value`).
fn header(line: &str) -> Option<fltrace_trace::Mapping> {
    let first = line.split(' ').next()?;
    if !first.contains('-') || first.ends_with(':') {
        return None;
    }
    let mut m = fltrace_trace::parse_procmaps_line(line)?;
    if m.path.is_empty() {
        m.path = "[anon]".to_owned();
    }
    Some(m)
}

/// The mappings of processes, read from smaps when first needed and again when an address
/// falls outside every known one (a mapping made since).
#[derive(Default)]
pub struct MapsCache {
    by_pid: HashMap<u32, BTreeMap<u64, MapInfo>>,
}

impl MapsCache {
    /// The mapping of `pid` holding `addr`.
    pub fn lookup(&mut self, pid: u32, addr: u64) -> Option<&MapInfo> {
        let hit = |maps: &BTreeMap<u64, MapInfo>| {
            maps.range(..=addr)
                .next_back()
                .is_some_and(|(_, m)| addr < m.end)
        };
        let fresh = self.by_pid.get(&pid).is_some_and(hit);
        if !fresh {
            let text = std::fs::read_to_string(format!("/proc/{pid}/smaps")).ok()?;
            self.by_pid.insert(pid, parse_smaps(&text));
        }
        self.by_pid
            .get(&pid)?
            .range(..=addr)
            .next_back()
            .map(|(_, m)| m)
            .filter(|m| addr < m.end)
    }

    /// Forgets a process (it exec'd or exited).
    pub fn forget(&mut self, pid: u32) {
        self.by_pid.remove(&pid);
    }
}

/// The state of a page of a process.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PageState {
    /// Not in memory.
    Missing,
    /// In memory, part of a transparent huge page or not.
    Present {
        /// Whether it is part of a transparent huge page.
        thp: bool,
    },
}

/// The page of `pid` at `addr` now (/proc/PID/pagemap gives its frame, /proc/kpageflags its
/// flags; root only); `None` when they cannot be read.
pub fn page_state(pid: u32, addr: u64) -> Option<PageState> {
    use std::os::unix::fs::FileExt;
    let page = fltrace_capture::page_size() as u64;
    let pagemap = std::fs::File::open(format!("/proc/{pid}/pagemap")).ok()?;
    let mut entry = [0u8; 8];
    pagemap.read_exact_at(&mut entry, addr / page * 8).ok()?;
    let entry = u64::from_ne_bytes(entry);
    const PRESENT: u64 = 1 << 63;
    if entry & PRESENT == 0 {
        return Some(PageState::Missing);
    }
    let pfn = entry & ((1 << 55) - 1);
    if pfn == 0 {
        return None;
    }
    let flags = std::fs::File::open("/proc/kpageflags").ok()?;
    let mut word = [0u8; 8];
    flags.read_exact_at(&mut word, pfn * 8).ok()?;
    const KPF_THP: u64 = 1 << 22;
    Some(PageState::Present {
        thp: u64::from_ne_bytes(word) & KPF_THP != 0,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// This process read through each reader: the name without its newline, the same as
    /// status gives, its maps, its threads; a process that is gone reads as missing.
    #[test]
    fn reads_this_process_and_a_gone_one() {
        let pid = std::process::id();
        assert!(alive(pid));
        let name = comm(pid).expect("own comm");
        assert!(!name.is_empty() && !name.ends_with('\n'), "{name:?}");
        let own = status(pid).expect("own status");
        assert_eq!(own.name.as_deref(), Some(name.as_str()));
        assert!(own.vm_size_kb.is_some_and(|kb| kb > 0));
        // The other tests' threads map and unmap meanwhile: the two readers are compared
        // over a moment when the maps held still (the same line count before and after).
        let lines = || {
            let mut lines = 0;
            for_each_maps_line(pid, |_| lines += 1).expect("own maps");
            lines
        };
        let agree = (0..100).any(|_| {
            let before = lines();
            let parsed = mappings(pid).expect("own maps").len();
            before == lines() && parsed == before
        });
        assert!(agree, "the maps' lines and mappings never agreed");
        assert!(processes().expect("/proc").contains(&pid));

        let mut child = std::process::Command::new("true")
            .spawn()
            .expect("starting true");
        let gone = child.id();
        child.wait().expect("waiting for true");
        assert!(!alive(gone));
        assert!(comm(gone).is_err_and(|e| e.is_missing()));
        assert!(status(gone).is_err_and(|e| e.is_missing()));
        assert!(mappings(gone).is_err_and(|e| e.is_missing()));
        assert!(for_each_maps_line(gone, |_| {}).is_err_and(|e| e.is_missing()));
        assert_eq!(
            comm(gone).map_err(|e| e.to_string()),
            Err(format!(
                "/proc/{gone}/comm: No such file or directory (os error 2)"
            ))
        );
    }

    /// A kernel log record splits into its prefix and message (a read of /dev/kmsg returns
    /// one record; here the file holds one).
    #[test]
    fn kmsg_records_split_at_the_first_semicolon() {
        let mut file = tempfile::tempfile().expect("a temporary file");
        std::io::Write::write_all(&mut file, b"6,1042,5000123,-;oom-kill:constraint=x;y\n")
            .expect("writing it");
        std::io::Seek::rewind(&mut file).expect("rewinding it");
        let mut records = Vec::new();
        read_kmsg(&mut file, |prefix, message| {
            records.push((prefix.to_owned(), message.to_owned()));
        })
        .expect("reading it");
        assert_eq!(
            records,
            [(
                "6,1042,5000123,-".to_owned(),
                "oom-kill:constraint=x;y\n".to_owned()
            )]
        );
    }

    /// The kernel's OOM line names the memory cgroup that hit its limit and the victim.
    #[test]
    fn parses_the_oom_kill_line() {
        let line = "oom-kill:constraint=CONSTRAINT_MEMCG,nodemask=(null),cpuset=/,mems_allowed=0,oom_memcg=/fltrace-oom-1,task_memcg=/fltrace-oom-1,task=sysmem,pid=4242,uid=0";
        assert_eq!(
            parse_oom_line(line, 4242).as_deref(),
            Some("/fltrace-oom-1")
        );
        assert_eq!(parse_oom_line(line, 4243), None);
    }

    /// v1 controllers are found by name, v2 as the line with no controllers.
    #[test]
    fn finds_the_memory_cgroup() {
        let text = "12:memory:/test/a\n11:cpu,cpuacct:/\n0::/user.slice\n";
        assert_eq!(parse_cgroup(text, "memory").as_deref(), Some("/test/a"));
        assert_eq!(parse_cgroup(text, "pids").as_deref(), Some("/user.slice"));
    }

    /// smaps: huge page mappings by their kernel page size, THP-eligible anonymous memory.
    #[test]
    fn classifies_smaps_mappings() {
        let text = "\
7f0000000000-7f0000400000 rw-p 00000000 00:0f 1234 /anon_hugepage (deleted)
Size:               4096 kB
KernelPageSize:     2048 kB
THPeligible:    0
7f0000400000-7f0000800000 rw-p 00000000 00:00 0 
Size:               4096 kB
KernelPageSize:        4 kB
THPeligible:    1
7f0000800000-7f0000801000 r--p 00000000 08:01 99 /usr/lib/libc.so.6
KernelPageSize:        4 kB
THPeligible:    0
";
        let maps = parse_smaps(text);
        let kinds: Vec<MapKind> = maps.values().map(|m| m.kind).collect();
        assert_eq!(
            kinds,
            [MapKind::Hugetlb, MapKind::ThpEligible, MapKind::File]
        );
    }
}
