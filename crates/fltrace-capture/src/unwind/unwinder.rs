//! The unwinder of one address space: framehop's CFI steps over a sample's stack copy, each
//! return address checked ([`super::caller_search`]), signal frames stepped through, and the
//! stack completed from the thread's previous unwind or the live process.

use std::ops::Range;
use std::path::Path;
use std::sync::Arc;

use framehop::x86_64::{CacheX86_64, UnwindRegsX86_64, UnwinderX86_64};
use framehop::{FrameAddress, Module, Unwinder as _};

use fltrace_trace::Mapping;

use super::calls::{self, CallBefore};
use super::elf_cache::{ElfCache, ElfFile, SectionBytes};
use super::known_frames::{KnownFrame, KnownFrames, Undo};
use super::live_stack::LiveStack;
use super::stack_copy::StackBytes;

/// Why an unwind stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UnwindEnd {
    /// It reached the outermost frame.
    Complete,
    /// It could not go further: the stack copy ended and the live stack could not be read.
    Truncated,
    /// framehop stopped without recognising an outermost frame, with all the stack it asked
    /// for (common at `_start` and in hand-written assembly; not a lack of stack bytes).
    Stopped,
}

/// The unwinder of one address space.
#[derive(Clone, Default)]
pub struct AddressSpaceUnwinder {
    pub(super) unwinder: UnwinderX86_64<SectionBytes>,
    /// The executable mappings' bytes, by address range, to recognise signal trampolines.
    pub(super) code: Vec<MappedCode>,
    /// ELF entry points: no caller is searched for beyond their code.
    pub(super) entries: Vec<u64>,
    /// Whether the JIT code of this address space keeps no frame-pointer chain.
    pub(super) untrusted_jit: bool,
}

/// The file behind one executable mapping.
#[derive(Clone)]
pub(super) struct MappedCode {
    pub(super) range: Range<u64>,
    pub(super) elf: Arc<ElfFile>,
    /// The file offset of `range.start`.
    pub(super) offset: u64,
    /// What to add to a file address (svma) to get its address in the process.
    pub(super) bias: u64,
}

impl MappedCode {
    pub(super) fn bytes_at(&self, addr: u64, len: usize) -> Option<&[u8]> {
        let start = usize::try_from(addr.checked_sub(self.range.start)? + self.offset).ok()?;
        self.elf.file.get(start..start.checked_add(len)?)
    }

    /// The file address of `addr`.
    pub(super) fn svma(&self, addr: u64) -> u64 {
        addr.wrapping_sub(self.bias)
    }
}

/// What the call before a return address says about it being its callee frame's caller.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Verdict {
    /// A direct call to the function the callee frame runs in (or to its PLT stub).
    Verified,
    /// A call whose target the code does not say (through a register or memory, or in code
    /// whose bytes the recorder does not have, JIT code): it may be the caller.
    Weak,
    /// A direct call to a PLT stub whose lazy binding leads through PLT0 to the dynamic
    /// loader's resolver, the function the callee frame runs in: verified if the call left
    /// what the PLT pushes below the return address.
    Lazy(LazyCall),
    /// A direct call to another function: a stale word, or a frame skipped.
    Contradicted,
    /// No call precedes it: no return address at all.
    NotCall,
}

/// What a call through a lazy PLT entry leaves below its return address for the resolver.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct LazyCall {
    /// The relocation index (`push $n`), just below the return address.
    pub(super) index: u64,
    /// The GOT slot holding the object's link map (PLT0's `push GOT+8`), whose word is 16
    /// bytes below the return address.
    pub(super) link_map: u64,
}

/// x86-64 `rt_sigreturn` trampoline, `mov $15,%rax; syscall`: the return address of every signal
/// handler (glibc's `__restore_rt`, musl's `__restore_rt`), recognised by its bytes as libgcc
/// does, since its CFI is DWARF expressions framehop does not evaluate.
pub(super) const SIGRETURN: [u8; 9] = [0x48, 0xc7, 0xc0, 0x0f, 0x00, 0x00, 0x00, 0x0f, 0x05];

/// Where the interrupted registers are once a handler has returned to the trampoline: the
/// stack pointer is at the `struct ucontext` of the kernel's `rt_sigframe`, whose
/// `uc_mcontext.gregs` start 40 bytes in (after `uc_flags`, `uc_link`, `uc_stack`).
pub(super) const UCONTEXT_GREGS: u64 = 40;
pub(super) const REG_RBP: u64 = 10;
pub(super) const REG_RBX: u64 = 11;
pub(super) const REG_RSP: u64 = 15;
pub(super) const REG_RIP: u64 = 16;

