//! Two recordings side by side: which call sites fault more or less in B than in A.

use std::sync::Arc;

use rustc_hash::FxHashMap;

use crate::{Group, GroupBy, Location, ThreadBy, ThreadGroup};

/// `diff --by`: what two recordings' faults are compared by, perf diff's keys.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DiffBy {
    /// A place of the faults' own stacks.
    Group(GroupBy),
    /// The process, thread or thread name.
    Thread(ThreadBy),
}

/// `--by` of `diff`: the places of `report --by` and the threads' keys, every value one the
/// command takes (allocation sites are not compared).
#[cfg(feature = "clap")]
impl clap::ValueEnum for DiffBy {
    fn value_variants<'a>() -> &'a [DiffBy] {
        &[
            DiffBy::Group(GroupBy::Line),
            DiffBy::Group(GroupBy::Function),
            DiffBy::Group(GroupBy::Stack),
            DiffBy::Group(GroupBy::Dso),
            DiffBy::Thread(ThreadBy::Comm),
            DiffBy::Thread(ThreadBy::Pid),
            DiffBy::Thread(ThreadBy::Tid),
        ]
    }

    fn to_possible_value(&self) -> Option<clap::builder::PossibleValue> {
        let (name, help) = match self {
            DiffBy::Group(GroupBy::Line) => ("line", "The file:line of the call site"),
            DiffBy::Group(GroupBy::Function) => ("function", "The function of the call site"),
            DiffBy::Group(GroupBy::Stack) => ("stack", "The whole stack"),
            DiffBy::Group(GroupBy::Dso) => ("dso", "The library or executable"),
            DiffBy::Thread(ThreadBy::Comm) => ("comm", "The thread name (`comm`)"),
            DiffBy::Thread(ThreadBy::Pid) => {
                ("pid", "The process (by number: the same pid in both)")
            }
            DiffBy::Thread(ThreadBy::Tid) => ("tid", "The thread (by number)"),
        };
        Some(clap::builder::PossibleValue::new(name).help(help))
    }
}

/// B less A.
fn delta(a: u64, b: u64) -> i64 {
    b as i64 - a as i64
}

/// B over A; `None` where A has none.
fn ratio(a: u64, b: u64) -> Option<f64> {
    (a > 0).then(|| b as f64 / a as f64)
}

/// One call site (line, function, library or whole stack) with its faults in A and in B.
#[derive(Debug, Clone, PartialEq)]
pub struct DiffRow {
    /// The site, as in [`crate::GroupKey::location`].
    pub location: Location,
    /// The whole stack, innermost first, when diffing by stack.
    pub stack: Option<Arc<[Location]>>,
    /// Faults in A.
    pub a: u64,
    /// Faults in B.
    pub b: u64,
}

impl DiffRow {
    /// B less A.
    pub fn delta(&self) -> i64 {
        delta(self.a, self.b)
    }

    /// B over A; `None` where A has none.
    pub fn ratio(&self) -> Option<f64> {
        ratio(self.a, self.b)
    }
}

/// One process, thread or thread name with its faults in A and in B.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ThreadDiffRow {
    /// The process, by pid and thread grouping.
    pub pid: Option<u32>,
    /// The thread, by tid grouping.
    pub tid: Option<u32>,
    /// The thread's name (the process's by pid), as in either recording.
    pub comm: String,
    /// Faults in A.
    pub a: u64,
    /// Faults in B.
    pub b: u64,
}

impl ThreadDiffRow {
    /// B less A.
    pub fn delta(&self) -> i64 {
        delta(self.a, self.b)
    }

    /// B over A; `None` where A has none.
    pub fn ratio(&self) -> Option<f64> {
        ratio(self.a, self.b)
    }
}

/// Matches the groups of A and B (from [`crate::group_faults_by_thread`] with the same
/// [`ThreadBy`]) by name, and by pid or tid where grouped by them (a process is one row
/// whatever names it ran under). Largest absolute change first.
pub fn diff_thread_groups(
    a: &[ThreadGroup],
    b: &[ThreadGroup],
    by: ThreadBy,
) -> Vec<ThreadDiffRow> {
    type Key = (Option<u32>, Option<u32>, String);
    let key = |g: &ThreadGroup| -> Key {
        match by {
            ThreadBy::Comm => (None, None, g.comm.clone()),
            ThreadBy::Pid => (g.pid, None, String::new()),
            ThreadBy::Tid => (g.pid, g.tid, String::new()),
        }
    };
    let mut rows: FxHashMap<Key, ThreadDiffRow> = FxHashMap::default();
    for (groups, side) in [(a, 0), (b, 1)] {
        for group in groups {
            let row = rows.entry(key(group)).or_insert_with(|| ThreadDiffRow {
                pid: group.pid,
                tid: group.tid,
                comm: group.comm.clone(),
                a: 0,
                b: 0,
            });
            if side == 0 {
                row.a += group.count;
            } else {
                row.b += group.count;
            }
        }
    }
    let mut rows: Vec<ThreadDiffRow> = rows.into_values().collect();
    rows.sort_by(|x, y| {
        y.delta()
            .unsigned_abs()
            .cmp(&x.delta().unsigned_abs())
            .then_with(|| y.a.max(y.b).cmp(&x.a.max(x.b)))
            .then_with(|| (x.pid, x.tid, &x.comm).cmp(&(y.pid, y.tid, &y.comm)))
    });
    rows
}

