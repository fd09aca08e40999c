//! `fltrace top`: what a running recording's batches ([`fltrace_trace::live`]) add up to,
//! interval by interval: faults per second and in all by call site (the rule of `report`),
//! process, thread and library, with the recorder's lost and truncated counts and, under
//! far-memory emulation, local and far memory, evictions and fetches.
//!
//! Under `--allocs`, each process's allocation calls, as the recorder converts them
//! ([`fltrace_trace::live::LiveAllocs`]), go through the pass `report --allocs` makes
//! ([`AllocPass`]): allocations per second and in all, and the bytes alive now, by the
//! allocating call site (the rule of `report --allocs`); at the end of the recording the
//! bytes alive are the report's leaks.
//!
//! Each fault costs a count on its stack and one on its thread; stacks are symbolized once,
//! when the interval that first saw them ends ([`LiveTop::tick`]), through the same
//! [`Symbolizer`] and frame rules as reports, so a new site is named within the interval
//! that saw it and its totals are those `report` gives of the recording afterwards.

use std::sync::Arc;
use std::time::{Duration, Instant};

use rustc_hash::{FxHashMap, FxHashSet};

use fltrace_trace::live::{LiveAllocs, LiveBatch, LiveDropped, LiveEvent, LiveFault, LiveTotals};
use fltrace_trace::{FaultFlags, ProcessTrace};

use crate::alloc_lifetimes::LiveStackFigures;
use crate::{
    AllocPass, CallSite, DebugConfig, FaultCounts, FrameRules, Group, GroupKey, Location, Skipped,
    Symbolizer, apply_rules,
};

/// How a live view picks call sites and finds debug files.
#[derive(Debug, Clone)]
pub struct TopOptions {
    /// Which frame a fault counts for.
    pub call_site: CallSite,
    /// The frames that are never call sites (the built-in and configured allocators).
    pub frame_rules: FrameRules,
    /// Whether fltrace's own faults in the traced processes count (as `--include-tracer`).
    pub include_tracer: bool,
    /// Where debug files are found.
    pub debug: DebugConfig,
    /// Whether allocations are traced (`--allocs`): the headline and a view of their own
    /// show them from the start.
    pub allocs: bool,
}

/// Faults counted as a report counts them: how many, of which kinds and types.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Counts {
    /// Faults.
    pub count: u64,
    /// Reads, writes, write-protect faults.
    pub kinds: [u64; 3],
    /// First touches.
    pub zero: u64,
    /// Fetches from far memory.
    pub fetch: u64,
    /// Accesses the mappings did not allow (the program got SIGSEGV or SIGBUS).
    pub invalid: u64,
}

impl Counts {
    fn add(&mut self, flags: FaultFlags) {
        self.count += 1;
        self.kinds[flags.kind() as usize] += 1;
        self.zero += u64::from(flags.has(FaultFlags::ZERO));
        self.fetch += u64::from(flags.has(FaultFlags::FETCH));
        self.invalid += u64::from(flags.has(FaultFlags::INVALID));
    }

    /// Takes back one fault of `flags` (a row changed since it was counted).
    fn remove(&mut self, flags: FaultFlags) {
        let kind = &mut self.kinds[flags.kind() as usize];
        *kind = kind.saturating_sub(1);
        self.count = self.count.saturating_sub(1);
        if flags.has(FaultFlags::ZERO) {
            self.zero = self.zero.saturating_sub(1);
        }
        if flags.has(FaultFlags::FETCH) {
            self.fetch = self.fetch.saturating_sub(1);
        }
        if flags.has(FaultFlags::INVALID) {
            self.invalid = self.invalid.saturating_sub(1);
        }
    }

    fn merge(&mut self, other: &Counts) {
        self.count += other.count;
        for (mine, theirs) in self.kinds.iter_mut().zip(other.kinds) {
            *mine += theirs;
        }
        self.zero += other.zero;
        self.fetch += other.fetch;
        self.invalid += other.invalid;
    }

    /// As a report's group, for its kind and type names.
    fn group(&self) -> Group {
        Group {
            key: GroupKey {
                location: Location {
                    function: "".into(),
                    file: "".into(),
                    line: 0,
                    lib: "".into(),
                    system: false,
                },
                stack: None,
                addresses: None,
                flags: None,
            },
            count: self.count,
            kinds: self.kinds,
            zero: self.zero,
            fetch: self.fetch,
            invalid: self.invalid,
            // Top counts no stacks per row; its headline says the truncated ones.
            truncated: 0,
        }
    }

    /// `read`, `write`, `wrprotect` or `mixed`, as `report` names them (`-` for none).
    pub fn kind_name(&self) -> &'static str {
        if self.count == 0 {
            "-"
        } else {
            self.group().kind_name()
        }
    }

    /// `zero`, `fetch`, `regular` or `mixed`, as `report` names them (`-` for none).
    pub fn type_name(&self) -> &'static str {
        if self.count == 0 {
            "-"
        } else {
            self.group().type_name()
        }
    }
}

/// One stack's faults: in all, and in the interval (which changes can take below zero).
#[derive(Debug, Clone, Default)]
struct StackTally {
    counts: Counts,
    interval: i64,
    /// Its call site, once symbolized.
    site: Option<u32>,
}

/// One thread's faults.
#[derive(Debug, Clone, Default)]
struct ThreadTally {
    counts: Counts,
    interval: i64,
    rate: f64,
}

/// The far-memory runtime's figures of one process, from its statistics lines.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FarFigures {
    /// Bytes of the managed region resident (`memory_local`).
    pub local_bytes: u64,
    /// Bytes evicted and held in the backing store (`memory_far`).
    pub far_bytes: u64,
    /// Pages evicted so far (`evict_pages_done`).
    pub evictions: u64,
    /// Evicted pages fetched back so far (`faults_fetch`).
    pub fetches: u64,
}

