//! One grammar a perf user guesses (issue 41): the recording named alike everywhere, the
//! filters and `--by` values that help lists taken, tables that fit 80 columns, and each
//! mistake answered with what to type instead and the exit status the README's table gives.

use std::path::PathBuf;
use std::process::{Command, Output};

use serde_json::Value;

use super::util::*;

fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// `fltrace ARGS` in `dir` at `COLUMNS` (none: unset, a pipe's 120).
fn at_width(dir: &Dir, columns: &str, args: &[&str]) -> Output {
    let out = dir
        .fltrace()
        .env("COLUMNS", columns)
        .args(args)
        .output()
        .expect("fltrace runs");
    assert!(
        out.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// A recording of `faults nested 300` in `dir/r1`.
fn recorded(dir: &Dir, name: &str, pages: &str) {
    dir.record_with(
        &["-q", "-o", name],
        &[&workloads().faults],
        &["nested", pages],
    );
}

/// Every reading command takes its recording as the argument, as `-d` and as perf's `-i`
/// (`--input`), the same output each way; naming it twice or two for one is a usage error
/// (2) with the form to use, a path with nothing there an error (1) saying what to name.
#[test]
fn a_recording_is_named_by_position_dir_or_input() {
    let dir = Dir::new();
    recorded(&dir, "r1", "30");
    for command in [&["report", "--top", "3"][..], &["script"], &["list"]] {
        let forms: Vec<Vec<&str>> = vec![
            [command, &["r1"]].concat(),
            [command, &["-d", "r1"]].concat(),
            [command, &["-i", "r1"]].concat(),
            [command, &["--input", "r1"]].concat(),
            [command, &["--dir", "r1"]].concat(),
        ];
        let outputs: Vec<String> = forms
            .iter()
            .map(|args| {
                let out = dir.run(args);
                assert!(out.status.success(), "{args:?}: {}", stderr(&out));
                stdout(&out)
            })
            .collect();
        assert!(!outputs[0].is_empty(), "{command:?}");
        assert!(
            outputs.iter().all(|o| *o == outputs[0]),
            "{command:?}: {outputs:?}"
        );
    }
    for args in [
        &["heatmap", "r1", "--terminal"][..],
        &["visualize", "r1", "-o", "svgs"],
        &["archive", "r1"],
        &["export", "-d", "r1", "-o", "exported"],
        &["export", "r1", "-o", "exported2"],
    ] {
        let out = dir.run(args);
        assert!(out.status.success(), "{args:?}: {}", stderr(&out));
    }

    let out = dir.run(&["report", "r1", "-d", "r1"]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(stderr(&out).contains("hint: name the recording once"));
    let out = dir.run(&["report", "r1", "r2"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("`fltrace diff A B` compares two"));
    let out = dir.run(&["diff", "r1"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr(&out).contains("fltrace diff A B"),
        "{}",
        stderr(&out)
    );
    let out = dir.run(&["report", "-g", "r1"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr(&out).contains("fltrace report r1 -g"),
        "{}",
        stderr(&out)
    );
    let out = dir.run(&["report", "nothing"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr(&out)
            .contains("no recording at nothing: name a directory of `fltrace record -o DIR`"),
        "{}",
        stderr(&out)
    );
}

/// The `--by` values a command's help lists: the values of `--by` in `fltrace CMD --help`.
fn help_by_values(command: &str) -> Vec<String> {
    let out = Command::new(env!("CARGO_BIN_EXE_fltrace"))
        .args([command, "--help"])
        .output()
        .expect("fltrace runs");
    let help = stdout(&out);
    let at = help.find("--by <BY>").expect("--by in the help");
    help[at..]
        .lines()
        .skip(1)
        .take_while(|l| !l.trim_start().starts_with('-') || l.trim_start().starts_with("- "))
        .filter_map(|l| l.trim().strip_prefix("- "))
        .map(|v| v.split(':').next().unwrap_or(v).trim().to_owned())
        .collect()
}

/// `diff` takes every `--by` value its help lists (perf diff's per-line delta and ratio for
/// each), and the filters of `report`; `report` takes every one its help lists.
#[test]
fn by_values_and_filters_that_help_lists_are_taken() {
    let dir = Dir::new();
    recorded(&dir, "a", "100");
    recorded(&dir, "b", "250");
    let values = help_by_values("diff");
    assert_eq!(
        values,
        ["line", "function", "stack", "dso", "comm", "pid", "tid"],
        "diff --help"
    );
    for by in &values {
        let out = dir.run(&["diff", "a", "b", "--by", by, "--format", "json"]);
        assert!(out.status.success(), "diff --by {by}: {}", stderr(&out));
        let json: Value = serde_json::from_slice(&out.stdout).expect("JSON");
        let rows = json["rows"].as_array().expect("rows");
        assert!(!rows.is_empty(), "--by {by}");
        for row in rows {
            let (a, b) = (row["a"].as_i64().unwrap(), row["b"].as_i64().unwrap());
            assert_eq!(row["delta"].as_i64(), Some(b - a), "{row}");
        }
    }
    // By thread name, the workload's faults match across the two runs: one row, B/A.
    let out = dir.run(&["diff", "a", "b", "--by", "comm", "--format", "json"]);
    let json: Value = serde_json::from_slice(&out.stdout).expect("JSON");
    let faults = &json["rows"][0];
    assert_eq!(faults["comm"], "faults", "{json}");
    assert!(faults["ratio"].as_f64().is_some_and(|r| r > 1.0), "{json}");
    // The filters of report, on both sides: only fill's faults with --focus, each thread's.
    let fill = site("faults.c", "fill");
    let out = dir.run(&[
        "diff", "a", "b", "--focus", "^fill$", "--format", "json", "--top", "0",
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    let json: Value = serde_json::from_slice(&out.stdout).expect("JSON");
    let rows = json["rows"].as_array().expect("rows");
    assert_eq!(rows.len(), 1, "{json}");
    assert_eq!(
        (rows[0]["a"].as_u64(), rows[0]["b"].as_u64()),
        (Some(100), Some(250))
    );
    assert_eq!(rows[0]["line"], fill);
    for filter in [
        &["--comm", "faults"][..],
        &["--call-site", "leaf"],
        &["--time", "0.."],
        &["--hide", "level2"],
        &["--include-tracer"],
    ] {
        let out = dir.run(&[&["diff", "a", "b"][..], filter].concat());
        assert!(out.status.success(), "{filter:?}: {}", stderr(&out));
    }
    let tid = dir.report_json(&["-d", "a", "--by", "tid"])["groups"][0]["tid"]
        .as_u64()
        .expect("a tid")
        .to_string();
    let out = dir.run(&["diff", "a", "a", "--tid", &tid, "--by", "tid"]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(stdout(&out).contains(&tid), "{}", stdout(&out));

    let values = help_by_values("report");
    assert_eq!(
        values,
        [
            "stack",
            "function",
            "line",
            "dso",
            "alloc-site",
            "comm",
            "pid",
            "tid"
        ],
        "report --help"
    );
    dir.record_with(
        &["-q", "--allocs", "-o", "al"],
        &[&workloads().allocs],
        &["threads", "2"],
    );
    for by in &values {
        let out = dir.run(&["report", "al", "--by", by]);
        assert!(out.status.success(), "report --by {by}: {}", stderr(&out));
    }
}

/// A `--time` window after the last fault is the same error in every command that shows
/// faults (exit status 1), saying the recording's span; a window inside it is not.
#[test]
fn a_window_outside_the_recording_says_its_span_everywhere() {
    let dir = Dir::new();
    recorded(&dir, "r1", "20");
    let mut said = Vec::new();
    for args in [
        &["report", "r1"][..],
        &["script", "r1"],
        &["visualize", "r1", "-o", "svgs"],
        &["heatmap", "r1", "--terminal"],
        &["diff", "r1", "r1"],
    ] {
        let out = dir.run(&[args, &["--time", "100..200"]].concat());
        assert_eq!(out.status.code(), Some(1), "{args:?}: {}", stderr(&out));
        let line = stderr(&out)
            .lines()
            .find(|l| l.contains("--time 100..200"))
            .unwrap_or_else(|| panic!("{args:?}: {}", stderr(&out)))
            .to_owned();
        assert!(
            line.contains("the faults of `")
                && line.contains(" span 0..")
                && line.ends_with("s from its start: give a window within it"),
            "{line}"
        );
        // diff says which side first (`recording in r1: `); the sentence is the same.
        said.push(line[line.find("--time").unwrap_or(0)..].to_owned());
    }
    assert!(said.iter().all(|s| *s == said[0]), "{said:?}");
    let out = dir.run(&["report", "r1", "--time", "0..100"]);
    assert!(out.status.success(), "{}", stderr(&out));
}

/// A finished recording's table cut short: without `--salvage` an error naming the file and
/// `--salvage` (1); with it, a line naming the file, how much of it is left and how many
/// rows it gave. Cut in its final footer, every fault is recovered (the last checkpoint
/// holds them); cut before the last checkpoint, those of the checkpoints before.
#[test]
fn salvage_says_what_it_recovered_and_from_which_file() {
    let dir = Dir::new();
    recorded(&dir, "r1", "300");
    let pid = std::fs::read_dir(dir.path().join("r1"))
        .expect("r1")
        .filter_map(|e| {
            fltrace_trace::files::pid_of(e.ok()?.file_name().to_str()?, "faults", "parquet")
        })
        .next()
        .expect("a faults file");
    let faults = fltrace_trace::files::faults(&dir.path().join("r1"), pid);
    let name = faults
        .file_name()
        .expect("name")
        .to_string_lossy()
        .into_owned();
    let whole = std::fs::read(&faults).expect("faults file");
    let recorded_faults = dir.report_json(&["-d", "r1"])["faults"]
        .as_u64()
        .unwrap_or(0);
    // The final footer ends the file, the last checkpoint ends where it begins: the footer's
    // length is in the 4 bytes before the closing magic.
    let footer =
        u32::from_le_bytes(whole[whole.len() - 8..whole.len() - 4].try_into().unwrap()) as usize;
    for (cut, recovered) in [
        (whole.len() - footer / 2, Some(recorded_faults)),
        (whole.len() * 2 / 3, None),
    ] {
        std::fs::write(&faults, &whole[..cut]).expect("cut");
        let out = dir.run(&["report", "r1", "--format", "json"]);
        assert_eq!(out.status.code(), Some(1));
        let err = stderr(&out);
        assert!(
            err.contains(&format!(
                "{name} is corrupt: {cut} bytes where the finished recording had {}",
                whole.len()
            )) && err.contains("--salvage reads what is left of the recording"),
            "{err}"
        );
        let out = dir.run(&["report", "r1", "--format", "json", "--salvage"]);
        assert!(out.status.success(), "{}", stderr(&out));
        let err = stderr(&out);
        let json: Value = serde_json::from_slice(&out.stdout).expect("JSON");
        let got = json["faults"].as_u64().expect("faults");
        if let Some(recovered) = recovered {
            assert_eq!(got, recovered, "{err}");
        }
        assert!(
            err.contains(&format!(
                "salvaged {name}, cut to {cut} of its {} bytes: ",
                whole.len()
            )) && err.contains("the rows up to its last intact checkpoint (byte "),
            "{err}"
        );
        // What it says it recovered is what the report counts (the tracer's own left out).
        let said: u64 = err
            .split(&format!("of its {} bytes: ", whole.len()))
            .nth(1)
            .and_then(|rest| rest.split(' ').next())
            .and_then(|n| n.parse().ok())
            .expect("a count");
        assert!(said >= got, "{said} < {got}: {err}");
    }
    std::fs::write(&faults, &whole).expect("restore");
}

/// One parser for pids: a list where the flag takes several (`count -p A,B` as `record -p`),
/// one where it takes one, said so; values out of range refused (2).
#[test]
fn pids_and_ranges_are_parsed_alike() {
    let dir = Dir::new();
    let mut sleepers: Vec<std::process::Child> = (0..2)
        .map(|_| Command::new("sleep").arg("30").spawn().expect("sleep runs"))
        .collect();
    let pids: Vec<String> = sleepers.iter().map(|c| c.id().to_string()).collect();
    let list = pids.join(",");
    let out = dir.run(&["count", "-p", &list, "page-faults", "--duration", "300ms"]);
    assert!(out.status.success(), "count -p {list}: {}", stderr(&out));
    let out = dir.run(&[
        "faults",
        "-p",
        &pids[0],
        "-p",
        &pids[1],
        "--duration",
        "300ms",
    ]);
    assert!(out.status.success(), "faults -p -p: {}", stderr(&out));
    for child in &mut sleepers {
        let _ = child.kill();
        let _ = child.wait();
    }
    for (args, said) in [
        (&["report", "-p", "1,2"][..], "picks one process"),
        (&["record", "-p", "x"], "is not a process id"),
        (
            &["count", "-p", "0", "page-faults"],
            "0 is not a process id",
        ),
        (
            &["report", "-g", "--percent-limit", "200"],
            "not a percentage from 0 to 100",
        ),
        (&["faults", "--sample", "0"], "0"),
        (&["memleak", "0"], "0"),
    ] {
        let out = dir.run(args);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {}", stderr(&out));
        assert!(stderr(&out).contains(said), "{args:?}: {}", stderr(&out));
    }
}

/// `report --leaks -o 5` writes no file named 5: refused (2), naming `--older-ms`.
#[test]
fn leaks_output_is_a_file_not_an_age() {
    let dir = Dir::new();
    dir.record_with(
        &["-q", "--allocs"],
        &[&workloads().allocs],
        &["threads", "2"],
    );
    let out = dir.run(&["report", "--leaks", "-o", "5"]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(stderr(&out).contains("--older-ms 5"), "{}", stderr(&out));
    assert!(!dir.path().join("5").exists());
    let out = dir.run(&["report", "--leaks", "--older-ms", "5", "-o", "leaks.txt"]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(
        std::fs::read_to_string(dir.path().join("leaks.txt"))
            .expect("leaks.txt")
            .starts_with("Top ")
    );
}

/// `--by stack` prints one row per stack as it reads: no two rows (JSON objects) alike.
#[test]
fn by_stack_rows_are_distinct() {
    let dir = Dir::new();
    dir.record(&[&workloads().faults], &["nested", "300"]);
    let json = dir.report_json(&["--by", "stack"]);
    let rows: Vec<String> = groups(&json)
        .map(|g| {
            let mut key = g.clone();
            for field in [
                "count",
                "percent",
                "reads",
                "writes",
                "wrprotects",
                "first_touches",
                "fetches",
                "kind",
                "type",
            ] {
                key.as_object_mut().expect("object").remove(field);
            }
            key.to_string()
        })
        .collect();
    let mut unique = rows.clone();
    unique.sort();
    unique.dedup();
    assert_eq!(unique.len(), rows.len(), "{json}");
    let total: u64 = groups(&json)
        .map(|g| g["count"].as_u64().unwrap_or(0))
        .sum();
    assert_eq!(total, json["faults"].as_u64().unwrap_or(0));
}

/// The build-ID cache's work is said under `-v` only.
#[test]
fn the_cache_line_is_verbose() {
    let dir = Dir::new();
    let home = dir.path().join("home");
    std::fs::create_dir(&home).expect("home");
    for (flags, said) in [(&["record"][..], false), (&["-v", "record"], true)] {
        let out = dir
            .fltrace()
            .env("HOME", &home)
            .args(flags)
            .arg("--")
            .arg(&workloads().faults)
            .args(["nested", "5"])
            .output()
            .expect("fltrace runs");
        assert!(out.status.success(), "{}", stderr(&out));
        assert_eq!(
            stderr(&out).contains("build-ID cache"),
            said,
            "{flags:?}: {}",
            stderr(&out)
        );
        assert!(stderr(&out).contains("recorder peak "), "{}", stderr(&out));
        assert!(stderr(&out).contains(" MiB; trace in "), "{}", stderr(&out));
    }
}

/// Under far memory the table's `fetches` column says how many of a row's faults brought an
/// evicted page back: where the type column says `mixed`, the fetches are not hidden.
#[test]
fn far_memory_tables_show_fetches() {
    let dir = Dir::new();
    dir.record_with(
        &["-q", "-L", "8", "-M", "64"],
        &[&workloads().farmem],
        &["threads", "16", "2"],
    );
    let json = dir.report_json(&[]);
    let out = at_width(&dir, "120", &["report", "--top", "5"]);
    let table = stdout(&out);
    let header: Vec<&str> = table
        .lines()
        .next()
        .unwrap_or("")
        .split_whitespace()
        .collect();
    let at = header
        .iter()
        .position(|h| *h == "fetches")
        .expect("a fetches column");
    // `#` is the first header word and the rows' first field.
    for (row, group) in table.lines().skip(1).take(5).zip(groups(&json)) {
        let fields: Vec<&str> = row.split_whitespace().collect();
        assert_eq!(
            fields[at].parse::<u64>().ok(),
            group["fetches"].as_u64(),
            "{row}\n{table}"
        );
    }
    assert!(
        groups(&json).any(|g| g["type"] == "mixed" && g["fetches"].as_u64() > Some(0)),
        "{json}"
    );
}

/// At 80 columns every line of the tables fits: report (by line, stack, function, dso,
/// thread, call tree), report --allocs, --leaks and --by alloc-site, diff, list and runs
/// --stat.
#[test]
fn tables_fit_80_columns() {
    let dir = Dir::new();
    let w = workloads();
    dir.record_with(&["-q", "-o", "a"], &[&w.faults], &["nested", "100"]);
    dir.record_with(
        &["-q", "-o", "b", "--allocs"],
        &[&w.allocs],
        &["threads", "4"],
    );
    let fits = |args: &[&str]| {
        let out = at_width(&dir, "80", args);
        let text = stdout(&out);
        assert!(!text.is_empty(), "{args:?}");
        let long: Vec<&str> = text
            .lines()
            .filter(|l| l.replace('\t', "        ").chars().count() > 80)
            .collect();
        assert!(long.is_empty(), "{args:?}: {long:#?}\n{text}");
    };
    for args in [
        &["report", "a"][..],
        &["report", "a", "--by", "stack"],
        &["report", "a", "--by", "function"],
        &["report", "a", "--by", "dso"],
        &["report", "a", "--by", "tid"],
        &["report", "a", "-g"],
        &["report", "b", "--allocs"],
        &["report", "b", "--leaks"],
        &["report", "b", "--by", "alloc-site"],
        &["diff", "a", "b"],
        &["diff", "a", "b", "--by", "stack"],
        &["list", "a"],
    ] {
        fits(args);
    }
    let series = format!("{} 8 1", w.scan.display());
    let out = dir.run(&["runs", "-o", "s", "-n", "2", "--seed", "1", "--", &series]);
    assert!(out.status.success(), "{}", stderr(&out));
    let out = dir.run(&["analyze", "s", "-o", "c.sqlite"]);
    assert!(out.status.success(), "{}", stderr(&out));
    fits(&["runs", "c.sqlite", "--stat"]);
    fits(&["runs", "c.sqlite", "--list"]);
}

/// Two stripped functions of one library, whose names differ only at the end: at 80 columns
/// each row keeps its own `+0xADDR`, so they never read the same.
#[test]
fn two_stripped_sites_of_one_library_read_apart() {
    let dir = Dir::new();
    let build = |args: &[&str]| {
        let out = Command::new(args[0])
            .args(&args[1..])
            .current_dir(dir.path())
            .output()
            .expect("builds");
        assert!(out.status.success(), "{args:?}: {}", stderr(&out));
    };
    let source = workloads_dir().join("twosites.c");
    let source = source.to_str().expect("utf-8");
    let library = "libstripped-sites-with-a-long-name.so.1.2.3";
    build(&[
        "gcc", "-O2", "-DLIB", "-shared", "-fPIC", "-o", "lib.so", source,
    ]);
    build(&["strip", "-o", library, "lib.so"]);
    build(&["gcc", "-O2", "-o", "twosites", source, "-ldl"]);
    let program: PathBuf = dir.path().join("twosites");
    let lib_path = dir.path().join(library);
    dir.record(&[&program], &[lib_path.to_str().expect("utf-8"), "20"]);
    let json = dir.report_json(&["--by", "function"]);
    // (The library's start-up code takes a read fault of its own: not one of the two.)
    let stripped: Vec<(String, u64)> = groups(&json)
        .filter(|g| g["lib"] == library && g["count"].as_u64() >= Some(20))
        .map(|g| {
            (
                g["function"].as_str().unwrap_or("").to_owned(),
                g["count"].as_u64().unwrap_or(0),
            )
        })
        .collect();
    // site_b touches twice as many pages as site_a.
    assert_eq!(stripped.len(), 2, "{json}");
    assert!(
        stripped
            .iter()
            .all(|(f, _)| f.starts_with(&format!("{library}+0x"))),
        "{stripped:?}"
    );
    assert_eq!(stripped[0].1, 40, "{stripped:?}");
    assert_eq!(stripped[1].1, 20, "{stripped:?}");
    let out = at_width(&dir, "80", &["report", "--by", "function"]);
    let table = stdout(&out);
    let rows: Vec<&str> = stripped
        .iter()
        .map(|(function, count)| {
            let address = &function[function.rfind("+0x").expect("address")..];
            table
                .lines()
                .find(|l| {
                    l.split_whitespace().nth(1) == Some(&count.to_string()) && l.contains(address)
                })
                .unwrap_or_else(|| panic!("no row of {count} faults at {address}: {table}"))
        })
        .collect();
    assert_ne!(rows[0], rows[1], "{table}");
    for row in &rows {
        assert!(row.chars().count() <= 80, "{row}");
        assert!(!row.contains(library), "cut at 80 columns: {row}");
    }
}
