//! The tools' output formats, and the printer of the event tools: a fixed-width table with
//! the chapter's headers, CSV, or JSON lines (one object per event or interval row). The
//! counting tools print whole reports through their own modules' printers (`count::print`,
//! `ffaults`, `memleak::print`, `triage::print`) with the cells and loss notes here.

use std::io::Write;

use fltrace_render::TableFormat;
use serde_json::json;

use crate::Error;
use crate::bpf::Frame;

/// A stack in one CSV cell: its frames, innermost first, separated by `;`.
pub(crate) fn stack_cell(frames: &[Frame]) -> String {
    frames
        .iter()
        .map(Frame::describe)
        .collect::<Vec<_>>()
        .join(";")
}

/// A stack in JSON: its frames innermost first, or null when the row has no such stack.
pub(crate) fn frames_json(frames: &Option<Vec<Frame>>) -> serde_json::Value {
    match frames {
        Some(f) => json!(f.iter().map(Frame::describe).collect::<Vec<_>>()),
        None => serde_json::Value::Null,
    }
}

/// The end of a summary line when the kernel's table overflowed (empty when it did not).
pub fn table_full_note(dropped: u64) -> String {
    if dropped > 0 {
        format!(" ({dropped} not counted: the table was full)")
    } else {
        String::new()
    }
}

/// The end of a summary line when user stacks found their table full (empty when none did).
pub fn stack_table_full_note(lost: u64) -> String {
    if lost > 0 {
        format!(" ({lost} user stacks not kept: the stack table was full; counted as [no stack])")
    } else {
        String::new()
    }
}

/// The end of a summary line when the sample ring overflowed (empty when it did not).
pub fn ring_full_note(lost: u64) -> String {
    if lost > 0 {
        format!(
            " ({lost} samples lost: the ring was full; fewer processes or --by without ustack lose none)"
        )
    } else {
        String::new()
    }
}

/// A column of a tool's output.
#[derive(Debug, Clone, Copy)]
pub struct Column {
    /// Header in tables (`LAT(ms)`).
    pub header: &'static str,
    /// Key in CSV and JSON (`lat_ms`).
    pub key: &'static str,
    /// Width in tables; negative aligns left.
    pub width: i32,
    /// Whether the table shows it (CSV and JSON always do).
    pub in_table: bool,
}

impl Column {
    /// A column shown everywhere.
    pub const fn new(header: &'static str, key: &'static str, width: i32) -> Column {
        Column {
            header,
            key,
            width,
            in_table: true,
        }
    }

    /// A column for CSV and JSON only.
    pub const fn data(key: &'static str) -> Column {
        Column {
            header: "",
            key,
            width: 0,
            in_table: false,
        }
    }
}

/// One value of a row.
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    /// An integer.
    Int(i64),
    /// A number printed with this many decimals.
    Float(f64, usize),
    /// Text.
    Str(String),
}

impl Value {
    fn text(&self) -> String {
        match self {
            Value::Int(v) => v.to_string(),
            Value::Float(v, decimals) => format!("{v:.decimals$}"),
            Value::Str(s) => s.clone(),
        }
    }

    fn json(&self) -> serde_json::Value {
        match self {
            Value::Int(v) => (*v).into(),
            Value::Float(v, _) => serde_json::Number::from_f64(*v)
                .map_or(serde_json::Value::Null, serde_json::Value::Number),
            Value::Str(s) => s.clone().into(),
        }
    }
}

impl From<&str> for Value {
    fn from(s: &str) -> Value {
        Value::Str(s.to_owned())
    }
}

impl From<String> for Value {
    fn from(s: String) -> Value {
        Value::Str(s)
    }
}

impl From<u64> for Value {
    fn from(v: u64) -> Value {
        Value::Int(v as i64)
    }
}

impl From<u32> for Value {
    fn from(v: u32) -> Value {
        Value::Int(i64::from(v))
    }
}

