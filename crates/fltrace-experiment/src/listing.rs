//! The catalog's runs and statistics as `fltrace runs --list/--stat` print them: a table, CSV
//! (every column) or JSON (the rows as serialized).

use std::io::{self, Write};

use fltrace_render::TableFormat;
use fltrace_render::table::{Align, Table, wrap};

use crate::catalog::{CatalogRun, StatRow};
use crate::stats::SampleStats;

/// An optional value, empty when absent.
fn opt<T: std::fmt::Display>(v: Option<T>) -> String {
    v.map(|v| v.to_string()).unwrap_or_default()
}

/// The runs as a pretty-printed JSON array.
pub fn write_runs_json(out: &mut impl Write, runs: &[CatalogRun]) -> io::Result<()> {
    serde_json::to_writer_pretty(&mut *out, runs)?;
    writeln!(out)
}

/// The runs as CSV with a header.
pub fn write_runs_csv(out: &mut impl Write, runs: &[CatalogRun]) -> io::Result<()> {
    let mut csv = csv::Writer::from_writer(out);
    csv.write_record([
        "id",
        "workload",
        "config",
        "rep",
        "status",
        "wall_s",
        "user_s",
        "sys_s",
        "max_rss_kb",
        "faults",
        "allocs",
        "samples",
        "dir",
    ])?;
    for r in runs {
        csv.write_record([
            r.id.to_string(),
            r.workload.clone(),
            r.config.clone(),
            r.rep.to_string(),
            r.status.clone(),
            r.wall_s.to_string(),
            r.user_s.to_string(),
            r.sys_s.to_string(),
            r.max_rss_kb.to_string(),
            opt(r.faults),
            opt(r.allocs),
            opt(r.samples),
            r.dir.to_string_lossy().into_owned(),
        ])?;
    }
    csv.flush()
}

/// The runs as a table fitting `width` columns (`None`: every name whole).
pub fn write_runs_table(
    out: &mut impl Write,
    runs: &[CatalogRun],
    width: Option<usize>,
) -> io::Result<()> {
    let mut table = Table::new()
        .column("id", Align::Right)
        .name("workload", 12)
        .gap(2)
        .name("config", 8)
        .column("rep", Align::Right)
        .column("status", Align::Left)
        .gap(2)
        .column("time s", Align::Right)
        .column("faults", Align::Right)
        .column("allocs", Align::Right);
    for r in runs {
        table.row(vec![
            r.id.to_string(),
            r.workload.clone(),
            r.config.clone(),
            r.rep.to_string(),
            r.status.clone(),
            format!("{:.3}", r.wall_s),
            opt(r.faults),
            opt(r.allocs),
        ]);
    }
    out.write_all(table.render(width).as_bytes())
}

/// The statistics as a pretty-printed JSON array.
pub fn write_stats_json(out: &mut impl Write, rows: &[StatRow]) -> io::Result<()> {
    serde_json::to_writer_pretty(&mut *out, rows)?;
    writeln!(out)
}

/// The statistics as CSV with a header, full precision.
pub fn write_stats_csv(out: &mut impl Write, rows: &[StatRow]) -> io::Result<()> {
    let f = |v: Option<f64>| opt(v);
    let mut csv = csv::Writer::from_writer(out);
    csv.write_record([
        "workload",
        "config",
        "runs",
        "failed",
        "mean_s",
        "sd_s",
        "min_s",
        "max_s",
        "overhead",
        "overhead_low",
        "overhead_high",
        "faults",
        "allocs",
    ])?;
    for r in rows {
        csv.write_record([
            r.workload.clone(),
            r.config.clone(),
            r.runs.to_string(),
            r.failed.to_string(),
            f(r.time.map(|t| t.mean)),
            f(r.time.map(|t| t.sd)),
            f(r.time.map(|t| t.min)),
            f(r.time.map(|t| t.max)),
            f(r.overhead.map(|o| o.ratio)),
            f(r.overhead.and_then(|o| o.low)),
            f(r.overhead.and_then(|o| o.high)),
            f(r.faults),
            f(r.allocs),
        ])?;
    }
    csv.flush()
}

