//! The allocation log: how the preloaded interposer hands allocation events to the recorder.
//!
//! Each process writes one file, `<FLTRACE_RT_ALLOCS>-<pid>.<image>` (image counts execs),
//! mapped shared: whatever a thread has published is in the file even if the process is
//! killed the next instant. The file is a [`LogHeader`] page followed by chunks of
//! [`CHUNK_SIZE`] bytes; a thread takes a whole chunk with one atomic add and fills it alone,
//! publishing each record by storing the chunk's `used` length after writing it.
//!
//! Time comes from a clock word the recorder keeps in a shared page, `<FLTRACE_RT_ALLOCS>-clock`
//! ([`Clock`]), set to CLOCK_MONOTONIC every millisecond: reading it costs a load, where a TSC
//! or `clock_gettime` read per call made up a quarter of the tracer's cost. Allocation times
//! therefore have a resolution of about a millisecond; a thread's calls keep their order.
//!
//! Records in a chunk: a tag byte, then prefix-varint fields ([`put_varint`]). A
//! [`Tag::TIME`] record opens every chunk and follows whenever the clock has moved on; call
//! records carry addresses as zig-zag deltas from the previous address, which keeps the common
//! `malloc` record at about 6 bytes and `free` at 4. Stack ids are per file;
//! a thread defines a stack ([`Tag::STACK`]) before the first record that uses it, and may
//! define the same frames again under a new id.

use core::sync::atomic::AtomicU64;

/// Identifies the format; bump on change.
pub const MAGIC: u64 = 0x666c_7472_616c_0003;
/// Bytes of the header at the start of the file.
pub const HEADER_SIZE: usize = 4096;
/// Bytes of one chunk, its [`ChunkHeader`] included.
pub const CHUNK_SIZE: usize = 256 * 1024;
/// The longest stack recorded; deeper ones are cut.
pub const MAX_FRAMES: usize = 128;
/// The longest record: a stack definition of [`MAX_FRAMES`] frames.
pub const MAX_RECORD: usize = 1 + 9 + 9 + MAX_FRAMES * 9;

/// The recorder's clock page.
#[repr(C)]
pub struct Clock {
    /// [`MAGIC`] once initialised.
    pub magic: AtomicU64,
    /// CLOCK_MONOTONIC nanoseconds, refreshed every millisecond.
    pub now_ns: AtomicU64,
}

/// Bytes of the clock file.
pub const CLOCK_SIZE: usize = 4096;

/// The file's first bytes.
#[repr(C)]
pub struct LogHeader {
    /// [`MAGIC`] once initialised.
    pub magic: AtomicU64,
    /// The writing process.
    pub pid: AtomicU64,
    /// File offset of the next free chunk.
    pub next_chunk: AtomicU64,
    /// Records that could not be written (the log could not grow).
    pub dropped: AtomicU64,
    /// CLOCK_MONOTONIC nanoseconds at which the log could not grow and the tracer stopped
    /// for good (0: it never did). Calls from then on are neither written nor counted.
    pub stopped_ns: AtomicU64,
    /// CLOCK_MONOTONIC nanoseconds at which the process made the log (0: a library from
    /// before this field, whose header page is zero here). The name carries the kernel's
    /// pid, which a later process of the run may hold again: this tells whose log it is.
    pub made_ns: AtomicU64,
}

/// The start of every chunk.
#[repr(C)]
pub struct ChunkHeader {
    /// The thread that owns the chunk.
    pub tid: AtomicU64,
    /// Bytes of records after this header that are complete.
    pub used: AtomicU64,
}

/// Bytes of [`ChunkHeader`].
pub const CHUNK_HEADER_SIZE: usize = core::mem::size_of::<ChunkHeader>();

/// Record tags other than calls; calls use the numbers of [`call`] (1 to 16).
pub struct Tag;

impl Tag {
    /// The clock's value (CLOCK_MONOTONIC nanoseconds) for the records that follow.
    pub const TIME: u8 = 0x40;
    /// A stack: id, frame count, frames (innermost first).
    pub const STACK: u8 = 0x41;
}

/// Call numbers, the same as `fltrace_trace::AllocCall`'s.
pub mod call {
    #![allow(missing_docs)]
    pub const MALLOC: u8 = 1;
    pub const CALLOC: u8 = 2;
    pub const REALLOC: u8 = 3;
    pub const REALLOCARRAY: u8 = 4;
    pub const FREE: u8 = 5;
    pub const POSIX_MEMALIGN: u8 = 6;
    pub const ALIGNED_ALLOC: u8 = 7;
    pub const MEMALIGN: u8 = 8;
    pub const VALLOC: u8 = 9;
    pub const PVALLOC: u8 = 10;
    pub const USABLE_SIZE: u8 = 11;
    pub const MMAP: u8 = 12;
    pub const MUNMAP: u8 = 13;
    pub const MREMAP: u8 = 14;
    pub const BRK: u8 = 15;
    pub const SBRK: u8 = 16;
    /// The highest call number.
    pub const LAST: u8 = SBRK;

