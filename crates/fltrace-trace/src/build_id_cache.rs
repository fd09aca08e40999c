//! The build-ID cache: every executable and library a recording's code ran from, kept by build
//! ID while the process lived, shared by all recordings (as perf's `~/.debug`), so that a
//! report still names the frames after the program was rebuilt or deleted, or when it ran in
//! a mount namespace fltrace cannot see any more.
//!
//! Laid out as `fltrace archive` and debuginfod's client lay theirs out:
//! `<root>/<build id>/executable` (a hard link to the file when the file system allows, else a
//! copy) and `<root>/<build id>/name` (the path it was mapped from; its modification time is
//! when the entry was last used, for pruning the least recently used first).

use std::fs::File;
use std::io;
use std::path::{Path, PathBuf};
use std::time::SystemTime;

use crate::Error;

/// The cache's size limit when `FLTRACE_CACHE_SIZE` does not say: 2 GiB.
pub const DEFAULT_LIMIT_BYTES: u64 = 2 << 30;

/// How a file came into the cache.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stored {
    /// It was there already (its last use is now).
    Present,
    /// Hard-linked: it costs no space while the original lives.
    Linked,
    /// Copied, this many bytes.
    Copied(u64),
}

/// One entry of the cache.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CacheEntry {
    /// The build ID, hex.
    pub build_id: String,
    /// The path the file was mapped from when it was stored.
    pub name: String,
    /// Its size.
    pub bytes: u64,
    /// Whether other names link to the same file (the original, still on disk): its bytes
    /// cost nothing more while they do.
    pub shared: bool,
    /// When a recording or report last used it.
    pub last_used: SystemTime,
}

impl CacheEntry {
    /// The space the entry holds on its own: nothing while its file is shared.
    pub fn own_bytes(&self) -> u64 {
        if self.shared { 0 } else { self.bytes }
    }
}

impl CacheEntry {
    /// `fltrace cache list`'s line of it: build ID, size, how kept, last use, name.
    pub fn line(&self) -> String {
        let age = self.last_used.elapsed().map_or(0, |d| d.as_secs());
        format!(
            "{} {:>12} {} {:>8}s ago {}",
            self.build_id,
            self.bytes,
            if self.shared { "linked" } else { "copied" },
            age,
            self.name
        )
    }
}

/// `fltrace cache list`'s last line: the entries and the bytes they hold on their own.
pub fn listing_total(entries: &[CacheEntry], root: &Path) -> String {
    let own: u64 = entries.iter().map(CacheEntry::own_bytes).sum();
    format!(
        "{} files, {own} bytes of their own, in {}",
        entries.len(),
        root.display()
    )
}

impl Pruned {
    /// `fltrace cache prune`'s lines: each entry removed, then what is kept.
    pub fn lines(&self, root: &Path) -> Vec<String> {
        let mut lines: Vec<String> = self
            .removed
            .iter()
            .map(|e| format!("removed {} {}", e.build_id, e.name))
            .collect();
        lines.push(format!(
            "{} files removed, {} bytes of their own kept in {}",
            self.removed.len(),
            self.kept_bytes,
            root.display()
        ));
        lines
    }
}

/// What pruning removed.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Pruned {
    /// Entries removed, oldest use first.
    pub removed: Vec<CacheEntry>,
    /// The space the cache holds on its own afterwards.
    pub kept_bytes: u64,
}

/// A build-ID cache at a directory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BuildIdCache {
    root: PathBuf,
}

/// Whether `id` can name an entry: hex, long enough to be a real build ID (never a path).
pub fn valid_build_id(id: &str) -> bool {
    id.len() >= 8 && id.bytes().all(|b| b.is_ascii_hexdigit())
}

fn io_error(path: &Path) -> impl FnOnce(io::Error) -> Error + '_ {
    move |source| Error::Io {
        path: path.to_owned(),
        source,
    }
}

impl BuildIdCache {
    /// The cache at `root`.
    pub fn at(root: impl Into<PathBuf>) -> BuildIdCache {
        BuildIdCache { root: root.into() }
    }

    /// The cache the environment names: `$FLTRACE_CACHE`, else `$XDG_CACHE_HOME/fltrace`,
    /// else `~/.cache/fltrace`; `None` when none is set (no home).
    pub fn from_env() -> Option<BuildIdCache> {
        let var = |name: &str| std::env::var_os(name).filter(|v| !v.is_empty());
        var("FLTRACE_CACHE")
            .map(PathBuf::from)
            .or_else(|| var("XDG_CACHE_HOME").map(|d| Path::new(&d).join("fltrace")))
            .or_else(|| var("HOME").map(|h| Path::new(&h).join(".cache/fltrace")))
            .map(BuildIdCache::at)
    }

