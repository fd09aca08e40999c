//! `fltrace heatmap`.

use std::io::Write as _;

use anyhow::{Context, bail};

use fltrace_analyze::{
    access_samples_in, find_recording, heat_ranges, largest_labelled_blocks, named_regions,
    window_ns,
};
use fltrace_render::{
    AddressRegion, AllocRect, HeatEvent, HeatLabels, HeatmapBuilder, HeatmapOptions, ImageFormat,
};
use fltrace_trace::{FaultFlags, FaultRowGroups, RangeTraceKind, Recording, files};

use crate::cli::{HeatSource, HeatmapArgs};

pub fn run(args: HeatmapArgs) -> anyhow::Result<()> {
    match args.from {
        HeatSource::Faults => faults(args),
        HeatSource::Wss => ranges(args, "wss"),
        HeatSource::Damon => ranges(args, "damon"),
        HeatSource::Access => access(args),
    }
}

/// The map of PMU access samples: loads blue, stores red.
fn access(args: HeatmapArgs) -> anyhow::Result<()> {
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
    let events: Vec<HeatEvent> = selected
        .iter()
        .map(|s| HeatEvent {
            time: s.time_ns,
            addr: s.addr,
            write: s.is_store(),
        })
        .collect();
    if events.is_empty() {
        bail!(
            "no access samples in {} in the selected time and address ranges",
            path.display()
        );
    }
    let mut map = fltrace_render::Heatmap::build(&events, options(&args))?;
    map.set_time_origin(start);
    name_mappings(&mut map, dir, pid)?;
    let labels = HeatLabels {
        title: format!("sampled loads and stores of process {pid} over time and address"),
        subtitle: format!("{} access samples of process {pid}", events.len()),
        count_name: "samples".into(),
        time_origin: "the first sample".into(),
    };
    write_outputs(&map, &args, pid, "heatmap-access", &labels)
}

/// The map of a recording's faults.
fn faults(args: HeatmapArgs) -> anyhow::Result<()> {
    let selection = &args.selection;
    let recording = find_recording(&selection.dir, selection.pid)?;
    crate::load::say_if_unfinished(&recording)?;
    // One address space per map: the chosen process, else the command itself.
    let pid = selection
        .pid
        .or_else(|| recording.root_pid())
        .context("the recording has no process")?;
    let start = recording.session.start_ns;
    let window = window_ns(start, selection.time);
    let to_events = |faults: &[fltrace_trace::Fault]| -> Vec<HeatEvent> {
        faults
            .iter()
            .filter(|f| window.as_ref().is_none_or(|w| w.contains(&f.time_ns)))
            .filter(|f| {
                args.addr
                    .is_none_or(|(a, b)| (a..b).contains(&f.addr.get()))
            })
            .map(|f| HeatEvent {
                time: f.time_ns,
                addr: f.addr,
                write: f.flags.has(FaultFlags::WRITE),
            })
            .collect()
    };
    let options = options(&args);
    // Two passes, a row group at a time: memory is bounded by the blocks touched.
    let path = files::faults(&recording.dir, pid);
    let mut builder = HeatmapBuilder::new(options);
    let mut count = 0;
    for group in FaultRowGroups::open(&path)? {
        let events = to_events(&group?);
        count += events.len();
        builder.scan(&events);
    }
    if count == 0 {
        bail!("no faults of process {pid} in the selected time and address ranges");
    }
    let mut map = builder.layout()?;
    for group in FaultRowGroups::open(&path)? {
        map.add(&to_events(&group?));
    }
    if args.allocs > 0 && recording.has_allocs(pid) {
        map.overlay(&block_rects(&recording, pid, args.allocs, selection)?);
    }
    map.set_time_origin(start);
    name_mappings(&mut map, &recording.dir, pid)?;
    let labels = HeatLabels {
        title: format!("page faults of process {pid} over time and address"),
        subtitle: format!(
            "{count} faults of process {pid} ({})",
            recording.session.command
        ),
        count_name: "faults".into(),
        time_origin: "the recording started".into(),
    };
    write_outputs(&map, &args, pid, "heatmap", &labels)
}

/// The map of an access trace of `fltrace wss` (`kind` is `wss` or `damon`).
fn ranges(args: HeatmapArgs, kind: &str) -> anyhow::Result<()> {
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
    let mut builder = HeatmapBuilder::new(options(&args));
    for r in &ranges {
        builder.scan_range(r.time_ns, r.start, r.end);
    }
    let mut map = builder.layout()?;
    for r in &ranges {
        map.add_range(r.time_ns, r.start, r.end, r.weight);
    }
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
    write_outputs(&map, &args, pid, &format!("heatmap-{kind}"), &labels)
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
fn name_mappings(
    map: &mut fltrace_render::Heatmap,
    dir: &std::path::Path,
    pid: u32,
) -> anyhow::Result<()> {
    let path = files::mmaps(dir, pid);
    if !path.is_file() {
        return Ok(());
    }
    let mappings = fltrace_trace::read_mappings(&path)
        .with_context(|| format!("reading {}", path.display()))?;
    let regions: Vec<AddressRegion> = named_regions(&mappings)
        .into_iter()
        .map(|(start, end, name)| AddressRegion { start, end, name })
        .collect();
    map.name_regions(&regions);
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
    map: &fltrace_render::Heatmap,
    args: &HeatmapArgs,
    pid: u32,
    name: &str,
    labels: &HeatLabels,
) -> anyhow::Result<()> {
    let dir = &args.selection.dir;
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
            let mut out = std::io::BufWriter::new(files::create(&memref)?);
            fltrace_render::memref_plots(map, labels, &mut out)
                .map_err(anyhow::Error::from)
                .and_then(|()| Ok(out.flush()?))
                .with_context(|| format!("writing {}", memref.display()))?;
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
        let mut out = std::io::BufWriter::new(files::create(&path)?);
        map.write_image(&mut out, format, labels)
            .map_err(anyhow::Error::from)
            .and_then(|()| Ok(out.flush()?))
            .with_context(|| format!("writing {}", path.display()))?;
        writeln!(std::io::stdout(), "{}", path.display())?;
    }
    Ok(())
}

/// The `count` largest blocks of `pid`'s allocations, as rectangles labelled with their
/// allocation site (Heimdallr draws allocations over its access map the same way).
fn block_rects(
    recording: &Recording,
    pid: u32,
    count: usize,
    selection: &crate::cli::Selection,
) -> anyhow::Result<Vec<AllocRect>> {
    let trace = recording.load(pid)?;
    let mut symbolizer = crate::load::symbolizer(selection);
    let stacks = symbolizer.resolve_alloc_stacks(&trace);
    crate::load::print_warnings(&mut symbolizer);
    Ok(largest_labelled_blocks(&trace, &stacks, count)
        .into_iter()
        .map(|b| AllocRect {
            start: b.start_ns,
            end: b.end_ns,
            addr: b.addr,
            len: b.size,
            label: b.label,
        })
        .collect())
}
