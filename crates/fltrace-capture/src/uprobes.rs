//! `record --allocs -p PID`: the allocations of a running process, through uprobes on its C
//! library's allocator (as bcc's memleak does). A process fltrace did not start cannot be given
//! the preloaded tracer, but the kernel can stop it at `malloc` and at its return.
//!
//! Each entry probe samples the argument registers and the user stack (unwound here with the
//! recorder's DWARF unwinder); each return probe samples the result. Entry and return are
//! paired per thread. This costs a few microseconds per call, far more than the preloaded
//! tracer: it is for looking into a process that is already running.

use std::collections::{HashMap, HashSet};
use std::ffi::CString;
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use linux_perf_event_reader::{EventRecord, RawEventRecord, RecordType};
use object::{Object, ObjectSegment, ObjectSymbol};
use perf_event_open_sys::bindings::{
    PERF_SAMPLE_IDENTIFIER, PERF_SAMPLE_REGS_USER, PERF_SAMPLE_STACK_USER, PERF_SAMPLE_TID,
    PERF_SAMPLE_TIME, perf_event_attr,
};

use fltrace_trace::{
    AllocCall, AllocEvent, AllocWriter, CodeAddr, Origin, Stack, StackWriter, VirtAddr, files,
};

use crate::reader::ReaderThread;
use crate::ring::RingBuffer;
use crate::sys::{self, PerfEvent};
use crate::unwind::{AddressSpaceUnwinder, ElfCache, LiveStack};
use crate::{Converted, Error};

/// x86_64 perf register numbers of the argument and result registers.
const REG_AX: u64 = 0;
const REG_DX: u64 = 3;
const REG_SI: u64 = 4;
const REG_DI: u64 = 5;

/// Bytes of user stack copied at each entry probe.
const STACK_BYTES: u32 = 8192;

/// Ring buffer pages per CPU: 16 MiB, two thousand entry samples.
const RING_PAGES: usize = 4096;

/// The probed functions: name, call, and whether a return probe is needed for the result.
const PROBES: [(&str, AllocCall, bool); 9] = [
    ("malloc", AllocCall::Malloc, true),
    ("calloc", AllocCall::Calloc, true),
    ("realloc", AllocCall::Realloc, true),
    ("free", AllocCall::Free, false),
    ("posix_memalign", AllocCall::PosixMemalign, true),
    ("aligned_alloc", AllocCall::AlignedAlloc, true),
    ("memalign", AllocCall::Memalign, true),
    ("valloc", AllocCall::Valloc, true),
    ("pvalloc", AllocCall::Pvalloc, true),
];

/// Whether this kernel offers uprobes as a perf event source.
pub fn available() -> bool {
    Path::new("/sys/bus/event_source/devices/uprobe/type").is_file()
}

/// Allocation tracing of a running process, in a thread of its own until [`Self::finish`].
pub struct AttachedAllocs(ReaderThread<Converted>);

impl AttachedAllocs {
    /// Places the probes on `pid`'s C library for each of its threads (and the threads they
    /// start), writing into `dir` when finished.
    pub fn start(
        pid: i32,
        tasks: &[i32],
        dir: &Path,
        mono_offset: u64,
        recording: &str,
    ) -> Result<AttachedAllocs, Error> {
        let probes = Probes::open(pid, tasks)?;
        let dir = dir.to_owned();
        let origin = Origin::new(recording, pid as u32);
        ReaderThread::spawn("fltrace-uprobes", "the uprobe reader", move |stop| {
            probes.run(stop, &dir, origin, mono_offset)
        })
        .map(AttachedAllocs)
    }

    /// Stops reading, writes the tables and says what they hold.
    pub fn finish(self) -> Result<Converted, Error> {
        self.0.finish()
    }
}

fn kernel(what: &'static str) -> impl FnOnce(std::io::Error) -> Error {
    Error::kernel(what)
}

