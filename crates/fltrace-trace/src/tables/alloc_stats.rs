//! `fltrace-data-allocstats-<pid>.parquet`: what pairing a process's allocation calls found,
//! per stack, written by the recorder as it converts the calls (heaptrack's interpreter pairs
//! at record time too): calls, bytes, leaks, temporary allocations and what each stack held
//! at the heap's peak, and in the footer the process's peak, its sizes, and what was paired
//! how. `report --allocs` and `--leaks` read these instead of every call.
//!
//! The pairing itself is the analysis crate's, handed to the conversion as a [`PairCalls`]:
//! the numbers are those a report's own pass over the calls gives, which the tests check on
//! every workload.

use std::path::Path;

use super::Origin;
use super::reader::{GroupColumns, ReadRow, RowGroups};
use super::writer::{Columns, TableRow, TableWriter};
use crate::{AllocEvent, Error};

/// Pairs a process's allocation calls as its conversion writes them, in time order: the
/// report's pass, run at record time.
pub trait PairCalls: Send {
    /// The process exec'd at `time_ns`: its blocks end there (called before the events of
    /// the new image).
    fn exec(&mut self, time_ns: u64);
    /// The next events, in time order.
    fn events(&mut self, events: &[AllocEvent]);
    /// What the pairing found; `None` when it could not take the events (out of order).
    fn finish(self: Box<Self>) -> Option<AllocPassSummary>;
}

/// Makes a [`PairCalls`] for each process converted.
pub type PairingFactory = std::sync::Arc<dyn Fn() -> Box<dyn PairCalls> + Send + Sync>;

/// What one stack's calls came to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct AllocStackStats {
    /// The stack in the allocation stacks table.
    pub stack_id: u32,
    /// Whether its blocks are mappings (else heap blocks).
    pub mapping: bool,
    /// Blocks made (the remnants of cut mappings are not new ones).
    pub allocs: u64,
    /// Their bytes.
    pub bytes: u64,
    /// Calls that failed.
    pub failed: u64,
    /// Blocks alive at the end.
    pub leaked_allocs: u64,
    /// Their bytes.
    pub leaked_bytes: u64,
    /// Temporary allocations (heaptrack's rule).
    pub temporary: u64,
    /// Heap bytes alive at the heap's peak.
    pub peak_bytes: u64,
    /// Heap blocks alive then.
    pub peak_allocs: u64,
    /// The most heap bytes of the stack alive at once.
    pub most_live_bytes: u64,
}

/// What pairing one process's calls found: [`AllocStackStats`] per stack and the process's
/// figures.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct AllocPassSummary {
    /// Per stack, by id.
    pub stacks: Vec<AllocStackStats>,
    /// When the heap peaked, ns since the epoch.
    pub peak_ns: u64,
    /// Its bytes then.
    pub peak_bytes: u64,
    /// Frees of addresses no live block started at.
    pub unknown_frees: u64,
    /// Blocks handed out over live ones.
    pub overlaps: u64,
    /// The time of the last call.
    pub last_event_ns: u64,
    /// Blocks alive at the end.
    pub live_blocks: u64,
    /// The heap allocations' sizes: `(bucket, count, bytes)` per non-empty power-of-two
    /// bucket (bucket 0 holds size 0, bucket k sizes from 2^(k-1) to 2^k - 1).
    pub heap_sizes: Vec<(u32, u64, u64)>,
    /// The execs the pairing ended every block at, ns since the epoch.
    pub execs: Vec<u64>,
}

/// Footer keys of the table.
mod key {
    pub const PEAK_NS: &str = "fltrace.alloc_peak_ns";
    pub const PEAK_BYTES: &str = "fltrace.alloc_peak_bytes";
    pub const UNKNOWN_FREES: &str = "fltrace.alloc_unknown_frees";
    pub const OVERLAPS: &str = "fltrace.alloc_overlaps";
    pub const LAST_EVENT_NS: &str = "fltrace.alloc_last_event_ns";
    pub const LIVE_BLOCKS: &str = "fltrace.alloc_live_blocks";
    /// `bucket:count:bytes` of each non-empty bucket, separated by spaces.
    pub const HEAP_SIZES: &str = "fltrace.alloc_heap_sizes";
    /// The exec times, separated by spaces.
    pub const EXECS: &str = "fltrace.alloc_execs";
}

