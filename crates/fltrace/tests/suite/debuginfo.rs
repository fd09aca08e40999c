//! Debug files where distributions put them (debug link, `.build-id` trees, debuginfod), and
//! recordings that travel with `fltrace archive`.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use super::util::*;

/// Pages the nested workload touches: every fault is at its fill line.
const PAGES: &str = "50";

/// `faults.c` built with -g, then split as distributions do: a stripped binary and its debug file.
struct Split {
    _dir: tempfile::TempDir,
    /// `strip --strip-debug` of `full`, no debug link.
    stripped: PathBuf,
    /// The debug part (`objcopy --only-keep-debug`).
    debug: PathBuf,
    /// Its build ID, hex.
    build_id: String,
}

fn run_ok(cmd: &mut Command) {
    let out = cmd.output().expect("tool runs");
    assert!(
        out.status.success(),
        "{cmd:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

fn build_faults(output: &Path, opt: &str) {
    run_ok(
        Command::new("gcc")
            .args([opt, "-g", "-fomit-frame-pointer", "-o"])
            .arg(output)
            .arg(workloads_dir().join("faults.c"))
            .args(["-ldl", "-lpthread"]),
    );
}

/// The GNU build ID of an ELF file, from `readelf -n`.
fn build_id(path: &Path) -> String {
    let out = Command::new("readelf")
        .arg("-n")
        .arg(path)
        .output()
        .expect("readelf runs");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .find_map(|l| l.trim().strip_prefix("Build ID: ").map(str::to_owned))
        .expect("a build ID")
}

fn split() -> &'static Split {
    static BUILT: OnceLock<Split> = OnceLock::new();
    BUILT.get_or_init(|| {
        let dir = tempfile::tempdir().expect("temp dir");
        let full = dir.path().join("faults");
        build_faults(&full, "-O2");
        let debug = dir.path().join("faults.debug");
        run_ok(
            Command::new("objcopy")
                .arg("--only-keep-debug")
                .arg(&full)
                .arg(&debug),
        );
        let stripped = dir.path().join("faults-stripped");
        run_ok(
            Command::new("strip")
                .args(["--strip-debug", "-o"])
                .arg(&stripped)
                .arg(&full),
        );
        let build_id = build_id(&full);
        Split {
            _dir: dir,
            stripped,
            debug,
            build_id,
        }
    })
}

/// A stripped copy of the workload in `dir`, with a debug link to `faults.debug`.
fn linked_binary(dir: &Path) -> PathBuf {
    let s = split();
    let binary = dir.join("faults");
    run_ok(
        Command::new("objcopy")
            .arg(format!(
                "--add-gnu-debuglink={}",
                s.debug.to_str().expect("utf-8 path")
            ))
            .arg(&s.stripped)
            .arg(&binary),
    );
    binary
}

fn copy(from: &Path, to: &Path) {
    if let Some(parent) = to.parent() {
        std::fs::create_dir_all(parent).expect("mkdir");
    }
    std::fs::copy(from, to).expect("copy");
}

/// `fltrace report --format json --by line` with extra environment and arguments.
fn report_with(dir: &Dir, env: &[(&str, &Path)], extra: &[&str]) -> (serde_json::Value, String) {
    let out = dir
        .fltrace()
        .args(["report", "--format", "json", "--top", "0", "--by", "line"])
        .args(extra)
        .envs(env.iter().map(|(k, v)| (*k, v.as_os_str())))
        .output()
        .expect("fltrace runs");
    assert!(
        out.status.success(),
        "report failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    (
        serde_json::from_slice(&out.stdout).expect("report prints JSON"),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn fill_line() -> u32 {
    site("faults.c", "fill")
}

/// Faults at lines of `faults.c`, all of them.
fn faults_c_lines(report: &serde_json::Value) -> u64 {
    groups(report)
        .filter(|g| g["file"].as_str().is_some_and(|f| f.ends_with("faults.c")))
        .map(|g| g["count"].as_u64().unwrap_or(0))
        .sum()
}

/// The stripped binary has no lines of its own: the control for every case below.
#[test]
fn stripped_binary_without_debug_file_has_no_lines() {
    let dir = Dir::new();
    let bin = dir.path().join("bin/faults");
    copy(&split().stripped, &bin);
    dir.record(&[&bin], &["nested", PAGES]);
    let (report, _) = report_with(&dir, &[], &[]);
    // The faults are there, only their lines are not.
    assert!(report["faults"].as_u64().unwrap_or(0) >= 50, "{report}");
    assert_eq!(faults_c_lines(&report), 0, "{report}");
}

/// A debug link is followed to the file beside the binary and to one in `.debug/`.
#[test]
fn debug_link_beside_the_binary_and_in_dot_debug() {
    for place in ["faults.debug", ".debug/faults.debug"] {
        let dir = Dir::new();
        let bin_dir = dir.path().join("bin");
        std::fs::create_dir_all(&bin_dir).expect("mkdir");
        let bin = linked_binary(&bin_dir);
        copy(&split().debug, &bin_dir.join(place));
        dir.record(&[&bin], &["nested", PAGES]);
        let (report, _) = report_with(&dir, &[], &[]);
        assert_eq!(
            count_at(&report, "faults.c", fill_line()),
            50,
            "{place}: {report}"
        );
    }
}

/// A debug link also names a file under a debug root mirroring the binary's directory
/// (`/usr/lib/debug/<dir of the binary>/`).
#[test]
fn debug_link_under_a_debug_root() {
    let dir = Dir::new();
    let bin_dir = dir.path().join("bin");
    std::fs::create_dir_all(&bin_dir).expect("mkdir");
    let bin = linked_binary(&bin_dir);
    let root = dir.path().join("debug-root");
    let canonical = bin_dir.canonicalize().expect("canonical dir");
    let relative = canonical.strip_prefix("/").expect("absolute");
    copy(&split().debug, &root.join(relative).join("faults.debug"));
    dir.record(&[&bin], &["nested", PAGES]);
    let (report, _) = report_with(&dir, &[("FLTRACE_DEBUG_DIRS", &root)], &[]);
    assert_eq!(count_at(&report, "faults.c", fill_line()), 50, "{report}");
}

/// Debian's -dbgsym layout: `<root>/.build-id/xx/rest.debug`, found by the recorded build ID.
#[test]
fn debug_file_by_build_id() {
    let s = split();
    let dir = Dir::new();
    let bin = dir.path().join("bin/faults");
    copy(&s.stripped, &bin);
    let root = dir.path().join("debug-root");
    let (head, rest) = s.build_id.split_at(2);
    copy(
        &s.debug,
        &root
            .join(".build-id")
            .join(head)
            .join(format!("{rest}.debug")),
    );
    dir.record(&[&bin], &["nested", PAGES]);
    let (report, _) = report_with(&dir, &[("FLTRACE_DEBUG_DIRS", &root)], &[]);
    assert_eq!(count_at(&report, "faults.c", fill_line()), 50, "{report}");
    // The stacks come out whole: every caller at its line of call.
    let out = dir
        .fltrace()
        .args(["report", "--format", "json", "--top", "0", "--by", "stack"])
        .env("FLTRACE_DEBUG_DIRS", &root)
        .output()
        .expect("fltrace runs");
    let by_stack: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
    let lines: Vec<u64> = stack_at(&by_stack, "faults.c", fill_line())
        .iter()
        .filter(|(_, file, _)| file == "faults.c")
        .map(|(_, _, l)| *l)
        .collect();
    let expected: Vec<u64> = ["fill", "level2", "level1", "main"]
        .iter()
        .map(|s| site("faults.c", s) as u64)
        .collect();
    assert_eq!(lines, expected);
}

/// A stripped program recorded with the build-ID cache, then deleted: its names come from the
/// cache's copy, and a debug file found later by its build ID still gives the lines, which the
/// stripped copy alone does not (the control: no debug directory, no line of faults.c).
#[test]
fn debug_file_by_build_id_applies_over_the_cache() {
    let s = split();
    let dir = Dir::new();
    let cache = dir.path().join("cache");
    let bin = dir.path().join("bin/faults");
    copy(&s.stripped, &bin);
    let out = dir
        .fltrace()
        .env("FLTRACE_CACHE", &cache)
        .args(["record", "-q", "--"])
        .arg(&bin)
        .args(["nested", PAGES])
        .output()
        .expect("fltrace runs");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    std::fs::remove_file(&bin).expect("rm");
    let (without, stderr) = report_with(&dir, &[("FLTRACE_CACHE", &cache)], &[]);
    assert_eq!(faults_c_lines(&without), 0, "{without}");
    assert!(
        stderr.contains(cache.to_str().expect("utf-8")),
        "named from the cache: {stderr}"
    );
    let root = dir.path().join("debug-root");
    let (head, rest) = s.build_id.split_at(2);
    copy(
        &s.debug,
        &root
            .join(".build-id")
            .join(head)
            .join(format!("{rest}.debug")),
    );
    let (report, _) = report_with(
        &dir,
        &[("FLTRACE_CACHE", &cache), ("FLTRACE_DEBUG_DIRS", &root)],
        &[],
    );
    assert_eq!(count_at(&report, "faults.c", fill_line()), 50, "{report}");
}

/// A debuginfod server on loopback, killed when dropped.
struct Debuginfod {
    child: Child,
    port: u16,
}

impl Drop for Debuginfod {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The status code of `GET path` on 127.0.0.1:`port`, or `None` if it does not answer.
fn http_status(port: u16, path: &str) -> Option<u16> {
    let mut stream = TcpStream::connect(("127.0.0.1", port)).ok()?;
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .ok()?;
    write!(stream, "GET {path} HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n").ok()?;
    let mut response = Vec::new();
    stream.read_to_end(&mut response).ok()?;
    String::from_utf8_lossy(&response)
        .split_whitespace()
        .nth(1)?
        .parse()
        .ok()
}

/// Starts `debuginfod -F served` on a free port and waits until it serves `build_id`.
fn start_debuginfod(served: &Path, work: &Path, build_id: &str) -> Debuginfod {
    let port = TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port();
    let child = Command::new("debuginfod")
        .arg("-F")
        .arg(served)
        .arg("-p")
        .arg(port.to_string())
        .arg("-d")
        .arg(work.join("debuginfod.sqlite"))
        .current_dir(work)
        .env("HOME", work)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("debuginfod starts (scripts/setup.sh installs it)");
    let server = Debuginfod { child, port };
    let wanted = format!("/buildid/{build_id}/debuginfo");
    let deadline = Instant::now() + Duration::from_secs(120);
    while http_status(port, &wanted) != Some(200) {
        assert!(
            Instant::now() < deadline,
            "debuginfod did not index {}",
            served.display()
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    server
}

/// With nothing local, the debug file comes from a debuginfod server, into an empty cache laid
/// out as elfutils does.
#[test]
fn debug_file_from_debuginfod() {
    let s = split();
    let dir = Dir::new();
    let bin = dir.path().join("bin/faults");
    copy(&s.stripped, &bin);
    let served = dir.path().join("served");
    copy(&s.debug, &served.join("faults.debug"));
    let work = dir.path().join("server");
    std::fs::create_dir_all(&work).expect("mkdir");
    let server = start_debuginfod(&served, &work, &s.build_id);
    dir.record(&[&bin], &["nested", PAGES]);
    let cache = dir.path().join("cache");
    std::fs::create_dir_all(&cache).expect("mkdir");
    let url = PathBuf::from(format!("http://127.0.0.1:{}", server.port));
    let env: [(&str, &Path); 2] = [("DEBUGINFOD_URLS", &url), ("DEBUGINFOD_CACHE_PATH", &cache)];
    let (report, stderr) = report_with(&dir, &env, &[]);
    assert_eq!(
        count_at(&report, "faults.c", fill_line()),
        50,
        "{report} {stderr}"
    );
    let cached = cache.join(&s.build_id).join("debuginfo");
    assert_eq!(
        std::fs::read(&cached).expect("the fetched file is cached"),
        std::fs::read(&s.debug).expect("debug file")
    );
    // Once cached, the server is not needed.
    drop(server);
    let (again, _) = report_with(&dir, &env, &[]);
    assert_eq!(again, report);
}

/// `report --format csv --by line` output and stderr.
fn csv_report(dir: &Dir, extra: &[&str]) -> (Vec<u8>, String) {
    let out = dir
        .fltrace()
        .args(["report", "--format", "csv", "--top", "0", "--by", "line"])
        .args(extra)
        .output()
        .expect("fltrace runs");
    assert!(
        out.status.success(),
        "report failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    (
        out.stdout,
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Record, archive, delete the program and its debug file, rebuild a different one at the
/// same path: a warning names both builds and no line comes from the wrong one; with the
/// archive (given, or found beside the recording) the report is byte for byte the same.
#[test]
fn archive_round_trip_after_rebuild() {
    let dir = Dir::new();
    let bin_dir = dir.path().join("bin");
    std::fs::create_dir_all(&bin_dir).expect("mkdir");
    let bin = linked_binary(&bin_dir);
    let debug = bin_dir.join("faults.debug");
    copy(&split().debug, &debug);
    dir.record(&[&bin], &["nested", PAGES]);
    let (before, _) = csv_report(&dir, &[]);
    let rows = csv_rows(&String::from_utf8_lossy(&before));
    let fill = format!("{}", fill_line());
    assert!(
        rows.iter()
            .any(|r| r.values().any(|v| v.ends_with("faults.c")) && r.values().any(|v| *v == fill)),
        "{}",
        String::from_utf8_lossy(&before)
    );

    let archive = dir.path().join("elsewhere/archive");
    std::fs::create_dir_all(archive.parent().expect("parent")).expect("mkdir");
    let out = dir.run(&["archive", "-o", archive.to_str().expect("utf-8")]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let id = &split().build_id;
    assert_eq!(
        std::fs::read(archive.join(id).join("executable")).expect("archived binary"),
        std::fs::read(&bin).expect("binary")
    );
    assert_eq!(
        std::fs::read(archive.join(id).join("debuginfo")).expect("archived debug file"),
        std::fs::read(&debug).expect("debug file")
    );

    std::fs::remove_file(&bin).expect("rm");
    std::fs::remove_file(&debug).expect("rm");
    build_faults(&bin, "-O0");
    let rebuilt = build_id(&bin);
    assert_ne!(&rebuilt, id);

    let (without, stderr) = csv_report(&dir, &[]);
    let warnings: Vec<&str> = stderr.lines().filter(|l| l.contains(id.as_str())).collect();
    assert_eq!(warnings.len(), 1, "{stderr}");
    assert!(
        warnings[0].contains(&rebuilt) && warnings[0].contains(bin.to_str().expect("utf-8")),
        "{stderr}"
    );
    assert!(
        !String::from_utf8_lossy(&without).contains("faults.c"),
        "lines from the wrong build: {}",
        String::from_utf8_lossy(&without)
    );

    let (with_flag, _) = csv_report(&dir, &["--archive", archive.to_str().expect("utf-8")]);
    assert_eq!(
        String::from_utf8_lossy(&with_flag),
        String::from_utf8_lossy(&before)
    );

    std::fs::rename(&archive, dir.path().join("fltrace-archive")).expect("mv");
    let (beside, stderr) = csv_report(&dir, &[]);
    assert_eq!(beside, before);
    assert!(stderr.contains("fltrace-archive"), "{stderr}");
}

/// Every mapping of an ELF file carries the file's build ID, the executable's and its data
/// mappings' included, as readelf reads it.
#[test]
fn every_elf_mapping_has_its_build_id() {
    let s = split();
    let dir = Dir::new();
    let bin = dir.path().join("bin/faults");
    copy(&s.stripped, &bin);
    dir.record(&[&bin], &["nested", PAGES]);
    let recording = fltrace_trace::Recording::latest(dir.path()).expect("a recording");
    let pid = recording.root_pid().expect("a process");
    let trace = recording.load(pid).expect("trace");
    let ours: Vec<_> = trace
        .mappings
        .iter()
        .filter(|m| Path::new(&m.path) == bin)
        .collect();
    // Text, read-only data and writable data at least.
    assert!(ours.len() >= 3, "{ours:?}");
    assert!(ours.iter().any(|m| !m.is_exec()));
    for m in &ours {
        assert_eq!(m.build_id, s.build_id, "{m:?}");
    }
    // The libraries: every mapping of a file that holds code.
    let libraries: std::collections::BTreeSet<&str> = trace
        .mappings
        .iter()
        .filter(|m| m.is_exec() && m.path.contains(".so"))
        .map(|m| m.path.as_str())
        .collect();
    assert!(
        libraries.iter().any(|l| l.contains("libc.so")),
        "{libraries:?}"
    );
    for m in trace
        .mappings
        .iter()
        .filter(|m| libraries.contains(m.path.as_str()))
    {
        assert_eq!(m.build_id, build_id(Path::new(&m.path)), "{m:?}");
    }
}

/// A debuginfod server that does not answer costs one warning line, not the report.
#[test]
fn unreachable_debuginfod_is_one_warning() {
    let s = split();
    let dir = Dir::new();
    let bin = dir.path().join("bin/faults");
    copy(&s.stripped, &bin);
    dir.record(&[&bin], &["nested", PAGES]);
    // A port nobody listens on any more.
    let port = TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port();
    let url = PathBuf::from(format!("http://127.0.0.1:{port}"));
    let cache = dir.path().join("cache");
    let env: [(&str, &Path); 2] = [("DEBUGINFOD_URLS", &url), ("DEBUGINFOD_CACHE_PATH", &cache)];
    let (report, stderr) = report_with(&dir, &env, &[]);
    assert!(report["faults"].as_u64().unwrap_or(0) >= 50, "{report}");
    assert_eq!(faults_c_lines(&report), 0, "{report}");
    assert_eq!(
        stderr.lines().filter(|l| l.contains("debuginfod")).count(),
        1,
        "{stderr}"
    );
}

/// How the hostile server of [`hostile_debuginfod`] sends the debug file it is asked for.
#[derive(Clone, Copy)]
enum Hostile {
    /// 64 MiB of zeros at full speed, no length said: endless to a client capped lower
    /// (and no more, should the cap fail, than the disk can take).
    Endless,
    /// A byte every 100 ms, without end.
    Drip,
}

/// A server on 127.0.0.1 that answers `GET .../buildid/<build_id>/debuginfo` with a body
/// longer than any cap of the test (as `how` says) and everything else with 404. Returns its port; its
/// threads end with the test process.
fn hostile_debuginfod(build_id: &str, how: Hostile) -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").expect("a free port");
    let port = listener.local_addr().expect("address").port();
    let wanted = format!("/buildid/{build_id}/debuginfo");
    std::thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            let wanted = wanted.clone();
            std::thread::spawn(move || {
                let mut stream = stream;
                let mut request = Vec::new();
                let mut byte = [0u8; 1];
                while !request.ends_with(b"\r\n\r\n") && stream.read(&mut byte).unwrap_or(0) == 1 {
                    request.push(byte[0]);
                }
                let line = String::from_utf8_lossy(&request).into_owned();
                if !line.contains(&format!("GET {wanted} ")) {
                    let _ = stream.write_all(b"HTTP/1.0 404 Not Found\r\n\r\n");
                    return;
                }
                let _ = stream.write_all(b"HTTP/1.0 200 OK\r\n\r\n");
                let zeros = [0u8; 64 << 10];
                for _ in 0..1024 {
                    let sent = match how {
                        Hostile::Endless => stream.write_all(&zeros),
                        Hostile::Drip => {
                            std::thread::sleep(Duration::from_millis(100));
                            stream.write_all(&zeros[..1])
                        }
                    };
                    if sent.is_err() {
                        return;
                    }
                }
            });
        }
    });
    port
}

/// A debuginfod server whose body never ends is stopped at `DEBUGINFOD_MAXSIZE` bytes, and
/// one that sends a byte at a time at `DEBUGINFOD_MAXTIME` seconds: each costs one warning
/// line naming the limit, the report goes on without the file, and nothing is left in the
/// cache.
#[test]
fn endless_debuginfod_body_stops_at_the_caps() {
    let s = split();
    let dir = Dir::new();
    let bin = dir.path().join("bin/faults");
    copy(&s.stripped, &bin);
    dir.record(&[&bin], &["nested", PAGES]);
    let cache = dir.path().join("cache");
    for (how, limit, needle) in [
        (
            Hostile::Endless,
            ("DEBUGINFOD_MAXSIZE", "1000000"),
            "larger than the 1000000 bytes allowed (DEBUGINFOD_MAXSIZE); not downloaded",
        ),
        (
            Hostile::Drip,
            ("DEBUGINFOD_MAXTIME", "2"),
            "took more than 2 s (DEBUGINFOD_MAXTIME); not downloaded",
        ),
    ] {
        let port = hostile_debuginfod(&s.build_id, how);
        let url = PathBuf::from(format!("http://127.0.0.1:{port}"));
        let env: [(&str, &Path); 3] = [
            ("DEBUGINFOD_URLS", &url),
            ("DEBUGINFOD_CACHE_PATH", &cache),
            (limit.0, Path::new(limit.1)),
        ];
        let (report, stderr) = report_with(&dir, &env, &[]);
        assert_eq!(faults_c_lines(&report), 0, "{report}");
        let warnings: Vec<&str> = stderr
            .lines()
            .filter(|l| l.contains("debuginfod"))
            .collect();
        assert_eq!(warnings.len(), 1, "{stderr}");
        assert!(
            warnings[0].contains(&format!(
                "http://127.0.0.1:{port}/buildid/{}/debuginfo: {needle}",
                s.build_id
            )),
            "{stderr}"
        );
        let left: Vec<_> = std::fs::read_dir(cache.join(&s.build_id))
            .map(|entries| entries.flatten().map(|e| e.file_name()).collect())
            .unwrap_or_default();
        assert!(left.is_empty(), "{left:?}");
    }
}