impl FarFigures {
    /// The figures of a statistics line, if it has the runtime's.
    fn of(counters: &[(&'static str, u64)]) -> Option<FarFigures> {
        let get = |name| counters.iter().find(|(n, _)| *n == name).map(|(_, v)| *v);
        Some(FarFigures {
            local_bytes: get("memory_local")?,
            far_bytes: get("memory_far")?,
            evictions: get("evict_pages_done")?,
            fetches: get("faults_fetch")?,
        })
    }

    fn add(&mut self, other: &FarFigures) {
        self.local_bytes += other.local_bytes;
        self.far_bytes += other.far_bytes;
        self.evictions += other.evictions;
        self.fetches += other.fetches;
    }
}

/// One traced process as the view knows it.
struct LiveProcess {
    /// The kernel's pid (its main thread's tid).
    os_pid: u32,
    /// Its code mappings, and the stacks not yet symbolized.
    trace: ProcessTrace,
    stacks: FxHashMap<u32, StackTally>,
    threads: FxHashMap<u32, ThreadTally>,
    names: FxHashMap<u32, String>,
    /// The site of each stack's first frames named so far (see [`LiveTop::symbolize`]).
    prefix_sites: FxHashMap<Box<[u64]>, u32>,
    /// Its last statistics line's far-memory figures, and those of the last interval's end.
    far: Option<FarFigures>,
    far_before: Option<FarFigures>,
    /// When its files were finished (the interval count it ended in).
    ended: Option<u64>,
    counts: Counts,
    interval: i64,
    rate: f64,
    /// Its allocation calls, once one came (its stacks not yet named are in
    /// `trace.alloc_stacks`).
    allocs: Option<ProcessAllocs>,
}

/// One process's allocation calls as far as they came.
#[derive(Default)]
struct ProcessAllocs {
    pass: AllocPass,
    /// The call site of each allocation stack named so far.
    sites: FxHashMap<u32, u32>,
    /// Records the tracer dropped, as the logs say.
    dropped: u64,
    /// Calls that came out of time order: the pass takes none after the first.
    unpaired: u64,
}

impl ProcessAllocs {
    /// Takes the calls and execs of `allocs`.
    fn take(&mut self, allocs: &LiveAllocs) {
        self.dropped = allocs.dropped;
        let mut execs = allocs.execs.iter().peekable();
        for (i, event) in allocs.events.iter().enumerate() {
            while let Some(&&(_, time)) = execs.peek().filter(|(at, _)| *at <= i) {
                self.pass.exec_at(time);
                execs.next();
            }
            if self.unpaired > 0 || self.pass.event(event).is_err() {
                self.unpaired += 1;
            }
        }
        for &(_, time) in execs {
            self.pass.exec_at(time);
        }
    }
}

impl LiveProcess {
    fn new(pid: u32) -> LiveProcess {
        LiveProcess {
            os_pid: fltrace_trace::files::reused_pid(pid).0,
            trace: ProcessTrace {
                pid,
                faults: Vec::new(),
                stacks: Vec::new(),
                mappings: Vec::new(),
                metadata: Vec::new(),
                allocs: Vec::new(),
                alloc_stacks: Vec::new(),
            },
            stacks: FxHashMap::default(),
            threads: FxHashMap::default(),
            names: FxHashMap::default(),
            prefix_sites: FxHashMap::default(),
            far: None,
            far_before: None,
            ended: None,
            counts: Counts::default(),
            interval: 0,
            rate: 0.0,
            allocs: None,
        }
    }

    /// Its name: its main thread's, else any thread's, else `[pid]`.
    fn name(&self) -> String {
        self.names
            .get(&self.os_pid)
            .or_else(|| self.names.values().next())
            .cloned()
            .unwrap_or_else(|| format!("[{}]", self.os_pid))
    }
}

/// A call site's faults.
#[derive(Debug, Clone)]
struct SiteTally {
    location: Location,
    counts: Counts,
    interval: i64,
}

/// An allocating call site: what its stacks allocated and hold, summed at each interval's
/// end, and its allocations at the one before.
#[derive(Debug, Clone)]
struct AllocSiteTally {
    location: Location,
    figures: LiveStackFigures,
    allocs_before: u64,
}

/// The allocations of an interval, for the headline.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct AllocHeadline {
    /// Allocations made in the interval, per second.
    pub allocs_per_s: f64,
    /// Allocations made in all (by the processes alive or not).
    pub allocs: u64,
    /// Bytes of the blocks alive now (heap and mappings), and the blocks.
    pub live_bytes: u64,
    /// Blocks alive now.
    pub live_allocs: u64,
    /// Records the tracer dropped (a full log): calls not counted.
    pub dropped: u64,
    /// Calls that came out of time order and were not paired (none expected: the
    /// conversion orders them).
    pub unpaired: u64,
}

/// Which rows a view shows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum TopView {
    /// Call sites (the rule of `report`), `function file:line lib`.
    #[default]
    Sites,
    /// Allocating call sites (the rule of `report --allocs`), under `--allocs`.
    Allocations,
    /// Processes.
    Processes,
    /// Threads.
    Threads,
    /// Libraries (of the call sites, as `report --by dso`).
    Libraries,
}

impl TopView {
    /// The next view, in the order `v` cycles them; `allocs`: allocations are traced (else
    /// their view is left out).
    pub fn next(self, allocs: bool) -> TopView {
        match self {
            TopView::Sites if allocs => TopView::Allocations,
            TopView::Sites | TopView::Allocations => TopView::Processes,
            TopView::Processes => TopView::Threads,
            TopView::Threads => TopView::Libraries,
            TopView::Libraries => TopView::Sites,
        }
    }

    /// Its name, as the view's title says it.
    pub fn name(self) -> &'static str {
        match self {
            TopView::Sites => "call sites",
            TopView::Allocations => "allocation sites",
            TopView::Processes => "processes",
            TopView::Threads => "threads",
            TopView::Libraries => "libraries",
        }
    }
}

/// How rows are ordered.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum TopSort {
    /// Faults per second in the interval, highest first (then total).
    #[default]
    Rate,
    /// Faults in all, most first.
    Total,
    /// By name.
    Name,
}

impl TopSort {
    /// The next order, as `s` cycles them.
    pub fn next(self) -> TopSort {
        match self {
            TopSort::Rate => TopSort::Total,
            TopSort::Total => TopSort::Name,
            TopSort::Name => TopSort::Rate,
        }
    }

    /// Its name, as the view's title says it.
    pub fn name(self) -> &'static str {
        match self {
            TopSort::Rate => "rate",
            TopSort::Total => "total",
            TopSort::Name => "name",
        }
    }

    /// Its name in `view`: allocation sites sort by the bytes they hold for `total`.
    pub fn name_in(self, view: TopView) -> &'static str {
        match (self, view) {
            (TopSort::Total, TopView::Allocations) => "live bytes",
            _ => self.name(),
        }
    }
}

