//! The checkpointing writer every table goes through: rows buffered and written a row group at
//! a time, each row group followed on demand by a checkpoint footer, every column chunk
//! checksummed.

use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use parquet::basic::{Compression, Encoding, Type as PhysicalType};
use parquet::column::writer::{
    ColumnCloseResult, ColumnWriter, get_column_writer, get_typed_column_writer_mut,
};
use parquet::data_type::{BoolType, ByteArray, ByteArrayType, DataType, Int32Type, Int64Type};
use parquet::file::metadata::{
    FileMetaData, KeyValue, ParquetMetaData, ParquetMetaDataWriter, RowGroupMetaData,
};
use parquet::file::properties::{EnabledStatistics, WriterProperties, WriterPropertiesPtr};
use parquet::file::writer::{
    SerializedFileWriter, SerializedPageWriter, SerializedRowGroupWriter, TrackedWrite,
};
use parquet::schema::parser::parse_message_type;
use parquet::schema::types::{ColumnDescPtr, ColumnPath, SchemaDescriptor};

use super::delta::DeltaColumn;

use super::{FORMAT_VERSION, Origin, ROW_GROUP};
use crate::{Error, files, keys};

/// A kind of row that a table holds: its schema and how a batch of rows fills its columns.
pub trait TableRow: Sized {
    /// The Parquet schema of the table.
    const SCHEMA: &'static str;
    /// Columns written with delta encoding instead of a dictionary.
    const DELTA_COLUMNS: &'static [&'static str];
    /// Columns written without statistics (their minimum and maximum, per page and per
    /// chunk): those no query narrows by, whose statistics would only cost their writing.
    const UNSUMMARIZED_COLUMNS: &'static [&'static str] = &[];
    /// Rows buffered before they are written as a row group.
    const ROW_GROUP: usize = ROW_GROUP;

    /// Fills one row group's columns in schema order; `first` is the position in the file of
    /// the first of `rows`.
    fn write_columns(
        columns: &mut Columns<'_, '_>,
        origin: &Origin,
        first: u64,
        rows: &[Self],
    ) -> parquet::errors::Result<()>;
}

/// Writes a table of `R` rows: they are buffered and written a row group at a time, and each
/// [`checkpoint`](Self::checkpoint) makes every row pushed so far readable should the writer
/// never finish.
pub struct TableWriter<R> {
    pub(super) table: CheckpointedFile,
    origin: Origin,
    pub(super) batch: Vec<R>,
    /// Rows written out.
    pub(super) rows: u64,
}

impl<R: TableRow> TableWriter<R> {
    /// Creates the file, with the pid of its name and no recording id (see [`Origin`]).
    pub fn create(path: &Path) -> Result<Self, Error> {
        Self::create_for(path, Origin::from_path(path))
    }

    /// Creates the file of the process and recording `origin`.
    pub fn create_for(path: &Path, origin: Origin) -> Result<Self, Error> {
        Self::with_footer(path, origin, &[])
    }

    /// Creates the file of `origin`, with `metadata` in its footer as key-value pairs.
    pub(super) fn with_footer(
        path: &Path,
        origin: Origin,
        metadata: &[(String, String)],
    ) -> Result<Self, Error> {
        let table = CheckpointedFile::create(
            path,
            R::SCHEMA,
            R::DELTA_COLUMNS,
            R::UNSUMMARIZED_COLUMNS,
            metadata,
        )?;
        Ok(TableWriter {
            table,
            origin,
            batch: Vec::with_capacity(4096),
            rows: 0,
        })
    }

    /// Appends a row; writes a row group when the batch is full.
    pub fn push(&mut self, row: R) -> Result<(), Error> {
        self.batch.push(row);
        if self.batch.len() >= R::ROW_GROUP {
            self.flush()?;
        }
        Ok(())
    }

    /// An encoder of this table's row groups for another thread.
    pub fn group_encoder(&self) -> GroupEncoder<R> {
        GroupEncoder {
            schema: self.table.schema.clone(),
            props: self.table.props.clone(),
            origin: self.origin.clone(),
            scratch: Scratch::default(),
            path: self.table.path.clone(),
            rows: std::marker::PhantomData,
        }
    }

