//! `fltrace top`: what a running recording's batches ([`fltrace_trace::live`]) add up to,
//! interval by interval: faults per second and in all by call site (the rule of `report`),
//! process, thread and library, with the recorder's lost and truncated counts and, under
//! far-memory emulation, local and far memory, evictions and fetches.
//!
//! Each fault costs a count on its stack and one on its thread; stacks are symbolized once,
//! when the interval that first saw them ends ([`LiveTop::tick`]), through the same
//! [`Symbolizer`] and frame rules as reports, so a new site is named within the interval
//! that saw it and its totals are those `report` gives of the recording afterwards.

use std::sync::Arc;
use std::time::{Duration, Instant};

use rustc_hash::FxHashMap;

use fltrace_trace::live::{LiveBatch, LiveEvent, LiveFault, LiveTotals};
use fltrace_trace::{FaultFlags, ProcessTrace};

use crate::{
    CallSite, DebugConfig, FaultCounts, FrameRules, Group, GroupKey, Location, Skipped, Symbolizer,
    apply_rules,
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
    /// Its last statistics line's far-memory figures, and those of the last interval's end.
    far: Option<FarFigures>,
    far_before: Option<FarFigures>,
    /// When its files were finished (the interval count it ended in).
    ended: Option<u64>,
    counts: Counts,
    interval: i64,
    rate: f64,
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
            far: None,
            far_before: None,
            ended: None,
            counts: Counts::default(),
            interval: 0,
            rate: 0.0,
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

/// Which rows a view shows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum TopView {
    /// Call sites (the rule of `report`), `function file:line lib`.
    #[default]
    Sites,
    /// Processes.
    Processes,
    /// Threads.
    Threads,
    /// Libraries (of the call sites, as `report --by dso`).
    Libraries,
}

impl TopView {
    /// The next view, in the order `v` cycles them.
    pub fn next(self) -> TopView {
        match self {
            TopView::Sites => TopView::Processes,
            TopView::Processes => TopView::Threads,
            TopView::Threads => TopView::Libraries,
            TopView::Libraries => TopView::Sites,
        }
    }

    /// Its name, as the view's title says it.
    pub fn name(self) -> &'static str {
        match self {
            TopView::Sites => "call sites",
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
                    .then_with(|| b.counts.count.cmp(&a.counts.count))
                    .then_with(|| by_name(a, b))
            }),
            TopSort::Total => shown.sort_by(|a, b| {
                b.counts
                    .count
                    .cmp(&a.counts.count)
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
    /// The recorder's totals, as the last batch said them.
    recorded: LiveTotals,
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
            recorded: LiveTotals::default(),
            tracer_faults: 0,
            faults: 0,
            interval_faults: 0,
            started: None,
            last_tick: None,
            ended_at: None,
            ticks: 0,
            warnings: Vec::new(),
            skipped: Skipped::default(),
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
        self.recorded = batch.totals;
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
        self.symbolize();

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
            })
            .collect();
        let snapshot = TopSnapshot {
            number: self.ticks,
            elapsed: end.duration_since(self.started.unwrap_or(end)),
            interval: end.duration_since(start),
            faults_per_s: per_s(self.interval_faults),
            faults: self.faults,
            tracer_faults: self.tracer_faults,
            recorded: self.recorded,
            processes: self.processes.len(),
            running,
            threads: self.processes.values().map(|p| p.threads.len()).sum(),
            far,
            evictions_per_s: per_s(evictions),
            fetches_per_s: per_s(fetches),
            finished,
            sites,
            process_rows,
            thread_rows,
            libraries,
        };
        self.interval_faults = 0;
        snapshot
    }

    /// Names the stacks seen since the last call, and gives each its call site.
    fn symbolize(&mut self) {
        let mut counts = FaultCounts::default();
        for process in self.processes.values_mut() {
            if process.trace.stacks.is_empty() {
                continue;
            }
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
                // A stack `--focus` leaves out has no site: its faults count in the
                // headline only.
                if !self.options.frame_rules.keeps(locations) {
                    continue;
                }
                let site = self
                    .options
                    .call_site
                    .of(locations)
                    .cloned()
                    .unwrap_or_else(unknown_site);
                let next = self.sites.len() as u32;
                let id = *self.site_ids.entry(site.clone()).or_insert_with(|| {
                    self.sites.push(SiteTally {
                        location: site,
                        counts: Counts::default(),
                        interval: 0,
                    });
                    next
                });
                process.stacks.entry(stack.id).or_default().site = Some(id);
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
    use fltrace_trace::{CodeAddr, Stack, StackEnd};

    fn top() -> LiveTop {
        LiveTop::new(TopOptions {
            call_site: CallSite::Program,
            frame_rules: FrameRules::default(),
            include_tracer: false,
            debug: DebugConfig::default(),
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
        assert_eq!(TopView::Libraries.next(), TopView::Sites);
    }
}