/// The library whose allocator `pid` uses, and the file offsets of its allocator's functions:
/// a malloc replacement it links (jemalloc, as Debian's redis-server does; tcmalloc,
/// mimalloc), whose `malloc` the program's calls bind to, else its C library. (Probes on the C
/// library of a jemalloc program saw no call at all.)
fn allocator_of(pid: i32) -> Result<(PathBuf, Vec<(usize, u64)>), Error> {
    let maps = std::fs::read_to_string(format!("/proc/{pid}/maps"))
        .map_err(|source| Error::Attach { pid, source })?;
    let paths: Vec<String> = maps
        .lines()
        .filter_map(fltrace_trace::parse_procmaps_line)
        .map(|m| m.path)
        .collect();
    let named = |prefixes: &[&str]| {
        paths.iter().find(|p| {
            Path::new(p)
                .file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| prefixes.iter().any(|prefix| n.starts_with(prefix)))
        })
    };
    let path = named(&["libjemalloc.so", "libtcmalloc", "libmimalloc"])
        .or_else(|| named(&["libc.so", "libc-"]))
        .cloned()
        .ok_or_else(|| Error::Attach {
            pid,
            source: std::io::Error::other(
                "it has no C library loaded (a static program?): nothing to probe",
            ),
        })?;
    // Through the process's root, as it sees the file.
    let file = PathBuf::from(format!("/proc/{pid}/root{path}"));
    let names: Vec<&str> = PROBES.iter().map(|(name, _, _)| *name).collect();
    let offsets = function_offsets(&file, &names)
        .map_err(|source| Error::Attach { pid, source })?
        .into_iter()
        .enumerate()
        .filter_map(|(index, offset)| Some((index, offset.ok()?)))
        .collect();
    Ok((file, offsets))
}

/// Why a function cannot be probed in a file that could be read.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum FunctionMissing {
    /// No symbol of that name with an address.
    #[error("no such symbol")]
    NoSymbol,
    /// Its address is outside every loadable segment.
    #[error("its address is in no loaded segment")]
    NotLoaded,
}

/// The file offsets (as uprobes take them) of the functions `names` in the ELF file `path`,
/// from its dynamic symbols, else its symbol table. An error is the file's (unreadable, or
/// not ELF: `InvalidData`).
pub fn function_offsets(
    path: &Path,
    names: &[&str],
) -> std::io::Result<Vec<Result<u64, FunctionMissing>>> {
    let bytes = std::fs::read(path)?;
    let elf = object::File::parse(&*bytes)
        .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidData, e.to_string()))?;
    let offset_of = |name: &str| {
        let address = elf
            .dynamic_symbols()
            .chain(elf.symbols())
            .find(|s| s.name() == Ok(name) && s.address() != 0)
            .map(|s| s.address())
            .ok_or(FunctionMissing::NoSymbol)?;
        elf.segments()
            .find(|s| address >= s.address() && address < s.address() + s.size())
            .map(|s| address - s.address() + s.file_range().0)
            .ok_or(FunctionMissing::NotLoaded)
    };
    Ok(names.iter().map(|name| offset_of(name)).collect())
}

/// The uprobe PMU's perf event type.
pub fn uprobe_pmu() -> std::io::Result<u32> {
    std::fs::read_to_string("/sys/bus/event_source/devices/uprobe/type")?
        .trim()
        .parse()
        .map_err(|_| std::io::Error::new(std::io::ErrorKind::InvalidData, "unreadable PMU type"))
}

/// Makes `attr` a uprobe (or a return probe) at `offset` of the file `path` (which must
/// outlive the perf_event_open call), of the uprobe PMU `pmu`.
pub fn set_uprobe(
    attr: &mut perf_event_attr,
    pmu: u32,
    path: &std::ffi::CStr,
    offset: u64,
    is_return: bool,
) {
    attr.type_ = pmu;
    // The uprobe PMU's `retprobe` format bit is config:0.
    attr.config = u64::from(is_return);
    attr.__bindgen_anon_3.config1 = path.as_ptr() as u64;
    attr.__bindgen_anon_4.config2 = offset;
}

/// What a sample came from.
#[derive(Clone, Copy)]
struct Probe {
    index: usize,
    is_return: bool,
}

struct Probes {
    _events: Vec<PerfEvent>,
    rings: Vec<RingBuffer>,
    by_id: HashMap<u64, Probe>,
    parse_info: linux_perf_event_reader::RecordParseInfo,
    space: AddressSpace,
    pid: i32,
    /// `malloc, free, ... in LIB`, for the summary.
    probed: String,
}

