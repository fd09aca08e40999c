//! A hostile environment (issue 11): symlinks planted at output names, a world-writable output
//! directory, stale spools of killed recorders, a non-root user, a full file system, and the
//! preload library's allocations off the thread's stack and forks while handlers evict.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::OnceLock;
use std::time::Duration;

use fltrace_trace::files;

use super::util::*;

fn stderr_of(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// `workloads/hardening.c`, built once.
fn hardening() -> &'static Path {
    static BUILT: OnceLock<(tempfile::TempDir, PathBuf)> = OnceLock::new();
    &BUILT
        .get_or_init(|| {
            let dir = tempfile::tempdir().expect("temp dir");
            let program = dir.path().join("hardening");
            let out = Command::new("gcc")
                .args(["-O2", "-g", "-fomit-frame-pointer", "-pthread", "-o"])
                .arg(&program)
                .arg(workloads_dir().join("hardening.c"))
                .output()
                .expect("gcc runs");
            assert!(out.status.success(), "{}", stderr_of(&out));
            (dir, program)
        })
        .1
}

/// A file outside the output directory that planted links point to.
struct Victim {
    _dir: tempfile::TempDir,
    path: PathBuf,
}

impl Victim {
    fn new() -> Victim {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("victim");
        std::fs::write(&path, "precious").expect("victim");
        Victim { _dir: dir, path }
    }

    /// Plants a symbolic link to the victim at each of `names` in `dir`.
    fn plant(&self, dir: &Path, names: &[PathBuf]) {
        for name in names {
            std::os::unix::fs::symlink(&self.path, dir.join(name)).expect("plant link");
        }
    }

    fn assert_untouched(&self, what: &str, out: &Output) {
        assert_eq!(
            std::fs::read_to_string(&self.path).expect("victim"),
            "precious",
            "{what} wrote through a planted link: {}",
            stderr_of(out)
        );
    }
}

/// The command failed and named the refused file, or succeeded with the link replaced by a
/// file of its own; the victim is untouched either way.
fn assert_refused_or_safe(what: &str, out: &Output, dir: &Path, names: &[PathBuf], v: &Victim) {
    v.assert_untouched(what, out);
    if out.status.success() {
        for name in names {
            let meta = std::fs::symlink_metadata(dir.join(name)).expect("output");
            assert!(meta.is_file(), "{what}: {} left a link", name.display());
        }
    } else {
        let err = stderr_of(out);
        assert!(
            err.contains("refusing to write") && err.contains("symbolic link"),
            "{what}: {err}"
        );
    }
}

fn names(kinds: &[(&str, &str)], pid: u32) -> Vec<PathBuf> {
    kinds
        .iter()
        .map(|(kind, ext)| PathBuf::from(format!("{}{kind}-{pid}.{ext}", files::PREFIX)))
        .collect()
}

/// report, visualize and heatmap with links planted at every default output name.
#[test]
fn analysis_outputs_do_not_follow_planted_links() {
    let dir = Dir::new();
    dir.record(&[&workloads().faults], &["nested", "200"]);
    let pid = dir.pids("faults", "parquet")[0];
    let victim = Victim::new();
    for (command, kinds) in [
        ("report", &[("report", "out")][..]),
        (
            "visualize",
            &[("flamegraph", "svg"), ("flamegraph-alloc", "svg")][..],
        ),
        (
            "heatmap",
            &[("heatmap", "png"), ("heatmap", "svg"), ("memref", "svg")][..],
        ),
    ] {
        let planted = names(kinds, pid);
        victim.plant(dir.path(), &planted);
        let out = dir.run(&[command]);
        assert_refused_or_safe(command, &out, dir.path(), &planted, &victim);
        assert!(
            !out.status.success(),
            "{command} replaced a link it did not make"
        );
        for name in &planted {
            std::fs::remove_file(dir.path().join(name)).expect("remove link");
        }
    }
    // A hard link to someone else's file is not truncated through either.
    let linked = dir.path().join(&names(&[("report", "out")], pid)[0]);
    std::fs::hard_link(&victim.path, &linked).expect("hard link");
    let out = dir.run(&["report"]);
    victim.assert_untouched("report (hard link)", &out);
    assert!(
        stderr_of(&out).contains("other hard links"),
        "{}",
        stderr_of(&out)
    );
    std::fs::remove_file(&linked).expect("remove");
    // Its own earlier output is replaced.
    assert!(dir.run(&["report"]).status.success());
    let again = dir.run(&["report"]);
    assert!(again.status.success(), "{}", stderr_of(&again));
}

/// record (attached), wss and sweep with links planted at their default outputs.
#[test]
fn recording_outputs_do_not_follow_planted_links() {
    let victim = Victim::new();
    let mut target = Command::new(&workloads().faults)
        .args(["wait", "10"])
        .stdout(Stdio::piped())
        .spawn()
        .expect("workload");
    let mut ready = String::new();
    std::io::BufRead::read_line(
        &mut std::io::BufReader::new(target.stdout.as_mut().expect("stdout")),
        &mut ready,
    )
    .expect("ready");
    let pid = target.id();

    let dir = Dir::new();
    let planted = names(
        &[
            ("faults", "parquet"),
            ("stacks", "parquet"),
            ("mmaps", "parquet"),
            ("stats", "out"),
            ("procmaps", "out"),
        ],
        pid,
    );
    victim.plant(dir.path(), &planted);
    let pid_arg = pid.to_string();
    let out = output_within(
        dir.fltrace().args(["record", "-q", "-p", &pid_arg]),
        Duration::from_secs(60),
    );
    assert_refused_or_safe("record -p", &out, dir.path(), &planted, &victim);
    assert!(!out.status.success());

    let wss = names(&[("wss", "csv"), ("wss", "svg")], pid);
    victim.plant(dir.path(), &wss);
    let out = output_within(
        dir.fltrace().args([
            "wss",
            "-p",
            &pid_arg,
            "--interval",
            "100ms",
            "--duration",
            "300ms",
        ]),
        Duration::from_secs(60),
    );
    assert_refused_or_safe("wss", &out, dir.path(), &wss, &victim);
    let _ = target.kill();
    let _ = target.wait();

    let sweep = [PathBuf::from("sweep.csv"), PathBuf::from("sweep.svg")];
    victim.plant(dir.path(), &sweep);
    let out = output_within(
        dir.fltrace()
            .args(["sweep", "--from", "100", "--to", "100", "--output", "."])
            .arg("--")
            .arg(&workloads().faults)
            .args(["nested", "100"]),
        Duration::from_secs(120),
    );
    assert_refused_or_safe("sweep", &out, dir.path(), &sweep, &victim);
}

