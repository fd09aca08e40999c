//! Working-set size by reference bits: clear them (`/proc/PID/clear_refs`), wait an interval,
//! read back how much of each mapping was referenced (`Referenced:` in `/proc/PID/smaps`).
//! The method of Brendan Gregg's wss.pl and of the memref patch (seed 004), which the kernel
//! now offers without a module.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use fltrace_trace::{RangeSample, RangeTraceKind, RangeTraceWriter, VirtAddr, WssRow};

use crate::Error;
use crate::pages::{PAGE_SIZE, page_runs, process_running};
pub use crate::procfs::MappingRefs;

/// One interval's reading.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WssSample {
    /// End of the interval, since sampling began.
    pub elapsed: Duration,
    /// Per mapping, those with referenced or resident pages.
    pub mappings: Vec<MappingRefs>,
}

impl WssSample {
    /// Bytes referenced in the interval: the working-set size.
    pub fn wss(&self) -> u64 {
        self.mappings.iter().map(|m| m.referenced).sum()
    }

    /// Bytes resident at the end of the interval.
    pub fn rss(&self) -> u64 {
        self.mappings.iter().map(|m| m.rss).sum()
    }

    /// The interval as a row of `fltrace wss`.
    pub fn row(&self) -> WssRow {
        WssRow {
            time_s: self.elapsed.as_secs_f64(),
            wss_bytes: self.wss(),
            rss_bytes: self.rss(),
        }
    }
}

/// Clears the referenced bits of all of `pid`'s pages.
pub fn clear_refs(pid: i32) -> Result<(), Error> {
    crate::procfs::clear_refs(pid).map_err(|source| Error::Attach { pid, source })
}

pub use crate::procfs::parse_smaps;

/// Samples `pid` every `interval` until `keep_going` says stop or the process is gone.
pub fn sample(
    pid: i32,
    interval: Duration,
    mut keep_going: impl FnMut(&WssSample) -> bool,
) -> Result<(), Error> {
    let start = Instant::now();
    clear_refs(pid)?;
    let mut next = start + interval;
    loop {
        let now = Instant::now();
        if next > now {
            std::thread::sleep(next - now);
        }
        let Ok(text) = crate::procfs::smaps_text(pid) else {
            return Ok(());
        };
        // Cleared at once: the next interval starts now.
        if clear_refs(pid).is_err() {
            return Ok(());
        }
        let mut mappings = parse_smaps(&text);
        if mappings.is_empty() {
            // A zombie has no mappings left: the program is done.
            return Ok(());
        }
        mappings.retain(|m| m.referenced > 0 || m.rss > 0);
        let sample = WssSample {
            elapsed: start.elapsed(),
            mappings,
        };
        if !keep_going(&sample) {
            return Ok(());
        }
        next = next_sample(next, interval, Instant::now());
    }
}

/// When the sample after the one due at `due` is taken, at `now`: an interval later, or,
/// behind (a loaded machine), an interval from now. Missed intervals are skipped, not caught
/// up back to back: a read right after the last clear sees almost nothing referenced, a
/// working set of 0 that the program never had.
fn next_sample(due: Instant, interval: Duration, now: Instant) -> Instant {
    let next = due + interval;
    if next <= now { now + interval } else { next }
}

/// The kernel's idle page bitmap: one bit per page frame, set by writing, cleared by the
/// kernel when the page is accessed. With it, the reference bits of single pages can be read,
/// which `clear_refs` and `smaps` give only per mapping.
pub const PAGE_IDLE_BITMAP: &str = "/sys/kernel/mm/page_idle/bitmap";

/// Per-page reference detail through an idle page bitmap (the kernel's, or a file laid out
/// like it in tests).
pub struct IdleBitmap {
    file: std::fs::File,
}

impl IdleBitmap {
    /// Opens the bitmap at `path` ([`PAGE_IDLE_BITMAP`]).
    pub fn open(path: &std::path::Path) -> std::io::Result<IdleBitmap> {
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(path)?;
        Ok(IdleBitmap { file })
    }

    /// Marks the frames idle (`pfns` sorted); the kernel clears a frame's bit when its page
    /// is accessed.
    pub fn mark_idle(&self, pfns: &[u64]) -> std::io::Result<()> {
        use std::os::unix::fs::FileExt;
        for (word, bits) in words(pfns) {
            self.file.write_all_at(&bits.to_ne_bytes(), word * 8)?;
        }
        Ok(())
    }

