use super::*;

use std::sync::{Arc, Mutex};

use fltrace_trace::VirtAddr;

use address_space::AddressSpace;
use alloc_tables::LiveOut;
use live_allocs::BlockTable;

fn event(call: AllocCall, addr: u64, size: u64, old_addr: u64, stack_id: u32) -> AllocEvent {
    AllocEvent {
        time_ns: 10,
        tid: 1,
        call,
        addr: VirtAddr::new(addr),
        size,
        old_addr: VirtAddr::new(old_addr),
        detail: 0,
        stack_id,
    }
}

/// A live view is told of the calls settled, in time order, and of one read late (its
/// thread was inside it for long) at the time of the last told, so that it pairs them.
#[test]
fn a_live_view_is_told_of_settled_calls_in_time_order() {
    let told = Arc::new(Mutex::new(Vec::new()));
    let sink: LiveAllocSink = {
        let told = told.clone();
        Arc::new(move |allocs: crate::live::LiveAllocs| told.lock().expect("lock").push(allocs))
    };
    let mut live = LiveOut::new(sink, 7);
    let at = |time_ns, addr| AllocEvent {
        time_ns,
        ..event(AllocCall::Malloc, addr, 8, 0, 0)
    };
    live.events = vec![at(30, 3), at(10, 1), at(50, 5)];
    live.lost = 2;
    live.tell(Some(30));
    live.events.extend([at(20, 2), at(60, 6)]);
    live.tell(None);
    let told = told.lock().expect("lock");
    let times = |i: usize| -> Vec<(u64, u64)> {
        told[i]
            .events
            .iter()
            .map(|e| (e.time_ns, e.addr.get()))
            .collect()
    };
    assert_eq!(told.len(), 2);
    assert_eq!((told[0].pid, told[0].dropped), (7, 2));
    assert_eq!(times(0), [(10, 1), (30, 3)]);
    assert_eq!(times(1), [(30, 2), (50, 5), (60, 6)]);
}

#[test]
fn executable_mappings_are_covered_and_read_again_when_an_address_is_outside() {
    let maps = "1000-3000 r-xp 00000000 00:00 0 \n\
                5000-6000 rw-p 00000000 00:00 0 \n\
                7000-8000 r-xp 00000000 00:00 0 [vdso]\n";
    let space = AddressSpace::of(std::process::id() as i32, maps);
    assert!(space.covers(0x1000) && space.covers(0x2fff) && space.covers(0x7800));
    assert!(!space.covers(0xfff) && !space.covers(0x3000) && !space.covers(0x5800));
    // A sleeping child's maps hold its code, which the empty ones do not. Not our own
    // maps: tests running beside this one map new code into this process.
    let mut child = SleepingChild::start();
    let code = child.code_address();
    let mut space = AddressSpace::of(child.pid(), "");
    assert!(!space.covers(code));
    assert!(space.refresh(code));
    assert!(space.covers(code));
    // Read again with nothing new: no rebuild, and the address is not asked about again.
    assert!(!space.refresh(8));
    assert!(space.strays.contains(&8));
    child.stop();
}

/// `sleep`, killed and reaped when dropped.
struct SleepingChild(std::process::Child);

impl SleepingChild {
    fn start() -> SleepingChild {
        let child = std::process::Command::new("sleep")
            .arg("60")
            .spawn()
            .expect("sleep starts");
        SleepingChild(child)
    }

    fn pid(&self) -> i32 {
        self.0.id() as i32
    }

    /// The start of the executable mapping of `sleep` itself, once it has exec'ed, loaded
    /// its libraries and gone to sleep (so that its code mappings no longer change).
    fn code_address(&self) -> u64 {
        for _ in 0..500 {
            std::thread::sleep(std::time::Duration::from_millis(10));
            let stat = std::fs::read_to_string(format!("/proc/{}/stat", self.pid()))
                .expect("the child's stat");
            let asleep = stat.rsplit(") ").next().is_some_and(|s| s.starts_with('S'));
            let maps = std::fs::read_to_string(format!("/proc/{}/maps", self.pid()))
                .expect("the child's maps");
            if !asleep || !maps.contains("libc") {
                continue;
            }
            let code = maps.lines().find(|line| {
                let fields: Vec<&str> = line.split_whitespace().collect();
                fields.len() >= 6 && fields[1] == "r-xp" && fields[5].ends_with("/sleep")
            });
            if let Some(line) = code {
                let start = line.split('-').next().expect("a range");
                return u64::from_str_radix(start, 16).expect("a hex address");
            }
        }
        panic!("sleep never showed its code in /proc/PID/maps");
    }

