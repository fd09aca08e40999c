//! The recorder's side of far-memory emulation: configuring the preloaded runtime and reading
//! what it reports through its shared page (`fltrace-runtime-abi`).

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;

use fltrace_runtime_abi::{BREAKDOWN_LEN, LOG_LEN, MAGIC, SHARED_SIZE, Shared, env, kind};
use memmap2::MmapMut;

use crate::Error;

/// Far-memory settings: `-L`, `-M` and the runtime's knobs.
#[derive(Debug, Clone)]
pub struct FarMemory {
    /// The runtime library to preload.
    pub library: PathBuf,
    /// Local memory, MiB.
    pub local_mb: u64,
    /// Far (maximum) memory, MiB.
    pub max_mb: u64,
    /// Which local pages are evicted first.
    pub policy: EvictionPolicy,
    /// Handler threads.
    pub handlers: u32,
    /// Busy-poll instead of blocking.
    pub busy_poll: bool,
    /// Where faults are served; `None` leaves it to the runtime (its default, or
    /// `FLTRACE_RT_FAULT_PATH` inherited from fltrace's environment).
    pub fault_path: Option<FaultPath>,
}

/// Where the far-memory runtime serves a fault (`--fault-path`; each variant's doc is its
/// help there).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
pub enum FaultPath {
    /// Handler threads read the faults from the userfaultfd while the faulting thread sleeps
    /// (the default: every system call on evicted memory waits for its pages).
    Threads,
    /// Each fault served in the thread that takes it, from a SIGBUS handler: no thread sleeps
    /// or is woken from another CPU (several times faster on an idle VM); system calls the
    /// runtime does not wrap (io_uring, aio, inline syscall instructions) fail with EFAULT
    /// on evicted memory.
    InThread,
}

impl FaultPath {
    /// The runtime's name of the path (`FLTRACE_RT_FAULT_PATH`).
    pub fn runtime_name(self) -> &'static str {
        match self {
            FaultPath::Threads => "thread",
            FaultPath::InThread => "signal",
        }
    }

    /// The path a recording takes: `asked`, else what `FLTRACE_RT_FAULT_PATH` in fltrace's
    /// environment (which the command inherits) names, else `None` (the runtime's default).
    pub fn asked_or_inherited(asked: Option<FaultPath>) -> Option<FaultPath> {
        asked.or_else(|| {
            let inherited = std::env::var_os(env::name(env::FAULT_PATH))?;
            [FaultPath::Threads, FaultPath::InThread]
                .into_iter()
                .find(|path| inherited == path.runtime_name())
        })
    }
}

/// The far-memory runtime's eviction policy (`--policy`; each variant's doc is its help there).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
pub enum EvictionPolicy {
    /// Evict in the order pages came in (the original's policy).
    Fifo,
    /// A second chance for pages written since last considered (write-protect faults).
    Clock,
    /// A second chance for pages fetched soon after their eviction (no extra faults).
    Refault,
}

impl EvictionPolicy {
    /// Every policy, in the order `--policy` lists them.
    pub const ALL: [EvictionPolicy; 3] = [
        EvictionPolicy::Fifo,
        EvictionPolicy::Clock,
        EvictionPolicy::Refault,
    ];

    /// The policy of that name (`clock`), as [`EvictionPolicy::name`] gives it.
    pub fn from_name(name: &str) -> Option<EvictionPolicy> {
        EvictionPolicy::ALL.into_iter().find(|p| p.name() == name)
    }

    /// The runtime's name of the policy, as its environment gives it; also its value of
    /// `--policy`.
    pub fn name(self) -> &'static str {
        match self {
            EvictionPolicy::Fifo => "fifo",
            EvictionPolicy::Clock => "clock",
            EvictionPolicy::Refault => "refault",
        }
    }
}

const PAGES_PER_MB: u64 = (1 << 20) / 4096;

impl FarMemory {
    /// The environment the traced command gets; `shared` is the prefix of the shared pages.
    pub fn environment(&self, shared: &Path) -> Vec<(OsString, OsString)> {
        vec![
            ("LD_PRELOAD".into(), preload_value(&self.library)),
            (
                env::name(env::LOCAL_PAGES).into(),
                (self.local_mb * PAGES_PER_MB).to_string().into(),
            ),
            (
                env::name(env::MAX_PAGES).into(),
                (self.max_mb * PAGES_PER_MB).to_string().into(),
            ),
            (env::name(env::POLICY).into(), self.policy.name().into()),
            (
                env::name(env::HANDLERS).into(),
                self.handlers.to_string().into(),
            ),
            (
                env::name(env::BUSY_POLL).into(),
                if self.busy_poll { "1" } else { "0" }.into(),
            ),
            (env::name(env::SHARED).into(), shared.as_os_str().to_owned()),
        ]
        .into_iter()
        .chain(self.fault_path.map(|path| {
            (
                env::name(env::FAULT_PATH).into(),
                path.runtime_name().into(),
            )
        }))
        .collect()
    }
}

