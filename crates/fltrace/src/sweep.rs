//! `fltrace sweep`: the paper's method in one command (`fltrace_experiment::sweep`), its
//! progress said on stderr.

use std::io::Write as _;

use fltrace_capture::interrupt_counter;
use fltrace_experiment::sweep::{Sweep, SweepEvent};

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
        policy: args.policy.name().to_owned(),
    };
    let files = sweep.run(&stop, |event| match event {
        SweepEvent::MeasuringPeak => {
            eprintln!("fltrace sweep: measuring the peak memory of the command");
        }
        SweepEvent::Planned(plan) => eprintln!(
            "fltrace sweep: peak {} MB; far memory -M {} MB per run",
            plan.peak_mb, plan.max_mb
        ),
        SweepEvent::Ran {
            index,
            plan,
            row,
            recorded,
            notes,
        } => {
            for note in notes {
                eprintln!("fltrace: {note}");
            }
            eprintln!(
                "fltrace sweep: [{}/{}] {:>3}% = {} MB local: {} faults, {} locations cover 95% ({})",
                index + 1,
                plan.steps.len(),
                row.local_percent,
                row.local_mb,
                row.faults,
                row.locations_95,
                if recorded {
                    "recorded"
                } else {
                    "already recorded"
                }
            );
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
