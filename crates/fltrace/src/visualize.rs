//! `fltrace visualize`.

use std::io::Write as _;

use anyhow::Context;

use fltrace_render::{FrameLabel, allocation_flames, fault_flames, flamegraph};
use fltrace_trace::{FaultFlags, files};

use crate::cli::{Label, VisualizeArgs};
use crate::load::{Allocs, load_with};

/// The file kind of the flamegraph of faults by allocation stack. Not `flamegraph-alloc`: that
/// name is the original's first-touch flamegraph.
const BY_ALLOCATION: &str = "flamegraph-allocstack";

pub fn run(args: VisualizeArgs) -> anyhow::Result<()> {
    let label = match args.label {
        Label::Line => FrameLabel::Line,
        Label::Function => FrameLabel::Function,
        Label::Both => FrameLabel::Both,
    };
    let first_touch = |flags: FaultFlags| flags.has(FaultFlags::ZERO);
    let loaded = load_with(&args.selection, Allocs::IfRecorded)?;
    if let Some(note) = loaded.tracer_note() {
        eprintln!("fltrace: {note}");
    }
    for ((trace, stacks), alloc_stacks) in loaded.traces.iter().zip(&loaded.alloc_stacks) {
        let has_allocs = loaded.has_allocs(trace.pid);
        if args.by_allocation && !has_allocs {
            anyhow::bail!(
                "--by-allocation needs allocation data: record with `fltrace record --allocs`"
            );
        }
        let first_touches = if args.by_allocation {
            allocation_flames(trace, alloc_stacks, label, first_touch)
        } else {
            fault_flames(trace, stacks, label, first_touch)
        };
        let mut graphs = vec![
            (
                "flamegraph",
                fault_flames(trace, stacks, label, |_| true),
                "Page faults",
            ),
            (
                "flamegraph-alloc",
                first_touches,
                "First-touch (allocation) faults",
            ),
        ];
        if has_allocs {
            let all = allocation_flames(trace, alloc_stacks, label, |_| true);
            graphs.push((BY_ALLOCATION, all, "Page faults by allocation stack"));
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
