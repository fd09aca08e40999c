//! Time-by-address heatmaps of memory events (faults, reference samples): touched address
//! ranges are packed together with visible boundaries, so that a 47-bit address space with a
//! few busy regions still fills the picture.

mod figure;

use std::io::Write;
use std::path::Path;

pub use figure::HeatLabels;

use fltrace_analyze::{
    AccessHeat, FaultSelection, HeatRange, LabelledBlock, RangeHeat, heat_process_names,
    named_regions,
};
use fltrace_trace::{
    AccessRecord, Fault, FaultFlags, FaultRowGroups, Mapping, RangeTraceKind, Recording, VirtAddr,
};

use crate::Error;

/// One memory event to place on the map.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HeatEvent {
    /// When, in any unit (nanoseconds in fltrace traces).
    pub time: u64,
    /// The address touched.
    pub addr: VirtAddr,
    /// Whether it was a write.
    pub write: bool,
}

impl From<&Fault> for HeatEvent {
    /// A fault at its time and address, a write if it was one.
    fn from(fault: &Fault) -> HeatEvent {
        HeatEvent {
            time: fault.time_ns,
            addr: fault.addr,
            write: fault.flags.has(FaultFlags::WRITE),
        }
    }
}

impl From<&AccessRecord> for HeatEvent {
    /// An access sample at its time and address, a write if it was a store.
    fn from(sample: &AccessRecord) -> HeatEvent {
        HeatEvent {
            time: sample.time_ns,
            addr: sample.addr,
            write: sample.is_store(),
        }
    }
}

/// An allocation block ([`LabelledBlock`]) placed on the map: cell columns and rows, inclusive.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlacedRect {
    /// First and last column.
    pub cols: (usize, usize),
    /// Lowest and highest row.
    pub rows: (usize, usize),
    /// Its label.
    pub label: String,
}

/// A named address range (a mapping: `[heap]`, `libc.so.6`, `[anon]`), to label the rows of
/// the map it covers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AddressRegion {
    /// First address.
    pub start: VirtAddr,
    /// One past the last address.
    pub end: VirtAddr,
    /// What to call it.
    pub name: String,
}

/// Rows of the map that belong together: the touched blocks of one named region (consecutive
/// regions of the same name, such as a library's segments, make one band), or without names
/// one contiguous touched range.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Band {
    /// Lowest and highest row.
    pub rows: (usize, usize),
    /// The first touched address.
    pub start: VirtAddr,
    /// One past the last touched address.
    pub end: VirtAddr,
    /// The region's name, empty when no region covers it.
    pub name: String,
    /// Touched blocks in the band.
    pub blocks: usize,
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
#[derive(Debug, Clone, PartialEq, Eq)]
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
    /// The labelled bands of rows, lowest first.
    pub bands: Vec<Band>,
    /// The time shown as 0 on the time axis (the start of the recording).
    time_origin: u64,
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
            self.blocks.push(e.addr.get() >> self.options.block_bits);
            self.time_range = (self.time_range.0.min(e.time), self.time_range.1.max(e.time));
        }
        if self.blocks.len() > 1 << 22 {
            self.blocks.sort_unstable();
            self.blocks.dedup();
        }
    }

    /// First pass for a range sample: every block of `start..end` at `time`.
    pub fn scan_range(&mut self, time: u64, start: VirtAddr, end: VirtAddr) {
        let bits = self.options.block_bits;
        if end > start {
            self.blocks
                .extend((start.get() >> bits)..=((end.get() - 1) >> bits));
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
        let mut map = Heatmap {
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
            bands: Vec::new(),
            time_origin: self.time_range.0,
        };
        map.name_regions(&[]);
        Ok(map)
    }
}

impl Heatmap {
    /// Builds the map of the faults in the faults file `path` that `selection` keeps, with
    /// their count; `None` when it keeps none. Two passes over the file a row group at a time
    /// (blocks and times, then counts), so memory is bounded by the blocks touched, not by
    /// the faults.
    pub fn of_faults(
        path: &Path,
        selection: &FaultSelection,
        options: HeatmapOptions,
    ) -> Result<Option<(Heatmap, usize)>, Error> {
        let selected = |group: Vec<Fault>| -> Vec<HeatEvent> {
            group
                .iter()
                .filter(|f| selection.contains(f))
                .map(HeatEvent::from)
                .collect()
        };
        let mut builder = HeatmapBuilder::new(options);
        let mut count = 0;
        for group in FaultRowGroups::open(path)? {
            let events = selected(group?);
            count += events.len();
            builder.scan(&events);
        }
        if count == 0 {
            return Ok(None);
        }
        let mut map = builder.layout()?;
        for group in FaultRowGroups::open(path)? {
            map.add(&selected(group?));
        }
        Ok(Some((map, count)))
    }