/// One row of a view.
#[derive(Debug, Clone, PartialEq)]
pub struct TopRow {
    /// Faults per second over the interval.
    pub rate: f64,
    /// The faults counted in all.
    pub counts: Counts,
    /// The function (sites), the process's or thread's name, or the library.
    pub name: Arc<str>,
    /// `file:line` (sites, `??` unknown), the pid (processes), `tid (pid)` (threads).
    pub place: String,
    /// The library of a site; empty for the other views.
    pub lib: Arc<str>,
    /// An allocation site's allocations and what it holds (`rate` is allocations per
    /// second then, and `counts` empty).
    pub alloc: Option<LiveStackFigures>,
}

impl TopRow {
    /// What `total` sorts by: faults, or the bytes an allocation site holds.
    pub fn total(&self) -> u64 {
        self.alloc.map_or(self.counts.count, |a| a.live_bytes)
    }
}

/// What one interval shows.
#[derive(Debug, Clone, Default)]
pub struct TopSnapshot {
    /// The interval's number, from 1.
    pub number: u64,
    /// Since the first batch.
    pub elapsed: Duration,
    /// The interval's length.
    pub interval: Duration,
    /// Faults counted in the interval, per second.
    pub faults_per_s: f64,
    /// Faults counted in all (the program's: fltrace's own in the traced processes apart).
    pub faults: u64,
    /// fltrace's own faults in the traced processes, left out of the rows.
    pub tracer_faults: u64,
    /// The recorder's totals (faults recorded, lost, truncated stacks).
    pub recorded: LiveTotals,
    /// Fault rows and allocation calls the view fell too far behind to be given (the
    /// recording has them): the view's counts are short by as many.
    pub view_dropped: LiveDropped,
    /// Processes that left faults or are running, and those of them still running.
    pub processes: usize,
    /// Processes still running.
    pub running: usize,
    /// Threads that faulted.
    pub threads: usize,
    /// Under far-memory emulation: the runtime's figures summed over the running processes
    /// and those that ended in this interval, as their statistics lines last said them.
    pub far: Option<FarFigures>,
    /// Evictions and fetches per second over the interval.
    pub evictions_per_s: f64,
    /// Fetches per second over the interval.
    pub fetches_per_s: f64,
    /// The traced processes are gone and every batch is in: the last snapshot.
    pub finished: bool,
    /// Under `--allocs`: allocations, for the headline.
    pub allocs: Option<AllocHeadline>,
    /// Allocation sites.
    pub alloc_sites: Vec<TopRow>,
    /// Rows of each view, unsorted.
    pub sites: Vec<TopRow>,
    /// Processes.
    pub process_rows: Vec<TopRow>,
    /// Threads.
    pub thread_rows: Vec<TopRow>,
    /// Libraries.
    pub libraries: Vec<TopRow>,
}

impl TopSnapshot {
    /// The rows of `view` in `sort`'s order, those whose name contains `filter` (ignoring
    /// case) only, when one is given.
    pub fn rows(&self, view: TopView, sort: TopSort, filter: &str) -> Vec<&TopRow> {
        let rows = match view {
            TopView::Sites => &self.sites,
            TopView::Allocations => &self.alloc_sites,
            TopView::Processes => &self.process_rows,
            TopView::Threads => &self.thread_rows,
            TopView::Libraries => &self.libraries,
        };
        let filter = filter.to_lowercase();
        let mut shown: Vec<&TopRow> = rows
            .iter()
            .filter(|r| filter.is_empty() || r.name.to_lowercase().contains(&filter))
            .collect();
        let by_name = |a: &&TopRow, b: &&TopRow| {
            a.name
                .cmp(&b.name)
                .then_with(|| a.place.cmp(&b.place))
                .then_with(|| a.lib.cmp(&b.lib))
        };
        match sort {
            TopSort::Rate => shown.sort_by(|a, b| {
                b.rate
                    .total_cmp(&a.rate)
                    .then_with(|| b.total().cmp(&a.total()))
                    .then_with(|| by_name(a, b))
            }),
            TopSort::Total => shown.sort_by(|a, b| {
                b.total()
                    .cmp(&a.total())
                    .then_with(|| b.rate.total_cmp(&a.rate))
                    .then_with(|| by_name(a, b))
            }),
            TopSort::Name => shown.sort_by(by_name),
        }
        shown
    }
}

/// The faults of a running recording, counted as its batches come and summed up interval by
/// interval.
pub struct LiveTop {
    options: TopOptions,
    symbolizer: Symbolizer,
    processes: FxHashMap<u32, LiveProcess>,
    sites: Vec<SiteTally>,
    site_ids: FxHashMap<Location, u32>,
    alloc_sites: Vec<AllocSiteTally>,
    alloc_site_ids: FxHashMap<Location, u32>,
    /// The recorder's totals, as the last batch said them.
    recorded: LiveTotals,
    /// What the channel dropped because the view fell behind, as the last batch said it.
    view_dropped: LiveDropped,
    tracer_faults: u64,
    faults: u64,
    interval_faults: i64,
    started: Option<Instant>,
    last_tick: Option<Instant>,
    /// When the batch saying the traced processes are gone came.
    ended_at: Option<Instant>,
    ticks: u64,
    /// Warnings of the symbolizer not yet taken.
    warnings: Vec<String>,
    /// The frames skipped as call sites so far.
    skipped: Skipped,
    /// What naming stacks cost, for `-vv`.
    naming: Naming,
}

/// What naming fault stacks took so far.
#[derive(Debug, Default)]
struct Naming {
    time: Duration,
    /// The view thread's CPU time in it.
    cpu: Duration,
    stacks: u64,
    cached: u64,
    cut: u64,
    whole: u64,
}

impl LiveTop {
    /// Nothing counted yet.
    pub fn new(options: TopOptions) -> LiveTop {
        LiveTop {
            symbolizer: Symbolizer::with_debug_config(options.debug.clone()),
            options,
            processes: FxHashMap::default(),
            sites: Vec::new(),
            site_ids: FxHashMap::default(),
            alloc_sites: Vec::new(),
            alloc_site_ids: FxHashMap::default(),
            recorded: LiveTotals::default(),
            view_dropped: LiveDropped::default(),
            tracer_faults: 0,
            faults: 0,
            interval_faults: 0,
            started: None,
            last_tick: None,
            ended_at: None,
            ticks: 0,
            warnings: Vec::new(),
            skipped: Skipped::default(),
            naming: Naming::default(),
        }
    }

