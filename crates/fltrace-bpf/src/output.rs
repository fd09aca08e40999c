//! The in-kernel tools' output (`count`, `faults`, `ffaults`, `memleak`, `triage`): tables as
//! bcc's tools print them, CSV, JSON, and folded stacks for flamegraph tools.
//!
//! [`Format`] is shared with fltrace-system's event tools, which print through their own
//! `Printer` (one JSON object per line) rather than these whole-report writers.

use std::io::{self, Write};

use serde_json::json;

use crate::files::FileFaults;
use crate::memleak::{LeakSnapshot, LeakTarget};
use crate::triage::Triage;
use crate::{Frame, Row};

/// How rows are printed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// Fixed-width columns under a header, as bcc's tools print.
    Table,
    /// A header of column keys, then comma-separated values.
    Csv,
    /// JSON (one object per row for the event tools, one document for the counting tools).
    Json,
}

/// A stack in one CSV cell: its frames, innermost first, separated by `;`.
fn stack_cell(frames: &[Frame]) -> String {
    frames
        .iter()
        .map(Frame::describe)
        .collect::<Vec<_>>()
        .join(";")
}

fn frames_json(frames: &Option<Vec<Frame>>) -> serde_json::Value {
    match frames {
        Some(f) => json!(f.iter().map(Frame::describe).collect::<Vec<_>>()),
        None => serde_json::Value::Null,
    }
}

/// A counted row as a folded line: `comm;outer;...;inner count`, kernel frames marked `_[k]`.
pub fn folded_line(row: &Row) -> String {
    let mut parts: Vec<String> = Vec::new();
    if let Some(comm) = &row.comm {
        parts.push(comm.clone());
    }
    if let Some(u) = &row.ustack {
        parts.extend(u.iter().rev().map(|f| f.function.clone()));
    }
    if let Some(k) = &row.kstack {
        parts.extend(k.iter().rev().map(|f| format!("{}_[k]", f.function)));
    }
    if parts.is_empty() {
        parts.push("all".into());
    }
    format!("{} {}", parts.join(";"), row.count)
}

/// Writes counted rows in `format`, or as folded lines when `folded`.
/// Writes the rows; a JSON array ends with `footer` (what was lost or sampled), if any.
pub fn write_rows(
    out: &mut impl Write,
    rows: &[Row],
    format: Format,
    folded: bool,
    footer: Option<serde_json::Value>,
) -> io::Result<()> {
    if folded {
        for row in rows {
            writeln!(out, "{}", folded_line(row))?;
        }
        return Ok(());
    }
    match format {
        Format::Json => {
            let mut rows: Vec<serde_json::Value> = rows
                .iter()
                .map(|r| {
                    json!({
                        "count": r.count,
                        "pid": r.pid,
                        "tid": r.tid,
                        "comm": r.comm,
                        "probe": r.probe,
                        "field": r.field,
                        "ustack": frames_json(&r.ustack),
                        "kstack": frames_json(&r.kstack),
                    })
                })
                .collect();
            rows.extend(footer);
            serde_json::to_writer_pretty(&mut *out, &rows)?;
            writeln!(out)?;
        }
        Format::Csv => {
            let mut csv = csv::Writer::from_writer(&mut *out);
            csv.write_record([
                "count", "pid", "tid", "comm", "probe", "field", "ustack", "kstack",
            ])?;
            let text = |v: Option<String>| v.unwrap_or_default();
            for r in rows {
                csv.write_record([
                    r.count.to_string(),
                    text(r.pid.map(|p| p.to_string())),
                    text(r.tid.map(|p| p.to_string())),
                    text(r.comm.clone()),
                    text(r.probe.clone()),
                    text(r.field.map(|p| p.to_string())),
                    text(r.ustack.as_deref().map(stack_cell)),
                    text(r.kstack.as_deref().map(stack_cell)),
                ])?;
            }
            csv.flush()?;
        }
        Format::Table => {
            for r in rows {
                let mut head = format!("{:>10}", r.count);
                for (label, value) in [
                    ("", r.probe.clone()),
                    ("", r.comm.clone()),
                    ("pid ", r.pid.map(|p| p.to_string())),
                    ("tid ", r.tid.map(|p| p.to_string())),
                    ("", r.field.map(|f| f.to_string())),
                ] {
                    if let Some(v) = value {
                        head.push_str(&format!("  {label}{v}"));
                    }
                }
                writeln!(out, "{head}")?;
                for stack in [&r.kstack, &r.ustack].into_iter().flatten() {
                    if stack.is_empty() {
                        writeln!(out, "            [no stack]")?;
                    }
                    for f in stack {
                        writeln!(out, "            {}", f.describe())?;
                    }
                }
            }
        }
    }
    Ok(())
}