    /// Builds the map of the ranges of a range trace ([`fltrace_analyze::heat_ranges`]), each
    /// on every block it covers, as hot as its weight.
    pub fn of_ranges(ranges: &[HeatRange], options: HeatmapOptions) -> Result<Heatmap, Error> {
        let mut builder = HeatmapBuilder::new(options);
        for r in ranges {
            builder.scan_range(r.time_ns, r.start, r.end);
        }
        let mut map = builder.layout()?;
        for r in ranges {
            map.add_range(r.time_ns, r.start, r.end, r.weight);
        }
        Ok(map)
    }

    /// Builds the map of events held in memory at once.
    pub fn build(events: &[HeatEvent], options: HeatmapOptions) -> Result<Heatmap, Error> {
        let mut builder = HeatmapBuilder::new(options);
        builder.scan(events);
        let mut map = builder.layout()?;
        map.add(events);
        Ok(map)
    }

    /// The map of PMU access samples (loads blue, stores red) timed from the first sample,
    /// its bands named after the process's mappings recorded in `dir`, with its words.
    pub fn of_access(
        heat: &AccessHeat,
        dir: &Path,
        options: HeatmapOptions,
    ) -> Result<(Heatmap, HeatLabels), Error> {
        let events: Vec<HeatEvent> = heat.samples.iter().map(HeatEvent::from).collect();
        let mut map = Heatmap::build(&events, options)?;
        map.set_time_origin(heat.start_ns);
        map.name_mappings_in(dir, heat.pid)?;
        Ok((map, HeatLabels::access(heat.pid, events.len())))
    }

    /// The map of a range trace (`fltrace wss`, `wss --damon`) timed from the start of
    /// sampling, with its words.
    pub fn of_range_trace(
        heat: &RangeHeat,
        options: HeatmapOptions,
    ) -> Result<(Heatmap, HeatLabels), Error> {
        let mut map = Heatmap::of_ranges(&heat.ranges, options)?;
        map.set_time_origin(0);
        let labels = HeatLabels::ranges(heat.pid, heat.ranges.len(), heat.kind);
        Ok((map, labels))
    }

    /// Finishes the map of `count` faults of process `pid` of `recording`: timed from the
    /// recording's start, its bands named after the process's mappings; gives its words (the
    /// names the process ran under, the command).
    pub fn finish_faults(
        &mut self,
        recording: &Recording,
        pid: u32,
        count: usize,
    ) -> Result<HeatLabels, Error> {
        self.set_time_origin(recording.session.start_ns);
        self.name_mappings_in(&recording.dir, pid)?;
        let names = heat_process_names(&fltrace_trace::files::faults(&recording.dir, pid), pid);
        Ok(HeatLabels::faults(
            pid,
            count,
            &names,
            &recording.session.command,
        ))
    }

    /// Sets the time shown as 0 on the time axis (by default the first event's).
    pub fn set_time_origin(&mut self, origin: u64) {
        self.time_origin = origin.min(self.time_range.0);
    }

    /// The time shown as 0 on the time axis.
    pub fn time_origin(&self) -> u64 {
        self.time_origin
    }

    /// The busiest cell's count (reads or writes), the top of the colour scale.
    pub fn max_count(&self) -> u32 {
        self.max_count
    }

    /// The first address of a row.
    pub fn row_address(&self, row: usize) -> VirtAddr {
        let rank = (row * self.blocks_per_row).min(self.blocks.len() - 1);
        VirtAddr::new(self.blocks[rank] << self.block_bits)
    }

    /// Groups the rows into [`bands`](Self::bands) by the named regions covering their blocks;
    /// `regions` need not be sorted but must not overlap. Blocks outside every region form
    /// one band per contiguous touched range.
    pub fn name_regions(&mut self, regions: &[AddressRegion]) {
        self.band_by(
            regions
                .iter()
                .map(|r| (r.start, r.end, r.name.as_str()))
                .collect(),
        );
    }

