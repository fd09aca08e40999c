//! `fltrace top`'s words: the headline of an interval and its rows as columns, shared by the
//! full-screen view and the plain tables of `--batch`.

use std::fmt::Write as _;

use fltrace_analyze::{TopRow, TopSnapshot, TopSort, TopView};

use crate::table::{Align, Table, wrap};

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

/// Bytes as MiB with one decimal, as the headline says them (binary, as every size fltrace prints).
pub fn megabytes(bytes: u64) -> String {
    format!("{:.1} MiB", bytes as f64 / 1_048_576.0)
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
        out.push_str(&wrap(&line, Some(width)));
        if !out.ends_with('\n') {
            out.push('\n');
        }
    }
    let rows = snapshot.rows(view, sort, "");
    let shown = &rows[..rows.len().min(limit)];
    // Names (function, file:line, lib) are cut in the middle to fit, kind and type left
    // out last, as in `report`'s table.
    let mut table = Table::new()
        .column("#", Align::Right)
        .column("faults/s", Align::Right)
        .column("total", Align::Right)
        .column("kind", Align::Left)
        .gap(2)
        .droppable(1)
        .column("type", Align::Left)
        .droppable(2);
    for (i, heading) in columns(view).iter().enumerate().skip(2) {
        table = table.name(heading, if i == 2 { 16 } else { 8 });
    }
    for (i, row) in shown.iter().enumerate() {
        let mut line = vec![
            (i + 1).to_string(),
            rate(row.rate),
            row.counts.count.to_string(),
        ];
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
    out.push('\n');
    out
}
