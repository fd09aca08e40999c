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

#[cfg(test)]
mod tests {
    use super::*;

    /// Buckets are powers of two of microseconds; percentiles name the bucket's upper bound.
    #[test]
    fn histogram_buckets_and_percentiles() {
        assert_eq!(hist_bucket(999), 0);
        assert_eq!(hist_bucket(1_000), 0);
        assert_eq!(hist_bucket(2_000), 1);
        assert_eq!(hist_bucket(7_999), 2);
        assert_eq!(hist_bucket(u64::MAX), HIST_BUCKETS - 1);
        let mut buckets = [0; HIST_BUCKETS];
        buckets[2] = 98;
        buckets[5] = 2;
        assert_eq!(hist_percentile(&buckets, 500), 8_000);
        assert_eq!(hist_percentile(&buckets, 990), 64_000);
        assert_eq!(hist_percentile(&[0; HIST_BUCKETS], 500), 0);
    }
}

pub mod alloclog;

/// Identifies the layout; bump on change.
pub const MAGIC: u64 = 0x666c_7472_7274_0005;

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
    /// `1` to run the handler threads at real-time priority when allowed (root), so that
    /// the program's threads cannot keep them from serving a fault; by default they stay in
    /// the program's scheduling class (see docs/BENCHMARKS.md for why).
    pub const REALTIME: &CStr = c"FLTRACE_RT_REALTIME";
    /// `0` to evict only when a fault finds local memory full; by default the handler evicts
    /// a batch ahead of need once the faults of a read have been served.
    pub const EVICT_AHEAD: &CStr = c"FLTRACE_RT_EVICT_AHEAD";
    /// Most clean resident pages whose far copy is kept, in percent of the local limit
    /// (default 10); `100` keeps every copy.
    pub const CLEAN_COPIES: &CStr = c"FLTRACE_RT_CLEAN_COPIES";
    /// `0` to evict by copying pages to the backing store and fetch by copying them back, `1`
    /// to move them (`UFFDIO_MOVE`, Linux 6.8: no copy, no far copy ever held twice; not with
    /// the `clock` policy, which needs write-protection to see writes). By default pages move
    /// where faults are served by handler threads and are copied where they are served in
    /// the faulting thread (a move flushes the store page from every CPU the program runs on,
    /// an interrupt of its other threads per fetch).
    pub const MOVE: &CStr = c"FLTRACE_RT_MOVE";
    /// `1` to count TLB shootdowns and IPIs for the breakdown (perf tracepoint counters on
    /// the process). Off by default: closing a tracepoint counter waits for an RCU grace
    /// period, 30-50 ms each here, which every run of the program paid at exit.
    pub const TLB_COUNT: &CStr = c"FLTRACE_RT_TLB_COUNT";
    /// `signal` to serve a fault the program takes in user mode in the thread that takes it
    /// (`UFFD_FEATURE_SIGBUS` and a `SIGBUS` handler) where the kernel has the feature; by
    /// default, or with `thread`, handler threads that read the userfaultfd serve every fault.
    pub const FAULT_PATH: &CStr = c"FLTRACE_RT_FAULT_PATH";
    /// Path prefix of the shared page; the runtime appends `-<pid>`.
    pub const SHARED: &CStr = c"FLTRACE_RT_SHARED";
    /// Path prefix of the allocation logs (`record --allocs`); the interposer appends
    /// `-<pid>.<image>`. Unset: allocations are not traced.
    pub const ALLOCS: &CStr = c"FLTRACE_RT_ALLOCS";
    /// A directory whose files back the program's heap (`record --backing-dir`): each process
    /// maps its heap `MAP_SHARED` from a file `heap-<pid>-<n>` it creates there and grows.
    pub const BACKING_DIR: &CStr = c"FLTRACE_RT_BACKING_DIR";
    /// MiB of address space after the heap's `-M` for the program's reservations (`PROT_NONE`
    /// mappings committed later, as the JVM, V8 and Go reserve their heaps); by default the
    /// machine's memory, at least 64 GiB. It costs no memory: only what is committed counts.
    pub const RESERVE_MB: &CStr = c"FLTRACE_RT_RESERVE_MB";

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
    /// A fault on a page that another thread's fault had brought in meanwhile: the handler
    /// only woke the thread.
    pub const WAKE: u32 = 4;
}

