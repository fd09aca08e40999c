//! Rendering: files a person opens in a browser, and the report text a person or a script
//! reads ([`report`]: tables, CSV, JSON).
//!
//! Flamegraphs are drawn by inferno from collapsed stacks; each stack ends in a leaf of the
//! kind of its faults, coloured as the original fltrace did: reads aqua, writes red,
//! write-protect faults yellow. Other frames are coloured by library, one hue per library.
//!
//! ```
//! use fltrace_render::{FlameStack, FrameNotes, Kind, flamegraph};
//! let stacks = vec![FlameStack { frames: vec!["main".into(), "fill".into()], kind: Kind::Write, count: 3 }];
//! let mut svg = Vec::new();
//! flamegraph(&stacks, &FrameNotes::new(), "faults", &mut svg).unwrap();
//! assert!(String::from_utf8(svg).unwrap().contains("fill"));
//! ```

mod curve;
mod flames;
mod heatmap;
pub mod listing;
mod plot;
pub mod report;
pub mod table;
pub mod top;
pub mod wss;

pub use curve::{SweepPoint, memref_plots, sweep_plot, wss_plot};
pub use flames::{
    ALL_PROCESSES, BY_ALLOCATION, FlamegraphFile, Flames, FrameLabel, NoAllocations,
    ProcessFlamegraph, allocation_flames, fault_flames, flamegraph_files, frame_label,
    process_flamegraph_files, process_flamegraphs, recording_flamegraph_file, recording_flames,
    title_command,
};
pub use heatmap::{
    ALLOC_OUTLINE, AddressRegion, Band, HeatEvent, HeatLabels, Heatmap, HeatmapBuilder,
    HeatmapFiles, HeatmapOptions, ImageFormat, NotAnImageName, PlacedRect, color_of,
};

use std::collections::{BTreeMap, BTreeSet};
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
    /// A trace file naming what is drawn could not be read.
    #[error("reading {}", path.display())]
    Read {
        /// The file.
        path: std::path::PathBuf,
        /// Why.
        #[source]
        source: fltrace_trace::Error,
    },
}

/// How rows are printed, by every command that prints tables (`--format table|csv|json`):
/// the reports, diff, wss, the series' listings and the system tools.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TableFormat {
    /// Aligned columns for a person.
    Table,
    /// One header line, then a row per group.
    Csv,
    /// JSON: one pretty-printed document (one object per line for the system tools' events).
    Json,
}

/// `--format table|csv|json`, the possible values named without help, as they always were.
#[cfg(feature = "clap")]
impl clap::ValueEnum for TableFormat {
    fn value_variants<'a>() -> &'a [TableFormat] {
        &[TableFormat::Table, TableFormat::Csv, TableFormat::Json]
    }

    fn to_possible_value(&self) -> Option<clap::builder::PossibleValue> {
        Some(clap::builder::PossibleValue::new(match self {
            TableFormat::Table => "table",
            TableFormat::Csv => "csv",
            TableFormat::Json => "json",
        }))
    }
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

/// What a frame's code is: its colour's family.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub enum Code {
    /// The program's own executable.
    Program,
    /// A library the program loaded, neither the C runtime nor a compiler runtime.
    Library,
    /// A system library ([`fltrace_trace::libraries::is_system_library`]: libc, the loader,
    /// the C++ runtime, fltrace's preloaded library) or a pseudo-file (`[vdso]`).
    System,
    /// No file: `[unknown]`, roots, `[truncated]` and other frames fltrace adds.
    #[default]
    Other,
}

/// What a frame's tooltip and colour say beyond its label: the library, the whole function
/// name and the lines it stood at.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct FrameNote {
    /// The library or executable's file name.
    pub library: String,
    /// What the code is.
    pub code: Code,
    /// The function's whole name (with a C++ parameter list), where the label cuts it.
    pub function: String,
    /// The source lines the frame stood at, by file.
    pub places: BTreeMap<String, BTreeSet<u32>>,
}

/// The notes of a flamegraph's frames, by label.
pub type FrameNotes = BTreeMap<String, FrameNote>;

