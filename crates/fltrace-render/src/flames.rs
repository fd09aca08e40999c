//! The stacks of the flamegraphs `fltrace visualize` draws: faults by their own call stacks,
//! or by the allocation stack of the block each landed in, their frames labelled.

use std::collections::{BTreeMap, BTreeSet};

use fltrace_analyze::{
    BlockKind, FaultCounts, FaultOrigin, Location, OriginCounts, ResolvedStacks, TRUNCATED_FRAME,
    mapping_label, process_name_in, without_parameters,
};
use fltrace_trace::{FaultFlags, FaultKind, ProcessTrace};

use crate::{Code, FlameStack, FrameNote, FrameNotes, Kind};

/// What a flamegraph frame says of its location; the library, the whole function name and
/// the lines go into its tooltip (`visualize --label`; each variant's doc is its help there).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
pub enum FrameLabel {
    /// `file:line` (the function where no line is known); the original drew `lib|file:line`.
    Line,
    /// The function, without its parameter list.
    #[default]
    Function,
    /// `function file:line`.
    Both,
}

/// The frame text of `location`: the function (without a C++ parameter list) or the line or
/// both. Code without symbols is `lib+0xADDR`, the library named once.
pub fn frame_label(location: &Location, label: FrameLabel) -> String {
    let function = without_parameters(&location.function);
    if !location.has_line() {
        return function;
    }
    let line = format!("{}:{}", location.short_file(), location.line);
    match label {
        FrameLabel::Line => line,
        FrameLabel::Function => function,
        FrameLabel::Both => format!("{function} {line}"),
    }
}

/// Labels the frames of one process's stacks and keeps what their tooltips and colours need.
struct Labeller<'a> {
    trace: &'a ProcessTrace,
    label: FrameLabel,
    /// The file names of the process's executables (one per exec).
    programs: BTreeSet<String>,
    notes: FrameNotes,
}

impl<'a> Labeller<'a> {
    fn new(trace: &'a ProcessTrace, label: FrameLabel) -> Self {
        // Each exec's executable is its lowest file mapping: the loader and libraries are
        // mapped high (0x7f...), the program at 0x400000 or, position-independent, 0x55...
        let mut lowest: std::collections::BTreeMap<u32, &fltrace_trace::Mapping> =
            Default::default();
        for mapping in trace.mappings.iter().filter(|m| m.path.starts_with('/')) {
            let entry = lowest.entry(mapping.generation).or_insert(mapping);
            if mapping.start < entry.start {
                *entry = mapping;
            }
        }
        let programs = lowest
            .values()
            .filter_map(|m| m.path.rsplit('/').next())
            .map(str::to_owned)
            .collect();
        Labeller {
            trace,
            label,
            programs,
            notes: FrameNotes::new(),
        }
    }

    fn frame(&mut self, location: &Location) -> String {
        let text = frame_label(location, self.label);
        // By the file alone: an allocator wrapper or inlined standard-library code keeps its
        // library's colour though reports pass over it.
        let code = if &*location.lib == "[unknown]" {
            Code::Other
        } else if self.programs.contains(&*location.lib) {
            Code::Program
        } else if fltrace_trace::libraries::is_system_library(&location.lib) {
            Code::System
        } else {
            Code::Library
        };
        let note = self.notes.entry(text.clone()).or_insert_with(|| FrameNote {
            library: location.lib.to_string(),
            code,
            function: location.function.to_string(),
            ..FrameNote::default()
        });
        if location.has_line() {
            note.places
                .entry(location.short_file().to_owned())
                .or_default()
                .insert(location.line);
        }
        text
    }

    /// The root frame of a stack of exec `generation`: the process's name then.
    fn root(&self, generation: u32) -> String {
        process_name_in(self.trace, generation)
    }
}

fn flame_kind(kind: FaultKind) -> Kind {
    match kind {
        FaultKind::Read => Kind::Read,
        FaultKind::Write => Kind::Write,
        FaultKind::WriteProtect => Kind::WriteProtect,
    }
}

/// A flamegraph's stacks, sorted by frames, and the notes of their frames.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Flames {
    /// The stacks, the process's name as root.
    pub stacks: Vec<FlameStack>,
    /// What tooltips and colours say of each frame label.
    pub notes: FrameNotes,
}

