use super::*;

use std::ops::Range;
use std::sync::{Arc, OnceLock};

use framehop::x86_64::CacheX86_64;

use elf_cache::ElfFile;
use unwinder::{LazyCall, MappedCode};

fn elf_with_segments(segments: Vec<(u64, u64, u64)>) -> ElfFile {
    ElfFile {
        file: Arc::new(
            memmap2::MmapMut::map_anon(1)
                .expect("anonymous map")
                .make_read_only()
                .expect("read-only"),
        ),
        sections: Vec::new(),
        segments,
        build_id: String::new(),
        functions: OnceLock::new(),
    }
}

/// A stack of frame-pointer records in our own memory (the unwinder falls back to frame
/// pointers where it knows no module), read by the live reader through our own pid.
struct FakeStack {
    mem: memmap2::MmapMut,
}

/// Return addresses of the fake code (all inside one mapping the unwinder knows).
const CODE: Range<u64> = 0x40_0000..0x50_0000;
const IP: u64 = 0x40_0100;
const MAIN: u64 = 0x40_9000;
/// Words between two frame records: 512-byte frames.
const FRAME_WORDS: usize = 64;

impl FakeStack {
    /// Frames calling `ras` (innermost first); the outermost record ends the chain.
    fn new(ras: &[u64]) -> FakeStack {
        let mem = memmap2::MmapMut::map_anon(16384).expect("anonymous map");
        let mut stack = FakeStack { mem };
        stack.write(ras);
        stack
    }

    /// The thread's stack now holds frames calling `ras`, at the same addresses.
    fn write(&mut self, ras: &[u64]) {
        let base = self.sp();
        let word = |k: usize| 8 + FRAME_WORDS * k;
        for (k, &ra) in ras.iter().enumerate() {
            let next = if k + 1 < ras.len() {
                base + 8 * word(k + 1) as u64
            } else {
                0
            };
            let at = 8 * word(k);
            self.mem[at..at + 8].copy_from_slice(&next.to_ne_bytes());
            self.mem[at + 8..at + 16].copy_from_slice(&ra.to_ne_bytes());
        }
    }

    fn sp(&self) -> u64 {
        self.mem.as_ptr() as u64
    }

    fn regs(&self) -> (u64, u64, u64) {
        (IP, self.sp(), self.sp() + 64)
    }

    /// The copy up to (not including) the return address of the frame record `k`.
    fn copy_to(&self, k: usize) -> &[u8] {
        &self.mem[..8 * (8 + FRAME_WORDS * k) + 8]
    }

    fn live(&self, readable: bool) -> LiveStack {
        let mut live = LiveStack::new(if readable { std::process::id() } else { 0 });
        live.reset((self.sp(), self.sp() + self.mem.len() as u64));
        live
    }
}

fn unwinder() -> AddressSpaceUnwinder {
    let mut unwinder = AddressSpaceUnwinder::default();
    unwinder.code.push(MappedCode {
        range: CODE,
        elf: Arc::new(elf_with_segments(Vec::new())),
        offset: 0,
        bias: 0,
    });
    unwinder
}

fn unwind(
    unwinder: &AddressSpaceUnwinder,
    stack: &FakeStack,
    copy: &[u8],
    readable: bool,
    known: &mut KnownFrames,
) -> (Vec<u64>, UnwindEnd) {
    unwind_copy(unwinder, stack, copy.into(), readable, known)
}

fn unwind_copy(
    unwinder: &AddressSpaceUnwinder,
    stack: &FakeStack,
    copy: StackBytes<'_>,
    readable: bool,
    known: &mut KnownFrames,
) -> (Vec<u64>, UnwindEnd) {
    let mut frames = Vec::new();
    let mut live = stack.live(readable);
    let thread = ThreadStack {
        regs: stack.regs(),
        rbx: None,
        stack: copy,
        beyond: &mut live,
        is_exec: Some(&|_| true),
        known,
    };
    let end = unwinder.unwind_thread(&mut CacheX86_64::new(), thread, &mut frames);
    known.settle(end == UnwindEnd::Complete);
    (frames, end)
}

