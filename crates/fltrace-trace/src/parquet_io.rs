//! Parquet writers and readers for the fault, stack and mapping tables.
//!
//! Written with the low-level column API (no Arrow) to keep the build small. Columns that grow
//! steadily (times, fault addresses) use delta encoding; columns with few distinct values
//! (instruction addresses, stack ids, threads, flags) use dictionaries. See `docs/FORMAT.md`.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use parquet::basic::{Compression, Encoding};
use parquet::data_type::{ByteArray, ByteArrayType, DataType, Int32Type, Int64Type};
use parquet::file::metadata::KeyValue;
use parquet::file::properties::WriterProperties;
use parquet::file::reader::{FileReader, SerializedFileReader};
use parquet::file::writer::{SerializedFileWriter, SerializedRowGroupWriter};
use parquet::schema::parser::parse_message_type;
use parquet::schema::types::ColumnPath;

use crate::{AccessRecord, AllocCall, AllocEvent, Error, Fault, FaultFlags, Mapping, Stack, files};

const FAULT_SCHEMA: &str = "message fault {
  required int64 time_ns (TIMESTAMP(NANOS,true));
  required int32 pid (INTEGER(32,false));
  required int32 tid (INTEGER(32,false));
  required int64 ip (INTEGER(64,false));
  required int64 addr (INTEGER(64,false));
  required int32 flags (INTEGER(8,false));
  required int32 stack_id (INTEGER(32,false));
}";

const ALLOC_SCHEMA: &str = "message alloc {
  required int64 time_ns (TIMESTAMP(NANOS,true));
  required int32 tid (INTEGER(32,false));
  required int32 call (INTEGER(8,false));
  required int64 addr (INTEGER(64,false));
  required int64 size (INTEGER(64,false));
  required int64 old_addr (INTEGER(64,false));
  required int64 detail (INTEGER(64,false));
  required int32 stack_id (INTEGER(32,false));
}";

const ACCESS_SCHEMA: &str = "message access {
  required int64 time_ns (TIMESTAMP(NANOS,true));
  required int32 tid (INTEGER(32,false));
  required int64 ip (INTEGER(64,false));
  required int64 addr (INTEGER(64,false));
  required int64 latency (INTEGER(64,false));
  required int64 data_src (INTEGER(64,false));
  required int32 stack_id (INTEGER(32,false));
}";

const STACK_SCHEMA: &str = "message stack {
  required int32 stack_id (INTEGER(32,false));
  required int32 generation (INTEGER(32,false));
  required group frames (LIST) {
    repeated group list {
      required int64 element (INTEGER(64,false));
    }
  }
}";

const MAPPING_SCHEMA: &str = "message mapping {
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

/// Key-value pairs of a Parquet footer.
pub type Metadata = Vec<(String, String)>;

/// Rows buffered before a row group is written: bounds the recorder's memory, and the time a
/// flush holds up the recorder (the kernel's ring buffer must not fill meanwhile).
const ROW_GROUP: usize = 1 << 16;

/// A Parquet file being written, one row group per flushed batch.
struct TableWriter {
    path: PathBuf,
    inner: SerializedFileWriter<File>,
}

impl TableWriter {
    fn create(
        path: &Path,
        schema: &str,
        delta_columns: &[&str],
        metadata: &[(String, String)],
    ) -> Result<Self, Error> {
        let schema = Arc::new(parse_message_type(schema).map_err(Error::parquet(path))?);
        let mut props = WriterProperties::builder()
            .set_compression(Compression::SNAPPY)
            .set_key_value_metadata(Some(
                metadata
                    .iter()
                    .map(|(k, v)| KeyValue::new(k.clone(), v.clone()))
                    .collect(),
            ));
        for column in delta_columns {
            let column = ColumnPath::from(*column);
            props = props
                .set_column_dictionary_enabled(column.clone(), false)
                .set_column_encoding(column, Encoding::DELTA_BINARY_PACKED);
        }
        let file = files::create(path)?;
        let inner = SerializedFileWriter::new(file, schema, Arc::new(props.build()))
            .map_err(Error::parquet(path))?;
        Ok(TableWriter {
            path: path.to_owned(),
            inner,
        })
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
            Ok(())
        })();
        result.map_err(Error::parquet(&self.path))
    }

    fn finish(mut self) -> Result<(), Error> {
        self.inner.finish().map_err(Error::parquet(&self.path))?;
        Ok(())
    }
}

