//! In-kernel counting of one kind of event, keyed as asked: `fltrace count`, `faults`, `ffaults`.

use std::collections::HashMap;
use std::num::NonZeroU32;
use std::os::fd::AsFd;
use std::os::unix::fs::MetadataExt;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use aya::Ebpf;
use aya::maps::{Array, HashMap as BpfHashMap, MapData, PerCpuArray, RingBuf, StackTraceMap};
use aya::programs::perf_event::{PerfEventConfig, PerfEventScope, SamplePolicy};
use aya::programs::uprobe::UProbeScope;
use aya::programs::{PerfEvent, TracePoint, UProbe};

use super::event::{Event, FieldFilter, software_event};
use super::object::{self, Config, Key};
use super::symbols::{Announcements, Frame, ProcessMaps, StackNames};
use crate::{Error, tracefs};

/// Which processes are counted.
#[derive(Debug, Clone, Default)]
pub struct ProcessFilter {
    /// Only these processes (thread-group ids); all when empty.
    pub tgids: Vec<u32>,
    /// Only tasks in this cgroup (v2) directory.
    pub cgroup: Option<PathBuf>,
    /// Only tasks of this name.
    pub comm: Option<String>,
}

/// What a count is grouped by.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum By {
    /// The task's name.
    Comm,
    /// The process id.
    Pid,
    /// The thread id.
    Tid,
    /// The user stack.
    UStack,
    /// The kernel stack.
    KStack,
    /// Which tracepoint (for several events).
    Probe,
    /// A raw field of the tracepoint (or a uprobe's register: arg0..arg5, retval).
    Field(String),
}

impl By {
    /// Parses one of `comm pid tid ustack kstack probe field:NAME`.
    pub fn parse(text: &str) -> Option<By> {
        Some(match text {
            "comm" => By::Comm,
            "pid" => By::Pid,
            "tid" => By::Tid,
            "ustack" => By::UStack,
            "kstack" => By::KStack,
            "probe" => By::Probe,
            _ => By::Field(text.strip_prefix("field:")?.to_owned()),
        })
    }
}

/// What to count.
#[derive(Debug, Clone)]
pub struct CounterSpec {
    /// The events (several only for tracepoint wildcards).
    pub events: Vec<Event>,
    /// The grouping; a single total when empty.
    pub by: Vec<By>,
    /// A second field kept in the key (`ffaults` keys by device and inode).
    pub second_field: Option<String>,
    /// Kept in the kernel: only events whose field compares so.
    pub filter: Option<FieldFilter>,
    /// Which processes.
    pub processes: ProcessFilter,
    /// Keep the mappings of each process when first seen (implied by [`By::UStack`]).
    pub keep_maps: bool,
}

/// The event of every page fault: the `page-faults` software event, as the chapter's
/// one-liners and bpftrace count them. Its registers are where the fault happened: the user's
/// for a fault in user mode, whose kernel stack is then not walked at all (it would only be
/// the exception entry), and the kernel's for one in kernel mode (`copy_to_user` and its
/// callers), whose kernel stack is the informative one. The `exceptions` tracepoints would
/// walk the entry path's kernel stack at every user fault and fill a raw record for each:
/// that doubled the overhead over bpftrace's on touch-512 (docs/BENCHMARKS.md).
pub fn fault_events() -> Vec<Event> {
    vec![Event::Software {
        name: "page-faults".into(),
    }]
}

/// The `exceptions` tracepoints of page faults where the kernel has them (their kernel stack
/// is the fault's path into the kernel, `exc_page_fault`), else the `page-faults` software
/// event: for counting the faults of named processes in user space, where the kernel's
/// stack costs one walk per sample anyway.
pub fn fault_tracepoints() -> Vec<Event> {
    if tracefs::exists("exceptions", "page_fault_user") {
        ["page_fault_user", "page_fault_kernel"]
            .iter()
            .filter(|n| tracefs::exists("exceptions", n))
            .map(|n| Event::Tracepoint {
                category: "exceptions".into(),
                name: (*n).into(),
            })
            .collect()
    } else {
        fault_events()
    }
}

