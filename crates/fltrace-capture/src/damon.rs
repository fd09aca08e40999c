//! DAMON: what the kernel's monitors are doing, a monitor of fltrace's own where DAMON is free,
//! and the `damon:damon_aggregated` events, translated to a process's pages when the monitor
//! watches physical memory.
//!
//! fltrace never stops, reconfigures or adds schemes to a monitor it did not start: where one
//! runs, it only enables the tracepoint for reading, which changes nothing in DAMON (see
//! ../shared/KERNEL.md on the development machines' own monitor). Only where no monitor runs
//! does it write under /sys/kernel/mm/damon, to start one of its own ([`OwnMonitor`]), which it
//! removes again when done.

use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use fltrace_trace::{PhysAddr, RangeSample, RangeTraceKind, RangeTraceWriter, VirtAddr, WssRow};

use crate::pages::FrameMap;

use crate::Error;
use crate::perf_abi::{self, PerfEvent, Tracepoint};
use crate::ring::RingBuffer;

/// The DAMON monitors of this machine.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DamonStatus {
    /// No DAMON sysfs interface.
    Absent,
    /// DAMON exists and no monitor runs.
    Free,
    /// These kdamonds run (fltrace did not start them).
    InUse(Vec<usize>),
}

/// The DAMON sysfs interface.
pub const SYSFS: &str = "/sys/kernel/mm/damon/admin/kdamonds";

/// Reads the kdamonds' states from sysfs.
pub fn status() -> DamonStatus {
    status_at(Path::new(SYSFS))
}

/// [`status`] of the interface at `admin` (tests give a directory of their own).
pub fn status_at(admin: &Path) -> DamonStatus {
    let Ok(count) = std::fs::read_to_string(admin.join("nr_kdamonds")) else {
        return DamonStatus::Absent;
    };
    let running: Vec<usize> = (0..count.trim().parse().unwrap_or(0))
        .filter(|i: &usize| {
            std::fs::read_to_string(admin.join(i.to_string()).join("state"))
                .is_ok_and(|s| s.trim() == "on")
        })
        .collect();
    if running.is_empty() {
        DamonStatus::Free
    } else {
        DamonStatus::InUse(running)
    }
}

/// How fltrace's own monitor samples.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MonitorConfig {
    /// Sampling interval: how often the Accessed bits are checked.
    pub sample_us: u64,
    /// Aggregation interval: one `damon_aggregated` event per region each.
    pub aggr_us: u64,
    /// How often the monitored regions are updated from the target's mappings.
    pub update_us: u64,
    /// Fewest and most regions DAMON splits the memory into.
    pub regions: (u64, u64),
}

impl Default for MonitorConfig {
    /// DAMON's own defaults, aggregating every 100 ms.
    fn default() -> Self {
        MonitorConfig {
            sample_us: 5_000,
            aggr_us: 100_000,
            update_us: 1_000_000,
            regions: (10, 1000),
        }
    }
}

/// The address space a monitor watches.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Operations {
    /// The target process's virtual addresses.
    Vaddr,
    /// Physical memory (regions are translated to the process's pages afterwards).
    Paddr,
}

/// A DAMON monitor fltrace started where no other ran: one kdamond, one context, one target.
/// Dropping it turns it off and removes the kdamond, on every way out (errors, Ctrl-C, the
/// program's crash); only a hard kill of fltrace itself leaves it running.
#[derive(Debug)]
pub struct OwnMonitor {
    admin: std::path::PathBuf,
    index: usize,
    /// The kdamonds that existed before (none running): restored on drop.
    previous: usize,
    /// What it watches.
    pub operations: Operations,
}

