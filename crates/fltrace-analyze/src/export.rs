//! Faults in the formats other tools read: collapsed ("folded") stacks for flamegraph.pl,
//! inferno and speedscope; perf script's text for inferno-collapse-perf, speedscope and the
//! Firefox Profiler; and pprof's profile.proto for `go tool pprof`.
//!
//! Frames are named as perf-based flamegraphs name them (stackcollapse-perf's rules): the
//! function without its parameter list, `[lib]` for an address no symbol covers, the process
//! name as the root frame. `perf script` text collapsed by inferno gives exactly [`folded`].

use std::fmt::Write as _;
use std::io::Write;

use rustc_hash::FxHashMap;

use fltrace_trace::{Fault, ProcessTrace, keys};

use crate::{FaultCounts, Location, ResolvedStacks, TRUNCATED_FRAME};

/// The name of a process as a profile's root frame and perf script's `comm`: the file name of
/// the recorded command's program.
pub fn process_name(trace: &ProcessTrace) -> String {
    let program = trace
        .meta(keys::COMMAND)
        .and_then(|c| c.split_whitespace().next())
        .map(|p| p.rsplit('/').next().unwrap_or(p))
        .filter(|p| !p.is_empty());
    match program {
        Some(p) => p.to_owned(),
        None => format!("[{}]", trace.pid),
    }
}

/// The name of a process in address-space generation `generation`, as a profile's root frame:
/// its main thread's `comm` as the kernel named it (as perf names `cc1plus` and `as` under
/// `g++`), else [`process_name`] for recordings without names. Spaces stay, as the kernel
/// and perf spell them (`GC Thread#0`).
pub fn process_name_in(trace: &ProcessTrace, generation: u32) -> String {
    match trace.process_name_in(generation) {
        Some(name) if !name.is_empty() => name.to_owned(),
        _ => process_name(trace),
    }
}

/// The name of thread `tid` in generation `generation`, as perf script's `comm`: its own
/// `comm`, else the process's ([`process_name_in`]).
pub fn thread_name(trace: &ProcessTrace, generation: u32, tid: u32) -> String {
    match trace.thread_name(generation, tid) {
        Some(name) if !name.is_empty() => name.to_owned(),
        _ => process_name_in(trace, generation),
    }
}

/// The distinct names a process had (one per exec), in order: `sh`, then `cc1plus`.
pub fn process_names(trace: &ProcessTrace) -> Vec<String> {
    let mut generations: Vec<u32> = trace.thread_names().map(|(g, _, _)| g).collect();
    generations.dedup();
    let mut names: Vec<String> = Vec::new();
    for generation in generations {
        let name = process_name_in(trace, generation);
        if !names.contains(&name) {
            names.push(name);
        }
    }
    if names.is_empty() {
        names.push(process_name(trace));
    }
    names
}

/// Whether no symbol covers the frame: `[unknown]`, or the `lib+0xADDR` name the symbolizer
/// gives addresses in stripped code.
fn unsymbolized(location: &Location) -> bool {
    &*location.function == "[unknown]"
        || location
            .function
            .strip_prefix(&*location.lib)
            .is_some_and(|rest| rest.starts_with("+0x"))
}

/// A frame's name in collapsed stacks: the function without its parameter list (C++
/// signatures), `;` made `:`; in stripped code the `lib+0xADDR` name the tables give it (the
/// start of its function where unwind info says it), so that its frames stay apart; `[lib]`
/// when not even an address is known, as inferno-collapse-perf names perf's `[unknown] (lib)`.
pub fn frame_name(location: &Location) -> String {
    if &*location.function == "[unknown]" {
        return if &*location.lib == "[unknown]" {
            "[unknown]".to_owned()
        } else {
            format!("[{}]", location.lib)
        };
    }
    if unsymbolized(location) {
        return location.function.replace(';', ":");
    }
    without_parameters(&location.function.replace(';', ":"))
}