    /// Appends a row group encoded by [`group_encoder`](Self::group_encoder), after the rows
    /// pushed so far (written first, as a row group of their own).
    pub fn push_encoded(&mut self, group: EncodedGroup) -> Result<(), Error> {
        self.flush()?;
        let rows = group.rows;
        self.table.encoded_group(group)?;
        self.rows += rows;
        Ok(())
    }

    /// Appends `rows` as [`push`](Self::push) does one by one; a whole row group, given
    /// when none is buffered, is written without copying it.
    pub fn push_all(&mut self, rows: Vec<R>) -> Result<(), Error> {
        if self.batch.is_empty() && rows.len() == R::ROW_GROUP {
            let (origin, first) = (&self.origin, self.rows);
            self.table
                .row_group(|c| R::write_columns(c, origin, first, &rows))?;
            self.rows += rows.len() as u64;
            return Ok(());
        }
        for row in rows {
            self.push(row)?;
        }
        Ok(())
    }

    /// Writes every row pushed so far and a checkpoint: they stay readable should the writer
    /// never finish.
    pub fn checkpoint(&mut self) -> Result<(), Error> {
        self.flush()?;
        self.table.checkpoint()
    }

    /// Rows pushed so far.
    pub fn rows(&self) -> u64 {
        self.rows + self.batch.len() as u64
    }

    /// Writes what is buffered and the footer.
    pub fn finish(mut self) -> Result<(), Error> {
        self.flush()?;
        self.table.finish()
    }

    /// Writes every buffered row, a row group of at most [`ROW_GROUP`] rows at a time.
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
        let (batch, origin, first) = (&self.batch[..count], &self.origin, self.rows);
        self.table
            .row_group(|c| R::write_columns(c, origin, first, batch))?;
        self.rows += count as u64;
        self.batch.drain(..count);
        Ok(())
    }
}

/// A Parquet file being written, one row group per flushed batch, with checkpoints.
pub(crate) struct CheckpointedFile {
    path: PathBuf,
    inner: SerializedFileWriter<Sink>,
    schema: Arc<SchemaDescriptor>,
    props: Arc<WriterProperties>,
    /// The footer's key-value pairs, for the checkpoints.
    footer: Vec<KeyValue>,
    /// Keys set after the file was created ([`CheckpointedFile::set_footer_value`]): the final
    /// footer gets their last value.
    late_keys: Vec<String>,
    /// CRC-32 of every column chunk written, row group by row group.
    crcs: Vec<u32>,
    /// Row groups described by a checkpoint.
    checkpointed_groups: usize,
    /// Where the last checkpoint ends (0: none yet).
    last_checkpoint: u64,
    scratch: Scratch,
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

impl CheckpointedFile {
    pub(crate) fn create(
        path: &Path,
        schema: &str,
        delta_columns: &[&str],
        unsummarized_columns: &[&str],
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
        // One value in every row: its statistics would only repeat it, at a comparison a row.
        props = props.set_column_statistics_enabled(
            ColumnPath::from("recording"),
            parquet::file::properties::EnabledStatistics::None,
        );
        for column in unsummarized_columns {
            props = props.set_column_statistics_enabled(
                ColumnPath::from(*column),
                parquet::file::properties::EnabledStatistics::None,
            );
        }
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
        let props = Arc::new(props.build());
        let inner =
            SerializedFileWriter::new(sink, schema, props.clone()).map_err(Error::parquet(path))?;
        let mut table = CheckpointedFile {
            path: path.to_owned(),
            inner,
            schema: descriptor,
            props,
            footer,
            late_keys: Vec::new(),
            crcs: Vec::new(),
            checkpointed_groups: 0,
            last_checkpoint: 0,
            scratch: Scratch::default(),
        };
        // A first checkpoint at once: a file that exists is readable, if empty, and carries
        // its metadata (the faults file's session) whatever happens next.
        table.checkpoint()?;
        Ok(table)
    }

