//! Child processes, exec, crashes, interruption and attaching.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::process::Stdio;
use std::time::{Duration, Instant};

use super::util::*;

/// A child forked without exec gets its own trace, with its faults and not the parent's.
#[test]
fn fork_without_exec_has_its_own_trace() {
    let w = workloads();
    let dir = Dir::new();
    dir.record(&[&w.faults], &["fork", "40"]);
    let pids = dir.pids("faults", "parquet");
    assert_eq!(pids.len(), 2, "{pids:?}");
    let (parent, child) = (pids[0], pids[1]);
    let child_report = dir.report_json(&["--by", "line", "--pid", &child.to_string()]);
    assert_eq!(
        count_at(&child_report, "faults.c", site("faults.c", "child")),
        40
    );
    assert_eq!(
        count_at(&child_report, "faults.c", site("faults.c", "fill")),
        0
    );
    let parent_report = dir.report_json(&["--by", "line", "--pid", &parent.to_string()]);
    assert_eq!(
        count_at(&parent_report, "faults.c", site("faults.c", "fill")),
        40
    );
    assert_eq!(
        count_at(&parent_report, "faults.c", site("faults.c", "child")),
        0
    );
}

/// Faults before and after exec are both symbolized, each with its own image's mappings.
#[test]
fn exec_keeps_both_images() {
    let w = workloads();
    let dir = Dir::new();
    dir.record(&[&w.faults], &["exec", "30"]);
    assert_eq!(dir.pids("faults", "parquet").len(), 1, "exec keeps the pid");
    let report = dir.report_json(&["--by", "stack"]);
    let fill = site("faults.c", "fill") as u64;
    let (mut before, mut after) = (0, 0);
    let in_faults_c =
        |g: &&serde_json::Value| g["file"].as_str().is_some_and(|f| f.ends_with("faults.c"));
    for g in groups(&report)
        .filter(|g| g["line"] == fill)
        .filter(in_faults_c)
    {
        let frames: Vec<&str> = g["stack"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|f| f["function"].as_str())
            .collect();
        if frames.contains(&"level1") {
            after += g["count"].as_u64().unwrap_or(0);
        } else {
            before += g["count"].as_u64().unwrap_or(0);
        }
    }
    assert_eq!((before, after), (30, 30));
}

/// A target that crashes still leaves a complete, readable trace, and its status is passed on.
#[test]
fn crashing_target_leaves_a_trace() {
    let w = workloads();
    let dir = Dir::new();
    let out = dir
        .fltrace()
        .args(["record", "-q", "--"])
        .arg(&w.faults)
        .args(["crash", "25"])
        .output()
        .expect("runs");
    assert_eq!(out.status.code(), Some(128 + libc::SIGSEGV));
    let report = dir.report_json(&["--by", "line"]);
    assert_eq!(count_at(&report, "faults.c", site("faults.c", "fill")), 25);
    let crash_faults = count_at(&report, "faults.c", site("faults.c", "crash"));
    assert_eq!(crash_faults, 1, "the null write itself is a recorded fault");
    // A write through a null pointer fills no page: it is not a first touch, and its type is
    // `invalid` (the program got SIGSEGV), never `regular`.
    let crash = groups(&report)
        .find(|g| g["line"] == site("faults.c", "crash"))
        .expect("the crash's group");
    assert_eq!(
        (&crash["kind"], &crash["first_touches"], &crash["type"]),
        (&"write".into(), &0.into(), &"invalid".into()),
        "{crash}"
    );
}

fn wait_ready(child: &mut std::process::Child) {
    let stdout = child.stdout.take().expect("piped stdout");
    let mut line = String::new();
    BufReader::new(stdout)
        .read_line(&mut line)
        .expect("workload prints");
    assert_eq!(line.trim(), "ready");
}

/// Ctrl-C (SIGINT to fltrace) stops the command and still writes a complete trace.
#[test]
fn interrupt_writes_a_complete_trace() {
    let w = workloads();
    let dir = Dir::new();
    let mut child = dir
        .fltrace()
        .args(["record", "-q", "--"])
        .arg(&w.faults)
        .args(["wait", "30"])
        .stdout(Stdio::piped())
        .spawn()
        .expect("runs");
    wait_ready(&mut child);
    // SAFETY: signalling our own child.
    unsafe { libc::kill(child.id() as i32, libc::SIGINT) };
    let status = child.wait().expect("fltrace exits");
    assert_eq!(status.code(), Some(128 + libc::SIGINT));
    let report = dir.report_json(&["--by", "line"]);
    assert_eq!(count_at(&report, "faults.c", site("faults.c", "fill")), 30);
}

