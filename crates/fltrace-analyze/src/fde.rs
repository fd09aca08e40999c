//! Function bounds of stripped code from its unwind tables: every function the compiler
//! emitted unwind info for has an FDE in `.eh_frame` (or `.debug_frame`) giving its address
//! range, even where no symbol names it (a distribution's stripped `static` functions).

use gimli::{BaseAddresses, CieOrFde, DebugFrame, EhFrame, RunTimeEndian, UnwindSection};
use object::{Object, ObjectSection};

/// The sorted, non-overlapping `[start, end)` address ranges of a file's FDEs.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub(crate) struct FunctionRanges {
    ranges: Vec<(u64, u64)>,
}

impl FunctionRanges {
    /// The ranges of the ELF file in `data`: from `.eh_frame`, else `.debug_frame`; none when
    /// it has neither or they do not parse.
    pub(crate) fn of_elf(data: &[u8]) -> FunctionRanges {
        let Ok(file) = object::File::parse(data) else {
            return FunctionRanges::default();
        };
        let endian = if file.is_little_endian() {
            RunTimeEndian::Little
        } else {
            RunTimeEndian::Big
        };
        let address_size = if file.is_64() { 8 } else { 4 };
        let mut ranges = Vec::new();
        if let Some(section) = file.section_by_name(".eh_frame")
            && let Ok(bytes) = section.data()
        {
            // Pointers in .eh_frame are mostly relative to the section itself (pcrel); text-
            // and GOT-relative ones need those sections' addresses.
            let mut bases = BaseAddresses::default().set_eh_frame(section.address());
            if let Some(text) = file.section_by_name(".text") {
                bases = bases.set_text(text.address());
            }
            if let Some(got) = file.section_by_name(".got") {
                bases = bases.set_got(got.address());
            }
            let mut eh_frame = EhFrame::new(bytes, endian);
            eh_frame.set_address_size(address_size);
            collect(&eh_frame, &bases, &mut ranges);
        }
        if ranges.is_empty()
            && let Some(section) = file.section_by_name(".debug_frame")
            && let Ok(bytes) = section.data()
        {
            let mut debug_frame = DebugFrame::new(bytes, endian);
            debug_frame.set_address_size(address_size);
            collect(&debug_frame, &BaseAddresses::default(), &mut ranges);
        }
        FunctionRanges::from_ranges(ranges)
    }

    /// Sorted by start; a range starting inside the previous one is dropped, so that each
    /// address has one function.
    fn from_ranges(mut ranges: Vec<(u64, u64)>) -> FunctionRanges {
        ranges.retain(|&(start, end)| start < end);
        ranges.sort_unstable();
        let mut kept: Vec<(u64, u64)> = Vec::with_capacity(ranges.len());
        for range in ranges {
            if kept.last().is_none_or(|&(_, end)| range.0 >= end) {
                kept.push(range);
            }
        }
        FunctionRanges { ranges: kept }
    }

    /// The start of the function whose FDE covers `address`.
    pub(crate) fn start_of(&self, address: u64) -> Option<u64> {
        let after = self.ranges.partition_point(|&(start, _)| start <= address);
        let &(start, end) = self.ranges.get(after.checked_sub(1)?)?;
        (address < end).then_some(start)
    }
}

/// Adds the range of every FDE of `section` that parses; a malformed entry ends the walk
/// (what came before stays usable).
fn collect<'data, S: UnwindSection<gimli::EndianSlice<'data, RunTimeEndian>>>(
    section: &S,
    bases: &BaseAddresses,
    ranges: &mut Vec<(u64, u64)>,
) {
    let mut entries = section.entries(bases);
    while let Ok(Some(entry)) = entries.next() {
        if let CieOrFde::Fde(partial) = entry
            && let Ok(fde) = partial.parse(S::cie_from_offset)
        {
            let start = fde.initial_address();
            ranges.push((start, start.saturating_add(fde.len())));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lookup_finds_the_containing_range_only() {
        let ranges =
            FunctionRanges::from_ranges(vec![(0x200, 0x240), (0x100, 0x180), (0x10, 0x10)]);
        assert_eq!(ranges.start_of(0x100), Some(0x100));
        assert_eq!(ranges.start_of(0x17f), Some(0x100));
        assert_eq!(ranges.start_of(0x180), None);
        assert_eq!(ranges.start_of(0x1ff), None);
        assert_eq!(ranges.start_of(0x213), Some(0x200));
        assert_eq!(ranges.start_of(0x10), None);
        assert_eq!(ranges.start_of(0), None);
        assert_eq!(ranges.start_of(u64::MAX), None);
    }

    /// A small shared object built by gcc and stripped: every function of the unstripped
    /// build's symbol table is found from its start to its last byte, from the unwind tables
    /// alone.
    #[test]
    fn stripped_object_functions_from_eh_frame() {
        use object::ObjectSymbol;
        use std::process::Command;
        let dir = tempfile::tempdir().expect("temp dir");
        let source = dir.path().join("two.c");
        std::fs::write(
            &source,
            "static int __attribute__((noinline)) twice(int *p, int n) {\n\
             for (int i = 0; i < n; i++) p[i * 1024] += i;\n\
             return p[0] * 3 + p[1024];\n}\n\
             int outer(int *p, int n) { return twice(p, n) + twice(p + 1, n); }\n",
        )
        .expect("write source");
        let object_file = dir.path().join("two.so");
        let stripped = dir.path().join("two-stripped.so");
        let run = |cmd: &mut Command| {
            let status = cmd.status().expect("tool runs");
            assert!(status.success(), "{cmd:?}");
        };
        run(Command::new("gcc")
            .args(["-O2", "-shared", "-fPIC", "-o"])
            .arg(&object_file)
            .arg(&source));
        run(Command::new("strip")
            .arg("-o")
            .arg(&stripped)
            .arg(&object_file));
        let unstripped = std::fs::read(&object_file).expect("read object");
        let elf = object::File::parse(&unstripped[..]).expect("ELF");
        let functions: Vec<(String, u64, u64)> = elf
            .symbols()
            .filter(|s| s.kind() == object::SymbolKind::Text && s.size() > 0)
            .map(|s| (s.name().unwrap_or("").to_owned(), s.address(), s.size()))
            // The source's own functions (gcc may name a clone `twice.isra.0`); the C
            // runtime's start files may come without unwind info.
            .filter(|(name, _, _)| name.starts_with("twice") || name == "outer")
            .collect();
        assert_eq!(functions.len(), 2, "{functions:?}");
        let ranges = FunctionRanges::of_elf(&std::fs::read(&stripped).expect("read stripped"));
        for (name, start, size) in &functions {
            for address in [*start, start + size / 2, start + size - 1] {
                assert_eq!(
                    ranges.start_of(address),
                    Some(*start),
                    "{name} at {start:#x}+{size:#x}: {address:#x} in {ranges:?}"
                );
            }
        }
        assert_eq!(
            FunctionRanges::of_elf(b"not an ELF file"),
            FunctionRanges::default()
        );
    }
}
