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
use std::sync::atomic::AtomicUsize;
use std::time::Duration;

use fltrace_analyze::{Location, Symbolizer};
use fltrace_render::TableFormat;
use fltrace_trace::{ProcessTrace, Stack};

use crate::Error;
use crate::Scope;
use crate::output::{Column, Printer, Value};
use crate::perf_session::unwound::Processes;
use crate::perf_session::{Options, PerfEvents, Record, Source, StackMode};

/// CSV and JSON: one row per (process, stack).
pub const COLUMNS: &[Column] = &[
    Column::data("pid"),
    Column::data("comm"),
    Column::data("count"),
    Column::data("stack"),
];

const SOURCES: &[Source] = &[Source::tracepoint("syscalls", "sys_enter_brk")];

// The stack copy and ring of `count syscalls:sys_enter_brk --by ustack`, which counts every
// call of a burst: 32 KiB copies in a 2 MiB ring held 63 calls of a burst.
use crate::count::dwarf::{RING_PAGES, STACK_BYTES};

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
    pub perf_events: PerfEvents,
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
        ring_pages: RING_PAGES,
        sample_period: 1,
    };
    let mut perf_events = PerfEvents::open(SOURCES, scope, options)?;
    if !dwarf {
        perf_events.notes.push(
            "system-wide: stacks are the kernel's frame-pointer walk, short in code built without frame pointers; name processes (-p PID or a command) for complete DWARF stacks"
                .to_owned(),
        );
    }
    Ok(BrkStack { perf_events, dwarf })
}

/// (generation, comm, frames, calls) of one counted stack of a process.
type CountedStack = (u32, String, Vec<u64>, u64);

struct Model {
    processes: Processes,
    /// (pid, generation, comm, frames) to calls.
    counts: HashMap<(u32, u32, String, Vec<u64>), u64>,
    dwarf: bool,
}

impl Model {
    fn record(&mut self, ctx: &crate::perf_session::Context, record: Record) {
        self.processes.observe(&record);
        if let Record::Sample(s) = record {
            let comm = ctx.comm(s.tid);
            let (generation, frames) = self.processes.user_stack(&s, self.dwarf);
            *self
                .counts
                .entry((s.pid, generation, comm, frames))
                .or_default() += 1;
        }
    }

    /// Symbolizes every counted stack, per process, against the mappings it had.
    fn finish(self) -> Vec<Counted> {
        let mut by_pid: HashMap<u32, Vec<CountedStack>> = HashMap::new();
        for ((pid, generation, comm, frames), count) in self.counts {
            by_pid
                .entry(pid)
                .or_default()
                .push((generation, comm, frames, count));
        }
        let mut symbolizer = Symbolizer::new();
        let mut out = Vec::new();
        for (pid, stacks) in by_pid {
            let mappings = self.processes.mappings(pid);
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
                        end: fltrace_trace::StackEnd::Unknown,
                        id: id as u32,
                        generation: *generation,
                        frames: frames
                            .iter()
                            .map(|&frame| fltrace_trace::CodeAddr::new(frame))
                            .collect(),
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
        // Calls at different addresses of one line (an unrolled loop) show as one stack.
        let mut merged: Vec<Counted> = Vec::new();
        let mut index: HashMap<(u32, String, Vec<String>), usize> = HashMap::new();
        for c in out {
            let shown = (
                c.pid,
                c.comm.clone(),
                c.frames.iter().map(frame_text).collect(),
            );
            match index.get(&shown) {
                Some(&i) => merged[i].count += c.count,
                None => {
                    index.insert(shown, merged.len());
                    merged.push(c);
                }
            }
        }
        merged.sort_by(|a, b| a.count.cmp(&b.count).then(a.pid.cmp(&b.pid)));
        merged
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
            processes: Processes::default(),
            counts: HashMap::new(),
            dwarf: self.dwarf,
        };
        let status = self.perf_events.run(
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
                TableFormat::Table => {
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