fn uprobe_attr(pmu: u32, path: &CString, offset: u64, is_return: bool) -> perf_event_attr {
    let mut attr = perf_event_attr {
        size: std::mem::size_of::<perf_event_attr>() as u32,
        ..Default::default()
    };
    set_uprobe(&mut attr, pmu, path, offset, is_return);
    attr.sample_period = 1;
    attr.set_disabled(1);
    attr.set_inherit(1);
    attr.set_exclude_kernel(1);
    attr.set_use_clockid(1);
    attr.clockid = libc::CLOCK_MONOTONIC;
    attr.sample_type = u64::from(
        PERF_SAMPLE_IDENTIFIER
            | PERF_SAMPLE_TID
            | PERF_SAMPLE_TIME
            | PERF_SAMPLE_REGS_USER
            | PERF_SAMPLE_STACK_USER,
    );
    attr.sample_regs_user = (1 << REG_AX)
        | (1 << REG_DX)
        | (1 << REG_SI)
        | (1 << REG_DI)
        | (1 << sys::REG_BP)
        | (1 << sys::REG_SP)
        | (1 << sys::REG_IP);
    // Both kinds share one record layout (a ring holds both); a return needs no stack.
    attr.sample_stack_user = if is_return { 8 } else { STACK_BYTES };
    attr
}

impl Probes {
    fn open(pid: i32, tasks: &[i32]) -> Result<Probes, Error> {
        let pmu = uprobe_pmu().map_err(kernel("uprobes (CONFIG_UPROBE_EVENTS)"))?;
        let (libc, offsets) = allocator_of(pid)?;
        let path =
            CString::new(libc.as_os_str().as_encoded_bytes()).map_err(|_| Error::Attach {
                pid,
                source: std::io::Error::other("C library path with a NUL byte"),
            })?;
        let probed = format!(
            "{} in {}",
            offsets
                .iter()
                .map(|&(index, _)| PROBES[index].0)
                .collect::<Vec<_>>()
                .join(", "),
            libc.file_name().map_or_else(
                || libc.display().to_string(),
                |n| n.to_string_lossy().into_owned()
            )
        );
        let cpus = sys::online_cpus().map_err(kernel("online CPUs"))?;
        let mut events = Vec::new();
        let mut rings = Vec::new();
        let mut by_id = HashMap::new();
        let mut parse_info = None;
        for &cpu in &cpus {
            let mut leader: Option<usize> = None;
            for &(index, offset) in &offsets {
                for is_return in [false, true] {
                    if is_return && !PROBES[index].2 {
                        continue;
                    }
                    let attr = uprobe_attr(pmu, &path, offset, is_return);
                    if !is_return {
                        parse_info.get_or_insert_with(|| sys::parse_info(&attr));
                    }
                    for &task in tasks {
                        let event = PerfEvent::open(&attr, task, cpu)
                            .map_err(kernel("a uprobe on the C library's allocator"))?;
                        match leader {
                            Some(l) => event
                                .set_output(&events[l])
                                .map_err(kernel("sharing a uprobe ring buffer"))?,
                            None => {
                                rings.push(
                                    RingBuffer::map(&event, RING_PAGES)
                                        .map_err(kernel("mapping a uprobe ring buffer"))?,
                                );
                                leader = Some(events.len());
                            }
                        }
                        by_id.insert(
                            event.id().map_err(kernel("a uprobe's id"))?,
                            Probe { index, is_return },
                        );
                        events.push(event);
                    }
                }
            }
        }
        let space = AddressSpace::read(pid)?;
        for event in &events {
            event.enable().map_err(kernel("enabling uprobes"))?;
        }
        Ok(Probes {
            _events: events,
            rings,
            by_id,
            parse_info: parse_info.ok_or_else(|| Error::Attach {
                pid,
                source: std::io::Error::other(format!(
                    "{} exports no allocator function: nothing to probe",
                    libc.display()
                )),
            })?,
            space,
            pid,
            probed,
        })
    }

    fn run(
        self,
        stop: &AtomicBool,
        dir: &Path,
        origin: Origin,
        mono_offset: u64,
    ) -> Result<Converted, Error> {
        let mut out = Output::create(dir, origin)?;
        let probed = self.probed.clone();
        let lost = self.drain_into(stop, &mut out, mono_offset)?;
        let mut converted = out.finish()?;
        converted.dropped = lost;
        converted.probed = Some(probed);
        Ok(converted)
    }

