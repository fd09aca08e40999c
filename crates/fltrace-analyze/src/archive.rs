//! Packing the files a recording needs to be symbolized on another machine, or after the
//! program was rebuilt or deleted.
//!
//! An archive is a directory laid out as debuginfod's client cache: `<build id>/executable`
//! (the mapped file: its program headers turn the recorded file offsets into addresses) and
//! `<build id>/debuginfo` (its separate debug file, when it has one). Keyed by build ID, one
//! archive serves every recording of the same programs.

use std::collections::BTreeSet;
use std::fs::File;
use std::io;
use std::path::{Path, PathBuf};

use fltrace_trace::ProcessTrace;

use crate::debuginfo::DebugResolver;

/// What went wrong writing an archive.
#[derive(Debug, thiserror::Error)]
pub enum ArchiveError {
    /// Reading or writing a file failed.
    #[error("{}: {reason}", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// The cause, said in the message (not a `source`, which would say it twice).
        reason: io::Error,
    },
    /// The output exists and is something other than a directory.
    #[error("{} exists and is not a directory", .0.display())]
    NotADirectory(PathBuf),
}

fn io_error(path: &Path) -> impl FnOnce(io::Error) -> ArchiveError + '_ {
    move |reason| ArchiveError::Io {
        path: path.to_owned(),
        reason,
    }
}

/// One mapped file of the recording and what the archive holds for it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ArchivedFile {
    /// The file as mapped.
    pub path: String,
    /// Its build ID, hex.
    pub build_id: String,
    /// Whether a separate debug file was stored beside it.
    pub debuginfo: bool,
}

/// What `archive` did.
#[derive(Debug, Default)]
pub struct ArchiveSummary {
    /// Files stored (or already in the archive).
    pub archived: Vec<ArchivedFile>,
    /// Mapped files that could not be stored, with why.
    pub skipped: Vec<(String, String)>,
}

impl ArchivedFile {
    /// `fltrace archive`'s line of it: build ID, path, and whether its debug file came too.
    pub fn line(&self) -> String {
        format!(
            "{} {}{}",
            self.build_id,
            self.path,
            if self.debuginfo {
                " (with debug file)"
            } else {
                ""
            }
        )
    }
}

impl ArchiveSummary {
    /// `fltrace archive`'s last line: how many files are in `output`.
    pub fn total_line(&self, output: &Path) -> String {
        format!("{} files in {}", self.archived.len(), output.display())
    }
}

/// Why `fltrace archive` could not write its archive.
#[derive(Debug, thiserror::Error)]
#[error("writing the archive {}", path.display())]
pub struct ArchiveWriteError {
    /// The archive file or directory.
    pub path: PathBuf,
    /// Why.
    #[source]
    pub source: Box<dyn std::error::Error + Send + Sync>,
}

/// `fltrace archive`: what symbolizing `traces` (the recording in `dir`) needs, written to
/// `output`: one file (`NAME.tar.zst`, `NAME.tar`) that also holds the recording, an archive
/// beside it serving as a source too; else an archive directory, its files taken from where
/// the recording found them (or copies of the same build found by build ID), never from an
/// older archive being written to. Returns what was archived and the warnings of files of
/// another build than recorded.
pub fn archive_to(
    traces: &[ProcessTrace],
    dir: &Path,
    output: &Path,
) -> Result<(ArchiveSummary, Vec<String>), ArchiveWriteError> {
    let failed = |source: Box<dyn std::error::Error + Send + Sync>| ArchiveWriteError {
        path: output.to_owned(),
        source,
    };
    let (summary, mut resolver) = if crate::is_archive_file_name(output) {
        let mut resolver = DebugResolver::new(crate::debug_config(dir, None));
        let summary = crate::archive_file(traces, dir, &mut resolver, output)
            .map_err(|e| failed(e.into()))?;
        (summary, resolver)
    } else {
        let mut resolver = DebugResolver::new(crate::DebugConfig::from_env());
        let summary = archive(traces, &mut resolver, output).map_err(|e| failed(e.into()))?;
        (summary, resolver)
    };
    Ok((summary, resolver.take_warnings()))
}

