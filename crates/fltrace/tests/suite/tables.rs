//! Self-contained tables: DuckDB over a directory of several recordings agrees with fltrace's
//! own readers, process by process and recording by recording, and the queries that
//! docs/FORMAT.md and the README show run as written.
//!
//! DuckDB is the PyPI package in `target/venv`, which `scripts/setup.sh` makes.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

use fltrace_trace::{AllocEvent, Recording};
use serde_json::Value;

use super::util::*;

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The Python of the virtual environment with DuckDB; fails (never skips) without it.
fn duckdb_python() -> PathBuf {
    let python = repo().join("target/venv/bin/python");
    let works = Command::new(&python)
        .args(["-c", "import duckdb, pytz"])
        .output()
        .is_ok_and(|o| o.status.success());
    assert!(
        works,
        "DuckDB is missing ({} cannot import duckdb): run scripts/setup.sh",
        python.display()
    );
    python
}

/// The rows of each of `queries`, run by DuckDB in `dir`.
pub(super) fn sql(dir: &Path, queries: &[&str]) -> Vec<Vec<Vec<Value>>> {
    sql_after(dir, "", queries)
}

/// The rows of each of `queries`, run by DuckDB in `dir` after the statements of `setup`.
fn sql_after(dir: &Path, setup: &str, queries: &[&str]) -> Vec<Vec<Vec<Value>>> {
    let out = Command::new(duckdb_python())
        .arg(repo().join("scripts/sql.py"))
        .arg(dir)
        .args(["--setup", setup])
        .args(queries)
        .output()
        .expect("python runs");
    assert!(
        out.status.success(),
        "DuckDB failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let results: Vec<Vec<Vec<Value>>> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|line| {
            let result: Value = serde_json::from_str(line).expect("sql.py prints JSON");
            result["rows"]
                .as_array()
                .into_iter()
                .flatten()
                .map(|row| row.as_array().cloned().unwrap_or_default())
                .collect()
        })
        .collect();
    assert_eq!(results.len(), queries.len(), "one result per query");
    results
}

fn text(v: &Value) -> String {
    v.as_str()
        .unwrap_or_else(|| panic!("{v} is not a string"))
        .to_owned()
}

fn int(v: &Value) -> u64 {
    v.as_u64()
        .unwrap_or_else(|| panic!("{v} is not an unsigned integer"))
}

/// Every ```sql block of docs/FORMAT.md, in order.
fn sql_blocks() -> Vec<String> {
    let doc = std::fs::read_to_string(repo().join("docs/FORMAT.md")).expect("docs/FORMAT.md");
    doc.split("```sql\n")
        .skip(1)
        .map(|block| block.split("```").next().unwrap_or_default().to_owned())
        .collect()
}

/// The ```sql blocks of docs/FORMAT.md over a directory of recordings, in order: the queries,
/// not the view definitions (blocks beginning `-- <engine>: ...`).
fn documented_queries() -> Vec<String> {
    sql_blocks()
        .into_iter()
        .filter(|q| !q.starts_with("-- ") && !is_series_query(q) && !q.contains("export_"))
        .collect()
}

/// The queries over a series of `fltrace runs` (run in its directory): they read its hive
/// partitions.
fn is_series_query(query: &str) -> bool {
    query.contains("workload")
}

/// The view definitions of docs/FORMAT.md whose first line is `-- <title>`.
fn setup(title: &str) -> String {
    sql_blocks()
        .into_iter()
        .find(|b| b.lines().next() == Some(&format!("-- {title}")))
        .unwrap_or_else(|| panic!("docs/FORMAT.md has no block `-- {title}`"))
}

/// The documented query that contains `part`.
fn documented(part: &str) -> String {
    documented_queries()
        .into_iter()
        .find(|q| q.contains(part))
        .unwrap_or_else(|| panic!("docs/FORMAT.md has no query with {part:?}"))
}

/// The query of the README's `duckdb -c "..."` example.
fn readme_query() -> String {
    let readme = std::fs::read_to_string(repo().join("README.md")).expect("README.md");
    let start = readme
        .find("duckdb -c \"")
        .expect("the README shows a duckdb query")
        + 11;
    let len = readme[start..].find('"').expect("the query ends");
    readme[start..start + len].to_owned()
}

/// A directory with three recordings: `faults fork 40` (two processes), `record --allocs` of
/// the tables workload (its heap grown by one brk) and `faults exec 10` (two images).
struct Recorded {
    dir: Dir,
    /// Where the tables workload's heap block was.
    heap_addr: u64,
}