    /// Writes one row group; `write_columns` fills its columns in schema order.
    pub(crate) fn row_group(
        &mut self,
        write_columns: impl FnOnce(&mut Columns<'_, '_>) -> parquet::errors::Result<()>,
    ) -> Result<(), Error> {
        let scratch = &mut self.scratch;
        let (schema, props) = (&self.schema, &self.props);
        Self::group_with(&mut self.inner, &self.path, |group| {
            write_columns(&mut Columns {
                target: Target::Group {
                    group,
                    schema,
                    props,
                    next: 0,
                },
                scratch,
            })
        })?;
        self.checksum_last_group()
    }

    /// Appends a row group whose columns were encoded apart ([`GroupEncoder`]).
    fn encoded_group(&mut self, group: EncodedGroup) -> Result<(), Error> {
        Self::group_with(&mut self.inner, &self.path, |writer| {
            for (bytes, close) in group.columns {
                writer.append_column(&bytes, close)?;
            }
            Ok(())
        })?;
        self.checksum_last_group()
    }

    /// Writes a row group whose columns `fill` gives.
    fn group_with(
        inner: &mut SerializedFileWriter<Sink>,
        path: &Path,
        fill: impl FnOnce(&mut SerializedRowGroupWriter<'_, Sink>) -> parquet::errors::Result<()>,
    ) -> Result<(), Error> {
        let result = (|| {
            let mut group = inner.next_row_group()?;
            fill(&mut group)?;
            group.close()?;
            inner.flush()?;
            Ok(())
        })();
        result.map_err(Error::parquet(path))
    }

    /// Keeps the checksums of the columns of the row group just written.
    fn checksum_last_group(&mut self) -> Result<(), Error> {
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
    pub(crate) fn set_footer_value(&mut self, key: &str, value: String) {
        match self.footer.iter_mut().find(|kv| kv.key == key) {
            Some(kv) => kv.value = Some(value),
            None => self.footer.push(KeyValue::new(key.to_owned(), value)),
        }
        if !self.late_keys.iter().any(|k| k == key) {
            self.late_keys.push(key.to_owned());
        }
    }

    pub(crate) fn finish(mut self) -> Result<(), Error> {
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
pub struct Columns<'g, 'f> {
    target: Target<'g, 'f>,
    scratch: &'g mut Scratch,
}

/// Where [`Columns`] go.
enum Target<'g, 'f> {
    /// The row group being written, and the index of its next column.
    Group {
        group: &'g mut SerializedRowGroupWriter<'f, Sink>,
        schema: &'g SchemaDescriptor,
        props: &'g Arc<WriterProperties>,
        next: usize,
    },
    /// Buffers of their own, appended to the file later (another thread encodes them).
    Apart {
        schema: &'g SchemaDescriptor,
        props: &'g Arc<WriterProperties>,
        columns: &'g mut Vec<EncodedColumn>,
    },
}

/// A row group's columns encoded apart from the file ([`GroupEncoder`]), to be appended in
/// order ([`TableWriter::push_encoded`]).
pub struct EncodedGroup {
    rows: u64,
    columns: Vec<EncodedColumn>,
}

/// Encodes row groups of a table on any thread: several encode at once, the table's writer
/// appends their bytes in order.
pub struct GroupEncoder<R> {
    schema: Arc<SchemaDescriptor>,
    props: Arc<WriterProperties>,
    origin: Origin,
    scratch: Scratch,
    path: PathBuf,
    rows: std::marker::PhantomData<fn(R)>,
}

impl<R: TableRow> GroupEncoder<R> {
    /// Encodes `rows` as a row group whose first row is the file's `first`.
    pub fn encode(&mut self, first: u64, rows: &[R]) -> Result<EncodedGroup, Error> {
        let mut columns = Vec::with_capacity(self.schema.num_columns());
        let mut c = Columns {
            target: Target::Apart {
                schema: &self.schema,
                props: &self.props,
                columns: &mut columns,
            },
            scratch: &mut self.scratch,
        };
        R::write_columns(&mut c, &self.origin, first, rows).map_err(Error::parquet(&self.path))?;
        Ok(EncodedGroup {
            rows: rows.len() as u64,
            columns,
        })
    }
}

/// Buffers a table's row groups fill again and again: a fresh one per column and row group
/// cost as much as encoding it (allocation, page faults, a reference count per row of the
/// recording column).
#[derive(Default)]
pub(crate) struct Scratch {
    i64s: Vec<i64>,
    i32s: Vec<i32>,
    /// The values of several columns at once ([`Columns::int_columns`]), by column.
    slice: Vec<i64>,
    /// A slice of 32-bit values converted from `slice`.
    narrow_slice: Vec<i32>,
    /// The `recording` column's values, all `recording_of`, as many as the largest row group.
    recording: Vec<ByteArray>,
    recording_of: String,
    /// The `recording` and `pid` columns of a row group of `.1` rows of `.0` as encoded apart
    /// from the file: the same bytes in every row group of that size (the file's offsets
    /// are set when a chunk is appended), so encoded once, not once a row group.
    constant: Option<(Origin, usize, Vec<EncodedColumn>)>,
    /// By column, the last chunk encoded apart that held one value in every row: (column,
    /// value, rows, chunk). A thread's calls (`tid`) and the fields most calls leave at 0
    /// (`old_addr`, `detail`) repeat the same chunk row group after row group, and its bytes
    /// depend on nothing else, so it is encoded once ([`Columns::int_columns`]).
    repeated: Vec<(usize, i64, usize, EncodedColumn)>,
}

/// A column chunk encoded apart from the file, and what appending it needs.
type EncodedColumn = (bytes::Bytes, ColumnCloseResult);

/// Rows turned into column values at once by [`Columns::int_columns`]: a multiple of the
/// column writers' mini-batch (1,024 values), so that pages end where they would were the
/// row group's columns written whole, and small enough that a slice of eight columns
/// (512 KiB) stays in the cache while it is encoded.
const SLICE: usize = 8 * 1024;

/// Where each column of a slice starts in [`Columns::int_columns`]'s buffer: a cache line
/// past the slice, so that a row's values do not all fall in one set of the cache (at 64
/// KiB apart they did, and their stores were a tenth of converting an allocation log).
const COLUMN_STRIDE: usize = SLICE + 8;

fn more_columns() -> parquet::errors::ParquetError {
    parquet::errors::ParquetError::General("more columns than the schema".into())
}

/// The writer of one integer column of [`Columns::int_columns`]: the crate's column writer,
/// or, for a delta-encoded column without statistics compressed with Snappy, the
/// encoder of [`super::delta`], which lays out the same encoding in a fraction of the time.
enum IntWriter<'a> {
    Crate(Box<ColumnWriter<'a>>),
    Delta(Box<DeltaColumn>),
}

/// What an [`IntWriter`] leaves: the crate's close result (its bytes are in the sink), or
/// the whole chunk.
enum Closed {
    Crate(ColumnCloseResult),
    Delta(EncodedColumn),
}

/// Whether column `descr` is encoded by [`DeltaColumn`]: a required integer column in
/// delta encoding, compressed with Snappy, without statistics (which the crate's writer
/// keeps for a page index).
fn encoded_by_hand(descr: &ColumnDescPtr, props: &WriterProperties) -> bool {
    let path = descr.path();
    props.encoding(path) == Some(Encoding::DELTA_BINARY_PACKED)
        && !props.dictionary_enabled(path)
        && props.statistics_enabled(path) == EnabledStatistics::None
        && props.compression(path) == Compression::SNAPPY
        && descr.max_def_level() == 0
        && descr.max_rep_level() == 0
        && matches!(
            descr.physical_type(),
            PhysicalType::INT32 | PhysicalType::INT64
        )
}

impl<'a> IntWriter<'a> {
    fn new(
        descr: ColumnDescPtr,
        props: &WriterPropertiesPtr,
        sink: &'a mut TrackedWrite<Vec<u8>>,
    ) -> Self {
        if encoded_by_hand(&descr, props) {
            IntWriter::Delta(Box::new(DeltaColumn::new(&descr)))
        } else {
            let pages = SerializedPageWriter::new(sink);
            IntWriter::Crate(Box::new(get_column_writer(
                descr,
                Arc::clone(props),
                Box::new(pages),
            )))
        }
    }

    fn write(&mut self, narrow: &mut Vec<i32>, values: &[i64]) -> parquet::errors::Result<()> {
        match self {
            IntWriter::Crate(writer) => write_ints(writer, narrow, values),
            IntWriter::Delta(column) => {
                column.extend(values);
                Ok(())
            }
        }
    }

    /// Writes `rows` rows of `value`, [`SLICE`] at a time (the pages end where they would
    /// have).
    fn write_repeated(
        &mut self,
        narrow: &mut Vec<i32>,
        value: i64,
        rows: usize,
    ) -> parquet::errors::Result<()> {
        let values = vec![value; SLICE.min(rows)];
        let mut left = rows;
        while left > 0 {
            let n = left.min(SLICE);
            self.write(narrow, &values[..n])?;
            left -= n;
        }
        Ok(())
    }

    fn close(self, descr: ColumnDescPtr) -> parquet::errors::Result<Closed> {
        Ok(match self {
            IntWriter::Crate(writer) => Closed::Crate(writer.close()?),
            IntWriter::Delta(column) => Closed::Delta(column.finish(descr)?),
        })
    }
}

/// Writes `values` into an integer column, as its type says (32-bit values converted in
/// `narrow`).
fn write_ints(
    writer: &mut ColumnWriter<'_>,
    narrow: &mut Vec<i32>,
    values: &[i64],
) -> parquet::errors::Result<()> {
    match writer {
        ColumnWriter::Int64ColumnWriter(writer) => {
            writer.write_batch(values, None, None)?;
        }
        ColumnWriter::Int32ColumnWriter(writer) => {
            narrow.clear();
            narrow.extend(values.iter().map(|&v| v as i32));
            writer.write_batch(narrow, None, None)?;
        }
        _ => {
            return Err(parquet::errors::ParquetError::General(
                "an integer column expected".into(),
            ));
        }
    }
    Ok(())
}

/// Writes the next column of `target`.
fn write_column<T: DataType>(
    target: &mut Target<'_, '_>,
    values: &[T::T],
    def: Option<&[i16]>,
    rep: Option<&[i16]>,
) -> parquet::errors::Result<()> {
    let more = || parquet::errors::ParquetError::General("more columns than the schema".into());
    match target {
        Target::Group { group, next, .. } => {
            let mut column = group.next_column()?.ok_or_else(more)?;
            column.typed::<T>().write_batch(values, def, rep)?;
            *next += 1;
            column.close()
        }
        Target::Apart {
            schema,
            props,
            columns,
        } => {
            if columns.len() >= schema.num_columns() {
                return Err(more());
            }
            let descr = schema.column(columns.len());
            let mut buffer = TrackedWrite::new(Vec::new());
            let close = {
                let pages = SerializedPageWriter::new(&mut buffer);
                let mut writer = get_column_writer(descr, Arc::clone(props), Box::new(pages));
                get_typed_column_writer_mut::<T>(&mut writer).write_batch(values, def, rep)?;
                writer.close()?
            };
            columns.push((bytes::Bytes::from(buffer.into_inner()?), close));
            Ok(())
        }
    }
}

impl Columns<'_, '_> {
    pub(crate) fn write<T: DataType>(
        &mut self,
        values: &[T::T],
        def: Option<&[i16]>,
        rep: Option<&[i16]>,
    ) -> parquet::errors::Result<()> {
        write_column::<T>(&mut self.target, values, def, rep)
    }

    pub(crate) fn i64(&mut self, values: impl Iterator<Item = u64>) -> parquet::errors::Result<()> {
        let buffer = &mut self.scratch.i64s;
        buffer.clear();
        buffer.extend(values.map(|v| v as i64));
        write_column::<Int64Type>(&mut self.target, buffer, None, None)
    }

    pub(crate) fn i32(&mut self, values: impl Iterator<Item = u32>) -> parquet::errors::Result<()> {
        let buffer = &mut self.scratch.i32s;
        buffer.clear();
        buffer.extend(values.map(|v| v as i32));
        write_column::<Int32Type>(&mut self.target, buffer, None, None)
    }

    /// The next `N` columns, integers (64- or 32-bit, as the schema says), of `rows`:
    /// `fill` gives a row's values in column order.
    ///
    /// Encoded apart, the rows are turned into values [`SLICE`] rows at a time and each
    /// slice encoded while it is in the cache (a row group of events is larger than the
    /// cache: filling whole columns, then reading each again to encode it, went to memory
    /// twice). A column that holds one value in every row (a thread's calls in `tid`, the
    /// fields most calls leave at 0) is held back while it does, and takes the chunk last
    /// encoded for that value and row count if there is one: the same bytes, not encoded
    /// again.
    pub(crate) fn int_columns<R, const N: usize>(
        &mut self,
        rows: &[R],
        fill: impl Fn(&R) -> [i64; N],
    ) -> parquet::errors::Result<()> {
        let Target::Apart {
            schema,
            props,
            columns,
        } = &mut self.target
        else {
            return self.int_columns_whole(rows, fill);
        };
        let first_column = columns.len();
        if first_column + N > schema.num_columns() {
            return Err(more_columns());
        }
        let scratch = &mut *self.scratch;
        let mut sinks: Vec<TrackedWrite<Vec<u8>>> =
            (0..N).map(|_| TrackedWrite::new(Vec::new())).collect();
        let mut writers: Vec<IntWriter<'_>> = sinks
            .iter_mut()
            .enumerate()
            .map(|(k, sink)| IntWriter::new(schema.column(first_column + k), props, sink))
            .collect();
        // By column, the value of every row so far while there is one (those rows not
        // written yet).
        let mut held: [Option<i64>; N] = match rows.first() {
            Some(row) => fill(row).map(Some),
            None => [None; N],
        };
        let values = &mut scratch.slice;
        values.clear();
        values.resize(N * COLUMN_STRIDE, 0);
        let mut done = 0;
        for slice in rows.chunks(SLICE) {
            for (j, row) in slice.iter().enumerate() {
                for (k, value) in fill(row).into_iter().enumerate() {
                    values[k * COLUMN_STRIDE + j] = value;
                }
            }
            for (k, writer) in writers.iter_mut().enumerate() {
                let column = &values[k * COLUMN_STRIDE..k * COLUMN_STRIDE + slice.len()];
                if let Some(value) = held[k] {
                    if column.iter().all(|&v| v == value) {
                        continue;
                    }
                    held[k] = None;
                    writer.write_repeated(&mut scratch.narrow_slice, value, done)?;
                }
                writer.write(&mut scratch.narrow_slice, column)?;
            }
            done += slice.len();
        }
        let mut encoded: Vec<Option<EncodedColumn>> = vec![None; N];
        for (k, writer) in writers.iter_mut().enumerate() {
            let Some(value) = held[k] else {
                continue;
            };
            let key = (first_column + k, value, rows.len());
            match scratch
                .repeated
                .iter()
                .find(|&&(c, v, n, _)| (c, v, n) == key)
            {
                Some((.., chunk)) => encoded[k] = Some(chunk.clone()),
                None => writer.write_repeated(&mut scratch.narrow_slice, value, rows.len())?,
            }
        }
        let mut closed = Vec::with_capacity(N);
        for (k, writer) in writers.into_iter().enumerate() {
            // A column taken from the cache drops its writer unused.
            closed.push(match encoded[k] {
                Some(_) => None,
                None => Some(writer.close(schema.column(first_column + k))?),
            });
        }
        for (k, (sink, close)) in sinks.into_iter().zip(closed).enumerate() {
            let chunk = match (encoded[k].take(), close) {
                (Some(chunk), _) => chunk,
                (None, Some(Closed::Crate(close))) => {
                    (bytes::Bytes::from(sink.into_inner()?), close)
                }
                (None, Some(Closed::Delta(chunk))) => chunk,
                (None, None) => unreachable!("a column is either cached or closed"),
            };
            if let Some(value) = held[k] {
                let column = first_column + k;
                scratch.repeated.retain(|&(c, ..)| c != column);
                scratch
                    .repeated
                    .push((column, value, rows.len(), chunk.clone()));
            }
            columns.push(chunk);
        }
        Ok(())
    }

    /// [`int_columns`](Self::int_columns) into the row group being written: each column
    /// filled whole, then written.
    fn int_columns_whole<R, const N: usize>(
        &mut self,
        rows: &[R],
        fill: impl Fn(&R) -> [i64; N],
    ) -> parquet::errors::Result<()> {
        let mut values = std::mem::take(&mut self.scratch.slice);
        values.clear();
        values.resize(N * rows.len(), 0);
        for (j, row) in rows.iter().enumerate() {
            for (k, value) in fill(row).into_iter().enumerate() {
                values[k * rows.len() + j] = value;
            }
        }
        let written = (|| {
            for k in 0..N {
                let Target::Group {
                    group,
                    schema,
                    props,
                    next,
                } = &mut self.target
                else {
                    unreachable!("int_columns writes apart itself");
                };
                if *next >= schema.num_columns() {
                    return Err(more_columns());
                }
                let descr = schema.column(*next);
                *next += 1;
                let column_values = &values[k * rows.len()..(k + 1) * rows.len()];
                if encoded_by_hand(&descr, props) {
                    let mut column = DeltaColumn::new(&descr);
                    column.extend(column_values);
                    let (bytes, close) = column.finish(descr)?;
                    group.append_column(&bytes, close)?;
                    continue;
                }
                let mut column = group.next_column()?.ok_or_else(more_columns)?;
                write_ints(
                    column.untyped(),
                    &mut self.scratch.narrow_slice,
                    column_values,
                )?;
                column.close()?;
            }
            Ok(())
        })();
        self.scratch.slice = values;
        written
    }

    pub(crate) fn bools(
        &mut self,
        values: impl Iterator<Item = bool>,
    ) -> parquet::errors::Result<()> {
        let values: Vec<bool> = values.collect();
        self.write::<BoolType>(&values, None, None)
    }

    pub(crate) fn strings<'s>(
        &mut self,
        values: impl Iterator<Item = &'s str>,
    ) -> parquet::errors::Result<()> {
        let values: Vec<ByteArray> = values.map(ByteArray::from).collect();
        self.write::<ByteArrayType>(&values, None, None)
    }

    /// The `recording` and `pid` columns of `rows` rows from `origin`: the first two.
    pub(crate) fn origin(&mut self, origin: &Origin, rows: usize) -> parquet::errors::Result<()> {
        if let Target::Apart { columns, .. } = &mut self.target
            && columns.is_empty()
            && let Some((of, n, encoded)) = &self.scratch.constant
            && (of, *n) == (origin, rows)
        {
            columns.extend(encoded.iter().cloned());
            return Ok(());
        }
        self.recording(origin, rows)?;
        self.i32(std::iter::repeat_n(origin.pid, rows))?;
        if let Target::Apart { columns, .. } = &self.target
            && columns.len() == 2
        {
            self.scratch.constant = Some((origin.clone(), rows, columns.to_vec()));
        }
        Ok(())
    }

    /// The `recording` column alone: one shared buffer, not a copy per row, and the same
    /// values from one row group to the next.
    pub(crate) fn recording(
        &mut self,
        origin: &Origin,
        rows: usize,
    ) -> parquet::errors::Result<()> {
        let scratch = &mut *self.scratch;
        if scratch.recording.len() < rows || scratch.recording_of != origin.recording {
            let value = ByteArray::from(origin.recording.as_bytes().to_vec());
            scratch.recording = vec![value; rows];
            scratch.recording_of.clone_from(&origin.recording);
        }
        write_column::<ByteArrayType>(&mut self.target, &scratch.recording[..rows], None, None)
    }
}
