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
    /// The record reader's reuses, copied: that reader looks them up without a lock.
    later: RwLock<ReusedPids>,
    /// The records are read up to this time (CLOCK_MONOTONIC ns).
    read_ns: AtomicU64,
}

impl PidFiling {
    /// The process forked at `time` with `pid` is filed as `filed`.
    pub(crate) fn reused(&self, pid: u32, time: u64, filed: u32) {
        if let Ok(mut later) = self.0.later.write() {
            later.record(pid, time, filed);
        }
    }

    /// What the process `pid` at `time` is filed as.
    pub(crate) fn filed(&self, pid: u32, time: u64) -> u32 {
        self.0
            .later
            .read()
            .map_or(pid, |later| later.filed(pid, time))
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

/// The most processes after the first one a pid can be filed for: the tables write pids as
/// INT32, and 511 reuses of the highest pid (2^22 - 1) reach `i32::MAX` exactly.
pub(crate) const MAX_REUSES: u32 = (i32::MAX as u32 + 1) / fltrace_trace::files::PID_LIMIT - 1;

/// What a process beyond [`MAX_REUSES`] of its pid is filed as: nothing, its records are
/// dropped and its faults counted lost (`lost_unfiled`).
pub(crate) const UNFILED: u32 = u32::MAX;

/// Pids reused within the run: for each, the later processes that held it, oldest first,
/// with the time of the fork that made each and the pid it is filed as
/// ([`fltrace_trace::files::reused_pid`]). Records are handled in time order, so a record of such a pid
/// belongs to the latest of them forked before it, or to the first.
#[derive(Debug, Default)]
pub(crate) struct ReusedPids(FxHashMap<u32, Vec<LaterHolder>>);

/// A later process holding a reused pid.
#[derive(Debug, Clone, Copy)]
struct LaterHolder {
    /// When the fork that made it happened (CLOCK_MONOTONIC ns).
    forked_ns: u64,
    /// The pid it is filed as ([`UNFILED`] past [`MAX_REUSES`]).
    filed: u32,
}

impl ReusedPids {
    /// The pid the process `pid` that a record of time `time` comes from is filed as.
    pub(crate) fn filed(&self, pid: u32, time: u64) -> u32 {
        if self.0.is_empty() {
            return pid;
        }
        self.0
            .get(&pid)
            .and_then(|later| later.iter().rev().find(|h| h.forked_ns <= time))
            .map_or(pid, |h| h.filed)
    }

    /// A process forked at `time` got `pid` after the one holding it exited: the pid it is
    /// filed as, `None` when there is none left (`pid` reused over [`MAX_REUSES`] times);
    /// its records and those of every later holder are then [`UNFILED`].
    pub(crate) fn reuse(&mut self, pid: u32, time: u64) -> Option<u32> {
        let later = self.0.entry(pid).or_default();
        let reuse = later.len() as u32 + 1;
        let filed = (reuse <= MAX_REUSES).then(|| reuse * fltrace_trace::files::PID_LIMIT + pid);
        later.push(LaterHolder {
            forked_ns: time,
            filed: filed.unwrap_or(UNFILED),
        });
        filed
    }

    /// The kernel pids held again within the run.
    pub(crate) fn pids(&self) -> impl Iterator<Item = u32> + '_ {
        self.0.keys().copied()
    }

    /// The process forked at `time` with `pid` is filed as `filed` (as [`ReusedPids::reuse`]
    /// of another copy said).
    fn record(&mut self, pid: u32, time: u64, filed: u32) {
        self.0.entry(pid).or_default().push(LaterHolder {
            forked_ns: time,
            filed,
        });
    }
}
