//! Fault sites and complete stacks in code built without frame pointers.

use super::util::*;

/// Every fault of the nested workload is at the fill line, exactly as many as pages, and the
/// stack names each caller's line of call (not the line after), out to `_start`.
#[test]
fn nested_calls_have_exact_lines_and_complete_stacks() {
    let w = workloads();
    let dir = Dir::new();
    dir.record(&[&w.faults], &["nested", "300"]);
    let by_line = dir.report_json(&["--by", "line"]);
    assert_eq!(
        count_at(&by_line, "faults.c", site("faults.c", "fill")),
        300
    );
    assert_eq!(by_line["lost"], 0);

    let by_stack = dir.report_json(&["--by", "stack"]);
    let stack = stack_at(&by_stack, "faults.c", site("faults.c", "fill"));
    let ours: Vec<(String, u64)> = stack
        .iter()
        .filter(|(_, file, _)| file == "faults.c")
        .map(|(f, _, l)| (f.clone(), *l))
        .collect();
    assert_eq!(
        ours,
        vec![
            ("fill".to_owned(), site("faults.c", "fill") as u64),
            ("level2".to_owned(), site("faults.c", "level2") as u64),
            ("level1".to_owned(), site("faults.c", "level1") as u64),
            ("main".to_owned(), site("faults.c", "main") as u64),
        ]
    );
    assert_eq!(
        stack.last().map(|f| f.0.as_str()),
        Some("_start"),
        "{stack:?}"
    );
}

/// Loads are reported as reads, on the reading line.
#[test]
fn read_faults_are_reads() {
    let w = workloads();
    let dir = Dir::new();
    dir.record(&[&w.faults], &["read", "64"]);
    let report = dir.report_json(&["--by", "line"]);
    let group = groups(&report)
        .find(|g| g["line"] == site("faults.c", "read"))
        .expect("read site");
    assert_eq!(
        (group["count"].as_u64(), group["kind"].as_str()),
        (Some(64), Some("read"))
    );
}

/// Threads' stacks reach the thread start; each thread is its own tid in the trace.
#[test]
fn thread_stacks_reach_thread_start() {
    let w = workloads();
    let dir = Dir::new();
    dir.record(&[&w.faults], &["threads", "3", "50"]);
    let report = dir.report_json(&["--by", "stack"]);
    let site_line = site("faults.c", "thread");
    // By file and line: a fault of the C library's start-up or exit at a line of the same
    // number (dl-fini.c:80 once, another at line 76 in a loaded suite) is not the site's.
    let at_site = |g: &&serde_json::Value| {
        g["line"] == site_line && g["file"].as_str().is_some_and(|f| f.ends_with("faults.c"))
    };
    let total: u64 = groups(&report)
        .filter(at_site)
        .map(|g| g["count"].as_u64().unwrap_or(0))
        .sum();
    let summary: Vec<String> = groups(&report)
        .filter(|g| g["line"] == site_line)
        .chain(groups(&report).take(8))
        .map(|g| {
            format!(
                "{} {} {}:{} {}",
                g["count"], g["function"], g["file"], g["line"], g["kind"]
            )
        })
        .collect();
    assert_eq!(
        total, 150,
        "lost {}, the groups at the line, then the largest: {summary:?}",
        report["lost"]
    );
    let stack = stack_at(&report, "faults.c", site_line);
    let outermost = stack.last().map(|f| f.0.as_str());
    assert!(
        matches!(outermost, Some("clone3" | "start_thread")),
        "{stack:?}"
    );
    assert!(stack.iter().any(|f| f.0 == "worker"), "{stack:?}");

    let pid = dir.pids("faults", "parquet")[0];
    let recording = fltrace_trace::Recording::latest(dir.path()).expect("recording");
    let trace = recording.load(pid).expect("trace");
    let mut tids: Vec<u32> = trace
        .faults
        .iter()
        .map(|f| f.tid)
        .filter(|&t| t != pid)
        .collect();
    tids.sort_unstable();
    tids.dedup();
    assert_eq!(
        tids.len(),
        3,
        "faults from three threads besides the main one"
    );
}

/// A Rust release build (no frame pointers) unwinds to main through std's runtime.
#[test]
fn rust_release_build_unwinds() {
    let w = workloads();
    let dir = Dir::new();
    dir.record(&[&w.touch_rs], &["500"]);
    let report = dir.report_json(&["--by", "stack"]);
    let line = site("touch.rs", "rust_fill");
    let total: u64 = groups(&report)
        .filter(|g| {
            g["file"].as_str().is_some_and(|f| f.ends_with("touch.rs")) && g["line"] == line
        })
        .map(|g| g["count"].as_u64().unwrap_or(0))
        .sum();
    assert_eq!(total, 500);
    let stack = stack_at(&report, "touch.rs", line);
    assert!(stack.iter().any(|f| f.0 == "touch::main"), "{stack:?}");
    assert_eq!(
        stack.last().map(|f| f.0.as_str()),
        Some("_start"),
        "{stack:?}"
    );
}

/// Faults inside a library loaded with dlopen are attributed to the library's source.
#[test]
fn dlopen_library_is_symbolized() {
    let w = workloads();
    let dir = Dir::new();
    let lib = w.libfault.to_str().expect("utf-8 path");
    dir.record(&[&w.faults], &["dlopen", lib, "40"]);
    let report = dir.report_json(&["--by", "line"]);
    let group = groups(&report)
        .find(|g| {
            g["file"]
                .as_str()
                .is_some_and(|f| f.ends_with("libfault.c"))
        })
        .expect("a group in libfault.c");
    assert_eq!(group["line"], site("libfault.c", "lib"));
    assert_eq!(group["count"], 40);
    assert_eq!(group["lib"], "libfault.so");
}

/// A malloc replacement (here libfault.so under jemalloc's file name, as Debian's redis-server
/// loads libjemalloc.so.2) is the system's, as glibc's allocator is: its faults count for the
/// program's line that called it, and for the library's own line with `--call-site leaf`.
/// (They counted for the allocator's code: 92% of redis-server's faults at one jemalloc
/// address, none at redis's code that called realloc.)
#[test]
fn malloc_replacement_library_is_not_the_call_site() {
    let w = workloads();
    let dir = Dir::new();
    let lib = dir.path().join("libjemalloc.so.2");
    std::fs::copy(&w.libfault, &lib).expect("copy of libfault.so");
    let lib = lib.to_str().expect("utf-8 path");
    dir.record(&[&w.faults], &["dlopen", lib, "40"]);
    let report = dir.report_json(&["--by", "line"]);
    assert_eq!(
        count_at(&report, "faults.c", site("faults.c", "lib_fill")),
        40,
        "{report}"
    );
    assert_eq!(
        count_at(&report, "libfault.c", site("libfault.c", "lib")),
        0,
        "{report}"
    );
    let leaf = dir.report_json(&["--by", "line", "--call-site", "leaf"]);
    assert_eq!(
        count_at(&leaf, "libfault.c", site("libfault.c", "lib")),
        40,
        "{leaf}"
    );
}

