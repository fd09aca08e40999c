//! File names of a recording and how they are created.

use std::fs::{File, OpenOptions};
use std::os::unix::fs::{MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use crate::Error;

/// The prefix every fltrace output file carries, as in the original tool.
pub const PREFIX: &str = "fltrace-data-";

/// Above every pid Linux gives (`PID_MAX_LIMIT`, 2^22 on 64-bit systems): a process that
/// reused the pid of an earlier one of the same recording is filed as its pid plus a multiple
/// of this, so that the two keep files of their own.
pub const PID_LIMIT: u32 = 1 << 22;

/// The pid the kernel gave the process filed as `pid`, and which process to hold that pid in
/// the recording it was: 0 for the first, 1 for the next after it exited, and so on.
pub fn reused_pid(pid: u32) -> (u32, u32) {
    (pid % PID_LIMIT, pid / PID_LIMIT)
}

/// `<dir>/fltrace-data-<kind>-<pid>.<ext>`.
pub fn path(dir: &Path, kind: &str, pid: u32, ext: &str) -> PathBuf {
    dir.join(format!("{PREFIX}{kind}-{pid}.{ext}"))
}

/// The fault table of `pid`.
pub fn faults(dir: &Path, pid: u32) -> PathBuf {
    path(dir, "faults", pid, "parquet")
}

/// The stack table of `pid`.
pub fn stacks(dir: &Path, pid: u32) -> PathBuf {
    path(dir, "stacks", pid, "parquet")
}

/// The mapping table of `pid`.
pub fn mmaps(dir: &Path, pid: u32) -> PathBuf {
    path(dir, "mmaps", pid, "parquet")
}

/// The access-sample table of `pid`.
pub fn access(dir: &Path, pid: u32) -> PathBuf {
    path(dir, "access", pid, "parquet")
}

/// The stacks of `pid`'s access samples.
pub fn access_stacks(dir: &Path, pid: u32) -> PathBuf {
    path(dir, "accessstacks", pid, "parquet")
}

/// The allocation table of `pid`.
pub fn allocs(dir: &Path, pid: u32) -> PathBuf {
    path(dir, "allocs", pid, "parquet")
}

/// The stacks of `pid`'s allocation calls.
pub fn alloc_stacks(dir: &Path, pid: u32) -> PathBuf {
    path(dir, "allocstacks", pid, "parquet")
}

/// `<dir>/fltrace-data-allocsums-<pid>.parquet`: calls and bytes per stack, call and size.
pub fn alloc_totals(dir: &Path, pid: u32) -> PathBuf {
    path(dir, "allocsums", pid, "parquet")
}

/// The sizes and CRCs of a finished recording's files (`checksums`).
pub fn checksums(dir: &Path, pid: u32) -> PathBuf {
    path(dir, "checksums", pid, "out")
}

/// The mappings of `pid` in `/proc/PID/maps` format.
pub fn procmaps(dir: &Path, pid: u32) -> PathBuf {
    path(dir, "procmaps", pid, "out")
}

/// The counters of `pid`.
pub fn stats(dir: &Path, pid: u32) -> PathBuf {
    path(dir, "stats", pid, "out")
}

/// `fltrace-data-allocstats-<pid>.parquet`: what pairing `pid`'s allocation calls found,
/// per stack (written at record time).
pub fn alloc_stats(dir: &Path, pid: u32) -> PathBuf {
    path(dir, "allocstats", pid, "parquet")
}

/// `fltrace-data-rss-<pid>.out`: the resident memory of `pid` over time (`record --allocs`).
pub fn resident(dir: &Path, pid: u32) -> PathBuf {
    path(dir, "rss", pid, "out")
}

/// The perf map `pid`'s JIT wrote (`/tmp/perf-PID.map`), copied when it ended.
pub fn perf_map(dir: &Path, pid: u32) -> PathBuf {
    path(dir, "perfmap", pid, "map")
}

/// The jitdump `pid`'s JIT wrote (`jit-PID.dump`), copied when it ended.
pub fn jitdump(dir: &Path, pid: u32) -> PathBuf {
    path(dir, "jitdump", pid, "dump")
}

/// The files `record` writes for `pid` in `dir` (the trace tables, the side files, the
/// checksums, a JIT's maps), where they exist: a recording's own bytes, not the outputs of
/// later commands (reports, flamegraphs, heatmaps) written beside them.
pub fn recording_files(dir: &Path, pid: u32) -> Vec<PathBuf> {
    [
        faults(dir, pid),
        stacks(dir, pid),
        mmaps(dir, pid),
        allocs(dir, pid),
        alloc_stacks(dir, pid),
        alloc_totals(dir, pid),
        alloc_stats(dir, pid),
        resident(dir, pid),
        access(dir, pid),
        access_stacks(dir, pid),
        procmaps(dir, pid),
        stats(dir, pid),
        checksums(dir, pid),
        perf_map(dir, pid),
        jitdump(dir, pid),
    ]
    .into_iter()
    .filter(|p| std::fs::symlink_metadata(p).is_ok())
    .collect()
}

/// Opens input file `path` for reading, refusing anything but a regular file: a FIFO planted
/// in a recording would block a reader forever, a device or a socket is never ours. The open
/// does not block (`O_NONBLOCK`, which regular files ignore), and the type is that of the file
/// opened (`fstat`), not of a name that could change in between.
pub fn open_input(path: &Path) -> Result<File, Error> {
    let file = OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_CLOEXEC)
        .open(path)
        .map_err(Error::io(path))?;
    let kind = file.metadata().map_err(Error::io(path))?.file_type();
    if !kind.is_file() {
        return Err(Error::Format {
            path: path.to_owned(),
            message: format!("not a regular file ({}): refused", kind_name(kind)),
        });
    }
    Ok(file)
}

