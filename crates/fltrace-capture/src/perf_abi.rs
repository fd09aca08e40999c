//! Raw kernel ABI: `perf_event_open`, its ioctls and tracefs look-ups, each wrapped once in a
//! small safe function returning `io::Result`.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::path::{Path, PathBuf};

pub use perf_event_open_sys::bindings::perf_event_attr;
use perf_event_open_sys::bindings::{
    self as b, PERF_FLAG_FD_CLOEXEC, PERF_SAMPLE_ADDR, PERF_SAMPLE_RAW, PERF_SAMPLE_REGS_USER,
    PERF_SAMPLE_STACK_USER, PERF_SAMPLE_TID, PERF_SAMPLE_TIME,
};

/// x86_64 perf register numbers (arch/x86/include/uapi/asm/perf_regs.h).
pub const REG_BP: u64 = 6;
/// Stack pointer.
pub const REG_SP: u64 = 7;
/// Instruction pointer.
pub const REG_IP: u64 = 8;

/// Blocks until pipe `fd` gives a byte or its end of file, retrying interrupted reads. Only
/// the read system call: usable in a child forked from the threaded recorder.
pub(crate) fn wait_on_pipe(fd: RawFd) {
    let mut byte = 0u8;
    // SAFETY: one byte into a local; a bad descriptor fails the read, which ends the wait.
    while unsafe { libc::read(fd, (&raw mut byte).cast(), 1) } < 0
        && io::Error::last_os_error().raw_os_error() == Some(libc::EINTR)
    {}
}

/// Maps the `len` bytes of perf event `fd`'s ring once more, shared, and leaves the mapping
/// to this process's exit: a ring lives while one mapping of it does, and its last unmapping
/// frees it. A failure leaves that to the other mappings. Only the mmap system call: usable
/// in a child forked from the threaded recorder.
pub(crate) fn map_ring_again(fd: RawFd, len: usize) {
    // SAFETY: a new shared mapping where the kernel chooses; nothing here refers to it.
    unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_SHARED,
            fd,
            0,
        )
    };
}

/// An open perf event.
#[derive(Debug)]
pub struct PerfEvent {
    fd: OwnedFd,
}

impl PerfEvent {
    /// `perf_event_open(attr, pid, cpu, -1, FD_CLOEXEC)`.
    pub fn open(attr: &perf_event_attr, pid: i32, cpu: i32) -> io::Result<PerfEvent> {
        PerfEvent::open_with_flags(attr, pid, cpu, 0)
    }

    /// `perf_event_open(attr, pid, cpu, -1, FD_CLOEXEC | flags)`: with `PERF_FLAG_PID_CGROUP`,
    /// `pid` is the descriptor of a cgroup directory and only its tasks are counted.
    pub fn open_with_flags(
        attr: &perf_event_attr,
        pid: i32,
        cpu: i32,
        flags: u32,
    ) -> io::Result<PerfEvent> {
        let mut attr = *attr;
        // SAFETY: `attr` is a fully initialised perf_event_attr whose `size` field is set by
        // the builders below; the kernel only reads it.
        let fd = unsafe {
            perf_event_open_sys::perf_event_open(
                &mut attr,
                pid,
                cpu,
                -1,
                (PERF_FLAG_FD_CLOEXEC | flags).into(),
            )
        };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: the kernel just returned this descriptor to us and nothing else owns it.
        Ok(PerfEvent {
            fd: unsafe { OwnedFd::from_raw_fd(fd) },
        })
    }

    /// The kernel's id of the event, as samples with `PERF_SAMPLE_IDENTIFIER` carry it.
    pub fn id(&self) -> io::Result<u64> {
        let mut id = 0u64;
        // SAFETY: an open perf event and a valid out-pointer.
        let ret = unsafe { perf_event_open_sys::ioctls::ID(self.fd.as_raw_fd(), &mut id) };
        if ret < 0 {
            Err(io::Error::last_os_error())
        } else {
            Ok(id)
        }
    }

    /// Sends this event's records to `target`'s ring buffer instead of its own.
    pub fn set_output(&self, target: &PerfEvent) -> io::Result<()> {
        // SAFETY: both descriptors are open perf events owned by us.
        let ret = unsafe {
            perf_event_open_sys::ioctls::SET_OUTPUT(self.fd.as_raw_fd(), target.fd.as_raw_fd())
        };
        if ret < 0 {
            Err(io::Error::last_os_error())
        } else {
            Ok(())
        }
    }