/// Every frame after the faulting instruction is a return address in code: none in no mapping
/// or in data (`[unknown]`, `[heap]`, `[stack]`). (The loader's first fault, at its `_start`,
/// had argc as its caller; a stack that changed before its live read ended in a heap word.)
#[test]
fn callers_are_always_in_code() {
    let w = workloads();
    let dir = Dir::new();
    dir.record(&[&w.faults], &["nested", "30"]);
    let report = dir.report_json(&["--by", "stack", "--call-site", "leaf"]);
    let mut stacks = 0;
    for group in groups(&report) {
        let frames = group["stack"].as_array().expect("a stack");
        stacks += 1;
        for frame in frames.iter().skip(1) {
            let lib = frame["lib"].as_str().unwrap_or("");
            assert!(
                !["[unknown]", "[heap]", "[stack]", "[anon]"].contains(&lib),
                "a caller in {lib}: {group}"
            );
        }
    }
    assert!(stacks > 5, "{report}");
    assert_eq!(count_at(&report, "faults.c", site("faults.c", "fill")), 30);
}

/// Faults on a file mapping are reads of the page cache, not first touches. The kernel maps
/// neighbouring cached pages on each fault (fault-around), so there are at most as many
/// faults as pages.
#[test]
fn file_backed_mapping_faults() {
    let w = workloads();
    let dir = Dir::new();
    let file = dir.path().join("data.bin");
    std::fs::write(&file, vec![7u8; 32 * 4096]).expect("data file");
    dir.record(&[&w.faults], &["file", file.to_str().expect("utf-8"), "32"]);
    let report = dir.report_json(&["--by", "line"]);
    let group = groups(&report)
        .find(|g| g["line"] == site("faults.c", "read"))
        .expect("read site");
    let count = group["count"].as_u64().unwrap_or(0);
    assert!((1..=32).contains(&count), "{count} faults on 32 pages");
    assert_eq!(
        (group["kind"].as_str(), group["first_touches"].as_u64()),
        (Some("read"), Some(0))
    );
}

/// Faults the kernel takes in read(2) are recorded with the stack of the system call.
#[test]
fn syscall_faults_carry_the_callers_stack() {
    let w = workloads();
    let dir = Dir::new();
    dir.record(&[&w.faults], &["syscall", "16"]);
    let report = dir.report_json(&["--by", "stack"]);
    let total = sum_through(&report, "main", site("faults.c", "syscall"), "count");
    assert_eq!(total, 16);
}

/// A binary linked at a fixed address (not PIE) is symbolized as well.
#[test]
fn non_pie_binary_is_symbolized() {
    let w = workloads();
    let dir = Dir::new();
    dir.record(&[&w.faults_no_pie], &["nested", "70"]);
    let report = dir.report_json(&["--by", "line"]);
    assert_eq!(count_at(&report, "faults.c", site("faults.c", "fill")), 70);
}

/// Without debug info, functions come from the symbol table and lines are unknown.
#[test]
fn stripped_binary_falls_back_to_symbols() {
    let w = workloads();
    let dir = Dir::new();
    dir.record(&[&w.faults_stripped], &["nested", "60"]);
    let report = dir.report_json(&["--by", "stack"]);
    let group = groups(&report)
        .find(|g| {
            g["stack"]
                .as_array()
                .into_iter()
                .flatten()
                .next()
                .is_some_and(|f| f["function"] == "fill")
        })
        .expect("a stack with fill innermost");
    assert_eq!(group["count"], 60);
    let frames: Vec<&str> = group["stack"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|f| f["function"].as_str())
        .collect();
    assert!(
        frames.starts_with(&["fill", "level2", "level1", "main"]),
        "{frames:?}"
    );
    assert_eq!(group["stack"][0]["line"], 0);
}

