//! DWARF CFI unwinding of sampled user stacks with framehop, and the ELF files it needs.
//!
//! Each executable mapping becomes a framehop module whose unwind sections are read from the
//! mapped file. Files are parsed once per recording and shared between processes.

use std::collections::HashMap;
use std::ops::{Deref, Range};
use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};

use framehop::x86_64::{CacheX86_64, UnwindRegsX86_64, UnwinderX86_64};
use framehop::{ExplicitModuleSectionInfo, FrameAddress, Module, Unwinder as _};
use memmap2::Mmap;
use object::{Object, ObjectSection, ObjectSegment, ObjectSymbol};

use fltrace_trace::{FileOffset, Mapping, VirtAddr};

mod calls;

use calls::{CallBefore, FunctionIndex, PltJump};

/// Bytes of a section of a mapped file, kept alive by a shared reference to the mapping.
#[derive(Clone)]
pub struct SectionBytes {
    file: Arc<Mmap>,
    range: Range<usize>,
}

impl Deref for SectionBytes {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        &self.file[self.range.clone()]
    }
}

/// What unwinding needs of one ELF file.
struct ElfFile {
    file: Arc<Mmap>,
    /// (name, address range, file range) of the unwind-relevant sections.
    sections: Vec<(&'static [u8], Range<u64>, Range<usize>)>,
    /// (file offset, virtual address, file size) of each loadable segment.
    segments: Vec<(u64, u64, u64)>,
    build_id: String,
    /// Its functions, CFI ranges and PLT, read when a call into it is first checked.
    functions: OnceLock<FunctionIndex>,
}

impl ElfFile {
    fn load(path: &Path) -> Option<ElfFile> {
        // Only regular files: a mapped device must not be opened again by the recorder.
        if !std::fs::metadata(path).ok()?.is_file() {
            return None;
        }
        let file = std::fs::File::open(path).ok()?;
        // SAFETY: the file is mapped read-only; if another process truncates it while we
        // read, we may get SIGBUS, the accepted risk of every tool that maps binaries
        // (perf, samply, blazesym do the same).
        let map = Arc::new(unsafe { Mmap::map(&file) }.ok()?);
        ElfFile::parse(map)
    }

    /// The kernel's vDSO, read from the recorder's own mapping: the same image the kernel
    /// maps into every 64-bit process, whose CFI unwinds the frames of `clock_gettime` and
    /// its kind (framehop cannot open `[vdso]` as a file).
    fn vdso() -> Option<ElfFile> {
        let maps = std::fs::read_to_string("/proc/self/maps").ok()?;
        let line = maps.lines().find(|l| l.ends_with("[vdso]"))?;
        let (start, end) = line.split_whitespace().next()?.split_once('-')?;
        let start = u64::from_str_radix(start, 16).ok()?;
        let end = u64::from_str_radix(end, 16).ok()?;
        let len = usize::try_from(end.checked_sub(start)?).ok()?;
        let mut copy = memmap2::MmapMut::map_anon(len).ok()?;
        // SAFETY: [start, end) is this process's vDSO mapping, readable, and never unmapped
        // while the process runs.
        copy.copy_from_slice(unsafe { std::slice::from_raw_parts(start as *const u8, len) });
        ElfFile::parse(Arc::new(copy.make_read_only().ok()?))
    }

    fn parse(map: Arc<Mmap>) -> Option<ElfFile> {
        let elf = object::File::parse(&map[..]).ok()?;
        let mut sections = Vec::new();
        for name in [
            &b".eh_frame"[..],
            b".eh_frame_hdr",
            b".debug_frame",
            b".text",
            b".got",
        ] {
            let Some(section) = elf.section_by_name_bytes(name) else {
                continue;
            };
            let Some((offset, size)) = section.file_range() else {
                continue;
            };
            let name: &'static [u8] = match name {
                b".eh_frame" => b".eh_frame",
                b".eh_frame_hdr" => b".eh_frame_hdr",
                b".debug_frame" => b".debug_frame",
                b".text" => b".text",
                _ => b".got",
            };
            sections.push((
                name,
                section.address()..section.address() + section.size(),
                offset as usize..(offset + size) as usize,
            ));
        }
        let segments = elf
            .segments()
            .map(|s| {
                let (offset, size) = s.file_range();
                (offset, s.address(), size)
            })
            .collect();
        let build_id = elf.build_id().ok().flatten().map(hex).unwrap_or_default();
        drop(elf);
        Some(ElfFile {
            file: map,
            sections,
            segments,
            build_id,
            functions: OnceLock::new(),
        })
    }

    fn functions(&self) -> &FunctionIndex {
        self.functions
            .get_or_init(|| FunctionIndex::read(&self.file))
    }

    /// The load bias of a mapping of this file at `start` from file offset `pgoff`.
    ///
    /// NB: the segment is the one whose page-aligned file offset is `pgoff`; with lld's layout
    /// the previous segment's file range can end inside that same page, and choosing it would
    /// shift every address by a page.
    fn bias(&self, start: u64, pgoff: u64) -> Option<u64> {
        let page_mask = !(crate::ring::page_size() as u64 - 1);
        let exact = self
            .segments
            .iter()
            .find(|(offset, _, _)| offset & page_mask == pgoff);
        let containing = || {
            self.segments
                .iter()
                .filter(|(offset, _, size)| offset & page_mask <= pgoff && pgoff < offset + size)
                .max_by_key(|(offset, _, _)| *offset)
        };
        let &(offset, vaddr, _) = exact.or_else(containing)?;
        Some(start.wrapping_sub(vaddr.wrapping_sub(offset).wrapping_add(pgoff)))
    }

    /// The CFI row of file address `svma` ([`calls::cfi_row`]).
    fn cfi_row(&self, svma: u64) -> Option<calls::CfiRow> {
        let find = |name: &[u8]| self.sections.iter().find(|(n, _, _)| *n == name);
        let section = |name: &[u8]| {
            find(name)
                .and_then(|(_, svma, range)| Some((self.file.get(range.clone())?, svma.start)))
        };
        calls::cfi_row(
            &calls::CfiSections {
                eh_frame: section(b".eh_frame")?,
                eh_frame_hdr: section(b".eh_frame_hdr"),
                text: find(b".text").map(|(_, svma, _)| svma.start),
                got: find(b".got").map(|(_, svma, _)| svma.start),
            },
            svma,
        )
    }

