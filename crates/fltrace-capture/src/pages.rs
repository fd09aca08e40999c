//! A process's pages as /proc shows them: runs of page addresses, whether the process still
//! runs, its resident size, and the physical frame behind each present page (pagemap), for
//! the sampling loops of `wss` and `damon`.

use crate::Error;
use fltrace_trace::{PhysAddr, VirtAddr};

/// The size of the pages the idle bitmap and pagemap count in.
pub const PAGE_SIZE: u64 = 4096;

/// Sorted page addresses merged into runs of adjacent pages, `[start, end)`.
pub fn page_runs(pages: &[u64]) -> Vec<(VirtAddr, VirtAddr)> {
    let mut runs: Vec<(VirtAddr, VirtAddr)> = Vec::new();
    for &page in pages {
        let page = VirtAddr::new(page);
        match runs.last_mut() {
            Some((_, end)) if *end == page => *end += PAGE_SIZE,
            _ => runs.push((page, page + PAGE_SIZE)),
        }
    }
    runs
}

/// Whether process `pid` still runs: it exists and is not a zombie.
pub fn process_running(pid: i32) -> bool {
    crate::procfs::stat(pid).is_ok_and(|stat| !stat.is_zombie())
}

/// The resident bytes of process `pid` now (0 if it is gone).
pub fn rss_bytes(pid: i32) -> u64 {
    crate::procfs::resident_pages(pid).map_or(0, |pages| pages * PAGE_SIZE)
}

/// Pages of `/proc/PID/pagemap` read at a time: 512 KiB of entries.
const PAGEMAP_WINDOW_PAGES: usize = 1 << 16;