    /// [`name_mappings`](Self::name_mappings) after process `pid`'s mappings recorded in
    /// `dir`, when there are any.
    pub fn name_mappings_in(&mut self, dir: &Path, pid: u32) -> Result<(), Error> {
        let path = fltrace_trace::files::mmaps(dir, pid);
        if !path.is_file() {
            return Ok(());
        }
        let mappings =
            fltrace_trace::read_mappings(&path).map_err(|source| Error::Read { path, source })?;
        self.name_mappings(&mappings);
        Ok(())
    }

    /// [`name_regions`](Self::name_regions) after a process's recorded mappings, named as
    /// [`named_regions`] names them (`libc.so.6`, `[heap]`, `[anon]`).
    pub fn name_mappings(&mut self, mappings: &[Mapping]) {
        let regions = named_regions(mappings);
        self.band_by(
            regions
                .iter()
                .map(|(start, end, name)| (*start, *end, name.as_str()))
                .collect(),
        );
    }

    /// Groups the rows into bands by `(start, end, name)` regions ([`Self::name_regions`]).
    fn band_by(&mut self, mut regions: Vec<(VirtAddr, VirtAddr, &str)>) {
        regions.retain(|(start, end, _)| end > start);
        regions.sort_by_key(|(start, _, _)| *start);
        // Consecutive regions of one name (a library's segments) share a group, and a band.
        let mut groups = Vec::with_capacity(regions.len());
        for (i, region) in regions.iter().enumerate() {
            let same = i > 0 && regions[i - 1].2 == region.2;
            let last = groups.last().copied().unwrap_or(0);
            groups.push(if same || i == 0 { last } else { last + 1 });
        }
        let group_of = |addr: VirtAddr| {
            let i = regions.partition_point(|r| r.0 <= addr);
            (i > 0 && addr < regions[i - 1].1).then(|| (groups[i - 1], i - 1))
        };
        let bits = self.block_bits;
        let mut bands: Vec<Band> = Vec::new();
        let mut previous: Option<(u64, Option<(usize, usize)>)> = None;
        for (rank, &block) in self.blocks.iter().enumerate() {
            let group = group_of(VirtAddr::new(block << bits));
            let row = rank / self.blocks_per_row;
            let same_band =
                previous.is_some_and(|(prev_block, prev_group)| match (prev_group, group) {
                    (Some((a, _)), Some((b, _))) => a == b,
                    // Outside every region, each contiguous touched range is a band.
                    (None, None) => prev_block + 1 == block,
                    _ => false,
                });
            match bands.last_mut() {
                Some(band) if same_band => {
                    band.rows.1 = row;
                    band.end = VirtAddr::new((block + 1) << bits);
                    band.blocks += 1;
                }
                _ => bands.push(Band {
                    rows: (row, row),
                    start: VirtAddr::new(block << bits),
                    end: VirtAddr::new((block + 1) << bits),
                    name: group
                        .map(|(_, i)| regions[i].2.to_owned())
                        .unwrap_or_default(),
                    blocks: 1,
                }),
            }
            previous = Some((block, group));
        }
        self.bands = bands;
    }

    /// Second pass for a range sample: `weight` accesses (as reads: range traces do not tell
    /// reads from writes) on every block of `start..end` at `time`.
    pub fn add_range(&mut self, time: u64, start: VirtAddr, end: VirtAddr, weight: u32) {
        if end <= start || weight == 0 {
            return;
        }
        let (t0, t1) = self.time_range;
        let span = (t1.saturating_sub(t0)).max(1) as u128;
        let col = (((time.saturating_sub(t0)) as u128 * self.width as u128 / (span + 1)) as usize)
            .min(self.width - 1);
        let low = self
            .blocks
            .partition_point(|&b| b < start.get() >> self.block_bits);
        let high = self
            .blocks
            .partition_point(|&b| b <= (end.get() - 1) >> self.block_bits);
        for rank in low..high {
            let row = (rank / self.blocks_per_row).min(self.height - 1);
            let cell = &mut self.cells[row * self.width + col][0];
            *cell = cell.saturating_add(weight);
            self.max_count = self.max_count.max(*cell);
        }
    }

