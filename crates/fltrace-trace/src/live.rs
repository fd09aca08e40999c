//! What a live view (`fltrace top`) learns while a recording runs, as the recorder
//! (`fltrace_capture::live`) hands it over: every fault row as it is appended (and again when
//! a later record changes its stack or flags), every stack and code mapping the rows refer
//! to, the threads' names, each process's statistics line, and the recording's running
//! totals. Plain data, made by capture and read by analysis.

use std::sync::Arc;

use crate::{AllocEvent, FaultFlags, Mapping, Stack};

/// One fault row, as appended to its process's window, or one side of a change to an open
/// row: its old `(stack_id, flags)` taken back (`undo`) and its new ones added.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LiveFault {
    /// The process as the recording files it.
    pub pid: u32,
    /// The thread.
    pub tid: u32,
    /// The stack, as [`LiveEvent::Stack`] defines it for `pid`.
    pub stack_id: u32,
    /// The row's flags.
    pub flags: FaultFlags,
    /// Whether this takes back a row counted before (the first half of a change).
    pub undo: bool,
}

/// What the recorder learnt besides fault rows.
#[derive(Debug, Clone)]
pub enum LiveEvent {
    /// A mapping of code (executable), as written to the mappings table: what stack frames
    /// are symbolized through.
    Mapped {
        /// The process as filed.
        pid: u32,
        /// The mapping, its generation set.
        mapping: Mapping,
    },
    /// A stack interned for the first time, as written to the stacks table.
    Stack {
        /// The process as filed.
        pid: u32,
        /// Its id, generation, frames and end.
        stack: Stack,
    },
    /// The kernel named a thread.
    ThreadNamed {
        /// The process as filed.
        pid: u32,
        /// The kernel's pid of the process (its main thread's tid).
        os_pid: u32,
        /// The thread.
        tid: u32,
        /// Its name (`comm`).
        name: String,
    },
    /// A line of the process's statistics file, as written (the far-memory runtime's
    /// counters under `-L`, by the stats file's names).
    Stats {
        /// The process as filed.
        pid: u32,
        /// The counters, by name.
        counters: Vec<(&'static str, u64)>,
    },
    /// The far-memory runtime's counters as its shared page says them now (between the
    /// statistics lines, which come once a second), by the stats file's names.
    Runtime {
        /// The process as filed.
        pid: u32,
        /// The counters, by name.
        counters: Vec<(&'static str, u64)>,
    },
    /// The process's files are finished: it is gone.
    Ended {
        /// The process as filed.
        pid: u32,
    },
}

/// The recording's running totals, as `record`'s summary counts them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LiveTotals {
    /// Faults recorded.
    pub faults: u64,
    /// Records the kernel dropped, and faults read too late to be filed.
    pub lost: u64,
    /// Faults whose stack lacks its outer frames.
    pub truncated: u64,
}

/// A process's allocation calls, as the recorder converts them from its logs
/// ([`crate::spool::Conversion::watch`]): while the program runs, and what is left at its
/// end.
#[derive(Debug, Clone, Default)]
pub struct LiveAllocs {
    /// The process (its logs' pid).
    pub pid: u32,
    /// Forget what was told of this process's calls before: they are told again from the
    /// first (a conversion given up while the program ran is done again at its end).
    pub restart: bool,
    /// Allocation stacks defined (ids of the allocation stacks table), before the events
    /// that refer to them.
    pub stacks: Vec<Stack>,
    /// The calls, in time order.
    pub events: Vec<AllocEvent>,
    /// The process exec'd: `(i, time)`, before `events[i]`; its blocks end at `time`.
    pub execs: Vec<(usize, u64)>,
    /// Records the tracer dropped (a full log) in the images converted so far, as the logs'
    /// headers say them.
    pub dropped: u64,
}

impl LiveAllocs {
    /// Whether it tells nothing new.
    pub fn is_empty(&self) -> bool {
        !self.restart && self.stacks.is_empty() && self.events.is_empty() && self.execs.is_empty()
    }
}

/// Where a conversion sends what it converted, for a live view.
pub type LiveAllocSink = Arc<dyn Fn(LiveAllocs) + Send + Sync>;

/// What the recorder learnt since its last batch.
#[derive(Debug, Clone, Default)]
pub struct LiveBatch {
    /// Fault rows and changes to them, in the order they happened per process.
    pub faults: Vec<LiveFault>,
    /// Everything else, in order; a stack or mapping comes before the first batch that is
    /// read after the rows referring to it are: symbolize at the end of a batch.
    pub events: Vec<LiveEvent>,
    /// Allocation calls converted since the last batch (`--allocs`).
    pub allocs: Vec<LiveAllocs>,
    /// The totals when the batch was made; `None` in a batch of allocations only, which
    /// the conversion sends apart from the recorder's.
    pub totals: Option<LiveTotals>,
    /// The traced processes are gone (or the recording was stopped): no fault follows, only
    /// what finishing the files adds.
    pub ended: bool,
    /// What the channel to the view dropped so far because the view fell behind (set as the
    /// view receives the batch; the recording itself loses nothing of it).
    pub view_dropped: LiveDropped,
}

/// What a view that fell behind was not given: the channel to it is bounded, and when it is
/// full, fault rows and allocation calls are dropped and counted here (stacks, mappings,
/// names and the end are kept and handed over later, so that what follows is whole).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LiveDropped {
    /// Fault rows and changes to them ([`LiveFault`]s) not given to the view.
    pub faults: u64,
    /// Allocation calls ([`AllocEvent`]s) not given to the view.
    pub alloc_calls: u64,
}

impl LiveDropped {
    /// Updates dropped in all.
    pub fn total(&self) -> u64 {
        self.faults + self.alloc_calls
    }
}

impl LiveBatch {
    /// Whether there is nothing in it but the totals.
    pub fn is_empty(&self) -> bool {
        self.faults.is_empty() && self.events.is_empty() && self.allocs.is_empty() && !self.ended
    }
}
