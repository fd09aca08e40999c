//! The memory chapter's event tools on real events of this kernel: an OOM kill and reclaim in
//! memory cgroups of the tests' own, mmap of a known file, brk from a known line, System V
//! shared memory, hugetlb and transparent huge page faults; swap-in decoding is unit-tested
//! in fltrace-system on records built there (no swap may exist on these machines).

use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;
use std::sync::mpsc;
use std::time::Duration;

use super::util::*;

/// `workloads/sysmem.c`, built once, without frame pointers.
fn sysmem() -> &'static Path {
    static BUILT: OnceLock<(tempfile::TempDir, PathBuf)> = OnceLock::new();
    let (_, path) = BUILT.get_or_init(|| {
        let dir = tempfile::tempdir().expect("temp dir");
        let out = dir.path().join("sysmem");
        let status = Command::new("gcc")
            .args(["-O2", "-g", "-fomit-frame-pointer", "-o"])
            .arg(&out)
            .arg(workloads_dir().join("sysmem.c"))
            .status()
            .expect("gcc runs");
        assert!(status.success(), "gcc sysmem.c");
        (dir, out)
    });
    path
}

/// A tool running in the background, ready when it said so on stderr.
struct Tool {
    child: Child,
    stderr: mpsc::Receiver<String>,
    seen: Vec<String>,
}

impl Tool {
    fn start(args: &[&str]) -> Tool {
        Tool::start_until(args, "Tracing ")
    }

