//! Frames that are never a call site: the program's own allocators (CPython's pymalloc, GCC's
//! ggc, sqlite3's malloc wrappers, a pool of the program's), frames the user hides
//! (`--hide`), and the stacks the user focuses on (`--focus`), as pprof's `-hide`/`-focus`.
//!
//! An allocator touching the memory it hands out takes the fault for it, yet the line to act
//! on is the caller that asked for the memory: as for libc's allocator, the call site is the
//! innermost frame outside it. `--call-site leaf` still shows the allocator's own frame.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use regex::{Regex, RegexSet};
use rustc_hash::FxHashMap;

use crate::{FaultCounts, Location, ResolvedStacks};

/// The environment variable naming the configuration file (default
/// `~/.config/fltrace/config.toml`).
pub const CONFIG_ENV: &str = "FLTRACE_CONFIG";

/// Function names (regular expressions, matched against the demangled name) of well-known
/// user-space allocators: their frames are never a call site.
pub const BUILTIN_ALLOCATORS: &[&str] = &[
    // CPython: pymalloc's pools and arenas, the object and memory allocators over it.
    r"^(pymalloc_\w+|allocate_from_new_pool|new_arena|_PyObject_(Malloc|Calloc|Realloc|GC_New|GC_NewVar|GC_Alloc|GC_Resize|New|NewVar|ArenaMmap|VirtualAlloc)|PyObject_(Malloc|Calloc|Realloc|GC_New|GC_NewVar|New|NewVar)|_?PyMem_(Raw)?(Malloc|Calloc|Realloc)|PyType_GenericAlloc|_PyType_AllocNoTrack|gc_alloc|_PyObject_MallocWithType)$",
    // GCC's garbage-collected heap and libiberty's checked malloc.
    r"^(ggc_\w*alloc\w*|ggc_internal_\w+|ggc_realloc\w*|xmalloc|xcalloc|xrealloc|xstrdup|xmemdup)$",
    // sqlite3's memory wrappers.
    r"^(sqlite3_(malloc|malloc64|realloc|realloc64)|sqlite3(Malloc|MallocZero|Realloc|DbMalloc\w*|DbRealloc\w*|MemMalloc|MemRealloc|PageMalloc)|dbMallocRawFinish|mallocWithAlarm|pcache1Alloc)$",
    // glib's slices and checked malloc.
    r"^(g_(slice_alloc0?|slice_copy|malloc0?(_n)?|try_malloc0?(_n)?|realloc(_n)?|try_realloc(_n)?|memdup2?)|magazine_cache_\w+|slab_allocator_\w+|thread_memory_\w+)$",
    // The C++ standard library's allocators (inlined into the program from its headers).
    r"^(operator new(\[\])?|(std|__gnu_cxx)::(__new_allocator|new_allocator|allocator|allocator_traits)<.*>::allocate|std::_\w+_base<.*>::_M_allocate\w*)\b",
    // Rust's global allocator and raw vectors.
    r"^(__rust_(alloc|alloc_zeroed|realloc)|__rdl_\w+|__rg_\w+|alloc::(alloc|raw_vec)::.*|<alloc::alloc::Global as core::alloc::Allocator>::.*)$",
    // Go's runtime allocator.
    r"^runtime\.(mallocgc\w*|newobject|newarray|makeslice\w*|growslice|makemap\w*|rawstring\w*|rawbyteslice|rawruneslice|persistentalloc\w*|memclrNoHeapPointers|\(\*(mcache|mcentral|mheap)\)\..*)$",
    // V8's heap.
    r"^v8::internal::(Heap|HeapAllocator|MainAllocator|ConcurrentAllocator|LocalHeap|PagedSpace\w*|NewSpace|SemiSpace\w*|MemoryAllocator|\w*LargeObjectSpace|\w*SpaceAllocator)::\w*Allocat\w*",
];

/// Why a frame is not a call site.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum SkipReason {
    /// An allocator, built in or of the user's configuration.
    Allocator,
    /// Matched `--hide`.
    Hidden,
    /// Found by the allocations recorded (`record --allocs`): see [`detect_allocators`].
    Detected,
}

/// Which frames are skipped over when picking call sites, and which stacks are kept.
#[derive(Debug, Clone)]
pub struct FrameRules {
    allocators: RegexSet,
    hide: Option<Regex>,
    focus: Option<Regex>,
    /// Functions [`detect_allocators`] found, for one process.
    detected: rustc_hash::FxHashSet<String>,
    /// The configuration file read, said in the report.
    pub config: Option<PathBuf>,
}