/// The fault events to count for `scope`: named processes get the fault tracepoints (their
/// samples carry the user registers for DWARF unwinding), the whole system or all of a cgroup
/// the cheaper software event.
pub fn fault_events_for(scope: &crate::Scope) -> Vec<Event> {
    if scope.names_processes() {
        fault_tracepoints()
    } else {
        fault_events()
    }
}

/// Expands an event argument: tracepoint names may hold `*` (`vmscan:*`).
pub fn expand_events(text: &str) -> Result<Vec<Event>, Error> {
    let tp = text.strip_prefix("tracepoint:").unwrap_or(text);
    if !tp.contains('*') {
        return Ok(vec![Event::parse(text)?]);
    }
    let events: Vec<Event> = tracefs::list()?
        .into_iter()
        .filter(|name| glob_match(tp, name))
        .filter_map(|name| {
            let (category, name) = name.split_once(':')?;
            Some(Event::Tracepoint {
                category: category.to_owned(),
                name: name.to_owned(),
            })
        })
        .collect();
    if events.is_empty() {
        return Err(Error::UnknownEvent(text.to_owned()));
    }
    Ok(events)
}

fn glob_match(pattern: &str, text: &str) -> bool {
    match pattern.split_once('*') {
        None => pattern == text,
        Some((head, tail)) => {
            let Some(rest) = text.strip_prefix(head) else {
                return false;
            };
            (0..=rest.len()).any(|i| rest.is_char_boundary(i) && glob_match(tail, &rest[i..]))
        }
    }
}

/// One group of a count.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Row {
    /// Process id, when grouped by pid or tid.
    pub pid: Option<u32>,
    /// Thread id, when grouped by tid.
    pub tid: Option<u32>,
    /// Task name, when grouped by comm.
    pub comm: Option<String>,
    /// The tracepoint, when grouped by probe.
    pub probe: Option<String>,
    /// The field's value, when grouped by a field.
    pub field: Option<u64>,
    /// The second field's value.
    pub field2: Option<u64>,
    /// The user stack, innermost first (empty when there was none, as in kernel threads).
    pub ustack: Option<Vec<Frame>>,
    /// The kernel stack, innermost first.
    pub kstack: Option<Vec<Frame>>,
    /// Events counted.
    pub count: u64,
}

/// What a counter holds at one moment.
#[derive(Debug, Clone, Default)]
pub struct Snapshot {
    /// The groups, most counted first.
    pub rows: Vec<Row>,
    /// Events counted in all.
    pub events: u64,
    /// Events that found the table full.
    pub dropped: u64,
    /// Stacks the kernel could not take.
    pub stack_errors: u64,
    /// Events counted without their user stack because the stack table was full
    /// (`[no stack]` rows hold them).
    pub ustacks_lost: u64,
    /// Since the counter started.
    pub elapsed: Duration,
}

/// A running in-kernel counter; detached when dropped.
pub struct Counter {
    ebpf: Ebpf,
    spec: CounterSpec,
    started: Instant,
    maps: ProcessMaps,
    probe_names: HashMap<u64, String>,
    _announcements: Option<Announcements>,
    /// The tracepoints' attachments (closing one detaches the program from it).
    _links: Vec<CookieLink>,
}

/// The cgroup v2 id of a cgroup directory (its inode number).
fn cgroup_id(path: &std::path::Path) -> Result<u64, Error> {
    std::fs::metadata(path)
        .map(|m| m.ino())
        .map_err(Error::io(path))
}

pub(crate) fn process_config(filter: &ProcessFilter, config: &mut Config) -> Result<(), Error> {
    if !filter.tgids.is_empty() {
        config.filter_flags |= object::FILTER_TGIDS;
    }
    if let Some(cgroup) = &filter.cgroup {
        config.filter_flags |= object::FILTER_CGROUP;
        config.cgroup_id = cgroup_id(cgroup)?;
    }
    if let Some(comm) = &filter.comm {
        config.filter_flags |= object::FILTER_COMM;
        config.comm = object::comm_bytes(comm);
    }
    Ok(())
}

