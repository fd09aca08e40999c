//! The heatmap as a figure: cells, a time axis in seconds, an address axis naming the band of
//! rows each mapping takes, allocation outlines and a colour legend, laid out once in pixels
//! for both the SVG and the PNG. Every label is measured before it is placed, and one that
//! would overlap another is shortened with an ellipsis or left out (its full text stays in the
//! SVG as a hover title).

use plotters::style::RGBColor;
use plotters::style::colors::{BLACK, WHITE};

use super::{ALLOC_OUTLINE, Heatmap, color_of};
use crate::plot::{
    Anchor, Bounds, Figure, Shape, Taken, elide, human_bytes, human_seconds, nice_step, text_size,
    tick_label, ticks,
};

/// What the map shows, in words.
#[derive(Debug, Clone, Default)]
pub struct HeatLabels {
    /// The title above the map.
    pub title: String,
    /// A line under it: how many events of which process.
    pub subtitle: String,
    /// What a cell counts, plural: `faults`, `samples`.
    pub count_name: String,
    /// What time 0 is, as in "time since {the recording started}".
    pub time_origin: String,
}

/// Font sizes, in plotters' units (the SVG's `font-size` is these divided by 1.24).
pub(crate) const TITLE: f64 = 20.0;
pub(crate) const TEXT: f64 = 14.0;
pub(crate) const SMALL: f64 = 12.0;
const PAD: i32 = 10;
const TICK: i32 = 5;
/// The widest a band's name may be before it is elided.
const NAME_WIDTH: i32 = 170;
/// The address axis: at most this many pixels of cells, as the time axis.
const PLOT_HEIGHT: usize = 640;
const PLOT_WIDTH: usize = 1024;
const AXIS: RGBColor = RGBColor(40, 40, 40);
const GAP_LINE: RGBColor = RGBColor(200, 200, 200);
const BAND_LINE: RGBColor = RGBColor(150, 150, 150);
const LABEL_GREEN: RGBColor = RGBColor(0, 100, 0);
/// Room between two labels.
const SPACING: i32 = 3;

/// Where the cells lie in the figure.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Grid {
    pub(crate) left: i32,
    pub(crate) top: i32,
    pub(crate) cell_w: i32,
    pub(crate) cell_h: i32,
    cols: usize,
    rows: usize,
}

impl Grid {
    pub(crate) fn right(&self) -> i32 {
        self.left + self.cell_w * self.cols as i32
    }

    pub(crate) fn bottom(&self) -> i32 {
        self.top + self.cell_h * self.rows as i32
    }

    /// The pixels of a cell (row 0 at the bottom).
    pub(crate) fn cell(&self, col: usize, row: usize) -> Bounds {
        let x = self.left + col as i32 * self.cell_w;
        let y = self.top + (self.rows - 1 - row.min(self.rows - 1)) as i32 * self.cell_h;
        [x, y, x + self.cell_w, y + self.cell_h]
    }

    /// The y of the edge below `row`.
    fn below(&self, row: usize) -> i32 {
        self.cell(0, row)[3]
    }

    /// The y of the edge above `row`.
    fn above(&self, row: usize) -> i32 {
        self.cell(0, row)[1]
    }
}

/// A part of a legend entry.
enum Part {
    Text(String),
    /// The colour ramp of reads (false) or writes (true), 1 to the busiest cell's count.
    Ramp(bool, u32),
    Swatch(RGBColor),
    Outline,
    GapLine,
}

const RAMP_WIDTH: i32 = 100;
const SWATCH: i32 = 14;

impl Part {
    fn width(&self) -> i32 {
        match self {
            Part::Text(t) => text_size(t, TEXT).0,
            Part::Ramp(..) => RAMP_WIDTH,
            Part::Swatch(_) | Part::Outline | Part::GapLine => SWATCH,
        }
    }
}