    fn section_info(&self) -> ExplicitModuleSectionInfo<SectionBytes> {
        let find = |name: &[u8]| self.sections.iter().find(|(n, _, _)| *n == name);
        let bytes = |name: &[u8]| {
            find(name).map(|(_, _, range)| SectionBytes {
                file: self.file.clone(),
                range: range.clone(),
            })
        };
        let svma = |name: &[u8]| find(name).map(|(_, svma, _)| svma.clone());
        ExplicitModuleSectionInfo {
            base_svma: 0,
            text_svma: svma(b".text"),
            text: bytes(b".text"),
            got_svma: svma(b".got"),
            eh_frame_svma: svma(b".eh_frame"),
            eh_frame: bytes(b".eh_frame"),
            eh_frame_hdr_svma: svma(b".eh_frame_hdr"),
            eh_frame_hdr: bytes(b".eh_frame_hdr"),
            debug_frame: bytes(b".debug_frame"),
            stubs_svma: None,
            stub_helper_svma: None,
            unwind_info: None,
            text_segment_svma: None,
            text_segment: None,
        }
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// The name of the vDSO's mapping, under which [`ElfCache`] keeps the kernel's vDSO image.
pub const VDSO: &str = "[vdso]";

/// Parsed ELF files, keyed by the path they were opened from.
#[derive(Default)]
pub struct ElfCache {
    files: HashMap<PathBuf, Option<Arc<ElfFile>>>,
}

impl ElfCache {
    fn get(&mut self, path: &Path) -> Option<Arc<ElfFile>> {
        self.files
            .entry(path.to_owned())
            .or_insert_with(|| {
                if path == Path::new(VDSO) {
                    ElfFile::vdso().map(Arc::new)
                } else {
                    ElfFile::load(path).map(Arc::new)
                }
            })
            .clone()
    }

    /// The build ID of the file at `path`, hex, or empty.
    pub fn build_id(&mut self, path: &Path) -> String {
        self.get(path)
            .map(|f| f.build_id.clone())
            .unwrap_or_default()
    }

    /// The address ranges, as mapped at `start` from file offset `pgoff`, of the functions the
    /// file at `path` exports (its `.dynsym`). Empty if the file cannot be read.
    pub fn exported_functions(
        &mut self,
        path: &Path,
        start: VirtAddr,
        pgoff: FileOffset,
    ) -> Vec<Range<u64>> {
        let Some(elf) = self.get(path) else {
            return Vec::new();
        };
        let Some(bias) = elf.bias(start.get(), pgoff.get()) else {
            return Vec::new();
        };
        let Ok(file) = object::File::parse(&elf.file[..]) else {
            return Vec::new();
        };
        file.dynamic_symbols()
            .filter(|s| s.kind() == object::SymbolKind::Text && s.is_definition() && s.size() > 0)
            .map(|s| {
                let begin = s.address().wrapping_add(bias);
                begin..begin + s.size()
            })
            .collect()
    }
}

impl ElfCache {
    /// The entry point (ELF `e_entry`) of the file at `path`, as mapped at `start` from file
    /// offset `pgoff`: the executable's `_start`, or the dynamic loader's own entry.
    pub fn entry_point(&mut self, path: &Path, start: VirtAddr, pgoff: FileOffset) -> Option<u64> {
        let elf = self.get(path)?;
        let bias = elf.bias(start.get(), pgoff.get())?;
        let file = object::File::parse(&elf.file[..]).ok()?;
        Some(file.entry())
            .filter(|&e| e != 0)
            .map(|e| e.wrapping_add(bias))
    }
}

/// The path under which fltrace can open a file the process mapped: through the process's own
/// root (it may be in a container) while it lives, else as named.
pub fn mapped_file(pid: u32, path: &str) -> PathBuf {
    let through_root = PathBuf::from(format!("/proc/{pid}/root{path}"));
    if through_root.exists() {
        through_root
    } else {
        PathBuf::from(path)
    }
}

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

/// The most runs of skipped pages a stack copy notes (`HOLES` of bpf/record.bpf.c).
pub const MAX_HOLES: usize = 4;

/// The parts of a stack copy that could not be read when it was taken (pages not present: a
/// stack page never touched, as in the middle of a frame larger than the pages it uses), as
/// byte ranges `[start, end)` from the stack pointer, in order. Their bytes are no stack
/// words: a zero read there would pass for the end of the stack.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Holes {
    len: usize,
    runs: [(u32, u32); MAX_HOLES],
}

impl Holes {
    /// The holes `runs`, `None` unless they are at most [`MAX_HOLES`] non-empty ranges in
    /// order, apart.
    pub fn new(runs: &[(u32, u32)]) -> Option<Holes> {
        if runs.len() > MAX_HOLES
            || runs.iter().any(|&(start, end)| start >= end)
            || runs.windows(2).any(|w| w[0].1 > w[1].0)
        {
            return None;
        }
        let mut holes = Holes {
            len: runs.len(),
            ..Holes::default()
        };
        holes.runs[..runs.len()].copy_from_slice(runs);
        Some(holes)
    }

    /// The ranges, in order.
    pub fn runs(&self) -> &[(u32, u32)] {
        &self.runs[..self.len]
    }

    /// The bytes they cover.
    pub fn bytes(&self) -> u64 {
        self.runs()
            .iter()
            .map(|&(start, end)| u64::from(end - start))
            .sum()
    }

    /// Whether `[offset, offset + len)` meets a hole.
    fn meets(&self, offset: usize, len: usize) -> bool {
        self.runs()
            .iter()
            .any(|&(start, end)| offset < end as usize && (start as usize) < offset + len)
    }
}

/// A copy of a thread's stack from its stack pointer up, and the parts of it that could not be
/// read ([`Holes`]).
#[derive(Debug, Clone, Copy, Default)]
pub struct StackBytes<'a> {
    /// The bytes, holes included (their bytes are none of the stack's).
    pub bytes: &'a [u8],
    /// Where the copy could not read the stack.
    pub holes: Holes,
}

impl<'a> From<&'a [u8]> for StackBytes<'a> {
    fn from(bytes: &'a [u8]) -> StackBytes<'a> {
        StackBytes {
            bytes,
            holes: Holes::default(),
        }
    }
}

impl StackBytes<'_> {
    /// The copy's length in bytes, holes included.
    pub fn len(&self) -> usize {
        self.bytes.len()
    }

    /// Whether nothing was copied.
    pub fn is_empty(&self) -> bool {
        self.bytes.is_empty()
    }

    /// The word `offset` bytes above the stack pointer: `Err(true)` beyond the copy, `Err(false)`
    /// in a hole (a read that fails: the stack there was never written).
    fn word(&self, offset: u64) -> Result<u64, bool> {
        let offset = usize::try_from(offset).map_err(|_| true)?;
        let bytes = offset
            .checked_add(8)
            .and_then(|end| self.bytes.get(offset..end))
            .ok_or(true)?;
        if self.holes.meets(offset, 8) {
            return Err(false);
        }
        Ok(u64::from_ne_bytes(bytes.try_into().map_err(|_| true)?))
    }
}

/// The unwinder of one address space.
#[derive(Clone, Default)]
pub struct AddressSpaceUnwinder {
    unwinder: UnwinderX86_64<SectionBytes>,
    /// The executable mappings' bytes, by address range, to recognise signal trampolines.
    code: Vec<MappedCode>,
    /// ELF entry points: no caller is searched for beyond their code.
    entries: Vec<u64>,
    /// Whether the JIT code of this address space keeps no frame-pointer chain.
    untrusted_jit: bool,
}

