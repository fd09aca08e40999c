//! The shared-memory page through which the far-memory runtime (preloaded into the traced
//! program) reports to the recorder: counters with the original fltrace's names, and a log of
//! the faults it handled so the recorder can flag its trace rows (first touch, fetch of an
//! evicted page).
//!
//! It also defines the allocation log ([`alloclog`]) through which `record --allocs` gets the
//! program's allocator calls.
//!
//! No dependencies and no allocation: the runtime must stay lean. One writer (the runtime's
//! handler, under its lock), one reader (the recorder), atomics in between.
#![no_std]

use core::sync::atomic::AtomicU64;

pub mod alloclog;

/// Identifies the layout; bump on change.
pub const MAGIC: u64 = 0x666c_7472_7274_0001;

/// Entries in the fault log ring (a power of two).
pub const LOG_LEN: usize = 1 << 16;

/// Environment variables through which `fltrace record` configures the runtime (C strings:
/// the runtime reads them with `getenv`, without allocating).
pub mod env {
    use core::ffi::CStr;

    /// Local memory limit in pages.
    pub const LOCAL_PAGES: &CStr = c"FLTRACE_RT_LOCAL_PAGES";
    /// Size of the managed region (and of the backing store) in pages.
    pub const MAX_PAGES: &CStr = c"FLTRACE_RT_MAX_PAGES";
    /// `fifo` or `clock`.
    pub const POLICY: &CStr = c"FLTRACE_RT_POLICY";
    /// Number of handler threads.
    pub const HANDLERS: &CStr = c"FLTRACE_RT_HANDLERS";
    /// `1` to busy-poll the userfaultfd instead of blocking.
    pub const BUSY_POLL: &CStr = c"FLTRACE_RT_BUSY_POLL";
    /// Path prefix of the shared page; the runtime appends `-<pid>`.
    pub const SHARED: &CStr = c"FLTRACE_RT_SHARED";
    /// Path prefix of the allocation logs (`record --allocs`); the interposer appends
    /// `-<pid>.<image>`. Unset: allocations are not traced.
    pub const ALLOCS: &CStr = c"FLTRACE_RT_ALLOCS";
    /// A directory whose files back the program's heap (`record --backing-dir`): each process
    /// maps its heap `MAP_SHARED` from a file `heap-<pid>-<n>` it creates there and grows.
    pub const BACKING_DIR: &CStr = c"FLTRACE_RT_BACKING_DIR";

    /// The variable's name as a string.
    pub fn name(var: &'static CStr) -> &'static str {
        var.to_str().unwrap_or_default()
    }
}

/// The name (`comm`) of the runtime's handler threads: their faults are the runtime's own.
pub const HANDLER_THREAD_NAME: &str = "fltrace-rt";

/// Kinds of handled faults in the log.
pub mod kind {
    /// First touch of a page: filled with zeros.
    pub const ZERO: u32 = 1;
    /// An evicted page brought back from the backing store.
    pub const FETCH: u32 = 2;
    /// A write to a write-protected (clean) page: now dirty.
    pub const WRPROTECT: u32 = 3;
}

/// One handled fault.
#[repr(C)]
pub struct LogEntry {
    /// Thread id of the faulting thread.
    pub tid: AtomicU64,
    /// Page address (low 12 bits hold the kind).
    pub page_and_kind: AtomicU64,
}

/// The shared page: counters first, then the log.
#[repr(C)]
pub struct Shared {
    /// [`MAGIC`] once initialised.
    pub magic: AtomicU64,
    /// Faults handled.
    pub faults: AtomicU64,
    /// Read faults (missing page).
    pub faults_r: AtomicU64,
    /// Write faults (missing page).
    pub faults_w: AtomicU64,
    /// Write-protect faults (first write to a clean page).
    pub faults_wp: AtomicU64,
    /// First touches (zero fill).
    pub faults_zp: AtomicU64,
    /// Fetches of evicted pages.
    pub faults_fetch: AtomicU64,
    /// Eviction rounds.
    pub evict_ops: AtomicU64,
    /// Pages evicted.
    pub evict_pages_done: AtomicU64,
    /// Evicted pages that were dirty and copied to the backing store.
    pub evict_writes: AtomicU64,
    /// Peak local (resident, managed) bytes.
    pub memory_used: AtomicU64,
    /// Local bytes now.
    pub resident: AtomicU64,
    /// Bytes handed out by the runtime's allocator.
    pub memory_allocd: AtomicU64,
    /// Bytes given back to it.
    pub memory_freed: AtomicU64,
    /// Set when the region of `-M` MB ran out.
    pub m_exhausted: AtomicU64,
    /// The local limit, bytes.
    pub limit: AtomicU64,
    /// First address of the managed region.
    pub region_start: AtomicU64,
    /// Bytes of the managed region.
    pub region_len: AtomicU64,
    /// Entries written to the log so far (the next goes to `log_head % LOG_LEN`).
    pub log_head: AtomicU64,
    /// Handled faults, newest last.
    pub log: [LogEntry; LOG_LEN],
}

/// Bytes to map for [`Shared`].
pub const SHARED_SIZE: usize = core::mem::size_of::<Shared>();

impl Shared {
    /// The counters as (original name, value) pairs.
    pub fn counters(&self) -> [(&'static str, u64); 14] {
        use core::sync::atomic::Ordering::Relaxed;
        [
            ("rt_faults", self.faults.load(Relaxed)),
            ("faults_r", self.faults_r.load(Relaxed)),
            ("faults_w", self.faults_w.load(Relaxed)),
            ("faults_wp", self.faults_wp.load(Relaxed)),
            ("faults_zp", self.faults_zp.load(Relaxed)),
            ("faults_fetch", self.faults_fetch.load(Relaxed)),
            ("evict_ops", self.evict_ops.load(Relaxed)),
            ("evict_pages_done", self.evict_pages_done.load(Relaxed)),
            ("evict_writes", self.evict_writes.load(Relaxed)),
            ("memory_used", self.memory_used.load(Relaxed)),
            ("memory_local", self.resident.load(Relaxed)),
            ("memory_allocd", self.memory_allocd.load(Relaxed)),
            ("memory_freed", self.memory_freed.load(Relaxed)),
            ("m_exhausted", self.m_exhausted.load(Relaxed)),
        ]
    }
}
