//! `record --allocs`: every call into the allocator and every mapping call, with its stack,
//! written to the process's allocation log (`fltrace_runtime_abi::alloclog`).
//!
//! The interposed functions call [`enter`] first and [`Entry::finish`] with the result. The
//! per-call cost is kept to a cached unwind check (see `unwind`), a load of the recorder's
//! clock word and a record of about 6 bytes written to the thread's own chunk of a shared
//! file mapping, with no lock and no system call. Calls made while the thread is already
//! inside the tracer (the C library allocating on our behalf, a signal handler interrupting
//! us) go through untraced.

mod log;
mod unwind;

use std::cell::Cell;
use std::sync::atomic::{AtomicPtr, AtomicU8, AtomicU32, Ordering::*, compiler_fence};

use fltrace_runtime_abi::alloclog::{
    CHUNK_HEADER_SIZE, CHUNK_SIZE, CallRecord, ChunkHeader, Clock, Cursor, MAX_FRAMES, MAX_RECORD,
    call,
};
use fltrace_runtime_abi::env;

use crate::sys;
use log::Log;
use unwind::{Regs, ThreadUnwinder, Unwound};

const UNINIT: u8 = 0;
const STARTING: u8 = 1;
const ON: u8 = 2;
const OFF: u8 = 3;

static STATE: AtomicU8 = AtomicU8::new(UNINIT);
static LOG: AtomicPtr<Log> = AtomicPtr::new(std::ptr::null_mut());
/// The recorder's clock page.
static CLOCK: AtomicPtr<Clock> = AtomicPtr::new(std::ptr::null_mut());
/// The next stack id of this process's log.
static NEXT_STACK: AtomicU32 = AtomicU32::new(0);

/// Bytes of a chunk available for records.
const RECORD_SPACE: usize = CHUNK_SIZE - CHUNK_HEADER_SIZE;
/// Cached unwinds per thread (direct-mapped by stack pointer).
const UNWOUND_SLOTS: usize = 256;
/// Stacks a thread remembers having defined (direct-mapped by hash).
const STACK_SLOTS: usize = 4096;

/// The tracer's thread-local variables, together: one TLS lookup per call.
struct Local {
    /// Set while the thread is inside the tracer.
    busy: Cell<bool>,
    state: Cell<*mut ThreadState>,
}

thread_local! {
    static LOCAL: Local = const {
        Local {
            busy: Cell::new(false),
            state: Cell::new(std::ptr::null_mut()),
        }
    };
}

/// A traced call in progress.
pub struct Entry {
    call: u8,
    precise: bool,
    local: *const Local,
}

/// Starts tracing a call (a number from `alloclog::call`), or `None` when tracing is off or
/// the thread is already inside the tracer.
#[inline]
pub fn enter(call: u8) -> Option<Entry> {
    match STATE.load(Relaxed) {
        ON => {}
        UNINIT => {
            start();
            if STATE.load(Acquire) != ON {
                return None;
            }
        }
        _ => return None,
    }
    LOCAL.with(|local| {
        let was_busy = local.busy.replace(true);
        // The flag is set before anything the tracer does: a signal handler that interrupts
        // this thread and allocates must see it (same thread, so a compiler fence suffices).
        compiler_fence(SeqCst);
        if was_busy {
            None
        } else {
            // munmap and mremap end mappings whose pages the program has just been filling:
            // their time must not be a millisecond early (see `Entry::precise`).
            let precise = matches!(call, call::MUNMAP | call::MREMAP);
            Some(Entry {
                call,
                precise,
                local,
            })
        }
    })
}

impl Entry {
    /// Times the call exactly (a `clock_gettime`, 20 ns) rather than with the recorder's
    /// millisecond clock. For calls that end blocks of a page or more: the program often fills
    /// such a block just before giving it back, and a free stamped up to a millisecond early
    /// would leave those faults outside the block.
    pub fn precise(&mut self) {
        self.precise = true;
    }

    /// Records the call's outcome (see `fltrace_trace::AllocEvent` for the fields).
    #[inline(always)]
    pub fn finish(self, addr: u64, size: u64, old_addr: u64, detail: u64) {
        let regs = unwind::here();
        let call = self.call;
        // SAFETY: this thread's own variables, alive while the thread runs.
        let local = unsafe { &*self.local };
        if let Some(state) = thread_state(local) {
            let stack_id = if call::has_stack(call) {
                state.stack_id(regs)
            } else {
                u32::MAX
            };
            let time = if self.precise {
                sys::monotonic_ns_vdso()
            } else {
                now_ns()
            };
            state.write_call(
                time,
                &CallRecord {
                    call,
                    addr,
                    size,
                    old_addr,
                    detail,
                    stack_id,
                },
            );
        }
        // Every write of the record comes before the flag is cleared (see `enter`).
        compiler_fence(SeqCst);
        local.busy.set(false);
    }
}

