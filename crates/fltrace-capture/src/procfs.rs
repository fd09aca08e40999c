//! Everything capture reads from /proc, read and parsed here only: a process's maps, status,
//! stat, statm, threads, children, names and command line, smaps and its referenced bits, and
//! the machine's settings and memory. (Pagemap, a binary table read in bounded windows, is
//! read by [`crate::pages::FrameMap`].) fltrace-system's own /proc module reuses the public
//! readers: threads, maps, status and settings.
//!
//! A process can exit between any two reads, or during one: each reader says so as an error
//! or `None`, never as a panic, and the parsers take any text (a command name may hold
//! spaces, parentheses and newlines).

use std::io::{self, Write as _};

use fltrace_trace::{Mapping, VirtAddr, parse_procmaps_line};

/// How much of one mapping was referenced in an interval (its smaps entry).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MappingRefs {
    /// First address.
    pub start: VirtAddr,
    /// One past the last address.
    pub end: VirtAddr,
    /// Bytes referenced during the interval.
    pub referenced: u64,
    /// Bytes resident at the end of the interval.
    pub rss: u64,
    /// The mapping's file or pseudo-name.
    pub path: String,
}

/// `/proc/PID/FILE` as text.
fn read(pid: impl std::fmt::Display, file: &str) -> io::Result<String> {
    std::fs::read_to_string(format!("/proc/{pid}/{file}"))
}

/// A setting under /proc/sys (`kernel/perf_event_paranoid`), if readable and well formed.
pub fn sysctl<T: std::str::FromStr>(name: &str) -> Option<T> {
    std::fs::read_to_string(format!("/proc/sys/{name}"))
        .ok()?
        .trim()
        .parse()
        .ok()
}

/// `/proc/PID/maps` as the kernel wrote it.
pub fn maps_text(pid: impl std::fmt::Display) -> io::Result<String> {
    read(pid, "maps")
}

/// The mappings of `/proc/PID/maps`, in address order.
pub fn mappings(pid: impl std::fmt::Display) -> io::Result<Vec<Mapping>> {
    Ok(maps_text(pid)?
        .lines()
        .filter_map(parse_procmaps_line)
        .collect())
}

/// What capture uses of `/proc/PID/stat`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Stat {
    /// The state letter (`R`, `S`, `Z`...), `?` when the line has none.
    pub state: char,
    /// The kernel's `PF_*` flags of the task.
    pub flags: u64,
    /// When it started, in clock ticks after boot.
    pub start_ticks: u64,
}

/// `PF_EXITING` and `PF_KTHREAD` in the flags of `/proc/PID/stat` (include/linux/sched.h).
const PF_EXITING: u64 = 0x0000_0004;
const PF_KTHREAD: u64 = 0x0020_0000;

impl Stat {
    /// A zombie: exited, its memory gone, waiting to be reaped.
    pub fn is_zombie(&self) -> bool {
        self.state == 'Z'
    }

    /// Ending: the task is in `do_exit` (every thread of an exiting group is, before the
    /// group's files close), or a zombie.
    pub fn is_exiting(&self) -> bool {
        self.flags & PF_EXITING != 0 || self.is_zombie()
    }

    /// A kernel thread: no user memory, no user stack.
    pub fn is_kernel_thread(&self) -> bool {
        self.flags & PF_KTHREAD != 0
    }
}

/// Parses a `/proc/PID/stat` line. The command name in parentheses may hold spaces and
/// parentheses: the fields follow the last `)`.
pub(crate) fn parse_stat(text: &str) -> Stat {
    let fields: Vec<&str> = text
        .rsplit_once(')')
        .map(|(_, rest)| rest.split_ascii_whitespace().collect())
        .unwrap_or_default();
    // After the name: state (3rd field of the line), ..., flags (9th).
    Stat {
        state: fields
            .first()
            .and_then(|state| state.chars().next())
            .unwrap_or('?'),
        flags: fields.get(6).and_then(|f| f.parse().ok()).unwrap_or(0),
        // starttime, the 22nd.
        start_ticks: fields.get(19).and_then(|f| f.parse().ok()).unwrap_or(0),
    }
}

