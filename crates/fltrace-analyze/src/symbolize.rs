//! From frame addresses to functions, files and lines.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use blazesym::symbolize::source::{Elf, Source};
use blazesym::symbolize::{Input, Symbolized};
use rustc_hash::FxHashMap;

use fltrace_trace::{ProcessTrace, Stack};

/// A source location of one frame (after inline expansion).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Location {
    /// Function name, demangled; `[unknown]` when no symbol covers the address.
    pub function: Arc<str>,
    /// Source file as recorded in the debug info, empty when unknown.
    pub file: Arc<str>,
    /// Line number, 0 when unknown.
    pub line: u32,
    /// File name of the library or executable, `[unknown]` outside any file mapping.
    pub lib: Arc<str>,
    /// Whether the frame is in code the program uses rather than writes: a system library,
    /// or a standard-library function inlined into the program (Rust's `/rustc/...` sources,
    /// C++ headers under `/usr/include`).
    pub system: bool,
}

impl Location {
    /// Whether the debug info gave a file and line.
    pub fn has_line(&self) -> bool {
        self.line != 0 && !self.file.is_empty()
    }

    /// `file:line`, or `??:0` as addr2line prints unknowns.
    pub fn file_line(&self) -> String {
        if self.has_line() {
            format!("{}:{}", self.file, self.line)
        } else {
            "??:0".to_owned()
        }
    }

    /// The file name without its directories.
    pub fn short_file(&self) -> &str {
        self.file.rsplit('/').next().unwrap_or(&self.file)
    }

    fn unknown(lib: Arc<str>, system: bool) -> Location {
        Location {
            function: "[unknown]".into(),
            file: "".into(),
            line: 0,
            lib,
            system,
        }
    }
}

/// One stack's locations (innermost first, inlined frames expanded), raw addresses, and what
/// each address resolved to.
#[derive(Debug, Clone)]
struct ResolvedStack {
    locations: Arc<[Location]>,
    addresses: Arc<[u64]>,
    /// Per address: how many of `locations` it expanded to, and its offset in its symbol.
    frames: Arc<[(u32, Option<u64>)]>,
}

/// One raw frame of a stack: its address and the locations it expanded to.
#[derive(Debug, Clone, Copy)]
pub struct ResolvedFrame<'a> {
    /// The address as unwound (a return address for every frame but the first).
    pub address: u64,
    /// Its locations, innermost (inlined) first, the function containing it last; empty when
    /// the symbolizer gave nothing.
    pub locations: &'a [Location],
    /// The offset of `address` from the start of its (non-inlined) symbol, when a symbol
    /// covers it: perf's `symbol+0xoff`.
    pub symbol_offset: Option<u64>,
}

/// The symbolized stacks of one process: for each stack id, its locations innermost first.
#[derive(Debug, Default, Clone)]
pub struct ResolvedStacks {
    stacks: FxHashMap<u32, ResolvedStack>,
}

impl ResolvedStacks {
    /// The locations of stack `id`, innermost first (empty if unknown).
    pub fn get(&self, id: u32) -> &[Location] {
        self.stacks.get(&id).map_or(&[], |s| &s.locations)
    }

    /// The raw frame addresses of stack `id`, innermost first.
    pub fn addresses(&self, id: u32) -> Option<Arc<[u64]>> {
        self.stacks.get(&id).map(|s| s.addresses.clone())
    }

