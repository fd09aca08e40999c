//! `fltrace triage`: the memory chapter's strategy (7.1.3) as one report. Each part is read
//! from /proc, the kernel log or a counter running for the duration; each finding comes with
//! the fltrace command to run next.

use std::collections::HashMap;
use std::time::Duration;

use crate::Error;
use crate::bpf::{By, Counter, CounterSpec, Event, Frame, ProcessFilter, StackNames};
use crate::ffaults::{self, FileFaults};
use crate::procfs::{self, ProcError};
use reclaim::{Reclaim, ReclaimWatch};

mod print;
pub mod reclaim;

pub use print::write_triage;

pub use crate::procfs::SwapDevice;

/// A process by resident memory.
#[derive(Debug, Clone)]
pub struct ProcessRss {
    /// Its id.
    pub pid: u32,
    /// Its name.
    pub comm: String,
    /// Resident set, KiB.
    pub rss_kib: u64,
}

/// A process by faults, with its top stacks.
#[derive(Debug, Clone)]
pub struct FaultingProcess {
    /// Its id.
    pub pid: u32,
    /// Its name.
    pub comm: String,
    /// Faults during the duration.
    pub faults: u64,
    /// Its most faulting user stacks (count, frames innermost first).
    pub stacks: Vec<(u64, Vec<Frame>)>,
}

/// The whole report.
#[derive(Debug, Clone, Default)]
pub struct Triage {
    /// How long the counters ran.
    pub duration: Duration,
    /// OOM kills in the kernel log, oldest first, one line each (empty when none or unreadable).
    pub oom_kills: Vec<String>,
    /// Why the kernel log could not be read, if it could not.
    pub kmsg_error: Option<String>,
    /// Swap devices (none configured when empty).
    pub swaps: Vec<SwapDevice>,
    /// Pages swapped in and out during the duration.
    pub swap_in_pages: u64,
    /// Pages swapped out during the duration.
    pub swap_out_pages: u64,
    /// Reclaim, memory pressure and cgroups at their limit during the duration.
    pub reclaim: Reclaim,
    /// /proc/meminfo values of interest, KiB.
    pub meminfo: Vec<(String, u64)>,
    /// Top processes by RSS.
    pub top_rss: Vec<ProcessRss>,
    /// Page faults in all during the duration.
    pub faults: u64,
    /// Top faulting processes.
    pub top_faulting: Vec<FaultingProcess>,
    /// Files backing faults.
    pub file_faults: Vec<FileFaults>,
    /// brk and mmap calls by (syscall, comm).
    pub heap_calls: Vec<(String, String, u64)>,
    /// Why a hardware PMU event could not be opened (None: it could).
    pub pmu_missing: Option<String>,
    /// Findings, each with the command to run next.
    pub findings: Vec<(String, String)>,
    /// Events its counters saw (faults, file faults, brk and mmap calls).
    pub seen: u64,
    /// Events not counted (the count table was full).
    pub dropped: u64,
    /// Faults counted without their user stack (the stack table was full).
    pub stacks_lost: u64,
}

impl Triage {
    /// Events not counted exactly: not counted at all, or without their stack.
    pub fn lost(&self) -> u64 {
        self.dropped + self.stacks_lost
    }
}

pub(crate) const MEMINFO_KEYS: [&str; 12] = [
    "MemTotal",
    "MemFree",
    "MemAvailable",
    "Buffers",
    "Cached",
    "SwapCached",
    "AnonPages",
    "Shmem",
    "Slab",
    "SwapTotal",
    "SwapFree",
    // Memory in huge pages of every size, in kB like the others (HugePages_Total is a count of
    // pages, which the table printed as kB).
    "Hugetlb",
];

/// The figures of the meminfo section, KiB.
fn meminfo() -> Result<Vec<(String, u64)>, ProcError> {
    let info = procfs::meminfo()?;
    Ok(MEMINFO_KEYS
        .iter()
        .filter_map(|key| Some(((*key).to_owned(), info.get(key)?)))
        .collect())
}