    /// Whether the batch saying that the traced processes are gone has come.
    pub fn ended(&self) -> bool {
        self.ended_at.is_some()
    }

    /// Counts what `batch` holds, received `now`.
    pub fn apply(&mut self, batch: LiveBatch, now: Instant) {
        self.started.get_or_insert(now);
        self.last_tick.get_or_insert(now);
        // Events first: a stack defined in a batch comes before the rows of it that follow,
        // and nothing but symbolizing needs them in order.
        for event in batch.events {
            self.event(event);
        }
        self.faults_of(&batch.faults);
        for allocs in &batch.allocs {
            self.allocs_of(allocs);
        }
        if let Some(totals) = batch.totals {
            self.recorded = totals;
        }
        self.view_dropped = batch.view_dropped;
        if batch.ended && self.ended_at.is_none() {
            self.ended_at = Some(now);
        }
    }

    fn process(&mut self, pid: u32) -> &mut LiveProcess {
        self.processes
            .entry(pid)
            .or_insert_with(|| LiveProcess::new(pid))
    }

    fn event(&mut self, event: LiveEvent) {
        match event {
            LiveEvent::Mapped { pid, mapping } => self.process(pid).trace.mappings.push(mapping),
            LiveEvent::Stack { pid, stack } => self.process(pid).trace.stacks.push(stack),
            LiveEvent::ThreadNamed {
                pid,
                os_pid,
                tid,
                name,
            } => {
                let process = self.process(pid);
                process.os_pid = os_pid;
                process.names.insert(tid, name);
            }
            LiveEvent::Stats { pid, counters } | LiveEvent::Runtime { pid, counters } => {
                if let Some(far) = FarFigures::of(&counters) {
                    self.process(pid).far = Some(far);
                }
            }
            LiveEvent::Ended { pid } => {
                let tick = self.ticks;
                self.process(pid).ended.get_or_insert(tick);
            }
        }
    }

    /// Takes a process's allocation calls: a restart forgets what came before.
    fn allocs_of(&mut self, allocs: &LiveAllocs) {
        let process = self.process(allocs.pid);
        if allocs.restart {
            process.allocs = None;
            process.trace.alloc_stacks.clear();
        }
        process
            .trace
            .alloc_stacks
            .extend(allocs.stacks.iter().cloned());
        process
            .allocs
            .get_or_insert_with(ProcessAllocs::default)
            .take(allocs);
    }

    /// The hot path: a count per fault on its stack, its thread and its process (looked up
    /// once per run of faults of one process).
    fn faults_of(&mut self, faults: &[LiveFault]) {
        let include_tracer = self.options.include_tracer;
        for run in faults.chunk_by(|a, b| a.pid == b.pid) {
            let process = self
                .processes
                .entry(run[0].pid)
                .or_insert_with(|| LiveProcess::new(run[0].pid));
            for fault in run {
                let step: i64 = if fault.undo { -1 } else { 1 };
                if !include_tracer && fault.flags.has(FaultFlags::TRACER) {
                    self.tracer_faults = self.tracer_faults.saturating_add_signed(step);
                    continue;
                }
                let stack = process.stacks.entry(fault.stack_id).or_default();
                let thread = process.threads.entry(fault.tid).or_default();
                for (counts, interval) in [
                    (&mut stack.counts, &mut stack.interval),
                    (&mut thread.counts, &mut thread.interval),
                    (&mut process.counts, &mut process.interval),
                ] {
                    if fault.undo {
                        counts.remove(fault.flags);
                    } else {
                        counts.add(fault.flags);
                    }
                    *interval += step;
                }
                self.faults = self.faults.saturating_add_signed(step);
                self.interval_faults += step;
            }
        }
    }

