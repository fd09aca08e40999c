//! The recorder's side of a live view (`fltrace top`): what it learnt, in
//! [`fltrace_trace::live`]'s terms, handed over on a channel.
//!
//! The recorder keeps what happened in plain vectors (a push per fault, nothing else, and
//! only when a feed is set: [`Options::live`](crate::Options::live)) and hands them over in
//! one [`LiveBatch`] at most every [`FLUSH_EVERY`], on a channel that never blocks it: the
//! view counts, symbolizes and draws on its own thread.

use std::sync::mpsc::{Receiver, Sender};
use std::time::Duration;

pub use fltrace_trace::live::{
    LiveAllocSink, LiveAllocs, LiveBatch, LiveEvent, LiveFault, LiveTotals,
};

/// How often the recorder hands what it learnt to the view.
pub const FLUSH_EVERY: Duration = Duration::from_millis(50);

/// Where the recorder sends its batches: [`live_feed`] makes one with its receiving end. The
/// recorder stops sending when the receiver is gone.
#[derive(Debug, Clone)]
pub struct LiveFeed(Sender<LiveBatch>);

/// A feed for [`Options::live`](crate::Options::live) and the end that receives its batches.
/// The channel is unbounded: the recorder never waits for the view. It disconnects once the
/// recording is finished and every copy of the feed is dropped (the options' too).
pub fn live_feed() -> (LiveFeed, Receiver<LiveBatch>) {
    let (tx, rx) = std::sync::mpsc::channel();
    (LiveFeed(tx), rx)
}

impl LiveFeed {
    /// Sends `batch`; a view gone is no error of the recording's.
    pub(crate) fn send(&self, batch: LiveBatch) {
        let _ = self.0.send(batch);
    }

    /// Where the allocation logs' conversion tells the view what it converted: a batch of
    /// its own each time, without the recorder's totals.
    pub(crate) fn alloc_sink(&self) -> LiveAllocSink {
        let feed = self.clone();
        std::sync::Arc::new(move |allocs: LiveAllocs| {
            feed.send(LiveBatch {
                allocs: vec![allocs],
                ..LiveBatch::default()
            })
        })
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
