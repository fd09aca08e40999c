//! Each record to the process it belongs to: mappings, names, forks and exits to the model,
//! fault samples unwound and appended, records of processes not known yet deferred a round.

use std::collections::hash_map::Entry;
use std::path::PathBuf;

use linux_perf_event_reader::{
    EventRecord, Mmap2FileId, RawData, RawEventRecord, RecordParseInfo, RecordType,
};
use perf_event_open_sys::bindings::{PERF_RECORD_FORK, PERF_RECORD_LOST_SAMPLES};
use rustc_hash::{FxHashMap, FxHashSet};

use fltrace_trace::{FileOffset, Mapping, VirtAddr, files};

use super::Options;
use crate::Error;
use crate::bpf::{BpfFault, BpfRecord};
use crate::os::unix_now_ns;
use crate::perf_abi::{self, Tracepoint, perf_event_attr};
use crate::pid_filing::{ReusedPids, UNFILED};
use crate::process::{FaultSample, Process, RecordingContext, RemapCall};
use crate::ring::u64_at;
use crate::unwind::{ElfCache, StackBytes};

/// Byte offsets of the fault tracepoints' fields (both tracepoints share one layout), and
/// how to read the `mremap` samples that share their ring.
#[derive(Clone, Copy)]
pub(super) struct FaultFields {
    pub(super) address: usize,
    pub(super) error_code: usize,
    pub(super) remap: Option<RemapFields>,
    pub(super) unmap: Option<UnmapFields>,
}

/// The `munmap` system call's entry tracepoint: its id and where its arguments lie.
#[derive(Clone, Copy)]
pub(super) struct UnmapFields {
    pub(super) enter_id: u16,
    pub(super) addr: usize,
    pub(super) len: usize,
}

impl UnmapFields {
    pub(super) fn open(tracefs: &std::path::Path) -> Option<UnmapFields> {
        let enter = Tracepoint::open(tracefs, "syscalls", "sys_enter_munmap").ok()?;
        let word = |name| enter.field(name).filter(|f| f.1 == 8).map(|f| f.0);
        Some(UnmapFields {
            enter_id: u16::try_from(enter.id).ok()?,
            addr: word("addr")?,
            len: word("len")?,
        })
    }
}

/// The `mremap` system call's tracepoints: the ids their samples start with (`common_type`)
/// and the byte offsets of the fields that say which mapping grew or moved where.
#[derive(Clone, Copy)]
pub(super) struct RemapFields {
    pub(super) enter_id: u16,
    pub(super) exit_id: u16,
    pub(super) addr: usize,
    pub(super) old_len: usize,
    pub(super) new_len: usize,
    pub(super) ret: usize,
}

impl RemapFields {
    pub(super) fn open(tracefs: &std::path::Path) -> Option<RemapFields> {
        let enter = Tracepoint::open(tracefs, "syscalls", "sys_enter_mremap").ok()?;
        let exit = Tracepoint::open(tracefs, "syscalls", "sys_exit_mremap").ok()?;
        let word = |tp: &Tracepoint, name| tp.field(name).filter(|f| f.1 == 8).map(|f| f.0);
        Some(RemapFields {
            enter_id: u16::try_from(enter.id).ok()?,
            exit_id: u16::try_from(exit.id).ok()?,
            addr: word(&enter, "addr")?,
            old_len: word(&enter, "old_len")?,
            new_len: word(&enter, "new_len")?,
            ret: word(&exit, "ret")?,
        })
    }
}

/// A record set aside until the process it belongs to is known.
struct Deferred {
    round: u64,
    /// The perf record's kind, or [`FROM_BPF`] for a record of the BPF ring.
    kind: u32,
    misc: u16,
    bytes: Vec<u8>,
}

/// The kind of a deferred record of the BPF ring (no perf record kind is this large).
const FROM_BPF: u32 = u32::MAX;

/// Everything the record handlers update.
///
/// Records are read CPU by CPU, so a child's first records can be read before the fork
/// record (on its parent's CPU) that introduces it. Such records are deferred until a whole
/// further round of reading has passed: by then the fork record, written before the child ran,
/// has been read. Likewise a process is finalised one round after its exit record.
pub(super) struct State {
    root_pid: u32,
    /// Rounds of reading every ring buffer completed.
    round: u64,
    deferred: Vec<Deferred>,
    deferred_pids: FxHashSet<u32>,
    /// Replaying deferred records: create unknown processes instead of deferring again.
    replaying: bool,
    /// Processes whose files are complete (as filed): late fault samples for them are
    /// counted lost.
    finished_set: FxHashSet<u32>,
    /// Pids reused within the run, and what each later process holding one is filed as.
    reused: ReusedPids,
    /// The reuses, shared with the access-sample reader.
    pub(super) pid_filing: crate::pid_filing::PidFiling,
    /// [`State::lost`] when `sample_memory` last looked for processes whose end was lost.
    lost_checked: u64,
    /// What each new process is made with.
    pub(super) session: RecordingContext,
    pub(super) far_exhausted: bool,
    /// Under far memory: the processes whose images ran without the runtime, with the
    /// executables, and what each had outside the region at the most.
    pub(super) far_unreached: Vec<(u32, String)>,
    pub(super) far_outside: Vec<(u32, crate::unemulated::OutsidePeak)>,
    /// Per finished process, the generation its preloaded library's first image ran in.
    pub(super) preload_generations: FxHashMap<u32, u32>,
    /// Threads of the far-memory runtime, whose faults are its own, not the program's.
    runtime_threads: RuntimeThreads,
    pub(super) processes: FxHashMap<u32, Process>,
    /// What the handlers of every process use, borrowed beside it.
    caches: Caches,
    finished: Vec<u32>,
    /// Where the files holding code are kept by build ID (`None`: `--no-cache`).
    pub(super) code_cache: Option<crate::code_cache::CodeCache>,
    /// The perf maps and jitdumps naming the processes' JIT code.
    jit_files: crate::jit_files::JitFiles,
    fields: FaultFields,
    /// Each thread's `mremap` in progress, from its entry record to its return record.
    remap_calls: FxHashMap<u32, RemapCall>,
    parse_info: RecordParseInfo,
    major_parse_info: RecordParseInfo,
    pub(super) lost: u64,
    /// Of `lost`, fault samples of processes whose files were closed.
    pub(super) lost_late: u64,
    /// Of `lost`, faults of processes not filed: a pid reused more often than
    /// [`crate::pid_filing::MAX_REUSES`].
    pub(super) lost_unfiled: u64,
    pub(super) faults: u64,
    pub(super) truncated_total: u64,
    /// The command fltrace started, until its exec: the BPF program traces it from its fork,
    /// and its faults before the exec are fltrace's own.
    pub(super) awaiting_exec: Option<u32>,
    /// Where the BPF program's copies of a thread's stack may stop: (the thread's key, low,
    /// top), for the
    /// event loop to hand on ([`crate::bpf::BpfCapture::set_stack_top`]).
    pub(super) stack_tops: Vec<(u32, u64, u64)>,
    /// The tops handed on this round, so that each goes once.
    tops_this_round: FxHashSet<(u32, u64)>,
    /// The first error a handler met; handlers run inside ring-buffer callbacks.
    pub(super) error: Option<Error>,
    /// The live view's feed, and what finished processes left for it.
    live: Option<(crate::live::LiveFeed, crate::live::LiveBatch)>,
}

