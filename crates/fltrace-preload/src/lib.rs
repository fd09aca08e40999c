//! The library that `fltrace record` preloads into the traced program: the far-memory runtime
//! and the allocation tracer.
//!
//! The far-memory runtime is what `fltrace record -L <MB> -M <MB>` preloads into the traced
//! program (`LD_PRELOAD`), as the original fltrace did.
//!
//! It serves the program's heap (the malloc family, C++ `new` included) and its anonymous
//! private mappings from one region of `-M` MB registered with userfaultfd, keeps at most `-L`
//! MB of it resident and evicts the rest to a backing store of the same size, which stands for
//! far memory. Handler threads block on the userfaultfd (or busy-poll with
//! `FLTRACE_RT_BUSY_POLL=1`). Counters and a log of handled faults go to a shared page that
//! the recorder reads (`fltrace-runtime-abi`).
//!
//! A program that moves the break itself (`brk`/`sbrk`) gets a break inside the region.
//! Not covered, as in the original: thread stacks, file-backed and shared mappings,
//! `MAP_FIXED` mappings. A process forked without exec is emulated under the same limit, a
//! budget of its own: it keeps the parent's pages where they were (resident, or in its copy of
//! the store) and starts its own userfaultfd, handler threads and shared page; an exec starts a
//! fresh runtime.
//!
//! With `record --allocs` it also traces every allocator and mapping call with its stack
//! (`alloc_tracer`); without `-L/-M` the C library's own allocator then serves the program.
//!
//! Rules this library lives by: the handler threads never touch the region except to copy a
//! resident, write-protected page (what they allocate, the DTV of the thread that ends the
//! process, comes from the bootstrap arena); the allocator never calls the allocator it
//! replaces; the raw system calls in `sys` go straight to the kernel.

mod alloc_tracer;
mod backed;
mod block_header;
mod breakdown;
mod callers;
mod exit_watch;
mod heap;
mod interpose;
mod managed_malloc;
mod next_alloc;
mod pins;
mod placement;
pub mod region;
mod sigbus;
mod sys;
mod syscalls;
mod uffd;

use std::ffi::c_void;
use std::mem::MaybeUninit;
use std::sync::atomic::{AtomicU8, AtomicUsize, Ordering};

use fltrace_runtime_abi::{MAGIC, SHARED_SIZE, Shared, env, path_reason};

use region::{PAGE, Policy, Region};

const UNINIT: u8 = 0;
const STARTING: u8 = 1;
const READY: u8 = 2;
const FAILED: u8 = 3;

static STATE: AtomicU8 = AtomicU8::new(UNINIT);

/// The library's own allocations (the tracer's unwinder) never go through what it intercepts.
#[global_allocator]
pub(crate) static HEAP: heap::PrivateHeap = heap::PrivateHeap::new();

/// Whether far-memory emulation is configured (`record -L/-M` sets the region size). Without
/// it the C library's allocator serves the program and the library only traces.
pub(crate) fn far_memory() -> bool {
    static FAR: AtomicU8 = AtomicU8::new(0);
    match FAR.load(Ordering::Relaxed) {
        1 => true,
        2 => false,
        _ => {
            let far = sys::env_u64(env::MAX_PAGES).is_some();
            FAR.store(if far { 1 } else { 2 }, Ordering::Relaxed);
            far
        }
    }
}
static mut REGION: MaybeUninit<Region> = MaybeUninit::uninit();

/// The runtime's settings from the environment, read once at start-up. A forked child must not
/// read the environment before its handlers run: a program may have moved it into the heap
/// (redis's and PostgreSQL's process titles do), and a page of it evicted would wait for ever.
struct Settings {
    handlers: u64,
    busy_poll: bool,
    realtime: bool,
    tlb_count: bool,
    /// Faults may be served in the faulting thread (`FLTRACE_RT_FAULT_PATH=signal`).
    in_thread: bool,
    /// Handler threads were asked for by name (`FLTRACE_RT_FAULT_PATH=thread`), not taken as
    /// the default.
    threads_asked: bool,
    /// `FLTRACE_RT_SHARED`, NUL-padded; `shared_len` 0 when unset.
    shared: [u8; 480],
    shared_len: usize,
}

static SETTINGS: std::sync::OnceLock<Settings> = std::sync::OnceLock::new();