impl Heatmap {
    /// The figure and where its cells lie.
    pub(crate) fn layout_figure(&self, labels: &HeatLabels) -> (Figure, Grid) {
        let cell_w = (PLOT_WIDTH / self.width).max(1) as i32;
        let cell_h = (PLOT_HEIGHT / self.height).max(1) as i32;
        let text_h = text_size("0x", TEXT).1;
        let widest_address = self
            .bands
            .iter()
            .map(|b| text_size(&format!("{:#x}", b.end), TEXT).0)
            .max()
            .unwrap_or(0);
        let widest_name = self
            .bands
            .iter()
            .filter(|b| !b.name.is_empty())
            .map(|b| text_size(&b.name, TEXT).0.min(NAME_WIDTH))
            .max();
        let top = PAD + TITLE as i32 + 6 + text_h + 12;
        let left = PAD + text_h + 10 + widest_address + 4 + TICK + 1;
        let grid = Grid {
            left,
            top,
            cell_w,
            cell_h,
            cols: self.width,
            rows: self.height,
        };
        let names_x = grid.right() + 20;
        let right = match widest_name {
            Some(w) => names_x + w + PAD,
            None => grid.right() + 40,
        };
        let mut figure = Figure {
            width: right as u32,
            ..Figure::default()
        };
        let legend = self.legend(labels);
        let width = legend_width(&legend).max(right - 2 * PAD) + 2 * PAD;
        figure.width = width as u32;

        self.draw_cells(&mut figure, grid);
        self.draw_time_axis(&mut figure, grid, labels, text_h);
        self.draw_address_axis(&mut figure, grid, text_h);
        self.draw_band_names(&mut figure, grid, names_x, right - PAD, text_h);
        self.draw_allocations(&mut figure, grid);
        if let Some(title) = elide(&labels.title, TITLE, width - 2 * PAD) {
            figure.text((PAD, PAD + 10), title, TITLE, BLACK, Anchor::Left);
        }
        if let Some(subtitle) = elide(&labels.subtitle, TEXT, width - 2 * PAD) {
            figure.text(
                (PAD, PAD + TITLE as i32 + 6 + text_h / 2),
                subtitle,
                TEXT,
                AXIS,
                Anchor::Left,
            );
        }
        // The legend under the time axis's title, in as many rows as it needs.
        let legend_top = grid.bottom() + TICK + 3 + text_h + 8 + text_h + 16;
        let bottom = draw_legend(&mut figure, &legend, legend_top, width - PAD, text_h);
        figure.height = (bottom + PAD) as u32;
        (figure, grid)
    }

    /// The figure as drawn in both files.
    pub(crate) fn figure(&self, labels: &HeatLabels) -> Figure {
        self.layout_figure(labels).0
    }

    fn draw_cells(&self, figure: &mut Figure, grid: Grid) {
        // Lines under the cells: packed gaps light, mapping changes darker, both visible only
        // where nothing was touched.
        for (row, _) in self.boundaries.iter().filter(|(row, _)| *row > 0) {
            let y = grid.below(*row);
            figure.line((grid.left, y), (grid.right() - 1, y), GAP_LINE);
        }
        for band in self.bands.iter().skip(1) {
            let y = grid.below(band.rows.0);
            figure.line((grid.left, y), (grid.right() - 1, y), BAND_LINE);
        }
        for row in 0..self.height {
            // One box per run of equal colours in a row: far fewer SVG elements.
            let mut col = 0;
            while col < self.width {
                let color = self.color(col, row);
                let mut end = col + 1;
                while end < self.width && self.color(end, row) == color {
                    end += 1;
                }
                if color != [255, 255, 255] {
                    let first = grid.cell(col, row);
                    let last = grid.cell(end - 1, row);
                    figure.fill(
                        [first[0], first[1], last[2], last[3]],
                        RGBColor(color[0], color[1], color[2]),
                    );
                }
                col = end;
            }
        }
        figure.outline(
            [
                grid.left - 1,
                grid.top - 1,
                grid.right() + 1,
                grid.bottom() + 1,
            ],
            AXIS,
        );
    }

