//! The recorder's side of a live view (`fltrace top`): what it learnt, in
//! [`fltrace_trace::live`]'s terms, handed over on a channel.
//!
//! The recorder keeps what happened in plain vectors (a push per fault, nothing else, and
//! only when a feed is set: [`Options::live`](crate::Options::live)) and hands them over in
//! one [`LiveBatch`] at most every [`FLUSH_EVERY`], on a bounded channel that never blocks
//! it: the view counts, symbolizes and draws on its own thread, and when it falls
//! [`CAPACITY`] batches behind, what it cannot take is dropped and counted.

use std::collections::VecDeque;
use std::sync::mpsc::{RecvTimeoutError, TryRecvError};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

pub use fltrace_trace::live::{
    LiveAllocSink, LiveAllocs, LiveBatch, LiveDropped, LiveEvent, LiveFault, LiveTotals,
};

/// How often the recorder hands what it learnt to the view.
pub const FLUSH_EVERY: Duration = Duration::from_millis(50);

/// Batches the channel holds before it drops: 2 s of the recorder's at [`FLUSH_EVERY`].
pub const CAPACITY: usize = 40;

/// Where the recorder sends its batches: [`live_feed`] makes one with its receiving end. The
/// recorder stops sending when the receiver is gone.
#[derive(Debug)]
pub struct LiveFeed(Arc<Channel>);

/// The receiving end of a [`LiveFeed`], as [`std::sync::mpsc::Receiver`] receives.
#[derive(Debug)]
pub struct LiveReceiver(Arc<Channel>);

#[derive(Debug, Default)]
struct Channel {
    state: Mutex<Queue>,
    ready: Condvar,
}

/// The batches waiting, and what came when they were [`CAPACITY`]: one batch of what the
/// view must still get (stacks, mappings, names, statistics, the totals, the end), after them.
#[derive(Debug, Default)]
struct Queue {
    batches: VecDeque<LiveBatch>,
    overflow: Option<LiveBatch>,
    capacity: usize,
    dropped: LiveDropped,
    senders: usize,
    receiver_gone: bool,
}

/// A feed for [`Options::live`](crate::Options::live) and the end that receives its batches.
/// The channel holds [`CAPACITY`] batches: the recorder never waits for the view, and when the
/// view falls behind, what it cannot take is dropped and counted
/// ([`LiveBatch::view_dropped`]); the recording loses nothing. It disconnects once the
/// recording is finished and every copy of the feed is dropped (the options' too).
pub fn live_feed() -> (LiveFeed, LiveReceiver) {
    live_feed_holding(CAPACITY)
}

/// [`live_feed`] holding `capacity` batches (at least one).
pub fn live_feed_holding(capacity: usize) -> (LiveFeed, LiveReceiver) {
    let channel = Arc::new(Channel {
        state: Mutex::new(Queue {
            capacity: capacity.max(1),
            senders: 1,
            ..Queue::default()
        }),
        ready: Condvar::new(),
    });
    (LiveFeed(channel.clone()), LiveReceiver(channel))
}

impl Channel {
    /// The queue; a thread that panicked holding it left it whole (every change is one step).
    fn lock(&self) -> MutexGuard<'_, Queue> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl Clone for LiveFeed {
    fn clone(&self) -> LiveFeed {
        self.0.lock().senders += 1;
        LiveFeed(self.0.clone())
    }
}

impl Drop for LiveFeed {
    fn drop(&mut self) {
        self.0.lock().senders -= 1;
        self.0.ready.notify_all();
    }
}

impl LiveFeed {
    /// Sends `batch`, never waiting: when the view is [`CAPACITY`] batches behind, its fault
    /// rows and allocation calls are dropped and counted, the rest kept for later. A view gone
    /// is no error of the recording's.
    pub(crate) fn send(&self, batch: LiveBatch) {
        let mut queue = self.0.lock();
        if queue.receiver_gone {
            return;
        }
        queue.push(batch);
        drop(queue);
        self.0.ready.notify_one();
    }

    /// Where the allocation logs' conversion tells the view what it converted: a batch of
    /// its own each time, without the recorder's totals.
    pub(crate) fn alloc_sink(&self) -> LiveAllocSink {
        let feed = self.clone();
        Arc::new(move |allocs: LiveAllocs| {
            feed.send(LiveBatch {
                allocs: vec![allocs],
                ..LiveBatch::default()
            })
        })
    }
}

