//! Loading a recording's processes for a report: its faults filtered by time, fltrace's own
//! faults separated, stacks symbolized, what the kernel dropped counted.

use std::path::Path;

use fltrace_trace::{ProcessTrace, Recording, keys};

use crate::{
    ARCHIVE_DIR, CallSite, CountedSource, DebugConfig, FaultCounts, FrameRules, ResolvedStacks,
    Skipped, Symbolizer, apply_rules, separate_tracer_counts,
};

/// Said when a report needs allocations and the recording has none.
pub const NO_ALLOCS: &str =
    "this recording has no allocation data: record it with `fltrace record --allocs`";

/// Whether allocation stacks are symbolized too.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AllocStacks {
    /// None.
    Skip,
    /// Those of processes recorded with `--allocs`.
    IfRecorded,
    /// As `IfRecorded`, and it is an error if no process was.
    Required,
}

/// How the faults are held.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FaultsHeld {
    /// Every one, in `ProcessTrace::faults`.
    All,
    /// Streamed, row group by row group, into per-stack counts only: memory follows the
    /// number of distinct stacks, not of faults.
    Counted,
}

/// What to load of a recording: every reading command's flags become one of these.
#[derive(Debug, Clone)]
pub struct LoadOptions {
    /// The directory holding the recordings (an archive file already unpacked into one).
    pub dir: std::path::PathBuf,
    /// Only this process (and the newest recording that traced it); else every process of
    /// the newest recording.
    pub pid: Option<u32>,
    /// Only faults in this window, seconds from the start of the recording.
    pub window_s: Option<(f64, f64)>,
    /// Which frame a fault or allocation counts for.
    pub call_site: CallSite,
    /// The frames that are never call sites (allocators, `--hide`) and the stacks kept
    /// (`--focus`).
    pub frame_rules: FrameRules,
    /// Only the faults of these threads or thread names (`--tid`, `--comm`): the faults are
    /// then read whole, as with [`FaultsHeld::All`].
    pub threads: crate::ThreadFilter,
    /// Whether fltrace's own faults stay in.
    pub include_tracer: bool,
    /// An archive of `fltrace archive` to symbolize from (default: the one beside the
    /// recording, if there is one).
    pub archive: Option<std::path::PathBuf>,
    /// Whether allocation stacks are symbolized.
    pub alloc_stacks: AllocStacks,
    /// How the faults are held.
    pub faults: FaultsHeld,
    /// Holds every allocation event and pairs them in memory, the faults held whole too
    /// (the tests' oracle of the one pass, [`crate::stream_allocs`]; only with the `oracle`
    /// feature: [`LoadOptions::allocs_whole`]).
    #[cfg(any(test, feature = "oracle"))]
    pub allocs_whole: bool,
    /// Reads a corrupt recording anyway (`--salvage`): what still reads, with a warning
    /// naming the corrupt file, instead of the error.
    pub salvage: bool,
    /// Takes each process's allocation totals from what the recorder's pairing wrote
    /// (`fltrace-data-allocstats-<pid>.parquet`) where there is one, instead of pairing
    /// every call: for reports of allocations that count no fault and every block alive at
    /// the end as leaked (`report --allocs`, `--leaks` without `--older-ms`, `visualize
    /// --allocs`). Not with [`LoadOptions::allocs_whole`], the oracle.
    pub allocs_from_record: bool,
}

/// Set, the allocation reports and pictures hold every event and fault (the tests' oracle
/// of the one pass, [`crate::stream_allocs`]). Read only with the `oracle` feature, which
/// the tests turn on: a build without it has no switch to the oracle.
#[cfg(any(test, feature = "oracle"))]
pub const WHOLE_TABLE_ENV: &str = "FLTRACE_ALLOCS_WHOLE_TABLE";

/// Whether [`WHOLE_TABLE_ENV`] asks for every event and fault held.
#[cfg(any(test, feature = "oracle"))]
pub fn whole_table() -> bool {
    std::env::var_os(WHOLE_TABLE_ENV).is_some()
}

