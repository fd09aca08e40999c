//! What a return address says about its caller: the call instruction before it and, for a
//! direct call, the function it calls (through a PLT stub if need be), so that a caller found
//! by searching the stack, or by a frame-pointer chain, can be checked against the function
//! its callee frame runs in.

use std::collections::HashMap;
use std::ops::Range;

use gimli::{
    BaseAddresses, CallFrameInstruction, CfaRule, CieOrFde, EhFrame, EhFrameHdr, EndianSlice,
    LittleEndian, RegisterRule, UnwindContext, UnwindSection, X86_64,
};
use object::{Object, ObjectSection, ObjectSymbol, ObjectSymbolTable};

/// The call instruction that ends just before a return address.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum CallBefore {
    /// `call rel32`, to this address.
    Direct(u64),
    /// `call` through a register or memory (`ff /2`): its target is not in the code.
    Indirect,
    /// No call instruction ends there: the word is no return address.
    NotCall,
}

/// Decodes the call instruction that ends at `ra`, from `bytes`, the (up to 7) bytes before it:
/// `call rel32` (`e8`), or `call` through a register or memory (`ff /2`, with its ModRM, SIB and
/// displacement).
pub(crate) fn call_before(bytes: &[u8], ra: u64) -> CallBefore {
    let n = bytes.len();
    if n >= 5 && bytes[n - 5] == 0xe8 {
        let rel = i32::from_le_bytes([bytes[n - 4], bytes[n - 3], bytes[n - 2], bytes[n - 1]]);
        return CallBefore::Direct(ra.wrapping_add_signed(i64::from(rel)));
    }
    let indirect = (2..=n.min(7)).any(|len| {
        let at = n - len;
        let modrm = bytes[at + 1];
        if bytes[at] != 0xff || (modrm >> 3) & 7 != 2 {
            return false;
        }
        let (mode, rm) = (modrm >> 6, modrm & 7);
        let sib = mode != 3 && rm == 4;
        let base_disp32 = sib && mode == 0 && bytes.get(at + 2).is_some_and(|s| s & 7 == 5);
        let disp = match mode {
            0 if rm == 5 || base_disp32 => 4,
            1 => 1,
            2 => 4,
            _ => 0,
        };
        2 + usize::from(sib) + disp == len
    });
    if indirect {
        CallBefore::Indirect
    } else {
        CallBefore::NotCall
    }
}

/// Where a PLT stub's jump goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum PltJump {
    /// To a fixed address.
    To(u64),
    /// To the address held in this GOT slot (file address, svma).
    Slot(u64),
    /// A lazy entry's `push $index; jmp PLT0`: the relocation index it leaves on the stack
    /// for the dynamic loader's resolver, and PLT0's address (svma).
    Lazy { index: u64, to: u64 },
    /// PLT0's `push GOT+8; jmp *GOT+16`: the slot whose word (the object's link map) it
    /// leaves on the stack, and the slot holding the resolver's address (both svma).
    Resolver { link_map: u64, slot: u64 },
}

/// Decodes the PLT stub at `at` (file address `svma`; `bytes` from there): `jmp *slot(%rip)`
/// (`.plt.sec`, `.plt.got`, a non-lazy `.plt`), optionally after `endbr64` and with a `bnd`
/// prefix; a lazy entry's `push $n; jmp PLT0`; PLT0's `push GOT+8; jmp *GOT+16`.
pub(crate) fn plt_jump(bytes: &[u8], svma: u64) -> Option<PltJump> {
    let mut i = 0;
    if bytes.starts_with(&[0xf3, 0x0f, 0x1e, 0xfa]) {
        i = 4;
    }
    let rel32 = |at: usize| -> Option<i64> {
        let b = bytes.get(at..at + 4)?;
        Some(i64::from(i32::from_le_bytes([b[0], b[1], b[2], b[3]])))
    };
    // `push imm32` (lazy entry: the relocation index, sign-extended as the CPU pushes it) or
    // `push disp32(%rip)` (PLT0: the link map's slot) before the jump.
    let mut index = None;
    let mut link_map = None;
    match bytes.get(i..i + 2)? {
        [0x68, _] => {
            index = Some(rel32(i + 1)? as u64);
            i += 5;
        }
        [0xff, 0x35] => {
            link_map = Some(
                svma.wrapping_add(i as u64 + 6)
                    .wrapping_add_signed(rel32(i + 2)?),
            );
            i += 6;
        }
        _ => {}
    }
    if bytes.get(i) == Some(&0xf2) {
        i += 1;
    }
    match (bytes.get(i..i + 2)?, index, link_map) {
        ([0xff, 0x25], _, link_map) => {
            let end = i + 6;
            let slot = svma
                .wrapping_add(end as u64)
                .wrapping_add_signed(rel32(i + 2)?);
            Some(match link_map {
                Some(link_map) => PltJump::Resolver { link_map, slot },
                None => PltJump::Slot(slot),
            })
        }
        ([0xe9, _], index, _) => {
            let end = i + 5;
            let to = svma
                .wrapping_add(end as u64)
                .wrapping_add_signed(rel32(i + 1)?);
            Some(match index {
                Some(index) => PltJump::Lazy { index, to },
                None => PltJump::To(to),
            })
        }
        _ => None,
    }
}