fn settings() -> &'static Settings {
    SETTINGS.get_or_init(|| {
        let mut shared = [0; 480];
        let mut shared_len = 0;
        if let Some(prefix) = sys::env_bytes(env::SHARED) {
            shared_len = prefix.len().min(shared.len() - 1);
            shared[..shared_len].copy_from_slice(&prefix[..shared_len]);
        }
        Settings {
            handlers: sys::env_u64(env::HANDLERS).unwrap_or(1).clamp(1, 64),
            busy_poll: sys::env_u64(env::BUSY_POLL) == Some(1),
            realtime: sys::env_u64(env::REALTIME) == Some(1),
            tlb_count: sys::env_u64(env::TLB_COUNT) == Some(1),
            // Handler threads by default: the in-thread path measured slower here under
            // load (docs/BENCHMARKS.md, issue 38) and fails system calls it does not wrap.
            in_thread: sys::env_bytes(env::FAULT_PATH) == Some(b"signal"),
            threads_asked: sys::env_bytes(env::FAULT_PATH) == Some(b"thread"),
            shared,
            shared_len,
        }
    })
}

/// The region, once the runtime is up.
pub(crate) fn region_ready() -> Option<&'static Region> {
    if STATE.load(Ordering::Acquire) == READY {
        // SAFETY: READY is published (Release) after REGION was written, never changed after.
        Some(unsafe { region_ref() })
    } else {
        start();
        (STATE.load(Ordering::Acquire) == READY)
            // SAFETY: as above.
            .then(|| unsafe { region_ref() })
    }
}

/// The region if it exists, without starting the runtime.
pub(crate) fn region_any() -> Option<&'static Region> {
    (STATE.load(Ordering::Acquire) == READY)
        // SAFETY: as in `region_ready`.
        .then(|| unsafe { region_ref() })
}

/// Starts the runtime once; other threads allocating meanwhile use the bootstrap arena.
fn start() {
    if !far_memory() {
        STATE.store(FAILED, Ordering::Release);
        return;
    }
    if STATE
        .compare_exchange(UNINIT, STARTING, Ordering::AcqRel, Ordering::Acquire)
        .is_err()
    {
        return;
    }
    settings();
    callers::init();
    match build_region() {
        Some(region) => {
            // SAFETY: only the thread that won the STARTING exchange writes REGION, once.
            unsafe { (&raw mut REGION).cast::<Region>().write(region) };
            let region = region_any_unchecked();
            placement::init(region);
            // Counters inherited by every thread created from here on: the handlers' and the
            // program's.
            if region.managed() {
                breakdown::open_counters(settings().tlb_count);
            }
            // The server of faults first: claiming writes the allocator's metadata into the
            // region, and those first touches are faults to serve.
            let served = if region.in_thread() {
                sigbus::install(region)
            } else {
                !region.managed() || start_handlers(region)
            };
            if !served {
                // Every fault on the region would wait for ever (or end the process): better
                // no program at all than one that hangs, or one that silently runs without
                // the limit.
                if region.in_thread() {
                    sys::write_stderr(&[
                        b"fltrace: far memory: the SIGBUS handler that serves faults could not be installed\n",
                    ]);
                }
                // SAFETY: ending the process before main; nothing to clean up.
                unsafe { libc::_exit(127) };
            }
            // SAFETY: the region's address range belongs to the allocator from now on.
            let claimed = unsafe { managed_malloc::claim(region.base, region.heap_pages * PAGE) };
            STATE.store(if claimed { READY } else { FAILED }, Ordering::Release);
            if claimed && region.managed() {
                // SAFETY: registering plain functions with pthread_atfork.
                unsafe {
                    libc::pthread_atfork(
                        Some(before_fork),
                        Some(after_fork_parent),
                        Some(after_fork_child),
                    )
                };
            }
        }
        None => STATE.store(FAILED, Ordering::Release),
    }
}

fn region_any_unchecked() -> &'static Region {
    // SAFETY: called only once REGION was written (by `start`, before any handler exists).
    unsafe { region_ref() }
}

/// # Safety
/// REGION must have been written.
unsafe fn region_ref() -> &'static Region {
    // SAFETY: written once, never mutated afterwards (guaranteed by the caller).
    unsafe { &*(&raw const REGION).cast::<Region>() }
}