/// How the runtime serves faults ([`Shared::fault_path`]).
pub mod path {
    /// Handler threads read the faults from the userfaultfd and resolve them; the faulting
    /// thread sleeps in the kernel meanwhile.
    pub const THREADS: u64 = 1;
    /// The faulting thread serves its own fault from a `SIGBUS` handler
    /// (`UFFD_FEATURE_SIGBUS`): nothing sleeps or is woken for a fault.
    pub const IN_THREAD: u64 = 2;

    /// The path's name, as the stats file and `record -v` give it.
    pub fn name(path: u64) -> &'static str {
        match path {
            THREADS => "by handler threads",
            IN_THREAD => "in the faulting thread",
            _ => "unknown",
        }
    }
}

/// Why the handler-thread path serves a process whose runtime would otherwise serve faults in
/// the faulting thread ([`Shared::fault_path_reason`]).
pub mod path_reason {
    /// Asked for (`record --fault-path threads`, which sets `FLTRACE_RT_FAULT_PATH=thread`).
    pub const ASKED: u64 = 1;
    /// The kernel refused `UFFD_FEATURE_SIGBUS`.
    pub const NO_SIGBUS_FEATURE: u64 = 2;
    /// The `SIGBUS` handler could not be installed.
    pub const NO_HANDLER: u64 = 3;
    /// A Go program: its goroutines run on small stacks in its heap, with no room for a signal
    /// handler (and Go sets its signal stacks by system call, past the interposer).
    pub const GO_PROGRAM: u64 = 4;
    /// Not asked for either way: handler threads are the default (`FLTRACE_RT_FAULT_PATH=signal`
    /// asks for the in-thread path).
    pub const DEFAULT: u64 = 5;

    /// The reason's words, as `record -v` gives them.
    pub fn name(reason: u64) -> &'static str {
        match reason {
            ASKED => "asked for (--fault-path threads, or FLTRACE_RT_FAULT_PATH=thread)",
            NO_SIGBUS_FEATURE => "the kernel has no UFFD_FEATURE_SIGBUS",
            NO_HANDLER => "no SIGBUS handler could be installed",
            GO_PROGRAM => "a Go program (goroutine stacks have no room for a signal handler)",
            DEFAULT => "the default (--fault-path in-thread serves them in the faulting thread)",
            _ => "",
        }
    }
}

/// One handled fault.
#[repr(C)]
pub struct LogEntry {
    /// `n + 1` once entry `n` of the log (slot `n % LOG_LEN`) is complete: several threads
    /// write entries at once (each serves its own faults), so the head says which slots are
    /// taken, and this which are written.
    pub seq: AtomicU64,
    /// Thread id of the faulting thread.
    pub tid: AtomicU64,
    /// Page address (low 12 bits hold the kind).
    pub page_and_kind: AtomicU64,
    /// When the handler read the fault's message (CLOCK_MONOTONIC ns, the clock of the
    /// trace's rows): the row's time to this is the wait for a handler.
    pub read_ns: AtomicU64,
    /// When the handler had resolved it (CLOCK_MONOTONIC ns).
    pub done_ns: AtomicU64,
}

/// Buckets of the runtime's latency histograms: bucket `k` counts values in
/// `[2^k, 2^(k+1))` microseconds (bucket 0 also takes everything under 1 us).
pub const HIST_BUCKETS: usize = 16;

/// The histogram bucket of a duration in nanoseconds.
pub fn hist_bucket(ns: u64) -> usize {
    let us = ns / 1000;
    if us == 0 {
        0
    } else {
        (63 - us.leading_zeros() as usize).min(HIST_BUCKETS - 1)
    }
}

/// The upper bound (ns) of the bucket holding the `per_mille`th value of a histogram, or 0
/// when it is empty: a percentile within a factor of two.
pub fn hist_percentile(buckets: &[u64; HIST_BUCKETS], per_mille: u64) -> u64 {
    let total: u64 = buckets.iter().sum();
    if total == 0 {
        return 0;
    }
    let rank = (total * per_mille).div_ceil(1000).max(1);
    let mut seen = 0;
    for (k, count) in buckets.iter().enumerate() {
        seen += count;
        if seen >= rank {
            return (2000u64) << k;
        }
    }
    2000u64 << (HIST_BUCKETS - 1)
}

