//! The figures of `fltrace report`'s faults table: the groups `--top` shows, the total, and
//! how few code locations cover most faults.

use crate::group::{Group, GroupBy, coverage, group_fault_counts};
use crate::{FaultCounts, ResolvedStacks};

/// The share of faults the headline metric covers.
pub const COVER_SHARE: f64 = 0.95;

/// How many of `len` rows `--top N` shows: all of them for 0.
pub fn rows_shown(top: usize, len: usize) -> usize {
    if top == 0 { len } else { top.min(len) }
}

/// The first rows of `list` that `--top N` shows.
pub fn take_top<T>(top: usize, mut list: Vec<T>) -> Vec<T> {
    list.truncate(rows_shown(top, list.len()));
    list
}

/// Faults grouped by their own stacks, as the report shows them.
#[derive(Debug, Clone)]
pub struct FaultReport {
    /// How the faults are grouped.
    pub by: GroupBy,
    /// The groups shown, most faults first.
    pub groups: Vec<Group>,
    /// Every fault counted, shown or not.
    pub total: u64,
    /// How many code locations (lines) cover [`COVER_SHARE`] of the faults.
    pub covering: usize,
    /// How many code locations (lines) took faults.
    pub locations: usize,
}

impl FaultReport {
    /// Groups the faults of `counted` by `by` and keeps the first `top` groups (all for 0).
    pub fn of<'a>(
        counted: impl Iterator<Item = (&'a FaultCounts, &'a ResolvedStacks)> + Clone,
        by: GroupBy,
        top: usize,
    ) -> FaultReport {
        let mut groups = group_fault_counts(counted.clone(), by);
        if by == GroupBy::Stack {
            groups = merge_read_alike(groups);
        }
        let lines = if by == GroupBy::Line {
            groups.clone()
        } else {
            group_fault_counts(counted.clone(), GroupBy::Line)
        };
        FaultReport {
            by,
            covering: coverage(&lines, COVER_SHARE),
            locations: lines.len(),
            total: counted.map(|(counts, _)| counts.total()).sum(),
            groups: take_top(top, groups),
        }
    }
}

/// Whole stacks that differ only in their raw addresses or fault flags (a loop the compiler
/// unrolled faults from several instructions of one line; reads and writes) read the same
/// to a person: one row each, their counts added, largest first again. The original's CSV
/// keeps them apart (`fltrace-data-report-<pid>.out`, one row per stack and flags).
fn merge_read_alike(groups: Vec<Group>) -> Vec<Group> {
    let mut merged: Vec<Group> = Vec::with_capacity(groups.len());
    let mut index: rustc_hash::FxHashMap<crate::GroupKey, usize> = Default::default();
    for mut group in groups {
        group.key.addresses = None;
        group.key.flags = None;
        match index.get(&group.key) {
            Some(&i) => merged[i].absorb(&group),
            None => {
                index.insert(group.key.clone(), merged.len());
                merged.push(group);
            }
        }
    }
    merged.sort_by(|a, b| {
        b.count
            .cmp(&a.count)
            .then_with(|| a.key.location.cmp(&b.key.location))
            .then_with(|| a.key.stack.cmp(&b.key.stack))
    });
    merged
}

#[cfg(test)]
mod tests {
    use crate::test_support::loc;
    use fltrace_trace::{Fault, FaultFlags};

    use super::*;
    use fltrace_trace::{CodeAddr, VirtAddr};

    fn faults(stack_id: u32, n: usize) -> Vec<Fault> {
        let fault = Fault {
            time_ns: 1,
            pid: 1,
            tid: 1,
            ip: CodeAddr::new(0),
            addr: VirtAddr::new(0x1000),
            flags: FaultFlags(FaultFlags::WRITE),
            stack_id,
        };
        vec![fault; n]
    }

