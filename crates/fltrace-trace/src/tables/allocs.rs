//! `fltrace-data-allocs-<pid>.parquet`: every allocator and mapping call of a `--allocs`
//! recording (their stacks are in a stacks table of their own).

use std::path::Path;

use super::Origin;
use super::reader::{GroupColumns, ReadRow, RowGroups};
use super::writer::{Columns, TableRow, TableWriter};
use crate::{AllocCall, AllocEvent, Error, VirtAddr};

impl TableRow for AllocEvent {
    const SCHEMA: &'static str = "message alloc {
  required binary recording (STRING);
  required int32 pid;
  required int64 time_ns;
  required int32 tid;
  required int32 call;
  required int64 addr;
  required int64 size;
  required int64 old_addr;
  required int64 detail;
  required int32 stack_id;
}";
    // Delta encoding everywhere: the columns are either steady (times, addresses) or nearly
    // constant from row to row (thread, call, size, stack), which it packs into a few bits
    // without the per-value hashing of a dictionary, the main cost of writing 8 million rows.
    const DELTA_COLUMNS: &'static [&'static str] = &[
        "pid", "time_ns", "tid", "call", "addr", "size", "old_addr", "detail", "stack_id",
    ];
    // Every row group holds every thread, call, stack and most sizes and addresses: their
    // minimum and maximum narrow no query and cost a tenth of the writing. `pid` (one value)
    // and `time_ns` (in order) keep theirs, which let a query skip files and row groups.
    const UNSUMMARIZED_COLUMNS: &'static [&'static str] = &[
        "tid", "call", "addr", "size", "old_addr", "detail", "stack_id",
    ];

    fn write_columns(
        c: &mut Columns<'_, '_>,
        origin: &Origin,
        _first: u64,
        batch: &[AllocEvent],
    ) -> parquet::errors::Result<()> {
        c.origin(origin, batch.len())?;
        // The rows read once for every column, not once a column: a row group of events is
        // larger than the cache, and eight passes over it cost as much as encoding.
        c.int_columns(batch, |e| {
            [
                e.time_ns as i64,
                i64::from(e.tid),
                i64::from(e.call as u8),
                e.addr.get() as i64,
                e.size as i64,
                e.old_addr.get() as i64,
                e.detail as i64,
                i64::from(e.stack_id),
            ]
        })
    }
}

impl ReadRow for AllocEvent {
    fn read_group(c: &mut GroupColumns<'_>) -> Result<Vec<AllocEvent>, Error> {
        let (time, tid) = (c.u64s("time_ns")?, c.u32s("tid")?);
        let (call, addr, size) = (c.u32s("call")?, c.u64s("addr")?, c.u64s("size")?);
        let (old_addr, detail) = (c.u64s("old_addr")?, c.u64s("detail")?);
        let stack_id = c.u32s("stack_id")?;
        (0..time.len())
            .map(|i| {
                Ok(AllocEvent {
                    time_ns: time[i],
                    tid: tid[i],
                    call: alloc_call(c, call[i])?,
                    addr: VirtAddr::new(addr[i]),
                    size: size[i],
                    old_addr: VirtAddr::new(old_addr[i]),
                    detail: detail[i],
                    stack_id: stack_id[i],
                })
            })
            .collect()
    }
}

/// The call of `call` column value `value`.
pub(super) fn alloc_call(c: &GroupColumns<'_>, value: u32) -> Result<AllocCall, Error> {
    AllocCall::from_u8(value as u8)
        .ok_or_else(|| c.error(format!("unknown allocation call {value}")))
}

/// Writes `fltrace-data-allocs-<pid>.parquet`.
pub type AllocWriter = TableWriter<AllocEvent>;

/// The events of an allocations file, one row group (64K rows) at a time, so that a reader
/// pairing them in one pass holds the live blocks, never the whole table.
pub type AllocRowGroups = RowGroups<AllocEvent>;