/// How far above a frame's stack pointer a caller is searched for: past the register and
/// vector state `_dl_runtime_resolve_xsavec` saves (up to 2.7 KiB with AVX-512).
pub(super) const SCAN_SPAN: u64 = 4096;

/// The bytes of entry code after an ELF entry point (the loader's `_start` and
/// `_dl_start_user`, crt1's `_start`), as the recorder's `classify` counts them.
pub(super) const ENTRY_CODE: u64 = 64;

/// A direct call verified as entering the function that holds a callee's pc lies at most this
/// far below it (the largest functions of cc1plus are a few hundred KiB).
pub(super) const MAX_FUNCTION: u64 = 16 << 20;

/// Frames beyond this are dropped (a runaway corrupt stack). Deep enough for recursive
/// programs (compilers instantiating templates, a 2,000-deep recursion).
pub const MAX_FRAMES: usize = 4096;

impl AddressSpaceUnwinder {
    /// Adds an executable mapping; `file` is where its bytes can be read (the mapping's
    /// path, possibly seen through `/proc/PID/root`).
    pub fn add_mapping(&mut self, cache: &mut ElfCache, mapping: &Mapping, file: &Path) {
        let Some(elf) = cache.get(file) else {
            return;
        };
        let Some(bias) = elf.bias(mapping.start.get(), mapping.pgoff.get()) else {
            return;
        };
        let module = Module::new(
            mapping.path.clone(),
            mapping.start.get()..mapping.end.get(),
            bias,
            elf.section_info(),
        );
        self.unwinder.add_module(module);
        let range = mapping.start.get()..mapping.end.get();
        self.code
            .retain(|c| c.range.end <= range.start || range.end <= c.range.start);
        let at = self.code.partition_point(|c| c.range.start < range.start);
        self.code.insert(
            at,
            MappedCode {
                range,
                elf,
                offset: mapping.pgoff.get(),
                bias,
            },
        );
    }

    /// Whether `addr` is the start of a signal return trampoline.
    pub(super) fn is_sigreturn(&self, addr: u64) -> bool {
        let at = self.code.partition_point(|c| c.range.start <= addr);
        at > 0
            && self.code[at - 1].range.contains(&addr)
            && self.code[at - 1].bytes_at(addr, SIGRETURN.len()) == Some(&SIGRETURN[..])
    }

    /// Notes an ELF entry point: the unwinder does not search the stack for a caller of its
    /// code (above the loader's `_start` are argc, argv and the auxiliary vector).
    pub fn add_entry(&mut self, entry: u64) {
        self.entries.push(entry);
    }

    /// Says that the JIT code (executable memory outside ELF files) of this address space
    /// keeps no frame-pointer chain: stacks stop at its frames, truncated.
    pub fn distrust_jit(&mut self) {
        self.untrusted_jit = true;
    }

    /// The mapped ELF file holding `addr`.
    pub(super) fn code_at(&self, addr: u64) -> Option<&MappedCode> {
        let at = self.code.partition_point(|c| c.range.start <= addr);
        self.code
            .get(at.checked_sub(1)?)
            .filter(|c| c.range.contains(&addr))
    }

    /// The call instruction before return address `ra`, in a mapped ELF file; `None` where
    /// the code's bytes are unknown (JIT code, memory no mapping record told of).
    pub(super) fn call_kind(&self, ra: u64) -> Option<CallBefore> {
        let code = self.code_at(ra)?;
        let start = ra.checked_sub(7)?.max(code.range.start);
        let bytes = code.bytes_at(start, (ra - start) as usize)?;
        Some(calls::call_before(bytes, ra))
    }

    /// Whether `addr` follows a call instruction in a mapped ELF file: `Some(false)` for a
    /// word that cannot be a return address there, `None` where the bytes are unknown (JIT
    /// code in anonymous memory).
    pub(super) fn after_call(&self, addr: u64) -> Option<bool> {
        self.call_kind(addr).map(|kind| kind != CallBefore::NotCall)
    }

