//! The allocation spool of `record --allocs`: the private directory beside a recording where
//! the preloaded tracer writes its logs (`fltrace_runtime_abi::alloclog`) until the recorder
//! converts them into each process's allocation tables ([`convert`]). A recorder killed
//! before converting leaves its spool; [`recover_stale_spools`] converts it, so that every
//! command reading the recording sees the allocations: readers depend on this crate alone.

use std::ffi::OsString;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

mod alloc_log;
mod convert;

pub use alloc_log::{LiveLog, any_log_stopped, any_spool_log_stopped, log_bytes_taken, log_name};
pub use convert::{
    Conversion, Converted, FullLogs, LIVE_EVERY, STACK_FRAMES_CAP, Watchers, convert_spooled,
    image_starts, note_refused, refused_note, thread_cpu, write_pairing,
};

use crate::files;

/// When the allocation log at `path` was made (CLOCK_MONOTONIC ns, the records' clock); 0
/// when its header does not say (a library from before the field, a log not initialised).
pub fn log_made_ns(path: &Path) -> std::io::Result<u64> {
    use fltrace_runtime_abi::alloclog::{LogHeader, MAGIC};
    use std::io::Read as _;
    let mut header = [0u8; std::mem::size_of::<LogHeader>()];
    let mut file = std::fs::File::open(path)?;
    if file.read_exact(&mut header).is_err() {
        return Ok(0);
    }
    let word = |offset: usize| {
        let mut bytes = [0u8; 8];
        bytes.copy_from_slice(&header[offset..offset + 8]);
        u64::from_ne_bytes(bytes)
    };
    if word(std::mem::offset_of!(LogHeader, magic)) != MAGIC {
        return Ok(0);
    }
    Ok(word(std::mem::offset_of!(LogHeader, made_ns)))
}

/// The address-space generation of the first image whose library wrote a log of process
/// `pid` (its log image 0 in `spool`): `at_least`, the generation the library ran in when the
/// process began (the command's first, or the parent's at a fork), unless the log was made
/// in a later image. A child made by vfork (dash's, posix_spawn's) runs no fork handler, so
/// its first log is the one the image it execs makes: filed under the parent's image, its
/// calls would be symbolized against the wrong mappings. The later image is the last whose
/// first mapping (`out_dir`'s mappings table, Unix-epoch times) is not after the log was
/// made (CLOCK_MONOTONIC plus `mono_offset`).
pub fn first_log_generation(
    spool: &Path,
    out_dir: &Path,
    pid: u32,
    at_least: u32,
    mono_offset: u64,
) -> u32 {
    let made = match log_made_ns(&spool.join(log_name(pid, 0))) {
        Ok(made) if made > 0 => made.saturating_add(mono_offset),
        _ => return at_least,
    };
    let Ok(starts) = image_starts(&files::mmaps(out_dir, pid)) else {
        return at_least;
    };
    starts
        .iter()
        .filter(|&(&generation, &start)| generation > at_least && start > 0 && start <= made)
        .map(|(&generation, _)| generation)
        .max()
        .unwrap_or(at_least)
}

/// The name of the metadata file in a spool directory (the tracer's files start with `log`).
pub const METADATA_FILE: &str = "recording";

/// What converting a spool's logs needs that is not in them, written when the recording
/// starts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SpoolMetadata {
    /// The recording id of the tables.
    pub recording: String,
    /// CLOCK_MONOTONIC to Unix-epoch nanoseconds.
    pub mono_offset: u64,
}

impl SpoolMetadata {
    /// The content of the spool's metadata file ([`METADATA_FILE`]).
    pub fn to_text(&self) -> String {
        format!(
            "recording {}\nmono_offset {}\n",
            self.recording, self.mono_offset
        )
    }

    fn parse(text: &str) -> Option<SpoolMetadata> {
        let mut recording = None;
        let mut mono_offset = None;
        for line in text.lines() {
            match line.split_once(' ') {
                Some(("recording", value)) if !value.is_empty() => {
                    recording = Some(value.to_owned());
                }
                Some(("mono_offset", value)) => mono_offset = value.parse().ok(),
                _ => {}
            }
        }
        Some(SpoolMetadata {
            recording: recording?,
            mono_offset: mono_offset?,
        })
    }
}