/// How far above a thread's outermost frame its stack copies go: its last return address
/// lies below that frame's canonical frame address; a little more is harmless.
const TOP_SLACK: u64 = 256;

/// What the handlers of every process use: kept across records, so that they are read or
/// allocated once.
struct Caches {
    /// The ELF files mapped, parsed once for all processes.
    elf: ElfCache,
    /// The frames of the stack being unwound.
    frames: Vec<u64>,
    /// A sample's stack copy made contiguous when it wraps around the ring buffer.
    scratch: Vec<u8>,
}

impl State {
    /// Nothing read yet; `attrs` are the fault and major-fault events' attributes, whose
    /// sample layouts the records are parsed with.
    pub(super) fn new(
        root_pid: u32,
        options: &Options,
        far_prefix: Option<PathBuf>,
        metadata: Vec<(String, String)>,
        fields: FaultFields,
        attrs: (&perf_event_attr, &perf_event_attr),
        mono_offset: u64,
    ) -> State {
        State {
            root_pid,
            round: 0,
            deferred: Vec::new(),
            deferred_pids: FxHashSet::default(),
            replaying: false,
            finished_set: FxHashSet::default(),
            reused: ReusedPids::default(),
            lost_checked: 0,
            pid_filing: Default::default(),
            session: RecordingContext {
                dir: options.dir.clone(),
                read_live_stacks: options.read_live_stacks,
                far_memory: far_prefix,
                metadata,
                collect_code_hits: options.build_id_cache.is_some(),
                mono_offset,
                far_backlog: crate::recorder::far_backlog(options),
                live: options.live.is_some(),
                resident_series: options.allocs.is_some(),
            },
            far_exhausted: false,
            far_unreached: Vec::new(),
            far_outside: Vec::new(),
            preload_generations: FxHashMap::default(),
            runtime_threads: RuntimeThreads::default(),
            processes: FxHashMap::default(),
            caches: Caches {
                elf: ElfCache::default(),
                frames: Vec::with_capacity(128),
                scratch: Vec::new(),
            },
            finished: Vec::new(),
            code_cache: options
                .build_id_cache
                .clone()
                .map(crate::code_cache::CodeCache::start),
            jit_files: Default::default(),
            fields,
            remap_calls: FxHashMap::default(),
            parse_info: perf_abi::parse_info(attrs.0),
            major_parse_info: perf_abi::parse_info(attrs.1),
            lost: 0,
            lost_late: 0,
            lost_unfiled: 0,
            faults: 0,
            truncated_total: 0,
            awaiting_exec: None,
            stack_tops: Vec::new(),
            tops_this_round: FxHashSet::default(),
            error: None,
            live: options.live.clone().map(|feed| (feed, Default::default())),
        }
    }

    /// Hands the live view, if there is one, what every process recorded since the last
    /// call, with the totals; `ended`: no fault follows.
    pub(super) fn flush_live(&mut self, ended: bool) {
        let Some((feed, left)) = &mut self.live else {
            return;
        };
        let mut batch = std::mem::take(left);
        for (&pid, process) in &mut self.processes {
            process.drain_live(&mut batch);
            if let Some(counters) = process.runtime_counters() {
                batch
                    .events
                    .push(crate::live::LiveEvent::Runtime { pid, counters });
            }
        }
        batch.totals = Some(crate::live::LiveTotals {
            faults: self.faults,
            lost: self.lost,
            truncated: self.truncated_total,
        });
        batch.ended = ended;
        feed.send(batch);
    }

    /// The pid the recording files the process `pid` that a record of time `time` comes from
    /// as: `pid` itself unless a later process reused it by then.
    fn filed_pid(&self, pid: u32, time: u64) -> u32 {
        self.reused.filed(pid, time)
    }

