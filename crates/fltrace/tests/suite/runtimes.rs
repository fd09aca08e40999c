//! Far memory for programs that reserve their heaps and commit them later (the JVM, V8, Go's
//! runtime, and a C program doing the same), and for programs the interposer cannot reach:
//! emulated with every byte intact, or refused before they run, and what stays outside the
//! limit said.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;

use super::util::*;

/// `fltrace record -q -L=local -M=max -- command...` in `dir`.
fn far(dir: &Dir, local_mb: u64, max_mb: u64, command: &[&std::ffi::OsStr]) -> Output {
    far_on_path(dir, None, local_mb, max_mb, command)
}

/// `far`, with the runtime's fault path named (`FLTRACE_RT_FAULT_PATH`) when given.
fn far_on_path(
    dir: &Dir,
    fault_path: Option<&str>,
    local_mb: u64,
    max_mb: u64,
    command: &[&std::ffi::OsStr],
) -> Output {
    let mut cmd = dir.fltrace();
    if let Some(path) = fault_path {
        cmd.env("FLTRACE_RT_FAULT_PATH", path);
    }
    cmd.args([
        "record",
        "-q",
        &format!("-L={local_mb}"),
        &format!("-M={max_mb}"),
        "--",
    ])
    .args(command);
    output_within(&mut cmd, std::time::Duration::from_secs(900))
}

/// Every value of counter `name` in the stats file of `pid`, one per line.
fn stat_values(dir: &Dir, pid: u32, name: &str) -> Vec<u64> {
    let text =
        std::fs::read_to_string(fltrace_trace::files::stats(dir.path(), pid)).expect("stats file");
    let key = format!("{name}:");
    text.lines()
        .filter_map(|line| {
            let at = line.find(&key)?;
            line[at + key.len()..]
                .split(',')
                .next()?
                .trim()
                .parse()
                .ok()
        })
        .collect()
}

fn last(dir: &Dir, pid: u32, name: &str) -> u64 {
    *stat_values(dir, pid, name)
        .last()
        .unwrap_or_else(|| panic!("no {name} in the stats of {pid}"))
}

fn most(dir: &Dir, pid: u32, name: &str) -> u64 {
    stat_values(dir, pid, name).into_iter().max().unwrap_or(0)
}

/// The one process recorded.
fn only_pid(dir: &Dir) -> u32 {
    let pids = dir.pids("stats", "out");
    assert_eq!(pids.len(), 1, "{pids:?}");
    pids[0]
}

fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// Runs `command` untraced: its output and its peak resident memory, KiB. The peak is the
/// program's own `VmHWM`, read as it runs: `wait4`'s `ru_maxrss` would carry this test
/// harness's resident set through the spawn (the kernel keeps the larger of the address space
/// the exec left and the program's), hundreds of MB in a full parallel run, and a limit at half
/// of that would evict nothing.
fn untraced(command: &[&std::ffi::OsStr]) -> (Output, u64) {
    let mut child = Command::new(command[0])
        .args(&command[1..])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("the command starts");
    let status_path = format!("/proc/{}/status", child.id());
    let done = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let watcher = {
        let done = done.clone();
        std::thread::spawn(move || {
            let mut peak_kb = 0;
            while !done.load(std::sync::atomic::Ordering::Relaxed) {
                let hwm = std::fs::read_to_string(&status_path).ok().and_then(|text| {
                    let line = text.lines().find(|l| l.starts_with("VmHWM:"))?;
                    line.split_whitespace().nth(1)?.parse::<u64>().ok()
                });
                peak_kb = peak_kb.max(hwm.unwrap_or(0));
                std::thread::sleep(std::time::Duration::from_millis(2));
            }
            peak_kb
        })
    };
    // The pipes are read to their end first: the child may fill them before it exits.
    let mut out = Vec::new();
    let mut err = Vec::new();
    use std::io::Read as _;
    let stderr_reader = child.stderr.take().map(|mut s| {
        std::thread::spawn(move || {
            let _ = s.read_to_end(&mut err);
            err
        })
    });
    if let Some(mut s) = child.stdout.take() {
        let _ = s.read_to_end(&mut out);
    }
    let err = stderr_reader
        .map(|r| r.join().expect("stderr reader"))
        .unwrap_or_default();
    // Pipes closed: the program has ended (or is about to); stop watching before it is
    // reaped and its pid can name another process.
    done.store(true, std::sync::atomic::Ordering::Relaxed);
    let peak_kb = watcher.join().expect("peak watcher");
    let status = child.wait().expect("the command ends");
    (
        Output {
            status,
            stdout: out,
            stderr: err,
        },
        peak_kb,
    )
}

