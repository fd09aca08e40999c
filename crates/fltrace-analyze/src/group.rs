//! Grouping faults by where they happen.

use std::sync::Arc;

use rustc_hash::FxHashMap;

use fltrace_trace::{CodeAddr, Fault, FaultFlags, FaultKind, Mapping, ProcessTrace};

#[cfg(any(test, feature = "oracle"))]
use crate::alloc_lifetimes::Lifetimes;
use crate::alloc_lifetimes::{AllocSiteTotals, AllocStats, BlockKind};
use crate::counts::FaultCounts;
#[cfg(any(test, feature = "oracle"))]
use crate::range_map::MappingIndex;
use crate::range_map::mapping_label;
use crate::{CallSite, Location, ResolvedStacks};

/// What faults are grouped by.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GroupBy {
    /// The whole call stack and the fault kind (the original tool's report rows).
    Stack,
    /// The function of the call site.
    Function,
    /// The `file:line` of the call site.
    Line,
    /// The library or executable of the call site (by the same rule as the others, so that
    /// `--call-site leaf` gives the innermost frame's).
    Dso,
}

/// What a group's faults share.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct GroupKey {
    /// The call site ([`call_site`], or the innermost frame with `--call-site leaf`). For
    /// [`GroupBy::Function`] the line is 0, for [`GroupBy::Dso`] only the library is set.
    pub location: Location,
    /// The whole stack, innermost first, for [`GroupBy::Stack`].
    pub stack: Option<Arc<[Location]>>,
    /// The raw frame addresses, for [`GroupBy::Stack`].
    pub addresses: Option<Arc<[CodeAddr]>>,
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
    /// How many were accesses the mappings did not allow ([`FaultFlags::INVALID`]).
    pub invalid: u64,
    /// How many have a truncated stack.
    pub truncated: u64,
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
    /// `zero` (all first touches), `fetch` (all brought back from far memory), `invalid`
    /// (all accesses the mappings did not allow), `regular` (none of those), or `mixed`: the
    /// original's `type` column, extended with fetches and invalid accesses.
    pub fn type_name(&self) -> &'static str {
        match (self.zero, self.fetch, self.invalid) {
            (z, 0, 0) if z == self.count => "zero",
            (0, f, 0) if f == self.count => "fetch",
            (0, 0, i) if i == self.count => "invalid",
            (0, 0, 0) => "regular",
            _ => "mixed",
        }
    }
}

/// The call site of a stack (innermost first): its innermost frame in the program's own code
/// (the executable and its libraries other than the system's), with or without a source line,
/// so that a fault inside libc's `memset`, or in a standard-library function inlined into the
/// program, counts for the program's function that called it. Only when the stack has none:
/// the innermost frame with a line, failing that the innermost frame.
pub fn call_site(stack: &[Location]) -> Option<&Location> {
    stack
        .iter()
        .find(|l| !l.system && &*l.lib != "[unknown]")
        .or_else(|| stack.iter().find(|l| l.has_line()))
        .or_else(|| stack.first())
}

/// A location for frames nothing is known of.
fn unknown() -> Location {
    Location {
        function: "[unknown]".into(),
        file: "".into(),
        line: 0,
        lib: "[unknown]".into(),
        system: false,
    }
}

/// The locations of stack `id` to group `by`: whole stacks keep each stripped frame's own
/// address, the other groupings name it after its function.
fn stack_of(stacks: &ResolvedStacks, id: u32, by: GroupBy) -> &[Location] {
    if by == GroupBy::Stack {
        stacks.exact(id)
    } else {
        stacks.get(id)
    }
}

