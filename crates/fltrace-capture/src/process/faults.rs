//! A fault's row: its flags classified from the error code and the mappings, its stack
//! unwound ([`super::stacks`]), its counters; and a later major-fault event's mark on it.

use fltrace_trace::{CodeAddr, Fault, FaultFlags, StackEnd, VirtAddr};

use super::Process;
use super::far_memory::PendingRow;
use super::stacks::Uncopied;
use crate::unwind::StackBytes;

/// A page fault as the kernel sampled it: the tracepoint's fields, the registers and the stack
/// copy its stack is unwound from.
#[derive(Debug, Clone, Copy)]
pub struct FaultSample<'a> {
    /// The trace's time of the fault (the sample's CLOCK_MONOTONIC time plus the recorder's
    /// offset).
    pub time_ns: u64,
    pub tid: u32,
    /// The address that faulted.
    pub addr: VirtAddr,
    /// The x86 page-fault error code.
    pub error_code: u64,
    /// The instruction, stack and frame pointers.
    pub regs: (u64, u64, u64),
    /// `rbx`, where the record holds it (the BPF capture's): the CFA of the dynamic loader's
    /// resolver.
    pub rbx: Option<u64>,
    /// The copy of the user stack from the stack pointer up, and the pages it skipped.
    pub stack: StackBytes<'a>,
}

impl Process {
    /// Records one fault: classifies it, unwinds its stack and appends its row, open to the
    /// flags later records add ([`Process::major`], [`Process::poll_runtime`]).
    pub fn fault(
        &mut self,
        sample: &FaultSample<'_>,
        frames: &mut Vec<u64>,
    ) -> Result<(), fltrace_trace::Error> {
        let FaultSample {
            time_ns,
            tid,
            addr,
            error_code,
            regs,
            rbx,
            stack,
        } = *sample;
        // x86 page fault error code bits (arch/x86/include/asm/trap_pf.h).
        const PRESENT: u64 = 1;
        const WRITE: u64 = 2;
        const USER: u64 = 4;
        const INSTR: u64 = 16;
        let mut flags = 0;
        if error_code & WRITE != 0 {
            flags |= FaultFlags::WRITE;
        }
        if error_code & INSTR != 0 {
            flags |= FaultFlags::EXEC;
        }
        if error_code & PRESENT != 0 {
            flags |= FaultFlags::WRPROTECT;
        } else {
            // A missing page of anonymous memory (or of a stack growing into new space) is
            // filled with zeros on first touch; file pages come from the page cache. Nothing
            // is mapped below the lowest address mmap allows (vm.mmap_min_addr, 64 KiB by
            // default) without a mapping record: a fault there is a null pointer's, which
            // kills the program instead of filling a page.
            const LOWEST_MAPPABLE: u64 = 0x10000;
            let anonymous = match self.mapping_at(addr) {
                Some(mapping) => !mapping.is_file(),
                None => addr.get() >= LOWEST_MAPPABLE,
            };
            if anonymous {
                flags |= FaultFlags::ZERO;
            }
        }
        if error_code & USER == 0 {
            flags |= FaultFlags::KERNEL;
        }
        // An access the mappings do not allow fills no page: the kernel raises SIGSEGV (or
        // fails the system call with EFAULT). Not in execve, whose faults come before the
        // new image's mappings are known.
        let in_execve = error_code & USER == 0 && !self.image_running;
        if !in_execve && self.access_denied(addr, error_code) {
            flags = (flags | FaultFlags::INVALID) & !FaultFlags::ZERO;
        }
        if let Some(far) = &mut self.far
            && far.may_be_in_region(addr.get())
        {
            far.pending_fills
                .entry((tid, addr.align_down(0x1000).get()))
                .or_default()
                .push_back(PendingRow {
                    row: self.out.faults.next_row(),
                    time_ns: time_ns.wrapping_sub(far.mono_offset),
                    matched: false,
                    filled: false,
                });
        }

        self.name_unnamed_thread(tid);
        frames.clear();
        if error_code & USER != 0 {
            self.image_running = true;
        }
        // A fault the kernel takes in execve, writing the new image's first stack or bss
        // before its first instruction: the sampled registers are still the old image's, at
        // its execve. The new image has no frames yet; the fault is its entry's.
        let in_exec = error_code & USER == 0
            && !self.image_running
            && !self
                .mapping_at(VirtAddr::new(regs.0))
                .is_some_and(|m| m.is_exec());
        // The row's instruction is its stack's first frame, here the entry too.
        let mut ip = regs.0;
        let end = match self.entries.last() {
            Some(&entry) if in_exec => {
                ip = entry;
                frames.push(entry);
                StackEnd::Complete
            }
            _ => self.unwind_fault(tid, regs, rbx, stack, frames),
        };
        let (stack_id, tracer) = self.intern(frames, end)?;
        self.image_recorded = true;
        if end == StackEnd::Truncated && stack.is_empty() && self.live.reads() {
            if let Some(cfa) = self.unwinder.frame_cfa(&mut self.cache, regs) {
                self.uncopied.entry(tid).or_default().push(Uncopied {
                    row: self.out.faults.next_row(),
                    ip: regs.0,
                    cfa,
                });
            }
        } else if let Some(waiting) = self.uncopied.remove(&tid) {
            self.complete_uncopied(tid, waiting, frames)?;
        }
        // Far memory's own allocator serves the program: what it touches in the managed
        // region is the program's memory. The region is anonymous: a file's pages are not in
        // it (the runtime's log, which its handler writes in the program's faulting thread,
        // before the recorder may know where the region lies).
        let in_region = self
            .far
            .as_ref()
            .is_some_and(|far| far.may_be_in_region(addr.get()))
            && !self.mapping_at(addr).is_some_and(|m| m.is_file());
        if tracer && !in_region {
            flags |= FaultFlags::TRACER;
        }
        let fault = Fault {
            time_ns,
            pid: self.pid,
            tid,
            ip: CodeAddr::new(ip),
            addr,
            flags: FaultFlags(flags),
            stack_id,
        };

        let c = &mut self.counters;
        c.faults += 1;
        match fault.flags.kind() {
            fltrace_trace::FaultKind::Read => c.faults_r += 1,
            fltrace_trace::FaultKind::Write => c.faults_w += 1,
            fltrace_trace::FaultKind::WriteProtect => c.faults_wp += 1,
        }
        if fault.flags.has(FaultFlags::ZERO) {
            c.faults_zp += 1;
        }
        if fault.flags.has(FaultFlags::KERNEL) {
            c.faults_kernel += 1;
        }
        if fault.flags.has(FaultFlags::TRACER) {
            c.faults_tracer += 1;
        }
        self.out.faults.push(fault)
    }

    /// A major-fault event: marks the thread's latest fault on that page as major.
    pub fn major(&mut self, tid: u32, addr: u64) {
        let page = addr & !0xfff;
        let window = &mut self.out.faults;
        if let Some(row) = window.find_recent(4096, |f| {
            f.tid == tid && f.addr.align_down(0x1000).get() == page
        }) {
            window.amend(row, |fault| {
                fault.flags.0 |= FaultFlags::MAJOR;
                fault.flags.0 &= !FaultFlags::ZERO;
            });
            self.counters.faults_major += 1;
        }
    }
}