    /// The pid to file the process `pid` forked at `time` as: a pid of its own when an earlier
    /// process of the run held `pid` and exited (its files, open or finished, stay its own).
    fn file_new_process(&mut self, pid: u32, time: u64) -> u32 {
        let earlier = self.filed_pid(pid, time);
        // Its fork comes before all its records, and after every record of an earlier
        // process with its pid (whose exit record may have been lost): a process seen first
        // after the fork is this one, made by records read before the fork's.
        let round = self.round;
        let reused = self.finished_set.contains(&earlier)
            || self.processes.get_mut(&earlier).is_some_and(|p| {
                let earlier_process = p.exited_round.is_some() || p.first_ns < time;
                if earlier_process {
                    p.exited_round.get_or_insert(round);
                    p.pid_gone_at(time);
                }
                earlier_process
            });
        if !reused {
            return earlier;
        }
        self.jit_files.pid_reused(pid);
        let filed = self.reused.reuse(pid, time).unwrap_or(UNFILED);
        self.pid_filing.reused(pid, time, filed);
        filed
    }

    /// Process `pid`, made at its first record, of time `time`.
    fn process(&mut self, pid: u32, time: u64) -> Result<&mut Process, Error> {
        Ok(self.process_and_caches(pid, time)?.0)
    }

    /// Process `pid` (as filed), made at its first record, of time `time` (0: there before
    /// the recording), and the caches its handlers use.
    fn process_and_caches(
        &mut self,
        pid: u32,
        time: u64,
    ) -> Result<(&mut Process, &mut Caches), Error> {
        let process = match self.processes.entry(pid) {
            Entry::Occupied(entry) => entry.into_mut(),
            Entry::Vacant(entry) => {
                let (os_pid, _) = files::reused_pid(pid);
                let mut process = Process::filed_as(pid, os_pid, None, &self.session)?;
                process.first_ns = time;
                entry.insert(process)
            }
        };
        Ok((process, &mut self.caches))
    }

    /// Keeps the file mapped at `start` in `pid` (as filed) in the build-ID cache, if it holds
    /// code not kept yet: opened now, while the process lives, stored by the cache's thread.
    fn offer_to_cache(&mut self, pid: u32, start: VirtAddr) {
        if let (Some(cache), Some(process)) = (&mut self.code_cache, self.processes.get(&pid))
            && let Some(mapping) = process.mapping_starting(start)
        {
            cache.offer(process.os_pid, mapping);
        }
    }

    /// For an attached process: the mappings that exist already.
    pub(super) fn attach_existing(&mut self, pid: u32) -> Result<(), Error> {
        let mappings = crate::procfs::mappings(pid).map_err(|source| Error::Attach {
            pid: pid as i32,
            source,
        })?;
        let (process, caches) = self.process_and_caches(pid, 0)?;
        // Its threads: one may outlive the main thread.
        for tid in crate::procfs::tasks(pid as i32).unwrap_or_default() {
            process.thread_started(tid as u32);
        }
        let mut mapped = Ok(());
        let mut starts = Vec::new();
        for mapping in mappings {
            starts.push(mapping.start);
            mapped = mapped.and_then(|()| process.map(mapping, &mut caches.elf));
        }
        for start in starts {
            if let Some(mapping) = self
                .processes
                .get(&pid)
                .and_then(|p| p.mapping_starting(start))
            {
                self.jit_files.mapped(pid, mapping);
            }
            self.offer_to_cache(pid, start);
        }
        Ok(mapped?)
    }

    /// The time of a record (0 for records without one: they are handled first).
    pub(super) fn timestamp(&self, record: &crate::ring::RawRecord<'_>) -> u64 {
        RawEventRecord::new(
            RecordType(record.kind),
            record.misc,
            record.data,
            self.parse_info,
        )
        .timestamp()
        .unwrap_or(0)
    }

    pub(super) fn handle(&mut self, record: crate::ring::RawRecord<'_>) {
        if self.error.is_some() {
            return;
        }
        if let Err(e) = self.handle_inner(record) {
            self.error = Some(e);
        }
    }

