//! `fltrace runs` and `fltrace analyze`: series of workloads x configurations x repetitions,
//! resumed after a kill, with failing runs, NUMA binding, a catalog and statistics.

use std::collections::BTreeMap;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Output, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

use super::util::{Dir, site, workloads};

const THREE_CONFIGS: &str = r#"
[[config]]
name = "dry"
mode = "dry"

[[config]]
name = "record"

[[config]]
name = "allocs"
allocs = true
"#;

fn ok(out: &Output) -> String {
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "fltrace failed: {stderr}");
    stderr
}

fn run_json(dir: &Path) -> Value {
    serde_json::from_slice(&std::fs::read(dir.join("run.json")).expect("run.json"))
        .expect("run.json is JSON")
}

fn run_dir(series: &Path, workload: &str, config: &str, rep: u32) -> PathBuf {
    series
        .join(format!("workload={workload}"))
        .join(format!("config={config}"))
        .join(format!("rep={rep}"))
}

/// All `run.json` files under a series, by run directory.
fn done_runs(series: &Path) -> BTreeMap<PathBuf, Value> {
    let mut out = BTreeMap::new();
    let Ok(workloads) = std::fs::read_dir(series) else {
        return out;
    };
    for w in workloads.flatten().filter(|e| e.path().is_dir()) {
        for c in std::fs::read_dir(w.path()).into_iter().flatten().flatten() {
            for r in std::fs::read_dir(c.path()).into_iter().flatten().flatten() {
                let path = r.path();
                if let Ok(text) = std::fs::read(path.join("run.json")) {
                    out.insert(
                        path,
                        serde_json::from_slice(&text).expect("run.json is JSON"),
                    );
                }
            }
        }
    }
    out
}

fn has_table(dir: &Path, kind: &str) -> bool {
    std::fs::read_dir(dir).expect("run dir").flatten().any(|e| {
        fltrace_trace::files::pid_of(&e.file_name().to_string_lossy(), kind, "parquet").is_some()
    })
}

