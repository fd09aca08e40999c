//! Integer column chunks in `DELTA_BINARY_PACKED`, encoded here for the columns that carry
//! no statistics: the layout the Parquet crate's encoder gives (blocks of 128 values in
//! four miniblocks of 32, one data page), in one pass over the values. Through the crate's
//! column writer each value was copied, checked and packed in five passes, a fifth of the
//! CPU time of converting an allocation log (issue 40).

use bytes::Bytes;
use parquet::basic::{Compression, Encoding, EncodingMask};
use parquet::column::page::{CompressedPage, Page, PageWriter};
use parquet::column::writer::ColumnCloseResult;
use parquet::errors::{ParquetError, Result};
use parquet::file::metadata::ColumnChunkMetaData;
use parquet::file::page_index::offset_index::{OffsetIndexMetaData, PageLocation};
use parquet::file::writer::{SerializedPageWriter, TrackedWrite};
use parquet::schema::types::ColumnDescPtr;

/// Values in a block.
const BLOCK: usize = 128;
/// Miniblocks in a block, each with its own bit width.
const MINIBLOCKS: usize = 4;
const MINIBLOCK: usize = BLOCK / MINIBLOCKS;

/// One column chunk being encoded.
pub(crate) struct DeltaColumn {
    /// An `INT32` column: its values are 32-bit, their differences packed modulo 2^32.
    int32: bool,
    /// The blocks encoded so far (the page's header comes once the count is known).
    blocks: Vec<u8>,
    /// The differences of the block being filled.
    deltas: [i64; BLOCK],
    in_block: usize,
    first: i64,
    last: i64,
    count: u64,
}

impl DeltaColumn {
    /// An encoder for column `descr` (`INT32` or `INT64`).
    pub(crate) fn new(descr: &ColumnDescPtr) -> Self {
        DeltaColumn {
            int32: descr.physical_type() == parquet::basic::Type::INT32,
            blocks: Vec::new(),
            deltas: [0; BLOCK],
            in_block: 0,
            first: 0,
            last: 0,
            count: 0,
        }
    }

    /// Appends `values` (those of an `INT32` column taken as `i32`, as they are written).
    pub(crate) fn extend(&mut self, values: &[i64]) {
        let mut values = values;
        if self.count == 0 {
            let Some((&first, rest)) = values.split_first() else {
                return;
            };
            self.first = if self.int32 {
                i64::from(first as i32)
            } else {
                first
            };
            self.last = self.first;
            self.count = 1;
            values = rest;
        }
        self.count += values.len() as u64;
        if self.int32 {
            self.extend_with::<true>(values);
        } else {
            self.extend_with::<false>(values);
        }
    }

    /// The differences of `values` into blocks, a block's worth at a time; the running
    /// state in locals (the compiler cannot keep fields in registers across the stores
    /// into `deltas`).
    #[inline(always)]
    fn extend_with<const INT32: bool>(&mut self, values: &[i64]) {
        let (mut last, mut n) = (self.last, self.in_block);
        let mut rest = values;
        while !rest.is_empty() {
            let take = (BLOCK - n).min(rest.len());
            let (chunk, tail) = rest.split_at(take);
            for (delta, &value) in self.deltas[n..n + take].iter_mut().zip(chunk) {
                // The difference of 32-bit values wraps in 32 bits, as decoders take it.
                (*delta, last) = if INT32 {
                    let value = value as i32;
                    (i64::from(value.wrapping_sub(last as i32)), i64::from(value))
                } else {
                    (value.wrapping_sub(last), value)
                };
            }
            n += take;
            rest = tail;
            if n == BLOCK {
                self.in_block = n;
                self.flush_block();
                n = 0;
            }
        }
        (self.last, self.in_block) = (last, n);
    }

    /// Encodes the block being filled: its smallest difference, the miniblocks' bit widths,
    /// then each miniblock that holds values, packed (the last one padded with zeros).
    fn flush_block(&mut self) {
        if self.int32 {
            self.flush_block_with::<true>();
        } else {
            self.flush_block_with::<false>();
        }
    }