/// `name` cut at the `(` of its parameter list: the first one outside template brackets that
/// is not Go's `.(` of a method receiver nor C++'s `(anonymous namespace)`.
pub fn without_parameters(name: &str) -> String {
    let mut depth = 0i32;
    let mut after_dot = false;
    for (i, c) in name.char_indices() {
        match c {
            '<' | '{' | '[' => depth += 1,
            '>' | '}' | ']' | ')' => depth -= 1,
            '(' => {
                if depth == 0 && !after_dot && !name[i..].starts_with("(anonymous namespace)") {
                    return name[..i].to_owned();
                }
                depth += 1;
            }
            _ => {}
        }
        after_dot = c == '.';
    }
    name.to_owned()
}

/// One process's part in an export: its trace (faults, mappings, stacks' generations) and
/// its symbolized fault stacks.
pub type Source<'a> = (&'a ProcessTrace, &'a ResolvedStacks);

/// One process's part in an export from counted faults: its trace (mappings, stacks'
/// generations; its faults are not read), its symbolized fault stacks and its faults counted
/// per stack.
pub type CountedSource<'a> = (&'a ProcessTrace, &'a ResolvedStacks, &'a FaultCounts);

/// The faults of `sources` as collapsed stacks: `root;outer;...;inner count`, the process name
/// as root, sorted by stack.
pub fn folded<'a>(sources: impl IntoIterator<Item = Source<'a>>) -> Vec<(String, u64)> {
    let counted: Vec<(&ProcessTrace, &ResolvedStacks, FaultCounts)> = sources
        .into_iter()
        .map(|(trace, stacks)| (trace, stacks, FaultCounts::of(&trace.faults)))
        .collect();
    folded_counts(counted.iter().map(|(t, s, c)| (*t, *s, c)))
}

/// Writes [`folded_counts`] as collapsed-stack text, `root;outer;...;inner count` a line,
/// for flamegraph.pl, inferno and speedscope.
pub fn write_folded_counts<'a>(
    sources: impl IntoIterator<Item = CountedSource<'a>>,
    mut out: impl Write,
) -> std::io::Result<()> {
    folded_counts(sources)
        .iter()
        .try_for_each(|(stack, count)| writeln!(out, "{stack} {count}"))
}

/// [`folded`] of faults counted per stack ([`FaultCounts`], as streamed from faults files).
pub fn folded_counts<'a>(
    sources: impl IntoIterator<Item = CountedSource<'a>>,
) -> Vec<(String, u64)> {
    let mut counts: FxHashMap<String, u64> = FxHashMap::default();
    for (trace, stacks, fault_counts) in sources {
        let mut roots: FxHashMap<u32, String> = FxHashMap::default();
        for (stack_id, count) in fault_counts.per_stack() {
            let generation = trace.stack(stack_id).map_or(0, |s| s.generation);
            let mut line = roots
                .entry(generation)
                .or_insert_with(|| process_name_in(trace, generation))
                .clone();
            if stacks.truncated(stack_id) {
                line.push(';');
                line.push_str(TRUNCATED_FRAME);
            }
            for location in stacks.get(stack_id).iter().rev() {
                line.push(';');
                line.push_str(&frame_name(location));
            }
            *counts.entry(line).or_default() += count;
        }
    }
    let mut lines: Vec<(String, u64)> = counts.into_iter().collect();
    lines.sort_unstable();
    lines
}

/// The event name fltrace's faults carry in perf script text.
pub const SCRIPT_EVENT: &str = "page-faults";