    /// Pairs entries and returns per thread into `out` until `stop`; returns the samples lost.
    fn drain_into(
        mut self,
        stop: &AtomicBool,
        out: &mut impl AllocSink,
        mono_offset: u64,
    ) -> Result<u64, Error> {
        let mut pending: HashMap<u32, Pending> = HashMap::new();
        let mut cache = framehop::x86_64::CacheX86_64::new();
        let mut live = LiveStack::new(0);
        // Each thread's last stack, to complete the next one where the copy ends.
        let mut known: rustc_hash::FxHashMap<u32, crate::unwind::KnownFrames> = Default::default();
        let mut lost = 0u64;
        loop {
            let stopping = stop.load(Ordering::Relaxed);
            let mut samples = Vec::new();
            for ring in &mut self.rings {
                ring.drain(|record| {
                    const PERF_RECORD_LOST: u32 = 2;
                    if record.kind == PERF_RECORD_LOST {
                        lost += record
                            .data
                            .get(8..16)
                            .and_then(|d| d.as_slice().as_ref().try_into().ok())
                            .map_or(0, u64::from_ne_bytes);
                        return;
                    }
                    let raw = RawEventRecord::new(
                        RecordType(record.kind),
                        record.misc,
                        record.data,
                        self.parse_info,
                    );
                    if let Ok(EventRecord::Sample(s)) = raw.parse() {
                        samples.push(Sample::of(&s));
                    }
                });
            }
            samples.sort_by_key(|s| s.time);
            for sample in samples {
                let Some(probe) = self.by_id.get(&sample.id).copied() else {
                    continue;
                };
                let call = PROBES[probe.index].1;
                let time_ns = sample.time.wrapping_add(mono_offset);
                if probe.is_return {
                    if let Some(entry) = pending.remove(&sample.tid)
                        && entry.index == probe.index
                    {
                        let result = match call {
                            // It returns an error code and stores the block through its first
                            // argument.
                            AllocCall::PosixMemalign if sample.ax == 0 => {
                                read_word(self.pid, entry.args[0]).unwrap_or(0)
                            }
                            AllocCall::PosixMemalign => 0,
                            _ => sample.ax,
                        };
                        out.push(entry.event(call, result, sample.tid))?;
                    }
                    continue;
                }
                let regs = (sample.ip, sample.sp, sample.bp);
                let mut frames = Vec::new();
                let unwinder = &self.space.unwinder;
                let thread = known.entry(sample.tid).or_default();
                unwinder.unwind_thread(
                    &mut cache,
                    regs,
                    &sample.stack,
                    &mut live,
                    thread,
                    &mut frames,
                );
                // An address in no known mapping is code mapped since the maps were read (a
                // library dlopen'ed, or a whole new image after an exec): read them again.
                let outside = std::iter::once(sample.ip)
                    .chain(frames.iter().copied())
                    .find(|&addr| !self.space.covers(addr));
                if let Some(addr) = outside
                    && self.space.refresh(addr)
                {
                    frames.clear();
                    // Its rules were cached by address for the old mappings.
                    cache = framehop::x86_64::CacheX86_64::new();
                    let unwinder = &self.space.unwinder;
                    let thread = known.entry(sample.tid).or_default();
                    *thread = Default::default();
                    unwinder.unwind_thread(
                        &mut cache,
                        regs,
                        &sample.stack,
                        &mut live,
                        thread,
                        &mut frames,
                    );
                }
                // The first frame is the probed function's entry; the stack starts at its caller.
                let stack_id = out.stack(&frames[frames.len().min(1)..])?;
                let entry = Pending {
                    index: probe.index,
                    time_ns,
                    args: [sample.di, sample.si, sample.dx],
                    stack_id,
                };
                if call == AllocCall::Free {
                    if entry.args[0] != 0 {
                        out.push(entry.event(call, entry.args[0], sample.tid))?;
                    }
                } else {
                    pending.insert(sample.tid, entry);
                }
            }
            if stopping {
                break;
            }
            out.lost(lost);
            std::thread::sleep(Duration::from_millis(1));
        }
        Ok(lost)
    }
}

fn read_word(pid: i32, addr: u64) -> Option<u64> {
    let mut word = [0u8; 8];
    let local = libc::iovec {
        iov_base: word.as_mut_ptr().cast(),
        iov_len: 8,
    };
    let remote = libc::iovec {
        iov_base: addr as *mut libc::c_void,
        iov_len: 8,
    };
    // SAFETY: reads 8 bytes of another process into our buffer; the kernel checks the range.
    let n = unsafe { libc::process_vm_readv(pid, &local, 1, &remote, 1, 0) };
    (n == 8).then(|| u64::from_ne_bytes(word))
}

