//! `fltrace visualize`.

use std::io::Write as _;

use anyhow::Context;

use fltrace_analyze::{AllocStacks, FaultsHeld, OpenedRecording, recording_line};
use fltrace_render::{alloc_chart_files, flamegraph_files};

use crate::cli::VisualizeArgs;
use crate::load::load;

pub fn run(args: VisualizeArgs, opened: &OpenedRecording) -> anyhow::Result<()> {
    // Faults counted per stack, allocations paired in one pass: memory follows the distinct
    // stacks and the blocks alive at once, not the faults or calls.
    let options = args.selection.load_options()?;
    let allocs = if args.allocs {
        AllocStacks::Required
    } else {
        AllocStacks::IfRecorded
    };
    let mut options = options.holding(FaultsHeld::Counted, allocs);
    // The charts draw no fault: the totals the recorder paired serve them.
    options.allocs_from_record = args.allocs;
    let loaded = load(&options, Some(&opened.named))?;
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
    // Written, not printed: an error (a closed pipe) ends the command quietly.
    let mut stdout = std::io::stdout();
    if args.allocs {
        let without = alloc_chart_files(&loaded, args.label, args.format, &dir, |file| {
            match file {
                Ok(file) => {
                    file.write()?;
                    writeln!(stdout, "{}", file.path.display())?;
                }
                Err(path) => eprintln!("fltrace: nothing to draw for {}, skipped", path.display()),
            }
            anyhow::Ok(())
        })?;
        for pid in without {
            eprintln!("fltrace: process {pid} was recorded without allocations, left out");
        }
        return Ok(());
    }
    flamegraph_files(&loaded, args.label, args.by_allocation, &dir, |file| {
        match file {
            Ok(file) => {
                file.write()?;
                writeln!(stdout, "{}", file.path.display())?;
            }
            Err(path) => eprintln!("fltrace: no faults for {}, skipped", path.display()),
        }
        anyhow::Ok(())
    })?;
    Ok(())
}
