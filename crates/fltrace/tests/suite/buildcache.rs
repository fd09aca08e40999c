//! Recordings that outlive their files: the build-ID cache `record` keeps the executables and
//! libraries in, and the perf maps of JIT code copied into the recording.

use std::path::{Path, PathBuf};
use std::process::Command;

use super::util::*;

/// Pages the workloads touch at their fill line.
const PAGES: u64 = 50;

fn run_ok(cmd: &mut Command) -> String {
    let out = cmd.output().expect("tool runs");
    assert!(
        out.status.success(),
        "{cmd:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// `faults.c`, with `blank` empty lines put before it, built as the suite builds it into `out`.
fn build_faults_shifted(src_dir: &Path, out: &Path, blank: usize) {
    let source = src_dir.join("faults.c");
    let text = std::fs::read_to_string(workloads_dir().join("faults.c")).expect("source");
    std::fs::write(&source, format!("{}{text}", "\n".repeat(blank))).expect("write source");
    run_ok(
        Command::new("gcc")
            .args(["-O2", "-g", "-fomit-frame-pointer", "-o"])
            .arg(out)
            .arg(&source)
            .args(["-ldl", "-lpthread"]),
    );
}

/// `fltrace <args>` in `dir` with the build-ID cache at `cache`.
fn fltrace_cached(dir: &Dir, cache: &Path, args: &[&str]) -> std::process::Output {
    dir.fltrace()
        .env("FLTRACE_CACHE", cache)
        .args(args)
        .output()
        .expect("fltrace runs")
}

fn report_by_line(dir: &Dir, cache: &Path) -> (serde_json::Value, String) {
    let out = fltrace_cached(
        dir,
        cache,
        &["report", "--format", "json", "--top", "0", "--by", "line"],
    );
    assert!(
        out.status.success(),
        "report failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    (
        serde_json::from_slice(&out.stdout).expect("report prints JSON"),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Record, rebuild the program at the same path with every line moved: the report names the
/// recorded build's lines, from the cache (its file of that build), with the exact count; with
/// `--no-cache` the same rebuild leaves no line of `faults.c` (the control).
#[test]
fn rebuilt_program_keeps_its_recorded_lines() {
    const SHIFT: usize = 7;
    let fill = site("faults.c", "fill");
    for cached in [true, false] {
        let dir = Dir::new();
        let cache = dir.path().join("cache");
        let bin = dir.path().join("faults");
        build_faults_shifted(dir.path(), &bin, 0);
        let mut record = vec!["record", "-q"];
        if !cached {
            record.push("--no-cache");
        }
        let bin_str = bin.to_str().expect("utf-8");
        let pages = PAGES.to_string();
        let out = fltrace_cached(
            &dir,
            &cache,
            &[&record[..], &["--", bin_str, "nested", &pages]].concat(),
        );
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let (before, _) = report_by_line(&dir, &cache);
        assert_eq!(count_at(&before, "faults.c", fill), PAGES);

        build_faults_shifted(dir.path(), &bin, SHIFT);
        let (after, stderr) = report_by_line(&dir, &cache);
        if cached {
            assert_eq!(count_at(&after, "faults.c", fill), PAGES, "{stderr}");
            assert_eq!(count_at(&after, "faults.c", fill + SHIFT as u32), 0);
            assert!(
                stderr.contains(cache.to_str().expect("utf-8")),
                "the warning names the cached file: {stderr}"
            );
            let list = run_ok(
                dir.fltrace()
                    .env("FLTRACE_CACHE", &cache)
                    .args(["cache", "list"]),
            );
            assert!(list.contains(bin_str), "{list}");
            // The rebuild unlinked the recorded file: its cache entry is the only copy, the
            // first pruned; the report then has its lines no more.
            let pruned = run_ok(dir.fltrace().env("FLTRACE_CACHE", &cache).args([
                "cache",
                "prune",
                "--max-size",
                "0",
            ]));
            assert!(
                pruned
                    .lines()
                    .any(|l| l.starts_with("removed ") && l.ends_with(bin_str)),
                "{pruned}"
            );
            let (pruned_report, _) = report_by_line(&dir, &cache);
            assert_eq!(count_at(&pruned_report, "faults.c", fill), 0);
        } else {
            assert!(
                groups(&after)
                    .all(|g| !g["file"].as_str().is_some_and(|f| f.ends_with("faults.c"))),
                "lines from the wrong build: {after}"
            );
            assert!(!cache.exists(), "--no-cache wrote the cache");
        }
    }
}

/// Two recordings of one program with one cache: the program is kept once, under its build
/// ID, and neither recording holds a copy of it (the cache is shared, never per recording).
#[test]
fn recordings_share_one_cache_entry() {
    let dir = Dir::new();
    let cache = dir.path().join("cache");
    let bin = dir.path().join("faults");
    build_faults_shifted(dir.path(), &bin, 0);
    let bin_str = bin.to_str().expect("utf-8");
    let pages = PAGES.to_string();
    for run in ["one", "two"] {
        let sub = dir.path().join(run);
        std::fs::create_dir(&sub).expect("mkdir");
        let out = dir
            .fltrace()
            .current_dir(&sub)
            .env("FLTRACE_CACHE", &cache)
            .args(["record", "-q", "--", bin_str, "nested", &pages])
            .output()
            .expect("fltrace runs");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        for entry in std::fs::read_dir(&sub).expect("recording") {
            let name = entry.expect("entry").file_name();
            let name = name.to_string_lossy();
            assert!(name.starts_with("fltrace-data-"), "{name} in the recording");
        }
    }
    let list = run_ok(
        dir.fltrace()
            .env("FLTRACE_CACHE", &cache)
            .args(["cache", "list"]),
    );
    assert_eq!(
        list.lines().filter(|l| l.ends_with(bin_str)).count(),
        1,
        "{list}"
    );
}

/// A program run from a tmpfs mounted in its own mount namespace, gone with it: named from the
/// cache, which reached the file through /proc/PID/map_files while it ran.
#[test]
fn program_of_another_mount_namespace_is_named_after_it_exits() {
    let dir = Dir::new();
    let cache = dir.path().join("cache");
    // Empty here; only the namespace sees the tmpfs over it.
    let hidden = dir.path().join("hidden");
    std::fs::create_dir(&hidden).expect("mkdir");
    let built = dir.path().join("built/faults");
    std::fs::create_dir_all(built.parent().expect("parent")).expect("mkdir");
    build_faults_shifted(built.parent().expect("parent"), &built, 0);
    // `wait` fills the pages, then pauses until the timeout ends it: the process lives past
    // the recorder's next reading, as a container's processes do.
    let script = format!(
        "mount -t tmpfs fltrace-test {h} && cp {b} {h}/faults && timeout 1 {h}/faults wait {PAGES}; true",
        h = hidden.display(),
        b = built.display()
    );
    let out = fltrace_cached(
        &dir,
        &cache,
        &["record", "-q", "--", "unshare", "-m", "sh", "-c", &script],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let inside = hidden.join("faults");
    assert!(!inside.exists(), "the tmpfs leaked out of the namespace");
    let recording = fltrace_trace::Recording::latest(dir.path()).expect("a recording");
    let pid = recording
        .pids()
        .iter()
        .copied()
        .find(|&pid| {
            recording.load(pid).is_ok_and(|t| {
                t.mappings
                    .iter()
                    .any(|m| Path::new(&m.path) == inside && m.is_exec())
            })
        })
        .expect("the process run from the namespace's tmpfs");
    let pid = pid.to_string();
    let out = fltrace_cached(
        &dir,
        &cache,
        &[
            "report", "--format", "json", "--top", "0", "--by", "line", "--pid", &pid,
        ],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
    assert_eq!(
        count_at(&report, "faults.c", site("faults.c", "fill")),
        PAGES,
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The pid of the recording's root process.
fn root_pid(dir: &Dir) -> u32 {
    fltrace_trace::Recording::latest(dir.path())
        .expect("a recording")
        .root_pid()
        .expect("a process")
}

/// The perf map a process wrote, removed: its copy in the recording must do.
fn remove_perf_map(pid: u32) -> PathBuf {
    let map = PathBuf::from(format!("/tmp/perf-{pid}.map"));
    std::fs::remove_file(&map).expect("the workload wrote its perf map");
    map
}

/// A program that writes its own code into an anonymous executable page and names it in a
/// perf map: every fault of that code is the function's (at its store, offset 3), in the
/// report and the perf-script export, after the map file is gone.
#[test]
fn jit_code_is_named_by_its_perf_map() {
    let dir = Dir::new();
    let jitmap = build_c_workload(dir.path(), "jitmap.c");
    const TOUCHED: u64 = 300;
    dir.record_with(&["-q", "--no-cache"], &[&jitmap], &[&TOUCHED.to_string()]);
    let pid = root_pid(&dir);
    remove_perf_map(pid);
    let report = dir.report_json(&["--by", "function"]);
    let named: Vec<&serde_json::Value> = groups(&report)
        .filter(|g| g["function"] == "jit_touch_pages")
        .collect();
    assert_eq!(named.len(), 1, "{report}");
    assert_eq!(named[0]["count"], TOUCHED);
    assert_eq!(named[0]["lib"], format!("perf-{pid}.map"));

    let script = dir.run(&["script"]);
    assert!(script.status.success());
    let text = String::from_utf8_lossy(&script.stdout);
    let leaves = text
        .split("\n\n")
        .filter(|sample| {
            sample.lines().nth(1).is_some_and(|leaf| {
                leaf.ends_with(&format!(" jit_touch_pages+0x3 (/tmp/perf-{pid}.map)"))
            })
        })
        .count();
    assert_eq!(leaves as u64, TOUCHED, "{text}");
}

/// node --perf-basic-prof: the hot function that allocates is named in `report --by function`
/// with the faults whose innermost frame is its code (counted here from the raw tables and
/// the map), after node's map file is deleted.
#[test]
fn node_perf_basic_prof_names_the_hot_function() {
    let dir = Dir::new();
    let script = dir.path().join("hot.js");
    std::fs::write(
        &script,
        "const kept = [];\n\
         function hotAllocate(n) {\n\
         \x20 const out = new Array(n);\n\
         \x20 for (let i = 0; i < n; i++) out[i] = { index: i, values: [i, i + 1, i + 2] };\n\
         \x20 return out;\n\
         }\n\
         for (let round = 0; round < 40; round++) kept.push(hotAllocate(50000));\n\
         console.log(kept.length);\n",
    )
    .expect("write script");
    let node = PathBuf::from("node");
    dir.record_with(
        &["-q", "--no-cache"],
        &[&node],
        &["--perf-basic-prof", script.to_str().expect("utf-8")],
    );
    let pid = root_pid(&dir);
    let map = std::fs::read_to_string(format!("/tmp/perf-{pid}.map")).expect("node's perf map");
    remove_perf_map(pid);
    // node's own names: `JS:*hotAllocate /path/hot.js:2` (optimized), `JS:~...` (baseline).
    let functions: Vec<(u64, u64, String)> = map
        .lines()
        .filter_map(|l| {
            let mut f = l.splitn(3, ' ');
            let start = u64::from_str_radix(f.next()?, 16).ok()?;
            let size = u64::from_str_radix(f.next()?, 16).ok()?;
            Some((start, start + size, f.next()?.to_owned()))
        })
        .collect();
    assert!(
        functions
            .iter()
            .any(|(_, _, name)| name.contains("hotAllocate ")),
        "no hotAllocate in node's map"
    );

    let recording = fltrace_trace::Recording::latest(dir.path()).expect("a recording");
    let trace = recording.load(pid).expect("trace");
    // A later line over the same code names it (the JIT reused the memory).
    let in_hot = |addr: u64| {
        functions
            .iter()
            .rev()
            .find(|(s, e, _)| (*s..*e).contains(&addr))
            .filter(|(_, _, name)| name.contains("hotAllocate "))
    };
    let mut expected: std::collections::BTreeMap<String, u64> = Default::default();
    for fault in &trace.faults {
        let leaf = trace
            .stack(fault.stack_id)
            .and_then(|s| s.frames.first().copied());
        if let Some((_, _, name)) = leaf.and_then(|ip| in_hot(ip.get())) {
            *expected.entry(name.clone()).or_default() += 1;
        }
    }
    let report = dir.report_json(&["--by", "function"]);
    let named: std::collections::BTreeMap<String, u64> = groups(&report)
        .filter(|g| {
            g["function"]
                .as_str()
                .is_some_and(|f| f.contains("hotAllocate "))
        })
        .map(|g| {
            (
                g["function"].as_str().unwrap_or("").to_owned(),
                g["count"].as_u64().unwrap_or(0),
            )
        })
        .collect();
    assert_eq!(named, expected, "{report}");
    let total: u64 = named.values().sum();
    // The function allocates most of what the run touches.
    assert!(
        total * 2 > report["faults"].as_u64().unwrap_or(0),
        "{named:?} of {}",
        report["faults"]
    );
}

/// The faults `report --by KEY` gives `function` (every group of that name), and the groups.
fn count_of(report: &serde_json::Value, function: &str) -> (u64, Vec<serde_json::Value>) {
    let named: Vec<serde_json::Value> = groups(report)
        .filter(|g| g["function"] == function)
        .cloned()
        .collect();
    (
        named.iter().filter_map(|g| g["count"].as_u64()).sum(),
        named,
    )
}

/// `report` of `dir` for `pid`, JSON by `key`, with its stderr.
fn report_pid(dir: &Dir, pid: u32, key: &str) -> (serde_json::Value, String) {
    let pid = pid.to_string();
    let out = dir.run(&[
        "report", "--format", "json", "--top", "0", "--by", key, "--pid", &pid,
    ]);
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "report failed: {stderr}");
    (
        serde_json::from_slice(&out.stdout).expect("report prints JSON"),
        stderr,
    )
}

/// The lines of `stderr` that are fltrace's warnings.
fn warnings(stderr: &str) -> Vec<&str> {
    stderr
        .lines()
        .filter(|l| l.starts_with("fltrace: warning:"))
        .collect()
}

/// A program that names its code in a jitdump, loaded at one address and moved to another
/// where it runs, with a debug record giving its lines: every fault is the function's at the
/// store's line (jitmap.js:11), in the report and the perf-script export, after the jitdump is
/// deleted. Then the recording's copy corrupted: the move's record cut to 3 bytes leaves the
/// moved code unnamed with one warning line saying where; a file that is no jitdump at all,
/// one line too; the report runs to its end both times.
#[test]
fn jit_code_is_named_by_its_jitdump_and_a_corrupt_one_is_said() {
    let dir = Dir::new();
    let jitmap = build_c_workload(dir.path(), "jitmap.c");
    const TOUCHED: u64 = 300;
    let here = dir.path().to_str().expect("utf-8").to_owned();
    dir.record_with(
        &["-q", "--no-cache"],
        &[&jitmap],
        &[&TOUCHED.to_string(), "--jitdump", &here],
    );
    let pid = root_pid(&dir);
    std::fs::remove_file(dir.path().join(format!("jit-{pid}.dump")))
        .expect("the workload wrote its jitdump");
    assert!(
        !Path::new(&format!("/tmp/perf-{pid}.map")).exists(),
        "a perf map would name the code too"
    );

    let (report, stderr) = report_pid(&dir, pid, "function");
    let (count, named) = count_of(&report, "jit_touch_pages");
    assert_eq!(count, TOUCHED, "{report}");
    assert_eq!(named[0]["lib"], format!("jit-{pid}.dump"));
    assert!(warnings(&stderr).is_empty(), "{stderr}");
    let (by_line, _) = report_pid(&dir, pid, "line");
    assert_eq!(count_at(&by_line, "jitmap.js", 11), TOUCHED, "{by_line}");

    let script = dir.run(&["script"]);
    assert!(script.status.success());
    let text = String::from_utf8_lossy(&script.stdout);
    let leaves = text
        .split("\n\n")
        .filter(|sample| {
            sample.lines().nth(1).is_some_and(|leaf| {
                leaf.ends_with(&format!(" jit_touch_pages+0x3 (jit-{pid}.dump)"))
            })
        })
        .count();
    assert_eq!(leaves as u64, TOUCHED, "{text}");

    // The flamegraph's stacks, the flamegraph itself and the SQL export name it too.
    let folded = dir.run(&["report", "--format", "folded"]);
    assert!(folded.status.success());
    let in_jit: u64 = String::from_utf8_lossy(&folded.stdout)
        .lines()
        .filter_map(|l| l.rsplit_once(' '))
        .filter(|(stack, _)| stack.ends_with(";jit_touch_pages"))
        .filter_map(|(_, count)| count.parse::<u64>().ok())
        .sum();
    assert_eq!(in_jit, TOUCHED);
    let pictures = dir.path().join("pictures");
    std::fs::create_dir(&pictures).expect("mkdir");
    let out = dir.run(&["visualize", "-o", pictures.to_str().expect("utf-8")]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let svg = std::fs::read_to_string(pictures.join(format!("fltrace-data-flamegraph-{pid}.svg")))
        .expect("the flamegraph");
    // Its box is labelled by the function; the tooltip names its lines and the jitdump.
    assert!(
        svg.contains(&format!("<title>jit_touch_pages ({TOUCHED} faults"))
            && svg.contains(&format!("jitmap.js:11 in jit-{pid}.dump</title>")),
        "no box of the JIT code's {TOUCHED} faults in the flamegraph: {}",
        svg.lines()
            .filter(|l| l.contains("jit"))
            .collect::<Vec<_>>()
            .join("\n")
    );
    let out = dir.run(&["export", ".", "-o", "out", "--host", "h"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let rows = &super::tables::sql(
        dir.path(),
        &[
            "select fr.function, fr.file, fr.line, fr.library, count(*) \
           from read_parquet('out/*/*/faults.parquet') f \
           join read_parquet('out/*/*/frames.parquet') fr \
             on fr.pid = f.pid and fr.stack_id = f.stack_id \
           where fr.call_site and fr.library like 'jit-%' group by all",
        ],
    )[0];
    assert_eq!(
        rows,
        &[vec![
            serde_json::json!("jit_touch_pages"),
            serde_json::json!("jitmap.js"),
            serde_json::json!(11),
            serde_json::json!(format!("jit-{pid}.dump")),
            serde_json::json!(TOUCHED),
        ]],
    );

    // An archive file carries the jitdump: the same names from it, elsewhere.
    let out = dir.run(&["archive", "-o", "jit.tar.zst"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let elsewhere = Dir::new();
    let archive = dir.path().join("jit.tar.zst");
    let out = elsewhere.run(&[
        "report",
        "-d",
        archive.to_str().expect("utf-8"),
        "--format",
        "json",
        "--top",
        "0",
        "--by",
        "function",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let from_archive: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
    assert_eq!(count_of(&from_archive, "jit_touch_pages").0, TOUCHED);

    // The records: header 40, debug 16+16+26+18+26 = 102, load 16+40+16+19 = 91, move 64.
    let copy = fltrace_trace::files::jitdump(dir.path(), pid);
    let mut bytes = std::fs::read(&copy).expect("the recording's jitdump");
    assert_eq!(bytes.len(), 40 + 102 + 91 + 64);
    let move_at = 40 + 102 + 91;
    bytes[move_at + 4..move_at + 8].copy_from_slice(&3u32.to_ne_bytes());
    std::fs::write(&copy, &bytes).expect("corrupt the copy");
    let (report, stderr) = report_pid(&dir, pid, "function");
    assert_eq!(count_of(&report, "jit_touch_pages").0, 0, "{report}");
    assert_eq!(
        warnings(&stderr),
        [format!(
            "fltrace: warning: {}: record 2 at byte {move_at}: its size 3 is below the 16-byte \
             record header; 1 function named before it, none after",
            // The recording is the current directory's.
            Path::new(".")
                .join(copy.file_name().expect("a name"))
                .display()
        )],
        "{stderr}"
    );

    std::fs::write(
        &copy,
        b"\x7fELF, not a jitdump at all, and long enough for a header",
    )
    .expect("overwrite the copy");
    let (report, stderr) = report_pid(&dir, pid, "function");
    assert_eq!(count_of(&report, "jit_touch_pages").0, 0, "{report}");
    let said = warnings(&stderr);
    assert_eq!(said.len(), 1, "{stderr}");
    assert!(
        said[0].contains("not a jitdump file") && said[0].ends_with("its JIT frames stay unnamed"),
        "{stderr}"
    );
}

/// Programs in a new mount and pid namespace, with a tmpfs of their own on /tmp: one names its
/// code in /tmp/perf-NSPID.map (its pid in its namespace, which differs from the recording's),
/// the other in a jitdump in that /tmp. Neither file is visible from here, and both are gone
/// with the namespace; the recorder read them through /proc/PID/root and /proc/PID/map_files
/// while the programs lived, so both are named after they exit.
#[test]
fn jit_files_of_another_mount_and_pid_namespace_are_kept() {
    let dir = Dir::new();
    let jitmap = build_c_workload(dir.path(), "jitmap.c");
    const MAPPED: u64 = 50;
    const DUMPED: u64 = 60;
    // The working directory stays the test's, under the tmpfs mounted over /tmp. Each program
    // lingers a second: the recorder looks for perf maps every 100 ms while a process lives.
    let script = format!(
        "cd {d} && mount -t tmpfs fltrace-test /tmp && ./jitmap {MAPPED} --linger 1000 && \
         ./jitmap {DUMPED} --jitdump /tmp --linger 1000",
        d = dir.path().display()
    );
    let out = dir
        .fltrace()
        .args(["record", "-q", "--no-cache", "--"])
        .args(["unshare", "--mount", "--pid", "--fork", "sh", "-c", &script])
        .output()
        .expect("fltrace runs");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let recording = fltrace_trace::Recording::latest(dir.path()).expect("a recording");
    let jitmaps: Vec<u32> = recording
        .pids()
        .iter()
        .copied()
        .filter(|&pid| {
            recording.load(pid).is_ok_and(|t| {
                t.mappings
                    .iter()
                    .any(|m| Path::new(&m.path) == jitmap && m.is_exec())
            })
        })
        .collect();
    assert_eq!(jitmaps.len(), 2, "{jitmaps:?}");
    let (dumped, mapped): (Vec<u32>, Vec<u32>) = jitmaps
        .iter()
        .partition(|&&pid| fltrace_trace::files::jitdump(dir.path(), pid).exists());
    let (Some(&dumped), Some(&mapped)) = (dumped.first(), mapped.first()) else {
        panic!("one jitdump copied: {jitmaps:?}");
    };
    assert!(fltrace_trace::files::perf_map(dir.path(), mapped).exists());
    for pid in [mapped, dumped] {
        assert!(
            !Path::new(&format!("/tmp/perf-{pid}.map")).exists(),
            "the perf map leaked out of the namespace"
        );
    }

    let (report, stderr) = report_pid(&dir, mapped, "function");
    let (count, named) = count_of(&report, "jit_touch_pages");
    assert_eq!(count, MAPPED, "{report} {stderr}");
    assert_eq!(named[0]["lib"], format!("perf-{mapped}.map"));

    let (report, stderr) = report_pid(&dir, dumped, "line");
    assert_eq!(
        count_at(&report, "jitmap.js", 11),
        DUMPED,
        "{report} {stderr}"
    );
    let (report, _) = report_pid(&dir, dumped, "function");
    let (count, named) = count_of(&report, "jit_touch_pages");
    assert_eq!(count, DUMPED, "{report}");
    assert_eq!(named[0]["lib"], format!("jit-{dumped}.dump"));
}

/// node --perf-prof (Debian's nodejs) running the project's workloads/hot.js: node's jitdump
/// is copied into the recording, and after node's own file is deleted the hot function that
/// allocates is named in `report --by function` and `--by line` with exactly the faults whose
/// innermost frame is its compiled code (counted here from the raw tables and the jitdump), at
/// lines of its body in hot.js (6-8), and most of the run's faults are its.
#[test]
fn node_perf_prof_names_the_hot_function_and_its_lines() {
    let dir = Dir::new();
    let script = workloads_dir().join("hot.js");
    dir.record_with(
        &["-q", "--no-cache"],
        &[Path::new("node")],
        &["--perf-prof", script.to_str().expect("utf-8")],
    );
    let pid = root_pid(&dir);
    std::fs::remove_file(dir.path().join(format!("jit-{pid}.dump")))
        .expect("node wrote its jitdump in its working directory");
    let dump = fltrace_trace::JitDump::read(&fltrace_trace::files::jitdump(dir.path(), pid))
        .expect("the recording's copy reads");
    assert!(dump.stopped.is_none(), "{:?}", dump.stopped);

    let recording = fltrace_trace::Recording::latest(dir.path()).expect("a recording");
    let trace = recording.load(pid).expect("trace");
    let mut by_name: std::collections::BTreeMap<String, u64> = Default::default();
    let mut by_line: std::collections::BTreeMap<(String, u32), u64> = Default::default();
    for fault in &trace.faults {
        let Some(ip) = trace
            .stack(fault.stack_id)
            .and_then(|s| s.frames.first().copied())
        else {
            continue;
        };
        let Some(code) = dump
            .lookup(ip.get())
            .filter(|c| c.name.contains("hotAllocate "))
        else {
            continue;
        };
        *by_name.entry(code.name.to_string()).or_default() += 1;
        let line = code
            .line_at(ip.get())
            .expect("node gives optimized code its lines");
        *by_line
            .entry((line.file.to_string(), line.line))
            .or_default() += 1;
    }
    assert!(!by_name.is_empty(), "no fault in hotAllocate's code");
    // Every line node names in hot.js is in the body. Node's V8 at times writes an entry whose
    // file name is bytes of no string (seen once in a full suite run: "B\xff\xff:7"), which
    // the jitdump carries as written: those faults are counted, and must stay few.
    let mut in_body = 0;
    for ((file, line), count) in &by_line {
        if file.ends_with("/hot.js") {
            assert!(
                (6..=8).contains(line),
                "{file}:{line} is not in hotAllocate's body"
            );
            in_body += count;
        }
    }
    let all: u64 = by_line.values().sum();
    assert!(in_body * 10 >= all * 9, "{by_line:?}");

    let hot = |g: &&serde_json::Value| {
        g["function"]
            .as_str()
            .is_some_and(|f| f.contains("hotAllocate "))
    };
    let (report, stderr) = report_pid(&dir, pid, "function");
    assert!(warnings(&stderr).is_empty(), "{stderr}");
    // Summed by name: an entry with a file name of no string (above) is a group of its own.
    let mut named: std::collections::BTreeMap<String, u64> = std::collections::BTreeMap::new();
    for g in groups(&report).filter(hot) {
        assert_eq!(g["lib"], format!("jit-{pid}.dump"));
        *named
            .entry(g["function"].as_str().unwrap_or("").to_owned())
            .or_default() += g["count"].as_u64().unwrap_or(0);
    }
    assert_eq!(named, by_name, "{report}");
    let total: u64 = named.values().sum();
    assert!(
        total * 2 > report["faults"].as_u64().unwrap_or(0),
        "{named:?} of {}",
        report["faults"]
    );

    let (report, _) = report_pid(&dir, pid, "line");
    let lines: std::collections::BTreeMap<(String, u32), u64> = groups(&report)
        .filter(hot)
        .map(|g| {
            (
                (
                    g["file"].as_str().unwrap_or("").to_owned(),
                    g["line"].as_u64().unwrap_or(0) as u32,
                ),
                g["count"].as_u64().unwrap_or(0),
            )
        })
        .collect();
    assert_eq!(lines, by_line, "{report}");
}
