//! What of a far-memory program's memory is not under the limit: its anonymous resident
//! memory outside the emulated region, from `/proc/PID/smaps` once a second.
//!
//! Emulated memory is what the runtime registered with its userfaultfd (`um` among a
//! mapping's `VmFlags`); the runtime's own mappings (its backing store and metadata, which it
//! publishes) are its memory, not the program's. Everything else with `Anonymous` pages is
//! outside: thread stacks, libraries' written data, mappings made by system call past the
//! interposer, ranges of the region the runtime handed to the kernel (executable code), the
//! memory of a program the runtime never entered.

use std::ops::Range;

/// One mapping outside the region, with its resident anonymous bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OutsideMapping {
    /// Its address range.
    pub range: Range<u64>,
    /// Its resident anonymous bytes.
    pub bytes: u64,
    /// Its name in `/proc/PID/maps` (a file, `[stack]`, `[heap]`; empty when anonymous).
    pub name: String,
}

/// A look at the memory outside the region.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Outside {
    /// Resident anonymous bytes outside the region, in all.
    pub bytes: u64,
    /// The mapping holding the most of them.
    pub largest: Option<OutsideMapping>,
}

/// Reads `/proc/PID/smaps` of `pid`; `own` are the runtime's own mappings.
pub fn read(pid: u32, own: &[Range<u64>]) -> std::io::Result<Outside> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/smaps"))?;
    Ok(from_smaps(&text, own))
}

/// What `smaps` text says is outside the region.
pub fn from_smaps(text: &str, own: &[Range<u64>]) -> Outside {
    let mut outside = Outside::default();
    let mut current: Option<(Range<u64>, String, u64)> = None;
    let mut finish = |mapping: (Range<u64>, String, u64), registered: bool| {
        let (range, name, bytes) = mapping;
        let owned = own
            .iter()
            .any(|o| o.start < range.end && range.start < o.end);
        if registered || owned || bytes == 0 {
            return;
        }
        outside.bytes += bytes;
        if outside.largest.as_ref().is_none_or(|l| bytes > l.bytes) {
            outside.largest = Some(OutsideMapping { range, bytes, name });
        }
    };
    for line in text.lines() {
        if let Some(range) = mapping_header(line) {
            // A mapping whose flags line is missing (an older kernel) counts as outside.
            if let Some(previous) = current.take() {
                finish(previous, false);
            }
            let name = line
                .splitn(6, ' ')
                .nth(5)
                .unwrap_or_default()
                .trim()
                .to_owned();
            current = Some((range, name, 0));
        } else if let Some(value) = line.strip_prefix("Anonymous:") {
            if let Some((_, _, bytes)) = &mut current {
                *bytes = kb(value) * 1024;
            }
        } else if let Some(flags) = line.strip_prefix("VmFlags:") {
            let registered = flags.split_whitespace().any(|f| f == "um");
            if let Some(mapping) = current.take() {
                finish(mapping, registered);
            }
        }
    }
    if let Some(mapping) = current {
        finish(mapping, false);
    }
    outside
}

/// The address range of an smaps mapping header (`start-end perms offset dev inode [name]`).
fn mapping_header(line: &str) -> Option<Range<u64>> {
    let (range, rest) = line.split_once(' ')?;
    let (start, end) = range.split_once('-')?;
    // Field lines are `Name:   value`; a header's second word is its permissions.
    if rest.len() < 4 || !rest.as_bytes()[..4].iter().all(|b| b"rwxsp-".contains(b)) {
        return None;
    }
    Some(u64::from_str_radix(start, 16).ok()?..u64::from_str_radix(end, 16).ok()?)
}

fn kb(value: &str) -> u64 {
    value
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse()
        .unwrap_or(0)
}

/// What a process's looks found, for its summary line.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct OutsidePeak {
    /// The look with the most memory outside the region.
    pub peak: Outside,
    /// The program's memory at its largest: local and far pages plus what was outside.
    pub program_peak: u64,
}

impl OutsidePeak {
    /// Takes a look: `outside`, with `emulated` bytes local and far at the time.
    pub fn add(&mut self, outside: Outside, emulated: u64) {
        self.program_peak = self.program_peak.max(emulated + outside.bytes);
        if outside.bytes > self.peak.bytes {
            self.peak = outside;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SMAPS: &str = "\
55d0c0000000-55d0c0021000 rw-p 00000000 00:00 0                          [heap]
Size:                132 kB
Anonymous:            12 kB
VmFlags: rd wr mr mw me ac
7f0000000000-7f0010000000 rw-p 00000000 00:00 0 
Size:             262144 kB
Anonymous:         65536 kB
VmFlags: rd wr mr mw me ac
7f1000000000-7f2000000000 rw-p 00000000 00:00 0 
Size:           67108864 kB
Anonymous:        204800 kB
VmFlags: rd wr mr mw me nr uw um
7f3000000000-7f3000100000 rw-p 00000000 00:00 0 
Size:               1024 kB
Anonymous:          1024 kB
VmFlags: rd wr mr mw me nr
7f4000000000-7f4000001000 r--p 00001000 08:01 1234                       /usr/lib/libc.so.6
Size:                  4 kB
Anonymous:             4 kB
VmFlags: rd mr mw me
7ffd00000000-7ffd00021000 rw-p 00000000 00:00 0                          [stack]
Size:                132 kB
Anonymous:            20 kB
VmFlags: rd wr mr mw me gd ac
";

    /// Registered mappings and the runtime's own are inside; the rest is counted, the
    /// largest named with its exact size.
    #[test]
    fn counts_anonymous_memory_outside_the_region() {
        let own = vec![std::ops::Range {
            start: 0x7f30_0000_0000,
            end: 0x7f30_0010_0000,
        }];
        let outside = from_smaps(SMAPS, &own);
        assert_eq!(outside.bytes, (12 + 65_536 + 4 + 20) * 1024);
        assert_eq!(
            outside.largest,
            Some(OutsideMapping {
                range: 0x7f00_0000_0000..0x7f00_1000_0000,
                bytes: 64 << 20,
                name: String::new(),
            })
        );
        assert_eq!(from_smaps("", &own), Outside::default());
    }

    /// The peak is the look with the most outside; the program's peak is its largest sum.
    #[test]
    fn keeps_the_peak_and_its_share() {
        let mut peak = OutsidePeak::default();
        let look = |bytes| Outside {
            bytes,
            largest: None,
        };
        peak.add(look(10), 2000);
        peak.add(look(30), 2000);
        peak.add(look(20), 100);
        assert_eq!((peak.peak.bytes, peak.program_peak), (30, 2030));
    }
}
