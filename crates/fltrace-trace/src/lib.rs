//! The fltrace trace files: what a recording leaves on disk and how to read it back.
//!
//! A recording writes, per traced process `<pid>`, into one directory:
//!
//! | file | content |
//! | --- | --- |
//! | `fltrace-data-faults-<pid>.parquet` | one row per page fault ([`Fault`]) |
//! | `fltrace-data-stacks-<pid>.parquet` | the deduplicated call stacks the faults refer to ([`Stack`]) |
//! | `fltrace-data-mmaps-<pid>.parquet` | every mapping as it appeared, with build IDs ([`Mapping`]) |
//! | `fltrace-data-procmaps-<pid>.out` | the same mappings in `/proc/PID/maps` format |
//! | `fltrace-data-stats-<pid>.out` | `<unix time> name:value,...` counter lines ([`stats`]) |
//! | `fltrace-data-allocs-<pid>.parquet` | with `--allocs`: every allocator and mapping call ([`AllocEvent`]) |
//! | `fltrace-data-allocstacks-<pid>.parquet` | with `--allocs`: the stacks of those calls ([`Stack`]) |
//! | `fltrace-data-allocsums-<pid>.parquet` | with `--allocs`: calls and bytes per stack, call and size ([`AllocTotal`]) |
//! | `fltrace-data-access-<pid>.parquet` | with `--access-samples`: sampled loads and stores ([`AccessRecord`]) |
//! | `fltrace-data-accessstacks-<pid>.parquet` | their stacks ([`Stack`]) |
//! | `fltrace-data-perfmap-<pid>.map` | the perf map its JIT wrote (`/tmp/perf-PID.map`), copied at its end ([`PerfMap`]) |
//! | `fltrace-data-jitdump-<pid>.dump` | the jitdump its JIT wrote (`jit-PID.dump`), copied at its end ([`JitDump`]) |
//!
//! `docs/FORMAT.md` documents the schemas. This crate needs no privileges and no live kernel
//! feature: it only reads and writes files, so traces can be analysed on any machine.
//!
//! ```no_run
//! # fn main() -> Result<(), fltrace_trace::Error> {
//! let dir = std::path::Path::new(".");
//! let recording = fltrace_trace::Recording::latest(dir)?;
//! for &pid in recording.pids() {
//!     let trace = recording.load(pid)?;
//!     println!("{pid}: {} faults", trace.faults.len());
//! }
//! # Ok(())
//! # }
//! ```

mod access;
mod address;
mod alloc_event;
pub mod build_id_cache;
pub mod checksums;
mod error;
mod fault;
pub mod files;
mod guard;
pub mod jitdump;
pub mod libraries;
pub mod live;
mod mapping;
pub mod perf_map;
mod range_trace;
mod recording;
pub mod spool;
pub use spool::thread_cpu;
pub mod stats;
mod tables;

pub use access::AccessRecord;
pub use address::{CodeAddr, FileOffset, PhysAddr, VirtAddr};
pub use alloc_event::{ALLOC_CLOCK_TICK_NS, AllocCall, AllocEvent, AllocTotal, AllocTotals};
pub use build_id_cache::BuildIdCache;
pub use error::{Error, error_chain};
pub use fault::{Fault, FaultFlags, FaultKey, FaultKind};
pub use jitdump::JitDump;
pub use mapping::{Mapping, parse_procmaps_line, write_procmaps_line};
pub use perf_map::PerfMap;
pub use range_trace::{
    RangeSample, RangeTraceKind, RangeTraceWriter, WSS_HEADER, WssRow, WssRows, read_range_trace,
};
pub use recording::{
    ProcessTrace, Recording, RecordingId, UnfinishedTable, Unreadable, format_thread_names, keys,
    main_thread_names,
};
pub use tables::{
    AccessWriter, AllocPassSummary, AllocRowGroups, AllocStackStats, AllocWriter, ColumnChunk,
    Completeness, ExportedFault, ExportedFaultWriter, FORMAT_VERSION, FaultRowGroups, FaultWriter,
    MappingWriter, Metadata, Origin, PairCalls, PairingFactory, RowGroups, StackWriter,
    SymbolizedFrame, SymbolizedFrameWriter, TableWriter, column_chunks, completeness, read_access,
    read_alloc_stats, read_alloc_totals, read_allocs, read_faults, read_mappings, read_origin,
    read_stacks, table_rows, time_range, write_alloc_stats, write_alloc_totals,
};

/// A deduplicated call stack: frame addresses from the innermost (the faulting instruction)
/// outwards, the first an instruction address and the others return addresses.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Stack {
    /// The id that [`Fault::stack_id`] refers to.
    pub id: u32,
    /// The address-space generation the addresses belong to (incremented by each exec).
    pub generation: u32,
    /// Innermost first.
    pub frames: Vec<CodeAddr>,
    /// Whether the frames reach the thread's entry.
    pub end: StackEnd,
}

/// Whether a stack holds every frame of its thread, from the innermost to the thread's entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum StackEnd {
    /// Not classified: a recording older than the classification, or a stack fltrace did not
    /// unwind itself (the kernel's frame-pointer callchains, allocation stacks).
    #[default]
    Unknown,
    /// It reaches the thread's entry (`_start`, the loader's entry, a `clone` child's start)
    /// or the unwinder found no caller beyond its outermost frame.
    Complete,
    /// Outer frames are missing: the unwind stopped mid-stack (the stack copy ended and the
    /// live stack could not be read, no unwind rule, a word that is no return address) or at
    /// the frame limit.
    Truncated,
}

impl StackEnd {
    /// The value of the stacks table's `stack_end` column.
    pub fn code(self) -> u32 {
        match self {
            StackEnd::Unknown => 0,
            StackEnd::Complete => 1,
            StackEnd::Truncated => 2,
        }
    }

    /// The classification a `stack_end` value stands for; unknown values read as unknown.
    pub fn from_code(code: u32) -> StackEnd {
        match code {
            1 => StackEnd::Complete,
            2 => StackEnd::Truncated,
            _ => StackEnd::Unknown,
        }
    }
}