/// What a file that is not a regular file is, in a message.
fn kind_name(kind: std::fs::FileType) -> &'static str {
    use std::os::unix::fs::FileTypeExt;
    if kind.is_fifo() {
        "a FIFO"
    } else if kind.is_socket() {
        "a socket"
    } else if kind.is_block_device() || kind.is_char_device() {
        "a device"
    } else if kind.is_dir() {
        "a directory"
    } else {
        "not a file"
    }
}

/// The largest text side file (stats, procmaps, a spool's metadata) read whole: far above what
/// a recording of days writes, far below what would exhaust memory.
pub const TEXT_CAP: u64 = 256 << 20;

/// Reads text side file `path` whole, refusing it (with its size) beyond `cap` bytes, before
/// reading anything.
pub fn read_capped(path: &Path, cap: u64) -> Result<Vec<u8>, Error> {
    use std::io::Read;
    let file = open_input(path)?;
    let len = file.metadata().map_err(Error::io(path))?.len();
    if len > cap {
        return Err(too_big(path, len, cap));
    }
    let mut bytes = Vec::with_capacity(len as usize);
    // `take`: a file that grows while read stays within the cap.
    file.take(cap)
        .read_to_end(&mut bytes)
        .map_err(Error::io(path))?;
    Ok(bytes)
}

/// The error for a file larger than its format allows.
pub fn too_big(path: &Path, len: u64, cap: u64) -> Error {
    Error::Format {
        path: path.to_owned(),
        message: format!("{len} bytes, more than the {cap} such a file can be: refused"),
    }
}

/// The last `cap` bytes of input file `path` (all of it if smaller), from the start of a line:
/// where a reader that wants the latest lines of a growing log finds them in bounded memory.
pub fn read_tail(path: &Path, cap: u64) -> Result<Vec<u8>, Error> {
    use std::os::unix::fs::FileExt;
    let file = open_input(path)?;
    let len = file.metadata().map_err(Error::io(path))?.len();
    let start = len.saturating_sub(cap);
    let mut bytes = vec![0u8; (len - start) as usize];
    let mut read = 0;
    while read < bytes.len() {
        match file.read_at(&mut bytes[read..], start + read as u64) {
            Ok(0) => break,
            Ok(n) => read += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(Error::io(path)(e)),
        }
    }
    bytes.truncate(read);
    if start > 0 {
        // The first line is cut: it starts after the first newline.
        let first = bytes
            .iter()
            .position(|&b| b == b'\n')
            .map_or(bytes.len(), |i| i + 1);
        bytes.drain(..first);
    }
    Ok(bytes)
}

