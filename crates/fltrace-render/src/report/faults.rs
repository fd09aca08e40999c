//! `fltrace report` without allocations: faults grouped by their own stacks.

use std::fmt::Write as _;

use fltrace_analyze::{COVER_SHARE, FaultReport, Group, GroupBy, Loaded, percent};

use fltrace_analyze::Location;

use super::{
    TableFormat, caller_text, csv_text, location_columns, location_fields, pretty, short_file_line,
    truncate,
};
use crate::Error;

/// `report` of the faults of `loaded` as `format` writes it, tables at most
/// [`DEFAULT_WIDTH`] columns wide.
pub fn faults(loaded: &Loaded, report: &FaultReport, format: TableFormat) -> Result<String, Error> {
    faults_fit(loaded, report, format, Some(DEFAULT_WIDTH))
}

/// The width of a table when the terminal's is not known.
pub const DEFAULT_WIDTH: usize = 120;

/// The width tables fit: `COLUMNS` if set, else the terminal's on stdout, else
/// [`DEFAULT_WIDTH`].
pub fn terminal_width() -> usize {
    let mut size = libc::winsize {
        ws_row: 0,
        ws_col: 0,
        ws_xpixel: 0,
        ws_ypixel: 0,
    };
    let stdout_columns = || {
        // SAFETY: TIOCGWINSZ writes one winsize into `size`, which outlives the call.
        let got = unsafe { libc::ioctl(libc::STDOUT_FILENO, libc::TIOCGWINSZ, &mut size) };
        (got == 0 && size.ws_col > 0).then_some(usize::from(size.ws_col))
    };
    width_of(std::env::var("COLUMNS").ok().as_deref(), stdout_columns)
}

/// `columns` (`COLUMNS`) if it is a positive number, else the terminal's, else
/// [`DEFAULT_WIDTH`].
fn width_of(columns: Option<&str>, terminal: impl FnOnce() -> Option<usize>) -> usize {
    columns
        .and_then(|c| c.trim().parse::<usize>().ok())
        .filter(|&c| c > 0)
        .or_else(terminal)
        .unwrap_or(DEFAULT_WIDTH)
}

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

/// The widths of the function, file and library columns within `width` columns in all, the
/// function's given up first (file:line and library keep up to 36 and 24 characters), and
/// never below 16; each column only as wide as its longest entry.
fn column_widths(natural: [usize; 3], prefix: usize, width: Option<usize>) -> [usize; 3] {
    let Some(width) = width else {
        return natural;
    };
    let [function, file, lib] = natural;
    let room = width.saturating_sub(prefix + 2);
    if function + file + lib <= room {
        return natural;
    }
    let file = file.min(36);
    let lib = lib.min(24);
    let function = room
        .saturating_sub(file + lib)
        .clamp(16.min(function), function);
    [function, file, lib]
}

fn table(loaded: &Loaded, report: &FaultReport, width: Option<usize>) -> String {
    let total = report.total;
    let mut out = String::new();
    // A whole stack is printed from its innermost frame on, as it is stored: the row is that
    // frame (a fault in memcpy reads `memcpy`, then its caller), not the call site, which
    // would show twice and hide the frame the fault was in.
    let location_of = |group: &'_ Group| -> Location {
        match (group.key.stack.as_deref(), report.by) {
            (Some([innermost, ..]), GroupBy::Stack) => innermost.clone(),
            _ => group.key.location.clone(),
        }
    };
    // By library, the function and file say nothing: one library, many of each.
    let named = report.by != GroupBy::Dso;
    let file_of = |l: &Location| match report.by {
        GroupBy::Function if l.file.is_empty() => "??".to_owned(),
        GroupBy::Function => l.short_file().to_owned(),
        _ => short_file_line(l),
    };
    let file_header = if report.by == GroupBy::Function {
        "file"
    } else {
        "file:line"
    };
    let locations: Vec<Location> = report.groups.iter().map(location_of).collect();
    let longest = |f: &dyn Fn(&Location) -> usize, header: &str| {
        locations
            .iter()
            .map(f)
            .chain([header.chars().count()])
            .max()
            .unwrap_or(0)
    };
    let natural = [
        longest(&|l| l.function.chars().count(), "function"),
        longest(&|l| file_of(l).chars().count(), file_header),
        longest(&|l| l.lib.chars().count(), "lib"),
    ];
    const PREFIX: usize = 52;
    let [function_w, file_w, lib_w] = if named {
        column_widths(natural, PREFIX, width)
    } else {
        let lib = width.map_or(natural[2], |w| {
            natural[2].min(w.saturating_sub(PREFIX).max(16))
        });
        [0, 0, lib]
    };
    let mut header = format!(
        "{:>4} {:>9} {:>7} {:>7}  {:<10} {:<8} ",
        "#", "faults", "%", "cum%", "kind", "type"
    );
    if named {
        let _ = write!(
            header,
            "{:<function_w$} {:<file_w$} ",
            "function", file_header
        );
    }
    header.push_str("lib");
    let _ = writeln!(out, "{}", header.trim_end());
    let mut cumulative = 0;
    for (i, (group, location)) in report.groups.iter().zip(&locations).enumerate() {
        cumulative += group.count;
        let mut row = format!(
            "{:>4} {:>9} {:>6.2}% {:>6.2}%  {:<10} {:<8} ",
            i + 1,
            group.count,
            percent(group.count, total),
            percent(cumulative, total),
            group.kind_name(),
            group.type_name(),
        );
        if named {
            let _ = write!(
                row,
                "{:<function_w$} {:<file_w$} ",
                truncate(&location.function, function_w),
                truncate(&file_of(location), file_w),
            );
        }
        row.push_str(&truncate(&location.lib, lib_w));
        let _ = writeln!(out, "{}", row.trim_end());
        // One caller per line: a 700-character stack on one line reads as noise.
        if let Some(stack) = group.key.stack.as_deref() {
            for caller in stack.iter().skip(1) {
                let _ = writeln!(out, "{:>6}<- {}", "", caller_text(caller));
            }
        }
    }
    let processes = loaded.traces.len();
    let _ = writeln!(
        out,
        "\n{} in {processes} process{} of `{}`, {} lost; {} of {} code locations cover {:.0}% of faults",
        fltrace_analyze::plural(total, "fault"),
        if processes == 1 { "" } else { "es" },
        loaded.command(),
        loaded.lost,
        report.covering,
        report.locations,
        COVER_SHARE * 100.0,
    );
    let _ = writeln!(out, "{}", loaded.processes_line());
    if let Some(note) = loaded.truncated_note() {
        let _ = writeln!(out, "{note}");
    }
    if let Some(note) = loaded.tracer_note() {
        let _ = writeln!(out, "{note}");
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
    /// `COLUMNS` wins when it is a positive number; else the terminal, else 120.
    #[test]
    fn table_width() {
        assert_eq!(width_of(Some(" 90 "), || Some(80)), 90);
        assert_eq!(width_of(Some("0"), || Some(80)), 80);
        assert_eq!(width_of(Some("wide"), || None), DEFAULT_WIDTH);
        assert_eq!(width_of(None, || None), DEFAULT_WIDTH);
    }

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
            lines[0].starts_with("   #    faults       %    cum%  kind"),
            "{table}"
        );
        assert!(
            lines[1].starts_with("   1         6 100.00% 100.00%  write"),
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
