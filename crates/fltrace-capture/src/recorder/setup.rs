//! Setting a recording up: the tracepoints and perf events opened with their rings, the
//! command started or the running processes attached to, the side captures started.

use std::borrow::Cow;
use std::os::fd::AsRawFd;
use std::path::PathBuf;

use rustc_hash::FxHashSet;

use fltrace_trace::keys;

use super::dispatch::{FaultFields, RemapFields, State, UnmapFields};
use super::{ActiveRecording, CpuRings, Options, StackCopy, Target};
use crate::Error;
use crate::bpf::BpfCapture;
use crate::budget::{Carrier, RingPlan, plan_rings};
use crate::child::ChildGuard;
use crate::os::{monotonic_now_ns, unix_now_ns};
use crate::perf_abi::{self, PerfEvent, Tracepoint, perf_event_attr};
use crate::ring::{RingBuffer, page_size};
use crate::target::PendingChild;

impl ActiveRecording {
    /// Opens the tracepoints and events, forks the command (waiting before its exec) or
    /// attaches to the process, starts the allocation and access captures, and lets the
    /// command exec. Every error after the fork kills and reaps the child (see
    /// [`ChildGuard`]).
    pub(super) fn set_up(target: &Target, options: &Options) -> Result<ActiveRecording, Error> {
        // Before anything runs: a recording that could not be kept must not cost a run.
        fltrace_trace::files::check_output_dir(&options.dir)?;
        let tracefs =
            perf_abi::tracefs().map_err(Error::kernel("tracefs (tracepoint ids and formats)"))?;
        let user_tp = Tracepoint::open(&tracefs, "exceptions", "page_fault_user")
            .map_err(Error::kernel("tracepoint exceptions:page_fault_user"))?;
        let kernel_tp = Tracepoint::open(&tracefs, "exceptions", "page_fault_kernel").ok();
        let fields = match (user_tp.field("address"), user_tp.field("error_code")) {
            // perf reports no mapping for memory that `mremap` grew or moved: the system
            // call's entry and return, in the fault ring, say which. Optional, as a kernel
            // may lack syscall tracepoints.
            (Some((address, 8)), Some((error_code, 8))) => FaultFields {
                address,
                error_code,
                remap: RemapFields::open(&tracefs),
                // Unmapped memory leaves the model, which then follows the live mappings.
                unmap: UnmapFields::open(&tracefs),
            },
            _ => {
                return Err(Error::Kernel {
                    what: "tracepoint exceptions:page_fault_user",
                    source: std::io::Error::from_raw_os_error(libc::EINVAL),
                    hint: " (unexpected field layout)",
                });
            }
        };
        let cpus = perf_abi::online_cpus().map_err(Error::kernel("online CPUs"))?;
        // The faults go through the BPF ring unless a fixed copy is asked for or BPF is
        // missing; started before the command so that its first fault is caught.
        let (mut bpf, plan, stack_bytes) = start_capture(options, &cpus)?;

        // The runtime's shared pages, one per process: `<prefix>-<pid>`.
        let far_prefix = options.far_memory.as_ref().map(|_| {
            PathBuf::from(format!(
                "/dev/shm/fltrace-rt-{}-{}",
                std::process::id(),
                unix_now_ns()
            ))
        });
        let mut far_env = match (&options.far_memory, &far_prefix) {
            (Some(far), Some(prefix)) => {
                crate::runtime::check_userfaultfd()?;
                far.environment(prefix)
            }
            _ => Vec::new(),
        };
        crate::alloc_spool::recover_stale_spools(&options.dir, crate::SpoolLogs::Remove);
        let mut alloc_logs = match &options.allocs {
            Some(crate::AllocTracing::Preload(library)) => {
                let mut logs = crate::AllocLogs::create(&options.dir, options.credentials)?;
                logs.pair_with(options.pairing.as_ref().map(|p| p.0.clone()));
                if options.far_memory.is_none() {
                    far_env.push(("LD_PRELOAD".into(), crate::runtime::preload_value(library)));
                }
                far_env.push(logs.environment());
                Some(logs)
            }
            Some(crate::AllocTracing::Uprobes) | None => None,
        };
        if let Some(backing) = &options.heap_backing {
            if !far_env.iter().any(|(name, _)| name == "LD_PRELOAD") {
                far_env.push((
                    "LD_PRELOAD".into(),
                    crate::runtime::preload_value(&backing.library),
                ));
            }
            far_env.push(backing.environment());
        }
        let mut attached: Vec<(i32, Vec<i32>)> = Vec::new();
        let mut attached_names = Vec::new();
        // From here on, any error return drops `child`, which kills and reaps it.
        let (mut child, group, tasks, enable_on_exec) = match target {
            Target::Command(argv) => {
                let (child, group) = PendingChild::spawn_in_own_group(
                    argv,
                    options.credentials,
                    &far_env,
                    options.detached_output.as_deref(),
                )?;
                let pid = child.pid();
                (ChildGuard::pending(child), group, vec![pid], true)
            }
            Target::Pids { pids, children } => {
                attached = attach_processes(pids, *children)?;
                attached_names = attached
                    .iter()
                    .map(|(pid, _)| (*pid as u32, process_name(*pid)))
                    .collect();
                let tasks = attached
                    .iter()
                    .flat_map(|(_, t)| t.iter().copied())
                    .collect();
                (ChildGuard::none(), None, tasks, false)
            }
        };
        let root_pid = child.pid().unwrap_or(tasks[0]) as u32;

        match &mut bpf {
            Some(capture) => {
                for &task in attached
                    .iter()
                    .map(|(pid, _)| pid)
                    .chain(child.pid().iter())
                {
                    capture
                        .trace(task as u32)
                        .map_err(Error::kernel("the BPF table of traced processes"))?;
                }
            }
            None => {
                log::debug!("faults in per-CPU perf rings with {stack_bytes}-byte stack copies")
            }
        }
        // With BPF the perf events carry the side band alone (a dummy event leads each CPU's
        // ring); else the fault tracepoint leads it, with its stack copies.
        let mut fault_attr = match &bpf {
            Some(_) => perf_abi::sideband_attr(8),
            None => perf_abi::fault_tracepoint_attr(user_tp.id, stack_bytes, true),
        };
        let mut kernel_attr = perf_abi::fault_tracepoint_attr(
            kernel_tp.as_ref().map_or(0, |t| t.id),
            stack_bytes,
            false,
        );
        let mut major_attr = perf_abi::major_fault_attr();
        // Laid out as the fault samples, whose ring they share; a stack copy of one word.
        let mut remap_attrs: Vec<perf_event_attr> = fields
            .remap
            .iter()
            .flat_map(|f| [f.enter_id, f.exit_id])
            .chain(fields.unmap.map(|f| f.enter_id))
            .map(|id| perf_abi::fault_tracepoint_attr(u64::from(id), 8, false))
            .collect();
        for attr in [&mut fault_attr, &mut kernel_attr, &mut major_attr]
            .into_iter()
            .chain(remap_attrs.iter_mut())
        {
            attr.set_enable_on_exec(u64::from(enable_on_exec));
            // Wake the recorder when an eighth of the buffer is full, not on every fault.
            attr.set_watermark(1);
            attr.__bindgen_anon_2.wakeup_watermark = (plan.per_cpu / 8) as u32;
        }
        major_attr.__bindgen_anon_2.wakeup_watermark = 4096.min(plan.per_cpu_major as u32 / 2);

        let opening = std::time::Instant::now();
        let optional_attrs: Vec<&perf_event_attr> = match (&bpf, &kernel_tp) {
            (None, Some(_)) => Some(&kernel_attr),
            _ => None,
        }
        .into_iter()
        .chain(remap_attrs.iter())
        .collect();
        let (events, rings) = open_events(
            &cpus,
            &tasks,
            &fault_attr,
            optional_attrs,
            bpf.is_none().then_some(&major_attr),
            &plan,
        )?;
        log::debug!(
            "{} perf events opened and {} rings of {} KiB mapped in {:.3} s; kernel memory of \
             the rings and BPF maps at most {} KiB ({} KiB shared)",
            events.len(),
            rings.len(),
            plan.per_cpu >> 10,
            opening.elapsed().as_secs_f64(),
            plan.total() >> 10,
            plan.shared >> 10,
        );
        if !enable_on_exec {
            for event in &events {
                event
                    .enable()
                    .map_err(Error::kernel("enabling perf events"))?;
            }
        }

        let start_ns = unix_now_ns();
        let mono_offset = start_ns.wrapping_sub(monotonic_now_ns());
        // The recording id of every table: unique across runs and, in practice, across
        // machines.
        let recording = format!("{root_pid}-{start_ns}");
        if let Some(logs) = &mut alloc_logs {
            logs.write_metadata(&recording, mono_offset)?;
            // A live view sees the calls as the drain converts them.
            if let Some(feed) = &options.live {
                logs.show_live(feed.alloc_sink());
            }
            if options.drain_allocs || options.live.is_some() {
                logs.start_drain(&recording, mono_offset);
            }
        }
        let metadata = vec![
            (keys::SESSION.to_owned(), recording.clone()),
            (keys::START_NS.to_owned(), start_ns.to_string()),
            (keys::COMMAND.to_owned(), command_line(target)),
            (
                keys::VERSION.to_owned(),
                env!("CARGO_PKG_VERSION").to_owned(),
            ),
        ];
        let mut state = State::new(
            root_pid,
            options,
            far_prefix,
            metadata,
            fields,
            (&fault_attr, &major_attr),
            mono_offset,
        );
        if bpf.is_some() && enable_on_exec {
            // Its faults before the exec are fltrace's own, not the program's.
            state.awaiting_exec = Some(root_pid);
        }
        for (pid, _) in &attached {
            state.attach_existing(*pid as u32)?;
        }
        let attached_allocs = match (attached.first(), &options.allocs) {
            (Some((pid, _)), Some(crate::AllocTracing::Uprobes)) => {
                Some(crate::uprobes::AttachedAllocs::start(
                    *pid,
                    &tasks,
                    &options.dir,
                    mono_offset,
                    &recording,
                    options.live.as_ref().map(|feed| feed.alloc_sink()),
                )?)
            }
            _ => None,
        };
        let access = match options.access_samples {
            Some(freq) => Some(crate::access::AccessCapture::start(
                crate::access::availability(),
                freq,
                &tasks,
                enable_on_exec,
                crate::access::AccessTables::new(options.dir.clone(), recording.clone()),
                mono_offset,
                state.pid_filing.clone(),
            )?),
            None => None,
        };
        // Last: the command runs only once everything is in place. A failed exec has reaped
        // the child already.
        child.release()?;
        Ok(ActiveRecording {
            root_pid,
            started_command: enable_on_exec,
            child,
            group,
            attached: attached_names,
            events,
            rings,
            bpf,
            plan,
            state,
            alloc_logs,
            attached_allocs,
            access,
            mono_offset,
            recording,
        })
    }
}