    /// Whether CFI covers `pc` (else framehop unwinds its frame by the frame pointer).
    pub(super) fn has_cfi(&self, pc: u64) -> bool {
        self.code_at(pc)
            .is_some_and(|code| code.elf.functions().has_cfi(code.svma(pc)))
    }

    /// The canonical frame address of the innermost frame at `regs` (the stack pointer its
    /// caller resumes with), from its unwind rule alone: no stack word is read.
    pub fn frame_cfa(&self, cache: &mut CacheX86_64, (ip, sp, bp): (u64, u64, u64)) -> Option<u64> {
        let mut probe = UnwindRegsX86_64::new(ip, sp, bp);
        match self.unwinder.unwind_frame(
            FrameAddress::InstructionPointer(ip),
            &mut probe,
            cache,
            &mut |_| Ok(1),
        ) {
            Ok(Some(_)) => Some(probe.sp()),
            _ => None,
        }
    }

    /// Whether `addr` lies in the code of an ELF entry point (`_start`).
    pub(super) fn in_entry_code(&self, addr: u64) -> bool {
        self.entries
            .iter()
            .any(|&entry| (entry..entry + ENTRY_CODE).contains(&addr))
    }

    /// Unwinds from the sampled registers over the sampled stack bytes (which start at `sp`),
    /// appending frame addresses to `frames`, innermost first. Words beyond the copy are read
    /// from `beyond` (the live process).
    pub fn unwind(
        &self,
        cache: &mut CacheX86_64,
        regs: (u64, u64, u64),
        stack: &[u8],
        beyond: &mut LiveStack,
        frames: &mut Vec<u64>,
    ) -> UnwindEnd {
        let mut known = KnownFrames::default();
        let thread = ThreadStack {
            regs,
            rbx: None,
            stack: StackBytes::from(stack),
            beyond,
            is_exec: None,
            known: &mut known,
        };
        self.unwind_thread(cache, thread, frames)
    }

    /// Whether `addr` lies in an executable file mapping.
    pub(super) fn in_code(&self, addr: u64) -> bool {
        let at = self.code.partition_point(|c| c.range.start <= addr);
        at > 0 && self.code[at - 1].range.contains(&addr)
    }

    /// Unwinds from the sampled registers over the sampled stack bytes (which start at `sp`),
    /// appending frame addresses to `frames`, innermost first. Where the copy ends, the outer
    /// frames come from the thread's previous complete unwind (`known`) if the stack still
    /// holds the same frame at the same address and the live stack does not contradict the
    /// frames outside it, else from `beyond` (the live process). `known` then holds this
    /// unwind's frames, until [`KnownFrames::settle`] says whether they made a complete stack.
    /// Where a rule gives no return address (`is_exec` says whether an address is executable,
    /// JIT code included), the caller is searched for on the stack ([`LiveStack::scanned`]).
    pub fn unwind_thread(
        &self,
        cache: &mut CacheX86_64,
        thread: ThreadStack<'_, '_>,
        frames: &mut Vec<u64>,
    ) -> UnwindEnd {
        let (ip, sp, bp) = thread.regs;
        frames.push(ip);
        thread.known.fresh.clear();
        let mut walk = Walk {
            reads: StackReads {
                sp,
                stack: thread.stack,
                live: false,
                ran_out: false,
            },
            beyond: thread.beyond,
            is_exec: thread.is_exec,
            known: thread.known,
            frames,
            regs: UnwindRegsX86_64::new(ip, sp, bp),
            rbx: thread.rbx,
            address: FrameAddress::InstructionPointer(ip),
            inner: None,
            bp_uncertain: false,
            joined: None,
            contradicted: None,
        };
        let finished = loop {
            if let Some(finished) = self.step(cache, &mut walk) {
                break finished;
            }
        };
        walk.end(self, finished)
    }