/// The end of a summary line when the kernel's table overflowed (empty when it did not).
pub fn table_full_note(dropped: u64) -> String {
    if dropped > 0 {
        format!(" ({dropped} not counted: the table was full)")
    } else {
        String::new()
    }
}

/// The end of a summary line when user stacks found their table full (empty when none did).
pub fn stack_table_full_note(lost: u64) -> String {
    if lost > 0 {
        format!(" ({lost} user stacks not kept: the stack table was full; counted as [no stack])")
    } else {
        String::new()
    }
}

/// The end of a summary line when the sample ring overflowed (empty when it did not).
pub fn ring_full_note(lost: u64) -> String {
    if lost > 0 {
        format!(
            " ({lost} samples lost: the ring was full; fewer processes or --by without ustack lose none)"
        )
    } else {
        String::new()
    }
}

/// Writes faults by file (`ffaults`).
pub fn write_file_faults(
    out: &mut impl Write,
    files: &[FileFaults],
    format: Format,
) -> io::Result<()> {
    match format {
        Format::Json => {
            let rows: Vec<_> = files
                .iter()
                .map(|f| json!({"file": f.file, "comm": f.comm, "count": f.count}))
                .collect();
            serde_json::to_writer_pretty(&mut *out, &rows)?;
            writeln!(out)?;
        }
        Format::Csv => {
            let mut csv = csv::Writer::from_writer(&mut *out);
            csv.write_record(["count", "comm", "file"])?;
            for f in files {
                let count = f.count.to_string();
                csv.write_record([&count, f.comm.as_deref().unwrap_or(""), &f.file])?;
            }
            csv.flush()?;
        }
        Format::Table => {
            writeln!(out, "{:>10}  FILE", "FAULTS")?;
            for f in files {
                match &f.comm {
                    Some(c) => writeln!(out, "{:>10}  {}  {c}", f.count, f.file)?,
                    None => writeln!(out, "{:>10}  {}", f.count, f.file)?,
                }
            }
        }
    }
    Ok(())
}

/// What memleak is attached to, for its first line.
pub fn describe_leak_target(target: &LeakTarget, tgids: &[u32]) -> String {
    match target {
        LeakTarget::Kernel => "the kernel's allocations (kmalloc, kmem_cache, pages)".to_owned(),
        target => format!(
            "the C library allocator of {tgids:?} ({})",
            if matches!(target, LeakTarget::Attached) {
                "stacks unwound from DWARF"
            } else {
                "stacks follow frame pointers"
            }
        ),
    }
}

