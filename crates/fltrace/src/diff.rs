//! `fltrace diff A B`: faults per call site in two recordings, largest change first.

use std::io::Write;
use std::path::Path;

use anyhow::{Context, bail};

use fltrace_analyze::{
    AllocStacks, FaultsHeld, FrameRules, LoadOptions, Loaded, diff_groups, group_fault_counts,
    take_top,
};

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
    let Some(by) = args.by.group_by() else {
        bail!("diff compares faults by line, function, stack or dso");
    };
    let side = |named: &Path, pid: Option<u32>| -> anyhow::Result<Loaded> {
        let mut dir = named.to_owned();
        // Read while `_opened` lives; named as given.
        let _opened = crate::open_recording(&mut dir)?;
        let whole = |dir| -> anyhow::Result<Loaded> {
            let options = LoadOptions {
                pid,
                ..LoadOptions::new(dir, FrameRules::with_config(None, None)?)
            };
            load(
                &options.holding(FaultsHeld::Counted, AllocStacks::Skip),
                Some(named),
            )
        };
        let mut loaded = whole(dir).with_context(|| format!("recording in {}", named.display()))?;
        loaded.recording.dir = named.to_owned();
        Ok(loaded)
    };
    let a = side(&args.a, args.pid_a)?;
    let b = side(&args.b, args.pid_b)?;
    let groups = |loaded: &Loaded| group_fault_counts(loaded.counted(), by);
    let rows = take_top(args.top, diff_groups(&groups(&a), &groups(&b)));
    Ok(fltrace_render::report::diff::diff(
        &rows,
        by,
        &a,
        &b,
        args.format,
    )?)
}
