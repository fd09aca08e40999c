//! Recordings that stand alone (issue 23): analysis that never writes into a recording, the
//! recordings of a directory listed, a recording and what it needs as one archive file.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use super::util::*;

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// `fltrace <args>` run in `cwd` with a clean environment.
fn run_in(cwd: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_fltrace"))
        .current_dir(cwd)
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .args(args)
        .output()
        .expect("fltrace runs")
}

/// Runs `fltrace <args>` in `cwd` and checks that it succeeded.
fn ok_in(cwd: &Path, args: &[&str]) -> Output {
    let out = run_in(cwd, args);
    assert!(
        out.status.success(),
        "fltrace {args:?} failed: {}",
        stderr(&out)
    );
    out
}

/// `source` bound read-only at a new mount point, unmounted whatever happens.
struct ReadOnlyBind(tempfile::TempDir);

impl ReadOnlyBind {
    fn of(source: &Path) -> ReadOnlyBind {
        let point = tempfile::tempdir().expect("mount point");
        let bind = ReadOnlyBind(point);
        let mount = |args: &[&str]| {
            let status = Command::new("mount")
                .args(args)
                .status()
                .expect("mount runs");
            assert!(status.success(), "mount {args:?}");
        };
        let (from, to) = (
            source.to_str().expect("UTF-8 path"),
            bind.path().to_str().expect("UTF-8 path"),
        );
        mount(&["--bind", from, to]);
        mount(&["-o", "remount,ro,bind", to]);
        bind
    }

    fn path(&self) -> &Path {
        self.0.path()
    }
}

impl Drop for ReadOnlyBind {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(self.0.path()).status();
    }
}

/// A writable copy of `dir` (times kept: the newest recording is picked by them).
fn copy_of(dir: &Path) -> tempfile::TempDir {
    let copy = tempfile::tempdir().expect("copy");
    let status = Command::new("cp")
        .arg("-a")
        .arg(format!("{}/.", dir.display()))
        .arg(copy.path())
        .status()
        .expect("cp runs");
    assert!(status.success());
    copy
}

/// The names and bytes of the regular files in `dir`, sorted.
fn files_in(dir: &Path) -> Vec<(String, Vec<u8>)> {
    let mut files: Vec<(String, Vec<u8>)> = std::fs::read_dir(dir)
        .expect("dir")
        .filter_map(|e| e.ok())
        .filter(|e| e.path().is_file())
        .map(|e| {
            (
                e.file_name().to_string_lossy().into_owned(),
                std::fs::read(e.path()).expect("file"),
            )
        })
        .collect();
    files.sort();
    files
}

/// The names of the files in `dir`, sorted (hidden ones too).
fn names_in(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .expect("dir")
        .filter_map(|e| Some(e.ok()?.file_name().to_string_lossy().into_owned()))
        .collect();
    names.sort();
    names
}