/// The key of a stack when grouping `by`; `addresses` and `flags` are kept for
/// [`GroupBy::Stack`] only.
fn key_of(
    stack: &[Location],
    addresses: impl FnOnce() -> Option<Arc<[CodeAddr]>>,
    flags: Option<FaultFlags>,
    by: GroupBy,
    rule: CallSite,
) -> GroupKey {
    let site = rule.of(stack).cloned().unwrap_or_else(unknown);
    let location = match by {
        GroupBy::Stack | GroupBy::Line => site,
        GroupBy::Function => Location { line: 0, ..site },
        // The call site's library: a fault in libc's memset called by the program counts for
        // the program here as it does in every other grouping.
        GroupBy::Dso => Location {
            function: "".into(),
            file: "".into(),
            line: 0,
            lib: site.lib,
            system: false,
        },
    };
    let whole = by == GroupBy::Stack;
    GroupKey {
        location,
        stack: whole.then(|| stack.into()),
        addresses: if whole { addresses() } else { None },
        flags: if whole { flags } else { None },
    }
}

impl Group {
    fn new(key: GroupKey) -> Group {
        Group {
            key,
            count: 0,
            kinds: [0; 3],
            zero: 0,
            fetch: 0,
            invalid: 0,
            truncated: 0,
        }
    }

    fn add_n(&mut self, flags: FaultFlags, n: u64, truncated: bool) {
        self.count += n;
        if flags.has(FaultFlags::INVALID) {
            self.invalid += n;
        }
        if truncated {
            self.truncated += n;
        }
        self.kinds[flags.kind() as usize] += n;
        if flags.has(FaultFlags::ZERO) {
            self.zero += n;
        }
        if flags.has(FaultFlags::FETCH) {
            self.fetch += n;
        }
    }

    /// Adds the counts of `other`, whatever its key: two groups shown as one row.
    pub fn absorb(&mut self, other: &Group) {
        self.count += other.count;
        for (sum, n) in self.kinds.iter_mut().zip(other.kinds) {
            *sum += n;
        }
        self.zero += other.zero;
        self.fetch += other.fetch;
        self.invalid += other.invalid;
        self.truncated += other.truncated;
    }
}

/// Largest first, ties by location and flags, then by stack, so that the order does not
/// depend on the order faults were counted in.
fn sort_groups(groups: &mut [Group]) {
    groups.sort_by(|a, b| {
        b.count
            .cmp(&a.count)
            .then_with(|| a.key.location.cmp(&b.key.location))
            .then_with(|| a.key.flags.cmp(&b.key.flags))
            .then_with(|| a.key.addresses.cmp(&b.key.addresses))
            .then_with(|| a.key.stack.cmp(&b.key.stack))
    });
}

/// Groups the faults of one or more processes, largest group first (ties by location).
/// `sources` pairs each process's faults with its resolved stacks.
pub fn group_faults<'a>(
    sources: impl IntoIterator<Item = (&'a [Fault], &'a ResolvedStacks)>,
    by: GroupBy,
) -> Vec<Group> {
    let counted: Vec<(FaultCounts, &ResolvedStacks)> = sources
        .into_iter()
        .map(|(faults, stacks)| (FaultCounts::of(faults), stacks))
        .collect();
    group_fault_counts(counted.iter().map(|(c, s)| (c, *s)), by)
}

/// Groups faults counted per (stack, flags) ([`FaultCounts`], as streamed from a faults
/// file) exactly as [`group_faults`] groups the faults themselves.
pub fn group_fault_counts<'a>(
    sources: impl IntoIterator<Item = (&'a FaultCounts, &'a ResolvedStacks)>,
    by: GroupBy,
) -> Vec<Group> {
    let mut groups: FxHashMap<GroupKey, Group> = FxHashMap::default();
    for (counts, stacks) in sources {
        for (stack_id, flags, tally) in counts.iter() {
            let key = key_of(
                stack_of(stacks, stack_id, by),
                || stacks.addresses(stack_id),
                Some(flags),
                by,
                stacks.call_site,
            );
            groups
                .entry(key)
                .or_insert_with_key(|key| Group::new(key.clone()))
                .add_n(flags, tally.count, stacks.truncated(stack_id));
        }
    }
    let mut groups: Vec<Group> = groups.into_values().collect();
    sort_groups(&mut groups);
    groups
}