    /// Ends the interval at `now` (at the traced processes' end for the last one, when they
    /// are gone: `finished` says every batch is in): names the stacks it saw first and sums
    /// the counts up.
    pub fn tick(&mut self, now: Instant, finished: bool) -> TopSnapshot {
        let start = self.last_tick.unwrap_or(now);
        let end = match self.ended_at {
            Some(ended) if finished => ended.max(start),
            _ => now,
        };
        self.last_tick = Some(now);
        self.ticks += 1;
        let seconds = end.duration_since(start).as_secs_f64();
        let per_s = |n: i64| {
            if seconds > 0.0 {
                n.max(0) as f64 / seconds
            } else {
                0.0
            }
        };
        let naming = Instant::now();
        let cpu = thread_cpu();
        self.symbolize();
        self.naming.time += naming.elapsed();
        self.naming.cpu += thread_cpu().saturating_sub(cpu);
        if finished {
            log::debug!(
                "top: naming took {:.3} s ({:.3} s of CPU): {} new fault stacks, {} of them named by their first frames from the cache, {} symbolized cut to them, {} whole",
                self.naming.time.as_secs_f64(),
                self.naming.cpu.as_secs_f64(),
                self.naming.stacks,
                self.naming.cached,
                self.naming.cut,
                self.naming.whole,
            );
        }

        for site in &mut self.sites {
            site.counts = Counts::default();
            site.interval = 0;
        }
        let mut far: Option<FarFigures> = None;
        let (mut evictions, mut fetches) = (0i64, 0i64);
        let mut thread_rows = Vec::new();
        let mut process_rows = Vec::new();
        let mut running = 0;
        let tick = self.ticks;
        for (&pid, process) in &mut self.processes {
            for stack in process.stacks.values_mut() {
                if let Some(site) = stack.site.and_then(|s| self.sites.get_mut(s as usize)) {
                    site.counts.merge(&stack.counts);
                    site.interval += stack.interval;
                }
                stack.interval = 0;
            }
            let name = process.name();
            for (&tid, thread) in &mut process.threads {
                thread.rate = per_s(thread.interval);
                thread.interval = 0;
                thread_rows.push(TopRow {
                    rate: thread.rate,
                    counts: thread.counts,
                    name: process
                        .names
                        .get(&tid)
                        .map_or_else(|| name.clone(), Clone::clone)
                        .into(),
                    place: format!("{tid} ({})", process.os_pid),
                    lib: "".into(),
                    alloc: None,
                });
            }
            process.rate = per_s(process.interval);
            process.interval = 0;
            // Ended before this interval: its memory is gone and no longer counts.
            let current = process.ended.is_none_or(|t| t + 1 >= tick);
            running += usize::from(process.ended.is_none());
            if let Some(figures) = process.far.filter(|_| current) {
                far.get_or_insert_with(FarFigures::default).add(&figures);
                let before = process.far_before.unwrap_or_default();
                evictions += figures.evictions as i64 - before.evictions as i64;
                fetches += figures.fetches as i64 - before.fetches as i64;
            }
            process.far_before = process.far;
            if process.counts.count > 0 || process.ended.is_none() {
                process_rows.push(TopRow {
                    rate: process.rate,
                    counts: process.counts,
                    name: name.into(),
                    place: if process.os_pid == pid {
                        pid.to_string()
                    } else {
                        format!(
                            "{} (#{})",
                            process.os_pid,
                            fltrace_trace::files::reused_pid(pid).1
                        )
                    },
                    lib: "".into(),
                    alloc: None,
                });
            }
        }
        let mut libraries: FxHashMap<Arc<str>, (Counts, i64)> = FxHashMap::default();
        let mut sites = Vec::new();
        for site in self
            .sites
            .iter()
            .filter(|s| s.counts.count > 0 || s.interval > 0)
        {
            let library = libraries.entry(site.location.lib.clone()).or_default();
            library.0.merge(&site.counts);
            library.1 += site.interval;
            sites.push(TopRow {
                rate: per_s(site.interval),
                counts: site.counts,
                name: site.location.function.clone(),
                place: site_place(&site.location),
                lib: site.location.lib.clone(),
                alloc: None,
            });
        }
        let libraries = libraries
            .into_iter()
            .map(|(lib, (counts, interval))| TopRow {
                rate: per_s(interval),
                counts,
                name: lib,
                place: String::new(),
                lib: "".into(),
                alloc: None,
            })
            .collect();
        let (allocs, alloc_sites) = self.alloc_rows(&per_s);
        let snapshot = TopSnapshot {
            number: self.ticks,
            elapsed: end.duration_since(self.started.unwrap_or(end)),
            interval: end.duration_since(start),
            faults_per_s: per_s(self.interval_faults),
            faults: self.faults,
            tracer_faults: self.tracer_faults,
            recorded: self.recorded,
            view_dropped: self.view_dropped,
            processes: self.processes.len(),
            running,
            threads: self.processes.values().map(|p| p.threads.len()).sum(),
            far,
            evictions_per_s: per_s(evictions),
            fetches_per_s: per_s(fetches),
            finished,
            allocs,
            alloc_sites,
            sites,
            process_rows,
            thread_rows,
            libraries,
        };
        self.interval_faults = 0;
        snapshot
    }

    /// The allocation sites' rows and the headline's figures, `per_s` turning the
    /// interval's allocations into a rate; `None` without `--allocs`.
    fn alloc_rows(&mut self, per_s: &dyn Fn(i64) -> f64) -> (Option<AllocHeadline>, Vec<TopRow>) {
        if !self.options.allocs && self.processes.values().all(|p| p.allocs.is_none()) {
            return (None, Vec::new());
        }
        let mut headline = AllocHeadline::default();
        for site in &mut self.alloc_sites {
            site.figures = LiveStackFigures::default();
        }
        for process in self.processes.values() {
            let Some(allocs) = &process.allocs else {
                continue;
            };
            headline.dropped += allocs.dropped;
            headline.unpaired += allocs.unpaired;
            for (stack_id, figures) in allocs.pass.stack_figures() {
                // A stack the table refused (or never defined) counts as `[unknown]`.
                let site = match allocs.sites.get(&stack_id) {
                    Some(&site) => site,
                    None => site_id(
                        &mut self.alloc_sites,
                        &mut self.alloc_site_ids,
                        unknown_site(),
                    ),
                };
                let total = &mut self.alloc_sites[site as usize].figures;
                total.allocs += figures.allocs;
                total.bytes = total.bytes.saturating_add(figures.bytes);
                total.live_bytes += figures.live_bytes;
                total.live_allocs += figures.live_allocs;
            }
        }
        let mut rows = Vec::new();
        let mut interval = 0i64;
        for site in &mut self.alloc_sites {
            let figures = site.figures;
            // Less than before when a conversion began anew: no allocations then.
            let made = figures.allocs.saturating_sub(site.allocs_before);
            site.allocs_before = figures.allocs;
            interval += made as i64;
            headline.allocs += figures.allocs;
            headline.live_bytes += figures.live_bytes;
            headline.live_allocs += figures.live_allocs;
            if figures.allocs == 0 && figures.live_allocs == 0 {
                continue;
            }
            rows.push(TopRow {
                rate: per_s(made as i64),
                counts: Counts::default(),
                name: site.location.function.clone(),
                place: site_place(&site.location),
                lib: site.location.lib.clone(),
                alloc: Some(figures),
            });
        }
        headline.allocs_per_s = per_s(interval);
        (Some(headline), rows)
    }

