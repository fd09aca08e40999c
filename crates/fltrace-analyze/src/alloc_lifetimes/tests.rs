//! The pairing, the totals and the fault attribution on small event lists, and the one pass
//! against the whole-table oracle.

use fltrace_trace::{AllocCall, AllocEvent, CodeAddr, Fault, FaultFlags, VirtAddr};

use super::*;

const MAP_PRIVATE_ANON: u64 = 0x22;

fn ev(time_ns: u64, tid: u32, call: AllocCall, addr: u64, size: u64) -> AllocEvent {
    AllocEvent {
        time_ns,
        tid,
        call,
        addr: VirtAddr::new(addr),
        size,
        old_addr: VirtAddr::NULL,
        detail: 0,
        stack_id: time_ns as u32,
    }
}

fn malloc(t: u64, addr: u64, size: u64) -> AllocEvent {
    ev(t, 1, AllocCall::Malloc, addr, size)
}

fn free(t: u64, addr: u64) -> AllocEvent {
    AllocEvent {
        stack_id: AllocEvent::NO_STACK,
        ..ev(t, 1, AllocCall::Free, addr, 0)
    }
}

fn realloc(t: u64, old: u64, addr: u64, size: u64) -> AllocEvent {
    AllocEvent {
        old_addr: VirtAddr::new(old),
        ..ev(t, 1, AllocCall::Realloc, addr, size)
    }
}

fn mmap(t: u64, addr: u64, size: u64, flags: u64) -> AllocEvent {
    AllocEvent {
        detail: 3 << 32 | flags,
        ..ev(t, 1, AllocCall::Mmap, addr, size)
    }
}

fn fault(time_ns: u64, addr: u64) -> Fault {
    Fault {
        time_ns,
        pid: 1,
        tid: 1,
        ip: CodeAddr::new(0),
        addr: VirtAddr::new(addr),
        flags: FaultFlags(FaultFlags::WRITE),
        stack_id: 0,
    }
}

/// (addr, size, start, end, remnant) of every block.
fn spans(l: &Lifetimes) -> Vec<(u64, u64, u64, Option<u64>, bool)> {
    l.blocks
        .iter()
        .map(|b| (b.addr.get(), b.size, b.start_ns, b.end_ns, b.remnant))
        .collect()
}

fn stats(events: &[AllocEvent], end: u64, age: u64) -> AllocStats {
    AllocStats::new(events, &Lifetimes::new(events, &[]), end, age)
}

/// A realloc chain: each step frees the previous block and is a new allocation of its
/// own stack; a failed realloc leaves the block alive; realloc(p, 0) only frees.
#[test]
fn realloc_chains() {
    let events = [
        malloc(10, 0x1000, 16),
        realloc(20, 0x1000, 0x1000, 32), // in place
        realloc(30, 0x1000, 0x2000, 64), // moved
        realloc(40, 0x2000, 0, 1 << 40), // failed: 0x2000 stays
        realloc(50, 0x2000, 0, 0),       // a free
        realloc(60, 0, 0x3000, 8),       // a malloc
    ];
    let l = Lifetimes::new(&events, &[]);
    assert_eq!(
        spans(&l),
        vec![
            (0x1000, 16, 10, Some(20), false),
            (0x1000, 32, 20, Some(30), false),
            (0x2000, 64, 30, Some(50), false),
            (0x3000, 8, 60, None, false),
        ]
    );
    assert_eq!(l.failed, vec![3]);
    assert_eq!((l.unknown_frees, l.overlaps), (0, 0));
    // Each realloc freed the last allocation before allocating: temporaries; so did
    // realloc(p, 0) at 50, since the failed call at 40 is no allocation (heaptrack never
    // sees it).
    let temporary: Vec<bool> = l.blocks.iter().map(|b| b.temporary).collect();
    assert_eq!(temporary, vec![true, true, true, false]);
    let s = AllocStats::new(&events, &l, 100, 0);
    assert_eq!(s.stacks[&20].1.allocs, 1);
    assert_eq!(s.stacks[&40].1.failed, 1);
    let heap = s.total(BlockKind::Heap);
    assert_eq!((heap.allocs, heap.bytes, heap.failed), (4, 120, 1));
    assert_eq!((heap.leaked_allocs, heap.leaked_bytes), (1, 8));
    assert_eq!((s.peak_ns, s.peak_bytes), (30, 64));
}