    /// Whether records of this call carry a size (`free` is only an address).
    #[inline]
    pub fn has_size(call: u8) -> bool {
        call != FREE
    }

    /// Whether records of this call carry an old address.
    #[inline]
    pub fn has_old_addr(call: u8) -> bool {
        matches!(call, REALLOC | REALLOCARRAY | MREMAP | BRK | SBRK)
    }

    /// Whether records of this call carry a detail (alignment, mmap prot and flags).
    #[inline]
    pub fn has_detail(call: u8) -> bool {
        matches!(call, POSIX_MEMALIGN | ALIGNED_ALLOC | MEMALIGN | MMAP)
    }

    /// Whether records of this call carry a stack (calls that only give memory back or ask a
    /// question do not).
    #[inline]
    pub fn has_stack(call: u8) -> bool {
        !matches!(call, FREE | MUNMAP | USABLE_SIZE)
    }
}

/// One call as the interposer saw it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct CallRecord {
    /// A number from [`call`].
    pub call: u8,
    /// See `fltrace_trace::AllocEvent` for the meaning of the remaining fields.
    pub addr: u64,
    #[allow(missing_docs)]
    pub size: u64,
    #[allow(missing_docs)]
    pub old_addr: u64,
    #[allow(missing_docs)]
    pub detail: u64,
    /// Stack id in this file, or `u32::MAX` for none.
    pub stack_id: u32,
}

/// Writes `value` at `out[*pos..]` as a prefix varint: the first byte's trailing zeros give
/// the length (1 to 8 bytes hold 7 to 56 bits; a zero first byte announces 8 raw bytes). Unlike
/// LEB128 it encodes without a loop or a data-dependent branch per byte, which made half the
/// cost of a traced `malloc`. Writes up to 9 bytes whatever the length: `out` needs that room.
#[inline]
pub fn put_varint(out: &mut [u8], pos: &mut usize, value: u64) {
    let window = &mut out[*pos..*pos + 9];
    // SAFETY: the window holds 9 bytes.
    *pos += unsafe { put_varint_raw(window.as_mut_ptr(), value) };
}

/// Reads a prefix varint (see [`put_varint`]) at `input[*pos..]`.
#[inline(always)]
pub fn get_varint(input: &[u8], pos: &mut usize) -> Option<u64> {
    // The common case, 8 bytes readable: one load, no copy.
    if let Some(bytes) = input.get(*pos..*pos + 8) {
        let word = u64::from_le_bytes(bytes.try_into().ok()?);
        let first = word as u8;
        if first != 0 {
            let len = first.trailing_zeros() as usize + 1;
            *pos += len;
            let kept = if len == 8 {
                word
            } else {
                word & ((1 << (8 * len)) - 1)
            };
            return Some(kept >> len);
        }
    }
    let first = *input.get(*pos)?;
    if first == 0 {
        let bytes = input.get(*pos + 1..*pos + 9)?;
        *pos += 9;
        return Some(u64::from_le_bytes(bytes.try_into().ok()?));
    }
    let len = first.trailing_zeros() as usize + 1;
    let bytes = input.get(*pos..*pos + len)?;
    let mut word = [0u8; 8];
    word[..len].copy_from_slice(bytes);
    *pos += len;
    Some(u64::from_le_bytes(word) >> len)
}

fn zigzag(delta: u64) -> u64 {
    let d = delta as i64;
    ((d << 1) ^ (d >> 63)) as u64
}

fn unzigzag(v: u64) -> u64 {
    ((v >> 1) as i64 ^ -((v & 1) as i64)) as u64
}

/// The running state of a chunk's encoder or decoder.
#[derive(Debug, Clone, Copy, Default)]
pub struct Cursor {
    /// The time of the last [`Tag::TIME`] record.
    pub time_ns: u64,
    /// Address of the previous call record.
    pub addr: u64,
}

impl Cursor {
    /// Encodes a time at `out[*pos..]`.
    pub fn put_time(&mut self, out: &mut [u8], pos: &mut usize, time_ns: u64) {
        out[*pos] = Tag::TIME;
        *pos += 1;
        put_varint(out, pos, time_ns);
        self.time_ns = time_ns;
    }