/// Processes by resident memory, largest first.
pub fn top_rss(n: usize) -> Result<Vec<ProcessRss>, ProcError> {
    let mut out: Vec<ProcessRss> = procfs::processes()?
        .into_iter()
        // A process that exited since the listing holds no memory.
        .filter_map(|pid| {
            let status = procfs::status(pid).ok()?;
            Some(ProcessRss {
                pid,
                comm: status.name.unwrap_or_default(),
                rss_kib: status.rss_kb.filter(|&kb| kb > 0)?,
            })
        })
        .collect();
    out.sort_by_key(|p| std::cmp::Reverse(p.rss_kib));
    out.truncate(n);
    Ok(out)
}

/// The OOM kills in the kernel log, one line each (the victim, its memory and the memory
/// cgroup that hit its limit) dated `[HH:MM:SS]` as oomkill's lines, read without blocking from
/// /dev/kmsg.
pub fn oom_kills() -> Result<Vec<String>, String> {
    // A record's time is µs of CLOCK_MONOTONIC: the wall clock is that plus the boot's offset.
    let boot_offset_ns = crate::clock::wall_offset_ns();
    let mut kmsg = procfs::open_kmsg().map_err(|e| format!("/dev/kmsg: {e}"))?;
    let mut lines = Vec::new();
    let mut memcg: Option<String> = None;
    procfs::read_kmsg(&mut kmsg, |prefix, message| {
        // PRI,SEQ,TS_USEC,FLAGS
        let when = prefix
            .split(',')
            .nth(2)
            .and_then(|us| us.parse::<i128>().ok())
            .map(|us| {
                format!(
                    "[{}] ",
                    crate::clock::local_time(boot_offset_ns + us * 1000)
                )
            })
            .unwrap_or_default();
        let message = message.lines().next().unwrap_or("").trim();
        // One line per kill: the victim's line, with the cgroup from the line before.
        if let Some(constraint) = message.strip_prefix("oom-kill:") {
            memcg = constraint
                .split(',')
                .find_map(|kv| kv.strip_prefix("oom_memcg="))
                .map(str::to_owned);
        } else if message.contains("Killed process") {
            lines.push(match memcg.take() {
                Some(group) => format!("{when}{message} (memory cgroup {group})"),
                None => format!("{when}{message}"),
            });
        }
    })
    .map_err(|e| format!("/dev/kmsg: {e}"))?;
    Ok(lines)
}

/// Whether a hardware event opens (no PMU in most virtual machines: ENOENT).
pub fn pmu_available() -> Result<(), String> {
    use perf_event_open_sys::bindings::{
        PERF_COUNT_HW_CPU_CYCLES, PERF_TYPE_HARDWARE, perf_event_attr,
    };
    let mut attr = perf_event_attr {
        size: std::mem::size_of::<perf_event_attr>() as u32,
        type_: PERF_TYPE_HARDWARE,
        config: u64::from(PERF_COUNT_HW_CPU_CYCLES),
        ..Default::default()
    };
    attr.set_disabled(1);
    // This process on any CPU; the event closes when dropped.
    match fltrace_capture::perf::PerfEvent::open(&attr, 0, -1) {
        Ok(_cycles) => Ok(()),
        Err(e) => Err(match e.raw_os_error() {
            Some(libc::ENOENT) | Some(libc::EOPNOTSUPP) => {
                format!("no hardware PMU ({e}): no cycle, cache-miss or PEBS/IBS sampling here")
            }
            _ => e.to_string(),
        }),
    }
}

