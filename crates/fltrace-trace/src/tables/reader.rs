//! The recovering reader every table goes through: a finished file, or the row groups of an
//! unfinished one up to its last checkpoint, each column chunk checked against its checksum;
//! rows are read a row group at a time through [`ReadRow`].

use std::cell::Cell;
use std::fs::File;
use std::marker::PhantomData;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use parquet::data_type::{ByteArrayType, DataType, Int32Type, Int64Type};
use parquet::file::metadata::{
    FileMetaData, KeyValue, ParquetMetaData, ParquetMetaDataReader, RowGroupMetaData,
};
use parquet::file::properties::{ReaderProperties, ReaderPropertiesPtr};
use parquet::file::reader::RowGroupReader;
use parquet::file::serialized_reader::SerializedRowGroupReader;

use super::{Metadata, Origin};
use crate::{Error, keys};

/// Columns renamed since layout 1: (name, old name).
const OLD_NAMES: [(&str, &str); 2] = [("start_addr", "start"), ("end_addr", "end")];

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

    /// The least and greatest value of the 64-bit column `name` from the footer's
    /// statistics of every row group: `Ok(None)` where a row group has none (a column
    /// written without them), `Some(None)` for a table without rows.
    fn i64_range_from_statistics(&self, name: &str) -> Result<Option<Option<(i64, i64)>>, Error> {
        let index = self.index(name)?;
        let mut range: Option<(i64, i64)> = None;
        for group in self.metadata.row_groups() {
            if group.num_rows() == 0 {
                continue;
            }
            let Some(parquet::file::statistics::Statistics::Int64(stats)) =
                group.column(index).statistics()
            else {
                return Ok(None);
            };
            let (Some(&min), Some(&max)) = (stats.min_opt(), stats.max_opt()) else {
                return Ok(None);
            };
            range = Some(range.map_or((min, max), |(a, b)| (a.min(min), b.max(max))));
        }
        Ok(Some(range))
    }

    /// Reads column `name` of every row group: its values and, for list columns, the levels.
    #[cfg(test)]
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

/// The values of a column and, for list columns, their levels.
pub(crate) struct ColumnData<T> {
    pub(crate) values: Vec<T>,
    pub(crate) def: Vec<i16>,
    pub(crate) rep: Vec<i16>,
}

/// A kind of row read back from a table, a row group at a time.
pub trait ReadRow: Sized {
    /// The rows of one row group.
    fn read_group(columns: &mut GroupColumns<'_>) -> Result<Vec<Self>, Error>;
}

/// The columns of one row group, read as fltrace's unsigned values: every column read must
/// have as many values as the first.
pub struct GroupColumns<'t> {
    table: &'t TableReader,
    /// `None`: no row group, only the schema, so that a table of another kind is refused
    /// even without rows.
    group: Option<usize>,
    rows: Option<usize>,
}

impl<'t> GroupColumns<'t> {
    fn new(table: &'t TableReader, group: Option<usize>) -> Self {
        GroupColumns {
            table,
            group,
            rows: None,
        }
    }

    /// An error in this row group.
    pub(crate) fn error(&self, message: impl std::fmt::Display) -> Error {
        Error::Format {
            path: self.table.path.clone(),
            message: match self.group {
                Some(group) => format!("row group {group}: {message}"),
                None => message.to_string(),
            },
        }
    }

    /// Whether the table has a column `name` (added in a later version of its layout).
    pub(crate) fn has_column(&self, name: &str) -> bool {
        self.table.has_column(name)
    }

    /// Column `name` with its levels, unchecked: a list column has a value per element.
    pub(crate) fn list<T: DataType>(&self, name: &str) -> Result<ColumnData<T::T>, Error>
    where
        T::T: Default + Clone,
    {
        match self.group {
            Some(group) => self.table.column_in::<T>(name, group..group + 1),
            None => self.table.index(name).map(|_| ColumnData {
                values: Vec::new(),
                def: Vec::new(),
                rep: Vec::new(),
            }),
        }
    }

    /// `values`, once checked to be as many as those of the columns read before.
    fn same_length<T>(&mut self, values: Vec<T>) -> Result<Vec<T>, Error> {
        match self.rows {
            Some(rows) if rows != values.len() => Err(self.error("columns of different lengths")),
            _ => {
                self.rows = Some(values.len());
                Ok(values)
            }
        }
    }

    /// Column `name` of 64-bit integers, as the unsigned values they were written from.
    pub(crate) fn u64s(&mut self, name: &str) -> Result<Vec<u64>, Error> {
        let values = self.list::<Int64Type>(name)?.values;
        self.same_length(values.into_iter().map(|v| v as u64).collect())
    }

    /// Column `name` of 32-bit integers, as the unsigned values they were written from.
    pub(crate) fn u32s(&mut self, name: &str) -> Result<Vec<u32>, Error> {
        let values = self.list::<Int32Type>(name)?.values;
        self.same_length(values.into_iter().map(|v| v as u32).collect())
    }

