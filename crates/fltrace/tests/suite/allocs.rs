//! `record --allocs`: the allocation sites of the allocs workload with their exact sizes and
//! counts, leaks, threads, fork, a crash, dlopen, and faults attributed to the allocation of
//! the memory they hit.

use std::collections::HashMap;
use std::path::Path;
use std::process::Output;

use super::util::*;

/// `fltrace record -q --allocs [extra] -- allocs <args>`.
fn record_allocs(dir: &Dir, extra: &[&str], args: &[&str]) -> Output {
    record_program(dir, extra, &workloads().allocs, args)
}

/// `fltrace record -q --allocs [extra] -- <program> <args>`, killed after [`LIMIT`].
fn record_program(dir: &Dir, extra: &[&str], program: &Path, args: &[&str]) -> Output {
    output_within(
        dir.fltrace()
            .args(["record", "-q", "--allocs"])
            .args(extra)
            .arg("--")
            .arg(program)
            .args(args),
        LIMIT,
    )
}

/// Longer than any of these runs takes: past it the tracer is taken to have hung.
const LIMIT: std::time::Duration = std::time::Duration::from_secs(120);

fn record_ok(dir: &Dir, extra: &[&str], args: &[&str]) {
    let out = record_allocs(dir, extra, args);
    assert!(
        out.status.success(),
        "record failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// `fltrace report <args> --format csv --top 0`, as rows.
fn report_rows(dir: &Dir, args: &[&str]) -> Vec<HashMap<String, String>> {
    let out = dir.run(&[args, &["--format", "csv", "--top", "0"]].concat());
    assert!(
        out.status.success(),
        "report failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    csv_rows(&String::from_utf8_lossy(&out.stdout))
}

/// The row of `allocs.c:<line of SITE:name>`.
fn at<'r>(rows: &'r [HashMap<String, String>], name: &str) -> &'r HashMap<String, String> {
    row_at(rows, "allocs.c", name)
}

/// The row of `<file>:<line of SITE:name>`.
fn row_at<'r>(
    rows: &'r [HashMap<String, String>],
    file: &str,
    name: &str,
) -> &'r HashMap<String, String> {
    let line = site(file, name).to_string();
    rows.iter()
        .find(|r| r["file"].ends_with(file) && r["line"] == line)
        .unwrap_or_else(|| panic!("no row at {file}:{line} ({name}) in {rows:#?}"))
}

fn numbers(row: &HashMap<String, String>, columns: &[&str]) -> Vec<u64> {
    columns
        .iter()
        .map(|c| row[*c].parse().unwrap_or(u64::MAX))
        .collect()
}

const TOTALS: [&str; 5] = [
    "allocs",
    "bytes",
    "leaked_allocs",
    "leaked_bytes",
    "temporary",
];

/// Every kind of call at its own line, with exact counts and bytes; the one leak found; the
/// constructor's allocation before main; mappings and the break told apart from the heap.
#[test]
fn sites_have_exact_sizes_and_counts() {
    let dir = Dir::new();
    record_ok(&dir, &[], &["sites"]);
    let rows = report_rows(&dir, &["report", "--allocs"]);
    assert!(
        rows.first().is_some_and(|r| r.contains_key("leaked_bytes")),
        "{rows:?}"
    );
    let expect = |name: &str, totals: [u64; 5]| {
        assert_eq!(numbers(at(&rows, name), &TOTALS), totals, "{name}");
    };
    // 1000 blocks of 100 bytes, each freed before the next: all temporary.
    expect("repeated", [1000, 100_000, 0, 0, 1000]);
    expect("leak", [3, 12_288, 3, 12_288, 0]);
    // realloc to 32, 64, ... 1024: six blocks, each freed by the next realloc or free.
    expect("chain", [6, 2016, 0, 0, 6]);
    expect("chain_start", [1, 16, 0, 0, 1]);
    expect("posix_memalign", [1, 256, 0, 0, 0]);
    expect("aligned_alloc", [1, 8192, 0, 0, 0]);
    expect("memalign", [1, 512, 0, 0, 0]);
    // Freed after three other frees: not temporary (heaptrack's rule; the per-thread rule
    // fltrace had counted it).
    expect("calloc", [1, 1000, 0, 0, 0]);
    expect("mmap", [1, 1 << 20, 0, 0, 0]);
    expect("sbrk", [1, 65_536, 0, 0, 0]);
    expect("constructor", [1, 333, 0, 0, 0]);
    assert_eq!(at(&rows, "constructor")["function"], "early");
    assert_eq!(at(&rows, "mmap")["memory"], "mapping");
    assert_eq!(at(&rows, "leak")["memory"], "heap");
}

/// The totals table holds exactly the sums over the event table's calls with a stack, per
/// (stack, call, size): on malloc4m's 5,120 calls, 512 sizes at its one site, 10 calls each.
#[test]
fn allocation_totals_are_the_sums_of_the_events() {
    let dir = Dir::new();
    record_ok(&dir, &[], &["malloc4m", "5120"]);
    let pids = dir.pids("allocsums", "parquet");
    assert_eq!(pids.len(), 1, "{pids:?}");
    let totals = assert_totals_are_the_sums(&dir, pids[0]);
    let mut by_stack: HashMap<u32, Vec<&fltrace_trace::AllocTotal>> = HashMap::new();
    for total in &totals {
        by_stack.entry(total.stack_id).or_default().push(total);
    }
    let site = by_stack
        .values()
        .find(|rows| rows.iter().map(|t| t.count).sum::<u64>() == 5120)
        .unwrap_or_else(|| panic!("no stack with 5120 calls in {by_stack:#?}"));
    assert_eq!(site.len(), 512);
    for total in site {
        assert_eq!(total.call, fltrace_trace::AllocCall::Malloc);
        assert!((16..528).contains(&total.size), "{total:?}");
        assert_eq!(
            (total.count, total.bytes),
            (10, 10 * total.size),
            "{total:?}"
        );
    }
}

/// Checks that the totals table of process `pid` holds exactly the sums over its event
/// table's calls with a stack, one row per (stack, call, size); returns the totals.
fn assert_totals_are_the_sums(dir: &Dir, pid: u32) -> Vec<fltrace_trace::AllocTotal> {
    let events =
        fltrace_trace::read_allocs(&fltrace_trace::files::allocs(dir.path(), pid)).expect("events");
    let totals =
        fltrace_trace::read_alloc_totals(&fltrace_trace::files::alloc_totals(dir.path(), pid))
            .expect("totals");
    let mut sums: std::collections::BTreeMap<(u32, u8, u64), (u64, u64)> = Default::default();
    for event in events
        .iter()
        .filter(|e| e.stack_id != fltrace_trace::AllocEvent::NO_STACK)
    {
        let sum = sums
            .entry((event.stack_id, event.call as u8, event.size))
            .or_default();
        sum.0 += 1;
        sum.1 += event.size;
    }
    let from_table: std::collections::BTreeMap<(u32, u8, u64), (u64, u64)> = totals
        .iter()
        .map(|t| ((t.stack_id, t.call as u8, t.size), (t.count, t.bytes)))
        .collect();
    assert_eq!(from_table.len(), totals.len(), "one row per key");
    assert_eq!(from_table, sums);
    totals
}

