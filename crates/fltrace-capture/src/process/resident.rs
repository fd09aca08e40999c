//! A process's resident memory over time (`fltrace-data-rss-<pid>.out`), sampled every
//! [`RESIDENT_EVERY`] while its main thread lives: what `visualize --allocs` draws beside the
//! heap (the stats file has the resident size once a second, too coarse for most programs).
//!
//! A line per sample, as the stats file's: `<ns since the epoch> rss:<bytes>,rss_anon:<bytes>`,
//! appended a second at a time so that a killed recorder leaves the samples so far.

use std::io::Write;
use std::path::PathBuf;

use fltrace_trace::{files, stats};

/// How often a process's resident memory is sampled.
pub const RESIDENT_EVERY: std::time::Duration = std::time::Duration::from_millis(20);

/// The samples of one process, and where they go.
#[derive(Debug)]
pub(crate) struct ResidentSeries {
    path: PathBuf,
    /// Lines not written yet.
    pending: String,
    /// The file, once the first lines are written.
    file: Option<std::fs::File>,
    /// What turns CLOCK_MONOTONIC into the trace's times.
    mono_offset: u64,
}

impl ResidentSeries {
    /// The series of process `pid` (as the recording files it) in `dir`.
    pub(crate) fn new(dir: &std::path::Path, pid: u32, mono_offset: u64) -> ResidentSeries {
        ResidentSeries {
            path: files::resident(dir, pid),
            pending: String::new(),
            file: None,
            mono_offset,
        }
    }

    /// Samples process `os_pid` now; nothing if it is gone.
    pub(crate) fn sample(&mut self, os_pid: u32) {
        let Some((rss, shared)) = crate::procfs::resident_and_shared_pages(os_pid as i32) else {
            return;
        };
        let page = crate::page_size() as u64;
        let now = crate::os::monotonic_now_ns().wrapping_add(self.mono_offset);
        let line = stats::format_line(
            now,
            &[
                ("rss", rss * page),
                ("rss_anon", rss.saturating_sub(shared) * page),
            ],
        );
        self.pending.push_str(&line);
    }

    /// Appends the samples taken since the last write.
    pub(crate) fn write(&mut self) -> Result<(), fltrace_trace::Error> {
        if self.pending.is_empty() {
            return Ok(());
        }
        let io = |source| fltrace_trace::Error::Io {
            path: self.path.clone(),
            source,
        };
        if self.file.is_none() {
            self.file = Some(files::create(&self.path)?);
        }
        if let Some(file) = &mut self.file {
            file.write_all(self.pending.as_bytes()).map_err(io)?;
        }
        self.pending.clear();
        Ok(())
    }
}
