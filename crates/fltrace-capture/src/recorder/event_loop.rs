//! The event loop: the rings drained in time order, the processes checkpointed every second,
//! the command waited for and signalled, until the traced processes are gone.

use std::os::unix::process::ExitStatusExt as _;
use std::process::ExitStatus;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use rustix::process::Signal;

use super::dispatch::State;
use super::{ActiveRecording, CpuRings, Ended, Progress, keep_first, note_stop};
use crate::bpf::{BpfCapture, BpfRecord, BpfRing, Slot};
use crate::os::{
    become_urgent, pidfd_open, poll_rings, process_alive, reap, signal_process, wait_for_exit,
};

impl ActiveRecording {
    /// Reads records until the traced processes are gone (or, for
    /// an attached process, until `stop`), checkpointing the tables every second. Never
    /// returns early: a trace that cannot be written stops the reading, not the waiting.
    pub(super) fn run(
        &mut self,
        stop: &AtomicUsize,
        progress: &mut impl FnMut(&Progress),
    ) -> Ended {
        let root = self.child.pid();
        let root_pid = self.root_pid;
        let (rings, state) = (&mut self.rings, &mut self.state);
        let mut bpf = self.bpf.as_mut();
        let alloc_logs = &self.alloc_logs;

        become_urgent();
        // Readable when the target exits, so that the end is noticed at once.
        let pidfd = pidfd_open(root_pid as i32);
        let started = Instant::now();
        // Records are handled in time order across CPUs, up to the newest time seen in the
        // previous round (perf's ordering rule): anything older has been written by now.
        let mut watermark = 0u64;
        let mut positions: Vec<Vec<(u64, u64)>> = vec![Vec::new(); rings.len() + 1];
        // The perf events whose tasks are gone (see `poll_rings`).
        let mut hung_up = vec![false; self.events.len()];
        let mut last_stats = Instant::now();
        let mut last_memory = Instant::now();
        // With allocations traced, each process's resident memory is followed finely, and
        // the loop wakes up for it.
        let resident = state.session.resident_series;
        let mut last_resident: Option<Instant> = None;
        let wake_ms = if resident {
            crate::process::RESIDENT_EVERY.as_millis() as i32
        } else {
            100
        };
        let mut last_progress = Instant::now();
        let mut last_live = Instant::now();
        let mut exit_status: Option<ExitStatus> = None;
        let mut rusage_hwm = 0;
        let mut stop_seen = 0;
        let mut stop_at: Option<Instant> = None;
        // The watermark of the last round: see `PidFiling::read_until`.
        let mut read_until = 0;
        // Once the trace cannot be written, records are no longer read (the kernel drops
        // them; the program does not wait for fltrace) and fltrace only waits for the
        // program's end.
        let mut trace_error: Option<String> = None;
        let mut trace_stopped: Option<Duration> = None;
        loop {
            let mut drained = 0;
            if trace_error.is_none() {
                let used = watermark;
                let (handled, newest) = drain_in_time_order(
                    rings,
                    bpf.as_deref_mut().map(BpfCapture::ring),
                    state,
                    watermark,
                    &mut positions,
                );
                drained = handled;
                watermark = watermark.max(newest);
                for cpu in rings.iter_mut() {
                    if let Some(major) = &mut cpu.major {
                        drained += major.drain(|r| state.handle_major(r));
                    }
                }
                state.end_round(false);
                hand_on_stack_tops(state, bpf.as_deref_mut());
                // The records deferred a round ago replayed now: every record up to the
                // last round's watermark is read, forks of later processes among them.
                state.pid_filing.read_until(read_until);
                read_until = used;
                learn_images(alloc_logs, state);
                keep_first(&mut trace_error, state.error.take().map_or(Ok(()), Err));
                keep_first(&mut trace_error, state.finish_exited());
                note_stop(&trace_error, &mut trace_stopped, started);
            }

            if let Some(pid) = root {
                if exit_status.is_none()
                    && let Ok(Some(reaped)) = reap(pid, false)
                {
                    self.child.reaped();
                    exit_status = Some(reaped.status);
                    rusage_hwm = reaped.peak_rss;
                }
            } else if !self
                .attached
                .iter()
                .any(|&(pid, _)| process_alive(pid as i32))
            {
                // Attached: the recording ends when every process asked for is gone.
                exit_status = Some(ExitStatus::from_raw(0));
            }
            if exit_status.is_some() {
                if stop_seen > 0
                    && let Some(group) = &self.group
                {
                    // Interrupted: what the command started and left (a background job
                    // ignores SIGINT and SIGQUIT) ends with it, not untraced after fltrace.
                    group.signal(Signal::KILL);
                }
                if trace_error.is_none() {
                    // Every record of the exited tree is already in the buffers: one more
                    // pass.
                    drain_in_time_order(
                        rings,
                        bpf.as_deref_mut().map(BpfCapture::ring),
                        state,
                        u64::MAX,
                        &mut positions,
                    );
                    for cpu in rings.iter_mut() {
                        if let Some(major) = &mut cpu.major {
                            major.drain(|r| state.handle_major(r));
                        }
                    }
                    state.end_round(true);
                    learn_images(alloc_logs, state);
                    keep_first(&mut trace_error, state.error.take().map_or(Ok(()), Err));
                    note_stop(&trace_error, &mut trace_stopped, started);
                }
                state.flush_live(true);
                break;
            }

            let requests = stop.load(Ordering::Relaxed);
            if requests > stop_seen {
                stop_seen = requests;
                match root {
                    None => {
                        exit_status = Some(ExitStatus::from_raw(0));
                        continue;
                    }
                    // To every process of the command, at once, when it has a group of its
                    // own, which no terminal signals. In fltrace's own terminal job, only if
                    // the command is still there a moment later (the terminal signals the
                    // whole job: fltrace alone was signalled).
                    Some(_) if requests == 1 => {
                        let wait = match self.group {
                            Some(_) => Duration::ZERO,
                            None => Duration::from_millis(300),
                        };
                        stop_at = Some(Instant::now() + wait);
                    }
                    Some(pid) => match &self.group {
                        Some(group) => group.signal(Signal::KILL),
                        None => signal_process(pid, Signal::KILL),
                    },
                }
            }
            if let (Some(at), Some(pid)) = (stop_at, root)
                && Instant::now() >= at
            {
                // SIGINT whatever fltrace got: what a program ends on (SIGHUP may mean
                // "reload", SIGQUIT "dump core").
                match &self.group {
                    Some(group) => group.signal(Signal::INT),
                    None => signal_process(pid, Signal::INT),
                }
                stop_at = None;
            }

            if resident
                && last_resident.is_none_or(|at| at.elapsed() >= crate::process::RESIDENT_EVERY)
            {
                state.sample_resident();
                last_resident = Some(Instant::now());
            }
            if last_memory.elapsed() >= Duration::from_millis(100) {
                state.sample_memory();
                last_memory = Instant::now();
            }
            if last_stats.elapsed() >= Duration::from_secs(1) && trace_error.is_none() {
                // Each second, what was recorded becomes readable even if fltrace is killed.
                keep_first(&mut trace_error, state.checkpoint());
                if trace_error.is_none() {
                    keep_first(&mut trace_error, state.write_stats());
                }
                note_stop(&trace_error, &mut trace_stopped, started);
                last_stats = Instant::now();
            }
            if last_live.elapsed() >= crate::live::FLUSH_EVERY {
                state.flush_live(false);
                last_live = Instant::now();
            }
            if last_progress.elapsed() >= Duration::from_millis(250) {
                progress(&Progress {
                    faults: state.faults,
                    lost: state.lost + bpf.as_deref().map_or(0, |b| b.counts().lost),
                    elapsed: started.elapsed(),
                });
                last_progress = Instant::now();
            }
            if trace_error.is_some() {
                // The rings stay readable now that nobody reads them: wait on the program
                // alone.
                wait_for_exit(pidfd.as_ref(), wake_ms);
            } else if drained == 0 {
                let ring = bpf.as_deref().map(BpfCapture::ring_fd);
                poll_rings(&self.events, &mut hung_up, ring, pidfd.as_ref(), wake_ms);
            }
        }
        Ended {
            exit_status,
            rusage_hwm,
            trace_error,
            trace_stopped,
            started,
        }
    }
}

