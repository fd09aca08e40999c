//! What `triage` prints: one section per question, then what to run next.

use std::io::{self, Write};

use super::Triage;
use super::reclaim::Reclaim;
use crate::bpf::Frame;
use crate::output::{stack_table_full_note, table_full_note};

/// Triage's reclaim section: vmstat's reclaim counters, PSI, cgroups at their limit.
fn write_reclaim(out: &mut impl Write, reclaim: &Reclaim, secs: f64) -> io::Result<()> {
    writeln!(
        out,
        "== Reclaim (/proc/vmstat, /proc/pressure/memory, memory cgroups)"
    )?;
    let p = &reclaim.pages;
    writeln!(
        out,
        "  {} pages scanned, {} freed during {secs:.1} s; scanned by kswapd {}, in direct reclaim {}",
        p.scanned, p.stolen, p.scanned_kswapd, p.scanned_direct
    )?;
    match (&reclaim.pressure, &reclaim.pressure_error) {
        (Some(psi), _) => writeln!(
            out,
            "  pressure: some tasks stalled {:.1} ms, all {:.1} ms; avg10 some {:.2}%, full {:.2}%",
            psi.some_us as f64 / 1000.0,
            psi.full_us as f64 / 1000.0,
            psi.some_avg10,
            psi.full_avg10
        )?,
        (None, Some(e)) => writeln!(out, "  pressure: unavailable: {e}")?,
        (None, None) => writeln!(out, "  pressure: unavailable")?,
    }
    if reclaim.groups.is_empty() {
        writeln!(out, "  no memory cgroup at its limit")?;
    }
    for g in &reclaim.groups {
        let high = if g.high_hits > 0 {
            format!(", over its high mark {} times", g.high_hits)
        } else {
            String::new()
        };
        writeln!(
            out,
            "  at its limit: memory cgroup {}  {} of {} KiB, met it {} times{high}",
            g.name,
            g.usage / 1024,
            g.limit / 1024,
            g.limit_hits
        )?;
    }
    Ok(())
}

/// Writes the triage report: one section per question, then what to run next.
pub fn write_triage(out: &mut impl Write, report: &Triage) -> io::Result<()> {
    let secs = report.duration.as_secs_f64().max(1e-9);

    writeln!(out, "== OOM kills (kernel log)")?;
    match (&report.kmsg_error, report.oom_kills.is_empty()) {
        (Some(e), _) => writeln!(out, "  cannot read the kernel log: {e}")?,
        (None, true) => writeln!(out, "  none")?,
        (None, false) => {
            const SHOWN: usize = 5;
            let kills = &report.oom_kills;
            if kills.len() > SHOWN {
                writeln!(out, "  {} kills; the last {SHOWN}:", kills.len())?;
            }
            for line in &kills[kills.len().saturating_sub(SHOWN)..] {
                writeln!(out, "  {line}")?;
            }
        }
    }
    writeln!(out, "== Swap")?;
    if report.swaps.is_empty() {
        writeln!(out, "  no swap devices configured")?;
    }
    for s in &report.swaps {
        writeln!(
            out,
            "  {}  {} KiB, {} KiB used",
            s.name, s.size_kib, s.used_kib
        )?;
    }
    writeln!(
        out,
        "  swapped in {} pages, out {} pages during {:.1} s",
        report.swap_in_pages, report.swap_out_pages, secs
    )?;
    write_reclaim(out, &report.reclaim, secs)?;
    writeln!(out, "== Memory (/proc/meminfo)")?;
    for (key, kib) in &report.meminfo {
        writeln!(out, "  {key:<16} {kib:>12} kB")?;
    }
    writeln!(out, "== Top processes by RSS")?;
    for p in &report.top_rss {
        writeln!(out, "  {:>8} KiB  {:<16} pid {}", p.rss_kib, p.comm, p.pid)?;
    }
    writeln!(out, "== Page faults")?;
    writeln!(
        out,
        "  {} faults in {:.1} s: {:.0} faults/s",
        report.faults,
        secs,
        report.faults as f64 / secs
    )?;
    writeln!(out, "== Top faulting processes")?;
    for p in &report.top_faulting {
        writeln!(out, "  {:>10}  {:<16} pid {}", p.faults, p.comm, p.pid)?;
        for (count, stack) in &p.stacks {
            let top: Vec<String> = stack
                .iter()
                .take(super::STACK_FRAMES_SHOWN)
                .map(Frame::describe)
                .collect();
            let shown = if top.is_empty() {
                "[no user stack]".to_owned()
            } else {
                top.join(" <- ")
            };
            writeln!(out, "  {count:>14}  {shown}")?;
        }
    }
    writeln!(out, "== Files backing faults")?;
    if report.file_faults.is_empty() {
        writeln!(out, "  none")?;
    }
    for f in &report.file_faults {
        writeln!(out, "  {:>10}  {}", f.count, f.file)?;
    }
    writeln!(out, "== brk and mmap calls")?;
    if report.heap_calls.is_empty() {
        writeln!(out, "  none")?;
    }
    for (call, comm, n) in &report.heap_calls {
        writeln!(
            out,
            "  {:>10}  {:<5} {comm}  ({:.1}/s)",
            n,
            call,
            *n as f64 / secs
        )?;
    }
    writeln!(out, "== PMU")?;
    match &report.pmu_missing {
        None => writeln!(out, "  available: hardware events open")?,
        Some(e) => writeln!(out, "  unavailable: {e}")?,
    }
    // Like every tool's table, the counts end with what was not counted exactly, and why.
    if report.lost() > 0 {
        let why: Vec<String> = [
            table_full_note(report.dropped),
            stack_table_full_note(report.stacks_lost),
        ]
        .iter()
        .filter(|n| !n.is_empty())
        .map(|n| {
            n.trim()
                .trim_start_matches('(')
                .trim_end_matches(')')
                .to_owned()
        })
        .collect();
        writeln!(
            out,
            "  {} events seen, {} lost: {}",
            report.seen,
            report.lost(),
            why.join("; ")
        )?;
    }
    writeln!(out, "== Next")?;
    for (finding, command) in &report.findings {
        writeln!(out, "  {finding}\n      -> {command}")?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Triage's counts end with what was not counted exactly, and why; nothing when exact.
    #[test]
    fn triage_counts_end_with_their_loss() {
        let mut report = Triage {
            seen: 100,
            dropped: 5,
            stacks_lost: 2,
            ..Triage::default()
        };
        let text = |report: &Triage| {
            let mut out = Vec::new();
            write_triage(&mut out, report).expect("writes");
            String::from_utf8(out).expect("utf-8")
        };
        let lossy = text(&report);
        let before_next = lossy
            .lines()
            .take_while(|l| !l.starts_with("== Next"))
            .last()
            .expect("a line");
        assert_eq!(
            before_next,
            "  100 events seen, 7 lost: 5 not counted: the table was full; 2 user stacks not \
             kept: the stack table was full; counted as [no stack]"
        );
        report.dropped = 0;
        report.stacks_lost = 0;
        assert!(!text(&report).contains(" lost: "));
    }
}
