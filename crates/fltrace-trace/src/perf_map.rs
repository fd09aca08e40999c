//! perf map files: the names a JIT gives the code it writes into anonymous executable memory
//! (`/tmp/perf-PID.map`, one `START SIZE name` line per function, hex without `0x`), as node's
//! `--perf-basic-prof`, Java's `-XX:+DumpPerfMapAtExit`, Python 3.12's `-X perf` and LuaJIT
//! write them.

use std::collections::BTreeMap;
use std::path::Path;

use crate::Error;

/// The largest perf map read: a JIT that compiled for hours writes a few tens of MB.
pub const PERF_MAP_CAP: u64 = 512 << 20;

/// The functions of one perf map, by address; where code was written over older code, the
/// later line names it.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct PerfMap {
    /// start -> (end, name)
    functions: BTreeMap<u64, (u64, String)>,
}

impl PerfMap {
    /// Parses perf map text; malformed lines are skipped (a map cut short by the JIT's end
    /// ends in half a line).
    pub fn parse(text: &str) -> PerfMap {
        let mut map = PerfMap::default();
        for line in text.lines() {
            let mut fields = line.splitn(3, ' ');
            let (Some(start), Some(size), Some(name)) =
                (fields.next(), fields.next(), fields.next())
            else {
                continue;
            };
            let parse = |s: &str| u64::from_str_radix(s.trim_start_matches("0x"), 16).ok();
            let (Some(start), Some(size)) = (parse(start), parse(size)) else {
                continue;
            };
            if size == 0 {
                continue;
            }
            map.insert(
                start,
                start.saturating_add(size),
                name.trim_end().to_owned(),
            );
        }
        map
    }

    /// Reads the perf map at `path` (within [`PERF_MAP_CAP`]).
    pub fn read(path: &Path) -> Result<PerfMap, Error> {
        let bytes = crate::files::read_capped(path, PERF_MAP_CAP)?;
        Ok(PerfMap::parse(&String::from_utf8_lossy(&bytes)))
    }

    /// Adds a function over `start..end`, replacing every older one it overlaps.
    fn insert(&mut self, start: u64, end: u64, name: String) {
        // The ranges kept never overlap, so those ending after `start` are the last ones
        // starting before `end`.
        let overlapping: Vec<u64> = self
            .functions
            .range(..end)
            .rev()
            .take_while(|(_, (e, _))| *e > start)
            .map(|(s, _)| *s)
            .collect();
        for s in overlapping {
            self.functions.remove(&s);
        }
        self.functions.insert(start, (end, name));
    }

    /// The function covering `addr`: its start and name.
    pub fn lookup(&self, addr: u64) -> Option<(u64, &str)> {
        let (start, (end, name)) = self.functions.range(..=addr).next_back()?;
        (addr < *end).then_some((*start, name.as_str()))
    }

    /// How many functions it names.
    pub fn len(&self) -> usize {
        self.functions.len()
    }

    /// Whether it names none.
    pub fn is_empty(&self) -> bool {
        self.functions.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Lines name ranges; a later line over the same code wins; junk is skipped.
    #[test]
    fn parses_and_looks_up() {
        let map = PerfMap::parse(
            "7f0000001000 40 JS:~hot /tmp/a.js:3:13\n\
             7f0000002000 100 old\n\
             garbage\n\
             7f0000002000 20 Builtin:new\n\
             7f0000003000 0 empty\n\
             7f00000040",
        );
        assert_eq!(
            map.lookup(0x7f00_0000_1000),
            Some((0x7f00_0000_1000, "JS:~hot /tmp/a.js:3:13"))
        );
        assert_eq!(
            map.lookup(0x7f00_0000_103f).map(|l| l.1),
            Some("JS:~hot /tmp/a.js:3:13")
        );
        assert_eq!(map.lookup(0x7f00_0000_1040), None);
        assert_eq!(
            map.lookup(0x7f00_0000_2010).map(|l| l.1),
            Some("Builtin:new")
        );
        assert_eq!(map.lookup(0x7f00_0000_2050), None);
        assert_eq!(map.len(), 2);
    }
}
