//! The WORDS'23 figure: page faults and faulting code locations against local memory.

use std::io::Write;

use fltrace_trace::WssRow;
use plotters::prelude::*;

use crate::{Error, HeatLabels, Heatmap};

/// One run of a local-memory sweep.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SweepPoint {
    /// Local memory as a percentage of the program's peak.
    pub local_percent: f64,
    /// Faults recorded.
    pub faults: u64,
    /// Code locations (lines) covering 95% of the faults.
    pub locations_95: u64,
}

/// Draws faults (left axis, log scale) and locations covering 95% of faults (right axis)
/// against local memory, as an SVG file.
pub fn sweep_plot(points: &[SweepPoint], title: &str, mut out: impl Write) -> Result<(), Error> {
    if points.is_empty() {
        return Err(Error::Empty);
    }
    crate::plot::ensure_font()?;
    // Drawn into memory: the caller creates the file (plotters' path backends would open it
    // themselves, following links).
    let mut svg = String::new();
    let draw = |svg: &mut String| -> Result<(), Box<dyn std::error::Error>> {
        let root = SVGBackend::with_string(svg, (900, 540)).into_drawing_area();
        root.fill(&WHITE)?;
        let max_faults = points.iter().map(|p| p.faults).max().unwrap_or(1).max(1) as f64;
        // Counts on integer axes: the locations' axis is of integers, its top a whole number.
        let max_locations = points
            .iter()
            .map(|p| p.locations_95)
            .max()
            .unwrap_or(1)
            .max(1);
        let locations_top = (max_locations as f64 * 1.2).ceil() as u64;
        let mut chart = ChartBuilder::on(&root)
            .caption(title, ("sans-serif", 22))
            .margin(16)
            .x_label_area_size(44)
            .y_label_area_size(70)
            .right_y_label_area_size(60)
            .build_cartesian_2d(0f64..100f64, (1f64..max_faults * 2.0).log_scale())?
            .set_secondary_coord(0f64..100f64, 0u64..locations_top);
        chart
            .configure_mesh()
            .x_desc("local memory (% of peak)")
            .y_desc("page faults")
            .x_label_formatter(&|v| format!("{v:.0}%"))
            .y_label_formatter(&|v| thousands(v.round() as u64))
            .draw()?;
        chart
            .configure_secondary_axes()
            .y_desc("code locations covering 95% of faults")
            .y_labels((locations_top as usize + 1).min(11))
            .y_label_formatter(&|v| thousands(*v))
            .draw()?;
        let faults: Vec<(f64, f64)> = points
            .iter()
            .map(|p| (p.local_percent, (p.faults as f64).max(1.0)))
            .collect();
        chart
            .draw_series(LineSeries::new(faults.clone(), RED.stroke_width(2)))?
            .label("page faults")
            .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], RED));
        chart.draw_series(
            faults
                .iter()
                .map(|&(x, y)| Circle::new((x, y), 4, RED.filled())),
        )?;
        let locations: Vec<(f64, u64)> = points
            .iter()
            .map(|p| (p.local_percent, p.locations_95))
            .collect();
        chart
            .draw_secondary_series(LineSeries::new(locations.clone(), BLUE.stroke_width(2)))?
            .label("locations covering 95%")
            .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], BLUE));
        chart.draw_secondary_series(
            locations
                .iter()
                .map(|&(x, y)| TriangleMarker::new((x, y), 5, BLUE.filled())),
        )?;
        // Upper right: at full local memory both curves are at their lowest.
        chart
            .configure_series_labels()
            .position(SeriesLabelPosition::UpperRight)
            .background_style(WHITE.mix(0.8))
            .border_style(BLACK)
            .draw()?;
        root.present()?;
        Ok(())
    };
    draw(&mut svg).map_err(|e| Error::Io(std::io::Error::other(e.to_string())))?;
    out.write_all(svg.as_bytes())?;
    Ok(())
}