/// The faults of `trace` (as `counts` counts them) that `keep` keeps, by their call stacks
/// (the process's name, then the outermost frame first), sorted by frames.
pub fn fault_flames(
    trace: &ProcessTrace,
    stacks: &ResolvedStacks,
    counts: &FaultCounts,
    label: FrameLabel,
    keep: impl Fn(FaultFlags) -> bool,
) -> Flames {
    let mut labeller = Labeller::new(trace, label);
    // In the order of their keys: a label's note is that of the first frame given it.
    let mut by_stack: BTreeMap<(u32, FaultKind), u64> = BTreeMap::new();
    for (stack_id, flags, tally) in counts.iter() {
        if keep(flags) {
            *by_stack.entry((stack_id, flags.kind())).or_default() += tally.count;
        }
    }
    let mut flames: Vec<FlameStack> = by_stack
        .into_iter()
        .map(|((stack_id, kind), count)| (stack_id, kind, count))
        .map(|(stack_id, kind, count)| {
            let generation = trace.stack(stack_id).map_or(0, |s| s.generation);
            let mut frames = vec![labeller.root(generation)];
            if stacks.truncated(stack_id) {
                frames.push(TRUNCATED_FRAME.to_owned());
            }
            frames.extend(stacks.get(stack_id).iter().rev().map(|l| labeller.frame(l)));
            FlameStack {
                frames,
                kind: flame_kind(kind),
                count,
            }
        })
        .collect();
    flames.sort_by(|a, b| a.frames.cmp(&b.frames));
    Flames {
        stacks: flames,
        notes: labeller.notes,
    }
}

/// Faults drawn on the allocation stack of the block each landed in (the process's name, then
/// the outermost frame first), those outside every live block under one
/// `[not allocated] <memory>` frame; `origins` counts them by where they landed
/// ([`fltrace_analyze::AllocProcess::origins`]).
pub fn allocation_flames(
    trace: &ProcessTrace,
    alloc_stacks: &ResolvedStacks,
    origins: &OriginCounts,
    label: FrameLabel,
    keep: impl Fn(FaultFlags) -> bool,
) -> Flames {
    let mut labeller = Labeller::new(trace, label);
    let mut by_origin: BTreeMap<(FaultOrigin, FaultKind), u64> = BTreeMap::new();
    for &(origin, _, flags, count) in origins {
        if keep(flags) {
            *by_origin.entry((origin, flags.kind())).or_default() += count;
        }
    }
    let mut flames: Vec<FlameStack> = by_origin
        .into_iter()
        .map(|((origin, kind), count)| (origin, kind, count))
        .map(|(origin, kind, count)| {
            let frames = match origin {
                FaultOrigin::Block { stack_id, .. } => {
                    let generation = trace.alloc_stack(stack_id).map_or(0, |s| s.generation);
                    let mut frames = vec![labeller.root(generation)];
                    let stack = alloc_stacks.get(stack_id);
                    if stack.is_empty() {
                        frames.push("[unknown allocation stack]".to_owned());
                    }
                    frames.extend(stack.iter().rev().map(|l| labeller.frame(l)));
                    frames
                }
                FaultOrigin::Outside { mapping } => {
                    let mapping = mapping.and_then(|i| trace.mappings.get(i));
                    vec![
                        labeller.root(mapping.map_or(0, |m| m.generation)),
                        format!("[not allocated] {}", mapping_label(mapping)),
                    ]
                }
            };
            FlameStack {
                frames,
                kind: flame_kind(kind),
                count,
            }
        })
        .collect();
    flames.sort_by(|a, b| a.frames.cmp(&b.frames));
    Flames {
        stacks: flames,
        notes: labeller.notes,
    }
}

/// Bytes drawn on the stacks that allocated them (the process's name, then the outermost
/// frame first), their leaves the kind of memory: `bytes` gives each stack's kind and bytes
/// (memory alive at the heap's peak, or leaked).
pub fn memory_flames(
    trace: &ProcessTrace,
    alloc_stacks: &ResolvedStacks,
    bytes: impl IntoIterator<Item = (u32, BlockKind, u64)>,
    label: FrameLabel,
) -> Flames {
    let mut labeller = Labeller::new(trace, label);
    let mut flames: Vec<FlameStack> = bytes
        .into_iter()
        .filter(|&(_, _, count)| count > 0)
        .map(|(stack_id, kind, count)| {
            let generation = trace.alloc_stack(stack_id).map_or(0, |s| s.generation);
            let mut frames = vec![labeller.root(generation)];
            let stack = alloc_stacks.get(stack_id);
            if stack.is_empty() {
                frames.push("[unknown allocation stack]".to_owned());
            }
            frames.extend(stack.iter().rev().map(|l| labeller.frame(l)));
            FlameStack {
                frames,
                kind: match kind {
                    BlockKind::Heap => Kind::Heap,
                    BlockKind::Mapping => Kind::Mapping,
                },
                count,
            }
        })
        .collect();
    flames.sort_by(|a, b| a.frames.cmp(&b.frames));
    Flames {
        stacks: flames,
        notes: labeller.notes,
    }
}