/// What the reader knows of the traced process's executable mappings, and their unwinder.
struct AddressSpace {
    pid: i32,
    /// The executable mappings' lines of the /proc/PID/maps text they were built from.
    exec_lines: String,
    /// Every executable mapping's range, file-backed or not, sorted.
    exec: Vec<Range<u64>>,
    unwinder: AddressSpaceUnwinder,
    /// Addresses still in no mapping after the maps were read again (garbage from a frame
    /// pointer fallback, or code already unmapped): they do not make the maps read again.
    strays: HashSet<u64>,
}

/// The lines of a /proc/PID/maps text that map executable memory.
fn executable_lines(maps: &str) -> String {
    maps.lines()
        .filter(|line| {
            fltrace_trace::parse_procmaps_line(line).is_some_and(|mapping| mapping.is_exec())
        })
        .flat_map(|line| [line, "\n"])
        .collect()
}

/// Stray addresses remembered at most; the set starts again beyond.
const MAX_STRAYS: usize = 4096;

impl AddressSpace {
    fn read(pid: i32) -> Result<AddressSpace, Error> {
        let maps = std::fs::read_to_string(format!("/proc/{pid}/maps"))
            .map_err(|source| Error::Attach { pid, source })?;
        Ok(AddressSpace::of(pid, &maps))
    }

    fn of(pid: i32, maps: &str) -> AddressSpace {
        let mut cache = ElfCache::default();
        let mut unwinder = AddressSpaceUnwinder::default();
        let mut exec = Vec::new();
        let exec_lines = executable_lines(maps);
        for mapping in exec_lines
            .lines()
            .filter_map(fltrace_trace::parse_procmaps_line)
        {
            exec.push(mapping.start.get()..mapping.end.get());
            if mapping.is_file() {
                let file = PathBuf::from(format!("/proc/{pid}/root{}", mapping.path));
                unwinder.add_mapping(&mut cache, &mapping, &file);
            }
        }
        exec.sort_by_key(|r| r.start);
        AddressSpace {
            pid,
            exec_lines,
            exec,
            unwinder,
            strays: HashSet::new(),
        }
    }

    /// Whether `addr` lies in an executable mapping of the last maps read.
    fn covers(&self, addr: u64) -> bool {
        let after = self.exec.partition_point(|r| r.start <= addr);
        after > 0 && self.exec[after - 1].contains(&addr)
    }

    /// Reads the maps again because `addr` lies outside them; whether the unwinder changed.
    fn refresh(&mut self, addr: u64) -> bool {
        if self.strays.contains(&addr) {
            return false;
        }
        // A process that has gone keeps the mappings last read.
        let Ok(maps) = std::fs::read_to_string(format!("/proc/{}/maps", self.pid)) else {
            return false;
        };
        // Only new code matters: heaps and thread stacks come and go all the time.
        if executable_lines(&maps) == self.exec_lines {
            if self.strays.len() >= MAX_STRAYS {
                self.strays.clear();
            }
            self.strays.insert(addr);
            return false;
        }
        log::debug!(
            "process {}: new executable mappings, unwinder rebuilt",
            self.pid
        );
        *self = AddressSpace::of(self.pid, &maps);
        true
    }
}

/// The fields of a uprobe sample.
struct Sample {
    id: u64,
    tid: u32,
    time: u64,
    ax: u64,
    dx: u64,
    si: u64,
    di: u64,
    bp: u64,
    sp: u64,
    ip: u64,
    stack: Vec<u8>,
}

impl Sample {
    fn of(s: &linux_perf_event_reader::SampleRecord<'_>) -> Sample {
        let reg = |n| s.user_regs.as_ref().and_then(|r| r.get(n)).unwrap_or(0);
        let stack = match &s.user_stack {
            Some((data, dyn_size)) => {
                let len = (*dyn_size as usize).min(data.len());
                data.get(0..len)
                    .map(|d| d.as_slice().into_owned())
                    .unwrap_or_default()
            }
            None => Vec::new(),
        };
        Sample {
            id: s.id.unwrap_or(0),
            tid: s.tid.unwrap_or(0) as u32,
            time: s.timestamp.unwrap_or(0),
            ax: reg(REG_AX),
            dx: reg(REG_DX),
            si: reg(REG_SI),
            di: reg(REG_DI),
            bp: reg(sys::REG_BP),
            sp: reg(sys::REG_SP),
            ip: reg(sys::REG_IP),
            stack,
        }
    }
}