/// Output into a directory anyone may write to, without the sticky bit, is warned about.
#[test]
fn world_writable_output_directory_is_warned_about() {
    let dir = Dir::new();
    dir.record(&[&workloads().faults], &["nested", "50"]);
    let set = |mode| {
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(mode)).expect("chmod")
    };
    set(0o777);
    let out = dir.run(&["report"]);
    assert!(out.status.success(), "{}", stderr_of(&out));
    let warning = "is writable by other users and not sticky";
    assert_eq!(
        stderr_of(&out).matches(warning).count(),
        1,
        "{}",
        stderr_of(&out)
    );
    set(0o1777);
    let out = dir.run(&["report"]);
    assert!(!stderr_of(&out).contains(warning), "{}", stderr_of(&out));
    set(0o700);
}

/// The spool a killed `record --allocs` left is removed by the next `record`; a live
/// recorder's is not.
#[test]
fn stale_allocation_spools_are_removed() {
    let dir = Dir::new();
    // A pid that no longer runs: a child that has been waited for.
    let dead = Command::new("true").spawn().expect("true");
    let dead_pid = dead.id();
    let mut dead = dead;
    dead.wait().expect("wait");
    let stale = dir.path().join(format!(".fltrace-allocs-{dead_pid}-1"));
    std::fs::create_dir(&stale).expect("stale spool");
    // Its metadata is what makes it a spool; its log does not convert.
    std::fs::write(stale.join("recording"), "recording 1-2\nmono_offset 0\n").expect("meta");
    std::fs::write(stale.join(format!("log-{dead_pid}.0")), vec![1u8; 1 << 20]).expect("log");
    // This test process runs: its spool is left alone.
    let live = dir
        .path()
        .join(format!(".fltrace-allocs-{}-1", std::process::id()));
    std::fs::create_dir(&live).expect("live spool");

    let out = dir.record(&[&workloads().faults], &["nested", "10"]);
    assert!(!stale.exists(), "stale spool kept: {}", stderr_of(&out));
    assert!(stderr_of(&out).contains("left by a recorder that was killed"));
    assert!(live.is_dir(), "a live recorder's spool was removed");
    // A recording with --allocs leaves no spool of its own behind.
    std::fs::remove_dir(&live).expect("remove");
    let out = output_within(
        dir.fltrace()
            .args(["record", "-q", "--allocs", "--"])
            .arg(&workloads().allocs)
            .arg("sites"),
        Duration::from_secs(120),
    );
    assert!(out.status.success(), "{}", stderr_of(&out));
    let spools: Vec<_> = std::fs::read_dir(dir.path())
        .expect("dir")
        .filter_map(|e| e.ok())
        .filter(|e| {
            e.file_name()
                .to_string_lossy()
                .starts_with(".fltrace-allocs-")
        })
        .collect();
    assert!(spools.is_empty(), "{spools:?}");
}

/// The BPF tools run unprivileged name what they lack: `count` of a tracepoint says tracefs
/// is closed (never "unknown event"), and a tool that loads BPF names CAP_BPF/CAP_PERFMON
/// with the kernel setting, instead of a bare "Operation not permitted".
#[test]
fn bpf_tools_name_the_missing_privilege() {
    let dir = Dir::new();
    std::os::unix::fs::chown(dir.path(), Some(65534), Some(65534)).expect("chown");
    let as_nobody = |args: &[&str]| {
        Command::new("setpriv")
            .args(["--reuid=65534", "--regid=65534", "--clear-groups", "--"])
            .arg(env!("CARGO_BIN_EXE_fltrace"))
            .args(args)
            .current_dir(dir.path())
            .env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .output()
            .expect("setpriv runs")
    };
    let out = as_nobody(&["count", "kmem:mm_page_alloc", "--", "true"]);
    let err = stderr_of(&out);
    assert!(!out.status.success(), "{err}");
    assert!(!err.contains("unknown event"), "{err}");
    let mode = std::fs::metadata("/sys/kernel/tracing")
        .expect("tracefs")
        .permissions()
        .mode()
        & 0o7777;
    if mode & 0o005 != 0o005 {
        assert!(
            err.contains(&format!("/sys/kernel/tracing is mode {mode:04o}")),
            "{err}"
        );
    }
    let out = as_nobody(&["triage", "--duration", "1s"]);
    let err = stderr_of(&out);
    assert!(!out.status.success(), "{err}");
    let setting = std::fs::read_to_string("/proc/sys/kernel/unprivileged_bpf_disabled")
        .expect("unprivileged_bpf_disabled");
    assert!(
        err.contains("CAP_BPF and CAP_PERFMON")
            && err.contains(&format!(
                "kernel.unprivileged_bpf_disabled is {}",
                setting.trim()
            )),
        "{err}"
    );
}

/// A user without privileges is told what stops them: tracefs's mode when it is closed to
/// them, else the perf_event_paranoid level, with the value and the setting that opens it.
#[test]
fn non_root_user_is_told_the_obstacle() {
    let dir = Dir::new();
    std::os::unix::fs::chown(dir.path(), Some(65534), Some(65534)).expect("chown");
    let out = Command::new("setpriv")
        .args(["--reuid=65534", "--regid=65534", "--clear-groups", "--"])
        .arg(env!("CARGO_BIN_EXE_fltrace"))
        .args(["record", "--", "true"])
        .current_dir(dir.path())
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .output()
        .expect("setpriv runs");
    assert_eq!(out.status.code(), Some(1), "{}", stderr_of(&out));
    let err = stderr_of(&out);
    let tracefs = std::fs::metadata("/sys/kernel/tracing").expect("tracefs");
    let mode = tracefs.permissions().mode() & 0o7777;
    let paranoid = std::fs::read_to_string("/proc/sys/kernel/perf_event_paranoid")
        .expect("paranoid")
        .trim()
        .to_owned();
    if mode & 0o005 != 0o005 {
        assert!(
            err.contains(&format!("/sys/kernel/tracing is mode {mode:04o}"))
                && err.contains("chmod 0755 /sys/kernel/tracing"),
            "{err}"
        );
    } else {
        assert!(
            err.contains(&format!("kernel.perf_event_paranoid is {paranoid}")),
            "{err}"
        );
    }
    assert!(!err.contains("mounting tracefs"), "{err}");
}

