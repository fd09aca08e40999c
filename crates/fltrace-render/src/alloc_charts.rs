//! `fltrace visualize --allocs`: heaptrack_gui's charts as files, for each process recorded
//! with `record --allocs`: the heap consumed over time stacked by allocation site with its
//! peak marked and the resident memory beside it, allocations and temporary allocations per
//! second, the allocation sizes, and flamegraphs of the memory alive at the peak and of the
//! memory leaked; or the same series as CSV or JSON.

use std::io::Write;
use std::ops::Range;
use std::path::{Path, PathBuf};

use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

use fltrace_analyze::{
    AllocTimeline, BlockKind, CHART_INTERVALS, CHART_SITES, Loaded, Location, PassTotals,
    SizeHistogram, alloc_processes, alloc_timeline, last_fault_ns, process_names,
    stream_largest_blocks,
};
use fltrace_trace::files;

use crate::flames::{memory_flames, title_command};
use crate::report::short_file_line;
use crate::{Error, FrameLabel};

/// What `visualize --allocs` writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
pub enum ChartFormat {
    /// The charts and flamegraphs as SVG, for a browser.
    #[default]
    Svg,
    /// The series over time and the sizes as CSV files.
    Csv,
    /// The series, the sites, the peak and the sizes in one JSON file.
    Json,
}

/// One process's charts: its heap over time, resident memory and sizes, and the words that
/// name them.
#[derive(Debug, Clone)]
pub struct AllocCharts {
    /// The heap over time.
    pub timeline: AllocTimeline,
    /// The resident memory over time: (ns since the epoch, bytes).
    pub resident: Vec<(u64, u64)>,
    /// Whether `resident` is the stats file's, once a second (a recording made before the
    /// finer series was kept).
    pub resident_coarse: bool,
    /// The heap allocations' sizes.
    pub sizes: SizeHistogram,
    /// The label of each site shown, as `report --allocs` names it: `function file:line`.
    pub site_labels: Vec<String>,
    /// The start of the recording, ns since the epoch: times are said from it.
    pub recording_start_ns: u64,
    /// The process's names (`cc1plus`, or `sh then make` across an exec).
    pub process: String,
    /// The recording's command.
    pub command: String,
}

/// A site as the charts and their data name it: `function file:line`.
pub fn site_label(location: &Location) -> String {
    format!(
        "{} {}",
        crate::table::middle(&location.function, 48),
        short_file_line(location)
    )
}

impl AllocCharts {
    fn seconds(&self, ns: u64) -> f64 {
        ns.saturating_sub(self.recording_start_ns) as f64 / 1e9
    }

    fn pid(&self) -> u32 {
        self.timeline.pid
    }

    /// A chart's caption, elided to fit `width` pixels: centred over its plot, a longer one
    /// would be cut at both ends.
    fn title(&self, what: &str, width: u32) -> String {
        let title = self.full_title(what);
        crate::plot::elide(&title, CAPTION_SIZE, width as i32 - 2 * CHART_MARGIN as i32)
            .unwrap_or(title)
    }

    fn full_title(&self, what: &str) -> String {
        format!(
            "{what} of {} (pid {}) in `{}`",
            self.process,
            self.pid(),
            title_command(&self.command)
        )
    }

    /// A flamegraph's title, cut to what its 1,200 pixels hold in inferno's 17-pixel
    /// monospace (about 10 pixels a character), as it centres it.
    fn flame_title(&self, what: &str) -> String {
        const FITS: usize = 112;
        let title = self.full_title(what);
        match title.char_indices().nth(FITS) {
            Some((cut, _)) => format!("{}…", &title[..cut]),
            None => title,
        }
    }

    /// The time axis: from the first interval's start to the last one's end, in seconds.
    fn time_axis(&self) -> Range<f64> {
        let series = &self.timeline.series;
        let end = series.interval_start(series.intervals.len());
        let (from, to) = (self.seconds(series.start_ns), self.seconds(end));
        from..to.max(from + 1e-3)
    }

