//! Time-by-address heatmaps of memory events (faults, reference samples): touched address
//! ranges are packed together with visible boundaries, so that a 47-bit address space with a
//! few busy regions still fills the picture.

use std::fmt::Write as _;
use std::io::Write as _;
use std::path::Path;

use crate::Error;

/// One memory event to place on the map.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HeatEvent {
    /// When, in any unit (nanoseconds in fltrace traces).
    pub time: u64,
    /// The address touched.
    pub addr: u64,
    /// Whether it was a write.
    pub write: bool,
}

/// An allocation to draw over the map, as Heimdallr does: its lifetime by its address range.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AllocRect {
    /// When the block was allocated (same unit as the events' times).
    pub start: u64,
    /// When it was freed, or the end of the trace.
    pub end: u64,
    /// First address.
    pub addr: u64,
    /// Bytes.
    pub len: u64,
    /// What to call it (its allocation site).
    pub label: String,
}

/// An [`AllocRect`] placed on the map: cell columns and rows, inclusive.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlacedRect {
    /// First and last column.
    pub cols: (usize, usize),
    /// Lowest and highest row.
    pub rows: (usize, usize),
    /// Its label.
    pub label: String,
}

/// The outline colour of allocation rectangles.
pub const ALLOC_OUTLINE: [u8; 3] = [0, 150, 0];

/// How to lay the map out.
#[derive(Debug, Clone, Copy)]
pub struct HeatmapOptions {
    /// log2 of the address block one cell stands for (12: a page).
    pub block_bits: u32,
    /// Columns (time buckets).
    pub width: usize,
    /// Rows at most; several blocks share a row when there are more.
    pub max_height: usize,
}

impl Default for HeatmapOptions {
    fn default() -> Self {
        HeatmapOptions {
            block_bits: 12,
            width: 1024,
            max_height: 768,
        }
    }
}

/// Counts per (time bucket, address row), reads and writes apart.
#[derive(Debug, Clone)]
pub struct Heatmap {
    /// Columns.
    pub width: usize,
    /// Rows.
    pub height: usize,
    /// `[reads, writes]` per cell, row-major, row 0 the lowest addresses.
    pub cells: Vec<[u32; 2]>,
    /// First and last time of the events.
    pub time_range: (u64, u64),
    /// Rows where a new touched range starts (after a gap), with that range's first address.
    pub boundaries: Vec<(usize, u64)>,
    block_bits: u32,
    blocks_per_row: usize,
    /// The busiest cell's larger count, for the colour scale.
    max_count: u32,
    /// The distinct blocks touched, sorted: a block's rank gives its row.
    blocks: Vec<u64>,
    /// Allocations drawn over the cells.
    pub rects: Vec<PlacedRect>,
}

/// Builds a heatmap in two passes over events given in batches, so that memory stays bounded
/// by the distinct blocks touched, not by the events: [`scan`](Self::scan) every batch, then
/// [`layout`](Self::layout), then [`Heatmap::add`] every batch again.
#[derive(Debug, Clone)]
pub struct HeatmapBuilder {
    options: HeatmapOptions,
    blocks: Vec<u64>,
    time_range: (u64, u64),
}

impl HeatmapBuilder {
    /// An empty builder.
    pub fn new(options: HeatmapOptions) -> HeatmapBuilder {
        HeatmapBuilder {
            options,
            blocks: Vec::new(),
            time_range: (u64::MAX, 0),
        }
    }

    /// First pass: notes the blocks and times of a batch.
    pub fn scan(&mut self, events: &[HeatEvent]) {
        for e in events {
            self.blocks.push(e.addr >> self.options.block_bits);
            self.time_range = (self.time_range.0.min(e.time), self.time_range.1.max(e.time));
        }
        if self.blocks.len() > 1 << 22 {
            self.blocks.sort_unstable();
            self.blocks.dedup();
        }
    }

    /// First pass for a range sample: every block of `start..end` at `time`.
    pub fn scan_range(&mut self, time: u64, start: u64, end: u64) {
        let bits = self.options.block_bits;
        if end > start {
            self.blocks.extend((start >> bits)..=((end - 1) >> bits));
            self.time_range = (self.time_range.0.min(time), self.time_range.1.max(time));
        }
        if self.blocks.len() > 1 << 22 {
            self.blocks.sort_unstable();
            self.blocks.dedup();
        }
    }