/// The command's heap served from files of a directory (`record --backing-dir`): the
/// preloaded library maps each process's heap `MAP_SHARED` from a file it creates there.
#[derive(Debug, Clone)]
pub struct HeapBacking {
    /// The library to preload.
    pub library: PathBuf,
    /// The directory.
    pub dir: PathBuf,
}

impl HeapBacking {
    /// The variable that tells the library the directory.
    pub fn environment(&self) -> (OsString, OsString) {
        (
            env::name(env::BACKING_DIR).into(),
            self.dir.as_os_str().to_owned(),
        )
    }
}

impl FarMemory {
    /// Far-memory settings for `library`, refused if `max_mb` is more than the machine has
    /// available: the program's far memory must fit in this machine's.
    pub fn checked(
        library: PathBuf,
        local_mb: u64,
        max_mb: u64,
        policy: EvictionPolicy,
        handlers: u32,
        busy_poll: bool,
    ) -> Result<FarMemory, Error> {
        FarMemory::within(
            library,
            local_mb,
            max_mb,
            policy,
            handlers,
            busy_poll,
            mem_available_mb(),
        )
    }

    /// [`FarMemory::checked`] against `available_mb` of memory (no limit if unknown).
    pub(crate) fn within(
        library: PathBuf,
        local_mb: u64,
        max_mb: u64,
        policy: EvictionPolicy,
        handlers: u32,
        busy_poll: bool,
        available_mb: Option<u64>,
    ) -> Result<FarMemory, Error> {
        let available_mb = available_mb.unwrap_or(u64::MAX);
        if max_mb > available_mb {
            return Err(Error::FarMemoryTooLarge {
                max_mb,
                available_mb,
            });
        }
        Ok(FarMemory {
            library,
            local_mb,
            max_mb,
            policy,
            handlers,
            busy_poll,
            fault_path: None,
        })
    }
}

/// `MemAvailable` of /proc/meminfo, MiB.
pub(crate) fn mem_available_mb() -> Option<u64> {
    Some(crate::procfs::mem_available_kb()? / 1024)
}

/// The file name of the preloaded library (far-memory runtime, allocation tracer, heap backing).
pub const PRELOAD_LIBRARY: &str = "libfltrace_preload.so";

/// The preloaded library: `$FLTRACE_RUNTIME`, else [`PRELOAD_LIBRARY`] beside the running
/// binary (where cargo builds it), else in `../lib/fltrace/` (an installation).
pub fn find_preload_library() -> Result<PathBuf, Error> {
    if let Some(path) = std::env::var_os("FLTRACE_RUNTIME") {
        let library = PathBuf::from(path);
        log::debug!("preloaded library: {} (FLTRACE_RUNTIME)", library.display());
        return Ok(library);
    }
    let exe = std::env::current_exe().map_err(Error::CurrentExe)?;
    let dir = exe.parent().map(Path::to_path_buf).unwrap_or_default();
    let library = preload_library_near(&dir).ok_or(Error::PreloadMissing { exe })?;
    log::debug!("preloaded library: {}", library.display());
    Ok(library)
}

/// The library beside a binary in `dir`, or where an installation puts it.
fn preload_library_near(dir: &Path) -> Option<PathBuf> {
    [
        dir.join(PRELOAD_LIBRARY),
        dir.join("../lib/fltrace").join(PRELOAD_LIBRARY),
    ]
    .iter()
    .find(|p| p.is_file())
    .and_then(|p| p.canonicalize().ok())
}

/// `LD_PRELOAD` with `library` first, before what the environment already preloads.
pub fn preload_value(library: &Path) -> OsString {
    match std::env::var_os("LD_PRELOAD") {
        Some(existing) if !existing.is_empty() => {
            let mut value = library.as_os_str().to_owned();
            value.push(":");
            value.push(existing);
            value
        }
        _ => library.as_os_str().to_owned(),
    }
}

/// Checks that this kernel lets us use userfaultfd, before starting anything.
pub fn check_userfaultfd() -> Result<(), Error> {
    // SAFETY: userfaultfd takes flags and returns a descriptor or -1.
    let fd = unsafe { libc::syscall(libc::SYS_userfaultfd, libc::O_CLOEXEC) };
    if fd < 0 {
        return Err(Error::Kernel {
            what: "userfaultfd, which far-memory emulation (-L/-M) needs",
            source: std::io::Error::last_os_error(),
            hint: " (needs Linux 4.11+, and root or vm.unprivileged_userfaultfd=1)",
        });
    }
    // SAFETY: closing the descriptor just created.
    unsafe { libc::close(fd as i32) };
    Ok(())
}

