//! `fltrace wss`'s output: each interval's row on stdout as it comes, and its files (the
//! per-mapping range trace `fltrace heatmap --from wss` reads, and the working-set plot).

use std::io::Write;
use std::path::{Path, PathBuf};

use fltrace_trace::{RangeTraceWriter, WssRow, WssRows, files};

use crate::Error;
use crate::TableFormat;

/// The rows as they come, each flushed: a table line, CSV (`time_s,wss_bytes,rss_bytes`)
/// or a JSON line with the same names, as every tool that prints as it goes prints JSON.
pub enum WssPrinter<W: Write> {
    /// One aligned line per interval.
    Table(W),
    /// The CSV rows, under their header.
    Csv(Box<WssRows<W>>),
    /// One object per interval and line.
    Json(W),
}

impl<W: Write> WssPrinter<W> {
    /// Prints to `out` in `format` (the CSV header at once).
    pub fn new(out: W, format: TableFormat) -> std::io::Result<WssPrinter<W>> {
        Ok(match format {
            TableFormat::Table => WssPrinter::Table(out),
            TableFormat::Csv => WssPrinter::Csv(Box::new(WssRows::new(out)?)),
            TableFormat::Json => WssPrinter::Json(out),
        })
    }

    /// Prints and flushes one row.
    pub fn row(&mut self, row: &WssRow) -> std::io::Result<()> {
        match self {
            WssPrinter::Table(out) => writeln!(
                out,
                "{:8.2} s  wss {:9.1} MiB  rss {:9.1} MiB",
                row.time_s,
                row.wss_bytes as f64 / 1048576.0,
                row.rss_bytes as f64 / 1048576.0
            ),
            WssPrinter::Csv(rows) => rows.row(row),
            WssPrinter::Json(out) => {
                writeln!(
                    out,
                    "{{\"time_s\":{:.3},\"wss_bytes\":{},\"rss_bytes\":{}}}",
                    row.time_s, row.wss_bytes, row.rss_bytes
                )?;
                out.flush()
            }
        }
    }
}

/// `--damon` and `--pages` print CSV for a table, as they always have.
pub fn csv_unless_json(format: TableFormat) -> TableFormat {
    match format {
        TableFormat::Json => TableFormat::Json,
        TableFormat::Table | TableFormat::Csv => TableFormat::Csv,
    }
}

/// Writes process `pid`'s range trace into `dir` as `fltrace-data-<kind>-<pid>.csv` (`kind`
/// is `wss` or `damon`) and, given a working-set curve with rows, its plot
/// `fltrace-data-<kind>-<pid>.svg`: the files written, the trace first.
pub fn write_wss_files(
    dir: &Path,
    kind: &str,
    pid: u32,
    ranges: RangeTraceWriter,
    curve: &[WssRow],
) -> Result<Vec<PathBuf>, Error> {
    let path = files::path(dir, kind, pid, "csv");
    ranges.write(&path)?;
    let mut written = vec![path];
    if !curve.is_empty() {
        let plot = files::path(dir, kind, pid, "svg");
        let title = format!("working set of process {pid}");
        files::write_with(&plot, |out| crate::wss_plot(curve, &title, out))?;
        written.push(plot);
    }
    Ok(written)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn printed(format: TableFormat) -> String {
        let mut out = Vec::new();
        let mut printer = WssPrinter::new(&mut out, format).unwrap();
        for (time_s, wss) in [(0.1, 1 << 20), (0.25, 3 << 19)] {
            let row = WssRow {
                time_s,
                wss_bytes: wss,
                rss_bytes: 4 << 20,
            };
            printer.row(&row).unwrap();
        }
        drop(printer);
        String::from_utf8(out).unwrap()
    }

    /// Each format prints the same rows in its own layout, byte for byte.
    #[test]
    fn rows_in_each_format() {
        assert_eq!(
            printed(TableFormat::Table),
            "    0.10 s  wss       1.0 MiB  rss       4.0 MiB\n    0.25 s  wss       1.5 MiB  rss       4.0 MiB\n"
        );
        assert_eq!(
            printed(TableFormat::Csv),
            "time_s,wss_bytes,rss_bytes\n0.100,1048576,4194304\n0.250,1572864,4194304\n"
        );
        assert_eq!(
            printed(TableFormat::Json),
            "{\"time_s\":0.100,\"wss_bytes\":1048576,\"rss_bytes\":4194304}\n{\"time_s\":0.250,\"wss_bytes\":1572864,\"rss_bytes\":4194304}\n"
        );
        assert_eq!(csv_unless_json(TableFormat::Table), TableFormat::Csv);
        assert_eq!(csv_unless_json(TableFormat::Json), TableFormat::Json);
    }
}