    /// The resident size sampled last by `ns`, if any was.
    fn resident_at(&self, ns: u64) -> Option<u64> {
        let i = self.resident.partition_point(|&(t, _)| t <= ns);
        i.checked_sub(1).map(|i| self.resident[i].1)
    }

    /// The peak's words: `peak 64.0 MiB at 0.352 s`.
    fn peak_text(&self) -> String {
        let (ns, bytes) = self.timeline.peak;
        format!(
            "heap peak {} at {:.3} s",
            crate::plot::human_bytes(bytes),
            self.seconds(ns)
        )
    }
}

/// The charts' caption font size and margin, in pixels.
const CAPTION_SIZE: f64 = 17.0;
const CHART_MARGIN: u32 = 14;

/// Colours of the sites shown, in rank order (Tableau's ten without its grey, which is the
/// others'); the others grey; the resident memory black.
const SITE_COLOURS: [RGBColor; CHART_SITES] = [
    RGBColor(31, 119, 180),
    RGBColor(255, 127, 14),
    RGBColor(44, 160, 44),
    RGBColor(214, 39, 40),
    RGBColor(148, 103, 189),
    RGBColor(140, 86, 75),
    RGBColor(227, 119, 194),
    RGBColor(188, 189, 34),
    RGBColor(23, 190, 207),
    RGBColor(174, 199, 232),
];
const OTHERS_COLOUR: RGBColor = RGBColor(190, 190, 190);
const RESIDENT_COLOUR: RGBColor = RGBColor(0, 0, 0);
const PEAK_COLOUR: RGBColor = RGBColor(200, 0, 0);

/// A unit for an axis whose top is `top` bytes: its size and name.
fn byte_unit(top: u64) -> (f64, &'static str) {
    match top {
        0..0x10_0000 => (1024.0, "KiB"),
        0x10_0000..0x4000_0000 => (1048576.0, "MiB"),
        _ => (1073741824.0, "GiB"),
    }
}

/// Runs `draw` on an SVG of `size` and writes it to `out`.
fn svg(
    size: (u32, u32),
    out: &mut dyn Write,
    draw: impl FnOnce(
        &DrawingArea<SVGBackend<'_>, plotters::coord::Shift>,
    ) -> Result<(), Box<dyn std::error::Error>>,
) -> Result<(), Error> {
    crate::plot::ensure_font()?;
    let mut text = String::new();
    {
        let root = SVGBackend::with_string(&mut text, size).into_drawing_area();
        root.fill(&WHITE).map_err(|e| Error::Draw(e.to_string()))?;
        draw(&root).map_err(|e| Error::Draw(e.to_string()))?;
        root.present().map_err(|e| Error::Draw(e.to_string()))?;
    }
    out.write_all(text.as_bytes())?;
    Ok(())
}

/// A legend to the right of a plot: a swatch and a line of text per entry, elided to fit.
fn legend(
    area: &DrawingArea<SVGBackend<'_>, plotters::coord::Shift>,
    entries: &[(RGBColor, String, bool)],
) -> Result<(), Box<dyn std::error::Error>> {
    let (width, _) = area.dim_in_pixel();
    let size = 13.0;
    let font = ("sans-serif", size).into_font();
    let mut y = 60;
    for (colour, text, line) in entries {
        if *line {
            area.draw(&PathElement::new(
                vec![(8, y + 7), (28, y + 7)],
                colour.stroke_width(2),
            ))?;
        } else {
            area.draw(&Rectangle::new([(8, y), (28, y + 14)], colour.filled()))?;
        }
        let shown =
            crate::plot::elide(text, size, width as i32 - 44).unwrap_or_else(|| text.clone());
        area.draw(&Text::new(
            shown,
            (36, y + 7),
            font.clone()
                .color(&BLACK)
                .pos(Pos::new(HPos::Left, VPos::Center)),
        ))?;
        y += 22;
    }
    Ok(())
}