    #[inline(always)]
    fn flush_block_with<const INT32: bool>(&mut self) {
        let n = self.in_block;
        let deltas = &self.deltas[..n];
        let min = deltas.iter().copied().min().unwrap_or(0);
        put_zigzag(&mut self.blocks, min);
        let widths_at = self.blocks.len();
        self.blocks.extend_from_slice(&[0; MINIBLOCKS]);
        for (m, chunk) in deltas.chunks(MINIBLOCK).enumerate() {
            let mut offsets = [0u64; MINIBLOCK];
            let mut any = 0u64;
            for (slot, &delta) in offsets.iter_mut().zip(chunk) {
                let offset = if INT32 {
                    u64::from((delta as i32).wrapping_sub(min as i32) as u32)
                } else {
                    delta.wrapping_sub(min) as u64
                };
                *slot = offset;
                any |= offset;
            }
            let width = u64::BITS - any.leading_zeros();
            self.blocks[widths_at + m] = width as u8;
            pack(&mut self.blocks, &offsets, width);
        }
        self.in_block = 0;
    }

    /// The chunk as one data page compressed with Snappy, and what appending it to a row
    /// group needs (as the crate's column writer gives it: no statistics, an offset index).
    pub(crate) fn finish(mut self, descr: ColumnDescPtr) -> Result<(Bytes, ColumnCloseResult)> {
        if self.in_block > 0 {
            self.flush_block();
        }
        let mut page = Vec::with_capacity(self.blocks.len() + 32);
        put_uleb(&mut page, BLOCK as u64);
        put_uleb(&mut page, MINIBLOCKS as u64);
        put_uleb(&mut page, self.count);
        put_zigzag(&mut page, self.first);
        page.extend_from_slice(&self.blocks);
        let compressed = snap::raw::Encoder::new()
            .compress_vec(&page)
            .map_err(|e| ParquetError::External(Box::new(e)))?;
        let num_values = u32::try_from(self.count)
            .map_err(|_| ParquetError::General("too many values for one page".into()))?;
        let mut sink = TrackedWrite::new(Vec::new());
        let spec = {
            let mut pages = SerializedPageWriter::new(&mut sink);
            let spec = pages.write_page(CompressedPage::new(
                Page::DataPage {
                    buf: Bytes::from(compressed),
                    num_values,
                    encoding: Encoding::DELTA_BINARY_PACKED,
                    def_level_encoding: Encoding::RLE,
                    rep_level_encoding: Encoding::RLE,
                    statistics: None,
                },
                page.len(),
            ))?;
            pages.close()?;
            spec
        };
        let bytes = Bytes::from(sink.into_inner()?);
        let metadata = ColumnChunkMetaData::builder(descr)
            .set_compression(Compression::SNAPPY)
            .set_encodings_mask(EncodingMask::new_from_encodings(
                [Encoding::RLE, Encoding::DELTA_BINARY_PACKED].iter(),
            ))
            .set_total_compressed_size(spec.compressed_size as i64)
            .set_total_uncompressed_size(spec.uncompressed_size as i64)
            .set_num_values(self.count as i64)
            .set_data_page_offset(0)
            .build()?;
        let offset_index = OffsetIndexMetaData {
            page_locations: vec![PageLocation {
                offset: 0,
                compressed_page_size: spec.compressed_size as i32,
                first_row_index: 0,
            }],
            unencoded_byte_array_data_bytes: None,
        };
        let close = ColumnCloseResult {
            bytes_written: bytes.len() as u64,
            rows_written: self.count,
            metadata,
            bloom_filter: None,
            column_index: None,
            offset_index: Some(offset_index),
        };
        Ok((bytes, close))
    }
}

/// Packs 32 values of `width` bits, least significant bit first: `4 * width` bytes.
fn pack(out: &mut Vec<u8>, values: &[u64; MINIBLOCK], width: u32) {
    if width == 0 {
        return;
    }
    // Room for the last word written whole, past the 4 * width bytes kept.
    let mut packed = [0u8; MINIBLOCK * 8 + 8];
    let mut at = 0;
    let (mut pending, mut bits) = (0u64, 0u32);
    for &value in values {
        pending |= value << bits;
        let filled = bits + width;
        if filled >= 64 {
            packed[at..at + 8].copy_from_slice(&pending.to_le_bytes());
            at += 8;
            // What of `value` did not fit: its high `filled - 64` bits.
            pending = if bits == 0 { 0 } else { value >> (64 - bits) };
            bits = filled - 64;
        } else {
            bits = filled;
        }
    }
    // 32 values of `width` bits end on a 32-bit boundary.
    packed[at..at + 8].copy_from_slice(&pending.to_le_bytes());
    out.extend_from_slice(&packed[..4 * width as usize]);
}

