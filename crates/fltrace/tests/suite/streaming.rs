//! `report`, `diff` and the exports stream the faults table row group by row group into
//! per-stack counts: on a trace of many row groups they give exactly the counts of the faults
//! held in memory.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use fltrace_analyze::{GroupBy, GroupKey, Symbolizer, group_faults, separate_tracer};
use fltrace_trace::{FaultRowGroups, FaultWriter, Recording, files};
use serde_json::Value;

use super::util::{Dir, count_at, groups, workloads_dir};

/// Rounds of `touch 64 ROUNDS`: 16,384 first touches each at its FAULT_SITE line.
const ROUNDS: u64 = 5;
const PAGES: u64 = 64 * 256;
/// How many times over the replicated trace holds the recorded faults.
const TIMES: u64 = 3;

fn build_touch(dir: &Path) -> PathBuf {
    let touch = dir.join("touch");
    let out = Command::new("gcc")
        .args(["-O2", "-g", "-fomit-frame-pointer", "-o"])
        .arg(&touch)
        .arg(workloads_dir().join("touch.c"))
        .output()
        .expect("gcc runs");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    touch
}

/// The line of touch.c's FAULT_SITE marker.
fn fault_site() -> u32 {
    let text = std::fs::read_to_string(workloads_dir().join("touch.c")).expect("touch.c");
    text.lines()
        .position(|l| l.contains("/* FAULT_SITE"))
        .expect("FAULT_SITE in touch.c") as u32
        + 1
}

/// Copies the recording in `src` into `dst` with every faults table's rows written `times`
/// over, times shifted on by the recording's span each time.
fn replicate(src: &Path, dst: &Path, times: u64) {
    for entry in std::fs::read_dir(src).expect("recording dir") {
        let entry = entry.expect("entry");
        let name = entry.file_name().to_string_lossy().into_owned();
        // Nor the checksums: the copy's faults differ, a recording of its own.
        if !name.starts_with(files::PREFIX) || files::pid_of(&name, "checksums", "out").is_some() {
            continue;
        }
        if files::pid_of(&name, "faults", "parquet").is_none() {
            std::fs::copy(entry.path(), dst.join(&name)).expect("copy");
            continue;
        }
        let (faults, metadata) = fltrace_trace::read_faults(&entry.path()).expect("faults");
        let first = faults.iter().map(|f| f.time_ns).min().unwrap_or(0);
        let last = faults.iter().map(|f| f.time_ns).max().unwrap_or(0);
        let mut writer = FaultWriter::create(&dst.join(&name), &metadata).expect("writer");
        for pass in 0..times {
            for fault in &faults {
                let mut fault = *fault;
                fault.time_ns += pass * (last - first + 1);
                writer.push(fault).expect("push");
            }
        }
        writer.finish().expect("finish");
    }
}

/// `(function, file, line, count)` of every group of a JSON report, in order.
fn rows(report: &Value) -> Vec<(String, String, u64, u64)> {
    groups(report)
        .map(|g| {
            (
                g["function"].as_str().unwrap_or("").to_owned(),
                g["file"].as_str().unwrap_or("").to_owned(),
                g["line"].as_u64().unwrap_or(0),
                g["count"].as_u64().unwrap_or(0),
            )
        })
        .collect()
}

/// The same grouping over every fault loaded into memory, counted here one fault at a time:
/// the reference shares the library's choice of call site, not its counting. Sorted.
fn in_memory(dir: &Path, window: Option<(u64, u64)>) -> Vec<(String, String, u64, u64)> {
    let recording = Recording::latest(dir).expect("recording");
    let mut symbolizer = Symbolizer::new();
    // Keyed as the library keys groups: lines without a file stay apart by address.
    let mut counts: HashMap<GroupKey, u64> = HashMap::new();
    for &pid in recording.pids() {
        let mut trace = recording.load(pid).expect("trace");
        if let Some((from, to)) = window {
            trace.faults.retain(|f| (from..to).contains(&f.time_ns));
        }
        let mut stacks = symbolizer.resolve_stacks(&trace);
        separate_tracer(&mut trace, &mut stacks, false);
        for fault in &trace.faults {
            let one = std::iter::once((std::slice::from_ref(fault), &stacks));
            for g in group_faults(one, GroupBy::Line) {
                *counts.entry(g.key).or_default() += g.count;
            }
        }
    }
    let mut rows: Vec<_> = counts
        .into_iter()
        .map(|(key, count)| {
            let l = &key.location;
            (
                l.function.to_string(),
                l.file.to_string(),
                u64::from(l.line),
                count,
            )
        })
        .collect();
    rows.sort();
    rows
}