    /// For each frame of `pfns` (sorted), whether it was accessed since it was marked idle.
    pub fn accessed(&self, pfns: &[u64]) -> std::io::Result<Vec<bool>> {
        use std::os::unix::fs::FileExt;
        let mut idle = std::collections::HashMap::new();
        for (word, _) in words(pfns) {
            let mut bytes = [0u8; 8];
            self.file.read_exact_at(&mut bytes, word * 8)?;
            idle.insert(word, u64::from_ne_bytes(bytes));
        }
        Ok(pfns
            .iter()
            .map(|pfn| {
                idle.get(&(pfn / 64))
                    .is_some_and(|w| w & (1 << (pfn % 64)) == 0)
            })
            .collect())
    }
}

/// The bitmap words that hold `pfns` (sorted), with the frames' bits set.
fn words(pfns: &[u64]) -> Vec<(u64, u64)> {
    let mut words: Vec<(u64, u64)> = Vec::new();
    for pfn in pfns {
        let (word, bit) = (pfn / 64, 1u64 << (pfn % 64));
        match words.last_mut() {
            Some((w, bits)) if *w == word => *bits |= bit,
            _ => words.push((word, bit)),
        }
    }
    words
}

/// One interval of per-page sampling ([`sample_pages`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PageSample {
    /// End of the interval, since sampling began.
    pub elapsed: Duration,
    /// The virtual addresses of the pages accessed in the interval, sorted.
    pub accessed: Vec<u64>,
    /// Pages resident (with a known frame) at the start of the interval.
    pub resident: u64,
}

impl PageSample {
    /// Bytes accessed in the interval: the working-set size.
    pub fn wss(&self) -> u64 {
        self.accessed.len() as u64 * PAGE_SIZE
    }

    /// Bytes resident at the start of the interval.
    pub fn rss(&self) -> u64 {
        self.resident * PAGE_SIZE
    }

    /// The accessed pages as runs of adjacent pages.
    pub fn runs(&self) -> Vec<(VirtAddr, VirtAddr)> {
        page_runs(&self.accessed)
    }

    /// The interval as a row of `fltrace wss`.
    pub fn row(&self) -> WssRow {
        WssRow {
            time_s: self.elapsed.as_secs_f64(),
            wss_bytes: self.wss(),
            rss_bytes: self.rss(),
        }
    }
}

/// Samples `pid` page by page: every interval its present pages are marked idle in `bitmap`
/// and read back at the end of it; the pages whose bit the kernel cleared were accessed. Ends
/// when `keep_going` says stop (asked after each interval) or the process is gone.
pub fn sample_pages(
    pid: i32,
    interval: Duration,
    bitmap: &IdleBitmap,
    mut keep_going: impl FnMut(&PageSample) -> bool,
) -> Result<(), Error> {
    let started = Instant::now();
    let bitmap_error = |what: &'static str| {
        move |source| Error::Kernel {
            what,
            source,
            hint: "",
        }
    };
    while process_running(pid) {
        let Ok(frames) = crate::pages::FrameMap::of_process(pid) else {
            break;
        };
        let pfns: Vec<u64> = frames.frames().iter().map(|(pfn, _)| *pfn).collect();
        bitmap
            .mark_idle(&pfns)
            .map_err(bitmap_error("marking pages idle"))?;
        std::thread::sleep(interval);
        let accessed = bitmap
            .accessed(&pfns)
            .map_err(bitmap_error("reading the idle page bitmap"))?;
        let sample = PageSample {
            elapsed: started.elapsed(),
            accessed: accessed_pages(&frames, &accessed),
            resident: pfns.len() as u64,
        };
        if !keep_going(&sample) {
            break;
        }
    }
    Ok(())
}

/// The virtual pages of `frames` whose `accessed` flag is set, sorted.
fn accessed_pages(frames: &crate::pages::FrameMap, accessed: &[bool]) -> Vec<u64> {
    let mut pages: Vec<u64> = frames
        .frames()
        .iter()
        .zip(accessed)
        .filter(|(_, a)| **a)
        .map(|((_, vaddr), _)| *vaddr)
        .collect();
    pages.sort_unstable();
    pages
}

/// What [`trace_referenced`] gathered.
pub struct ReferencedTrace {
    /// The per-mapping range trace (`fltrace-data-wss-<pid>.csv`).
    pub ranges: RangeTraceWriter,
    /// Every interval's row, in order: the working-set curve to plot.
    pub curve: Vec<WssRow>,
}

