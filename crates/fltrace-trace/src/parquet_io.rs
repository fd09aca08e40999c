//! Parquet writers and readers for the fault, stack and mapping tables.
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

use std::cell::Cell;
use std::fs::File;
use std::io::Write;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use parquet::basic::{Compression, Encoding};
use parquet::data_type::{BoolType, ByteArray, ByteArrayType, DataType, Int32Type, Int64Type};
use parquet::file::metadata::{
    FileMetaData, KeyValue, ParquetMetaData, ParquetMetaDataReader, ParquetMetaDataWriter,
    RowGroupMetaData,
};
use parquet::file::properties::{ReaderProperties, ReaderPropertiesPtr, WriterProperties};
use parquet::file::reader::RowGroupReader;
use parquet::file::serialized_reader::SerializedRowGroupReader;
use parquet::file::writer::{SerializedFileWriter, SerializedRowGroupWriter};
use parquet::schema::parser::parse_message_type;
use parquet::schema::types::{ColumnPath, SchemaDescriptor};

use crate::{
    AccessRecord, AllocCall, AllocEvent, AllocTotal, CodeAddr, Error, Fault, FaultFlags, FaultKey,
    FileOffset, Mapping, Stack, VirtAddr, files, keys,
};

// Every table begins with `recording` and `pid`, constant within a file, so that a query over
// the files of many processes and recordings (a glob) can tell their rows apart and join on
// them. Column names avoid SQL reserved words (`end`), so that no query needs to quote them.
// Since layout 3 the columns carry no unsigned or timestamp annotation: Spark refuses
// TIMESTAMP(NANOS) with its default settings and reads UINT_64 as decimal(20,0), whose
// arithmetic widens and is slower; plain INT32/INT64 read the same in every engine. The bits
// are those of fltrace's unsigned values (user-space addresses and sizes are below 2^63), and
// the readers below read both layouts alike, since they read physical types. `fault_id` and
// `mapping_id` (the row's position in its file) let a query link a fault to the mapping
// current at its address without a row number, which Spark cannot give a view.
const FAULT_SCHEMA: &str = "message fault {
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

const ALLOC_SCHEMA: &str = "message alloc {
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

const ALLOC_TOTAL_SCHEMA: &str = "message alloc_total {
  required binary recording (STRING);
  required int32 pid;
  required int32 stack_id;
  required int32 call;
  required int64 size;
  required int64 count;
  required int64 bytes;
}";

const ACCESS_SCHEMA: &str = "message access {
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

const STACK_SCHEMA: &str = "message stack {
  required binary recording (STRING);
  required int32 pid;
  required int32 stack_id;
  required int32 generation;
  required group frames (LIST) {
    repeated group list {
      required int64 element;
    }
  }
  required int32 stack_end;
}";

const MAPPING_SCHEMA: &str = "message mapping {
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

/// Columns renamed since layout 1: (name, old name).
const OLD_NAMES: [(&str, &str); 2] = [("start_addr", "start"), ("end_addr", "end")];

/// Key-value pairs of a Parquet footer.
pub type Metadata = Vec<(String, String)>;

/// Rows buffered before a row group is written: bounds the recorder's memory, and the time a
/// flush holds up the recorder (the kernel's ring buffer must not fill meanwhile).
const ROW_GROUP: usize = 1 << 16;
/// Rows of a mappings row group written before a checkpoint: mappings are larger than
/// faults (a path each), and their table is small.
const MAPPING_ROW_GROUP: usize = 1 << 14;

/// A Parquet file being written, one row group per flushed batch, with checkpoints.
struct TableWriter {
    path: PathBuf,
    inner: SerializedFileWriter<Sink>,
    schema: Arc<SchemaDescriptor>,
    /// The footer's key-value pairs, for the checkpoints.
    footer: Vec<KeyValue>,
    /// Keys set after the file was created ([`TableWriter::set_footer_value`]): the final
    /// footer gets their last value.
    late_keys: Vec<String>,
    /// CRC-32 of every column chunk written, row group by row group.
    crcs: Vec<u32>,
    /// Row groups described by a checkpoint.
    checkpointed_groups: usize,
    /// Where the last checkpoint ends (0: none yet).
    last_checkpoint: u64,
}

/// The file, keeping a copy of the bytes written since the last row group so that the column
/// chunks' checksums need no read back (the file is opened write-only).
struct Sink {
    file: File,
    /// The bytes written since offset `pending_from`.
    pending: Vec<u8>,
    pending_from: u64,
}

impl Write for Sink {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let written = self.file.write(buf)?;
        self.pending.extend_from_slice(&buf[..written]);
        Ok(written)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.file.flush()
    }
}

/// Space-separated hexadecimal CRC-32s, the value of [`keys::CRC32`].
fn format_crcs(crcs: &[u32]) -> String {
    crcs.iter()
        .map(|crc| format!("{crc:08x}"))
        .collect::<Vec<_>>()
        .join(" ")
}

impl TableWriter {
    fn create(
        path: &Path,
        schema: &str,
        delta_columns: &[&str],
        metadata: &[(String, String)],
    ) -> Result<Self, Error> {
        let schema = Arc::new(parse_message_type(schema).map_err(Error::parquet(path))?);
        let mut footer: Vec<KeyValue> = metadata
            .iter()
            .filter(|(k, _)| !keys::INTERNAL.contains(&k.as_str()))
            .map(|(k, v)| KeyValue::new(k.clone(), v.clone()))
            .collect();
        footer.push(KeyValue::new(
            keys::FORMAT.to_owned(),
            FORMAT_VERSION.to_string(),
        ));
        let mut props = WriterProperties::builder()
            .set_compression(Compression::SNAPPY)
            .set_key_value_metadata(Some(footer.clone()));
        for column in delta_columns {
            let column = ColumnPath::from(*column);
            props = props
                .set_column_dictionary_enabled(column.clone(), false)
                .set_column_encoding(column, Encoding::DELTA_BINARY_PACKED);
        }
        let file = files::create(path)?;
        let sink = Sink {
            file,
            pending: Vec::new(),
            pending_from: 0,
        };
        let descriptor = Arc::new(SchemaDescriptor::new(schema.clone()));
        let inner = SerializedFileWriter::new(sink, schema, Arc::new(props.build()))
            .map_err(Error::parquet(path))?;
        let mut table = TableWriter {
            path: path.to_owned(),
            inner,
            schema: descriptor,
            footer,
            late_keys: Vec::new(),
            crcs: Vec::new(),
            checkpointed_groups: 0,
            last_checkpoint: 0,
        };
        // A first checkpoint at once: a file that exists is readable, if empty, and carries
        // its metadata (the faults file's session) whatever happens next.
        table.checkpoint()?;
        Ok(table)
    }

    /// Writes one row group; `write_columns` fills its columns in schema order.
    fn row_group(
        &mut self,
        write_columns: impl FnOnce(&mut Columns<'_, '_>) -> parquet::errors::Result<()>,
    ) -> Result<(), Error> {
        let result = (|| {
            let mut group = self.inner.next_row_group()?;
            write_columns(&mut Columns(&mut group))?;
            group.close()?;
            self.inner.flush()?;
            Ok(())
        })();
        result.map_err(Error::parquet(&self.path))?;
        let Some(group) = self.inner.flushed_row_groups().last() else {
            return Ok(());
        };
        let sink = self.inner.inner();
        let mut crcs = Vec::with_capacity(group.num_columns());
        for column in group.columns() {
            let (start, len) = column.byte_range();
            let chunk = start
                .checked_sub(sink.pending_from)
                .and_then(|from| {
                    let from = usize::try_from(from).ok()?;
                    sink.pending
                        .get(from..from.checked_add(usize::try_from(len).ok()?)?)
                })
                .ok_or_else(|| Error::Format {
                    path: self.path.clone(),
                    message: format!("column chunk at {start} not among the bytes just written"),
                })?;
            crcs.push(crc32fast::hash(chunk));
        }
        self.crcs.extend(crcs);
        self.forget_written();
        Ok(())
    }

    /// Drops the copy of the bytes written so far.
    fn forget_written(&mut self) {
        let position = self.inner.bytes_written() as u64;
        let sink = self.inner.inner_mut();
        sink.pending.clear();
        sink.pending_from = position;
    }

    /// Appends a checkpoint footer for the row groups written since the last one, and writes
    /// it through to the file. Nothing to do when no row group was written since.
    fn checkpoint(&mut self) -> Result<(), Error> {
        let groups = self.inner.flushed_row_groups();
        if self.last_checkpoint != 0 && groups.len() == self.checkpointed_groups {
            return Ok(());
        }
        let new_groups: Vec<RowGroupMetaData> = groups[self.checkpointed_groups..].to_vec();
        let columns = self.schema.num_columns();
        let crcs = &self.crcs[self.checkpointed_groups * columns..];
        let mut footer = self.footer.clone();
        footer.push(KeyValue::new(
            keys::CHECKPOINT.to_owned(),
            self.last_checkpoint.to_string(),
        ));
        footer.push(KeyValue::new(keys::CRC32.to_owned(), format_crcs(crcs)));
        let rows = new_groups.iter().map(|g| g.num_rows()).sum();
        let file_metadata = FileMetaData::new(
            1,
            rows,
            Some(format!("fltrace {}", env!("CARGO_PKG_VERSION"))),
            Some(footer),
            self.schema.clone(),
            None,
        );
        let metadata = ParquetMetaData::new(file_metadata, new_groups);
        let mut bytes = Vec::new();
        ParquetMetaDataWriter::new(&mut bytes, &metadata)
            .finish()
            .map_err(Error::parquet(&self.path))?;
        let count = groups.len();
        self.inner
            .write_all(&bytes)
            .and_then(|()| self.inner.flush())
            .map_err(Error::io(&self.path))?;
        self.forget_written();
        self.checkpointed_groups = count;
        self.last_checkpoint = self.inner.bytes_written() as u64;
        Ok(())
    }

