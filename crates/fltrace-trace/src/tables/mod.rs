//! The Parquet tables of a recording: one file per table kind, each holding its schema, how
//! its rows are written and how they are read back; the checkpointing writer and the
//! recovering reader they all go through are written once ([`writer`], [`reader`]).
//!
//! Written with the low-level column API (no Arrow) to keep the build small. Columns that grow
//! steadily (times, fault addresses) use delta encoding; columns with few distinct values
//! (instruction addresses, stack ids, threads, flags) use dictionaries. See `docs/FORMAT.md`.
//!
//! A recorder can die at any moment (SIGKILL, a full disk), and a Parquet file is only readable
//! once its footer, written last, is there. So each writer also appends a *checkpoint*: a
//! footer describing the row groups written since the previous checkpoint, chained to it by
//! offset (see [`keys::CHECKPOINT`]). Checkpoints are never overwritten: the file only grows, so
//! whatever moment it stops at, every checkpoint before is intact and [`TableReader`] recovers
//! the rows they describe. The final footer, written at the end as in any Parquet file, covers
//! all row groups; the checkpoints are then bytes between row groups that readers skip.
//!
//! Every footer carries a CRC-32 of each column chunk it describes ([`keys::CRC32`]): the
//! parquet crate neither writes page checksums nor lets them be written, and without one a
//! changed byte inside a data page reads back as a different value.
//!
//! Every table begins with `recording` and `pid`, constant within a file, so that a query over
//! the files of many processes and recordings (a glob) can tell their rows apart and join on
//! them. Column names avoid SQL reserved words (`end`), so that no query needs to quote them.
//! Since layout 3 the columns carry no unsigned or timestamp annotation: Spark refuses
//! TIMESTAMP(NANOS) with its default settings and reads UINT_64 as decimal(20,0), whose
//! arithmetic widens and is slower; plain INT32/INT64 read the same in every engine. The bits
//! are those of fltrace's unsigned values (user-space addresses and sizes are below 2^63), and
//! the readers read both layouts alike, since they read physical types.

use std::path::Path;

use crate::files;

mod access;
mod alloc_stats;
mod alloc_totals;
mod allocs;
mod delta;
mod export;
mod faults;
mod mappings;
pub(crate) mod reader;
mod stacks;
pub(crate) mod writer;

pub use access::{AccessWriter, read_access};
pub use alloc_stats::{
    AllocPassSummary, AllocStackStats, PairCalls, PairingFactory, read_alloc_stats,
    write_alloc_stats,
};
pub use alloc_totals::{read_alloc_totals, write_alloc_totals};
pub use allocs::{AllocRowGroups, AllocWriter, read_allocs};
pub use export::{ExportedFault, ExportedFaultWriter, SymbolizedFrame, SymbolizedFrameWriter};
pub use faults::{FaultRowGroups, FaultWriter, read_faults};
pub use mappings::{MappingWriter, read_mappings};
pub(crate) use reader::TableReader;
pub use reader::{
    ColumnChunk, Completeness, RowGroups, column_chunks, completeness, read_origin, table_rows,
    time_range,
};
pub use stacks::{StackWriter, read_stacks};
pub use writer::{EncodedGroup, TableWriter};

/// The table layout written, in every footer under [`keys::FORMAT`](crate::keys::FORMAT).
/// Files without the key are of layout 1: no `recording` column, `pid` only in the faults
/// table, and the mappings' address range in columns `start` and `end`. Layout 2 annotated
/// the integers unsigned and `time_ns` TIMESTAMP(NANOS), and had no `fault_id` or
/// `mapping_id`. The readers read every layout.
pub const FORMAT_VERSION: u32 = 3;

/// Which recording and process the rows of a table belong to: the `recording` and `pid` columns.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
pub struct Origin {
    /// The recording id: the session id of the `fltrace record` run, `<root pid>-<start ns>`
    /// (the faults footer's [`keys::SESSION`](crate::keys::SESSION)).
    pub recording: String,
    /// The process id.
    pub pid: u32,
}

impl Origin {
    /// The origin of `pid`'s tables in recording `recording`.
    pub fn new(recording: impl Into<String>, pid: u32) -> Origin {
        Origin {
            recording: recording.into(),
            pid,
        }
    }

    /// For writers created without an origin: the pid in a file name of the form
    /// `fltrace-data-<kind>-<pid>.parquet` (0 otherwise) and an empty recording id.
    fn from_path(path: &Path) -> Origin {
        let pid = path
            .file_stem()
            .and_then(|s| s.to_str())
            .and_then(|s| s.strip_prefix(files::PREFIX))
            .and_then(|s| s.rsplit_once('-'))
            .and_then(|(_, pid)| pid.parse().ok())
            .unwrap_or(0);
        Origin::new(String::new(), pid)
    }
}

