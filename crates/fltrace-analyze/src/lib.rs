//! Turning a trace into answers: symbolized call stacks, faults grouped by call site, function,
//! line or library, and how few code locations cover most faults; with allocations recorded,
//! the blocks they made, totals per allocation site, and which block each fault landed in.
//!
//! Symbolization reads DWARF (with inlined frames expanded) through blazesym, from the files
//! named in the trace's mapping table, so it works after the program has exited. Return
//! addresses are looked up one byte back, so that a caller's line is the line of its call.
//! Stripped binaries fall back to their symbol tables; unknown addresses stay unknown.
//!
//! ```no_run
//! # fn main() -> Result<(), fltrace_trace::Error> {
//! use fltrace_analyze::{GroupBy, Symbolizer, group_faults};
//! let recording = fltrace_trace::Recording::latest(".".as_ref())?;
//! let trace = recording.load(recording.pids()[0])?;
//! let mut symbolizer = Symbolizer::new();
//! let stacks = symbolizer.resolve_stacks(&trace);
//! let groups = group_faults([(&trace.faults[..], &stacks)], GroupBy::Line);
//! for group in groups.iter().take(5) {
//!     println!("{} {}", group.count, group.key.location.function);
//! }
//! # Ok(())
//! # }
//! ```

mod allocs;
mod group;
mod ranges;
mod symbolize;

pub use allocs::{
    AllocStats, AllocTotals, Block, BlockKind, Lifetimes, SizeHistogram, attribute_faults,
    exec_times, trace_end_ns,
};
pub use group::{
    AllocGroup, AllocSiteGroup, AllocSource, Group, GroupBy, GroupKey, call_site, coverage,
    group_allocs, group_faults, group_faults_by_alloc_site,
};
pub use ranges::{MappingIndex, mapping_label, named_regions};
pub use symbolize::{Location, ResolvedStacks, Symbolizer};
