//! Faults counted per (stack, flags): what every report grouping needs of them, held in
//! memory proportional to the distinct stacks rather than to the faults, so that a faults
//! file can be streamed row group by row group ([`FaultCounts::stream`]).

use std::ops::Range;

use rustc_hash::FxHashMap;

use fltrace_trace::{Error, Fault, FaultFlags, FaultKey};

/// The faults of one (stack, flags): how many, and the first and last time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Tally {
    /// How many faults.
    pub count: u64,
    /// The earliest, nanoseconds since the Unix epoch.
    pub first_ns: u64,
    /// The latest.
    pub last_ns: u64,
}

/// One process's faults counted per (stack id, flags).
#[derive(Debug, Clone, Default)]
pub struct FaultCounts {
    tallies: FxHashMap<(u32, FaultFlags), Tally>,
    /// The same faults per (stack id, flags, thread), for profiles labelled by thread.
    threads: FxHashMap<(u32, FaultFlags, u32), u64>,
    total: u64,
}

impl FaultCounts {
    /// No faults yet.
    pub fn new() -> FaultCounts {
        FaultCounts::default()
    }

    /// The counts of faults held in memory.
    pub fn of(faults: &[Fault]) -> FaultCounts {
        let mut counts = FaultCounts::new();
        counts.extend(faults.iter().map(FaultKey::from));
        counts
    }

    /// Counts the faults of `row_groups` (as [`fltrace_trace::Recording::fault_keys`] reads
    /// them) one group at a time, those within `window` (time in ns since the Unix epoch)
    /// only if one is given.
    pub fn stream(
        row_groups: impl IntoIterator<Item = Result<Vec<FaultKey>, Error>>,
        window: Option<Range<u64>>,
    ) -> Result<FaultCounts, Error> {
        let mut counts = FaultCounts::new();
        for group in row_groups {
            let group = group?;
            match &window {
                Some(window) => counts.extend(
                    group
                        .into_iter()
                        .filter(|key| window.contains(&key.time_ns)),
                ),
                None => counts.extend(group),
            }
        }
        Ok(counts)
    }

    /// Counts one fault.
    pub fn add(&mut self, key: FaultKey) {
        self.total += 1;
        self.tallies
            .entry((key.stack_id, key.flags))
            .and_modify(|t| {
                t.count += 1;
                t.first_ns = t.first_ns.min(key.time_ns);
                t.last_ns = t.last_ns.max(key.time_ns);
            })
            .or_insert(Tally {
                count: 1,
                first_ns: key.time_ns,
                last_ns: key.time_ns,
            });
        *self
            .threads
            .entry((key.stack_id, key.flags, key.tid))
            .or_insert(0) += 1;
    }

    /// How many faults were counted.
    pub fn total(&self) -> u64 {
        self.total
    }

    /// How many (stack, flags) pairs are held: the memory this takes.
    pub fn entries(&self) -> usize {
        self.tallies.len()
    }

    /// The (stack id, flags) pairs with their tallies, by stack id then flags.
    pub fn iter(&self) -> Vec<(u32, FaultFlags, Tally)> {
        let mut all: Vec<(u32, FaultFlags, Tally)> = self
            .tallies
            .iter()
            .map(|(&(stack_id, flags), &tally)| (stack_id, flags, tally))
            .collect();
        all.sort_unstable_by_key(|&(stack_id, flags, _)| (stack_id, flags));
        all
    }

    /// The faults per (stack id, flags, thread id), by stack id, flags and thread.
    pub fn per_thread(&self) -> Vec<(u32, FaultFlags, u32, u64)> {
        let mut all: Vec<(u32, FaultFlags, u32, u64)> = self
            .threads
            .iter()
            .map(|(&(stack_id, flags, tid), &count)| (stack_id, flags, tid, count))
            .collect();
        all.sort_unstable_by_key(|&(stack_id, flags, tid, _)| (stack_id, flags, tid));
        all
    }

    /// Faults per stack id, by stack id.
    pub fn per_stack(&self) -> Vec<(u32, u64)> {
        let mut per_stack: Vec<(u32, u64)> = Vec::new();
        for (stack_id, _, tally) in self.iter() {
            match per_stack.last_mut() {
                Some((last, count)) if *last == stack_id => *count += tally.count,
                _ => per_stack.push((stack_id, tally.count)),
            }
        }
        per_stack
    }