/// Where the handled faults' time went, summed by the runtime (see [`Shared::breakdown`]).
#[repr(C)]
pub struct Breakdown {
    /// userfaultfd messages read (each a fault of one thread).
    pub msgs: AtomicU64,
    /// `read` calls that returned messages: `msgs / reads` is the batching.
    pub reads: AtomicU64,
    /// Messages whose page another message had already brought in: only a wake-up.
    pub resolved_elsewhere: AtomicU64,
    /// Sum over messages of read to resolved, ns (includes waiting behind earlier messages of
    /// the same batch).
    pub handle_ns: AtomicU64,
    /// Time spent evicting inside the handler, ns.
    pub evict_ns: AtomicU64,
    /// Of which write-protecting dirty victims.
    pub evict_wp_ns: AtomicU64,
    /// Of which copying dirty victims to the store (or moving every victim there, with
    /// `UFFDIO_MOVE`).
    pub evict_copy_ns: AtomicU64,
    /// Of which dropping victims (`MADV_DONTNEED`, where the TLB shootdowns are).
    pub evict_drop_ns: AtomicU64,
    /// Time in the ioctl that resolves a fault (`UFFDIO_COPY`/`UFFDIO_WRITEPROTECT`, which
    /// also wakes the faulting thread), ns.
    pub fill_ns: AtomicU64,
    /// Time spent waiting for the region lock, ns.
    pub lock_wait_ns: AtomicU64,
    /// Evictions done ahead of need (by the background watermark), pages.
    pub evict_ahead_pages: AtomicU64,
    /// Remote TLB shootdowns received by the program's threads (`tlb:tlb_flush`, reason 1).
    pub tlb_remote: AtomicU64,
    /// Local TLB shootdowns (`tlb:tlb_flush`, reasons 2 and 3).
    pub tlb_local: AtomicU64,
    /// Function-call IPIs sent by the process (`ipi:ipi_send_cpumask`: TLB shootdowns).
    pub ipi_sent: AtomicU64,
    /// Context switches of the process's threads.
    pub context_switches: AtomicU64,
    /// CPU time of the program's threads (schedstat), ns.
    pub program_cpu_ns: AtomicU64,
    /// Time the program's threads were runnable but waiting for a CPU (schedstat run_delay),
    /// ns: the wake-up after a resolved fault waits here.
    pub program_run_delay_ns: AtomicU64,
    /// CPU time of the handler threads, ns.
    pub handler_cpu_ns: AtomicU64,
    /// Time the handler threads were runnable but waiting for a CPU, ns.
    pub handler_run_delay_ns: AtomicU64,
    /// Histogram of per-message handling time ([`hist_bucket`]).
    pub handle_hist: [AtomicU64; HIST_BUCKETS],
    /// Faults served in the faulting thread (its `SIGBUS` handler), each one fault of one
    /// thread as a message is on the handler-thread path.
    pub signals: AtomicU64,
    /// `SIGBUS` signals that were not the runtime's, passed on to the program's handler.
    pub signals_passed: AtomicU64,
    /// System calls whose buffers in the region were made present (and kept so) before the
    /// call: the kernel's own faults on them would fail (`EFAULT`) on the in-thread path.
    pub syscalls_prepared: AtomicU64,
    /// Pages of those buffers that the wrappers' touches brought in (faults of the program's
    /// thread, each with its row).
    pub syscall_faults: AtomicU64,
    /// Pages held against eviction by system calls in progress, at most at once.
    pub syscall_pinned_peak: AtomicU64,
    /// Evictions passed over because a system call in progress holds the page.
    pub syscall_pins_spared: AtomicU64,
    /// Times a faulting thread waited for the recorder to read the log (`log_backlog`).
    pub recorder_waits: AtomicU64,
    /// Time spent so, ns.
    pub recorder_wait_ns: AtomicU64,
    /// Threads an idle handler found waiting on faults it had read and served: a wake lost
    /// on some path, which it then gave (without it they would sleep for good).
    pub stuck_wakes: AtomicU64,
}

/// The runtime's own anonymous mappings it publishes (the backing store, the page metadata):
/// memory of the runtime, not of the program.
pub const OWN_RANGES: usize = 4;

