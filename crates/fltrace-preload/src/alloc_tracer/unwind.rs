//! In-process stack unwinding for allocation calls: DWARF CFI with framehop over the loaded
//! objects' `.eh_frame`, read straight from memory, so programs built without frame pointers
//! get whole stacks.
//!
//! A full unwind costs a few hundred nanoseconds; allocation-heavy programs call malloc from
//! the same few places millions of times. So every thread keeps a cache of finished unwinds
//! keyed by the stack pointer at the capture point. An unwind is a pure function of the
//! starting registers and the stack words it read: if `sp` is the same and every word read
//! last time still holds the same value, the result is the same, and checking a dozen words
//! is all a repeated call costs. Words whose change did not change the result once (a saved
//! register that only held data) are not checked again.

use std::ops::Range;
use std::sync::atomic::{AtomicPtr, Ordering};

use framehop::x86_64::{CacheX86_64, UnwindRegsX86_64, UnwinderX86_64};
use framehop::{ExplicitModuleSectionInfo, Module, Unwinder};

use fltrace_runtime_abi::alloclog::MAX_FRAMES;

type Bytes = &'static [u8];

/// The loaded objects, as framehop modules. Replaced (never changed) when objects come or go.
pub struct Modules {
    unwinder: UnwinderX86_64<Bytes>,
    /// `dl_iterate_phdr`'s load and unload counters when this snapshot was taken.
    adds: u64,
    subs: u64,
    /// This library's own code: its frames are left out of recorded stacks.
    own: Range<u64>,
}

static MODULES: AtomicPtr<Modules> = AtomicPtr::new(std::ptr::null_mut());
static REBUILD: spinning_top::Spinlock<()> = spinning_top::Spinlock::new(());

/// Holds the rebuild lock across fork: a thread rebuilding when the process is copied would
/// leave the child's copy locked for ever.
pub fn lock_for_fork() {
    std::mem::forget(REBUILD.lock());
}

/// Unlocks after fork, in parent and child.
pub fn unlock_after_fork() {
    // SAFETY: `lock_for_fork` left it held by this thread.
    unsafe { REBUILD.force_unlock() };
}

/// The current snapshot, taken again if objects were loaded or unloaded since.
pub fn modules() -> &'static Modules {
    let (adds, subs) = load_counters();
    let current = MODULES.load(Ordering::Acquire);
    // SAFETY: snapshots are leaked, never freed: a published pointer stays valid.
    if let Some(m) = unsafe { current.as_ref() }
        && m.adds == adds
        && m.subs == subs
    {
        return m;
    }
    let _guard = REBUILD.lock();
    let current = MODULES.load(Ordering::Acquire);
    // SAFETY: as above.
    if let Some(m) = unsafe { current.as_ref() }
        && m.adds == adds
        && m.subs == subs
    {
        return m;
    }
    let fresh: &'static Modules = Box::leak(Box::new(scan(adds, subs)));
    MODULES.store((fresh as *const Modules).cast_mut(), Ordering::Release);
    fresh
}

fn load_counters() -> (u64, u64) {
    unsafe extern "C" fn first(
        info: *mut libc::dl_phdr_info,
        _: usize,
        out: *mut libc::c_void,
    ) -> i32 {
        // SAFETY: dl_iterate_phdr passes a valid info; `out` is our (u64, u64).
        unsafe {
            let counters = &mut *out.cast::<(u64, u64)>();
            *counters = ((*info).dlpi_adds, (*info).dlpi_subs);
        }
        1
    }
    let mut counters = (0u64, 0u64);
    // SAFETY: the callback only reads the info it is given.
    unsafe { libc::dl_iterate_phdr(Some(first), (&raw mut counters).cast()) };
    counters
}