    /// Starts fltrace and waits for the line on stderr that starts with `ready`.
    fn start_until(args: &[&str], ready: &str) -> Tool {
        let mut child = Command::new(env!("CARGO_BIN_EXE_fltrace"))
            .args(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("fltrace runs");
        let stderr = child.stderr.take().expect("stderr");
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        let mut tool = Tool {
            child,
            stderr: rx,
            seen: Vec::new(),
        };
        loop {
            match tool.stderr.recv_timeout(Duration::from_secs(120)) {
                Ok(line) => {
                    let is_ready = line.starts_with(ready);
                    tool.seen.push(line);
                    if is_ready {
                        break;
                    }
                }
                Err(_) => panic!("{args:?} never got ready: {:?}", tool.seen),
            }
        }
        tool
    }

    /// SIGINT, then everything it printed: (stdout, stderr), and its exit code.
    fn stop_with_code(mut self) -> (String, String, Option<i32>) {
        // SAFETY: signals a child process of ours by its pid.
        unsafe { libc::kill(self.child.id() as i32, libc::SIGINT) };
        let mut out = String::new();
        self.child
            .stdout
            .take()
            .expect("stdout")
            .read_to_string(&mut out)
            .expect("reads stdout");
        let status = self.child.wait().expect("waits");
        self.seen.extend(self.stderr.try_iter());
        (out, self.seen.join("\n"), status.code())
    }

    /// SIGINT, then everything it printed: (stdout, stderr).
    fn stop(mut self) -> (String, String) {
        // SAFETY: signals a child process of ours by its pid.
        unsafe { libc::kill(self.child.id() as i32, libc::SIGINT) };
        let mut out = String::new();
        self.child
            .stdout
            .take()
            .expect("stdout")
            .read_to_string(&mut out)
            .expect("reads stdout");
        let status = self.child.wait().expect("waits");
        self.seen.extend(self.stderr.try_iter());
        let err = self.seen.join("\n");
        assert!(
            status.success() || (status.code() == Some(3) && said_loss(&out)),
            "{status}: {err}"
        );
        (out, err)
    }
}

/// A memory cgroup (v1) of the test's own with a limit, removed whatever happens.
struct MemCgroup {
    path: PathBuf,
    name: String,
}

impl MemCgroup {
    fn new(tag: &str, limit_mb: u64) -> MemCgroup {
        let name = format!("fltrace-test-{tag}-{}", std::process::id());
        let path = Path::new("/sys/fs/cgroup/memory").join(&name);
        std::fs::create_dir(&path).expect("creates the memory cgroup");
        let group = MemCgroup { path, name };
        std::fs::write(
            group.path.join("memory.limit_in_bytes"),
            (limit_mb << 20).to_string(),
        )
        .expect("sets the limit");
        group
    }
}

impl Drop for MemCgroup {
    fn drop(&mut self) {
        // Its processes have exited; the kernel may take a moment to let the group go.
        for _ in 0..50 {
            if std::fs::remove_dir(&self.path).is_ok() || !self.path.exists() {
                return;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

/// Reserved huge pages, restored to the old count whatever happens.
struct HugePages {
    old: String,
}

const NR_HUGEPAGES: &str = "/proc/sys/vm/nr_hugepages";

impl HugePages {
    fn reserve(extra: u64) -> HugePages {
        let old = std::fs::read_to_string(NR_HUGEPAGES).expect("nr_hugepages");
        let count: u64 = old.trim().parse().expect("a count");
        let pages = HugePages { old };
        // The kernel reserves fewer than asked when no 2 MiB block is free; compacting first
        // makes them on a machine whose page cache is fragmented by builds.
        for _ in 0..5 {
            compact_memory();
            std::fs::write(NR_HUGEPAGES, (count + extra).to_string()).expect("reserves huge pages");
            let now = std::fs::read_to_string(NR_HUGEPAGES).expect("nr_hugepages");
            if now.trim().parse::<u64>().expect("a count") >= count + extra {
                return pages;
            }
        }
        panic!("the kernel would not reserve {extra} huge pages, even after compaction");
    }
}

/// Makes free 2 MiB blocks from fragmented memory: a one-off action of the kernel, not a
/// setting, so there is nothing to restore.
fn compact_memory() {
    let _ = std::fs::write("/proc/sys/vm/compact_memory", "1");
}

impl Drop for HugePages {
    fn drop(&mut self) {
        let _ = std::fs::write(NR_HUGEPAGES, self.old.trim());
    }
}

fn run(args: &[&str]) -> std::process::Output {
    Command::new(sysmem())
        .args(args)
        .output()
        .expect("sysmem runs")
}

/// CSV rows as maps from the header's keys (lines without a comma are the workload's).
fn csv_rows(text: &str) -> Vec<std::collections::HashMap<String, String>> {
    let csv: String = text
        .lines()
        .filter(|l| l.contains(','))
        .flat_map(|l| [l, "\n"])
        .collect();
    csv::Reader::from_reader(csv.as_bytes())
        .deserialize()
        .collect::<Result<_, _>>()
        .expect("CSV rows under the header")
}

/// An OOM kill inside the test's memory cgroup: the victim (which also triggered it) by pid
/// and name, and the group that hit its limit.
#[test]
fn oomkill_names_the_victim_and_its_cgroup() {
    let group = MemCgroup::new("oom", 32);
    let tool = Tool::start(&["oomkill"]);
    let out = run(&["oom", group.path.to_str().expect("utf-8")]);
    let (text, err) = tool.stop();
    use std::os::unix::process::ExitStatusExt;
    assert_eq!(out.status.signal(), Some(libc::SIGKILL), "{out:?}");
    // The pid is the one the kernel named; find it in the line about our group.
    let line = text
        .lines()
        .find(|l| l.ends_with(&format!("memcg /{}", group.name)))
        .unwrap_or_else(|| panic!("no OOM kill in /{}:\n{text}\n{err}", group.name));
    let victim: u32 = line
        .split("OOM kill of PID ")
        .nth(1)
        .and_then(|r| r.split(' ').next())
        .and_then(|p| p.parse().ok())
        .expect("victim pid");
    assert!(
        line.contains(&format!(
            "Triggered by PID {victim} (\"sysmem\"), OOM kill of PID {victim} (\"sysmem\"), "
        )),
        "{line}"
    );
    assert!(line.contains("loadavg: "), "{line}");
    // About 32 MiB resident when killed: 8192 pages of 4 KiB, plus the mapped libraries.
    let rss: u64 = line
        .split("rss ")
        .nth(1)
        .and_then(|r| r.split(' ').next())
        .and_then(|p| p.parse().ok())
        .expect("rss pages");
    assert!((7000..=9500).contains(&rss), "{line}");

    // triage dates the same kill from the kernel log, on oomkill's clock (one format).
    let triage = run_fltrace(&["triage", "--duration", "1s"]);
    let dated = triage
        .lines()
        .find(|l| l.contains(&format!("Killed process {victim} (sysmem)")))
        .unwrap_or_else(|| panic!("triage has no line of {victim}:\n{triage}"));
    let seconds = |clock: &str| -> i64 {
        clock
            .split(':')
            .map(|f| f.parse::<i64>().expect("HH:MM:SS"))
            .fold(0, |acc, f| acc * 60 + f)
    };
    let triage_clock = dated
        .trim_start()
        .strip_prefix('[')
        .and_then(|r| r.get(..8))
        .expect("[HH:MM:SS] first");
    let oomkill_clock = line.get(..8).expect("oomkill's time first");
    assert!(
        (seconds(triage_clock) - seconds(oomkill_clock)).abs() <= 1,
        "{dated}\n{line}"
    );
    assert!(
        dated.ends_with(&format!("(memory cgroup /{})", group.name)),
        "{dated}"
    );
}

/// `fltrace <args>`'s stdout; it must succeed.
fn run_fltrace(args: &[&str]) -> String {
    let out = output_within(
        Command::new(env!("CARGO_BIN_EXE_fltrace")).args(args),
        Duration::from_secs(120),
    );
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success() || (out.status.code() == Some(3) && said_loss(&stdout)),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

/// Whether a tool's output says it lost events (it then exits with status 3): on a loaded
/// machine the tracepoints' buffers can overflow.
fn said_loss(stdout: &str) -> bool {
    stdout.lines().any(|l| l.contains(" events seen, "))
}

/// Clean page cache beyond a small limit is reclaimed by the group's own process: drsnoop
/// shows memory cgroup reclaims of that pid, vmscan (scoped to the group) counts them.
#[test]
fn reclaim_shows_in_drsnoop_and_vmscan() {
    let group = MemCgroup::new("reclaim", 16);
    let dir = Dir::new();
    let drsnoop = Tool::start(&["drsnoop", "--format", "csv", "--comm", "sysmem"]);
    let cgroup = group.path.to_str().expect("utf-8");
    let vmscan = Tool::start(&["vmscan", "--format", "csv", "--cgroup", cgroup, "1"]);
    let file = dir.path().join("pages");
    let mut child = Command::new(sysmem())
        .args(["reclaim", cgroup, file.to_str().expect("utf-8"), "64"])
        .spawn()
        .expect("sysmem runs");
    let pid = child.id().to_string();
    assert!(child.wait().expect("waits").success());
    let (dr, dr_err) = drsnoop.stop();
    let (vm, vm_err) = vmscan.stop();

    let rows = csv_rows(&dr);
    let ours: Vec<_> = rows.iter().filter(|r| r["pid"] == pid).collect();
    assert!(!ours.is_empty(), "no reclaim of {pid}:\n{dr}\n{dr_err}");
    assert!(
        ours.iter()
            .all(|r| r["comm"] == "sysmem" && r["kind"] == "memcg")
    );
    let pages: u64 = ours
        .iter()
        .map(|r| r["pages"].parse::<u64>().expect("pages"))
        .sum();
    assert!(pages > 0, "{dr}");

    assert!(
        vm_err.contains("filtering by the /proc/PID/cgroup"),
        "{vm_err}"
    );
    let rows = csv_rows(&vm);
    let sum = |key: &str| -> u64 { rows.iter().map(|r| r[key].parse::<u64>().expect(key)).sum() };
    // drsnoop saw every reclaim of the process; vmscan saw the same ones in its group.
    assert_eq!(sum("m_reclaims"), ours.len() as u64, "{vm}\n{dr}");
    assert_eq!(sum("m_reclaimed_pages"), pages, "{vm}\n{dr}");
}

/// Clean page cache read beyond a memory cgroup's limit while triage watches: its reclaim step
/// names the group as at its limit (met it during the interval, though empty at the end), with
/// reclaim scanning and freeing pages, and points to vmscan and drsnoop for that group.
#[test]
fn triage_names_a_cgroup_at_its_limit_and_the_reclaim() {
    let group = MemCgroup::new("triage", 16);
    let cgroup = group.path.to_str().expect("utf-8");
    let tool = Tool::start_until(&["triage", "--duration", "120s"], "fltrace: watching");
    let dir = Dir::new();
    let file = dir.path().join("pages");
    let out = run(&["reclaim", cgroup, file.to_str().expect("utf-8"), "64"]);
    assert!(out.status.success(), "{out:?}");
    let (text, err) = tool.stop();
    let section: Vec<&str> = text
        .lines()
        .skip_while(|l| !l.starts_with("== Reclaim"))
        .skip(1)
        .take_while(|l| !l.starts_with("=="))
        .collect();
    let at_limit = format!("at its limit: memory cgroup /{}  ", group.name);
    let line = section
        .iter()
        .find(|l| l.trim_start().starts_with(&at_limit))
        .unwrap_or_else(|| {
            panic!(
                "/{} not at its limit:
{text}
{err}",
                group.name
            )
        });
    let hits: u64 = line
        .split("met it ")
        .nth(1)
        .and_then(|r| r.split(' ').next())
        .and_then(|n| n.parse().ok())
        .expect("times");
    assert!(hits > 0, "{line}");
    assert!(line.contains(" of 16384 KiB"), "{line}");
    let counts = section.first().expect("the counters' line");
    let number_before = |what: &str| -> u64 {
        counts
            .split(what)
            .next()
            .and_then(|r| r.split_whitespace().last())
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("no number before {what}: {counts}"))
    };
    // 64 MiB read twice through 16 MiB: reclaim scanned and freed at least 48 MiB of it.
    let (scanned, freed) = (number_before(" pages scanned"), number_before(" freed"));
    assert!(freed >= 48 * 256 && scanned >= freed, "{counts}");
    assert!(section.iter().any(|l| l.contains("pressure: ")), "{text}");
    let next = format!("-> fltrace vmscan --cgroup {cgroup}; fltrace drsnoop --cgroup {cgroup}");
    assert!(text.lines().any(|l| l.trim() == next), "{text}");
    assert!(
        text.contains("pages scanned") && text.contains("-> fltrace vmscan\n"),
        "{text}"
    );
}

/// mmap of a known file: its path, size, offset and protection, though the program closed
/// the descriptor at once.
#[test]
fn mmapsnoop_names_the_file() {
    let dir = Dir::new();
    let file = dir.path().join("mapped");
    std::fs::write(&file, vec![1u8; 16384]).expect("writes");
    let file = file.canonicalize().expect("path");
    let tool = Tool::start(&["mmapsnoop", "--format", "csv", "--comm", "sysmem"]);
    let mut child = Command::new(sysmem())
        .args(["mmap", file.to_str().expect("utf-8")])
        .spawn()
        .expect("runs");
    let pid = child.id().to_string();
    assert!(child.wait().expect("waits").success());
    let (text, _) = tool.stop();
    let rows = csv_rows(&text);
    let row = rows
        .iter()
        .find(|r| r["pid"] == pid && r["file"] == file.to_str().expect("utf-8"))
        .unwrap_or_else(|| panic!("no mmap of {} by {pid}:\n{text}", file.display()));
    assert_eq!(
        (
            &*row["comm"],
            &*row["prot"],
            &*row["map"],
            &*row["offset_kb"],
            &*row["size_kb"]
        ),
        ("sysmem", "R--", "S---", "4", "12")
    );
}

/// brk growth from a known line: that line in the counted stack, unwound with DWARF (the
/// workload has no frame pointers); system-wide, the tool says which stacks it uses.
#[test]
fn brkstack_shows_the_line() {
    let exe = sysmem().to_str().expect("utf-8").to_owned();
    let out = Command::new(env!("CARGO_BIN_EXE_fltrace"))
        .args(["brkstack", "--", &exe, "brk"])
        .output()
        .expect("runs");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let line = site("sysmem.c", "brk");
    let frame = format!(
        "  grow_break at {}:{line}",
        workloads_dir()
            .join("sysmem.c")
            .canonicalize()
            .expect("path")
            .display()
    );
    let stack: Vec<&str> = text
        .split("\n\n")
        .find(|s| s.lines().any(|l| l.ends_with(&format!("sysmem.c:{line}"))))
        .unwrap_or_else(|| panic!("no stack through sysmem.c:{line}:\n{text}"))
        .lines()
        .collect();
    assert!(
        stack
            .iter()
            .any(|l| l.starts_with("  grow_break at ") && l.ends_with(&format!("sysmem.c:{line}"))),
        "{frame}\n{text}"
    );
    // Below it main, then the C library's start: a complete stack.
    let at = stack
        .iter()
        .position(|l| l.starts_with("  grow_break"))
        .expect("frame");
    assert!(stack[at + 1].starts_with("  main at "), "{text}");
    assert!(
        stack.iter().any(|l| l.starts_with("    sysmem [")),
        "{text}"
    );

    // Folded: the process name, then the frames outermost first.
    let out = Command::new(env!("CARGO_BIN_EXE_fltrace"))
        .args(["brkstack", "--folded", "--", &exe, "brk"])
        .output()
        .expect("runs");
    let folded = String::from_utf8_lossy(&out.stdout);
    assert!(
        folded
            .lines()
            .any(|l| l.starts_with("sysmem;") && l.contains(";main;grow_break;")),
        "{folded}"
    );

    let out = Command::new(env!("CARGO_BIN_EXE_fltrace"))
        .args(["brkstack", "--duration", "200ms"])
        .output()
        .expect("runs");
    assert!(out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("kernel's frame-pointer walk"), "{err}");
}

/// `sysmem brk` started by a shell that moved itself into `group` and waited for brkstack
/// `-p SHELL --cgroup filter` to trace it: brkstack's JSON lines.
fn brk_of_a_child_in(group: &Path, filter: &Path) -> String {
    let exe = sysmem().to_str().expect("utf-8").to_owned();
    let script = format!(
        "echo $$ > {}/cgroup.procs && read go && exec {exe} brk",
        group.display()
    );
    let mut shell = Command::new("sh")
        .args(["-c", &script])
        .stdin(Stdio::piped())
        .spawn()
        .expect("sh starts");
    let pid = shell.id().to_string();
    let name = group
        .file_name()
        .expect("a name")
        .to_string_lossy()
        .into_owned();
    let moved = (0..200).any(|_| {
        std::thread::sleep(Duration::from_millis(10));
        std::fs::read_to_string(format!("/proc/{pid}/cgroup")).is_ok_and(|c| c.contains(&name))
    });
    assert!(moved, "the shell never entered {}", group.display());
    let tool = Tool::start(&[
        "brkstack",
        "--format",
        "json",
        "-p",
        &pid,
        "--cgroup",
        filter.to_str().expect("utf-8"),
    ]);
    let mut stdin = shell.stdin.take().expect("stdin");
    std::io::Write::write_all(&mut stdin, b"go\n").expect("starts sysmem");
    drop(stdin);
    assert!(shell.wait().expect("sh ends").success());
    let (out, err, code) = tool.stop_with_code();
    assert_eq!(code, Some(0), "{err}");
    out
}

/// -p combines with --cgroup as in every system tool: the named process is traced inside the
/// cgroup, and nothing of it outside (the flags conflicted for the event tools).
#[test]
fn pid_and_cgroup_combine() {
    let group = MemCgroup::new("scope-in", 256);
    let other = MemCgroup::new("scope-out", 256);
    let line = format!("sysmem.c:{}", site("sysmem.c", "brk"));
    let inside = brk_of_a_child_in(&group.path, &group.path);
    assert!(
        inside
            .lines()
            .any(|l| l.contains("\"comm\":\"sysmem\"") && l.contains(&line)),
        "no brk at {line} inside the cgroup:\n{inside}"
    );
    let outside = brk_of_a_child_in(&group.path, &other.path);
    assert!(!outside.contains("sysmem"), "{outside}");
}

/// shmget, shmat, shmdt and shmctl with the key and size the program used, and the id
/// shmget returned in the later calls.
#[test]
fn shmsnoop_shows_each_call() {
    let tool = Tool::start(&["shmsnoop", "--format", "csv", "--comm", "sysmem"]);
    let out = run(&["shm", "0x5eed1", "65536"]);
    let (text, _) = tool.stop();
    assert!(out.status.success());
    let id: u32 = String::from_utf8_lossy(&out.stdout)
        .trim()
        .strip_prefix("shmid ")
        .and_then(|v| v.parse().ok())
        .expect("shmid");
    let rows = csv_rows(&text.replace(", ", "; "));
    let calls: Vec<(&str, &str, &str)> = rows
        .iter()
        .filter(|r| {
            r["args"].contains("0x5eed1")
                || r["args"].contains(&format!("shmid: {id:#x}"))
                || r["sys"] == "SHMDT"
        })
        .map(|r| (&*r["sys"], &*r["ret"], &*r["args"]))
        .collect();
    assert_eq!(calls.len(), 4, "{text}");
    assert_eq!(calls[0].0, "SHMGET");
    assert_eq!(calls[0].1, format!("{id:x}"));
    assert!(
        calls[0]
            .2
            .starts_with("key: 0x5eed1; size: 65536; shmflg: 0x380 (IPC_CREAT|0600)"),
        "{text}"
    );
    assert_eq!(calls[1].0, "SHMAT");
    assert!(
        calls[1]
            .2
            .starts_with(&format!("shmid: {id:#x}; shmaddr: 0x0")),
        "{text}"
    );
    assert_eq!(calls[2].0, "SHMDT");
    assert_eq!(calls[2].1, "0");
    assert_eq!(calls[3].0, "SHMCTL");
    assert_eq!(calls[3].2, format!("shmid: {id:#x}; cmd: 0; buf: 0x0"));
}

/// N hugetlb pages touched once each: exactly N hugetlb faults of that process.
#[test]
fn hfaults_counts_hugetlb_faults() {
    let _pages = HugePages::reserve(4);
    let exe = sysmem().to_str().expect("utf-8").to_owned();
    let out = Command::new(env!("CARGO_BIN_EXE_fltrace"))
        .args(["hfaults", "--format", "csv", "--", &exe, "hugetlb", "3"])
        .output()
        .expect("runs");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(text.contains("hugetlb 3\n"), "{text}");
    let rows = csv_rows(&text);
    assert_eq!(rows.len(), 1, "{text}");
    assert_eq!(
        (&*rows[0]["comm"], &*rows[0]["kind"], &*rows[0]["faults"]),
        ("sysmem", "hugetlb", "3")
    );
}

/// Transparent huge pages (enabled here for madvise'd memory): one fault per huge page the
/// kernel gave, as many as the program found in its own page flags.
#[test]
fn hfaults_counts_thp_faults() {
    let enabled = std::fs::read_to_string("/sys/kernel/mm/transparent_hugepage/enabled")
        .expect("THP settings");
    assert!(
        !enabled.contains("[never]"),
        "THP is off on this machine: {enabled}"
    );
    let exe = sysmem().to_str().expect("utf-8").to_owned();
    // With no free 2 MiB block the kernel falls back to small pages (thp_fault_fallback):
    // compact and try again, as the count compared below is whatever the kernel gave.
    let mut attempt = 0;
    let (text, huge) = loop {
        attempt += 1;
        compact_memory();
        let out = Command::new(env!("CARGO_BIN_EXE_fltrace"))
            .args(["hfaults", "--format", "csv", "--", &exe, "thp", "4"])
            .output()
            .expect("runs");
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let huge: u64 = text
            .lines()
            .find_map(|l| l.strip_prefix("thp "))
            .and_then(|v| v.parse().ok())
            .expect("the program's count");
        if huge > 0 || attempt == 5 {
            break (text, huge);
        }
    };
    assert!(
        huge > 0,
        "no transparent huge page given in {attempt} attempts: {text}"
    );
    let rows = csv_rows(&text);
    let thp: Vec<_> = rows.iter().filter(|r| r["kind"] == "thp").collect();
    assert_eq!(thp.len(), 1, "{text}");
    assert_eq!(thp[0]["faults"], huge.to_string(), "{text}");
}

/// With no swap active (as here, where none may be), swapin says so in one line and still
/// traces until told to stop.
#[test]
fn swapin_says_when_there_is_no_swap() {
    let swaps = std::fs::read_to_string("/proc/swaps").expect("/proc/swaps");
    let active = swaps.lines().skip(1).any(|l| !l.is_empty());
    let out = Command::new(env!("CARGO_BIN_EXE_fltrace"))
        .args(["swapin", "--duration", "300ms", "--format", "csv", "100ms"])
        .output()
        .expect("runs");
    assert!(out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    let notes: Vec<&str> = err
        .lines()
        .filter(|l| l.contains("no swap is active"))
        .collect();
    assert_eq!(notes.len(), usize::from(!active), "{err}");
    assert!(String::from_utf8_lossy(&out.stdout).starts_with("time,comm,pid,swapins\n"));
}

/// System-wide, a program that maps 3 hugetlb pages, touches them and exits at once: its 3
/// faults are counted though its smaps is gone when they are read (the kernel's mapping
/// record names the hugetlb memory), and the faults that could not be judged are said, with
/// exit status 3 (it missed all of them in 2 runs of 3, silently).
#[test]
fn hfaults_system_wide_counts_a_program_that_has_exited() {
    let _pages = HugePages::reserve(4);
    let dir = tempfile::tempdir().expect("temp dir");
    // A name of its own, for --comm, apart from the other tests' sysmem.
    let exe = dir.path().join("hugewide");
    std::fs::copy(sysmem(), &exe).expect("copies sysmem");
    let tool = Tool::start(&["hfaults", "--format", "csv", "--comm", "hugewide"]);
    let child = Command::new(&exe)
        .args(["hugetlb", "3"])
        .stdout(Stdio::null())
        .spawn()
        .expect("runs");
    let pid = child.id().to_string();
    let out = child.wait_with_output().expect("waits");
    assert!(out.status.success());
    std::thread::sleep(Duration::from_millis(300));
    let (text, err, code) = tool.stop_with_code();
    let rows = csv_rows(&text);
    let hugetlb: Vec<_> = rows
        .iter()
        .filter(|r| r["pid"] == pid && r["kind"] == "hugetlb")
        .map(|r| r["faults"].clone())
        .collect();
    assert_eq!(hugetlb, ["3"], "{text}\n{err}");
    match code {
        Some(0) => assert!(!err.contains("not judged"), "{err}"),
        Some(3) => assert!(
            err.contains("events not judged: their process ended"),
            "{err}"
        ),
        other => panic!("exit {other:?}: {err}"),
    }
}
