//! The stacks of the flamegraphs `fltrace visualize` draws: faults by their own call stacks,
//! or by the allocation stack of the block each landed in, their frames labelled.

use fltrace_analyze::{
    FaultOrigin, Lifetimes, Location, ResolvedStacks, TRUNCATED_FRAME, count_faults_by_origin,
    count_faults_by_stack, mapping_label,
};
use fltrace_trace::{FaultFlags, FaultKind, ProcessTrace};

use crate::{FlameStack, Kind};

/// What a flamegraph frame says of its location.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FrameLabel {
    /// `lib|file:line`.
    Line,
    /// `lib|function`.
    Function,
    /// `lib|function|file:line`.
    Both,
}

/// The frame text of `location`: the library, then the function or line or both.
pub fn frame_label(location: &Location, label: FrameLabel) -> String {
    let line = if location.has_line() {
        format!("{}:{}", location.short_file(), location.line)
    } else {
        location.function.to_string()
    };
    match label {
        FrameLabel::Line => format!("{}|{}", location.lib, line),
        FrameLabel::Function => format!("{}|{}", location.lib, location.function),
        FrameLabel::Both => format!("{}|{}|{}", location.lib, location.function, line),
    }
}

fn flame_kind(kind: FaultKind) -> Kind {
    match kind {
        FaultKind::Read => Kind::Read,
        FaultKind::Write => Kind::Write,
        FaultKind::WriteProtect => Kind::WriteProtect,
    }
}

/// The faults of `trace` that `keep` keeps, by their call stacks (outermost frame first),
/// sorted by frames.
pub fn fault_flames(
    trace: &ProcessTrace,
    stacks: &ResolvedStacks,
    label: FrameLabel,
    keep: impl Fn(FaultFlags) -> bool,
) -> Vec<FlameStack> {
    let mut flames: Vec<FlameStack> = count_faults_by_stack(&trace.faults, keep)
        .into_iter()
        .map(|(stack_id, kind, count)| FlameStack {
            frames: stacks
                .truncated(stack_id)
                .then(|| TRUNCATED_FRAME.to_owned())
                .into_iter()
                .chain(
                    stacks
                        .get(stack_id)
                        .iter()
                        .rev()
                        .map(|l| frame_label(l, label)),
                )
                .collect(),
            kind: flame_kind(kind),
            count,
        })
        .collect();
    flames.sort_by(|a, b| a.frames.cmp(&b.frames));
    flames
}

/// Faults drawn on the allocation stack of the block each landed in (outermost frame first),
/// those outside every live block under one `[not allocated] <memory>` frame.
pub fn allocation_flames(
    trace: &ProcessTrace,
    alloc_stacks: &ResolvedStacks,
    label: FrameLabel,
    keep: impl Fn(FaultFlags) -> bool,
) -> Vec<FlameStack> {
    let lifetimes = Lifetimes::of_trace(trace);
    let mut flames: Vec<FlameStack> = count_faults_by_origin(trace, &lifetimes, keep)
        .into_iter()
        .map(|(origin, kind, count)| FlameStack {
            frames: match origin {
                FaultOrigin::Block { stack_id, .. } if alloc_stacks.get(stack_id).is_empty() => {
                    vec!["[unknown allocation stack]".to_owned()]
                }
                FaultOrigin::Block { stack_id, .. } => alloc_stacks
                    .get(stack_id)
                    .iter()
                    .rev()
                    .map(|l| frame_label(l, label))
                    .collect(),
                FaultOrigin::Outside { mapping } => vec![format!(
                    "[not allocated] {}",
                    mapping_label(mapping.and_then(|i| trace.mappings.get(i)))
                )],
            },
            kind: flame_kind(kind),
            count,
        })
        .collect();
    flames.sort_by(|a, b| a.frames.cmp(&b.frames));
    flames
}

/// One flamegraph of a process that `fltrace visualize` draws: the kind in its file name, what
/// it shows and its stacks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProcessFlamegraph {
    /// The file kind: `fltrace-data-<kind>-<pid>.svg`.
    pub kind: &'static str,
    /// What the graph shows, the start of its title.
    pub title: &'static str,
    /// The stacks, sorted by frames.
    pub stacks: Vec<FlameStack>,
}

/// The file kind of the flamegraph of faults by allocation stack. Not `flamegraph-alloc`: that
/// name is the original's first-touch flamegraph.
pub const BY_ALLOCATION: &str = "flamegraph-allocstack";

