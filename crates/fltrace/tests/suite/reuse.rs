//! A pid reused within one recording (`pidreuse.c`): the process that held it first and the
//! one that got it after its exit each keep their own files and their own exact faults.
//!
//! fltrace runs in a pid namespace of its own (`unshare --pid`), where the workload can make
//! its second child get its first child's pid (`ns_last_pid`) with nothing else taking it.

use std::process::{Command, Output};

use fltrace_trace::files::PID_LIMIT;
use fltrace_trace::keys;

use super::util::*;

/// `fltrace record <flags> -- pidreuse <args>` in a pid namespace of its own.
fn record_in_own_namespace(dir: &Dir, flags: &[&str], args: &[&str]) -> Output {
    let program = build_c_workload(dir.path(), "pidreuse.c");
    let out = Command::new("unshare")
        .args(["--pid", "--fork", "--mount-proc"])
        .arg(env!("CARGO_BIN_EXE_fltrace"))
        .arg("record")
        .args(flags)
        .arg("--")
        .arg(&program)
        .args(args)
        .current_dir(dir.path())
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .output()
        .expect("unshare runs");
    assert!(
        out.status.success(),
        "record failed: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// Records the workload's two children (`first` pages, then `second` after `wait_ms`) and
/// checks each one's exact faults at its own line, and nowhere else; returns the summary.
fn check_both_kept(first: u64, second: u64, wait_ms: u64) -> String {
    let dir = Dir::new();
    let args = [first.to_string(), second.to_string(), wait_ms.to_string()];
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let out = record_in_own_namespace(&dir, &[], &args);
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    let children: Vec<u32> = stdout
        .split_whitespace()
        .map(|p| p.parse().expect("the workload prints its children's pids"))
        .collect();
    let pid = children[0];
    assert_eq!(children, [pid, pid], "the pid was reused");
    let later = pid + PID_LIMIT;
    let pids = dir.pids("faults", "parquet");
    assert_eq!(pids.len(), 3, "{pids:?}");
    assert!(pids.contains(&pid) && pids.contains(&later), "{pids:?}");
    let (first_line, second_line) = (
        site("pidreuse.c", "pidreuse_first"),
        site("pidreuse.c", "pidreuse_second"),
    );
    let at = |filed: u32, line: u32| {
        let report = dir.report_json(&["--by", "line", "--pid", &filed.to_string()]);
        count_at(&report, "pidreuse.c", line)
    };
    assert_eq!((at(pid, first_line), at(pid, second_line)), (first, 0));
    assert_eq!((at(later, first_line), at(later, second_line)), (0, second));
    // The parent's trace has neither.
    let parent = pids[0];
    assert_eq!((at(parent, first_line), at(parent, second_line)), (0, 0));
    // The later process's footer says which pid it had and who forked it; `list` names it.
    let (_, footer) = fltrace_trace::read_faults(&fltrace_trace::files::faults(dir.path(), later))
        .expect("the later process's faults read");
    let meta = |key: &str| {
        footer
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.clone())
    };
    assert_eq!(meta(keys::OS_PID), Some(pid.to_string()));
    assert_eq!(meta(keys::PARENT), Some(parent.to_string()));
    let (_, first_footer) =
        fltrace_trace::read_faults(&fltrace_trace::files::faults(dir.path(), pid))
            .expect("the first process's faults read");
    assert!(!first_footer.iter().any(|(k, _)| k == keys::OS_PID));
    let list = dir.run(&["list", "--format", "json"]);
    let list: serde_json::Value = serde_json::from_slice(&list.stdout).expect("list prints JSON");
    let named: Vec<(u64, String)> = list[0]["processes"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|p| (p["pid"].as_u64().unwrap_or(0), p["comm"].to_string()))
        .collect();
    let comm = r#"["pidreuse"]"#.to_owned();
    assert_eq!(
        named,
        [
            (parent as u64, comm.clone()),
            (pid as u64, comm.clone()),
            (later as u64, comm)
        ]
    );
    assert!(
        stderr.contains(&format!(
            "pid {pid} was reused within the run: 1 later process filed as {later} (report -p)"
        )),
        "{stderr}"
    );
    assert!(stderr.contains("from 3 processes, 0 lost"), "{stderr}");
    stderr
}

/// The pid comes back at once: the first process's records are still being read (its files
/// open) when the second's fork is. Before, the second's 300 faults went into the first's
/// files, one process of two.
#[test]
fn pid_reused_at_once_keeps_both_processes() {
    check_both_kept(100, 300, 0);
}

/// The pid comes back after the first process's files were finished. Before, the second
/// process's files replaced the first's (its 100 faults gone) and its own records were
/// dropped, none counted lost, and the checksums could not be written.
#[test]
fn pid_reused_after_the_first_was_finished_keeps_both_processes() {
    check_both_kept(120, 250, 400);
}

/// A process lives until its last thread ends, not its main thread (`leaderexit.c`: a
/// forked child's main thread calls `pthread_exit`, another thread faults 300 ms later).
/// Before, the process was finished when its main thread's end was read and the other
/// thread's 150 faults dropped, said as records the kernel dropped.
#[test]
fn process_outlives_its_main_thread() {
    let dir = Dir::new();
    let program = build_c_workload(dir.path(), "leaderexit.c");
    let out = dir.record_with(&[], &[&program], &["150", "300"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("from 2 processes, 0 lost"), "{stderr}");
    let pids = dir.pids("faults", "parquet");
    assert_eq!(pids.len(), 2, "{pids:?}");
    let line = site("leaderexit.c", "leaderexit_late");
    let at = |pid: u32| {
        let report = dir.report_json(&["--by", "line", "--pid", &pid.to_string()]);
        count_at(&report, "leaderexit.c", line)
    };
    // By the pid the workload prints: pids wrap around (pid_max) between parent and child.
    let child: u32 = String::from_utf8_lossy(&out.stdout)
        .trim()
        .parse()
        .expect("the workload prints its child's pid");
    let parent = pids.iter().copied().find(|&p| p != child);
    assert!(pids.contains(&child), "{pids:?} {child}");
    assert_eq!((at(child), parent.map(at)), (150, Some(0)));
}

/// `record --allocs` with a pid reused: the library names its logs by the kernel's pid, so
/// the later process's log followed the first's as another image of it. Before, the later
/// process (filed as pid + 2^22) had no allocation data and its 300 blocks were the first's.
#[test]
fn pid_reused_with_allocs_keeps_each_processes_allocations() {
    // The pid back at once, and after the first process's files were finished.
    for wait_ms in ["0", "400"] {
        check_allocs_kept(wait_ms);
    }
}

fn check_allocs_kept(wait_ms: &str) {
    let dir = Dir::new();
    let out = record_in_own_namespace(&dir, &["--allocs"], &["100", "300", wait_ms]);
    let children: Vec<u32> = String::from_utf8_lossy(&out.stdout)
        .split_whitespace()
        .map(|p| p.parse().expect("the workload prints its children's pids"))
        .collect();
    let pid = children[0];
    assert_eq!(children, [pid, pid], "the pid was reused");
    let later = pid + PID_LIMIT;
    let sites = |filed: u32| {
        let out = dir.run(&[
            "report",
            "--allocs",
            "--pid",
            &filed.to_string(),
            "--format",
            "csv",
            "--top",
            "0",
        ]);
        assert!(
            out.status.success(),
            "report failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let rows = csv_rows(&String::from_utf8_lossy(&out.stdout));
        ["pidreuse_first_alloc", "pidreuse_second_alloc"].map(|name| {
            let line = site("pidreuse.c", name).to_string();
            rows.iter()
                .find(|r| r["file"].ends_with("pidreuse.c") && r["line"] == line)
                .map(|r| {
                    ["allocs", "bytes", "leaked_allocs", "leaked_bytes"]
                        .map(|c| r[c].parse::<u64>().unwrap_or(u64::MAX))
                })
        })
    };
    assert_eq!(sites(pid), [Some([100, 2400, 100, 2400]), None]);
    assert_eq!(sites(later), [None, Some([300, 14_400, 300, 14_400])]);
}

/// `record -L -M` with a pid reused: each process's runtime statistics are its own. The
/// runtime's page is named by the kernel's pid and the later process's runtime renames its
/// page onto the name. Before, the first process, finished after that, read the later one's
/// page as its own (its `rt_faults` the later one's) and deleted it.
#[test]
fn pid_reused_under_far_memory_keeps_each_processes_runtime_statistics() {
    for wait_ms in ["400", "0"] {
        let dir = Dir::new();
        let out = record_in_own_namespace(&dir, &["-L", "1", "-M", "64"], &["100", "300", wait_ms]);
        let stderr = String::from_utf8_lossy(&out.stderr);
        let children: Vec<u32> = String::from_utf8_lossy(&out.stdout)
            .split_whitespace()
            .map(|p| p.parse().expect("the workload prints its children's pids"))
            .collect();
        let pid = children[0];
        assert_eq!(children, [pid, pid], "the pid was reused");
        let later = pid + PID_LIMIT;
        let stat = |filed: u32, name: &str| {
            let stats = fltrace_trace::files::stats(dir.path(), filed);
            fltrace_trace::stats::last_value(&stats, name).expect("stats")
        };
        // Each touched page is a runtime fault, with the allocator's and the libraries' few.
        let later_faults = stat(later, "rt_faults").expect("the later process's rt_faults");
        assert!((300..332).contains(&later_faults), "{later_faults}");
        assert_eq!(
            stat(later, "rt_matched"),
            Some(later_faults + stat(later, "rt_resolved_elsewhere").unwrap_or(u64::MAX))
        );
        let lost = format!("the runtime statistics of process {pid} are lost");
        match stat(pid, "rt_faults") {
            Some(faults) => {
                assert!((100..132).contains(&faults), "{wait_ms}: {faults}");
                assert!(!stderr.contains(&lost), "{stderr}");
            }
            // The later process replaced the first one's page before any round read it: only
            // when it came back at once, and then said.
            None => assert!(wait_ms == "0" && stderr.contains(&lost), "{stderr}"),
        }
    }
}