/// Matches the groups of A and B (from [`crate::group_faults`] with the same
/// [`crate::GroupBy`]) by their site, and for stacks by their frames; raw addresses and fault
/// flags are left out, as they differ between runs. Largest absolute change first, then the
/// larger count, then by site.
pub fn diff_groups(a: &[Group], b: &[Group]) -> Vec<DiffRow> {
    type Key = (Location, Option<Arc<[Location]>>);
    let mut rows: FxHashMap<Key, (u64, u64)> = FxHashMap::default();
    for (groups, side) in [(a, 0), (b, 1)] {
        for group in groups {
            let key = (group.key.location.clone(), group.key.stack.clone());
            let counts = rows.entry(key).or_default();
            if side == 0 {
                counts.0 += group.count;
            } else {
                counts.1 += group.count;
            }
        }
    }
    let mut rows: Vec<DiffRow> = rows
        .into_iter()
        .map(|((location, stack), (a, b))| DiffRow {
            location,
            stack,
            a,
            b,
        })
        .collect();
    rows.sort_by(|x, y| {
        y.delta()
            .unsigned_abs()
            .cmp(&x.delta().unsigned_abs())
            .then_with(|| y.a.max(y.b).cmp(&x.a.max(x.b)))
            .then_with(|| x.location.cmp(&y.location))
            .then_with(|| x.stack.cmp(&y.stack))
    });
    rows
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_support::loc;
    use fltrace_trace::{CodeAddr, VirtAddr};

    use fltrace_trace::{Fault, FaultFlags};

    use crate::{ResolvedStacks, group_faults};

    fn faults(counts: &[(u32, usize, u16)]) -> Vec<Fault> {
        counts
            .iter()
            .flat_map(|&(stack_id, n, flags)| {
                std::iter::repeat_n(
                    Fault {
                        time_ns: 0,
                        pid: 1,
                        tid: 1,
                        ip: CodeAddr::new(0),
                        addr: VirtAddr::new(0),
                        flags: FaultFlags(flags),
                        stack_id,
                    },
                    n,
                )
            })
            .collect()
    }

    /// Sites match across recordings whatever their addresses and flags; rows come largest
    /// change first, with sites only in one side.
    #[test]
    fn matches_and_sorts() {
        let mut stacks_a = ResolvedStacks::default();
        stacks_a.insert(
            0,
            vec![loc("fill", 10), loc("main", 1)],
            [0x10, 0x20].map(CodeAddr::new).to_vec(),
        );
        stacks_a.insert(
            1,
            vec![loc("scan", 20), loc("main", 2)],
            [0x30, 0x40].map(CodeAddr::new).to_vec(),
        );
        stacks_a.insert(2, vec![loc("gone", 30)], [0x50].map(CodeAddr::new).to_vec());
        // B: another build, other addresses; fill's faults now mixed reads and writes.
        let mut stacks_b = ResolvedStacks::default();
        stacks_b.insert(
            5,
            vec![loc("fill", 10), loc("main", 1)],
            [0x110, 0x120].map(CodeAddr::new).to_vec(),
        );
        stacks_b.insert(
            6,
            vec![loc("scan", 20), loc("main", 2)],
            [0x130, 0x140].map(CodeAddr::new).to_vec(),
        );
        stacks_b.insert(7, vec![loc("new", 40)], [0x150].map(CodeAddr::new).to_vec());
        let a = faults(&[(0, 100, 1), (1, 50, 0), (2, 5, 0)]);
        let b = faults(&[(5, 250, 1), (5, 50, 0), (6, 40, 0), (7, 7, 0)]);
        for by in [GroupBy::Line, GroupBy::Stack] {
            let rows = diff_groups(
                &group_faults([(&a[..], &stacks_a)], by),
                &group_faults([(&b[..], &stacks_b)], by),
            );
            let got: Vec<(&str, u64, u64, i64)> = rows
                .iter()
                .map(|r| (&*r.location.function, r.a, r.b, r.delta()))
                .collect();
            assert_eq!(
                got,
                vec![
                    ("fill", 100, 300, 200),
                    ("scan", 50, 40, -10),
                    ("new", 0, 7, 7),
                    ("gone", 5, 0, -5),
                ],
                "{by:?}"
            );
            assert_eq!(rows[0].ratio(), Some(3.0));
            assert_eq!(rows[2].ratio(), None);
            assert_eq!(rows[0].stack.is_some(), by == GroupBy::Stack);
        }
    }

    fn thread(pid: u32, tid: u32, comm: &str, count: u64) -> ThreadGroup {
        ThreadGroup {
            pid: Some(pid),
            tid: Some(tid),
            comm: comm.into(),
            count,
            kinds: [0, count, 0],
            zero: 0,
        }
    }

    /// Threads match by name, or by number where grouped by it; largest change first.
    #[test]
    fn threads_match_by_name_or_number() {
        let a = [thread(7, 7, "main", 10), thread(7, 8, "worker", 5)];
        let b = [thread(9, 9, "main", 30), thread(9, 10, "worker", 5)];
        let rows = diff_thread_groups(&a, &b, ThreadBy::Comm);
        let got: Vec<(&str, u64, u64)> = rows.iter().map(|r| (&*r.comm, r.a, r.b)).collect();
        assert_eq!(got, [("main", 10, 30), ("worker", 5, 5)]);
        assert_eq!(rows[0].ratio(), Some(3.0));
        // By tid, other numbers are other threads: each is new or gone.
        let rows = diff_thread_groups(&a, &b, ThreadBy::Tid);
        assert_eq!(rows.len(), 4);
        assert_eq!((rows[0].tid, rows[0].a, rows[0].b), (Some(9), 0, 30));
    }
}