/// The line a tooltip adds under a frame's counts: the whole function name where the label
/// cut it, the lines (at most 6 per file) and the library.
fn tooltip_detail(label: &str, note: &FrameNote) -> String {
    let mut detail = String::new();
    // A frame of stripped code names its library already: `libsqlite3.so.0+0xa74f0`.
    if note.places.is_empty() && label.starts_with(&note.library) {
        return detail;
    }
    if !note.function.is_empty() && note.function != label {
        detail.push_str(&note.function);
        detail.push('\n');
    }
    const SHOWN: usize = 6;
    let places: Vec<String> = note
        .places
        .iter()
        .map(|(file, lines)| {
            let shown: Vec<String> = lines.iter().take(SHOWN).map(u32::to_string).collect();
            let more = match lines.len().saturating_sub(SHOWN) {
                0 => String::new(),
                1 => " and 1 more line".to_owned(),
                n => format!(" and {n} more lines"),
            };
            format!("{file}:{}{more}", shown.join(","))
        })
        .collect();
    if !places.is_empty() {
        detail.push_str(&places.join(" "));
        detail.push_str(" in ");
    }
    detail.push_str(&note.library);
    detail
}

/// Colours by library: hue by library (the program green, system libraries grey-blue, others
/// from a list of hues that keep clear of the kinds' red, aqua and yellow), lightness by a hash
/// of the label so that neighbours in one library stay apart.
const LIBRARY_HUES: [(f64, &str); 7] = [
    (220.0, "blue"),
    (280.0, "purple"),
    (325.0, "pink"),
    (25.0, "brown"),
    (80.0, "olive"),
    (160.0, "teal"),
    (250.0, "indigo"),
];
const PROGRAM_HUE: f64 = 120.0;

fn hsl(hue: f64, saturation: f64, lightness: f64) -> Color {
    let c = (1.0 - (2.0 * lightness - 1.0).abs()) * saturation;
    let h = hue.rem_euclid(360.0) / 60.0;
    let x = c * (1.0 - (h % 2.0 - 1.0).abs());
    let (r, g, b) = match h as u32 {
        0 => (c, x, 0.0),
        1 => (x, c, 0.0),
        2 => (0.0, c, x),
        3 => (0.0, x, c),
        4 => (x, 0.0, c),
        _ => (c, 0.0, x),
    };
    let m = lightness - c / 2.0;
    let byte = |v: f64| ((v + m) * 255.0).round().clamp(0.0, 255.0) as u8;
    Color {
        r: byte(r),
        g: byte(g),
        b: byte(b),
    }
}

/// A lightness between 0.62 and 0.82 that depends on `label` only (FNV-1a).
fn lightness_of(label: &str) -> f64 {
    let hash = label.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3)
    });
    0.62 + (hash % 1000) as f64 / 1000.0 * 0.2
}

/// The colours of each library's frames and the legend naming them: libraries with the most
/// faults beneath them first.
fn library_colours(
    stacks: &[FlameStack],
    notes: &FrameNotes,
) -> (BTreeMap<String, f64>, Vec<String>) {
    let mut weight: BTreeMap<(&str, Code), u64> = BTreeMap::new();
    for stack in stacks {
        let mut seen: BTreeSet<(&str, Code)> = BTreeSet::new();
        for note in stack.frames.iter().filter_map(|f| notes.get(f)) {
            seen.insert((note.library.as_str(), note.code));
        }
        for key in seen {
            *weight.entry(key).or_default() += stack.count;
        }
    }
    let mut order: Vec<((&str, Code), u64)> = weight.into_iter().collect();
    order.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
    let mut hues = BTreeMap::new();
    let mut legend = Vec::new();
    let mut next = 0;
    for ((library, code), _) in order {
        match code {
            Code::Program => {
                hues.insert(library.to_owned(), PROGRAM_HUE);
                legend.push(format!("{library} green"));
            }
            Code::Library => {
                let (hue, name) = LIBRARY_HUES[next % LIBRARY_HUES.len()];
                next += 1;
                hues.insert(library.to_owned(), hue);
                if next <= 4 {
                    legend.push(format!("{library} {name}"));
                }
            }
            Code::System | Code::Other => {}
        }
    }
    if next > 4 {
        legend.push(format!("{} more libraries", next - 4));
    }
    legend.push("system libraries grey-blue".to_owned());
    (hues, legend)
}

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