fn build_region() -> Option<Region> {
    let local = sys::env_u64(env::LOCAL_PAGES);
    let max_pages = sys::env_u64(env::MAX_PAGES)? as usize;
    let policy = match sys::env_bytes(env::POLICY) {
        Some(b"clock") => Policy::Clock,
        Some(b"refault") => Policy::Refault,
        _ => Policy::Fifo,
    };
    let shared = map_shared();
    let asked_threads = !settings().in_thread;
    // A Go program's goroutines run on small stacks in its heap (in the region), with no room
    // for a signal frame and the handler below them: its faults are served by handler threads.
    let go = !asked_threads && is_go_program();
    let want_in_thread = !asked_threads && !go;
    // Pages move by default on the handler-thread path. In the thread they are copied: the
    // program's other threads run while a page moves, and each move's TLB flush of the store
    // page interrupts them (an IPI per fetch, where copying flushes once per batch).
    let want_move = match sys::env_u64(env::MOVE) {
        Some(0) => false,
        Some(_) => true,
        None => !want_in_thread,
    };
    let opened = match local {
        Some(_) => match open_uffd(want_move, want_in_thread) {
            Ok(opened) => opened,
            Err(e) => report_unavailable(e),
        },
        None => Opened {
            fd: -1,
            moves: false,
            in_thread: false,
        },
    };
    let limit = local.unwrap_or(max_pages as u64) as usize;
    let tuning = region::Tuning {
        evict_ahead: sys::env_u64(env::EVICT_AHEAD) != Some(0),
        clean_copies_percent: sys::env_u64(env::CLEAN_COPIES).map_or(10, |p| p.min(100) as usize),
        move_pages: opened.moves,
        reserve_pages: reserve_pages(),
        in_thread: opened.in_thread,
        thread_reason: if settings().threads_asked {
            path_reason::ASKED
        } else if asked_threads {
            path_reason::DEFAULT
        } else if go {
            path_reason::GO_PROGRAM
        } else {
            path_reason::NO_SIGBUS_FEATURE
        },
    };
    Region::create(max_pages, limit, policy, opened.fd, shared, tuning)
}

/// Whether the executable is a Go program: a note of its loaded ELF headers holds Go's build
/// ID (owner "Go", type 4), as `go build` writes in every binary, linked internally or not.
fn is_go_program() -> bool {
    const NT_GO_BUILDID: u32 = 4;
    // SAFETY: getauxval has no preconditions.
    let (phdr, phnum) = unsafe {
        (
            libc::getauxval(libc::AT_PHDR),
            libc::getauxval(libc::AT_PHNUM),
        )
    };
    if phdr == 0 || phnum == 0 {
        return false;
    }
    // SAFETY: the kernel's auxiliary vector points at the executable's program headers, loaded
    // and readable for the life of the process.
    let headers =
        unsafe { std::slice::from_raw_parts(phdr as *const libc::Elf64_Phdr, phnum as usize) };
    // A position-independent executable is loaded at a bias, which its PT_PHDR entry gives.
    let bias = headers
        .iter()
        .find(|h| h.p_type == libc::PT_PHDR)
        .map_or(0, |h| (phdr as usize).wrapping_sub(h.p_vaddr as usize));
    let word = |at: usize| {
        // SAFETY: within a PT_NOTE segment of the loaded executable (checked by the caller).
        unsafe { std::ptr::read_unaligned(at as *const u32) }
    };
    for note in headers.iter().filter(|h| h.p_type == libc::PT_NOTE) {
        let mut at = bias.wrapping_add(note.p_vaddr as usize);
        let end = at.saturating_add(note.p_memsz as usize);
        while at.saturating_add(12) <= end {
            let (name_len, desc_len, kind) =
                (word(at) as usize, word(at + 4) as usize, word(at + 8));
            let name = at + 12;
            let next = name
                .saturating_add(name_len.next_multiple_of(4))
                .saturating_add(desc_len.next_multiple_of(4));
            if next > end {
                break;
            }
            // SAFETY: the name lies within the note segment (`next <= end`).
            let owner = unsafe { std::slice::from_raw_parts(name as *const u8, name_len) };
            // "Go", NUL-padded (the linker writes four bytes).
            if kind == NT_GO_BUILDID && owner.split(|&b| b == 0).next() == Some(b"Go") {
                return true;
            }
            at = next;
        }
    }
    false
}

/// Pages of the reservation area (`FLTRACE_RT_RESERVE_MB`): by default the machine's memory,
/// at least 64 GiB, in whole MiB (the region's metadata wants whole megabytes). A JVM reserves
/// a quarter of the machine's memory for its heap by default, and more beside it.
fn reserve_pages() -> usize {
    const PAGES_PER_MB: usize = (1 << 20) / PAGE;
    let mb = sys::env_u64(env::RESERVE_MB).map_or_else(
        || {
            // SAFETY: sysconf has no preconditions.
            let machine = unsafe { libc::sysconf(libc::_SC_PHYS_PAGES) }.max(0) as usize;
            (machine / PAGES_PER_MB).max(64 << 10)
        },
        |mb| mb as usize,
    );
    mb.saturating_mul(PAGES_PER_MB)
}

