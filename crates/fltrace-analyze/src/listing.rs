//! What a directory of recordings holds (`fltrace list`): each recording's time, command,
//! processes and counts, read from the tables' footers and the stats files, without
//! symbolizing anything.

use std::collections::HashSet;
use std::path::Path;

use fltrace_trace::{Recording, StackEnd, files};

/// One recording of a directory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecordingSummary {
    /// Its start, nanoseconds since the Unix epoch.
    pub start_ns: u64,
    /// The traced command line.
    pub command: String,
    /// Its processes, ascending, each with the names (`comm`) it ran under.
    pub processes: Vec<(u32, Vec<String>)>,
    /// Faults recorded (rows of the faults tables).
    pub faults: u64,
    /// Records the kernel dropped, from the stats files.
    pub lost: u64,
    /// Faults whose stack lacks its outer frames.
    pub truncated: u64,
    /// Allocation calls recorded; `None` when no process was recorded with `--allocs`.
    pub allocations: Option<u64>,
    /// Bytes of its files in the directory.
    pub bytes: u64,
    /// Whether every table was finished (else the recorder stopped before its end).
    pub finished: bool,
}

/// Every recording in `dir`, oldest first, and the faults files that could not be read
/// (named with why, so that none is left out unsaid).
pub fn list_recordings(
    dir: &Path,
) -> Result<(Vec<RecordingSummary>, Vec<fltrace_trace::Unreadable>), fltrace_trace::Error> {
    let (recordings, unreadable) = Recording::list_all(dir)?;
    let summaries = recordings
        .iter()
        .map(summarize)
        .collect::<Result<Vec<_>, _>>()?;
    Ok((summaries, unreadable))
}

/// One recording's summary.
pub fn summarize(recording: &Recording) -> Result<RecordingSummary, fltrace_trace::Error> {
    let dir = &recording.dir;
    let mut summary = RecordingSummary {
        start_ns: recording.session.start_ns,
        command: recording.session.command.clone(),
        processes: Vec::new(),
        faults: 0,
        lost: 0,
        truncated: 0,
        allocations: None,
        bytes: recording_bytes(dir, recording.pids())?,
        finished: recording.unfinished_tables()?.is_empty(),
    };
    for &pid in recording.pids() {
        let row_groups = recording.fault_keys(pid)?;
        let names = fltrace_trace::main_thread_names(&row_groups.metadata(), pid);
        summary.processes.push((pid, names));
        summary.faults += row_groups.rows();
        let truncated: HashSet<u32> = fltrace_trace::read_stacks(&files::stacks(dir, pid))?
            .into_iter()
            .filter(|s| s.end == StackEnd::Truncated)
            .map(|s| s.id)
            .collect();
        if !truncated.is_empty() {
            for group in row_groups {
                summary.truncated += group?
                    .iter()
                    .filter(|key| truncated.contains(&key.stack_id))
                    .count() as u64;
            }
        }
        if let Ok(Some(lost)) = fltrace_trace::stats::last_value(&files::stats(dir, pid), "lost") {
            summary.lost += lost;
        }
        if recording.has_allocs(pid) {
            let rows = fltrace_trace::table_rows(&files::allocs(dir, pid))?;
            *summary.allocations.get_or_insert(0) += rows;
        }
    }
    Ok(summary)
}

/// Bytes of the files `record` wrote for `pids` in `dir` (not the reports, flamegraphs and
/// heatmaps written beside them since), following links as readers do.
fn recording_bytes(dir: &Path, pids: &[u32]) -> Result<u64, fltrace_trace::Error> {
    Ok(pids
        .iter()
        .flat_map(|&pid| files::recording_files(dir, pid))
        .filter_map(|path| std::fs::metadata(path).ok())
        .filter(std::fs::Metadata::is_file)
        .map(|metadata| metadata.len())
        .sum())
}

/// The pid of a file named `fltrace-data-<kind>-<pid>.<ext>`.
pub fn data_file_pid(name: &str) -> Option<u32> {
    let rest = name.strip_prefix(files::PREFIX)?;
    let (stem, _ext) = rest.split_once('.')?;
    let (_kind, pid) = stem.rsplit_once('-')?;
    pid.parse().ok()
}

/// `2026-11-25 18:05:42 UTC`: a time in nanoseconds since the Unix epoch.
pub fn utc_time(ns: u64) -> String {
    let secs = ns / 1_000_000_000;
    let (days, rest) = (secs / 86_400, secs % 86_400);
    let (year, month, day) = civil_from_days(days as i64);
    format!(
        "{year:04}-{month:02}-{day:02} {:02}:{:02}:{:02} UTC",
        rest / 3600,
        rest % 3600 / 60,
        rest % 60
    )
}

/// The proleptic Gregorian date of a day counted from 1970-01-01 (Howard Hinnant's
/// `civil_from_days`).
fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let month = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let year = yoe + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

/// One line naming the recording a command reads: its command, start and processes, and
/// where it is.
pub fn recording_line(recording: &Recording, named: &Path) -> String {
    let pids = recording.pids().len();
    format!(
        "reading the recording of `{}` started {} ({pids} process{}) in {}",
        recording.session.command,
        utc_time(recording.session.start_ns),
        if pids == 1 { "" } else { "es" },
        named.display()
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Dates across leap years and the epoch come out as `date -u` prints them.
    #[test]
    fn utc_times() {
        assert_eq!(utc_time(0), "1970-01-01 00:00:00 UTC");
        assert_eq!(utc_time(951_782_400_000_000_000), "2000-02-29 00:00:00 UTC");
        assert_eq!(
            utc_time(1_795_365_492_316_796_000),
            "2026-11-22 16:38:12 UTC"
        );
    }

    #[test]
    fn data_file_pids() {
        assert_eq!(data_file_pid("fltrace-data-faults-42.parquet"), Some(42));
        assert_eq!(
            data_file_pid("fltrace-data-flamegraph-alloc-7.svg"),
            Some(7)
        );
        assert_eq!(data_file_pid("fltrace-data-faults.parquet"), None);
        assert_eq!(data_file_pid("notes-42.txt"), None);
    }
}
