//! Rendering: files a person opens in a browser, and the report text a person or a script
//! reads ([`report`]: tables, CSV, JSON).
//!
//! Flamegraphs are drawn by inferno from collapsed stacks; each frame is coloured by the kind
//! of the faults beneath it, as the original fltrace did: reads aqua, writes red, write-protect
//! faults yellow, a mixture orange.
//!
//! ```
//! use fltrace_render::{FlameStack, Kind, flamegraph};
//! let stacks = vec![FlameStack { frames: vec!["main".into(), "fill".into()], kind: Kind::Write, count: 3 }];
//! let mut svg = Vec::new();
//! flamegraph(&stacks, "faults", &mut svg).unwrap();
//! assert!(String::from_utf8(svg).unwrap().contains("fill"));
//! ```

mod curve;
mod flames;
mod heatmap;
mod plot;
pub mod report;

pub use curve::{SweepPoint, memref_plots, sweep_plot, wss_plot};
pub use flames::{
    BY_ALLOCATION, FrameLabel, ProcessFlamegraph, allocation_flames, fault_flames, frame_label,
    process_flamegraphs,
};
pub use heatmap::{
    ALLOC_OUTLINE, AddressRegion, Band, HeatEvent, HeatLabels, Heatmap, HeatmapBuilder,
    HeatmapOptions, ImageFormat, PlacedRect, color_of,
};

use std::collections::HashMap;
use std::io::Write;

use inferno::flamegraph::color::{Color, PaletteMap};
use inferno::flamegraph::{self, Options};

/// Why rendering failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The output could not be written.
    #[error("writing the picture")]
    Io(#[from] std::io::Error),
    /// There was nothing to draw.
    #[error("no faults to draw")]
    Empty,
    /// The font embedded in the binary could not be read.
    #[error("the embedded font is unreadable")]
    Font,
    /// plotters failed to draw.
    #[error("drawing: {0}")]
    Draw(String),
    /// A report's CSV could not be written.
    #[error("writing CSV")]
    Csv(#[from] csv::Error),
    /// A trace file to draw could not be read.
    #[error(transparent)]
    Trace(#[from] fltrace_trace::Error),
}

/// The access kind of the faults of a stack.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Kind {
    /// Loads from missing pages.
    Read,
    /// Stores to missing pages.
    Write,
    /// Stores to write-protected pages.
    WriteProtect,
}

impl Kind {
    /// The leaf tag and legend name.
    pub fn name(self) -> &'static str {
        match self {
            Kind::Read => "read",
            Kind::Write => "write",
            Kind::WriteProtect => "wrprotect",
        }
    }

    fn color(self) -> Color {
        match self {
            Kind::Read => Color {
                r: 0,
                g: 255,
                b: 255,
            },
            Kind::Write => Color { r: 255, g: 0, b: 0 },
            Kind::WriteProtect => Color {
                r: 255,
                g: 255,
                b: 0,
            },
        }
    }
}

const MIXED: Color = Color {
    r: 255,
    g: 165,
    b: 0,
};

/// One stack to draw: frames outermost first, the kind of its faults, how many.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FlameStack {
    /// Frame labels, outermost (e.g. `main`) first.
    pub frames: Vec<String>,
    /// The kind of the faults.
    pub kind: Kind,
    /// Number of faults.
    pub count: u64,
}

/// Draws a flamegraph SVG of `stacks`. The kind is appended as a leaf frame (`[write]`), and
/// every frame is coloured by the kinds of the faults under it.
pub fn flamegraph(stacks: &[FlameStack], title: &str, out: impl Write) -> Result<(), Error> {
    if stacks.iter().all(|s| s.count == 0) {
        return Err(Error::Empty);
    }
    // Colours go by frame name: a name under faults of several kinds is drawn as mixed.
    let mut kinds: HashMap<String, Option<Kind>> = HashMap::new();
    let mut lines = Vec::with_capacity(stacks.len());
    for stack in stacks.iter().filter(|s| s.count > 0) {
        let leaf = format!("[{}]", stack.kind.name());
        let mut line = String::new();
        for frame in stack.frames.iter().chain(std::iter::once(&leaf)) {
            // `;` separates frames and a trailing number is the count: keep labels clean.
            let frame = frame.replace(';', ":");
            kinds
                .entry(frame.clone())
                .and_modify(|k| {
                    if *k != Some(stack.kind) {
                        *k = None;
                    }
                })
                .or_insert(Some(stack.kind));
            if !line.is_empty() {
                line.push(';');
            }
            line.push_str(&frame);
        }
        line.push(' ');
        line.push_str(&stack.count.to_string());
        lines.push(line);
    }
    let mut palette = PaletteMap::default();
    for (frame, kind) in &kinds {
        palette.insert(frame, kind.map_or(MIXED, Kind::color));
    }
    let mut options = Options::default();
    options.title = title.to_owned();
    options.count_name = "faults".to_owned();
    options.subtitle =
        Some("read: aqua, write: red, write-protect: yellow, mixed: orange".to_owned());
    options.palette_map = Some(&mut palette);
    flamegraph::from_lines(&mut options, lines.iter().map(String::as_str), out)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn svg(stacks: &[FlameStack]) -> String {
        let mut out = Vec::new();
        flamegraph(stacks, "t", &mut out).unwrap();
        String::from_utf8(out).unwrap()
    }

    /// A frame only above writes is red; one above reads and writes is orange; leaves are tagged.
    #[test]
    fn colours_follow_fault_kinds() {
        let stacks = vec![
            FlameStack {
                frames: vec!["main".into(), "w".into()],
                kind: Kind::Write,
                count: 5,
            },
            FlameStack {
                frames: vec!["main".into(), "r".into()],
                kind: Kind::Read,
                count: 5,
            },
        ];
        let svg = svg(&stacks);
        let fill_of = |name: &str| {
            let at = svg.find(&format!("<title>{name} (")).unwrap();
            let rest = &svg[at..];
            let fill = rest.find("fill=\"").unwrap();
            rest[fill + 6..fill + 6 + 18].to_owned()
        };
        assert!(fill_of("w").starts_with("rgb(255,0,0)"), "{}", fill_of("w"));
        assert!(
            fill_of("r").starts_with("rgb(0,255,255)"),
            "{}",
            fill_of("r")
        );
        assert!(
            fill_of("main").starts_with("rgb(255,165,0)"),
            "{}",
            fill_of("main")
        );
        assert!(svg.contains("[write]"));
    }

    /// Nothing to draw is an error, not an empty picture.
    #[test]
    fn empty_is_an_error() {
        assert!(matches!(
            flamegraph(&[], "t", Vec::new()),
            Err(Error::Empty)
        ));
    }
}