/// The recorder's clock, CLOCK_MONOTONIC nanoseconds to about a millisecond.
#[inline(always)]
fn now_ns() -> u64 {
    // SAFETY: the clock page is mapped before tracing starts and never unmapped.
    unsafe { CLOCK.load(Relaxed).as_ref() }.map_or(0, |c| c.now_ns.load(Relaxed))
}

/// Maps `<prefix>-clock`, the page whose clock word the recorder keeps current.
fn map_clock(prefix: &[u8]) -> Option<*mut Clock> {
    let mut path = [0u8; 600];
    let suffix = b"-clock";
    if prefix.len() + suffix.len() >= path.len() {
        return None;
    }
    path[..prefix.len()].copy_from_slice(prefix);
    path[prefix.len()..prefix.len() + suffix.len()].copy_from_slice(suffix);
    // SAFETY: a NUL-terminated path.
    let fd = unsafe {
        libc::open(
            path.as_ptr().cast(),
            libc::O_RDONLY | libc::O_CLOEXEC | libc::O_NOFOLLOW,
        )
    };
    if fd < 0 {
        return None;
    }
    let len = fltrace_runtime_abi::alloclog::CLOCK_SIZE;
    // SAFETY: a read-only shared mapping of the recorder's clock file.
    let p = unsafe { sys::map(0, len, libc::PROT_READ, libc::MAP_SHARED, fd, 0) };
    // SAFETY: our descriptor; the mapping keeps the file.
    unsafe { libc::close(fd) };
    (!p.is_null()).then_some(p.cast::<Clock>())
}

fn start() {
    if STATE
        .compare_exchange(UNINIT, STARTING, AcqRel, Acquire)
        .is_err()
    {
        return;
    }
    let Some(prefix) = sys::env_bytes(env::ALLOCS).filter(|p| !p.is_empty()) else {
        STATE.store(OFF, Release);
        return;
    };
    let Some(clock) = map_clock(prefix) else {
        sys::write_stderr(&[b"fltrace: the recorder's clock page is missing: allocations of this process are not traced\n"]);
        STATE.store(OFF, Release);
        return;
    };
    CLOCK.store(clock, Release);
    match Log::create(prefix) {
        Some(log) => {
            LOG.store(Box::into_raw(Box::new(log)), Release);
            // SAFETY: registering plain functions.
            unsafe {
                libc::pthread_atfork(
                    Some(before_fork),
                    Some(after_fork_parent),
                    Some(after_fork_child),
                )
            };
            STATE.store(ON, Release);
        }
        None => {
            sys::write_stderr(&[b"fltrace: cannot create the allocation log: allocations of this process are not traced\n"]);
            STATE.store(OFF, Release);
        }
    }
}

fn current_log() -> Option<&'static Log> {
    // SAFETY: logs are leaked, never freed, once published.
    unsafe { LOG.load(Acquire).as_ref() }
}

/// What a thread keeps between calls.
struct ThreadState {
    tid: u32,
    chunk: Option<&'static ChunkHeader>,
    records: *mut u8,
    pos: usize,
    cursor: Cursor,
    unwinder: ThreadUnwinder,
    unwound: [Unwound; UNWOUND_SLOTS],
    fresh: Unwound,
    stacks: [(u64, u32); STACK_SLOTS],
    frames: [u64; MAX_FRAMES],
}

/// This thread's state, made on its first traced call. Freed states are reused: threads come
/// and go, their states stay (see `release_thread`).
#[inline(always)]
fn thread_state(local: &Local) -> Option<&'static mut ThreadState> {
    let existing = local.state.get();
    // SAFETY: the pointer is this thread's own state, used by this thread only.
    match unsafe { existing.as_mut() } {
        Some(state) => Some(state),
        None => new_thread_state(local),
    }
}

