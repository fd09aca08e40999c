//! Keeping the code files of the traced processes in the build-ID cache while they live.
//!
//! When the recorder first sees a file mapped executable with a build ID it has not kept in
//! this recording, it opens the file through `/proc/PID/map_files/` (the very file mapped,
//! even deleted or in another mount namespace) at once, in its loop, and holds it open. When a
//! stack first has a frame in it (see `Process::take_code_hits`), a thread links or copies it
//! into the cache, so that neither the fault records nor the program wait for the copy; files
//! without frames are closed at the end, never stored.

use std::collections::HashSet;
use std::path::PathBuf;
use std::sync::mpsc::{Sender, channel};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use fltrace_trace::build_id_cache::{BuildIdCache, Stored, valid_build_id};
use fltrace_trace::{Mapping, libraries};

/// What keeping the code files cost and did.
#[derive(Debug, Default, Clone)]
pub struct CacheSummary {
    /// The cache's directory.
    pub root: PathBuf,
    /// Distinct files of the recording (by build ID) with frames, given to the cache.
    pub files: u64,
    /// Files mapped executable without a frame in any stack: not kept.
    pub without_frames: u64,
    /// Files already there.
    pub present: u64,
    /// Files hard-linked.
    pub linked: u64,
    /// Files copied.
    pub copied: u64,
    /// The bytes copied.
    pub copied_bytes: u64,
    /// Files that could not be kept, with why (the first few).
    pub failed: Vec<String>,
    /// Time the recorder's loop spent opening files.
    pub open_time: Duration,
    /// Time the storing thread spent linking or copying them.
    pub store_time: Duration,
    /// Entries pruned at the end to keep the cache within its limit.
    pub pruned: u64,
}

/// A file to store: opened while its process lived.
struct Job {
    build_id: String,
    source: PathBuf,
    /// Held open so that the path through `/proc/self/fd` reaches the file after the process
    /// is gone.
    _file: Option<std::fs::File>,
    name: String,
}

/// The recorder's side of the cache.
pub struct CodeCache {
    cache: BuildIdCache,
    /// Build IDs opened (or that could not be).
    seen: HashSet<String>,
    /// Files opened, waiting for a frame in them.
    waiting: std::collections::HashMap<String, Job>,
    /// Build IDs given to the thread.
    stored: HashSet<String>,
    open_time: Duration,
    sender: Option<Sender<Job>>,
    worker: Option<JoinHandle<CacheSummary>>,
    /// Files that could not be opened, by build ID, with why: said if a frame is in them.
    unopened: std::collections::HashMap<String, String>,
    failed_open: Vec<String>,
}

impl CodeCache {
    /// Starts the storing thread for `cache`.
    pub fn start(cache: BuildIdCache) -> CodeCache {
        let (sender, receiver) = channel::<Job>();
        let thread_cache = cache.clone();
        let worker = std::thread::Builder::new()
            .name("fltrace-cache".into())
            .spawn(move || {
                let mut summary = CacheSummary::default();
                for job in receiver {
                    let started = Instant::now();
                    match thread_cache.store(&job.build_id, &job.source, &job.name) {
                        Ok(Stored::Present) => summary.present += 1,
                        Ok(Stored::Linked) => summary.linked += 1,
                        Ok(Stored::Copied(bytes)) => {
                            summary.copied += 1;
                            summary.copied_bytes += bytes;
                        }
                        Err(err) => summary.failed.push(format!(
                            "{} ({}): {}",
                            job.name,
                            job.build_id,
                            fltrace_trace::error_chain(&err)
                        )),
                    }
                    summary.store_time += started.elapsed();
                }
                summary
            })
            .ok();
        CodeCache {
            cache,
            seen: HashSet::new(),
            waiting: Default::default(),
            stored: HashSet::new(),
            open_time: Duration::ZERO,
            sender: worker.as_ref().map(|_| sender),
            worker,
            unopened: Default::default(),
            failed_open: Vec::new(),
        }
    }

    /// A mapping of process `pid` was seen: keeps its file if it holds code not kept yet.
    pub fn offer(&mut self, pid: u32, mapping: &Mapping) {
        if !mapping.is_file()
            || !mapping.is_exec()
            || !valid_build_id(&mapping.build_id)
            // fltrace's own library is rebuilt with fltrace and never a call site.
            || libraries::is_preload(&mapping.path)
            || self.seen.contains(&mapping.build_id)
        {
            return;
        }
        if self.sender.is_none() {
            return;
        }
        self.seen.insert(mapping.build_id.clone());
        let started = Instant::now();
        let map_files = PathBuf::from(format!(
            "/proc/{pid}/map_files/{:x}-{:x}",
            mapping.start.get(),
            mapping.end.get()
        ));
        let through_root = PathBuf::from(format!("/proc/{pid}/root{}", mapping.path));
        let opened = [map_files, through_root, PathBuf::from(&mapping.path)]
            .into_iter()
            .find_map(|path| std::fs::File::open(&path).ok().map(|f| (f, path)));
        let job = match opened {
            Some((file, _)) => {
                use std::os::fd::AsRawFd;
                // The descriptor names the file whatever happens to the process or the path;
                // the worker links or copies through it.
                let via_fd = PathBuf::from(format!("/proc/self/fd/{}", file.as_raw_fd()));
                Job {
                    build_id: mapping.build_id.clone(),
                    source: via_fd,
                    _file: Some(file),
                    name: mapping.path.clone(),
                }
            }
            None => {
                self.unopened.insert(
                    mapping.build_id.clone(),
                    format!(
                        "{} ({}): not readable through /proc/{pid}",
                        mapping.path, mapping.build_id
                    ),
                );
                self.open_time += started.elapsed();
                return;
            }
        };
        self.open_time += started.elapsed();
        let id = job.build_id.clone();
        self.waiting.insert(id.clone(), job);
        if self.stored.contains(&id) {
            // A stack had a frame in it before its mapping was offered (a fork's copy).
            self.hit(&id);
        }
    }

    /// A stack has a frame in the file of build `id`: it is stored.
    pub fn hit(&mut self, id: &str) {
        if let Some(job) = self.waiting.remove(id)
            && let Some(sender) = &self.sender
        {
            let _ = sender.send(job);
        }
        if let Some(why) = self.unopened.remove(id) {
            self.failed_open.push(why);
        }
        self.stored.insert(id.to_owned());
    }

    /// Waits for the files still being stored, prunes the cache to `limit` bytes (never the
    /// files of this recording), and says what it cost.
    pub fn finish(mut self, limit: u64) -> CacheSummary {
        drop(self.sender.take());
        let mut summary = self
            .worker
            .take()
            .and_then(|w| w.join().ok())
            .unwrap_or_default();
        summary.root = self.cache.root().to_owned();
        summary.files = self.stored.intersection(&self.seen).count() as u64;
        summary.without_frames = self.waiting.len() as u64;
        drop(std::mem::take(&mut self.waiting));
        summary.open_time = self.open_time;
        summary.failed.append(&mut self.failed_open);
        let keep: Vec<String> = self.stored.into_iter().collect();
        match self.cache.prune(limit, &keep) {
            Ok(pruned) => summary.pruned = pruned.removed.len() as u64,
            Err(err) => summary
                .failed
                .push(format!("pruning: {}", fltrace_trace::error_chain(&err))),
        }
        summary
    }
}