/// The allocations of the stacks sharing a key.
#[derive(Debug, Clone)]
pub struct AllocGroup {
    /// What they share. The location is the allocation site: the innermost frame of the
    /// program's own code with a line, as for faults, so that a `malloc` reached through
    /// `strdup`, `operator new` or a Rust `Vec` counts for the line that called those.
    pub key: GroupKey,
    /// The memory they allocate.
    pub kind: BlockKind,
    /// Their totals.
    pub totals: AllocSiteTotals,
}

/// Groups the allocation totals of one or more processes by their allocation stacks, most
/// bytes first (ties by location). `sources` pairs each process's totals with its resolved
/// allocation stacks ([`crate::Symbolizer::resolve_alloc_stacks`]).
pub fn group_allocs<'a>(
    sources: impl IntoIterator<Item = (&'a AllocStats, &'a ResolvedStacks)>,
    by: GroupBy,
) -> Vec<AllocGroup> {
    let mut groups: FxHashMap<(GroupKey, BlockKind), AllocSiteTotals> = FxHashMap::default();
    for (stats, stacks) in sources {
        for (&stack_id, &(kind, totals)) in &stats.stacks {
            let key = key_of(
                stack_of(stacks, stack_id, by),
                || stacks.addresses(stack_id),
                None,
                by,
                stacks.call_site,
            );
            *groups.entry((key, kind)).or_default() += totals;
        }
    }
    let mut groups: Vec<AllocGroup> = groups
        .into_iter()
        .map(|((key, kind), totals)| AllocGroup { key, kind, totals })
        .collect();
    groups.sort_by(|a, b| {
        b.totals
            .bytes
            .cmp(&a.totals.bytes)
            .then_with(|| a.key.location.cmp(&b.key.location))
            .then_with(|| a.kind.cmp(&b.kind))
            .then_with(|| a.key.addresses.cmp(&b.key.addresses))
    });
    groups
}

/// The allocation site of stack `stack_id` of `stacks`, as `report --allocs` groups by line.
pub fn alloc_site(stacks: &ResolvedStacks, stack_id: u32) -> Location {
    key_of(
        stack_of(stacks, stack_id, GroupBy::Line),
        || None,
        None,
        GroupBy::Line,
        stacks.call_site,
    )
    .location
}

/// One process's part in [`group_faults_by_alloc_site`].
#[cfg(any(test, feature = "oracle"))]
#[derive(Debug, Clone, Copy)]
pub struct AllocSource<'a> {
    /// The process: its faults, their stacks' generations, its mappings.
    pub trace: &'a ProcessTrace,
    /// Its fault stacks, resolved.
    pub stacks: &'a ResolvedStacks,
    /// Its allocation stacks, resolved.
    pub alloc_stacks: &'a ResolvedStacks,
    /// Its blocks.
    pub lifetimes: &'a Lifetimes,
    /// For each of `trace.faults`, the block it landed in ([`crate::attribute_faults`]).
    pub hits: &'a [Option<u32>],
}

/// The faults that landed in the blocks of one allocation site, or outside every block in one
/// kind of memory.
#[derive(Debug, Clone)]
pub struct AllocSiteGroup {
    /// Their totals. The location is the allocation site (as in [`AllocGroup::key`]) or, for
    /// faults outside every live block, names the memory in its function:
    /// [`mapping_label`] (`[anon]`, `[stack]`, `[mapping] /path`).
    pub faults: Group,
    /// The kind of the blocks, `None` outside them.
    pub kind: Option<BlockKind>,
    /// The same faults by the code line that took them, largest first.
    pub lines: Vec<Group>,
}

/// The faults that `keep` keeps, counted by stack and kind. In no particular order.
pub fn count_faults_by_stack(
    faults: &[Fault],
    keep: impl Fn(FaultFlags) -> bool,
) -> Vec<(u32, FaultKind, u64)> {
    let mut counts: FxHashMap<(u32, FaultKind), u64> = FxHashMap::default();
    for fault in faults.iter().filter(|f| keep(f.flags)) {
        *counts
            .entry((fault.stack_id, fault.flags.kind()))
            .or_default() += 1;
    }
    counts
        .into_iter()
        .map(|((stack_id, kind), count)| (stack_id, kind, count))
        .collect()
}

