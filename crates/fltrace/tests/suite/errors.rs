//! Bad input gets one clear line and a non-zero exit.

use super::util::*;

fn stderr_of(out: &std::process::Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// A command that does not exist.
#[test]
fn missing_command() {
    let dir = Dir::new();
    let out = dir.run(&["record", "--", "fltrace-no-such-command"]);
    assert_eq!(out.status.code(), Some(1));
    let err = stderr_of(&out);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(
        err.contains("cannot run `fltrace-no-such-command`") && err.contains("No such file"),
        "{err}"
    );
}

/// A file that is not executable.
#[test]
fn unrunnable_command() {
    let dir = Dir::new();
    let script = dir.path().join("not-executable");
    std::fs::write(&script, "#!/bin/sh\n").expect("write");
    let out = dir.run(&["record", "--", script.to_str().expect("utf-8")]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr_of(&out).contains("Permission denied"),
        "{}",
        stderr_of(&out)
    );
}

/// Bad option values.
#[test]
fn bad_option_values() {
    let dir = Dir::new();
    for (args, needle) in [
        (
            &["record", "-L=abc", "-M=10", "--", "true"][..],
            "not a whole number",
        ),
        (&["record", "-L=0", "-M=10", "--", "true"][..], "positive"),
        (
            &["record", "-L=100", "-M=10", "--", "true"][..],
            "must not exceed",
        ),
        (&["record", "-L=100", "--", "true"][..], "go together"),
        (&["record"][..], "no command given"),
        (&["report", "--time", "5..1"][..], "ends before it starts"),
    ] {
        let out = dir.run(args);
        assert_ne!(out.status.code(), Some(0), "{args:?} succeeded");
        assert!(
            stderr_of(&out).contains(needle),
            "{args:?}: {}",
            stderr_of(&out)
        );
    }
}

/// report in a directory without a recording.
#[test]
fn report_without_recording() {
    let dir = Dir::new();
    let out = dir.run(&["report"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr_of(&out).contains("no fltrace recording"),
        "{}",
        stderr_of(&out)
    );
}

/// The traced command's exit status is fltrace's.
#[test]
fn exit_status_is_passed_on() {
    let dir = Dir::new();
    let out = dir.run(&["record", "-q", "--", "sh", "-c", "exit 7"]);
    assert_eq!(out.status.code(), Some(7));
}

/// `heatmap --from` without its input names the file it looked for and the command that
/// writes it, once, in one line. (`--from access` sent the user to `fltrace wss` for a `.csv`
/// that `record --access-samples` writes as Parquet; `--from damon` gave its hint twice.)
#[test]
fn heatmap_from_without_input_names_its_recorder() {
    let dir = Dir::new();
    for (from, file, hint) in [
        (
            "access",
            "fltrace-data-access-<pid>.parquet",
            "`fltrace record --access-samples`",
        ),
        (
            "damon",
            "fltrace-data-damon-<pid>.csv",
            "`fltrace wss --damon`",
        ),
        ("wss", "fltrace-data-wss-<pid>.csv", "`fltrace wss`"),
    ] {
        let out = dir.run(&["heatmap", "--from", from]);
        assert_eq!(out.status.code(), Some(1), "--from {from}");
        let err = stderr_of(&out);
        assert_eq!(err.lines().count(), 1, "{err}");
        assert!(err.contains(file), "{err}");
        assert_eq!(err.matches(hint).count(), 1, "{err}");
        assert_eq!(err.matches("first").count(), 1, "{err}");
    }
}

/// Every bad `--time` window is refused on one line naming the flag, before the recording is
/// read: beyond the nanoseconds a u64 holds (`1e20..` overflowed the window's start, a panic),
/// negative, not finite, out of order, not a range. A `--interval` past them too.
#[test]
fn bad_time_windows_are_refused_naming_the_flag() {
    let dir = Dir::new();
    dir.record(&[&workloads().faults], &["nested", "10"]);
    for (window, needle) in [
        (
            "1e300..",
            "`1e300` seconds is out of range (at most 18446744074, 584 years)",
        ),
        ("1e20..", "`1e20` seconds is out of range"),
        ("1.9e10..2e10", "`1.9e10` seconds is out of range"),
        ("..1e300", "`1e300` seconds is out of range"),
        ("1..1e11", "`1e11` seconds is out of range"),
        ("-1..2", "`-1` is not a number of seconds"),
        ("nan..1", "`nan` is not a number of seconds"),
        ("1..inf", "`inf` is not a number of seconds"),
        ("5..1", "the range 5..1 ends before it starts"),
        ("1.5", "`1.5` is not a range such as 1.5..3"),
    ] {
        let arg = format!("--time={window}");
        let out = dir.run(&["report", &arg]);
        let err = stderr_of(&out);
        assert_eq!(out.status.code(), Some(2), "{window}: {err}");
        let line = format!("error: invalid value '{window}' for '--time <START..END>': {needle}");
        assert_eq!(
            err.lines().filter(|l| l.starts_with("error")).count(),
            1,
            "{window}: {err}"
        );
        assert!(err.starts_with(&line), "{window}: {err}");
        assert!(!err.contains("panicked"), "{window}: {err}");
    }
    let out = dir.run(&["wss", "--interval", "99999999999999999999m", "--", "true"]);
    let err = stderr_of(&out);
    assert!(
        err.starts_with(
            "error: invalid value '99999999999999999999m' for '--interval <DURATION>': `99999999999999999999m` is out of range"
        ),
        "{err}"
    );
}
