//! `vmscan`: a reclaim summary per interval from the `vmscan:*` tracepoints, the chapter's
//! columns: time in shrink slab, in direct reclaim and in memory cgroup reclaim (totals over
//! all CPUs, begin to end of each thread), kswapd wake-ups and page writes by reclaim
//! (`mm_vmscan_write_folio`, `mm_vmscan_writepage` on older kernels).

use std::collections::HashMap;
use std::io::Write;
use std::sync::atomic::AtomicUsize;
use std::time::Duration;

use crate::Error;
use crate::Scope;
use crate::output::{Column, Printer, Value};
use crate::perf_session::{Options, PerfEvents, Record, Source};

/// The chapter's columns; CSV and JSON add the number of each reclaim.
pub const COLUMNS: &[Column] = &[
    Column::new("TIME", "time", -10),
    Column::new("S-SLABms", "s_slab_ms", 10),
    Column::new("D-RECLAIMms", "d_reclaim_ms", 12),
    Column::new("M-RECLAIMms", "m_reclaim_ms", 12),
    Column::new("KSWAPD", "kswapd", 6),
    Column::new("WRITEPAGE", "writepage", 9),
    Column::data("s_slabs"),
    Column::data("d_reclaims"),
    Column::data("m_reclaims"),
    Column::data("m_reclaimed_pages"),
];

/// What each source is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    SlabStart,
    SlabEnd,
    DirectBegin,
    DirectEnd,
    MemcgBegin,
    MemcgEnd,
    Kswapd,
    Write,
}

const REQUIRED: [(&str, Kind); 7] = [
    ("mm_shrink_slab_start", Kind::SlabStart),
    ("mm_shrink_slab_end", Kind::SlabEnd),
    ("mm_vmscan_direct_reclaim_begin", Kind::DirectBegin),
    ("mm_vmscan_direct_reclaim_end", Kind::DirectEnd),
    ("mm_vmscan_memcg_reclaim_begin", Kind::MemcgBegin),
    ("mm_vmscan_memcg_reclaim_end", Kind::MemcgEnd),
    ("mm_vmscan_wakeup_kswapd", Kind::Kswapd),
];

/// One interval's totals.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Totals {
    /// ns in shrink slab.
    pub slab_ns: u64,
    /// Shrink slab calls.
    pub slabs: u64,
    /// ns in direct reclaim.
    pub direct_ns: u64,
    /// Direct reclaims.
    pub directs: u64,
    /// ns in memory cgroup reclaim.
    pub memcg_ns: u64,
    /// Memory cgroup reclaims.
    pub memcgs: u64,
    /// Pages memory cgroup reclaim freed.
    pub memcg_pages: u64,
    /// kswapd wake-ups.
    pub kswapd: u64,
    /// Pages written by reclaim.
    pub writes: u64,
}

/// Begin-to-end pairing of one kind of span per thread.
#[derive(Default)]
pub struct Spans {
    open: HashMap<u32, u64>,
}

impl Spans {
    /// A span begins on `tid`.
    pub fn begin(&mut self, tid: u32, time_ns: u64) {
        self.open.insert(tid, time_ns);
    }

    /// A span ends on `tid`: its duration, if its beginning was seen.
    pub fn end(&mut self, tid: u32, time_ns: u64) -> Option<u64> {
        self.open
            .remove(&tid)
            .map(|start| time_ns.saturating_sub(start))
    }
}

/// The open tool.
pub struct Vmscan {
    /// Its events.
    pub perf_events: PerfEvents,
    kinds: Vec<Kind>,
    /// Whether page writes can be counted.
    pub has_writes: bool,
}