/// `n` with thousands separators: `1,000,000`.
fn thousands(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::with_capacity(digits.len() + digits.len() / 3);
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// A tick label of an axis whose top is `top`: whole numbers from 10 up, one decimal below.
fn axis_label(value: f64, top: f64) -> String {
    if top >= 10.0 {
        format!("{value:.0}")
    } else {
        format!("{value:.1}")
    }
}

/// Draws working-set size (and resident size) over time as an SVG file.
pub fn wss_plot(samples: &[WssRow], title: &str, mut out: impl Write) -> Result<(), Error> {
    if samples.is_empty() {
        return Err(Error::Empty);
    }
    crate::plot::ensure_font()?;
    // Drawn into memory: the caller creates the file (plotters' path backends would open it
    // themselves, following links).
    let mut svg = String::new();
    let draw = |svg: &mut String| -> Result<(), Box<dyn std::error::Error>> {
        let root = SVGBackend::with_string(svg, (900, 480)).into_drawing_area();
        root.fill(&WHITE)?;
        let mb = |b: u64| b as f64 / (1 << 20) as f64;
        let end = samples
            .iter()
            .map(|s| s.time_s)
            .fold(0.0, f64::max)
            .max(0.1);
        // A third above the highest point: the legend's room, so that it covers no curve.
        let top = samples
            .iter()
            .map(|s| mb(s.wss_bytes.max(s.rss_bytes)))
            .fold(0.0, f64::max)
            .max(1.0)
            * 1.35;
        let mut chart = ChartBuilder::on(&root)
            .caption(title, ("sans-serif", 22))
            .margin(16)
            .x_label_area_size(44)
            .y_label_area_size(70)
            .build_cartesian_2d(0f64..end, 0f64..top)?;
        chart
            .configure_mesh()
            .x_desc("time (s)")
            .y_desc("MB")
            .x_label_formatter(&|v| axis_label(*v, end))
            .y_label_formatter(&|v| axis_label(*v, top))
            .draw()?;
        chart
            .draw_series(LineSeries::new(
                samples.iter().map(|s| (s.time_s, mb(s.wss_bytes))),
                RED.stroke_width(2),
            ))?
            .label("working set (referenced per interval)")
            .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], RED));
        chart
            .draw_series(LineSeries::new(
                samples.iter().map(|s| (s.time_s, mb(s.rss_bytes))),
                BLUE.stroke_width(1),
            ))?
            .label("resident")
            .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], BLUE));
        chart
            .configure_series_labels()
            .position(SeriesLabelPosition::UpperLeft)
            .background_style(WHITE.mix(0.8))
            .border_style(BLACK)
            .draw()?;
        root.present()?;
        Ok(())
    };
    draw(&mut svg).map_err(|e| Error::Io(std::io::Error::other(e.to_string())))?;
    out.write_all(svg.as_bytes())?;
    Ok(())
}