    /// The size limit `FLTRACE_CACHE_SIZE` (MiB) sets, else [`DEFAULT_LIMIT_BYTES`].
    pub fn limit_from_env() -> u64 {
        std::env::var("FLTRACE_CACHE_SIZE")
            .ok()
            .and_then(|v| v.trim().parse::<u64>().ok())
            .map_or(DEFAULT_LIMIT_BYTES, |mb| mb << 20)
    }

    /// The directory.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// Where the file of build `id` is kept (whether or not it is there).
    pub fn executable(&self, id: &str) -> Option<PathBuf> {
        valid_build_id(id).then(|| self.root.join(id).join("executable"))
    }

    /// Marks the entry of build `id` as used now.
    pub fn touch(&self, id: &str) {
        if valid_build_id(id) {
            let name = self.root.join(id).join("name");
            // The name file, not the executable: a hard link shares the original's times.
            if let Ok(file) = File::options().append(true).open(&name) {
                let _ = file.set_modified(SystemTime::now());
            }
        }
    }

    /// Keeps `source` (the file of build `id`, as opened, e.g. `/proc/PID/map_files/...`) under
    /// its build ID, named `name`: a hard link if the file system allows, else a copy. Written
    /// under a temporary name and renamed, so that an entry is whole or absent.
    pub fn store(&self, id: &str, source: &Path, name: &str) -> Result<Stored, Error> {
        if !valid_build_id(id) {
            return Err(Error::Format {
                path: source.to_owned(),
                message: format!("no build ID to keep it by ({id:?})"),
            });
        }
        let dir = self.root.join(id);
        let target = dir.join("executable");
        if std::fs::symlink_metadata(&target).is_ok() {
            self.touch(id);
            return Ok(Stored::Present);
        }
        std::fs::create_dir_all(&dir).map_err(io_error(&dir))?;
        let temp = dir.join(format!(".executable.tmp-{}", std::process::id()));
        let _ = std::fs::remove_file(&temp);
        let stored = if hard_link_following(source, &temp).is_ok() {
            Stored::Linked
        } else {
            let mut from = File::open(source).map_err(io_error(source))?;
            let mut to = crate::files::create_new(&temp)?;
            match io::copy(&mut from, &mut to) {
                Ok(bytes) => Stored::Copied(bytes),
                Err(source) => {
                    let _ = std::fs::remove_file(&temp);
                    return Err(Error::Io { path: temp, source });
                }
            }
        };
        if let Err(source) = std::fs::rename(&temp, &target) {
            let _ = std::fs::remove_file(&temp);
            return Err(Error::Io {
                path: target,
                source,
            });
        }
        crate::files::write(&dir.join("name"), format!("{name}\n").as_bytes())?;
        Ok(stored)
    }

    /// Every entry, least recently used first. A cache that does not exist is empty.
    pub fn list(&self) -> Result<Vec<CacheEntry>, Error> {
        let entries = match std::fs::read_dir(&self.root) {
            Ok(entries) => entries,
            Err(err) if err.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(err) => return Err(io_error(&self.root)(err)),
        };
        let mut list = Vec::new();
        for entry in entries {
            let entry = entry.map_err(io_error(&self.root))?;
            let Some(id) = entry.file_name().to_str().map(str::to_owned) else {
                continue;
            };
            if !valid_build_id(&id) {
                continue;
            }
            let Ok(meta) = std::fs::symlink_metadata(entry.path().join("executable")) else {
                continue;
            };
            let name_path = entry.path().join("name");
            let name = crate::files::read_capped(&name_path, 4096)
                .map(|b| String::from_utf8_lossy(&b).trim_end().to_owned())
                .unwrap_or_default();
            let last_used = std::fs::metadata(&name_path)
                .and_then(|m| m.modified())
                .unwrap_or(SystemTime::UNIX_EPOCH);
            use std::os::unix::fs::MetadataExt;
            list.push(CacheEntry {
                build_id: id,
                name,
                bytes: meta.len(),
                shared: meta.nlink() > 1,
                last_used,
            });
        }
        list.sort_by(|a, b| (a.last_used, &a.build_id).cmp(&(b.last_used, &b.build_id)));
        Ok(list)
    }

