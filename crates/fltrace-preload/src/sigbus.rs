//! Faults served in the thread that takes them.
//!
//! With `UFFD_FEATURE_SIGBUS`, the kernel does not queue a fault on the region for a handler
//! thread and put the faulting thread to sleep: it sends the faulting thread a `SIGBUS`
//! (`BUS_ADRERR`, the faulting address). The runtime's handler serves the fault there
//! ([`crate::region::Region::serve`]) and returns; the thread retries the access. No thread
//! sleeps or is woken for a fault: on a virtual machine, the two cross-CPU wake-ups of the
//! handler-thread path cost an order of magnitude more than the fault itself.
//!
//! The handler is the process's `SIGBUS` handler, so the program's own is kept aside: the
//! interposed `sigaction`, `signal` and friends record it and give it back when asked
//! ([`program_action`]), and a `SIGBUS` that is not a fault on the region (a truncated file's
//! mapping, a `kill`) is passed on to it as the kernel would have delivered it. A blocked
//! `SIGBUS` cannot be delivered (the kernel kills the process instead), so the interposed mask
//! calls never block it, and no signal handler's mask holds it.
//!
//! Everything here is async-signal-safe: atomics, raw system calls, no allocation.

use std::ffi::c_void;
use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicU32, AtomicU64, AtomicUsize, Ordering};

use crate::region::{Fault, Region};
use crate::sys;

/// The region whose faults the handler serves, set before the first fault on it can happen
/// (the allocator claims the region, which writes its metadata there, only after).
static REGION: AtomicPtr<Region> = AtomicPtr::new(std::ptr::null_mut());

/// Set once the handler is the process's `SIGBUS` handler.
static ACTIVE: AtomicBool = AtomicBool::new(false);

/// The program's `SIGBUS` action, as it set it (or as it was when the runtime started): a
/// handler address (or `SIG_DFL`/`SIG_IGN`), its flags and the first 64 signals of its mask
/// (those the kernel has). Written under a sequence count, read by the handler without a lock.
struct ProgramAction {
    seq: AtomicU32,
    handler: AtomicUsize,
    flags: AtomicU64,
    mask: AtomicU64,
}

static PROGRAM: ProgramAction = ProgramAction {
    seq: AtomicU32::new(0),
    handler: AtomicUsize::new(libc::SIG_DFL),
    flags: AtomicU64::new(0),
    mask: AtomicU64::new(0),
};

/// Faults served per thread (by thread id modulo the length): a wrapper that touches a page
/// learns whether the touch was a fault (`crate::syscalls`). Two threads sharing a slot may
/// take one's fault for the other's, which costs at most a call made once more or a short
/// count returned.
static SERVED: [AtomicU32; 1024] = [const { AtomicU32::new(0) }; 1024];

/// Faults served for thread `tid` so far (see [`SERVED`]).
pub fn served(tid: u32) -> u32 {
    SERVED[tid as usize % SERVED.len()].load(Ordering::Relaxed)
}

/// Serializes writers of [`PROGRAM`].
static PROGRAM_WRITER: spinning_top::Spinlock<()> = spinning_top::Spinlock::new(());

/// Whether faults on the region are served in the faulting thread: the handler is installed.
pub fn active() -> bool {
    ACTIVE.load(Ordering::Acquire)
}

/// The first 64 signals of a set (the kernel's signal set).
fn low_bits(set: &libc::sigset_t) -> u64 {
    // SAFETY: sigset_t is at least 8 bytes of plain data; glibc keeps signal n in bit n - 1
    // of its first word, as the kernel does.
    unsafe { std::ptr::read_unaligned((set as *const libc::sigset_t).cast::<u64>()) }
}

fn set_low_bits(set: &mut libc::sigset_t, bits: u64) {
    // SAFETY: as in `low_bits`.
    unsafe { std::ptr::write_unaligned((set as *mut libc::sigset_t).cast::<u64>(), bits) }
}

/// `SIGBUS`'s bit in a kernel signal set.
const BUS_BIT: u64 = 1 << (libc::SIGBUS - 1);