/// Keeps the processes `tgids` and, as they fork, their children (the one meaning of -p).
pub(crate) fn fill_tgids(ebpf: &mut Ebpf, tgids: &[u32]) -> Result<(), Error> {
    let map = ebpf
        .map_mut("tgids")
        .ok_or_else(|| Error::Unsupported("the BPF object has no tgids map".into()))?;
    let mut map: BpfHashMap<_, u32, u8> = BpfHashMap::try_from(map).map_err(Error::map("tgids"))?;
    for &tgid in tgids {
        map.insert(tgid, 1, 0).map_err(Error::map("tgids"))?;
    }
    if tgids.is_empty() {
        return Ok(());
    }
    let child = tracefs::fields("sched", "sched_process_fork")?
        .into_iter()
        .find(|f| f.name == "child_pid")
        .ok_or_else(|| Error::Unsupported("sched:sched_process_fork has no child_pid".into()))?;
    let map = ebpf
        .map_mut("fork_child")
        .ok_or_else(|| Error::Unsupported("the BPF object has no fork_child map".into()))?;
    let mut offset: Array<_, u32> = Array::try_from(map).map_err(Error::map("fork_child"))?;
    offset
        .set(0, child.offset as u32, 0)
        .map_err(Error::map("fork_child"))?;
    let program: &mut TracePoint = ebpf
        .program_mut("follow_fork")
        .ok_or_else(|| Error::Unsupported("no follow_fork program".into()))?
        .try_into()
        .map_err(Error::program("follow_fork"))?;
    program.load().map_err(Error::program("follow_fork"))?;
    program
        .attach("sched", "sched_process_fork")
        .map_err(Error::program("follow_fork"))?;
    Ok(())
}

pub(crate) fn set_config(ebpf: &mut Ebpf, slot: u32, config: Config) -> Result<(), Error> {
    let map = ebpf
        .map_mut("config")
        .ok_or_else(|| Error::Unsupported("the BPF object has no config map".into()))?;
    let mut array: Array<_, Config> = Array::try_from(map).map_err(Error::map("config"))?;
    array.set(slot, config, 0).map_err(Error::map("config"))
}

pub(crate) fn start_announcements(
    ebpf: &mut Ebpf,
    maps: &ProcessMaps,
    data: bool,
) -> Result<Announcements, Error> {
    let map = ebpf
        .take_map("announcements")
        .ok_or_else(|| Error::Unsupported("the BPF object has no announcements map".into()))?;
    let ring: RingBuf<MapData> = RingBuf::try_from(map).map_err(Error::map("announcements"))?;
    let program: &mut TracePoint = ebpf
        .program_mut("exec_forget")
        .ok_or_else(|| Error::Unsupported("no exec_forget program".into()))?
        .try_into()
        .map_err(Error::program("exec_forget"))?;
    program.load().map_err(Error::program("exec_forget"))?;
    program
        .attach("sched", "sched_process_exec")
        .map_err(Error::program("exec_forget"))?;
    Ok(Announcements::start(ring, maps.clone(), data))
}

pub(crate) fn totals(ebpf: &Ebpf, which: u32) -> u64 {
    ebpf.map("totals")
        .and_then(|m| PerCpuArray::<_, u64>::try_from(m).ok())
        .and_then(|a| a.get(&which, 0).ok())
        .map_or(0, |values| values.iter().sum())
}

/// The user stacks numbered `ids` in `ustack_frames`, by number: looked up one by one, so
/// that only the stacks to be named are copied out of the kernel (a busy machine fills the
/// table with tens of thousands, 1 KiB each).
fn user_stacks(
    ebpf: &Ebpf,
    ids: impl IntoIterator<Item = u32>,
) -> Result<HashMap<u32, Vec<u64>>, Error> {
    let map = ebpf
        .map("ustack_frames")
        .ok_or_else(|| Error::Unsupported("the BPF object has no ustack_frames map".into()))?;
    let numbered: BpfHashMap<_, u32, object::UStack> =
        BpfHashMap::try_from(map).map_err(Error::map("ustack_frames"))?;
    let mut stacks = HashMap::new();
    for id in ids {
        if stacks.contains_key(&id) {
            continue;
        }
        // Absent: a number another CPU gave first, removed when its stack was found equal.
        if let Ok(stack) = numbered.get(&id, 0) {
            let len = (stack.len as usize).min(stack.ip.len());
            stacks.insert(id, stack.ip[..len].to_vec());
        }
    }
    Ok(stacks)
}

