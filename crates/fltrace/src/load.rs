//! Choosing a recording and loading, filtering and symbolizing its processes.

use std::path::Path;

use anyhow::Context;

use fltrace_analyze::{ResolvedStacks, Symbolizer};
use fltrace_trace::{ProcessTrace, Recording, keys};

use crate::cli::Selection;

/// The processes of one recording, symbolized.
pub struct Loaded {
    pub recording: Recording,
    pub traces: Vec<(ProcessTrace, ResolvedStacks)>,
    /// Records the kernel dropped, from the stats files.
    pub lost: u64,
}

pub fn load(selection: &Selection) -> anyhow::Result<Loaded> {
    let dir = &selection.dir;
    let recording = match selection.pid {
        Some(pid) => Recording::with_pid(dir, pid)?,
        None => Recording::latest(dir)?,
    };
    let pids: Vec<u32> = match selection.pid {
        Some(pid) => vec![pid],
        None => recording.pids().to_vec(),
    };
    let start_ns = recording.session.start_ns;
    let window = selection.time.map(|(from, to)| {
        (
            start_ns + (from * 1e9) as u64,
            start_ns.saturating_add((to * 1e9) as u64),
        )
    });
    let mut symbolizer = Symbolizer::new();
    let mut traces = Vec::new();
    let mut lost = 0;
    for pid in pids {
        let mut trace = recording
            .load(pid)
            .with_context(|| format!("loading the trace of process {pid}"))?;
        if let Some((from, to)) = window {
            trace.faults.retain(|f| (from..to).contains(&f.time_ns));
        }
        let stats = fltrace_trace::files::stats(dir, pid);
        if let Ok(Some(l)) = fltrace_trace::stats::last_value(&stats, "lost") {
            lost = lost.max(l);
        }
        let stacks = symbolizer.resolve_stacks(&trace);
        traces.push((trace, stacks));
    }
    Ok(Loaded {
        recording,
        traces,
        lost,
    })
}

impl Loaded {
    pub fn total_faults(&self) -> u64 {
        self.traces.iter().map(|(t, _)| t.faults.len() as u64).sum()
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
}