    fn stop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

impl Drop for SleepingChild {
    fn drop(&mut self) {
        self.stop();
    }
}

#[test]
fn blocks_follow_malloc_realloc_and_free() {
    let mut table = BlockTable::default();
    table.apply(&event(AllocCall::Malloc, 0x1000, 16, 0, 0));
    table.apply(&event(AllocCall::Calloc, 0x2000, 32, 0, 1));
    table.apply(&event(AllocCall::Realloc, 0x3000, 64, 0x1000, 2));
    table.apply(&event(AllocCall::Free, 0x2000, 0, 0, AllocEvent::NO_STACK));
    // A free of a block allocated before the probes is not counted.
    table.apply(&event(AllocCall::Free, 0x9000, 0, 0, AllocEvent::NO_STACK));
    // A failed allocation leaves nothing.
    table.apply(&event(AllocCall::Malloc, 0, 8, 0, 0));
    assert_eq!(table.allocs, 3);
    assert_eq!(table.frees, 2);
    assert_eq!(table.blocks.len(), 1);
    let block = &table.blocks[&VirtAddr::new(0x3000)];
    assert_eq!((block.size, block.stack_id), (64, 2));
    // A failed realloc leaves the old block live.
    table.apply(&event(AllocCall::Realloc, 0, 1 << 40, 0x3000, 3));
    assert_eq!(table.blocks.len(), 1);
    assert_eq!(table.blocks[&VirtAddr::new(0x3000)].size, 64);
}

#[test]
fn totals_by_stack_follow_blocks_and_sizes_outside_the_range_are_not_kept() {
    let mut table = BlockTable {
        sizes: 16..=64,
        ..BlockTable::default()
    };
    table.apply(&event(AllocCall::Malloc, 0x1000, 16, 0, 0));
    table.apply(&event(AllocCall::Malloc, 0x2000, 64, 0, 0));
    table.apply(&event(AllocCall::Malloc, 0x3000, 65, 0, 0));
    table.apply(&event(AllocCall::Malloc, 0x4000, 15, 0, 1));
    assert_eq!((table.allocs, table.blocks.len()), (2, 2));
    assert_eq!(table.combined[&0], (80, 2));
    table.apply(&event(AllocCall::Free, 0x1000, 0, 0, AllocEvent::NO_STACK));
    // The same address again without its free seen: the old block is replaced, not freed.
    table.apply(&event(AllocCall::Malloc, 0x2000, 32, 0, 1));
    assert_eq!(table.frees, 1);
    assert_eq!(table.combined[&0], (0, 0));
    assert_eq!(table.combined[&1], (32, 1));
}

/// An exec takes the blocks its process's threads allocated before it (counted as replaced,
/// neither freed nor leaked) and leaves the new image's blocks already read, another
/// process's blocks, and the totals of what is left.
#[test]
fn an_exec_takes_the_blocks_of_its_threads_made_before_it() {
    let mut table = BlockTable::default();
    let by = |tid, time_ns, addr, size, stack| AllocEvent {
        tid,
        time_ns,
        ..event(AllocCall::Malloc, addr, size, 0, stack)
    };
    table.apply(&by(10, 10, 0x1000, 16, 0));
    table.apply(&by(11, 20, 0x2000, 32, 0));
    table.apply(&by(20, 30, 0x3000, 64, 0));
    table.apply(&by(20, 40, 0x4000, 8, 1));
    // The new image's first block, read before the exec was.
    table.apply(&by(10, 600, 0x5000, 128, 2));
    table.replace_image(&[10, 11], 500);
    assert_eq!((table.replaced, table.frees, table.allocs), (2, 0, 5));
    let mut left: Vec<u64> = table.blocks.keys().map(|a| a.get()).collect();
    left.sort_unstable();
    assert_eq!(left, [0x3000, 0x4000, 0x5000]);
    assert_eq!(table.combined[&0], (64, 1));
    assert_eq!(table.combined[&1], (8, 1));
    assert_eq!(table.combined[&2], (128, 1));
}

/// The reader tells the sink of an exec with every thread seen in that process, at the
/// exec's time on the sink's clock, and forgets their calls in flight made before it; a
/// call of the new image and another process's threads and calls stay.
#[test]
fn an_exec_is_told_with_every_thread_of_its_process() {
    #[derive(Default)]
    struct Told(Vec<(Vec<u32>, u64)>);
    impl AllocSink for Told {
        fn stack(&mut self, _: &[u64]) -> Result<u32, crate::Error> {
            Ok(0)
        }
        fn push(&mut self, _: AllocEvent) -> Result<(), crate::Error> {
            Ok(())
        }
        fn exec(&mut self, tids: &[u32], time_ns: u64) {
            self.0.push((tids.to_vec(), time_ns));
        }
    }
    let pending = |index, time_ns| probes::Pending {
        index,
        time_ns,
        args: [0; 3],
        stack_id: 0,
    };
    let mut tasks = std::collections::HashMap::from([(10, 10), (11, 10), (20, 20)]);
    let mut calls = std::collections::HashMap::from([
        (10, pending(0, 2000)),
        (11, pending(0, 1200)),
        (20, pending(1, 1300)),
    ]);
    let mut told = Told::default();
    let exec = probes::Exec { pid: 10, time: 500 };
    probes::replace_image(&mut tasks, &mut calls, &mut told, exec, 1000);
    assert_eq!(told.0, [(vec![10, 11], 1500)]);
    let mut in_flight: Vec<u32> = calls.keys().copied().collect();
    in_flight.sort_unstable();
    assert_eq!(in_flight, [10, 20]);
}