/// A userfaultfd and the features it got.
struct Opened {
    fd: i32,
    /// It can move pages (`UFFDIO_MOVE`).
    moves: bool,
    /// Faults on it raise SIGBUS in the faulting thread (`UFFD_FEATURE_SIGBUS`).
    in_thread: bool,
}

/// The userfaultfd, with page moves if `want_move` and the kernel has `UFFDIO_MOVE`, and
/// faults served in the faulting thread if `want_in_thread` and the kernel has
/// `UFFD_FEATURE_SIGBUS`. A kernel refuses a handshake that names a feature it lacks, and a
/// handshake cannot be repeated on one descriptor: each try takes a new one.
fn open_uffd(want_move: bool, want_in_thread: bool) -> std::io::Result<Opened> {
    // Unprivileged users may only ask for user-mode faults (vm.unprivileged_userfaultfd).
    let create = || uffd::create(false).or_else(|_| uffd::create(true));
    let base = uffd::FEATURE_PAGEFAULT_FLAG_WP | uffd::FEATURE_THREAD_ID;
    let mut last = None;
    for (moves, in_thread) in [(true, true), (false, true), (true, false), (false, false)] {
        if (moves && !want_move) || (in_thread && !want_in_thread) {
            continue;
        }
        let fd = create()?;
        let features = base
            | if moves { uffd::FEATURE_MOVE } else { 0 }
            | if in_thread { uffd::FEATURE_SIGBUS } else { 0 };
        match uffd::api(fd, features) {
            Ok(()) => {
                return Ok(Opened {
                    fd,
                    moves,
                    in_thread,
                });
            }
            Err(e) => {
                // SAFETY: closing our own descriptor.
                unsafe { libc::close(fd) };
                last = Some(e);
            }
        }
    }
    Err(last.unwrap_or_else(|| std::io::Error::from_raw_os_error(libc::EINVAL)))
}

/// Far memory was asked for (`-L`) and cannot start: the program ends at start-up, with one
/// line saying why. Run on without the local-memory limit, its figures would answer another
/// question than the one asked, and nothing but a line of stderr would tell.
fn report_unavailable(e: std::io::Error) -> ! {
    let mut code = [0; 20];
    sys::write_stderr(&[
        b"fltrace: userfaultfd is unavailable to the program (errno ",
        sys::decimal(e.raw_os_error().unwrap_or(0) as u64, &mut code),
        b"): far-memory emulation (-L) cannot start\n",
    ]);
    // SAFETY: ending the process before main; nothing to clean up.
    unsafe { libc::_exit(127) }
}