impl OwnMonitor {
    /// Starts a monitor of process `pid` through the interface at `admin` ([`SYSFS`]), with
    /// virtual-address operations where the kernel has them, else physical ones over the
    /// machine's RAM (`ram`: the System RAM ranges). Refuses if a monitor runs.
    pub fn start(
        admin: &Path,
        pid: u32,
        config: MonitorConfig,
        ram: &[(u64, u64)],
    ) -> Result<OwnMonitor, Error> {
        // Sysfs files, not perf events: Error::kernel's hints (missing event, ring size) would
        // mislead.
        let kernel = |what: &'static str| {
            move |source| Error::Kernel {
                what,
                source,
                hint: "",
            }
        };
        if let DamonStatus::InUse(_) = status_at(admin) {
            return Err(Error::Kernel {
                what: "starting a DAMON monitor",
                source: std::io::Error::from_raw_os_error(libc::EBUSY),
                hint: " (a monitor fltrace did not start is running; fltrace leaves it alone)",
            });
        }
        let write = |path: std::path::PathBuf, value: &str| -> Result<(), Error> {
            std::fs::write(&path, value).map_err(kernel("writing the DAMON sysfs interface"))
        };
        let previous: usize = std::fs::read_to_string(admin.join("nr_kdamonds"))
            .map_err(kernel("the DAMON sysfs interface"))?
            .trim()
            .parse()
            .unwrap_or(0);
        write(admin.join("nr_kdamonds"), &(previous + 1).to_string())?;
        // From here on, dropping the monitor undoes what was written.
        let mut monitor = OwnMonitor {
            admin: admin.to_owned(),
            index: previous,
            previous,
            operations: Operations::Paddr,
        };
        let context = admin.join(previous.to_string()).join("contexts");
        write(context.join("nr_contexts"), "1")?;
        let context = context.join("0");
        let available =
            std::fs::read_to_string(context.join("avail_operations")).unwrap_or_default();
        monitor.operations = if available.split_whitespace().any(|o| o == "vaddr") {
            Operations::Vaddr
        } else {
            Operations::Paddr
        };
        let ops = match monitor.operations {
            Operations::Vaddr => "vaddr",
            Operations::Paddr => "paddr",
        };
        write(context.join("operations"), ops)?;
        let attrs = context.join("monitoring_attrs");
        write(
            attrs.join("intervals/sample_us"),
            &config.sample_us.to_string(),
        )?;
        write(attrs.join("intervals/aggr_us"), &config.aggr_us.to_string())?;
        write(
            attrs.join("intervals/update_us"),
            &config.update_us.to_string(),
        )?;
        write(attrs.join("nr_regions/min"), &config.regions.0.to_string())?;
        write(attrs.join("nr_regions/max"), &config.regions.1.to_string())?;
        let targets = context.join("targets");
        write(targets.join("nr_targets"), "1")?;
        let target = targets.join("0");
        match monitor.operations {
            Operations::Vaddr => write(target.join("pid_target"), &pid.to_string())?,
            Operations::Paddr => {
                let regions = target.join("regions");
                write(regions.join("nr_regions"), &ram.len().to_string())?;
                for (i, (start, end)) in ram.iter().enumerate() {
                    let region = regions.join(i.to_string());
                    write(region.join("start"), &start.to_string())?;
                    write(region.join("end"), &end.to_string())?;
                }
            }
        }
        write(admin.join(previous.to_string()).join("state"), "on")?;
        Ok(monitor)
    }
}

impl Drop for OwnMonitor {
    fn drop(&mut self) {
        let kdamond = self.admin.join(self.index.to_string());
        let _ = std::fs::write(kdamond.join("state"), "off");
        let _ = std::fs::write(self.admin.join("nr_kdamonds"), self.previous.to_string());
    }
}

/// The monitor `fltrace wss --damon` reads, and how it came to be: the one decision about
/// DAMON that fltrace makes. Its `Display` is what to tell the user.
#[derive(Debug)]
pub enum ChosenMonitor {
    /// DAMON was free: fltrace started a monitor of its own (removed when this is dropped).
    Own {
        /// The monitor.
        monitor: OwnMonitor,
        /// How it samples.
        config: MonitorConfig,
    },
    /// Monitors fltrace did not start hold DAMON: their `damon:damon_aggregated` events are
    /// read, read-only, and translated to process `pid`.
    Others {
        /// The running kdamonds.
        kdamonds: Vec<usize>,
        /// The process watched.
        pid: u32,
    },
}

