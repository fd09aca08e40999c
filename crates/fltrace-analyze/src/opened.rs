//! A recording as the analysis commands are given it: a directory, read where it is, or one
//! file of `fltrace archive -o X.tar[.zst]`, unpacked into a temporary directory. Nothing is
//! ever written into what the user named: files a command writes go beside a writable
//! recording, else into the current directory, and a read-only recording whose allocation
//! spools still need converting is read through a temporary copy of its directory.

use std::io::{self, Read, Write};
use std::path::{Path, PathBuf};

use fltrace_trace::files::OutputPlace;

use crate::ARCHIVE_DIR;

/// The first bytes of a zstd frame.
const ZSTD_MAGIC: [u8; 4] = [0x28, 0xb5, 0x2f, 0xfd];
/// Where a POSIX tar header says `ustar`.
const USTAR_OFFSET: usize = 257;

/// Why a recording could not be opened or packed.
#[derive(Debug, thiserror::Error)]
pub enum OpenError {
    /// Reading or writing a file failed (the cause follows as the error's source).
    #[error("{}", path.display())]
    Io {
        /// The file or directory.
        path: PathBuf,
        /// The cause.
        source: io::Error,
    },
    /// Nothing is at the path named as a recording.
    #[error(
        "no recording at {}: name a directory of `fltrace record -o DIR` or an archive file of `fltrace archive -o NAME.tar.zst` (as RECORDING, -d or -i)",
        .0.display()
    )]
    Missing(PathBuf),
    /// A file named as a recording is not one of `fltrace archive`'s.
    #[error(
        "{} is a file, not a recording: give a recording's directory or an archive of `fltrace archive -o FILE.tar.zst`",
        .0.display()
    )]
    NotAnArchive(PathBuf),
    /// The archive file holds no recording.
    #[error("{} holds no fltrace recording", .0.display())]
    EmptyArchive(PathBuf),
    /// Gathering the archive's binaries and debug files failed.
    #[error(transparent)]
    Archive(#[from] crate::ArchiveError),
    /// An archive is written as `.tar` or `.tar.zst`.
    #[error("{}: an archive file is named .tar or .tar.zst", .0.display())]
    ArchiveName(PathBuf),
}

fn io_error(path: &Path) -> impl FnOnce(io::Error) -> OpenError + '_ {
    move |source| OpenError::Io {
        path: path.to_owned(),
        source,
    }
}

/// A recording opened for reading.
#[derive(Debug)]
pub struct OpenedRecording {
    /// Where its files are read: the directory named, or a temporary one.
    pub dir: PathBuf,
    /// What the user named: the recording's directory or its archive file.
    pub named: PathBuf,
    /// Where the files a command writes for it go.
    pub outputs: OutputPlace,
    /// Removed when the recording is dropped.
    temp: Option<tempfile::TempDir>,
}

impl OpenedRecording {
    /// Opens the recording at `path`: a directory as it is, an archive file unpacked into a
    /// temporary directory (whose files a command writes go beside the archive, or into the
    /// current directory when that is read-only).
    pub fn open(path: &Path) -> Result<OpenedRecording, OpenError> {
        let metadata = std::fs::metadata(path).map_err(|source| match source.kind() {
            io::ErrorKind::NotFound => OpenError::Missing(path.to_owned()),
            _ => io_error(path)(source),
        })?;
        if metadata.is_dir() {
            return Ok(OpenedRecording {
                dir: path.to_owned(),
                named: path.to_owned(),
                outputs: OutputPlace::beside(path),
                temp: None,
            });
        }
        let temp = tempfile::Builder::new()
            .prefix("fltrace-recording-")
            .tempdir()
            .map_err(io_error(&std::env::temp_dir()))?;
        unpack(path, temp.path())?;
        let parent = match path.parent() {
            Some(parent) if !parent.as_os_str().is_empty() => parent,
            _ => Path::new("."),
        };
        Ok(OpenedRecording {
            dir: temp.path().to_owned(),
            named: path.to_owned(),
            outputs: OutputPlace::beside(parent),
            temp: Some(temp),
        })
    }

    /// Opens the recording at `path` as [`Self::open`] does, converting the allocation logs
    /// a killed `record --allocs` left into its tables first (recovery warns of each process).
    /// The logs stay: a reading command deletes nothing in a recording (the next `record`
    /// there removes them), and one it cannot write is converted in a temporary copy of its
    /// directory, which `copied` is told of (a line to show the user) before recovery starts.
    pub fn open_recovering(
        path: &Path,
        copied: impl FnOnce(&str),
    ) -> Result<OpenedRecording, OpenError> {
        let mut opened = OpenedRecording::open(path)?;
        let spools = fltrace_trace::spool::unconverted_spools(&opened.dir);
        if spools.is_empty() {
            return Ok(opened);
        }
        if opened.make_writable(&spools)? {
            copied(&format!(
                "{} is read-only: the allocation logs of a killed recorder are converted in a temporary copy",
                opened.named.display()
            ));
        }
        fltrace_trace::spool::recover_stale_spools(
            &opened.dir,
            fltrace_trace::spool::SpoolLogs::Keep,
        );
        Ok(opened)
    }

