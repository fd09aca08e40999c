//! From frame addresses to functions, files and lines.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use blazesym::symbolize::source::{Elf, Source};
use blazesym::symbolize::{Input, Symbolized};
use rustc_hash::FxHashMap;

use fltrace_trace::libraries::is_system_library;
use fltrace_trace::{CodeAddr, FileOffset, JitDump, PerfMap, ProcessTrace, Stack, StackEnd};

use crate::debuginfo::{DebugConfig, DebugResolver};
use crate::fde::FunctionRanges;
use crate::names;

/// A source location of one frame (after inline expansion).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Location {
    /// Function name, demangled (C++, Rust); from the debug info, else from the symbol
    /// tables; `binary+0xADDR` when no symbol covers it (the address in the file's own
    /// terms, as `nm` and `objdump` give them): the start of the function whose unwind info
    /// (FDE) covers it, else the frame's own address; `[unknown]` outside any file.
    pub function: Arc<str>,
    /// Source file as recorded in the debug info, empty when unknown.
    pub file: Arc<str>,
    /// Line number, 0 when unknown.
    pub line: u32,
    /// File name of the library or executable, `[unknown]` outside any file mapping.
    pub lib: Arc<str>,
    /// Whether the frame is in code the program uses rather than writes: a system library
    /// ([`fltrace_trace::libraries::is_system_library`]: the C runtime, libm, the C++ and
    /// compiler runtimes, fltrace's preloaded library), or standard-library code in the
    /// program (Rust's `/rustc/...` sources, C++ headers under `/usr/include`; without
    /// sources, functions of Rust's `core`/`alloc`/`std` and C++'s `std`).
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
pub(crate) struct ResolvedStack {
    pub(crate) locations: Arc<[Location]>,
    pub(crate) addresses: Arc<[CodeAddr]>,
    /// Per address: how many of `locations` it expanded to, and its offset in its symbol.
    pub(crate) frames: Arc<[(u32, Option<u64>)]>,
    /// `locations` with each frame named after an FDE's start named after its own address
    /// instead, for whole-stack outputs; `None` when no frame was.
    pub(crate) exact: Option<Arc<[Location]>>,
}

/// One raw frame of a stack: its address and the locations it expanded to.
#[derive(Debug, Clone, Copy)]
pub struct ResolvedFrame<'a> {
    /// The address as unwound (a return address for every frame but the first).
    pub address: CodeAddr,
    /// Its locations, innermost (inlined) first, the function containing it last; empty when
    /// the symbolizer gave nothing.
    pub locations: &'a [Location],
    /// The offset of `address` from the start of its (non-inlined) symbol, when a symbol
    /// covers it: perf's `symbol+0xoff`.
    pub symbol_offset: Option<u64>,
}

/// Which frame of a stack is its call site.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub enum CallSite {
    /// The innermost frame of the program's own code: see [`crate::call_site`].
    #[default]
    Program,
    /// The innermost frame, wherever it is (`--call-site leaf`).
    Leaf,
}

/// `--call-site program|leaf`, the possible values named without help, as they always were.
#[cfg(feature = "clap")]
impl clap::ValueEnum for CallSite {
    fn value_variants<'a>() -> &'a [CallSite] {
        &[CallSite::Program, CallSite::Leaf]
    }

    fn to_possible_value(&self) -> Option<clap::builder::PossibleValue> {
        Some(clap::builder::PossibleValue::new(match self {
            CallSite::Program => "program",
            CallSite::Leaf => "leaf",
        }))
    }
}

impl CallSite {
    /// The call site of `stack` (innermost first) by this rule.
    pub fn of(self, stack: &[Location]) -> Option<&Location> {
        match self {
            CallSite::Program => crate::call_site(stack),
            CallSite::Leaf => stack.first(),
        }
    }
}

/// The frame every truncated stack is drawn under, at the root side (after the process's own
/// root where an output has one), so that stacks lacking their outer frames gather in one tower
/// instead of each standing as a root of its own.
pub const TRUNCATED_FRAME: &str = "[truncated]";

