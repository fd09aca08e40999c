//! Two recordings side by side: which call sites fault more or less in B than in A.

use std::sync::Arc;

use rustc_hash::FxHashMap;

use crate::{Group, Location};

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
        self.b as i64 - self.a as i64
    }

    /// B over A; `None` where A has none.
    pub fn ratio(&self) -> Option<f64> {
        (self.a > 0).then(|| self.b as f64 / self.a as f64)
    }
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

    use crate::{GroupBy, ResolvedStacks, group_faults};

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
}
