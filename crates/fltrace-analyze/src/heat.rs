//! What `fltrace heatmap` draws: the access samples and range-trace ranges within the
//! selected time and addresses, and over a process's faults the largest allocation blocks,
//! labelled with their allocation sites (Heimdallr draws allocations over its access map the
//! same way).

use std::ops::Range;
use std::path::{Path, PathBuf};

use rustc_hash::FxHashSet;

use fltrace_trace::{
    AccessRecord, Fault, ProcessTrace, RangeSample, RangeTraceKind, Recording, VirtAddr, files,
};

use crate::{
    LargeBlock, LoadOptions, Location, ResolvedStacks, Symbolizer, call_site, range_heat, window_ns,
};
#[cfg(any(test, feature = "oracle"))]
use crate::{Lifetimes, largest_blocks};

/// What a heatmap draws (`heatmap --from`; each variant's doc is its help there).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
pub enum HeatSource {
    /// Page faults of a recording.
    Faults,
    /// `fltrace-data-wss-<pid>.csv`: bytes referenced per mapping and interval.
    Wss,
    /// `fltrace-data-damon-<pid>.csv`: DAMON's access counts per range and aggregation.
    Damon,
    /// `fltrace-data-access-<pid>.parquet`: PMU load and store samples (record --access-samples).
    Access,
}

impl HeatSource {
    /// The kind and extension of the trace files it reads, `fltrace-data-<kind>-<pid>.<ext>`.
    pub fn file_kind(self) -> (&'static str, &'static str) {
        match self {
            HeatSource::Faults => ("faults", "parquet"),
            HeatSource::Wss => ("wss", "csv"),
            HeatSource::Damon => ("damon", "csv"),
            HeatSource::Access => ("access", "parquet"),
        }
    }

    /// The command that writes those files.
    pub fn written_by(self) -> &'static str {
        match self {
            HeatSource::Faults => "record",
            HeatSource::Wss => "wss",
            HeatSource::Damon => "wss --damon",
            HeatSource::Access => "record --access-samples",
        }
    }

    /// The file kind of its map, `fltrace-data-<name>-<pid>.png`: `heatmap`, `heatmap-wss`...
    pub fn output_name(self) -> String {
        match self {
            HeatSource::Faults => "heatmap".to_owned(),
            source => format!("heatmap-{}", source.file_kind().0),
        }
    }
}

/// Why a heatmap has nothing to read.
#[derive(Debug, thiserror::Error)]
pub enum HeatInputError {
    /// Finding or reading the trace failed.
    #[error(transparent)]
    Trace(#[from] fltrace_trace::Error),
    /// No trace file of the kind asked for.
    #[error("no fltrace-data-{kind}-<pid>.{ext} in {}: run `fltrace {command}` first", dir.display())]
    Missing {
        /// The files' kind.
        kind: &'static str,
        /// Their extension.
        ext: &'static str,
        /// Where they were looked for.
        dir: PathBuf,
        /// What writes them.
        command: &'static str,
    },
    /// The recording traced no process.
    #[error("the recording has no process")]
    NoProcess,
    /// A trace file could not be read.
    #[error("reading {} (written by `fltrace {command}`)", path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// What writes it.
        command: &'static str,
        /// Why.
        #[source]
        source: fltrace_trace::Error,
    },
    /// The `--time` window is outside the recording.
    #[error(transparent)]
    Outside(#[from] crate::OutsideRecording),
    /// Nothing of the trace file lies in the time and addresses chosen.
    #[error("no {what} in {} in the selected time and address ranges", path.display())]
    NothingSelected {
        /// The file.
        path: PathBuf,
        /// What it holds: `access samples`, `accessed ranges`.
        what: &'static str,
    },
}

/// The PMU samples a map of `--from access` draws: whose, the first sample's time (the map's
/// time origin) and those chosen.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AccessHeat {
    /// The process sampled.
    pub pid: u32,
    /// The first sample's time, ns.
    pub start_ns: u64,
    /// The samples in the time window and addresses chosen.
    pub samples: Vec<AccessRecord>,
}

