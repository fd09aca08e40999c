//! The model of each traced process: filed under its pid (a later process that reused a pid
//! under another), its exec generations and its threads' lives. What it does with each record
//! lives beside it: [`mappings`] (the mapping model), [`faults`] (a fault's row),
//! [`stacks`] (unwinding and interning its stack), [`far_memory`] (the join with the
//! far-memory runtime's log), [`thread_names`], and [`trace_files`] (the files it writes and
//! its stats lines).

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};

use framehop::x86_64::CacheX86_64;
use rustc_hash::FxHashMap;

use fltrace_trace::{
    FaultWriter, Mapping, MappingWriter, Origin, StackWriter, VirtAddr, files, keys,
};

use crate::unwind::{AddressSpaceUnwinder, KnownFrames, LiveStack};

mod far_memory;
mod faults;
mod mappings;
mod resident;
mod stacks;
mod thread_names;
mod trace_files;
mod window;

pub use faults::FaultSample;
pub use mappings::RemapCall;
pub use resident::RESIDENT_EVERY;
use resident::ResidentSeries;

use far_memory::FarState;
use stacks::Uncopied;
use trace_files::TraceFiles;
use window::FaultWindow;

/// Per-process counters, written to the stats file.
#[derive(Debug, Default, Clone, Copy)]
pub struct Counters {
    pub faults: u64,
    pub faults_r: u64,
    pub faults_w: u64,
    pub faults_wp: u64,
    pub faults_zp: u64,
    pub faults_major: u64,
    pub faults_kernel: u64,
    /// Faults the preloaded library took for its own work in the program's threads (flagged
    /// [`FaultFlags::TRACER`]; reports leave them out): the allocation tracer's, and on the
    /// far-memory runtime's in-thread path its `SIGBUS` handler's (its page states, its code).
    pub faults_tracer: u64,
    /// Faults whose stack is truncated ([`StackEnd::Truncated`]).
    pub stacks_truncated: u64,
    /// Stacks completed with words read from the live process beyond the sampled copy.
    pub stacks_extended: u64,
    /// Stacks whose outer frames came from the thread's previous stack where the copy ended.
    pub stacks_spliced: u64,
    /// Stacks with a caller found by searching the stack for a return address (code without
    /// CFI, a rule on a register the unwinder does not track), verified by the call before it.
    pub stacks_scanned: u64,
    /// Stacks cut (and counted truncated) at a frame whose caller could not be verified, or
    /// at JIT code that keeps no frame chain: where an unchecked search would have guessed.
    pub stacks_unverified: u64,
    /// Faults whose sample carried no stack bytes (the kernel copies none when the page at the
    /// stack pointer is not present yet: the stack growing onto a new page), unwound from the
    /// live stack alone; and those of them whose stack stayed truncated.
    pub stacks_uncopied: u64,
    pub stacks_uncopied_truncated: u64,
    /// Faults whose stack copy went on past pages it could not read (not present: never
    /// touched, inside a large frame), whose words the unwinder then takes for none.
    pub stacks_holes: u64,
    /// Peak resident memory seen, bytes.
    pub hwm: u64,
    /// Resident memory at the last look, bytes.
    pub rss: u64,
    /// Resident anonymous memory at the last look (`RssAnon`), bytes: under far memory the
    /// local pages, the far ones held in the store, and memory outside the managed region.
    pub rss_anon: u64,
}

