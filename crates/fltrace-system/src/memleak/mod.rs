//! `fltrace memleak`: allocations not yet freed, by stack, kept in the kernel (bcc's memleak).
//! Without processes: the kernel's own allocations (kmem tracepoints: kmalloc, kmem_cache and
//! pages). For processes: uprobes on their C library's allocator, either counted in the kernel
//! by frame-pointer stacks (processes chosen by cgroup or name) or, for processes named by pid,
//! read by fltrace-capture's uprobe reader, which unwinds each stack from DWARF and keeps the
//! blocks here (complete stacks in code built without frame pointers).

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::AtomicUsize;
use std::time::{Duration, Instant};

use aya::Ebpf;
use aya::maps::HashMap as BpfHashMap;
use aya::programs::{TracePoint, UProbe};

use crate::Scope;
use crate::bpf::object::{self, Alloc, Config};
use crate::bpf::watch::{POLL, Prepared, Watch};
use crate::bpf::{
    Announcements, Frame, ProcessFilter, ProcessMaps, StackNames, attach_uprobe, fill_tgids,
    process_config, set_config, stack_frames, start_announcements, totals,
};
use crate::{Error, tracefs};
use fltrace_capture::{LiveAllocs, LiveOptions};

mod print;

pub use print::{describe_leak_target, write_leaks};

/// Kernel allocation tracepoints: program, slot, tracepoint, address field, size field.
const KERNEL_ALLOCS: [(&str, u32, &str, &str, &str); 3] = [
    ("alloc_0", 1, "kmalloc", "ptr", "bytes_alloc"),
    ("alloc_1", 2, "kmem_cache_alloc", "ptr", "bytes_alloc"),
    ("alloc_2", 3, "mm_page_alloc", "pfn", "order"),
];

/// Kernel free tracepoints: program, slot, tracepoints, address field.
const KERNEL_FREES: [(&str, u32, &[&str], &str); 3] = [
    ("free_0", 4, &["kfree"], "ptr"),
    ("free_1", 5, &["kmem_cache_free"], "ptr"),
    (
        "free_2",
        6,
        &["mm_page_free", "mm_page_free_batched"],
        "pfn",
    ),
];

/// User allocator functions: entry program, function.
const USER_ALLOCS: [(&str, &str); 6] = [
    ("malloc_enter", "malloc"),
    ("calloc_enter", "calloc"),
    ("realloc_enter", "realloc"),
    ("memalign_enter", "aligned_alloc"),
    ("memalign_enter", "memalign"),
    ("free_enter", "free"),
];

/// Whose allocations.
#[derive(Debug, Clone)]
pub enum LeakTarget {
    /// The kernel's.
    Kernel,
    /// Those of the processes of the filter, through this C library.
    User {
        /// The C library the processes use.
        libc: PathBuf,
    },
    /// Those of the running processes of the filter (named by pid), stacks unwound from DWARF.
    Attached,
}

/// Outstanding allocations of one stack.
#[derive(Debug, Clone)]
pub struct Outstanding {
    /// The process (user allocations only).
    pub pid: Option<u32>,
    /// The task that allocated (the first seen for this stack).
    pub comm: String,
    /// Bytes not freed.
    pub bytes: u64,
    /// Allocations not freed.
    pub allocations: u64,
    /// The allocation's stack, innermost first.
    pub stack: Vec<Frame>,
    /// Each block's address and size (with `-a`), lowest address first.
    pub addresses: Vec<(u64, u64)>,
}

/// What is outstanding at one moment.
#[derive(Debug, Clone, Default)]
pub struct LeakSnapshot {
    /// By stack, most bytes first.
    pub stacks: Vec<Outstanding>,
    /// Allocations seen since the start.
    pub allocs: u64,
    /// Frees of known allocations since the start.
    pub frees: u64,
    /// Allocations not kept because the table was full, or calls whose samples the kernel
    /// dropped (the ring was full).
    pub dropped: u64,
    /// Why `dropped` were.
    pub why: &'static str,
    /// One allocation in this many was sampled (bytes and allocations are scaled by it).
    pub sampled: u64,
    /// The reader had not caught up with the program when the report was taken.
    pub behind: bool,
    /// Blocks left out because their process replaced its image (exec) since: not leaks,
    /// the heap went with the image (unscaled, as kept).
    pub replaced: u64,
}