/// Writes one memleak report; a table is headed by the time of day (`clock`, HH:MM:SS).
pub fn write_leaks(
    out: &mut impl Write,
    snapshot: &LeakSnapshot,
    format: Format,
    folded: bool,
    clock: &str,
) -> io::Result<()> {
    if folded {
        for s in &snapshot.stacks {
            let mut parts = vec![s.comm.clone()];
            parts.extend(s.stack.iter().rev().map(|f| f.function.clone()));
            writeln!(out, "{} {}", parts.join(";"), s.bytes)?;
        }
        return Ok(());
    }
    match format {
        Format::Json => {
            let stacks: Vec<_> = snapshot
                .stacks
                .iter()
                .map(|s| {
                    let mut stack = json!({
                        "pid": s.pid,
                        "comm": s.comm,
                        "bytes": s.bytes,
                        "allocations": s.allocations,
                        "stack": s.stack.iter().map(Frame::describe).collect::<Vec<_>>(),
                    });
                    if !s.addresses.is_empty() {
                        stack["blocks"] = s
                            .addresses
                            .iter()
                            .map(|&(addr, size)| json!({"addr": addr, "size": size}))
                            .collect();
                    }
                    stack
                })
                .collect();
            let mut report = json!({
                "allocs": snapshot.allocs,
                "frees": snapshot.frees,
                "dropped": snapshot.dropped,
                "seen": snapshot.allocs,
                "lost": snapshot.dropped,
                "why": if snapshot.dropped > 0 { snapshot.why } else { "" },
                "stacks": stacks,
            });
            if snapshot.sampled > 1 {
                report["sampled"] = snapshot.sampled.into();
            }
            if snapshot.behind {
                report["behind"] = true.into();
            }
            serde_json::to_writer(&mut *out, &report)?;
            writeln!(out)?;
        }
        Format::Csv => {
            let mut csv = csv::Writer::from_writer(&mut *out);
            csv.write_record(["bytes", "allocations", "pid", "comm", "stack"])?;
            for s in &snapshot.stacks {
                csv.write_record([
                    s.bytes.to_string(),
                    s.allocations.to_string(),
                    s.pid.map(|p| p.to_string()).unwrap_or_default(),
                    s.comm.clone(),
                    stack_cell(&s.stack),
                ])?;
            }
            csv.flush()?;
        }
        Format::Table => {
            let sampled = if snapshot.sampled > 1 {
                format!(
                    " (1 allocation in {} sampled: figures scaled, estimates)",
                    snapshot.sampled
                )
            } else {
                String::new()
            };
            writeln!(
                out,
                "[{clock}] Top {} stacks with outstanding allocations{sampled}:",
                snapshot.stacks.len()
            )?;
            for s in &snapshot.stacks {
                writeln!(
                    out,
                    "\t{} bytes in {} allocations from stack ({}{})",
                    s.bytes,
                    s.allocations,
                    s.comm,
                    s.pid.map(|p| format!(" pid {p}")).unwrap_or_default()
                )?;
                for f in &s.stack {
                    writeln!(out, "\t\t{}", f.describe())?;
                }
                for (addr, size) in &s.addresses {
                    writeln!(out, "\t\taddr = {addr:x} size = {size}")?;
                }
            }
            if snapshot.dropped > 0 {
                writeln!(
                    out,
                    "{} allocations seen, {} lost: {}",
                    snapshot.allocs, snapshot.dropped, snapshot.why
                )?;
            }
            if snapshot.behind {
                writeln!(
                    out,
                    "the reader had not read every call made before this report: it is behind"
                )?;
            }
        }
    }
    out.flush()
}

/// `HH:MM:SS` of a Unix time in ns, in local time as bcc's tools print it: the one clock of
/// every tool's lines (memleak's reports, oomkill, vmscan, swapin, triage's OOM kills).
pub fn clock_time(unix_ns: i128) -> String {
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
pub fn clock_now() -> String {
    clock_time(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as i128),
    )
}

