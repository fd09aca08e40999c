//! `fltrace list [DIR]`: the recordings a directory holds, oldest first.

use std::io::Write as _;

use fltrace_analyze::list_recordings;
use fltrace_render::listing;

use crate::cli::ListArgs;

pub fn run(args: ListArgs) -> anyhow::Result<()> {
    // An archive file lists as the directory it holds.
    let opened = fltrace_analyze::OpenedRecording::open(&args.dir)?;
    let (recordings, unreadable) = list_recordings(&opened.dir)?;
    for broken in &unreadable {
        eprintln!(
            "fltrace: warning: left out {}: {}",
            broken.path.display(),
            fltrace_trace::error_chain(&broken.error)
        );
    }
    let text = listing::text(&recordings, args.format)?;
    let mut stdout = std::io::stdout().lock();
    stdout.write_all(text.as_bytes())?;
    stdout.flush()?;
    Ok(())
}
