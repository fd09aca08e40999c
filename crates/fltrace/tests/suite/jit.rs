//! Stacks through JIT code (issue 36): code without CFI that keeps a frame-pointer chain is
//! unwound by that chain and named by its perf map; where no chain can be trusted the stack
//! stops there, truncated; and no stack shows a caller that cannot call its callee.

use std::collections::{HashMap, HashSet};
use std::path::Path;
use std::process::Command;

use super::util::*;

const PAGES: u64 = 64;

/// One sample of `perf script` or `fltrace script`: its process, and its frames
/// innermost first as (address, symbol without offset, dso).
struct Sample {
    comm: String,
    pid: u32,
    tid: u32,
    /// The fault address, where the script printed it (`fltrace script --addr`).
    addr: Option<u64>,
    frames: Vec<(u64, String, String)>,
}

/// Parses the text `perf script -F comm,pid,tid,ip,sym,symoff,dso` and `fltrace script` print.
/// Of the entries at one address (an inline chain), only the last, the function the code is
/// in, is kept.
fn parse_script(text: &str) -> Vec<Sample> {
    let mut samples: Vec<Sample> = Vec::new();
    for line in text.lines() {
        if line.trim().is_empty() {
            continue;
        }
        if !line.starts_with(char::is_whitespace) {
            // `comm pid/tid time: period event: [addr]`; the comm may hold spaces.
            let words: Vec<&str> = line.split_whitespace().collect();
            let Some(at) = words.iter().position(|w| {
                w.split_once('/')
                    .is_some_and(|(p, t)| p.parse::<u32>().is_ok() && t.parse::<u32>().is_ok())
            }) else {
                continue;
            };
            let (pid, tid) = words[at].split_once('/').expect("pid/tid");
            let addr = words
                .iter()
                .position(|w| w.ends_with("faults:"))
                .and_then(|e| words.get(e + 1))
                .and_then(|a| u64::from_str_radix(a, 16).ok());
            samples.push(Sample {
                comm: words[..at].join(" "),
                pid: pid.parse().expect("pid"),
                tid: tid.parse().expect("tid"),
                addr,
                frames: Vec::new(),
            });
            continue;
        }
        let Some(sample) = samples.last_mut() else {
            continue;
        };
        let line = line.trim();
        let Some((addr, rest)) = line.split_once(char::is_whitespace) else {
            continue;
        };
        let Ok(addr) = u64::from_str_radix(addr, 16) else {
            continue;
        };
        let (symbol, dso) = match rest.trim().rsplit_once(" (") {
            Some((symbol, dso)) => (symbol, dso.trim_end_matches(')')),
            None => (rest.trim(), ""),
        };
        let symbol = match symbol.rsplit_once("+0x") {
            Some((name, off)) if u64::from_str_radix(off, 16).is_ok() => name,
            _ => symbol,
        };
        if let Some(last) = sample.frames.last()
            && last.0 == addr
            && last.2 == "inlined"
        {
            sample.frames.pop();
        }
        sample
            .frames
            .push((addr, symbol.to_owned(), dso.to_owned()));
    }
    samples
}

/// `name` without what symbolizers spell differently: its parameter list, return type and
/// `[clone .constprop.0]` suffixes, and glibc's internal prefixes (`__GI___libc_malloc` is
/// perf's `malloc`).
fn canonical(name: &str) -> String {
    let mut name = name.trim();
    while let Some(at) = name.rfind(" [clone ") {
        name = name[..at].trim_end();
    }
    let name = name.strip_suffix(" const").unwrap_or(name);
    // The parameter list: the last balanced `(...)` at the end, not `operator()`.
    let mut cut = name.len();
    if name.ends_with(')') {
        let mut depth = 0;
        for (i, c) in name.char_indices().rev() {
            match c {
                ')' => depth += 1,
                '(' => {
                    depth -= 1;
                    if depth == 0 {
                        if !name[..i].ends_with("operator") && i > 0 {
                            cut = i;
                        }
                        break;
                    }
                }
                _ => {}
            }
        }
    }
    let name = &name[..cut];
    // The return type: whatever precedes the last space outside brackets.
    let mut depth = 0i32;
    let mut start = 0;
    for (i, c) in name.char_indices() {
        match c {
            '<' | '(' => depth += 1,
            '>' | ')' => depth -= 1,
            ' ' if depth == 0 => start = i + 1,
            _ => {}
        }
    }
    let mut name = &name[start..];
    for prefix in ["__GI___libc_", "__GI___", "__GI_", "__libc_"] {
        if let Some(rest) = name.strip_prefix(prefix) {
            name = rest;
            break;
        }
    }
    name.trim_start_matches('_').to_owned()
}