    /// Sets a footer value learnt while recording: the next checkpoint and the final footer
    /// carry it.
    fn set_footer_value(&mut self, key: &str, value: String) {
        match self.footer.iter_mut().find(|kv| kv.key == key) {
            Some(kv) => kv.value = Some(value),
            None => self.footer.push(KeyValue::new(key.to_owned(), value)),
        }
        if !self.late_keys.iter().any(|k| k == key) {
            self.late_keys.push(key.to_owned());
        }
    }

    fn finish(mut self) -> Result<(), Error> {
        // A last checkpoint first: should the final footer not make it to the disk, the
        // checkpoints still describe every row.
        self.checkpoint()?;
        for key in std::mem::take(&mut self.late_keys) {
            if let Some(kv) = self.footer.iter().find(|kv| kv.key == key) {
                self.inner.append_key_value_metadata(kv.clone());
            }
        }
        self.inner.append_key_value_metadata(KeyValue::new(
            keys::CRC32.to_owned(),
            format_crcs(&self.crcs),
        ));
        self.inner.finish().map_err(Error::parquet(&self.path))?;
        Ok(())
    }
}

/// Gives the columns of one row group in order.
struct Columns<'g, 'f>(&'g mut SerializedRowGroupWriter<'f, Sink>);

impl Columns<'_, '_> {
    fn write<T: DataType>(
        &mut self,
        values: &[T::T],
        def: Option<&[i16]>,
        rep: Option<&[i16]>,
    ) -> parquet::errors::Result<()> {
        let mut column = self.0.next_column()?.ok_or_else(|| {
            parquet::errors::ParquetError::General("more columns than the schema".into())
        })?;
        column.typed::<T>().write_batch(values, def, rep)?;
        column.close()
    }

    fn i64(&mut self, values: impl Iterator<Item = u64>) -> parquet::errors::Result<()> {
        let values: Vec<i64> = values.map(|v| v as i64).collect();
        self.write::<Int64Type>(&values, None, None)
    }

    fn i32(&mut self, values: impl Iterator<Item = u32>) -> parquet::errors::Result<()> {
        let values: Vec<i32> = values.map(|v| v as i32).collect();
        self.write::<Int32Type>(&values, None, None)
    }

    fn bools(&mut self, values: impl Iterator<Item = bool>) -> parquet::errors::Result<()> {
        let values: Vec<bool> = values.collect();
        self.write::<BoolType>(&values, None, None)
    }

    fn strings<'s>(
        &mut self,
        values: impl Iterator<Item = &'s str>,
    ) -> parquet::errors::Result<()> {
        let values: Vec<ByteArray> = values.map(ByteArray::from).collect();
        self.write::<ByteArrayType>(&values, None, None)
    }

    /// The `recording` and `pid` columns of `rows` rows from `origin`.
    fn origin(&mut self, origin: &Origin, rows: usize) -> parquet::errors::Result<()> {
        self.recording(origin, rows)?;
        self.i32(std::iter::repeat_n(origin.pid, rows))
    }

    /// The `recording` column alone: one shared buffer, not a copy per row.
    fn recording(&mut self, origin: &Origin, rows: usize) -> parquet::errors::Result<()> {
        let value = ByteArray::from(origin.recording.as_bytes().to_vec());
        self.write::<ByteArrayType>(&vec![value; rows], None, None)
    }
}

/// Rows buffered and written a row group at a time; `write_rows` fills one row group's columns
/// in schema order.
struct Batched<T> {
    table: TableWriter,
    origin: Origin,
    batch: Vec<T>,
    /// Rows written out.
    rows: u64,
    write_rows: WriteRows<T>,
}

/// Fills one row group's columns in schema order.
/// `first` is the position in the file of the batch's first row.
type WriteRows<T> = fn(&mut Columns<'_, '_>, &Origin, u64, &[T]) -> parquet::errors::Result<()>;

impl<T> Batched<T> {
    fn new(table: TableWriter, origin: Origin, write_rows: WriteRows<T>) -> Self {
        Batched {
            table,
            origin,
            batch: Vec::with_capacity(4096),
            rows: 0,
            write_rows,
        }
    }

    /// Appends a row; writes a row group when the batch is full.
    fn push(&mut self, row: T) -> Result<(), Error> {
        self.batch.push(row);
        if self.batch.len() >= ROW_GROUP {
            self.flush()?;
        }
        Ok(())
    }

    /// Writes every buffered row, a row group of at most [`ROW_GROUP`] rows at a time (the
    /// fault writer buffers up to two).
    fn flush(&mut self) -> Result<(), Error> {
        while !self.batch.is_empty() {
            self.flush_first(ROW_GROUP)?;
        }
        Ok(())
    }

    /// Writes the first `count` buffered rows (at most all) as a row group.
    fn flush_first(&mut self, count: usize) -> Result<(), Error> {
        let count = count.min(self.batch.len());
        if count == 0 {
            return Ok(());
        }
        let (batch, origin, write_rows) = (&self.batch[..count], &self.origin, self.write_rows);
        let first = self.rows;
        self.table
            .row_group(|c| write_rows(c, origin, first, batch))?;
        self.rows += count as u64;
        self.batch.drain(..count);
        Ok(())
    }

    /// Writes the first `count` buffered rows and a checkpoint that makes every row written
    /// so far readable, should the writer never finish.
    fn checkpoint(&mut self, count: usize) -> Result<(), Error> {
        self.flush_first(count)?;
        self.table.checkpoint()
    }

    /// Writes what is buffered and the footer.
    fn finish(mut self) -> Result<(), Error> {
        self.flush()?;
        self.table.finish()
    }
}

/// Writes `fltrace-data-faults-<pid>.parquet`.
pub struct FaultWriter(Batched<Fault>);

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
        let table = TableWriter::create(
            path,
            FAULT_SCHEMA,
            &["time_ns", "addr", "fault_id"],
            metadata,
        )?;
        let origin = Origin::new(session, 0);
        Ok(FaultWriter(Batched::new(
            table,
            origin,
            |c, origin, first, batch| {
                c.recording(origin, batch.len())?;
                c.i32(batch.iter().map(|f| f.pid))?;
                c.i64(batch.iter().map(|f| f.time_ns))?;
                c.i32(batch.iter().map(|f| f.tid))?;
                c.i64(batch.iter().map(|f| f.ip.get()))?;
                c.i64(batch.iter().map(|f| f.addr.get()))?;
                c.i32(batch.iter().map(|f| u32::from(f.flags.0)))?;
                c.i32(batch.iter().map(|f| f.stack_id))?;
                c.i64(first..first + batch.len() as u64)
            },
        )))
    }

    /// Appends a fault; writes a row group when the batch is full.
    pub fn push(&mut self, fault: Fault) -> Result<(), Error> {
        self.0.push(fault)
    }

    /// Rows pushed so far.
    pub fn rows(&self) -> u64 {
        self.0.rows + self.0.batch.len() as u64
    }

    /// Sets footer value `key` (one not given at creation) to `value`, for the next
    /// checkpoint and the final footer.
    pub fn set_metadata(&mut self, key: &str, value: String) {
        self.0.table.set_footer_value(key, value);
    }

    /// Writes every fault pushed so far and a checkpoint: they stay readable should the
    /// writer never finish.
    pub fn checkpoint(&mut self) -> Result<(), Error> {
        self.0.checkpoint(usize::MAX)
    }

    /// Writes what is buffered and the footer.
    pub fn finish(self) -> Result<(), Error> {
        self.0.finish()
    }
}

/// Writes `fltrace-data-allocs-<pid>.parquet`.
pub struct AllocWriter(Batched<AllocEvent>);

impl AllocWriter {
    /// Creates the file, with the pid of its name and no recording id (see [`Origin`]).
    pub fn create(path: &Path) -> Result<Self, Error> {
        Self::create_for(path, Origin::from_path(path))
    }

    /// Creates the file of the process and recording `origin`.
    pub fn create_for(path: &Path, origin: Origin) -> Result<Self, Error> {
        // Delta encoding everywhere: the columns are either steady (times, addresses) or
        // nearly constant from row to row (thread, call, size, stack), which it packs into a
        // few bits without the per-value hashing of a dictionary, the main cost of writing 8
        // million rows.
        let table = TableWriter::create(
            path,
            ALLOC_SCHEMA,
            &[
                "pid", "time_ns", "tid", "call", "addr", "size", "old_addr", "detail", "stack_id",
            ],
            &[],
        )?;
        Ok(AllocWriter(Batched::new(
            table,
            origin,
            |c, origin, _first, batch| {
                c.origin(origin, batch.len())?;
                c.i64(batch.iter().map(|e| e.time_ns))?;
                c.i32(batch.iter().map(|e| e.tid))?;
                c.i32(batch.iter().map(|e| u32::from(e.call as u8)))?;
                c.i64(batch.iter().map(|e| e.addr.get()))?;
                c.i64(batch.iter().map(|e| e.size))?;
                c.i64(batch.iter().map(|e| e.old_addr.get()))?;
                c.i64(batch.iter().map(|e| e.detail))?;
                c.i32(batch.iter().map(|e| e.stack_id))
            },
        )))
    }

    /// Appends an event; writes a row group when the batch is full.
    pub fn push(&mut self, event: AllocEvent) -> Result<(), Error> {
        self.0.push(event)
    }

    /// Writes every event pushed so far and a checkpoint: they stay readable should the
    /// writer never finish.
    pub fn checkpoint(&mut self) -> Result<(), Error> {
        self.0.checkpoint(usize::MAX)
    }

    /// Rows pushed so far.
    pub fn rows(&self) -> u64 {
        self.0.rows + self.0.batch.len() as u64
    }

