//! `fltrace heatmap`.

use anyhow::{Context, bail};

use fltrace_analyze::{Lifetimes, Symbolizer, call_site};
use fltrace_render::{AllocRect, HeatEvent, HeatmapBuilder, HeatmapOptions};
use fltrace_trace::{FaultFlags, Recording, files};

use crate::cli::HeatmapArgs;

pub fn run(args: HeatmapArgs) -> anyhow::Result<()> {
    let selection = &args.selection;
    let recording = match selection.pid {
        Some(pid) => Recording::with_pid(&selection.dir, pid)?,
        None => Recording::latest(&selection.dir)?,
    };
    // One address space per map: the chosen process, else the command itself.
    let pid = selection
        .pid
        .or_else(|| recording.root_pid())
        .context("the recording has no process")?;
    let start = recording.session.start_ns;
    let window = selection.time.map(|(a, b)| {
        (
            start + (a * 1e9) as u64,
            start.saturating_add((b * 1e9) as u64),
        )
    });
    let to_events = |faults: &[fltrace_trace::Fault]| -> Vec<HeatEvent> {
        faults
            .iter()
            .filter(|f| window.is_none_or(|(a, b)| (a..b).contains(&f.time_ns)))
            .filter(|f| args.addr.is_none_or(|(a, b)| (a..b).contains(&f.addr)))
            .map(|f| HeatEvent {
                time: f.time_ns,
                addr: f.addr,
                write: f.flags.has(FaultFlags::WRITE),
            })
            .collect()
    };
    let options = HeatmapOptions {
        block_bits: args.block_bits,
        width: args.width as usize,
        max_height: args.height as usize,
    };
    // Two passes, a row group at a time: memory is bounded by the blocks touched.
    let path = files::faults(&recording.dir, pid);
    let mut builder = HeatmapBuilder::new(options);
    let mut count = 0;
    fltrace_trace::for_each_fault_group(&path, |group| {
        let events = to_events(group);
        count += events.len();
        builder.scan(&events);
    })?;
    if count == 0 {
        bail!("no faults of process {pid} in the selected time and address ranges");
    }
    let mut map = builder.layout()?;
    fltrace_trace::for_each_fault_group(&path, |group| map.add(&to_events(group)))?;
    if args.allocs > 0 && recording.has_allocs(pid) {
        map.overlay(&largest_blocks(&recording, pid, args.allocs)?);
    }
    if args.terminal {
        print!("{}", map.to_terminal(100, 30));
        println!(
            "{} faults of process {pid}, {:.3} s left to right, {} bytes per row, {} touched ranges bottom to top",
            count,
            (map.time_range.1 - map.time_range.0) as f64 / 1e9,
            map.bytes_per_row(),
            map.boundaries.len()
        );
        return Ok(());
    }
    let title = format!("faults of process {pid} over time and address");
    let outputs = match &args.output {
        Some(path) => vec![path.clone()],
        None => {
            // The memref patch's temporal and spatial plots come with the default outputs.
            let memref = files::path(&selection.dir, "memref", pid, "svg");
            fltrace_render::memref_plots(
                &map.temporal(),
                &map.spatial(),
                &format!("process {pid}"),
                &memref,
            )
            .with_context(|| format!("writing {}", memref.display()))?;
            println!("{}", memref.display());
            vec![
                files::path(&selection.dir, "heatmap", pid, "png"),
                files::path(&selection.dir, "heatmap", pid, "svg"),
            ]
        }
    };
    for path in outputs {
        match path.extension().and_then(|e| e.to_str()) {
            Some("png") => map.write_png(&path),
            Some("svg") => map.write_svg(&path, &title),
            _ => bail!("{}: the heatmap is written as .png or .svg", path.display()),
        }
        .with_context(|| format!("writing {}", path.display()))?;
        println!("{}", path.display());
    }
    Ok(())
}

/// The `count` largest blocks of `pid`'s allocations, as rectangles labelled with their
/// allocation site (Heimdallr draws allocations over its access map the same way).
fn largest_blocks(recording: &Recording, pid: u32, count: usize) -> anyhow::Result<Vec<AllocRect>> {
    let trace = recording.load(pid)?;
    let lifetimes = Lifetimes::of_trace(&trace);
    let end = trace
        .faults
        .iter()
        .map(|f| f.time_ns)
        .chain(trace.allocs.iter().map(|e| e.time_ns))
        .max()
        .unwrap_or(0);
    let mut blocks: Vec<_> = lifetimes.blocks.iter().filter(|b| b.size > 0).collect();
    blocks.sort_by_key(|b| std::cmp::Reverse(b.size));
    blocks.truncate(count);
    let stacks = Symbolizer::new().resolve_alloc_stacks(&trace);
    Ok(blocks
        .into_iter()
        .map(|b| {
            let site = call_site(stacks.get(b.stack_id));
            let label = match site {
                Some(l) if l.has_line() => format!("{} {}:{}", l.function, l.short_file(), l.line),
                Some(l) => l.function.to_string(),
                None => "?".into(),
            };
            AllocRect {
                start: b.start_ns,
                end: b.end_ns.unwrap_or(end),
                addr: b.addr,
                len: b.size,
                label,
            }
        })
        .collect())
}
