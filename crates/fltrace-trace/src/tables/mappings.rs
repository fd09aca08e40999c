//! `fltrace-data-mmaps-<pid>.parquet`: every mapping as it appeared, with build IDs.

use std::path::Path;

use super::Origin;
use super::reader::{GroupColumns, ReadRow, RowGroups};
use super::writer::{Columns, TableRow, TableWriter};
use crate::{Error, FileOffset, Mapping, VirtAddr};

impl TableRow for Mapping {
    // `mapping_id` (the row's position in its file) lets a query link a fault to the mapping
    // current at its address without a row number, which Spark cannot give a view.
    const SCHEMA: &'static str = "message mapping {
  required binary recording (STRING);
  required int32 pid;
  required int64 time_ns;
  required int32 generation;
  required int64 start_addr;
  required int64 end_addr;
  required int64 pgoff;
  required int32 prot;
  required int32 flags;
  required binary path (STRING);
  required binary build_id (STRING);
  required int64 mapping_id;
}";
    const DELTA_COLUMNS: &'static [&'static str] = &["mapping_id"];
    /// Mappings are written at the next checkpoint, at the end, or as a row group of their
    /// own once this many are buffered: they are larger than faults (a path each), and a
    /// program that maps and unmaps hundreds of thousands of times a second must not grow
    /// the writer by the second.
    const ROW_GROUP: usize = 1 << 14;

    fn write_columns(
        c: &mut Columns<'_, '_>,
        origin: &Origin,
        first: u64,
        batch: &[Mapping],
    ) -> parquet::errors::Result<()> {
        c.origin(origin, batch.len())?;
        c.i64(batch.iter().map(|m| m.time_ns))?;
        c.i32(batch.iter().map(|m| m.generation))?;
        c.i64(batch.iter().map(|m| m.start.get()))?;
        c.i64(batch.iter().map(|m| m.end.get()))?;
        c.i64(batch.iter().map(|m| m.pgoff.get()))?;
        c.i32(batch.iter().map(|m| m.prot))?;
        c.i32(batch.iter().map(|m| m.flags))?;
        c.strings(batch.iter().map(|m| m.path.as_str()))?;
        c.strings(batch.iter().map(|m| m.build_id.as_str()))?;
        c.i64(first..first + batch.len() as u64)
    }
}

impl ReadRow for Mapping {
    fn read_group(c: &mut GroupColumns<'_>) -> Result<Vec<Mapping>, Error> {
        let (time, generation) = (c.u64s("time_ns")?, c.u32s("generation")?);
        let (start, end, pgoff) = (c.u64s("start_addr")?, c.u64s("end_addr")?, c.u64s("pgoff")?);
        let (prot, flags) = (c.u32s("prot")?, c.u32s("flags")?);
        let (paths, build_ids) = (c.strings("path")?, c.strings("build_id")?);
        Ok(paths
            .into_iter()
            .zip(build_ids)
            .enumerate()
            .map(|(i, (path, build_id))| Mapping {
                time_ns: time[i],
                generation: generation[i],
                start: VirtAddr::new(start[i]),
                end: VirtAddr::new(end[i]),
                pgoff: FileOffset::new(pgoff[i]),
                prot: prot[i],
                flags: flags[i],
                path,
                build_id,
            })
            .collect())
    }
}

/// Writes `fltrace-data-mmaps-<pid>.parquet`.
pub type MappingWriter = TableWriter<Mapping>;

/// Reads a mappings file.
pub fn read_mappings(path: &Path) -> Result<Vec<Mapping>, Error> {
    RowGroups::open_table(path)?.read_all()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tables::read_origin;
    use crate::tables::writer::CheckpointedFile;

    fn mapping() -> Mapping {
        Mapping {
            time_ns: 5,
            generation: 1,
            start: VirtAddr::new(0x1000),
            end: VirtAddr::new(0x3000),
            pgoff: FileOffset::new(0x2000),
            prot: 5,
            flags: 2,
            path: "/lib/x.so".into(),
            build_id: "abcd".into(),
        }
    }

    #[test]
    fn mappings_round_trip() {
        let dir = tempfile::tempdir().unwrap();
        let maps_path = dir.path().join("m.parquet");
        let mut writer = MappingWriter::create(&maps_path).unwrap();
        writer.push(mapping()).unwrap();
        writer.finish().unwrap();
        assert_eq!(read_mappings(&maps_path).unwrap(), vec![mapping()]);
    }

    /// The mappings table of layout 1 (no `recording` or `pid`, the range in `start` and
    /// `end`) still reads.
    #[test]
    fn layout_1_mappings_read() {
        const OLD_MAPPING_SCHEMA: &str = "message mapping {
          required int64 time_ns (TIMESTAMP(NANOS,true));
          required int32 generation (INTEGER(32,false));
          required int64 start (INTEGER(64,false));
          required int64 end (INTEGER(64,false));
          required int64 pgoff (INTEGER(64,false));
          required int32 prot;
          required int32 flags;
          required binary path (STRING);
          required binary build_id (STRING);
        }";
        let dir = tempfile::tempdir().unwrap();
        let maps_path = dir.path().join("m.parquet");
        let mut table =
            CheckpointedFile::create(&maps_path, OLD_MAPPING_SCHEMA, &[], &[], &[]).unwrap();
        let expected = Mapping {
            time_ns: 7,
            ..mapping()
        };
        table
            .row_group(|c| {
                c.i64([7].into_iter())?;
                c.i32([1].into_iter())?;
                c.i64([0x1000].into_iter())?;
                c.i64([0x3000].into_iter())?;
                c.i64([0x2000].into_iter())?;
                c.i32([5].into_iter())?;
                c.i32([2].into_iter())?;
                c.strings(["/lib/x.so"].into_iter())?;
                c.strings(["abcd"].into_iter())
            })
            .unwrap();
        table.finish().unwrap();
        assert_eq!(read_mappings(&maps_path).unwrap(), vec![expected]);
        assert_eq!(read_origin(&maps_path).unwrap(), None);
    }
}