/// Every analysis command on a recording in a read-only bind mount exits 0 with the output it
/// gives on a writable copy; the files the writable copy gets beside it (the original's CSV,
/// flamegraphs, heatmaps, the archive) go into the current directory instead, said on stderr,
/// byte for byte the same; nothing in the recording changes.
#[test]
fn every_analysis_command_reads_a_read_only_recording() {
    let w = workloads();
    let original = Dir::new();
    original.record_with(&["-q", "--allocs"], &[&w.faults], &["nested", "100"]);
    let pid = original.pids("faults", "parquet")[0];
    let writable = copy_of(original.path());
    let bind = ReadOnlyBind::of(original.path());
    let before = names_in(bind.path());
    let (ro, rw) = (
        bind.path().to_str().expect("path"),
        writable.path().to_str().expect("path"),
    );
    // Each command runs in a directory of its own, so that what it writes is seen.
    let cwd_ro = tempfile::tempdir().expect("cwd");
    let cwd_rw = tempfile::tempdir().expect("cwd");
    let both = |args: &[&str], dir_flag: bool| -> (Output, Output) {
        let with = |dir: &str| -> Vec<String> {
            let mut all: Vec<String> = args.iter().map(|a| a.to_string()).collect();
            if dir_flag {
                all.extend(["-d".to_owned(), dir.to_owned()]);
            } else {
                all.push(dir.to_owned());
            }
            all
        };
        let on_ro = with(ro);
        let on_rw = with(rw);
        let on_ro: Vec<&str> = on_ro.iter().map(String::as_str).collect();
        let on_rw: Vec<&str> = on_rw.iter().map(String::as_str).collect();
        (ok_in(cwd_ro.path(), &on_ro), ok_in(cwd_rw.path(), &on_rw))
    };

    // Before anything is written beside the writable copy: the same rows, sizes included.
    let (a, b) = both(&["list"], false);
    assert_eq!(stdout(&a), stdout(&b));
    assert!(
        stdout(&a).contains(&format!("{pid} (faults)")),
        "{}",
        stdout(&a)
    );

    for args in [
        &[
            "report", "--by", "function", "--format", "json", "--top", "0",
        ][..],
        &["report", "--allocs", "--format", "csv", "--top", "0"],
        &["report", "--leaks"],
        &["report", "--by", "alloc-site"],
        &["report", "--format", "folded"],
        &["script"],
    ] {
        let (a, b) = both(args, true);
        assert!(!a.stdout.is_empty(), "{args:?}");
        assert_eq!(stdout(&a), stdout(&b), "{args:?}");
    }
    // None of those writes a file: the original's CSV is written when asked for.
    assert_eq!(names_in(cwd_ro.path()), Vec::<String>::new());
    assert!(!fltrace_trace::files::path(writable.path(), "report", pid, "out").exists());

    // The original's form writes its CSV: beside the writable copy, and into the current
    // directory for the read-only one, which says so.
    let (a, b) = both(&["report"], true);
    assert_eq!(stdout(&a), stdout(&b));
    let csv = format!("fltrace-data-report-{pid}.out");
    assert!(
        stderr(&a).contains(&format!(
            "{ro} is read-only: wrote ./{csv} into the current directory"
        )),
        "{}",
        stderr(&a)
    );
    assert!(
        stderr(&a).contains(&format!("reading the recording of `{}", w.faults.display())),
        "{}",
        stderr(&a)
    );
    let written = std::fs::read(cwd_ro.path().join(&csv)).expect("the CSV in the current dir");
    assert_eq!(
        written,
        std::fs::read(writable.path().join(&csv)).expect("the CSV beside the copy")
    );
    assert!(written.starts_with(b"ips,flags,count,percent,op,type,lib,code\n"));

    // Pictures: the same files, in the current directory.
    for args in [&["visualize"][..], &["heatmap"]] {
        let (a, _) = both(args, true);
        assert!(
            stderr(&a).contains(&format!("{ro} is read-only")),
            "{}",
            stderr(&a)
        );
    }
    // visualize names the recording it reads, as report does.
    let named = run_in(cwd_rw.path(), &["visualize", "-d", rw, "-o", "."]);
    let line = format!(
        "fltrace: reading the recording of `{} nested 100` started ",
        w.faults.display()
    );
    assert_eq!(
        stderr(&named)
            .lines()
            .filter(|l| l.starts_with(&line))
            .count(),
        1,
        "{}",
        stderr(&named)
    );
    assert!(
        stderr(&named).contains(&format!("(1 process) in {rw}")),
        "{}",
        stderr(&named)
    );
    let pictures = files_in(cwd_ro.path());
    let names: Vec<&str> = pictures.iter().map(|(n, _)| n.as_str()).collect();
    for kind in [
        "flamegraph",
        "flamegraph-alloc",
        "flamegraph-allocstack",
        "heatmap",
        "memref",
    ] {
        let ext = if kind == "heatmap" { "png" } else { "svg" };
        assert!(
            names.contains(&format!("fltrace-data-{kind}-{pid}.{ext}").as_str()),
            "{names:?}"
        );
    }
    for (name, bytes) in &pictures {
        let beside = std::fs::read(writable.path().join(name)).expect("the same file beside");
        assert!(&beside == bytes, "{name} differs");
    }
    // `-o` puts them elsewhere.
    let elsewhere = tempfile::tempdir().expect("out");
    let out_dir = elsewhere.path().to_str().expect("path");
    ok_in(cwd_ro.path(), &["visualize", "-d", ro, "-o", out_dir]);
    ok_in(
        cwd_ro.path(),
        &["heatmap", "-d", ro, "-o", &format!("{out_dir}/h.svg")],
    );
    ok_in(
        cwd_ro.path(),
        &["report", "-d", ro, "--legacy-csv", out_dir, "--by", "line"],
    );
    let mut elsewhere_names = names_in(elsewhere.path());
    elsewhere_names.sort();
    assert_eq!(
        elsewhere_names,
        [
            format!("fltrace-data-flamegraph-{pid}.svg"),
            format!("fltrace-data-flamegraph-alloc-{pid}.svg"),
            format!("fltrace-data-flamegraph-allocstack-{pid}.svg"),
            format!("fltrace-data-report-{pid}.out"),
            "h.svg".to_owned(),
        ]
    );

    // diff (its CSV names no directory) and archive.
    let a = ok_in(
        cwd_ro.path(),
        &["diff", ro, ro, "--format", "csv", "--top", "0"],
    );
    let b = ok_in(
        cwd_rw.path(),
        &["diff", rw, rw, "--format", "csv", "--top", "0"],
    );
    assert_eq!(stdout(&a), stdout(&b));
    let (a, b) = both(&["archive"], true);
    let lines = |out: &Output| -> Vec<String> {
        let text = stdout(out);
        text.lines().map(str::to_owned).collect()
    };
    let (a_lines, b_lines) = (lines(&a), lines(&b));
    assert_eq!(a_lines.len(), b_lines.len());
    assert_eq!(a_lines[..a_lines.len() - 1], b_lines[..b_lines.len() - 1]);
    assert!(
        a_lines
            .last()
            .is_some_and(|l| l.ends_with("files in ./fltrace-archive")),
        "{a_lines:?}"
    );
    assert!(cwd_ro.path().join("fltrace-archive").is_dir());
    assert_eq!(names_in(bind.path()), before, "the recording changed");
}