fn sorted<T: Ord>(mut rows: Vec<T>) -> Vec<T> {
    rows.sort();
    rows
}

fn run_ok(dir: &Dir, args: &[&str]) -> Vec<u8> {
    let out = dir.run(args);
    assert!(
        out.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out.stdout
}

/// A trace of many row groups reports, streamed, exactly the counts of the faults in memory:
/// every line's count, the total, the touch loop's exact first touches, a time window, the
/// folded export's sum, and `diff` against the recording it was replicated from.
#[test]
fn streamed_report_counts_equal_the_in_memory_counts() {
    let recorded = Dir::new();
    let touch = build_touch(recorded.path());
    recorded.record(&[touch.as_path()], &["64", &ROUNDS.to_string()]);
    let replicated = Dir::new();
    replicate(recorded.path(), replicated.path(), TIMES);

    let recording = Recording::latest(replicated.path()).expect("recording");
    let root = recording.root_pid().expect("root pid");
    let row_groups = FaultRowGroups::open_keys(&files::faults(replicated.path(), root))
        .expect("faults")
        .row_groups();
    assert!(row_groups >= 4, "{row_groups} row groups");

    let site = fault_site();
    let recorded_report = recorded.report_json(&[]);
    assert_eq!(count_at(&recorded_report, "touch.c", site), ROUNDS * PAGES);
    let report = replicated.report_json(&[]);
    assert_eq!(count_at(&report, "touch.c", site), TIMES * ROUNDS * PAGES);
    let expected = in_memory(replicated.path(), None);
    assert_eq!(sorted(rows(&report)), expected);
    let total: u64 = expected.iter().map(|r| r.3).sum();
    assert_eq!(report["faults"].as_u64(), Some(total));
    // Every group of the replica holds exactly TIMES the faults of the recording's.
    let times_over: Vec<_> = rows(&recorded_report)
        .into_iter()
        .map(|(f, file, line, count)| (f, file, line, count * TIMES))
        .collect();
    let mut sorted_replica = rows(&report);
    sorted_replica.sort();
    let mut sorted_times_over = times_over;
    sorted_times_over.sort();
    assert_eq!(sorted_replica, sorted_times_over);

    // A window over the first copy and part of the second, counted as the loader counts it.
    let start_ns = recording.session.start_ns;
    let last = fltrace_trace::read_faults(&files::faults(replicated.path(), root))
        .expect("faults")
        .0
        .iter()
        .map(|f| f.time_ns)
        .max()
        .unwrap_or(start_ns);
    let to = ((last - start_ns) as f64 / 2e9 * 1000.0).round() / 1000.0;
    let window = (start_ns, start_ns.saturating_add((to * 1e9) as u64));
    let windowed = replicated.report_json(&["--time", &format!("..{to}")]);
    let expected = in_memory(replicated.path(), Some(window));
    assert!(!expected.is_empty());
    assert_eq!(sorted(rows(&windowed)), expected);

    // The folded export counts every fault once.
    let folded = String::from_utf8(run_ok(&replicated, &["report", "--format", "folded"]))
        .expect("folded is text");
    let folded_total: u64 = folded
        .lines()
        .filter_map(|l| l.rsplit_once(' ')?.1.parse::<u64>().ok())
        .sum();
    assert_eq!(folded_total, total);

    // diff: the touch line has TIMES - 1 times its faults more in the replica.
    let diff = run_ok(
        &replicated,
        &[
            "diff",
            &recorded.path().to_string_lossy(),
            &replicated.path().to_string_lossy(),
            "--format",
            "json",
            "--top",
            "0",
        ],
    );
    let diff: Value = serde_json::from_slice(&diff).expect("diff prints JSON");
    let touch_row = diff["rows"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|r| r["line"] == site && r["file"].as_str().is_some_and(|f| f.ends_with("touch.c")))
        .unwrap_or_else(|| panic!("no touch.c:{site} row in {diff}"));
    assert_eq!(touch_row["a"].as_u64(), Some(ROUNDS * PAGES));
    assert_eq!(touch_row["b"].as_u64(), Some(TIMES * ROUNDS * PAGES));
}