/// Why the frame rules could not be built.
#[derive(Debug, thiserror::Error)]
pub enum RulesError {
    /// A pattern that is not a regular expression.
    #[error("`{pattern}` is not a regular expression ({reason})")]
    Pattern {
        /// The pattern.
        pattern: String,
        /// Why, said in the message (not a `source`, which would say it twice).
        reason: regex::Error,
    },
    /// The configuration file could not be read.
    #[error("reading {}: {reason}", path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// Why, said in the message (not a `source`, which would say it twice).
        reason: std::io::Error,
    },
    /// The configuration file is not what fltrace reads.
    #[error("{}: {message}", path.display())]
    Config {
        /// The file.
        path: PathBuf,
        /// What is wrong, as the TOML parser says.
        message: String,
    },
}

/// The configuration file's contents fltrace reads.
#[derive(Debug, Default, serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct Config {
    #[serde(default)]
    report: ReportConfig,
}

#[derive(Debug, Default, serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct ReportConfig {
    /// Regular expressions of the user's own allocators' function names.
    #[serde(default)]
    allocators: Vec<String>,
}

fn regex(pattern: &str) -> Result<Regex, RulesError> {
    Regex::new(pattern).map_err(|source| RulesError::Pattern {
        pattern: pattern.to_owned(),
        reason: source,
    })
}

impl FrameRules {
    /// The built-in allocators, the user's (`extra`), `--hide` and `--focus`.
    pub fn new(
        extra: &[String],
        hide: Option<&str>,
        focus: Option<&str>,
    ) -> Result<FrameRules, RulesError> {
        for pattern in extra {
            regex(pattern)?;
        }
        let patterns = BUILTIN_ALLOCATORS
            .iter()
            .map(|p| p.to_string())
            .chain(extra.iter().cloned());
        let allocators = RegexSet::new(patterns).map_err(|source| RulesError::Pattern {
            pattern: extra.join(" "),
            reason: source,
        })?;
        Ok(FrameRules {
            allocators,
            hide: hide.map(regex).transpose()?,
            focus: focus.map(regex).transpose()?,
            detected: Default::default(),
            config: None,
        })
    }

    /// As [`FrameRules::new`], with the allocators of the configuration file too: the one
    /// `FLTRACE_CONFIG` names, else `~/.config/fltrace/config.toml` if it exists.
    pub fn with_config(hide: Option<&str>, focus: Option<&str>) -> Result<FrameRules, RulesError> {
        let path = std::env::var_os(CONFIG_ENV)
            .filter(|p| !p.is_empty())
            .map(PathBuf::from)
            .or_else(|| {
                let default = default_config_path()?;
                default.is_file().then_some(default)
            });
        let extra = match &path {
            Some(path) => read_config(path)?,
            None => Vec::new(),
        };
        let mut rules = FrameRules::new(&extra, hide, focus)?;
        rules.config = path;
        Ok(rules)
    }

    /// Why `location` is never a call site, if it is not. `--hide` sees the whole name, the
    /// allocators the name without its parameters and GCC's clone suffixes (`.isra.0`).
    pub fn skip(&self, location: &Location) -> Option<SkipReason> {
        let function = &*location.function;
        if self.hide.as_ref().is_some_and(|h| h.is_match(function)) {
            Some(SkipReason::Hidden)
        } else if self.allocators.is_match(function)
            || self.allocators.is_match(bare_name(function))
        {
            Some(SkipReason::Allocator)
        } else if self.detected.contains(function) {
            Some(SkipReason::Detected)
        } else {
            None
        }
    }

    /// Whether a stack is kept: with `--focus`, only those with a frame matching it.
    pub fn keeps(&self, stack: &[Location]) -> bool {
        self.focus
            .as_ref()
            .is_none_or(|f| stack.iter().any(|l| f.is_match(&l.function)))
    }

    /// These rules with `functions` as allocators too (those [`detect_allocators`] found).
    pub fn with_detected(&self, functions: impl IntoIterator<Item = String>) -> FrameRules {
        let mut rules = self.clone();
        rules.detected.extend(functions);
        rules
    }

    /// Whether `--focus` was given.
    pub fn focuses(&self) -> bool {
        self.focus.is_some()
    }
}

impl Default for FrameRules {
    fn default() -> FrameRules {
        FrameRules {
            allocators: RegexSet::new(BUILTIN_ALLOCATORS).unwrap_or_else(|_| RegexSet::empty()),
            hide: None,
            focus: None,
            detected: Default::default(),
            config: None,
        }
    }
}