/// Calls of malloc4m made by `allocs drained` before it waits: enough for its log to be
/// converted while it runs.
const DRAINED_PAIRS: usize = 300_000;
/// The calls the tracer logs of them: every `malloc`, every `free` but the first of each of
/// the 1,024 ring slots (`free(NULL)`, not logged).
const DRAINED_CALLS: usize = 2 * DRAINED_PAIRS - 1024;

/// `fltrace record --allocs -- allocs drained DRAINED_PAIRS` in `dir`, once the workload
/// has made its calls and waits for its stdin to close; with the workload's stdout.
fn record_drained(
    dir: &Dir,
) -> (
    std::process::Child,
    std::io::BufReader<std::process::ChildStdout>,
) {
    use std::io::BufRead;
    use std::process::Stdio;
    let mut recorder = dir
        .fltrace()
        .env("FLTRACE_ALLOCS_DRAIN", "1")
        .args(["record", "--allocs", "--"])
        .arg(&workloads().allocs)
        .args(["drained", &DRAINED_PAIRS.to_string()])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("fltrace runs");
    let mut stdout = std::io::BufReader::new(recorder.stdout.take().expect("stdout"));
    let mut line = String::new();
    stdout.read_line(&mut line).expect("workload prints");
    if line.trim() != "ready" {
        let _ = recorder.kill();
        let out = recorder.wait_with_output().expect("fltrace ends");
        panic!(
            "the workload printed {line:?}; fltrace: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    (recorder, stdout)
}

/// The table the drain of the recording running in `dir` writes in its spool, once it holds
/// at least `rows` rows (read through its checkpoints, one a second): the rows and the
/// process. Bounded wait.
fn drained_rows(dir: &Dir, rows: usize) -> (Vec<fltrace_trace::AllocEvent>, u32) {
    let started = std::time::Instant::now();
    loop {
        let table = std::fs::read_dir(dir.path())
            .expect("dir")
            .flatten()
            .filter(|e| {
                e.file_name()
                    .to_string_lossy()
                    .starts_with(".fltrace-allocs-")
            })
            .flat_map(|spool| {
                std::fs::read_dir(spool.path())
                    .into_iter()
                    .flatten()
                    .flatten()
            })
            .find_map(|e| {
                let name = e.file_name().to_string_lossy().into_owned();
                let pid = name.strip_prefix("allocs-")?.strip_suffix(".parquet")?;
                Some((e.path(), pid.parse::<u32>().ok()?))
            });
        let read = table
            .as_ref()
            .map(|(path, pid)| (fltrace_trace::read_allocs(path), *pid));
        if let Some((Ok(events), pid)) = &read
            && events.len() >= rows
        {
            return (events.clone(), *pid);
        }
        assert!(
            started.elapsed() < std::time::Duration::from_secs(60),
            "the spool's table holds fewer than {rows} rows after 60 s: {:?}",
            read.map(|(events, _)| events.map(|e| e.len()))
        );
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
}

/// A large process's logs convert while it runs (issue 28): once the program has made its
/// calls and waits, the table in the spool holds every one of them while the program still
/// runs; after it ends the recording's table begins with those very rows, holds every call
/// logged, and its totals are the events' sums.
#[test]
fn allocations_convert_while_the_program_runs() {
    let dir = Dir::new();
    let (mut recorder, _stdout) = record_drained(&dir);
    let (drained, pid) = drained_rows(&dir, DRAINED_CALLS);
    assert!(
        recorder.try_wait().expect("fltrace").is_none(),
        "the recording ended before its stdin closed"
    );
    drop(recorder.stdin.take());
    let out = recorder.wait_with_output().expect("fltrace ends");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    let events =
        fltrace_trace::read_allocs(&fltrace_trace::files::allocs(dir.path(), pid)).expect("events");
    assert_eq!(events[..drained.len()], drained[..]);
    assert_eq!(
        logged_and_kept(&dir, &err),
        (events.len() as u64, events.len() as u64)
    );
    assert_totals_are_the_sums(&dir, pid);
    let rows = report_rows(&dir, &["report", "--allocs"]);
    assert_eq!(
        numbers(at(&rows, "malloc4m"), &TOTALS)[0],
        DRAINED_PAIRS as u64
    );
}

/// The allocation log's pages are not the program's page faults: a thread that filled a
/// chunk of its log has the next one made present in one call. 2M calls write a log of some
/// 2,900 pages (about 6 bytes a call), which were as many faults of the tracer (2,107
/// before this, with its other ones), each with its stack; now the first chunk's 64 pages
/// and the tracer's own state (its thread's caches: about 45 pages).
#[test]
fn the_allocation_log_is_not_written_by_page_faults() {
    let dir = Dir::new();
    record_ok(&dir, &[], &["malloc4m", "1000000"]);
    let pid = dir.pids("allocs", "parquet")[0];
    let events =
        fltrace_trace::read_allocs(&fltrace_trace::files::allocs(dir.path(), pid)).expect("events");
    assert!(events.len() >= 1_900_000, "{} events", events.len());
    let (faults, _) =
        fltrace_trace::read_faults(&fltrace_trace::files::faults(dir.path(), pid)).expect("faults");
    let tracer = faults
        .iter()
        .filter(|f| f.flags.has(fltrace_trace::FaultFlags::TRACER))
        .count();
    let chunk_pages = fltrace_runtime_abi::alloclog::CHUNK_SIZE / 4096;
    assert!(
        tracer <= 2 * chunk_pages,
        "{tracer} faults of the tracer for {} faults in all",
        faults.len()
    );
}

/// SIGKILL of the recorder while its drain converts: the next `report` recovers every call
/// from the logs, the same rows the drain had written first, and the next `record` removes
/// the spool, the drain's tables with it.
#[test]
fn sigkill_while_converting_keeps_every_allocation() {
    let dir = Dir::new();
    let (mut recorder, _stdout) = record_drained(&dir);
    let (drained, pid) = drained_rows(&dir, DRAINED_CALLS);
    // The mappings the stacks are symbolized with, checkpointed once a second.
    let started = std::time::Instant::now();
    while !fltrace_trace::read_mappings(&fltrace_trace::files::mmaps(dir.path(), pid))
        .is_ok_and(|maps| maps.iter().any(|m| m.path.contains("libc")))
    {
        assert!(started.elapsed() < std::time::Duration::from_secs(60));
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
    recorder.kill().expect("SIGKILL");
    recorder.wait().expect("fltrace exits");
    // SAFETY: the workload, which the killed recorder started.
    unsafe { libc::kill(pid as i32, libc::SIGKILL) };
    let out = dir.run(&["report", "--allocs", "--format", "csv", "--top", "0"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    let recovered: usize = err
        .lines()
        .find_map(|l| {
            l.split("recovered ")
                .nth(1)?
                .strip_suffix(&format!(
                    " allocations of process {pid} from the spool of a killed recorder"
                ))?
                .parse()
                .ok()
        })
        .unwrap_or_else(|| panic!("no recovery in {err}"));
    let events =
        fltrace_trace::read_allocs(&fltrace_trace::files::allocs(dir.path(), pid)).expect("events");
    assert_eq!(events.len(), recovered);
    assert_eq!(events[..drained.len()], drained[..]);
    let rows = csv_rows(&String::from_utf8_lossy(&out.stdout));
    assert_eq!(
        numbers(at(&rows, "malloc4m"), &TOTALS)[0],
        DRAINED_PAIRS as u64
    );
    let again = dir.record(&[&workloads().faults], &["nested", "1"]);
    let again_err = String::from_utf8_lossy(&again.stderr);
    assert!(!again_err.contains("did not write"), "{again_err}");
    let spools = std::fs::read_dir(dir.path())
        .expect("dir")
        .flatten()
        .filter(|e| {
            e.file_name()
                .to_string_lossy()
                .starts_with(".fltrace-allocs-")
        })
        .count();
    assert_eq!(spools, 0, "the spool is left after the next record");
}

/// `--leaks` prints as bcc's memleak does, the unrolled loop's three calls as one stack, and
/// `--older` hides allocations younger than it asks.
#[test]
fn leaks_print_like_memleak() {
    let dir = Dir::new();
    record_ok(&dir, &[], &["sites"]);
    let out = dir.run(&["report", "--leaks"]);
    let text = String::from_utf8_lossy(&out.stdout);
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(
        lines[..4],
        [
            "Top 1 stacks with outstanding allocations:",
            "\t12288 bytes in 3 allocations from stack",
            &format!("\t\tleak allocs.c:{}", site("allocs.c", "leak")),
            &format!("\t\tsites allocs.c:{}", site("allocs.c", "leak_call")),
        ],
        "{text}"
    );
    let out = dir.run(&["report", "--leaks", "--older", "600000"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.starts_with("Top 0 stacks with outstanding allocations:"),
        "{text}"
    );
}

/// One thread allocates, another frees: nothing leaks. Temporaries follow heaptrack's rule
/// (a free of the process's last allocation, whatever thread): how many depends on how the
/// two threads interleave, so only the first four totals are exact.
#[test]
fn threads_free_each_others_blocks() {
    let dir = Dir::new();
    record_ok(&dir, &[], &["threads", "500"]);
    let rows = report_rows(&dir, &["report", "--allocs"]);
    assert_eq!(
        numbers(at(&rows, "produce"), &TOTALS)[..4],
        [500, 24_000, 0, 0]
    );
}

/// A forked child's allocations are its own, in its own tables.
#[test]
fn forked_child_has_its_own_allocations() {
    let dir = Dir::new();
    record_ok(&dir, &[], &["fork", "50"]);
    let pids = dir.pids("allocs", "parquet");
    assert_eq!(pids.len(), 2, "{pids:?}");
    let child = pids
        .iter()
        .map(|pid| pid.to_string())
        .find(|pid| {
            let rows = report_rows(&dir, &["report", "--allocs", "--pid", pid]);
            rows.iter()
                .any(|r| r["line"] == site("allocs.c", "child").to_string())
        })
        .expect("a process with the child's site");
    let rows = report_rows(&dir, &["report", "--allocs", "--pid", &child]);
    assert_eq!(
        numbers(at(&rows, "child"), &TOTALS)[..4],
        [50, 2000, 50, 2000]
    );
    assert!(
        !rows
            .iter()
            .any(|r| r["line"] == site("allocs.c", "parent").to_string()),
        "the parent's blocks are not the child's allocations"
    );
    let parent = pids.iter().map(|p| p.to_string()).find(|p| *p != child);
    let rows = report_rows(
        &dir,
        &["report", "--allocs", "--pid", &parent.unwrap_or_default()],
    );
    assert_eq!(numbers(at(&rows, "parent"), &TOTALS)[..2], [50, 1200]);
}

/// Each page fault is matched to the allocation it landed in: the faults of writing a
/// 64-page block are the block's, written at the touching line.
#[test]
fn faults_are_attributed_to_their_allocation_site() {
    let dir = Dir::new();
    record_ok(&dir, &[], &["faults", "64"]);
    let rows = report_rows(&dir, &["report", "--by", "alloc-site"]);
    let block = at(&rows, "fault_block");
    assert_eq!(block["count"], "64", "{rows:#?}");
    // With the faults held (`--tid`: the main thread's), the events still stream, over them.
    let pid = dir.pids("allocs", "parquet")[0].to_string();
    let rows = report_rows(&dir, &["report", "--by", "alloc-site", "--tid", &pid]);
    assert_eq!(at(&rows, "fault_block")["count"], "64", "{rows:#?}");
    let out = dir.run(&["report", "--by", "alloc-site"]);
    let table = String::from_utf8_lossy(&out.stdout);
    assert!(
        table.contains(&format!("allocs.c:{}", site("allocs.c", "fault_touch"))),
        "{table}"
    );
}

/// `visualize --by-allocation` draws the first-touch flamegraph by where the memory was
/// allocated: the block's allocation line appears and the touching line (which the default
/// draws) does not (frames labelled by line).
#[test]
fn first_touch_flamegraph_by_allocation_stack() {
    let dir = Dir::new();
    record_ok(&dir, &[], &["faults", "64"]);
    let pid = dir.pids("allocs", "parquet")[0];
    let svg = || {
        std::fs::read_to_string(
            dir.path()
                .join(format!("fltrace-data-flamegraph-alloc-{pid}.svg")),
        )
        .expect("flamegraph written")
    };
    let block = format!("allocs.c:{}", site("allocs.c", "fault_block"));
    let touch = format!("allocs.c:{}", site("allocs.c", "fault_touch"));
    assert!(dir.run(&["visualize", "--label", "line"]).status.success());
    let by_fault = svg();
    assert!(by_fault.contains(&touch), "{by_fault}");
    let by_allocation = ["visualize", "--by-allocation", "--label", "line"];
    assert!(dir.run(&by_allocation).status.success());
    let by_allocation = svg();
    assert!(by_allocation.contains(&block) && !by_allocation.contains(&touch));
}

/// The heatmap outlines the block the faults filled, labelled with its allocation site.
#[test]
fn heatmap_outlines_allocations() {
    let dir = Dir::new();
    record_ok(&dir, &[], &["faults", "64"]);
    let out = dir.run(&["heatmap", "-o", "heat.svg"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let svg = std::fs::read_to_string(dir.path().join("heat.svg")).expect("heatmap written");
    let label = format!(
        "<title>faults allocs.c:{}</title>",
        site("allocs.c", "fault_block")
    );
    assert!(svg.contains(&label), "{label} missing");
    let out = dir.run(&["heatmap", "-o", "plain.svg", "--allocs", "0"]);
    assert!(out.status.success());
    let plain = std::fs::read_to_string(dir.path().join("plain.svg")).expect("heatmap written");
    assert!(!plain.contains("allocs.c:"), "no allocation drawn");
}

/// Signals arriving in the middle of traced calls, whose handler itself maps memory: every
/// malloc is still recorded exactly once, and the handler's own calls are recorded (those
/// that interrupted the tracer itself pass untraced, never twice).
#[test]
fn calls_survive_signals() {
    let dir = Dir::new();
    let out = record_allocs(&dir, &[], &["signals", "200000"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let handled: u64 = String::from_utf8_lossy(&out.stdout)
        .trim()
        .strip_prefix("handled ")
        .and_then(|n| n.parse().ok())
        .expect("the workload says how many signals it handled");
    let rows = report_rows(&dir, &["report", "--allocs"]);
    assert_eq!(
        numbers(at(&rows, "interrupted"), &TOTALS),
        [200_000, 6_400_000, 0, 0, 200_000]
    );
    let mapped = numbers(at(&rows, "handler_mmap"), &["allocs"])[0];
    assert!(
        mapped > 0 && mapped <= handled,
        "{mapped} mappings traced for {handled} signals"
    );
}

/// A Rust program: its runtime calls pthread_getattr_np before main, which allocates with a
/// lock held; the tracer must not take that lock again. The page-aligned block is found at
/// its `std::alloc::alloc` line with its exact size.
#[test]
fn rust_program_allocations() {
    let dir = Dir::new();
    let out = record_program(&dir, &[], &workloads().touch_rs, &["64"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let rows = report_rows(&dir, &["report", "--allocs"]);
    let row = row_at(&rows, "touch.rs", "rust_alloc");
    assert_eq!(numbers(row, &["allocs", "bytes"]), [1, 64 * 4096]);
}

/// C++: new, new[] and a vector's growth reach the allocator through libstdc++ and are
/// reported at the program's own lines, with their exact sizes.
#[test]
fn cpp_allocations_are_at_their_lines() {
    let dir = Dir::new();
    let out = record_program(&dir, &[], &workloads().objects, &["1000"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let rows = report_rows(&dir, &["report", "--allocs"]);
    let at_cpp = |name: &str| numbers(row_at(&rows, "objects.cpp", name), &TOTALS[..4]);
    // 1000 nodes of 48 bytes, all deleted but the head.
    assert_eq!(at_cpp("cpp_new"), [1000, 48_000, 1, 48]);
    assert_eq!(at_cpp("cpp_array"), [1, 4000, 1, 4000]);
    // The vector doubles from 1 to 1024 ints: 11 blocks, 4 + 8 + ... + 4096 bytes, all freed.
    assert_eq!(at_cpp("cpp_vector"), [11, 8188, 0, 0]);
}

/// A program that aborts keeps every allocation it made up to the end.
#[test]
fn crash_keeps_every_allocation() {
    let dir = Dir::new();
    let out = record_allocs(&dir, &[], &["crash", "100"]);
    assert_eq!(out.status.code(), Some(128 + 6), "abort is SIGABRT");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("fltrace: the command was killed by SIGABRT"),
        "{err}"
    );
    let rows = report_rows(&dir, &["report", "--allocs"]);
    assert_eq!(
        numbers(at(&rows, "crash"), &TOTALS)[..4],
        [100, 7200, 100, 7200]
    );
}

/// A library loaded with dlopen after the tracer started: its mmap has its own frames.
#[test]
fn dlopened_library_calls_have_their_stack() {
    let dir = Dir::new();
    let lib = workloads().libfault.to_string_lossy().into_owned();
    record_ok(&dir, &[], &["dlopen", &lib, "10"]);
    let rows = report_rows(&dir, &["report", "--allocs"]);
    let row = rows
        .iter()
        .find(|r| r["function"] == "lib_fill")
        .unwrap_or_else(|| panic!("no lib_fill site in {rows:#?}"));
    assert!(row["file"].ends_with("libfault.c"), "{row:?}");
    assert_eq!(numbers(row, &["allocs", "bytes"]), [1, 40_960]);
}

/// With far memory on, the runtime's allocator serves the program and the same calls are
/// traced.
#[test]
fn allocations_are_traced_under_far_memory() {
    let dir = Dir::new();
    record_ok(&dir, &["-L", "16", "-M", "256"], &["sites"]);
    let rows = report_rows(&dir, &["report", "--allocs"]);
    assert_eq!(
        numbers(at(&rows, "repeated"), &TOTALS),
        [1000, 100_000, 0, 0, 1000]
    );
    assert_eq!(
        numbers(at(&rows, "leak"), &TOTALS)[..4],
        [3, 12_288, 3, 12_288]
    );
}

/// A running process: uprobes on its C library's allocator see every call after the attach,
/// with stacks.
#[test]
fn attached_process_allocations_come_from_uprobes() {
    use std::io::{BufRead, BufReader};
    use std::process::{Command, Stdio};
    let dir = Dir::new();
    let mut program = Command::new(&workloads().allocs)
        .args(["attach", "1000"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("workload starts");
    let mut ready = String::new();
    BufReader::new(program.stdout.take().expect("stdout"))
        .read_line(&mut ready)
        .expect("ready line");
    assert_eq!(ready.trim(), "ready");
    let recorder = dir
        .fltrace()
        .args(["record", "-q", "--allocs", "-p", &program.id().to_string()])
        .spawn()
        .expect("fltrace runs");
    // Time to place the probes (longer on a fresh machine, where the first attach reads
    // libc cold); then the program allocates and exits.
    std::thread::sleep(std::time::Duration::from_millis(4000));
    drop(program.stdin.take());
    assert!(program.wait().expect("workload ends").success());
    let out = recorder.wait_with_output().expect("fltrace ends");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let rows = report_rows(&dir, &["report", "--allocs"]);
    assert_eq!(
        numbers(at(&rows, "attached"), &TOTALS)[..4],
        [1000, 56_000, 500, 28_000]
    );
    assert_eq!(at(&rows, "attached")["function"], "attached");
}

/// Allocation reports on a recording without allocations say how to get them.
#[test]
fn allocation_reports_need_allocation_data() {
    let dir = Dir::new();
    let w = workloads();
    dir.record(&[&w.faults], &["nested", "10"]);
    let out = dir.run(&["report", "--allocs"]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("record --allocs"), "{err}");
}

/// The summary's "N allocation calls with M distinct stacks", and the allocation rows the
/// recording holds, summed over its processes.
fn logged_and_kept(dir: &Dir, stderr: &str) -> (u64, u64) {
    logged_and_kept_in(dir.path(), stderr)
}

/// The calls a stopped allocation log kept, as fltrace's warning says.
fn calls_kept_said(err: &str) -> u64 {
    err.lines()
        .find_map(|l| {
            l.strip_prefix("fltrace: warning: an allocation log could not grow")?
                .split_once("; ")?
                .1
                .split_once(" calls kept, later ones not recorded")?
                .0
                .parse()
                .ok()
        })
        .unwrap_or_else(|| panic!("nothing said of the stop: {err}"))
}

/// [`logged_and_kept`] of a recording in `dir`.
fn logged_and_kept_in(dir: &Path, stderr: &str) -> (u64, u64) {
    let logged = stderr
        .lines()
        .find_map(|l| {
            l.strip_prefix("fltrace: ")?
                .strip_suffix(" distinct stacks")?
                .split_once(" allocation calls with ")?
                .0
                .parse()
                .ok()
        })
        .unwrap_or_else(|| panic!("no allocation summary in {stderr}"));
    let mut rows = 0;
    let mut pids: Vec<u32> = std::fs::read_dir(dir)
        .expect("dir")
        .filter_map(|e| {
            fltrace_trace::files::pid_of(e.ok()?.file_name().to_str()?, "allocs", "parquet")
        })
        .collect();
    pids.sort_unstable();
    for pid in pids {
        let recording = fltrace_trace::Recording::with_pid(dir, pid).expect("recording");
        rows += recording
            .load_allocs(pid)
            .expect("allocation table")
            .0
            .len() as u64;
    }
    (logged, rows)
}

/// Debian's redis-server links jemalloc: every block goes back to jemalloc (its
/// `malloc_usable_size` on a block glibc had made crashed it), and the program runs as it does
/// untraced.
#[test]
fn jemalloc_program_runs_traced() {
    let dir = Dir::new();
    let out = record_program(&dir, &[], Path::new("redis-server"), &["--version"]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("malloc=jemalloc"),
        "{out:?}"
    );
    let rows = report_rows(&dir, &["report", "--allocs"]);
    assert!(rows.iter().any(|r| r["function"] == "zmalloc"), "{rows:#?}");
}

/// redis under redis-benchmark: every call the tracer logged is in the table, none dropped,
/// and redis's own allocator wrappers are the top sites, with at least one block per request.
#[test]
fn redis_under_benchmark_keeps_every_call() {
    use std::process::{Command, Stdio};
    let dir = Dir::new();
    let port = free_port();
    let server = dir
        .fltrace()
        .args(["record", "--allocs", "--", "redis-server", "--port", &port])
        .args(["--bind", "127.0.0.1", "--save", "", "--appendonly", "no"])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("fltrace runs");
    let cli = |args: &[&str]| {
        Command::new("redis-cli")
            .args(["-p", &port])
            .args(args)
            .output()
            .expect("redis-cli runs")
    };
    let started = std::time::Instant::now();
    while !String::from_utf8_lossy(&cli(&["ping"]).stdout).contains("PONG") {
        assert!(
            started.elapsed() < std::time::Duration::from_secs(60),
            "redis did not answer"
        );
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    let bench = Command::new("redis-benchmark")
        .args(["-p", &port, "-n", "2000", "-t", "set,lpush", "-q"])
        .output()
        .expect("redis-benchmark runs");
    // Shut down whatever happened, so that the recorder ends.
    cli(&["shutdown", "nosave"]);
    let out = wait_within(server, LIMIT);
    assert!(bench.status.success(), "{bench:?}");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(!err.contains("could not be written"), "{err}");
    let (logged, kept) = logged_and_kept(&dir, &err);
    assert_eq!(logged, kept, "{err}");
    let rows = report_rows(&dir, &["report", "--allocs"]);
    let zmalloc = rows
        .iter()
        .find(|r| r["function"] == "zmalloc")
        .unwrap_or_else(|| panic!("no zmalloc site in {rows:#?}"));
    assert!(numbers(zmalloc, &["allocs"])[0] >= 4000, "{zmalloc:?}");
}

/// A small tmpfs the test mounts, unmounted whatever happens.
struct SmallFs(tempfile::TempDir);

impl SmallFs {
    fn mount(size: &str) -> SmallFs {
        let dir = tempfile::tempdir().expect("mount point");
        let status = std::process::Command::new("mount")
            .args([
                "-t",
                "tmpfs",
                "-o",
                &format!("size={size},mode=0755"),
                "fltrace-allocs-full",
            ])
            .arg(dir.path())
            .status()
            .expect("mount runs");
        assert!(status.success(), "mounting a tmpfs");
        SmallFs(dir)
    }
}

impl Drop for SmallFs {
    fn drop(&mut self) {
        let _ = std::process::Command::new("umount")
            .arg(self.0.path())
            .status();
    }
}

/// The allocation log fills its file system: the tracer stops for good at the first segment
/// it cannot have (it retried on every call, and the program crawled for hours), the program
/// runs to its end with its own exit status, and the summary's count of the calls kept is the
/// table's.
#[test]
fn full_file_system_stops_allocation_tracing_for_good() {
    let fs = SmallFs::mount("16m");
    let dir = Dir::new();
    let out = output_within(
        dir.fltrace()
            .args(["record", "--allocs", "-o"])
            .arg(fs.0.path())
            .args(["--", "sh", "-c"])
            .arg(format!(
                "{} malloc4m 10000000 && exit 3",
                workloads().allocs.display()
            )),
        LIMIT,
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(3), "{err}");
    let kept_said = calls_kept_said(&err);
    let (logged, kept) = logged_and_kept_in(fs.0.path(), &err);
    assert_eq!((kept_said, logged), (kept, kept), "{err}");
    // The log stopped well short of the 10 million pairs, and what it kept is whole.
    assert!(kept > 100_000 && kept < 20_000_000, "{kept}");
    assert!(!err.contains("damaged"), "{err}");
}

/// The log of a large process fills a 96 MiB file system while the drain converts it (issue
/// 28): the drain gives up once less than its 32 MiB reserve is left, its table leaves the
/// spool while the program runs and the log grows on into the room it had taken, then the log
/// stops; every call kept is in the tables, as many as the summary says.
#[test]
fn drain_gives_up_its_room_to_a_log_filling_its_file_system() {
    use std::sync::atomic::{AtomicBool, Ordering};
    let fs = SmallFs::mount("96m");
    let dir = Dir::new();
    let done = std::sync::Arc::new(AtomicBool::new(false));
    // Watches the spool: the drain's table seen, then gone while the log still grew.
    let watch = {
        let (done, out) = (done.clone(), fs.0.path().to_owned());
        std::thread::spawn(move || {
            let (mut table_seen, mut log_when_gone, mut log_after) = (false, None, 0u64);
            while !done.load(Ordering::Acquire) {
                let spools = std::fs::read_dir(&out).into_iter().flatten().flatten();
                for spool in spools.filter(|e| {
                    e.file_name()
                        .to_string_lossy()
                        .starts_with(".fltrace-allocs-")
                }) {
                    let names: Vec<String> = std::fs::read_dir(spool.path())
                        .into_iter()
                        .flatten()
                        .flatten()
                        .map(|e| e.file_name().to_string_lossy().into_owned())
                        .collect();
                    let table = names.iter().find_map(|n| {
                        n.strip_prefix("allocs-")?
                            .strip_suffix(".parquet")?
                            .parse::<u32>()
                            .ok()
                    });
                    let largest_log = names
                        .iter()
                        .filter(|n| n.starts_with("log-") && n.as_str() != "log-clock")
                        .map(|n| log_bytes_taken(&spool.path().join(n)))
                        .max()
                        .unwrap_or(0);
                    match (table, log_when_gone) {
                        (Some(_), None) => table_seen = true,
                        (None, None) if table_seen && largest_log > 0 => {
                            log_when_gone = Some(largest_log);
                        }
                        _ => {}
                    }
                    log_after = log_after.max(largest_log);
                }
                std::thread::sleep(std::time::Duration::from_millis(2));
            }
            (table_seen, log_when_gone, log_after)
        })
    };
    let out = output_within(
        dir.fltrace()
            .args(["record", "-v", "--allocs", "-o"])
            .arg(fs.0.path())
            .args(["--", "sh", "-c"])
            .arg(format!(
                "{} malloc4m 40000000 && exit 3",
                workloads().allocs.display()
            )),
        LIMIT,
    );
    done.store(true, Ordering::Release);
    let (table_seen, log_when_gone, log_after) = watch.join().expect("watcher");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(3), "{err}");
    let left_mib: u64 = err
        .lines()
        .find_map(|l| {
            l.strip_prefix("fltrace: info: the allocation logs convert after the program ends: ")?
                .strip_suffix(" MiB left on the file system, which the logs need more")?
                .parse()
                .ok()
        })
        .unwrap_or_else(|| panic!("the drain did not give up: {err}"));
    assert!(left_mib < 32, "{left_mib}");
    assert!(table_seen, "no drain table in the spool: {err}");
    let log_when_gone = log_when_gone.expect("the drain's table never left the spool");
    // The log took more than it had when the table went: the room was the log's again.
    assert!(log_after > log_when_gone, "{log_after} {log_when_gone}");
    let kept_said = calls_kept_said(&err);
    let (logged, kept) = logged_and_kept_in(fs.0.path(), &err);
    assert_eq!((kept_said, logged), (kept, kept), "{err}");
    assert!(!err.contains("damaged"), "{err}");
}

/// Bytes taken in the allocation log at `path` (the header's next-chunk offset), 0 without one.
fn log_bytes_taken(path: &Path) -> u64 {
    use std::os::unix::fs::FileExt;
    let mut header = [0u8; 24];
    std::fs::File::open(path)
        .and_then(|file| file.read_exact_at(&mut header, 0))
        .map_or(0, |()| {
            u64::from_ne_bytes(header[16..24].try_into().expect("8 bytes"))
        })
}

/// `-p` of a running redis: the uprobes go on the allocator it links (jemalloc), not on the
/// C library's it never calls (which recorded "0 allocation calls"), and the summary says
/// where they went.
#[test]
fn attached_jemalloc_program_is_probed_in_jemalloc() {
    use std::process::{Command, Stdio};
    let dir = Dir::new();
    let port = free_port();
    let mut server = Command::new("redis-server")
        .args(["--port", &port, "--bind", "127.0.0.1", "--save", ""])
        .args(["--appendonly", "no"])
        .stdout(Stdio::null())
        .spawn()
        .expect("redis-server starts");
    let cli = |args: &[&str]| {
        Command::new("redis-cli")
            .args(["-p", &port])
            .args(args)
            .output()
            .expect("redis-cli runs")
    };
    let started = std::time::Instant::now();
    while !String::from_utf8_lossy(&cli(&["ping"]).stdout).contains("PONG") {
        if started.elapsed() > std::time::Duration::from_secs(60) {
            let _ = server.kill();
            panic!("redis did not answer");
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    let recorder = dir
        .fltrace()
        .args(["record", "--allocs", "-p", &server.id().to_string()])
        .stderr(Stdio::piped())
        .spawn()
        .expect("fltrace runs");
    // Time to place the probes, as in `attached_process_allocations_come_from_uprobes`.
    std::thread::sleep(std::time::Duration::from_millis(4000));
    let bench = Command::new("redis-benchmark")
        .args(["-p", &port, "-n", "500", "-t", "set", "-q"])
        .output()
        .expect("redis-benchmark runs");
    cli(&["shutdown", "nosave"]);
    let _ = server.wait();
    let out = wait_within(recorder, LIMIT);
    assert!(bench.status.success(), "{bench:?}");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(
        err.contains("(uprobes on malloc, calloc, realloc, free,")
            && err.contains(" in libjemalloc.so.2)"),
        "{err}"
    );
    let rows = report_rows(&dir, &["report", "--allocs"]);
    let zmalloc = rows
        .iter()
        .find(|r| r["function"] == "zmalloc")
        .unwrap_or_else(|| panic!("no zmalloc site in {rows:#?}"));
    assert!(numbers(zmalloc, &["allocs"])[0] >= 500, "{zmalloc:?}");
}

/// Allocations in phases (workloads/phases.c): the peak, what is alive at it, the leaks and
/// the temporaries, exact, from the one-pass report (and the whole-table one, which
/// `Dir::run` compares with it).
#[test]
fn phases_peak_leaks_and_temporaries_are_exact() {
    let dir = Dir::new();
    let phases = build_c_workload(dir.path(), "phases.c");
    let out = record_program(&dir, &[], &phases, &[]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let rows = report_rows(&dir, &["report", "--allocs"]);
    let at = |name: &str| row_at(&rows, "phases.c", name);
    let columns = [TOTALS.as_slice(), &["peak_bytes", "peak_allocs"]].concat();
    let expect = |name: &str, totals: [u64; 7]| {
        assert_eq!(numbers(at(name), &columns), totals, "{name}");
    };
    // allocs, bytes, leaked allocs and bytes, temporary, bytes and blocks at the peak.
    expect("first", [100, 100_000, 40, 40_000, 0, 100_000, 100]);
    // The first free follows the last allocation, of its size and stack: one temporary.
    expect("second", [50, 100_000, 0, 0, 1, 100_000, 50]);
    expect("temporary", [1000, 64_000, 0, 0, 1000, 0, 0]);
    expect("leak", [3, 1500, 3, 1500, 0, 0, 0]);
    let out = dir.run(&["report", "--allocs", "--format", "json"]);
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    assert_eq!(json["peaks"][0]["bytes"], 200_000, "{json}");
    assert_eq!(json["heap"]["leaked_bytes"], 41_500, "{json}");
}

/// Temporary allocations as heaptrack counts them (workloads/temporaries.c, whose comment
/// derives each site's count): per `file:line` exactly heaptrack's own count, which
/// heaptrack_print gives for the same program, and 4,000 in all. The rule fltrace had (a
/// block freed by its thread before that thread's next allocation) counted 1,000 at `second`
/// (heaptrack: none) and none at `pair`'s first blocks.
#[test]
fn temporaries_are_counted_as_heaptrack_counts_them() {
    let dir = Dir::new();
    let program = build_c_workload(dir.path(), "temporaries.c");
    let out = record_program(&dir, &[], &program, &[]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let rows = report_rows(&dir, &["report", "--allocs"]);
    let counted = |name: &str| {
        numbers(
            row_at(&rows, "temporaries.c", name),
            &["allocs", "temporary"],
        )
    };
    let expected = [
        ("alone", [1000, 1000]),
        ("pair", [2000, 1000]),
        ("lifo", [2000, 1000]),
        ("first", [1000, 0]),
        ("second", [1000, 0]),
        ("sizes", [2000, 0]),
        ("grown", [500, 500]),
        ("regrown", [500, 500]),
    ];
    for (name, totals) in expected {
        assert_eq!(counted(name), totals, "{name}");
    }
    let out = dir.run(&["report", "--allocs", "--format", "json"]);
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    assert_eq!(json["heap"]["temporary"], 4000, "{json}");

    // heaptrack on the same program: its temporaries per line of temporaries.c.
    let data = dir.path().join("heaptrack.temporaries");
    let traced = std::process::Command::new("heaptrack")
        .arg("-o")
        .arg(&data)
        .arg(&program)
        .output()
        .expect("heaptrack runs (scripts/setup.sh installs it)");
    assert!(traced.status.success(), "{traced:?}");
    let printed = std::process::Command::new("heaptrack_print")
        .args([
            "--print-peaks=0",
            "--print-allocators=0",
            "--print-temporary=1",
            "-n",
            "50",
            "-f",
        ])
        .arg(dir.path().join("heaptrack.temporaries.zst"))
        .output()
        .expect("heaptrack_print runs");
    assert!(printed.status.success(), "{printed:?}");
    let text = String::from_utf8_lossy(&printed.stdout);
    let heaptrack = heaptrack_temporaries(&text, "temporaries.c");
    for (name, [_, temporary]) in expected {
        let line = site("temporaries.c", name);
        assert_eq!(
            heaptrack.get(&line).copied().unwrap_or(0),
            temporary,
            "heaptrack at temporaries.c:{line} ({name}):\n{text}"
        );
    }
    assert_eq!(heaptrack.values().sum::<u64>(), 4000, "{text}");
}

/// heaptrack_print's "MOST TEMPORARY ALLOCATIONS": temporaries per line of `file`, from each
/// entry's first `at FILE:LINE`.
fn heaptrack_temporaries(text: &str, file: &str) -> HashMap<u32, u64> {
    let mut counts = HashMap::new();
    let mut entry: Option<u64> = None;
    for line in text.lines() {
        if let Some((count, rest)) = line.split_once(" temporary allocations of ") {
            // An entry ends with "from", its merged backtraces (not counted again) "from:".
            entry = rest
                .ends_with(" from")
                .then(|| count.trim().parse().ok())
                .flatten();
        } else if let Some(at) = line.trim().strip_prefix("at ")
            && let Some((path, number)) = at.rsplit_once(':')
            && path.ends_with(file)
            && let (Some(count), Ok(number)) = (entry, number.parse::<u32>())
        {
            *counts.entry(number).or_default() += count;
            entry = None;
        }
    }
    counts
}

/// 40 million calls (20 million malloc/free pairs of malloc-4m) reported under an address
/// space cap of 1 GiB: holding every call took about 84 bytes a call (3,375 MB for these 40M
/// in the whole-table path); the one pass holds the 1,024 live blocks and a few stacks.
#[test]
fn forty_million_calls_report_under_a_memory_cap() {
    let dir = Dir::new();
    let out = record_allocs(&dir, &[], &["malloc4m", "20000000"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = std::process::Command::new("prlimit")
        .arg(format!("--as={}", 1u64 << 30))
        .arg(env!("CARGO_BIN_EXE_fltrace"))
        .args(["report", "--allocs", "--format", "csv", "--top", "0"])
        .current_dir(dir.path())
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .output()
        .expect("prlimit runs");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let rows = csv_rows(&String::from_utf8_lossy(&out.stdout));
    let row = at(&rows, "malloc4m");
    // Every seventh of the last 1,024 ring slots is still held at the end.
    assert_eq!(
        numbers(row, &["allocs", "leaked_allocs"]),
        [20_000_000, 1024]
    );
}

/// The allocation pictures of a 40M-call recording (20M malloc/free pairs) draw under a
/// 1 GiB address-space cap, as the report does: the flamegraph by allocation stack puts the
/// faults in malloc4m's blocks on its line, and the heatmap outlines the five largest blocks:
/// four of malloc4m's largest (527 bytes), labelled with that line, and stdout's buffer.
/// The charts of `visualize --allocs` too (issue 40): every call counted, malloc4m's most
/// heap at once and the whole heap's peak exactly as the loop makes them (replayed below),
/// the flamegraphs of the peak and of the leaks holding those bytes.
#[test]
fn forty_million_calls_visualize_under_a_memory_cap() {
    let dir = Dir::new();
    let out = record_allocs(&dir, &[], &["malloc4m", "20000000"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let capped = |args: &[&str]| {
        let out = std::process::Command::new("prlimit")
            .arg(format!("--as={}", 1u64 << 30))
            .arg(env!("CARGO_BIN_EXE_fltrace"))
            .args(args)
            .current_dir(dir.path())
            .env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .output()
            .expect("prlimit runs");
        assert!(
            out.status.success(),
            "fltrace {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        out
    };
    let line = format!("allocs.c:{}", site("allocs.c", "malloc4m"));
    capped(&["visualize", "--by-allocation", "--label", "line"]);
    let pid = dir.pids("allocs", "parquet")[0];
    let svg = std::fs::read_to_string(
        dir.path()
            .join(format!("fltrace-data-flamegraph-allocstack-{pid}.svg")),
    )
    .expect("flamegraph by allocation stack written");
    assert!(svg.contains(&line), "no {line} in the flamegraph");
    capped(&["heatmap", "--allocs", "5", "-o", "heat.svg"]);
    let svg = std::fs::read_to_string(dir.path().join("heat.svg")).expect("heatmap written");
    let label = format!("<title>malloc4m {line}</title>");
    // The largest is stdout's 4 KiB buffer, which printf allocates in main.
    assert_eq!(
        (
            svg.matches(&label).count(),
            svg.matches("<title>main allocs.c:").count()
        ),
        (4, 1),
        "{label} not on four of the five outlined blocks; the blocks' titles: {:?}",
        svg.match_indices("<title>")
            .map(|(at, _)| svg[at..].split("</title>").next().unwrap_or_default())
            .filter(|title| !title.contains(": 0x"))
            .collect::<Vec<_>>()
    );

    // malloc4m's loop replayed: the bytes its site holds at its most, and at the end.
    let (mut ring, mut live, mut most) = ([0u64; 1024], 0u64, 0u64);
    for i in 0..20_000_000u64 {
        let size = 16 + (i * 37) % 512;
        live += size;
        most = most.max(live);
        if i % 7 == 0 {
            let slot = (i % 1024) as usize;
            live -= ring[slot];
            ring[slot] = size;
        } else {
            live -= size;
        }
    }
    // The constructor's 333 bytes are kept from the start, stdout's 4 KiB buffer from the
    // printf after the loop.
    let (early, stdout) = (333u64, 4096u64);
    let peak = (early + most).max(early + live + stdout);
    let out = capped(&["visualize", "--allocs", "--format", "json"]);
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        format!("./fltrace-data-allocmem-{pid}.json")
    );
    let json: serde_json::Value = serde_json::from_slice(
        &std::fs::read(dir.path().join(format!("fltrace-data-allocmem-{pid}.json")))
            .expect("allocmem json"),
    )
    .expect("json");
    let malloc4m = json["sites"]
        .as_array()
        .expect("sites")
        .iter()
        .find(|s| s["label"] == format!("malloc4m {line}"))
        .unwrap_or_else(|| panic!("no malloc4m among {}", json["sites"]));
    assert_eq!(
        (
            json["allocs"].as_u64(),
            malloc4m["most_live_bytes"].as_u64(),
            json["peak"]["bytes"].as_u64()
        ),
        (Some(20_000_002), Some(most), Some(peak))
    );
    let out = capped(&["visualize", "--allocs"]);
    let written: Vec<String> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| l.trim_start_matches("./").to_owned())
        .collect();
    assert_eq!(
        written,
        [
            "allocmem",
            "allocrate",
            "allocsizes",
            "flamegraph-peak",
            "flamegraph-leaks"
        ]
        .map(|kind| format!("fltrace-data-{kind}-{pid}.svg"))
    );
    let svg = |kind: &str| {
        std::fs::read_to_string(dir.path().join(format!("fltrace-data-{kind}-{pid}.svg")))
            .unwrap_or_else(|e| panic!("{kind}: {e}"))
    };
    assert!(svg("allocmem").contains(&format!("malloc4m {line}")));
    assert!(svg("allocrate").contains("heap allocations (20,000,002 in all)"));
    let leaked = early + live + stdout;
    let total = |n: u64| {
        let digits = n.to_string();
        let mut grouped = String::new();
        for (i, c) in digits.chars().enumerate() {
            if i > 0 && (digits.len() - i).is_multiple_of(3) {
                grouped.push(',');
            }
            grouped.push(c);
        }
        format!("<title>all ({grouped} bytes, 100%)")
    };
    for (kind, bytes) in [("flamegraph-leaks", leaked), ("flamegraph-peak", peak)] {
        assert!(
            svg(kind).contains(&total(bytes)),
            "{kind} without {}",
            total(bytes)
        );
    }
}

/// A program started after its parent changed directory (a shell's `cd`, `make -C`) is traced
/// too: the tracer's log path is absolute, so the child finds the recorder's clock page and
/// logs from `/` as from the recording's directory (a relative one left the child untraced,
/// "the recorder's clock page is missing").
#[test]
fn a_child_started_after_a_cd_is_traced() {
    let dir = Dir::new();
    let script = format!("cd / && {} malloc4m 1000", workloads().allocs.display());
    let out = record_program(&dir, &[], Path::new("/bin/bash"), &["-c", &script]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "record failed: {stderr}");
    assert!(!stderr.contains("clock page is missing"), "{stderr}");
    let rows = report_rows(&dir, &["report", "--allocs"]);
    assert_eq!(
        numbers(at(&rows, "malloc4m"), &["allocs", "leaked_allocs"]),
        [1000, 143]
    );
}

/// A child made by vfork that execs the program (dash runs commands so, python's subprocess
/// through posix_spawn) has its allocations filed under the program's image: no fork
/// handler ran in the shared image, so its first log is the program's, and its calls are
/// symbolized against the program's mappings (they were all `[unknown]`, filed under the
/// parent's image). The process's charts name the site as the report does.
#[test]
fn a_vforked_child_that_execs_has_its_sites() {
    let program = workloads().allocs.display().to_string();
    let spawn = format!("import subprocess; subprocess.run(['{program}', 'malloc4m', '1000'])");
    for (shell, args) in [
        (
            "/bin/sh",
            ["-c".to_owned(), format!("{program} malloc4m 1000; true")],
        ),
        ("python3", ["-c".to_owned(), spawn]),
    ] {
        let dir = Dir::new();
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let out = record_program(&dir, &[], Path::new(shell), &args);
        assert!(
            out.status.success(),
            "{shell}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let rows = report_rows(&dir, &["report", "--allocs"]);
        assert_eq!(
            numbers(at(&rows, "malloc4m"), &["allocs", "leaked_allocs"]),
            [1000, 143],
            "{shell}"
        );
        let out = dir.run(&["visualize", "--allocs", "--format", "json"]);
        assert!(out.status.success(), "{shell}: {out:?}");
        let label = format!("malloc4m allocs.c:{}", site("allocs.c", "malloc4m"));
        let charted = String::from_utf8_lossy(&out.stdout)
            .lines()
            .filter(|path| {
                std::fs::read_to_string(dir.path().join(path))
                    .is_ok_and(|json| json.contains(&format!("\"label\": \"{label}\"")))
            })
            .count();
        assert_eq!(charted, 1, "{shell}: one process's chart names {label}");
    }
}
