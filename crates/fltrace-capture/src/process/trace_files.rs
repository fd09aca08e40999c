//! Where one process's trace goes: its faults, stacks and mappings files, its stats lines and
//! `procmaps`, its resident-memory series, what the live view is told; the memory figures the
//! stats lines carry; the checkpoints and footers.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use rustc_hash::FxHashMap;

use fltrace_trace::{Mapping, MappingWriter, StackWriter, files, stats, write_procmaps_line};

use super::Process;
use super::resident::ResidentSeries;
use super::window::FaultWindow;
use crate::live::LiveEvent;
use crate::runtime::RuntimeView;

/// Where one process's trace goes.
pub(super) struct TraceFiles {
    pub(super) faults: FaultWindow,
    pub(super) stacks: StackWriter,
    pub(super) mmaps: MappingWriter,
    /// `procmaps` rewritten from the live mappings at each stats line: a scratch buffer kept
    /// between writes, sized by the live mappings.
    pub(super) procmaps: String,
    pub(super) stats_path: PathBuf,
    pub(super) stats: String,
    /// The resident memory over time, when sampled.
    pub(super) resident: Option<ResidentSeries>,
    /// Stack frames (with the generation appended) to stack id, and whether the stack is one
    /// of the tracer's own work ([`Process::tracer_stack`]).
    pub(super) interner: FxHashMap<Vec<u64>, (u32, bool)>,
    pub(super) next_stack_id: u32,
    /// The name (`comm`) of each thread by (generation, tid), and whether it changed since
    /// the faults file's footer was last given it.
    pub(super) thread_names: BTreeMap<(u32, u32), String>,
    pub(super) thread_names_changed: bool,
}

impl Process {
    /// Tells the live view, if there is one, what `event` makes (only then).
    pub(super) fn tell(&mut self, event: impl FnOnce() -> LiveEvent) {
        if let Some(tap) = self.out.faults.tap() {
            tap.events.push(event());
        }
    }

    /// Tells the live view of a mapping of code: stack frames are symbolized through them.
    pub(super) fn tell_mapped(&mut self, mapping: &Mapping) {
        if mapping.is_exec() {
            let pid = self.pid;
            self.tell(|| LiveEvent::Mapped {
                pid,
                mapping: mapping.clone(),
            });
        }
    }

    /// Moves what the live view is to be told into `batch`.
    pub fn drain_live(&mut self, batch: &mut crate::live::LiveBatch) {
        if let Some(tap) = self.out.faults.tap() {
            tap.drain_into(batch);
        }
    }

    /// Reads the process's memory figures from /proc while it lives.
    pub fn sample_memory(&mut self) {
        let Ok(status) = crate::procfs::status(self.os_pid) else {
            return;
        };
        if let Some(kb) = status.peak_rss_kb {
            self.counters.hwm = self.counters.hwm.max(kb * 1024);
        }
        if let Some(kb) = status.rss_kb {
            self.counters.rss = kb * 1024;
        }
        if let Some(kb) = status.rss_anon_kb {
            self.counters.rss_anon = kb * 1024;
        }
        // Under far memory, what of its memory is not under the limit.
        // A process without the runtime (its image never loaded the preloaded library) has
        // all of its memory outside.
        let without_runtime = self.image_running && self.interposers.is_empty();
        if let Some(far) = &mut self.far {
            let (own, emulated) = match &far.view {
                Some(view) => (view.own_ranges(), view.emulated_bytes()),
                None if without_runtime => (Vec::new(), 0),
                None => return,
            };
            let Ok(outside) = crate::unemulated::read(self.os_pid, &own) else {
                return;
            };
            // At the process's end its last thread closes the userfaultfd after leaving its
            // memory, which a reader of smaps keeps alive: read then, the whole region holds
            // pages and no `um` flag. Every thread is marked exiting before that close.
            let alive = crate::procfs::stat(self.os_pid as i32).is_ok_and(|s| !s.is_exiting());
            if alive {
                far.outside_now = outside.bytes;
                far.outside.add(outside, emulated);
            }
        }
    }

    /// Samples the process's resident memory into its series, when one is kept.
    pub fn sample_resident(&mut self) {
        if let Some(series) = &mut self.out.resident {
            series.sample(self.os_pid);
        }
    }