    /// Lays out the rows; the map is empty until [`Heatmap::add`].
    pub fn layout(mut self) -> Result<Heatmap, Error> {
        self.blocks.sort_unstable();
        self.blocks.dedup();
        let blocks = self.blocks;
        if blocks.is_empty() {
            return Err(Error::Empty);
        }
        let options = self.options;
        let height = blocks.len().clamp(1, options.max_height.max(1));
        let blocks_per_row = blocks.len().div_ceil(height);
        let height = blocks.len().div_ceil(blocks_per_row);
        let width = options.width.max(1);
        let mut boundaries = vec![(0, blocks[0] << options.block_bits)];
        for (rank, pair) in blocks.windows(2).enumerate() {
            if pair[1] != pair[0] + 1 {
                let row = (rank + 1) / blocks_per_row;
                if boundaries.last().is_none_or(|(r, _)| *r != row) {
                    boundaries.push((row, pair[1] << options.block_bits));
                }
            }
        }
        Ok(Heatmap {
            max_count: 1,
            width,
            height,
            cells: vec![[0u32; 2]; width * height],
            time_range: self.time_range,
            boundaries,
            block_bits: options.block_bits,
            blocks_per_row,
            blocks,
            rects: Vec::new(),
        })
    }
}

impl Heatmap {
    /// Builds the map of events held in memory at once.
    pub fn build(events: &[HeatEvent], options: HeatmapOptions) -> Result<Heatmap, Error> {
        let mut builder = HeatmapBuilder::new(options);
        builder.scan(events);
        let mut map = builder.layout()?;
        map.add(events);
        Ok(map)
    }

    /// Second pass for a range sample: `weight` accesses (as reads: range traces do not tell
    /// reads from writes) on every block of `start..end` at `time`.
    pub fn add_range(&mut self, time: u64, start: u64, end: u64, weight: u32) {
        if end <= start || weight == 0 {
            return;
        }
        let (t0, t1) = self.time_range;
        let span = (t1.saturating_sub(t0)).max(1) as u128;
        let col = (((time.saturating_sub(t0)) as u128 * self.width as u128 / (span + 1)) as usize)
            .min(self.width - 1);
        let low = self
            .blocks
            .partition_point(|&b| b < start >> self.block_bits);
        let high = self
            .blocks
            .partition_point(|&b| b <= (end - 1) >> self.block_bits);
        for rank in low..high {
            let row = (rank / self.blocks_per_row).min(self.height - 1);
            let cell = &mut self.cells[row * self.width + col][0];
            *cell = cell.saturating_add(weight);
            self.max_count = self.max_count.max(*cell);
        }
    }

    /// Places allocations over the map. Only the touched part of an allocation's range has
    /// rows (unused address space is collapsed), so one that no event touched is left out.
    pub fn overlay(&mut self, rects: &[AllocRect]) {
        let (t0, t1) = self.time_range;
        let span = (t1.saturating_sub(t0)).max(1) as u128;
        let col_of = |t: u64| {
            (((t.clamp(t0, t1) - t0) as u128 * self.width as u128 / (span + 1)) as usize)
                .min(self.width - 1)
        };
        for rect in rects {
            let first = rect.addr >> self.block_bits;
            let last = (rect.addr + rect.len.max(1) - 1) >> self.block_bits;
            let low = self.blocks.partition_point(|&b| b < first);
            let high = self.blocks.partition_point(|&b| b <= last);
            if low == high || rect.end < t0 || rect.start > t1 {
                continue;
            }
            let row = |rank: usize| (rank / self.blocks_per_row).min(self.height - 1);
            self.rects.push(PlacedRect {
                cols: (col_of(rect.start), col_of(rect.end)),
                rows: (row(low), row(high - 1)),
                label: rect.label.clone(),
            });
        }
    }

