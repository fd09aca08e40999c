//! Any of the event tools as one request: what it is called, what it traces, its columns, and
//! a run that prints its rows in a format, so that a caller opens and runs every tool alike.

use std::io::Write;
use std::process::ExitStatus;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use fltrace_render::TableFormat;

use crate::Scope;
use crate::output::{Column, Printer};
use crate::perf_session::PerfEvents;
use crate::{Error, brkstack, drsnoop, hfaults, mmapsnoop, oomkill, shmsnoop, swapin, vmscan};

/// An event tool with its own options.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Tool {
    /// OOM kills ([`oomkill`]).
    Oomkill,
    /// mmap(2) calls ([`mmapsnoop`]).
    Mmapsnoop,
    /// brk(2) calls counted by stack ([`brkstack`]).
    Brkstack {
        /// Folded stacks (`comm;outer;...;inner count`) rather than the format's rows.
        folded: bool,
    },
    /// System V shared memory calls ([`shmsnoop`]).
    Shmsnoop,
    /// Reclaim per interval ([`vmscan`]).
    Vmscan {
        /// Time between rows.
        interval: Duration,
    },
    /// Direct and memory cgroup reclaims ([`drsnoop`]).
    Drsnoop,
    /// Swap-ins by process per interval ([`swapin`]).
    Swapin {
        /// Time between rows.
        interval: Duration,
    },
    /// Huge page faults by process ([`hfaults`]).
    Hfaults,
}

impl Tool {
    /// Whether it prints folded stacks (brkstack --folded), which have no room for a loss
    /// line.
    pub fn folded(self) -> bool {
        matches!(self, Tool::Brkstack { folded: true })
    }

    /// Its command name (`mmapsnoop`).
    pub fn name(self) -> &'static str {
        match self {
            Tool::Oomkill => "oomkill",
            Tool::Mmapsnoop => "mmapsnoop",
            Tool::Brkstack { .. } => "brkstack",
            Tool::Shmsnoop => "shmsnoop",
            Tool::Vmscan { .. } => "vmscan",
            Tool::Drsnoop => "drsnoop",
            Tool::Swapin { .. } => "swapin",
            Tool::Hfaults => "hfaults",
        }
    }

    /// What it traces, as the "Tracing ...." line says it (`mmap(2) calls`).
    pub fn traces(self) -> &'static str {
        match self {
            Tool::Oomkill => "OOM kills",
            Tool::Mmapsnoop => "mmap(2) calls",
            Tool::Brkstack { .. } => "brk(2) calls by stack",
            Tool::Shmsnoop => "shared memory calls",
            Tool::Vmscan { .. } => "vmscan",
            Tool::Drsnoop => "direct and memory cgroup reclaim",
            Tool::Swapin { .. } => "swap-ins",
            Tool::Hfaults => "huge page faults per process",
        }
    }

    /// Its output's columns.
    pub fn columns(self) -> &'static [Column] {
        match self {
            Tool::Oomkill => oomkill::COLUMNS,
            Tool::Mmapsnoop => mmapsnoop::COLUMNS,
            Tool::Brkstack { .. } => brkstack::COLUMNS,
            Tool::Shmsnoop => shmsnoop::COLUMNS,
            Tool::Vmscan { .. } => vmscan::COLUMNS,
            Tool::Drsnoop => drsnoop::COLUMNS,
            Tool::Swapin { .. } => swapin::COLUMNS,
            Tool::Hfaults => hfaults::COLUMNS,
        }
    }

    /// Opens its events for `scope` (starting a command the scope names once they are in
    /// place).
    pub fn open(self, scope: &Scope) -> Result<OpenTool, Error> {
        let opened = match self {
            Tool::Oomkill => Opened::Oomkill(oomkill::open(scope)?),
            Tool::Mmapsnoop => Opened::Mmapsnoop(mmapsnoop::open(scope)?),
            Tool::Brkstack { folded } => Opened::Brkstack(brkstack::open(scope)?, folded),
            Tool::Shmsnoop => Opened::Shmsnoop(shmsnoop::open(scope)?),
            Tool::Vmscan { interval } => Opened::Vmscan(vmscan::open(scope)?, interval),
            Tool::Drsnoop => Opened::Drsnoop(drsnoop::open(scope)?),
            Tool::Swapin { interval } => Opened::Swapin(swapin::open(scope)?, interval),
            Tool::Hfaults => Opened::Hfaults(hfaults::open(scope)?),
        };
        Ok(OpenTool { tool: self, opened })
    }
}

enum Opened {
    Oomkill(oomkill::OomKill),
    Mmapsnoop(mmapsnoop::MmapSnoop),
    Brkstack(brkstack::BrkStack, bool),
    Shmsnoop(shmsnoop::ShmSnoop),
    Vmscan(vmscan::Vmscan, Duration),
    Drsnoop(drsnoop::DrSnoop),
    Swapin(swapin::Swapin, Duration),
    Hfaults(hfaults::HFaults),
}

/// A tool whose events are open.
pub struct OpenTool {
    tool: Tool,
    opened: Opened,
}

