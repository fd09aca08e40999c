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
    PERF_RECORD_LOST, PERF_SAMPLE_IDENTIFIER, PERF_SAMPLE_REGS_USER, PERF_SAMPLE_STACK_USER,
    PERF_SAMPLE_TID, PERF_SAMPLE_TIME, perf_event_attr,
};

use fltrace_trace::{
    AllocCall, AllocEvent, AllocWriter, CodeAddr, Origin, Stack, StackWriter, VirtAddr, files,
};

use crate::live::LiveAllocSink;
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

/// Ring buffer pages per CPU for `memleak`: 64 MiB, eight thousand entry samples, so that a
/// burst of allocations waits in the ring while the reader unwinds rather than being lost.
const LIVE_RING_PAGES: usize = 16384;

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
    /// start), writing into `dir` when finished; `live`: a live view is told of the calls
    /// as they are read (every [`LIVE_EVERY`]).
    pub fn start(
        pid: i32,
        tasks: &[i32],
        dir: &Path,
        mono_offset: u64,
        recording: &str,
        live: Option<LiveAllocSink>,
    ) -> Result<AttachedAllocs, Error> {
        let probes = Probes::open(pid, tasks, RING_PAGES, 1)?;
        let dir = dir.to_owned();
        let origin = Origin::new(recording, pid as u32);
        ReaderThread::spawn("fltrace-uprobes", "the uprobe reader", move |stop| {
            probes.run(stop, &dir, origin, mono_offset, live)
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
    let paths: Vec<String> = crate::procfs::mappings(pid)
        .map_err(|source| Error::Attach { pid, source })?
        .into_iter()
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

/// The attributes of one probe: an allocator's entry samples its stack (every `period`-th
/// call), its return and `free` only their registers (every call).
fn uprobe_attr(
    pmu: u32,
    path: &CString,
    offset: u64,
    index: usize,
    is_return: bool,
    period: u64,
) -> perf_event_attr {
    let mut attr = perf_event_attr {
        size: std::mem::size_of::<perf_event_attr>() as u32,
        ..Default::default()
    };
    set_uprobe(&mut attr, pmu, path, offset, is_return);
    let is_free = PROBES[index].1 == AllocCall::Free;
    // A return without its sampled entry is skipped; every free is seen, so that a sampled
    // block freed is not taken for a leak.
    attr.sample_period = if is_return || is_free { 1 } else { period };
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
    // All kinds share one record layout (a ring holds them all); a return or a free needs no
    // stack, and copying none halves the ring a malloc/free churn takes.
    attr.sample_stack_user = if is_return || is_free { 8 } else { STACK_BYTES };
    attr
}

impl Probes {
    fn open(pid: i32, tasks: &[i32], ring_pages: usize, period: u64) -> Result<Probes, Error> {
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
                    let attr = uprobe_attr(pmu, &path, offset, index, is_return, period);
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
                                    RingBuffer::map(&event, ring_pages)
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
        live: Option<LiveAllocSink>,
    ) -> Result<Converted, Error> {
        let mut out = Output::create(dir, origin)?;
        out.live = live.map(|sink| LiveOut::new(sink, out.origin.pid));
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
        let mut lost = 0u64;
        loop {
            let stopping = stop.load(Ordering::Relaxed);
            // Every sample taken before this instant is in the rings now: once they are read,
            // the sink is current up to it.
            let pass_start = monotonic_ns();
            let mut samples = Vec::new();
            for ring in &mut self.rings {
                ring.drain(|record| {
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
                        let mut sample = Sample::of(&s);
                        let is_entry = self
                            .by_id
                            .get(&sample.id)
                            .is_some_and(|p| !p.is_return && PROBES[p.index].1 != AllocCall::Free);
                        // Unwound here, from the ring itself: copying each 8 KiB stack out
                        // first took most of the reader's time.
                        if is_entry {
                            sample.frames = unwind_entry(
                                &mut self.space,
                                &mut cache,
                                &mut live,
                                &sample,
                                &user_stack(&s),
                            );
                        }
                        samples.push(sample);
                    }
                });
            }
            samples.sort_by_key(|s| s.time);
            let busy = !samples.is_empty();
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
                if call == AllocCall::Free {
                    if sample.di != 0 {
                        let entry = Pending {
                            index: probe.index,
                            time_ns,
                            args: [sample.di, 0, 0],
                            stack_id: AllocEvent::NO_STACK,
                        };
                        out.push(entry.event(call, sample.di, sample.tid))?;
                    }
                    continue;
                }
                let frames = &sample.frames;
                // The first frame is the probed function's entry; the stack starts at its caller.
                let stack_id = out.stack(&frames[frames.len().min(1)..])?;
                let entry = Pending {
                    index: probe.index,
                    time_ns,
                    args: [sample.di, sample.si, sample.dx],
                    stack_id,
                };
                pending.insert(sample.tid, entry);
            }
            out.lost(lost);
            out.drained(pass_start);
            // Every call entered before this is in, but those of threads still inside one
            // (which hold the others back for a second at most).
            let now = pass_start.wrapping_add(mono_offset);
            let settled = pending
                .values()
                .map(|p| p.time_ns)
                .fold(now, u64::min)
                .max(now.saturating_sub(1_000_000_000));
            out.settled(settled);
            if stopping {
                break;
            }
            // A reader behind reads on at once; one that is current waits for more.
            if !busy {
                std::thread::sleep(Duration::from_millis(1));
            }
        }
        Ok(lost)
    }
}

/// The return addresses of an entry sample, the probed function's entry first.
fn unwind_entry(
    space: &mut AddressSpace,
    cache: &mut framehop::x86_64::CacheX86_64,
    live: &mut LiveStack,
    sample: &Sample,
    stack: &[u8],
) -> Vec<u64> {
    let regs = (sample.ip, sample.sp, sample.bp);
    let mut frames = Vec::new();
    space.unwinder.unwind(cache, regs, stack, live, &mut frames);
    // An address in no known mapping is code mapped since the maps were read (a library
    // dlopen'ed, or a whole new image after an exec): read them again.
    let outside = std::iter::once(sample.ip)
        .chain(frames.iter().copied())
        .find(|&addr| !space.covers(addr));
    if let Some(addr) = outside
        && space.refresh(addr)
    {
        frames.clear();
        // Its rules were cached by address for the old mappings.
        *cache = framehop::x86_64::CacheX86_64::new();
        space.unwinder.unwind(cache, regs, stack, live, &mut frames);
    }
    frames
}

/// The user stack bytes a sample copied (borrowed from the ring unless it wraps there).
fn user_stack<'a>(s: &linux_perf_event_reader::SampleRecord<'a>) -> std::borrow::Cow<'a, [u8]> {
    match &s.user_stack {
        Some((data, dyn_size)) => {
            let len = (*dyn_size as usize).min(data.len());
            data.get(0..len).map(|d| d.as_slice()).unwrap_or_default()
        }
        None => std::borrow::Cow::Borrowed(&[]),
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
        let maps = crate::procfs::maps_text(pid).map_err(|source| Error::Attach { pid, source })?;
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
        let Ok(maps) = crate::procfs::maps_text(self.pid) else {
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
    /// An allocator entry's return addresses (unwound as it is read).
    frames: Vec<u64>,
}

impl Sample {
    fn of(s: &linux_perf_event_reader::SampleRecord<'_>) -> Sample {
        let reg = |n| s.user_regs.as_ref().and_then(|r| r.get(n)).unwrap_or(0);
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
            frames: Vec::new(),
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
    /// Every call made before `_time_ns` (CLOCK_MONOTONIC) has been pushed.
    fn drained(&mut self, _time_ns: u64) {}
    /// Every call entered before `_time_ns` (the events' clock) has been pushed: those of
    /// threads inside a call are not yet.
    fn settled(&mut self, _time_ns: u64) {}
}

/// CLOCK_MONOTONIC now, the clock of the probes' samples.
fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime fills a valid timespec.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// The tables being written.
struct Output {
    allocs: AllocWriter,
    stacks: StackWriter,
    ids: HashMap<Vec<u64>, u32>,
    events: u64,
    totals: fltrace_trace::AllocTotals,
    totals_path: std::path::PathBuf,
    origin: Origin,
    /// What a live view is told.
    live: Option<LiveOut>,
}

/// How often a live view is told of the calls read.
pub const LIVE_EVERY: Duration = Duration::from_millis(50);

/// The calls and stacks read since a live view was last told of them.
struct LiveOut {
    sink: LiveAllocSink,
    /// The process, as the recording files it.
    pid: u32,
    stacks: Vec<Stack>,
    /// In the order read: a call is pushed at its return, timed at its entry.
    events: Vec<AllocEvent>,
    lost: u64,
    /// The last call's time the view was told of: it takes calls in time order.
    told_ns: u64,
    told_at: std::time::Instant,
}

impl LiveOut {
    fn new(sink: LiveAllocSink, pid: u32) -> LiveOut {
        LiveOut {
            sink,
            pid,
            stacks: Vec::new(),
            events: Vec::new(),
            lost: 0,
            told_ns: 0,
            told_at: std::time::Instant::now(),
        }
    }

    /// Tells the view of the stacks and of the calls up to `settled` (all of them at the
    /// end, `None`), in time order: a call entered before another but read after it (its
    /// thread was inside it past `settled`, which goes on after a second) is told at the
    /// time of the last call told, for the view pairs calls in time order (the tables keep
    /// its own time).
    fn tell(&mut self, settled: Option<u64>) {
        self.events.sort_by_key(|e| e.time_ns);
        let ready = match settled {
            Some(time) => self.events.partition_point(|e| e.time_ns <= time),
            None => self.events.len(),
        };
        let mut events: Vec<AllocEvent> = self.events.drain(..ready).collect();
        for event in &mut events {
            event.time_ns = event.time_ns.max(self.told_ns);
            self.told_ns = event.time_ns;
        }
        let allocs = crate::live::LiveAllocs {
            pid: self.pid,
            restart: false,
            stacks: std::mem::take(&mut self.stacks),
            events,
            execs: Vec::new(),
            dropped: self.lost,
        };
        if !allocs.is_empty() {
            (self.sink)(allocs);
        }
        self.told_at = std::time::Instant::now();
    }
}

impl Output {
    fn create(dir: &Path, origin: Origin) -> Result<Output, Error> {
        let pid = origin.pid;
        Ok(Output {
            allocs: AllocWriter::create_for(&files::allocs(dir, pid), origin.clone())?,
            stacks: StackWriter::create_for(&files::alloc_stacks(dir, pid), origin.clone())?,
            ids: HashMap::new(),
            events: 0,
            totals: fltrace_trace::AllocTotals::default(),
            totals_path: files::alloc_totals(dir, pid),
            origin,
            live: None,
        })
    }
}

impl AllocSink for Output {
    fn stack(&mut self, frames: &[u64]) -> Result<u32, Error> {
        if let Some(&id) = self.ids.get(frames) {
            return Ok(id);
        }
        let id = self.ids.len() as u32;
        let stack = Stack {
            end: fltrace_trace::StackEnd::Unknown,
            id,
            generation: 0,
            frames: frames.iter().map(|&frame| CodeAddr::new(frame)).collect(),
        };
        if let Some(live) = &mut self.live {
            live.stacks.push(stack.clone());
        }
        self.stacks.push(stack)?;
        self.ids.insert(frames.to_vec(), id);
        Ok(id)
    }

    fn push(&mut self, event: AllocEvent) -> Result<(), Error> {
        self.events += 1;
        self.totals.add(&event);
        if let Some(live) = &mut self.live {
            live.events.push(event);
        }
        Ok(self.allocs.push(event)?)
    }

    fn lost(&mut self, total: u64) {
        if let Some(live) = &mut self.live {
            live.lost = total;
        }
    }

    fn settled(&mut self, time_ns: u64) {
        if let Some(live) = self
            .live
            .as_mut()
            .filter(|l| l.told_at.elapsed() >= LIVE_EVERY)
        {
            live.tell(Some(time_ns));
        }
    }
}

impl Output {
    fn finish(mut self) -> Result<Converted, Error> {
        if let Some(live) = &mut self.live {
            live.tell(None);
        }
        self.allocs.finish()?;
        self.stacks.finish()?;
        fltrace_trace::write_alloc_totals(&self.totals_path, self.origin, &self.totals.totals())?;
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

/// What [`LiveAllocs`] keeps (bcc memleak's `-s`, `-z`, `-Z`).
#[derive(Debug, Clone, Copy)]
pub struct LiveOptions {
    /// One allocation sampled every `period` calls (by the kernel, so that the others cost
    /// only the trap); 1 for every one.
    pub period: u64,
    /// Blocks smaller than this are not kept.
    pub min_size: u64,
    /// Blocks larger than this are not kept.
    pub max_size: u64,
}

impl Default for LiveOptions {
    fn default() -> LiveOptions {
        LiveOptions {
            period: 1,
            min_size: 0,
            max_size: u64::MAX,
        }
    }
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
    /// Each block's address and size, when asked for.
    pub addresses: Vec<(u64, u64)>,
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
    pub fn start(pid: i32, tasks: &[i32], options: LiveOptions) -> Result<LiveAllocs, Error> {
        let probes = Probes::open(pid, tasks, LIVE_RING_PAGES, options.period.max(1))?;
        let table = Arc::new(Mutex::new(BlockTable {
            sizes: options.min_size..=options.max_size,
            ..BlockTable::default()
        }));
        let mut sink = SharedTable(table.clone());
        let reader = ReaderThread::spawn("fltrace-memleak", "the uprobe reader", move |stop| {
            probes.drain_into(stop, &mut sink, 0)
        })?;
        Ok(LiveAllocs { reader, table })
    }

    /// Waits until every call made before `time_ns` (CLOCK_MONOTONIC) is in the table, for
    /// at most `patience`; false if the reader is still behind (or has ended) then.
    pub fn wait_drained(&self, time_ns: u64, patience: Duration) -> bool {
        let start = std::time::Instant::now();
        loop {
            if self
                .table
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .drained_ns
                >= time_ns
            {
                return true;
            }
            if self.reader.is_finished() || start.elapsed() >= patience {
                return false;
            }
            std::thread::sleep(Duration::from_millis(2));
        }
    }

    /// The blocks allocated at least `older_than` before `now_ns` (CLOCK_MONOTONIC) and not
    /// freed, grouped by stack; with `addresses`, each block's address and size too.
    pub fn outstanding(
        &self,
        now_ns: u64,
        older_than: Duration,
        addresses: bool,
    ) -> OutstandingBlocks {
        let cutoff = now_ns.saturating_sub(older_than.as_nanos() as u64);
        // A poisoned lock only means the reader panicked mid-update: the table is still usable.
        let table = self.table.lock().unwrap_or_else(|e| e.into_inner());
        // Stack id -> bytes, blocks, (address, size) of each.
        type Group = (u64, u64, Vec<(u64, u64)>);
        let mut groups: HashMap<u32, Group> = HashMap::new();
        for (addr, block) in table.blocks.iter().filter(|(_, b)| b.time_ns <= cutoff) {
            let group = groups.entry(block.stack_id).or_default();
            group.0 += block.size;
            group.1 += 1;
            if addresses {
                group.2.push((addr.get(), block.size));
            }
        }
        OutstandingBlocks {
            stacks: groups
                .into_iter()
                .map(|(id, (bytes, blocks, mut addresses))| {
                    addresses.sort_unstable();
                    OutstandingStack {
                        frames: table.stacks.get(id as usize).cloned().unwrap_or_default(),
                        bytes,
                        blocks,
                        addresses,
                    }
                })
                .collect(),
            allocs: table.allocs,
            frees: table.frees,
            lost: table.lost,
        }
    }

    /// The totals by stack kept as blocks come and go (bcc memleak's `--combined-only`):
    /// every age, without walking the blocks.
    pub fn combined(&self) -> OutstandingBlocks {
        let table = self.table.lock().unwrap_or_else(|e| e.into_inner());
        OutstandingBlocks {
            stacks: table
                .combined
                .iter()
                .filter(|(_, total)| total.1 > 0)
                .map(|(&id, &(bytes, blocks))| OutstandingStack {
                    frames: table.stacks.get(id as usize).cloned().unwrap_or_default(),
                    bytes,
                    blocks,
                    addresses: Vec::new(),
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
struct BlockTable {
    blocks: HashMap<VirtAddr, Block>,
    stacks: Vec<Vec<u64>>,
    ids: HashMap<Vec<u64>, u32>,
    /// Bytes and blocks outstanding by stack id.
    combined: HashMap<u32, (u64, u64)>,
    /// Sizes of the blocks kept.
    sizes: std::ops::RangeInclusive<u64>,
    allocs: u64,
    frees: u64,
    lost: u64,
    /// Every call made before this time (CLOCK_MONOTONIC) has been applied.
    drained_ns: u64,
}

impl Default for BlockTable {
    fn default() -> BlockTable {
        BlockTable {
            blocks: HashMap::new(),
            stacks: Vec::new(),
            ids: HashMap::new(),
            combined: HashMap::new(),
            sizes: 0..=u64::MAX,
            allocs: 0,
            frees: 0,
            lost: 0,
            drained_ns: 0,
        }
    }
}

impl BlockTable {
    fn release(&mut self, addr: VirtAddr) {
        if addr.is_null() {
            return;
        }
        if self.forget(addr) {
            self.frees += 1;
        }
    }

    /// Removes the block at `addr` from the table and its stack's totals; false if unknown.
    fn forget(&mut self, addr: VirtAddr) -> bool {
        let Some(block) = self.blocks.remove(&addr) else {
            return false;
        };
        if let Some(total) = self.combined.get_mut(&block.stack_id) {
            total.0 = total.0.saturating_sub(block.size);
            total.1 = total.1.saturating_sub(1);
        }
        true
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
                if !event.addr.is_null() && self.sizes.contains(&event.size) {
                    self.allocs += 1;
                    // An address handed out again without its free seen (a lost sample).
                    self.forget(event.addr);
                    let total = self.combined.entry(event.stack_id).or_default();
                    total.0 += event.size;
                    total.1 += 1;
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

    fn drained(&mut self, time_ns: u64) {
        self.table().drained_ns = time_ns;
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

    /// A live view is told of the calls settled, in time order, and of one read late (its
    /// thread was inside it for long) at the time of the last told, so that it pairs them.
    #[test]
    fn a_live_view_is_told_of_settled_calls_in_time_order() {
        let told = Arc::new(Mutex::new(Vec::new()));
        let sink: LiveAllocSink = {
            let told = told.clone();
            Arc::new(move |allocs: crate::live::LiveAllocs| told.lock().expect("lock").push(allocs))
        };
        let mut live = LiveOut::new(sink, 7);
        let at = |time_ns, addr| AllocEvent {
            time_ns,
            ..event(AllocCall::Malloc, addr, 8, 0, 0)
        };
        live.events = vec![at(30, 3), at(10, 1), at(50, 5)];
        live.lost = 2;
        live.tell(Some(30));
        live.events.extend([at(20, 2), at(60, 6)]);
        live.tell(None);
        let told = told.lock().expect("lock");
        let times = |i: usize| -> Vec<(u64, u64)> {
            told[i]
                .events
                .iter()
                .map(|e| (e.time_ns, e.addr.get()))
                .collect()
        };
        assert_eq!(told.len(), 2);
        assert_eq!((told[0].pid, told[0].dropped), (7, 2));
        assert_eq!(times(0), [(10, 1), (30, 3)]);
        assert_eq!(times(1), [(30, 2), (50, 5), (60, 6)]);
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

    #[test]
    fn totals_by_stack_follow_blocks_and_sizes_outside_the_range_are_not_kept() {
        let mut table = BlockTable {
            sizes: 16..=64,
            ..BlockTable::default()
        };
        table.apply(&event(AllocCall::Malloc, 0x1000, 16, 0, 0));
        table.apply(&event(AllocCall::Malloc, 0x2000, 64, 0, 0));
        table.apply(&event(AllocCall::Malloc, 0x3000, 65, 0, 0));
        table.apply(&event(AllocCall::Malloc, 0x4000, 15, 0, 1));
        assert_eq!((table.allocs, table.blocks.len()), (2, 2));
        assert_eq!(table.combined[&0], (80, 2));
        table.apply(&event(AllocCall::Free, 0x1000, 0, 0, AllocEvent::NO_STACK));
        // The same address again without its free seen: the old block is replaced, not freed.
        table.apply(&event(AllocCall::Malloc, 0x2000, 32, 0, 1));
        assert_eq!(table.frees, 1);
        assert_eq!(table.combined[&0], (0, 0));
        assert_eq!(table.combined[&1], (32, 1));
    }
}