/// A leak is what is alive at the end; the age filter hides young blocks; frees of
/// unknown addresses and free(NULL) change nothing.
#[test]
fn leaks_and_age() {
    let events = [
        malloc(1_000_000, 0x1000, 100),
        malloc(2_000_000, 0x2000, 200),
        free(3_000_000, 0x9999),
        free(3_500_000, 0),
        malloc(9_000_000, 0x3000, 300),
    ];
    let s = stats(&events, 10_000_000, 0);
    let leaked = s.total(BlockKind::Heap);
    assert_eq!((leaked.leaked_allocs, leaked.leaked_bytes), (3, 600));
    assert_eq!(s.unknown_frees, 1);
    // At least 8 ms old at the end (10 ms): the one from 9 ms is hidden, the one from
    // 2 ms (exactly 8 ms old) is kept.
    let s = stats(&events, 10_000_000, 8_000_000);
    let leaked = s.total(BlockKind::Heap);
    assert_eq!((leaked.leaked_allocs, leaked.leaked_bytes), (2, 300));
    assert_eq!(s.stacks[&2_000_000].1.leaked_bytes, 200);
    assert_eq!(s.stacks[&9_000_000].1.leaked_bytes, 0);
}

/// Aligned calls make blocks of the size asked for at the address returned; a failed one
/// makes none.
#[test]
fn aligned_allocs() {
    let aligned = |t, call, addr, size| AllocEvent {
        detail: 4096,
        ..ev(t, 1, call, addr, size)
    };
    let events = [
        aligned(1, AllocCall::PosixMemalign, 0x10000, 100),
        aligned(2, AllocCall::AlignedAlloc, 0x20000, 4096),
        aligned(3, AllocCall::Memalign, 0, 1 << 50),
        ev(4, 1, AllocCall::Valloc, 0x30000, 10),
        ev(5, 1, AllocCall::Pvalloc, 0x40000, 4096),
        ev(6, 1, AllocCall::Calloc, 0x50000, 24),
        ev(7, 1, AllocCall::UsableSize, 0x50000, 32),
        free(8, 0x20000),
    ];
    let l = Lifetimes::new(&events, &[]);
    assert_eq!(
        spans(&l),
        vec![
            (0x10000, 100, 1, None, false),
            (0x20000, 4096, 2, Some(8), false),
            (0x30000, 10, 4, None, false),
            (0x40000, 4096, 5, None, false),
            (0x50000, 24, 6, None, false),
        ]
    );
    assert_eq!(l.failed, vec![2]);
    assert!(l.blocks.iter().all(|b| b.kind == BlockKind::Heap));
    let s = stats(&events, 10, 0);
    let hist: Vec<(usize, u64, u64)> = s.heap_sizes.buckets().collect();
    // 10 in [8,16), 24 in [16,32), 100 in [64,128), twice 4096 in [4096,8192).
    assert_eq!(
        hist,
        vec![(4, 1, 10), (5, 1, 24), (7, 1, 100), (13, 2, 8192)]
    );
    assert_eq!(SizeHistogram::range(13), (4096, 8191));
    assert_eq!(
        (SizeHistogram::bucket(0), SizeHistogram::range(0)),
        (0, (0, 0))
    );
}