/// The program wrote and read back its data under the limit: same output as untraced, pages
/// evicted and fetched, local memory never above `-L`.
fn assert_emulated(dir: &Dir, out: &Output, expected: &Output, local_mb: u64) -> u32 {
    assert_eq!(out.status.code(), Some(0), "{}", stderr(out));
    assert_eq!(stdout(out), stdout(expected));
    let pid = only_pid(dir);
    assert!(last(dir, pid, "evict_pages_done") > 0, "nothing evicted");
    // Fetches the recorder matched to their rows, or matched only after the row was written
    // out (counted apart, `rt_fetches_late`: a recorder behind under load).
    assert!(
        last(dir, pid, "faults_fetch") + last(dir, pid, "rt_fetches_late") > 0,
        "nothing fetched"
    );
    let used = last(dir, pid, "memory_used");
    assert!(
        used <= local_mb << 20,
        "local memory {used} above -L={local_mb}"
    );
    pid
}

/// 200 MB reserved `PROT_NONE` and committed in 8 MiB chunks by `mmap(MAP_FIXED)`, then by
/// `mprotect` in a second run, under `-L=50`: every byte comes back (the workload checks),
/// local memory stays within 50 MB, pages are evicted and fetched, every page is counted as
/// a first touch once per commit (200 MB, then the half committed again), and none of the
/// program's memory stays outside the limit.
#[test]
fn reserved_memory_committed_in_place_is_emulated() {
    let dir = Dir::new();
    let program = build_c_workload(dir.path(), "reserve.c");
    for (mode, how) in [("fixed", "MAP_FIXED"), ("mprotect", "mprotect")] {
        let run = Dir::new();
        let out = far(
            &run,
            50,
            512,
            &[
                program.as_os_str(),
                mode.as_ref(),
                "200".as_ref(),
                "8".as_ref(),
            ],
        );
        assert_eq!(out.status.code(), Some(0), "{mode}: {}", stderr(&out));
        assert_eq!(
            stdout(&out),
            format!("ok 200 MiB committed in 8 MiB chunks by {how}\n")
        );
        let pid = only_pid(&run);
        let used = last(&run, pid, "memory_used");
        assert!(used <= 50 << 20, "{mode}: local memory {used} above -L");
        assert!(used >= 49 << 20, "{mode}: the limit was used: {used}");
        // 200 MB written once and read twice through 50 MB: at least 150 MB fetched a pass.
        assert!(
            last(&run, pid, "evict_pages_done") >= 2 * 150 * 256,
            "{mode}"
        );
        assert!(last(&run, pid, "faults_fetch") >= 2 * 150 * 256, "{mode}");
        // Every page of a commit is a first touch: 200 MB, then the 96 MB (the half, in whole
        // chunks) committed again; a few pages of the C library's besides. The recommitted
        // half is read as zeros before it is written: where pages are copied rather than moved
        // (faults served in the faulting thread), such a page evicted unwritten is dropped,
        // and filled with zeros again (a first touch again) when the write comes.
        let first_touches = last(&run, pid, "faults_zp");
        assert!(
            ((200 + 96) * 256..(200 + 96 + 96) * 256 + 64).contains(&first_touches),
            "{mode}: {first_touches} first touches"
        );
        // Unmapped at the end: nothing reserved or committed is left.
        assert_eq!(last(&run, pid, "memory_committed"), 0, "{mode}");
        assert_eq!(last(&run, pid, "memory_reserved"), 0, "{mode}");
        assert!(
            most(&run, pid, "memory_unemulated") < 1 << 20,
            "{mode}: the program's memory was outside the limit"
        );
    }
}