/// What a report holds, beside the stacks (bcc memleak's flags).
#[derive(Debug, Clone, Copy)]
pub struct LeakQuery {
    /// Only allocations at least this old.
    pub older: Duration,
    /// Stacks at most.
    pub top: usize,
    /// Blocks of these sizes only.
    pub min_size: u64,
    /// Blocks of these sizes only.
    pub max_size: u64,
    /// Each block's address and size too (`-a`).
    pub addresses: bool,
    /// Totals kept by stack, every age (`--combined-only`).
    pub combined: bool,
}

impl LeakQuery {
    fn keeps(&self, size: u64) -> bool {
        (self.min_size..=self.max_size).contains(&size)
    }
}

/// Why the DWARF reader's calls are missing.
const RING_FULL: &str = "the ring was full (the reader fell behind the program; -s N samples)";
/// Why the kernel's table did not keep allocations.
const TABLE_FULL: &str = "the table of outstanding allocations was full";

/// The running tracer; detached when dropped.
pub struct LeakTracer {
    engine: Engine,
    maps: ProcessMaps,
}

/// Where the outstanding blocks are kept.
enum Engine {
    /// In a BPF map, with the kernel's stacks.
    Bpf {
        ebpf: Ebpf,
        kernel: bool,
        _announcements: Option<Announcements>,
    },
    /// Here, from uprobe samples unwound from DWARF: per process, its comm and its reader;
    /// one allocation in `period` sampled.
    Unwound {
        readers: Vec<(u32, String, LiveAllocs)>,
        period: u64,
    },
}

/// The C library `pid` has mapped.
pub fn libc_of(pid: u32) -> Result<PathBuf, Error> {
    crate::procfs::mappings(pid)?
        .into_iter()
        .map(|m| PathBuf::from(m.path))
        .find(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with("libc.so") || n.starts_with("libc-"))
        })
        .ok_or_else(|| {
            Error::Unsupported(format!(
                "process {pid} has no C library loaded (a static program?): nothing to probe"
            ))
        })
}

fn field(name: &str, field: &str) -> Result<tracefs::Field, Error> {
    crate::bpf::Event::Tracepoint {
        category: "kmem".into(),
        name: name.into(),
    }
    .field(field)
}

impl LeakTracer {
    /// Loads and attaches the allocation probes.
    pub fn start(
        target: LeakTarget,
        processes: &ProcessFilter,
        options: LiveOptions,
    ) -> Result<LeakTracer, Error> {
        if matches!(target, LeakTarget::Attached) {
            return Self::start_unwound(&processes.tgids, options);
        }
        if options.period > 1 {
            return Err(Error::Unsupported(
                "-s samples the allocations of processes named by -p or a command (without \
                 --comm or --cgroup); the kernel's table counts every one"
                    .into(),
            ));
        }
        let mut ebpf = object::load()?;
        let mut base = Config::default();
        process_config(processes, &mut base)?;
        fill_tgids(&mut ebpf, &processes.tgids)?;
        let maps = ProcessMaps::default();
        let kernel = matches!(target, LeakTarget::Kernel);
        let announcements = match &target {
            LeakTarget::Kernel => {
                for (program, slot, tracepoint, ptr, size) in KERNEL_ALLOCS {
                    let ptr = field(tracepoint, ptr)?;
                    let size = field(tracepoint, size)?;
                    let mut config = base;
                    config.ptr_off = ptr.offset as u32;
                    config.ptr_size = ptr.size as u32;
                    config.size_off = size.offset as u32;
                    config.size_size = size.size as u32;
                    if tracepoint == "mm_page_alloc" {
                        config.size_kind = object::SIZE_PAGES_ORDER;
                    }
                    set_config(&mut ebpf, slot, config)?;
                    attach_tracepoint(&mut ebpf, program, &[tracepoint])?;
                }
                for (program, slot, tracepoints, ptr) in KERNEL_FREES {
                    let tracepoints: Vec<&str> = tracepoints
                        .iter()
                        .copied()
                        .filter(|t| tracefs::exists("kmem", t))
                        .collect();
                    let Some(first) = tracepoints.first() else {
                        continue;
                    };
                    let ptr = field(first, ptr)?;
                    let config = Config {
                        ptr_off: ptr.offset as u32,
                        ptr_size: ptr.size as u32,
                        ..Config::default()
                    };
                    set_config(&mut ebpf, slot, config)?;
                    attach_tracepoint(&mut ebpf, program, &tracepoints)?;
                }
                None
            }
            LeakTarget::Attached => None,
            LeakTarget::User { libc } => {
                let mut config = base;
                config.filter_flags |= object::ANNOUNCE_TGIDS;
                set_config(&mut ebpf, object::USER_ALLOC_SLOT, config)?;
                let announcements = start_announcements(&mut ebpf, &maps, false)?;
                attach_user(&mut ebpf, libc, &processes.tgids)?;
                Some(announcements)
            }
        };
        Ok(LeakTracer {
            engine: Engine::Bpf {
                ebpf,
                kernel,
                _announcements: announcements,
            },
            maps,
        })
    }

