//! `fltrace heatmap` as a person reads it: titled axes with units, address bands named after
//! the program's mappings, labels that never overlap, and a PNG with the SVG's axes.

use super::util::{Dir, workloads};

/// A `<text>` element: its content, anchor point, SVG font size and anchoring.
struct Text {
    text: String,
    x: f64,
    y: f64,
    size: f64,
    anchor: String,
    top: bool,
}

impl Text {
    /// A generous box: 0.62 font sizes per character (a digit of DejaVu Sans, the widest of
    /// the usual sans-serif fonts, is 0.64 of its em; letters such as `x` are narrower), 1.2
    /// font sizes tall.
    fn bounds(&self) -> [f64; 4] {
        let w = self.text.chars().count() as f64 * 0.62 * self.size;
        let h = 1.2 * self.size;
        let x0 = match self.anchor.as_str() {
            "end" => self.x - w,
            "middle" => self.x - w / 2.0,
            _ => self.x,
        };
        let y0 = if self.top { self.y } else { self.y - h / 2.0 };
        [x0, y0, x0 + w, y0 + h]
    }
}

fn attr(tag: &str, name: &str) -> Option<String> {
    let start = tag.find(&format!(" {name}=\""))? + name.len() + 3;
    let end = tag[start..].find('"')? + start;
    Some(tag[start..end].to_owned())
}

fn texts(svg: &str) -> Vec<Text> {
    svg.split("<text ")
        .skip(1)
        .filter_map(|rest| {
            let tag = format!(" {}", &rest[..rest.find('>')?]);
            let body = &rest[rest.find('>')? + 1..rest.find("</text>")?];
            Some(Text {
                text: body.trim().replace("&lt;", "<").replace("&gt;", ">"),
                x: attr(&tag, "x")?.parse().ok()?,
                y: attr(&tag, "y")?.parse().ok()?,
                size: attr(&tag, "font-size")?.parse().ok()?,
                anchor: attr(&tag, "text-anchor")?,
                top: attr(&tag, "dy")? == "0.76em",
            })
        })
        .collect()
}

fn apart(a: &[f64; 4], b: &[f64; 4]) -> bool {
    a[2] <= b[0] || b[2] <= a[0] || a[3] <= b[1] || b[3] <= a[1]
}

/// The RGB pixels of a PNG, with its size.
fn png(path: &std::path::Path) -> (u32, u32, Vec<u8>) {
    let decoder = png::Decoder::new(std::io::BufReader::new(
        std::fs::File::open(path).expect("png"),
    ));
    let mut reader = decoder.read_info().expect("png header");
    let mut buf = vec![0; reader.output_buffer_size().expect("size")];
    let info = reader.next_frame(&mut buf).expect("png data");
    (info.width, info.height, buf)
}

/// A recording of the faults workload: the bands are named after its mappings (the program,
/// libc, its anonymous buffer), tick labels stand apart on both axes, the axes are titled with
/// their units, the legend explains the colours; the PNG is as large as the SVG and has dark
/// pixels on every tick mark and axis line the SVG draws.
#[test]
fn heatmap_names_mappings_and_keeps_labels_apart() {
    let w = workloads();
    let dir = Dir::new();
    dir.record(&[&w.faults], &["nested", "300"]);
    for file in ["h.svg", "h.png"] {
        let out = dir.run(&["heatmap", "-o", file]);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let svg = std::fs::read_to_string(dir.path().join("h.svg")).expect("svg");
    let texts = texts(&svg);
    let has = |wanted: &str| texts.iter().any(|t| t.text == wanted);
    for band in ["faults", "libc.so.6", "[anon]"] {
        assert!(has(band), "band {band} named");
    }
    let contains = |wanted: &str| texts.iter().any(|t| t.text.contains(wanted));
    assert!(contains("time since the recording started (s)"));
    assert!(contains("address (hex)"));
    assert!(contains("faults per cell"));
    assert!(has("reads") && has("writes"));
    // Time ticks (numbers under the plot) and address ticks (hex at the left).
    let time_ticks: Vec<&Text> = texts
        .iter()
        .filter(|t| t.top && t.text.parse::<f64>().is_ok())
        .collect();
    let address_ticks: Vec<&Text> = texts
        .iter()
        .filter(|t| t.anchor == "end" && t.text.starts_with("0x"))
        .collect();
    assert!(time_ticks.len() >= 3, "{}", time_ticks.len());
    assert!(address_ticks.len() >= 3, "{}", address_ticks.len());
    for ticks in [&time_ticks, &address_ticks] {
        for (i, a) in ticks.iter().enumerate() {
            for b in &ticks[i + 1..] {
                assert!(
                    apart(&a.bounds(), &b.bounds()),
                    "{} overlaps {}",
                    a.text,
                    b.text
                );
            }
        }
    }
    let (width, height, pixels) = png(&dir.path().join("h.png"));
    let head = &svg[..svg.find('>').expect("svg tag")];
    assert_eq!(attr(head, "width"), Some(width.to_string()));
    assert_eq!(attr(head, "height"), Some(height.to_string()));
    let dark = |x: i64, y: i64| {
        let i = (y as usize * width as usize + x as usize) * 3;
        pixels[i..i + 3].iter().all(|&c| c < 100)
    };
    // Axis lines and tick marks: the SVG draws them as one-pixel rectangles of the axis colour.
    let marks: Vec<[i64; 4]> = svg
        .split("<rect ")
        .skip(1)
        .map(|r| format!(" {}", &r[..r.find('>').unwrap_or(0)]))
        .filter(|tag| attr(tag, "fill").as_deref() == Some("#282828"))
        .filter_map(|tag| {
            let n = |name: &str| attr(&tag, name)?.parse::<i64>().ok();
            Some([n("x")?, n("y")?, n("width")?, n("height")?])
        })
        .collect();
    assert!(marks.len() > time_ticks.len() + address_ticks.len());
    for [x, y, w, h] in marks {
        assert!(
            dark(x, y) && dark(x + w - 1, y + h - 1),
            "mark at ({x}, {y})"
        );
    }
}

/// The memref plots name their axes with units.
#[test]
fn memref_plots_have_titled_axes() {
    let w = workloads();
    let dir = Dir::new();
    dir.record(&[&w.scan], &["2", "2"]);
    let out = dir.run(&["heatmap"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let pid = dir.pids("faults", "parquet")[0];
    let memref =
        std::fs::read_to_string(fltrace_trace::files::path(dir.path(), "memref", pid, "svg"))
            .expect("memref plots");
    for title in [
        "time since the recording started (s)",
        "faults per row",
        "address, touched ranges packed (one row = 4 KiB)",
    ] {
        assert!(memref.contains(title), "{title}");
    }
}
