//! `drsnoop`: one line per reclaim a process had to do itself, with its latency and the pages
//! it freed: direct reclaim (`vmscan:mm_vmscan_direct_reclaim_begin`/`_end`, global memory
//! short) and memory cgroup reclaim (`mm_vmscan_memcg_reclaim_begin`/`_end`, the process's
//! group at its limit), told apart in the KIND column.

use std::io::Write;
use std::sync::atomic::AtomicUsize;
use std::time::Duration;

use crate::Error;
use crate::Scope;
use crate::output::{Column, Printer, Value};
use crate::perf_session::{Options, PerfEvents, Record, Source};
use crate::vmscan::Spans;

/// The chapter's columns, and the kind of reclaim.
pub const COLUMNS: &[Column] = &[
    Column::new("TIME(s)", "time_s", -12),
    Column::new("COMM", "comm", -16),
    Column::new("PID", "pid", -7),
    Column::new("LAT(ms)", "lat_ms", 8),
    Column::new("PAGES", "pages", 6),
    Column::new("KIND", "kind", -6),
];

const SOURCES: &[Source] = &[
    Source::tracepoint("vmscan", "mm_vmscan_direct_reclaim_begin"),
    Source::tracepoint("vmscan", "mm_vmscan_direct_reclaim_end"),
    Source::tracepoint("vmscan", "mm_vmscan_memcg_reclaim_begin"),
    Source::tracepoint("vmscan", "mm_vmscan_memcg_reclaim_end"),
];

/// The open tool.
pub struct DrSnoop {
    /// Its events.
    pub perf_events: PerfEvents,
}

/// Opens the reclaim tracepoints for `scope`.
pub fn open(scope: &Scope) -> Result<DrSnoop, Error> {
    Ok(DrSnoop {
        perf_events: PerfEvents::open(SOURCES, scope, Options::default())?,
    })
}

impl DrSnoop {
    /// Prints a line per reclaim until stopped.
    pub fn run<W: Write>(
        mut self,
        stop: &AtomicUsize,
        duration: Option<Duration>,
        printer: &mut Printer<W>,
    ) -> Result<Option<std::process::ExitStatus>, Error> {
        let ends = [
            self.perf_events.format(1).cloned(),
            self.perf_events.format(3).cloned(),
        ];
        let mut spans = [Spans::default(), Spans::default()];
        printer.header()?;
        self.perf_events.run_printing(
            stop,
            duration,
            None,
            |ctx, record| {
                let Record::Sample(s) = record else {
                    return Ok(());
                };
                let kind = s.source / 2;
                if s.source % 2 == 0 {
                    spans[kind].begin(s.tid, s.time_ns);
                    return Ok(());
                }
                let Some(ns) = spans[kind].end(s.tid, s.time_ns) else {
                    return Ok(());
                };
                let pages = ends[kind]
                    .as_ref()
                    .and_then(|f| f.decode(&s.raw).u64("nr_reclaimed"))
                    .unwrap_or(0);
                let row = [
                    Value::Float(ctx.seconds(s.time_ns), 6),
                    ctx.comm(s.tid).into(),
                    s.pid.into(),
                    Value::Float(ns as f64 / 1e6, 2),
                    pages.into(),
                    (if kind == 0 { "global" } else { "memcg" }).into(),
                ];
                printer.row(&row)
            },
            |_, _, _| Ok(()),
        )
    }
}
