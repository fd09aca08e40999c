//! `fltrace list [DIR]`: the recordings a directory holds, oldest first.

use std::io::Write as _;

use fltrace_analyze::{RecordingSummary, list_recordings, utc_time};

use crate::cli::{ListArgs, ListFormat};

pub fn run(args: ListArgs) -> anyhow::Result<()> {
    // An archive file lists as the directory it holds.
    let opened = fltrace_analyze::OpenedRecording::open(&args.dir)?;
    let (recordings, unreadable) = list_recordings(&opened.dir)?;
    for broken in &unreadable {
        eprintln!(
            "fltrace: warning: left out {}: {}",
            broken.path.display(),
            fltrace_trace::error_chain(&broken.error)
        );
    }
    let text = match args.format {
        ListFormat::Table => table(&recordings),
        ListFormat::Json => json(&recordings)?,
    };
    let mut stdout = std::io::stdout().lock();
    stdout.write_all(text.as_bytes())?;
    stdout.flush()?;
    Ok(())
}

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

fn table(recordings: &[RecordingSummary]) -> String {
    let command_width = recordings
        .iter()
        .map(|r| r.command.chars().count())
        .max()
        .unwrap_or(0)
        .max("command".len());
    let mut out = format!(
        "{:<23}  {:>10}  {:>6}  {:>9}  {:>11}  {:>11}  {:<command_width$}  processes\n",
        "started", "faults", "lost", "truncated", "allocations", "bytes", "command"
    );
    for r in recordings {
        let allocations = r
            .allocations
            .map_or_else(|| "-".to_owned(), |a| a.to_string());
        out.push_str(&format!(
            "{:<23}  {:>10}  {:>6}  {:>9}  {:>11}  {:>11}  {:<command_width$}  {}{}\n",
            utc_time(r.start_ns),
            r.faults,
            r.lost,
            r.truncated,
            allocations,
            r.bytes,
            r.command,
            processes(r),
            if r.finished { "" } else { " (unfinished)" }
        ));
    }
    out.push_str(&format!(
        "{} recording{}\n",
        recordings.len(),
        if recordings.len() == 1 { "" } else { "s" }
    ));
    out
}

fn json(recordings: &[RecordingSummary]) -> anyhow::Result<String> {
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
