//! `fltrace top`: plain tables that name the faulting function at the rate the program
//! counts itself, totals `report` gives again, the full-screen view driven as a person
//! drives it (in tmux), attaching, and far memory's figures.

use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use super::util::*;

/// One `top --batch` table as printed.
#[derive(Debug)]
struct Table {
    /// `faults N` of the headline.
    faults: u64,
    /// `(faults/s, total, function, file:line)` of each row.
    rows: Vec<(f64, u64, String, String)>,
    /// The headline's lines.
    headline: Vec<String>,
}

/// The tables of `top --batch`'s stdout.
fn tables(stdout: &str) -> Vec<Table> {
    let mut tables = Vec::new();
    for block in stdout.split("fltrace top: interval ").skip(1) {
        let mut lines = block.lines().skip(1);
        let mut headline = Vec::new();
        for line in lines.by_ref() {
            if line.trim_start().starts_with('#') {
                break;
            }
            headline.push(line.to_owned());
        }
        let faults = headline[0]
            .split("  ")
            .find_map(|f| f.strip_prefix("faults "))
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("no fault count in {:?}", headline[0]));
        let rows = lines
            .take_while(|l| !l.trim().is_empty() && !l.trim_start().starts_with("and "))
            .map(|l| {
                let f: Vec<&str> = l.split_whitespace().collect();
                assert!(f.len() >= 8, "a row of 8 columns: {l:?}");
                (
                    f[1].parse().expect("a rate"),
                    f[2].parse().expect("a total"),
                    f[5].to_owned(),
                    f[6].to_owned(),
                )
            })
            .collect();
        tables.push(Table {
            faults,
            rows,
            headline,
        });
    }
    tables
}

/// The rates `loop` printed of itself, `loop: N pages/s`.
fn own_rates(stderr: &str) -> Vec<f64> {
    stderr
        .lines()
        .filter_map(|l| l.strip_prefix("loop: "))
        .filter_map(|l| l.strip_suffix(" pages/s"))
        .map(|n| n.parse().expect("a rate"))
        .collect()
}

/// Three one-second tables of `loop`: each names `loop_touch` at its line with a rate within
/// 20% of the rate the loop counts itself in that second, the last one ends the loop and
/// comes once the recording is finished, and `report` of the recording kept gives its total.
#[test]
fn batch_tables_name_the_site_at_the_programs_own_rate() {
    let dir = Dir::new();
    let program = build_c_workload(dir.path(), "loop.c");
    let line = site("loop.c", "loop_touch");
    let started = Instant::now();
    let out = dir
        .fltrace()
        .args(["top", "--batch", "-d", "1", "-n", "3", "-o", "rec", "--"])
        .arg(&program)
        .arg("5")
        .output()
        .expect("fltrace runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stdout}\n{stderr}");
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "-n 3 stops the 5-second loop after three intervals"
    );
    let tables = tables(&stdout);
    assert_eq!(tables.len(), 3, "{stdout}");
    // Table i covers about the loop's second i (both clocks start with the loop, within a
    // tenth of a second). Not the last one: it holds what was left when the stop came, and
    // faults that happened before its start but reached the view after it (a lag of a
    // fraction of a second under load); its total is checked against `report` below.
    let own_rates = own_rates(&stderr);
    assert!(own_rates.len() >= 2, "{stderr}");
    for (i, table) in tables.iter().enumerate() {
        let own = own_rates[i.min(own_rates.len() - 1)];
        let (rate, _, _, _) = table
            .rows
            .iter()
            .find(|r| r.2 == "loop_touch" && r.3 == format!("loop.c:{line}"))
            .unwrap_or_else(|| {
                panic!(
                    "table {} names loop_touch at loop.c:{line}:\n{stdout}",
                    i + 1
                )
            });
        if i + 1 < tables.len() {
            assert!(
                (rate - own).abs() <= own * 0.2,
                "table {}: {rate} faults/s, the loop's own {own} pages/s:\n{stdout}\n{stderr}",
                i + 1
            );
        }
    }
    let last = tables.last().expect("a table");
    let last_title = stdout
        .lines()
        .rfind(|l| l.starts_with("fltrace top: interval "))
        .expect("a title");
    assert!(last_title.ends_with("the recording finished"), "{stdout}");
    let report = {
        let out = dir.run(&["report", "-d", "rec", "--format", "json", "--top", "0"]);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        serde_json::from_slice::<serde_json::Value>(&out.stdout).expect("JSON")
    };
    assert_eq!(report["faults"], last.faults, "{stdout}");
    let at_site = groups(&report)
        .find(|g| g["function"] == "loop_touch")
        .expect("report names loop_touch");
    let shown_total = last
        .rows
        .iter()
        .find(|r| r.2 == "loop_touch")
        .map(|r| r.1)
        .expect("the last table names loop_touch");
    assert_eq!(at_site["count"], shown_total, "{stdout}");
}