/// The symbolized stacks of one process: for each stack id, its locations innermost first.
#[derive(Debug, Default, Clone)]
pub struct ResolvedStacks {
    stacks: FxHashMap<u32, ResolvedStack>,
    /// The ids of the stacks whose outer frames are missing ([`StackEnd::Truncated`]).
    truncated: rustc_hash::FxHashSet<u32>,
    /// Whether a stack id absent from the table is truncated too: a fault table kept when
    /// its stacks table was lost (a full disk) has faults with no frames at all.
    absent_truncated: bool,
    /// How grouping picks each stack's call site.
    pub call_site: CallSite,
}

impl ResolvedStacks {
    /// The locations of stack `id`, innermost first (empty if unknown).
    pub fn get(&self, id: u32) -> &[Location] {
        self.stacks.get(&id).map_or(&[], |s| &s.locations)
    }

    /// The locations of stack `id` as [`ResolvedStacks::get`], but a frame of stripped code
    /// named after its own address rather than its function's start: for outputs of whole
    /// stacks, where each frame's exact address tells stacks apart.
    pub fn exact(&self, id: u32) -> &[Location] {
        self.stacks
            .get(&id)
            .map_or(&[], |s| s.exact.as_deref().unwrap_or(&s.locations))
    }

    /// Whether stack `id` lacks its outer frames: exports draw it under [`TRUNCATED_FRAME`].
    pub fn truncated(&self, id: u32) -> bool {
        self.truncated.contains(&id) || (self.absent_truncated && !self.stacks.contains_key(&id))
    }

    /// Marks stack `id` as lacking its outer frames (for building tables by hand).
    pub fn mark_truncated(&mut self, id: u32) {
        self.truncated.insert(id);
    }

    /// The raw frame addresses of stack `id`, innermost first.
    pub fn addresses(&self, id: u32) -> Option<Arc<[CodeAddr]>> {
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
    pub fn insert(&mut self, id: u32, locations: Vec<Location>, addresses: Vec<CodeAddr>) {
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
        addresses: Vec<CodeAddr>,
        frames: Vec<(u32, Option<u64>)>,
    ) {
        let stack = ResolvedStack {
            locations: locations.into(),
            addresses: addresses.into(),
            frames: frames.into(),
            exact: None,
        };
        self.stacks.insert(id, stack);
    }

    /// Changes every stack with `change`.
    pub(crate) fn rewrite(&mut self, mut change: impl FnMut(u32, &mut ResolvedStack)) {
        for (&id, stack) in &mut self.stacks {
            change(id, stack);
        }
    }
}

/// The locations of one looked-up address, its offset in its symbol, and for a frame named
/// after its function's start, the location named after its own address.
type Resolved = (Arc<[Location]>, Option<u64>, Option<Location>);

/// A caching symbolizer over blazesym.
pub struct Symbolizer {
    inner: blazesym::symbolize::Symbolizer,
    /// Which files hold the symbols of each mapped file.
    debug_files: DebugResolver,
    /// (file, build ID, file offset) to locations, innermost first, and the offset in the
    /// symbol.
    cache: HashMap<(PathBuf, String, FileOffset), Resolved>,
    /// Each file's loadable segments and unwind-info function ranges, to name addresses no
    /// symbol covers.
    layouts: HashMap<PathBuf, Layout>,
    /// Each process's perf map (the names its JIT gave its code), read once.
    perf_maps: HashMap<u32, Option<Arc<PerfMap>>>,
    /// For machines short of memory: symbol tables only (no lines, no inlined calls), and
    /// each file forgotten once its addresses are named.
    lean: bool,
    /// Each process's jitdump, read once.
    jitdumps: HashMap<u32, Option<Arc<JitDump>>>,
}

impl Default for Symbolizer {
    fn default() -> Self {
        Self::new()
    }
}

impl Symbolizer {
    /// A symbolizer that reads line tables and inlined functions, finding debug files as the
    /// environment says ([`DebugConfig::from_env`]).
    pub fn new() -> Symbolizer {
        Self::with_debug_config(DebugConfig::from_env())
    }

