//! A small drawing layer shared by the heatmap and its plots: a figure is a list of shapes in
//! pixels, laid out once and rendered by plotters to SVG or to a PNG bitmap, so that both
//! files show the same axes, labels and legend. Text is measured with a font embedded in the
//! binary (DejaVu Sans), so the bitmap needs no system fonts and the layout knows the extent of
//! every label before drawing it.

use std::io::Write;
use std::sync::OnceLock;

use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};
use plotters::style::{FontStyle, FontTransform};
use plotters_backend::{BackendColor, DrawingBackend};

use crate::Error;

/// DejaVu Sans (Bitstream Vera licence, see `fonts/LICENSE`).
static FONT: &[u8] = include_bytes!("../fonts/DejaVuSans.ttf");

/// Registers the embedded font as plotters' `sans-serif`: with plotters' `ab_glyph` feature it
/// is the only source of glyphs and of text extents, for every plot of this crate.
pub(crate) fn ensure_font() -> Result<(), Error> {
    static REGISTERED: OnceLock<bool> = OnceLock::new();
    let ok = *REGISTERED.get_or_init(|| {
        plotters::style::register_font("sans-serif", FontStyle::Normal, FONT).is_ok()
    });
    if ok { Ok(()) } else { Err(Error::Font) }
}

/// Width and height in pixels of `text` drawn at plotters' font size `size` (the SVG's
/// `font-size` is `size / 1.24`). The measure is the embedded font's, rounded up: the PNG
/// draws exactly this, and browsers' usual sans-serif fonts are no wider than DejaVu Sans.
pub(crate) fn text_size(text: &str, size: f64) -> (i32, i32) {
    let font = FontDesc::new(FontFamily::SansSerif, size, FontStyle::Normal);
    match font.box_size(text) {
        // The height is the whole font size, not plotters' box (size / 1.24): ascenders and
        // descenders reach beyond that box.
        Ok((w, _)) => (w as i32 + 1, size.ceil() as i32),
        // Only without the font (ensure_font failed first): a generous guess.
        Err(_) => (
            (text.chars().count() as f64 * size * 0.6) as i32,
            size as i32,
        ),
    }
}

/// `text` shortened with an ellipsis to fit `max_width` pixels, or `None` if not even one
/// character and the ellipsis fit.
pub(crate) fn elide(text: &str, size: f64, max_width: i32) -> Option<String> {
    if text_size(text, size).0 <= max_width {
        return Some(text.to_owned());
    }
    let chars: Vec<char> = text.chars().collect();
    // The longest prefix that fits, by bisection on the character count.
    let (mut lo, mut hi) = (0usize, chars.len());
    while lo < hi {
        let mid = (lo + hi).div_ceil(2);
        let candidate: String = chars[..mid].iter().chain(['…'].iter()).collect();
        if text_size(&candidate, size).0 <= max_width {
            lo = mid;
        } else {
            hi = mid - 1;
        }
    }
    (lo > 0).then(|| chars[..lo].iter().chain(['…'].iter()).collect())
}

/// A 1, 2 or 5 times a power of ten step giving at most `max_ticks` ticks over `span`.
pub(crate) fn nice_step(span: f64, max_ticks: usize) -> f64 {
    let span = if span > 0.0 { span } else { 1.0 };
    let raw = span / max_ticks.max(1) as f64;
    let magnitude = 10f64.powf(raw.log10().floor());
    [1.0, 2.0, 5.0, 10.0]
        .iter()
        .map(|m| m * magnitude)
        .find(|&step| step >= raw)
        .unwrap_or(10.0 * magnitude)
}

/// The multiples of `step` within `lo..=hi`.
pub(crate) fn ticks(lo: f64, hi: f64, step: f64) -> Vec<f64> {
    let first = (lo / step - 1e-9).ceil() as i64;
    let last = (hi / step + 1e-9).floor() as i64;
    (first..=last).map(|i| i as f64 * step).collect()
}

