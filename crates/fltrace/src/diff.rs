//! `fltrace diff A B`: faults per call site in two recordings, largest change first.

use std::fmt::Write as _;
use std::io::Write;
use std::path::Path;

use anyhow::{Context, bail};

use fltrace_analyze::{DiffRow, GroupBy, Location, diff_groups, group_fault_counts};

use crate::cli::{By, DiffArgs, Format, Selection};
use crate::load::{Loaded, load_counts};
use crate::report::{
    csv_text, location_columns, location_fields, short_file_line, shown, truncate,
};

pub fn run(args: DiffArgs) -> anyhow::Result<()> {
    let out = diff(&args)?;
    let mut stdout = std::io::stdout().lock();
    stdout.write_all(out.as_bytes())?;
    stdout.flush()?;
    Ok(())
}

fn diff(args: &DiffArgs) -> anyhow::Result<String> {
    let by = match args.by {
        By::Line => GroupBy::Line,
        By::Function => GroupBy::Function,
        By::Stack => GroupBy::Stack,
        By::Dso => GroupBy::Dso,
        By::AllocSite => bail!("diff compares faults by line, function, stack or dso"),
    };
    let side = |dir: &Path, pid: Option<u32>| {
        let selection = Selection {
            dir: dir.to_owned(),
            pid,
            time: None,
            call_site: crate::cli::CallSiteArg::Program,
            include_tracer: false,
            archive: None,
        };
        load_counts(&selection).with_context(|| format!("recording in {}", dir.display()))
    };
    let a = side(&args.a, args.pid_a)?;
    let b = side(&args.b, args.pid_b)?;
    let groups = |loaded: &Loaded| group_fault_counts(loaded.counted(), by);
    let mut rows = diff_groups(&groups(&a), &groups(&b));
    rows.truncate(shown(args.top, rows.len()));
    Ok(match args.format {
        Format::Table => table(&rows, &a, &b),
        Format::Csv => csv(&rows, by)?,
        Format::Json => json(&rows, by, args, &a, &b),
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

fn csv(rows: &[DiffRow], by: GroupBy) -> anyhow::Result<String> {
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

fn location_json(l: &Location) -> serde_json::Value {
    serde_json::json!({"function": &*l.function, "file": &*l.file, "line": l.line, "lib": &*l.lib})
}

fn side_json(loaded: &Loaded) -> serde_json::Value {
    serde_json::json!({
        "dir": loaded.dir().display().to_string(),
        "command": loaded.command(),
        "pids": loaded.traces.iter().map(|(t, _)| t.pid).collect::<Vec<_>>(),
        "faults": loaded.total_faults(),
    })
}

fn json(rows: &[DiffRow], by: GroupBy, args: &DiffArgs, a: &Loaded, b: &Loaded) -> String {
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
        "by": format!("{:?}", args.by).to_lowercase(),
        "a": side_json(a),
        "b": side_json(b),
        "rows": rows,
    });
    let mut text = serde_json::to_string_pretty(&doc).unwrap_or_default();
    text.push('\n');
    text
}