    /// Places allocation blocks over the map, as Heimdallr does: each one's lifetime by its
    /// address range, labelled with its allocation site. Only the touched part of a block's
    /// range has rows (unused address space is collapsed), so one that no event touched is
    /// left out. Lifetimes are clamped to the map's time range: which blocks belong to the
    /// map's time is the caller's choice, as allocation times are only as fine as their clock
    /// (a block born a moment before the first fault drawn is drawn from the first column).
    pub fn overlay(&mut self, blocks: &[LabelledBlock]) {
        let (t0, t1) = self.time_range;
        let span = (t1.saturating_sub(t0)).max(1) as u128;
        let col_of = |t: u64| {
            (((t.clamp(t0, t1) - t0) as u128 * self.width as u128 / (span + 1)) as usize)
                .min(self.width - 1)
        };
        for block in blocks {
            let first = block.addr.get() >> self.block_bits;
            let last = (block.addr.get() + block.size.max(1) - 1) >> self.block_bits;
            let low = self.blocks.partition_point(|&b| b < first);
            let high = self.blocks.partition_point(|&b| b <= last);
            if low == high {
                continue;
            }
            let row = |rank: usize| (rank / self.blocks_per_row).min(self.height - 1);
            self.rects.push(PlacedRect {
                cols: (col_of(block.start_ns), col_of(block.end_ns)),
                rows: (row(low), row(high - 1)),
                label: block.label.clone(),
            });
        }
    }

