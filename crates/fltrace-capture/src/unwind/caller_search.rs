//! Whether a return address is its callee frame's caller (by the call before it, through PLT
//! stubs and the lazy resolver), and where a caller is found when a step cannot be taken: by
//! the resolver's saved `rbx`, or by searching the stack.

use framehop::x86_64::{CacheX86_64, UnwindRegsX86_64};
use framehop::{FrameAddress, Unwinder as _};

use std::sync::Arc;

use super::calls::{self, CallBefore, PltJump};
use super::live_stack::LiveStack;
use super::unwinder::{AddressSpaceUnwinder, LazyCall, MAX_FUNCTION, SCAN_SPAN, Verdict};

impl AddressSpaceUnwinder {
    /// Whether return address `ra` can be the caller of a frame running at `callee_pc`: the
    /// call before it is a direct call to the function holding `callee_pc` (or to a PLT stub
    /// that leads there), a call whose target is not in the code, or neither.
    pub(super) fn verify_caller(&self, ra: u64, callee_pc: u64, live: &mut LiveStack) -> Verdict {
        match self.call_kind(ra) {
            None | Some(CallBefore::Indirect) => Verdict::Weak,
            Some(CallBefore::NotCall) => Verdict::NotCall,
            Some(CallBefore::Direct(target)) => self.call_reaches(target, callee_pc, live),
        }
    }

    /// Whether a direct call to `target` enters the function holding `callee_pc`, following
    /// PLT stubs through their GOT slots (read from the live process, or by the slot's symbol
    /// name where the slot cannot be read). A call through a slot bound since (lazy binding)
    /// went the way the file's word in the slot leads: back into the PLT, through PLT0 to the
    /// dynamic loader's resolver ([`Verdict::Lazy`]).
    pub(super) fn call_reaches(
        &self,
        target: u64,
        callee_pc: u64,
        live: &mut LiveStack,
    ) -> Verdict {
        let callee = self.code_at(callee_pc);
        let through_plt = self
            .code_at(target)
            .is_some_and(|code| code.elf.functions().in_plt(code.svma(target)));
        let (into, lazy) = match self.follow_plt(target, callee_pc, live, false) {
            Ok(lead) => lead,
            Err(verdict) => return verdict,
        };
        if self.enters(into, callee_pc) {
            return match lazy {
                Some(lazy) => Verdict::Lazy(lazy),
                None => Verdict::Verified,
            };
        }
        if through_plt
            && let Ok((first, Some(lazy))) = self.follow_plt(target, callee_pc, live, true)
            && self.enters(first, callee_pc)
        {
            return Verdict::Lazy(lazy);
        }
        match (callee, self.code_at(into)) {
            (Some(_), Some(code)) => {
                if !code.elf.functions().has_cfi(code.svma(into)) || through_plt {
                    // A stub without CFI may jump on to another function (V8's `Construct`
                    // builtins to `JSBuiltinsConstructStub`); a PLT slot may lead elsewhere
                    // than at the call for other reasons than lazy binding (an auditor's
                    // `la_symbind`): no contradiction.
                    Verdict::Weak
                } else {
                    Verdict::Contradicted
                }
            }
            // A direct call into a stub without CFI while the callee runs in JIT code: how
            // runtimes enter their JIT code (V8's JSEntryTrampoline calls the `Call` builtin,
            // which jumps on into the function's code); the JIT frame's chain says the rest.
            (None, Some(code)) if !code.elf.functions().has_cfi(code.svma(into)) => Verdict::Weak,
            // A call into a compiled function while the callee runs in JIT code, or into JIT
            // code while the callee runs in an ELF file.
            (Some(_), None) | (None, Some(_)) => Verdict::Contradicted,
            // Both in JIT code, whose functions' bounds are not known here.
            (None, None) if into <= callee_pc && callee_pc - into < MAX_FUNCTION => Verdict::Weak,
            (None, None) => Verdict::Contradicted,
        }
    }

    /// Whether a jump to `target` enters the function holding `callee_pc`: the same mapped
    /// file, `target` at or below it and no function starting in between.
    pub(super) fn enters(&self, target: u64, callee_pc: u64) -> bool {
        let (Some(callee), Some(code)) = (self.code_at(callee_pc), self.code_at(target)) else {
            return false;
        };
        let (svma, callee_svma) = (code.svma(target), callee.svma(callee_pc));
        Arc::ptr_eq(&code.elf, &callee.elf)
            && code.bias == callee.bias
            && svma <= callee_svma
            && callee_svma - svma < MAX_FUNCTION
            && !callee.elf.functions().start_within(svma + 1, callee_svma)
    }