/// A view made slow on purpose (`FLTRACE_TOP_SLOW_VIEW_MS`: it sleeps after each batch, and
/// the channel holds 4) falls behind: the headline says how many fault updates it was not
/// given, its count is short by at most as many, and the recording kept loses none: `report`
/// counts every page the loop touched.
#[test]
fn a_view_that_falls_behind_says_what_it_dropped_and_the_recording_is_whole() {
    let dir = Dir::new();
    let program = build_c_workload(dir.path(), "loop.c");
    let out = dir
        .fltrace()
        .env("FLTRACE_TOP_SLOW_VIEW_MS", "300")
        .args(["top", "--batch", "-d", "1", "-o", "rec", "--"])
        .arg(&program)
        .arg("3")
        .output()
        .expect("fltrace runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stdout}\n{stderr}");
    let touched: u64 = stderr
        .lines()
        .find_map(|l| l.strip_prefix("loop: ")?.strip_suffix(" pages in all"))
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("the loop's total:\n{stderr}"));
    let tables = tables(&stdout);
    let last = tables.last().expect("a table");
    let dropped: u64 = last.headline[0]
        .split("  ")
        .find_map(|f| {
            f.strip_prefix("view dropped ")?
                .strip_suffix(" fault updates")
        })
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("the headline says what the view dropped:\n{stdout}"));
    assert!(dropped > 0, "{stdout}");
    assert!(
        last.faults < touched && last.faults + dropped >= touched,
        "{} faults shown, {dropped} dropped, {touched} pages touched:\n{stdout}",
        last.faults
    );
    let out = dir.run(&["report", "-d", "rec", "--format", "json", "--top", "0"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
    let at_site = groups(&report)
        .find(|g| g["function"] == "loop_touch")
        .expect("report names loop_touch");
    assert_eq!(at_site["count"], touched, "{stdout}\n{stderr}");
}

/// `fltrace top TOP_ARGS -p PID` (with `env`) attached to `program ARGS` started first; its
/// output, and whether the program still ran when top ended (it is killed then).
fn top_attached(
    dir: &Dir,
    env: &[(&str, &str)],
    top_args: &[&str],
    program: &Path,
    args: &[&str],
) -> (Output, bool) {
    let mut child = Command::new(program)
        .args(args)
        .stderr(Stdio::null())
        .spawn()
        .expect("the program starts");
    let out = dir
        .fltrace()
        .envs(env.iter().copied())
        .arg("top")
        .args(top_args)
        .args(["-p", &child.id().to_string()])
        .output()
        .expect("fltrace runs");
    let alive = child.try_wait().expect("wait").is_none();
    let _ = child.kill();
    let _ = child.wait();
    (out, alive)
}

/// `top --batch -p PID` of a running loop names its site, and leaves it running.
#[test]
fn batch_attached_to_a_running_process_leaves_it_running() {
    let dir = Dir::new();
    let program = build_c_workload(dir.path(), "loop.c");
    let (out, alive) = top_attached(
        &dir,
        &[],
        &["--batch", "-d", "1", "-n", "2"],
        &program,
        &["30"],
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let tables = tables(&stdout);
    assert_eq!(tables.len(), 2, "{stdout}");
    for table in &tables {
        assert!(
            table.rows.iter().any(|r| r.2 == "loop_touch" && r.0 > 0.0),
            "{stdout}"
        );
    }
    assert!(alive, "the attached loop runs on after top");
}

/// Under `-L`, the last table's local and far memory are the stats file's last figures.
#[test]
fn far_memory_figures_are_the_stats_files() {
    let dir = Dir::new();
    let w = workloads();
    let out = dir
        .fltrace()
        .args([
            "top", "--batch", "-d", "0.5", "-o", "rec", "-L=16", "-M=256", "--",
        ])
        .arg(&w.scan)
        .args(["64", "6"])
        .output()
        .expect("fltrace runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let tables = tables(&stdout);
    let last = tables.last().expect("a table");
    let figures = last
        .headline
        .iter()
        .find(|l| l.starts_with("local "))
        .unwrap_or_else(|| panic!("far memory in the headline:\n{stdout}"));
    let pids = {
        let rec = dir.path().join("rec");
        let mut pids: Vec<u32> = std::fs::read_dir(&rec)
            .expect("the recording")
            .filter_map(|e| {
                let name = e.ok()?.file_name().into_string().ok()?;
                name.strip_prefix("fltrace-data-stats-")?
                    .strip_suffix(".out")?
                    .parse()
                    .ok()
            })
            .collect();
        pids.sort_unstable();
        pids
    };
    assert_eq!(pids.len(), 1);
    let stats = fltrace_trace::files::stats(&dir.path().join("rec"), pids[0]);
    let value = |name| {
        fltrace_trace::stats::last_value(&stats, name)
            .expect("stats read")
            .unwrap_or_else(|| panic!("{name} in the stats file"))
    };
    let (local, far) = (value("memory_local"), value("memory_far"));
    assert!(far > 0, "64 MB scanned with 16 MB local leaves pages far");
    let mb = |bytes: u64| format!("{:.1} MiB", bytes as f64 / 1_048_576.0);
    assert!(
        figures.starts_with(&format!("local {}  far {}  ", mb(local), mb(far))),
        "{figures:?}: the stats file says local {local}, far {far}"
    );
}

/// tmux: a session of its own, removed when dropped.
struct Tmux(String);

impl Tmux {
    fn start(dir: &Path, command: &str) -> Tmux {
        let name = format!("fltrace-top-{}", std::process::id());
        let status = Command::new("tmux")
            .args([
                "new-session",
                "-d",
                "-s",
                &name,
                "-x",
                "160",
                "-y",
                "40",
                "-c",
            ])
            .arg(dir)
            .arg(command)
            .status()
            .expect("tmux runs");
        assert!(status.success());
        Tmux(name)
    }

    fn keys(&self, keys: &str) {
        let status = Command::new("tmux")
            .args(["send-keys", "-t", &self.0, keys])
            .status()
            .expect("tmux runs");
        assert!(status.success());
    }

    fn screen(&self) -> String {
        let out = Command::new("tmux")
            .args(["capture-pane", "-p", "-t", &self.0])
            .output()
            .expect("tmux runs");
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// The screen once `wanted` holds of it (within 20 s).
    fn screen_when(&self, wanted: impl Fn(&str) -> bool) -> String {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let screen = self.screen();
            if wanted(&screen) || Instant::now() > deadline {
                return screen;
            }
            std::thread::sleep(Duration::from_millis(200));
        }
    }
}

impl Drop for Tmux {
    fn drop(&mut self) {
        let _ = Command::new("tmux")
            .args(["kill-session", "-t", &self.0])
            .status();
    }
}

/// The full screen as a person sees it: the loop's function after 3 s; `s` sorts by total,
/// `v` shows processes (the loop's pid among them), `q` quits with status 0 and the loop is
/// gone; the terminal is the shell's again.
#[test]
fn the_screen_shows_the_site_and_answers_keys() {
    let dir = Dir::new();
    let program = build_c_workload(dir.path(), "loop.c");
    let status_file = dir.path().join("status");
    let command = format!(
        "env -i PATH=\"$PATH\" TERM=xterm-256color {} top -- {} 30; echo status=$? > {}; sleep 60",
        env!("CARGO_BIN_EXE_fltrace"),
        program.display(),
        status_file.display()
    );
    let tmux = Tmux::start(dir.path(), &command);
    std::thread::sleep(Duration::from_secs(3));
    let screen = tmux.screen_when(|s| s.contains("loop_touch"));
    assert!(screen.contains("loop_touch"), "{screen}");
    assert!(
        screen.contains("view: call sites") && screen.contains("sort: rate"),
        "{screen}"
    );
    let line = site("loop.c", "loop_touch");
    assert!(screen.contains(&format!("loop.c:{line}")), "{screen}");

    tmux.keys("s");
    let screen = tmux.screen_when(|s| s.contains("sort: total"));
    assert!(screen.contains("sort: total"), "{screen}");
    tmux.keys("v");
    let screen = tmux.screen_when(|s| s.contains("view: processes"));
    assert!(screen.contains("view: processes"), "{screen}");
    assert!(
        !screen.contains("loop_touch"),
        "processes, not sites: {screen}"
    );
    // The loop's row: `#  faults/s  total  kind  type  loop  PID`.
    let pid: u32 = screen
        .lines()
        .find_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            (f.len() == 7 && f[5] == "loop")
                .then(|| f[6].parse().ok())
                .flatten()
        })
        .unwrap_or_else(|| panic!("the loop's process row: {screen}"));
    assert!(Path::new(&format!("/proc/{pid}")).exists());

    tmux.keys("q");
    let deadline = Instant::now() + Duration::from_secs(30);
    while !status_file.exists() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(100));
    }
    let status = std::fs::read_to_string(&status_file).expect("top ended");
    assert_eq!(status.trim(), "status=0");
    let gone = !Path::new(&format!("/proc/{pid}")).exists()
        || std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .is_ok_and(|s| !s.contains("(loop)"));
    assert!(gone, "q ends the command fltrace started");
    let screen = tmux.screen();
    assert!(
        !screen.contains("view: processes"),
        "the shell's screen again: {screen}"
    );
}

