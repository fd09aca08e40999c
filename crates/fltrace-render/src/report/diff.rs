//! `fltrace diff A B`: faults per call site in two recordings, largest change first.

use fltrace_analyze::{DiffRow, GroupBy, Loaded, ThreadBy, ThreadDiffRow};

use super::{
    TableFormat, caller_text, csv_text, location_columns, location_fields, location_json, pretty,
    short_file_line,
};
use crate::Error;
use crate::table::{Align, Table, wrap};

/// The rows of `a` against `b`, grouped `by`, as `format` writes them, a table fitting
/// `width` columns (`None`: every name whole).
pub fn diff(
    rows: &[DiffRow],
    by: GroupBy,
    a: &Loaded,
    b: &Loaded,
    format: TableFormat,
    width: Option<usize>,
) -> Result<String, Error> {
    Ok(match format {
        TableFormat::Table => table(rows, by, a, b, width),
        TableFormat::Csv => csv(rows, by)?,
        TableFormat::Json => json(rows, by, a, b),
    })
}

/// The rows of threads of `a` against `b`, grouped `by`, as `format` writes them.
pub fn threads(
    rows: &[ThreadDiffRow],
    by: ThreadBy,
    a: &Loaded,
    b: &Loaded,
    format: TableFormat,
    width: Option<usize>,
) -> Result<String, Error> {
    let keys = |row: &ThreadDiffRow| -> Vec<String> {
        let id = |n: Option<u32>| n.map_or_else(String::new, |n| n.to_string());
        match by {
            ThreadBy::Comm => vec![row.comm.clone()],
            ThreadBy::Pid => vec![id(row.pid), row.comm.clone()],
            ThreadBy::Tid => vec![id(row.pid), id(row.tid), row.comm.clone()],
        }
    };
    let key_columns: &[&str] = match by {
        ThreadBy::Comm => &["comm"],
        ThreadBy::Pid => &["pid", "comm"],
        ThreadBy::Tid => &["pid", "tid", "comm"],
    };
    Ok(match format {
        TableFormat::Table => {
            let mut table = counts_columns();
            for &column in key_columns {
                table = if column == "comm" {
                    table.name(column, 16)
                } else {
                    table.column(column, Align::Right)
                };
            }
            for (i, row) in rows.iter().enumerate() {
                let mut cells = counts_cells(i, row.a, row.b, row.delta(), row.ratio());
                cells.extend(keys(row));
                table.row(cells);
            }
            let mut out = table.render(width);
            out.push_str(&sides(a, b, width));
            out
        }
        TableFormat::Csv => csv_text(
            &["a", "b", "delta", "ratio"]
                .into_iter()
                .chain(key_columns.iter().copied())
                .collect::<Vec<_>>(),
            rows.iter().map(|row| {
                let mut fields = vec![
                    row.a.to_string(),
                    row.b.to_string(),
                    row.delta().to_string(),
                    row.ratio().map(|r| format!("{r:.4}")).unwrap_or_default(),
                ];
                fields.extend(keys(row));
                fields
            }),
        )?,
        TableFormat::Json => {
            let rows: Vec<serde_json::Value> = rows
                .iter()
                .map(|row| {
                    serde_json::json!({
                        "pid": row.pid,
                        "tid": row.tid,
                        "comm": row.comm,
                        "a": row.a,
                        "b": row.b,
                        "delta": row.delta(),
                        "ratio": row.ratio(),
                    })
                })
                .collect();
            pretty(&serde_json::json!({
                // `comm`, `pid`, `tid`: the flag's own words.
                "by": match by {
                    ThreadBy::Comm => "comm",
                    ThreadBy::Pid => "pid",
                    ThreadBy::Tid => "tid",
                },
                "a": side_json(a),
                "b": side_json(b),
                "rows": rows,
            }))
        }
    })
}

fn ratio_text(ratio: Option<f64>) -> String {
    match ratio {
        Some(r) => format!("{r:.2}x"),
        None => "new".to_owned(),
    }
}

/// The counting columns every diff table starts with, as perf diff's: A, B, the change
/// and B/A.
fn counts_columns() -> Table {
    Table::new()
        .column("#", Align::Right)
        .column("A", Align::Right)
        .column("B", Align::Right)
        .column("delta", Align::Right)
        .column("ratio", Align::Right)
}

fn counts_cells(i: usize, a: u64, b: u64, delta: i64, ratio: Option<f64>) -> Vec<String> {
    vec![
        (i + 1).to_string(),
        a.to_string(),
        b.to_string(),
        format!("{delta:+}"),
        ratio_text(ratio),
    ]
}