/// The pid in a name such as `fltrace-data-faults-1234.parquet`, given kind and extension.
pub fn pid_of(name: &str, kind: &str, ext: &str) -> Option<u32> {
    name.strip_prefix(PREFIX)?
        .strip_prefix(kind)?
        .strip_prefix('-')?
        .strip_suffix(ext)?
        .strip_suffix('.')?
        .parse()
        .ok()
}

/// The most recently written `fltrace-data-<kind>-<pid>.<ext>` in `dir`, with its pid; `None`
/// if there is none.
pub fn newest(dir: &Path, kind: &str, ext: &str) -> Result<Option<(u32, PathBuf)>, Error> {
    let mut newest: Option<(std::time::SystemTime, u32, PathBuf)> = None;
    for entry in std::fs::read_dir(dir).map_err(Error::io(dir))? {
        let entry = entry.map_err(Error::io(dir))?;
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|n| pid_of(n, kind, ext))
        else {
            continue;
        };
        let path = entry.path();
        // Through links (a read-only recording is read through a directory of links to it);
        // a dangling one by its own.
        let modified = std::fs::metadata(&path)
            .or_else(|_| entry.metadata())
            .and_then(|m| m.modified())
            .map_err(Error::io(&path))?;
        if newest.as_ref().is_none_or(|(t, _, _)| modified > *t) {
            newest = Some((modified, pid, path));
        }
    }
    Ok(newest.map(|(_, pid, path)| (pid, path)))
}

/// What of `pid`'s trace files in `dir` reads back, for each file there: its rows (lines for
/// the text files), or why it cannot be read. Said after a recording that could not write
/// everything (a full disk).
pub fn readable(dir: &Path, pid: u32) -> Vec<(PathBuf, Result<usize, Error>)> {
    type Count = fn(&Path) -> Result<usize, Error>;
    let lines: Count = |p| {
        let text = read_capped(p, TEXT_CAP)?;
        Ok(text
            .split(|&b| b == b'\n')
            .filter(|l| !l.is_empty())
            .count())
    };
    let tables: [(PathBuf, Count); 15] = [
        (faults(dir, pid), |p| {
            crate::read_faults(p).map(|(f, _)| f.len())
        }),
        (stacks(dir, pid), |p| crate::read_stacks(p).map(|s| s.len())),
        (mmaps(dir, pid), |p| {
            crate::read_mappings(p).map(|m| m.len())
        }),
        (allocs(dir, pid), |p| crate::read_allocs(p).map(|a| a.len())),
        (alloc_stacks(dir, pid), |p| {
            crate::read_stacks(p).map(|s| s.len())
        }),
        (alloc_totals(dir, pid), |p| {
            crate::read_alloc_totals(p).map(|t| t.len())
        }),
        (alloc_stats(dir, pid), |p| {
            crate::read_alloc_stats(p).map(|s| s.stacks.len())
        }),
        (access(dir, pid), |p| crate::read_access(p).map(|a| a.len())),
        (access_stacks(dir, pid), |p| {
            crate::read_stacks(p).map(|s| s.len())
        }),
        (stats(dir, pid), lines),
        (procmaps(dir, pid), lines),
        (resident(dir, pid), lines),
        (checksums(dir, pid), lines),
        // A JIT's files, counted as the functions they name.
        (perf_map(dir, pid), |p| {
            crate::perf_map::PerfMap::read(p).map(|m| m.len())
        }),
        (jitdump(dir, pid), |p| {
            crate::jitdump::JitDump::read(p).map(|d| d.len())
        }),
    ];
    tables
        .into_iter()
        .filter(|(path, _)| std::fs::symlink_metadata(path).is_ok())
        .map(|(path, count)| {
            let rows = count(&path);
            (path, rows)
        })
        .collect()
}