pub(crate) fn stack_frames(ebpf: &Ebpf, id: i32) -> Option<Vec<u64>> {
    let id = u32::try_from(id).ok()?;
    let map = StackTraceMap::try_from(ebpf.map("stacks")?).ok()?;
    let trace = map.get(&id, 0).ok()?;
    Some(trace.frames().iter().map(|f| f.ip).collect())
}

impl Counter {
    /// Loads the counting program, configures it and attaches it to every event.
    pub fn start(spec: CounterSpec) -> Result<Counter, Error> {
        let first = spec
            .events
            .first()
            .ok_or_else(|| Error::Unsupported("no event to count".into()))?
            .clone();
        let mut config = Config::default();
        let mut probe_names = HashMap::new();
        for by in &spec.by {
            config.key_flags |= match by {
                By::Comm => object::KEY_COMM,
                By::Pid => object::KEY_TGID,
                By::Tid => object::KEY_TGID | object::KEY_PID,
                // Symbolizing needs the process.
                By::UStack => object::KEY_USTACK | object::KEY_TGID,
                By::KStack => object::KEY_KSTACK,
                // Each tracepoint is attached with its index as cookie.
                By::Probe => object::KEY_PROBE,
                By::Field(_) => object::KEY_FIELD,
            };
            if *by == By::Probe {
                for (index, event) in spec.events.iter().enumerate() {
                    probe_names.insert(index as u64, event.to_string());
                }
                continue;
            }
            let By::Field(field_name) = by else {
                continue;
            };
            let field = same_field(&spec.events, field_name)?;
            config.field_off = field.offset as u32;
            config.field_size = field.size as u32;
            config.field_signed = field.signed.into();
        }
        if let Some(name) = &spec.second_field {
            let field = same_field(&spec.events, name)?;
            config.key_flags |= object::KEY_FIELD2;
            config.field2_off = field.offset as u32;
            config.field2_size = field.size as u32;
        }
        if let Some(filter) = &spec.filter {
            let field = same_field(&spec.events, &filter.field)?;
            config.filter_flags |= object::FILTER_FIELD;
            config.filter_off = field.offset as u32;
            config.filter_size = field.size as u32;
            config.filter_signed = field.signed.into();
            config.filter_op = filter.op as u32;
            config.filter_value = filter.value;
        }
        process_config(&spec.processes, &mut config)?;
        let keep_maps = spec.keep_maps || spec.by.contains(&By::UStack);
        if keep_maps {
            config.filter_flags |= object::ANNOUNCE_TGIDS;
        }

        let mut ebpf = object::load()?;
        set_config(&mut ebpf, 0, config)?;
        fill_tgids(&mut ebpf, &spec.processes.tgids)?;
        let maps = ProcessMaps::default();
        let announcements = if keep_maps {
            // Faults on files are named from the kernel's records of data mappings too.
            let files = spec.events.iter().any(|e| {
                matches!(e, Event::Tracepoint { category, name }
                    if (category.as_str(), name.as_str()) == crate::ffaults::FILEMAP_FAULT)
            });
            Some(start_announcements(&mut ebpf, &maps, files)?)
        } else {
            None
        };
        let links = attach(&mut ebpf, &spec.events, &spec.processes.tgids, &first)?;
        Ok(Counter {
            _links: links,
            ebpf,
            spec,
            started: Instant::now(),
            maps,
            probe_names,
            _announcements: announcements,
        })
    }

    /// The mappings kept of the processes seen.
    pub fn process_maps(&self) -> &ProcessMaps {
        &self.maps
    }

    /// Events counted so far (cheap: no table walk).
    pub fn events(&self) -> u64 {
        object_total(&self.ebpf, object::TOTAL_EVENTS)
    }

    /// The table's entries as the kernel holds them.
    fn entries(&self) -> Result<Vec<(Key, u64)>, Error> {
        let mut entries: Vec<(Key, u64)> = Vec::new();
        self.for_each_entry(|key, count| entries.push((key, count)))?;
        Ok(entries)
    }

