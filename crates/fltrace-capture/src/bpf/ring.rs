//! The BPF ring buffer as its consumer sees it (the kernel's kernel/bpf/ringbuf.c): a page
//! with the consumer position, which we write, then a page with the producer position and the
//! data area mapped twice in a row, so that a record that wraps around the end reads as one
//! slice. Each record starts with an 8-byte header: its length, with a bit saying it is still
//! being written and one saying it was discarded.
//!
//! Unlike aya's `RingBuf`, records are looked at before they are consumed, so that the event
//! loop can merge them with the perf rings in time order and leave the newer ones for its next
//! round.

use std::io;
use std::os::fd::RawFd;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

use memmap2::{Advice, MmapOptions, MmapRaw};

const BUSY: u32 = 1 << 31;
const DISCARDED: u32 = 1 << 30;
const HEADER: u64 = 8;

/// The mapped BPF ring.
pub struct BpfRing {
    /// The consumer page (read-write).
    consumer: MmapRaw,
    /// The producer page and the data area twice (read-only).
    producer: MmapRaw,
    size: u64,
    page: usize,
}

/// What lies at a position of the ring.
pub enum Slot<'a> {
    /// A record's body, complete.
    Record(&'a [u8]),
    /// A record the program gave up on: skipped.
    Discarded,
}

impl BpfRing {
    /// Maps the ring of BPF map `fd`, of `size` bytes of data (a power of two of pages).
    pub fn map(fd: RawFd, size: usize) -> io::Result<BpfRing> {
        let page = crate::ring::page_size();
        let consumer = MmapOptions::new().len(page).map_raw(fd)?;
        let producer = MmapOptions::new()
            .offset(page as u64)
            .len(page + 2 * size)
            .map_raw_read_only(fd)?;
        // Not into the processes this one forks (the command before its exec, whose peak
        // resident memory would count the ring, and the helpers that close the events), as
        // the kernel does for perf rings.
        consumer.advise(Advice::DontFork)?;
        producer.advise(Advice::DontFork)?;
        Ok(BpfRing {
            consumer,
            producer,
            size: size as u64,
            page,
        })
    }

    fn consumer_pos(&self) -> &AtomicU64 {
        // SAFETY: the consumer position is the first, aligned word of the consumer page,
        // mapped while `self` lives; the kernel reads it concurrently.
        unsafe { &*self.consumer.as_ptr().cast::<AtomicU64>() }
    }

    fn producer_pos(&self) -> &AtomicU64 {
        // SAFETY: as above, the first word of the producer page, which the kernel writes.
        unsafe { &*self.producer.as_ptr().cast::<AtomicU64>() }
    }

    /// The positions `[consumer, producer)` holding records not yet consumed.
    pub fn readable(&self) -> (u64, u64) {
        // Acquire pairs with the kernel's release of the producer position.
        let head = self.producer_pos().load(Ordering::Acquire);
        let tail = self.consumer_pos().load(Ordering::Relaxed);
        (tail, head)
    }

    /// The record at `pos` (inside `readable()`) and the position after it; `None` when it
    /// is still being written (the records after it wait too).
    pub fn record_at(&self, pos: u64) -> Option<(Slot<'_>, u64)> {
        let offset = (pos & (self.size - 1)) as usize;
        // SAFETY: the data area starts one page into the producer mapping and is mapped twice,
        // so a header at `offset < size` and a body of at most `size` bytes after it lie
        // inside the mapping; record headers are 8-byte aligned.
        let header = unsafe {
            &*self
                .producer
                .as_ptr()
                .add(self.page + offset)
                .cast::<AtomicU32>()
        };
        // Acquire pairs with the kernel's release when it clears the busy bit.
        let len = header.load(Ordering::Acquire);
        if len & BUSY != 0 {
            return None;
        }
        let body_len = (len & !(BUSY | DISCARDED)) as usize;
        let next = pos + (HEADER + body_len as u64).next_multiple_of(8);
        if len & DISCARDED != 0 {
            return Some((Slot::Discarded, next));
        }
        if body_len as u64 > self.size {
            return None;
        }
        // SAFETY: see above; the body is complete (not busy) and the kernel does not write it
        // again until the consumer position passes it.
        let body = unsafe {
            std::slice::from_raw_parts(
                self.producer
                    .as_ptr()
                    .add(self.page + offset + HEADER as usize),
                body_len,
            )
        };
        Some((Slot::Record(body), next))
    }

    /// Frees the records before `pos` for the kernel to reuse.
    pub fn consume(&mut self, pos: u64) {
        // Release: our reads of the records happen before the kernel may overwrite them.
        self.consumer_pos().store(pos, Ordering::Release);
    }

    /// Whether more than half of the ring holds unconsumed records.
    pub fn half_full(&self) -> bool {
        let (tail, head) = self.readable();
        head - tail > self.size / 2
    }
}