impl Triage {
    /// Runs the counters for `duration` (stopping early when `stop` says so) and reads the rest;
    /// `on_start` is called once the counters run.
    pub fn run(
        duration: Duration,
        stop: &dyn Fn() -> bool,
        on_start: &dyn Fn(),
    ) -> Result<Triage, Error> {
        let all = ProcessFilter::default();
        let faults = Counter::start(CounterSpec {
            events: crate::bpf::fault_events(),
            by: vec![By::Pid, By::Comm, By::UStack],
            second_field: None,
            filter: None,
            processes: all.clone(),
            keep_maps: true,
        })?;
        let file_faults = Counter::start(ffaults::spec(all.clone(), false))?;
        let heap_calls = Counter::start(CounterSpec {
            events: ["sys_enter_brk", "sys_enter_mmap"]
                .iter()
                .map(|n| Event::Tracepoint {
                    category: "syscalls".into(),
                    name: (*n).into(),
                })
                .collect(),
            // By process too, so that fltrace's own calls can be left out.
            by: vec![By::Probe, By::Comm, By::Pid],
            second_field: None,
            filter: None,
            processes: all,
            keep_maps: false,
        })?;
        let swapped = procfs::vmstat()?;
        let reclaim = ReclaimWatch::start()?;
        on_start();
        let started = std::time::Instant::now();
        while started.elapsed() < duration && !stop() {
            std::thread::sleep(Duration::from_millis(50));
        }
        let elapsed = started.elapsed();
        let swapped_after = procfs::vmstat()?;
        let reclaim = reclaim.finish()?;
        let mut names = StackNames::lean();
        let top_faulting = top_faulting(&faults, &mut names, std::process::id())?;
        let fault_snapshot = faults.totals();
        let files_snapshot = file_faults.snapshot(&mut names)?;
        let heap_snapshot = heap_calls.snapshot(&mut names)?;

        let snapshots = [&fault_snapshot, &files_snapshot, &heap_snapshot];
        let mut report = Triage {
            seen: snapshots.iter().map(|s| s.events).sum(),
            dropped: snapshots.iter().map(|s| s.dropped).sum(),
            stacks_lost: fault_snapshot.ustacks_lost,
            duration: elapsed,
            swaps: procfs::swaps()?,
            swap_in_pages: swapped_after
                .get("pswpin")
                .saturating_sub(swapped.get("pswpin")),
            swap_out_pages: swapped_after
                .get("pswpout")
                .saturating_sub(swapped.get("pswpout")),
            reclaim,
            meminfo: meminfo()?,
            top_rss: top_rss(10)?,
            faults: fault_snapshot.events,
            file_faults: ffaults::by_file(&files_snapshot, file_faults.process_maps()),
            pmu_missing: pmu_available().err(),
            ..Triage::default()
        };
        report.file_faults.truncate(10);
        match oom_kills() {
            Ok(lines) => report.oom_kills = lines,
            Err(e) => report.kmsg_error = Some(e),
        }
        report.top_faulting = top_faulting;
        report.heap_calls = heap_calls_of(&heap_snapshot.rows, std::process::id());
        report.heap_calls.truncate(10);
        report.findings = report.findings();
        Ok(report)
    }

