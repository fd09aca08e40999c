//! Naming what the kernel counted: the mappings of processes (kept from when they were first
//! seen, so that processes that exit before the output are still symbolized), user stacks
//! through fltrace-analyze's symbolizer, kernel stacks through /proc/kallsyms.

use std::collections::{HashMap, HashSet};
use std::os::fd::{AsFd, AsRawFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::JoinHandle;

use aya::maps::{MapData, RingBuf};
use fltrace_analyze::{Location, Symbolizer};
use fltrace_capture::perf::{PerfEvent, RingBuffer, online_cpus, parse_info};
use fltrace_trace::{CodeAddr, Mapping, ProcessTrace, Stack, parse_procmaps_line};
use linux_perf_event_reader::{
    EventRecord, Mmap2FileId, RawEventRecord, RecordParseInfo, RecordType,
};
use perf_event_open_sys::bindings::perf_event_attr;

use crate::procfs;

/// The executable mappings of each process seen (its /proc/PID/maps lines), read when it was
/// first seen, and those the kernel announced for each process since tracing started, for
/// processes that exit before their maps could be read; the files each mapped.
#[derive(Debug, Clone, Default)]
pub struct ProcessMaps {
    /// Only the executable lines, all that naming a stack needs: whole maps of every process
    /// a busy machine ran (heaps, far-memory regions, data files) grew without bound.
    inner: Arc<Mutex<HashMap<u32, Arc<str>>>>,
    /// The distinct texts of `inner`, held once: a forked child maps as its parent.
    texts: Arc<Mutex<HashSet<Arc<str>>>>,
    /// File paths by (major, minor, inode) from the maps read (first read first).
    read_files: Arc<Mutex<FilesByInode>>,
    followed: Arc<Mutex<HashMap<u32, String>>>,
    /// Each process's name when its maps were last read (a command's changes at its exec).
    comms: Arc<Mutex<HashMap<u32, String>>>,
    /// File paths by (major, minor, inode) as the kernel named them in its mapping records
    /// when they were mapped: they outlive the process and the file.
    recorded_files: Arc<Mutex<FilesByInode>>,
}

/// File paths by (major, minor, inode).
type FilesByInode = HashMap<(u32, u32, u64), String>;

impl ProcessMaps {
    fn lock(&self) -> MutexGuard<'_, HashMap<u32, Arc<str>>> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn followed(&self) -> MutexGuard<'_, HashMap<u32, String>> {
        self.followed.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Takes in a side-band record: a new mapping, or an exec (which drops the old image's).
    fn follow(&self, record: &EventRecord<'_>) {
        match record {
            EventRecord::Comm(c) if c.is_execve => {
                self.followed().remove(&(c.pid as u32));
            }
            EventRecord::Mmap2(m) => {
                let (major, minor, inode) = match &m.file_id {
                    Mmap2FileId::InodeAndVersion(i) => (i.major, i.minor, i.inode),
                    Mmap2FileId::BuildId(_) => (0, 0, 0),
                };
                let prot = |bit, c| if m.protection & bit != 0 { c } else { '-' };
                let shared = if m.flags & libc::MAP_SHARED as u32 != 0 {
                    's'
                } else {
                    'p'
                };
                let path = String::from_utf8_lossy(&m.path.as_slice()).into_owned();
                if inode != 0 && path.starts_with('/') {
                    self.recorded_files
                        .lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .entry((major, minor, inode))
                        .or_insert_with(|| path.clone());
                }
                if m.protection & libc::PROT_EXEC as u32 == 0 {
                    // Data mappings (followed for ffaults) name files, not code.
                    return;
                }
                let line = format!(
                    "{:x}-{:x} {}{}{}{shared} {:08x} {major:02x}:{minor:02x} {inode} {}\n",
                    m.address,
                    m.address + m.length,
                    prot(libc::PROT_READ as u32, 'r'),
                    prot(libc::PROT_WRITE as u32, 'w'),
                    prot(libc::PROT_EXEC as u32, 'x'),
                    m.page_offset,
                    path,
                );
                self.followed()
                    .entry(m.pid as u32)
                    .or_default()
                    .push_str(&line);
            }
            _ => {}
        }
    }

    /// Reads and keeps the maps of `tgid` (replacing what was kept: after an exec they
    /// are new). A process that has exited keeps its last maps.
    pub fn remember(&self, tgid: u32) {
        if tgid == 0 {
            return;
        }
        if let Some((code, files)) = read_maps(tgid) {
            {
                let mut kept = self.read_files.lock().unwrap_or_else(|e| e.into_inner());
                for (key, path) in files {
                    kept.entry(key).or_insert(path);
                }
            }
            // A process with no executable mapping (exited, a kernel thread) keeps its last.
            if !code.is_empty() {
                let text: Arc<str> = {
                    let mut texts = self.texts.lock().unwrap_or_else(|e| e.into_inner());
                    match texts.get(code.as_str()) {
                        Some(same) => same.clone(),
                        None => {
                            let text: Arc<str> = code.into();
                            texts.insert(text.clone());
                            text
                        }
                    }
                };
                self.lock().insert(tgid, text);
            }
        }
        if let Ok(comm) = procfs::comm(tgid) {
            self.comms
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .insert(tgid, comm);
        }
    }

    /// The name of `tgid`: read now if it lives, else as last kept.
    pub fn comm(&self, tgid: u32) -> Option<String> {
        self.remember(tgid);
        let comms = self.comms.lock().unwrap_or_else(|e| e.into_inner());
        comms.get(&tgid).cloned()
    }

    /// The maps of `tgid`: read now if it lives, else as last kept, with the executable
    /// mappings followed since (all a process that exited early may have).
    pub fn get(&self, tgid: u32) -> Option<Arc<str>> {
        self.remember(tgid);
        let kept = self.lock().get(&tgid).cloned();
        let followed = self.followed().get(&tgid).cloned();
        match (kept, followed) {
            (kept, None) => kept,
            (None, Some(f)) => Some(f.into()),
            (Some(k), Some(f)) => Some(format!("{k}{f}").into()),
        }
    }

    /// The paths of the files `wanted` (by device and inode) that a process seen or a live
    /// process maps, or that the kernel named when they were mapped.
    pub fn files_by_inode(
        &self,
        wanted: &HashSet<(u32, u32, u64)>,
    ) -> HashMap<(u32, u32, u64), String> {
        let mut files: HashMap<(u32, u32, u64), String> = HashMap::new();
        {
            let read = self.read_files.lock().unwrap_or_else(|e| e.into_inner());
            for key in wanted {
                if let Some(path) = read.get(key) {
                    files.insert(*key, path.clone());
                }
            }
        }
        // Each live process's maps read a line at a time, until every file is named.
        // Without a listing of /proc, the names recorded below are all there is.
        for tgid in procfs::processes().unwrap_or_default() {
            if files.len() == wanted.len() {
                break;
            }
            // A process gone since the listing names nothing.
            let _ = procfs::for_each_maps_line(tgid, |line| {
                if let Some((dev, inode, path)) = file_of_maps_line(line) {
                    let key = (dev.0, dev.1, inode);
                    if wanted.contains(&key) {
                        files.entry(key).or_insert(path);
                    }
                }
            });
        }
        // Files of processes gone before they were read: as the kernel named them.
        let recorded = self
            .recorded_files
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        for key in wanted {
            if let Some(path) = recorded.get(key) {
                files.entry(*key).or_insert_with(|| path.clone());
            }
        }
        files
    }
}

/// The executable lines of /proc/`tgid`/maps (each ending in a newline) and the files it
/// maps, by (major, minor, inode); None when it could not be read.
fn read_maps(tgid: u32) -> Option<(String, FilesByInode)> {
    let mut code = String::new();
    let mut files = FilesByInode::new();
    let read = procfs::for_each_maps_line(tgid, |line| {
        if let Some((dev, inode, path)) = file_of_maps_line(line) {
            files.entry((dev.0, dev.1, inode)).or_insert(path);
        }
        let perms = line.split(' ').nth(1).unwrap_or("");
        if perms.as_bytes().get(2) == Some(&b'x') {
            code.push_str(line);
            code.push('\n');
        }
    });
    read.ok().map(|()| (code, files))
}

/// `((major, minor), inode, path)` of a file-backed line of /proc/PID/maps.
fn file_of_maps_line(line: &str) -> Option<((u32, u32), u64, String)> {
    let mut fields = line.splitn(6, ' ');
    let _range = fields.next()?;
    let _perms = fields.next()?;
    let _offset = fields.next()?;
    let (major, minor) = fields.next()?.split_once(':')?;
    let inode: u64 = fields.next()?.parse().ok()?;
    let path = fields.next()?.trim_start();
    if inode == 0 || !path.starts_with('/') {
        return None;
    }
    let dev = (
        u32::from_str_radix(major, 16).ok()?,
        u32::from_str_radix(minor, 16).ok()?,
    );
    Some((dev, inode, path.to_owned()))
}

/// The kernel's records of every new executable mapping and exec, system-wide, on a dummy
/// software event per CPU (as `perf record` follows processes): read with the announcements.
struct MappingRecords {
    _events: Vec<PerfEvent>,
    rings: Vec<RingBuffer>,
    parse_info: RecordParseInfo,
}

impl MappingRecords {
    /// Opens them; None where the kernel refuses (the /proc reads remain).
    fn open(data: bool) -> Option<MappingRecords> {
        let mut attr = perf_event_attr {
            size: std::mem::size_of::<perf_event_attr>() as u32,
            type_: perf_event_open_sys::bindings::PERF_TYPE_SOFTWARE,
            config: u64::from(perf_event_open_sys::bindings::PERF_COUNT_SW_DUMMY),
            ..Default::default()
        };
        attr.set_mmap(1);
        attr.set_mmap2(1);
        attr.set_comm(1);
        attr.set_comm_exec(1);
        attr.set_exclude_kernel(1);
        if data {
            attr.set_mmap_data(1);
        }
        let mut events = Vec::new();
        let mut rings = Vec::new();
        for cpu in online_cpus().ok()? {
            let event = PerfEvent::open(&attr, -1, cpu).ok()?;
            event.enable().ok()?;
            rings.push(RingBuffer::map(&event, 64).ok()?);
            events.push(event);
        }
        Some(MappingRecords {
            _events: events,
            rings,
            parse_info: parse_info(&attr),
        })
    }

    fn drain(&mut self, maps: &ProcessMaps) {
        let info = self.parse_info;
        for ring in &mut self.rings {
            ring.drain(|raw| {
                let record = RawEventRecord::new(RecordType(raw.kind), raw.misc, raw.data, info);
                if let Ok(record) = record.parse() {
                    maps.follow(&record);
                }
            });
        }
    }
}

/// A thread that keeps the maps of each process the BPF side announces.
pub(crate) struct Announcements {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl Announcements {
    /// `data`: also follow data mappings (of files mapped without exec), to name files.
    pub(crate) fn start(
        mut ring: RingBuf<MapData>,
        maps: ProcessMaps,
        data: bool,
    ) -> Announcements {
        let stop = Arc::new(AtomicBool::new(false));
        let stopping = stop.clone();
        // Opened here, before any event is counted, so that no mapping is missed.
        let mut records = MappingRecords::open(data);
        let thread = std::thread::Builder::new()
            .name("fltrace-system-maps".into())
            .spawn(move || {
                loop {
                    let mut pfd = libc::pollfd {
                        fd: ring.as_fd().as_raw_fd(),
                        events: libc::POLLIN,
                        revents: 0,
                    };
                    // SAFETY: one valid pollfd for the duration of the call.
                    unsafe { libc::poll(&mut pfd, 1, 20) };
                    while let Some(item) = ring.next() {
                        if let Ok(bytes) = <[u8; 4]>::try_from(&item[..4.min(item.len())]) {
                            maps.remember(u32::from_ne_bytes(bytes));
                        }
                    }
                    if let Some(records) = &mut records {
                        records.drain(&maps);
                    }
                    if stopping.load(Ordering::Relaxed) {
                        break;
                    }
                    // Libraries loaded after the first event come as mapping records: no
                    // periodic re-reading of every process's maps, which cost the traced
                    // programs CPU time on a small machine.
                }
            })
            .ok();
        Announcements { stop, thread }
    }
}

impl Drop for Announcements {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// One named frame.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Frame {
    /// The function, `[unknown]` when not found.
    pub function: String,
    /// `file:line` when known.
    pub file_line: Option<String>,
    /// The object (executable, library, `[kernel]`).
    pub lib: String,
}

impl Frame {
    /// A frame as the symbolizer named it.
    pub fn from_location(loc: &Location) -> Frame {
        Frame {
            function: loc.function.to_string(),
            file_line: loc.has_line().then(|| loc.file_line()),
            lib: loc.lib.to_string(),
        }
    }

    /// `function (file:line)` or `function (lib)`.
    pub fn describe(&self) -> String {
        match &self.file_line {
            Some(at) => format!("{} ({at})", self.function),
            None => format!("{} ({})", self.function, self.lib),
        }
    }
}

/// Kernel symbols from /proc/kallsyms, sorted by address.
#[derive(Debug, Default)]
pub struct Kallsyms {
    symbols: Vec<(u64, String)>,
}

impl Kallsyms {
    /// Reads /proc/kallsyms (addresses are zero unless root); without it, kernel frames
    /// stay addresses, and a warning says why.
    pub fn load() -> Kallsyms {
        let symbols = procfs::kernel_functions().unwrap_or_else(|e| {
            log::warn!("{e}: kernel frames are shown as addresses");
            Vec::new()
        });
        Kallsyms { symbols }
    }

    /// The function containing `addr`.
    pub fn name(&self, addr: u64) -> Frame {
        let at = self.symbols.partition_point(|(a, _)| *a <= addr);
        let function = match at.checked_sub(1).and_then(|i| self.symbols.get(i)) {
            Some((_, name)) => name.clone(),
            None => format!("0x{addr:x}"),
        };
        Frame {
            function,
            file_line: None,
            lib: "[kernel]".into(),
        }
    }
}

/// Symbolizes the user stacks of processes with the mappings kept for them.
pub struct StackNames {
    symbolizer: Symbolizer,
    kallsyms: Option<Kallsyms>,
}

impl Default for StackNames {
    fn default() -> Self {
        Self::new()
    }
}

impl StackNames {
    /// A symbolizer (kernel symbols are read on first use).
    pub fn new() -> StackNames {
        StackNames {
            symbolizer: Symbolizer::new(),
            kallsyms: None,
        }
    }

    /// A symbolizer for machines short of memory (`triage`): functions named from symbol
    /// tables only, one file held at a time ([`Symbolizer::lean`]).
    pub fn lean() -> StackNames {
        StackNames {
            symbolizer: Symbolizer::lean(),
            kallsyms: None,
        }
    }

    /// Names each of `stacks` (id, frames innermost first) of process `tgid`. When
    /// `all_returns`, every frame is a return address (stacks taken at a function's return);
    /// otherwise the first is the exact instruction.
    pub fn user(
        &mut self,
        tgid: u32,
        maps: Option<&str>,
        stacks: &[(u32, Vec<u64>)],
        all_returns: bool,
    ) -> HashMap<u32, Vec<Frame>> {
        let mappings: Vec<Mapping> = maps
            .unwrap_or("")
            .lines()
            .filter_map(parse_procmaps_line)
            .collect();
        let stacks: Vec<Stack> = stacks
            .iter()
            .map(|(id, frames)| Stack {
                end: fltrace_trace::StackEnd::Unknown,
                id: *id,
                generation: 0,
                frames: frames.iter().map(|&frame| CodeAddr::new(frame)).collect(),
            })
            .collect();
        let trace = ProcessTrace {
            pid: tgid,
            faults: Vec::new(),
            stacks: if all_returns {
                Vec::new()
            } else {
                stacks.clone()
            },
            mappings,
            metadata: Vec::new(),
            allocs: Vec::new(),
            alloc_stacks: if all_returns {
                stacks.clone()
            } else {
                Vec::new()
            },
        };
        let resolved = if all_returns {
            self.symbolizer.resolve_alloc_stacks(&trace)
        } else {
            self.symbolizer.resolve_stacks(&trace)
        };
        stacks
            .iter()
            .map(|s| {
                let frames: Vec<Frame> = resolved
                    .get(s.id)
                    .iter()
                    .map(Frame::from_location)
                    .collect();
                (s.id, frames)
            })
            .collect()
    }

    /// Names a kernel stack.
    pub fn kernel(&mut self, frames: &[u64]) -> Vec<Frame> {
        let kallsyms = self.kallsyms.get_or_insert_with(Kallsyms::load);
        frames.iter().map(|&a| kallsyms.name(a)).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_device_and_inode_of_maps_lines() {
        let line = "7f00-7f10 r--p 00000000 fe:01 1234567                    /usr/lib/libc.so.6";
        assert_eq!(
            file_of_maps_line(line),
            Some(((0xfe, 1), 1234567, "/usr/lib/libc.so.6".into()))
        );
        assert_eq!(file_of_maps_line("7f00-7f10 rw-p 00000000 00:00 0 "), None);
    }
}
