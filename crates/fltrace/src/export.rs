//! `fltrace export`: the recordings of a directory as a symbolized dataset.

use std::io::Write as _;

use anyhow::Context;

use crate::cli::ExportArgs;

pub fn run(args: ExportArgs) -> anyhow::Result<()> {
    let output = args
        .output
        .unwrap_or_else(|| args.dir.join("fltrace-export"));
    let host = match args.host {
        Some(host) => host,
        None => std::fs::read_to_string("/proc/sys/kernel/hostname")
            .context("reading the host name (give --host)")?
            .trim()
            .to_owned(),
    };
    if host.is_empty() || host.contains(['/', '=']) {
        anyhow::bail!("--host {host:?}: a partition name needs no `/` or `=` and is not empty");
    }
    let (exported, warnings) = fltrace_analyze::export_dataset(&args.dir, &output, &host)
        .with_context(|| format!("exporting {}", args.dir.display()))?;
    for warning in warnings {
        eprintln!("fltrace: warning: {warning}");
    }
    let mut stdout = std::io::stdout().lock();
    for r in &exported {
        writeln!(
            stdout,
            "{}: {} faults, {} frames in {}",
            r.recording,
            r.faults,
            r.frames,
            r.dir.display()
        )?;
    }
    Ok(())
}