impl LoadOptions {
    /// Every process of the newest recording in `dir`, every fault held, call sites in the
    /// program's own code, fltrace's own faults left out, no allocation stacks; the oracle
    /// of the allocation pass as [`WHOLE_TABLE_ENV`] says.
    pub fn new(dir: std::path::PathBuf, frame_rules: FrameRules) -> LoadOptions {
        LoadOptions {
            dir,
            pid: None,
            window_s: None,
            call_site: CallSite::Program,
            frame_rules,
            threads: crate::ThreadFilter::default(),
            include_tracer: false,
            archive: None,
            alloc_stacks: AllocStacks::Skip,
            faults: FaultsHeld::All,
            #[cfg(any(test, feature = "oracle"))]
            allocs_whole: whole_table(),
            salvage: false,
            allocs_from_record: false,
        }
    }

    /// Whether every allocation event and fault is held and paired in memory (the oracle):
    /// never without the `oracle` feature.
    pub fn allocs_whole(&self) -> bool {
        #[cfg(any(test, feature = "oracle"))]
        return self.allocs_whole;
        #[cfg(not(any(test, feature = "oracle")))]
        false
    }

    /// The same, the faults held as `faults` says and the allocation stacks as `alloc_stacks`.
    pub fn holding(&self, faults: FaultsHeld, alloc_stacks: AllocStacks) -> LoadOptions {
        LoadOptions {
            faults,
            alloc_stacks,
            ..self.clone()
        }
    }

    /// The same, for the allocation reports: allocations required, the faults counted and
    /// the allocation events paired in one pass (memory following the blocks alive at once,
    /// not the calls), or every event and fault held under [`WHOLE_TABLE_ENV`].
    pub fn for_allocs(&self) -> LoadOptions {
        let faults = if self.allocs_whole() {
            FaultsHeld::All
        } else {
            FaultsHeld::Counted
        };
        self.holding(faults, AllocStacks::Required)
    }

    /// The debug files these options find: the environment's, and the archive given or the
    /// one beside the recordings.
    pub fn debug_config(&self) -> DebugConfig {
        debug_config(&self.dir, self.archive.as_deref())
    }

    /// The recording these options pick, its files checked (a corrupt one is an error
    /// naming `--salvage`, or with `salvage` returned beside it to be warned of
    /// ([`salvage_warning`])).
    pub fn find_recording(&self) -> Result<(Recording, Vec<fltrace_trace::Error>), LoadError> {
        let (recording, mut corrupt) = find_recording_salvaging(&self.dir, self.pid)?;
        if !self.salvage && !corrupt.is_empty() {
            return Err(LoadError::Corrupt(corrupt.swap_remove(0)));
        }
        Ok((recording, corrupt))
    }
}

/// A `--time` window that holds nothing of the recording: said with the recording's span,
/// the same way by every command that reads faults.
#[derive(Debug, thiserror::Error)]
#[error(
    "--time {}: the faults of `{command}` span 0..{span_s:.3} s from its start: give a window within it",
    window_text(*window_s)
)]
pub struct OutsideRecording {
    /// The window asked for, seconds from the start.
    pub window_s: (f64, f64),
    /// Seconds from the start to the last fault of the processes chosen.
    pub span_s: f64,
    /// The recorded command.
    pub command: String,
}

/// `1.5..3`, `4..`: a window as `--time` spells it.
fn window_text((from, to): (f64, f64)) -> String {
    // The open end of `4..` parses to the longest time there is.
    let end = if to >= u64::MAX as f64 / 1e9 {
        String::new()
    } else {
        format!("{to}")
    };
    format!("{from}..{end}")
}

/// The span of the faults of `pids` in `recording`, seconds from its start to the last one
/// (0 without faults).
pub fn fault_span_s(recording: &Recording, pids: &[u32]) -> Result<f64, fltrace_trace::Error> {
    let mut last = recording.session.start_ns;
    for &pid in pids {
        if let Some((_, end)) =
            fltrace_trace::time_range(&fltrace_trace::files::faults(&recording.dir, pid))?
        {
            last = last.max(end);
        }
    }
    Ok(last.saturating_sub(recording.session.start_ns) as f64 / 1e9)
}