    /// Appends a stats line and rewrites the stats and maps files, so that a crash of fltrace
    /// itself still leaves them current to the last second.
    pub fn write_stats(&mut self, unix_time_s: u64, lost: u64) -> Result<(), fltrace_trace::Error> {
        let c = self.counters;
        let mut counters = vec![
            ("faults", c.faults),
            ("faults_r", c.faults_r),
            ("faults_w", c.faults_w),
            ("faults_wp", c.faults_wp),
            ("faults_zp", c.faults_zp),
            ("faults_major", c.faults_major),
            ("faults_kernel", c.faults_kernel),
            ("faults_tracer", c.faults_tracer),
            ("lost", lost),
            ("stacks_truncated", c.stacks_truncated),
            ("stacks_extended", c.stacks_extended),
            ("stacks_spliced", c.stacks_spliced),
            ("stacks_scanned", c.stacks_scanned),
            ("stacks_unverified", c.stacks_unverified),
            ("stacks_uncopied", c.stacks_uncopied),
            ("stacks_uncopied_truncated", c.stacks_uncopied_truncated),
            ("stacks_holes", c.stacks_holes),
            ("memory_used", c.hwm),
            ("rss", c.rss),
            ("rss_anon", c.rss_anon),
            ("hwm", c.hwm),
        ];
        // Under far-memory emulation the runtime's counters take the original's names
        // (memory_used becomes the peak of local memory).
        if let Some(far) = &self.far
            && let Some(view) = &far.view
        {
            for (name, value) in view.counters() {
                match counters.iter_mut().find(|(n, _)| *n == name) {
                    Some(slot) => slot.1 = value,
                    None => counters.push((name, value)),
                }
            }
            counters.extend(view.placement_counters());
            counters.push(("memory_unemulated", far.outside_now));
            counters.push(("rt_log_missed", view.missed));
            counters.push(("rt_unmatched", far.orphans));
            counters.push(("rt_rows_unhandled", far.rows_unhandled));
            counters.extend(view.breakdown());
            counters.push(("rt_matched", far.matched));
            counters.push(("rt_fetches_late", far.fetches_late));
            counters.push(("rt_wait_ns", far.wait_ns));
            counters.push((
                "rt_wait_p50_ns",
                fltrace_runtime_abi::hist_percentile(&far.wait_hist, 500),
            ));
            counters.push((
                "rt_wait_p99_ns",
                fltrace_runtime_abi::hist_percentile(&far.wait_hist, 990),
            ));
            counters.push(("rt_resolve_ns", far.resolve_ns));
            counters.push(("recorder_cpu_ns", crate::os::cpu_time_ns()));
        } else if let Some(far) = &self.far {
            // No runtime (yet, or ever): what was seen outside is all there is to say.
            counters.push(("memory_unemulated", far.outside_now));
        }
        self.out
            .stats
            .push_str(&stats::format_line(unix_time_s, &counters));
        let pid = self.pid;
        self.tell(|| LiveEvent::Stats { pid, counters });
        write_file(&self.out.stats_path, &self.out.stats)?;
        if let Some(series) = &mut self.out.resident {
            series.write()?;
        }
        // As the original: a copy of the mappings live now, not a line per event.
        self.out.procmaps.clear();
        for mapping in self.maps.values() {
            write_procmaps_line(mapping, &mut self.out.procmaps);
        }
        let procmaps = files::procmaps(
            self.out.stats_path.parent().unwrap_or(Path::new(".")),
            self.pid,
        );
        write_file(&procmaps, &self.out.procmaps)
    }

    /// Makes what was recorded readable should the recorder die: the mappings and stacks so
    /// far, then the faults that settle now (those pushed before the previous checkpoint:
    /// no late record can amend them any more), in that order so that every fault readable
    /// has its stack and mappings readable too.
    pub fn checkpoint(&mut self) -> Result<(), fltrace_trace::Error> {
        self.store_thread_names();
        self.out.mmaps.checkpoint()?;
        self.out.stacks.checkpoint()?;
        self.out.faults.checkpoint()
    }

    /// Writes the footers. The process must not be used afterwards.
    pub fn finish(mut self) -> Result<(), fltrace_trace::Error> {
        self.store_thread_names();
        if let Some(far) = self.far {
            // The process is gone and its counters written out: its page goes, also one never
            // opened (an image that exec replaced without a runtime of its own).
            match far.view {
                Some(view) => view.remove(),
                // Unless the page there is a later process's that got the pid.
                None => {
                    if let Some(view) =
                        RuntimeView::open(&far.prefix, self.os_pid, 0, far.made_before)
                    {
                        view.remove();
                    }
                }
            }
        }
        if let Some(series) = &mut self.out.resident {
            series.write()?;
        }
        self.out.faults.finish()?;
        self.out.stacks.finish()?;
        self.out.mmaps.finish()
    }
}

fn write_file(path: &Path, text: &str) -> Result<(), fltrace_trace::Error> {
    use std::io::Write;
    let mut file = files::create(path)?;
    file.write_all(text.as_bytes())
        .map_err(|source| fltrace_trace::Error::Io {
            path: path.to_owned(),
            source,
        })
}