fn recorded() -> &'static Recorded {
    static RECORDED: OnceLock<(tempfile::TempDir, Recorded)> = OnceLock::new();
    let (_bin, recorded) = RECORDED.get_or_init(|| {
        let bin = tempfile::tempdir().expect("temp dir");
        let tables = bin.path().join("tables");
        let out = Command::new("gcc")
            .args(["-O2", "-g", "-fomit-frame-pointer", "-o"])
            .arg(&tables)
            .arg(workloads_dir().join("tables.c"))
            .output()
            .expect("gcc runs");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );

        let w = workloads();
        let dir = Dir::new();
        dir.record(&[&w.faults], &["fork", "40"]);
        let out = dir
            .fltrace()
            .args(["record", "-q", "--allocs", "--"])
            .arg(&tables)
            .arg("24")
            .output()
            .expect("fltrace runs");
        assert!(
            out.status.success(),
            "record --allocs failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let stdout = String::from_utf8_lossy(&out.stdout);
        let heap_addr = stdout
            .lines()
            .find_map(|l| l.strip_prefix("heap 0x"))
            .and_then(|a| u64::from_str_radix(a.trim(), 16).ok())
            .unwrap_or_else(|| panic!("the workload prints its heap block: {stdout:?}"));
        dir.record(&[&w.faults], &["exec", "10"]);
        (bin, Recorded { dir, heap_addr })
    });
    recorded
}

/// The recordings of the directory by id, as fltrace's reader finds them.
fn recordings(dir: &Path) -> BTreeMap<String, Recording> {
    Recording::list(dir)
        .expect("recordings")
        .into_iter()
        .map(|r| (r.session.id.clone(), r))
        .collect()
}

/// Faults per (recording, pid, ip) and per (recording, pid, stack): DuckDB's figures over the
/// glob are fltrace's own for each process of each recording, and every fault's stack begins
/// with its instruction.
#[test]
fn per_process_counts_match_fltrace() {
    let r = recorded();
    let recordings = recordings(r.dir.path());
    assert_eq!(recordings.len(), 3, "{:?}", recordings.keys());
    let mut by_ip: BTreeMap<(String, u64, u64), u64> = BTreeMap::new();
    let mut by_stack: BTreeMap<(String, u64, u64), u64> = BTreeMap::new();
    for (id, recording) in &recordings {
        for &pid in recording.pids() {
            let trace = recording.load(pid).expect("trace loads");
            for fault in &trace.faults {
                let key = |v: u64| (id.clone(), u64::from(pid), v);
                *by_ip.entry(key(fault.ip.get())).or_default() += 1;
                *by_stack.entry(key(u64::from(fault.stack_id))).or_default() += 1;
                let stack = trace.stack(fault.stack_id).expect("the fault's stack");
                assert_eq!(stack.frames.first(), Some(&fault.ip), "{id} {pid}");
            }
        }
    }
    let processes: BTreeSet<(&String, u64)> = by_ip.keys().map(|(r, p, _)| (r, *p)).collect();
    assert_eq!(
        processes.len(),
        4,
        "the fork run has two processes: {processes:?}"
    );

    let results = sql(
        r.dir.path(),
        &[
            "select recording, pid, ip, count(*) from 'fltrace-data-faults-*.parquet' group by all",
            "select recording, pid, stack_id, count(*), bool_and(s.frames[1] = f.ip)
             from 'fltrace-data-faults-*.parquet' f
             join 'fltrace-data-stacks-*.parquet' s using (recording, pid, stack_id)
             group by all",
            "select count(*) from (select recording, pid, stack_id
             from 'fltrace-data-stacks-*.parquet' group by all having count(*) > 1)",
            "select count(*) from (select stack_id from 'fltrace-data-stacks-*.parquet'
             group by all having count(*) > 1)",
        ],
    );
    let duck_by_ip: BTreeMap<(String, u64, u64), u64> = results[0]
        .iter()
        .map(|row| ((text(&row[0]), int(&row[1]), int(&row[2])), int(&row[3])))
        .collect();
    assert_eq!(duck_by_ip, by_ip);
    let duck_by_stack: BTreeMap<(String, u64, u64), u64> = results[1]
        .iter()
        .map(|row| {
            assert_eq!(
                row[4],
                Value::Bool(true),
                "innermost frame is the ip: {row:?}"
            );
            ((text(&row[0]), int(&row[1]), int(&row[2])), int(&row[3]))
        })
        .collect();
    assert_eq!(
        duck_by_stack, by_stack,
        "the join loses and repeats no fault"
    );
    assert_eq!(
        int(&results[2][0][0]),
        0,
        "(recording, pid, stack_id) is unique"
    );
    assert!(
        int(&results[3][0][0]) > 0,
        "stack ids alone repeat across files: the join needs recording and pid"
    );
}

