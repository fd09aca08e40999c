/// One page fault as recorded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Fault {
    /// Time of the fault, nanoseconds since the Unix epoch.
    pub time_ns: u64,
    /// Process id.
    pub pid: u32,
    /// Thread id.
    pub tid: u32,
    /// Address of the faulting instruction.
    pub ip: crate::CodeAddr,
    /// The faulting data address (not page-aligned).
    pub addr: crate::VirtAddr,
    /// What kind of fault it was.
    pub flags: FaultFlags,
    /// Index into the process's stack table.
    pub stack_id: u32,
}

/// What counting faults by stack needs of a fault: read without the other columns when
/// streaming a faults file ([`crate::FaultRowGroups::open_keys`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FaultKey {
    /// Time of the fault, nanoseconds since the Unix epoch.
    pub time_ns: u64,
    /// What kind of fault it was.
    pub flags: FaultFlags,
    /// Index into the process's stack table.
    pub stack_id: u32,
    /// The faulting thread, for the profiles that label samples by thread (pprof's `tid`).
    pub tid: u32,
}

impl From<&Fault> for FaultKey {
    fn from(fault: &Fault) -> FaultKey {
        FaultKey {
            time_ns: fault.time_ns,
            flags: fault.flags,
            stack_id: fault.stack_id,
            tid: fault.tid,
        }
    }
}

/// Fault flags. Bits 1, 2 and 32 have the values of the original fltrace's `flags` column so that
/// its report format stays compatible; the others are new.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, PartialOrd, Ord)]
pub struct FaultFlags(pub u16);

impl FaultFlags {
    /// The access was a write.
    pub const WRITE: u16 = 1;
    /// The page was present: a protection fault (write-protect, copy-on-write).
    pub const WRPROTECT: u16 = 2;
    /// The access was an instruction fetch.
    pub const EXEC: u16 = 4;
    /// The kernel took the fault on the program's behalf (a system call touching user memory,
    /// such as `read(2)` into a fresh buffer); the stack is the one of the system call.
    pub const KERNEL: u16 = 8;
    /// Far-memory emulation brought an evicted page back from the backing store.
    pub const FETCH: u16 = 16;
    /// First touch of anonymous memory: the kernel filled a zero page.
    pub const ZERO: u16 = 32;
    /// The kernel needed I/O to resolve it (a major fault).
    pub const MAJOR: u16 = 64;
    /// Taken by fltrace's own code in the traced process (the allocation tracer unwinding,
    /// logging or using its private heap), not on the program's behalf. Reports leave these
    /// out unless asked (`--include-tracer`).
    pub const TRACER: u16 = 128;
    /// The access was not allowed: no mapping holds the address, or the mapping's protection
    /// forbids the access. The kernel raised SIGSEGV (a null pointer, a guard page, the JVM's
    /// implicit null checks and safepoint polls, a handler catching it), or for an access a
    /// system call made, failed it with EFAULT. No page was filled or read in.
    pub const INVALID: u16 = 256;
    /// Whether all bits of `bit` are set.
    pub fn has(self, bit: u16) -> bool {
        self.0 & bit == bit
    }

    /// Read, write or write-protect, as the original tool's `op` column names them.
    pub fn kind(self) -> FaultKind {
        if self.has(Self::WRPROTECT) {
            FaultKind::WriteProtect
        } else if self.has(Self::WRITE) {
            FaultKind::Write
        } else {
            FaultKind::Read
        }
    }

    /// `zero` for first touches, `invalid` for accesses the mappings did not allow,
    /// `regular` otherwise (the original's `type` column, extended).
    pub fn type_name(self) -> &'static str {
        if self.has(Self::INVALID) {
            "invalid"
        } else if self.has(Self::ZERO) {
            "zero"
        } else {
            "regular"
        }
    }
}

/// The access kind of a fault.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum FaultKind {
    /// A load from a page that was not present.
    Read,
    /// A store to a page that was not present.
    Write,
    /// A store to a present page that was write-protected (copy-on-write, dirty tracking).
    WriteProtect,
}

impl FaultKind {
    /// The name the original tool used.
    pub fn name(self) -> &'static str {
        match self {
            FaultKind::Read => "read",
            FaultKind::Write => "write",
            FaultKind::WriteProtect => "wrprotect",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A protection fault is reported as write-protect even though it also carries the write bit.
    #[test]
    fn wrprotect_wins_over_write() {
        let flags = FaultFlags(FaultFlags::WRITE | FaultFlags::WRPROTECT);
        assert_eq!(flags.kind(), FaultKind::WriteProtect);
        assert_eq!(FaultFlags(FaultFlags::WRITE).kind().name(), "write");
        assert_eq!(FaultFlags(0).kind().name(), "read");
        assert_eq!(FaultFlags(FaultFlags::ZERO).type_name(), "zero");
        assert_eq!(FaultFlags(FaultFlags::INVALID).type_name(), "invalid");
        assert_eq!(FaultFlags(0).type_name(), "regular");
    }
}
