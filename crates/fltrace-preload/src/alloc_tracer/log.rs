//! The allocation log file of this process (format in `fltrace_runtime_abi::alloclog`).
//!
//! The file is mapped shared into a reserved address range that grows a segment at a time;
//! threads take chunks with an atomic add and write them without locks. Growing takes a
//! spinlock, once per 4 MiB, and allocates the segment's blocks before mapping it, so a full
//! file system ends the log rather than the program. The first segment that cannot be had
//! ends the log for good: one attempt, no retry per call (a full tmpfs makes each attempt
//! cost milliseconds, which retried on every call stalled the program).

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use fltrace_runtime_abi::alloclog::{CHUNK_SIZE, ChunkHeader, HEADER_SIZE, LogHeader, MAGIC};

use crate::sys;

/// Address space reserved for the file: the log cannot grow beyond it.
const RESERVE: usize = 64 << 30;
/// The file grows by this much at a time: small enough that a small file system still holds
/// a log (a first segment it has no room for would leave nothing traced).
const SEGMENT: usize = 4 << 20;

/// The log, once open.
pub struct Log {
    base: *mut u8,
    fd: i32,
    /// Bytes of the file mapped so far.
    mapped: AtomicUsize,
    grow: spinning_top::Spinlock<()>,
    /// Set when the log could not grow: it never tries again.
    full: AtomicBool,
}

// SAFETY: the mapping is shared by design; all shared state is atomic or under `grow`.
unsafe impl Sync for Log {}
// SAFETY: as above.
unsafe impl Send for Log {}

impl Log {
    /// Creates `<prefix>-<pid>.<image>` with the first free image number.
    pub fn create(prefix: &[u8]) -> Option<Log> {
        // SAFETY: getpid has no preconditions.
        let pid = unsafe { libc::getpid() } as u64;
        for image in 0..1000u64 {
            let mut path = [0u8; 600];
            let mut len = 0;
            let mut pid_digits = [0; 20];
            let mut image_digits = [0; 20];
            for part in [
                prefix,
                b"-",
                sys::decimal(pid, &mut pid_digits),
                b".",
                sys::decimal(image, &mut image_digits),
            ] {
                if len + part.len() >= path.len() {
                    return None;
                }
                path[len..len + part.len()].copy_from_slice(part);
                len += part.len();
            }
            // SAFETY: `path` is NUL-terminated (zeroed beyond `len`).
            let fd = unsafe {
                libc::open(
                    path.as_ptr().cast(),
                    libc::O_RDWR
                        | libc::O_CREAT
                        | libc::O_EXCL
                        | libc::O_NOFOLLOW
                        | libc::O_CLOEXEC,
                    0o600,
                )
            };
            if fd >= 0 {
                return Log::map(fd, pid);
            }
            if std::io::Error::last_os_error().raw_os_error() != Some(libc::EEXIST) {
                return None;
            }
        }
        None
    }

    fn map(fd: i32, pid: u64) -> Option<Log> {
        let flags = libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE;
        // SAFETY: reserving address space, inaccessible until segments are mapped over it.
        let base = unsafe { sys::map(0, RESERVE, libc::PROT_NONE, flags, -1, 0) };
        if base.is_null() {
            // SAFETY: our descriptor.
            unsafe { libc::close(fd) };
            return None;
        }
        let log = Log {
            base,
            fd,
            mapped: AtomicUsize::new(0),
            grow: spinning_top::Spinlock::new(()),
            full: AtomicBool::new(false),
        };
        if !log.grow_to(SEGMENT) {
            return None;
        }
        let header = log.header();
        header.pid.store(pid, Ordering::Relaxed);
        header.made_ns.store(sys::monotonic_ns(), Ordering::Relaxed);
        header
            .next_chunk
            .store(HEADER_SIZE as u64, Ordering::Relaxed);
        header.magic.store(MAGIC, Ordering::Release);
        Some(log)
    }