    fn handle_inner(&mut self, record: crate::ring::RawRecord<'_>) -> Result<(), Error> {
        if record.kind == PERF_RECORD_LOST_SAMPLES {
            self.lost += u64_at(&record.data, 0).unwrap_or(0);
            return Ok(());
        }
        let raw = RawEventRecord::new(
            RecordType(record.kind),
            record.misc,
            record.data,
            self.parse_info,
        );
        let Ok(parsed) = raw.parse() else {
            return Ok(());
        };
        let time = raw.timestamp().unwrap_or(0);
        match &parsed {
            // A thread ended, or a new one has its tid: the runtime's threads it was are gone.
            EventRecord::Exit(e) => self.runtime_threads.gone(e.tid as u32),
            EventRecord::Fork(f) => self.runtime_threads.gone(f.tid as u32),
            _ => {}
        }
        let owner = match &parsed {
            EventRecord::Sample(s) => s.pid,
            EventRecord::Mmap2(m) => Some(m.pid),
            EventRecord::Comm(c) => Some(c.pid),
            EventRecord::Fork(f) if f.pid != f.ppid => Some(f.ppid),
            // A new thread: its process, which may be known only from records not read yet.
            EventRecord::Fork(f) => Some(f.pid),
            EventRecord::Exit(e) => Some(e.pid),
            _ => None,
        };
        if let Some(pid) = owner.filter(|p| *p > 0).map(|p| p as u32) {
            let is_fault = matches!(&parsed, EventRecord::Sample(sample) if self.is_fault(sample));
            let (kind, misc) = (record.kind, record.misc);
            let admitted = self.admit(pid, time, is_fault, || Deferred {
                round: 0,
                kind,
                misc,
                bytes: record.data.as_slice().into_owned(),
            });
            if admitted.is_none() {
                return Ok(());
            }
        }
        match parsed {
            EventRecord::Sample(sample) => self.sample(&sample),
            EventRecord::Mmap2(m) if m.pid > 0 => {
                let pid = self.filed_pid(m.pid as u32, time);
                let time_ns = raw
                    .timestamp()
                    .map_or(0, |t| t.wrapping_add(self.session.mono_offset));
                let mapping = Mapping {
                    time_ns,
                    generation: 0,
                    start: VirtAddr::new(m.address),
                    end: VirtAddr::new(m.address + m.length),
                    pgoff: FileOffset::new(m.page_offset),
                    prot: m.protection,
                    flags: m.flags,
                    path: String::from_utf8_lossy(&m.path.as_slice()).into_owned(),
                    build_id: match &m.file_id {
                        Mmap2FileId::BuildId(id) => id.iter().map(|b| format!("{b:02x}")).collect(),
                        Mmap2FileId::InodeAndVersion(_) => String::new(),
                    },
                };
                let start = mapping.start;
                if pid == m.pid as u32 {
                    // The JIT files are named by pid: a later process's would be the first's.
                    self.jit_files.mapped(pid, &mapping);
                }
                let mapped = self
                    .process_and_caches(pid, time)
                    .and_then(|(p, caches)| Ok(p.map(mapping, &mut caches.elf)?));
                self.offer_to_cache(pid, start);
                mapped
            }
            EventRecord::Comm(c) => {
                let name = String::from_utf8_lossy(&c.name.as_slice()).into_owned();
                // Every record carries its time (`sample_id_all`): the CLOCK_MONOTONIC of
                // the runtime's pages.
                let pid = self.filed_pid(c.pid as u32, time);
                if c.is_execve && self.awaiting_exec == Some(c.pid as u32) {
                    self.awaiting_exec = None;
                }
                let process = self.process(pid, time)?;
                if c.is_execve {
                    process.exec(time);
                }
                process.set_thread_name(c.tid as u32, &name);
                self.runtime_threads.named(c.tid as u32, &name);
                Ok(())
            }
            EventRecord::Fork(f) if f.pid != f.ppid => {
                let parent = self.filed_pid(f.ppid as u32, time);
                let child = self.file_new_process(f.pid as u32, time);
                if child == UNFILED {
                    return Ok(());
                }
                if !self.processes.contains_key(&child) {
                    let os_pid = f.pid as u32;
                    let mut process = match self.processes.get(&parent) {
                        Some(parent) => {
                            let mut process =
                                Process::fork_of(parent, child, os_pid, &self.session)?;
                            process.inherit_stack(parent, f.ptid as u32);
                            process
                        }
                        None => Process::filed_as(child, os_pid, Some(parent), &self.session)?,
                    };
                    process.first_ns = time;
                    process.forked_at(time);
                    self.processes.insert(child, process);
                }
                // The child is named as the thread that forked it, until it execs.
                let name = self
                    .processes
                    .get(&parent)
                    .and_then(|p| p.thread_name(f.ptid as u32))
                    .map(str::to_owned);
                if let (Some(name), Some(process)) = (name, self.processes.get_mut(&child)) {
                    process.set_thread_name(f.pid as u32, &name);
                }
                Ok(())
            }
            EventRecord::Fork(f) => {
                // A new thread, named as the thread that made it.
                let pid = self.filed_pid(f.pid as u32, time);
                if let Some(process) = self.processes.get_mut(&pid) {
                    process.thread_started(f.tid as u32);
                    if let Some(name) = process.thread_name(f.ptid as u32).map(str::to_owned) {
                        process.set_thread_name(f.tid as u32, &name);
                    }
                }
                Ok(())
            }
            EventRecord::Exit(e) => {
                // A thread ended: its last stack will not continue (its tid may be reused).
                // The process is gone with its last thread, which may not be the main one.
                let pid = self.filed_pid(e.pid as u32, time);
                if let Some(p) = self.processes.get_mut(&pid)
                    && p.thread_exited(e.tid as u32)
                {
                    p.exited_round = Some(self.round);
                    p.pid_gone_at(time);
                    p.note_if_it_lives_on();
                }
                Ok(())
            }
            EventRecord::Lost(l) => {
                self.lost += l.count;
                Ok(())
            }
            _ => Ok(()),
        }
    }

    /// Whether `sample` is a fault's (not one of the `munmap` or `mremap` calls sharing the
    /// ring).
    fn is_fault(&self, sample: &linux_perf_event_reader::SampleRecord<'_>) -> bool {
        let Some(kind) = sample
            .raw
            .and_then(|raw| raw.get(0..2))
            .and_then(|b| b.as_slice().as_ref().try_into().ok())
            .map(u16::from_ne_bytes)
        else {
            return true;
        };
        let unmap = self.fields.unmap.is_some_and(|u| u.enter_id == kind);
        let remap = self
            .fields
            .remap
            .is_some_and(|r| r.enter_id == kind || r.exit_id == kind);
        !unmap && !remap
    }