/// The traced command line, for the tables' metadata: the command's arguments, or an
/// attached process's `/proc/<pid>/cmdline`.
fn command_line(target: &Target) -> String {
    match target {
        Target::Command(argv) => argv
            .iter()
            .map(|a| a.to_string_lossy())
            .collect::<Vec<Cow<'_, str>>>()
            .join(" "),
        Target::Pids { pids, .. } => pids
            .iter()
            .map(|pid| crate::procfs::command_line(*pid))
            .collect::<Vec<String>>()
            .join("; "),
    }
}

type Opened = (Vec<PerfEvent>, Vec<CpuRings>);

/// The BPF capture when it can carry the faults (with the rings it leaves the CPUs), else
/// the per-CPU rings of perf samples; and the bytes of stack each perf sample copies.
fn start_capture(
    options: &Options,
    cpus: &[i32],
) -> Result<(Option<BpfCapture>, RingPlan, u32), Error> {
    let page = page_size();
    let per_cpu = |stack_bytes| -> Result<_, Error> {
        let plan = plan_rings(options.buffer_mb, cpus.len(), page, Carrier::PerCpuRings)?;
        Ok((None, plan, stack_bytes))
    };
    let cap = match options.stack {
        StackCopy::Fixed(bytes) => return per_cpu(bytes),
        StackCopy::Live { cap } => cap,
    };
    let plan = plan_rings(options.buffer_mb, cpus.len(), page, Carrier::SharedRing)?;
    // A record must leave room for others: a copy at most a quarter of the ring.
    let cap = cap.min((plan.shared / 4).min(u32::MAX as usize) as u32);
    // Under far memory served in the faulting thread (asked for with --fault-path or in the
    // environment the runtime inherits), the recorder is woken a quarter of the runtime's
    // backlog at the latest (each CPU counts its own records), so that threads that wait for
    // it once that far behind are not left waiting for its timer. Handler threads never wait
    // for it: with them it is woken as before, by the bytes waiting.
    let in_thread = options.far_memory.as_ref().is_some_and(|far| {
        crate::FaultPath::asked_or_inherited(far.fault_path) == Some(crate::FaultPath::InThread)
    });
    let wake_records = if in_thread {
        (crate::recorder::far_backlog(options) / 4 / cpus.len().max(1) as u64).max(1) as u32
    } else {
        0
    };
    match BpfCapture::start(plan.shared, cap, wake_records, cpus) {
        Ok(capture) => Ok((Some(capture), plan, 8)),
        Err(e) => {
            log::warn!(
                "the faults' BPF program is unavailable ({e}): recording with {} bytes of stack \
                 copied with each perf sample instead, in rings per CPU",
                crate::DEFAULT_STACK_BYTES
            );
            per_cpu(crate::DEFAULT_STACK_BYTES)
        }
    }
}