    /// Whether the files are read from somewhere else than what the user named.
    pub fn unpacked(&self) -> bool {
        self.temp.is_some()
    }

    /// Makes the directory read writable for a command that must add files to it (the tables
    /// of a killed recorder's spools): when it is not, a temporary directory is made with a
    /// link to each of its files, and a copy of each of `copied` (names in it), so that the
    /// original stays untouched. Returns whether it made one.
    pub fn make_writable(&mut self, copied: &[std::ffi::OsString]) -> Result<bool, OpenError> {
        if fltrace_trace::files::writable(&self.dir) {
            return Ok(false);
        }
        let source = std::fs::canonicalize(&self.dir).map_err(io_error(&self.dir))?;
        let temp = tempfile::Builder::new()
            .prefix("fltrace-recording-")
            .tempdir()
            .map_err(io_error(&std::env::temp_dir()))?;
        for entry in std::fs::read_dir(&source).map_err(io_error(&source))? {
            let entry = entry.map_err(io_error(&source))?;
            let name = entry.file_name();
            let (from, to) = (entry.path(), temp.path().join(&name));
            if copied.contains(&name) {
                copy_tree(&from, &to)?;
            } else {
                // Links keep modification times and read as the files themselves.
                std::os::unix::fs::symlink(&from, &to).map_err(io_error(&to))?;
            }
        }
        self.dir = temp.path().to_owned();
        self.temp = Some(temp);
        Ok(true)
    }
}

/// Copies `from` (a regular file, or a directory of them) to `to`; links and anything else
/// inside are left out.
fn copy_tree(from: &Path, to: &Path) -> Result<(), OpenError> {
    let kind = std::fs::symlink_metadata(from)
        .map_err(io_error(from))?
        .file_type();
    if kind.is_file() {
        std::fs::copy(from, to).map_err(io_error(from))?;
    } else if kind.is_dir() {
        std::fs::create_dir(to).map_err(io_error(to))?;
        for entry in std::fs::read_dir(from).map_err(io_error(from))? {
            let entry = entry.map_err(io_error(from))?;
            copy_tree(&entry.path(), &to.join(entry.file_name()))?;
        }
    }
    Ok(())
}

/// Unpacks the archive file `path` (tar, or tar in zstd) into `dir`: regular files and
/// directories only, never outside `dir`.
fn unpack(path: &Path, dir: &Path) -> Result<(), OpenError> {
    let mut file = fltrace_trace::files::open_input(path).map_err(|e| match e {
        fltrace_trace::Error::Io { source, .. } => OpenError::Io {
            path: path.to_owned(),
            source,
        },
        _ => OpenError::NotAnArchive(path.to_owned()),
    })?;
    let mut head = [0u8; USTAR_OFFSET + 5];
    let read = read_up_to(&mut file, &mut head).map_err(io_error(path))?;
    let head = &head[..read];
    let file = fltrace_trace::files::open_input(path)
        .map_err(|_| OpenError::NotAnArchive(path.to_owned()))?;
    let reader: Box<dyn Read> = if head.starts_with(&ZSTD_MAGIC) {
        Box::new(zstd::Decoder::new(file).map_err(io_error(path))?)
    } else if head.get(USTAR_OFFSET..USTAR_OFFSET + 5) == Some(b"ustar") {
        Box::new(file)
    } else {
        return Err(OpenError::NotAnArchive(path.to_owned()));
    };
    let mut archive = tar::Archive::new(reader);
    let mut faults = 0;
    for entry in archive.entries().map_err(io_error(path))? {
        let mut entry = entry.map_err(io_error(path))?;
        let kind = entry.header().entry_type();
        if !(kind.is_file() || kind.is_dir()) {
            continue;
        }
        let name = entry.path().map_err(io_error(path))?.into_owned();
        if name
            .to_str()
            .is_some_and(|n| fltrace_trace::files::pid_of(n, "faults", "parquet").is_some())
        {
            faults += 1;
        }
        // `unpack_in` skips any path that would leave `dir`.
        entry.unpack_in(dir).map_err(io_error(path))?;
    }
    if faults == 0 {
        return Err(OpenError::EmptyArchive(path.to_owned()));
    }
    Ok(())
}

/// Reads until `buf` is full or the file ends; the bytes read.
fn read_up_to(file: &mut impl Read, buf: &mut [u8]) -> io::Result<usize> {
    let mut read = 0;
    while read < buf.len() {
        match file.read(&mut buf[read..])? {
            0 => break,
            n => read += n,
        }
    }
    Ok(read)
}