/// The name of a spool directory, before `<recorder pid>-<unix ns>`.
pub const SPOOL_PREFIX: &str = ".fltrace-allocs-";

/// Opens spool directory `dir` (never through a link) and takes its lock; `try_only` fails
/// at once when another process holds it.
pub fn lock_spool(dir: &Path, try_only: bool) -> std::io::Result<std::fs::File> {
    use std::os::fd::AsRawFd;
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_DIRECTORY | libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(dir)?;
    let mode = if try_only {
        libc::LOCK_EX | libc::LOCK_NB
    } else {
        libc::LOCK_EX
    };
    // SAFETY: flock on a descriptor we own; the lock goes with it.
    if unsafe { libc::flock(file.as_raw_fd(), mode) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(file)
}

/// A process whose allocations a killed recorder left in its spool, now in its tables.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Recovered {
    /// The spool they were in (now removed).
    pub spool: PathBuf,
    /// The process.
    pub pid: u32,
    /// What its conversion found.
    pub converted: Converted,
}

/// What recovery does with a stale spool's logs once they are in the tables.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SpoolLogs {
    /// Left where they are: a command that only reads a recording deletes nothing in it.
    Keep,
    /// Removed (by `record`, which writes in the directory anyway).
    Remove,
}

/// Converts the spools of recorders that are gone (killed before they could convert them)
/// into their recordings' allocation tables, then (with [`SpoolLogs::Remove`]) removes what
/// those recorders wrote there: a
/// spool whose lock is free and whose recorder pid no longer runs. Only a spool fltrace made
/// is touched: a directory (not a link) with the spool's name, owned by the user running
/// this command (or, for root, by the owner of `out_dir`), holding its metadata file. Only
/// the files a recorder writes there are removed, then the directory if that empties it;
/// anything else is left and named in a warning. A process whose tables exist already is
/// left as it is; a spool that does not convert loses its logs, with a warning. Returns the
/// processes recovered.
pub fn recover_stale_spools(out_dir: &Path, logs: SpoolLogs) -> Vec<Recovered> {
    use std::os::unix::fs::MetadataExt;
    let mut recovered = Vec::new();
    let Ok(entries) = std::fs::read_dir(out_dir) else {
        return recovered;
    };
    // SAFETY: geteuid cannot fail.
    let user = unsafe { libc::geteuid() };
    let dir_owner = std::fs::metadata(out_dir).map(|m| m.uid()).ok();
    let writable = std::ffi::CString::new(out_dir.as_os_str().as_encoded_bytes())
        // SAFETY: a NUL-terminated path.
        .is_ok_and(|dir| unsafe { libc::access(dir.as_ptr(), libc::W_OK) } == 0);
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(recorder) = name
            .to_str()
            .and_then(|n| n.strip_prefix(SPOOL_PREFIX))
            .and_then(|rest| rest.split('-').next())
            .and_then(|pid| pid.parse::<i32>().ok())
        else {
            continue;
        };
        // Between making its spool and locking it a live recorder holds no lock yet, but its
        // pid runs; a dead pid with a free lock is certainly stale.
        // SAFETY: signal 0 only checks for existence.
        let alive = unsafe { libc::kill(recorder, 0) } == 0
            || std::io::Error::last_os_error().raw_os_error() == Some(libc::EPERM);
        if alive {
            continue;
        }
        let path = entry.path();
        // `symlink_metadata`: a link named like a spool is not one.
        let Ok(metadata) = std::fs::symlink_metadata(&path) else {
            continue;
        };
        let owner_ok = metadata.uid() == user || (user == 0 && Some(metadata.uid()) == dir_owner);
        if !metadata.is_dir() || !owner_ok {
            log::warn!(
                "left {} alone: named like an fltrace allocation spool, but not a directory of yours",
                path.display()
            );
            continue;
        }
        let spool_metadata = match read_spool_metadata(&path) {
            Ok(metadata) => metadata,
            Err(why) => {
                log::warn!(
                    "left {} alone: named like an fltrace allocation spool, but {why}{}",
                    path.display(),
                    contents_note(&path)
                );
                continue;
            }
        };
        if !writable {
            // Its tables could not be written: the logs stay for a command that can.
            log::warn!(
                "left {}, the allocation logs of a recorder that was killed: they are converted by the next fltrace command run by a user who can write {}",
                path.display(),
                out_dir.display()
            );
            continue;
        }
        // Held while converting: another fltrace recovering the same spool skips it.
        let Ok(_lock) = lock_spool(&path, true) else {
            continue;
        };
        let why_not = recover_spool(&path, &spool_metadata, out_dir, &mut recovered).err();
        if logs == SpoolLogs::Keep {
            if let Some(reason) = why_not {
                log::warn!(
                    "the allocation logs in {}, left by a recorder that was killed, are lost: {reason}",
                    path.display()
                );
            }
            continue;
        }
        let foreign = remove_spool_files(&path);
        if !foreign.is_empty() {
            log::warn!(
                "left {}: it holds files fltrace did not write ({}); remove them yourself",
                path.display(),
                foreign.join(", ")
            );
        }
        match why_not {
            Some(reason) => log::warn!(
                "removed the logs in {}, left by a recorder that was killed: {reason}",
                path.display()
            ),
            None => log::info!(
                "removed the logs in {}, left by a recorder that was killed, once converted",
                path.display()
            ),
        }
    }
    recovered
}

