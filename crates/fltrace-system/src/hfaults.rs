//! `hfaults`: huge page faults by process. The chapter's tool put a kprobe on
//! `hugetlb_fault()`, and no tracepoint fires for a huge page fault here (`hugetlbfs:*` trace
//! inode operations, `huge_memory:*` and `thp:*` collapse and migration). So every user fault
//! (`exceptions:page_fault_user`) is looked up in its process's mappings: one in a hugetlb
//! mapping (smaps `KernelPageSize` above the base page) is a hugetlb fault; a fault on a
//! missing page of anonymous memory that is backed by a transparent huge page just after
//! (pagemap and kpageflags) is a THP fault.

use std::collections::BTreeMap;
use std::io::Write;
use std::sync::atomic::AtomicUsize;
use std::time::Duration;

use crate::Error;
use crate::Scope;
use crate::output::{Column, Printer, Value};
use crate::perf_session::{Options, PerfEvents, Record, Source};
use crate::procfs::{self, MapKind, MapsCache};

/// The columns, printed at the end.
pub const COLUMNS: &[Column] = &[
    Column::new("PID", "pid", -7),
    Column::new("COMM", "comm", -16),
    Column::new("KIND", "kind", -7),
    Column::new("FAULTS", "faults", 8),
];

const SOURCES: &[Source] = &[Source::tracepoint("exceptions", "page_fault_user")];

/// The kind of a huge page fault.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Kind {
    /// In a hugetlbfs mapping.
    Hugetlb,
    /// A transparent huge page.
    Thp,
}

impl Kind {
    fn name(self) -> &'static str {
        match self {
            Kind::Hugetlb => "hugetlb",
            Kind::Thp => "thp",
        }
    }
}

/// The open tool.
pub struct HFaults {
    /// Its events.
    pub perf_events: PerfEvents,
}

/// Opens user page faults for `scope`. Every fault is looked at, so name processes (`-p`, a
/// command, a cgroup) on a busy system.
pub fn open(scope: &Scope) -> Result<HFaults, Error> {
    let options = Options {
        ring_pages: 1024,
        // A new mapping may reuse addresses of an old one: its record drops the cached maps.
        mappings: true,
        ..Options::default()
    };
    Ok(HFaults {
        perf_events: PerfEvents::open(SOURCES, scope, options)?,
    })
}

/// x86 page fault error code: the page was present (a protection fault).
const PRESENT: u64 = 1;

/// Whether the page a fault at `addr` filled is a transparent huge page. The sample can be
/// read while the kernel is still handling the fault (a huge page may need compaction
/// first): a page not yet present is looked at again for up to 100 ms.
/// None when the page cannot be read (the process ended).
fn thp_after_fault(pid: u32, addr: u64) -> Option<bool> {
    for _ in 0..50 {
        match procfs::page_state(pid, addr) {
            Some(procfs::PageState::Present { thp }) => return Some(thp),
            Some(procfs::PageState::Missing) => std::thread::sleep(Duration::from_millis(2)),
            None => return None,
        }
    }
    Some(false)
}

/// Why faults were not classified.
pub const UNCLASSIFIED: &str = "their process ended before its mappings or pages could be read (name processes: -p, a command)";

/// The hugetlb mappings the kernel's mapping records announced, by process: they classify
/// the faults of a process that ended before its smaps was read.
#[derive(Default)]
struct HugetlbMappings(std::collections::HashMap<u32, Vec<(u64, u64)>>);

impl HugetlbMappings {
    fn observe(&mut self, pid: u32, mapping: &fltrace_trace::Mapping) {
        // MAP_HUGETLB memory is a file of the kernel's internal hugetlbfs, `/anon_hugepage`.
        if mapping.path.contains("anon_hugepage") {
            self.0
                .entry(pid)
                .or_default()
                .push((mapping.start.get(), mapping.end.get()));
        }
    }

    fn contains(&self, pid: u32, addr: u64) -> bool {
        self.0
            .get(&pid)
            .is_some_and(|ranges| ranges.iter().any(|&(s, e)| s <= addr && addr < e))
    }
}

impl HFaults {
    /// Counts until stopped, then prints one row per process and kind.
    pub fn run<W: Write>(
        mut self,
        stop: &AtomicUsize,
        duration: Option<Duration>,
        printer: &mut Printer<W>,
    ) -> Result<Option<std::process::ExitStatus>, Error> {
        let Some(format) = self.perf_events.format(0).cloned() else {
            return Ok(None);
        };
        let mut maps = MapsCache::default();
        let mut hugetlb = HugetlbMappings::default();
        let mut unclassified = 0u64;
        let mut counts: BTreeMap<(u32, String, Kind), u64> = BTreeMap::new();
        let status = self.perf_events.run(
            stop,
            duration,
            None,
            |ctx, record| match record {
                Record::Sample(s) => {
                    let d = format.decode(&s.raw);
                    let (Some(addr), Some(error)) = (d.u64("address"), d.u64("error_code")) else {
                        return;
                    };
                    let kind = match maps.lookup(s.pid, addr).map(|m| m.kind) {
                        Some(MapKind::Hugetlb) => Kind::Hugetlb,
                        // madvise(MADV_HUGEPAGE) makes memory eligible without a mapping
                        // record, so any anonymous memory may hold a THP.
                        Some(MapKind::ThpEligible | MapKind::Anon) if error & PRESENT == 0 => {
                            match thp_after_fault(s.pid, addr) {
                                Some(true) => Kind::Thp,
                                Some(false) => return,
                                None => {
                                    unclassified += 1;
                                    return;
                                }
                            }
                        }
                        Some(_) => return,
                        None if hugetlb.contains(s.pid, addr) => Kind::Hugetlb,
                        None if !procfs::alive(s.pid) => {
                            unclassified += 1;
                            return;
                        }
                        None => return,
                    };
                    *counts.entry((s.pid, ctx.comm(s.tid), kind)).or_default() += 1;
                }
                Record::Comm {
                    pid, exec: true, ..
                } => {
                    maps.forget(pid);
                    hugetlb.0.remove(&pid);
                }
                Record::Mmap { pid, mapping, .. } => hugetlb.observe(pid, &mapping),
                _ => {}
            },
            |_, _| {},
        )?;
        self.perf_events.add_unseen(unclassified);
        printer.header()?;
        for ((pid, comm, kind), faults) in counts {
            printer.row(&[
                pid.into(),
                comm.into(),
                kind.name().into(),
                Value::from(faults),
            ])?;
        }
        printer.unseen(unclassified, "user faults not classified", UNCLASSIFIED)?;
        Ok(status)
    }
}