/// Where the copy ends, the thread's previous complete stack gives the outer frames while
/// the live stack agrees with it or is gone; where the live stack holds another caller at
/// the same place (the same return address at the same stack address, reached through
/// `via_b` instead of `via_a`), the live stack's frames are taken.
#[test]
fn outer_frames_come_from_the_previous_stack_unless_the_live_stack_contradicts_it() {
    let (r1, r2, r3, via_a, via_b) = (0x40_1005, 0x40_2005, 0x40_3005, 0x40_4005, 0x40_5005);
    let unwinder = unwinder();
    let mut stack = FakeStack::new(&[r1, r2, r3, via_a, MAIN]);
    let whole_a = [IP, r1, r2, r3, via_a, MAIN];
    let whole_b = [IP, r1, r2, r3, via_b, MAIN];

    let mut known = KnownFrames::default();
    let first = unwind(&unwinder, &stack, &stack.mem, false, &mut known);
    assert_eq!(first, (whole_a.to_vec(), UnwindEnd::Complete));
    // Copy short, live stack gone: the previous stack's outer frames.
    let gone = unwind(&unwinder, &stack, stack.copy_to(2), false, &mut known);
    assert_eq!(gone, (whole_a.to_vec(), UnwindEnd::Complete));
    assert_eq!(known.spliced, 1);
    // Copy short, live stack agreeing: the same, checked.
    let agreed = unwind(&unwinder, &stack, stack.copy_to(2), true, &mut known);
    assert_eq!(agreed, (whole_a.to_vec(), UnwindEnd::Complete));
    assert_eq!(known.spliced, 2);
    // Another caller in the live stack: not `via_a`. (The live unwind joins the previous
    // stack again at `main`, where the two agree.)
    stack.write(&[r1, r2, r3, via_b, MAIN]);
    let other = unwind(&unwinder, &stack, stack.copy_to(2), true, &mut known);
    assert_eq!(other, (whole_b.to_vec(), UnwindEnd::Complete));
    assert_eq!(known.spliced, 3);
    // A live stack that does not lead back to the previous one (the thread moved on: its
    // words are no frames now) contradicts it without an alternative: spliced.
    stack.write(&[r1, r2, r3, 0x77, 0x88]);
    let spliced = unwind(&unwinder, &stack, stack.copy_to(2), true, &mut known);
    assert_eq!(spliced, (whole_b.to_vec(), UnwindEnd::Complete));
    assert_eq!(known.spliced, 4);
}

/// A truncated stack does not replace the thread's last complete frames: the next stack
/// still completes from those.
#[test]
fn a_truncated_stack_keeps_the_previous_complete_frames() {
    let (r1, r2, r3, caller) = (0x40_1005, 0x40_2005, 0x40_3005, 0x40_4005);
    let unwinder = unwinder();
    let stack = FakeStack::new(&[r1, r2, r3, caller, MAIN]);
    let whole = [IP, r1, r2, r3, caller, MAIN];
    let mut known = KnownFrames::default();
    unwind(&unwinder, &stack, &stack.mem, false, &mut known);
    // Another thread state, whose copy ends before any frame the previous stack had and
    // whose live stack is gone: truncated.
    let elsewhere = FakeStack::new(&[0x40_6005, 0x40_7005, 0x40_8005, MAIN]);
    let (_, end) = unwind(
        &unwinder,
        &elsewhere,
        elsewhere.copy_to(0),
        false,
        &mut known,
    );
    assert_eq!(end, UnwindEnd::Truncated);
    let next = unwind(&unwinder, &stack, stack.copy_to(2), false, &mut known);
    assert_eq!(next, (whole.to_vec(), UnwindEnd::Complete));
    // A forked child starts from them too.
    let mut child = known.forked();
    let forked = unwind(&unwinder, &stack, stack.copy_to(1), false, &mut child);
    assert_eq!(forked, (whole.to_vec(), UnwindEnd::Complete));
}

/// A return address found for the dynamic loader's resolver is its caller only with what
/// the PLT pushed below it: the lazy entry's relocation index, then the object's link map
/// (the word of its GOT slot, read from the process, here our own). A stale return
/// address of another call through the PLT has another index, or another object's map.
#[test]
fn a_lazy_call_leaves_its_index_and_link_map_below_the_return_address() {
    let link_map_word: Box<u64> = Box::new(0x7f00_dead_b000);
    let slot = &*link_map_word as *const u64 as u64;
    let lazy = LazyCall {
        index: 3,
        link_map: slot,
    };
    let unwinder = unwinder();
    let mut live = LiveStack::new(std::process::id());
    let ra_at = 0x1000;
    let check = |words: [u64; 2], live: &mut LiveStack| {
        let mut read = |addr: u64| match addr {
            0xff0 => Some(words[0]),
            0xff8 => Some(words[1]),
            _ => None,
        };
        unwinder.lazy_frame_holds(lazy, ra_at, &mut read, live)
    };
    assert!(check([0x7f00_dead_b000, 3], &mut live));
    assert!(
        !check([0x7f00_dead_b000, 4], &mut live),
        "another entry's index"
    );
    assert!(
        !check([0x7f00_beef_b000, 3], &mut live),
        "another object's map"
    );
    // The process gone: the link map cannot be checked.
    assert!(!check([0x7f00_dead_b000, 3], &mut LiveStack::new(0)));
    drop(link_map_word);
}

