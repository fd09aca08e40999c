//! One self-contained HTML page per run: its faults (or access samples) by time and address,
//! its largest allocations as rectangles labelled by their site, zoom and pan on both axes.
//! Plain inline JavaScript drawing on a canvas: no network resource, opens anywhere.

use std::fmt::Write as _;
use std::io::Write as _;
use std::path::Path;

use fltrace_analyze::{Symbolizer, call_site, stream_largest_blocks};
use fltrace_trace::{Recording, files, read_access};

use crate::Error;
use crate::catalog::CatalogRun;

/// Points drawn at most; beyond, every n-th is kept (the page says so).
const MAX_POINTS: usize = 400_000;
/// Allocations outlined: the largest.
const MAX_BLOCKS: usize = 300;
/// Address ranges further apart than this are drawn side by side, the gap left out.
const GAP: u64 = 64 << 20;

struct Point {
    time_ns: u64,
    addr: u64,
    write: bool,
}

struct Rect {
    start_ns: u64,
    end_ns: u64,
    addr: u64,
    size: u64,
    label: String,
}

/// The page of a catalogued run, titled with its id, workload, configuration, repetition
/// and command.
pub fn page_of_run(run: &CatalogRun) -> Result<String, Error> {
    run_page(&run.dir, &run.page_title()).map_err(|source| Error::RunPage {
        id: run.id,
        dir: run.dir.clone(),
        source: Box::new(source),
    })
}

/// Writes `page` to `output`, a new file (see [`files::create_new`]).
pub fn write_new(output: &Path, page: &str) -> Result<(), Error> {
    let mut file = files::create_new(output).map_err(|source| Error::Create {
        path: output.to_path_buf(),
        source,
    })?;
    file.write_all(page.as_bytes())
        .map_err(|source| Error::Write {
            path: output.to_path_buf(),
            source,
        })
}

/// The page of the recording in `run_dir`, titled `title`.
pub fn run_page(run_dir: &Path, title: &str) -> Result<String, Error> {
    let recording = Recording::latest(run_dir)?;
    let start_ns = recording.session.start_ns;
    let mut points = Vec::new();
    let mut rects = Vec::new();
    let mut source = "page faults";
    let mut symbolizer = Symbolizer::new();
    let mut access = Vec::new();
    for &pid in recording.pids() {
        let path = files::access(run_dir, pid);
        if path.is_file() {
            access.extend(read_access(&path)?);
        }
    }
    for &pid in recording.pids() {
        // The allocation events are streamed below: memory follows the blocks alive at once.
        let trace = recording.load_without_alloc_events(pid)?;
        if access.is_empty() {
            points.extend(trace.faults.iter().map(|f| Point {
                time_ns: f.time_ns,
                addr: f.addr.get(),
                write: f.flags.has(fltrace_trace::FaultFlags::WRITE),
            }));
        }
        if recording.has_allocs(pid) {
            let stacks = symbolizer.resolve_alloc_stacks(&trace);
            // Only the largest of all processes are drawn: no more of each can be.
            let totals = stream_largest_blocks(&recording, pid, &trace, MAX_BLOCKS)?;
            let end = trace
                .faults
                .iter()
                .map(|f| f.time_ns)
                .max()
                .unwrap_or(0)
                .max(totals.last_event_ns);
            for block in &totals.largest {
                let label = call_site(stacks.get(block.stack_id)).map_or_else(
                    || "[unknown]".to_owned(),
                    |l| {
                        let file = l.file.rsplit('/').next().unwrap_or(&l.file);
                        if l.line > 0 {
                            format!("{file}:{}", l.line)
                        } else {
                            l.function.to_string()
                        }
                    },
                );
                rects.push(Rect {
                    start_ns: block.start_ns,
                    end_ns: block.end_ns.unwrap_or(end),
                    addr: block.addr.get(),
                    size: block.size,
                    label,
                });
            }
        }
    }
    if !access.is_empty() {
        source = "access samples";
        points.extend(access.iter().map(|a| Point {
            time_ns: a.time_ns,
            addr: a.addr.get(),
            write: a.is_store(),
        }));
    }
    rects.sort_by_key(|r| std::cmp::Reverse(r.size));
    rects.truncate(MAX_BLOCKS);
    let stride = points.len().div_ceil(MAX_POINTS).max(1);
    let total = points.len();
    let points: Vec<&Point> = points.iter().step_by(stride).collect();

    // Pack the touched address ranges together.
    let mut ranges: Vec<(u64, u64)> = points
        .iter()
        .map(|p| (p.addr & !0xfff, (p.addr & !0xfff) + 0x1000))
        .chain(
            rects
                .iter()
                .map(|r| (r.addr, r.addr.saturating_add(r.size))),
        )
        .collect();
    ranges.sort_unstable();
    let mut segments: Vec<(u64, u64, u64)> = Vec::new(); // start, end, packed start
    for (a, b) in ranges {
        match segments.last_mut() {
            Some(last) if a <= last.1.saturating_add(GAP) => last.1 = last.1.max(b),
            _ => {
                let packed = segments
                    .last()
                    .map_or(0, |s| s.2 + (s.1 - s.0) + separator(&segments));
                segments.push((a, b, packed));
            }
        }
    }
    let pack = |addr: u64| -> f64 {
        let i = segments.partition_point(|s| s.0 <= addr).saturating_sub(1);
        segments
            .get(i)
            .map_or(0.0, |s| (s.2 + addr.saturating_sub(s.0)) as f64)
    };
    let ms = |ns: u64| ns.saturating_sub(start_ns) as f64 / 1e6;

    let mut data = String::from("{\"points\":[");
    for (i, p) in points.iter().enumerate() {
        if i > 0 {
            data.push(',');
        }
        let _ = write!(
            data,
            "{:.3},{},{}",
            ms(p.time_ns),
            pack(p.addr),
            u8::from(p.write)
        );
    }
    data.push_str("],\"rects\":[");
    for (i, r) in rects.iter().enumerate() {
        if i > 0 {
            data.push(',');
        }
        let _ = write!(
            data,
            "[{:.3},{:.3},{},{},{},{}]",
            ms(r.start_ns),
            ms(r.end_ns.max(r.start_ns)),
            pack(r.addr),
            pack(r.addr) + r.size as f64,
            json_string(&format!("0x{:x}", r.addr)),
            json_string(&format!("{} ({} bytes)", r.label, r.size))
        );
    }
    data.push_str("],\"segments\":[");
    for (i, s) in segments.iter().enumerate() {
        if i > 0 {
            data.push(',');
        }
        // Addresses go to JavaScript as hex strings: doubles lose the low bits of 64-bit ones.
        let _ = write!(
            data,
            "[{},{},{}]",
            json_string(&format!("{:x}", s.0)),
            s.1 - s.0,
            s.2
        );
    }
    let note = if stride > 1 {
        format!("{total} {source}, every {} drawn", ordinal(stride))
    } else {
        format!("{total} {source}")
    };
    let _ = write!(
        data,
        "],\"title\":{},\"note\":{},\"source\":{}}}",
        json_string(title),
        json_string(&note),
        json_string(source)
    );
    Ok(TEMPLATE
        .replace("@TITLE@", &html_escape(title))
        .replace("@DATA@", &data.replace("</", "<\\/")))
}

