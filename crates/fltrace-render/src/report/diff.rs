//! `fltrace diff A B`: faults per call site in two recordings, largest change first.

use std::fmt::Write as _;

use fltrace_analyze::{DiffRow, GroupBy, Loaded};

use super::{
    Format, csv_text, location_columns, location_fields, location_json, pretty, short_file_line,
    truncate,
};
use crate::Error;

/// The rows of `a` against `b`, grouped `by`, as `format` writes them.
pub fn diff(
    rows: &[DiffRow],
    by: GroupBy,
    a: &Loaded,
    b: &Loaded,
    format: Format,
) -> Result<String, Error> {
    Ok(match format {
        Format::Table => table(rows, a, b),
        Format::Csv => csv(rows, by)?,
        Format::Json => json(rows, by, a, b),
    })
}

fn ratio_text(row: &DiffRow) -> String {
    match row.ratio() {
        Some(r) => format!("{r:.2}x"),
        None => "new".to_owned(),
    }
}

fn table(rows: &[DiffRow], a: &Loaded, b: &Loaded) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{:>4} {:>9} {:>9} {:>9} {:>8}  {:<32} {:<36} lib",
        "#", "A", "B", "delta", "ratio", "function", "file:line"
    );
    for (i, row) in rows.iter().enumerate() {
        let l = &row.location;
        let _ = writeln!(
            out,
            "{:>4} {:>9} {:>9} {:>+9} {:>8}  {:<32} {:<36} {}",
            i + 1,
            row.a,
            row.b,
            row.delta(),
            ratio_text(row),
            truncate(&l.function, 32),
            short_file_line(l),
            l.lib
        );
        if let Some(stack) = &row.stack {
            let callers: Vec<String> = stack
                .iter()
                .skip(1)
                .map(|l| format!("{} ({})", l.function, short_file_line(l)))
                .collect();
            if !callers.is_empty() {
                let _ = writeln!(out, "{:>44}<- {}", "", callers.join(" <- "));
            }
        }
    }
    let _ = writeln!(
        out,
        "\nA: {} faults of `{}` in {}\nB: {} faults of `{}` in {}",
        a.total_faults(),
        a.command(),
        a.dir().display(),
        b.total_faults(),
        b.command(),
        b.dir().display()
    );
    out
}

fn csv(rows: &[DiffRow], by: GroupBy) -> Result<String, Error> {
    let header: Vec<&str> = ["a", "b", "delta", "ratio"]
        .into_iter()
        .chain(location_columns(by).iter().copied())
        .collect();
    csv_text(
        &header,
        rows.iter().map(|row| {
            let mut fields = vec![
                row.a.to_string(),
                row.b.to_string(),
                row.delta().to_string(),
                row.ratio().map(|r| format!("{r:.4}")).unwrap_or_default(),
            ];
            fields.extend(location_fields(&row.location, row.stack.as_deref(), by));
            fields
        }),
    )
}

fn side_json(loaded: &Loaded) -> serde_json::Value {
    serde_json::json!({
        "dir": loaded.dir().display().to_string(),
        "command": loaded.command(),
        "pids": loaded.traces.iter().map(|(t, _)| t.pid).collect::<Vec<_>>(),
        "faults": loaded.total_faults(),
    })
}

fn json(rows: &[DiffRow], by: GroupBy, a: &Loaded, b: &Loaded) -> String {
    let rows: Vec<serde_json::Value> = rows
        .iter()
        .map(|row| {
            let mut value = location_json(&row.location);
            value["a"] = row.a.into();
            value["b"] = row.b.into();
            value["delta"] = row.delta().into();
            value["ratio"] = row.ratio().into();
            if let (Some(stack), GroupBy::Stack) = (&row.stack, by) {
                value["stack"] = stack.iter().map(location_json).collect();
            }
            value
        })
        .collect();
    let doc = serde_json::json!({
        // `line`, `function`, `stack`, `dso`: the flag's own words.
        "by": format!("{by:?}").to_lowercase(),
        "a": side_json(a),
        "b": side_json(b),
        "rows": rows,
    });
    pretty(&doc)
}
