//! The per-CPU perf ring buffer: the kernel appends records at `data_head`, we consume them and
//! publish `data_tail` (the protocol is described in the kernel's `include/uapi/linux/perf_event.h`
//! above `struct perf_event_mmap_page`).

use std::io;
use std::mem::offset_of;
use std::sync::atomic::{AtomicU64, Ordering};

use linux_perf_event_reader::RawData;
use memmap2::{MmapOptions, MmapRaw};
use perf_event_open_sys::bindings::perf_event_mmap_page;

use crate::perf_abi::PerfEvent;

/// A mapped ring buffer.
pub struct RingBuffer {
    map: MmapRaw,
    data_offset: usize,
    data_size: usize,
}

/// One record in the ring: its header fields and its body, which may wrap around the end of
/// the buffer (hence two slices).
pub struct RawRecord<'a> {
    /// `PERF_RECORD_*`.
    pub kind: u32,
    /// The header's `misc` bits.
    pub misc: u16,
    /// The body after the header.
    pub data: RawData<'a>,
}

impl RingBuffer {
    /// Maps `data_pages` (a power of two) pages of ring buffer for `event`.
    pub fn map(event: &PerfEvent, data_pages: usize) -> io::Result<RingBuffer> {
        let page = page_size();
        let map = MmapOptions::new()
            .len((data_pages + 1) * page)
            .map_raw(event.fd())?;
        let mut ring = RingBuffer {
            map,
            data_offset: page,
            data_size: data_pages * page,
        };
        // Kernels since 4.1 say where the data area is; older ones put it after one page.
        let (offset, size) = (
            ring.header_u64(offset_of!(perf_event_mmap_page, data_offset)),
            ring.header_u64(offset_of!(perf_event_mmap_page, data_size)),
        );
        if size != 0 {
            ring.data_offset = offset as usize;
            ring.data_size = size as usize;
        }
        Ok(ring)
    }

    fn header_atomic(&self, offset: usize) -> &AtomicU64 {
        // SAFETY: `offset` is the offset of a naturally aligned u64 field inside the first page
        // of the mapping, which lives as long as `self`; the kernel updates it concurrently,
        // hence the atomic view.
        unsafe { &*self.map.as_ptr().add(offset).cast::<AtomicU64>() }
    }

    fn header_u64(&self, offset: usize) -> u64 {
        self.header_atomic(offset).load(Ordering::Acquire)
    }

    fn data(&self) -> &[u8] {
        // SAFETY: the data area lies inside the mapping and stays mapped while `self` lives;
        // the kernel does not write the bytes between tail and head until we advance tail.
        unsafe {
            std::slice::from_raw_parts(self.map.as_ptr().add(self.data_offset), self.data_size)
        }
    }

    /// The positions `[tail, head)` holding records not yet consumed.
    pub fn readable(&self) -> (u64, u64) {
        // Acquire pairs with the kernel's release of data_head: record bytes before `head`
        // are visible to us.
        let head = self.header_u64(offset_of!(perf_event_mmap_page, data_head));
        let tail = self
            .header_atomic(offset_of!(perf_event_mmap_page, data_tail))
            .load(Ordering::Relaxed);
        (tail, head)
    }

    /// The record at `pos` (a position inside `readable()`) and the position after it, or
    /// `None` for a corrupt header.
    pub fn record_at(&self, pos: u64) -> Option<(RawRecord<'_>, u64)> {
        let data = self.data();
        let start = (pos & (self.data_size as u64 - 1)) as usize;
        // Records are 8-byte aligned and the size a power of two: a header never wraps.
        let header = &data[start..start + 8];
        let kind = u32::from_ne_bytes([header[0], header[1], header[2], header[3]]);
        let misc = u16::from_ne_bytes([header[4], header[5]]);
        let size = u16::from_ne_bytes([header[6], header[7]]) as usize;
        if size < 8 {
            return None;
        }
        let body_start = (start + 8) % self.data_size;
        let body_len = size - 8;
        let body = if body_start + body_len <= self.data_size {
            RawData::Single(&data[body_start..body_start + body_len])
        } else {
            let first = &data[body_start..];
            RawData::Split(first, &data[..body_len - first.len()])
        };
        Some((
            RawRecord {
                kind,
                misc,
                data: body,
            },
            pos + size as u64,
        ))
    }

    /// Whether more than half of the buffer holds unconsumed records.
    pub fn half_full(&self) -> bool {
        let (tail, head) = self.readable();
        head - tail > self.data_size as u64 / 2
    }

    /// Frees the records before `pos` for the kernel to reuse.
    pub fn consume(&mut self, pos: u64) {
        // Release: our reads of the records happen before the kernel may overwrite them.
        self.header_atomic(offset_of!(perf_event_mmap_page, data_tail))
            .store(pos, Ordering::Release);
    }

    /// Hands every complete record to `each`, then frees their space for the kernel.
    /// Returns the number of records.
    pub fn drain(&mut self, mut each: impl FnMut(RawRecord<'_>)) -> usize {
        let (mut pos, head) = self.readable();
        let mut count = 0;
        while pos < head {
            let Some((record, next)) = self.record_at(pos) else {
                // A corrupt header would loop forever; drop the rest of this batch.
                log::error!("perf ring buffer: corrupt record header, skipping to head");
                pos = head;
                break;
            };
            each(record);
            count += 1;
            pos = next;
        }
        self.consume(pos);
        count
    }
}

/// The native-endian `u64` at `offset` in a record's body, which may wrap around the ring's end.
///
/// Not `RawData::get`: for a range that starts in the first part of a wrapped body and ends in
/// the second, linux-perf-event-reader 0.10.2 returns `offset` bytes too many, so that a
/// tracepoint field across the end (at 4 mod 8 in the ring, after the raw data's size word)
/// read as missing and its fault sample was lost (1 in 16 churn runs of 200K faults).
pub fn u64_at(data: &RawData<'_>, offset: usize) -> Option<u64> {
    let mut rest = *data;
    rest.skip(offset).ok()?;
    let mut bytes = [0; 8];
    rest.read_exact(&mut bytes).ok()?;
    Some(u64::from_ne_bytes(bytes))
}

/// The system page size.
pub fn page_size() -> usize {
    // SAFETY: sysconf has no preconditions.
    let size = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    if size > 0 { size as usize } else { 4096 }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A field is read whole wherever the ring's end cuts the body: before it, inside it (the
    /// case `RawData::get` got wrong) or after it; past the end there is none.
    #[test]
    fn fields_are_read_across_the_ring_end() {
        let body: Vec<u8> = (0..36).collect();
        let expected = |offset: usize| {
            u64::from_ne_bytes(body[offset..offset + 8].try_into().expect("8 bytes"))
        };
        for cut in 0..=body.len() {
            let data = RawData::Split(&body[..cut], &body[cut..]);
            for offset in [0, 8, 12, 24, 28] {
                assert_eq!(u64_at(&data, offset), Some(expected(offset)), "cut {cut}");
            }
            assert_eq!(u64_at(&data, 29), None, "cut {cut}");
        }
        // What the recorder met: the field at 8 with the end 4 bytes into it (should this
        // fail, the crate was fixed and `u64_at` may use `get` again).
        let wrapped = RawData::Split(&body[..12], &body[12..]);
        assert_eq!(wrapped.get(8..16).map(|d| d.len()), Some(16));
    }
}
