//! `fltrace sweep`: the paper's method in one command (`fltrace_experiment::sweep`), its
//! progress said on stderr.

use std::io::Write as _;

use fltrace_capture::interrupt_counter;
use fltrace_experiment::sweep::Sweep;

use crate::cli::SweepArgs;

pub fn run(args: SweepArgs) -> anyhow::Result<()> {
    let stop = interrupt_counter()?;
    let sweep = Sweep {
        dir: args.dir,
        command: args.command,
        from: args.from,
        to: args.to,
        step: args.step,
        max_mb: args.max_mb,
        policy: args.policy,
    };
    let files = sweep.run(&stop, |event| {
        for line in event.lines() {
            eprintln!("{line}");
        }
    })?;
    writeln!(
        std::io::stdout(),
        "{}\n{}",
        files.csv.display(),
        files.plot.display()
    )?;
    Ok(())
}
