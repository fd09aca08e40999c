//! `swapin`: swap-ins by process per interval. The chapter's tool put a kprobe on
//! `swap_readpage()`; without kprobes, a swap-in is a major fault (the software event, with
//! the fault address) on swap-backed memory: anonymous memory or shared memory
//! (`/dev/shm`, System V segments, memfd), as the process's smaps says. With no swap active
//! there is nothing to see, and the tool says so, but it traces anyway.

use std::collections::BTreeMap;
use std::io::Write;
use std::sync::atomic::AtomicUsize;
use std::time::Duration;

use crate::Error;
use crate::Scope;
use crate::output::{Column, Printer};
use crate::perf_session::{Context, Options, PerfEvents, Record, Sample, Source};
use crate::procfs::{self, MapInfo, MapKind, MapsCache};

/// The columns: the interval's time, then one row per process.
pub const COLUMNS: &[Column] = &[
    Column::new("TIME", "time", -10),
    Column::new("COMM", "comm", -16),
    Column::new("PID", "pid", -7),
    Column::new("SWAPINS", "swapins", 7),
];

/// The event: major faults.
pub const SOURCES: &[Source] = &[Source::MajorFaults];

/// Whether a major fault on this mapping read from swap.
pub fn is_swap_backed(map: &MapInfo) -> bool {
    match map.kind {
        MapKind::Anon | MapKind::ThpEligible => true,
        MapKind::Hugetlb => false,
        MapKind::File => map.path.starts_with("/dev/shm/"),
    }
}

/// Swap-ins counted by (comm, pid) for the current interval.
#[derive(Default)]
pub struct IntervalSwapins {
    counts: BTreeMap<(String, u32), u64>,
}

impl IntervalSwapins {
    /// Counts `sample` (a major fault) if it hit swap-backed memory of its process, with
    /// `lookup` giving the process's mapping at an address.
    pub fn add(
        &mut self,
        sample: &Sample,
        comm: String,
        lookup: impl FnOnce(u32, u64) -> Option<MapInfo>,
    ) -> bool {
        let swapped = lookup(sample.pid, sample.addr).is_some_and(|m| is_swap_backed(&m));
        if swapped {
            *self.counts.entry((comm, sample.pid)).or_default() += 1;
        }
        swapped
    }

    /// The counts so far, and starts again.
    pub fn take(&mut self) -> BTreeMap<(String, u32), u64> {
        std::mem::take(&mut self.counts)
    }
}

/// The open tool.
pub struct Swapin {
    /// Its events.
    pub perf_events: PerfEvents,
}

/// Opens major faults for `scope`; the notes say when no swap is active.
pub fn open(scope: &Scope) -> Result<Swapin, Error> {
    let mut perf_events = PerfEvents::open(SOURCES, scope, Options::default())?;
    if !procfs::swap_active() {
        perf_events.notes.push(
            "no swap is active (/proc/swaps lists none): nothing can be swapped in; tracing anyway in case swap is enabled"
                .to_owned(),
        );
    }
    Ok(Swapin { perf_events })
}

impl Swapin {
    /// Prints the swap-ins of each process every `interval` until stopped.
    pub fn run<W: Write>(
        mut self,
        stop: &AtomicUsize,
        duration: Option<Duration>,
        interval: Duration,
        printer: &mut Printer<W>,
    ) -> Result<Option<std::process::ExitStatus>, Error> {
        let swapins = std::cell::RefCell::new(IntervalSwapins::default());
        let mut maps = MapsCache::default();
        printer.header()?;
        self.perf_events.run_printing(
            stop,
            duration,
            Some(interval),
            |ctx, record| {
                match record {
                    Record::Sample(s) => {
                        swapins.borrow_mut().add(&s, ctx.comm(s.tid), |pid, addr| {
                            maps.lookup(pid, addr).cloned()
                        });
                    }
                    Record::Comm {
                        pid, exec: true, ..
                    }
                    | Record::Exit { pid, .. } => maps.forget(pid),
                    _ => {}
                }
                Ok(())
            },
            |ctx: &Context, now, _| {
                let time = crate::clock::local_time(ctx.wall_ns(now));
                // Every row is tried; the first that fails is the error.
                let mut printed = Ok(());
                for ((comm, pid), count) in swapins.borrow_mut().take() {
                    let row = [time.as_str().into(), comm.into(), pid.into(), count.into()];
                    printed = printed.and(printer.row(&row));
                }
                printed
            },
        )
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::*;
    use crate::perf_session::{StackMode, parse_info_of, parse_record};

    /// A major-fault sample as the kernel lays it out for this tool's attributes:
    /// identifier, pid and tid, time, address, cpu and a reserved word.
    fn record(id: u64, pid: u32, tid: u32, time: u64, addr: u64, cpu: u32) -> Vec<u8> {
        let mut bytes = Vec::new();
        bytes.extend_from_slice(&id.to_ne_bytes());
        bytes.extend_from_slice(&pid.to_ne_bytes());
        bytes.extend_from_slice(&tid.to_ne_bytes());
        bytes.extend_from_slice(&time.to_ne_bytes());
        bytes.extend_from_slice(&addr.to_ne_bytes());
        bytes.extend_from_slice(&cpu.to_ne_bytes());
        bytes.extend_from_slice(&0u32.to_ne_bytes());
        bytes
    }

    const SMAPS: &str = "\
555555554000-555555556000 r-xp 00000000 08:01 42 /usr/bin/prog
KernelPageSize:        4 kB
THPeligible:    0
7f0000000000-7f0000100000 rw-p 00000000 00:00 0 
KernelPageSize:        4 kB
THPeligible:    0
7f0000100000-7f0000200000 rw-s 00000000 00:05 7 /dev/shm/segment
KernelPageSize:        4 kB
THPeligible:    0
";

    /// Major faults decode from raw records; those on anonymous and shared memory count as
    /// swap-ins of their process, those on a program's file do not.
    #[test]
    fn counts_swapins_from_raw_records() {
        let infos = vec![parse_info_of(Source::MajorFaults, StackMode::None)];
        let by_id = HashMap::from([(77u64, 0usize)]);
        let maps = procfs::parse_smaps(SMAPS);
        let lookup = |_pid: u32, addr: u64| {
            maps.range(..=addr)
                .next_back()
                .map(|(_, m)| m.clone())
                .filter(|m| addr < m.end)
        };
        let mut swapins = IntervalSwapins::default();
        for (addr, expected) in [
            (0x7f00_0000_1000u64, true),
            (0x7f00_0010_2000, true),
            (0x5555_5555_5000, false),
            (0x7f00_0000_2000, true),
            (0x1000, false),
        ] {
            let bytes = record(77, 4242, 4243, 1_000, addr, 1);
            let Some(Record::Sample(sample)) = parse_record(
                perf_event_open_sys::bindings::PERF_RECORD_SAMPLE,
                0,
                &bytes,
                &by_id,
                &infos,
            ) else {
                panic!("not a sample");
            };
            assert_eq!(
                (sample.pid, sample.tid, sample.addr, sample.cpu),
                (4242, 4243, addr, 1)
            );
            assert_eq!(
                swapins.add(&sample, "prog".into(), lookup),
                expected,
                "{addr:#x}"
            );
        }
        let counts = swapins.take();
        assert_eq!(counts.get(&("prog".to_owned(), 4242)), Some(&3));
        assert!(swapins.take().is_empty());
    }
}