    fn findings(&self) -> Vec<(String, String)> {
        let mut out = Vec::new();
        if !self.oom_kills.is_empty() {
            out.push((
                format!("{} OOM kills in the kernel log", self.oom_kills.len()),
                "fltrace oomkill".to_owned(),
            ));
        }
        if self.swaps.is_empty() {
            out.push((
                "no swap configured: memory pressure ends in OOM kills, not swapping".into(),
                "fltrace oomkill".into(),
            ));
        } else if self.swap_in_pages + self.swap_out_pages > 0 {
            out.push((
                format!(
                    "swapping: {} pages in, {} out",
                    self.swap_in_pages, self.swap_out_pages
                ),
                "fltrace swapin".into(),
            ));
        }
        let pages = &self.reclaim.pages;
        if pages.scanned > 0 {
            out.push((
                format!(
                    "reclaim: {} pages scanned, {} freed ({} scanned in direct reclaim)",
                    pages.scanned, pages.stolen, pages.scanned_direct
                ),
                "fltrace vmscan".into(),
            ));
        }
        if let Some(p) = &self.reclaim.pressure
            && p.some_us > 0
        {
            out.push((
                format!(
                    "memory pressure: tasks stalled on memory {:.1} ms ({:.1} ms all at once)",
                    p.some_us as f64 / 1000.0,
                    p.full_us as f64 / 1000.0
                ),
                "fltrace drsnoop".into(),
            ));
        }
        for group in &self.reclaim.groups {
            out.push((
                format!(
                    "memory cgroup {} at its limit ({} times during the interval)",
                    group.name, group.limit_hits
                ),
                format!(
                    "fltrace vmscan --cgroup {}; fltrace drsnoop --cgroup {}",
                    group.dir.display(),
                    group.dir.display()
                ),
            ));
        }
        let available = self.meminfo.iter().find(|(k, _)| k == "MemAvailable");
        let total = self.meminfo.iter().find(|(k, _)| k == "MemTotal");
        if let (Some((_, a)), Some((_, t))) = (available, total)
            && *t > 0
            && a * 10 < *t
        {
            out.push((
                "less than 10% of memory available".into(),
                "fltrace vmscan".into(),
            ));
        }
        if let Some(p) = self.top_faulting.first() {
            out.push((
                format!(
                    "{} (pid {}) faults most: {} faults",
                    p.comm, p.pid, p.faults
                ),
                format!("fltrace faults -p {}", p.pid),
            ));
        }
        if let Some(f) = self.file_faults.first() {
            out.push((
                format!("file faults led by {} ({})", f.file, f.count),
                "fltrace ffaults".into(),
            ));
        }
        if let Some((call, comm, n)) = self.heap_calls.first() {
            out.push((
                format!("{comm} calls {call} most ({n})"),
                format!("fltrace count syscalls:sys_enter_{call} --by ustack --comm {comm}"),
            ));
        }
        if let Some(p) = self.top_rss.first() {
            out.push((
                format!(
                    "{} (pid {}) is the largest: {} KiB resident",
                    p.comm, p.pid, p.rss_kib
                ),
                format!("fltrace memleak -p {}", p.pid),
            ));
        }
        if self.pmu_missing.is_some() {
            out.push((
                "no hardware PMU: memory access sampling is unavailable".into(),
                "fltrace wss (reference bits) or fltrace record (faults)".into(),
            ));
        }
        out
    }
}

/// How many processes the top faulting section shows.
const TOP_FAULTING: usize = 5;

/// How many stacks it shows of each process.
const STACKS_SHOWN: usize = 3;

/// How many of a stack's innermost frames it shows (and names: stacks are merged by them).
pub const STACK_FRAMES_SHOWN: usize = 4;

/// The processes that faulted most by `counts`, as many as are shown, leaving out `own_pid`.
fn top_processes(counts: &HashMap<u32, u64>, own_pid: u32) -> Vec<u32> {
    let mut top: Vec<(u32, u64)> = counts
        .iter()
        .filter(|(pid, _)| **pid != own_pid)
        .map(|(&pid, &n)| (pid, n))
        .collect();
    top.sort_by_key(|&(pid, n)| (std::cmp::Reverse(n), pid));
    top.truncate(TOP_FAULTING);
    top.into_iter().map(|(pid, _)| pid).collect()
}

/// How many of a process's stacks (merged by their innermost frames) are named at a time.
const NAMING_BATCH: usize = 1024;