/// Key-value pairs of a Parquet footer.
pub type Metadata = Vec<(String, String)>;

/// Rows buffered before a row group is written: bounds the recorder's memory, and the time a
/// flush holds up the recorder (the kernel's ring buffer must not fill meanwhile).
const ROW_GROUP: usize = 1 << 16;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::keys;
    use crate::{
        AccessRecord, AllocCall, AllocEvent, CodeAddr, Fault, FaultFlags, Mapping, Stack, VirtAddr,
    };

    /// Fault `i` of a made-up sequence: steady times and addresses, a few threads, stacks and
    /// flags.
    pub(crate) fn fault(i: u64) -> Fault {
        Fault {
            time_ns: 1_700_000_000_000_000_000 + i * 1600,
            pid: 42,
            tid: 42 + (i % 3) as u32,
            ip: CodeAddr::new(0x5555_5555_1234 + (i % 2)),
            addr: VirtAddr::new(0x7f00_0000_0000 + i * 4096 + 17),
            flags: FaultFlags((i % 4) as u16 | FaultFlags::ZERO),
            stack_id: (i % 5) as u32,
        }
    }

    /// Writes faults `0..count` of [`fault`] into a faults table at `path`, without metadata.
    pub(crate) fn write_faults(path: &Path, count: u64) {
        let mut writer = FaultWriter::create(path, &[]).unwrap();
        for i in 0..count {
            writer.push(fault(i)).unwrap();
        }
        writer.finish().unwrap();
    }

    /// The `recording` and `pid` columns of every table come back byte for byte: from the
    /// origin given, or for faults from the footer's session and each row's pid.
    #[test]
    fn origin_columns_round_trip() {
        let dir = tempfile::tempdir().unwrap();
        // Not ASCII, and longer than a session id, to catch any truncation or re-encoding.
        let origin = Origin::new("4242-1700000000123456789-ré\u{1F600}", 4243);
        let path = |kind: &str| files::path(dir.path(), kind, origin.pid, "parquet");

        let metadata = vec![(keys::SESSION.to_owned(), origin.recording.clone())];
        let mut faults = FaultWriter::create(&path("faults"), &metadata).unwrap();
        for i in 0..70_000 {
            faults
                .push(Fault {
                    pid: origin.pid,
                    ..fault(i)
                })
                .unwrap();
        }
        faults.finish().unwrap();
        let mut stacks = StackWriter::create_for(&path("stacks"), origin.clone()).unwrap();
        stacks
            .push(Stack {
                end: crate::StackEnd::Unknown,
                id: 0,
                generation: 0,
                frames: [1].map(CodeAddr::new).to_vec(),
            })
            .unwrap();
        stacks.finish().unwrap();
        let mut mmaps = MappingWriter::create_for(&path("mmaps"), origin.clone()).unwrap();
        mmaps.push(Mapping::default()).unwrap();
        mmaps.finish().unwrap();
        let mut allocs = AllocWriter::create_for(&path("allocs"), origin.clone()).unwrap();
        allocs
            .push(AllocEvent {
                time_ns: 1,
                tid: 2,
                call: AllocCall::Malloc,
                addr: VirtAddr::new(3),
                size: 4,
                old_addr: VirtAddr::new(0),
                detail: 0,
                stack_id: 0,
            })
            .unwrap();
        allocs.finish().unwrap();
        let mut access = AccessWriter::create_for(&path("access"), origin.clone()).unwrap();
        access
            .push(AccessRecord {
                time_ns: 1,
                tid: 2,
                ip: CodeAddr::new(3),
                addr: VirtAddr::new(4),
                latency: 5,
                data_src: 6,
                stack_id: 0,
            })
            .unwrap();
        access.finish().unwrap();
        for kind in ["faults", "stacks", "mmaps", "allocs", "access"] {
            let read = read_origin(&path(kind)).unwrap();
            assert_eq!(read.as_ref(), Some(&origin), "{kind}");
            let footer = TableReader::open(&path(kind)).unwrap().metadata();
            assert!(
                footer.contains(&(keys::FORMAT.to_owned(), FORMAT_VERSION.to_string())),
                "{kind}: {footer:?}"
            );
        }

        // Without an origin, the pid comes from the file name.
        let named = files::stacks(dir.path(), 77);
        let mut writer = StackWriter::create(&named).unwrap();
        writer
            .push(Stack {
                end: crate::StackEnd::Unknown,
                id: 0,
                generation: 0,
                frames: vec![],
            })
            .unwrap();
        writer.finish().unwrap();
        assert_eq!(read_origin(&named).unwrap(), Some(Origin::new("", 77)));
    }
}
