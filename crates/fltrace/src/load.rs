//! The recording the flags select: the flags made into one [`LoadOptions`], the recording
//! loaded by fltrace-analyze, its notes said on stderr.

use std::path::{Path, PathBuf};

use fltrace_analyze::{FrameRules, LoadOptions, Loaded, Symbolizer, ThreadFilter};

use crate::cli::{Filters, Selection};

impl Selection {
    /// What every reading command loads: the one place the flags become [`LoadOptions`].
    pub fn load_options(&self) -> anyhow::Result<LoadOptions> {
        self.filters.load_options(self.dir.clone(), self.pid)
    }

    /// The same with the frame rules given (none, for a picture of every fault).
    pub fn options_with(&self, rules: FrameRules) -> LoadOptions {
        self.filters.options_with(self.dir.clone(), self.pid, rules)
    }
}

impl Filters {
    /// The options of the recording in `dir` (its process `pid`) with these filters.
    pub fn load_options(&self, dir: PathBuf, pid: Option<u32>) -> anyhow::Result<LoadOptions> {
        let rules = FrameRules::with_config(self.hide.as_deref(), self.focus.as_deref())?;
        Ok(self.options_with(dir, pid, rules))
    }

    /// The same with the frame rules given.
    pub fn options_with(&self, dir: PathBuf, pid: Option<u32>, rules: FrameRules) -> LoadOptions {
        LoadOptions {
            pid,
            window_s: self.time,
            call_site: self.call_site,
            threads: ThreadFilter {
                tids: self.tid.clone(),
                comms: self.comm.clone(),
            },
            include_tracer: self.include_tracer,
            archive: self.archive.clone(),
            salvage: self.salvage,
            ..LoadOptions::new(dir, rules)
        }
    }
}

/// Loads what `options` say, its notes said on stderr naming the recording `named` as the
/// user named it (`dir` may be a temporary directory it is read from).
pub fn load(options: &LoadOptions, named: Option<&Path>) -> anyhow::Result<Loaded> {
    let loaded = fltrace_analyze::load(options)?;
    for note in loaded.notes.iter().chain(&loaded.skipped_notes()) {
        eprintln!("fltrace: {}", as_named(note, &options.dir, named));
    }
    Ok(loaded)
}

/// `text` with the temporary directory `dir` the recording is read from named as the user
/// named the recording.
fn as_named(text: &str, dir: &Path, named: Option<&Path>) -> String {
    match named {
        Some(named) if named != dir => {
            text.replace(&dir.display().to_string(), &named.display().to_string())
        }
        _ => text.to_owned(),
    }
}

/// A symbolizer finding debug files as the environment and `options` say (the archive used
/// said in one line).
pub fn symbolizer(options: &LoadOptions) -> Symbolizer {
    let config = options.debug_config();
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
