//! File names of a recording and how they are created.

use std::fs::{File, OpenOptions};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use crate::Error;

/// The prefix every fltrace output file carries, as in the original tool.
pub const PREFIX: &str = "fltrace-data-";

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

/// The mappings of `pid` in `/proc/PID/maps` format.
pub fn procmaps(dir: &Path, pid: u32) -> PathBuf {
    path(dir, "procmaps", pid, "out")
}

/// The counters of `pid`.
pub fn stats(dir: &Path, pid: u32) -> PathBuf {
    path(dir, "stats", pid, "out")
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

/// Creates (or truncates) an output file for writing.
///
/// The mode is 0666 less the user's umask, as for any file a program creates, and a symbolic
/// link at `path` is refused rather than followed: fltrace often runs as root in directories
/// other users can write to, where a planted link could redirect the write.
pub fn create(path: &Path) -> Result<File, Error> {
    OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o666)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(path)
        .map_err(Error::io(path))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Names are built and parsed back.
    #[test]
    fn names_round_trip() {
        let name = faults(Path::new("/d"), 1234);
        assert_eq!(name, Path::new("/d/fltrace-data-faults-1234.parquet"));
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

    /// A symbolic link planted where an output file goes is not followed.
    #[test]
    fn create_refuses_symlinks() {
        let dir = tempfile::tempdir().unwrap();
        let target = dir.path().join("victim");
        std::fs::write(&target, "keep").unwrap();
        let link = dir.path().join("fltrace-data-stats-1.out");
        std::os::unix::fs::symlink(&target, &link).unwrap();
        assert!(create(&link).is_err());
        assert_eq!(std::fs::read_to_string(&target).unwrap(), "keep");
    }
}