/// Why the traces of a recording to archive could not be read.
#[derive(Debug, thiserror::Error)]
pub enum ArchiveLoadError {
    /// No recording, or one that does not read.
    #[error(transparent)]
    Find(#[from] fltrace_trace::Error),
    /// A process's trace does not read.
    #[error("loading the trace of process {pid}")]
    Load {
        /// The process.
        pid: u32,
        /// Why.
        #[source]
        source: fltrace_trace::Error,
    },
}

/// The traces `fltrace archive` archives: of process `pid` or of every process of the most
/// recent recording in `dir`, without their allocation events.
pub fn traces_to_archive(
    dir: &Path,
    pid: Option<u32>,
) -> Result<Vec<ProcessTrace>, ArchiveLoadError> {
    let recording = crate::find_recording(dir, pid)?;
    recording
        .chosen_pids(pid)
        .into_iter()
        .map(|pid| {
            recording
                .load_without_alloc_events(pid)
                .map_err(|source| ArchiveLoadError::Load { pid, source })
        })
        .collect()
}

/// Stores in directory `out` every file that holds code of `traces`, with its debug file.
pub fn archive<'a>(
    traces: impl IntoIterator<Item = &'a ProcessTrace>,
    resolver: &mut DebugResolver,
    out: &Path,
) -> Result<ArchiveSummary, ArchiveError> {
    let mut files: BTreeSet<(String, String)> = BTreeSet::new();
    for trace in traces {
        for mapping in &trace.mappings {
            if mapping.is_file() && mapping.is_exec() {
                files.insert((mapping.path.clone(), mapping.build_id.clone()));
            }
        }
    }
    make_dir(out)?;
    let mut summary = ArchiveSummary::default();
    for (path, recorded) in files {
        let Some(found) = resolver.resolve(Path::new(&path), &recorded) else {
            summary
                .skipped
                .push((path, "no file of the recorded build found".into()));
            continue;
        };
        if found.build_id.len() < 8 || !found.build_id.bytes().all(|b| b.is_ascii_hexdigit()) {
            summary
                .skipped
                .push((path, "the file has no build ID to key it by".into()));
            continue;
        }
        let dir = out.join(&found.build_id);
        make_dir(&dir)?;
        copy_new(&found.binary, &dir.join("executable"))?;
        if let Some(debug) = &found.debug {
            copy_new(debug, &dir.join("debuginfo"))?;
        }
        summary.archived.push(ArchivedFile {
            path,
            build_id: found.build_id.clone(),
            debuginfo: found.debug.is_some(),
        });
    }
    Ok(summary)
}

/// Creates directory `dir`, or accepts it if it is one already (never a symbolic link).
fn make_dir(dir: &Path) -> Result<(), ArchiveError> {
    match std::fs::create_dir(dir) {
        Ok(()) => Ok(()),
        Err(err) if err.kind() == io::ErrorKind::AlreadyExists => {
            let meta = std::fs::symlink_metadata(dir).map_err(io_error(dir))?;
            if meta.is_dir() {
                Ok(())
            } else {
                Err(ArchiveError::NotADirectory(dir.to_owned()))
            }
        }
        Err(err) => Err(io_error(dir)(err)),
    }
}

/// Copies `from` to `to` unless `to` exists: keyed by build ID, an existing copy is the same
/// file. Written under a temporary name and renamed, so a copy is whole or absent.
fn copy_new(from: &Path, to: &Path) -> Result<(), ArchiveError> {
    if std::fs::symlink_metadata(to).is_ok() {
        return Ok(());
    }
    let mut source = File::open(from).map_err(io_error(from))?;
    let temp = to.with_extension(format!("tmp-{}", std::process::id()));
    let mut target = fltrace_trace::files::create_new(&temp).map_err(|e| match e {
        fltrace_trace::Error::Io { source, .. } => io_error(&temp)(source),
        other => io_error(&temp)(io::Error::other(other.to_string())),
    })?;
    let copied = io::copy(&mut source, &mut target)
        .map_err(io_error(from))
        .and_then(|_| target.sync_all().map_err(io_error(&temp)))
        .and_then(|()| std::fs::rename(&temp, to).map_err(io_error(to)));
    if copied.is_err() {
        let _ = std::fs::remove_file(&temp);
    }
    copied
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A directory archive is made where none was; one that cannot be made names the archive
    /// in its error, with the cause after it.
    #[test]
    fn archive_to_a_directory() {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("fltrace-archive");
        let (summary, warnings) = archive_to(&[], dir.path(), &out).unwrap();
        assert!(summary.archived.is_empty() && warnings.is_empty());
        assert!(out.is_dir());
        let file = dir.path().join("plain");
        std::fs::write(&file, "").unwrap();
        let blocked = file.join("archive");
        let error = archive_to(&[], dir.path(), &blocked).unwrap_err();
        assert_eq!(
            error.to_string(),
            format!("writing the archive {}", blocked.display())
        );
        assert!(std::error::Error::source(&error).is_some());
    }

    /// Each archived file is a line with its build ID, and a total names the archive.
    #[test]
    fn archived_files_are_listed_with_a_total() {
        let summary = ArchiveSummary {
            archived: vec![ArchivedFile {
                path: "/bin/ls".to_owned(),
                build_id: "ab12".to_owned(),
                debuginfo: true,
            }],
            skipped: Vec::new(),
        };
        assert_eq!(summary.archived[0].line(), "ab12 /bin/ls (with debug file)");
        assert_eq!(
            summary.total_line(Path::new("out/arch")),
            "1 files in out/arch"
        );
    }
}