/// `name` without a trailing parameter list (`f(int) const`) and GCC's clone suffixes
/// (`f.isra.0`, `f.cold`, `f.constprop.0.part.1`).
fn bare_name(name: &str) -> &str {
    let mut name = name.strip_suffix(" const").unwrap_or(name);
    if name.ends_with(')') {
        let mut depth = 0i32;
        for (i, c) in name.char_indices().rev() {
            match c {
                ')' => depth += 1,
                '(' => {
                    depth -= 1;
                    if depth == 0 {
                        name = &name[..i];
                        break;
                    }
                }
                _ => {}
            }
        }
    }
    loop {
        let Some((stem, suffix)) = name.rsplit_once('.') else {
            return name;
        };
        let clone = [
            "isra",
            "constprop",
            "part",
            "cold",
            "lto_priv",
            "localalias",
        ]
        .contains(&suffix)
            || (suffix.bytes().all(|b| b.is_ascii_digit())
                && ["isra", "constprop", "part", "lto_priv"]
                    .iter()
                    .any(|c| stem.ends_with(&format!(".{c}"))));
        if !clone {
            return name;
        }
        name = stem;
    }
}

/// `n thing` or `n things`: "1 fault", "2 faults".
pub fn plural(n: u64, thing: &str) -> String {
    if n == 1 {
        format!("{n} {thing}")
    } else {
        format!("{n} {thing}s")
    }
}

/// `~/.config/fltrace/config.toml` (or under `XDG_CONFIG_HOME`).
pub fn default_config_path() -> Option<PathBuf> {
    let base = std::env::var_os("XDG_CONFIG_HOME")
        .filter(|p| !p.is_empty())
        .map(PathBuf::from)
        .or_else(|| Some(PathBuf::from(std::env::var_os("HOME")?).join(".config")))?;
    Some(base.join("fltrace").join("config.toml"))
}

/// The allocator patterns of the configuration file at `path`.
fn read_config(path: &Path) -> Result<Vec<String>, RulesError> {
    let text = std::fs::read_to_string(path).map_err(|source| RulesError::Read {
        path: path.to_owned(),
        reason: source,
    })?;
    let config: Config = toml::from_str(&text).map_err(|e| RulesError::Config {
        path: path.to_owned(),
        message: e.message().to_owned(),
    })?;
    Ok(config.report.allocators)
}

/// The frames skipped as call sites in one recording: per function, why, and how many faults
/// counted for another frame because of it.
#[derive(Debug, Clone, Default)]
pub struct Skipped {
    /// Function → (reason, faults whose call site moved past it).
    pub functions: BTreeMap<String, (SkipReason, u64)>,
    /// Faults left out by `--focus`.
    pub unfocused: u64,
}

impl Skipped {
    /// The lines the report says: which frames were skipped, for how many faults.
    pub fn notes(&self) -> Vec<String> {
        let mut notes = Vec::new();
        for (reason, what) in [
            (SkipReason::Allocator, "as allocators"),
            (SkipReason::Hidden, "by --hide"),
            (
                SkipReason::Detected,
                "as allocators (found from the allocations recorded)",
            ),
        ] {
            let mut named: Vec<(&String, u64)> = self
                .functions
                .iter()
                .filter(|(_, (r, n))| *r == reason && *n > 0)
                .map(|(f, (_, n))| (f, *n))
                .collect();
            if named.is_empty() {
                continue;
            }
            named.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(b.0)));
            let total: u64 = named.iter().map(|(_, n)| n).sum();
            let listed: Vec<String> = named
                .iter()
                .take(5)
                .map(|(f, n)| format!("{f} ({n})"))
                .collect();
            let more = named.len().saturating_sub(5);
            notes.push(format!(
                "skipped {what}, not call sites: {}{}; {} counted for their callers (--call-site leaf shows them)",
                listed.join(", "),
                if more > 0 {
                    format!(" and {more} more")
                } else {
                    String::new()
                },
                plural(total, "fault"),
            ));
        }
        if self.unfocused > 0 {
            notes.push(format!(
                "left out {} without a frame matching --focus",
                plural(self.unfocused, "fault")
            ));
        }
        notes
    }
}

