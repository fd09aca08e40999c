//! A process under far-memory emulation: the runtime's shared page it reads, the join of the
//! runtime's log of handled faults with the trace's rows, and the images that ran without the
//! runtime.

use std::path::PathBuf;

use fltrace_trace::{FaultFlags, libraries};
use rustc_hash::FxHashMap;

use super::Process;
use crate::runtime::{Handled, RuntimeView, is_fill};

/// What a process under far-memory emulation adds: the runtime's shared page and the join of
/// its log of handled faults with the trace's rows.
pub(super) struct FarState {
    pub(super) prefix: PathBuf,
    pub(super) view: Option<RuntimeView>,
    /// Log entries not yet matched to a row, with the round they were read in.
    pub(super) unmatched: Vec<(Handled, u64)>,
    /// Fault rows of each (thread, page) in the managed region, oldest first, still open to
    /// the runtime's log. A thread waits in its fault until the runtime resolved it, so each
    /// log entry belongs to the newest row of its thread and page that is older than the
    /// entry's read time; one row may have several entries (a write that found the page
    /// brought in by another thread's read, then write-protected), and none when the kernel
    /// resolved the fault alone (another thread's fault brought the page in between).
    pub(super) pending_fills: FxHashMap<(u32, u64), std::collections::VecDeque<PendingRow>>,
    /// Rows in the region that no log entry matched: the kernel resolved them alone.
    pub(super) rows_unhandled: u64,
    /// The trace's times (wall clock) minus CLOCK_MONOTONIC, the runtime's clock: the
    /// recorder's own offset, so that a row's time converts back to its sample's exactly.
    pub(super) mono_offset: u64,
    /// Log entries that matched no row.
    pub(super) orphans: u64,
    /// Log entries matched with their row.
    pub(super) matched: u64,
    /// Fetches matched with a row already settled (a recorder behind by a checkpoint): the
    /// row stays flagged as a first touch.
    pub(super) fetches_late: u64,
    /// Sum over matched entries of the row's time to the handler's read of the message: the
    /// wait for a handler, ns.
    pub(super) wait_ns: u64,
    /// Histogram of that wait (`fltrace_runtime_abi::hist_bucket`).
    pub(super) wait_hist: [u64; fltrace_runtime_abi::HIST_BUCKETS],
    /// Sum over matched entries of the row's time to the fault's resolution, ns.
    pub(super) resolve_ns: u64,
    /// `pending_fills` holds no rows below this one.
    pub(super) pruned_below: u64,
    /// When the image began, at the last exec or at the fork that made the process
    /// (CLOCK_MONOTONIC ns): a page made before it is an earlier image's, or an earlier
    /// process's that had the pid.
    pub(super) exec_ns: u64,
    /// When the process ended or its pid went to a later process (CLOCK_MONOTONIC ns;
    /// `u64::MAX` while neither is known): a page made from then on is that process's.
    pub(super) made_before: u64,
    /// Whether the rows outside the managed region were dropped from `pending_fills`, once
    /// the page said where the region is.
    pub(super) region_pruned: bool,
    /// The program's anonymous resident memory outside the region at the last look, bytes.
    pub(super) outside_now: u64,
    /// The look with the most outside, and the program's peak.
    pub(super) outside: crate::unemulated::OutsidePeak,
    /// The images that ran without the runtime (the preloaded library never loaded: a static
    /// program, a set-user-ID one): their executables.
    pub(super) unreached: Vec<String>,
    /// Where the parent's region lies, for a child forked without exec (its copy lies there
    /// too) until its own runtime's page says so.
    pub(super) inherited_region: Option<std::ops::Range<u64>>,
    /// Faults the runtime may log beyond what was read ([`RecordingContext::far_backlog`]).
    pub(super) backlog: u64,
}

impl FarState {
    /// Where the managed region lies, if known (from the runtime's page, or a forked child's
    /// parent).
    pub(super) fn region(&self) -> Option<std::ops::Range<u64>> {
        self.view
            .as_ref()
            .map(RuntimeView::region)
            .filter(|region| !region.is_empty())
            .or_else(|| self.inherited_region.clone())
    }

    /// Whether `addr` may be in the managed region: it is, or where the region lies is not
    /// known yet.
    pub(super) fn may_be_in_region(&self, addr: u64) -> bool {
        self.region().is_none_or(|region| region.contains(&addr))
    }
}

/// A fault row in the managed region, waiting for its log entries.
#[derive(Debug, Clone, Copy)]
pub(super) struct PendingRow {
    pub(super) row: u64,
    pub(super) time_ns: u64,
    pub(super) matched: bool,
    /// Whether an entry filled its page (a first touch or a fetch).
    pub(super) filled: bool,
}