/// What an ELF file says about its functions, in file addresses (svma).
#[derive(Debug, Default)]
pub(crate) struct FunctionIndex {
    /// Where functions begin: the FDEs' and the symbol tables' function starts, sorted.
    starts: Vec<u64>,
    /// The address ranges the CFI covers, sorted by start.
    cfi: Vec<Range<u64>>,
    /// Those of them whose CFI computes the CFA from a register other than `rsp` and `rbp`
    /// somewhere (the dynamic loader's `_dl_runtime_resolve_*`, on `rbx`), sorted by start.
    cfa_elsewhere: Vec<Range<u64>>,
    /// The PLT sections (`.plt`, `.plt.sec`, `.plt.got`).
    plt: Vec<Range<u64>>,
    /// The symbol each GOT slot is relocated to (`.rela.plt`, `.rela.dyn`).
    slots: HashMap<u64, Box<str>>,
    /// The word the file holds in each lazily bound GOT slot (`R_X86_64_JUMP_SLOT`) that
    /// leads back into the PLT: where a call through the slot goes until the dynamic loader
    /// binds it (its lazy entry, `push $n; jmp PLT0`).
    unbound: HashMap<u64, u64>,
    /// The exported functions' names by address, sorted by address.
    names: Vec<(u64, Box<str>)>,
}

impl FunctionIndex {
    /// Reads the index of the ELF file in `data`.
    pub(crate) fn read(data: &[u8]) -> FunctionIndex {
        let Ok(elf) = object::File::parse(data) else {
            return FunctionIndex::default();
        };
        let (cfi, cfa_elsewhere) = fde_ranges(&elf);
        let mut index = FunctionIndex {
            cfi,
            cfa_elsewhere,
            ..FunctionIndex::default()
        };
        index.starts.extend(index.cfi.iter().map(|r| r.start));
        for symbol in elf.symbols().chain(elf.dynamic_symbols()) {
            if symbol.kind() == object::SymbolKind::Text
                && symbol.is_definition()
                && symbol.address() != 0
            {
                index.starts.push(symbol.address());
            }
        }
        index.starts.sort_unstable();
        index.starts.dedup();
        for name in [".plt", ".plt.sec", ".plt.got"] {
            if let Some(section) = elf.section_by_name(name) {
                index
                    .plt
                    .push(section.address()..section.address() + section.size());
            }
        }
        if let (Some(relocations), Some(dynsym)) =
            (elf.dynamic_relocations(), elf.dynamic_symbol_table())
        {
            for (slot, relocation) in relocations {
                if relocation.flags()
                    == (object::RelocationFlags::Elf {
                        r_type: object::elf::R_X86_64_JUMP_SLOT,
                    })
                    && let Some(word) = file_word(&elf, slot)
                    && index.in_plt(word)
                {
                    index.unbound.insert(slot, word);
                }
                if let object::RelocationTarget::Symbol(at) = relocation.target()
                    && let Ok(symbol) = dynsym.symbol_by_index(at)
                    && let Ok(name) = symbol.name()
                    && !name.is_empty()
                {
                    index.slots.insert(slot, name.into());
                }
            }
        }
        index.names = elf
            .dynamic_symbols()
            .filter(|s| s.kind() == object::SymbolKind::Text && s.is_definition())
            .filter_map(|s| Some((s.address(), s.name().ok()?.into())))
            .collect();
        index.names.sort_unstable();
        index
    }

    /// Whether the CFI covers `svma`.
    pub(crate) fn has_cfi(&self, svma: u64) -> bool {
        let at = self.cfi.partition_point(|r| r.start <= svma);
        at > 0 && self.cfi[at - 1].contains(&svma)
    }

