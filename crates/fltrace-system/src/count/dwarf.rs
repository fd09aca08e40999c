//! Counting events of named processes (`-p PID` or a command) in user space, with complete
//! user stacks: each event's sample carries the user registers and a copy of the stack,
//! unwound at once with the recorder's DWARF unwinder, so code built without frame pointers
//! gives stacks reaching `main`, which the kernel's frame-pointer walk (and so the in-kernel
//! BPF counters) cannot. `fltrace count`, `faults` and `memleak` use it where processes are
//! named; system-wide they count in the kernel (the bpf mechanism). Copying a stack per event
//! costs more than counting in the kernel: this is for one program, not the whole machine.

use std::collections::HashMap;
use std::path::Path;
use std::sync::atomic::AtomicUsize;
use std::time::{Duration, Instant};

use crate::bpf::{By, Event, FieldFilter, Frame, Row, StackNames};
use fltrace_analyze::Symbolizer;
use fltrace_trace::{ProcessTrace, Stack};

use crate::Error;
use crate::Scope;
use crate::perf_session::unwound::Processes;
use crate::perf_session::{Context, Options, PerfEvents, Record, Sample, Source, StackMode};

/// Bytes of user stack copied per event: enough for deep stacks, small enough for the ring
/// to hold a burst of faults.
pub(crate) const STACK_BYTES: u32 = 16 * 1024;

/// Ring buffer pages per CPU (16 MiB): a thousand samples with their stacks.
pub(crate) const RING_PAGES: usize = 4096;

/// What a user-space count is given.
pub struct UnwoundSpec {
    /// The events.
    pub events: Vec<Event>,
    /// The grouping (a single total when empty).
    pub by: Vec<By>,
    /// Only events whose field compares so.
    pub filter: Option<FieldFilter>,
    /// The processes named (-p or a command), with their children; no cgroup.
    pub scope: Scope,
    /// One sample every this many events (1: every event); counts are scaled by it.
    pub sample_period: u64,
}

/// How many events each group had.
#[derive(Debug, Clone, Default)]
pub struct UnwoundCounted {
    /// The groups, most counted first.
    pub rows: Vec<Row>,
    /// Events counted in all.
    pub events: u64,
    /// Samples the kernel could not write because the ring was full.
    pub lost: u64,
    /// Since counting started.
    pub elapsed: Duration,
    /// One sample every this many events: `rows`, `events` and `lost` are samples times it.
    pub sample_period: u64,
}

/// Where a field of an event is.
#[derive(Clone)]
enum FieldAt {
    /// A tracepoint's raw field: its name, and whether signed.
    Raw(String, bool),
    /// A uprobe register (arg0..arg5, retval) by index in `Sample::args`.
    Register(usize),
}

/// `--by`'s raw key of one event, before stacks are named.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct Key {
    pid: u32,
    generation: u32,
    tid: Option<u32>,
    comm: Option<String>,
    probe: Option<usize>,
    field: Option<u64>,
    ustack: Option<Vec<u64>>,
    kstack: Option<Vec<u64>>,
}

/// An open count.
pub struct UnwoundCount {
    perf_events: PerfEvents,
    spec: UnwoundSpec,
    probe_names: Vec<String>,
    kernel_stack: bool,
    /// Every frame of a user stack is a return address (syscall entries, function returns).
    all_returns: bool,
}

fn unsupported(what: String) -> Error {
    Error::Missing {
        what,
        detail: String::new(),
    }
}

/// The file offset of `symbol` in the ELF file `path` (as uprobes want it).
pub fn symbol_offset(path: &Path, symbol: &str) -> Result<u64, Error> {
    let target = |e: String| Error::Target {
        what: format!("cannot probe {symbol} in {}: {e}", path.display()),
        source: std::io::Error::from(std::io::ErrorKind::InvalidData),
    };
    let offsets = fltrace_capture::function_offsets(path, &[symbol]).map_err(|source| {
        if source.kind() == std::io::ErrorKind::InvalidData {
            target(source.to_string())
        } else {
            Error::Target {
                what: format!("cannot read {}", path.display()),
                source,
            }
        }
    })?;
    match offsets.first() {
        Some(Ok(offset)) => Ok(*offset),
        Some(Err(missing)) => Err(target(missing.to_string())),
        None => Err(target("no such symbol".into())),
    }
}

fn source_of(event: &Event) -> Result<Source, Error> {
    Ok(match event {
        Event::Tracepoint { category, name } => Source::Tracepoint {
            group: category.clone().into(),
            name: name.clone().into(),
        },
        Event::Software { name } => Source::Software {
            config: crate::bpf::event::software_config(name)
                .ok_or_else(|| unsupported(format!("software event {name}")))?,
        },
        Event::Uprobe { path, symbol, ret } => Source::Uprobe {
            offset: symbol_offset(path, symbol)?,
            path: path.clone(),
            ret: *ret,
        },
    })
}

