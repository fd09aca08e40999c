//! Grouping faults by where they happen.

use std::sync::Arc;

use rustc_hash::FxHashMap;

use fltrace_trace::{Fault, FaultFlags, FaultKind};

use crate::{Location, ResolvedStacks};

/// What faults are grouped by.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GroupBy {
    /// The whole call stack and the fault kind (the original tool's report rows).
    Stack,
    /// The function of the call site.
    Function,
    /// The `file:line` of the call site.
    Line,
    /// The library or executable of the innermost frame.
    Dso,
}

/// What a group's faults share.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct GroupKey {
    /// The call site: the innermost frame of the program's own code that has a source line
    /// (a fault inside libc's `memset`, or in a standard-library function inlined into the
    /// program, is attributed to the line that called it); failing that the innermost frame
    /// with a line, failing that the innermost frame. For [`GroupBy::Function`] the line is 0, for
    /// [`GroupBy::Dso`] only the library is set.
    pub location: Location,
    /// The whole stack, innermost first, for [`GroupBy::Stack`].
    pub stack: Option<Arc<[Location]>>,
    /// The raw frame addresses, for [`GroupBy::Stack`].
    pub addresses: Option<Arc<[u64]>>,
    /// The fault flags, for [`GroupBy::Stack`].
    pub flags: Option<FaultFlags>,
}

/// Faults sharing a key.
#[derive(Debug, Clone)]
pub struct Group {
    /// What they share.
    pub key: GroupKey,
    /// How many.
    pub count: u64,
    /// How many were reads, writes, write-protect faults.
    pub kinds: [u64; 3],
    /// How many were first touches.
    pub zero: u64,
    /// How many brought an evicted page back from far memory.
    pub fetch: u64,
}

impl Group {
    /// `read`, `write`, `wrprotect`, or `mixed`.
    pub fn kind_name(&self) -> &'static str {
        let kinds = [FaultKind::Read, FaultKind::Write, FaultKind::WriteProtect];
        let present: Vec<FaultKind> = kinds
            .into_iter()
            .zip(self.kinds)
            .filter(|(_, n)| *n > 0)
            .map(|(k, _)| k)
            .collect();
        match present.as_slice() {
            [one] => one.name(),
            _ => "mixed",
        }
    }
}

impl Group {
    /// `zero` (all first touches), `fetch` (all brought back from far memory), `regular`
    /// (neither), or `mixed`: the original's `type` column, extended with fetches.
    pub fn type_name(&self) -> &'static str {
        match (self.zero, self.fetch) {
            (z, 0) if z == self.count => "zero",
            (0, f) if f == self.count => "fetch",
            (0, 0) => "regular",
            _ => "mixed",
        }
    }
}

/// The call site of a stack: see [`GroupKey::location`].
pub fn call_site(stack: &[Location]) -> Option<&Location> {
    stack
        .iter()
        .find(|l| l.has_line() && !l.system)
        .or_else(|| stack.iter().find(|l| l.has_line()))
        .or_else(|| stack.first())
}