/// An entry waiting for its return.
struct Pending {
    index: usize,
    time_ns: u64,
    /// rdi, rsi, rdx at entry.
    args: [u64; 3],
    stack_id: u32,
}

impl Pending {
    fn event(&self, call: AllocCall, result: u64, tid: u32) -> AllocEvent {
        let [a, b, c] = self.args;
        let (size, old_addr, detail) = match call {
            AllocCall::Calloc => (a.saturating_mul(b), 0, 0),
            AllocCall::Realloc => (b, a, 0),
            AllocCall::PosixMemalign => (c, 0, b),
            AllocCall::AlignedAlloc | AllocCall::Memalign => (b, 0, a),
            AllocCall::Free => (0, 0, 0),
            _ => (a, 0, 0),
        };
        AllocEvent {
            time_ns: self.time_ns,
            tid,
            call,
            // The registers of the probed call: the edge where raw values become addresses.
            addr: VirtAddr::new(result),
            size,
            old_addr: VirtAddr::new(old_addr),
            detail,
            stack_id: if call == AllocCall::Free {
                AllocEvent::NO_STACK
            } else {
                self.stack_id
            },
        }
    }
}

/// Where paired allocation events go: the recording's tables, or a live table of blocks.
trait AllocSink {
    /// The id of a stack (innermost return address first).
    fn stack(&mut self, frames: &[u64]) -> Result<u32, Error>;
    /// One call, paired with its result.
    fn push(&mut self, event: AllocEvent) -> Result<(), Error>;
    /// The samples the kernel dropped so far.
    fn lost(&mut self, _total: u64) {}
}

/// The tables being written.
struct Output {
    allocs: AllocWriter,
    stacks: StackWriter,
    ids: HashMap<Vec<u64>, u32>,
    events: u64,
}

impl Output {
    fn create(dir: &Path, origin: Origin) -> Result<Output, Error> {
        let pid = origin.pid;
        Ok(Output {
            allocs: AllocWriter::create_for(&files::allocs(dir, pid), origin.clone())?,
            stacks: StackWriter::create_for(&files::alloc_stacks(dir, pid), origin)?,
            ids: HashMap::new(),
            events: 0,
        })
    }
}

impl AllocSink for Output {
    fn stack(&mut self, frames: &[u64]) -> Result<u32, Error> {
        if let Some(&id) = self.ids.get(frames) {
            return Ok(id);
        }
        let id = self.ids.len() as u32;
        self.stacks.push(Stack {
            end: fltrace_trace::StackEnd::Unknown,
            id,
            generation: 0,
            frames: frames.iter().map(|&frame| CodeAddr::new(frame)).collect(),
        })?;
        self.ids.insert(frames.to_vec(), id);
        Ok(id)
    }

    fn push(&mut self, event: AllocEvent) -> Result<(), Error> {
        self.events += 1;
        Ok(self.allocs.push(event)?)
    }
}

impl Output {
    fn finish(self) -> Result<Converted, Error> {
        self.allocs.finish()?;
        self.stacks.finish()?;
        Ok(Converted {
            events: self.events,
            stacks: self.ids.len() as u32,
            ..Converted::default()
        })
    }
}

/// The blocks a running process has not freed, kept live from the same uprobes (for
/// `fltrace memleak -p PID`: complete DWARF stacks where the kernel's frame-pointer walk stops).
pub struct LiveAllocs {
    reader: ReaderThread<u64>,
    table: Arc<Mutex<BlockTable>>,
}

/// Outstanding blocks of one allocation stack.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OutstandingStack {
    /// Return addresses, innermost first (the allocator's caller first).
    pub frames: Vec<u64>,
    /// Bytes not freed.
    pub bytes: u64,
    /// Blocks not freed.
    pub blocks: u64,
}

/// What is outstanding at one moment.
#[derive(Debug, Clone, Default)]
pub struct OutstandingBlocks {
    /// By stack, in no particular order.
    pub stacks: Vec<OutstandingStack>,
    /// Allocations seen since the start.
    pub allocs: u64,
    /// Frees (and reallocations) of known blocks since the start.
    pub frees: u64,
    /// Samples the kernel dropped (their calls are missing).
    pub lost: u64,
}

