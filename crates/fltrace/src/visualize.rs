//! `fltrace visualize`.

use anyhow::Context;

use fltrace_analyze::{Location, ResolvedStacks};
use fltrace_render::{FlameStack, Kind, flamegraph};
use fltrace_trace::{FaultFlags, FaultKind, ProcessTrace, files};
use std::collections::HashMap;

use crate::cli::{Label, VisualizeArgs};
use crate::load::load;

pub fn run(args: VisualizeArgs) -> anyhow::Result<()> {
    let loaded = load(&args.selection)?;
    for (trace, stacks) in &loaded.traces {
        let all = flame_stacks(trace, stacks, args.label, |_| true);
        let first_touch = flame_stacks(trace, stacks, args.label, |f| f.has(FaultFlags::ZERO));
        for (kind, flames, title) in [
            ("flamegraph", all, "Page faults"),
            (
                "flamegraph-alloc",
                first_touch,
                "First-touch (allocation) faults",
            ),
        ] {
            let path = files::path(loaded.dir(), kind, trace.pid, "svg");
            if flames.is_empty() {
                eprintln!("fltrace: no faults for {}, skipped", path.display());
                continue;
            }
            let file = files::create(&path)?;
            let title = format!("{title} of {} (pid {})", loaded.command(), trace.pid);
            flamegraph(&flames, &title, std::io::BufWriter::new(file))
                .with_context(|| format!("writing {}", path.display()))?;
            println!("{}", path.display());
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

fn flame_stacks(
    trace: &ProcessTrace,
    stacks: &ResolvedStacks,
    how: Label,
    keep: impl Fn(FaultFlags) -> bool,
) -> Vec<FlameStack> {
    let mut counts: HashMap<(u32, FaultKind), u64> = HashMap::new();
    for fault in trace.faults.iter().filter(|f| keep(f.flags)) {
        *counts
            .entry((fault.stack_id, fault.flags.kind()))
            .or_default() += 1;
    }
    let mut flames: Vec<FlameStack> = counts
        .into_iter()
        .map(|((stack_id, kind), count)| FlameStack {
            frames: stacks
                .get(stack_id)
                .iter()
                .rev()
                .map(|l| label(l, how))
                .collect(),
            kind: match kind {
                FaultKind::Read => Kind::Read,
                FaultKind::Write => Kind::Write,
                FaultKind::WriteProtect => Kind::WriteProtect,
            },
            count,
        })
        .collect();
    flames.sort_by(|a, b| a.frames.cmp(&b.frames));
    flames
}
