//! The recording the flags select, loaded by fltrace-analyze, its notes said on stderr.

pub use fltrace_analyze::{AllocStacks as Allocs, Loaded};
use fltrace_analyze::{CallSite, FaultsHeld, FrameRules, LoadOptions, Symbolizer, debug_config};
use fltrace_trace::Recording;

use crate::cli::{CallSiteArg, Selection};

/// Every fault of each process, in memory.
pub fn load(selection: &Selection) -> anyhow::Result<Loaded> {
    load_with(selection, Allocs::Skip)
}

/// Loads as [`load`] does, and symbolizes allocation stacks as `allocs` says.
pub fn load_with(selection: &Selection, allocs: Allocs) -> anyhow::Result<Loaded> {
    loaded(selection, allocs, FaultsHeld::All)
}

/// Loads as [`load`] does but streams the faults into per-stack counts: memory follows the
/// number of distinct stacks, not of faults.
pub fn load_counts(selection: &Selection) -> anyhow::Result<Loaded> {
    loaded(selection, Allocs::Skip, FaultsHeld::Counted)
}

/// Loads as [`load_counts`] does, and symbolizes allocation stacks as `allocs` says, the
/// allocation events paired in one pass (as [`load_allocs`] does): memory follows the distinct
/// stacks and the blocks alive at once.
pub fn load_counts_with(selection: &Selection, allocs: Allocs) -> anyhow::Result<Loaded> {
    loaded(selection, allocs, FaultsHeld::Counted)
}

/// Loads for the allocation reports: the faults counted and the allocation events paired
/// in one pass, memory following the blocks alive at once, not the calls. With
/// [`WHOLE_TABLE_ENV`] set, every event and fault is held instead: the reports' oracle.
pub fn load_allocs(selection: &Selection) -> anyhow::Result<Loaded> {
    let faults = if whole_table() {
        FaultsHeld::All
    } else {
        FaultsHeld::Counted
    };
    loaded(selection, Allocs::Required, faults)
}

/// Set, the allocation reports and pictures hold every event and fault (the tests' oracle).
pub const WHOLE_TABLE_ENV: &str = "FLTRACE_ALLOCS_WHOLE_TABLE";

/// Whether [`WHOLE_TABLE_ENV`] asks for every event and fault held.
pub fn whole_table() -> bool {
    std::env::var_os(WHOLE_TABLE_ENV).is_some()
}

fn loaded(selection: &Selection, allocs: Allocs, faults: FaultsHeld) -> anyhow::Result<Loaded> {
    let options = LoadOptions {
        pid: selection.pid,
        window_s: selection.time,
        call_site: call_site(selection.call_site),
        frame_rules: FrameRules::with_config(
            selection.hide.as_deref(),
            selection.focus.as_deref(),
        )?,
        threads: fltrace_analyze::ThreadFilter {
            tids: selection.tid.clone(),
            comms: selection.comm.clone(),
        },
        include_tracer: selection.include_tracer,
        archive: selection.archive.clone(),
        alloc_stacks: allocs,
        faults,
        allocs_whole: whole_table(),
        salvage: selection.salvage,
    };
    let loaded = fltrace_analyze::load(&selection.dir, &options)?;
    for note in loaded.notes.iter().chain(&loaded.skipped_notes()) {
        eprintln!("fltrace: {}", as_named(note, selection));
    }
    Ok(loaded)
}

/// `text` with the temporary directory the recording is read from named as the user named
/// the recording.
pub fn as_named(text: &str, selection: &Selection) -> String {
    match &selection.named {
        Some(named) if *named != selection.dir => text.replace(
            &selection.dir.display().to_string(),
            &named.display().to_string(),
        ),
        _ => text.to_owned(),
    }
}

pub fn call_site(arg: CallSiteArg) -> CallSite {
    match arg {
        CallSiteArg::Program => CallSite::Program,
        CallSiteArg::Leaf => CallSite::Leaf,
    }
}

/// Says in one line when the recording was never finished.
pub fn say_if_unfinished(recording: &Recording) -> anyhow::Result<()> {
    if let Some(note) = fltrace_analyze::unfinished_note(recording)? {
        eprintln!("fltrace: warning: {note}");
    }
    Ok(())
}

/// A symbolizer finding debug files as the environment and `selection` say (the archive
/// used said in one line).
pub fn symbolizer(selection: &Selection) -> Symbolizer {
    let config = debug_config(&selection.dir, selection.archive.as_deref());
    if let Some(note) = fltrace_analyze::archive_note(&config) {
        eprintln!("fltrace: {note}");
    }
    Symbolizer::with_debug_config(config)
}

/// Says which mapped files were of another build than recorded, or gone.
pub fn print_warnings(symbolizer: &mut Symbolizer) {
    for warning in symbolizer.take_warnings() {
        eprintln!("fltrace: warning: {warning}");
    }
}