/// A `--time` window that starts after the last fault of `pids`, said as an error; `None`
/// for one that holds some of the recording (or for no window).
pub fn outside_window(
    recording: &Recording,
    pids: &[u32],
    window_s: Option<(f64, f64)>,
) -> Result<Option<OutsideRecording>, fltrace_trace::Error> {
    let Some(window_s) = window_s else {
        return Ok(None);
    };
    let span_s = fault_span_s(recording, pids)?;
    // Times are kept in nanoseconds: a window starting within one of the last fault holds it.
    Ok((window_s.0 > span_s + 1e-9).then(|| OutsideRecording {
        window_s,
        span_s,
        command: recording.session.command.clone(),
    }))
}

/// Why a recording could not be loaded.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    /// Finding or reading the recording.
    #[error(transparent)]
    Trace(#[from] fltrace_trace::Error),
    /// The `--time` window is outside the recording.
    #[error(transparent)]
    Outside(#[from] OutsideRecording),
    /// A file of a finished recording changed or was cut since.
    #[error("{0}: --salvage reads what is left of the recording")]
    Corrupt(fltrace_trace::Error),
    /// Reading one process's trace.
    #[error("loading the trace of process {pid}")]
    Process {
        /// The process.
        pid: u32,
        /// What went wrong.
        #[source]
        source: fltrace_trace::Error,
    },
    /// Allocations were asked for and no process has them.
    #[error("{NO_ALLOCS}")]
    NoAllocs,
}

/// How many processes the report's footer names.
pub const PROCESSES_LISTED: usize = 20;

/// The processes of one recording, symbolized.
pub struct Loaded {
    /// The recording.
    pub recording: Recording,
    /// With [`FaultsHeld::Counted`], the faults are not loaded (`faults` is empty): see
    /// `counts`.
    pub traces: Vec<(ProcessTrace, ResolvedStacks)>,
    /// The faults of each of `traces` counted per (stack, flags), after the time window and
    /// the tracer's own faults are left out.
    pub counts: Vec<FaultCounts>,
    /// The allocation stacks of each of `traces`, resolved if asked for (else empty).
    pub alloc_stacks: Vec<ResolvedStacks>,
    /// With [`FaultsHeld::Counted`], the allocations of each of `traces` recorded with them,
    /// paired in one pass ([`crate::stream_allocs`]; its `allocs` are then not loaded), its
    /// faults attributed, those `--focus` and the tracer's leave out left out.
    pub streamed: Vec<Option<crate::StreamedAllocs>>,
    /// Records the kernel dropped, from the stats files.
    pub lost: u64,
    /// Faults taken by fltrace's own work in the traced processes.
    pub tracer_faults: u64,
    /// The frames skipped as call sites, and the faults `--focus` left out.
    pub skipped: Skipped,
    /// Whether those are in `traces`.
    pub tracer_included: bool,
    /// What the reader should know, in order: an unfinished recording, the archive used,
    /// files of another build than recorded.
    pub notes: Vec<String>,
}

/// The debug files as the environment says, and the archive given or the one beside the
/// recordings in `dir`.
pub fn debug_config(dir: &Path, archive: Option<&Path>) -> DebugConfig {
    let mut config = DebugConfig::from_env();
    config.archive = archive.map(Path::to_owned).or_else(|| {
        let beside = dir.join(ARCHIVE_DIR);
        beside.is_dir().then_some(beside)
    });
    config.recording_dir = Some(dir.to_owned());
    config
}

/// The warning `--salvage` gives for a corrupt file before reading what is left of it.
pub fn salvage_warning(corrupt: &fltrace_trace::Error) -> String {
    format!("warning: {corrupt}; reading what is left of the recording (--salvage)")
}

/// The note saying which archive symbolizes, if one does.
pub fn archive_note(config: &DebugConfig) -> Option<String> {
    let archive = config.archive.as_ref()?;
    Some(format!(
        "symbolizing with the archive {}",
        archive.display()
    ))
}

/// The recording in `dir` that `pid` picks (the newest without one), its files checked
/// against the checksums written when it finished: one changed since is corrupt, said before
/// anything of it is read (a table cut short would read as unfinished, a changed value as a
/// fact).
pub fn find_recording(dir: &Path, pid: Option<u32>) -> Result<Recording, fltrace_trace::Error> {
    let (recording, corrupt) = find_recording_salvaging(dir, pid)?;
    match corrupt.into_iter().next() {
        Some(error) => Err(error),
        None => Ok(recording),
    }
}

/// As [`find_recording`], but a corrupt file is returned beside the recording rather than
/// as the error (`--salvage`): the caller warns of it and reads what still reads.
pub fn find_recording_salvaging(
    dir: &Path,
    pid: Option<u32>,
) -> Result<(Recording, Vec<fltrace_trace::Error>), fltrace_trace::Error> {
    let recording = match pid {
        Some(pid) => Recording::with_pid(dir, pid)?,
        None => Recording::latest(dir)?,
    };
    let mut corrupt = Vec::new();
    for chosen in recording.chosen_pids(pid) {
        match fltrace_trace::checksums::verify(dir, chosen) {
            Ok(_) => {}
            Err(error @ fltrace_trace::Error::Corrupt { .. }) => corrupt.push(error),
            Err(error) => return Err(error),
        }
    }
    Ok((recording, corrupt))
}

/// `window_s`, seconds from `start_ns`, as a range of nanoseconds since the Unix epoch.
pub fn window_ns(start_ns: u64, window_s: Option<(f64, f64)>) -> Option<std::ops::Range<u64>> {
    window_s.map(|(from, to)| {
        start_ns.saturating_add((from * 1e9) as u64)..start_ns.saturating_add((to * 1e9) as u64)
    })
}

/// Loads the recording that `options` pick.
pub fn load(options: &LoadOptions) -> Result<Loaded, LoadError> {
    let dir = options.dir.as_path();
    let (recording, mut corrupt) = find_recording_salvaging(dir, options.pid)?;
    if !options.salvage && !corrupt.is_empty() {
        return Err(LoadError::Corrupt(corrupt.swap_remove(0)));
    }
    let pids = recording.chosen_pids(options.pid);
    let mut notes: Vec<String> = corrupt.iter().map(salvage_warning).collect();
    notes.extend(
        unfinished_notes(&recording)?
            .into_iter()
            .map(|note| format!("warning: {note}")),
    );
    // Before the slow part: symbolizing.
    if options.alloc_stacks == AllocStacks::Required
        && !pids.iter().any(|&pid| recording.has_allocs(pid))
    {
        return Err(LoadError::NoAllocs);
    }
    if let Some(outside) = outside_window(&recording, &pids, options.window_s)? {
        return Err(outside.into());
    }
    let window = window_ns(recording.session.start_ns, options.window_s);
    let config = debug_config(dir, options.archive.as_deref());
    notes.extend(archive_note(&config));
    let mut symbolizer = Symbolizer::with_debug_config(config);
    let mut loaded = Loaded {
        traces: Vec::new(),
        counts: Vec::new(),
        alloc_stacks: Vec::new(),
        streamed: Vec::new(),
        lost: 0,
        tracer_faults: 0,
        skipped: Skipped::default(),
        tracer_included: options.include_tracer,
        notes: Vec::new(),
        recording,
    };
    for pid in pids {
        let recording = &loaded.recording;
        let process = |source| LoadError::Process { pid, source };
        // Threads are told apart by each fault's tid, which streamed counts lack.
        let held = if options.threads.is_empty() && !options.allocs_whole() {
            options.faults
        } else {
            FaultsHeld::All
        };
        let (mut trace, mut counts) = match held {
            FaultsHeld::All => {
                // Without the oracle, the allocation events are streamed below, not held.
                let mut trace = if options.allocs_whole() {
                    recording.load(pid)
                } else {
                    recording.load_without_alloc_events(pid)
                }
                .map_err(process)?;
                if let Some(window) = &window {
                    trace.faults.retain(|f| window.contains(&f.time_ns));
                }
                options.threads.retain(&mut trace);
                let counts = FaultCounts::of(&trace.faults);
                (trace, counts)
            }
            FaultsHeld::Counted => {
                // Allocation events are paired in one pass below, never held.
                let (trace, row_groups) = if recording.has_allocs(pid) {
                    recording.load_streaming_allocs(pid)
                } else {
                    recording.load_streaming(pid)
                }
                .map_err(process)?;
                let counts = FaultCounts::stream(row_groups, window.clone()).map_err(process)?;
                (trace, counts)
            }
        };
        let refused = fltrace_trace::files::refused_inputs(dir, pid);
        let stats = fltrace_trace::files::stats(dir, pid);
        // A planted stats file is named below and left unread.
        if !refused
            .iter()
            .any(|e| error_path(e) == Some(stats.as_path()))
            && let Ok(Some(lost)) = fltrace_trace::stats::last_value(&stats, "lost")
        {
            loaded.lost = loaded.lost.max(lost);
        }
        notes.extend(
            refused
                .iter()
                .map(|e| format!("warning: {e}; the report goes on without it")),
        );
        let mut stacks = symbolizer.resolve_stacks(&trace);
        stacks.call_site = options.call_site;
        loaded.tracer_faults +=
            separate_tracer_counts(&mut counts, &mut stacks, options.include_tracer);
        let mut alloc_stacks =
            if options.alloc_stacks != AllocStacks::Skip && recording.has_allocs(pid) {
                symbolizer.resolve_alloc_stacks(&trace)
            } else {
                ResolvedStacks::default()
            };
        let mut streamed = None;
        let rules = if recording.has_allocs(pid) {
            if options.alloc_stacks == AllocStacks::Skip {
                alloc_stacks = symbolizer.resolve_alloc_stacks(&trace);
            }
            let detected = match held {
                #[cfg(any(test, feature = "oracle"))]
                FaultsHeld::All if options.allocs_whole() => crate::detect_allocators(
                    &options.frame_rules,
                    &trace.faults,
                    &stacks,
                    &crate::Lifetimes::of_trace(&trace),
                    &alloc_stacks,
                ),
                FaultsHeld::Counted if options.allocs_from_record && !options.allocs_whole() => {
                    // What the recorder's pairing found, else the calls paired here.
                    let path = fltrace_trace::files::alloc_stats(&recording.dir, pid);
                    let summary = path
                        .exists()
                        .then(|| fltrace_trace::read_alloc_stats(&path));
                    match summary {
                        Some(Ok(summary)) => {
                            streamed = Some(crate::StreamedAllocs::from_record_time(&summary));
                            // No fault was matched to a block: no allocator found from them.
                            Vec::new()
                        }
                        unread => {
                            if let Some(Err(e)) = unread {
                                notes.push(format!(
                                    "warning: {e}; the calls of process {pid} are paired instead"
                                ));
                            }
                            let pass = crate::stream_allocs(
                                recording,
                                pid,
                                &trace,
                                window.clone(),
                                &|_| true,
                            )
                            .map_err(process)?;
                            let detected = crate::detect_allocators_counted(
                                &options.frame_rules,
                                pass.hits(),
                                &stacks,
                                &alloc_stacks,
                            );
                            streamed = Some(pass);
                            detected
                        }
                    }
                }
                FaultsHeld::Counted => {
                    // Faults with their addresses, merged with the events by time.
                    let pass =
                        crate::stream_allocs(recording, pid, &trace, window.clone(), &|_| true)
                            .map_err(process)?;
                    let detected = crate::detect_allocators_counted(
                        &options.frame_rules,
                        pass.hits(),
                        &stacks,
                        &alloc_stacks,
                    );
                    streamed = Some(pass);
                    detected
                }
                FaultsHeld::All => {
                    // The faults held, as the window and threads left them.
                    let pass = crate::stream_allocs_over(recording, pid, &trace, &trace.faults)
                        .map_err(process)?;
                    let detected = crate::detect_allocators_counted(
                        &options.frame_rules,
                        pass.hits(),
                        &stacks,
                        &alloc_stacks,
                    );
                    streamed = Some(pass);
                    detected
                }
            };
            // A report that counts no fault takes no allocator found from the faults (its
            // rules apply to fault stacks only): none is said, whichever path paired.
            if options.allocs_from_record {
                options.frame_rules.clone()
            } else {
                options.frame_rules.with_detected(detected)
            }
        } else {
            options.frame_rules.clone()
        };
        let focused_before = loaded.skipped.unfocused;
        apply_rules(&rules, &mut stacks, &mut counts, &mut loaded.skipped);
        let unfocused = loaded.skipped.unfocused > focused_before;
        if !options.include_tracer || unfocused {
            trace.faults.retain(|f| {
                (options.include_tracer || !f.flags.has(fltrace_trace::FaultFlags::TRACER))
                    && (!unfocused || rules.keeps(stacks.get(f.stack_id)))
            });
        }
        if let Some(streamed) = &mut streamed {
            streamed.retain_faults(|stack_id, flags| {
                (options.include_tracer || !flags.has(fltrace_trace::FaultFlags::TRACER))
                    && (!unfocused || rules.keeps(stacks.get(stack_id)))
            });
        }
        loaded.streamed.push(streamed);
        if options.alloc_stacks == AllocStacks::Skip {
            alloc_stacks = ResolvedStacks::default();
        }
        alloc_stacks.call_site = options.call_site;
        // Allocation sites skip the same allocators, but not those found from the faults:
        // the line that called malloc stays the allocation's site. `--focus` filters faults
        // only.
        apply_rules(
            &options.frame_rules,
            &mut alloc_stacks,
            &mut FaultCounts::new(),
            &mut Skipped::default(),
        );
        loaded.counts.push(counts);
        loaded.alloc_stacks.push(alloc_stacks);
        loaded.traces.push((trace, stacks));
    }
    notes.extend(
        symbolizer
            .take_warnings()
            .into_iter()
            .map(|warning| format!("warning: {warning}")),
    );
    loaded.notes = notes;
    Ok(loaded)
}

/// The file a trace-file error names, if it names one.
fn error_path(error: &fltrace_trace::Error) -> Option<&Path> {
    match error {
        fltrace_trace::Error::Format { path, .. }
        | fltrace_trace::Error::Io { path, .. }
        | fltrace_trace::Error::Corrupt { path, .. } => Some(path),
        _ => None,
    }
}

/// What a reader is told of tables without their final footer, one line each kind of
/// cause: a recording never finished (the recorder was killed, or the disk filled) and how
/// much was recovered; or, for each file of a finished recording cut since (`--salvage`),
/// what was recovered of it, from where. Empty when every table is whole.
pub fn unfinished_notes(recording: &Recording) -> Result<Vec<String>, fltrace_trace::Error> {
    let tables = recording.unfinished_tables()?;
    fn name_of(kind: &str) -> &str {
        match kind {
            "mmaps" => "mappings",
            "allocs" => "allocation calls",
            "allocstacks" => "allocation stacks",
            "allocsums" => "allocation totals",
            other => other,
        }
    }
    let mut notes = Vec::new();
    for table in tables.iter().filter(|t| t.finished_len.is_some()) {
        let file = table
            .path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let recorded = match table.kind {
            "faults" => fltrace_trace::stats::last_value(
                &fltrace_trace::files::stats(&recording.dir, table.pid),
                "faults",
            )
            .ok()
            .flatten()
            .map(|n| format!(" of the {n} recorded"))
            .unwrap_or_default(),
            _ => String::new(),
        };
        notes.push(format!(
            "salvaged {file}, cut to {} of its {} bytes: {} {}{recorded} recovered, the rows up to its last intact checkpoint (byte {}); what followed it is lost",
            table.len,
            table.finished_len.unwrap_or(0),
            table.rows,
            name_of(table.kind),
            table.checkpoint_end,
        ));
    }
    let unfinished: Vec<&fltrace_trace::UnfinishedTable> =
        tables.iter().filter(|t| t.finished_len.is_none()).collect();
    if unfinished.is_empty() {
        return Ok(notes);
    }
    let rows = |kind: &str| -> u64 {
        unfinished
            .iter()
            .filter(|t| t.kind == kind)
            .map(|t| t.rows)
            .sum()
    };
    let mut recovered = Vec::new();
    for kind in ["faults", "stacks", "mmaps", "allocs", "allocstacks"] {
        if unfinished.iter().any(|t| t.kind == kind) {
            recovered.push(format!("{} {}", rows(kind), name_of(kind)));
        }
    }
    let mut pids: Vec<u32> = unfinished.iter().map(|t| t.pid).collect();
    pids.dedup();
    notes.push(format!(
        "the recording is incomplete (fltrace stopped before finishing it): read up to its last checkpoint, {} recovered of process{} {}",
        recovered.join(", "),
        if pids.len() == 1 { "" } else { "es" },
        pids.iter()
            .map(u32::to_string)
            .collect::<Vec<_>>()
            .join(", ")
    ));
    Ok(notes)
}

impl Loaded {
    /// The faults of every process, as counted.
    pub fn total_faults(&self) -> u64 {
        self.counts.iter().map(FaultCounts::total).sum()
    }

    /// Each process's counted faults with its resolved stacks, for grouping.
    pub fn counted(&self) -> impl Iterator<Item = (&FaultCounts, &ResolvedStacks)> + Clone {
        self.counts.iter().zip(self.traces.iter().map(|(_, s)| s))
    }

    /// Each process's trace, resolved stacks and counted faults, for the exports.
    pub fn counted_sources(&self) -> impl Iterator<Item = CountedSource<'_>> + Clone {
        self.traces
            .iter()
            .zip(&self.counts)
            .map(|((trace, stacks), counts)| (trace, stacks, counts))
    }

    /// Each process's pid and names (one per exec: `sh`, then `cc1plus`), in load order.
    pub fn processes(&self) -> Vec<(u32, Vec<String>)> {
        self.traces
            .iter()
            .map(|(trace, _)| (trace.pid, crate::process_names(trace)))
            .collect()
    }

    /// The line saying which processes the recording holds: `processes: 12 g++, 13 cc1plus,
    /// 14 as`, the first [`PROCESSES_LISTED`] of them.
    pub fn processes_line(&self) -> String {
        let processes = self.processes();
        let mut listed: Vec<String> = processes
            .iter()
            .take(PROCESSES_LISTED)
            .map(|(pid, names)| format!("{pid} {}", names.join(" then ")))
            .collect();
        if processes.len() > PROCESSES_LISTED {
            listed.push(format!("and {} more", processes.len() - PROCESSES_LISTED));
        }
        format!("processes: {}", listed.join(", "))
    }

    /// The faults counted whose stack lacks its outer frames ([`ResolvedStacks::truncated`]).
    pub fn truncated_faults(&self) -> u64 {
        self.counted()
            .map(|(counts, stacks)| {
                counts
                    .per_stack()
                    .into_iter()
                    .filter(|&(stack_id, _)| stacks.truncated(stack_id))
                    .map(|(_, count)| count)
                    .sum::<u64>()
            })
            .sum()
    }

    /// The line saying how many faults have a truncated stack, if any do.
    pub fn truncated_note(&self) -> Option<String> {
        let truncated = self.truncated_faults();
        (truncated > 0).then(|| {
            format!(
                "{} with truncated stacks (outer frames missing; drawn under `[truncated]`)",
                crate::truncated_share(truncated, self.total_faults())
            )
        })
    }

    /// The lines saying which frames were skipped as call sites (allocators, `--hide`) and
    /// how many faults `--focus` left out.
    pub fn skipped_notes(&self) -> Vec<String> {
        self.skipped.notes()
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

    /// The traced command line, as the first process's faults file says.
    pub fn command(&self) -> &str {
        self.traces
            .first()
            .and_then(|(t, _)| t.meta(keys::COMMAND))
            .unwrap_or("")
    }

    /// The recording's directory.
    pub fn dir(&self) -> &Path {
        &self.recording.dir
    }

    /// Whether process `pid` was recorded with `record --allocs`.
    pub fn has_allocs(&self, pid: u32) -> bool {
        self.recording.has_allocs(pid)
    }

    /// Seconds from the start of the recording to `time_ns`.
    pub fn seconds(&self, time_ns: u64) -> f64 {
        time_ns.saturating_sub(self.recording.session.start_ns) as f64 / 1e9
    }
}