/// Every table of every kind has the `recording` and `pid` of its file first, the same on every
/// row, and no column that SQL needs quoted.
#[test]
fn every_table_names_its_recording_and_process() {
    let r = recorded();
    let recordings = recordings(r.dir.path());
    let results = sql(
        r.dir.path(),
        &[
            "select filename, recording, pid, count(*)
             from read_parquet('fltrace-data-*.parquet', filename = true, union_by_name = true)
             group by all order by all",
            "select distinct s.name from parquet_schema('fltrace-data-*.parquet') s
             join duckdb_keywords() k on lower(s.name) = k.keyword_name
             where k.keyword_category = 'reserved'",
            "select file_name, decode(value) from parquet_kv_metadata('fltrace-data-*.parquet')
             where decode(key) = 'fltrace.format'",
        ],
    );
    let mut kinds = BTreeSet::new();
    let mut files = BTreeSet::new();
    for row in &results[0] {
        let file = text(&row[0]);
        assert!(
            files.insert(file.clone()),
            "{file}: one recording and pid only"
        );
        let name = Path::new(&file)
            .file_name()
            .and_then(|n| n.to_str())
            .unwrap_or_default();
        let (kind, pid) = name
            .strip_prefix("fltrace-data-")
            .and_then(|n| n.strip_suffix(".parquet"))
            .and_then(|n| n.rsplit_once('-'))
            .unwrap_or_else(|| panic!("{name}"));
        kinds.insert(kind.to_owned());
        assert_eq!(pid.parse::<u64>().ok(), Some(int(&row[2])), "{name}");
        let recording = recordings
            .get(&text(&row[1]))
            .unwrap_or_else(|| panic!("{name}: recording {} unknown", row[1]));
        assert!(recording.pids().contains(&(int(&row[2]) as u32)), "{name}");
    }
    let expected: BTreeSet<String> = [
        "faults",
        "stacks",
        "mmaps",
        "allocs",
        "allocstacks",
        "allocsums",
        "allocstats",
    ]
    .map(String::from)
    .into();
    assert_eq!(kinds, expected);
    assert_eq!(
        results[1],
        Vec::<Vec<Value>>::new(),
        "reserved words as column names"
    );
    assert_eq!(results[2].len(), files.len(), "every footer has the format");
    for row in &results[2] {
        assert_eq!(
            text(&row[1]),
            fltrace_trace::FORMAT_VERSION.to_string(),
            "{row:?}"
        );
    }
    let describe: Vec<String> = kinds
        .iter()
        .map(|kind| format!("describe select * from 'fltrace-data-{kind}-*.parquet'"))
        .collect();
    let describe: Vec<&str> = describe.iter().map(String::as_str).collect();
    for (kind, columns) in kinds.iter().zip(sql(r.dir.path(), &describe)) {
        let names: Vec<String> = columns.iter().map(|c| text(&c[0])).collect();
        assert_eq!(names[..2], ["recording", "pid"], "{kind}: {names:?}");
        assert_eq!(text(&columns[0][1]), "VARCHAR", "{kind}");
        assert_eq!(text(&columns[1][1]), "INTEGER", "{kind}");
    }
}