    fn sample(&mut self, sample: &linux_perf_event_reader::SampleRecord<'_>) -> Result<(), Error> {
        if sample
            .tid
            .is_some_and(|t| self.runtime_threads.contains(t as u32))
        {
            return Ok(());
        }
        let (Some(pid), Some(tid), Some(raw), Some(regs)) = (
            sample.pid,
            sample.tid,
            sample.raw,
            sample.user_regs.as_ref(),
        ) else {
            // A fault sample without the fields the attributes asked for: counted as lost, so
            // that the summary never shows fewer faults than happened without saying so.
            self.lost += 1;
            return Ok(());
        };
        let sample_ns = sample.timestamp.unwrap_or(0);
        let pid = self.filed_pid(pid as u32, sample_ns);
        if let Some(unmap) = self.fields.unmap
            && raw
                .get(0..2)
                .and_then(|b| b.as_slice().as_ref().try_into().ok())
                == Some(unmap.enter_id.to_ne_bytes())
        {
            if let (Some(addr), Some(len)) = (u64_at(&raw, unmap.addr), u64_at(&raw, unmap.len))
                && let Some(process) = self.processes.get_mut(&pid)
            {
                process.unmap(addr, len);
            }
            return Ok(());
        }
        if let Some(remap) = self.fields.remap
            && let Some(kind) = raw
                .get(0..2)
                .and_then(|b| b.as_slice().as_ref().try_into().ok())
        {
            let kind = u16::from_ne_bytes(kind);
            if kind == remap.enter_id {
                if let (Some(old_start), Some(old_len), Some(new_len)) = (
                    u64_at(&raw, remap.addr),
                    u64_at(&raw, remap.old_len),
                    u64_at(&raw, remap.new_len),
                ) {
                    let call = RemapCall {
                        old_start,
                        old_len,
                        new_len,
                    };
                    self.remap_calls.insert(tid as u32, call);
                }
                return Ok(());
            }
            if kind == remap.exit_id {
                // An error return is -errno, in the last page of the address space.
                const MAX_ERRNO: u64 = 4095;
                if let Some(call) = self.remap_calls.remove(&(tid as u32))
                    && let Some(ret) = u64_at(&raw, remap.ret)
                    && ret < MAX_ERRNO.wrapping_neg()
                {
                    let time_ns = sample
                        .timestamp
                        .unwrap_or(0)
                        .wrapping_add(self.session.mono_offset);
                    let (process, caches) = self.process_and_caches(pid, sample_ns)?;
                    return Ok(process.remap(&call, ret, time_ns, &mut caches.elf)?);
                }
                return Ok(());
            }
        }
        let (Some(addr), Some(error_code)) = (
            u64_at(&raw, self.fields.address),
            u64_at(&raw, self.fields.error_code),
        ) else {
            self.lost += 1;
            return Ok(());
        };
        let (Some(ip), Some(sp), Some(bp)) = (
            regs.get(perf_abi::REG_IP),
            regs.get(perf_abi::REG_SP),
            regs.get(perf_abi::REG_BP),
        ) else {
            self.lost += 1;
            return Ok(());
        };
        let regs = (ip, sp, bp);
        let fault = |this: &mut Self, stack: &[u8]| {
            let at = (sample_ns, addr, error_code);
            this.fault(pid, tid as u32, at, regs, None, stack.into())
        };
        let copy = sample.user_stack.as_ref().and_then(|(data, dyn_size)| {
            let len = (*dyn_size as usize).min(data.len());
            data.get(0..len)
        });
        match copy {
            Some(RawData::Single(bytes)) => fault(self, bytes),
            Some(split) => {
                // Made contiguous where it wraps around the ring's end.
                let mut scratch = std::mem::take(&mut self.caches.scratch);
                scratch.clear();
                scratch.extend_from_slice(&split.as_slice());
                let result = fault(self, &scratch);
                self.caches.scratch = scratch;
                result
            }
            None => fault(self, &[]),
        }
    }

    /// Records one fault of process `pid` (as filed), thread `tid`, at `sample_ns` (the
    /// kernel's CLOCK_MONOTONIC) of `addr` with `error_code`.
    fn fault(
        &mut self,
        pid: u32,
        tid: u32,
        (sample_ns, addr, error_code): (u64, u64, u64),
        regs: (u64, u64, u64),
        rbx: Option<u64>,
        stack: StackBytes<'_>,
    ) -> Result<(), Error> {
        let time_ns = sample_ns.wrapping_add(self.session.mono_offset);
        let (process, caches) = self.process_and_caches(pid, sample_ns)?;
        let fault = FaultSample {
            time_ns,
            tid,
            addr: VirtAddr::new(addr),
            error_code,
            regs,
            rbx,
            stack,
        };
        let before = process.counters.stacks_truncated;
        let result = process.fault(&fault, &mut caches.frames);
        // A fault may complete earlier rows of its thread, whose count then goes down.
        let after = process.counters.stacks_truncated;
        self.truncated_total = self.truncated_total + after - before;
        self.faults += 1;
        Ok(result?)
    }

    /// The process (as filed) a record of process `pid` at `time` goes to, or `None` when it
    /// goes to none: a process beyond the last reuse of its pid that a table can file, or
    /// whose files are closed (a fault that comes this late is not in them: counted lost), or
    /// one not known yet (the record, made by `defer`, waits a round for its fork record).
    fn admit(
        &mut self,
        pid: u32,
        time: u64,
        is_fault: bool,
        defer: impl FnOnce() -> Deferred,
    ) -> Option<u32> {
        let filed = self.filed_pid(pid, time);
        if filed == UNFILED {
            if is_fault {
                self.lost += 1;
                self.lost_unfiled += 1;
            }
            return None;
        }
        if self.finished_set.contains(&filed) {
            if is_fault {
                self.lost += 1;
                self.lost_late += 1;
            }
            return None;
        }
        let unknown = !self.processes.contains_key(&filed) && pid != self.root_pid;
        if !self.replaying && (unknown || self.deferred_pids.contains(&pid)) {
            self.deferred_pids.insert(pid);
            self.deferred.push(Deferred {
                round: self.round,
                ..defer()
            });
            return None;
        }
        Some(filed)
    }

