//! `fltrace heatmap`.

use std::io::Write as _;

use anyhow::{Context, bail};

use fltrace_analyze::{
    FaultSelection, LabelledBlock, OpenedRecording, access_samples_in, find_recording, heat_ranges,
    labelled_blocks, largest_labelled_blocks, last_fault_ns, stream_largest_blocks,
};
use fltrace_render::{HeatEvent, HeatLabels, Heatmap, HeatmapOptions, ImageFormat};
use fltrace_trace::{RangeTraceKind, Recording, files};

use crate::cli::{HeatSource, HeatmapArgs};

pub fn run(args: HeatmapArgs, opened: &OpenedRecording) -> anyhow::Result<()> {
    if opened.outputs.moved && args.output.is_none() && !args.terminal {
        eprintln!(
            "fltrace: {} is read-only: the pictures go into the current directory",
            opened.named.display()
        );
    }
    let outputs = &opened.outputs.dir;
    match args.from {
        HeatSource::Faults => faults(args, outputs),
        HeatSource::Wss => ranges(args, "wss", outputs),
        HeatSource::Damon => ranges(args, "damon", outputs),
        HeatSource::Access => access(args, outputs),
    }
}

/// The map of PMU access samples: loads blue, stores red.
fn access(args: HeatmapArgs, outputs: &std::path::Path) -> anyhow::Result<()> {
    let dir = &args.selection.dir;
    let (pid, path) = match args.selection.pid {
        Some(pid) => (pid, files::access(dir, pid)),
        None => newest_file(dir, "access", "parquet")?,
    };
    let samples = fltrace_trace::read_access(&path).with_context(|| {
        format!(
            "reading {} (written by `fltrace record --access-samples`)",
            path.display()
        )
    })?;
    let (start, selected) = access_samples_in(&samples, args.selection.time, args.addr);
    let events: Vec<HeatEvent> = selected.into_iter().map(HeatEvent::from).collect();
    if events.is_empty() {
        bail!(
            "no access samples in {} in the selected time and address ranges",
            path.display()
        );
    }
    let mut map = Heatmap::build(&events, options(&args))?;
    map.set_time_origin(start);
    name_mappings(&mut map, dir, pid)?;
    let labels = HeatLabels {
        title: format!("sampled loads and stores of process {pid} over time and address"),
        subtitle: format!("{} access samples of process {pid}", events.len()),
        count_name: "samples".into(),
        time_origin: "the first sample".into(),
    };
    write_outputs(&map, &args, outputs, pid, "heatmap-access", &labels)
}

/// ` cc1plus`: the names process `pid` ran under (` sh then cc1plus` across an exec), as its
/// faults file's footer says; empty for recordings without names.
fn process_names(faults: &std::path::Path, pid: u32) -> String {
    let metadata = fltrace_trace::FaultRowGroups::open(faults)
        .map(|groups| groups.metadata())
        .unwrap_or_default();
    let names = fltrace_trace::main_thread_names(&metadata, pid);
    if names.is_empty() {
        String::new()
    } else {
        format!(" {}", names.join(" then "))
    }
}

/// The map of a recording's faults.
fn faults(args: HeatmapArgs, outputs: &std::path::Path) -> anyhow::Result<()> {
    let selection = &args.selection;
    let recording = if selection.salvage {
        let (recording, corrupt) =
            fltrace_analyze::find_recording_salvaging(&selection.dir, selection.pid)?;
        for error in corrupt {
            eprintln!("fltrace: warning: {error} (--salvage: what still reads follows)");
        }
        recording
    } else {
        find_recording(&selection.dir, selection.pid)?
    };
    crate::load::say_if_unfinished(&recording)?;
    // One address space per map: the chosen process, else the command itself.
    let pid = selection
        .pid
        .or_else(|| recording.root_pid())
        .context("the recording has no process")?;
    let start = recording.session.start_ns;
    let mut chosen = FaultSelection::new(start, selection.time, args.addr);
    let threads = fltrace_analyze::ThreadFilter {
        tids: selection.tid.clone(),
        comms: selection.comm.clone(),
    };
    if !threads.is_empty() {
        chosen = chosen.of_threads(&threads, recording.load(pid)?);
    }
    let path = files::faults(&recording.dir, pid);
    let Some((mut map, count)) = Heatmap::of_faults(&path, &chosen, options(&args))? else {
        bail!("no faults of process {pid} in the selected time and address ranges and threads");
    };
    if args.allocs > 0 && recording.has_allocs(pid) {
        map.overlay(&largest_blocks(&recording, pid, args.allocs, selection)?);
    }
    map.set_time_origin(start);
    name_mappings(&mut map, &recording.dir, pid)?;
    let labels = HeatLabels {
        title: format!("page faults of process {pid} over time and address"),
        subtitle: format!(
            "{} of process {pid}{} ({})",
            fltrace_analyze::plural(count as u64, "fault"),
            process_names(&path, pid),
            recording.session.command
        ),
        count_name: "faults".into(),
        time_origin: "the recording started".into(),
    };
    write_outputs(&map, &args, outputs, pid, "heatmap", &labels)
}