/// A zero word where a return address should be (a live stack that moved on, a stale
/// word) ends the unwind without making it complete, and the thread's known frames stay
/// those of its last complete stack; the end of a frame chain still completes it.
#[test]
fn a_zero_return_address_is_no_end() {
    let (r1, r2, r3) = (0x40_1005, 0x40_2005, 0x40_3005);
    let unwinder = unwinder();
    let whole = FakeStack::new(&[r1, r2, r3, MAIN]);
    let mut known = KnownFrames::default();
    let complete = unwind(&unwinder, &whole, &whole.mem, false, &mut known);
    assert_eq!(complete, (vec![IP, r1, r2, r3, MAIN], UnwindEnd::Complete));
    let zero = FakeStack::new(&[r1, r2, 0, MAIN]);
    let (frames, end) = unwind(&unwinder, &zero, &zero.mem, false, &mut known);
    assert_eq!((frames, end), (vec![IP, r1, r2], UnwindEnd::Stopped));
    assert!(known.complete);
    assert_eq!(
        known.frames.len(),
        4,
        "the complete stack's frames, not the short one's"
    );
}

/// A word in a hole of the copy (a page it could not read, whose bytes the program zeroes)
/// is a failed read: neither a zero return address that would end the stack, nor a word
/// read from the live process (which has moved on since the fault). Past the hole, the
/// copy is read as ever.
#[test]
fn a_word_in_a_hole_of_the_copy_is_never_read() {
    let (r1, r2, r3) = (0x40_1005, 0x40_2005, 0x40_3005);
    let unwinder = unwinder();
    let stack = FakeStack::new(&[r1, r2, r3, MAIN]);
    // Frame records lie at bytes 64, 576, 1088 (the one holding r3) and 1600, 16 each.
    let mut copy = stack.mem.to_vec();
    copy[1024..1536].fill(0);
    let holed = StackBytes {
        bytes: &copy,
        holes: Holes::new(&[(1024, 1536)]).expect("holes"),
    };
    let mut known = KnownFrames::default();
    let (frames, end) = unwind_copy(&unwinder, &stack, holed, true, &mut known);
    assert_eq!((frames, end), (vec![IP, r1, r2], UnwindEnd::Truncated));
    // A hole that holds no word of the chain changes nothing.
    let mut copy = stack.mem.to_vec();
    copy[1152..1536].fill(0);
    let apart = StackBytes {
        bytes: &copy,
        holes: Holes::new(&[(1152, 1536)]).expect("holes"),
    };
    let mut known = KnownFrames::default();
    let whole = unwind_copy(&unwinder, &stack, apart, false, &mut known);
    assert_eq!(whole, (vec![IP, r1, r2, r3, MAIN], UnwindEnd::Complete));
    // Holes out of order, overlapping, empty or too many are refused.
    assert!(Holes::new(&[(8, 16), (0, 8)]).is_none());
    assert!(Holes::new(&[(0, 16), (8, 24)]).is_none());
    assert!(Holes::new(&[(8, 8)]).is_none());
    assert!(Holes::new(&[(0, 8), (16, 24), (32, 40), (48, 56), (64, 72)]).is_none());
}

/// lld layout: r-- segment at offset 0 whose file range runs into the page where the r-x
/// segment (offset 0x13000, address 0x14000) starts. The bias must come from the r-x one.
#[test]
fn bias_uses_the_segment_starting_in_the_mapped_page() {
    let elf = elf_with_segments(vec![(0, 0, 0x13e14), (0x13e20, 0x14e20, 0x3e000)]);
    assert_eq!(elf.bias(0x5555_0001_4000, 0x13000), Some(0x5555_0000_0000));
    // gcc/ld layout: offsets equal addresses.
    let elf = elf_with_segments(vec![(0, 0, 0x600), (0x1000, 0x1000, 0x200)]);
    assert_eq!(elf.bias(0x5555_0000_1000, 0x1000), Some(0x5555_0000_0000));
}