    fn start_unwound(tgids: &[u32], options: LiveOptions) -> Result<LeakTracer, Error> {
        let maps = ProcessMaps::default();
        let mut readers = Vec::new();
        for &tgid in tgids {
            let pid = tgid as i32;
            let tasks = fltrace_capture::attach_tasks(pid)?;
            maps.remember(tgid);
            let comm = crate::procfs::comm(tgid)?;
            let reader = LiveAllocs::start(pid, &tasks, options)?;
            readers.push((tgid, comm, reader));
        }
        Ok(LeakTracer {
            engine: Engine::Unwound {
                readers,
                period: options.period.max(1),
            },
            maps,
        })
    }

    /// Stops the tracer; for the DWARF-unwound one, says whether its reader failed.
    pub fn finish(self) -> Result<(), Error> {
        if let Engine::Unwound { readers, .. } = self.engine {
            for (_, _, reader) in readers {
                reader.finish()?;
            }
        }
        Ok(())
    }

    /// The mappings kept of the processes seen.
    pub fn process_maps(&self) -> &ProcessMaps {
        &self.maps
    }

    /// Waits until the calls made before now are read (the DWARF readers lag behind the
    /// program; the kernel's table is current), for at most `patience`: false if they are not.
    pub fn catch_up(&self, patience: Duration) -> bool {
        let Engine::Unwound { readers, .. } = &self.engine else {
            return true;
        };
        let now = crate::clock::monotonic_ns();
        let start = Instant::now();
        readers.iter().all(|(_, _, reader)| {
            reader.wait_drained(now, patience.saturating_sub(start.elapsed()))
        })
    }

    /// The outstanding allocations the query asks for, grouped by stack, most bytes first.
    pub fn snapshot(
        &self,
        names: &mut StackNames,
        query: &LeakQuery,
    ) -> Result<LeakSnapshot, Error> {
        let (ebpf, kernel) = match &self.engine {
            Engine::Bpf { ebpf, kernel, .. } => (ebpf, *kernel),
            Engine::Unwound { readers, period } => {
                return Ok(self.unwound_snapshot(readers, *period, names, query));
            }
        };
        let top = query.top;
        // The kernel's table keeps every block: its totals by stack are the blocks of every age.
        let older_than = if query.combined {
            Duration::ZERO
        } else {
            query.older
        };
        let map = ebpf
            .map("outstanding")
            .ok_or_else(|| Error::Unsupported("the BPF object has no outstanding map".into()))?;
        let outstanding: BpfHashMap<_, u64, Alloc> =
            BpfHashMap::try_from(map).map_err(Error::map("outstanding"))?;
        let now = crate::clock::monotonic_ns();
        let cutoff = now.saturating_sub(older_than.as_nanos() as u64);
        // (tgid, stack id) -> (bytes, allocations, comm, addresses)
        type Group = (u64, u64, [u8; 16], Vec<(u64, u64)>);
        let mut groups: HashMap<(u32, i32), Group> = HashMap::new();
        for entry in outstanding.iter() {
            let Ok((addr, alloc)) = entry else {
                // Freed while we walked the table.
                continue;
            };
            if alloc.time_ns > cutoff || !query.keeps(alloc.size) {
                continue;
            }
            let tgid = if kernel { 0 } else { alloc.tgid };
            let group = groups
                .entry((tgid, alloc.stack))
                .or_insert((0, 0, alloc.comm, Vec::new()));
            group.0 += alloc.size;
            group.1 += 1;
            if query.addresses {
                group.3.push((addr, alloc.size));
            }
        }
        let mut sorted: Vec<_> = groups.into_iter().collect();
        sorted.sort_by(|a, b| b.1.0.cmp(&a.1.0).then(b.1.1.cmp(&a.1.1)));
        sorted.truncate(top);

        let mut user_stacks: HashMap<u32, Vec<(u32, Vec<u64>)>> = HashMap::new();
        if !kernel {
            for ((tgid, stack), _) in &sorted {
                if let Some(frames) = stack_frames(ebpf, *stack) {
                    user_stacks
                        .entry(*tgid)
                        .or_default()
                        .push((*stack as u32, frames));
                }
            }
        }
        let mut named: HashMap<(u32, u32), Vec<Frame>> = HashMap::new();
        for (tgid, stacks) in &user_stacks {
            let maps = self.maps.get(*tgid);
            for (id, frames) in names.user(*tgid, maps.as_deref(), stacks, true) {
                named.insert((*tgid, id), frames);
            }
        }
        let stacks = sorted
            .into_iter()
            .map(
                |((tgid, stack), (bytes, allocations, comm, mut addresses))| {
                    addresses.sort_unstable();
                    Outstanding {
                        pid: (!kernel).then_some(tgid),
                        comm: object::comm_string(&comm),
                        bytes,
                        allocations,
                        stack: if kernel {
                            stack_frames(ebpf, stack)
                                .map(|f| names.kernel(&f))
                                .unwrap_or_default()
                        } else {
                            named.remove(&(tgid, stack as u32)).unwrap_or_default()
                        },
                        addresses,
                    }
                },
            )
            .collect();
        Ok(LeakSnapshot {
            stacks,
            allocs: totals(ebpf, 3),
            frees: totals(ebpf, 4),
            dropped: totals(ebpf, object::TOTAL_DROPPED),
            why: TABLE_FULL,
            sampled: 1,
            behind: false,
            // The kernel's table keeps the blocks of an image an exec replaced.
            replaced: 0,
        })
    }

