//! The kernel memory a recording takes for its rings: one budget whatever the number of CPUs.

use std::process::Stdio;
use std::time::{Duration, Instant};

use fltrace_capture::budget::{Carrier, plan_rings};

use super::util::*;

/// The rings a running recorder has mapped: the size of each perf ring mapping
/// (`anon_inode:[perf_event]`) and of each BPF map mapping (`anon_inode:bpf-map`), bytes.
fn mapped_rings(pid: u32) -> (Vec<u64>, Vec<u64>) {
    let maps = std::fs::read_to_string(format!("/proc/{pid}/maps")).unwrap_or_default();
    let (mut perf, mut bpf) = (Vec::new(), Vec::new());
    for line in maps.lines() {
        let Some((range, _)) = line.split_once(' ') else {
            continue;
        };
        let Some((start, end)) = range.split_once('-') else {
            continue;
        };
        let size = u64::from_str_radix(end, 16).expect("hex end")
            - u64::from_str_radix(start, 16).expect("hex start");
        if line.ends_with("[perf_event]") {
            perf.push(size);
        } else if line.ends_with("bpf-map") {
            bpf.push(size);
        }
    }
    perf.sort_unstable();
    bpf.sort_unstable();
    (perf, bpf)
}

/// What the kernel charges for the BPF maps and programs a running recorder holds, from
/// `/proc/PID/fdinfo` (`memlock`): the ring's (its data, header pages and page tables) and
/// the rest's (the other maps and the programs), bytes.
fn bpf_memlock(pid: u32) -> (u64, u64) {
    let (mut ring, mut rest) = (0, 0);
    let Ok(fds) = std::fs::read_dir(format!("/proc/{pid}/fd")) else {
        return (0, 0);
    };
    for fd in fds.flatten() {
        let link = std::fs::read_link(fd.path()).unwrap_or_default();
        let link = link.to_string_lossy();
        if !link.ends_with("bpf-map") && !link.ends_with("bpf-prog") {
            continue;
        }
        let info = std::fs::read_to_string(format!(
            "/proc/{pid}/fdinfo/{}",
            fd.file_name().to_string_lossy()
        ))
        .unwrap_or_default();
        let field = |name: &str| {
            info.lines()
                .find_map(|l| l.strip_prefix(name))
                .and_then(|v| v.trim().parse::<u64>().ok())
        };
        let memlock = field("memlock:").unwrap_or(0);
        // BPF_MAP_TYPE_RINGBUF
        if field("map_type:") == Some(27) {
            ring += memlock;
        } else {
            rest += memlock;
        }
    }
    (ring, rest)
}

/// Recording `sleep` by default and with `--buffer-mb 16`: the recorder maps exactly the rings
/// the sizing rule gives this machine's CPUs (one side-band ring a CPU, one BPF ring shared by
/// all, mapped once for its consumer page and once for its producer page and data, twice),
/// and their kernel memory stays within the budget: the rings' pages, and what the kernel
/// charges (`memlock` in /proc/PID/fdinfo) for the BPF ring's page tables, the program's other
/// maps and its programs, within the part of the budget kept for them. The rule's own figures
/// for 2, 64 and 256 CPUs are in `fltrace_capture::budget`'s tests.
#[test]
fn a_recording_maps_the_rings_of_its_budget() {
    let page = 4096u64;
    let cpus = std::fs::read_to_string("/sys/devices/system/cpu/online")
        .expect("online CPUs")
        .trim()
        .split(',')
        .map(|range| match range.split_once('-') {
            Some((a, b)) => b.parse::<usize>().unwrap() - a.parse::<usize>().unwrap() + 1,
            None => 1,
        })
        .sum::<usize>();
    for budget in [None, Some(16)] {
        let dir = Dir::new();
        let mut cmd = dir.fltrace();
        cmd.args(["record", "-q"]);
        if let Some(mb) = budget {
            cmd.args(["--buffer-mb", &mb.to_string()]);
        }
        let child = cmd
            .args(["--", "sleep", "3"])
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("fltrace runs");
        let budget_mb = budget.unwrap_or(fltrace_capture::DEFAULT_BUDGET_MB);
        let plan = plan_rings(budget_mb, cpus, page as usize, Carrier::SharedRing)
            .expect("a plan for this machine");
        let shared = plan.shared as u64;
        let per_cpu = plan.per_cpu as u64;
        // Once the command runs, every ring is mapped (the children that help make them have
        // let go by then).
        let wanted_perf = vec![per_cpu + page; cpus];
        let wanted_bpf = vec![page, page + 2 * shared];
        let deadline = Instant::now() + Duration::from_secs(2);
        let mut seen = mapped_rings(child.id());
        while (seen.0 != wanted_perf || seen.1 != wanted_bpf) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
            seen = mapped_rings(child.id());
        }
        let (ring_memlock, rest_memlock) = bpf_memlock(child.id());
        let out = child.wait_with_output().expect("fltrace ends");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert_eq!(seen.0, wanted_perf, "{budget:?}: perf rings of {plan:?}");
        assert_eq!(seen.1, wanted_bpf, "{budget:?}: the BPF ring of {plan:?}");
        // Kernel memory: each perf mapping is its ring; the BPF ring is its data once and
        // three pages (the kernel's, the consumer's and the producer's).
        let memory = seen.0.iter().sum::<u64>() + shared + 3 * page;
        assert_eq!(memory + plan.fixed as u64, plan.total() as u64, "{plan:?}");
        // What the kernel charges for the BPF ring beyond its pages (its page tables), for
        // the other maps and for the programs: within the part of the budget kept for them.
        assert!(ring_memlock > shared + 3 * page, "{ring_memlock} {plan:?}");
        let fixed = ring_memlock - (shared + 3 * page) + rest_memlock;
        assert!(
            rest_memlock > 0 && fixed <= plan.fixed as u64,
            "{budget:?}: maps and programs {rest_memlock}, ring {ring_memlock}: {plan:?}"
        );
        // All of it within the budget.
        let charged = seen.0.iter().sum::<u64>() + ring_memlock + rest_memlock;
        assert!(
            charged <= budget_mb as u64 * 1024 * 1024,
            "{budget:?}: {charged} bytes for {plan:?}"
        );
    }
}