/// On a machine booted without tracefs mounted, recorders started together each mount it or
/// use the mount another made meanwhile: the kernel refuses a second tracefs mount at the
/// same place (EBUSY), which failed one recorder of eight in about one round of twenty (and a
/// clean-clone CI run right after a boot). Played in a mount namespace of the test's own with
/// tracefs unmounted there, so the machine's own mount stays as it is.
#[test]
fn recorders_started_together_without_tracefs_all_record() {
    const ROUNDS: usize = 3;
    const RECORDERS: usize = 8;
    let dir = Dir::new();
    let script = format!(
        r#"F=$0; W=$1; D=$2
# Where debugfs is mounted, its tracing directory would be found instead.
umount -R /sys/kernel/debug 2>/dev/null
for round in $(seq {ROUNDS}); do
  umount /sys/kernel/tracing || exit 90
  test -d /sys/kernel/tracing/events && exit 91
  pids=
  for i in $(seq {RECORDERS}); do
    "$F" record -q -o "$D/r$round-$i" -- "$W" nested 20 2>"$D/err$round-$i" &
    pids="$pids $!"
  done
  i=0
  for pid in $pids; do i=$((i + 1)); wait $pid; echo "recorder $round-$i exited $?"; done
  echo "tracefs mounts $(grep -c ' /sys/kernel/tracing tracefs ' /proc/self/mounts)"
done"#
    );
    let out = Command::new("unshare")
        .args(["--mount", "--propagation", "private", "sh", "-c", &script])
        .arg(env!("CARGO_BIN_EXE_fltrace"))
        .arg(&workloads().faults)
        .arg(dir.path())
        .output()
        .expect("unshare runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}{}", stderr_of(&out));
    let mut recorders = 0;
    for line in stdout.lines() {
        if let Some(status) = line.strip_prefix("recorder ") {
            let (name, code) = status.split_once(" exited ").expect("a status line");
            let err =
                std::fs::read_to_string(dir.path().join(format!("err{name}"))).unwrap_or_default();
            assert_eq!(code, "0", "recorder {name}: {err}");
            let report = dir.report_json(&[&format!("r{name}")]);
            assert_eq!(
                count_at(&report, "faults.c", site("faults.c", "fill")),
                20,
                "recorder {name}"
            );
            recorders += 1;
        } else {
            // Mounted once each round, by whichever recorder came first.
            assert_eq!(line, "tracefs mounts 1", "{stdout}");
        }
    }
    assert_eq!(recorders, ROUNDS * RECORDERS, "{stdout}");
}

/// A user who may not mount tracefs, on a machine where it is not mounted, is told that, not
/// the perf_event_paranoid level (which the recorder's first message blamed) nor a bare
/// "Operation not permitted" (`count`'s). In a mount namespace of the test's own.
#[test]
fn a_user_who_may_not_mount_tracefs_is_told_so() {
    let dir = Dir::new();
    std::os::unix::fs::chown(dir.path(), Some(65534), Some(65534)).expect("chown");
    let script = r#"umount -R /sys/kernel/debug 2>/dev/null
umount /sys/kernel/tracing || exit 90
cd "$1" || exit 91
for args in "record -- true" "count kmem:mm_page_alloc -- true"; do
  setpriv --reuid=65534 --regid=65534 --clear-groups -- "$0" $args
  echo "exited $?" >&2
done"#;
    let out = Command::new("unshare")
        .args(["--mount", "--propagation", "private", "sh", "-c", script])
        .arg(env!("CARGO_BIN_EXE_fltrace"))
        .arg(dir.path())
        .output()
        .expect("unshare runs");
    let err = stderr_of(&out);
    assert!(out.status.success(), "{err}");
    let told = ": not mounted, and this process may not mount it (that needs CAP_SYS_ADMIN): \
                run as root, or mount it once with `mount -t tracefs nodev /sys/kernel/tracing`";
    let lines: Vec<&str> = err.lines().collect();
    assert_eq!(lines.len(), 4, "{err}");
    for pair in lines.chunks(2) {
        assert!(pair[0].starts_with("fltrace: tracefs"), "{err}");
        assert!(pair[0].ends_with(told), "{err}");
        assert!(!pair[0].contains("paranoid"), "{err}");
        assert_eq!(pair[1], "exited 1", "{err}");
    }
}

/// A small tmpfs the test mounts, unmounted whatever happens.
struct SmallFs {
    dir: tempfile::TempDir,
}

impl SmallFs {
    fn mount(size: &str) -> SmallFs {
        SmallFs::mount_with(&format!("size={size},mode=0755"))
    }

    fn mount_with(options: &str) -> SmallFs {
        let dir = tempfile::tempdir().expect("mount point");
        let status = Command::new("mount")
            .args(["-t", "tmpfs", "-o", options, "fltrace-full"])
            .arg(dir.path())
            .status()
            .expect("mount runs");
        assert!(status.success(), "mounting a tmpfs");
        SmallFs { dir }
    }

    fn path(&self) -> &Path {
        self.dir.path()
    }
}

impl Drop for SmallFs {
    fn drop(&mut self) {
        // A process of a test that ended a moment ago may still hold it: again, then lazily.
        for _ in 0..20 {
            let quiet = Command::new("umount")
                .arg(self.dir.path())
                .stderr(Stdio::null())
                .status();
            if quiet.is_ok_and(|s| s.success()) {
                return;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        let _ = Command::new("umount")
            .arg("-l")
            .arg(self.dir.path())
            .status();
    }
}

/// Recording into a file system that fills up: the program runs to its end with its exit
/// status reported, fltrace says what it kept, and that part reads back.
#[test]
fn full_file_system_leaves_the_program_running() {
    for allocs in [false, true] {
        // Smaller than the trace: the fault table alone is about 160 KB.
        let fs = SmallFs::mount("128k");
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_fltrace"));
        cmd.current_dir(fs.path())
            .env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .args(["record", "-q"]);
        if allocs {
            cmd.arg("--allocs");
        }
        // 3 exit status: fltrace says it, and exits with its own (125): the trace is cut.
        cmd.arg("--").arg("sh").arg("-c").arg(format!(
            "{} threads 4 20000 && {} sites >/dev/null && exit 3",
            workloads().faults.display(),
            workloads().allocs.display()
        ));
        let out = output_within(&mut cmd, Duration::from_secs(180));
        let err = stderr_of(&out);
        assert_eq!(out.status.code(), Some(125), "allocs {allocs}: {err}");
        assert!(
            err.contains("exited with status 3"),
            "allocs {allocs}: {err}"
        );
        assert!(
            err.contains("No space left on device"),
            "allocs {allocs}: {err}"
        );
        // Every file of the recording is named with what of it reads back.
        let kept = err
            .lines()
            .find(|l| l.starts_with("fltrace: kept: "))
            .unwrap_or_else(|| panic!("allocs {allocs}: nothing said of what was kept: {err}"));
        for entry in std::fs::read_dir(fs.path()).expect("dir").flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            if name.starts_with(files::PREFIX) {
                assert!(kept.contains(&name), "{name} not in {kept}");
            }
        }
        assert!(
            !err.contains("SIGBUS") && !err.contains("signal 7"),
            "{err}"
        );
        // When it stopped is said, and the kept part reads back on the full file system:
        // `report` counts exactly the faults kept (an allocation table the disk left
        // unreadable is removed, not kept to fail every reader).
        assert!(
            err.lines()
                .any(|l| l.starts_with("fltrace: tracing stopped ")
                    && l.ends_with(" s into the run; the program ran on untraced")),
            "allocs {allocs}: {err}"
        );
        let kept_faults: u64 = kept
            .split(&format!("{}faults-", files::PREFIX))
            .skip(1)
            .map(|entry| {
                let rows = entry
                    .split_once(".parquet (")
                    .and_then(|(_, rest)| rest.split_once(" rows)"))
                    .unwrap_or_else(|| panic!("allocs {allocs}: faults unreadable: {kept}"));
                rows.0.parse::<u64>().expect("a row count")
            })
            .sum();
        let report = Command::new(env!("CARGO_BIN_EXE_fltrace"))
            .current_dir(fs.path())
            .args(["report", "--format", "json", "--top", "0"])
            .output()
            .expect("fltrace report runs");
        assert!(
            report.status.success(),
            "allocs {allocs}: {}",
            stderr_of(&report)
        );
        let json: serde_json::Value =
            serde_json::from_slice(&report.stdout).expect("report prints JSON");
        // The preloaded tracer's own faults are counted apart.
        let reported =
            json["faults"].as_u64().unwrap_or(0) + json["tracer_faults"].as_u64().unwrap_or(0);
        assert_eq!(reported, kept_faults, "allocs {allocs}: {kept}");
        for entry in std::fs::read_dir(fs.path()).expect("dir").flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            assert!(
                !name.starts_with(".fltrace-allocs-"),
                "spool {name} left behind"
            );
        }
        drop(fs);
    }
}