/// Records `allocs hold BLOCKS` into `dir` with `--allocs` and kills the recorder (and the
/// workload) once its mappings are checkpointed: the recording it leaves has its allocations
/// in a spool only. Returns the workload's pid.
fn killed_allocs_recording(dir: &Dir, blocks: u64) -> u32 {
    let mut recorder = dir
        .fltrace()
        .args(["record", "-q", "--allocs", "--"])
        .arg(&workloads().allocs)
        .args(["hold", &blocks.to_string()])
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
    // A checkpoint of the mappings the allocation stacks are symbolized with, and one of
    // faults: one a second.
    let started = Instant::now();
    let pid = loop {
        let mapped = |pid: u32| {
            fltrace_trace::read_mappings(&fltrace_trace::files::mmaps(dir.path(), pid)).is_ok_and(
                |maps| {
                    maps.iter().any(|m| m.path.ends_with("/allocs"))
                        && maps.iter().any(|m| m.path.contains("libc"))
                },
            ) && fltrace_trace::table_rows(&fltrace_trace::files::faults(dir.path(), pid))
                .is_ok_and(|rows| rows > 0)
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
            "no checkpoint of the mappings and faults after 60 s"
        );
        std::thread::sleep(Duration::from_millis(200));
    };
    // SAFETY: signalling our own child, then the workload it started.
    unsafe { libc::kill(recorder.id() as i32, libc::SIGKILL) };
    let _ = recorder.wait();
    // SAFETY: as above.
    unsafe { libc::kill(pid as i32, libc::SIGKILL) };

    pid
}

