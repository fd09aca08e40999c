//! The memory chapter's in-kernel tools: `count`, `faults`, `ffaults`, `memleak`, `triage`.
//! Flags and printing only: the counting lives in fltrace-system.

use std::ffi::OsString;
use std::io::Write as _;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::atomic::Ordering;
use std::time::Duration;

use anyhow::bail;
use clap::Args;

use fltrace_system::count::{self, By, Count, CountRequest, Event, FieldFilter, Kind, Remarks};
use fltrace_system::memleak::{LeakRequest, LeakWatch};
use fltrace_system::triage::Triage;
use fltrace_system::{Scope, output};

use crate::cli::{Format, duration};
use fltrace_capture::interrupt_counter;

/// Whose events, the same for every system tool (`fltrace_system::Scope`).
#[derive(Debug, Args)]
pub struct ScopeArgs {
    /// Only this process, its threads and the children it starts (repeatable).
    #[arg(short = 'p', long = "pid", value_name = "PID")]
    pub pids: Vec<u32>,
    /// Only tasks of this cgroup directory (e.g. /sys/fs/cgroup/my.slice); with -p or a
    /// command, only theirs in it.
    #[arg(long, value_name = "PATH")]
    pub cgroup: Option<PathBuf>,
    /// Only threads of this name.
    #[arg(long, value_name = "NAME")]
    pub comm: Option<String>,
    /// A command to run and trace, with its children.
    #[arg(last = true, value_name = "COMMAND")]
    pub command: Vec<OsString>,
}

impl ScopeArgs {
    /// The scope these flags name.
    pub fn scope(&self) -> Scope {
        Scope {
            pids: self.pids.clone(),
            cgroup: self.cgroup.clone(),
            comm: self.comm.clone(),
            command: self.command.clone(),
        }
    }
}

/// Options every in-kernel tool takes.
#[derive(Debug, Args)]
pub struct Common {
    #[command(flatten)]
    pub scope: ScopeArgs,
    /// Stop after this long (default: at Ctrl-C, SIGTERM or the command's exit).
    #[arg(long, value_name = "TIME", value_parser = duration)]
    pub duration: Option<Duration>,
    /// Output format.
    #[arg(long, value_enum, default_value = "table")]
    pub format: Format,
    /// Stacks as folded lines (`comm;outer;...;inner count`) for flamegraph tools.
    #[arg(long)]
    pub folded: bool,
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
    /// One sample every N events, counts scaled by N and said to be estimates (user stacks
    /// of -p or a command only; the others count every event).
    #[arg(long, value_name = "N")]
    pub sample: Option<u64>,
    #[command(flatten)]
    pub common: Common,
}

#[derive(Debug, Args)]
pub struct FaultsArgs {
    /// Stacks printed at most.
    #[arg(long, value_name = "N", default_value_t = 20)]
    pub top: usize,
    /// One fault sampled every N with -p or a command (DWARF stacks), counts scaled by N and
    /// said to be estimates.
    #[arg(long, value_name = "N")]
    pub sample: Option<u64>,
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
    /// Only allocations older than this many milliseconds (once the processes have ended,
    /// every block they left).
    #[arg(
        short = 'o',
        long = "older-ms",
        alias = "older",
        value_name = "MS",
        default_value_t = 500
    )]
    pub older: u64,
    /// Sample one allocation in RATE (-p or a command): figures scaled by RATE and marked as
    /// estimates.
    #[arg(short = 's', long = "sample-rate", value_name = "RATE", default_value_t = 1,
          value_parser = clap::value_parser!(u64).range(1..))]
    pub sample_rate: u64,
    /// List each outstanding block (address and size) under its stack.
    #[arg(short = 'a', long = "show-allocs")]
    pub show_allocs: bool,
    /// Totals by stack as they go, of every age (-o does not apply).
    #[arg(long)]
    pub combined_only: bool,
    /// Only blocks of at least this many bytes.
    #[arg(
        short = 'z',
        long = "min-size",
        value_name = "BYTES",
        default_value_t = 0
    )]
    pub min_size: u64,
    /// Only blocks of at most this many bytes.
    #[arg(short = 'Z', long = "max-size", value_name = "BYTES", default_value_t = u64::MAX)]
    pub max_size: u64,
    #[command(flatten)]
    pub common: Common,
}

#[derive(Debug, Args)]
pub struct TriageArgs {
    /// How long the fault and syscall counters run.
    #[arg(long, value_name = "TIME", value_parser = duration, default_value = "5s")]
    pub duration: Duration,
}

fn count_request(common: &Common, events: Vec<Event>, by: Vec<By>) -> CountRequest {
    CountRequest {
        events,
        by,
        filter: None,
        scope: common.scope.scope(),
        duration: common.duration,
        sample: None,
    }
}

pub fn count(args: CountArgs) -> anyhow::Result<ExitCode> {
    if args.list {
        return list(args.event.as_deref());
    }
    let Some(event) = &args.event else {
        bail!("give an event (see fltrace count --list)");
    };
    let events = count::expand_events(event)?;
    let by = count::grouping(&events, count::parse_by(&args.by)?);
    let frame_pointers = if by.contains(&By::UStack) {
        ": user stacks follow frame pointers (name processes with -p or a command for DWARF stacks)"
    } else {
        ""
    };
    let request = CountRequest {
        filter: args.filter.as_deref().map(FieldFilter::parse).transpose()?,
        sample: args.sample,
        ..count_request(&args.common, events, by)
    };
    let count = Count::start(request, false, interrupt_counter()?)?;
    let in_kernel = format!("counting {event}{frame_pointers}; Ctrl-C to end");
    report(count, Kind::Events, &in_kernel, &args.common, args.top)
}