/// Memory made read-only, inaccessible and writable again keeps its contents through each
/// change: the runtime hands the range to the kernel with its evicted pages brought back,
/// and takes it back with the pages it holds.
#[test]
fn memory_changing_protection_keeps_its_contents() {
    let dir = Dir::new();
    let program = build_c_workload(dir.path(), "reserve.c");
    let out = far(
        &dir,
        16,
        512,
        &[program.as_os_str(), "protect".as_ref(), "64".as_ref()],
    );
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(
        stdout(&out),
        "ok 64 MiB kept through read-only, inaccessible and writable again\n"
    );
    let pid = only_pid(&dir);
    // Made read-only with 48 MB of its 64 evicted: those came back for the kernel to keep.
    assert!(last(&dir, pid, "taken_out_fetches") >= 40 * 256);
    assert!(last(&dir, pid, "memory_used") <= 16 << 20);
}

/// A program that maps 64 MiB by a raw system call, which no interposer sees: the summary
/// says how much of the program's memory was outside the limit and names that mapping with its
/// exact size; the stats file's memory_unemulated holds it.
#[test]
fn memory_mapped_past_the_interposer_is_said() {
    let dir = Dir::new();
    let program = build_c_workload(dir.path(), "reserve.c");
    let out = far(
        &dir,
        8,
        256,
        &[program.as_os_str(), "rawmmap".as_ref(), "64".as_ref()],
    );
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let err = stderr(&out);
    let line = err
        .lines()
        .find(|l| l.contains("was outside far memory"))
        .unwrap_or_else(|| panic!("no line about memory outside far memory: {err}"));
    assert!(
        line.contains("whose largest such mapping is 64.0 MB at 0x"),
        "{line}"
    );
    assert!(
        line.contains("(anonymous, mapped past the interposer"),
        "{line}"
    );
    let pid = only_pid(&dir);
    let outside = most(&dir, pid, "memory_unemulated");
    // The 64 MiB, and what a C program has outside besides (its stack, libraries' data).
    assert!(
        (64 << 20..(64 << 20) + (2 << 20)).contains(&outside),
        "{outside}"
    );
}

/// The JVM workload, built by javac once.
fn heap_round_trip() -> &'static Path {
    static BUILT: OnceLock<(tempfile::TempDir, PathBuf)> = OnceLock::new();
    &BUILT
        .get_or_init(|| {
            let dir = tempfile::tempdir().expect("temp dir");
            let out = Command::new("javac")
                .arg("-d")
                .arg(dir.path())
                .arg(workloads_dir().join("HeapRoundTrip.java"))
                .output()
                .expect("javac runs");
            assert!(out.status.success(), "{}", stderr(&out));
            let classes = dir.path().to_path_buf();
            (dir, classes)
        })
        .1
}

/// `java` running the workload over a heap of 256 MB with `collector`.
fn heap_round_trip_command(collector: &'static str) -> [&'static std::ffi::OsStr; 7] {
    [
        "java".as_ref(),
        "-Xmx1g".as_ref(),
        collector.as_ref(),
        "-cp".as_ref(),
        heap_round_trip().as_os_str(),
        "HeapRoundTrip".as_ref(),
        "256".as_ref(),
    ]
}

/// OpenJDK 17 with a heap of 256 MB written and read back, under -L at half its peak, with
/// the G1, the Serial and the Parallel collector: HotSpot reserves its heap and commits it in place (without
/// flags of its own), and the heap is emulated: pages evicted and fetched, local memory within
/// the limit, the same output as untraced. What stays outside (thread stacks, the class-data
/// archive's written pages) is a small part of its memory.
#[test]
fn the_jvm_heap_is_emulated() {
    for collector in ["-XX:+UseG1GC", "-XX:+UseSerialGC", "-XX:+UseParallelGC"] {
        let command = heap_round_trip_command(collector);
        let (expected, peak_kb) = untraced(&command);
        assert!(expected.status.success(), "{}", stderr(&expected));
        let local_mb = peak_kb / 1024 / 2;
        let dir = Dir::new();
        let out = far(&dir, local_mb, 2048, &command);
        let pid = assert_emulated(&dir, &out, &expected, local_mb);
        // The heap was committed in the region: hundreds of MB of it.
        assert!(
            most(&dir, pid, "memory_committed") >= 256 << 20,
            "{collector}: {} committed",
            most(&dir, pid, "memory_committed")
        );
        let outside = most(&dir, pid, "memory_unemulated");
        // It once read 137 MB with the Serial collector in a full suite: the recorder's
        // line about memory outside far memory says which mapping.
        assert!(
            outside < 64 << 20,
            "{collector}: {outside} bytes outside: {}",
            stderr(&out)
        );
    }
}