/// Reads an allocations file.
pub fn read_allocs(path: &Path) -> Result<Vec<AllocEvent>, Error> {
    AllocRowGroups::open_table(path)?.read_all()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Allocation events come back byte for byte, every call kind and extreme values included,
    /// whole or a row group at a time.
    #[test]
    fn allocs_round_trip() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("a.parquet");
        let mut writer = AllocWriter::create(&path).unwrap();
        let expected: Vec<AllocEvent> = (0..70_000u64)
            .map(|i| AllocEvent {
                time_ns: 1_700_000_000_000_000_000 + i * 37,
                tid: 100 + (i % 3) as u32,
                call: AllocCall::ALL[i as usize % AllocCall::ALL.len()],
                addr: VirtAddr::new(0x7f00_0000_0000 + i * 48),
                size: if i == 5 { u64::MAX } else { i % 600 },
                old_addr: VirtAddr::new(i.wrapping_mul(0x9e37_79b9_7f4a_7c15)),
                detail: i << 32 | 0x22,
                stack_id: if i % 2 == 0 {
                    AllocEvent::NO_STACK
                } else {
                    i as u32
                },
            })
            .collect();
        for e in &expected {
            writer.push(*e).unwrap();
        }
        assert_eq!(writer.rows(), expected.len() as u64);
        writer.finish().unwrap();
        assert_eq!(read_allocs(&path).unwrap(), expected);
        let groups = AllocRowGroups::open_table(&path).unwrap();
        assert_eq!((groups.rows(), groups.row_groups()), (70_000, 2));
        let rows: Vec<AllocEvent> = groups.flat_map(|g| g.unwrap()).collect();
        assert_eq!(rows, expected, "the iterator gives the same rows");
    }

    /// Row groups encoded apart a slice of rows at a time, their columns of one value held
    /// back and taken from the last row group's, make the same file byte for byte as the
    /// columns written whole into the file: columns constant throughout, constant for a
    /// while (a second thread from row 20,000, a realloc in the last slice), a full row
    /// group repeated and a last one cut short.
    #[test]
    fn sliced_groups_are_the_whole_groups_bytes() {
        let dir = tempfile::tempdir().unwrap();
        let (whole, apart) = (dir.path().join("w.parquet"), dir.path().join("a.parquet"));
        let origin = Origin::new("4242-1795692575884983522", 4242);
        let rows = 3 * super::super::ROW_GROUP + 12_345;
        let events: Vec<AllocEvent> = (0..rows as u64)
            .map(|i| AllocEvent {
                time_ns: 1_700_000_000_000_000_000 + i / 3 * 1000,
                tid: if (20_000..30_000).contains(&i) { 8 } else { 7 },
                call: if i % 2 == 0 {
                    AllocCall::Malloc
                } else {
                    AllocCall::Free
                },
                addr: VirtAddr::new(0x5600_0000 + i * 7919 % 100_003 * 16),
                size: 16 + i * 37 % 512,
                old_addr: VirtAddr::new(if i == 65_535 { 0x5600_0040 } else { 0 }),
                detail: 0,
                stack_id: if i % 2 == 0 { 1 } else { AllocEvent::NO_STACK },
            })
            .collect();
        let mut writer = AllocWriter::create_for(&whole, origin.clone()).unwrap();
        for e in &events {
            writer.push(*e).unwrap();
        }
        writer.finish().unwrap();
        let mut writer = AllocWriter::create_for(&apart, origin).unwrap();
        let mut encoder = writer.group_encoder();
        for (i, group) in events.chunks(super::super::ROW_GROUP).enumerate() {
            let first = (i * super::super::ROW_GROUP) as u64;
            writer
                .push_encoded(encoder.encode(first, group).unwrap())
                .unwrap();
        }
        writer.finish().unwrap();
        assert_eq!(read_allocs(&apart).unwrap(), events);
        assert!(
            std::fs::read(&whole).unwrap() == std::fs::read(&apart).unwrap(),
            "the files differ"
        );
    }

    /// Row groups encoded apart (as the recorder's encoder threads do), whose `recording` and
    /// `pid` columns are encoded once and reused, read back as written: every row of every
    /// group, full or not, with the file's origin; `time_ns` and `pid` keep their statistics,
    /// the columns no query narrows by have none.
    #[test]
    fn encoded_groups_round_trip() {
        use parquet::file::reader::{FileReader, SerializedFileReader};
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("a.parquet");
        let origin = Origin::new("4242-1795692575884983522", 4242);
        let mut writer = AllocWriter::create_for(&path, origin.clone()).unwrap();
        let mut encoder = writer.group_encoder();
        let events: Vec<AllocEvent> = (0..3 * 1000u64 + 17)
            .map(|i| AllocEvent {
                time_ns: 1_700_000_000_000_000_000 + i * 1000,
                tid: 7 + (i % 2) as u32,
                call: AllocCall::ALL[i as usize % AllocCall::ALL.len()],
                addr: VirtAddr::new(0x5600_0000 + i * 32),
                size: 16 + i * 37 % 512,
                old_addr: VirtAddr::new(0),
                detail: i % 5,
                stack_id: (i % 3) as u32,
            })
            .collect();
        for (i, group) in events.chunks(1000).enumerate() {
            let encoded = encoder.encode(i as u64 * 1000, group).unwrap();
            writer.push_encoded(encoded).unwrap();
        }
        writer.finish().unwrap();
        assert_eq!(read_allocs(&path).unwrap(), events);
        assert_eq!(super::super::read_origin(&path).unwrap(), Some(origin));
        let reader = SerializedFileReader::new(std::fs::File::open(&path).unwrap()).unwrap();
        let groups = reader.metadata().row_groups();
        assert_eq!(groups.len(), 4);
        for group in groups {
            let summarized: Vec<String> = group
                .columns()
                .iter()
                .filter(|c| c.statistics().is_some())
                .map(|c| c.column_path().string())
                .collect();
            assert_eq!(summarized, ["pid", "time_ns"]);
        }
    }
}