/// Why `fltrace wss --damon` has no monitor to read.
#[derive(Debug, thiserror::Error)]
pub enum NoMonitor {
    /// The kernel has no DAMON sysfs interface (the directory named).
    #[error("this kernel has no DAMON sysfs interface ({}); use fltrace wss without --damon", .0.display())]
    Absent(std::path::PathBuf),
    /// DAMON was free but fltrace's own monitor could not be started.
    #[error("starting a DAMON monitor")]
    Start(#[source] Error),
}

impl ChosenMonitor {
    /// Looks at DAMON through the interface at `admin` ([`SYSFS`]): where no monitor runs,
    /// starts one of fltrace's own over process `pid` with `config` (over the RAM `ram` gives,
    /// asked only then, where the kernel has no virtual-address operations); where one runs,
    /// writes nothing and reads that one.
    pub fn choose(
        admin: &Path,
        pid: u32,
        config: MonitorConfig,
        ram: impl FnOnce() -> Vec<(u64, u64)>,
    ) -> Result<ChosenMonitor, NoMonitor> {
        match status_at(admin) {
            DamonStatus::Absent => Err(NoMonitor::Absent(
                admin.parent().unwrap_or(admin).to_owned(),
            )),
            DamonStatus::Free => {
                let monitor =
                    OwnMonitor::start(admin, pid, config, &ram()).map_err(NoMonitor::Start)?;
                Ok(ChosenMonitor::Own { monitor, config })
            }
            DamonStatus::InUse(kdamonds) => Ok(ChosenMonitor::Others { kdamonds, pid }),
        }
    }

    /// Our own monitor with its configuration, as [`trace_process`] takes it; `None` for
    /// another's.
    pub fn own(&self) -> Option<(&OwnMonitor, &MonitorConfig)> {
        match self {
            ChosenMonitor::Own { monitor, config } => Some((monitor, config)),
            ChosenMonitor::Others { .. } => None,
        }
    }
}

impl std::fmt::Display for ChosenMonitor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ChosenMonitor::Own { monitor, .. } => write!(
                f,
                "DAMON is free: started a monitor of fltrace's own ({} operations), removed at the end",
                match monitor.operations {
                    Operations::Vaddr => "virtual-address",
                    Operations::Paddr => "physical-address",
                }
            ),
            ChosenMonitor::Others { kdamonds, pid } => write!(
                f,
                "DAMON is in use by a monitor fltrace did not start (kdamond {}); reading its damon:damon_aggregated events read-only, translated to process {pid}",
                kdamonds
                    .iter()
                    .map(ToString::to_string)
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        }
    }
}

/// The machine's System RAM ranges (`/proc/iomem`, needs root), for a physical-address monitor.
pub fn system_ram() -> Vec<(u64, u64)> {
    crate::procfs::system_ram()
}

/// One region as a monitor reported it at the end of an aggregation interval.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AggregatedRegion {
    /// Kernel time of the event (CLOCK_MONOTONIC, ns).
    pub time_ns: u64,
    /// The monitor's target.
    pub target_id: u64,
    /// First address: physical for paddr monitors, virtual for vaddr ones, so left raw;
    /// [`Aggregation::of_physical`] and [`Aggregation::of_virtual`] give it its type.
    pub start: u64,
    /// One past the last address.
    pub end: u64,
    /// Samples in the interval that found the region accessed.
    pub nr_accesses: u32,
    /// Intervals the region has kept its access level.
    pub age: u32,
}

/// Byte offsets of the event's fields, read from tracefs.
#[derive(Debug, Clone, Copy)]
pub struct AggregatedFields {
    target_id: usize,
    start: usize,
    end: usize,
    nr_accesses: usize,
    age: usize,
}

impl AggregatedFields {
    /// From the tracepoint's format; `None` if a field is missing.
    pub fn from_tracepoint(tp: &Tracepoint) -> Option<AggregatedFields> {
        Some(AggregatedFields {
            target_id: tp.field("target_id")?.0,
            start: tp.field("start")?.0,
            end: tp.field("end")?.0,
            nr_accesses: tp.field("nr_accesses")?.0,
            age: tp.field("age")?.0,
        })
    }

    /// Decodes the raw data of one event.
    pub fn decode(&self, raw: &[u8], time_ns: u64) -> Option<AggregatedRegion> {
        let u64_at = |o: usize| Some(u64::from_ne_bytes(raw.get(o..o + 8)?.try_into().ok()?));
        let u32_at = |o: usize| Some(u32::from_ne_bytes(raw.get(o..o + 4)?.try_into().ok()?));
        Some(AggregatedRegion {
            time_ns,
            target_id: u64_at(self.target_id)?,
            start: u64_at(self.start)?,
            end: u64_at(self.end)?,
            nr_accesses: u32_at(self.nr_accesses)?,
            age: u32_at(self.age)?,
        })
    }
}

