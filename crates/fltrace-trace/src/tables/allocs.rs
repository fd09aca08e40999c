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

    fn write_columns(
        c: &mut Columns<'_, '_>,
        origin: &Origin,
        _first: u64,
        batch: &[AllocEvent],
    ) -> parquet::errors::Result<()> {
        c.origin(origin, batch.len())?;
        c.i64(batch.iter().map(|e| e.time_ns))?;
        c.i32(batch.iter().map(|e| e.tid))?;
        c.i32(batch.iter().map(|e| u32::from(e.call as u8)))?;
        c.i64(batch.iter().map(|e| e.addr.get()))?;
        c.i64(batch.iter().map(|e| e.size))?;
        c.i64(batch.iter().map(|e| e.old_addr.get()))?;
        c.i64(batch.iter().map(|e| e.detail))?;
        c.i32(batch.iter().map(|e| e.stack_id))
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
}
