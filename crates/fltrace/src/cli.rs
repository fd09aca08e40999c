//! The command line, as the original fltrace accepted it (`-L=140` and `-L 140` alike).

use std::ffi::OsString;
use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};
use fltrace_analyze::{CallOrder, CallSite, DiffBy, HeatSource, ReportBy};
use fltrace_capture::{EvictionPolicy, FaultPath};
use fltrace_render::listing::ListFormat;
use fltrace_render::report::ReportFormat;
use fltrace_render::{FrameLabel, TableFormat};

use crate::values::{
    addr_range, duration, interval_seconds, one_pid, percent, pid, pid_i32, positive_mb,
    region_counts, time_range,
};

/// Which code touches which memory, when, and what it costs when memory is short.
#[derive(Debug, Parser)]
#[command(name = "fltrace", version, about)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
    /// More on stderr: -v what fltrace is doing, -vv detail for debugging (warnings and errors
    /// are always shown).
    #[arg(short = 'v', long = "verbose", action = clap::ArgAction::Count, global = true)]
    pub verbose: u8,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run a command (or attach to a process) and record every page fault with its stack.
    Record(RecordArgs),
    /// Record as `record` does and show, every interval, the call sites, processes, threads
    /// and libraries taking faults now, with far memory and lost records: full screen in a
    /// terminal (q quits, p pauses, s sorts, v views, / filters), else plain tables.
    Top(TopArgs),
    /// Faults grouped by call site, with `file:line`; as the original, plain `report` also
    /// writes fltrace-data-report-PID.out (--legacy-csv with other flags).
    /// With --allocs, --leaks or --by alloc-site: allocations and the faults in them.
    Report(ReportArgs),
    /// Flamegraphs of all faults and of first-touch faults, as SVG; with --allocs, the
    /// allocations' charts (heaptrack_gui's) as SVG, CSV or JSON.
    Visualize(VisualizeArgs),
    /// Record a command at shrinking local memory and plot faults and faulting code
    /// locations against it (the WORDS'23 figure).
    Sweep(SweepArgs),
    /// Working-set size over time, from page reference bits (clear_refs and smaps).
    Wss(WssArgs),
    /// Time-by-address heatmap of a recording's faults (PNG and SVG, or the terminal).
    Heatmap(HeatmapArgs),
    /// Copy the binaries and debug files a recording needs into an archive directory (keyed by
    /// build ID), so that it symbolizes the same on another machine or after a rebuild.
    Archive(ArchiveArgs),
    /// The recordings in a directory: when, command, processes, faults, lost, truncated
    /// stacks, allocations and bytes.
    List(ListArgs),
    /// The build-ID cache `record` keeps executables and libraries in: list it, or prune it.
    #[command(subcommand)]
    Cache(CacheCommand),
    /// The recordings of a directory as a symbolized dataset for SQL engines: faults and
    /// their stacks' frames named as reports name them, in hive partitions
    /// `host=H/recording=ID/`.
    Export(ExportArgs),
    /// Every fault with its stack as `perf script` prints samples, for inferno-collapse-perf,
    /// speedscope and the Firefox Profiler.
    Script(ScriptArgs),
    /// Two recordings side by side: faults per call site in A and in B, largest change first.
    Diff(DiffArgs),
    /// A series of runs: each workload under each configuration (dry, record, ...), repeated,
    /// in a shuffled order; or, given a catalog, list its runs and their statistics.
    Runs(crate::runs::RunsArgs),
    /// Catalog a series of `fltrace runs` into SQLite: every run, and the call sites of the
    /// first repetitions, pointing to their traces.
    Analyze(crate::runs::AnalyzeArgs),
    /// Count any tracepoint, software event or uprobe in the kernel, grouped by comm, pid,
    /// stack or a raw field (the BPF chapter's one-liners).
    Count(crate::bpf_tools::CountArgs),
    /// Page faults of the whole system (or -p), by user and kernel stack, with the rate.
    Faults(crate::bpf_tools::FaultsArgs),
    /// Page faults on file-backed memory, by file.
    Ffaults(crate::bpf_tools::FfaultsArgs),
    /// Outstanding allocations by stack, every interval: the kernel's, or a process's (-p).
    Memleak(crate::bpf_tools::MemleakArgs),
    /// The memory chapter's checklist as one report, with the command to run next.
    Triage(crate::bpf_tools::TriageArgs),
    #[command(flatten)]
    System(crate::system::SystemCommand),
}