/// Where a fault landed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum FaultOrigin {
    /// In a live block, allocated by the stack `stack_id`.
    Block {
        /// The allocation stack.
        stack_id: u32,
        /// The kind of memory.
        kind: BlockKind,
    },
    /// Outside every live block, in the mapping of `trace.mappings` at this index (`None`:
    /// in none recorded).
    Outside {
        /// The index in `trace.mappings`.
        mapping: Option<usize>,
    },
}

/// Each fault of `trace` with where it landed; `hits` says, for each fault, the block of
/// `lifetimes` it landed in ([`crate::attribute_faults`]).
#[cfg(any(test, feature = "oracle"))]
pub fn fault_origins<'t>(
    trace: &'t ProcessTrace,
    lifetimes: &'t Lifetimes,
    hits: &'t [Option<u32>],
) -> impl Iterator<Item = (&'t Fault, FaultOrigin)> + 't {
    let mappings = MappingIndex::new(&trace.mappings);
    trace.faults.iter().zip(hits).map(move |(fault, hit)| {
        let origin = match hit.and_then(|b| lifetimes.blocks.get(b as usize)) {
            Some(block) => FaultOrigin::Block {
                stack_id: block.stack_id,
                kind: block.kind,
            },
            None => {
                let generation = trace.stack(fault.stack_id).map_or(0, |s| s.generation);
                FaultOrigin::Outside {
                    mapping: mappings.get(generation, fault.addr),
                }
            }
        };
        (fault, origin)
    })
}

/// The faults of `trace` that `keep` keeps, counted by where they landed and their kind: in
/// the blocks of which allocation stack, or outside every block in which mapping. In no
/// particular order.
#[cfg(any(test, feature = "oracle"))]
pub fn count_faults_by_origin(
    trace: &ProcessTrace,
    lifetimes: &Lifetimes,
    keep: impl Fn(FaultFlags) -> bool,
) -> Vec<(FaultOrigin, FaultKind, u64)> {
    let hits = crate::attribute_faults(lifetimes, &trace.faults);
    let mut counts: FxHashMap<(FaultOrigin, FaultKind), u64> = FxHashMap::default();
    for (fault, origin) in fault_origins(trace, lifetimes, &hits) {
        if keep(fault.flags) {
            *counts.entry((origin, fault.flags.kind())).or_default() += 1;
        }
    }
    counts
        .into_iter()
        .map(|((origin, kind), count)| (origin, kind, count))
        .collect()
}

/// Faults counted by where they landed, their stack and their flags.
pub type OriginCounts = Vec<(FaultOrigin, u32, FaultFlags, u64)>;

/// The faults of `source` counted by where they landed ([`fault_origins`]), their stack and
/// their flags, in no particular order.
#[cfg(any(test, feature = "oracle"))]
pub fn count_origins(source: &AllocSource<'_>) -> OriginCounts {
    let mut counts: FxHashMap<(FaultOrigin, u32, FaultFlags), u64> = FxHashMap::default();
    for (fault, origin) in fault_origins(source.trace, source.lifetimes, source.hits) {
        *counts
            .entry((origin, fault.stack_id, fault.flags))
            .or_default() += 1;
    }
    counts
        .into_iter()
        .map(|((origin, stack_id, flags), count)| (origin, stack_id, flags, count))
        .collect()
}

/// Groups faults by the allocation site of the block each landed in, and within that by the
/// line that took them; faults outside every live block are grouped by the mapping they hit.
/// Largest first.
#[cfg(any(test, feature = "oracle"))]
pub fn group_faults_by_alloc_site<'a>(
    sources: impl IntoIterator<Item = AllocSource<'a>>,
) -> Vec<AllocSiteGroup> {
    let counted: Vec<(AllocSource<'a>, OriginCounts)> = sources
        .into_iter()
        .map(|source| {
            let counts = count_origins(&source);
            (source, counts)
        })
        .collect();
    group_origins_by_alloc_site(counted.iter().map(|(source, origins)| OriginSource {
        trace: source.trace,
        stacks: source.stacks,
        alloc_stacks: source.alloc_stacks,
        origins,
    }))
}

/// One process's part in [`group_origins_by_alloc_site`].
#[derive(Debug, Clone, Copy)]
pub struct OriginSource<'a> {
    /// The process: its stacks' generations, its mappings.
    pub trace: &'a ProcessTrace,
    /// Its fault stacks, resolved.
    pub stacks: &'a ResolvedStacks,
    /// Its allocation stacks, resolved.
    pub alloc_stacks: &'a ResolvedStacks,
    /// Its faults counted by where they landed, stack and flags.
    pub origins: &'a [(FaultOrigin, u32, FaultFlags, u64)],
}