    /// A symbolizer finding debug files where `config` says.
    pub fn with_debug_config(config: DebugConfig) -> Symbolizer {
        Symbolizer {
            inner: blazesym::symbolize::Symbolizer::builder()
                .enable_code_info(true)
                .enable_inlined_fns(true)
                // blazesym would run a C++ demangler on plain C names (`f` became `float`):
                // names are demangled here by their scheme.
                .enable_demangling(false)
                // The resolver already chose the debug file; blazesym follows a binary's own
                // debug link only through the same directories.
                .set_debug_dirs(Some(&config.debug_dirs))
                .build(),
            debug_files: DebugResolver::new(config),
            cache: HashMap::new(),
            layouts: HashMap::new(),
            perf_maps: HashMap::new(),
            lean: false,
            jitdumps: HashMap::new(),
        }
    }

    /// A symbolizer whose memory is that of one file's symbol table: functions are named from
    /// symbol tables only (no lines, no inlined calls: parsing a library's debug information
    /// held tens of MB), and each file is forgotten once its addresses are named (slower when
    /// many stacks share a library, as the files are read again for each batch).
    pub fn lean() -> Symbolizer {
        Symbolizer {
            lean: true,
            ..Self::new()
        }
    }

    /// The perf map copied into the recording for process `pid`, if its JIT wrote one.
    fn perf_map(&mut self, pid: u32) -> Option<Arc<PerfMap>> {
        let dir = self.debug_files.config().recording_dir.clone();
        let mut warning = None;
        let map = self
            .perf_maps
            .entry(pid)
            .or_insert_with(|| {
                let path = fltrace_trace::files::perf_map(dir.as_deref()?, pid);
                if !path.exists() {
                    return None;
                }
                PerfMap::read(&path)
                    .map_err(|e| warning = Some(fltrace_trace::error_chain(&e)))
                    .ok()
                    .map(Arc::new)
            })
            .clone();
        if let Some(warning) = warning {
            self.debug_files
                .warn(format!("{warning}: JIT frames stay unnamed"));
        }
        map
    }

    /// Drops what was read of every file (maps, symbol tables, unwind info), keeping the
    /// names already found.
    fn forget_files(&mut self) {
        self.inner = Self::with_debug_config(self.debug_files.config().clone()).inner;
        self.layouts.clear();
    }

    /// The jitdump copied into the recording for process `pid`, if its JIT wrote one. One
    /// that does not read, or stops early, is said in one line.
    fn jitdump(&mut self, pid: u32) -> Option<Arc<JitDump>> {
        let dir = self.debug_files.config().recording_dir.clone();
        let mut warning = None;
        let dump = self
            .jitdumps
            .entry(pid)
            .or_insert_with(|| {
                let path = fltrace_trace::files::jitdump(dir.as_deref()?, pid);
                if !path.exists() {
                    return None;
                }
                match JitDump::read(&path) {
                    Err(e) => {
                        warning = Some(format!(
                            "{}: its JIT frames stay unnamed",
                            fltrace_trace::error_chain(&e)
                        ));
                        None
                    }
                    Ok(dump) => {
                        if let Some(stopped) = &dump.stopped {
                            let named = dump.len();
                            warning = Some(format!(
                                "{}: {stopped}; {named} function{} named before it, none after",
                                path.display(),
                                if named == 1 { "" } else { "s" }
                            ));
                        }
                        Some(Arc::new(dump))
                    }
                }
            })
            .clone();
        if let Some(warning) = warning {
            self.debug_files.warn(warning);
        }
        dump
    }

    /// One line for each mapped file whose build differed from the recording's or that was
    /// gone, since the last call.
    pub fn take_warnings(&mut self) -> Vec<String> {
        self.debug_files.take_warnings()
    }

    /// The resolver of debug files (to archive what it found).
    pub fn debug_files(&mut self) -> &mut DebugResolver {
        &mut self.debug_files
    }