/// Reservations (address space mapped `PROT_NONE` to be committed later, as managed runtimes
/// reserve their heaps) and what else of the program's memory the region holds or does not.
#[repr(C)]
#[derive(Default)]
pub struct Placement {
    /// Bytes of the reservation area (the end of the region, beyond the heap's `-M`).
    pub reserve_len: AtomicU64,
    /// Bytes of address space the program holds reserved there now.
    pub reserved: AtomicU64,
    /// Bytes of its reservations committed read-write now: emulated, and counted against `-M`
    /// with the heap's blocks.
    pub committed: AtomicU64,
    /// Bytes of reservations that did not fit the area and went to the kernel: memory committed
    /// in them is not emulated.
    pub reserved_outside: AtomicU64,
    /// Bytes of the region taken out of emulation now (made executable or read-only, or
    /// replaced by a mapping of a file): the kernel's plain memory while they stay so.
    pub taken_out: AtomicU64,
    /// Pages brought back from the store because their range was taken out (their contents
    /// must stay where the program left them): the runtime's work, not faults of the program.
    pub taken_out_fetches: AtomicU64,
    /// Pages found lost from the region and filled again with zeros: the program dropped them
    /// behind the runtime's back (`madvise(MADV_DONTNEED)` by system call, as Go's runtime does).
    pub dropped_refills: AtomicU64,
    /// The runtime's own anonymous mappings, (start, bytes); unused slots are zero.
    pub own: [[AtomicU64; 2]; OWN_RANGES],
}

impl Placement {
    /// The counters as (stats name, value) pairs.
    pub fn counters(&self) -> [(&'static str, u64); 7] {
        use core::sync::atomic::Ordering::Relaxed;
        [
            ("memory_reserved", self.reserved.load(Relaxed)),
            ("memory_committed", self.committed.load(Relaxed)),
            ("reserve_area", self.reserve_len.load(Relaxed)),
            ("reserved_outside", self.reserved_outside.load(Relaxed)),
            ("memory_taken_out", self.taken_out.load(Relaxed)),
            ("taken_out_fetches", self.taken_out_fetches.load(Relaxed)),
            ("dropped_refills", self.dropped_refills.load(Relaxed)),
        ]
    }

    /// The runtime's own mappings, as address ranges.
    pub fn own_ranges(&self) -> impl Iterator<Item = core::ops::Range<u64>> + '_ {
        use core::sync::atomic::Ordering::Relaxed;
        self.own.iter().filter_map(|[start, len]| {
            let (start, len) = (start.load(Relaxed), len.load(Relaxed));
            (len > 0).then_some(start..start + len)
        })
    }
}

/// The shared page: counters first, then the log.
#[repr(C)]
pub struct Shared {
    /// [`MAGIC`] once initialised.
    pub magic: AtomicU64,
    /// When the runtime made the page (CLOCK_MONOTONIC ns, the clock of the recorder's
    /// records): a page made before a process's exec is its previous image's.
    pub made_ns: AtomicU64,
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
    /// Evicted pages whose contents went to the backing store: dirty ones copied, or every
    /// one moved (`UFFDIO_MOVE`).
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
    /// Bytes of evicted pages now held in the backing store (far memory).
    pub far: AtomicU64,
    /// Evicted pages the runtime brought back itself before a fork (the child runs
    /// unmanaged and must see them): its work, not faults of the program.
    pub fork_fetches: AtomicU64,
    /// First address of the managed region.
    pub region_start: AtomicU64,
    /// Bytes of the managed region: the heap's `-M`, then the reservation area.
    pub region_len: AtomicU64,
    /// What entered the region besides the heap: reservations and their commits.
    pub placement: Placement,
    /// How faults are served: [`path::THREADS`] or [`path::IN_THREAD`] (0 before the runtime
    /// has chosen).
    pub fault_path: AtomicU64,
    /// With [`path::THREADS`], why not in the thread ([`path_reason`]; 0 when unmanaged).
    pub fault_path_reason: AtomicU64,
    /// Where the time went.
    pub breakdown: Breakdown,
    /// Written by the recorder: the log entries it has read so far.
    pub log_read: AtomicU64,
    /// Written by the recorder when it opens the page: the most log entries the runtime may
    /// have written beyond `log_read` (0: no limit). Faults served in the faulting thread come
    /// as fast as the program can take them, faster than a recorder on a busy machine reads
    /// their samples: past this the faulting thread waits for the recorder, rather than the
    /// kernel dropping records.
    pub log_backlog: AtomicU64,
    /// Entries written to the log so far (the next goes to `log_head % LOG_LEN`).
    pub log_head: AtomicU64,
    /// Handled faults, newest last.
    pub log: [LogEntry; LOG_LEN],
}