#[cold]
#[inline(never)]
fn new_thread_state(local: &Local) -> Option<&'static mut ThreadState> {
    let stack = thread_stack();
    let reused = FREE_STATES.lock().pop();
    let state = match reused {
        Some(FreeState(reused)) => {
            // SAFETY: a state no thread uses any more, now this thread's.
            let state = unsafe { &mut *reused };
            state.clear_caches();
            state
        }
        None => {
            // Fresh pages rather than the heap: zero bytes are empty caches, and the kernel
            // only supplies the pages the thread's calls touch (a zeroed heap block of this
            // size was 65 page faults in every traced program).
            let p = sys::map_anonymous(std::mem::size_of::<ThreadState>(), 0).cast::<ThreadState>();
            if p.is_null() {
                return None;
            }
            // SAFETY: zeroed memory is a valid ThreadState except for the unwinder, written
            // here before any use.
            unsafe {
                (&raw mut (*p).unwinder).write(ThreadUnwinder::new(stack.clone()));
                &mut *p
            }
        }
    };
    state.unwinder.stack = stack;
    state.start_thread();
    local.state.set(state);
    register_thread_exit(state);
    Some(state)
}

/// A state no thread uses any more.
struct FreeState(*mut ThreadState);
// SAFETY: a free state belongs to no thread; the one that takes it from the list owns it.
unsafe impl Send for FreeState {}

static FREE_STATES: spinning_top::Spinlock<Vec<FreeState>> =
    spinning_top::Spinlock::new(Vec::new());
static EXIT_KEY: std::sync::OnceLock<libc::pthread_key_t> = std::sync::OnceLock::new();

/// Gives the state back when the thread exits, so that programs that start threads by the
/// thousand do not grow the library's heap.
fn register_thread_exit(state: *mut ThreadState) {
    unsafe extern "C" fn release_thread(state: *mut libc::c_void) {
        LOCAL.with(|local| {
            // Inside the tracer while the list is locked: a signal handler allocating now
            // must not come back for the same lock.
            let was_busy = local.busy.replace(true);
            compiler_fence(SeqCst);
            local.state.set(std::ptr::null_mut());
            FREE_STATES.lock().push(FreeState(state.cast()));
            compiler_fence(SeqCst);
            local.busy.set(was_busy);
        });
    }
    let key = EXIT_KEY.get_or_init(|| {
        let mut key = 0;
        // SAFETY: a valid key out-pointer and destructor.
        unsafe { libc::pthread_key_create(&mut key, Some(release_thread)) };
        key
    });
    // SAFETY: setting this thread's value of our key.
    unsafe { libc::pthread_setspecific(*key, state.cast()) };
}

/// The thread's stack range: unwinding reads nothing outside it. It is the mapping that holds
/// the stack pointer, found in `/proc/self/maps` with a buffer on the stack.
///
/// Not `pthread_getattr_np`: it holds the thread's lock while it allocates (it reads
/// `/proc/self/maps` with `fopen` for the main thread), and a program that calls it itself
/// (Rust's runtime does, before `main`) would reach the tracer with that lock held.
fn thread_stack() -> std::ops::Range<u64> {
    let marker = 0u8;
    mapping_of(std::ptr::addr_of!(marker) as u64)
}

/// The mapping of `/proc/self/maps` that holds `sp`, or an empty range (read with a buffer
/// on the stack: async-signal-safe, no allocation).
fn mapping_of(sp: u64) -> std::ops::Range<u64> {
    // SAFETY: a NUL-terminated path; the descriptor is closed below.
    let fd = unsafe {
        libc::open(
            c"/proc/self/maps".as_ptr(),
            libc::O_RDONLY | libc::O_CLOEXEC,
        )
    };
    if fd < 0 {
        return 0..0;
    }
    let mut buf = [0u8; 4096];
    let mut filled = 0;
    let mut found = 0..0;
    loop {
        // SAFETY: reading into the free part of our buffer.
        let n = unsafe { libc::read(fd, buf[filled..].as_mut_ptr().cast(), buf.len() - filled) };
        if n <= 0 {
            break;
        }
        filled += n as usize;
        // Whole lines only; a partial one moves to the front for the next read.
        let mut start = 0;
        while let Some(end) = buf[start..filled].iter().position(|&b| b == b'\n') {
            if let Some(range) = maps_range(&buf[start..start + end])
                && range.contains(&sp)
            {
                found = range;
            }
            start += end + 1;
        }
        if !found.is_empty() {
            break;
        }
        buf.copy_within(start..filled, 0);
        filled -= start;
        if filled == buf.len() {
            break;
        }
    }
    // SAFETY: our descriptor.
    unsafe { libc::close(fd) };
    found
}