/// Tells the BPF program where the copies of each thread's stack may stop.
fn hand_on_stack_tops(state: &mut State, bpf: Option<&mut BpfCapture>) {
    let tops = std::mem::take(&mut state.stack_tops);
    if let Some(bpf) = bpf {
        for (tid, low, top) in tops {
            bpf.set_stack_top(tid, low, top);
        }
    }
}

/// Tells the allocation logs' drain what the recorder knows of each process's images.
fn learn_images(alloc_logs: &Option<crate::AllocLogs>, state: &State) {
    let Some(logs) = alloc_logs else {
        return;
    };
    // The library's logs are named by the pid the kernel gave: a later process that reused
    // one is told apart only at the end (`State::place_reused_logs`), which drops what the
    // drain converted of that pid.
    for process in state.processes.values().filter(|p| p.pid == p.os_pid) {
        if let Some((first, generation)) = process.preload_images() {
            logs.learn_image(process.pid, first, generation, || process.image_start_ns());
        }
    }
}

/// Handles the readable records of all CPUs' fault rings (and of the BPF ring, when it carries
/// the faults) in time order, those not newer than `watermark`; leaves the rest for the next
/// round. Returns how many were handled and the newest timestamp readable.
///
/// Records of one process spread over CPUs as its threads migrate: handled CPU by CPU, a
/// thread's faults could be read before the exec or mmap records that explain them. The BPF
/// ring holds the faults of all CPUs in the order they were written, which is their time
/// order within a thread.
fn drain_in_time_order(
    rings: &mut [CpuRings],
    mut bpf: Option<&mut BpfRing>,
    state: &mut State,
    watermark: u64,
    positions: &mut [Vec<(u64, u64)>],
) -> (usize, u64) {
    // Order matters less than losing records: a filling buffer is emptied whatever the time.
    let watermark = if rings.iter().any(|r| r.faults.half_full())
        || bpf.as_ref().is_some_and(|b| b.half_full())
    {
        u64::MAX
    } else {
        watermark
    };
    let mut newest = 0;
    let mut ends = Vec::with_capacity(positions.len());
    for (ring, list) in rings.iter().zip(positions.iter_mut()) {
        list.clear();
        let (mut pos, head) = ring.faults.readable();
        while pos < head {
            let Some((record, next)) = ring.faults.record_at(pos) else {
                log::error!("perf ring buffer: corrupt record header, skipping to head");
                pos = head;
                break;
            };
            let time = state.timestamp(&record);
            newest = newest.max(time);
            list.push((time, pos));
            pos = next;
        }
        ends.push(pos);
    }
    // The BPF ring's list is the last; records still being written end it.
    if let (Some(ring), Some(list)) = (bpf.as_deref(), positions.get_mut(rings.len())) {
        list.clear();
        let (mut pos, head) = ring.readable();
        while pos < head {
            let Some((slot, next)) = ring.record_at(pos) else {
                break;
            };
            if let Slot::Record(bytes) = slot {
                let time = BpfRecord::time_of(bytes);
                newest = newest.max(time);
                list.push((time, pos));
            }
            pos = next;
        }
        ends.push(pos);
    }
    let lists = ends.len();
    let mut next_index = vec![0usize; lists];
    let mut handled = 0;
    loop {
        let mut best: Option<(u64, usize)> = None;
        for (i, list) in positions[..lists].iter().enumerate() {
            if let Some(&(time, _)) = list.get(next_index[i])
                && time <= watermark
                && best.is_none_or(|(t, _)| time < t)
            {
                best = Some((time, i));
            }
        }
        let Some((_, i)) = best else {
            break;
        };
        let (_, pos) = positions[i][next_index[i]];
        next_index[i] += 1;
        handled += 1;
        // Each record's room goes back to the kernel as soon as it is handled: a round of a
        // full ring takes long (every fault is unwound), and the kernel drops what finds no
        // room meanwhile.
        let handled_to = positions[i]
            .get(next_index[i])
            .map_or(ends[i], |&(_, pos)| pos);
        if i < rings.len() {
            if let Some((record, _)) = rings[i].faults.record_at(pos) {
                state.handle(record);
            }
            rings[i].faults.consume(handled_to);
        } else if let Some(ring) = bpf.as_deref_mut() {
            if let Some((Slot::Record(bytes), _)) = ring.record_at(pos) {
                state.handle_bpf(bytes);
            }
            ring.consume(handled_to);
        }
    }
    (handled, newest)
}
