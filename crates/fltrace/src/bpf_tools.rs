//! The memory chapter's in-kernel tools: `count`, `faults`, `ffaults`, `memleak`, `triage`.
//! Flags and printing only: the counting lives in fltrace-bpf.

use std::ffi::OsString;
use std::io::Write as _;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::atomic::Ordering;
use std::time::Duration;

use anyhow::bail;
use clap::Args;
use serde_json::json;

use fltrace_bpf::memleak::{LeakRequest, LeakSnapshot, LeakTarget, LeakWatch};
use fltrace_bpf::triage::Triage;
use fltrace_bpf::watch::Targets;
use fltrace_bpf::{By, Event, FieldFilter, Frame, Row};
use fltrace_system::counting::{self, Count, CountRequest};

use crate::cli::{Format, duration};
use crate::record::interrupt_counter;

/// Options every in-kernel tool takes.
#[derive(Debug, Args)]
pub struct Common {
    /// Only this process (repeatable).
    #[arg(short = 'p', long = "pid", value_name = "PID")]
    pub pids: Vec<u32>,
    /// Only tasks in this cgroup v2 directory (e.g. /sys/fs/cgroup/unified/my.slice).
    #[arg(long, value_name = "PATH")]
    pub cgroup: Option<PathBuf>,
    /// Only tasks of this name.
    #[arg(long, value_name = "NAME")]
    pub comm: Option<String>,
    /// Stop after this long (default: at Ctrl-C, SIGTERM or the command's exit).
    #[arg(long, value_name = "TIME", value_parser = duration)]
    pub duration: Option<Duration>,
    /// Output format.
    #[arg(long, value_enum, default_value = "table")]
    pub format: Format,
    /// Stacks as folded lines (`comm;outer;...;inner count`) for flamegraph tools.
    #[arg(long)]
    pub folded: bool,
    /// A command to run and trace (its process only).
    #[arg(last = true, value_name = "COMMAND")]
    pub command: Vec<OsString>,
}

#[derive(Debug, Args)]
pub struct CountArgs {
    /// The event: a tracepoint (`syscalls:sys_enter_brk`, wildcards as `vmscan:*`), a software
    /// event (`page-faults`) or a uprobe (`uprobe:/lib/x86_64-linux-gnu/libc.so.6:malloc`).
    #[arg(value_name = "EVENT", required_unless_present = "list")]
    pub event: Option<String>,
    /// Group by: comm, pid, tid, ustack, kstack, probe, field:NAME (comma-separated or
    /// repeated); `none` for one total. Default: comm.
    #[arg(long, value_name = "KEY", value_delimiter = ',')]
    pub by: Vec<String>,
    /// Count only events whose field compares so: `bytes_alloc > 4096`, `len & 0x1000`.
    #[arg(long, value_name = "EXPR")]
    pub filter: Option<String>,
    /// List the events there are (with a pattern: those matching it) and exit.
    #[arg(long)]
    pub list: bool,
    /// Rows printed at most.
    #[arg(long, value_name = "N", default_value_t = 100)]
    pub top: usize,
    #[command(flatten)]
    pub common: Common,
}

#[derive(Debug, Args)]
pub struct FaultsArgs {
    /// Stacks printed at most.
    #[arg(long, value_name = "N", default_value_t = 20)]
    pub top: usize,
    #[command(flatten)]
    pub common: Common,
}

#[derive(Debug, Args)]
pub struct FfaultsArgs {
    /// Also by task name.
    #[arg(long)]
    pub by_comm: bool,
    /// Files printed at most.
    #[arg(long, value_name = "N", default_value_t = 30)]
    pub top: usize,
    #[command(flatten)]
    pub common: Common,
}

#[derive(Debug, Args)]
pub struct MemleakArgs {
    /// Seconds between reports (default: one report at the end).
    #[arg(value_name = "INTERVAL")]
    pub interval: Option<u64>,
    /// Reports before exiting.
    #[arg(value_name = "COUNT")]
    pub count: Option<u64>,
    /// Stacks per report.
    #[arg(long, value_name = "N", default_value_t = 10)]
    pub top: usize,
    /// Only allocations older than this many milliseconds.
    #[arg(short = 'o', long = "older", value_name = "MS", default_value_t = 500)]
    pub older: u64,
    #[command(flatten)]
    pub common: Common,
}

#[derive(Debug, Args)]
pub struct TriageArgs {
    /// How long the fault and syscall counters run.
    #[arg(long, value_name = "TIME", value_parser = duration, default_value = "5s")]
    pub duration: Duration,
}

fn targets(common: &Common) -> Targets {
    Targets {
        pids: common.pids.clone(),
        cgroup: common.cgroup.clone(),
        comm: common.comm.clone(),
        command: common.command.clone(),
    }
}

fn count_request(common: &Common, events: Vec<Event>, by: Vec<By>) -> CountRequest {
    CountRequest {
        events,
        by,
        filter: None,
        targets: targets(common),
        duration: common.duration,
    }
}