/// malloc from a signal handler on a sigaltstack, from a makecontext coroutine and from a
/// stack switched to by hand, whose stacks have an inaccessible page right above: every call
/// is traced with its site, and the unwinder reads nothing past the stack it runs on (it would
/// fault on that page). The hand-made switch is the one that leads an unwinder there (the
/// others' unwind information ends or returns to the thread's stack): the program died of
/// SIGSEGV when reads were bounded by the thread's stack alone.
#[test]
fn allocations_off_the_thread_stack_unwind_within_their_stack() {
    for (mode, site_name, n) in [
        ("altstack", "altstack_malloc", 300),
        ("coroutine", "coroutine_malloc", 300),
        ("switch", "switch_malloc", 300),
    ] {
        let dir = Dir::new();
        let out = output_within(
            dir.fltrace()
                .args(["record", "-q", "--allocs", "--"])
                .arg(hardening())
                .args([mode, &n.to_string()]),
            Duration::from_secs(120),
        );
        assert!(out.status.success(), "{mode}: {}", stderr_of(&out));
        let report = dir.run(&["report", "--allocs", "--format", "csv", "--top", "0"]);
        assert!(report.status.success(), "{}", stderr_of(&report));
        let rows = csv_rows(&String::from_utf8_lossy(&report.stdout));
        let line = site("hardening.c", site_name).to_string();
        let row = rows
            .iter()
            .find(|r| r["file"].ends_with("hardening.c") && r["line"] == line)
            .unwrap_or_else(|| panic!("{mode}: no row at hardening.c:{line} in {rows:#?}"));
        assert_eq!(row["allocs"], n.to_string(), "{mode}: {row:?}");
    }
}

/// Forks while a thread keeps the far-memory handlers evicting: every child (which frees a
/// large block, taking the region's lock) completes. Bounded: a hang fails the test.
#[test]
fn fork_while_handlers_evict_completes() {
    let dir = Dir::new();
    let out = output_within(
        dir.fltrace()
            .args(["record", "-q", "-L=4", "-M=128", "-C=2", "--"])
            .arg(hardening())
            .args(["forkevict", "200", "16"]),
        Duration::from_secs(240),
    );
    assert!(out.status.success(), "{}", stderr_of(&out));
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("forks 200"),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
}

/// The far-memory runtime's shared page is created, never opened: whatever is planted under
/// its temporary name (`<prefix>-<pid>.new`, in /dev/shm, which every user can write to) is
/// neither written nor truncated through. A hard link to another file there was truncated
/// and overwritten by the page before (O_TRUNC); a symbolic link is not followed. The program
/// runs with its page under the final name either way.
#[test]
fn runtime_shared_page_does_not_write_through_planted_names() {
    let w = workloads();
    let library = Path::new(env!("CARGO_BIN_EXE_fltrace")).with_file_name("libfltrace_preload.so");
    let shm = tempfile::Builder::new()
        .prefix("fltrace-test-shm-")
        .tempdir_in("/dev/shm")
        .expect("a directory in /dev/shm");
    let prefix = shm.path().join("page");
    let victim = shm.path().join("victim");
    for plant in ["ln", "ln -s"] {
        std::fs::write(&victim, "precious").expect("victim");
        // The shell plants the name of its own pid, then execs the program under that pid.
        let script = format!(
            "echo $$; {plant} {victim} {prefix}-$$.new && exec {program} fork 4",
            victim = victim.display(),
            prefix = prefix.display(),
            program = w.farmem.display(),
        );
        let out = Command::new("sh")
            .args(["-c", &script])
            .env("LD_PRELOAD", &library)
            .env("FLTRACE_RT_LOCAL_PAGES", "256")
            .env("FLTRACE_RT_MAX_PAGES", "8192")
            .env("FLTRACE_RT_SHARED", &prefix)
            .output()
            .expect("sh runs");
        assert!(out.status.success(), "{plant}: {}", stderr_of(&out));
        let pid: u32 = String::from_utf8_lossy(&out.stdout)
            .trim()
            .parse()
            .expect("the shell's pid");
        assert_eq!(
            std::fs::read_to_string(&victim).expect("victim"),
            "precious",
            "{plant}: the planted name's target is untouched"
        );
        let page = PathBuf::from(format!("{}-{pid}", prefix.display()));
        let meta = std::fs::symlink_metadata(&page).expect("the page under its final name");
        assert!(
            meta.file_type().is_file() && meta.len() as usize == fltrace_runtime_abi::SHARED_SIZE,
            "{plant}: the page is a file of its own: {meta:?}"
        );
        let victim_meta = std::fs::metadata(&victim).expect("victim");
        use std::os::unix::fs::MetadataExt;
        assert_ne!(
            meta.ino(),
            victim_meta.ino(),
            "{plant}: the page is not the victim"
        );
        assert_eq!(victim_meta.nlink(), 1, "{plant}: the planted link is gone");
        std::fs::remove_file(&page).expect("remove the page");
    }
}

/// Far memory that cannot start in the program (userfaultfd refused to it by a seccomp filter,
/// as in a container, while the recorder may use it): one line says so, and the program ends
/// at start-up with a failure that fltrace passes on, instead of running without the limit
/// that was asked for.
#[test]
fn far_memory_refused_to_the_program_is_a_clear_error() {
    let w = workloads();
    let built = tempfile::tempdir().expect("temp dir");
    let nouffd = built.path().join("nouffd");
    let out = Command::new("gcc")
        .args(["-O2", "-o"])
        .arg(&nouffd)
        .arg(workloads_dir().join("nouffd.c"))
        .output()
        .expect("gcc runs");
    assert!(out.status.success(), "{}", stderr_of(&out));
    let dir = Dir::new();
    let out = output_within(
        dir.fltrace()
            .args(["record", "-q", "-L=16", "-M=128", "--"])
            .arg(&nouffd)
            .arg(&w.farmem)
            .args(["threads", "4", "2"]),
        Duration::from_secs(60),
    );
    let err = stderr_of(&out);
    assert_eq!(out.status.code(), Some(127), "{err}");
    let said: Vec<&str> = err.lines().filter(|l| l.contains("userfaultfd")).collect();
    assert_eq!(
        said,
        vec![
            "fltrace: userfaultfd is unavailable to the program (errno 1): far-memory emulation (-L) cannot start"
        ],
        "{err}"
    );
}