impl Process {
    /// The process was forked at `fork_ns` (CLOCK_MONOTONIC, the record's time): a runtime
    /// page made before then is not its own. An earlier process given the same pid may not
    /// have been finished yet, its page still under the name until this one's runtime
    /// renames its own over it; read as this one's, its counters were this one's statistics.
    pub fn forked_at(&mut self, fork_ns: u64) {
        if let Some(far) = &mut self.far {
            far.exec_ns = far.exec_ns.max(fork_ns);
        }
    }

    /// Under far memory: notes the image ending now (an exec replaces it, or the process
    /// ends: called once then, before its figures are read) if it ran without the runtime:
    /// its program never loaded the preloaded library.
    pub fn note_unreached_image(&mut self) {
        if self.image_recorded && self.image_running && self.interposers.is_empty() {
            let executable = self
                .executable
                .as_ref()
                .map_or_else(|| "?".to_owned(), |(path, _)| path.clone());
            if let Some(far) = &mut self.far {
                far.unreached.push(executable);
            }
        }
    }

    /// Under far memory, when the kernel said this process ended: if it still runs, with an
    /// address space again, its events ended at an exec the kernel ran in secure-execution
    /// mode (set-user-ID, set-group-ID, file capabilities), which drops a tracer's events and
    /// ignores LD_PRELOAD: it runs on without the runtime, which is noted. Caught only while
    /// it still runs when its end is read.
    pub fn note_if_it_lives_on(&mut self) {
        let Some(far) = &mut self.far else {
            return;
        };
        let alive = crate::procfs::stat(self.os_pid as i32).is_ok_and(|s| !s.is_zombie());
        if !alive {
            return;
        }
        // A process in its exit has no address space left (its end is reported after the
        // kernel released it); one that exec'd has its new image's.
        let Ok(maps) = std::fs::read_to_string(format!("/proc/{}/maps", self.os_pid)) else {
            return;
        };
        let preloaded = maps.lines().any(|line| {
            line.split_whitespace()
                .nth(5)
                .is_some_and(libraries::is_preload)
        });
        if maps.is_empty() || preloaded {
            return;
        }
        let executable = std::fs::read_link(format!("/proc/{}/exe", self.os_pid))
            .map_or_else(|_| "?".to_owned(), |p| p.display().to_string());
        far.unreached.push(executable);
    }

    /// Under far memory: the executables of the images that ran without the runtime.
    pub fn unreached_images(&self) -> &[String] {
        self.far.as_ref().map_or(&[], |far| &far.unreached)
    }

    /// Under far memory: the most memory seen outside the region, and the program's peak.
    pub fn outside_peak(&self) -> Option<&crate::unemulated::OutsidePeak> {
        self.far.as_ref().map(|far| &far.outside)
    }

    /// The process ended, or a later process was given its pid, at `time_ns` (CLOCK_MONOTONIC,
    /// the record's time): the far-memory page under its pid from then on is not its own.
    pub fn pid_gone_at(&mut self, time_ns: u64) {
        if let Some(far) = &mut self.far {
            far.made_before = far.made_before.min(time_ns);
            if far.view.as_ref().is_some_and(|v| v.made_ns() >= time_ns) {
                far.view = None;
            }
        }
    }

    /// Whether this process's far-memory page was never read and a later process given its
    /// pid has put its own page under the name: this one's runtime statistics are lost.
    pub fn runtime_page_taken(&self) -> bool {
        self.far.as_ref().is_some_and(|far| {
            far.view.is_none()
                && far.made_before != u64::MAX
                && RuntimeView::open(&far.prefix, self.os_pid, far.made_before, u64::MAX).is_some()
        })
    }

    /// Reads what the far-memory runtime reported since the last call and flags the matching
    /// rows: a fetch of an evicted page is not a first touch. `round` is the reading round.
    pub fn poll_runtime(&mut self, round: u64) {
        let Some(far) = &mut self.far else {
            return;
        };
        if far.view.is_none() {
            far.view = RuntimeView::open(&far.prefix, self.os_pid, far.exec_ns, far.made_before);
            if let Some(view) = &far.view {
                view.allow_backlog(far.backlog);
            }
            far.region_pruned = false;
        }
        // Faults outside the managed region never appear in the log. The page is published
        // before the runtime writes where its region is (a forked child's after registering
        // every page of it): until then no row is taken for outside it.
        if let Some(view) = &far.view
            && !far.region_pruned
            && !view.region().is_empty()
        {
            let region = view.region();
            far.pending_fills
                .retain(|(_, page), _| region.contains(page));
            far.region_pruned = true;
            let (path, reason) = view.fault_path();
            let why = fltrace_runtime_abi::path_reason::name(reason);
            log::info!(
                "process {}: far-memory faults served {}{}{}",
                self.os_pid,
                fltrace_runtime_abi::path::name(path),
                if why.is_empty() { "" } else { ": " },
                why
            );
        }
        let Some(view) = &mut far.view else {
            return;
        };
        let mut fresh = Vec::new();
        view.read_log(&mut fresh, round == u64::MAX);
        far.unmatched.extend(fresh.into_iter().map(|h| (h, round)));
        self.match_runtime_log(round);
    }