#[derive(Debug, clap::Subcommand)]
pub enum CacheCommand {
    /// Every file kept, least recently used first: build ID, size, whether it is a hard link
    /// to the file still on disk (costing no space), last use, the path it was mapped from.
    List,
    /// Removes the least recently used files until the cache holds at most --max-size MiB of
    /// its own (by default FLTRACE_CACHE_SIZE, else 2048).
    Prune {
        /// The size to prune to, in MiB (0 empties the cache).
        #[arg(long, value_name = "MiB")]
        max_size: Option<u64>,
    },
}

/// Where a recording is, named as every reading command names it: `fltrace report r1`,
/// `-d r1`, or perf's `-i r1`; a directory (its newest recording, or the one `-p` picks) or an
/// archive file of `fltrace archive -o NAME.tar.zst`.
#[derive(Debug, Args)]
pub struct RecordingName {
    /// The recording: a directory of recordings or an archive file (default: the current
    /// directory).
    #[arg(value_name = "RECORDING")]
    pub positional: Option<PathBuf>,
    /// The recording, as a flag (perf's -i/--input too).
    #[arg(
        short = 'd',
        long = "dir",
        visible_short_alias = 'i',
        visible_alias = "input",
        value_name = "DIR",
        conflicts_with = "positional"
    )]
    pub flag: Option<PathBuf>,
}

impl RecordingName {
    /// The recording named, by either form, else the current directory.
    pub fn path(&self) -> PathBuf {
        self.positional
            .clone()
            .or_else(|| self.flag.clone())
            .unwrap_or_else(|| PathBuf::from("."))
    }
}

#[derive(Debug, Args)]
pub struct ArchiveArgs {
    #[command(flatten)]
    pub recording: RecordingName,
    /// Where the recording is read from (set from `recording` before use).
    #[arg(skip)]
    pub dir: PathBuf,
    /// Only this process (and the most recent recording that traced it).
    #[arg(short = 'p', long, value_name = "PID", value_parser = one_pid)]
    pub pid: Option<u32>,
    /// The archive directory (default: `DIR/fltrace-archive`, found there by report, visualize
    /// and heatmap without being asked; `./fltrace-archive` when DIR is read-only), or one
    /// file, `NAME.tar.zst` or `NAME.tar`, holding the recording and that archive, which every
    /// command reads as it is (`report -d NAME.tar.zst`).
    #[arg(short = 'o', long = "output", value_name = "ARCHIVE")]
    pub output: Option<PathBuf>,
}

#[derive(Debug, Args)]
pub struct ListArgs {
    #[command(flatten)]
    pub recording: RecordingName,
    /// Output format.
    #[arg(long, value_enum, default_value = "table")]
    pub format: ListFormat,
    /// The table prints every name whole, however wide (it fits the terminal's width,
    /// `COLUMNS`, by default).
    #[arg(long)]
    pub wide: bool,
}

#[derive(Debug, Args)]
pub struct ExportArgs {
    /// The recordings (every one of them is exported).
    #[command(flatten)]
    pub recording: RecordingName,
    /// Where the recordings are read from (set from `recording` before use).
    #[arg(skip)]
    pub dir: PathBuf,
    /// Where the dataset goes (default: `DIR/fltrace-export`); recordings already there are
    /// written again.
    #[arg(short = 'o', long = "output", value_name = "OUT")]
    pub output: Option<PathBuf>,
    /// The `host=` partition (default: this machine's host name).
    #[arg(long, value_name = "NAME")]
    pub host: Option<String>,
}

#[derive(Debug, Args)]
pub struct ScriptArgs {
    #[command(flatten)]
    pub selection: Selection,
    /// Also print each fault's data address after the event name, as `perf script -F +addr`
    /// does (inferno-collapse-perf then skips the samples).
    #[arg(long)]
    pub addr: bool,
}