impl AccessHeat {
    /// The samples of the process `options` choose (else of the newest samples file in
    /// `options.dir`) in its time window and `addr` (none is an error).
    pub fn load(
        options: &LoadOptions,
        addr: Option<(u64, u64)>,
    ) -> Result<AccessHeat, HeatInputError> {
        let (pid, path) = heat_input(&options.dir, HeatSource::Access, options.pid)?;
        let (start_ns, samples) = heat_access_samples(&path, options.window_s, addr)?;
        Ok(AccessHeat {
            pid,
            start_ns,
            samples,
        })
    }
}

/// The ranges a map of `--from wss` or `--from damon` draws: whose, the trace's kind and the
/// ranges chosen.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RangeHeat {
    /// The process traced.
    pub pid: u32,
    /// What the trace measured.
    pub kind: RangeTraceKind,
    /// The ranges in the time window and addresses chosen.
    pub ranges: Vec<HeatRange>,
}

impl RangeHeat {
    /// The ranges of the `source` trace of the process `options` choose (else of the newest
    /// such trace in `options.dir`) in its time window and `addr` (none is an error).
    pub fn load(
        options: &LoadOptions,
        source: HeatSource,
        addr: Option<(u64, u64)>,
    ) -> Result<RangeHeat, HeatInputError> {
        let (pid, path) = heat_input(&options.dir, source, options.pid)?;
        let (kind, ranges) = heat_range_trace(&path, options.window_s, addr)?;
        Ok(RangeHeat { pid, kind, ranges })
    }
}

/// The PMU samples of `path` (`record --access-samples`) within `time` (seconds from the
/// first sample) and `addr`: the first sample's time, the map's origin, and those chosen
/// (none is an error).
pub fn heat_access_samples(
    path: &Path,
    time: Option<(f64, f64)>,
    addr: Option<(u64, u64)>,
) -> Result<(u64, Vec<AccessRecord>), HeatInputError> {
    let samples = fltrace_trace::read_access(path).map_err(|source| HeatInputError::Read {
        path: path.to_owned(),
        command: "record --access-samples",
        source,
    })?;
    let (start, selected) = access_samples_in(&samples, time, addr);
    if selected.is_empty() {
        return Err(HeatInputError::NothingSelected {
            path: path.to_owned(),
            what: "access samples",
        });
    }
    Ok((start, selected.into_iter().copied().collect()))
}

/// The ranges of the range trace at `path` (`fltrace wss`, `wss --damon`) within `time`
/// and `addr`, with the trace's kind (none is an error).
pub fn heat_range_trace(
    path: &Path,
    time: Option<(f64, f64)>,
    addr: Option<(u64, u64)>,
) -> Result<(RangeTraceKind, Vec<HeatRange>), HeatInputError> {
    let (kind, samples) =
        fltrace_trace::read_range_trace(path).map_err(|source| HeatInputError::Read {
            path: path.to_owned(),
            command: "wss",
            source,
        })?;
    let ranges = heat_ranges(kind, &samples, time, addr);
    if ranges.is_empty() {
        return Err(HeatInputError::NothingSelected {
            path: path.to_owned(),
            what: "accessed ranges",
        });
    }
    Ok((kind, ranges))
}

/// The trace file of `source` a map draws, with its process: `pid`'s, else the newest in
/// `dir` (for the range traces and access samples, which are not recordings of their own).
pub fn heat_input(
    dir: &Path,
    source: HeatSource,
    pid: Option<u32>,
) -> Result<(u32, PathBuf), HeatInputError> {
    let (kind, ext) = source.file_kind();
    if let Some(pid) = pid {
        return Ok((pid, files::path(dir, kind, pid, ext)));
    }
    files::newest(dir, kind, ext)?.ok_or_else(|| HeatInputError::Missing {
        kind,
        ext,
        dir: dir.to_owned(),
        command: source.written_by(),
    })
}

/// The process a map of faults draws (one address space: the one `options` choose, else
/// the command itself) and which of its faults: those in the window, `addr` and the threads
/// chosen.
pub fn heat_faults(
    recording: &Recording,
    options: &LoadOptions,
    addr: Option<(u64, u64)>,
) -> Result<(u32, FaultSelection), HeatInputError> {
    let pid = options
        .pid
        .or_else(|| recording.root_pid())
        .ok_or(HeatInputError::NoProcess)?;
    if let Some(outside) = crate::outside_window(recording, &[pid], options.window_s)? {
        return Err(outside.into());
    }
    let mut chosen = FaultSelection::new(recording.session.start_ns, options.window_s, addr);
    if !options.threads.is_empty() {
        chosen = chosen.of_threads(&options.threads, recording.load(pid)?);
    }
    Ok((pid, chosen))
}