/// The files of `pid` in `dir` a reader refuses, each with why: any that is there but not a
/// regular file (a FIFO, a device, a socket, a directory; links are followed as readers
/// follow them), and text side files larger than [`TEXT_CAP`]. Only the file's status is
/// looked at, never its contents, so this neither blocks nor reads.
pub fn refused_inputs(dir: &Path, pid: u32) -> Vec<Error> {
    let tables = [
        faults(dir, pid),
        stacks(dir, pid),
        mmaps(dir, pid),
        allocs(dir, pid),
        alloc_stacks(dir, pid),
        alloc_totals(dir, pid),
        alloc_stats(dir, pid),
        access(dir, pid),
        access_stacks(dir, pid),
    ];
    let texts = [
        stats(dir, pid),
        procmaps(dir, pid),
        checksums(dir, pid),
        resident(dir, pid),
    ];
    let mut refused = Vec::new();
    for (path, cap) in tables
        .into_iter()
        .map(|p| (p, None))
        .chain(texts.into_iter().map(|p| (p, Some(TEXT_CAP))))
    {
        let Ok(metadata) = std::fs::metadata(&path) else {
            continue;
        };
        let kind = metadata.file_type();
        if !kind.is_file() {
            refused.push(Error::Format {
                path,
                message: format!("not a regular file ({}): refused", kind_name(kind)),
            });
        } else if let Some(cap) = cap.filter(|&cap| metadata.len() > cap) {
            refused.push(too_big(&path, metadata.len(), cap));
        }
    }
    refused
}

/// One trace file that stayed after a recording that could not write everything: its name,
/// and its rows or why it cannot be read. Shown as `NAME (N rows)` or
/// `NAME (unreadable: WHY)`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeptFile {
    /// The file name, without the directory.
    pub name: String,
    /// Rows read back (lines for the text files), or the error with its causes.
    pub rows: Result<usize, String>,
}

impl std::fmt::Display for KeptFile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.rows {
            Ok(rows) => write!(f, "{} ({rows} rows)", self.name),
            Err(why) => write!(f, "{} (unreadable: {why})", self.name),
        }
    }
}

/// What of the trace files of `pids` in `dir` reads back ([`readable`]), process by process.
pub fn kept(dir: &Path, pids: &[u32]) -> Vec<KeptFile> {
    pids.iter()
        .flat_map(|&pid| readable(dir, pid))
        .map(|(path, rows)| KeptFile {
            name: path.file_name().map_or_else(
                || path.display().to_string(),
                |n| n.to_string_lossy().into_owned(),
            ),
            rows: rows.map_err(|e| crate::error_chain(&e)),
        })
        .collect()
}

/// Creates an output file for writing: the one way every fltrace command creates its files.
///
/// fltrace often runs as root in directories other users can write to, where a name planted
/// ahead of it could redirect the write. So the file is made with `O_CREAT|O_EXCL|O_NOFOLLOW`:
/// nothing at `path` is ever opened and truncated. What is already there is replaced (unlinked,
/// then created anew) only if it is a regular file of the user fltrace runs as with no other
/// hard link, such as the same output of an earlier run; a symbolic link, another user's file,
/// a file with other links or anything else is refused with [`Error::Refused`], untouched.
/// The mode is 0666 less the user's umask, as for any file a program creates. A directory
/// others may write to without the sticky bit gets one warning (log), as anyone there can swap
/// fltrace's files after they are written.
pub fn create(path: &Path) -> Result<File, Error> {
    warn_if_exposed(path);
    match create_new(path) {
        Err(Error::Io { source, .. }) if source.kind() == std::io::ErrorKind::AlreadyExists => {}
        other => return other,
    }
    let existing = std::fs::symlink_metadata(path).map_err(Error::io(path))?;
    // SAFETY: geteuid has no preconditions.
    let user = unsafe { libc::geteuid() };
    let refusal = if existing.file_type().is_symlink() {
        Some("it is a symbolic link; fltrace does not write through links")
    } else if !existing.file_type().is_file() {
        Some("it is not a regular file")
    } else if existing.uid() != user {
        Some("it belongs to another user")
    } else if existing.nlink() > 1 {
        Some("it has other hard links")
    } else {
        None
    };
    if let Some(reason) = refusal {
        return Err(Error::Refused {
            path: path.into(),
            reason: format!("{reason}; remove it or choose another output"),
        });
    }
    // Unlinking only removes the name: whatever was swapped in since the check, no file
    // but the directory entry is changed, and O_EXCL below refuses a name re-planted meanwhile.
    std::fs::remove_file(path).map_err(Error::io(path))?;
    create_new(path).map_err(|e| match e {
        Error::Io { source, .. } if source.kind() == std::io::ErrorKind::AlreadyExists => {
            Error::Refused {
                path: path.into(),
                reason: "something else created it while fltrace replaced it".into(),
            }
        }
        other => other,
    })
}

