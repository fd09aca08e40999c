//! Debian's redis and PostgreSQL under a short benchmark, recorded with the default flags:
//! their fault stacks reach a thread entry, and every one that does not is counted truncated
//! (issue 30).

use std::process::{Command, Stdio};
use std::time::Duration;

use super::util::*;

/// Where a stack that reached its thread's start ends (outermost frame): the loader's or the
/// executable's `_start`, a thread's `start_thread`, a `clone`/`clone3` child.
const ENTRIES: &[&str] = &[
    "_start",
    "_dl_start_user",
    "start_thread",
    "clone",
    "clone3",
    "__clone",
    "__clone3",
    "__GI___clone",
    "__GI___clone3",
];

/// Faults in the folded stacks of a recording: all of them, those whose stack reaches a
/// thread entry (outermost frame in [`ENTRIES`], or in a stripped executable whose `_start`
/// has no name, the frame that calls `__libc_start_main`), and those under `[truncated]`.
fn stack_ends(dir: &Dir) -> (u64, u64, u64) {
    let folded = dir.run(&["report", "--format", "folded"]);
    assert!(folded.status.success(), "{folded:?}");
    let (mut total, mut complete, mut truncated) = (0, 0, 0);
    let mut incomplete = std::collections::BTreeMap::new();
    for line in String::from_utf8_lossy(&folded.stdout).lines() {
        let (stack, count) = line.rsplit_once(' ').expect("a count");
        let count: u64 = count.parse().expect("a count");
        // The process's name, then the frames, outermost first.
        let frames: Vec<&str> = stack.split(';').collect();
        total += count;
        let outermost = frames.get(1).copied().unwrap_or_default();
        if outermost == "[truncated]" {
            truncated += count;
        }
        let calls_start_main = frames
            .get(2)
            .is_some_and(|f| f.starts_with("__libc_start_main"));
        if ENTRIES.contains(&outermost) || calls_start_main {
            complete += count;
        } else {
            let key: Vec<&str> = frames.iter().skip(1).take(4).copied().collect();
            *incomplete.entry(key.join(";")).or_insert(0) += count;
        }
    }
    // What stops early, for the failure message.
    let mut worst: Vec<(u64, String)> = incomplete.into_iter().map(|(k, v)| (v, k)).collect();
    worst.sort_unstable_by(|a, b| b.cmp(a));
    eprintln!("{total} faults, {complete} complete; incomplete, outermost frames first:");
    for (count, stack) in worst.iter().take(20) {
        eprintln!("  {count} {stack}");
    }
    (total, complete, truncated)
}

/// At least `per_mille` of the faults have a stack that reaches a thread entry, and the recorder's
/// count of truncated stacks (its summary line) is exactly the number of those that do not,
/// every one of them drawn under `[truncated]`.
fn assert_complete(dir: &Dir, stderr: &str, what: &str, per_mille: u64) {
    let (total, complete, under_truncated) = stack_ends(dir);
    assert!(total > 1000, "{what}: only {total} faults\n{stderr}");
    assert!(
        complete * 1000 >= total * per_mille,
        "{what}: {complete} of {total} stacks reach a thread entry\n{stderr}"
    );
    let truncated = summary_truncated(stderr);
    assert_eq!(
        truncated,
        total - complete,
        "{what}: the summary's truncated count and the incomplete stacks\n{stderr}"
    );
    assert_eq!(under_truncated, truncated, "{what}: under [truncated]");
}

/// redis-server (Debian's: stripped, jemalloc, whose start-up runs in a 10,960-byte frame)
/// under redis-benchmark's SET, GET, LPUSH and LRANGE_100, recorded with the default flags.
#[test]
fn redis_under_benchmark_has_complete_stacks_by_default() {
    let dir = Dir::new();
    let port = free_port();
    let server = dir
        .fltrace()
        .args(["record", "--", "redis-server", "--port", &port, "--bind"])
        .args(["127.0.0.1", "--save", "", "--appendonly", "no", "--dir"])
        .arg(dir.path())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("fltrace runs");
    let cli = |args: &[&str]| {
        let out = Command::new("redis-cli")
            .args(["-p", &port])
            .args(args)
            .output()
            .expect("redis-cli runs");
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let started = std::time::Instant::now();
    while !cli(&["ping"]).contains("PONG") {
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "redis did not answer"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    let bench = output_within(
        Command::new("redis-benchmark")
            .args(["-p", &port, "-q", "-n", "20000"])
            .args(["-t", "set,get,lpush,lrange_100"]),
        Duration::from_secs(300),
    );
    // Shut down whatever happened, so that the recorder ends.
    cli(&["shutdown", "nosave"]);
    let out = wait_within(server, Duration::from_secs(120));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(bench.status.success(), "{bench:?}");
    assert!(out.status.success(), "{stderr}");
    // Issue 36's 99.9%; 3 runs gave 100% of 1,165-1,184 faults. The last three truncated
    // were jemalloc's start-up (the function at 0x20540 of libjemalloc.so.2, a 10,960-byte
    // frame whose untouched pages stopped the stack copy: the copy now goes past them, noting
    // them as holes) and a stack-growth fault inside `_dl_runtime_resolve_xsavec` (its CFA is
    // in `rbx`, which the fault record now holds).
    assert_complete(&dir, &stderr, "redis", 999);
}

/// PostgreSQL 15 as user postgres (a postmaster and its backends, workers and checkpointer,
/// forked without exec; `pg_tzset` and `AddToDataDirLockFile` with frames of 16 KiB and
/// more, `heap_multi_insert` of 8 KiB under pgbench's COPY), under `pgbench -i` and 600
/// transactions, recorded with the default flags: the figures hold over all its processes.
#[test]
fn postgres_under_pgbench_has_complete_stacks_by_default() {
    let dir = Dir::new();
    let server = Postgres::start(&dir, &[]);
    let init = server.pgbench(&["-q", "-i", "-s", "2"]);
    let run = server.pgbench(&["-c", "4", "-t", "150"]);
    let out = server.stop();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(init.status.success(), "{init:?}\n{stderr}");
    assert!(run.status.success(), "{run:?}\n{stderr}");
    assert!(out.status.success(), "{stderr}");
    assert!(dir.pids("faults", "parquet").len() >= 5, "{stderr}");
    // Issue 36's 99.9%; a run gave 100% of 30,238 faults. What stayed truncated before
    // (0.05%): `pg_tzset`'s callees in backends that exit at once, whose 26 KiB frame holds
    // pages never touched, where the stack copy stopped (it now goes past them, as holes).
    assert_complete(&dir, &stderr, "postgres", 999);
}