/// The processes that faulted most, each with its most faulting stacks, leaving out
/// fltrace's own process (`own_pid`): loading the BPF programs' BTF faults thousands of
/// times and put triage itself at the top of the list it prints about the system.
///
/// Its memory is bounded whatever the machine does (it held 120 MB while a test suite ran
/// beside it, naming every stack of the processes shown at once): the count table is read an
/// entry at a time and only the entries of the processes shown are kept; their stacks are
/// merged by the innermost frames (the only ones shown, so stacks that share them name
/// alike), named a batch at a time, and each batch's names folded into counts by name
/// ([`NamedStacks`]) before the next.
fn top_faulting(
    counter: &Counter,
    names: &mut StackNames,
    own_pid: u32,
) -> Result<Vec<FaultingProcess>, Error> {
    /// One process shown: its faults and comm (that of its largest entry), its stack ids.
    struct Shown {
        pid: u32,
        faults: u64,
        comm: ([u8; 16], u64),
        by_stack: HashMap<i32, u64>,
    }
    let mut shown: Vec<Shown> = top_processes(&counter.counts_by_process()?, own_pid)
        .into_iter()
        .map(|pid| Shown {
            pid,
            faults: 0,
            comm: ([0; 16], 0),
            by_stack: HashMap::new(),
        })
        .collect();
    counter.for_each_entry(|key, count| {
        if let Some(p) = shown.iter_mut().find(|p| p.pid == key.tgid) {
            p.faults += count;
            if count > p.comm.1 {
                p.comm = (key.comm, count);
            }
            *p.by_stack.entry(key.ustack).or_default() += count;
        }
    })?;
    let mut top = Vec::with_capacity(shown.len());
    for p in shown {
        let mut by_innermost: HashMap<Vec<u64>, u64> = HashMap::new();
        for (id, count) in p.by_stack {
            let frames = counter.innermost_frames(id, STACK_FRAMES_SHOWN)?;
            *by_innermost.entry(frames).or_default() += count;
        }
        let mut innermost: Vec<(Vec<u64>, u64)> = by_innermost.into_iter().collect();
        // Most faulting first, so that equal counts by name keep one order from run to run.
        innermost.sort_unstable_by(|(a, n), (b, m)| m.cmp(n).then_with(|| a.cmp(b)));
        let maps = counter.process_maps().get(p.pid);
        let mut named = NamedStacks::default();
        for batch in innermost.chunks(NAMING_BATCH) {
            let numbered: Vec<(u32, Vec<u64>)> = batch
                .iter()
                .enumerate()
                .filter(|(_, (frames, _))| !frames.is_empty())
                .map(|(i, (frames, _))| (i as u32, frames.clone()))
                .collect();
            let mut frames = names.user(p.pid, maps.as_deref(), &numbered, false);
            for (i, (_, count)) in batch.iter().enumerate() {
                named.add(frames.remove(&(i as u32)).unwrap_or_default(), *count);
            }
        }
        top.push(FaultingProcess {
            pid: p.pid,
            comm: crate::bpf::object::comm_string(&p.comm.0),
            faults: p.faults,
            stacks: named.top(STACKS_SHOWN),
        });
    }
    // Stable: equal counts keep the order of the first count.
    top.sort_by_key(|p| std::cmp::Reverse(p.faults));
    Ok(top)
}

/// One process's stacks by name and their counts, each distinct frame held once: stacks
/// that name alike (beyond the frames named, or where the kernel could not walk) are one.
#[derive(Debug, Default)]
struct NamedStacks {
    /// Each distinct frame and its number, numbered as first met.
    frames: HashMap<Frame, u32>,
    /// Counts by the frames' numbers, innermost first, and the order each was first met.
    counts: HashMap<Vec<u32>, (u64, usize)>,
}

impl NamedStacks {
    fn add(&mut self, stack: Vec<Frame>, count: u64) {
        let numbers: Vec<u32> = stack
            .into_iter()
            .map(|frame| {
                let next = self.frames.len() as u32;
                *self.frames.entry(frame).or_insert(next)
            })
            .collect();
        let met = self.counts.len();
        self.counts.entry(numbers).or_insert((0, met)).0 += count;
    }

    /// The `n` stacks counted most, most first (equal counts: the first met first).
    fn top(self, n: usize) -> Vec<(u64, Vec<Frame>)> {
        let mut counts: Vec<(Vec<u32>, (u64, usize))> = self.counts.into_iter().collect();
        counts.sort_by_key(|&(_, (count, met))| (std::cmp::Reverse(count), met));
        counts.truncate(n);
        let mut by_number: Vec<Option<Frame>> = vec![None; self.frames.len()];
        for (frame, number) in self.frames {
            if let Some(slot) = by_number.get_mut(number as usize) {
                *slot = Some(frame);
            }
        }
        counts
            .into_iter()
            .map(|(numbers, (count, _))| {
                let frames = numbers
                    .iter()
                    .filter_map(|&i| by_number.get(i as usize).cloned().flatten())
                    .collect();
                (count, frames)
            })
            .collect()
    }
}