/// The spool's metadata, or why the directory is not taken for a spool.
fn read_spool_metadata(spool: &Path) -> Result<SpoolMetadata, String> {
    match files::read_capped(&spool.join(METADATA_FILE), METADATA_CAP) {
        Ok(bytes) => std::str::from_utf8(&bytes)
            .ok()
            .and_then(SpoolMetadata::parse)
            .ok_or_else(|| format!("its `{METADATA_FILE}` file is not a spool's metadata")),
        Err(crate::Error::Io { source, .. }) if source.kind() == std::io::ErrorKind::NotFound => {
            Err(format!("it has no `{METADATA_FILE}` metadata file"))
        }
        Err(e) => Err(format!("its metadata is unreadable ({e})")),
    }
}

/// The largest metadata file: two short lines.
const METADATA_CAP: u64 = 4096;

/// ` (it holds: a, b)`: the first names in a directory left alone, so the user can judge it.
fn contents_note(dir: &Path) -> String {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return String::new();
    };
    let mut names: Vec<String> = entries
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    if names.is_empty() {
        return String::new();
    }
    names.sort();
    let more = names.len().saturating_sub(5);
    names.truncate(5);
    let more = if more > 0 {
        format!(" and {more} more")
    } else {
        String::new()
    };
    format!(" (it holds: {}{more})", names.join(", "))
}

/// Whether `name` is one of the files a recorder and its tracer write in a spool: the
/// metadata, the clock page, `log-<pid>.<image>`, the tables of a drain.
fn is_spool_file(name: &str) -> bool {
    let numbered = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    let drain_table = |prefix: &str| {
        name.strip_prefix(prefix)
            .and_then(|rest| rest.strip_suffix(".parquet"))
            .is_some_and(numbered)
    };
    name == METADATA_FILE
        || name == "log-clock"
        || drain_table(DRAIN_ALLOCS)
        || drain_table(DRAIN_STACKS)
        || name
            .strip_prefix("log-")
            .and_then(|rest| rest.split_once('.'))
            .is_some_and(|(pid, image)| numbered(pid) && numbered(image))
}

/// Removes from stale spool `spool` the regular files a recorder writes there, then the
/// directory if that empties it. Returns the names of what was left.
fn remove_spool_files(spool: &Path) -> Vec<String> {
    let mut left = Vec::new();
    let Ok(entries) = std::fs::read_dir(spool) else {
        return left;
    };
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        let regular = entry.file_type().is_ok_and(|t| t.is_file());
        if !(regular && is_spool_file(&name) && std::fs::remove_file(entry.path()).is_ok()) {
            left.push(name);
        }
    }
    left.sort();
    if left.is_empty() {
        let _ = std::fs::remove_dir(spool);
    }
    left
}