/// A directory named like a killed recorder's spool but without a spool's metadata, and a
/// real spool holding a file of the user's beside its logs: `report` deletes nothing at all
/// (it only reads the recording) and names the look-alike in a warning; the next `record`
/// removes the spool's own files only, naming the one it leaves.
#[test]
fn report_deletes_nothing_it_did_not_write() {
    let dir = Dir::new();
    dir.record(&[&workloads().faults], &["nested", "10"]);
    // Above pid_max (32768 here, 4194304 at most on 64-bit): no such process runs.
    let planted = dir.path().join(".fltrace-allocs-3999999-1");
    std::fs::create_dir(&planted).expect("planted dir");
    std::fs::write(planted.join("notes.txt"), "mine").expect("notes");
    let spool = dir.path().join(".fltrace-allocs-3999998-1");
    std::fs::create_dir(&spool).expect("spool");
    std::fs::write(spool.join("recording"), "recording 1-2\nmono_offset 0\n").expect("meta");
    std::fs::write(spool.join("log-clock"), [0u8; 64]).expect("clock");
    std::fs::write(spool.join("log-3999998.0"), [7u8; 4096]).expect("log");
    std::fs::write(spool.join("keep.txt"), "also mine").expect("keep");
    let listing = |dir: &Path| {
        let mut names: Vec<String> = std::fs::read_dir(dir)
            .expect("dir kept")
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        names
    };
    let warned = |err: &str, dir: &str, file: &str| {
        err.lines()
            .any(|l| l.starts_with("fltrace: warning: ") && l.contains(dir) && l.contains(file))
    };

    let out = dir.run(&["report"]);
    let err = stderr_of(&out);
    assert!(out.status.success(), "{err}");
    assert_eq!(listing(&planted), vec!["notes.txt"], "{err}");
    assert_eq!(
        listing(&spool),
        vec!["keep.txt", "log-3999998.0", "log-clock", "recording"],
        "{err}"
    );
    assert_eq!(
        std::fs::read_to_string(planted.join("notes.txt")).expect("notes kept"),
        "mine"
    );
    assert!(
        warned(&err, ".fltrace-allocs-3999999-1", "notes.txt"),
        "{err}"
    );

    let out = dir.record(&[&workloads().faults], &["nested", "10"]);
    let err = stderr_of(&out);
    assert_eq!(listing(&planted), vec!["notes.txt"], "{err}");
    assert_eq!(listing(&spool), vec!["keep.txt"], "{err}");
    assert_eq!(
        std::fs::read_to_string(spool.join("keep.txt")).expect("keep kept"),
        "also mine"
    );
    assert!(
        warned(&err, ".fltrace-allocs-3999998-1", "keep.txt"),
        "{err}"
    );
    assert!(
        warned(&err, ".fltrace-allocs-3999999-1", "notes.txt"),
        "{err}"
    );
}

/// `workloads/peakrss.c`, built once.
pub(super) fn peakrss() -> &'static Path {
    static BUILT: OnceLock<(tempfile::TempDir, PathBuf)> = OnceLock::new();
    &BUILT
        .get_or_init(|| {
            let dir = tempfile::tempdir().expect("temp dir");
            let program = dir.path().join("peakrss");
            let out = Command::new("gcc")
                .args(["-O2", "-o"])
                .arg(&program)
                .arg(workloads_dir().join("peakrss.c"))
                .output()
                .expect("gcc runs");
            assert!(out.status.success(), "{}", stderr_of(&out));
            (dir, program)
        })
        .1
}

/// `fltrace <args>` in `dir` like [`output_within`], failing the test past `limit` (a hang),
/// with its peak resident memory in bytes (wait4's rusage, through `peakrss`); the
/// `peak_rss_kb` line is taken out of its stderr.
fn fltrace_and_peak(dir: &Dir, args: &[&str], limit: Duration) -> (Output, u64) {
    let mut out = output_within(
        Command::new(peakrss())
            .arg(env!("CARGO_BIN_EXE_fltrace"))
            .args(args)
            .current_dir(dir.path())
            .env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap_or_default()),
        limit,
    );
    let err = stderr_of(&out);
    let (rest, last) = err
        .trim_end()
        .rsplit_once('\n')
        .unwrap_or(("", err.trim_end()));
    let kb: u64 = last
        .strip_prefix("peak_rss_kb ")
        .and_then(|kb| kb.parse().ok())
        .unwrap_or_else(|| panic!("no peak from peakrss: {err}"));
    out.stderr = if rest.is_empty() {
        Vec::new()
    } else {
        format!("{rest}\n").into_bytes()
    };
    (out, kb * 1024)
}

/// A FIFO and a 4 GiB sparse file in place of each text file of a recording (stats,
/// procmaps): `report` neither blocks on the FIFO nor reads the big file into memory; the
/// planted file is named, left as it was, and the report still comes out.
#[test]
fn planted_side_files_are_refused_by_name() {
    let dir = Dir::new();
    dir.record(&[&workloads().faults], &["nested", "10"]);
    let pid = dir.pids("faults", "parquet")[0];
    let clean = dir.run(&["report", "--format", "json"]);
    assert!(clean.status.success(), "{}", stderr_of(&clean));
    for path in [
        files::stats(dir.path(), pid),
        files::procmaps(dir.path(), pid),
    ] {
        let original = std::fs::read(&path).expect("side file");
        let name = path
            .file_name()
            .expect("name")
            .to_string_lossy()
            .into_owned();
        for kind in ["FIFO", "sparse"] {
            std::fs::remove_file(&path).expect("remove");
            match kind {
                "FIFO" => {
                    let c =
                        std::ffi::CString::new(path.as_os_str().as_encoded_bytes()).expect("path");
                    // SAFETY: a NUL-terminated path.
                    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o644) }, 0, "mkfifo");
                }
                _ => std::fs::File::create(&path)
                    .and_then(|f| f.set_len(4 << 30))
                    .expect("sparse file"),
            }
            let (out, peak) = fltrace_and_peak(
                &dir,
                &["report", "--format", "json"],
                Duration::from_secs(60),
            );
            let err = stderr_of(&out);
            assert!(out.status.success(), "{name} as {kind}: {err}");
            assert!(peak < 100 << 20, "{name} as {kind}: peak {peak} bytes");
            let said = if kind == "FIFO" {
                "not a regular file (a FIFO): refused"
            } else {
                "4294967296 bytes, more than the"
            };
            assert!(
                err.lines().any(|l| l.starts_with("fltrace: warning: ")
                    && l.contains(&name)
                    && l.contains(said)),
                "{name} as {kind}: {err}"
            );
            // The report is the one of the clean recording: the planted file was only left out.
            assert_eq!(out.stdout, clean.stdout, "{name} as {kind}");
            let meta = std::fs::symlink_metadata(&path).expect("planted file kept");
            if kind == "FIFO" {
                use std::os::unix::fs::FileTypeExt;
                assert!(meta.file_type().is_fifo());
            } else {
                assert_eq!(meta.len(), 4 << 30);
            }
        }
        std::fs::remove_file(&path).expect("remove");
        std::fs::write(&path, original).expect("restore");
    }
}