/// One row of a `top --batch` allocation table: `(allocs/s, allocs, live, blocks,
/// function, file:line)`.
type AllocRow = (f64, u64, String, u64, String, String);

/// The allocation table of each interval of `top --batch --allocs`, with the headline's
/// allocation line.
fn alloc_tables(stdout: &str) -> Vec<(String, Vec<AllocRow>)> {
    let mut tables = Vec::new();
    for block in stdout.split("fltrace top: interval ").skip(1) {
        let headline = block
            .lines()
            .find(|l| l.starts_with("allocs/s "))
            .unwrap_or_else(|| panic!("an allocation headline: {block}"))
            .to_owned();
        let mut lines = block.lines().skip_while(|l| {
            !(l.trim_start().starts_with('#') && l.contains("allocs/s") && l.contains("blocks"))
        });
        assert!(lines.next().is_some(), "an allocation table: {block}");
        let rows = lines
            .take_while(|l| !l.trim().is_empty() && !l.trim_start().starts_with("and "))
            .map(|l| {
                // `#  allocs/s  allocs  live (2 words)  blocks  function  file:line  lib`
                let f: Vec<&str> = l.split_whitespace().collect();
                assert!(f.len() >= 8, "a row of 8 columns: {l:?}");
                (
                    f[1].parse().expect("a rate"),
                    f[2].parse().expect("a count"),
                    format!("{} {}", f[3], f[4]),
                    f[5].parse().expect("a count of blocks"),
                    f[6].to_owned(),
                    f[7].to_owned(),
                )
            })
            .collect();
        tables.push((headline, rows));
    }
    tables
}