    /// Where a call to `target` goes through PLT stubs: the first address outside a PLT, and
    /// whether the way led through a lazy entry and PLT0 to the resolver (what that leaves on
    /// the stack). GOT slots are read from the live process, except, if `unbound`, the stub's
    /// own slot, whose word in the file is taken (where the call went before binding). An
    /// `Err` is the verdict where the way cannot be followed.
    pub(super) fn follow_plt(
        &self,
        mut target: u64,
        callee_pc: u64,
        live: &mut LiveStack,
        unbound: bool,
    ) -> Result<(u64, Option<LazyCall>), Verdict> {
        let (mut index, mut link_map) = (None, None);
        let mut first_slot = true;
        for _ in 0..4 {
            let Some(code) = self.code_at(target) else {
                break;
            };
            let svma = code.svma(target);
            let functions = code.elf.functions();
            if !functions.in_plt(svma) {
                break;
            }
            let len = 16.min((code.range.end - target) as usize);
            let Some(jump) = code
                .bytes_at(target, len)
                .and_then(|bytes| calls::plt_jump(bytes, svma))
            else {
                return Err(Verdict::Weak);
            };
            let slot = match jump {
                PltJump::To(next) => {
                    target = next.wrapping_add(code.bias);
                    continue;
                }
                PltJump::Lazy { index: n, to } => {
                    index = Some(n);
                    target = to.wrapping_add(code.bias);
                    continue;
                }
                PltJump::Resolver { link_map: at, slot } => {
                    link_map = Some(at.wrapping_add(code.bias));
                    slot
                }
                PltJump::Slot(slot) => slot,
            };
            if unbound && std::mem::take(&mut first_slot) {
                match functions.unbound_slot(slot) {
                    Some(word) => {
                        target = word.wrapping_add(code.bias);
                        continue;
                    }
                    None => return Err(Verdict::Weak),
                }
            }
            target = match live.read_data(slot.wrapping_add(code.bias)) {
                Some(next) => next,
                None => {
                    // The slot cannot be read (the process is gone, exact stacks): its
                    // symbol's name must be the callee function's.
                    let callee = self.code_at(callee_pc);
                    let named = functions
                        .slot_name(slot)
                        .zip(callee)
                        .is_some_and(|(name, c)| {
                            let callee_functions = c.elf.functions();
                            callee_functions
                                .function_start(c.svma(callee_pc))
                                .is_some_and(|start| callee_functions.is_named(start, name))
                        });
                    return Err(if named {
                        Verdict::Verified
                    } else {
                        Verdict::Weak
                    });
                }
            };
        }
        let lazy = index
            .zip(link_map)
            .map(|(index, link_map)| LazyCall { index, link_map });
        Ok((target, lazy))
    }

    /// Whether the two words below the return address at `ra_at` are those a lazy call
    /// through the PLT pushed on its way to the resolver: the relocation index, then the
    /// object's link map (the word in its GOT slot, read from the live process).
    pub(super) fn lazy_frame_holds(
        &self,
        lazy: LazyCall,
        ra_at: u64,
        read: &mut dyn FnMut(u64) -> Option<u64>,
        live: &mut LiveStack,
    ) -> bool {
        let (Some(index), Some(link_map)) =
            (read(ra_at.wrapping_sub(8)), read(ra_at.wrapping_sub(16)))
        else {
            return false;
        };
        index == lazy.index && live.read_data(lazy.link_map) == Some(link_map)
    }