    /// Handles one record of the BPF ring: a fault, or a major-fault mark.
    pub(super) fn handle_bpf(&mut self, bytes: &[u8]) {
        if self.error.is_some() {
            return;
        }
        if let Err(e) = self.handle_bpf_inner(bytes) {
            self.error = Some(e);
        }
    }

    fn handle_bpf_inner(&mut self, bytes: &[u8]) -> Result<(), Error> {
        let Some(record) = BpfRecord::parse(bytes) else {
            // Our own BPF program wrote it, so this should not happen; if it does, a fault (or
            // a major fault) is missing from every total: counted lost, never silently.
            self.lost += 1;
            return Ok(());
        };
        let (pid, tid, time, is_fault) = match record {
            BpfRecord::Fault(f) => (f.pid, f.tid, f.time_ns, true),
            BpfRecord::Major {
                pid, tid, time_ns, ..
            } => (pid, tid, time_ns, false),
        };
        if self.awaiting_exec == Some(pid) || self.runtime_threads.contains(tid) {
            return Ok(());
        }
        let Some(filed) = self.admit(pid, time, is_fault, || Deferred {
            round: 0,
            kind: FROM_BPF,
            misc: 0,
            bytes: bytes.to_vec(),
        }) else {
            return Ok(());
        };
        match record {
            BpfRecord::Fault(f) => {
                let at = (time, f.addr, f.error_code);
                self.fault(filed, tid, at, f.regs, Some(f.rbx), f.stack)?;
                self.note_stack_top(filed, &f);
                Ok(())
            }
            BpfRecord::Major { addr, .. } => {
                if let Some(p) = self.processes.get_mut(&filed) {
                    p.major(tid, addr);
                }
                Ok(())
            }
        }
    }

    /// Once a thread's outermost frame is known, its stack copies stop just above it (the
    /// main thread's environment and a thread's TLS above it are no frames): noted for the
    /// event loop when the copy of `fault` went further.
    fn note_stack_top(&mut self, pid: u32, fault: &BpfFault<'_>) {
        let Some(outermost) = self
            .processes
            .get(&pid)
            .and_then(|p| p.outermost_sp(fault.tid))
        else {
            return;
        };
        let top = outermost.saturating_add(TOP_SLACK).next_multiple_of(8);
        let sp = fault.regs.1;
        if top > sp
            && top >= fault.stack_low
            && fault.stack_top > top
            && self.tops_this_round.insert((fault.stack_key, top))
        {
            self.stack_tops
                .push((fault.stack_key, fault.stack_low, top));
        }
    }

    pub(super) fn handle_major(&mut self, record: crate::ring::RawRecord<'_>) {
        let raw = RawEventRecord::new(
            RecordType(record.kind),
            record.misc,
            record.data,
            self.major_parse_info,
        );
        if let Ok(EventRecord::Sample(s)) = raw.parse()
            && let (Some(pid), Some(tid), Some(addr)) = (s.pid, s.tid, s.addr)
            && let Some(p) = self
                .processes
                .get_mut(&self.filed_pid(pid as u32, s.timestamp.unwrap_or(0)))
        {
            p.major(tid as u32, addr);
        }
    }

    /// Samples the memory of every open process whose main thread lives (a zombie's /proc
    /// says nothing of its memory; a later process given its pid would be read as it). Ends
    /// a process whose end the records did not say (see [`Process::vanished`]): after its
    /// main thread's end, or after records were lost.
    pub(super) fn sample_memory(&mut self) {
        let lost_since = std::mem::replace(&mut self.lost_checked, self.lost) != self.lost;
        let round = self.round;
        let proc_root = std::path::Path::new("/proc");
        for (&pid, process) in self
            .processes
            .iter_mut()
            .filter(|(_, p)| p.exited_round.is_none())
        {
            if (process.main_exited() || lost_since)
                && pid != self.root_pid
                && process.vanished(proc_root)
            {
                process.exited_round = Some(round);
                process.pid_gone_at(crate::os::monotonic_now_ns());
            } else if !process.main_exited() {
                process.sample_memory();
            }
        }
    }

    /// Samples the resident memory of every open process whose main thread lives, where it
    /// is followed (`record --allocs`).
    pub(super) fn sample_resident(&mut self) {
        for process in self
            .processes
            .values_mut()
            .filter(|p| p.exited_round.is_none() && !p.main_exited())
        {
            process.sample_resident();
        }
    }

    /// Writes a checkpoint of every open process's tables (see [`Process::checkpoint`]).
    pub(super) fn checkpoint(&mut self) -> Result<(), Error> {
        for process in self.processes.values_mut() {
            process.checkpoint()?;
        }
        Ok(())
    }

    pub(super) fn write_stats(&mut self) -> Result<(), Error> {
        let now = unix_now_ns() / 1_000_000_000;
        for process in self.processes.values_mut() {
            process.write_stats(now, self.lost)?;
        }
        Ok(())
    }

