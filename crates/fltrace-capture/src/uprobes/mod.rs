//! `record --allocs -p PID`: the allocations of a running process, through uprobes on its C
//! library's allocator (as bcc's memleak does). A process fltrace did not start cannot be given
//! the preloaded tracer, but the kernel can stop it at `malloc` and at its return.
//!
//! Each entry probe samples the argument registers and the user stack (unwound here with the
//! recorder's DWARF unwinder); each return probe samples the result. Entry and return are
//! paired per thread. This costs a few microseconds per call, far more than the preloaded
//! tracer: it is for looking into a process that is already running.
//!
//! The probes are placed and drained in [`probes`], over the mappings of [`address_space`];
//! the paired calls go to the recording's tables ([`alloc_tables`]) or to memleak's table of
//! live blocks ([`live_allocs`]).

use std::path::{Path, PathBuf};

use object::{Object, ObjectSegment, ObjectSymbol};

use fltrace_trace::{AllocCall, AllocEvent, Origin};

use crate::live::LiveAllocSink;
use crate::reader::ReaderThread;
use crate::{Converted, Error};

mod address_space;
mod alloc_tables;
mod live_allocs;
mod probes;
mod tracefs_probes;

pub use live_allocs::{LiveAllocs, LiveOptions, OutstandingBlocks, OutstandingStack};
use probes::Probes;
pub use tracefs_probes::TracefsUprobes;

/// x86_64 perf register numbers of the argument and result registers.
pub(super) const REG_AX: u64 = 0;
pub(super) const REG_DX: u64 = 3;
pub(super) const REG_SI: u64 = 4;
pub(super) const REG_DI: u64 = 5;

/// Bytes of user stack copied at each entry probe.
pub(super) const STACK_BYTES: u32 = 8192;

/// Ring buffer pages per CPU: 16 MiB, two thousand entry samples.
pub(super) const RING_PAGES: usize = 4096;

/// Ring buffer pages per CPU for `memleak`: 64 MiB, eight thousand entry samples, so that a
/// burst of allocations waits in the ring while the reader unwinds rather than being lost.
pub(super) const LIVE_RING_PAGES: usize = 16384;

/// The probed functions: name, call, and whether a return probe is needed for the result.
pub(super) const PROBES: [(&str, AllocCall, bool); 9] = [
    ("malloc", AllocCall::Malloc, true),
    ("calloc", AllocCall::Calloc, true),
    ("realloc", AllocCall::Realloc, true),
    ("free", AllocCall::Free, false),
    ("posix_memalign", AllocCall::PosixMemalign, true),
    ("aligned_alloc", AllocCall::AlignedAlloc, true),
    ("memalign", AllocCall::Memalign, true),
    ("valloc", AllocCall::Valloc, true),
    ("pvalloc", AllocCall::Pvalloc, true),
];

/// Whether this kernel offers uprobes as a perf event source.
pub fn available() -> bool {
    Path::new("/sys/bus/event_source/devices/uprobe/type").is_file()
}

/// Allocation tracing of a running process, in a thread of its own until [`Self::finish`].
pub struct AttachedAllocs(ReaderThread<Converted>);

impl AttachedAllocs {
    /// Places the probes on `pid`'s C library for each of its threads (and the threads they
    /// start), writing into `dir` when finished; `live`: a live view is told of the calls
    /// as they are read (every [`LIVE_EVERY`](alloc_tables::LIVE_EVERY)).
    pub fn start(
        pid: i32,
        tasks: &[i32],
        dir: &Path,
        mono_offset: u64,
        recording: &str,
        live: Option<LiveAllocSink>,
    ) -> Result<AttachedAllocs, Error> {
        let probes = Probes::open(pid, tasks, RING_PAGES, 1)?;
        let dir = dir.to_owned();
        let origin = Origin::new(recording, pid as u32);
        ReaderThread::spawn("fltrace-uprobes", "the uprobe reader", move |stop| {
            probes.run(stop, &dir, origin, mono_offset, live)
        })
        .map(AttachedAllocs)
    }

    /// Stops reading, writes the tables and says what they hold.
    pub fn finish(self) -> Result<Converted, Error> {
        self.0.finish()
    }
}