    /// Hands each of the table's entries to `each`, one at a time: the table of a busy
    /// machine (131,072 entries) is never copied whole.
    pub(crate) fn for_each_entry(&self, mut each: impl FnMut(Key, u64)) -> Result<(), Error> {
        let map = self
            .ebpf
            .map("counts")
            .ok_or_else(|| Error::Unsupported("the BPF object has no counts map".into()))?;
        let counts: BpfHashMap<_, Key, u64> =
            BpfHashMap::try_from(map).map_err(Error::map("counts"))?;
        for entry in counts.iter() {
            let (key, count) = entry.map_err(Error::map("counts"))?;
            each(key, count);
        }
        Ok(())
    }

    /// The `depth` innermost frames of user stack `id` of the table (empty for an event
    /// counted without its stack, or a number another CPU gave first and took back).
    pub(crate) fn innermost_frames(&self, id: i32, depth: usize) -> Result<Vec<u64>, Error> {
        let Ok(id) = u32::try_from(id) else {
            return Ok(Vec::new());
        };
        let map = self
            .ebpf
            .map("ustack_frames")
            .ok_or_else(|| Error::Unsupported("the BPF object has no ustack_frames map".into()))?;
        let numbered: BpfHashMap<_, u32, object::UStack> =
            BpfHashMap::try_from(map).map_err(Error::map("ustack_frames"))?;
        Ok(match numbered.get(&id, 0) {
            Ok(stack) => {
                let len = (stack.len as usize).min(stack.ip.len()).min(depth);
                stack.ip[..len].to_vec()
            }
            Err(_) => Vec::new(),
        })
    }

    /// The table's totals (events, drops, stacks lost), without its rows.
    pub fn totals(&self) -> Snapshot {
        Snapshot {
            rows: Vec::new(),
            events: object_total(&self.ebpf, object::TOTAL_EVENTS),
            dropped: object_total(&self.ebpf, object::TOTAL_DROPPED),
            stack_errors: object_total(&self.ebpf, object::TOTAL_STACK_ERRORS),
            ustacks_lost: object_total(&self.ebpf, object::TOTAL_USTACKS_LOST),
            elapsed: self.started.elapsed(),
        }
    }

    /// Events counted so far by process (thread-group id), nothing named: to choose whose
    /// stacks are worth naming. Needs the count grouped by [`By::Pid`], [`By::Tid`] or
    /// [`By::UStack`] (all count under process 0 otherwise).
    pub fn counts_by_process(&self) -> Result<HashMap<u32, u64>, Error> {
        let mut by_process: HashMap<u32, u64> = HashMap::new();
        self.for_each_entry(|key, count| *by_process.entry(key.tgid).or_default() += count)?;
        Ok(by_process)
    }

    /// Reads the table and names its stacks.
    pub fn snapshot(&self, names: &mut StackNames) -> Result<Snapshot, Error> {
        self.snapshot_naming(names, &|_| true, usize::MAX)
    }

