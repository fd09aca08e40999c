//! Turning a trace into answers: symbolized call stacks, faults grouped by call site, function,
//! line or library, and how few code locations cover most faults; with allocations recorded,
//! the blocks they made, totals per allocation site, and which block each fault landed in;
//! two recordings side by side; and the faults as folded stacks, perf script text and pprof.
//!
//! Symbolization reads DWARF (with inlined frames expanded) through blazesym, from the files
//! named in the trace's mapping table, so it works after the program has exited. Return
//! addresses are looked up one byte back, so that a caller's line is the line of its call.
//! Binaries without debug info fall back to their symbol tables (names demangled by their
//! scheme), stripped ones to `binary+0xADDR`.
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

mod alloc_lifetimes;
mod alloc_timeline;
mod allocation_report;
mod allocators;
mod archive;
mod call_tree;
mod counts;
mod dataset;
mod debuginfo;
mod diff;
mod export;
mod fault_report;
mod fde;
mod group;
mod heat;
mod listing;
mod load;
mod names;
mod opened;
mod pairing;
mod pprof;
mod range_map;
mod report_mode;
mod symbolize;
#[cfg(test)]
mod test_support;
mod threads;
mod top;
mod tracer;

pub use alloc_lifetimes::{
    AllocBlock, AllocPass, AllocSiteTotals, AllocStats, BlockHit, BlockKind, LargeBlock,
    LiveStackFigures, OutOfOrder, PassTotals, SizeHistogram, exec_times, trace_end_ns,
};
// The whole-table oracle and what takes its blocks: for tests only (the `oracle` feature).
#[cfg(any(test, feature = "oracle"))]
pub use alloc_lifetimes::{Lifetimes, attribute_faults};
pub use alloc_timeline::{
    AllocSeries, AllocTimeline, CHART_INTERVALS, CHART_SITES, Interval, MIN_STEP_NS, Timeline,
    alloc_timeline,
};
#[cfg(any(test, feature = "oracle"))]
pub use allocation_report::largest_blocks;
pub use allocation_report::{
    AllocProcess, AllocSummary, FaultsByAllocSite, StreamedAllocs, alloc_processes,
    group_process_allocs, last_fault_ns, leak_age_ns, merge_same_lines, rank_allocs, stream_allocs,
    stream_allocs_over, stream_largest_blocks, sum_totals,
};
#[cfg(any(test, feature = "oracle"))]
pub use allocators::detect_allocators;
pub use allocators::{
    BUILTIN_ALLOCATORS, CONFIG_ENV, FrameRules, RulesError, SkipReason, Skipped, apply_rules,
    default_config_path, detect_allocators_counted, plural,
};
pub use archive::{
    ArchiveError, ArchiveLoadError, ArchiveSummary, ArchiveWriteError, ArchivedFile, archive,
    archive_to, traces_to_archive,
};
pub use call_tree::{CallNode, CallOrder, CallTree, call_tree};
pub use counts::{FaultCounts, Tally};
pub use dataset::{
    EXPORT_FAULTS, EXPORT_FRAMES, ExportedRecording, HostError, export_dataset, export_host,
};
pub use debuginfo::{ARCHIVE_DIR, DebugConfig, DebugFiles, DebugResolver};
pub use diff::{DiffBy, DiffRow, ThreadDiffRow, diff_groups, diff_thread_groups};
pub use export::{
    CountedSource, ReportFileError, SCRIPT_EVENT, Source, folded, folded_counts, frame_name,
    percent, process_name, process_name_in, process_names, stack_field, thread_name,
    truncated_share, without_parameters, write_folded_counts, write_original_report,
    write_original_reports, write_script,
};
pub use fault_report::{COVER_SHARE, FaultReport, rows_shown, take_top};
pub use group::{
    AllocGroup, AllocSiteGroup, FaultOrigin, Group, GroupBy, GroupKey, OriginCounts, OriginSource,
    call_site, count_faults_by_stack, coverage, group_allocs, group_fault_counts, group_faults,
    group_origins_by_alloc_site,
};
#[cfg(any(test, feature = "oracle"))]
pub use group::{
    AllocSource, count_faults_by_origin, count_origins, fault_origins, group_faults_by_alloc_site,
};
#[cfg(any(test, feature = "oracle"))]
pub use heat::largest_labelled_blocks;
pub use heat::{
    AccessHeat, FaultSelection, HeatInputError, HeatRange, HeatSource, LabelledBlock, RangeHeat,
    access_samples_in, heat_access_samples, heat_blocks, heat_faults, heat_input,
    heat_process_names, heat_range_trace, heat_ranges, labelled_blocks, site_label,
};
pub use listing::{
    RecordingSummary, data_file_pid, list_recordings, recording_line, summarize, utc_time,
};
pub use load::{
    AllocStacks, FaultsHeld, LoadError, LoadOptions, Loaded, NO_ALLOCS, OutsideRecording,
    archive_note, debug_config, fault_span_s, find_recording, find_recording_salvaging, load,
    outside_window, salvage_warning, unfinished_notes, window_ns,
};
#[cfg(any(test, feature = "oracle"))]
pub use load::{WHOLE_TABLE_ENV, whole_table};
pub use names::demangle;
pub use opened::{OpenError, OpenedRecording, archive_file, is_archive_file_name, pack};
pub use pairing::{RecordTimePairing, record_time_pairing};
pub use pprof::{write_pprof, write_pprof_counts};
pub use range_map::{MappingIndex, mapping_label, named_regions, range_heat};
pub use report_mode::{ReportBy, ReportFlags, ReportFlagsError, ReportMode};
pub use symbolize::{
    CallSite, Location, ResolvedFrame, ResolvedStacks, Symbolizer, TRUNCATED_FRAME,
};
pub use threads::{ThreadBy, ThreadFilter, ThreadGroup, group_faults_by_thread};
pub use top::{
    AllocHeadline, Counts, FarFigures, LiveTop, TopOptions, TopRow, TopSnapshot, TopSort, TopView,
};
pub use tracer::{separate_tracer, separate_tracer_counts};
