//! `fltrace heatmap`: what to draw chosen by fltrace-analyze, drawn and named by
//! fltrace-render, the files it wrote said on stdout.

use std::io::Write as _;
use std::path::Path;

use anyhow::bail;

use fltrace_analyze::{
    AccessHeat, HeatSource, LoadOptions, OpenedRecording, RangeHeat, heat_blocks, heat_faults,
};
use fltrace_render::{HeatLabels, Heatmap, HeatmapFiles, HeatmapOptions};
use fltrace_trace::files;

use crate::cli::HeatmapArgs;

pub fn run(args: HeatmapArgs, opened: &OpenedRecording) -> anyhow::Result<()> {
    if opened.outputs.moved && args.output.is_none() && !args.terminal {
        eprintln!(
            "fltrace: {} is read-only: the pictures go into the current directory",
            opened.named.display()
        );
    }
    let outputs = &opened.outputs.dir;
    let source = args.from;
    // A map draws every fault: no frame rules (`--hide`, `--focus`) apply.
    let options = args.selection.options_with(Default::default());
    let (map, pid, labels) = match source {
        HeatSource::Faults => faults(&args, &options)?,
        HeatSource::Wss | HeatSource::Damon => ranges(&args, &options, source)?,
        HeatSource::Access => access(&args, &options)?,
    };
    write_outputs(&map, &args, outputs, pid, &source.output_name(), &labels)
}

/// The map of PMU access samples: loads blue, stores red.
fn access(args: &HeatmapArgs, options: &LoadOptions) -> anyhow::Result<(Heatmap, u32, HeatLabels)> {
    let heat = AccessHeat::load(options, args.addr)?;
    let (map, labels) = Heatmap::of_access(&heat, &options.dir, heatmap_options(args))?;
    Ok((map, heat.pid, labels))
}

/// The map of a recording's faults.
fn faults(args: &HeatmapArgs, options: &LoadOptions) -> anyhow::Result<(Heatmap, u32, HeatLabels)> {
    let (recording, corrupt) = options.find_recording()?;
    for error in &corrupt {
        eprintln!("fltrace: {}", fltrace_analyze::salvage_warning(error));
    }
    for note in fltrace_analyze::unfinished_notes(&recording)? {
        eprintln!("fltrace: warning: {note}");
    }
    let (pid, chosen) = heat_faults(&recording, options, args.addr)?;
    let path = files::faults(&recording.dir, pid);
    let Some((mut map, count)) = Heatmap::of_faults(&path, &chosen, heatmap_options(args))? else {
        bail!("no faults of process {pid} in the selected time and address ranges and threads");
    };
    if args.allocs > 0 && recording.has_allocs(pid) {
        let mut symbolizer = crate::load::symbolizer(options);
        let blocks = heat_blocks(
            &recording,
            pid,
            args.allocs,
            &chosen,
            &mut symbolizer,
            options.allocs_whole(),
        )?;
        crate::load::print_warnings(&mut symbolizer);
        map.overlay(&blocks);
    }
    let labels = map.finish_faults(&recording, pid, count)?;
    Ok((map, pid, labels))
}

/// The map of an access trace of `fltrace wss` (`--from wss` or `damon`).
fn ranges(
    args: &HeatmapArgs,
    options: &LoadOptions,
    source: HeatSource,
) -> anyhow::Result<(Heatmap, u32, HeatLabels)> {
    let heat = RangeHeat::load(options, source, args.addr)?;
    let (map, labels) = Heatmap::of_range_trace(&heat, heatmap_options(args))?;
    Ok((map, heat.pid, labels))
}

fn heatmap_options(args: &HeatmapArgs) -> HeatmapOptions {
    HeatmapOptions {
        block_bits: args.block_bits,
        width: args.width as usize,
        max_height: args.height as usize,
    }
}

/// Writes the map (and the memref patch's plots) where asked, or prints it to the terminal.
fn write_outputs(
    map: &Heatmap,
    args: &HeatmapArgs,
    dir: &Path,
    pid: u32,
    name: &str,
    labels: &HeatLabels,
) -> anyhow::Result<()> {
    // Written, not printed: `--terminal | head` ends quietly (main treats EPIPE as done).
    let mut out = std::io::stdout().lock();
    if args.terminal {
        let width = fltrace_render::table::terminal_width();
        write!(out, "{}", map.terminal_view_within(labels, Some(width)))?;
        out.flush()?;
        return Ok(());
    }
    let outputs = HeatmapFiles::new(args.output.as_deref(), dir, name, pid);
    outputs.write(map, labels, |path| -> anyhow::Result<()> {
        writeln!(out, "{}", path.display())?;
        Ok(())
    })
}
