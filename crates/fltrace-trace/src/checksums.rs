//! `fltrace-data-checksums-<pid>.out`: the size and CRC-32 of each file of a process's
//! recording, written once the recording has finished. A finished recording whose files no
//! longer match is corrupt (a disk, a copy, a hand went wrong), which is said naming the file,
//! never taken for a recording the recorder did not finish.
//!
//! Lines of `<file name> <bytes> <crc32, hex>`, then `checksum <crc32 of the lines before>`.

use std::io::Read;
use std::path::{Path, PathBuf};

use crate::{Error, files};

/// The checksums file of `pid`.
pub fn path(dir: &Path, pid: u32) -> PathBuf {
    files::checksums(dir, pid)
}

/// The files of `pid` the checksums cover, where they exist: the tables and text files a
/// recording writes (not the outputs of later commands).
fn covered(dir: &Path, pid: u32) -> Vec<PathBuf> {
    covered_kinds()
        .into_iter()
        .map(|(kind, ext)| files::path(dir, kind, pid, ext))
        .filter(|p| std::fs::symlink_metadata(p).is_ok())
        .collect()
}

/// The size and CRC-32 of input file `path`, read in blocks.
fn sum(path: &Path) -> Result<(u64, u32), Error> {
    let mut file = files::open_input(path)?;
    let mut hasher = crc32fast::Hasher::new();
    let mut buf = vec![0u8; 1 << 16];
    let mut len = 0u64;
    loop {
        match file.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => {
                hasher.update(&buf[..n]);
                len += n as u64;
            }
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(Error::io(path)(e)),
        }
    }
    Ok((len, hasher.finalize()))
}

/// Writes the checksums of `pid`'s files in `dir`, once the recording has finished them.
pub fn write(dir: &Path, pid: u32) -> Result<(), Error> {
    use std::fmt::Write as _;
    use std::io::Write as _;
    let mut text = String::new();
    for file in covered(dir, pid) {
        let (len, crc) = sum(&file)?;
        let name = file
            .file_name()
            .map(|n| n.to_string_lossy())
            .unwrap_or_default();
        let _ = writeln!(text, "{name} {len} {crc:08x}");
    }
    let _ = writeln!(text, "checksum {:08x}", crc32fast::hash(text.as_bytes()));
    let path = path(dir, pid);
    let mut out = files::create_new(&path)?;
    out.write_all(text.as_bytes())
        .and_then(|()| out.flush())
        .map_err(Error::io(&path))
}

/// The size the checksums file of `pid` recorded for its file `name` when the recording
/// finished, if it names it (unchecked: for saying how much of a file is left).
pub fn recorded_size(dir: &Path, pid: u32, name: &str) -> Option<u64> {
    let text = files::read_capped(&path(dir, pid), CAP).ok()?;
    let text = String::from_utf8(text).ok()?;
    text.lines().find_map(|line| {
        let mut fields = line.split(' ');
        (fields.next() == Some(name))
            .then(|| fields.next()?.parse().ok())
            .flatten()
    })
}

/// The largest checksums file: a short line per file.
const CAP: u64 = 64 << 10;

/// What checking `pid`'s files against their checksums found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verified {
    /// No checksums file: the recording was not finished, or by an older fltrace.
    Unchecked,
    /// Every file as the recording left it.
    Intact,
}