fn kernel(what: &'static str) -> impl FnOnce(std::io::Error) -> Error {
    Error::kernel(what)
}

/// The library whose allocator `pid` uses, and the file offsets of its allocator's functions:
/// a malloc replacement it links (jemalloc, as Debian's redis-server does; tcmalloc,
/// mimalloc), whose `malloc` the program's calls bind to, else its C library. (Probes on the C
/// library of a jemalloc program saw no call at all.)
fn allocator_of(pid: i32) -> Result<(PathBuf, Vec<(usize, u64)>), Error> {
    let paths: Vec<String> = crate::procfs::mappings(pid)
        .map_err(|source| Error::Attach { pid, source })?
        .into_iter()
        .map(|m| m.path)
        .collect();
    let named = |prefixes: &[&str]| {
        paths.iter().find(|p| {
            Path::new(p)
                .file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| prefixes.iter().any(|prefix| n.starts_with(prefix)))
        })
    };
    let path = named(&["libjemalloc.so", "libtcmalloc", "libmimalloc"])
        .or_else(|| named(&["libc.so", "libc-"]))
        .cloned()
        .ok_or_else(|| Error::Attach {
            pid,
            source: std::io::Error::other(
                "it has no C library loaded (a static program?): nothing to probe",
            ),
        })?;
    // Through the process's root, as it sees the file.
    let file = PathBuf::from(format!("/proc/{pid}/root{path}"));
    let names: Vec<&str> = PROBES.iter().map(|(name, _, _)| *name).collect();
    let offsets = function_offsets(&file, &names)
        .map_err(|source| Error::Attach { pid, source })?
        .into_iter()
        .enumerate()
        .filter_map(|(index, offset)| Some((index, offset.ok()?)))
        .collect();
    Ok((file, offsets))
}

/// Why a function cannot be probed in a file that could be read.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum FunctionMissing {
    /// No symbol of that name with an address.
    #[error("no such symbol")]
    NoSymbol,
    /// Its address is outside every loadable segment.
    #[error("its address is in no loaded segment")]
    NotLoaded,
}

/// The file offsets (as uprobes take them) of the functions `names` in the ELF file `path`,
/// from its dynamic symbols, else its symbol table. An error is the file's (unreadable, or
/// not ELF: `InvalidData`).
pub fn function_offsets(
    path: &Path,
    names: &[&str],
) -> std::io::Result<Vec<Result<u64, FunctionMissing>>> {
    let bytes = std::fs::read(path)?;
    let elf = object::File::parse(&*bytes)
        .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidData, e.to_string()))?;
    let offset_of = |name: &str| {
        let address = elf
            .dynamic_symbols()
            .chain(elf.symbols())
            .find(|s| s.name() == Ok(name) && s.address() != 0)
            .map(|s| s.address())
            .ok_or(FunctionMissing::NoSymbol)?;
        elf.segments()
            .find(|s| address >= s.address() && address < s.address() + s.size())
            .map(|s| address - s.address() + s.file_range().0)
            .ok_or(FunctionMissing::NotLoaded)
    };
    Ok(names.iter().map(|name| offset_of(name)).collect())
}

/// Where paired allocation events go: the recording's tables, or a live table of blocks.
pub(super) trait AllocSink {
    /// The id of a stack (innermost return address first).
    fn stack(&mut self, frames: &[u64]) -> Result<u32, Error>;
    /// One call, paired with its result.
    fn push(&mut self, event: AllocEvent) -> Result<(), Error>;
    /// The samples the kernel dropped so far.
    fn lost(&mut self, _total: u64) {}
    /// The threads `_tids` of a process that replaced its image at `_time_ns` (the events'
    /// clock): the blocks they allocated before then went with it.
    fn exec(&mut self, _tids: &[u32], _time_ns: u64) {}
    /// Every call made before `_time_ns` (CLOCK_MONOTONIC) has been pushed.
    fn drained(&mut self, _time_ns: u64) {}
    /// Every call entered before `_time_ns` (the events' clock) has been pushed: those of
    /// threads inside a call are not yet.
    fn settled(&mut self, _time_ns: u64) {}
}

#[cfg(test)]
mod tests;
