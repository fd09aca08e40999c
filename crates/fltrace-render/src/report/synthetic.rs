//! A synthetic recording for the report tests: process 4242 running `synthetic`, with this
//! test binary's own mappings so that its functions stand for the call sites.

use std::collections::HashMap;
use std::path::Path;

use fltrace_analyze::{AllocStacks, FaultsHeld, LoadError, LoadOptions, Loaded};
use fltrace_trace::{
    AllocCall, AllocEvent, AllocWriter, Fault, FaultFlags, FaultWriter, Mapping, MappingWriter,
    Stack, StackWriter, files, keys, parse_procmaps_line,
};

const PID: u32 = 4242;
const START: u64 = 1_000_000_000;
const MS: u64 = 1_000_000;

// Allocation sites: their addresses stand for return addresses into them.
#[inline(never)]
fn leaky_site() -> u64 {
    std::hint::black_box(1)
}

#[inline(never)]
fn temporary_site() -> u64 {
    std::hint::black_box(2)
}

#[inline(never)]
fn mapping_site() -> u64 {
    std::hint::black_box(3)
}

#[inline(never)]
fn toucher() -> u64 {
    std::hint::black_box(4)
}

/// An address inside `f`, so that it and one byte back both symbolize to `f`.
fn inside(f: fn() -> u64) -> u64 {
    f as usize as u64 + 1
}

fn event(ms: u64, call: AllocCall, addr: u64, size: u64, stack_id: u32) -> AllocEvent {
    AllocEvent {
        time_ns: START + ms * MS,
        tid: PID,
        call,
        addr: fltrace_trace::VirtAddr::new(addr),
        size,
        old_addr: fltrace_trace::VirtAddr::new(0),
        detail: if call == AllocCall::Mmap { 0x22 } else { 0 },
        stack_id,
    }
}

/// A recording of process `PID`: this test binary's own mappings (so that the sites
/// symbolize) and, with `allocs`, a leak of 5000 bytes, a temporary 100 bytes, and an
/// 8 KiB anonymous mapping half unmapped again; faults in the leak, the mapping, the
/// unmapped half and nowhere.
pub fn record(dir: &Path, allocs: bool) {
    let metadata = vec![
        (keys::SESSION.to_owned(), format!("{PID}-{START}")),
        (keys::START_NS.to_owned(), START.to_string()),
        (keys::COMMAND.to_owned(), "synthetic".to_owned()),
    ];
    let mut mappings = MappingWriter::create(&files::mmaps(dir, PID)).unwrap();
    let maps = std::fs::read_to_string("/proc/self/maps").unwrap();
    for line in maps.lines() {
        mappings.push(parse_procmaps_line(line).unwrap()).unwrap();
    }
    mappings
        .push(Mapping {
            time_ns: START + 4 * MS,
            start: fltrace_trace::VirtAddr::new(0x2000_0000),
            end: fltrace_trace::VirtAddr::new(0x2000_2000),
            prot: 3,
            flags: 0x22,
            path: "//anon".into(),
            ..Mapping::default()
        })
        .unwrap();
    mappings.finish().unwrap();
    let mut stacks = StackWriter::create(&files::stacks(dir, PID)).unwrap();
    stacks
        .push(Stack {
            end: fltrace_trace::StackEnd::Unknown,
            id: 0,
            generation: 0,
            frames: vec![fltrace_trace::CodeAddr::new(inside(toucher))],
        })
        .unwrap();
    stacks.finish().unwrap();
    let mut faults = FaultWriter::create(&files::faults(dir, PID), &metadata).unwrap();
    let touch = |ms_tenths: u64, addr: u64| Fault {
        time_ns: START + ms_tenths * MS / 10,
        pid: PID,
        tid: PID,
        ip: fltrace_trace::CodeAddr::new(inside(toucher)),
        addr: fltrace_trace::VirtAddr::new(addr),
        flags: FaultFlags(FaultFlags::WRITE),
        stack_id: 0,
    };
    for fault in [
        touch(15, 0x1000_0010),
        touch(16, 0x1000_1000),
        touch(17, 0x1000_1387), // the leak's last byte
        touch(45, 0x2000_0000),
        touch(60, 0x2000_1000), // unmapped from the block at 5 ms
        touch(60, 0x3000_0000),
    ] {
        faults.push(fault).unwrap();
    }
    faults.finish().unwrap();
    if !allocs {
        return;
    }
    let mut stacks = StackWriter::create(&files::alloc_stacks(dir, PID)).unwrap();
    for (id, site) in [leaky_site, temporary_site, mapping_site]
        .into_iter()
        .enumerate()
    {
        stacks
            .push(Stack {
                end: fltrace_trace::StackEnd::Unknown,
                id: id as u32,
                generation: 0,
                frames: vec![fltrace_trace::CodeAddr::new(inside(site))],
            })
            .unwrap();
    }
    stacks.finish().unwrap();
    let mut events = AllocWriter::create(&files::allocs(dir, PID)).unwrap();
    let no_stack = AllocEvent::NO_STACK;
    for event in [
        event(1, AllocCall::Malloc, 0x1000_0000, 5000, 0),
        event(2, AllocCall::Malloc, 0x1000_2000, 100, 1),
        event(3, AllocCall::Free, 0x1000_2000, 0, no_stack),
        event(4, AllocCall::Mmap, 0x2000_0000, 8192, 2),
        event(5, AllocCall::Munmap, 0x2000_1000, 4096, no_stack),
    ] {
        events.push(event).unwrap();
    }
    events.finish().unwrap();
}

/// The recording in `dir`, its allocation stacks and faults loaded as said.
pub fn load(
    dir: &Path,
    alloc_stacks: AllocStacks,
    faults: FaultsHeld,
) -> Result<Loaded, LoadError> {
    let options = LoadOptions {
        allocs_whole: faults == FaultsHeld::All,
        ..LoadOptions::new(dir.to_owned(), Default::default()).holding(faults, alloc_stacks)
    };
    fltrace_analyze::load(&options)
}

/// CSV rows as maps from column to value.
pub fn rows(csv: &str) -> Vec<HashMap<String, String>> {
    let mut lines = csv.lines();
    let header: Vec<&str> = lines.next().unwrap().split(',').collect();
    lines
        .map(|l| {
            header
                .iter()
                .zip(l.split(','))
                .map(|(h, v)| (h.to_string(), v.to_string()))
                .collect()
        })
        .collect()
}