/// `record -p` of a kernel thread (kthreadd, pid 2) is refused at once, saying why.
#[test]
fn record_refuses_a_kernel_thread() {
    let dir = Dir::new();
    let out = output_within(
        dir.fltrace().args(["record", "-p", "2"]),
        Duration::from_secs(30),
    );
    let err = stderr_of(&out);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains("cannot attach to process 2: it is a kernel thread"),
        "{err}"
    );
    assert!(dir.pids("faults", "parquet").is_empty());
}

/// `record -p` of a zombie is refused too: its memory is gone.
#[test]
fn record_refuses_a_zombie() {
    let dir = Dir::new();
    // A child that exited and that this process has not reaped yet.
    let mut zombie = Command::new("true").spawn().expect("true");
    let stat = format!("/proc/{}/stat", zombie.id());
    let started = std::time::Instant::now();
    while !std::fs::read_to_string(&stat).is_ok_and(|s| s.contains(") Z ")) {
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "never a zombie"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    let out = output_within(
        dir.fltrace()
            .args(["record", "-p", &zombie.id().to_string()]),
        Duration::from_secs(30),
    );
    let _ = zombie.wait();
    let err = stderr_of(&out);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("it is a zombie"), "{err}");
}

/// `record -o` into a read-only file system is refused before the program runs (the marker it
/// would write is absent), exit 1 naming why.
#[test]
fn record_refuses_an_unwritable_output_before_running() {
    let fs = SmallFs::mount_with("size=1m,mode=0755,ro");
    let scratch = tempfile::tempdir().expect("scratch");
    let marker = scratch.path().join("ran");
    let run = |out_dir: &Path| {
        output_within(
            Command::new(env!("CARGO_BIN_EXE_fltrace"))
                .env_clear()
                .env("PATH", std::env::var_os("PATH").unwrap_or_default())
                .arg("record")
                .arg("-q")
                .arg("-o")
                .arg(out_dir)
                .args(["--", "touch"])
                .arg(&marker),
            Duration::from_secs(60),
        )
    };
    let out = run(fs.path());
    let err = stderr_of(&out);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(!marker.exists(), "the program ran: {err}");
    assert!(
        err.contains(&format!(
            "refusing to write {}: it is on a read-only file system",
            fs.path().display()
        )),
        "{err}"
    );
    // The same program recorded into a writable directory runs.
    let out = run(scratch.path());
    assert_eq!(out.status.code(), Some(0), "{}", stderr_of(&out));
    assert!(marker.exists());
}

/// A command run as another user (`--user nobody`) with the preloaded library in a directory
/// that user cannot search (mode 0700, as a home or `mktemp -d` is): the loader would skip the
/// library and the program run untraced (allocations) or unemulated (far memory). fltrace
/// refuses in one line naming the directory, before the command runs; with the library where
/// the user can read it, the same recording runs and traces the command's allocations.
#[test]
fn a_preloaded_library_the_user_cannot_read_is_refused_before_running() {
    let top = Dir::new();
    std::fs::set_permissions(top.path(), std::fs::Permissions::from_mode(0o1777)).expect("chmod");
    let private = top.path().join("private");
    std::fs::create_dir(&private).expect("dir");
    let library = private.join("libfltrace_preload.so");
    std::fs::copy(
        Path::new(env!("CARGO_BIN_EXE_fltrace")).with_file_name("libfltrace_preload.so"),
        &library,
    )
    .expect("copy of the library");
    std::fs::set_permissions(&library, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    let marker = top.path().join("ran");
    let run = |mode: u32| {
        std::fs::set_permissions(&private, std::fs::Permissions::from_mode(mode)).expect("chmod");
        output_within(
            Command::new(env!("CARGO_BIN_EXE_fltrace"))
                .current_dir(top.path())
                .env("FLTRACE_RUNTIME", &library)
                .args([
                    "record", "-q", "--allocs", "--user", "nobody", "--", "touch",
                ])
                .arg(&marker),
            Duration::from_secs(60),
        )
    };
    let out = run(0o700);
    let err = stderr_of(&out);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(!marker.exists(), "the program ran: {err}");
    assert_eq!(
        err,
        format!(
            "fltrace: the command runs as uid 65534, who cannot read fltrace's preloaded library {lib}: {dir} is mode 700, owned by uid 0, so the program would start without it; install fltrace where that user can read it, or point FLTRACE_RUNTIME at a copy of the library there\n",
            lib = library.display(),
            dir = private.canonicalize().expect("dir").display(),
        )
    );
    let out = run(0o755);
    assert_eq!(out.status.code(), Some(0), "{}", stderr_of(&out));
    assert!(marker.exists());
    assert_eq!(
        top.pids("allocs", "parquet").len(),
        1,
        "the command's allocations"
    );
}

/// The processes in process group `pgid` that are not zombies.
fn process_group_members(pgid: u32) -> Vec<u32> {
    let mut members = Vec::new();
    for entry in std::fs::read_dir("/proc").expect("/proc").flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|n| n.parse::<u32>().ok())
        else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(entry.path().join("stat")) else {
            continue;
        };
        // After the name: state, ppid, pgrp.
        let fields: Vec<&str> = stat
            .rsplit_once(')')
            .map(|(_, rest)| rest.split_ascii_whitespace().collect())
            .unwrap_or_default();
        if fields.len() > 2 && fields[0] != "Z" && fields[2] == pgid.to_string() {
            members.push(pid);
        }
    }
    members
}

fn comm(pid: u32) -> String {
    std::fs::read_to_string(format!("/proc/{pid}/comm"))
        .unwrap_or_default()
        .trim_end()
        .to_owned()
}

/// Each process of group `pgid` and each thread of `pid` with its state and where it waits,
/// for a test that found them still running.
fn where_they_wait(pgid: u32, pid: u32) -> String {
    let mut tasks: Vec<String> = process_group_members(pgid)
        .into_iter()
        .map(|member| format!("/proc/{member}"))
        .collect();
    if let Ok(threads) = std::fs::read_dir(format!("/proc/{pid}/task")) {
        tasks.extend(threads.flatten().map(|t| t.path().display().to_string()));
    }
    tasks
        .iter()
        .map(|task| {
            let read =
                |file: &str| std::fs::read_to_string(format!("{task}/{file}")).unwrap_or_default();
            let state = read("stat");
            let state = state
                .rsplit_once(')')
                .map_or("", |(_, rest)| rest.trim_start());
            format!(
                "{task} {} {} wchan {}\n{}",
                read("comm").trim_end(),
                state.split(' ').next().unwrap_or_default(),
                read("wchan"),
                read("stack")
            )
        })
        .collect()
}