impl Queue {
    fn push(&mut self, batch: LiveBatch) {
        // What overflowed goes first, in order, once there is room again.
        if self.batches.len() < self.capacity
            && let Some(held) = self.overflow.take()
        {
            self.batches.push_back(held);
        }
        if self.overflow.is_none() && self.batches.len() < self.capacity {
            self.batches.push_back(batch);
            return;
        }
        let held = self.overflow.get_or_insert_with(LiveBatch::default);
        keep_whole(held, batch, &mut self.dropped);
    }

    fn pop(&mut self) -> Option<LiveBatch> {
        let mut batch = self.batches.pop_front().or_else(|| self.overflow.take())?;
        batch.view_dropped = self.dropped;
        Some(batch)
    }
}

/// Adds to `held` what of `batch` a view must get even late, counting in `dropped` what it
/// leaves out: the fault rows and allocation calls. A statistics line or runtime counters
/// replace the process's earlier ones held, so that what is held grows only with what the
/// recording defines (stacks, mappings, threads), not with time.
fn keep_whole(held: &mut LiveBatch, batch: LiveBatch, dropped: &mut LiveDropped) {
    dropped.faults += batch.faults.len() as u64;
    for event in batch.events {
        if let LiveEvent::Stats { pid, .. } | LiveEvent::Runtime { pid, .. } = &event {
            let (pid, stats) = (*pid, matches!(event, LiveEvent::Stats { .. }));
            held.events.retain(|e| match e {
                LiveEvent::Stats { pid: p, .. } => !stats || *p != pid,
                LiveEvent::Runtime { pid: p, .. } => stats || *p != pid,
                _ => true,
            });
        }
        held.events.push(event);
    }
    for mut allocs in batch.allocs {
        dropped.alloc_calls += allocs.events.len() as u64;
        allocs.events.clear();
        // The execs stay, each before the calls that follow (none now).
        for exec in &mut allocs.execs {
            exec.0 = 0;
        }
        if allocs.restart {
            // What was held of the process is told again from its first.
            held.allocs.retain(|a| a.pid != allocs.pid);
        }
        if allocs.is_empty()
            && let Some(last) = held.allocs.iter_mut().rev().find(|a| a.pid == allocs.pid)
        {
            // Nothing but the tracer's count, which is the process's latest.
            last.dropped = allocs.dropped;
            continue;
        }
        held.allocs.push(allocs);
    }
    if batch.totals.is_some() {
        held.totals = batch.totals;
    }
    held.ended |= batch.ended;
}

impl LiveReceiver {
    /// The next batch, if one is waiting.
    pub fn try_recv(&self) -> Result<LiveBatch, TryRecvError> {
        let mut queue = self.0.lock();
        match queue.pop() {
            Some(batch) => Ok(batch),
            None if queue.senders == 0 => Err(TryRecvError::Disconnected),
            None => Err(TryRecvError::Empty),
        }
    }

    /// The next batch, waiting for it at most `timeout`.
    pub fn recv_timeout(&self, timeout: Duration) -> Result<LiveBatch, RecvTimeoutError> {
        let until = Instant::now() + timeout;
        let mut queue = self.0.lock();
        loop {
            if let Some(batch) = queue.pop() {
                return Ok(batch);
            }
            if queue.senders == 0 {
                return Err(RecvTimeoutError::Disconnected);
            }
            let left = until.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(RecvTimeoutError::Timeout);
            }
            queue = self
                .0
                .ready
                .wait_timeout(queue, left)
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
    }

    /// The next batch, waiting for it; `None` once every sender is gone and all is read.
    pub fn recv(&self) -> Option<LiveBatch> {
        loop {
            match self.recv_timeout(Duration::from_secs(3600)) {
                Ok(batch) => return Some(batch),
                Err(RecvTimeoutError::Disconnected) => return None,
                Err(RecvTimeoutError::Timeout) => {}
            }
        }
    }
}

impl Drop for LiveReceiver {
    fn drop(&mut self) {
        let mut queue = self.0.lock();
        queue.receiver_gone = true;
        queue.batches.clear();
        queue.overflow = None;
    }
}

/// What one process collects for the view between batches.
#[derive(Debug, Default)]
pub(crate) struct LiveTap {
    pub(crate) faults: Vec<LiveFault>,
    pub(crate) events: Vec<LiveEvent>,
}