/// When process `pid` started, on the wall clock (as file times are): up to a clock tick
/// early, since the kernel gives it in ticks after boot.
pub(crate) fn start_time(pid: u32) -> Option<std::time::SystemTime> {
    let ticks = stat(i32::try_from(pid).ok()?).ok()?.start_ticks;
    // SAFETY: sysconf has no preconditions.
    let hz = u64::try_from(unsafe { libc::sysconf(libc::_SC_CLK_TCK) }).ok()?;
    if hz == 0 {
        return None;
    }
    let started = std::time::Duration::from_nanos(ticks.saturating_mul(1_000_000_000) / hz);
    std::time::SystemTime::now().checked_sub(crate::os::since_boot().checked_sub(started)?)
}

/// `/proc/PID/stat`, parsed.
pub(crate) fn stat(pid: i32) -> io::Result<Stat> {
    Ok(parse_stat(&read(pid, "stat")?))
}

/// What fltrace uses of `/proc/PID/status`; a field the kernel did not give is `None`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Status {
    /// The name (`Name`, with the kernel's escapes of tabs, newlines and backslashes).
    pub name: Option<String>,
    /// Virtual memory (`VmSize`), KiB.
    pub vm_size_kb: Option<u64>,
    /// Peak resident memory since the exec (`VmHWM`), KiB.
    pub peak_rss_kb: Option<u64>,
    /// Resident memory (`VmRSS`), KiB.
    pub rss_kb: Option<u64>,
    /// Resident anonymous memory (`RssAnon`), KiB.
    pub rss_anon_kb: Option<u64>,
    /// The pid in the process's own pid namespace (last of `NSpid`; kernels before 4.1 lack
    /// it).
    pub ns_pid: Option<u32>,
    /// The effective user id (second of `Uid`).
    pub euid: Option<u32>,
}

/// Parses a `/proc/PID/status` text.
pub fn parse_status(text: &str) -> Status {
    let kb = |rest: &str| rest.trim().trim_end_matches("kB").trim().parse().ok();
    let mut status = Status::default();
    for line in text.lines() {
        let Some((key, value)) = line.split_once(':') else {
            continue;
        };
        match key {
            "Name" => status.name = Some(value.trim().to_owned()),
            "VmSize" => status.vm_size_kb = kb(value),
            "VmHWM" => status.peak_rss_kb = kb(value),
            "VmRSS" => status.rss_kb = kb(value),
            "RssAnon" => status.rss_anon_kb = kb(value),
            // The pid in each namespace, outermost first.
            "NSpid" => status.ns_pid = value.split_whitespace().last().and_then(|p| p.parse().ok()),
            "Uid" => status.euid = value.split_whitespace().nth(1).and_then(|u| u.parse().ok()),
            _ => {}
        }
    }
    status
}

/// `/proc/PID/status` (`self` for fltrace's own), parsed.
pub fn status(pid: impl std::fmt::Display) -> io::Result<Status> {
    Ok(parse_status(&read(pid, "status")?))
}

/// The resident pages of process `pid` (second field of `/proc/PID/statm`).
pub(crate) fn resident_pages(pid: i32) -> Option<u64> {
    read(pid, "statm")
        .ok()?
        .split_whitespace()
        .nth(1)?
        .parse()
        .ok()
}

/// The resident and the shared resident pages of process `pid` (second and third fields of
/// `/proc/PID/statm`: the shared ones are its file and shared-memory pages).
pub(crate) fn resident_and_shared_pages(pid: i32) -> Option<(u64, u64)> {
    parse_statm(&read(pid, "statm").ok()?)
}

/// The resident and shared pages of a `/proc/PID/statm` text.
fn parse_statm(text: &str) -> Option<(u64, u64)> {
    let mut fields = text.split_whitespace().skip(1);
    Some((fields.next()?.parse().ok()?, fields.next()?.parse().ok()?))
}

/// The name (`comm`) of process `pid`.
pub(crate) fn comm(pid: i32) -> Option<String> {
    Some(read(pid, "comm").ok()?.trim_end().to_owned())
}

/// The name (`comm`) of thread `tid` of process `pid`, without its newline only.
pub(crate) fn task_comm(pid: u32, tid: u32) -> Option<String> {
    let name = read(pid, &format!("task/{tid}/comm")).ok()?;
    Some(name.trim_end_matches('\n').to_owned())
}

