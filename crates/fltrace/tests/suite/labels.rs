//! Labels a user reads the data by (issue 36): invalid accesses as their own kind, names as the
//! kernel spells them, stripped frames by address, truncated counts per row, and a report in a
//! recording it may not write into.

use std::process::Command;

use serde_json::Value;

use super::util::*;

const N: u64 = 20;

/// A program catching SIGSEGV (as a JVM catches its implicit null checks): its null reads,
/// writes to a read-only page and reads of a PROT_NONE page are `invalid`, N of each at their
/// lines, in the table, the JSON (`type`, `invalid`), the CSV (`type`) and the original's
/// report file (flag 256, type `invalid`); none is a first touch; its first touches of fresh
/// memory stay `zero`. (They were `read regular`, as if a file page were read in.)
#[test]
fn accesses_the_mappings_do_not_allow_are_invalid() {
    let built = Dir::new();
    let program = build_c_workload(built.path(), "segv.c");
    let dir = Dir::new();
    dir.record(&[&program], &[&N.to_string()]);
    let report = dir.report_json(&["--by", "line"]);
    let row = |name: &str| -> &Value {
        let line = site("segv.c", name);
        let rows: Vec<&Value> = groups(&report)
            .filter(|g| {
                g["file"].as_str().is_some_and(|f| f.ends_with("segv.c")) && g["line"] == line
            })
            .collect();
        assert_eq!(rows.len(), 1, "{name}: {report}");
        rows[0]
    };
    for (name, kind) in [
        ("null_read", "read"),
        ("readonly_write", "write"),
        ("guard_read", "read"),
    ] {
        let r = row(name);
        assert_eq!(
            (
                &r["count"],
                &r["type"],
                &r["kind"],
                &r["invalid"],
                &r["first_touches"]
            ),
            (
                &N.into(),
                &"invalid".into(),
                &kind.into(),
                &N.into(),
                &0.into()
            ),
            "{name}: {r}"
        );
    }
    let fresh = row("fresh_write");
    assert_eq!(
        (&fresh["count"], &fresh["type"], &fresh["invalid"]),
        (&N.into(), &"zero".into(), &0.into()),
        "{fresh}"
    );
    let invalid: u64 = groups(&report)
        .map(|g| g["invalid"].as_u64().unwrap_or(0))
        .sum();
    assert_eq!(invalid, 3 * N, "{report}");

    let csv = dir.run(&["report", "--by", "line", "--format", "csv", "--top", "0"]);
    let csv = String::from_utf8_lossy(&csv.stdout).into_owned();
    let null_line = site("segv.c", "null_read").to_string();
    let rows = csv_rows(&csv);
    let null_row = rows
        .iter()
        .find(|r| r["line"] == null_line && r["file"].ends_with("segv.c"))
        .unwrap_or_else(|| panic!("no null_read row: {csv}"));
    assert_eq!(
        (&*null_row["type"], &*null_row["count"]),
        ("invalid", "20"),
        "{csv}"
    );

    let table = String::from_utf8_lossy(&dir.run(&["report", "--by", "line"]).stdout).into_owned();
    let invalid_rows = table
        .lines()
        .filter(|l| l.contains(" invalid ") && l.contains("segv.c:"))
        .count();
    assert_eq!(invalid_rows, 3, "{table}");

    // The original's report file, written by plain `report`: one row per (stack, flags).
    assert!(dir.run(&["report"]).status.success());
    let pid = dir.pids("faults", "parquet")[0];
    let original =
        std::fs::read_to_string(dir.path().join(format!("fltrace-data-report-{pid}.out")))
            .expect("the original's report file");
    let original_rows = csv_rows(&original);
    let invalid_faults: u64 = original_rows
        .iter()
        .filter(|r| r["type"] == "invalid")
        .map(|r| {
            let flags: u32 = r["flags"].parse().expect("flags");
            assert!(flags & 256 != 0 && flags & 32 == 0, "{r:?}");
            r["count"].parse::<u64>().expect("count")
        })
        .sum();
    assert_eq!(invalid_faults, 3 * N, "{original}");
}