/// Writes the faults of `sources` as `perf script` prints a software event with its
/// callchain: a header `comm pid/tid time: period event:` (with `addresses`, the faulting
/// address after it, as `perf script -F +addr` prints it, which inferno-collapse-perf does not
/// read), then one line per frame `\t<ip> symbol+0xoff (dso)`, inlined functions first as
/// `\t<ip> function+0xoff (inlined)`, and a blank line. Faults come in time order.
pub fn write_script<'a>(
    sources: impl IntoIterator<Item = Source<'a>>,
    addresses: bool,
    out: &mut impl Write,
) -> std::io::Result<()> {
    let sources: Vec<Source<'a>> = sources.into_iter().collect();
    // Each stack's frame lines are built once.
    let mut blocks: Vec<FxHashMap<u32, String>> = Vec::with_capacity(sources.len());
    // Each (process, generation, thread)'s name is built once.
    let mut names: FxHashMap<(u32, u32, u32), String> = FxHashMap::default();
    let mut order: Vec<(u64, u32, u32)> = Vec::new();
    for (i, (trace, stacks)) in sources.iter().enumerate() {
        let mut block = FxHashMap::default();
        for fault in &trace.faults {
            block
                .entry(fault.stack_id)
                .or_insert_with(|| script_frames(trace, stacks, fault.stack_id));
        }
        blocks.push(block);
        order.extend(
            (0..trace.faults.len() as u32).map(|f| (trace.faults[f as usize].time_ns, i as u32, f)),
        );
    }
    order.sort_unstable();
    for (_, source, index) in order {
        let (trace, _) = sources[source as usize];
        let fault: &Fault = &trace.faults[index as usize];
        let secs = fault.time_ns / 1_000_000_000;
        let micros = fault.time_ns % 1_000_000_000 / 1000;
        let generation = trace.stack(fault.stack_id).map_or(0, |s| s.generation);
        let name = names
            .entry((source, generation, fault.tid))
            .or_insert_with(|| thread_name(trace, generation, fault.tid));
        write!(
            out,
            "{name} {:>5}/{:<5} {secs:>5}.{micros:06}: {:>10} {SCRIPT_EVENT}:",
            trace.pid, fault.tid, 1
        )?;
        if addresses {
            write!(out, " {:>16x}", fault.addr)?;
        }
        out.write_all(b"\n")?;
        if let Some(block) = blocks[source as usize].get(&fault.stack_id) {
            out.write_all(block.as_bytes())?;
        }
        out.write_all(b"\n")?;
    }
    Ok(())
}

/// The frame lines of one stack in perf script's layout.
fn script_frames(trace: &ProcessTrace, stacks: &ResolvedStacks, stack_id: u32) -> String {
    let generation = trace.stack(stack_id).map_or(0, |s| s.generation);
    let mut text = String::new();
    for frame in stacks.frames(stack_id) {
        let Some((outer, inlined)) = frame.locations.split_last() else {
            continue;
        };
        let offset = |text: &mut String| {
            if let Some(off) = frame.symbol_offset {
                let _ = write!(text, "+{off:#x}");
            }
        };
        for location in inlined {
            let _ = write!(text, "\t{:>16x} {}", frame.address, location.function);
            offset(&mut text);
            text.push_str(" (inlined)\n");
        }
        // perf names an address no symbol covers `[unknown]`, with no offset.
        if unsymbolized(outer) {
            let _ = write!(text, "\t{:>16x} [unknown]", frame.address);
        } else {
            let _ = write!(text, "\t{:>16x} {}", frame.address, outer.function);
            offset(&mut text);
        }
        // The dso as perf names it: the mapped file's path, else what the symbolizer named.
        let lookup = frame
            .address
            .saturating_sub(u64::from(frame.symbol_offset.is_some()));
        let dso = match trace.mapping_at(generation, lookup.into()) {
            // JIT code named by its perf map: perf gives the map as the dso.
            Some(m) if !m.is_file() && outer.lib.as_ref() == format!("perf-{}.map", trace.pid) => {
                format!("/tmp/{}", outer.lib)
            }
            // JIT code named by its jitdump: the recording's copy of it.
            Some(m) if !m.is_file() && outer.lib.as_ref() == format!("jit-{}.dump", trace.pid) => {
                outer.lib.to_string()
            }
            Some(m) if !m.path.is_empty() => m.path.clone(),
            _ => outer.lib.to_string(),
        };
        let _ = writeln!(text, " ({dso})");
    }
    // The outermost line, the root side: collapsed, the stack lies under `[truncated]`.
    if stacks.truncated(stack_id) {
        let _ = writeln!(text, "\t{:>16x} {TRUNCATED_FRAME} ([unknown])", 0);
    }
    text
}

