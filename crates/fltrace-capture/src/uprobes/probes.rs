//! The uprobes themselves: placed on the allocator's functions for each thread, their rings
//! drained, each entry's stack unwound and paired with its return.

use std::collections::HashMap;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use linux_perf_event_reader::{EventRecord, RawEventRecord, RecordType};
use perf_event_open_sys::bindings::{
    PERF_RECORD_LOST, PERF_SAMPLE_IDENTIFIER, PERF_SAMPLE_REGS_USER, PERF_SAMPLE_STACK_USER,
    PERF_SAMPLE_TID, PERF_SAMPLE_TIME, PERF_TYPE_TRACEPOINT, perf_event_attr,
};

use fltrace_trace::{AllocCall, AllocEvent, Origin, VirtAddr};

use super::address_space::AddressSpace;
use super::alloc_tables::{AllocTables, LiveOut};
use super::tracefs_probes::TracefsUprobes;
use super::*;
use crate::live::LiveAllocSink;
use crate::perf_abi::{self, PerfEvent};
use crate::ring::RingBuffer;
use crate::unwind::LiveStack;
use crate::{Converted, Error};

/// What a sample came from.
#[derive(Clone, Copy)]
pub(super) struct Probe {
    pub(super) index: usize,
    pub(super) is_return: bool,
}

pub(super) struct Probes {
    pub(super) _events: Vec<PerfEvent>,
    pub(super) rings: Vec<RingBuffer>,
    pub(super) by_id: HashMap<u64, Probe>,
    pub(super) parse_info: linux_perf_event_reader::RecordParseInfo,
    pub(super) space: AddressSpace,
    pub(super) pid: i32,
    /// `malloc, free, ... in LIB`, for the summary.
    pub(super) probed: String,
    /// Last: the kernel removes a probe only once its events are closed, and a mapped ring
    /// holds its event open.
    pub(super) _definitions: TracefsUprobes,
}

/// The attributes of one probe, the tracepoint `id` of its tracefs definition: an allocator's
/// entry samples its stack (every `period`-th call), its return and `free` only their
/// registers (every call). `tells_execs`: its events also report each exec of a traced
/// process (one probe's events do, so that an exec is told once).
pub(super) fn uprobe_attr(
    id: u64,
    index: usize,
    is_return: bool,
    period: u64,
    tells_execs: bool,
) -> perf_event_attr {
    let mut attr = perf_event_attr {
        size: std::mem::size_of::<perf_event_attr>() as u32,
        type_: PERF_TYPE_TRACEPOINT,
        config: id,
        ..Default::default()
    };
    let is_free = PROBES[index].1 == AllocCall::Free;
    // A return without its sampled entry is skipped; every free is seen, so that a sampled
    // block freed is not taken for a leak.
    attr.sample_period = if is_return || is_free { 1 } else { period };
    attr.set_disabled(1);
    attr.set_inherit(1);
    attr.set_exclude_kernel(1);
    attr.set_use_clockid(1);
    attr.clockid = libc::CLOCK_MONOTONIC;
    // An exec replaces the image with its heap: its blocks are gone, not leaked. The record
    // carries its time (sample_id_all) to be put in order among the calls.
    attr.set_sample_id_all(1);
    if tells_execs {
        attr.set_comm(1);
        attr.set_comm_exec(1);
    }
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
        | (1 << perf_abi::REG_BP)
        | (1 << perf_abi::REG_SP)
        | (1 << perf_abi::REG_IP);
    // All kinds share one record layout (a ring holds them all); a return or a free needs no
    // stack, and copying none halves the ring a malloc/free churn takes.
    attr.sample_stack_user = if is_return || is_free { 8 } else { STACK_BYTES };
    attr
}