/// Space left between packed ranges: a hundredth of what is packed so far, at least a page.
fn separator(segments: &[(u64, u64, u64)]) -> u64 {
    segments
        .last()
        .map_or(0x1000, |s| ((s.2 + s.1 - s.0) / 100).max(0x1000))
}

fn json_string(s: &str) -> String {
    serde_json::to_string(s).unwrap_or_else(|_| "\"\"".to_owned())
}

fn html_escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

const TEMPLATE: &str = r##"<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>@TITLE@</title>
<style>
body { font: 13px sans-serif; margin: 0; background: #fff; color: #222; }
header { padding: 6px 12px; }
header h1 { font-size: 15px; margin: 0 0 2px 0; }
#legend span { margin-right: 16px; }
.sw { display: inline-block; width: 11px; height: 11px; vertical-align: -1px; margin-right: 4px; }
#plot { display: block; cursor: grab; }
#tip { position: fixed; pointer-events: none; background: #ffe; border: 1px solid #999; padding: 2px 5px; display: none; }
</style></head>
<body>
<header><h1 id="title"></h1>
<div id="legend"><span><i class="sw" style="background:#1f6fd1"></i>read</span><span><i class="sw" style="background:#d62728"></i>write</span><span><i class="sw" style="border:2px solid #2ca02c;width:8px;height:8px"></i>allocation (site)</span><span id="note"></span><span style="color:#777">wheel: zoom both axes (Shift: time only, Alt: address only) &middot; drag: pan &middot; double-click: reset</span></div>
</header>
<canvas id="plot"></canvas><div id="tip"></div>
<script type="application/json" id="data">@DATA@</script>
<script>
"use strict";
const D = JSON.parse(document.getElementById("data").textContent);
document.getElementById("title").textContent = D.title;
document.getElementById("note").textContent = D.note;
const cv = document.getElementById("plot"), cx = cv.getContext("2d"), tip = document.getElementById("tip");
const M = { l: 130, r: 20, t: 10, b: 40 };
const P = D.points, R = D.rects, S = D.segments.map(s => [BigInt("0x" + s[0]), s[1], s[2]]);
let tmax = 0, ymax = 0;
for (let i = 0; i < P.length; i += 3) { tmax = Math.max(tmax, P[i]); ymax = Math.max(ymax, P[i + 1]); }
for (const r of R) { tmax = Math.max(tmax, r[1]); ymax = Math.max(ymax, r[3]); }
const full = { t0: 0, t1: (tmax || 1) * 1.01, y0: 0, y1: (ymax || 4096) * 1.01 };
let v = Object.assign({}, full);
function size() { cv.width = window.innerWidth; cv.height = Math.max(300, window.innerHeight - cv.getBoundingClientRect().top - 4); draw(); }
const W = () => cv.width - M.l - M.r, H = () => cv.height - M.t - M.b;
const X = t => M.l + (t - v.t0) / (v.t1 - v.t0) * W();
const Y = y => M.t + H() - (y - v.y0) / (v.y1 - v.y0) * H();
function addr(y) {
  let s = S[0];
  for (const c of S) { if (c[2] <= y) s = c; else break; }
  if (!s) return "";
  const off = Math.max(0, Math.round(y - s[2]));
  return "0x" + (s[0] + BigInt(off)).toString(16);
}
function ticks(a, b, n) {
  const step = Math.pow(10, Math.floor(Math.log10((b - a) / n))), m = [1, 2, 5, 10].find(k => (b - a) / (step * k) <= n) * step;
  const out = []; for (let x = Math.ceil(a / m) * m; x <= b; x += m) out.push(x); return out;
}
function draw() {
  cx.clearRect(0, 0, cv.width, cv.height);
  cx.save(); cx.beginPath(); cx.rect(M.l, M.t, W(), H()); cx.clip();
  for (let i = 0; i < P.length; i += 3) {
    const t = P[i], y = P[i + 1];
    if (t < v.t0 || t > v.t1 || y < v.y0 || y > v.y1) continue;
    cx.fillStyle = P[i + 2] ? "#d62728" : "#1f6fd1";
    cx.fillRect(X(t) - 1, Y(y) - 1, 2, 2);
  }
  cx.strokeStyle = "#2ca02c"; cx.fillStyle = "#1a7a1a"; cx.font = "11px sans-serif"; cx.lineWidth = 1.5;
  for (const r of R) {
    const x0 = X(r[0]), x1 = X(r[1]), y0 = Y(r[3]), y1 = Y(r[2]);
    if (x1 < M.l || x0 > M.l + W() || y1 < M.t || y0 > M.t + H()) continue;
    cx.strokeRect(x0, y0, Math.max(1, x1 - x0), Math.max(1, y1 - y0));
    if (x1 - x0 > 40 && y1 - y0 > 10) cx.fillText(r[5], Math.max(x0, M.l) + 3, Math.max(y0, M.t) + 11);
  }
  cx.restore();
  cx.strokeStyle = "#444"; cx.lineWidth = 1; cx.strokeRect(M.l, M.t, W(), H());
  cx.fillStyle = "#222"; cx.font = "11px sans-serif"; cx.textAlign = "center";
  for (const t of ticks(v.t0, v.t1, 10)) { const x = X(t); cx.fillText(+t.toPrecision(6) + "", x, M.t + H() + 14); cx.fillRect(x, M.t + H(), 1, 4); }
  cx.fillText("time since the start of the recording (ms)", M.l + W() / 2, M.t + H() + 32);
  cx.textAlign = "right";
  for (const y of ticks(v.y0, v.y1, 8)) { const py = Y(y); cx.fillText(addr(y), M.l - 6, py + 4); cx.fillRect(M.l - 4, py, 4, 1); }
  cx.save(); cx.translate(12, M.t + H() / 2); cx.rotate(-Math.PI / 2); cx.textAlign = "center";
  cx.fillText("address (touched ranges packed together)", 0, 0); cx.restore();
}
cv.addEventListener("wheel", e => {
  e.preventDefault();
  const f = e.deltaY < 0 ? 0.8 : 1.25, px = e.offsetX, py = e.offsetY;
  const t = v.t0 + (px - M.l) / W() * (v.t1 - v.t0), y = v.y0 + (M.t + H() - py) / H() * (v.y1 - v.y0);
  if (!e.altKey) { v.t0 = t - (t - v.t0) * f; v.t1 = t + (v.t1 - t) * f; }
  if (!e.shiftKey) { v.y0 = y - (y - v.y0) * f; v.y1 = y + (v.y1 - y) * f; }
  draw();
}, { passive: false });
let drag = null;
cv.addEventListener("mousedown", e => { drag = { x: e.offsetX, y: e.offsetY, v: Object.assign({}, v) }; cv.style.cursor = "grabbing"; });
window.addEventListener("mouseup", () => { drag = null; cv.style.cursor = "grab"; });
cv.addEventListener("mousemove", e => {
  if (drag) {
    const dt = (e.offsetX - drag.x) / W() * (drag.v.t1 - drag.v.t0), dy = (e.offsetY - drag.y) / H() * (drag.v.y1 - drag.v.y0);
    v.t0 = drag.v.t0 - dt; v.t1 = drag.v.t1 - dt; v.y0 = drag.v.y0 + dy; v.y1 = drag.v.y1 + dy; draw(); return;
  }
  const t = v.t0 + (e.offsetX - M.l) / W() * (v.t1 - v.t0), y = v.y0 + (M.t + H() - e.offsetY) / H() * (v.y1 - v.y0);
  if (e.offsetX < M.l || e.offsetY > M.t + H()) { tip.style.display = "none"; return; }
  let text = t.toFixed(3) + " ms, " + addr(y);
  for (const r of R) if (t >= r[0] && t <= r[1] && y >= r[2] && y <= r[3]) { text += " \u2014 " + r[4] + " " + r[5]; break; }
  tip.textContent = text; tip.style.display = "block"; tip.style.left = (e.clientX + 12) + "px"; tip.style.top = (e.clientY + 12) + "px";
});
cv.addEventListener("mouseleave", () => { tip.style.display = "none"; });
cv.addEventListener("dblclick", () => { v = Object.assign({}, full); draw(); });
window.addEventListener("resize", size);
size();
</script></body></html>
"##;

/// `n` as an English ordinal: 1st, 2nd, 3rd, 4th, 11th, 12th, 13th, 21st.
fn ordinal(n: usize) -> String {
    let suffix = match (n % 10, n % 100) {
        (_, 11..=13) => "th",
        (1, _) => "st",
        (2, _) => "nd",
        (3, _) => "rd",
        _ => "th",
    };
    format!("{n}{suffix}")
}

#[cfg(test)]
mod tests {
    #[test]
    fn ordinals() {
        let got: Vec<String> = [1, 2, 3, 4, 11, 12, 13, 21, 22, 102, 111]
            .map(super::ordinal)
            .to_vec();
        assert_eq!(
            got,
            [
                "1st", "2nd", "3rd", "4th", "11th", "12th", "13th", "21st", "22nd", "102nd",
                "111th"
            ]
        );
    }

    use super::*;

    fn run_in(dir: &Path) -> CatalogRun {
        CatalogRun {
            id: 4,
            workload: "scan".to_owned(),
            config: "record".to_owned(),
            mode: "record".to_owned(),
            rep: 2,
            command: "./scan 8 1".to_owned(),
            start_unix_ns: 0,
            wall_s: 0.5,
            user_s: 0.1,
            sys_s: 0.1,
            max_rss_kb: 1024,
            status: "ok".to_owned(),
            faults: Some(10),
            allocs: None,
            samples: None,
            dir: dir.to_path_buf(),
        }
    }

    /// A run whose directory holds no recording names the run and its directory.
    #[test]
    fn page_of_a_run_without_a_recording_says_which_run() {
        let dir = tempfile::tempdir().unwrap();
        let error = page_of_run(&run_in(dir.path())).unwrap_err();
        assert_eq!(
            fltrace_trace::error_chain(&error),
            format!(
                "run 4 in {0}: no fltrace recording in {0} (run `fltrace record -- <command>` first)",
                dir.path().display()
            )
        );
    }

    /// The page goes to a new file; a file already there is refused, untouched.
    #[test]
    fn write_new_writes_a_new_file_only() {
        let dir = tempfile::tempdir().unwrap();
        let output = dir.path().join("run-4.html");
        write_new(&output, "<html>4</html>").unwrap();
        assert_eq!(std::fs::read_to_string(&output).unwrap(), "<html>4</html>");
        let error = write_new(&output, "<html>again</html>").unwrap_err();
        assert_eq!(
            fltrace_trace::error_chain(&error),
            format!(
                "creating {0}: {0}: File exists (os error 17)",
                output.display()
            )
        );
        assert_eq!(std::fs::read_to_string(&output).unwrap(), "<html>4</html>");
    }

    #[test]
    fn the_title_names_the_run() {
        assert_eq!(
            run_in(Path::new("/s")).page_title(),
            "run 4: scan config=record rep=2 (./scan 8 1)"
        );
    }
}
