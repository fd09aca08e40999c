use super::stacks::{ENTRY_CODE, classify};
use super::*;
use crate::unwind::{ElfCache, StackBytes, UnwindEnd};
use fltrace_trace::{FaultFlags, StackEnd};

/// A recording into `dir`, under far memory (its runtime's files named `far_memory`) if given.
fn session(dir: &Path, far_memory: Option<PathBuf>, mono_offset: u64) -> RecordingContext {
    RecordingContext {
        dir: dir.to_owned(),
        read_live_stacks: false,
        far_memory,
        metadata: Vec::new(),
        collect_code_hits: false,
        live: false,
        mono_offset,
        far_backlog: 0,
        resident_series: false,
    }
}

fn process(dir: &Path) -> Process {
    Process::filed_as(1, 1, None, &session(dir, None, 0)).expect("process files")
}

/// A process whose end the records never said: once its main thread ended, it waits for
/// the threads /proc lists (a lost exit record's thread dropped, a thread whose fork was
/// not read kept) and is gone when none is; before that, only when its pid is gone.
/// Before, a lost thread-exit record kept it open to the end of the recording.
#[test]
fn process_whose_thread_exits_were_lost_ends_when_proc_lists_none() {
    let dir = tempfile::tempdir().expect("tempdir");
    let proc_root = dir.path().join("proc");
    let task = proc_root.join("1/task");
    for tid in ["1", "6", "9"] {
        std::fs::create_dir_all(task.join(tid)).expect("task dir");
    }
    let mut waiting = process(dir.path());
    waiting.thread_started(5);
    waiting.thread_started(6);
    assert!(!waiting.vanished(&proc_root), "its pid is there");
    // The main thread's end read; thread 5's lost; thread 9's fork not read yet.
    assert!(!waiting.thread_exited(1));
    assert!(!waiting.vanished(&proc_root));
    let mut waits: Vec<u32> = waiting.live_threads.iter().copied().collect();
    waits.sort_unstable();
    assert_eq!(waits, [6, 9]);
    for tid in ["6", "9"] {
        std::fs::remove_dir(task.join(tid)).expect("task dir goes");
    }
    assert!(
        waiting.vanished(&proc_root),
        "only the zombie main thread is left"
    );
    // Its main thread's end lost too: gone once its pid is.
    let mut other = process(dir.path());
    std::fs::create_dir_all(proc_root.join("1")).expect("pid dir");
    assert!(!other.vanished(&proc_root));
    std::fs::remove_dir_all(proc_root.join("1")).expect("pid dir goes");
    assert!(other.vanished(&proc_root));
}

/// A process made later (a forked child) converts its rows' times back to the samples'
/// CLOCK_MONOTONIC with the recorder's offset, not with one of its own: two clock reads
/// a preemption apart on a busy machine put its rows after the runtime entries they
/// belong to (the save child's `rt_unmatched:1`).
#[test]
fn far_memory_rows_use_the_recorders_clock_offset() {
    let dir = tempfile::tempdir().expect("tempdir");
    let session = session(dir.path(), Some(dir.path().join("runtime")), 1_234_567);
    let parent = Process::filed_as(1, 1, None, &session).expect("process files");
    std::thread::sleep(std::time::Duration::from_millis(2));
    let child = Process::fork_of(&parent, 2, 2, &session).expect("process files");
    for p in [&parent, &child] {
        assert_eq!(p.far.as_ref().map(|f| f.mono_offset), Some(1_234_567));
    }
}

fn anon(start: u64, end: u64) -> Mapping {
    Mapping {
        start: VirtAddr::new(start),
        end: VirtAddr::new(end),
        pgoff: fltrace_trace::FileOffset::new(start),
        prot: 3,
        flags: 2,
        path: "//anon".to_owned(),
        ..Mapping::default()
    }
}