/// The heap consumed over time, stacked by site (the sites shown, then the others), the
/// resident memory drawn over it and the peak marked: heaptrack_gui's "consumed" chart with
/// memray's resident line.
pub fn memory_chart(charts: &AllocCharts, mut out: impl Write) -> Result<(), Error> {
    let series = &charts.timeline.series;
    if series.intervals.is_empty() {
        return Err(Error::Empty);
    }
    let (peak_ns, peak_bytes) = charts.timeline.peak;
    let most_resident = charts.resident.iter().map(|&(_, b)| b).max().unwrap_or(0);
    let (unit, unit_name) = byte_unit(peak_bytes.max(most_resident));
    let top = (peak_bytes.max(most_resident) as f64 / unit).max(1e-3) * 1.12;
    let x = charts.time_axis();
    let title = charts.title("Heap consumed by allocation site", 900);
    svg((1280, 640), &mut out, |root| {
        let (plot, side) = root.split_horizontally(900);
        let mut chart = ChartBuilder::on(&plot)
            .caption(&title, ("sans-serif", CAPTION_SIZE))
            .margin(CHART_MARGIN)
            .x_label_area_size(42)
            .y_label_area_size(72)
            .build_cartesian_2d(x.clone(), 0f64..top)?;
        chart
            .configure_mesh()
            .x_desc("time since the recording started (s)")
            .y_desc(format!("heap consumed, resident memory ({unit_name})"))
            .y_label_formatter(&|v| axis_number(*v, top))
            .light_line_style(WHITE.mix(0.0))
            .draw()?;
        // Each slot's band from the sum of the slots below it to that plus its own bytes, as
        // steps: an interval holds its highest moment over its whole length.
        let slots = series.slots;
        let mut below = vec![0u64; series.intervals.len()];
        for slot in 0..slots {
            let colour = if slot + 1 == slots {
                OTHERS_COLOUR
            } else {
                SITE_COLOURS[slot % SITE_COLOURS.len()]
            };
            let mut upper: Vec<(f64, f64)> = Vec::new();
            let mut lower: Vec<(f64, f64)> = Vec::new();
            let mut any = false;
            for (i, base) in below.iter_mut().enumerate() {
                let own = series.slots_at(i)[slot];
                any |= own > 0;
                let (from, to) = (
                    charts.seconds(series.interval_start(i)),
                    charts.seconds(series.interval_start(i + 1)),
                );
                let (low, high) = (*base as f64 / unit, (*base + own) as f64 / unit);
                upper.extend([(from, high), (to, high)]);
                lower.extend([(from, low), (to, low)]);
                *base += own;
            }
            if !any {
                continue;
            }
            lower.reverse();
            upper.extend(lower);
            chart.draw_series(std::iter::once(Polygon::new(upper, colour.filled())))?;
        }
        if !charts.resident.is_empty() {
            let points = charts
                .resident
                .iter()
                .map(|&(ns, bytes)| (charts.seconds(ns), bytes as f64 / unit));
            chart.draw_series(LineSeries::new(points, RESIDENT_COLOUR.stroke_width(2)))?;
        }
        // The peak: a dashed line through it from the axis to the top, a dot, and its words
        // at the top on a white ground (the resident line may pass there).
        let (px, py) = (charts.seconds(peak_ns), peak_bytes as f64 / unit);
        let dashes = (0..60).map(|i| {
            let from = top * i as f64 / 60.0;
            PathElement::new(vec![(px, from), (px, from + top / 120.0)], PEAK_COLOUR)
        });
        chart.draw_series(dashes)?;
        chart.draw_series(std::iter::once(Circle::new(
            (px, py),
            5,
            PEAK_COLOUR.filled(),
        )))?;
        let words = charts.peak_text();
        let (w, h) = crate::plot::text_size(&words, 14.0);
        let right_half = px > (x.start + x.end) / 2.0;
        let (anchor, left) = if right_half {
            (HPos::Right, -6 - w)
        } else {
            (HPos::Left, 6)
        };
        let text_x = if right_half { -6 } else { 6 };
        chart.plotting_area().draw(
            &(EmptyElement::at((px, top))
                + Rectangle::new(
                    [(left - 3, 4), (left + w + 3, 8 + h)],
                    WHITE.mix(0.9).filled(),
                )
                + Text::new(
                    words,
                    (text_x, 6 + h / 2),
                    ("sans-serif", 14)
                        .into_font()
                        .color(&PEAK_COLOUR)
                        .pos(Pos::new(anchor, VPos::Center)),
                )),
        )?;
        let mut entries: Vec<(RGBColor, String, bool)> = charts
            .site_labels
            .iter()
            .enumerate()
            .map(|(i, label)| (SITE_COLOURS[i % SITE_COLOURS.len()], label.clone(), false))
            .collect();
        if charts.timeline.other_sites > 0 {
            entries.push((
                OTHERS_COLOUR,
                format!("{} other sites", charts.timeline.other_sites),
                false,
            ));
        }
        if !charts.resident.is_empty() {
            let every = if charts.resident_coarse {
                "once a second"
            } else {
                "every 20 ms"
            };
            entries.push((
                RESIDENT_COLOUR,
                format!("resident memory (RSS, {every})"),
                true,
            ));
        }
        entries.push((PEAK_COLOUR, charts.peak_text(), true));
        legend(&side, &entries)
    })
}