/// Converts each process's logs in stale spool `spool` unless its tables exist; says why
/// not when the spool cannot be converted.
fn recover_spool(
    spool: &Path,
    metadata: &SpoolMetadata,
    out_dir: &Path,
    recovered: &mut Vec<Recovered>,
) -> Result<(), String> {
    let mut pids: Vec<u32> = std::fs::read_dir(spool)
        .map_err(|e| format!("it is unreadable ({e})"))?
        .flatten()
        .filter_map(|e| {
            let name = e.file_name();
            let (pid, _image) = name.to_str()?.strip_prefix("log-")?.split_once('.')?;
            pid.parse().ok()
        })
        .collect();
    pids.sort_unstable();
    pids.dedup();
    for pid in pids {
        if files::allocs(out_dir, pid).exists() || files::alloc_stacks(out_dir, pid).exists() {
            continue;
        }
        // The first image the library ran in: the command's first (0), or the parent's at a
        // fork, which is the child's first mapping's generation too.
        let forked = crate::read_mappings(&files::mmaps(out_dir, pid))
            .ok()
            .and_then(|mappings| mappings.iter().map(|m| m.generation).min())
            .unwrap_or(0);
        let first_generation =
            first_log_generation(spool, out_dir, pid, forked, metadata.mono_offset);
        match convert_spooled(
            spool,
            pid,
            first_generation,
            out_dir,
            metadata,
            FullLogs::Keep,
            // A killed recorder's calls: reports pair them themselves.
            Watchers::default(),
        ) {
            Ok(Some(converted)) => {
                log::warn!(
                    "recovered {} allocations of process {pid} from the spool of a killed recorder{}",
                    converted.events,
                    refused_note(&converted)
                );
                // A recording its recorder finished has its stats checksummed: the warning
                // is all that says it then.
                let finished = crate::checksums::path(out_dir, pid).exists();
                if !finished {
                    note_refused(out_dir, pid, Some(&converted));
                }
                recovered.push(Recovered {
                    spool: spool.to_owned(),
                    pid,
                    converted,
                });
            }
            Ok(None) => {}
            Err(e) => {
                // Half-written tables would hide the loss.
                let _ = std::fs::remove_file(files::allocs(out_dir, pid));
                let _ = std::fs::remove_file(files::alloc_stacks(out_dir, pid));
                let _ = std::fs::remove_file(files::alloc_totals(out_dir, pid));
                return Err(format!("the logs of process {pid} do not convert ({e})"));
            }
        }
    }
    Ok(())
}

/// The names of the tables a drain writes in the spool, before `<pid>.parquet`.
pub const DRAIN_ALLOCS: &str = "allocs-";
/// See [`DRAIN_ALLOCS`].
pub const DRAIN_STACKS: &str = "stacks-";

/// The spools in `dir` (names in it) holding the logs of a process whose allocation table is
/// not in `dir` yet: what [`recover_stale_spools`] would convert. A spool converted before is
/// not named again, so that a reader copies nothing only to skip it.
pub fn unconverted_spools(dir: &Path) -> Vec<OsString> {
    std::fs::read_dir(dir)
        .map(|entries| {
            entries
                .flatten()
                .map(|entry| entry.file_name())
                .filter(|name| {
                    name.to_str().is_some_and(|n| n.starts_with(SPOOL_PREFIX))
                        && unconverted(&dir.join(name), dir)
                })
                .collect()
        })
        .unwrap_or_default()
}

/// Whether the spool `spool` holds the logs of a process whose allocation table is not in
/// `dir` yet.
fn unconverted(spool: &Path, dir: &Path) -> bool {
    let Ok(entries) = std::fs::read_dir(spool) else {
        return false;
    };
    entries.flatten().any(|entry| {
        entry
            .file_name()
            .to_str()
            .and_then(|n| {
                n.strip_prefix("log-")?
                    .split_once('.')?
                    .0
                    .parse::<u32>()
                    .ok()
            })
            .is_some_and(|pid| !files::allocs(dir, pid).exists())
    })
}

#[cfg(test)]
mod tests {
    use super::SpoolMetadata;

    #[test]
    fn spool_metadata_reads_back_what_was_written() {
        let metadata = SpoolMetadata {
            recording: "4242-1795393791310439880".into(),
            mono_offset: u64::MAX - 7,
        };
        assert_eq!(SpoolMetadata::parse(&metadata.to_text()), Some(metadata));
        assert_eq!(SpoolMetadata::parse("recording 1-2\n"), None);
        assert_eq!(SpoolMetadata::parse("mono_offset x\nrecording 1-2\n"), None);
    }
}