/// An anonymous mapping is a page-rounded block; munmap of its middle leaves two remnants
/// that still count as one allocation; a file mapping is no block but replaces one.
#[test]
fn mmap_and_partial_munmap() {
    let events = [
        mmap(10, 0x10000, 5 * 4096 - 100, MAP_PRIVATE_ANON),
        ev(20, 1, AllocCall::Munmap, 0x11000, 4096),
        mmap(25, 0x40000, 4096, 0x01), // a shared file mapping
        ev(30, 1, AllocCall::Munmap, 0x13000, 2 * 4096), // the tail
        mmap(40, 0x50000, 2 * 4096, MAP_PRIVATE_ANON),
        mmap(45, 0x51000, 4096, 0x12), // MAP_FIXED file mapping over its second page
        mmap(50, 0, 4096, MAP_PRIVATE_ANON), // failed
    ];
    let l = Lifetimes::new(&events, &[]);
    assert_eq!(
        spans(&l),
        vec![
            (0x10000, 5 * 4096, 10, Some(20), false),
            (0x10000, 4096, 20, None, true),
            (0x12000, 3 * 4096, 20, Some(30), true),
            (0x12000, 4096, 30, None, true),
            (0x50000, 2 * 4096, 40, Some(45), false),
            (0x50000, 4096, 45, None, true),
        ]
    );
    assert!(l.blocks.iter().all(|b| b.kind == BlockKind::Mapping));
    assert_eq!(l.failed, vec![6]);
    let s = stats(&events, 100, 0);
    let m = s.total(BlockKind::Mapping);
    assert_eq!((m.allocs, m.bytes, m.failed), (2, 7 * 4096, 1));
    assert_eq!((m.leaked_allocs, m.leaked_bytes), (2, 3 * 4096));
    assert_eq!(s.peak_bytes, 0);
}

/// mremap moves a mapping block; brk growth is a block, shrinking cuts it.
#[test]
fn mremap_and_brk() {
    let events = [
        mmap(10, 0x10000, 4096, MAP_PRIVATE_ANON),
        AllocEvent {
            old_addr: VirtAddr::new(0x10000),
            ..ev(20, 1, AllocCall::Mremap, 0x80000, 3 * 4096)
        },
        AllocEvent {
            old_addr: VirtAddr::new(0x100000),
            ..ev(30, 1, AllocCall::Sbrk, 0x102000, 0x2000)
        },
        AllocEvent {
            old_addr: VirtAddr::new(0x102000),
            ..ev(40, 1, AllocCall::Brk, 0x101000, 0)
        },
    ];
    let l = Lifetimes::new(&events, &[]);
    assert_eq!(
        spans(&l),
        vec![
            (0x10000, 4096, 10, Some(20), false),
            (0x80000, 3 * 4096, 20, None, false),
            (0x100000, 0x2000, 30, Some(40), false),
            (0x100000, 0x1000, 40, None, true),
        ]
    );
    assert_eq!(l.blocks[1].stack_id, 20);
}

/// Temporaries as heaptrack counts them: a free whose block has the last allocation's size
/// and stack, with no free between, in whichever thread; the freed block need not be the
/// last one made.
#[test]
fn temporaries_by_heaptracks_rule() {
    let at = |tid, stack_id, e: AllocEvent| AllocEvent { tid, stack_id, ..e };
    let events = [
        at(1, 7, malloc(1, 0x1000, 10)), // freed by thread 2 at once: temporary
        at(2, 0, free(2, 0x1000)),
        at(1, 7, malloc(3, 0x2000, 10)), // same size and stack as the next: temporary
        at(1, 7, malloc(4, 0x3000, 10)), // a free came between: not temporary
        at(1, 0, free(5, 0x2000)),
        at(1, 0, free(6, 0x3000)),
        at(1, 8, malloc(7, 0x4000, 10)), // another stack was last: not temporary
        at(1, 9, malloc(8, 0x5000, 10)), // freed after an unknown free: temporary
        at(1, 0, free(9, 0x9000)),
        at(1, 0, free(10, 0x5000)),
        at(1, 0, free(11, 0x4000)),
        at(1, 9, malloc(12, 0x6000, 20)), // another size was last: not temporary
        at(1, 9, malloc(13, 0x7000, 30)),
        at(1, 9, malloc(14, 0, 1 << 40)), // failed: not an allocation
        at(1, 0, free(15, 0x6000)),
        at(1, 0, free(16, 0x7000)), // not temporary: a free came between
        at(1, 9, malloc(17, 0x8000, 40)), // alive at the end
    ];
    let l = Lifetimes::new(&events, &[]);
    let temporary: Vec<bool> = l.blocks.iter().map(|b| b.temporary).collect();
    assert_eq!(
        temporary,
        vec![true, true, false, false, true, false, false, false]
    );
    assert_eq!(l.unknown_frees, 1);
    let s = AllocStats::new(&events, &l, 100, 0);
    assert_eq!(s.stacks[&7].1.temporary, 2);
    assert_eq!(s.stacks[&9].1.temporary, 1);
    assert_eq!(s.total(BlockKind::Heap).temporary, 3);
    assert_pass_matches(&events, &[], &[]);
}

