//! `fltrace diff A B`: faults per call site in two recordings, largest change first.

use std::fmt::Write as _;

use fltrace_analyze::{DiffRow, GroupBy, Loaded};

use super::{
    TableFormat, csv_text, location_columns, location_fields, location_json, pretty,
    short_file_line, truncate,
};
use crate::Error;

/// The rows of `a` against `b`, grouped `by`, as `format` writes them.
pub fn diff(
    rows: &[DiffRow],
    by: GroupBy,
    a: &Loaded,
    b: &Loaded,
    format: TableFormat,
) -> Result<String, Error> {
    Ok(match format {
        TableFormat::Table => table(rows, a, b),
        TableFormat::Csv => csv(rows, by)?,
        TableFormat::Json => json(rows, by, a, b),
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
        // A whole stack from its innermost frame on, as in `report --by stack`.
        let l = match row.stack.as_deref() {
            Some([innermost, ..]) => innermost,
            _ => &row.location,
        };
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
        let csv = diff(&rows, by, &loaded, &loaded, TableFormat::Csv).unwrap();
        assert_eq!(
            csv,
            "a,b,delta,ratio,function,file,line,lib,stack\n\
             10,25,15,2.5000,fill,/src/a.c,5,a.out,fill@/src/a.c:5|main@/src/a.c:9\n\
             0,4,4,,scan,/src/a.c,7,a.out,scan@/src/a.c:7\n\
             2,0,-2,0.0000,gone,/src/a.c,3,a.out,gone@/src/a.c:3\n"
        );
        let table = diff(&rows, by, &loaded, &loaded, TableFormat::Table).unwrap();
        let lines: Vec<&str> = table.lines().collect();
        assert!(
            lines[1].starts_with("   1        10        25       +15    2.50x  fill"),
            "{table}"
        );
        assert!(
            lines[2].trim_start().starts_with("<- main (a.c:9)"),
            "{table}"
        );
        assert!(lines[3].contains("new"), "{table}");
        assert!(lines[4].contains("-2    0.00x"), "{table}");
        assert!(
            table.contains("\nA: 6 faults of `synthetic` in "),
            "{table}"
        );
        let json: serde_json::Value =
            serde_json::from_str(&diff(&rows, by, &loaded, &loaded, TableFormat::Json).unwrap())
                .unwrap();
        assert_eq!(json["by"], "stack");
        assert_eq!(json["rows"][1]["ratio"], serde_json::Value::Null);
        assert_eq!(json["rows"][0]["stack"][1]["function"], "main");
        assert_eq!(json["a"]["faults"], 6);
    }
}