    /// Writes what is buffered and the footer.
    pub fn finish(self) -> Result<(), Error> {
        self.0.finish()
    }
}

/// Reads an allocations file.
pub fn read_allocs(path: &Path) -> Result<Vec<AllocEvent>, Error> {
    let table = TableReader::open(path)?;
    // The footer's row count is not checked by the checksums of a salvaged or foreign file:
    // room is made for each row group's rows once they are decoded, never from the footer.
    let mut events = Vec::new();
    // Row group by row group: whole columns of 8 million rows would double the peak memory.
    for group in 0..table.num_row_groups() {
        let rows = allocs_in(&table, group)?;
        events.reserve(rows.len());
        events.extend(rows);
    }
    table.check_len(events.len())?;
    Ok(events)
}

/// The events of row group `group` of an allocations file.
fn allocs_in(table: &TableReader, group: usize) -> Result<Vec<AllocEvent>, Error> {
    let path = &table.path;
    let groups = group..group + 1;
    let u64s = |name| -> Result<Vec<u64>, Error> {
        let values = table.column_in::<Int64Type>(name, groups.clone())?.values;
        Ok(values.into_iter().map(|v| v as u64).collect())
    };
    let u32s = |name| -> Result<Vec<u32>, Error> {
        let values = table.column_in::<Int32Type>(name, groups.clone())?.values;
        Ok(values.into_iter().map(|v| v as u32).collect())
    };
    let (time, tid) = (u64s("time_ns")?, u32s("tid")?);
    let (call, addr, size) = (u32s("call")?, u64s("addr")?, u64s("size")?);
    let (old_addr, detail) = (u64s("old_addr")?, u64s("detail")?);
    let stack_id = u32s("stack_id")?;
    let rows = time.len();
    let lengths = [tid.len(), call.len(), addr.len(), size.len()];
    if lengths
        .into_iter()
        .chain([old_addr.len(), detail.len(), stack_id.len()])
        .any(|len| len != rows)
    {
        return Err(Error::Format {
            path: path.to_owned(),
            message: format!("row group {group}: columns of different lengths"),
        });
    }
    let mut events = Vec::with_capacity(rows);
    for i in 0..rows {
        let call = AllocCall::from_u8(call[i] as u8).ok_or_else(|| Error::Format {
            path: path.to_owned(),
            message: format!("row group {group}: unknown allocation call {}", call[i]),
        })?;
        events.push(AllocEvent {
            time_ns: time[i],
            tid: tid[i],
            call,
            addr: VirtAddr::new(addr[i]),
            size: size[i],
            old_addr: VirtAddr::new(old_addr[i]),
            detail: detail[i],
            stack_id: stack_id[i],
        });
    }
    Ok(events)
}

/// The events of an allocations file, one row group (64K rows) at a time, so that a reader
/// pairing them in one pass holds the live blocks, never the whole table.
pub struct AllocRowGroups {
    table: TableReader,
    next: usize,
    read: u64,
}

impl AllocRowGroups {
    /// Opens `path`.
    pub fn open(path: &Path) -> Result<Self, Error> {
        Ok(AllocRowGroups {
            table: TableReader::open(path)?,
            next: 0,
            read: 0,
        })
    }

    /// Rows in the file, from its footer.
    pub fn rows(&self) -> u64 {
        self.table.rows()
    }
}

impl Iterator for AllocRowGroups {
    type Item = Result<Vec<AllocEvent>, Error>;

    fn next(&mut self) -> Option<Self::Item> {
        let group = self.next;
        if group >= self.table.num_row_groups() {
            return None;
        }
        self.next += 1;
        let events = allocs_in(&self.table, group);
        if let Ok(events) = &events {
            self.read += events.len() as u64;
            // The last group read: the rows must add up to the footer's, as whole reads check.
            if self.next == self.table.num_row_groups()
                && let Err(e) = self.table.check_len(self.read as usize)
            {
                return Some(Err(e));
            }
        }
        Some(events)
    }
}

/// Writes `fltrace-data-allocsums-<pid>.parquet`: the totals of process and recording
/// `origin`, in one go (they are known only once every event is).
pub fn write_alloc_totals(path: &Path, origin: Origin, totals: &[AllocTotal]) -> Result<(), Error> {
    let table = TableWriter::create(path, ALLOC_TOTAL_SCHEMA, &[], &[])?;
    let mut writer = Batched::new(table, origin, |c, origin, _first, batch: &[AllocTotal]| {
        c.origin(origin, batch.len())?;
        c.i32(batch.iter().map(|t| t.stack_id))?;
        c.i32(batch.iter().map(|t| u32::from(t.call as u8)))?;
        c.i64(batch.iter().map(|t| t.size))?;
        c.i64(batch.iter().map(|t| t.count))?;
        c.i64(batch.iter().map(|t| t.bytes))
    });
    for &total in totals {
        writer.push(total)?;
    }
    writer.finish()
}

/// Reads an allocation totals file.
pub fn read_alloc_totals(path: &Path) -> Result<Vec<AllocTotal>, Error> {
    let table = TableReader::open(path)?;
    let mut totals = Vec::new();
    for group in 0..table.num_row_groups() {
        let groups = group..group + 1;
        let u64s = |name| -> Result<Vec<u64>, Error> {
            let values = table.column_in::<Int64Type>(name, groups.clone())?.values;
            Ok(values.into_iter().map(|v| v as u64).collect())
        };
        let u32s = |name| -> Result<Vec<u32>, Error> {
            let values = table.column_in::<Int32Type>(name, groups.clone())?.values;
            Ok(values.into_iter().map(|v| v as u32).collect())
        };
        let (stack_id, call, size) = (u32s("stack_id")?, u32s("call")?, u64s("size")?);
        let (count, bytes) = (u64s("count")?, u64s("bytes")?);
        let rows = stack_id.len();
        if [call.len(), size.len(), count.len(), bytes.len()]
            .into_iter()
            .any(|len| len != rows)
        {
            return Err(Error::Format {
                path: path.to_owned(),
                message: format!("row group {group}: columns of different lengths"),
            });
        }
        totals.reserve(rows);
        for i in 0..rows {
            let call = AllocCall::from_u8(call[i] as u8).ok_or_else(|| Error::Format {
                path: path.to_owned(),
                message: format!("row group {group}: unknown allocation call {}", call[i]),
            })?;
            totals.push(AllocTotal {
                stack_id: stack_id[i],
                call,
                size: size[i],
                count: count[i],
                bytes: bytes[i],
            });
        }
    }
    table.check_len(totals.len())?;
    Ok(totals)
}

/// Writes `fltrace-data-access-<pid>.parquet`.
pub struct AccessWriter(Batched<AccessRecord>);

impl AccessWriter {
    /// Creates the file, with the pid of its name and no recording id (see [`Origin`]).
    pub fn create(path: &Path) -> Result<Self, Error> {
        Self::create_for(path, Origin::from_path(path))
    }

    /// Creates the file of the process and recording `origin`.
    pub fn create_for(path: &Path, origin: Origin) -> Result<Self, Error> {
        let table = TableWriter::create(path, ACCESS_SCHEMA, &["time_ns", "addr"], &[])?;
        Ok(AccessWriter(Batched::new(
            table,
            origin,
            |c, origin, _first, batch| {
                c.origin(origin, batch.len())?;
                c.i64(batch.iter().map(|r| r.time_ns))?;
                c.i32(batch.iter().map(|r| r.tid))?;
                c.i64(batch.iter().map(|r| r.ip.get()))?;
                c.i64(batch.iter().map(|r| r.addr.get()))?;
                c.i64(batch.iter().map(|r| r.latency))?;
                c.i64(batch.iter().map(|r| r.data_src))?;
                c.i32(batch.iter().map(|r| r.stack_id))
            },
        )))
    }

    /// Appends a sample; writes a row group when the batch is full.
    pub fn push(&mut self, record: AccessRecord) -> Result<(), Error> {
        self.0.push(record)
    }

    /// Writes every sample pushed and a checkpoint: they stay readable should the writer
    /// never finish.
    pub fn checkpoint(&mut self) -> Result<(), Error> {
        self.0.checkpoint(usize::MAX)
    }

    /// Writes what is buffered and the footer.
    pub fn finish(self) -> Result<(), Error> {
        self.0.finish()
    }
}