    /// Whether the CFI of the function holding `svma` computes the CFA from a register other
    /// than `rsp` and `rbp` somewhere (see [`cfi_row`] for where).
    pub(crate) fn cfa_elsewhere(&self, svma: u64) -> bool {
        let at = self.cfa_elsewhere.partition_point(|r| r.start <= svma);
        at > 0 && self.cfa_elsewhere[at - 1].contains(&svma)
    }

    /// Whether a function begins in `from..=to`.
    pub(crate) fn start_within(&self, from: u64, to: u64) -> bool {
        let at = self.starts.partition_point(|&s| s < from);
        self.starts.get(at).is_some_and(|&s| s <= to)
    }

    /// The start of the function holding `svma`, if any is known below it.
    pub(crate) fn function_start(&self, svma: u64) -> Option<u64> {
        let at = self.starts.partition_point(|&s| s <= svma);
        at.checked_sub(1).map(|at| self.starts[at])
    }

    pub(crate) fn in_plt(&self, svma: u64) -> bool {
        self.plt.iter().any(|r| r.contains(&svma))
    }

    /// The symbol the GOT slot at `svma` is relocated to.
    pub(crate) fn slot_name(&self, svma: u64) -> Option<&str> {
        self.slots.get(&svma).map(|n| &**n)
    }

    /// Where a call through the lazily bound GOT slot at `svma` goes before the slot is bound:
    /// back into the PLT (the word the file holds there).
    pub(crate) fn unbound_slot(&self, svma: u64) -> Option<u64> {
        self.unbound.get(&svma).copied()
    }

    /// Whether the exported function at `svma` is called `name` (one of its aliases).
    pub(crate) fn is_named(&self, svma: u64, name: &str) -> bool {
        let at = self.names.partition_point(|(a, _)| *a < svma);
        self.names[at..]
            .iter()
            .take_while(|(a, _)| *a == svma)
            .any(|(_, n)| &**n == name)
    }
}

/// The 8-byte word the file holds at `svma` (in a section with file contents).
fn file_word(elf: &object::File<'_>, svma: u64) -> Option<u64> {
    let section = elf
        .sections()
        .find(|s| s.address() <= svma && svma + 8 <= s.address() + s.size())?;
    let data = section.data().ok()?;
    let at = usize::try_from(svma - section.address()).ok()?;
    let bytes = data.get(at..at.checked_add(8)?)?;
    Some(u64::from_le_bytes(bytes.try_into().ok()?))
}

/// What the CFI row of one code address says that framehop does not: the register the CFA is
/// computed from (DWARF number) and its offset, and where the caller's `rbx` and the return
/// address are saved (offsets from the CFA), if they are.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct CfiRow {
    pub cfa_register: u16,
    pub cfa_offset: i64,
    pub rbx_at: Option<i64>,
    pub ra_at: Option<i64>,
}