impl LiveTap {
    /// Moves what was collected into `batch`.
    pub(crate) fn drain_into(&mut self, batch: &mut LiveBatch) {
        batch.faults.append(&mut self.faults);
        batch.events.append(&mut self.events);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use fltrace_trace::{AllocCall, AllocEvent, CodeAddr, FaultFlags, Stack, StackEnd, VirtAddr};

    fn faults(n: u32) -> Vec<LiveFault> {
        (0..n)
            .map(|i| LiveFault {
                pid: 1,
                tid: 1,
                stack_id: i,
                flags: FaultFlags(0),
                undo: false,
            })
            .collect()
    }

    fn stack(id: u32) -> LiveEvent {
        LiveEvent::Stack {
            pid: 1,
            stack: Stack {
                id,
                generation: 0,
                frames: vec![CodeAddr::new(0x1000)],
                end: StackEnd::Complete,
            },
        }
    }

    fn batch(id: u32, rows: u32) -> LiveBatch {
        LiveBatch {
            faults: faults(rows),
            events: vec![
                stack(id),
                LiveEvent::Runtime {
                    pid: 1,
                    counters: vec![("memory_local", u64::from(id))],
                },
            ],
            totals: Some(LiveTotals {
                faults: u64::from(id),
                ..LiveTotals::default()
            }),
            ..LiveBatch::default()
        }
    }

    #[test]
    fn a_view_behind_loses_rows_counted_and_nothing_else() {
        let (feed, view) = live_feed_holding(2);
        // Two fit; the next three overflow: 3 + 4 + 5 rows dropped, their stacks kept.
        for id in 0..5 {
            feed.send(batch(id, id + 1));
        }
        let mut alloc = LiveAllocs {
            pid: 1,
            events: vec![AllocEvent {
                time_ns: 1,
                tid: 1,
                call: AllocCall::Malloc,
                addr: VirtAddr::new(0x10),
                size: 8,
                old_addr: VirtAddr::new(0),
                detail: 0,
                stack_id: 0,
            }],
            execs: vec![(1, 5)],
            dropped: 2,
            ..LiveAllocs::default()
        };
        (feed.alloc_sink())(alloc.clone());
        alloc.execs.clear();
        alloc.dropped = 3;
        (feed.alloc_sink())(alloc);
        drop(feed);

        let first = view.try_recv().expect("the first batch");
        assert_eq!(first.faults.len(), 1);
        assert_eq!(first.view_dropped.faults, 12);
        assert_eq!(first.view_dropped.alloc_calls, 2);
        assert_eq!(view.try_recv().expect("the second").faults.len(), 2);
        let held = view.try_recv().expect("what overflowed");
        assert!(held.faults.is_empty());
        let stacks: Vec<u32> = held
            .events
            .iter()
            .filter_map(|e| match e {
                LiveEvent::Stack { stack, .. } => Some(stack.id),
                _ => None,
            })
            .collect();
        assert_eq!(stacks, [2, 3, 4]);
        // The runtime's counters: the latest only.
        let runtime: Vec<u64> = held
            .events
            .iter()
            .filter_map(|e| match e {
                LiveEvent::Runtime { counters, .. } => Some(counters[0].1),
                _ => None,
            })
            .collect();
        assert_eq!(runtime, [4]);
        assert_eq!(held.totals.map(|t| t.faults), Some(4));
        // The calls are dropped; the exec stays, and the tracer's count is the latest.
        assert_eq!(held.allocs.len(), 1);
        assert!(held.allocs[0].events.is_empty());
        assert_eq!(held.allocs[0].execs, [(0, 5)]);
        assert_eq!(held.allocs[0].dropped, 3);
        assert!(matches!(view.try_recv(), Err(TryRecvError::Disconnected)));
    }

    #[test]
    fn what_overflowed_goes_in_order_once_there_is_room() {
        let (feed, view) = live_feed_holding(2);
        feed.send(batch(0, 1));
        feed.send(batch(1, 1));
        feed.send(LiveBatch {
            ended: true,
            ..batch(2, 1)
        });
        for id in 0..2 {
            let batch = view.try_recv().expect("a batch that fit");
            assert_eq!(batch.totals.map(|t| t.faults), Some(id));
        }
        // Room again: what overflowed goes before the batch sent now, which is whole.
        feed.send(batch(3, 7));
        let held = view.try_recv().expect("held");
        assert!(held.ended && held.faults.is_empty());
        assert_eq!(held.view_dropped.faults, 1);
        assert_eq!(view.try_recv().expect("after").faults.len(), 7);
        assert!(matches!(view.try_recv(), Err(TryRecvError::Empty)));
        drop(feed);
        assert!(matches!(
            view.recv_timeout(Duration::from_secs(5)),
            Err(RecvTimeoutError::Disconnected)
        ));
    }
}
