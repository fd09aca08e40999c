//! `fltrace list [RECORDING]`: the recordings a directory (or an archive file) holds, oldest
//! first.

use std::io::Write as _;

use fltrace_analyze::list_recordings;
use fltrace_render::listing;

use crate::cli::ListArgs;

pub fn run(args: ListArgs) -> anyhow::Result<()> {
    // An archive file lists as the directory it holds.
    let opened = fltrace_analyze::OpenedRecording::open(&args.recording.path())?;
    let (recordings, unreadable) = list_recordings(&opened.dir)?;
    for broken in &unreadable {
        eprintln!(
            "fltrace: warning: left out {}: {}",
            broken.path.display(),
            fltrace_trace::error_chain(&broken.error)
        );
    }
    let width = (!args.wide).then(fltrace_render::table::terminal_width);
    let text = listing::text(&recordings, args.format, width)?;
    let mut stdout = std::io::stdout().lock();
    stdout.write_all(text.as_bytes())?;
    stdout.flush()?;
    Ok(())
}
