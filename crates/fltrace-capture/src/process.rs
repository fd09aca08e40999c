//! The model of each traced process: its mappings, its unwinder and its output files.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};

use framehop::x86_64::CacheX86_64;
use rustc_hash::FxHashMap;

use fltrace_trace::{
    CodeAddr, Fault, FaultFlags, FaultWriter, Mapping, MappingWriter, Origin, Stack, StackEnd,
    StackWriter, VirtAddr, files, keys, libraries, stats, write_procmaps_line,
};

use crate::live::LiveEvent;
use crate::runtime::{Handled, RuntimeView, is_fill};
use crate::unwind::{
    AddressSpaceUnwinder, ElfCache, KnownFrames, LiveStack, StackBytes, UnwindEnd,
};

mod resident;
mod window;

pub use resident::RESIDENT_EVERY;
use resident::ResidentSeries;

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

/// Where one process's trace goes.
struct Output {
    faults: FaultWindow,
    stacks: StackWriter,
    mmaps: MappingWriter,
    /// `procmaps` rewritten from the live mappings at each stats line: a scratch buffer kept
    /// between writes, sized by the live mappings.
    procmaps: String,
    stats_path: PathBuf,
    stats: String,
    /// The resident memory over time, when sampled.
    resident: Option<ResidentSeries>,
    /// Stack frames (with the generation appended) to stack id, and whether the stack is one
    /// of the tracer's own work ([`Process::tracer_stack`]).
    interner: FxHashMap<Vec<u64>, (u32, bool)>,
    next_stack_id: u32,
    /// The name (`comm`) of each thread by (generation, tid), and whether it changed since
    /// the faults file's footer was last given it.
    thread_names: BTreeMap<(u32, u32), String>,
    thread_names_changed: bool,
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
    out: Output,
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

/// What a process under far-memory emulation adds: the runtime's shared page and the join of
/// its log of handled faults with the trace's rows.
struct FarState {
    prefix: PathBuf,
    view: Option<RuntimeView>,
    /// Log entries not yet matched to a row, with the round they were read in.
    unmatched: Vec<(Handled, u64)>,
    /// Fault rows of each (thread, page) in the managed region, oldest first, still open to
    /// the runtime's log. A thread waits in its fault until the runtime resolved it, so each
    /// log entry belongs to the newest row of its thread and page that is older than the
    /// entry's read time; one row may have several entries (a write that found the page
    /// brought in by another thread's read, then write-protected), and none when the kernel
    /// resolved the fault alone (another thread's fault brought the page in between).
    pending_fills: FxHashMap<(u32, u64), std::collections::VecDeque<PendingRow>>,
    /// Rows in the region that no log entry matched: the kernel resolved them alone.
    rows_unhandled: u64,
    /// The trace's times (wall clock) minus CLOCK_MONOTONIC, the runtime's clock: the
    /// recorder's own offset, so that a row's time converts back to its sample's exactly.
    mono_offset: u64,
    /// Log entries that matched no row.
    orphans: u64,
    /// Log entries matched with their row.
    matched: u64,
    /// Fetches matched with a row already settled (a recorder behind by a checkpoint): the
    /// row stays flagged as a first touch.
    fetches_late: u64,
    /// Sum over matched entries of the row's time to the handler's read of the message: the
    /// wait for a handler, ns.
    wait_ns: u64,
    /// Histogram of that wait (`fltrace_runtime_abi::hist_bucket`).
    wait_hist: [u64; fltrace_runtime_abi::HIST_BUCKETS],
    /// Sum over matched entries of the row's time to the fault's resolution, ns.
    resolve_ns: u64,
    /// `pending_fills` holds no rows below this one.
    pruned_below: u64,
    /// When the image began, at the last exec or at the fork that made the process
    /// (CLOCK_MONOTONIC ns): a page made before it is an earlier image's, or an earlier
    /// process's that had the pid.
    exec_ns: u64,
    /// When the process ended or its pid went to a later process (CLOCK_MONOTONIC ns;
    /// `u64::MAX` while neither is known): a page made from then on is that process's.
    made_before: u64,
    /// Whether the rows outside the managed region were dropped from `pending_fills`, once
    /// the page said where the region is.
    region_pruned: bool,
    /// The program's anonymous resident memory outside the region at the last look, bytes.
    outside_now: u64,
    /// The look with the most outside, and the program's peak.
    outside: crate::unemulated::OutsidePeak,
    /// The images that ran without the runtime (the preloaded library never loaded: a static
    /// program, a set-user-ID one): their executables.
    unreached: Vec<String>,
    /// Where the parent's region lies, for a child forked without exec (its copy lies there
    /// too) until its own runtime's page says so.
    inherited_region: Option<std::ops::Range<u64>>,
    /// Faults the runtime may log beyond what was read ([`RecordingContext::far_backlog`]).
    backlog: u64,
}

impl FarState {
    /// Where the managed region lies, if known (from the runtime's page, or a forked child's
    /// parent).
    fn region(&self) -> Option<std::ops::Range<u64>> {
        self.view
            .as_ref()
            .map(RuntimeView::region)
            .filter(|region| !region.is_empty())
            .or_else(|| self.inherited_region.clone())
    }

    /// Whether `addr` may be in the managed region: it is, or where the region lies is not
    /// known yet.
    fn may_be_in_region(&self, addr: u64) -> bool {
        self.region().is_none_or(|region| region.contains(&addr))
    }
}

/// A row whose stack stopped at its innermost frame for want of a copy.
struct Uncopied {
    row: u64,
    ip: u64,
    /// The canonical frame address of the innermost frame.
    cfa: u64,
}

/// A fault row in the managed region, waiting for its log entries.
#[derive(Debug, Clone, Copy)]
struct PendingRow {
    row: u64,
    time_ns: u64,
    matched: bool,
}

/// The arguments of an `mremap` call, kept from its entry until its return.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RemapCall {
    pub old_start: u64,
    pub old_len: u64,
    pub new_len: u64,
}