/// Creates a file that must not exist yet (`O_CREAT|O_EXCL|O_NOFOLLOW`, mode 0666 less the
/// umask): for files whose name is new by construction, such as a run's or an archive's.
pub fn create_new(path: &Path) -> Result<File, Error> {
    OpenOptions::new()
        .read(true)
        .write(true)
        .create_new(true)
        .mode(0o666)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(path)
        .map_err(Error::io(path))
}

/// Writes `bytes` as the file `path`, through [`create`].
pub fn write(path: &Path, bytes: &[u8]) -> Result<(), Error> {
    use std::io::Write;
    create(path)?.write_all(bytes).map_err(Error::io(path))
}

/// Creates `path` through [`create`] and hands it to `write`, buffered, flushing at the end:
/// the one way a command writes a whole output file (a picture, a plot). A failure to create
/// it is [`create`]'s error; one of `write` or the flush is [`Error::Write`], naming the path.
pub fn write_with<E>(
    path: &Path,
    write: impl FnOnce(&mut std::io::BufWriter<File>) -> Result<(), E>,
) -> Result<(), Error>
where
    E: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    use std::io::Write;
    let mut out = std::io::BufWriter::new(create(path)?);
    let failed = |source| Error::Write {
        path: path.into(),
        source,
    };
    write(&mut out).map_err(|e| failed(e.into()))?;
    out.flush().map_err(|e| failed(e.into()))
}

/// The space a recording needs before its first checkpoint: every table's first segment.
pub const FIRST_SEGMENT: u64 = 64 << 10;

/// Makes sure a recording can be written into directory `dir` before anything runs: proves
/// it writable with room for [`FIRST_SEGMENT`] by reserving that much in a file no one sees
/// (`O_TMPFILE`, or a hidden name removed at once where the file system lacks it). The error
/// names the directory and what stops it.
pub fn check_output_dir(dir: &Path) -> Result<(), Error> {
    let refuse = |reason: String| Error::Refused {
        path: dir.to_owned(),
        reason,
    };
    match std::fs::metadata(dir) {
        Ok(m) if m.is_dir() => {}
        Ok(_) => return Err(refuse("it is not a directory".into())),
        Err(e) => return Err(refuse(format!("it cannot be read ({e})"))),
    }
    let probe = match OpenOptions::new()
        .write(true)
        .custom_flags(libc::O_TMPFILE | libc::O_CLOEXEC)
        .mode(0o600)
        .open(dir)
    {
        Ok(file) => file,
        Err(e)
            if matches!(
                e.raw_os_error(),
                Some(libc::EOPNOTSUPP | libc::EISDIR | libc::EINVAL)
            ) =>
        {
            let name = dir.join(format!(".fltrace-probe-{}", std::process::id()));
            let file = OpenOptions::new()
                .write(true)
                .create_new(true)
                .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
                .mode(0o600)
                .open(&name)
                .map_err(|e| refuse(unwritable(&e)))?;
            let _ = std::fs::remove_file(&name);
            file
        }
        Err(e) => return Err(refuse(unwritable(&e))),
    };
    use std::os::fd::AsRawFd;
    // SAFETY: reserving blocks in our own new file.
    let error = unsafe { libc::posix_fallocate(probe.as_raw_fd(), 0, FIRST_SEGMENT as i64) };
    match error {
        0 | libc::EOPNOTSUPP => Ok(()),
        libc::ENOSPC | libc::EDQUOT => Err(refuse(format!(
            "no room for the recording's first {} KiB ({})",
            FIRST_SEGMENT >> 10,
            std::io::Error::from_raw_os_error(error)
        ))),
        _ => Err(refuse(unwritable(&std::io::Error::from_raw_os_error(
            error,
        )))),
    }
}