/// Stacks 2,000 calls deep (about 160 KB in C, 96 KB in C++) and 300 calls of about 300 bytes
/// (90 KB), without frame pointers, that exit at once: by default every fault at the touch
/// line reaches `main`, from the copy of the live stack alone (no live read could help: the
/// process is gone when its faults are read), and none is truncated; the summary's count of
/// faults with truncated stacks is exactly the data's, as are `report`'s JSON and the folded
/// stacks'.
#[test]
fn deep_stacks_reach_main_by_default() {
    const PAGES: u64 = 64;
    let w = workloads();
    let cases = [
        (&w.deep_c, "deep_c", "2000", ""),
        (&w.deep_cpp, "deep_cpp", "2000", ""),
        (&w.deep_c, "deep_c", "300", "wide"),
    ];
    for (program, name, depth, mode) in cases {
        let dir = Dir::new();
        let out = dir
            .fltrace()
            .args(["record", "--"])
            .arg(program)
            .args([PAGES.to_string().as_str(), depth, "0", mode])
            .output()
            .expect("fltrace runs");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{stderr}");
        let summary = summary_truncated(&stderr);

        // The data: each fault's stack as the stacks table classifies it.
        let pid = dir.pids("faults", "parquet")[0];
        let (faults, _) =
            fltrace_trace::read_faults(&fltrace_trace::files::faults(dir.path(), pid)).unwrap();
        let stacks =
            fltrace_trace::read_stacks(&fltrace_trace::files::stacks(dir.path(), pid)).unwrap();
        let end = |id: u32| stacks.iter().find(|s| s.id == id).map(|s| s.end);
        assert!(
            stacks
                .iter()
                .all(|s| s.end != fltrace_trace::StackEnd::Unknown),
            "every stack classified"
        );
        let in_data = faults
            .iter()
            .filter(|f| end(f.stack_id) == Some(fltrace_trace::StackEnd::Truncated))
            .count() as u64;
        assert_eq!(
            summary, in_data,
            "{name} {mode}: the summary line and the data"
        );
        let report = dir.report_json(&[]);
        assert_eq!(report["truncated_stack_faults"], in_data, "{name} {mode}");

        let folded = dir.run(&["report", "--format", "folded"]);
        let folded = String::from_utf8_lossy(&folded.stdout);
        let (mut under_truncated, mut touches) = (0, 0);
        for line in folded.lines() {
            let (stack, count) = line.rsplit_once(' ').expect("count");
            let count: u64 = count.parse().expect("count");
            let frames: Vec<&str> = stack.split(';').collect();
            assert_eq!(frames[0], name, "the process's own name as root: {line}");
            // `[truncated]` only ever right after the root.
            assert!(
                !frames[2..].contains(&"[truncated]"),
                "[truncated] at the root side only: {line}"
            );
            let truncated = frames.get(1) == Some(&"[truncated]");
            under_truncated += if truncated { count } else { 0 };
            if frames.last() == Some(&"touch") {
                touches += count;
                assert!(
                    !truncated && frames.contains(&"main"),
                    "{name} {mode}: a touch fault's stack reaches main: {line}"
                );
            }
        }
        // By line: `touch` itself may also take a stack-growth fault, when its frame begins
        // a new page (the stack's start is random within a page).
        assert!(touches >= PAGES, "{name} {mode}: {touches} faults in touch");
        let by_line = dir.report_json(&["--by", "line"]);
        assert_eq!(
            count_at(&by_line, "deep.c", site("deep.c", "deep_touch")),
            PAGES,
            "{name} {mode}: one fault per page at the touch line"
        );
        assert_eq!(
            under_truncated, in_data,
            "{name} {mode}: folded and the data"
        );

        // Whole, frame by frame: every fault at the touch line under exactly `depth + 1`
        // calls of the recursion, each at the line of its recursive call but the outermost,
        // called by `main` at the line of its call.
        let (recursion, call, from_main) = if mode == "wide" {
            ("descend_wide", "deep_wide_call", "deep_main_wide")
        } else {
            ("descend", "deep_call", "deep_main")
        };
        let depth: usize = depth.parse().expect("depth");
        let by_stack = dir.report_json(&["--by", "stack"]);
        let mut whole = 0;
        for g in groups(&by_stack) {
            let frames = g["stack"].as_array().expect("frames");
            let at = |f: &serde_json::Value| {
                let function = f["function"].as_str().unwrap_or("");
                let name = function.split('(').next().unwrap_or(function).to_owned();
                (name, f["line"].as_u64().unwrap_or(0) as u32)
            };
            if frames.first().map(&at) != Some(("touch".into(), site("deep.c", "deep_touch"))) {
                continue;
            }
            let names: Vec<(String, u32)> = frames.iter().map(at).collect();
            let calls: Vec<u32> = names
                .iter()
                .filter(|(n, _)| n == recursion)
                .map(|(_, line)| *line)
                .collect();
            assert_eq!(calls.len(), depth + 1, "{name} {mode}: {names:?}");
            assert!(
                calls.iter().all(|line| *line == site("deep.c", call)),
                "{name} {mode}: {calls:?}"
            );
            let main = names.iter().position(|(n, _)| n == "main");
            assert_eq!(
                main.map(|i| &names[i]),
                Some(&("main".to_owned(), site("deep.c", from_main))),
                "{name} {mode}: {names:?}"
            );
            assert_eq!(
                main.map(|i| &names[i - 1].0),
                Some(&recursion.to_owned()),
                "{name} {mode}"
            );
            whole += g["count"].as_u64().unwrap_or(0);
        }
        assert_eq!(whole, PAGES, "{name} {mode}: every touch fault whole");
    }
}

/// A ring too small for the faults (`--buffer-mb 10`: a 4 MiB ring shared by the CPUs, where
/// each fault 2,000 calls deep takes 160 KB) loses faults while the program touches 2,000
/// pages at once: the summary says how many, and that is exactly what the data misses at the
/// touch line (the program pauses before and after its burst, so that nothing else is lost);
/// the faults kept reach `main`.
#[test]
fn faults_the_ring_had_no_room_for_are_counted_lost() {
    const PAGES: u64 = 2000;
    let w = workloads();
    let dir = Dir::new();
    let out = dir
        .fltrace()
        .args(["record", "--buffer-mb", "10", "--"])
        .arg(&w.deep_c)
        .args([PAGES.to_string().as_str(), "2000", "500", "linger"])
        .output()
        .expect("fltrace runs");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let summary = stderr
        .lines()
        .find(|l| l.starts_with("fltrace: ") && l.contains(" recorder peak "))
        .unwrap_or_else(|| panic!("no summary line: {stderr}"));
    let lost: u64 = summary
        .split(", ")
        .find_map(|part| part.strip_suffix(" lost"))
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no lost figure in {summary}"));
    assert!(
        lost > 0,
        "a 4 MiB ring keeps up with 2,000 faults of 160 KB: {summary}"
    );
    assert!(
        stderr.contains(&format!("the kernel dropped {lost} fault records")),
        "{stderr}"
    );
    let by_line = dir.report_json(&["--by", "line"]);
    let kept = count_at(&by_line, "deep.c", site("deep.c", "deep_touch"));
    assert_eq!(kept + lost, PAGES, "{summary}");
    for (frames, count) in touch_stacks(&dir) {
        assert!(
            frames[1] != "[truncated]" && frames.iter().any(|f| f == "main"),
            "{count} touches do not reach main: {frames:?}"
        );
    }
}

