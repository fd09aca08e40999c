//! The end of a recording: every table closed as far as it goes, the allocation logs
//! converted, the access capture stopped, the checksums written.

use super::{ActiveRecording, Ended, Options, RecordingOutcome, keep_first, note_stop};
use crate::perf_abi;
use std::os::unix::process::ExitStatusExt as _;

impl ActiveRecording {
    /// Closes every table as far as it goes, converts the allocation logs, stops the access
    /// capture and says how the recording ended.
    pub(super) fn finish(self, ended: Ended, options: &Options) -> RecordingOutcome {
        let ActiveRecording {
            root_pid,
            started_command,
            child,
            group,
            attached,
            events,
            rings,
            bpf,
            plan,
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
        if let Some(bpf) = &bpf {
            let counts = bpf.counts();
            state.lost += counts.lost;
            if counts.children_lost > 0 {
                log::warn!(
                    "{} processes started by the traced ones were not traced: the BPF table of \
                     traced processes was full",
                    counts.children_lost
                );
            }
            log::debug!(
                "BPF ring of {} KiB (kernel memory of all rings and BPF maps at most {} KiB): {} faults, {} KiB of \
                 stack copied ({} B a fault), {} KiB skipped (pages not present), {} copies \
                 ended at a page not present with no hole left, {} records lost ({} KiB), {} \
                 faults without their stack's bounds",
                plan.shared >> 10,
                plan.total() >> 10,
                counts.faults,
                counts.stack_bytes >> 10,
                counts.stack_bytes / counts.faults.max(1),
                counts.hole_bytes >> 10,
                counts.holes_full,
                counts.lost,
                counts.lost_bytes >> 10,
                counts.no_bounds,
            );
        }
        // Reaped by the loop, or never run (a failed exec): nothing left to kill. The group's
        // watchdog is told so.
        drop(child);
        drop(group);
        // Closing the events makes the kernel unregister the tracepoints and free the ring
        // buffers: 0.2 s, left to a process of their own ([`close_after_exit`]) and, should
        // that fail, done while the trace files are finished.
        let teardown = std::thread::spawn(move || {
            let started = std::time::Instant::now();
            // The kernel charges a ring to the process that mapped it first and debits the
            // one that unmaps it last: mapped again in the grandchild, this process stays
            // charged. That only matters to a process the kernel checks, one without
            // CAP_IPC_LOCK (a sweep recording step after step in process).
            let mapped: Vec<_> = if crate::procfs::may_lock_memory() {
                rings.iter().flat_map(|r| r.mapped.clone()).collect()
            } else {
                Vec::new()
            };
            let events = close_after_exit(events, &mapped);
            // Detaching the programs unregisters their tracepoints meanwhile.
            let detaching = bpf.map(|bpf| std::thread::spawn(move || bpf.close()));
            // The CPUs' rings freed at once.
            let unmapping: Vec<_> = rings
                .into_iter()
                .map(|ring| std::thread::spawn(move || drop(ring)))
                .collect();
            drop(events);
            for thread in unmapping.into_iter().chain(detaching) {
                let _ = thread.join();
            }
            started.elapsed()
        });

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
        // The processes' last statistics lines and ends, for a live view.
        state.flush_live(true);
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
                    let generation = fltrace_trace::spool::first_log_generation(
                        logs.dir(),
                        &options.dir,
                        pid,
                        state.preload_generations.get(&pid).copied().unwrap_or(0),
                        mono_offset,
                    );
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
        let waited = std::time::Instant::now();
        if let Ok(took) = teardown.join() {
            log::debug!(
                "closing the perf events took {:.3} s, {:.3} s of it after the rest was done",
                took.as_secs_f64(),
                waited.elapsed().as_secs_f64()
            );
        }
        // Finished: what the recording wrote is fixed now, and its readers check it so.
        if trace_error.is_none() {
            for &pid in &pids {
                if let Err(e) = fltrace_trace::checksums::write(&options.dir, pid) {
                    keep_first(&mut trace_error, Err(e.into()));
                    break;
                }
            }
        }
        RecordingOutcome {
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
            far_unreached: std::mem::take(&mut state.far_unreached),
            far_outside: std::mem::take(&mut state.far_outside),
            allocs,
            access,
            trace_error,
            trace_stopped,
            cache,
        }
    }
}

/// Hands the events' last references to a process of their own, which closes them once this
/// one has let them go, and returns the events (whose closing is then quick here), or, if
/// no such process could be made, the events as they were.
///
/// Closing the last reference of an event makes the kernel unregister its tracepoint and
/// wait for every CPU to be past it, one tracepoint at a time under a global lock: about
/// 40 ms a tracepoint, 0.16-0.20 s at the end of every recording, on the path of the
/// command's exit (an exiting process closes its files before its parent hears of it). The
/// events' descriptors stay open in a grandchild (a double fork: nothing is left to reap)
/// that waits until the recorder has dropped its own, then exits: its exit does the
/// unregistering, after the recorder's, which no one waits for. The grandchild keeps no
/// other descriptor (not the output files, not the allocation logs whose room a removal
/// frees) and no memory of the recorder's beyond its exit (an exit frees memory before it
/// closes files); the rings are not inherited (perf maps them VM_DONTCOPY).
fn close_after_exit(
    events: Vec<perf_abi::PerfEvent>,
    rings: &[(std::os::fd::RawFd, usize)],
) -> Vec<perf_abi::PerfEvent> {
    use std::os::fd::AsRawFd;
    if events.is_empty() {
        return events;
    }
    let Some((read_end, write_end)) = crate::os::raw_pipe_cloexec() else {
        return events;
    };
    let Some((ready_read, ready_write)) = crate::os::raw_pipe_cloexec() else {
        // SAFETY: our descriptors, closed once each.
        unsafe {
            libc::close(read_end);
            libc::close(write_end);
        }
        return events;
    };
    // The descriptors the grandchild keeps, in order, and the ranges between them it closes:
    // worked out before the fork, as the child of a threaded process may not allocate.
    let mut keep: Vec<u32> = events
        .iter()
        .map(|event| event.fd().as_raw_fd() as u32)
        .chain([read_end as u32, ready_write as u32])
        .collect();
    keep.sort_unstable();
    keep.dedup();
    let mut close: Vec<(u32, u32)> = Vec::with_capacity(keep.len() + 1);
    let mut from = 0u32;
    for &fd in &keep {
        if fd > from {
            close.push((from, fd - 1));
        }
        from = fd + 1;
    }
    close.push((from, u32::MAX));
    // SAFETY: the child only makes async-signal-safe system calls (close_range, fork, read,
    // _exit) on memory prepared before the fork.
    let child = unsafe { libc::fork() };
    if child == 0 {
        unsafe {
            for &(first, last) in &close {
                libc::syscall(libc::SYS_close_range, first, last, 0);
            }
            if libc::fork() != 0 {
                // The child ends at once (its parent reaps it); the grandchild goes on.
                libc::_exit(0);
            }
            // The rings mapped here too: unmapping the last mapping of a ring frees it (tens
            // of milliseconds each), which is then this process's to do. Failures are
            // harmless: the recorder's unmapping frees that ring, as without this.
            for &(fd, len) in rings {
                perf_abi::map_ring_again(fd, len);
            }
            libc::close(ready_write);
            // Until every writer end is closed: the recorder's, once it dropped the events.
            perf_abi::wait_on_pipe(read_end);
            libc::_exit(0);
        }
    }
    // SAFETY: our own descriptors, closed once each.
    unsafe {
        libc::close(read_end);
        libc::close(ready_write);
    }
    if child < 0 {
        unsafe {
            libc::close(write_end);
            libc::close(ready_read);
        }
        return events;
    }
    let _ = crate::os::reap(child, true);
    // Until the grandchild has mapped the rings (or is gone): end of file either way.
    perf_abi::wait_on_pipe(ready_read);
    unsafe { libc::close(ready_read) };
    // The events go first (the grandchild holds them), then the pipe tells it so.
    drop(events);
    unsafe { libc::close(write_end) };
    Vec::new()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The processes running this test's executable, other than this one.
    fn others_running_this() -> Vec<i32> {
        let me = std::process::id() as i32;
        let exe = std::fs::read_link("/proc/self/exe").unwrap();
        std::fs::read_dir("/proc")
            .unwrap()
            .flatten()
            .filter_map(|entry| entry.file_name().to_str()?.parse::<i32>().ok())
            .filter(|&pid| pid != me)
            .filter(|pid| std::fs::read_link(format!("/proc/{pid}/exe")).is_ok_and(|e| e == exe))
            .collect()
    }

    /// The events are handed to a process of their own and none is left here; that process
    /// ends once they are dropped here, leaving nothing running nor to reap.
    #[test]
    fn events_close_in_a_process_of_their_own() {
        let before = others_running_this();
        let attr = perf_abi::major_fault_attr();
        let events: Vec<perf_abi::PerfEvent> = (0..3)
            .map(|_| {
                perf_abi::PerfEvent::open(&attr, 0, -1).expect("a software event on this process")
            })
            .collect();
        let fds: Vec<i32> = events
            .iter()
            .map(|e| std::os::fd::AsRawFd::as_raw_fd(e.fd()))
            .collect();
        let kept = close_after_exit(events, &[]);
        assert!(kept.is_empty(), "{} events kept", kept.len());
        for fd in fds {
            let link = std::fs::read_link(format!("/proc/self/fd/{fd}"));
            assert!(
                link.as_ref()
                    .map_or(true, |l| !l.to_string_lossy().contains("perf_event")),
                "fd {fd} still an event here: {link:?}"
            );
        }
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        loop {
            let left: Vec<i32> = others_running_this()
                .into_iter()
                .filter(|pid| !before.contains(pid))
                .collect();
            if left.is_empty() {
                break;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "still running after 10 s: {left:?}"
            );
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
    }
}
