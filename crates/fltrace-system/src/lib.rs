//! fltrace's system tools, one module per tool: the in-kernel counts ([`count`] for `count`
//! and `faults`, [`ffaults`], [`memleak`], [`triage`]) and the event tools ([`oomkill`],
//! [`mmapsnoop`], [`brkstack`], [`shmsnoop`], [`vmscan`], [`drsnoop`], [`swapin`],
//! [`hfaults`]; [`Tool`] is any of them as one request, opened and run alike). [`command`]
//! runs each as its `fltrace` command, from options to exit status.
//!
//! Two mechanisms lie under them, private to this crate. `perf_session` opens tracepoints, software
//! events or uprobes with `perf_event_open` on every CPU, for the whole system, processes and
//! their children, a command started here or a cgroup, and reads their rings in time order
//! with the side-band records that name processes and their mappings; it serves the event
//! tools and the counts of named processes with DWARF-unwound user stacks. `bpf` is one BPF
//! object (`bpf/fltrace.bpf.c`, C compiled with clang by build.rs, loaded with aya) that counts
//! in the kernel, keyed as configured at run time, and holds memleak's table of outstanding
//! allocations; its user stacks follow frame pointers. Raw tracepoint fields are decoded by
//! name through [`tracefs`]; every format is printed through [`output`] in a `fltrace_render::TableFormat`.

mod bpf;
pub mod brkstack;
mod child;
pub mod clock;
pub mod command;
pub mod count;
pub mod drsnoop;
mod error;
pub mod ffaults;
pub mod hfaults;
pub mod memleak;
pub mod mmapsnoop;
pub mod oomkill;
pub mod output;
mod perf_session;
pub mod procfs;
mod scope;
pub mod shmsnoop;
pub mod swapin;
pub mod tool;
pub mod tracefs;
pub mod triage;
pub mod vmscan;

pub use error::Error;
pub use output::{Column, Printer, Value};
pub use scope::Scope;
pub use tool::{Finished, LOST_STATUS, OpenTool, RING_FULL, Tool, exit_status};