    /// Whether a cell lies on the outline of a placed allocation.
    fn on_outline(&self, col: usize, row: usize) -> bool {
        self.rects.iter().any(|r| {
            let inside =
                (r.cols.0..=r.cols.1).contains(&col) && (r.rows.0..=r.rows.1).contains(&row);
            inside && (col == r.cols.0 || col == r.cols.1 || row == r.rows.0 || row == r.rows.1)
        })
    }

    /// Second pass: counts a batch of events (from the same events as were scanned).
    pub fn add(&mut self, events: &[HeatEvent]) {
        let (t0, t1) = self.time_range;
        let span = (t1.saturating_sub(t0)).max(1) as u128;
        for event in events {
            let rank = self
                .blocks
                .partition_point(|&b| b < event.addr >> self.block_bits);
            let row = (rank / self.blocks_per_row).min(self.height - 1);
            let col = ((event.time.saturating_sub(t0) as u128 * self.width as u128) / (span + 1))
                as usize;
            let cell = &mut self.cells[row * self.width + col.min(self.width - 1)];
            let count = &mut cell[usize::from(event.write)];
            *count = count.saturating_add(1);
            self.max_count = self.max_count.max(*count);
        }
    }

    /// The colour of a cell: reads blue, writes red, both purple, brighter for more events
    /// (log scale against the busiest cell); untouched cells white.
    pub fn color(&self, col: usize, row: usize) -> [u8; 3] {
        let [reads, writes] = self.cells[row * self.width + col];
        if reads == 0 && writes == 0 {
            return [255, 255, 255];
        }
        let max = f64::from(self.max_count);
        let level = |n: u32| {
            if n == 0 {
                0.0
            } else {
                0.35 + 0.65 * (1.0 + n as f64).ln() / (1.0 + max).ln()
            }
        };
        let (r, b) = (level(writes), level(reads));
        let shade = |v: f64| (255.0 * (1.0 - v)) as u8;
        // Subtractive: a read takes away red and green, a write green and blue.
        [shade(b), shade(r.max(b)), shade(r)]
    }

    /// Bytes of address space per row.
    pub fn bytes_per_row(&self) -> u64 {
        (self.blocks_per_row as u64) << self.block_bits
    }

    /// Writes a PNG, one pixel per cell, highest addresses at the top, range boundaries grey.
    pub fn write_png(&self, path: &Path) -> Result<(), Error> {
        let file = std::io::BufWriter::new(std::fs::File::create(path)?);
        let mut encoder = png::Encoder::new(file, self.width as u32, self.height as u32);
        encoder.set_color(png::ColorType::Rgb);
        encoder.set_depth(png::BitDepth::Eight);
        let mut writer = encoder
            .write_header()
            .map_err(|e| Error::Io(std::io::Error::other(e)))?;
        let mut data = Vec::with_capacity(self.width * self.height * 3);
        for y in 0..self.height {
            let row = self.height - 1 - y;
            let boundary = self.boundaries.iter().any(|(r, _)| *r == row && row != 0);
            for col in 0..self.width {
                let mut color = self.color(col, row);
                if boundary && color == [255, 255, 255] {
                    color = [200, 200, 200];
                }
                if !self.rects.is_empty() && self.on_outline(col, row) {
                    color = ALLOC_OUTLINE;
                }
                data.extend_from_slice(&color);
            }
        }
        writer
            .write_image_data(&data)
            .map_err(|e| Error::Io(std::io::Error::other(e)))?;
        Ok(())
    }

