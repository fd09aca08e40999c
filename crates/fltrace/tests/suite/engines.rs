//! The tables as SQL engines read them: a series of `fltrace runs` (with `--allocs` and
//! far-memory runs) read by Spark with its default settings and by DuckDB, every documented
//! query of docs/FORMAT.md run on both with the same rows, and a recording of the previous
//! layout still read by `report`.
//!
//! PySpark and DuckDB are the PyPI packages in `target/venv`, which `scripts/setup.sh` makes;
//! Spark runs in local mode on the machine's Java.

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

use super::util::*;

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// Every ```sql block of docs/FORMAT.md, in order.
fn sql_blocks() -> Vec<String> {
    let doc = std::fs::read_to_string(repo().join("docs/FORMAT.md")).expect("docs/FORMAT.md");
    doc.split("```sql\n")
        .skip(1)
        .map(|block| block.split("```").next().unwrap_or_default().to_owned())
        .collect()
}

/// The view definitions of docs/FORMAT.md whose first line is `-- <title>`.
fn setup(title: &str) -> String {
    sql_blocks()
        .into_iter()
        .find(|b| b.lines().next() == Some(&format!("-- {title}")))
        .unwrap_or_else(|| panic!("docs/FORMAT.md has no block `-- {title}`"))
}

/// Each engine's rows for each query, and the types Spark gave the views' columns.
struct Answers {
    rows: Vec<(Vec<Value>, Vec<Value>)>,
    spark_types: Value,
}

fn engines(dir: &Path, duckdb_setup: &str, spark_setup: &str, queries: &[String]) -> Answers {
    let python = repo().join("target/venv/bin/python");
    let out = Command::new(&python)
        .arg(repo().join("scripts/engines.py"))
        .arg(dir)
        .args([duckdb_setup, spark_setup])
        .args(queries)
        .output()
        .expect("python runs");
    assert!(
        out.status.success(),
        "{} scripts/engines.py failed (run scripts/setup.sh): {}",
        python.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    let lines: Vec<Value> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).expect("engines.py prints JSON"))
        .collect();
    assert_eq!(
        lines.len(),
        queries.len() + 1,
        "one line per query and the types"
    );
    let rows = lines[..queries.len()]
        .iter()
        .map(|l| {
            let rows = |engine: &str| l[engine].as_array().cloned().unwrap_or_default();
            (rows("duckdb"), rows("spark"))
        })
        .collect();
    Answers {
        rows,
        spark_types: lines[queries.len()]["spark_types"].clone(),
    }
}

/// Equal values, floats to the last bits (the engines add in different orders).
fn same(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Array(a), Value::Array(b)) => {
            a.len() == b.len() && a.iter().zip(b).all(|(a, b)| same(a, b))
        }
        (Value::Number(x), Value::Number(y)) if x.is_f64() || y.is_f64() => {
            let (x, y) = (
                x.as_f64().unwrap_or(f64::NAN),
                y.as_f64().unwrap_or(f64::NAN),
            );
            (x - y).abs() <= 1e-9 * x.abs().max(y.abs())
        }
        _ => a == b,
    }
}

fn text(v: &Value) -> &str {
    v.as_str().unwrap_or_else(|| panic!("{v} is not a string"))
}

fn int(v: &Value) -> u64 {
    v.as_u64()
        .unwrap_or_else(|| panic!("{v} is not an unsigned integer"))
}