/// A tick value with as many decimals as the step needs.
pub(crate) fn tick_label(value: f64, step: f64) -> String {
    let decimals = (-step.log10().floor()).max(0.0) as usize;
    format!("{value:.decimals$}")
}

/// `bytes` as a short size: 4 KiB, 2 MiB, 1.5 GiB.
pub(crate) fn human_bytes(bytes: u64) -> String {
    const UNITS: [&str; 5] = ["bytes", "KiB", "MiB", "GiB", "TiB"];
    let mut value = bytes as f64;
    let mut unit = 0;
    while value >= 1024.0 && unit + 1 < UNITS.len() {
        value /= 1024.0;
        unit += 1;
    }
    if value.fract() == 0.0 {
        format!("{value:.0} {}", UNITS[unit])
    } else {
        format!("{value:.1} {}", UNITS[unit])
    }
}

/// A duration in seconds as a short text with a unit: 850 ns, 12.5 µs, 3.2 ms, 1.25 s.
pub(crate) fn human_seconds(seconds: f64) -> String {
    let (value, unit) = if seconds >= 1.0 {
        (seconds, "s")
    } else if seconds >= 1e-3 {
        (seconds * 1e3, "ms")
    } else if seconds >= 1e-6 {
        (seconds * 1e6, "µs")
    } else {
        (seconds * 1e9, "ns")
    };
    let number = if value >= 100.0 {
        format!("{value:.0}")
    } else {
        let n = format!("{value:.3}");
        n.trim_end_matches('0').trim_end_matches('.').to_owned()
    };
    format!("{number} {unit}")
}

/// Boxes already taken by labels: a new one is placed only where it overlaps none.
#[derive(Debug, Default, Clone)]
pub(crate) struct Taken(Vec<Bounds>);

/// A box in pixels: left, top, right, bottom (exclusive).
pub(crate) type Bounds = [i32; 4];

/// Whether two boxes share any pixel.
pub(crate) fn overlaps(a: &Bounds, b: &Bounds) -> bool {
    a[0] < b[2] && b[0] < a[2] && a[1] < b[3] && b[1] < a[3]
}

impl Taken {
    /// Takes `bounds` if it overlaps nothing taken yet.
    pub(crate) fn place(&mut self, bounds: Bounds) -> bool {
        if self.0.iter().any(|t| overlaps(t, &bounds)) {
            return false;
        }
        self.0.push(bounds);
        true
    }
}

/// Where a text's anchor point lies on its box.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Anchor {
    /// Left end, vertical middle.
    Left,
    /// Right end, vertical middle.
    Right,
    /// Horizontal middle, top.
    Top,
    /// The middle of the text.
    Center,
}

/// One thing to draw, in pixels.
#[derive(Debug, Clone)]
pub(crate) enum Shape {
    /// A filled box covering pixels `x0..x1` by `y0..y1` (exclusive ends).
    Fill {
        bounds: Bounds,
        color: RGBColor,
        alpha: f64,
    },
    /// A one-pixel line from one pixel to another, both drawn.
    Line {
        from: (i32, i32),
        to: (i32, i32),
        color: RGBColor,
    },
    /// A text at a point.
    Text {
        at: (i32, i32),
        text: String,
        size: f64,
        color: RGBColor,
        anchor: Anchor,
        /// Read bottom to top (a vertical axis title).
        vertical: bool,
    },
}

/// A whole picture: its size, its shapes in drawing order, and hover texts for the SVG.
#[derive(Debug, Clone, Default)]
pub(crate) struct Figure {
    pub(crate) width: u32,
    pub(crate) height: u32,
    pub(crate) shapes: Vec<Shape>,
    /// Boxes with the full text of an elided or dropped label, shown on hover in the SVG.
    pub(crate) tooltips: Vec<(Bounds, String)>,
}

