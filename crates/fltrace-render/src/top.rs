//! `fltrace top`'s words: the headline of an interval and its rows as columns, shared by the
//! full-screen view and the plain tables of `--batch`.

use std::fmt::Write as _;

use fltrace_analyze::{TopRow, TopSnapshot, TopSort, TopView};

use crate::report::truncate;

/// The headline of an interval, one line a figure group: faults, processes, and under
/// far-memory emulation local and far memory.
pub fn headline(snapshot: &TopSnapshot) -> Vec<String> {
    let recorded = &snapshot.recorded;
    let mut faults = format!(
        "faults/s {}  faults {}  lost {}  truncated {}",
        rate(snapshot.faults_per_s),
        snapshot.faults,
        recorded.lost,
        recorded.truncated,
    );
    if snapshot.tracer_faults > 0 {
        let _ = write!(faults, "  fltrace's own {}", snapshot.tracer_faults);
    }
    let _ = write!(
        faults,
        "  processes {} ({} running)  threads {}",
        snapshot.processes, snapshot.running, snapshot.threads
    );
    let mut lines = vec![faults];
    if let Some(far) = &snapshot.far {
        lines.push(format!(
            "local {}  far {}  evictions/s {}  fetches/s {}",
            megabytes(far.local_bytes),
            megabytes(far.far_bytes),
            rate(snapshot.evictions_per_s),
            rate(snapshot.fetches_per_s),
        ));
    }
    lines
}

/// Bytes as MB with one decimal, as the headline says them.
pub fn megabytes(bytes: u64) -> String {
    format!("{:.1} MB", bytes as f64 / 1e6)
}

/// A rate, to the unit.
pub fn rate(per_s: f64) -> String {
    format!("{per_s:.0}")
}

/// The column headings of `view`'s rows after `#`, faults/s and total.
pub fn columns(view: TopView) -> &'static [&'static str] {
    match view {
        TopView::Sites => &["kind", "type", "function", "file:line", "lib"],
        TopView::Processes => &["kind", "type", "process", "pid"],
        TopView::Threads => &["kind", "type", "thread", "tid (pid)"],
        TopView::Libraries => &["kind", "type", "library"],
    }
}

/// The cells of `row` under [`columns`]`(view)`.
pub fn cells(row: &TopRow, view: TopView) -> Vec<String> {
    let mut cells = vec![
        row.counts.kind_name().to_owned(),
        row.counts.type_name().to_owned(),
        row.name.to_string(),
    ];
    match view {
        TopView::Sites => {
            cells.push(row.place.clone());
            cells.push(row.lib.to_string());
        }
        TopView::Processes | TopView::Threads => cells.push(row.place.clone()),
        TopView::Libraries => {}
    }
    cells
}

/// One interval as a plain table (`top -b`): a title line, the headline, the first `limit`
/// rows of `view` sorted by `sort` in at most `width` columns, and how many more there are.
pub fn table(
    snapshot: &TopSnapshot,
    view: TopView,
    sort: TopSort,
    limit: usize,
    width: usize,
) -> String {
    let mut out = format!(
        "fltrace top: interval {} of {:.2} s, {:.1} s in{}\n",
        snapshot.number,
        snapshot.interval.as_secs_f64(),
        snapshot.elapsed.as_secs_f64(),
        if snapshot.finished {
            ", the recording finished"
        } else {
            ""
        },
    );
    for line in headline(snapshot) {
        out.push_str(&line);
        out.push('\n');
    }
    let rows = snapshot.rows(view, sort, "");
    let shown = &rows[..rows.len().min(limit)];
    let headings = columns(view);
    let mut widths: Vec<usize> = headings.iter().map(|h| h.chars().count()).collect();
    let table: Vec<Vec<String>> = shown.iter().map(|row| cells(row, view)).collect();
    for cells in &table {
        for (w, cell) in widths.iter_mut().zip(cells) {
            *w = (*w).max(cell.chars().count());
        }
    }
    // The name gives up room first, down to 16 columns.
    const PREFIX: usize = 4 + 1 + 11 + 1 + 11 + 2;
    let others: usize = widths
        .iter()
        .enumerate()
        .filter(|&(i, _)| i != 2)
        .map(|(_, w)| w + 1)
        .sum();
    if let Some(name) = widths.get_mut(2) {
        let room = width.saturating_sub(PREFIX + others);
        *name = (*name).min(room.max(16));
    }
    let _ = write!(out, "{:>4} {:>11} {:>11}  ", "#", "faults/s", "total");
    push_cells(&mut out, headings.iter().map(|h| h.to_string()), &widths);
    for (i, (row, cells)) in shown.iter().zip(table).enumerate() {
        let _ = write!(
            out,
            "{:>4} {:>11} {:>11}  ",
            i + 1,
            rate(row.rate),
            row.counts.count
        );
        push_cells(&mut out, cells.into_iter(), &widths);
    }
    if rows.len() > shown.len() {
        let _ = writeln!(
            out,
            "     and {} more {}",
            rows.len() - shown.len(),
            view.name()
        );
    }
    out.push('\n');
    out
}

/// `cells` padded to `widths` (the last one not padded), then a newline.
fn push_cells(out: &mut String, cells: impl Iterator<Item = String>, widths: &[usize]) {
    let mut line = String::new();
    for (i, (cell, &w)) in cells.zip(widths).enumerate() {
        if i > 0 {
            line.push(' ');
        }
        let cell = truncate(&cell, w);
        let _ = write!(line, "{cell:<w$}");
    }
    out.push_str(line.trim_end());
    out.push('\n');
}