impl OpenTool {
    /// The tool.
    pub fn tool(&self) -> Tool {
        self.tool
    }

    fn perf_events(&self) -> &PerfEvents {
        match &self.opened {
            Opened::Oomkill(t) => &t.perf_events,
            Opened::Mmapsnoop(t) => &t.perf_events,
            Opened::Brkstack(t, _) => &t.perf_events,
            Opened::Shmsnoop(t) => &t.perf_events,
            Opened::Vmscan(t, _) => &t.perf_events,
            Opened::Drsnoop(t) => &t.perf_events,
            Opened::Swapin(t, _) => &t.perf_events,
            Opened::Hfaults(t) => &t.perf_events,
        }
    }

    /// What it cannot see, one line each, for the user.
    pub fn notes(&self) -> &[String] {
        &self.perf_events().notes
    }

    /// Prints its rows in `format` to `out` until Ctrl-C (`stop`), `duration`, the end of the
    /// processes or command it traces; the command's exit status when it ran one.
    pub fn run<W: Write>(
        self,
        stop: &AtomicUsize,
        duration: Option<Duration>,
        format: TableFormat,
        out: W,
    ) -> Result<Finished, Error> {
        let totals = self.perf_events().totals();
        let folded = self.tool.folded();
        let mut printer = Printer::new(format, self.tool.columns(), out);
        let p = &mut printer;
        let status = match self.opened {
            Opened::Oomkill(t) => t.run(stop, duration, p),
            Opened::Mmapsnoop(t) => t.run(stop, duration, p),
            Opened::Brkstack(t, folded) => t.run(stop, duration, folded, p),
            Opened::Shmsnoop(t) => t.run(stop, duration, p),
            Opened::Vmscan(t, interval) => t.run(stop, duration, interval, p),
            Opened::Drsnoop(t) => t.run(stop, duration, p),
            Opened::Swapin(t, interval) => t.run(stop, duration, interval, p),
            Opened::Hfaults(t) => t.run(stop, duration, p),
        }?;
        let finished = Finished {
            status,
            seen: totals.seen.load(Ordering::Relaxed),
            lost: totals.lost.load(Ordering::Relaxed),
            unseen: totals.unseen.load(Ordering::Relaxed),
        };
        // Folded stacks stay lines of `stack count` for flamegraph tools: the caller says the
        // loss on stderr, as beside CSV.
        if !folded {
            printer.loss(finished.seen, finished.lost, RING_FULL)?;
        }
        Ok(finished)
    }
}

/// Why samples are lost: the kernel found the ring full.
pub const RING_FULL: &str = "the ring was full (the kernel wrote faster than it was read)";

/// The exit status of a run that lost events: fltrace's own when the command (if any)
/// succeeded; a command's failing status is kept, the loss still said in the output.
pub const LOST_STATUS: u8 = 3;

/// The exit status of a run: the command's (as a shell gives it), else [`LOST_STATUS`] when
/// anything was lost, else 0.
pub fn exit_status(command: u8, lost: u64) -> u8 {
    if command == 0 && lost > 0 {
        LOST_STATUS
    } else {
        command
    }
}

/// How a tool's run ended.
#[derive(Debug, Clone, Copy)]
pub struct Finished {
    /// The command's exit status, when one was started.
    pub status: Option<ExitStatus>,
    /// Samples seen.
    pub seen: u64,
    /// Samples the kernel could not write (the ring was full).
    pub lost: u64,
    /// Events the tool read but could not judge (hfaults: the process had ended).
    pub unseen: u64,
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A loss makes a run that succeeded exit 3; a command's failing status is kept.
    #[test]
    fn losses_make_status_three_unless_the_command_failed() {
        assert_eq!(exit_status(0, 0), 0);
        assert_eq!(exit_status(0, 5), LOST_STATUS);
        assert_eq!(exit_status(1, 5), 1);
        assert_eq!(exit_status(137, 0), 137);
    }

    /// The name (for errors) and the phrase of the "Tracing ...." line, tool by tool.
    #[test]
    fn each_tool_says_what_it_traces() {
        let second = Duration::from_secs(1);
        let said: Vec<(&str, &str)> = [
            Tool::Oomkill,
            Tool::Mmapsnoop,
            Tool::Brkstack { folded: true },
            Tool::Shmsnoop,
            Tool::Vmscan { interval: second },
            Tool::Drsnoop,
            Tool::Swapin { interval: second },
            Tool::Hfaults,
        ]
        .iter()
        .map(|t| (t.name(), t.traces()))
        .collect();
        assert_eq!(
            said,
            [
                ("oomkill", "OOM kills"),
                ("mmapsnoop", "mmap(2) calls"),
                ("brkstack", "brk(2) calls by stack"),
                ("shmsnoop", "shared memory calls"),
                ("vmscan", "vmscan"),
                ("drsnoop", "direct and memory cgroup reclaim"),
                ("swapin", "swap-ins"),
                ("hfaults", "huge page faults per process"),
            ]
        );
    }
}
