//! `fltrace report --allocs`, `--leaks` and `--by alloc-site`: what a recording made with
//! `record --allocs` allocated, what it never gave back, and which allocations the faults hit.

use std::fmt::Write as _;

use fltrace_analyze::{
    AllocGroup, AllocProcess, AllocSiteGroup, AllocSiteTotals, AllocSummary, BlockKind,
    FaultsByAllocSite, GroupBy, Loaded, Location, SizeHistogram, group_process_allocs, leak_age_ns,
    merge_same_lines, percent, rank_allocs, rows_shown, sum_totals, take_top,
};

use super::{TableFormat, callers, csv_text, location_json, pretty, short_file_line, stack_text};
use crate::Error;
use crate::table::{Align, Table, fit_line, wrap};

/// Lines of code shown under each allocation site in the `--by alloc-site` table.
const LINES_PER_SITE: usize = 5;

/// `--allocs`: the allocation sites of `processes` grouped `by`, the first `top` of each
/// ranking shown; leaks are blocks allocated at least `older_ms` before the end.
pub fn allocs(
    loaded: &Loaded,
    processes: &[AllocProcess<'_>],
    by: GroupBy,
    top: usize,
    older_ms: Option<u64>,
    format: TableFormat,
    width: Option<usize>,
) -> Result<String, Error> {
    let min_age_ns = leak_age_ns(older_ms);
    let summary = AllocSummary::of(processes);
    let groups = group_process_allocs(processes, by);
    let top_of = |list| take_top(top, list);
    let by_bytes = top_of(rank_allocs(&groups, |t| t.bytes));
    Ok(match format {
        TableFormat::Table => {
            allocs_table(loaded, processes, &summary, &groups, top, min_age_ns, width)
        }
        TableFormat::Csv => allocs_csv(&by_bytes, by)?,
        TableFormat::Json => {
            let (heap, mappings, sizes) = (&summary.heap, &summary.mappings, &summary.sizes);
            let doc = serde_json::json!({
                "command": loaded.command(),
                "pids": processes.iter().map(|p| p.trace.pid).collect::<Vec<_>>(),
                "heap": totals_json(heap),
                "mappings": totals_json(mappings),
                "unknown_frees": summary.unknown_frees,
                "overlaps": summary.overlaps,
                "min_leak_age_ms": older_ms.unwrap_or(0),
                "peaks": processes.iter().map(|p| serde_json::json!({
                    "pid": p.trace.pid,
                    "time_s": loaded.seconds(p.stats.peak_ns),
                    "bytes": p.stats.peak_bytes,
                })).collect::<Vec<_>>(),
                "sites_by_bytes": by_bytes.iter().map(|g| site_json(g)).collect::<Vec<_>>(),
                "sites_by_count": top_of(rank_allocs(&groups, |t| t.allocs)).iter().map(|g| site_json(g)).collect::<Vec<_>>(),
                "sizes": sizes.buckets().map(|(bucket, count, bytes)| {
                    let (from, to) = SizeHistogram::range(bucket);
                    serde_json::json!({"from": from, "to": to, "count": count, "bytes": bytes})
                }).collect::<Vec<_>>(),
            });
            pretty(&doc)
        }
    })
}

/// `12.5 MiB`: sizes in binary units, as everywhere.
fn human(bytes: u64) -> String {
    crate::table::bytes(bytes)
}

/// `1 mapping`, `2 mappings`.
fn counted(n: u64, one: &str, many: &str) -> String {
    format!("{n} {}", if n == 1 { one } else { many })
}

/// `function file:line`, for the lists under the tables.
fn site(location: &Location) -> String {
    format!("{} {}", location.function, short_file_line(location))
}

fn allocs_table(
    loaded: &Loaded,
    processes: &[AllocProcess<'_>],
    summary: &AllocSummary,
    groups: &[AllocGroup],
    top: usize,
    min_age_ns: u64,
    width: Option<usize>,
) -> String {
    let mut out = String::new();
    let limit = |n: usize| rows_shown(top, n);
    for (title, list) in [
        ("bytes", rank_allocs(groups, |t| t.bytes)),
        ("count", rank_allocs(groups, |t| t.allocs)),
    ] {
        let _ = writeln!(out, "Allocation sites by {title}:");
        // Temporaries, the heap peak and leak counts have lists of their own below: they
        // go first when the names would not fit.
        let mut table = Table::new()
            .column("#", Align::Right)
            .column("bytes", Align::Right)
            .column("allocs", Align::Right)
            .column("leaked", Align::Right)
            .column("leaks", Align::Right)
            .droppable(3)
            .column("temporary", Align::Right)
            .droppable(1)
            .column("at peak", Align::Right)
            .droppable(2)
            .column("memory", Align::Left)
            .gap(2)
            .name("function", 16)
            .name("file:line", 12)
            .name("lib", 10);
        for (i, group) in list.iter().take(limit(list.len())).enumerate() {
            let (l, t) = (&group.key.location, &group.totals);
            table.row(vec![
                (i + 1).to_string(),
                human(t.bytes),
                t.allocs.to_string(),
                human(t.leaked_bytes),
                t.leaked_allocs.to_string(),
                t.temporary.to_string(),
                human(t.peak_bytes),
                group.kind.name().to_owned(),
                l.function.to_string(),
                short_file_line(l),
                l.lib.to_string(),
            ]);
            if let Some(callers) = group.key.stack.as_deref().and_then(callers) {
                table.under(format!("{:>6}<- {callers}", ""));
            }
        }
        out.push_str(&table.render(width));
        out.push('\n');
    }
    // Sentences wrap at the width; a list's lines keep their figures and cut the site.
    let say = |out: &mut String, text: String| {
        let _ = writeln!(out, "{}", wrap(&text, width));
    };
    let item = |out: &mut String, text: String| {
        let _ = writeln!(out, "{}", fit_line(&text, width));
    };

    for p in processes.iter().filter(|p| p.stats.peak_bytes > 0) {
        say(
            &mut out,
            format!(
                "Heap peak of process {}: {} at {:.3} s",
                p.trace.pid,
                human(p.stats.peak_bytes),
                loaded.seconds(p.stats.peak_ns)
            ),
        );
    }
    let at_peak = rank_allocs(groups, |t| t.peak_bytes);
    let peak_total = sum_totals(at_peak.iter().copied()).peak_bytes;
    if peak_total > 0 {
        say(&mut out, "alive then, by site:".to_owned());
        for group in at_peak.iter().take(limit(at_peak.len())) {
            let t = &group.totals;
            item(
                &mut out,
                format!(
                    "{:>10} {:>6.1}% {:>9} blocks  {}",
                    human(t.peak_bytes),
                    percent(t.peak_bytes, peak_total),
                    t.peak_allocs,
                    site(&group.key.location)
                ),
            );
        }
    } else {
        say(&mut out, "Heap peak: no heap allocations".to_owned());
    }
    out.push('\n');

    let leaks = rank_allocs(groups, |t| t.leaked_bytes);
    let leaked = sum_totals(leaks.iter().copied());
    let (leaked_bytes, leaked_allocs) = (leaked.leaked_bytes, leaked.leaked_allocs);
    say(
        &mut out,
        format!(
            "Leaks: {} in {leaked_allocs} allocations alive at the end, allocated at least {} ms before it",
            human(leaked_bytes),
            min_age_ns / 1_000_000
        ),
    );
    for group in leaks.iter().take(limit(leaks.len())) {
        let t = &group.totals;
        item(
            &mut out,
            format!(
                "{:>10} {:>9} allocs  {:<7} {}",
                human(t.leaked_bytes),
                t.leaked_allocs,
                group.kind.name(),
                site(&group.key.location)
            ),
        );
    }
    out.push('\n');

    let heap = &summary.heap;
    let temporary = rank_allocs(groups, |t| t.temporary);
    say(
        &mut out,
        format!(
            "Temporary allocations (as heaptrack counts them: the first free after an allocation of the block's size and stack): {} of {} heap allocations ({:.1}%)",
            heap.temporary,
            heap.allocs,
            percent(heap.temporary, heap.allocs)
        ),
    );
    for group in temporary.iter().take(limit(temporary.len())) {
        let t = &group.totals;
        item(
            &mut out,
            format!(
                "{:>10} {:>6.1}% of the site's  {}",
                t.temporary,
                percent(t.temporary, t.allocs),
                site(&group.key.location)
            ),
        );
    }
    out.push('\n');

    let sizes = &summary.sizes;
    say(&mut out, "Heap allocation sizes:".to_owned());
    let most = sizes.counts.iter().copied().max().unwrap_or(0);
    // The bars take what the figures before them leave, at most 40 marks.
    const FIGURES: usize = 22 + 1 + 10 + 1 + 10 + 2;
    let marks = width.map_or(40, |w| w.saturating_sub(FIGURES).clamp(1, 40)) as u64;
    for (bucket, count, bytes) in sizes.buckets() {
        let (from, to) = SizeHistogram::range(bucket);
        let sizes = if bucket == 0 {
            "0 B".to_owned()
        } else {
            format!("[{}, {})", human(from), human(to.saturating_add(1)))
        };
        // At least one mark for a non-empty bucket, however small.
        let bar = ((count * marks).div_ceil(most.max(1))) as usize;
        let _ = writeln!(
            out,
            "{sizes:>22} {count:>10} {:>10}  {}",
            human(bytes),
            "#".repeat(bar)
        );
    }
    out.push('\n');

    let mappings = &summary.mappings;
    let (unknown, overlaps) = (summary.unknown_frees, summary.overlaps);
    let mut last = format!(
        "{} ({}) and {} ({}) in {} of `{}`; {}, {}",
        counted(heap.allocs, "heap allocation", "heap allocations"),
        human(heap.bytes),
        counted(mappings.allocs, "mapping", "mappings"),
        human(mappings.bytes),
        counted(processes.len() as u64, "process", "processes"),
        loaded.command(),
        counted(heap.failed + mappings.failed, "failed call", "failed calls"),
        counted(
            unknown,
            "free of an unknown block",
            "frees of unknown blocks"
        ),
    );
    if overlaps > 0 {
        last.push_str(&format!(
            ", {overlaps} blocks handed out while still alive (a free entered late)"
        ));
    }
    say(&mut out, last);
    out
}

fn allocs_csv(groups: &[&AllocGroup], by: GroupBy) -> Result<String, Error> {
    let mut header = vec![
        "function",
        "file",
        "line",
        "allocs",
        "bytes",
        "leaked_allocs",
        "leaked_bytes",
        "temporary",
        "peak_bytes",
        "peak_allocs",
        "failed",
        "memory",
        "lib",
    ];
    if by == GroupBy::Stack {
        header.push("stack");
    }
    csv_text(
        &header,
        groups.iter().map(|group| {
            let (l, t) = (&group.key.location, &group.totals);
            let mut row = vec![l.function.to_string(), l.file.to_string()];
            row.extend(
                [
                    l.line.into(),
                    t.allocs,
                    t.bytes,
                    t.leaked_allocs,
                    t.leaked_bytes,
                    t.temporary,
                    t.peak_bytes,
                    t.peak_allocs,
                    t.failed,
                ]
                .map(|n| n.to_string()),
            );
            row.extend([group.kind.name().to_owned(), l.lib.to_string()]);
            if by == GroupBy::Stack {
                row.push(stack_text(&group.key));
            }
            row
        }),
    )
}

fn totals_json(t: &AllocSiteTotals) -> serde_json::Value {
    serde_json::json!({
        "allocs": t.allocs,
        "bytes": t.bytes,
        "failed": t.failed,
        "leaked_allocs": t.leaked_allocs,
        "leaked_bytes": t.leaked_bytes,
        "temporary": t.temporary,
        "peak_bytes": t.peak_bytes,
        "peak_allocs": t.peak_allocs,
    })
}

fn site_json(group: &AllocGroup) -> serde_json::Value {
    let mut row = location_json(&group.key.location);
    row["memory"] = group.kind.name().into();
    if let serde_json::Value::Object(totals) = totals_json(&group.totals) {
        for (k, v) in totals {
            row[k] = v;
        }
    }
    if let Some(stack) = &group.key.stack {
        row["stack"] = stack.iter().map(location_json).collect();
    }
    row
}

/// `--leaks`, as bcc's memleak prints outstanding allocations: the first `top` stacks of
/// `processes` by bytes alive at the end, allocated at least `older_ms` before it.
pub fn leaks(
    loaded: &Loaded,
    processes: &[AllocProcess<'_>],
    top: usize,
    older_ms: Option<u64>,
    format: TableFormat,
    width: Option<usize>,
) -> Result<String, Error> {
    let groups = merge_same_lines(group_process_allocs(processes, GroupBy::Stack));
    // A frame's line after two tabs (16 columns on a terminal), cut to the rest.
    let frame = |text: String| match width {
        Some(w) => format!(
            "\t\t{}",
            crate::table::middle(&text, w.saturating_sub(16).max(8))
        ),
        None => format!("\t\t{text}"),
    };
    let leaks = rank_allocs(&groups, |t| t.leaked_bytes);
    let leaks = &leaks[..rows_shown(top, leaks.len())];
    Ok(match format {
        TableFormat::Table => {
            let mut out = format!("Top {} stacks with outstanding allocations:\n", leaks.len());
            for group in leaks {
                let t = &group.totals;
                let _ = writeln!(
                    out,
                    "\t{} bytes in {} allocations from stack",
                    t.leaked_bytes, t.leaked_allocs
                );
                for l in group.key.stack.iter().flat_map(|s| s.iter()) {
                    let text = if l.has_line() {
                        format!("{} {}:{}", l.function, l.short_file(), l.line)
                    } else {
                        format!("{} [{}]", l.function, l.lib)
                    };
                    let _ = writeln!(out, "{}", frame(text));
                }
            }
            let all = rank_allocs(&groups, |t| t.leaked_bytes);
            let leaked = sum_totals(all.iter().copied());
            let (bytes, allocs) = (leaked.leaked_bytes, leaked.leaked_allocs);
            let _ = writeln!(
                out,
                "\n{}",
                wrap(
                    &format!(
                        "{bytes} bytes in {allocs} allocations from {} stacks alive at the end of `{}`, allocated at least {} ms before it",
                        all.len(),
                        loaded.command(),
                        older_ms.unwrap_or(0)
                    ),
                    width
                )
            );
            out
        }
        TableFormat::Csv => csv_text(
            &[
                "function",
                "file",
                "line",
                "leaked_allocs",
                "leaked_bytes",
                "memory",
                "lib",
                "stack",
            ],
            leaks.iter().map(|group| {
                let (l, t) = (&group.key.location, &group.totals);
                [
                    l.function.to_string(),
                    l.file.to_string(),
                    l.line.to_string(),
                    t.leaked_allocs.to_string(),
                    t.leaked_bytes.to_string(),
                    group.kind.name().to_owned(),
                    l.lib.to_string(),
                    stack_text(&group.key),
                ]
            }),
        )?,
        TableFormat::Json => pretty(&serde_json::json!({
            "command": loaded.command(),
            "pids": processes.iter().map(|p| p.trace.pid).collect::<Vec<_>>(),
            "min_leak_age_ms": older_ms.unwrap_or(0),
            "leaks": leaks.iter().map(|g| serde_json::json!({
                "bytes": g.totals.leaked_bytes,
                "allocs": g.totals.leaked_allocs,
                "memory": g.kind.name(),
                "site": location_json(&g.key.location),
                "stack": g.key.stack.iter().flat_map(|s| s.iter()).map(location_json).collect::<Vec<_>>(),
            })).collect::<Vec<_>>(),
        })),
    })
}

/// `--by alloc-site`: faults by the allocation site of the memory they hit, the first `top`
/// sites shown.
pub fn by_alloc_site(
    loaded: &Loaded,
    processes: &[AllocProcess<'_>],
    top: usize,
    format: TableFormat,
    width: Option<usize>,
) -> Result<String, Error> {
    let report = FaultsByAllocSite::of(processes);
    let (groups, total, in_blocks) = (&report.groups, report.total, report.in_blocks);
    let totals_of = |g: &AllocSiteGroup| report.allocated(g);
    let rows = &groups[..rows_shown(top, groups.len())];
    let memory = |g: &AllocSiteGroup| g.kind.map_or("none", BlockKind::name);
    Ok(match format {
        TableFormat::Table => {
            let mut table = Table::new()
                .column("#", Align::Right)
                .column("faults", Align::Right)
                .column("%", Align::Right)
                .column("cum%", Align::Right)
                .droppable(1)
                .column("kind", Align::Left)
                .gap(2)
                .column("type", Align::Left)
                .column("memory", Align::Left)
                .name("allocated by", 16)
                .name("file:line", 12)
                .column("allocated", Align::Right);
            let mut cumulative = 0;
            for (i, group) in rows.iter().enumerate() {
                let f = &group.faults;
                cumulative += f.count;
                let l = &f.key.location;
                table.row(vec![
                    (i + 1).to_string(),
                    f.count.to_string(),
                    format!("{:.2}%", percent(f.count, total)),
                    format!("{:.2}%", percent(cumulative, total)),
                    f.kind_name().to_owned(),
                    f.type_name().to_owned(),
                    memory(group).to_owned(),
                    l.function.to_string(),
                    if group.kind.is_some() {
                        short_file_line(l)
                    } else {
                        String::new()
                    },
                    match group.kind {
                        Some(_) => human(totals_of(group).bytes),
                        None => String::new(),
                    },
                ]);
                // The code that took them.
                for line in group.lines.iter().take(LINES_PER_SITE) {
                    table.under(format!(
                        "{:>6}{} ({:.2}%) {} {} by {}",
                        "",
                        line.count,
                        percent(line.count, f.count),
                        line.kind_name(),
                        line.type_name(),
                        site(&line.key.location)
                    ));
                }
                if group.lines.len() > LINES_PER_SITE {
                    table.under(format!(
                        "{:>6}{} more lines",
                        "",
                        group.lines.len() - LINES_PER_SITE
                    ));
                }
            }
            let mut out = table.render(width);
            let sites = report.sites();
            let n = processes.len();
            let _ = writeln!(
                out,
                "\n{}",
                wrap(
                    &format!(
                        "{total} faults in {n} process{} of `{}`; {in_blocks} ({:.1}%) in memory from {sites} allocation sites, the others outside any live allocation",
                        if n == 1 { "" } else { "es" },
                        loaded.command(),
                        percent(in_blocks, total)
                    ),
                    width
                )
            );
            out
        }
        TableFormat::Csv => csv_text(
            &[
                "count", "function", "file", "line", "percent", "kind", "type", "memory", "lib",
                "allocs", "bytes",
            ],
            rows.iter().map(|group| {
                let (f, l) = (&group.faults, &group.faults.key.location);
                let t = totals_of(group);
                [
                    f.count.to_string(),
                    l.function.to_string(),
                    l.file.to_string(),
                    l.line.to_string(),
                    format!("{:.4}", percent(f.count, total)),
                    f.kind_name().to_owned(),
                    f.type_name().to_owned(),
                    memory(group).to_owned(),
                    l.lib.to_string(),
                    t.allocs.to_string(),
                    t.bytes.to_string(),
                ]
            }),
        )?,
        TableFormat::Json => pretty(&serde_json::json!({
            "command": loaded.command(),
            "pids": processes.iter().map(|p| p.trace.pid).collect::<Vec<_>>(),
            "faults": total,
            "in_allocations": in_blocks,
            "groups": rows.iter().map(|g| {
                let f = &g.faults;
                let mut row = location_json(&f.key.location);
                let t = totals_of(g);
                row["count"] = f.count.into();
                row["percent"] = percent(f.count, total).into();
                row["kind"] = f.kind_name().into();
                row["type"] = f.type_name().into();
                row["memory"] = memory(g).into();
                row["allocs"] = t.allocs.into();
                row["bytes"] = t.bytes.into();
                row["lines"] = g.lines.iter().take(rows_shown(top, g.lines.len())).map(|line| {
                    let mut row = location_json(&line.key.location);
                    row["count"] = line.count.into();
                    row["kind"] = line.kind_name().into();
                    row
                }).collect();
                row
            }).collect::<Vec<_>>(),
        })),
    })
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use fltrace_analyze::{AllocStacks, FaultsHeld, alloc_processes, leak_age_ns};

    use super::super::synthetic::{load, record, rows};
    use super::*;

    /// Which report [`report`] writes.
    #[derive(Clone, Copy)]
    enum Report {
        Allocs,
        Leaks { older_ms: Option<u64> },
        ByAllocSite,
    }

    /// The report of the recording in `dir`, as `fltrace report` with its flags writes it.
    fn report(dir: &Path, report: Report, format: TableFormat) -> String {
        let loaded = load(dir, AllocStacks::Required, FaultsHeld::All).unwrap();
        let older_ms = match report {
            Report::Leaks { older_ms } => older_ms,
            _ => None,
        };
        let (processes, without) = alloc_processes(&loaded, leak_age_ns(older_ms));
        assert!(without.is_empty());
        match report {
            Report::Allocs => allocs(
                &loaded,
                &processes,
                GroupBy::Line,
                20,
                None,
                format,
                Some(120),
            ),
            Report::Leaks { older_ms } => {
                leaks(&loaded, &processes, 20, older_ms, format, Some(120))
            }
            Report::ByAllocSite => by_alloc_site(&loaded, &processes, 20, format, Some(120)),
        }
        .unwrap()
    }

    #[test]
    fn allocs_csv_and_table() {
        let dir = tempfile::tempdir().unwrap();
        record(dir.path(), true);
        let csv = report(dir.path(), Report::Allocs, TableFormat::Csv);
        assert!(
            csv.starts_with("function,file,line,allocs,bytes,leaked_allocs,leaked_bytes,"),
            "{csv}"
        );
        let rows = rows(&csv);
        let got: Vec<(bool, &str, &str, &str, &str, &str, &str)> = rows
            .iter()
            .map(|r| {
                (
                    r["file"].ends_with("synthetic.rs"),
                    r["function"].rsplit("::").next().unwrap(),
                    &*r["bytes"],
                    &*r["leaked_allocs"],
                    &*r["leaked_bytes"],
                    &*r["temporary"],
                    &*r["memory"],
                )
            })
            .collect();
        assert_eq!(
            got,
            vec![
                (true, "mapping_site", "8192", "1", "4096", "0", "mapping"),
                (true, "leaky_site", "5000", "1", "5000", "0", "heap"),
                (true, "temporary_site", "100", "0", "0", "1", "heap"),
            ]
        );
        // Peak: 5100 heap bytes from 2 to 3 ms.
        assert_eq!(rows[1]["peak_bytes"], "5000");
        assert_eq!(rows[2]["peak_bytes"], "100");

        let table = report(dir.path(), Report::Allocs, TableFormat::Table);
        assert!(
            table.contains("Heap peak of process 4242: 5.0 KiB at 0.002 s"),
            "{table}"
        );
        assert!(table.contains("Leaks: 8.9 KiB in 2 allocations"), "{table}");
        // The sentence wraps at the width: read it whole.
        assert!(
            table
                .replace('\n', " ")
                .contains(": 1 of 2 heap allocations (50.0%)"),
            "{table}"
        );
        // At 80 columns every line fits; the names are cut, the figures stay.
        let loaded = load(dir.path(), AllocStacks::Required, FaultsHeld::All).unwrap();
        let (processes, _) = alloc_processes(&loaded, 0);
        let narrow = allocs(
            &loaded,
            &processes,
            GroupBy::Line,
            20,
            None,
            TableFormat::Table,
            Some(80),
        )
        .unwrap();
        assert!(narrow.lines().all(|l| l.chars().count() <= 80), "{narrow}");
        assert!(
            narrow.contains("8.0 KiB") && narrow.contains(":30"),
            "{narrow}"
        );
        let json: serde_json::Value =
            serde_json::from_str(&report(dir.path(), Report::Allocs, TableFormat::Json)).unwrap();
        assert_eq!(json["heap"]["allocs"], 2);
        assert_eq!(json["mappings"]["leaked_bytes"], 4096);
        assert_eq!(json["sizes"][0]["from"], 64);
    }

    #[test]
    fn leaks_like_memleak() {
        let dir = tempfile::tempdir().unwrap();
        record(dir.path(), true);
        let text = report(
            dir.path(),
            Report::Leaks { older_ms: None },
            TableFormat::Table,
        );
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines[0], "Top 2 stacks with outstanding allocations:");
        assert_eq!(lines[1], "\t5000 bytes in 1 allocations from stack");
        // Frames follow, indented, inlined ones expanded.
        let frames: Vec<&str> = lines[2..]
            .iter()
            .take_while(|l| l.starts_with("\t\t"))
            .copied()
            .collect();
        assert!(
            frames
                .iter()
                .any(|f| f.contains("leaky_site synthetic.rs:")),
            "{text}"
        );
        assert_eq!(
            lines[2 + frames.len()],
            "\t4096 bytes in 1 allocations from stack"
        );
        // The block from 4 ms is 2 ms old at the end (6 ms): hidden from 3 ms on.
        let text = report(
            dir.path(),
            Report::Leaks { older_ms: Some(3) },
            TableFormat::Table,
        );
        assert!(text.starts_with("Top 1 stacks"), "{text}");
    }

    #[test]
    fn faults_by_alloc_site() {
        let dir = tempfile::tempdir().unwrap();
        record(dir.path(), true);
        let csv = report(dir.path(), Report::ByAllocSite, TableFormat::Csv);
        assert!(csv.starts_with("count,function,file,line,"), "{csv}");
        let got: Vec<(String, String, String)> = rows(&csv)
            .iter()
            .map(|r| {
                let function = r["function"].rsplit("::").next().unwrap().to_owned();
                (r["count"].clone(), function, r["memory"].clone())
            })
            .collect();
        let row = |count: &str, function: &str, memory: &str| {
            (count.to_owned(), function.to_owned(), memory.to_owned())
        };
        assert_eq!(
            got,
            vec![
                row("3", "leaky_site", "heap"),
                row("1", "[anon]", "none"),
                row("1", "[unknown]", "none"),
                row("1", "mapping_site", "mapping"),
            ]
        );
        let table = report(dir.path(), Report::ByAllocSite, TableFormat::Table);
        assert!(table.contains("toucher synthetic.rs:"), "{table}");
        assert!(
            table.contains("6 faults in 1 process of `synthetic`; 4 (66.7%)"),
            "{table}"
        );
    }

    /// Allocation reports on a recording without allocations say how to make one.
    #[test]
    fn without_allocations() {
        let dir = tempfile::tempdir().unwrap();
        record(dir.path(), false);
        let err = load(dir.path(), AllocStacks::Required, FaultsHeld::All)
            .err()
            .unwrap()
            .to_string();
        assert_eq!(err, fltrace_analyze::NO_ALLOCS);
    }
}