/// Maps the page shared with the recorder, `<FLTRACE_RT_SHARED>-<pid>`, or private memory
/// when running without fltrace.
fn map_shared() -> *const Shared {
    let mut path = [0u8; 512];
    let mut len = 0;
    let settings = settings();
    if settings.shared_len > 0 {
        let prefix = &settings.shared[..settings.shared_len];
        let mut digits = [0; 20];
        // SAFETY: getpid has no preconditions.
        let pid = sys::decimal(unsafe { libc::getpid() } as u64, &mut digits);
        for part in [prefix, b"-", pid] {
            let end = (len + part.len()).min(path.len() - 1);
            path[len..end].copy_from_slice(&part[..end - len]);
            len = end;
        }
    }
    let mut memory = std::ptr::null_mut::<u8>();
    // The page is made under a temporary name and renamed into place: after an exec the
    // recorder may still map the previous image's page under the final name, and truncating
    // that file would crash it (SIGBUS); a rename leaves its mapping intact.
    let mut temp = path;
    let temp_len = (len + 4).min(temp.len() - 1);
    temp[len..temp_len].copy_from_slice(&b".new"[..temp_len - len]);
    // The step that failed and its error, said on stderr: without the page the recorder
    // has none of this process's statistics.
    let mut failed: Option<(&[u8], i32)> = None;
    // SAFETY: reads this thread's errno right after a failed call.
    let errno = || unsafe { *libc::__errno_location() };
    if len > 0 {
        // Created, never opened: /dev/shm is shared, and a file planted under the temporary
        // name (by another user, or left by a crash) must not become the page. A leftover is
        // removed once; a second loss of the race leaves the anonymous fallback below.
        let create = || {
            // SAFETY: `temp` is NUL-terminated (zero-initialised beyond `temp_len`).
            unsafe {
                libc::open(
                    temp.as_ptr().cast(),
                    libc::O_RDWR
                        | libc::O_CREAT
                        | libc::O_EXCL
                        | libc::O_CLOEXEC
                        | libc::O_NOFOLLOW,
                    0o600,
                )
            }
        };
        let mut fd = create();
        if fd < 0 && errno() == libc::EEXIST {
            // SAFETY: removes a directory entry by its NUL-terminated name.
            unsafe { libc::unlink(temp.as_ptr().cast()) };
            fd = create();
        }
        if fd < 0 {
            failed = Some((b"open", errno()));
        } else {
            // Allocated, not sparse: a full /dev/shm fails here instead of raising SIGBUS at
            // the first counter update (the anonymous fallback below keeps the program going).
            // SAFETY: sizing and mapping our own new file.
            let error = unsafe { libc::posix_fallocate(fd, 0, SHARED_SIZE as i64) };
            if error != 0 {
                failed = Some((b"posix_fallocate", error));
            } else {
                let prot = libc::PROT_READ | libc::PROT_WRITE;
                // Populated: its pages are written as faults are served, in the program's own
                // threads when they serve their faults; faults there would be the runtime's,
                // taken at the program's call sites.
                let flags = libc::MAP_SHARED | libc::MAP_POPULATE;
                // SAFETY: a shared mapping of the file just sized, at no fixed address.
                memory = unsafe { sys::map(0, SHARED_SIZE, prot, flags, fd, 0) };
                if memory.is_null() {
                    failed = Some((b"mmap", errno()));
                }
            }
            // SAFETY: the mapping keeps the file; the descriptor is ours to close.
            unsafe { libc::close(fd) };
            if memory.is_null() {
                // SAFETY: removes our own unfinished file by its NUL-terminated name.
                unsafe { libc::unlink(temp.as_ptr().cast()) };
            }
        }
    }
    let named = !memory.is_null();
    if memory.is_null() {
        memory = sys::map_anonymous(SHARED_SIZE, libc::MAP_POPULATE);
    }
    let shared = memory as *const Shared;
    if !shared.is_null() {
        // SAFETY: a fresh, zeroed mapping of SHARED_SIZE bytes: all-zero atomics are valid.
        unsafe {
            (*shared)
                .made_ns
                .store(sys::monotonic_ns_vdso(), Ordering::Relaxed);
            (*shared).magic.store(MAGIC, Ordering::Release);
        }
        // SAFETY: both are NUL-terminated paths in our buffers.
        if named && unsafe { libc::rename(temp.as_ptr().cast(), path.as_ptr().cast()) } != 0 {
            failed = Some((b"rename", errno()));
            // SAFETY: removes our own file by its NUL-terminated name.
            unsafe { libc::unlink(temp.as_ptr().cast()) };
        }
    }
    if let Some((step, error)) = failed {
        let (mut digits, mut code) = ([0; 20], [0; 20]);
        sys::write_stderr(&[
            b"fltrace: far memory: process ",
            // SAFETY: getpid has no preconditions.
            sys::decimal(unsafe { libc::getpid() } as u64, &mut digits),
            b" has no statistics page (",
            step,
            b": errno ",
            sys::decimal(error as u64, &mut code),
            b"): its far-memory statistics are not recorded\n",
        ]);
    }
    shared
}

/// The handler threads of this process (`pthread_self`), slots of 0 free.
static HANDLER_THREADS: [AtomicUsize; 64] = [const { AtomicUsize::new(0) }; 64];

/// Whether the calling thread is one of the handlers. What a handler allocates comes from
/// outside the region it serves: a fault of its own there waits for a handler, itself
/// (`pthread_create`'s DTV, for the thread that ends the process, came from a pool page the
/// limit had evicted, and the process never ended).
pub(crate) fn on_handler_thread() -> bool {
    // SAFETY: pthread_self has no preconditions.
    let me = unsafe { libc::pthread_self() } as usize;
    HANDLER_THREADS
        .iter()
        .map(|slot| slot.load(Ordering::Relaxed))
        .take_while(|&handler| handler != 0)
        .any(|handler| handler == me)
}

/// Registers the calling thread as a handler, before it allocates anything.
fn register_handler_thread() {
    // SAFETY: as above.
    let me = unsafe { libc::pthread_self() } as usize;
    for slot in &HANDLER_THREADS {
        if slot
            .compare_exchange(0, me, Ordering::Relaxed, Ordering::Relaxed)
            .is_ok()
        {
            return;
        }
    }
}