/// Gives the columns of one row group in order.
struct Columns<'g, 'f>(&'g mut SerializedRowGroupWriter<'f, File>);

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

    fn strings<'s>(
        &mut self,
        values: impl Iterator<Item = &'s str>,
    ) -> parquet::errors::Result<()> {
        let values: Vec<ByteArray> = values.map(ByteArray::from).collect();
        self.write::<ByteArrayType>(&values, None, None)
    }
}

/// Rows buffered and written a row group at a time; `write_rows` fills one row group's columns
/// in schema order.
struct Batched<T> {
    table: TableWriter,
    batch: Vec<T>,
    /// Rows written out.
    rows: u64,
    write_rows: fn(&mut Columns<'_, '_>, &[T]) -> parquet::errors::Result<()>,
}

impl<T> Batched<T> {
    fn new(
        table: TableWriter,
        write_rows: fn(&mut Columns<'_, '_>, &[T]) -> parquet::errors::Result<()>,
    ) -> Self {
        Batched {
            table,
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

    fn flush(&mut self) -> Result<(), Error> {
        if self.batch.is_empty() {
            return Ok(());
        }
        let (batch, write_rows) = (&self.batch, self.write_rows);
        self.table.row_group(|c| write_rows(c, batch))?;
        self.rows += batch.len() as u64;
        self.batch.clear();
        Ok(())
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
    /// Creates the file; `metadata` goes into the Parquet footer as key-value pairs.
    pub fn create(path: &Path, metadata: &[(String, String)]) -> Result<Self, Error> {
        let table = TableWriter::create(path, FAULT_SCHEMA, &["time_ns", "addr"], metadata)?;
        Ok(FaultWriter(Batched::new(table, |c, batch| {
            c.i64(batch.iter().map(|f| f.time_ns))?;
            c.i32(batch.iter().map(|f| f.pid))?;
            c.i32(batch.iter().map(|f| f.tid))?;
            c.i64(batch.iter().map(|f| f.ip))?;
            c.i64(batch.iter().map(|f| f.addr))?;
            c.i32(batch.iter().map(|f| u32::from(f.flags.0)))?;
            c.i32(batch.iter().map(|f| f.stack_id))
        })))
    }

    /// Appends a fault; writes a row group when the batch is full.
    pub fn push(&mut self, fault: Fault) -> Result<(), Error> {
        self.0.push(fault)
    }

    /// The faults not yet written, for amending flags learnt after the fault (major faults).
    pub fn pending_mut(&mut self) -> &mut [Fault] {
        &mut self.0.batch
    }

    /// Rows already written out: `pending_mut()[i]` is row `flushed_rows() + i`.
    pub fn flushed_rows(&self) -> u64 {
        self.0.rows
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

/// Writes `fltrace-data-allocs-<pid>.parquet`.
pub struct AllocWriter(Batched<AllocEvent>);

impl AllocWriter {
    /// Creates the file.
    pub fn create(path: &Path) -> Result<Self, Error> {
        // Delta encoding everywhere: the columns are either steady (times, addresses) or
        // nearly constant from row to row (thread, call, size, stack), which it packs into a
        // few bits without the per-value hashing of a dictionary, the main cost of writing 8
        // million rows.
        let table = TableWriter::create(
            path,
            ALLOC_SCHEMA,
            &[
                "time_ns", "tid", "call", "addr", "size", "old_addr", "detail", "stack_id",
            ],
            &[],
        )?;
        Ok(AllocWriter(Batched::new(table, |c, batch| {
            c.i64(batch.iter().map(|e| e.time_ns))?;
            c.i32(batch.iter().map(|e| e.tid))?;
            c.i32(batch.iter().map(|e| u32::from(e.call as u8)))?;
            c.i64(batch.iter().map(|e| e.addr))?;
            c.i64(batch.iter().map(|e| e.size))?;
            c.i64(batch.iter().map(|e| e.old_addr))?;
            c.i64(batch.iter().map(|e| e.detail))?;
            c.i32(batch.iter().map(|e| e.stack_id))
        })))
    }

    /// Appends an event; writes a row group when the batch is full.
    pub fn push(&mut self, event: AllocEvent) -> Result<(), Error> {
        self.0.push(event)
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
    table.check_columns(ALLOC_SCHEMA)?;
    let mut events = Vec::with_capacity(table.rows() as usize);
    // Row group by row group: whole columns of 8 million rows would double the peak memory.
    for group in 0..table.inner.num_row_groups() {
        let groups = group..group + 1;
        let u64s = |i| -> Result<Vec<u64>, Error> {
            let values = table.column_in::<Int64Type>(i, groups.clone())?.values;
            Ok(values.into_iter().map(|v| v as u64).collect())
        };
        let u32s = |i| -> Result<Vec<u32>, Error> {
            let values = table.column_in::<Int32Type>(i, groups.clone())?.values;
            Ok(values.into_iter().map(|v| v as u32).collect())
        };
        let (time, tid, call, addr) = (u64s(0)?, u32s(1)?, u32s(2)?, u64s(3)?);
        let (size, old_addr, detail, stack_id) = (u64s(4)?, u64s(5)?, u64s(6)?, u32s(7)?);
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
        for i in 0..rows {
            let call = AllocCall::from_u8(call[i] as u8).ok_or_else(|| Error::Format {
                path: path.to_owned(),
                message: format!("row group {group}: unknown allocation call {}", call[i]),
            })?;
            events.push(AllocEvent {
                time_ns: time[i],
                tid: tid[i],
                call,
                addr: addr[i],
                size: size[i],
                old_addr: old_addr[i],
                detail: detail[i],
                stack_id: stack_id[i],
            });
        }
    }
    table.check_len(events.len())?;
    Ok(events)
}

/// Writes `fltrace-data-access-<pid>.parquet`.
pub struct AccessWriter(Batched<AccessRecord>);

impl AccessWriter {
    /// Creates the file.
    pub fn create(path: &Path) -> Result<Self, Error> {
        let table = TableWriter::create(path, ACCESS_SCHEMA, &["time_ns", "addr"], &[])?;
        Ok(AccessWriter(Batched::new(table, |c, batch| {
            c.i64(batch.iter().map(|r| r.time_ns))?;
            c.i32(batch.iter().map(|r| r.tid))?;
            c.i64(batch.iter().map(|r| r.ip))?;
            c.i64(batch.iter().map(|r| r.addr))?;
            c.i64(batch.iter().map(|r| r.latency))?;
            c.i64(batch.iter().map(|r| r.data_src))?;
            c.i32(batch.iter().map(|r| r.stack_id))
        })))
    }

    /// Appends a sample; writes a row group when the batch is full.
    pub fn push(&mut self, record: AccessRecord) -> Result<(), Error> {
        self.0.push(record)
    }

    /// Writes what is buffered and the footer.
    pub fn finish(self) -> Result<(), Error> {
        self.0.finish()
    }
}

/// Reads an access-sample file.
pub fn read_access(path: &Path) -> Result<Vec<AccessRecord>, Error> {
    let table = TableReader::open(path)?;
    table.check_columns(ACCESS_SCHEMA)?;
    let time = table.u64s(0)?;
    let tid = table.u32s(1)?;
    let ip = table.u64s(2)?;
    let addr = table.u64s(3)?;
    let latency = table.u64s(4)?;
    let data_src = table.u64s(5)?;
    let stack_id = table.u32s(6)?;
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
            ip: ip[i],
            addr: addr[i],
            latency: latency[i],
            data_src: data_src[i],
            stack_id: stack_id[i],
        })
        .collect())
}

/// Writes `fltrace-data-stacks-<pid>.parquet`.
pub struct StackWriter(Batched<Stack>);

impl StackWriter {
    /// Creates the file.
    pub fn create(path: &Path) -> Result<Self, Error> {
        let table = TableWriter::create(path, STACK_SCHEMA, &[], &[])?;
        Ok(StackWriter(Batched::new(table, |c, batch| {
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
                    values.push(*frame as i64);
                    def.push(1);
                    rep.push(i16::from(i > 0));
                }
            }
            c.write::<Int64Type>(&values, Some(&def), Some(&rep))
        })))
    }

    /// Appends a stack.
    pub fn push(&mut self, stack: Stack) -> Result<(), Error> {
        self.0.push(stack)
    }

    /// Writes what is buffered and the footer.
    pub fn finish(self) -> Result<(), Error> {
        self.0.finish()
    }
}

/// Writes `fltrace-data-mmaps-<pid>.parquet`.
pub struct MappingWriter {
    table: TableWriter,
    batch: Vec<Mapping>,
}

impl MappingWriter {
    /// Creates the file.
    pub fn create(path: &Path) -> Result<Self, Error> {
        Ok(MappingWriter {
            table: TableWriter::create(path, MAPPING_SCHEMA, &[], &[])?,
            batch: Vec::new(),
        })
    }