/// Where `name` is in `event`, checked before anything is opened.
fn field_of(event: &Event, name: &str) -> Result<FieldAt, Error> {
    let field = event.field(name).map_err(|e| Error::Target {
        what: e.to_string(),
        source: std::io::Error::other("no such field"),
    })?;
    Ok(match event {
        Event::Uprobe { .. } => FieldAt::Register(
            ["arg0", "arg1", "arg2", "arg3", "arg4", "arg5", "retval"]
                .iter()
                .position(|&n| n == name)
                .unwrap_or(6),
        ),
        _ => FieldAt::Raw(field.name, field.signed),
    })
}

impl UnwoundCount {
    /// Opens the events for the processes (or starts the command) with user stack copies,
    /// and the kernel's stack when grouped by it.
    pub fn open(spec: UnwoundSpec) -> Result<UnwoundCount, Error> {
        let sources = spec
            .events
            .iter()
            .map(source_of)
            .collect::<Result<Vec<_>, _>>()?;
        // Checked now, so that a wrong name fails before the command runs.
        for event in &spec.events {
            for by in &spec.by {
                if let By::Field(name) = by {
                    field_of(event, name)?;
                }
            }
            if let Some(f) = &spec.filter {
                field_of(event, &f.field)?;
            }
        }
        let kernel_stack = spec.by.contains(&By::KStack);
        let stack = match (spec.by.contains(&By::UStack), kernel_stack) {
            (true, true) => StackMode::DwarfAndKernel(STACK_BYTES),
            (true, false) => StackMode::Dwarf(STACK_BYTES),
            (false, true) => StackMode::KernelCallchain,
            (false, false) => StackMode::None,
        };
        let options = Options {
            stack,
            mappings: true,
            ring_pages: RING_PAGES,
            sample_period: spec.sample_period.max(1),
        };
        let perf_events = PerfEvents::open(&sources, &spec.scope, options)?;
        let all_returns = spec.events.iter().all(|e| match e {
            Event::Tracepoint { category, .. } => {
                category == "syscalls" || category == "raw_syscalls"
            }
            Event::Uprobe { ret, .. } => *ret,
            Event::Software { .. } => false,
        });
        Ok(UnwoundCount {
            perf_events,
            probe_names: spec.events.iter().map(ToString::to_string).collect(),
            spec,
            kernel_stack,
            all_returns,
        })
    }

    /// The pid of the command started, if one was.
    pub fn child_pid(&self) -> Option<u32> {
        self.perf_events.child_pid()
    }

    /// Counts until `stop` is raised, `duration` passes or the processes end; `each_second`
    /// is told the events counted in the last second. Then names the stacks.
    pub fn run(
        mut self,
        stop: &AtomicUsize,
        duration: Option<Duration>,
        mut each_second: impl FnMut(u64, Duration),
        names: &mut StackNames,
    ) -> Result<UnwoundCounted, Error> {
        let started = Instant::now();
        let fields: Vec<Option<FieldAt>> = self
            .spec
            .events
            .iter()
            .map(|e| {
                self.spec.by.iter().find_map(|b| match b {
                    By::Field(name) => field_of(e, name).ok(),
                    _ => None,
                })
            })
            .collect();
        let filters: Vec<Option<FieldAt>> = self
            .spec
            .events
            .iter()
            .map(|e| {
                self.spec
                    .filter
                    .as_ref()
                    .and_then(|f| field_of(e, &f.field).ok())
            })
            .collect();
        let mut processes = Processes::default();
        let mut counts: HashMap<Key, u64> = HashMap::new();
        // Both handlers see it: one counts, the other reports the rate.
        let events = std::cell::Cell::new(0u64);
        let mut last = (Instant::now(), 0u64);
        let by = self.spec.by.clone();
        let wants = |b: &By| by.contains(b);
        let filter = self.spec.filter.clone();
        {
            let perf_events = &mut self.perf_events;
            let formats = perf_events.formats.clone();
            let value = |s: &Sample, at: &FieldAt| -> Option<(u64, bool)> {
                match at {
                    FieldAt::Register(i) => s.args.get(*i).map(|&v| (v, false)),
                    FieldAt::Raw(name, signed) => {
                        let format = formats.get(s.source)?.as_ref()?;
                        let decoded = format.decode(&s.raw);
                        decoded.i64(name).map(|v| (v as u64, *signed))
                    }
                }
            };
            let dwarf = wants(&By::UStack);
            let kernel_stack = self.kernel_stack;
            perf_events.run(
                stop,
                duration,
                Some(Duration::from_millis(200)),
                |ctx: &Context, record| {
                    processes.observe(&record);
                    let Record::Sample(s) = record else {
                        return;
                    };
                    if let (Some(f), Some(Some(at))) = (&filter, filters.get(s.source))
                        && !value(&s, at).is_some_and(|(v, signed)| f.matches(v, signed))
                    {
                        return;
                    }
                    let field = match fields.get(s.source) {
                        Some(Some(at)) => match value(&s, at) {
                            Some((v, _)) => Some(v),
                            None => return,
                        },
                        _ => None,
                    };
                    let (generation, ustack) = if dwarf {
                        let (g, frames) = processes.user_stack(&s, true);
                        (g, Some(frames))
                    } else {
                        (0, None)
                    };
                    let key = Key {
                        pid: s.pid,
                        generation,
                        tid: wants(&By::Tid).then_some(s.tid),
                        comm: wants(&By::Comm).then(|| ctx.comm(s.tid)),
                        probe: wants(&By::Probe).then_some(s.source),
                        field,
                        ustack,
                        kstack: kernel_stack.then(|| s.callchain.clone()),
                    };
                    events.set(events.get() + 1);
                    *counts.entry(key).or_default() += 1;
                },
                |_, _| {
                    if last.0.elapsed() >= Duration::from_secs(1) {
                        each_second(events.get() - last.1, last.0.elapsed());
                        last = (Instant::now(), events.get());
                    }
                },
            )?;
        }
        let period = self.spec.sample_period.max(1);
        let mut rows = self.name(counts, &processes, names);
        for row in &mut rows {
            row.count *= period;
        }
        Ok(UnwoundCounted {
            rows,
            events: events.get() * period,
            lost: self.perf_events.context.lost * period,
            elapsed: started.elapsed(),
            sample_period: period,
        })
    }