/// Draws a flamegraph SVG of `stacks`. The kind is appended as a leaf frame (`[write]`)
/// coloured by kind; other frames are coloured by the library `notes` gives them (grey
/// without one), and their tooltips add the note's function, lines and library.
pub fn flamegraph(
    stacks: &[FlameStack],
    notes: &FrameNotes,
    title: &str,
    out: impl Write,
) -> Result<(), Error> {
    let stacks: Vec<FlameStack> = stacks
        .iter()
        .filter(|s| s.count > 0)
        .map(|s| FlameStack {
            // `;` separates frames and a trailing number is the count: keep labels clean.
            frames: s.frames.iter().map(|f| f.replace(';', ":")).collect(),
            ..s.clone()
        })
        .collect();
    if stacks.is_empty() {
        return Err(Error::Empty);
    }
    let notes: FrameNotes = notes
        .iter()
        .map(|(label, note)| (label.replace(';', ":"), note.clone()))
        .collect();
    let (hues, legend) = library_colours(&stacks, &notes);
    let mut palette = PaletteMap::default();
    // inferno's own root (`all`, an empty name to its palette), else a random warm colour.
    palette.insert("", hsl(0.0, 0.0, 0.8));
    let mut lines = Vec::with_capacity(stacks.len());
    for stack in &stacks {
        let leaf = format!("[{}]", stack.kind.name());
        palette.insert(&leaf, stack.kind.color());
        let mut line = String::new();
        for frame in &stack.frames {
            let colour = match notes.get(frame) {
                Some(note) => match (note.code, hues.get(&note.library)) {
                    (Code::Program | Code::Library, Some(&hue)) => {
                        hsl(hue, 0.55, lightness_of(frame))
                    }
                    (Code::System, _) => hsl(210.0, 0.18, lightness_of(frame)),
                    _ => hsl(0.0, 0.0, lightness_of(frame)),
                },
                None => hsl(0.0, 0.0, 0.8),
            };
            palette.insert(frame, colour);
            line.push_str(frame);
            line.push(';');
        }
        line.push_str(&leaf);
        line.push(' ');
        line.push_str(&stack.count.to_string());
        lines.push(line);
    }
    let mut options = Options::default();
    options.title = title.to_owned();
    options.count_name = "faults".to_owned();
    options.subtitle = Some(format!(
        "{}; leaves: read aqua, write red, write-protect yellow",
        legend.join(", ")
    ));
    options.palette_map = Some(&mut palette);
    let mut svg = Vec::new();
    flamegraph::from_lines(&mut options, lines.iter().map(String::as_str), &mut svg)?;
    let svg = String::from_utf8(svg).map_err(|e| Error::Draw(e.to_string()))?;
    let mut out = out;
    out.write_all(with_tooltips(&svg, &notes).as_bytes())?;
    Ok(())
}

/// XML text of `text` (what inferno's writer escapes).
fn xml_escape(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
        .replace('\'', "&apos;")
}

fn xml_unescape(text: &str) -> String {
    text.replace("&lt;", "<")
        .replace("&gt;", ">")
        .replace("&quot;", "\"")
        .replace("&apos;", "'")
        .replace("&#39;", "'")
        .replace("&amp;", "&")
}

/// How inferno's script takes a frame's label back from its tooltip, when it redraws the
/// labels (at load, zoom and resize): the tooltip without its trailing `(N faults, P%)`.
const SCRIPT_LABEL: &str = r#"textContent.replace(/\([^(]*\)$/,"")"#;
/// The same with the note's lines after the counts cut first.
const SCRIPT_LABEL_NOTED: &str = r#"textContent.replace(/\n[^]*$/,"").replace(/\([^(]*\)$/,"")"#;