    /// Reads the table and names the `depth` innermost frames of the user stacks of the
    /// processes `named` accepts; the rows of the others keep their counts under an empty
    /// stack, and rows that then show the same are merged. Naming every frame of every stack
    /// of a busy machine read every library of every process: `triage` held 300 MB for the
    /// four frames of the five processes it shows.
    pub fn snapshot_naming(
        &self,
        names: &mut StackNames,
        named: &dyn Fn(u32) -> bool,
        depth: usize,
    ) -> Result<Snapshot, Error> {
        let entries = self.entries()?;
        let by = &self.spec.by;
        let wants = |b: &By| by.contains(b);
        let by_field = by.iter().any(|b| matches!(b, By::Field(_)));

        // Names of the user stacks, per process.
        let mut ustacks: HashMap<u32, Vec<(u32, Vec<u64>)>> = HashMap::new();
        if wants(&By::UStack) {
            let wanted = entries
                .iter()
                .filter(|(key, _)| named(key.tgid))
                .filter_map(|(key, _)| Some((key.tgid, u32::try_from(key.ustack).ok()?)));
            let numbered = user_stacks(&self.ebpf, wanted.clone().map(|(_, id)| id))?;
            let mut listed: std::collections::HashSet<(u32, u32)> = Default::default();
            for (tgid, id) in wanted {
                if let Some(frames) = numbered.get(&id)
                    && listed.insert((tgid, id))
                {
                    let shown = frames[..frames.len().min(depth)].to_vec();
                    ustacks.entry(tgid).or_default().push((id, shown));
                }
            }
        }
        let mut named_ustacks: HashMap<(u32, u32), Vec<Frame>> = HashMap::new();
        // At a system call the user stack's first address is the instruction after it.
        let all_returns = self.spec.events.iter().all(|e| {
            matches!(e, Event::Tracepoint { category, .. }
                if category == "syscalls" || category == "raw_syscalls")
        });
        for (tgid, stacks) in &ustacks {
            let maps = self.maps.get(*tgid);
            for (id, frames) in names.user(*tgid, maps.as_deref(), stacks, all_returns) {
                named_ustacks.insert((*tgid, id), frames);
            }
        }
        let mut named_kstacks: HashMap<i32, Vec<Frame>> = HashMap::new();

        // Rows merged by what is shown: stacks of different processes that name the same
        // frames are one group unless the pid is asked for.
        let mut merged: HashMap<RowKey, u64> = HashMap::new();
        let mut rows: Vec<Row> = Vec::new();
        for (key, count) in entries {
            let ustack = wants(&By::UStack).then(|| {
                named_ustacks
                    .get(&(key.tgid, key.ustack as u32))
                    .cloned()
                    .unwrap_or_default()
            });
            let kstack = wants(&By::KStack).then(|| {
                named_kstacks
                    .entry(key.kstack)
                    .or_insert_with(|| {
                        stack_frames(&self.ebpf, key.kstack)
                            .map(|f| names.kernel(&f))
                            .unwrap_or_default()
                    })
                    .clone()
            });
            let row = Row {
                pid: (wants(&By::Pid) || wants(&By::Tid)).then_some(key.tgid),
                tid: wants(&By::Tid).then_some(key.pid),
                comm: wants(&By::Comm).then(|| object::comm_string(&key.comm)),
                probe: wants(&By::Probe).then(|| {
                    self.probe_names
                        .get(&key.field2)
                        .cloned()
                        .unwrap_or_else(|| format!("probe {}", key.field2))
                }),
                field: by_field.then_some(key.field),
                field2: self.spec.second_field.is_some().then_some(key.field2),
                ustack,
                kstack,
                count,
            };
            let row_key = RowKey::of(&row);
            match merged.get(&row_key) {
                Some(&i) => rows[i as usize].count += count,
                None => {
                    merged.insert(row_key, rows.len() as u64);
                    rows.push(row);
                }
            }
        }
        rows.sort_by_key(|r| std::cmp::Reverse(r.count));
        Ok(Snapshot {
            rows,
            events: object_total(&self.ebpf, object::TOTAL_EVENTS),
            dropped: object_total(&self.ebpf, object::TOTAL_DROPPED),
            stack_errors: object_total(&self.ebpf, object::TOTAL_STACK_ERRORS),
            ustacks_lost: object_total(&self.ebpf, object::TOTAL_USTACKS_LOST),
            elapsed: self.started.elapsed(),
        })
    }
}

fn object_total(ebpf: &Ebpf, which: u32) -> u64 {
    totals(ebpf, which)
}

/// What a row shows, for merging rows that show the same.
#[derive(Debug, PartialEq, Eq, Hash)]
struct RowKey(String);

impl RowKey {
    fn of(row: &Row) -> RowKey {
        let frames = |s: &Option<Vec<Frame>>| {
            s.as_ref()
                .map(|f| f.iter().map(Frame::describe).collect::<Vec<_>>().join(";"))
                .unwrap_or_default()
        };
        RowKey(format!(
            "{:?}|{:?}|{:?}|{:?}|{:?}|{:?}|{}|{}",
            row.pid,
            row.tid,
            row.comm,
            row.probe,
            row.field,
            row.field2,
            frames(&row.ustack),
            frames(&row.kstack)
        ))
    }
}