/// The program's own allocators, found from its recorded allocations: a function of the
/// program that is the call site of faults (by `rules`), each of which landed in a block
/// that the function allocated (malloc called from it or from the program's code it called),
/// at least one in a block it allocated while called from another place than the fault's
/// caller: it hands out memory it got earlier for others, as a pool carving chunks from big
/// blocks does. A function that fills what it has just allocated (`main` with its buffers)
/// stays a call site, and so does one that also faults elsewhere (it has another role).
/// `faults` are the process's faults (with addresses), `stacks` their resolved stacks,
/// `alloc_stacks` the resolved allocation stacks of `lifetimes`' blocks.
#[cfg(any(test, feature = "oracle"))]
pub fn detect_allocators(
    rules: &FrameRules,
    faults: &[fltrace_trace::Fault],
    stacks: &ResolvedStacks,
    lifetimes: &crate::Lifetimes,
    alloc_stacks: &ResolvedStacks,
) -> Vec<String> {
    let blocks = crate::attribute_faults(lifetimes, faults);
    let hits = faults.iter().zip(&blocks).map(|(fault, block)| {
        let alloc_stack = block.map(|b| lifetimes.blocks[b as usize].stack_id);
        (fault.stack_id, alloc_stack)
    });
    detect_allocators_counted(rules, hits, stacks, alloc_stacks)
}

/// [`detect_allocators`] from each fault's stack id and the allocation stack id of the block
/// it landed in (`None`: outside every block); each distinct pair once is enough.
pub fn detect_allocators_counted(
    rules: &FrameRules,
    hits: impl IntoIterator<Item = (u32, Option<u32>)>,
    stacks: &ResolvedStacks,
    alloc_stacks: &ResolvedStacks,
) -> Vec<String> {
    // Per candidate: whether every one of its faults was in a block it allocated, and whether
    // one was in a block it got while called from elsewhere.
    let mut candidates: BTreeMap<String, (bool, bool)> = BTreeMap::new();
    for (fault_stack, block_stack) in hits {
        let stack = stacks.get(fault_stack);
        let Some(position) = program_call_site(rules, stack) else {
            continue;
        };
        let site = &stack[position];
        // The callers compared are the next functions of the program's own (the unwinders
        // of faults and of allocations may differ in the system frames and in how far they
        // reach): unknown on either side is no difference.
        let caller_of = |frames: &[Location]| {
            frames
                .iter()
                .find(|l| !l.system && l.function != site.function)
                .map(|l| l.function.clone())
        };
        let caller = caller_of(&stack[position + 1..]);
        // The allocation's frame just outside the function, if the block was allocated
        // through the program's own code under it: a block a library allocated for it
        // (stdio's buffer under printf) is not the function's doing.
        let allocated_through = block_stack.and_then(|alloc_stack| {
            let alloc = alloc_stacks.get(alloc_stack);
            let at = alloc
                .iter()
                .position(|l| l.function == site.function && l.lib == site.lib)?;
            alloc[..at]
                .iter()
                .all(|l| !l.system)
                .then(|| caller_of(&alloc[at + 1..]))
        });
        let entry = candidates
            .entry(site.function.to_string())
            .or_insert((true, false));
        match allocated_through {
            Some(alloc_caller) => {
                entry.1 |= matches!((&alloc_caller, &caller), (Some(a), Some(f)) if a != f);
            }
            None => entry.0 = false,
        }
    }
    candidates
        .into_iter()
        .filter(|(_, (only_its_blocks, handed_on))| *only_its_blocks && *handed_on)
        .map(|(function, _)| function)
        .collect()
}

/// The index of the call site of `stack` by the program rule, frames `rules` skip passed over.
fn program_call_site(rules: &FrameRules, stack: &[Location]) -> Option<usize> {
    stack
        .iter()
        .position(|l| !l.system && &*l.lib != "[unknown]" && rules.skip(l).is_none())
}