/// Allocations and temporary allocations per second over time (heaptrack_gui's
/// "allocations" and "temporary allocations" charts in one).
pub fn rate_chart(charts: &AllocCharts, mut out: impl Write) -> Result<(), Error> {
    let series = &charts.timeline.series;
    if series.intervals.is_empty() {
        return Err(Error::Empty);
    }
    // The timeline's intervals summed `merge` at a time.
    let merge = series.intervals.len().div_ceil(RATE_INTERVALS).max(1);
    let step_s = (series.step_ns * merge as u64) as f64 / 1e9;
    let counts: Vec<(f64, f64, u64, u64)> = series
        .intervals
        .chunks(merge)
        .enumerate()
        .map(|(i, chunk)| {
            (
                charts.seconds(series.interval_start(i * merge)),
                charts.seconds(series.interval_start((i + 1) * merge)),
                chunk.iter().map(|c| c.allocs).sum(),
                chunk.iter().map(|c| c.temporary).sum(),
            )
        })
        .collect();
    let rate = |count: u64| count as f64 / step_s;
    let top = counts
        .iter()
        .map(|&(_, _, allocs, _)| rate(allocs))
        .fold(0.0, f64::max)
        .max(1.0)
        * 1.15;
    let x = charts.time_axis();
    let title = charts.title("Allocations per second", 900);
    svg((1280, 520), &mut out, |root| {
        let (plot, side) = root.split_horizontally(900);
        let mut chart = ChartBuilder::on(&plot)
            .caption(&title, ("sans-serif", CAPTION_SIZE))
            .margin(CHART_MARGIN)
            .x_label_area_size(42)
            .y_label_area_size(86)
            .build_cartesian_2d(x.clone(), 0f64..top)?;
        chart
            .configure_mesh()
            .x_desc("time since the recording started (s)")
            .y_desc("calls per second")
            .y_label_formatter(&|v| per_second(*v))
            .light_line_style(WHITE.mix(0.0))
            .draw()?;
        for (colour, temporary) in [(SITE_COLOURS[0], false), (SITE_COLOURS[1], true)] {
            let points = counts.iter().flat_map(|&(from, to, allocs, temp)| {
                let y = rate(if temporary { temp } else { allocs });
                [(from, y), (to, y)]
            });
            chart.draw_series(LineSeries::new(points, colour.stroke_width(2)))?;
        }
        let every = crate::plot::human_seconds(step_s);
        legend(
            &side,
            &[
                (
                    SITE_COLOURS[0],
                    format!(
                        "heap allocations ({} in all)",
                        thousands(charts.timeline.allocs)
                    ),
                    true,
                ),
                (
                    SITE_COLOURS[1],
                    format!(
                        "temporary allocations ({} in all)",
                        thousands(charts.timeline.temporary)
                    ),
                    true,
                ),
                (WHITE, format!("counted per {every}"), true),
            ],
        )
    })
}

/// A tick value of an axis whose top is `top`: whole numbers from 10 up.
fn axis_number(value: f64, top: f64) -> String {
    if top >= 10.0 {
        format!("{value:.0}")
    } else {
        format!("{value:.1}")
    }
}