    /// The raw frames of stack `id`, innermost first, each with the locations it expanded to.
    pub fn frames(&self, id: u32) -> Vec<ResolvedFrame<'_>> {
        let Some(stack) = self.stacks.get(&id) else {
            return Vec::new();
        };
        let mut frames = Vec::with_capacity(stack.addresses.len());
        let mut next = 0;
        for (&address, &(depth, symbol_offset)) in stack.addresses.iter().zip(stack.frames.iter()) {
            let end = (next + depth as usize).min(stack.locations.len());
            frames.push(ResolvedFrame {
                address,
                locations: &stack.locations[next..end],
                symbol_offset,
            });
            next = end;
        }
        frames
    }

    /// Adds or replaces a stack (for building tables by hand, as in tests): with as many
    /// locations as addresses, each address is one location, else the first holds them all.
    pub fn insert(&mut self, id: u32, locations: Vec<Location>, addresses: Vec<u64>) {
        let frames: Vec<(u32, Option<u64>)> = if locations.len() == addresses.len() {
            vec![(1, None); addresses.len()]
        } else {
            (0..addresses.len())
                .map(|i| (if i == 0 { locations.len() as u32 } else { 0 }, None))
                .collect()
        };
        self.insert_frames(id, locations, addresses, frames);
    }

    pub(crate) fn insert_frames(
        &mut self,
        id: u32,
        locations: Vec<Location>,
        addresses: Vec<u64>,
        frames: Vec<(u32, Option<u64>)>,
    ) {
        let stack = ResolvedStack {
            locations: locations.into(),
            addresses: addresses.into(),
            frames: frames.into(),
        };
        self.stacks.insert(id, stack);
    }
}

/// The locations of one looked-up address and its offset in its symbol.
type Resolved = (Arc<[Location]>, Option<u64>);

/// A caching symbolizer over blazesym.
pub struct Symbolizer {
    inner: blazesym::symbolize::Symbolizer,
    /// (file, file offset) to locations, innermost first, and the offset in the symbol.
    cache: HashMap<(PathBuf, u64), Resolved>,
}

impl Default for Symbolizer {
    fn default() -> Self {
        Self::new()
    }
}

impl Symbolizer {
    /// A symbolizer that reads line tables and inlined functions.
    pub fn new() -> Symbolizer {
        Symbolizer {
            inner: blazesym::symbolize::Symbolizer::builder()
                .enable_code_info(true)
                .enable_inlined_fns(true)
                .build(),
            cache: HashMap::new(),
        }
    }

    /// Symbolizes every fault stack of `trace`.
    pub fn resolve_stacks(&mut self, trace: &ProcessTrace) -> ResolvedStacks {
        self.resolve(trace, &trace.stacks, 1)
    }

    /// Symbolizes every allocation stack of `trace`. All their frames are return addresses
    /// (the first one into the caller of the allocator), so each is looked up one byte back.
    pub fn resolve_alloc_stacks(&mut self, trace: &ProcessTrace) -> ResolvedStacks {
        self.resolve(trace, &trace.alloc_stacks, 0)
    }

    /// Symbolizes `stacks`, whose frames from index `returns_from` on are return addresses.
    fn resolve(
        &mut self,
        trace: &ProcessTrace,
        stacks: &[Stack],
        returns_from: usize,
    ) -> ResolvedStacks {
        // Group the distinct (file, offset) look-ups by file: blazesym works best in batches.
        let mut wanted: HashMap<PathBuf, Vec<u64>> = HashMap::new();
        // Frames carry whether they were looked up one byte back, to give perf's offsets.
        let mut frames_of: Vec<(u32, Vec<LookedUp>, Vec<u64>)> = Vec::with_capacity(stacks.len());
        for stack in stacks {
            let frames: Vec<LookedUp> = stack
                .frames
                .iter()
                .enumerate()
                .map(|(i, &addr)| {
                    // Return addresses point after the call: look up the call itself.
                    let lookup = if i < returns_from {
                        addr
                    } else {
                        addr.saturating_sub(1)
                    };
                    let frame = match trace.mapping_at(stack.generation, lookup) {
                        Some(m) if m.is_file() => {
                            let path = PathBuf::from(&m.path);
                            let offset = m.file_offset(lookup);
                            if !self.cache.contains_key(&(path.clone(), offset)) {
                                wanted.entry(path.clone()).or_default().push(offset);
                            }
                            Frame::File(path, offset)
                        }
                        Some(m) => Frame::Unknown(lib_name(&m.path), is_system_path(&m.path)),
                        None => Frame::Unknown("[unknown]".into(), false),
                    };
                    (frame, addr - lookup)
                })
                .collect();
            frames_of.push((stack.id, frames, stack.frames.clone()));
        }
        for (path, mut offsets) in wanted {
            offsets.sort_unstable();
            offsets.dedup();
            self.symbolize_file(&path, &offsets);
        }
        let mut resolved = ResolvedStacks::default();
        for (id, frames, addresses) in frames_of {
            let mut locations = Vec::with_capacity(frames.len());
            let mut depths = Vec::with_capacity(frames.len());
            for (frame, back) in frames {
                let before = locations.len();
                let mut symbol_offset = None;
                match frame {
                    Frame::File(path, offset) => {
                        if let Some((locs, offset)) = self.cache.get(&(path, offset)) {
                            locations.extend(locs.iter().cloned());
                            symbol_offset = offset.map(|o| o + back);
                        }
                    }
                    Frame::Unknown(lib, system) => locations.push(Location::unknown(lib, system)),
                }
                depths.push(((locations.len() - before) as u32, symbol_offset));
            }
            resolved.insert_frames(id, locations, addresses, depths);
        }
        resolved
    }

