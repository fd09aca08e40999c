//! The command `record` starts is never left behind when recording ends early: a set-up step
//! that fails after the fork, or a panic in the event loop, kills and reaps it. Both run in
//! this test binary of their own, one at a time, so that every child of the process is
//! theirs.

use std::sync::Mutex;
use std::sync::atomic::AtomicUsize;

use fltrace_capture::{Options, Target, record};

/// Serialises the tests: each counts the children of the whole process.
static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

/// This process's children, running or zombie: (pid, state letter).
fn children() -> Vec<(u32, char)> {
    let me = std::process::id();
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").expect("/proc").flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|n| n.parse::<u32>().ok())
        else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
            continue;
        };
        // "pid (comm) state ppid ...": the command name may hold spaces and parentheses.
        let Some((_, after)) = stat.rsplit_once(')') else {
            continue;
        };
        let mut fields = after.split_whitespace();
        let state = fields.next().and_then(|s| s.chars().next()).unwrap_or('?');
        if fields.next().and_then(|p| p.parse::<u32>().ok()) == Some(me) {
            found.push((pid, state));
        }
    }
    found
}

fn sleep_command() -> Target {
    Target::Command(vec!["sleep".into(), "30".into()])
}

/// A ring buffer no machine can map fails the set-up after the command was forked (the events
/// are opened on its pid): the error is returned and the child is gone, not a zombie.
#[test]
fn set_up_failing_after_the_fork_leaves_no_child() {
    let _serial = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    assert_eq!(children(), vec![], "children before the test");
    let dir = tempfile::tempdir().expect("temporary directory");
    let mut options = Options::new(dir.path().to_owned());
    options.buffer_mb = 1 << 20;
    let error = record(&sleep_command(), &options, &AtomicUsize::new(0), |_| {})
        .expect_err("a 1 TiB ring buffer per CPU cannot be mapped");
    let message = fltrace_trace::error_chain(&error);
    assert!(
        message.contains("mapping the perf ring buffer"),
        "failed after the fork, mapping the ring: {message}"
    );
    assert_eq!(children(), vec![], "the forked child was killed and reaped");
}

/// A panic in the event loop (here the caller's progress callback) unwinds through `record`:
/// the running command is killed and reaped on the way, not left running untraced.
#[test]
fn a_panic_while_recording_kills_and_reaps_the_command() {
    let _serial = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    assert_eq!(children(), vec![], "children before the test");
    let dir = tempfile::tempdir().expect("temporary directory");
    let options = Options::new(dir.path().to_owned());
    let mut command_pid = None;
    let unwound = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        record(&sleep_command(), &options, &AtomicUsize::new(0), |_| {
            // The command runs (sleep 30): note it, then fail.
            command_pid = children().first().map(|&(pid, _)| pid);
            panic!("progress callback fails");
        })
    }));
    assert!(unwound.is_err(), "the panic reached the caller");
    let pid = command_pid.expect("the command was running when the callback ran");
    assert_eq!(
        children(),
        vec![],
        "the command {pid} was killed and reaped"
    );
    assert!(
        !std::path::Path::new(&format!("/proc/{pid}")).exists(),
        "process {pid} no longer exists"
    );
}