/// Reads an access-sample file.
pub fn read_access(path: &Path) -> Result<Vec<AccessRecord>, Error> {
    let table = TableReader::open(path)?;
    let time = table.u64s("time_ns")?;
    let tid = table.u32s("tid")?;
    let ip = table.u64s("ip")?;
    let addr = table.u64s("addr")?;
    let latency = table.u64s("latency")?;
    let data_src = table.u64s("data_src")?;
    let stack_id = table.u32s("stack_id")?;
    for len in [time.len(), tid.len(), ip.len(), addr.len()] {
        table.check_len(len)?;
    }
    for len in [latency.len(), data_src.len(), stack_id.len()] {
        table.check_len(len)?;
    }
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

/// Writes `fltrace-data-stacks-<pid>.parquet`.
pub struct StackWriter(Batched<Stack>);

impl StackWriter {
    /// Creates the file, with the pid of its name and no recording id (see [`Origin`]).
    pub fn create(path: &Path) -> Result<Self, Error> {
        Self::create_for(path, Origin::from_path(path))
    }

    /// Creates the file of the process and recording `origin`.
    pub fn create_for(path: &Path, origin: Origin) -> Result<Self, Error> {
        let table = TableWriter::create(path, STACK_SCHEMA, &[], &[])?;
        Ok(StackWriter(Batched::new(
            table,
            origin,
            |c, origin, _first, batch| {
                c.origin(origin, batch.len())?;
                c.i32(batch.iter().map(|s| s.id))?;
                c.i32(batch.iter().map(|s| s.generation))?;
                // A list column: definition level 0 marks an empty list, repetition level 0 the
                // first element of each row.
                let (mut values, mut def, mut rep) = (Vec::new(), Vec::new(), Vec::new());
                for stack in batch {
                    if stack.frames.is_empty() {
                        def.push(0);
                        rep.push(0);
                    }
                    for (i, frame) in stack.frames.iter().enumerate() {
                        values.push(frame.get() as i64);
                        def.push(1);
                        rep.push(i16::from(i > 0));
                    }
                }
                c.write::<Int64Type>(&values, Some(&def), Some(&rep))?;
                c.i32(batch.iter().map(|s| s.end.code()))
            },
        )))
    }

    /// Appends a stack.
    pub fn push(&mut self, stack: Stack) -> Result<(), Error> {
        self.0.push(stack)
    }

    /// Writes every stack pushed and a checkpoint: they stay readable should the writer
    /// never finish.
    pub fn checkpoint(&mut self) -> Result<(), Error> {
        self.0.checkpoint(usize::MAX)
    }

    /// Writes what is buffered and the footer.
    pub fn finish(self) -> Result<(), Error> {
        self.0.finish()
    }
}

// The tables of `fltrace export`: symbolized, one file each per recording, the recording (and
// host) given by the hive partition directories they are written in.
const EXPORT_FAULT_SCHEMA: &str = "message fault {
  required int32 pid;
  required int64 fault_id;
  required int64 time_ns;
  required int32 tid;
  required int64 ip;
  required int64 addr;
  required int32 flags;
  required int32 stack_id;
  required int64 call_site;
}";

const EXPORT_FRAME_SCHEMA: &str = "message frame {
  required int32 pid;
  required int32 stack_id;
  required int32 frame;
  required int32 inline_depth;
  required int64 address;
  required binary build_id (STRING);
  required binary function (STRING);
  required binary file (STRING);
  required int32 line;
  required binary library (STRING);
  required boolean call_site;
}";

/// A fault as `fltrace export` writes it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ExportedFault {
    /// The fault.
    pub fault: Fault,
    /// Its position among its process's faults in the recording, from 0.
    pub fault_id: u64,
    /// The address of its stack's frame that holds the call site (0 for an empty stack).
    pub call_site: u64,
}

/// One location of one frame of a stack, symbolized, as `fltrace export` writes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SymbolizedFrame {
    /// The process.
    pub pid: u32,
    /// The stack.
    pub stack_id: u32,
    /// The frame's position in the stack, innermost first, from 0.
    pub frame: u32,
    /// The location's position among those the frame's address expanded to: 0 the innermost
    /// inlined function, the last the function holding the address.
    pub inline_depth: u32,
    /// The frame's address.
    pub address: u64,
    /// The build ID of the file mapped at the address (empty when unknown).
    pub build_id: String,
    /// Function, source file, line (0 unknown) and library, as reports name them.
    pub function: String,
    /// See `function`.
    pub file: String,
    /// See `function`.
    pub line: u32,
    /// See `function`.
    pub library: String,
    /// Whether this location is its stack's call site under fltrace's rule.
    pub call_site: bool,
}

/// Writes the faults table of `fltrace export`.
pub struct ExportedFaultWriter(Batched<ExportedFault>);

impl ExportedFaultWriter {
    /// Creates the file.
    pub fn create(path: &Path) -> Result<Self, Error> {
        let table = TableWriter::create(
            path,
            EXPORT_FAULT_SCHEMA,
            &["time_ns", "addr", "fault_id"],
            &[],
        )?;
        Ok(ExportedFaultWriter(Batched::new(
            table,
            Origin::default(),
            |c, _origin, _first, batch| {
                c.i32(batch.iter().map(|f| f.fault.pid))?;
                c.i64(batch.iter().map(|f| f.fault_id))?;
                c.i64(batch.iter().map(|f| f.fault.time_ns))?;
                c.i32(batch.iter().map(|f| f.fault.tid))?;
                c.i64(batch.iter().map(|f| f.fault.ip.get()))?;
                c.i64(batch.iter().map(|f| f.fault.addr.get()))?;
                c.i32(batch.iter().map(|f| u32::from(f.fault.flags.0)))?;
                c.i32(batch.iter().map(|f| f.fault.stack_id))?;
                c.i64(batch.iter().map(|f| f.call_site))
            },
        )))
    }

    /// Appends a fault; writes a row group when the batch is full.
    pub fn push(&mut self, fault: ExportedFault) -> Result<(), Error> {
        self.0.push(fault)
    }

    /// Writes what is buffered and the footer.
    pub fn finish(self) -> Result<(), Error> {
        self.0.finish()
    }
}

/// Writes the frames table of `fltrace export`.
pub struct SymbolizedFrameWriter(Batched<SymbolizedFrame>);

impl SymbolizedFrameWriter {
    /// Creates the file.
    pub fn create(path: &Path) -> Result<Self, Error> {
        let table = TableWriter::create(path, EXPORT_FRAME_SCHEMA, &[], &[])?;
        Ok(SymbolizedFrameWriter(Batched::new(
            table,
            Origin::default(),
            |c, _origin, _first, batch| {
                c.i32(batch.iter().map(|f| f.pid))?;
                c.i32(batch.iter().map(|f| f.stack_id))?;
                c.i32(batch.iter().map(|f| f.frame))?;
                c.i32(batch.iter().map(|f| f.inline_depth))?;
                c.i64(batch.iter().map(|f| f.address))?;
                c.strings(batch.iter().map(|f| f.build_id.as_str()))?;
                c.strings(batch.iter().map(|f| f.function.as_str()))?;
                c.strings(batch.iter().map(|f| f.file.as_str()))?;
                c.i32(batch.iter().map(|f| f.line))?;
                c.strings(batch.iter().map(|f| f.library.as_str()))?;
                c.bools(batch.iter().map(|f| f.call_site))
            },
        )))
    }

    /// Appends a frame's location; writes a row group when the batch is full.
    pub fn push(&mut self, frame: SymbolizedFrame) -> Result<(), Error> {
        self.0.push(frame)
    }

    /// Writes what is buffered and the footer.
    pub fn finish(self) -> Result<(), Error> {
        self.0.finish()
    }
}

/// Writes `fltrace-data-mmaps-<pid>.parquet`.
pub struct MappingWriter(Batched<Mapping>);

impl MappingWriter {
    /// Creates the file, with the pid of its name and no recording id (see [`Origin`]).
    pub fn create(path: &Path) -> Result<Self, Error> {
        Self::create_for(path, Origin::from_path(path))
    }

    /// Creates the file of the process and recording `origin`.
    pub fn create_for(path: &Path, origin: Origin) -> Result<Self, Error> {
        let table = TableWriter::create(path, MAPPING_SCHEMA, &["mapping_id"], &[])?;
        Ok(MappingWriter(Batched::new(
            table,
            origin,
            |c, origin, first, batch| {
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
            },
        )))
    }

    /// Appends a mapping; it is written at the next checkpoint, at the end, or as a row group
    /// of its own once [`MAPPING_ROW_GROUP`] are buffered: a program that maps and unmaps
    /// hundreds of thousands of times a second must not grow the writer by the second.
    pub fn push(&mut self, mapping: Mapping) -> Result<(), Error> {
        self.0.batch.push(mapping);
        if self.0.batch.len() >= MAPPING_ROW_GROUP {
            self.0.flush_first(MAPPING_ROW_GROUP)?;
        }
        Ok(())
    }

    /// Writes every mapping pushed and a checkpoint: they stay readable should the writer
    /// never finish.
    pub fn checkpoint(&mut self) -> Result<(), Error> {
        self.0.checkpoint(usize::MAX)
    }

    /// Writes the mappings and the footer.
    pub fn finish(self) -> Result<(), Error> {
        self.0.finish()
    }
}

/// How much of a table could be read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Completeness {
    /// The writer finished the file.
    Complete,
    /// The writer never finished it (it was killed, or the disk filled): the rows up to its
    /// last checkpoint were recovered.
    Recovered {
        /// Rows recovered.
        rows: u64,
        /// Bytes after the last checkpoint, lost.
        lost_bytes: u64,
    },
}

/// Where a column chunk of a table lies in its file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ColumnChunk {
    /// The row group.
    pub row_group: usize,
    /// The column's name (for a list, its path: `frames.list.element`).
    pub column: String,
    /// Offset of its first page.
    pub offset: u64,
    /// Its length in bytes.
    pub len: u64,
}

/// The column chunks of the table at `path`, for checking and testing its integrity.
pub fn column_chunks(path: &Path) -> Result<Vec<ColumnChunk>, Error> {
    let table = TableReader::open(path)?;
    let mut chunks = Vec::new();
    for (row_group, group) in table.metadata.row_groups().iter().enumerate() {
        for column in group.columns() {
            let (offset, len) = column.byte_range();
            chunks.push(ColumnChunk {
                row_group,
                column: column.column_path().string(),
                offset,
                len,
            });
        }
    }
    Ok(chunks)
}

/// Whether the table at `path` was finished, and if not how much of it can be read.
pub fn completeness(path: &Path) -> Result<Completeness, Error> {
    Ok(TableReader::open(path)?.completeness())
}

/// A Parquet file opened for reading whole columns: a finished file, or the row groups of an
/// unfinished one up to its last checkpoint.
pub(crate) struct TableReader {
    path: PathBuf,
    file: Arc<File>,
    metadata: ParquetMetaData,
    props: ReaderPropertiesPtr,
    /// The CRC-32 of each column chunk, row group by row group; `None` for files written
    /// before checksums were.
    crcs: Option<Vec<u32>>,
    /// Row groups whose checksums were checked.
    verified: Vec<Cell<bool>>,
    completeness: Completeness,
}

