//! `fltrace-data-allocsums-<pid>.parquet`: calls and bytes per stack, call and size of a
//! `--allocs` recording.

use std::path::Path;

use super::Origin;
use super::allocs::alloc_call;
use super::reader::{GroupColumns, ReadRow, RowGroups};
use super::writer::{Columns, TableRow, TableWriter};
use crate::{AllocTotal, Error};

impl TableRow for AllocTotal {
    const SCHEMA: &'static str = "message alloc_total {
  required binary recording (STRING);
  required int32 pid;
  required int32 stack_id;
  required int32 call;
  required int64 size;
  required int64 count;
  required int64 bytes;
}";
    const DELTA_COLUMNS: &'static [&'static str] = &[];

    fn write_columns(
        c: &mut Columns<'_, '_>,
        origin: &Origin,
        _first: u64,
        batch: &[AllocTotal],
    ) -> parquet::errors::Result<()> {
        c.origin(origin, batch.len())?;
        c.i32(batch.iter().map(|t| t.stack_id))?;
        c.i32(batch.iter().map(|t| u32::from(t.call as u8)))?;
        c.i64(batch.iter().map(|t| t.size))?;
        c.i64(batch.iter().map(|t| t.count))?;
        c.i64(batch.iter().map(|t| t.bytes))
    }
}

impl ReadRow for AllocTotal {
    fn read_group(c: &mut GroupColumns<'_>) -> Result<Vec<AllocTotal>, Error> {
        let (stack_id, call, size) = (c.u32s("stack_id")?, c.u32s("call")?, c.u64s("size")?);
        let (count, bytes) = (c.u64s("count")?, c.u64s("bytes")?);
        (0..stack_id.len())
            .map(|i| {
                Ok(AllocTotal {
                    stack_id: stack_id[i],
                    call: alloc_call(c, call[i])?,
                    size: size[i],
                    count: count[i],
                    bytes: bytes[i],
                })
            })
            .collect()
    }
}

/// Writes `fltrace-data-allocsums-<pid>.parquet`: the totals of process and recording
/// `origin`, in one go (they are known only once every event is).
pub fn write_alloc_totals(path: &Path, origin: Origin, totals: &[AllocTotal]) -> Result<(), Error> {
    let mut writer = TableWriter::create_for(path, origin)?;
    for &total in totals {
        writer.push(total)?;
    }
    writer.finish()
}

/// Reads an allocation totals file.
pub fn read_alloc_totals(path: &Path) -> Result<Vec<AllocTotal>, Error> {
    RowGroups::open_table(path)?.read_all()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::AllocCall;
    use crate::tables::read_origin;

    /// Totals come back byte for byte, every call kind and the largest values included, with
    /// the origin given.
    #[test]
    fn alloc_totals_round_trip() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.parquet");
        let expected: Vec<AllocTotal> = AllocCall::ALL
            .iter()
            .enumerate()
            .map(|(i, &call)| AllocTotal {
                stack_id: i as u32,
                call,
                size: if i == 0 { u64::MAX } else { 16 << i },
                count: i as u64 + 1,
                bytes: u64::MAX - i as u64,
            })
            .collect();
        let origin = Origin::new("1-2", 3);
        write_alloc_totals(&path, origin.clone(), &expected).unwrap();
        assert_eq!(read_alloc_totals(&path).unwrap(), expected);
        assert_eq!(read_origin(&path).unwrap(), Some(origin));
    }
}