    /// Seconds since the origin along the bottom, as many ticks as their labels leave room for.
    fn draw_time_axis(&self, figure: &mut Figure, grid: Grid, labels: &HeatLabels, text_h: i32) {
        let (t0, t1) = self.time_range;
        let lo = (t0 - self.time_origin.min(t0)) as f64 / 1e9;
        // Columns split t0..=t1 evenly: the right edge is one nanosecond past t1.
        let span = (t1 - t0 + 1) as f64 / 1e9;
        let plot_w = grid.right() - grid.left;
        let x_of = |t: f64| grid.left + ((t - lo) / span * f64::from(plot_w)).round() as i32;
        let mut max_ticks = (plot_w / 60).max(1) as usize;
        let mut chosen = Vec::new();
        for _ in 0..6 {
            let step = nice_step(span, max_ticks);
            let values = ticks(lo, lo + span, step);
            let widest = values
                .iter()
                .map(|&v| text_size(&tick_label(v, step), TEXT).0)
                .max()
                .unwrap_or(0);
            let step_px = step / span * f64::from(plot_w);
            chosen = values.iter().map(|&v| (v, tick_label(v, step))).collect();
            if step_px >= f64::from(widest + 4 * SPACING) || max_ticks == 1 {
                break;
            }
            max_ticks = ((f64::from(plot_w) / f64::from(widest + 4 * SPACING)) as usize).max(1);
        }
        let mut taken = Taken::default();
        let y = grid.bottom() + 1;
        for (value, label) in chosen {
            let x = x_of(value).clamp(grid.left, grid.right() - 1);
            let at = (x, y + TICK + 3);
            let bounds = Figure::text_bounds(at, &label, TEXT, Anchor::Top);
            if taken.place(widen(bounds, SPACING)) {
                figure.line((x, y), (x, y + TICK - 1), AXIS);
                figure.text(at, label, TEXT, BLACK, Anchor::Top);
            }
        }
        let origin = if labels.time_origin.is_empty() {
            "the first event"
        } else {
            labels.time_origin.as_str()
        };
        let columns = human_seconds(span / self.width as f64);
        figure.text(
            ((grid.left + grid.right()) / 2, y + TICK + 3 + text_h + 8),
            format!("time since {origin} (s); one column = {columns}"),
            TEXT,
            BLACK,
            Anchor::Top,
        );
    }

    /// Hex addresses on the left: where each band starts first, then range gaps and rows inside
    /// tall bands wherever there is room.
    fn draw_address_axis(&self, figure: &mut Figure, grid: Grid, text_h: i32) {
        let mut candidates: Vec<(i32, fltrace_trace::VirtAddr)> = Vec::new();
        let mut by_size: Vec<&super::Band> = self.bands.iter().collect();
        by_size.sort_by_key(|b| std::cmp::Reverse(b.blocks));
        candidates.extend(by_size.iter().map(|b| (grid.below(b.rows.0), b.start)));
        if let Some(last) = self.bands.last() {
            candidates.push((grid.above(last.rows.1), last.end));
        }
        candidates.extend(
            self.boundaries
                .iter()
                .map(|&(row, addr)| (grid.below(row), fltrace_trace::VirtAddr::new(addr))),
        );
        // Rows inside tall bands, about every four labels' height.
        let every = ((4 * text_h) / grid.cell_h).max(1) as usize;
        for band in &by_size {
            let mut row = band.rows.0 + every;
            while row + every / 2 <= band.rows.1 {
                candidates.push((grid.below(row), self.row_address(row)));
                row += every;
            }
        }
        let mut taken = Taken::default();
        let x = grid.left - 1 - TICK - 4;
        for (y, addr) in candidates {
            let label = format!("{addr:#x}");
            let at = (x, y);
            let bounds = Figure::text_bounds(at, &label, TEXT, Anchor::Right);
            if taken.place(widen(bounds, SPACING)) {
                figure.line((grid.left - 1 - TICK, y), (grid.left - 2, y), AXIS);
                figure.text(at, label, TEXT, BLACK, Anchor::Right);
            }
        }
        let title = format!(
            "address (hex), touched ranges packed together; one row = {}",
            human_bytes(self.bytes_per_row())
        );
        let (title_w, _) = text_size(&title, TEXT);
        let plot_h = grid.bottom() - grid.top;
        let title = if title_w <= plot_h {
            Some(title)
        } else {
            elide("address (hex), touched ranges packed", TEXT, plot_h)
                .or_else(|| elide("address", TEXT, plot_h))
        };
        if let Some(title) = title {
            figure.vertical_text(
                (PAD + text_h / 2, (grid.top + grid.bottom()) / 2),
                title,
                TEXT,
            );
        }
    }