/// `function@file:line|...`, innermost first: a whole stack in one field of a CSV report.
pub fn stack_field(stack: &[Location]) -> String {
    let frames: Vec<String> = stack
        .iter()
        .map(|l| format!("{}@{}", l.function, l.file_line()))
        .collect();
    frames.join("|")
}

/// `N faults (P%)` of `truncated` faults out of `total`, as the record summary and `report`
/// give the faults with truncated stacks.
pub fn truncated_share(truncated: u64, total: u64) -> String {
    format!(
        "{truncated} fault{} ({:.1}%)",
        if truncated == 1 { "" } else { "s" },
        percent(truncated, total)
    )
}

/// `count` as a percentage of `total` (0 for none).
pub fn percent(count: u64, total: u64) -> f64 {
    if total == 0 {
        0.0
    } else {
        count as f64 * 100.0 / total as f64
    }
}

/// Why the original's report files could not be written.
#[derive(Debug, thiserror::Error)]
pub enum ReportFileError {
    /// A file could not be created.
    #[error(transparent)]
    Create(#[from] fltrace_trace::Error),
    /// Writing a file failed.
    #[error("writing {}", path.display())]
    Write {
        /// The file.
        path: std::path::PathBuf,
        /// What went wrong.
        #[source]
        source: std::io::Error,
    },
}

impl ReportFileError {
    /// Whether the file system was full (ENOSPC): the original's side files then give way
    /// and the report itself still prints.
    pub fn no_space_left(&self) -> bool {
        caused_by(self, &[libc::ENOSPC])
    }

