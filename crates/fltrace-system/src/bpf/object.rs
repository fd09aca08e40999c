//! The compiled BPF object and the layouts it shares with user space (see bpf/fltrace.bpf.c).

use aya::{Ebpf, EbpfLoader};

use crate::Error;

static OBJECT: &[u8] = aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/fltrace.bpf.o"));

pub(crate) const KEY_COMM: u32 = 1 << 0;
pub(crate) const KEY_PID: u32 = 1 << 1;
pub(crate) const KEY_TGID: u32 = 1 << 2;
pub(crate) const KEY_USTACK: u32 = 1 << 3;
pub(crate) const KEY_KSTACK: u32 = 1 << 4;
pub(crate) const KEY_FIELD: u32 = 1 << 5;
pub(crate) const KEY_FIELD2: u32 = 1 << 6;
pub(crate) const KEY_PROBE: u32 = 1 << 7;

pub(crate) const FILTER_TGIDS: u32 = 1 << 0;
pub(crate) const FILTER_CGROUP: u32 = 1 << 1;
pub(crate) const FILTER_COMM: u32 = 1 << 2;
pub(crate) const FILTER_FIELD: u32 = 1 << 3;
pub(crate) const ANNOUNCE_TGIDS: u32 = 1 << 4;

pub(crate) const SIZE_PAGES_ORDER: u32 = 1;

pub(crate) const TOTAL_EVENTS: u32 = 0;
pub(crate) const TOTAL_DROPPED: u32 = 1;
pub(crate) const TOTAL_STACK_ERRORS: u32 = 2;
pub(crate) const TOTAL_USTACKS_LOST: u32 = 5;

/// The slot of the user allocator probes' configuration.
pub(crate) const USER_ALLOC_SLOT: u32 = 7;

/// `struct config`.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Config {
    pub key_flags: u32,
    pub filter_flags: u32,
    pub field_off: u32,
    pub field_size: u32,
    pub field_signed: u32,
    pub filter_off: u32,
    pub filter_size: u32,
    pub filter_signed: u32,
    pub filter_op: u32,
    pub ptr_off: u32,
    pub ptr_size: u32,
    pub size_off: u32,
    pub size_size: u32,
    pub size_kind: u32,
    pub field2_off: u32,
    pub field2_size: u32,
    pub filter_value: u64,
    pub cgroup_id: u64,
    pub comm: [u8; 16],
}

/// `struct key`.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub(crate) struct Key {
    pub tgid: u32,
    pub pid: u32,
    pub ustack: i32,
    pub kstack: i32,
    pub field: u64,
    pub field2: u64,
    pub comm: [u8; 16],
}

/// `struct ustack`: a user stack's `len` frames, innermost first.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub(crate) struct UStack {
    pub len: u64,
    pub ip: [u64; 127],
}

/// `struct alloc`.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Alloc {
    pub size: u64,
    pub time_ns: u64,
    pub stack: i32,
    pub tgid: u32,
    pub comm: [u8; 16],
}

// SAFETY: plain C structs of integers with no padding holes the kernel could misread.
unsafe impl aya::Pod for Config {}
// SAFETY: as above.
unsafe impl aya::Pod for Key {}
// SAFETY: as above.
unsafe impl aya::Pod for Alloc {}
// SAFETY: as above.
unsafe impl aya::Pod for UStack {}

/// Loads the object (its maps are created; programs are loaded when attached).
pub(crate) fn load() -> Result<Ebpf, Error> {
    fltrace_capture::bpf::raise_memlock();
    EbpfLoader::new().load(OBJECT).map_err(|e| {
        if fltrace_capture::bpf::refused_for_privilege(&e) {
            Error::NotPermitted(bpf_privilege_hint())
        } else {
            Error::Load(Box::new(e))
        }
    })
}

/// What a user without the privilege to load BPF needs, with the setting that decides it.
fn bpf_privilege_hint() -> String {
    let unprivileged = crate::procfs::sysctl::<String>("kernel/unprivileged_bpf_disabled")
        .unwrap_or_else(|| "unknown".to_owned());
    format!(
        "the kernel refused to load BPF (Operation not permitted): the BPF tools need \
         CAP_BPF and CAP_PERFMON (or CAP_SYS_ADMIN); run as root, or give the binary them with \
         `setcap cap_bpf,cap_perfmon+ep` (kernel.unprivileged_bpf_disabled is {unprivileged})"
    )
}

/// A task name as the kernel stores it.
pub(crate) fn comm_bytes(name: &str) -> [u8; 16] {
    let mut comm = [0u8; 16];
    for (dst, src) in comm.iter_mut().take(15).zip(name.bytes()) {
        *dst = src;
    }
    comm
}

pub(crate) fn comm_string(comm: &[u8; 16]) -> String {
    let end = comm.iter().position(|&b| b == 0).unwrap_or(16);
    String::from_utf8_lossy(&comm[..end]).into_owned()
}