/// Every command that reads a recording (report, visualize, heatmap, script, archive, export,
/// diff) converts a killed `record --allocs`'s spool the same way before reading: each, on a
/// copy of its own, says it recovered the same number of allocations and leaves an
/// allocation table of exactly that many rows, every block of the `hold` site among them.
#[test]
fn every_reading_command_recovers_a_killed_recorders_spool() {
    const BLOCKS: u64 = 120;
    let dir = Dir::new();
    let pid = killed_allocs_recording(&dir, BLOCKS);
    let said = format!(" allocations of process {pid} from the spool of a killed recorder");
    let mut recovered: Option<usize> = None;
    for command in [
        "report",
        "visualize",
        "heatmap",
        "script",
        "archive",
        "export",
        "diff",
    ] {
        let copy = copy_of(dir.path());
        let out_dir = tempfile::tempdir().expect("out");
        let (copy_path, out) = (
            copy.path().to_str().expect("path"),
            out_dir.path().to_str().expect("path"),
        );
        let heatmap = format!("{out}/h.svg");
        let args: Vec<&str> = match command {
            "report" => vec![
                "report",
                "--format",
                "json",
                "--include-tracer",
                "-d",
                copy_path,
            ],
            "visualize" => vec!["visualize", "-o", out, "-d", copy_path],
            "heatmap" => vec!["heatmap", "-o", &heatmap, "-d", copy_path],
            "script" => vec!["script", "-d", copy_path],
            "archive" => vec!["archive", "-o", out, "-d", copy_path],
            "export" => vec!["export", "-o", out, copy_path],
            _ => vec!["diff", copy_path, copy_path],
        };
        let output = ok_in(out_dir.path(), &args);
        let stderr = stderr(&output);
        let count: usize = stderr
            .lines()
            .find_map(|l| {
                l.split("recovered ")
                    .nth(1)?
                    .strip_suffix(&said)?
                    .parse()
                    .ok()
            })
            .unwrap_or_else(|| panic!("{command}: no recovery said: {stderr}"));
        let rows = fltrace_trace::read_allocs(&fltrace_trace::files::allocs(copy.path(), pid))
            .unwrap_or_else(|e| panic!("{command}: {e}"))
            .len();
        assert_eq!(rows, count, "{command}: the table holds what was said");
        assert!(count >= BLOCKS as usize, "{command}: {count} allocations");
        assert_eq!(*recovered.get_or_insert(count), count, "{command}");
        if command == "report" {
            // Every fault checkpointed before the kill, exactly.
            let faults =
                fltrace_trace::read_faults(&fltrace_trace::files::faults(copy.path(), pid))
                    .expect("faults")
                    .0
                    .len();
            let report: serde_json::Value =
                serde_json::from_slice(&output.stdout).expect("report's JSON");
            assert!(faults > 0);
            assert_eq!(report["faults"].as_u64(), Some(faults as u64), "{report}");
        }
    }
    // What was recovered is every block the workload held.
    let copy = copy_of(dir.path());
    let cwd = tempfile::tempdir().expect("cwd");
    let report = ok_in(
        cwd.path(),
        &[
            "report",
            "--allocs",
            "--format",
            "csv",
            "--top",
            "0",
            "-d",
            copy.path().to_str().expect("path"),
        ],
    );
    assert_eq!(allocs_at_hold(&stdout(&report)), BLOCKS.to_string());
}

/// The `allocs` of the `hold` site of `allocs.c` in the CSV of `report --allocs`.
fn allocs_at_hold(csv: &str) -> String {
    let rows = csv_rows(csv);
    let line = site("allocs.c", "hold").to_string();
    let row = rows
        .iter()
        .find(|r| r["file"].ends_with("allocs.c") && r["line"] == line)
        .unwrap_or_else(|| panic!("no row at allocs.c:{line} in {rows:#?}"));
    row["allocs"].clone()
}