/// In a forked child: the parent's handler threads do not exist here, and a thread of the
/// child may get one of their `pthread_t`s.
fn forget_handler_threads() {
    for slot in &HANDLER_THREADS {
        slot.store(0, Ordering::Relaxed);
    }
}

extern "C" fn handler_main(_: *mut c_void) -> *mut c_void {
    register_handler_thread();
    // Started after REGION was written and before READY: the region is there to use.
    let region = region_any_unchecked();
    // The recorder recognises the runtime's own threads by this name and leaves their
    // faults (on the backing store and metadata) out of the program's trace.
    // SAFETY: PR_SET_NAME with a NUL-terminated name of at most 16 bytes.
    unsafe { libc::prctl(libc::PR_SET_NAME, c"fltrace-rt".as_ptr()) };
    breakdown::register_handler();
    let shared = region.shared();
    let busy = settings().busy_poll;
    // Asked for (FLTRACE_RT_REALTIME=1): a handler woken for a fault preempts the program's
    // threads (and the recorder) instead of queueing behind them. It pays on a machine loaded
    // by other work, but on a quiet one it preempted the program's OpenMP threads for ms at a
    // time (graph 18: 20x against 10x at the default class, once 124 s against 14 s), so it
    // is not the default. Not when busy-polling, where it would own a CPU.
    if !busy && settings().realtime {
        let param = libc::sched_param { sched_priority: 1 };
        // SAFETY: setting the calling thread's policy; refused without privilege, harmless.
        unsafe {
            libc::sched_setscheduler(0, libc::SCHED_FIFO | libc::SCHED_RESET_ON_FORK, &param)
        };
    }
    let mut msgs = [uffd::Msg::default(); 32];
    let mut idle_reads = 0u32;
    loop {
        if !busy {
            let mut pfd = libc::pollfd {
                fd: region.uffd(),
                events: libc::POLLIN,
                revents: 0,
            };
            // SAFETY: one valid pollfd (straight to the kernel: the runtime interposes poll).
            if unsafe { libc::syscall(libc::SYS_poll, &mut pfd, 1, exit_watch::IDLE_CHECK_MS) } == 0
            {
                region.wake_stuck();
                exit_watch::end_if_only_handlers_left();
                continue;
            }
        }
        // SAFETY: reading whole messages into a buffer of the right type and size.
        let n = unsafe {
            sys::read(
                region.uffd(),
                msgs.as_mut_ptr().cast(),
                std::mem::size_of_val(&msgs),
            )
        };
        if n <= 0 {
            if busy {
                // About as often as an idle poll's timeout.
                idle_reads = idle_reads.wrapping_add(1);
                if idle_reads.is_multiple_of(1 << 20) {
                    region.wake_stuck();
                    exit_watch::end_if_only_handlers_left();
                }
            }
            continue;
        }
        let read_ns = sys::monotonic_ns_vdso();
        let b = &shared.breakdown;
        b.reads.fetch_add(1, Ordering::Relaxed);
        for msg in &msgs[..n as usize / std::mem::size_of::<uffd::Msg>()] {
            if msg.event == uffd::EVENT_PAGEFAULT {
                // Counted before the fault is resolved, as it is logged (`Region::log`).
                let msgs_before = b.msgs.fetch_add(1, Ordering::Relaxed);
                region.handle_fault(msg, read_ns);
                let handled = sys::monotonic_ns_vdso() - read_ns;
                b.handle_ns.fetch_add(handled, Ordering::Relaxed);
                b.handle_hist[fltrace_runtime_abi::hist_bucket(handled)]
                    .fetch_add(1, Ordering::Relaxed);
                // The kernel's counters and schedstat now and then, for a live view.
                if msgs_before % (1 << 16) == (1 << 16) - 1 {
                    breakdown::refresh(shared);
                }
            }
        }
        // The faulting threads run again: make room for the next faults now.
        region.after_faults();
    }
}

/// Bytes of a handler thread's stack, a guard page below them.
const HANDLER_STACK: usize = 2 << 20;

