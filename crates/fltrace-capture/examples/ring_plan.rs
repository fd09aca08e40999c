//! Prints the rings the sizing rule gives a recording on machines of N CPUs, for the benchmark
//! (bench/faults.sh): `ring_plan [--buffer-mb MB] N...`.

use fltrace_capture::budget::{Carrier, DEFAULT_BUDGET_MB, plan_rings};

fn main() {
    let mut args = std::env::args().skip(1).peekable();
    let mut budget = DEFAULT_BUDGET_MB;
    if args.peek().map(String::as_str) == Some("--buffer-mb") {
        args.next();
        budget = args.next().and_then(|v| v.parse().ok()).unwrap_or(budget);
    }
    println!(
        "{:>6} {:>12} {:>14} {:>13} {:>20}",
        "CPUs", "shared ring", "side band/CPU", "total", "per-CPU rings (old)"
    );
    for cpus in args.filter_map(|a| a.parse::<usize>().ok()) {
        let mib = |bytes: usize| format!("{:.2} MiB", bytes as f64 / (1 << 20) as f64);
        // The previous rule: a ring of 256 MiB per CPU for 16 KiB copies.
        let old = cpus * (256 << 20);
        match plan_rings(budget, cpus, 4096, Carrier::SharedRing) {
            Ok(plan) => println!(
                "{cpus:>6} {:>12} {:>14} {:>13} {:>20}",
                mib(plan.shared),
                format!("{} KiB", plan.per_cpu >> 10),
                mib(plan.total()),
                mib(old)
            ),
            Err(e) => println!("{cpus:>6} {e}"),
        }
    }
}