/// A free entered after a malloc in another thread that got the same memory: the new
/// block ends the old one, and the late free is the old block's, not the new one's.
#[test]
fn free_racing_malloc() {
    let events = [
        malloc(1, 0x1000, 64),
        AllocEvent {
            tid: 2,
            ..malloc(5, 0x1000, 32)
        },
        free(6, 0x1000), // thread 1 freeing the first block
        AllocEvent {
            tid: 2,
            ..free(9, 0x1000)
        },
    ];
    let l = Lifetimes::new(&events, &[]);
    assert_eq!(
        spans(&l),
        vec![
            (0x1000, 64, 1, Some(5), false),
            (0x1000, 32, 5, Some(9), false),
        ]
    );
    assert_eq!((l.overlaps, l.unknown_frees), (1, 0));
}

/// The peak is the most heap alive after the calls of one nanosecond, and the per-stack
/// bytes at the peak add up to it; mappings do not count.
#[test]
fn peak() {
    let events = [
        malloc(10, 0x1000, 100),
        malloc(20, 0x2000, 200),
        mmap(25, 0x100000, 1 << 20, MAP_PRIVATE_ANON),
        malloc(30, 0x3000, 300), // 600 alive...
        free(30, 0x1000),        // ...but not after 30 ns: 500
        free(40, 0x2000),        // 300
        malloc(50, 0x4000, 250), // 550: the peak
        malloc(60, 0x5000, 10),
        free(60, 0x3000), // 260
    ];
    let s = stats(&events, 100, 0);
    assert_eq!((s.peak_ns, s.peak_bytes), (50, 550));
    let at_peak: Vec<(u32, u64, u64)> = s
        .stacks
        .iter()
        .filter(|(_, (_, t))| t.peak_bytes > 0)
        .map(|(&id, (_, t))| (id, t.peak_bytes, t.peak_allocs))
        .collect();
    assert_eq!(at_peak, vec![(30, 300, 1), (50, 250, 1)]);
    assert_eq!(s.total(BlockKind::Heap).peak_bytes, 550);
}

/// glibc's bookkeeping written inside malloc counts for the block it returns: the chunk
/// header below it and the size of the remainder past its chunk, also when the call's
/// recorded time comes after the fault; other bytes around it do not.
#[test]
fn chunk_headers_count_for_their_block() {
    let events = [malloc(10, 0x2010, 4096)];
    let l = Lifetimes::new(&events, &[]);
    let faults = [
        fault(11, 0x2008), // its size field
        fault(11, 0x3018), // the remainder's size field: 0x2010 + 4112 - 8
        fault(11, 0x3010), // one past, not bookkeeping
        fault(9, 0x3018),  // the remainder's size, before the call's recorded time
        fault(9, 0x2010),  // the block itself before its allocation
    ];
    assert_eq!(
        attribute_faults(&l, &faults),
        vec![Some(0), Some(0), None, Some(0), None]
    );
}