/// A killed `record --allocs` leaves its allocation logs: on a read-only recording, `report`
/// converts them in a temporary copy and reports every allocation as on a writable copy
/// (which converts them in place), leaving the recording as it was.
#[test]
fn a_killed_recorders_spool_reads_on_a_read_only_recording() {
    const BLOCKS: u64 = 120;
    let dir = Dir::new();
    let pid = killed_allocs_recording(&dir, BLOCKS);
    let writable = copy_of(dir.path());
    let bind = ReadOnlyBind::of(dir.path());
    let before = names_in(bind.path());
    assert!(
        before.iter().any(|n| n.starts_with(".fltrace-allocs-")),
        "{before:?}"
    );
    let cwd = tempfile::tempdir().expect("cwd");
    let args = ["report", "--allocs", "--format", "csv", "--top", "0", "-d"];
    let ro = ok_in(
        cwd.path(),
        &[&args[..], &[bind.path().to_str().expect("path")]].concat(),
    );
    let rw = ok_in(
        cwd.path(),
        &[&args[..], &[writable.path().to_str().expect("path")]].concat(),
    );
    for out in [&ro, &rw] {
        assert!(
            stderr(out).contains(&format!(
                "allocations of process {pid} from the spool of a killed recorder"
            )),
            "{}",
            stderr(out)
        );
    }
    assert_eq!(stdout(&ro), stdout(&rw));
    assert!(
        stderr(&ro).contains("is read-only: the allocation logs of a killed recorder are converted in a temporary copy"),
        "{}",
        stderr(&ro)
    );
    assert_eq!(allocs_at_hold(&stdout(&ro)), BLOCKS.to_string());
    assert_eq!(names_in(bind.path()), before, "the recording changed");
    assert!(!fltrace_trace::files::allocs(bind.path(), pid).exists());
    assert!(fltrace_trace::files::allocs(writable.path(), pid).exists());
    assert!(
        names_in(cwd.path()).is_empty(),
        "{:?}",
        names_in(cwd.path())
    );
}

/// `faults` and `0 lost` of `record`'s summary line.
fn summary_counts(stderr: &str) -> (u64, u64) {
    let line = stderr
        .lines()
        .find(|l| l.contains(" faults from "))
        .unwrap_or_else(|| panic!("no summary in {stderr}"));
    let figure = |after: &str, before: &str| -> u64 {
        line.split(", ")
            .flat_map(|part| part.split(": "))
            .find_map(|part| {
                part.strip_suffix(before)
                    .and_then(|p| p.strip_prefix(after))
                    .and_then(|n| n.split(' ').next())
                    .and_then(|n| n.parse().ok())
            })
            .unwrap_or_else(|| panic!("no `{before}` in {line}"))
    };
    let faults = line
        .trim_start_matches("fltrace: ")
        .split(' ')
        .next()
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no faults in {line}"));
    (faults, figure("", " lost"))
}

/// Bytes of the files of process `pids` in `dir`.
fn bytes_of(dir: &Path, pids: &[u32]) -> u64 {
    std::fs::read_dir(dir)
        .expect("dir")
        .filter_map(|e| e.ok())
        .filter(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            pids.iter().any(|pid| {
                name.starts_with("fltrace-data-")
                    && name
                        .split('.')
                        .next()
                        .is_some_and(|stem| stem.ends_with(&format!("-{pid}")))
            })
        })
        .map(|e| e.metadata().expect("metadata").len())
        .sum()
}