#[derive(Debug, Args)]
pub struct DiffArgs {
    /// The baseline recording: a directory or an archive file.
    #[arg(value_name = "A")]
    pub a: PathBuf,
    /// The recording compared with it.
    #[arg(value_name = "B")]
    pub b: PathBuf,
    /// In A, only this process (and the most recent recording that traced it).
    #[arg(long, value_name = "PID", value_parser = one_pid)]
    pub pid_a: Option<u32>,
    /// In B, only this process.
    #[arg(long, value_name = "PID", value_parser = one_pid)]
    pub pid_b: Option<u32>,
    /// What to compare faults by: a place of their stacks, as perf diff's symbols and dsos, or
    /// their threads.
    #[arg(long, value_enum, default_value = "line")]
    pub by: DiffBy,
    /// How many rows to show (0: all).
    #[arg(long, value_name = "N", default_value_t = 20)]
    pub top: usize,
    /// Output format.
    #[arg(long, value_enum, default_value = "table")]
    pub format: TableFormat,
    #[command(flatten)]
    pub filters: Filters,
    /// The table prints every name whole, however wide (it fits the terminal's width,
    /// `COLUMNS`, by default).
    #[arg(long)]
    pub wide: bool,
}

#[derive(Debug, Args)]
pub struct HeatmapArgs {
    #[command(flatten)]
    pub selection: Selection,
    /// Output file, .png or .svg (default: fltrace-data-heatmap-PID.png and .svg).
    #[arg(short = 'o', long = "output", value_name = "FILE")]
    pub output: Option<PathBuf>,
    /// log2 of the address block per cell (12: pages).
    #[arg(long, value_name = "BITS", default_value_t = 12, value_parser = clap::value_parser!(u32).range(6..=40))]
    pub block_bits: u32,
    /// Time buckets (columns).
    #[arg(long, value_name = "N", default_value_t = 1024, value_parser = clap::value_parser!(u64).range(1..=16384))]
    pub width: u64,
    /// Address rows at most.
    #[arg(long, value_name = "N", default_value_t = 768, value_parser = clap::value_parser!(u64).range(1..=16384))]
    pub height: u64,
    /// Only addresses in this range, hex: 0x7f0000000000..0x7fff00000000.
    #[arg(long, value_name = "START..END", value_parser = addr_range)]
    pub addr: Option<(u64, u64)>,
    /// Print a small rendering to the terminal instead of writing files.
    #[arg(long)]
    pub terminal: bool,
    /// What to draw: the recording's faults, or the access trace of `fltrace wss` (reference
    /// bits) or `fltrace wss --damon`.
    #[arg(long, value_enum, default_value = "faults")]
    pub from: HeatSource,
    /// With allocations recorded: outline the N largest blocks over the map (their lifetime by
    /// their address range, labelled with their allocation site); 0 for none.
    #[arg(long, value_name = "N", default_value_t = 20)]
    pub allocs: usize,
}

#[derive(Debug, Args)]
pub struct WssArgs {
    /// A running process to watch.
    #[arg(
        short = 'p',
        long = "pid",
        value_name = "PID",
        value_parser = pid_i32,
        conflicts_with = "command"
    )]
    pub pid: Option<i32>,
    /// Sampling interval, e.g. 100ms, 1s.
    #[arg(long, value_name = "DURATION", default_value = "100ms", value_parser = duration)]
    pub interval: std::time::Duration,
    /// Stop after this long, e.g. 10s (default: when the process ends or on Ctrl-C).
    #[arg(long, value_name = "DURATION", value_parser = duration)]
    pub duration: Option<std::time::Duration>,
    /// Use DAMON's sampling of Accessed bits instead of clearing reference bits.
    #[arg(long)]
    pub damon: bool,
    /// Per-page detail: which pages were accessed in each interval, from the kernel's idle
    /// page tracking (/sys/kernel/mm/page_idle), written to the trace as page ranges.
    #[arg(long, conflicts_with = "damon")]
    pub pages: bool,
    /// With --damon where fltrace starts its own monitor: how often DAMON checks the
    /// Accessed bits.
    #[arg(long, value_name = "DURATION", default_value = "5ms", value_parser = duration)]
    pub damon_sample: std::time::Duration,
    /// With --damon, own monitor: the aggregation interval (one trace row set each).
    #[arg(long, value_name = "DURATION", default_value = "100ms", value_parser = duration)]
    pub damon_aggr: std::time::Duration,
    /// With --damon, own monitor: how often the regions follow the process's mappings.
    #[arg(long, value_name = "DURATION", default_value = "1s", value_parser = duration)]
    pub damon_update: std::time::Duration,
    /// With --damon, own monitor: fewest and most regions, `MIN..MAX`.
    #[arg(long, value_name = "MIN..MAX", default_value = "10..1000", value_parser = region_counts)]
    pub damon_regions: (u64, u64),
    /// table (one line per interval), csv (`time_s,wss_bytes,rss_bytes` on stdout) or json
    /// (one object per interval and line, with the CSV's names).
    #[arg(long, value_enum, default_value = "table")]
    pub format: TableFormat,
    /// Directory for the per-mapping trace and the plot.
    #[arg(short = 'o', long = "output", value_name = "DIR", default_value = ".")]
    pub dir: PathBuf,
    /// The command to run and its arguments.
    #[arg(last = true, value_name = "COMMAND")]
    pub command: Vec<OsString>,
}