/// ` cc1plus`: the names process `pid` ran under (` sh then cc1plus` across an exec), as its
/// faults file's footer says; empty for recordings without names.
pub fn heat_process_names(faults: &Path, pid: u32) -> String {
    let metadata = fltrace_trace::FaultRowGroups::open(faults)
        .map(|groups| groups.metadata())
        .unwrap_or_default();
    let names = fltrace_trace::main_thread_names(&metadata, pid);
    if names.is_empty() {
        String::new()
    } else {
        format!(" {}", names.join(" then "))
    }
}

/// The `count` largest blocks of `pid`'s allocations, labelled with their allocation site,
/// those alive in `chosen`'s time window: the events read a row group at a time, memory
/// following the blocks alive at once (with `whole`, every event held: the tests' oracle,
/// [`crate::WHOLE_TABLE_ENV`]).
pub fn heat_blocks(
    recording: &Recording,
    pid: u32,
    count: usize,
    chosen: &FaultSelection,
    symbolizer: &mut Symbolizer,
    whole: bool,
) -> Result<Vec<LabelledBlock>, fltrace_trace::Error> {
    let mut blocks = heat_blocks_of(recording, pid, count, symbolizer, whole)?;
    blocks.retain(|b| chosen.overlaps_lifetime(b.start_ns, b.end_ns));
    Ok(blocks)
}

fn heat_blocks_of(
    recording: &Recording,
    pid: u32,
    count: usize,
    symbolizer: &mut Symbolizer,
    whole: bool,
) -> Result<Vec<LabelledBlock>, fltrace_trace::Error> {
    #[cfg(any(test, feature = "oracle"))]
    if whole {
        let trace = recording.load(pid)?;
        let stacks = symbolizer.resolve_alloc_stacks(&trace);
        return Ok(largest_labelled_blocks(&trace, &stacks, count));
    }
    // Never asked for without the oracle ([`LoadOptions::allocs_whole`]).
    #[cfg(not(any(test, feature = "oracle")))]
    let _ = whole;
    let (trace, _) = recording.load_streaming_allocs(pid)?;
    let stacks = symbolizer.resolve_alloc_stacks(&trace);
    let totals = crate::stream_largest_blocks(recording, pid, &trace, count)?;
    let end = totals
        .last_event_ns
        .max(crate::last_fault_ns(recording, pid)?);
    Ok(labelled_blocks(&totals.largest, end, &stacks))
}

/// The faults a map of faults draws: those within a time window (seconds since the recording
/// started) and an address range, each start inclusive and end exclusive, and of the threads
/// chosen. Asked of one fault at a time, so that a faults file is filtered a row group at a
/// time.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FaultSelection {
    window: Option<Range<u64>>,
    addr: Option<(u64, u64)>,
    /// With `--tid`/`--comm`: the (time, thread, address) of every fault of those threads.
    threads: Option<FxHashSet<(u64, u32, u64)>>,
}

impl FaultSelection {
    /// The faults within `time` (seconds since `start_ns`, the recording's start) and `addr`;
    /// `None` selects all.
    pub fn new(start_ns: u64, time: Option<(f64, f64)>, addr: Option<(u64, u64)>) -> Self {
        FaultSelection {
            window: window_ns(start_ns, time),
            addr,
            threads: None,
        }
    }

    /// Only the faults of `trace` still there once `threads` kept its threads' faults (a
    /// thread's name is known per exec, from the whole trace, not from a faults row).
    pub fn of_threads(mut self, threads: &crate::ThreadFilter, mut trace: ProcessTrace) -> Self {
        if !threads.is_empty() {
            threads.retain(&mut trace);
            self.threads = Some(
                trace
                    .faults
                    .iter()
                    .map(|f| (f.time_ns, f.tid, f.addr.get()))
                    .collect(),
            );
        }
        self
    }

    /// Whether a block alive from `start_ns` to `end_ns` (allocation times, to a tick of the
    /// allocation clock: [`fltrace_trace::ALLOC_CLOCK_TICK_NS`]) may have lived in the window.
    /// Its recorded times may precede its real ones by a tick, so a block that seems to end
    /// just before the window, such as one of the first blocks of a program, which the clock
    /// can stamp before the program's first fault, is kept.
    pub fn overlaps_lifetime(&self, start_ns: u64, end_ns: u64) -> bool {
        self.window.as_ref().is_none_or(|w| {
            end_ns.saturating_add(fltrace_trace::ALLOC_CLOCK_TICK_NS) >= w.start && start_ns < w.end
        })
    }

