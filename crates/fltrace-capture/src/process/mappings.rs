//! The mapping model of a process: its live mappings as the kernel reports them (made, cut,
//! grown or moved), what an access they do not allow is, and where its threads' stacks lie.

use fltrace_trace::{Mapping, VirtAddr, libraries};

use super::Process;
use crate::unwind::ElfCache;

/// The arguments of an `mremap` call, kept from its entry until its return.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RemapCall {
    pub old_start: u64,
    pub old_len: u64,
    pub new_len: u64,
}

impl Process {
    pub(super) fn record_mapping(&mut self, mapping: Mapping) {
        self.image_recorded = true;
        match &mut self.executable {
            None if mapping.is_file() => {
                self.executable = Some((mapping.path.clone(), mapping.end));
            }
            // Its other segments, and the bss the kernel maps right after them.
            Some((path, end))
                if *path == mapping.path || (mapping.path == "//anon" && mapping.start == *end) =>
            {
                *end = (*end).max(mapping.end);
            }
            _ => {}
        }
        // A new mapping replaces what it overlaps, as in the kernel.
        self.cut(mapping.start, mapping.end);
        self.maps.insert(mapping.start, mapping);
    }

    /// Removes `start..end` from the model: the parts of older mappings outside it stay, so
    /// the model (and `procmaps`) follow `/proc/PID/maps`. Touches only the mappings it
    /// overlaps: constant time for a program that maps and unmaps at one address.
    fn cut(&mut self, start: VirtAddr, end: VirtAddr) {
        let overlapped: Vec<VirtAddr> = self
            .maps
            .range(..end)
            .rev()
            .take_while(|(_, m)| m.end > start)
            .map(|(at, _)| *at)
            .collect();
        for at in overlapped {
            let Some(old) = self.maps.remove(&at) else {
                continue;
            };
            if old.end > end {
                let right = Mapping {
                    start: end,
                    pgoff: old.file_offset(end),
                    ..old.clone()
                };
                self.maps.insert(right.start, right);
            }
            if old.start < start {
                let left = Mapping { end: start, ..old };
                self.maps.insert(left.start, left);
            }
        }
    }

    /// A `munmap(addr, len)` call: the model forgets the range, so its memory follows the
    /// live mappings, not the mappings ever made. Read at the call's entry: the kernel fails
    /// it only for an unaligned address or a zero length (left alone here) or when out of
    /// memory splitting a mapping.
    pub fn unmap(&mut self, addr: u64, len: u64) {
        const PAGE: u64 = 4096;
        if !addr.is_multiple_of(PAGE) || len == 0 {
            return;
        }
        let end = addr.saturating_add(len.next_multiple_of(PAGE));
        self.cut(VirtAddr::new(addr), VirtAddr::new(end));
    }

    /// Whether an anonymous mapping is the heap that `brk` grows. The kernel names it `[heap]`
    /// in its records only once the break has moved (`vma_is_initial_heap`), so the first
    /// growth, the only one of most programs, arrives as `//anon`. The break starts above the
    /// executable's bss, at a random offset below 1 GiB (x86-64 `arch_randomize_brk`), where
    /// no other mapping goes unless placed there on purpose.
    fn is_initial_heap(&self, mapping: &Mapping) -> bool {
        const BRK_RANDOM_RANGE: u64 = 1 << 30;
        mapping.path == "//anon"
            && !mapping.is_exec()
            && self.executable.as_ref().is_some_and(|(_, end)| {
                mapping.start > *end && mapping.start - *end <= BRK_RANDOM_RANGE
            })
    }

    /// A new mapping reported by the kernel. `root` is where the process sees `/`.
    pub fn map(
        &mut self,
        mut mapping: Mapping,
        elf_cache: &mut ElfCache,
    ) -> Result<(), fltrace_trace::Error> {
        mapping.generation = self.generation;
        if self.is_initial_heap(&mapping) {
            mapping.path = "[heap]".to_owned();
        }
        if mapping.path == crate::unwind::VDSO && mapping.is_exec() {
            // Code without a file, but an ELF image with CFI: `clock_gettime`'s frames unwind
            // by it rather than as JIT code (a chain its code does not keep).
            self.unwinder.add_mapping(
                elf_cache,
                &mapping,
                std::path::Path::new(crate::unwind::VDSO),
            );
        }
        if mapping.is_file() {
            let file = crate::unwind::mapped_file(self.os_pid, &mapping.path);
            // Every file mapping carries its build ID (the kernel's, else read here), so that a
            // recording can be symbolized and archived after the files change.
            if mapping.build_id.is_empty() {
                mapping.build_id = elf_cache.build_id(&file);
            }
            if mapping.is_exec() {
                self.unwinder.add_mapping(elf_cache, &mapping, &file);
                // HotSpot's compiled Java code keeps a frame-pointer chain only with
                // -XX:+PreserveFramePointer: without it, stacks stop at JIT frames.
                if mapping.path.ends_with("/libjvm.so")
                    && !crate::procfs::jvm_preserves_frame_pointer(self.os_pid)
                {
                    self.unwinder.distrust_jit();
                }
                if let Some(entry) = elf_cache.entry_point(&file, mapping.start, mapping.pgoff)
                    && mapping.contains(VirtAddr::new(entry))
                {
                    self.entries.push(entry);
                    self.unwinder.add_entry(entry);
                }
                if libraries::is_preload(&mapping.path) {
                    self.interposers.extend(elf_cache.exported_functions(
                        &file,
                        mapping.start,
                        mapping.pgoff,
                    ));
                }
            }
        }
        self.out.mmaps.push(mapping.clone())?;
        self.tell_mapped(&mapping);
        self.record_mapping(mapping);
        Ok(())
    }