/// A process's flamegraphs, as the original drew them: all faults (`flamegraph`) and
/// first-touch faults (`flamegraph-alloc`), the latter by the allocation stack of the block
/// each hit when `by_allocation`; with allocations recorded (`alloc_stacks`), all faults by
/// allocation stack too. `by_allocation` without `alloc_stacks` draws by the faults' stacks.
pub fn process_flamegraphs(
    trace: &ProcessTrace,
    stacks: &ResolvedStacks,
    alloc_stacks: Option<&ResolvedStacks>,
    label: FrameLabel,
    by_allocation: bool,
) -> Vec<ProcessFlamegraph> {
    let first_touch = |flags: FaultFlags| flags.has(FaultFlags::ZERO);
    let first_touches = match alloc_stacks {
        Some(alloc_stacks) if by_allocation => {
            allocation_flames(trace, alloc_stacks, label, first_touch)
        }
        _ => fault_flames(trace, stacks, label, first_touch),
    };
    let mut graphs = vec![
        ProcessFlamegraph {
            kind: "flamegraph",
            title: "Page faults",
            stacks: fault_flames(trace, stacks, label, |_| true),
        },
        ProcessFlamegraph {
            kind: "flamegraph-alloc",
            title: "First-touch (allocation) faults",
            stacks: first_touches,
        },
    ];
    if let Some(alloc_stacks) = alloc_stacks {
        graphs.push(ProcessFlamegraph {
            kind: BY_ALLOCATION,
            title: "Page faults by allocation stack",
            stacks: allocation_flames(trace, alloc_stacks, label, |_| true),
        });
    }
    graphs
}

#[cfg(test)]
mod tests {
    use fltrace_trace::{AllocCall, AllocEvent, Fault, Mapping};

    use super::*;
    use fltrace_trace::{CodeAddr, VirtAddr};

    fn loc(function: &str, file: &str, line: u32) -> Location {
        Location {
            function: function.into(),
            file: file.into(),
            line,
            lib: "a.out".into(),
            system: false,
        }
    }

    fn fault(addr: u64, flags: u8, stack_id: u32) -> Fault {
        Fault {
            time_ns: 20,
            pid: 1,
            tid: 1,
            ip: CodeAddr::new(0),
            addr: VirtAddr::new(addr),
            flags: FaultFlags(flags),
            stack_id,
        }
    }

    /// Stack 0 (`main` calling `fill`) writes three fresh pages, stack 1 reads one; a block of
    /// 8 KiB from `alloc` holds two of the writes, the others land in the heap outside it.
    fn trace() -> ProcessTrace {
        ProcessTrace {
            pid: 1,
            faults: vec![
                fault(0x1000, FaultFlags::WRITE | FaultFlags::ZERO, 0),
                fault(0x2000, FaultFlags::WRITE | FaultFlags::ZERO, 0),
                fault(0x5000, FaultFlags::WRITE | FaultFlags::ZERO, 0),
                fault(0x6000, 0, 1),
            ],
            stacks: Vec::new(),
            mappings: vec![Mapping {
                start: VirtAddr::new(0),
                end: VirtAddr::new(0x10000),
                path: "[heap]".into(),
                ..Mapping::default()
            }],
            metadata: Vec::new(),
            allocs: vec![AllocEvent {
                time_ns: 10,
                tid: 1,
                call: AllocCall::Malloc,
                addr: VirtAddr::new(0x1000),
                size: 8192,
                old_addr: VirtAddr::new(0),
                detail: 0,
                stack_id: 0,
            }],
            alloc_stacks: Vec::new(),
        }
    }

    #[test]
    fn labels_say_line_function_or_both() {
        let with_line = loc("fill", "/src/a.c", 12);
        let without = loc("fill", "", 0);
        assert_eq!(frame_label(&with_line, FrameLabel::Line), "a.out|a.c:12");
        assert_eq!(frame_label(&with_line, FrameLabel::Function), "a.out|fill");
        assert_eq!(
            frame_label(&with_line, FrameLabel::Both),
            "a.out|fill|a.c:12"
        );
        assert_eq!(frame_label(&without, FrameLabel::Line), "a.out|fill");
    }

    #[test]
    fn faults_by_stack_outermost_first() {
        let mut stacks = ResolvedStacks::default();
        stacks.insert(
            0,
            vec![loc("fill", "a.c", 5), loc("main", "a.c", 9)],
            [0x10, 0x90].map(CodeAddr::new).to_vec(),
        );
        stacks.insert(
            1,
            vec![loc("scan", "a.c", 7)],
            [0x70].map(CodeAddr::new).to_vec(),
        );
        let got: Vec<(Vec<String>, Kind, u64)> =
            fault_flames(&trace(), &stacks, FrameLabel::Function, |_| true)
                .into_iter()
                .map(|f| (f.frames, f.kind, f.count))
                .collect();
        let frames = |names: &[&str]| names.iter().map(|n| n.to_string()).collect::<Vec<_>>();
        assert_eq!(
            got,
            vec![
                (frames(&["a.out|main", "a.out|fill"]), Kind::Write, 3),
                (frames(&["a.out|scan"]), Kind::Read, 1),
            ]
        );
        let first_touches = fault_flames(&trace(), &stacks, FrameLabel::Function, |f| {
            f.has(FaultFlags::ZERO)
        });
        assert_eq!(first_touches.len(), 1);
        assert_eq!(first_touches[0].count, 3);
    }