    /// Starts counting and sampling.
    pub fn enable(&self) -> io::Result<()> {
        // SAFETY: the descriptor is an open perf event owned by us.
        let ret = unsafe { perf_event_open_sys::ioctls::ENABLE(self.fd.as_raw_fd(), 0) };
        if ret < 0 {
            Err(io::Error::last_os_error())
        } else {
            Ok(())
        }
    }

    /// The descriptor, for mmap and poll.
    pub fn fd(&self) -> &OwnedFd {
        &self.fd
    }
}

/// The root of tracefs, where tracepoint ids and formats are read. Mounts it at
/// `/sys/kernel/tracing` when it is not mounted, as perf does (tools/lib/api/fs/tracing_path.c).
pub fn tracefs() -> io::Result<PathBuf> {
    let candidates = ["/sys/kernel/tracing", "/sys/kernel/debug/tracing"].map(PathBuf::from);
    tracefs_among(&candidates, mount_tracefs)
}

/// The first of `candidates` where tracefs is mounted, else the first once `mount` has
/// mounted it there.
fn tracefs_among(
    candidates: &[PathBuf],
    mount: impl FnOnce(&Path) -> io::Result<()>,
) -> io::Result<PathBuf> {
    let mounted = || {
        candidates
            .iter()
            .find(|p| p.join("events").is_dir())
            .cloned()
    };
    if let Some(path) = mounted() {
        return Ok(path);
    }
    // Mounted but closed to this user (tracefs is mode 0700 by default): say so, rather
    // than fail to mount it again with EPERM.
    for path in candidates {
        if let Err(e) = std::fs::read_dir(path.join("events"))
            && e.kind() == io::ErrorKind::PermissionDenied
        {
            return Err(io::Error::new(
                io::ErrorKind::PermissionDenied,
                tracefs_obstacle(path),
            ));
        }
    }
    let target = candidates
        .first()
        .ok_or_else(|| io::Error::from(io::ErrorKind::NotFound))?;
    match mount(target) {
        Ok(()) => {
            log::info!("mounted tracefs at {}", target.display());
            Ok(target.clone())
        }
        // Another process mounted it since the look above (recorders started together on a
        // machine that booted without tracefs): the kernel refuses the second mount there.
        Err(e) if e.raw_os_error() == Some(libc::EBUSY) => mounted().ok_or(e),
        // perf_event_paranoid is not what stops this user: say what is.
        Err(e) if e.raw_os_error() == Some(libc::EPERM) => Err(io::Error::new(
            io::ErrorKind::PermissionDenied,
            format!(
                "not mounted, and this process may not mount it (that needs CAP_SYS_ADMIN): \
                 run as root, or mount it once with `mount -t tracefs nodev {}`",
                target.display()
            ),
        )),
        Err(e) => Err(e),
    }
}