    /// Symbolizes every fault stack of `trace`.
    pub fn resolve_stacks(&mut self, trace: &ProcessTrace) -> ResolvedStacks {
        let mut resolved = self.resolve(trace, &trace.stacks, 1);
        // Every fault row was written after its stack: a stack missing from the table was
        // lost with it, and the fault counts as truncated rather than as `[unknown]` apart.
        resolved.absent_truncated = true;
        resolved
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
        let perf_map = self.perf_map(trace.pid);
        let jit_lib: Arc<str> = format!("perf-{}.map", trace.pid).into();
        let jitdump = self.jitdump(trace.pid);
        let jitdump_lib: Arc<str> = format!("jit-{}.dump", trace.pid).into();
        // Group the distinct (file, offset) look-ups by file: blazesym works best in batches.
        let mut wanted: HashMap<(PathBuf, String), Vec<FileOffset>> = HashMap::new();
        let mut resolved = ResolvedStacks::default();
        // Frames carry whether they were looked up one byte back, to give perf's offsets.
        let mut frames_of: Vec<(u32, Vec<LookedUp>, Vec<CodeAddr>)> =
            Vec::with_capacity(stacks.len());
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
                    let frame = match trace.mapping_at(stack.generation, lookup.into()) {
                        Some(m) if m.is_file() => {
                            let key = (PathBuf::from(&m.path), m.build_id.clone());
                            let offset = lookup.file_offset(m);
                            if !self
                                .cache
                                .contains_key(&(key.0.clone(), key.1.clone(), offset))
                            {
                                wanted.entry(key.clone()).or_default().push(offset);
                            }
                            Frame::File(key.0, key.1, offset)
                        }
                        // Code a JIT wrote into anonymous memory, named by its jitdump (with
                        // its source line), else by its perf map.
                        _ if let Some(code) =
                            jitdump.as_deref().and_then(|d| d.lookup(lookup.get())) =>
                        {
                            let line = code.line_at(lookup.get());
                            Frame::Jit(
                                Location {
                                    function: code.name.clone(),
                                    file: line.map_or_else(|| "".into(), |l| l.file.clone()),
                                    line: line.map_or(0, |l| l.line),
                                    ..Location::unknown(jitdump_lib.clone(), false)
                                },
                                lookup.get() - code.start,
                            )
                        }
                        _ if let Some((start, name)) =
                            perf_map.as_deref().and_then(|p| p.lookup(lookup.get())) =>
                        {
                            Frame::Jit(
                                Location {
                                    function: name.into(),
                                    ..Location::unknown(jit_lib.clone(), false)
                                },
                                lookup.get() - start,
                            )
                        }
                        // The kernel's vDSO: code without a file, but no JIT code.
                        Some(m) if m.path == VDSO_FRAME && m.is_exec() => {
                            Frame::Unnamed(Location {
                                function: VDSO_FRAME.into(),
                                ..Location::unknown(VDSO_FRAME.into(), true)
                            })
                        }
                        // JIT code no map names.
                        Some(m) if !m.is_file() && m.is_exec() => Frame::Unnamed(Location {
                            function: JIT_FRAME.into(),
                            ..Location::unknown(JIT_FRAME.into(), false)
                        }),
                        Some(m) => Frame::Unknown(lib_name(&m.path), is_system_library(&m.path)),
                        None => Frame::Unknown("[unknown]".into(), false),
                    };
                    (frame, addr - lookup)
                })
                .collect();
            frames_of.push((stack.id, frames, stack.frames.clone()));
            if stack.end == StackEnd::Truncated {
                resolved.mark_truncated(stack.id);
            }
        }
        for ((path, build_id), mut offsets) in wanted {
            offsets.sort_unstable();
            offsets.dedup();
            self.symbolize_file(&path, &build_id, &offsets);
            if self.lean {
                self.forget_files();
            }
        }
        for (id, frames, addresses) in frames_of {
            let mut locations = Vec::with_capacity(frames.len());
            let mut depths = Vec::with_capacity(frames.len());
            // Where a frame was named after its function's start: (index, exact location).
            let mut exact = Vec::new();
            for (frame, back) in frames {
                let before = locations.len();
                let mut symbol_offset = None;
                match frame {
                    Frame::File(path, build_id, offset) => {
                        if let Some((locs, offset, exact_location)) =
                            self.cache.get(&(path, build_id, offset))
                        {
                            if let Some(l) = exact_location {
                                exact.push((locations.len(), l.clone()));
                            }
                            locations.extend(locs.iter().cloned());
                            symbol_offset = offset.map(|o| o + back);
                        }
                    }
                    Frame::Unknown(lib, system) => locations.push(Location::unknown(lib, system)),
                    Frame::Unnamed(location) => locations.push(location),
                    Frame::Jit(location, offset) => {
                        locations.push(location);
                        symbol_offset = Some(offset + back);
                    }
                }
                depths.push(((locations.len() - before) as u32, symbol_offset));
            }
            let exact_locations = (!exact.is_empty()).then(|| {
                let mut all = locations.clone();
                for (i, l) in exact {
                    all[i] = l;
                }
                all.into()
            });
            resolved.insert_frames(id, locations, addresses, depths);
            if let Some(stack) = resolved.stacks.get_mut(&id) {
                stack.exact = exact_locations;
            }
        }
        if self.lean {
            // Its memory is that of one batch: the names found live on in `resolved`.
            self.cache = HashMap::new();
        }
        resolved
    }

    fn symbolize_file(&mut self, path: &Path, build_id: &str, offsets: &[FileOffset]) {
        let lib = lib_name(&path.to_string_lossy());
        let system_lib = is_system_library(&path.to_string_lossy());
        // Only a file of the recorded build symbolizes it: none found leaves it `lib+offset`.
        let resolved = self.debug_files.resolve(path, build_id);
        // Unwind info is read from the file of the recorded build only, as symbols are.
        let binary = resolved.as_ref().map(|files| files.binary.clone());
        // Offsets from the symbol table where the debug information gave none (see below).
        let mut symtab_offsets: HashMap<usize, u64> = HashMap::new();
        let results: Vec<Symbolized<'_>> = match resolved {
            None => Vec::new(),
            Some(files) => {
                let results = match &files.debug {
                    None => {
                        let raw: Vec<u64> = offsets.iter().map(|o| o.get()).collect();
                        let mut elf = Elf::new(&files.binary);
                        elf.debug_syms = !self.lean;
                        self.inner
                            .symbolize(&Source::Elf(elf), Input::FileOffset(&raw))
                            .unwrap_or_default()
                    }
                    // A separate debug file keeps the addresses but not the file layout: translate
                    // through the binary's program headers.
                    Some(debug) => {
                        let addresses: Vec<Option<u64>> =
                            offsets.iter().map(|&o| files.address_of(o)).collect();
                        let known: Vec<u64> = addresses.iter().flatten().copied().collect();
                        let mut elf = Elf::new(debug);
                        elf.debug_syms = !self.lean;
                        let mut found = self
                            .inner
                            .symbolize(&Source::Elf(elf), Input::VirtOffset(&known))
                            .unwrap_or_default()
                            .into_iter();
                        addresses
                            .iter()
                            .map(|a| match a {
                                Some(_) => found.next().unwrap_or(Symbolized::Unknown(
                                    blazesym::symbolize::Reason::UnknownAddr,
                                )),
                                None => {
                                    Symbolized::Unknown(blazesym::symbolize::Reason::UnknownAddr)
                                }
                            })
                            .collect()
                    }
                };
                // blazesym gives a function whose code is split in ranges (a hot part and a
                // `.cold` one) a start of 0 from DWARF, so its offset was the address itself
                // (`__GI__IO_fflush+0x75e36` for +0x36): those offsets come from the symbol
                // table, as perf's do.
                let broken: Vec<(usize, u64)> = results
                    .iter()
                    .enumerate()
                    .filter_map(|(i, r)| match r {
                        Symbolized::Sym(sym) if sym.addr == 0 => {
                            Some((i, files.address_of(*offsets.get(i)?)?))
                        }
                        _ => None,
                    })
                    .collect();
                if !broken.is_empty() {
                    let mut elf = Elf::new(files.debug.as_ref().unwrap_or(&files.binary));
                    elf.debug_syms = false;
                    let addresses: Vec<u64> = broken.iter().map(|&(_, a)| a).collect();
                    let found = self
                        .inner
                        .symbolize(&Source::Elf(elf), Input::VirtOffset(&addresses))
                        .unwrap_or_default();
                    for (&(i, _), found) in broken.iter().zip(found) {
                        if let Symbolized::Sym(sym) = found {
                            symtab_offsets.insert(i, sym.offset as u64);
                        }
                    }
                }
                results
            }
        };
        let signal_returns = binary
            .as_deref()
            .map(|binary| returns_to_sigreturn(binary, offsets))
            .unwrap_or_default();
        for (i, &offset) in offsets.iter().enumerate() {
            let mut exact = None;
            let (locations, symbol_offset): (Vec<Location>, Option<u64>) = match results.get(i) {
                _ if signal_returns.get(i) == Some(&true) => (
                    vec![Location {
                        function: "[signal]".into(),
                        ..Location::unknown(lib.clone(), system_lib)
                    }],
                    None,
                ),
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
                    let symbol_offset = if sym.addr == 0 {
                        symtab_offsets.get(&i).copied()
                    } else {
                        Some(sym.offset as u64)
                    };
                    (locations, symbol_offset)
                }
                _ => {
                    let functions = !self.lean;
                    let address = virtual_address(&mut self.layouts, path, offset, functions);
                    // Stripped code: every address of one function gets one name, its start's
                    // (not when lean: a large library's unwind info is MBs to read and index).
                    let start = address
                        .zip(binary.as_deref())
                        .filter(|_| functions)
                        .and_then(|(a, binary)| {
                            let layout = self
                                .layouts
                                .entry(binary.to_owned())
                                .or_insert_with(|| Layout::load(binary, true));
                            layout.functions.start_of(a)
                        });
                    let named = |function: Arc<str>| Location {
                        function,
                        ..Location::unknown(lib.clone(), system_lib)
                    };
                    let at = |addr: u64| -> Arc<str> { format!("{lib}+{addr:#x}").into() };
                    let location = named(match start.or(address) {
                        Some(addr) => at(addr),
                        None => "[unknown]".into(),
                    });
                    exact = address
                        .filter(|&a| start.is_some_and(|s| s != a))
                        .map(|a| named(at(a)));
                    (vec![location], None)
                }
            };
            self.cache.insert(
                (path.to_owned(), build_id.to_owned(), offset),
                (locations.into(), symbol_offset, exact),
            );
        }
    }
}

