//! Choosing a recording and loading, filtering and symbolizing its processes.

use std::path::Path;

use anyhow::Context;

use fltrace_analyze::{
    ARCHIVE_DIR, CallSite, DebugConfig, FaultCounts, ResolvedStacks, Symbolizer, separate_tracer,
    separate_tracer_counts,
};
use fltrace_trace::{ProcessTrace, Recording, keys};

use crate::cli::{CallSiteArg, Selection};

/// The processes of one recording, symbolized.
pub struct Loaded {
    pub recording: Recording,
    /// With [`load_counts`], the faults are not loaded (`faults` is empty): see `counts`.
    pub traces: Vec<(ProcessTrace, ResolvedStacks)>,
    /// The faults of each of `traces` counted per (stack, flags), after `--time` and the
    /// tracer's own faults are left out.
    pub counts: Vec<FaultCounts>,
    /// The allocation stacks of each of `traces`, resolved if asked for (else empty).
    pub alloc_stacks: Vec<ResolvedStacks>,
    /// Records the kernel dropped, from the stats files.
    pub lost: u64,
    /// Faults taken by fltrace's own work in the traced processes.
    pub tracer_faults: u64,
    /// Whether those are in `traces` (`--include-tracer`).
    pub tracer_included: bool,
}

/// Whether allocation stacks are symbolized too.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Allocs {
    Skip,
    /// Those of processes recorded with `--allocs`.
    IfRecorded,
    /// As `IfRecorded`, and it is an error if no process was.
    Required,
}

/// Said when a report needs allocations and the recording has none.
pub const NO_ALLOCS: &str =
    "this recording has no allocation data: record it with `fltrace record --allocs`";

/// Every fault of each process, in memory.
pub fn load(selection: &Selection) -> anyhow::Result<Loaded> {
    load_with(selection, Allocs::Skip)
}

/// Loads as [`load`] does, and symbolizes allocation stacks as `allocs` says.
pub fn load_with(selection: &Selection, allocs: Allocs) -> anyhow::Result<Loaded> {
    load_faults(selection, allocs, Faults::All)
}

/// Loads as [`load`] does but streams the faults, row group by row group, into per-stack
/// counts: memory follows the number of distinct stacks, not of faults.
pub fn load_counts(selection: &Selection) -> anyhow::Result<Loaded> {
    load_faults(selection, Allocs::Skip, Faults::Counted)
}

/// How the faults are held.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Faults {
    /// Every one, in `ProcessTrace::faults`.
    All,
    /// Counted per stack only.
    Counted,
}

fn load_faults(selection: &Selection, allocs: Allocs, faults: Faults) -> anyhow::Result<Loaded> {
    let dir = &selection.dir;
    let recording = match selection.pid {
        Some(pid) => Recording::with_pid(dir, pid)?,
        None => Recording::latest(dir)?,
    };
    let pids: Vec<u32> = match selection.pid {
        Some(pid) => vec![pid],
        None => recording.pids().to_vec(),
    };
    say_if_unfinished(&recording)?;
    // Before the slow part: symbolizing.
    if allocs == Allocs::Required && !pids.iter().any(|&pid| recording.has_allocs(pid)) {
        anyhow::bail!(NO_ALLOCS);
    }
    let start_ns = recording.session.start_ns;
    let window = selection.time.map(|(from, to)| {
        (
            start_ns + (from * 1e9) as u64,
            start_ns.saturating_add((to * 1e9) as u64),
        )
    });
    let mut symbolizer = symbolizer(selection);
    let mut traces = Vec::new();
    let mut counts = Vec::new();
    let mut alloc_stacks = Vec::new();
    let mut lost = 0;
    let mut tracer_faults = 0;
    let call_site = match selection.call_site {
        CallSiteArg::Program => CallSite::Program,
        CallSiteArg::Leaf => CallSite::Leaf,
    };
    for pid in pids {
        let loading = || format!("loading the trace of process {pid}");
        let (mut trace, counted) = match faults {
            Faults::All => {
                let mut trace = recording.load(pid).with_context(loading)?;
                if let Some((from, to)) = window {
                    trace.faults.retain(|f| (from..to).contains(&f.time_ns));
                }
                (trace, None)
            }
            Faults::Counted => {
                let trace = recording.load_without_faults(pid).with_context(loading)?;
                let row_groups = recording.fault_keys(pid).with_context(loading)?;
                let window = window.map(|(from, to)| from..to);
                let counted = FaultCounts::stream(row_groups, window).with_context(loading)?;
                (trace, Some(counted))
            }
        };
        let stats = fltrace_trace::files::stats(dir, pid);
        if let Ok(Some(l)) = fltrace_trace::stats::last_value(&stats, "lost") {
            lost = lost.max(l);
        }
        let mut stacks = symbolizer.resolve_stacks(&trace);
        stacks.call_site = call_site;
        let include = selection.include_tracer;
        let counted = match counted {
            Some(mut counted) => {
                tracer_faults += separate_tracer_counts(&mut counted, &mut stacks, include);
                counted
            }
            None => {
                tracer_faults += separate_tracer(&mut trace, &mut stacks, include);
                FaultCounts::of(&trace.faults)
            }
        };
        counts.push(counted);
        let mut allocated = if allocs != Allocs::Skip && recording.has_allocs(pid) {
            symbolizer.resolve_alloc_stacks(&trace)
        } else {
            ResolvedStacks::default()
        };
        allocated.call_site = call_site;
        alloc_stacks.push(allocated);
        traces.push((trace, stacks));
    }
    print_warnings(&mut symbolizer);
    Ok(Loaded {
        recording,
        traces,
        counts,
        alloc_stacks,
        lost,
        tracer_faults,
        tracer_included: selection.include_tracer,
    })
}

