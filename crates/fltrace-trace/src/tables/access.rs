//! `fltrace-data-access-<pid>.parquet`: the loads and stores sampled by `--access-samples`.

use std::path::Path;

use super::Origin;
use super::reader::{GroupColumns, ReadRow, RowGroups};
use super::writer::{Columns, TableRow, TableWriter};
use crate::{AccessRecord, CodeAddr, Error, VirtAddr};

impl TableRow for AccessRecord {
    const SCHEMA: &'static str = "message access {
  required binary recording (STRING);
  required int32 pid;
  required int64 time_ns;
  required int32 tid;
  required int64 ip;
  required int64 addr;
  required int64 latency;
  required int64 data_src;
  required int32 stack_id;
}";
    const DELTA_COLUMNS: &'static [&'static str] = &["time_ns", "addr"];

    fn write_columns(
        c: &mut Columns<'_, '_>,
        origin: &Origin,
        _first: u64,
        batch: &[AccessRecord],
    ) -> parquet::errors::Result<()> {
        c.origin(origin, batch.len())?;
        c.i64(batch.iter().map(|r| r.time_ns))?;
        c.i32(batch.iter().map(|r| r.tid))?;
        c.i64(batch.iter().map(|r| r.ip.get()))?;
        c.i64(batch.iter().map(|r| r.addr.get()))?;
        c.i64(batch.iter().map(|r| r.latency))?;
        c.i64(batch.iter().map(|r| r.data_src))?;
        c.i32(batch.iter().map(|r| r.stack_id))
    }
}

impl ReadRow for AccessRecord {
    fn read_group(c: &mut GroupColumns<'_>) -> Result<Vec<AccessRecord>, Error> {
        let (time, tid, ip) = (c.u64s("time_ns")?, c.u32s("tid")?, c.u64s("ip")?);
        let (addr, latency) = (c.u64s("addr")?, c.u64s("latency")?);
        let (data_src, stack_id) = (c.u64s("data_src")?, c.u32s("stack_id")?);
        Ok((0..time.len())
            .map(|i| AccessRecord {
                time_ns: time[i],
                tid: tid[i],
                ip: CodeAddr::new(ip[i]),
                addr: VirtAddr::new(addr[i]),
                latency: latency[i],
                data_src: data_src[i],
                stack_id: stack_id[i],
            })
            .collect())
    }
}

/// Writes `fltrace-data-access-<pid>.parquet`.
pub type AccessWriter = TableWriter<AccessRecord>;

/// Reads an access-sample file.
pub fn read_access(path: &Path) -> Result<Vec<AccessRecord>, Error> {
    RowGroups::open_table(path)?.read_all()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Access samples come back byte for byte.
    #[test]
    fn access_samples_round_trip() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("a.parquet");
        let mut writer = AccessWriter::create(&path).unwrap();
        let expected: Vec<AccessRecord> = (0..1000u64)
            .map(|i| AccessRecord {
                time_ns: 1_700_000_000_000_000_000 + i * 1000,
                tid: 7,
                ip: CodeAddr::new(0x40_1000 + i),
                addr: VirtAddr::new(0x7f00_0000_0000 + i * 64),
                latency: i % 300,
                data_src: 0x6810_0142 + i,
                stack_id: (i % 3) as u32,
            })
            .collect();
        for r in &expected {
            writer.push(*r).unwrap();
        }
        writer.finish().unwrap();
        assert_eq!(read_access(&path).unwrap(), expected);
    }
}
