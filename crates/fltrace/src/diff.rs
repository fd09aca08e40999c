//! `fltrace diff A B`: faults per call site (or thread) in two recordings, largest change
//! first, each side read with the same filters.

use std::io::Write;
use std::path::Path;

use anyhow::Context;

use fltrace_analyze::{
    AllocStacks, DiffBy, FaultsHeld, Loaded, diff_groups, diff_thread_groups, group_fault_counts,
    group_faults_by_thread, take_top,
};
use fltrace_render::report::{diff, faults};

use crate::cli::DiffArgs;
use crate::load::load;

pub fn run(args: DiffArgs) -> anyhow::Result<()> {
    let out = diff(&args)?;
    let mut stdout = std::io::stdout().lock();
    stdout.write_all(out.as_bytes())?;
    stdout.flush()?;
    Ok(())
}

fn diff(args: &DiffArgs) -> anyhow::Result<String> {
    // Threads are told apart by each fault's thread, which counted faults lack.
    let held = match args.by {
        DiffBy::Group(_) => FaultsHeld::Counted,
        DiffBy::Thread(_) => FaultsHeld::All,
    };
    let side = |named: &Path, pid: Option<u32>| -> anyhow::Result<Loaded> {
        let mut dir = named.to_owned();
        // Read while `_opened` lives; named as given.
        let _opened = crate::open_recording(&mut dir)?;
        let options = args.filters.load_options(dir, pid)?;
        let mut loaded = load(&options.holding(held, AllocStacks::Skip), Some(named))
            .with_context(|| format!("recording in {}", named.display()))?;
        loaded.recording.dir = named.to_owned();
        Ok(loaded)
    };
    let a = side(&args.a, args.pid_a)?;
    let b = side(&args.b, args.pid_b)?;
    let width = (!args.wide).then(faults::terminal_width);
    Ok(match args.by {
        DiffBy::Group(by) => {
            let groups = |loaded: &Loaded| group_fault_counts(loaded.counted(), by);
            let rows = take_top(args.top, diff_groups(&groups(&a), &groups(&b)));
            diff::diff(&rows, by, &a, &b, args.format, width)?
        }
        DiffBy::Thread(by) => {
            let groups =
                |loaded: &Loaded| group_faults_by_thread(loaded.traces.iter().map(|(t, _)| t), by);
            let rows = take_top(args.top, diff_thread_groups(&groups(&a), &groups(&b), by));
            diff::threads(&rows, by, &a, &b, args.format, width)?
        }
    })
}