/// The footer value of `key`.
fn footer_value<'m>(metadata: &'m ParquetMetaData, key: &str) -> Option<&'m str> {
    metadata
        .file_metadata()
        .key_value_metadata()?
        .iter()
        .find(|kv| kv.key == key)
        .and_then(|kv| kv.value.as_deref())
}

/// The checkpoint footer that ends at `end` (just past its `PAR1`), if there is one.
fn checkpoint_at(file: &File, end: u64) -> Option<ParquetMetaData> {
    let mut tail = [0u8; 8];
    file.read_exact_at(&mut tail, end.checked_sub(8)?).ok()?;
    if &tail[4..] != b"PAR1" {
        return None;
    }
    let len = u64::from(u32::from_le_bytes([tail[0], tail[1], tail[2], tail[3]]));
    // The file begins with a 4-byte `PAR1` of its own.
    let start = end.checked_sub(8 + len).filter(|&start| start >= 4)?;
    let mut footer = vec![0u8; usize::try_from(len).ok()?];
    file.read_exact_at(&mut footer, start).ok()?;
    let metadata = ParquetMetaDataReader::decode_metadata(&footer).ok()?;
    footer_value(&metadata, keys::CHECKPOINT)
        .is_some()
        .then_some(metadata)
}

/// The end of the last checkpoint before `len`: the file is searched backwards for the `PAR1`
/// that ends a footer.
fn last_checkpoint(file: &File, len: u64) -> Option<(u64, ParquetMetaData)> {
    const WINDOW: u64 = 1 << 20;
    let mut end = len;
    loop {
        let start = end.saturating_sub(WINDOW);
        let mut window = vec![0u8; usize::try_from(end - start).ok()?];
        file.read_exact_at(&mut window, start).ok()?;
        for at in (0..window.len().saturating_sub(3)).rev() {
            if &window[at..at + 4] == b"PAR1" {
                let footer_end = start + at as u64 + 4;
                if let Some(metadata) = checkpoint_at(file, footer_end) {
                    return Some((footer_end, metadata));
                }
            }
        }
        if start == 0 {
            return None;
        }
        // Overlapping by three bytes: a `PAR1` across the boundary is found too.
        end = start + 3;
    }
}

/// Parses [`keys::CRC32`]'s value.
fn parse_crcs(value: &str) -> Option<Vec<u32>> {
    value
        .split_ascii_whitespace()
        .map(|crc| u32::from_str_radix(crc, 16).ok())
        .collect()
}

impl TableReader {
    /// Opens `path`; a panic of the Parquet decoder on a corrupt footer is an error naming it.
    pub(crate) fn open(path: &Path) -> Result<Self, Error> {
        crate::guard::guarded(path, || Self::open_unguarded(path))
    }

    fn open_unguarded(path: &Path) -> Result<Self, Error> {
        let file = crate::files::open_input(path)?;
        let len = file.metadata().map_err(Error::io(path))?.len();
        // Every table the writer starts begins with the magic: anything else is refused before
        // a search for checkpoints through all of it.
        let mut magic = [0u8; 4];
        if len < 4 || file.read_exact_at(&mut magic, 0).is_err() || &magic != b"PAR1" {
            return Err(Error::Format {
                path: path.to_owned(),
                message: "not a Parquet file (it does not begin with `PAR1`)".into(),
            });
        }
        let (metadata, completeness) = match ParquetMetaDataReader::new().parse_and_finish(&file) {
            Ok(metadata) if footer_value(&metadata, keys::CHECKPOINT).is_none() => {
                (metadata, Completeness::Complete)
            }
            // The file ends with a checkpoint: the writer died right after one.
            Ok(_) => Self::recover(path, &file, len)?,
            Err(e) => match Self::recover(path, &file, len) {
                Ok(recovered) => recovered,
                // Say why the file itself is unreadable, not that recovery failed.
                Err(_) => return Err(Error::parquet(path)(e)),
            },
        };
        let columns = metadata.file_metadata().schema_descr().num_columns();
        let crcs = match footer_value(&metadata, keys::CRC32) {
            None => None,
            Some(value) => {
                let crcs = parse_crcs(value)
                    .filter(|crcs| crcs.len() == metadata.num_row_groups() * columns)
                    .ok_or_else(|| Error::Format {
                        path: path.to_owned(),
                        message: format!(
                            "the footer's `{}` does not have one checksum per column chunk",
                            keys::CRC32
                        ),
                    })?;
                Some(crcs)
            }
        };
        Ok(TableReader {
            path: path.to_owned(),
            file: Arc::new(file),
            props: Arc::new(ReaderProperties::builder().build()),
            verified: vec![Cell::new(false); metadata.num_row_groups()],
            metadata,
            crcs,
            completeness,
        })
    }

    /// The row groups of every checkpoint of an unfinished file, as the metadata of one file.
    fn recover(
        path: &Path,
        file: &File,
        len: u64,
    ) -> Result<(ParquetMetaData, Completeness), Error> {
        let unreadable = |message: &str| Error::Format {
            path: path.to_owned(),
            message: message.to_owned(),
        };
        let (end, last) = last_checkpoint(file, len)
            .ok_or_else(|| unreadable("no Parquet footer and no checkpoint to recover from"))?;
        let mut groups: Vec<Vec<RowGroupMetaData>> = Vec::new();
        let mut crcs: Vec<String> = Vec::new();
        let mut checkpoint = last.clone();
        let mut checkpoint_end = end;
        loop {
            groups.push(checkpoint.row_groups().to_vec());
            crcs.push(
                footer_value(&checkpoint, keys::CRC32)
                    .unwrap_or("")
                    .to_owned(),
            );
            let previous: u64 = footer_value(&checkpoint, keys::CHECKPOINT)
                .and_then(|v| v.parse().ok())
                .ok_or_else(|| unreadable("a checkpoint without a valid link"))?;
            if previous == 0 {
                break;
            }
            // Links only go backwards, so this ends.
            if previous >= checkpoint_end {
                return Err(unreadable("a checkpoint linking forwards"));
            }
            checkpoint = checkpoint_at(file, previous)
                .ok_or_else(|| unreadable("a checkpoint links to one that is not there"))?;
            checkpoint_end = previous;
        }
        let groups: Vec<RowGroupMetaData> = groups.into_iter().rev().flatten().collect();
        let crcs = crcs
            .into_iter()
            .rev()
            .filter(|c| !c.is_empty())
            .collect::<Vec<_>>()
            .join(" ");
        let rows: i64 = groups.iter().map(|g| g.num_rows()).sum();
        let last_file = last.file_metadata();
        let footer: Vec<KeyValue> = last_file
            .key_value_metadata()
            .into_iter()
            .flatten()
            .filter(|kv| kv.key != keys::CHECKPOINT && kv.key != keys::CRC32)
            .cloned()
            .chain([KeyValue::new(keys::CRC32.to_owned(), crcs)])
            .collect();
        let file_metadata = FileMetaData::new(
            last_file.version(),
            rows,
            last_file.created_by().map(str::to_owned),
            Some(footer),
            last_file.schema_descr_ptr(),
            None,
        );
        Ok((
            ParquetMetaData::new(file_metadata, groups),
            Completeness::Recovered {
                rows: rows as u64,
                lost_bytes: len - end,
            },
        ))
    }

    fn num_row_groups(&self) -> usize {
        self.metadata.num_row_groups()
    }