/// A series of two workloads under dry, record, `--allocs` and far memory (`-L 16 -M 512`),
/// twice each: Spark (default settings) and DuckDB read every table family with the same rows
/// per run and process, in types Spark reads without a setting (no decimal, no timestamp);
/// every query of docs/FORMAT.md gives both engines the same rows; and the top sites query
/// counts at scan's write line what `report --by line` counts there.
#[test]
fn documented_queries_agree_on_duckdb_and_spark() {
    let w = workloads();
    let dir = Dir::new();
    std::fs::write(
        dir.path().join("configs.toml"),
        "[[config]]\nname = \"dry\"\nmode = \"dry\"\n\n[[config]]\nname = \"record\"\n\n\
         [[config]]\nname = \"allocs\"\nallocs = true\n\n\
         [[config]]\nname = \"far\"\nallocs = true\nlocal = 16\nmax_mb = 512\n",
    )
    .unwrap();
    let allocs = format!("{} sites", w.allocs.display());
    let scan = format!("{} 16 1", w.scan.display());
    let out = dir.run(&[
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
    assert!(
        out.status.success(),
        "runs: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let series = dir.path().join("s");
    assert!(series.join("_series.json").is_file());
    assert!(!series.join("series.json").exists());

    let families = ["faults", "stacks", "mmaps", "allocs", "allocstacks"];
    let mut queries: Vec<String> = families
        .iter()
        .map(|f| {
            format!(
                "select workload, config, rep, recording, pid, count(*) as n from {f}
                 group by workload, config, rep, recording, pid
                 order by workload, config, rep, recording, pid"
            )
        })
        .collect();
    let documented: Vec<String> = sql_blocks()
        .into_iter()
        .filter(|b| !b.starts_with("-- ") && !b.contains("export_"))
        .collect();
    assert!(documented.len() >= 7, "{documented:?}");
    queries.extend(documented.iter().cloned());
    let answers = engines(
        &series,
        &setup("DuckDB: a series"),
        &setup("Spark SQL: a series"),
        &queries,
    );

    for (query, (duck, spark)) in queries.iter().zip(&answers.rows) {
        assert!(!duck.is_empty(), "no rows from {query}");
        assert!(
            same(&Value::Array(duck.clone()), &Value::Array(spark.clone())),
            "DuckDB and Spark differ on {query}\nDuckDB: {duck:?}\nSpark: {spark:?}"
        );
    }
    // Every family of every traced configuration, both repetitions; allocs only with --allocs.
    let runs_of = |family: usize| -> std::collections::BTreeSet<(String, String, u64)> {
        answers.rows[family]
            .0
            .iter()
            .map(|r| (text(&r[0]).to_owned(), text(&r[1]).to_owned(), int(&r[2])))
            .collect()
    };
    for (i, family) in families.iter().enumerate() {
        let configs: &[&str] = if family.starts_with("alloc") {
            &["allocs", "far"]
        } else {
            &["allocs", "far", "record"]
        };
        let expected = ["allocs-sites", "scan-16-1"]
            .iter()
            .flat_map(|w| {
                configs
                    .iter()
                    .flat_map(move |c| (1..=2).map(move |rep| (w.to_string(), c.to_string(), rep)))
            })
            .collect();
        assert_eq!(runs_of(i), expected, "{family}");
    }

    // Spark's types, with no setting changed: plain integers, as FORMAT.md says.
    let types = &answers.spark_types;
    let type_of = |view: &str, column: &str| -> String {
        types[view]
            .as_array()
            .and_then(|cs| cs.iter().find(|c| c[0] == column))
            .map(|c| text(&c[1]).to_owned())
            .unwrap_or_else(|| panic!("{view}.{column} in {types}"))
    };
    for (view, column, expected) in [
        ("faults", "time_ns", "bigint"),
        ("faults", "ip", "bigint"),
        ("faults", "addr", "bigint"),
        ("faults", "pid", "int"),
        ("faults", "fault_id", "bigint"),
        ("faults", "rep", "int"),
        ("stacks", "frames", "array<bigint>"),
        ("mmaps", "start_addr", "bigint"),
        ("mmaps", "mapping_id", "bigint"),
        ("allocs", "size", "bigint"),
        ("allocs", "time_ns", "bigint"),
    ] {
        assert_eq!(type_of(view, column), expected, "{view}.{column}");
    }

    // scan writes each of its 16 MiB's pages at one instruction: the top site of its record
    // configuration, in both runs, with what report counts at that line in each.
    let sites = documented
        .iter()
        .position(|q| q.contains("file_offset"))
        .expect("FORMAT.md shows the top sites query");
    let top = answers.rows[families.len() + sites]
        .0
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

/// A recording of layout 2 (unsigned annotations, nanosecond timestamps, `series.json`-era),
/// written by fltrace before layout 3 (`/bin/true`, 50 faults): `report` reads it with the
/// figures it gave then.
#[test]
fn layout_2_recording_still_reports() {
    let dir = Dir::new();
    let fixture = repo().join("crates/fltrace/tests/fixtures/layout2");
    for entry in std::fs::read_dir(&fixture).expect("the fixture") {
        let path = entry.expect("entry").path();
        std::fs::copy(&path, dir.path().join(path.file_name().expect("name"))).expect("copy");
    }
    let out = dir.run(&["report", "--format", "json", "--top", "0"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let report: Value = serde_json::from_slice(&out.stdout).expect("JSON");
    assert_eq!(report["faults"], 50);
    let groups = report["groups"].as_array().expect("groups");
    let sum = |field: &str| groups.iter().map(|g| int(&g[field])).sum::<u64>();
    assert_eq!(
        ["count", "reads", "writes", "wrprotects", "first_touches"].map(sum),
        [50, 28, 17, 5, 11]
    );
}

/// `fltrace export` of three recordings (two processes; `--allocs`, whose stacks hold the
/// preloaded library's frames; an exec) into one dataset under `host=h/`: the documented
/// query gives DuckDB and Spark the same rows, and for each recording `report --by
/// function`'s counts exactly.
#[test]
fn export_reproduces_report_by_function_on_both_engines() {
    let w = workloads();
    let dir = Dir::new();
    let allocs = w.allocs.display().to_string();
    let faults = w.faults.display().to_string();
    let runs: [(&str, Vec<&str>); 3] = [
        ("a", vec!["record", "-q", "--", &faults, "fork", "40"]),
        (
            "b",
            vec!["record", "-q", "--allocs", "--", &allocs, "sites"],
        ),
        ("c", vec!["record", "-q", "--", &faults, "exec", "10"]),
    ];
    let mut reports: Vec<(String, Value)> = Vec::new();
    for (name, args) in &runs {
        let sub = dir.path().join(name);
        std::fs::create_dir(&sub).unwrap();
        let out = dir.fltrace().current_dir(&sub).args(args).output().unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let out = dir
            .fltrace()
            .current_dir(&sub)
            .args(["export", ".", "-o", "../out", "--host", "h"])
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let said = String::from_utf8_lossy(&out.stdout).to_string();
        let recording = said
            .split(':')
            .next()
            .unwrap_or_else(|| panic!("export names the recording: {said}"))
            .to_owned();
        let out = dir
            .fltrace()
            .current_dir(&sub)
            .args([
                "report", "--by", "function", "--format", "json", "--top", "0",
            ])
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        reports.push((recording, serde_json::from_slice(&out.stdout).unwrap()));
    }
    let query = sql_blocks()
        .into_iter()
        .find(|b| !b.starts_with("-- ") && b.contains("export_"))
        .expect("FORMAT.md shows the export's by-function query");
    let answers = engines(
        &dir.path().join("out"),
        &setup("DuckDB: an export"),
        &setup("Spark SQL: an export"),
        std::slice::from_ref(&query),
    );
    let (duck, spark) = &answers.rows[0];
    assert!(
        same(&Value::Array(duck.clone()), &Value::Array(spark.clone())),
        "DuckDB and Spark differ on {query}\nDuckDB: {duck:?}\nSpark: {spark:?}"
    );
    type Site = (String, String, String);
    for (recording, report) in &reports {
        let expected: std::collections::BTreeMap<Site, u64> = report["groups"]
            .as_array()
            .expect("groups")
            .iter()
            .map(|g| {
                let key = (
                    text(&g["function"]).to_owned(),
                    text(&g["file"]).to_owned(),
                    text(&g["lib"]).to_owned(),
                );
                (key, int(&g["count"]))
            })
            .collect();
        let got: std::collections::BTreeMap<Site, u64> = duck
            .iter()
            .filter(|r| text(&r[0]) == recording)
            .map(|r| {
                let key = (
                    text(&r[1]).to_owned(),
                    text(&r[2]).to_owned(),
                    text(&r[3]).to_owned(),
                );
                (key, int(&r[4]))
            })
            .collect();
        assert!(!expected.is_empty(), "{recording}");
        assert_eq!(got, expected, "{recording}");
        assert_eq!(
            got.values().sum::<u64>(),
            int(&report["faults"]),
            "{recording}: every fault counted once"
        );
    }
}