/// The faults of every process of a recording in one flamegraph, each under its name (`g++`,
/// `cc1plus`, `as`: processes of one name share their root), as perf's flamegraphs of a
/// multi-process command are rooted by comm.
pub fn recording_flames(
    sources: &[(&ProcessTrace, &ResolvedStacks, &FaultCounts)],
    label: FrameLabel,
) -> Flames {
    let mut all = Flames::default();
    for (trace, stacks, counts) in sources {
        let flames = fault_flames(trace, stacks, counts, label, |_| true);
        all.stacks.extend(flames.stacks);
        for (text, note) in flames.notes {
            match all.notes.get_mut(&text) {
                Some(known) => {
                    for (file, lines) in note.places {
                        known.places.entry(file).or_default().extend(lines);
                    }
                }
                None => {
                    all.notes.insert(text, note);
                }
            }
        }
    }
    all.stacks.sort_by(|a, b| a.frames.cmp(&b.frames));
    all
}

/// One flamegraph of a process that `fltrace visualize` draws: the kind in its file name, what
/// it shows and its stacks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProcessFlamegraph {
    /// The file kind: `fltrace-data-<kind>-<pid>.svg`.
    pub kind: &'static str,
    /// What the graph shows, the start of its title.
    pub title: &'static str,
    /// The stacks, sorted by frames, and their frames' notes.
    pub flames: Flames,
}

/// The file kind of the flamegraph of faults by allocation stack. Not `flamegraph-alloc`: that
/// name is the original's first-touch flamegraph.
pub const BY_ALLOCATION: &str = "flamegraph-allocstack";

/// A process's flamegraphs, as the original drew them: all faults (`flamegraph`) and
/// first-touch faults (`flamegraph-alloc`), the latter by the allocation stack of the block
/// each hit when `by_allocation`; with allocations recorded (`allocs`: their stacks and the
/// faults counted by where they landed), all faults by allocation stack too.
/// `by_allocation` without `allocs` draws by the faults' stacks. `counts` are the faults.
pub fn process_flamegraphs(
    trace: &ProcessTrace,
    stacks: &ResolvedStacks,
    counts: &FaultCounts,
    allocs: Option<(&ResolvedStacks, &OriginCounts)>,
    label: FrameLabel,
    by_allocation: bool,
) -> Vec<ProcessFlamegraph> {
    let first_touch = |flags: FaultFlags| flags.has(FaultFlags::ZERO);
    let first_touches = match allocs {
        Some((alloc_stacks, origins)) if by_allocation => {
            allocation_flames(trace, alloc_stacks, origins, label, first_touch)
        }
        _ => fault_flames(trace, stacks, counts, label, first_touch),
    };
    let mut graphs = vec![
        ProcessFlamegraph {
            kind: "flamegraph",
            title: "Page faults",
            flames: fault_flames(trace, stacks, counts, label, |_| true),
        },
        ProcessFlamegraph {
            kind: "flamegraph-alloc",
            title: "First-touch (allocation) faults",
            flames: first_touches,
        },
    ];
    if let Some((alloc_stacks, origins)) = allocs {
        graphs.push(ProcessFlamegraph {
            kind: BY_ALLOCATION,
            title: "Page faults by allocation stack",
            flames: allocation_flames(trace, alloc_stacks, origins, label, |_| true),
        });
    }
    graphs
}

/// The characters of the command a flamegraph's title shows.
const COMMAND_IN_TITLE: usize = 60;

/// `command` cut to [`COMMAND_IN_TITLE`] characters, `…` where it was cut (a centred title
/// line longer than the picture overflows both edges).
pub fn title_command(command: &str) -> String {
    match command.char_indices().nth(COMMAND_IN_TITLE) {
        Some((cut, _)) => format!("{}…", &command[..cut]),
        None => command.to_owned(),
    }
}

