//! The ELF files unwinding needs, parsed once per recording and shared between processes:
//! their unwind sections, segments, build ID, entry point and exported functions.

use std::collections::HashMap;
use std::ops::{Deref, Range};
use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};

use framehop::ExplicitModuleSectionInfo;
use memmap2::Mmap;
use object::{Object, ObjectSection, ObjectSegment, ObjectSymbol};

use fltrace_trace::{FileOffset, VirtAddr};

use super::calls::{self, FunctionIndex};

/// Bytes of a section of a mapped file, kept alive by a shared reference to the mapping.
#[derive(Clone)]
pub struct SectionBytes {
    pub(super) file: Arc<Mmap>,
    pub(super) range: Range<usize>,
}

impl Deref for SectionBytes {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        &self.file[self.range.clone()]
    }
}

/// What unwinding needs of one ELF file.
pub(super) struct ElfFile {
    pub(super) file: Arc<Mmap>,
    /// (name, address range, file range) of the unwind-relevant sections.
    pub(super) sections: Vec<(&'static [u8], Range<u64>, Range<usize>)>,
    /// (file offset, virtual address, file size) of each loadable segment.
    pub(super) segments: Vec<(u64, u64, u64)>,
    pub(super) build_id: String,
    /// Its functions, CFI ranges and PLT, read when a call into it is first checked.
    pub(super) functions: OnceLock<FunctionIndex>,
}

impl ElfFile {
    pub(super) fn load(path: &Path) -> Option<ElfFile> {
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
    pub(super) fn vdso() -> Option<ElfFile> {
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

    pub(super) fn parse(map: Arc<Mmap>) -> Option<ElfFile> {
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

    pub(super) fn functions(&self) -> &FunctionIndex {
        self.functions
            .get_or_init(|| FunctionIndex::read(&self.file))
    }

    /// The load bias of a mapping of this file at `start` from file offset `pgoff`.
    ///
    /// NB: the segment is the one whose page-aligned file offset is `pgoff`; with lld's layout
    /// the previous segment's file range can end inside that same page, and choosing it would
    /// shift every address by a page.
    pub(super) fn bias(&self, start: u64, pgoff: u64) -> Option<u64> {
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
    pub(super) fn cfi_row(&self, svma: u64) -> Option<calls::CfiRow> {
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

    pub(super) fn section_info(&self) -> ExplicitModuleSectionInfo<SectionBytes> {
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

pub(super) fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// The name of the vDSO's mapping, under which [`ElfCache`] keeps the kernel's vDSO image.
pub const VDSO: &str = "[vdso]";

/// Parsed ELF files, keyed by the path they were opened from.
#[derive(Default)]
pub struct ElfCache {
    pub(super) files: HashMap<PathBuf, Option<Arc<ElfFile>>>,
}

impl ElfCache {
    pub(super) fn get(&mut self, path: &Path) -> Option<Arc<ElfFile>> {
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