/// A handled fault from the runtime's log.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Handled {
    /// Faulting thread.
    pub tid: u32,
    /// Page address.
    pub page: u64,
    /// `fltrace_runtime_abi::kind::*`.
    pub kind: u32,
    /// When a handler read the fault's message (CLOCK_MONOTONIC ns, as the trace's times).
    pub read_ns: u64,
    /// When the handler had resolved it.
    pub done_ns: u64,
}

/// A live process's shared page, mapped read-only.
pub struct RuntimeView {
    path: PathBuf,
    /// The page file's device and inode: whose file the name holds may change (an exec's new
    /// image, a later process given the pid, each renames its own page onto it).
    file_id: (u64, u64),
    map: MmapMut,
    cursor: u64,
    /// Log entries overwritten before they were read.
    pub missed: u64,
}

impl RuntimeView {
    /// Opens `<prefix>-<pid>` if the runtime has created it, unless the page was made before
    /// `made_after` (CLOCK_MONOTONIC ns): the page of an image that exec replaced, still under
    /// the name until the new image's runtime renames its own over it; or at or after
    /// `made_before`: the page of a later process that got the pid once this one ended.
    pub fn open(prefix: &Path, pid: u32, made_after: u64, made_before: u64) -> Option<RuntimeView> {
        use std::os::unix::fs::MetadataExt as _;
        let path = page_path(prefix, pid);
        // Read and written: the recorder says how far it has read the log.
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(&path)
            .ok()?;
        let metadata = file.metadata().ok()?;
        if metadata.len() < SHARED_SIZE as u64 {
            return None;
        }
        // SAFETY: a shared mapping of the runtime's page; the runtime writes it concurrently,
        // which is why every field is accessed through atomics.
        let map = unsafe { MmapMut::map_mut(&file) }.ok()?;
        let view = RuntimeView {
            path,
            file_id: (metadata.dev(), metadata.ino()),
            map,
            cursor: 0,
            missed: 0,
        };
        (view.shared().magic.load(Ordering::Acquire) == MAGIC
            && (made_after..made_before).contains(&view.made_ns()))
        .then_some(view)
    }

    /// Tells the runtime how many log entries it may write beyond what was read (0: no
    /// limit): the samples of that many faults fit in the kernel's buffers.
    pub fn allow_backlog(&self, entries: u64) {
        self.shared().log_backlog.store(entries, Ordering::Relaxed);
    }

    /// When the runtime made the page (CLOCK_MONOTONIC ns).
    pub fn made_ns(&self) -> u64 {
        self.shared().made_ns.load(Ordering::Relaxed)
    }

    fn shared(&self) -> &Shared {
        shared_of(&self.map)
    }