/// [`group_faults_by_alloc_site`] of faults already counted by where they landed.
pub fn group_origins_by_alloc_site<'a>(
    sources: impl IntoIterator<Item = OriginSource<'a>>,
) -> Vec<AllocSiteGroup> {
    // Sites and lines get small ids, so that each count costs integer look-ups only.
    let mut sites: FxHashMap<(Location, Option<BlockKind>), u32> = FxHashMap::default();
    let mut lines: FxHashMap<GroupKey, u32> = FxHashMap::default();
    let mut counts: FxHashMap<(u32, u32), Group> = FxHashMap::default();
    for source in sources {
        let trace = source.trace;
        let mut site_of: FxHashMap<FaultOrigin, u32> = FxHashMap::default();
        let mut line_of: FxHashMap<(u32, FaultFlags), (u32, GroupKey)> = FxHashMap::default();
        for &(origin, stack_id, flags, count) in source.origins {
            let site = *site_of.entry(origin).or_insert_with(|| match origin {
                FaultOrigin::Block { stack_id, kind } => {
                    let stack = source.alloc_stacks.get(stack_id);
                    let site = source
                        .alloc_stacks
                        .call_site
                        .of(stack)
                        .cloned()
                        .unwrap_or_else(unknown);
                    id_of(&mut sites, (site, Some(kind)))
                }
                FaultOrigin::Outside { mapping } => {
                    let mapping = mapping.and_then(|i| trace.mappings.get(i));
                    id_of(&mut sites, (memory_location(mapping), None))
                }
            });
            let (line, key) = line_of.entry((stack_id, flags)).or_insert_with(|| {
                let key = key_of(
                    source.stacks.get(stack_id),
                    || None,
                    None,
                    GroupBy::Line,
                    source.stacks.call_site,
                );
                (id_of(&mut lines, key.clone()), key)
            });
            counts
                .entry((site, *line))
                .or_insert_with(|| Group::new(key.clone()))
                .add_n(flags, count, source.stacks.truncated(stack_id));
        }
    }
    let mut groups: Vec<AllocSiteGroup> = Vec::with_capacity(sites.len());
    let mut slot = vec![usize::MAX; sites.len()];
    for ((location, kind), id) in sites {
        slot[id as usize] = groups.len();
        groups.push(AllocSiteGroup {
            faults: Group::new(GroupKey {
                location,
                stack: None,
                addresses: None,
                flags: None,
            }),
            kind,
            lines: Vec::new(),
        });
    }
    for ((site, _), line) in counts {
        let group = &mut groups[slot[site as usize]];
        group.faults.absorb(&line);
        group.lines.push(line);
    }
    groups.retain(|g| g.faults.count > 0);
    for group in &mut groups {
        sort_groups(&mut group.lines);
    }
    groups.sort_by(|a, b| {
        b.faults
            .count
            .cmp(&a.faults.count)
            .then_with(|| a.faults.key.location.cmp(&b.faults.key.location))
            .then_with(|| a.kind.cmp(&b.kind))
    });
    groups
}

/// The id of `key` in `ids`, numbering new keys in order.
fn id_of<K: std::hash::Hash + Eq>(ids: &mut FxHashMap<K, u32>, key: K) -> u32 {
    let next = ids.len() as u32;
    *ids.entry(key).or_insert(next)
}

