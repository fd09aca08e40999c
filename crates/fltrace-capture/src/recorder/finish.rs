//! The end of a recording: every table closed as far as it goes, the allocation logs
//! converted, the access capture stopped, the checksums written.

use super::{ActiveRecording, Ended, Options, Summary, keep_first, note_stop};
use std::os::unix::process::ExitStatusExt as _;

impl ActiveRecording {
    /// Closes every table as far as it goes, converts the allocation logs, stops the access
    /// capture and says how the recording ended.
    pub(super) fn finish(self, ended: Ended, options: &Options) -> Summary {
        let ActiveRecording {
            root_pid,
            started_command,
            child,
            group,
            attached,
            events,
            rings,
            mut state,
            mut alloc_logs,
            attached_allocs,
            access,
            mono_offset,
            recording,
        } = self;
        let Ended {
            exit_status,
            rusage_hwm,
            mut trace_error,
            mut trace_stopped,
            started,
        } = ended;
        // Reaped by the loop, or never run (a failed exec): nothing left to kill. The group's
        // watchdog is told so.
        drop(child);
        drop(group);
        // Closing the events makes the kernel unregister the tracepoints and free the ring
        // buffers: tens of milliseconds that can pass while the trace files are finished.
        let teardown = std::thread::spawn(move || drop((events, rings)));

        if let Some(process) = state.processes.get_mut(&root_pid) {
            process.counters.hwm = process.counters.hwm.max(rusage_hwm);
        }
        let (exit_code, signal) = match exit_status {
            Some(status) if started_command => (status.code(), status.signal()),
            _ => (Some(0), None),
        };
        // The logs are complete: their drain converts what is left while the tables close.
        if let Some(logs) = &alloc_logs {
            logs.program_ended();
        }
        // After a write error each table is still closed as far as it goes: what was written
        // before stays readable where the file system lets it.
        let (mut pids, finished) = state.finish_all();
        keep_first(&mut trace_error, finished);
        note_stop(&trace_error, &mut trace_stopped, started);
        let cache = state
            .code_cache
            .take()
            .map(|cache| cache.finish(options.cache_limit));
        pids.sort_unstable();
        let allocs = match (&mut alloc_logs, attached_allocs) {
            (_, Some(attached)) => match attached.finish() {
                Ok(done) => Some(done),
                Err(e) => {
                    keep_first(&mut trace_error, Err(e));
                    None
                }
            },
            (Some(logs), None) => {
                // A pid reused within the run names the logs of every process that held it.
                for os_pid in state.reused_os_pids() {
                    logs.forget_drained(os_pid);
                }
                if let Err(e) = state.place_reused_logs(logs.dir()) {
                    keep_first(&mut trace_error, Err(e));
                }
                let mut total = crate::Converted::default();
                for &pid in &pids {
                    let generation = state.preload_generations.get(&pid).copied().unwrap_or(0);
                    let converted = match logs.convert(
                        pid,
                        generation,
                        &options.dir,
                        mono_offset,
                        &recording,
                    ) {
                        Ok(converted) => converted,
                        Err(e) => {
                            keep_first(&mut trace_error, Err(e));
                            None
                        }
                    };
                    if let Some(c) = converted {
                        total.add(&c);
                    }
                }
                Some(total)
            }
            (None, None) => None,
        };
        let access = match access.map(|a| a.finish()).transpose() {
            Ok(access) => access,
            Err(e) => {
                keep_first(&mut trace_error, Err(e));
                None
            }
        };
        note_stop(&trace_error, &mut trace_stopped, started);
        let _ = teardown.join();
        // Finished: what the recording wrote is fixed now, and its readers check it so.
        if trace_error.is_none() {
            for &pid in &pids {
                if let Err(e) = fltrace_trace::checksums::write(&options.dir, pid) {
                    keep_first(&mut trace_error, Err(e.into()));
                    break;
                }
            }
        }
        Summary {
            root_pid,
            pids,
            attached,
            exit_code,
            signal,
            faults: state.faults,
            lost: state.lost,
            lost_late: state.lost_late,
            lost_unfiled: state.lost_unfiled,
            stacks_truncated: state.truncated_total,
            far_memory_exhausted: state.far_exhausted,
            allocs,
            access,
            trace_error,
            trace_stopped,
            cache,
        }
    }
}