    fn symbolize_file(&mut self, path: &Path, offsets: &[u64]) {
        let lib = lib_name(&path.to_string_lossy());
        let system_lib = is_system_path(&path.to_string_lossy());
        let source = Source::Elf(Elf::new(path));
        let results = self
            .inner
            .symbolize(&source, Input::FileOffset(offsets))
            .unwrap_or_default();
        for (i, &offset) in offsets.iter().enumerate() {
            let (locations, symbol_offset): (Vec<Location>, Option<u64>) = match results.get(i) {
                Some(Symbolized::Sym(sym)) => {
                    let mut locations = Vec::with_capacity(1 + sym.inlined.len());
                    // blazesym lists inlined calls outermost first, each with the location
                    // inside it; the symbol's own location is the call site of the first.
                    for inlined in sym.inlined.iter().rev() {
                        locations.push(location(
                            &inlined.name,
                            inlined.code_info.as_ref(),
                            &lib,
                            system_lib,
                        ));
                    }
                    locations.push(location(
                        &sym.name,
                        sym.code_info.as_deref(),
                        &lib,
                        system_lib,
                    ));
                    (locations, Some(sym.offset as u64))
                }
                _ => (vec![Location::unknown(lib.clone(), system_lib)], None),
            };
            self.cache
                .insert((path.to_owned(), offset), (locations.into(), symbol_offset));
        }
    }
}

enum Frame {
    File(PathBuf, u64),
    Unknown(Arc<str>, bool),
}

/// A frame and how far back from its address it was looked up (1 for return addresses).
type LookedUp = (Frame, u64);

fn location(
    name: &str,
    code: Option<&blazesym::symbolize::CodeInfo<'_>>,
    lib: &Arc<str>,
    system_lib: bool,
) -> Location {
    let (file, line) = match code {
        Some(code) => (
            code.to_path().to_string_lossy().into_owned(),
            code.line.unwrap_or(0),
        ),
        None => (String::new(), 0),
    };
    let system = system_lib || file.starts_with("/rustc/") || file.starts_with("/usr/include/");
    Location {
        function: name.into(),
        file: file.into(),
        line,
        lib: lib.clone(),
        system,
    }
}

/// Libraries installed with the system, as opposed to the program under study.
fn is_system_path(path: &str) -> bool {
    [
        "/lib/",
        "/lib64/",
        "/usr/lib/",
        "/usr/lib64/",
        "/usr/libexec/",
    ]
    .iter()
    .any(|prefix| path.starts_with(prefix))
        || path.starts_with('[')
}

fn lib_name(path: &str) -> Arc<str> {
    if path.starts_with('/') {
        path.rsplit('/').next().unwrap_or(path).into()
    } else {
        path.into()
    }
}