fn scan(adds: u64, subs: u64) -> Modules {
    struct Scan {
        unwinder: UnwinderX86_64<Bytes>,
        own: Range<u64>,
        own_probe: u64,
    }
    unsafe extern "C" fn each(
        info: *mut libc::dl_phdr_info,
        _: usize,
        data: *mut libc::c_void,
    ) -> i32 {
        // SAFETY: dl_iterate_phdr passes a valid info whose headers describe loaded memory;
        // `data` is our Scan.
        unsafe {
            let scan = &mut *data.cast::<Scan>();
            if let Some((module, text)) = module_of(&*info) {
                if text.contains(&scan.own_probe) {
                    scan.own = text;
                }
                scan.unwinder.add_module(module);
            }
        }
        0
    }
    let mut state = Scan {
        unwinder: UnwinderX86_64::new(),
        own: 0..0,
        own_probe: scan as *const () as u64,
    };
    // SAFETY: the callback reads program headers of loaded objects only.
    unsafe { libc::dl_iterate_phdr(Some(each), (&raw mut state).cast()) };
    Modules {
        unwinder: state.unwinder,
        adds,
        subs,
        own: state.own,
    }
}

/// The framehop module of a loaded object and its code's address range.
///
/// # Safety
/// `info` must describe an object that is loaded (as `dl_iterate_phdr` gives it).
unsafe fn module_of(info: &libc::dl_phdr_info) -> Option<(Module<Bytes>, Range<u64>)> {
    let bias = info.dlpi_addr;
    // SAFETY: the loader's program headers of this object.
    let headers =
        unsafe { std::slice::from_raw_parts(info.dlpi_phdr, usize::from(info.dlpi_phnum)) };
    let loads: Vec<Range<u64>> = headers
        .iter()
        .filter(|h| h.p_type == libc::PT_LOAD)
        .map(|h| h.p_vaddr..h.p_vaddr + h.p_memsz)
        .collect();
    let text = headers
        .iter()
        .find(|h| h.p_type == libc::PT_LOAD && h.p_flags & libc::PF_X != 0)
        .map(|h| h.p_vaddr..h.p_vaddr + h.p_memsz)?;
    let hdr = headers.iter().find(|h| h.p_type == libc::PT_GNU_EH_FRAME)?;
    let hdr_svma = hdr.p_vaddr..hdr.p_vaddr + hdr.p_memsz;
    // SAFETY: PT_GNU_EH_FRAME lies inside a loaded segment, mapped readable.
    let hdr_bytes: Bytes = unsafe {
        std::slice::from_raw_parts((bias + hdr.p_vaddr) as *const u8, hdr.p_memsz as usize)
    };
    let eh_frame_svma = eh_frame_start(hdr_bytes, hdr.p_vaddr, bias)?;
    // The header does not say how long .eh_frame is: it runs at most to its segment's end.
    let segment = loads.iter().find(|r| r.contains(&eh_frame_svma))?;
    let eh_frame_svma = eh_frame_svma..segment.end;
    // SAFETY: inside a loaded segment.
    let eh_frame: Bytes = unsafe {
        std::slice::from_raw_parts(
            (bias + eh_frame_svma.start) as *const u8,
            (eh_frame_svma.end - eh_frame_svma.start) as usize,
        )
    };
    let start = loads.iter().map(|r| r.start).min()? + bias;
    let end = loads.iter().map(|r| r.end).max()? + bias;
    let info = ExplicitModuleSectionInfo {
        base_svma: 0,
        text_svma: Some(text.clone()),
        eh_frame_svma: Some(eh_frame_svma),
        eh_frame: Some(eh_frame),
        eh_frame_hdr_svma: Some(hdr_svma),
        eh_frame_hdr: Some(hdr_bytes),
        ..Default::default()
    };
    let module = Module::new(String::new(), start..end, bias, info);
    Some((module, text.start + bias..text.end + bias))
}