    /// Names the stacks seen since the last call, and gives each its call site.
    ///
    /// A fault stack's site is one of its innermost frames: most new stacks share their
    /// first [`PREFIX_FRAMES`] frames with one named before (a deeper recursion, another
    /// caller further out), whose site they take from a cache by those addresses without
    /// being symbolized. The others are symbolized by their first frames; a stack whose
    /// site is not among them (no frame of the program's own code there) is symbolized
    /// whole. With `--focus`, which looks at whole stacks, every stack is.
    fn symbolize(&mut self) {
        let mut counts = FaultCounts::default();
        let whole_only = self.options.frame_rules.focuses();
        for process in self.processes.values_mut() {
            if !process.trace.stacks.is_empty() {
                let stacks = std::mem::take(&mut process.trace.stacks);
                self.naming.stacks += stacks.len() as u64;
                // The new stacks by their first frames (with the generation): the first of
                // each is named, the others (with whether frames were left out) follow it.
                let mut groups: FxHashMap<Box<[u64]>, StackGroup> = FxHashMap::default();
                let mut key_of: FxHashMap<u32, Box<[u64]>> = FxHashMap::default();
                for stack in &stacks {
                    if whole_only {
                        process.trace.stacks.push(stack.clone());
                        continue;
                    }
                    let key = prefix_key(stack);
                    if let Some(&site) = process.prefix_sites.get(&key[..]) {
                        process.stacks.entry(stack.id).or_default().site = Some(site);
                        self.naming.cached += 1;
                        continue;
                    }
                    let trimmed = stack.frames.len() > PREFIX_FRAMES;
                    if let Some(group) = groups.get_mut(&key[..]) {
                        group.2.push((stack.id, trimmed));
                        continue;
                    }
                    let mut first = stack.clone();
                    if trimmed {
                        first.frames.truncate(PREFIX_FRAMES);
                        first.end = fltrace_trace::StackEnd::Truncated;
                    }
                    process.trace.stacks.push(first);
                    key_of.insert(stack.id, key.clone());
                    groups.insert(key, (stack.id, trimmed, Vec::new()));
                }
                let leaf = self.options.call_site == CallSite::Leaf;
                // Stacks whose site lies beyond their first frames: named whole.
                let mut whole: FxHashSet<u32> = FxHashSet::default();
                let mut first_round = true;
                while !process.trace.stacks.is_empty() {
                    let named = process.trace.stacks.len() as u64;
                    if first_round && !whole_only {
                        self.naming.cut += named;
                    } else {
                        self.naming.whole += named;
                    }
                    first_round = false;
                    let mut resolved = self.symbolizer.resolve_stacks(&process.trace);
                    resolved.call_site = self.options.call_site;
                    apply_rules(
                        &self.options.frame_rules,
                        &mut resolved,
                        &mut counts,
                        &mut self.skipped,
                    );
                    for stack in std::mem::take(&mut process.trace.stacks) {
                        let locations = resolved.get(stack.id);
                        let group = key_of
                            .remove(&stack.id)
                            .and_then(|key| groups.remove_entry(&key));
                        let site = self.options.call_site.of(locations);
                        // A site of the program's own code (any frame, with `leaf`): every
                        // stack with the same first frames has it.
                        let own =
                            site.is_some_and(|l| leaf || (!l.system && &*l.lib != "[unknown]"));
                        let mut same = Vec::new();
                        if let Some((key, (_, trimmed, others))) = group {
                            for (id, other_trimmed) in others {
                                if own || !other_trimmed {
                                    // Its first frames are all its frames, the named one's.
                                    same.push(id);
                                } else {
                                    whole.insert(id);
                                }
                            }
                            if !own && trimmed {
                                whole.insert(stack.id);
                                whole.extend(same.drain(..));
                                continue;
                            }
                            if own {
                                let id = fault_site_id(
                                    &mut self.sites,
                                    &mut self.site_ids,
                                    site.cloned().unwrap_or_else(unknown_site),
                                );
                                process.prefix_sites.insert(key, id);
                            }
                        }
                        // A stack `--focus` leaves out has no site: its faults count in the
                        // headline only.
                        if !self.options.frame_rules.keeps(locations) {
                            continue;
                        }
                        let id = fault_site_id(
                            &mut self.sites,
                            &mut self.site_ids,
                            site.cloned().unwrap_or_else(unknown_site),
                        );
                        for stack_id in std::iter::once(stack.id).chain(same) {
                            process.stacks.entry(stack_id).or_default().site = Some(id);
                        }
                    }
                    if !whole.is_empty() {
                        process.trace.stacks = stacks
                            .iter()
                            .filter(|s| whole.contains(&s.id))
                            .cloned()
                            .collect();
                        whole.clear();
                    }
                }
            }
            if !process.trace.alloc_stacks.is_empty() {
                // As `report --allocs` names them: the configured allocators skipped, the
                // line that called malloc kept.
                let mut resolved = self.symbolizer.resolve_alloc_stacks(&process.trace);
                resolved.call_site = self.options.call_site;
                apply_rules(
                    &self.options.frame_rules,
                    &mut resolved,
                    &mut FaultCounts::default(),
                    &mut Skipped::default(),
                );
                let allocs = process.allocs.get_or_insert_with(ProcessAllocs::default);
                for stack in std::mem::take(&mut process.trace.alloc_stacks) {
                    let site = crate::group::alloc_site(&resolved, stack.id);
                    let id = site_id(&mut self.alloc_sites, &mut self.alloc_site_ids, site);
                    allocs.sites.insert(stack.id, id);
                }
            }
        }
        self.warnings.extend(self.symbolizer.take_warnings());
    }

    /// What symbolizing had to say since the last call (files of another build, missing).
    pub fn take_warnings(&mut self) -> Vec<String> {
        std::mem::take(&mut self.warnings)
    }

    /// Stacks defined so far (for tests and the status line).
    pub fn stacks(&self) -> usize {
        self.processes.values().map(|p| p.stacks.len()).sum()
    }
}

/// The calling thread's CPU time, by the trace crate's one thread CPU clock.
fn thread_cpu() -> Duration {
    fltrace_trace::thread_cpu()
}

/// Where a site is, as `report`'s table prints it: `file:line` with the file's own name,
/// `??` without a file.
fn site_place(location: &Location) -> String {
    if location.has_line() {
        format!("{}:{}", location.short_file(), location.line)
    } else if location.file.is_empty() {
        "??".to_owned()
    } else {
        location.short_file().to_owned()
    }
}

/// New stacks with the same first frames: the one named (its id, whether frames were left
/// out of it), and the others (id, whether frames were left out).
type StackGroup = (u32, bool, Vec<(u32, bool)>);

/// How many innermost frames of a fault stack name its site, mostly (see
/// [`LiveTop::symbolize`]).
const PREFIX_FRAMES: usize = 8;

/// A stack's generation and first [`PREFIX_FRAMES`] frames, as the cache of sites keys them.
fn prefix_key(stack: &fltrace_trace::Stack) -> Box<[u64]> {
    std::iter::once(u64::from(stack.generation))
        .chain(
            stack
                .frames
                .iter()
                .take(PREFIX_FRAMES)
                .map(|frame| frame.get()),
        )
        .collect()
}

/// The index of fault site `location`, made if new.
fn fault_site_id(
    sites: &mut Vec<SiteTally>,
    ids: &mut FxHashMap<Location, u32>,
    location: Location,
) -> u32 {
    let next = sites.len() as u32;
    *ids.entry(location.clone()).or_insert_with(|| {
        sites.push(SiteTally {
            location,
            counts: Counts::default(),
            interval: 0,
        });
        next
    })
}