/// Whether each of `offsets`, looked up one byte before a return address, is the frame a signal
/// handler returns to: the return address is the x86-64 `rt_sigreturn` trampoline (libc's
/// `__restore_rt`, `mov $15,%rax; syscall`), through which the recorder's unwinder stepped
/// into the interrupted code.
fn returns_to_sigreturn(binary: &Path, offsets: &[FileOffset]) -> Vec<bool> {
    const SIGRETURN: [u8; 9] = [0x48, 0xc7, 0xc0, 0x0f, 0x00, 0x00, 0x00, 0x0f, 0x05];
    use std::os::unix::fs::FileExt;
    let Ok(file) = std::fs::File::open(binary) else {
        return Vec::new();
    };
    // Read, not mapped: each touched page of a mapping maps its neighbours too (the kernel's
    // fault-around), and a few hundred return addresses in a 200 MB library held 20 MB.
    offsets
        .iter()
        .map(|o| {
            let mut code = [0u8; SIGRETURN.len()];
            file.read_exact_at(&mut code, o.get() + 1).is_ok() && code == SIGRETURN
        })
        .collect()
}

/// The address in the file's own terms (as `nm` gives them) of file offset `offset` in the
/// file at `path`, its layout cached in `cache`.
fn virtual_address(
    cache: &mut HashMap<PathBuf, Layout>,
    path: &Path,
    offset: FileOffset,
    functions: bool,
) -> Option<u64> {
    let offset = offset.get();
    let layout = cache
        .entry(path.to_owned())
        .or_insert_with(|| Layout::load(path, functions));
    layout
        .segments
        .iter()
        .find(|s| s.offset <= offset && offset < s.offset + s.size)
        .map(|s| offset - s.offset + s.address)
}