/// What the overhead column is, under the statistics.
pub const OVERHEAD_NOTE: &str = "overhead: mean time against the dry configuration's, 95% Welch t interval by the delta method on the log scale";

/// The statistics as a table fitting `width` columns, times to the millisecond, with a line
/// saying what the overhead is. The spread (sd, min, max) goes first when names would not
/// fit.
pub fn write_stats_table(
    out: &mut impl Write,
    rows: &[StatRow],
    width: Option<usize>,
) -> io::Result<()> {
    let mut table = Table::new()
        .name("workload", 12)
        .name("config", 8)
        .column("runs", Align::Right)
        .column("failed", Align::Right)
        .column("mean s", Align::Right)
        .gap(2)
        .column("sd s", Align::Right)
        .droppable(3)
        .column("min s", Align::Right)
        .droppable(1)
        .column("max s", Align::Right)
        .droppable(2)
        .column("overhead (95% CI)", Align::Left)
        .gap(2)
        .column("faults", Align::Right)
        .column("allocs", Align::Right)
        .droppable(4);
    for r in rows {
        let t = |g: fn(&SampleStats) -> f64| {
            r.time
                .as_ref()
                .map(|s| format!("{:.3}", g(s)))
                .unwrap_or_default()
        };
        let overhead = match r.overhead {
            Some(o) => match (o.low, o.high) {
                (Some(l), Some(h)) => format!("{:.3} ({l:.3}..{h:.3})", o.ratio),
                _ => format!("{:.3}", o.ratio),
            },
            None => String::new(),
        };
        table.row(vec![
            r.workload.clone(),
            r.config.clone(),
            r.runs.to_string(),
            r.failed.to_string(),
            t(|s| s.mean),
            t(|s| s.sd),
            t(|s| s.min),
            t(|s| s.max),
            overhead,
            r.faults.map(|v| format!("{v:.0}")).unwrap_or_default(),
            r.allocs.map(|v| format!("{v:.0}")).unwrap_or_default(),
        ]);
    }
    out.write_all(table.render(width).as_bytes())?;
    writeln!(out, "{}", wrap(OVERHEAD_NOTE, width))
}

/// `runs --list`: the catalog's runs in `format`.
pub fn write_runs(
    out: &mut impl Write,
    runs: &[CatalogRun],
    format: TableFormat,
    width: Option<usize>,
) -> io::Result<()> {
    match format {
        TableFormat::Json => write_runs_json(out, runs),
        TableFormat::Csv => write_runs_csv(out, runs),
        TableFormat::Table => write_runs_table(out, runs, width),
    }
}

