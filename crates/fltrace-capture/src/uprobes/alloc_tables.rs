//! The allocation tables of `record --allocs -p PID`: calls, stacks and totals written for the
//! recording, and what a live view is told of them.

use std::collections::HashMap;
use std::path::Path;
use std::time::Duration;

use fltrace_trace::{AllocEvent, AllocWriter, CodeAddr, Origin, Stack, StackWriter, files};

use super::AllocSink;
use crate::live::LiveAllocSink;
use crate::{Converted, Error};

/// The tables being written.
pub(super) struct AllocTables {
    pub(super) allocs: AllocWriter,
    pub(super) stacks: StackWriter,
    pub(super) ids: HashMap<Vec<u64>, u32>,
    pub(super) events: u64,
    pub(super) totals: fltrace_trace::AllocTotals,
    pub(super) totals_path: std::path::PathBuf,
    pub(super) origin: Origin,
    /// What a live view is told.
    pub(super) live: Option<LiveOut>,
}

/// How often a live view is told of the calls read.
pub const LIVE_EVERY: Duration = Duration::from_millis(50);

/// The calls and stacks read since a live view was last told of them.
pub(super) struct LiveOut {
    pub(super) sink: LiveAllocSink,
    /// The process, as the recording files it.
    pub(super) pid: u32,
    pub(super) stacks: Vec<Stack>,
    /// In the order read: a call is pushed at its return, timed at its entry.
    pub(super) events: Vec<AllocEvent>,
    pub(super) lost: u64,
    /// The last call's time the view was told of: it takes calls in time order.
    pub(super) told_ns: u64,
    pub(super) told_at: std::time::Instant,
}

impl LiveOut {
    pub(super) fn new(sink: LiveAllocSink, pid: u32) -> LiveOut {
        LiveOut {
            sink,
            pid,
            stacks: Vec::new(),
            events: Vec::new(),
            lost: 0,
            told_ns: 0,
            told_at: std::time::Instant::now(),
        }
    }

    /// Tells the view of the stacks and of the calls up to `settled` (all of them at the
    /// end, `None`), in time order: a call entered before another but read after it (its
    /// thread was inside it past `settled`, which goes on after a second) is told at the
    /// time of the last call told, for the view pairs calls in time order (the tables keep
    /// its own time).
    pub(super) fn tell(&mut self, settled: Option<u64>) {
        self.events.sort_by_key(|e| e.time_ns);
        let ready = match settled {
            Some(time) => self.events.partition_point(|e| e.time_ns <= time),
            None => self.events.len(),
        };
        let mut events: Vec<AllocEvent> = self.events.drain(..ready).collect();
        for event in &mut events {
            event.time_ns = event.time_ns.max(self.told_ns);
            self.told_ns = event.time_ns;
        }
        let allocs = crate::live::LiveAllocs {
            pid: self.pid,
            restart: false,
            stacks: std::mem::take(&mut self.stacks),
            events,
            execs: Vec::new(),
            dropped: self.lost,
        };
        if !allocs.is_empty() {
            (self.sink)(allocs);
        }
        self.told_at = std::time::Instant::now();
    }
}

impl AllocTables {
    pub(super) fn create(dir: &Path, origin: Origin) -> Result<AllocTables, Error> {
        let pid = origin.pid;
        Ok(AllocTables {
            allocs: AllocWriter::create_for(&files::allocs(dir, pid), origin.clone())?,
            stacks: StackWriter::create_for(&files::alloc_stacks(dir, pid), origin.clone())?,
            ids: HashMap::new(),
            events: 0,
            totals: fltrace_trace::AllocTotals::default(),
            totals_path: files::alloc_totals(dir, pid),
            origin,
            live: None,
        })
    }
}

impl AllocSink for AllocTables {
    fn stack(&mut self, frames: &[u64]) -> Result<u32, Error> {
        if let Some(&id) = self.ids.get(frames) {
            return Ok(id);
        }
        let id = self.ids.len() as u32;
        let stack = Stack {
            end: fltrace_trace::StackEnd::Unknown,
            id,
            generation: 0,
            frames: frames.iter().map(|&frame| CodeAddr::new(frame)).collect(),
        };
        if let Some(live) = &mut self.live {
            live.stacks.push(stack.clone());
        }
        self.stacks.push(stack)?;
        self.ids.insert(frames.to_vec(), id);
        Ok(id)
    }

    fn push(&mut self, event: AllocEvent) -> Result<(), Error> {
        self.events += 1;
        self.totals.add(&event);
        if let Some(live) = &mut self.live {
            live.events.push(event);
        }
        Ok(self.allocs.push(event)?)
    }

    fn lost(&mut self, total: u64) {
        if let Some(live) = &mut self.live {
            live.lost = total;
        }
    }

    fn settled(&mut self, time_ns: u64) {
        if let Some(live) = self
            .live
            .as_mut()
            .filter(|l| l.told_at.elapsed() >= LIVE_EVERY)
        {
            live.tell(Some(time_ns));
        }
    }
}

impl AllocTables {
    pub(super) fn finish(mut self) -> Result<Converted, Error> {
        if let Some(live) = &mut self.live {
            live.tell(None);
        }
        self.allocs.finish()?;
        self.stacks.finish()?;
        fltrace_trace::write_alloc_totals(&self.totals_path, self.origin, &self.totals.totals())?;
        Ok(Converted {
            events: self.events,
            stacks: self.ids.len() as u32,
            ..Converted::default()
        })
    }
}