/// The program's `SIGBUS` action as a `sigaction`.
pub fn program_action() -> libc::sigaction {
    loop {
        let before = PROGRAM.seq.load(Ordering::Acquire);
        let handler = PROGRAM.handler.load(Ordering::Relaxed);
        let flags = PROGRAM.flags.load(Ordering::Relaxed);
        let mask = PROGRAM.mask.load(Ordering::Relaxed);
        std::sync::atomic::fence(Ordering::Acquire);
        if before.is_multiple_of(2) && PROGRAM.seq.load(Ordering::Relaxed) == before {
            // SAFETY: sigaction is plain data; all-zero is valid.
            let mut action: libc::sigaction = unsafe { std::mem::zeroed() };
            action.sa_sigaction = handler;
            action.sa_flags = flags as i32;
            set_low_bits(&mut action.sa_mask, mask);
            return action;
        }
        std::hint::spin_loop();
    }
}

/// Records `action` as the program's `SIGBUS` action.
pub fn set_program_action(action: &libc::sigaction) {
    let _writer = PROGRAM_WRITER.lock();
    let seq = PROGRAM.seq.load(Ordering::Relaxed);
    PROGRAM.seq.store(seq.wrapping_add(1), Ordering::Relaxed);
    std::sync::atomic::fence(Ordering::Release);
    PROGRAM
        .handler
        .store(action.sa_sigaction, Ordering::Relaxed);
    PROGRAM
        .flags
        .store(action.sa_flags as u32 as u64, Ordering::Relaxed);
    PROGRAM
        .mask
        .store(low_bits(&action.sa_mask), Ordering::Relaxed);
    PROGRAM.seq.store(seq.wrapping_add(2), Ordering::Release);
}

/// Makes the runtime's handler the process's `SIGBUS` handler for faults on `region`, the
/// action in place kept as the program's. False if the kernel refuses.
pub fn install(region: &'static Region) -> bool {
    REGION.store((region as *const Region).cast_mut(), Ordering::Release);
    // SAFETY: sigaction is plain data; all-zero is valid.
    let mut ours: libc::sigaction = unsafe { std::mem::zeroed() };
    ours.sa_sigaction = on_sigbus as *const () as usize;
    // Every signal blocked while a fault is served: a handler of the program run meanwhile
    // could fault on the region, and wait for the page lock this thread holds. No
    // SA_ONSTACK: an alternate stack the program allocated may be in the region itself.
    ours.sa_flags = libc::SA_SIGINFO | libc::SA_RESTART;
    // SAFETY: a valid set.
    unsafe { libc::sigfillset(&mut ours.sa_mask) };
    // SAFETY: as above.
    let mut old: libc::sigaction = unsafe { std::mem::zeroed() };
    if crate::syscalls::real_sigaction(libc::SIGBUS, &ours, &mut old) != 0 {
        return false;
    }
    set_program_action(&old);
    ACTIVE.store(true, Ordering::Release);
    // What was set before: handlers installed already (by libraries' constructors) with
    // SIGBUS in their masks, and a mask inherited across exec that blocks it.
    for sig in 1..libc::SIGRTMAX() {
        if sig == libc::SIGBUS || sig == libc::SIGKILL || sig == libc::SIGSTOP {
            continue;
        }
        // SAFETY: as above.
        let mut action: libc::sigaction = unsafe { std::mem::zeroed() };
        if crate::syscalls::real_sigaction(sig, std::ptr::null(), &mut action) == 0
            && action.sa_sigaction != libc::SIG_DFL
            && action.sa_sigaction != libc::SIG_IGN
            && let Some(mask) = without_bus(&action.sa_mask)
        {
            action.sa_mask = mask;
            crate::syscalls::real_sigaction(sig, &action, std::ptr::null_mut());
        }
    }
    // SAFETY: sigset_t is plain data; sigemptyset initialises it.
    let mut bus: libc::sigset_t = unsafe { std::mem::zeroed() };
    // SAFETY: a valid set.
    unsafe {
        libc::sigemptyset(&mut bus);
        libc::sigaddset(&mut bus, libc::SIGBUS);
    }
    sys::sigprocmask(libc::SIG_UNBLOCK, Some(&bus), None);
    true
}