/// Under `--allocs`, three one-second tables of a program that allocates without end at one
/// line, keeping a tenth: each names the allocating function at that line with allocations
/// per second within 20% of the program's own count of that second, and the blocks alive
/// that it keeps (one it frees the next instant may be caught alive) at its block size;
/// `report --allocs` of the recording kept gives the last table's allocations and, as leaks,
/// its blocks and bytes alive, site by site and in all.
#[test]
fn batch_tables_show_allocations_by_site_at_the_programs_own_rate() {
    let dir = Dir::new();
    let w = workloads();
    let line = site("allocs.c", "steady_alloc");
    let out = dir
        .fltrace()
        .env("COLUMNS", "200")
        .args([
            "top", "--batch", "-d", "1", "-n", "3", "--allocs", "-o", "rec", "--",
        ])
        .arg(&w.allocs)
        .args(["steady", "0"])
        .output()
        .expect("fltrace runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stdout}\n{stderr}");
    let tables = alloc_tables(&stdout);
    assert_eq!(tables.len(), 3, "{stdout}");
    let own_rates: Vec<f64> = stderr
        .lines()
        .filter_map(|l| l.strip_prefix("allocs: "))
        .filter_map(|l| l.strip_suffix(" allocs/s"))
        .map(|n| n.parse().expect("a rate"))
        .collect();
    assert!(own_rates.len() >= 2, "{stderr}");
    const SIZE: u64 = 100;
    let place = format!("allocs.c:{line}");
    let at_site = |rows: &[AllocRow]| -> AllocRow {
        rows.iter()
            .find(|r| r.4 == "steady_alloc" && r.5 == place)
            .cloned()
            .unwrap_or_else(|| panic!("steady_alloc at {place}:\n{stdout}"))
    };
    for (i, (headline, rows)) in tables.iter().enumerate() {
        assert!(headline.ends_with("allocs lost 0"), "{headline}");
        let own = own_rates[i.min(own_rates.len() - 1)];
        let (rate, allocs, live, blocks, _, _) = at_site(rows);
        assert!(
            (rate - own).abs() <= own * 0.2,
            "table {}: {rate} allocs/s, the program's own {own}:\n{stdout}\n{stderr}",
            i + 1
        );
        // Every tenth block from the first is kept.
        let kept = allocs.div_ceil(10);
        assert!(
            blocks == kept || blocks == kept + 1,
            "table {}: {blocks} blocks alive of {allocs} allocations:\n{stdout}",
            i + 1
        );
        assert_eq!(
            live,
            fltrace_render::table::bytes(blocks * SIZE),
            "{stdout}"
        );
    }
    let (last_headline, last_rows) = tables.last().expect("a table");
    let report = {
        let out = dir.run(&[
            "report", "-d", "rec", "--allocs", "--format", "csv", "--top", "0",
        ]);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        csv_rows(&String::from_utf8_lossy(&out.stdout))
    };
    let number = |row: &std::collections::HashMap<String, String>, column: &str| -> u64 {
        row[column].parse().expect("a number")
    };
    let row = report
        .iter()
        .find(|r| r["function"] == "steady_alloc" && r["line"] == line.to_string())
        .unwrap_or_else(|| panic!("report names steady_alloc: {report:#?}"));
    let (_, allocs, live, blocks, _, _) = at_site(last_rows);
    assert_eq!(number(row, "allocs"), allocs, "{stdout}");
    assert_eq!(number(row, "leaked_allocs"), blocks, "{stdout}");
    assert_eq!(number(row, "leaked_bytes"), blocks * SIZE, "{stdout}");
    assert_eq!(live, fltrace_render::table::bytes(blocks * SIZE));
    // In all: the headline's allocations and blocks alive are the report's sums.
    let sum = |column| report.iter().map(|r| number(r, column)).sum::<u64>();
    assert!(
        last_headline.starts_with("allocs/s ")
            && last_headline.contains(&format!("  allocs {}  ", sum("allocs")))
            && last_headline.contains(&format!(" in {} blocks", sum("leaked_allocs"))),
        "{last_headline}: the report's {} allocations, {} alive at the end",
        sum("allocs"),
        sum("leaked_allocs")
    );
    // The rows are those sites, each as the report has it.
    for (_, allocs, _, blocks, function, place) in last_rows {
        // Sites with a line (the others are `??`); heap and mappings of one line are
        // apart in the report.
        let Some((file, line)) = place.rsplit_once(':') else {
            continue;
        };
        let rows: Vec<_> = report
            .iter()
            .filter(|r| {
                &r["function"] == function && r["file"].ends_with(file) && r["line"] == line
            })
            .collect();
        assert!(
            !rows.is_empty(),
            "report row of {function} {place}: {report:#?}"
        );
        let of = |column| rows.iter().map(|r| number(r, column)).sum::<u64>();
        assert_eq!(
            (of("allocs"), of("leaked_allocs")),
            (*allocs, *blocks),
            "{function} {place}"
        );
    }
}

