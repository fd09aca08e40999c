//! `brkstack`: brk(2) calls (`syscalls:sys_enter_brk`) counted by user stack and process
//! name, printed at the end. Where processes are named (`-p` or a command), each sample
//! carries the user registers and a copy of the stack, unwound at once with the recorder's
//! DWARF unwinder, so stacks are complete without frame pointers; system-wide, the kernel's
//! frame-pointer walk is used instead (code built without frame pointers gives short stacks).
//! Mappings are followed while processes live (/proc/PID/maps when first seen, then the
//! kernel's `mmap2` records), so stacks of processes that exited before the end are still
//! symbolized, through the same symbolizer as `fltrace report`.

use std::collections::HashMap;
use std::io::Write;
use std::path::PathBuf;
use std::sync::atomic::AtomicUsize;
use std::time::Duration;

use fltrace_analyze::{Location, Symbolizer};
use fltrace_capture::unwind::{AddressSpaceUnwinder, ElfCache, LiveStack};
use fltrace_trace::{Mapping, ProcessTrace, Stack};
use framehop::x86_64::CacheX86_64;

use crate::Error;
use crate::output::{Column, Format, Printer, Value};
use crate::session::{Options, Record, Sample, Scope, Session, Source, StackMode};

/// CSV and JSON: one row per (process, stack).
pub const COLUMNS: &[Column] = &[
    Column::data("pid"),
    Column::data("comm"),
    Column::data("count"),
    Column::data("stack"),
];

const SOURCES: &[Source] = &[Source::Tracepoint {
    group: "syscalls",
    name: "sys_enter_brk",
}];

/// Bytes of user stack copied per call: brk is rare, so the whole of most stacks.
const STACK_BYTES: u32 = 32 * 1024;

/// The model of one process: its mappings over its exec generations and its unwinder.
struct Proc {
    generation: u32,
    mappings: Vec<Mapping>,
    unwinder: AddressSpaceUnwinder,
    cache: CacheX86_64,
}

impl Proc {
    fn new() -> Proc {
        Proc {
            generation: 0,
            mappings: Vec::new(),
            unwinder: AddressSpaceUnwinder::default(),
            cache: CacheX86_64::new(),
        }
    }

    fn from_proc(pid: u32, elf: &mut ElfCache) -> Proc {
        let mut p = Proc::new();
        if let Ok(text) = std::fs::read_to_string(format!("/proc/{pid}/maps")) {
            for m in text.lines().filter_map(fltrace_trace::parse_procmaps_line) {
                p.map(pid, m, elf);
            }
        }
        p
    }

    fn map(&mut self, pid: u32, mut mapping: Mapping, elf: &mut ElfCache) {
        mapping.generation = self.generation;
        if mapping.is_exec() && mapping.is_file() {
            let through_root = PathBuf::from(format!("/proc/{pid}/root{}", mapping.path));
            let file = if through_root.exists() {
                through_root
            } else {
                PathBuf::from(&mapping.path)
            };
            self.unwinder.add_mapping(elf, &mapping, &file);
        }
        self.mappings.push(mapping);
    }

    fn exec(&mut self) {
        self.generation += 1;
        self.unwinder = AddressSpaceUnwinder::default();
        self.cache = CacheX86_64::new();
    }

    fn stack_bounds(&self, sp: u64) -> (u64, u64) {
        self.mappings
            .iter()
            .rev()
            .find(|m| m.generation == self.generation && m.contains(sp))
            .map_or((0, 0), |m| (m.start, m.end))
    }
}

/// One counted stack, symbolized.
#[derive(Debug, Clone, PartialEq)]
pub struct Counted {
    /// Process id.
    pub pid: u32,
    /// Its name when it called brk.
    pub comm: String,
    /// Calls.
    pub count: u64,
    /// Frames innermost first, inlined ones expanded.
    pub frames: Vec<Location>,
}

/// `function at file:line`, or `function [lib]` without a line.
pub fn frame_text(l: &Location) -> String {
    if l.has_line() {
        format!("{} at {}", l.function, l.file_line())
    } else {
        format!("{} [{}]", l.function, l.lib)
    }
}

/// The open tool.
pub struct BrkStack {
    /// Its events.
    pub session: Session,
    dwarf: bool,
}

/// Opens `sys_enter_brk` for `scope`, with DWARF stacks where processes are named; the notes
/// say when the kernel's frame-pointer stacks are used instead.
pub fn open(scope: &Scope) -> Result<BrkStack, Error> {
    let dwarf = scope.names_processes();
    let options = Options {
        stack: if dwarf {
            StackMode::Dwarf(STACK_BYTES)
        } else {
            StackMode::Callchain
        },
        mappings: true,
        ring_pages: 512,
    };
    let mut session = Session::open(SOURCES, scope, options)?;
    if !dwarf {
        session.notes.push(
            "system-wide: stacks are the kernel's frame-pointer walk, short in code built without frame pointers; name processes (-p PID or a command) for complete DWARF stacks"
                .to_owned(),
        );
    }
    Ok(BrkStack { session, dwarf })
}

/// (generation, comm, frames, calls) of one counted stack of a process.
type StackCount = (u32, String, Vec<u64>, u64);

struct Model {
    procs: HashMap<u32, Proc>,
    elf: ElfCache,
    /// (pid, generation, comm, frames) to calls.
    counts: HashMap<(u32, u32, String, Vec<u64>), u64>,
    dwarf: bool,
}