/// Faults land in the block alive at their time holding their address: at the first and
/// last byte, not one past; not before the allocation or from the free on; heap blocks
/// before the mapping around them.
#[test]
fn attribution() {
    let events = [
        mmap(10, 0x10000, 0x10000, MAP_PRIVATE_ANON), // block 0
        malloc(20, 0x10100, 0x100),                   // block 1, inside the mapping
        malloc(30, 0x1000, 64),                       // block 2
        free(40, 0x1000),
        malloc(50, 0x1000, 32),                        // block 3, same address
        ev(60, 1, AllocCall::Munmap, 0x18000, 0x8000), // block 0 ends, remnant 4
    ];
    let l = Lifetimes::new(&events, &[]);
    assert_eq!(l.blocks.len(), 5);
    let faults = [
        fault(29, 0x1000),  // before block 2
        fault(30, 0x1000),  // block 2, at its allocation's nanosecond
        fault(39, 0x103f),  // its last byte
        fault(39, 0x1040),  // one past
        fault(40, 0x1000),  // freed
        fault(55, 0x101f),  // block 3
        fault(55, 0x1020),  // past block 3
        fault(20, 0x10100), // the heap block
        fault(20, 0x100ff), // the mapping around it
        fault(70, 0x17fff), // the remnant
        fault(70, 0x18000), // unmapped
        fault(59, 0x18000), // before the munmap
    ];
    let hits = attribute_faults(&l, &faults);
    assert_eq!(
        hits,
        vec![
            None,
            Some(2),
            Some(2),
            None,
            None,
            Some(3),
            None,
            Some(1),
            Some(0),
            Some(4),
            None,
            Some(0),
        ]
    );
}

/// An exec ends every block: faults after it at old addresses hit nothing and the blocks
/// are no leaks.
#[test]
fn exec_ends_blocks() {
    let events = [malloc(10, 0x1000, 64), malloc(30, 0x2000, 64)];
    let l = Lifetimes::new(&events, &[20]);
    assert_eq!(l.blocks[0].end_ns, Some(20));
    assert_eq!(l.blocks[1].end_ns, None);
    let hits = attribute_faults(&l, &[fault(15, 0x1000), fault(25, 0x1000)]);
    assert_eq!(hits, vec![Some(0), None]);
    let mapping = |generation, time_ns| Mapping {
        generation,
        time_ns,
        ..Mapping::default()
    };
    let mappings = [
        mapping(0, 0),
        mapping(1, 50),
        mapping(1, 40),
        mapping(2, 90),
    ];
    assert_eq!(exec_times(&mappings), vec![40, 90]);
}

/// Events out of time order are paired in time order.
#[test]
fn unsorted_events() {
    let events = [free(20, 0x1000), malloc(10, 0x1000, 8)];
    let l = Lifetimes::new(&events, &[]);
    assert_eq!(spans(&l), vec![(0x1000, 8, 10, Some(20), false)]);
    assert_eq!(l.blocks[0].event, 1);
    assert_eq!(trace_end_ns(&events, &[fault(30, 0)]), 30);
}

/// The one pass against the whole-table path, on `events` (in time order) and `faults`:
/// the same totals at every leak age and the same block for every fault.
fn assert_pass_matches(events: &[AllocEvent], faults: &[Fault], execs: &[u64]) {
    let lifetimes = Lifetimes::new(events, execs);
    let hits = attribute_faults(&lifetimes, faults);
    let mut pass = AllocPass::new(execs);
    pass.keep_largest(7);
    let mut sorted: Vec<&Fault> = faults.iter().collect();
    sorted.sort_by_key(|f| f.time_ns);
    let mut next = sorted.into_iter().peekable();
    let mut got: Vec<(Fault, Option<BlockHit>)> = Vec::new();
    for event in events {
        while let Some(f) = next.next_if(|f| f.time_ns < event.time_ns) {
            pass.fault(f, true).unwrap();
        }
        pass.event(event).unwrap();
        got.extend(pass.take_attributed());
    }
    for f in next {
        pass.fault(f, false).unwrap();
    }
    let (totals, rest) = pass.finish();
    got.extend(rest);
    let largest: Vec<LargeBlock> = crate::largest_blocks(&lifetimes, 7)
        .into_iter()
        .map(LargeBlock::from)
        .collect();
    assert_eq!(totals.largest, largest);
    let end = trace_end_ns(events, faults);
    for age in [0, 1, 5, 1000] {
        let whole = AllocStats::new(events, &lifetimes, end, age);
        let streamed = totals.stats(end, age);
        assert_eq!(format!("{streamed:?}"), format!("{whole:?}"), "age {age}");
    }
    let mut expected: Vec<(u64, u64, Option<BlockHit>)> = faults
        .iter()
        .zip(&hits)
        .map(|(f, hit)| {
            let b = hit.map(|b| &lifetimes.blocks[b as usize]);
            (
                f.time_ns,
                f.addr.get(),
                b.map(|b| BlockHit {
                    stack_id: b.stack_id,
                    kind: b.kind,
                }),
            )
        })
        .collect();
    let mut streamed: Vec<(u64, u64, Option<BlockHit>)> = got
        .iter()
        .map(|(f, hit)| (f.time_ns, f.addr.get(), *hit))
        .collect();
    expected.sort_unstable_by_key(|&(t, a, h)| (t, a, h.map(|h| h.stack_id)));
    streamed.sort_unstable_by_key(|&(t, a, h)| (t, a, h.map(|h| h.stack_id)));
    assert_eq!(streamed, expected);
}