/// Intervals of the rate chart, at most: a rate over an interval of a millisecond or two
/// would only show when each tick of the allocation clock fell.
const RATE_INTERVALS: usize = 160;

/// `12,345/s`, `1.2M/s`.
fn per_second(value: f64) -> String {
    if value >= 1e6 {
        format!("{:.1}M/s", value / 1e6)
    } else if value >= 1e4 {
        format!("{:.0}K/s", value / 1e3)
    } else {
        format!("{value:.0}/s")
    }
}

/// `n` with thousands separators.
fn thousands(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// A size bucket's words under its bar: its smallest size (`16 B` for 16 to 31 bytes; the
/// whole range does not fit under a bar of 22).
fn bucket_label(bucket: usize) -> String {
    let (from, _) = SizeHistogram::range(bucket);
    let short = crate::plot::human_bytes(from).replace(" bytes", " B");
    match bucket {
        64.. => format!(">= {short}"),
        _ => short,
    }
}

/// How many heap allocations fell in each power-of-two size (heaptrack_gui's histogram).
pub fn sizes_chart(charts: &AllocCharts, mut out: impl Write) -> Result<(), Error> {
    let buckets: Vec<(usize, u64, u64)> = charts.sizes.buckets().collect();
    let (Some(&(first, ..)), Some(&(last, ..))) = (buckets.first(), buckets.last()) else {
        return Err(Error::Empty);
    };
    let shown: Vec<usize> = (first..=last).collect();
    let count_of = |b: usize| charts.sizes.counts[b];
    let top = shown.iter().map(|&b| count_of(b)).max().unwrap_or(1).max(1) as f64 * 1.15;
    let title = charts.title("Heap allocations by size", 1100);
    let labels: Vec<String> = shown.iter().map(|&b| bucket_label(b)).collect();
    svg((1100, 520), &mut out, |root| {
        let mut chart = ChartBuilder::on(root)
            .caption(&title, ("sans-serif", CAPTION_SIZE))
            .margin(CHART_MARGIN)
            .x_label_area_size(60)
            .y_label_area_size(86)
            .build_cartesian_2d(0f64..shown.len() as f64, 0f64..top)?;
        chart
            .configure_mesh()
            .disable_x_mesh()
            .disable_x_axis()
            .y_desc("heap allocations")
            .y_label_formatter(&|v| thousands(*v as u64))
            .light_line_style(WHITE.mix(0.0))
            .draw()?;
        let bars = shown.iter().enumerate().map(|(i, &b)| {
            let x = i as f64;
            Rectangle::new(
                [(x + 0.12, 0.0), (x + 0.88, count_of(b) as f64)],
                SITE_COLOURS[0].filled(),
            )
        });
        chart.draw_series(bars)?;
        // Each bar's size under it, its count over it, and what the sizes mean.
        let area = chart.plotting_area();
        area.draw(
            &(EmptyElement::at((shown.len() as f64 / 2.0, 0.0))
                + Text::new(
                    "allocation size: each bar from its size to the next bar's (power-of-two buckets)",
                    (0, 34),
                    ("sans-serif", 13)
                        .into_font()
                        .color(&BLACK)
                        .pos(Pos::new(HPos::Center, VPos::Top)),
                )),
        )?;
        for (i, &b) in shown.iter().enumerate() {
            let x = i as f64 + 0.5;
            area.draw(
                &(EmptyElement::at((x, 0.0))
                    + Text::new(
                        labels[i].clone(),
                        (0, 12),
                        ("sans-serif", 11)
                            .into_font()
                            .color(&BLACK)
                            .pos(Pos::new(HPos::Center, VPos::Top)),
                    )),
            )?;
            if count_of(b) > 0 {
                area.draw(
                    &(EmptyElement::at((x, count_of(b) as f64))
                        + Text::new(
                            thousands(count_of(b)),
                            (0, -4),
                            ("sans-serif", 11)
                                .into_font()
                                .color(&BLACK)
                                .pos(Pos::new(HPos::Center, VPos::Bottom)),
                        )),
                )?;
            }
        }
        Ok(())
    })
}

/// The series over time as CSV: per interval its start (s since the recording started),
/// the heap at its highest moment, each site's bytes then and the others', the resident size
/// sampled last by its end, and its allocations and temporary allocations (counts and per
/// second).
pub fn series_csv(charts: &AllocCharts) -> Result<String, Error> {
    let series = &charts.timeline.series;
    let mut csv = csv::Writer::from_writer(Vec::new());
    let mut header: Vec<String> = vec!["time_s".into(), "heap_bytes".into()];
    header.extend(charts.site_labels.iter().cloned());
    header.extend(
        [
            "other_sites_bytes",
            "rss_bytes",
            "allocs",
            "temporary",
            "allocs_per_s",
            "temporary_per_s",
        ]
        .map(String::from),
    );
    csv.write_record(&header)?;
    let step_s = series.step_ns as f64 / 1e9;
    for (i, interval) in series.intervals.iter().enumerate() {
        let mut row = vec![
            format!("{:.6}", charts.seconds(series.interval_start(i))),
            interval.heap_bytes.to_string(),
        ];
        row.extend(series.slots_at(i).iter().map(u64::to_string));
        let end = series.interval_start(i + 1).saturating_sub(1);
        row.push(
            charts
                .resident_at(end)
                .map_or(String::new(), |b| b.to_string()),
        );
        row.push(interval.allocs.to_string());
        row.push(interval.temporary.to_string());
        row.push(format!("{:.1}", interval.allocs as f64 / step_s));
        row.push(format!("{:.1}", interval.temporary as f64 / step_s));
        csv.write_record(&row)?;
    }
    String::from_utf8(csv.into_inner().map_err(|e| Error::Io(e.into_error()))?)
        .map_err(|e| Error::Draw(e.to_string()))
}

/// The size histogram as CSV: `from,to,count,bytes` per non-empty power-of-two bucket.
pub fn sizes_csv(charts: &AllocCharts) -> Result<String, Error> {
    let mut csv = csv::Writer::from_writer(Vec::new());
    csv.write_record(["from", "to", "count", "bytes"])?;
    for (bucket, count, bytes) in charts.sizes.buckets() {
        let (from, to) = SizeHistogram::range(bucket);
        csv.write_record([from, to, count, bytes].map(|v| v.to_string()))?;
    }
    String::from_utf8(csv.into_inner().map_err(|e| Error::Io(e.into_error()))?)
        .map_err(|e| Error::Draw(e.to_string()))
}

/// Everything the charts draw as one JSON document.
pub fn series_json(charts: &AllocCharts) -> serde_json::Value {
    let series = &charts.timeline.series;
    let (peak_ns, peak_bytes) = charts.timeline.peak;
    let intervals: Vec<serde_json::Value> = series
        .intervals
        .iter()
        .enumerate()
        .map(|(i, interval)| {
            let slots = series.slots_at(i);
            let end = series.interval_start(i + 1).saturating_sub(1);
            serde_json::json!({
                "time_s": charts.seconds(series.interval_start(i)),
                "heap_bytes": interval.heap_bytes,
                "high_s": interval.high_ns.map(|ns| charts.seconds(ns)),
                "sites_bytes": &slots[..slots.len() - 1],
                "other_sites_bytes": slots[slots.len() - 1],
                "rss_bytes": charts.resident_at(end),
                "allocs": interval.allocs,
                "temporary": interval.temporary,
            })
        })
        .collect();
    serde_json::json!({
        "pid": charts.pid(),
        "process": charts.process,
        "command": charts.command,
        "interval_s": series.step_ns as f64 / 1e9,
        "peak": {"time_s": charts.seconds(peak_ns), "bytes": peak_bytes},
        "sites": charts.timeline.sites.iter().zip(&charts.site_labels).map(|((location, most), label)| serde_json::json!({
            "label": label,
            "function": &*location.function,
            "file": &*location.file,
            "line": location.line,
            "most_live_bytes": most,
        })).collect::<Vec<_>>(),
        "other_sites": charts.timeline.other_sites,
        "allocs": charts.timeline.allocs,
        "temporary": charts.timeline.temporary,
        "intervals": intervals,
        "rss": charts.resident.iter().map(|&(ns, bytes)| serde_json::json!({"time_s": charts.seconds(ns), "bytes": bytes})).collect::<Vec<_>>(),
        "rss_every_s": if charts.resident_coarse { 1.0 } else { 0.02 },
        "sizes": charts.sizes.buckets().map(|(bucket, count, bytes)| {
            let (from, to) = SizeHistogram::range(bucket);
            serde_json::json!({"from": from, "to": to, "count": count, "bytes": bytes})
        }).collect::<Vec<_>>(),
    })
}

/// The resident memory of process `pid` over time: the recorder's series every 20 ms, else
/// (recordings made before it) the stats file's once a second; `true` for the latter.
fn resident_of(dir: &Path, pid: u32) -> (Vec<(u64, u64)>, bool) {
    if let Ok(series) = fltrace_trace::stats::series(&files::resident(dir, pid), "rss")
        && !series.is_empty()
    {
        return (series, false);
    }
    let seconds = fltrace_trace::stats::series(&files::stats(dir, pid), "rss").unwrap_or_default();
    let series = seconds
        .into_iter()
        .filter(|&(_, bytes)| bytes > 0)
        .map(|(s, bytes)| (s.saturating_mul(1_000_000_000), bytes))
        .collect();
    (series, true)
}

/// A file `visualize --allocs` writes: where, and what.
pub struct ChartFile {
    /// `fltrace-data-<kind>-<pid>.<svg|csv|json>` in the directory asked for.
    pub path: PathBuf,
    /// The file's bytes.
    pub bytes: Vec<u8>,
}

impl ChartFile {
    /// Writes the file (a new one, or one of the user's own).
    pub fn write(&self) -> Result<(), fltrace_trace::Error> {
        fltrace_trace::files::write(&self.path, &self.bytes)
    }
}

/// The charts of every process of `loaded` recorded with allocations, in `format`, handed to
/// `each` as they are made (`Err` with the path of a flamegraph with nothing to draw: no
/// leaks). Processes recorded without allocations are named in `without`.
pub fn alloc_chart_files<E: From<Error>>(
    loaded: &Loaded,
    label: FrameLabel,
    format: ChartFormat,
    dir: &Path,
    mut each: impl FnMut(Result<ChartFile, PathBuf>) -> Result<(), E>,
) -> Result<Vec<u32>, E> {
    let (processes, without) = alloc_processes(loaded, 0);
    let recording = &loaded.recording;
    for (i, ((trace, _), alloc_stacks)) in
        loaded.traces.iter().zip(&loaded.alloc_stacks).enumerate()
    {
        let Some(process) = processes.iter().find(|p| p.trace.pid == trace.pid) else {
            continue;
        };
        // The totals of the pass the load made, else one of the events alone.
        let computed;
        let totals: &PassTotals = match loaded.streamed.get(i).and_then(Option::as_ref) {
            Some(streamed) => &streamed.totals,
            None => {
                computed = stream_largest_blocks(recording, trace.pid, trace, 0)
                    .map_err(|e| E::from(Error::Trace(e)))?;
                &computed
            }
        };
        let (resident, resident_coarse) = resident_of(&recording.dir, trace.pid);
        // From the process's first mapping (its exec) to its last event, fault or sample.
        let first_mapping = trace
            .mappings
            .iter()
            .map(|m| m.time_ns)
            .filter(|&t| t > 0)
            .min();
        let start = [first_mapping, resident.first().map(|&(t, _)| t)]
            .into_iter()
            .flatten()
            .min()
            .unwrap_or(recording.session.start_ns);
        let last_fault =
            last_fault_ns(recording, trace.pid).map_err(|e| E::from(Error::Trace(e)))?;
        let end = last_fault
            .max(totals.last_event_ns)
            .max(resident.last().map_or(0, |&(t, _)| t))
            .max(start + 1);
        let timeline = alloc_timeline(
            recording,
            trace,
            alloc_stacks,
            totals,
            start..end,
            CHART_SITES,
            CHART_INTERVALS,
        )
        .map_err(|e| E::from(Error::Trace(e)))?;
        let charts = AllocCharts {
            site_labels: timeline.sites.iter().map(|(l, _)| site_label(l)).collect(),
            timeline,
            resident,
            resident_coarse,
            sizes: process.stats.heap_sizes.clone(),
            recording_start_ns: recording.session.start_ns,
            process: process_names(trace).join(" then "),
            command: loaded.command().to_owned(),
        };
        let pid = trace.pid;
        let path = |kind: &str, ext: &str| files::path(dir, kind, pid, ext);
        let made = |path: PathBuf, bytes: Result<Vec<u8>, Error>| -> Result<ChartFile, Error> {
            Ok(ChartFile {
                path,
                bytes: bytes?,
            })
        };
        let drawn = |draw: fn(&AllocCharts, &mut Vec<u8>) -> Result<(), Error>| {
            let mut bytes = Vec::new();
            draw(&charts, &mut bytes).map(|()| bytes)
        };
        match format {
            ChartFormat::Svg => {
                each(Ok(made(
                    path("allocmem", "svg"),
                    drawn(|c, out| memory_chart(c, out)),
                )?))?;
                each(Ok(made(
                    path("allocrate", "svg"),
                    drawn(|c, out| rate_chart(c, out)),
                )?))?;
                match drawn(|c, out| sizes_chart(c, out)) {
                    Err(Error::Empty) => each(Err(path("allocsizes", "svg")))?,
                    bytes => each(Ok(made(path("allocsizes", "svg"), bytes)?))?,
                }
                let stats = &process.stats;
                for (kind, what, bytes) in [
                    (
                        "flamegraph-peak",
                        format!(
                            "Heap alive at its peak ({})",
                            crate::plot::human_bytes(stats.peak_bytes)
                        ),
                        Box::new(
                            stats
                                .stacks
                                .iter()
                                .map(|(&id, &(kind, t))| (id, kind, t.peak_bytes)),
                        )
                            as Box<dyn Iterator<Item = (u32, BlockKind, u64)>>,
                    ),
                    (
                        "flamegraph-leaks",
                        "Memory leaked (alive at the end)".to_owned(),
                        Box::new(
                            stats
                                .stacks
                                .iter()
                                .map(|(&id, &(kind, t))| (id, kind, t.leaked_bytes)),
                        ),
                    ),
                ] {
                    let flames = memory_flames(trace, alloc_stacks, bytes, label);
                    let path = path(kind, "svg");
                    if flames.stacks.is_empty() {
                        each(Err(path))?;
                        continue;
                    }
                    let mut bytes = Vec::new();
                    crate::memory_flamegraph(
                        &flames.stacks,
                        &flames.notes,
                        &charts.flame_title(&what),
                        &mut bytes,
                    )
                    .map_err(E::from)?;
                    each(Ok(ChartFile { path, bytes }))?;
                }
            }
            ChartFormat::Csv => {
                each(Ok(made(
                    path("allocmem", "csv"),
                    series_csv(&charts).map(String::into_bytes),
                )?))?;
                each(Ok(made(
                    path("allocsizes", "csv"),
                    sizes_csv(&charts).map(String::into_bytes),
                )?))?;
            }
            ChartFormat::Json => {
                let mut bytes = serde_json::to_vec_pretty(&series_json(&charts))
                    .map_err(|e| E::from(Error::Draw(e.to_string())))?;
                bytes.push(b'\n');
                each(Ok(ChartFile {
                    path: path("allocmem", "json"),
                    bytes,
                }))?;
            }
        }
    }
    Ok(without)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_and_rates_read_shortly() {
        assert_eq!(bucket_label(5), "16 B");
        assert_eq!(bucket_label(0), "0 B");
        assert_eq!(bucket_label(21), "1 MiB");
        assert_eq!(per_second(12_345.0), "12K/s");
        assert_eq!(per_second(2_500_000.0), "2.5M/s");
        assert_eq!(thousands(1_234_567), "1,234,567");
    }
}
