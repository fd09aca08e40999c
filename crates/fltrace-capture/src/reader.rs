//! A thread that drains events beside the recorder until told to stop, then hands back what
//! it wrote (the uprobe allocation reader, the access-sample reader).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;

use crate::Error;

/// A running reader; [`Self::finish`] stops it.
pub(crate) struct ReaderThread<T> {
    stop: Arc<AtomicBool>,
    thread: JoinHandle<Result<T, Error>>,
    what: &'static str,
}

impl<T: Send + 'static> ReaderThread<T> {
    /// Runs `work` in a thread named `name` until the flag it is given is raised.
    pub(crate) fn spawn(
        name: &str,
        what: &'static str,
        work: impl FnOnce(&AtomicBool) -> Result<T, Error> + Send + 'static,
    ) -> Result<ReaderThread<T>, Error> {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let thread = std::thread::Builder::new()
            .name(name.into())
            .spawn(move || work(&flag))
            .map_err(|source| Error::Kernel {
                what,
                source,
                hint: "",
            })?;
        Ok(ReaderThread { stop, thread, what })
    }

    /// Whether the reader has ended (failed, or was stopped).
    pub(crate) fn is_finished(&self) -> bool {
        self.thread.is_finished()
    }

    /// Stops the reader and returns what it made.
    pub(crate) fn finish(self) -> Result<T, Error> {
        self.stop.store(true, Ordering::Relaxed);
        self.thread.join().unwrap_or_else(|_| {
            Err(Error::Kernel {
                what: self.what,
                source: std::io::Error::other("it panicked"),
                hint: "",
            })
        })
    }
}