/// `(frame number, virtual page address)` of a pagemap entry, if its page is present with a
/// known frame.
fn present_frame(vaddr: u64, entry: u64) -> Option<(u64, u64)> {
    const PRESENT: u64 = 1 << 63;
    const PFN_MASK: u64 = (1 << 55) - 1;
    (entry & PRESENT != 0 && entry & PFN_MASK != 0).then_some((entry & PFN_MASK, vaddr))
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
        let mut frames: Vec<(u64, u64)> = entries
            .into_iter()
            .filter_map(|(vaddr, entry)| present_frame(vaddr, entry))
            .collect();
        frames.sort_unstable();
        FrameMap { frames }
    }

    /// Reads `/proc/PID/pagemap` for every mapping of the process (needs root for frame
    /// numbers), a window at a time and keeping only present pages: memory follows the
    /// resident pages, not the address space (the preload library alone reserves 64 GiB).
    pub fn of_process(pid: i32) -> Result<FrameMap, Error> {
        use std::os::unix::fs::FileExt;
        let attach = |source| Error::Attach { pid, source };
        let mappings = crate::procfs::mappings(pid).map_err(attach)?;
        let pagemap = std::fs::File::open(format!("/proc/{pid}/pagemap")).map_err(attach)?;
        let mut frames = Vec::new();
        let mut window = vec![0u8; PAGEMAP_WINDOW_PAGES * 8];
        for mapping in mappings {
            let (first, end) = (mapping.start.get() / 4096, mapping.end.get() / 4096);
            let kept = frames.len();
            let mut page = first;
            while page < end {
                let pages = ((end - page) as usize).min(PAGEMAP_WINDOW_PAGES);
                let bytes = &mut window[..pages * 8];
                // Unreadable ranges ([vsyscall]) are skipped, the whole mapping.
                if pagemap.read_exact_at(bytes, page * 8).is_err() {
                    frames.truncate(kept);
                    break;
                }
                frames.extend(bytes.chunks_exact(8).enumerate().filter_map(|(i, entry)| {
                    let entry = u64::from_ne_bytes(entry.try_into().unwrap_or([0; 8]));
                    present_frame((page + i as u64) * 4096, entry)
                }));
                page += pages as u64;
            }
        }
        frames.sort_unstable();
        Ok(FrameMap { frames })
    }

    /// The process's pages whose frames lie in the physical range `[start, end)`.
    pub fn pages_in(&self, start: PhysAddr, end: PhysAddr) -> impl Iterator<Item = u64> + '_ {
        let (first, last) = (start.frame(4096), end.get().div_ceil(4096));
        let from = self.frames.partition_point(|(pfn, _)| *pfn < first);
        self.frames[from..]
            .iter()
            .take_while(move |(pfn, _)| *pfn < last)
            .map(|(_, vaddr)| *vaddr)
    }

    /// Every (frame number, virtual page address), sorted by frame.
    pub fn frames(&self) -> &[(u64, u64)] {
        &self.frames
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

    /// This process runs; a pid that cannot exist does not.
    #[test]
    fn running_processes_are_told_from_gone_ones() {
        assert!(process_running(std::process::id() as i32));
        assert!(rss_bytes(std::process::id() as i32) > 0);
        assert!(!process_running(i32::MAX));
        assert_eq!(rss_bytes(i32::MAX), 0);
    }

    /// Counts the bytes each thread holds allocated, and their peak: what a call holds.
    struct Counting;

    thread_local! {
        static LIVE: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
        static PEAK: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
    }

    fn count(grown: usize, shrunk: usize) {
        let _ = LIVE.try_with(|live| {
            live.set((live.get() + grown).saturating_sub(shrunk));
            let _ = PEAK.try_with(|peak| peak.set(peak.get().max(live.get())));
        });
    }

    // SAFETY: the system allocator's calls, passed through unchanged.
    unsafe impl std::alloc::GlobalAlloc for Counting {
        unsafe fn alloc(&self, layout: std::alloc::Layout) -> *mut u8 {
            count(layout.size(), 0);
            // SAFETY: as the caller's.
            unsafe { std::alloc::System.alloc(layout) }
        }
        unsafe fn dealloc(&self, ptr: *mut u8, layout: std::alloc::Layout) {
            count(0, layout.size());
            // SAFETY: as the caller's.
            unsafe { std::alloc::System.dealloc(ptr, layout) }
        }
        unsafe fn alloc_zeroed(&self, layout: std::alloc::Layout) -> *mut u8 {
            count(layout.size(), 0);
            // SAFETY: as the caller's.
            unsafe { std::alloc::System.alloc_zeroed(layout) }
        }
        unsafe fn realloc(
            &self,
            ptr: *mut u8,
            layout: std::alloc::Layout,
            new_size: usize,
        ) -> *mut u8 {
            count(new_size, layout.size());
            // SAFETY: as the caller's.
            unsafe { std::alloc::System.realloc(ptr, layout, new_size) }
        }
    }

    #[global_allocator]
    static ALLOCATOR: Counting = Counting;

    /// The frames of a process that reserves 64 GiB and never touches it (as the preload
    /// library does) are read holding less than 8 MiB: the reservation's pagemap entries
    /// alone were 128 MiB, and their (page, entry) pairs 256 MiB more. The pages it touched
    /// are found, with the frames the kernel gives them.
    #[test]
    fn frames_of_a_huge_reservation_are_read_in_bounded_memory() {
        use std::os::unix::fs::FileExt;
        const RESERVED: usize = 64 << 30;
        const TOUCHED: usize = 64;
        // SAFETY: new private mappings of our own, unmapped at the end.
        let (reserved, touched) = unsafe {
            (
                libc::mmap(
                    std::ptr::null_mut(),
                    RESERVED,
                    libc::PROT_NONE,
                    libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
                    -1,
                    0,
                ),
                libc::mmap(
                    std::ptr::null_mut(),
                    TOUCHED * 4096,
                    libc::PROT_READ | libc::PROT_WRITE,
                    libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                    -1,
                    0,
                ),
            )
        };
        assert!(reserved != libc::MAP_FAILED && touched != libc::MAP_FAILED);
        let first = touched as u64;
        for page in 0..TOUCHED {
            // SAFETY: within the writable mapping just made.
            unsafe { *touched.cast::<u8>().add(page * 4096) = 1 };
        }
        let pid = std::process::id() as i32;
        let before = LIVE.with(|live| live.get());
        PEAK.with(|peak| peak.set(before));
        let frames = FrameMap::of_process(pid).unwrap();
        let held = PEAK.with(|peak| peak.get()) - before;
        // The kernel's word for each touched page, read apart.
        let pagemap = std::fs::File::open("/proc/self/pagemap").unwrap();
        let expected: Vec<(u64, u64)> = (0..TOUCHED as u64)
            .filter_map(|page| {
                let vaddr = first + page * 4096;
                let mut entry = [0u8; 8];
                pagemap.read_exact_at(&mut entry, vaddr / 4096 * 8).unwrap();
                present_frame(vaddr, u64::from_ne_bytes(entry))
            })
            .collect();
        // SAFETY: the mappings made above, no longer used.
        unsafe {
            libc::munmap(reserved, RESERVED);
            libc::munmap(touched, TOUCHED * 4096);
        }
        assert!(held < 8 << 20, "reading the frames held {held} bytes");
        assert_eq!(expected.len(), TOUCHED, "pages without a frame: not root?");
        for frame in &expected {
            assert!(
                frames.frames().binary_search(frame).is_ok(),
                "{frame:x?} not found"
            );
        }
    }
}
