//! The stats file: lines of `<unix time> name:value,name:value,...`, as the original tool wrote,
//! so that `grep -o "memory_used:\([0-9]\+\)" | tail -1` keeps working.

use std::fmt::Write as _;
use std::path::Path;

use crate::Error;

/// Formats one stats line (with its newline).
pub fn format_line(unix_time_s: u64, counters: &[(&str, u64)]) -> String {
    let mut line = format!("{unix_time_s} ");
    for (i, (name, value)) in counters.iter().enumerate() {
        let sep = if i == 0 { "" } else { "," };
        let _ = write!(line, "{sep}{name}:{value}");
    }
    line.push('\n');
    line
}

/// Parses one stats line into its time and counters.
pub fn parse_line(line: &str) -> Option<(u64, Vec<(String, u64)>)> {
    let (time, rest) = line.trim_end().split_once(' ')?;
    let counters = rest
        .split(',')
        .filter(|field| !field.is_empty())
        .map(|field| {
            let (name, value) = field.split_once(':')?;
            Some((name.to_owned(), value.parse().ok()?))
        })
        .collect::<Option<Vec<_>>>()?;
    Some((time.parse().ok()?, counters))
}

/// How much of the end of a stats file is read for its last values: a line each second of a
/// few hundred bytes, so thousands of lines.
const TAIL: u64 = 1 << 20;

/// The last value of counter `name` in a stats file, if any of its last lines has it. Only
/// the file's end is read: memory stays bounded whatever its size.
pub fn last_value(path: &Path, name: &str) -> Result<Option<u64>, Error> {
    let tail = crate::files::read_tail(path, TAIL)?;
    let text = String::from_utf8_lossy(&tail);
    Ok(text
        .lines()
        .rev()
        .filter_map(parse_line)
        .find_map(|(_, counters)| {
            counters
                .into_iter()
                .find(|(n, _)| n == name)
                .map(|(_, v)| v)
        }))
}

/// Every value of counter `name` in a file of stats lines, with its line's time, in file
/// order: the resident memory over time of `fltrace-data-rss-<pid>.out` (times in ns), or
/// of the stats file (in seconds). Lines that do not parse are skipped; a file larger than
/// [`crate::files::TEXT_CAP`] is refused.
pub fn series(path: &Path, name: &str) -> Result<Vec<(u64, u64)>, Error> {
    let text = crate::files::read_capped(path, crate::files::TEXT_CAP)?;
    let text = String::from_utf8_lossy(&text);
    Ok(text
        .lines()
        .filter_map(parse_line)
        .filter_map(|(time, counters)| {
            counters
                .into_iter()
                .find(|(n, _)| n == name)
                .map(|(_, v)| (time, v))
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Lines format as the original did and parse back.
    #[test]
    fn line_round_trip() {
        let line = format_line(
            1700000000,
            &[("faults", 12), ("lost", 0), ("memory_used", 4096)],
        );
        assert_eq!(line, "1700000000 faults:12,lost:0,memory_used:4096\n");
        let (time, counters) = parse_line(&line).unwrap();
        assert_eq!(time, 1700000000);
        assert_eq!(counters[2], ("memory_used".to_owned(), 4096));
    }

    /// A series reads one counter from every line that has it, skipping the others.
    #[test]
    fn series_of_one_counter() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s.out");
        let text = [
            format_line(1_000_000_000, &[("rss", 4096), ("rss_anon", 0)]),
            "garbage\n".to_owned(),
            format_line(1_020_000_000, &[("rss_anon", 1)]),
            format_line(1_040_000_000, &[("rss", 8192)]),
        ]
        .concat();
        std::fs::write(&path, text).unwrap();
        assert_eq!(
            series(&path, "rss").unwrap(),
            [(1_000_000_000, 4096), (1_040_000_000, 8192)]
        );
    }
}