    /// The blocks the uprobe readers keep, named through the same symbolizer.
    fn unwound_snapshot(
        &self,
        readers: &[(u32, String, LiveAllocs)],
        period: u64,
        names: &mut StackNames,
        query: &LeakQuery,
    ) -> LeakSnapshot {
        let top = query.top;
        let now = crate::clock::monotonic_ns();
        let mut snapshot = LeakSnapshot {
            why: RING_FULL,
            sampled: period,
            ..LeakSnapshot::default()
        };
        let mut stacks = Vec::new();
        for (tgid, comm, reader) in readers {
            // The sizes were chosen as the blocks came (bcc's -z/-Z filter in the probe).
            let blocks = match (query.combined, query.addresses) {
                (true, false) => reader.combined(),
                // Each block listed needs the blocks walked: of every age, as the totals.
                (true, true) => reader.outstanding(now, Duration::ZERO, true),
                (false, _) => reader.outstanding(now, query.older, query.addresses),
            };
            snapshot.allocs += blocks.allocs;
            snapshot.frees += blocks.frees;
            snapshot.dropped += blocks.lost;
            snapshot.replaced += blocks.replaced;
            let mut groups = blocks.stacks;
            groups.sort_by(|a, b| b.bytes.cmp(&a.bytes).then(b.blocks.cmp(&a.blocks)));
            groups.truncate(top);
            let numbered: Vec<(u32, Vec<u64>)> = groups
                .iter()
                .enumerate()
                .map(|(i, g)| (i as u32, g.frames.clone()))
                .collect();
            let maps = self.maps.get(*tgid);
            // A command started here was named fltrace until its exec.
            let current_comm = self.maps.comm(*tgid).unwrap_or_else(|| comm.clone());
            let mut named = names.user(*tgid, maps.as_deref(), &numbered, true);
            for (i, group) in groups.into_iter().enumerate() {
                stacks.push(Outstanding {
                    pid: Some(*tgid),
                    comm: current_comm.clone(),
                    // Each sampled block stands for `period` of them.
                    bytes: group.bytes * period,
                    allocations: group.blocks * period,
                    stack: named.remove(&(i as u32)).unwrap_or_default(),
                    addresses: group.addresses,
                });
            }
        }
        stacks.sort_by(|a, b| {
            b.bytes
                .cmp(&a.bytes)
                .then(b.allocations.cmp(&a.allocations))
        });
        stacks.truncate(top);
        snapshot.stacks = stacks;
        snapshot
    }
}

fn attach_tracepoint(ebpf: &mut Ebpf, program: &'static str, names: &[&str]) -> Result<(), Error> {
    let tp: &mut TracePoint = ebpf
        .program_mut(program)
        .ok_or_else(|| Error::Unsupported(format!("no {program} program")))?
        .try_into()
        .map_err(Error::program(program))?;
    tp.load().map_err(Error::program(program))?;
    for name in names {
        tp.attach("kmem", name).map_err(Error::program(program))?;
    }
    Ok(())
}