impl From<i64> for Value {
    fn from(v: i64) -> Value {
        Value::Int(v)
    }
}

/// Prints rows of one set of columns.
pub struct Printer<W: Write> {
    format: TableFormat,
    columns: &'static [Column],
    out: W,
    header_done: bool,
}

impl<W: Write> Printer<W> {
    /// A printer of `columns` to `out`.
    pub fn new(format: TableFormat, columns: &'static [Column], out: W) -> Printer<W> {
        Printer {
            format,
            columns,
            out,
            header_done: false,
        }
    }

    /// The output format.
    pub fn format(&self) -> TableFormat {
        self.format
    }

    /// Prints the header now (tables and CSV), unless done.
    pub fn header(&mut self) -> Result<(), Error> {
        if self.header_done {
            return Ok(());
        }
        if self.format == TableFormat::Table && !self.columns.iter().any(|c| c.in_table) {
            // Tools printing free-form lines in tables (oomkill, brkstack).
            return Ok(());
        }
        self.header_done = true;
        let line = match self.format {
            TableFormat::Table => {
                let headers: Vec<String> =
                    self.columns.iter().map(|c| c.header.to_owned()).collect();
                self.table_line(&headers)
            }
            TableFormat::Csv => csv_line(self.columns.iter().map(|c| c.key))?,
            TableFormat::Json => return Ok(()),
        };
        self.line(&line)
    }

    /// A table line of the shown columns, `texts` in the order of all columns.
    fn table_line(&self, texts: &[String]) -> String {
        let shown: Vec<(&Column, &String)> = self
            .columns
            .iter()
            .zip(texts)
            .filter(|(c, _)| c.in_table)
            .collect();
        let mut line = String::new();
        for (i, (column, cell)) in shown.iter().enumerate() {
            let width = column.width.unsigned_abs() as usize;
            if i > 0 {
                line.push(' ');
            }
            if column.width < 0 && i + 1 < shown.len() {
                line.push_str(&format!("{cell:<width$}"));
            } else if column.width < 0 {
                line.push_str(cell);
            } else {
                line.push_str(&format!("{cell:>width$}"));
            }
        }
        line.trim_end().to_owned()
    }

    /// Ends the output with what was lost, when anything was: a table's last line, a JSON
    /// object of its own (`{"seen":..,"lost":..,"why":..}`); CSV has no place for it, so the
    /// caller says it on stderr (and in the exit status).
    pub fn loss(&mut self, seen: u64, lost: u64, why: &str) -> Result<(), Error> {
        if lost == 0 {
            return Ok(());
        }
        match self.format {
            TableFormat::Table => self.line(&format!("{seen} events seen, {lost} lost: {why}")),
            TableFormat::Json => self
                .line(&serde_json::json!({ "seen": seen, "lost": lost, "why": why }).to_string()),
            TableFormat::Csv => Ok(()),
        }
    }

    /// Ends the output with events read but not judged (`what`, `why`), when there were: a
    /// table's line, a JSON object `{"unseen":..,"why":..}`; CSV leaves it to stderr.
    pub fn unseen(&mut self, unseen: u64, what: &str, why: &str) -> Result<(), Error> {
        if unseen == 0 {
            return Ok(());
        }
        match self.format {
            TableFormat::Table => self.line(&format!("{unseen} {what}: {why}")),
            TableFormat::Json => {
                self.line(&serde_json::json!({ "unseen": unseen, "why": why }).to_string())
            }
            TableFormat::Csv => Ok(()),
        }
    }

    /// Prints a line as it is (tables' free-form lines).
    pub fn line(&mut self, line: &str) -> Result<(), Error> {
        writeln!(self.out, "{line}").map_err(Error::Output)?;
        self.out.flush().map_err(Error::Output)
    }