/// brk and mmap calls by (call, comm), most first, from rows keyed by probe, comm and pid;
/// the calls of `own_pid` (fltrace, which allocates while it reads the counters) left out.
fn heap_calls_of(rows: &[crate::bpf::Row], own_pid: u32) -> Vec<(String, String, u64)> {
    let mut merged: Vec<(String, String, u64)> = Vec::new();
    for row in rows.iter().filter(|r| r.pid != Some(own_pid)) {
        let probe = row.probe.clone().unwrap_or_default();
        let call = probe
            .rsplit("sys_enter_")
            .next()
            .unwrap_or(&probe)
            .to_owned();
        let comm = row.comm.clone().unwrap_or_default();
        match merged.iter_mut().find(|(c, m, _)| *c == call && *m == comm) {
            Some(same) => same.2 += row.count,
            None => merged.push((call, comm, row.count)),
        }
    }
    // Stable: equal counts keep the counter's order.
    merged.sort_by_key(|(_, _, n)| std::cmp::Reverse(*n));
    merged
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(probe: &str, comm: &str, pid: u32, count: u64) -> crate::bpf::Row {
        crate::bpf::Row {
            pid: Some(pid),
            tid: None,
            comm: Some(comm.into()),
            probe: Some(probe.into()),
            field: None,
            field2: None,
            ustack: None,
            kstack: None,
            count,
        }
    }

    /// A process's stacks are merged by name and shown most faulting first: a stack met late
    /// but merged from several batches leads (they were shown in the order first met, the
    /// first three only).
    #[test]
    fn named_stacks_merge_by_name_and_sort() {
        let at = |functions: &[&str]| -> Vec<Frame> {
            functions
                .iter()
                .map(|f| Frame {
                    function: (*f).into(),
                    file_line: None,
                    lib: "app".into(),
                })
                .collect()
        };
        let mut named = NamedStacks::default();
        named.add(at(&["a", "main"]), 9);
        named.add(at(&["b", "main"]), 8);
        named.add(at(&["c", "main"]), 7);
        named.add(at(&["d", "main"]), 6);
        named.add(Vec::new(), 2);
        named.add(at(&["d", "main"]), 6);
        // Same innermost function, another caller: a stack of its own.
        named.add(at(&["a", "other"]), 1);
        let top: Vec<(u64, Vec<String>)> = named
            .top(3)
            .into_iter()
            .map(|(n, s)| (n, s.iter().map(|f| f.function.clone()).collect()))
            .collect();
        let names = |f: &[&str]| f.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>();
        assert_eq!(
            top,
            [
                (12, names(&["d", "main"])),
                (9, names(&["a", "main"])),
                (8, names(&["b", "main"]))
            ]
        );
        // Equal counts: the first met first; a stack the kernel could not walk is one too.
        let mut named = NamedStacks::default();
        named.add(at(&["x"]), 2);
        named.add(Vec::new(), 2);
        named.add(at(&["y"]), 2);
        let firsts: Vec<usize> = named.top(3).iter().map(|(_, s)| s.len()).collect();
        assert_eq!(firsts, [1, 0, 1]);
    }

    #[test]
    fn top_processes_are_the_most_faulting_but_fltrace() {
        let counts = HashMap::from([(1, 5), (2, 50), (3, 7), (4, 1), (5, 9), (6, 8), (7, 99)]);
        assert_eq!(top_processes(&counts, 7), [2, 5, 6, 3, 1]);
    }

    #[test]
    fn heap_calls_merge_processes_of_a_name_and_leave_fltrace_out() {
        let rows = [
            row("syscalls:sys_enter_brk", "fltrace", 7, 900),
            row("syscalls:sys_enter_brk", "cc1", 20, 30),
            row("syscalls:sys_enter_mmap", "cc1", 20, 12),
            row("syscalls:sys_enter_brk", "cc1", 21, 15),
            row("syscalls:sys_enter_brk", "fltrace", 8, 2),
        ];
        assert_eq!(
            heap_calls_of(&rows, 7),
            [
                ("brk".to_owned(), "cc1".to_owned(), 45),
                ("mmap".to_owned(), "cc1".to_owned(), 12),
                // Another fltrace is a process like any other.
                ("brk".to_owned(), "fltrace".to_owned(), 2),
            ]
        );
    }
}