pub fn count(args: CountArgs) -> anyhow::Result<ExitCode> {
    if args.list {
        return list(args.event.as_deref());
    }
    let Some(event) = &args.event else {
        bail!("give an event (see fltrace count --list)");
    };
    let events = fltrace_bpf::expand_events(event)?;
    let by = counting::grouping(&events, counting::parse_by(&args.by)?);
    let request = CountRequest {
        filter: args.filter.as_deref().map(FieldFilter::parse).transpose()?,
        ..count_request(&args.common, events, by)
    };
    let mut count = Count::start(request, false, interrupt_counter()?)?;
    if count.dwarf() {
        return print_named(count, &args.common, args.top, false);
    }
    eprintln!(
        "fltrace: counting {event}{}; Ctrl-C to end",
        if args.by.iter().any(|b| b.contains("ustack")) {
            ": user stacks follow frame pointers (name processes with -p or a command for DWARF stacks)"
        } else {
            ""
        }
    );
    let counted = count.run(|_| {})?;
    print_rows(
        &counted.rows[..counted.rows.len().min(args.top)],
        &args.common,
    )?;
    if args.common.format == Format::Table && !args.common.folded {
        eprintln!(
            "fltrace: {} events in {:.1} s{}",
            counted.events,
            counted.elapsed.as_secs_f64(),
            lost_note(counted.dropped)
        );
    }
    Ok(ExitCode::SUCCESS)
}

fn lost_note(dropped: u64) -> String {
    if dropped > 0 {
        format!(" ({dropped} not counted: the table was full)")
    } else {
        String::new()
    }
}