    /// Prints one row, `values` in the order of the columns.
    pub fn row(&mut self, values: &[Value]) -> Result<(), Error> {
        self.header()?;
        let line = match self.format {
            TableFormat::Table => {
                let texts: Vec<String> = values.iter().map(Value::text).collect();
                self.table_line(&texts)
            }
            TableFormat::Csv => csv_line(values.iter().map(Value::text))?,
            TableFormat::Json => {
                let object: serde_json::Map<String, serde_json::Value> = self
                    .columns
                    .iter()
                    .zip(values)
                    .map(|(c, v)| (c.key.to_owned(), v.json()))
                    .collect();
                serde_json::Value::Object(object).to_string()
            }
        };
        self.line(&line)
    }
}

/// One CSV record, without its line end (cells quoted where they must be).
fn csv_line<T: AsRef<[u8]>>(cells: impl IntoIterator<Item = T>) -> Result<String, Error> {
    let mut csv = csv::WriterBuilder::new().from_writer(Vec::new());
    csv.write_record(cells)
        .map_err(|e| Error::Output(e.into()))?;
    let bytes = csv
        .into_inner()
        .map_err(|e| Error::Output(e.into_error()))?;
    let line = String::from_utf8_lossy(&bytes);
    Ok(line.strip_suffix('\n').unwrap_or(&line).to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What was lost or not judged ends a table and JSON, byte for byte; CSV and a run that
    /// lost nothing print nothing more.
    #[test]
    fn losses_end_tables_and_json_lines() {
        let ended = |format: TableFormat, lost: u64, unseen: u64| {
            let mut out = Vec::new();
            let mut p = Printer::new(format, COLUMNS, &mut out);
            p.loss(100, lost, "the ring was full").expect("prints");
            p.unseen(unseen, "faults not classified", "gone")
                .expect("prints");
            String::from_utf8(out).expect("UTF-8")
        };
        assert_eq!(
            ended(TableFormat::Table, 7, 2),
            "100 events seen, 7 lost: the ring was full\n2 faults not classified: gone\n"
        );
        assert_eq!(
            ended(TableFormat::Json, 7, 2),
            "{\"lost\":7,\"seen\":100,\"why\":\"the ring was full\"}\n\
             {\"unseen\":2,\"why\":\"gone\"}\n"
        );
        assert_eq!(ended(TableFormat::Csv, 7, 2), "");
        assert_eq!(ended(TableFormat::Table, 0, 0), "");
        assert_eq!(ended(TableFormat::Json, 0, 0), "");
    }

    const COLUMNS: &[Column] = &[
        Column::new("PID", "pid", -6),
        Column::new("LAT(ms)", "lat_ms", 8),
        Column::data("pages"),
        Column::new("FILE", "file", -4),
    ];

    fn printed(format: TableFormat) -> String {
        let mut out = Vec::new();
        let mut p = Printer::new(format, COLUMNS, &mut out);
        p.row(&[
            Value::Int(42),
            Value::Float(1.5, 2),
            Value::Int(7),
            "/a,b".into(),
        ])
        .expect("prints");
        String::from_utf8(out).expect("utf-8")
    }

    #[test]
    fn notes_are_empty_when_nothing_was_lost() {
        assert_eq!(table_full_note(0), "");
        assert_eq!(table_full_note(3), " (3 not counted: the table was full)");
        assert_eq!(ring_full_note(0), "");
    }

    /// Tables align and hide data-only columns; CSV quotes; JSON keys by column.
    #[test]
    fn prints_every_format() {
        assert_eq!(
            printed(TableFormat::Table),
            "PID     LAT(ms) FILE\n42         1.50 /a,b\n"
        );
        assert_eq!(
            printed(TableFormat::Csv),
            "pid,lat_ms,pages,file\n42,1.50,7,\"/a,b\"\n"
        );
        assert_eq!(
            printed(TableFormat::Json),
            "{\"file\":\"/a,b\",\"lat_ms\":1.5,\"pages\":7,\"pid\":42}\n"
        );
    }
}