/// Reads `damon:damon_aggregated` on every CPU until `duration` passes, `stop` is raised or
/// `alive` says the watched process is gone. Needs root (a system-wide tracepoint).
pub fn read_aggregated(
    duration: Option<Duration>,
    stop: &AtomicUsize,
    mut alive: impl FnMut() -> bool,
    mut each: impl FnMut(AggregatedRegion),
) -> Result<(), Error> {
    let tracefs =
        perf_abi::tracefs().map_err(Error::kernel("tracefs (tracepoint ids and formats)"))?;
    let tp = Tracepoint::open(&tracefs, "damon", "damon_aggregated")
        .map_err(Error::kernel("tracepoint damon:damon_aggregated"))?;
    let fields = AggregatedFields::from_tracepoint(&tp).ok_or_else(|| Error::Kernel {
        what: "tracepoint damon:damon_aggregated",
        source: std::io::Error::from_raw_os_error(libc::EINVAL),
        hint: " (unexpected field layout)",
    })?;
    let attr = perf_abi::raw_tracepoint_attr(tp.id);
    let mut rings = Vec::new();
    let mut events = Vec::new();
    for cpu in perf_abi::online_cpus().map_err(Error::kernel("online CPUs"))? {
        let event = PerfEvent::open(&attr, -1, cpu)
            .map_err(Error::kernel("perf_event_open on damon:damon_aggregated"))?;
        rings.push(
            // One aggregation emits an event per region, up to thousands at once.
            RingBuffer::map(&event, 256).map_err(Error::kernel("mapping the perf ring buffer"))?,
        );
        event
            .enable()
            .map_err(Error::kernel("enabling perf events"))?;
        events.push(event);
    }
    let started = Instant::now();
    while stop.load(Ordering::Relaxed) == 0
        && duration.is_none_or(|d| started.elapsed() < d)
        && alive()
    {
        std::thread::sleep(Duration::from_millis(100));
        for ring in &mut rings {
            ring.drain(|record| {
                if record.kind != perf_event_open_sys::bindings::PERF_RECORD_SAMPLE {
                    return;
                }
                // Sample layout for TIME | RAW: u64 time, u32 size, raw bytes.
                let bytes = record.data.as_slice();
                let Some(time) = bytes
                    .get(0..8)
                    .and_then(|b| b.try_into().ok())
                    .map(u64::from_ne_bytes)
                else {
                    return;
                };
                if let Some(region) = bytes.get(12..).and_then(|raw| fields.decode(raw, time)) {
                    each(region);
                }
            });
        }
    }
    Ok(())
}

/// A range of the watched process found accessed in one aggregation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AccessedRange {
    /// First address (virtual, the process's).
    pub start: VirtAddr,
    /// One past the last address.
    pub end: VirtAddr,
    /// The access count of the monitor's region the range lay in.
    pub nr_accesses: u32,
}

/// One aggregation interval of a monitor, in the watched process's addresses.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Aggregation {
    /// Kernel time of the interval's first event (CLOCK_MONOTONIC, ns).
    pub time_ns: u64,
    /// The accessed ranges, region by region.
    pub ranges: Vec<AccessedRange>,
    /// Bytes of the process found accessed.
    pub accessed_bytes: u64,
    /// Bytes of the process resident.
    pub resident_bytes: u64,
}

impl Aggregation {
    /// The interval as a row of `fltrace wss`, `time_s` after sampling began: accessed bytes
    /// as the working set, resident bytes as the resident size.
    pub fn row(&self, time_s: f64) -> WssRow {
        WssRow {
            time_s,
            wss_bytes: self.accessed_bytes,
            rss_bytes: self.resident_bytes,
        }
    }

