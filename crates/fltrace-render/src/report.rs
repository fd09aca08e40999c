//! The textual renderings of analysis results: the tables, CSV and JSON that `fltrace report`
//! and `fltrace diff` print, from fltrace-analyze's groups, allocation reports and diff rows.

pub mod alloc_tables;
pub mod call_tree;
pub mod diff;
pub mod faults;
#[cfg(test)]
mod synthetic;
pub mod threads;

use fltrace_analyze::{GroupBy, GroupKey, Location, stack_field};

use crate::{Error, TableFormat};

/// `report --format`: the tables, or the faults' stacks for other tools.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReportFormat {
    /// Aligned columns.
    Table,
    /// CSV.
    Csv,
    /// JSON.
    Json,
    /// Collapsed stacks, `root;outer;...;inner count`, for flamegraph.pl, inferno, speedscope.
    Folded,
    /// A gzipped pprof profile (profile.proto) for `go tool pprof`.
    Pprof,
}

impl ReportFormat {
    /// The table format; the exports (folded, pprof) never reach the tables and read as table.
    pub fn tabular(self) -> TableFormat {
        match self {
            ReportFormat::Csv => TableFormat::Csv,
            ReportFormat::Json => TableFormat::Json,
            ReportFormat::Table | ReportFormat::Folded | ReportFormat::Pprof => TableFormat::Table,
        }
    }

    /// Whether it is an export of the stacks (folded, pprof) rather than a table.
    pub fn is_export(self) -> bool {
        matches!(self, ReportFormat::Folded | ReportFormat::Pprof)
    }
}

/// The tables' formats named without help, the exports with theirs, as they always were.
#[cfg(feature = "clap")]
impl clap::ValueEnum for ReportFormat {
    fn value_variants<'a>() -> &'a [ReportFormat] {
        &[
            ReportFormat::Table,
            ReportFormat::Csv,
            ReportFormat::Json,
            ReportFormat::Folded,
            ReportFormat::Pprof,
        ]
    }

    fn to_possible_value(&self) -> Option<clap::builder::PossibleValue> {
        use clap::builder::PossibleValue;
        Some(match self {
            ReportFormat::Table => PossibleValue::new("table"),
            ReportFormat::Csv => PossibleValue::new("csv"),
            ReportFormat::Json => PossibleValue::new("json"),
            ReportFormat::Folded => PossibleValue::new("folded").help(
                "Collapsed stacks, `root;outer;...;inner count`, for flamegraph.pl, inferno, speedscope",
            ),
            ReportFormat::Pprof => PossibleValue::new("pprof")
                .help("A gzipped pprof profile (profile.proto) for `go tool pprof`"),
        })
    }
}

/// `rows` under `header` as CSV, fields quoted where they must be.
pub(crate) fn csv_text<R: IntoIterator<Item = String>>(
    header: &[&str],
    rows: impl IntoIterator<Item = R>,
) -> Result<String, Error> {
    let mut csv = csv::Writer::from_writer(Vec::new());
    csv.write_record(header)?;
    for row in rows {
        csv.write_record(row)?;
    }
    let bytes = csv
        .into_inner()
        .map_err(|e| Error::Csv(e.into_error().into()))?;
    // The fields were all strings, so the bytes are UTF-8: nothing is replaced.
    Ok(String::from_utf8_lossy(&bytes).into_owned())
}

/// A group's whole stack in one CSV field.
pub(crate) fn stack_text(key: &GroupKey) -> String {
    stack_field(key.stack.as_deref().unwrap_or_default())
}

/// The frames of a stack after the innermost (which its row names), `function (file:line) <-
/// ...`, if there are any.
pub(crate) fn callers(stack: &[Location]) -> Option<String> {
    let callers: Vec<String> = stack
        .iter()
        .skip(1)
        .map(|l| {
            format!(
                "{} ({})",
                l.function,
                if l.has_line() {
                    format!("{}:{}", l.short_file(), l.line)
                } else {
                    l.lib.to_string()
                }
            )
        })
        .collect();
    (!callers.is_empty()).then(|| callers.join(" <- "))
}

/// One caller of a stack as [`callers`] names it: `function (file:line)`, or its library.
pub(crate) fn caller_text(l: &Location) -> String {
    format!(
        "{} ({})",
        l.function,
        if l.has_line() {
            format!("{}:{}", l.short_file(), l.line)
        } else {
            l.lib.to_string()
        }
    )
}

/// `file:line` without the file's directories, for tables.
pub(crate) fn short_file_line(location: &Location) -> String {
    if location.has_line() {
        format!("{}:{}", location.short_file(), location.line)
    } else if location.file.is_empty() {
        "??".to_owned()
    } else {
        location.short_file().to_owned()
    }
}

/// The CSV columns that name a group's location, for grouping `by`.
pub(crate) fn location_columns(by: GroupBy) -> &'static [&'static str] {
    match by {
        GroupBy::Line => &["function", "file", "line", "lib"],
        GroupBy::Function => &["function", "file", "lib"],
        GroupBy::Dso => &["lib"],
        GroupBy::Stack => &["function", "file", "line", "lib", "stack"],
    }
}

/// The fields of [`location_columns`] for one group.
pub(crate) fn location_fields(
    l: &Location,
    stack: Option<&[Location]>,
    by: GroupBy,
) -> Vec<String> {
    let (function, file, line, lib) = (
        l.function.to_string(),
        l.file.to_string(),
        l.line.to_string(),
        l.lib.to_string(),
    );
    match by {
        GroupBy::Line => vec![function, file, line, lib],
        GroupBy::Function => vec![function, file, lib],
        GroupBy::Dso => vec![lib],
        GroupBy::Stack => vec![
            function,
            file,
            line,
            lib,
            stack_field(stack.unwrap_or_default()),
        ],
    }
}

/// A location as a JSON object.
pub(crate) fn location_json(l: &Location) -> serde_json::Value {
    serde_json::json!({"function": &*l.function, "file": &*l.file, "line": l.line, "lib": &*l.lib})
}

/// `doc` pretty-printed, with a final newline.
pub(crate) fn pretty(doc: &serde_json::Value) -> String {
    // A Value has string keys only: printing it cannot fail.
    let mut text = serde_json::to_string_pretty(doc).unwrap_or_default();
    text.push('\n');
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn csv_quotes_where_it_must() {
        let text = csv_text(&["a", "b"], [vec!["x,y".to_owned(), "z".to_owned()]]).unwrap();
        assert_eq!(text, "a,b\n\"x,y\",z\n");
    }
}