fn range(p: &Process, addr: u64) -> Option<(u64, u64, u64)> {
    p.mapping_at(VirtAddr::new(addr))
        .map(|m| (m.start.get(), m.end.get(), m.pgoff.get()))
}

/// Complete: the unwinder found no caller, or the outermost frame is in an entry's code
/// (the loader's `_start` followed by argc, which was cut). Everything else is truncated.
#[test]
fn stacks_are_complete_at_a_thread_entry_only() {
    let loader_entry = 0x7f00_0001_ab70;
    let entries = [0x5555_0000_1040, loader_entry];
    let inner = [0x5555_0000_1200, 0x5555_0000_1300];
    let at_loader = [0x7f00_0001_c000, loader_entry + 8];
    use StackEnd::{Complete, Truncated};
    assert_eq!(
        classify(UnwindEnd::Complete, false, &inner, &entries),
        Complete
    );
    assert_eq!(
        classify(UnwindEnd::Stopped, true, &at_loader, &entries),
        Complete
    );
    assert_eq!(
        classify(UnwindEnd::Complete, true, &at_loader, &entries),
        Complete
    );
    // Cut at a word that is no return address, away from an entry.
    assert_eq!(
        classify(UnwindEnd::Complete, true, &inner, &entries),
        Truncated
    );
    assert_eq!(
        classify(UnwindEnd::Stopped, false, &inner, &entries),
        Truncated
    );
    assert_eq!(
        classify(UnwindEnd::Truncated, false, &inner, &entries),
        Truncated
    );
    // Just past the entry code is another function.
    let past = [0x7f00_0001_c000, loader_entry + ENTRY_CODE];
    assert_eq!(
        classify(UnwindEnd::Stopped, false, &past, &entries),
        Truncated
    );
}

fn sample(time_ns: u64, tid: u32, addr: u64) -> FaultSample<'static> {
    FaultSample {
        time_ns,
        tid,
        addr: VirtAddr::new(addr),
        // A write to a missing page, from user mode.
        error_code: 2 | 4,
        regs: (0x40_1000, 0x7fff_0000, 0),
        rbx: None,
        stack: StackBytes::default(),
    }
}

/// The kernel's faults in execve, before the new image's first instruction, carry the old
/// image's registers: they are the entry's, complete. Once the image ran, a kernel fault
/// at an address outside its code is unwound as any other.
#[test]
fn faults_in_execve_are_the_entrys() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut p = process(dir.path());
    p.exec(0);
    let entry = 0x7f00_0001_ab70;
    p.entries.push(entry);
    let mut frames = Vec::new();
    let in_kernel = FaultSample {
        error_code: 2,
        regs: (0x7f99_0000_0ad7, 0x7fff_0000, 0),
        ..sample(1, 1, 0x10_0010)
    };
    p.fault(&in_kernel, &mut frames).expect("recorded");
    assert_eq!(frames, [entry]);
    assert_eq!(p.counters.stacks_truncated, 0);
    p.fault(&sample(2, 1, 0x10_1010), &mut frames)
        .expect("recorded");
    p.fault(&in_kernel, &mut frames).expect("recorded");
    assert_eq!(frames.first(), Some(&0x7f99_0000_0ad7));
    p.finish().expect("finished");
    // Each row's instruction is its stack's first frame.
    let (rows, _) = fltrace_trace::read_faults(&files::faults(dir.path(), 1)).expect("read");
    let ips: Vec<u64> = rows.iter().map(|f| f.ip.get()).collect();
    assert_eq!(ips, [entry, 0x40_1000, 0x7f99_0000_0ad7]);
}