    /// A virtual-address monitor's regions: the accessed ones as they are.
    pub fn of_virtual(batch: &[AggregatedRegion], resident_bytes: u64) -> Option<Aggregation> {
        let ranges: Vec<AccessedRange> = batch
            .iter()
            .filter(|r| r.nr_accesses > 0)
            // A virtual-address monitor's regions are the process's addresses.
            .map(|r| AccessedRange {
                start: VirtAddr::new(r.start),
                end: VirtAddr::new(r.end),
                nr_accesses: r.nr_accesses,
            })
            .collect();
        Some(Aggregation {
            time_ns: batch.first()?.time_ns,
            accessed_bytes: ranges.iter().map(|r| r.end - r.start).sum(),
            ranges,
            resident_bytes,
        })
    }

    /// A physical-address monitor's regions translated to the process's pages through its
    /// frames: each accessed region becomes the runs of the process's pages in it.
    pub fn of_physical(batch: &[AggregatedRegion], frames: &FrameMap) -> Option<Aggregation> {
        let time_ns = batch.first()?.time_ns;
        let mut ranges = Vec::new();
        let mut accessed_bytes = 0;
        for region in batch.iter().filter(|r| r.nr_accesses > 0) {
            // A physical-address monitor's regions are physical addresses.
            let (start, end) = (PhysAddr::new(region.start), PhysAddr::new(region.end));
            let mut pages: Vec<u64> = frames.pages_in(start, end).collect();
            pages.sort_unstable();
            accessed_bytes += pages.len() as u64 * crate::pages::PAGE_SIZE;
            ranges.extend(
                crate::pages::page_runs(&pages)
                    .into_iter()
                    .map(|(start, end)| AccessedRange {
                        start,
                        end,
                        nr_accesses: region.nr_accesses,
                    }),
            );
        }
        Some(Aggregation {
            time_ns,
            ranges,
            accessed_bytes,
            resident_bytes: frames.len() as u64 * crate::pages::PAGE_SIZE,
        })
    }
}

/// [`watch_process`] of `pid` through fltrace's own monitor (`own`, with the configuration it
/// was started with) or, without one, the machine's physical-address monitor, gathering the
/// range trace `fltrace heatmap --from damon` reads: each accessed range with its access
/// count. `each` gets every aggregation with its seconds since the call.
pub fn trace_process(
    pid: i32,
    own: Option<(&OwnMonitor, &MonitorConfig)>,
    duration: Option<Duration>,
    stop: &AtomicUsize,
    mut each: impl FnMut(f64, &Aggregation),
) -> Result<RangeTraceWriter, Error> {
    let mut trace = RangeTraceWriter::new(RangeTraceKind::DamonAccesses);
    let started_ns = crate::monotonic_now_ns();
    // Our own virtual-address monitor reports the process's addresses already.
    let operations = own.map_or(Operations::Paddr, |(monitor, _)| monitor.operations);
    // The machine's monitor aggregates every few seconds; ours every aggregation interval.
    let quiet_ns = own.map_or(1_000_000_000, |(_, config)| config.aggr_us * 500);
    watch_process(pid, operations, quiet_ns, duration, stop, |aggregation| {
        let time_s = aggregation.time_ns.saturating_sub(started_ns) as f64 / 1e9;
        for r in &aggregation.ranges {
            trace.push_accesses(&RangeSample {
                time_s,
                start: r.start,
                end: r.end,
                value: u64::from(r.nr_accesses),
            });
        }
        each(time_s, &aggregation);
    })?;
    Ok(trace)
}

