//! `fltrace export`: the recordings of a directory as a symbolized dataset.

use std::io::Write as _;

use anyhow::Context;

use crate::cli::ExportArgs;

pub fn run(args: ExportArgs) -> anyhow::Result<()> {
    let output = args
        .output
        .unwrap_or_else(|| args.dir.join("fltrace-export"));
    let hostname = std::path::Path::new("/proc/sys/kernel/hostname");
    let host = fltrace_analyze::export_host(args.host, hostname)?;
    let (exported, warnings) = fltrace_analyze::export_dataset(&args.dir, &output, &host)
        .with_context(|| format!("exporting {}", args.dir.display()))?;
    for warning in warnings {
        eprintln!("fltrace: warning: {warning}");
    }
    let mut stdout = std::io::stdout().lock();
    for recording in &exported {
        writeln!(stdout, "{}", recording.line())?;
    }
    Ok(())
}
