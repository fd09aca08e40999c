//! Live capture of page faults with complete user call stacks.
//!
//! A BPF program on the `exceptions:page_fault_user` and `exceptions:page_fault_kernel`
//! tracepoints (the latter for faults the kernel takes on user memory, as in `read(2)` into a
//! fresh buffer) copies each fault of the traced process tree with its user registers and the
//! live part of its thread's stack into one ring shared by all CPUs ([`bpf`]); perf events
//! per CPU carry the side band (mappings, names, forks, exits), all rings within one budget
//! ([`budget`]). Where BPF is missing, or a fixed copy is asked for, the tracepoints are perf
//! events per CPU with a copy of the top of the stack in each sample. The recorder unwinds
//! every sample at once with the DWARF CFI of the mapped binaries (framehop), deduplicates the
//! stacks and writes the trace files of [`fltrace_trace`]; raw stack copies never reach the
//! disk.
//!
//! What it does not do: hardware access sampling, or anything that needs kprobes.
//!
//! ```no_run
//! use std::sync::atomic::AtomicUsize;
//! # fn main() -> Result<(), fltrace_capture::Error> {
//! let options = fltrace_capture::Options::new(".".into());
//! let target = fltrace_capture::Target::Command(vec!["ls".into()]);
//! let stop = AtomicUsize::new(0);
//! let summary = fltrace_capture::record(&target, &options, &stop, |_| {})?;
//! println!("{} faults, {} lost", summary.faults, summary.lost);
//! # Ok(())
//! # }
//! ```

pub mod access;
mod alloc_spool;
pub mod bpf;
pub mod budget;
mod child;
mod code_cache;
pub mod damon;
mod error;
mod interrupt;
mod jit_files;
pub mod live;
mod os;
pub mod pages;
pub mod perf;
pub(crate) mod perf_abi;
mod pid_filing;
mod process;
mod process_group;
pub mod procfs;
pub mod reach;
mod reader;
mod recorder;
mod request;
pub(crate) mod ring;
mod runtime;
mod summary;
mod target;
pub mod unemulated;
pub mod unwind;
mod uprobes;
mod user;
pub mod wss;

pub use alloc_spool::{
    AllocLogs, Converted, Recovered, SPOOL_PREFIX, SpoolLogs, recover_stale_spools,
};
pub use child::{ChildGuard, shell_status};
pub use code_cache::CacheSummary;
pub use error::Error;
pub use interrupt::interrupt_counter;
pub use live::{
    LiveBatch, LiveDropped, LiveEvent, LiveFault, LiveFeed, LiveReceiver, LiveTotals, live_feed,
    live_feed_holding,
};
pub use os::{Reaped, monotonic_now_ns, reap};
pub use process_group::CommandGroup;
pub use recorder::attach_tasks;
pub use recorder::{
    AllocTracing, DEFAULT_BUDGET_MB, DEFAULT_STACK_BYTES, DEFAULT_STACK_CAP, Ending, Options,
    Pairing, Progress, RECORDING_FAILED, RecordingOutcome, StackCopy, Target, record,
};
pub use request::{Facilities, Request, RequestError, ThisMachine};
/// The system page size.
pub use ring::page_size;
pub use runtime::{
    EvictionPolicy, FarMemory, FaultPath, HeapBacking, PRELOAD_LIBRARY, find_preload_library,
    preload_value,
};
pub use summary::{SummaryContext, SummaryLine, signal_name};
pub use target::{Credentials, PendingChild};
pub use uprobes::available as uprobes_available;
pub use uprobes::{
    FunctionMissing, LiveAllocs, LiveOptions, OutstandingBlocks, OutstandingStack, function_offsets,
};