/// The same JVM heap (G1) with its faults served in the faulting threads
/// (`FLTRACE_RT_FAULT_PATH=signal`): HotSpot installs SIGSEGV and SIGBUS handlers of its own
/// (null checks, safepoint polls), and the runtime's SIGBUS handler serves the heap's faults
/// beside them: the same output as untraced, pages evicted and fetched within the limit, every
/// fault on the in-thread path, and no SIGBUS of the runtime's passed to the JVM.
#[test]
fn the_jvm_heap_is_emulated_with_faults_served_in_its_threads() {
    let command = heap_round_trip_command("-XX:+UseG1GC");
    let (expected, peak_kb) = untraced(&command);
    assert!(expected.status.success(), "{}", stderr(&expected));
    let local_mb = peak_kb / 1024 / 2;
    let dir = Dir::new();
    let out = far_on_path(&dir, Some("signal"), local_mb, 2048, &command);
    let pid = assert_emulated(&dir, &out, &expected, local_mb);
    assert_eq!(
        last(&dir, pid, "rt_fault_path"),
        fltrace_runtime_abi::path::IN_THREAD
    );
    assert!(last(&dir, pid, "rt_signals") >= last(&dir, pid, "rt_faults"));
    assert_eq!(last(&dir, pid, "rt_signals_passed"), 0);
}

/// node with a heap of 300 MB: V8 reserves its pages and commits them by mprotect; under -L
/// at half its peak they are evicted and fetched, and the output is the same as untraced.
#[test]
fn the_v8_heap_is_emulated() {
    let script = workloads_dir().join("heap.js");
    let command = ["node".as_ref(), script.as_os_str(), "300".as_ref()];
    let (expected, peak_kb) = untraced(&command);
    assert!(expected.status.success(), "{}", stderr(&expected));
    let local_mb = peak_kb / 1024 / 2;
    let dir = Dir::new();
    let out = far(&dir, local_mb, 2048, &command);
    let pid = assert_emulated(&dir, &out, &expected, local_mb);
    assert!(most(&dir, pid, "memory_committed") >= 200 << 20);
    assert!(most(&dir, pid, "memory_unemulated") < 16 << 20);
}

/// The Go workload, built twice: statically (`CGO_ENABLED=0`, as `go build` makes most Go
/// programs) and linked dynamically through the C toolchain (`-linkmode=external`), whose
/// runtime maps memory through the C library.
fn go_builds() -> &'static (tempfile::TempDir, PathBuf, PathBuf) {
    static BUILT: OnceLock<(tempfile::TempDir, PathBuf, PathBuf)> = OnceLock::new();
    BUILT.get_or_init(|| {
        let dir = tempfile::tempdir().expect("temp dir");
        let build = |name: &str, cgo: &str, flags: &[&str]| {
            let out_path = dir.path().join(name);
            let out = Command::new("go")
                .arg("build")
                .args(flags)
                .arg("-o")
                .arg(&out_path)
                .arg(workloads_dir().join("goheap.go"))
                .env("CGO_ENABLED", cgo)
                .env("GOCACHE", dir.path().join("cache"))
                .env("GOPATH", dir.path().join("gopath"))
                .env("HOME", dir.path())
                .output()
                .expect("go runs");
            assert!(out.status.success(), "{name}: {}", stderr(&out));
            out_path
        };
        let static_build = build("goheap-static", "0", &[]);
        let dynamic = build("goheap", "1", &["-ldflags=-linkmode=external"]);
        (dir, static_build, dynamic)
    })
}

