//! Faults by process and thread: `report --by comm|pid|tid`, and the `--tid`/`--comm`
//! filters of every analysis command.

use rustc_hash::FxHashMap;

use fltrace_trace::{Fault, FaultFlags, ProcessTrace};

use crate::{process_name_in, thread_name};

/// What faults are grouped by, per process or thread.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ThreadBy {
    /// The thread's name (`comm`, as perf names it), over every process.
    Comm,
    /// The process.
    Pid,
    /// The thread.
    Tid,
}

/// The faults of one process, thread or name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ThreadGroup {
    /// The process (none when grouped by name over several).
    pub pid: Option<u32>,
    /// The thread (when grouped by thread).
    pub tid: Option<u32>,
    /// The thread's name by [`ThreadBy::Tid`] and [`ThreadBy::Comm`], the process's by
    /// [`ThreadBy::Pid`].
    pub comm: String,
    /// How many faults.
    pub count: u64,
    /// How many were reads, writes, write-protect faults.
    pub kinds: [u64; 3],
    /// How many were first touches.
    pub zero: u64,
}

/// The generation (exec) a fault's stack was taken in.
fn generation(trace: &ProcessTrace, fault: &Fault) -> u32 {
    trace.stack(fault.stack_id).map_or(0, |s| s.generation)
}

/// Groups the faults of `traces` `by` process, thread or name, largest first (ties by pid,
/// tid, name).
pub fn group_faults_by_thread<'a>(
    traces: impl IntoIterator<Item = &'a ProcessTrace>,
    by: ThreadBy,
) -> Vec<ThreadGroup> {
    let mut groups: FxHashMap<(Option<u32>, Option<u32>, String), ThreadGroup> =
        FxHashMap::default();
    for trace in traces {
        let mut names: FxHashMap<(u32, u32), String> = FxHashMap::default();
        for fault in &trace.faults {
            let generation = generation(trace, fault);
            let name = names
                .entry((generation, fault.tid))
                .or_insert_with(|| match by {
                    ThreadBy::Pid => process_name_in(trace, generation),
                    _ => thread_name(trace, generation, fault.tid),
                })
                .clone();
            let key = match by {
                ThreadBy::Comm => (None, None, name),
                ThreadBy::Pid => (Some(trace.pid), None, name),
                ThreadBy::Tid => (Some(trace.pid), Some(fault.tid), name),
            };
            let group = groups.entry(key.clone()).or_insert_with(|| ThreadGroup {
                pid: key.0,
                tid: key.1,
                comm: key.2,
                count: 0,
                kinds: [0; 3],
                zero: 0,
            });
            group.count += 1;
            group.kinds[fault.flags.kind() as usize] += 1;
            if fault.flags.has(FaultFlags::ZERO) {
                group.zero += 1;
            }
        }
    }
    let mut groups: Vec<ThreadGroup> = groups.into_values().collect();
    // A process that exec'd is one row by pid: its names joined, in the order they came.
    groups.sort_by(|a, b| {
        b.count
            .cmp(&a.count)
            .then_with(|| a.pid.cmp(&b.pid))
            .then_with(|| a.tid.cmp(&b.tid))
            .then_with(|| a.comm.cmp(&b.comm))
    });
    groups
}

/// Whether `asked` (a `--comm` value) names `name`: spelled as the kernel spells it, spaces
/// included (`GC Thread#0`), or with the spaces made underscores as earlier versions showed
/// names (`GC_Thread#0`).
fn same_name(asked: &str, name: &str) -> bool {
    asked == name
        || (asked.len() == name.len() && asked.replace(' ', "_") == name.replace(' ', "_"))
}

/// Which threads' faults are kept: `--tid` and `--comm`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ThreadFilter {
    /// Only these threads.
    pub tids: Vec<u32>,
    /// Only threads (or processes) of these names.
    pub comms: Vec<String>,
}

impl ThreadFilter {
    /// Whether it keeps every fault.
    pub fn is_empty(&self) -> bool {
        self.tids.is_empty() && self.comms.is_empty()
    }

    /// Keeps the faults of `trace` the filter selects; returns how many were left out.
    pub fn retain(&self, trace: &mut ProcessTrace) -> u64 {
        if self.is_empty() {
            return 0;
        }
        let before = trace.faults.len();
        let mut names: FxHashMap<(u32, u32), bool> = FxHashMap::default();
        let faults = std::mem::take(&mut trace.faults);
        let kept: Vec<Fault> = faults
            .into_iter()
            .filter(|fault| {
                if !self.tids.is_empty() && !self.tids.contains(&fault.tid) {
                    return false;
                }
                if self.comms.is_empty() {
                    return true;
                }
                let generation = generation(trace, fault);
                *names.entry((generation, fault.tid)).or_insert_with(|| {
                    let thread = thread_name(trace, generation, fault.tid);
                    let process = process_name_in(trace, generation);
                    self.comms
                        .iter()
                        .any(|c| same_name(c, &thread) || same_name(c, &process))
                })
            })
            .collect();
        trace.faults = kept;
        (before - trace.faults.len()) as u64
    }
}