    /// Appends a mapping.
    pub fn push(&mut self, mapping: Mapping) {
        self.batch.push(mapping);
    }

    /// Writes the mappings and the footer.
    pub fn finish(mut self) -> Result<(), Error> {
        let batch = &self.batch;
        if !batch.is_empty() {
            self.table.row_group(|c| {
                c.i64(batch.iter().map(|m| m.time_ns))?;
                c.i32(batch.iter().map(|m| m.generation))?;
                c.i64(batch.iter().map(|m| m.start))?;
                c.i64(batch.iter().map(|m| m.end))?;
                c.i64(batch.iter().map(|m| m.pgoff))?;
                c.i32(batch.iter().map(|m| m.prot))?;
                c.i32(batch.iter().map(|m| m.flags))?;
                c.strings(batch.iter().map(|m| m.path.as_str()))?;
                c.strings(batch.iter().map(|m| m.build_id.as_str()))
            })?;
        }
        self.batch.clear();
        self.table.finish()
    }
}

/// A Parquet file opened for reading whole columns.
pub(crate) struct TableReader {
    path: PathBuf,
    inner: SerializedFileReader<File>,
}

impl TableReader {
    pub(crate) fn open(path: &Path) -> Result<Self, Error> {
        let file = File::open(path).map_err(Error::io(path))?;
        let inner = SerializedFileReader::new(file).map_err(Error::parquet(path))?;
        Ok(TableReader {
            path: path.to_owned(),
            inner,
        })
    }

