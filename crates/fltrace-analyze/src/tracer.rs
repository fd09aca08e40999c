//! Keeping fltrace's own work in the traced process out of the program's picture.

use std::sync::Arc;

use rustc_hash::FxHashSet;

use fltrace_trace::{FaultFlags, ProcessTrace, libraries};

use crate::symbolize::ResolvedStack;
use crate::{FaultCounts, Location, ResolvedStacks};

/// Separates the faults the recorder flagged as the tracer's own ([`FaultFlags::TRACER`]) from
/// the program's: leaves them out of `trace` unless `include`, and returns how many there
/// are. In the program's stacks, the preloaded library's frames between the program and the
/// C library (its interposers forwarding `malloc`...) are removed from locations and
/// addresses alike; a run of them at the innermost end stays (far memory's own allocator
/// touching the program's memory). In the tracer's stacks its frames are the code of
/// interest, so they count as the call site rather than the program's line below them.
pub fn separate_tracer(
    trace: &mut ProcessTrace,
    stacks: &mut ResolvedStacks,
    include: bool,
) -> u64 {
    let mut counts = FaultCounts::of(&trace.faults);
    let left_out = separate_tracer_counts(&mut counts, stacks, include);
    if !include {
        trace.faults.retain(|f| !f.flags.has(FaultFlags::TRACER));
    }
    left_out
}

/// [`separate_tracer`] over faults counted per stack ([`FaultCounts`]): the same faults left
/// out and counted, the same stacks rewritten.
pub fn separate_tracer_counts(
    counts: &mut FaultCounts,
    stacks: &mut ResolvedStacks,
    include: bool,
) -> u64 {
    let mut tracer_stacks = FxHashSet::default();
    let mut program_stacks = FxHashSet::default();
    let mut tracer_faults = 0;
    for (stack_id, flags, tally) in counts.iter() {
        if flags.has(FaultFlags::TRACER) {
            tracer_stacks.insert(stack_id);
            tracer_faults += tally.count;
        } else {
            program_stacks.insert(stack_id);
        }
    }
    if !include {
        counts.retain(|_, flags| !flags.has(FaultFlags::TRACER));
    }
    rewrite_stacks(stacks, &tracer_stacks, &program_stacks);
    tracer_faults
}

/// Drops the preloaded library's frames from the program's stacks and makes them the call
/// site in the tracer's.
fn rewrite_stacks(
    stacks: &mut ResolvedStacks,
    tracer_stacks: &FxHashSet<u32>,
    program_stacks: &FxHashSet<u32>,
) {
    stacks.rewrite(|id, stack| {
        if !stack
            .locations
            .iter()
            .any(|l| libraries::is_preload(&l.lib))
        {
            return;
        }
        if program_stacks.contains(&id) {
            drop_inner_preload_frames(stack);
        } else if tracer_stacks.contains(&id) {
            stack.locations = tracer_owned(&stack.locations);
            stack.exact = stack.exact.as_deref().map(tracer_owned);
        }
    });
}

/// `locations` with the preloaded library's frames no longer system code: the call sites of
/// the tracer's own faults.
fn tracer_owned(locations: &[Location]) -> Arc<[Location]> {
    locations
        .iter()
        .map(|l| {
            let mut l = l.clone();
            if libraries::is_preload(&l.lib) {
                l.system = false;
            }
            l
        })
        .collect()
}

/// Removes the preloaded library's frames (each address with the locations it expanded to),
/// except a run of them at the innermost end.
fn drop_inner_preload_frames(stack: &mut ResolvedStack) {
    let mut slices = Vec::with_capacity(stack.addresses.len());
    let mut next = 0;
    for &(depth, _) in stack.frames.iter() {
        let end = (next + depth as usize).min(stack.locations.len());
        slices.push(next..end);
        next = end;
    }
    let in_preload: Vec<bool> = slices
        .iter()
        .map(|r| {
            stack.locations[r.clone()]
                .iter()
                .any(|l| libraries::is_preload(&l.lib))
        })
        .collect();
    let leading = in_preload.iter().take_while(|p| **p).count();
    let mut locations = Vec::with_capacity(stack.locations.len());
    let mut exact = stack.exact.as_ref().map(|e| Vec::with_capacity(e.len()));
    let mut addresses = Vec::with_capacity(stack.addresses.len());
    let mut frames = Vec::with_capacity(stack.frames.len());
    for (i, slice) in slices.into_iter().enumerate() {
        if i < leading || !in_preload[i] {
            if let (Some(kept), Some(all)) = (exact.as_mut(), stack.exact.as_deref()) {
                kept.extend_from_slice(&all[slice.clone()]);
            }
            locations.extend_from_slice(&stack.locations[slice]);
            addresses.push(stack.addresses[i]);
            frames.push(stack.frames[i]);
        }
    }
    stack.exact = exact.map(Into::into);
    stack.locations = locations.into();
    stack.addresses = addresses.into();
    stack.frames = frames.into();
}