/// The location standing for memory outside every block: [`mapping_label`] as its function.
fn memory_location(mapping: Option<&Mapping>) -> Location {
    let label: Arc<str> = mapping_label(mapping).into();
    let lib = match mapping {
        Some(m) if m.is_file() => m.path.rsplit('/').next().unwrap_or(&m.path).into(),
        _ => label.clone(),
    };
    Location {
        function: label,
        file: "".into(),
        line: 0,
        lib,
        system: false,
    }
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
    use fltrace_trace::VirtAddr;

    use fltrace_trace::{AllocCall, AllocEvent};

    use crate::attribute_faults;

    fn loc(function: &str, line: u32) -> Location {
        Location {
            function: function.into(),
            file: if line > 0 { "a.c".into() } else { "".into() },
            line,
            lib: "a.out".into(),
            system: false,
        }
    }

    fn fault(stack_id: u32, flags: u16) -> Fault {
        Fault {
            time_ns: 0,
            pid: 1,
            tid: 1,
            ip: CodeAddr::new(0),
            addr: VirtAddr::new(0),
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
        stacks.insert(
            0,
            vec![memset, loc("main", 10)],
            [1, 2].map(CodeAddr::new).to_vec(),
        );
        stacks.insert(
            1,
            vec![loc("fill", 20), loc("main", 11)],
            [3, 4].map(CodeAddr::new).to_vec(),
        );
        stacks.insert(2, vec![loc("other", 30)], [5].map(CodeAddr::new).to_vec());
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

    fn alloc_event(
        time_ns: u64,
        call: AllocCall,
        addr: u64,
        size: u64,
        stack_id: u32,
    ) -> AllocEvent {
        AllocEvent {
            time_ns,
            tid: 1,
            call,
            addr: VirtAddr::new(addr),
            size,
            old_addr: VirtAddr::new(0),
            detail: 0x22,
            stack_id,
        }
    }

    /// Stacks of one program: 0 calls malloc from `main` line 10 through libc's `strdup`,
    /// 1 from `main` line 10 directly, 2 from `build` line 20, 3 mmaps from `map` line 30.
    fn alloc_stacks() -> ResolvedStacks {
        let strdup = Location {
            lib: "libc.so.6".into(),
            file: "strdup.c".into(),
            line: 40,
            system: true,
            ..loc("strdup", 0)
        };
        let mut stacks = ResolvedStacks::default();
        stacks.insert(
            0,
            vec![strdup, loc("main", 10)],
            [0x10, 0x20].map(CodeAddr::new).to_vec(),
        );
        stacks.insert(1, vec![loc("main", 10)], [0x21].map(CodeAddr::new).to_vec());
        stacks.insert(
            2,
            vec![loc("build", 20), loc("main", 11)],
            [0x30, 0x22].map(CodeAddr::new).to_vec(),
        );
        stacks.insert(3, vec![loc("map", 30)], [0x40].map(CodeAddr::new).to_vec());
        stacks
    }

    /// Allocation totals group by the program's own line: the `strdup` stack and the direct
    /// call on the same line are one site; the stack key keeps them apart.
    #[test]
    fn allocs_by_site() {
        let events = [
            alloc_event(1, AllocCall::Malloc, 0x1000, 100, 0),
            alloc_event(2, AllocCall::Malloc, 0x2000, 50, 1),
            alloc_event(3, AllocCall::Malloc, 0x3000, 400, 2),
            alloc_event(4, AllocCall::Free, 0x3000, 0, AllocEvent::NO_STACK),
            alloc_event(5, AllocCall::Mmap, 0x10000, 4096, 3),
        ];
        let lifetimes = Lifetimes::new(&events, &[]);
        let stats = AllocStats::new(&events, &lifetimes, 10, 0);
        let stacks = alloc_stacks();
        let groups = group_allocs([(&stats, &stacks)], GroupBy::Line);
        let rows: Vec<(&str, u32, BlockKind, u64, u64, u64)> = groups
            .iter()
            .map(|g| {
                let l = &g.key.location;
                let t = &g.totals;
                (
                    &*l.function,
                    l.line,
                    g.kind,
                    t.allocs,
                    t.bytes,
                    t.leaked_bytes,
                )
            })
            .collect();
        assert_eq!(
            rows,
            vec![
                ("map", 30, BlockKind::Mapping, 1, 4096, 4096),
                ("build", 20, BlockKind::Heap, 1, 400, 0),
                ("main", 10, BlockKind::Heap, 2, 150, 150),
            ]
        );
        let by_stack = group_allocs([(&stats, &stacks)], GroupBy::Stack);
        assert_eq!(by_stack.len(), 4);
        assert_eq!(
            by_stack[3].key.addresses.as_deref(),
            Some(&[CodeAddr::new(0x21)][..])
        );
        assert_eq!(by_stack[3].key.stack.as_ref().map(|s| s.len()), Some(1));
    }

    /// Faults group by the allocation site of the block they hit, each with its faulting
    /// lines; the others by the memory they hit.
    #[test]
    fn faults_by_alloc_site() {
        let events = [
            alloc_event(1, AllocCall::Malloc, 0x1000, 100, 0),
            alloc_event(2, AllocCall::Malloc, 0x2000, 50, 1),
            alloc_event(3, AllocCall::Malloc, 0x3000, 400, 2),
        ];
        let mapping = |start, end, path: &str| Mapping {
            start: VirtAddr::new(start),
            end: VirtAddr::new(end),
            path: path.into(),
            ..Mapping::default()
        };
        let at = |time_ns, addr, stack_id, flags| Fault {
            time_ns,
            addr,
            ..fault(stack_id, flags)
        };
        let faults = vec![
            at(5, VirtAddr::new(0x1000), 0, 1),
            at(5, VirtAddr::new(0x2010), 1, 0),
            at(5, VirtAddr::new(0x2020), 1, 0),
            at(5, VirtAddr::new(0x3000), 1, 1),
            at(5, VirtAddr::new(0x5000), 2, 0),
            at(5, VirtAddr::new(0x7fff_0000), 2, 0),
            at(0, VirtAddr::new(0x1000), 2, 0), // before its allocation
        ];
        let trace = ProcessTrace {
            pid: 1,
            faults,
            stacks: Vec::new(),
            mappings: vec![
                mapping(0, 0x10000, "[heap]"),
                mapping(0x7fff_0000, 0x8000_0000, "[stack]"),
            ],
            metadata: Vec::new(),
            allocs: events.to_vec(),
            alloc_stacks: Vec::new(),
        };
        let mut stacks = ResolvedStacks::default();
        stacks.insert(0, vec![loc("fill", 50)], [1].map(CodeAddr::new).to_vec());
        stacks.insert(1, vec![loc("scan", 60)], [2].map(CodeAddr::new).to_vec());
        stacks.insert(2, vec![loc("other", 70)], [3].map(CodeAddr::new).to_vec());
        let lifetimes = Lifetimes::of_trace(&trace);
        let hits = attribute_faults(&lifetimes, &trace.faults);
        let alloc_stacks = alloc_stacks();
        let groups = group_faults_by_alloc_site([AllocSource {
            trace: &trace,
            stacks: &stacks,
            alloc_stacks: &alloc_stacks,
            lifetimes: &lifetimes,
            hits: &hits,
        }]);
        type Row<'a> = (&'a str, Option<BlockKind>, u64, Vec<(&'a str, u64)>);
        let rows: Vec<Row> = groups
            .iter()
            .map(|g| {
                let lines = g
                    .lines
                    .iter()
                    .map(|l| (&*l.key.location.function, l.count))
                    .collect();
                (
                    &*g.faults.key.location.function,
                    g.kind,
                    g.faults.count,
                    lines,
                )
            })
            .collect();
        assert_eq!(
            rows,
            vec![
                (
                    "main",
                    Some(BlockKind::Heap),
                    3,
                    vec![("scan", 2), ("fill", 1)]
                ),
                ("[heap]", None, 2, vec![("other", 2)]),
                ("[stack]", None, 1, vec![("other", 1)]),
                ("build", Some(BlockKind::Heap), 1, vec![("scan", 1)]),
            ]
        );
        assert_eq!(groups[0].faults.kind_name(), "mixed");
        assert_eq!(groups[0].faults.kinds, [2, 1, 0]);
    }
}