    /// Names the stacks of every group, per process and generation, through the same
    /// symbolizer as `report`, and merges groups that show the same.
    fn name(
        &self,
        counts: HashMap<Key, u64>,
        processes: &Processes,
        names: &mut StackNames,
    ) -> Vec<Row> {
        let wants = |b: &By| self.spec.by.contains(b);
        let mut symbolizer = Symbolizer::new();
        let mut by_pid: HashMap<u32, Vec<(Key, u64)>> = HashMap::new();
        for (key, count) in counts {
            by_pid.entry(key.pid).or_default().push((key, count));
        }
        let mut merged: HashMap<String, usize> = HashMap::new();
        let mut rows: Vec<Row> = Vec::new();
        for (pid, groups) in by_pid {
            let stacks: Vec<Stack> = groups
                .iter()
                .enumerate()
                .map(|(id, (key, _))| Stack {
                    end: fltrace_trace::StackEnd::Unknown,
                    id: id as u32,
                    generation: key.generation,
                    frames: key
                        .ustack
                        .iter()
                        .flatten()
                        .map(|&frame| fltrace_trace::CodeAddr::new(frame))
                        .collect(),
                })
                .collect();
            let named = if wants(&By::UStack) {
                let mut trace = ProcessTrace {
                    pid,
                    faults: Vec::new(),
                    stacks: Vec::new(),
                    mappings: processes.mappings(pid),
                    metadata: Vec::new(),
                    allocs: Vec::new(),
                    alloc_stacks: Vec::new(),
                };
                if self.all_returns {
                    trace.alloc_stacks = stacks;
                    Some(symbolizer.resolve_alloc_stacks(&trace))
                } else {
                    trace.stacks = stacks;
                    Some(symbolizer.resolve_stacks(&trace))
                }
            } else {
                None
            };
            for (id, (key, count)) in groups.into_iter().enumerate() {
                let row = Row {
                    pid: (wants(&By::Pid) || wants(&By::Tid)).then_some(pid),
                    tid: key.tid,
                    comm: key.comm,
                    probe: key.probe.and_then(|i| self.probe_names.get(i).cloned()),
                    field: key.field,
                    field2: None,
                    ustack: named
                        .as_ref()
                        .map(|n| n.get(id as u32).iter().map(Frame::from_location).collect()),
                    kstack: key.kstack.map(|k| names.kernel(&k)),
                    count,
                };
                let shown = format!(
                    "{:?}|{:?}|{:?}|{:?}|{:?}|{:?}|{:?}",
                    row.pid, row.tid, row.comm, row.probe, row.field, row.ustack, row.kstack
                );
                match merged.get(&shown) {
                    Some(&i) => rows[i].count += count,
                    None => {
                        merged.insert(shown, rows.len());
                        rows.push(row);
                    }
                }
            }
        }
        rows.sort_by_key(|r| std::cmp::Reverse(r.count));
        rows
    }
}
