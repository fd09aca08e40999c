//! Turning a trace into answers: symbolized call stacks, faults grouped by call site, function,
//! line or library, and how few code locations cover most faults.
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

mod group;
mod symbolize;

pub use group::{Group, GroupBy, GroupKey, call_site, coverage, group_faults};
pub use symbolize::{Location, ResolvedStacks, Symbolizer};