impl Probes {
    pub(super) fn open(
        pid: i32,
        tasks: &[i32],
        ring_pages: usize,
        period: u64,
    ) -> Result<Probes, Error> {
        let mut definitions =
            TracefsUprobes::new().map_err(kernel("uprobes (CONFIG_UPROBE_EVENTS)"))?;
        let (libc, offsets) = allocator_of(pid)?;
        // One definition per probe, shared by every CPU's and task's event.
        let mut ids = HashMap::new();
        for &(index, offset) in &offsets {
            for is_return in [false, true] {
                if !is_return || PROBES[index].2 {
                    let id = definitions
                        .define(&libc, offset, is_return)
                        .map_err(|source| Error::Attach { pid, source })?;
                    ids.insert((index, is_return), id);
                }
            }
        }
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
        let cpus = perf_abi::online_cpus().map_err(kernel("online CPUs"))?;
        let mut events = Vec::new();
        let mut rings = Vec::new();
        let mut by_id = HashMap::new();
        let mut parse_info = None;
        for &cpu in &cpus {
            let mut leader: Option<usize> = None;
            for &(index, _) in &offsets {
                for is_return in [false, true] {
                    let Some(&id) = ids.get(&(index, is_return)) else {
                        continue;
                    };
                    let tells_execs = !is_return && index == offsets[0].0;
                    let attr = uprobe_attr(id, index, is_return, period, tells_execs);
                    if !is_return {
                        parse_info.get_or_insert_with(|| perf_abi::parse_info(&attr));
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
            _definitions: definitions,
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

    pub(super) fn run(
        self,
        stop: &AtomicBool,
        dir: &Path,
        origin: Origin,
        mono_offset: u64,
        live: Option<LiveAllocSink>,
    ) -> Result<Converted, Error> {
        let mut out = AllocTables::create(dir, origin)?;
        out.live = live.map(|sink| LiveOut::new(sink, out.origin.pid));
        let probed = self.probed.clone();
        let lost = self.drain_into(stop, &mut out, mono_offset)?;
        let mut converted = out.finish()?;
        converted.dropped = lost;
        converted.probed = Some(probed);
        Ok(converted)
    }

    /// Pairs entries and returns per thread into `out` until `stop`; returns the samples lost.
    pub(super) fn drain_into(
        mut self,
        stop: &AtomicBool,
        out: &mut impl AllocSink,
        mono_offset: u64,
    ) -> Result<u64, Error> {
        let mut pending: HashMap<u32, Pending> = HashMap::new();
        // Each thread seen, with its process.
        let mut tasks: HashMap<u32, u32> = HashMap::new();
        // Execs read but not yet applied: some calls before them may still be unread.
        let mut execs: Vec<Exec> = Vec::new();
        let mut cache = framehop::x86_64::CacheX86_64::new();
        let mut live = LiveStack::new(0);
        let mut lost = 0u64;
        loop {
            let stopping = stop.load(Ordering::Relaxed);
            // Every sample taken before this instant is in the rings now: once they are read,
            // the sink is current up to it.
            let pass_start = crate::os::monotonic_now_ns();
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
                    let parsed = raw.parse();
                    if let Ok(EventRecord::Comm(c)) = &parsed
                        && c.is_execve
                    {
                        let time = raw.common_data().ok().and_then(|d| d.timestamp);
                        execs.push(Exec {
                            pid: c.pid as u32,
                            time: time.unwrap_or(0),
                        });
                    }
                    if let Ok(EventRecord::Sample(s)) = parsed {
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
            execs.sort_by_key(|e| e.time);
            // An exec told by more than one event (a task's and an inherited one) counts once.
            execs.dedup_by_key(|e| (e.pid, e.time));
            let busy = !samples.is_empty();
            // The rings are read one after another: a call made before an exec read in this
            // pass may be in a ring read before it, and only the next pass has it. An exec
            // made before this pass started has every call before it read by now.
            let later = execs.partition_point(|e| e.time < pass_start || stopping);
            let mut ready = execs.drain(..later).peekable();
            for sample in samples {
                while let Some(exec) = ready.next_if(|e| e.time <= sample.time) {
                    replace_image(&mut tasks, &mut pending, out, exec, mono_offset);
                }
                tasks.insert(sample.tid, sample.pid);
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
            for exec in ready {
                replace_image(&mut tasks, &mut pending, out, exec, mono_offset);
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

/// An exec of process `pid` at `time` (the events' clock).
pub(super) struct Exec {
    pub(super) pid: u32,
    pub(super) time: u64,
}

/// Process `exec.pid` replaced its image: the blocks its threads allocated before and their
/// calls in flight then went with it. Calls of the new image may have been read already.
pub(super) fn replace_image(
    tasks: &mut HashMap<u32, u32>,
    pending: &mut HashMap<u32, Pending>,
    out: &mut impl AllocSink,
    exec: Exec,
    mono_offset: u64,
) {
    let time_ns = exec.time.wrapping_add(mono_offset);
    let mut threads: Vec<u32> = tasks
        .iter()
        .filter(|&(_, &pid)| pid == exec.pid)
        .map(|(&tid, _)| tid)
        .collect();
    threads.sort_unstable();
    for tid in &threads {
        if pending.get(tid).is_some_and(|p| p.time_ns < time_ns) {
            pending.remove(tid);
        }
    }
    out.exec(&threads, time_ns);
}

/// The return addresses of an entry sample, the probed function's entry first.
pub(super) fn unwind_entry(
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
pub(super) fn user_stack<'a>(
    s: &linux_perf_event_reader::SampleRecord<'a>,
) -> std::borrow::Cow<'a, [u8]> {
    match &s.user_stack {
        Some((data, dyn_size)) => {
            let len = (*dyn_size as usize).min(data.len());
            data.get(0..len).map(|d| d.as_slice()).unwrap_or_default()
        }
        None => std::borrow::Cow::Borrowed(&[]),
    }
}

pub(super) fn read_word(pid: i32, addr: u64) -> Option<u64> {
    let mut word = [0u8; 8];
    let n = crate::os::read_process_memory(pid, addr, &mut word);
    (n == 8).then(|| u64::from_ne_bytes(word))
}

/// The fields of a uprobe sample.
pub(super) struct Sample {
    pub(super) id: u64,
    pub(super) pid: u32,
    pub(super) tid: u32,
    pub(super) time: u64,
    pub(super) ax: u64,
    pub(super) dx: u64,
    pub(super) si: u64,
    pub(super) di: u64,
    pub(super) bp: u64,
    pub(super) sp: u64,
    pub(super) ip: u64,
    /// An allocator entry's return addresses (unwound as it is read).
    pub(super) frames: Vec<u64>,
}

impl Sample {
    pub(super) fn of(s: &linux_perf_event_reader::SampleRecord<'_>) -> Sample {
        let reg = |n| s.user_regs.as_ref().and_then(|r| r.get(n)).unwrap_or(0);
        Sample {
            id: s.id.unwrap_or(0),
            pid: s.pid.unwrap_or(0) as u32,
            tid: s.tid.unwrap_or(0) as u32,
            time: s.timestamp.unwrap_or(0),
            ax: reg(REG_AX),
            dx: reg(REG_DX),
            si: reg(REG_SI),
            di: reg(REG_DI),
            bp: reg(perf_abi::REG_BP),
            sp: reg(perf_abi::REG_SP),
            ip: reg(perf_abi::REG_IP),
            frames: Vec::new(),
        }
    }
}

/// An entry waiting for its return.
pub(super) struct Pending {
    pub(super) index: usize,
    pub(super) time_ns: u64,
    /// rdi, rsi, rdx at entry.
    pub(super) args: [u64; 3],
    pub(super) stack_id: u32,
}

impl Pending {
    pub(super) fn event(&self, call: AllocCall, result: u64, tid: u32) -> AllocEvent {
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