/// A frame's key in a caller->callee edge: JIT code by its address (both tools saw the same
/// process, and a perf map may name one address twice), other code by its function's name;
/// `None` for frames that name nothing (`[unknown]`, `[truncated]`).
fn frame_key((addr, symbol, dso): &(u64, String, String)) -> Option<String> {
    let jit = dso.contains("perf-") || dso == "[jit]" || symbol == "[jit]";
    if jit {
        return Some(format!("@{addr:x}"));
    }
    if symbol.starts_with('[') || symbol.is_empty() {
        return None;
    }
    Some(canonical(symbol))
}

/// The caller->callee edges of `samples`, with how many stacks hold each.
fn edges<'a>(samples: impl IntoIterator<Item = &'a Sample>) -> HashMap<(String, String), u64> {
    let mut edges = HashMap::new();
    for sample in samples {
        let keys: Vec<Option<String>> = sample.frames.iter().map(frame_key).collect();
        for pair in keys.windows(2) {
            if let [Some(callee), Some(caller)] = pair {
                *edges.entry((caller.clone(), callee.clone())).or_default() += 1;
            }
        }
    }
    edges
}

fn run_ok(cmd: &mut Command) -> String {
    let out = cmd.output().expect("tool runs");
    assert!(
        out.status.success(),
        "{cmd:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// `perf script` of `data`, with the fields [`parse_script`] reads.
fn perf_script(data: &Path) -> Vec<Sample> {
    parse_script(&run_ok(
        Command::new("perf")
            .arg("script")
            .arg("-i")
            .arg(data)
            .args(["-F", "comm,pid,tid,ip,sym,symoff,dso"]),
    ))
}

/// Removes the perf maps the runtimes left in /tmp for `pids`.
fn remove_perf_maps(pids: impl IntoIterator<Item = u32>) {
    for pid in pids {
        let _ = std::fs::remove_file(format!("/tmp/perf-{pid}.map"));
    }
}

/// A C program calling through generated code without CFI that keeps the frame-pointer chain
/// (as V8's JIT code and HotSpot's with -XX:+PreserveFramePointer): every fault under it reaches
/// `_start` through exactly main -> jit_outer -> jit_trampoline (named by its perf map) ->
/// jit_touch, and none is truncated.
#[test]
fn jit_code_keeping_its_frame_chain_is_unwound_through_it() {
    let built = Dir::new();
    let program = build_c_workload(built.path(), "jitchain.c");
    let dir = Dir::new();
    dir.record(&[&program], &[&PAGES.to_string(), "fp"]);
    let pid = dir.pids("faults", "parquet")[0];
    remove_perf_maps([pid]);
    let folded =
        String::from_utf8_lossy(&dir.run(&["report", "--format", "folded"]).stdout).into_owned();
    let through: Vec<&str> = folded.lines().filter(|l| l.contains("jit_touch")).collect();
    assert_eq!(
        through,
        [format!(
            "jitchain;_start;__libc_start_main_impl;__libc_start_call_main;main;jit_outer;\
             jit_trampoline;jit_touch {PAGES}"
        )],
        "{folded}"
    );
}

/// The same generated code using `rbp` as a general register (as HotSpot's compiled code does
/// without PreserveFramePointer): its frame-pointer chain leads nowhere, so each stack stops at
/// its frame, under `[truncated]`, each counted truncated and unverified; none shows a caller.
#[test]
fn jit_code_without_a_frame_chain_ends_the_stack_truncated() {
    let built = Dir::new();
    let program = build_c_workload(built.path(), "jitchain.c");
    let dir = Dir::new();
    let out = dir.record_with(&[], &[&program], &[&PAGES.to_string(), "nofp"]);
    let pid = dir.pids("faults", "parquet")[0];
    remove_perf_maps([pid]);
    let folded =
        String::from_utf8_lossy(&dir.run(&["report", "--format", "folded"]).stdout).into_owned();
    let through: Vec<&str> = folded.lines().filter(|l| l.contains("jit_touch")).collect();
    assert_eq!(
        through,
        [format!(
            "jitchain;[truncated];jit_trampoline;jit_touch {PAGES}"
        )],
        "{folded}"
    );
    let stats = fltrace_trace::files::stats(dir.path(), pid);
    let value = |name: &str| {
        fltrace_trace::stats::last_value(&stats, name)
            .expect("stats")
            .unwrap_or_else(|| panic!("{name} in the stats file"))
    };
    assert!(value("stacks_unverified") >= PAGES);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(summary_truncated(&stderr) >= PAGES, "{stderr}");
    assert_eq!(
        summary_truncated(&stderr),
        value("stacks_truncated"),
        "{stderr}"
    );
}

/// node (Debian's) with --perf-basic-prof --interpreted-frames-native-stack on workloads/hot.js,
/// recorded by fltrace while `perf record -g` records the same process: most faults have
/// hotAllocate's frames, under the module loader's JS frames, all named from node's perf map;
/// and the JS thread's stacks in fltrace take no caller->callee step that perf does not see
/// too, by frame pointers in that run or by DWARF (`--call-graph dwarf`) in another run of the
/// script: JIT frames compared by address, others by function. The frames below
/// `__libc_start_call_main` are left out (perf's frame walk does not see them), and so are
/// steps between native functions perf's runs never reached (a collection only one run made)
/// and the steps of a rare path the other run may not take: at most 0.1% of the steps, none of
/// them one of 100 stacks or more.
/// 98% or more of the stacks reach node's entry. (Before, 98% of node's faults had stacks with
/// steps no program takes.)
#[test]
fn node_stacks_go_through_its_js_frames_as_perf_sees_them() {
    let dir = Dir::new();
    let script = workloads_dir().join("hot.js");
    let script = script.to_str().expect("utf-8");
    let node_args = [
        "--perf-basic-prof",
        "--interpreted-frames-native-stack",
        script,
        "20",
    ];
    let fp = dir.path().join("perf.fp");
    let dwarf = dir.path().join("perf.dwarf");
    dir.record_with(
        &["-q", "--no-cache"],
        &[Path::new("perf")],
        &[
            &[
                "record",
                "-q",
                "-m",
                "16M",
                "-e",
                "page-faults",
                "-c",
                "1",
                "-g",
                "-o",
            ][..],
            &[fp.to_str().expect("utf-8"), "--", "node"],
            &node_args[..],
        ]
        .concat(),
    );
    let dwarf_run = Command::new("perf")
        .args(["record", "-q", "-m", "32M", "-e", "page-faults", "-c", "1"])
        .args(["--call-graph", "dwarf", "-o"])
        .arg(&dwarf)
        .arg("--")
        .arg("node")
        .args(node_args)
        .current_dir(dir.path())
        .output()
        .expect("perf runs");
    assert!(dwarf_run.status.success(), "{dwarf_run:?}");

    let ours = parse_script(&String::from_utf8_lossy(&dir.run(&["script"]).stdout));
    let node_pid = ours
        .iter()
        .find(|s| s.comm == "node")
        .map(|s| s.pid)
        .expect("node's faults");
    let node: Vec<&Sample> = ours.iter().filter(|s| s.pid == node_pid).collect();
    let by_fp = perf_script(&fp);
    let by_dwarf = perf_script(&dwarf);
    let dwarf_pids: Vec<u32> = by_dwarf.iter().map(|s| s.pid).collect();
    remove_perf_maps(std::iter::once(node_pid).chain(dwarf_pids));

    let hot = node
        .iter()
        .filter(|s| {
            s.frames
                .iter()
                .any(|f| f.1.contains("JS:") && f.1.contains("hotAllocate"))
        })
        .count();
    assert!(hot * 2 > node.len(), "{hot} of {} faults", node.len());
    let loader = node
        .iter()
        .filter(|s| {
            s.frames
                .iter()
                .any(|f| f.1.starts_with("JS:~Module._compile"))
        })
        .count();
    assert!(loader >= hot, "{loader} faults under Module._compile");
    // Through the JS entry's builtins to node's main: only frameless leaf builtins (whose
    // caller no chain says) stop early.
    let complete = node.iter().filter(|s| complete(s)).count();
    assert!(
        complete * 100 >= node.len() * 98,
        "{complete} of {} stacks complete",
        node.len()
    );

    let theirs = edges(by_fp.iter().chain(&by_dwarf));
    let reached: HashSet<String> = by_fp
        .iter()
        .chain(&by_dwarf)
        .flat_map(|s| s.frames.iter().filter_map(frame_key))
        .collect();
    // The JS thread's steps: V8's helper threads (concurrent marking, the optimizing compiler)
    // run no JS and take paths whose timing differs from one run to the next.
    let mine = edges(node.iter().copied().filter(|s| s.tid == node_pid));
    let outer = ["start", "libc_start_main_impl"];
    // A step between two native functions is judged where perf's runs reached both of them
    // (a full collection the other runs did not make cannot be compared); a step into or out
    // of JIT code always is.
    let judged = |(caller, callee): &(String, String)| {
        caller.starts_with('@')
            || callee.starts_with('@')
            || (reached.contains(caller) && reached.contains(callee))
    };
    let total: u64 = mine.values().sum();
    let mut unseen: Vec<(&(String, String), u64)> = mine
        .iter()
        .filter(|(edge, _)| {
            !theirs.contains_key(*edge) && !outer.contains(&edge.0.as_str()) && judged(edge)
        })
        .map(|(edge, &n)| (edge, n))
        .collect();
    unseen.sort_by_key(|(_, n)| std::cmp::Reverse(*n));
    let unseen_uses: u64 = unseen.iter().map(|(_, n)| n).sum();
    assert!(
        unseen_uses * 1000 <= total && unseen.first().is_none_or(|(_, n)| *n < 100),
        "{unseen_uses} of {total} caller->callee steps perf does not see: {:?}",
        &unseen[..unseen.len().min(20)]
    );
}

/// The JVM's command line for the Chain workload: compiled at first call (`-Xcomp`), levels
/// kept out of line, a 1 GiB heap whose young generation takes all the allocation (no
/// collection), the heap's address logged, the perf map written at exit.
fn java_chain(classes: &Path, preserve_frame_pointer: bool) -> Vec<String> {
    let mut args: Vec<String> = [
        "-Xcomp",
        "-Xms1g",
        "-Xmx1g",
        "-Xmn768m",
        "-XX:+UseSerialGC",
        "-XX:+UnlockDiagnosticVMOptions",
        "-XX:+DumpPerfMapAtExit",
        "-XX:CompileCommand=quiet",
        "-XX:CompileCommand=dontinline,Chain::level*",
        "-Xlog:gc+heap+coops=debug",
    ]
    .map(str::to_owned)
    .to_vec();
    if preserve_frame_pointer {
        args.push("-XX:+PreserveFramePointer".to_owned());
    }
    args.extend(["-cp".to_owned(), classes.display().to_string()]);
    args.extend(["Chain".to_owned(), "256".to_owned()]);
    args
}

/// Records the Chain workload; returns the recording, its samples with fault addresses, and
/// the heap's address range (from the JVM's log).
fn record_java_chain(preserve_frame_pointer: bool) -> (Dir, Vec<Sample>, std::ops::Range<u64>) {
    let classes = Dir::new();
    run_ok(
        Command::new("javac")
            .arg("-d")
            .arg(classes.path())
            .arg(workloads_dir().join("Chain.java")),
    );
    let dir = Dir::new();
    let args = java_chain(classes.path(), preserve_frame_pointer);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let out = dir.record_with(&["-q", "--no-cache"], &[Path::new("java")], &args);
    let log = String::from_utf8_lossy(&out.stdout);
    // "Heap address: 0x00000000c0000000, size: 1024 MB, Compressed Oops mode: 32-bit"
    let heap = log
        .lines()
        .find_map(|l| {
            let rest = l.split("Heap address: 0x").nth(1)?;
            let (start, rest) = rest.split_once(", size: ")?;
            let megabytes: u64 = rest.split_whitespace().next()?.parse().ok()?;
            let start = u64::from_str_radix(start, 16).ok()?;
            Some(start..start + (megabytes << 20))
        })
        .unwrap_or_else(|| panic!("no heap address in the JVM's log: {log}"));
    let script = dir.run(&["script", "--addr"]);
    let samples = parse_script(&String::from_utf8_lossy(&script.stdout));
    remove_perf_maps(dir.pids("faults", "parquet"));
    (dir, samples, heap)
}

/// Whether a sample's stack reaches its thread's entry.
fn complete(sample: &Sample) -> bool {
    sample.frames.last().is_some_and(|f| f.1 != "[truncated]")
}

/// The Java frames of a stack (named from the JVM's perf map), outermost first, as
/// `Class.method`.
fn java_frames(sample: &Sample) -> Vec<String> {
    sample
        .frames
        .iter()
        .rev()
        .filter(|f| f.2.contains("perf-"))
        .filter_map(|f| {
            let name = f.1.split('(').next()?;
            Some(name.rsplit(' ').next()?.to_owned())
        })
        .filter(|n| n.starts_with("Chain."))
        .collect()
}

/// OpenJDK 17 with -XX:+PreserveFramePointer running the suite's Chain workload: 99% or more
/// of its allocation faults (those in the Java heap, by its Java threads) reach their thread's
/// entry through exactly Chain.main -> level1 -> level2 -> level3, the Java methods named from
/// the JVM's perf map. (Before, no Java frame showed at all.)
#[test]
fn jvm_stacks_with_preserved_frame_pointers_reach_the_thread_through_the_java_chain() {
    let (_dir, samples, heap) = record_java_chain(true);
    let allocation: Vec<&Sample> = samples
        .iter()
        .filter(|s| s.comm == "java" && s.addr.is_some_and(|a| heap.contains(&a)))
        .collect();
    assert!(allocation.len() >= 60_000, "{} faults", allocation.len());
    let chain = ["Chain.main", "Chain.level1", "Chain.level2", "Chain.level3"];
    let through = allocation
        .iter()
        .filter(|s| complete(s) && java_frames(s) == chain)
        .count();
    assert!(
        through * 100 >= allocation.len() * 99,
        "{through} of {} allocation faults through the chain",
        allocation.len()
    );
    let entries = allocation
        .iter()
        .filter(|s| java_frames(s) == chain)
        .filter(|s| s.frames.last().is_some_and(|f| f.1.contains("clone")))
        .count();
    assert_eq!(
        entries, through,
        "the chain's stacks end at the thread's clone"
    );
}

/// The same without PreserveFramePointer: compiled Java code keeps no frame chain, so no stack
/// through JIT code counts complete (each stops at the JIT frame, named by the map, truncated);
/// the allocation faults' stacks stop at Chain.level3 or the stub it called.
#[test]
fn jvm_stacks_without_frame_pointers_stop_at_the_jit_frame() {
    let (dir, samples, heap) = record_java_chain(false);
    for sample in &samples {
        let jit = sample
            .frames
            .iter()
            .any(|f| f.2.contains("perf-") || f.1 == "[jit]");
        assert!(
            !(jit && complete(sample)),
            "a complete stack through JIT code: {:?}",
            sample.frames
        );
    }
    let allocation: Vec<&Sample> = samples
        .iter()
        .filter(|s| s.comm == "java" && s.addr.is_some_and(|a| heap.contains(&a)))
        .collect();
    let at_level3 = allocation
        .iter()
        .filter(|s| !complete(s) && java_frames(s) == ["Chain.level3"])
        .count();
    assert!(
        at_level3 * 100 >= allocation.len() * 99,
        "{at_level3} of {} allocation faults stop at Chain.level3",
        allocation.len()
    );
    let pid = dir.pids("faults", "parquet")[0];
    let unverified = fltrace_trace::stats::last_value(
        &fltrace_trace::files::stats(dir.path(), pid),
        "stacks_unverified",
    )
    .expect("stats")
    .expect("stacks_unverified");
    assert!(unverified >= at_level3 as u64, "{unverified}");
}