/// The map of an access trace of `fltrace wss` (`kind` is `wss` or `damon`).
fn ranges(args: HeatmapArgs, kind: &str, outputs: &std::path::Path) -> anyhow::Result<()> {
    let dir = &args.selection.dir;
    let (pid, path) = match args.selection.pid {
        Some(pid) => (pid, files::path(dir, kind, pid, "csv")),
        None => newest_file(dir, kind, "csv")?,
    };
    let (trace_kind, samples) = fltrace_trace::read_range_trace(&path)
        .with_context(|| format!("reading {} (written by `fltrace wss`)", path.display()))?;
    let ranges = heat_ranges(trace_kind, &samples, args.selection.time, args.addr);
    if ranges.is_empty() {
        bail!(
            "no accessed ranges in {} in the selected time and address ranges",
            path.display()
        );
    }
    let count = ranges.len();
    let mut map = Heatmap::of_ranges(&ranges, options(&args))?;
    let source = match trace_kind {
        RangeTraceKind::ReferencedBytes => "reference bits (per cent of each mapping referenced)",
        RangeTraceKind::DamonAccesses => "DAMON (access counts)",
    };
    map.set_time_origin(0);
    let labels = HeatLabels {
        title: format!("accesses of process {pid} over time and address"),
        subtitle: format!("{count} accessed ranges of process {pid} from {source}"),
        count_name: match trace_kind {
            RangeTraceKind::ReferencedBytes => "per cent referenced".into(),
            RangeTraceKind::DamonAccesses => "accesses".into(),
        },
        time_origin: "sampling began".into(),
    };
    write_outputs(
        &map,
        &args,
        outputs,
        pid,
        &format!("heatmap-{kind}"),
        &labels,
    )
}

/// The most recently written `fltrace-data-<kind>-<pid>.<ext>` in `dir`, with its pid.
fn newest_file(
    dir: &std::path::Path,
    kind: &str,
    ext: &str,
) -> anyhow::Result<(u32, std::path::PathBuf)> {
    files::newest(dir, kind, ext)?.with_context(|| {
        format!(
            "no fltrace-data-{kind}-<pid>.{ext} in {}: run `fltrace {}` first",
            dir.display(),
            match kind {
                "damon" => "wss --damon",
                "access" => "record --access-samples",
                _ => "wss",
            }
        )
    })
}

/// Names the map's bands after the process's recorded mappings, when there are any.
fn name_mappings(map: &mut Heatmap, dir: &std::path::Path, pid: u32) -> anyhow::Result<()> {
    let path = files::mmaps(dir, pid);
    if !path.is_file() {
        return Ok(());
    }
    let mappings = fltrace_trace::read_mappings(&path)
        .with_context(|| format!("reading {}", path.display()))?;
    map.name_mappings(&mappings);
    Ok(())
}

fn options(args: &HeatmapArgs) -> HeatmapOptions {
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
    dir: &std::path::Path,
    pid: u32,
    name: &str,
    labels: &HeatLabels,
) -> anyhow::Result<()> {
    if args.terminal {
        // Written, not printed: `--terminal | head` ends quietly (main treats EPIPE as done).
        let mut out = std::io::stdout().lock();
        write!(out, "{}", map.terminal_view(labels))?;
        out.flush()?;
        return Ok(());
    }
    let outputs = match &args.output {
        Some(path) => vec![path.clone()],
        None => {
            // The memref patch's temporal and spatial plots come with the default outputs.
            let memref = files::path(dir, &name.replacen("heatmap", "memref", 1), pid, "svg");
            files::write_with(&memref, |out| {
                fltrace_render::memref_plots(map, labels, out)
            })?;
            writeln!(std::io::stdout(), "{}", memref.display())?;
            vec![
                files::path(dir, name, pid, "png"),
                files::path(dir, name, pid, "svg"),
            ]
        }
    };
    for path in outputs {
        let Some(format) = ImageFormat::of_path(&path) else {
            bail!("{}: the heatmap is written as .png or .svg", path.display());
        };
        files::write_with(&path, |out| map.write_image(out, format, labels))?;
        writeln!(std::io::stdout(), "{}", path.display())?;
    }
    Ok(())
}

/// The `count` largest blocks of `pid`'s allocations, labelled with their allocation site:
/// the events read a row group at a time, memory following the blocks alive at once (with
/// [`crate::load::WHOLE_TABLE_ENV`] set, every event held: the tests' oracle).
fn largest_blocks(
    recording: &Recording,
    pid: u32,
    count: usize,
    selection: &crate::cli::Selection,
) -> anyhow::Result<Vec<LabelledBlock>> {
    let mut symbolizer = crate::load::symbolizer(selection);
    let blocks = if crate::load::whole_table() {
        let trace = recording.load(pid)?;
        let stacks = symbolizer.resolve_alloc_stacks(&trace);
        largest_labelled_blocks(&trace, &stacks, count)
    } else {
        let (trace, _) = recording.load_streaming_allocs(pid)?;
        let stacks = symbolizer.resolve_alloc_stacks(&trace);
        let totals = stream_largest_blocks(recording, pid, &trace, count)?;
        let end = totals.last_event_ns.max(last_fault_ns(recording, pid)?);
        labelled_blocks(&totals.largest, end, &stacks)
    };
    crate::load::print_warnings(&mut symbolizer);
    Ok(blocks)
}
