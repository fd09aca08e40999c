//! The clocks of every tool: CLOCK_MONOTONIC (the clock of perf samples, BPF's
//! `bpf_ktime_get_ns` and memleak's ages), Unix time, and the one wall-clock form printed,
//! `HH:MM:SS` in local time as bcc's tools print it (oomkill, vmscan, swapin, memleak's
//! reports, triage's OOM kills).

/// CLOCK_MONOTONIC in ns: capture's reader, the clock of its perf samples too.
pub fn monotonic_ns() -> u64 {
    fltrace_capture::monotonic_now_ns()
}

/// Unix time in ns.
pub fn realtime_ns() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64)
}

/// Unix time minus monotonic time, in ns: a monotonic time plus it is a Unix time.
pub fn wall_offset_ns() -> i128 {
    let (mono, wall) = (monotonic_ns(), realtime_ns());
    i128::from(wall) - i128::from(mono)
}

/// `HH:MM:SS` of a Unix time in ns, in local time.
pub fn local_time(unix_ns: i128) -> String {
    let secs = (unix_ns / 1_000_000_000) as libc::time_t;
    // SAFETY: an all-zero tm is a valid value to be overwritten.
    let mut tm: libc::tm = unsafe { std::mem::zeroed() };
    // SAFETY: valid pointers to a time_t and a tm.
    if unsafe { libc::localtime_r(&secs, &mut tm) }.is_null() {
        return "??:??:??".to_owned();
    }
    format!("{:02}:{:02}:{:02}", tm.tm_hour, tm.tm_min, tm.tm_sec)
}

/// `HH:MM:SS` now, in local time.
pub fn local_time_now() -> String {
    local_time(i128::from(realtime_ns()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn local_time_keeps_the_seconds() {
        // Local time: the hour and minute move with the zone, the seconds do not.
        let clock = local_time((3600 * 25 + 61) * 1_000_000_000);
        assert!(clock.len() == 8 && clock.ends_with(":01"), "{clock}");
    }
}