    /// Unwinds one frame of `walk` outwards: `None` to go on, else whether the stack ended
    /// at its outermost frame.
    pub(super) fn step(&self, cache: &mut CacheX86_64, walk: &mut Walk<'_, '_>) -> Option<bool> {
        if walk.frames.len() >= MAX_FRAMES {
            return Some(false);
        }
        // Past the copy, frames read from the live process may lead back onto the
        // previous unwind's: from there on, that one's frames are taken.
        if walk.reads.live
            && let FrameAddress::ReturnAddress(ra) = walk.address
            && let Some(at) = walk.known.find(ra.get(), walk.regs.sp())
            && walk.join_at(at)
        {
            return Some(true);
        }
        if let FrameAddress::ReturnAddress(ra) = walk.address
            && self.is_sigreturn(ra.get())
        {
            return walk.enter_interrupted();
        }
        // JIT code that keeps no frame chain (HotSpot without -XX:+PreserveFramePointer):
        // nothing says where its caller is, so the stack ends at its frame.
        if self.untrusted_jit
            && let Some(is_exec) = walk.is_exec
            && self.code_at(walk.address.address()).is_none()
            && is_exec(walk.address.address())
        {
            walk.beyond.unverified = true;
            return Some(false);
        }
        let before = walk.regs;
        let failed_before = walk.beyond.failed;
        let mut step = self
            .unwinder
            .unwind_frame(walk.address, &mut walk.regs, cache, &mut |a| {
                walk.reads.word(walk.beyond, a)
            });
        if std::mem::take(&mut walk.reads.ran_out) && !walk.reads.live {
            // The copy ended inside this frame. If the previous unwind of this thread
            // had the same return address at the same stack address, the frames outside
            // it are the same calls (a frame is only replaced by returning from it): take
            // them from there, as the live stack may have moved on or be gone.
            if let FrameAddress::ReturnAddress(ra) = walk.address
                && let Some(at) = walk.known.find(ra.get(), before.sp())
                && walk.join_at(at)
            {
                return Some(true);
            }
            // The same frame at the same stack address, stopped at another call in it (a
            // frame larger than the copy, as postgres's `heap_multi_insert`, whose every
            // stack needs the frames outside it): the same activation if the code address
            // gives the frame the same size, and its callers are the same.
            if let FrameAddress::ReturnAddress(ra) = walk.address
                && let Some(at) = walk.known.at_sp(before.sp())
                && self.same_frame(cache, &before, ra.get(), walk.known.frames[at].addr)
                && walk.join_at(at)
            {
                return Some(true);
            }
            walk.reads.live = true;
            walk.regs = before;
            step = self
                .unwinder
                .unwind_frame(walk.address, &mut walk.regs, cache, &mut |a| {
                    walk.reads.word(walk.beyond, a)
                });
        }
        let callee_pc = walk.address.address_for_lookup();
        let implausible = self.implausible(cache, walk, &step, &before);
        // Only over the copy: past it the live stack may have moved on since the fault, and
        // a word that is no return address there says so, not that the CFI is missing.
        let stack_ended = walk.beyond.failed && !failed_before;
        if implausible && !stack_ended && !self.in_entry_code(walk.address.address()) {
            match self.search_caller(cache, walk, &before, callee_pc) {
                Some((caller, bp_known, scanned)) => {
                    walk.regs = caller;
                    step = Ok(Some(caller.ip()));
                    walk.beyond.scanned |= scanned;
                    walk.bp_uncertain = !bp_known;
                }
                None => {
                    // No caller that can be shown to be one: the stack ends here,
                    // truncated, rather than with a guess.
                    log::debug!(
                        "stack cut at {callee_pc:#x} (sp {:#x} bp {:#x}): {step:x?} unverified",
                        before.sp(),
                        before.bp()
                    );
                    walk.beyond.unverified = true;
                    return Some(false);
                }
            }
        } else if walk.bp_uncertain && matches!(step, Ok(Some(_))) {
            walk.bp_uncertain = !self.bp_use(cache, walk.address, &before).1;
        }
        match step {
            Ok(Some(ra)) => match FrameAddress::from_return_address(ra) {
                Some(next) => {
                    walk.inner = Some(walk.address);
                    walk.address = next;
                    walk.frames.push(ra);
                    walk.known.fresh.push(KnownFrame::new(ra, &walk.regs, true));
                    None
                }
                None => Some(false),
            },
            // An end the CFI marks (`_start`, `clone3`'s child) reads no return address:
            // the same rule over any stack words ends again. A zero word read where a
            // return address should be (a live stack that moved on, stale words) is no
            // end, nor is any end of a stack found by searching: only an entry's code
            // makes those complete.
            Ok(None) => {
                let mut probe = before;
                let marked = matches!(
                    self.unwinder
                        .unwind_frame(walk.address, &mut probe, cache, &mut |_| Ok(1)),
                    Ok(None)
                );
                Some(marked && !walk.beyond.scanned)
            }
            Err(_) => Some(false),
        }
    }

