//! Far-memory emulation (`record -L/-M`): exact fault counts where FIFO makes them exact, and
//! the workloads' own checks of every byte under heavy eviction.

use std::path::Path;

use super::util::*;

/// Records `farmem <args>` under `-L local -M max` and returns fltrace's exit code and stderr.
fn far(dir: &Dir, local: &str, max: &str, program: &Path, args: &[&str]) -> (Option<i32>, String) {
    far_on(dir, "thread", local, max, program, args)
}

/// [`far`] with faults served on `path`: `thread` (handler threads, the default) or `signal`
/// (in the faulting thread, `FLTRACE_RT_FAULT_PATH=signal`).
fn far_on(
    dir: &Dir,
    path: &str,
    local: &str,
    max: &str,
    program: &Path,
    args: &[&str],
) -> (Option<i32>, String) {
    let mut command = dir.fltrace();
    if path == "signal" {
        command.env("FLTRACE_RT_FAULT_PATH", "signal");
    }
    let out = command
        .args([
            "record",
            "-q",
            &format!("-L={local}"),
            &format!("-M={max}"),
            "--",
        ])
        .arg(program)
        .args(args)
        .output()
        .expect("fltrace runs");
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn group_at<'a>(report: &'a serde_json::Value, file: &str, line: u32) -> &'a serde_json::Value {
    groups(report)
        .find(|g| g["file"].as_str().is_some_and(|f| f.ends_with(file)) && g["line"] == line)
        .unwrap_or_else(|| panic!("no group at {file}:{line}"))
}

/// The seed's scenario made exact: 64 MB scanned three times with 16 MB local under FIFO takes
/// one first touch per page, then a fetch of every page on each later pass; local memory never
/// exceeds the limit.
#[test]
fn fifo_scan_counts_are_exact() {
    let w = workloads();
    let dir = Dir::new();
    let (code, err) = far(&dir, "16", "128", &w.scan, &["64", "3"]);
    assert_eq!(code, Some(0), "{err}");
    let report = dir.report_json(&["--by", "line"]);
    assert_eq!(report["lost"], 0);
    let pages = 64 * 256;
    let write = group_at(&report, "scan.c", site("scan.c", "scan_write"));
    assert_eq!(
        (
            write["count"].as_u64(),
            write["first_touches"].as_u64(),
            write["fetches"].as_u64()
        ),
        (Some(pages), Some(pages), Some(0))
    );
    let read = group_at(&report, "scan.c", site("scan.c", "scan_read"));
    assert_eq!(
        (
            read["count"].as_u64(),
            read["fetches"].as_u64(),
            read["kind"].as_str()
        ),
        (Some(2 * pages), Some(2 * pages), Some("read"))
    );

    let pid = dir.pids("stats", "out")[0];
    let stats = fltrace_trace::files::stats(dir.path(), pid);
    let stat = |name: &str| {
        fltrace_trace::stats::last_value(&stats, name)
            .expect("stats")
            .unwrap_or_else(|| panic!("no {name}"))
    };
    assert!(
        stat("memory_used") <= 16 << 20,
        "memory_used {} above -L",
        stat("memory_used")
    );
    assert!(
        stat("memory_used") >= 15 << 20,
        "the limit was used: {}",
        stat("memory_used")
    );
    assert!(stat("faults_fetch") >= 2 * pages);
    assert!(stat("evict_pages_done") >= 2 * pages);
    assert_eq!(stat("rt_unmatched"), 0);
}

/// A program that moves the break itself gets it from the managed region: its 32 MiB are
/// first touched once each by the filling call, kept within -L, and read back intact.
#[test]
fn program_break_is_served_from_far_memory() {
    let w = workloads();
    let dir = Dir::new();
    let (code, err) = far(&dir, "8", "256", &w.farmem, &["brk", "32"]);
    assert_eq!(code, Some(0), "{err}");
    let report = dir.report_json(&["--by", "stack"]);
    let first_touches = sum_through(&report, "main", site("farmem.c", "brk"), "first_touches");
    assert_eq!(first_touches, 32 * 256);
    let pid = dir.pids("stats", "out")[0];
    let stats = fltrace_trace::files::stats(dir.path(), pid);
    let used = fltrace_trace::stats::last_value(&stats, "memory_used")
        .expect("stats")
        .expect("memory_used");
    assert!(used <= 8 << 20, "memory_used {used} above -L");
}

/// Several threads write and verify their own data while most of it lives in far memory.
#[test]
fn threads_keep_their_data_under_eviction() {
    let w = workloads();
    let dir = Dir::new();
    let (code, err) = far(&dir, "8", "256", &w.farmem, &["threads", "16", "4"]);
    assert_eq!(code, Some(0), "{err}");
    let pid = dir.pids("stats", "out")[0];
    let evicted = fltrace_trace::stats::last_value(
        &fltrace_trace::files::stats(dir.path(), pid),
        "evict_writes",
    )
    .expect("stats");
    assert!(evicted.unwrap_or(0) > 10_000, "heavy eviction: {evicted:?}");
}

