//! The in-kernel mechanism: one BPF object (`bpf/fltrace.bpf.c`, C compiled with clang at
//! build time, loaded with aya) holds a generic counting program, attachable to any
//! tracepoint, software perf event or uprobe and keyed as configured at run time (task name,
//! process, thread, user or kernel stack, raw tracepoint fields at offsets read from tracefs),
//! and memleak's table of outstanding allocations. User stacks taken in the kernel follow
//! frame pointers only.

mod counter;
pub(crate) mod event;
pub(crate) mod object;
mod symbols;
pub(crate) mod watch;

pub use counter::{
    By, Counter, CounterSpec, ProcessFilter, Row, Snapshot, expand_events, fault_events_for,
};
pub(crate) use counter::{
    attach_uprobe, fault_events, fill_tgids, process_config, set_config, stack_frames,
    start_announcements, totals,
};
pub use event::{Event, FieldFilter};
pub(crate) use symbols::Announcements;
pub use symbols::{Frame, ProcessMaps, StackNames};