/// `fltrace list` on a directory with three recordings of two programs: one row each,
/// oldest first, with the figures `record` said and the files' bytes; JSON the same.
#[test]
fn list_names_three_recordings_of_two_programs() {
    let w = workloads();
    let dir = Dir::new();
    struct Expected {
        command: String,
        processes: String,
        faults: u64,
        lost: u64,
        truncated: u64,
        allocations: String,
        pids: Vec<u32>,
    }
    let mut expected = Vec::new();
    let runs: [(&[&str], &Path, &[&str]); 3] = [
        // Not quiet: the summary line gives the figures the rows must show.
        (&[], &w.faults, &["nested", "100"]),
        (&["--allocs"], &w.scan, &["2", "1"]),
        (&[], &w.faults, &["fork", "40"]),
    ];
    for (flags, program, args) in runs {
        let known = dir.pids("faults", "parquet");
        // Recordings a second apart: each its own `started` in the table.
        std::thread::sleep(Duration::from_millis(1100));
        let out = dir.record_with(flags, &[program], args);
        let text = stderr(&out);
        let pids: Vec<u32> = dir
            .pids("faults", "parquet")
            .into_iter()
            .filter(|p| !known.contains(p))
            .collect();
        let (faults, lost) = summary_counts(&text);
        let comm = program
            .file_name()
            .expect("name")
            .to_string_lossy()
            .into_owned();
        let allocations = if flags.contains(&"--allocs") {
            let rows =
                fltrace_trace::read_allocs(&fltrace_trace::files::allocs(dir.path(), pids[0]))
                    .expect("allocs table")
                    .len();
            rows.to_string()
        } else {
            "-".to_owned()
        };
        expected.push(Expected {
            command: format!("{} {}", program.display(), args.join(" ")),
            processes: pids
                .iter()
                .map(|p| format!("{p} ({comm})"))
                .collect::<Vec<_>>()
                .join(", "),
            faults,
            lost,
            truncated: summary_truncated(&text),
            allocations,
            pids,
        });
    }
    assert_eq!(expected[2].pids.len(), 2, "fork: parent and child");

    let json = ok_in(dir.path(), &["list", "--format", "json"]);
    let json: serde_json::Value = serde_json::from_slice(&json.stdout).expect("JSON");
    let rows = json.as_array().expect("an array");
    assert_eq!(rows.len(), 3);
    // Wide, every name whole; the cells are two spaces or more apart.
    let table = stdout(&ok_in(dir.path(), &["list", "--wide"]));
    let lines: Vec<&str> = table.lines().collect();
    assert_eq!(lines.len(), 5, "{table}");
    let cells = |line: &str| -> Vec<String> {
        line.split("  ")
            .map(str::trim)
            .filter(|c| !c.is_empty())
            .map(str::to_owned)
            .collect()
    };
    assert_eq!(
        cells(lines[0]),
        [
            "started (UTC)",
            "faults",
            "lost",
            "truncated",
            "allocations",
            "size",
            "command",
            "processes"
        ]
    );
    let mut previous_start = 0;
    for (i, e) in expected.iter().enumerate() {
        let row = &rows[i];
        let started = row["started"].as_str().expect("started");
        let start_ns = row["start_ns"].as_u64().expect("start_ns");
        assert!(start_ns > previous_start + 1_000_000_000, "{json}");
        previous_start = start_ns;
        assert_eq!(started.len(), 23, "{started}");
        assert!(started.ends_with(" UTC"), "{started}");
        let bytes = bytes_of(dir.path(), &e.pids);
        assert_eq!(
            cells(lines[i + 1]),
            [
                started.trim_end_matches(" UTC").to_owned(),
                e.faults.to_string(),
                e.lost.to_string(),
                e.truncated.to_string(),
                e.allocations.clone(),
                fltrace_render::table::bytes(bytes),
                e.command.clone(),
                e.processes.clone(),
            ],
            "{table}"
        );
        assert_eq!(row["command"], e.command.as_str());
        assert_eq!(row["faults"], e.faults);
        assert_eq!(row["lost"], e.lost);
        assert_eq!(row["truncated_stack_faults"], e.truncated);
        assert_eq!(row["bytes"], bytes);
        let pids: Vec<u64> = row["processes"]
            .as_array()
            .expect("processes")
            .iter()
            .map(|p| p["pid"].as_u64().expect("pid"))
            .collect();
        assert_eq!(
            pids,
            e.pids.iter().map(|&p| u64::from(p)).collect::<Vec<_>>()
        );
    }
    assert_eq!(rows[0]["allocations"], serde_json::Value::Null);
    assert_eq!(lines[4], "3 recordings");
    // The flamegraphs and CSV a later command writes beside a recording are not its own:
    // the sizes stay.
    ok_in(dir.path(), &["visualize"]);
    ok_in(dir.path(), &["report"]);
    let again = ok_in(dir.path(), &["list", "--format", "json"]);
    let again: serde_json::Value = serde_json::from_slice(&again.stdout).expect("JSON");
    for (before, after) in rows.iter().zip(again.as_array().expect("an array")) {
        assert_eq!(before["bytes"], after["bytes"], "{json}\n{again}");
    }
}