    /// Whether `fault` is drawn.
    pub fn contains(&self, fault: &Fault) -> bool {
        self.window
            .as_ref()
            .is_none_or(|w| w.contains(&fault.time_ns))
            && self
                .addr
                .is_none_or(|(a, b)| (a..b).contains(&fault.addr.get()))
            && self
                .threads
                .as_ref()
                .is_none_or(|kept| kept.contains(&(fault.time_ns, fault.tid, fault.addr.get())))
    }
}

/// The access samples within `time` (seconds since the first sample) and `addr` (start
/// inclusive, end exclusive), with the time of the first sample of all: the map's origin.
pub fn access_samples_in(
    samples: &[AccessRecord],
    time: Option<(f64, f64)>,
    addr: Option<(u64, u64)>,
) -> (u64, Vec<&AccessRecord>) {
    let start = samples.iter().map(|s| s.time_ns).min().unwrap_or(0);
    let selected = samples
        .iter()
        .filter(|s| {
            time.is_none_or(|(a, b)| {
                let t = (s.time_ns - start) as f64 / 1e9;
                (a..b).contains(&t)
            })
        })
        .filter(|s| addr.is_none_or(|(a, b)| (a..b).contains(&s.addr.get())))
        .collect();
    (start, selected)
}

/// A range of a range trace as a time-by-address map takes it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HeatRange {
    /// The sample's time, ns since sampling began.
    pub time_ns: u64,
    /// First address (clipped to the selected addresses).
    pub start: VirtAddr,
    /// Address after the last (clipped).
    pub end: VirtAddr,
    /// How hot it draws ([`range_heat`]).
    pub weight: u32,
}

/// The ranges of a range trace within `time` (seconds since sampling began), clipped to
/// `addr`; those that draw nothing (no weight, or nothing left after clipping) left out.
pub fn heat_ranges(
    kind: RangeTraceKind,
    samples: &[RangeSample],
    time: Option<(f64, f64)>,
    addr: Option<(u64, u64)>,
) -> Vec<HeatRange> {
    samples
        .iter()
        .filter(|s| time.is_none_or(|(a, b)| (a..b).contains(&s.time_s)))
        .filter_map(|s| {
            let weight = range_heat(kind, s);
            let (start, end) = match addr {
                Some((a, b)) => (s.start.max(VirtAddr::new(a)), s.end.min(VirtAddr::new(b))),
                None => (s.start, s.end),
            };
            (weight > 0 && end > start).then_some(HeatRange {
                time_ns: (s.time_s * 1e9) as u64,
                start,
                end,
                weight,
            })
        })
        .collect()
}

/// An allocation block over its lifetime, labelled with its allocation site.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LabelledBlock {
    /// When it came to life.
    pub start_ns: u64,
    /// When it ended (the end of the trace for a block still alive then).
    pub end_ns: u64,
    /// First address.
    pub addr: VirtAddr,
    /// Bytes.
    pub size: u64,
    /// `function file:line` of its allocation site, else the function, else `?`.
    pub label: String,
}

/// The label of an allocation site: `function file:line`, the function without a line, `?`
/// without a site.
pub fn site_label(site: Option<&Location>) -> String {
    match site {
        Some(l) if l.has_line() => format!("{} {}:{}", l.function, l.short_file(), l.line),
        Some(l) => l.function.to_string(),
        None => "?".into(),
    }
}

/// The `count` largest blocks of `trace`, largest first, labelled with their allocation site
/// among `stacks` (the trace's allocation stacks, resolved): its events held whole, the
/// oracle of [`labelled_blocks`] over [`crate::stream_largest_blocks`].
#[cfg(any(test, feature = "oracle"))]
pub fn largest_labelled_blocks(
    trace: &ProcessTrace,
    stacks: &ResolvedStacks,
    count: usize,
) -> Vec<LabelledBlock> {
    let lifetimes = Lifetimes::of_trace(trace);
    let blocks: Vec<LargeBlock> = largest_blocks(&lifetimes, count)
        .into_iter()
        .map(LargeBlock::from)
        .collect();
    labelled_blocks(&blocks, trace.end_ns(), stacks)
}

