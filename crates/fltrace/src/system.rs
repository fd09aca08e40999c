//! The memory chapter's event tools (`oomkill`, `mmapsnoop`, `brkstack`, `shmsnoop`,
//! `vmscan`, `drsnoop`, `swapin`, `hfaults`): flags here, the work in `fltrace-system`.

use std::process::ExitCode;
use std::time::Duration;

use clap::{Args, Subcommand};

use fltrace_render::TableFormat;
use fltrace_system::Tool;

use crate::values::duration;

/// The commands, flattened into `fltrace`'s own.
#[derive(Debug, Subcommand)]
pub enum SystemCommand {
    /// One line per OOM kill: trigger, victim, its pages, load averages, the memory cgroup.
    Oomkill(CommonArgs),
    /// One line per mmap(2): protection, flags, offset, size and file.
    Mmapsnoop(CommonArgs),
    /// brk(2) calls counted by user stack (DWARF-unwound for -p or a command).
    Brkstack(BrkArgs),
    /// System V shared memory calls (shmget, shmat, shmdt, shmctl) with arguments and results.
    Shmsnoop(CommonArgs),
    /// Reclaim per interval: shrink slab, direct and memory cgroup reclaim times, kswapd
    /// wake-ups, page writes.
    Vmscan(IntervalArgs),
    /// One line per direct or memory cgroup reclaim: process, latency, pages reclaimed.
    Drsnoop(CommonArgs),
    /// Swap-ins by process per interval.
    Swapin(IntervalArgs),
    /// Huge page faults (hugetlb and transparent huge pages) by process.
    Hfaults(CommonArgs),
}

/// What every tool takes.
#[derive(Debug, Args)]
pub struct CommonArgs {
    #[command(flatten)]
    pub scope: crate::bpf_tools::ScopeArgs,
    /// Stop after this long, e.g. 10s (default: Ctrl-C, SIGTERM, or the command's end).
    #[arg(long, value_name = "DURATION", value_parser = duration)]
    pub duration: Option<Duration>,
    /// Output format.
    #[arg(long, value_enum, default_value = "table")]
    pub format: TableFormat,
}

/// brkstack's flags.
#[derive(Debug, Args)]
pub struct BrkArgs {
    #[command(flatten)]
    pub common: CommonArgs,
    /// Folded stacks (`comm;outer;...;inner count`) for flamegraph tools.
    #[arg(long)]
    pub folded: bool,
}

/// The interval tools' flags.
#[derive(Debug, Args)]
pub struct IntervalArgs {
    /// Seconds between rows (or 500ms, 2s...).
    #[arg(value_name = "INTERVAL", default_value = "1", value_parser = duration)]
    pub interval: Duration,
    #[command(flatten)]
    pub common: CommonArgs,
}

/// The tool each command asks for, with its own options, and the flags every tool takes.
fn request(command: SystemCommand) -> (Tool, CommonArgs) {
    match command {
        SystemCommand::Oomkill(args) => (Tool::Oomkill, args),
        SystemCommand::Mmapsnoop(args) => (Tool::Mmapsnoop, args),
        SystemCommand::Brkstack(args) => (
            Tool::Brkstack {
                folded: args.folded,
            },
            args.common,
        ),
        SystemCommand::Shmsnoop(args) => (Tool::Shmsnoop, args),
        SystemCommand::Vmscan(args) => (
            Tool::Vmscan {
                interval: args.interval,
            },
            args.common,
        ),
        SystemCommand::Drsnoop(args) => (Tool::Drsnoop, args),
        SystemCommand::Swapin(args) => (
            Tool::Swapin {
                interval: args.interval,
            },
            args.common,
        ),
        SystemCommand::Hfaults(args) => (Tool::Hfaults, args),
    }
}

pub fn run(command: SystemCommand) -> anyhow::Result<ExitCode> {
    let (tool, args) = request(command);
    let scope = args.scope.scope();
    let status = fltrace_system::command::event_tool(tool, &scope, args.duration, args.format)?;
    Ok(ExitCode::from(status))
}