    /// Column `name` of strings; bytes that are not UTF-8 read as U+FFFD.
    pub(crate) fn strings(&mut self, name: &str) -> Result<Vec<String>, Error> {
        let values = self.list::<ByteArrayType>(name)?.values;
        let values = values
            .iter()
            .map(|v| String::from_utf8_lossy(v.data()).into_owned())
            .collect();
        self.same_length(values)
    }
}

/// The rows of a table, one row group (64K rows) at a time, so that memory stays bounded
/// however long the recording. Once the last row group is read, the rows must add up to the
/// footer's count.
pub struct RowGroups<R> {
    table: TableReader,
    next: usize,
    read: u64,
    counted: bool,
    rows: PhantomData<fn() -> R>,
}

impl<R: ReadRow> RowGroups<R> {
    /// Opens the table at `path`.
    pub fn open_table(path: &Path) -> Result<Self, Error> {
        let table = TableReader::open(path)?;
        // Every column the rows are read from is there: a table of another kind is refused.
        R::read_group(&mut GroupColumns::new(&table, None))?;
        Ok(RowGroups {
            table,
            next: 0,
            read: 0,
            counted: false,
            rows: PhantomData,
        })
    }

    /// Every row, row group after row group.
    pub(crate) fn read_all(self) -> Result<Vec<R>, Error> {
        // The footer's row count is not checked by the checksums of a salvaged or foreign
        // file: room is made for each row group's rows once they are decoded, never from it.
        let mut rows = Vec::new();
        for group in self {
            let group = group?;
            rows.reserve(group.len());
            rows.extend(group);
        }
        Ok(rows)
    }
}

impl<R> RowGroups<R> {
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

impl<R: ReadRow> Iterator for RowGroups<R> {
    type Item = Result<Vec<R>, Error>;

    fn next(&mut self) -> Option<Self::Item> {
        let group = self.next;
        if group >= self.table.num_row_groups() {
            if self.counted {
                return None;
            }
            self.counted = true;
            return self.table.check_len(self.read as usize).err().map(Err);
        }
        self.next += 1;
        let rows = R::read_group(&mut GroupColumns::new(&self.table, Some(group)));
        if let Ok(rows) = &rows {
            self.read += rows.len() as u64;
        }
        Some(rows)
    }
}

/// The recording and process of any fltrace table: its `recording` and `pid` columns, `None`
/// for a table of layout 1 (without them) or without rows. A table whose rows disagree is
/// refused: each file holds one process of one recording.
pub fn read_origin(path: &Path) -> Result<Option<Origin>, Error> {
    let table = TableReader::open(path)?;
    if !table.has_column("recording") {
        return Ok(None);
    }
    let mut origin: Option<Origin> = None;
    for group in 0..table.num_row_groups() {
        let mut columns = GroupColumns::new(&table, Some(group));
        let recordings = columns.strings("recording")?;
        let pids = columns.u32s("pid")?;
        for (recording, pid) in recordings.into_iter().zip(pids) {
            let row = Origin::new(recording, pid);
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

/// The first and last `time_ns` of the table at `path` (`None` without rows): from the
/// footer's statistics, else from the column itself.
pub fn time_range(path: &Path) -> Result<Option<(u64, u64)>, Error> {
    let table = TableReader::open(path)?;
    if let Some(range) = table.i64_range_from_statistics("time_ns")? {
        return Ok(range.map(|(a, b)| (a as u64, b as u64)));
    }
    let times = table.column_in::<Int64Type>("time_ns", 0..table.num_row_groups())?;
    Ok(times
        .values
        .iter()
        .map(|&t| t as u64)
        .fold(None, |range, t| {
            Some(range.map_or((t, t), |(a, b): (u64, u64)| (a.min(t), b.max(t))))
        }))
}

/// The rows of table `path`, from its footer (the last checkpoint's of an unfinished one).
pub fn table_rows(path: &Path) -> Result<u64, Error> {
    TableReader::open(path).map(|table| table.rows())
}

#[cfg(test)]
mod tests {
    use std::fs::File;

    use parquet::data_type::ByteArray;
    use parquet::file::properties::WriterProperties;
    use parquet::file::writer::SerializedFileWriter;
    use parquet::schema::parser::parse_message_type;

    use super::*;
    use crate::tables::tests::{fault, write_faults};
    use crate::tables::{
        FaultWriter, MappingWriter, StackWriter, read_faults, read_mappings, read_stacks,
    };
    use crate::{CodeAddr, Fault, FileOffset, Mapping, Stack, VirtAddr};

    /// Layout 3: no column carries an unsigned or timestamp annotation (Spark refuses the
    /// one and widens the other), and `fault_id`/`mapping_id` are each row's position in its
    /// file, across row groups.
    #[test]
    fn columns_are_plain_and_rows_numbered() {
        let dir = tempfile::tempdir().unwrap();
        let faults_path = dir.path().join("f.parquet");
        write_faults(&faults_path, 70_000);
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
        write_faults(&faults_path, 70_000);
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
}