/// A thread 2,000 calls deep, far beyond a 16 KiB copy (`--max-stack-copy 16384`), that
/// faults once, waits there (the recorder reads that first stack from the live thread
/// meanwhile), faults on 63 more pages, returns and exits at once: by the time the recorder
/// reads those 63 faults, the live stack is gone. Each of them still reaches `main`, its outer
/// frames taken from the thread's previous stack (counted as spliced in the stats file); with
/// `--exact-stacks`, none does, so the outer frames lie beyond the copy. The summary's
/// truncated figure equals the data's either way.
#[test]
fn deep_stacks_of_a_thread_that_moved_on_reach_main_by_default() {
    const PAGES: u64 = 64;
    let w = workloads();
    for (program, name) in [(&w.deep_c, "deep_c"), (&w.deep_cpp, "deep_cpp")] {
        for exact in [false, true] {
            let dir = Dir::new();
            let mut cmd = dir.fltrace();
            cmd.args(["record", "--max-stack-copy", "16384"]);
            if exact {
                cmd.arg("--exact-stacks");
            }
            let out = cmd
                .arg("--")
                .arg(program)
                .args([PAGES.to_string().as_str(), "2000", "1500"])
                .output()
                .expect("fltrace runs");
            let stderr = String::from_utf8_lossy(&out.stderr);
            assert!(out.status.success(), "{stderr}");

            let pid = dir.pids("faults", "parquet")[0];
            let (faults, _) =
                fltrace_trace::read_faults(&fltrace_trace::files::faults(dir.path(), pid)).unwrap();
            let stacks =
                fltrace_trace::read_stacks(&fltrace_trace::files::stacks(dir.path(), pid)).unwrap();
            let end = |id: u32| stacks.iter().find(|s| s.id == id).map(|s| s.end);
            let in_data = faults
                .iter()
                .filter(|f| end(f.stack_id) == Some(fltrace_trace::StackEnd::Truncated))
                .count() as u64;
            assert_eq!(
                summary_truncated(&stderr),
                in_data,
                "{name}: summary and data"
            );

            let folded = dir.run(&["report", "--format", "folded"]);
            let folded = String::from_utf8_lossy(&folded.stdout);
            let (mut touches, mut to_main) = (0, 0);
            for line in folded.lines() {
                let (stack, count) = line.rsplit_once(' ').expect("count");
                let count: u64 = count.parse().expect("count");
                let frames: Vec<&str> = stack.split(';').collect();
                if frames.last() == Some(&"touch") {
                    touches += count;
                    if frames.contains(&"main") && frames[1] != "[truncated]" {
                        to_main += count;
                    }
                }
            }
            // By line: `touch` itself may also take a stack-growth fault, when its frame
            // begins a new page (the stack's start is random within a page).
            let by_line = dir.report_json(&["--by", "line"]);
            assert_eq!(
                count_at(&by_line, "deep.c", site("deep.c", "deep_touch")),
                PAGES,
                "{name}: one fault per page at the touch line"
            );
            assert!(touches >= PAGES, "{name}: {touches} faults in touch");
            let stats = std::fs::read_to_string(fltrace_trace::files::stats(dir.path(), pid))
                .expect("stats file");
            let spliced: u64 = stats
                .lines()
                .last()
                .and_then(|l| {
                    l.split([' ', ','])
                        .find_map(|f| f.strip_prefix("stacks_spliced:"))
                })
                .and_then(|v| v.parse().ok())
                .unwrap_or_else(|| panic!("no stacks_spliced in {stats}"));
            if exact {
                assert_eq!(to_main, 0, "{name}: main is beyond the copy:\n{folded}");
                assert_eq!(spliced, 0, "{name}: exact stacks infer nothing");
            } else {
                assert_eq!(
                    to_main, touches,
                    "{name}: every touch reaches main:\n{folded}"
                );
                assert!(spliced >= PAGES - 1, "{name}: {spliced} spliced\n{stats}");
            }
        }
    }
}