impl TableRow for AllocStackStats {
    const SCHEMA: &'static str = "message alloc_stats {
  required binary recording (STRING);
  required int32 pid;
  required int32 stack_id;
  required binary memory (STRING);
  required int64 allocs;
  required int64 bytes;
  required int64 failed;
  required int64 leaked_allocs;
  required int64 leaked_bytes;
  required int64 temporary;
  required int64 peak_bytes;
  required int64 peak_allocs;
  required int64 most_live_bytes;
}";
    const DELTA_COLUMNS: &'static [&'static str] = &[];

    fn write_columns(
        c: &mut Columns<'_, '_>,
        origin: &Origin,
        _first: u64,
        batch: &[AllocStackStats],
    ) -> parquet::errors::Result<()> {
        c.origin(origin, batch.len())?;
        c.i32(batch.iter().map(|s| s.stack_id))?;
        c.strings(
            batch
                .iter()
                .map(|s| if s.mapping { "mapping" } else { "heap" }),
        )?;
        c.i64(batch.iter().map(|s| s.allocs))?;
        c.i64(batch.iter().map(|s| s.bytes))?;
        c.i64(batch.iter().map(|s| s.failed))?;
        c.i64(batch.iter().map(|s| s.leaked_allocs))?;
        c.i64(batch.iter().map(|s| s.leaked_bytes))?;
        c.i64(batch.iter().map(|s| s.temporary))?;
        c.i64(batch.iter().map(|s| s.peak_bytes))?;
        c.i64(batch.iter().map(|s| s.peak_allocs))?;
        c.i64(batch.iter().map(|s| s.most_live_bytes))
    }
}

impl ReadRow for AllocStackStats {
    fn read_group(c: &mut GroupColumns<'_>) -> Result<Vec<AllocStackStats>, Error> {
        let (stack_id, memory) = (c.u32s("stack_id")?, c.strings("memory")?);
        let (allocs, bytes, failed) = (c.u64s("allocs")?, c.u64s("bytes")?, c.u64s("failed")?);
        let (leaked_allocs, leaked_bytes) = (c.u64s("leaked_allocs")?, c.u64s("leaked_bytes")?);
        let temporary = c.u64s("temporary")?;
        let (peak_bytes, peak_allocs) = (c.u64s("peak_bytes")?, c.u64s("peak_allocs")?);
        let most_live_bytes = c.u64s("most_live_bytes")?;
        (0..stack_id.len())
            .map(|i| {
                let mapping = match memory[i].as_str() {
                    "heap" => false,
                    "mapping" => true,
                    other => return Err(c.error(format!("unknown memory {other:?}"))),
                };
                Ok(AllocStackStats {
                    stack_id: stack_id[i],
                    mapping,
                    allocs: allocs[i],
                    bytes: bytes[i],
                    failed: failed[i],
                    leaked_allocs: leaked_allocs[i],
                    leaked_bytes: leaked_bytes[i],
                    temporary: temporary[i],
                    peak_bytes: peak_bytes[i],
                    peak_allocs: peak_allocs[i],
                    most_live_bytes: most_live_bytes[i],
                })
            })
            .collect()
    }
}

fn joined<T: std::fmt::Display>(values: impl IntoIterator<Item = T>) -> String {
    values
        .into_iter()
        .map(|v| v.to_string())
        .collect::<Vec<_>>()
        .join(" ")
}