/// The command line of process `pid`, its arguments joined by spaces; empty when gone.
pub(crate) fn command_line(pid: i32) -> String {
    std::fs::read(format!("/proc/{pid}/cmdline"))
        .map(|c| {
            String::from_utf8_lossy(&c)
                .replace('\0', " ")
                .trim_end()
                .to_owned()
        })
        .unwrap_or_default()
}

/// Whether the JVM of process `pid` runs with `-XX:+PreserveFramePointer` (compiled Java code
/// keeps a frame-pointer chain only then), as its options say: `JAVA_TOOL_OPTIONS`, then
/// `JDK_JAVA_OPTIONS`, then the command line, then `_JAVA_OPTIONS`, the last mention winning
/// as in the JVM. False when they cannot be read.
pub(crate) fn jvm_preserves_frame_pointer(pid: u32) -> bool {
    let Ok(cmdline) = std::fs::read(format!("/proc/{pid}/cmdline")) else {
        return false;
    };
    let environ = std::fs::read(format!("/proc/{pid}/environ")).unwrap_or_default();
    preserves_frame_pointer(&cmdline, &environ)
}

/// [`jvm_preserves_frame_pointer`] over the NUL-separated command line and environment.
pub(crate) fn preserves_frame_pointer(cmdline: &[u8], environ: &[u8]) -> bool {
    let variable = |name: &str| {
        environ
            .split(|&b| b == 0)
            .filter_map(|entry| entry.strip_prefix(name.as_bytes())?.strip_prefix(b"="))
            .next_back()
            .map(|value| String::from_utf8_lossy(value).into_owned())
            .unwrap_or_default()
    };
    let arguments = cmdline
        .split(|&b| b == 0)
        .map(|a| String::from_utf8_lossy(a).into_owned());
    let mut options: Vec<String> = Vec::new();
    for name in ["JAVA_TOOL_OPTIONS", "JDK_JAVA_OPTIONS"] {
        options.extend(variable(name).split_whitespace().map(str::to_owned));
    }
    options.extend(arguments);
    options.extend(
        variable("_JAVA_OPTIONS")
            .split_whitespace()
            .map(str::to_owned),
    );
    options
        .iter()
        .rev()
        .find_map(|o| match o.as_str() {
            "-XX:+PreserveFramePointer" => Some(true),
            "-XX:-PreserveFramePointer" => Some(false),
            _ => None,
        })
        .unwrap_or(false)
}

/// The threads of process `pid`, in id order.
pub fn tasks(pid: i32) -> io::Result<Vec<i32>> {
    let mut tasks: Vec<i32> = std::fs::read_dir(format!("/proc/{pid}/task"))?
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
        .collect();
    tasks.sort_unstable();
    Ok(tasks)
}

/// The children thread `tid` of process `pid` started (`/proc/PID/task/TID/children`);
/// empty when it is gone.
pub(crate) fn children(pid: i32, tid: i32) -> Vec<i32> {
    read(pid, &format!("task/{tid}/children"))
        .map(|list| {
            list.split_whitespace()
                .filter_map(|c| c.parse().ok())
                .collect()
        })
        .unwrap_or_default()
}

