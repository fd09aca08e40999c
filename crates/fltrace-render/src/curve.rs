//! The WORDS'23 figure: page faults and faulting code locations against local memory.

use std::path::Path;

use plotters::prelude::*;

use crate::Error;

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
pub fn sweep_plot(points: &[SweepPoint], title: &str, path: &Path) -> Result<(), Error> {
    if points.is_empty() {
        return Err(Error::Empty);
    }
    let draw = || -> Result<(), Box<dyn std::error::Error>> {
        let root = SVGBackend::new(path, (900, 540)).into_drawing_area();
        root.fill(&WHITE)?;
        let max_faults = points.iter().map(|p| p.faults).max().unwrap_or(1).max(1) as f64;
        let max_locations = points
            .iter()
            .map(|p| p.locations_95)
            .max()
            .unwrap_or(1)
            .max(1) as f64;
        let mut chart = ChartBuilder::on(&root)
            .caption(title, ("sans-serif", 22))
            .margin(16)
            .x_label_area_size(44)
            .y_label_area_size(70)
            .right_y_label_area_size(60)
            .build_cartesian_2d(0f64..100f64, (1f64..max_faults * 2.0).log_scale())?
            .set_secondary_coord(0f64..100f64, 0f64..max_locations * 1.2);
        chart
            .configure_mesh()
            .x_desc("local memory (% of peak)")
            .y_desc("page faults")
            .draw()?;
        chart
            .configure_secondary_axes()
            .y_desc("code locations covering 95% of faults")
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
        let locations: Vec<(f64, f64)> = points
            .iter()
            .map(|p| (p.local_percent, p.locations_95 as f64))
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
        chart
            .configure_series_labels()
            .background_style(WHITE.mix(0.8))
            .border_style(BLACK)
            .draw()?;
        root.present()?;
        Ok(())
    };
    draw().map_err(|e| Error::Io(std::io::Error::other(e.to_string())))
}

/// Draws working-set size (and resident size) over time as an SVG file.
pub fn wss_plot(samples: &[(f64, u64, u64)], title: &str, path: &Path) -> Result<(), Error> {
    if samples.is_empty() {
        return Err(Error::Empty);
    }
    let draw = || -> Result<(), Box<dyn std::error::Error>> {
        let root = SVGBackend::new(path, (900, 480)).into_drawing_area();
        root.fill(&WHITE)?;
        let mb = |b: u64| b as f64 / (1 << 20) as f64;
        let end = samples.iter().map(|s| s.0).fold(0.0, f64::max).max(0.1);
        let top = samples
            .iter()
            .map(|s| mb(s.1.max(s.2)))
            .fold(0.0, f64::max)
            .max(1.0)
            * 1.1;
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
            .draw()?;
        chart
            .draw_series(LineSeries::new(
                samples.iter().map(|s| (s.0, mb(s.1))),
                RED.stroke_width(2),
            ))?
            .label("working set (referenced per interval)")
            .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], RED));
        chart
            .draw_series(LineSeries::new(
                samples.iter().map(|s| (s.0, mb(s.2))),
                BLUE.stroke_width(1),
            ))?
            .label("resident")
            .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], BLUE));
        chart
            .configure_series_labels()
            .background_style(WHITE.mix(0.8))
            .border_style(BLACK)
            .draw()?;
        root.present()?;
        Ok(())
    };
    draw().map_err(|e| Error::Io(std::io::Error::other(e.to_string())))
}

/// The memref patch's two plots side by side: events per time bucket (temporal) and per
/// address row (spatial), as an SVG file.
pub fn memref_plots(
    temporal: &[u64],
    spatial: &[u64],
    title: &str,
    path: &Path,
) -> Result<(), Error> {
    if temporal.is_empty() || spatial.is_empty() {
        return Err(Error::Empty);
    }
    let draw = || -> Result<(), Box<dyn std::error::Error>> {
        let root = SVGBackend::new(path, (1100, 420)).into_drawing_area();
        root.fill(&WHITE)?;
        let (left, right) = root.split_horizontally(550);
        for (area, values, caption, x_desc) in [
            (
                &left,
                temporal,
                "temporal: events per time bucket",
                "time bucket",
            ),
            (
                &right,
                spatial,
                "spatial: events per address row",
                "address row (packed)",
            ),
        ] {
            let top = values.iter().copied().max().unwrap_or(1).max(1) as f64 * 1.1;
            let mut chart = ChartBuilder::on(area)
                .caption(format!("{title}: {caption}"), ("sans-serif", 15))
                .margin(12)
                .x_label_area_size(36)
                .y_label_area_size(60)
                .build_cartesian_2d(0f64..values.len() as f64, 0f64..top)?;
            chart
                .configure_mesh()
                .x_desc(x_desc)
                .y_desc("events")
                .draw()?;
            chart.draw_series(values.iter().enumerate().map(|(i, &v)| {
                Rectangle::new(
                    [(i as f64, 0.0), (i as f64 + 1.0, v as f64)],
                    BLUE.mix(0.7).filled(),
                )
            }))?;
        }
        root.present()?;
        Ok(())
    };
    draw().map_err(|e| Error::Io(std::io::Error::other(e.to_string())))
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
        sweep_plot(&points, "sweep", &path).unwrap();
        let svg = std::fs::read_to_string(&path).unwrap();
        assert!(svg.starts_with("<svg"));
        assert!(svg.contains("local memory (% of peak)"));
        assert!(svg.contains("locations covering 95%"));
        assert!(svg.contains("<polyline"), "line series drawn");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
