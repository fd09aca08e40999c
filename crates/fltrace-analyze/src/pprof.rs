//! Faults as a pprof profile (profile.proto, gzipped), for `go tool pprof` and the tools that
//! read its format: one sample per stack, kind and thread with its fault count (labelled
//! `pid`, `tid`, `comm` and `kind`), locations with
//! their (inlined) lines, functions, and the mapped files with their build IDs.

use std::io::Write;

use flate2::Compression;
use flate2::write::GzEncoder;
use prost::Message;
use rustc_hash::FxHashMap;

use fltrace_trace::{CodeAddr, FaultKind, ProcessTrace};

use crate::export::{CountedSource, Source, process_name, thread_name};
use crate::{FaultCounts, ResolvedStacks, TRUNCATED_FRAME};

/// The messages of profile.proto that fltrace writes (field numbers as in
/// github.com/google/pprof/proto/profile.proto), derived by hand: no build-time codegen.
mod proto {
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Profile {
        #[prost(message, repeated, tag = "1")]
        pub sample_type: Vec<ValueType>,
        #[prost(message, repeated, tag = "2")]
        pub sample: Vec<Sample>,
        #[prost(message, repeated, tag = "3")]
        pub mapping: Vec<Mapping>,
        #[prost(message, repeated, tag = "4")]
        pub location: Vec<Location>,
        #[prost(message, repeated, tag = "5")]
        pub function: Vec<Function>,
        #[prost(string, repeated, tag = "6")]
        pub string_table: Vec<String>,
        #[prost(int64, tag = "9")]
        pub time_nanos: i64,
        #[prost(int64, tag = "10")]
        pub duration_nanos: i64,
        #[prost(message, optional, tag = "11")]
        pub period_type: Option<ValueType>,
        #[prost(int64, tag = "12")]
        pub period: i64,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct ValueType {
        #[prost(int64, tag = "1")]
        pub r#type: i64,
        #[prost(int64, tag = "2")]
        pub unit: i64,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Sample {
        #[prost(uint64, repeated, tag = "1")]
        pub location_id: Vec<u64>,
        #[prost(int64, repeated, tag = "2")]
        pub value: Vec<i64>,
        #[prost(message, repeated, tag = "3")]
        pub label: Vec<Label>,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Label {
        #[prost(int64, tag = "1")]
        pub key: i64,
        #[prost(int64, tag = "2")]
        pub str: i64,
        #[prost(int64, tag = "3")]
        pub num: i64,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Mapping {
        #[prost(uint64, tag = "1")]
        pub id: u64,
        #[prost(uint64, tag = "2")]
        pub memory_start: u64,
        #[prost(uint64, tag = "3")]
        pub memory_limit: u64,
        #[prost(uint64, tag = "4")]
        pub file_offset: u64,
        #[prost(int64, tag = "5")]
        pub filename: i64,
        #[prost(int64, tag = "6")]
        pub build_id: i64,
        #[prost(bool, tag = "7")]
        pub has_functions: bool,
        #[prost(bool, tag = "8")]
        pub has_filenames: bool,
        #[prost(bool, tag = "9")]
        pub has_line_numbers: bool,
        #[prost(bool, tag = "10")]
        pub has_inline_frames: bool,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Location {
        #[prost(uint64, tag = "1")]
        pub id: u64,
        #[prost(uint64, tag = "2")]
        pub mapping_id: u64,
        #[prost(uint64, tag = "3")]
        pub address: u64,
        #[prost(message, repeated, tag = "4")]
        pub line: Vec<Line>,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Line {
        #[prost(uint64, tag = "1")]
        pub function_id: u64,
        #[prost(int64, tag = "2")]
        pub line: i64,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Function {
        #[prost(uint64, tag = "1")]
        pub id: u64,
        #[prost(int64, tag = "2")]
        pub name: i64,
        #[prost(int64, tag = "3")]
        pub system_name: i64,
        #[prost(int64, tag = "4")]
        pub filename: i64,
    }
}

/// Interned strings: index 0 is the empty string, as the format requires.
struct Strings {
    table: Vec<String>,
    index: FxHashMap<String, i64>,
}

impl Strings {
    fn new() -> Strings {
        let mut strings = Strings {
            table: Vec::new(),
            index: FxHashMap::default(),
        };
        strings.id("");
        strings
    }

    fn id(&mut self, s: &str) -> i64 {
        if let Some(&id) = self.index.get(s) {
            return id;
        }
        let id = self.table.len() as i64;
        self.table.push(s.to_owned());
        self.index.insert(s.to_owned(), id);
        id
    }
}

/// Builds the profile of the faults of `sources`.
fn profile<'a>(sources: impl IntoIterator<Item = CountedSource<'a>>) -> proto::Profile {
    let mut strings = Strings::new();
    let mut profile = proto::Profile {
        sample_type: vec![proto::ValueType {
            r#type: strings.id("faults"),
            unit: strings.id("count"),
        }],
        ..Default::default()
    };
    profile.period_type = profile.sample_type.first().cloned();
    profile.period = 1;
    let pid_key = strings.id("pid");
    let tid_key = strings.id("tid");
    let comm_key = strings.id("comm");
    let kind_key = strings.id("kind");
    let mut functions: FxHashMap<(String, String), u64> = FxHashMap::default();
    let (mut first_ns, mut last_ns) = (u64::MAX, 0);
    let mut main_mapping = None;
    let mut truncated_location = None;
    for (trace, stacks, fault_counts) in sources {
        let program = format!("/{}", process_name(trace));
        // Per process: addresses and mappings mean something only within it.
        let mut mappings: FxHashMap<usize, u64> = FxHashMap::default();
        let mut locations: FxHashMap<(u32, CodeAddr), u64> = FxHashMap::default();
        if let Some((first, last)) = fault_counts.time_range() {
            first_ns = first_ns.min(first);
            last_ns = last_ns.max(last);
        }
        // One sample per stack, kind of fault and thread, labelled with the process, the
        // thread and its name (perf's `comm`).
        let mut per_kind: Vec<(u32, FaultKind, u32, u64)> = Vec::new();
        for (stack_id, flags, tid, count) in fault_counts.per_thread() {
            let kind = flags.kind();
            // By stack id: a stack's kinds and threads are the last entries.
            let same = per_kind
                .iter_mut()
                .rev()
                .take_while(|(s, _, _, _)| *s == stack_id)
                .find(|(_, k, t, _)| *k == kind && *t == tid);
            match same {
                Some((_, _, _, total)) => *total += count,
                None => per_kind.push((stack_id, kind, tid, count)),
            }
        }
        for (stack_id, kind, tid, count) in per_kind {
            let generation = trace.stack(stack_id).map_or(0, |s| s.generation);
            let mut location_ids = Vec::new();
            for (i, frame) in stacks.frames(stack_id).iter().enumerate() {
                let next_id = profile.location.len() as u64 + 1;
                let id = *locations
                    .entry((generation, frame.address))
                    .or_insert(next_id);
                location_ids.push(id);
                if id != next_id {
                    continue;
                }
                // Return addresses (all frames but the first) lie after their call.
                let lookup = frame.address.saturating_sub(u64::from(i > 0));
                let mapping_id = mapping_id(
                    trace,
                    generation,
                    lookup,
                    &mut mappings,
                    &mut profile,
                    &mut strings,
                );
                if main_mapping.is_none()
                    && mapping_id > 0
                    && trace
                        .mapping_at(generation, lookup.into())
                        .is_some_and(|m| m.path.ends_with(&program))
                {
                    main_mapping = Some(mapping_id as usize - 1);
                }
                let line = frame
                    .locations
                    .iter()
                    .map(|l| {
                        let next = profile.function.len() as u64 + 1;
                        let key = (l.function.to_string(), l.file.to_string());
                        let function_id = *functions.entry(key).or_insert(next);
                        if function_id == next {
                            let name = strings.id(&l.function);
                            profile.function.push(proto::Function {
                                id: function_id,
                                name,
                                system_name: name,
                                filename: strings.id(&l.file),
                            });
                        }
                        proto::Line {
                            function_id,
                            line: i64::from(l.line),
                        }
                    })
                    .collect();
                profile.location.push(proto::Location {
                    id,
                    mapping_id,
                    address: frame.address.get(),
                    line,
                });
            }
            if stacks.truncated(stack_id) {
                // The outermost location: every truncated stack lies under one
                // `[truncated]` frame instead of standing as a root of its own.
                let id = *truncated_location.get_or_insert_with(|| {
                    let id = profile.location.len() as u64 + 1;
                    let function_id = profile.function.len() as u64 + 1;
                    let name = strings.id(TRUNCATED_FRAME);
                    profile.function.push(proto::Function {
                        id: function_id,
                        name,
                        system_name: name,
                        filename: 0,
                    });
                    profile.location.push(proto::Location {
                        id,
                        mapping_id: 0,
                        address: 0,
                        line: vec![proto::Line {
                            function_id,
                            line: 0,
                        }],
                    });
                    id
                });
                location_ids.push(id);
            }
            profile.sample.push(proto::Sample {
                location_id: location_ids,
                value: vec![count as i64],
                label: vec![
                    proto::Label {
                        key: pid_key,
                        str: 0,
                        num: i64::from(trace.pid),
                    },
                    proto::Label {
                        key: tid_key,
                        str: 0,
                        num: i64::from(tid),
                    },
                    proto::Label {
                        key: comm_key,
                        str: strings.id(&thread_name(trace, generation, tid)),
                        num: 0,
                    },
                    proto::Label {
                        key: kind_key,
                        str: strings.id(kind.name()),
                        num: 0,
                    },
                ],
            });
        }
    }
    // pprof takes the first mapping for the main binary: the first process's program.
    if let Some(main) = main_mapping {
        profile.mapping[..=main].rotate_right(1);
    }
    if first_ns <= last_ns {
        profile.time_nanos = first_ns as i64;
        profile.duration_nanos = (last_ns - first_ns) as i64;
    }
    profile.string_table = strings.table;
    profile
}

/// The id of the mapping of `trace` covering `addr`, adding it to the profile on first use;
/// 0 (none) outside file mappings.
fn mapping_id(
    trace: &ProcessTrace,
    generation: u32,
    addr: CodeAddr,
    ids: &mut FxHashMap<usize, u64>,
    profile: &mut proto::Profile,
    strings: &mut Strings,
) -> u64 {
    let Some(index) = trace
        .mappings
        .iter()
        .rposition(|m| m.generation == generation && m.contains(addr.into()))
    else {
        return 0;
    };
    let mapping = &trace.mappings[index];
    if !mapping.is_file() {
        return 0;
    }
    *ids.entry(index).or_insert_with(|| {
        let id = profile.mapping.len() as u64 + 1;
        profile.mapping.push(proto::Mapping {
            id,
            memory_start: mapping.start.get(),
            memory_limit: mapping.end.get(),
            file_offset: mapping.pgoff.get(),
            filename: strings.id(&mapping.path),
            build_id: strings.id(&mapping.build_id),
            has_functions: true,
            has_filenames: true,
            has_line_numbers: true,
            has_inline_frames: true,
        });
        id
    })
}

/// Writes the faults of `sources` as a gzipped pprof profile.
pub fn write_pprof<'a>(
    sources: impl IntoIterator<Item = Source<'a>>,
    out: impl Write,
) -> std::io::Result<()> {
    let counted: Vec<(&ProcessTrace, &ResolvedStacks, FaultCounts)> = sources
        .into_iter()
        .map(|(trace, stacks)| (trace, stacks, FaultCounts::of(&trace.faults)))
        .collect();
    write_pprof_counts(counted.iter().map(|(t, s, c)| (*t, *s, c)), out)
}

/// Writes faults counted per stack ([`FaultCounts`], as streamed from the faults files) as
/// [`write_pprof`] writes the faults themselves.
pub fn write_pprof_counts<'a>(
    sources: impl IntoIterator<Item = CountedSource<'a>>,
    out: impl Write,
) -> std::io::Result<()> {
    let bytes = profile(sources).encode_to_vec();
    let mut gz = GzEncoder::new(out, Compression::default());
    gz.write_all(&bytes)?;
    gz.finish()?.flush()
}

#[cfg(test)]
mod tests {
    use super::*;
    use fltrace_trace::VirtAddr;

    use std::io::Read;

    use fltrace_trace::{Fault, FaultFlags, Mapping, Stack, keys};

    use crate::Location;

    /// Samples, locations with their inlined lines, functions and mappings with build IDs
    /// survive encoding and gzip.
    #[test]
    fn round_trip() {
        let loc = |function: &str, line| Location {
            function: function.into(),
            file: "/src/a.c".into(),
            line,
            lib: "prog".into(),
            system: false,
        };
        let mut stacks = ResolvedStacks::default();
        stacks.insert_frames(
            0,
            vec![loc("inl", 3), loc("fill", 10), loc("main", 20)],
            [0x1010, 0x1020].map(CodeAddr::new).to_vec(),
            vec![(2, Some(0x10)), (1, Some(0x20))],
        );
        let fault = |stack_id| Fault {
            time_ns: 100,
            pid: 5,
            tid: 5,
            ip: CodeAddr::new(0x1010),
            addr: VirtAddr::new(0),
            flags: FaultFlags(FaultFlags::WRITE),
            stack_id,
        };
        let trace = ProcessTrace {
            pid: 5,
            faults: vec![fault(0), fault(0), fault(0)],
            stacks: vec![Stack {
                end: fltrace_trace::StackEnd::Unknown,
                id: 0,
                generation: 0,
                frames: [0x1010, 0x1020].map(CodeAddr::new).to_vec(),
            }],
            mappings: vec![Mapping {
                start: VirtAddr::new(0x1000),
                end: VirtAddr::new(0x2000),
                path: "/bin/prog".into(),
                build_id: "abcd".into(),
                prot: 5,
                ..Mapping::default()
            }],
            metadata: vec![(keys::COMMAND.to_owned(), "prog".to_owned())],
            allocs: Vec::new(),
            alloc_stacks: Vec::new(),
        };
        let mut gz = Vec::new();
        write_pprof([(&trace, &stacks)], &mut gz).unwrap();
        let mut bytes = Vec::new();
        flate2::read::GzDecoder::new(&gz[..])
            .read_to_end(&mut bytes)
            .unwrap();
        let p = proto::Profile::decode(&bytes[..]).unwrap();
        let s = |i: i64| p.string_table[i as usize].as_str();
        assert_eq!(s(p.sample_type[0].r#type), "faults");
        assert_eq!(p.sample.len(), 1);
        assert_eq!(p.sample[0].value, vec![3]);
        assert_eq!(p.sample[0].location_id, vec![1, 2]);
        let lines: Vec<(&str, i64)> = p.location[0]
            .line
            .iter()
            .map(|l| (s(p.function[l.function_id as usize - 1].name), l.line))
            .collect();
        assert_eq!(lines, vec![("inl", 3), ("fill", 10)]);
        assert_eq!(p.mapping.len(), 1);
        assert_eq!(s(p.mapping[0].build_id), "abcd");
        assert_eq!(s(p.mapping[0].filename), "/bin/prog");
        assert_eq!(p.location[1].mapping_id, 1);
        let labels: Vec<(&str, &str, i64)> = p.sample[0]
            .label
            .iter()
            .map(|l| (s(l.key), s(l.str), l.num))
            .collect();
        assert_eq!(
            labels,
            vec![
                ("pid", "", 5),
                ("tid", "", 5),
                ("comm", "prog", 0),
                ("kind", "write", 0)
            ]
        );

        // A truncated stack, its threads named `worker` and `helper` in generation 0:
        // `[truncated]` is its outermost location, and each thread's faults are a sample of
        // their own, labelled with its id and recorded name.
        stacks.mark_truncated(0);
        let mut named = trace.clone();
        named.faults.push(Fault { tid: 6, ..fault(0) });
        named.metadata.push((
            keys::THREADS.to_owned(),
            fltrace_trace::format_thread_names([(0, 5, "worker"), (0, 6, "helper")]),
        ));
        let mut gz = Vec::new();
        write_pprof([(&named, &stacks)], &mut gz).unwrap();
        let mut bytes = Vec::new();
        flate2::read::GzDecoder::new(&gz[..])
            .read_to_end(&mut bytes)
            .unwrap();
        let p = proto::Profile::decode(&bytes[..]).unwrap();
        let s = |i: i64| p.string_table[i as usize].as_str();
        assert_eq!(p.sample[0].location_id, vec![1, 2, 3]);
        let outermost = &p.location[2];
        assert_eq!(
            (
                outermost.mapping_id,
                outermost.address,
                outermost.line.len()
            ),
            (0, 0, 1)
        );
        assert_eq!(
            s(p.function[outermost.line[0].function_id as usize - 1].name),
            "[truncated]"
        );
        let threads: Vec<(i64, &str, Vec<i64>)> = p
            .sample
            .iter()
            .map(|sample| {
                (
                    sample.label[1].num,
                    s(sample.label[2].str),
                    sample.value.clone(),
                )
            })
            .collect();
        assert_eq!(
            threads,
            vec![(5, "worker", vec![3]), (6, "helper", vec![1])]
        );
    }
}
