//! `fltrace-data-faults-<pid>.parquet`: one row per page fault.

use std::path::Path;

use super::reader::{GroupColumns, ReadRow, RowGroups};
use super::writer::{Columns, TableRow, TableWriter};
use super::{Metadata, Origin};
use crate::{CodeAddr, Error, Fault, FaultFlags, FaultKey, VirtAddr, keys};

impl TableRow for Fault {
    // `fault_id` (the row's position in its file) lets a query link a fault to the mapping
    // current at its address without a row number, which Spark cannot give a view.
    const SCHEMA: &'static str = "message fault {
  required binary recording (STRING);
  required int32 pid;
  required int64 time_ns;
  required int32 tid;
  required int64 ip;
  required int64 addr;
  required int32 flags;
  required int32 stack_id;
  required int64 fault_id;
}";
    const DELTA_COLUMNS: &'static [&'static str] = &["time_ns", "addr", "fault_id"];

    fn write_columns(
        c: &mut Columns<'_, '_>,
        origin: &Origin,
        first: u64,
        batch: &[Fault],
    ) -> parquet::errors::Result<()> {
        c.recording(origin, batch.len())?;
        c.i32(batch.iter().map(|f| f.pid))?;
        c.i64(batch.iter().map(|f| f.time_ns))?;
        c.i32(batch.iter().map(|f| f.tid))?;
        c.i64(batch.iter().map(|f| f.ip.get()))?;
        c.i64(batch.iter().map(|f| f.addr.get()))?;
        c.i32(batch.iter().map(|f| u32::from(f.flags.0)))?;
        c.i32(batch.iter().map(|f| f.stack_id))?;
        c.i64(first..first + batch.len() as u64)
    }
}

impl ReadRow for Fault {
    fn read_group(c: &mut GroupColumns<'_>) -> Result<Vec<Fault>, Error> {
        let (time, pid, tid) = (c.u64s("time_ns")?, c.u32s("pid")?, c.u32s("tid")?);
        let (ip, addr) = (c.u64s("ip")?, c.u64s("addr")?);
        let (flags, stack) = (c.u32s("flags")?, c.u32s("stack_id")?);
        Ok((0..time.len())
            .map(|i| Fault {
                time_ns: time[i],
                pid: pid[i],
                tid: tid[i],
                ip: CodeAddr::new(ip[i]),
                addr: VirtAddr::new(addr[i]),
                flags: FaultFlags(flags[i] as u16),
                stack_id: stack[i],
            })
            .collect())
    }
}

/// What counting needs of a fault: three of the eight columns.
impl ReadRow for FaultKey {
    fn read_group(c: &mut GroupColumns<'_>) -> Result<Vec<FaultKey>, Error> {
        let (time, flags) = (c.u64s("time_ns")?, c.u32s("flags")?);
        let (stack, tid) = (c.u32s("stack_id")?, c.u32s("tid")?);
        Ok((0..time.len())
            .map(|i| FaultKey {
                time_ns: time[i],
                flags: FaultFlags(flags[i] as u16),
                stack_id: stack[i],
                tid: tid[i],
            })
            .collect())
    }
}

/// Writes `fltrace-data-faults-<pid>.parquet`.
pub struct FaultWriter(TableWriter<Fault>);

impl FaultWriter {
    /// Creates the file; `metadata` goes into the Parquet footer as key-value pairs. The
    /// `recording` column holds the session id of `metadata` ([`keys::SESSION`]), the `pid`
    /// column each fault's pid.
    pub fn create(path: &Path, metadata: &[(String, String)]) -> Result<Self, Error> {
        let session = metadata
            .iter()
            .find(|(k, _)| k == keys::SESSION)
            .map(|(_, v)| v.clone())
            .unwrap_or_default();
        let origin = Origin::new(session, 0);
        Ok(FaultWriter(TableWriter::with_footer(
            path, origin, metadata,
        )?))
    }

    /// Appends a fault; writes a row group when the batch is full.
    pub fn push(&mut self, fault: Fault) -> Result<(), Error> {
        self.0.push(fault)
    }

    /// Rows pushed so far.
    pub fn rows(&self) -> u64 {
        self.0.rows()
    }

    /// Sets footer value `key` (one not given at creation) to `value`, for the next
    /// checkpoint and the final footer.
    pub fn set_metadata(&mut self, key: &str, value: String) {
        self.0.table.set_footer_value(key, value);
    }

    /// Writes every fault pushed so far and a checkpoint: they stay readable should the
    /// writer never finish.
    pub fn checkpoint(&mut self) -> Result<(), Error> {
        self.0.checkpoint()
    }