fn list(pattern: Option<&str>) -> anyhow::Result<ExitCode> {
    let mut out = std::io::stdout().lock();
    for name in count::list(pattern)? {
        writeln!(out, "{name}")?;
    }
    Ok(ExitCode::SUCCESS)
}

/// Runs a count to its end: says how it counts, then the remarks the count makes (a rate each
/// second, a summary) around its `top` rows. `in_kernel` is what a count in the kernel says
/// it counts; one in user space names the processes whose stacks it unwinds from DWARF.
fn report(
    mut count: Count,
    kind: Kind,
    in_kernel: &str,
    common: &Common,
    top: usize,
) -> anyhow::Result<ExitCode> {
    let remarks = Remarks::new(kind, count.dwarf(), common.format.into(), common.folded);
    if count.dwarf() {
        let whom = match count.child_pid() {
            Some(pid) => format!("the command (pid {pid})"),
            None => format!("{:?}", common.scope.pids),
        };
        eprintln!(
            "fltrace: counting the events of {whom} with user stacks unwound from DWARF \
             (complete without frame pointers); Ctrl-C to end"
        );
    } else {
        eprintln!("fltrace: {in_kernel}");
    }
    let counted = count.run(|per_second| {
        if let Some(line) = remarks.each_second(per_second) {
            eprintln!("fltrace: {line}");
        }
    })?;
    let mut out = std::io::stdout().lock();
    count::write_rows(
        &mut out,
        counted.top(top),
        common.format.into(),
        common.folded,
        counted.loss_footer(),
    )?;
    match remarks.summary(&counted) {
        Some(line) => eprintln!("fltrace: {line}"),
        // CSV, JSON and folded stacks keep stdout clean: what was lost is said here.
        None if counted.lost_any() || counted.sample_period > 1 => eprintln!(
            "fltrace: {} events{}{}{}{}",
            counted.events,
            count::sampled_note(counted.sample_period),
            output::table_full_note(counted.dropped),
            output::ring_full_note(counted.lost),
            output::stack_table_full_note(counted.stacks_lost)
        ),
        None => {}
    }
    Ok(ExitCode::from(fltrace_system::exit_status(
        0,
        u64::from(counted.lost_any()),
    )))
}

pub fn faults(args: FaultsArgs) -> anyhow::Result<ExitCode> {
    let events = count::fault_events_for(&args.common.scope.scope());
    let request = CountRequest {
        sample: args.sample,
        ..count_request(&args.common, events, count::fault_grouping())
    };
    let count = Count::start(request, true, interrupt_counter()?)?;
    report(
        count,
        Kind::Faults,
        "counting page faults by stack; user stacks follow frame pointers (code built without \
         them shows only its innermost frame; -p PID or a command unwinds them from DWARF); \
         Ctrl-C to end",
        &args.common,
        args.top,
    )
}

pub fn ffaults(args: FfaultsArgs) -> anyhow::Result<ExitCode> {
    let mut count = Count::file_faults(
        &args.common.scope.scope(),
        args.common.duration,
        args.by_comm,
        interrupt_counter()?,
    )?;
    eprintln!("fltrace: counting faults on files; Ctrl-C to end");
    let mut files = count.run_by_file()?;
    files.truncate(args.top);
    fltrace_system::ffaults::write_file_faults(
        &mut std::io::stdout().lock(),
        &files,
        args.common.format.into(),
    )?;
    Ok(ExitCode::SUCCESS)
}

pub fn memleak(args: MemleakArgs) -> anyhow::Result<ExitCode> {
    if args.min_size > args.max_size {
        bail!(
            "-z {} is above -Z {}: no block could be kept",
            args.min_size,
            args.max_size
        );
    }
    let request = LeakRequest {
        scope: args.common.scope.scope(),
        interval: args.interval.map(Duration::from_secs),
        count: args.count,
        top: args.top,
        older: Duration::from_millis(args.older),
        duration: args.common.duration,
        sample: args.sample_rate,
        min_size: args.min_size,
        max_size: args.max_size,
        addresses: args.show_allocs,
        combined: args.combined_only,
    };
    let mut leaks = LeakWatch::start(request, interrupt_counter()?)?;
    eprintln!(
        "fltrace: attached to {}; Ctrl-C to end",
        fltrace_system::memleak::describe_leak_target(leaks.target(), leaks.tgids())
    );
    let mut lost = 0;
    while let Some(snapshot) = leaks.next_report()? {
        fltrace_system::memleak::write_leaks(
            &mut std::io::stdout().lock(),
            &snapshot,
            args.common.format.into(),
            args.common.folded,
            &fltrace_system::clock::local_time_now(),
        )?;
        lost = snapshot.dropped;
        // CSV and folded stacks have no place for the loss: it is said here.
        if lost > 0 && (args.common.folded || matches!(args.common.format, Format::Csv)) {
            eprintln!(
                "fltrace: {} allocations seen, {lost} lost: {}",
                snapshot.allocs, snapshot.why
            );
        }
    }
    leaks.finish()?;
    Ok(ExitCode::from(fltrace_system::exit_status(0, lost)))
}

pub fn triage(args: TriageArgs) -> anyhow::Result<ExitCode> {
    let stop = interrupt_counter()?;
    let started = || {
        eprintln!(
            "fltrace: watching faults, brk/mmap and reclaim for {:.0} s",
            args.duration.as_secs_f64()
        )
    };
    let report = Triage::run(
        args.duration,
        &|| stop.load(Ordering::Relaxed) > 0,
        &started,
    )?;
    fltrace_system::triage::write_triage(&mut std::io::stdout().lock(), &report)?;
    Ok(ExitCode::from(fltrace_system::exit_status(
        0,
        report.lost(),
    )))
}
