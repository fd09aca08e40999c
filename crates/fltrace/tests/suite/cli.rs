//! The original tool's commands and files, and what a user sees.

use std::path::Path;

use super::util::*;

/// The seed's option syntax, `-L=140` and `-L 140`, is accepted (not yet enforced).
#[test]
fn original_option_syntax_is_accepted() {
    let w = workloads();
    let dir = Dir::new();
    for args in [&["-L=140", "-M=1000"][..], &["-L", "140", "-M", "1000"][..]] {
        let out = dir
            .fltrace()
            .arg("record")
            .args(args)
            .arg("--")
            .arg(&w.faults)
            .args(["nested", "3"])
            .output()
            .expect("runs");
        assert!(
            out.status.success(),
            "{args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

/// The stats file has the original's lines, so the seed's grep finds memory_used, and lost is 0.
#[test]
fn stats_file_serves_the_seeds_grep() {
    let w = workloads();
    let dir = Dir::new();
    dir.record(&[&w.faults], &["nested", "2000"]);
    let pid = dir.pids("stats", "out")[0];
    let text =
        std::fs::read_to_string(fltrace_trace::files::stats(dir.path(), pid)).expect("stats");
    let line = text.lines().last().expect("a line");
    let (time, counters) = fltrace_trace::stats::parse_line(line).expect("stats line format");
    assert!(time > 1_600_000_000, "unix time first");
    let get = |n: &str| counters.iter().find(|(k, _)| k == n).map(|(_, v)| *v);
    // 2000 pages written: peak resident memory is at least that.
    assert!(get("memory_used").unwrap_or(0) >= 2000 * 4096, "{line}");
    assert_eq!(get("lost"), Some(0));
    assert!(get("faults").unwrap_or(0) >= 2000);
    let maps =
        std::fs::read_to_string(fltrace_trace::files::procmaps(dir.path(), pid)).expect("procmaps");
    assert!(
        maps.lines()
            .any(|l| l.ends_with("/faults") && l.contains(" r-xp ")),
        "{maps}"
    );
}

/// report writes the original CSV report file and prints the table with the coverage line.
#[test]
fn report_writes_original_csv_and_table() {
    let w = workloads();
    let dir = Dir::new();
    dir.record(&[&w.faults], &["nested", "100"]);
    let out = dir.run(&["report"]);
    assert!(out.status.success());
    let table = String::from_utf8_lossy(&out.stdout);
    let fill = format!("faults.c:{}", site("faults.c", "fill"));
    assert!(
        table
            .lines()
            .nth(1)
            .is_some_and(|l| l.contains(&fill) && l.contains(" 100 ")),
        "{table}"
    );
    assert!(
        table.contains("code locations cover 95% of faults"),
        "{table}"
    );

    let pid = dir.pids("faults", "parquet")[0];
    let csv = std::fs::read_to_string(fltrace_trace::files::path(dir.path(), "report", pid, "out"))
        .expect("report file");
    let mut lines = csv.lines();
    assert_eq!(
        lines.next(),
        Some("ips,flags,count,percent,op,type,lib,code")
    );
    let top = lines.next().expect("a row");
    let fields: Vec<&str> = top.split(',').collect();
    assert_eq!(fields[1], "33", "write + zero page flags: {top}");
    assert_eq!(fields[2], "100");
    assert_eq!((fields[4], fields[5]), ("write", "zero"));
    let innermost = fields[7].split('|').next().unwrap_or("");
    assert!(innermost.ends_with(&format!("/{fill}")), "{top}");
}

/// `--by line --format csv` has count, function, file and line columns.
#[test]
fn line_csv_columns() {
    let w = workloads();
    let dir = Dir::new();
    dir.record(&[&w.faults], &["nested", "50"]);
    let out = dir.run(&["report", "--by", "line", "--format", "csv"]);
    let text = String::from_utf8_lossy(&out.stdout);
    let mut lines = text.lines();
    let header: Vec<&str> = lines.next().expect("header").split(',').collect();
    let col = |name: &str| {
        header
            .iter()
            .position(|h| *h == name)
            .unwrap_or_else(|| panic!("no {name} column"))
    };
    let row: Vec<&str> = lines.next().expect("row").split(',').collect();
    assert_eq!(row[col("count")], "50");
    assert_eq!(row[col("function")], "fill");
    assert!(row[col("file")].ends_with("faults.c"));
    assert_eq!(row[col("line")], site("faults.c", "fill").to_string());
}

/// visualize writes both flamegraphs: frames named by function under the process's name,
/// each tooltip adding the line and the library, the program's own frames green, the leaves
/// coloured by kind; `--label line|both` draw the other forms.
#[test]
fn visualize_writes_flamegraphs() {
    let w = workloads();
    let dir = Dir::new();
    dir.record(&[&w.faults], &["nested", "100"]);
    let out = dir.run(&["visualize"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let pid = dir.pids("faults", "parquet")[0];
    let line = site("faults.c", "fill");
    let svg_of = |kind: &str| {
        std::fs::read_to_string(fltrace_trace::files::path(dir.path(), kind, pid, "svg"))
            .expect("svg")
    };
    // The fill of the frame whose tooltip starts with `title`, as `rgb(r,g,b)` figures.
    let fill_of = |svg: &str, title: &str| -> Vec<u32> {
        let at = svg.find(title).unwrap_or_else(|| panic!("no {title}"));
        let fill = svg[at..].find("fill=\"rgb(").expect("a fill") + at + 10;
        let end = svg[fill..].find(')').expect("rgb(...)") + fill;
        svg[fill..end]
            .split(',')
            .map(|v| v.parse().expect("a number"))
            .collect()
    };
    for kind in ["flamegraph", "flamegraph-alloc"] {
        let svg = svg_of(kind);
        // The loader's and libc's faults are drawn too: 100 of fill's among them.
        let title = svg
            .find("<title>fill (100 faults, ")
            .expect("fill's tooltip");
        let tooltip = &svg[title..title + svg[title..].find("</title>").expect("closed")];
        assert!(
            tooltip.ends_with(&format!("%)\nfaults.c:{line} in faults")),
            "{kind}: {tooltip}"
        );
        // The process's name is the root, which every fault is under.
        let root = svg.find("<title>faults (").expect("root");
        assert!(svg[root..].starts_with("<title>faults (") && svg[root..].contains("100.00%)"));
        assert!(!svg.contains("(1 faults"), "{kind}: one fault is singular");
        assert!(
            !svg.contains("faults|"),
            "{kind} names the library in a label"
        );
        let leaf = fill_of(&svg, "<title>[write] (100 faults");
        assert_eq!(leaf, [255, 0, 0], "write leaf is red");
        let fill = fill_of(&svg, "<title>fill (");
        assert!(
            fill[1] > fill[0] && fill[1] > fill[2],
            "the program's fill is green: {fill:?}"
        );
    }
    assert!(dir.run(&["visualize", "--label", "line"]).status.success());
    let svg = svg_of("flamegraph");
    assert!(
        svg.contains(&format!("<title>faults.c:{line} (100 faults, "))
            && svg.contains(&format!("%)\nfill\nfaults.c:{line} in faults</title>")),
        "--label line"
    );
    assert!(dir.run(&["visualize", "--label", "both"]).status.success());
    assert!(
        svg_of("flamegraph").contains(&format!("<title>fill faults.c:{line} (100 faults")),
        "--label both"
    );
}

/// A recording of several processes also gets one flamegraph of them all, rooted by their
/// names as `report --by comm` counts them: `sh`, and the two `faults` it ran under one root
/// holding fill's 10 faults and read_pages' 5.
#[test]
fn visualize_draws_every_process_rooted_by_name() {
    let w = workloads();
    let dir = Dir::new();
    let faults = w.faults.to_str().expect("utf-8 path");
    let script = format!("{faults} nested 10; {faults} read 5");
    dir.record(&[Path::new("sh")], &["-c", &script]);
    let out = dir.run(&["visualize"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let listed = String::from_utf8_lossy(&out.stdout);
    let path = listed
        .lines()
        .find(|l| l.contains("fltrace-data-flamegraph-processes-"))
        .unwrap_or_else(|| panic!("no graph of every process in {listed}"));
    let svg = std::fs::read_to_string(dir.path().join(path)).expect("svg");
    let by_comm = dir.report_json(&["--by", "comm"]);
    let groups = by_comm["groups"].as_array().expect("groups");
    assert_eq!(groups.len(), 2, "{by_comm}");
    for group in groups {
        let root = format!(
            "<title>{} ({} faults, ",
            group["comm"].as_str().expect("comm"),
            group["count"]
        );
        assert!(svg.contains(&root), "no {root}");
    }
    assert!(svg.contains("<title>fill (10 faults, "));
    assert!(svg.contains("<title>read_pages (5 faults, "));
}

/// `report -g` prints the call tree as perf does: by caller, `main`'s branch to `level1`
/// then `level2` and `fill` aligned under it (each takes all its caller's faults); by callee,
/// `fill` first with its 100 faults and its callers up to the process, one per line.
#[test]
fn report_call_graph_as_perf() {
    let w = workloads();
    let dir = Dir::new();
    dir.record(&[&w.faults], &["nested", "100"]);
    let text = |args: &[&str]| {
        let out = dir.run(&[&["report"][..], args].concat());
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let total = dir.report_json(&[])["faults"].as_u64().expect("total");
    let callers = text(&["-g"]);
    let lines: Vec<&str> = callers.lines().collect();
    assert_eq!(
        lines[0],
        format!(
            "# {total} faults by caller (-g callee for the other way); percentages of all \
             faults, branches under 0.5% gathered"
        )
    );
    assert_eq!(lines[2], format!("   100.00%  {total:>9}  faults"));
    let at = lines
        .iter()
        .position(|l| l.ends_with("--level1"))
        .unwrap_or_else(|| panic!("no level1 branch in\n{callers}"));
    let column = lines[at].len() - "level1".len();
    let pad = &lines[at][..lines[at].rfind('|').expect("a branch") + 1];
    assert_eq!(
        lines[at + 1],
        format!("{pad}{}level2", " ".repeat(column - pad.len()))
    );
    assert_eq!(
        lines[at + 2],
        format!("{pad}{}fill", " ".repeat(column - pad.len()))
    );
    assert!(lines[at - 2].ends_with("--main"), "{callers}");

    let callees = text(&["-g", "callee", "--top", "1"]);
    let mut lines = callees.lines().skip(2);
    let root = lines.next().expect("root");
    assert!(root.ends_with("%        100  fill"), "{callees}");
    let chain: Vec<&str> = lines.take(9).collect();
    assert_eq!(
        chain,
        [
            "            |",
            "            ---level2",
            "               level1",
            "               main",
            "               __libc_start_call_main",
            "               __libc_start_main_impl",
            "               _start",
            "               faults",
            "",
        ],
        "{callees}"
    );
    // The roots `--top 1` left out are counted, not dropped.
    let last = callees.lines().last().expect("a last line");
    assert!(
        last.starts_with("# ") && last.ends_with(" faults): --top 0 shows all"),
        "{callees}"
    );
}

/// `-o` is where output goes, a directory created when missing for the commands that write
/// several files (`record -o new/rec`, `visualize -o new/svg`, parents too), a file for
/// `report -o`; a refused `record` leaves no directory behind.
#[test]
fn output_directories_are_created() {
    let w = workloads();
    let dir = Dir::new();
    let faults = w.faults.to_str().expect("utf-8 path");
    let out = dir.run(&["record", "-q", "-o", "new/rec", "--", faults, "nested", "5"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let rec = dir.path().join("new/rec");
    let pid = {
        let mut pids = Vec::new();
        for entry in std::fs::read_dir(&rec).expect("record created new/rec") {
            let name = entry
                .expect("entry")
                .file_name()
                .into_string()
                .expect("utf-8");
            if let Some(pid) = name
                .strip_prefix("fltrace-data-faults-")
                .and_then(|n| n.strip_suffix(".parquet"))
            {
                pids.push(pid.to_owned());
            }
        }
        assert_eq!(pids.len(), 1, "{pids:?}");
        pids.remove(0)
    };
    let out = dir.run(&["visualize", "-d", "new/rec", "-o", "svg/deep"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        dir.path()
            .join(format!("svg/deep/fltrace-data-flamegraph-{pid}.svg"))
            .is_file()
    );
    let out = dir.run(&["report", "-d", "new/rec", "-p", &pid, "-o", "report.txt"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let report = std::fs::read_to_string(dir.path().join("report.txt")).expect("report -o FILE");
    assert!(report.contains("fill"), "{report}");
    // No command: refused, and the directory it would have recorded into is not left.
    let out = dir.run(&["record", "-o", "refused"]);
    assert!(!out.status.success());
    assert!(!dir.path().join("refused").exists());
}

/// report acts on the newest recording; older ones stay selectable by pid; nothing is deleted.
#[test]
fn newest_recording_by_default_and_nothing_deleted() {
    let w = workloads();
    let dir = Dir::new();
    let keep = dir.path().join("fltrace-data-faults-1-0.out");
    std::fs::write(&keep, "an old trace of the original tool").expect("write");
    dir.record(&[&w.faults], &["nested", "11"]);
    let first = dir.pids("faults", "parquet")[0];
    dir.record(&[&w.faults], &["nested", "22"]);
    assert!(keep.exists(), "record deleted another file");
    assert_eq!(dir.pids("faults", "parquet").len(), 2);
    let fill = site("faults.c", "fill");
    assert_eq!(
        count_at(&dir.report_json(&["--by", "line"]), "faults.c", fill),
        22
    );
    assert_eq!(
        count_at(
            &dir.report_json(&["--by", "line", "--pid", &first.to_string()]),
            "faults.c",
            fill
        ),
        11
    );
}

/// `--time` keeps only faults in the window.
#[test]
fn time_window_filters() {
    let w = workloads();
    let dir = Dir::new();
    dir.record(&[&w.faults], &["nested", "40"]);
    let all = dir.report_json(&[]);
    assert!(all["faults"].as_u64().unwrap_or(0) >= 40);
    let none = dir.report_json(&["--time", "1000..2000"]);
    assert_eq!(none["faults"], 0);
}

/// Tables fit the terminal: at 200 columns the longest C++ name is whole, at 80 it is cut
/// (its parameters first, then its scope: `…touch_pages(…)`), the line number kept; `--wide`
/// prints it whole whatever `COLUMNS` says; `--by dso` has no function or file column;
/// `--by stack` prints one caller per line.
#[test]
fn tables_fit_the_terminal_width() {
    let dir = Dir::new();
    let program = dir.path().join("longnames");
    let built = std::process::Command::new("g++")
        .args(["-O2", "-g", "-fomit-frame-pointer", "-o"])
        .arg(&program)
        .arg(workloads_dir().join("longnames.cpp"))
        .output()
        .expect("g++ runs");
    assert!(
        built.status.success(),
        "{}",
        String::from_utf8_lossy(&built.stderr)
    );
    dir.record(&[&program], &["40"]);
    let name = "mesh::refinement_pool<mesh::subdivision_policy>::touch_pages(char volatile*, unsigned long)";
    let table = |columns: &str, extra: &[&str]| -> String {
        let out = dir
            .fltrace()
            .env("COLUMNS", columns)
            .args([&["report", "--top", "0"][..], extra].concat())
            .output()
            .expect("fltrace runs");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let rows = |text: &str| -> Vec<String> {
        text.lines()
            .take_while(|l| !l.is_empty())
            .map(str::to_owned)
            .collect()
    };
    let wide = table("200", &[]);
    let touch = format!("{name} longnames.cpp:{}", site("longnames.cpp", "touch"));
    assert!(wide.contains(&touch), "{wide}");
    assert!(
        rows(&wide).iter().all(|r| r.chars().count() <= 200),
        "{wide}"
    );
    let narrow = table("80", &[]);
    assert!(!narrow.contains(name), "{narrow}");
    assert!(
        rows(&narrow).iter().all(|r| r.chars().count() <= 80),
        "{narrow}"
    );
    let line = format!(":{}", site("longnames.cpp", "touch"));
    assert!(
        rows(&narrow)
            .iter()
            .any(|r| r.contains("touch_pages(…)") && r.contains(&line)),
        "{narrow}"
    );
    let longest = |text: &str| rows(text).iter().map(|r| r.chars().count()).max();
    assert!(longest(&narrow) < longest(&wide), "{narrow}");
    assert!(table("80", &["--wide"]).contains(&touch));

    let dso = table("80", &["--by", "dso"]);
    let header = dso.lines().next().unwrap_or("");
    assert!(
        header.split_whitespace().rev().take(2).eq(["lib", "type"]),
        "{dso}"
    );
    assert!(!dso.contains("??"), "{dso}");

    let stack = table("200", &["--by", "stack"]);
    let lines: Vec<&str> = stack.lines().collect();
    let at = lines
        .iter()
        .position(|l| l.contains(&touch))
        .unwrap_or_else(|| panic!("{stack}"));
    assert!(
        lines[at + 1]
            .trim_start()
            .starts_with("<- main (longnames.cpp:"),
        "{stack}"
    );
    assert!(!lines[at + 1].trim_start().contains(" <- "), "{stack}");
}

/// One grammar: `report -p PID` selects the process as `-p` does everywhere, `-o FILE` writes
/// the report there in any format, and a program's flag read as fltrace's gets a hint about
/// the missing `--`.
#[test]
fn report_takes_p_and_o_and_a_missing_separator_has_a_hint() {
    let w = workloads();
    let dir = Dir::new();
    dir.record(&[&w.faults], &["nested", "20"]);
    let report = dir.report_json(&[]);
    let pid = report["pids"][0].as_u64().unwrap_or(0).to_string();
    let out = dir.run(&[
        "report",
        "-p",
        &pid,
        "--format",
        "json",
        "-o",
        "report.json",
        "--top",
        "0",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.stdout.is_empty());
    let written: serde_json::Value = serde_json::from_slice(
        &std::fs::read(dir.path().join("report.json")).expect("report.json written"),
    )
    .expect("JSON");
    assert_eq!(count_at(&written, "faults.c", site("faults.c", "fill")), 20);
    assert_eq!(
        written["pids"][0].as_u64().map(|p| p.to_string()),
        Some(pid)
    );

    let out = dir.run(&["record", "ls", "-l"]);
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("hint: put `--` before the program to run"),
        "{stderr}"
    );
}
