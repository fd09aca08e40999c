//! Recordings that survive the recorder's death, unreadable recordings named, damaged tables
//! detected (issue 11: defects 3, 4 and 7).

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Output, Stdio};
use std::time::{Duration, Instant};

use super::util::*;

/// `fltrace record -- faults wait <pages>`, once the workload has made its faults.
fn record_waiting(dir: &Dir, pages: &str) -> Child {
    let w = workloads();
    let mut child = dir
        .fltrace()
        .args(["record", "-q", "--"])
        .arg(&w.faults)
        .args(["wait", pages])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("fltrace runs");
    let stdout = child.stdout.take().expect("stdout");
    let mut line = String::new();
    BufReader::new(stdout)
        .read_line(&mut line)
        .expect("workload prints");
    assert_eq!(line.trim(), "ready");
    child
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// `report --by line` as JSON, its stderr, and whether it succeeded.
fn report(dir: &Dir) -> (Option<serde_json::Value>, String) {
    let out = dir.run(&["report", "--format", "json", "--top", "0", "--by", "line"]);
    let json = out
        .status
        .success()
        .then(|| serde_json::from_slice(&out.stdout).expect("report prints JSON"));
    (json, stderr(&out))
}

/// The state letter of `/proc/<pid>/stat`, `None` once the process is gone.
fn process_state(pid: u32) -> Option<char> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    stat.rsplit_once(") ")?.1.chars().next()
}