/// The README's query and every query of docs/FORMAT.md run as written; their figures are
/// fltrace's own.
#[test]
fn documented_queries_run_and_agree() {
    let r = recorded();
    let recordings = recordings(r.dir.path());
    let queries = documented_queries();
    assert!(queries.len() >= 5, "{queries:?}");
    let readme = readme_query();
    let per_thread = documented("select recording, pid, tid,");
    let per_mapping = documented("select m.path,");
    let allocs = documented("select recording, pid, stack_id, count(*) as calls");
    let mut all: Vec<&str> = queries.iter().map(String::as_str).collect();
    all.extend([readme.as_str(), &per_thread, &per_mapping, &allocs]);
    let results = sql_after(
        r.dir.path(),
        &setup("DuckDB: a directory of recordings"),
        &all,
    );
    let n = queries.len();
    for (query, rows) in queries.iter().zip(&results) {
        assert!(!rows.is_empty(), "no rows from {query}");
    }
    assert_eq!(
        results[n],
        results[n + 1],
        "the README's query is the documented one"
    );

    let (mut threads, mut paths) = (BTreeMap::new(), BTreeMap::new());
    let mut calls: BTreeMap<(String, u64, u64), (u64, u64)> = BTreeMap::new();
    for (id, recording) in &recordings {
        for &pid in recording.pids() {
            let trace = recording.load(pid).expect("trace loads");
            for fault in &trace.faults {
                let key = (id.clone(), u64::from(pid), u64::from(fault.tid));
                *threads.entry(key).or_insert(0u64) += 1;
                let generation = trace.stack(fault.stack_id).map_or(0, |s| s.generation);
                if let Some(m) = trace.mapping_at(generation, fault.addr) {
                    *paths.entry(m.path.clone()).or_insert(0u64) += 1;
                }
            }
            for event in trace
                .allocs
                .iter()
                .filter(|e| e.stack_id != AllocEvent::NO_STACK)
            {
                let key = (id.clone(), u64::from(pid), u64::from(event.stack_id));
                let entry = calls.entry(key).or_default();
                entry.0 += 1;
                entry.1 += event.size;
            }
        }
    }
    let duck_threads: BTreeMap<(String, u64, u64), u64> = results[n + 1]
        .iter()
        .map(|row| ((text(&row[0]), int(&row[1]), int(&row[2])), int(&row[3])))
        .collect();
    assert_eq!(duck_threads, threads);
    let duck_paths: BTreeMap<String, u64> = results[n + 2]
        .iter()
        .map(|row| (text(&row[0]), int(&row[1])))
        .collect();
    assert_eq!(duck_paths, paths);
    assert!(
        duck_paths.get("[heap]").is_some_and(|&c| c >= 24),
        "{duck_paths:?}"
    );
    let duck_calls: BTreeMap<(String, u64, u64), (u64, u64)> = results[n + 3]
        .iter()
        .map(|row| {
            let key = (text(&row[0]), int(&row[1]), int(&row[2]));
            (key, (int(&row[3]), int(&row[4])))
        })
        .collect();
    assert!(!calls.is_empty());
    assert_eq!(duck_calls, calls);
}

/// The heap that a single brk grew is `[heap]`, not `//anon`, in the data as in the docs; and
/// generations start at 0, +1 at exec.
#[test]
fn heap_and_generations_are_as_documented() {
    let r = recorded();
    let addr = r.heap_addr;
    let recordings = recordings(r.dir.path());
    let tables_run = recordings
        .values()
        .find(|rec| rec.session.command.ends_with("tables 24"))
        .expect("the tables run");
    let results = sql(
        r.dir.path(),
        &[
            &format!(
                "select path from 'fltrace-data-mmaps-*.parquet'
                 where recording = '{}' and {addr} >= start_addr and {addr} < end_addr",
                tables_run.session.id
            ),
            "select recording, pid, list(distinct generation order by generation)
             from (select recording, pid, generation from 'fltrace-data-mmaps-*.parquet'
                   union all
                   select recording, pid, generation from 'fltrace-data-stacks-*.parquet')
             group by all",
        ],
    );
    let paths: BTreeSet<String> = results[0].iter().map(|row| text(&row[0])).collect();
    assert_eq!(paths, BTreeSet::from(["[heap]".to_owned()]));
    let doc = std::fs::read_to_string(repo().join("docs/FORMAT.md")).expect("docs/FORMAT.md");
    assert!(
        doc.contains("`[heap]` (the `brk` heap)"),
        "FORMAT.md documents [heap]"
    );
    assert!(
        doc.contains("0 for the first image"),
        "FORMAT.md documents generation 0"
    );

    // The exec run is the one with two generations; the others have one, 0.
    let exec_run = recordings
        .values()
        .find(|rec| rec.session.command.ends_with("exec 10"))
        .expect("the exec run");
    let mut seen = 0;
    for row in &results[1] {
        let generations: Vec<u64> = row[2].as_array().into_iter().flatten().map(int).collect();
        if text(&row[0]) == exec_run.session.id {
            assert_eq!(generations, [0, 1], "{row:?}");
            seen += 1;
        } else {
            assert_eq!(generations, [0], "{row:?}");
        }
    }
    assert_eq!(seen, 1);
}