#[derive(Debug, Args)]
pub struct SweepArgs {
    /// Largest local memory, percent of the command's peak.
    #[arg(long, value_name = "PERCENT", default_value_t = 100, value_parser = clap::value_parser!(u32).range(1..=100))]
    pub from: u32,
    /// Smallest local memory, percent of the peak.
    #[arg(long, value_name = "PERCENT", default_value_t = 5, value_parser = clap::value_parser!(u32).range(1..=100))]
    pub to: u32,
    /// Step between runs, percent.
    #[arg(long, value_name = "PERCENT", default_value_t = 5, value_parser = clap::value_parser!(u32).range(1..=100))]
    pub step: u32,
    /// Directory for the runs, the CSV and the plot; runs already there are not repeated.
    #[arg(
        short = 'o',
        long = "output",
        value_name = "DIR",
        default_value = "fltrace-sweep"
    )]
    pub dir: PathBuf,
    /// Far memory per run in MiB (default: twice the peak, at least 256 MiB more than it).
    #[arg(short = 'M', long = "max-mem", value_name = "MiB", value_parser = positive_mb)]
    pub max_mb: Option<u64>,
    /// Eviction policy.
    #[arg(long, value_enum, default_value = "fifo")]
    pub policy: EvictionPolicy,
    /// The command to run and its arguments.
    #[arg(last = true, value_name = "COMMAND", required = true)]
    pub command: Vec<OsString>,
}