/// `svg` with each frame's tooltip (`<title>label (N faults, P%)</title>`, which inferno
/// writes from the label alone) followed by a line of the label's note, and inferno's script
/// taught to cut that line when it takes the label back from the tooltip.
fn with_tooltips(svg: &str, notes: &FrameNotes) -> String {
    const OPEN: &str = "<title>";
    const CLOSE: &str = "</title>";
    let svg = svg.replace(SCRIPT_LABEL, SCRIPT_LABEL_NOTED);
    let mut out = String::with_capacity(svg.len() + svg.len() / 4);
    let mut rest = svg.as_str();
    while let Some(at) = rest.find(OPEN) {
        let text_start = at + OPEN.len();
        let Some(len) = rest[text_start..].find(CLOSE) else {
            break;
        };
        let text = &rest[text_start..text_start + len];
        out.push_str(&rest[..text_start]);
        // The counts follow the label's last ` (`: inferno writes `(1 faults, `.
        match text.rfind(" (") {
            Some(cut) if text[cut..].starts_with(" (1 faults, ") => {
                out.push_str(&text[..cut]);
                out.push_str(" (1 fault, ");
                out.push_str(&text[cut + " (1 faults, ".len()..]);
            }
            _ => out.push_str(text),
        }
        if let Some(cut) = text.rfind(" (")
            && let Some(note) = notes.get(&xml_unescape(&text[..cut]))
        {
            let detail = tooltip_detail(&xml_unescape(&text[..cut]), note);
            if !detail.is_empty() {
                out.push('\n');
                out.push_str(&xml_escape(&detail));
            }
        }
        rest = &rest[text_start + len..];
    }
    out.push_str(rest);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn svg(stacks: &[FlameStack], notes: &FrameNotes) -> String {
        let mut out = Vec::new();
        flamegraph(stacks, notes, "t", &mut out).unwrap();
        String::from_utf8(out).unwrap()
    }

    fn note(library: &str, code: Code, file: &str, lines: &[u32]) -> FrameNote {
        FrameNote {
            library: library.into(),
            code,
            function: String::new(),
            places: [(file.to_owned(), lines.iter().copied().collect())].into(),
        }
    }

    /// The fill of the frame whose tooltip starts `<title>{name} (`.
    fn fill_of(svg: &str, name: &str) -> String {
        let at = svg
            .find(&format!("<title>{name} ("))
            .unwrap_or_else(|| panic!("no {name} in {svg}"));
        let rest = &svg[at..];
        let fill = rest.find("fill=\"").unwrap();
        let end = rest[fill + 6..].find('"').unwrap();
        rest[fill + 6..fill + 6 + end].to_owned()
    }

    /// Leaves are coloured by kind; frames by library: the program green, a library one hue
    /// (blue, the first), libc grey-blue, frames without a note grey.
    #[test]
    fn leaves_by_kind_frames_by_library() {
        let stacks = vec![
            FlameStack {
                frames: vec!["prog".into(), "main".into(), "w".into()],
                kind: Kind::Write,
                count: 5,
            },
            FlameStack {
                frames: vec!["prog".into(), "main".into(), "inflate".into()],
                kind: Kind::Read,
                count: 4,
            },
            FlameStack {
                frames: vec!["prog".into(), "main".into(), "memset".into()],
                kind: Kind::WriteProtect,
                count: 1,
            },
        ];
        let notes: FrameNotes = [
            ("main".to_owned(), note("prog", Code::Program, "a.c", &[9])),
            ("w".to_owned(), note("prog", Code::Program, "a.c", &[3])),
            (
                "inflate".to_owned(),
                note("libz.so.1", Code::Library, "inflate.c", &[70]),
            ),
            (
                "memset".to_owned(),
                note("libc.so.6", Code::System, "memset.S", &[1]),
            ),
        ]
        .into();
        let svg = svg(&stacks, &notes);
        let hue = |name: &str| {
            let fill = fill_of(&svg, name);
            let rgb: Vec<f64> = fill
                .trim_start_matches("rgb(")
                .trim_end_matches(')')
                .split(',')
                .map(|v| v.parse().unwrap())
                .collect();
            let (max, min) = (
                rgb.iter().cloned().fold(0.0, f64::max),
                rgb.iter().cloned().fold(255.0, f64::min),
            );
            (rgb, max - min)
        };
        assert_eq!(fill_of(&svg, "[write]"), "rgb(255,0,0)");
        assert_eq!(fill_of(&svg, "[read]"), "rgb(0,255,255)");
        assert_eq!(fill_of(&svg, "[wrprotect]"), "rgb(255,255,0)");
        // The program's frames green (green the largest channel), libz blue, libc a grey with
        // little colour, the root (no note) plain grey.
        for name in ["main", "w"] {
            let (rgb, _) = hue(name);
            assert!(rgb[1] > rgb[0] && rgb[1] > rgb[2], "{name}: {rgb:?}");
        }
        let (inflate, _) = hue("inflate");
        assert!(
            inflate[2] > inflate[0] && inflate[2] > inflate[1],
            "{inflate:?}"
        );
        let (_, spread) = hue("memset");
        assert!(spread > 0.0 && spread < 60.0, "{spread}");
        assert_eq!(hue("prog").1, 0.0);
        // The legend names them.
        assert!(
            svg.contains("prog green, libz.so.1 blue, system libraries grey-blue; leaves: read aqua, write red, write-protect yellow"),
            "{svg}"
        );
    }

    /// A tooltip gives the counts, then the whole function name, the lines and the library.
    #[test]
    fn tooltips_name_lines_and_library() {
        let stacks = vec![
            FlameStack {
                frames: vec!["ggc_alloc<T>".into(), "libsqlite3.so.0+0xa74f0".into()],
                kind: Kind::Write,
                count: 2,
            },
            FlameStack {
                frames: vec!["one".into()],
                kind: Kind::Read,
                count: 1,
            },
        ];
        let mut cxx = note("cc1plus", Code::Program, "ggc.c", &[12, 40]);
        let many = note(
            "cc1plus",
            Code::Program,
            "main.c",
            &[1, 2, 3, 4, 5, 6, 7, 8],
        );
        assert_eq!(
            tooltip_detail("main", &many),
            "main.c:1,2,3,4,5,6 and 2 more lines in cc1plus"
        );
        cxx.function = "ggc_alloc<T>(unsigned long)".into();
        let stripped = FrameNote {
            library: "libsqlite3.so.0".into(),
            code: Code::Library,
            function: "libsqlite3.so.0+0xa74f0".into(),
            places: BTreeMap::new(),
        };
        let notes: FrameNotes = [
            ("ggc_alloc<T>".to_owned(), cxx),
            ("libsqlite3.so.0+0xa74f0".to_owned(), stripped),
        ]
        .into();
        let svg = svg(&stacks, &notes);
        assert!(
            svg.contains(
                "<title>ggc_alloc&lt;T&gt; (2 faults, 66.67%)\nggc_alloc&lt;T&gt;(unsigned long)\nggc.c:12,40 in cc1plus</title>"
            ),
            "{svg}"
        );
        // Stripped code names its library in the label: the tooltip does not repeat it.
        assert!(svg.contains("<title>libsqlite3.so.0+0xa74f0 (2 faults, 66.67%)</title>"));
        // One fault is singular.
        assert!(
            svg.contains("<title>one (1 fault, 33.33%)</title>"),
            "{svg}"
        );
        // The script that redraws labels from tooltips cuts the note first (else the label
        // shown after a zoom would be the whole tooltip), and inferno's root is grey.
        assert!(svg.contains(SCRIPT_LABEL_NOTED) && !svg.contains(SCRIPT_LABEL));
        assert_eq!(fill_of(&svg, "all"), "rgb(204,204,204)");
    }

    /// Nothing to draw is an error, not an empty picture.
    #[test]
    fn empty_is_an_error() {
        assert!(matches!(
            flamegraph(&[], &FrameNotes::new(), "t", Vec::new()),
            Err(Error::Empty)
        ));
    }
}