/// When `fltrace wss` stops sampling: once `duration` (from now; `None`, never) has passed or
/// `stop` is raised (Ctrl-C, or its output gone), asked after each interval.
fn until(duration: Option<Duration>, stop: &AtomicUsize) -> impl Fn() -> bool + '_ {
    let started = Instant::now();
    move || stop.load(Ordering::Relaxed) == 0 && duration.is_none_or(|d| started.elapsed() < d)
}

/// [`sample`] until `duration` has passed, `stop` is raised or the process is gone, calling
/// `each` with every interval (before `stop` is looked at), and gathering the per-mapping
/// range trace `fltrace heatmap --from wss` reads (the bytes referenced in each mapping and
/// interval, with its resident bytes and name) and the working-set curve.
pub fn trace_referenced(
    pid: i32,
    interval: Duration,
    duration: Option<Duration>,
    stop: &AtomicUsize,
    mut each: impl FnMut(&WssSample),
) -> Result<ReferencedTrace, Error> {
    let keep_going = until(duration, stop);
    let mut trace = RangeTraceWriter::new(RangeTraceKind::ReferencedBytes);
    let mut curve = Vec::new();
    sample(pid, interval, |sample| {
        curve.push(sample.row());
        let time_s = sample.elapsed.as_secs_f64();
        for m in &sample.mappings {
            let range = RangeSample {
                time_s,
                start: m.start,
                end: m.end,
                value: m.referenced,
            };
            trace.push_referenced(&range, m.rss, &m.path);
        }
        each(sample);
        keep_going()
    })?;
    Ok(ReferencedTrace {
        ranges: trace,
        curve,
    })
}