    /// Whether the return address `step` took from the frame at `before` cannot be taken.
    /// A rule that failed or gave a word that is no return address (not executable, or in an
    /// ELF file but not after a call) is not; nor, in code without CFI (JIT code, V8's
    /// builtins, hand-written assembly), whose frame framehop finds by its frame pointer as
    /// perf -g does, a chain that is no chain (`bp` below the frame, beyond the stack, or
    /// unknown since a caller was searched for) or leads to a call of another function (the
    /// code keeps no frame pointer: frames were skipped); nor, where `bp` is unknown, a CFI
    /// rule that reads it unless the call is verified. Where a step cannot be taken, the
    /// caller is searched for on the stack, and taken only verified.
    /// No check where the mappings may be stale (`is_exec` None: memleak and the system
    /// tools know only the mappings at attach, and a library loaded later would look like no
    /// code at all).
    pub(super) fn implausible(
        &self,
        cache: &mut CacheX86_64,
        walk: &mut Walk<'_, '_>,
        step: &Result<Option<u64>, framehop::Error>,
        before: &UnwindRegsX86_64,
    ) -> bool {
        let Some(is_exec) = walk.is_exec else {
            return false;
        };
        let address = walk.address;
        let callee_pc = address.address_for_lookup();
        let live = walk.reads.live;
        let stack_end = match walk.beyond.bounds {
            (_, 0) => walk.reads.sp.saturating_add(walk.reads.stack.len() as u64),
            (_, end) => end,
        };
        match *step {
            Ok(Some(ra)) => {
                let no_cfi = !self.has_cfi(callee_pc);
                let reads_bp = walk.bp_uncertain && self.bp_use(cache, address, before).0;
                let by_frame_pointer = walk.regs.sp() == before.bp().wrapping_add(16);
                if !is_exec(ra) || by_frame_pointer && !no_cfi && self.cfa_on_rbx(callee_pc) {
                    true
                } else if self.is_sigreturn(ra) {
                    false
                } else if !no_cfi && !reads_bp && !live {
                    self.after_call(ra) == Some(false)
                } else if no_cfi
                    && walk.regs.sp() == before.bp().wrapping_add(16)
                    && (walk.bp_uncertain
                        || before.bp() < before.sp()
                        || walk.regs.sp() > stack_end)
                {
                    true
                } else {
                    // Past the copy too: the live stack may have moved on since the fault,
                    // and a word of a later call there must not pass for this frame's
                    // caller.
                    match self.verify_caller(ra, callee_pc, walk.beyond) {
                        // Where the CFI placed it: the resolver's caller.
                        Verdict::Verified | Verdict::Lazy(_) => false,
                        Verdict::Weak => reads_bp,
                        Verdict::Contradicted | Verdict::NotCall => true,
                    }
                }
            }
            // The frame-pointer rule (code without CFI) ends at a zero `rbp` as if at an
            // outermost frame; an end the CFI marks does not depend on `rbp`.
            Ok(None) if before.bp() == 0 && !live && !self.in_entry_code(address.address()) => {
                let mut probe = *before;
                probe.set_bp(before.sp());
                let probed = self
                    .unwinder
                    .unwind_frame(address, &mut probe, cache, &mut |a| {
                        walk.reads.word(walk.beyond, a)
                    });
                walk.reads.ran_out = false;
                !matches!(probed, Ok(None))
            }
            Ok(None) => false,
            Err(_) => true,
        }
    }

    /// The caller of the frame at `before` whose step could not be taken: by the `rbx` the
    /// dynamic loader's resolver keeps its CFA in, else searched for on the stack copy;
    /// with whether `bp` is known there and whether it was searched for. Not for JIT code:
    /// where its chain fails, nothing says how large its frame is or which stale words lie
    /// in it; nor past the copy.
    pub(super) fn search_caller(
        &self,
        cache: &mut CacheX86_64,
        walk: &mut Walk<'_, '_>,
        before: &UnwindRegsX86_64,
        callee_pc: u64,
    ) -> Option<(UnwindRegsX86_64, bool, bool)> {
        let (sp, stack) = (walk.reads.sp, walk.reads.stack);
        let copy_end = sp.saturating_add(stack.len() as u64);
        let mut read = |addr: u64| -> Option<u64> { stack.word(addr.checked_sub(sp)?).ok() };
        let is_exec = walk.is_exec?;
        if walk.reads.live || self.code_at(callee_pc).is_none() {
            return None;
        }
        let by_rbx = self.caller_by_saved_rbx(
            walk.address,
            (walk.inner, before.sp()),
            walk.rbx,
            before,
            &mut read,
            is_exec,
            walk.beyond,
        );
        match by_rbx {
            Some(caller) => Some((caller, !walk.bp_uncertain, false)),
            None => self
                .scan_for_caller(
                    cache,
                    before,
                    callee_pc,
                    copy_end,
                    &mut read,
                    is_exec,
                    walk.beyond,
                )
                .map(|(caller, bp_known)| (caller, bp_known, true)),
        }
    }
}

