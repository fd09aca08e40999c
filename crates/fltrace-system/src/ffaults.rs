//! `fltrace ffaults`: faults on file-backed memory by file, from `filemap:mm_filemap_fault`
//! (device and inode of the file, exact for every fault), with inodes named through the
//! mappings of the processes seen.

use std::collections::HashMap;

use std::io::{self, Write};

use serde_json::json;

use fltrace_render::TableFormat;

use crate::bpf::{By, CounterSpec, Event, ProcessFilter, ProcessMaps, Snapshot};
/// The tracepoint giving the faulting file's device and inode.
pub const FILEMAP_FAULT: (&str, &str) = ("filemap", "mm_filemap_fault");

/// The counter spec of ffaults: keyed by inode and device (and the task name when `by_comm`).
pub fn spec(processes: ProcessFilter, by_comm: bool) -> CounterSpec {
    let mut by = vec![By::Field("i_ino".into())];
    if by_comm {
        by.push(By::Comm);
    }
    CounterSpec {
        events: vec![Event::Tracepoint {
            category: FILEMAP_FAULT.0.into(),
            name: FILEMAP_FAULT.1.into(),
        }],
        by,
        second_field: Some("s_dev".into()),
        filter: None,
        processes,
        keep_maps: true,
    }
}

/// Faults of one file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileFaults {
    /// The file's path, or `dev MAJ:MIN inode N` when no process seen maps it any more.
    pub file: String,
    /// The task name, when asked for.
    pub comm: Option<String>,
    /// Faults.
    pub count: u64,
}

/// The kernel's `dev_t` (major in the top 12 bits of 32) as /proc/PID/maps prints it.
fn split_dev(dev: u64) -> (u32, u32) {
    ((dev >> 20) as u32, (dev & 0xfffff) as u32)
}

/// Names the inodes of an ffaults snapshot and merges rows of the same file.
pub fn by_file(snapshot: &Snapshot, maps: &ProcessMaps) -> Vec<FileFaults> {
    let wanted: std::collections::HashSet<(u32, u32, u64)> = snapshot
        .rows
        .iter()
        .map(|row| {
            let (major, minor) = split_dev(row.field2.unwrap_or(0));
            (major, minor, row.field.unwrap_or(0))
        })
        .collect();
    let files = maps.files_by_inode(&wanted);
    let mut merged: HashMap<(String, Option<String>), u64> = HashMap::new();
    for row in &snapshot.rows {
        let inode = row.field.unwrap_or(0);
        let (major, minor) = split_dev(row.field2.unwrap_or(0));
        let file = files
            .get(&(major, minor, inode))
            .cloned()
            .unwrap_or_else(|| format!("dev {major}:{minor} inode {inode}"));
        *merged.entry((file, row.comm.clone())).or_default() += row.count;
    }
    let mut out: Vec<FileFaults> = merged
        .into_iter()
        .map(|((file, comm), count)| FileFaults { file, comm, count })
        .collect();
    out.sort_by(|a, b| b.count.cmp(&a.count).then_with(|| a.file.cmp(&b.file)));
    out
}

/// Writes faults by file (`ffaults`).
pub fn write_file_faults(
    out: &mut impl Write,
    files: &[FileFaults],
    format: TableFormat,
) -> io::Result<()> {
    match format {
        TableFormat::Json => {
            let rows: Vec<_> = files
                .iter()
                .map(|f| json!({"file": f.file, "comm": f.comm, "count": f.count}))
                .collect();
            serde_json::to_writer_pretty(&mut *out, &rows)?;
            writeln!(out)?;
        }
        TableFormat::Csv => {
            let mut csv = csv::Writer::from_writer(&mut *out);
            csv.write_record(["count", "comm", "file"])?;
            for f in files {
                let count = f.count.to_string();
                csv.write_record([&count, f.comm.as_deref().unwrap_or(""), &f.file])?;
            }
            csv.flush()?;
        }
        TableFormat::Table => {
            writeln!(out, "{:>10}  FILE", "FAULTS")?;
            for f in files {
                match &f.comm {
                    Some(c) => writeln!(out, "{:>10}  {}  {c}", f.count, f.file)?,
                    None => writeln!(out, "{:>10}  {}", f.count, f.file)?,
                }
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splits_kernel_device_numbers() {
        // 254:1 as the kernel's dev_t.
        assert_eq!(split_dev((254 << 20) | 1), (254, 1));
    }

    fn written(write: impl FnOnce(&mut Vec<u8>) -> io::Result<()>) -> String {
        let mut out = Vec::new();
        write(&mut out).expect("writing to memory");
        String::from_utf8(out).expect("UTF-8")
    }

    #[test]
    fn file_faults_table_has_its_header() {
        let files = [FileFaults {
            file: "/lib/libc.so.6".into(),
            comm: Some("prog".into()),
            count: 12,
        }];
        assert_eq!(
            written(|o| write_file_faults(o, &files, TableFormat::Table)),
            "    FAULTS  FILE\n        12  /lib/libc.so.6  prog\n"
        );
        assert_eq!(
            written(|o| write_file_faults(o, &files, TableFormat::Csv)),
            "count,comm,file\n12,prog,/lib/libc.so.6\n"
        );
    }
}
