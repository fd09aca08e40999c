//! `fltrace ffaults`: faults on file-backed memory by file, from `filemap:mm_filemap_fault`
//! (device and inode of the file, exact for every fault), with inodes named through the
//! mappings of the processes seen.

use std::collections::HashMap;

use crate::{By, CountSpec, Event, ProcessFilter, ProcessMaps, Snapshot};

/// The tracepoint giving the faulting file's device and inode.
pub const FILEMAP_FAULT: (&str, &str) = ("filemap", "mm_filemap_fault");

/// The counter spec of ffaults: keyed by inode and device (and the task name when `by_comm`).
pub fn spec(processes: ProcessFilter, by_comm: bool) -> CountSpec {
    let mut by = vec![By::Field("i_ino".into())];
    if by_comm {
        by.push(By::Comm);
    }
    CountSpec {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splits_kernel_device_numbers() {
        // 254:1 as the kernel's dev_t.
        assert_eq!(split_dev((254 << 20) | 1), (254, 1));
    }
}