/// The field `name`, at the same place in every event.
fn same_field(events: &[Event], name: &str) -> Result<tracefs::Field, Error> {
    let mut found: Option<tracefs::Field> = None;
    for event in events {
        if matches!(event, Event::Software { .. }) {
            return Err(Error::Unsupported(format!(
                "{event} has no fields: group it by comm, pid, tid, ustack or kstack"
            )));
        }
        let field = event.field(name)?;
        if let Some(f) = &found
            && (f.offset != field.offset || f.size != field.size)
        {
            return Err(Error::Unsupported(format!(
                "field {name} is not at the same place in every event matched"
            )));
        }
        found = Some(field);
    }
    found.ok_or_else(|| Error::Unsupported("no event".into()))
}

/// The online CPUs, from /sys/devices/system/cpu/online (`0-1,4`).
pub(crate) fn online_cpus() -> Result<Vec<u32>, Error> {
    let path = "/sys/devices/system/cpu/online";
    let text = std::fs::read_to_string(path).map_err(Error::io(path))?;
    let mut cpus = Vec::new();
    for part in text.trim().split(',') {
        let (a, b) = part.split_once('-').unwrap_or((part, part));
        if let (Ok(a), Ok(b)) = (a.parse::<u32>(), b.parse::<u32>()) {
            cpus.extend(a..=b);
        }
    }
    Ok(cpus)
}

fn attach(
    ebpf: &mut Ebpf,
    events: &[Event],
    tgids: &[u32],
    first: &Event,
) -> Result<Vec<CookieLink>, Error> {
    let mut links = Vec::new();
    match first {
        Event::Tracepoint { .. } => {
            let program: &mut TracePoint = ebpf
                .program_mut("count_tracepoint")
                .ok_or_else(|| Error::Unsupported("no count_tracepoint program".into()))?
                .try_into()
                .map_err(Error::program("count_tracepoint"))?;
            program.load().map_err(Error::program("count_tracepoint"))?;
            let program_fd = program
                .fd()
                .map_err(Error::program("count_tracepoint"))?
                .as_fd();
            for (index, event) in events.iter().enumerate() {
                if let Event::Tracepoint { category, name } = event {
                    links.push(attach_with_cookie(
                        program_fd,
                        category,
                        name,
                        index as u64,
                    )?);
                }
            }
        }
        Event::Software { name } => {
            let which = software_event(name).ok_or_else(|| Error::UnknownEvent(name.clone()))?;
            let program: &mut PerfEvent = ebpf
                .program_mut("count_perf_event")
                .ok_or_else(|| Error::Unsupported("no count_perf_event program".into()))?
                .try_into()
                .map_err(Error::program("count_perf_event"))?;
            program.load().map_err(Error::program("count_perf_event"))?;
            for cpu in online_cpus()? {
                program
                    .attach(
                        PerfEventConfig::Software(which),
                        PerfEventScope::AllProcessesOneCpu { cpu },
                        SamplePolicy::Period(1),
                        false,
                    )
                    .map_err(Error::program("count_perf_event"))?;
            }
        }
        Event::Uprobe { path, symbol, ret } => {
            let name = if *ret {
                "count_uretprobe"
            } else {
                "count_uprobe"
            };
            let program: &mut UProbe = ebpf
                .program_mut(name)
                .ok_or_else(|| Error::Unsupported(format!("no {name} program")))?
                .try_into()
                .map_err(Error::program("count_uprobe"))?;
            program.load().map_err(Error::program("count_uprobe"))?;
            attach_uprobe(program, path, symbol, tgids)?;
        }
    }
    Ok(links)
}

/// A tracepoint's perf event and the BPF link on it that carries a cookie; both close when
/// dropped, which detaches the program from that tracepoint.
pub(crate) struct CookieLink {
    _event: fltrace_capture::perf::PerfEvent,
    _link: std::os::fd::OwnedFd,
}