/// Reads the monitor's aggregated regions ([`read_aggregated`]) while process `pid` runs, and
/// hands each aggregation interval to `each` in the process's addresses (`operations`: what
/// the monitor watches). The regions of one interval arrive together; a new interval starts
/// after a quiet spell of `quiet_ns`. A physical interval whose frames cannot be read (the
/// process ended) is left out.
pub fn watch_process(
    pid: i32,
    operations: Operations,
    quiet_ns: u64,
    duration: Option<Duration>,
    stop: &AtomicUsize,
    mut each: impl FnMut(Aggregation),
) -> Result<(), Error> {
    let mut batch: Vec<AggregatedRegion> = Vec::new();
    let mut flush = |batch: &mut Vec<AggregatedRegion>| {
        let aggregation = match operations {
            Operations::Vaddr => Aggregation::of_virtual(batch, crate::pages::rss_bytes(pid)),
            Operations::Paddr => FrameMap::of_process(pid)
                .ok()
                .and_then(|frames| Aggregation::of_physical(batch, &frames)),
        };
        batch.clear();
        if let Some(aggregation) = aggregation {
            each(aggregation);
        }
    };
    read_aggregated(
        duration,
        stop,
        || crate::pages::process_running(pid),
        |region| {
            if batch
                .last()
                .is_some_and(|last| region.time_ns > last.time_ns + quiet_ns)
            {
                flush(&mut batch);
            }
            batch.push(region);
        },
    )?;
    flush(&mut batch);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A physical interval becomes the runs of the process's pages in each accessed region,
    /// with the region's count; unaccessed regions and foreign frames are left out.
    #[test]
    fn physical_regions_become_the_process_pages() {
        const PRESENT: u64 = 1 << 63;
        // Frames 16, 17 and 19 hold pages 0x7000, 0x8000 and 0x3000; frame 40 page 0x9000.
        let frames = FrameMap::from_entries([
            (0x7000, PRESENT | 16),
            (0x8000, PRESENT | 17),
            (0x3000, PRESENT | 19),
            (0x9000, PRESENT | 40),
        ]);
        let region = |start: u64, end: u64, nr_accesses| AggregatedRegion {
            time_ns: 5,
            target_id: 0,
            start,
            end,
            nr_accesses,
            age: 0,
        };
        let batch = [
            region(16 * 4096, 20 * 4096, 3),
            region(40 * 4096, 41 * 4096, 0),
        ];
        let aggregation = Aggregation::of_physical(&batch, &frames).unwrap();
        let range = |start, end| AccessedRange {
            start: VirtAddr::new(start),
            end: VirtAddr::new(end),
            nr_accesses: 3,
        };
        assert_eq!(
            aggregation,
            Aggregation {
                time_ns: 5,
                ranges: vec![range(0x3000, 0x4000), range(0x7000, 0x9000)],
                accessed_bytes: 3 * 4096,
                resident_bytes: 4 * 4096,
            }
        );
        let virtual_ = Aggregation::of_virtual(&batch, 123).unwrap();
        assert_eq!(
            (
                virtual_.ranges.len(),
                virtual_.accessed_bytes,
                virtual_.resident_bytes
            ),
            (1, 4 * 4096, 123)
        );
        assert_eq!(Aggregation::of_physical(&[], &frames), None);
    }

    /// A directory laid out as the DAMON sysfs interface is once a kdamond with one context
    /// and one target exists (the kernel makes those directories when the counts are written).
    fn fake_sysfs(available: &str, running: bool) -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        let admin = dir.path();
        let k = admin.join("0");
        for sub in [
            "contexts/0/monitoring_attrs/intervals",
            "contexts/0/monitoring_attrs/nr_regions",
            "contexts/0/targets/0/regions/0",
            "contexts/0/targets/0/regions/1",
        ] {
            std::fs::create_dir_all(k.join(sub)).unwrap();
        }
        std::fs::write(
            admin.join("nr_kdamonds"),
            if running { "1\n" } else { "0\n" },
        )
        .unwrap();
        std::fs::write(k.join("state"), if running { "on\n" } else { "off\n" }).unwrap();
        std::fs::write(k.join("contexts/0/avail_operations"), available).unwrap();
        dir
    }

    fn read(dir: &Path, file: &str) -> String {
        std::fs::read_to_string(dir.join(file))
            .unwrap()
            .trim()
            .to_owned()
    }

    /// Where the kernel has virtual-address operations, the monitor watches the process by
    /// pid with the intervals asked for, and is switched off and removed when dropped.
    #[test]
    fn own_vaddr_monitor_is_configured_and_removed() {
        let dir = fake_sysfs("vaddr fvaddr paddr\n", false);
        let admin = dir.path();
        let config = MonitorConfig {
            sample_us: 1000,
            aggr_us: 20_000,
            update_us: 500_000,
            regions: (5, 50),
        };
        let monitor = OwnMonitor::start(admin, 4242, config, &[]).unwrap();
        assert_eq!(monitor.operations, Operations::Vaddr);
        let ctx = "0/contexts/0";
        assert_eq!(read(admin, "nr_kdamonds"), "1");
        assert_eq!(read(admin, "0/contexts/nr_contexts"), "1");
        assert_eq!(read(admin, &format!("{ctx}/operations")), "vaddr");
        assert_eq!(
            read(
                admin,
                &format!("{ctx}/monitoring_attrs/intervals/sample_us")
            ),
            "1000"
        );
        assert_eq!(
            read(admin, &format!("{ctx}/monitoring_attrs/intervals/aggr_us")),
            "20000"
        );
        assert_eq!(
            read(
                admin,
                &format!("{ctx}/monitoring_attrs/intervals/update_us")
            ),
            "500000"
        );
        assert_eq!(
            read(admin, &format!("{ctx}/monitoring_attrs/nr_regions/min")),
            "5"
        );
        assert_eq!(
            read(admin, &format!("{ctx}/monitoring_attrs/nr_regions/max")),
            "50"
        );
        assert_eq!(read(admin, &format!("{ctx}/targets/nr_targets")), "1");
        assert_eq!(read(admin, &format!("{ctx}/targets/0/pid_target")), "4242");
        assert_eq!(read(admin, "0/state"), "on");
        assert_eq!(status_at(admin), DamonStatus::InUse(vec![0]));
        drop(monitor);
        assert_eq!(read(admin, "0/state"), "off");
        assert_eq!(read(admin, "nr_kdamonds"), "0");
    }

    /// With physical operations only (as on the development machines), the monitor covers the
    /// RAM ranges given.
    #[test]
    fn own_paddr_monitor_covers_ram() {
        let dir = fake_sysfs("paddr\n", false);
        let admin = dir.path();
        let ram = [(0x10_0000, 0x8000_0000), (0x1_0000_0000, 0x2_0000_0000)];
        let monitor = OwnMonitor::start(admin, 1, MonitorConfig::default(), &ram).unwrap();
        assert_eq!(monitor.operations, Operations::Paddr);
        let regions = "0/contexts/0/targets/0/regions";
        assert_eq!(read(admin, &format!("{regions}/nr_regions")), "2");
        assert_eq!(
            read(admin, &format!("{regions}/1/start")),
            (0x1_0000_0000u64).to_string()
        );
        assert_eq!(
            read(admin, &format!("{regions}/1/end")),
            (0x2_0000_0000u64).to_string()
        );
    }

    /// A running monitor fltrace did not start is never touched: starting one is refused and
    /// nothing is written.
    #[test]
    fn running_monitor_is_left_alone() {
        let dir = fake_sysfs("paddr\n", true);
        let admin = dir.path();
        let before = std::fs::read_to_string(admin.join("nr_kdamonds")).unwrap();
        assert!(OwnMonitor::start(admin, 1, MonitorConfig::default(), &[]).is_err());
        assert_eq!(
            std::fs::read_to_string(admin.join("nr_kdamonds")).unwrap(),
            before
        );
        assert_eq!(read(admin, "0/state"), "on");
    }

    /// A running monitor is read as it is: nothing is written, no RAM asked for, and the user
    /// told which kdamonds run.
    #[test]
    fn chosen_monitor_is_another_where_one_runs() {
        let dir = fake_sysfs("paddr\n", true);
        let admin = dir.path();
        let chosen = ChosenMonitor::choose(admin, 77, MonitorConfig::default(), || {
            panic!("RAM asked for without a monitor to start")
        })
        .unwrap();
        assert!(chosen.own().is_none());
        assert_eq!(
            chosen.to_string(),
            "DAMON is in use by a monitor fltrace did not start (kdamond 0); reading its \
             damon:damon_aggregated events read-only, translated to process 77"
        );
        assert_eq!(read(admin, "nr_kdamonds"), "1");
        assert_eq!(read(admin, "0/state"), "on");
    }

    /// Where DAMON is free, fltrace's own monitor is started, said, and removed on drop.
    #[test]
    fn chosen_monitor_is_our_own_where_damon_is_free() {
        let dir = fake_sysfs("vaddr paddr\n", false);
        let admin = dir.path();
        let config = MonitorConfig {
            aggr_us: 50_000,
            ..MonitorConfig::default()
        };
        let chosen = ChosenMonitor::choose(admin, 77, config, Vec::new).unwrap();
        assert_eq!(
            chosen.to_string(),
            "DAMON is free: started a monitor of fltrace's own (virtual-address operations), \
             removed at the end"
        );
        let (monitor, own_config) = chosen.own().unwrap();
        assert_eq!(
            (monitor.operations, *own_config),
            (Operations::Vaddr, config)
        );
        assert_eq!(read(admin, "0/contexts/0/targets/0/pid_target"), "77");
        drop(chosen);
        assert_eq!(read(admin, "nr_kdamonds"), "0");

        let dir = fake_sysfs("paddr\n", false);
        let chosen =
            ChosenMonitor::choose(dir.path(), 77, config, || vec![(0x1000, 0x2000)]).unwrap();
        assert!(chosen.to_string().contains("(physical-address operations)"));
        assert_eq!(
            read(dir.path(), "0/contexts/0/targets/0/regions/0/end"),
            "8192"
        );
    }

    /// No interface, or an own monitor that cannot start: one line saying which.
    #[test]
    fn no_chosen_monitor_says_why() {
        let dir = tempfile::tempdir().unwrap();
        let admin = dir.path().join("admin/kdamonds");
        let absent =
            ChosenMonitor::choose(&admin, 1, MonitorConfig::default(), Vec::new).unwrap_err();
        assert_eq!(
            absent.to_string(),
            format!(
                "this kernel has no DAMON sysfs interface ({}); use fltrace wss without --damon",
                dir.path().join("admin").display()
            )
        );
        // Free, but without the kdamond's directories the kernel would have made.
        std::fs::write(dir.path().join("nr_kdamonds"), "0\n").unwrap();
        let failed =
            ChosenMonitor::choose(dir.path(), 1, MonitorConfig::default(), Vec::new).unwrap_err();
        assert_eq!(
            fltrace_trace::error_chain(&failed),
            "starting a DAMON monitor: writing the DAMON sysfs interface: No such file or \
             directory (os error 2)"
        );
    }

    fn fields() -> AggregatedFields {
        // The layout of Linux 6.18's format file.
        AggregatedFields {
            target_id: 8,
            start: 24,
            end: 32,
            nr_accesses: 40,
            age: 44,
        }
    }

    /// Raw event bytes decode into the region they describe.
    #[test]
    fn decodes_aggregated_events() {
        let mut raw = vec![0u8; 48];
        raw[8..16].copy_from_slice(&3u64.to_ne_bytes());
        raw[24..32].copy_from_slice(&0x1_0000_0000u64.to_ne_bytes());
        raw[32..40].copy_from_slice(&0x1_0020_0000u64.to_ne_bytes());
        raw[40..44].copy_from_slice(&7u32.to_ne_bytes());
        raw[44..48].copy_from_slice(&2u32.to_ne_bytes());
        let region = fields().decode(&raw, 99).unwrap();
        assert_eq!(
            region,
            AggregatedRegion {
                time_ns: 99,
                target_id: 3,
                start: 0x1_0000_0000,
                end: 0x1_0020_0000,
                nr_accesses: 7,
                age: 2
            }
        );
        assert_eq!(
            fields().decode(&raw[..40], 0),
            None,
            "short data is refused"
        );
    }

    /// Physical ranges map back to exactly the process pages whose frames they hold.
    #[test]
    fn translates_physical_ranges_to_pages() {
        const PRESENT: u64 = 1 << 63;
        let map = FrameMap::from_entries([
            (0x7000_0000, PRESENT | 0x100),
            (0x7000_1000, PRESENT | 0x101),
            (0x7000_2000, 0x102), // not present
            (0x5555_0000, PRESENT | 0x2000),
        ]);
        assert_eq!(map.len(), 3);
        let frame = |n: u64| PhysAddr::of_frame(n, 4096);
        let pages: Vec<u64> = map.pages_in(frame(0x100), frame(0x102)).collect();
        assert_eq!(pages, vec![0x7000_0000, 0x7000_1000]);
        assert_eq!(
            map.pages_in(frame(0x2000), frame(0x2000) + 1)
                .collect::<Vec<_>>(),
            vec![0x5555_0000]
        );
        assert_eq!(map.pages_in(frame(0), frame(0x100)).count(), 0);
    }
}
