//! fltrace's BPF layer: the memory chapter's high-rate tools, counted in the kernel.
//!
//! One BPF object (`bpf/fltrace.bpf.c`, C compiled with clang at build time, loaded with aya)
//! holds a generic counting program, attachable to any tracepoint, software perf event or
//! uprobe and keyed as configured at run time (task name, process, thread, user or kernel
//! stack, raw tracepoint fields at offsets read from tracefs), and memleak's table of
//! outstanding allocations. User stacks taken in the kernel follow frame pointers only.

mod counter;
mod error;
pub mod event;
pub mod files;
pub mod memleak;
mod object;
pub mod output;
pub mod reclaim;
mod symbols;
pub mod tracefs;
pub mod triage;
pub mod watch;

pub use counter::{
    By, CountSpec, Counter, ProcessFilter, Row, Snapshot, expand_events, fault_events,
    fault_events_for, fault_tracepoints,
};
pub use error::Error;
pub use event::{Event, FieldFilter, Op};
pub use symbols::{Frame, Kallsyms, ProcessMaps, StackNames};