    /// Processes whose exit was seen in an earlier pass: all their records are in by now.
    /// Ends a round of reading: replays the records deferred a round ago (all of them when
    /// `last`).
    pub(super) fn end_round(&mut self, last: bool) {
        if let Some(cache) = &mut self.code_cache {
            for process in self.processes.values_mut() {
                for id in process.take_code_hits() {
                    cache.hit(&id);
                }
            }
        }
        self.jit_files.poll();
        let round = self.round;
        self.round += 1;
        self.tops_this_round.clear();
        if self.session.far_memory.is_some() {
            for process in self.processes.values_mut() {
                process.poll_runtime(round);
            }
        }
        let (ready, waiting): (Vec<Deferred>, Vec<Deferred>) = std::mem::take(&mut self.deferred)
            .into_iter()
            .partition(|d| last || d.round < round);
        if ready.is_empty() {
            self.deferred = waiting;
            return;
        }
        self.deferred_pids.clear();
        self.replaying = true;
        for d in &ready {
            if d.kind == FROM_BPF {
                self.handle_bpf(&d.bytes);
            } else {
                self.handle(crate::ring::RawRecord {
                    kind: d.kind,
                    misc: d.misc,
                    data: RawData::Single(&d.bytes),
                });
            }
        }
        self.replaying = false;
        for d in &waiting {
            if let Some(pid) = owner_of_bytes(&d.bytes, d.kind) {
                self.deferred_pids.insert(pid);
            }
        }
        self.deferred = waiting;
    }

    /// Processes whose exit was read a round ago: all their records are in by now. The root
    /// stays open until the end: its peak memory comes from wait4 after it exits.
    pub(super) fn finish_exited(&mut self) -> Result<(), Error> {
        let round = self.round;
        let mut exited: Vec<u32> = self
            .processes
            .iter()
            .filter(|(pid, p)| {
                p.exited_round.is_some_and(|r| r + 1 < round) && **pid != self.root_pid
            })
            .map(|(pid, _)| *pid)
            .collect();
        // Earlier processes of a reused pid first (filed lower): a later one's finish deletes
        // the far-memory page the earlier one is told apart from.
        exited.sort_unstable();
        let now = unix_now_ns() / 1_000_000_000;
        for pid in exited {
            if let Some(process) = self.processes.remove(&pid) {
                self.finish_process(pid, process, now)?;
                self.finished_set.insert(pid);
            }
        }
        Ok(())
    }

    /// Finishes every process still open, each as far as it goes; returns the processes
    /// finished and the first error.
    pub(super) fn finish_all(&mut self) -> (Vec<u32>, Result<(), Error>) {
        let now = unix_now_ns() / 1_000_000_000;
        let mut first = Ok(());
        let mut processes: Vec<_> = std::mem::take(&mut self.processes).into_iter().collect();
        // Earlier processes of a reused pid first, as in `finish_exited`.
        processes.sort_unstable_by_key(|(pid, _)| *pid);
        for (pid, process) in processes {
            let result = self.finish_process(pid, process, now);
            if first.is_ok() {
                first = result;
            }
        }
        (std::mem::take(&mut self.finished), first)
    }

    /// Writes out a process that is gone: its runtime's last counters, stats and tables.
    fn finish_process(&mut self, pid: u32, mut process: Process, now: u64) -> Result<(), Error> {
        if let Some(cache) = &mut self.code_cache {
            for id in process.take_code_hits() {
                cache.hit(&id);
            }
        }
        self.preload_generations
            .insert(pid, process.preload_generation.unwrap_or(0));
        process.poll_runtime(u64::MAX);
        if process.runtime_page_taken() {
            log::warn!(
                "far memory: the runtime statistics of process {pid} are lost: a later process \
                 given its pid replaced its page before it was read"
            );
        }
        self.far_exhausted |= process.far_memory_exhausted();
        process.note_unreached_image();
        for executable in process.unreached_images() {
            self.far_unreached.push((pid, executable.clone()));
        }
        if let Some(peak) = process.outside_peak().filter(|p| p.program_peak > 0) {
            self.far_outside.push((pid, peak.clone()));
        }
        let os_pid = process.os_pid;
        // The tables are closed even when the stats line cannot be written (a full disk):
        // their footers may still fit, or be recoverable.
        let stats = process.write_stats(now, self.lost);
        if let Some((_, left)) = &mut self.live {
            process.drain_live(left);
            left.events.push(crate::live::LiveEvent::Ended { pid });
        }
        let tables = process.finish();
        if os_pid == pid {
            self.jit_files.finish(&self.session.dir, pid);
        }
        self.finished.push(pid);
        match (stats, tables) {
            (Err(e), _) => Err(e.into()),
            (Ok(()), Err(e)) => Err(e.into()),
            (Ok(()), Ok(())) => Ok(()),
        }
    }
}

impl State {
    /// The kernel pids that later processes of the run held again.
    pub(super) fn reused_os_pids(&self) -> Vec<u32> {
        self.reused.pids().collect()
    }

    /// Files each allocation log in `spool` of a pid reused within the run under the process
    /// that made it: the library names its logs by the kernel's pid, so a later process's
    /// logs follow the earlier's images there; each header says when it was made, and a log
    /// made after a later process's fork is that process's (renamed to its filed pid's
    /// name, its images numbered from 0). Logs of a library that does not say stay where
    /// they were.
    pub(super) fn place_reused_logs(&self, spool: &std::path::Path) -> Result<(), Error> {
        let io = |path: &std::path::Path| {
            let path = path.to_owned();
            move |source| Error::Trace(fltrace_trace::Error::Io { path, source })
        };
        for os_pid in self.reused.pids() {
            let mut images: FxHashMap<u32, u32> = FxHashMap::default();
            for image in 0.. {
                let path = spool.join(fltrace_trace::spool::log_name(os_pid, image));
                let made_ns = match fltrace_trace::spool::log_made_ns(&path) {
                    Ok(made_ns) => made_ns,
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => break,
                    Err(e) => return Err(io(&path)(e)),
                };
                let filed = self.reused.filed(os_pid, made_ns);
                let next = images.entry(filed).or_default();
                let filed_image = *next;
                *next += 1;
                if (filed, filed_image) != (os_pid, image) {
                    let to = spool.join(fltrace_trace::spool::log_name(filed, filed_image));
                    std::fs::rename(&path, to).map_err(io(&path))?;
                }
            }
        }
        Ok(())
    }
}

