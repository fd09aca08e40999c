//! `fltrace visualize`.

use anyhow::Context;

use fltrace_analyze::{
    FaultOrigin, Lifetimes, Location, ResolvedStacks, count_faults_by_origin,
    count_faults_by_stack, mapping_label,
};
use fltrace_render::{FlameStack, Kind, flamegraph};
use fltrace_trace::{FaultFlags, FaultKind, ProcessTrace, files};
use std::io::Write as _;

use crate::cli::{Label, VisualizeArgs};
use crate::load::{Allocs, load_with};

/// The file kind of the flamegraph of faults by allocation stack. Not `flamegraph-alloc`: that
/// name is the original's first-touch flamegraph.
const BY_ALLOCATION: &str = "flamegraph-allocstack";

pub fn run(args: VisualizeArgs) -> anyhow::Result<()> {
    let loaded = load_with(&args.selection, Allocs::IfRecorded)?;
    if let Some(note) = loaded.tracer_note() {
        eprintln!("fltrace: {note}");
    }
    for ((trace, stacks), alloc_stacks) in loaded.traces.iter().zip(&loaded.alloc_stacks) {
        let all = flame_stacks(trace, stacks, args.label, |_| true);
        let first_touch = if args.by_allocation {
            if !loaded.has_allocs(trace.pid) {
                anyhow::bail!(
                    "--by-allocation needs allocation data: record with `fltrace record --allocs`"
                );
            }
            by_allocation(trace, alloc_stacks, args.label, |f| f.has(FaultFlags::ZERO))
        } else {
            flame_stacks(trace, stacks, args.label, |f| f.has(FaultFlags::ZERO))
        };
        let mut graphs = vec![
            ("flamegraph", all, "Page faults"),
            (
                "flamegraph-alloc",
                first_touch,
                "First-touch (allocation) faults",
            ),
        ];
        if loaded.has_allocs(trace.pid) {
            graphs.push((
                BY_ALLOCATION,
                by_allocation(trace, alloc_stacks, args.label, |_| true),
                "Page faults by allocation stack",
            ));
        }
        for (kind, flames, title) in graphs {
            let path = files::path(loaded.dir(), kind, trace.pid, "svg");
            if flames.is_empty() {
                eprintln!("fltrace: no faults for {}, skipped", path.display());
                continue;
            }
            let file = files::create(&path)?;
            let title = format!("{title} of {} (pid {})", loaded.command(), trace.pid);
            flamegraph(&flames, &title, std::io::BufWriter::new(file))
                .with_context(|| format!("writing {}", path.display()))?;
            // Written, not printed: an error (a closed pipe) ends the command quietly.
            writeln!(std::io::stdout(), "{}", path.display())?;
        }
    }
    Ok(())
}

fn label(location: &Location, label: Label) -> String {
    let line = if location.has_line() {
        format!("{}:{}", location.short_file(), location.line)
    } else {
        location.function.to_string()
    };
    match label {
        Label::Line => format!("{}|{}", location.lib, line),
        Label::Function => format!("{}|{}", location.lib, location.function),
        Label::Both => format!("{}|{}|{}", location.lib, location.function, line),
    }
}

fn flame_kind(kind: FaultKind) -> Kind {
    match kind {
        FaultKind::Read => Kind::Read,
        FaultKind::Write => Kind::Write,
        FaultKind::WriteProtect => Kind::WriteProtect,
    }
}

/// Faults drawn on the allocation stack of the block each landed in (outermost frame first),
/// those outside every live block under one `[not allocated] <memory>` frame.
fn by_allocation(
    trace: &ProcessTrace,
    alloc_stacks: &ResolvedStacks,
    how: Label,
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
                    .map(|l| label(l, how))
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

fn flame_stacks(
    trace: &ProcessTrace,
    stacks: &ResolvedStacks,
    how: Label,
    keep: impl Fn(FaultFlags) -> bool,
) -> Vec<FlameStack> {
    let mut flames: Vec<FlameStack> = count_faults_by_stack(&trace.faults, keep)
        .into_iter()
        .map(|(stack_id, kind, count)| FlameStack {
            frames: stacks
                .get(stack_id)
                .iter()
                .rev()
                .map(|l| label(l, how))
                .collect(),
            kind: flame_kind(kind),
            count,
        })
        .collect();
    flames.sort_by(|a, b| a.frames.cmp(&b.frames));
    flames
}
