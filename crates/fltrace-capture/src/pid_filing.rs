//! Which process of the run a pid reused within it meant at a given time, shared by the
//! record reader with the access-sample reader: the record reader learns of each reuse from
//! the later process's fork record, and says up to which time it has read the records, so
//! that an access sample newer than that waits until its process is known.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock};

use rustc_hash::FxHashMap;

/// See the module's documentation. Cloning shares it.
#[derive(Clone, Debug, Default)]
pub(crate) struct PidFiling(Arc<Shared>);

#[derive(Debug, Default)]
struct Shared {
    /// For each reused pid, the later processes that held it, oldest first: the time of
    /// the fork that made each and the pid it is filed as (`u32::MAX`: not filed).
    later: RwLock<FxHashMap<u32, Vec<(u64, u32)>>>,
    /// The records are read up to this time (CLOCK_MONOTONIC ns).
    read_ns: AtomicU64,
}

impl PidFiling {
    /// The process forked at `time` with `pid` is filed as `filed`.
    pub(crate) fn reused(&self, pid: u32, time: u64, filed: u32) {
        if let Ok(mut later) = self.0.later.write() {
            later.entry(pid).or_default().push((time, filed));
        }
    }

    /// What the process `pid` at `time` is filed as.
    pub(crate) fn filed(&self, pid: u32, time: u64) -> u32 {
        let Ok(later) = self.0.later.read() else {
            return pid;
        };
        later
            .get(&pid)
            .and_then(|later| later.iter().rev().find(|(forked, _)| *forked <= time))
            .map_or(pid, |&(_, filed)| filed)
    }

    /// Every record up to `time` has been read.
    pub(crate) fn read_until(&self, time: u64) {
        self.0.read_ns.fetch_max(time, Ordering::Release);
    }

    /// The time up to which every record has been read.
    pub(crate) fn read_ns(&self) -> u64 {
        self.0.read_ns.load(Ordering::Acquire)
    }
}
