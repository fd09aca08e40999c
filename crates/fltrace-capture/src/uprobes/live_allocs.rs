//! memleak's table of live allocations: the blocks a running process has not freed, by the
//! stack that allocated them, kept from the same uprobes.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use fltrace_trace::{AllocCall, AllocEvent, VirtAddr};

use super::probes::Probes;
use super::{AllocSink, LIVE_RING_PAGES};
use crate::Error;
use crate::reader::ReaderThread;

/// The blocks a running process has not freed, kept live from the same uprobes (for
/// `fltrace memleak -p PID`: complete DWARF stacks where the kernel's frame-pointer walk stops).
pub struct LiveAllocs {
    reader: ReaderThread<u64>,
    table: Arc<Mutex<BlockTable>>,
}

/// What [`LiveAllocs`] keeps (bcc memleak's `-s`, `-z`, `-Z`).
#[derive(Debug, Clone, Copy)]
pub struct LiveOptions {
    /// One allocation sampled every `period` calls (by the kernel, so that the others cost
    /// only the trap); 1 for every one.
    pub period: u64,
    /// Blocks smaller than this are not kept.
    pub min_size: u64,
    /// Blocks larger than this are not kept.
    pub max_size: u64,
}

impl Default for LiveOptions {
    fn default() -> LiveOptions {
        LiveOptions {
            period: 1,
            min_size: 0,
            max_size: u64::MAX,
        }
    }
}

/// Outstanding blocks of one allocation stack.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OutstandingStack {
    /// Return addresses, innermost first (the allocator's caller first).
    pub frames: Vec<u64>,
    /// Bytes not freed.
    pub bytes: u64,
    /// Blocks not freed.
    pub blocks: u64,
    /// Each block's address and size, when asked for.
    pub addresses: Vec<(u64, u64)>,
}

/// What is outstanding at one moment.
#[derive(Debug, Clone, Default)]
pub struct OutstandingBlocks {
    /// By stack, in no particular order.
    pub stacks: Vec<OutstandingStack>,
    /// Allocations seen since the start.
    pub allocs: u64,
    /// Frees (and reallocations) of known blocks since the start.
    pub frees: u64,
    /// Samples the kernel dropped (their calls are missing).
    pub lost: u64,
    /// Blocks left out because their process replaced its image (exec) since: its heap went
    /// with it.
    pub replaced: u64,
}

impl LiveAllocs {
    /// Places the probes on `pid`'s C library for `tasks` (and the threads they start).
    pub fn start(pid: i32, tasks: &[i32], options: LiveOptions) -> Result<LiveAllocs, Error> {
        let probes = Probes::open(pid, tasks, LIVE_RING_PAGES, options.period.max(1))?;
        let table = Arc::new(Mutex::new(BlockTable {
            sizes: options.min_size..=options.max_size,
            ..BlockTable::default()
        }));
        let mut sink = SharedTable(table.clone());
        let reader = ReaderThread::spawn("fltrace-memleak", "the uprobe reader", move |stop| {
            probes.drain_into(stop, &mut sink, 0)
        })?;
        Ok(LiveAllocs { reader, table })
    }

    /// Waits until every call made before `time_ns` (CLOCK_MONOTONIC) is in the table, for
    /// at most `patience`; false if the reader is still behind (or has ended) then.
    pub fn wait_drained(&self, time_ns: u64, patience: Duration) -> bool {
        let start = std::time::Instant::now();
        loop {
            if self
                .table
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .drained_ns
                >= time_ns
            {
                return true;
            }
            if self.reader.is_finished() || start.elapsed() >= patience {
                return false;
            }
            std::thread::sleep(Duration::from_millis(2));
        }
    }

    /// The blocks allocated at least `older_than` before `now_ns` (CLOCK_MONOTONIC) and not
    /// freed, grouped by stack; with `addresses`, each block's address and size too.
    pub fn outstanding(
        &self,
        now_ns: u64,
        older_than: Duration,
        addresses: bool,
    ) -> OutstandingBlocks {
        let cutoff = now_ns.saturating_sub(older_than.as_nanos() as u64);
        // A poisoned lock only means the reader panicked mid-update: the table is still usable.
        let table = self.table.lock().unwrap_or_else(|e| e.into_inner());
        // Stack id -> bytes, blocks, (address, size) of each.
        type Group = (u64, u64, Vec<(u64, u64)>);
        let mut groups: HashMap<u32, Group> = HashMap::new();
        for (addr, block) in table.blocks.iter().filter(|(_, b)| b.time_ns <= cutoff) {
            let group = groups.entry(block.stack_id).or_default();
            group.0 += block.size;
            group.1 += 1;
            if addresses {
                group.2.push((addr.get(), block.size));
            }
        }
        OutstandingBlocks {
            stacks: groups
                .into_iter()
                .map(|(id, (bytes, blocks, mut addresses))| {
                    addresses.sort_unstable();
                    OutstandingStack {
                        frames: table.stacks.get(id as usize).cloned().unwrap_or_default(),
                        bytes,
                        blocks,
                        addresses,
                    }
                })
                .collect(),
            allocs: table.allocs,
            frees: table.frees,
            lost: table.lost,
            replaced: table.replaced,
        }
    }