/// Whether `path` names an archive file (`.tar` or `.tar.zst`) rather than a directory.
pub fn is_archive_file_name(path: &Path) -> bool {
    archive_compression(path).is_some()
}

/// `Some(true)` for `.tar.zst`, `Some(false)` for `.tar`.
fn archive_compression(path: &Path) -> Option<bool> {
    let name = path.file_name()?.to_str()?;
    if name.ends_with(".tar.zst") || name.ends_with(".tzst") {
        Some(true)
    } else if name.ends_with(".tar") {
        Some(false)
    } else {
        None
    }
}

/// Writes the archive file `output` (`.tar`, or `.tar.zst` compressed): the files of the
/// recording `files` (paths, stored under their names) and the archive directory `archive`
/// (stored as `fltrace-archive/`), as [`OpenedRecording::open`] reads them. The file is new
/// (never written through a name planted ahead) and removed again if writing fails.
pub fn pack(output: &Path, files: &[PathBuf], archive: &Path) -> Result<(), OpenError> {
    let Some(compressed) = archive_compression(output) else {
        return Err(OpenError::ArchiveName(output.to_owned()));
    };
    let file = fltrace_trace::files::create(output).map_err(|e| match e {
        fltrace_trace::Error::Io { source, .. } => OpenError::Io {
            path: output.to_owned(),
            source,
        },
        other => OpenError::Io {
            path: output.to_owned(),
            source: io::Error::other(other.to_string()),
        },
    })?;
    let written = write_tar(io::BufWriter::new(file), compressed, files, archive);
    if written.is_err() {
        let _ = std::fs::remove_file(output);
    }
    written
}

fn write_tar(
    mut out: io::BufWriter<std::fs::File>,
    compressed: bool,
    files: &[PathBuf],
    archive: &Path,
) -> Result<(), OpenError> {
    let fill = |out: &mut dyn Write| -> Result<(), OpenError> {
        let mut tar = tar::Builder::new(out);
        // Stored as the files are, not as links point.
        tar.follow_symlinks(true);
        for path in files {
            let Some(name) = path.file_name() else {
                continue;
            };
            tar.append_path_with_name(path, name)
                .map_err(io_error(path))?;
        }
        if archive.is_dir() {
            tar.append_dir_all(ARCHIVE_DIR, archive)
                .map_err(io_error(archive))?;
        }
        tar.finish().map_err(io_error(archive))
    };
    if compressed {
        let mut encoder = zstd::Encoder::new(out, 3).map_err(io_error(archive))?;
        fill(&mut encoder)?;
        encoder
            .finish()
            .and_then(|mut out| out.flush())
            .map_err(io_error(archive))
    } else {
        fill(&mut out)?;
        out.flush().map_err(io_error(archive))
    }
}