/// Says in one line when the recording was never finished (the recorder was killed, or the
/// disk filled) and how much of it was recovered.
pub fn say_if_unfinished(recording: &Recording) -> anyhow::Result<()> {
    if let Some(note) = unfinished_note(recording)? {
        eprintln!("fltrace: warning: {note}");
    }
    Ok(())
}

/// The line [`say_if_unfinished`] prints, if the recording is unfinished.
pub fn unfinished_note(recording: &Recording) -> anyhow::Result<Option<String>> {
    let unfinished = recording.unfinished_tables()?;
    if unfinished.is_empty() {
        return Ok(None);
    }
    let rows = |kind: &str| -> u64 {
        unfinished
            .iter()
            .filter(|(k, _, _)| *k == kind)
            .map(|(_, _, rows)| rows)
            .sum()
    };
    let mut recovered = Vec::new();
    for (kind, name) in [
        ("faults", "faults"),
        ("stacks", "stacks"),
        ("mmaps", "mappings"),
        ("allocs", "allocation calls"),
        ("allocstacks", "allocation stacks"),
    ] {
        if unfinished.iter().any(|(k, _, _)| *k == kind) {
            recovered.push(format!("{} {name}", rows(kind)));
        }
    }
    let mut pids: Vec<u32> = unfinished.iter().map(|(_, pid, _)| *pid).collect();
    pids.dedup();
    Ok(Some(format!(
        "the recording is incomplete (fltrace stopped before finishing it): read up to its last checkpoint, {} recovered of process{} {}",
        recovered.join(", "),
        if pids.len() == 1 { "" } else { "es" },
        pids.iter()
            .map(u32::to_string)
            .collect::<Vec<_>>()
            .join(", ")
    )))
}

/// A symbolizer finding debug files as the environment says, and in the archive given or the
/// one beside the recording (said in one line).
pub fn symbolizer(selection: &Selection) -> Symbolizer {
    let mut config = DebugConfig::from_env();
    config.archive = selection.archive.clone().or_else(|| {
        let beside = selection.dir.join(ARCHIVE_DIR);
        beside.is_dir().then_some(beside)
    });
    if let Some(archive) = &config.archive {
        eprintln!(
            "fltrace: symbolizing with the archive {}",
            archive.display()
        );
    }
    Symbolizer::with_debug_config(config)
}

/// Says which mapped files were of another build than recorded, or gone.
pub fn print_warnings(symbolizer: &mut Symbolizer) {
    for warning in symbolizer.take_warnings() {
        eprintln!("fltrace: warning: {warning}");
    }
}

impl Loaded {
    pub fn total_faults(&self) -> u64 {
        self.counts.iter().map(FaultCounts::total).sum()
    }

    /// Each process's counted faults with its resolved stacks, for grouping.
    pub fn counted(&self) -> impl Iterator<Item = (&FaultCounts, &ResolvedStacks)> + Clone {
        self.counts.iter().zip(self.traces.iter().map(|(_, s)| s))
    }

    /// The line saying how many faults of fltrace's own work were left out, if any were.
    pub fn tracer_note(&self) -> Option<String> {
        (self.tracer_faults > 0 && !self.tracer_included).then(|| {
            format!(
                "left out {} faults of the tracer (fltrace's own work in the process; --include-tracer shows them)",
                self.tracer_faults
            )
        })
    }

    pub fn command(&self) -> &str {
        self.traces
            .first()
            .and_then(|(t, _)| t.meta(keys::COMMAND))
            .unwrap_or("")
    }

    pub fn dir(&self) -> &Path {
        &self.recording.dir
    }

    /// Whether process `pid` was recorded with `record --allocs`.
    pub fn has_allocs(&self, pid: u32) -> bool {
        self.recording.has_allocs(pid)
    }
}