/// One traced process.
pub struct Process {
    /// The process as the recording files it: its pid, or for a later process that reused a
    /// pid within the run, the pid plus a multiple of [`files::PID_LIMIT`] (see
    /// [`files::reused_pid`]).
    pub pid: u32,
    /// The pid the kernel gave it: where /proc and the far-memory runtime's page find it, and
    /// the tid of its main thread.
    pub os_pid: u32,
    /// The address-space generation: 0 for the first image recorded, +1 at each later exec.
    generation: u32,
    /// Whether anything of the current image was recorded: the exec that starts a command
    /// fltrace launched ends an image of fltrace's own, never recorded, and opens generation 0.
    image_recorded: bool,
    /// Whether the current image has run: a fault in user mode was seen since its exec (or
    /// the process was there before the exec, forked or attached).
    image_running: bool,
    /// The executable of the current image (its first file mapping) and the end of its
    /// mappings and of the bss after them: the heap begins above.
    executable: Option<(String, VirtAddr)>,
    /// The generation of the first image that ran with the preloaded library: a forked child
    /// inherits it from its parent at once, the command gets it at its exec. The library's
    /// allocation logs count images from there.
    pub preload_generation: Option<u32>,
    /// Live mappings by start address, for classifying faults.
    maps: BTreeMap<VirtAddr, Mapping>,
    unwinder: AddressSpaceUnwinder,
    /// The entry points of the executable and the dynamic loader in this generation: a stack
    /// whose outermost frame is in their entry code is complete.
    entries: Vec<u64>,
    /// The (generation, tid) of the threads whose names were looked up in /proc.
    name_lookups: rustc_hash::FxHashSet<(u32, u32)>,
    /// Where the preloaded library's exported functions (its interposers: `malloc`,
    /// `mmap`...) are mapped in this generation.
    interposers: Vec<std::ops::Range<u64>>,
    cache: CacheX86_64,
    live: LiveStack,
    /// Each thread's last stack, by tid, to complete its next one beyond the copy.
    known: FxHashMap<u32, KnownFrames>,
    /// Per thread, its latest rows whose stack copy was empty and ended truncated (a fault
    /// growing the stack: the page at the stack pointer is the missing one), with the frame
    /// address their innermost frame's caller resumes at: the thread's next complete stack
    /// gives their callers if it still runs in that frame.
    uncopied: FxHashMap<u32, Vec<Uncopied>>,
    out: TraceFiles,
    pub counters: Counters,
    far: Option<FarState>,
    /// The reading round in which the kernel reported its exit; finalised a round later.
    pub exited_round: Option<u64>,
    /// The time of the first record seen of it (0: there before the recording): a fork of its
    /// pid at a later time made another process.
    pub first_ns: u64,
    /// Its threads that started and have not ended, as far as the records say: its main thread
    /// can end before them (`pthread_exit` in `main`), and the process lives on.
    live_threads: rustc_hash::FxHashSet<u32>,
    /// Whether its main thread ended.
    main_exited: bool,
    /// The build IDs of the code files its stacks have frames in (`None`: not collected), and
    /// those not yet taken by the recorder.
    code_hits: Option<rustc_hash::FxHashSet<String>>,
    new_code_hits: Vec<String>,
}

/// What the recording as a whole passes to each process.
pub struct RecordingContext {
    /// Where the trace files go.
    pub dir: PathBuf,
    /// Whether unwinding may read beyond the sampled stack copy from the live process.
    pub read_live_stacks: bool,
    /// Prefix of the far-memory runtime's shared pages, when emulating far memory.
    pub far_memory: Option<PathBuf>,
    /// The footer of every process's faults table (its `parent` added).
    pub metadata: Vec<(String, String)>,
    /// Whether the build IDs of the files stack frames fall in are collected, for the
    /// build-ID cache ([`Process::take_code_hits`]).
    pub collect_code_hits: bool,
    /// What the recorder added to the samples' CLOCK_MONOTONIC times to make the trace's.
    pub mono_offset: u64,
    /// How many faults the far-memory runtime may log beyond what was read: about as many
    /// as the samples one CPU's ring holds, three quarters of them (0: no limit).
    pub far_backlog: u64,
    /// Whether a live view is told what each process records ([`crate::live`]).
    pub live: bool,
    /// Whether each process's resident memory is sampled every [`RESIDENT_EVERY`] into a
    /// file of its own (`record --allocs`, for `visualize --allocs`).
    pub resident_series: bool,
}