#[cfg(test)]
mod tests {
    use super::*;
    use fltrace_trace::{CodeAddr, VirtAddr};

    use fltrace_trace::{Fault, Mapping, Stack};

    use crate::{Location, call_site};

    fn loc(function: &str, lib: &str, line: u32) -> Location {
        Location {
            function: function.into(),
            file: if line > 0 { "x.c".into() } else { "".into() },
            line,
            lib: lib.into(),
            system: lib != "prog",
        }
    }

    /// The tracer's faults are left out and counted; the program's stacks lose the
    /// interposer between the program and libc's malloc; the tracer's keep their frames and
    /// are attributed to them.
    #[test]
    fn leaves_out_the_tracer() {
        const PRELOAD: &str = "libfltrace_preload.so";
        let fault = |stack_id, flags| Fault {
            time_ns: 0,
            pid: 1,
            tid: 1,
            ip: CodeAddr::new(0),
            addr: VirtAddr::new(0),
            flags: FaultFlags(flags),
            stack_id,
        };
        let mapping = |start, end, path: &str| Mapping {
            start: VirtAddr::new(start),
            end: VirtAddr::new(end),
            path: path.into(),
            ..Mapping::default()
        };
        let stack = |id, frames: Vec<u64>| Stack {
            end: fltrace_trace::StackEnd::Unknown,
            id,
            generation: 0,
            frames: frames.into_iter().map(CodeAddr::new).collect(),
        };
        let mut trace = ProcessTrace {
            pid: 1,
            faults: vec![fault(0, 1), fault(0, 1), fault(1, 1 | FaultFlags::TRACER)],
            stacks: vec![
                stack(0, vec![0x1010, 0x2010, 0x3010]),
                stack(1, vec![0x2020, 0x2030, 0x3010]),
            ],
            mappings: vec![
                mapping(0x1000, 0x2000, "/lib/libc.so.6"),
                mapping(0x2000, 0x3000, "/x/libfltrace_preload.so"),
                mapping(0x3000, 0x4000, "/x/prog"),
            ],
            metadata: Vec::new(),
            allocs: Vec::new(),
            alloc_stacks: Vec::new(),
        };
        let mut stacks = ResolvedStacks::default();
        let program = vec![
            loc("_int_malloc", "libc.so.6", 0),
            loc("malloc", PRELOAD, 94),
            loc("main", "prog", 0),
        ];
        stacks.insert(
            0,
            program,
            [0x1010, 0x2010, 0x3010].map(CodeAddr::new).to_vec(),
        );
        let tracer = vec![
            loc("unwind", PRELOAD, 10),
            loc("malloc", PRELOAD, 94),
            loc("main", "prog", 0),
        ];
        stacks.insert(
            1,
            tracer,
            [0x2020, 0x2030, 0x3010].map(CodeAddr::new).to_vec(),
        );
        let mut included = (trace.clone(), stacks.clone());
        let mut counted = (FaultCounts::of(&trace.faults), stacks.clone());
        let mut counted_included = (FaultCounts::of(&trace.faults), stacks.clone());
        assert_eq!(separate_tracer(&mut trace, &mut stacks, false), 1);
        assert_eq!(trace.faults.len(), 2);
        let functions: Vec<&str> = stacks.get(0).iter().map(|l| &*l.function).collect();
        assert_eq!(functions, ["_int_malloc", "main"]);
        assert_eq!(
            stacks.addresses(0).as_deref(),
            Some(&[0x1010, 0x3010].map(CodeAddr::new)[..])
        );

        assert_eq!(
            separate_tracer_counts(&mut counted.0, &mut counted.1, false),
            1
        );
        assert_eq!(counted.0.total(), 2);
        assert_eq!(counted.1.addresses(0), stacks.addresses(0));
        assert_eq!(counted.1.get(0), stacks.get(0));
        assert_eq!(
            separate_tracer_counts(&mut counted_included.0, &mut counted_included.1, true),
            1
        );
        assert_eq!(counted_included.0.total(), 3);
        let site = call_site(counted_included.1.get(1)).map(|l| &*l.function);
        assert_eq!(site, Some("unwind"));

        assert_eq!(separate_tracer(&mut included.0, &mut included.1, true), 1);
        assert_eq!(included.0.faults.len(), 3);
        let site = call_site(included.1.get(1)).map(|l| &*l.function);
        assert_eq!(site, Some("unwind"));
    }
}