impl LiveAllocs {
    /// Places the probes on `pid`'s C library for `tasks` (and the threads they start).
    pub fn start(pid: i32, tasks: &[i32]) -> Result<LiveAllocs, Error> {
        let probes = Probes::open(pid, tasks)?;
        let table = Arc::new(Mutex::new(BlockTable::default()));
        let mut sink = SharedTable(table.clone());
        let reader = ReaderThread::spawn("fltrace-memleak", "the uprobe reader", move |stop| {
            probes.drain_into(stop, &mut sink, 0)
        })?;
        Ok(LiveAllocs { reader, table })
    }

    /// The blocks allocated at least `older_than` before `now_ns` (CLOCK_MONOTONIC) and not
    /// freed, grouped by stack.
    pub fn outstanding(&self, now_ns: u64, older_than: Duration) -> OutstandingBlocks {
        let cutoff = now_ns.saturating_sub(older_than.as_nanos() as u64);
        // A poisoned lock only means the reader panicked mid-update: the table is still usable.
        let table = self.table.lock().unwrap_or_else(|e| e.into_inner());
        let mut groups: HashMap<u32, (u64, u64)> = HashMap::new();
        for block in table.blocks.values().filter(|b| b.time_ns <= cutoff) {
            let group = groups.entry(block.stack_id).or_default();
            group.0 += block.size;
            group.1 += 1;
        }
        OutstandingBlocks {
            stacks: groups
                .into_iter()
                .map(|(id, (bytes, blocks))| OutstandingStack {
                    frames: table.stacks.get(id as usize).cloned().unwrap_or_default(),
                    bytes,
                    blocks,
                })
                .collect(),
            allocs: table.allocs,
            frees: table.frees,
            lost: table.lost,
        }
    }

    /// Removes the probes; an error is the reader's.
    pub fn finish(self) -> Result<(), Error> {
        self.reader.finish().map(|_| ())
    }
}

/// One block not yet freed.
struct Block {
    size: u64,
    stack_id: u32,
    time_ns: u64,
}

/// Blocks by address and the stacks they came from.
#[derive(Default)]
struct BlockTable {
    blocks: HashMap<VirtAddr, Block>,
    stacks: Vec<Vec<u64>>,
    ids: HashMap<Vec<u64>, u32>,
    allocs: u64,
    frees: u64,
    lost: u64,
}

impl BlockTable {
    fn release(&mut self, addr: VirtAddr) {
        if !addr.is_null() && self.blocks.remove(&addr).is_some() {
            self.frees += 1;
        }
    }

    fn apply(&mut self, event: &AllocEvent) {
        match event.call {
            AllocCall::Free => self.release(event.addr),
            call => {
                // The old block is gone whether or not the new one was made in place, unless
                // the realloc failed (no block for a size), which leaves it live.
                if call == AllocCall::Realloc && (!event.addr.is_null() || event.size == 0) {
                    self.release(event.old_addr);
                }
                if !event.addr.is_null() {
                    self.allocs += 1;
                    self.blocks.insert(
                        event.addr,
                        Block {
                            size: event.size,
                            stack_id: event.stack_id,
                            time_ns: event.time_ns,
                        },
                    );
                }
            }
        }
    }
}

/// The reader's side of a [`BlockTable`] shared with [`LiveAllocs::outstanding`].
struct SharedTable(Arc<Mutex<BlockTable>>);

impl SharedTable {
    fn table(&self) -> std::sync::MutexGuard<'_, BlockTable> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl AllocSink for SharedTable {
    fn stack(&mut self, frames: &[u64]) -> Result<u32, Error> {
        let mut table = self.table();
        if let Some(&id) = table.ids.get(frames) {
            return Ok(id);
        }
        let id = table.stacks.len() as u32;
        table.stacks.push(frames.to_vec());
        table.ids.insert(frames.to_vec(), id);
        Ok(id)
    }

    fn push(&mut self, event: AllocEvent) -> Result<(), Error> {
        self.table().apply(&event);
        Ok(())
    }