/// The `.eh_frame` address that `.eh_frame_hdr` points to (its usual encodings only).
fn eh_frame_start(hdr: &[u8], hdr_svma: u64, bias: u64) -> Option<u64> {
    const PCREL_SDATA4: u8 = 0x1b;
    const UDATA4: u8 = 0x03;
    const ABSPTR: u8 = 0x00;
    if hdr.len() < 8 || hdr[0] != 1 {
        return None;
    }
    let word = |n: usize| -> Option<[u8; 8]> {
        let mut b = [0u8; 8];
        b[..n].copy_from_slice(hdr.get(4..4 + n)?);
        Some(b)
    };
    match hdr[1] {
        PCREL_SDATA4 => {
            let delta = i32::from_le_bytes(word(4)?[..4].try_into().ok()?);
            Some((hdr_svma + 4).wrapping_add(delta as i64 as u64))
        }
        UDATA4 => Some(u64::from(u32::from_le_bytes(
            word(4)?[..4].try_into().ok()?,
        ))),
        // An absolute pointer is a run-time address: subtract the bias.
        ABSPTR => Some(u64::from_le_bytes(word(8)?).wrapping_sub(bias)),
        _ => None,
    }
}

/// Registers at the capture point.
#[derive(Clone, Copy)]
pub struct Regs {
    pub ip: u64,
    pub sp: u64,
    pub bp: u64,
}

/// Reads this function's registers: unwinding starts here and goes out through the
/// interposer's frames, which are then dropped.
#[inline(always)]
pub fn here() -> Regs {
    let (ip, sp, bp): (u64, u64, u64);
    // SAFETY: reads three registers, touches no memory.
    unsafe {
        std::arch::asm!(
            "lea {ip}, [rip]",
            "mov {sp}, rsp",
            "mov {bp}, rbp",
            ip = out(reg) ip,
            sp = out(reg) sp,
            bp = out(reg) bp,
            options(nomem, nostack, preserves_flags)
        );
    }
    Regs { ip, sp, bp }
}

/// The signal stack this thread is running on, if `sp` is inside it.
fn signal_stack(sp: u64) -> Option<Range<u64>> {
    // SAFETY: querying only (no new stack), into a zeroed stack_t.
    let mut current: libc::stack_t = unsafe { std::mem::zeroed() };
    // SAFETY: as above.
    if unsafe { libc::sigaltstack(std::ptr::null(), &mut current) } != 0
        || current.ss_flags & libc::SS_ONSTACK == 0
    {
        return None;
    }
    let start = current.ss_sp as u64;
    let range = start..start.checked_add(current.ss_size as u64)?;
    range.contains(&sp).then_some(range)
}

/// The most stack words one cached unwind may depend on.
pub const MAX_READS: usize = 48;

/// A finished unwind and what it depended on.
#[derive(Clone, Copy)]
pub struct Unwound {
    pub sp: u64,
    pub bp: u64,
    pub bp_matters: bool,
    pub reads: u8,
    /// Bit i: read i matters.
    pub care: u64,
    pub read_at: [u64; MAX_READS],
    pub read_value: [u64; MAX_READS],
    /// The stack's id in the log, or `u32::MAX` for an empty slot.
    pub stack_id: u32,
}

impl Unwound {
    pub const EMPTY: Unwound = Unwound {
        sp: 0,
        bp: 0,
        bp_matters: true,
        reads: 0,
        care: 0,
        read_at: [0; MAX_READS],
        read_value: [0; MAX_READS],
        stack_id: u32::MAX,
    };

    /// Whether this unwind still holds for `regs`.
    #[inline]
    pub fn still_holds(&self, regs: &Regs) -> bool {
        if self.stack_id == u32::MAX
            || self.sp != regs.sp
            || (self.bp_matters && self.bp != regs.bp)
        {
            return false;
        }
        // Only the words that matter, by their bits.
        let mut care = self.care;
        while care != 0 {
            let i = care.trailing_zeros() as usize;
            care &= care - 1;
            // SAFETY: the address was inside this thread's stack, above the same `sp`, when it
            // was read; that part of the stack is still mapped.
            if unsafe { std::ptr::read_volatile(self.read_at[i % MAX_READS] as *const u64) }
                != self.read_value[i % MAX_READS]
            {
                return false;
            }
        }
        true
    }
}

/// One thread's unwinding state.
pub struct ThreadUnwinder {
    cache: CacheX86_64,
    /// The thread's stack: reads outside it are refused.
    pub stack: Range<u64>,
    /// The last other stack the thread ran on (a sigaltstack, a coroutine's), found when the
    /// stack pointer first left `stack` for it.
    other: Range<u64>,
}

