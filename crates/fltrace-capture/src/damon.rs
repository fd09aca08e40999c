//! DAMON, read-only: what the kernel's monitors are doing, and the `damon:damon_aggregated`
//! events of a monitor fltrace did not start, translated to a process's pages.
//!
//! fltrace never stops, reconfigures or adds schemes to a monitor it did not start, and never
//! writes under /sys/kernel/mm/damon: it enables the tracepoint for reading, which changes
//! nothing in DAMON (see ../shared/KERNEL.md on the development machines' own monitor).

use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use crate::Error;
use crate::ring::RingBuffer;
use crate::sys::{self, PerfEvent, Tracepoint};

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

/// Reads the kdamonds' states from sysfs.
pub fn status() -> DamonStatus {
    let admin = Path::new("/sys/kernel/mm/damon/admin/kdamonds");
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

/// One region as a monitor reported it at the end of an aggregation interval.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AggregatedRegion {
    /// Kernel time of the event (CLOCK_MONOTONIC, ns).
    pub time_ns: u64,
    /// The monitor's target.
    pub target_id: u64,
    /// First address (physical, for paddr monitors).
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
    let tracefs = sys::tracefs().map_err(Error::kernel("mounting tracefs"))?;
    let tp = Tracepoint::open(&tracefs, "damon", "damon_aggregated")
        .map_err(Error::kernel("tracepoint damon:damon_aggregated"))?;
    let fields = AggregatedFields::from_tracepoint(&tp).ok_or_else(|| Error::Kernel {
        what: "tracepoint damon:damon_aggregated",
        source: std::io::Error::from_raw_os_error(libc::EINVAL),
        hint: " (unexpected field layout)",
    })?;
    let attr = sys::raw_tracepoint_attr(tp.id);
    let mut rings = Vec::new();
    let mut events = Vec::new();
    for cpu in sys::online_cpus().map_err(Error::kernel("online CPUs"))? {
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
                const PERF_RECORD_SAMPLE: u32 = 9;
                if record.kind != PERF_RECORD_SAMPLE {
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

/// The physical frames of a process's pages, to attribute physical regions to its addresses.
#[derive(Debug, Clone, Default)]
pub struct FrameMap {
    /// (frame number, virtual page address), sorted by frame.
    frames: Vec<(u64, u64)>,
}

impl FrameMap {
    /// From `(virtual page address, pagemap entry)` pairs: present pages only.
    pub fn from_entries(entries: impl IntoIterator<Item = (u64, u64)>) -> FrameMap {
        const PRESENT: u64 = 1 << 63;
        const PFN_MASK: u64 = (1 << 55) - 1;
        let mut frames: Vec<(u64, u64)> = entries
            .into_iter()
            .filter(|(_, e)| e & PRESENT != 0 && e & PFN_MASK != 0)
            .map(|(vaddr, e)| (e & PFN_MASK, vaddr))
            .collect();
        frames.sort_unstable();
        FrameMap { frames }
    }

    /// Reads `/proc/PID/pagemap` for every mapping of the process (needs root for frame numbers).
    pub fn of_process(pid: i32) -> Result<FrameMap, Error> {
        use std::os::unix::fs::FileExt;
        let attach = |source| Error::Attach { pid, source };
        let maps = std::fs::read_to_string(format!("/proc/{pid}/maps")).map_err(attach)?;
        let pagemap = std::fs::File::open(format!("/proc/{pid}/pagemap")).map_err(attach)?;
        let mut entries = Vec::new();
        let mut buf = Vec::new();
        for mapping in maps.lines().filter_map(fltrace_trace::parse_procmaps_line) {
            let pages = ((mapping.end - mapping.start) / 4096) as usize;
            buf.resize(pages * 8, 0);
            // Unreadable ranges ([vsyscall]) are skipped.
            if pagemap
                .read_exact_at(&mut buf, mapping.start / 4096 * 8)
                .is_err()
            {
                continue;
            }
            for (i, chunk) in buf.chunks_exact(8).enumerate() {
                let entry = u64::from_ne_bytes(chunk.try_into().unwrap_or([0; 8]));
                entries.push((mapping.start + i as u64 * 4096, entry));
            }
        }
        Ok(FrameMap::from_entries(entries))
    }

    /// The process's pages whose frames lie in the physical range `[start, end)`.
    pub fn pages_in(&self, start: u64, end: u64) -> impl Iterator<Item = u64> + '_ {
        let (first, last) = (start / 4096, end.div_ceil(4096));
        let from = self.frames.partition_point(|(pfn, _)| *pfn < first);
        self.frames[from..]
            .iter()
            .take_while(move |(pfn, _)| *pfn < last)
            .map(|(_, vaddr)| *vaddr)
    }

    /// Pages with a known frame.
    pub fn len(&self) -> usize {
        self.frames.len()
    }

    /// Whether no page has a known frame.
    pub fn is_empty(&self) -> bool {
        self.frames.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
        let pages: Vec<u64> = map.pages_in(0x100 * 4096, 0x102 * 4096).collect();
        assert_eq!(pages, vec![0x7000_0000, 0x7000_1000]);
        assert_eq!(
            map.pages_in(0x2000 * 4096, 0x2000 * 4096 + 1)
                .collect::<Vec<_>>(),
            vec![0x5555_0000]
        );
        assert_eq!(map.pages_in(0, 0x100 * 4096).count(), 0);
    }
}