/// Thread attributes giving a handler a stack mapped here, outside the region. The C
/// library would otherwise reuse a cached stack: in a forked child its cache holds the
/// parent's threads' stacks, which the program's mmap put in the region, so the new
/// handler's first touch of one whose page the parent had evicted waited for a handler that
/// did not exist yet (`hardening forkevict`).
fn handler_stack() -> Option<libc::pthread_attr_t> {
    let base = sys::map_anonymous(HANDLER_STACK + PAGE, libc::MAP_STACK | libc::MAP_NORESERVE);
    if base.is_null() {
        return None;
    }
    // SAFETY: the lowest page of the mapping just made; attr is initialised before use.
    unsafe {
        libc::mprotect(base.cast(), PAGE, libc::PROT_NONE);
        let mut attr: libc::pthread_attr_t = std::mem::zeroed();
        if libc::pthread_attr_init(&mut attr) != 0 {
            return None;
        }
        if libc::pthread_attr_setstack(&mut attr, base.add(PAGE).cast(), HANDLER_STACK) != 0 {
            libc::pthread_attr_destroy(&mut attr);
            return None;
        }
        Some(attr)
    }
}

/// Starts the handler threads; false (after saying why on stderr) when none could start.
fn start_handlers(region: &Region) -> bool {
    if region.uffd() >= 0 {
        // The handlers read the descriptor non-blocking after poll, so a message taken by
        // another handler does not leave this one stuck in read.
        // SAFETY: fcntl on our own descriptor.
        unsafe {
            let flags = libc::fcntl(region.uffd(), libc::F_GETFL);
            libc::fcntl(region.uffd(), libc::F_SETFL, flags | libc::O_NONBLOCK);
        }
    }
    let handlers = settings().handlers;
    let mut started = 0;
    let mut failure = 0;
    // The program's signal handlers must never run on a handler thread: a program written
    // for one thread would run them beside itself (PostgreSQL 15's postmaster forks its
    // children from them: a second walwriter, a backend never started), and no fault is
    // served while a handler thread waits in one. Threads start with their creator's mask.
    // SAFETY: sigset_t is plain data; both calls take valid pointers.
    let mut all: libc::sigset_t = unsafe { std::mem::zeroed() };
    // SAFETY: as above.
    let mut program_mask: libc::sigset_t = unsafe { std::mem::zeroed() };
    // SAFETY: as above.
    unsafe { libc::sigfillset(&mut all) };
    sys::sigprocmask(libc::SIG_SETMASK, Some(&all), Some(&mut program_mask));
    for _ in 0..handlers {
        let mut thread: libc::pthread_t = 0;
        let error = match handler_stack() {
            // SAFETY: a plain function pointer and no argument, on a stack of our own that
            // lives as long as the process; the thread runs for the process.
            Some(attr) => unsafe {
                let error =
                    libc::pthread_create(&mut thread, &attr, handler_main, std::ptr::null_mut());
                let mut attr = attr;
                libc::pthread_attr_destroy(&mut attr);
                error
            },
            None => libc::ENOMEM,
        };
        if error == 0 {
            started += 1;
        } else {
            failure = error;
        }
    }
    // Restores this thread's own mask, saved above.
    sys::sigprocmask(libc::SIG_SETMASK, Some(&program_mask), None);
    if started < handlers {
        let (mut a, mut b, mut c) = ([0; 20], [0; 20], [0; 20]);
        sys::write_stderr(&[
            b"fltrace: far memory: started ",
            sys::decimal(started, &mut a),
            b" of ",
            sys::decimal(handlers, &mut b),
            b" handler threads (pthread_create: error ",
            sys::decimal(failure as u64, &mut c),
            if started == 0 {
                b"); the program cannot run with -L/-M\n".as_slice()
            } else {
                b")\n".as_slice()
            },
        ]);
    }
    started > 0
}

/// The forking thread's signal mask before the fork, with faults served in the thread: it
/// blocks every signal while it holds the runtime's locks across the fork (a handler of the
/// program run meanwhile could fault on the region, and the SIGBUS handler would wait for
/// the page lock this thread holds). Written once the locks are held, so one fork at a time.
static FORK_MASK: spinning_top::Spinlock<Option<libc::sigset_t>> =
    spinning_top::Spinlock::new(None);

// Lock order: the allocator before the region. A thread inside malloc may be waiting for a
// fault on the allocator's metadata, which a handler serves under the region lock; taking the
// region lock first would leave that thread, and so the allocator lock, stuck.
extern "C" fn before_fork() {
    let region = region_any().filter(|r| r.managed());
    let blocked = region
        .filter(|r| r.in_thread())
        .map(|_| sys::SignalsBlocked::all());
    placement::lock_for_fork();
    managed_malloc::lock_for_fork();
    if let Some(region) = region {
        region.lock_for_fork();
    }
    if let Some(blocked) = blocked {
        *FORK_MASK.lock() = Some(*blocked.old());
        // Restored after the fork, in parent and child.
        std::mem::forget(blocked);
    }
}