    fn lost(&mut self, total: u64) {
        self.table().lost = total;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(call: AllocCall, addr: u64, size: u64, old_addr: u64, stack_id: u32) -> AllocEvent {
        AllocEvent {
            time_ns: 10,
            tid: 1,
            call,
            addr: VirtAddr::new(addr),
            size,
            old_addr: VirtAddr::new(old_addr),
            detail: 0,
            stack_id,
        }
    }

    #[test]
    fn executable_mappings_are_covered_and_read_again_when_an_address_is_outside() {
        let maps = "1000-3000 r-xp 00000000 00:00 0 \n\
                    5000-6000 rw-p 00000000 00:00 0 \n\
                    7000-8000 r-xp 00000000 00:00 0 [vdso]\n";
        let space = AddressSpace::of(std::process::id() as i32, maps);
        assert!(space.covers(0x1000) && space.covers(0x2fff) && space.covers(0x7800));
        assert!(!space.covers(0xfff) && !space.covers(0x3000) && !space.covers(0x5800));
        // A sleeping child's maps hold its code, which the empty ones do not. Not our own
        // maps: tests running beside this one map new code into this process.
        let mut child = SleepingChild::start();
        let code = child.code_address();
        let mut space = AddressSpace::of(child.pid(), "");
        assert!(!space.covers(code));
        assert!(space.refresh(code));
        assert!(space.covers(code));
        // Read again with nothing new: no rebuild, and the address is not asked about again.
        assert!(!space.refresh(8));
        assert!(space.strays.contains(&8));
        child.stop();
    }

    /// `sleep`, killed and reaped when dropped.
    struct SleepingChild(std::process::Child);

    impl SleepingChild {
        fn start() -> SleepingChild {
            let child = std::process::Command::new("sleep")
                .arg("60")
                .spawn()
                .expect("sleep starts");
            SleepingChild(child)
        }

        fn pid(&self) -> i32 {
            self.0.id() as i32
        }

        /// The start of the executable mapping of `sleep` itself, once it has exec'ed, loaded
        /// its libraries and gone to sleep (so that its code mappings no longer change).
        fn code_address(&self) -> u64 {
            for _ in 0..500 {
                std::thread::sleep(std::time::Duration::from_millis(10));
                let stat = std::fs::read_to_string(format!("/proc/{}/stat", self.pid()))
                    .expect("the child's stat");
                let asleep = stat.rsplit(") ").next().is_some_and(|s| s.starts_with('S'));
                let maps = std::fs::read_to_string(format!("/proc/{}/maps", self.pid()))
                    .expect("the child's maps");
                if !asleep || !maps.contains("libc") {
                    continue;
                }
                let code = maps.lines().find(|line| {
                    let fields: Vec<&str> = line.split_whitespace().collect();
                    fields.len() >= 6 && fields[1] == "r-xp" && fields[5].ends_with("/sleep")
                });
                if let Some(line) = code {
                    let start = line.split('-').next().expect("a range");
                    return u64::from_str_radix(start, 16).expect("a hex address");
                }
            }
            panic!("sleep never showed its code in /proc/PID/maps");
        }

        fn stop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }

    impl Drop for SleepingChild {
        fn drop(&mut self) {
            self.stop();
        }
    }

    #[test]
    fn blocks_follow_malloc_realloc_and_free() {
        let mut table = BlockTable::default();
        table.apply(&event(AllocCall::Malloc, 0x1000, 16, 0, 0));
        table.apply(&event(AllocCall::Calloc, 0x2000, 32, 0, 1));
        table.apply(&event(AllocCall::Realloc, 0x3000, 64, 0x1000, 2));
        table.apply(&event(AllocCall::Free, 0x2000, 0, 0, AllocEvent::NO_STACK));
        // A free of a block allocated before the probes is not counted.
        table.apply(&event(AllocCall::Free, 0x9000, 0, 0, AllocEvent::NO_STACK));
        // A failed allocation leaves nothing.
        table.apply(&event(AllocCall::Malloc, 0, 8, 0, 0));
        assert_eq!(table.allocs, 3);
        assert_eq!(table.frees, 2);
        assert_eq!(table.blocks.len(), 1);
        let block = &table.blocks[&VirtAddr::new(0x3000)];
        assert_eq!((block.size, block.stack_id), (64, 2));
        // A failed realloc leaves the old block live.
        table.apply(&event(AllocCall::Realloc, 0, 1 << 40, 0x3000, 3));
        assert_eq!(table.blocks.len(), 1);
        assert_eq!(table.blocks[&VirtAddr::new(0x3000)].size, 64);
    }
}