    /// Whether the directory may not be written (read-only file system, no permission, an
    /// immutable directory): side files the command line did not ask for then give way.
    pub fn not_writable(&self) -> bool {
        caused_by(self, &[libc::EROFS, libc::EACCES, libc::EPERM])
    }
}

/// Whether `error` or one of its causes is an I/O error of one of `codes`.
fn caused_by(error: &(dyn std::error::Error + 'static), codes: &[i32]) -> bool {
    let mut cause = Some(error);
    let matches = |io: &std::io::Error| io.raw_os_error().is_some_and(|c| codes.contains(&c));
    while let Some(e) = cause {
        if let Some(io) = e.downcast_ref::<std::io::Error>() {
            // csv wraps its writer's errors in an io::Error of its own, with no source.
            let in_csv = io
                .get_ref()
                .and_then(|inner| inner.downcast_ref::<csv::Error>())
                .map(csv::Error::kind);
            if matches(io) || matches!(in_csv, Some(csv::ErrorKind::Io(inner)) if matches(inner)) {
                return true;
            }
        }
        cause = e.source();
    }
    false
}

/// Writes each process's original report file (`fltrace-data-report-PID.out` in `dir`): its
/// faults grouped by whole stack, as [`write_original_report`] writes them. Returns the files
/// written.
pub fn write_original_reports(
    loaded: &crate::Loaded,
    dir: &std::path::Path,
) -> Result<Vec<std::path::PathBuf>, ReportFileError> {
    let mut written = Vec::new();
    for ((trace, stacks), counts) in loaded.traces.iter().zip(&loaded.counts) {
        let groups = crate::group_fault_counts([(counts, stacks)], crate::GroupBy::Stack);
        let path = fltrace_trace::files::path(dir, "report", trace.pid, "out");
        let file = std::io::BufWriter::new(fltrace_trace::files::create(&path)?);
        write_original_report(&groups, file).map_err(|source| ReportFileError::Write {
            path: path.clone(),
            source,
        })?;
        written.push(path);
    }
    Ok(written)
}

/// Writes the original tool's `fltrace-data-report-<pid>.out` of `groups` (by
/// [`crate::GroupBy::Stack`]): one row per (stack, flags), per-frame lists separated by `|`,
/// inlined frames of one address joined by `;` innermost first.
pub fn write_original_report(groups: &[crate::Group], out: impl Write) -> std::io::Result<()> {
    let total: u64 = groups.iter().map(|g| g.count).sum();
    let mut csv = csv::Writer::from_writer(out);
    csv.write_record([
        "ips", "flags", "count", "percent", "op", "type", "lib", "code",
    ])?;
    for group in groups {
        let key = &group.key;
        let flags = key.flags.unwrap_or_default();
        let mut ips = String::new();
        for addr in key.addresses.iter().flat_map(|a| a.iter()) {
            let _ = write!(ips, "{addr:#x}|");
        }
        let (mut libs, mut code) = (String::new(), String::new());
        for location in key.stack.iter().flat_map(|s| s.iter()) {
            let _ = write!(libs, "{}|", location.lib);
            let _ = write!(code, "{}|", location.file_line());
        }
        csv.write_record([
            ips,
            flags.0.to_string(),
            group.count.to_string(),
            format!("{:.4}", percent(group.count, total)),
            flags.kind().name().to_owned(),
            flags.type_name().to_owned(),
            libs,
            code,
        ])?;
    }
    csv.flush()
}

#[cfg(test)]
mod tests {
    use super::*;
    use fltrace_trace::{CodeAddr, VirtAddr};

    use fltrace_trace::{FaultFlags, Stack};

    fn loc(function: &str, lib: &str) -> Location {
        Location {
            function: function.into(),
            file: "a.c".into(),
            line: 1,
            lib: lib.into(),
            system: false,
        }
    }

    /// Parameter lists go, templates, Go receivers and anonymous namespaces stay.
    #[test]
    fn names_as_stackcollapse() {
        let cases = [
            ("fill", "fill"),
            ("ns::f(int, char*)", "ns::f"),
            (
                "std::vector<int (*)(int)>::push_back(int)",
                "std::vector<int (*)(int)>::push_back",
            ),
            ("net/http.(*Client).Do", "net/http.(*Client).Do"),
            ("(anonymous namespace)::g(int)", "(anonymous namespace)::g"),
            ("a;b", "a:b"),
        ];
        for (name, want) in cases {
            assert_eq!(frame_name(&loc(name, "x")), want, "{name}");
        }
        assert_eq!(frame_name(&loc("[unknown]", "libc.so.6")), "[libc.so.6]");
        assert_eq!(frame_name(&loc("[unknown]", "[unknown]")), "[unknown]");
        assert_eq!(frame_name(&loc("prog+0x12c1", "prog")), "prog+0x12c1");
        assert_eq!(frame_name(&loc("[jit]", "[jit]")), "[jit]");
    }

    fn trace(faults: Vec<Fault>) -> ProcessTrace {
        ProcessTrace {
            pid: 7,
            faults,
            stacks: vec![Stack {
                end: fltrace_trace::StackEnd::Unknown,
                id: 0,
                generation: 0,
                frames: [0x10, 0x20].map(CodeAddr::new).to_vec(),
            }],
            mappings: Vec::new(),
            metadata: vec![(keys::COMMAND.to_owned(), "/bin/prog -x".to_owned())],
            allocs: Vec::new(),
            alloc_stacks: Vec::new(),
        }
    }

    fn fault(time_ns: u64, stack_id: u32) -> Fault {
        Fault {
            time_ns,
            pid: 7,
            tid: 8,
            ip: CodeAddr::new(0x10),
            addr: VirtAddr::new(0xdead000),
            flags: FaultFlags(FaultFlags::WRITE),
            stack_id,
        }
    }

    /// Folded lines count faults per stack, the process name as root, outermost first.
    #[test]
    fn folded_counts() {
        let mut stacks = ResolvedStacks::default();
        stacks.insert(
            0,
            vec![loc("inner", "prog"), loc("main", "prog")],
            [0x10, 0x20].map(CodeAddr::new).to_vec(),
        );
        stacks.insert(
            1,
            vec![loc("[unknown]", "libc.so.6")],
            [0x30].map(CodeAddr::new).to_vec(),
        );
        let t = trace(vec![fault(1, 0), fault(2, 0), fault(3, 1)]);
        assert_eq!(
            folded([(&t, &stacks)]),
            vec![
                ("prog;[libc.so.6]".to_owned(), 1),
                ("prog;main;inner".to_owned(), 2)
            ]
        );
    }

    /// `report --format folded`: one `stack count` line per folded stack, in their order.
    #[test]
    fn folded_text_is_a_line_per_stack() {
        let mut stacks = ResolvedStacks::default();
        stacks.insert(
            0,
            vec![loc("inner", "prog"), loc("main", "prog")],
            [0x10, 0x20].map(CodeAddr::new).to_vec(),
        );
        let t = trace(vec![fault(1, 0), fault(2, 0), fault(3, 0)]);
        let counts = FaultCounts::of(&t.faults);
        let mut out = Vec::new();
        write_folded_counts([(&t, &stacks, &counts)], &mut out).unwrap();
        assert_eq!(String::from_utf8(out).unwrap(), "prog;main;inner 3\n");
    }

    /// A full disk is found however deep it lies: directly, or inside csv's own error.
    #[test]
    fn full_disk_is_found_in_the_chain() {
        let full = || std::io::Error::from_raw_os_error(libc::ENOSPC);
        let write = |source| ReportFileError::Write {
            path: "r.out".into(),
            source,
        };
        assert!(write(full()).no_space_left());
        let in_csv = std::io::Error::other(csv::Error::from(full()));
        assert!(write(in_csv).no_space_left());
        let denied = std::io::Error::from_raw_os_error(libc::EACCES);
        assert!(!write(denied).no_space_left());
    }

    /// perf script's layout: header, tab-indented frames with inlined ones marked, a blank
    /// line after each fault.
    #[test]
    fn script_layout() {
        let mut stacks = ResolvedStacks::default();
        stacks.insert_frames(
            0,
            vec![
                loc("inlined_fn", "prog"),
                loc("outer", "prog"),
                loc("main", "prog"),
            ],
            [0x10, 0x20].map(CodeAddr::new).to_vec(),
            vec![(2, Some(4)), (1, Some(0x11))],
        );
        let t = trace(vec![fault(1_500_000_123, 0)]);
        let mut out = Vec::new();
        write_script([(&t, &stacks)], false, &mut out).unwrap();
        let text = String::from_utf8(out).unwrap();
        assert_eq!(
            text,
            "prog     7/8         1.500000:          1 page-faults:\n\
             \t              10 inlined_fn+0x4 (inlined)\n\
             \t              10 outer+0x4 (prog)\n\
             \t              20 main+0x11 (prog)\n\n"
        );
    }

    /// A truncated stack lies under one `[truncated]` frame right after the process's root,
    /// in folded lines and as the outermost line of perf script's frames.
    #[test]
    fn truncated_stacks_lie_under_one_frame() {
        let mut stacks = ResolvedStacks::default();
        stacks.insert(
            0,
            vec![loc("inner", "prog"), loc("middle", "prog")],
            [0x10, 0x20].map(CodeAddr::new).to_vec(),
        );
        stacks.mark_truncated(0);
        stacks.insert(
            1,
            vec![loc("leaf", "prog"), loc("main", "prog")],
            [0x30, 0x40].map(CodeAddr::new).to_vec(),
        );
        let t = trace(vec![fault(1_000_000_000, 0), fault(2_000_000_000, 1)]);
        assert_eq!(
            folded([(&t, &stacks)]),
            vec![
                ("prog;[truncated];middle;inner".to_owned(), 1),
                ("prog;main;leaf".to_owned(), 1)
            ]
        );
        let mut out = Vec::new();
        write_script([(&t, &stacks)], false, &mut out).unwrap();
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "prog     7/8         1.000000:          1 page-faults:\n\
             \t              10 inner (prog)\n\
             \t              20 middle (prog)\n\
             \t               0 [truncated] ([unknown])\n\n\
             prog     7/8         2.000000:          1 page-faults:\n\
             \t              30 leaf (prog)\n\
             \t              40 main (prog)\n\n"
        );
    }
}