/// The sections [`cfi_row`] reads: each one's bytes and file address.
pub(crate) struct CfiSections<'a> {
    pub eh_frame: (&'a [u8], u64),
    pub eh_frame_hdr: Option<(&'a [u8], u64)>,
    pub text: Option<u64>,
    pub got: Option<u64>,
}

/// The CFI row of file address `svma`, found through `.eh_frame_hdr`'s table where there is
/// one (else by walking `.eh_frame`).
pub(crate) fn cfi_row(sections: &CfiSections<'_>, svma: u64) -> Option<CfiRow> {
    let eh_frame = EhFrame::new(sections.eh_frame.0, LittleEndian);
    let mut bases = BaseAddresses::default().set_eh_frame(sections.eh_frame.1);
    if let Some(text) = sections.text {
        bases = bases.set_text(text);
    }
    if let Some(got) = sections.got {
        bases = bases.set_got(got);
    }
    let mut ctx = UnwindContext::new();
    let row = match sections.eh_frame_hdr {
        Some((hdr, hdr_svma)) => {
            bases = bases.set_eh_frame_hdr(hdr_svma);
            let parsed = EhFrameHdr::new(hdr, LittleEndian).parse(&bases, 8).ok()?;
            parsed
                .table()?
                .unwind_info_for_address(
                    &eh_frame,
                    &bases,
                    &mut ctx,
                    svma,
                    EhFrame::cie_from_offset,
                )
                .ok()?
                .clone()
        }
        None => eh_frame
            .unwind_info_for_address(&bases, &mut ctx, svma, EhFrame::cie_from_offset)
            .ok()?
            .clone(),
    };
    let CfaRule::RegisterAndOffset { register, offset } = *row.cfa() else {
        return None;
    };
    let saved_at = |register| match row.register(register) {
        Some(RegisterRule::Offset(at)) => Some(at),
        _ => None,
    };
    Some(CfiRow {
        cfa_register: register.0,
        cfa_offset: offset,
        rbx_at: saved_at(gimli::X86_64::RBX),
        ra_at: saved_at(gimli::X86_64::RA),
    })
}

/// The address ranges the `.eh_frame` FDEs of `elf` cover, and those of them whose CFA is
/// computed from a register other than `rsp` and `rbp` somewhere, each sorted by start.
fn fde_ranges(elf: &object::File<'_>) -> (Vec<Range<u64>>, Vec<Range<u64>>) {
    let Some(section) = elf.section_by_name(".eh_frame") else {
        return Default::default();
    };
    let Ok(data) = section.data() else {
        return Default::default();
    };
    let address = |name: &str| elf.section_by_name(name).map(|s| s.address());
    let mut bases = BaseAddresses::default().set_eh_frame(section.address());
    if let Some(text) = address(".text") {
        bases = bases.set_text(text);
    }
    if let Some(got) = address(".got") {
        bases = bases.set_got(got);
    }
    let eh_frame = EhFrame::new(data, LittleEndian);
    let mut cies = HashMap::new();
    let mut ranges = Vec::new();
    let mut elsewhere = Vec::new();
    let mut entries = eh_frame.entries(&bases);
    while let Ok(Some(entry)) = entries.next() {
        let CieOrFde::Fde(partial) = entry else {
            continue;
        };
        let fde = partial.parse(
            |section: &EhFrame<EndianSlice<'_, LittleEndian>>, bases, offset| {
                if let Some(cie) = cies.get(&offset) {
                    return Ok(Clone::clone(cie));
                }
                let cie = section.cie_from_offset(bases, offset)?;
                cies.insert(offset, cie.clone());
                Ok(cie)
            },
        );
        if let Ok(fde) = fde
            && fde.initial_address() != 0
            && fde.len() > 0
        {
            let range = fde.initial_address()..fde.initial_address() + fde.len();
            if defines_cfa_elsewhere(fde.cie().instructions(&eh_frame, &bases))
                || defines_cfa_elsewhere(fde.instructions(&eh_frame, &bases))
            {
                elsewhere.push(range.clone());
            }
            ranges.push(range);
        }
    }
    ranges.sort_unstable_by_key(|r| r.start);
    elsewhere.sort_unstable_by_key(|r| r.start);
    (ranges, elsewhere)
}