fn list(pattern: Option<&str>) -> anyhow::Result<ExitCode> {
    let mut out = std::io::stdout().lock();
    for name in fltrace_bpf::event::list(pattern)? {
        writeln!(out, "{name}")?;
    }
    Ok(ExitCode::SUCCESS)
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

fn folded_line(row: &Row) -> String {
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

fn print_rows(rows: &[Row], common: &Common) -> anyhow::Result<()> {
    let mut out = std::io::stdout().lock();
    if common.folded {
        for row in rows {
            writeln!(out, "{}", folded_line(row))?;
        }
        return Ok(());
    }
    match common.format {
        Format::Json => {
            let rows: Vec<serde_json::Value> = rows
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
            serde_json::to_writer_pretty(&mut out, &rows)?;
            writeln!(out)?;
        }
        Format::Csv => {
            let mut csv = csv::Writer::from_writer(&mut out);
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

/// Prints a count of named processes made in user space, with DWARF-unwound user stacks;
/// `rate` prints the events per second as `faults` does.
fn print_named(
    mut count: Count,
    common: &Common,
    top: usize,
    rate: bool,
) -> anyhow::Result<ExitCode> {
    let quiet = common.folded || common.format != Format::Table;
    let whom = match count.child_pid() {
        Some(pid) => format!("the command (pid {pid})"),
        None => format!("{:?}", common.pids),
    };
    eprintln!(
        "fltrace: counting the events of {whom} with user stacks unwound from DWARF \
         (complete without frame pointers); Ctrl-C to end"
    );
    let counts = count.run(|per_second| {
        if rate && !quiet {
            eprintln!("fltrace: {per_second:.0} faults/s");
        }
    })?;
    print_rows(&counts.rows[..counts.rows.len().min(top)], common)?;
    if !quiet {
        let secs = counts.elapsed.as_secs_f64().max(1e-9);
        eprintln!(
            "fltrace: {} events in {secs:.1} s ({:.0}/s){}",
            counts.events,
            counts.events as f64 / secs,
            if counts.lost > 0 {
                format!(
                    " ({} samples lost: the ring was full; fewer processes or --by without ustack lose none)",
                    counts.lost
                )
            } else {
                String::new()
            }
        );
    }
    Ok(ExitCode::SUCCESS)
}

pub fn faults(args: FaultsArgs) -> anyhow::Result<ExitCode> {
    let targets = targets(&args.common);
    // Named processes get the fault tracepoints (their samples carry the user registers for
    // DWARF unwinding); the whole system the cheaper software event.
    let events = if targets.names_processes() {
        fltrace_bpf::fault_tracepoints()
    } else {
        fltrace_bpf::fault_events()
    };
    let request = count_request(&args.common, events, counting::fault_grouping());
    let mut count = Count::start(request, true, interrupt_counter()?)?;
    if count.dwarf() {
        return print_named(count, &args.common, args.top, true);
    }
    let quiet = args.common.folded || args.common.format != Format::Table;
    eprintln!(
        "fltrace: counting page faults by stack; user stacks follow frame pointers \
         (code built without them shows only its innermost frame; -p PID or a command \
         unwinds them from DWARF); Ctrl-C to end"
    );
    let counted = count.run(|per_second| {
        if !quiet {
            eprintln!("fltrace: {per_second:.0} faults/s");
        }
    })?;
    print_rows(
        &counted.rows[..counted.rows.len().min(args.top)],
        &args.common,
    )?;
    if !quiet {
        eprintln!(
            "fltrace: {} faults in {:.1} s ({:.0}/s){}",
            counted.events,
            counted.elapsed.as_secs_f64(),
            counted.rate(),
            lost_note(counted.dropped)
        );
    }
    Ok(ExitCode::SUCCESS)
}

pub fn ffaults(args: FfaultsArgs) -> anyhow::Result<ExitCode> {
    let mut count = Count::file_faults(
        &targets(&args.common),
        args.common.duration,
        args.by_comm,
        interrupt_counter()?,
    )?;
    eprintln!("fltrace: counting faults on files; Ctrl-C to end");
    let mut files = count.run_by_file()?;
    files.truncate(args.top);
    let mut out = std::io::stdout().lock();
    match args.common.format {
        Format::Json => {
            let rows: Vec<_> = files
                .iter()
                .map(|f| json!({"file": f.file, "comm": f.comm, "count": f.count}))
                .collect();
            serde_json::to_writer_pretty(&mut out, &rows)?;
            writeln!(out)?;
        }
        Format::Csv => {
            let mut csv = csv::Writer::from_writer(&mut out);
            csv.write_record(["count", "comm", "file"])?;
            for f in &files {
                let count = f.count.to_string();
                csv.write_record([&count, f.comm.as_deref().unwrap_or(""), &f.file])?;
            }
            csv.flush()?;
        }
        Format::Table => {
            writeln!(out, "{:>10}  FILE", "FAULTS")?;
            for f in &files {
                match &f.comm {
                    Some(c) => writeln!(out, "{:>10}  {}  {c}", f.count, f.file)?,
                    None => writeln!(out, "{:>10}  {}", f.count, f.file)?,
                }
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}

pub fn memleak(args: MemleakArgs) -> anyhow::Result<ExitCode> {
    let request = LeakRequest {
        targets: targets(&args.common),
        interval: args.interval.map(Duration::from_secs),
        count: args.count,
        top: args.top,
        older: Duration::from_millis(args.older),
        duration: args.common.duration,
    };
    let mut leaks = LeakWatch::start(request, interrupt_counter()?)?;
    eprintln!(
        "fltrace: attached to {}; Ctrl-C to end",
        match leaks.target() {
            LeakTarget::Kernel =>
                "the kernel's allocations (kmalloc, kmem_cache, pages)".to_owned(),
            target => format!(
                "the C library allocator of {:?} ({})",
                leaks.tgids(),
                if matches!(target, LeakTarget::Attached) {
                    "stacks unwound from DWARF"
                } else {
                    "stacks follow frame pointers"
                }
            ),
        }
    );
    while let Some(snapshot) = leaks.next_report()? {
        print_leaks(&snapshot, &args)?;
    }
    leaks.finish()?;
    Ok(ExitCode::SUCCESS)
}

fn print_leaks(snapshot: &LeakSnapshot, args: &MemleakArgs) -> anyhow::Result<()> {
    let mut out = std::io::stdout().lock();
    if args.common.folded {
        for s in &snapshot.stacks {
            let mut parts = vec![s.comm.clone()];
            parts.extend(s.stack.iter().rev().map(|f| f.function.clone()));
            writeln!(out, "{} {}", parts.join(";"), s.bytes)?;
        }
        return Ok(());
    }
    match args.common.format {
        Format::Json => {
            let stacks: Vec<_> = snapshot
                .stacks
                .iter()
                .map(|s| {
                    json!({
                        "pid": s.pid,
                        "comm": s.comm,
                        "bytes": s.bytes,
                        "allocations": s.allocations,
                        "stack": s.stack.iter().map(Frame::describe).collect::<Vec<_>>(),
                    })
                })
                .collect();
            let report = json!({
                "allocs": snapshot.allocs,
                "frees": snapshot.frees,
                "dropped": snapshot.dropped,
                "stacks": stacks,
            });
            serde_json::to_writer(&mut out, &report)?;
            writeln!(out)?;
        }
        Format::Csv => {
            let mut csv = csv::Writer::from_writer(&mut out);
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
            writeln!(
                out,
                "[{}] Top {} stacks with outstanding allocations:",
                clock_time(),
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
            }
        }
    }
    out.flush()?;
    Ok(())
}

/// HH:MM:SS, UTC.
fn clock_time() -> String {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    format!(
        "{:02}:{:02}:{:02}",
        secs / 3600 % 24,
        secs / 60 % 60,
        secs % 60
    )
}

pub fn triage(args: TriageArgs) -> anyhow::Result<ExitCode> {
    let stop = interrupt_counter()?;
    eprintln!(
        "fltrace: watching faults and brk/mmap for {:.0} s",
        args.duration.as_secs_f64()
    );
    let report = Triage::run(args.duration, &|| stop.load(Ordering::Relaxed) > 0)?;
    let mut out = std::io::stdout().lock();
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
            let top: Vec<String> = stack.iter().take(4).map(Frame::describe).collect();
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
    writeln!(out, "== Next")?;
    for (finding, command) in &report.findings {
        writeln!(out, "  {finding}\n      -> {command}")?;
    }
    Ok(ExitCode::SUCCESS)
}