    /// Row group `group`, every column of it checked against its checksum the first time:
    /// damage in a column not read would not change an answer, but is damage all the same.
    fn row_group(&self, group: usize) -> Result<SerializedRowGroupReader<'_, File>, Error> {
        let metadata = self.metadata.row_group(group);
        if let Some(crcs) = &self.crcs
            && !self.verified.get(group).is_some_and(Cell::get)
        {
            let columns = metadata.num_columns();
            for (column, chunk_metadata) in metadata.columns().iter().enumerate() {
                let expected = crcs.get(group * columns + column).copied();
                let (start, len) = chunk_metadata.byte_range();
                let too_long = |_| Error::Format {
                    path: self.path.clone(),
                    message: format!("row group {group}: a column chunk of {len} bytes"),
                };
                let mut chunk = vec![0u8; usize::try_from(len).map_err(too_long)?];
                self.file
                    .read_exact_at(&mut chunk, start)
                    .map_err(Error::io(&self.path))?;
                let actual = crc32fast::hash(&chunk);
                if expected != Some(actual) {
                    return Err(Error::Format {
                        path: self.path.clone(),
                        message: format!(
                            "row group {group}, column `{}`: the bytes differ from those written (CRC-32 {actual:08x}, recorded {:08x}): the file is damaged",
                            chunk_metadata.column_path().string(),
                            expected.unwrap_or(0)
                        ),
                    });
                }
            }
            if let Some(verified) = self.verified.get(group) {
                verified.set(true);
            }
        }
        SerializedRowGroupReader::new(
            self.file.clone(),
            metadata,
            self.metadata.page_index_for_row_group(group),
            self.props.clone(),
        )
        .map_err(Error::parquet(&self.path))
    }

    /// The footer's key-value metadata.
    /// Without the keys fltrace uses to read the file itself ([`keys::INTERNAL`]).
    pub(crate) fn metadata(&self) -> Vec<(String, String)> {
        let file = self.metadata.file_metadata();
        file.key_value_metadata()
            .map(|kvs| {
                kvs.iter()
                    .filter(|kv| !keys::INTERNAL.contains(&kv.key.as_str()))
                    .map(|kv| (kv.key.clone(), kv.value.clone().unwrap_or_default()))
                    .collect()
            })
            .unwrap_or_default()
    }

    pub(crate) fn rows(&self) -> u64 {
        self.metadata.file_metadata().num_rows() as u64
    }

    /// Whether the file was finished.
    pub(crate) fn completeness(&self) -> Completeness {
        self.completeness
    }

    /// The index of the leaf column `name` (or of its name in layout 1). Columns are found by
    /// name, so that files of every layout read, whatever columns came before.
    fn index(&self, name: &str) -> Result<usize, Error> {
        let old_name = OLD_NAMES
            .iter()
            .find(|(new, _)| *new == name)
            .map(|(_, old)| *old);
        let schema = self.metadata.file_metadata().schema_descr();
        schema
            .columns()
            .iter()
            .position(|c| {
                c.path()
                    .parts()
                    .first()
                    .is_some_and(|p| p == name || Some(p.as_str()) == old_name)
            })
            .ok_or_else(|| Error::Format {
                path: self.path.clone(),
                message: format!("no column `{name}`: not an fltrace table of this kind"),
            })
    }

    /// Whether the table has a column `name` (added in a later version of its layout).
    fn has_column(&self, name: &str) -> bool {
        self.index(name).is_ok()
    }

    /// Reads column `name` of every row group: its values and, for list columns, the levels.
    fn column<T: DataType>(&self, name: &str) -> Result<ColumnData<T::T>, Error>
    where
        T::T: Default + Clone,
    {
        self.column_in::<T>(name, 0..self.num_row_groups())
    }

    /// Column `name` of the row groups in `groups`; a panic of the Parquet decoder on a
    /// corrupt page is an error naming the file.
    fn column_in<T: DataType>(
        &self,
        name: &str,
        groups: std::ops::Range<usize>,
    ) -> Result<ColumnData<T::T>, Error>
    where
        T::T: Default + Clone,
    {
        crate::guard::guarded(&self.path, || self.column_in_unguarded::<T>(name, groups))
    }

    fn column_in_unguarded<T: DataType>(
        &self,
        name: &str,
        groups: std::ops::Range<usize>,
    ) -> Result<ColumnData<T::T>, Error>
    where
        T::T: Default + Clone,
    {
        let index = self.index(name)?;
        let mut data = ColumnData {
            values: Vec::new(),
            def: Vec::new(),
            rep: Vec::new(),
        };
        for group in groups {
            let group = self.row_group(group)?;
            let result = (|| {
                let reader = group.get_column_reader(index)?;
                let mut reader = T::get_column_reader(reader).ok_or_else(|| {
                    parquet::errors::ParquetError::General(format!(
                        "column `{name}` has an unexpected type"
                    ))
                })?;
                loop {
                    let (records, _, _) = reader.read_records(
                        1 << 16,
                        Some(&mut data.def),
                        Some(&mut data.rep),
                        &mut data.values,
                    )?;
                    if records == 0 {
                        break;
                    }
                }
                Ok(())
            })();
            result.map_err(Error::parquet(&self.path))?;
        }
        Ok(data)
    }

    fn u64s(&self, name: &str) -> Result<Vec<u64>, Error> {
        Ok(self
            .column::<Int64Type>(name)?
            .values
            .into_iter()
            .map(|v| v as u64)
            .collect())
    }

    fn u32s(&self, name: &str) -> Result<Vec<u32>, Error> {
        Ok(self
            .column::<Int32Type>(name)?
            .values
            .into_iter()
            .map(|v| v as u32)
            .collect())
    }

    fn strings(&self, name: &str) -> Result<Vec<String>, Error> {
        let values = self.column::<ByteArrayType>(name)?.values;
        Ok(values
            .iter()
            .map(|v| String::from_utf8_lossy(v.data()).into_owned())
            .collect())
    }

    fn check_len(&self, len: usize) -> Result<(), Error> {
        if len as u64 == self.rows() {
            Ok(())
        } else {
            Err(Error::Format {
                path: self.path.clone(),
                message: format!("a column has {len} values for {} rows", self.rows()),
            })
        }
    }
}

struct ColumnData<T> {
    values: Vec<T>,
    def: Vec<i16>,
    rep: Vec<i16>,
}

/// The recording and process of any fltrace table: its `recording` and `pid` columns, `None`
/// for a table of layout 1 (without them) or without rows. A table whose rows disagree is
/// refused: each file holds one process of one recording.
pub fn read_origin(path: &Path) -> Result<Option<Origin>, Error> {
    let table = TableReader::open(path)?;
    if table.index("recording").is_err() {
        return Ok(None);
    }
    let mut origin: Option<Origin> = None;
    for group in 0..table.num_row_groups() {
        let recordings = table.column_in::<ByteArrayType>("recording", group..group + 1)?;
        let pids = table.column_in::<Int32Type>("pid", group..group + 1)?;
        if recordings.values.len() != pids.values.len() {
            return Err(Error::Format {
                path: path.to_owned(),
                message: format!("row group {group}: columns of different lengths"),
            });
        }
        for (recording, &pid) in recordings.values.iter().zip(&pids.values) {
            let row = Origin::new(String::from_utf8_lossy(recording.data()), pid as u32);
            match &origin {
                None => origin = Some(row),
                Some(first) if *first == row => {}
                Some(first) => {
                    return Err(Error::Format {
                        path: path.to_owned(),
                        message: format!(
                            "rows of recording {} pid {} and of recording {} pid {}",
                            first.recording, first.pid, row.recording, row.pid
                        ),
                    });
                }
            }
        }
    }
    Ok(origin)
}

/// Reads a faults file: its rows and its footer metadata.
pub fn read_faults(path: &Path) -> Result<(Vec<Fault>, Metadata), Error> {
    let table = TableReader::open(path)?;
    let faults = faults_in(&table, 0..table.num_row_groups())?;
    table.check_len(faults.len())?;
    Ok((faults, table.metadata()))
}

/// The faults of a faults file, one row group (64K rows) at a time, so that memory stays
/// bounded however long the recording: whole rows ([`FaultRowGroups::open`]), or only what
/// counting needs ([`FaultRowGroups::open_keys`]), which reads three of the eight columns.
pub struct FaultRowGroups<T> {
    table: TableReader,
    next: usize,
    read: fn(&TableReader, std::ops::Range<usize>) -> Result<Vec<T>, Error>,
}

impl FaultRowGroups<Fault> {
    /// Opens `path` for whole rows.
    pub fn open(path: &Path) -> Result<Self, Error> {
        Ok(FaultRowGroups {
            table: TableReader::open(path)?,
            next: 0,
            read: faults_in,
        })
    }
}

impl FaultRowGroups<FaultKey> {
    /// Opens `path` for each fault's time, stack and flags only.
    pub fn open_keys(path: &Path) -> Result<Self, Error> {
        Ok(FaultRowGroups {
            table: TableReader::open(path)?,
            next: 0,
            read: fault_keys_in,
        })
    }
}

impl<T> FaultRowGroups<T> {
    /// The footer's key-value metadata.
    pub fn metadata(&self) -> Metadata {
        self.table.metadata()
    }

    /// Rows in the file, from its footer.
    pub fn rows(&self) -> u64 {
        self.table.rows()
    }

    /// Row groups in the file.
    pub fn row_groups(&self) -> usize {
        self.table.num_row_groups()
    }
}

impl<T> Iterator for FaultRowGroups<T> {
    type Item = Result<Vec<T>, Error>;

    fn next(&mut self) -> Option<Self::Item> {
        let group = self.next;
        if group >= self.row_groups() {
            return None;
        }
        self.next += 1;
        Some((self.read)(&self.table, group..group + 1))
    }
}

fn fault_keys_in(
    table: &TableReader,
    groups: std::ops::Range<usize>,
) -> Result<Vec<FaultKey>, Error> {
    let time = table
        .column_in::<Int64Type>("time_ns", groups.clone())?
        .values;
    let flags = table
        .column_in::<Int32Type>("flags", groups.clone())?
        .values;
    let stack = table
        .column_in::<Int32Type>("stack_id", groups.clone())?
        .values;
    let tid = table.column_in::<Int32Type>("tid", groups)?.values;
    if flags.len() != time.len() || stack.len() != time.len() || tid.len() != time.len() {
        return Err(Error::Format {
            path: table.path.clone(),
            message: "columns of different lengths".into(),
        });
    }
    Ok(time
        .iter()
        .zip(&flags)
        .zip(&stack)
        .zip(&tid)
        .map(|(((&time_ns, &flags), &stack_id), &tid)| FaultKey {
            time_ns: time_ns as u64,
            flags: FaultFlags(flags as u8),
            stack_id: stack_id as u32,
            tid: tid as u32,
        })
        .collect())
}

fn faults_in(table: &TableReader, groups: std::ops::Range<usize>) -> Result<Vec<Fault>, Error> {
    let u64s = |name| -> Result<Vec<u64>, Error> {
        Ok(table
            .column_in::<Int64Type>(name, groups.clone())?
            .values
            .into_iter()
            .map(|v| v as u64)
            .collect())
    };
    let u32s = |name| -> Result<Vec<u32>, Error> {
        Ok(table
            .column_in::<Int32Type>(name, groups.clone())?
            .values
            .into_iter()
            .map(|v| v as u32)
            .collect())
    };
    let (time, pid, tid, ip, addr, flags, stack) = (
        u64s("time_ns")?,
        u32s("pid")?,
        u32s("tid")?,
        u64s("ip")?,
        u64s("addr")?,
        u32s("flags")?,
        u32s("stack_id")?,
    );
    let rows = time.len();
    if [
        pid.len(),
        tid.len(),
        ip.len(),
        addr.len(),
        flags.len(),
        stack.len(),
    ]
    .iter()
    .any(|&n| n != rows)
    {
        return Err(Error::Format {
            path: table.path.clone(),
            message: "columns of different lengths".into(),
        });
    }
    Ok((0..rows)
        .map(|i| Fault {
            time_ns: time[i],
            pid: pid[i],
            tid: tid[i],
            ip: CodeAddr::new(ip[i]),
            addr: VirtAddr::new(addr[i]),
            flags: FaultFlags(flags[i] as u8),
            stack_id: stack[i],
        })
        .collect())
}