/// `MemAvailable` of /proc/meminfo, KiB.
pub(crate) fn mem_available_kb() -> Option<u64> {
    let meminfo = std::fs::read_to_string("/proc/meminfo").ok()?;
    let line = meminfo.lines().find(|l| l.starts_with("MemAvailable:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

/// The machine's System RAM ranges `[start, end)` (`/proc/iomem`, needs root: empty
/// without).
pub(crate) fn system_ram() -> Vec<(u64, u64)> {
    parse_system_ram(&std::fs::read_to_string("/proc/iomem").unwrap_or_default())
}

fn parse_system_ram(text: &str) -> Vec<(u64, u64)> {
    text.lines()
        .filter(|l| !l.starts_with(' ') && l.ends_with(": System RAM"))
        .filter_map(|l| {
            let (range, _) = l.split_once(" : ")?;
            let (a, b) = range.trim().split_once('-')?;
            let a = u64::from_str_radix(a, 16).ok()?;
            let b = u64::from_str_radix(b, 16).ok()?;
            (b > a).then_some((a, b + 1))
        })
        .collect()
}

/// `/proc/PID/smaps` as the kernel wrote it.
pub(crate) fn smaps_text(pid: i32) -> io::Result<String> {
    read(pid, "smaps")
}

/// Clears the referenced bits of all of `pid`'s pages (`/proc/PID/clear_refs`).
pub(crate) fn clear_refs(pid: i32) -> io::Result<()> {
    std::fs::OpenOptions::new()
        .write(true)
        .open(format!("/proc/{pid}/clear_refs"))
        .and_then(|mut f| f.write_all(b"1"))
}

/// Parses `/proc/PID/smaps` text into per-mapping referenced and resident bytes.
pub fn parse_smaps(text: &str) -> Vec<MappingRefs> {
    let mut mappings: Vec<MappingRefs> = Vec::new();
    for line in text.lines() {
        if let Some(value) = line.strip_prefix("Referenced:") {
            if let Some(last) = mappings.last_mut() {
                last.referenced = kb_bytes(value);
            }
        } else if let Some(value) = line.strip_prefix("Rss:") {
            if let Some(last) = mappings.last_mut() {
                last.rss = kb_bytes(value);
            }
        } else if line.as_bytes().first().is_some_and(u8::is_ascii_hexdigit)
            && line.contains('-')
            && let Some(m) = parse_procmaps_line(line)
        {
            mappings.push(MappingRefs {
                start: m.start,
                end: m.end,
                referenced: 0,
                rss: 0,
                path: m.path,
            });
        }
    }
    mappings
}

/// A `NNN kB` value in bytes, 0 when malformed.
fn kb_bytes(value: &str) -> u64 {
    value
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse::<u64>()
        .unwrap_or(0)
        * 1024
}

/// Whether this process has CAP_IPC_LOCK (its locked memory is not limited).
pub(crate) fn may_lock_memory() -> bool {
    const CAP_IPC_LOCK: u32 = 14;
    std::fs::read_to_string("/proc/self/status").is_ok_and(|status| {
        status
            .lines()
            .find_map(|line| line.strip_prefix("CapEff:"))
            .and_then(|caps| u64::from_str_radix(caps.trim(), 16).ok())
            .is_some_and(|caps| caps & (1 << CAP_IPC_LOCK) != 0)
    })
}

/// The calling process's peak resident memory since its exec (`VmHWM`), in MB; 0 when
/// `/proc/self/status` cannot be read.
///
/// Not `ru_maxrss`: the kernel carries that across exec from the address space the process
/// left, and a process spawned by vfork (Rust's `Command`, `posix_spawn`) left its parent's:
/// under a 300 MB parent the recorder of 20K mapping cycles read "313 MB" against 8 MB of its
/// own.
pub fn own_peak_rss_mb() -> u64 {
    status("self")
        .ok()
        .and_then(|status| status.peak_rss_kb)
        .map_or(0, |kb| kb / 1024)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The JVM's own order: JAVA_TOOL_OPTIONS, JDK_JAVA_OPTIONS, the command line,
    /// _JAVA_OPTIONS; the last mention wins; off by default.
    #[test]
    fn preserve_frame_pointer_is_the_last_mention() {
        let cmd = |args: &[&str]| args.join("\0").into_bytes();
        let on = cmd(&["java", "-XX:+PreserveFramePointer", "Chain"]);
        assert!(preserves_frame_pointer(&on, b""));
        assert!(!preserves_frame_pointer(&cmd(&["java", "Chain"]), b""));
        let env = b"HOME=/root\0JAVA_TOOL_OPTIONS=-Xmx1g -XX:+PreserveFramePointer\0";
        assert!(preserves_frame_pointer(&cmd(&["java", "Chain"]), env));
        let off = cmd(&["java", "-XX:-PreserveFramePointer", "Chain"]);
        assert!(!preserves_frame_pointer(&off, env));
        assert!(preserves_frame_pointer(
            &off,
            b"_JAVA_OPTIONS=-XX:+PreserveFramePointer\0"
        ));
    }

    /// The fields are found after the last `)`, whatever the name holds: a name that looks
    /// like a zombie's state does not make one.
    #[test]
    fn stat_fields_follow_the_last_parenthesis() {
        let line = "4242 () Z 1 (x) S 1 4242 4242 0 -1 4194560 100 0 0 0 \
                    3 1 0 0 20 0 1 0 987654 12345";
        assert_eq!(
            parse_stat(line),
            Stat {
                state: 'S',
                flags: 4_194_560,
                start_ticks: 987_654,
            }
        );
        assert!(!parse_stat(line).is_zombie());
        assert!(!parse_stat(line).is_exiting());
        // The same task in do_exit: PF_EXITING (0x4) among its flags, still running.
        let ending = "4242 (java) R 1 4242 4242 0 -1 4194564 100 0";
        assert!(parse_stat(ending).is_exiting() && !parse_stat(ending).is_zombie());
        let kthread = "2 (kthreadd) S 0 0 0 0 -1 2129984 0 0";
        assert!(parse_stat(kthread).is_kernel_thread());
        assert!(parse_stat("9 (zombie) Z 1 9 9 0 -1 4227084").is_zombie());
        assert!(parse_stat("9 (zombie) Z 1 9 9 0 -1 4227084").is_exiting());
        assert_eq!(
            parse_stat("garbage"),
            Stat {
                state: '?',
                flags: 0,
                start_ticks: 0,
            }
        );
    }

    /// This process started after boot and before now, within the run of the tests.
    #[test]
    fn own_start_time_is_in_the_past() {
        let started = start_time(std::process::id()).expect("own start time");
        let age = std::time::SystemTime::now()
            .duration_since(started)
            .expect("started in the past");
        assert!(age < std::time::Duration::from_secs(3600), "{age:?}");
    }

    #[test]
    fn status_gives_memory_namespace_pid_and_effective_uid() {
        let text = "Name:\tjava\nNSpid:\t4242\t7\nUid:\t1000\t1001\t1000\t1000\n\
                    VmSize:\t 4194304 kB\nVmHWM:\t  204800 kB\nVmRSS:\t  102400 kB\n\
                    RssAnon:\t   51200 kB\n";
        assert_eq!(
            parse_status(text),
            Status {
                name: Some("java".into()),
                vm_size_kb: Some(4_194_304),
                peak_rss_kb: Some(204_800),
                rss_kb: Some(102_400),
                rss_anon_kb: Some(51_200),
                ns_pid: Some(7),
                euid: Some(1001),
            }
        );
        assert_eq!(
            parse_status("Name:\tkworker\n"),
            Status {
                name: Some("kworker".into()),
                ..Status::default()
            }
        );
    }

    /// Read from this very process: every reader finds what the kernel knows of it.
    #[test]
    fn reads_this_process() {
        let pid = std::process::id() as i32;
        let own = status(pid).expect("own status");
        assert!(own.peak_rss_kb.is_some_and(|kb| kb > 0));
        assert_eq!(own.ns_pid, Some(pid as u32), "not in a pid namespace?");
        assert!(!stat(pid).expect("own stat").is_zombie());
        assert!(resident_pages(pid).is_some_and(|pages| pages > 0));
        assert!(tasks(pid).expect("own threads").contains(&pid));
        assert!(comm(pid).is_some_and(|name| !name.is_empty()));
        assert!(!command_line(pid).is_empty());
        assert!(mappings(pid).expect("own maps").iter().any(|m| m.is_exec()));
        assert!(mem_available_kb().is_some_and(|kb| kb > 0));
        assert!(sysctl::<i32>("kernel/perf_event_paranoid").is_some());
    }

    /// A process that is gone: errors and empty answers, no panic.
    #[test]
    fn a_gone_process_reads_as_errors() {
        let mut child = std::process::Command::new("true")
            .spawn()
            .expect("starting true");
        let pid = child.id() as i32;
        child.wait().expect("waiting for true");
        assert!(stat(pid).is_err());
        assert!(status(pid).is_err());
        assert!(mappings(pid).is_err());
        assert!(tasks(pid).is_err());
        assert_eq!(resident_pages(pid), None);
        assert_eq!(comm(pid), None);
        assert_eq!(command_line(pid), "");
        assert_eq!(children(pid, pid), Vec::<i32>::new());
    }

    #[test]
    fn iomem_gives_top_level_system_ram_only() {
        let text = "00000000-00000fff : Reserved\n00001000-0009ffff : System RAM\n\
                    00100000-bffdffff : System RAM\n  01000000-01ffffff : Kernel code\n\
                    fd000000-fdffffff : PCI Bus 0000:00\n";
        assert_eq!(
            parse_system_ram(text),
            [(0x1000, 0xa0000), (0x10_0000, 0xbffe_0000)]
        );
    }
}