fn attach_user(ebpf: &mut Ebpf, libc: &Path, tgids: &[u32]) -> Result<(), Error> {
    let mut loaded: Vec<&str> = Vec::new();
    for (program, function) in USER_ALLOCS {
        let probe: &mut UProbe = ebpf
            .program_mut(program)
            .ok_or_else(|| Error::Unsupported(format!("no {program} program")))?
            .try_into()
            .map_err(Error::program("uprobe"))?;
        if !loaded.contains(&program) {
            probe.load().map_err(Error::program("uprobe"))?;
            loaded.push(program);
        }
        attach_uprobe(probe, libc, function, tgids)?;
    }
    let ret: &mut UProbe = ebpf
        .program_mut("alloc_return")
        .ok_or_else(|| Error::Unsupported("no alloc_return program".into()))?
        .try_into()
        .map_err(Error::program("uretprobe"))?;
    ret.load().map_err(Error::program("uretprobe"))?;
    for (_, function) in USER_ALLOCS.iter().filter(|(_, f)| *f != "free") {
        attach_uprobe(ret, libc, function, tgids)?;
    }
    Ok(())
}

/// What `fltrace memleak` is asked.
#[derive(Debug, Clone)]
pub struct LeakRequest {
    /// Whose allocations: none named means the kernel's.
    pub scope: Scope,
    /// Between reports (one report at the end without).
    pub interval: Option<Duration>,
    /// Reports before ending.
    pub count: Option<u64>,
    /// Stacks per report.
    pub top: usize,
    /// Only allocations at least this old (until the processes end: then every block left).
    pub older: Duration,
    /// Ending after this long.
    pub duration: Option<Duration>,
    /// One allocation sampled every this many (bcc's -s).
    pub sample: u64,
    /// Blocks of at least this size (bcc's -z).
    pub min_size: u64,
    /// Blocks of at most this size (bcc's -Z).
    pub max_size: u64,
    /// Each block's address and size too (bcc's -a).
    pub addresses: bool,
    /// Totals by stack, every age (bcc's --combined-only).
    pub combined: bool,
}

/// How the allocations of `filter` are read: the kernel's when no process is named; uprobes
/// read here with DWARF-unwound stacks for processes named by pid or started here; else
/// uprobes counted in the kernel by frame-pointer stacks, on the C library of `libc_pid`.
fn choose_target(
    scope: &Scope,
    filter: &ProcessFilter,
    libc_of: impl FnOnce(u32) -> Result<PathBuf, Error>,
) -> Result<LeakTarget, Error> {
    Ok(if filter.tgids.is_empty() {
        LeakTarget::Kernel
    } else if scope.only_named_processes() {
        LeakTarget::Attached
    } else if !scope.command.is_empty() {
        // The command has not exec'd yet: it will use the C library fltrace uses.
        LeakTarget::User {
            libc: libc_of(std::process::id())?,
        }
    } else {
        LeakTarget::User {
            libc: libc_of(filter.tgids[0])?,
        }
    })
}

/// `fltrace memleak` running: its reports, one per interval and one at the end.
pub struct LeakWatch {
    tracer: LeakTracer,
    watch: Watch,
    target: LeakTarget,
    tgids: Vec<u32>,
    names: StackNames,
    request: LeakRequest,
    reports: u64,
    next: Option<Instant>,
    done: bool,
}

impl LeakWatch {
    /// Places the probes (starting the command once they are in place); `stop` is raised on
    /// an interrupt.
    pub fn start(request: LeakRequest, stop: Arc<AtomicUsize>) -> Result<LeakWatch, Error> {
        let prepared = Prepared::new(&request.scope)?;
        let (tracer, prepared) = prepared.set_up(|filter| {
            let target = choose_target(&request.scope, filter, libc_of)?;
            let options = LiveOptions {
                period: request.sample.max(1),
                min_size: request.min_size,
                max_size: request.max_size,
            };
            Ok((LeakTracer::start(target.clone(), filter, options)?, target))
        })?;
        let (tracer, target) = tracer;
        let tgids = prepared.filter.tgids.clone();
        let maps = Some(tracer.process_maps().clone());
        let watch = prepared.start(stop, request.duration, maps, &request.scope.pids)?;
        Ok(LeakWatch {
            tracer,
            watch,
            target,
            tgids,
            names: StackNames::new(),
            next: request.interval.map(|i| Instant::now() + i),
            request,
            reports: 0,
            done: false,
        })
    }