/// How `record` and `top` record: what to trace (`-p`), far memory, allocations, stacks.
#[derive(Debug, Args)]
pub struct RecordFlags {
    /// Local memory in MiB: emulate far memory, keeping at most this much of the program's
    /// heap and anonymous mappings resident (needs -M).
    #[arg(short = 'L', long = "local-mem", value_name = "MiB", value_parser = positive_mb)]
    pub local_mb: Option<u64>,
    /// Maximum memory in MiB the program may use in all, local plus far (needs -L).
    #[arg(short = 'M', long = "max-mem", value_name = "MiB", value_parser = positive_mb)]
    pub max_mb: Option<u64>,
    /// Far memory: userfaultfd handler threads.
    #[arg(short = 'C', long = "cores", value_name = "N", default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=64))]
    pub handlers: u32,
    /// Far memory: which local pages are evicted first (fifo: oldest fault-in first, as the
    /// original; clock: fifo with a second chance for pages written since last considered;
    /// refault: fifo with a second chance for pages fetched soon after their eviction).
    #[arg(long, value_enum, default_value = "fifo")]
    pub policy: EvictionPolicy,
    /// Far memory: handlers spin on the userfaultfd instead of blocking (lower latency, a core
    /// each).
    #[arg(long)]
    pub busy_poll: bool,
    /// Far memory: where each fault is served (default: threads). `record -v` and the stats
    /// file say which path each process took, and why.
    #[arg(long, value_enum, value_name = "PATH", requires = "local_mb")]
    pub fault_path: Option<FaultPath>,
    /// Attach to running processes instead of starting a command (`-p PID,PID`, as perf),
    /// with their threads and the children they have now (see --no-children); children they
    /// fork later are traced too. Stop with Ctrl-C; the recording also ends when all are gone.
    #[arg(
        short = 'p',
        long = "pid",
        value_name = "PID,...",
        value_delimiter = ',',
        value_parser = pid_i32,
        num_args = 1,
        conflicts_with = "command"
    )]
    pub pid: Vec<i32>,
    /// With -p: attach only to the processes named, not to the children they have now (as
    /// perf's -p does); children forked later are still traced.
    #[arg(long, requires = "pid")]
    pub no_children: bool,
    /// Copy a fixed number of bytes of user stack with each fault (perf samples in per-CPU
    /// rings, as before BPF) instead of the live stack; deeper frames come from the thread's
    /// previous stack or the live process unless --exact-stacks.
    #[arg(long, value_name = "BYTES", value_parser = clap::value_parser!(u32).range(64..=65528))]
    pub stack_size: Option<u32>,
    /// The most of each fault's live stack copied (from the stack pointer to just above the
    /// thread's outermost frame), bytes; deeper frames come from the thread's previous stack
    /// or the live process unless --exact-stacks.
    #[arg(long, value_name = "BYTES", conflicts_with = "stack_size", default_value_t = fltrace_capture::DEFAULT_STACK_CAP, value_parser = clap::value_parser!(u32).range(64..=8_388_608))]
    pub max_stack_copy: u32,
    /// Unwind only over the stack copied at the fault (raise --max-stack-copy to match).
    #[arg(long)]
    pub exact_stacks: bool,
    /// Keep no copy of the executables and libraries in the build-ID cache ($FLTRACE_CACHE,
    /// else ~/.cache/fltrace; FLTRACE_CACHE_SIZE MiB, 2048 by default): reports then name the
    /// frames only while the files on disk are of the build recorded.
    #[arg(long)]
    pub no_cache: bool,
    /// The kernel memory of all the recording's rings and BPF maps together, in MiB, whatever
    /// the number of CPUs (64 by default, 5 at least): half for the ring of faults all CPUs
    /// share, about 4 MiB for the BPF tables, the rest split among the CPUs' rings of mappings
    /// and process events (with --stack-size or without BPF, all split among the CPUs).
    #[arg(long, value_name = "MiB", value_parser = clap::value_parser!(u64).range(1..=65536))]
    pub buffer_mb: Option<u64>,
    /// Run the command as this user (name or uid); by default the user who ran sudo, if any,
    /// when --drop-privileges is given.
    #[arg(long, value_name = "USER")]
    pub user: Option<String>,
    /// Run the command as the user who invoked sudo (SUDO_UID/SUDO_GID).
    #[arg(long)]
    pub drop_privileges: bool,
    /// Also record every call of the malloc family, mmap, munmap, mremap, brk and sbrk with its
    /// stack (an interposer preloaded into the command), for `report --allocs`, `--leaks` and
    /// `--by alloc-site`.
    #[arg(long)]
    pub allocs: bool,
    /// Also sample load and store addresses with the hardware PMU (Intel PEBS mem-loads and
    /// mem-stores, AMD IBS op).
    #[arg(long)]
    pub access_samples: bool,
    /// Access samples per second.
    #[arg(
        long,
        value_name = "HZ",
        default_value_t = 1000,
        value_parser = clap::value_parser!(u64).range(1..=1_000_000),
        requires = "access_samples"
    )]
    pub freq: u64,
    /// Serve the program's heap (the malloc family) from files the preloaded library creates
    /// and grows in DIR, mapped shared (Heimdallr's PMEM mode: DIR on a DAX file system). The
    /// files stay after the run, `heap-<pid>-<n>` for each process image.
    #[arg(long, value_name = "DIR")]
    pub backing_dir: Option<PathBuf>,
}

#[derive(Debug, Args)]
pub struct RecordArgs {
    #[command(flatten)]
    pub recorder: RecordFlags,
    /// Directory for the trace files.
    #[arg(short = 'o', long = "output", value_name = "DIR", default_value = ".")]
    pub dir: PathBuf,
    /// No progress line.
    #[arg(short, long)]
    pub quiet: bool,
    /// The command to run and its arguments.
    #[arg(last = true, value_name = "COMMAND")]
    pub command: Vec<OsString>,
}