/// Triage's reclaim section: vmstat's reclaim counters, PSI, cgroups at their limit.
fn write_reclaim(
    out: &mut impl Write,
    reclaim: &crate::reclaim::Reclaim,
    secs: f64,
) -> io::Result<()> {
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
                .take(crate::triage::STACK_FRAMES_SHOWN)
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

    fn frame(function: &str, file_line: Option<&str>) -> Frame {
        Frame {
            function: function.into(),
            file_line: file_line.map(Into::into),
            lib: "prog".into(),
        }
    }

    fn row() -> Row {
        Row {
            pid: Some(42),
            tid: None,
            comm: Some("prog".into()),
            probe: None,
            field: None,
            field2: None,
            ustack: Some(vec![frame("inner", Some("a.c:3")), frame("outer", None)]),
            kstack: Some(vec![frame("handle_mm_fault", None)]),
            count: 7,
        }
    }

    fn written(write: impl FnOnce(&mut Vec<u8>) -> io::Result<()>) -> String {
        let mut out = Vec::new();
        write(&mut out).expect("writing to memory");
        String::from_utf8(out).expect("UTF-8")
    }

    #[test]
    fn folded_lines_go_outer_to_inner_with_kernel_frames_marked() {
        assert_eq!(
            folded_line(&row()),
            "prog;outer;inner;handle_mm_fault_[k] 7"
        );
        let total = Row {
            comm: None,
            ustack: None,
            kstack: None,
            ..row()
        };
        assert_eq!(folded_line(&total), "all 7");
    }

    #[test]
    fn rows_as_table_csv_and_json() {
        let rows = [row()];
        assert_eq!(
            written(|o| write_rows(o, &rows, Format::Table, false, None)),
            "         7  prog  pid 42\n            handle_mm_fault (prog)\n            \
             inner (a.c:3)\n            outer (prog)\n"
        );
        assert_eq!(
            written(|o| write_rows(o, &rows, Format::Csv, false, None)),
            "count,pid,tid,comm,probe,field,ustack,kstack\n\
             7,42,,prog,,,inner (a.c:3);outer (prog),handle_mm_fault (prog)\n"
        );
        let json: serde_json::Value = serde_json::from_str(&written(|o| {
            write_rows(o, &rows, Format::Json, false, None)
        }))
        .expect("JSON");
        assert_eq!(json[0]["count"], 7);
        assert_eq!(json[0]["tid"], serde_json::Value::Null);
        assert_eq!(json[0]["ustack"][1], "outer (prog)");
    }

    #[test]
    fn file_faults_table_has_its_header() {
        let files = [FileFaults {
            file: "/lib/libc.so.6".into(),
            comm: Some("prog".into()),
            count: 12,
        }];
        assert_eq!(
            written(|o| write_file_faults(o, &files, Format::Table)),
            "    FAULTS  FILE\n        12  /lib/libc.so.6  prog\n"
        );
        assert_eq!(
            written(|o| write_file_faults(o, &files, Format::Csv)),
            "count,comm,file\n12,prog,/lib/libc.so.6\n"
        );
    }

    #[test]
    fn leaks_folded_weigh_stacks_by_bytes() {
        let snapshot = LeakSnapshot {
            stacks: vec![crate::memleak::Outstanding {
                pid: Some(9),
                comm: "prog".into(),
                bytes: 4096,
                allocations: 2,
                stack: vec![frame("malloc", None), frame("main", Some("m.c:5"))],
                addresses: Vec::new(),
            }],
            allocs: 3,
            frees: 1,
            dropped: 0,
            why: "",
            sampled: 1,
            behind: false,
        };
        assert_eq!(
            written(|o| write_leaks(o, &snapshot, Format::Table, true, "")),
            "prog;main;malloc 4096\n"
        );
        assert_eq!(
            written(|o| write_leaks(o, &snapshot, Format::Table, false, "01:02:03")),
            "[01:02:03] Top 1 stacks with outstanding allocations:\n\
             \t4096 bytes in 2 allocations from stack (prog pid 9)\n\
             \t\tmalloc (prog)\n\t\tmain (m.c:5)\n"
        );
        // Sampled, each block listed, and calls lost: said in the header, rows and last line.
        let mut sampled = snapshot.clone();
        sampled.sampled = 4;
        sampled.dropped = 7;
        sampled.why = "the ring was full";
        sampled.stacks[0].addresses = vec![(0x1000, 2048), (0x2000, 2048)];
        assert_eq!(
            written(|o| write_leaks(o, &sampled, Format::Table, false, "01:02:03")),
            "[01:02:03] Top 1 stacks with outstanding allocations (1 allocation in 4 sampled: \
             figures scaled, estimates):\n\
             \t4096 bytes in 2 allocations from stack (prog pid 9)\n\
             \t\tmalloc (prog)\n\t\tmain (m.c:5)\n\
             \t\taddr = 1000 size = 2048\n\t\taddr = 2000 size = 2048\n\
             3 allocations seen, 7 lost: the ring was full\n"
        );
        let json: serde_json::Value = serde_json::from_str(&written(|o| {
            write_leaks(o, &sampled, Format::Json, false, "")
        }))
        .expect("JSON");
        assert_eq!(
            (&json["seen"], &json["lost"], &json["why"], &json["sampled"]),
            (&3.into(), &7.into(), &"the ring was full".into(), &4.into())
        );
        assert_eq!(json["stacks"][0]["blocks"][1]["addr"], 0x2000);
    }

    #[test]
    fn notes_are_empty_when_nothing_was_lost() {
        assert_eq!(table_full_note(0), "");
        assert_eq!(table_full_note(3), " (3 not counted: the table was full)");
        assert_eq!(ring_full_note(0), "");
        // Local time: the hour and minute move with the zone, the seconds do not.
        let clock = clock_time((3600 * 25 + 61) * 1_000_000_000);
        assert!(clock.len() == 8 && clock.ends_with(":01"), "{clock}");
    }
}
