//! The frames of a thread's last unwind, to complete its next stack where the copy ends.

use framehop::x86_64::UnwindRegsX86_64;

use super::live_stack::LiveStack;
use super::unwinder::UnwindEnd;

/// How far beyond the shared frame the live stack is compared with the previous unwind's
/// return addresses before its frames are taken: one or two reads of the live process.
pub(super) const AGREE_SPAN: u64 = 4096;

/// A frame of a thread's last unwind: its address and the stack and frame pointers the
/// unwinder had for it.
#[derive(Debug, Clone, Copy)]
pub(super) struct KnownFrame {
    pub(super) addr: u64,
    pub(super) sp: u64,
    /// Whether `addr` is a return address read from just below `sp` (not a signal frame's
    /// interrupted address).
    pub(super) returned: bool,
}

impl KnownFrame {
    pub(super) fn new(addr: u64, regs: &UnwindRegsX86_64, returned: bool) -> KnownFrame {
        KnownFrame {
            addr,
            sp: regs.sp(),
            returned,
        }
    }
}

/// The frames of a thread's last complete unwind, to complete its next stack where the sampled
/// copy ends: the outer frames of a deep stack (`main`, a parser's outer levels) rarely change
/// between two faults of a thread, while the live stack the recorder reads later may have
/// returned from them or be gone with the thread.
#[derive(Debug, Clone)]
pub struct KnownFrames {
    /// Outermost first, so that the stack pointers decrease along the vector.
    pub(super) frames: Vec<KnownFrame>,
    /// How that unwind ended.
    pub(super) end: UnwindEnd,
    /// Whether `frames` made a stack that reached its thread's entry, as the process
    /// classified it ([`KnownFrames::settle`]): only such frames complete another stack.
    pub(super) complete: bool,
    /// What the last unwind changed, undone if its stack turns out truncated: a short copy
    /// must not replace the thread's last complete outer frames.
    pub(super) undo: Undo,
    /// The frames the last unwind replaced (all of them, or those inside the shared frame).
    pub(super) replaced: Vec<KnownFrame>,
    /// This unwind's frames, innermost first (scratch).
    pub(super) fresh: Vec<KnownFrame>,
    /// Unwinds completed from the previous one.
    pub spliced: u64,
}

/// How to return to the frames before the last unwind.
#[derive(Debug, Clone, Copy)]
pub(super) enum Undo {
    Nothing,
    /// Swap `replaced` back, with how that unwind ended.
    Replace {
        end: UnwindEnd,
        complete: bool,
    },
    /// Truncate to `keep` frames and put `replaced` back inside them.
    Rejoin {
        keep: usize,
    },
}

impl Default for KnownFrames {
    fn default() -> KnownFrames {
        KnownFrames {
            frames: Vec::new(),
            end: UnwindEnd::Truncated,
            complete: false,
            undo: Undo::Nothing,
            replaced: Vec::new(),
            fresh: Vec::new(),
            spliced: 0,
        }
    }
}

impl KnownFrames {
    /// The stack pointer of the outermost frame, when these frames reached the thread's
    /// entry: nothing of the thread's stack above it is read.
    pub fn outermost_sp(&self) -> Option<u64> {
        if self.complete {
            self.frames.first().map(|f| f.sp)
        } else {
            None
        }
    }

    /// The index of the frame whose return address `ra` was read just below stack pointer
    /// `sp`, the caller's frame of a frame at (`ra`, `sp`) in the current unwind.
    pub(super) fn find(&self, ra: u64, sp: u64) -> Option<usize> {
        if !self.complete {
            return None;
        }
        // Stack pointers decrease along `frames`.
        let at = self.frames.partition_point(|f| f.sp > sp);
        self.frames
            .get(at)
            .filter(|f| f.sp == sp && f.addr == ra && f.returned)
            .map(|_| at)
    }

    /// The index of the frame at stack pointer `sp` whose address is a return address, for
    /// a frame at `sp` in the current unwind stopped at another call.
    pub(super) fn at_sp(&self, sp: u64) -> Option<usize> {
        if !self.complete {
            return None;
        }
        let at = self.frames.partition_point(|f| f.sp > sp);
        self.frames
            .get(at)
            .filter(|f| f.sp == sp && f.returned)
            .map(|_| at)
    }

    /// The frames of the last unwind from the caller whose frame begins at `cfa` outward,
    /// innermost first, if that unwind reached its thread's entry and the frame inside that
    /// caller is at a code address within 64 KiB of `inner`: the frame of a fault whose
    /// copy was empty, still running (or its successor at the same place in the same caller).
    pub fn callers_at(&self, cfa: u64, inner: u64) -> Option<impl Iterator<Item = u64> + '_> {
        let at = self.at_sp(cfa)?;
        let inside = self.frames.get(at + 1)?;
        if inside.addr.abs_diff(inner) > 0x10000 {
            return None;
        }
        Some(self.frames[..=at].iter().rev().map(|f| f.addr))
    }

    /// Whether the live stack holds the return addresses of the frames outside frame `at`
    /// (over [`AGREE_SPAN`] bytes), or cannot be read (the thread is gone): the same return
    /// address at the same stack address may have been reached through other callers, which
    /// the live stack shows while the thread is still in that call.
    pub(super) fn agrees(&self, at: usize, live: &mut LiveStack) -> bool {
        let Some(shared) = self.frames.get(at) else {
            return true;
        };
        for frame in self.frames[..at].iter().rev() {
            // A signal frame's address was not pushed by a call.
            if !frame.returned || frame.sp.saturating_sub(shared.sp) > AGREE_SPAN {
                break;
            }
            match live.peek(frame.sp.wrapping_sub(8)) {
                Some(word) if word == frame.addr => {}
                Some(_) => return false,
                None => break,
            }
        }
        true
    }

    /// Says whether the stack of the last unwind reached its thread's entry. If it did not
    /// and the frames before it did, those stay the ones to complete the next stack from.
    pub fn settle(&mut self, complete: bool) {
        match std::mem::replace(&mut self.undo, Undo::Nothing) {
            _ if complete => self.complete = true,
            Undo::Nothing => {}
            Undo::Replace {
                end,
                complete: true,
            } => {
                std::mem::swap(&mut self.frames, &mut self.replaced);
                self.end = end;
                self.complete = true;
            }
            Undo::Replace { .. } => self.complete = false,
            Undo::Rejoin { keep } => {
                self.frames.truncate(keep);
                self.frames.append(&mut self.replaced);
            }
        }
    }

    /// The frames a child forked by this thread starts with: its stack is a copy of this
    /// thread's, at the same addresses.
    pub fn forked(&self) -> KnownFrames {
        if !self.complete {
            return KnownFrames::default();
        }
        KnownFrames {
            frames: self.frames.clone(),
            end: self.end,
            complete: true,
            ..KnownFrames::default()
        }
    }
}