/// A major-fault event marks its thread's newest row on that page, complete in the table
/// (a first touch no more); once that row settled (two checkpoints on), it marks nothing.
#[test]
fn a_major_fault_marks_the_open_row_of_its_thread_and_page() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut p = process(dir.path());
    let mut frames = Vec::new();
    p.fault(&sample(1, 7, 0x10_0010), &mut frames)
        .expect("recorded");
    p.fault(&sample(2, 7, 0x10_0020), &mut frames)
        .expect("recorded");
    p.fault(&sample(3, 8, 0x10_0030), &mut frames)
        .expect("recorded");
    p.fault(&sample(4, 7, 0x20_0000), &mut frames)
        .expect("recorded");
    p.major(7, 0x10_0fff);
    p.checkpoint().expect("checkpoint");
    p.checkpoint().expect("checkpoint");
    // Row 3 settled with the second checkpoint: too late for it.
    p.major(7, 0x20_0000);
    assert_eq!(p.counters.faults_major, 1);
    p.finish().expect("finished");
    let (rows, _) = fltrace_trace::read_faults(&files::faults(dir.path(), 1)).expect("read");
    let flags: Vec<u16> = rows.iter().map(|f| f.flags.0).collect();
    let first_touch = FaultFlags::WRITE | FaultFlags::ZERO;
    assert_eq!(
        flags,
        [
            first_touch,
            FaultFlags::WRITE | FaultFlags::MAJOR,
            first_touch,
            first_touch
        ]
    );
    let times: Vec<(u64, u32, u32)> = rows.iter().map(|f| (f.time_ns, f.pid, f.tid)).collect();
    assert_eq!(times, [(1, 1, 7), (2, 1, 7), (3, 1, 8), (4, 1, 7)]);
}

#[test]
fn mapping_over_or_unmapping_part_of_another_keeps_the_rest_as_the_kernel_does() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut p = process(dir.path());
    let mut elf = ElfCache::default();
    p.map(anon(0x10_0000, 0x10_4000), &mut elf).expect("mapped");
    // MAP_FIXED over its second and third pages: two pieces stay, the right one with the
    // offset of its first page.
    p.map(anon(0x10_1000, 0x10_3000), &mut elf).expect("mapped");
    assert_eq!(
        range(&p, 0x10_0fff),
        Some((0x10_0000, 0x10_1000, 0x10_0000))
    );
    assert_eq!(
        range(&p, 0x10_2000),
        Some((0x10_1000, 0x10_3000, 0x10_1000))
    );
    assert_eq!(
        range(&p, 0x10_3000),
        Some((0x10_3000, 0x10_4000, 0x10_3000))
    );
    // The same page mapped again and again leaves one mapping, and `procmaps` lists the
    // live mappings once each, as the original's copy of /proc/PID/maps.
    for _ in 0..1000 {
        p.map(anon(0x20_0000, 0x20_1000), &mut elf).expect("mapped");
    }
    // Unmapping the middle piece and a page of the last leaves the rest.
    p.unmap(0x10_1000, 0x2000);
    p.unmap(0x20_0000, 0x1000);
    p.unmap(0x10_4000, 0);
    assert_eq!(range(&p, 0x10_1000), None);
    assert_eq!(range(&p, 0x20_0000), None);
    p.map(anon(0x20_0000, 0x20_1000), &mut elf).expect("mapped");
    p.write_stats(0, 0).expect("stats");
    let procmaps = std::fs::read_to_string(files::procmaps(dir.path(), 1)).expect("procmaps");
    assert_eq!(
        procmaps,
        "00100000-00101000 rw-p 00100000 00:00 0\n\
         00103000-00104000 rw-p 00103000 00:00 0\n\
         00200000-00201000 rw-p 00200000 00:00 0\n"
    );
}