    /// Encodes a stack definition.
    pub fn put_stack(&mut self, out: &mut [u8], pos: &mut usize, id: u32, frames: &[u64]) {
        let frames = &frames[..frames.len().min(MAX_FRAMES)];
        out[*pos] = Tag::STACK;
        *pos += 1;
        put_varint(out, pos, u64::from(id));
        put_varint(out, pos, frames.len() as u64);
        let mut previous = 0u64;
        for &frame in frames {
            put_varint(out, pos, zigzag(frame.wrapping_sub(previous)));
            previous = frame;
        }
    }

    /// Encodes a call; `out[*pos..]` must have room for the longest call record.
    #[inline]
    pub fn put_call(&mut self, out: &mut [u8], pos: &mut usize, record: &CallRecord) {
        // One bounds check for the whole record, then unchecked writes: this runs on every
        // malloc and free of the traced program, where per-byte checks were a measurable part.
        let window = &mut out[*pos..*pos + MAX_CALL];
        let base = window.as_mut_ptr();
        let mut n = 0;
        // SAFETY: the window holds MAX_CALL bytes: a tag and six varints of at most 9 bytes,
        // each written as a whole 8- or 9-byte store.
        unsafe {
            *base = record.call;
            n += 1;
            n += put_varint_raw(base.add(n), zigzag(record.addr.wrapping_sub(self.addr)));
            if call::has_size(record.call) {
                n += put_varint_raw(base.add(n), record.size);
            }
            if call::has_old_addr(record.call) {
                let delta = zigzag(record.old_addr.wrapping_sub(record.addr));
                n += put_varint_raw(base.add(n), delta);
            }
            if call::has_detail(record.call) {
                n += put_varint_raw(base.add(n), record.detail);
            }
            if call::has_stack(record.call) {
                n += put_varint_raw(base.add(n), u64::from(record.stack_id.wrapping_add(1)));
            }
        }
        *pos += n;
        self.addr = record.addr;
    }
}

/// [`put_varint`] through a raw pointer; returns the bytes it takes.
///
/// # Safety
/// `out` must be valid for writing 9 bytes.
#[inline(always)]
unsafe fn put_varint_raw(out: *mut u8, value: u64) -> usize {
    let bits = 64 - (value | 1).leading_zeros() as usize;
    if bits <= 56 {
        let len = ((bits + 6) * 37) >> 8;
        let word = (value << len) | (1 << (len - 1));
        // SAFETY: guaranteed by the caller.
        unsafe { out.cast::<u64>().write_unaligned(word.to_le()) };
        len
    } else {
        // SAFETY: guaranteed by the caller.
        unsafe {
            *out = 0;
            out.add(1).cast::<u64>().write_unaligned(value.to_le());
        }
        9
    }
}

/// The longest call record: a tag and six varints.
const MAX_CALL: usize = 1 + 6 * 9;

/// A decoded record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Record {
    /// The time of the records that follow, CLOCK_MONOTONIC nanoseconds.
    Time(u64),
    /// A stack definition; its frames were written to the decoder's frame buffer.
    Stack {
        /// Its id in this file.
        id: u32,
        /// How many frames the buffer holds.
        len: usize,
    },
    /// A call.
    Call(CallRecord),
}

/// Decodes the records of one chunk's published bytes.
pub struct Decoder<'a> {
    input: &'a [u8],
    pos: usize,
    cursor: Cursor,
}

impl<'a> Decoder<'a> {
    /// A decoder over the `used` bytes of a chunk.
    pub fn new(input: &'a [u8]) -> Self {
        Decoder {
            input,
            pos: 0,
            cursor: Cursor::default(),
        }
    }

    /// A decoder that goes on where one over a shorter prefix of the same chunk stopped
    /// ([`Decoder::state`]): a chunk still being written is decoded as it grows.
    #[inline]
    pub fn resume(input: &'a [u8], (pos, cursor): (usize, Cursor)) -> Self {
        Decoder { input, pos, cursor }
    }

    /// Where the decoder is: the offset of the next record and the running state.
    #[inline]
    pub fn state(&self) -> (usize, Cursor) {
        (self.pos, self.cursor)
    }

    /// The next record, `None` at the end, or `Some(Err(offset))` where the bytes make no
    /// sense. Stack frames go to `frames`.
    #[inline]
    pub fn next(&mut self, frames: &mut [u64; MAX_FRAMES]) -> Option<Result<Record, usize>> {
        let start = self.pos;
        let tag = *self.input.get(self.pos)?;
        self.pos += 1;
        let record = self.record(tag, frames);
        Some(record.ok_or(start))
    }