    /// An `mremap` that returned `new_start`: perf reports no mapping for it, so the mapping
    /// it grew or moved to is derived from the one at `call.old_start`, with its protection,
    /// flags and file. A shrink adds no address and is left alone, as is a call on memory
    /// the model does not know.
    pub fn remap(
        &mut self,
        call: &RemapCall,
        new_start: u64,
        time_ns: u64,
        elf_cache: &mut ElfCache,
    ) -> Result<(), fltrace_trace::Error> {
        const PAGE: u64 = 4096;
        let new_len = call.new_len.next_multiple_of(PAGE);
        let moved = new_start != call.old_start;
        if !moved && new_len <= call.old_len {
            return Ok(());
        }
        let Some(old) = self.mapping_at(VirtAddr::new(call.old_start)) else {
            return Ok(());
        };
        let offset_in_old = call.old_start - old.start.get();
        // Grown in place, the kernel extends the old mapping; moved, the part from
        // `old_start` becomes a mapping of its own.
        let (start, pgoff) = if moved {
            (new_start, old.pgoff.get() + offset_in_old)
        } else {
            (old.start.get(), old.pgoff.get())
        };
        let mapping = Mapping {
            time_ns,
            start: VirtAddr::new(start),
            end: VirtAddr::new(new_start + new_len),
            pgoff: fltrace_trace::FileOffset::new(pgoff),
            ..old.clone()
        };
        self.map(mapping, elf_cache)
    }

    /// Whether the access of a fault at `addr` with x86 error code `error_code` is one the
    /// mappings do not allow: no mapping holds the address (and it is no growth of the main
    /// thread's stack), its protection forbids the access, or a protection key does. Nothing
    /// is said while no mapping is known.
    pub(super) fn access_denied(&self, addr: VirtAddr, error_code: u64) -> bool {
        const WRITE: u64 = 2;
        const INSTR: u64 = 16;
        const PROTECTION_KEY: u64 = 32;
        // The legacy vsyscall page, which the kernel emulates, has no mapping record.
        const VSYSCALL: std::ops::Range<u64> = 0xffff_ffff_ff60_0000..0xffff_ffff_ff60_1000;
        if error_code & PROTECTION_KEY != 0 {
            return true;
        }
        if self.maps.is_empty() || VSYSCALL.contains(&addr.get()) {
            return false;
        }
        let (read, write, exec) = (
            libc::PROT_READ as u32,
            libc::PROT_WRITE as u32,
            libc::PROT_EXEC as u32,
        );
        match self.mapping_at(addr) {
            Some(m) if error_code & INSTR != 0 => m.prot & exec == 0,
            Some(m) if error_code & WRITE != 0 => m.prot & write == 0,
            // On x86 a writable or executable page is readable.
            Some(m) => m.prot & (read | write | exec) == 0,
            None => self.stack_bounds(addr.get()) == (0, 0),
        }
    }

    /// The live mapping that starts at `start`.
    pub fn mapping_starting(&self, start: VirtAddr) -> Option<&Mapping> {
        self.maps.get(&start)
    }

    pub(super) fn mapping_at(&self, addr: VirtAddr) -> Option<&Mapping> {
        self.maps
            .range(..=addr)
            .next_back()
            .map(|(_, m)| m)
            .filter(|m| m.contains(addr))
    }

    /// The stack mapping `sp` lies in, which live reads are confined to. The main thread's
    /// stack grows down without a mapping record: a stack pointer below the `[stack]` the
    /// model knows, within [`STACK_GROWTH`], is on that stack grown.
    pub(super) fn stack_bounds(&self, sp: u64) -> (u64, u64) {
        if let Some(m) = self.mapping_at(VirtAddr::new(sp)) {
            return (m.start.get(), m.end.get());
        }
        match self.maps.range(VirtAddr::new(sp)..).next() {
            Some((start, m)) if m.path == "[stack]" && start.get() - sp <= STACK_GROWTH => {
                (sp & !0xfff, m.end.get())
            }
            _ => (0, 0),
        }
    }
}

/// How far below its lowest recorded address the main thread's stack may have grown (the
/// kernel's default `RLIMIT_STACK` is 8 MiB; a larger limit is rare).
const STACK_GROWTH: u64 = 64 << 20;
