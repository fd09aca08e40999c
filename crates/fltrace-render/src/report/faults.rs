//! `fltrace report` without allocations: faults grouped by their own stacks.

use std::fmt::Write as _;

use fltrace_analyze::{COVER_SHARE, FaultReport, Group, GroupBy, Loaded, percent};

use fltrace_analyze::Location;

use super::{
    TableFormat, caller_text, csv_text, location_columns, location_fields, pretty, short_file_line,
};
use crate::Error;
use crate::table::{Align, Table, wrap};

/// `report` of the faults of `loaded` as `format` writes it, tables at most
/// [`DEFAULT_WIDTH`] columns wide.
pub fn faults(loaded: &Loaded, report: &FaultReport, format: TableFormat) -> Result<String, Error> {
    faults_fit(loaded, report, format, Some(DEFAULT_WIDTH))
}

pub use crate::table::{DEFAULT_WIDTH, terminal_width};

/// As [`faults`], the table fitting `width` columns (`None`: every name whole, `--wide`).
pub fn faults_fit(
    loaded: &Loaded,
    report: &FaultReport,
    format: TableFormat,
    width: Option<usize>,
) -> Result<String, Error> {
    Ok(match format {
        TableFormat::Table => table(loaded, report, width),
        TableFormat::Csv => csv(&report.groups, report.by, report.total)?,
        TableFormat::Json => json(loaded, report),
    })
}

/// The table's columns: `cum%` goes first when names would not fit, a far-memory
/// recording's fetches get a column of their own (the `type` of a row mixing first touches
/// and fetches says `mixed`).
fn columns(by: GroupBy, fetches: bool) -> Table {
    let mut table = Table::new()
        .column("#", Align::Right)
        .column("faults", Align::Right)
        .column("%", Align::Right)
        .column("cum%", Align::Right)
        .droppable(1);
    if fetches {
        table = table.column("fetches", Align::Right);
    }
    table = table
        .column("kind", Align::Left)
        .gap(2)
        .column("type", Align::Left);
    match by {
        // By library, the function and file say nothing: one library, many of each.
        GroupBy::Dso => table.name("lib", 16),
        GroupBy::Function => table.name("function", 16).name("file", 12).name("lib", 10),
        _ => table
            .name("function", 16)
            .name("file:line", 12)
            .name("lib", 10),
    }
}

fn table(loaded: &Loaded, report: &FaultReport, width: Option<usize>) -> String {
    let total = report.total;
    // A whole stack is printed from its innermost frame on, as it is stored: the row is that
    // frame (a fault in memcpy reads `memcpy`, then its caller), not the call site, which
    // would show twice and hide the frame the fault was in.
    let location_of = |group: &'_ Group| -> Location {
        match (group.key.stack.as_deref(), report.by) {
            (Some([innermost, ..]), GroupBy::Stack) => innermost.clone(),
            _ => group.key.location.clone(),
        }
    };
    let file_of = |l: &Location| match report.by {
        GroupBy::Function if l.file.is_empty() => "??".to_owned(),
        GroupBy::Function => l.short_file().to_owned(),
        _ => short_file_line(l),
    };
    let fetches = report.groups.iter().any(|g| g.fetch > 0);
    let mut table = columns(report.by, fetches);
    let mut cumulative = 0;
    for (i, group) in report.groups.iter().enumerate() {
        cumulative += group.count;
        let location = location_of(group);
        let mut row = vec![
            (i + 1).to_string(),
            group.count.to_string(),
            format!("{:.2}%", percent(group.count, total)),
            format!("{:.2}%", percent(cumulative, total)),
        ];
        if fetches {
            row.push(group.fetch.to_string());
        }
        row.push(group.kind_name().to_owned());
        row.push(group.type_name().to_owned());
        if report.by != GroupBy::Dso {
            row.push(location.function.to_string());
            row.push(file_of(&location));
        }
        row.push(location.lib.to_string());
        table.row(row);
        // One caller per line: a 700-character stack on one line reads as noise.
        if let Some(stack) = group.key.stack.as_deref() {
            for caller in stack.iter().skip(1) {
                table.under(format!("{:>6}<- {}", "", caller_text(caller)));
            }
        }
    }
    let mut out = table.render(width);
    let processes = loaded.traces.len();
    let footer = format!(
        "{} in {processes} process{} of `{}`, {} lost; {} of {} code locations cover {:.0}% of faults",
        fltrace_analyze::plural(total, "fault"),
        if processes == 1 { "" } else { "es" },
        loaded.command(),
        loaded.lost,
        report.covering,
        report.locations,
        COVER_SHARE * 100.0,
    );
    let mut lines = vec![footer, loaded.processes_line()];
    lines.extend(loaded.truncated_note());
    lines.extend(loaded.tracer_note());
    out.push('\n');
    for line in lines {
        let _ = writeln!(out, "{}", wrap(&line, width));
    }
    out
}