/// A page fault as the kernel sampled it: the tracepoint's fields, the registers and the stack
/// copy its stack is unwound from.
#[derive(Debug, Clone, Copy)]
pub struct FaultSample<'a> {
    /// The trace's time of the fault (the sample's CLOCK_MONOTONIC time plus the recorder's
    /// offset).
    pub time_ns: u64,
    pub tid: u32,
    /// The address that faulted.
    pub addr: VirtAddr,
    /// The x86 page-fault error code.
    pub error_code: u64,
    /// The instruction, stack and frame pointers.
    pub regs: (u64, u64, u64),
    /// `rbx`, where the record holds it (the BPF capture's): the CFA of the dynamic loader's
    /// resolver.
    pub rbx: Option<u64>,
    /// The copy of the user stack from the stack pointer up, and the pages it skipped.
    pub stack: StackBytes<'a>,
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
            out: Output {
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

    /// The process was forked at `fork_ns` (CLOCK_MONOTONIC, the record's time): a runtime
    /// page made before then is not its own. An earlier process given the same pid may not
    /// have been finished yet, its page still under the name until this one's runtime
    /// renames its own over it; read as this one's, its counters were this one's statistics.
    pub fn forked_at(&mut self, fork_ns: u64) {
        if let Some(far) = &mut self.far {
            far.exec_ns = far.exec_ns.max(fork_ns);
        }
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

    /// Under far memory: notes the image ending now (an exec replaces it, or the process
    /// ends: called once then, before its figures are read) if it ran without the runtime:
    /// its program never loaded the preloaded library.
    pub fn note_unreached_image(&mut self) {
        if self.image_recorded && self.image_running && self.interposers.is_empty() {
            let executable = self
                .executable
                .as_ref()
                .map_or_else(|| "?".to_owned(), |(path, _)| path.clone());
            if let Some(far) = &mut self.far {
                far.unreached.push(executable);
            }
        }
    }

    /// Under far memory, when the kernel said this process ended: if it still runs, with an
    /// address space again, its events ended at an exec the kernel ran in secure-execution
    /// mode (set-user-ID, set-group-ID, file capabilities), which drops a tracer's events and
    /// ignores LD_PRELOAD: it runs on without the runtime, which is noted. Caught only while
    /// it still runs when its end is read.
    pub fn note_if_it_lives_on(&mut self) {
        let Some(far) = &mut self.far else {
            return;
        };
        let alive = crate::procfs::stat(self.os_pid as i32).is_ok_and(|s| !s.is_zombie());
        if !alive {
            return;
        }
        // A process in its exit has no address space left (its end is reported after the
        // kernel released it); one that exec'd has its new image's.
        let Ok(maps) = std::fs::read_to_string(format!("/proc/{}/maps", self.os_pid)) else {
            return;
        };
        let preloaded = maps.lines().any(|line| {
            line.split_whitespace()
                .nth(5)
                .is_some_and(libraries::is_preload)
        });
        if maps.is_empty() || preloaded {
            return;
        }
        let executable = std::fs::read_link(format!("/proc/{}/exe", self.os_pid))
            .map_or_else(|_| "?".to_owned(), |p| p.display().to_string());
        far.unreached.push(executable);
    }

    /// Under far memory: the executables of the images that ran without the runtime.
    pub fn unreached_images(&self) -> &[String] {
        self.far.as_ref().map_or(&[], |far| &far.unreached)
    }

    /// Under far memory: the most memory seen outside the region, and the program's peak.
    pub fn outside_peak(&self) -> Option<&crate::unemulated::OutsidePeak> {
        self.far.as_ref().map(|far| &far.outside)
    }

    /// The process ended, or a later process was given its pid, at `time_ns` (CLOCK_MONOTONIC,
    /// the record's time): the far-memory page under its pid from then on is not its own.
    pub fn pid_gone_at(&mut self, time_ns: u64) {
        if let Some(far) = &mut self.far {
            far.made_before = far.made_before.min(time_ns);
            if far.view.as_ref().is_some_and(|v| v.made_ns() >= time_ns) {
                far.view = None;
            }
        }
    }

    /// Whether this process's far-memory page was never read and a later process given its
    /// pid has put its own page under the name: this one's runtime statistics are lost.
    pub fn runtime_page_taken(&self) -> bool {
        self.far.as_ref().is_some_and(|far| {
            far.view.is_none()
                && far.made_before != u64::MAX
                && RuntimeView::open(&far.prefix, self.os_pid, far.made_before, u64::MAX).is_some()
        })
    }

    /// The kernel named thread `tid` `name` (at exec, by `prctl`, or as the thread that
    /// made it).
    pub fn set_thread_name(&mut self, tid: u32, name: &str) {
        let key = (self.generation, tid);
        if self.out.thread_names.get(&key).map(String::as_str) != Some(name) {
            self.out.thread_names.insert(key, name.to_owned());
            self.out.thread_names_changed = true;
            let (pid, os_pid) = (self.pid, self.os_pid);
            self.tell(|| LiveEvent::ThreadNamed {
                pid,
                os_pid,
                tid,
                name: name.to_owned(),
            });
        }
    }

    /// Tells the live view, if there is one, what `event` makes (only then).
    fn tell(&mut self, event: impl FnOnce() -> LiveEvent) {
        if let Some(tap) = self.out.faults.tap() {
            tap.events.push(event());
        }
    }

    /// Tells the live view of a mapping of code: stack frames are symbolized through them.
    fn tell_mapped(&mut self, mapping: &Mapping) {
        if mapping.is_exec() {
            let pid = self.pid;
            self.tell(|| LiveEvent::Mapped {
                pid,
                mapping: mapping.clone(),
            });
        }
    }

    /// Moves what the live view is to be told into `batch`.
    pub fn drain_live(&mut self, batch: &mut crate::live::LiveBatch) {
        if let Some(tap) = self.out.faults.tap() {
            tap.drain_into(batch);
        }
    }

    /// The name of thread `tid` in the current generation, if known.
    pub fn thread_name(&self, tid: u32) -> Option<&str> {
        self.out
            .thread_names
            .get(&(self.generation, tid))
            .map(String::as_str)
    }

    /// Names a thread seen without a name record (a process attached to, a thread the
    /// recording missed being made): as /proc says while it lives, else as the main thread.
    fn name_unnamed_thread(&mut self, tid: u32) {
        // Once per thread and generation: a thread /proc no longer has stays unnamed.
        if self.thread_name(tid).is_some() || !self.name_lookups.insert((self.generation, tid)) {
            return;
        }
        let proc_name = crate::procfs::task_comm(self.os_pid, tid);
        if let Some(name) = proc_name.or_else(|| self.thread_name(self.os_pid).map(str::to_owned)) {
            self.set_thread_name(tid, &name);
        }
    }

    /// Gives the faults file's footer the threads' names, if they changed.
    fn store_thread_names(&mut self) {
        if std::mem::take(&mut self.out.thread_names_changed) {
            let text = fltrace_trace::format_thread_names(
                self.out
                    .thread_names
                    .iter()
                    .map(|(&(generation, tid), name)| (generation, tid, name.as_str())),
            );
            self.out.faults.set_metadata(keys::THREADS, text);
        }
    }

    fn record_mapping(&mut self, mapping: Mapping) {
        self.image_recorded = true;
        match &mut self.executable {
            None if mapping.is_file() => {
                self.executable = Some((mapping.path.clone(), mapping.end));
            }
            // Its other segments, and the bss the kernel maps right after them.
            Some((path, end))
                if *path == mapping.path || (mapping.path == "//anon" && mapping.start == *end) =>
            {
                *end = (*end).max(mapping.end);
            }
            _ => {}
        }
        // A new mapping replaces what it overlaps, as in the kernel.
        self.cut(mapping.start, mapping.end);
        self.maps.insert(mapping.start, mapping);
    }

    /// Removes `start..end` from the model: the parts of older mappings outside it stay, so
    /// the model (and `procmaps`) follow `/proc/PID/maps`. Touches only the mappings it
    /// overlaps: constant time for a program that maps and unmaps at one address.
    fn cut(&mut self, start: VirtAddr, end: VirtAddr) {
        let overlapped: Vec<VirtAddr> = self
            .maps
            .range(..end)
            .rev()
            .take_while(|(_, m)| m.end > start)
            .map(|(at, _)| *at)
            .collect();
        for at in overlapped {
            let Some(old) = self.maps.remove(&at) else {
                continue;
            };
            if old.end > end {
                let right = Mapping {
                    start: end,
                    pgoff: old.file_offset(end),
                    ..old.clone()
                };
                self.maps.insert(right.start, right);
            }
            if old.start < start {
                let left = Mapping { end: start, ..old };
                self.maps.insert(left.start, left);
            }
        }
    }

    /// A `munmap(addr, len)` call: the model forgets the range, so its memory follows the
    /// live mappings, not the mappings ever made. Read at the call's entry: the kernel fails
    /// it only for an unaligned address or a zero length (left alone here) or when out of
    /// memory splitting a mapping.
    pub fn unmap(&mut self, addr: u64, len: u64) {
        const PAGE: u64 = 4096;
        if !addr.is_multiple_of(PAGE) || len == 0 {
            return;
        }
        let end = addr.saturating_add(len.next_multiple_of(PAGE));
        self.cut(VirtAddr::new(addr), VirtAddr::new(end));
    }

    /// Whether an anonymous mapping is the heap that `brk` grows. The kernel names it `[heap]`
    /// in its records only once the break has moved (`vma_is_initial_heap`), so the first
    /// growth, the only one of most programs, arrives as `//anon`. The break starts above the
    /// executable's bss, at a random offset below 1 GiB (x86-64 `arch_randomize_brk`), where
    /// no other mapping goes unless placed there on purpose.
    fn is_initial_heap(&self, mapping: &Mapping) -> bool {
        const BRK_RANDOM_RANGE: u64 = 1 << 30;
        mapping.path == "//anon"
            && !mapping.is_exec()
            && self.executable.as_ref().is_some_and(|(_, end)| {
                mapping.start > *end && mapping.start - *end <= BRK_RANDOM_RANGE
            })
    }

    /// A new mapping reported by the kernel. `root` is where the process sees `/`.
    pub fn map(
        &mut self,
        mut mapping: Mapping,
        elf_cache: &mut ElfCache,
    ) -> Result<(), fltrace_trace::Error> {
        mapping.generation = self.generation;
        if self.is_initial_heap(&mapping) {
            mapping.path = "[heap]".to_owned();
        }
        if mapping.path == crate::unwind::VDSO && mapping.is_exec() {
            // Code without a file, but an ELF image with CFI: `clock_gettime`'s frames unwind
            // by it rather than as JIT code (a chain its code does not keep).
            self.unwinder.add_mapping(
                elf_cache,
                &mapping,
                std::path::Path::new(crate::unwind::VDSO),
            );
        }
        if mapping.is_file() {
            let file = crate::unwind::mapped_file(self.os_pid, &mapping.path);
            // Every file mapping carries its build ID (the kernel's, else read here), so that a
            // recording can be symbolized and archived after the files change.
            if mapping.build_id.is_empty() {
                mapping.build_id = elf_cache.build_id(&file);
            }
            if mapping.is_exec() {
                self.unwinder.add_mapping(elf_cache, &mapping, &file);
                // HotSpot's compiled Java code keeps a frame-pointer chain only with
                // -XX:+PreserveFramePointer: without it, stacks stop at JIT frames.
                if mapping.path.ends_with("/libjvm.so")
                    && !crate::procfs::jvm_preserves_frame_pointer(self.os_pid)
                {
                    self.unwinder.distrust_jit();
                }
                if let Some(entry) = elf_cache.entry_point(&file, mapping.start, mapping.pgoff)
                    && mapping.contains(VirtAddr::new(entry))
                {
                    self.entries.push(entry);
                    self.unwinder.add_entry(entry);
                }
                if libraries::is_preload(&mapping.path) {
                    self.interposers.extend(elf_cache.exported_functions(
                        &file,
                        mapping.start,
                        mapping.pgoff,
                    ));
                }
            }
        }
        self.out.mmaps.push(mapping.clone())?;
        self.tell_mapped(&mapping);
        self.record_mapping(mapping);
        Ok(())
    }

    /// An `mremap` that returned `new_start`: perf reports no mapping for it, so the mapping
    /// it grew or moved to is derived from the one at `call.old_start`, with its protection,
    /// flags and file. A shrink adds no address and is left alone, as is a call on memory
    /// the model does not know.
    pub fn remap(
        &mut self,
        call: &RemapCall,
        new_start: u64,
        time_ns: u64,
        elf_cache: &mut ElfCache,
    ) -> Result<(), fltrace_trace::Error> {
        const PAGE: u64 = 4096;
        let new_len = call.new_len.next_multiple_of(PAGE);
        let moved = new_start != call.old_start;
        if !moved && new_len <= call.old_len {
            return Ok(());
        }
        let Some(old) = self.mapping_at(VirtAddr::new(call.old_start)) else {
            return Ok(());
        };
        let offset_in_old = call.old_start - old.start.get();
        // Grown in place, the kernel extends the old mapping; moved, the part from
        // `old_start` becomes a mapping of its own.
        let (start, pgoff) = if moved {
            (new_start, old.pgoff.get() + offset_in_old)
        } else {
            (old.start.get(), old.pgoff.get())
        };
        let mapping = Mapping {
            time_ns,
            start: VirtAddr::new(start),
            end: VirtAddr::new(new_start + new_len),
            pgoff: fltrace_trace::FileOffset::new(pgoff),
            ..old.clone()
        };
        self.map(mapping, elf_cache)
    }

    /// Whether the access of a fault at `addr` with x86 error code `error_code` is one the
    /// mappings do not allow: no mapping holds the address (and it is no growth of the main
    /// thread's stack), its protection forbids the access, or a protection key does. Nothing
    /// is said while no mapping is known.
    fn access_denied(&self, addr: VirtAddr, error_code: u64) -> bool {
        const WRITE: u64 = 2;
        const INSTR: u64 = 16;
        const PROTECTION_KEY: u64 = 32;
        // The legacy vsyscall page, which the kernel emulates, has no mapping record.
        const VSYSCALL: std::ops::Range<u64> = 0xffff_ffff_ff60_0000..0xffff_ffff_ff60_1000;
        if error_code & PROTECTION_KEY != 0 {
            return true;
        }
        if self.maps.is_empty() || VSYSCALL.contains(&addr.get()) {
            return false;
        }
        let (read, write, exec) = (
            libc::PROT_READ as u32,
            libc::PROT_WRITE as u32,
            libc::PROT_EXEC as u32,
        );
        match self.mapping_at(addr) {
            Some(m) if error_code & INSTR != 0 => m.prot & exec == 0,
            Some(m) if error_code & WRITE != 0 => m.prot & write == 0,
            // On x86 a writable or executable page is readable.
            Some(m) => m.prot & (read | write | exec) == 0,
            None => self.stack_bounds(addr.get()) == (0, 0),
        }
    }

    /// The live mapping that starts at `start`.
    pub fn mapping_starting(&self, start: VirtAddr) -> Option<&Mapping> {
        self.maps.get(&start)
    }

    fn mapping_at(&self, addr: VirtAddr) -> Option<&Mapping> {
        self.maps
            .range(..=addr)
            .next_back()
            .map(|(_, m)| m)
            .filter(|m| m.contains(addr))
    }

    /// The stack mapping `sp` lies in, which live reads are confined to. The main thread's
    /// stack grows down without a mapping record: a stack pointer below the `[stack]` the
    /// model knows, within [`STACK_GROWTH`], is on that stack grown.
    fn stack_bounds(&self, sp: u64) -> (u64, u64) {
        if let Some(m) = self.mapping_at(VirtAddr::new(sp)) {
            return (m.start.get(), m.end.get());
        }
        match self.maps.range(VirtAddr::new(sp)..).next() {
            Some((start, m)) if m.path == "[stack]" && start.get() - sp <= STACK_GROWTH => {
                (sp & !0xfff, m.end.get())
            }
            _ => (0, 0),
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

    /// Records one fault: classifies it, unwinds its stack and appends its row, open to the
    /// flags later records add ([`Process::major`], [`Process::poll_runtime`]).
    pub fn fault(
        &mut self,
        sample: &FaultSample<'_>,
        frames: &mut Vec<u64>,
    ) -> Result<(), fltrace_trace::Error> {
        let FaultSample {
            time_ns,
            tid,
            addr,
            error_code,
            regs,
            rbx,
            stack,
        } = *sample;
        // x86 page fault error code bits (arch/x86/include/asm/trap_pf.h).
        const PRESENT: u64 = 1;
        const WRITE: u64 = 2;
        const USER: u64 = 4;
        const INSTR: u64 = 16;
        let mut flags = 0;
        if error_code & WRITE != 0 {
            flags |= FaultFlags::WRITE;
        }
        if error_code & INSTR != 0 {
            flags |= FaultFlags::EXEC;
        }
        if error_code & PRESENT != 0 {
            flags |= FaultFlags::WRPROTECT;
        } else {
            // A missing page of anonymous memory (or of a stack growing into new space) is
            // filled with zeros on first touch; file pages come from the page cache. Nothing
            // is mapped below the lowest address mmap allows (vm.mmap_min_addr, 64 KiB by
            // default) without a mapping record: a fault there is a null pointer's, which
            // kills the program instead of filling a page.
            const LOWEST_MAPPABLE: u64 = 0x10000;
            let anonymous = match self.mapping_at(addr) {
                Some(mapping) => !mapping.is_file(),
                None => addr.get() >= LOWEST_MAPPABLE,
            };
            if anonymous {
                flags |= FaultFlags::ZERO;
            }
        }
        if error_code & USER == 0 {
            flags |= FaultFlags::KERNEL;
        }
        // An access the mappings do not allow fills no page: the kernel raises SIGSEGV (or
        // fails the system call with EFAULT). Not in execve, whose faults come before the
        // new image's mappings are known.
        let in_execve = error_code & USER == 0 && !self.image_running;
        if !in_execve && self.access_denied(addr, error_code) {
            flags = (flags | FaultFlags::INVALID) & !FaultFlags::ZERO;
        }
        if let Some(far) = &mut self.far
            && far.may_be_in_region(addr.get())
        {
            far.pending_fills
                .entry((tid, addr.align_down(0x1000).get()))
                .or_default()
                .push_back(PendingRow {
                    row: self.out.faults.next_row(),
                    time_ns: time_ns.wrapping_sub(far.mono_offset),
                    matched: false,
                });
        }

        self.name_unnamed_thread(tid);
        frames.clear();
        if error_code & USER != 0 {
            self.image_running = true;
        }
        // A fault the kernel takes in execve, writing the new image's first stack or bss
        // before its first instruction: the sampled registers are still the old image's, at
        // its execve. The new image has no frames yet; the fault is its entry's.
        let in_exec = error_code & USER == 0
            && !self.image_running
            && !self
                .mapping_at(VirtAddr::new(regs.0))
                .is_some_and(|m| m.is_exec());
        // The row's instruction is its stack's first frame, here the entry too.
        let mut ip = regs.0;
        let end = match self.entries.last() {
            Some(&entry) if in_exec => {
                ip = entry;
                frames.push(entry);
                StackEnd::Complete
            }
            _ => self.unwind_fault(tid, regs, rbx, stack, frames),
        };
        let (stack_id, tracer) = self.intern(frames, end)?;
        self.image_recorded = true;
        if end == StackEnd::Truncated && stack.is_empty() && self.live.reads() {
            if let Some(cfa) = self.unwinder.frame_cfa(&mut self.cache, regs) {
                self.uncopied.entry(tid).or_default().push(Uncopied {
                    row: self.out.faults.next_row(),
                    ip: regs.0,
                    cfa,
                });
            }
        } else if let Some(waiting) = self.uncopied.remove(&tid) {
            self.complete_uncopied(tid, waiting, frames)?;
        }
        // Far memory's own allocator serves the program: what it touches in the managed
        // region is the program's memory. The region is anonymous: a file's pages are not in
        // it (the runtime's log, which its handler writes in the program's faulting thread,
        // before the recorder may know where the region lies).
        let in_region = self
            .far
            .as_ref()
            .is_some_and(|far| far.may_be_in_region(addr.get()))
            && !self.mapping_at(addr).is_some_and(|m| m.is_file());
        if tracer && !in_region {
            flags |= FaultFlags::TRACER;
        }
        let fault = Fault {
            time_ns,
            pid: self.pid,
            tid,
            ip: CodeAddr::new(ip),
            addr,
            flags: FaultFlags(flags),
            stack_id,
        };

        let c = &mut self.counters;
        c.faults += 1;
        match fault.flags.kind() {
            fltrace_trace::FaultKind::Read => c.faults_r += 1,
            fltrace_trace::FaultKind::Write => c.faults_w += 1,
            fltrace_trace::FaultKind::WriteProtect => c.faults_wp += 1,
        }
        if fault.flags.has(FaultFlags::ZERO) {
            c.faults_zp += 1;
        }
        if fault.flags.has(FaultFlags::KERNEL) {
            c.faults_kernel += 1;
        }
        if fault.flags.has(FaultFlags::TRACER) {
            c.faults_tracer += 1;
        }
        self.out.faults.push(fault)
    }

    /// Completes the rows of thread `tid` whose copy was empty (`waiting`) from the thread's
    /// stack just unwound, where it holds their innermost frame's caller (counted as spliced),
    /// while the rows are still open. The others stay truncated.
    fn complete_uncopied(
        &mut self,
        tid: u32,
        waiting: Vec<Uncopied>,
        frames: &mut Vec<u64>,
    ) -> Result<(), fltrace_trace::Error> {
        for row in waiting {
            frames.clear();
            let Some(known) = self.known.get(&tid) else {
                return Ok(());
            };
            let Some(callers) = known.callers_at(row.cfa, row.ip) else {
                continue;
            };
            frames.push(row.ip);
            frames.extend(callers);
            if !self.out.faults.is_open(row.row) {
                continue;
            }
            let (stack_id, _) = self.intern(frames, StackEnd::Complete)?;
            if self
                .out
                .faults
                .amend(row.row, |fault| fault.stack_id = stack_id)
            {
                let c = &mut self.counters;
                c.stacks_truncated -= 1;
                c.stacks_uncopied_truncated -= 1;
                c.stacks_spliced += 1;
            }
        }
        Ok(())
    }

    /// Unwinds the stack of a fault of thread `tid` into `frames` and counts how it ended.
    fn unwind_fault(
        &mut self,
        tid: u32,
        regs: (u64, u64, u64),
        rbx: Option<u64>,
        stack: StackBytes<'_>,
        frames: &mut Vec<u64>,
    ) -> StackEnd {
        let stack_bounds = self.stack_bounds(regs.1);
        self.live.reset(stack_bounds);
        // Exact stacks (no live reads) infer nothing beyond the copy either.
        let mut exact = KnownFrames::default();
        let known = if self.live.reads() {
            self.known.entry(tid).or_default()
        } else {
            &mut exact
        };
        let spliced = known.spliced;
        let maps = &self.maps;
        let is_exec = |addr: u64| {
            let addr = VirtAddr::new(addr);
            maps.is_empty()
                || maps
                    .range(..=addr)
                    .next_back()
                    .is_some_and(|(_, m)| m.contains(addr) && m.is_exec())
        };
        let unwound = self.unwinder.unwind_thread(
            &mut self.cache,
            regs,
            rbx,
            stack,
            &mut self.live,
            Some(&is_exec),
            known,
            frames,
        );
        if self.live.scanned {
            self.counters.stacks_scanned += 1;
        }

        if known.spliced != spliced {
            self.counters.stacks_spliced += 1;
        }
        // A return address outside executable memory is not one: past the loader's `_start`
        // the unwinder reads argc, and a stack that changed before its live read gives heap
        // or stack words. The stack ends before such a word instead of showing it as a frame.
        let mut cut = false;
        if !self.maps.is_empty()
            && let Some(bad) = frames.iter().skip(1).position(|&addr| {
                !self
                    .mapping_at(VirtAddr::new(addr))
                    .is_some_and(|m| m.is_exec())
            })
        {
            frames.truncate(bad + 1);
            cut = true;
        }
        // A fault with no stack copy (it grew the stack) unwound from the live stack alone
        // read a stack that has moved on since the fault: its callers and where they end are
        // stale (a zero word read as the end of the chain made postgres's `opendir_tail`
        // "complete" under a `__closedir` it was never called from). Only its own frame is
        // known; `complete_uncopied` may give it its callers later.
        if stack.is_empty() && self.live.used && frames.len() > 1 {
            frames.truncate(1);
            cut = true;
        }
        let end = classify(unwound, cut, frames, &self.entries);
        if self.live.reads()
            && let Some(known) = self.known.get_mut(&tid)
        {
            known.settle(end == StackEnd::Complete);
        }
        if end == StackEnd::Truncated {
            self.counters.stacks_truncated += 1;
            self.counters.stacks_unverified += u64::from(self.live.unverified);
        }
        if stack.is_empty() {
            self.counters.stacks_uncopied += 1;
            if end == StackEnd::Truncated {
                self.counters.stacks_uncopied_truncated += 1;
            }
        }
        if self.live.used {
            self.counters.stacks_extended += 1;
        }
        if stack.holes.bytes() > 0 {
            self.counters.stacks_holes += 1;
        }
        end
    }

    /// The id of the stack `frames` and whether it is the tracer's, writing it the first time.
    fn intern(
        &mut self,
        frames: &mut Vec<u64>,
        end: StackEnd,
    ) -> Result<(u32, bool), fltrace_trace::Error> {
        // The same frames may end complete once and truncated another time (a live read that
        // failed): each is a stack of its own.
        let key = u64::from(self.generation) | u64::from(end.code()) << 32;
        frames.push(key);
        if let Some(&known) = self.out.interner.get(frames.as_slice()) {
            frames.pop();
            return Ok(known);
        }
        let id = self.out.next_stack_id;
        self.out.next_stack_id += 1;
        frames.pop();
        let tracer = self.tracer_stack(frames);
        frames.push(key);
        self.out.interner.insert(frames.clone(), (id, tracer));
        frames.pop();
        self.note_code_hits(frames);
        let stack = Stack {
            end,
            id,
            generation: self.generation,
            // The unwinder's output: instruction and return addresses.
            frames: frames.iter().map(|&frame| CodeAddr::new(frame)).collect(),
        };
        let pid = self.pid;
        self.tell(|| LiveEvent::Stack {
            pid,
            stack: stack.clone(),
        });
        self.out.stacks.push(stack)?;
        Ok((id, tracer))
    }

    /// Notes the code files a new stack's frames are in: only files with frames are kept in
    /// the build-ID cache. Once per distinct stack, not per fault.
    fn note_code_hits(&mut self, frames: &[u64]) {
        let Some(hits) = &self.code_hits else {
            return;
        };
        let mut last: Option<(VirtAddr, VirtAddr)> = None;
        let mut new: Vec<String> = Vec::new();
        for (i, &frame) in frames.iter().enumerate() {
            let at = VirtAddr::new(if i == 0 { frame } else { frame.wrapping_sub(1) });
            // Frames run in the same file: skip the look-up while they stay in one mapping.
            if last.is_some_and(|(start, end)| start <= at && at < end) {
                continue;
            }
            let Some(mapping) = self.mapping_at(at) else {
                continue;
            };
            last = Some((mapping.start, mapping.end));
            if mapping.is_file()
                && mapping.is_exec()
                && !mapping.build_id.is_empty()
                && !hits.contains(&mapping.build_id)
                && !new.contains(&mapping.build_id)
            {
                new.push(mapping.build_id.clone());
            }
        }
        if let Some(hits) = &mut self.code_hits {
            hits.extend(new.iter().cloned());
        }
        self.new_code_hits.append(&mut new);
    }

    /// The build IDs of code files with frames found since the last call.
    pub fn take_code_hits(&mut self) -> Vec<String> {
        std::mem::take(&mut self.new_code_hits)
    }

    /// Whether a fault with this stack (innermost first) was taken by the preloaded
    /// library's own work (the allocation tracer unwinding, logging, using its private heap)
    /// rather than on the program's behalf. Going outwards past the C runtime, the first
    /// other frame decides: code of the preloaded library that touched memory itself, or
    /// called the C library, is the tracer's, except its interposers (`malloc`...) calling
    /// the C library's allocator for the program.
    fn tracer_stack(&self, frames: &[u64]) -> bool {
        if self.interposers.is_empty() {
            return false;
        }
        for (i, &frame) in frames.iter().enumerate() {
            // Return addresses point after the call.
            let at = if i == 0 { frame } else { frame.wrapping_sub(1) };
            let Some(mapping) = self.mapping_at(VirtAddr::new(at)) else {
                return false;
            };
            if libraries::is_c_runtime(&mapping.path) {
                continue;
            }
            if !libraries::is_preload(&mapping.path) {
                return false;
            }
            if i == 0 {
                return true;
            }
            // The C library was called from the preloaded library: on the program's behalf
            // when the program called into it (an interposed `malloc` reaches the C library's
            // through the backing and next-allocator layers, which a tail call may leave
            // without a frame in the exported function), else the tracer's own work (its
            // threads start in the C runtime).
            let caller = frames[i..].iter().map(|&f| f.wrapping_sub(1)).find(|&at| {
                !self
                    .mapping_at(VirtAddr::new(at))
                    .is_some_and(|m| libraries::is_preload(&m.path))
            });
            let called_by_program = caller.is_some_and(|at| {
                self.mapping_at(VirtAddr::new(at))
                    .is_some_and(|m| !libraries::is_c_runtime(&m.path))
            });
            let in_interposer = frames[i..].iter().any(|&f| {
                self.interposers
                    .iter()
                    .any(|r| r.contains(&f.wrapping_sub(1)))
            });
            return !(called_by_program || in_interposer);
        }
        false
    }

    /// A major-fault event: marks the thread's latest fault on that page as major.
    pub fn major(&mut self, tid: u32, addr: u64) {
        let page = addr & !0xfff;
        let window = &mut self.out.faults;
        if let Some(row) = window.find_recent(4096, |f| {
            f.tid == tid && f.addr.align_down(0x1000).get() == page
        }) {
            window.amend(row, |fault| {
                fault.flags.0 |= FaultFlags::MAJOR;
                fault.flags.0 &= !FaultFlags::ZERO;
            });
            self.counters.faults_major += 1;
        }
    }

    /// Reads what the far-memory runtime reported since the last call and flags the matching
    /// rows: a fetch of an evicted page is not a first touch. `round` is the reading round.
    pub fn poll_runtime(&mut self, round: u64) {
        let Some(far) = &mut self.far else {
            return;
        };
        if far.view.is_none() {
            far.view = RuntimeView::open(&far.prefix, self.os_pid, far.exec_ns, far.made_before);
            if let Some(view) = &far.view {
                view.allow_backlog(far.backlog);
            }
            far.region_pruned = false;
        }
        // Faults outside the managed region never appear in the log. The page is published
        // before the runtime writes where its region is (a forked child's after registering
        // every page of it): until then no row is taken for outside it.
        if let Some(view) = &far.view
            && !far.region_pruned
            && !view.region().is_empty()
        {
            let region = view.region();
            far.pending_fills
                .retain(|(_, page), _| region.contains(page));
            far.region_pruned = true;
            let (path, reason) = view.fault_path();
            let why = fltrace_runtime_abi::path_reason::name(reason);
            log::info!(
                "process {}: far-memory faults served {}{}{}",
                self.os_pid,
                fltrace_runtime_abi::path::name(path),
                if why.is_empty() { "" } else { ": " },
                why
            );
        }
        let Some(view) = &mut far.view else {
            return;
        };
        let mut fresh = Vec::new();
        view.read_log(&mut fresh, round == u64::MAX);
        far.unmatched.extend(fresh.into_iter().map(|h| (h, round)));
        let window = &mut self.out.faults;
        let first_pending = window.first_open();
        if far.pruned_below < first_pending {
            // Rows already settled can no longer be amended.
            let rows_unhandled = &mut far.rows_unhandled;
            far.pending_fills.retain(|_, rows| {
                rows.retain(|r| {
                    let keep = r.row >= first_pending;
                    *rows_unhandled += u64::from(!keep && !r.matched);
                    keep
                });
                !rows.is_empty()
            });
            far.pruned_below = first_pending;
        }
        far.unmatched.retain(|(handled, seen)| {
            // Records are handled in time order up to the newest time of the previous round,
            // so a row written before its entry was read is in two rounds later at the latest.
            if seen.saturating_add(2) > round && round != u64::MAX {
                return true;
            }
            let key = (handled.tid, handled.page);
            let Some(rows) = far.pending_fills.get_mut(&key) else {
                far.orphans += 1;
                return false;
            };
            let Some(newest) = rows
                .iter()
                .map(|r| r.time_ns)
                .filter(|&t| t <= handled.read_ns)
                .max()
            else {
                far.orphans += 1;
                return false;
            };
            // Older rows of the thread on this page can get no entry any more.
            let rows_unhandled = &mut far.rows_unhandled;
            rows.retain(|r| {
                let keep = r.time_ns >= newest;
                *rows_unhandled += u64::from(!keep && !r.matched);
                keep
            });
            let Some(row) = rows.iter_mut().find(|r| r.time_ns == newest) else {
                far.orphans += 1;
                return false;
            };
            far.matched += 1;
            let first_entry = !row.matched;
            row.matched = true;
            if !window.is_open(row.row) {
                // Settled before its entry came: matched, not flagged (counted).
                far.fetches_late += u64::from(handled.kind == fltrace_runtime_abi::kind::FETCH);
                return false;
            }
            if first_entry {
                // The row's time is the fault's entry.
                let wait = handled.read_ns.saturating_sub(newest);
                far.wait_ns += wait;
                far.wait_hist[fltrace_runtime_abi::hist_bucket(wait)] += 1;
                far.resolve_ns += handled.done_ns.saturating_sub(newest);
            }
            if is_fill(handled.kind) {
                window.amend(row.row, |fault| {
                    if handled.kind == fltrace_runtime_abi::kind::FETCH {
                        fault.flags.0 = (fault.flags.0 | FaultFlags::FETCH) & !FaultFlags::ZERO;
                    } else {
                        fault.flags.0 |= FaultFlags::ZERO;
                    }
                });
            }
            false
        });
        if round == u64::MAX {
            // The process is gone: rows still unmatched never will be.
            for rows in std::mem::take(&mut far.pending_fills).into_values() {
                far.rows_unhandled += rows.iter().filter(|r| !r.matched).count() as u64;
            }
        }
    }

    /// The far-memory runtime's counters as its page says them now, once it is open.
    pub fn runtime_counters(&self) -> Option<Vec<(&'static str, u64)>> {
        let view = self.far.as_ref()?.view.as_ref()?;
        Some(view.counters().to_vec())
    }

    /// Whether the far-memory runtime reported running out of `-M`.
    pub fn far_memory_exhausted(&self) -> bool {
        self.far
            .as_ref()
            .and_then(|f| f.view.as_ref())
            .is_some_and(RuntimeView::exhausted)
    }

    /// Reads the process's memory figures from /proc while it lives.
    pub fn sample_memory(&mut self) {
        let Ok(status) = crate::procfs::status(self.os_pid) else {
            return;
        };
        if let Some(kb) = status.peak_rss_kb {
            self.counters.hwm = self.counters.hwm.max(kb * 1024);
        }
        if let Some(kb) = status.rss_kb {
            self.counters.rss = kb * 1024;
        }
        if let Some(kb) = status.rss_anon_kb {
            self.counters.rss_anon = kb * 1024;
        }
        // Under far memory, what of its memory is not under the limit.
        // A process without the runtime (its image never loaded the preloaded library) has
        // all of its memory outside.
        let without_runtime = self.image_running && self.interposers.is_empty();
        if let Some(far) = &mut self.far {
            let (own, emulated) = match &far.view {
                Some(view) => (view.own_ranges(), view.emulated_bytes()),
                None if without_runtime => (Vec::new(), 0),
                None => return,
            };
            if let Ok(outside) = crate::unemulated::read(self.os_pid, &own) {
                far.outside_now = outside.bytes;
                far.outside.add(outside, emulated);
            }
        }
    }

    /// Samples the process's resident memory into its series, when one is kept.
    pub fn sample_resident(&mut self) {
        if let Some(series) = &mut self.out.resident {
            series.sample(self.os_pid);
        }
    }

    /// Appends a stats line and rewrites the stats and maps files, so that a crash of fltrace
    /// itself still leaves them current to the last second.
    pub fn write_stats(&mut self, unix_time_s: u64, lost: u64) -> Result<(), fltrace_trace::Error> {
        let c = self.counters;
        let mut counters = vec![
            ("faults", c.faults),
            ("faults_r", c.faults_r),
            ("faults_w", c.faults_w),
            ("faults_wp", c.faults_wp),
            ("faults_zp", c.faults_zp),
            ("faults_major", c.faults_major),
            ("faults_kernel", c.faults_kernel),
            ("faults_tracer", c.faults_tracer),
            ("lost", lost),
            ("stacks_truncated", c.stacks_truncated),
            ("stacks_extended", c.stacks_extended),
            ("stacks_spliced", c.stacks_spliced),
            ("stacks_scanned", c.stacks_scanned),
            ("stacks_unverified", c.stacks_unverified),
            ("stacks_uncopied", c.stacks_uncopied),
            ("stacks_uncopied_truncated", c.stacks_uncopied_truncated),
            ("stacks_holes", c.stacks_holes),
            ("memory_used", c.hwm),
            ("rss", c.rss),
            ("rss_anon", c.rss_anon),
            ("hwm", c.hwm),
        ];
        // Under far-memory emulation the runtime's counters take the original's names
        // (memory_used becomes the peak of local memory).
        if let Some(far) = &self.far
            && let Some(view) = &far.view
        {
            for (name, value) in view.counters() {
                match counters.iter_mut().find(|(n, _)| *n == name) {
                    Some(slot) => slot.1 = value,
                    None => counters.push((name, value)),
                }
            }
            counters.extend(view.placement_counters());
            counters.push(("memory_unemulated", far.outside_now));
            counters.push(("rt_log_missed", view.missed));
            counters.push(("rt_unmatched", far.orphans));
            counters.push(("rt_rows_unhandled", far.rows_unhandled));
            counters.extend(view.breakdown());
            counters.push(("rt_matched", far.matched));
            counters.push(("rt_fetches_late", far.fetches_late));
            counters.push(("rt_wait_ns", far.wait_ns));
            counters.push((
                "rt_wait_p50_ns",
                fltrace_runtime_abi::hist_percentile(&far.wait_hist, 500),
            ));
            counters.push((
                "rt_wait_p99_ns",
                fltrace_runtime_abi::hist_percentile(&far.wait_hist, 990),
            ));
            counters.push(("rt_resolve_ns", far.resolve_ns));
            counters.push(("recorder_cpu_ns", crate::os::cpu_time_ns()));
        } else if let Some(far) = &self.far {
            // No runtime (yet, or ever): what was seen outside is all there is to say.
            counters.push(("memory_unemulated", far.outside_now));
        }
        self.out
            .stats
            .push_str(&stats::format_line(unix_time_s, &counters));
        let pid = self.pid;
        self.tell(|| LiveEvent::Stats { pid, counters });
        write_file(&self.out.stats_path, &self.out.stats)?;
        if let Some(series) = &mut self.out.resident {
            series.write()?;
        }
        // As the original: a copy of the mappings live now, not a line per event.
        self.out.procmaps.clear();
        for mapping in self.maps.values() {
            write_procmaps_line(mapping, &mut self.out.procmaps);
        }
        let procmaps = files::procmaps(
            self.out.stats_path.parent().unwrap_or(Path::new(".")),
            self.pid,
        );
        write_file(&procmaps, &self.out.procmaps)
    }

    /// Makes what was recorded readable should the recorder die: the mappings and stacks so
    /// far, then the faults that settle now (those pushed before the previous checkpoint:
    /// no late record can amend them any more), in that order so that every fault readable
    /// has its stack and mappings readable too.
    pub fn checkpoint(&mut self) -> Result<(), fltrace_trace::Error> {
        self.store_thread_names();
        self.out.mmaps.checkpoint()?;
        self.out.stacks.checkpoint()?;
        self.out.faults.checkpoint()
    }

    /// Writes the footers. The process must not be used afterwards.
    pub fn finish(mut self) -> Result<(), fltrace_trace::Error> {
        self.store_thread_names();
        if let Some(far) = self.far {
            // The process is gone and its counters written out: its page goes, also one never
            // opened (an image that exec replaced without a runtime of its own).
            match far.view {
                Some(view) => view.remove(),
                // Unless the page there is a later process's that got the pid.
                None => {
                    if let Some(view) =
                        RuntimeView::open(&far.prefix, self.os_pid, 0, far.made_before)
                    {
                        view.remove();
                    }
                }
            }
        }
        if let Some(series) = &mut self.out.resident {
            series.write()?;
        }
        self.out.faults.finish()?;
        self.out.stacks.finish()?;
        self.out.mmaps.finish()
    }
}

/// How far below its lowest recorded address the main thread's stack may have grown (the
/// kernel's default `RLIMIT_STACK` is 8 MiB; a larger limit is rare).
const STACK_GROWTH: u64 = 64 << 20;

/// The bytes of entry code after an ELF entry point that a return address of a complete stack
/// may point into: the dynamic loader's `_start` and `_dl_start_user` (61 bytes in glibc 2.41,
/// which call `_dl_start` and `_dl_init`) and crt1's `_start` (38 bytes, which calls
/// `__libc_start_main`).
const ENTRY_CODE: u64 = 64;

/// Whether a stack reaches its thread's entry. It does when the unwinder found no caller
/// beyond the outermost frame (the CFI of glibc's `_start` and of the `clone`/`clone3` child
/// marks the return address undefined, and a zero return address ends a frame-pointer chain),
/// or when the outermost frame is in an ELF entry's code (the loader's `_start` has no such
/// mark: the unwinder goes on into argc, which the caller cut). Any other end is a truncation:
/// the stack copy ran out, an unwind rule failed mid-stack, a word was no return address, or
/// the frame limit ([`crate::unwind::MAX_FRAMES`]) was reached.
fn classify(unwound: UnwindEnd, cut: bool, frames: &[u64], entries: &[u64]) -> StackEnd {
    let in_entry = frames.last().is_some_and(|&outermost| {
        entries
            .iter()
            .any(|&entry| (entry..entry + ENTRY_CODE).contains(&outermost))
    });
    let ended = unwound == UnwindEnd::Complete && !cut;
    if in_entry || ended {
        StackEnd::Complete
    } else {
        StackEnd::Truncated
    }
}

fn write_file(path: &Path, text: &str) -> Result<(), fltrace_trace::Error> {
    use std::io::Write;
    let mut file = files::create(path)?;
    file.write_all(text.as_bytes())
        .map_err(|source| fltrace_trace::Error::Io {
            path: path.to_owned(),
            source,
        })
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
mod tests {
    use super::*;

    fn process(dir: &Path) -> Process {
        let session = RecordingContext {
            dir: dir.to_owned(),
            read_live_stacks: false,
            far_memory: None,
            metadata: Vec::new(),
            collect_code_hits: false,
            live: false,
            mono_offset: 0,
            far_backlog: 0,
            resident_series: false,
        };
        Process::filed_as(1, 1, None, &session).expect("process files")
    }

    /// A process whose end the records never said: once its main thread ended, it waits for
    /// the threads /proc lists (a lost exit record's thread dropped, a thread whose fork was
    /// not read kept) and is gone when none is; before that, only when its pid is gone.
    /// Before, a lost thread-exit record kept it open to the end of the recording.
    #[test]
    fn process_whose_thread_exits_were_lost_ends_when_proc_lists_none() {
        let dir = tempfile::tempdir().expect("tempdir");
        let proc_root = dir.path().join("proc");
        let task = proc_root.join("1/task");
        for tid in ["1", "6", "9"] {
            std::fs::create_dir_all(task.join(tid)).expect("task dir");
        }
        let mut waiting = process(dir.path());
        waiting.thread_started(5);
        waiting.thread_started(6);
        assert!(!waiting.vanished(&proc_root), "its pid is there");
        // The main thread's end read; thread 5's lost; thread 9's fork not read yet.
        assert!(!waiting.thread_exited(1));
        assert!(!waiting.vanished(&proc_root));
        let mut waits: Vec<u32> = waiting.live_threads.iter().copied().collect();
        waits.sort_unstable();
        assert_eq!(waits, [6, 9]);
        for tid in ["6", "9"] {
            std::fs::remove_dir(task.join(tid)).expect("task dir goes");
        }
        assert!(
            waiting.vanished(&proc_root),
            "only the zombie main thread is left"
        );
        // Its main thread's end lost too: gone once its pid is.
        let mut other = process(dir.path());
        std::fs::create_dir_all(proc_root.join("1")).expect("pid dir");
        assert!(!other.vanished(&proc_root));
        std::fs::remove_dir_all(proc_root.join("1")).expect("pid dir goes");
        assert!(other.vanished(&proc_root));
    }

    /// A process made later (a forked child) converts its rows' times back to the samples'
    /// CLOCK_MONOTONIC with the recorder's offset, not with one of its own: two clock reads
    /// a preemption apart on a busy machine put its rows after the runtime entries they
    /// belong to (the save child's `rt_unmatched:1`).
    #[test]
    fn far_memory_rows_use_the_recorders_clock_offset() {
        let dir = tempfile::tempdir().expect("tempdir");
        let prefix = dir.path().join("runtime");
        let session = RecordingContext {
            dir: dir.path().to_owned(),
            read_live_stacks: false,
            far_memory: Some(prefix),
            metadata: Vec::new(),
            collect_code_hits: false,
            live: false,
            mono_offset: 1_234_567,
            far_backlog: 0,
            resident_series: false,
        };
        let parent = Process::filed_as(1, 1, None, &session).expect("process files");
        std::thread::sleep(std::time::Duration::from_millis(2));
        let child = Process::fork_of(&parent, 2, 2, &session).expect("process files");
        for p in [&parent, &child] {
            assert_eq!(p.far.as_ref().map(|f| f.mono_offset), Some(1_234_567));
        }
    }

    fn anon(start: u64, end: u64) -> Mapping {
        Mapping {
            start: VirtAddr::new(start),
            end: VirtAddr::new(end),
            pgoff: fltrace_trace::FileOffset::new(start),
            prot: 3,
            flags: 2,
            path: "//anon".to_owned(),
            ..Mapping::default()
        }
    }

    fn range(p: &Process, addr: u64) -> Option<(u64, u64, u64)> {
        p.mapping_at(VirtAddr::new(addr))
            .map(|m| (m.start.get(), m.end.get(), m.pgoff.get()))
    }

    /// Complete: the unwinder found no caller, or the outermost frame is in an entry's code
    /// (the loader's `_start` followed by argc, which was cut). Everything else is truncated.
    #[test]
    fn stacks_are_complete_at_a_thread_entry_only() {
        let loader_entry = 0x7f00_0001_ab70;
        let entries = [0x5555_0000_1040, loader_entry];
        let inner = [0x5555_0000_1200, 0x5555_0000_1300];
        let at_loader = [0x7f00_0001_c000, loader_entry + 8];
        use StackEnd::{Complete, Truncated};
        assert_eq!(
            classify(UnwindEnd::Complete, false, &inner, &entries),
            Complete
        );
        assert_eq!(
            classify(UnwindEnd::Stopped, true, &at_loader, &entries),
            Complete
        );
        assert_eq!(
            classify(UnwindEnd::Complete, true, &at_loader, &entries),
            Complete
        );
        // Cut at a word that is no return address, away from an entry.
        assert_eq!(
            classify(UnwindEnd::Complete, true, &inner, &entries),
            Truncated
        );
        assert_eq!(
            classify(UnwindEnd::Stopped, false, &inner, &entries),
            Truncated
        );
        assert_eq!(
            classify(UnwindEnd::Truncated, false, &inner, &entries),
            Truncated
        );
        // Just past the entry code is another function.
        let past = [0x7f00_0001_c000, loader_entry + ENTRY_CODE];
        assert_eq!(
            classify(UnwindEnd::Stopped, false, &past, &entries),
            Truncated
        );
    }

    fn sample(time_ns: u64, tid: u32, addr: u64) -> FaultSample<'static> {
        FaultSample {
            time_ns,
            tid,
            addr: VirtAddr::new(addr),
            // A write to a missing page, from user mode.
            error_code: 2 | 4,
            regs: (0x40_1000, 0x7fff_0000, 0),
            rbx: None,
            stack: StackBytes::default(),
        }
    }

    /// The kernel's faults in execve, before the new image's first instruction, carry the old
    /// image's registers: they are the entry's, complete. Once the image ran, a kernel fault
    /// at an address outside its code is unwound as any other.
    #[test]
    fn faults_in_execve_are_the_entrys() {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut p = process(dir.path());
        p.exec(0);
        let entry = 0x7f00_0001_ab70;
        p.entries.push(entry);
        let mut frames = Vec::new();
        let in_kernel = FaultSample {
            error_code: 2,
            regs: (0x7f99_0000_0ad7, 0x7fff_0000, 0),
            ..sample(1, 1, 0x10_0010)
        };
        p.fault(&in_kernel, &mut frames).expect("recorded");
        assert_eq!(frames, [entry]);
        assert_eq!(p.counters.stacks_truncated, 0);
        p.fault(&sample(2, 1, 0x10_1010), &mut frames)
            .expect("recorded");
        p.fault(&in_kernel, &mut frames).expect("recorded");
        assert_eq!(frames.first(), Some(&0x7f99_0000_0ad7));
        p.finish().expect("finished");
        // Each row's instruction is its stack's first frame.
        let (rows, _) = fltrace_trace::read_faults(&files::faults(dir.path(), 1)).expect("read");
        let ips: Vec<u64> = rows.iter().map(|f| f.ip.get()).collect();
        assert_eq!(ips, [entry, 0x40_1000, 0x7f99_0000_0ad7]);
    }

    /// A major-fault event marks its thread's newest row on that page, complete in the table
    /// (a first touch no more); once that row settled (two checkpoints on), it marks nothing.
    #[test]
    fn a_major_fault_marks_the_open_row_of_its_thread_and_page() {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut p = process(dir.path());
        let mut frames = Vec::new();
        p.fault(&sample(1, 7, 0x10_0010), &mut frames)
            .expect("recorded");
        p.fault(&sample(2, 7, 0x10_0020), &mut frames)
            .expect("recorded");
        p.fault(&sample(3, 8, 0x10_0030), &mut frames)
            .expect("recorded");
        p.fault(&sample(4, 7, 0x20_0000), &mut frames)
            .expect("recorded");
        p.major(7, 0x10_0fff);
        p.checkpoint().expect("checkpoint");
        p.checkpoint().expect("checkpoint");
        // Row 3 settled with the second checkpoint: too late for it.
        p.major(7, 0x20_0000);
        assert_eq!(p.counters.faults_major, 1);
        p.finish().expect("finished");
        let (rows, _) = fltrace_trace::read_faults(&files::faults(dir.path(), 1)).expect("read");
        let flags: Vec<u16> = rows.iter().map(|f| f.flags.0).collect();
        let first_touch = FaultFlags::WRITE | FaultFlags::ZERO;
        assert_eq!(
            flags,
            [
                first_touch,
                FaultFlags::WRITE | FaultFlags::MAJOR,
                first_touch,
                first_touch
            ]
        );
        let times: Vec<(u64, u32, u32)> = rows.iter().map(|f| (f.time_ns, f.pid, f.tid)).collect();
        assert_eq!(times, [(1, 1, 7), (2, 1, 7), (3, 1, 8), (4, 1, 7)]);
    }

    #[test]
    fn mapping_over_or_unmapping_part_of_another_keeps_the_rest_as_the_kernel_does() {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut p = process(dir.path());
        let mut elf = ElfCache::default();
        p.map(anon(0x10_0000, 0x10_4000), &mut elf).expect("mapped");
        // MAP_FIXED over its second and third pages: two pieces stay, the right one with the
        // offset of its first page.
        p.map(anon(0x10_1000, 0x10_3000), &mut elf).expect("mapped");
        assert_eq!(
            range(&p, 0x10_0fff),
            Some((0x10_0000, 0x10_1000, 0x10_0000))
        );
        assert_eq!(
            range(&p, 0x10_2000),
            Some((0x10_1000, 0x10_3000, 0x10_1000))
        );
        assert_eq!(
            range(&p, 0x10_3000),
            Some((0x10_3000, 0x10_4000, 0x10_3000))
        );
        // The same page mapped again and again leaves one mapping, and `procmaps` lists the
        // live mappings once each, as the original's copy of /proc/PID/maps.
        for _ in 0..1000 {
            p.map(anon(0x20_0000, 0x20_1000), &mut elf).expect("mapped");
        }
        // Unmapping the middle piece and a page of the last leaves the rest.
        p.unmap(0x10_1000, 0x2000);
        p.unmap(0x20_0000, 0x1000);
        p.unmap(0x10_4000, 0);
        assert_eq!(range(&p, 0x10_1000), None);
        assert_eq!(range(&p, 0x20_0000), None);
        p.map(anon(0x20_0000, 0x20_1000), &mut elf).expect("mapped");
        p.write_stats(0, 0).expect("stats");
        let procmaps = std::fs::read_to_string(files::procmaps(dir.path(), 1)).expect("procmaps");
        assert_eq!(
            procmaps,
            "00100000-00101000 rw-p 00100000 00:00 0\n\
             00103000-00104000 rw-p 00103000 00:00 0\n\
             00200000-00201000 rw-p 00200000 00:00 0\n"
        );
    }

    #[test]
    fn remap_grows_in_place_moves_and_ignores_shrinks() {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut p = process(dir.path());
        let mut elf = ElfCache::default();
        p.map(anon(0x10_0000, 0x10_2000), &mut elf).expect("mapped");
        // Grown in place from its second page: the kernel extends the whole mapping.
        let grow = RemapCall {
            old_start: 0x10_1000,
            old_len: 0x1000,
            new_len: 0x2800,
        };
        p.remap(&grow, 0x10_1000, 5, &mut elf).expect("mapped");
        assert_eq!(
            range(&p, 0x10_3fff),
            Some((0x10_0000, 0x10_4000, 0x10_0000))
        );
        // Moved from its second page: a mapping of its own, with that page's file offset.
        let moved = RemapCall {
            old_start: 0x10_1000,
            old_len: 0x1000,
            new_len: 0x3000,
        };
        p.remap(&moved, 0x50_0000, 6, &mut elf).expect("mapped");
        assert_eq!(
            range(&p, 0x50_2fff),
            Some((0x50_0000, 0x50_3000, 0x10_1000))
        );
        // A shrink in place and a call on memory the model does not know add nothing.
        let shrink = RemapCall {
            old_start: 0x50_0000,
            old_len: 0x3000,
            new_len: 0x1000,
        };
        p.remap(&shrink, 0x50_0000, 7, &mut elf).expect("mapped");
        let unknown = RemapCall {
            old_start: 0x90_0000,
            ..moved
        };
        p.remap(&unknown, 0xa0_0000, 8, &mut elf).expect("mapped");
        assert_eq!(
            range(&p, 0x50_2fff),
            Some((0x50_0000, 0x50_3000, 0x10_1000))
        );
        assert_eq!(range(&p, 0xa0_0000), None);
    }
}
