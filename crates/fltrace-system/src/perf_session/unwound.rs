//! The processes the perf events sees, as far as their stacks need: their mappings over their exec
//! generations (/proc/PID/maps when first seen, then the kernel's `mmap2` records, so that
//! processes that exit before the output is printed are still symbolized) and the recorder's
//! DWARF unwinder over them.

use std::collections::HashMap;

use fltrace_capture::unwind::{AddressSpaceUnwinder, ElfCache, LiveStack};
use fltrace_trace::Mapping;
use framehop::x86_64::CacheX86_64;

use crate::perf_session::{Record, Sample};

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
        // A process gone before it was read has no mappings to unwind through.
        if let Ok(mappings) = crate::procfs::mappings(pid) {
            for m in mappings {
                p.map(pid, m, elf);
            }
        }
        p
    }

    fn map(&mut self, pid: u32, mut mapping: Mapping, elf: &mut ElfCache) {
        mapping.generation = self.generation;
        if mapping.is_exec() && mapping.is_file() {
            let file = fltrace_capture::unwind::mapped_file(pid, &mapping.path);
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
            .find(|m| {
                m.generation == self.generation && m.contains(fltrace_trace::VirtAddr::new(sp))
            })
            .map_or((0, 0), |m| (m.start.get(), m.end.get()))
    }
}

/// Every process seen, followed through the events's side-band records.
#[derive(Default)]
pub struct Processes {
    procs: HashMap<u32, Proc>,
    elf: ElfCache,
}

impl Processes {
    fn proc(&mut self, pid: u32) -> &mut Proc {
        let elf = &mut self.elf;
        self.procs
            .entry(pid)
            .or_insert_with(|| Proc::from_proc(pid, elf))
    }

    /// Follows execs, forks and new mappings.
    pub fn observe(&mut self, record: &Record) {
        match record {
            Record::Comm {
                pid, exec: true, ..
            } => match self.procs.get_mut(pid) {
                Some(p) => p.exec(),
                // Its mappings follow as records.
                None => {
                    self.procs.insert(*pid, Proc::new());
                }
            },
            Record::Fork { pid, ppid, tid, .. } if pid == tid && pid != ppid => {
                let parent = self
                    .procs
                    .get(ppid)
                    .map(|p| (p.generation, p.mappings.clone(), p.unwinder.clone()));
                let child = match parent {
                    Some((generation, mappings, unwinder)) => Proc {
                        generation,
                        mappings,
                        unwinder,
                        cache: CacheX86_64::new(),
                    },
                    None => Proc::from_proc(*pid, &mut self.elf),
                };
                self.procs.insert(*pid, child);
            }
            Record::Mmap { pid, mapping, .. } => {
                let elf = &mut self.elf;
                let p = self
                    .procs
                    .entry(*pid)
                    .or_insert_with(|| Proc::from_proc(*pid, elf));
                p.map(*pid, mapping.clone(), elf);
            }
            _ => {}
        }
    }

    /// The exec generation of `pid` now, and the user stack of `sample`, innermost first:
    /// with `dwarf`, unwound from its registers and stack copy, else the kernel's
    /// frame-pointer walk (its callchain).
    pub fn user_stack(&mut self, sample: &Sample, dwarf: bool) -> (u32, Vec<u64>) {
        let p = self.proc(sample.pid);
        let frames = match sample.regs {
            Some(regs) if dwarf => {
                let mut frames = Vec::new();
                let mut live = LiveStack::new(sample.pid);
                live.reset(p.stack_bounds(regs.1));
                p.unwinder
                    .unwind(&mut p.cache, regs, &sample.stack, &mut live, &mut frames);
                frames
            }
            _ => sample.callchain.clone(),
        };
        (p.generation, frames)
    }

    /// Every mapping `pid` had, over its generations.
    pub fn mappings(&self, pid: u32) -> Vec<Mapping> {
        self.procs
            .get(&pid)
            .map(|p| p.mappings.clone())
            .unwrap_or_default()
    }
}