/// The handler: serves a fault on the region, or passes the signal on to the program's
/// action.
extern "C" fn on_sigbus(sig: i32, info: *mut libc::siginfo_t, context: *mut c_void) {
    // The interrupted code's errno survives the runtime's system calls.
    // SAFETY: the thread's errno location is always valid.
    let errno = unsafe { *libc::__errno_location() };
    let start = sys::monotonic_ns_vdso();
    // SAFETY: the kernel passes a valid siginfo and ucontext to an SA_SIGINFO handler.
    if !unsafe { serve(info, context, start) } {
        // SAFETY: as above.
        unsafe { pass_on(sig, info, context) };
    }
    // SAFETY: as above.
    unsafe { *libc::__errno_location() = errno };
}

/// Serves the fault `info` describes if it is one on the region; false otherwise.
///
/// # Safety
/// `info` and `context` are the handler's arguments.
unsafe fn serve(info: *mut libc::siginfo_t, context: *mut c_void, start: u64) -> bool {
    let region = REGION.load(Ordering::Acquire);
    if region.is_null() {
        return false;
    }
    // SAFETY: set once from a `&'static Region`.
    let region = unsafe { &*region };
    // SAFETY: a valid siginfo of a SIGBUS.
    let (code, addr) = unsafe { ((*info).si_code, (*info).si_addr() as usize) };
    if code != libc::BUS_ADRERR || !region.in_thread() || !region.contains(addr) {
        return false;
    }
    // SAFETY: a valid ucontext.
    let error = unsafe { fault_error_code(context) };
    let tid = sys::gettid();
    region.serve(&Fault {
        addr,
        tid,
        write: error & 2 != 0,
        wp: error & 1 != 0,
        start_ns: start,
    });
    SERVED[tid as usize % SERVED.len()].fetch_add(1, Ordering::Relaxed);
    let shared = region.shared();
    wait_for_recorder(shared);
    let breakdown = &shared.breakdown;
    let served = breakdown.signals.fetch_add(1, Ordering::Relaxed);
    let took = sys::monotonic_ns_vdso() - start;
    breakdown.handle_ns.fetch_add(took, Ordering::Relaxed);
    breakdown.handle_hist[fltrace_runtime_abi::hist_bucket(took)].fetch_add(1, Ordering::Relaxed);
    // The kernel's counters and schedstat now and then, for a live view (no handler
    // thread does it on this path).
    if served % (1 << 16) == (1 << 16) - 1 {
        crate::breakdown::refresh(shared);
    }
    true
}

/// Waits while the recorder is behind by more than it allows (`Shared::log_backlog`), until
/// it is half that, for at most two seconds (a recorder stopped or gone is not waited for).
fn wait_for_recorder(shared: &fltrace_runtime_abi::Shared) {
    let backlog = shared.log_backlog.load(Ordering::Relaxed);
    let behind = || {
        shared
            .log_head
            .load(Ordering::Relaxed)
            .saturating_sub(shared.log_read.load(Ordering::Relaxed))
    };
    if backlog == 0 || behind() <= backlog {
        return;
    }
    let start = sys::monotonic_ns_vdso();
    while behind() > backlog / 2 && sys::monotonic_ns_vdso() - start < 2_000_000_000 {
        let pause = libc::timespec {
            tv_sec: 0,
            tv_nsec: 200_000,
        };
        // SAFETY: a valid timespec; no remainder wanted.
        unsafe {
            libc::syscall(
                libc::SYS_nanosleep,
                &pause,
                std::ptr::null_mut::<libc::timespec>(),
            )
        };
    }
    let breakdown = &shared.breakdown;
    breakdown.recorder_waits.fetch_add(1, Ordering::Relaxed);
    breakdown
        .recorder_wait_ns
        .fetch_add(sys::monotonic_ns_vdso() - start, Ordering::Relaxed);
}