/// The second-chance policies evict in another order, with dirty pages spared and evicted
/// later: the threads' data comes back intact under each.
#[test]
fn every_policy_keeps_the_data() {
    let w = workloads();
    for policy in ["clock", "refault"] {
        let dir = Dir::new();
        let out = dir
            .fltrace()
            .args(["record", "-q", "-L=8", "-M=256", "--policy", policy, "--"])
            .arg(&w.farmem)
            .args(["threads", "16", "4"])
            .output()
            .expect("runs");
        assert_eq!(
            out.status.code(),
            Some(0),
            "{policy}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

/// Each mode checks its own data and exits 0 only if every byte came back.
#[test]
fn fork_exec_syscalls_and_remapping_keep_data() {
    let w = workloads();
    for args in [
        &["fork", "32"][..],
        &["forkevict", "32"][..],
        &["exec", "32"][..],
        &["readinto", "32"][..],
        &["reuse", "32", "10"][..],
        &["realloc", "64"][..],
        &["dontneed", "16"][..],
    ] {
        let dir = Dir::new();
        let (code, err) = far(&dir, "8", "256", &w.farmem, args);
        assert_eq!(code, Some(0), "{args:?}: {err}");
    }
}

/// A program a shell execs at once under `-L` keeps its far-memory statistics: the shell's
/// runtime made a page, the program's runtime renamed its own over it, and the recorder, which
/// reads the exec record a round late, had opened the program's page already and took it for
/// the shell's: the stats file had no runtime line, every time. Now the program's 8 MiB (2,048
/// first touches, a shell's runtime takes a few dozen) are in its counters, and no page is
/// left in /dev/shm.
#[test]
fn a_program_exec_d_at_once_keeps_its_far_memory_statistics() {
    let w = workloads();
    for _ in 0..3 {
        let dir = Dir::new();
        let recorder = dir
            .fltrace()
            .args(["record", "-q", "-L=16", "-M=64", "--", "sh", "-c"])
            .arg(format!("exec {} threads 8 1", w.farmem.display()))
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("fltrace runs");
        let prefix = format!("fltrace-rt-{}-", recorder.id());
        let out = wait_within(recorder, std::time::Duration::from_secs(60));
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let pid = dir.pids("stats", "out")[0];
        let faults = last_stat(&dir, pid, "rt_faults");
        assert!(faults >= 2048, "{faults} runtime faults");
        let left: Vec<String> = std::fs::read_dir("/dev/shm")
            .expect("/dev/shm")
            .filter_map(|e| e.ok()?.file_name().into_string().ok())
            .filter(|name| name.starts_with(&prefix))
            .collect();
        assert!(left.is_empty(), "{left:?}");
    }
}

/// A runtime that cannot make its statistics page (here its directory does not exist) says
/// so in one line with the reason, and the program runs on under the limit.
#[test]
fn a_runtime_without_its_statistics_page_says_so() {
    let w = workloads();
    let library = Path::new(env!("CARGO_BIN_EXE_fltrace")).with_file_name("libfltrace_preload.so");
    let out = output_within(
        std::process::Command::new(&w.farmem)
            .args(["threads", "8", "1"])
            .env("LD_PRELOAD", &library)
            .env("FLTRACE_RT_LOCAL_PAGES", "1024")
            .env("FLTRACE_RT_MAX_PAGES", "16384")
            .env("FLTRACE_RT_SHARED", "/nonexistent-fltrace-dir/page"),
        std::time::Duration::from_secs(60),
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(
        err.ends_with(
            " has no statistics page (open: errno 2): its far-memory statistics are not recorded\n"
        ) && err.starts_with("fltrace: far memory: process ")
            && err.lines().count() == 1,
        "{err}"
    );
}

/// Pages move between local and far memory (`UFFDIO_MOVE`, the default on this kernel): every
/// evicted page goes to the store whole, none is write-protected or copied (so no first write
/// faults), and the data comes back; with `FLTRACE_RT_MOVE=0` dirty pages are copied out, and
/// reads fetch pages write-protected, so that a write after them faults once more.
#[test]
fn moved_pages_keep_their_data_without_write_faults() {
    let w = workloads();
    let run = |moving: &str| {
        let dir = Dir::new();
        let out = dir
            .fltrace()
            .env("FLTRACE_RT_MOVE", moving)
            .args(["record", "-q", "-L=8", "-M=256", "--"])
            .arg(&w.farmem)
            .args(["threads", "16", "4"])
            .output()
            .expect("fltrace runs");
        assert_eq!(
            out.status.code(),
            Some(0),
            "FLTRACE_RT_MOVE={moving}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let pid = dir.pids("stats", "out")[0];
        let stats = fltrace_trace::files::stats(dir.path(), pid);
        let stat = |name: &str| {
            fltrace_trace::stats::last_value(&stats, name)
                .expect("stats")
                .unwrap_or_else(|| panic!("no {name}"))
        };
        (
            stat("evict_pages_done"),
            stat("evict_writes"),
            stat("faults_wp"),
            stat("rt_evict_wp_ns"),
        )
    };
    let (evicted, written, wp_faults, wp_ns) = run("1");
    assert!(evicted > 10_000, "heavy eviction: {evicted}");
    assert_eq!(written, evicted, "every evicted page moved to the store");
    assert_eq!((wp_faults, wp_ns), (0, 0), "nothing write-protected");
    let (evicted, written, _, wp_ns) = run("0");
    assert!(
        written < evicted,
        "clean pages are dropped, not copied: {written} of {evicted}"
    );
    assert!(
        wp_ns > 0,
        "dirty victims are write-protected before their copy"
    );
}

/// read(2) into evicted pages: the kernel's faults on them are served and recorded.
#[test]
fn read_into_evicted_pages_is_recorded() {
    let w = workloads();
    let dir = Dir::new();
    let (code, err) = far(&dir, "8", "256", &w.farmem, &["readinto", "32"]);
    assert_eq!(code, Some(0), "{err}");
    let report = dir.report_json(&["--by", "stack"]);
    let fetched = sum_through(&report, "main", site("farmem.c", "readinto"), "fetches");
    assert_eq!(fetched, 256, "one fetch per page of the 1 MiB read");
}

/// System calls move buffers four times local memory through the kernel, each in one call
/// (`syscallmem.c`: write, pread, send to a forked child that recv()s, writev to one that
/// readv()s through a pipe, fwrite, fread, and the C library's own stdio and directory
/// buffers with the program's memory churned between lines): every byte arrives. On the
/// in-thread path the kernel's own access to a missing page would fail: the wrappers hold and
/// touch what the kernel touches, a piece at a time, so that each process stays within its
/// 50 MB while 200 MB pass through each call, its pages evicted as the call goes on. On the
/// handler-thread path the kernel's faults are served by the handler thread.
#[test]
fn system_calls_move_far_memory_through_the_kernel() {
    let dir = Dir::new();
    let program = build_c_workload(dir.path(), "syscallmem.c");
    let limit_pages = 50 * 256;
    for path in ["in-thread", "thread"] {
        let run = Dir::new();
        let file = run.path().join("data");
        let mut command = run.fltrace();
        command.env(
            "FLTRACE_RT_FAULT_PATH",
            if path == "thread" { "thread" } else { "signal" },
        );
        let out = output_within(
            command
                .args(["record", "-q", "-L=50", "-M=1024", "--"])
                .arg(&program)
                .arg("200")
                .arg(&file),
            std::time::Duration::from_secs(1200),
        );
        assert!(
            out.status.success(),
            "{path}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let pids = run.pids("stats", "out");
        assert_eq!(pids.len(), 3, "{path}: the program and its two children");
        let parent = *pids.iter().min().expect("pids");
        for &pid in &pids {
            assert!(
                last_stat(&run, pid, "memory_used") <= 50 << 20,
                "{path}: process {pid} over -L"
            );
            let expected = if path == "thread" {
                (
                    fltrace_runtime_abi::path::THREADS,
                    fltrace_runtime_abi::path_reason::ASKED,
                )
            } else {
                (fltrace_runtime_abi::path::IN_THREAD, 0)
            };
            assert_eq!(
                (
                    last_stat(&run, pid, "rt_fault_path"),
                    last_stat(&run, pid, "rt_fault_path_reason")
                ),
                expected
            );
        }
        if path == "thread" {
            assert_eq!(last_stat(&run, parent, "rt_syscalls_prepared"), 0);
            continue;
        }
        // Each child received 200 MB into pages its own writes had pushed out: all brought in
        // by the receiving calls, a piece held at a time (at most half the limit).
        for &child in pids.iter().filter(|&&p| p != parent) {
            assert!(
                last_stat(&run, child, "rt_syscall_faults") >= 200 * 256,
                "child {child}"
            );
            assert!(last_stat(&run, child, "rt_syscall_pinned_peak") <= limit_pages / 2);
        }
        // The parent's write, pread, send, writev, fwrite and fread each took a 200 MB buffer
        // through the kernel. At the start of each call at most 50 MB of it was local (the
        // runtime's peak above is within -L), so at least 150 MB of each came in during the
        // call. Quiet, every page of every call does (307,200); under a full suite's load
        // once fewer than 256,000 did, so the bound is what -L guarantees.
        let parent_faults = last_stat(&run, parent, "rt_syscall_faults");
        assert!(
            parent_faults >= 6 * 150 * 256,
            "{parent_faults} pages brought in by the parent's six calls"
        );
        assert!(last_stat(&run, parent, "rt_syscall_pinned_peak") <= limit_pages / 2);
    }
}

/// `kernelcalls.c` hands evicted far memory to the kernel through `ioctl` (a request older
/// than the size encoding, and one with it), raw `syscall(2)` (read, write, getrandom, futex)
/// and `sendmmsg`/`recvmmsg`. On the in-thread path the kernel cannot wait for those pages:
/// each call is prepared (its buffers brought in and held), so every byte arrives, the futex
/// sees its word, and the ioctls write theirs. The handler-thread path does the same with
/// nothing to prepare.
#[test]
fn ioctl_raw_syscalls_and_mmsg_calls_reach_evicted_memory() {
    let dir = Dir::new();
    let program = build_c_workload(dir.path(), "kernelcalls.c");
    for path in ["signal", "thread"] {
        let run = Dir::new();
        let mut command = run.fltrace();
        command.env("FLTRACE_RT_FAULT_PATH", path);
        let out = command
            .args(["record", "-q", "-L=8", "-M=256", "--"])
            .arg(&program)
            .output()
            .expect("fltrace runs");
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success() && stdout.contains("kernelcalls: 8 calls right"),
            "{path}: {stdout}{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let pid = run.pids("stats", "out")[0];
        let prepared = last_stat(&run, pid, "rt_syscalls_prepared");
        if path == "thread" {
            assert_eq!(prepared, 0);
        } else {
            // The eight calls above and the fill of their buffers' pages: at least one
            // prepared call each, and a page brought in for each.
            assert!(prepared >= 8, "{prepared} calls prepared");
            assert!(last_stat(&run, pid, "rt_syscall_faults") >= 8);
        }
    }
}

/// A program with SIGBUS and SIGSEGV handlers of its own (`ownsignals.c`) under `-L`: its
/// SIGSEGV handler catches its NULL reads and touches far memory inside (every signal blocked
/// there, the runtime's SIGBUS still reaches the fault); its SIGBUS handler, installed with
/// signal() then sigaction() and given back as installed, sees the truncated file's faults at
/// their addresses and the SIGBUS it raises, and nothing of the runtime's; with every signal
/// blocked, in the main thread and in a thread of its own, far memory still works. On the
/// in-thread path the runtime passed exactly those three SIGBUS on.
#[test]
fn a_programs_own_sigbus_and_sigsegv_handlers_see_their_own_faults() {
    let dir = Dir::new();
    let program = build_c_workload(dir.path(), "ownsignals.c");
    let (code, err) = far_on(&dir, "signal", "8", "256", &program, &["64"]);
    assert_eq!(code, Some(0), "{err}");
    let pid = dir.pids("stats", "out")[0];
    assert_eq!(
        last_stat(&dir, pid, "rt_fault_path"),
        fltrace_runtime_abi::path::IN_THREAD
    );
    assert_eq!(last_stat(&dir, pid, "rt_signals_passed"), 3);
    assert!(last_stat(&dir, pid, "rt_signals") > 10 * 64 * 256);
    assert!(last_stat(&dir, pid, "memory_used") <= 8 << 20);
}

/// The handler-thread path, asked for (`--fault-path threads`, which wins over the
/// environment's `FLTRACE_RT_FAULT_PATH`), serves the far-memory workloads as before, and
/// `record -v` says which path each process took and why.
#[test]
fn the_handler_thread_path_serves_when_asked_and_says_so() {
    let w = workloads();
    for args in [
        &["threads", "16", "4"][..],
        &["forkevict", "32"][..],
        &["readinto", "32"][..],
    ] {
        let dir = Dir::new();
        let out = dir
            .fltrace()
            .env("FLTRACE_RT_FAULT_PATH", "signal")
            .args([
                "record",
                "-v",
                "-L=8",
                "-M=256",
                "--fault-path=threads",
                "--",
            ])
            .arg(&w.farmem)
            .args(args)
            .output()
            .expect("fltrace runs");
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(0), "{args:?}: {err}");
        let pid = dir.pids("stats", "out")[0];
        assert_eq!(
            last_stat(&dir, pid, "rt_fault_path"),
            fltrace_runtime_abi::path::THREADS
        );
        assert!(last_stat(&dir, pid, "rt_msgs") >= last_stat(&dir, pid, "rt_faults"));
        assert_eq!(last_stat(&dir, pid, "rt_signals"), 0);
        assert!(
            err.contains(&format!(
                "process {pid}: far-memory faults served by handler threads: asked for (--fault-path threads, or FLTRACE_RT_FAULT_PATH=thread)"
            )),
            "{err}"
        );
    }
    // By default, handler threads too, and said so; asked for, served in the thread: by the
    // flag, or by the environment fltrace's command inherits.
    let dir = Dir::new();
    let out = dir
        .fltrace()
        .args(["record", "-v", "-L=8", "-M=256", "--"])
        .arg(&w.farmem)
        .args(["threads", "16", "4"])
        .output()
        .expect("fltrace runs");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{err}");
    let pid = dir.pids("stats", "out")[0];
    assert!(
        err.contains(&format!(
            "process {pid}: far-memory faults served by handler threads: the default (--fault-path in-thread serves them in the faulting thread)"
        )),
        "{err}"
    );
    for (flag, env) in [
        (Some("--fault-path=in-thread"), None),
        (None, Some("signal")),
    ] {
        let dir = Dir::new();
        let mut command = dir.fltrace();
        if let Some(env) = env {
            command.env("FLTRACE_RT_FAULT_PATH", env);
        }
        let out = command
            .args(["record", "-v", "-L=8", "-M=256"])
            .args(flag)
            .arg("--")
            .arg(&w.farmem)
            .args(["threads", "16", "4"])
            .output()
            .expect("fltrace runs");
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(0), "{flag:?} {env:?}: {err}");
        let pid = dir.pids("stats", "out")[0];
        assert!(
            err.contains(&format!(
                "process {pid}: far-memory faults served in the faulting thread"
            )),
            "{flag:?} {env:?}: {err}"
        );
        assert_eq!(
            last_stat(&dir, pid, "rt_fault_path"),
            fltrace_runtime_abi::path::IN_THREAD
        );
        assert!(last_stat(&dir, pid, "rt_signals") > 0, "{flag:?} {env:?}");
    }
    // Without far memory the flag has nothing to choose: refused by name.
    let dir = Dir::new();
    let out = dir
        .fltrace()
        .args(["record", "-q", "--fault-path=in-thread", "--", "true"])
        .output()
        .expect("fltrace runs");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("--local-mem <MiB>"), "{err}");
}

/// Running out of -M is one clear line and a non-zero exit.
#[test]
fn exhausting_far_memory_is_a_clear_error() {
    let w = workloads();
    let dir = Dir::new();
    let (code, err) = far(&dir, "8", "64", &w.farmem, &["exhaust", "16"]);
    assert_eq!(code, Some(12), "{err}");
    assert!(err.contains("out of far memory"), "{err}");
    assert!(err.contains("-M 64 MiB"), "{err}");
}

/// The clock policy keeps a page that is written all the time; FIFO evicts it again and again.
#[test]
fn clock_keeps_a_hot_page_fifo_does_not() {
    let w = workloads();
    let fetches = |policy: &str| {
        let dir = Dir::new();
        let out = dir
            .fltrace()
            .args(["record", "-q", "-L=4", "-M=64", "--policy", policy, "--"])
            .arg(&w.farmem)
            .args(["hot", "8", "10"])
            .output()
            .expect("runs");
        assert!(out.status.success());
        let report = dir.report_json(&["--by", "line"]);
        group_at(&report, "farmem.c", site("farmem.c", "hot"))["fetches"]
            .as_u64()
            .unwrap_or(0)
    };
    let (fifo, clock, refault) = (fetches("fifo"), fetches("clock"), fetches("refault"));
    assert!(fifo >= 10, "fifo refetches the hot page: {fifo}");
    assert!(clock <= 2, "clock keeps it: {clock}");
    // Refault only learns from a fetch soon after an eviction, then spares the page once.
    assert!(
        refault < fifo,
        "refault spares the refetched hot page: {refault} against fifo's {fifo}"
    );
}

/// Bad far-memory options.
#[test]
fn bad_far_memory_options() {
    let dir = Dir::new();
    for (args, needle) in [
        (&["record", "-L=0", "-M=10", "--", "true"][..], "positive"),
        (
            &["record", "-L=20", "-M=10", "--", "true"][..],
            "must not exceed",
        ),
        (
            &["record", "-L=10", "-M=100000000", "--", "true"][..],
            "more than the",
        ),
        (
            &["record", "-L=10", "-M=20", "--policy", "lru", "--", "true"][..],
            "invalid value",
        ),
        (
            &["record", "-L=10", "-M=20", "-p", "1"][..],
            "not to a running process",
        ),
    ] {
        let out = dir.run(args);
        assert_ne!(out.status.code(), Some(0), "{args:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(needle), "{args:?}: {err}");
    }
}

/// `sweep` measures the peak, records at each local-memory share, writes the CSV and the plot,
/// and skips runs already recorded when run again.
#[test]
fn sweep_tabulates_and_resumes() {
    let w = workloads();
    let dir = Dir::new();
    let sweep = || {
        dir.fltrace()
            .args([
                "sweep", "--from", "100", "--to", "25", "--step", "75", "-o", "out", "--",
            ])
            .arg(&w.scan)
            .args(["16", "3"])
            .output()
            .expect("runs")
    };
    let out = sweep();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let csv = std::fs::read_to_string(dir.path().join("out/sweep.csv")).expect("csv");
    let rows: Vec<Vec<u64>> = csv
        .lines()
        .skip(1)
        .map(|l| l.split(',').map(|f| f.parse().expect("number")).collect())
        .collect();
    assert_eq!(rows.iter().map(|r| r[0]).collect::<Vec<_>>(), vec![100, 25]);
    // With a quarter of the peak local, the two read passes fetch all 4096 pages each.
    assert!(rows[1][4] >= 2 * 4096, "fetches at 25%: {:?}", rows[1]);
    assert_eq!(rows[0][4], 0, "nothing fetched with all memory local");
    let svg = std::fs::read_to_string(dir.path().join("out/sweep.svg")).expect("plot");
    assert!(svg.contains("local memory (% of peak)"));

    let again = sweep();
    assert!(again.status.success());
    assert_eq!(
        String::from_utf8_lossy(&again.stderr)
            .matches("already recorded")
            .count(),
        2
    );
}

/// `readscan.c` (two threads, each writing its own array once and reading it in further
/// passes), built once.
fn readscan() -> &'static Path {
    static BUILT: std::sync::OnceLock<(tempfile::TempDir, std::path::PathBuf)> =
        std::sync::OnceLock::new();
    &BUILT
        .get_or_init(|| {
            let dir = tempfile::tempdir().expect("temp dir");
            let out = dir.path().join("readscan");
            let status = std::process::Command::new("gcc")
                .args(["-O2", "-g", "-fomit-frame-pointer", "-o"])
                .arg(&out)
                .arg(workloads_dir().join("readscan.c"))
                .arg("-lpthread")
                .status()
                .expect("gcc runs");
            assert!(status.success());
            (dir, out)
        })
        .1
}

/// The runtime's log and the trace agree exactly on a two-threaded program under heavy
/// eviction: every log entry finds its row (the row of its thread and page that it follows
/// in time), so the trace's first touches and fetches are exactly the workload's, and every
/// handled fault is matched.
///
/// 1 MiB local (256 pages) makes eviction reach a page soon after it was served: a page
/// evicted before its thread had run again would be filled twice for one fault row (the
/// kernel retries the access without a second fault event), a first touch counted as a fetch.
/// The runtime keeps a page served for a thread until that thread faults again.
#[test]
fn runtime_log_and_trace_agree_on_threads() {
    let dir = Dir::new();
    // 16 MiB per thread, 3 passes, 1 MiB local: under FIFO every page of a later pass was
    // evicted since its thread last read it.
    let (code, err) = far_on(&dir, "signal", "1", "128", readscan(), &["16", "3"]);
    assert_eq!(code, Some(0), "{err}");
    let pages = 2 * 16 * 256;
    let pid = dir.pids("stats", "out")[0];
    let stats = fltrace_trace::files::stats(dir.path(), pid);
    let stat = |name: &str| {
        fltrace_trace::stats::last_value(&stats, name)
            .expect("stats")
            .unwrap_or_else(|| panic!("no {name}"))
    };
    // Under load the kernel sometimes takes an access's fault twice (untraced too, see
    // `churn.rs`): the row it did not serve is one more at the line, but no first touch.
    let retried = stat("rt_rows_unhandled") + stat("rt_resolved_elsewhere");
    let report = dir.report_json(&["--by", "line"]);
    assert_eq!(report["lost"], 0);
    let write = group_at(&report, "readscan.c", site("readscan.c", "readscan_write"));
    assert_eq!(
        (write["first_touches"].as_u64(), write["fetches"].as_u64()),
        (Some(pages), Some(0))
    );
    let count = write["count"].as_u64().expect("count");
    assert!(
        (pages..=pages + retried).contains(&count),
        "{count} faults at the write for {pages} pages, {retried} not served as fills"
    );
    let read = group_at(&report, "readscan.c", site("readscan.c", "readscan_read"));
    assert_eq!(read["fetches"].as_u64(), Some(2 * pages));
    let count = read["count"].as_u64().expect("count");
    assert!(
        (2 * pages..=2 * pages + retried).contains(&count),
        "{count} faults at the reads for {} fetches, {retried} not served as fills",
        2 * pages
    );
    assert_eq!(stat("rt_unmatched"), 0);
    assert_eq!(stat("rt_log_missed"), 0);
    // Every entry of the log (each handled fault, and each wake-up of a thread whose page
    // another thread's fault brought in) matched its row.
    assert_eq!(
        stat("rt_matched"),
        stat("rt_faults") + stat("rt_resolved_elsewhere")
    );
    assert!(stat("rt_faults") >= 3 * pages);
    // Served in the faulting threads (asked for here): each fault reached its
    // thread's SIGBUS handler, none a handler thread.
    assert_eq!(stat("rt_fault_path"), fltrace_runtime_abi::path::IN_THREAD);
    assert_eq!(stat("rt_msgs"), 0);
    // The breakdown is there: every fault was timed, and eviction took part of it.
    assert!(stat("rt_signals") >= stat("rt_faults"));
    assert!(stat("rt_handle_ns") > 0 && stat("rt_evict_ns") > 0);
    assert!(stat("rt_wait_ns") > 0 && stat("program_cpu_ns") > 0);
    assert!(stat("memory_used") <= 1 << 20);
    // The store pages that evicted pages are copied into are made present a run at a time,
    // not faulted in by each copy: the runtime's own faults (each one more record with its
    // stack, through the signal frame) do not grow with the pages written out (22,580 faults
    // for 22,645 writes before; about 120 now, its code and metadata).
    assert!(stat("evict_writes") >= pages);
    assert!(
        stat("faults_tracer") * 20 < stat("evict_writes"),
        "{} faults of the runtime's own for {} pages written out",
        stat("faults_tracer"),
        stat("evict_writes")
    );
}

/// A child forked without exec is emulated under the same limit, a budget of its own
/// (`forkchild.c`): it inherits the parent's pages where they were, its own 2048 pages are
/// first touches, and since they push every inherited page out of its 4 MiB, its read of the
/// parent's 16 MiB fetches each of the 4096 pages exactly once, from its copy of the store.
/// Its far-memory statistics are its own and exact; the parent fetched nothing for the fork.
#[test]
fn forked_child_is_emulated_with_its_own_limit() {
    let dir = Dir::new();
    let program = build_c_workload(dir.path(), "forkchild.c");
    let (code, err) = far(&dir, "4", "64", &program, &["16", "8"]);
    assert_eq!(code, Some(0), "{err}");
    assert!(!err.contains("without a local limit"), "{err}");
    let pids = dir.pids("stats", "out");
    assert_eq!(pids.len(), 2, "{pids:?}");
    let (parent, child) = (pids[0].min(pids[1]), pids[0].max(pids[1]));
    let at = |pid: u32, name: &str| {
        let report = dir.report_json(&["--by", "line", "--pid", &pid.to_string()]);
        let group = group_at(&report, "forkchild.c", site("forkchild.c", name));
        (
            group["count"].as_u64(),
            group["first_touches"].as_u64(),
            group["fetches"].as_u64(),
        )
    };
    let (parent_pages, child_pages) = (16 * 256, 8 * 256);
    assert_eq!(
        at(parent, "forkchild_parent_write"),
        (Some(parent_pages), Some(parent_pages), Some(0))
    );
    assert_eq!(
        at(child, "forkchild_child_write"),
        (Some(child_pages), Some(child_pages), Some(0))
    );
    // Exact but for fetches the recorder could no longer flag (`rt_fetches_late`) or match
    // (`rt_unmatched`), which the stats count: seen once under heavy load.
    let unflagged =
        last_stat(&dir, child, "rt_fetches_late") + last_stat(&dir, child, "rt_unmatched");
    assert_eq!(
        at(child, "forkchild_child_read"),
        (
            Some(parent_pages),
            Some(unflagged),
            Some(parent_pages - unflagged)
        ),
        "{}",
        std::fs::read_to_string(fltrace_trace::files::stats(dir.path(), child)).unwrap_or_default()
    );
    assert!(unflagged <= 8, "{unflagged} fetches unflagged");
    // The child's runtime: every handled fault matched its row, local memory within its
    // limit, its own counters (the read's fetches and the write's first touches, plus the
    // allocator's few pages).
    assert_eq!(last_stat(&dir, child, "rt_unmatched"), 0);
    assert_eq!(last_stat(&dir, child, "rt_log_missed"), 0);
    assert_eq!(
        last_stat(&dir, child, "rt_matched"),
        last_stat(&dir, child, "rt_faults") + last_stat(&dir, child, "rt_resolved_elsewhere")
    );
    let fetches = last_stat(&dir, child, "faults_fetch");
    assert!(
        (parent_pages..parent_pages + 16).contains(&fetches),
        "{fetches}"
    );
    let zero = last_stat(&dir, child, "faults_zp");
    assert!((child_pages..child_pages + 16).contains(&zero), "{zero}");
    assert!(last_stat(&dir, child, "memory_used") <= 4 << 20);
    assert_eq!(last_stat(&dir, parent, "fork_fetches"), 0);
}

const UNPRIVILEGED_USERFAULTFD: &str = "/proc/sys/vm/unprivileged_userfaultfd";

/// Sets `vm.unprivileged_userfaultfd` for a test and puts the old value back however the test
/// ends.
/// One test at a time holds the setting (the tests of a binary run in parallel).
static SYSCTL_HELD: std::sync::Mutex<()> = std::sync::Mutex::new(());

struct UnprivilegedUserfaultfd {
    old: String,
    _held: std::sync::MutexGuard<'static, ()>,
}

impl UnprivilegedUserfaultfd {
    fn set(value: &str) -> UnprivilegedUserfaultfd {
        let held = SYSCTL_HELD.lock().unwrap_or_else(|e| e.into_inner());
        let old = std::fs::read_to_string(UNPRIVILEGED_USERFAULTFD).expect("the sysctl");
        let guard = UnprivilegedUserfaultfd { old, _held: held };
        if guard.old.trim() != value {
            std::fs::write(UNPRIVILEGED_USERFAULTFD, value).expect("sets the sysctl");
        }
        guard
    }
}

impl Drop for UnprivilegedUserfaultfd {
    fn drop(&mut self) {
        let _ = std::fs::write(UNPRIVILEGED_USERFAULTFD, self.old.trim());
    }
}

/// `-L --user nobody` with `vm.unprivileged_userfaultfd=0`: the program's runtime could catch
/// only user-mode faults, and its read(2) into evicted memory would fail (EFAULT). fltrace
/// says so in one line and what to do, before the program runs, and exits non-zero.
#[test]
fn far_memory_as_an_unprivileged_user_is_refused_with_the_sysctl() {
    let _sysctl = UnprivilegedUserfaultfd::set("0");
    let dir = Dir::new();
    // Writable by nobody, so that the command would leave its mark if it ran.
    std::fs::set_permissions(
        dir.path(),
        std::os::unix::fs::PermissionsExt::from_mode(0o1777),
    )
    .expect("chmod");
    let mark = dir.path().join("ran");
    let runtime = readable_runtime(dir.path());
    let out = output_within(
        dir.fltrace()
            .env("FLTRACE_RUNTIME", &runtime)
            .args(["record", "-q", "-L=4", "-M=64", "--user", "nobody", "--"])
            .arg("/usr/bin/touch")
            .arg(&mark),
        std::time::Duration::from_secs(60),
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert_eq!(
        stderr,
        "fltrace: -L/-M with the command run as uid 65534: vm.unprivileged_userfaultfd=0 lets an unprivileged program's runtime catch only user-mode faults, so its system calls on evicted memory would fail (EFAULT); run `sysctl vm.unprivileged_userfaultfd=1` first, or leave out --user/--drop-privileges\n"
    );
    assert!(!mark.exists(), "the command ran");

    // The advice works: with the sysctl at 1, the same user's read(2) into evicted pages
    // succeeds (the workload checks every byte).
    std::fs::write(UNPRIVILEGED_USERFAULTFD, "1").expect("sets the sysctl");
    let farmem = dir.path().join("farmem");
    std::fs::copy(&workloads().farmem, &farmem).expect("copy readable by nobody");
    let out = output_within(
        dir.fltrace()
            .env("FLTRACE_RUNTIME", &runtime)
            .args(["record", "-q", "-L=4", "-M=64", "--user", "nobody", "--"])
            .arg(&farmem)
            .args(["readinto", "16"]),
        std::time::Duration::from_secs(120),
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A redis-server recorded by fltrace with `flags`, on a free loopback port.
struct Redis {
    port: String,
    server: std::process::Child,
}

impl Redis {
    fn start(dir: &Dir, flags: &[&str]) -> Redis {
        use std::process::Stdio;
        // A free loopback port: taken from the kernel, then let go for redis.
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("a free port")
            .port()
            .to_string();
        let server = dir
            .fltrace()
            .arg("record")
            .args(flags)
            .args(["--", "redis-server", "--port", &port, "--bind", "127.0.0.1"])
            .args(["--save", "", "--appendonly", "no", "--dir"])
            .arg(dir.path())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("fltrace runs");
        let redis = Redis { port, server };
        let started = std::time::Instant::now();
        while !redis.cli(&["ping"]).contains("PONG") {
            assert!(
                started.elapsed() < std::time::Duration::from_secs(60),
                "redis did not answer"
            );
            std::thread::sleep(std::time::Duration::from_millis(100));
        }
        redis
    }

    fn cli(&self, args: &[&str]) -> String {
        let out = std::process::Command::new("redis-cli")
            .args(["-p", &self.port])
            .args(args)
            .output()
            .expect("redis-cli runs");
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// redis-benchmark's requests of `args`: it must succeed, within minutes (a server that
    /// stops answering fails the test instead of hanging it).
    fn bench(&self, args: &[&str]) {
        let out = output_within(
            std::process::Command::new("redis-benchmark")
                .args(["-p", &self.port, "-q"])
                .args(args),
            std::time::Duration::from_secs(300),
        );
        assert!(out.status.success(), "{out:?}");
    }

    /// The server's pid, as redis says.
    fn pid(&self) -> u32 {
        let info = self.cli(&["info", "server"]);
        info.lines()
            .find_map(|l| l.strip_prefix("process_id:"))
            .and_then(|p| p.trim().parse().ok())
            .unwrap_or_else(|| panic!("no process_id in {info}"))
    }

    /// Shuts redis down and returns fltrace's stderr, which must end well.
    fn stop(self) -> String {
        self.cli(&["shutdown", "nosave"]);
        let out = wait_within(self.server, std::time::Duration::from_secs(120));
        let err = String::from_utf8_lossy(&out.stderr).into_owned();
        assert!(out.status.success(), "{err}");
        err
    }
}

/// The last value of a stats counter of process `pid`.
fn last_stat(dir: &Dir, pid: u32, name: &str) -> u64 {
    let stats = fltrace_trace::files::stats(dir.path(), pid);
    fltrace_trace::stats::last_value(&stats, name)
        .expect("stats")
        .unwrap_or_else(|| panic!("no {name} for {pid}"))
}

/// The benchmark the redis tests drive: every test of redis-benchmark, among them large
/// replies (LRANGE) whose buffers are freed and allocated again on every request. Long enough
/// that the runtime's fixed cost (its allocator's 16-byte header per block makes redis's
/// start-up heap about 1 MB larger: some 240 more first touches) is not most of the difference.
const REDIS_BENCH: &[&str] = &["-n", "10000"];

/// redis with local memory above its peak takes the faults plain `record` sees, within 1.2x:
/// memory it frees stays mapped, as its allocator would keep it, and is not touched afresh
/// (before, every freed page came back as a zero-fill fault: 14x plain `record`).
#[test]
fn redis_with_ample_local_memory_faults_as_plain_record() {
    // The program's faults: on the in-thread path the runtime's own work in the program's
    // threads (its page states' first touches, its code) takes faults there too, flagged as
    // the preloaded library's and counted apart.
    let faults = |flags: &[&str]| {
        let dir = Dir::new();
        let redis = Redis::start(&dir, flags);
        redis.bench(REDIS_BENCH);
        let pid = redis.pid();
        redis.stop();
        (
            last_stat(&dir, pid, "faults") - last_stat(&dir, pid, "faults_tracer"),
            dir,
        )
    };
    let (plain, _) = faults(&["-q"]);
    let (far, dir) = faults(&["-q", "-L=256", "-M=1024"]);
    let pid = dir.pids("stats", "out")[0];
    // Nothing evicted, nothing fetched: the limit was never reached.
    assert_eq!(last_stat(&dir, pid, "evict_pages_done"), 0);
    assert_eq!(last_stat(&dir, pid, "faults_fetch"), 0);
    assert!(
        far * 10 <= plain * 12,
        "{far} faults under -L=256 against {plain} under plain record"
    );
}

/// bench/servers.sh's workload.
const REDIS_LARGE_VALUES: &[&str] = &[
    "-t",
    "set,get,lpush,lrange_100",
    "-d",
    "1000",
    "-r",
    "100000",
    "-n",
    "20000",
];

/// The same with 1000-byte values on 100,000 keys under SET, GET, LPUSH and LRANGE_100: values
/// and list nodes that live on (each node grown by reallocation from 1 KiB to 8 KiB), 16 KiB
/// reply chunks freed after every LRANGE. Within the issue's 1.2x: the runtime keeps each
/// doubling of size classes in a pool of its own, as jemalloc's slabs keep classes apart
/// (0.99x-1.01x plain `record`'s faults over five runs, 1.03x with 4 clients; one talc heap
/// for every size took 1.03x-1.47x, docs/BENCHMARKS.md), and freed memory stays mapped and is
/// reused (every freed page touched afresh was 14x).
#[test]
fn redis_with_large_values_and_ample_local_memory_faults_as_plain_record() {
    let faults = |flags: &[&str]| {
        let dir = Dir::new();
        let redis = Redis::start(&dir, flags);
        redis.bench(REDIS_LARGE_VALUES);
        let pid = redis.pid();
        redis.stop();
        (
            last_stat(&dir, pid, "faults") - last_stat(&dir, pid, "faults_tracer"),
            dir,
        )
    };
    let (plain, _) = faults(&["-q"]);
    let (far, dir) = faults(&["-q", "-L=512", "-M=1024"]);
    let pid = dir.pids("stats", "out")[0];
    assert_eq!(last_stat(&dir, pid, "evict_pages_done"), 0);
    assert_eq!(last_stat(&dir, pid, "faults_fetch"), 0);
    assert!(
        far * 10 <= plain * 12,
        "{far} faults under -L=512 against {plain} under plain record"
    );
}

/// The run reported to hang for 14 minutes (`-n 10000`, here half its requests to keep the
/// test short): every default test of redis-benchmark with 1000-byte values on random keys
/// (LRANGE_600 replies of 600 KB), under plain `record`. It ends, within the benchmark's time
/// limit, with every fault recorded (0 lost) and the server shut down cleanly.
#[test]
fn redis_under_record_serves_every_test_with_large_values() {
    let dir = Dir::new();
    let redis = Redis::start(&dir, &["-q"]);
    redis.bench(&["-d", "1000", "-r", "100000", "-n", "5000"]);
    let pid = redis.pid();
    redis.stop();
    assert_eq!(last_stat(&dir, pid, "lost"), 0);
    assert!(last_stat(&dir, pid, "faults") > 10_000);
}

/// Resident anonymous memory of `pid` (`RssAnon`), bytes.
fn rss_anon(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("status");
    status
        .lines()
        .find_map(|l| l.strip_prefix("RssAnon:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .expect("RssAnon")
        * 1024
}

/// What lies outside the managed region and the store in a far-memory process's anonymous
/// memory (docs/ARCHITECTURE.md): stacks, libraries' writable data, the runtime's metadata.
const OUTSIDE_REGION_ALLOWANCE: u64 = 4 << 20;

/// redis holding about 25 MB with half of it local: local memory stays within the limit, and
/// the process's anonymous RSS is the local pages plus the far ones in the store plus the
/// documented allowance (the stats file says each). A `bgsave` then works: the forked child
/// is emulated under the same limit (its own budget), reading the evicted pages from its copy
/// of the store; nothing is fetched before the fork, none of it charged to `redisFork`.
#[test]
fn redis_at_half_its_peak_holds_the_limit_and_saves_in_the_background() {
    let dir = Dir::new();
    let limit: u64 = 12 << 20;
    let redis = Redis::start(&dir, &["-q", "-L=12", "-M=1024"]);
    // 20,000 values of 1,000 bytes: about 25 MB at the peak.
    redis.bench(&["-t", "set", "-d", "1000", "-r", "100000", "-n", "20000"]);
    let pid = redis.pid();
    let anon = rss_anon(pid);
    // A stats line written after the benchmark ended.
    std::thread::sleep(std::time::Duration::from_millis(1500));
    let local = last_stat(&dir, pid, "memory_local");
    let far = last_stat(&dir, pid, "memory_far");
    assert!(local <= limit, "{local} local bytes over the limit");
    assert!(
        far >= 8 << 20,
        "only {far} bytes far: the limit was not reached"
    );
    // Clean copies kept in the store: at most 10% of the limit.
    let bound = local + far + limit / 10 + OUTSIDE_REGION_ALLOWANCE;
    assert!(
        anon <= bound,
        "RssAnon {anon} over {local} local + {far} far + allowances"
    );
    assert!(last_stat(&dir, pid, "rss_anon") > 0);

    assert!(redis.cli(&["bgsave"]).contains("started"));
    let started = std::time::Instant::now();
    while !redis
        .cli(&["info", "persistence"])
        .contains("rdb_bgsave_in_progress:0")
    {
        assert!(started.elapsed() < std::time::Duration::from_secs(60));
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    let persistence = redis.cli(&["info", "persistence"]);
    assert!(
        persistence.contains("rdb_last_bgsave_status:ok"),
        "{persistence}"
    );
    let err = redis.stop();
    let dump = std::fs::metadata(dir.path().join("dump.rdb")).expect("dump.rdb");
    assert!(dump.len() > 10 << 20, "{dump:?}");
    assert_eq!(last_stat(&dir, pid, "fork_fetches"), 0);
    assert!(!err.contains("without a local limit"), "{err}");
    // The save child: its own runtime fetched the evicted pages it wrote out, within its limit.
    let child = dir
        .pids("stats", "out")
        .into_iter()
        .find(|&p| p != pid)
        .expect("the save child's stats");
    assert!(last_stat(&dir, child, "faults_fetch") > 1000);
    assert!(last_stat(&dir, child, "memory_used") <= limit);
    let report = dir.report_json(&["--by", "stack", "--pid", &pid.to_string()]);
    let fork_fetches: u64 = groups(&report)
        .filter(|g| {
            g["stack"]
                .as_array()
                .into_iter()
                .flatten()
                .any(|f| f["function"] == "redisFork")
        })
        .map(|g| g["fetches"].as_u64().unwrap_or(0))
        .sum();
    assert_eq!(fork_fetches, 0);
}

/// PostgreSQL 15 under `-L`, run as the postgres user: the postmaster and its backends and
/// workers, forked without exec, are each emulated under the limit (a budget of their own),
/// and pgbench's transactions all succeed; the server shuts down cleanly.
#[test]
fn postgres_under_far_memory_serves_pgbench_with_every_child_emulated() {
    let _sysctl = UnprivilegedUserfaultfd::set("1");
    let dir = Dir::new();
    let server = Postgres::start(&dir, &["-q", "-L=32", "-M=1024"]);
    let postmaster = server.postmaster();
    let init = server.pgbench(&["-i", "-s", "1"]);
    let run = server.pgbench(&["-c", "2", "-T", "2"]);
    let out = server.stop();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(init.status.success(), "{init:?}\n{err}");
    let run_out = String::from_utf8_lossy(&run.stdout);
    assert!(run.status.success(), "{run:?}\n{err}");
    assert!(
        run_out.contains("number of failed transactions: 0 (0.000%)"),
        "{run_out}"
    );
    assert!(out.status.success(), "{err}");
    assert!(!err.contains("without a local limit"), "{err}");
    // No child forked twice from a signal handler run on the runtime's thread as well.
    assert!(!err.contains("taking over ProcSignal slot"), "{err}");
    // The postmaster's runtime reported to the recorder, and so did every child's, each
    // within the limit. A runtime without its statistics page says why on stderr (none
    // here); a missing runtime line shows stderr, which says it.
    assert!(!err.contains("has no statistics page"), "{err}");
    let rt_faults = |pid: u32| {
        fltrace_trace::stats::last_value(&fltrace_trace::files::stats(dir.path(), pid), "rt_faults")
            .expect("stats")
            .unwrap_or_else(|| panic!("{pid} has no far-memory statistics\n{err}"))
    };
    assert!(rt_faults(postmaster) > 0);
    let children: Vec<u32> = dir
        .pids("stats", "out")
        .into_iter()
        .filter(|&p| p != postmaster)
        .collect();
    assert!(children.len() >= 5, "{children:?}");
    let mut children_faults = 0;
    for child in children {
        let stats = fltrace_trace::files::stats(dir.path(), child);
        let stat = |name: &str| fltrace_trace::stats::last_value(&stats, name).expect("stats");
        children_faults += rt_faults(child);
        assert!(
            stat("memory_used").unwrap_or(u64::MAX) <= 32 << 20,
            "child {child}"
        );
    }
    assert!(children_faults > 1000, "{children_faults}");
}

/// A signal the program's main thread blocks is not handled on the runtime's handler thread:
/// it waits for main, as it would untraced (the handler threads block every signal).
#[test]
fn signals_wait_for_the_program_not_the_runtime() {
    let dir = Dir::new();
    let program = build_c_workload(dir.path(), "signalthread.c");
    let out = output_within(
        dir.fltrace()
            .args(["record", "-q", "-L=16", "-M=64", "--"])
            .arg(&program),
        std::time::Duration::from_secs(60),
    );
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "handler ran on main\n",
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success());
}