/// A program's own pool allocator is not the call site: `pool_alloc` takes every fault (it
/// writes each chunk's header), yet the lines to act on are its callers'. With allocations
/// recorded fltrace finds it (each of its faults in a block malloc'd through it); without,
/// `--hide` or the configuration file's list name it; `--call-site leaf` shows it still.
#[test]
fn pool_allocator_is_not_the_call_site() {
    let dir = Dir::new();
    let pool = build_c_workload(dir.path(), "pool.c");
    let (nodes, strings, header) = (
        site("pool.c", "nodes"),
        site("pool.c", "strings"),
        site("pool.c", "header"),
    );
    dir.record_with(&["-q", "--allocs"], &[&pool], &["30", "20"]);
    let report = dir.report_json(&["--by", "line"]);
    assert_eq!(count_at(&report, "pool.c", nodes), 30, "{report}");
    assert_eq!(count_at(&report, "pool.c", strings), 20, "{report}");
    assert_eq!(count_at(&report, "pool.c", header), 0, "{report}");
    let out = dir.run(&["report", "--by", "line"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("skipped as allocators (found from the allocations recorded), not call sites: pool_alloc (50); 50 faults counted for their callers"),
        "{stderr}"
    );
    let leaf = dir.report_json(&["--by", "line", "--call-site", "leaf"]);
    assert_eq!(count_at(&leaf, "pool.c", header), 50, "{leaf}");

    // Without allocations: pool_alloc is the call site until hidden or listed.
    let plain = Dir::new();
    plain.record(&[&pool], &["30", "20"]);
    let report = plain.report_json(&["--by", "line"]);
    assert_eq!(count_at(&report, "pool.c", header), 50, "{report}");
    let hidden = plain.report_json(&["--by", "line", "--hide", "^pool_alloc$"]);
    assert_eq!(count_at(&hidden, "pool.c", nodes), 30, "{hidden}");
    assert_eq!(count_at(&hidden, "pool.c", strings), 20, "{hidden}");
    assert_eq!(count_at(&hidden, "pool.c", header), 0, "{hidden}");
    let hidden_leaf = plain.report_json(&["--by", "line", "--hide", "pool", "--call-site", "leaf"]);
    assert_eq!(
        count_at(&hidden_leaf, "pool.c", header),
        50,
        "{hidden_leaf}"
    );

    // The configuration file's list: pool_alloc and make_nodes are allocators, so the
    // nodes' faults go on to main's line.
    let config = plain.path().join("config.toml");
    std::fs::write(
        &config,
        "[report]\nallocators = [\"^pool_alloc$\", \"^make_nodes$\"]\n",
    )
    .expect("config written");
    let out = plain
        .fltrace()
        .env("FLTRACE_CONFIG", &config)
        .args(["report", "--format", "json", "--top", "0", "--by", "line"])
        .output()
        .expect("fltrace runs");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let configured: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
    // main's line also has its own reads (of argv): the nodes' faults are its writes.
    let main_nodes = site("pool.c", "main_nodes");
    let writes: u64 = groups(&configured)
        .filter(|g| g["line"] == main_nodes && g["function"] == "main")
        .map(|g| g["writes"].as_u64().unwrap_or(0))
        .sum();
    assert_eq!(writes, 30, "{configured}");
    assert_eq!(count_at(&configured, "pool.c", nodes), 0, "{configured}");
    assert_eq!(count_at(&configured, "pool.c", strings), 20, "{configured}");
    assert_eq!(count_at(&configured, "pool.c", header), 0, "{configured}");
    // The same config under ~/.config/fltrace (HOME), and --focus keeps the strings only.
    let home = plain.path().join("home");
    std::fs::create_dir_all(home.join(".config/fltrace")).expect("config dir");
    std::fs::copy(&config, home.join(".config/fltrace/config.toml")).expect("config copied");
    let out = plain
        .fltrace()
        .env("HOME", &home)
        .args([
            "report",
            "--format",
            "json",
            "--top",
            "0",
            "--by",
            "line",
            "--focus",
            "^make_strings$",
        ])
        .output()
        .expect("fltrace runs");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let focused: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
    assert_eq!(count_at(&focused, "pool.c", strings), 20, "{focused}");
    assert_eq!(focused["faults"], 20, "{focused}");
    // A bad pattern is one clear line.
    let out = plain.run(&["report", "--hide", "(unclosed"]);
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("`(unclosed` is not a regular expression"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A copy of 16 KiB of each fault's stack: deeper stacks need the thread's previous frames or
/// the live process.
const COPY_16K: &[&str] = &["--max-stack-copy", "16384"];

/// Records `program ARGS` with `flags`; checks that it succeeded and that the
/// summary's truncated figure equals the faults whose stack the data says is truncated.
/// Returns the recording, fltrace's stderr and that number.
fn record_counting_truncated(
    program: &std::path::Path,
    flags: &[&str],
    args: &[&str],
) -> (Dir, String, u64) {
    let dir = Dir::new();
    let out = dir
        .fltrace()
        .arg("record")
        .args(flags)
        .arg("--")
        .arg(program)
        .args(args)
        .output()
        .expect("fltrace runs");
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "{stderr}");
    let truncated = fault_ends(&dir).iter().filter(|(_, t)| *t).count() as u64;
    assert_eq!(summary_truncated(&stderr), truncated, "{stderr}");
    (dir, stderr, truncated)
}

/// Each fault of a recording's processes with whether the stacks table says its stack is
/// truncated; a fault whose stack is not in the table counts as truncated.
fn fault_ends(dir: &Dir) -> Vec<(u32, bool)> {
    let mut ends = Vec::new();
    for pid in dir.pids("faults", "parquet") {
        let (faults, _) =
            fltrace_trace::read_faults(&fltrace_trace::files::faults(dir.path(), pid))
                .expect("readable table");
        let stacks = fltrace_trace::read_stacks(&fltrace_trace::files::stacks(dir.path(), pid))
            .expect("readable table");
        let end: std::collections::HashMap<u32, fltrace_trace::StackEnd> =
            stacks.iter().map(|s| (s.id, s.end)).collect();
        ends.extend(faults.iter().map(|f| {
            let truncated = end.get(&f.stack_id) != Some(&fltrace_trace::StackEnd::Complete);
            (pid, truncated)
        }));
    }
    ends
}

/// The folded stacks (`report --format folded`) that end at the deep workload's `touch`:
/// (frames, count).
fn touch_stacks(dir: &Dir) -> Vec<(Vec<String>, u64)> {
    let folded = dir.run(&["report", "--format", "folded"]);
    String::from_utf8_lossy(&folded.stdout)
        .lines()
        .filter_map(|line| {
            let (stack, count) = line.rsplit_once(' ')?;
            let frames: Vec<String> = stack.split(';').map(str::to_owned).collect();
            (frames.last().map(String::as_str) == Some("touch"))
                .then(|| (frames, count.parse().expect("count")))
        })
        .collect()
}

/// A process forked 2,000 calls deep without exec, beyond a 16 KiB copy, that faults there on
/// 63 pages and exits at once (as postgres's backends fault in the postmaster's frames): its
/// stacks reach `main`,
/// their outer frames taken from the forking thread's last stack, since the child's own stack
/// is gone by the time the recorder reads it. The summary's truncated figure equals the data's.
#[test]
fn a_forked_child_completes_its_stacks_from_the_forking_thread() {
    const PAGES: u64 = 64;
    let w = workloads();
    for (program, name) in [(&w.deep_c, "deep_c"), (&w.deep_cpp, "deep_cpp")] {
        let dir = Dir::new();
        let out = dir
            .fltrace()
            .args(["record", "--max-stack-copy", "16384", "--"])
            .arg(program)
            .args([PAGES.to_string().as_str(), "2000", "300", "fork"])
            .output()
            .expect("fltrace runs");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{stderr}");
        let ends = fault_ends(&dir);
        let truncated = ends.iter().filter(|(_, t)| *t).count() as u64;
        assert_eq!(summary_truncated(&stderr), truncated, "{name}: {stderr}");
        let pids = dir.pids("faults", "parquet");
        assert_eq!(pids.len(), 2, "{name}: the parent and its child");

        let by_line = dir.report_json(&["--by", "line"]);
        assert_eq!(
            count_at(&by_line, "deep.c", site("deep.c", "deep_touch")),
            PAGES,
            "{name}: one fault per page at the touch line"
        );
        // Those and the copies of the stack's pages written in `touch` after the fork.
        for (frames, count) in &touch_stacks(&dir) {
            assert!(
                frames[1] != "[truncated]" && frames.iter().any(|f| f == "main"),
                "{name}: {count} touches do not reach main: {frames:?}"
            );
        }
        // The child's 63 touches: from the parent's frames.
        let child = *pids.iter().max().expect("a child");
        let stats = std::fs::read_to_string(fltrace_trace::files::stats(dir.path(), child))
            .expect("stats file");
        let spliced: u64 = fltrace_trace::stats::last_value(
            &fltrace_trace::files::stats(dir.path(), child),
            "stacks_spliced",
        )
        .expect("stats")
        .unwrap_or_else(|| panic!("no stacks_spliced in {stats}"));
        assert!(spliced >= PAGES - 1, "{name}: {spliced} spliced\n{stats}");
    }
}

/// Two callers with the same frame (`via_a`, then `via_b`) lead into the same recursion, so
/// the return address where the stack copy ends sits at the same stack address on both
/// paths: the faults under `via_b` must not take `via_a`'s outer frames from the thread's
/// previous stack. The live stack, still in place while the program pauses, tells them apart.
#[test]
fn the_same_return_address_through_another_caller_is_not_spliced() {
    const PAGES: u64 = 16;
    let w = workloads();
    let dir = Dir::new();
    // 220 calls of 80 bytes: the callers lie about 1.5 KiB beyond a 16 KiB copy.
    let out = dir
        .fltrace()
        .args(["record", "--max-stack-copy", "16384", "--"])
        .arg(&w.deep_c)
        .args([PAGES.to_string().as_str(), "220", "300", "paths"])
        .output()
        .expect("fltrace runs");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let (mut via_a, mut via_b) = (0, 0);
    for (frames, count) in touch_stacks(&dir) {
        let a = frames.iter().any(|f| f == "via_a");
        let b = frames.iter().any(|f| f == "via_b");
        assert!(a != b, "one caller or the other: {frames:?}");
        assert!(frames.iter().any(|f| f == "main"), "{frames:?}");
        if a {
            via_a += count;
        } else {
            via_b += count;
        }
    }
    assert_eq!((via_a, via_b), (1, PAGES - 1), "{stderr}");
}

/// A function without CFI or frame pointers in the middle of the stack (`nocfi_middle`, as
/// loader and library start-up code, `__do_global_dtors_aux` or jemalloc's start-up): its
/// caller is found on the stack (the first word above it that follows a call), so the 32
/// faults below it and the one in it reach `main` and `_start`, those and no others counted in
/// `stacks_scanned`; the summary's truncated figure equals the data's.
#[test]
fn a_frame_without_cfi_finds_its_caller_on_the_stack() {
    const PAGES: u64 = 32;
    let built = Dir::new();
    let program = build_c_workload(built.path(), "nocfi.c");
    let (dir, stderr, _) = record_counting_truncated(&program, &[], &[PAGES.to_string().as_str()]);

    let folded = dir.run(&["report", "--format", "folded"]);
    let outer = [
        "_start",
        "__libc_start_main_impl",
        "__libc_start_call_main",
        "main",
    ];
    let (mut inner, mut middle) = (0, 0);
    for line in String::from_utf8_lossy(&folded.stdout).lines() {
        let Some((stack, count)) = line.rsplit_once(' ') else {
            continue;
        };
        let frames: Vec<&str> = stack.split(';').collect();
        let count: u64 = count.parse().expect("count");
        if !frames.contains(&"nocfi_middle") {
            continue;
        }
        let ours = &frames[1..];
        let want_inner = [&outer[..], &["fault_outer", "nocfi_middle", "fault_inner"]].concat();
        let want_middle = [&outer[..], &["fault_outer", "nocfi_middle"]].concat();
        if ours == want_inner.as_slice() {
            inner += count;
        } else if ours == want_middle.as_slice() {
            middle += count;
        } else {
            panic!("{count} faults with {frames:?}");
        }
    }
    assert_eq!((inner, middle), (PAGES, 1), "{stderr}");
    let pid = dir.pids("faults", "parquet")[0];
    let stats = fltrace_trace::files::stats(dir.path(), pid);
    let scanned = fltrace_trace::stats::last_value(&stats, "stacks_scanned")
        .expect("stats")
        .expect("stacks_scanned in the stats file");
    assert_eq!(scanned, PAGES + 1, "the faults under and in nocfi_middle");
}

/// A frame larger than a 16 KiB stack copy (`wide`, 20 KiB, as postgres's `pg_tzset`):
/// every stack through it needs the frames outside it. The first fault's comes from the live
/// process while the program pauses; the 63 faults under another call of the same frame
/// (`second`), read after the process has exited, take the frames outside `wide` from that
/// first stack (the same frame at the same stack address, the same frame size at both calls),
/// each counted as spliced: all 64 reach `main`, and the summary's truncated figure equals
/// the data's.
#[test]
fn a_frame_larger_than_the_copy_completes_from_another_call_in_it() {
    const PAGES: u64 = 64;
    let built = Dir::new();
    let program = build_c_workload(built.path(), "wide.c");
    let (dir, stderr, _) =
        record_counting_truncated(&program, COPY_16K, &[PAGES.to_string().as_str(), "300"]);

    let folded = dir.run(&["report", "--format", "folded"]);
    let outer = [
        "_start",
        "__libc_start_main_impl",
        "__libc_start_call_main",
        "main",
        "wide",
    ];
    let (mut first, mut second) = (0, 0);
    for line in String::from_utf8_lossy(&folded.stdout).lines() {
        let Some((stack, count)) = line.rsplit_once(' ') else {
            continue;
        };
        let frames: Vec<&str> = stack.split(';').collect();
        let count: u64 = count.parse().expect("count");
        let Some(&last) = frames.last().filter(|f| ["first", "second"].contains(*f)) else {
            continue;
        };
        assert_eq!(frames[1..frames.len() - 1], outer, "{count} faults: {line}");
        if last == "first" {
            first += count;
        } else {
            second += count;
        }
    }
    assert_eq!((first, second), (1, PAGES - 1), "{stderr}");
    let pid = dir.pids("faults", "parquet")[0];
    let stats = fltrace_trace::files::stats(dir.path(), pid);
    let spliced = fltrace_trace::stats::last_value(&stats, "stacks_spliced")
        .expect("stats")
        .expect("stacks_spliced in the stats file");
    assert!(spliced >= PAGES - 1, "{spliced} spliced");
}

/// Faults that grow a stack (workloads/growth.c: `grow` writes its 12 KiB frame from the top
/// down, on a fresh thread stack each time): the page at the stack pointer is the one missing,
/// and the thread's stack is unmapped after it ends, so no live read finds it.
/// - With a perf copy (`--stack-size`), which stops at the first page it cannot read, these
///   faults come with no stack copy at all. Each takes its callers from the thread's next stack
///   that still runs in the same frame (`leaf`'s, copied whole), counted as spliced.
/// - By default the BPF copy goes on past the pages not present (holes, `stacks_holes`), and
///   each fault's own copy holds `grow`'s return address.
///
/// Either way all 48 (16 threads, 3 pages each) reach `start_thread` and `clone3` through
/// `grow`, where before they were 48 stacks of `[truncated];grow`. The summary's truncated
/// figure equals the data's.
#[test]
fn faults_growing_the_stack_take_their_callers_from_the_next_stack() {
    const THREADS: u64 = 16;
    const PAGES: u64 = 3;
    let built = Dir::new();
    let program = build_c_workload(built.path(), "growth.c");
    for flags in [&["--stack-size", "16384"][..], &[]] {
        let (dir, stderr, truncated) =
            record_counting_truncated(&program, flags, &[THREADS.to_string().as_str()]);

        let by_line = dir.report_json(&["--by", "line"]);
        let touch = site("growth.c", "growth_touch");
        assert_eq!(count_at(&by_line, "growth.c", touch), THREADS * PAGES);
        let folded = dir.run(&["report", "--format", "folded"]);
        let (mut grow, mut leaf) = (0, 0);
        for line in String::from_utf8_lossy(&folded.stdout).lines() {
            let Some((stack, count)) = line.rsplit_once(' ') else {
                continue;
            };
            let frames: Vec<&str> = stack.split(';').collect();
            let count: u64 = count.parse().expect("count");
            match frames.last() {
                Some(&"grow") => {
                    assert_eq!(frames[1..], ["clone3", "start_thread", "grow"], "{line}");
                    grow += count;
                }
                Some(&"leaf") => {
                    assert_eq!(frames[1..], ["clone3", "start_thread", "grow", "leaf"]);
                    leaf += count;
                }
                _ => {}
            }
        }
        assert_eq!(
            (grow, leaf),
            (THREADS * PAGES, THREADS),
            "{flags:?}\n{stderr}"
        );
        let pid = dir.pids("faults", "parquet")[0];
        let stats = fltrace_trace::files::stats(dir.path(), pid);
        let stat = |name: &str| {
            fltrace_trace::stats::last_value(&stats, name)
                .expect("stats")
                .unwrap_or_else(|| panic!("no {name} in the stats file"))
        };
        if flags.is_empty() {
            assert!(stat("stacks_holes") >= THREADS * PAGES, "{stderr}");
        } else {
            assert!(stat("stacks_spliced") >= THREADS * PAGES);
            assert!(stat("stacks_uncopied") >= THREADS * PAGES);
        }
        assert_eq!(stat("stacks_truncated"), truncated);
    }
}

/// A first call through an unbound PLT slot (a program linked with `-z lazy`): the slot leads
/// back into the PLT, whose first entry sends the call to the dynamic loader's resolver,
/// which runs an IFUNC's resolver that faults 16 times. The loader's resolver computes its CFA
/// from `rbx`, which `_dl_fixup` saved: its return address is where its CFI says, after a call
/// to `lazy_touch@plt`, whose lazy way (the file's word in its GOT slot, back into the PLT)
/// ends in the resolver, with what the PLT pushed below it. (A search of the stack for the
/// caller would meet first the decoy the resolver saved from `rdi`, a return address after an
/// indirect call, and stop there.) Every one of the 16 stacks is complete and reads `main ->
/// first_call` (at its line of call) `-> _dl_runtime_resolve_* -> _dl_fixup -> ... ->
/// resolve_lazy_touch`.
#[test]
fn a_first_call_through_an_unbound_plt_slot_reaches_main_through_the_loader() {
    const PAGES: u64 = 16;
    let built = Dir::new();
    let program = build_lazy(built.path(), "lazybind.c");
    // The pause keeps the process there while the recorder reads its GOT slots.
    let (dir, stderr, _) = record_counting_truncated(&program, &[], &["1000"]);

    let outer = [
        "_start",
        "__libc_start_main_impl",
        "__libc_start_call_main",
        "main",
        "first_call",
    ];
    let mut through = 0;
    for (frames, count) in folded_ending_at(&dir, "resolve_lazy_touch") {
        let frames: Vec<&str> = frames.iter().map(String::as_str).collect();
        let ours = &frames[1..];
        let loader = &ours[outer.len().min(ours.len())..];
        assert!(
            ours.starts_with(&outer)
                && loader
                    .first()
                    .is_some_and(|f| f.starts_with("_dl_runtime_resolve"))
                && loader.contains(&"_dl_fixup"),
            "{count} faults with {frames:?}\n{stderr}"
        );
        through += count;
    }
    assert_eq!(through, PAGES, "{stderr}");

    // The resolver's caller at its line of call.
    assert_call_line(&dir, "first_call", ("lazybind.c", "lazy_call"));
}

/// `caller`, in the stack of the IFUNC resolver's faults (lazybindlib.c), is at line `site`.
fn assert_call_line(dir: &Dir, caller: &str, (file, name): (&str, &str)) {
    let by_stack = dir.report_json(&["--by", "stack"]);
    let stack = stack_at(
        &by_stack,
        "lazybindlib.c",
        site("lazybindlib.c", "lazy_resolver"),
    );
    let call = stack
        .iter()
        .find(|(f, _, _)| f == caller)
        .map(|(_, file, line)| (file.as_str(), *line));
    assert_eq!(call, Some((file, u64::from(site(file, name)))), "{stack:?}");
}

/// Builds liblazybind.so (lazybindlib.c) in `dir` and the program of workload `source`, linked
/// against it with `-z lazy` (every call to it bound at its first call): the program's path.
fn build_lazy(dir: &std::path::Path, source: &str) -> std::path::PathBuf {
    let src = workloads_dir();
    let gcc = |args: &[&str], out: &std::path::Path, source: &str, tail: &[&str]| {
        let status = std::process::Command::new("gcc")
            .args(["-O2", "-g", "-fomit-frame-pointer"])
            .args(args)
            .arg("-o")
            .arg(out)
            .arg(src.join(source))
            .args(tail)
            .status()
            .expect("gcc runs");
        assert!(status.success(), "gcc {source}");
    };
    gcc(
        &["-shared", "-fPIC"],
        &dir.join("liblazybind.so"),
        "lazybindlib.c",
        &[],
    );
    let program = dir.join(source.strip_suffix(".c").unwrap_or(source));
    let libdir = dir.to_string_lossy().into_owned();
    gcc(
        &["-Wl,-z,lazy"],
        &program,
        source,
        &[
            &format!("-L{libdir}"),
            "-llazybind",
            &format!("-Wl,-rpath,{libdir}"),
            "-lpthread",
        ],
    );
    program
}

/// A stack-growth fault in the dynamic loader's resolver (workloads/lazygrow.c: a thread's
/// first call through an unbound PLT slot, its stack pointer a little above a page boundary,
/// so that the resolver's first write below it, into its register save area, is a first touch
/// of the page below). The resolver's CFA is `rbx`, which nothing has saved on the stack yet:
/// the record's `rbx` gives it, and the stack reads exactly `clone3 -> start_thread -> worker
/// -> call_at_boundary -> _dl_runtime_resolve_*`, complete, where it was `[truncated]` at the
/// resolver. `call_at_boundary` keeps a frame pointer (its `alloca`): the resolver's caller is
/// never taken from that frame's pointer (framehop's fallback rule for a CFA on `rbx`, which
/// skipped `call_at_boundary` in all 17 stacks, counted complete); the IFUNC resolver's 16
/// faults go through `call_at_boundary` too, at its line of call.
#[test]
fn a_fault_in_the_loaders_resolver_before_it_saved_rbx_reaches_the_threads_start() {
    const PAGES: u64 = 16;
    let built = Dir::new();
    let program = build_lazy(built.path(), "lazygrow.c");
    let (dir, stderr, _) = record_counting_truncated(&program, &[], &["1000"]);

    let outer = ["clone3", "start_thread", "worker", "call_at_boundary"];
    let mut in_resolver = 0;
    let folded = dir.run(&["report", "--format", "folded"]);
    for line in String::from_utf8_lossy(&folded.stdout).lines() {
        let Some((stack, count)) = line.rsplit_once(' ') else {
            continue;
        };
        let frames: Vec<&str> = stack.split(';').collect();
        let count: u64 = count.parse().expect("count");
        if frames
            .last()
            .is_some_and(|f| f.starts_with("_dl_runtime_resolve"))
        {
            assert_eq!(frames[1..frames.len() - 1], outer, "{line}\n{stderr}");
            in_resolver += count;
        }
    }
    assert_eq!(in_resolver, 1, "{stderr}");
    let mut through = 0;
    for (frames, count) in folded_ending_at(&dir, "resolve_lazy_touch") {
        assert_eq!(frames[1..=outer.len()], outer, "{count} faults: {frames:?}");
        through += count;
    }
    assert_eq!(through, PAGES, "{stderr}");
    assert_call_line(&dir, "call_at_boundary", ("lazygrow.c", "lazygrow_call"));
}

/// A frame whose middle pages were never touched (workloads/holes.c: `big`, 64 KiB, writes only
/// its two ends, as jemalloc's 10,960-byte start-up frame in redis), under which `leaf` faults
/// on 32 pages and the process exits at once. The stack copy goes on past the pages that are
/// not present, noting them as holes (`stacks_holes` in the stats file), so the frames above
/// `big` come from the fault's own copy: all 32 stacks read `main -> big -> leaf`, complete, at
/// their lines, where the copy stopped at the first hole and they were `[truncated];big;leaf`.
#[test]
fn a_frame_with_pages_never_touched_keeps_the_frames_above_it() {
    const PAGES: u64 = 32;
    let built = Dir::new();
    let program = build_c_workload(built.path(), "holes.c");
    let (dir, stderr, truncated) =
        record_counting_truncated(&program, &[], &[PAGES.to_string().as_str()]);

    let want = [
        "_start",
        "__libc_start_main_impl",
        "__libc_start_call_main",
        "main",
        "big",
        "leaf",
    ];
    assert_eq!(
        faults_through_exactly(&dir, &want, &stderr),
        PAGES,
        "{stderr}"
    );
    let by_stack = dir.report_json(&["--by", "stack"]);
    let stack = stack_at(&by_stack, "holes.c", site("holes.c", "holes_touch"));
    let lines: Vec<(&str, u64)> = stack
        .iter()
        .filter(|(_, file, _)| file == "holes.c")
        .map(|(f, _, line)| (f.as_str(), *line))
        .collect();
    let at = |name| u64::from(site("holes.c", name));
    assert_eq!(
        lines,
        [
            ("leaf", at("holes_touch")),
            ("big", at("holes_leaf")),
            ("main", at("holes_big"))
        ],
        "{stack:?}"
    );
    let pid = dir.pids("faults", "parquet")[0];
    let stats = fltrace_trace::files::stats(dir.path(), pid);
    let stat = |name: &str| {
        fltrace_trace::stats::last_value(&stats, name)
            .expect("stats")
            .unwrap_or_else(|| panic!("no {name} in the stats file"))
    };
    assert!(stat("stacks_holes") >= PAGES, "{stderr}");
    assert_eq!(stat("stacks_truncated"), truncated);
}

/// A fault in the kernel's vDSO (`gettimeofday` reading its data page, first in the parent,
/// then in a forked child): the vDSO is unwound by its own CFI, not as JIT code by a frame
/// chain its code does not keep (the child's stack stopped there, truncated). Both stacks
/// read `main -> now -> [vdso]`, complete, `now` at its line of call.
#[test]
fn faults_in_the_vdso_unwind_by_its_cfi() {
    let built = Dir::new();
    let program = build_c_workload(built.path(), "vdsofork.c");
    let (dir, stderr, _) = record_counting_truncated(&program, &[], &["300"]);

    let want = [
        "_start",
        "__libc_start_main_impl",
        "__libc_start_call_main",
        "main",
        "now",
        "[vdso]",
    ];
    assert_eq!(faults_through_exactly(&dir, &want, &stderr), 2, "{stderr}");
    let by_stack = dir.report_json(&["--by", "stack"]);
    let stack = stack_at(&by_stack, "vdsofork.c", site("vdsofork.c", "vdso_call"));
    assert_eq!(
        stack.first().map(|(f, _, _)| f.as_str()),
        Some("[vdso]"),
        "{stack:?}"
    );
}

/// The faults whose stacks end at `want`'s last frame, asserting that each of those stacks is
/// exactly `want` (outermost first, after the process name); `stderr` is the recorder's, shown
/// when one is not.
fn faults_through_exactly(dir: &Dir, want: &[&str], stderr: &str) -> u64 {
    let innermost = want.last().expect("a frame");
    folded_ending_at(dir, innermost)
        .into_iter()
        .map(|(frames, count)| {
            assert_eq!(&frames[1..], want, "{count} faults\n{stderr}");
            count
        })
        .sum()
}

/// The folded stacks of a recording (process name, then frames outermost first) whose
/// innermost frame is `innermost`, with their counts.
fn folded_ending_at(dir: &Dir, innermost: &str) -> Vec<(Vec<String>, u64)> {
    let folded = dir.run(&["report", "--format", "folded"]);
    String::from_utf8_lossy(&folded.stdout)
        .lines()
        .filter_map(|line| {
            let (stack, count) = line.rsplit_once(' ')?;
            let frames: Vec<String> = stack.split(';').map(str::to_owned).collect();
            (frames.last().map(String::as_str) == Some(innermost))
                .then(|| (frames, count.parse().expect("count")))
        })
        .collect()
}