fn csv(groups: &[Group], by: GroupBy, total: u64) -> Result<String, Error> {
    let header: Vec<&str> = ["count", "percent", "kind", "type", "truncated"]
        .into_iter()
        .chain(location_columns(by).iter().copied())
        .collect();
    csv_text(
        &header,
        groups.iter().map(|group| {
            let mut row = vec![
                group.count.to_string(),
                format!("{:.4}", percent(group.count, total)),
                group.kind_name().to_owned(),
                group.type_name().to_owned(),
                group.truncated.to_string(),
            ];
            row.extend(location_fields(
                &group.key.location,
                group.key.stack.as_deref(),
                by,
            ));
            row
        }),
    )
}

fn json(loaded: &Loaded, report: &FaultReport) -> String {
    let total = report.total;
    let rows: Vec<serde_json::Value> = report
        .groups
        .iter()
        .map(|g| {
            let l = &g.key.location;
            let mut row = serde_json::json!({
                "count": g.count,
                "percent": percent(g.count, total),
                "kind": g.kind_name(),
                "type": g.type_name(),
                "reads": g.kinds[0],
                "writes": g.kinds[1],
                "wrprotects": g.kinds[2],
                "first_touches": g.zero,
                "fetches": g.fetch,
                "invalid": g.invalid,
                "truncated": g.truncated,
                "function": &*l.function,
                "file": &*l.file,
                "line": l.line,
                "lib": &*l.lib,
            });
            if let (Some(stack), GroupBy::Stack) = (&g.key.stack, report.by) {
                row["stack"] = stack
                    .iter()
                    .map(|l| serde_json::json!({"function": &*l.function, "file": &*l.file, "line": l.line, "lib": &*l.lib}))
                    .collect();
            }
            row
        })
        .collect();
    let doc = serde_json::json!({
        "command": loaded.command(),
        "pids": loaded.traces.iter().map(|(t, _)| t.pid).collect::<Vec<_>>(),
        "processes": loaded
            .processes()
            .into_iter()
            .map(|(pid, names)| serde_json::json!({"pid": pid, "comm": names}))
            .collect::<Vec<_>>(),
        "faults": total,
        "lost": loaded.lost,
        "truncated_stack_faults": loaded.truncated_faults(),
        "tracer_faults": loaded.tracer_faults,
        "tracer_included": loaded.tracer_included,
        "locations": report.locations,
        "locations_covering_95_percent": report.covering,
        "groups": rows,
    });
    pretty(&doc)
}

#[cfg(test)]
mod tests {
    use fltrace_analyze::{AllocStacks, FaultsHeld};

    use super::super::synthetic::{load, record, rows};
    use super::*;

    /// The six write faults of the synthetic recording, all at `toucher`'s line: one row of
    /// every fault, and one line of one covering 95%.
    #[test]
    fn one_line_in_every_format() {
        let dir = tempfile::tempdir().unwrap();
        record(dir.path(), false);
        let loaded = load(dir.path(), AllocStacks::Skip, FaultsHeld::Counted).unwrap();
        let report = FaultReport::of(loaded.counted(), GroupBy::Line, 0);

        let csv = faults(&loaded, &report, TableFormat::Csv).unwrap();
        assert!(
            csv.starts_with("count,percent,kind,type,truncated,function,file,line,lib\n"),
            "{csv}"
        );
        let rows = rows(&csv);
        assert_eq!(rows.len(), 1, "{csv}");
        let row = &rows[0];
        assert_eq!(
            (&*row["count"], &*row["percent"], &*row["kind"]),
            ("6", "100.0000", "write")
        );
        assert!(row["function"].ends_with("toucher"), "{csv}");
        assert!(row["file"].ends_with("synthetic.rs"), "{csv}");

        let table = faults(&loaded, &report, TableFormat::Table).unwrap();
        let lines: Vec<&str> = table.lines().collect();
        assert_eq!(lines.len(), 5, "{table}");
        assert!(
            lines[0].starts_with("# faults       %    cum%  kind"),
            "{table}"
        );
        assert!(
            lines[1].starts_with("1      6 100.00% 100.00%  write"),
            "{table}"
        );
        assert_eq!(
            lines[3],
            "6 faults in 1 process of `synthetic`, 0 lost; 1 of 1 code locations cover 95% of faults"
        );
        // Recorded without thread names: the process is named after the command.
        assert_eq!(lines[4], "processes: 4242 synthetic");

        let json: serde_json::Value =
            serde_json::from_str(&faults(&loaded, &report, TableFormat::Json).unwrap()).unwrap();
        assert_eq!(json["faults"], 6);
        assert_eq!(json["pids"], serde_json::json!([4242]));
        assert_eq!(
            json["processes"],
            serde_json::json!([{"pid": 4242, "comm": ["synthetic"]}])
        );
        assert_eq!(json["truncated_stack_faults"], 0);
        assert_eq!(json["locations_covering_95_percent"], 1);
        assert_eq!(json["groups"][0]["writes"], 6);
        assert_eq!(json["groups"][0]["reads"], 0);
    }
}
