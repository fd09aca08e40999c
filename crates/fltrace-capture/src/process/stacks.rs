//! A fault's stack: unwound from its sample (and the live process, where allowed), completed
//! later for a row whose copy was empty, interned once per distinct stack, and told apart when
//! it is the preloaded tracer's own work.

use fltrace_trace::{CodeAddr, Stack, StackEnd, VirtAddr, libraries};

use super::Process;
use crate::live::LiveEvent;
use crate::unwind::{KnownFrames, StackBytes, ThreadStack, UnwindEnd};

/// A row whose stack stopped at its innermost frame for want of a copy.
pub(super) struct Uncopied {
    pub(super) row: u64,
    pub(super) ip: u64,
    /// The canonical frame address of the innermost frame.
    pub(super) cfa: u64,
}

impl Process {
    /// Completes the rows of thread `tid` whose copy was empty (`waiting`) from the thread's
    /// stack just unwound, where it holds their innermost frame's caller (counted as spliced),
    /// while the rows are still open. The others stay truncated.
    pub(super) fn complete_uncopied(
        &mut self,
        tid: u32,
        waiting: Vec<Uncopied>,
        frames: &mut Vec<u64>,
    ) -> Result<(), fltrace_trace::Error> {
        for row in waiting {
            frames.clear();
            let Some(known) = self.known.get(&tid) else {
                return Ok(());
            };
            let Some(callers) = known.callers_at(row.cfa, row.ip) else {
                continue;
            };
            frames.push(row.ip);
            frames.extend(callers);
            if !self.out.faults.is_open(row.row) {
                continue;
            }
            let (stack_id, _) = self.intern(frames, StackEnd::Complete)?;
            if self
                .out
                .faults
                .amend(row.row, |fault| fault.stack_id = stack_id)
            {
                let c = &mut self.counters;
                c.stacks_truncated -= 1;
                c.stacks_uncopied_truncated -= 1;
                c.stacks_spliced += 1;
            }
        }
        Ok(())
    }

    /// Unwinds the stack of a fault of thread `tid` into `frames` and counts how it ended.
    pub(super) fn unwind_fault(
        &mut self,
        tid: u32,
        regs: (u64, u64, u64),
        rbx: Option<u64>,
        stack: StackBytes<'_>,
        frames: &mut Vec<u64>,
    ) -> StackEnd {
        let stack_bounds = self.stack_bounds(regs.1);
        self.live.reset(stack_bounds);
        // Exact stacks (no live reads) infer nothing beyond the copy either.
        let mut exact = KnownFrames::default();
        let known = if self.live.reads() {
            self.known.entry(tid).or_default()
        } else {
            &mut exact
        };
        let spliced = known.spliced;
        let maps = &self.maps;
        let is_exec = |addr: u64| {
            let addr = VirtAddr::new(addr);
            maps.is_empty()
                || maps
                    .range(..=addr)
                    .next_back()
                    .is_some_and(|(_, m)| m.contains(addr) && m.is_exec())
        };
        let thread = ThreadStack {
            regs,
            rbx,
            stack,
            beyond: &mut self.live,
            is_exec: Some(&is_exec),
            known: &mut *known,
        };
        let unwound = self.unwinder.unwind_thread(&mut self.cache, thread, frames);
        if self.live.scanned {
            self.counters.stacks_scanned += 1;
        }

        if known.spliced != spliced {
            self.counters.stacks_spliced += 1;
        }
        // A return address outside executable memory is not one: past the loader's `_start`
        // the unwinder reads argc, and a stack that changed before its live read gives heap
        // or stack words. The stack ends before such a word instead of showing it as a frame.
        let mut cut = false;
        if !self.maps.is_empty()
            && let Some(bad) = frames.iter().skip(1).position(|&addr| {
                !self
                    .mapping_at(VirtAddr::new(addr))
                    .is_some_and(|m| m.is_exec())
            })
        {
            frames.truncate(bad + 1);
            cut = true;
        }
        // A fault with no stack copy (it grew the stack) unwound from the live stack alone
        // read a stack that has moved on since the fault: its callers and where they end are
        // stale (a zero word read as the end of the chain made postgres's `opendir_tail`
        // "complete" under a `__closedir` it was never called from). Only its own frame is
        // known; `complete_uncopied` may give it its callers later.
        if stack.is_empty() && self.live.used && frames.len() > 1 {
            frames.truncate(1);
            cut = true;
        }
        let end = classify(unwound, cut, frames, &self.entries);
        if self.live.reads()
            && let Some(known) = self.known.get_mut(&tid)
        {
            known.settle(end == StackEnd::Complete);
        }
        if end == StackEnd::Truncated {
            self.counters.stacks_truncated += 1;
            self.counters.stacks_unverified += u64::from(self.live.unverified);
        }
        if stack.is_empty() {
            self.counters.stacks_uncopied += 1;
            if end == StackEnd::Truncated {
                self.counters.stacks_uncopied_truncated += 1;
            }
        }
        if self.live.used {
            self.counters.stacks_extended += 1;
        }
        if stack.holes.bytes() > 0 {
            self.counters.stacks_holes += 1;
        }
        end
    }