impl Process {
    /// Process `os_pid`, filed as `pid` (which differs for a later process that reused a pid
    /// within the run); `parent` as the recording files it.
    pub fn filed_as(
        pid: u32,
        os_pid: u32,
        parent: Option<u32>,
        session: &RecordingContext,
    ) -> Result<Process, fltrace_trace::Error> {
        let live_pid = if session.read_live_stacks { os_pid } else { 0 };
        let mut metadata = session.metadata.clone();
        if let Some(parent) = parent {
            metadata.push((keys::PARENT.to_owned(), parent.to_string()));
        }
        if pid != os_pid {
            metadata.push((keys::OS_PID.to_owned(), os_pid.to_string()));
        }
        let dir = session.dir.as_path();
        let recording = metadata
            .iter()
            .find(|(k, _)| k == keys::SESSION)
            .map(|(_, v)| v.clone())
            .unwrap_or_default();
        let origin = Origin::new(recording, pid);
        Ok(Process {
            pid,
            os_pid,
            generation: 0,
            image_recorded: false,
            image_running: true,
            executable: None,
            preload_generation: None,
            maps: BTreeMap::new(),
            unwinder: AddressSpaceUnwinder::default(),
            entries: Vec::new(),
            name_lookups: Default::default(),
            interposers: Vec::new(),
            cache: CacheX86_64::new(),
            live: LiveStack::new(live_pid),
            known: FxHashMap::default(),
            uncopied: FxHashMap::default(),
            out: TraceFiles {
                faults: FaultWindow::new(
                    FaultWriter::create(&files::faults(dir, pid), &metadata)?,
                    session.live,
                ),
                stacks: StackWriter::create_for(&files::stacks(dir, pid), origin.clone())?,
                mmaps: MappingWriter::create_for(&files::mmaps(dir, pid), origin)?,
                procmaps: String::new(),
                stats_path: files::stats(dir, pid),
                stats: String::new(),
                resident: session
                    .resident_series
                    .then(|| ResidentSeries::new(dir, pid, session.mono_offset)),
                interner: HashMap::default(),
                thread_names: BTreeMap::new(),
                thread_names_changed: false,
                next_stack_id: 0,
            },
            counters: Counters::default(),
            far: session.far_memory.as_ref().map(|prefix| FarState {
                prefix: prefix.clone(),
                view: None,
                unmatched: Vec::new(),
                pending_fills: FxHashMap::default(),
                orphans: 0,
                rows_unhandled: 0,
                mono_offset: session.mono_offset,
                matched: 0,
                fetches_late: 0,
                wait_ns: 0,
                wait_hist: [0; fltrace_runtime_abi::HIST_BUCKETS],
                resolve_ns: 0,
                pruned_below: 0,
                exec_ns: 0,
                made_before: u64::MAX,
                region_pruned: false,
                outside_now: 0,
                outside: Default::default(),
                unreached: Vec::new(),
                inherited_region: None,
                backlog: session.far_backlog,
            }),
            exited_round: None,
            first_ns: 0,
            live_threads: std::iter::once(os_pid).collect(),
            main_exited: false,
            code_hits: session.collect_code_hits.then(Default::default),
            new_code_hits: Vec::new(),
        })
    }

    /// A child made by fork: a copy of the parent's address space, its own files. `os_pid`
    /// filed as `pid` (see [`Process::filed_as`]).
    pub fn fork_of(
        parent: &Process,
        pid: u32,
        os_pid: u32,
        session: &RecordingContext,
    ) -> Result<Process, fltrace_trace::Error> {
        let mut child = Process::filed_as(pid, os_pid, Some(parent.pid), session)?;
        child.generation = parent.generation;
        child.image_recorded = true;
        child.preload_generation = Some(parent.generation);
        child.unwinder = parent.unwinder.clone();
        child.interposers = parent.interposers.clone();
        child.entries = parent.entries.clone();
        if let (Some(far), Some(parent_far)) = (&mut child.far, &parent.far) {
            far.inherited_region = parent_far.region();
        }
        for mapping in parent.maps.values() {
            child.out.mmaps.push(mapping.clone())?;
            child.tell_mapped(mapping);
            child.record_mapping(mapping.clone());
        }
        child.executable.clone_from(&parent.executable);
        Ok(child)
    }

    /// For the allocation logs: the generation of the first image that ran with the
    /// preloaded library and the current generation, once the library has run.
    pub fn preload_images(&self) -> Option<(u32, u32)> {
        Some((self.preload_generation?, self.generation))
    }

    /// When the current generation began: its earliest live mapping (the executable's, at
    /// the exec), if any is known yet.
    pub fn image_start_ns(&self) -> Option<u64> {
        self.maps.values().map(|m| m.time_ns).min()
    }