/// Groups the faults of one or more processes, largest group first (ties by location).
/// `sources` pairs each process's faults with its resolved stacks.
pub fn group_faults<'a>(
    sources: impl IntoIterator<Item = (&'a [Fault], &'a ResolvedStacks)>,
    by: GroupBy,
) -> Vec<Group> {
    let unknown = Location {
        function: "[unknown]".into(),
        file: "".into(),
        line: 0,
        lib: "[unknown]".into(),
        system: false,
    };
    let mut groups: FxHashMap<GroupKey, Group> = FxHashMap::default();
    for (faults, stacks) in sources {
        // Keys are built once per (stack, flags) of this process, not once per fault.
        let mut keys: FxHashMap<(u32, FaultFlags), GroupKey> = FxHashMap::default();
        for fault in faults {
            let key = keys
                .entry((fault.stack_id, fault.flags))
                .or_insert_with(|| {
                    let stack = stacks.get(fault.stack_id);
                    let site = call_site(stack).unwrap_or(&unknown);
                    match by {
                        GroupBy::Stack => GroupKey {
                            location: site.clone(),
                            stack: Some(stack.into()),
                            addresses: stacks.addresses(fault.stack_id),
                            flags: Some(fault.flags),
                        },
                        GroupBy::Line => GroupKey {
                            location: site.clone(),
                            stack: None,
                            addresses: None,
                            flags: None,
                        },
                        GroupBy::Function => GroupKey {
                            location: Location {
                                line: 0,
                                ..site.clone()
                            },
                            stack: None,
                            addresses: None,
                            flags: None,
                        },
                        GroupBy::Dso => GroupKey {
                            location: Location {
                                function: "".into(),
                                file: "".into(),
                                line: 0,
                                lib: stack.first().unwrap_or(&unknown).lib.clone(),
                                system: false,
                            },
                            stack: None,
                            addresses: None,
                            flags: None,
                        },
                    }
                });
            let group = groups.entry(key.clone()).or_insert_with(|| Group {
                key: key.clone(),
                count: 0,
                kinds: [0; 3],
                zero: 0,
                fetch: 0,
            });
            group.count += 1;
            group.kinds[fault.flags.kind() as usize] += 1;
            if fault.flags.has(FaultFlags::ZERO) {
                group.zero += 1;
            }
            if fault.flags.has(FaultFlags::FETCH) {
                group.fetch += 1;
            }
        }
    }
    let mut groups: Vec<Group> = groups.into_values().collect();
    groups.sort_by(|a, b| {
        b.count
            .cmp(&a.count)
            .then_with(|| a.key.location.cmp(&b.key.location))
            .then_with(|| a.key.flags.cmp(&b.key.flags))
    });
    groups
}

/// How many of the (sorted) groups it takes to cover `share` (0..=1) of all faults: the
/// WORDS'23 paper's measure of how concentrated faulting code is.
pub fn coverage(groups: &[Group], share: f64) -> usize {
    let total: u64 = groups.iter().map(|g| g.count).sum();
    if total == 0 {
        return 0;
    }
    let needed = (total as f64 * share).ceil() as u64;
    let mut sum = 0;
    for (i, group) in groups.iter().enumerate() {
        sum += group.count;
        if sum >= needed {
            return i + 1;
        }
    }
    groups.len()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn loc(function: &str, line: u32) -> Location {
        Location {
            function: function.into(),
            file: if line > 0 { "a.c".into() } else { "".into() },
            line,
            lib: "a.out".into(),
            system: false,
        }
    }

    fn fault(stack_id: u32, flags: u8) -> Fault {
        Fault {
            time_ns: 0,
            pid: 1,
            tid: 1,
            ip: 0,
            addr: 0,
            flags: FaultFlags(flags),
            stack_id,
        }
    }

    /// Faults inside a function without line info count for the caller's line; groups come
    /// out largest first and coverage counts how many reach the share.
    #[test]
    fn groups_by_line_and_coverage() {
        let mut stacks = ResolvedStacks::default();
        let memset = Location {
            lib: "libc.so.6".into(),
            file: "memset.S".into(),
            line: 5,
            system: true,
            ..loc("memset", 0)
        };
        stacks.insert(0, vec![memset, loc("main", 10)], vec![1, 2]);
        stacks.insert(1, vec![loc("fill", 20), loc("main", 11)], vec![3, 4]);
        stacks.insert(2, vec![loc("other", 30)], vec![5]);
        let mut faults = vec![fault(0, 1); 90];
        faults.extend(vec![fault(1, 0); 9]);
        faults.push(fault(2, 2));
        let groups = group_faults([(&faults[..], &stacks)], GroupBy::Line);
        assert_eq!(groups.len(), 3);
        assert_eq!((groups[0].count, groups[0].key.location.line), (90, 10));
        assert_eq!(&*groups[0].key.location.function, "main");
        assert_eq!(groups[0].kind_name(), "write");
        assert_eq!(groups[0].type_name(), "regular");
        assert_eq!(groups[1].kind_name(), "read");
        assert_eq!(coverage(&groups, 0.95), 2);
        assert_eq!(coverage(&groups, 0.5), 1);
        assert_eq!(coverage(&groups, 1.0), 3);
    }
}