/// The file kind of the flamegraph of every process of a recording.
pub const ALL_PROCESSES: &str = "flamegraph-processes";

/// A flamegraph to write: where, under which title, what.
pub struct FlamegraphFile {
    /// `fltrace-data-<kind>-<pid>.svg` in the directory asked for.
    pub path: std::path::PathBuf,
    /// The title over the graph.
    pub title: String,
    /// What it draws.
    pub flames: Flames,
}

impl FlamegraphFile {
    /// Writes the SVG (a new file, or one of the user's own).
    pub fn write(&self) -> Result<(), fltrace_trace::Error> {
        fltrace_trace::files::write_with(&self.path, |out| {
            crate::flamegraph(&self.flames.stacks, &self.flames.notes, &self.title, out)
        })
    }
}

/// Process `trace`'s graphs ([`process_flamegraphs`]) as files in `dir`, each titled with
/// the process's names and `command` (the recording's): `Err` with the path of one that has
/// no faults to draw.
pub fn process_flamegraph_files(
    (trace, stacks, counts): (&ProcessTrace, &ResolvedStacks, &FaultCounts),
    allocs: Option<(&ResolvedStacks, &OriginCounts)>,
    label: FrameLabel,
    by_allocation: bool,
    command: &str,
    dir: &std::path::Path,
) -> Vec<Result<FlamegraphFile, std::path::PathBuf>> {
    let graphs = process_flamegraphs(trace, stacks, counts, allocs, label, by_allocation);
    graphs
        .into_iter()
        .map(|graph| {
            let path = fltrace_trace::files::path(dir, graph.kind, trace.pid, "svg");
            if graph.flames.stacks.is_empty() {
                return Err(path);
            }
            // Each process under its own name (`cc1plus` under `g++`), the command after it.
            let title = format!(
                "{} of {} (pid {}) in `{}`",
                graph.title,
                fltrace_analyze::process_names(trace).join(" then "),
                trace.pid,
                title_command(command)
            );
            Ok(FlamegraphFile {
                path,
                title,
                flames: graph.flames,
            })
        })
        .collect()
}

/// With several processes (`g++` and its `cc1plus`, `as`, `ld`), one graph of them all,
/// rooted by their names, named after the first process; `None` with one.
pub fn recording_flamegraph_file(
    loaded: &fltrace_analyze::Loaded,
    label: FrameLabel,
    dir: &std::path::Path,
) -> Option<FlamegraphFile> {
    let [(first, _), _, ..] = &loaded.traces[..] else {
        return None;
    };
    let sources: Vec<_> = loaded
        .traces
        .iter()
        .zip(&loaded.counts)
        .map(|((t, s), c)| (t, s, c))
        .collect();
    Some(FlamegraphFile {
        path: fltrace_trace::files::path(dir, ALL_PROCESSES, first.pid, "svg"),
        title: format!(
            "Page faults of {} processes in `{}`",
            sources.len(),
            title_command(loaded.command())
        ),
        flames: recording_flames(&sources, label),
    })
}

/// `--by-allocation` asked of a process recorded without allocations.
#[derive(Debug, thiserror::Error)]
#[error("--by-allocation needs allocation data: record with `fltrace record --allocs`")]
pub struct NoAllocations;

