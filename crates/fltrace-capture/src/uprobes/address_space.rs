//! What the uprobe reader knows of the traced process's executable mappings (from
//! /proc/PID/maps, read again when a stack leaves them), and their unwinder.

use std::collections::HashSet;
use std::ops::Range;

use crate::Error;
use crate::unwind::{AddressSpaceUnwinder, ElfCache};
use std::path::PathBuf;

/// What the reader knows of the traced process's executable mappings, and their unwinder.
pub(super) struct AddressSpace {
    pub(super) pid: i32,
    /// The executable mappings' lines of the /proc/PID/maps text they were built from.
    pub(super) exec_lines: String,
    /// Every executable mapping's range, file-backed or not, sorted.
    pub(super) exec: Vec<Range<u64>>,
    pub(super) unwinder: AddressSpaceUnwinder,
    /// Addresses still in no mapping after the maps were read again (garbage from a frame
    /// pointer fallback, or code already unmapped): they do not make the maps read again.
    pub(super) strays: HashSet<u64>,
}

/// The lines of a /proc/PID/maps text that map executable memory.
pub(super) fn executable_lines(maps: &str) -> String {
    maps.lines()
        .filter(|line| {
            fltrace_trace::parse_procmaps_line(line).is_some_and(|mapping| mapping.is_exec())
        })
        .flat_map(|line| [line, "\n"])
        .collect()
}

/// Stray addresses remembered at most; the set starts again beyond.
pub(super) const MAX_STRAYS: usize = 4096;

impl AddressSpace {
    pub(super) fn read(pid: i32) -> Result<AddressSpace, Error> {
        let maps = crate::procfs::maps_text(pid).map_err(|source| Error::Attach { pid, source })?;
        Ok(AddressSpace::of(pid, &maps))
    }

    pub(super) fn of(pid: i32, maps: &str) -> AddressSpace {
        let mut cache = ElfCache::default();
        let mut unwinder = AddressSpaceUnwinder::default();
        let mut exec = Vec::new();
        let exec_lines = executable_lines(maps);
        for mapping in exec_lines
            .lines()
            .filter_map(fltrace_trace::parse_procmaps_line)
        {
            exec.push(mapping.start.get()..mapping.end.get());
            if mapping.is_file() {
                let file = PathBuf::from(format!("/proc/{pid}/root{}", mapping.path));
                unwinder.add_mapping(&mut cache, &mapping, &file);
            }
        }
        exec.sort_by_key(|r| r.start);
        AddressSpace {
            pid,
            exec_lines,
            exec,
            unwinder,
            strays: HashSet::new(),
        }
    }

    /// Whether `addr` lies in an executable mapping of the last maps read.
    pub(super) fn covers(&self, addr: u64) -> bool {
        let after = self.exec.partition_point(|r| r.start <= addr);
        after > 0 && self.exec[after - 1].contains(&addr)
    }

    /// Reads the maps again because `addr` lies outside them; whether the unwinder changed.
    pub(super) fn refresh(&mut self, addr: u64) -> bool {
        if self.strays.contains(&addr) {
            return false;
        }
        // A process that has gone keeps the mappings last read.
        let Ok(maps) = crate::procfs::maps_text(self.pid) else {
            return false;
        };
        // Only new code matters: heaps and thread stacks come and go all the time.
        if executable_lines(&maps) == self.exec_lines {
            if self.strays.len() >= MAX_STRAYS {
                self.strays.clear();
            }
            self.strays.insert(addr);
            return false;
        }
        log::debug!(
            "process {}: new executable mappings, unwinder rebuilt",
            self.pid
        );
        *self = AddressSpace::of(self.pid, &maps);
        true
    }
}
