//! `fltrace report --by comm|pid|tid`: faults per thread name, process or thread.

use std::fmt::Write as _;

use fltrace_analyze::{ThreadBy, ThreadGroup, percent};

use super::csv_text;
use crate::Error;
use crate::TableFormat;
use crate::table::{Align, Table};

/// The columns naming a group: those that mean something for the grouping.
fn key_columns(by: ThreadBy) -> &'static [&'static str] {
    match by {
        ThreadBy::Comm => &["comm"],
        ThreadBy::Pid => &["pid", "comm"],
        ThreadBy::Tid => &["pid", "tid", "comm"],
    }
}

fn key_fields(group: &ThreadGroup, by: ThreadBy) -> Vec<String> {
    let id = |n: Option<u32>| n.map_or_else(String::new, |n| n.to_string());
    match by {
        ThreadBy::Comm => vec![group.comm.clone()],
        ThreadBy::Pid => vec![id(group.pid), group.comm.clone()],
        ThreadBy::Tid => vec![id(group.pid), id(group.tid), group.comm.clone()],
    }
}

/// The `top` largest of `groups` (all with 0) as `format` writes them; percentages are of
/// every group's faults.
pub fn threads(
    groups: &[ThreadGroup],
    by: ThreadBy,
    top: usize,
    format: TableFormat,
    width: Option<usize>,
) -> Result<String, Error> {
    let total: u64 = groups.iter().map(|g| g.count).sum();
    let shown = if top == 0 {
        groups
    } else {
        &groups[..top.min(groups.len())]
    };
    let counts = |g: &ThreadGroup| [g.count, g.kinds[0], g.kinds[1], g.kinds[2], g.zero];
    Ok(match format {
        TableFormat::Table => {
            let mut table = Table::new()
                .column("#", Align::Right)
                .column("faults", Align::Right)
                .column("%", Align::Right)
                .column("cum%", Align::Right)
                .droppable(1)
                .column("reads", Align::Right)
                .column("writes", Align::Right)
                .column("wrprotect", Align::Right)
                .column("first", Align::Right);
            for &column in key_columns(by) {
                table = if column == "comm" {
                    table.name(column, 16).gap(2)
                } else {
                    table.column(column, Align::Right).gap(2)
                };
            }
            let mut cumulative = 0;
            for (i, g) in shown.iter().enumerate() {
                cumulative += g.count;
                let [count, reads, writes, wrprotects, zero] = counts(g);
                let mut row = vec![
                    (i + 1).to_string(),
                    count.to_string(),
                    format!("{:.2}%", percent(count, total)),
                    format!("{:.2}%", percent(cumulative, total)),
                    reads.to_string(),
                    writes.to_string(),
                    wrprotects.to_string(),
                    zero.to_string(),
                ];
                row.extend(key_fields(g, by));
                table.row(row);
            }
            let mut out = table.render(width);
            let _ = writeln!(
                out,
                "\n{} in {}",
                fltrace_analyze::plural(total, "fault"),
                fltrace_analyze::plural(groups.len() as u64, "group")
            );
            out
        }
        TableFormat::Csv => {
            let header: Vec<&str> = [
                "count",
                "percent",
                "reads",
                "writes",
                "wrprotects",
                "first_touches",
            ]
            .into_iter()
            .chain(key_columns(by).iter().copied())
            .collect();
            csv_text(
                &header,
                shown.iter().map(|g| {
                    let [count, reads, writes, wrprotects, zero] = counts(g);
                    let mut row = vec![
                        count.to_string(),
                        format!("{:.4}", percent(count, total)),
                        reads.to_string(),
                        writes.to_string(),
                        wrprotects.to_string(),
                        zero.to_string(),
                    ];
                    row.extend(key_fields(g, by));
                    row
                }),
            )?
        }
        TableFormat::Json => {
            let rows: Vec<serde_json::Value> = shown
                .iter()
                .map(|g| {
                    let mut row = serde_json::json!({
                        "count": g.count,
                        "percent": percent(g.count, total),
                        "reads": g.kinds[0],
                        "writes": g.kinds[1],
                        "wrprotects": g.kinds[2],
                        "first_touches": g.zero,
                        "comm": g.comm,
                    });
                    if let Some(pid) = g.pid {
                        row["pid"] = pid.into();
                    }
                    if let Some(tid) = g.tid {
                        row["tid"] = tid.into();
                    }
                    row
                })
                .collect();
            let document = serde_json::json!({ "faults": total, "groups": rows });
            let mut text = serde_json::to_string_pretty(&document).unwrap_or_default();
            text.push('\n');
            text
        }
    })
}