/// Every flamegraph file of `loaded` in `dir`, given to `each` as it is made: each process's
/// ([`process_flamegraph_files`], `Err` with the path of one with no faults to draw), then
/// the recording's ([`recording_flamegraph_file`]). With `by_allocation`, reaching a process
/// recorded without allocations ends it with [`NoAllocations`].
pub fn flamegraph_files<E: From<NoAllocations>>(
    loaded: &fltrace_analyze::Loaded,
    label: FrameLabel,
    by_allocation: bool,
    dir: &std::path::Path,
    mut each: impl FnMut(Result<FlamegraphFile, std::path::PathBuf>) -> Result<(), E>,
) -> Result<(), E> {
    let (processes, _) = fltrace_analyze::alloc_processes(loaded, 0);
    for (((trace, stacks), alloc_stacks), counts) in loaded
        .traces
        .iter()
        .zip(&loaded.alloc_stacks)
        .zip(&loaded.counts)
    {
        let allocs = processes
            .iter()
            .find(|p| p.trace.pid == trace.pid)
            .map(|p| (alloc_stacks, &p.origins));
        if by_allocation && allocs.is_none() {
            return Err(NoAllocations.into());
        }
        let files = process_flamegraph_files(
            (trace, stacks, counts),
            allocs,
            label,
            by_allocation,
            loaded.command(),
            dir,
        );
        for file in files {
            each(file)?;
        }
    }
    if let Some(file) = recording_flamegraph_file(loaded, label, dir) {
        each(Ok(file))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    /// Titles show the command up to 60 characters, `…` where it was cut.
    #[test]
    fn long_commands_are_cut_in_titles() {
        assert_eq!(title_command("faults nested 100"), "faults nested 100");
        let long = "é".repeat(70);
        assert_eq!(title_command(&long), format!("{}…", "é".repeat(60)));
        assert_eq!(title_command(&"x".repeat(60)), "x".repeat(60));
    }

    use fltrace_trace::{AllocCall, AllocEvent, Fault, Mapping};

    use super::*;
    use fltrace_trace::{CodeAddr, VirtAddr};

    fn loc(function: &str, file: &str, line: u32) -> Location {
        Location {
            function: function.into(),
            file: file.into(),
            line,
            lib: "a.out".into(),
            system: false,
        }
    }

    fn fault(addr: u64, flags: u16, stack_id: u32) -> Fault {
        Fault {
            time_ns: 20,
            pid: 1,
            tid: 1,
            ip: CodeAddr::new(0),
            addr: VirtAddr::new(addr),
            flags: FaultFlags(flags),
            stack_id,
        }
    }

    /// Stack 0 (`main` calling `fill`) writes three fresh pages, stack 1 reads one; a block of
    /// 8 KiB from `alloc` holds two of the writes, the others land in the heap outside it.
    fn trace() -> ProcessTrace {
        ProcessTrace {
            pid: 1,
            faults: vec![
                fault(0x1000, FaultFlags::WRITE | FaultFlags::ZERO, 0),
                fault(0x2000, FaultFlags::WRITE | FaultFlags::ZERO, 0),
                fault(0x5000, FaultFlags::WRITE | FaultFlags::ZERO, 0),
                fault(0x6000, 0, 1),
            ],
            stacks: Vec::new(),
            mappings: vec![
                Mapping {
                    start: VirtAddr::new(0),
                    end: VirtAddr::new(0x10000),
                    path: "[heap]".into(),
                    ..Mapping::default()
                },
                // The executable, below the library: the program's own code.
                Mapping {
                    start: VirtAddr::new(0x40_0000),
                    end: VirtAddr::new(0x40_1000),
                    path: "/usr/bin/a.out".into(),
                    ..Mapping::default()
                },
                Mapping {
                    start: VirtAddr::new(0x7f00_0000_0000),
                    end: VirtAddr::new(0x7f00_0000_1000),
                    path: "/usr/lib/libz.so.1".into(),
                    ..Mapping::default()
                },
            ],
            metadata: Vec::new(),
            allocs: vec![AllocEvent {
                time_ns: 10,
                tid: 1,
                call: AllocCall::Malloc,
                addr: VirtAddr::new(0x1000),
                size: 8192,
                old_addr: VirtAddr::new(0),
                detail: 0,
                stack_id: 0,
            }],
            alloc_stacks: Vec::new(),
        }
    }

    /// The faults of [`trace`], counted.
    fn counts() -> FaultCounts {
        FaultCounts::of(&trace().faults)
    }

    /// The faults of [`trace`] by where they landed, from its events held whole.
    fn origins(alloc_stacks: &ResolvedStacks) -> OriginCounts {
        let trace = trace();
        let stacks = ResolvedStacks::default();
        fltrace_analyze::AllocProcess::new(&trace, &stacks, alloc_stacks, 0).origins
    }

    #[test]
    fn labels_say_line_function_or_both() {
        let with_line = loc("fill", "/src/a.c", 12);
        let without = loc("fill", "", 0);
        assert_eq!(frame_label(&with_line, FrameLabel::Line), "a.c:12");
        assert_eq!(frame_label(&with_line, FrameLabel::Function), "fill");
        assert_eq!(frame_label(&with_line, FrameLabel::Both), "fill a.c:12");
        assert_eq!(frame_label(&without, FrameLabel::Line), "fill");
        // A C++ signature loses its parameters; stripped code names its library once.
        let cxx = loc(
            "ggc_internal_cleared_alloc(unsigned long, void (*)(void*))",
            "",
            0,
        );
        assert_eq!(
            frame_label(&cxx, FrameLabel::Function),
            "ggc_internal_cleared_alloc"
        );
        let stripped = Location {
            lib: "libsqlite3.so.0.8.6".into(),
            ..loc("libsqlite3.so.0.8.6+0xa74f0", "", 0)
        };
        assert_eq!(
            frame_label(&stripped, FrameLabel::Line),
            "libsqlite3.so.0.8.6+0xa74f0"
        );
    }

    #[test]
    fn faults_by_stack_outermost_first() {
        let mut stacks = ResolvedStacks::default();
        stacks.insert(
            0,
            vec![loc("fill", "a.c", 5), loc("main", "a.c", 9)],
            [0x10, 0x90].map(CodeAddr::new).to_vec(),
        );
        stacks.insert(
            1,
            vec![
                Location {
                    lib: "libz.so.1".into(),
                    ..loc("inflate", "inflate.c", 70)
                },
                loc("main", "a.c", 11),
            ],
            [0x70, 0x98].map(CodeAddr::new).to_vec(),
        );
        let flames = fault_flames(&trace(), &stacks, &counts(), FrameLabel::Function, |_| true);
        let got: Vec<(Vec<String>, Kind, u64)> = flames
            .stacks
            .iter()
            .map(|f| (f.frames.clone(), f.kind, f.count))
            .collect();
        let frames = |names: &[&str]| names.iter().map(|n| n.to_string()).collect::<Vec<_>>();
        // The process's name is the root ([pid] without a recorded command).
        assert_eq!(
            got,
            vec![
                (frames(&["[1]", "main", "fill"]), Kind::Write, 3),
                (frames(&["[1]", "main", "inflate"]), Kind::Read, 1),
            ]
        );
        // `main` stood at two lines; the executable is the program, libz a library.
        let main = &flames.notes["main"];
        assert_eq!(main.library, "a.out");
        assert_eq!(main.code, Code::Program);
        assert_eq!(
            main.places["a.c"].iter().copied().collect::<Vec<_>>(),
            [9, 11]
        );
        assert_eq!(flames.notes["inflate"].code, Code::Library);
        assert_eq!(flames.notes["inflate"].library, "libz.so.1");
        let first_touches = fault_flames(&trace(), &stacks, &counts(), FrameLabel::Function, |f| {
            f.has(FaultFlags::ZERO)
        });
        assert_eq!(first_touches.stacks.len(), 1);
        assert_eq!(first_touches.stacks[0].count, 3);
        // Notes are of the frames drawn only.
        assert!(!first_touches.notes.contains_key("inflate"));
    }

    /// A truncated stack stands on one `[truncated]` frame, never as a root of its own.
    #[test]
    fn truncated_stacks_stand_on_one_frame() {
        let mut stacks = ResolvedStacks::default();
        stacks.insert(
            0,
            vec![loc("fill", "a.c", 5), loc("level2", "a.c", 9)],
            [0x10, 0x90].map(CodeAddr::new).to_vec(),
        );
        stacks.mark_truncated(0);
        stacks.insert(
            1,
            vec![loc("scan", "a.c", 7)],
            [0x70].map(CodeAddr::new).to_vec(),
        );
        stacks.mark_truncated(1);
        let roots: Vec<(Vec<String>, u64)> =
            fault_flames(&trace(), &stacks, &counts(), FrameLabel::Function, |_| true)
                .stacks
                .into_iter()
                .map(|f| (f.frames, f.count))
                .collect();
        let frames = |names: &[&str]| names.iter().map(|n| n.to_string()).collect::<Vec<_>>();
        assert_eq!(
            roots,
            vec![
                (frames(&["[1]", "[truncated]", "level2", "fill"]), 3),
                (frames(&["[1]", "[truncated]", "scan"]), 1),
            ]
        );
    }

    #[test]
    fn faults_by_allocation_stack() {
        let mut alloc_stacks = ResolvedStacks::default();
        alloc_stacks.insert(
            0,
            vec![loc("alloc", "a.c", 3)],
            [0x30].map(CodeAddr::new).to_vec(),
        );
        let origins = origins(&alloc_stacks);
        let flames = allocation_flames(&trace(), &alloc_stacks, &origins, FrameLabel::Line, |_| {
            true
        })
        .stacks;
        // The write and the read outside the block are one frame each, of their own kind.
        let outside: Vec<(Kind, u64)> = flames
            .iter()
            .filter(|f| f.frames == ["[1]", "[not allocated] [heap]"])
            .map(|f| (f.kind, f.count))
            .collect();
        assert_eq!(outside.len(), 2, "{outside:?}");
        assert!(outside.contains(&(Kind::Write, 1)) && outside.contains(&(Kind::Read, 1)));
        let in_block: Vec<(Kind, u64)> = flames
            .iter()
            .filter(|f| f.frames == ["[1]", "a.c:3"])
            .map(|f| (f.kind, f.count))
            .collect();
        assert_eq!(in_block, vec![(Kind::Write, 2)]);
        assert_eq!(flames.len(), 3);
    }

    /// Two processes of one name share their root; their notes merge their lines.
    #[test]
    fn a_recording_rooted_by_process_name() {
        let named = |pid: u32| ProcessTrace {
            pid,
            metadata: vec![(
                fltrace_trace::keys::COMMAND.to_owned(),
                "faults nested".to_owned(),
            )],
            ..trace()
        };
        let (first, second) = (named(1), named(2));
        let mut stacks = ResolvedStacks::default();
        stacks.insert(0, vec![loc("fill", "a.c", 5)], vec![CodeAddr::new(0x10)]);
        stacks.insert(1, vec![loc("fill", "a.c", 6)], vec![CodeAddr::new(0x70)]);
        let counts = counts();
        let flames = recording_flames(
            &[(&first, &stacks, &counts), (&second, &stacks, &counts)],
            FrameLabel::Function,
        );
        let under_root: u64 = flames
            .stacks
            .iter()
            .filter(|s| s.frames[0] == "faults")
            .map(|s| s.count)
            .sum();
        assert_eq!(under_root, 8, "{:?}", flames.stacks);
        assert_eq!(
            flames.notes["fill"].places["a.c"]
                .iter()
                .copied()
                .collect::<Vec<_>>(),
            [5, 6]
        );
    }

    /// Two graphs without allocations; with them a third, and `by_allocation` draws the
    /// first touches by allocation stack (the block's two and the one outside it).
    #[test]
    fn a_process_gets_the_original_graphs_and_one_by_allocation() {
        let mut stacks = ResolvedStacks::default();
        stacks.insert(0, vec![loc("fill", "a.c", 5)], vec![CodeAddr::new(0x10)]);
        stacks.insert(1, vec![loc("scan", "a.c", 7)], vec![CodeAddr::new(0x70)]);
        let mut alloc_stacks = ResolvedStacks::default();
        alloc_stacks.insert(0, vec![loc("alloc", "a.c", 3)], vec![CodeAddr::new(0x30)]);
        let kinds =
            |graphs: &[ProcessFlamegraph]| graphs.iter().map(|g| g.kind).collect::<Vec<_>>();
        let total = |g: &ProcessFlamegraph| g.flames.stacks.iter().map(|s| s.count).sum::<u64>();

        let counts = counts();
        let plain = process_flamegraphs(&trace(), &stacks, &counts, None, FrameLabel::Line, false);
        assert_eq!(kinds(&plain), ["flamegraph", "flamegraph-alloc"]);
        assert_eq!((total(&plain[0]), total(&plain[1])), (4, 3));
        // Asked for by allocation without allocations: by the faults' own stacks.
        assert_eq!(
            process_flamegraphs(&trace(), &stacks, &counts, None, FrameLabel::Line, true),
            plain
        );

        let origins = origins(&alloc_stacks);
        let graphs = process_flamegraphs(
            &trace(),
            &stacks,
            &counts,
            Some((&alloc_stacks, &origins)),
            FrameLabel::Line,
            true,
        );
        assert_eq!(
            kinds(&graphs),
            ["flamegraph", "flamegraph-alloc", BY_ALLOCATION]
        );
        let first_touch = |f: FaultFlags| f.has(FaultFlags::ZERO);
        assert_eq!(
            graphs[1].flames,
            allocation_flames(
                &trace(),
                &alloc_stacks,
                &origins,
                FrameLabel::Line,
                first_touch
            )
        );
        assert_eq!(total(&graphs[2]), 4);
    }
}
