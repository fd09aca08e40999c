use std::fmt::Write as _;

use crate::{FileOffset, VirtAddr};

/// A memory mapping of a traced process, as the kernel reported it when it was created.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Mapping {
    /// When the mapping was reported, nanoseconds since the Unix epoch (0 for mappings that
    /// existed when recording began).
    pub time_ns: u64,
    /// The address-space generation (incremented by each exec).
    pub generation: u32,
    /// First address.
    pub start: VirtAddr,
    /// One past the last address.
    pub end: VirtAddr,
    /// Offset in the file of `start`.
    pub pgoff: FileOffset,
    /// `PROT_*` bits.
    pub prot: u32,
    /// `MAP_*` bits (`MAP_SHARED` is 1, `MAP_PRIVATE` 2).
    pub flags: u32,
    /// The file's path, or a pseudo-name such as `[heap]`, `[stack]`, `//anon`.
    pub path: String,
    /// The GNU build ID of the file, hex, empty when unknown.
    pub build_id: String,
}

impl Mapping {
    /// Whether `addr` falls inside the mapping.
    pub fn contains(&self, addr: VirtAddr) -> bool {
        self.start <= addr && addr < self.end
    }

    /// Whether the mapping is backed by a file (as opposed to anonymous memory).
    pub fn is_file(&self) -> bool {
        // perf names anonymous mappings `//anon`.
        self.path.starts_with('/') && !self.path.starts_with("//")
    }

    /// Whether the mapping holds code.
    pub fn is_exec(&self) -> bool {
        self.prot & libc::PROT_EXEC as u32 != 0
    }

    /// The file offset of `addr`, an address inside this mapping.
    pub fn file_offset(&self, addr: VirtAddr) -> FileOffset {
        self.pgoff + (addr - self.start)
    }
}

/// Formats a mapping as one `/proc/PID/maps` line.
pub fn write_procmaps_line(mapping: &Mapping, out: &mut String) {
    let prot = |bit: i32, c: char| {
        if mapping.prot & bit as u32 != 0 {
            c
        } else {
            '-'
        }
    };
    let shared = if mapping.flags & libc::MAP_SHARED as u32 != 0 {
        's'
    } else {
        'p'
    };
    let path = if mapping.path == "//anon" {
        ""
    } else {
        mapping.path.as_str()
    };
    // Device and inode are not known from the perf records (build IDs replace them).
    let _ = writeln!(
        out,
        "{:08x}-{:08x} {}{}{}{} {:08x} 00:00 0{}{}",
        mapping.start,
        mapping.end,
        prot(libc::PROT_READ, 'r'),
        prot(libc::PROT_WRITE, 'w'),
        prot(libc::PROT_EXEC, 'x'),
        shared,
        mapping.pgoff,
        if path.is_empty() {
            ""
        } else {
            "                          "
        },
        path
    );
}

/// Parses one `/proc/PID/maps` line. Returns `None` for a malformed line.
pub fn parse_procmaps_line(line: &str) -> Option<Mapping> {
    let mut fields = line.splitn(6, ' ');
    let (start, end) = fields.next()?.split_once('-')?;
    let perms = fields.next()?.as_bytes();
    let pgoff = fields.next()?;
    let _dev = fields.next()?;
    let _inode = fields.next()?;
    let path = fields.next().unwrap_or("").trim_start();
    if perms.len() < 4 {
        return None;
    }
    let mut prot = 0;
    for (c, bit) in [
        (b'r', libc::PROT_READ),
        (b'w', libc::PROT_WRITE),
        (b'x', libc::PROT_EXEC),
    ] {
        if perms.contains(&c) {
            prot |= bit as u32;
        }
    }
    let flags = if perms[3] == b's' {
        libc::MAP_SHARED
    } else {
        libc::MAP_PRIVATE
    } as u32;
    Some(Mapping {
        time_ns: 0,
        generation: 0,
        start: VirtAddr::new(u64::from_str_radix(start, 16).ok()?),
        end: VirtAddr::new(u64::from_str_radix(end, 16).ok()?),
        pgoff: FileOffset::new(u64::from_str_radix(pgoff, 16).ok()?),
        prot,
        flags,
        path: if path.is_empty() {
            "//anon".to_owned()
        } else {
            path.to_owned()
        },
        build_id: String::new(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A line written in maps format parses back to the same mapping.
    #[test]
    fn procmaps_round_trip() {
        let mapping = Mapping {
            start: VirtAddr::new(0x5555_5555_4000),
            end: VirtAddr::new(0x5555_5555_6000),
            pgoff: FileOffset::new(0x1000),
            prot: (libc::PROT_READ | libc::PROT_EXEC) as u32,
            flags: libc::MAP_PRIVATE as u32,
            path: "/usr/bin/true".into(),
            ..Mapping::default()
        };
        let mut line = String::new();
        write_procmaps_line(&mapping, &mut line);
        assert!(line.starts_with("555555554000-555555556000 r-xp 00001000 00:00 0 "));
        assert_eq!(parse_procmaps_line(line.trim_end()), Some(mapping));
    }

    /// Real kernel lines, with and without a path, parse.
    #[test]
    fn parses_kernel_lines() {
        let heap = parse_procmaps_line("01b2c000-01b4d000 rw-p 00000000 00:00 0          [heap]");
        assert_eq!(
            heap.map(|m| (m.start, m.path)),
            Some((VirtAddr::new(0x01b2c000), "[heap]".to_owned()))
        );
        let anon = parse_procmaps_line("7f0000000000-7f0000001000 rw-s 00000000 00:00 0 ");
        assert_eq!(
            anon.map(|m| (m.flags, m.path)),
            Some((1, "//anon".to_owned()))
        );
        assert_eq!(parse_procmaps_line("garbage"), None);
    }
}
