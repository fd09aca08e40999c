//! `fltrace visualize`.

use std::io::Write as _;

use anyhow::{Context, bail};

use fltrace_analyze::{AllocStacks, FaultsHeld, OpenedRecording, alloc_processes, recording_line};
use fltrace_render::{
    FlamegraphFile, FrameLabel, process_flamegraph_files, recording_flamegraph_file,
};

use crate::cli::{Label, VisualizeArgs};
use crate::load::load;

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
    // Written, not printed: an error (a closed pipe) ends the command quietly.
    let write = |file: &FlamegraphFile| -> anyhow::Result<()> {
        file.write()?;
        writeln!(std::io::stdout(), "{}", file.path.display())?;
        Ok(())
    };
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
        let files = process_flamegraph_files(
            (trace, stacks, counts),
            allocs,
            label,
            args.by_allocation,
            loaded.command(),
            &dir,
        );
        for file in files {
            match file {
                Ok(file) => write(&file)?,
                Err(path) => eprintln!("fltrace: no faults for {}, skipped", path.display()),
            }
        }
    }
    if let Some(file) = recording_flamegraph_file(&loaded, label, &dir) {
        write(&file)?;
    }
    Ok(())
}
