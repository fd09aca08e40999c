//! `fltrace report`.

mod alloc_tables;

use std::fmt::Write as _;
use std::io::{BufWriter, IsTerminal, Write};

use anyhow::{Context, bail};

use fltrace_analyze::{
    Group, GroupBy, Location, coverage, folded_counts, group_fault_counts, percent, stack_field,
    write_original_report, write_pprof_counts,
};

use crate::cli::{By, Format, ReportArgs, ReportFormat};
use crate::load::{Allocs, Loaded, load_counts, load_with};

/// The share of faults the headline metric covers.
const COVER: f64 = 0.95;

/// What a report is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    /// Faults by their own stacks.
    Faults(GroupBy),
    /// Allocations (`--allocs`).
    Allocs(GroupBy),
    /// Memory still allocated at the end (`--leaks`).
    Leaks,
    /// Faults by the allocation site of the memory they hit (`--by alloc-site`).
    AllocSite,
}

impl Mode {
    /// The mode the flags ask for, or why they do not go together.
    fn of(args: &ReportArgs) -> anyhow::Result<Mode> {
        let group_by = |by: Option<By>| match by.unwrap_or(By::Line) {
            By::Stack => GroupBy::Stack,
            By::Function => GroupBy::Function,
            By::Line | By::AllocSite => GroupBy::Line,
            By::Dso => GroupBy::Dso,
        };
        let mode = match (args.allocs, args.leaks, args.by) {
            (true, _, Some(By::AllocSite)) => bail!(
                "--by alloc-site groups faults; --allocs groups allocations by stack, function, line or dso"
            ),
            (true, _, by) => Mode::Allocs(group_by(by)),
            (_, true, Some(_)) => bail!("--leaks lists whole stacks: --by does not apply"),
            (_, true, None) => Mode::Leaks,
            (false, false, Some(By::AllocSite)) => Mode::AllocSite,
            (false, false, by) => Mode::Faults(group_by(by)),
        };
        let whole_recording = matches!(mode, Mode::Allocs(_) | Mode::Leaks);
        if whole_recording && args.selection.time.is_some() {
            bail!("--time selects faults; --allocs and --leaks cover the whole recording");
        }
        if !whole_recording && args.older_ms.is_some() {
            bail!("-o/--older applies to --leaks and --allocs");
        }
        Ok(mode)
    }
}

pub fn run(args: ReportArgs) -> anyhow::Result<()> {
    if matches!(args.format, ReportFormat::Folded | ReportFormat::Pprof) {
        return export(&args);
    }
    if args.output.is_some() {
        bail!("--output applies to --format folded and pprof; the tables go to stdout");
    }
    let out = report(&args)?;
    let mut stdout = std::io::stdout().lock();
    stdout.write_all(out.as_bytes())?;
    stdout.flush()?;
    Ok(())
}

/// `--format folded` and `--format pprof`: every fault's whole stack, for other tools.
fn export(args: &ReportArgs) -> anyhow::Result<()> {
    if args.allocs || args.leaks {
        bail!("--format folded and pprof export the faults' stacks: not with --allocs or --leaks");
    }
    if args.by.is_some() {
        bail!("--format folded and pprof export whole stacks: --by does not apply");
    }
    let pprof = args.format == ReportFormat::Pprof;
    if pprof && args.output.is_none() && std::io::stdout().is_terminal() {
        bail!("a pprof profile is binary: give --output FILE or redirect stdout");
    }
    let loaded = load_counts(&args.selection)?;
    let sources = || {
        loaded
            .traces
            .iter()
            .zip(&loaded.counts)
            .map(|((t, s), c)| (t, s, c))
    };
    let (mut out, name): (Box<dyn Write>, String) = match &args.output {
        Some(path) => (
            Box::new(BufWriter::new(fltrace_trace::files::create(path)?)),
            path.display().to_string(),
        ),
        None => (
            Box::new(BufWriter::new(std::io::stdout().lock())),
            "stdout".to_owned(),
        ),
    };
    let written = if pprof {
        write_pprof_counts(sources(), &mut out)
    } else {
        folded_counts(sources())
            .iter()
            .try_for_each(|(stack, count)| writeln!(out, "{stack} {count}"))
    };
    written
        .and_then(|()| out.flush())
        .with_context(|| format!("writing {name}"))
}

/// Writes the original's report files and returns what goes to stdout.
fn report(args: &ReportArgs) -> anyhow::Result<String> {
    let mode = Mode::of(args)?;
    let allocs = match mode {
        Mode::Faults(_) => Allocs::Skip,
        _ => Allocs::Required,
    };
    // Only the reports of faults by their own stacks stream; the others need each fault's
    // address and time to find the block it landed in.
    let loaded = match mode {
        Mode::Faults(_) => load_counts(&args.selection)?,
        _ => load_with(&args.selection, allocs)?,
    };
    for ((trace, stacks), counts) in loaded.traces.iter().zip(&loaded.counts) {
        let groups = group_fault_counts([(counts, stacks)], GroupBy::Stack);
        let path = fltrace_trace::files::path(loaded.dir(), "report", trace.pid, "out");
        let file = BufWriter::new(fltrace_trace::files::create(&path)?);
        write_original_report(&groups, file)
            .with_context(|| format!("writing {}", path.display()))?;
    }
    // The faults table says it in its footer; elsewhere it must not mix with the data.
    let in_table = matches!(mode, Mode::Faults(_)) && args.format == ReportFormat::Table;
    if !in_table && let Some(note) = loaded.tracer_note() {
        eprintln!("fltrace: {note}");
    }
    match mode {
        Mode::Faults(by) => faults(&loaded, by, args.top, args.format.tabular()),
        Mode::Allocs(by) => alloc_tables::allocs(&loaded, by, args),
        Mode::Leaks => alloc_tables::leaks(&loaded, args),
        Mode::AllocSite => alloc_tables::by_alloc_site(&loaded, args.top, args.format.tabular()),
    }
}