/// Marks the frames `rules` skip as not the program's own (so that [`crate::call_site`] passes
/// over them), drops the faults of stacks `--focus` leaves out, and counts what moved.
pub fn apply_rules(
    rules: &FrameRules,
    stacks: &mut ResolvedStacks,
    counts: &mut FaultCounts,
    skipped: &mut Skipped,
) {
    let per_stack: FxHashMap<u32, u64> = counts.per_stack().into_iter().collect();
    let mut unfocused = rustc_hash::FxHashSet::default();
    let leaf = stacks.call_site == crate::CallSite::Leaf;
    stacks.rewrite(|id, stack| {
        if !rules.keeps(&stack.locations) {
            unfocused.insert(id);
        }
        let before = crate::call_site(&stack.locations).cloned();
        let mut changed = false;
        let mut mark = |locations: &[Location]| -> Option<std::sync::Arc<[Location]>> {
            if !locations
                .iter()
                .any(|l| !l.system && rules.skip(l).is_some())
            {
                return None;
            }
            Some(
                locations
                    .iter()
                    .map(|l| {
                        let mut l = l.clone();
                        if rules.skip(&l).is_some() {
                            l.system = true;
                        }
                        l
                    })
                    .collect(),
            )
        };
        if let Some(marked) = mark(&stack.locations) {
            stack.locations = marked;
            changed = true;
        }
        if let Some(marked) = stack.exact.as_deref().and_then(&mut mark) {
            stack.exact = Some(marked);
        }
        // With `--call-site leaf` no call site moves.
        if !changed || leaf {
            return;
        }
        let faults = per_stack.get(&id).copied().unwrap_or(0);
        let after = crate::call_site(&stack.locations);
        if let Some(before) = before
            && after != Some(&before)
            && let Some(reason) = rules.skip(&before)
        {
            skipped
                .functions
                .entry(before.function.to_string())
                .or_insert((reason, 0))
                .1 += faults;
        }
    });
    if !unfocused.is_empty() {
        skipped.unfocused += counts.retain(|id, _| !unfocused.contains(&id));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(function: &str) -> Location {
        Location {
            function: function.into(),
            file: "".into(),
            line: 0,
            lib: "prog".into(),
            system: false,
        }
    }

    #[test]
    fn names_well_known_allocators() {
        let rules = FrameRules::default();
        for allocator in [
            "pymalloc_pool_extend",
            "pymalloc_alloc.isra.0",
            "allocate_from_new_pool",
            "_PyObject_Malloc",
            "PyType_GenericAlloc",
            "ggc_internal_cleared_alloc(unsigned long, void (*)(void*), unsigned long, unsigned long)",
            "ggc_internal_alloc",
            "xmalloc",
            "sqlite3Malloc",
            "sqlite3DbMallocRawNN",
            "sqlite3_malloc64",
            "g_slice_alloc",
            "g_malloc0",
            "operator new(unsigned long)",
            "std::__new_allocator<int>::allocate(unsigned long, void const*)",
            "std::_Vector_base<int, std::allocator<int> >::_M_allocate(unsigned long)",
            "__rust_alloc",
            "alloc::raw_vec::RawVec<T,A>::grow_one",
            "runtime.mallocgc",
            "runtime.(*mcache).refill",
            "v8::internal::Heap::AllocateRaw",
        ] {
            assert_eq!(
                rules.skip(&at(allocator)),
                Some(SkipReason::Allocator),
                "{allocator}"
            );
        }
        for program in [
            "new_keys_object",
            "copy_node",
            "sqlite3PagerGet",
            "main",
            "pool_alloc",
            "g_hash_table_insert",
            "ggc_collect_roots",
            "mallocs_fill",
        ] {
            assert_eq!(rules.skip(&at(program)), None, "{program}");
        }
    }

    #[test]
    fn bare_names() {
        assert_eq!(
            bare_name("pymalloc_pool_extend.isra.0"),
            "pymalloc_pool_extend"
        );
        assert_eq!(bare_name("f.constprop.0.part.1"), "f");
        assert_eq!(bare_name("g.cold"), "g");
        assert_eq!(bare_name("runtime.mallocgc"), "runtime.mallocgc");
        assert_eq!(
            bare_name("ggc_internal_alloc(unsigned long, void (*)(void*))"),
            "ggc_internal_alloc"
        );
        assert_eq!(bare_name("A::f(int) const"), "A::f");
    }

    #[test]
    fn hide_and_user_allocators_and_focus() {
        let rules = FrameRules::new(&["^pool_alloc$".into()], Some("^make_"), Some("main"))
            .expect("valid patterns");
        assert_eq!(rules.skip(&at("pool_alloc")), Some(SkipReason::Allocator));
        assert_eq!(rules.skip(&at("make_nodes")), Some(SkipReason::Hidden));
        assert_eq!(rules.skip(&at("main")), None);
        assert!(rules.keeps(&[at("x"), at("main")]));
        assert!(!rules.keeps(&[at("x"), at("y")]));
        let error = FrameRules::new(&[], Some("(unclosed"), None).expect_err("a bad pattern");
        assert!(
            error
                .to_string()
                .starts_with("`(unclosed` is not a regular expression")
        );
    }

    #[test]
    fn reads_the_configuration_file() {
        let dir = tempfile::tempdir().expect("temporary directory");
        let path = dir.path().join("config.toml");
        std::fs::write(
            &path,
            "[report]\nallocators = [\"^pool_alloc$\", \"arena_\"]\n",
        )
        .expect("config written");
        assert_eq!(
            read_config(&path).expect("a valid file"),
            vec!["^pool_alloc$".to_owned(), "arena_".to_owned()]
        );
        std::fs::write(&path, "[report]\nallocator = []\n").expect("config written");
        let error = read_config(&path).expect_err("an unknown key");
        assert!(error.to_string().contains("unknown field"), "{error}");
    }
}