    /// The runtime's counters.
    pub fn counters(&self) -> [(&'static str, u64); 16] {
        self.shared().counters()
    }

    /// Where the handled faults' time went, as the runtime measured it.
    pub fn breakdown(&self) -> [(&'static str, u64); BREAKDOWN_LEN] {
        self.shared().breakdown()
    }

    /// What entered the region besides the heap (reservations, commits) and what was taken
    /// out, as stats counters.
    pub fn placement_counters(&self) -> [(&'static str, u64); 7] {
        self.shared().placement.counters()
    }

    /// The runtime's own anonymous mappings (its backing store and metadata).
    pub fn own_ranges(&self) -> Vec<std::ops::Range<u64>> {
        self.shared().placement.own_ranges().collect()
    }

    /// Local and far bytes now: the program's emulated memory.
    pub fn emulated_bytes(&self) -> u64 {
        let shared = self.shared();
        shared.resident.load(Ordering::Relaxed) + shared.far.load(Ordering::Relaxed)
    }

    /// The managed region's address range.
    pub fn region(&self) -> std::ops::Range<u64> {
        let shared = self.shared();
        let start = shared.region_start.load(Ordering::Relaxed);
        start..start + shared.region_len.load(Ordering::Relaxed)
    }

    /// Whether the program ran out of `-M`.
    pub fn exhausted(&self) -> bool {
        self.shared().m_exhausted.load(Ordering::Relaxed) != 0
    }

    /// How the runtime serves faults ([`fltrace_runtime_abi::path`]) and, on the
    /// handler-thread path, why ([`fltrace_runtime_abi::path_reason`]); 0 until chosen.
    pub fn fault_path(&self) -> (u64, u64) {
        let shared = self.shared();
        (
            shared.fault_path.load(Ordering::Relaxed),
            shared.fault_path_reason.load(Ordering::Relaxed),
        )
    }

    /// Appends the log entries written since the last call. Entries are written by several
    /// threads at once (each serves its own faults): one whose slot is taken but not yet
    /// written stops the reading until the next call, unless `last` (the process is gone:
    /// an entry left unwritten, its writer killed mid-way, is counted missed).
    pub fn read_log(&mut self, out: &mut Vec<Handled>, last: bool) {
        let shared = shared_of(&self.map);
        let head = shared.log_head.load(Ordering::Acquire);
        if head < self.cursor {
            // exec started a new runtime, which recreated the page.
            self.cursor = 0;
        }
        if head - self.cursor > LOG_LEN as u64 {
            self.missed += head - self.cursor - LOG_LEN as u64;
            self.cursor = head - LOG_LEN as u64;
        }
        while self.cursor < head {
            let entry = &shared.log[self.cursor as usize % LOG_LEN];
            // Acquire: the fields below were written before the sequence number.
            let seq = entry.seq.load(Ordering::Acquire);
            if seq != self.cursor + 1 {
                if seq > self.cursor + 1 {
                    // Overwritten by a later round of the ring meanwhile.
                    self.missed += 1;
                    self.cursor += 1;
                    continue;
                }
                if !last {
                    break;
                }
                self.missed += 1;
                self.cursor += 1;
                continue;
            }
            let tid = entry.tid.load(Ordering::Relaxed) as u32;
            let page_and_kind = entry.page_and_kind.load(Ordering::Relaxed);
            let read_ns = entry.read_ns.load(Ordering::Relaxed);
            let done_ns = entry.done_ns.load(Ordering::Relaxed);
            std::sync::atomic::fence(Ordering::Acquire);
            if entry.seq.load(Ordering::Relaxed) != seq {
                // Rewritten while read: the ring went round.
                self.missed += 1;
                self.cursor += 1;
                continue;
            }
            out.push(Handled {
                tid,
                page: page_and_kind & !0xfff,
                kind: (page_and_kind & 0xfff) as u32,
                read_ns,
                done_ns,
            });
            self.cursor += 1;
        }
        shared.log_read.store(self.cursor, Ordering::Release);
    }

    /// Removes the shared file (the process is gone; the counters were written out).
    pub fn remove(self) {
        use std::os::unix::fs::MetadataExt as _;
        // Only the page viewed: another process's, renamed onto the name since, stays.
        let still_viewed =
            std::fs::symlink_metadata(&self.path).is_ok_and(|m| (m.dev(), m.ino()) == self.file_id);
        if still_viewed {
            let _ = std::fs::remove_file(&self.path);
        }
    }
}

/// The shared page of process `pid`: `<prefix>-<pid>`.
pub fn page_path(prefix: &Path, pid: u32) -> PathBuf {
    let mut path = prefix.as_os_str().to_owned();
    path.push(format!("-{pid}"));
    PathBuf::from(path)
}

fn shared_of(map: &MmapMut) -> &Shared {
    // SAFETY: the mapping is at least SHARED_SIZE bytes (checked at open), page-aligned, and
    // Shared consists of atomics, valid for any bit pattern.
    unsafe { &*map.as_ptr().cast::<Shared>() }
}

/// Whether a log kind brings a page in (and so matches a missing-page fault in the trace).
pub fn is_fill(kind_value: u32) -> bool {
    kind_value == kind::ZERO || kind_value == kind::FETCH
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The library is found beside the binary first, then in an installation's lib directory.
    #[test]
    fn preload_library_is_found_beside_the_binary_or_installed() {
        let root = tempfile::tempdir().unwrap();
        let bin = root.path().join("bin");
        let lib = root.path().join("lib/fltrace");
        std::fs::create_dir_all(&bin).unwrap();
        std::fs::create_dir_all(&lib).unwrap();
        assert_eq!(preload_library_near(&bin), None);
        std::fs::write(lib.join(PRELOAD_LIBRARY), b"").unwrap();
        assert_eq!(
            preload_library_near(&bin),
            Some(lib.join(PRELOAD_LIBRARY).canonicalize().unwrap())
        );
        std::fs::write(bin.join(PRELOAD_LIBRARY), b"").unwrap();
        assert_eq!(
            preload_library_near(&bin),
            Some(bin.join(PRELOAD_LIBRARY).canonicalize().unwrap())
        );
    }

    /// Far memory beyond what the machine has is refused, naming both figures.
    #[test]
    fn far_memory_must_fit_the_machine() {
        let err = FarMemory::checked(
            "x.so".into(),
            1,
            u64::MAX / 2,
            EvictionPolicy::Fifo,
            1,
            false,
        )
        .unwrap_err()
        .to_string();
        assert!(
            err.starts_with(&format!("-M {} MiB is more than the ", u64::MAX / 2)),
            "{err}"
        );
        let ok = FarMemory::checked("x.so".into(), 1, 2, EvictionPolicy::Clock, 3, true).unwrap();
        assert_eq!(
            (ok.local_mb, ok.max_mb, ok.policy, ok.handlers),
            (1, 2, EvictionPolicy::Clock, 3)
        );
    }
}