/// Where the time of writing an allocations table goes: `FLTRACE_BENCH_ALLOCS=<a recording's
/// fltrace-data-allocs-<pid>.parquet> cargo test --release -p fltrace-trace allocs_write_time
/// -- --ignored --nocapture` encodes its events again, a row group at a time as the recorder
/// does, and prints the CPU time per event. A measurement, not a test: nothing is asserted.
#[cfg(test)]
mod timing {
    use super::*;

    fn thread_cpu_ns() -> u64 {
        crate::thread_cpu().as_nanos() as u64
    }

    #[test]
    #[ignore]
    fn allocs_write_time() {
        let Some(path) = std::env::var_os("FLTRACE_BENCH_ALLOCS") else {
            eprintln!("FLTRACE_BENCH_ALLOCS names no table");
            return;
        };
        let events = read_allocs(Path::new(&path)).unwrap();
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("a.parquet");
        for round in 0..5 {
            let writer =
                AllocWriter::create_for(&out, Origin::new("12345-1795692575884983522", 7)).unwrap();
            let mut encoder = writer.group_encoder();
            let started = thread_cpu_ns();
            let mut groups = Vec::new();
            for (i, chunk) in events.chunks(super::super::ROW_GROUP).enumerate() {
                groups.push(
                    encoder
                        .encode((i * super::super::ROW_GROUP) as u64, chunk)
                        .unwrap(),
                );
            }
            let encoded = thread_cpu_ns() - started;
            let mut writer = writer;
            let started = thread_cpu_ns();
            for group in groups {
                writer.push_encoded(group).unwrap();
            }
            writer.finish().unwrap();
            let appended = thread_cpu_ns() - started;
            let bytes = std::fs::metadata(&out).unwrap().len();
            eprintln!(
                "round {round}: {} events, encoding {:.1} ns an event, appending {:.1}, {:.3} bytes an event",
                events.len(),
                encoded as f64 / events.len() as f64,
                appended as f64 / events.len() as f64,
                bytes as f64 / events.len() as f64
            );
        }
        assert_eq!(read_allocs(&out).unwrap(), events);
    }
}