    /// Writes an SVG: the cells as rectangles (touched ones only), range boundaries as lines
    /// labelled with their first address, and the time axis.
    pub fn write_svg(&self, path: &Path, title: &str) -> Result<(), Error> {
        let (left, top, cell_w, cell_h) = (
            150.0,
            40.0,
            (900.0 / self.width as f64).max(0.5),
            (600.0 / self.height as f64).max(0.5),
        );
        let (w, h) = (
            left + cell_w * self.width as f64 + 20.0,
            top + cell_h * self.height as f64 + 50.0,
        );
        let mut svg = String::new();
        let _ = writeln!(
            svg,
            r#"<svg xmlns="http://www.w3.org/2000/svg" width="{w:.0}" height="{h:.0}" font-family="sans-serif" font-size="11">"#
        );
        let _ = writeln!(
            svg,
            r#"<rect width="100%" height="100%" fill="white"/><text x="{left}" y="20" font-size="15">{}</text>"#,
            escape(title)
        );
        for row in 0..self.height {
            let y = top + (self.height - 1 - row) as f64 * cell_h;
            for col in 0..self.width {
                let [r, g, b] = self.color(col, row);
                if [r, g, b] != [255, 255, 255] {
                    let _ = writeln!(
                        svg,
                        r#"<rect x="{:.2}" y="{y:.2}" width="{cell_w:.2}" height="{cell_h:.2}" fill="rgb({r},{g},{b})"/>"#,
                        left + col as f64 * cell_w
                    );
                }
            }
        }
        let [gr, gg, gb] = ALLOC_OUTLINE;
        for rect in &self.rects {
            let x = left + rect.cols.0 as f64 * cell_w;
            let y = top + (self.height - 1 - rect.rows.1) as f64 * cell_h;
            let rw = (rect.cols.1 - rect.cols.0 + 1) as f64 * cell_w;
            let rh = (rect.rows.1 - rect.rows.0 + 1) as f64 * cell_h;
            let label = escape(&rect.label);
            let _ = writeln!(
                svg,
                r#"<rect x="{x:.2}" y="{y:.2}" width="{rw:.2}" height="{rh:.2}" fill="none" stroke="rgb({gr},{gg},{gb})" stroke-width="1"><title>{label}</title></rect><text x="{:.2}" y="{:.2}" fill="rgb({gr},{gg},{gb})" font-size="9">{label}</text>"#,
                x + 2.0,
                y + 10.0
            );
        }
        for (row, addr) in &self.boundaries {
            let y = top + (self.height - row) as f64 * cell_h;
            let _ = writeln!(
                svg,
                r##"<line x1="{left}" x2="{:.0}" y1="{y:.2}" y2="{y:.2}" stroke="#999" stroke-width="0.5"/><text x="4" y="{y:.2}">{addr:#x}</text>"##,
                w - 20.0
            );
        }
        let seconds = (self.time_range.1 - self.time_range.0) as f64 / 1e9;
        let _ = writeln!(
            svg,
            r#"<text x="{left}" y="{:.0}">0 s</text><text x="{:.0}" y="{:.0}" text-anchor="end">{seconds:.3} s (reads blue, writes red, both purple; {} bytes per row)</text>"#,
            h - 20.0,
            w - 20.0,
            h - 20.0,
            self.bytes_per_row()
        );
        svg.push_str("</svg>\n");
        std::fs::File::create(path)?.write_all(svg.as_bytes())?;
        Ok(())
    }

    /// Events per address row over the whole time: the memref patch's spatial plot.
    pub fn spatial(&self) -> Vec<u64> {
        (0..self.height)
            .map(|row| {
                self.cells[row * self.width..(row + 1) * self.width]
                    .iter()
                    .map(|c| u64::from(c[0]) + u64::from(c[1]))
                    .sum()
            })
            .collect()
    }

    /// Events per time bucket over all addresses: the memref patch's temporal plot.
    pub fn temporal(&self) -> Vec<u64> {
        (0..self.width)
            .map(|col| {
                (0..self.height)
                    .map(|row| self.cells[row * self.width + col])
                    .map(|c| u64::from(c[0]) + u64::from(c[1]))
                    .sum()
            })
            .collect()
    }

    /// A quick look in the terminal: one character per cell of a map shrunk to `cols` x
    /// `rows`, darker for more events.
    pub fn to_terminal(&self, cols: usize, rows: usize) -> String {
        const SHADES: &[u8] = b" .:-=+*#%@";
        let (cols, rows) = (cols.clamp(1, self.width), rows.clamp(1, self.height));
        let mut sums = vec![0u64; cols * rows];
        for row in 0..self.height {
            for col in 0..self.width {
                let [r, w] = self.cells[row * self.width + col];
                sums[(row * rows / self.height) * cols + col * cols / self.width] +=
                    u64::from(r) + u64::from(w);
            }
        }
        let max = sums.iter().copied().max().unwrap_or(1).max(1) as f64;
        let mut out = String::new();
        for row in (0..rows).rev() {
            for col in 0..cols {
                let n = sums[row * cols + col];
                let i = if n == 0 {
                    0
                } else {
                    1 + ((n as f64).ln_1p() / max.ln_1p() * (SHADES.len() - 2) as f64) as usize
                };
                out.push(SHADES[i.min(SHADES.len() - 1)] as char);
            }
            out.push('\n');
        }
        out
    }
}