/// Why a directory cannot take a recording, from the error creating a file in it.
fn unwritable(error: &std::io::Error) -> String {
    match error.raw_os_error() {
        Some(libc::EROFS) => "it is on a read-only file system".into(),
        Some(libc::EACCES | libc::EPERM) => {
            format!("this user cannot create files in it ({error})")
        }
        _ => format!("no file can be created in it ({error})"),
    }
}

/// Whether other users may replace files in `dir`: writable by others and not sticky.
pub fn exposed(dir: &Path) -> bool {
    std::fs::metadata(dir).is_ok_and(|m| {
        let mode = m.permissions().mode();
        mode & 0o002 != 0 && mode & 0o1000 == 0
    })
}

/// Warns once per directory when output goes where others can replace it.
fn warn_if_exposed(path: &Path) {
    static WARNED: std::sync::Mutex<Vec<PathBuf>> = std::sync::Mutex::new(Vec::new());
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    if !exposed(dir) {
        return;
    }
    let Ok(mut warned) = WARNED.lock() else {
        return;
    };
    if !warned.iter().any(|d| d == dir) {
        warned.push(dir.to_path_buf());
        log::warn!(
            "{} is writable by other users and not sticky (chmod +t or o-w): \
             they can replace the files fltrace writes there",
            dir.display()
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every file `record` writes is named in what was kept after a write error, so none is
    /// left out of that account. The JIT files once were.
    #[test]
    fn every_recording_file_is_in_what_was_kept() {
        let dir = tempfile::tempdir().expect("tempdir");
        let pid = 1234;
        let every = [
            faults(dir.path(), pid),
            stacks(dir.path(), pid),
            mmaps(dir.path(), pid),
            allocs(dir.path(), pid),
            alloc_stacks(dir.path(), pid),
            alloc_totals(dir.path(), pid),
            alloc_stats(dir.path(), pid),
            resident(dir.path(), pid),
            access(dir.path(), pid),
            access_stacks(dir.path(), pid),
            procmaps(dir.path(), pid),
            stats(dir.path(), pid),
            checksums(dir.path(), pid),
            perf_map(dir.path(), pid),
            jitdump(dir.path(), pid),
        ];
        for path in &every {
            std::fs::write(path, b"").expect("file written");
        }
        let mut written = recording_files(dir.path(), pid);
        let mut accounted: Vec<PathBuf> = readable(dir.path(), pid)
            .into_iter()
            .map(|(path, _)| path)
            .collect();
        written.sort();
        accounted.sort();
        assert_eq!(written.len(), every.len());
        assert_eq!(accounted, written);
    }

    /// Names are built and parsed back.
    #[test]
    fn names_round_trip() {
        let name = faults(Path::new("/d"), 1234);
        assert_eq!(name, Path::new("/d/fltrace-data-faults-1234.parquet"));
        assert_eq!(reused_pid(1234), (1234, 0));
        assert_eq!(reused_pid(1234 + 2 * PID_LIMIT), (1234, 2));
        assert_eq!(
            pid_of("fltrace-data-faults-1234.parquet", "faults", "parquet"),
            Some(1234)
        );
        assert_eq!(
            pid_of("fltrace-data-faults-12x.parquet", "faults", "parquet"),
            None
        );
        assert_eq!(
            pid_of("fltrace-data-stats-7.out", "faults", "parquet"),
            None
        );
    }

    /// After a failed write: the good file with its rows, the damaged one with why, in the
    /// order of the tables; a process that left nothing adds nothing.
    #[test]
    fn kept_lists_good_and_damaged_files() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(procmaps(dir.path(), 7), "a\nb\n\nc\n").unwrap();
        std::fs::write(faults(dir.path(), 7), b"PAR1 cut short").unwrap();
        let kept = kept(dir.path(), &[7, 8]);
        let shown: Vec<String> = kept.iter().map(ToString::to_string).collect();
        assert_eq!(
            shown,
            [
                format!(
                    "fltrace-data-faults-7.parquet (unreadable: {}: Parquet error: Invalid Parquet file. Corrupt footer)",
                    faults(dir.path(), 7).display()
                ),
                "fltrace-data-procmaps-7.out (3 rows)".to_owned(),
            ]
        );
        assert_eq!(kept[1].rows, Ok(3));
    }

    /// A symbolic link planted where an output file goes is not followed.
    #[test]
    fn create_refuses_symlinks() {
        let dir = tempfile::tempdir().unwrap();
        let target = dir.path().join("victim");
        std::fs::write(&target, "keep").unwrap();
        let link = dir.path().join("fltrace-data-stats-1.out");
        std::os::unix::fs::symlink(&target, &link).unwrap();
        assert!(matches!(create(&link), Err(Error::Refused { .. })));
        assert_eq!(std::fs::read_to_string(&target).unwrap(), "keep");
        assert!(std::fs::symlink_metadata(&link).unwrap().is_symlink());
    }

    /// A hard link to another file is not truncated through; an earlier output is replaced.
    #[test]
    fn create_replaces_only_its_own_files() {
        use std::io::Write;
        let dir = tempfile::tempdir().unwrap();
        let victim = dir.path().join("victim");
        std::fs::write(&victim, "keep").unwrap();
        let linked = dir.path().join("fltrace-data-stats-2.out");
        std::fs::hard_link(&victim, &linked).unwrap();
        assert!(matches!(create(&linked), Err(Error::Refused { .. })));
        assert_eq!(std::fs::read_to_string(&victim).unwrap(), "keep");

        let earlier = dir.path().join("fltrace-data-stats-3.out");
        std::fs::write(&earlier, "old run").unwrap();
        create(&earlier).unwrap().write_all(b"new").unwrap();
        assert_eq!(std::fs::read_to_string(&earlier).unwrap(), "new");

        assert!(create_new(&earlier).is_err());
    }

    /// What the closure writes is the file's content; its error and the path make one line.
    #[test]
    fn write_with_writes_through_the_closure_and_names_the_path() {
        use std::io::Write;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("fltrace-data-wss-7.svg");
        std::fs::write(&path, "an earlier run's").unwrap();
        write_with(&path, |out| out.write_all(b"<svg/>")).unwrap();
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "<svg/>");

        let error = write_with(&path, |out| {
            out.write_all(b"half")?;
            Err(std::io::Error::other("no space left"))
        })
        .unwrap_err();
        assert_eq!(
            crate::error_chain(&error),
            format!("writing {}: no space left", path.display())
        );

        // Not created: create's own refusal, and the closure is never called.
        let link = dir.path().join("link.svg");
        std::os::unix::fs::symlink(&path, &link).unwrap();
        let refused = write_with(&link, |_| -> Result<(), std::io::Error> {
            panic!("called for a file not created")
        });
        assert!(matches!(refused, Err(Error::Refused { .. })), "{refused:?}");
    }

    /// World-writable without the sticky bit is exposed; /tmp's mode 1777 is not.
    #[test]
    fn exposed_directories() {
        let dir = tempfile::tempdir().unwrap();
        let set = |mode| {
            std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(mode)).unwrap()
        };
        set(0o777);
        assert!(exposed(dir.path()));
        set(0o1777);
        assert!(!exposed(dir.path()));
        set(0o755);
        assert!(!exposed(dir.path()));
    }
}

/// Whether this user can create files in `dir` now (`access(W_OK)`: a read-only mount, a
/// directory of another user and a missing one all say no).
pub fn writable(dir: &Path) -> bool {
    let Ok(dir) = std::ffi::CString::new(dir.as_os_str().as_encoded_bytes()) else {
        return false;
    };
    // SAFETY: a NUL-terminated path.
    unsafe { libc::access(dir.as_ptr(), libc::W_OK) == 0 }
}

/// Where an analysis command puts the files it writes for a recording in `dir`: beside it when
/// `dir` is writable, else in the current directory (`moved`: the caller says so), so that
/// reading a recording never needs to write into it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OutputPlace {
    /// The directory.
    pub dir: PathBuf,
    /// Whether it is the current directory because the recording's is not writable.
    pub moved: bool,
}

impl OutputPlace {
    /// Beside the recording in `dir` if it is writable, else the current directory.
    pub fn beside(dir: &Path) -> OutputPlace {
        if writable(dir) {
            OutputPlace {
                dir: dir.to_owned(),
                moved: false,
            }
        } else {
            OutputPlace {
                dir: PathBuf::from("."),
                moved: true,
            }
        }
    }
}
