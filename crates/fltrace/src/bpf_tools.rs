//! The memory chapter's in-kernel tools: `count`, `faults`, `ffaults`, `memleak`, `triage`.
//! Flags and printing only: the counting lives in fltrace-bpf.

use std::ffi::OsString;
use std::io::Write as _;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use clap::Args;
use serde_json::json;

use fltrace_bpf::memleak::{LeakSnapshot, LeakTarget, LeakTracer};
use fltrace_bpf::triage::Triage;
use fltrace_bpf::{
    By, CountSpec, Counter, FieldFilter, Frame, ProcessFilter, ProcessMaps, Row, StackNames,
};
use fltrace_capture::PendingChild;
use fltrace_system::stackcount::{StackCountSpec, StackCounter};

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

/// A traced command, started once the probes are in place.
struct Session {
    child: Option<i32>,
    /// Where the command's mappings are kept: read again when it stops at its exit.
    maps: Option<ProcessMaps>,
    /// Processes given with -p: tracing ends when all have exited.
    pids: Vec<u32>,
    stop: std::sync::Arc<AtomicUsize>,
    started: Instant,
    duration: Option<Duration>,
}

impl Session {
    /// Forks the command (held before exec) and returns the process filter.
    fn prepare(common: &Common) -> anyhow::Result<(ProcessFilter, Option<PendingChild>)> {
        let mut filter = ProcessFilter {
            tgids: common.pids.clone(),
            cgroup: common.cgroup.clone(),
            comm: common.comm.clone(),
        };
        let pending = if common.command.is_empty() {
            None
        } else {
            let child = PendingChild::spawn(&common.command, None, &[])?;
            filter.tgids.push(child.pid() as u32);
            Some(child)
        };
        Ok((filter, pending))
    }

    /// Lets the command run. It is ptrace-seized with PTRACE_O_TRACEEXIT only so that its
    /// mappings can be read at its exit, before the kernel drops them: its stacks are then
    /// named however quickly it ends.
    fn start(
        pending: Option<PendingChild>,
        common: &Common,
        maps: Option<ProcessMaps>,
    ) -> anyhow::Result<Session> {
        let stop = interrupt_counter()?;
        let child = match pending {
            Some(p) => {
                let pid = p.pid();
                // SAFETY: seizing our own child; failure leaves it untraced, which only
                // costs the names of a process that exits quickly.
                unsafe {
                    libc::ptrace(
                        libc::PTRACE_SEIZE,
                        pid,
                        0,
                        libc::PTRACE_O_TRACEEXIT as libc::c_long,
                    )
                };
                Some(p.release()?)
            }
            None => None,
        };
        Ok(Session {
            child,
            maps,
            pids: common.pids.clone(),
            stop,
            started: Instant::now(),
            duration: common.duration,
        })
    }

    /// Whether to stop: duration over, interrupted, or the command exited (reaped here).
    fn over(&mut self) -> bool {
        if self.stop.load(Ordering::Relaxed) > 0
            || self.duration.is_some_and(|d| self.started.elapsed() >= d)
        {
            return true;
        }
        if !self.pids.is_empty()
            && self
                .pids
                .iter()
                .all(|p| !std::path::Path::new(&format!("/proc/{p}")).exists())
        {
            return true;
        }
        if let Some(pid) = self.child {
            let mut status = 0;
            // SAFETY: reaping our own child without blocking.
            if unsafe { libc::waitpid(pid, &mut status, libc::WNOHANG | libc::__WALL) } == pid {
                if !libc::WIFSTOPPED(status) {
                    self.child = None;
                    return true;
                }
                let exiting = status >> 8 == (libc::SIGTRAP | (libc::PTRACE_EVENT_EXIT << 8));
                let event = status >> 16 != 0;
                if exiting && let Some(maps) = &self.maps {
                    maps.remember(pid as u32);
                }
                // Signals pass on; event stops carry none.
                let signal = if event { 0 } else { libc::WSTOPSIG(status) };
                // SAFETY: resuming our own stopped tracee.
                unsafe { libc::ptrace(libc::PTRACE_CONT, pid, 0, signal as libc::c_long) };
            }
        }
        false
    }