impl Figure {
    /// A text's box, as drawn with its anchor.
    pub(crate) fn text_bounds(at: (i32, i32), text: &str, size: f64, anchor: Anchor) -> Bounds {
        let (w, h) = text_size(text, size);
        let (x, y) = at;
        match anchor {
            Anchor::Left => [x, y - h / 2, x + w, y - h / 2 + h],
            Anchor::Right => [x - w, y - h / 2, x, y - h / 2 + h],
            Anchor::Top => [x - w / 2, y, x - w / 2 + w, y + h],
            Anchor::Center => [x - w / 2, y - h / 2, x - w / 2 + w, y - h / 2 + h],
        }
    }

    pub(crate) fn fill(&mut self, bounds: Bounds, color: RGBColor) {
        self.shapes.push(Shape::Fill {
            bounds,
            color,
            alpha: 1.0,
        });
    }

    pub(crate) fn line(&mut self, from: (i32, i32), to: (i32, i32), color: RGBColor) {
        self.shapes.push(Shape::Line { from, to, color });
    }

    /// An outline whose lines lie on the box's outermost pixels.
    pub(crate) fn outline(&mut self, b: Bounds, color: RGBColor) {
        let (x1, y1) = (b[2] - 1, b[3] - 1);
        self.line((b[0], b[1]), (x1, b[1]), color);
        self.line((b[0], y1), (x1, y1), color);
        self.line((b[0], b[1]), (b[0], y1), color);
        self.line((x1, b[1]), (x1, y1), color);
    }

    /// A text read bottom to top, centred on `at`.
    pub(crate) fn vertical_text(&mut self, at: (i32, i32), text: impl Into<String>, size: f64) {
        self.shapes.push(Shape::Text {
            at,
            text: text.into(),
            size,
            color: BLACK,
            anchor: Anchor::Center,
            vertical: true,
        });
    }

    pub(crate) fn text(
        &mut self,
        at: (i32, i32),
        text: impl Into<String>,
        size: f64,
        color: RGBColor,
        anchor: Anchor,
    ) {
        self.shapes.push(Shape::Text {
            at,
            text: text.into(),
            size,
            color,
            anchor,
            vertical: false,
        });
    }

    /// Draws every shape on a plotters backend. Both backends fill a rectangle's pixels up to
    /// but not including its bottom-right corner; straight lines are drawn as such one pixel
    /// wide rectangles so that they cover the same pixels in both (an SVG stroke is centred on
    /// its coordinates, the bitmap's on the pixels).
    fn render<DB: DrawingBackend>(
        &self,
        backend: &mut DB,
    ) -> Result<(), plotters_backend::DrawingErrorKind<DB::ErrorType>> {
        backend.draw_rect(
            (0, 0),
            (self.width as i32, self.height as i32),
            &WHITE,
            true,
        )?;
        for shape in &self.shapes {
            match shape {
                Shape::Fill {
                    bounds: b,
                    color,
                    alpha,
                } => {
                    if b[2] > b[0] && b[3] > b[1] {
                        let color = BackendColor {
                            alpha: *alpha,
                            rgb: (color.0, color.1, color.2),
                        };
                        backend.draw_rect((b[0], b[1]), (b[2], b[3]), &color, true)?;
                    }
                }
                Shape::Line { from, to, color } => {
                    if from.0 != to.0 && from.1 != to.1 {
                        backend.draw_line(*from, *to, color)?;
                    } else {
                        backend.draw_rect(
                            (from.0.min(to.0), from.1.min(to.1)),
                            (from.0.max(to.0) + 1, from.1.max(to.1) + 1),
                            color,
                            true,
                        )?;
                    }
                }
                Shape::Text {
                    at,
                    text,
                    size,
                    color,
                    anchor,
                    vertical,
                } => {
                    let pos = match anchor {
                        Anchor::Left => Pos::new(HPos::Left, VPos::Center),
                        Anchor::Right => Pos::new(HPos::Right, VPos::Center),
                        Anchor::Top => Pos::new(HPos::Center, VPos::Top),
                        Anchor::Center => Pos::new(HPos::Center, VPos::Center),
                    };
                    let mut font = FontDesc::new(FontFamily::SansSerif, *size, FontStyle::Normal);
                    if *vertical {
                        font = font.transform(FontTransform::Rotate270);
                    }
                    let style = font.color(color).pos(pos);
                    backend.draw_text(text, &style, *at)?;
                }
            }
        }
        backend.present()
    }