    /// A truncated stack stands on one `[truncated]` frame, never as a root of its own.
    #[test]
    fn truncated_stacks_stand_on_one_frame() {
        let mut stacks = ResolvedStacks::default();
        stacks.insert(
            0,
            vec![loc("fill", "a.c", 5), loc("level2", "a.c", 9)],
            [0x10, 0x90].map(CodeAddr::new).to_vec(),
        );
        stacks.mark_truncated(0);
        stacks.insert(
            1,
            vec![loc("scan", "a.c", 7)],
            [0x70].map(CodeAddr::new).to_vec(),
        );
        stacks.mark_truncated(1);
        let roots: Vec<(Vec<String>, u64)> =
            fault_flames(&trace(), &stacks, FrameLabel::Function, |_| true)
                .into_iter()
                .map(|f| (f.frames, f.count))
                .collect();
        let frames = |names: &[&str]| names.iter().map(|n| n.to_string()).collect::<Vec<_>>();
        assert_eq!(
            roots,
            vec![
                (frames(&["[truncated]", "a.out|level2", "a.out|fill"]), 3),
                (frames(&["[truncated]", "a.out|scan"]), 1),
            ]
        );
    }

    #[test]
    fn faults_by_allocation_stack() {
        let mut alloc_stacks = ResolvedStacks::default();
        alloc_stacks.insert(
            0,
            vec![loc("alloc", "a.c", 3)],
            [0x30].map(CodeAddr::new).to_vec(),
        );
        let flames = allocation_flames(&trace(), &alloc_stacks, FrameLabel::Line, |_| true);
        // The write and the read outside the block are one frame each, of their own kind.
        let outside: Vec<(Kind, u64)> = flames
            .iter()
            .filter(|f| f.frames == ["[not allocated] [heap]"])
            .map(|f| (f.kind, f.count))
            .collect();
        assert_eq!(outside.len(), 2, "{outside:?}");
        assert!(outside.contains(&(Kind::Write, 1)) && outside.contains(&(Kind::Read, 1)));
        let in_block: Vec<(Kind, u64)> = flames
            .iter()
            .filter(|f| f.frames == ["a.out|a.c:3"])
            .map(|f| (f.kind, f.count))
            .collect();
        assert_eq!(in_block, vec![(Kind::Write, 2)]);
        assert_eq!(flames.len(), 3);
    }

    /// Two graphs without allocations; with them a third, and `by_allocation` draws the
    /// first touches by allocation stack (the block's two and the one outside it).
    #[test]
    fn a_process_gets_the_original_graphs_and_one_by_allocation() {
        let mut stacks = ResolvedStacks::default();
        stacks.insert(0, vec![loc("fill", "a.c", 5)], vec![CodeAddr::new(0x10)]);
        stacks.insert(1, vec![loc("scan", "a.c", 7)], vec![CodeAddr::new(0x70)]);
        let mut alloc_stacks = ResolvedStacks::default();
        alloc_stacks.insert(0, vec![loc("alloc", "a.c", 3)], vec![CodeAddr::new(0x30)]);
        let kinds =
            |graphs: &[ProcessFlamegraph]| graphs.iter().map(|g| g.kind).collect::<Vec<_>>();
        let total = |g: &ProcessFlamegraph| g.stacks.iter().map(|s| s.count).sum::<u64>();

        let plain = process_flamegraphs(&trace(), &stacks, None, FrameLabel::Line, false);
        assert_eq!(kinds(&plain), ["flamegraph", "flamegraph-alloc"]);
        assert_eq!((total(&plain[0]), total(&plain[1])), (4, 3));
        // Asked for by allocation without allocations: by the faults' own stacks.
        assert_eq!(
            process_flamegraphs(&trace(), &stacks, None, FrameLabel::Line, true),
            plain
        );

        let graphs = process_flamegraphs(
            &trace(),
            &stacks,
            Some(&alloc_stacks),
            FrameLabel::Line,
            true,
        );
        assert_eq!(
            kinds(&graphs),
            ["flamegraph", "flamegraph-alloc", BY_ALLOCATION]
        );
        let first_touch = |f: FaultFlags| f.has(FaultFlags::ZERO);
        assert_eq!(
            graphs[1].stacks,
            allocation_flames(&trace(), &alloc_stacks, FrameLabel::Line, first_touch)
        );
        assert_eq!(total(&graphs[2]), 4);
    }
}