    /// The footer's key-value metadata.
    pub(crate) fn metadata(&self) -> Vec<(String, String)> {
        let file = self.inner.metadata().file_metadata();
        file.key_value_metadata()
            .map(|kvs| {
                kvs.iter()
                    .map(|kv| (kv.key.clone(), kv.value.clone().unwrap_or_default()))
                    .collect()
            })
            .unwrap_or_default()
    }

    pub(crate) fn rows(&self) -> u64 {
        self.inner.metadata().file_metadata().num_rows() as u64
    }

    /// Reads column `index` of every row group: its values and, for list columns, the levels.
    fn column<T: DataType>(&self, index: usize) -> Result<ColumnData<T::T>, Error>
    where
        T::T: Default + Clone,
    {
        self.column_in::<T>(index, 0..self.inner.num_row_groups())
    }

    /// Column `index` of the row groups in `groups`.
    fn column_in<T: DataType>(
        &self,
        index: usize,
        groups: std::ops::Range<usize>,
    ) -> Result<ColumnData<T::T>, Error>
    where
        T::T: Default + Clone,
    {
        let mut data = ColumnData {
            values: Vec::new(),
            def: Vec::new(),
            rep: Vec::new(),
        };
        let result = (|| {
            for group in groups {
                let group = self.inner.get_row_group(group)?;
                let reader = group.get_column_reader(index)?;
                let mut reader = T::get_column_reader(reader).ok_or_else(|| {
                    parquet::errors::ParquetError::General(format!(
                        "column {index} has an unexpected type"
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
            }
            Ok(())
        })();
        result.map_err(Error::parquet(&self.path))?;
        Ok(data)
    }

    fn u64s(&self, index: usize) -> Result<Vec<u64>, Error> {
        Ok(self
            .column::<Int64Type>(index)?
            .values
            .into_iter()
            .map(|v| v as u64)
            .collect())
    }

    fn u32s(&self, index: usize) -> Result<Vec<u32>, Error> {
        Ok(self
            .column::<Int32Type>(index)?
            .values
            .into_iter()
            .map(|v| v as u32)
            .collect())
    }

    fn strings(&self, index: usize) -> Result<Vec<String>, Error> {
        let values = self.column::<ByteArrayType>(index)?.values;
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

    fn check_columns(&self, schema: &str) -> Result<(), Error> {
        let expected = parse_message_type(schema).map_err(Error::parquet(&self.path))?;
        let actual = self.inner.metadata().file_metadata().schema();
        if actual.get_fields().len() == expected.get_fields().len() {
            Ok(())
        } else {
            Err(Error::Format {
                path: self.path.clone(),
                message: "not an fltrace table of this kind (its columns differ)".into(),
            })
        }
    }
}

struct ColumnData<T> {
    values: Vec<T>,
    def: Vec<i16>,
    rep: Vec<i16>,
}

/// Reads a faults file: its rows and its footer metadata.
pub fn read_faults(path: &Path) -> Result<(Vec<Fault>, Metadata), Error> {
    let table = TableReader::open(path)?;
    table.check_columns(FAULT_SCHEMA)?;
    let faults = faults_in(&table, 0..table.inner.num_row_groups())?;
    table.check_len(faults.len())?;
    Ok((faults, table.metadata()))
}

/// Hands the faults of a faults file to `each` one row group at a time (64K rows), so that
/// memory stays bounded however long the recording.
pub fn for_each_fault_group(path: &Path, mut each: impl FnMut(&[Fault])) -> Result<(), Error> {
    let table = TableReader::open(path)?;
    table.check_columns(FAULT_SCHEMA)?;
    for group in 0..table.inner.num_row_groups() {
        each(&faults_in(&table, group..group + 1)?);
    }
    Ok(())
}

fn faults_in(table: &TableReader, groups: std::ops::Range<usize>) -> Result<Vec<Fault>, Error> {
    let u64s = |i| -> Result<Vec<u64>, Error> {
        Ok(table
            .column_in::<Int64Type>(i, groups.clone())?
            .values
            .into_iter()
            .map(|v| v as u64)
            .collect())
    };
    let u32s = |i| -> Result<Vec<u32>, Error> {
        Ok(table
            .column_in::<Int32Type>(i, groups.clone())?
            .values
            .into_iter()
            .map(|v| v as u32)
            .collect())
    };
    let (time, pid, tid, ip, addr, flags, stack) = (
        u64s(0)?,
        u32s(1)?,
        u32s(2)?,
        u64s(3)?,
        u64s(4)?,
        u32s(5)?,
        u32s(6)?,
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
            ip: ip[i],
            addr: addr[i],
            flags: FaultFlags(flags[i] as u8),
            stack_id: stack[i],
        })
        .collect())
}

/// Reads a stacks file.
pub fn read_stacks(path: &Path) -> Result<Vec<Stack>, Error> {
    let table = TableReader::open(path)?;
    table.check_columns(STACK_SCHEMA)?;
    let ids = table.u32s(0)?;
    let generations = table.u32s(1)?;
    table.check_len(ids.len())?;
    table.check_len(generations.len())?;
    let frames = table.column::<Int64Type>(2)?;
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
            stack.frames.push(*value as u64);
        }
    }
    table.check_len(stacks.len())?;
    Ok(stacks)
}

/// Reads a mappings file.
pub fn read_mappings(path: &Path) -> Result<Vec<Mapping>, Error> {
    let table = TableReader::open(path)?;
    table.check_columns(MAPPING_SCHEMA)?;
    let time = table.u64s(0)?;
    let generation = table.u32s(1)?;
    let start = table.u64s(2)?;
    let end = table.u64s(3)?;
    let pgoff = table.u64s(4)?;
    let prot = table.u32s(5)?;
    let flags = table.u32s(6)?;
    let path_col = table.strings(7)?;
    let build_id = table.strings(8)?;
    for len in [
        time.len(),
        start.len(),
        end.len(),
        pgoff.len(),
        path_col.len(),
        build_id.len(),
    ] {
        table.check_len(len)?;
    }
    Ok((0..time.len())
        .map(|i| Mapping {
            time_ns: time[i],
            generation: generation[i],
            start: start[i],
            end: end[i],
            pgoff: pgoff[i],
            prot: prot[i],
            flags: flags[i],
            path: path_col[i].clone(),
            build_id: build_id[i].clone(),
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fault(i: u64) -> Fault {
        Fault {
            time_ns: 1_700_000_000_000_000_000 + i * 1600,
            pid: 42,
            tid: 42 + (i % 3) as u32,
            ip: 0x5555_5555_1234 + (i % 2),
            addr: 0x7f00_0000_0000 + i * 4096 + 17,
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
        assert_eq!(meta, metadata);
        let mut streamed = Vec::new();
        for_each_fault_group(&faults_path, |group| streamed.extend_from_slice(group)).unwrap();
        assert_eq!(streamed, expected, "row group by row group, the same rows");

        let stacks_path = dir.path().join("s.parquet");
        let mut writer = StackWriter::create(&stacks_path).unwrap();
        let expected = vec![
            Stack {
                id: 0,
                generation: 0,
                frames: vec![1, 2, 3],
            },
            Stack {
                id: 1,
                generation: 0,
                frames: vec![],
            },
            Stack {
                id: 2,
                generation: 1,
                frames: vec![u64::MAX, 7],
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
            start: 0x1000,
            end: 0x3000,
            pgoff: 0x2000,
            prot: 5,
            flags: 2,
            path: "/lib/x.so".into(),
            build_id: "abcd".into(),
        };
        writer.push(mapping.clone());
        writer.finish().unwrap();
        assert_eq!(read_mappings(&maps_path).unwrap(), vec![mapping]);
    }

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
                ip: 0x40_1000 + i,
                addr: 0x7f00_0000_0000 + i * 64,
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
                addr: 0x7f00_0000_0000 + i * 48,
                size: if i == 5 { u64::MAX } else { i % 600 },
                old_addr: i.wrapping_mul(0x9e37_79b9_7f4a_7c15),
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

    /// A file of another table kind is refused with a format error, not misread.
    #[test]
    fn wrong_table_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s.parquet");
        StackWriter::create(&path).unwrap().finish().unwrap();
        assert!(matches!(read_faults(&path), Err(Error::Format { .. })));
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