/// The address range at the start of a `/proc/PID/maps` line.
fn maps_range(line: &[u8]) -> Option<std::ops::Range<u64>> {
    let hex = |digits: &[u8]| {
        digits.iter().try_fold(0u64, |value, &d| {
            let digit = (d as char).to_digit(16)?;
            Some(value.checked_mul(16)? + u64::from(digit))
        })
    };
    let dash = line.iter().position(|&b| b == b'-')?;
    let space = line.iter().position(|&b| b == b' ')?;
    Some(hex(&line[..dash])?..hex(line.get(dash + 1..space)?)?)
}

fn fx_hash(frames: &[u64]) -> u64 {
    let mut h: u64 = frames.len() as u64;
    for &f in frames {
        h = (h.rotate_left(5) ^ f).wrapping_mul(0x517c_c1b7_2722_0a95);
    }
    h | 1
}

impl ThreadState {
    /// Forgets the chunk and every cached stack (a forked child's new log).
    fn reset(&mut self) {
        self.start_thread();
        self.clear_caches();
    }

    /// Takes the state for the calling thread: its id, no chunk yet.
    fn start_thread(&mut self) {
        // SAFETY: gettid has no preconditions.
        self.tid = unsafe { libc::gettid() } as u32;
        self.chunk = None;
        self.records = std::ptr::null_mut();
        self.pos = 0;
    }

    /// Forgets every cached stack (the log they were defined in is not this thread's any
    /// more). A slot with stack pointer 0 never matches, as in fresh zeroed memory.
    fn clear_caches(&mut self) {
        // Slot by slot: a whole array value would be built on the thread's stack first.
        for unwound in &mut self.unwound {
            *unwound = Unwound::EMPTY;
        }
        for stack in &mut self.stacks {
            *stack = (0, 0);
        }
    }

    /// The id of the stack at `regs`, defining it in the log if this thread has not.
    #[inline(always)]
    fn stack_id(&mut self, regs: Regs) -> u32 {
        let slot =
            ((regs.sp >> 4).wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 56) as usize % UNWOUND_SLOTS;
        // Only unwinds on the thread's own stack are remembered: another stack (a coroutine's)
        // may be unmapped by the time the same stack pointer comes back.
        let cacheable = self.unwinder.on_thread_stack(regs.sp);
        if cacheable && self.unwound[slot].still_holds(&regs) {
            return self.unwound[slot].stack_id;
        }
        self.unwind_into(slot, regs, cacheable)
    }

    /// The slow path of `stack_id`: a full unwind, remembered in `slot`.
    #[cold]
    #[inline(never)]
    fn unwind_into(&mut self, slot: usize, regs: Regs, cacheable: bool) -> u32 {
        let len = self
            .unwinder
            .unwind(regs, &mut self.frames, &mut self.fresh);
        let id = self.intern(len);
        self.fresh.stack_id = id;
        if self.fresh.reads == 0xff || !cacheable {
            return id;
        }
        let cached = &mut self.unwound[slot];
        let fresh = &self.fresh;
        let same_words = cached.reads == fresh.reads
            && cached.read_at[..fresh.reads as usize] == fresh.read_at[..fresh.reads as usize];
        if cached.stack_id == id && cached.sp == regs.sp && same_words {
            // The same stack although some words (or bp) differ: those do not matter.
            for i in 0..fresh.reads as usize {
                if cached.read_value[i] != fresh.read_value[i] {
                    cached.care &= !(1 << i);
                }
            }
            if cached.bp != regs.bp {
                cached.bp_matters = false;
            }
        } else {
            *cached = *fresh;
        }
        id
    }

    /// The id of `self.frames[..len]`, writing a stack record the first time.
    fn intern(&mut self, len: usize) -> u32 {
        let hash = fx_hash(&self.frames[..len]);
        let slot = hash as usize % STACK_SLOTS;
        if self.stacks[slot].0 == hash {
            return self.stacks[slot].1;
        }
        let id = NEXT_STACK.fetch_add(1, Relaxed);
        if !self.reserve() {
            return u32::MAX;
        }
        let frames = self.frames;
        // SAFETY: `reserve` made room for the longest record in the chunk's record area.
        let out = unsafe { std::slice::from_raw_parts_mut(self.records, RECORD_SPACE) };
        self.cursor
            .put_stack(out, &mut self.pos, id, &frames[..len]);
        self.publish();
        self.stacks[slot] = (hash, id);
        id
    }