fn put_uleb(out: &mut Vec<u8>, mut value: u64) {
    while value >= 0x80 {
        out.push(value as u8 | 0x80);
        value >>= 7;
    }
    out.push(value as u8);
}

fn put_zigzag(out: &mut Vec<u8>, value: i64) {
    put_uleb(out, ((value << 1) ^ (value >> 63)) as u64);
}

#[cfg(test)]
mod tests {
    use super::*;
    use parquet::file::properties::WriterProperties;
    use parquet::file::reader::{FileReader, SerializedFileReader};
    use parquet::file::writer::SerializedFileWriter;
    use parquet::record::Field;
    use parquet::schema::parser::parse_message_type;
    use parquet::schema::types::SchemaDescriptor;
    use std::sync::Arc;

    /// Values through [`DeltaColumn`], a row group of one INT64 and one INT32 column, read
    /// back by the Parquet crate's own decoder.
    fn round_trip(longs: &[i64], ints: &[i32]) -> (Vec<i64>, Vec<i32>) {
        let schema = Arc::new(
            parse_message_type("message t { required int64 a; required int32 b; }").unwrap(),
        );
        let mut file = Vec::new();
        let descr = SchemaDescriptor::new(Arc::clone(&schema));
        let mut writer = SerializedFileWriter::new(
            &mut file,
            schema,
            Arc::new(WriterProperties::builder().build()),
        )
        .unwrap();
        let mut group = writer.next_row_group().unwrap();
        let mut a = DeltaColumn::new(&descr.column(0));
        // In pieces, as the table writer hands slices over.
        for piece in longs.chunks(100) {
            a.extend(piece);
        }
        let (bytes, close) = a.finish(descr.column(0)).unwrap();
        group.append_column(&bytes, close).unwrap();
        let mut b = DeltaColumn::new(&descr.column(1));
        b.extend(&ints.iter().map(|&v| i64::from(v)).collect::<Vec<_>>());
        let (bytes, close) = b.finish(descr.column(1)).unwrap();
        group.append_column(&bytes, close).unwrap();
        group.close().unwrap();
        writer.close().unwrap();
        let reader = SerializedFileReader::new(Bytes::from(file)).unwrap();
        let (mut got_a, mut got_b) = (Vec::new(), Vec::new());
        for row in reader.get_row_iter(None).unwrap() {
            let row = row.unwrap();
            let mut fields = row.get_column_iter();
            match (fields.next(), fields.next()) {
                (Some((_, Field::Long(a))), Some((_, Field::Int(b)))) => {
                    got_a.push(*a);
                    got_b.push(*b);
                }
                other => panic!("unexpected row {other:?}"),
            }
        }
        (got_a, got_b)
    }

    /// Every length around a block's and a miniblock's, differences of every width up to
    /// 64 bits (wrapping between the extremes), runs of one value (width 0): what goes in
    /// comes out.
    #[test]
    fn the_crates_decoder_reads_every_value_back() {
        let mut seed = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        for n in [
            1, 2, 31, 32, 33, 127, 128, 129, 130, 255, 256, 257, 1000, 65_536,
        ] {
            let longs: Vec<i64> = (0..n)
                .map(|i| match i % 7 {
                    0 => i64::MIN,
                    1 => i64::MAX,
                    2 => 7,
                    3 => next() as i64 >> (next() % 64),
                    _ => i as i64 * 48,
                })
                .collect();
            let ints: Vec<i32> = (0..n)
                .map(|i| match i % 5 {
                    0 => i32::MIN,
                    1 => i32::MAX,
                    2 => -1,
                    _ => next() as i32 >> (next() % 32),
                })
                .collect();
            assert_eq!(round_trip(&longs, &ints), (longs, ints), "{n} values");
        }
        let same = vec![42i64; 300];
        let zeros = vec![0i32; 300];
        assert_eq!(round_trip(&same, &zeros), (same, zeros));
    }
}