#[derive(Debug, Args)]
pub struct TopArgs {
    #[command(flatten)]
    pub recorder: RecordFlags,
    /// Seconds between screens (tables with --batch); fractions allowed.
    #[arg(short = 'd', long = "delay", value_name = "SECS", default_value_t = 1.0, value_parser = interval_seconds)]
    pub delay: f64,
    /// Stop after this many screens (tables): the command is ended as Ctrl-C ends it under
    /// `record`, the recording finished, the last table covering it to its end.
    #[arg(short = 'n', long = "iterations", value_name = "COUNT", value_parser = clap::value_parser!(u64).range(1..))]
    pub iterations: Option<u64>,
    /// One plain table per interval on stdout, as `top -b` (also whenever stdout is not a
    /// terminal).
    #[arg(short = 'b', long)]
    pub batch: bool,
    /// Keep the recording in DIR (for `report -d DIR` afterwards); without it, the
    /// recording goes to a temporary directory removed at the end.
    #[arg(short = 'o', long = "output", value_name = "DIR")]
    pub dir: Option<PathBuf>,
    /// The command to run and its arguments.
    #[arg(last = true, value_name = "COMMAND")]
    pub command: Vec<OsString>,
}

/// Which recording (and which part of it) to analyse.
#[derive(Debug, Args)]
pub struct Selection {
    #[command(flatten)]
    pub recording: RecordingName,
    /// Where the recording is read from: set from `recording` before use (an archive file
    /// unpacked into a temporary directory).
    #[arg(skip)]
    pub dir: PathBuf,
    /// Only this process (and the most recent recording that traced it).
    #[arg(short = 'p', long, value_name = "PID", value_parser = one_pid)]
    pub pid: Option<u32>,
    #[command(flatten)]
    pub filters: Filters,
    /// The recording as the user named it, when `dir` is a temporary directory it is read
    /// from (an archive file unpacked, a read-only directory's copy): notes name it instead.
    #[arg(skip)]
    pub named: Option<PathBuf>,
}

/// Which faults count, and how, in every command that shows faults (`diff` too).
#[derive(Debug, Args)]
pub struct Filters {
    /// Only faults in this window, seconds from the start of the recording: `1.5..3`, `..2`,
    /// `4..` (a window after the last fault is an error saying the recording's span).
    #[arg(long, value_name = "START..END", value_parser = time_range)]
    pub time: Option<(f64, f64)>,
    /// Only the faults of these threads (comma-separated thread ids).
    #[arg(long, value_name = "TID", value_delimiter = ',', value_parser = pid)]
    pub tid: Vec<u32>,
    /// Only the faults of threads or processes of these names (comma-separated `comm`s, as
    /// perf's --comm).
    #[arg(long, value_name = "COMM", value_delimiter = ',')]
    pub comm: Vec<String>,
    /// Which frame a fault counts for: the innermost of the program's own code (`program`:
    /// the executable and its libraries, not libc, libstdc++ and the like) or the innermost
    /// of all (`leaf`).
    #[arg(long, value_enum, default_value = "program")]
    pub call_site: CallSite,
    /// Functions (a regular expression) that are never a call site, as pprof's -hide: a fault
    /// in one counts for its caller. Well-known allocators (pymalloc, ggc, sqlite3Malloc,
    /// g_slice, operator new, __rust_alloc, ...) and those of the `[report] allocators` list of
    /// ~/.config/fltrace/config.toml (or $FLTRACE_CONFIG) always are; `--call-site leaf`
    /// shows them.
    #[arg(long, value_name = "REGEX")]
    pub hide: Option<String>,
    /// Only the faults whose stack has a function matching this regular expression, as
    /// pprof's -focus.
    #[arg(long, value_name = "REGEX")]
    pub focus: Option<String>,
    /// Also show the faults taken by fltrace's own work in the traced process (the
    /// allocation tracer's unwinding, logging and heap), left out by default.
    #[arg(long)]
    pub include_tracer: bool,
    /// Symbolize from this archive of `fltrace archive` (default: `DIR/fltrace-archive` if it exists).
    #[arg(long, value_name = "ARCHIVE")]
    pub archive: Option<PathBuf>,
    /// Read a corrupt recording anyway (a file changed or cut since it finished): what still
    /// reads, with a warning naming the file and what was recovered of it.
    #[arg(long)]
    pub salvage: bool,
}