/// A loadable segment: where its bytes are in the file and where they go in memory.
#[derive(Debug, Clone, Copy)]
struct Segment {
    offset: u64,
    size: u64,
    address: u64,
}

/// What of a file's layout names the addresses no symbol covers, read once per file.
#[derive(Debug, Default)]
struct Layout {
    segments: Vec<Segment>,
    /// Function bounds from the unwind info.
    functions: FunctionRanges,
}

impl Layout {
    /// The layout of the ELF file at `path`, with its functions' bounds when `functions`;
    /// empty when it cannot be read.
    fn load(path: &Path, functions: bool) -> Layout {
        use object::{Object, ObjectSegment};
        let Ok(file) = std::fs::File::open(path) else {
            return Layout::default();
        };
        // SAFETY: mapped read-only, as blazesym maps the same files; a file truncated
        // meanwhile is the accepted risk of every tool that maps binaries.
        let Ok(map) = (unsafe { memmap2::Mmap::map(&file) }) else {
            return Layout::default();
        };
        let Ok(elf) = object::File::parse(&map[..]) else {
            return Layout::default();
        };
        let segments = elf
            .segments()
            .map(|s| {
                let (offset, size) = s.file_range();
                Segment {
                    offset,
                    size,
                    address: s.address(),
                }
            })
            .collect();
        Layout {
            segments,
            functions: if functions {
                FunctionRanges::of_elf(&map)
            } else {
                FunctionRanges::default()
            },
        }
    }
}