    fn header(&self) -> &LogHeader {
        // SAFETY: the first segment is mapped from creation on; the header is atomics.
        unsafe { &*self.base.cast::<LogHeader>() }
    }

    /// Maps the file up to at least `len` bytes.
    fn grow_to(&self, len: usize) -> bool {
        let _guard = self.grow.lock();
        if self.full.load(Ordering::Relaxed) {
            // Another thread failed while this one waited for the lock.
            return false;
        }
        let mut mapped = self.mapped.load(Ordering::Acquire);
        while mapped < len {
            if mapped + SEGMENT > RESERVE {
                return false;
            }
            // Blocks allocated up front, not a sparse ftruncate: a store to a hole the file
            // system cannot fill (disk full) is a SIGBUS in the traced program. On failure the
            // log stops for good (`chunk`).
            // SAFETY: growing our own file.
            if unsafe { libc::posix_fallocate(self.fd, mapped as i64, SEGMENT as i64) } != 0 {
                return false;
            }
            let (prot, flags) = (
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED | libc::MAP_FIXED,
            );
            let at = self.base as usize + mapped;
            // SAFETY: maps the next segment of the file over our own reservation.
            if unsafe { sys::map(at, SEGMENT, prot, flags, self.fd, mapped) }.is_null() {
                return false;
            }
            mapped += SEGMENT;
            self.mapped.store(mapped, Ordering::Release);
        }
        true
    }

    /// A fresh chunk for thread `tid`: its header and its record area, or `None` when the log
    /// cannot grow. `populate`: the thread filled a chunk before and will likely fill this
    /// one, whose pages are then made present in one call rather than taken one fault at a
    /// time (each one a traced fault, its stack copied, in the program's time).
    pub fn chunk(&self, tid: u32, populate: bool) -> Option<(&'static ChunkHeader, *mut u8)> {
        let header = self.header();
        if self.full.load(Ordering::Relaxed) {
            return None;
        }
        let offset = header
            .next_chunk
            .fetch_add(CHUNK_SIZE as u64, Ordering::Relaxed) as usize;
        let end = offset + CHUNK_SIZE;
        if end > self.mapped.load(Ordering::Acquire) && !self.grow_to(end) {
            header.dropped.fetch_add(1, Ordering::Relaxed);
            if !self.full.swap(true, Ordering::Relaxed) {
                header
                    .stopped_ns
                    .store(sys::monotonic_ns_vdso(), Ordering::Relaxed);
            }
            return None;
        }
        if populate {
            // Chunks are page-aligned (the header is a page). A kernel without
            // MADV_POPULATE_WRITE (before 5.14) refuses it: the pages come by faults.
            sys::madvise(
                self.base as usize + offset,
                CHUNK_SIZE,
                libc::MADV_POPULATE_WRITE,
            );
        }
        // SAFETY: the chunk is mapped and ours alone (the atomic add gave it to us).
        unsafe {
            let chunk = &*self.base.add(offset).cast::<ChunkHeader>();
            chunk.tid.store(u64::from(tid), Ordering::Relaxed);
            let records = self.base.add(offset + size_of::<ChunkHeader>());
            Some((chunk, records))
        }
    }

    /// Unmaps and closes the log (a forked child leaving its parent's log).
    pub fn abandon(&self) {
        // SAFETY: after fork only this thread exists in the child and nothing else refers
        // to the parent's log any more.
        unsafe {
            libc::syscall(libc::SYS_munmap, self.base, RESERVE);
            libc::close(self.fd);
        }
    }

    /// Locks growth across fork.
    pub fn lock_for_fork(&self) {
        std::mem::forget(self.grow.lock());
    }

    /// Unlocks after fork.
    pub fn unlock_after_fork(&self) {
        // SAFETY: `lock_for_fork` left it held by this thread.
        unsafe { self.grow.force_unlock() };
    }
}