/// The index of allocation site `location`, made if new.
fn site_id(
    sites: &mut Vec<AllocSiteTally>,
    ids: &mut FxHashMap<Location, u32>,
    location: Location,
) -> u32 {
    let next = sites.len() as u32;
    *ids.entry(location.clone()).or_insert_with(|| {
        sites.push(AllocSiteTally {
            location,
            figures: LiveStackFigures::default(),
            allocs_before: 0,
        });
        next
    })
}

/// The site of a stack nothing is known of.
fn unknown_site() -> Location {
    Location {
        function: "[unknown]".into(),
        file: "".into(),
        line: 0,
        lib: "[unknown]".into(),
        system: false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use fltrace_trace::{AllocCall, AllocEvent, CodeAddr, Stack, StackEnd, VirtAddr};

    fn top() -> LiveTop {
        LiveTop::new(TopOptions {
            call_site: CallSite::Program,
            frame_rules: FrameRules::default(),
            include_tracer: false,
            debug: DebugConfig::default(),
            allocs: false,
        })
    }

    fn stack(pid: u32, id: u32) -> LiveEvent {
        LiveEvent::Stack {
            pid,
            stack: Stack {
                id,
                generation: 0,
                frames: vec![CodeAddr::new(0x1000 + u64::from(id))],
                end: StackEnd::Complete,
            },
        }
    }

    fn fault(pid: u32, tid: u32, stack_id: u32, flags: u16, undo: bool) -> LiveFault {
        LiveFault {
            pid,
            tid,
            stack_id,
            flags: FaultFlags(flags),
            undo,
        }
    }

    const W: u16 = FaultFlags::WRITE;
    const Z: u16 = FaultFlags::WRITE | FaultFlags::ZERO;

    /// Rows count on their stack, thread and process; a change takes the old row back and
    /// adds the new one; fltrace's own faults stay apart; each interval's rate is its own
    /// faults over its length, and totals run on.
    #[test]
    fn rows_and_their_changes_count_exactly() {
        let mut top = top();
        let t0 = Instant::now();
        let mut batch = LiveBatch {
            events: vec![
                stack(7, 0),
                stack(7, 1),
                LiveEvent::ThreadNamed {
                    pid: 7,
                    os_pid: 7,
                    tid: 7,
                    name: "prog".into(),
                },
            ],
            ..LiveBatch::default()
        };
        batch.faults = vec![
            fault(7, 7, 0, Z, false),
            fault(7, 7, 0, Z, false),
            fault(7, 8, 1, W, false),
            fault(7, 7, 1, FaultFlags::TRACER, false),
            // Row 1 turned out to be a fetch.
            fault(7, 7, 0, Z, true),
            fault(7, 7, 0, W | FaultFlags::FETCH, false),
        ];
        top.apply(batch, t0);
        let first = top.tick(t0 + Duration::from_secs(2), false);
        assert_eq!((first.faults, first.tracer_faults), (3, 1));
        assert_eq!(first.faults_per_s, 1.5);
        // Both stacks name no code (no mappings): one `[unknown]` site holds both.
        assert_eq!(first.sites.len(), 1);
        let site = &first.sites[0];
        assert_eq!(&*site.name, "[unknown]");
        assert_eq!(
            site.counts,
            Counts {
                count: 3,
                kinds: [0, 3, 0],
                zero: 1,
                fetch: 1,
                invalid: 0,
            }
        );
        assert_eq!(site.counts.type_name(), "mixed");
        assert_eq!(site.counts.kind_name(), "write");
        let threads: Vec<(String, u64)> = first
            .rows(TopView::Threads, TopSort::Name, "")
            .iter()
            .map(|r| (r.place.clone(), r.counts.count))
            .collect();
        assert_eq!(threads, [("7 (7)".to_owned(), 2), ("8 (7)".to_owned(), 1)]);
        let processes = first.rows(TopView::Processes, TopSort::Rate, "");
        assert_eq!((&*processes[0].name, processes[0].rate), ("prog", 1.5));

        top.apply(
            LiveBatch {
                faults: vec![fault(7, 8, 1, W, false)],
                ..LiveBatch::default()
            },
            t0 + Duration::from_secs(3),
        );
        let second = top.tick(t0 + Duration::from_secs(4), false);
        assert_eq!((second.faults, second.faults_per_s), (4, 0.5));
        assert_eq!(second.sites[0].counts.count, 4);
        assert_eq!(second.number, 2);
    }

    /// The last interval ends when the traced processes did, not when every batch was in.
    #[test]
    fn the_last_interval_ends_with_the_program() {
        let mut top = top();
        let t0 = Instant::now();
        top.apply(
            LiveBatch {
                events: vec![stack(3, 0)],
                faults: vec![fault(3, 3, 0, W, false); 10],
                ..LiveBatch::default()
            },
            t0,
        );
        top.apply(
            LiveBatch {
                ended: true,
                ..LiveBatch::default()
            },
            t0 + Duration::from_secs(2),
        );
        assert!(top.ended());
        let last = top.tick(t0 + Duration::from_secs(9), true);
        assert!(last.finished);
        assert_eq!(last.interval, Duration::from_secs(2));
        assert_eq!(last.faults_per_s, 5.0);
    }

    /// Far memory: the running processes' last figures are summed, evictions and fetches per
    /// second are the interval's growth; a process ended before the interval counts no more.
    #[test]
    fn far_memory_follows_the_last_lines() {
        let figures = |local: u64, far: u64, evicted: u64, fetched: u64| {
            vec![
                ("memory_local", local),
                ("memory_far", far),
                ("evict_pages_done", evicted),
                ("faults_fetch", fetched),
            ]
        };
        let mut top = top();
        let t0 = Instant::now();
        top.apply(
            LiveBatch {
                events: vec![
                    LiveEvent::Stats {
                        pid: 1,
                        counters: figures(10, 20, 100, 50),
                    },
                    LiveEvent::Runtime {
                        pid: 2,
                        counters: figures(1, 2, 0, 0),
                    },
                ],
                ..LiveBatch::default()
            },
            t0,
        );
        let first = top.tick(t0 + Duration::from_secs(1), false);
        assert_eq!(
            first.far,
            Some(FarFigures {
                local_bytes: 11,
                far_bytes: 22,
                evictions: 100,
                fetches: 50
            })
        );
        top.apply(
            LiveBatch {
                events: vec![
                    LiveEvent::Runtime {
                        pid: 1,
                        counters: figures(12, 30, 300, 90),
                    },
                    LiveEvent::Ended { pid: 2 },
                ],
                ..LiveBatch::default()
            },
            t0 + Duration::from_secs(1),
        );
        let second = top.tick(t0 + Duration::from_secs(3), false);
        assert_eq!(second.far.map(|f| f.local_bytes), Some(13), "2 ended in it");
        assert_eq!(
            (second.evictions_per_s, second.fetches_per_s),
            (100.0, 20.0)
        );
        let third = top.tick(t0 + Duration::from_secs(4), false);
        assert_eq!(
            third.far.map(|f| f.local_bytes),
            Some(12),
            "2 ended before it"
        );
        assert_eq!((third.running, third.processes), (1, 2));
    }

    fn alloc(time_ns: u64, call: AllocCall, addr: u64, size: u64, stack_id: u32) -> AllocEvent {
        AllocEvent {
            time_ns,
            tid: 1,
            call,
            addr: VirtAddr::new(addr),
            size,
            old_addr: VirtAddr::new(0),
            detail: 0,
            stack_id,
        }
    }

    /// Allocations: each interval's rate is the calls it took, the bytes alive follow the
    /// frees, a restart (a conversion done again) neither doubles the totals nor counts its
    /// calls twice in the rate, and an exec ends every block.
    #[test]
    fn allocations_count_calls_and_live_bytes() {
        let mut top = LiveTop::new(TopOptions {
            allocs: true,
            ..top().options
        });
        let t0 = Instant::now();
        let alloc_stack = |id| Stack {
            id,
            generation: 0,
            frames: vec![CodeAddr::new(0x2000 + u64::from(id))],
            end: StackEnd::Unknown,
        };
        let empty = top.tick(t0, false);
        assert_eq!(empty.allocs, Some(AllocHeadline::default()));
        // Ten blocks of 100 bytes, every other freed.
        let mut events = Vec::new();
        for i in 0..10u64 {
            events.push(alloc(
                10 + i,
                AllocCall::Malloc,
                0x10_000 + i * 0x100,
                100,
                0,
            ));
            if i % 2 == 1 {
                events.push(alloc(
                    10 + i,
                    AllocCall::Free,
                    0x10_000 + i * 0x100,
                    0,
                    u32::MAX,
                ));
            }
        }
        let first = LiveAllocs {
            pid: 5,
            restart: true,
            stacks: vec![alloc_stack(0)],
            events: events.clone(),
            execs: Vec::new(),
            dropped: 2,
        };
        top.apply(
            LiveBatch {
                allocs: vec![first.clone()],
                ..LiveBatch::default()
            },
            t0,
        );
        let one = top.tick(t0 + Duration::from_secs(2), false);
        let headline = one.allocs.expect("allocations");
        assert_eq!(
            (headline.allocs, headline.allocs_per_s, headline.live_bytes),
            (10, 5.0, 500)
        );
        assert_eq!((headline.live_allocs, headline.dropped), (5, 2));
        let rows = one.rows(TopView::Allocations, TopSort::Total, "");
        assert_eq!(rows.len(), 1);
        assert_eq!(&*rows[0].name, "[unknown]");
        assert_eq!(rows[0].total(), 500);
        // Told again from the start, with one more call: one call in the interval.
        let mut again = first;
        again
            .events
            .push(alloc(30, AllocCall::Malloc, 0x20_000, 50, 0));
        top.apply(
            LiveBatch {
                allocs: vec![again],
                ..LiveBatch::default()
            },
            t0 + Duration::from_secs(2),
        );
        let two = top.tick(t0 + Duration::from_secs(3), false);
        let headline = two.allocs.expect("allocations");
        assert_eq!(
            (headline.allocs, headline.allocs_per_s, headline.live_bytes),
            (11, 1.0, 550)
        );
        // An exec ends every block.
        top.apply(
            LiveBatch {
                allocs: vec![LiveAllocs {
                    pid: 5,
                    events: vec![alloc(50, AllocCall::Malloc, 0x30_000, 8, 0)],
                    execs: vec![(0, 40)],
                    dropped: 2,
                    ..LiveAllocs::default()
                }],
                ..LiveBatch::default()
            },
            t0 + Duration::from_secs(3),
        );
        let three = top.tick(t0 + Duration::from_secs(4), false);
        let headline = three.allocs.expect("allocations");
        assert_eq!((headline.allocs, headline.live_bytes), (12, 8));
        assert_eq!(headline.unpaired, 0);
    }

    /// Rows sort by rate, total or name, and the filter keeps names containing it, in any
    /// case.
    #[test]
    fn rows_sort_and_filter() {
        let row = |name: &str, rate: f64, count: u64| TopRow {
            rate,
            counts: Counts {
                count,
                ..Counts::default()
            },
            name: name.into(),
            place: String::new(),
            lib: "".into(),
            alloc: None,
        };
        let snapshot = TopSnapshot {
            sites: vec![
                row("beta", 5.0, 10),
                row("alpha", 1.0, 50),
                row("Gamma", 9.0, 1),
            ],
            ..TopSnapshot::default()
        };
        let names = |sort, filter| -> Vec<String> {
            snapshot
                .rows(TopView::Sites, sort, filter)
                .iter()
                .map(|r| r.name.to_string())
                .collect()
        };
        assert_eq!(names(TopSort::Rate, ""), ["Gamma", "beta", "alpha"]);
        assert_eq!(names(TopSort::Total, ""), ["alpha", "beta", "Gamma"]);
        assert_eq!(names(TopSort::Name, ""), ["Gamma", "alpha", "beta"]);
        assert_eq!(names(TopSort::Rate, "GAM"), ["Gamma"]);
        assert_eq!(TopSort::Name.next(), TopSort::Rate);
        assert_eq!(TopView::Libraries.next(false), TopView::Sites);
        assert_eq!(TopView::Sites.next(false), TopView::Processes);
        assert_eq!(TopView::Sites.next(true), TopView::Allocations);
        assert_eq!(TopView::Allocations.next(true), TopView::Processes);
    }
}