fn mount_tracefs(target: &Path) -> io::Result<()> {
    let target = std::ffi::CString::new(target.as_os_str().as_encoded_bytes())
        .map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
    // SAFETY: all pointers are valid NUL-terminated strings; mounting tracefs changes no data.
    let ret = unsafe {
        libc::mount(
            c"nodev".as_ptr(),
            target.as_ptr(),
            c"tracefs".as_ptr(),
            0,
            std::ptr::null(),
        )
    };
    if ret != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Why tracefs at `path` cannot be read, with its mode and owner and what opens it.
pub fn tracefs_obstacle(path: &Path) -> String {
    use std::os::unix::fs::MetadataExt;
    let (mode, owner) = std::fs::metadata(path).map_or((0, 0), |m| (m.mode() & 0o7777, m.uid()));
    format!(
        "{} is mode {mode:04o}, owned by uid {owner}: this user cannot read tracepoint ids \
         there; run as root, or open it with `chmod 0755 {}` (or mount tracefs with \
         -o mode=0755); tracepoint samples also need kernel.perf_event_paranoid=-1 ({})",
        path.display(),
        path.display(),
        perf_event_paranoid().map_or_else(|| "now unknown".to_string(), |v| format!("now {v}")),
    )
}

/// The kernel's cap on sampling rates (`kernel.perf_event_max_sample_rate`), samples per
/// second; `None` when it cannot be read.
pub fn max_sample_rate() -> Option<u64> {
    crate::procfs::sysctl("kernel/perf_event_max_sample_rate")
}

/// `/proc/sys/kernel/perf_event_paranoid`, if readable.
pub fn perf_event_paranoid() -> Option<i32> {
    crate::procfs::sysctl("kernel/perf_event_paranoid")
}

/// Why perf refused an event to this user: the paranoid level and what it needs to be.
pub fn perf_permission_obstacle() -> String {
    // SAFETY: geteuid has no preconditions.
    let root = unsafe { libc::geteuid() } == 0;
    match perf_event_paranoid() {
        Some(level) if !root && level > -1 => format!(
            "kernel.perf_event_paranoid is {level}: tracepoint samples of other users' or all \
             CPUs' events need -1 without CAP_PERFMON; run as root, or \
             `sysctl kernel.perf_event_paranoid=-1`"
        ),
        Some(level) => format!(
            "refused although kernel.perf_event_paranoid is {level}{}: a security module \
             (SELinux, AppArmor, lockdown) or a seccomp filter may deny perf_event_open",
            if root {
                " and fltrace runs as root"
            } else {
                ""
            }
        ),
        None => "/proc/sys/kernel/perf_event_paranoid cannot be read: run as root".into(),
    }
}

/// A tracepoint's id and the byte offsets of its raw fields.
#[derive(Debug, Clone)]
pub struct Tracepoint {
    /// The id to put in `perf_event_attr.config`.
    pub id: u64,
    fields: Vec<(String, usize, usize)>,
}

impl Tracepoint {
    /// Reads `events/<group>/<name>/{id,format}` under tracefs.
    pub fn open(tracefs: &Path, group: &str, name: &str) -> io::Result<Tracepoint> {
        let dir = tracefs.join("events").join(group).join(name);
        let id = std::fs::read_to_string(dir.join("id"))?
            .trim()
            .parse()
            .map_err(|_| io::Error::new(io::ErrorKind::InvalidData, "tracepoint id"))?;
        let format = std::fs::read_to_string(dir.join("format"))?;
        Ok(Tracepoint {
            id,
            fields: parse_format(&format),
        })
    }

    /// The (offset, size) of field `name` in the raw sample data.
    pub fn field(&self, name: &str) -> Option<(usize, usize)> {
        self.fields
            .iter()
            .find(|(n, _, _)| n == name)
            .map(|(_, offset, size)| (*offset, *size))
    }
}

/// Parses lines like `field:unsigned long address; offset:8; size:8; signed:0;` (tab-separated).
fn parse_format(format: &str) -> Vec<(String, usize, usize)> {
    let mut fields = Vec::new();
    for line in format.lines() {
        let mut name = None;
        let mut offset = None;
        let mut size = None;
        for part in line.split(';') {
            let part = part.trim();
            if let Some(decl) = part.strip_prefix("field:") {
                name = decl.split_whitespace().last().map(str::to_owned);
            } else if let Some(v) = part.strip_prefix("offset:") {
                offset = v.parse().ok();
            } else if let Some(v) = part.strip_prefix("size:") {
                size = v.parse().ok();
            }
        }
        if let (Some(name), Some(offset), Some(size)) = (name, offset, size) {
            fields.push((name, offset, size));
        }
    }
    fields
}

fn base_attr() -> perf_event_attr {
    let mut attr = perf_event_attr {
        size: std::mem::size_of::<perf_event_attr>() as u32,
        ..Default::default()
    };
    attr.sample_period = 1;
    attr.set_disabled(1);
    attr.set_inherit(1);
    attr.set_exclude_kernel(1);
    attr.set_exclude_hv(1);
    attr.set_use_clockid(1);
    attr.clockid = libc::CLOCK_MONOTONIC;
    attr
}

/// Every occurrence of a fault tracepoint, with the user registers and `stack_bytes` of user
/// stack for unwinding, plus the side-band records (mappings with build IDs, comm/exec,
/// fork/exit) that keep the process model current.
pub fn fault_tracepoint_attr(
    tracepoint_id: u64,
    stack_bytes: u32,
    sideband: bool,
) -> perf_event_attr {
    let mut attr = base_attr();
    attr.type_ = b::PERF_TYPE_TRACEPOINT;
    attr.config = tracepoint_id;
    // Tracepoints fire in kernel context; sampled user registers still come from the task.
    attr.set_exclude_kernel(0);
    attr.sample_type = u64::from(
        PERF_SAMPLE_TID
            | PERF_SAMPLE_TIME
            | PERF_SAMPLE_RAW
            | PERF_SAMPLE_REGS_USER
            | PERF_SAMPLE_STACK_USER,
    );
    attr.sample_regs_user = (1 << REG_BP) | (1 << REG_SP) | (1 << REG_IP);
    attr.sample_stack_user = stack_bytes;
    if sideband {
        attr.set_mmap(1);
        attr.set_mmap2(1);
        attr.set_mmap_data(1);
        attr.set_build_id(1);
        attr.set_comm(1);
        attr.set_comm_exec(1);
        attr.set_task(1);
        attr.set_sample_id_all(1);
    }
    attr
}

/// The side band alone (mappings with build IDs, comm/exec, fork/exit), where a BPF program
/// carries the faults: a dummy software event that never samples, laid out as
/// [`fault_tracepoint_attr`]'s samples with `stack_bytes` of stack, so that the `munmap` and
/// `mremap` samples sharing its ring read the same way.
pub fn sideband_attr(stack_bytes: u32) -> perf_event_attr {
    let mut attr = fault_tracepoint_attr(0, stack_bytes, true);
    attr.type_ = b::PERF_TYPE_SOFTWARE;
    attr.config = u64::from(b::PERF_COUNT_SW_DUMMY);
    attr
}

/// A system-wide tracepoint read for its raw fields only (time and data, no stacks).
pub fn raw_tracepoint_attr(tracepoint_id: u64) -> perf_event_attr {
    let mut attr = base_attr();
    attr.type_ = b::PERF_TYPE_TRACEPOINT;
    attr.config = tracepoint_id;
    attr.set_inherit(0);
    attr.set_exclude_kernel(0);
    attr.sample_type = u64::from(PERF_SAMPLE_TIME | PERF_SAMPLE_RAW);
    attr
}

/// Major faults: the software event fires after the kernel needed I/O for a fault.
pub fn major_fault_attr() -> perf_event_attr {
    let mut attr = base_attr();
    attr.type_ = b::PERF_TYPE_SOFTWARE;
    attr.config = u64::from(b::PERF_COUNT_SW_PAGE_FAULTS_MAJ);
    attr.sample_type = u64::from(PERF_SAMPLE_TID | PERF_SAMPLE_TIME | PERF_SAMPLE_ADDR);
    attr
}

/// How records of events opened with `attr` are laid out.
pub fn parse_info(attr: &perf_event_attr) -> linux_perf_event_reader::RecordParseInfo {
    use linux_perf_event_reader::{Endianness, PerfEventAttr, RecordParseInfo};
    let bytes = attr_bytes(attr);
    match PerfEventAttr::parse::<_, byteorder::NativeEndian>(&bytes[..]) {
        Ok((parsed, _)) => RecordParseInfo::new(&parsed, Endianness::NATIVE),
        // The bytes come from a struct we built: parsing cannot fail short of a bug.
        Err(e) => panic!("cannot parse our own perf_event_attr: {e}"),
    }
}

/// The raw bytes of an attr, as linux-perf-event-reader parses them.
pub fn attr_bytes(attr: &perf_event_attr) -> Vec<u8> {
    let len = std::mem::size_of::<perf_event_attr>();
    // SAFETY: perf_event_attr is plain old data of `len` bytes with no padding the kernel
    // does not also see; reading it as bytes is how the kernel itself consumes it.
    unsafe { std::slice::from_raw_parts((attr as *const perf_event_attr).cast::<u8>(), len) }
        .to_vec()
}

/// The number of online CPUs, for per-CPU events.
pub fn online_cpus() -> io::Result<Vec<i32>> {
    let text = std::fs::read_to_string("/sys/devices/system/cpu/online")?;
    let mut cpus = Vec::new();
    for range in text.trim().split(',') {
        let (first, last) = range.split_once('-').unwrap_or((range, range));
        let bad = |_| io::Error::new(io::ErrorKind::InvalidData, "cpu list");
        let (first, last): (i32, i32) = (first.parse().map_err(bad)?, last.parse().map_err(bad)?);
        cpus.extend(first..=last);
    }
    Ok(cpus)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// This process holds at least its own binary resident; the kernel has a sampling cap.
    #[test]
    fn own_peak_rss_and_the_sampling_cap_are_read() {
        assert!(crate::procfs::own_peak_rss_mb() > 0);
        assert!(max_sample_rate().is_some_and(|rate| rate > 0));
    }

    /// The peak is the `VmHWM` line, whatever lines surround it; none without one.
    #[test]
    fn peak_rss_is_the_high_water_mark_line() {
        let status =
            "Name:\tfltrace\nVmPeak:\t  400000 kB\nVmHWM:\t   23688 kB\nVmRSS:\t   20000 kB\n";
        assert_eq!(crate::procfs::parse_status(status).peak_rss_kb, Some(23688));
        assert_eq!(
            crate::procfs::parse_status("Name:\tkthreadd\nVmRSS:\t1 kB\n").peak_rss_kb,
            None
        );
    }

    /// A child spawned by a process holding 64 MiB reports its own peak, not the parent's
    /// (`ru_maxrss` would report the parent's through the vfork).
    #[test]
    fn a_spawned_recorder_does_not_inherit_its_parents_peak() {
        let held = vec![1u8; 64 << 20];
        // Resident: every page written.
        let touched: u64 = held.iter().step_by(4096).map(|&b| u64::from(b)).sum();
        assert_eq!(touched, (64 << 20) / 4096);
        let out = std::process::Command::new("sh")
            .args(["-c", "grep VmHWM /proc/self/status"])
            .output()
            .expect("sh runs");
        let child_kb = crate::procfs::parse_status(&String::from_utf8_lossy(&out.stdout))
            .peak_rss_kb
            .expect("VmHWM");
        assert!(child_kb < 16 << 10, "child peak {child_kb} kB");
        drop(held);
    }

    /// A mounted tracefs is used without mounting; an unmounted one is mounted at the first
    /// place; one another process mounted between the look and the mount (the kernel then
    /// says EBUSY) is used as found, and EBUSY with nothing mounted stays an error; a user
    /// who may not mount it is told so.
    #[test]
    fn tracefs_mounted_meanwhile_by_another_process_is_used() {
        let dir = tempfile::tempdir().expect("temporary directory");
        let candidates = [dir.path().join("tracing"), dir.path().join("debug")];
        let mount_at = |path: &Path| std::fs::create_dir_all(path.join("events"));
        let busy = || io::Error::from_raw_os_error(libc::EBUSY);

        let mounted = tracefs_among(&candidates, |target| {
            mount_at(target)?;
            Err(busy())
        });
        assert_eq!(mounted.ok().as_ref(), Some(&candidates[0]));

        let refused = tracefs_among(&candidates[1..], |_| Err(busy()));
        assert_eq!(
            refused.err().and_then(|e| e.raw_os_error()),
            Some(libc::EBUSY)
        );

        let found = tracefs_among(&candidates, |_| panic!("mounted twice"));
        assert_eq!(found.ok().as_ref(), Some(&candidates[0]));

        let own = tracefs_among(&candidates[1..], mount_at);
        assert_eq!(own.ok().as_ref(), Some(&candidates[1]));

        let unmounted = [dir.path().join("unmounted")];
        let closed = tracefs_among(&unmounted, |_| {
            Err(io::Error::from_raw_os_error(libc::EPERM))
        })
        .err()
        .map(|e| e.to_string());
        assert_eq!(
            closed.as_deref(),
            Some(
                format!(
                    "not mounted, and this process may not mount it (that needs \
                     CAP_SYS_ADMIN): run as root, or mount it once with `mount -t tracefs \
                     nodev {}`",
                    unmounted[0].display()
                )
                .as_str()
            )
        );
    }

    /// The tracefs format of exceptions:page_fault_user yields its three fields.
    #[test]
    fn parses_tracepoint_format() {
        let format = "name: page_fault_user\nID: 123\nformat:\n\
            \tfield:unsigned short common_type;\toffset:0;\tsize:2;\tsigned:0;\n\
            \tfield:unsigned long address;\toffset:8;\tsize:8;\tsigned:0;\n\
            \tfield:unsigned long ip;\toffset:16;\tsize:8;\tsigned:0;\n\
            \tfield:unsigned long error_code;\toffset:24;\tsize:8;\tsigned:0;\n";
        let fields = parse_format(format);
        assert_eq!(fields.len(), 4);
        assert_eq!(fields[3], ("error_code".to_owned(), 24, 8));
    }
}