    #[test]
    fn top_rows() {
        assert_eq!(rows_shown(0, 7), 7);
        assert_eq!(rows_shown(3, 7), 3);
        assert_eq!(rows_shown(9, 7), 7);
        assert_eq!(take_top(2, vec![1, 2, 3]), vec![1, 2]);
        assert_eq!(take_top(0, vec![1, 2, 3]), vec![1, 2, 3]);
    }

    /// 90 faults in `fill` (two stacks, one line), 6 in `scan`, 4 in `main`: two lines cover
    /// 95%; by stack, `--top 2` shows the two `fill` stacks and still counts all 100.
    #[test]
    fn groups_total_and_coverage() {
        let mut stacks = ResolvedStacks::default();
        stacks.insert(
            0,
            vec![loc("fill", 10), loc("main", 3)],
            [0x10, 0x30].map(CodeAddr::new).to_vec(),
        );
        stacks.insert(
            1,
            vec![loc("fill", 10), loc("other", 7)],
            [0x10, 0x70].map(CodeAddr::new).to_vec(),
        );
        stacks.insert(2, vec![loc("scan", 20)], [0x20].map(CodeAddr::new).to_vec());
        stacks.insert(3, vec![loc("main", 4)], [0x40].map(CodeAddr::new).to_vec());
        let all: Vec<Fault> = [(0, 50), (1, 40), (2, 6), (3, 4)]
            .into_iter()
            .flat_map(|(id, n)| faults(id, n))
            .collect();
        let counts = FaultCounts::of(&all);
        let by_line = FaultReport::of([(&counts, &stacks)].into_iter(), GroupBy::Line, 0);
        let lines: Vec<(&str, u64)> = by_line
            .groups
            .iter()
            .map(|g| (&*g.key.location.function, g.count))
            .collect();
        assert_eq!(lines, vec![("fill", 90), ("scan", 6), ("main", 4)]);
        assert_eq!(
            (by_line.total, by_line.covering, by_line.locations),
            (100, 2, 3)
        );
        let by_stack = FaultReport::of([(&counts, &stacks)].into_iter(), GroupBy::Stack, 2);
        let shown: Vec<u64> = by_stack.groups.iter().map(|g| g.count).collect();
        assert_eq!(shown, vec![50, 40]);
        assert_eq!(
            (by_stack.total, by_stack.covering, by_stack.locations),
            (100, 2, 3)
        );
    }

    /// Two stacks that read the same (other return addresses on the same lines) and faults
    /// of two kinds on one stack are one row by stack, with every fault of them: its counts
    /// of invalid accesses and of truncated stacks too, so that the rows' truncated faults
    /// add up to the report's (one stack truncated, the other whole, as a loaded machine
    /// leaves the unwinder's copies of the dynamic loader's early stacks).
    #[test]
    fn stacks_that_read_the_same_are_one_row() {
        let mut stacks = ResolvedStacks::default();
        stacks.insert(
            0,
            vec![loc("fill", 10), loc("main", 3)],
            [0x10, 0x30].map(CodeAddr::new).to_vec(),
        );
        stacks.insert(
            1,
            vec![loc("fill", 10), loc("main", 3)],
            [0x14, 0x38].map(CodeAddr::new).to_vec(),
        );
        let mut all = faults(0, 3);
        all.extend(faults(1, 2));
        let mut reads = faults(1, 4);
        for fault in &mut reads {
            fault.flags = FaultFlags(0);
        }
        all.extend(reads);
        let mut invalid = faults(1, 1);
        invalid[0].flags = FaultFlags(FaultFlags::WRITE | FaultFlags::INVALID);
        all.extend(invalid);
        stacks.mark_truncated(1);
        let counts = FaultCounts::of(&all);
        let report = FaultReport::of([(&counts, &stacks)].into_iter(), GroupBy::Stack, 0);
        assert_eq!(report.groups.len(), 1, "{:?}", report.groups);
        let group = &report.groups[0];
        assert_eq!((group.count, group.kinds), (10, [4, 6, 0]));
        assert_eq!(group.kind_name(), "mixed");
        assert_eq!((group.invalid, group.truncated), (1, 7));
    }
}