/// The memref patch's two plots side by side, as an SVG document: events per column of the
/// map over time (temporal) and per row over the packed addresses (spatial).
pub fn memref_plots(map: &Heatmap, labels: &HeatLabels, mut out: impl Write) -> Result<(), Error> {
    crate::plot::ensure_font()?;
    let temporal = map.temporal();
    let spatial = map.spatial();
    let count_name = if labels.count_name.is_empty() {
        "events"
    } else {
        labels.count_name.as_str()
    };
    let (t0, t1) = map.time_range;
    let start = (t0 - map.time_origin().min(t0)) as f64 / 1e9;
    let span = (t1 - t0 + 1) as f64 / 1e9;
    let column = span / map.width as f64;
    let origin = if labels.time_origin.is_empty() {
        "the first event"
    } else {
        labels.time_origin.as_str()
    };
    let mut svg = String::new();
    let draw =
        |svg: &mut String| -> Result<(), Box<dyn std::error::Error>> {
            let root = SVGBackend::with_string(svg, (1200, 440)).into_drawing_area();
            root.fill(&WHITE)?;
            let (left, right) = root.split_horizontally(600);
            let label_font = ("sans-serif", 14);
            // Temporal: seconds along x, ticks as many as their labels leave room for.
            let top = temporal.iter().copied().max().unwrap_or(1).max(1) as f64 * 1.1;
            let mut chart = ChartBuilder::on(&left)
                .caption(
                    format!("temporal: {count_name} over time"),
                    ("sans-serif", 18),
                )
                .margin(14)
                .x_label_area_size(44)
                .y_label_area_size(70)
                .build_cartesian_2d(start..start + span, 0f64..top)?;
            let step = crate::plot::nice_step(span, 6);
            chart
                .configure_mesh()
                .x_labels(7)
                .y_labels(6)
                .label_style(label_font)
                .axis_desc_style(label_font)
                .x_label_formatter(&|v| crate::plot::tick_label(*v, step))
                .y_label_formatter(&|v| format!("{v:.0}"))
                .x_desc(format!("time since {origin} (s)"))
                .y_desc(format!(
                    "{count_name} per {}",
                    crate::plot::human_seconds(column)
                ))
                .draw()?;
            chart.draw_series(temporal.iter().enumerate().filter(|(_, v)| **v > 0).map(
                |(i, &v)| {
                    let x = start + i as f64 * column;
                    Rectangle::new([(x, 0.0), (x + column, v as f64)], BLUE.mix(0.7).filled())
                },
            ))?;
            // Spatial: the packed rows along x, labelled with their first address.
            let top = spatial.iter().copied().max().unwrap_or(1).max(1) as f64 * 1.1;
            let rows = spatial.len() as f64;
            let widest =
                crate::plot::text_size(&format!("{:#x}", map.row_address(map.height - 1)), 15.0).0;
            let label_count = ((600 - 14 * 2 - 70) / (widest + 24)).max(1) as usize;
            let mut chart = ChartBuilder::on(&right)
                .caption(
                    format!("spatial: {count_name} over address"),
                    ("sans-serif", 18),
                )
                .margin(14)
                .x_label_area_size(44)
                .y_label_area_size(70)
                .build_cartesian_2d(0f64..rows, 0f64..top)?;
            chart
                .configure_mesh()
                .x_labels(label_count)
                .y_labels(6)
                .label_style(label_font)
                .axis_desc_style(label_font)
                .y_label_formatter(&|v| format!("{v:.0}"))
                .x_label_formatter(&|r| {
                    format!("{:#x}", map.row_address((*r as usize).min(map.height - 1)))
                })
                .x_desc(format!(
                    "address, touched ranges packed (one row = {})",
                    crate::plot::human_bytes(map.bytes_per_row())
                ))
                .y_desc(format!("{count_name} per row"))
                .draw()?;
            chart.draw_series(spatial.iter().enumerate().filter(|(_, v)| **v > 0).map(
                |(i, &v)| {
                    Rectangle::new(
                        [(i as f64, 0.0), (i as f64 + 1.0, v as f64)],
                        BLUE.mix(0.7).filled(),
                    )
                },
            ))?;
            root.present()?;
            Ok(())
        };
    draw(&mut svg).map_err(|e| Error::Draw(e.to_string()))?;
    out.write_all(svg.as_bytes())?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The plot is an SVG with both series and the axis titles.
    #[test]
    fn draws_both_series() {
        let dir = std::env::temp_dir().join(format!("fltrace-curve-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("sweep.svg");
        let points = [
            SweepPoint {
                local_percent: 100.0,
                faults: 1000,
                locations_95: 3,
            },
            SweepPoint {
                local_percent: 50.0,
                faults: 50_000,
                locations_95: 7,
            },
        ];
        sweep_plot(&points, "sweep", std::fs::File::create(&path).unwrap()).unwrap();
        let svg = std::fs::read_to_string(&path).unwrap();
        assert!(svg.starts_with("<svg"));
        assert!(svg.contains("local memory (% of peak)"));
        assert!(svg.contains("locations covering 95%"));
        assert!(svg.contains("<polyline"), "line series drawn");
        // Whole numbers on every axis, thousands separated: no `1000000.0`.
        let labels = texts(&svg);
        assert!(labels.iter().any(|l| l == "10,000"), "{labels:?}");
        assert!(labels.iter().any(|l| l == "50%"), "{labels:?}");
        assert!(!labels.iter().any(|l| l.contains(".0")), "{labels:?}");
        // The locations' axis: 0 to 9 (7 and a fifth above it), each integer once.
        for n in 0..=9 {
            assert!(
                labels.iter().any(|l| *l == n.to_string()),
                "{n}: {labels:?}"
            );
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// The texts of an SVG's `<text>` elements.
    fn texts(svg: &str) -> Vec<String> {
        svg.split("<text")
            .skip(1)
            .filter_map(|t| {
                let start = t.find('>')? + 1;
                let end = t.find("</text>")?;
                Some(t[start..end].trim().to_owned())
            })
            .collect()
    }

    /// Working-set plots label whole megabytes and seconds on long runs.
    #[test]
    fn wss_axes_whole_numbers() {
        let samples: Vec<WssRow> = (0..20)
            .map(|i| WssRow {
                time_s: f64::from(i),
                wss_bytes: ((i as u64 + 1) * 15) << 20,
                rss_bytes: 300 << 20,
            })
            .collect();
        let mut svg = Vec::new();
        wss_plot(&samples, "wss", &mut svg).unwrap();
        let labels = texts(&String::from_utf8(svg).unwrap());
        assert!(labels.iter().any(|l| l == "100"), "{labels:?}");
        assert!(!labels.iter().any(|l| l.contains('.')), "{labels:?}");
    }
}