    /// Removes the least recently used entries until the space the cache holds on its own is
    /// at most `limit` bytes; the entries of `keep` (those a recording just used) stay.
    pub fn prune(&self, limit: u64, keep: &[String]) -> Result<Pruned, Error> {
        let list = self.list()?;
        let mut total: u64 = list.iter().map(CacheEntry::own_bytes).sum();
        let mut pruned = Pruned::default();
        for entry in list {
            if total <= limit {
                break;
            }
            if keep.contains(&entry.build_id) {
                continue;
            }
            let dir = self.root.join(&entry.build_id);
            std::fs::remove_dir_all(&dir).map_err(io_error(&dir))?;
            total -= entry.own_bytes();
            pruned.removed.push(entry);
        }
        pruned.kept_bytes = total;
        Ok(pruned)
    }
}

/// `link(2)` following a magic link such as `/proc/PID/map_files/...` to the file it names.
fn hard_link_following(source: &Path, target: &Path) -> io::Result<()> {
    use std::ffi::CString;
    use std::os::unix::ffi::OsStrExt;
    let from = CString::new(source.as_os_str().as_bytes())?;
    let to = CString::new(target.as_os_str().as_bytes())?;
    // SAFETY: two NUL-terminated paths, alive across the call.
    let done = unsafe {
        libc::linkat(
            libc::AT_FDCWD,
            from.as_ptr(),
            libc::AT_FDCWD,
            to.as_ptr(),
            libc::AT_SYMLINK_FOLLOW,
        )
    };
    if done == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A file is kept once under its build ID (linked on the same file system), listed with
    /// its name, and pruning removes the least recently used first, never one to keep.
    #[test]
    fn store_list_prune() {
        let dir = tempfile::tempdir().expect("temp dir");
        let cache = BuildIdCache::at(dir.path().join("cache"));
        let a = dir.path().join("a");
        let b = dir.path().join("b");
        std::fs::write(&a, vec![1u8; 1000]).expect("write");
        std::fs::write(&b, vec![2u8; 3000]).expect("write");
        assert_eq!(
            cache.store("aaaaaaaa01", &a, "/bin/a").expect("store"),
            Stored::Linked
        );
        assert_eq!(
            cache.store("aaaaaaaa01", &a, "/bin/a").expect("again"),
            Stored::Present
        );
        assert_eq!(
            cache.store("bbbbbbbb02", &b, "/bin/b").expect("store"),
            Stored::Linked
        );
        assert!(cache.store("../../x", &b, "/bin/b").is_err());
        let old = SystemTime::UNIX_EPOCH + std::time::Duration::from_secs(1_000_000);
        File::options()
            .append(true)
            .open(dir.path().join("cache/bbbbbbbb02/name"))
            .and_then(|f| f.set_modified(old))
            .expect("age");
        let list = cache.list().expect("list");
        let ids: Vec<&str> = list.iter().map(|e| e.build_id.as_str()).collect();
        assert_eq!(ids, ["bbbbbbbb02", "aaaaaaaa01"]);
        assert_eq!(list[0].name, "/bin/b");
        assert_eq!((list[0].bytes, list[0].shared), (3000, true));
        // Linked files cost nothing while their originals live: nothing to prune.
        assert!(cache.prune(0, &[]).expect("prune").removed.is_empty());
        std::fs::remove_file(&a).expect("rm");
        std::fs::remove_file(&b).expect("rm");
        let kept = cache.prune(0, &["bbbbbbbb02".to_owned()]).expect("prune");
        assert_eq!(kept.removed.len(), 1);
        assert_eq!(kept.removed[0].build_id, "aaaaaaaa01");
        assert_eq!(kept.kept_bytes, 3000);
        let pruned = cache.prune(1000, &[]).expect("prune");
        assert_eq!(pruned.removed[0].build_id, "bbbbbbbb02");
        assert!(cache.list().expect("list").is_empty());
    }

    /// The lines of `fltrace cache list` and `prune`: a future last use reads as 0 s ago, a
    /// linked entry costs no bytes of its own.
    #[test]
    fn listing_and_pruning_lines() {
        let entry = |id: &str, shared| CacheEntry {
            build_id: id.to_owned(),
            name: "/usr/lib/libc.so.6".to_owned(),
            bytes: 2048,
            shared,
            last_used: SystemTime::now() + std::time::Duration::from_secs(3600),
        };
        let entries = [entry("ab12", false), entry("cd34", true)];
        assert_eq!(
            entries[1].line(),
            "cd34         2048 linked        0s ago /usr/lib/libc.so.6"
        );
        let root = Path::new("/c");
        assert_eq!(
            listing_total(&entries, root),
            "2 files, 2048 bytes of their own, in /c"
        );
        let pruned = Pruned {
            removed: vec![entries[0].clone()],
            kept_bytes: 0,
        };
        assert_eq!(
            pruned.lines(root),
            [
                "removed ab12 /usr/lib/libc.so.6",
                "1 files removed, 0 bytes of their own kept in /c"
            ]
        );
    }
}