/// A thread named with a space, as the JVM names its own: `--comm "GC Thread#0"` selects
/// exactly its N faults at its line (the name is kept as the kernel spells it; it was stored
/// and matched as `GC_Thread#0`), the underscored spelling still selects it, and `--by tid`
/// names it with its space.
#[test]
fn a_thread_named_with_a_space_is_selected_by_its_name() {
    let built = Dir::new();
    let program = build_c_workload(built.path(), "threadname.c");
    let dir = Dir::new();
    dir.record(&[&program], &[&N.to_string()]);
    let named = site("threadname.c", "named_thread_write");
    let main = site("threadname.c", "main_write");
    for comm in ["GC Thread#0", "GC_Thread#0"] {
        let report = dir.report_json(&["--by", "line", "--comm", comm]);
        assert_eq!(
            count_at(&report, "threadname.c", named),
            N,
            "{comm}: {report}"
        );
        assert_eq!(
            count_at(&report, "threadname.c", main),
            0,
            "{comm}: {report}"
        );
    }
    let threads = dir.report_json(&["--by", "tid"]);
    let comms: Vec<&str> = groups(&threads)
        .filter_map(|g| g["comm"].as_str())
        .collect();
    assert!(comms.contains(&"GC Thread#0"), "{threads}");
    let script = String::from_utf8_lossy(&dir.run(&["script"]).stdout).into_owned();
    assert!(
        script.lines().any(|l| l.starts_with("GC Thread#0 ")),
        "perf script's comm as perf prints it"
    );
}

/// A stripped binary's folded stacks keep each frame's `binary+0xADDR` (the name the table
/// gives it), not `[binary]` for every frame of it.
#[test]
fn stripped_frames_keep_their_addresses_in_folded_stacks() {
    let build = Dir::new();
    let full = build.path().join("stripped-full");
    let out = Command::new("gcc")
        .args(["-O2", "-fomit-frame-pointer", "-o"])
        .arg(&full)
        .arg(workloads_dir().join("stripped.c"))
        .output()
        .expect("gcc runs");
    assert!(out.status.success(), "{out:?}");
    let stripped = build.path().join("stripped-fde");
    let out = Command::new("strip")
        .arg("-o")
        .arg(&stripped)
        .arg(&full)
        .output()
        .expect("strip runs");
    assert!(out.status.success(), "{out:?}");
    let dir = Dir::new();
    dir.record(&[&stripped], &[]);
    let folded =
        String::from_utf8_lossy(&dir.run(&["report", "--format", "folded"]).stdout).into_owned();
    // The 30 faults of the two stores, in one stripped function named by its start.
    let at_stores: u64 = folded
        .lines()
        .filter_map(|l| {
            let (stack, count) = l.rsplit_once(' ')?;
            let leaf = stack.rsplit(';').next()?;
            leaf.starts_with("stripped-fde+0x")
                .then(|| count.parse::<u64>().ok())
                .flatten()
        })
        .sum();
    assert!(at_stores >= 30, "{folded}");
    assert!(!folded.contains("[stripped-fde]"), "{folded}");
}

/// Every JSON row carries the count of its faults whose stack is truncated, and those add up
/// to the report's total, by stack and by line, on a recording with truncated stacks (generated
/// code without a frame chain).
#[test]
fn json_rows_carry_their_truncated_counts() {
    let built = Dir::new();
    let program = build_c_workload(built.path(), "jitchain.c");
    let dir = Dir::new();
    dir.record(&[&program], &["32", "nofp"]);
    let pid = dir.pids("faults", "parquet")[0];
    let _ = std::fs::remove_file(format!("/tmp/perf-{pid}.map"));
    for by in ["stack", "line", "function"] {
        let report = dir.report_json(&["--by", by]);
        let total = report["truncated_stack_faults"].as_u64().expect("total");
        assert!(total >= 32, "{report}");
        let rows: u64 = groups(&report)
            .map(|g| g["truncated"].as_u64().expect("a truncated count per row"))
            .sum();
        assert_eq!(rows, total, "--by {by}: {report}");
    }
}

/// `fltrace report` run inside a recording it may not write into (a read-only bind mount, in
/// a mount namespace of its own): it prints its table, says on stderr that the original's CSV
/// file could not be written and where, and exits 0.
#[test]
fn report_inside_a_read_only_recording_prints_its_table() {
    let w = workloads();
    let dir = Dir::new();
    dir.record(&[&w.faults], &["nested", "50"]);
    let path = dir.path().to_str().expect("utf-8 path");
    let out = Command::new("unshare")
        .args(["-m", "sh", "-c"])
        .arg(format!(
            "mount --bind {path} {path} && mount -o remount,bind,ro {path} && cd {path} && \
             exec {} report",
            env!("CARGO_BIN_EXE_fltrace")
        ))
        .output()
        .expect("unshare runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(
        stdout
            .lines()
            .any(|l| l.contains("fill") && l.contains("faults.c:")),
        "{stdout}"
    );
    let pid = dir.pids("faults", "parquet")[0];
    assert!(
        stderr.contains(&format!("fltrace-data-report-{pid}.out"))
            && stderr.contains("not written"),
        "{stderr}"
    );
    assert!(
        !dir.path()
            .join(format!("fltrace-data-report-{pid}.out"))
            .exists()
    );
}