/// Reads a stacks file.
pub fn read_stacks(path: &Path) -> Result<Vec<Stack>, Error> {
    let table = TableReader::open(path)?;
    let ids = table.u32s("stack_id")?;
    let generations = table.u32s("generation")?;
    table.check_len(ids.len())?;
    table.check_len(generations.len())?;
    let frames = table.column::<Int64Type>("frames")?;
    // Recordings made before stacks were classified have no `stack_end`.
    let ends = if table.has_column("stack_end") {
        let ends = table.u32s("stack_end")?;
        table.check_len(ends.len())?;
        ends
    } else {
        Vec::new()
    };
    let mut stacks: Vec<Stack> = Vec::with_capacity(ids.len());
    let mut values = frames.values.iter();
    for (def, rep) in frames.def.iter().zip(&frames.rep) {
        if *rep == 0 {
            let row = stacks.len();
            let (Some(&id), Some(&generation)) = (ids.get(row), generations.get(row)) else {
                return Err(Error::Format {
                    path: path.to_owned(),
                    message: "more stack lists than rows".into(),
                });
            };
            stacks.push(Stack {
                end: ends.get(row).map_or(crate::StackEnd::Unknown, |&code| {
                    crate::StackEnd::from_code(code)
                }),
                id,
                generation,
                frames: Vec::new(),
            });
        }
        if *def == 1 {
            let (Some(stack), Some(value)) = (stacks.last_mut(), values.next()) else {
                return Err(Error::Format {
                    path: path.to_owned(),
                    message: "stack frames without a stack".into(),
                });
            };
            stack.frames.push(CodeAddr::new(*value as u64));
        }
    }
    table.check_len(stacks.len())?;
    Ok(stacks)
}

/// Reads a mappings file.
pub fn read_mappings(path: &Path) -> Result<Vec<Mapping>, Error> {
    let table = TableReader::open(path)?;
    let time = table.u64s("time_ns")?;
    let generation = table.u32s("generation")?;
    let start = table.u64s("start_addr")?;
    let end = table.u64s("end_addr")?;
    let pgoff = table.u64s("pgoff")?;
    let prot = table.u32s("prot")?;
    let flags = table.u32s("flags")?;
    let path_col = table.strings("path")?;
    let build_id = table.strings("build_id")?;
    for len in [time.len(), generation.len(), start.len(), end.len()] {
        table.check_len(len)?;
    }
    for len in [
        pgoff.len(),
        prot.len(),
        flags.len(),
        path_col.len(),
        build_id.len(),
    ] {
        table.check_len(len)?;
    }
    Ok((0..time.len())
        .map(|i| Mapping {
            time_ns: time[i],
            generation: generation[i],
            start: VirtAddr::new(start[i]),
            end: VirtAddr::new(end[i]),
            pgoff: FileOffset::new(pgoff[i]),
            prot: prot[i],
            flags: flags[i],
            path: path_col[i].clone(),
            build_id: build_id[i].clone(),
        })
        .collect())
}