    /// The totals by stack kept as blocks come and go (bcc memleak's `--combined-only`):
    /// every age, without walking the blocks.
    pub fn combined(&self) -> OutstandingBlocks {
        let table = self.table.lock().unwrap_or_else(|e| e.into_inner());
        OutstandingBlocks {
            stacks: table
                .combined
                .iter()
                .filter(|(_, total)| total.1 > 0)
                .map(|(&id, &(bytes, blocks))| OutstandingStack {
                    frames: table.stacks.get(id as usize).cloned().unwrap_or_default(),
                    bytes,
                    blocks,
                    addresses: Vec::new(),
                })
                .collect(),
            allocs: table.allocs,
            frees: table.frees,
            lost: table.lost,
            replaced: table.replaced,
        }
    }

    /// Removes the probes; an error is the reader's.
    pub fn finish(self) -> Result<(), Error> {
        self.reader.finish().map(|_| ())
    }
}

/// One block not yet freed.
pub(super) struct LiveBlock {
    /// The thread that allocated it.
    pub(super) tid: u32,
    pub(super) size: u64,
    pub(super) stack_id: u32,
    pub(super) time_ns: u64,
}

/// Blocks by address and the stacks they came from.
pub(super) struct BlockTable {
    pub(super) blocks: HashMap<VirtAddr, LiveBlock>,
    pub(super) stacks: Vec<Vec<u64>>,
    pub(super) ids: HashMap<Vec<u64>, u32>,
    /// Bytes and blocks outstanding by stack id.
    pub(super) combined: HashMap<u32, (u64, u64)>,
    /// Sizes of the blocks kept.
    pub(super) sizes: std::ops::RangeInclusive<u64>,
    pub(super) allocs: u64,
    pub(super) frees: u64,
    pub(super) lost: u64,
    /// Blocks gone with an exec of their process.
    pub(super) replaced: u64,
    /// Every call made before this time (CLOCK_MONOTONIC) has been applied.
    pub(super) drained_ns: u64,
}

impl Default for BlockTable {
    fn default() -> BlockTable {
        BlockTable {
            blocks: HashMap::new(),
            stacks: Vec::new(),
            ids: HashMap::new(),
            combined: HashMap::new(),
            sizes: 0..=u64::MAX,
            allocs: 0,
            frees: 0,
            lost: 0,
            replaced: 0,
            drained_ns: 0,
        }
    }
}

impl BlockTable {
    pub(super) fn release(&mut self, addr: VirtAddr) {
        if addr.is_null() {
            return;
        }
        if self.forget(addr) {
            self.frees += 1;
        }
    }

    /// Removes the block at `addr` from the table and its stack's totals; false if unknown.
    pub(super) fn forget(&mut self, addr: VirtAddr) -> bool {
        let Some(block) = self.blocks.remove(&addr) else {
            return false;
        };
        if let Some(total) = self.combined.get_mut(&block.stack_id) {
            total.0 = total.0.saturating_sub(block.size);
            total.1 = total.1.saturating_sub(1);
        }
        true
    }

    /// Threads `tids` replaced their process's image at `time_ns`: the blocks they allocated
    /// before are gone with it.
    pub(super) fn replace_image(&mut self, tids: &[u32], time_ns: u64) {
        let gone: Vec<VirtAddr> = self
            .blocks
            .iter()
            .filter(|(_, block)| block.time_ns < time_ns && tids.contains(&block.tid))
            .map(|(&addr, _)| addr)
            .collect();
        for addr in gone {
            if self.forget(addr) {
                self.replaced += 1;
            }
        }
    }

    pub(super) fn apply(&mut self, event: &AllocEvent) {
        match event.call {
            AllocCall::Free => self.release(event.addr),
            call => {
                // The old block is gone whether or not the new one was made in place, unless
                // the realloc failed (no block for a size), which leaves it live.
                if call == AllocCall::Realloc && (!event.addr.is_null() || event.size == 0) {
                    self.release(event.old_addr);
                }
                if !event.addr.is_null() && self.sizes.contains(&event.size) {
                    self.allocs += 1;
                    // An address handed out again without its free seen (a lost sample).
                    self.forget(event.addr);
                    let total = self.combined.entry(event.stack_id).or_default();
                    total.0 += event.size;
                    total.1 += 1;
                    self.blocks.insert(
                        event.addr,
                        LiveBlock {
                            tid: event.tid,
                            size: event.size,
                            stack_id: event.stack_id,
                            time_ns: event.time_ns,
                        },
                    );
                }
            }
        }
    }
}

/// The reader's side of a [`BlockTable`] shared with [`LiveAllocs::outstanding`].
pub(super) struct SharedTable(Arc<Mutex<BlockTable>>);

impl SharedTable {
    pub(super) fn table(&self) -> std::sync::MutexGuard<'_, BlockTable> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl AllocSink for SharedTable {
    fn stack(&mut self, frames: &[u64]) -> Result<u32, Error> {
        let mut table = self.table();
        if let Some(&id) = table.ids.get(frames) {
            return Ok(id);
        }
        let id = table.stacks.len() as u32;
        table.stacks.push(frames.to_vec());
        table.ids.insert(frames.to_vec(), id);
        Ok(id)
    }

    fn push(&mut self, event: AllocEvent) -> Result<(), Error> {
        self.table().apply(&event);
        Ok(())
    }

    fn lost(&mut self, total: u64) {
        self.table().lost = total;
    }

    fn exec(&mut self, tids: &[u32], time_ns: u64) {
        self.table().replace_image(tids, time_ns);
    }

    fn drained(&mut self, time_ns: u64) {
        self.table().drained_ns = time_ns;
    }
}