/// The file behind one executable mapping.
#[derive(Clone)]
struct MappedCode {
    range: Range<u64>,
    elf: Arc<ElfFile>,
    /// The file offset of `range.start`.
    offset: u64,
    /// What to add to a file address (svma) to get its address in the process.
    bias: u64,
}

impl MappedCode {
    fn bytes_at(&self, addr: u64, len: usize) -> Option<&[u8]> {
        let start = usize::try_from(addr.checked_sub(self.range.start)? + self.offset).ok()?;
        self.elf.file.get(start..start.checked_add(len)?)
    }

    /// The file address of `addr`.
    fn svma(&self, addr: u64) -> u64 {
        addr.wrapping_sub(self.bias)
    }
}

/// What the call before a return address says about it being its callee frame's caller.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Verdict {
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
struct LazyCall {
    /// The relocation index (`push $n`), just below the return address.
    index: u64,
    /// The GOT slot holding the object's link map (PLT0's `push GOT+8`), whose word is 16
    /// bytes below the return address.
    link_map: u64,
}

/// x86-64 `rt_sigreturn` trampoline, `mov $15,%rax; syscall`: the return address of every signal
/// handler (glibc's `__restore_rt`, musl's `__restore_rt`), recognised by its bytes as libgcc
/// does, since its CFI is DWARF expressions framehop does not evaluate.
const SIGRETURN: [u8; 9] = [0x48, 0xc7, 0xc0, 0x0f, 0x00, 0x00, 0x00, 0x0f, 0x05];

/// Where the interrupted registers are once a handler has returned to the trampoline: the
/// stack pointer is at the `struct ucontext` of the kernel's `rt_sigframe`, whose
/// `uc_mcontext.gregs` start 40 bytes in (after `uc_flags`, `uc_link`, `uc_stack`).
const UCONTEXT_GREGS: u64 = 40;
const REG_RBP: u64 = 10;
const REG_RBX: u64 = 11;
const REG_RSP: u64 = 15;
const REG_RIP: u64 = 16;

/// How far above a frame's stack pointer a caller is searched for: past the register and
/// vector state `_dl_runtime_resolve_xsavec` saves (up to 2.7 KiB with AVX-512).
const SCAN_SPAN: u64 = 4096;

/// The bytes of entry code after an ELF entry point (the loader's `_start` and
/// `_dl_start_user`, crt1's `_start`), as the recorder's `classify` counts them.
const ENTRY_CODE: u64 = 64;