    /// Writes what is buffered and the footer.
    pub fn finish(self) -> Result<(), Error> {
        self.0.finish()
    }
}

/// The faults of a faults file, one row group (64K rows) at a time, so that memory stays
/// bounded however long the recording: whole rows ([`FaultRowGroups::open`]), or only what
/// counting needs ([`FaultRowGroups::open_keys`]), which reads three of the eight columns.
pub type FaultRowGroups<T> = RowGroups<T>;

impl RowGroups<Fault> {
    /// Opens `path` for whole rows.
    pub fn open(path: &Path) -> Result<Self, Error> {
        Self::open_table(path)
    }
}

impl RowGroups<FaultKey> {
    /// Opens `path` for each fault's time, stack and flags only.
    pub fn open_keys(path: &Path) -> Result<Self, Error> {
        Self::open_table(path)
    }
}

/// Reads a faults file: its rows and its footer metadata.
pub fn read_faults(path: &Path) -> Result<(Vec<Fault>, Metadata), Error> {
    let groups = FaultRowGroups::open(path)?;
    let metadata = groups.metadata();
    Ok((groups.read_all()?, metadata))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tables::FORMAT_VERSION;
    use crate::tables::tests::{fault, write_faults};
    use crate::tables::writer::CheckpointedFile;

    /// Faults and their metadata read back exactly, whole or a row group at a time.
    #[test]
    fn faults_round_trip() {
        let dir = tempfile::tempdir().unwrap();
        let faults_path = dir.path().join("f.parquet");
        let metadata = vec![("fltrace.command".to_owned(), "./a b".to_owned())];
        let mut writer = FaultWriter::create(&faults_path, &metadata).unwrap();
        // More than one row group.
        let expected: Vec<Fault> = (0..100_000).map(fault).collect();
        for f in &expected {
            writer.push(*f).unwrap();
        }
        writer.finish().unwrap();
        let (faults, meta) = read_faults(&faults_path).unwrap();
        assert_eq!(faults, expected);
        let format = (keys::FORMAT.to_owned(), FORMAT_VERSION.to_string());
        assert_eq!(meta, [metadata, vec![format]].concat());
        let groups = FaultRowGroups::open(&faults_path).unwrap();
        assert_eq!((groups.rows(), groups.row_groups()), (100_000, 2));
        let rows: Vec<Fault> = groups.flat_map(|g| g.unwrap()).collect();
        assert_eq!(rows, expected, "the iterator gives the same rows");
        let keys: Vec<FaultKey> = FaultRowGroups::open_keys(&faults_path)
            .unwrap()
            .flat_map(|g| g.unwrap())
            .collect();
        let expected_keys: Vec<FaultKey> = expected.iter().map(FaultKey::from).collect();
        assert_eq!(
            keys, expected_keys,
            "keys only, the same times, stacks and flags"
        );
    }

    /// The faults table of layout 1 (`pid` second, after `time_ns`) still reads.
    #[test]
    fn layout_1_faults_read() {
        const OLD_FAULT_SCHEMA: &str = "message fault {
          required int64 time_ns (TIMESTAMP(NANOS,true));
          required int32 pid (INTEGER(32,false));
          required int32 tid (INTEGER(32,false));
          required int64 ip (INTEGER(64,false));
          required int64 addr (INTEGER(64,false));
          required int32 flags (INTEGER(8,false));
          required int32 stack_id (INTEGER(32,false));
        }";
        let dir = tempfile::tempdir().unwrap();
        let faults_path = dir.path().join("f.parquet");
        let mut table =
            CheckpointedFile::create(&faults_path, OLD_FAULT_SCHEMA, &[], &[], &[]).unwrap();
        let expected = fault(9);
        table
            .row_group(|c| {
                c.i64([expected.time_ns].into_iter())?;
                c.i32([expected.pid].into_iter())?;
                c.i32([expected.tid].into_iter())?;
                c.i64([expected.ip.get()].into_iter())?;
                c.i64([expected.addr.get()].into_iter())?;
                c.i32([u32::from(expected.flags.0)].into_iter())?;
                c.i32([expected.stack_id].into_iter())
            })
            .unwrap();
        table.finish().unwrap();
        assert_eq!(read_faults(&faults_path).unwrap().0, vec![expected]);
    }

    /// Sequential faults compress to a few bytes each.
    #[test]
    fn faults_are_compact() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f.parquet");
        write_faults(&path, 100_000);
        let bytes = std::fs::metadata(&path).unwrap().len();
        assert!(bytes < 100_000 * 8, "{bytes} bytes for 100000 faults");
    }
}