/// The one child of `parent`, once it has one.
fn child_of(parent: u32) -> Option<u32> {
    let children =
        std::fs::read_to_string(format!("/proc/{parent}/task/{parent}/children")).ok()?;
    children.split_whitespace().next()?.parse().ok()
}

/// `fltrace record -- sh -c` of a shell with a background and a foreground job, once all three
/// processes run: fltrace and the shell's pid (its process group).
#[expect(
    clippy::zombie_processes,
    reason = "returned to the caller, which waits for it"
)]
fn record_a_shell_with_jobs(dir: &Dir) -> (std::process::Child, u32) {
    let mut fltrace = dir
        .fltrace()
        .args([
            "record",
            "-q",
            "--",
            "sh",
            "-c",
            "sleep 300 & sleep 300; wait",
        ])
        // Not a terminal's job even when the tests run in one: that case keeps the command
        // in fltrace's job.
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("fltrace starts");
    let started = std::time::Instant::now();
    loop {
        // Both jobs already `sleep`: a shell's child signalled between its fork and its exec
        // still has the shell's handler, and sleeps on after the signal it took.
        if let Some(sh) = child_of(fltrace.id())
            && let members = process_group_members(sh)
            && members.len() == 3
            && members.iter().filter(|&&pid| comm(pid) == "sleep").count() == 2
        {
            return (fltrace, sh);
        }
        if started.elapsed() > Duration::from_secs(30) {
            let _ = fltrace.kill();
            let _ = fltrace.wait();
            panic!("the command never ran its two jobs");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Waits up to `limit` for no process of group `pgid` to be left.
fn assert_process_group_ends(pgid: u32, limit: Duration, what: &str) {
    let started = std::time::Instant::now();
    while !process_group_members(pgid).is_empty() {
        if started.elapsed() > limit {
            let left = process_group_members(pgid);
            for &pid in &left {
                // SAFETY: killing what the test started, so it does not outlive the test.
                unsafe { libc::kill(pid as i32, libc::SIGKILL) };
            }
            panic!("{what}: processes {left:?} of the command still run after {limit:?}");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// SIGHUP, SIGINT, SIGTERM and SIGQUIT to `fltrace record` alike: passed on (as SIGINT) to
/// every process of the command, which ends within seconds (its background job too, which a
/// shell makes ignore SIGINT), and the recording is finished and kept.
#[test]
fn interrupts_end_the_whole_command_and_keep_the_recording() {
    use std::io::Read;
    for (signal, name) in [
        (libc::SIGHUP, "SIGHUP"),
        (libc::SIGINT, "SIGINT"),
        (libc::SIGTERM, "SIGTERM"),
        (libc::SIGQUIT, "SIGQUIT"),
    ] {
        let dir = Dir::new();
        let (mut fltrace, sh) = record_a_shell_with_jobs(&dir);
        // SAFETY: signalling the fltrace this test started.
        unsafe { libc::kill(fltrace.id() as i32, signal) };
        let started = std::time::Instant::now();
        let status = loop {
            if let Some(status) = fltrace.try_wait().expect("wait") {
                break status;
            }
            if started.elapsed() > Duration::from_secs(30) {
                let waits = where_they_wait(sh, fltrace.id());
                let _ = fltrace.kill();
                let _ = fltrace.wait();
                let mut err = String::new();
                if let Some(mut stderr) = fltrace.stderr.take() {
                    let _ = stderr.read_to_string(&mut err);
                }
                assert_process_group_ends(sh, Duration::ZERO, name);
                panic!("{name}: fltrace still running after 30 s; it said: {err}\n{waits}");
            }
            std::thread::sleep(Duration::from_millis(50));
        };
        let mut err = String::new();
        let _ = fltrace
            .stderr
            .take()
            .expect("stderr")
            .read_to_string(&mut err);
        assert_process_group_ends(sh, Duration::from_secs(5), name);
        assert_eq!(status.code(), Some(128 + libc::SIGINT), "{name}: {err}");
        assert!(
            err.contains(
                "fltrace: interrupted; the command was killed by signal 2; the recording is complete"
            ),
            "{name}: {err}"
        );
        // The recording is whole: finished tables, the shell's faults in them.
        let report = dir.report_json(&[]);
        assert!(
            report["faults"].as_u64().unwrap_or(0) > 0,
            "{name}: {report}"
        );
        let out = dir.run(&["report"]);
        assert!(
            !stderr_of(&out).contains("incomplete"),
            "{name}: {}",
            stderr_of(&out)
        );
    }
}

/// SIGKILL of `fltrace record`: the command's processes all die with it, not only the first
/// (the shell's background and foreground jobs too).
#[test]
fn killed_recorder_leaves_no_process_of_the_command() {
    let dir = Dir::new();
    let (mut fltrace, sh) = record_a_shell_with_jobs(&dir);
    fltrace.kill().expect("SIGKILL");
    let _ = fltrace.wait();
    assert_process_group_ends(sh, Duration::from_secs(10), "SIGKILL");
}

/// Under -L, `main` leaving through `pthread_exit` while a worker faults 64 MiB: the process
/// ends with its worker, status 0, every page's fault at its line (it ran on for ever: the
/// runtime's handler threads kept it alive once the program's threads were gone). The handler
/// that starts the thread ending the process must not allocate from the region: with a pool
/// per size class, `pthread_create`'s `calloc` read a free list on a page the limit had
/// evicted, and the handler waited on itself.
#[test]
fn far_memory_program_whose_main_calls_pthread_exit_ends() {
    let dir = Dir::new();
    let out = output_within(
        dir.fltrace()
            .args(["record", "-q", "-L=16", "-M=256", "--"])
            .arg(hardening())
            .args(["mainexit", "64"]),
        Duration::from_secs(120),
    );
    assert_eq!(out.status.code(), Some(0), "{}", stderr_of(&out));
    let report = dir.report_json(&["--by", "line"]);
    assert_eq!(
        count_at(
            &report,
            "hardening.c",
            site("hardening.c", "mainexit_touch")
        ),
        16384
    );
}

/// The log a hostile program could write for itself: a stack defined under id 2^32 - 16
/// and used, then more distinct 128-frame stacks than the 2^24 frames kept (131,072 fit), the
/// first of them used and the last one used. Returns the log's bytes.
fn hostile_allocation_log(pid: u32, stacks: u32) -> Vec<u8> {
    use fltrace_runtime_abi::alloclog::{
        CHUNK_HEADER_SIZE, CHUNK_SIZE, CallRecord, Cursor, HEADER_SIZE, MAGIC, MAX_FRAMES,
        MAX_RECORD, call,
    };
    let record_space = CHUNK_SIZE - CHUNK_HEADER_SIZE;
    let mut chunks: Vec<Vec<u8>> = Vec::new();
    let mut chunk = vec![0u8; record_space + 64];
    let mut pos = 0;
    let mut cursor = Cursor::default();
    let mut room = |chunk: &mut Vec<u8>, pos: &mut usize, cursor: &mut Cursor| {
        if *pos > 0 && *pos + MAX_RECORD > record_space {
            chunk.truncate(*pos);
            chunks.push(std::mem::replace(chunk, vec![0u8; record_space + 64]));
            *pos = 0;
        }
        if *pos == 0 {
            *cursor = Cursor::default();
            cursor.put_time(chunk, pos, 1_000_000);
        }
    };
    let frames = |i: u64| -> Vec<u64> {
        (0..MAX_FRAMES as u64)
            .map(|j| 0x5555_0000_0000 + i * 4096 + j * 8)
            .collect()
    };
    let malloc = |stack_id: u32, n: u64| CallRecord {
        call: call::MALLOC,
        addr: 0x1000_0000 + n * 64,
        size: 64,
        stack_id,
        ..CallRecord::default()
    };
    let huge = u32::MAX - 16;
    room(&mut chunk, &mut pos, &mut cursor);
    cursor.put_stack(&mut chunk, &mut pos, huge, &frames(u64::from(stacks)));
    cursor.put_call(&mut chunk, &mut pos, &malloc(huge, 0));
    for id in 0..stacks {
        room(&mut chunk, &mut pos, &mut cursor);
        cursor.put_stack(&mut chunk, &mut pos, id, &frames(u64::from(id)));
        if id == 0 || id == stacks - 1 {
            cursor.put_call(&mut chunk, &mut pos, &malloc(id, u64::from(id) + 1));
        }
    }
    chunk.truncate(pos);
    chunks.push(chunk);
    let mut log = vec![0u8; HEADER_SIZE + chunks.len() * CHUNK_SIZE];
    let word = |log: &mut Vec<u8>, offset: usize, value: u64| {
        log[offset..offset + 8].copy_from_slice(&value.to_ne_bytes());
    };
    word(&mut log, 0, MAGIC);
    word(&mut log, 8, u64::from(pid));
    let taken = log.len() as u64;
    word(&mut log, 16, taken);
    for (i, records) in chunks.iter().enumerate() {
        let start = HEADER_SIZE + i * CHUNK_SIZE;
        word(&mut log, start, u64::from(pid));
        word(&mut log, start + 8, records.len() as u64);
        log[start + CHUNK_HEADER_SIZE..start + CHUNK_HEADER_SIZE + records.len()]
            .copy_from_slice(records);
    }
    log
}

/// A hostile allocation log in a killed recorder's spool is converted by the next recorder
/// under a 1 GiB address-space cap (its stack id near 2^32 once sized a table of 16 GiB): the
/// calls are kept, the stacks past the cap refused, and the count of refused definitions is
/// said in the warning and in the process's stats.
#[test]
fn hostile_allocation_log_converts_in_bounded_memory() {
    let dir = Dir::new();
    dir.record(&[&workloads().faults], &["nested", "10"]);
    let pid = dir.pids("faults", "parquet")[0];
    let recording = fltrace_trace::read_origin(&files::faults(dir.path(), pid))
        .expect("origin")
        .expect("a recording id")
        .recording;
    // As a killed recorder leaves it: no checksums.
    std::fs::remove_file(fltrace_trace::checksums::path(dir.path(), pid)).expect("checksums");
    let dead = Command::new("true").spawn().expect("true");
    let dead_pid = dead.id();
    let mut dead = dead;
    dead.wait().expect("wait");
    let spool = dir.path().join(format!(".fltrace-allocs-{dead_pid}-1"));
    std::fs::create_dir(&spool).expect("spool");
    std::fs::write(
        spool.join("recording"),
        format!("recording {recording}\nmono_offset 0\n"),
    )
    .expect("metadata");
    // 131,072 stacks of 128 frames fit in the 2^24 frames kept: 100 + 1 refused.
    let stacks = 131_072 + 100;
    std::fs::write(
        spool.join(format!("log-{pid}.0")),
        hostile_allocation_log(pid, stacks),
    )
    .expect("log");

    let out = Command::new("prlimit")
        .arg(format!("--as={}", 1u64 << 30))
        .arg(env!("CARGO_BIN_EXE_fltrace"))
        .args(["record", "--", "true"])
        .current_dir(dir.path())
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .output()
        .expect("prlimit runs");
    let err = stderr_of(&out);
    assert!(out.status.success(), "{err}");
    assert!(
        err.contains(&format!(
            "recovered 3 allocations of process {pid} from the spool of a killed recorder; 101 stack definitions refused"
        )),
        "{err}"
    );
    assert_eq!(
        fltrace_trace::stats::last_value(&files::stats(dir.path(), pid), "alloc_stacks_refused")
            .expect("stats"),
        Some(101)
    );
    let events = fltrace_trace::read_allocs(&files::allocs(dir.path(), pid)).expect("allocs");
    let stack_ids: Vec<u32> = events.iter().map(|e| e.stack_id).collect();
    // The huge id's stack came first (0), local id 0's next (1); the last one was refused.
    assert_eq!(
        stack_ids,
        [0, 1, fltrace_trace::AllocEvent::NO_STACK],
        "{events:?}"
    );
    let stacks_kept =
        fltrace_trace::read_stacks(&files::alloc_stacks(dir.path(), pid)).expect("stacks");
    assert_eq!(stacks_kept.len(), 131_072);
}

/// A traced program that makes its allocation log claim 1 GiB of chunks over a sparse file and
/// says its tracer stopped (as on a full file system, where the recorder copies the log into
/// memory to remove its file): the recorder copies only the extents with data, and its peak
/// stays far below the gigabyte it once copied.
#[test]
fn planted_stopped_log_is_copied_by_its_data() {
    let dir = Dir::new();
    let program = build_c_workload(dir.path(), "hostilelog.c");
    let out = output_within(
        dir.fltrace()
            .args(["record", "--allocs", "--"])
            .arg(&program)
            .arg("1"),
        Duration::from_secs(120),
    );
    let err = stderr_of(&out);
    assert!(out.status.success(), "{err}");
    assert!(
        String::from_utf8_lossy(&out.stdout).starts_with("planted "),
        "{err}"
    );
    assert!(err.contains("an allocation log could not grow"), "{err}");
    let peak_mb: u64 = err
        .lines()
        .find_map(|l| {
            l.split_once("recorder peak ")?
                .1
                .split_once(" MiB")?
                .0
                .parse()
                .ok()
        })
        .unwrap_or_else(|| panic!("no recorder peak: {err}"));
    assert!(peak_mb < 256, "recorder peak {peak_mb} MiB: {err}");
}