    /// The first and last fault's time, if there are faults.
    pub fn time_range(&self) -> Option<(u64, u64)> {
        let first = self.tallies.values().map(|t| t.first_ns).min()?;
        let last = self.tallies.values().map(|t| t.last_ns).max()?;
        Some((first, last))
    }

    /// Keeps the pairs `keep` says; returns how many faults were dropped.
    pub fn retain(&mut self, mut keep: impl FnMut(u32, FaultFlags) -> bool) -> u64 {
        let before = self.total;
        self.tallies
            .retain(|&(stack_id, flags), _| keep(stack_id, flags));
        self.threads
            .retain(|&(stack_id, flags, _), _| self.tallies.contains_key(&(stack_id, flags)));
        self.total = self.tallies.values().map(|t| t.count).sum();
        before - self.total
    }
}

impl Extend<FaultKey> for FaultCounts {
    fn extend<I: IntoIterator<Item = FaultKey>>(&mut self, keys: I) {
        for key in keys {
            self.add(key);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(time_ns: u64, stack_id: u32, flags: u16) -> FaultKey {
        FaultKey {
            time_ns,
            flags: FaultFlags(flags),
            stack_id,
            tid: 1 + (time_ns % 2) as u32,
        }
    }

    /// The state held after streaming grows with the distinct (stack, flags) pairs, not
    /// with the faults: 100 row groups of 64K faults over 7 stacks hold 14 entries, exactly
    /// as many as one row group, and count every fault.
    #[test]
    fn held_state_is_per_stack_not_per_fault() {
        const ROWS: u64 = 1 << 16;
        let row_group = |group: u64| -> Result<Vec<FaultKey>, Error> {
            Ok((0..ROWS)
                .map(|i| key(group * ROWS + i, (i % 7) as u32, (i % 2) as u16))
                .collect())
        };
        let one = FaultCounts::stream((0..1).map(row_group), None).unwrap();
        let hundred = FaultCounts::stream((0..100).map(row_group), None).unwrap();
        assert_eq!(one.entries(), 14);
        assert_eq!(hundred.entries(), 14);
        assert_eq!(hundred.total(), 100 * ROWS);
        assert_eq!(hundred.per_stack().len(), 7);
        let per_stack: u64 = hundred.per_stack().iter().map(|(_, n)| n).sum();
        assert_eq!(per_stack, 100 * ROWS);
        assert_eq!(hundred.time_range(), Some((0, 100 * ROWS - 1)));
    }

    /// Streaming with a window counts the same faults as filtering them in memory.
    #[test]
    fn window_and_retain() {
        let faults: Vec<FaultKey> = (0..1000).map(|i| key(i, (i % 3) as u32, 0)).collect();
        let groups = faults.chunks(100).map(|c| Ok(c.to_vec()));
        let counts = FaultCounts::stream(groups, Some(250..750)).unwrap();
        assert_eq!(counts.total(), 500);
        assert_eq!(counts.time_range(), Some((250, 749)));
        let expected: Vec<(u32, u64)> = (0..3)
            .map(|s| {
                let n = (250..750).filter(|i| i % 3 == s).count() as u64;
                (s as u32, n)
            })
            .collect();
        assert_eq!(counts.per_stack(), expected);
        let mut counts = counts;
        assert_eq!(counts.retain(|stack, _| stack != 1), expected[1].1);
        assert_eq!(counts.total(), 500 - expected[1].1);
        assert_eq!(counts.entries(), 2);
        // Per thread (tid 1 for even times, 2 for odd), the kept stacks' faults exactly.
        let per_thread = counts.per_thread();
        let expected_threads: Vec<(u32, FaultFlags, u32, u64)> = [0u32, 2]
            .iter()
            .flat_map(|&s| {
                [1u32, 2].map(|tid| {
                    let n = (250..750u64)
                        .filter(|i| i % 3 == u64::from(s) && 1 + (i % 2) as u32 == tid)
                        .count() as u64;
                    (s, FaultFlags(0), tid, n)
                })
            })
            .collect();
        assert_eq!(per_thread, expected_threads);
    }

    /// A row group that fails to read fails the stream.
    #[test]
    fn errors_pass_through() {
        let groups = vec![
            Ok(vec![key(1, 0, 0)]),
            Err(Error::NoSuchProcess(7)),
            Ok(vec![key(2, 0, 0)]),
        ];
        assert!(matches!(
            FaultCounts::stream(groups, None),
            Err(Error::NoSuchProcess(7))
        ));
    }
}