/// `record -p PID` attaches to a running process and records its faults until interrupted.
#[test]
fn attach_to_running_process() {
    let w = workloads();
    let dir = Dir::new();
    let mut target = std::process::Command::new(&w.faults)
        .args(["loop", "20"])
        .stdout(Stdio::piped())
        .spawn()
        .expect("workload runs");
    wait_ready(&mut target);
    let mut recorder = dir
        .fltrace()
        .args(["record", "-q", "-p", &target.id().to_string()])
        .spawn()
        .expect("fltrace runs");
    // Let the loop run a few rounds of 50 ms while attached.
    let start = Instant::now();
    let stats = fltrace_trace::files::stats(dir.path(), target.id());
    while start.elapsed() < Duration::from_secs(10) {
        std::thread::sleep(Duration::from_millis(200));
        let faults = fltrace_trace::stats::last_value(&stats, "faults")
            .ok()
            .flatten()
            .unwrap_or(0);
        if faults >= 60 {
            break;
        }
    }
    // SAFETY: signalling our own children.
    unsafe { libc::kill(recorder.id() as i32, libc::SIGINT) };
    assert!(recorder.wait().expect("fltrace exits").success());
    let _ = target.kill();
    let _ = target.wait();
    let report = dir.report_json(&["--by", "line"]);
    let fill = count_at(&report, "faults.c", site("faults.c", "fill"));
    assert!(fill >= 60, "{fill} faults recorded while attached");
    assert_eq!(fill % 20, 0, "whole rounds of 20 pages: {fill}");
    let stack = stack_at(
        &dir.report_json(&["--by", "stack"]),
        "faults.c",
        site("faults.c", "fill"),
    );
    assert_eq!(
        stack.last().map(|f| f.0.as_str()),
        Some("_start"),
        "{stack:?}"
    );
}

/// `record -p PARENT` attaches to the children the parent has already forked too: faults
/// from three processes, each at its own site, and the summary names them.
#[test]
fn attach_follows_existing_children() {
    let w = workloads();
    let dir = Dir::new();
    let mut target = std::process::Command::new(&w.faults)
        .args(["tree", "20"])
        .stdout(Stdio::piped())
        .spawn()
        .expect("workload runs");
    let mut ready = String::new();
    BufReader::new(target.stdout.take().expect("piped stdout"))
        .read_line(&mut ready)
        .expect("workload prints");
    let children: Vec<u32> = ready
        .strip_prefix("ready ")
        .expect("ready line")
        .split_whitespace()
        .map(|c| c.parse().expect("child pid"))
        .collect();
    let parent = target.id();
    let mut record = dir.fltrace();
    record.args(["record", "-p", &parent.to_string()]);
    let recorder = std::thread::spawn(move || output_within(&mut record, Duration::from_secs(60)));
    // The workload ends by itself after 100 rounds; the recording ends with it.
    assert!(target.wait().expect("workload exits").success());
    let out = recorder.join().expect("recorder thread");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(
        stderr.contains(&format!(
            "fltrace: attached to 3 processes: {parent} (faults), {} (faults), {} (faults)",
            children[0], children[1]
        )),
        "{stderr}"
    );
    assert!(stderr.contains("from 3 processes"), "{stderr}");
    let mut expected = vec![parent, children[0], children[1]];
    expected.sort_unstable();
    assert_eq!(dir.pids("faults", "parquet"), expected);
    let sites = ["fill", "child", "second_child"];
    for (pid, own) in [parent, children[0], children[1]].into_iter().zip(sites) {
        let report = dir.report_json(&["--by", "line", "--pid", &pid.to_string()]);
        // Attaching takes well under the workload's 5 s: at least 10 of its 100 rounds.
        let at_own = count_at(&report, "faults.c", site("faults.c", own));
        assert!(at_own >= 200, "{pid} at {own}: {at_own} faults");
        for other in sites.iter().filter(|s| **s != own) {
            assert_eq!(
                count_at(&report, "faults.c", site("faults.c", other)),
                0,
                "{pid} at {other}"
            );
        }
    }
}