/// Attaches `program` to tracepoint `category:name` with `cookie`, which the program reads
/// with bpf_get_attach_cookie (aya's tracepoint attach takes no cookie).
fn attach_with_cookie(
    program: std::os::fd::BorrowedFd<'_>,
    category: &str,
    name: &str,
    cookie: u64,
) -> Result<CookieLink, Error> {
    use std::os::fd::{AsRawFd, FromRawFd};
    let failed = |what: &str, e: std::io::Error| {
        Error::Unsupported(format!(
            "attaching to tracepoint {category}:{name}: {what}: {e}"
        ))
    };
    let mut attr = perf_event_open_sys::bindings::perf_event_attr {
        type_: perf_event_open_sys::bindings::PERF_TYPE_TRACEPOINT,
        size: std::mem::size_of::<perf_event_open_sys::bindings::perf_event_attr>() as u32,
        config: tracefs::id(category, name)?,
        ..Default::default()
    };
    attr.__bindgen_anon_1.sample_period = 1;
    attr.__bindgen_anon_2.wakeup_events = 1;
    // One event on CPU 0 for every task: a tracepoint program runs on every CPU.
    let event = fltrace_capture::perf::PerfEvent::open_with_flags(&attr, -1, 0, 0)
        .map_err(|e| failed("perf_event_open", e))?;
    /// `union bpf_attr`'s `link_create` for a perf event.
    #[repr(C)]
    struct LinkCreate {
        prog_fd: u32,
        target_fd: u32,
        attach_type: u32,
        flags: u32,
        bpf_cookie: u64,
        rest: [u64; 8],
    }
    const BPF_LINK_CREATE: libc::c_long = 28;
    const BPF_PERF_EVENT: u32 = 41;
    let create = LinkCreate {
        prog_fd: program.as_raw_fd() as u32,
        target_fd: event.fd().as_raw_fd() as u32,
        attach_type: BPF_PERF_EVENT,
        flags: 0,
        bpf_cookie: cookie,
        rest: [0; 8],
    };
    // SAFETY: `create` is a zero-padded bpf_attr of the size given; the kernel only reads it.
    let fd = unsafe {
        libc::syscall(
            libc::SYS_bpf,
            BPF_LINK_CREATE,
            &create as *const LinkCreate,
            std::mem::size_of::<LinkCreate>(),
        )
    };
    if fd < 0 {
        return Err(failed("BPF link", std::io::Error::last_os_error()));
    }
    // SAFETY: the kernel just returned this descriptor and nothing else owns it.
    let link = unsafe { std::os::fd::OwnedFd::from_raw_fd(fd as i32) };
    event.enable().map_err(|e| failed("enabling", e))?;
    Ok(CookieLink {
        _event: event,
        _link: link,
    })
}

/// Attaches a uprobe on `symbol` of `path`, in each of `tgids` or in every process.
pub(crate) fn attach_uprobe(
    program: &mut UProbe,
    path: &std::path::Path,
    symbol: &str,
    tgids: &[u32],
) -> Result<(), Error> {
    let scopes: Vec<UProbeScope> = if tgids.is_empty() {
        vec![UProbeScope::AllProcesses]
    } else {
        tgids
            .iter()
            .filter_map(|&t| NonZeroU32::new(t))
            .map(UProbeScope::OneProcess)
            .collect()
    };
    for scope in scopes {
        program
            .attach(symbol, path, scope)
            .map_err(Error::program("uprobe"))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Named processes get the tracepoints (where the kernel has them); the whole system and
    /// a cgroup the software event.
    #[test]
    fn fault_events_follow_the_targets() {
        let system = crate::Scope {
            pids: vec![],
            cgroup: None,
            comm: None,
            command: vec![],
        };
        assert_eq!(fault_events_for(&system), fault_events());
        let named = crate::Scope {
            pids: vec![1],
            ..system.clone()
        };
        assert_eq!(fault_events_for(&named), fault_tracepoints());
        let named_in_cgroup = crate::Scope {
            cgroup: Some("/sys/fs/cgroup/unified".into()),
            ..named
        };
        assert_eq!(fault_events_for(&named_in_cgroup), fault_tracepoints());
        let cgroup = crate::Scope {
            pids: vec![],
            ..named_in_cgroup
        };
        assert_eq!(fault_events_for(&cgroup), fault_events());
    }

    #[test]
    fn globs_match_tracepoint_names() {
        assert!(glob_match("vmscan:*", "vmscan:mm_vmscan_kswapd_wake"));
        assert!(glob_match(
            "syscalls:sys_enter_*map",
            "syscalls:sys_enter_mmap"
        ));
        assert!(!glob_match(
            "syscalls:sys_enter_*map",
            "syscalls:sys_enter_mmap2x"
        ));
        assert!(!glob_match("vmscan:*", "kmem:kmalloc"));
    }
}