    /// The caller of a frame whose CFA the CFI computes from `rbx` (the dynamic loader's
    /// `_dl_runtime_resolve_*`, which realigns the stack for `xsave`), a register framehop does
    /// not track: its value is the word where the inner frame (`inner`, whose CFA is `inner_cfa`)
    /// saved it by its own CFI (`_dl_fixup` pushes it first thing), or, where no inner frame
    /// has saved it yet (the fault is in this frame, or in the first instructions of the
    /// innermost one), the register itself (`live_rbx`, as the fault or a signal frame left
    /// it). The return address then lies where this frame's CFI says, exactly: no word is
    /// searched for. It is taken if the call before it can reach this frame's function (a lazy
    /// call through the PLT with what the PLT pushed below it). Returns the caller's registers.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn caller_by_saved_rbx(
        &self,
        address: FrameAddress,
        (inner, inner_cfa): (Option<FrameAddress>, u64),
        live_rbx: Option<u64>,
        regs: &UnwindRegsX86_64,
        read: &mut dyn FnMut(u64) -> Option<u64>,
        is_exec: &dyn Fn(u64) -> bool,
        live: &mut LiveStack,
    ) -> Option<UnwindRegsX86_64> {
        let pc = address.address_for_lookup();
        let code = self.code_at(pc)?;
        let row = code.elf.cfi_row(code.svma(pc))?;
        if row.cfa_register != gimli::X86_64::RBX.0 {
            return None;
        }
        let rbx = match inner {
            None => live_rbx?,
            Some(inner) => {
                let inner_pc = inner.address_for_lookup();
                let inner_code = self.code_at(inner_pc)?;
                match inner_code.elf.cfi_row(inner_code.svma(inner_pc))?.rbx_at {
                    Some(rbx_at) => read(inner_cfa.checked_add_signed(rbx_at)?)?,
                    // The inner frame is the innermost and has not saved it yet.
                    None if matches!(inner, FrameAddress::InstructionPointer(_)) => live_rbx?,
                    None => return None,
                }
            }
        };
        let cfa = rbx.checked_add_signed(row.cfa_offset)?;
        // The caller's frame lies above this one's.
        if cfa <= regs.sp() {
            return None;
        }
        let ra_at = cfa.checked_add_signed(row.ra_at?)?;
        let ra = read(ra_at)?;
        if !is_exec(ra) {
            return None;
        }
        let callable = match self.verify_caller(ra, pc, live) {
            Verdict::Verified | Verdict::Weak => true,
            Verdict::Lazy(lazy) => self.lazy_frame_holds(lazy, ra_at, read, live),
            Verdict::Contradicted | Verdict::NotCall => false,
        };
        callable.then(|| UnwindRegsX86_64::new(ra, cfa, regs.bp()))
    }

    /// Whether the CFI computes the CFA of the frame running at `pc` from `rbx` (the dynamic
    /// loader's resolver). framehop, which does not track `rbx`, then takes the frame-pointer
    /// rule instead, whose word at `rbp + 8` is an outer frame's return address where `rbp`
    /// holds a caller's frame pointer: the frames between would be skipped.
    /// (Most frames' CFI is looked up in the file's index only: a row is read for the few whose
    /// CFA is on another register than `rsp` or `rbp` somewhere.)
    pub(super) fn cfa_on_rbx(&self, pc: u64) -> bool {
        self.code_at(pc).is_some_and(|code| {
            let svma = code.svma(pc);
            code.elf.functions().cfa_elsewhere(svma)
                && code
                    .elf
                    .cfi_row(svma)
                    .is_some_and(|row| row.cfa_register == gimli::X86_64::RBX.0)
        })
    }

    /// A caller for a frame whose unwind rule gave no usable return address (code without
    /// CFI: loader and library constructors, `__do_global_dtors_aux`, jemalloc's start-up; a
    /// rule on a register the unwinder does not track, as `_dl_runtime_resolve`'s on `rbx`; a
    /// frame-pointer chain broken by code that does not keep one), found on the stack and
    /// verified, never guessed: the frame-pointer record at `bp`, or the first word above `sp`
    /// (within [`SCAN_SPAN`]), whose call before it is a direct call to the function running
    /// at `callee_pc` ([`Verdict::Verified`]; a direct call to another function is a stale
    /// word, passed over). Where none is, the first word after a call whose target the code
    /// does not say is taken if its own frame unwinds to a caller that is no contradiction
    /// either. Returns the caller's registers (its `sp` just above the return address) and
    /// whether its `bp` is known (read from the frame record).
    #[allow(clippy::too_many_arguments)]
    pub(super) fn scan_for_caller(
        &self,
        cache: &mut CacheX86_64,
        regs: &UnwindRegsX86_64,
        callee_pc: u64,
        stack_end: u64,
        read: &mut dyn FnMut(u64) -> Option<u64>,
        is_exec: &dyn Fn(u64) -> bool,
        live: &mut LiveStack,
    ) -> Option<(UnwindRegsX86_64, bool)> {
        let (sp, bp) = (regs.sp(), regs.bp());
        let end = stack_end.min(sp.saturating_add(SCAN_SPAN));
        if sp <= bp
            && bp + 16 <= end
            && let (Some(ra), Some(next_bp)) = (read(bp + 8), read(bp))
            && is_exec(ra)
            && self.verify_caller(ra, callee_pc, live) == Verdict::Verified
        {
            return Some((UnwindRegsX86_64::new(ra, bp + 16, next_bp), true));
        }
        let mut weak = None;
        let mut at = sp;
        while at + 8 <= end {
            let word = read(at)?;
            at += 8;
            // Only words in ELF code: a JIT return address says nothing of its call.
            if self.code_at(word).is_none() || self.is_sigreturn(word) {
                continue;
            }
            match self.verify_caller(word, callee_pc, live) {
                Verdict::Verified => return Some((UnwindRegsX86_64::new(word, at, bp), false)),
                Verdict::Weak => {
                    weak.get_or_insert(UnwindRegsX86_64::new(word, at, bp));
                }
                // A lazy call's return address is not searched for: `xsavec` leaves earlier
                // resolver frames, what the PLT pushed below them included, in the state area
                // it does not write, below the true one ([`Self::caller_by_saved_rbx`]).
                Verdict::Lazy(_) | Verdict::Contradicted | Verdict::NotCall => {}
            }
        }
        let caller = weak?;
        // The weak candidate's own frame must unwind by its CFI to a return address that
        // could call it.
        let caller_pc = caller.ip() - 1;
        if !self.has_cfi(caller_pc) {
            return None;
        }
        let mut outer = caller;
        let address = FrameAddress::from_return_address(caller.ip())?;
        let ra = self
            .unwinder
            .unwind_frame(address, &mut outer, cache, &mut |a| read(a).ok_or(()))
            .ok()
            .flatten()?;
        let consistent = is_exec(ra)
            && matches!(
                self.verify_caller(ra, caller_pc, live),
                Verdict::Verified | Verdict::Weak | Verdict::Lazy(_)
            );
        consistent.then_some((caller, false))
    }

    /// Whether the rule of the frame at `address` reads `bp` (a frame-pointer-based CFA), and
    /// whether it restores the caller's `bp` from the stack: probed with stand-in stack words
    /// and two values of `bp`.
    pub(super) fn bp_use(
        &self,
        cache: &mut CacheX86_64,
        address: FrameAddress,
        regs: &UnwindRegsX86_64,
    ) -> (bool, bool) {
        let mut probe = |bp: u64| {
            let mut r = *regs;
            r.set_bp(bp);
            match self
                .unwinder
                .unwind_frame(address, &mut r, cache, &mut |_| Ok(1))
            {
                Ok(Some(_)) => Some((r.sp(), r.bp())),
                _ => None,
            }
        };
        let (a, b) = (probe(regs.sp() + 0x100), probe(regs.sp() + 0x200));
        let reads = a.map(|a| a.0) != b.map(|b| b.0);
        let restores = a.is_some() && a.map(|a| a.1) == b.map(|b| b.1);
        (reads, restores)
    }

    /// Whether return addresses `a` and `b`, at the same registers, lie in one frame: the same
    /// mapping, within 64 KiB, and the same canonical frame address (the frame's size there),
    /// its unwind rule applied over stand-in stack words.
    pub(super) fn same_frame(
        &self,
        cache: &mut CacheX86_64,
        regs: &UnwindRegsX86_64,
        a: u64,
        b: u64,
    ) -> bool {
        let at = self.code.partition_point(|c| c.range.start <= a);
        let Some(code) = at.checked_sub(1).and_then(|at| self.code.get(at)) else {
            return false;
        };
        if !code.range.contains(&a) || !code.range.contains(&b) || a.abs_diff(b) > 0x10000 {
            return false;
        }
        let mut cfa = |addr: u64| {
            let mut probe = *regs;
            let address = FrameAddress::from_return_address(addr)?;
            match self
                .unwinder
                .unwind_frame(address, &mut probe, cache, &mut |_| Ok(1))
            {
                Ok(Some(_)) => Some(probe.sp()),
                _ => None,
            }
        };
        let (cfa_a, cfa_b) = (cfa(a), cfa(b));
        cfa_a.is_some() && cfa_a == cfa_b
    }
}