/// Faults grouped by their own stacks: the report without allocations.
fn faults(loaded: &Loaded, by: GroupBy, top: usize, format: Format) -> anyhow::Result<String> {
    let groups = group_fault_counts(loaded.counted(), by);
    let lines = if by == GroupBy::Line {
        groups.clone()
    } else {
        group_fault_counts(loaded.counted(), GroupBy::Line)
    };
    let covering = coverage(&lines, COVER);
    let total = loaded.total_faults();
    let shown = shown(top, groups.len());
    Ok(match format {
        Format::Table => table(loaded, &groups[..shown], total, covering, lines.len()),
        Format::Csv => csv(&groups[..shown], by, total)?,
        Format::Json => json(loaded, &groups[..shown], by, total, covering, lines.len()),
    })
}

/// How many of `len` rows `--top` shows.
pub(crate) fn shown(top: usize, len: usize) -> usize {
    if top == 0 { len } else { top.min(len) }
}

/// `rows` under `header` as CSV, fields quoted where they must be.
pub(crate) fn csv_text<R: IntoIterator<Item = String>>(
    header: &[&str],
    rows: impl IntoIterator<Item = R>,
) -> anyhow::Result<String> {
    let mut csv = csv::Writer::from_writer(Vec::new());
    csv.write_record(header)?;
    for row in rows {
        csv.write_record(row)?;
    }
    let bytes = csv.into_inner().map_err(|e| e.into_error())?;
    Ok(String::from_utf8(bytes)?)
}

/// A group's whole stack in one CSV field.
pub(crate) fn stack_text(key: &fltrace_analyze::GroupKey) -> String {
    stack_field(key.stack.as_deref().unwrap_or_default())
}

fn table(
    loaded: &Loaded,
    groups: &[Group],
    total: u64,
    covering: usize,
    locations: usize,
) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{:>4} {:>9} {:>7} {:>7}  {:<10} {:<8} {:<32} {:<36} lib",
        "#", "faults", "%", "cum%", "kind", "type", "function", "file:line"
    );
    let mut cumulative = 0;
    for (i, group) in groups.iter().enumerate() {
        cumulative += group.count;
        let location = &group.key.location;
        let file_line = short_file_line(location);
        let _ = writeln!(
            out,
            "{:>4} {:>9} {:>6.2}% {:>6.2}%  {:<10} {:<8} {:<32} {:<36} {}",
            i + 1,
            group.count,
            percent(group.count, total),
            percent(cumulative, total),
            group.kind_name(),
            group.type_name(),
            truncate(&location.function, 32),
            file_line,
            location.lib
        );
        if let Some(callers) = group.key.stack.as_deref().and_then(callers) {
            let _ = writeln!(out, "{:>42}<- {callers}", "");
        }
    }
    let processes = loaded.traces.len();
    let _ = writeln!(
        out,
        "\n{total} faults in {processes} process{} of `{}`, {} lost; {covering} of {locations} code locations cover {:.0}% of faults",
        if processes == 1 { "" } else { "es" },
        loaded.command(),
        loaded.lost,
        COVER * 100.0,
    );
    if let Some(note) = loaded.tracer_note() {
        let _ = writeln!(out, "{note}");
    }
    out
}

/// The frames of a stack after the first, `function (file:line) <- ...`, if there are any.
fn callers(stack: &[Location]) -> Option<String> {
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

pub(crate) fn truncate(s: &str, width: usize) -> String {
    if s.chars().count() <= width {
        s.to_owned()
    } else {
        let mut t: String = s.chars().take(width - 1).collect();
        t.push('…');
        t
    }
}

fn csv(groups: &[Group], by: GroupBy, total: u64) -> anyhow::Result<String> {
    let header: Vec<&str> = ["count", "percent", "kind"]
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

fn json(
    loaded: &Loaded,
    groups: &[Group],
    by: GroupBy,
    total: u64,
    covering: usize,
    locations: usize,
) -> String {
    let rows: Vec<serde_json::Value> = groups
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
                "function": &*l.function,
                "file": &*l.file,
                "line": l.line,
                "lib": &*l.lib,
            });
            if let (Some(stack), GroupBy::Stack) = (&g.key.stack, by) {
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
        "faults": total,
        "lost": loaded.lost,
        "tracer_faults": loaded.tracer_faults,
        "tracer_included": loaded.tracer_included,
        "locations": locations,
        "locations_covering_95_percent": covering,
        "groups": rows,
    });
    let mut text = serde_json::to_string_pretty(&doc).unwrap_or_default();
    text.push('\n');
    text
}