#[test]
fn remap_grows_in_place_moves_and_ignores_shrinks() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut p = process(dir.path());
    let mut elf = ElfCache::default();
    p.map(anon(0x10_0000, 0x10_2000), &mut elf).expect("mapped");
    // Grown in place from its second page: the kernel extends the whole mapping.
    let grow = RemapCall {
        old_start: 0x10_1000,
        old_len: 0x1000,
        new_len: 0x2800,
    };
    p.remap(&grow, 0x10_1000, 5, &mut elf).expect("mapped");
    assert_eq!(
        range(&p, 0x10_3fff),
        Some((0x10_0000, 0x10_4000, 0x10_0000))
    );
    // Moved from its second page: a mapping of its own, with that page's file offset.
    let moved = RemapCall {
        old_start: 0x10_1000,
        old_len: 0x1000,
        new_len: 0x3000,
    };
    p.remap(&moved, 0x50_0000, 6, &mut elf).expect("mapped");
    assert_eq!(
        range(&p, 0x50_2fff),
        Some((0x50_0000, 0x50_3000, 0x10_1000))
    );
    // A shrink in place and a call on memory the model does not know add nothing.
    let shrink = RemapCall {
        old_start: 0x50_0000,
        old_len: 0x3000,
        new_len: 0x1000,
    };
    p.remap(&shrink, 0x50_0000, 7, &mut elf).expect("mapped");
    let unknown = RemapCall {
        old_start: 0x90_0000,
        ..moved
    };
    p.remap(&unknown, 0xa0_0000, 8, &mut elf).expect("mapped");
    assert_eq!(
        range(&p, 0x50_2fff),
        Some((0x50_0000, 0x50_3000, 0x10_1000))
    );
    assert_eq!(range(&p, 0xa0_0000), None);
}

/// Only the runtime's fills make first touches and fetches of rows in the managed region: a
/// row the runtime never served (the kernel took that access's fault twice, which it does
/// under load) or only woke (its page already there) filled no page. Before, such rows kept
/// the first-touch flag every missing page's fault starts with: 8,193 first touches for
/// 8,192 pages on a loaded machine.
#[test]
fn far_memory_rows_are_first_touches_only_when_the_runtime_filled_them() {
    use fltrace_runtime_abi::kind;
    let dir = tempfile::tempdir().expect("tempdir");
    let session = session(dir.path(), Some(dir.path().join("runtime")), 0);
    let mut p = Process::filed_as(1, 1, None, &session).expect("process files");
    let mut frames = Vec::new();
    // Thread 7 faults twice on one page, served once; thread 8's page was there when it
    // was served; thread 9 was woken, then its page filled; thread 10's page filled, then
    // it was woken again.
    let rows = [(1, 7, 0x10_0010), (2, 7, 0x10_0020), (4, 8, 0x20_0000)];
    let more = [(6, 9, 0x30_0000), (9, 10, 0x40_0000)];
    for (time, tid, addr) in rows.into_iter().chain(more) {
        p.fault(&sample(time, tid, addr), &mut frames)
            .expect("recorded");
    }
    let entry = |tid: u32, page: u64, kind: u32, read_ns: u64| {
        let handled = crate::runtime::Handled {
            tid,
            page,
            kind,
            read_ns,
            done_ns: read_ns,
        };
        (handled, 0)
    };
    let far = p.far.as_mut().expect("far memory");
    far.unmatched.extend([
        entry(7, 0x10_0000, kind::ZERO, 3),
        entry(8, 0x20_0000, kind::WAKE, 5),
        entry(9, 0x30_0000, kind::WAKE, 7),
        entry(9, 0x30_0000, kind::ZERO, 8),
        entry(10, 0x40_0000, kind::FETCH, 10),
        entry(10, 0x40_0000, kind::WAKE, 11),
    ]);
    p.match_runtime_log(2);
    let far = p.far.as_ref().expect("far memory");
    assert_eq!((far.matched, far.orphans, far.rows_unhandled), (6, 0, 1));
    p.finish().expect("finished");
    let (rows, _) = fltrace_trace::read_faults(&files::faults(dir.path(), 1)).expect("read");
    let flags: Vec<u16> = rows.iter().map(|f| f.flags.0).collect();
    let write = FaultFlags::WRITE;
    assert_eq!(
        flags,
        [
            write,
            write | FaultFlags::ZERO,
            write,
            write | FaultFlags::ZERO,
            write | FaultFlags::FETCH
        ]
    );
}
