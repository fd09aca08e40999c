//! A sample's copy of a thread's stack, from the stack pointer up, and the pages it skipped.

/// The most runs of skipped pages a stack copy notes (`HOLES` of bpf/record.bpf.c).
pub const MAX_HOLES: usize = 4;

/// The parts of a stack copy that could not be read when it was taken (pages not present: a
/// stack page never touched, as in the middle of a frame larger than the pages it uses), as
/// byte ranges `[start, end)` from the stack pointer, in order. Their bytes are no stack
/// words: a zero read there would pass for the end of the stack.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Holes {
    pub(super) len: usize,
    pub(super) runs: [(u32, u32); MAX_HOLES],
}

impl Holes {
    /// The holes `runs`, `None` unless they are at most [`MAX_HOLES`] non-empty ranges in
    /// order, apart.
    pub fn new(runs: &[(u32, u32)]) -> Option<Holes> {
        if runs.len() > MAX_HOLES
            || runs.iter().any(|&(start, end)| start >= end)
            || runs.windows(2).any(|w| w[0].1 > w[1].0)
        {
            return None;
        }
        let mut holes = Holes {
            len: runs.len(),
            ..Holes::default()
        };
        holes.runs[..runs.len()].copy_from_slice(runs);
        Some(holes)
    }

    /// The ranges, in order.
    pub fn runs(&self) -> &[(u32, u32)] {
        &self.runs[..self.len]
    }

    /// The bytes they cover.
    pub fn bytes(&self) -> u64 {
        self.runs()
            .iter()
            .map(|&(start, end)| u64::from(end - start))
            .sum()
    }

    /// Whether `[offset, offset + len)` meets a hole.
    pub(super) fn meets(&self, offset: usize, len: usize) -> bool {
        self.runs()
            .iter()
            .any(|&(start, end)| offset < end as usize && (start as usize) < offset + len)
    }
}

/// A copy of a thread's stack from its stack pointer up, and the parts of it that could not be
/// read ([`Holes`]).
#[derive(Debug, Clone, Copy, Default)]
pub struct StackBytes<'a> {
    /// The bytes, holes included (their bytes are none of the stack's).
    pub bytes: &'a [u8],
    /// Where the copy could not read the stack.
    pub holes: Holes,
}

impl<'a> From<&'a [u8]> for StackBytes<'a> {
    fn from(bytes: &'a [u8]) -> StackBytes<'a> {
        StackBytes {
            bytes,
            holes: Holes::default(),
        }
    }
}

impl StackBytes<'_> {
    /// The copy's length in bytes, holes included.
    pub fn len(&self) -> usize {
        self.bytes.len()
    }

    /// Whether nothing was copied.
    pub fn is_empty(&self) -> bool {
        self.bytes.is_empty()
    }

    /// The word `offset` bytes above the stack pointer: `Err(true)` beyond the copy, `Err(false)`
    /// in a hole (a read that fails: the stack there was never written).
    pub(super) fn word(&self, offset: u64) -> Result<u64, bool> {
        let offset = usize::try_from(offset).map_err(|_| true)?;
        let bytes = offset
            .checked_add(8)
            .and_then(|end| self.bytes.get(offset..end))
            .ok_or(true)?;
        if self.holes.meets(offset, 8) {
            return Err(false);
        }
        Ok(u64::from_ne_bytes(bytes.try_into().map_err(|_| true)?))
    }
}