/// One CPU's events and rings.
type CpuOpened = (Vec<PerfEvent>, Option<CpuRings>);

fn open_events(
    cpus: &[i32],
    tasks: &[i32],
    fault_attr: &perf_event_attr,
    // Events whose samples go to the fault ring, opened where the kernel allows.
    optional_attrs: Vec<&perf_event_attr>,
    major_attr: Option<&perf_event_attr>,
    plan: &RingPlan,
) -> Result<Opened, Error> {
    let data_pages = plan.per_cpu / page_size();
    let major_pages = plan.per_cpu_major / page_size();
    let fault_error = || Error::kernel("perf_event_open on exceptions:page_fault_user");
    // Each CPU's first fault event, whose mapping makes its ring: mapping one makes the
    // kernel allocate and zero all of it (tens of milliseconds for 256 MiB), under the
    // mapping process's mmap lock, so threads of this process would do it one after the
    // other; processes of their own map all but the first CPU's meanwhile ([`MappedElsewhere`]).
    let mut leaders = Vec::with_capacity(cpus.len());
    for &cpu in cpus {
        leaders.push(PerfEvent::open(fault_attr, tasks[0], cpu).map_err(fault_error())?);
    }
    let ring_len = (data_pages + 1) * page_size();
    let elsewhere = if cpus.len() > 1 && crate::procfs::may_lock_memory() {
        MappedElsewhere::start(&leaders[1..], ring_len)
    } else {
        MappedElsewhere::default()
    };
    let mut events = Vec::new();
    let mut rings = Vec::new();
    for (i, (&cpu, leader)) in cpus.iter().zip(leaders).enumerate() {
        if i > 0 {
            // Mapped by then, this process's mapping shares that ring.
            elsewhere.wait_mapped(i - 1);
        }
        let (cpu_events, cpu_rings) = open_cpu_events(
            cpu,
            leader,
            tasks,
            fault_attr,
            &optional_attrs,
            major_attr,
            (data_pages, major_pages),
        )?;
        events.extend(cpu_events);
        rings.extend(cpu_rings);
    }
    drop(elsewhere);
    Ok((events, rings))
}