/// The threads of the far-memory runtime, named by the runtime when it starts them, while
/// they live: a tid is given again once its thread ended, maybe to a thread of the program.
#[derive(Debug, Default)]
struct RuntimeThreads(FxHashSet<u32>);

impl RuntimeThreads {
    /// The kernel named thread `tid` `name`.
    fn named(&mut self, tid: u32, name: &str) {
        if name == fltrace_runtime_abi::HANDLER_THREAD_NAME {
            self.0.insert(tid);
        } else {
            // Renamed: the runtime never renames its threads, so `tid` is another thread now.
            self.0.remove(&tid);
        }
    }

    /// Thread `tid` ended, or a new thread was given its tid.
    fn gone(&mut self, tid: u32) {
        self.0.remove(&tid);
    }

    fn contains(&self, tid: u32) -> bool {
        self.0.contains(&tid)
    }
}

/// The process a deferred record belongs to: every deferred record kind starts with the pid
/// except fork, whose parent pid is its second field.
fn owner_of_bytes(bytes: &[u8], kind: u32) -> Option<u32> {
    if kind == FROM_BPF {
        return BpfRecord::pid_of(bytes);
    }
    let offset = if kind == PERF_RECORD_FORK { 4 } else { 0 };
    let field = bytes.get(offset..offset + 4)?;
    Some(u32::from_ne_bytes(field.try_into().ok()?))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each process that held a pid has its own filed pid, and a record goes to the one
    /// that held the pid at its time.
    #[test]
    fn records_of_a_reused_pid_go_to_the_process_that_held_it_then() {
        const L: u32 = files::PID_LIMIT;
        let mut reused = ReusedPids::default();
        assert_eq!(reused.filed(6, 50), 6);
        assert_eq!(reused.reuse(6, 100), Some(6 + L));
        assert_eq!(reused.reuse(6, 200), Some(6 + 2 * L));
        let filed: Vec<u32> = [99, 100, 199, 200, 300]
            .into_iter()
            .map(|time| reused.filed(6, time))
            .collect();
        assert_eq!(filed, [6, 6 + L, 6 + L, 6 + 2 * L, 6 + 2 * L]);
        assert_eq!(reused.filed(7, 300), 7, "another pid");
        assert_eq!(files::reused_pid(6 + 2 * L), (6, 2));
        // The highest pid Linux gives, reused until no INT32 is left to file it as. Before,
        // it went on to u32::MAX (negative in the tables), then merged the rest into the
        // last one's files.
        let max = L - 1;
        let last = (1..).map_while(|n| reused.reuse(max, n)).last();
        assert_eq!(last, Some(max + 511 * L));
        assert_eq!(last, Some(i32::MAX as u32));
        assert_eq!(files::reused_pid(i32::MAX as u32), (max, 511));
        // The 512th later process and the ones after it are not filed, nor their records.
        assert_eq!(reused.filed(max, 512), UNFILED);
        assert_eq!(reused.reuse(max, 1000), None);
        assert_eq!(reused.filed(max, 1000), UNFILED);
        assert_eq!(reused.filed(max, 511), i32::MAX as u32);
    }

    /// A BPF record that does not parse (a short one, or one whose holes lie beyond its
    /// copy) is a fault missing from the totals: it counts as lost.
    #[test]
    fn a_bpf_record_that_does_not_parse_counts_as_lost() {
        let dir = std::env::temp_dir().join("fltrace-unparsed-bpf-record");
        let options = crate::recorder::Options::new(dir);
        let attr = perf_abi::perf_event_attr {
            size: std::mem::size_of::<perf_abi::perf_event_attr>() as u32,
            ..Default::default()
        };
        let fields = FaultFields {
            address: 0,
            error_code: 8,
            remap: None,
            unmap: None,
        };
        let mut state = State::new(1, &options, None, Vec::new(), fields, (&attr, &attr), 0);
        state.handle_bpf(&[1, 0, 0, 0, 0, 0, 0, 0]);
        assert_eq!(state.lost, 1, "a short fault record");
        // A whole fault record (136 bytes, then a 16-byte copy) with one hole, [8, 17),
        // that ends past its copy.
        let mut holes_beyond_copy = vec![0u8; 136 + 16];
        let mut put = |at: usize, word: u32| {
            holes_beyond_copy[at..at + 4].copy_from_slice(&word.to_ne_bytes());
        };
        put(0, 1);
        put(80, 16);
        put(96, 1);
        put(104, 8);
        put(108, 17);
        state.handle_bpf(&holes_beyond_copy);
        assert_eq!(state.lost, 2, "a hole beyond the copy");
        assert_eq!(state.faults, 0);
    }

    /// A runtime thread's tid counts as the runtime's only while that thread lives: given
    /// again to a program thread after it ended, that thread's faults are the program's.
    #[test]
    fn runtime_tid_is_forgotten_when_its_thread_ends() {
        let mut threads = RuntimeThreads::default();
        threads.named(41, "worker");
        threads.named(42, fltrace_runtime_abi::HANDLER_THREAD_NAME);
        assert!(threads.contains(42));
        assert!(!threads.contains(41));
        threads.gone(41);
        assert!(threads.contains(42), "another thread's end");
        threads.gone(42);
        assert!(!threads.contains(42));
        // Renamed (a new thread whose fork and exit records were lost).
        threads.named(43, fltrace_runtime_abi::HANDLER_THREAD_NAME);
        threads.named(43, "worker");
        assert!(!threads.contains(43));
    }
}