/// The rows of table `path`, from its footer (the last checkpoint's of an unfinished one).
pub fn table_rows(path: &Path) -> Result<u64, Error> {
    TableReader::open(path).map(|table| table.rows())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fault(i: u64) -> Fault {
        Fault {
            time_ns: 1_700_000_000_000_000_000 + i * 1600,
            pid: 42,
            tid: 42 + (i % 3) as u32,
            ip: CodeAddr::new(0x5555_5555_1234 + (i % 2)),
            addr: VirtAddr::new(0x7f00_0000_0000 + i * 4096 + 17),
            flags: FaultFlags((i % 4) as u8 | FaultFlags::ZERO),
            stack_id: (i % 5) as u32,
        }
    }

    /// Faults, their metadata, stacks (including an empty one) and mappings read back exactly.
    #[test]
    fn tables_round_trip() {
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

        let stacks_path = dir.path().join("s.parquet");
        let mut writer = StackWriter::create(&stacks_path).unwrap();
        let expected = vec![
            Stack {
                end: crate::StackEnd::Complete,
                id: 0,
                generation: 0,
                frames: [1, 2, 3].map(CodeAddr::new).to_vec(),
            },
            Stack {
                end: crate::StackEnd::Unknown,
                id: 1,
                generation: 0,
                frames: vec![],
            },
            Stack {
                end: crate::StackEnd::Truncated,
                id: 2,
                generation: 1,
                frames: [u64::MAX, 7].map(CodeAddr::new).to_vec(),
            },
        ];
        for s in &expected {
            writer.push(s.clone()).unwrap();
        }
        writer.finish().unwrap();
        assert_eq!(read_stacks(&stacks_path).unwrap(), expected);

        let maps_path = dir.path().join("m.parquet");
        let mut writer = MappingWriter::create(&maps_path).unwrap();
        let mapping = Mapping {
            time_ns: 5,
            generation: 1,
            start: VirtAddr::new(0x1000),
            end: VirtAddr::new(0x3000),
            pgoff: FileOffset::new(0x2000),
            prot: 5,
            flags: 2,
            path: "/lib/x.so".into(),
            build_id: "abcd".into(),
        };
        writer.push(mapping.clone()).unwrap();
        writer.finish().unwrap();
        assert_eq!(read_mappings(&maps_path).unwrap(), vec![mapping]);
    }

    /// Access samples come back byte for byte.
    /// Layout 3: no column carries an unsigned or timestamp annotation (Spark refuses the
    /// one and widens the other), and `fault_id`/`mapping_id` are each row's position in its
    /// file, across row groups.
    #[test]
    fn columns_are_plain_and_rows_numbered() {
        let dir = tempfile::tempdir().unwrap();
        let faults_path = dir.path().join("f.parquet");
        let mut writer = FaultWriter::create(&faults_path, &[]).unwrap();
        for i in 0..70_000 {
            writer.push(fault(i)).unwrap();
        }
        writer.finish().unwrap();
        let maps_path = dir.path().join("m.parquet");
        let mut writer = MappingWriter::create(&maps_path).unwrap();
        for i in 0..3u64 {
            writer
                .push(Mapping {
                    time_ns: i,
                    generation: 0,
                    start: VirtAddr::new(0x1000 * (i + 1)),
                    end: VirtAddr::new(0x1000 * (i + 2)),
                    pgoff: FileOffset::new(0),
                    prot: 3,
                    flags: 2,
                    path: "//anon".into(),
                    build_id: String::new(),
                })
                .unwrap();
            writer.checkpoint().unwrap();
        }
        writer.finish().unwrap();
        for (path, id, rows) in [
            (&faults_path, "fault_id", 70_000),
            (&maps_path, "mapping_id", 3),
        ] {
            let table = TableReader::open(path).unwrap();
            for column in table.metadata.file_metadata().schema_descr().columns() {
                let annotated = match column.logical_type_ref() {
                    None => false,
                    Some(parquet::basic::LogicalType::String) => false,
                    Some(_) => true,
                };
                assert!(
                    !annotated,
                    "{}: {:?}",
                    column.name(),
                    column.logical_type_ref()
                );
            }
            assert!(table.num_row_groups() > 1, "{id}: more than one row group");
            let ids = table.column::<Int64Type>(id).unwrap().values;
            assert_eq!(ids, (0..rows).collect::<Vec<i64>>(), "{id}");
        }
    }

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

    /// Allocation events come back byte for byte, every call kind and extreme values included.
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

    /// Tables of layout 1 (before `recording`, with the mappings' `start` and `end`) still read.
    #[test]
    fn layout_1_tables_read() {
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
        const OLD_STACK_SCHEMA: &str = "message stack {
          required int32 stack_id (INTEGER(32,false));
          required int32 generation (INTEGER(32,false));
          required group frames (LIST) {
            repeated group list {
              required int64 element (INTEGER(64,false));
            }
          }
        }";
        let dir = tempfile::tempdir().unwrap();
        let maps_path = dir.path().join("m.parquet");
        let mut table = TableWriter::create(&maps_path, OLD_MAPPING_SCHEMA, &[], &[]).unwrap();
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
        assert_eq!(
            read_mappings(&maps_path).unwrap(),
            vec![Mapping {
                time_ns: 7,
                generation: 1,
                start: VirtAddr::new(0x1000),
                end: VirtAddr::new(0x3000),
                pgoff: FileOffset::new(0x2000),
                prot: 5,
                flags: 2,
                path: "/lib/x.so".into(),
                build_id: "abcd".into(),
            }]
        );
        assert_eq!(read_origin(&maps_path).unwrap(), None);

        let stacks_path = dir.path().join("s.parquet");
        let mut table = TableWriter::create(&stacks_path, OLD_STACK_SCHEMA, &[], &[]).unwrap();
        table
            .row_group(|c| {
                c.i32([3].into_iter())?;
                c.i32([0].into_iter())?;
                c.write::<Int64Type>(&[10, 11], Some(&[1, 1]), Some(&[0, 1]))
            })
            .unwrap();
        table.finish().unwrap();
        assert_eq!(
            read_stacks(&stacks_path).unwrap(),
            vec![Stack {
                end: crate::StackEnd::Unknown,
                id: 3,
                generation: 0,
                frames: [10, 11].map(CodeAddr::new).to_vec()
            }]
        );

        // The faults table had `pid` second, after `time_ns`.
        const OLD_FAULT_SCHEMA: &str = "message fault {
          required int64 time_ns (TIMESTAMP(NANOS,true));
          required int32 pid (INTEGER(32,false));
          required int32 tid (INTEGER(32,false));
          required int64 ip (INTEGER(64,false));
          required int64 addr (INTEGER(64,false));
          required int32 flags (INTEGER(8,false));
          required int32 stack_id (INTEGER(32,false));
        }";
        let faults_path = dir.path().join("f.parquet");
        let mut table = TableWriter::create(&faults_path, OLD_FAULT_SCHEMA, &[], &[]).unwrap();
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

    /// A table written before checkpoints and checksums (a plain Parquet file, as format 2
    /// was) reads as complete, unchecked, with its rows and metadata.
    #[test]
    fn tables_without_checkpoints_or_checksums_read() {
        // Layout 2's faults table: unsigned and timestamp annotations, no `fault_id`.
        const LAYOUT_2_FAULT_SCHEMA: &str = "message fault {
          required binary recording (STRING);
          required int32 pid (INTEGER(32,false));
          required int64 time_ns (TIMESTAMP(NANOS,true));
          required int32 tid (INTEGER(32,false));
          required int64 ip (INTEGER(64,false));
          required int64 addr (INTEGER(64,false));
          required int32 flags (INTEGER(8,false));
          required int32 stack_id (INTEGER(32,false));
        }";
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f.parquet");
        let schema = Arc::new(parse_message_type(LAYOUT_2_FAULT_SCHEMA).unwrap());
        let footer = vec![KeyValue::new(keys::FORMAT.to_owned(), "2".to_owned())];
        let props = WriterProperties::builder()
            .set_key_value_metadata(Some(footer))
            .build();
        let file = File::create(&path).unwrap();
        let mut writer = SerializedFileWriter::new(file, schema, Arc::new(props)).unwrap();
        let expected: Vec<Fault> = (0..100).map(fault).collect();
        let mut group = writer.next_row_group().unwrap();
        let mut c = group.next_column().unwrap().unwrap();
        let recordings = vec![ByteArray::from("1-2"); expected.len()];
        c.typed::<ByteArrayType>()
            .write_batch(&recordings, None, None)
            .unwrap();
        c.close().unwrap();
        let mut column = |values: Vec<i64>, int32: bool| {
            let mut c = group.next_column().unwrap().unwrap();
            if int32 {
                let values: Vec<i32> = values.iter().map(|&v| v as i32).collect();
                c.typed::<Int32Type>()
                    .write_batch(&values, None, None)
                    .unwrap();
            } else {
                c.typed::<Int64Type>()
                    .write_batch(&values, None, None)
                    .unwrap();
            }
            c.close().unwrap();
        };
        let field = |f: fn(&Fault) -> u64| expected.iter().map(f).map(|v| v as i64).collect();
        column(field(|f| u64::from(f.pid)), true);
        column(field(|f| f.time_ns), false);
        column(field(|f| u64::from(f.tid)), true);
        column(field(|f| f.ip.get()), false);
        column(field(|f| f.addr.get()), false);
        column(field(|f| u64::from(f.flags.0)), true);
        column(field(|f| u64::from(f.stack_id)), true);
        group.close().unwrap();
        writer.close().unwrap();
        let table = TableReader::open(&path).unwrap();
        assert!(table.crcs.is_none());
        assert_eq!(table.completeness(), Completeness::Complete);
        let (faults, meta) = read_faults(&path).unwrap();
        assert_eq!(faults, expected);
        assert_eq!(meta, [(keys::FORMAT.to_owned(), "2".to_owned())]);
    }

    /// A file of another table kind is refused with a format error, not misread.
    #[test]
    fn wrong_table_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s.parquet");
        StackWriter::create(&path).unwrap().finish().unwrap();
        assert!(matches!(read_faults(&path), Err(Error::Format { .. })));
    }

    /// A file cut off anywhere (a writer killed at any moment) reads back as exactly the rows
    /// of its last checkpoint before the cut, with its metadata, and says it was recovered;
    /// cut before the first checkpoint it is an error naming the file.
    #[test]
    fn unfinished_files_recover_to_their_last_checkpoint() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f.parquet");
        let metadata = vec![(keys::SESSION.to_owned(), "7-8".to_owned())];
        let mut writer = FaultWriter::create(&path, &metadata).unwrap();
        let size = || std::fs::metadata(&path).unwrap().len();
        // (file length after a checkpoint, rows it makes readable)
        let mut checkpoints = vec![(size(), 0u64)];
        let expected: Vec<Fault> = (0..150_000).map(fault).collect();
        for (i, f) in expected.iter().enumerate() {
            writer.push(*f).unwrap();
            // Checkpoints, one with an automatic row group (64K rows) written since the
            // previous.
            if [10_000, 20_000, 100_000].contains(&i) {
                writer.checkpoint().unwrap();
                checkpoints.push((size(), i as u64 + 1));
            }
        }
        writer.finish().unwrap();
        let whole = std::fs::read(&path).unwrap();
        // The checkpoint written before the final footer (and the page index).
        let footer_len = u32::from_le_bytes(whole[whole.len() - 8..][..4].try_into().unwrap());
        let footer_start = whole.len() as u64 - 8 - u64::from(footer_len);
        let (last, _) = last_checkpoint(&File::open(&path).unwrap(), footer_start).unwrap();
        assert!(last > checkpoints.last().unwrap().0);
        checkpoints.push((last, 150_000));
        assert_eq!(read_faults(&path).unwrap().0, expected);
        assert_eq!(completeness(&path).unwrap(), Completeness::Complete);

        let cut_path = dir.path().join("cut.parquet");
        let mut cuts: Vec<u64> = (0..whole.len() as u64).step_by(997).collect();
        cuts.extend(
            checkpoints
                .iter()
                .flat_map(|&(end, _)| [end - 1, end, end + 1]),
        );
        cuts.push(whole.len() as u64 - 1);
        for cut in cuts {
            std::fs::write(&cut_path, &whole[..cut as usize]).unwrap();
            let readable = checkpoints.iter().rev().find(|&&(end, _)| end <= cut);
            match readable {
                None => {
                    let error = read_faults(&cut_path).unwrap_err();
                    assert!(error.to_string().contains("cut.parquet"), "{error}");
                }
                Some(&(end, rows)) => {
                    let (faults, meta) =
                        read_faults(&cut_path).unwrap_or_else(|e| panic!("cut at {cut}: {e:?}"));
                    assert_eq!(faults.len(), rows as usize, "cut at {cut}, {checkpoints:?}");
                    assert!(faults == expected[..rows as usize], "cut at {cut}");
                    assert!(meta.contains(&metadata[0]), "cut at {cut}: {meta:?}");
                    assert_eq!(
                        completeness(&cut_path).unwrap(),
                        Completeness::Recovered {
                            rows,
                            lost_bytes: cut - end
                        }
                    );
                }
            }
        }
    }

    /// A changed byte inside any column chunk of any table is an error naming the file and
    /// the column, not a different answer.
    #[test]
    fn changed_bytes_are_detected() {
        let dir = tempfile::tempdir().unwrap();
        let faults_path = dir.path().join("f.parquet");
        let mut writer = FaultWriter::create(&faults_path, &[]).unwrap();
        for i in 0..70_000 {
            writer.push(fault(i)).unwrap();
        }
        writer.finish().unwrap();
        let stacks_path = dir.path().join("s.parquet");
        let mut writer = StackWriter::create(&stacks_path).unwrap();
        for id in 0..100 {
            writer
                .push(Stack {
                    end: crate::StackEnd::Unknown,
                    id,
                    generation: 0,
                    frames: [u64::from(id), 2, 3].map(CodeAddr::new).to_vec(),
                })
                .unwrap();
        }
        writer.finish().unwrap();
        let maps_path = dir.path().join("m.parquet");
        let mut writer = MappingWriter::create(&maps_path).unwrap();
        for i in 0..50 {
            writer
                .push(Mapping {
                    start: VirtAddr::new(i * 0x1000),
                    end: VirtAddr::new(i * 0x1000 + 0x1000),
                    path: format!("/lib/{i}.so"),
                    ..Mapping::default()
                })
                .unwrap();
        }
        writer.finish().unwrap();

        let read_all = |path: &Path| -> Result<(), Error> {
            match path.file_name().and_then(|n| n.to_str()) {
                Some("f.parquet") => read_faults(path).map(drop),
                Some("s.parquet") => read_stacks(path).map(drop),
                _ => read_mappings(path).map(drop),
            }
        };
        for path in [&faults_path, &stacks_path, &maps_path] {
            let original = std::fs::read(path).unwrap();
            let table = TableReader::open(path).unwrap();
            assert!(table.crcs.is_some());
            let mut chunks = 0;
            for group in table.metadata.row_groups() {
                for column in group.columns() {
                    let (start, len) = column.byte_range();
                    let mut damaged = original.clone();
                    // The middle of the chunk: inside a data page.
                    damaged[(start + len / 2) as usize] ^= 0x5a;
                    std::fs::write(path, &damaged).unwrap();
                    let error = read_all(path).unwrap_err().to_string();
                    assert!(
                        error.contains(&path.display().to_string())
                            && error.contains("damaged")
                            && error.contains(&format!("`{}`", column.column_path().string())),
                        "{error}"
                    );
                    chunks += 1;
                }
            }
            assert!(chunks >= 5, "{}: {chunks} chunks", path.display());
            std::fs::write(path, &original).unwrap();
            read_all(path).unwrap();
        }
    }

    /// Sequential faults compress to a few bytes each.
    #[test]
    fn faults_are_compact() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f.parquet");
        let mut writer = FaultWriter::create(&path, &[]).unwrap();
        for i in 0..100_000 {
            writer.push(fault(i)).unwrap();
        }
        writer.finish().unwrap();
        let bytes = std::fs::metadata(&path).unwrap().len();
        assert!(bytes < 100_000 * 8, "{bytes} bytes for 100000 faults");
    }
}