/// The two recordings under the table, each on its line(s).
fn sides(a: &Loaded, b: &Loaded, width: Option<usize>) -> String {
    let line = |name: &str, side: &Loaded| {
        wrap(
            &format!(
                "{name}: {} faults of `{}` in {}",
                side.total_faults(),
                side.command(),
                side.dir().display()
            ),
            width,
        )
    };
    format!("\n{}\n{}\n", line("A", a), line("B", b))
}

fn table(rows: &[DiffRow], by: GroupBy, a: &Loaded, b: &Loaded, width: Option<usize>) -> String {
    let mut table = counts_columns();
    table = match by {
        GroupBy::Dso => table.name("lib", 16),
        GroupBy::Function => table.name("function", 16).name("file", 12).name("lib", 10),
        _ => table
            .name("function", 16)
            .name("file:line", 12)
            .name("lib", 10),
    };
    for (i, row) in rows.iter().enumerate() {
        // A whole stack from its innermost frame on, as in `report --by stack`.
        let l = match row.stack.as_deref() {
            Some([innermost, ..]) => innermost,
            _ => &row.location,
        };
        let mut cells = counts_cells(i, row.a, row.b, row.delta(), row.ratio());
        match by {
            GroupBy::Dso => {}
            GroupBy::Function => {
                cells.push(l.function.to_string());
                cells.push(if l.file.is_empty() {
                    "??".to_owned()
                } else {
                    l.short_file().to_owned()
                });
            }
            _ => {
                cells.push(l.function.to_string());
                cells.push(short_file_line(l));
            }
        }
        cells.push(l.lib.to_string());
        table.row(cells);
        for caller in row.stack.iter().flat_map(|s| s.iter().skip(1)) {
            table.under(format!("{:>6}<- {}", "", caller_text(caller)));
        }
    }
    let mut out = table.render(width);
    out.push_str(&sides(a, b, width));
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

#[cfg(test)]
mod tests {
    use fltrace_analyze::{AllocStacks, FaultsHeld, Location};

    use super::super::synthetic::{load, record};
    use super::*;

    fn loc(function: &str, line: u32) -> Location {
        Location {
            function: function.into(),
            file: "/src/a.c".into(),
            line,
            lib: "a.out".into(),
            system: false,
        }
    }

    /// A row that grew, one that is new in B, one that went away, by stack: CSV exact, the
    /// table's ratios and callers, JSON's null ratio for the new row.
    #[test]
    fn rows_in_every_format() {
        let dir = tempfile::tempdir().unwrap();
        record(dir.path(), false);
        let loaded = load(dir.path(), AllocStacks::Skip, FaultsHeld::Counted).unwrap();
        let stack = |frames: &[Location]| Some(frames.iter().cloned().collect());
        let rows = [
            DiffRow {
                location: loc("fill", 5),
                stack: stack(&[loc("fill", 5), loc("main", 9)]),
                a: 10,
                b: 25,
            },
            DiffRow {
                location: loc("scan", 7),
                stack: stack(&[loc("scan", 7)]),
                a: 0,
                b: 4,
            },
            DiffRow {
                location: loc("gone", 3),
                stack: stack(&[loc("gone", 3)]),
                a: 2,
                b: 0,
            },
        ];
        let by = GroupBy::Stack;
        let csv = diff(&rows, by, &loaded, &loaded, TableFormat::Csv, None).unwrap();
        assert_eq!(
            csv,
            "a,b,delta,ratio,function,file,line,lib,stack\n\
             10,25,15,2.5000,fill,/src/a.c,5,a.out,fill@/src/a.c:5|main@/src/a.c:9\n\
             0,4,4,,scan,/src/a.c,7,a.out,scan@/src/a.c:7\n\
             2,0,-2,0.0000,gone,/src/a.c,3,a.out,gone@/src/a.c:3\n"
        );
        let table = diff(&rows, by, &loaded, &loaded, TableFormat::Table, Some(120)).unwrap();
        let lines: Vec<&str> = table.lines().collect();
        assert!(lines[1].starts_with("1 10 25   +15 2.50x fill"), "{table}");
        assert!(
            lines[2].trim_start().starts_with("<- main (a.c:9)"),
            "{table}"
        );
        assert!(lines[3].contains("new"), "{table}");
        assert!(lines[4].contains("-2 0.00x"), "{table}");
        assert!(
            table.contains("\nA: 6 faults of `synthetic` in "),
            "{table}"
        );
        let json: serde_json::Value = serde_json::from_str(
            &diff(&rows, by, &loaded, &loaded, TableFormat::Json, None).unwrap(),
        )
        .unwrap();
        assert_eq!(json["by"], "stack");
        assert_eq!(json["rows"][1]["ratio"], serde_json::Value::Null);
        assert_eq!(json["rows"][0]["stack"][1]["function"], "main");
        assert_eq!(json["a"]["faults"], 6);
    }
}