/// Writes the recording of `traces` (its files in `dir`) and what symbolizing it needs (as
/// [`crate::archive`] gathers it) as the one archive file `output` (`.tar` or `.tar.zst`).
pub fn archive_file(
    traces: &[fltrace_trace::ProcessTrace],
    dir: &Path,
    resolver: &mut crate::DebugResolver,
    output: &Path,
) -> Result<crate::ArchiveSummary, OpenError> {
    if archive_compression(output).is_none() {
        return Err(OpenError::ArchiveName(output.to_owned()));
    }
    let temp = tempfile::Builder::new()
        .prefix("fltrace-archive-")
        .tempdir()
        .map_err(io_error(&std::env::temp_dir()))?;
    let archive = temp.path().join(ARCHIVE_DIR);
    let summary = crate::archive(traces, resolver, &archive)?;
    let pids: Vec<u32> = traces.iter().map(|t| t.pid).collect();
    let mut files = Vec::new();
    for entry in std::fs::read_dir(dir).map_err(io_error(dir))? {
        let entry = entry.map_err(io_error(dir))?;
        let name = entry.file_name();
        if name
            .to_str()
            .and_then(crate::data_file_pid)
            .is_some_and(|pid| pids.contains(&pid))
            && entry.path().is_file()
        {
            files.push(entry.path());
        }
    }
    files.sort();
    pack(output, &files, &archive)?;
    Ok(summary)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A directory with a faults file and another of a recording, and an archive directory.
    fn recording() -> (tempfile::TempDir, Vec<PathBuf>, PathBuf) {
        let dir = tempfile::tempdir().unwrap();
        let faults = dir.path().join("fltrace-data-faults-7.parquet");
        let stats = dir.path().join("fltrace-data-stats-7.out");
        std::fs::write(&faults, b"PAR1 not really").unwrap();
        std::fs::write(&stats, b"lost:0\n").unwrap();
        let archive = dir.path().join("arch");
        std::fs::create_dir_all(archive.join("ab12")).unwrap();
        std::fs::write(archive.join("ab12/executable"), b"ELF").unwrap();
        (dir, vec![faults, stats], archive)
    }

    /// Packed as `.tar` and `.tar.zst`, a recording opens as a temporary directory holding the
    /// same files, under the archive directory's name, removed when dropped.
    #[test]
    fn packed_recordings_open_as_they_were() {
        let (dir, files, archive) = recording();
        for name in ["r.tar", "r.tar.zst"] {
            let output = dir.path().join(name);
            pack(&output, &files, &archive).unwrap();
            let opened = OpenedRecording::open(&output).unwrap();
            assert!(opened.unpacked());
            assert_eq!(opened.named, output);
            assert_eq!(opened.outputs.dir, dir.path());
            for file in &files {
                let name = file.file_name().unwrap();
                assert_eq!(
                    std::fs::read(opened.dir.join(name)).unwrap(),
                    std::fs::read(file).unwrap()
                );
            }
            let exe = opened.dir.join(ARCHIVE_DIR).join("ab12/executable");
            assert_eq!(std::fs::read(exe).unwrap(), b"ELF");
            let temp = opened.dir.clone();
            drop(opened);
            assert!(!temp.exists(), "{name}: the temporary directory stays");
        }
    }

    /// Anything but an archive of fltrace's is refused in one line; a name other than .tar or
    /// .tar.zst is not written.
    #[test]
    fn other_files_are_refused() {
        let (dir, files, archive) = recording();
        let text = dir.path().join("notes.txt");
        std::fs::write(&text, b"hello").unwrap();
        assert!(matches!(
            OpenedRecording::open(&text),
            Err(OpenError::NotAnArchive(_))
        ));
        // A tar without a faults file holds no recording.
        let empty = dir.path().join("empty.tar");
        pack(&empty, &files[1..], &archive).unwrap();
        assert!(matches!(
            OpenedRecording::open(&empty),
            Err(OpenError::EmptyArchive(_))
        ));
        let zip = dir.path().join("r.zip");
        assert!(matches!(
            pack(&zip, &files, &archive),
            Err(OpenError::ArchiveName(_))
        ));
        assert!(!zip.exists());
    }

    /// An entry naming a path outside the directory, or a link, is not unpacked.
    #[test]
    fn entries_never_leave_the_directory() {
        let dir = tempfile::tempdir().unwrap();
        let output = dir.path().join("evil.tar");
        let mut tar = tar::Builder::new(std::fs::File::create(&output).unwrap());
        let mut add = |name: &str, kind: tar::EntryType, data: &[u8]| {
            let mut header = tar::Header::new_gnu();
            header.set_entry_type(kind);
            header.set_size(data.len() as u64);
            header.set_mode(0o644);
            // Set by bytes: `set_path` refuses `..` itself.
            header.as_old_mut().name[..name.len()].copy_from_slice(name.as_bytes());
            header.set_cksum();
            tar.append(&header, data).unwrap();
        };
        add(
            "fltrace-data-faults-1.parquet",
            tar::EntryType::Regular,
            b"x",
        );
        add("../escaped", tar::EntryType::Regular, b"x");
        add("fltrace-data-link-1.out", tar::EntryType::Symlink, b"");
        tar.finish().unwrap();
        drop(tar);
        let opened = OpenedRecording::open(&output).unwrap();
        assert!(opened.dir.join("fltrace-data-faults-1.parquet").is_file());
        assert!(!opened.dir.join("fltrace-data-link-1.out").exists());
        assert!(!opened.dir.parent().unwrap().join("escaped").exists());
    }

    /// A writable directory is read where it is; a spool is copied whole, links left out
    /// (the read-only case is the integration test's: root writes anywhere but a read-only
    /// mount).
    #[test]
    fn writable_directories_stay_and_spools_copy() {
        let (dir, _, _) = recording();
        std::fs::create_dir(dir.path().join(".spool")).unwrap();
        std::fs::write(dir.path().join(".spool/log-7.0"), b"log").unwrap();
        std::os::unix::fs::symlink("/etc/passwd", dir.path().join(".spool/link")).unwrap();
        let mut opened = OpenedRecording::open(dir.path()).unwrap();
        assert!(!opened.make_writable(&[".spool".into()]).unwrap());
        assert_eq!(opened.dir, dir.path());
        assert!(!opened.unpacked());
        let copy = tempfile::tempdir().unwrap();
        copy_tree(&dir.path().join(".spool"), &copy.path().join(".spool")).unwrap();
        assert_eq!(
            std::fs::read(copy.path().join(".spool/log-7.0")).unwrap(),
            b"log"
        );
        assert!(!copy.path().join(".spool/link").exists());
    }
}