    /// The id of the stack `frames` and whether it is the tracer's, writing it the first time.
    pub(super) fn intern(
        &mut self,
        frames: &mut Vec<u64>,
        end: StackEnd,
    ) -> Result<(u32, bool), fltrace_trace::Error> {
        // The same frames may end complete once and truncated another time (a live read that
        // failed): each is a stack of its own.
        let key = u64::from(self.generation) | u64::from(end.code()) << 32;
        frames.push(key);
        if let Some(&known) = self.out.interner.get(frames.as_slice()) {
            frames.pop();
            return Ok(known);
        }
        let id = self.out.next_stack_id;
        self.out.next_stack_id += 1;
        frames.pop();
        let tracer = self.tracer_stack(frames);
        frames.push(key);
        self.out.interner.insert(frames.clone(), (id, tracer));
        frames.pop();
        self.note_code_hits(frames);
        let stack = Stack {
            end,
            id,
            generation: self.generation,
            // The unwinder's output: instruction and return addresses.
            frames: frames.iter().map(|&frame| CodeAddr::new(frame)).collect(),
        };
        let pid = self.pid;
        self.tell(|| LiveEvent::Stack {
            pid,
            stack: stack.clone(),
        });
        self.out.stacks.push(stack)?;
        Ok((id, tracer))
    }

    /// Notes the code files a new stack's frames are in: only files with frames are kept in
    /// the build-ID cache. Once per distinct stack, not per fault.
    fn note_code_hits(&mut self, frames: &[u64]) {
        let Some(hits) = &self.code_hits else {
            return;
        };
        let mut last: Option<(VirtAddr, VirtAddr)> = None;
        let mut new: Vec<String> = Vec::new();
        for (i, &frame) in frames.iter().enumerate() {
            let at = VirtAddr::new(if i == 0 { frame } else { frame.wrapping_sub(1) });
            // Frames run in the same file: skip the look-up while they stay in one mapping.
            if last.is_some_and(|(start, end)| start <= at && at < end) {
                continue;
            }
            let Some(mapping) = self.mapping_at(at) else {
                continue;
            };
            last = Some((mapping.start, mapping.end));
            if mapping.is_file()
                && mapping.is_exec()
                && !mapping.build_id.is_empty()
                && !hits.contains(&mapping.build_id)
                && !new.contains(&mapping.build_id)
            {
                new.push(mapping.build_id.clone());
            }
        }
        if let Some(hits) = &mut self.code_hits {
            hits.extend(new.iter().cloned());
        }
        self.new_code_hits.append(&mut new);
    }

    /// The build IDs of code files with frames found since the last call.
    pub fn take_code_hits(&mut self) -> Vec<String> {
        std::mem::take(&mut self.new_code_hits)
    }

    /// Whether a fault with this stack (innermost first) was taken by the preloaded
    /// library's own work (the allocation tracer unwinding, logging, using its private heap)
    /// rather than on the program's behalf. Going outwards past the C runtime, the first
    /// other frame decides: code of the preloaded library that touched memory itself, or
    /// called the C library, is the tracer's, except its interposers (`malloc`...) calling
    /// the C library's allocator for the program.
    fn tracer_stack(&self, frames: &[u64]) -> bool {
        if self.interposers.is_empty() {
            return false;
        }
        for (i, &frame) in frames.iter().enumerate() {
            // Return addresses point after the call.
            let at = if i == 0 { frame } else { frame.wrapping_sub(1) };
            let Some(mapping) = self.mapping_at(VirtAddr::new(at)) else {
                return false;
            };
            if libraries::is_c_runtime(&mapping.path) {
                continue;
            }
            if !libraries::is_preload(&mapping.path) {
                return false;
            }
            if i == 0 {
                return true;
            }
            // The C library was called from the preloaded library: on the program's behalf
            // when the program called into it (an interposed `malloc` reaches the C library's
            // through the backing and next-allocator layers, which a tail call may leave
            // without a frame in the exported function), else the tracer's own work (its
            // threads start in the C runtime).
            let caller = frames[i..].iter().map(|&f| f.wrapping_sub(1)).find(|&at| {
                !self
                    .mapping_at(VirtAddr::new(at))
                    .is_some_and(|m| libraries::is_preload(&m.path))
            });
            let called_by_program = caller.is_some_and(|at| {
                self.mapping_at(VirtAddr::new(at))
                    .is_some_and(|m| !libraries::is_c_runtime(&m.path))
            });
            let in_interposer = frames[i..].iter().any(|&f| {
                self.interposers
                    .iter()
                    .any(|r| r.contains(&f.wrapping_sub(1)))
            });
            return !(called_by_program || in_interposer);
        }
        false
    }
}

/// The bytes of entry code after an ELF entry point that a return address of a complete stack
/// may point into: the dynamic loader's `_start` and `_dl_start_user` (61 bytes in glibc 2.41,
/// which call `_dl_start` and `_dl_init`) and crt1's `_start` (38 bytes, which calls
/// `__libc_start_main`).
pub(super) const ENTRY_CODE: u64 = 64;

/// Whether a stack reaches its thread's entry. It does when the unwinder found no caller
/// beyond the outermost frame (the CFI of glibc's `_start` and of the `clone`/`clone3` child
/// marks the return address undefined, and a zero return address ends a frame-pointer chain),
/// or when the outermost frame is in an ELF entry's code (the loader's `_start` has no such
/// mark: the unwinder goes on into argc, which the caller cut). Any other end is a truncation:
/// the stack copy ran out, an unwind rule failed mid-stack, a word was no return address, or
/// the frame limit ([`crate::unwind::MAX_FRAMES`]) was reached.
pub(super) fn classify(unwound: UnwindEnd, cut: bool, frames: &[u64], entries: &[u64]) -> StackEnd {
    let in_entry = frames.last().is_some_and(|&outermost| {
        entries
            .iter()
            .any(|&entry| (entry..entry + ENTRY_CODE).contains(&outermost))
    });
    let ended = unwound == UnwindEnd::Complete && !cut;
    if in_entry || ended {
        StackEnd::Complete
    } else {
        StackEnd::Truncated
    }
}
