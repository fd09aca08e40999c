//! `fltrace top`'s words: the headline of an interval and its rows as columns, shared by the
//! full-screen view and the plain tables of `--batch`. Allocation sites have columns of their
//! own (allocations per second, in all, the bytes and blocks alive): the full screen shows
//! them as a view of their own, `--batch` as a second table after the faults'.

use std::fmt::Write as _;

use fltrace_analyze::{TopRow, TopSnapshot, TopSort, TopView};

use crate::table::{Align, Table, wrap};

/// The headline of an interval, one line a figure group: faults, processes, under
/// far-memory emulation local and far memory, and under `--allocs` allocations.
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
    // The view fell behind: its counts are short by these (the recording has them all).
    let dropped = snapshot.view_dropped;
    if dropped.total() > 0 {
        let _ = write!(faults, "  view dropped {} fault updates", dropped.faults);
        if dropped.alloc_calls > 0 {
            let _ = write!(faults, ", {} alloc calls", dropped.alloc_calls);
        }
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
    if let Some(allocs) = &snapshot.allocs {
        let mut line = format!(
            "allocs/s {}  allocs {}  live {} in {} blocks  allocs lost {}",
            rate(allocs.allocs_per_s),
            allocs.allocs,
            bytes(allocs.live_bytes),
            allocs.live_allocs,
            allocs.dropped,
        );
        if allocs.unpaired > 0 {
            let _ = write!(line, "  unpaired {}", allocs.unpaired);
        }
        lines.push(line);
    }
    lines
}

/// Bytes as MiB with one decimal, as the headline says them (binary, as every size fltrace prints).
pub fn megabytes(bytes: u64) -> String {
    format!("{:.1} MiB", bytes as f64 / 1_048_576.0)
}

/// Bytes in binary units, as every table prints sizes.
pub fn bytes(bytes: u64) -> String {
    crate::table::bytes(bytes)
}

/// A rate, to the unit.
pub fn rate(per_s: f64) -> String {
    format!("{per_s:.0}")
}

/// The headings of the figures of `view`'s rows after `#`: a rate and a total.
pub fn figure_columns(view: TopView) -> [&'static str; 2] {
    match view {
        TopView::Allocations => ["allocs/s", "allocs"],
        _ => ["faults/s", "total"],
    }
}

/// The figures of `row` under [`figure_columns`].
pub fn figures(row: &TopRow) -> [String; 2] {
    [
        rate(row.rate),
        row.alloc.map_or(row.counts.count, |a| a.allocs).to_string(),
    ]
}

/// The column headings of `view`'s rows after `#` and [`figure_columns`].
pub fn columns(view: TopView) -> &'static [&'static str] {
    match view {
        TopView::Sites => &["kind", "type", "function", "file:line", "lib"],
        TopView::Allocations => &["live", "blocks", "function", "file:line", "lib"],
        TopView::Processes => &["kind", "type", "process", "pid"],
        TopView::Threads => &["kind", "type", "thread", "tid (pid)"],
        TopView::Libraries => &["kind", "type", "library"],
    }
}

/// The cells of `row` under [`columns`]`(view)`.
pub fn cells(row: &TopRow, view: TopView) -> Vec<String> {
    let mut cells = match row.alloc {
        Some(alloc) => vec![bytes(alloc.live_bytes), alloc.live_allocs.to_string()],
        None => vec![
            row.counts.kind_name().to_owned(),
            row.counts.type_name().to_owned(),
        ],
    };
    cells.push(row.name.to_string());
    match view {
        TopView::Sites | TopView::Allocations => {
            cells.push(row.place.clone());
            cells.push(row.lib.to_string());
        }
        TopView::Processes | TopView::Threads => cells.push(row.place.clone()),
        TopView::Libraries => {}
    }
    cells
}

/// One interval as a plain table (`top -b`): a title line, the headline, the first `limit`
/// rows of `view` sorted by `sort` in at most `width` columns, and how many more there are;
/// under `--allocs`, the allocation sites after, by the same rule.
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
        out.push_str(&wrap(&line, Some(width)));
        if !out.ends_with('\n') {
            out.push('\n');
        }
    }
    rows_table(&mut out, snapshot, view, sort, limit, width);
    if snapshot.allocs.is_some() && view != TopView::Allocations {
        out.push('\n');
        rows_table(&mut out, snapshot, TopView::Allocations, sort, limit, width);
    }
    out.push('\n');
    out
}

/// The first `limit` rows of `view` sorted by `sort` in at most `width` columns, and how
/// many more there are.
fn rows_table(
    out: &mut String,
    snapshot: &TopSnapshot,
    view: TopView,
    sort: TopSort,
    limit: usize,
    width: usize,
) {
    let rows = snapshot.rows(view, sort, "");
    let shown = &rows[..rows.len().min(limit)];
    let [rate_heading, total_heading] = figure_columns(view);
    // Names (function, file:line, lib) are cut in the middle to fit, kind and type left
    // out last, as in `report`'s table; an allocation site's bytes and blocks alive stay.
    let mut table = Table::new()
        .column("#", Align::Right)
        .column(rate_heading, Align::Right)
        .column(total_heading, Align::Right);
    table = if view == TopView::Allocations {
        table
            .column("live", Align::Right)
            .column("blocks", Align::Right)
            .gap(2)
    } else {
        table
            .column("kind", Align::Left)
            .gap(2)
            .droppable(1)
            .column("type", Align::Left)
            .droppable(2)
    };
    for (i, heading) in columns(view).iter().enumerate().skip(2) {
        table = table.name(heading, if i == 2 { 16 } else { 8 });
    }
    for (i, row) in shown.iter().enumerate() {
        let mut line = vec![(i + 1).to_string()];
        line.extend(figures(row));
        line.extend(cells(row, view));
        table.row(line);
    }
    out.push_str(&table.render(Some(width)));
    if rows.len() > shown.len() {
        let _ = writeln!(
            out,
            "     and {} more {}",
            rows.len() - shown.len(),
            view.name()
        );
    }
}