/// Checks `pid`'s files in `dir` against the checksums written when the recording finished;
/// a file that differs (size, CRC, missing) or a checksums file that does not check is an
/// [`Error::Corrupt`] naming it.
pub fn verify(dir: &Path, pid: u32) -> Result<Verified, Error> {
    let path = path(dir, pid);
    if std::fs::symlink_metadata(&path).is_err() {
        return Ok(Verified::Unchecked);
    }
    let corrupt = |file: &Path, detail: String| Error::Corrupt {
        path: file.to_owned(),
        detail,
    };
    let bytes = files::read_capped(&path, CAP)?;
    let text = String::from_utf8(bytes)
        .map_err(|_| corrupt(&path, "it is not the text fltrace wrote".into()))?;
    let body_end = text.trim_end_matches('\n').rfind('\n').map_or(0, |i| i + 1);
    let (body, last) = text.split_at(body_end);
    let own = last
        .trim_end()
        .strip_prefix("checksum ")
        .and_then(|crc| u32::from_str_radix(crc, 16).ok());
    if own != Some(crc32fast::hash(body.as_bytes())) || !text.ends_with('\n') {
        return Err(corrupt(&path, "its own checksum does not match".into()));
    }
    // A planted FIFO, device or oversized text file is refused by name where it is read
    // (`files::refused_inputs`), never read here.
    let refused: Vec<PathBuf> = files::refused_inputs(dir, pid)
        .into_iter()
        .filter_map(|e| match e {
            Error::Format { path, .. } => Some(path),
            _ => None,
        })
        .collect();
    for line in body.lines() {
        let mut fields = line.split(' ');
        let (Some(name), Some(len), Some(crc), None) =
            (fields.next(), fields.next(), fields.next(), fields.next())
        else {
            return Err(corrupt(
                &path,
                format!("a line is not `name size crc`: {line}"),
            ));
        };
        let (Ok(len), Ok(crc)) = (len.parse::<u64>(), u32::from_str_radix(crc, 16)) else {
            return Err(corrupt(
                &path,
                format!("a line is not `name size crc`: {line}"),
            ));
        };
        // Only names of this process's files, so a crafted line reads nothing else.
        let file = dir.join(name);
        if !covered_names(pid).iter().any(|n| n == name) {
            return Err(corrupt(
                &path,
                format!("it names a file it cannot cover: {name}"),
            ));
        }
        if refused.contains(&file) {
            continue;
        }
        // The size first: a file grown to gigabytes is not read to be found different.
        match std::fs::metadata(&file) {
            Ok(m) if m.len() != len => {
                return Err(corrupt(
                    &file,
                    format!("{} bytes where the finished recording had {len}", m.len()),
                ));
            }
            _ => {}
        }
        let (now_len, now_crc) = match sum(&file) {
            Ok(sums) => sums,
            Err(Error::Io { source, .. }) if source.kind() == std::io::ErrorKind::NotFound => {
                return Err(corrupt(
                    &file,
                    "it is missing from the finished recording".into(),
                ));
            }
            Err(e) => return Err(e),
        };
        if now_len != len {
            return Err(corrupt(
                &file,
                format!("{now_len} bytes where the finished recording had {len}"),
            ));
        }
        if now_crc != crc {
            return Err(corrupt(
                &file,
                format!("its CRC-32 is {now_crc:08x} where the finished recording's was {crc:08x}"),
            ));
        }
    }
    Ok(Verified::Intact)
}

/// The names [`covered`] may list for `pid`.
fn covered_names(pid: u32) -> Vec<String> {
    covered_kinds()
        .iter()
        .map(|(kind, ext)| format!("{}{kind}-{pid}.{ext}", files::PREFIX))
        .collect()
}

fn covered_kinds() -> [(&'static str, &'static str); 10] {
    [
        ("faults", "parquet"),
        ("stacks", "parquet"),
        ("mmaps", "parquet"),
        ("allocs", "parquet"),
        ("allocstacks", "parquet"),
        ("allocsums", "parquet"),
        ("access", "parquet"),
        ("accessstacks", "parquet"),
        ("procmaps", "out"),
        ("stats", "out"),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Written checksums verify; any byte changed in a covered file or in the checksums
    /// file itself is corrupt, naming that file.
    #[test]
    fn a_changed_byte_is_corrupt_naming_its_file() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(verify(dir.path(), 7).unwrap(), Verified::Unchecked);
        std::fs::write(files::stats(dir.path(), 7), "1 faults:3\n").unwrap();
        std::fs::write(files::procmaps(dir.path(), 7), "a\n").unwrap();
        write(dir.path(), 7).unwrap();
        assert_eq!(verify(dir.path(), 7).unwrap(), Verified::Intact);
        std::fs::write(files::stats(dir.path(), 7), "1 faults:4\n").unwrap();
        let error = verify(dir.path(), 7).unwrap_err().to_string();
        assert!(
            error.contains("fltrace-data-stats-7.out is corrupt: its CRC-32"),
            "{error}"
        );
        std::fs::write(files::stats(dir.path(), 7), "1 faults:3\n").unwrap();
        let sums = path(dir.path(), 7);
        let text = std::fs::read_to_string(&sums).unwrap();
        std::fs::write(&sums, text.replacen(" 2 ", " 3 ", 1)).unwrap();
        let error = verify(dir.path(), 7).unwrap_err().to_string();
        assert!(
            error.contains("fltrace-data-checksums-7.out is corrupt: its own checksum"),
            "{error}"
        );
    }
}
