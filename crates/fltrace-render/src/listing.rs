//! `fltrace list`: the recordings of a directory, as a table or JSON.

use fltrace_analyze::{RecordingSummary, utc_time};

use crate::table::{Align, Table, bytes};

/// `812 (postgres), 815 (postgres)`: a recording's processes with their names.
fn processes(summary: &RecordingSummary) -> String {
    summary
        .processes
        .iter()
        .map(|(pid, names)| match names.is_empty() {
            true => pid.to_string(),
            false => format!("{pid} ({})", names.join(" then ")),
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// `list --format`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ListFormat {
    /// A line per recording under a header ([`table`]).
    Table,
    /// One JSON document ([`json`]).
    Json,
}

/// `--format table|json`, the possible values named without help, as they always were.
#[cfg(feature = "clap")]
impl clap::ValueEnum for ListFormat {
    fn value_variants<'a>() -> &'a [ListFormat] {
        &[ListFormat::Table, ListFormat::Json]
    }

    fn to_possible_value(&self) -> Option<clap::builder::PossibleValue> {
        Some(clap::builder::PossibleValue::new(match self {
            ListFormat::Table => "table",
            ListFormat::Json => "json",
        }))
    }
}

/// The recordings in `format`, a table fitting `width` columns (`None`: every name whole).
pub fn text(
    recordings: &[RecordingSummary],
    format: ListFormat,
    width: Option<usize>,
) -> serde_json::Result<String> {
    match format {
        ListFormat::Table => Ok(table(recordings, width)),
        ListFormat::Json => json(recordings),
    }
}

/// `fltrace list`: a line per recording under a header, then how many there are. The size
/// is the recording's own files' (not the reports and pictures written beside it).
pub fn table(recordings: &[RecordingSummary], width: Option<usize>) -> String {
    let mut table = Table::new()
        .column("started (UTC)", Align::Left)
        .column("faults", Align::Right)
        .gap(2)
        .column("lost", Align::Right)
        .gap(2)
        .column("truncated", Align::Right)
        .gap(2)
        .droppable(1)
        .column("allocations", Align::Right)
        .gap(2)
        .droppable(2)
        .column("size", Align::Right)
        .gap(2)
        .name("command", 12)
        .gap(2)
        .name("processes", 12)
        .gap(2);
    for r in recordings {
        let started = utc_time(r.start_ns);
        table.row(vec![
            started.trim_end_matches(" UTC").to_owned(),
            r.faults.to_string(),
            r.lost.to_string(),
            r.truncated.to_string(),
            r.allocations
                .map_or_else(|| "-".to_owned(), |a| a.to_string()),
            bytes(r.bytes),
            r.command.clone(),
            format!(
                "{}{}",
                processes(r),
                if r.finished { "" } else { " (unfinished)" }
            ),
        ]);
    }
    let mut out = table.render(width);
    out.push_str(&format!(
        "{} recording{}\n",
        recordings.len(),
        if recordings.len() == 1 { "" } else { "s" }
    ));
    out
}

/// `fltrace list --format json`: an array of one object per recording.
pub fn json(recordings: &[RecordingSummary]) -> Result<String, serde_json::Error> {
    let rows: Vec<serde_json::Value> = recordings
        .iter()
        .map(|r| {
            serde_json::json!({
                "start_ns": r.start_ns,
                "started": utc_time(r.start_ns),
                "command": r.command,
                "processes": r.processes.iter().map(|(pid, names)| serde_json::json!({
                    "pid": pid,
                    "comm": names,
                })).collect::<Vec<_>>(),
                "faults": r.faults,
                "lost": r.lost,
                "truncated_stack_faults": r.truncated,
                "allocations": r.allocations,
                "bytes": r.bytes,
                "finished": r.finished,
            })
        })
        .collect();
    let mut text = serde_json::to_string_pretty(&serde_json::Value::Array(rows))?;
    text.push('\n');
    Ok(text)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn summary(finished: bool) -> RecordingSummary {
        RecordingSummary {
            start_ns: 0,
            command: "make -j2".into(),
            processes: vec![(812, vec!["sh".into(), "cc1".into()]), (815, Vec::new())],
            faults: 1200,
            lost: 3,
            truncated: 4,
            allocations: None,
            bytes: 65536,
            finished,
        }
    }

    /// A line per recording under the header, processes named, an unfinished one said.
    #[test]
    fn table_lines() {
        let text = table(&[summary(false)], None);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 3);
        assert!(lines[0].starts_with("started (UTC)  "), "{text}");
        assert!(
            lines[1].ends_with("  make -j2  812 (sh then cc1), 815 (unfinished)"),
            "{text}"
        );
        assert!(lines[1].contains(" 1200 "), "{text}");
        assert!(lines[1].contains(" 64.0 KiB "), "{text}");
        assert_eq!(lines[2], "1 recording");
        assert_eq!(table(&[], None).lines().last(), Some("0 recordings"));
        let narrow = table(&[summary(true)], Some(80));
        assert!(narrow.lines().all(|l| l.chars().count() <= 80), "{narrow}");
    }

    /// JSON names every field, `allocations` null without --allocs.
    #[test]
    fn json_fields() {
        let value: serde_json::Value =
            serde_json::from_str(&json(&[summary(true)]).unwrap()).unwrap();
        let row = &value[0];
        assert_eq!(row["processes"][0]["comm"][1], "cc1");
        assert_eq!(row["allocations"], serde_json::Value::Null);
        assert_eq!(row["truncated_stack_faults"], 4);
        assert_eq!(row["finished"], true);
    }
}
