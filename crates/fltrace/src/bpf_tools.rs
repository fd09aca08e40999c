//! The memory chapter's in-kernel tools: `count`, `faults`, `ffaults`, `memleak`, `triage`.
//! Flags only: the counting and printing live in fltrace-system's `command`.

use std::ffi::OsString;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::Args;

use fltrace_render::TableFormat;
use fltrace_system::Scope;
use fltrace_system::command::{self, Counting, EventCount};
use fltrace_system::memleak::LeakRequest;

use crate::values::duration;

/// Whose events, the same for every system tool (`fltrace_system::Scope`).
#[derive(Debug, Args)]
pub struct ScopeArgs {
    /// Only these processes, their threads and the children they start (`-p A,B` as perf,
    /// or repeated).
    #[arg(
        short = 'p',
        long = "pid",
        value_name = "PID,...",
        value_delimiter = ',',
        value_parser = crate::values::pid
    )]
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
    pub format: TableFormat,
    /// Stacks as folded lines (`comm;outer;...;inner count`) for flamegraph tools.
    #[arg(long)]
    pub folded: bool,
}

impl Common {
    /// How the tool runs and prints, with at most `top` rows.
    fn counting(&self, top: usize) -> Counting {
        Counting {
            scope: self.scope.scope(),
            duration: self.duration,
            format: self.format,
            folded: self.folded,
            top,
        }
    }
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
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..))]
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
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..))]
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
    #[arg(value_name = "INTERVAL", value_parser = clap::value_parser!(u64).range(1..))]
    pub interval: Option<u64>,
    /// Reports before exiting.
    #[arg(value_name = "COUNT", value_parser = clap::value_parser!(u64).range(1..))]
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

/// The exit status of a tool's run; a failed write is its error alone (no "writing the
/// output"), as these tools always said it, and a broken pipe stays quiet.
fn exit_code(status: Result<u8, fltrace_system::Error>) -> anyhow::Result<ExitCode> {
    match status {
        Ok(status) => Ok(ExitCode::from(status)),
        Err(fltrace_system::Error::Output(write)) => Err(write.into()),
        Err(error) => Err(error.into()),
    }
}

pub fn count(args: CountArgs) -> anyhow::Result<ExitCode> {
    let asked = EventCount {
        event: args.event,
        list: args.list,
        by: args.by,
        filter: args.filter,
        sample: args.sample,
    };
    let counting = args.common.counting(args.top);
    exit_code(command::count(&asked, &counting))
}

pub fn faults(args: FaultsArgs) -> anyhow::Result<ExitCode> {
    let counting = args.common.counting(args.top);
    exit_code(command::faults(args.sample, &counting))
}

pub fn ffaults(args: FfaultsArgs) -> anyhow::Result<ExitCode> {
    let counting = args.common.counting(args.top);
    exit_code(command::ffaults(args.by_comm, &counting))
}

pub fn memleak(args: MemleakArgs) -> anyhow::Result<ExitCode> {
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
    let (format, folded) = (args.common.format, args.common.folded);
    exit_code(command::memleak(request, format, folded))
}

pub fn triage(args: TriageArgs) -> anyhow::Result<ExitCode> {
    exit_code(command::triage(args.duration))
}