    /// Each band's name at its middle on the right, with a bracket over its rows; names that
    /// would collide move up or down a little, with a leader to their bracket, or are left out.
    fn draw_band_names(
        &self,
        figure: &mut Figure,
        grid: Grid,
        names_x: i32,
        limit: i32,
        text_h: i32,
    ) {
        let mut order: Vec<(usize, &super::Band)> = self
            .bands
            .iter()
            .enumerate()
            .filter(|(_, b)| !b.name.is_empty())
            .collect();
        order.sort_by_key(|(_, b)| std::cmp::Reverse(b.blocks));
        let mut taken = Taken::default();
        let step = text_h + SPACING;
        let (mut leaders, mut brackets) = (Vec::new(), Vec::new());
        for (index, band) in order {
            let (y0, y1) = (grid.above(band.rows.1), grid.below(band.rows.0) - 1);
            let middle = (y0 + y1) / 2;
            let room = limit - names_x;
            let Some(label) = elide(&band.name, TEXT, room) else {
                continue;
            };
            let tooltip = format!("{}: {:#x}..{:#x}", band.name, band.start, band.end);
            // Alternate the brackets' column so that neighbours stay apart.
            let bracket_x = grid.right() + 5 + 4 * (index % 2) as i32;
            figure
                .tooltips
                .push(([grid.right() + 1, y0, names_x, y1 + 1], tooltip.clone()));
            let offsets = (0..8).flat_map(|i| [i * step, -(i * step)]).skip(1);
            let spot = std::iter::once(0).chain(offsets).find_map(|offset| {
                let at = (names_x, middle + offset);
                let bounds = Figure::text_bounds(at, &label, TEXT, Anchor::Left);
                let inside =
                    bounds[1] >= grid.top - text_h / 2 && bounds[3] <= grid.bottom() + text_h / 2;
                (inside && taken.place(widen(bounds, 1))).then_some((at, bounds))
            });
            let Some((at, bounds)) = spot else {
                continue;
            };
            leaders.push(((bracket_x, middle), (names_x - 3, at.1)));
            brackets.push((bracket_x, y0, y1));
            figure.text(at, label.clone(), TEXT, BLACK, Anchor::Left);
            if label != band.name {
                figure.tooltips.push((bounds, tooltip));
            }
        }
        // Leaders first: brackets stay whole where a leader crosses them.
        for (from, to) in leaders {
            figure.line(from, to, BAND_LINE);
        }
        for (x, y0, y1) in brackets {
            figure.line((x, y0), (x, y1), AXIS);
            figure.line((x - 2, y0), (x, y0), AXIS);
            figure.line((x - 2, y1), (x, y1), AXIS);
        }
    }

    /// Outlines of the allocations, each labelled inside its top-left corner (or just above it)
    /// where the label overlaps no other.
    fn draw_allocations(&self, figure: &mut Figure, grid: Grid) {
        let mut taken = Taken::default();
        let small_h = text_size("0", SMALL).1;
        for rect in &self.rects {
            let first = grid.cell(rect.cols.0, rect.rows.1);
            let last = grid.cell(rect.cols.1, rect.rows.0);
            let bounds = [first[0], first[1], last[2], last[3]];
            let [r, g, b] = ALLOC_OUTLINE;
            figure.outline(bounds, RGBColor(r, g, b));
            figure.tooltips.push((bounds, rect.label.clone()));
            let inside_w = bounds[2] - bounds[0] - 6;
            let inside = (bounds[3] - bounds[1] >= small_h + 4)
                .then(|| (bounds[0] + 3, bounds[1] + 2 + small_h / 2, inside_w));
            let above = (bounds[1] - small_h - 2 >= grid.top).then(|| {
                (
                    bounds[0],
                    bounds[1] - 2 - small_h / 2,
                    inside_w.max(160).min(grid.right() - bounds[0]),
                )
            });
            for (x, y, room) in [inside, above].into_iter().flatten() {
                let Some(label) = elide(&rect.label, SMALL, room) else {
                    continue;
                };
                let text_bounds = Figure::text_bounds((x, y), &label, SMALL, Anchor::Left);
                if taken.place(widen(text_bounds, 1)) {
                    figure.shapes.push(Shape::Fill {
                        bounds: widen(text_bounds, 1),
                        color: WHITE,
                        alpha: 0.75,
                    });
                    figure.text((x, y), label, SMALL, LABEL_GREEN, Anchor::Left);
                    break;
                }
            }
        }
    }