impl ThreadUnwinder {
    pub fn new(stack: Range<u64>) -> Self {
        ThreadUnwinder {
            cache: CacheX86_64::new(),
            stack,
            other: 0..0,
        }
    }

    /// Whether `sp` is on the thread's own stack (unwinds there may be cached: that memory
    /// stays mapped for the thread's life).
    pub fn on_thread_stack(&self, sp: u64) -> bool {
        self.stack.contains(&sp)
    }

    /// The stack `sp` is on: the thread's, the signal stack in use, or else the mapping that
    /// holds `sp` (a coroutine's stack); an empty range when none is found.
    fn current_stack(&mut self, sp: u64) -> Range<u64> {
        if self.stack.contains(&sp) {
            return self.stack.clone();
        }
        if !self.other.contains(&sp) {
            self.other = signal_stack(sp).unwrap_or_else(|| super::mapping_of(sp));
        }
        self.other.clone()
    }

    /// Unwinds from `regs`: the program's frames go to `frames` (this library's own are
    /// skipped), the words read to `out` (with `out.reads = 0xff` when there were too many to
    /// keep). Returns the number of frames.
    pub fn unwind(
        &mut self,
        regs: Regs,
        frames: &mut [u64; MAX_FRAMES],
        out: &mut Unwound,
    ) -> usize {
        let modules = modules();
        // Reads stay between the stack pointer and the end of the stack it is on: from a
        // signal stack or a coroutine's, the thread's own stack end is not a bound.
        let stack = self.current_stack(regs.sp);
        let mut reads = 0usize;
        let mut overflow = false;
        let mut read_stack = |addr: u64| -> Result<u64, ()> {
            if addr < regs.sp
                || addr.checked_add(8).is_none_or(|end| end > stack.end)
                || !addr.is_multiple_of(8)
            {
                return Err(());
            }
            // SAFETY: an aligned word of this thread's stack, at or above its stack pointer.
            let value = unsafe { std::ptr::read_volatile(addr as *const u64) };
            if reads < MAX_READS {
                out.read_at[reads] = addr;
                out.read_value[reads] = value;
                reads += 1;
            } else {
                overflow = true;
            }
            Ok(value)
        };
        let mut iter = modules.unwinder.iter_frames(
            regs.ip,
            UnwindRegsX86_64::new(regs.ip, regs.sp, regs.bp),
            &mut self.cache,
            &mut read_stack,
        );
        let mut len = 0;
        let mut own = true;
        while let Ok(Some(frame)) = iter.next() {
            let address = frame.address();
            if own && modules.own.contains(&address) {
                continue;
            }
            own = false;
            if address == 0 || len == MAX_FRAMES {
                break;
            }
            frames[len] = address;
            len += 1;
        }
        out.sp = regs.sp;
        out.bp = regs.bp;
        out.bp_matters = true;
        out.reads = if overflow { 0xff } else { reads as u8 };
        out.care = (1u64 << reads) - 1;
        len
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The usual `.eh_frame_hdr` encoding (pc-relative, signed 4 bytes) resolves to the
    /// address it points to.
    #[test]
    fn eh_frame_pointer_decodes() {
        let mut hdr = [1u8, 0x1b, 0x03, 0x3b, 0, 0, 0, 0];
        hdr[4..8].copy_from_slice(&(-0x100i32).to_le_bytes());
        assert_eq!(eh_frame_start(&hdr, 0x2000, 0), Some(0x2004 - 0x100));
        hdr[1] = 0x03;
        hdr[4..8].copy_from_slice(&0x3000u32.to_le_bytes());
        assert_eq!(eh_frame_start(&hdr, 0x2000, 0), Some(0x3000));
        hdr[0] = 2;
        assert_eq!(eh_frame_start(&hdr, 0x2000, 0), None);
    }

    /// This test binary's own stack unwinds through its loaded objects to the thread's start.
    #[test]
    fn unwinds_own_stack() {
        let modules = modules();
        assert!(!modules.own.is_empty());
    }
}