    /// exec replaced the address space at `exec_ns` (CLOCK_MONOTONIC, the record's time).
    pub fn exec(&mut self, exec_ns: u64) {
        // One thread is left, with the pid as its tid: the main thread when another thread
        // exec'd (the old main thread's end was reported).
        self.live_threads.clear();
        self.live_threads.insert(self.os_pid);
        self.main_exited = false;
        self.note_unreached_image();
        if std::mem::take(&mut self.image_recorded) {
            self.generation += 1;
        }
        self.preload_generation.get_or_insert(self.generation);
        self.image_running = false;
        self.maps.clear();
        self.executable = None;
        self.unwinder = AddressSpaceUnwinder::default();
        self.entries.clear();
        self.interposers.clear();
        self.cache = CacheX86_64::new();
        self.known.clear();
        self.uncopied.clear();
        // Same addresses mean other code now: stacks are not shared across generations.
        self.out.interner.clear();
        if let Some(far) = &mut self.far {
            // The new image starts its own runtime and shared page, renamed over the old one.
            // The page open may be the new one already: records are read a round late, and
            // the new image's runtime may have made its page before the exec record was read
            // (a shell's `exec prog` under -L lost the program's statistics so, every time).
            if far.view.as_ref().is_some_and(|v| v.made_ns() < exec_ns) {
                far.view = None;
            }
            far.exec_ns = exec_ns;
            // What the old image's runtime logged matches no row any more.
            far.pending_fills.retain(|_, rows| {
                rows.retain(|r| r.time_ns >= exec_ns);
                !rows.is_empty()
            });
            far.unmatched
                .retain(|(handled, _)| handled.read_ns >= exec_ns);
        }
    }

    /// A thread of this process started (its fork record), or was there when fltrace
    /// attached.
    pub fn thread_started(&mut self, tid: u32) {
        self.live_threads.insert(tid);
    }

    /// A thread of this process ended; returns whether the process is gone: its main thread
    /// ended and no other thread it knows of is left.
    pub fn thread_exited(&mut self, tid: u32) -> bool {
        self.known.remove(&tid);
        self.uncopied.remove(&tid);
        self.live_threads.remove(&tid);
        self.main_exited |= tid == self.os_pid;
        self.main_exited && self.live_threads.is_empty()
    }

    /// Whether it is gone though the records said nothing. After its main thread's end, the
    /// threads it waits for are those `/proc/<pid>/task/` lists besides the zombie main
    /// thread (which holds the pid while any lives, so no other process's are listed): one
    /// whose exit record was lost, or that ended in the attach race, is dropped; one whose
    /// fork record is not read yet is kept. It is gone when none is left. With the main
    /// thread's end never read (a lost record), it is gone only when `/proc/<pid>` is: a
    /// later process holding the pid would have shown its fork.
    pub fn vanished(&mut self, proc_root: &Path) -> bool {
        let dir = proc_root.join(self.os_pid.to_string());
        if !self.main_exited {
            return !dir.exists();
        }
        self.live_threads = other_threads(&dir.join("task"), self.os_pid);
        self.live_threads.is_empty()
    }

    /// Whether its main thread ended: its pid's /proc entry is a zombie's, no longer its
    /// memory's.
    pub fn main_exited(&self) -> bool {
        self.main_exited
    }

    /// The stack address just above thread `tid`'s outermost frame (its entry's caller's
    /// stack pointer), once an unwind of its stack reached its entry.
    pub fn outermost_sp(&self, tid: u32) -> Option<u64> {
        self.known.get(&tid)?.outermost_sp()
    }

    /// This process was forked by thread `parent_tid` of `parent`, without exec: its thread
    /// runs on a copy of that thread's stack, so its first stacks complete from that thread's
    /// last complete one (postgres's backends fault deep in the postmaster's frames at once).
    pub fn inherit_stack(&mut self, parent: &Process, parent_tid: u32) {
        if let Some(known) = parent.known.get(&parent_tid) {
            self.known.insert(self.os_pid, known.forked());
        }
    }
}

/// The threads `task_dir` (`/proc/<pid>/task`) lists besides `leader`; none when it is gone.
fn other_threads(task_dir: &Path, leader: u32) -> rustc_hash::FxHashSet<u32> {
    let Ok(entries) = std::fs::read_dir(task_dir) else {
        return Default::default();
    };
    entries
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
        .filter(|&tid| tid != leader)
        .collect()
}

#[cfg(test)]
mod tests;