/// Opens the vmscan tracepoints for `scope`. The page-write tracepoint is optional (its name
/// changed); without it the column shows `-`.
pub fn open(scope: &Scope) -> Result<Vmscan, Error> {
    // A tracefs that cannot be read says so here rather than as a missing event.
    crate::tracefs::events_dir()?;
    let mut sources: Vec<Source> = REQUIRED
        .iter()
        .map(|(name, _)| Source::tracepoint("vmscan", name))
        .collect();
    let mut kinds: Vec<Kind> = REQUIRED.iter().map(|(_, k)| *k).collect();
    let write = ["mm_vmscan_write_folio", "mm_vmscan_writepage"]
        .into_iter()
        .find(|name| crate::tracefs::exists("vmscan", name));
    if let Some(name) = write {
        sources.push(Source::tracepoint("vmscan", name));
        kinds.push(Kind::Write);
    }
    Ok(Vmscan {
        perf_events: PerfEvents::open(&sources, scope, Options::default())?,
        kinds,
        has_writes: write.is_some(),
    })
}

impl Vmscan {
    /// Prints a row every `interval` until stopped.
    pub fn run<W: Write>(
        mut self,
        stop: &AtomicUsize,
        duration: Option<Duration>,
        interval: Duration,
        printer: &mut Printer<W>,
    ) -> Result<Option<std::process::ExitStatus>, Error> {
        let memcg_end = self
            .kinds
            .iter()
            .position(|k| *k == Kind::MemcgEnd)
            .and_then(|i| self.perf_events.format(i).cloned());
        let kinds = self.kinds.clone();
        let has_writes = self.has_writes;
        let (mut slab, mut direct, mut memcg) =
            (Spans::default(), Spans::default(), Spans::default());
        let totals = std::cell::RefCell::new(Totals::default());
        printer.header()?;
        self.perf_events.run_printing(
            stop,
            duration,
            Some(interval),
            |_, record| {
                let Record::Sample(s) = record else {
                    return Ok(());
                };
                let mut t = totals.borrow_mut();
                match kinds.get(s.source) {
                    Some(Kind::SlabStart) => slab.begin(s.tid, s.time_ns),
                    Some(Kind::SlabEnd) => {
                        if let Some(ns) = slab.end(s.tid, s.time_ns) {
                            t.slab_ns += ns;
                            t.slabs += 1;
                        }
                    }
                    Some(Kind::DirectBegin) => direct.begin(s.tid, s.time_ns),
                    Some(Kind::DirectEnd) => {
                        if let Some(ns) = direct.end(s.tid, s.time_ns) {
                            t.direct_ns += ns;
                            t.directs += 1;
                        }
                    }
                    Some(Kind::MemcgBegin) => memcg.begin(s.tid, s.time_ns),
                    Some(Kind::MemcgEnd) => {
                        if let Some(ns) = memcg.end(s.tid, s.time_ns) {
                            t.memcg_ns += ns;
                            t.memcgs += 1;
                            t.memcg_pages += memcg_end
                                .as_ref()
                                .and_then(|f| f.decode(&s.raw).u64("nr_reclaimed"))
                                .unwrap_or(0);
                        }
                    }
                    Some(Kind::Kswapd) => t.kswapd += 1,
                    Some(Kind::Write) => t.writes += 1,
                    None => {}
                }
                Ok(())
            },
            |ctx: &crate::perf_session::Context, now, last| {
                // The last partial interval is printed only when something happened in it.
                if last && totals.borrow().eq(&Totals::default()) {
                    return Ok(());
                }
                let t = totals.replace(Totals::default());
                let ms = |ns: u64| Value::Float(ns as f64 / 1e6, 2);
                let row = [
                    crate::clock::local_time(ctx.wall_ns(now)).into(),
                    ms(t.slab_ns),
                    ms(t.direct_ns),
                    ms(t.memcg_ns),
                    t.kswapd.into(),
                    if has_writes {
                        t.writes.into()
                    } else {
                        "-".into()
                    },
                    t.slabs.into(),
                    t.directs.into(),
                    t.memcgs.into(),
                    t.memcg_pages.into(),
                ];
                printer.row(&row)
            },
        )
    }
}