/// One stack to unwind: a thread's registers and stack copy at a fault, and what may complete
/// it ([`AddressSpaceUnwinder::unwind_thread`]).
pub struct ThreadStack<'s, 'a> {
    /// The instruction, stack and frame pointers.
    pub regs: (u64, u64, u64),
    /// `rbx` at the fault, when the record holds it: the CFA of the dynamic loader's
    /// resolver, should the fault be in it.
    pub rbx: Option<u64>,
    /// The copy of the user stack from the stack pointer up, and the pages it skipped.
    pub stack: StackBytes<'a>,
    /// Where words beyond the copy are read: the live process.
    pub beyond: &'s mut LiveStack,
    /// Whether an address is executable, JIT code included; `None` where the mappings may
    /// be stale, and no return address is then checked.
    pub is_exec: Option<&'s dyn Fn(u64) -> bool>,
    /// The thread's previous unwind, to complete this one from; it holds this one's frames
    /// after.
    pub known: &'s mut KnownFrames,
}

/// Where an unwind reads the stack's words: the copy, then, once `live` is set, the live
/// process.
pub(super) struct StackReads<'a> {
    /// The stack pointer the copy starts at.
    pub(super) sp: u64,
    pub(super) stack: StackBytes<'a>,
    /// Whether words beyond the copy are read from the live process: first the previous
    /// unwind's frames are tried.
    pub(super) live: bool,
    /// Whether a read went past the copy before `live` was set.
    pub(super) ran_out: bool,
}

impl StackReads<'_> {
    pub(super) fn word(&mut self, beyond: &mut LiveStack, addr: u64) -> Result<u64, ()> {
        let offset = addr.checked_sub(self.sp).ok_or(())?;
        match self.stack.word(offset) {
            Ok(word) => Ok(word),
            // A page the copy could not read was never touched: no frame is there, and
            // the live stack would have other words by now.
            Err(false) => Err(()),
            Err(true) if self.live => beyond.read(addr).ok_or(()),
            Err(true) => {
                self.ran_out = true;
                Err(())
            }
        }
    }
}

/// One unwind in progress ([`AddressSpaceUnwinder::unwind_thread`]): where it is, what it
/// reads, and where it joined the thread's previous unwind.
pub(super) struct Walk<'w, 'a> {
    pub(super) reads: StackReads<'a>,
    pub(super) beyond: &'w mut LiveStack,
    pub(super) is_exec: Option<&'w dyn Fn(u64) -> bool>,
    pub(super) known: &'w mut KnownFrames,
    pub(super) frames: &'w mut Vec<u64>,
    pub(super) regs: UnwindRegsX86_64,
    /// `rbx` of the innermost frame of the registers being unwound: the fault's, or those a
    /// signal frame saved.
    pub(super) rbx: Option<u64>,
    pub(super) address: FrameAddress,
    /// The frame unwound before this one (its callee), whose CFA is this one's `sp`.
    pub(super) inner: Option<FrameAddress>,
    /// Whether `regs.bp()` may not be the frame's (a caller found by searching the stack
    /// keeps its callee's, which that code may have changed).
    pub(super) bp_uncertain: bool,
    /// Where this unwind joined the previous one: the index in `known.frames` of the frame
    /// both share.
    pub(super) joined: Option<usize>,
    /// A join the live stack contradicted (another caller where the previous unwind had
    /// one): taken unless the live stack leads back onto the previous one further out, as a
    /// thread that has moved on since the fault contradicts it too.
    pub(super) contradicted: Option<Contradicted>,
}