/// `archive -o NAME.tar.zst` (and `.tar`) holds the recording and the binaries it needs:
/// with the recording moved away and the program deleted, `report` on the archive file
/// prints what `report` printed on the original, byte for byte, and writes nothing into it.
#[test]
fn an_archive_file_reports_as_the_recording_did() {
    let w = workloads();
    let program_dir = tempfile::tempdir().expect("program dir");
    let program = program_dir.path().join("faults");
    std::fs::copy(&w.faults, &program).expect("copy the workload");
    let dir = Dir::new();
    dir.record(&[&program], &["nested", "100"]);
    let reports: [&[&str]; 3] = [
        &["report", "--top", "0"],
        &["report", "--by", "stack", "--format", "json", "--top", "0"],
        &["script"],
    ];
    let before: Vec<Vec<u8>> = reports
        .iter()
        .map(|args| ok_in(dir.path(), args).stdout)
        .collect();
    let fill = format!("faults.c:{}", site("faults.c", "fill"));
    assert!(String::from_utf8_lossy(&before[0]).contains(&fill));
    let kept = tempfile::tempdir().expect("archives");
    let mut archives = Vec::new();
    for name in ["rec.tar.zst", "rec.tar"] {
        let file = kept.path().join(name);
        let out = dir.run(&["archive", "-o", file.to_str().expect("path")]);
        assert!(out.status.success(), "{}", stderr(&out));
        assert!(
            stdout(&out)
                .lines()
                .any(|l| l.ends_with(&format!(" {}", program.display()))),
            "{}",
            stdout(&out)
        );
        archives.push(file);
    }
    // zstd makes it smaller than the plain tar.
    let len = |p: &PathBuf| std::fs::metadata(p).expect("archive").len();
    assert!(len(&archives[0]) < len(&archives[1]));

    let moved = tempfile::tempdir().expect("moved");
    std::fs::rename(dir.path(), moved.path().join("recording")).expect("move the recording");
    std::fs::remove_file(&program).expect("delete the program");
    let cwd = tempfile::tempdir().expect("cwd");
    for archive in &archives {
        let archive = archive.to_str().expect("path");
        for (args, expected) in reports.iter().zip(&before) {
            let out = ok_in(cwd.path(), &[&args[..], &["-d", archive]].concat());
            assert!(
                &out.stdout == expected,
                "{args:?} on {archive}:\n{}\nexpected:\n{}\n{}",
                stdout(&out),
                String::from_utf8_lossy(expected),
                stderr(&out)
            );
        }
    }
    // Plain `report` wrote the original's CSV beside the archive file, never inside it.
    let pid = fltrace_trace::files::pid_of(
        &names_in(&moved.path().join("recording"))
            .into_iter()
            .find(|n| n.starts_with("fltrace-data-faults-"))
            .expect("faults file"),
        "faults",
        "parquet",
    )
    .expect("pid");
    assert!(fltrace_trace::files::path(kept.path(), "report", pid, "out").is_file());
    assert!(names_in(cwd.path()).is_empty());
    // Put back for the directory's removal.
    std::fs::rename(moved.path().join("recording"), dir.path()).expect("move back");
}