/// `runs --stat`: the statistics per workload and configuration in `format`.
pub fn write_stats(
    out: &mut impl Write,
    rows: &[StatRow],
    format: TableFormat,
    width: Option<usize>,
) -> io::Result<()> {
    match format {
        TableFormat::Json => write_stats_json(out, rows),
        TableFormat::Csv => write_stats_csv(out, rows),
        TableFormat::Table => write_stats_table(out, rows, width),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stats::Ratio;

    fn stat_row() -> StatRow {
        StatRow {
            workload: "scan".into(),
            config: "record".into(),
            runs: 3,
            failed: 1,
            time: Some(SampleStats {
                n: 3,
                mean: 1.5,
                sd: 0.25,
                min: 1.25,
                max: 1.75,
            }),
            overhead: Some(Ratio {
                ratio: 2.0,
                low: Some(1.5),
                high: None,
            }),
            faults: Some(1000.4),
            allocs: None,
        }
    }

    fn written(write: impl FnOnce(&mut Vec<u8>) -> io::Result<()>) -> String {
        let mut out = Vec::new();
        write(&mut out).expect("writing to memory");
        String::from_utf8(out).expect("UTF-8")
    }

    /// `--format` picks the writer: each format prints its own writer's bytes, and no two
    /// are alike.
    #[test]
    fn format_picks_the_writer() {
        let rows = [stat_row()];
        let own = [
            (
                TableFormat::Table,
                written(|o| write_stats_table(o, &rows, None)),
            ),
            (TableFormat::Csv, written(|o| write_stats_csv(o, &rows))),
            (TableFormat::Json, written(|o| write_stats_json(o, &rows))),
        ];
        for (format, text) in &own {
            assert_eq!(&written(|o| write_stats(o, &rows, *format, None)), text);
            assert_eq!(
                &written(|o| write_runs(o, &[], *format, None)),
                &written(|o| match format {
                    TableFormat::Table => write_runs_table(o, &[], None),
                    TableFormat::Csv => write_runs_csv(o, &[]),
                    TableFormat::Json => write_runs_json(o, &[]),
                })
            );
        }
        assert!(own[0].1 != own[1].1 && own[1].1 != own[2].1 && own[0].1 != own[2].1);
    }

    #[test]
    fn stats_csv_leaves_absent_values_empty() {
        assert_eq!(
            written(|o| write_stats_csv(o, &[stat_row()])),
            "workload,config,runs,failed,mean_s,sd_s,min_s,max_s,overhead,overhead_low,\
             overhead_high,faults,allocs\nscan,record,3,1,1.5,0.25,1.25,1.75,2,1.5,,1000.4,\n"
        );
    }

    /// Every value starts where its heading does, whatever the length of the names.
    #[test]
    fn stats_table_columns_stay_under_their_headings_with_long_names() {
        let long = StatRow {
            workload: "sqlite3-_memory_-.read-.._sq_q.sql".into(),
            config: "a-long-configuration".into(),
            ..stat_row()
        };
        let table = written(|o| write_stats_table(o, &[stat_row(), long], None));
        let lines: Vec<&str> = table.lines().collect();
        let header = lines[0];
        let end_of = |heading: &str| header.find(heading).expect("heading") + heading.len();
        for row in &lines[1..3] {
            // Right-aligned columns end where their heading ends.
            for (heading, value) in [("runs", "3"), ("failed", "1"), ("mean s", "1.500")] {
                let end = end_of(heading);
                assert_eq!(&row[end - value.len()..end], value, "{heading}:\n{table}");
            }
            assert_eq!(
                &row[header.find("config").expect("config")..][..1],
                if row.starts_with("scan") { "r" } else { "a" },
                "{table}"
            );
        }
    }

    #[test]
    fn stats_table_shows_an_interval_only_when_both_bounds_exist() {
        let table = written(|o| write_stats_table(o, &[stat_row()], None));
        let row = table.lines().nth(1).expect("a row");
        assert!(row.contains("  2.000  "), "{row}");
        assert!(!row.contains(".."), "{row}");
        assert!(row.contains("      1000"), "{row}");
        let both = StatRow {
            overhead: Some(Ratio {
                ratio: 2.0,
                low: Some(1.5),
                high: Some(2.5),
            }),
            ..stat_row()
        };
        let table = written(|o| write_stats_table(o, &[both], None));
        assert!(table.contains("2.000 (1.500..2.500)"), "{table}");
    }

    /// At 80 columns the table and its note fit: the spread goes, the mean, the overhead and
    /// the counts stay.
    #[test]
    fn stats_table_fits_80_columns() {
        let both = StatRow {
            workload: "sqlite3-_memory_-.read-.._sq_q.sql".into(),
            overhead: Some(Ratio {
                ratio: 147.855,
                low: Some(0.086),
                high: Some(254528.263),
            }),
            ..stat_row()
        };
        let table = written(|o| write_stats_table(o, &[both], Some(80)));
        assert!(table.lines().all(|l| l.chars().count() <= 80), "{table}");
        assert!(table.contains("147.855 (0.086..254528.263)"), "{table}");
        assert!(
            table.contains("mean s") && !table.contains("min s"),
            "{table}"
        );
    }
}