/// Whether CFI `instructions` compute the CFA from a register other than `rsp` and `rbp`, or
/// by an expression.
fn defines_cfa_elsewhere(
    mut instructions: gimli::CallFrameInstructionIter<'_, EndianSlice<'_, LittleEndian>>,
) -> bool {
    while let Ok(Some(instruction)) = instructions.next() {
        match instruction {
            CallFrameInstruction::DefCfa { register, .. }
            | CallFrameInstruction::DefCfaSf { register, .. }
            | CallFrameInstruction::DefCfaRegister { register }
                if register != X86_64::RSP && register != X86_64::RBP =>
            {
                return true;
            }
            CallFrameInstruction::DefCfaExpression { .. } => return true,
            _ => {}
        }
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The call instructions a return address follows, as compilers emit them (from
    /// objdump of Debian's libc, ld.so and postgres), and words that follow none.
    #[test]
    fn return_addresses_follow_call_instructions() {
        let ra = 0x10_0000;
        let calls: [(&[u8], CallBefore); 8] = [
            (
                &[0xe8, 0x06, 0xdb, 0xff, 0xff],
                CallBefore::Direct(0x10_0000 - 0x24fa),
            ), // call rel32
            (&[0xff, 0xd0], CallBefore::Indirect), // call *%rax
            (&[0x41, 0xff, 0xd3], CallBefore::Indirect), // call *%r11
            (&[0xff, 0x15, 0x10, 0x20, 0x30, 0x00], CallBefore::Indirect), // call *disp32(%rip)
            (&[0xff, 0x50, 0x18], CallBefore::Indirect), // call *0x18(%rax)
            (
                &[0xff, 0x94, 0x24, 0x00, 0x01, 0x00, 0x00],
                CallBefore::Indirect,
            ), // call *0x100(%rsp)
            (&[0xff, 0x14, 0x24], CallBefore::Indirect), // call *(%rsp)
            (
                &[0xff, 0x14, 0x25, 0x10, 0x20, 0x30, 0x00],
                CallBefore::Indirect,
            ), // call *disp32 (no base)
        ];
        for (bytes, want) in calls {
            let mut code = vec![0x90; 8];
            code.extend_from_slice(bytes);
            let tail = &code[code.len() - 7..];
            assert_eq!(call_before(tail, ra), want, "{bytes:x?}");
        }
        let others: [&[u8]; 5] = [
            &[0x48, 0x89, 0xe5],             // mov %rsp,%rbp
            &[0x0f, 0x05],                   // syscall
            &[0xff, 0xe0],                   // jmp *%rax
            &[0xc6, 0x05, 0xa5, 0xad, 0x01], // movb (cut short)
            &[0x5d, 0xc3],                   // pop %rbp; ret
        ];
        for bytes in others {
            let mut code = vec![0x90; 8];
            code.extend_from_slice(bytes);
            let tail = &code[code.len() - 7..];
            assert_eq!(call_before(tail, ra), CallBefore::NotCall, "{bytes:x?}");
        }
    }

    /// PLT stubs as Debian's binutils lays them out (objdump of python3, libc and ld.so).
    #[test]
    fn plt_stubs_jump_through_their_got_slot() {
        // .plt.sec: endbr64; bnd jmp *0x2fe2(%rip)
        let sec = [
            0xf3, 0x0f, 0x1e, 0xfa, 0xf2, 0xff, 0x25, 0xe2, 0x2f, 0x00, 0x00,
        ];
        assert_eq!(
            plt_jump(&sec, 0x1000),
            Some(PltJump::Slot(0x1000 + 11 + 0x2fe2))
        );
        // .plt (no IBT): jmp *0x2fe2(%rip); push $3; jmp PLT0
        let lazy = [
            0xff, 0x25, 0xe2, 0x2f, 0x00, 0x00, 0x68, 0x03, 0x00, 0x00, 0x00,
        ];
        assert_eq!(
            plt_jump(&lazy, 0x2000),
            Some(PltJump::Slot(0x2000 + 6 + 0x2fe2))
        );
        // .plt with IBT: endbr64; push $3; bnd jmp PLT0 (-0x40)
        let ibt = [
            0xf3, 0x0f, 0x1e, 0xfa, 0x68, 0x03, 0x00, 0x00, 0x00, 0xf2, 0xe9, 0xc0, 0xff, 0xff,
            0xff,
        ];
        assert_eq!(
            plt_jump(&ibt, 0x3040),
            Some(PltJump::Lazy {
                index: 3,
                to: 0x3040 + 15 - 0x40
            })
        );
        // .plt without IBT, from its push (where the unbound slot leads): push $3; jmp PLT0
        let push = [0x68, 0x03, 0x00, 0x00, 0x00, 0xe9, 0xd0, 0xff, 0xff, 0xff];
        assert_eq!(
            plt_jump(&push, 0x2006),
            Some(PltJump::Lazy {
                index: 3,
                to: 0x2006 + 10 - 0x30
            })
        );
        // PLT0: push 0x2fe2(%rip); bnd jmp *0x2fe4(%rip)
        let plt0 = [
            0xff, 0x35, 0xe2, 0x2f, 0x00, 0x00, 0xf2, 0xff, 0x25, 0xe3, 0x2f, 0x00, 0x00,
        ];
        assert_eq!(
            plt_jump(&plt0, 0x3000),
            Some(PltJump::Resolver {
                link_map: 0x3000 + 6 + 0x2fe2,
                slot: 0x3000 + 13 + 0x2fe3
            })
        );
        // PLT0 without IBT: push 0x2fe2(%rip); jmp *0x2fe4(%rip)
        let plt0 = [
            0xff, 0x35, 0xe2, 0x2f, 0x00, 0x00, 0xff, 0x25, 0xe4, 0x2f, 0x00, 0x00,
        ];
        assert_eq!(
            plt_jump(&plt0, 0x1000),
            Some(PltJump::Resolver {
                link_map: 0x1000 + 6 + 0x2fe2,
                slot: 0x1000 + 12 + 0x2fe4
            })
        );
        assert_eq!(plt_jump(&[0x55, 0x48, 0x89, 0xe5], 0x4000), None);
    }
}