/// Children that each map one CPU's ring, so that the rings are made at once ([`open_events`]),
/// and stay until this process has mapped it too: the ring lives while one mapping does.
/// Anything failing leaves this process to make the ring itself, as without them. The
/// kernel charges a ring's memory to the process that mapped it first and debits the one
/// that unmaps it last, so only a process that may lock memory (CAP_IPC_LOCK) uses them.
#[derive(Default)]
struct MappedElsewhere {
    /// Per ring: the child and the read end of the pipe it closes once its ring is mapped.
    children: Vec<Option<(i32, i32)>>,
    /// The write end of the pipe whose closing lets the children go.
    release: Option<i32>,
}

impl MappedElsewhere {
    fn start(leaders: &[PerfEvent], ring_len: usize) -> MappedElsewhere {
        let Some((release_read, release_write)) = crate::os::raw_pipe_cloexec() else {
            return MappedElsewhere::default();
        };
        let mut children = Vec::with_capacity(leaders.len());
        for leader in leaders {
            children.push(map_in_child(
                leader.fd().as_raw_fd(),
                ring_len,
                release_read,
                release_write,
            ));
        }
        // SAFETY: our descriptor, closed once.
        unsafe { libc::close(release_read) };
        MappedElsewhere {
            children,
            release: Some(release_write),
        }
    }