    /// Decodes the calls that come next, at most `max`, handing each to `each`, and returns
    /// how many. Stops before any other record, before bytes that do not decode (which
    /// [`next`](Self::next) then reports) and at the end. A run of calls shares one time, so
    /// a reader checks what it takes once for the run: this loop is most of a conversion's
    /// decoding.
    #[inline]
    pub fn calls(&mut self, max: usize, mut each: impl FnMut(&CallRecord)) -> usize {
        let mut taken = 0;
        while taken < max {
            let Some(&tag) = self.input.get(self.pos) else {
                break;
            };
            if !(1..=call::LAST).contains(&tag) {
                break;
            }
            let mut pos = self.pos + 1;
            let Some(record) = call_record(self.input, &mut pos, tag, self.cursor.addr) else {
                break;
            };
            self.pos = pos;
            self.cursor.addr = record.addr;
            each(&record);
            taken += 1;
        }
        taken
    }

    #[inline(always)]
    fn record(&mut self, tag: u8, frames: &mut [u64; MAX_FRAMES]) -> Option<Record> {
        let input = self.input;
        let pos = &mut self.pos;
        match tag {
            Tag::TIME => {
                let time_ns = get_varint(input, pos)?;
                self.cursor.time_ns = time_ns;
                Some(Record::Time(time_ns))
            }
            Tag::STACK => {
                let id = u32::try_from(get_varint(input, pos)?).ok()?;
                let len = usize::try_from(get_varint(input, pos)?).ok()?;
                if len > MAX_FRAMES {
                    return None;
                }
                let mut previous = 0u64;
                for frame in frames.iter_mut().take(len) {
                    previous = previous.wrapping_add(unzigzag(get_varint(input, pos)?));
                    *frame = previous;
                }
                Some(Record::Stack { id, len })
            }
            1..=call::LAST => {
                let record = call_record(input, pos, tag, self.cursor.addr)?;
                self.cursor.addr = record.addr;
                Some(Record::Call(record))
            }
            _ => None,
        }
    }
}