/// [`sample_pages`] until `duration` has passed, `stop` is raised (both also asked before
/// the first interval) or the process is gone, gathering the range trace of the runs of
/// accessed pages (each run wholly referenced and resident, named `[pages]`), calling `each`
/// with every sample.
pub fn trace_pages(
    pid: i32,
    interval: Duration,
    bitmap: &IdleBitmap,
    duration: Option<Duration>,
    stop: &AtomicUsize,
    mut each: impl FnMut(&PageSample),
) -> Result<RangeTraceWriter, Error> {
    let keep_going = until(duration, stop);
    let mut trace = RangeTraceWriter::new(RangeTraceKind::ReferencedBytes);
    if !keep_going() {
        return Ok(trace);
    }
    sample_pages(pid, interval, bitmap, |sample| {
        let time_s = sample.elapsed.as_secs_f64();
        for (start, end) in sample.runs() {
            let range = RangeSample {
                time_s,
                start,
                end,
                value: end - start,
            };
            trace.push_referenced(&range, end - start, "[pages]");
        }
        each(sample);
        keep_going()
    })?;
    Ok(trace)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn samples_behind_skip_the_intervals_missed() {
        let start = Instant::now();
        let interval = Duration::from_millis(100);
        // On time: the next interval.
        assert_eq!(
            next_sample(start, interval, start + Duration::from_millis(30)),
            start + interval
        );
        // 350 ms late: not three samples back to back, one an interval from now.
        let late = start + Duration::from_millis(350);
        assert_eq!(next_sample(start, interval, late), late + interval);
    }

    /// Adjacent pages merge into one run; a gap starts another.
    #[test]
    fn pages_merge_into_runs() {
        let run = |start, end| (VirtAddr::new(start), VirtAddr::new(end));
        assert_eq!(page_runs(&[]), vec![]);
        assert_eq!(
            page_runs(&[0x1000, 0x2000, 0x3000, 0x5000, 0x9000, 0xa000]),
            vec![
                run(0x1000, 0x4000),
                run(0x5000, 0x6000),
                run(0x9000, 0xb000)
            ]
        );
        let sample = PageSample {
            elapsed: Duration::from_millis(1500),
            accessed: vec![0x1000, 0x2000, 0x7000],
            resident: 10,
        };
        assert_eq!(
            sample.row(),
            WssRow {
                time_s: 1.5,
                wss_bytes: 3 * 4096,
                rss_bytes: 10 * 4096
            }
        );
        assert_eq!(
            (sample.wss(), sample.rss(), sample.runs()),
            (
                3 * 4096,
                10 * 4096,
                vec![run(0x1000, 0x3000), run(0x7000, 0x8000)]
            )
        );
    }

    /// The accessed frames' pages come back sorted by virtual address, whatever the frame
    /// order; frames the kernel did not see accessed are left out.
    #[test]
    fn accessed_frames_become_sorted_pages() {
        const PRESENT: u64 = 1 << 63;
        let frames = crate::pages::FrameMap::from_entries([
            (0x5000, PRESENT | 3),
            (0x1000, PRESENT | 9),
            (0x2000, PRESENT | 1),
        ]);
        // Frame order: 1 (0x2000), 3 (0x5000), 9 (0x1000).
        assert_eq!(
            accessed_pages(&frames, &[true, false, true]),
            vec![0x1000, 0x2000]
        );
    }

    /// Each interval of this very process is one point of the curve, the row its sample
    /// gives, and the trace holds its mappings; a stop raised during an interval ends
    /// sampling after it.
    #[test]
    fn referenced_trace_keeps_every_interval_as_a_row() {
        let pid = std::process::id() as i32;
        let stop = AtomicUsize::new(0);
        let mut rows = Vec::new();
        let trace = trace_referenced(pid, Duration::from_millis(5), None, &stop, |sample| {
            rows.push(sample.row());
            if rows.len() == 3 {
                stop.fetch_add(1, Ordering::Relaxed);
            }
        })
        .unwrap();
        assert_eq!(trace.curve, rows);
        assert_eq!(trace.curve.len(), 3);
        assert!(trace.curve.iter().all(|r| r.rss_bytes > 0));
        assert!(trace.ranges.rows() > 0);
    }

    /// A duration already over ends sampling after the first interval.
    #[test]
    fn referenced_trace_ends_when_its_duration_has_passed() {
        let pid = std::process::id() as i32;
        let stop = AtomicUsize::new(0);
        let trace = trace_referenced(
            pid,
            Duration::from_millis(5),
            Some(Duration::ZERO),
            &stop,
            |_| {},
        )
        .unwrap();
        assert_eq!(trace.curve.len(), 1);
    }

    /// Frames are marked idle word by word; a frame whose bit the kernel cleared reads as
    /// accessed, the others as not.
    #[test]
    fn idle_bitmap_marks_and_reads_frames() {
        use std::os::unix::fs::FileExt;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("bitmap");
        std::fs::write(&path, vec![0u8; 64]).unwrap();
        let bitmap = IdleBitmap::open(&path).unwrap();
        let pfns = [3, 5, 64, 130];
        bitmap.mark_idle(&pfns).unwrap();
        let file = std::fs::File::open(&path).unwrap();
        let mut word = [0u8; 8];
        file.read_exact_at(&mut word, 0).unwrap();
        assert_eq!(u64::from_ne_bytes(word), (1 << 3) | (1 << 5));
        // The "kernel" saw frames 5 and 130 accessed.
        let clear = |offset: u64, bits: u64| {
            let f = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
            f.write_all_at(&bits.to_ne_bytes(), offset).unwrap();
        };
        clear(0, 1 << 3);
        clear(16, 0);
        assert_eq!(
            bitmap.accessed(&pfns).unwrap(),
            vec![false, true, false, true]
        );
    }

    /// smaps blocks are attributed to the mapping line above them.
    #[test]
    fn parses_smaps_blocks() {
        let text = "55d0a0000000-55d0a0021000 rw-p 00000000 00:00 0                          [heap]\n\
            Size:                132 kB\n\
            Rss:                  64 kB\n\
            Referenced:           12 kB\n\
            VmFlags: rd wr mr mw me ac\n\
            7f0000000000-7f0000400000 rw-p 00000000 00:00 0 \n\
            Rss:                4096 kB\n\
            Referenced:         4096 kB\n";
        let mappings = parse_smaps(text);
        assert_eq!(mappings.len(), 2);
        assert_eq!(
            (
                mappings[0].path.as_str(),
                mappings[0].referenced,
                mappings[0].rss
            ),
            ("[heap]", 12 * 1024, 64 * 1024)
        );
        assert_eq!(
            (mappings[1].start.get(), mappings[1].referenced),
            (0x7f00_0000_0000, 4 << 20)
        );
        let sample = WssSample {
            elapsed: Duration::ZERO,
            mappings,
        };
        assert_eq!(sample.wss(), 12 * 1024 + (4 << 20));
    }
}