#[derive(Debug, Args)]
pub struct ReportArgs {
    #[command(flatten)]
    pub selection: Selection,
    /// What to group faults by (with --allocs: allocations; default line).
    #[arg(long, value_enum)]
    pub by: Option<ReportBy>,
    /// Faults on a call tree as `perf report -g` prints it: from the process and `main` down
    /// to the faulting function (caller, the default), or from it up to its callers (callee).
    #[arg(
        short = 'g',
        long = "call-graph",
        value_enum,
        value_name = "ORDER",
        num_args = 0..=1,
        default_missing_value = "caller",
        require_equals = false
    )]
    pub call_graph: Option<CallOrder>,
    /// With -g: gather the branches under PERCENT of all faults into one line (perf's 0.5;
    /// 0 to 100).
    #[arg(
        long,
        value_name = "PERCENT",
        default_value_t = 0.5,
        value_parser = percent,
        requires = "call_graph"
    )]
    pub percent_limit: f64,
    /// Allocations instead of faults: the top allocation sites by bytes and by count, the heap
    /// peak, leaks, temporary allocations and sizes (needs record --allocs).
    #[arg(long, conflicts_with = "leaks")]
    pub allocs: bool,
    /// Memory still allocated at the end of the recording, by allocating stack, as bcc's
    /// memleak prints it (needs record --allocs).
    #[arg(long)]
    pub leaks: bool,
    /// Leaks: leave out what was allocated less than MS milliseconds before the end.
    #[arg(long = "older-ms", alias = "older", value_name = "MS")]
    pub older_ms: Option<u64>,
    /// How many groups to show (0: all).
    #[arg(long, value_name = "N", default_value_t = 20)]
    pub top: usize,
    /// Output format; csv, json, folded and pprof go to stdout unless --output.
    #[arg(long, value_enum, default_value = "table")]
    pub format: ReportFormat,
    /// Write the report to FILE (a new file or one to replace, never through a symbolic
    /// link) instead of stdout, in any format (with --leaks, a number is refused: the leaks'
    /// age is --older-ms).
    #[arg(short = 'o', long, value_name = "FILE")]
    pub output: Option<PathBuf>,
    /// Also write the original's fltrace-data-report-PID.out (plain `report` always does),
    /// into DIR, else beside the recording, or into the current directory when the
    /// recording's is read-only.
    #[arg(long, value_name = "DIR")]
    pub legacy_csv: Option<Option<PathBuf>>,
    /// Tables print every name and column whole, however wide (by default they fit the
    /// width of the terminal or `COLUMNS`, else 120 columns when stdout is not a terminal).
    #[arg(long)]
    pub wide: bool,
}

#[derive(Debug, Args)]
pub struct VisualizeArgs {
    #[command(flatten)]
    pub selection: Selection,
    /// How frames are labelled; tooltips add the whole function name, its lines and library.
    #[arg(long, value_enum, default_value = "function")]
    pub label: FrameLabel,
    /// Draw the first-touch flamegraph (flamegraph-alloc) by the allocation stack of the block
    /// each fault hit rather than by the faulting stack (needs record --allocs).
    #[arg(long, conflicts_with = "allocs")]
    pub by_allocation: bool,
    /// Draw the allocations instead of the faults (needs record --allocs), for each process:
    /// the heap consumed over time stacked by allocation site with its peak marked and the
    /// resident memory beside it (allocmem), allocations and temporary allocations per
    /// second (allocrate), the allocation sizes (allocsizes), and flamegraphs of the heap
    /// alive at its peak (flamegraph-peak) and of the memory leaked (flamegraph-leaks).
    #[arg(long)]
    pub allocs: bool,
    /// With --allocs: the charts as SVG, or their series as CSV (allocmem, allocsizes) or
    /// JSON (allocmem).
    #[arg(long, value_enum, default_value = "svg", requires = "allocs")]
    pub format: fltrace_render::ChartFormat,
    /// The directory the SVGs go into (default: beside the recording, or the current
    /// directory when the recording's is read-only).
    #[arg(short = 'o', long = "output", value_name = "DIR")]
    pub output: Option<PathBuf>,
}

#[cfg(test)]
mod tests {
    use clap::ValueEnum;

    use super::*;

    /// `fltrace runs` hands a configuration's policy to `record --policy` by its name: that
    /// name must be the flag's value.
    #[test]
    fn policy_names_are_the_flag_values() {
        assert_eq!(EvictionPolicy::value_variants(), EvictionPolicy::ALL);
        for policy in EvictionPolicy::ALL {
            let value = policy.to_possible_value().expect("a value");
            assert_eq!(value.get_name(), policy.name());
        }
    }
}