/// Decodes the fields of a call record of call `tag` at `input[*pos..]`, its address a
/// difference from `last_addr`; `None` where they do not decode (`*pos` is then anywhere).
#[inline(always)]
fn call_record(input: &[u8], pos: &mut usize, tag: u8, last_addr: u64) -> Option<CallRecord> {
    let addr = last_addr.wrapping_add(unzigzag(get_varint(input, pos)?));
    let size = if call::has_size(tag) {
        get_varint(input, pos)?
    } else {
        0
    };
    let old_addr = if call::has_old_addr(tag) {
        addr.wrapping_add(unzigzag(get_varint(input, pos)?))
    } else {
        0
    };
    let detail = if call::has_detail(tag) {
        get_varint(input, pos)?
    } else {
        0
    };
    let stack_id = if call::has_stack(tag) {
        (get_varint(input, pos)? as u32).wrapping_sub(1)
    } else {
        u32::MAX
    };
    Some(CallRecord {
        call: tag,
        addr,
        size,
        old_addr,
        detail,
        stack_id,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every kind of record decodes to what was encoded, extreme values included.
    #[test]
    fn records_round_trip() {
        let mut buf = [0u8; 4096];
        let mut pos = 0;
        let mut cursor = Cursor::default();
        cursor.put_time(&mut buf, &mut pos, 123_456_789);
        let frames = [0x5555_0000_1234, 0x7fff_0000_0001, 0x40_1000, u64::MAX];
        cursor.put_stack(&mut buf, &mut pos, 7, &frames);
        let mut calls = [CallRecord::default(); call::LAST as usize];
        for (i, record) in calls.iter_mut().enumerate() {
            let n = i as u8 + 1;
            *record = CallRecord {
                call: n,
                addr: if n == 3 {
                    0
                } else {
                    0x7f00_0000_0000 - u64::from(n) * 4096
                },
                size: match n {
                    4 => u64::MAX,
                    call::FREE => 0,
                    _ => u64::from(n) * 17,
                },
                old_addr: if call::has_old_addr(n) { 0x10_0000 } else { 0 },
                detail: if call::has_detail(n) {
                    3 << 32 | 0x22
                } else {
                    0
                },
                stack_id: if call::has_stack(n) {
                    u32::from(n)
                } else {
                    u32::MAX
                },
            };
            cursor.put_call(&mut buf, &mut pos, record);
        }
        let mut decoder = Decoder::new(&buf[..pos]);
        let mut out = [0u64; MAX_FRAMES];
        assert_eq!(decoder.next(&mut out), Some(Ok(Record::Time(123_456_789))));
        assert_eq!(
            decoder.next(&mut out),
            Some(Ok(Record::Stack { id: 7, len: 4 }))
        );
        assert_eq!(out[..4], frames);
        for expected in calls {
            assert_eq!(decoder.next(&mut out), Some(Ok(Record::Call(expected))));
        }
        assert_eq!(decoder.next(&mut out), None);
    }

    /// Varints of every length come back, and take the bytes they should.
    #[test]
    fn varints_round_trip() {
        let mut buf = [0u8; 32];
        for shift in 0..64 {
            for value in [1u64 << shift, (1u64 << shift) - 1, u64::MAX >> shift] {
                let mut pos = 0;
                put_varint(&mut buf, &mut pos, value);
                let bits = 64 - (value | 1).leading_zeros() as usize;
                assert_eq!(
                    pos,
                    if bits <= 56 { bits.div_ceil(7) } else { 9 },
                    "{value:#x}"
                );
                let mut read = 0;
                assert_eq!(get_varint(&buf[..pos], &mut read), Some(value));
                assert_eq!(read, pos);
            }
        }
    }

    /// A malloc record of a typical program is small.
    #[test]
    fn malloc_records_are_compact() {
        let mut buf = [0u8; 64];
        let mut pos = 0;
        let mut cursor = Cursor {
            time_ns: 1 << 40,
            addr: 0x5555_5555_a000,
        };
        let record = CallRecord {
            call: call::MALLOC,
            addr: 0x5555_5555_a040,
            size: 100,
            stack_id: 3,
            ..CallRecord::default()
        };
        cursor.put_call(&mut buf, &mut pos, &record);
        assert!(pos <= 5, "{pos} bytes");
    }

    /// A run of calls decodes to the records `next` gives, at most as many as asked, and
    /// stops before a time, a stack, bytes cut short and the end, each then `next`'s.
    #[test]
    fn call_runs_decode_as_records_do() {
        let mut buf = [0u8; 4096];
        let mut pos = 0;
        let mut cursor = Cursor::default();
        let calls: [CallRecord; 5] = core::array::from_fn(|i| CallRecord {
            call: if i % 2 == 0 { call::MALLOC } else { call::FREE },
            addr: 0x5555_0000_0000 + i as u64 / 2 * 48,
            size: if i % 2 == 0 { 16 + i as u64 } else { 0 },
            stack_id: if i % 2 == 0 { i as u32 } else { u32::MAX },
            ..CallRecord::default()
        });
        for record in &calls[..3] {
            cursor.put_call(&mut buf, &mut pos, record);
        }
        cursor.put_time(&mut buf, &mut pos, 77);
        for record in &calls[3..] {
            cursor.put_call(&mut buf, &mut pos, record);
        }
        let mut out = [0u64; MAX_FRAMES];
        let mut decoder = Decoder::new(&buf[..pos]);
        let mut seen = [CallRecord::default(); 5];
        let mut n = 0;
        let mut take = |r: &CallRecord| {
            seen[n] = *r;
            n += 1;
        };
        assert_eq!(decoder.calls(2, &mut take), 2);
        assert_eq!(decoder.calls(9, &mut take), 1, "stops at the time");
        assert_eq!(decoder.next(&mut out), Some(Ok(Record::Time(77))));
        assert_eq!(decoder.calls(9, &mut take), 2, "stops at the end");
        assert_eq!(seen, calls);
        assert_eq!(decoder.next(&mut out), None);
        // Cut short: nothing taken, and `next` names the record's offset.
        let mut decoder = Decoder::new(&buf[..pos - 1]);
        assert_eq!(decoder.calls(9, |_| {}), 3);
        assert_eq!(decoder.next(&mut out), Some(Ok(Record::Time(77))));
        assert_eq!(decoder.calls(9, |_| {}), 1);
        assert_eq!(decoder.calls(9, |_| panic!("a cut record")), 0);
        let (at, _) = decoder.state();
        assert_eq!(decoder.next(&mut out), Some(Err(at)));
    }

    /// Garbage is reported with its offset, not decoded.
    #[test]
    fn garbage_is_refused() {
        let mut out = [0u64; MAX_FRAMES];
        assert_eq!(Decoder::new(&[0x99]).next(&mut out), Some(Err(0)));
        assert_eq!(
            Decoder::new(&[call::MALLOC, 0x80]).next(&mut out),
            Some(Err(0))
        );
    }
}