/// Stacks 2,000 calls deep, many of them new (the recursion's stack growth faults at every
/// depth): the view names most by their first frames, from a cache, yet each site it shows
/// has the function, `file:line` and total that `report` gives of the recording.
#[test]
fn deep_stacks_named_by_their_first_frames_have_the_reports_sites() {
    let dir = Dir::new();
    let w = workloads();
    let out = dir
        .fltrace()
        .env("COLUMNS", "250")
        .args(["top", "--batch", "-d", "1", "-o", "rec", "--"])
        .arg(&w.deep_c)
        .args(["64", "2000", "0", "paths"])
        .output()
        .expect("fltrace runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let tables = tables(&stdout);
    let last = tables.last().expect("a table");
    let report = {
        let out = dir.run(&["report", "-d", "rec", "--format", "json", "--top", "0"]);
        assert!(out.status.success());
        serde_json::from_slice::<serde_json::Value>(&out.stdout).expect("JSON")
    };
    assert_eq!(report["faults"], last.faults, "{stdout}");
    let line = site("deep.c", "deep_touch");
    let touch = last
        .rows
        .iter()
        .find(|r| r.3 == format!("deep.c:{line}"))
        .unwrap_or_else(|| panic!("the last table names deep.c:{line}:\n{stdout}"));
    assert_eq!(touch.1, 64, "every page written at deep_touch:\n{stdout}");
    let mut checked = 0;
    for (_, total, function, place) in &last.rows {
        let Some((file, line)) = place.rsplit_once(':') else {
            continue;
        };
        let line: u64 = line.parse().expect("a line");
        let count: u64 = groups(&report)
            .filter(|g| {
                g["function"] == function.as_str()
                    && g["file"].as_str().is_some_and(|f| f.ends_with(file))
                    && g["line"] == line
            })
            .map(|g| g["count"].as_u64().unwrap_or(0))
            .sum();
        assert_eq!(count, *total, "{function} {place}:\n{stdout}");
        checked += 1;
    }
    assert!(
        last.rows.iter().any(|r| r.2 == "descend" && r.1 > 0),
        "the recursion's own stack faults, in descend:\n{stdout}"
    );
    assert!(checked >= 2, "{stdout}");
}

/// `top --batch --allocs -p PID` of a running program that allocates without end at one
/// line: the uprobes' calls are shown live, so each of three one-second tables names the
/// allocating function at that line with allocations per second, and the last table's
/// allocations there and in all are those `report --allocs` gives of the recording kept.
#[test]
fn batch_tables_show_the_allocations_of_an_attached_process_live() {
    let dir = Dir::new();
    let w = workloads();
    let line = site("allocs.c", "steady_alloc");
    let (out, alive) = top_attached(
        &dir,
        &[("COLUMNS", "200")],
        &["--batch", "-d", "1", "-n", "3", "--allocs", "-o", "rec"],
        &w.allocs,
        &["steady", "60"],
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stdout}\n{stderr}");
    assert!(alive, "the attached program runs on after top");
    assert!(!stderr.contains("not shown live"), "{stderr}");
    let tables = alloc_tables(&stdout);
    assert_eq!(tables.len(), 3, "{stdout}");
    let place = format!("allocs.c:{line}");
    let at_site = |rows: &[AllocRow]| -> AllocRow {
        rows.iter()
            .find(|r| r.4 == "steady_alloc" && r.5 == place)
            .cloned()
            .unwrap_or_else(|| panic!("steady_alloc at {place}:\n{stdout}\n{stderr}"))
    };
    for (i, (_, rows)) in tables.iter().enumerate() {
        let (rate, _, _, _, _, _) = at_site(rows);
        assert!(
            rate > 0.0,
            "table {}: allocations per second:\n{stdout}",
            i + 1
        );
    }
    let out = dir.run(&[
        "report", "-d", "rec", "--allocs", "--format", "csv", "--top", "0",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let report = csv_rows(&String::from_utf8_lossy(&out.stdout));
    let number = |row: &std::collections::HashMap<String, String>, column: &str| -> u64 {
        row[column].parse().expect("a number")
    };
    let row = report
        .iter()
        .find(|r| r["function"] == "steady_alloc" && r["line"] == line.to_string())
        .unwrap_or_else(|| panic!("report names steady_alloc: {report:#?}"));
    let (last_headline, last_rows) = tables.last().expect("a table");
    let (_, allocs, _, blocks, _, _) = at_site(last_rows);
    assert_eq!(number(row, "allocs"), allocs, "{stdout}");
    assert_eq!(number(row, "leaked_allocs"), blocks, "{stdout}");
    let sum = report.iter().map(|r| number(r, "allocs")).sum::<u64>();
    assert!(
        last_headline.contains(&format!("  allocs {sum}  ")),
        "{last_headline}: the report's {sum} allocations"
    );
}