/// `blocks` labelled with their allocation site among `stacks` (the process's allocation
/// stacks, resolved), those alive at the end drawn up to `end_ns` (the end of the trace).
pub fn labelled_blocks(
    blocks: &[LargeBlock],
    end_ns: u64,
    stacks: &ResolvedStacks,
) -> Vec<LabelledBlock> {
    blocks
        .iter()
        .map(|b| LabelledBlock {
            start_ns: b.start_ns,
            end_ns: b.end_ns.unwrap_or(end_ns),
            addr: b.addr,
            size: b.size,
            label: site_label(call_site(stacks.get(b.stack_id))),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each source reads its own files and names its map after them; without a pid the
    /// newest file is read, and none is an error naming the command that writes them.
    #[test]
    fn heat_inputs_and_names() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(
            heat_input(dir.path(), HeatSource::Damon, Some(7)).unwrap(),
            (7, dir.path().join("fltrace-data-damon-7.csv"))
        );
        let missing = heat_input(dir.path(), HeatSource::Access, None).unwrap_err();
        assert_eq!(
            missing.to_string(),
            format!(
                "no fltrace-data-access-<pid>.parquet in {}: run `fltrace record --access-samples` first",
                dir.path().display()
            )
        );
        std::fs::write(dir.path().join("fltrace-data-wss-12.csv"), "").unwrap();
        assert_eq!(
            heat_input(dir.path(), HeatSource::Wss, None).unwrap(),
            (12, dir.path().join("fltrace-data-wss-12.csv"))
        );
        let names: Vec<String> = [
            HeatSource::Faults,
            HeatSource::Wss,
            HeatSource::Damon,
            HeatSource::Access,
        ]
        .map(HeatSource::output_name)
        .into();
        assert_eq!(
            names,
            ["heatmap", "heatmap-wss", "heatmap-damon", "heatmap-access"]
        );
        let gone = dir.path().join("fltrace-data-damon-3.csv");
        let error = heat_range_trace(&gone, None, None).unwrap_err();
        assert_eq!(
            error.to_string(),
            format!("reading {} (written by `fltrace wss`)", gone.display())
        );
        let error = heat_access_samples(&gone, None, None).unwrap_err();
        assert!(
            error
                .to_string()
                .ends_with("(written by `fltrace record --access-samples`)")
        );
    }

    /// A map of a range trace draws the newest trace's process, or the one `-p` names,
    /// within the window; access samples name the file they miss.
    #[test]
    fn heat_loads_choose_the_trace_of_the_process() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(
            dir.path().join("fltrace-data-damon-9.csv"),
            "time_s,start,end,nr_accesses\n0.5,0x7f0000,0x7f2000,7\n2.5,0x7f0000,0x7f1000,3\n",
        )
        .unwrap();
        let mut options = LoadOptions::new(dir.path().to_owned(), Default::default());
        options.window_s = Some((0.0, 1.0));
        let heat = RangeHeat::load(&options, HeatSource::Damon, None).unwrap();
        assert_eq!((heat.pid, heat.kind), (9, RangeTraceKind::DamonAccesses));
        assert_eq!(
            heat.ranges,
            [HeatRange {
                time_ns: 500_000_000,
                start: VirtAddr::new(0x7f_0000),
                end: VirtAddr::new(0x7f_2000),
                weight: 7,
            }]
        );
        options.pid = Some(4);
        let missing = RangeHeat::load(&options, HeatSource::Damon, None).unwrap_err();
        assert_eq!(
            missing.to_string(),
            format!(
                "reading {} (written by `fltrace wss`)",
                dir.path().join("fltrace-data-damon-4.csv").display()
            )
        );
        options.pid = None;
        let none = AccessHeat::load(&options, None).unwrap_err();
        assert!(
            none.to_string()
                .starts_with("no fltrace-data-access-<pid>.parquet in "),
            "{none}"
        );
    }

    fn location(function: &str, file: &str, line: u32) -> Location {
        Location {
            function: function.into(),
            file: file.into(),
            line,
            lib: "prog".into(),
            system: false,
        }
    }

    fn range(time_s: f64, start: u64, end: u64, value: u64) -> RangeSample {
        RangeSample {
            time_s,
            start: VirtAddr::new(start),
            end: VirtAddr::new(end),
            value,
        }
    }

    fn fault(time_ns: u64, addr: u64) -> Fault {
        Fault {
            time_ns,
            pid: 1,
            tid: 1,
            ip: fltrace_trace::CodeAddr::new(0x400000),
            addr: VirtAddr::new(addr),
            flags: fltrace_trace::FaultFlags::default(),
            stack_id: 0,
        }
    }

    /// Window and addresses take their start and leave out their end, to the nanosecond and
    /// the byte; the window counts from the recording's start.
    #[test]
    fn fault_selection_edges() {
        const START: u64 = 1_000_000_000_000;
        let selection = FaultSelection::new(START, Some((1.0, 2.0)), Some((0x2000, 0x3000)));
        let inside = 0x2800;
        let faults = [
            fault(START + 999_999_999, inside),
            fault(START + 1_000_000_000, inside),
            fault(START + 1_999_999_999, inside),
            fault(START + 2_000_000_000, inside),
            fault(START + 1_500_000_000, 0x1fff),
            fault(START + 1_500_000_000, 0x2000),
            fault(START + 1_500_000_000, 0x2fff),
            fault(START + 1_500_000_000, 0x3000),
        ];
        let kept: Vec<usize> = (0..faults.len())
            .filter(|&i| selection.contains(&faults[i]))
            .collect();
        assert_eq!(kept, vec![1, 2, 5, 6]);
        let all = FaultSelection::new(START, None, None);
        assert_eq!(faults.iter().filter(|f| all.contains(f)).count(), 8);
        let addresses_only = FaultSelection::new(START, None, Some((0x2000, 0x3000)));
        assert_eq!(
            faults.iter().filter(|f| addresses_only.contains(f)).count(),
            6
        );
    }

    /// A block is drawn in a window it may have lived in: its allocation times are to a tick,
    /// so one that seems to end less than a tick before the window is kept, one that ends
    /// earlier or starts at the window's end is not; without a window every block is.
    #[test]
    fn blocks_in_the_window_allow_a_tick_of_the_allocation_clock() {
        const START: u64 = 1_000_000_000_000;
        const TICK: u64 = fltrace_trace::ALLOC_CLOCK_TICK_NS;
        let window = FaultSelection::new(START, Some((1.0, 2.0)), None);
        let (from, to) = (START + 1_000_000_000, START + 2_000_000_000);
        let lifetimes = [
            (from - 5 * TICK, from - TICK),
            (from - 5 * TICK, from - TICK - 1),
            (from - TICK / 2, from - TICK / 2),
            (to - 1, to + TICK),
            (to, to + TICK),
        ];
        let drawn: Vec<bool> = lifetimes
            .iter()
            .map(|&(start, end)| window.overlaps_lifetime(start, end))
            .collect();
        assert_eq!(drawn, [true, false, true, true, false]);
        let all = FaultSelection::new(START, None, None);
        assert!(lifetimes.iter().all(|&(s, e)| all.overlaps_lifetime(s, e)));
    }

    #[test]
    fn heat_ranges_are_windowed_clipped_and_weighed() {
        let samples = [
            range(0.5, 0x1000, 0x3000, 0x1000),
            range(1.5, 0x1000, 0x3000, 0x2000),
            range(1.5, 0x8000, 0x9000, 0),
            range(2.5, 0x1000, 0x2000, 0x1000),
        ];
        let kind = RangeTraceKind::ReferencedBytes;
        assert_eq!(heat_ranges(kind, &samples, None, None).len(), 3);
        assert_eq!(
            heat_ranges(kind, &samples, Some((1.0, 2.0)), Some((0x2000, 0x9000))),
            vec![HeatRange {
                time_ns: 1_500_000_000,
                start: VirtAddr::new(0x2000),
                end: VirtAddr::new(0x3000),
                weight: 100,
            }]
        );
        // Clipped to nothing: left out.
        assert!(heat_ranges(kind, &samples, Some((2.0, 3.0)), Some((0x2000, 0x9000))).is_empty());
    }

    #[test]
    fn site_labels_say_as_much_as_is_known() {
        assert_eq!(
            site_label(Some(&location("make_table", "/src/tables.c", 42))),
            "make_table tables.c:42"
        );
        assert_eq!(
            site_label(Some(&location("make_table", "", 0))),
            "make_table"
        );
        assert_eq!(site_label(None), "?");
    }
}