    /// Waits until the child mapping ring `i` has mapped it, or is gone.
    fn wait_mapped(&self, i: usize) {
        if let Some(Some((_, ready))) = self.children.get(i) {
            // End of file once the child closed its end (mapped, or gone).
            perf_abi::wait_on_pipe(*ready);
        }
    }
}

impl Drop for MappedElsewhere {
    fn drop(&mut self) {
        if let Some(release) = self.release.take() {
            // SAFETY: our descriptor, closed once: the children see end of file and exit.
            unsafe { libc::close(release) };
        }
        for (child, ready) in self.children.drain(..).flatten() {
            // SAFETY: our descriptor, closed once.
            unsafe { libc::close(ready) };
            let _ = crate::os::reap(child, true);
        }
    }
}

/// Forks a child that maps `len` bytes of event `fd`, closes the write end of the pipe it
/// returns the read end of, and exits once `release_read` reads end of file. `None` if the
/// child could not be made.
fn map_in_child(fd: i32, len: usize, release_read: i32, release_write: i32) -> Option<(i32, i32)> {
    let (ready_read, ready_write) = crate::os::raw_pipe_cloexec()?;
    // SAFETY: the child only makes async-signal-safe system calls (close, mmap, read, _exit).
    let child = unsafe { libc::fork() };
    if child == 0 {
        unsafe {
            libc::close(release_write);
            libc::close(ready_read);
            perf_abi::map_ring_again(fd, len);
            libc::close(ready_write);
            perf_abi::wait_on_pipe(release_read);
            libc::_exit(0);
        }
    }
    // SAFETY: our descriptors, closed once each.
    unsafe { libc::close(ready_write) };
    if child < 0 {
        unsafe { libc::close(ready_read) };
        return None;
    }
    Some((child, ready_read))
}

/// The events of `cpu` for every task and that CPU's rings ([`open_events`]).
fn open_cpu_events(
    cpu: i32,
    leader_event: PerfEvent,
    tasks: &[i32],
    fault_attr: &perf_event_attr,
    optional_attrs: &[&perf_event_attr],
    major_attr: Option<&perf_event_attr>,
    (data_pages, major_pages): (usize, usize),
) -> Result<CpuOpened, Error> {
    let mut events = Vec::new();
    let mut leader: Option<usize> = None;
    let mut major_leader: Option<usize> = None;
    let mut cpu_rings: Option<CpuRings> = None;
    let mut leader_event = Some(leader_event);
    for &task in tasks {
        let event = match leader_event.take() {
            Some(event) => event,
            None => PerfEvent::open(fault_attr, task, cpu).map_err(Error::kernel(
                "perf_event_open on exceptions:page_fault_user",
            ))?,
        };
        match leader {
            None => {
                let ring = RingBuffer::map(&event, data_pages)
                    .map_err(Error::kernel("mapping the perf ring buffer"))?;
                cpu_rings = Some(CpuRings {
                    faults: ring,
                    major: None,
                    mapped: vec![(event.fd().as_raw_fd(), (data_pages + 1) * page_size())],
                });
                leader = Some(events.len());
            }
            Some(i) => event
                .set_output(&events[i])
                .map_err(Error::kernel("redirecting perf output"))?,
        }
        let fault_index = leader.unwrap_or(events.len());
        events.push(event);
        for attr in optional_attrs {
            // Without the kernel fault event, faults in system calls go unrecorded;
            // without mremap's, the memory it moves goes unnamed; without munmap's,
            // unmapped memory stays in the model. Nothing else.
            if let Ok(event) = PerfEvent::open(attr, task, cpu)
                && event.set_output(&events[fault_index]).is_ok()
            {
                events.push(event);
            }
        }
        if let Some(Ok(event)) = major_attr.map(|attr| PerfEvent::open(attr, task, cpu)) {
            match major_leader {
                None => {
                    if let (Ok(ring), Some(rings)) =
                        (RingBuffer::map(&event, major_pages), cpu_rings.as_mut())
                    {
                        rings.major = Some(ring);
                        rings
                            .mapped
                            .push((event.fd().as_raw_fd(), (major_pages + 1) * page_size()));
                        major_leader = Some(events.len());
                        events.push(event);
                    }
                }
                Some(i) => {
                    if event.set_output(&events[i]).is_ok() {
                        events.push(event);
                    }
                }
            }
        }
    }
    Ok((events, cpu_rings))
}