    /// Whose allocations are read, and how.
    pub fn target(&self) -> &LeakTarget {
        &self.target
    }

    /// The processes watched (the pids given and the command's).
    pub fn tgids(&self) -> &[u32] {
        &self.tgids
    }

    /// Waits for the next report: at the next interval, or at the end (the duration, an
    /// interrupt, the processes' end, or the count of reports reached). None once ended.
    pub fn next_report(&mut self) -> Result<Option<LeakSnapshot>, Error> {
        if self.done {
            return Ok(None);
        }
        loop {
            // The reader unwinds each stack with the mappings it last read: one that fell
            // behind a command's exec and exit would find them gone (no stacks at all), so it
            // catches up while the command is held at its exit.
            let tracer = &self.tracer;
            let over = self.watch.over_holding_exit(|_| {
                tracer.catch_up(CATCH_UP);
            });
            if over || self.next.is_some_and(|n| Instant::now() >= n) {
                // The report holds every call made before it: at the end, all of them.
                let behind = !self.tracer.catch_up(CATCH_UP);
                // Once the processes have ended nothing more is freed: every block left is a
                // leak, however young (a command shorter than -o shows its leaks).
                let ended = over && self.watch.processes_ended();
                let query = LeakQuery {
                    older: if ended {
                        Duration::ZERO
                    } else {
                        self.request.older
                    },
                    top: self.request.top,
                    min_size: self.request.min_size,
                    max_size: self.request.max_size,
                    addresses: self.request.addresses,
                    combined: self.request.combined,
                };
                let mut snapshot = self.tracer.snapshot(&mut self.names, &query)?;
                snapshot.behind = behind;
                self.reports += 1;
                self.done = over || self.request.count.is_some_and(|c| self.reports >= c);
                self.next = Some(Instant::now() + self.request.interval.unwrap_or(ONE_SECOND));
                return Ok(Some(snapshot));
            }
            std::thread::sleep(POLL);
        }
    }

    /// Removes the probes; an error is the DWARF reader's.
    pub fn finish(self) -> Result<(), Error> {
        self.tracer.finish()
    }
}

const ONE_SECOND: Duration = Duration::from_secs(1);

/// How long a report waits for the DWARF readers to read the calls made before it.
const CATCH_UP: Duration = Duration::from_secs(60);

#[cfg(test)]
mod tests {
    use super::*;

    fn no_libc(_: u32) -> Result<PathBuf, Error> {
        Err(Error::Unsupported("no C library asked for".into()))
    }

    #[test]
    fn named_processes_are_unwound_and_others_follow_frame_pointers() {
        let pid = Scope {
            pids: vec![41],
            ..Scope::default()
        };
        let filter = |tgids: Vec<u32>, comm: Option<&str>| ProcessFilter {
            tgids,
            cgroup: None,
            comm: comm.map(str::to_owned),
        };
        let none = Scope::default();
        assert!(matches!(
            choose_target(&none, &filter(vec![], None), no_libc),
            Ok(LeakTarget::Kernel)
        ));
        // A name alone chooses tasks, not processes: the kernel's allocations.
        let comm = Scope {
            comm: Some("x".into()),
            ..Scope::default()
        };
        assert!(matches!(
            choose_target(&comm, &filter(vec![], Some("x")), no_libc),
            Ok(LeakTarget::Kernel)
        ));
        assert!(matches!(
            choose_target(&pid, &filter(vec![41], None), no_libc),
            Ok(LeakTarget::Attached)
        ));
        let command = Scope {
            command: vec!["prog".into()],
            ..Scope::default()
        };
        assert!(matches!(
            choose_target(&command, &filter(vec![99], None), no_libc),
            Ok(LeakTarget::Attached)
        ));
        // A pid with a name: counted in the kernel, on the process's C library.
        let pid_and_comm = Scope {
            comm: Some("x".into()),
            ..pid
        };
        let chosen = choose_target(&pid_and_comm, &filter(vec![41], Some("x")), |pid| {
            Ok(PathBuf::from(format!("/libc-of-{pid}")))
        });
        assert!(
            matches!(&chosen, Ok(LeakTarget::User { libc }) if libc == Path::new("/libc-of-41")),
            "{chosen:?}"
        );
    }
}