/// Two workloads (allocation-heavy, fault-heavy) x dry, record, --allocs x 3 repetitions:
/// every run where it belongs, the catalog exact, the statistics against dry.
#[test]
fn series_catalog_and_statistics() {
    let w = workloads();
    let dir = Dir::new();
    std::fs::write(dir.path().join("configs.toml"), THREE_CONFIGS).unwrap();
    let allocs = format!("{} sites", w.allocs.display());
    let scan = format!("{} 16 1", w.scan.display());
    let stderr = ok(&dir.run(&[
        "runs",
        "-o",
        "series",
        "-n",
        "3",
        "--config",
        "configs.toml",
        "--seed",
        "5",
        "--",
        &allocs,
        &scan,
    ]));
    assert!(stderr.contains("[18/18]"), "{stderr}");
    assert!(stderr.contains("18 runs done, 0 failed"), "{stderr}");
    let series = dir.path().join("series");
    let mut orders = Vec::new();
    for workload in ["allocs-sites", "scan-16-1"] {
        for config in ["dry", "record", "allocs"] {
            for rep in 1..=3 {
                let run = run_dir(&series, workload, config, rep);
                let record = run_json(&run);
                assert_eq!(record["workload"], workload);
                assert_eq!(record["config"], config);
                assert_eq!(record["rep"], rep);
                assert_eq!(record["exit_code"], 0, "{record}");
                assert_eq!(record["seed"], 5);
                assert!(record["wall_s"].as_f64().unwrap() > 0.0);
                assert!(record["max_rss_kb"].as_u64().unwrap() > 0);
                orders.push(record["order"].as_u64().unwrap());
                assert!(run.join("stdout.txt").is_file() && run.join("stderr.txt").is_file());
                assert_eq!(
                    has_table(&run, "faults"),
                    config != "dry",
                    "{}",
                    run.display()
                );
                assert_eq!(
                    has_table(&run, "allocs"),
                    config == "allocs",
                    "{}",
                    run.display()
                );
                // Configurations run one after the other.
                let block = match config {
                    "dry" => 1..=6,
                    "record" => 7..=12,
                    _ => 13..=18,
                };
                assert!(block.contains(orders.last().unwrap()), "{record}");
            }
        }
    }
    orders.sort_unstable();
    assert_eq!(orders, (1..=18).collect::<Vec<u64>>());

    ok(&dir.run(&["analyze", "series", "-o", "runs.sqlite"]));
    let db = rusqlite::Connection::open(dir.path().join("runs.sqlite")).unwrap();
    let count = |sql: &str| -> i64 { db.query_row(sql, [], |r| r.get(0)).unwrap() };
    assert_eq!(count("SELECT count(*) FROM runs"), 18);
    assert_eq!(count("SELECT count(*) FROM runs WHERE status = 'ok'"), 18);
    assert_eq!(count("SELECT count(*) FROM runs WHERE faults IS NULL"), 6);
    assert_eq!(count("SELECT count(*) FROM runs WHERE allocs > 0"), 6);
    assert_eq!(
        count("SELECT count(*) FROM runs WHERE allocs IS NOT NULL AND config != 'allocs'"),
        0
    );
    // The first repetition of each traced (workload, configuration) is analysed in detail.
    assert_eq!(count("SELECT count(*) FROM runs WHERE detailed"), 4);
    // Seen once under heavy load: no sites at all (not reproduced); say what the runs had.
    let detailed: Vec<(String, String, Option<i64>, String)> = db
        .prepare("SELECT workload, config, faults, dir FROM runs WHERE detailed")
        .unwrap()
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    assert_eq!(
        count("SELECT count(DISTINCT run_id) FROM sites"),
        4,
        "call sites of the four detailed runs: {detailed:?}"
    );
    // scan writes 16 MiB page by page at its SITE:scan_write line: that is its top site, with
    // every page but the first, which malloc's chunk header touched.
    let line = site("scan.c", "scan_write");
    let (file, top_line, top): (String, u32, i64) = db
        .query_row(
            "SELECT s.file, s.line, s.count FROM sites s JOIN runs r ON r.id = s.run_id
             WHERE r.workload = 'scan-16-1' AND r.config = 'record' AND s.rank = 1",
            [],
            |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
        )
        .unwrap();
    assert!(
        file.ends_with("scan.c") && top_line == line,
        "{file}:{top_line}"
    );
    assert_eq!(top, 16 * 256 - 1, "faults at scan_write");
    // The traces stay in the run directories; the catalog points to them.
    let path: String = db
        .query_row(
            "SELECT t.path FROM traces t JOIN runs r ON r.id = t.run_id
             WHERE r.workload = 'scan-16-1' AND r.config = 'record' AND r.rep = 2 AND t.kind = 'faults'",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert!(Path::new(&path).starts_with(run_dir(&series, "scan-16-1", "record", 2)));
    assert!(Path::new(&path).is_file());

    let list = dir.run(&["runs", "--list", "runs.sqlite", "--format", "json"]);
    ok(&list);
    let list: Value = serde_json::from_slice(&list.stdout).unwrap();
    assert_eq!(list.as_array().unwrap().len(), 18);

    let stat = dir.run(&["runs", "--stat", "runs.sqlite", "--format", "csv"]);
    ok(&stat);
    let text = String::from_utf8(stat.stdout).unwrap();
    let mut lines = text.lines();
    let header: Vec<&str> = lines.next().unwrap().split(',').collect();
    let column = |name: &str| header.iter().position(|h| *h == name).unwrap();
    let rows: Vec<Vec<&str>> = lines.map(|l| l.split(',').collect()).collect();
    assert_eq!(rows.len(), 6, "{text}");
    for row in &rows {
        assert_eq!(row[column("runs")], "3", "{text}");
        assert_eq!(row[column("failed")], "0", "{text}");
        let overhead: f64 = row[column("overhead")].parse().unwrap();
        if row[column("config")] == "dry" {
            assert_eq!(overhead, 1.0, "dry against itself: {text}");
            assert_eq!(row[column("faults")], "", "{text}");
        } else {
            assert!(overhead > 0.0, "{text}");
            let low: f64 = row[column("overhead_low")].parse().unwrap();
            let high: f64 = row[column("overhead_high")].parse().unwrap();
            assert!(low <= overhead && overhead <= high, "{text}");
            assert!(
                row[column("faults")].parse::<f64>().unwrap() > 0.0,
                "{text}"
            );
        }
    }
    for config in ["record", "allocs"] {
        for workload in ["allocs-sites", "scan-16-1"] {
            assert!(
                rows.iter()
                    .any(|r| r[column("workload")] == workload && r[column("config")] == config),
                "{workload} {config}: {text}"
            );
        }
    }
    // The page of the allocation-heavy workload's first --allocs run: self-contained, its
    // faults and its blocks labelled with their allocation sites.
    let id: i64 = db
        .query_row(
            "SELECT id FROM runs WHERE workload = 'allocs-sites' AND config = 'allocs' AND rep = 1",
            [],
            |r| r.get(0),
        )
        .unwrap();
    ok(&dir.run(&[
        "runs",
        "--run",
        &id.to_string(),
        "runs.sqlite",
        "-o",
        "page.html",
    ]));
    let page = std::fs::read_to_string(dir.path().join("page.html")).unwrap();
    assert!(page.starts_with("<!DOCTYPE html>"));
    for remote in ["http:", "https:", "src=", "<link", "@import"] {
        assert!(!page.contains(remote), "the page loads {remote}");
    }
    assert!(page.contains(&format!("run {id}: allocs-sites config=allocs rep=1")));
    assert!(page.contains("allocs.c:"), "allocations labelled by site");
    assert!(
        !dir.run(&[
            "runs",
            "--run",
            &id.to_string(),
            "runs.sqlite",
            "-o",
            "page.html"
        ])
        .status
        .success(),
        "never clobbers"
    );
    let table = dir.run(&["runs", "--stat", "runs.sqlite"]);
    ok(&table);
    assert!(String::from_utf8_lossy(&table.stdout).contains("overhead (95% CI)"));
}

/// Killed mid-way, the series resumes: no run is made twice and none is missing.
#[test]
fn series_resumes_after_kill() {
    let w = workloads();
    let dir = Dir::new();
    let scan = format!("{} 8 1", w.scan.display());
    let series = dir.path().join("series");
    let mut child = dir
        .fltrace()
        .args(["runs", "-o", "series", "-n", "4", "--", &scan])
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(120);
    while done_runs(&series).len() < 3 {
        assert!(Instant::now() < deadline, "no progress");
        assert!(
            child.try_wait().unwrap().is_none(),
            "the series ended early"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    child.kill().unwrap();
    child.wait().unwrap();
    let before = done_runs(&series);
    assert!((3..8).contains(&before.len()), "{}", before.len());
    let killed_at_ns = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos() as u64;

    let stderr = ok(&dir.run(&["runs", "-o", "series", "-n", "4", "--", &scan]));
    assert!(
        stderr.contains(&format!(
            "{} of 8 runs already done, resuming",
            before.len()
        )),
        "{stderr}"
    );
    let after = done_runs(&series);
    assert_eq!(after.len(), 8);
    for (path, record) in &after {
        match before.get(path) {
            Some(old) => assert_eq!(old, record, "a finished run was made again"),
            None => assert!(
                record["start_unix_ns"].as_u64().unwrap() > killed_at_ns,
                "{}",
                path.display()
            ),
        }
    }
    let mut orders: Vec<u64> = after
        .values()
        .map(|r| r["order"].as_u64().unwrap())
        .collect();
    orders.sort_unstable();
    assert_eq!(orders, (1..=8).collect::<Vec<u64>>());
    for config in ["dry", "record"] {
        for rep in 1..=4 {
            assert!(after.contains_key(&run_dir(&series, "scan-8-1", config, rep)));
        }
    }
}

/// A failing workload is recorded as failed under every configuration; the others complete.
#[test]
fn failing_runs_are_recorded_and_the_series_goes_on() {
    let w = workloads();
    let dir = Dir::new();
    let scan = format!("{} 4 1", w.scan.display());
    let stderr = ok(&dir.run(&["runs", "-o", "s", "-n", "2", "--", "false", &scan]));
    assert!(stderr.contains("8 runs done, 4 failed"), "{stderr}");
    let series = dir.path().join("s");
    for config in ["dry", "record"] {
        for rep in 1..=2 {
            assert_eq!(
                run_json(&run_dir(&series, "false", config, rep))["exit_code"],
                1
            );
            assert_eq!(
                run_json(&run_dir(&series, "scan-4-1", config, rep))["exit_code"],
                0
            );
        }
    }
    ok(&dir.run(&["analyze", "s", "-o", "c.sqlite"]));
    let out = dir.run(&["runs", "--list", "c.sqlite", "--format", "json"]);
    let runs: Value = serde_json::from_slice(&out.stdout).unwrap();
    let statuses: Vec<(&str, &str)> = runs
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            (
                r["workload"].as_str().unwrap(),
                r["status"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        statuses
            .iter()
            .filter(|s| *s == &("false", "exit 1"))
            .count(),
        4
    );
    assert_eq!(
        statuses
            .iter()
            .filter(|s| *s == &("scan-4-1", "ok"))
            .count(),
        4
    );
    let stat = dir.run(&["runs", "--stat", "c.sqlite", "--format", "json"]);
    let stat: Value = serde_json::from_slice(&stat.stdout).unwrap();
    let false_dry = stat
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["workload"] == "false" && r["config"] == "dry")
        .unwrap();
    assert_eq!(
        (false_dry["runs"].as_u64(), false_dry["failed"].as_u64()),
        (Some(0), Some(2))
    );
}

/// Memory and CPUs are bound to the configured node, untraced and recorded: started with
/// only CPU 0 allowed, the workload sees node 0's CPUs, and its memory policy is `bind:0`.
#[test]
fn runs_are_bound_to_numa_nodes() {
    let dir = Dir::new();
    std::fs::write(
        dir.path().join("numa.toml"),
        r#"
        [[config]]
        name = "free"
        mode = "dry"

        [[config]]
        name = "bound"
        mode = "dry"
        mem_node = 0
        cpu_node = 0

        [[config]]
        name = "bound-record"
        mem_node = 0
        cpu_node = 0
        "#,
    )
    .unwrap();
    let node_cpus = std::fs::read_to_string("/sys/devices/system/node/node0/cpulist").unwrap();
    let mut cmd = dir.fltrace();
    cmd.args([
        "runs",
        "-o",
        "s",
        "-n",
        "1",
        "--config",
        "numa.toml",
        "--",
        "cat /proc/self/status",
        "cat /proc/self/numa_maps",
    ]);
    // SAFETY: sched_setaffinity on the child before exec.
    unsafe {
        cmd.pre_exec(|| {
            let mut set: libc::cpu_set_t = std::mem::zeroed();
            libc::CPU_SET(0, &mut set);
            if libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    ok(&cmd.output().unwrap());
    let series = dir.path().join("s");
    let stdout = |workload: &str, config: &str| {
        std::fs::read_to_string(run_dir(&series, workload, config, 1).join("stdout.txt")).unwrap()
    };
    let cpus = |status: String| {
        status
            .lines()
            .find_map(|l| l.strip_prefix("Cpus_allowed_list:"))
            .unwrap()
            .trim()
            .to_owned()
    };
    assert_eq!(cpus(stdout("cat-_proc_self_status", "free")), "0");
    for config in ["bound", "bound-record"] {
        assert_eq!(
            cpus(stdout("cat-_proc_self_status", config)),
            node_cpus.trim()
        );
        let maps = stdout("cat-_proc_self_numa_maps", config);
        assert!(
            maps.lines().next().unwrap().contains(" bind:0 "),
            "{config}: {maps}"
        );
    }
    let free = stdout("cat-_proc_self_numa_maps", "free");
    assert!(free.lines().next().unwrap().contains(" default "), "{free}");
}

/// A node that does not exist is an error before anything runs.
#[test]
fn a_missing_numa_node_is_a_clear_error() {
    let dir = Dir::new();
    std::fs::write(
        dir.path().join("c.toml"),
        "[[config]]\nname = \"far\"\nmode = \"dry\"\nmem_node = 63\n",
    )
    .unwrap();
    let out = dir.run(&["runs", "-o", "s", "--config", "c.toml", "--", "true"]);
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("configuration `far`: mem_node = 63: this machine has no NUMA node 63"),
        "{stderr}"
    );
    assert!(!dir.path().join("s").exists(), "nothing ran");
}

/// `pmem_dir` (Heimdallr's PMEM mode): the heap of `allocs heap 8` (8 MiB of 64 KiB blocks,
/// a calloc, a realloc grown to 1 MiB, a 1 MiB memalign and an 8 MiB block) lives in files of
/// the directory, untraced and recorded with --allocs. Every kind of block is in the run's
/// backing file (the program reads its own /proc/self/maps), the file holds at least what the
/// program allocated while it runs and afterwards, the program's results are those of the dry
/// run, faults are attributed as usual, and the files are removed unless kept.
#[test]
fn backing_directory_holds_the_heap() {
    let w = workloads();
    let dir = Dir::new();
    let pmem = dir.path().join("pmem");
    std::fs::create_dir(&pmem).unwrap();
    let configs = format!(
        r#"
[[config]]
name = "dry"
mode = "dry"

[[config]]
name = "pmem-dry"
mode = "dry"
pmem_dir = "{pmem}"
keep_backing = true

[[config]]
name = "pmem"
allocs = true
pmem_dir = "{pmem}"
"#,
        pmem = pmem.display()
    );
    std::fs::write(dir.path().join("configs.toml"), configs).unwrap();
    let heap = format!("{} heap 8", w.allocs.display());
    let stderr = ok(&dir.run(&[
        "runs",
        "-o",
        "s",
        "-n",
        "1",
        "--config",
        "configs.toml",
        "--",
        &heap,
    ]));
    assert!(stderr.contains("3 runs done, 0 failed"), "{stderr}");
    let series = dir.path().join("s");
    let stdout = |config: &str| {
        std::fs::read_to_string(run_dir(&series, "allocs-heap-8", config, 1).join("stdout.txt"))
            .unwrap()
    };
    let line = |text: &str, key: &str| -> String {
        text.lines()
            .find_map(|l| l.strip_prefix(key))
            .unwrap_or_else(|| panic!("no `{key}` in {text}"))
            .trim()
            .to_owned()
    };
    let dry = stdout("dry");
    assert_eq!(
        line(&dry, "backing"),
        "malloc=anon calloc=anon realloc=anon memalign=anon large=anon"
    );
    const MIB: u64 = 1 << 20;
    // 128 blocks of 64 KiB, the calloc of their pointers, the grown realloc, the memalign
    // and the large block.
    let allocated = 8 * MIB + 128 * 8 + MIB + MIB + 8 * MIB;
    for config in ["pmem-dry", "pmem"] {
        let out = stdout(config);
        assert_eq!(line(&out, "checksum"), line(&dry, "checksum"), "{config}");
        let record = run_json(&run_dir(&series, "allocs-heap-8", config, 1));
        let backing = PathBuf::from(record["backing_dir"].as_str().expect("backing_dir"));
        assert!(backing.starts_with(&pmem), "{record}");
        assert_eq!(record["backing_files"], 1, "{record}");
        let bytes = record["backing_bytes"].as_u64().unwrap();
        // Every kind of block is in the one file.
        let kinds = line(&out, "backing");
        let file = kinds
            .split(' ')
            .next()
            .and_then(|k| k.strip_prefix("malloc="))
            .unwrap()
            .to_owned();
        assert!(Path::new(&file).starts_with(&backing), "{kinds}");
        for kind in ["malloc", "calloc", "realloc", "memalign", "large"] {
            assert!(kinds.contains(&format!("{kind}={file}")), "{kind}: {kinds}");
        }
        // The size the program saw while it held every block is the size at the end (the heap
        // only grew), at least what it allocated, and little more: page-aligned large blocks
        // with their headers, growth in pieces of 4 MiB.
        let while_running: u64 = line(&out, "file_bytes").parse().unwrap();
        assert_eq!(while_running, bytes, "{config}");
        assert!(
            bytes >= allocated && bytes <= allocated + allocated / 8 + 8 * MIB,
            "{config}: {bytes} bytes of files for {allocated} allocated"
        );
        if config == "pmem-dry" {
            let kept = std::fs::metadata(&file).expect("kept backing file");
            assert_eq!(kept.len(), bytes);
            use std::os::unix::fs::PermissionsExt;
            assert_eq!(
                kept.permissions().mode() & 0o777,
                0o600,
                "the heap is private"
            );
        } else {
            assert!(!backing.exists(), "removed after the run");
        }
    }
    // Recorded: the faults are the program's, at the line that fills the blocks: every fault
    // the kernel counted for the thread while it filled them (`fill_faults`, its own
    // getrusage), less any record the kernel dropped (`lost`). Not one per page: how much a
    // fault maps depends on the file system behind the heap (a tmpfs with huge pages, as /tmp
    // is on some machines, maps 2 MiB at once: 244 faults here where ext4 takes 4580), so the
    // pages bound only how many there can be. The tracepoint also fires for a fault the kernel
    // retries, which getrusage does not count: more than the program's count is possible.
    let pmem_run = run_dir(&series, "allocs-heap-8", "pmem", 1);
    let kernel_count: u64 = line(&stdout("pmem"), "fill_faults").parse().unwrap();
    assert!(kernel_count > 0, "{}", stdout("pmem"));
    assert!(has_table(&pmem_run, "faults") && has_table(&pmem_run, "allocs"));
    let report = dir
        .fltrace()
        .current_dir(&pmem_run)
        .args(["report", "--by", "line", "--format", "json", "--top", "0"])
        .output()
        .unwrap();
    let report: Value = serde_json::from_slice(&report.stdout).expect("report JSON");
    let fill = super::util::count_at(&report, "allocs.c", site("allocs.c", "heap_fill"));
    let lost = report["lost"].as_u64().expect("lost");
    let pages = (8 * MIB + MIB + 8 * MIB) / 4096;
    assert!(
        fill + lost >= kernel_count && fill <= pages + 512,
        "{fill} faults at heap_fill, {lost} lost, where the kernel counted {kernel_count} for {pages} pages"
    );
}

/// `record --backing-dir` alone: the heap of a forking program is in files of the directory,
/// one per process: the child copies its parent's heap into its own file, so what it writes
/// into a block it inherited stays out of the parent's.
#[test]
fn record_backing_dir_serves_forked_children() {
    let w = workloads();
    let dir = Dir::new();
    let backing = dir.path().join("b");
    std::fs::create_dir(&backing).unwrap();
    let out = dir
        .fltrace()
        .args(["record", "-q", "--backing-dir", "b", "--"])
        .arg(&w.allocs)
        .args(["forkwrite", "2000"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "parent sees parent, child exited 0\n"
    );
    let files: Vec<(String, u64)> = std::fs::read_dir(&backing)
        .unwrap()
        .flatten()
        .map(|e| {
            (
                e.file_name().to_string_lossy().into_owned(),
                e.metadata().unwrap().len(),
            )
        })
        .collect();
    assert_eq!(files.len(), 2, "parent and child: {files:?}");
    for (name, len) in &files {
        assert!(name.starts_with("heap-"), "{name}");
        assert!(*len >= 4 << 20, "{name}: {len}");
    }
    let refused = dir
        .fltrace()
        .args([
            "record",
            "-q",
            "--backing-dir",
            "b",
            "-L",
            "10",
            "-M",
            "20",
            "--",
        ])
        .arg(&w.allocs)
        .args(["fork", "1"])
        .output()
        .unwrap();
    assert!(!refused.status.success());
    assert!(String::from_utf8_lossy(&refused.stderr).contains("give one of them"));
}

/// `runs --run ID` rendered in headless Chromium (a Debian package, which scripts/setup.sh
/// installs): its script ran (the title and the note are filled in, the canvas sized to the
/// window), the legend names reads, writes and allocations, and the note counts the run's faults
/// as the catalog does.
#[test]
fn run_page_renders_in_headless_chromium() {
    let w = workloads();
    let dir = Dir::new();
    let scan = format!("{} 4 1", w.scan.display());
    ok(&dir.run(&["runs", "-o", "s", "-n", "1", "--", &scan]));
    ok(&dir.run(&["analyze", "s", "-o", "runs.sqlite"]));
    let db = rusqlite::Connection::open(dir.path().join("runs.sqlite")).unwrap();
    let (id, faults): (i64, i64) = db
        .query_row(
            "SELECT id, faults FROM runs WHERE config = 'record'",
            [],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .unwrap();
    ok(&dir.run(&[
        "runs",
        "--run",
        &id.to_string(),
        "runs.sqlite",
        "-o",
        "page.html",
    ]));
    let page = dir.path().join("page.html");
    let chromium = std::process::Command::new("chromium")
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--window-size=1000,700",
            "--dump-dom",
        ])
        .arg(format!("file://{}", page.display()))
        .output()
        .expect("chromium runs (scripts/setup.sh installs it)");
    assert!(chromium.status.success());
    let dom = String::from_utf8_lossy(&chromium.stdout);
    assert!(
        dom.contains(&format!(
            "<h1 id=\"title\">run {id}: scan-4-1 config=record rep=1 ("
        )),
        "{dom}"
    );
    assert!(
        dom.contains(&format!("<span id=\"note\">{faults} page faults</span>")),
        "{dom}"
    );
    let canvas = dom
        .split("<canvas id=\"plot\"")
        .nth(1)
        .and_then(|c| c.split('>').next())
        .expect("the plot's canvas");
    let attribute = |name: &str| -> u32 {
        canvas
            .split(&format!("{name}=\""))
            .nth(1)
            .and_then(|v| v.split('"').next())
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("canvas {name}: {canvas}"))
    };
    assert!(
        attribute("width") > 500 && attribute("height") > 300,
        "{canvas}"
    );
    for legend in ["read</span>", "write</span>", "allocation (site)</span>"] {
        assert!(dom.contains(legend), "legend {legend}");
    }
}

/// A record-mode configuration with a pmem_dir leaves the preloaded library to `fltrace
/// record`: `runs` starts without it (here a fltrace with no library beside it), and the run
/// that needs it fails on its own, recorded, while the series goes on.
#[test]
fn record_mode_pmem_runs_without_the_library_at_hand() {
    let dir = Dir::new();
    // A link to the binary in a directory without the library: found beside neither.
    let bare = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).expect("temp dir");
    let fltrace = bare.path().join("fltrace");
    std::fs::hard_link(env!("CARGO_BIN_EXE_fltrace"), &fltrace).expect("hard link");
    let pmem = dir.path().join("pmem");
    std::fs::create_dir(&pmem).expect("pmem dir");
    std::fs::write(
        dir.path().join("configs.toml"),
        format!(
            "[[config]]\nname = \"dry\"\nmode = \"dry\"\n\n[[config]]\nname = \"pmem\"\npmem_dir = \"{}\"\n",
            pmem.display()
        ),
    )
    .expect("configs");
    let out = std::process::Command::new(&fltrace)
        .current_dir(dir.path())
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .args([
            "runs",
            "-o",
            "s",
            "-n",
            "1",
            "--config",
            "configs.toml",
            "--",
            "true",
        ])
        .output()
        .expect("fltrace runs");
    let stderr = ok(&out);
    assert!(stderr.contains("2 runs done, 1 failed"), "{stderr}");
    let series = dir.path().join("s");
    assert_eq!(
        run_json(&run_dir(&series, "true", "dry", 1))["exit_code"],
        0
    );
    let failed = run_dir(&series, "true", "pmem", 1);
    assert_eq!(run_json(&failed)["exit_code"], 1);
    let said = std::fs::read_to_string(failed.join("stderr.txt")).expect("run's stderr");
    assert!(
        said.contains("libfltrace_preload.so is not beside"),
        "{said}"
    );
    // A dry configuration with a pmem_dir needs it from `runs` itself, and says so at once.
    std::fs::write(
        dir.path().join("dry.toml"),
        format!(
            "[[config]]\nname = \"pmem-dry\"\nmode = \"dry\"\npmem_dir = \"{}\"\n",
            pmem.display()
        ),
    )
    .expect("configs");
    let out = std::process::Command::new(&fltrace)
        .current_dir(dir.path())
        .env_clear()
        .args(["runs", "-o", "s2", "--config", "dry.toml", "--", "true"])
        .output()
        .expect("fltrace runs");
    assert_eq!(out.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("libfltrace_preload.so is not beside"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// `runs --stat` on a series whose second configuration has one run 20 times the others (the
/// wall times of the unit test `a_very_noisy_configuration_stays_above_zero`, written into
/// the runs' `run.json`): the overhead interval, taken on the log scale, stays above zero
/// (the linear one went below it), the same in JSON and in the table.
#[test]
fn runs_stat_interval_of_a_very_noisy_configuration_stays_above_zero() {
    let dir = Dir::new();
    std::fs::write(
        dir.path().join("configs.toml"),
        "[[config]]\nname = \"dry\"\nmode = \"dry\"\n\n[[config]]\nname = \"noisy\"\nmode = \"dry\"\n",
    )
    .unwrap();
    ok(&dir.run(&[
        "runs",
        "-o",
        "series",
        "-n",
        "3",
        "--config",
        "configs.toml",
        "--",
        "true",
    ]));
    let series = dir.path().join("series");
    let times = [("dry", [0.1, 0.11, 0.1]), ("noisy", [0.1, 0.1, 2.0])];
    for (config, walls) in times {
        for (rep, wall) in (1..).zip(walls) {
            let run = run_dir(&series, "true", config, rep);
            let mut record = run_json(&run);
            record["wall_s"] = wall.into();
            std::fs::write(run.join("run.json"), record.to_string()).unwrap();
        }
    }
    ok(&dir.run(&["analyze", "series", "-o", "runs.sqlite"]));
    let stat = dir.run(&["runs", "--stat", "runs.sqlite", "--format", "json"]);
    ok(&stat);
    let stat: Value = serde_json::from_slice(&stat.stdout).unwrap();
    let noisy = stat
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["config"] == "noisy")
        .unwrap_or_else(|| panic!("no noisy row in {stat}"));
    let summary = |walls: &[f64]| fltrace_experiment::stats::summarize(walls).unwrap();
    let expected = fltrace_experiment::stats::ratio_of_means(
        &summary(&times[1].1),
        &summary(&times[0].1),
        0.95,
    )
    .unwrap();
    let overhead = &noisy["overhead"];
    let (ratio, low, high) = (
        overhead["ratio"].as_f64().unwrap(),
        overhead["low"].as_f64().unwrap(),
        overhead["high"].as_f64().unwrap(),
    );
    assert!((ratio - 2.2 / 0.31).abs() < 1e-9, "{noisy}");
    assert_eq!(
        (ratio, Some(low), Some(high)),
        (expected.ratio, expected.low, expected.high),
        "{noisy}"
    );
    assert!(low > 0.0 && low < ratio && ratio < high, "{noisy}");
    // On the log scale the interval is symmetric in ratio terms.
    assert!((low * high - ratio * ratio).abs() < 1e-9, "{noisy}");
    let table = dir.run(&["runs", "--stat", "runs.sqlite"]);
    ok(&table);
    let text = String::from_utf8_lossy(&table.stdout);
    let row = text
        .lines()
        .find(|l| l.contains("noisy"))
        .unwrap_or_else(|| panic!("{text}"));
    // 7.097 (0.174..289.531), where the linear interval went below zero.
    assert!(
        row.contains(&format!("{ratio:.3} ({low:.3}..{high:.3})")),
        "{text}"
    );
}