/// The series queries of docs/FORMAT.md, run by DuckDB over a small series (two workloads x
/// dry, record, --allocs x 2), give the figures of `runs --stat` (counts exact, times to the
/// last printed digits) and, for the top site across runs, the sum of what `report --by line`
/// counts at that line in each run.
#[test]
fn series_queries_agree_with_runs_stat_and_report() {
    let w = workloads();
    let dir = Dir::new();
    std::fs::write(
        dir.path().join("configs.toml"),
        "[[config]]\nname = \"dry\"\nmode = \"dry\"\n\n[[config]]\nname = \"record\"\n\n[[config]]\nname = \"allocs\"\nallocs = true\n",
    )
    .unwrap();
    let allocs = format!("{} sites", w.allocs.display());
    let scan = format!("{} 16 1", w.scan.display());
    let run = |args: &[&str]| {
        let out = dir.run(args);
        assert!(
            out.status.success(),
            "{args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        out
    };
    run(&[
        "runs",
        "-o",
        "s",
        "-n",
        "2",
        "--config",
        "configs.toml",
        "--",
        &allocs,
        &scan,
    ]);
    run(&["analyze", "s", "-o", "runs.sqlite"]);
    let stat: Value =
        serde_json::from_slice(&run(&["runs", "--stat", "runs.sqlite", "--format", "json"]).stdout)
            .unwrap();
    let queries: Vec<String> = sql_blocks()
        .into_iter()
        .filter(|q| !q.starts_with("-- ") && is_series_query(q))
        .collect();
    let stat_query = queries
        .iter()
        .find(|q| q.contains("stddev_samp"))
        .expect("FORMAT.md shows the --stat query");
    let sites_query = queries
        .iter()
        .find(|q| q.contains("file_offset"))
        .expect("FORMAT.md shows the top sites query");
    let series = dir.path().join("s");
    let results = sql_after(
        &series,
        &setup("DuckDB: a series"),
        &[stat_query, sites_query],
    );

    let float = |v: &Value| v.as_f64();
    let close = |a: Option<f64>, b: Option<f64>, what: &str| match (a, b) {
        (Some(a), Some(b)) => assert!(
            (a - b).abs() <= 1e-9 * a.abs().max(b.abs()),
            "{what}: {a} and {b}"
        ),
        (a, b) => assert_eq!(a, b, "{what}"),
    };
    let rows = &results[0];
    assert_eq!(rows.len(), 6, "{rows:?}");
    for row in rows {
        let (workload, config) = (text(&row[0]), text(&row[1]));
        let expected = stat
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["workload"] == workload.as_str() && r["config"] == config.as_str())
            .unwrap_or_else(|| panic!("{workload} {config} in --stat: {stat}"));
        let what = format!("{workload} {config}");
        assert_eq!(int(&row[2]), int(&expected["runs"]), "{what} runs");
        assert_eq!(int(&row[3]), int(&expected["failed"]), "{what} failed");
        let time = &expected["time"];
        for (i, field) in [(4, "mean"), (5, "sd"), (6, "min"), (7, "max")] {
            close(
                float(&row[i]),
                float(&time[field]),
                &format!("{what} {field}"),
            );
        }
        close(
            float(&row[8]),
            float(&expected["overhead"]["ratio"]),
            &format!("{what} overhead"),
        );
        // Means of whole counts: the same division, the same float.
        assert_eq!(float(&row[9]), float(&expected["faults"]), "{what} faults");
        assert_eq!(float(&row[10]), float(&expected["allocs"]), "{what} allocs");
        if config != "dry" {
            assert!(float(&row[9]).unwrap() > 0.0, "{what}");
        }
    }

    // scan writes each of its 16 MiB's pages at one instruction: the top site of its record
    // configuration, in both runs, with what report counts at that line in each.
    let top = results[1]
        .iter()
        .find(|r| text(&r[0]) == "scan-16-1" && text(&r[1]) == "record")
        .expect("scan's record sites");
    assert!(text(&top[2]).ends_with("/scan"), "{top:?}");
    assert_eq!(int(&top[5]), 2, "in both runs: {top:?}");
    let line = site("scan.c", "scan_write");
    let reported: u64 = (1..=2)
        .map(|rep| {
            let out = dir
                .fltrace()
                .current_dir(series.join(format!("workload=scan-16-1/config=record/rep={rep}")))
                .args(["report", "--by", "line", "--format", "json", "--top", "0"])
                .output()
                .unwrap();
            assert!(out.status.success());
            let report: Value = serde_json::from_slice(&out.stdout).unwrap();
            count_at(&report, "scan.c", line)
        })
        .sum();
    assert_eq!(int(&top[4]), reported);
    assert_eq!(
        reported,
        2 * (16 * 256 - 1),
        "every page but malloc's header page"
    );
}