/// SIGKILL of the recorder mid-run: the faults, stacks and mappings checkpointed before
/// are read back (every fault the program made, at its exact line), report, visualize and
/// heatmap say the recording is incomplete and how much was recovered, and the command is
/// not left behind (stopped or running untraced): it is killed with the recorder.
#[test]
fn sigkill_of_the_recorder_leaves_a_readable_recording() {
    let dir = Dir::new();
    let mut recorder = record_waiting(&dir, "3000");
    let fill = site("faults.c", "fill");
    // Wait for a checkpoint with the faults: within seconds (one a second), bounded.
    let started = Instant::now();
    loop {
        if let (Some(json), _) = report(&dir)
            && count_at(&json, "faults.c", fill) == 3000
        {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "no checkpoint with the 3000 faults after 60 s"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    let pids = dir.pids("faults", "parquet");
    assert_eq!(pids.len(), 1, "{pids:?}");
    // SAFETY: signalling our own child.
    unsafe { libc::kill(recorder.id() as i32, libc::SIGKILL) };
    let status = recorder.wait().expect("fltrace exits");
    assert_eq!(
        std::os::unix::process::ExitStatusExt::signal(&status),
        Some(9)
    );

    let (json, err) = report(&dir);
    let json = json.unwrap_or_else(|| panic!("report failed: {err}"));
    assert_eq!(count_at(&json, "faults.c", fill), 3000, "{err}");
    let recovered = json["faults"].as_u64().expect("faults");
    assert!(
        err.contains(&format!(
            "the recording is incomplete (fltrace stopped before finishing it): read up to its last checkpoint, {recovered} faults, "
        )) && err.contains(&format!("of process {}", pids[0])),
        "{err}"
    );
    for args in [&["visualize"][..], &["heatmap"]] {
        let out = dir.run(args);
        assert!(out.status.success(), "{args:?}: {}", stderr(&out));
        assert!(
            stderr(&out).contains("the recording is incomplete"),
            "{args:?}: {}",
            stderr(&out)
        );
    }

    // The command dies with the recorder, not stopped nor running on.
    let started = Instant::now();
    loop {
        match process_state(pids[0]) {
            None | Some('Z') | Some('X') => break,
            Some(state) => {
                assert_ne!(state, 'T', "the command was left stopped");
                assert!(
                    started.elapsed() < Duration::from_secs(20),
                    "the command runs on in state {state}"
                );
            }
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// SIGHUP (a closed terminal) and SIGTERM finish the recording as SIGINT does: the command is
/// interrupted, its end is said, and the recording is complete with exact counts.
#[test]
fn sighup_and_sigterm_finish_the_recording() {
    for signal in [libc::SIGHUP, libc::SIGTERM] {
        let dir = Dir::new();
        let recorder = record_waiting(&dir, "30");
        // SAFETY: signalling our own child.
        unsafe { libc::kill(recorder.id() as i32, signal) };
        let out = recorder.wait_with_output().expect("fltrace exits");
        assert_eq!(
            out.status.code(),
            Some(128 + libc::SIGINT),
            "signal {signal}"
        );
        assert!(
            stderr(&out).contains(
                "fltrace: interrupted; the command was killed by signal 2; the recording is complete"
            ),
            "signal {signal}: {}",
            stderr(&out)
        );
        let (json, err) = report(&dir);
        let json = json.unwrap_or_else(|| panic!("signal {signal}: report failed: {err}"));
        assert_eq!(count_at(&json, "faults.c", site("faults.c", "fill")), 30);
        assert!(!err.contains("incomplete"), "signal {signal}: {err}");
        let pid = dir.pids("faults", "parquet")[0];
        for kind in ["faults", "stacks", "mmaps"] {
            let path = fltrace_trace::files::path(dir.path(), kind, pid, "parquet");
            assert_eq!(
                fltrace_trace::completeness(&path).expect("readable"),
                fltrace_trace::Completeness::Complete,
                "signal {signal}: {kind}"
            );
        }
    }
}

/// Removes the checksums file of each process recorded in `dir`, as a recorder killed before
/// it finished never wrote it: the files then read as what such a recorder left.
fn as_if_unfinished(dir: &Dir) {
    for pid in dir.pids("faults", "parquet") {
        let _ = std::fs::remove_file(fltrace_trace::checksums::path(dir.path(), pid));
    }
}

/// Two recordings, the older of `nested 10`, the newer of `nested 20`; the newer's faults file.
/// Without their checksums: the tests change their files as a killed recorder would.
fn two_recordings(dir: &Dir) -> PathBuf {
    let w = workloads();
    dir.record(&[&w.faults], &["nested", "10"]);
    let older = dir.pids("faults", "parquet");
    dir.record(&[&w.faults], &["nested", "20"]);
    let newer = dir
        .pids("faults", "parquet")
        .into_iter()
        .find(|p| !older.contains(p))
        .expect("a second recording");
    as_if_unfinished(dir);
    fltrace_trace::files::faults(dir.path(), newer)
}

fn assert_names_the_file(dir: &Dir, faults: &Path) {
    let name = faults.file_name().expect("name").to_string_lossy();
    let reason = format!("{name} cannot be read (");
    for args in [&["report"][..], &["visualize"], &["heatmap"]] {
        let out = dir.run(args);
        assert!(!out.status.success(), "{args:?} succeeded");
        let err = stderr(&out);
        assert!(
            err.contains(&reason) && !err.contains("no fltrace recording"),
            "{args:?}: {err}"
        );
    }
}

/// A truncated newest faults file is read up to its last checkpoint and said to be
/// incomplete, never replaced by the older recording beside it; one with nothing readable
/// left is an error naming it and why.
#[test]
fn a_truncated_newest_recording_is_not_replaced_by_an_older_one() {
    let dir = Dir::new();
    let newest = two_recordings(&dir);
    let bytes = std::fs::read(&newest).expect("faults file");
    // Cut inside the last row group: what the checkpoints before it describe remains.
    let chunks = fltrace_trace::column_chunks(&newest).expect("chunks");
    let last = chunks.last().expect("a row group");
    std::fs::write(&newest, &bytes[..(last.offset + last.len / 2) as usize]).expect("cut");
    let (json, err) = report(&dir);
    let json = json.unwrap_or_else(|| panic!("report failed: {err}"));
    let pid = fltrace_trace::files::pid_of(
        newest.file_name().and_then(|n| n.to_str()).expect("name"),
        "faults",
        "parquet",
    )
    .expect("pid");
    assert_eq!(json["pids"], serde_json::json!([pid]), "{err}");
    assert!(
        err.contains("the recording is incomplete") && err.contains(&format!("of process {pid}")),
        "{err}"
    );

    // Cut before its first checkpoint: nothing to read.
    std::fs::write(&newest, &bytes[..10]).expect("cut");
    assert_names_the_file(&dir, &newest);
}

/// A newest faults file that is not Parquet at all is named with the reason, also when it is
/// the only recording (not "no fltrace recording").
#[test]
fn an_unreadable_newest_recording_is_named() {
    let dir = Dir::new();
    let newest = two_recordings(&dir);
    let len = std::fs::metadata(&newest).expect("faults file").len();
    std::fs::write(&newest, vec![0x42u8; len as usize]).expect("overwrite");
    assert_names_the_file(&dir, &newest);

    let alone = Dir::new();
    alone.record(&[&workloads().faults], &["nested", "5"]);
    as_if_unfinished(&alone);
    let pid = alone.pids("faults", "parquet")[0];
    let faults = fltrace_trace::files::faults(alone.path(), pid);
    std::fs::write(&faults, b"not parquet").expect("overwrite");
    assert_names_the_file(&alone, &faults);
}

/// A byte changed inside a data page of any column of the faults, stacks and mappings tables
/// makes `report` fail naming the file and the column, instead of printing other counts:
/// the tables' own CRCs, which also check a recording without checksums (never finished).
#[test]
fn changed_bytes_in_each_table_are_an_error() {
    let dir = Dir::new();
    dir.record(&[&workloads().faults], &["nested", "50"]);
    as_if_unfinished(&dir);
    let pid = dir.pids("faults", "parquet")[0];
    for kind in ["faults", "stacks", "mmaps"] {
        let path = fltrace_trace::files::path(dir.path(), kind, pid, "parquet");
        let original = std::fs::read(&path).expect("table");
        let chunks = fltrace_trace::column_chunks(&path).expect("chunks");
        assert!(chunks.len() >= 5, "{kind}: {chunks:?}");
        for chunk in chunks {
            let mut damaged = original.clone();
            // Past the page header, inside the page's data.
            damaged[(chunk.offset + chunk.len - 2) as usize] ^= 0x10;
            std::fs::write(&path, &damaged).expect("damage");
            let out = dir.run(&["report"]);
            let err = stderr(&out);
            assert!(
                !out.status.success(),
                "{kind} {}: report succeeded",
                chunk.column
            );
            assert!(
                err.contains(&format!(
                    "{}: row group {}, column `{}`: the bytes differ from those written",
                    path.file_name().expect("name").to_string_lossy(),
                    chunk.row_group,
                    chunk.column
                )) && err.contains("the file is damaged"),
                "{kind} {}: {err}",
                chunk.column
            );
        }
        std::fs::write(&path, &original).expect("restore");
    }
    let (json, err) = report(&dir);
    let json = json.unwrap_or_else(|| panic!("report failed: {err}"));
    assert_eq!(count_at(&json, "faults.c", site("faults.c", "fill")), 50);
}

/// SIGKILL of `record --allocs` mid-run: the allocations the program made before are in the
/// killed recorder's spool, and the next `report` converts them into the recording's tables
/// (every one, at its exact line), leaving the spool to the next `record`, which removes it.
#[test]
fn sigkill_of_the_recorder_keeps_the_allocations() {
    const BLOCKS: u64 = 250;
    let dir = Dir::new();
    let mut recorder = dir
        .fltrace()
        .args(["record", "-q", "--allocs", "--"])
        .arg(&workloads().allocs)
        .args(["hold", &BLOCKS.to_string()])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("fltrace runs");
    let mut line = String::new();
    BufReader::new(recorder.stdout.take().expect("stdout"))
        .read_line(&mut line)
        .expect("workload prints");
    assert_eq!(line.trim(), "ready");
    // Wait for a checkpoint of the mappings the allocation stacks are symbolized with: within
    // seconds (one a second), bounded.
    let started = Instant::now();
    let pid = loop {
        let mapped = |pid: u32| {
            fltrace_trace::read_mappings(&fltrace_trace::files::mmaps(dir.path(), pid)).is_ok_and(
                |maps| {
                    maps.iter().any(|m| m.path.ends_with("/allocs"))
                        && maps.iter().any(|m| m.path.contains("libc"))
                },
            )
        };
        if let Some(pid) = dir
            .pids("mmaps", "parquet")
            .into_iter()
            .find(|&p| mapped(p))
        {
            break pid;
        }
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "no checkpoint of the mappings after 60 s"
        );
        std::thread::sleep(Duration::from_millis(200));
    };
    // SAFETY: signalling our own child, then the workload it started.
    unsafe { libc::kill(recorder.id() as i32, libc::SIGKILL) };
    let status = recorder.wait().expect("fltrace exits");
    assert_eq!(
        std::os::unix::process::ExitStatusExt::signal(&status),
        Some(9)
    );
    // SAFETY: as above.
    unsafe { libc::kill(pid as i32, libc::SIGKILL) };
    let spools = || {
        std::fs::read_dir(dir.path())
            .expect("dir")
            .filter_map(|e| e.ok())
            .filter(|e| {
                e.file_name()
                    .to_string_lossy()
                    .starts_with(".fltrace-allocs-")
            })
            .count()
    };
    assert_eq!(spools(), 1, "the killed recorder's spool");

    let out = dir.run(&["report", "--allocs", "--format", "csv", "--top", "0"]);
    assert!(out.status.success(), "report failed: {}", stderr(&out));
    assert!(
        stderr(&out).contains(&format!(
            "allocations of process {pid} from the spool of a killed recorder"
        )),
        "{}",
        stderr(&out)
    );
    let rows = csv_rows(&String::from_utf8_lossy(&out.stdout));
    let line = site("allocs.c", "hold").to_string();
    let row = rows
        .iter()
        .find(|r| r["file"].ends_with("allocs.c") && r["line"] == line)
        .unwrap_or_else(|| panic!("no row at allocs.c:{line} in {rows:#?}"));
    assert_eq!(row["allocs"], BLOCKS.to_string(), "{row:?}");
    assert_eq!(row["bytes"], (BLOCKS * 88).to_string(), "{row:?}");
    // A command that reads the recording deletes nothing in it: the logs stay for `record`.
    assert_eq!(spools(), 1, "a read command removed the spool");
    // Converted once: the next report reads the tables, with nothing left to recover.
    let again = dir.run(&["report", "--allocs", "--format", "csv", "--top", "0"]);
    assert!(again.status.success(), "{}", stderr(&again));
    assert!(
        !stderr(&again).contains("from the spool of a killed recorder"),
        "{}",
        stderr(&again)
    );
    assert_eq!(again.stdout, out.stdout);
    assert_eq!(spools(), 1);
    // The next recording in the directory removes them.
    dir.record(&[&workloads().faults], &["nested", "1"]);
    assert_eq!(spools(), 0, "the spool is left after the next record");
}

/// Seeded corruption of a finished recording: 1 to 8 bytes changed in one of its files (each
/// file in turn, 300 cases). `report` never hangs nor crashes, and never prints a report
/// from changed data: it fails naming the changed file as corrupt, never "incomplete".
#[test]
fn seeded_corruption_of_a_finished_recording_is_named() {
    let dir = Dir::new();
    dir.record(&[&workloads().faults], &["nested", "10"]);
    let mut names: Vec<PathBuf> = std::fs::read_dir(dir.path())
        .expect("dir")
        .flatten()
        .map(|e| e.path())
        .filter(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with(fltrace_trace::files::PREFIX))
        })
        .collect();
    names.sort();
    // faults, stacks, mmaps, procmaps, stats and the checksums themselves.
    assert_eq!(names.len(), 6, "{names:?}");
    let baseline = dir.run(&["report", "--format", "json"]);
    assert!(baseline.status.success(), "{}", stderr(&baseline));
    // xorshift64: the same cases every run.
    let mut state = 0x9e37_79b9_7f4a_7c15u64;
    let mut next = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    for case in 0..300 {
        let path = &names[case % names.len()];
        let name = path.file_name().expect("name").to_string_lossy();
        let original = std::fs::read(path).expect("file");
        let mut damaged = original.clone();
        let count = 1 + (next() % 8) as usize;
        let mut positions: Vec<usize> = Vec::new();
        while positions.len() < count.min(damaged.len()) {
            let at = (next() % damaged.len() as u64) as usize;
            if !positions.contains(&at) {
                positions.push(at);
            }
        }
        for &at in &positions {
            damaged[at] ^= 1 + (next() % 255) as u8;
        }
        std::fs::write(path, &damaged).expect("damage");
        let out = output_within(
            dir.fltrace().args(["report", "--format", "json"]),
            Duration::from_secs(60),
        );
        std::fs::write(path, &original).expect("restore");
        let err = stderr(&out);
        let what = format!("case {case}: {name} at {positions:?}");
        assert_eq!(out.status.code(), Some(1), "{what}: {err}");
        assert!(
            err.contains(&format!("{name} is corrupt: ")) && !err.contains("incomplete"),
            "{what}: {err}"
        );
    }
    let again = dir.run(&["report", "--format", "json"]);
    assert_eq!(again.stdout, baseline.stdout);

    // --salvage reads what still reads, the corrupt file named in a warning: the procmaps
    // file, which the report does not read, leaves the report as it was.
    let procmaps = names
        .iter()
        .find(|p| p.to_string_lossy().contains("-procmaps-"))
        .expect("procmaps");
    let original = std::fs::read(procmaps).expect("procmaps");
    let mut damaged = original.clone();
    damaged[0] ^= 0x20;
    std::fs::write(procmaps, &damaged).expect("damage");
    let salvaged = dir.run(&["report", "--format", "json", "--salvage"]);
    let err = stderr(&salvaged);
    assert!(salvaged.status.success(), "{err}");
    assert_eq!(salvaged.stdout, baseline.stdout);
    let name = procmaps.file_name().expect("name").to_string_lossy();
    assert!(
        err.contains(&format!("fltrace: warning: ./{name} is corrupt: "))
            && err.contains("reading what is left of the recording (--salvage)"),
        "{err}"
    );
    std::fs::write(procmaps, &original).expect("restore");
}