/// The page-fault error code of the fault that raised the signal: bit 0 set when the page
/// was present (write-protected), bit 1 for a write.
///
/// # Safety
/// `context` is a handler's ucontext.
#[cfg(target_arch = "x86_64")]
unsafe fn fault_error_code(context: *mut c_void) -> u64 {
    // SAFETY: guaranteed by the caller.
    unsafe {
        (*context.cast::<libc::ucontext_t>()).uc_mcontext.gregs[libc::REG_ERR as usize] as u64
    }
}

/// Elsewhere the access is taken for a read: a write then faults once more, write-protected.
///
/// # Safety
/// None needed.
#[cfg(not(target_arch = "x86_64"))]
unsafe fn fault_error_code(_context: *mut c_void) -> u64 {
    0
}

/// Delivers a `SIGBUS` that is not the runtime's as the program's action says.
///
/// # Safety
/// The handler's arguments.
unsafe fn pass_on(sig: i32, info: *mut libc::siginfo_t, context: *mut c_void) {
    if let Some(region) = unsafe { REGION.load(Ordering::Acquire).as_ref() } {
        region
            .shared()
            .breakdown
            .signals_passed
            .fetch_add(1, Ordering::Relaxed);
    }
    let action = program_action();
    // SAFETY: a valid siginfo.
    let sent = unsafe { (*info).si_code } <= 0;
    match action.sa_sigaction {
        libc::SIG_IGN if sent => {}
        libc::SIG_DFL | libc::SIG_IGN => {
            // As untraced: the default action ends the process. A fault is not ignored (the
            // kernel forces it): the access faults again once the default action is in
            // place; a signal sent is raised again, delivered when this handler returns.
            // SAFETY: sigaction is plain data; all-zero is SIG_DFL with no flags.
            let default: libc::sigaction = unsafe { std::mem::zeroed() };
            crate::syscalls::real_sigaction(libc::SIGBUS, &default, std::ptr::null_mut());
            if sent {
                // SAFETY: signals this very thread.
                unsafe {
                    libc::syscall(
                        libc::SYS_tgkill,
                        libc::getpid(),
                        sys::gettid(),
                        libc::SIGBUS,
                    )
                };
            }
        }
        handler => {
            if action.sa_flags & libc::SA_RESETHAND != 0 {
                // SAFETY: as above.
                set_program_action(&unsafe { std::mem::zeroed() });
            }
            // The program's handler runs with the mask it asked for, as the kernel would have
            // set it, but never with SIGBUS blocked (a fault on the region in it must reach
            // this handler again).
            // SAFETY: a valid ucontext.
            let interrupted =
                unsafe { low_bits(&(*context.cast::<libc::ucontext_t>()).uc_sigmask) };
            let mut mask: libc::sigset_t = action.sa_mask;
            set_low_bits(
                &mut mask,
                (interrupted | low_bits(&action.sa_mask)) & !BUS_BIT,
            );
            sys::sigprocmask(libc::SIG_SETMASK, Some(&mask), None);
            if action.sa_flags & libc::SA_SIGINFO != 0 {
                // SAFETY: the program registered this address as an SA_SIGINFO handler.
                let f: extern "C" fn(i32, *mut libc::siginfo_t, *mut c_void) =
                    unsafe { std::mem::transmute(handler) };
                f(sig, info, context);
            } else {
                // SAFETY: the program registered this address as a plain handler.
                let f: extern "C" fn(i32) = unsafe { std::mem::transmute(handler) };
                f(sig);
            }
            // Returning restores the interrupted mask (the kernel's sigreturn).
        }
    }
}

/// `set` without `SIGBUS`, when the handler is installed and `set` holds it: the set to hand
/// the kernel for a mask that would block the signals in it.
pub fn without_bus(set: *const libc::sigset_t) -> Option<libc::sigset_t> {
    if set.is_null() || !active() {
        return None;
    }
    // SAFETY: a valid set from the caller.
    let mut copy = unsafe { *set };
    if low_bits(&copy) & BUS_BIT == 0 {
        return None;
    }
    let bits = low_bits(&copy) & !BUS_BIT;
    set_low_bits(&mut copy, bits);
    Some(copy)
}
