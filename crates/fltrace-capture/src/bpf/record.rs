//! The records the program writes (`struct head`, `struct fault`, `struct major` of
//! bpf/record.bpf.c), read from the ring's bytes.

use crate::unwind::{Holes, MAX_HOLES, StackBytes};

/// `struct head.kind`.
const REC_FAULT: u32 = 1;
const REC_MAJOR: u32 = 2;
/// `sizeof(struct fault)`: the stack copy follows.
const FAULT_LEN: usize = 136;
/// Where `struct fault`'s holes start: their count, then `HOLES` pairs of `u32` offsets.
const HOLES_AT: usize = 96;

/// The kernel took the fault on user memory (`exceptions:page_fault_kernel`).
pub const FAULT_KERNEL: u32 = 1;
/// The live stack was larger than the copy's bound: the copy ends there.
pub const FAULT_CAPPED: u32 = 2;
/// The stack's mapping could not be looked up: nothing copied.
pub const FAULT_NO_BOUNDS: u32 = 4;

/// A fault as the program saw it.
#[derive(Debug, Clone, Copy)]
pub struct BpfFault<'a> {
    /// `FAULT_*`.
    pub flags: u32,
    /// The process (tgid).
    pub pid: u32,
    /// The thread.
    pub tid: u32,
    /// CLOCK_MONOTONIC.
    pub time_ns: u64,
    /// The address that faulted.
    pub addr: u64,
    /// The x86 page-fault error code.
    pub error_code: u64,
    /// Instruction, stack and frame pointers.
    pub regs: (u64, u64, u64),
    /// `rbx`.
    pub rbx: u64,
    /// The stack's mapping as the copy took it: `[low, top)`.
    pub stack_low: u64,
    /// The end of that range.
    pub stack_top: u64,
    /// The stack from the stack pointer up, and the pages the copy skipped.
    pub stack: StackBytes<'a>,
    /// The thread's id in the first pid namespace, which keys its stack bounds.
    pub stack_key: u32,
}

/// A record of the ring.
#[derive(Debug, Clone, Copy)]
pub enum BpfRecord<'a> {
    /// A fault with its stack.
    Fault(BpfFault<'a>),
    /// A major fault: the kernel needed I/O for the fault just before of its thread.
    Major {
        /// The process.
        pid: u32,
        /// The thread.
        tid: u32,
        /// CLOCK_MONOTONIC.
        time_ns: u64,
        /// The address.
        addr: u64,
    },
}

fn u32_at(bytes: &[u8], offset: usize) -> Option<u32> {
    Some(u32::from_ne_bytes(
        bytes.get(offset..offset + 4)?.try_into().ok()?,
    ))
}

fn u64_at(bytes: &[u8], offset: usize) -> Option<u64> {
    Some(u64::from_ne_bytes(
        bytes.get(offset..offset + 8)?.try_into().ok()?,
    ))
}