/// A Go program built with `CGO_ENABLED=0` is statically linked: no preloaded library can
/// enter it, and fltrace refuses it before it runs, in one line, with a non-zero status.
#[test]
fn a_static_go_program_is_refused_before_it_runs() {
    let (_, static_build, _) = go_builds();
    let dir = Dir::new();
    let out = far(&dir, 50, 512, &[static_build.as_os_str(), "100".as_ref()]);
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(stdout(&out), "", "the program ran");
    let err = stderr(&out);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(
        err.starts_with(&format!(
            "fltrace: {} is statically linked (no program interpreter): far-memory emulation (-L/-M) enters a program as a preloaded library",
            static_build.display()
        )),
        "{err}"
    );
    assert!(dir.pids("stats", "out").is_empty());
}

/// The same Go program linked dynamically: Go's runtime reserves its arenas and commits them
/// in place, gives memory back with madvise by system call, and its heap is emulated under
/// -L at half its peak with the same output as untraced.
#[test]
fn a_dynamically_linked_go_program_is_emulated() {
    let (_, _, dynamic) = go_builds();
    let command = [dynamic.as_os_str(), "300".as_ref()];
    let (expected, peak_kb) = untraced(&command);
    assert!(expected.status.success(), "{}", stderr(&expected));
    let local_mb = peak_kb / 1024 / 2;
    let dir = Dir::new();
    let out = far(&dir, local_mb, 2048, &command);
    let pid = assert_emulated(&dir, &out, &expected, local_mb);
    assert!(most(&dir, pid, "memory_committed") >= 300 << 20);
    assert!(most(&dir, pid, "memory_unemulated") < 4 << 20);
}

/// A static program started by a dynamically linked one (a shell) is not seen before it runs:
/// the recording sees that its image never loaded the runtime, says so as an error and exits
/// with status 125, whatever the program's own status.
#[test]
fn a_program_the_runtime_never_entered_fails_the_run() {
    let (_, static_build, _) = go_builds();
    let dir = Dir::new();
    let out = far(
        &dir,
        50,
        512,
        &[
            "sh".as_ref(),
            "-c".as_ref(),
            format!("{} 64; true", static_build.display()).as_ref(),
        ],
    );
    assert_eq!(out.status.code(), Some(125), "{}", stderr(&out));
    assert!(stdout(&out).starts_with("sum "), "the program ran");
    let err = stderr(&out);
    assert!(
        err.lines().any(|l| l
            .starts_with("fltrace: error: far memory was not emulated in process ")
            && l.contains(&format!("({})", static_build.display()))),
        "{err}"
    );
}

/// A program set-user-ID for another user is run by the kernel in secure-execution mode,
/// which ignores LD_PRELOAD (and ends a tracer's events at the exec): refused before it runs
/// when it is the command, and caught as it runs when a shell starts it.
#[test]
fn a_set_user_id_program_is_refused_or_caught() {
    let dir = Dir::new();
    let program = build_c_workload(dir.path(), "reserve.c");
    let suid = dir.path().join("reserve-suid");
    std::fs::copy(&program, &suid).expect("copy");
    // Owned by nobody (65534), set-user-ID: the command runs as root, another user.
    std::os::unix::fs::chown(&suid, Some(65534), None).expect("chown");
    use std::os::unix::fs::PermissionsExt as _;
    std::fs::set_permissions(&suid, std::fs::Permissions::from_mode(0o4755)).expect("chmod");
    let run = Dir::new();
    let out = far(
        &run,
        16,
        256,
        &[
            suid.as_os_str(),
            "fixed".as_ref(),
            "16".as_ref(),
            "8".as_ref(),
        ],
    );
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(stdout(&out), "", "the program ran");
    let err = stderr(&out);
    assert!(
        err.contains("is set-user-ID for another user than the command runs as"),
        "{err}"
    );
    // Started by a shell, it is seen only once it runs: it maps 8 MiB and stays 2.5 s.
    let run = Dir::new();
    let out = far(
        &run,
        16,
        256,
        &[
            "sh".as_ref(),
            "-c".as_ref(),
            format!("{} rawmmap 8", suid.display()).as_ref(),
        ],
    );
    assert_eq!(out.status.code(), Some(125), "{}", stderr(&out));
    assert!(
        stdout(&out).starts_with("ok 8 MiB mapped"),
        "{}",
        stdout(&out)
    );
    let err = stderr(&out);
    assert!(
        err.lines().any(|l| l
            .starts_with("fltrace: error: far memory was not emulated in process ")
            && l.contains(&format!("({})", suid.display()))),
        "{err}"
    );
}