    /// The figure as an SVG document.
    pub(crate) fn to_svg(&self) -> Result<String, Error> {
        ensure_font()?;
        let mut svg = String::new();
        {
            let mut backend = SVGBackend::with_string(&mut svg, (self.width, self.height));
            self.render(&mut backend)
                .map_err(|e| Error::Draw(e.to_string()))?;
        }
        if !self.tooltips.is_empty() {
            // Hover boxes go last, above everything, transparent: plotters has no <title>.
            let mut hover = String::new();
            for (b, text) in &self.tooltips {
                hover.push_str(&format!(
                    "<rect x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\" fill=\"none\" pointer-events=\"all\"><title>{}</title></rect>\n",
                    b[0],
                    b[1],
                    b[2] - b[0],
                    b[3] - b[1],
                    escape(text)
                ));
            }
            let end = svg.rfind("</svg>").unwrap_or(svg.len());
            svg.insert_str(end, &hover);
        }
        Ok(svg)
    }

    /// The figure as RGB pixels, row by row from the top.
    pub(crate) fn to_pixels(&self) -> Result<Vec<u8>, Error> {
        ensure_font()?;
        let mut pixels = vec![255u8; self.width as usize * self.height as usize * 3];
        {
            let mut backend = BitMapBackend::with_buffer(&mut pixels, (self.width, self.height));
            self.render(&mut backend)
                .map_err(|e| Error::Draw(e.to_string()))?;
        }
        Ok(pixels)
    }

    /// Writes the figure as a PNG.
    pub(crate) fn write_png(&self, out: impl Write) -> Result<(), Error> {
        let pixels = self.to_pixels()?;
        let mut encoder = png::Encoder::new(out, self.width, self.height);
        encoder.set_color(png::ColorType::Rgb);
        encoder.set_depth(png::BitDepth::Eight);
        let mut writer = encoder
            .write_header()
            .map_err(|e| Error::Io(std::io::Error::other(e)))?;
        writer
            .write_image_data(&pixels)
            .map_err(|e| Error::Io(std::io::Error::other(e)))?;
        writer
            .finish()
            .map_err(|e| Error::Io(std::io::Error::other(e)))?;
        Ok(())
    }
}

pub(crate) fn escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn steps_are_one_two_five() {
        assert_eq!(nice_step(10.0, 5), 2.0);
        assert_eq!(nice_step(0.9, 4), 0.5);
        assert_eq!(nice_step(3.0, 100), 0.05);
        assert_eq!(ticks(0.1, 1.0, 0.25), vec![0.25, 0.5, 0.75, 1.0]);
        assert_eq!(tick_label(0.5, 0.5), "0.5");
        assert_eq!(tick_label(0.05, 0.05), "0.05");
        assert_eq!(tick_label(20.0, 10.0), "20");
    }

    #[test]
    fn sizes_read_well() {
        assert_eq!(human_bytes(4096), "4 KiB");
        assert_eq!(human_bytes(3 << 19), "1.5 MiB");
        assert_eq!(human_bytes(100), "100 bytes");
        assert_eq!(human_seconds(0.00125), "1.25 ms");
        assert_eq!(human_seconds(2.0), "2 s");
        assert_eq!(human_seconds(0.000_000_5), "500 ns");
    }

    /// Long text is cut with an ellipsis to its room, and dropped when not even a letter fits.
    #[test]
    fn elision_fits_the_room() {
        ensure_font().unwrap();
        let text = "libverylongname.so.1.2.3";
        let full = text_size(text, 14.0).0;
        assert_eq!(elide(text, 14.0, full).as_deref(), Some(text));
        let short = elide(text, 14.0, full / 2).unwrap();
        assert!(short.ends_with('…') && short.len() < text.len(), "{short}");
        assert!(text_size(&short, 14.0).0 <= full / 2);
        assert_eq!(elide(text, 14.0, 3), None);
    }
}
