//! Exports to the tools people already use (folded stacks, perf script text, pprof), `diff`
//! of two recordings, and every command ending quietly when its output pipe closes.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Stdio};

use super::util::*;

/// `fltrace <args>` in `dir`, checked, its stdout.
fn stdout_of(dir: &Dir, args: &[&str]) -> Vec<u8> {
    let out = dir.run(args);
    assert!(
        out.status.success(),
        "fltrace {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out.stdout
}

/// Folded text as a map from stack to count, checking each line's form.
fn folded_map(text: &str) -> BTreeMap<String, u64> {
    let mut map = BTreeMap::new();
    for line in text.lines() {
        let (stack, count) = line.rsplit_once(' ').expect("`stack count`");
        let count: u64 = count.parse().expect("a count");
        assert!(map.insert(stack.to_owned(), count).is_none(), "{line}");
    }
    map
}

/// The nested workload's faults in collapsed stacks: one stack through main, level1, level2
/// and fill, with exactly as many faults as pages, under the process name; the counts add up
/// to the report's total.
#[test]
fn folded_counts_per_stack() {
    let w = workloads();
    let dir = Dir::new();
    dir.record(&[&w.faults], &["nested", "300"]);
    let folded = folded_map(&String::from_utf8_lossy(&stdout_of(
        &dir,
        &["report", "--format", "folded"],
    )));
    let fill: Vec<(&String, &u64)> = folded
        .iter()
        .filter(|(stack, _)| stack.ends_with(";main;level1;level2;fill"))
        .collect();
    assert_eq!(fill.len(), 1, "{folded:#?}");
    assert_eq!(*fill[0].1, 300);
    assert!(fill[0].0.starts_with("faults;"), "{}", fill[0].0);
    let total: u64 = folded.values().sum();
    assert_eq!(total, dir.report_json(&[])["faults"].as_u64().unwrap_or(0));
    // The same to a file.
    let path = dir.path().join("faults.folded");
    stdout_of(
        &dir,
        &[
            "report",
            "--format",
            "folded",
            "--output",
            path.to_str().expect("utf-8 path"),
        ],
    );
    let from_file = std::fs::read_to_string(&path).expect("folded file");
    assert_eq!(folded_map(&from_file), folded);
}

/// `fltrace script`, collapsed by inferno's perf collapser (the code behind
/// inferno-collapse-perf), gives exactly `--format folded`: stacks and counts, for several
/// threads.
#[test]
fn script_collapses_to_folded() {
    use inferno::collapse::Collapse;
    let w = workloads();
    let dir = Dir::new();
    dir.record(&[&w.faults], &["threads", "3", "40"]);
    let script = stdout_of(&dir, &["script"]);
    let text = String::from_utf8_lossy(&script);
    // perf script's layout: a header per fault, tab-indented frames, a blank line after.
    let first = text.lines().next().expect("a fault");
    assert!(first.starts_with("faults "), "{first}");
    assert!(first.ends_with(" 1 page-faults:"), "{first}");
    let header: Vec<&str> = first.split_whitespace().collect();
    assert!(
        header[1].contains('/') && header[2].ends_with(':'),
        "{first}"
    );
    let frame = text.lines().nth(1).expect("a frame");
    assert!(frame.starts_with('\t') && frame.ends_with(')'), "{frame}");
    assert!(text.ends_with("\n\n"));

    let mut options = inferno::collapse::perf::Options::default();
    options.nthreads = 1;
    let mut collapsed = Vec::new();
    inferno::collapse::perf::Folder::from(options)
        .collapse(&script[..], &mut collapsed)
        .expect("inferno collapses perf script text");
    let collapsed = folded_map(&String::from_utf8_lossy(&collapsed));
    let folded = folded_map(&String::from_utf8_lossy(&stdout_of(
        &dir,
        &["report", "--format", "folded"],
    )));
    // A stripped frame is `lib+0xOFFSET` in folded stacks and `[unknown] (lib)` in perf's
    // script layout, which inferno names by its library: both read as one stripped frame.
    let stripped = |map: &BTreeMap<String, u64>| -> BTreeMap<String, u64> {
        let mut out = BTreeMap::new();
        for (stack, count) in map {
            let frames: Vec<&str> = stack
                .split(';')
                .map(|frame| {
                    let offset = frame
                        .rsplit_once("+0x")
                        .is_some_and(|(_, hex)| u64::from_str_radix(hex, 16).is_ok());
                    let bracketed =
                        frame.starts_with('[') && frame.ends_with(']') && frame != "[truncated]";
                    if offset || bracketed {
                        "[stripped]"
                    } else {
                        frame
                    }
                })
                .collect();
            *out.entry(frames.join(";")).or_insert(0) += count;
        }
        out
    };
    assert_eq!(stripped(&collapsed), stripped(&folded));
    let threads: u64 = folded
        .iter()
        .filter(|(stack, _)| stack.ends_with(";thread_fill"))
        .map(|(_, n)| n)
        .sum();
    assert_eq!(threads, 120);

    // With --addr each header ends with the faulting address.
    let with_addr = stdout_of(&dir, &["script", "--addr"]);
    let first = String::from_utf8_lossy(&with_addr)
        .lines()
        .next()
        .map(str::to_owned)
        .expect("a fault");
    let addr = first.rsplit(' ').next().unwrap_or_default();
    assert!(
        u64::from_str_radix(addr, 16).is_ok_and(|a| a > 0),
        "{first}"
    );
}

/// `go tool pprof` with `args` on `profile`.
fn go_pprof(profile: &Path, args: &[&str]) -> String {
    let home = tempfile::tempdir().expect("temp dir");
    let out = Command::new("go")
        .args(["tool", "pprof"])
        .args(args)
        .arg(profile)
        .env("HOME", home.path())
        .output()
        .expect("go tool pprof runs (scripts/setup.sh installs golang-go)");
    assert!(
        out.status.success(),
        "go tool pprof {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The rows of `go tool pprof -top`: name to flat count.
fn pprof_flat(top: &str) -> BTreeMap<String, u64> {
    top.lines()
        .skip_while(|l| !l.trim_start().starts_with("flat"))
        .skip(1)
        .filter_map(|l| {
            let fields: Vec<&str> = l.split_whitespace().collect();
            let flat = fields.first()?.parse().ok()?;
            Some((fields[5..].join(" "), flat))
        })
        .collect()
}

/// The pprof profile, read by the real consumer: `go tool pprof -top` lists fill with all its
/// faults, as `report --by function` does, the same total, and `-lines` names fill's line.
#[test]
fn pprof_read_by_go_tool_pprof() {
    let w = workloads();
    let dir = Dir::new();
    dir.record(&[&w.faults], &["nested", "300"]);
    let profile = dir.path().join("faults.pb.gz");
    stdout_of(
        &dir,
        &[
            "report",
            "--format",
            "pprof",
            "--output",
            profile.to_str().expect("utf-8 path"),
        ],
    );
    let top = go_pprof(&profile, &["-top"]);
    let flat = pprof_flat(&top);
    let report = dir.report_json(&["--by", "function"]);
    let reported: BTreeMap<String, u64> = groups(&report)
        .map(|g| {
            (
                g["function"].as_str().unwrap_or_default().to_owned(),
                g["count"].as_u64().unwrap_or(0),
            )
        })
        .collect();
    assert_eq!(flat.get("fill"), Some(&300), "{top}");
    assert_eq!(reported.get("fill"), Some(&300));
    assert_eq!(
        flat.values().sum::<u64>(),
        report["faults"].as_u64().unwrap_or(0),
        "{top}"
    );
    assert!(top.contains("Type: faults"), "{top}");

    let lines = pprof_flat(&go_pprof(&profile, &["-lines", "-top"]));
    let fill_line = format!("faults.c:{}", site("faults.c", "fill"));
    let at_fill: Vec<(&String, &u64)> = lines
        .iter()
        .filter(|(name, _)| name.starts_with("fill ") && name.ends_with(&fill_line))
        .collect();
    assert_eq!(at_fill.len(), 1, "{lines:#?}");
    assert_eq!(*at_fill[0].1, 300);
}

/// Rows of a CSV text as maps from column to value (no quoted fields expected).
fn csv_rows(text: &str) -> Vec<BTreeMap<String, String>> {
    let mut lines = text.lines();
    let header: Vec<&str> = lines.next().expect("header").split(',').collect();
    lines
        .map(|l| {
            header
                .iter()
                .zip(l.split(','))
                .map(|(h, v)| (h.to_string(), v.to_string()))
                .collect()
        })
        .collect()
}

/// Two runs of the nested workload, 100 pages then 250: the diff gives the fill line exactly
/// 100 in A, 250 in B, +150 and 2.5x, in CSV and JSON, by line and by function; and ranks it
/// first, as the largest change.
#[test]
fn diff_of_two_recordings() {
    let w = workloads();
    let (a, b) = (Dir::new(), Dir::new());
    a.record(&[&w.faults], &["nested", "100"]);
    b.record(&[&w.faults], &["nested", "250"]);
    let (a_path, b_path) = (
        a.path().to_str().expect("utf-8 path"),
        b.path().to_str().expect("utf-8 path"),
    );
    let fill = site("faults.c", "fill").to_string();

    let csv = String::from_utf8_lossy(&stdout_of(
        &a,
        &["diff", a_path, b_path, "--format", "csv", "--top", "0"],
    ))
    .into_owned();
    assert!(
        csv.starts_with("a,b,delta,ratio,function,file,line,lib\n"),
        "{csv}"
    );
    let rows = csv_rows(&csv);
    let row = &rows[0];
    assert!(row["file"].ends_with("faults.c"), "{csv}");
    assert_eq!(
        (
            &*row["line"],
            &*row["a"],
            &*row["b"],
            &*row["delta"],
            &*row["ratio"]
        ),
        (&*fill, "100", "250", "150", "2.5000")
    );

    let json: serde_json::Value = serde_json::from_slice(&stdout_of(
        &a,
        &[
            "diff", a_path, b_path, "--by", "function", "--format", "json",
        ],
    ))
    .expect("diff prints JSON");
    let row = &json["rows"][0];
    assert_eq!(row["function"], "fill");
    assert_eq!(
        (&row["a"], &row["b"], &row["delta"], &row["ratio"]),
        (
            &serde_json::json!(100),
            &serde_json::json!(250),
            &serde_json::json!(150),
            &serde_json::json!(2.5)
        )
    );
    assert_eq!(json["by"], "function");
    assert!(json["b"]["faults"].as_u64().unwrap_or(0) >= 250);

    // Reversed, the change is negative; the table shows it signed.
    let table = String::from_utf8_lossy(&stdout_of(&a, &["diff", b_path, a_path])).into_owned();
    let first = table.lines().nth(1).expect("a row");
    let fields: Vec<&str> = first.split_whitespace().collect();
    assert_eq!(
        &fields[..5],
        &["1", "250", "100", "-150", "0.40x"],
        "{table}"
    );
    assert!(first.contains(&format!("faults.c:{fill}")), "{table}");

    // By stack: the whole stack matches across the two runs despite address randomisation.
    let stacks = String::from_utf8_lossy(&stdout_of(
        &a,
        &["diff", a_path, b_path, "--by", "stack", "--format", "csv"],
    ))
    .into_owned();
    let row = &csv_rows(&stacks)[0];
    assert_eq!((&*row["a"], &*row["b"]), ("100", "250"), "{stacks}");
    assert!(row["stack"].contains("level2@"), "{stacks}");
}

/// Runs `fltrace <args>` with stdout into a pipe that is closed after `lines` lines (0: before
/// anything is read), and checks it ends without a panic and with success.
fn ends_quietly(dir: &Dir, args: &[&str], lines: usize) {
    let mut child = dir
        .fltrace()
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("fltrace runs");
    let mut stdout = BufReader::new(child.stdout.take().expect("stdout"));
    for _ in 0..lines {
        let mut line = Vec::new();
        let _ = stdout.read_until(b'\n', &mut line);
    }
    drop(stdout);
    let out = child.wait_with_output().expect("fltrace ends");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!stderr.contains("panicked"), "fltrace {args:?}: {stderr}");
    assert!(out.status.success(), "fltrace {args:?}: {stderr}");
}

/// Every command that writes to stdout ends quietly, with success, when the pipe closes: after
/// the first line, and before anything was read.
#[test]
fn closed_pipe_ends_quietly() {
    let w = workloads();
    let dir = Dir::new();
    dir.record(&[&w.faults], &["nested", "3000"]);
    let allocs = Dir::new();
    let recorded = allocs
        .fltrace()
        .args(["record", "-q", "--allocs", "--"])
        .arg(&w.allocs)
        .arg("sites")
        .output()
        .expect("fltrace runs");
    assert!(recorded.status.success(), "{recorded:?}");
    let here = dir.path().to_str().expect("utf-8 path");
    let commands: Vec<(&Dir, Vec<&str>)> = vec![
        (&dir, vec!["report"]),
        (
            &dir,
            vec!["report", "--by", "stack", "--top", "0", "--format", "csv"],
        ),
        (
            &dir,
            vec!["report", "--by", "stack", "--top", "0", "--format", "json"],
        ),
        (&dir, vec!["report", "--format", "folded"]),
        (&dir, vec!["report", "--format", "pprof"]),
        (&dir, vec!["script"]),
        (&dir, vec!["diff", here, here, "--top", "0"]),
        (&dir, vec!["heatmap", "--terminal"]),
        (&dir, vec!["heatmap"]),
        (&dir, vec!["visualize"]),
        (&dir, vec!["archive"]),
        (&dir, vec!["count", "--list"]),
        (&allocs, vec!["report", "--allocs"]),
        (&allocs, vec!["report", "--leaks"]),
        (&allocs, vec!["report", "--by", "alloc-site"]),
    ];
    for (dir, args) in &commands {
        ends_quietly(dir, args, 1);
        ends_quietly(dir, args, 0);
    }
    let faults = w.faults.to_str().expect("utf-8 path");
    let wss = [
        "wss",
        "--format",
        "csv",
        "--interval",
        "10ms",
        "--",
        faults,
        "phases",
        "100",
    ];
    ends_quietly(&dir, &wss, 1);
    ends_quietly(&dir, &wss, 0);
}
