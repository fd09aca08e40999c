//! `fltrace script`: every fault with its stack in perf script's layout.

use std::io::{BufWriter, Write};

use anyhow::Context;

use fltrace_analyze::write_script;

use crate::cli::ScriptArgs;
use crate::load::load;

pub fn run(args: ScriptArgs) -> anyhow::Result<()> {
    let loaded = load(
        &args.selection.load_options()?,
        args.selection.named.as_deref(),
    )?;
    let mut out = BufWriter::new(std::io::stdout().lock());
    write_script(
        loaded.traces.iter().map(|(t, s)| (t, s)),
        args.addr,
        &mut out,
    )
    .and_then(|()| out.flush())
    .context("writing stdout")
}