impl Model {
    fn proc(&mut self, pid: u32) -> &mut Proc {
        let elf = &mut self.elf;
        self.procs
            .entry(pid)
            .or_insert_with(|| Proc::from_proc(pid, elf))
    }

    fn record(&mut self, ctx: &crate::session::Context, record: Record) {
        match record {
            Record::Comm {
                pid, exec: true, ..
            } => match self.procs.get_mut(&pid) {
                Some(p) => p.exec(),
                // Its mappings follow as records.
                None => {
                    self.procs.insert(pid, Proc::new());
                }
            },
            Record::Fork { pid, ppid, tid, .. } if pid == tid && pid != ppid => {
                let parent = self
                    .procs
                    .get(&ppid)
                    .map(|p| (p.generation, p.mappings.clone(), p.unwinder.clone()));
                let child = match parent {
                    Some((generation, mappings, unwinder)) => Proc {
                        generation,
                        mappings,
                        unwinder,
                        cache: CacheX86_64::new(),
                    },
                    None => Proc::from_proc(pid, &mut self.elf),
                };
                self.procs.insert(pid, child);
            }
            Record::Mmap { pid, mapping, .. } => {
                let elf = &mut self.elf;
                let p = self
                    .procs
                    .entry(pid)
                    .or_insert_with(|| Proc::from_proc(pid, elf));
                p.map(pid, mapping, elf);
            }
            Record::Sample(s) => self.sample(ctx, &s),
            _ => {}
        }
    }

    fn sample(&mut self, ctx: &crate::session::Context, s: &Sample) {
        let comm = ctx.comm(s.tid);
        let dwarf = self.dwarf;
        let p = self.proc(s.pid);
        let frames = match (dwarf, s.regs) {
            (true, Some(regs)) => {
                let mut frames = Vec::new();
                let mut live = LiveStack::new(s.pid);
                live.reset(p.stack_bounds(regs.1));
                p.unwinder
                    .unwind(&mut p.cache, regs, &s.stack, &mut live, &mut frames);
                frames
            }
            _ => s.callchain.clone(),
        };
        let generation = p.generation;
        *self
            .counts
            .entry((s.pid, generation, comm, frames))
            .or_default() += 1;
    }

    /// Symbolizes every counted stack, per process, against the mappings it had.
    fn finish(self) -> Vec<Counted> {
        let mut by_pid: HashMap<u32, Vec<StackCount>> = HashMap::new();
        for ((pid, generation, comm, frames), count) in self.counts {
            by_pid
                .entry(pid)
                .or_default()
                .push((generation, comm, frames, count));
        }
        let mut symbolizer = Symbolizer::new();
        let mut out = Vec::new();
        for (pid, stacks) in by_pid {
            let mappings = self
                .procs
                .get(&pid)
                .map(|p| p.mappings.clone())
                .unwrap_or_default();
            let trace = ProcessTrace {
                pid,
                faults: Vec::new(),
                stacks: Vec::new(),
                mappings,
                metadata: Vec::new(),
                allocs: Vec::new(),
                alloc_stacks: stacks
                    .iter()
                    .enumerate()
                    .map(|(id, (generation, _, frames, _))| Stack {
                        id: id as u32,
                        generation: *generation,
                        frames: frames.clone(),
                    })
                    .collect(),
            };
            // Every frame is a return address but the first, the instruction after the
            // system call: looked up one byte back, all fall in their call instruction.
            let resolved = symbolizer.resolve_alloc_stacks(&trace);
            for (id, (_, comm, _, count)) in stacks.into_iter().enumerate() {
                out.push(Counted {
                    pid,
                    comm,
                    count,
                    frames: resolved.get(id as u32).to_vec(),
                });
            }
        }
        out.sort_by(|a, b| a.count.cmp(&b.count).then(a.pid.cmp(&b.pid)));
        out
    }
}

impl BrkStack {
    /// Counts until stopped, then prints the stacks (fewest calls first, as bcc's stackcount
    /// does), or folded lines for flamegraphs.
    pub fn run<W: Write>(
        mut self,
        stop: &AtomicUsize,
        duration: Option<Duration>,
        folded: bool,
        printer: &mut Printer<W>,
    ) -> Result<Option<std::process::ExitStatus>, Error> {
        let mut model = Model {
            procs: HashMap::new(),
            elf: ElfCache::default(),
            counts: HashMap::new(),
            dwarf: self.dwarf,
        };
        let status = self.session.run(
            stop,
            duration,
            None,
            |ctx, record| model.record(ctx, record),
            |_, _| {},
        )?;
        let counted = model.finish();
        for c in &counted {
            if folded {
                let mut line = c.comm.clone();
                for l in c.frames.iter().rev() {
                    line.push(';');
                    line.push_str(&l.function);
                }
                printer.line(&format!("{line} {}", c.count))?;
                continue;
            }
            match printer.format() {
                Format::Table => {
                    for l in &c.frames {
                        printer.line(&format!("  {}", frame_text(l)))?;
                    }
                    printer.line(&format!("    {} [{}]", c.comm, c.pid))?;
                    printer.line(&format!("    {}\n", c.count))?;
                }
                _ => {
                    let stack: Vec<String> = c
                        .frames
                        .iter()
                        .map(|l| format!("{}@{}", l.function, l.file_line()))
                        .collect();
                    printer.row(&[
                        c.pid.into(),
                        c.comm.as_str().into(),
                        Value::from(c.count),
                        stack.join(";").into(),
                    ])?;
                }
            }
        }
        Ok(status)
    }
}