impl Walk<'_, '_> {
    /// Joins the previous unwind at its frame `at`, unless the live stack contradicts it
    /// (noted, to return to).
    pub(super) fn join_at(&mut self, at: usize) -> bool {
        if self.known.agrees(at, self.beyond) {
            self.joined = Some(at);
            return true;
        }
        self.contradicted.get_or_insert(Contradicted {
            at,
            frames: self.frames.len(),
            used: self.beyond.used,
            failed: self.beyond.failed,
        });
        false
    }

    /// A handler returned here: goes on in the interrupted code, whose registers the kernel
    /// saved in the signal frame. Its address is where it was interrupted, not a return
    /// address. `Some(false)` where they cannot be read.
    pub(super) fn enter_interrupted(&mut self) -> Option<bool> {
        let gregs = self.regs.sp().wrapping_add(UCONTEXT_GREGS);
        let was_live = std::mem::replace(&mut self.reads.live, true);
        let saved = (
            self.reads.word(self.beyond, gregs + REG_RIP * 8),
            self.reads.word(self.beyond, gregs + REG_RSP * 8),
            self.reads.word(self.beyond, gregs + REG_RBP * 8),
        );
        self.rbx = self.reads.word(self.beyond, gregs + REG_RBX * 8).ok();
        self.reads.live = was_live;
        let (Ok(rip), Ok(rsp), Ok(rbp)) = saved else {
            return Some(false);
        };
        self.regs = UnwindRegsX86_64::new(rip, rsp, rbp);
        self.address = FrameAddress::InstructionPointer(rip);
        self.inner = None;
        self.frames.push(rip);
        self.known
            .fresh
            .push(KnownFrame::new(rip, &self.regs, false));
        None
    }

    /// How the unwind ended (`finished`: at its outermost frame), with the previous unwind's
    /// frames added where it joined them, and `known` holding this one's.
    pub(super) fn end(self, unwinder: &AddressSpaceUnwinder, mut finished: bool) -> UnwindEnd {
        let Walk {
            beyond,
            known,
            frames,
            mut joined,
            contradicted,
            ..
        } = self;
        // The live stack is taken only where it leads back onto the previous stack's outer
        // frames (the two paths meet again, at `main` if nowhere else) through code: a live
        // stack that ends elsewhere has moved on since the fault, and its words are no longer
        // this fault's frames.
        if let Some(fallback) = contradicted
            && (joined.is_none()
                || !frames[fallback.frames..]
                    .iter()
                    .all(|&addr| unwinder.in_code(addr)))
        {
            frames.truncate(fallback.frames);
            known.fresh.truncate(fallback.frames - 1);
            beyond.used = fallback.used;
            beyond.failed = fallback.failed;
            joined = Some(fallback.at);
            finished = true;
        }
        let mut end = match (finished, beyond.failed || beyond.unverified) {
            (true, _) => UnwindEnd::Complete,
            (false, true) => UnwindEnd::Truncated,
            (false, false) => UnwindEnd::Stopped,
        };
        match joined {
            Some(at) => {
                // The shared frame and everything outside it stay; this unwind's own frames
                // replace the previous inner ones, kept aside until the stack is settled.
                let keep = at + 1;
                known.replaced.clear();
                known.replaced.extend(known.frames.drain(keep..));
                known.undo = Undo::Rejoin { keep };
                // The shared frame is this unwind's last.
                known.fresh.pop();
                let room = MAX_FRAMES.saturating_sub(frames.len());
                frames.extend(known.frames.iter().rev().skip(1).take(room).map(|f| f.addr));
                end = if frames.len() >= MAX_FRAMES {
                    UnwindEnd::Truncated
                } else {
                    known.end
                };
                known.frames.extend(known.fresh.drain(..).rev());
                known.spliced += 1;
            }
            None => {
                std::mem::swap(&mut known.frames, &mut known.replaced);
                known.undo = Undo::Replace {
                    end: known.end,
                    complete: known.complete,
                };
                known.frames.clear();
                known.frames.extend(known.fresh.drain(..).rev());
                known.end = end;
                known.complete = end == UnwindEnd::Complete;
            }
        }
        end
    }
}

/// A join with the previous unwind that the live stack contradicted, and the state of the
/// unwind at that point, to return to.
#[derive(Debug, Clone, Copy)]
pub(super) struct Contradicted {
    pub(super) at: usize,
    /// `frames.len()` then, the shared frame last.
    pub(super) frames: usize,
    pub(super) used: bool,
    pub(super) failed: bool,
}