/// After fork, in parent or child: the mask `before_fork` saved.
fn restore_fork_mask() {
    if let Some(mask) = FORK_MASK.lock().take() {
        sys::sigprocmask(libc::SIG_SETMASK, Some(&mask), None);
    }
}

/// Set in the parent after its first fork whose child could not be emulated: later such
/// children say nothing.
static FORK_TOLD: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

extern "C" fn after_fork_parent() {
    if let Some(region) = region_any().filter(|r| r.managed()) {
        region.resume();
    }
    managed_malloc::unlock_after_fork();
    placement::unlock_after_fork();
    restore_fork_mask();
}

extern "C" fn after_fork_child() {
    forget_handler_threads();
    if let Some(region) = region_any().filter(|r| r.managed())
        && !emulate_child(region)
    {
        region.detach_child();
        if !FORK_TOLD.swap(true, Ordering::Relaxed) {
            let mut digits = [0; 20];
            // SAFETY: getpid has no preconditions.
            let pid = sys::decimal(unsafe { libc::getpid() } as u64, &mut digits);
            sys::write_stderr(&[
                b"fltrace: far memory: forked child ",
                pid,
                b" runs without a local limit (it could not start a userfaultfd of its own); \
                  said once per parent\n",
            ]);
        }
    }
    managed_malloc::unlock_after_fork();
    placement::unlock_after_fork();
    restore_fork_mask();
}

/// In a child forked without exec: a runtime of its own (userfaultfd, shared page, and
/// handler threads where they serve the faults) over its copy of the region, under the same
/// limit. False, with nothing changed (the page lock still held), when the child cannot have
/// one.
fn emulate_child(region: &Region) -> bool {
    let Ok(opened) = open_uffd(region.moves_pages(), region.in_thread()) else {
        return false;
    };
    if opened.moves != region.moves_pages() || opened.in_thread != region.in_thread() {
        // SAFETY: closing our own descriptor.
        unsafe { libc::close(opened.fd) };
        return false;
    }
    let shared = map_shared();
    if shared.is_null() || !region.adopt_child(opened.fd, shared) {
        // SAFETY: closing our own descriptor.
        unsafe { libc::close(opened.fd) };
        return false;
    }
    // The parent's handler threads and inherited counters are not this process's.
    breakdown::forget_parent();
    breakdown::open_counters(settings().tlb_count);
    if region.in_thread() {
        // The SIGBUS handler, inherited, serves the child's faults: nothing to start.
        return true;
    }
    // pthread_create allocates (its thread's TLS): from the bootstrap arena while the
    // allocator's lock is held for the fork and no handler serves the region yet.
    STATE.store(STARTING, Ordering::Release);
    let started = start_handlers(region);
    STATE.store(READY, Ordering::Release);
    if !started {
        // Every fault on the region would wait for ever.
        // SAFETY: ending the child at once; it has run none of the program's code yet.
        unsafe { libc::_exit(127) };
    }
    true
}

/// At exit, the breakdown's last figures (the counters and schedstat) go to the shared page
/// while the program's threads still exist.
#[used]
#[unsafe(link_section = ".fini_array")]
static FINI: extern "C" fn() = {
    extern "C" fn fini() {
        if let Some(region) = region_any().filter(|r| r.managed()) {
            breakdown::refresh(region.shared());
        }
    }
    fini
};

/// Starts the runtime when the library is loaded, before `main`, even if the program never
/// allocates.
#[used]
#[unsafe(link_section = ".init_array")]
static INIT: extern "C" fn() = {
    extern "C" fn init() {
        start();
    }
    init
};

#[cfg(test)]
mod tests {
    use super::*;

    /// A registered handler is told apart from every other thread while it runs (handlers
    /// never end, so their `pthread_t`s are never reused), and a forked child's forgetting
    /// leaves none.
    #[test]
    fn handler_threads_are_known_by_their_pthread() {
        let (registered, told) = std::sync::mpsc::channel();
        let (checked, done) = std::sync::mpsc::channel::<()>();
        let handler = std::thread::spawn(move || {
            register_handler_thread();
            let _ = registered.send(on_handler_thread());
            let _ = done.recv();
        });
        assert_eq!(told.recv().ok(), Some(true));
        assert!(!on_handler_thread());
        assert!(!std::thread::spawn(on_handler_thread).join().unwrap_or(true));
        drop(checked);
        assert!(handler.join().is_ok());
        forget_handler_threads();
        assert!(
            HANDLER_THREADS
                .iter()
                .all(|slot| slot.load(Ordering::Relaxed) == 0)
        );
    }
}