/// `-p PARENT,CHILD1 --no-children` attaches to the listed processes alone, as perf's `-p`:
/// the parent's and the first child's faults, none of the second child's.
#[test]
fn attach_to_a_list_of_processes() {
    let w = workloads();
    let dir = Dir::new();
    let mut target = std::process::Command::new(&w.faults)
        .args(["tree", "20"])
        .stdout(Stdio::piped())
        .spawn()
        .expect("workload runs");
    let mut ready = String::new();
    BufReader::new(target.stdout.take().expect("piped stdout"))
        .read_line(&mut ready)
        .expect("workload prints");
    let children: Vec<u32> = ready
        .strip_prefix("ready ")
        .expect("ready line")
        .split_whitespace()
        .map(|c| c.parse().expect("child pid"))
        .collect();
    let parent = target.id();
    let list = format!("{parent},{}", children[0]);
    let mut record = dir.fltrace();
    record.args(["record", "--no-children", "-p", &list]);
    let recorder = std::thread::spawn(move || output_within(&mut record, Duration::from_secs(60)));
    assert!(target.wait().expect("workload exits").success());
    let out = recorder.join().expect("recorder thread");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(
        stderr.contains(&format!(
            "fltrace: attached to 2 processes: {parent} (faults), {} (faults)",
            children[0]
        )),
        "{stderr}"
    );
    let mut expected = vec![parent, children[0]];
    expected.sort_unstable();
    assert_eq!(dir.pids("faults", "parquet"), expected);
}

/// `--user` runs the command as another user while fltrace keeps its privileges.
#[test]
fn command_runs_as_the_given_user() {
    let dir = Dir::new();
    let out = dir.run(&["record", "-q", "--user", "nobody", "--", "id", "-u"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "65534");
    assert_eq!(
        dir.pids("faults", "parquet").len(),
        1,
        "the command was traced"
    );
}

/// `--user` by uid, `--drop-privileges` as the user sudo names, and the errors of each: an
/// unknown user, no sudo variables.
#[test]
fn command_runs_as_the_sudo_user_or_a_uid() {
    let dir = Dir::new();
    let ids = ["--", "sh", "-c", "id -u; id -g"];
    let out = dir.run(&[&["record", "-q", "--user", "65534"][..], &ids].concat());
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let nogroup = String::from_utf8_lossy(&out.stdout).into_owned();
    assert_eq!(nogroup.lines().next(), Some("65534"), "{nogroup}");
    let out = dir
        .fltrace()
        .args([&["record", "-q", "--drop-privileges"][..], &ids].concat())
        .env("SUDO_UID", "65534")
        .env("SUDO_GID", "65533")
        .output()
        .expect("fltrace runs");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(String::from_utf8_lossy(&out.stdout), "65534\n65533\n");
    let out = dir.run(&[&["record", "-q", "--drop-privileges"][..], &ids].concat());
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(
        String::from_utf8_lossy(&out.stderr),
        "fltrace: --drop-privileges needs SUDO_UID (run fltrace with sudo)\n"
    );
    let out = dir.run(&[&["record", "-q", "--user", "no-such-user-here"][..], &ids].concat());
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(
        String::from_utf8_lossy(&out.stderr),
        "fltrace: no such user: no-such-user-here\n"
    );
}

/// The libraries' warnings are shown by default (a recording into a directory anyone may
/// replace files in); their information only with -v (whom the command runs as), their
/// debugging detail with -vv (where the preloaded library is).
#[test]
fn warnings_always_information_with_v() {
    use std::os::unix::fs::PermissionsExt;
    let dir = Dir::new();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o777)).expect("chmod");
    let runtime = readable_runtime(dir.path());
    let stderr = |verbosity: &[&str]| {
        let out = dir
            .fltrace()
            .env("FLTRACE_RUNTIME", &runtime)
            .args(["record", "-q", "--allocs", "--user", "nobody"])
            .args(verbosity)
            .args(["--", "true"])
            .output()
            .expect("fltrace runs");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stderr).into_owned()
    };
    let warning = "fltrace: warning: . is writable by other users and not sticky";
    let info = "fltrace: info: the command runs as nobody: uid 65534, gid 65534\n";
    let quiet = stderr(&[]);
    assert_eq!(quiet.matches(warning).count(), 1, "{quiet}");
    assert!(!quiet.contains("fltrace: info:"), "{quiet}");
    let verbose = stderr(&["-v"]);
    assert_eq!(verbose.matches(warning).count(), 1, "{verbose}");
    assert!(verbose.contains(info), "{verbose}");
    assert!(!verbose.contains("fltrace: debug:"), "{verbose}");
    let debug = stderr(&["-vv"]);
    assert!(debug.contains(info), "{debug}");
    assert!(
        debug.contains("fltrace: debug: preloaded library: /")
            && debug.contains("libfltrace_preload.so"),
        "{debug}"
    );
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o700)).expect("chmod");
}

