//! The tables of `fltrace export`: symbolized, one file each per recording, the recording (and
//! host) given by the hive partition directories they are written in.

use super::Origin;
use super::writer::{Columns, TableRow, TableWriter};
use crate::Fault;

/// A fault as `fltrace export` writes it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ExportedFault {
    /// The fault.
    pub fault: Fault,
    /// Its position among its process's faults in the recording, from 0.
    pub fault_id: u64,
    /// The address of its stack's frame that holds the call site (0 for an empty stack).
    pub call_site: u64,
}

/// One location of one frame of a stack, symbolized, as `fltrace export` writes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SymbolizedFrame {
    /// The process.
    pub pid: u32,
    /// The stack.
    pub stack_id: u32,
    /// The frame's position in the stack, innermost first, from 0.
    pub frame: u32,
    /// The location's position among those the frame's address expanded to: 0 the innermost
    /// inlined function, the last the function holding the address.
    pub inline_depth: u32,
    /// The frame's address.
    pub address: u64,
    /// The build ID of the file mapped at the address (empty when unknown).
    pub build_id: String,
    /// Function, source file, line (0 unknown) and library, as reports name them.
    pub function: String,
    /// See `function`.
    pub file: String,
    /// See `function`.
    pub line: u32,
    /// See `function`.
    pub library: String,
    /// Whether this location is its stack's call site under fltrace's rule.
    pub call_site: bool,
}

impl TableRow for ExportedFault {
    const SCHEMA: &'static str = "message fault {
  required int32 pid;
  required int64 fault_id;
  required int64 time_ns;
  required int32 tid;
  required int64 ip;
  required int64 addr;
  required int32 flags;
  required int32 stack_id;
  required int64 call_site;
}";
    const DELTA_COLUMNS: &'static [&'static str] = &["time_ns", "addr", "fault_id"];

    fn write_columns(
        c: &mut Columns<'_, '_>,
        _origin: &Origin,
        _first: u64,
        batch: &[ExportedFault],
    ) -> parquet::errors::Result<()> {
        c.i32(batch.iter().map(|f| f.fault.pid))?;
        c.i64(batch.iter().map(|f| f.fault_id))?;
        c.i64(batch.iter().map(|f| f.fault.time_ns))?;
        c.i32(batch.iter().map(|f| f.fault.tid))?;
        c.i64(batch.iter().map(|f| f.fault.ip.get()))?;
        c.i64(batch.iter().map(|f| f.fault.addr.get()))?;
        c.i32(batch.iter().map(|f| u32::from(f.fault.flags.0)))?;
        c.i32(batch.iter().map(|f| f.fault.stack_id))?;
        c.i64(batch.iter().map(|f| f.call_site))
    }
}

impl TableRow for SymbolizedFrame {
    const SCHEMA: &'static str = "message frame {
  required int32 pid;
  required int32 stack_id;
  required int32 frame;
  required int32 inline_depth;
  required int64 address;
  required binary build_id (STRING);
  required binary function (STRING);
  required binary file (STRING);
  required int32 line;
  required binary library (STRING);
  required boolean call_site;
}";
    const DELTA_COLUMNS: &'static [&'static str] = &[];

    fn write_columns(
        c: &mut Columns<'_, '_>,
        _origin: &Origin,
        _first: u64,
        batch: &[SymbolizedFrame],
    ) -> parquet::errors::Result<()> {
        c.i32(batch.iter().map(|f| f.pid))?;
        c.i32(batch.iter().map(|f| f.stack_id))?;
        c.i32(batch.iter().map(|f| f.frame))?;
        c.i32(batch.iter().map(|f| f.inline_depth))?;
        c.i64(batch.iter().map(|f| f.address))?;
        c.strings(batch.iter().map(|f| f.build_id.as_str()))?;
        c.strings(batch.iter().map(|f| f.function.as_str()))?;
        c.strings(batch.iter().map(|f| f.file.as_str()))?;
        c.i32(batch.iter().map(|f| f.line))?;
        c.strings(batch.iter().map(|f| f.library.as_str()))?;
        c.bools(batch.iter().map(|f| f.call_site))
    }
}

/// Writes the faults table of `fltrace export`.
pub type ExportedFaultWriter = TableWriter<ExportedFault>;

/// Writes the frames table of `fltrace export`.
pub type SymbolizedFrameWriter = TableWriter<SymbolizedFrame>;
