//! `fltrace visualize`.

use std::io::Write as _;

use anyhow::{Context, bail};

use fltrace_analyze::{AllocStacks, FaultsHeld, OpenedRecording, alloc_processes, recording_line};
use fltrace_render::{FrameLabel, flamegraph, process_flamegraphs, recording_flames};
use fltrace_trace::files;

use crate::cli::{Label, VisualizeArgs};
use crate::load::load;

/// The characters of the command a flamegraph's title shows.
const COMMAND_IN_TITLE: usize = 60;

/// `command` cut to [`COMMAND_IN_TITLE`] characters, `…` where it was cut.
fn title_command(command: &str) -> String {
    match command.char_indices().nth(COMMAND_IN_TITLE) {
        Some((cut, _)) => format!("{}…", &command[..cut]),
        None => command.to_owned(),
    }
}

pub fn run(args: VisualizeArgs, opened: &OpenedRecording) -> anyhow::Result<()> {
    let label = match args.label {
        Label::Line => FrameLabel::Line,
        Label::Function => FrameLabel::Function,
        Label::Both => FrameLabel::Both,
    };
    // Faults counted per stack, allocations paired in one pass: memory follows the distinct
    // stacks and the blocks alive at once, not the faults or calls.
    let options = args.selection.load_options()?;
    let loaded = load(
        &options.holding(FaultsHeld::Counted, AllocStacks::IfRecorded),
        Some(&opened.named),
    )?;
    eprintln!(
        "fltrace: {}",
        recording_line(&loaded.recording, &opened.named)
    );
    let dir = match &args.output {
        Some(dir) => {
            std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
            dir.clone()
        }
        None => {
            if opened.outputs.moved {
                eprintln!(
                    "fltrace: {} is read-only: the flamegraphs go into the current directory",
                    opened.named.display()
                );
            }
            opened.outputs.dir.clone()
        }
    };
    if let Some(note) = loaded.tracer_note() {
        eprintln!("fltrace: {note}");
    }
    let (processes, _) = alloc_processes(&loaded, 0);
    for (((trace, stacks), alloc_stacks), counts) in loaded
        .traces
        .iter()
        .zip(&loaded.alloc_stacks)
        .zip(&loaded.counts)
    {
        let allocs = processes
            .iter()
            .find(|p| p.trace.pid == trace.pid)
            .map(|p| (alloc_stacks, &p.origins));
        if args.by_allocation && allocs.is_none() {
            bail!("--by-allocation needs allocation data: record with `fltrace record --allocs`");
        }
        let graphs = process_flamegraphs(trace, stacks, counts, allocs, label, args.by_allocation);
        for graph in graphs {
            let path = files::path(&dir, graph.kind, trace.pid, "svg");
            if graph.flames.stacks.is_empty() {
                eprintln!("fltrace: no faults for {}, skipped", path.display());
                continue;
            }
            // Each process under its own name (`cc1plus` under `g++`), the command after it,
            // cut to what the title's line holds (a centred line overflows both edges).
            let command = title_command(loaded.command());
            let title = format!(
                "{} of {} (pid {}) in `{command}`",
                graph.title,
                fltrace_analyze::process_names(trace).join(" then "),
                trace.pid,
            );
            files::write_with(&path, |out| {
                flamegraph(&graph.flames.stacks, &graph.flames.notes, &title, out)
            })?;
            // Written, not printed: an error (a closed pipe) ends the command quietly.
            writeln!(std::io::stdout(), "{}", path.display())?;
        }
    }
    // Several processes (`g++` and its `cc1plus`, `as`, `ld`): also one graph of them all,
    // rooted by their names, named after the first process.
    if let [(first, _), _, ..] = &loaded.traces[..] {
        let sources: Vec<_> = loaded
            .traces
            .iter()
            .zip(&loaded.counts)
            .map(|((t, s), c)| (t, s, c))
            .collect();
        let flames = recording_flames(&sources, label);
        let path = files::path(&dir, ALL_PROCESSES, first.pid, "svg");
        let title = format!(
            "Page faults of {} processes in `{}`",
            sources.len(),
            title_command(loaded.command())
        );
        files::write_with(&path, |out| {
            flamegraph(&flames.stacks, &flames.notes, &title, out)
        })?;
        writeln!(std::io::stdout(), "{}", path.display())?;
    }
    Ok(())
}

/// The file kind of the flamegraph of every process of a recording.
const ALL_PROCESSES: &str = "flamegraph-processes";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_commands_are_cut_in_titles() {
        assert_eq!(title_command("faults nested 100"), "faults nested 100");
        let long = "é".repeat(70);
        assert_eq!(title_command(&long), format!("{}…", "é".repeat(60)));
        assert_eq!(title_command(&"x".repeat(60)), "x".repeat(60));
    }
}