/// Memory that `mremap` moved, which perf reports no mapping for, is recorded as a mapping
/// with the moved one's protection, and the faults in it are attributed to it.
#[test]
fn memory_moved_by_mremap_is_a_recorded_mapping() {
    let w = workloads();
    let dir = Dir::new();
    let pages = 40;
    let out = dir.record(&[&w.faults], &["remap", &pages.to_string()]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    let range: Vec<u64> = stdout
        .lines()
        .find_map(|l| l.strip_prefix("remapped "))
        .expect("the workload prints the new range")
        .split(' ')
        .map(|a| u64::from_str_radix(a, 16).expect("hex address"))
        .collect();
    let (start, end) = (range[0], range[1]);
    assert_eq!(end - start, pages * 4096);
    let pid = dir.pids("faults", "parquet")[0];
    let mappings =
        fltrace_trace::read_mappings(&fltrace_trace::files::mmaps(dir.path(), pid)).expect("mmaps");
    let moved: Vec<_> = mappings
        .iter()
        .filter(|m| m.start.get() == start && m.end.get() == end)
        .collect();
    assert_eq!(
        moved.len(),
        1,
        "one mapping of the moved range: {mappings:#?}"
    );
    assert!(!moved[0].is_file() && moved[0].prot == 3, "{:?}", moved[0]);
    let procmaps =
        std::fs::read_to_string(fltrace_trace::files::procmaps(dir.path(), pid)).expect("procmaps");
    assert!(
        procmaps.contains(&format!("{start:x}-{end:x} rw-p ")),
        "{procmaps}"
    );

    let (faults, _) =
        fltrace_trace::read_faults(&fltrace_trace::files::faults(dir.path(), pid)).expect("faults");
    let in_moved: Vec<_> = faults
        .iter()
        .filter(|f| (start..end).contains(&f.addr.get()))
        .collect();
    assert_eq!(in_moved.len() as u64, pages, "one first touch per page");
    assert!(in_moved.iter().all(|f| moved[0].contains(f.addr)
        && f.flags.has(fltrace_trace::FaultFlags::ZERO)
        && f.time_ns >= moved[0].time_ns));
}

/// A shell running two differently named programs: `script` and the folded stacks name each
/// child's faults after its own `comm` (as perf names `cc1plus` and `as` under `g++`), not
/// after the command.
#[test]
fn each_child_is_named_by_its_own_comm() {
    let w = workloads();
    let dir = Dir::new();
    for name in ["alpha", "bravo"] {
        std::fs::copy(&w.deep_c, dir.path().join(name)).expect("copy the workload");
    }
    // alpha touches 8 pages, bravo 16, each 10 calls deep.
    dir.record(
        &[std::path::Path::new("sh")],
        &["-c", "./alpha 8 10 >/dev/null && ./bravo 16 10 >/dev/null"],
    );

    let folded = dir.run(&["report", "--format", "folded"]);
    let folded = String::from_utf8_lossy(&folded.stdout);
    let mut touches: Vec<(String, u64)> = Vec::new();
    for line in folded.lines() {
        let (stack, count) = line.rsplit_once(' ').expect("count");
        if stack.ends_with(";touch") {
            let root = stack.split(';').next().unwrap_or("").to_owned();
            touches.push((root, count.parse().expect("count")));
        }
    }
    touches.sort();
    assert_eq!(
        touches,
        vec![("alpha".to_owned(), 8), ("bravo".to_owned(), 16)],
        "{folded}"
    );

    let script = dir.run(&["script"]);
    let script = String::from_utf8_lossy(&script.stdout);
    let mut by_comm: BTreeMap<String, u64> = Default::default();
    for sample in script.split("\n\n") {
        let Some(header) = sample.lines().next() else {
            continue;
        };
        if sample.lines().nth(1).is_some_and(|l| l.contains(" touch")) {
            let comm = header.split(' ').next().unwrap_or("").to_owned();
            *by_comm.entry(comm).or_default() += 1;
        }
    }
    assert_eq!(
        by_comm.into_iter().collect::<Vec<_>>(),
        vec![("alpha".to_owned(), 8), ("bravo".to_owned(), 16)],
        "{script}"
    );
    // The shell's own faults are its own: `sh` is the root of some lines too.
    assert!(folded.lines().any(|l| l.starts_with("sh;")), "{folded}");
}

/// The pprof profile of a shell running two differently named programs, read by `go tool
/// pprof -raw`: every sample carries `pid`, `tid`, `comm` and `kind`, and the faults per
/// (comm, pid, tid) are exactly those `script` prints, `alpha` and `bravo` each under its own
/// pid with its own faults at `touch`.
#[test]
fn pprof_samples_are_labelled_by_process_and_thread() {
    let w = workloads();
    let dir = Dir::new();
    for name in ["alpha", "bravo"] {
        std::fs::copy(&w.deep_c, dir.path().join(name)).expect("copy the workload");
    }
    dir.record(
        &[std::path::Path::new("sh")],
        &["-c", "./alpha 8 10 >/dev/null && ./bravo 16 10 >/dev/null"],
    );
    let profile = dir.path().join("faults.pb.gz");
    let written = dir.run(&[
        "report",
        "--format",
        "pprof",
        "--output",
        profile.to_str().expect("utf-8 path"),
    ]);
    assert!(written.status.success(), "{written:?}");
    let home = tempfile::tempdir().expect("temp dir");
    let raw = std::process::Command::new("go")
        .args(["tool", "pprof", "-raw"])
        .arg(&profile)
        .env("HOME", home.path())
        .output()
        .expect("go tool pprof runs (scripts/setup.sh installs golang-go)");
    assert!(raw.status.success(), "{raw:?}");
    let raw = String::from_utf8_lossy(&raw.stdout);

    // Samples: a `count: locations` line, then lines of `key:[value]` labels.
    type Key = (String, u32, u32);
    let mut from_pprof: BTreeMap<Key, u64> = BTreeMap::new();
    let mut samples: Vec<(u64, BTreeMap<String, String>)> = Vec::new();
    for line in raw
        .lines()
        .skip_while(|l| !l.starts_with("Samples:"))
        .skip(2)
        .take_while(|l| l.starts_with(' '))
    {
        let line = line.trim();
        match line.split_once(": ") {
            Some((count, _)) if count.parse::<u64>().is_ok() => {
                samples.push((count.parse().expect("count"), BTreeMap::new()));
            }
            _ => {
                let labels = &mut samples.last_mut().expect("a sample first").1;
                for label in line.split_whitespace() {
                    let (key, value) = label.split_once(":[").expect("key:[value]");
                    labels.insert(key.to_owned(), value.trim_end_matches(']').to_owned());
                }
            }
        }
    }
    assert!(!samples.is_empty(), "{raw}");
    for (count, labels) in &samples {
        let keys: Vec<&str> = labels.keys().map(String::as_str).collect();
        assert_eq!(keys, ["comm", "kind", "pid", "tid"], "{raw}");
        let number = |key: &str| labels[key].parse::<u32>().expect("a number");
        *from_pprof
            .entry((labels["comm"].clone(), number("pid"), number("tid")))
            .or_default() += count;
    }

    let script = dir.run(&["script"]);
    let script = String::from_utf8_lossy(&script.stdout);
    let mut from_script: BTreeMap<Key, u64> = BTreeMap::new();
    for sample in script.split("\n\n") {
        let mut header = sample.split_whitespace();
        let (Some(comm), Some(ids)) = (header.next(), header.next()) else {
            continue;
        };
        let (pid, tid) = ids.split_once('/').expect("pid/tid");
        *from_script
            .entry((
                comm.to_owned(),
                pid.parse().expect("pid"),
                tid.parse().expect("tid"),
            ))
            .or_default() += 1;
    }
    assert_eq!(from_pprof, from_script, "{raw}");
    // Three processes, each single-threaded, each named by its own comm.
    let mut names: Vec<&str> = from_pprof.keys().map(|(c, _, _)| c.as_str()).collect();
    names.dedup();
    assert_eq!(names, ["alpha", "bravo", "sh"], "{raw}");
    assert!(from_pprof.keys().all(|(_, pid, tid)| pid == tid), "{raw}");
}

/// Faults by thread: two threads named `small` and `big` touch 30 and 70 fresh pages; by tid
/// and by comm (the fill function's faults, `--focus`) they are exactly those counts, and
/// `--tid` and `--comm` keep one thread's faults in every report.
#[test]
fn faults_by_thread_are_exact() {
    let dir = Dir::new();
    let program = build_c_workload(dir.path(), "threads2.c");
    dir.record(&[&program], &["30", "70"]);
    let focus = ["--focus", "^fill_pages$"];
    let by_tid = dir.report_json(&[&["--by", "tid"][..], &focus].concat());
    let rows: Vec<(String, u64, u64)> = groups(&by_tid)
        .map(|g| {
            (
                g["comm"].as_str().unwrap_or("").to_owned(),
                g["count"].as_u64().unwrap_or(0),
                g["tid"].as_u64().unwrap_or(0),
            )
        })
        .collect();
    let shape: Vec<(&str, u64)> = rows.iter().map(|(c, n, _)| (c.as_str(), *n)).collect();
    assert_eq!(shape, [("big", 70), ("small", 30)], "{by_tid}");
    let pid = by_tid["groups"][0]["pid"].as_u64().unwrap_or(0);
    assert!(
        rows.iter().all(|(_, _, tid)| *tid != pid && *tid > 0),
        "{by_tid}"
    );

    let by_comm = dir.report_json(&[&["--by", "comm"][..], &focus].concat());
    let comms: Vec<(&str, u64)> = groups(&by_comm)
        .map(|g| {
            (
                g["comm"].as_str().unwrap_or(""),
                g["count"].as_u64().unwrap_or(0),
            )
        })
        .collect();
    assert_eq!(comms, [("big", 70), ("small", 30)], "{by_comm}");

    let fill = site("threads2.c", "fill");
    let small_tid = rows[1].2.to_string();
    let one = dir.report_json(&["--by", "line", "--tid", &small_tid]);
    assert_eq!(count_at(&one, "threads2.c", fill), 30, "{one}");
    let big = dir.report_json(&["--by", "line", "--comm", "big"]);
    assert_eq!(count_at(&big, "threads2.c", fill), 70, "{big}");
    assert_eq!(big["faults"], 70, "{big}");

    // Every analysis command keeps the same faults: script, visualize and heatmap, by name
    // and by thread, each exactly the report's count of that thread.
    let all_by_comm = dir.report_json(&["--by", "comm"]);
    let count_of = |comm: &str| {
        groups(&all_by_comm)
            .find(|g| g["comm"] == comm)
            .and_then(|g| g["count"].as_u64())
            .unwrap_or_else(|| panic!("no {comm} in {all_by_comm}"))
    };
    let (small, big) = (count_of("small"), count_of("big"));
    let out = dir.run(&["script", "--comm", "big"]);
    let script = String::from_utf8_lossy(&out.stdout);
    let headers: Vec<&str> = script
        .lines()
        .filter(|l| !l.is_empty() && !l.starts_with('\t'))
        .collect();
    assert_eq!(headers.len() as u64, big, "{script}");
    assert!(headers.iter().all(|l| l.starts_with("big ")), "{script}");
    let out = dir.run(&["visualize", "--comm", "small", "-o", "small"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let svg = std::fs::read_to_string(
        dir.path()
            .join(format!("small/fltrace-data-flamegraph-{pid}.svg")),
    )
    .expect("flamegraph");
    assert!(
        svg.contains(&format!("<title>all ({small} faults, 100%)</title>")),
        "{small}"
    );
    for selected in [["--comm", "small"], ["--tid", small_tid.as_str()]] {
        let out = dir.run(&[&["heatmap", "--terminal"][..], &selected].concat());
        let map = String::from_utf8_lossy(&out.stdout);
        assert!(
            map.contains(&format!("\n{small} faults of process {pid} ")),
            "{selected:?}: {map}"
        );
    }

    // The table names the columns that mean something for the grouping.
    let out = dir.run(&["report", "--by", "pid"]);
    let table = String::from_utf8_lossy(&out.stdout);
    let header = table.lines().next().unwrap_or("");
    assert!(
        header.split_whitespace().rev().take(2).eq(["comm", "pid"]),
        "{table}"
    );
    assert!(!header.contains("tid"), "{table}");
}
