//! The memory chapter's low-rate event tools, as library functions the `fltrace` binary
//! prints: `oomkill`, `mmapsnoop`, `brkstack`, `shmsnoop`, `vmscan`, `drsnoop`, `swapin` and
//! `hfaults`.
//!
//! Every tool is built on `perf_event_open` on tracepoints (or a software event), opened on
//! every CPU system-wide, for given processes and their children, for a command started here,
//! or for a cgroup; no BPF and no kprobes. Raw fields are decoded by name through the
//! tracepoint's `format` file, read at run time ([`format`]). The shared machinery (opening,
//! reading the rings in time order, side-band records for process names and mappings, stop
//! conditions) is in [`session`]; the tables, CSV and JSON lines in [`output`].
//! [`Tool`] is any of the tools as one request, opened and run alike.

pub mod brkstack;
pub mod counting;
pub mod drsnoop;
mod error;
pub mod format;
pub mod hfaults;
pub mod mmapsnoop;
pub mod oomkill;
pub mod output;
pub mod procfs;
pub mod session;
pub mod shmsnoop;
pub mod stackcount;
pub mod swapin;
pub mod tool;
pub mod unwound;
pub mod vmscan;

pub use error::Error;
pub use output::{Column, Format, Printer, Value};
pub use session::{Options, Record, Sample, Scope, Session, Source, StackMode, Target};
pub use tool::{Finished, LOST_STATUS, OpenTool, RING_FULL, Tool, exit_status};