fn escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Page blocks, ten time buckets, room for every block.
    const SMALL: HeatmapOptions = HeatmapOptions {
        block_bits: 12,
        width: 10,
        max_height: 100,
    };

    fn events() -> Vec<HeatEvent> {
        // Two touched ranges far apart: pages 0x1000..0x3000 and 0x7f00_0000_0000.
        let mut events = Vec::new();
        for t in 0..10 {
            events.push(HeatEvent {
                time: t * 100,
                addr: 0x1000,
                write: true,
            });
        }
        events.push(HeatEvent {
            time: 999,
            addr: 0x2000,
            write: false,
        });
        events.push(HeatEvent {
            time: 500,
            addr: 0x7f00_0000_0000,
            write: true,
        });
        events.push(HeatEvent {
            time: 500,
            addr: 0x7f00_0000_0000,
            write: false,
        });
        events
    }

    /// The far range is packed next to the near one, with a boundary at its first address.
    #[test]
    fn packs_touched_ranges() {
        let map = Heatmap::build(&events(), SMALL).unwrap();
        assert_eq!((map.width, map.height), (10, 3));
        assert_eq!(map.boundaries, vec![(0, 0x1000), (2, 0x7f00_0000_0000)]);
        let cell = |col: usize, row: usize| map.cells[row * map.width + col];
        assert_eq!(cell(0, 0), [0, 1]);
        assert_eq!(cell(9, 1), [1, 0]);
        assert_eq!(cell(5, 2), [1, 1]);
    }

    /// Pixels of the PNG: writes red, reads blue, both purple, untouched white, rows bottom-up.
    /// The RGB bytes of a PNG, row by row from the top.
    fn png_pixels(path: &Path) -> Vec<u8> {
        let file = std::io::BufReader::new(std::fs::File::open(path).unwrap());
        let mut reader = png::Decoder::new(file).read_info().unwrap();
        let mut buf = vec![0; reader.output_buffer_size().unwrap()];
        reader.next_frame(&mut buf).unwrap();
        buf
    }

    #[test]
    fn png_pixels_at_known_cells() {
        let map = Heatmap::build(&events(), SMALL).unwrap();
        let dir = std::env::temp_dir().join(format!("fltrace-heat-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("h.png");
        map.write_png(&path).unwrap();
        let buf = png_pixels(&path);
        let pixel = |x: usize, y: usize| {
            let i = (y * 10 + x) * 3;
            [buf[i], buf[i + 1], buf[i + 2]]
        };
        // Row 0 (lowest addresses) is the bottom line, y = 2.
        let write = pixel(0, 2);
        assert!(
            write[0] > 200 && write[1] < 120 && write[2] < 120,
            "write cell is red: {write:?}"
        );
        let read = pixel(9, 1);
        assert!(
            read[2] > 200 && read[0] < 120 && read[1] < 120,
            "read cell is blue: {read:?}"
        );
        let both = pixel(5, 0);
        assert!(
            both[0] < 120 && both[1] < 120 && both[2] < 120,
            "read and write cell is dark purple: {both:?}"
        );
        assert_eq!(pixel(3, 1), [255, 255, 255], "untouched");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// Two passes over batches give the same map as one pass over everything.
    #[test]
    fn allocations_are_outlined_over_their_touched_rows() {
        let dir = tempfile::tempdir().unwrap();
        let options = HeatmapOptions {
            block_bits: 12,
            width: 10,
            max_height: 100,
        };
        // Two touched ranges: pages 0x10-0x13 and 0x100-0x101; times 0..=900.
        let mut events = Vec::new();
        for (i, page) in [0x10u64, 0x11, 0x12, 0x13, 0x100, 0x101].iter().enumerate() {
            events.push(HeatEvent {
                time: i as u64 * 180,
                addr: page << 12,
                write: true,
            });
        }
        let mut map = Heatmap::build(&events, options).unwrap();
        assert_eq!(map.height, 6);
        map.overlay(&[
            // Pages 0x11-0x12, alive from 100 to 500: rows 1-2, columns 1 to 5 (t * 10 / 901).
            AllocRect {
                start: 100,
                end: 500,
                addr: 0x11 << 12,
                len: 0x2000,
                label: "a.c:7".into(),
            },
            // Untouched address space: nothing to draw.
            AllocRect {
                start: 0,
                end: 900,
                addr: 0x50 << 12,
                len: 0x1000,
                label: "none".into(),
            },
        ]);
        assert_eq!(
            map.rects,
            vec![PlacedRect {
                cols: (1, 5),
                rows: (1, 2),
                label: "a.c:7".into()
            }]
        );
        let path = dir.path().join("m.png");
        map.write_png(&path).unwrap();
        let buf = png_pixels(&path);
        let pixel = |col: usize, row: usize| {
            let y = map.height - 1 - row;
            let i = (y * map.width + col) * 3;
            [buf[i], buf[i + 1], buf[i + 2]]
        };
        assert_eq!(pixel(1, 1), ALLOC_OUTLINE, "corner");
        assert_eq!(pixel(3, 2), ALLOC_OUTLINE, "top edge");
        assert_ne!(pixel(6, 1), ALLOC_OUTLINE, "after the free");
        assert_ne!(pixel(2, 4), ALLOC_OUTLINE, "another range");
        let svg_path = dir.path().join("m.svg");
        map.write_svg(&svg_path, "t").unwrap();
        assert!(
            std::fs::read_to_string(&svg_path)
                .unwrap()
                .contains("<title>a.c:7</title>")
        );
    }

    #[test]
    fn range_samples_fill_their_blocks() {
        let options = HeatmapOptions {
            block_bits: 12,
            width: 2,
            max_height: 100,
        };
        let samples = [
            (0u64, 0x1000u64, 0x3000u64, 5u32),
            (100, 0x2000, 0x3000, 9),
            (100, 0x9000, 0xa000, 1),
        ];
        let mut builder = HeatmapBuilder::new(options);
        for (t, a, b, _) in samples {
            builder.scan_range(t, a, b);
        }
        let mut map = builder.layout().unwrap();
        for (t, a, b, w) in samples {
            map.add_range(t, a, b, w);
        }
        // Blocks 1, 2 and 9: three rows; time 0 in column 0, time 100 in column 1.
        assert_eq!(map.height, 3);
        let reads = |col: usize, row: usize| map.cells[row * map.width + col][0];
        assert_eq!([reads(0, 0), reads(0, 1), reads(0, 2)], [5, 5, 0]);
        assert_eq!([reads(1, 0), reads(1, 1), reads(1, 2)], [0, 9, 1]);
        assert_eq!(map.boundaries, vec![(0, 0x1000), (2, 0x9000)]);
    }

    #[test]
    fn batches_build_the_same_map() {
        let events = events();
        let whole = Heatmap::build(&events, SMALL).unwrap();
        let mut builder = HeatmapBuilder::new(SMALL);
        for batch in events.chunks(3) {
            builder.scan(batch);
        }
        let mut batched = builder.layout().unwrap();
        for batch in events.chunks(3) {
            batched.add(batch);
        }
        assert_eq!(batched.cells, whole.cells);
        assert_eq!(batched.boundaries, whole.boundaries);
    }

    /// Spatial and temporal sums add up to the events.
    #[test]
    fn spatial_and_temporal_sums() {
        let map = Heatmap::build(&events(), SMALL).unwrap();
        assert_eq!(map.spatial(), vec![10, 1, 2]);
        let temporal = map.temporal();
        assert_eq!(temporal.iter().sum::<u64>(), 13);
        assert_eq!(temporal[5], 3);
    }

    /// The terminal rendering has one line per row and marks busy cells.
    #[test]
    fn terminal_rendering() {
        let map = Heatmap::build(&events(), SMALL).unwrap();
        let text = map.to_terminal(10, 3);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 3);
        assert_ne!(lines[2].as_bytes()[0], b' ');
        assert_eq!(lines[1].as_bytes()[0], b' ');
    }
}