impl<'a> BpfRecord<'a> {
    /// The record in `bytes`, `None` for a kind not known or a short record.
    pub fn parse(bytes: &'a [u8]) -> Option<BpfRecord<'a>> {
        let kind = u32_at(bytes, 0)?;
        let (flags, pid, tid, time_ns) = (
            u32_at(bytes, 4)?,
            u32_at(bytes, 8)?,
            u32_at(bytes, 12)?,
            u64_at(bytes, 16)?,
        );
        match kind {
            REC_FAULT => {
                let stack_len = u32_at(bytes, 80)? as usize;
                let stack = bytes.get(FAULT_LEN..FAULT_LEN.checked_add(stack_len)?)?;
                let holes = u32_at(bytes, HOLES_AT)? as usize;
                let mut runs = [(0, 0); MAX_HOLES];
                for (i, run) in runs.iter_mut().enumerate().take(holes) {
                    let at = HOLES_AT + 8 + 8 * i;
                    *run = (u32_at(bytes, at)?, u32_at(bytes, at + 4)?);
                }
                // Holes beyond the copy, or out of order, make a corrupt record.
                let holes = Holes::new(runs.get(..holes)?)?;
                if holes
                    .runs()
                    .last()
                    .is_some_and(|&(_, end)| end as usize > stack_len)
                {
                    return None;
                }
                Some(BpfRecord::Fault(BpfFault {
                    flags,
                    pid,
                    tid,
                    time_ns,
                    addr: u64_at(bytes, 24)?,
                    error_code: u64_at(bytes, 32)?,
                    regs: (u64_at(bytes, 40)?, u64_at(bytes, 48)?, u64_at(bytes, 56)?),
                    rbx: u64_at(bytes, 88)?,
                    stack_low: u64_at(bytes, 64)?,
                    stack_top: u64_at(bytes, 72)?,
                    stack: StackBytes {
                        bytes: stack,
                        holes,
                    },
                    stack_key: u32_at(bytes, 84)?,
                }))
            }
            REC_MAJOR => Some(BpfRecord::Major {
                pid,
                tid,
                time_ns,
                addr: u64_at(bytes, 24)?,
            }),
            _ => None,
        }
    }

    /// The time of the record in `bytes` (0 for a short one).
    pub fn time_of(bytes: &[u8]) -> u64 {
        u64_at(bytes, 16).unwrap_or(0)
    }

    /// The process the record in `bytes` is of.
    pub fn pid_of(bytes: &[u8]) -> Option<u32> {
        u32_at(bytes, 8)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A fault record as the program lays it out: the head, the fields, the copy after them,
    /// only `stack_len` bytes of it taken.
    #[test]
    fn a_fault_record_reads_as_the_program_writes_it() {
        let mut bytes = Vec::new();
        for word in [REC_FAULT, FAULT_KERNEL, 100, 101] {
            bytes.extend(word.to_ne_bytes());
        }
        for word in [5_000u64, 0xdead_0000, 6, 0x401000, 0x7ffd_0000, 0x7ffd_0100] {
            bytes.extend(word.to_ne_bytes());
        }
        for word in [0x7ffc_0000u64, 0x7ffe_0000] {
            bytes.extend(word.to_ne_bytes());
        }
        bytes.extend(16u32.to_ne_bytes());
        bytes.extend(4101u32.to_ne_bytes());
        bytes.extend(0x7ffd_0040u64.to_ne_bytes());
        // One hole, [8, 12), and the unused slots.
        for word in [1u32, 0, 8, 12, 0, 0, 0, 0, 0, 0] {
            bytes.extend(word.to_ne_bytes());
        }
        assert_eq!(bytes.len(), FAULT_LEN);
        bytes.extend(1..=24u8);
        let Some(BpfRecord::Fault(f)) = BpfRecord::parse(&bytes) else {
            panic!("not a fault");
        };
        assert_eq!(
            (f.flags, f.pid, f.tid, f.time_ns),
            (FAULT_KERNEL, 100, 101, 5_000)
        );
        assert_eq!((f.addr, f.error_code), (0xdead_0000, 6));
        assert_eq!(f.regs, (0x401000, 0x7ffd_0000, 0x7ffd_0100));
        assert_eq!(f.rbx, 0x7ffd_0040);
        assert_eq!(f.stack.holes.runs(), [(8, 12)]);
        assert_eq!((f.stack_low, f.stack_top), (0x7ffc_0000, 0x7ffe_0000));
        assert_eq!(f.stack_key, 4101);
        assert_eq!(f.stack.bytes, &(1..=16u8).collect::<Vec<_>>()[..]);
        assert_eq!(BpfRecord::time_of(&bytes), 5_000);
        assert_eq!(BpfRecord::pid_of(&bytes), Some(100));
        // A hole beyond the copy, or more holes than the record holds, make a corrupt record.
        let mut beyond = bytes.clone();
        beyond[HOLES_AT + 12..HOLES_AT + 16].copy_from_slice(&17u32.to_ne_bytes());
        assert!(BpfRecord::parse(&beyond).is_none());
        let mut many = bytes.clone();
        many[HOLES_AT..HOLES_AT + 4].copy_from_slice(&5u32.to_ne_bytes());
        assert!(BpfRecord::parse(&many).is_none());
        // A copy longer than the record is a corrupt record.
        bytes.truncate(FAULT_LEN + 8);
        assert!(BpfRecord::parse(&bytes).is_none());
    }
}