    /// Second pass: counts a batch of events (from the same events as were scanned).
    pub fn add(&mut self, events: &[HeatEvent]) {
        let (t0, t1) = self.time_range;
        let span = (t1.saturating_sub(t0)).max(1) as u128;
        for event in events {
            let rank = self
                .blocks
                .partition_point(|&b| b < event.addr.get() >> self.block_bits);
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
        color_of(reads, writes, self.max_count)
    }

    /// Bytes of address space per row.
    pub fn bytes_per_row(&self) -> u64 {
        (self.blocks_per_row as u64) << self.block_bits
    }

    /// Writes the map as a PNG: the same picture as [`write_svg`](Self::write_svg), axes,
    /// labels and legend included.
    pub fn write_png(&self, out: impl Write, labels: &HeatLabels) -> Result<(), Error> {
        crate::plot::ensure_font()?;
        self.figure(labels).write_png(out)
    }

    /// Writes the map as an SVG: cells, the time axis in seconds, the address axis with the
    /// touched ranges packed and each band named, the allocations, and a colour legend.
    pub fn write_svg(&self, mut out: impl Write, labels: &HeatLabels) -> Result<(), Error> {
        crate::plot::ensure_font()?;
        out.write_all(self.figure(labels).to_svg()?.as_bytes())?;
        Ok(())
    }

    /// Writes the map in `format` (the same picture either way).
    pub fn write_image(
        &self,
        out: impl Write,
        format: ImageFormat,
        labels: &HeatLabels,
    ) -> Result<(), Error> {
        match format {
            ImageFormat::Png => self.write_png(out, labels),
            ImageFormat::Svg => self.write_svg(out, labels),
        }
    }

    /// The quick look in the terminal (100 x 30 characters) with a line saying what it spans.
    pub fn terminal_view(&self, labels: &HeatLabels) -> String {
        self.terminal_view_within(labels, None)
    }

    /// The same within `width` columns (`None`: 100): the picture narrower, the line under it
    /// wrapped.
    pub fn terminal_view_within(&self, labels: &HeatLabels, width: Option<usize>) -> String {
        let columns = width.map_or(100, |w| w.min(100));
        let line = format!(
            "{}, {:.3} s left to right, {} bytes per row, {} touched ranges bottom to top",
            labels.subtitle,
            (self.time_range.1 - self.time_range.0) as f64 / 1e9,
            self.bytes_per_row(),
            self.boundaries.len()
        );
        format!(
            "{}{}\n",
            self.to_terminal(columns, 30),
            crate::table::wrap(&line, width)
        )
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

/// The colour of a cell with `reads` and `writes` against the busiest cell's `max`: reads
/// blue, writes red, both purple, darker for more (log scale); untouched cells white.
pub fn color_of(reads: u32, writes: u32, max: u32) -> [u8; 3] {
    if reads == 0 && writes == 0 {
        return [255, 255, 255];
    }
    let max = f64::from(max.max(1));
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

impl HeatLabels {
    /// The words of a map of process `pid`'s `count` faults: `names` as
    /// [`fltrace_analyze::heat_process_names`] gives them, `command` the recording's.
    pub fn faults(pid: u32, count: usize, names: &str, command: &str) -> HeatLabels {
        HeatLabels {
            title: format!("page faults of process {pid} over time and address"),
            subtitle: format!(
                "{} of process {pid}{names} ({command})",
                fltrace_analyze::plural(count as u64, "fault")
            ),
            count_name: "faults".into(),
            time_origin: "the recording started".into(),
        }
    }

    /// The words of a map of process `pid`'s `count` PMU access samples.
    pub fn access(pid: u32, count: usize) -> HeatLabels {
        HeatLabels {
            title: format!("sampled loads and stores of process {pid} over time and address"),
            subtitle: format!("{count} access samples of process {pid}"),
            count_name: "samples".into(),
            time_origin: "the first sample".into(),
        }
    }

    /// The words of a map of process `pid`'s `count` ranges of a range trace of `kind`.
    pub fn ranges(pid: u32, count: usize, kind: RangeTraceKind) -> HeatLabels {
        let (source, count_name) = match kind {
            RangeTraceKind::ReferencedBytes => (
                "reference bits (per cent of each mapping referenced)",
                "per cent referenced",
            ),
            RangeTraceKind::DamonAccesses => ("DAMON (access counts)", "accesses"),
        };
        HeatLabels {
            title: format!("accesses of process {pid} over time and address"),
            subtitle: format!("{count} accessed ranges of process {pid} from {source}"),
            count_name: count_name.into(),
            time_origin: "sampling began".into(),
        }
    }
}

/// Where a map goes: the file given, or by default `fltrace-data-<name>-<pid>.png` and
/// `.svg` with the memref patch's temporal and spatial plots (`memref` for `heatmap` in the
/// name) beside them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HeatmapFiles {
    /// The memref plots, with the default files only.
    pub memref: Option<std::path::PathBuf>,
    /// The pictures of the map, each `.png` or `.svg`.
    pub images: Vec<std::path::PathBuf>,
}

impl HeatmapFiles {
    /// `output` if given, else the default files of map `name` of process `pid` in `dir`.
    pub fn new(
        output: Option<&std::path::Path>,
        dir: &std::path::Path,
        name: &str,
        pid: u32,
    ) -> HeatmapFiles {
        use fltrace_trace::files::path;
        match output {
            Some(output) => HeatmapFiles {
                memref: None,
                images: vec![output.to_owned()],
            },
            None => HeatmapFiles {
                memref: Some(path(
                    dir,
                    &name.replacen("heatmap", "memref", 1),
                    pid,
                    "svg",
                )),
                images: vec![path(dir, name, pid, "png"), path(dir, name, pid, "svg")],
            },
        }
    }
}

/// A heatmap file named neither `.png` nor `.svg`.
#[derive(Debug, thiserror::Error)]
#[error("{}: the heatmap is written as .png or .svg", .0.display())]
pub struct NotAnImageName(pub std::path::PathBuf);

impl HeatmapFiles {
    /// Writes the memref plots (if any) and then each picture of `map`, telling `each` of
    /// every file written; a picture named neither `.png` nor `.svg` ends it.
    pub fn write<E: From<fltrace_trace::Error> + From<NotAnImageName>>(
        &self,
        map: &Heatmap,
        labels: &HeatLabels,
        mut each: impl FnMut(&Path) -> Result<(), E>,
    ) -> Result<(), E> {
        use fltrace_trace::files::write_with;
        if let Some(memref) = &self.memref {
            write_with(memref, |out| crate::memref_plots(map, labels, out))?;
            each(memref)?;
        }
        for path in &self.images {
            let Some(format) = ImageFormat::of_path(path) else {
                return Err(NotAnImageName(path.clone()).into());
            };
            write_with(path, |out| map.write_image(out, format, labels))?;
            each(path)?;
        }
        Ok(())
    }
}

/// The picture formats a heatmap is written in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ImageFormat {
    /// A PNG image.
    Png,
    /// An SVG document, with hover titles.
    Svg,
}

impl ImageFormat {
    /// The format a file's extension names (`.png` or `.svg`), if either.
    pub fn of_path(path: &std::path::Path) -> Option<ImageFormat> {
        match path.extension().and_then(|e| e.to_str()) {
            Some("png") => Some(ImageFormat::Png),
            Some("svg") => Some(ImageFormat::Svg),
            _ => None,
        }
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// The default files sit side by side under the map's name, memref's plots named after
    /// it; a file given is the only one.
    #[test]
    fn heatmap_files_are_named_after_the_map() {
        let dir = std::path::Path::new("d");
        assert_eq!(
            HeatmapFiles::new(None, dir, "heatmap-wss", 9),
            HeatmapFiles {
                memref: Some("d/fltrace-data-memref-wss-9.svg".into()),
                images: vec![
                    "d/fltrace-data-heatmap-wss-9.png".into(),
                    "d/fltrace-data-heatmap-wss-9.svg".into()
                ],
            }
        );
        let given = HeatmapFiles::new(Some(std::path::Path::new("m.svg")), dir, "heatmap", 9);
        assert_eq!((given.memref, given.images), (None, vec!["m.svg".into()]));
    }

    /// An access map is timed from the first sample, loads and stores each counted once,
    /// and says how many samples of which process it draws.
    #[test]
    fn access_map_is_timed_from_the_first_sample() {
        let sample = |time_ns, addr, data_src| AccessRecord {
            time_ns,
            tid: 7,
            ip: fltrace_trace::CodeAddr::new(0x40_1000),
            addr: VirtAddr::new(addr),
            latency: 0,
            data_src,
            stack_id: 0,
        };
        let heat = AccessHeat {
            pid: 7,
            start_ns: 1_000,
            samples: vec![sample(5_000, 0x7f00_0000, 0), sample(9_000, 0x7f00_1000, 4)],
        };
        let (map, labels) =
            Heatmap::of_access(&heat, Path::new("/nonexistent"), HeatmapOptions::default())
                .unwrap();
        assert_eq!(map.time_origin(), 1_000);
        assert_eq!(map.max_count(), 1);
        assert_eq!(labels.subtitle, "2 access samples of process 7");
        assert_eq!(labels.time_origin, "the first sample");
    }

    /// The words of each map say what it counts, of which process, since when.
    #[test]
    fn heat_labels_say_what_is_drawn() {
        let faults = HeatLabels::faults(5, 1, " sh then cc", "make");
        assert_eq!(faults.subtitle, "1 fault of process 5 sh then cc (make)");
        assert_eq!(
            faults.title,
            "page faults of process 5 over time and address"
        );
        let damon = HeatLabels::ranges(5, 3, RangeTraceKind::DamonAccesses);
        assert_eq!(
            (damon.subtitle.as_str(), damon.count_name.as_str()),
            (
                "3 accessed ranges of process 5 from DAMON (access counts)",
                "accesses"
            )
        );
        let access = HeatLabels::access(5, 2);
        assert_eq!(access.time_origin, "the first sample");
    }

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
                addr: VirtAddr::new(0x1000),
                write: true,
            });
        }
        events.push(HeatEvent {
            time: 999,
            addr: VirtAddr::new(0x2000),
            write: false,
        });
        events.push(HeatEvent {
            time: 500,
            addr: VirtAddr::new(0x7f00_0000_0000),
            write: true,
        });
        events.push(HeatEvent {
            time: 500,
            addr: VirtAddr::new(0x7f00_0000_0000),
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

    #[test]
    fn image_formats_by_extension() {
        let of = |p: &str| ImageFormat::of_path(std::path::Path::new(p));
        assert_eq!(of("a/heatmap.png"), Some(ImageFormat::Png));
        assert_eq!(of("heatmap.svg"), Some(ImageFormat::Svg));
        assert_eq!(of("heatmap.jpg"), None);
        assert_eq!(of("heatmap"), None);
    }

    #[test]
    fn terminal_view_ends_with_what_it_spans() {
        let map = Heatmap::build(&events(), SMALL).unwrap();
        let view = map.terminal_view(&labels());
        assert!(view.starts_with(&map.to_terminal(100, 30)));
        assert!(
            view.ends_with(
                "\ns, 0.000 s left to right, 4096 bytes per row, 2 touched ranges bottom to top\n"
            ),
            "{view}"
        );
    }

    fn labels() -> HeatLabels {
        HeatLabels {
            title: "t".into(),
            subtitle: "s".into(),
            count_name: "faults".into(),
            time_origin: "the start".into(),
        }
    }

    /// The written PNG, decoded: its size and RGB bytes row by row from the top.
    pub(crate) fn png_of(map: &Heatmap) -> (u32, u32, Vec<u8>) {
        let mut png = Vec::new();
        map.write_png(&mut png, &labels()).unwrap();
        let mut reader = png::Decoder::new(std::io::Cursor::new(png))
            .read_info()
            .unwrap();
        let mut buf = vec![0; reader.output_buffer_size().unwrap()];
        let info = reader.next_frame(&mut buf).unwrap();
        (info.width, info.height, buf)
    }

    /// The colour in the middle of a cell of the PNG.
    fn cell_pixel(map: &Heatmap, png: &(u32, u32, Vec<u8>), col: usize, row: usize) -> [u8; 3] {
        let (_, grid) = map.layout_figure(&labels());
        let b = grid.cell(col, row);
        pixel(png, (b[0] + b[2]) / 2, (b[1] + b[3]) / 2)
    }

    fn pixel(png: &(u32, u32, Vec<u8>), x: i32, y: i32) -> [u8; 3] {
        let i = (y as usize * png.0 as usize + x as usize) * 3;
        [png.2[i], png.2[i + 1], png.2[i + 2]]
    }

    /// Pixels of the PNG: writes red, reads blue, both purple, untouched white, rows bottom-up.
    #[test]
    fn png_pixels_at_known_cells() {
        let map = Heatmap::build(&events(), SMALL).unwrap();
        let png = png_of(&map);
        let (figure, _) = map.layout_figure(&labels());
        assert_eq!((png.0, png.1), (figure.width, figure.height));
        // Row 0 (lowest addresses) is the bottom line.
        let write = cell_pixel(&map, &png, 0, 0);
        assert!(
            write[0] > 200 && write[1] < 120 && write[2] < 120,
            "write cell is red: {write:?}"
        );
        let read = cell_pixel(&map, &png, 9, 1);
        assert!(
            read[2] > 200 && read[0] < 120 && read[1] < 120,
            "read cell is blue: {read:?}"
        );
        let both = cell_pixel(&map, &png, 5, 2);
        assert!(
            both[0] < 120 && both[1] < 120 && both[2] < 120,
            "read and write cell is dark purple: {both:?}"
        );
        assert_eq!(cell_pixel(&map, &png, 3, 1), [255, 255, 255], "untouched");
    }

    /// Allocations are outlined over the rows their touched blocks take, while they live.
    #[test]
    fn allocations_are_outlined_over_their_touched_rows() {
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
                addr: VirtAddr::new(page << 12),
                write: true,
            });
        }
        let mut map = Heatmap::build(&events, options).unwrap();
        assert_eq!(map.height, 6);
        map.overlay(&[
            // Pages 0x11-0x12, alive from 100 to 500: rows 1-2, columns 1 to 5 (t * 10 / 901).
            LabelledBlock {
                start_ns: 100,
                end_ns: 500,
                addr: VirtAddr::new(0x11 << 12),
                size: 0x2000,
                label: "a.c:7".into(),
            },
            // Untouched address space: nothing to draw.
            LabelledBlock {
                start_ns: 0,
                end_ns: 900,
                addr: VirtAddr::new(0x50 << 12),
                size: 0x1000,
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
        let png = png_of(&map);
        let (_, grid) = map.layout_figure(&labels());
        let green = |x: i32, y: i32| pixel(&png, x, y) == ALLOC_OUTLINE;
        let corner = grid.cell(1, 1);
        assert!(green(corner[0], corner[3] - 1), "bottom-left corner");
        let top = grid.cell(3, 2);
        assert!(green((top[0] + top[2]) / 2, top[1]), "top edge");
        let after = grid.cell(6, 1);
        assert!(!green(after[0], after[3] - 1), "after the free");
        let other = grid.cell(2, 4);
        assert!(!green(other[0], other[3] - 1), "another range");
        let mut svg = Vec::new();
        map.write_svg(&mut svg, &labels()).unwrap();
        let svg = String::from_utf8(svg).unwrap();
        assert!(svg.contains("<title>a.c:7</title>"), "hover title");
        assert!(svg.contains(">\na.c:7\n</text>"), "label drawn");
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
            builder.scan_range(t, VirtAddr::new(a), VirtAddr::new(b));
        }
        let mut map = builder.layout().unwrap();
        for (t, a, b, w) in samples {
            map.add_range(t, VirtAddr::new(a), VirtAddr::new(b), w);
        }
        // Blocks 1, 2 and 9: three rows; time 0 in column 0, time 100 in column 1.
        assert_eq!(map.height, 3);
        let reads = |col: usize, row: usize| map.cells[row * map.width + col][0];
        assert_eq!([reads(0, 0), reads(0, 1), reads(0, 2)], [5, 5, 0]);
        assert_eq!([reads(1, 0), reads(1, 1), reads(1, 2)], [0, 9, 1]);
        assert_eq!(map.boundaries, vec![(0, 0x1000), (2, 0x9000)]);
    }

    /// Two passes over batches give the same map as one pass over everything.
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

    /// The map of a faults file of two row groups, filtered a group at a time, is the map of
    /// the selected faults held at once, and counts exactly those at the window's and the
    /// address range's edges.
    #[test]
    fn faults_file_builds_the_map_of_its_selected_faults() {
        use fltrace_trace::{CodeAddr, FaultWriter, files};
        const START: u64 = 1_000_000_000;
        let dir = tempfile::tempdir().unwrap();
        let path = files::faults(dir.path(), 7);
        let fault = |i: u64| Fault {
            time_ns: START + i * 1000,
            pid: 7,
            tid: 7,
            ip: CodeAddr::new(0x40_0000),
            addr: VirtAddr::new(0x10_0000 + (i % 300) * 4096 + i % 4096),
            flags: FaultFlags(if i.is_multiple_of(3) {
                FaultFlags::WRITE
            } else {
                0
            }),
            stack_id: 0,
        };
        // More than one row group (64K rows).
        const FAULTS: u64 = 70_000;
        let mut writer = FaultWriter::create(&path, &[]).unwrap();
        for i in 0..FAULTS {
            writer.push(fault(i)).unwrap();
        }
        writer.finish().unwrap();
        assert_eq!(FaultRowGroups::open(&path).unwrap().row_groups(), 2);

        // Faults 10_000..60_000 (ns 10 ms..60 ms), pages 0x110..0x200 of 300.
        let selection =
            FaultSelection::new(START, Some((0.01, 0.06)), Some((0x11_0000, 0x20_0000)));
        let (map, count) = Heatmap::of_faults(&path, &selection, SMALL)
            .unwrap()
            .unwrap();
        let selected: Vec<HeatEvent> = (0..FAULTS)
            .map(fault)
            .filter(|f| (10_000..60_000).contains(&((f.time_ns - START) / 1000)))
            .filter(|f| (0x11_0000..0x20_0000).contains(&f.addr.get()))
            .map(|f| HeatEvent::from(&f))
            .collect();
        assert_eq!(count, selected.len());
        // 50,000 faults, 240 of each 300 on a selected page.
        assert_eq!(count, 39_996);
        assert_eq!(map, Heatmap::build(&selected, SMALL).unwrap());
        // 240 pages, three to a row.
        assert_eq!(map.height, 80);
        assert_eq!(
            (map.row_address(0), map.row_address(79)),
            (VirtAddr::new(0x11_0000), VirtAddr::new(0x1fd_000))
        );

        let nothing = FaultSelection::new(START, Some((5.0, 6.0)), None);
        assert_eq!(Heatmap::of_faults(&path, &nothing, SMALL).unwrap(), None);
    }

    /// A range trace's ranges fill every block they cover, as hot as their weight.
    #[test]
    fn heat_ranges_fill_their_blocks() {
        let range = |time_ns, start, end, weight| HeatRange {
            time_ns,
            start: VirtAddr::new(start),
            end: VirtAddr::new(end),
            weight,
        };
        let options = HeatmapOptions {
            block_bits: 12,
            width: 2,
            max_height: 100,
        };
        let map = Heatmap::of_ranges(
            &[
                range(0, 0x1000, 0x3000, 5),
                range(100, 0x2000, 0x3000, 9),
                range(100, 0x9000, 0xa000, 1),
            ],
            options,
        )
        .unwrap();
        let reads = |col: usize, row: usize| map.cells[row * map.width + col][0];
        assert_eq!([reads(0, 0), reads(0, 1), reads(0, 2)], [5, 5, 0]);
        assert_eq!([reads(1, 0), reads(1, 1), reads(1, 2)], [0, 9, 1]);
        assert!(matches!(
            Heatmap::of_ranges(&[], options),
            Err(Error::Empty)
        ));
    }

    /// Bands take the short names of the mappings over their blocks; a library's segments
    /// make one band.
    #[test]
    fn bands_are_named_after_the_mappings() {
        let mapping = |start: u64, end: u64, path: &str| Mapping {
            start: VirtAddr::new(start),
            end: VirtAddr::new(end),
            path: path.into(),
            ..Mapping::default()
        };
        let mut map = Heatmap::build(&events(), SMALL).unwrap();
        map.name_mappings(&[
            mapping(0x1000, 0x2000, "/usr/lib/libc.so.6"),
            mapping(0x2000, 0x3000, "/usr/lib/libc.so.6"),
            mapping(0x7f00_0000_0000, 0x7f00_0000_1000, "[stack]"),
        ]);
        let names: Vec<(&str, (usize, usize))> = map
            .bands
            .iter()
            .map(|b| (b.name.as_str(), b.rows))
            .collect();
        assert_eq!(names, vec![("libc.so.6", (0, 1)), ("[stack]", (2, 2))]);
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