/// The one pass gives what the whole-table path gives, on random calls of every kind
/// from four threads over a small address range (overlaps, unknown frees, cuts, execs)
/// and random faults, chunk headers of blocks born later among them; every other round
/// without faults.
#[test]
fn one_pass_matches_whole_table() {
    let mut seed = 0x2545_f491_4f6c_dd1du64;
    let mut next = move |n: u64| {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed % n
    };
    for round in 0..40 {
        let mut events = Vec::new();
        let mut faults = Vec::new();
        let mut time = 1;
        for _ in 0..400 {
            time += next(3);
            let addr = 0x10000 + next(64) * 0x100;
            let tid = next(4) as u32;
            let stack = next(6) as u32;
            let e = match next(10) {
                // Now and then a block larger than the heap index's bitmaps take.
                0..=3 => {
                    let size = if next(8) == 0 {
                        next(10_000)
                    } else {
                        next(600)
                    };
                    ev(time, tid, AllocCall::Malloc, addr, size)
                }
                4..=5 => free(time, addr),
                6 => realloc(time, addr, addr + 0x100 * next(2), next(400)),
                7 => mmap(
                    time,
                    0x10000 + next(16) * 4096,
                    next(3) * 4096 + 1,
                    MAP_PRIVATE_ANON,
                ),
                8 => ev(
                    time,
                    tid,
                    AllocCall::Munmap,
                    0x10000 + next(16) * 4096,
                    4096,
                ),
                _ => ev(time, tid, AllocCall::Malloc, 0, 10),
            };
            events.push(AllocEvent {
                tid,
                stack_id: stack,
                ..e
            });
            for _ in 0..next(3) {
                let at = time.saturating_sub(next(4)) + next(4);
                faults.push(fault(at, 0x10000 + next(0x4000) - 16));
            }
        }
        let execs = if round % 4 == 0 {
            vec![time / 2]
        } else {
            Vec::new()
        };
        // Without faults, as at record time, the pass never orders its heap blocks.
        if round % 2 == 1 {
            faults.clear();
        }
        assert_pass_matches(&events, &faults, &execs);
    }
}

/// The size the sweep must handle in seconds: `cargo test --release -p fltrace-analyze
/// -- --ignored --nocapture at_scale`.
#[test]
#[ignore = "a timing run, for release builds"]
fn at_scale() {
    // 4M blocks over 8M events: a million live at a time, on 8 threads.
    let mut events = Vec::with_capacity(8_000_000);
    let addr = |i: u64| 0x1000_0000 + (i % 1_000_000) * 64;
    for i in 0..4_000_000u64 {
        if i >= 1_000_000 {
            events.push(AllocEvent {
                tid: (i % 8) as u32,
                ..free(2 * i, addr(i))
            });
        }
        events.push(AllocEvent {
            tid: (i % 8) as u32,
            stack_id: (i % 1000) as u32,
            ..malloc(2 * i + 1, addr(i), 48)
        });
    }
    let faults: Vec<Fault> = (0..10_000_000u64)
        .map(|i| fault(i * 4 / 5, 0x1000_0000 + (i * 7919) % 64_000_000))
        .collect();
    let started = std::time::Instant::now();
    let lifetimes = Lifetimes::new(&events, &[]);
    let paired = started.elapsed();
    let stats = AllocStats::new(&events, &lifetimes, 10_000_000, 0);
    let counted = started.elapsed() - paired;
    let hits = attribute_faults(&lifetimes, &faults);
    let all = started.elapsed();
    let attributed = hits.iter().filter(|h| h.is_some()).count();
    eprintln!(
        "{} blocks paired in {paired:?}, totals in {counted:?}; {attributed} of {} faults \
         attributed; {all:?} in all",
        lifetimes.blocks.len(),
        faults.len()
    );
    assert_eq!(stats.total(BlockKind::Heap).allocs, 4_000_000);
    assert!(all.as_secs() < 10);
}