    /// The legend's entries: the colour scale, and what the lines and outlines mean.
    fn legend(&self, labels: &HeatLabels) -> Vec<Vec<Part>> {
        let count_name = if labels.count_name.is_empty() {
            "events"
        } else {
            labels.count_name.as_str()
        };
        let (t0, t1) = self.time_range;
        let column = human_seconds((t1 - t0 + 1) as f64 / 1e9 / self.width as f64);
        let max = self.max_count.to_string();
        let middle = f64::from(self.max_count).sqrt().round() as u32;
        let [r, g, b] = color_of(middle, middle, self.max_count);
        let purple = RGBColor(r, g, b);
        let mut entries = vec![
            vec![Part::Text(format!(
                "colour: {count_name} per cell ({column} × {}), log scale:",
                human_bytes(self.bytes_per_row())
            ))],
            vec![
                Part::Text("reads".into()),
                Part::Text("1".into()),
                Part::Ramp(false, self.max_count),
                Part::Text(max.clone()),
            ],
            vec![
                Part::Text("writes".into()),
                Part::Text("1".into()),
                Part::Ramp(true, self.max_count),
                Part::Text(max),
            ],
            vec![Part::Swatch(purple), Part::Text("reads and writes".into())],
        ];
        if !self.rects.is_empty() {
            entries.push(vec![
                Part::Outline,
                Part::Text("allocation: lifetime × address range, by allocation site".into()),
            ]);
        }
        if self.boundaries.len() > 1 {
            entries.push(vec![
                Part::GapLine,
                Part::Text("untouched addresses left out".into()),
            ]);
        }
        entries
    }
}

/// A box grown by `by` pixels on every side.
fn widen(b: Bounds, by: i32) -> Bounds {
    [b[0] - by, b[1] - by, b[2] + by, b[3] + by]
}

const PART_GAP: i32 = 6;
const ENTRY_GAP: i32 = 24;

fn entry_width(entry: &[Part]) -> i32 {
    entry.iter().map(Part::width).sum::<i32>() + PART_GAP * (entry.len() as i32 - 1)
}

/// The widest single entry: the legend is at least that wide.
fn legend_width(entries: &[Vec<Part>]) -> i32 {
    entries.iter().map(|e| entry_width(e)).max().unwrap_or(0)
}