    /// Joins the log entries read so far with their rows: a fill flags its row a first touch
    /// or a fetch, any other entry (or none) says the row filled no page.
    pub(super) fn match_runtime_log(&mut self, round: u64) {
        let Some(far) = &mut self.far else {
            return;
        };
        let window = &mut self.out.faults;
        let first_pending = window.first_open();
        if far.pruned_below < first_pending {
            // Rows already settled can no longer be amended.
            let rows_unhandled = &mut far.rows_unhandled;
            far.pending_fills.retain(|_, rows| {
                rows.retain(|r| {
                    let keep = r.row >= first_pending;
                    *rows_unhandled += u64::from(!keep && !r.matched);
                    keep
                });
                !rows.is_empty()
            });
            far.pruned_below = first_pending;
        }
        far.unmatched.retain(|(handled, seen)| {
            // Records are handled in time order up to the newest time of the previous round,
            // so a row written before its entry was read is in two rounds later at the latest.
            if seen.saturating_add(2) > round && round != u64::MAX {
                return true;
            }
            let key = (handled.tid, handled.page);
            let Some(rows) = far.pending_fills.get_mut(&key) else {
                far.orphans += 1;
                return false;
            };
            let Some(newest) = rows
                .iter()
                .map(|r| r.time_ns)
                .filter(|&t| t <= handled.read_ns)
                .max()
            else {
                far.orphans += 1;
                return false;
            };
            // Older rows of the thread on this page can get no entry any more. A row the
            // runtime never served filled no page: the kernel took that access's fault again
            // (under load it sometimes does, untraced too) before the one it served.
            let rows_unhandled = &mut far.rows_unhandled;
            rows.retain(|r| {
                let keep = r.time_ns >= newest;
                if !keep && !r.matched {
                    *rows_unhandled += 1;
                    if window.is_open(r.row) {
                        window.amend(r.row, |fault| fault.flags.0 &= !FaultFlags::ZERO);
                    }
                }
                keep
            });
            let Some(row) = rows.iter_mut().find(|r| r.time_ns == newest) else {
                far.orphans += 1;
                return false;
            };
            far.matched += 1;
            let first_entry = !row.matched;
            row.matched = true;
            if !window.is_open(row.row) {
                // Settled before its entry came: matched, not flagged (counted).
                far.fetches_late += u64::from(handled.kind == fltrace_runtime_abi::kind::FETCH);
                return false;
            }
            if first_entry {
                // The row's time is the fault's entry.
                let wait = handled.read_ns.saturating_sub(newest);
                far.wait_ns += wait;
                far.wait_hist[fltrace_runtime_abi::hist_bucket(wait)] += 1;
                far.resolve_ns += handled.done_ns.saturating_sub(newest);
            }
            if is_fill(handled.kind) {
                row.filled = true;
                window.amend(row.row, |fault| {
                    if handled.kind == fltrace_runtime_abi::kind::FETCH {
                        fault.flags.0 = (fault.flags.0 | FaultFlags::FETCH) & !FaultFlags::ZERO;
                    } else {
                        fault.flags.0 |= FaultFlags::ZERO;
                    }
                });
            } else if !row.filled {
                // Only woken, or write-protection lifted: the page was there already
                // (another thread's fault, or a retry of this access, brought it in).
                window.amend(row.row, |fault| fault.flags.0 &= !FaultFlags::ZERO);
            }
            false
        });
        if round == u64::MAX {
            // The process is gone: rows still unmatched never will be.
            for rows in std::mem::take(&mut far.pending_fills).into_values() {
                far.rows_unhandled += rows.iter().filter(|r| !r.matched).count() as u64;
            }
        }
    }

    /// The far-memory runtime's counters as its page says them now, once it is open.
    pub fn runtime_counters(&self) -> Option<Vec<(&'static str, u64)>> {
        let view = self.far.as_ref()?.view.as_ref()?;
        Some(view.counters().to_vec())
    }

    /// Whether the far-memory runtime reported running out of `-M`.
    pub fn far_memory_exhausted(&self) -> bool {
        self.far
            .as_ref()
            .and_then(|f| f.view.as_ref())
            .is_some_and(RuntimeView::exhausted)
    }
}
