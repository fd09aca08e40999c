//! Naming what the kernel counted: the mappings of processes (kept from when they were first
//! seen, so that processes that exit before the output are still symbolized), user stacks
//! through fltrace-analyze's symbolizer, kernel stacks through /proc/kallsyms.

use std::collections::HashMap;
use std::os::fd::{AsFd, AsRawFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::JoinHandle;

use aya::maps::{MapData, RingBuf};
use fltrace_analyze::{Location, Symbolizer};
use fltrace_trace::{Mapping, ProcessTrace, Stack, parse_procmaps_line};

/// The /proc/PID/maps text of each process seen, read when it was first seen.
#[derive(Debug, Clone, Default)]
pub struct ProcessMaps {
    inner: Arc<Mutex<HashMap<u32, Arc<str>>>>,
}

impl ProcessMaps {
    fn lock(&self) -> MutexGuard<'_, HashMap<u32, Arc<str>>> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Reads and keeps the maps of `tgid` (replacing what was kept: after an exec they
    /// are new). A process that has exited keeps its last maps.
    pub fn remember(&self, tgid: u32) {
        if tgid == 0 {
            return;
        }
        if let Ok(text) = std::fs::read_to_string(format!("/proc/{tgid}/maps"))
            && !text.is_empty()
        {
            self.lock().insert(tgid, text.into());
        }
    }

    /// The maps of `tgid`: read now if it lives, else as last kept.
    pub fn get(&self, tgid: u32) -> Option<Arc<str>> {
        self.remember(tgid);
        self.lock().get(&tgid).cloned()
    }

    fn known(&self) -> Vec<u32> {
        self.lock().keys().copied().collect()
    }

    /// File paths by (device, inode) from every process kept and every live process.
    pub fn files_by_inode(&self) -> HashMap<(u32, u32, u64), String> {
        let mut texts: Vec<Arc<str>> = self.lock().values().cloned().collect();
        if let Ok(dir) = std::fs::read_dir("/proc") {
            for entry in dir.flatten() {
                let name = entry.file_name();
                if name
                    .to_str()
                    .is_some_and(|n| n.bytes().all(|b| b.is_ascii_digit()))
                    && let Ok(text) = std::fs::read_to_string(entry.path().join("maps"))
                {
                    texts.push(text.into());
                }
            }
        }
        let mut files = HashMap::new();
        for text in texts {
            for line in text.lines() {
                if let Some((dev, inode, path)) = file_of_maps_line(line) {
                    files.entry((dev.0, dev.1, inode)).or_insert(path);
                }
            }
        }
        files
    }
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

/// A thread that keeps the maps of each process the BPF side announces.
pub(crate) struct Announcements {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl Announcements {
    pub(crate) fn start(mut ring: RingBuf<MapData>, maps: ProcessMaps) -> Announcements {
        let stop = Arc::new(AtomicBool::new(false));
        let stopping = stop.clone();
        let thread = std::thread::Builder::new()
            .name("fltrace-bpf-maps".into())
            .spawn(move || {
                let mut refreshed = std::time::Instant::now();
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
                    if stopping.load(Ordering::Relaxed) {
                        break;
                    }
                    // Libraries loaded after the first event: re-read the processes seen,
                    // often while they are few.
                    let known = maps.known();
                    let period = if known.len() <= 64 { 200 } else { 2000 };
                    if refreshed.elapsed() >= std::time::Duration::from_millis(period) {
                        for tgid in known {
                            maps.remember(tgid);
                        }
                        refreshed = std::time::Instant::now();
                    }
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
#[derive(Debug, Clone, PartialEq, Eq)]
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
    /// Reads /proc/kallsyms (addresses are zero unless root).
    pub fn load() -> Kallsyms {
        let mut symbols: Vec<(u64, String)> = std::fs::read_to_string("/proc/kallsyms")
            .unwrap_or_default()
            .lines()
            .filter_map(|line| {
                let mut parts = line.split_whitespace();
                let addr = u64::from_str_radix(parts.next()?, 16).ok()?;
                let kind = parts.next()?;
                let name = parts.next()?;
                (addr != 0 && matches!(kind, "t" | "T" | "w" | "W"))
                    .then(|| (addr, name.to_owned()))
            })
            .collect();
        symbols.sort_unstable();
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
                id: *id,
                generation: 0,
                frames: frames.clone(),
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