/// Events taken a batch at a time ([`AllocPass::events`], as at record time: no faults, no
/// largest blocks) give what the whole-table path and the pass one event at a time give, on
/// random calls where most blocks are temporaries (freed by the next call, at its time or a
/// later one; some empty), with large blocks kept alive (the index's ordered part), blocks
/// overlapping live ones (frees to ignore), blocks freed twice, mappings of the same stacks
/// and execs at an event's time. Most temporaries are counted together.
#[test]
fn batched_temporaries_match_the_whole_table() {
    let mut seed = 0x9e37_79b9_7f4a_7c15u64;
    let mut next = move |n: u64| {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed % n
    };
    let (mut pairs, mut fused) = (0, 0);
    for round in 0..60 {
        let mut events = Vec::new();
        let mut time = 1;
        while events.len() < 600 {
            time += next(2);
            let addr = 0x10000 + next(256) * 0x40;
            let stack = next(5) as u32;
            let size = match next(20) {
                0 => 0,
                1 => next(9000),
                _ => next(200),
            };
            let call =
                [AllocCall::Malloc, AllocCall::Calloc, AllocCall::Memalign][next(3) as usize];
            match next(10) {
                0..=5 => {
                    events.push(AllocEvent {
                        stack_id: stack,
                        ..ev(time, 1, call, addr, size)
                    });
                    // Now and then the free comes a tick later (a peak between them).
                    time += u64::from(next(6) == 0);
                    events.push(free(time, addr));
                    pairs += 1;
                }
                6 => events.push(AllocEvent {
                    stack_id: stack,
                    ..ev(time, 1, call, addr, size)
                }),
                7 => events.push(free(time, addr)),
                // A large block far from the others, mostly kept.
                8 => events.push(AllocEvent {
                    stack_id: stack,
                    ..ev(
                        time,
                        1,
                        call,
                        0x100_0000 + next(4) * 0x10000,
                        5000 + next(5000),
                    )
                }),
                _ => events.push(AllocEvent {
                    stack_id: stack,
                    ..mmap(time, 0x10000 + next(4) * 4096, 4096, MAP_PRIVATE_ANON)
                }),
            }
        }
        let execs = if round % 5 == 0 {
            vec![events[events.len() / 2].time_ns]
        } else {
            Vec::new()
        };
        let lifetimes = Lifetimes::new(&events, &execs);
        let mut one = AllocPass::new(&execs);
        for e in &events {
            one.event(e).unwrap();
        }
        let mut batched = AllocPass::new(&execs);
        let mut rest = &events[..];
        while !rest.is_empty() {
            let (batch, after) = rest.split_at((1 + next(40) as usize).min(rest.len()));
            batched.events(batch).unwrap();
            rest = after;
        }
        fused += batched.temporaries_fused;
        let end = trace_end_ns(&events, &[]);
        let (one, _) = one.finish();
        let (batched, _) = batched.finish();
        for age in [0, 3, 1000] {
            let whole = format!("{:?}", AllocStats::new(&events, &lifetimes, end, age));
            assert_eq!(
                format!("{:?}", batched.stats(end, age)),
                whole,
                "round {round}"
            );
            assert_eq!(format!("{:?}", one.stats(end, age)), whole, "round {round}");
        }
        assert_eq!(
            batched.summary(&execs),
            one.summary(&execs),
            "round {round}"
        );
    }
    assert!(
        fused * 2 > pairs,
        "{fused} of {pairs} pairs counted together"
    );
}