/// Writes `fltrace-data-allocstats-<pid>.parquet`: `summary` of process and recording
/// `origin`, in one go.
pub fn write_alloc_stats(
    path: &Path,
    origin: Origin,
    summary: &AllocPassSummary,
) -> Result<(), Error> {
    let footer: Vec<(String, String)> = [
        (key::PEAK_NS, summary.peak_ns.to_string()),
        (key::PEAK_BYTES, summary.peak_bytes.to_string()),
        (key::UNKNOWN_FREES, summary.unknown_frees.to_string()),
        (key::OVERLAPS, summary.overlaps.to_string()),
        (key::LAST_EVENT_NS, summary.last_event_ns.to_string()),
        (key::LIVE_BLOCKS, summary.live_blocks.to_string()),
        (
            key::HEAP_SIZES,
            joined(
                summary
                    .heap_sizes
                    .iter()
                    .map(|(b, count, bytes)| format!("{b}:{count}:{bytes}")),
            ),
        ),
        (key::EXECS, joined(&summary.execs)),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v))
    .collect();
    let mut writer = TableWriter::with_footer(path, origin, &footer)?;
    for &stack in &summary.stacks {
        writer.push(stack)?;
    }
    writer.finish()
}

/// Reads an allocation stats file.
pub fn read_alloc_stats(path: &Path) -> Result<AllocPassSummary, Error> {
    let groups: RowGroups<AllocStackStats> = RowGroups::open_table(path)?;
    let metadata = groups.metadata();
    let bad = |what: &str| Error::Format {
        path: path.to_owned(),
        message: format!("{what} missing or unreadable in the footer"),
    };
    let get = |k: &str| -> Result<String, Error> {
        metadata
            .iter()
            .find(|(key, _)| key == k)
            .map(|(_, v)| v.clone())
            .ok_or_else(|| bad(k))
    };
    let number = |k: &str| -> Result<u64, Error> { get(k)?.parse().map_err(|_| bad(k)) };
    let heap_sizes = get(key::HEAP_SIZES)?
        .split_whitespace()
        .map(|entry| {
            let mut parts = entry.split(':').map(str::parse::<u64>);
            match (parts.next(), parts.next(), parts.next(), parts.next()) {
                (Some(Ok(b)), Some(Ok(count)), Some(Ok(bytes)), None) if b <= 64 => {
                    Ok((b as u32, count, bytes))
                }
                _ => Err(bad(key::HEAP_SIZES)),
            }
        })
        .collect::<Result<Vec<_>, Error>>()?;
    let execs = get(key::EXECS)?
        .split_whitespace()
        .map(|t| t.parse().map_err(|_| bad(key::EXECS)))
        .collect::<Result<Vec<u64>, Error>>()?;
    Ok(AllocPassSummary {
        peak_ns: number(key::PEAK_NS)?,
        peak_bytes: number(key::PEAK_BYTES)?,
        unknown_frees: number(key::UNKNOWN_FREES)?,
        overlaps: number(key::OVERLAPS)?,
        last_event_ns: number(key::LAST_EVENT_NS)?,
        live_blocks: number(key::LIVE_BLOCKS)?,
        heap_sizes,
        execs,
        stacks: groups.read_all()?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tables::read_origin;

    /// A summary comes back as written: every stack's figures, the largest values, the
    /// footer's figures, sizes and execs.
    #[test]
    fn alloc_stats_round_trip() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s.parquet");
        let summary = AllocPassSummary {
            stacks: (0..3)
                .map(|i| AllocStackStats {
                    stack_id: i,
                    mapping: i == 1,
                    allocs: 10 + u64::from(i),
                    bytes: u64::MAX - u64::from(i),
                    failed: 1,
                    leaked_allocs: 2,
                    leaked_bytes: 3,
                    temporary: 4,
                    peak_bytes: 5,
                    peak_allocs: 6,
                    most_live_bytes: 7,
                })
                .collect(),
            peak_ns: 1_700_000_000_000_000_000,
            peak_bytes: 1 << 40,
            unknown_frees: 3,
            overlaps: 1,
            last_event_ns: 1_700_000_001_000_000_000,
            live_blocks: 1026,
            heap_sizes: vec![(0, 1, 0), (5, 124_999, 2_937_476), (64, 1, u64::MAX)],
            execs: vec![1_700_000_000_500_000_000, 1_700_000_000_600_000_000],
        };
        let origin = Origin::new("1-2", 3);
        write_alloc_stats(&path, origin.clone(), &summary).unwrap();
        assert_eq!(read_alloc_stats(&path).unwrap(), summary);
        assert_eq!(read_origin(&path).unwrap(), Some(origin));
    }
}