/// A direct call verified as entering the function that holds a callee's pc lies at most this
/// far below it (the largest functions of cc1plus are a few hundred KiB).
const MAX_FUNCTION: u64 = 16 << 20;

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
    fn is_sigreturn(&self, addr: u64) -> bool {
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
    fn code_at(&self, addr: u64) -> Option<&MappedCode> {
        let at = self.code.partition_point(|c| c.range.start <= addr);
        self.code
            .get(at.checked_sub(1)?)
            .filter(|c| c.range.contains(&addr))
    }

    /// The call instruction before return address `ra`, in a mapped ELF file; `None` where
    /// the code's bytes are unknown (JIT code, memory no mapping record told of).
    fn call_kind(&self, ra: u64) -> Option<CallBefore> {
        let code = self.code_at(ra)?;
        let start = ra.checked_sub(7)?.max(code.range.start);
        let bytes = code.bytes_at(start, (ra - start) as usize)?;
        Some(calls::call_before(bytes, ra))
    }

    /// Whether `addr` follows a call instruction in a mapped ELF file: `Some(false)` for a
    /// word that cannot be a return address there, `None` where the bytes are unknown (JIT
    /// code in anonymous memory).
    fn after_call(&self, addr: u64) -> Option<bool> {
        self.call_kind(addr).map(|kind| kind != CallBefore::NotCall)
    }

    /// Whether CFI covers `pc` (else framehop unwinds its frame by the frame pointer).
    fn has_cfi(&self, pc: u64) -> bool {
        self.code_at(pc)
            .is_some_and(|code| code.elf.functions().has_cfi(code.svma(pc)))
    }

    /// Whether return address `ra` can be the caller of a frame running at `callee_pc`: the
    /// call before it is a direct call to the function holding `callee_pc` (or to a PLT stub
    /// that leads there), a call whose target is not in the code, or neither.
    fn verify_caller(&self, ra: u64, callee_pc: u64, live: &mut LiveStack) -> Verdict {
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
    fn call_reaches(&self, target: u64, callee_pc: u64, live: &mut LiveStack) -> Verdict {
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
    fn enters(&self, target: u64, callee_pc: u64) -> bool {
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
    fn follow_plt(
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
    fn lazy_frame_holds(
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
    fn caller_by_saved_rbx(
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
    fn cfa_on_rbx(&self, pc: u64) -> bool {
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
    fn scan_for_caller(
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
    fn bp_use(
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
    fn same_frame(&self, cache: &mut CacheX86_64, regs: &UnwindRegsX86_64, a: u64, b: u64) -> bool {
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
    fn in_entry_code(&self, addr: u64) -> bool {
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
        let stack = StackBytes::from(stack);
        self.unwind_thread(cache, regs, None, stack, beyond, None, &mut known, frames)
    }

    /// Whether `addr` lies in an executable file mapping.
    fn in_code(&self, addr: u64) -> bool {
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
    /// `rbx` is the thread's at the fault, when the record holds it: the CFA of the dynamic
    /// loader's resolver, should the fault be in it.
    #[allow(clippy::too_many_arguments)]
    pub fn unwind_thread(
        &self,
        cache: &mut CacheX86_64,
        (ip, sp, bp): (u64, u64, u64),
        rbx: Option<u64>,
        stack: StackBytes<'_>,
        beyond: &mut LiveStack,
        is_exec: Option<&dyn Fn(u64) -> bool>,
        known: &mut KnownFrames,
        frames: &mut Vec<u64>,
    ) -> UnwindEnd {
        // Words beyond the copy are read only once `live` is set: first the previous
        // unwind's frames are tried.
        let live = std::cell::Cell::new(false);
        let ran_out = std::cell::Cell::new(false);
        let read_at = |beyond: &mut LiveStack, addr: u64| {
            let offset = addr.checked_sub(sp).ok_or(())?;
            match stack.word(offset) {
                Ok(word) => Ok(word),
                // A page the copy could not read was never touched: no frame is there, and
                // the live stack would have other words by now.
                Err(false) => Err(()),
                Err(true) if live.get() => beyond.read(addr).ok_or(()),
                Err(true) => {
                    ran_out.set(true);
                    Err(())
                }
            }
        };
        let mut regs = UnwindRegsX86_64::new(ip, sp, bp);
        // `rbx` of the innermost frame of the registers being unwound: the fault's, or those a
        // signal frame saved.
        let mut rbx = rbx;
        let mut address = FrameAddress::InstructionPointer(ip);
        // The frame unwound before this one (its callee), whose CFA is this one's `sp`.
        let mut inner: Option<FrameAddress> = None;
        // Whether `regs.bp()` may not be the frame's (a caller found by searching the stack
        // keeps its callee's, which that code may have changed).
        let mut bp_uncertain = false;
        frames.push(ip);
        known.fresh.clear();
        // Where this unwind joined the previous one: the index in `known.frames` of the
        // frame both share.
        let mut joined = None;
        // A join the live stack contradicted (another caller where the previous unwind had
        // one): taken unless the live stack leads back onto the previous one further out, as
        // a thread that has moved on since the fault contradicts it too.
        let mut contradicted: Option<Contradicted> = None;
        let join_at = |known: &KnownFrames,
                       at: usize,
                       frames: &[u64],
                       beyond: &mut LiveStack,
                       contradicted: &mut Option<Contradicted>| {
            if known.agrees(at, beyond) {
                return true;
            }
            contradicted.get_or_insert(Contradicted {
                at,
                frames: frames.len(),
                used: beyond.used,
                failed: beyond.failed,
            });
            false
        };
        let mut finished = loop {
            if frames.len() >= MAX_FRAMES {
                break false;
            }
            // Past the copy, frames read from the live process may lead back onto the
            // previous unwind's: from there on, that one's frames are taken.
            if live.get()
                && let FrameAddress::ReturnAddress(ra) = address
                && let Some(at) = known.find(ra.get(), regs.sp())
                && join_at(known, at, frames, beyond, &mut contradicted)
            {
                joined = Some(at);
                break true;
            }
            if let FrameAddress::ReturnAddress(ra) = address
                && self.is_sigreturn(ra.get())
            {
                // A handler returned here: go on in the interrupted code, whose registers the
                // kernel saved in the signal frame. Its address is where it was interrupted,
                // not a return address.
                let gregs = regs.sp().wrapping_add(UCONTEXT_GREGS);
                let was_live = live.replace(true);
                let saved = (
                    read_at(beyond, gregs + REG_RIP * 8),
                    read_at(beyond, gregs + REG_RSP * 8),
                    read_at(beyond, gregs + REG_RBP * 8),
                );
                rbx = read_at(beyond, gregs + REG_RBX * 8).ok();
                live.set(was_live);
                let (Ok(rip), Ok(rsp), Ok(rbp)) = saved else {
                    break false;
                };
                regs = UnwindRegsX86_64::new(rip, rsp, rbp);
                address = FrameAddress::InstructionPointer(rip);
                inner = None;
                frames.push(rip);
                known.fresh.push(KnownFrame::new(rip, &regs, false));
                continue;
            }
            // JIT code that keeps no frame chain (HotSpot without -XX:+PreserveFramePointer):
            // nothing says where its caller is, so the stack ends at its frame.
            if self.untrusted_jit
                && let Some(is_exec) = is_exec
                && self.code_at(address.address()).is_none()
                && is_exec(address.address())
            {
                beyond.unverified = true;
                break false;
            }
            let before = regs;
            let failed_before = beyond.failed;
            let mut step = self
                .unwinder
                .unwind_frame(address, &mut regs, cache, &mut |a| read_at(beyond, a));
            if ran_out.replace(false) && !live.get() {
                // The copy ended inside this frame. If the previous unwind of this thread
                // had the same return address at the same stack address, the frames outside
                // it are the same calls (a frame is only replaced by returning from it): take
                // them from there, as the live stack may have moved on or be gone.
                if let FrameAddress::ReturnAddress(ra) = address
                    && let Some(at) = known.find(ra.get(), before.sp())
                    && join_at(known, at, frames, beyond, &mut contradicted)
                {
                    joined = Some(at);
                    break true;
                }
                // The same frame at the same stack address, stopped at another call in it (a
                // frame larger than the copy, as postgres's `heap_multi_insert`, whose every
                // stack needs the frames outside it): the same activation if the code address
                // gives the frame the same size, and its callers are the same.
                if let FrameAddress::ReturnAddress(ra) = address
                    && let Some(at) = known.at_sp(before.sp())
                    && self.same_frame(cache, &before, ra.get(), known.frames[at].addr)
                    && join_at(known, at, frames, beyond, &mut contradicted)
                {
                    joined = Some(at);
                    break true;
                }
                live.set(true);
                regs = before;
                step = self
                    .unwinder
                    .unwind_frame(address, &mut regs, cache, &mut |a| read_at(beyond, a));
            }
            // Whether this step's return address can be taken. A rule that failed or gave a
            // word that is no return address (not executable, or in an ELF file but not after
            // a call) is not; nor, in code without CFI (JIT code, V8's builtins, hand-written
            // assembly), whose frame framehop finds by its frame pointer as perf -g does, a
            // chain that is no chain (`bp` below the frame, beyond the stack, or unknown since
            // a caller was searched for) or leads to a call of another function (the code
            // keeps no frame pointer: frames were skipped); nor, where `bp` is unknown, a CFI
            // rule that reads it unless the call is verified. Where a step cannot be taken, the
            // caller is searched for on the stack, and taken only verified.
            // No check where the mappings may be stale (`is_exec` None: memleak and the system
            // tools know only the mappings at attach, and a library loaded later would look
            // like no code at all).
            let callee_pc = address.address_for_lookup();
            let stack_end = match beyond.bounds {
                (_, 0) => sp.saturating_add(stack.len() as u64),
                (_, end) => end,
            };
            let implausible = is_exec.is_some_and(|is_exec| match step {
                Ok(Some(ra)) => {
                    let no_cfi = !self.has_cfi(callee_pc);
                    let reads_bp = bp_uncertain && self.bp_use(cache, address, &before).0;
                    let by_frame_pointer = regs.sp() == before.bp().wrapping_add(16);
                    if !is_exec(ra) || by_frame_pointer && !no_cfi && self.cfa_on_rbx(callee_pc) {
                        true
                    } else if self.is_sigreturn(ra) {
                        false
                    } else if !no_cfi && !reads_bp && !live.get() {
                        self.after_call(ra) == Some(false)
                    } else if no_cfi
                        && regs.sp() == before.bp().wrapping_add(16)
                        && (bp_uncertain || before.bp() < before.sp() || regs.sp() > stack_end)
                    {
                        true
                    } else {
                        // Past the copy too: the live stack may have moved on since the fault,
                        // and a word of a later call there must not pass for this frame's
                        // caller.
                        match self.verify_caller(ra, callee_pc, beyond) {
                            // Where the CFI placed it: the resolver's caller.
                            Verdict::Verified | Verdict::Lazy(_) => false,
                            Verdict::Weak => reads_bp,
                            Verdict::Contradicted | Verdict::NotCall => true,
                        }
                    }
                }
                // The frame-pointer rule (code without CFI) ends at a zero `rbp` as if at an
                // outermost frame; an end the CFI marks does not depend on `rbp`.
                Ok(None)
                    if before.bp() == 0
                        && !live.get()
                        && !self.in_entry_code(address.address()) =>
                {
                    let mut probe = before;
                    probe.set_bp(before.sp());
                    let probed = self
                        .unwinder
                        .unwind_frame(address, &mut probe, cache, &mut |a| read_at(beyond, a));
                    ran_out.set(false);
                    !matches!(probed, Ok(None))
                }
                Ok(None) => false,
                Err(_) => true,
            });
            // Only over the copy: past it the live stack may have moved on since the fault, and
            // a word that is no return address there says so, not that the CFI is missing.
            let stack_ended = beyond.failed && !failed_before;
            if implausible && !stack_ended && !self.in_entry_code(address.address()) {
                let copy_end = sp.saturating_add(stack.len() as u64);
                let mut read =
                    |addr: u64| -> Option<u64> { stack.word(addr.checked_sub(sp)?).ok() };
                // Not for JIT code: where its chain fails, nothing says how large its frame
                // is or which stale words lie in it.
                let found = match is_exec {
                    Some(is_exec) if !live.get() && self.code_at(callee_pc).is_some() => {
                        let by_rbx = self.caller_by_saved_rbx(
                            address,
                            (inner, before.sp()),
                            rbx,
                            &before,
                            &mut read,
                            is_exec,
                            beyond,
                        );
                        match by_rbx {
                            Some(caller) => Some((caller, !bp_uncertain, false)),
                            None => self
                                .scan_for_caller(
                                    cache, &before, callee_pc, copy_end, &mut read, is_exec, beyond,
                                )
                                .map(|(caller, bp_known)| (caller, bp_known, true)),
                        }
                    }
                    _ => None,
                };
                match found {
                    Some((caller, bp_known, scanned)) => {
                        regs = caller;
                        step = Ok(Some(caller.ip()));
                        beyond.scanned |= scanned;
                        bp_uncertain = !bp_known;
                    }
                    None => {
                        // No caller that can be shown to be one: the stack ends here,
                        // truncated, rather than with a guess.
                        log::debug!(
                            "stack cut at {callee_pc:#x} (sp {:#x} bp {:#x}): {step:x?} unverified",
                            before.sp(),
                            before.bp()
                        );
                        beyond.unverified = true;
                        break false;
                    }
                }
            } else if bp_uncertain && matches!(step, Ok(Some(_))) {
                bp_uncertain = !self.bp_use(cache, address, &before).1;
            }
            match step {
                Ok(Some(ra)) => match FrameAddress::from_return_address(ra) {
                    Some(next) => {
                        inner = Some(address);
                        address = next;
                        frames.push(ra);
                        known.fresh.push(KnownFrame::new(ra, &regs, true));
                    }
                    None => break false,
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
                            .unwind_frame(address, &mut probe, cache, &mut |_| Ok(1)),
                        Ok(None)
                    );
                    break marked && !beyond.scanned;
                }
                Err(_) => break false,
            }
        };
        // The live stack is taken only where it leads back onto the previous stack's outer
        // frames (the two paths meet again, at `main` if nowhere else) through code: a live
        // stack that ends elsewhere has moved on since the fault, and its words are no longer
        // this fault's frames.
        if let Some(fallback) = contradicted
            && (joined.is_none()
                || !frames[fallback.frames..]
                    .iter()
                    .all(|&addr| self.in_code(addr)))
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
struct Contradicted {
    at: usize,
    /// `frames.len()` then, the shared frame last.
    frames: usize,
    used: bool,
    failed: bool,
}

/// How far beyond the shared frame the live stack is compared with the previous unwind's
/// return addresses before its frames are taken: one or two reads of the live process.
const AGREE_SPAN: u64 = 4096;

/// A frame of a thread's last unwind: its address and the stack and frame pointers the
/// unwinder had for it.
#[derive(Debug, Clone, Copy)]
struct KnownFrame {
    addr: u64,
    sp: u64,
    /// Whether `addr` is a return address read from just below `sp` (not a signal frame's
    /// interrupted address).
    returned: bool,
}

impl KnownFrame {
    fn new(addr: u64, regs: &UnwindRegsX86_64, returned: bool) -> KnownFrame {
        KnownFrame {
            addr,
            sp: regs.sp(),
            returned,
        }
    }
}

/// The frames of a thread's last complete unwind, to complete its next stack where the sampled
/// copy ends: the outer frames of a deep stack (`main`, a parser's outer levels) rarely change
/// between two faults of a thread, while the live stack the recorder reads later may have
/// returned from them or be gone with the thread.
#[derive(Debug, Clone)]
pub struct KnownFrames {
    /// Outermost first, so that the stack pointers decrease along the vector.
    frames: Vec<KnownFrame>,
    /// How that unwind ended.
    end: UnwindEnd,
    /// Whether `frames` made a stack that reached its thread's entry, as the process
    /// classified it ([`KnownFrames::settle`]): only such frames complete another stack.
    complete: bool,
    /// What the last unwind changed, undone if its stack turns out truncated: a short copy
    /// must not replace the thread's last complete outer frames.
    undo: Undo,
    /// The frames the last unwind replaced (all of them, or those inside the shared frame).
    replaced: Vec<KnownFrame>,
    /// This unwind's frames, innermost first (scratch).
    fresh: Vec<KnownFrame>,
    /// Unwinds completed from the previous one.
    pub spliced: u64,
}

/// How to return to the frames before the last unwind.
#[derive(Debug, Clone, Copy)]
enum Undo {
    Nothing,
    /// Swap `replaced` back, with how that unwind ended.
    Replace {
        end: UnwindEnd,
        complete: bool,
    },
    /// Truncate to `keep` frames and put `replaced` back inside them.
    Rejoin {
        keep: usize,
    },
}

impl Default for KnownFrames {
    fn default() -> KnownFrames {
        KnownFrames {
            frames: Vec::new(),
            end: UnwindEnd::Truncated,
            complete: false,
            undo: Undo::Nothing,
            replaced: Vec::new(),
            fresh: Vec::new(),
            spliced: 0,
        }
    }
}

impl KnownFrames {
    /// The stack pointer of the outermost frame, when these frames reached the thread's
    /// entry: nothing of the thread's stack above it is read.
    pub fn outermost_sp(&self) -> Option<u64> {
        if self.complete {
            self.frames.first().map(|f| f.sp)
        } else {
            None
        }
    }

    /// The index of the frame whose return address `ra` was read just below stack pointer
    /// `sp`, the caller's frame of a frame at (`ra`, `sp`) in the current unwind.
    fn find(&self, ra: u64, sp: u64) -> Option<usize> {
        if !self.complete {
            return None;
        }
        // Stack pointers decrease along `frames`.
        let at = self.frames.partition_point(|f| f.sp > sp);
        self.frames
            .get(at)
            .filter(|f| f.sp == sp && f.addr == ra && f.returned)
            .map(|_| at)
    }

    /// The index of the frame at stack pointer `sp` whose address is a return address, for
    /// a frame at `sp` in the current unwind stopped at another call.
    fn at_sp(&self, sp: u64) -> Option<usize> {
        if !self.complete {
            return None;
        }
        let at = self.frames.partition_point(|f| f.sp > sp);
        self.frames
            .get(at)
            .filter(|f| f.sp == sp && f.returned)
            .map(|_| at)
    }

    /// The frames of the last unwind from the caller whose frame begins at `cfa` outward,
    /// innermost first, if that unwind reached its thread's entry and the frame inside that
    /// caller is at a code address within 64 KiB of `inner`: the frame of a fault whose
    /// copy was empty, still running (or its successor at the same place in the same caller).
    pub fn callers_at(&self, cfa: u64, inner: u64) -> Option<impl Iterator<Item = u64> + '_> {
        let at = self.at_sp(cfa)?;
        let inside = self.frames.get(at + 1)?;
        if inside.addr.abs_diff(inner) > 0x10000 {
            return None;
        }
        Some(self.frames[..=at].iter().rev().map(|f| f.addr))
    }

    /// Whether the live stack holds the return addresses of the frames outside frame `at`
    /// (over [`AGREE_SPAN`] bytes), or cannot be read (the thread is gone): the same return
    /// address at the same stack address may have been reached through other callers, which
    /// the live stack shows while the thread is still in that call.
    fn agrees(&self, at: usize, live: &mut LiveStack) -> bool {
        let Some(shared) = self.frames.get(at) else {
            return true;
        };
        for frame in self.frames[..at].iter().rev() {
            // A signal frame's address was not pushed by a call.
            if !frame.returned || frame.sp.saturating_sub(shared.sp) > AGREE_SPAN {
                break;
            }
            match live.peek(frame.sp.wrapping_sub(8)) {
                Some(word) if word == frame.addr => {}
                Some(_) => return false,
                None => break,
            }
        }
        true
    }

    /// Says whether the stack of the last unwind reached its thread's entry. If it did not
    /// and the frames before it did, those stay the ones to complete the next stack from.
    pub fn settle(&mut self, complete: bool) {
        match std::mem::replace(&mut self.undo, Undo::Nothing) {
            _ if complete => self.complete = true,
            Undo::Nothing => {}
            Undo::Replace {
                end,
                complete: true,
            } => {
                std::mem::swap(&mut self.frames, &mut self.replaced);
                self.end = end;
                self.complete = true;
            }
            Undo::Replace { .. } => self.complete = false,
            Undo::Rejoin { keep } => {
                self.frames.truncate(keep);
                self.frames.append(&mut self.replaced);
            }
        }
    }

    /// The frames a child forked by this thread starts with: its stack is a copy of this
    /// thread's, at the same addresses.
    pub fn forked(&self) -> KnownFrames {
        if !self.complete {
            return KnownFrames::default();
        }
        KnownFrames {
            frames: self.frames.clone(),
            end: self.end,
            complete: true,
            ..KnownFrames::default()
        }
    }
}

/// Reads the part of a thread's stack that lies beyond the sampled copy from the live process.
///
/// The copy in each sample covers the innermost frames, which change all the time; the outer
/// frames (`main`, a thread's start routine, a long-running loop) are still in place when the
/// recorder reads them microseconds later, because the thread is still inside those calls.
/// This keeps the per-fault copy small (the kernel copies the whole requested size on every
/// fault) while stacks still reach their outermost frame. Reads that fail (the process is
/// gone) end the unwind as truncated.
pub struct LiveStack {
    pid: i32,
    /// The stack mapping of the sampled thread: reads outside it are refused, so that a bad
    /// unwind rule cannot make the recorder touch (and fault in) other memory of the program.
    bounds: (u64, u64),
    base: u64,
    len: usize,
    chunk: Box<[u8; LIVE_CHUNK]>,
    /// Whether any word came from the live process during the current unwind.
    pub used: bool,
    /// Whether a word was needed that neither the copy nor the live process had.
    pub failed: bool,
    /// Whether a caller was found by searching the stack, verified
    /// ([`AddressSpaceUnwinder::unwind_thread`]).
    pub scanned: bool,
    /// Whether the unwind stopped at a frame whose caller could not be verified (or JIT code
    /// without a frame chain): the stack is truncated there rather than guessed.
    pub unverified: bool,
}

const LIVE_CHUNK: usize = 4096;

impl LiveStack {
    /// A reader for process `pid`; a pid of 0 makes every read fail (exact copies only).
    pub fn new(pid: u32) -> LiveStack {
        LiveStack {
            pid: pid as i32,
            bounds: (0, 0),
            base: 0,
            len: 0,
            chunk: Box::new([0; LIVE_CHUNK]),
            used: false,
            failed: false,
            scanned: false,
            unverified: false,
        }
    }

    /// Whether this reader reads the live process at all (not for exact stacks).
    pub fn reads(&self) -> bool {
        self.pid > 0
    }

    /// Forgets what was read (the stack may have changed since) and sets the stack mapping
    /// that reads are confined to.
    pub fn reset(&mut self, bounds: (u64, u64)) {
        self.bounds = bounds;
        self.len = 0;
        self.used = false;
        self.failed = false;
        self.scanned = false;
        self.unverified = false;
    }

    fn read(&mut self, addr: u64) -> Option<u64> {
        let word = self.read_word(addr);
        self.used |= word.is_some();
        self.failed |= word.is_none();
        word
    }

    /// Reads a word to check a stack against, not to unwind over: neither `used` nor
    /// `failed` changes.
    fn peek(&mut self, addr: u64) -> Option<u64> {
        self.read_word(addr)
    }

    /// Reads a word of the process outside its stack, a GOT slot a PLT stub jumps through,
    /// to check a call against (data the dynamic loader wrote: no page is faulted in).
    /// Neither `used` nor `failed` changes.
    fn read_data(&mut self, addr: u64) -> Option<u64> {
        if self.pid <= 0 {
            return None;
        }
        let mut word = [0u8; 8];
        let local = libc::iovec {
            iov_base: word.as_mut_ptr().cast(),
            iov_len: word.len(),
        };
        let remote = libc::iovec {
            iov_base: addr as *mut libc::c_void,
            iov_len: word.len(),
        };
        // SAFETY: `local` describes our own 8-byte buffer; the kernel checks the remote range
        // and returns an error if it is not mapped.
        let n = unsafe { libc::process_vm_readv(self.pid, &local, 1, &remote, 1, 0) };
        (n == 8).then(|| u64::from_ne_bytes(word))
    }

    fn read_word(&mut self, addr: u64) -> Option<u64> {
        if self.pid <= 0 || addr < self.bounds.0 || addr + 8 > self.bounds.1 {
            return None;
        }
        if !(self.base <= addr && addr + 8 <= self.base + self.len as u64) {
            let base =
                (addr & !(LIVE_CHUNK as u64 - 1)).max(self.bounds.0 & !(LIVE_CHUNK as u64 - 1));
            let local = libc::iovec {
                iov_base: self.chunk.as_mut_ptr().cast(),
                iov_len: LIVE_CHUNK,
            };
            let remote = libc::iovec {
                iov_base: base as *mut libc::c_void,
                iov_len: LIVE_CHUNK,
            };
            // SAFETY: `local` describes our own buffer of LIVE_CHUNK bytes; the kernel checks
            // the remote range and returns an error if it is not mapped.
            let n = unsafe { libc::process_vm_readv(self.pid, &local, 1, &remote, 1, 0) };
            if n <= 0 {
                self.len = 0;
                return None;
            }
            self.base = base;
            self.len = n as usize;
            if addr + 8 > base + n as u64 {
                return None;
            }
        }
        let offset = (addr - self.base) as usize;
        let mut word = [0; 8];
        word.copy_from_slice(&self.chunk[offset..offset + 8]);
        Some(u64::from_ne_bytes(word))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn elf_with_segments(segments: Vec<(u64, u64, u64)>) -> ElfFile {
        ElfFile {
            file: Arc::new(
                memmap2::MmapMut::map_anon(1)
                    .expect("anonymous map")
                    .make_read_only()
                    .expect("read-only"),
            ),
            sections: Vec::new(),
            segments,
            build_id: String::new(),
            functions: OnceLock::new(),
        }
    }

    /// A stack of frame-pointer records in our own memory (the unwinder falls back to frame
    /// pointers where it knows no module), read by the live reader through our own pid.
    struct FakeStack {
        mem: memmap2::MmapMut,
    }

    /// Return addresses of the fake code (all inside one mapping the unwinder knows).
    const CODE: Range<u64> = 0x40_0000..0x50_0000;
    const IP: u64 = 0x40_0100;
    const MAIN: u64 = 0x40_9000;
    /// Words between two frame records: 512-byte frames.
    const FRAME_WORDS: usize = 64;

    impl FakeStack {
        /// Frames calling `ras` (innermost first); the outermost record ends the chain.
        fn new(ras: &[u64]) -> FakeStack {
            let mem = memmap2::MmapMut::map_anon(16384).expect("anonymous map");
            let mut stack = FakeStack { mem };
            stack.write(ras);
            stack
        }

        /// The thread's stack now holds frames calling `ras`, at the same addresses.
        fn write(&mut self, ras: &[u64]) {
            let base = self.sp();
            let word = |k: usize| 8 + FRAME_WORDS * k;
            for (k, &ra) in ras.iter().enumerate() {
                let next = if k + 1 < ras.len() {
                    base + 8 * word(k + 1) as u64
                } else {
                    0
                };
                let at = 8 * word(k);
                self.mem[at..at + 8].copy_from_slice(&next.to_ne_bytes());
                self.mem[at + 8..at + 16].copy_from_slice(&ra.to_ne_bytes());
            }
        }

        fn sp(&self) -> u64 {
            self.mem.as_ptr() as u64
        }

        fn regs(&self) -> (u64, u64, u64) {
            (IP, self.sp(), self.sp() + 64)
        }

        /// The copy up to (not including) the return address of the frame record `k`.
        fn copy_to(&self, k: usize) -> &[u8] {
            &self.mem[..8 * (8 + FRAME_WORDS * k) + 8]
        }

        fn live(&self, readable: bool) -> LiveStack {
            let mut live = LiveStack::new(if readable { std::process::id() } else { 0 });
            live.reset((self.sp(), self.sp() + self.mem.len() as u64));
            live
        }
    }

    fn unwinder() -> AddressSpaceUnwinder {
        let mut unwinder = AddressSpaceUnwinder::default();
        unwinder.code.push(MappedCode {
            range: CODE,
            elf: Arc::new(elf_with_segments(Vec::new())),
            offset: 0,
            bias: 0,
        });
        unwinder
    }

    fn unwind(
        unwinder: &AddressSpaceUnwinder,
        stack: &FakeStack,
        copy: &[u8],
        readable: bool,
        known: &mut KnownFrames,
    ) -> (Vec<u64>, UnwindEnd) {
        unwind_copy(unwinder, stack, copy.into(), readable, known)
    }

    fn unwind_copy(
        unwinder: &AddressSpaceUnwinder,
        stack: &FakeStack,
        copy: StackBytes<'_>,
        readable: bool,
        known: &mut KnownFrames,
    ) -> (Vec<u64>, UnwindEnd) {
        let mut frames = Vec::new();
        let mut live = stack.live(readable);
        let end = unwinder.unwind_thread(
            &mut CacheX86_64::new(),
            stack.regs(),
            None,
            copy,
            &mut live,
            Some(&|_| true),
            known,
            &mut frames,
        );
        known.settle(end == UnwindEnd::Complete);
        (frames, end)
    }

    /// Where the copy ends, the thread's previous complete stack gives the outer frames while
    /// the live stack agrees with it or is gone; where the live stack holds another caller at
    /// the same place (the same return address at the same stack address, reached through
    /// `via_b` instead of `via_a`), the live stack's frames are taken.
    #[test]
    fn outer_frames_come_from_the_previous_stack_unless_the_live_stack_contradicts_it() {
        let (r1, r2, r3, via_a, via_b) = (0x40_1005, 0x40_2005, 0x40_3005, 0x40_4005, 0x40_5005);
        let unwinder = unwinder();
        let mut stack = FakeStack::new(&[r1, r2, r3, via_a, MAIN]);
        let whole_a = [IP, r1, r2, r3, via_a, MAIN];
        let whole_b = [IP, r1, r2, r3, via_b, MAIN];

        let mut known = KnownFrames::default();
        let first = unwind(&unwinder, &stack, &stack.mem, false, &mut known);
        assert_eq!(first, (whole_a.to_vec(), UnwindEnd::Complete));
        // Copy short, live stack gone: the previous stack's outer frames.
        let gone = unwind(&unwinder, &stack, stack.copy_to(2), false, &mut known);
        assert_eq!(gone, (whole_a.to_vec(), UnwindEnd::Complete));
        assert_eq!(known.spliced, 1);
        // Copy short, live stack agreeing: the same, checked.
        let agreed = unwind(&unwinder, &stack, stack.copy_to(2), true, &mut known);
        assert_eq!(agreed, (whole_a.to_vec(), UnwindEnd::Complete));
        assert_eq!(known.spliced, 2);
        // Another caller in the live stack: not `via_a`. (The live unwind joins the previous
        // stack again at `main`, where the two agree.)
        stack.write(&[r1, r2, r3, via_b, MAIN]);
        let other = unwind(&unwinder, &stack, stack.copy_to(2), true, &mut known);
        assert_eq!(other, (whole_b.to_vec(), UnwindEnd::Complete));
        assert_eq!(known.spliced, 3);
        // A live stack that does not lead back to the previous one (the thread moved on: its
        // words are no frames now) contradicts it without an alternative: spliced.
        stack.write(&[r1, r2, r3, 0x77, 0x88]);
        let spliced = unwind(&unwinder, &stack, stack.copy_to(2), true, &mut known);
        assert_eq!(spliced, (whole_b.to_vec(), UnwindEnd::Complete));
        assert_eq!(known.spliced, 4);
    }

    /// A truncated stack does not replace the thread's last complete frames: the next stack
    /// still completes from those.
    #[test]
    fn a_truncated_stack_keeps_the_previous_complete_frames() {
        let (r1, r2, r3, caller) = (0x40_1005, 0x40_2005, 0x40_3005, 0x40_4005);
        let unwinder = unwinder();
        let stack = FakeStack::new(&[r1, r2, r3, caller, MAIN]);
        let whole = [IP, r1, r2, r3, caller, MAIN];
        let mut known = KnownFrames::default();
        unwind(&unwinder, &stack, &stack.mem, false, &mut known);
        // Another thread state, whose copy ends before any frame the previous stack had and
        // whose live stack is gone: truncated.
        let elsewhere = FakeStack::new(&[0x40_6005, 0x40_7005, 0x40_8005, MAIN]);
        let (_, end) = unwind(
            &unwinder,
            &elsewhere,
            elsewhere.copy_to(0),
            false,
            &mut known,
        );
        assert_eq!(end, UnwindEnd::Truncated);
        let next = unwind(&unwinder, &stack, stack.copy_to(2), false, &mut known);
        assert_eq!(next, (whole.to_vec(), UnwindEnd::Complete));
        // A forked child starts from them too.
        let mut child = known.forked();
        let forked = unwind(&unwinder, &stack, stack.copy_to(1), false, &mut child);
        assert_eq!(forked, (whole.to_vec(), UnwindEnd::Complete));
    }

    /// A return address found for the dynamic loader's resolver is its caller only with what
    /// the PLT pushed below it: the lazy entry's relocation index, then the object's link map
    /// (the word of its GOT slot, read from the process, here our own). A stale return
    /// address of another call through the PLT has another index, or another object's map.
    #[test]
    fn a_lazy_call_leaves_its_index_and_link_map_below_the_return_address() {
        let link_map_word: Box<u64> = Box::new(0x7f00_dead_b000);
        let slot = &*link_map_word as *const u64 as u64;
        let lazy = LazyCall {
            index: 3,
            link_map: slot,
        };
        let unwinder = unwinder();
        let mut live = LiveStack::new(std::process::id());
        let ra_at = 0x1000;
        let check = |words: [u64; 2], live: &mut LiveStack| {
            let mut read = |addr: u64| match addr {
                0xff0 => Some(words[0]),
                0xff8 => Some(words[1]),
                _ => None,
            };
            unwinder.lazy_frame_holds(lazy, ra_at, &mut read, live)
        };
        assert!(check([0x7f00_dead_b000, 3], &mut live));
        assert!(
            !check([0x7f00_dead_b000, 4], &mut live),
            "another entry's index"
        );
        assert!(
            !check([0x7f00_beef_b000, 3], &mut live),
            "another object's map"
        );
        // The process gone: the link map cannot be checked.
        assert!(!check([0x7f00_dead_b000, 3], &mut LiveStack::new(0)));
        drop(link_map_word);
    }

    /// A zero word where a return address should be (a live stack that moved on, a stale
    /// word) ends the unwind without making it complete, and the thread's known frames stay
    /// those of its last complete stack; the end of a frame chain still completes it.
    #[test]
    fn a_zero_return_address_is_no_end() {
        let (r1, r2, r3) = (0x40_1005, 0x40_2005, 0x40_3005);
        let unwinder = unwinder();
        let whole = FakeStack::new(&[r1, r2, r3, MAIN]);
        let mut known = KnownFrames::default();
        let complete = unwind(&unwinder, &whole, &whole.mem, false, &mut known);
        assert_eq!(complete, (vec![IP, r1, r2, r3, MAIN], UnwindEnd::Complete));
        let zero = FakeStack::new(&[r1, r2, 0, MAIN]);
        let (frames, end) = unwind(&unwinder, &zero, &zero.mem, false, &mut known);
        assert_eq!((frames, end), (vec![IP, r1, r2], UnwindEnd::Stopped));
        assert!(known.complete);
        assert_eq!(
            known.frames.len(),
            4,
            "the complete stack's frames, not the short one's"
        );
    }

    /// A word in a hole of the copy (a page it could not read, whose bytes the program zeroes)
    /// is a failed read: neither a zero return address that would end the stack, nor a word
    /// read from the live process (which has moved on since the fault). Past the hole, the
    /// copy is read as ever.
    #[test]
    fn a_word_in_a_hole_of_the_copy_is_never_read() {
        let (r1, r2, r3) = (0x40_1005, 0x40_2005, 0x40_3005);
        let unwinder = unwinder();
        let stack = FakeStack::new(&[r1, r2, r3, MAIN]);
        // Frame records lie at bytes 64, 576, 1088 (the one holding r3) and 1600, 16 each.
        let mut copy = stack.mem.to_vec();
        copy[1024..1536].fill(0);
        let holed = StackBytes {
            bytes: &copy,
            holes: Holes::new(&[(1024, 1536)]).expect("holes"),
        };
        let mut known = KnownFrames::default();
        let (frames, end) = unwind_copy(&unwinder, &stack, holed, true, &mut known);
        assert_eq!((frames, end), (vec![IP, r1, r2], UnwindEnd::Truncated));
        // A hole that holds no word of the chain changes nothing.
        let mut copy = stack.mem.to_vec();
        copy[1152..1536].fill(0);
        let apart = StackBytes {
            bytes: &copy,
            holes: Holes::new(&[(1152, 1536)]).expect("holes"),
        };
        let mut known = KnownFrames::default();
        let whole = unwind_copy(&unwinder, &stack, apart, false, &mut known);
        assert_eq!(whole, (vec![IP, r1, r2, r3, MAIN], UnwindEnd::Complete));
        // Holes out of order, overlapping, empty or too many are refused.
        assert!(Holes::new(&[(8, 16), (0, 8)]).is_none());
        assert!(Holes::new(&[(0, 16), (8, 24)]).is_none());
        assert!(Holes::new(&[(8, 8)]).is_none());
        assert!(Holes::new(&[(0, 8), (16, 24), (32, 40), (48, 56), (64, 72)]).is_none());
    }

    /// lld layout: r-- segment at offset 0 whose file range runs into the page where the r-x
    /// segment (offset 0x13000, address 0x14000) starts. The bias must come from the r-x one.
    #[test]
    fn bias_uses_the_segment_starting_in_the_mapped_page() {
        let elf = elf_with_segments(vec![(0, 0, 0x13e14), (0x13e20, 0x14e20, 0x3e000)]);
        assert_eq!(elf.bias(0x5555_0001_4000, 0x13000), Some(0x5555_0000_0000));
        // gcc/ld layout: offsets equal addresses.
        let elf = elf_with_segments(vec![(0, 0, 0x600), (0x1000, 0x1000, 0x200)]);
        assert_eq!(elf.bias(0x5555_0000_1000, 0x1000), Some(0x5555_0000_0000));
    }
}