    #[inline(always)]
    fn write_call(&mut self, now: u64, record: &CallRecord) {
        if !self.has_room() && !self.reserve() {
            return;
        }
        // SAFETY: as in `intern`.
        let out = unsafe { std::slice::from_raw_parts_mut(self.records, RECORD_SPACE) };
        if now != self.cursor.time_ns {
            self.cursor.put_time(out, &mut self.pos, now);
        }
        self.cursor.put_call(out, &mut self.pos, record);
        self.publish();
    }

    /// Whether the chunk has room for one more record of any kind.
    #[inline(always)]
    fn has_room(&self) -> bool {
        self.chunk.is_some() && self.pos + 2 * MAX_RECORD <= RECORD_SPACE
    }

    /// Makes room for one more record of any kind: a fresh chunk when this one is full.
    #[cold]
    #[inline(never)]
    fn reserve(&mut self) -> bool {
        if self.has_room() {
            return true;
        }
        let filled_one = self.chunk.is_some();
        let Some((chunk, records)) = current_log().and_then(|log| log.chunk(self.tid, filled_one))
        else {
            // The log cannot grow: tracing stops for good in every thread, so the program
            // runs on at full speed, untraced (the log says when it stopped).
            STATE.store(OFF, Release);
            return false;
        };
        self.chunk = Some(chunk);
        self.records = records;
        self.pos = 0;
        // Every chunk starts with the time; a new cursor makes the next call write it.
        self.cursor = Cursor::default();
        let now = now_ns();
        // SAFETY: as in `intern`; a fresh chunk has room.
        let out = unsafe { std::slice::from_raw_parts_mut(self.records, RECORD_SPACE) };
        self.cursor.put_time(out, &mut self.pos, now);
        self.publish();
        true
    }

    fn publish(&self) {
        if let Some(chunk) = self.chunk {
            chunk.used.store(self.pos as u64, Release);
        }
    }
}

// Lock order: the unwinder's rebuild lock first (a rebuild allocates from the heap), the
// heap last.
extern "C" fn before_fork() {
    unwind::lock_for_fork();
    if let Some(log) = current_log() {
        log.lock_for_fork();
    }
    std::mem::forget(FREE_STATES.lock());
    crate::HEAP.lock_for_fork();
}

extern "C" fn after_fork_parent() {
    crate::HEAP.unlock_after_fork();
    // SAFETY: `before_fork` left it held by this thread.
    unsafe { FREE_STATES.force_unlock() };
    if let Some(log) = current_log() {
        log.unlock_after_fork();
    }
    unwind::unlock_after_fork();
}

/// The child writes its own log: its pid is new, and its stack ids start again.
extern "C" fn after_fork_child() {
    crate::HEAP.unlock_after_fork();
    // SAFETY: as in `after_fork_parent`.
    unsafe { FREE_STATES.force_unlock() };
    unwind::unlock_after_fork();
    let Some(parent_log) = current_log() else {
        return;
    };
    parent_log.unlock_after_fork();
    parent_log.abandon();
    NEXT_STACK.store(0, Relaxed);
    let child_log = sys::env_bytes(env::ALLOCS).and_then(Log::create);
    match child_log {
        Some(log) => LOG.store(Box::into_raw(Box::new(log)), Release),
        None => {
            LOG.store(std::ptr::null_mut(), Release);
            STATE.store(OFF, Release);
        }
    }
    // SAFETY: the only thread of the child; its state (if any) is its own.
    if let Some(state) = unsafe { LOCAL.with(|local| local.state.get()).as_mut() } {
        state.reset();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The stack found for this thread holds a local variable of this frame.
    #[test]
    fn finds_this_threads_stack() {
        let local = 0u8;
        let addr = std::ptr::addr_of!(local) as u64;
        let stack = thread_stack();
        assert!(stack.contains(&addr), "{stack:x?} lacks {addr:x}");
        let other = std::thread::spawn(|| {
            let local = 0u8;
            (std::ptr::addr_of!(local) as u64, thread_stack())
        })
        .join()
        .unwrap();
        assert!(other.1.contains(&other.0) && !other.1.contains(&addr));
        assert_eq!(
            maps_range(b"7f00-7f10 rw-p 0 00:00 0"),
            Some(0x7f00..0x7f10)
        );
    }
}
