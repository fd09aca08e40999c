//! What `fltrace heatmap` draws: the access samples and range-trace ranges within the
//! selected time and addresses, and over a process's faults the largest allocation blocks,
//! labelled with their allocation sites (Heimdallr draws allocations over its access map the
//! same way).

use std::ops::Range;

use rustc_hash::FxHashSet;

use fltrace_trace::{AccessRecord, Fault, ProcessTrace, RangeSample, RangeTraceKind, VirtAddr};

use crate::{
    LargeBlock, Lifetimes, Location, ResolvedStacks, call_site, largest_blocks, range_heat,
    window_ns,
};

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
