//! What `count` and `faults` print: tables as bcc's tools print them, CSV, one JSON array,
//! and folded stacks for flamegraph tools.

use std::io::{self, Write};

use serde_json::json;

use fltrace_render::TableFormat;

use crate::bpf::Row;
use crate::output::{frames_json, stack_cell};

/// A counted row as a folded line: `comm;outer;...;inner count`, kernel frames marked `_[k]`.
pub fn folded_line(row: &Row) -> String {
    let mut parts: Vec<String> = Vec::new();
    if let Some(comm) = &row.comm {
        parts.push(comm.clone());
    }
    if let Some(u) = &row.ustack {
        parts.extend(u.iter().rev().map(|f| f.function.clone()));
    }
    if let Some(k) = &row.kstack {
        parts.extend(k.iter().rev().map(|f| format!("{}_[k]", f.function)));
    }
    if parts.is_empty() {
        parts.push("all".into());
    }
    format!("{} {}", parts.join(";"), row.count)
}

/// Writes counted rows in `format`, or as folded lines when `folded`.
/// Writes the rows; a JSON array ends with `footer` (what was lost or sampled), if any.
pub fn write_rows(
    out: &mut impl Write,
    rows: &[Row],
    format: TableFormat,
    folded: bool,
    footer: Option<serde_json::Value>,
) -> io::Result<()> {
    if folded {
        for row in rows {
            writeln!(out, "{}", folded_line(row))?;
        }
        return Ok(());
    }
    match format {
        TableFormat::Json => {
            let mut rows: Vec<serde_json::Value> = rows
                .iter()
                .map(|r| {
                    json!({
                        "count": r.count,
                        "pid": r.pid,
                        "tid": r.tid,
                        "comm": r.comm,
                        "probe": r.probe,
                        "field": r.field,
                        "ustack": frames_json(&r.ustack),
                        "kstack": frames_json(&r.kstack),
                    })
                })
                .collect();
            rows.extend(footer);
            serde_json::to_writer_pretty(&mut *out, &rows)?;
            writeln!(out)?;
        }
        TableFormat::Csv => {
            let mut csv = csv::Writer::from_writer(&mut *out);
            csv.write_record([
                "count", "pid", "tid", "comm", "probe", "field", "ustack", "kstack",
            ])?;
            let text = |v: Option<String>| v.unwrap_or_default();
            for r in rows {
                csv.write_record([
                    r.count.to_string(),
                    text(r.pid.map(|p| p.to_string())),
                    text(r.tid.map(|p| p.to_string())),
                    text(r.comm.clone()),
                    text(r.probe.clone()),
                    text(r.field.map(|p| p.to_string())),
                    text(r.ustack.as_deref().map(stack_cell)),
                    text(r.kstack.as_deref().map(stack_cell)),
                ])?;
            }
            csv.flush()?;
        }
        TableFormat::Table => {
            for r in rows {
                let mut head = format!("{:>10}", r.count);
                for (label, value) in [
                    ("", r.probe.clone()),
                    ("", r.comm.clone()),
                    ("pid ", r.pid.map(|p| p.to_string())),
                    ("tid ", r.tid.map(|p| p.to_string())),
                    ("", r.field.map(|f| f.to_string())),
                ] {
                    if let Some(v) = value {
                        head.push_str(&format!("  {label}{v}"));
                    }
                }
                writeln!(out, "{head}")?;
                for stack in [&r.kstack, &r.ustack].into_iter().flatten() {
                    if stack.is_empty() {
                        writeln!(out, "            [no stack]")?;
                    }
                    for f in stack {
                        writeln!(out, "            {}", f.describe())?;
                    }
                }
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bpf::Frame;

    fn frame(function: &str, file_line: Option<&str>) -> Frame {
        Frame {
            function: function.into(),
            file_line: file_line.map(Into::into),
            lib: "prog".into(),
        }
    }

    fn row() -> Row {
        Row {
            pid: Some(42),
            tid: None,
            comm: Some("prog".into()),
            probe: None,
            field: None,
            field2: None,
            ustack: Some(vec![frame("inner", Some("a.c:3")), frame("outer", None)]),
            kstack: Some(vec![frame("handle_mm_fault", None)]),
            count: 7,
        }
    }

    fn written(write: impl FnOnce(&mut Vec<u8>) -> io::Result<()>) -> String {
        let mut out = Vec::new();
        write(&mut out).expect("writing to memory");
        String::from_utf8(out).expect("UTF-8")
    }

    #[test]
    fn folded_lines_go_outer_to_inner_with_kernel_frames_marked() {
        assert_eq!(
            folded_line(&row()),
            "prog;outer;inner;handle_mm_fault_[k] 7"
        );
        let total = Row {
            comm: None,
            ustack: None,
            kstack: None,
            ..row()
        };
        assert_eq!(folded_line(&total), "all 7");
    }

    #[test]
    fn rows_as_table_csv_and_json() {
        let rows = [row()];
        assert_eq!(
            written(|o| write_rows(o, &rows, TableFormat::Table, false, None)),
            "         7  prog  pid 42\n            handle_mm_fault (prog)\n            \
             inner (a.c:3)\n            outer (prog)\n"
        );
        assert_eq!(
            written(|o| write_rows(o, &rows, TableFormat::Csv, false, None)),
            "count,pid,tid,comm,probe,field,ustack,kstack\n\
             7,42,,prog,,,inner (a.c:3);outer (prog),handle_mm_fault (prog)\n"
        );
        let json: serde_json::Value = serde_json::from_str(&written(|o| {
            write_rows(o, &rows, TableFormat::Json, false, None)
        }))
        .expect("JSON");
        assert_eq!(json[0]["count"], 7);
        assert_eq!(json[0]["tid"], serde_json::Value::Null);
        assert_eq!(json[0]["ustack"][1], "outer (prog)");
    }
}