/// The processes to attach to, each with its threads: `pids` and, with `children`, each
/// one's descendants as they are now (found through `/proc/<pid>/task/<tid>/children`),
/// breadth first, each process once. A descendant that exits meanwhile is left out; a pid
/// asked for that does not exist is an error.
fn attach_processes(pids: &[i32], children: bool) -> Result<Vec<(i32, Vec<i32>)>, Error> {
    let mut attached = Vec::new();
    let mut seen = FxHashSet::default();
    for &pid in pids {
        if !seen.insert(pid) {
            continue;
        }
        let tasks = attach_tasks(pid)?;
        let mut queue = std::collections::VecDeque::new();
        if children {
            queue.extend(children_of(&tasks));
        }
        attached.push((pid, tasks));
        while let Some(child) = queue.pop_front() {
            if !seen.insert(child) {
                continue;
            }
            // Gone since its parent's list was read: nothing to attach to.
            let Ok(tasks) = attach_tasks(child) else {
                continue;
            };
            queue.extend(children_of(&tasks));
            attached.push((child, tasks));
        }
    }
    Ok(attached)
}

/// The children of a process's threads, in pid order.
fn children_of(tasks: &[i32]) -> Vec<i32> {
    let pid = tasks.first().copied().unwrap_or(0);
    let mut children: Vec<i32> = tasks
        .iter()
        .flat_map(|&tid| crate::procfs::children(pid, tid))
        .collect();
    children.sort_unstable();
    children.dedup();
    children
}

/// A process's name (`comm`), empty when it cannot be read.
fn process_name(pid: i32) -> String {
    crate::procfs::comm(pid).unwrap_or_default()
}

/// The threads of a running process, its main thread first.
pub fn attach_tasks(pid: i32) -> Result<Vec<i32>, Error> {
    refuse_untraceable(pid)?;
    let mut tasks = crate::procfs::tasks(pid).map_err(|source| Error::Attach { pid, source })?;
    // The main thread first: its id is the process id the trace is named after.
    tasks.retain(|&t| t != pid);
    tasks.insert(0, pid);
    Ok(tasks)
}

/// Refuses a kernel thread (no user memory, no user stack: nothing would ever be recorded,
/// and the recording would wait for it forever) and a zombie (its memory is gone).
fn refuse_untraceable(pid: i32) -> Result<(), Error> {
    let stat = crate::procfs::stat(pid).map_err(|source| Error::Attach { pid, source })?;
    if stat.is_kernel_thread() {
        return Err(Error::NotTraceable {
            pid,
            why: "it is a kernel thread, which has no user memory to fault on",
        });
    }
    // Z a zombie, X one being reaped.
    if matches!(stat.state, 'Z' | 'X') {
        return Err(Error::NotTraceable {
            pid,
            why: "it is a zombie (it has exited; its parent has not reaped it)",
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A ring made by a child is the one this process then maps: the child holds a perf
    /// mapping of the ring's length once it says so, this process maps the same event and
    /// reads its header, and dropping lets the child go, reaped.
    #[test]
    fn a_child_makes_the_ring_this_process_maps() {
        let attr = perf_abi::major_fault_attr();
        // On one CPU: the kernel maps no inherited event of a task on every CPU.
        let event = PerfEvent::open(&attr, 0, 0).expect("a software event on this process");
        let pages = 64;
        let len = (pages + 1) * page_size();
        let elsewhere = MappedElsewhere::start(std::slice::from_ref(&event), len);
        let Some(Some((child, _))) = elsewhere.children.first().copied() else {
            panic!("no child made");
        };
        elsewhere.wait_mapped(0);
        let maps = std::fs::read_to_string(format!("/proc/{child}/maps")).expect("its maps");
        let perf: Vec<&str> = maps.lines().filter(|l| l.contains("perf_event")).collect();
        assert_eq!(perf.len(), 1, "{maps}");
        let range = perf[0].split_whitespace().next().unwrap_or_default();
        let (start, end) = range.split_once('-').expect("a range");
        let size = u64::from_str_radix(end, 16).unwrap() - u64::from_str_radix(start, 16).unwrap();
        assert_eq!(size, len as u64);
        let ring = RingBuffer::map(&event, pages).expect("the ring made by the child");
        assert_eq!(ring.readable(), (0, 0), "an empty ring");
        drop(elsewhere);
        assert!(
            !std::path::Path::new(&format!("/proc/{child}")).exists(),
            "child {child} left behind"
        );
    }
}