    fn wait(&mut self) {
        while !self.over() {
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        if let Some(pid) = self.child.take() {
            // The command runs on to its end after tracing stops; its stops are resumed.
            loop {
                let mut status = 0;
                // SAFETY: waiting for our own child.
                if unsafe { libc::waitpid(pid, &mut status, libc::__WALL) } != pid
                    || !libc::WIFSTOPPED(status)
                {
                    break;
                }
                let signal = if status >> 16 != 0 {
                    0
                } else {
                    libc::WSTOPSIG(status)
                };
                // SAFETY: resuming our own stopped tracee.
                unsafe { libc::ptrace(libc::PTRACE_CONT, pid, 0, signal as libc::c_long) };
            }
        }
    }
}

fn abort(pending: Option<PendingChild>) {
    if let Some(p) = pending {
        p.abort();
    }
}

fn parse_by(list: &[String]) -> anyhow::Result<Vec<By>> {
    if list.is_empty() {
        return Ok(vec![By::Comm]);
    }
    let mut by = Vec::new();
    for item in list {
        if item == "none" {
            continue;
        }
        by.push(By::parse(item).with_context(|| {
            format!(
                "--by {item}: expected comm, pid, tid, ustack, kstack, probe, field:NAME or none"
            )
        })?);
    }
    Ok(by)
}

pub fn count(args: CountArgs) -> anyhow::Result<ExitCode> {
    if args.list {
        return list(args.event.as_deref());
    }
    let Some(event) = &args.event else {
        bail!("give an event (see fltrace count --list)");
    };
    let events = fltrace_bpf::expand_events(event)?;
    let mut by = parse_by(&args.by)?;
    if events.len() > 1 && !by.contains(&By::Probe) {
        by.insert(0, By::Probe);
    }
    let filter = args.filter.as_deref().map(FieldFilter::parse).transpose()?;
    if by.contains(&By::UStack) && names_processes(&args.common) {
        return count_named(events, by, filter, &args.common, args.top, false);
    }
    let (processes, pending) = Session::prepare(&args.common)?;
    let spec = CountSpec {
        events,
        by,
        second_field: None,
        filter,
        processes,
        keep_maps: false,
    };
    let counter = match Counter::start(spec) {
        Ok(c) => c,
        Err(e) => {
            abort(pending);
            return Err(e.into());
        }
    };
    let mut session = Session::start(pending, &args.common, Some(counter.process_maps().clone()))?;
    eprintln!(
        "fltrace: counting {event}{}; Ctrl-C to end",
        if args.by.iter().any(|b| b.contains("ustack")) {
            ": user stacks follow frame pointers (name processes with -p or a command for DWARF stacks)"
        } else {
            ""
        }
    );
    session.wait();
    let mut names = StackNames::new();
    let snapshot = counter.snapshot(&mut names)?;
    drop(counter);
    print_rows(
        &snapshot.rows[..snapshot.rows.len().min(args.top)],
        &args.common,
    )?;
    if args.common.format == Format::Table && !args.common.folded {
        eprintln!(
            "fltrace: {} events in {:.1} s{}",
            snapshot.events,
            snapshot.elapsed.as_secs_f64(),
            lost_note(snapshot.dropped)
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
    for (name, _) in fltrace_bpf::event::SOFTWARE_EVENTS {
        if pattern.is_none_or(|p| name.contains(p)) {
            writeln!(out, "software:{name}")?;
        }
    }
    for name in fltrace_bpf::tracefs::list()? {
        if pattern.is_none_or(|p| name.contains(p)) {
            writeln!(out, "tracepoint:{name}")?;
        }
    }
    if pattern.is_none() {
        writeln!(out, "uprobe:PATH:FUNCTION")?;
        writeln!(out, "uretprobe:PATH:FUNCTION")?;
    }
    Ok(ExitCode::SUCCESS)
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
            writeln!(out, "count,pid,tid,comm,probe,field,ustack,kstack")?;
            for r in rows {
                let stack = |s: &Option<Vec<Frame>>| {
                    s.as_ref()
                        .map(|f| f.iter().map(Frame::describe).collect::<Vec<_>>().join(";"))
                        .unwrap_or_default()
                };
                writeln!(
                    out,
                    "{},{},{},{},{},{},\"{}\",\"{}\"",
                    r.count,
                    r.pid.map(|p| p.to_string()).unwrap_or_default(),
                    r.tid.map(|p| p.to_string()).unwrap_or_default(),
                    r.comm.as_deref().unwrap_or(""),
                    r.probe.as_deref().unwrap_or(""),
                    r.field.map(|p| p.to_string()).unwrap_or_default(),
                    stack(&r.ustack).replace('"', "'"),
                    stack(&r.kstack).replace('"', "'"),
                )?;
            }
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

/// Whether processes are named (-p or a command, no cgroup): their user stacks are then
/// DWARF-unwound in user space rather than walked by frame pointers in the kernel.
fn names_processes(common: &Common) -> bool {
    common.cgroup.is_none() && (!common.pids.is_empty() || !common.command.is_empty())
}

/// Counts the events of named processes in user space, with DWARF-unwound user stacks;
/// `rate` prints the events per second as `faults` does.
fn count_named(
    events: Vec<fltrace_bpf::Event>,
    by: Vec<By>,
    filter: Option<FieldFilter>,
    common: &Common,
    top: usize,
    rate: bool,
) -> anyhow::Result<ExitCode> {
    let counter = StackCounter::open(StackCountSpec {
        events,
        by,
        filter,
        pids: common.pids.clone(),
        command: common.command.clone(),
        comm: common.comm.clone(),
    })?;
    let stop = interrupt_counter()?;
    let quiet = common.folded || common.format != Format::Table;
    let whom = match counter.child_pid() {
        Some(pid) => format!("the command (pid {pid})"),
        None => format!("{:?}", common.pids),
    };
    eprintln!(
        "fltrace: counting the events of {whom} with user stacks unwound from DWARF \
         (complete without frame pointers); Ctrl-C to end"
    );
    let mut names = StackNames::new();
    let counts = counter.run(
        &stop,
        common.duration,
        |events, elapsed| {
            if rate && !quiet {
                eprintln!(
                    "fltrace: {:.0} faults/s",
                    events as f64 / elapsed.as_secs_f64()
                );
            }
        },
        &mut names,
    )?;
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
    if names_processes(&args.common) {
        return count_named(
            fltrace_bpf::fault_tracepoints(),
            vec![By::Comm, By::Pid, By::UStack, By::KStack],
            None,
            &args.common,
            args.top,
            true,
        );
    }
    let (processes, pending) = Session::prepare(&args.common)?;
    let spec = CountSpec {
        events: fltrace_bpf::fault_events(),
        by: vec![By::Comm, By::Pid, By::UStack, By::KStack],
        second_field: None,
        filter: None,
        processes,
        keep_maps: true,
    };
    let counter = match Counter::start(spec) {
        Ok(c) => c,
        Err(e) => {
            abort(pending);
            return Err(e.into());
        }
    };
    let mut session = Session::start(pending, &args.common, Some(counter.process_maps().clone()))?;
    let quiet = args.common.folded || args.common.format != Format::Table;
    eprintln!(
        "fltrace: counting page faults by stack; user stacks follow frame pointers \
         (code built without them shows only its innermost frame; -p PID or a command \
         unwinds them from DWARF); Ctrl-C to end"
    );
    // The fault rate, each second.
    let mut last = (Instant::now(), 0u64);
    while !session.over() {
        std::thread::sleep(Duration::from_millis(20));
        if last.0.elapsed() >= Duration::from_secs(1) {
            let events = counter.events();
            if !quiet {
                eprintln!(
                    "fltrace: {:.0} faults/s",
                    (events - last.1) as f64 / last.0.elapsed().as_secs_f64()
                );
            }
            last = (Instant::now(), events);
        }
    }
    let mut names = StackNames::new();
    let snapshot = counter.snapshot(&mut names)?;
    drop(counter);
    print_rows(
        &snapshot.rows[..snapshot.rows.len().min(args.top)],
        &args.common,
    )?;
    if !quiet {
        eprintln!(
            "fltrace: {} faults in {:.1} s ({:.0}/s){}",
            snapshot.events,
            snapshot.elapsed.as_secs_f64(),
            snapshot.events as f64 / snapshot.elapsed.as_secs_f64().max(1e-9),
            lost_note(snapshot.dropped)
        );
    }
    Ok(ExitCode::SUCCESS)
}

pub fn ffaults(args: FfaultsArgs) -> anyhow::Result<ExitCode> {
    let (processes, pending) = Session::prepare(&args.common)?;
    let counter = match Counter::start(fltrace_bpf::files::spec(processes, args.by_comm)) {
        Ok(c) => c,
        Err(e) => {
            abort(pending);
            return Err(e.into());
        }
    };
    let mut session = Session::start(pending, &args.common, Some(counter.process_maps().clone()))?;
    eprintln!("fltrace: counting faults on files; Ctrl-C to end");
    session.wait();
    let mut names = StackNames::new();
    let snapshot = counter.snapshot(&mut names)?;
    let mut files = fltrace_bpf::files::by_file(&snapshot, counter.process_maps());
    drop(counter);
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
            writeln!(out, "count,comm,file")?;
            for f in &files {
                writeln!(
                    out,
                    "{},{},{}",
                    f.count,
                    f.comm.as_deref().unwrap_or(""),
                    f.file
                )?;
            }
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
    let (processes, pending) = Session::prepare(&args.common)?;
    // Processes named by pid (and nothing else) get DWARF-unwound stacks; a command, a cgroup
    // or a name keeps the kernel's frame-pointer stacks.
    let attached = pending.is_none()
        && !processes.tgids.is_empty()
        && processes.cgroup.is_none()
        && processes.comm.is_none();
    let target = if processes.tgids.is_empty() {
        LeakTarget::Kernel
    } else if attached {
        LeakTarget::Attached
    } else if let Some(p) = &pending {
        // The command has not exec'd yet: it will use the C library fltrace uses.
        let _ = p;
        LeakTarget::User {
            libc: fltrace_bpf::memleak::libc_of(std::process::id())?,
        }
    } else {
        LeakTarget::User {
            libc: fltrace_bpf::memleak::libc_of(processes.tgids[0])?,
        }
    };
    let kernel = matches!(target, LeakTarget::Kernel);
    let tracer = match LeakTracer::start(target, &processes) {
        Ok(t) => t,
        Err(e) => {
            abort(pending);
            return Err(e.into());
        }
    };
    let mut session = Session::start(pending, &args.common, Some(tracer.process_maps().clone()))?;
    eprintln!(
        "fltrace: attached to {}; Ctrl-C to end",
        if kernel {
            "the kernel's allocations (kmalloc, kmem_cache, pages)".to_owned()
        } else {
            format!(
                "the C library allocator of {:?} ({})",
                processes.tgids,
                if attached {
                    "stacks unwound from DWARF"
                } else {
                    "stacks follow frame pointers"
                }
            )
        }
    );
    let mut names = StackNames::new();
    let older = Duration::from_millis(args.older);
    let mut reports = 0u64;
    let mut next = Instant::now() + Duration::from_secs(args.interval.unwrap_or(u64::MAX / 4));
    loop {
        let over = session.over();
        if over || Instant::now() >= next {
            let snapshot = tracer.snapshot(&mut names, older, args.top)?;
            print_leaks(&snapshot, &args)?;
            reports += 1;
            if over || args.count.is_some_and(|c| reports >= c) {
                break;
            }
            next = Instant::now() + Duration::from_secs(args.interval.unwrap_or(1));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    tracer.finish()?;
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
            writeln!(out, "bytes,allocations,pid,comm,stack")?;
            for s in &snapshot.stacks {
                let stack: Vec<_> = s.stack.iter().map(Frame::describe).collect();
                writeln!(
                    out,
                    "{},{},{},{},\"{}\"",
                    s.bytes,
                    s.allocations,
                    s.pid.map(|p| p.to_string()).unwrap_or_default(),
                    s.comm,
                    stack.join(";").replace('"', "'")
                )?;
            }
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
