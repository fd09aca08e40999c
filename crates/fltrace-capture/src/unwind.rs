//! DWARF CFI unwinding of sampled user stacks with framehop, and the ELF files it needs.
//!
//! Each executable mapping becomes a framehop module whose unwind sections are read from the
//! mapped file. Files are parsed once per recording and shared between processes.

use std::collections::HashMap;
use std::ops::{Deref, Range};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use framehop::x86_64::{CacheX86_64, UnwindRegsX86_64, UnwinderX86_64};
use framehop::{ExplicitModuleSectionInfo, Module, Unwinder as _};
use memmap2::Mmap;
use object::{Object, ObjectSection, ObjectSegment};

use fltrace_trace::Mapping;

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
}

impl ElfFile {
    fn load(path: &Path) -> Option<ElfFile> {
        let file = std::fs::File::open(path).ok()?;
        // SAFETY: the file is mapped read-only; if another process truncates it while we
        // read, we may get SIGBUS, the accepted risk of every tool that maps binaries
        // (perf, samply, blazesym do the same).
        let map = Arc::new(unsafe { Mmap::map(&file) }.ok()?);
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
        })
    }

    /// The load bias of a mapping of this file at `start` from file offset `pgoff`.
    fn bias(&self, start: u64, pgoff: u64) -> Option<u64> {
        let page_mask = !(crate::ring::page_size() as u64 - 1);
        self.segments.iter().find_map(|&(offset, vaddr, size)| {
            let seg_page = offset & page_mask;
            (seg_page <= pgoff && pgoff < offset + size.max(1))
                .then(|| start.wrapping_sub(vaddr.wrapping_sub(offset).wrapping_add(pgoff)))
        })
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

/// Parsed ELF files, keyed by the path they were opened from.
#[derive(Default)]
pub struct ElfCache {
    files: HashMap<PathBuf, Option<Arc<ElfFile>>>,
}

impl ElfCache {
    fn get(&mut self, path: &Path) -> Option<Arc<ElfFile>> {
        self.files
            .entry(path.to_owned())
            .or_insert_with(|| ElfFile::load(path).map(Arc::new))
            .clone()
    }

    /// The build ID of the file at `path`, hex, or empty.
    pub fn build_id(&mut self, path: &Path) -> String {
        self.get(path)
            .map(|f| f.build_id.clone())
            .unwrap_or_default()
    }
}

/// Why an unwind stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UnwindEnd {
    /// It reached the outermost frame.
    Complete,
    /// It could not go further (the stack copy ended, or no unwind rule applied).
    Truncated,
}

/// The unwinder of one address space.
#[derive(Clone, Default)]
pub struct AddressSpaceUnwinder {
    unwinder: UnwinderX86_64<SectionBytes>,
}

/// Frames beyond this are dropped (a runaway recursion or a corrupt stack).
pub const MAX_FRAMES: usize = 512;

impl AddressSpaceUnwinder {
    /// Adds an executable mapping; `file` is where its bytes can be read (the mapping's
    /// path, possibly seen through `/proc/PID/root`).
    pub fn add_mapping(&mut self, cache: &mut ElfCache, mapping: &Mapping, file: &Path) {
        let Some(elf) = cache.get(file) else {
            return;
        };
        let Some(bias) = elf.bias(mapping.start, mapping.pgoff) else {
            return;
        };
        let module = Module::new(
            mapping.path.clone(),
            mapping.start..mapping.end,
            bias,
            elf.section_info(),
        );
        self.unwinder.add_module(module);
    }

    /// Unwinds from the sampled registers over the sampled stack bytes (which start at `sp`),
    /// appending frame addresses to `frames`, innermost first.
    pub fn unwind(
        &self,
        cache: &mut CacheX86_64,
        (ip, sp, bp): (u64, u64, u64),
        stack: &[u8],
        frames: &mut Vec<u64>,
    ) -> UnwindEnd {
        let mut read_stack = |addr: u64| {
            let offset = addr.checked_sub(sp).ok_or(())? as usize;
            let bytes = stack.get(offset..offset + 8).ok_or(())?;
            let mut word = [0; 8];
            word.copy_from_slice(bytes);
            Ok(u64::from_ne_bytes(word))
        };
        let regs = UnwindRegsX86_64::new(ip, sp, bp);
        let mut iter = self.unwinder.iter_frames(ip, regs, cache, &mut read_stack);
        loop {
            match iter.next() {
                Ok(Some(frame)) if frames.len() < MAX_FRAMES => frames.push(frame.address()),
                Ok(None) => return UnwindEnd::Complete,
                Ok(Some(_)) | Err(_) => return UnwindEnd::Truncated,
            }
        }
    }
}