enum Frame {
    File(PathBuf, String, FileOffset),
    Unknown(Arc<str>, bool),
    /// A function of a jitdump or perf map, and the offset in it.
    Jit(Location, u64),
    /// Code named without an offset (JIT code no map names).
    Unnamed(Location),
}

/// The name, and library, of a frame in JIT code (an anonymous executable mapping) that no
/// perf map or jitdump names.
pub const JIT_FRAME: &str = "[jit]";

/// The name, and library, of a frame in the kernel's vDSO (`clock_gettime`, `gettimeofday`).
pub const VDSO_FRAME: &str = "[vdso]";

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
    let function = names::demangle(name);
    let system = system_lib
        || file.starts_with("/rustc/")
        || file.starts_with("/usr/include/")
        || (file.is_empty() && names::is_std_function(&function));
    Location {
        function: function.into(),
        file: file.into(),
        line,
        lib: lib.clone(),
        system,
    }
}

fn lib_name(path: &str) -> Arc<str> {
    if path.starts_with('/') {
        path.rsplit('/').next().unwrap_or(path).into()
    } else {
        path.into()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A fault table kept when its stacks table was lost (a full disk): the faults whose stack
    /// is not in the table count as truncated, not as `[unknown]` stacks left out of the count.
    #[test]
    fn a_fault_stack_missing_from_the_table_is_truncated() {
        let stack = |id, end| Stack {
            end,
            id,
            generation: 0,
            frames: vec![CodeAddr::new(0x1000)],
        };
        let trace = ProcessTrace {
            pid: 1,
            faults: Vec::new(),
            stacks: vec![stack(0, StackEnd::Complete), stack(1, StackEnd::Truncated)],
            mappings: Vec::new(),
            metadata: Vec::new(),
            allocs: Vec::new(),
            alloc_stacks: Vec::new(),
        };
        let mut symbolizer = Symbolizer::new();
        let stacks = symbolizer.resolve_stacks(&trace);
        assert_eq!(
            (0..3).map(|id| stacks.truncated(id)).collect::<Vec<_>>(),
            [false, true, true]
        );
        // Allocation stacks and tables built by hand keep only what they mark.
        assert!(!symbolizer.resolve_alloc_stacks(&trace).truncated(2));
        assert!(!ResolvedStacks::default().truncated(2));
    }
}