/// Pairs in [`Shared::breakdown`].
pub const BREAKDOWN_LEN: usize = 32;

/// Bytes to map for [`Shared`].
pub const SHARED_SIZE: usize = core::mem::size_of::<Shared>();

impl Shared {
    /// The counters as (original name, value) pairs.
    pub fn counters(&self) -> [(&'static str, u64); 16] {
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
            ("memory_far", self.far.load(Relaxed)),
            ("fork_fetches", self.fork_fetches.load(Relaxed)),
            ("memory_allocd", self.memory_allocd.load(Relaxed)),
            ("memory_freed", self.memory_freed.load(Relaxed)),
            ("m_exhausted", self.m_exhausted.load(Relaxed)),
        ]
    }

    /// The breakdown of the handled faults' time as (name, value) pairs: sums in ns and
    /// counts, then the handling time's median and 99th percentile (within a factor of two);
    /// then the fault path ([`path`], and [`path_reason`]) and its own counts.
    pub fn breakdown(&self) -> [(&'static str, u64); BREAKDOWN_LEN] {
        use core::sync::atomic::Ordering::Relaxed;
        let b = &self.breakdown;
        let hist = core::array::from_fn(|k| b.handle_hist[k].load(Relaxed));
        [
            ("rt_msgs", b.msgs.load(Relaxed)),
            ("rt_reads", b.reads.load(Relaxed)),
            ("rt_resolved_elsewhere", b.resolved_elsewhere.load(Relaxed)),
            ("rt_handle_ns", b.handle_ns.load(Relaxed)),
            ("rt_handle_p50_ns", hist_percentile(&hist, 500)),
            ("rt_handle_p99_ns", hist_percentile(&hist, 990)),
            ("rt_evict_ns", b.evict_ns.load(Relaxed)),
            ("rt_evict_wp_ns", b.evict_wp_ns.load(Relaxed)),
            ("rt_evict_copy_ns", b.evict_copy_ns.load(Relaxed)),
            ("rt_evict_drop_ns", b.evict_drop_ns.load(Relaxed)),
            ("rt_fill_ns", b.fill_ns.load(Relaxed)),
            ("rt_lock_wait_ns", b.lock_wait_ns.load(Relaxed)),
            ("rt_evict_ahead_pages", b.evict_ahead_pages.load(Relaxed)),
            ("tlb_remote", b.tlb_remote.load(Relaxed)),
            ("tlb_local", b.tlb_local.load(Relaxed)),
            ("ipi_sent", b.ipi_sent.load(Relaxed)),
            ("context_switches", b.context_switches.load(Relaxed)),
            ("program_cpu_ns", b.program_cpu_ns.load(Relaxed)),
            ("program_run_delay_ns", b.program_run_delay_ns.load(Relaxed)),
            ("handler_cpu_ns", b.handler_cpu_ns.load(Relaxed)),
            ("handler_run_delay_ns", b.handler_run_delay_ns.load(Relaxed)),
            ("rt_fault_path", self.fault_path.load(Relaxed)),
            ("rt_fault_path_reason", self.fault_path_reason.load(Relaxed)),
            ("rt_signals", b.signals.load(Relaxed)),
            ("rt_signals_passed", b.signals_passed.load(Relaxed)),
            ("rt_syscalls_prepared", b.syscalls_prepared.load(Relaxed)),
            ("rt_syscall_faults", b.syscall_faults.load(Relaxed)),
            (
                "rt_syscall_pinned_peak",
                b.syscall_pinned_peak.load(Relaxed),
            ),
            (
                "rt_syscall_pins_spared",
                b.syscall_pins_spared.load(Relaxed),
            ),
            ("rt_recorder_waits", b.recorder_waits.load(Relaxed)),
            ("rt_recorder_wait_ns", b.recorder_wait_ns.load(Relaxed)),
            ("rt_stuck_wakes", b.stuck_wakes.load(Relaxed)),
        ]
    }
}