/// Draws the entries left to right, wrapping at `limit`; returns the bottom.
fn draw_legend(
    figure: &mut Figure,
    entries: &[Vec<Part>],
    top: i32,
    limit: i32,
    text_h: i32,
) -> i32 {
    let line = text_h + 8;
    let (mut x, mut y) = (PAD, top + text_h / 2);
    for entry in entries {
        let w = entry_width(entry);
        if x > PAD && x + w > limit {
            x = PAD;
            y += line;
        }
        for part in entry {
            let pw = part.width();
            let half = SWATCH / 2;
            match part {
                Part::Text(t) => figure.text((x, y), t.clone(), TEXT, BLACK, Anchor::Left),
                Part::Ramp(write, max) => {
                    const STEPS: i32 = 20;
                    for i in 0..STEPS {
                        // Cells holding 1 up to the busiest count, evenly on the log scale.
                        let max = *max;
                        let n = ((f64::from(max) + 1.0).powf(f64::from(i) / f64::from(STEPS - 1))
                            - 1.0)
                            .round()
                            .max(1.0) as u32;
                        let [r, g, b] = if *write {
                            color_of(0, n, max)
                        } else {
                            color_of(n, 0, max)
                        };
                        let x0 = x + i * RAMP_WIDTH / STEPS;
                        let x1 = x + (i + 1) * RAMP_WIDTH / STEPS;
                        figure.fill([x0, y - half, x1, y + half], RGBColor(r, g, b));
                    }
                    figure.outline(
                        [x - 1, y - half - 1, x + RAMP_WIDTH + 1, y + half + 1],
                        AXIS,
                    );
                }
                Part::Swatch(color) => figure.fill([x, y - half, x + SWATCH, y + half], *color),
                Part::Outline => {
                    let [r, g, b] = ALLOC_OUTLINE;
                    figure.outline([x, y - half, x + SWATCH, y + half], RGBColor(r, g, b));
                }
                Part::GapLine => figure.line((x, y), (x + SWATCH - 1, y), GAP_LINE),
            }
            x += pw + PART_GAP;
        }
        x += ENTRY_GAP - PART_GAP;
    }
    y + text_h / 2 + 2
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{AddressRegion, HeatEvent, HeatmapOptions};
    use fltrace_analyze::LabelledBlock;
    use fltrace_trace::VirtAddr;

    /// A `<text>` element of an SVG, as a browser would place it.
    #[derive(Debug)]
    struct SvgText {
        text: String,
        x: f64,
        y: f64,
        /// The SVG font size.
        size: f64,
        anchor: String,
        dy: String,
        fill: String,
        rotated: bool,
    }

    impl SvgText {
        /// Its box: the width measured with the embedded font at the size plotters drew it
        /// (font-size times 1.24), the height 1.2 times the font size around the baseline the
        /// `dy` gives.
        fn bounds(&self) -> [f64; 4] {
            let w = f64::from(text_size(&self.text, self.size * 1.24).0);
            let h = 1.2 * self.size;
            let x0 = match self.anchor.as_str() {
                "end" => self.x - w,
                "middle" => self.x - w / 2.0,
                _ => self.x,
            };
            let y0 = if self.dy == "0.76em" {
                self.y
            } else {
                self.y - h / 2.0
            };
            [x0, y0, x0 + w, y0 + h]
        }
    }

    fn attr(tag: &str, name: &str) -> Option<String> {
        let start = tag.find(&format!(" {name}=\""))? + name.len() + 3;
        let end = tag[start..].find('"')? + start;
        Some(tag[start..end].to_owned())
    }

    fn texts(svg: &str) -> Vec<SvgText> {
        svg.split("<text ")
            .skip(1)
            .map(|rest| {
                let tag_end = rest.find('>').unwrap();
                let tag = format!(" {}", &rest[..tag_end]);
                let body = &rest[tag_end + 1..rest.find("</text>").unwrap()];
                let number = |name: &str| attr(&tag, name).unwrap().parse::<f64>().unwrap();
                SvgText {
                    text: body.trim().replace("&lt;", "<").replace("&gt;", ">"),
                    x: number("x"),
                    y: number("y"),
                    size: number("font-size"),
                    anchor: attr(&tag, "text-anchor").unwrap(),
                    dy: attr(&tag, "dy").unwrap(),
                    fill: attr(&tag, "fill").unwrap(),
                    rotated: attr(&tag, "transform").is_some(),
                }
            })
            .collect()
    }

    fn overlap(a: &[f64; 4], b: &[f64; 4]) -> bool {
        a[0] < b[2] && b[0] < a[2] && a[1] < b[3] && b[1] < a[3]
    }

    fn assert_apart(texts: &[&SvgText]) {
        for (i, a) in texts.iter().enumerate() {
            for b in &texts[i + 1..] {
                assert!(
                    !overlap(&a.bounds(), &b.bounds()),
                    "{:?} {:?} overlaps {:?} {:?}",
                    a.text,
                    a.bounds(),
                    b.text,
                    b.bounds()
                );
            }
        }
    }

    fn labels() -> HeatLabels {
        HeatLabels {
            title: "faults of process 1".into(),
            subtitle: "many faults".into(),
            count_name: "faults".into(),
            time_origin: "the start".into(),
        }
    }

    fn svg_of(map: &Heatmap) -> String {
        let mut svg = Vec::new();
        map.write_svg(&mut svg, &labels()).unwrap();
        String::from_utf8(svg).unwrap()
    }

    /// Three mappings touched over two seconds: a heap, a library, the stack.
    fn mapped() -> Heatmap {
        let mut events = Vec::new();
        for i in 0..600u64 {
            let addr = match i % 3 {
                0 => 0x5555_0000_0000 + (i % 200) * 4096,
                1 => 0x7f00_0000_0000 + (i % 40) * 4096,
                _ => 0x7ffd_0000_0000 + (i % 10) * 4096,
            };
            events.push(HeatEvent {
                time: 1_000_000_000 + i * 3_000_000,
                addr: VirtAddr::new(addr),
                write: i % 2 == 0,
            });
        }
        let options = HeatmapOptions {
            block_bits: 12,
            width: 400,
            max_height: 300,
        };
        let mut map = Heatmap::build(&events, options).unwrap();
        map.set_time_origin(0);
        map.name_regions(&[
            AddressRegion {
                start: VirtAddr::new(0x5555_0000_0000),
                end: VirtAddr::new(0x5555_1000_0000),
                name: "[heap]".into(),
            },
            AddressRegion {
                start: VirtAddr::new(0x7f00_0000_0000),
                end: VirtAddr::new(0x7f00_0010_0000),
                name: "libfoo.so".into(),
            },
            AddressRegion {
                start: VirtAddr::new(0x7ffd_0000_0000),
                end: VirtAddr::new(0x7ffd_0010_0000),
                name: "[stack]".into(),
            },
        ]);
        map
    }

    /// Axis titles with units, one text per tick, all apart, band names and a legend.
    #[test]
    fn svg_axes_are_titled_ticked_and_apart() {
        let map = mapped();
        assert_eq!(
            map.bands
                .iter()
                .map(|b| b.name.as_str())
                .collect::<Vec<_>>(),
            ["[heap]", "libfoo.so", "[stack]"]
        );
        let svg = svg_of(&map);
        let texts = texts(&svg);
        let has = |needle: &str| texts.iter().any(|t| t.text.contains(needle));
        assert!(has("time since the start (s)"), "time axis title");
        assert!(
            texts
                .iter()
                .any(|t| t.rotated && t.text.starts_with("address (hex)")),
            "address axis title"
        );
        assert!(has("faults per cell"), "legend scale");
        for legend in ["reads", "writes", "reads and writes"] {
            assert!(texts.iter().any(|t| t.text == legend), "legend {legend}");
        }
        for band in ["[heap]", "libfoo.so", "[stack]"] {
            assert_eq!(texts.iter().filter(|t| t.text == band).count(), 1, "{band}");
        }
        // Time ticks: 1 s to 2.8 s, one text each, left to right in increasing order.
        let times: Vec<&SvgText> = texts
            .iter()
            .filter(|t| t.dy == "0.76em" && t.text.parse::<f64>().is_ok())
            .collect();
        assert!(times.len() >= 4, "{times:?}");
        let values: Vec<f64> = times.iter().map(|t| t.text.parse().unwrap()).collect();
        assert!(values.windows(2).all(|w| w[0] < w[1]), "{values:?}");
        assert!(
            values[0] >= 1.0 && *values.last().unwrap() <= 2.81,
            "{values:?}"
        );
        assert!(times.windows(2).all(|w| w[0].x < w[1].x));
        let addresses: Vec<&SvgText> = texts.iter().filter(|t| t.text.starts_with("0x")).collect();
        assert!(addresses.len() >= 4, "{addresses:?}");
        for band in &map.bands {
            let start = format!("{:#x}", band.start);
            assert!(addresses.iter().any(|t| t.text == start), "{start}");
        }
        let flat: Vec<&SvgText> = texts.iter().filter(|t| !t.rotated).collect();
        assert_apart(&flat);
    }

    /// The PNG is the SVG's picture: same size, and dark pixels wherever the SVG draws an axis
    /// line or tick mark and inside every tick label.
    #[test]
    fn png_has_the_svg_axes() {
        let map = mapped();
        let svg = svg_of(&map);
        let (width, height, pixels) = crate::heatmap::tests::png_of(&map);
        let head = &svg[..svg.find('>').unwrap()];
        assert_eq!(attr(head, "width").unwrap(), width.to_string());
        assert_eq!(attr(head, "height").unwrap(), height.to_string());
        let dark = |x: i64, y: i64| {
            let i = (y as usize * width as usize + x as usize) * 3;
            pixels[i..i + 3].iter().all(|&c| c < 100)
        };
        let axis_marks: Vec<String> = svg
            .split("<rect ")
            .skip(1)
            .map(|r| format!(" {}", &r[..r.find('>').unwrap()]))
            .filter(|tag| attr(tag, "fill").as_deref() == Some("#282828"))
            .collect();
        assert!(axis_marks.len() > 10, "{}", axis_marks.len());
        for tag in &axis_marks {
            let number = |name: &str| attr(tag, name).unwrap().parse::<i64>().unwrap();
            let (x, y) = (number("x"), number("y"));
            let (w, h) = (number("width"), number("height"));
            for (px, py) in [(x, y), (x + w - 1, y + h - 1)] {
                assert!(dark(px, py), "axis pixel ({px}, {py}) of {tag}");
            }
        }
        for text in texts(&svg)
            .iter()
            .filter(|t| t.fill == "#000000" && !t.rotated)
        {
            let b = text.bounds();
            let inked = (b[1] as i64..b[3] as i64)
                .flat_map(|y| (b[0] as i64..b[2] as i64).map(move |x| (x, y)))
                .filter(|&(x, y)| x >= 0 && y >= 0 && (x as u32) < width && (y as u32) < height)
                .any(|(x, y)| dark(x, y));
            assert!(inked, "{:?} drawn in the PNG at {b:?}", text.text);
        }
    }

    /// Many small adjacent allocations with long names: their labels are elided or dropped,
    /// never overlapped, and each keeps its full name as a hover title.
    #[test]
    fn allocation_labels_never_overlap() {
        let events: Vec<HeatEvent> = (0..400u64)
            .map(|i| HeatEvent {
                time: i * 1000,
                addr: VirtAddr::new(0x10_0000) + i * 4096,
                write: true,
            })
            .collect();
        let options = HeatmapOptions {
            block_bits: 12,
            width: 200,
            max_height: 400,
        };
        let mut map = Heatmap::build(&events, options).unwrap();
        let rects: Vec<LabelledBlock> = (0..200u64)
            .map(|i| LabelledBlock {
                start_ns: i * 500,
                end_ns: i * 500 + 150_000,
                addr: VirtAddr::new(0x10_0000) + i * 2 * 4096,
                size: 2 * 4096,
                label: format!("a_rather_long_allocation_function_name_{i} blocks.c:{i}"),
            })
            .collect();
        map.overlay(&rects);
        assert_eq!(map.rects.len(), 200);
        let svg = svg_of(&map);
        let texts = texts(&svg);
        let green: Vec<&SvgText> = texts.iter().filter(|t| t.fill == "#006400").collect();
        assert!(!green.is_empty(), "some labels fit");
        assert!(green.len() < 200, "not every label fits");
        for t in &green {
            assert!(
                t.text.starts_with("a_rather") || t.text.starts_with('a') && t.text.ends_with('…'),
                "{}",
                t.text
            );
        }
        assert_apart(&green);
        let all: Vec<&SvgText> = texts.iter().filter(|t| !t.rotated).collect();
        assert_apart(&all);
        assert_eq!(
            svg.matches("<title>a_rather_long_allocation").count(),
            200,
            "every allocation has its hover title"
        );
    }

    /// A name too long for the column is cut with an ellipsis within it.
    #[test]
    fn long_band_names_are_elided() {
        let events = [HeatEvent {
            time: 0,
            addr: VirtAddr::new(0x1000),
            write: false,
        }];
        let mut map = Heatmap::build(&events, HeatmapOptions::default()).unwrap();
        let name = format!("lib{}.so", "x".repeat(200));
        map.name_regions(&[AddressRegion {
            start: VirtAddr::new(0),
            end: VirtAddr::new(0x10000),
            name: name.clone(),
        }]);
        let svg = svg_of(&map);
        let texts = texts(&svg);
        let label = texts.iter().find(|t| t.text.starts_with("libxx")).unwrap();
        assert!(label.text.ends_with('…'), "{}", label.text);
        assert!(text_size(&label.text, TEXT).0 <= NAME_WIDTH);
        assert!(svg.contains(&format!("<title>{name}: 0x1000..0x2000</title>")));
    }
}
