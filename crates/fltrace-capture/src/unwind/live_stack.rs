//! Reads of a thread's stack beyond the sampled copy, from the live process.

/// Reads the part of a thread's stack that lies beyond the sampled copy from the live process.
///
/// The copy in each sample covers the innermost frames, which change all the time; the outer
/// frames (`main`, a thread's start routine, a long-running loop) are still in place when the
/// recorder reads them microseconds later, because the thread is still inside those calls.
/// This keeps the per-fault copy small (the kernel copies the whole requested size on every
/// fault) while stacks still reach their outermost frame. Reads that fail (the process is
/// gone) end the unwind as truncated.
pub struct LiveStack {
    pub(super) pid: i32,
    /// The stack mapping of the sampled thread: reads outside it are refused, so that a bad
    /// unwind rule cannot make the recorder touch (and fault in) other memory of the program.
    pub(super) bounds: (u64, u64),
    pub(super) base: u64,
    pub(super) len: usize,
    pub(super) chunk: Box<[u8; LIVE_CHUNK]>,
    /// Whether any word came from the live process during the current unwind.
    pub used: bool,
    /// Whether a word was needed that neither the copy nor the live process had.
    pub failed: bool,
    /// Whether a caller was found by searching the stack, verified
    /// ([`AddressSpaceUnwinder::unwind_thread`]).
    pub scanned: bool,
    /// Whether the unwind stopped at a frame whose caller could not be verified (or JIT code
    /// without a frame chain): the stack is truncated there rather than guessed.
    pub unverified: bool,
}

pub(super) const LIVE_CHUNK: usize = 4096;

impl LiveStack {
    /// A reader for process `pid`; a pid of 0 makes every read fail (exact copies only).
    pub fn new(pid: u32) -> LiveStack {
        LiveStack {
            pid: pid as i32,
            bounds: (0, 0),
            base: 0,
            len: 0,
            chunk: Box::new([0; LIVE_CHUNK]),
            used: false,
            failed: false,
            scanned: false,
            unverified: false,
        }
    }

    /// Whether this reader reads the live process at all (not for exact stacks).
    pub fn reads(&self) -> bool {
        self.pid > 0
    }

    /// Forgets what was read (the stack may have changed since) and sets the stack mapping
    /// that reads are confined to.
    pub fn reset(&mut self, bounds: (u64, u64)) {
        self.bounds = bounds;
        self.len = 0;
        self.used = false;
        self.failed = false;
        self.scanned = false;
        self.unverified = false;
    }

    pub(super) fn read(&mut self, addr: u64) -> Option<u64> {
        let word = self.read_word(addr);
        self.used |= word.is_some();
        self.failed |= word.is_none();
        word
    }

    /// Reads a word to check a stack against, not to unwind over: neither `used` nor
    /// `failed` changes.
    pub(super) fn peek(&mut self, addr: u64) -> Option<u64> {
        self.read_word(addr)
    }

    /// Reads a word of the process outside its stack, a GOT slot a PLT stub jumps through,
    /// to check a call against (data the dynamic loader wrote: no page is faulted in).
    /// Neither `used` nor `failed` changes.
    pub(super) fn read_data(&mut self, addr: u64) -> Option<u64> {
        if self.pid <= 0 {
            return None;
        }
        let mut word = [0u8; 8];
        let n = crate::os::read_process_memory(self.pid, addr, &mut word);
        (n == 8).then(|| u64::from_ne_bytes(word))
    }

    pub(super) fn read_word(&mut self, addr: u64) -> Option<u64> {
        if self.pid <= 0 || addr < self.bounds.0 || addr + 8 > self.bounds.1 {
            return None;
        }
        if !(self.base <= addr && addr + 8 <= self.base + self.len as u64) {
            let base =
                (addr & !(LIVE_CHUNK as u64 - 1)).max(self.bounds.0 & !(LIVE_CHUNK as u64 - 1));
            let n = crate::os::read_process_memory(self.pid, base, &mut self.chunk[..]);
            if n == 0 {
                self.len = 0;
                return None;
            }
            self.base = base;
            self.len = n;
            if addr + 8 > base + n as u64 {
                return None;
            }
        }
        let offset = (addr - self.base) as usize;
        let mut word = [0; 8];
        word.copy_from_slice(&self.chunk[offset..offset + 8]);
        Some(u64::from_ne_bytes(word))
    }
}
