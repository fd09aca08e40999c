//! What `fltrace record` says at its end, from a recording's [`RecordingOutcome`]: the lines, in the
//! order printed, for the binary to write after `fltrace: `.

use std::path::Path;

use crate::{Ending, Progress, RecordingOutcome};

/// What the lines depend on besides the [`RecordingOutcome`]: the request and the recorder's own state.
#[derive(Debug, Clone, Copy)]
pub struct SummaryContext<'a> {
    /// The recording's directory.
    pub dir: &'a Path,
    /// The processes `-p` asked for (none: a command was run).
    pub asked_pids: &'a [i32],
    /// `-q`: only warnings and errors.
    pub quiet: bool,
    /// Whether the user interrupted the recording.
    pub interrupted: bool,
    /// `-M`, for the far-memory error.
    pub max_mb: Option<u64>,
    /// The recorder's peak resident memory, MB.
    pub peak_rss_mb: u64,
}

/// One line of the summary.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SummaryLine {
    /// Said on stderr.
    Said(String),
    /// Information for `-v` only (through the `log` facade).
    Info(String),
}

impl Progress {
    /// The live status while recording: `12 faults, 3400/s, 0 lost`.
    pub fn status(&self) -> String {
        format!(
            "{} faults, {:.0}/s, {} lost",
            self.faults,
            self.faults_per_second(),
            self.lost
        )
    }
}

/// For each pid reused within the run: which pids its later processes are filed as.
fn reused_lines(pids: &[u32]) -> Vec<String> {
    let mut later: std::collections::BTreeMap<u32, Vec<u32>> = Default::default();
    for &pid in pids {
        if let (os_pid, 1..) = fltrace_trace::files::reused_pid(pid) {
            later.entry(os_pid).or_default().push(pid);
        }
    }
    later
        .into_iter()
        .map(|(os_pid, filed)| {
            let filed: Vec<String> = filed.iter().map(u32::to_string).collect();
            format!(
                "pid {os_pid} was reused within the run: {} later process{} filed as {} (report -p)",
                filed.len(),
                if filed.len() == 1 { "" } else { "es" },
                filed.join(", ")
            )
        })
        .collect()
}

impl RecordingOutcome {
    /// The lines `fltrace record` ends with, in order.
    pub fn lines(&self, context: &SummaryContext) -> Vec<SummaryLine> {
        let mut said = Vec::new();
        let quiet = context.quiet;
        if !self.attached.is_empty() && !quiet {
            said.push(attached_line(&self.attached));
        }
        if !quiet {
            said.push(format!(
                "{} from {} process{}, {} lost, {} with truncated stacks, recorder peak {} MiB; trace in {}",
                plural(self.faults, "fault"),
                self.pids.len(),
                if self.pids.len() == 1 { "" } else { "es" },
                self.lost,
                truncated_share(self.stacks_truncated, self.faults),
                context.peak_rss_mb,
                context.dir.display()
            ));
        }
        if !quiet {
            said.extend(reused_lines(&self.pids));
        }
        if context.interrupted {
            // Interrupted: say how the command ended, the exit status being fltrace's own too.
            let ended = match (context.asked_pids, self.ending()) {
                ([pid], _) if self.attached.len() <= 1 => {
                    format!("process {pid} was left running")
                }
                ([_, ..], _) => "the attached processes were left running".to_owned(),
                ([], Ending::Exited(code)) => format!("the command exited with status {code}"),
                ([], Ending::Killed(signal)) => {
                    format!("the command was killed by signal {signal}")
                }
                ([], Ending::Unknown) => "the command ended".to_owned(),
            };
            said.push(format!("interrupted; {ended}; the recording is complete"));
        }
        if !context.interrupted
            && context.asked_pids.is_empty()
            && self.trace_error.is_none()
            && let Ending::Killed(signal) = self.ending()
        {
            said.push(format!("the command was killed by {}", signal_name(signal)));
        }
        if self.far_memory_exhausted {
            said.push(format!(
                "error: the program ran out of far memory: it needs more than -M {} MiB",
                context.max_mb.unwrap_or(0)
            ));
        }
        said.extend(self.far_memory_lines());
        if let Some(allocs) = &self.allocs
            && !quiet
        {
            said.push(format!(
                "{} allocation calls with {} distinct stacks{}",
                allocs.events,
                allocs.stacks,
                match &allocs.probed {
                    Some(probed) => format!(" (uprobes on {probed})"),
                    None => String::new(),
                }
            ));
            if let Some(after) = allocs.stopped_after_ns {
                said.push(format!(
                    "warning: an allocation log could not grow (is its file system full?): tracing stopped {:.3} s after the process's first call; {} calls kept, later ones not recorded",
                    after as f64 / 1e9,
                    allocs.events
                ));
            }
            if (allocs.dropped > 0 && allocs.stopped_after_ns.is_none())
                || allocs.corrupt_chunks > 0
            {
                said.push(format!(
                    "warning: {} allocation records could not be written and {} log chunks were damaged",
                    allocs.dropped, allocs.corrupt_chunks
                ));
            }
            if allocs.refused_stacks > 0 {
                said.push(format!(
                    "warning: {} allocation stack definitions refused (the stacks kept per process are capped); their calls are kept without a stack",
                    allocs.refused_stacks
                ));
            }
        }
        if let Some(access) = self.access
            && !quiet
        {
            said.push(format!(
                "{} access samples (fltrace-data-access-<pid>.parquet), {} lost, sampling throttled {} times{}",
                access.samples,
                access.lost,
                access.throttled,
                if access.throttled > 0 {
                    ": lower --freq"
                } else {
                    ""
                }
            ));
        }
        let mut lines: Vec<SummaryLine> = said.drain(..).map(SummaryLine::Said).collect();
        if let Some(cache) = &self.cache {
            // What the cache did is `-v` information: the user asked for a recording, not for
            // the cache's news. Its failures are warnings.
            let stored = cache.linked + cache.copied + cache.pruned > 0;
            if stored {
                lines.push(SummaryLine::Info(format!(
                    "build-ID cache {}: {} files with frames ({} there already, {} linked, {} copied: {} bytes; {} without frames not kept), {:.1} ms opening, {:.1} ms storing{}",
                    cache.root.display(),
                    cache.files,
                    cache.present,
                    cache.linked,
                    cache.copied,
                    cache.copied_bytes,
                    cache.without_frames,
                    cache.open_time.as_secs_f64() * 1e3,
                    cache.store_time.as_secs_f64() * 1e3,
                    if cache.pruned > 0 {
                        format!(", {} older files pruned", cache.pruned)
                    } else {
                        String::new()
                    }
                )));
            } else {
                lines.push(SummaryLine::Info(format!(
                    "build-ID cache {}: all {} files there already",
                    cache.root.display(),
                    cache.files
                )));
            }
            for failed in &cache.failed {
                said.push(format!("warning: not kept in the build-ID cache: {failed}"));
            }
        }
        let dropped = self
            .lost
            .saturating_sub(self.lost_late)
            .saturating_sub(self.lost_unfiled);
        if dropped > 0 {
            said.push(format!(
                "warning: the kernel dropped {dropped} fault records; try a larger --buffer-mb"
            ));
        }
        if self.lost_late > 0 {
            said.push(format!(
                "warning: {} faults were read after their process's trace was closed and are not in it",
                self.lost_late
            ));
        }
        if self.lost_unfiled > 0 {
            said.push(format!(
                "warning: {} faults are not recorded: their processes got a pid reused more than 511 times within the run",
                self.lost_unfiled
            ));
        }
        if let Some(error) = &self.trace_error {
            said.extend(self.partial_trace_lines(error, context.dir));
        }
        lines.extend(said.into_iter().map(SummaryLine::Said));
        lines
    }

    /// Under far memory, what was not under the limit: each process the runtime never entered
    /// (an error: none of its memory was emulated), and the program's memory outside the
    /// region (summed over its processes at their peaks) when over 1% of its peak, with the
    /// process that had the most and that process's largest such mapping.
    fn far_memory_lines(&self) -> Vec<String> {
        let mut said = Vec::new();
        for (pid, executable) in &self.far_unreached {
            said.push(format!(
                "error: far memory was not emulated in process {pid} ({executable}): the runtime \
                 was never loaded into it (a statically linked program, or one the kernel runs \
                 set-user-ID, ignores LD_PRELOAD), so none of its memory was under -L"
            ));
        }
        let outside: u64 = self.far_outside.iter().map(|(_, o)| o.peak.bytes).sum();
        let peak: u64 = self.far_outside.iter().map(|(_, o)| o.program_peak).sum();
        let most = self
            .far_outside
            .iter()
            .max_by_key(|(_, o)| o.peak.bytes)
            .filter(|_| outside * 100 > peak);
        if let Some((pid, worst)) = most {
            let largest = worst.peak.largest.as_ref().map_or(String::new(), |m| {
                format!(
                    ", whose largest such mapping is {} at {:#x}-{:#x} ({})",
                    mb(m.bytes),
                    m.range.start,
                    m.range.end,
                    if m.name.is_empty() {
                        "anonymous, mapped past the interposer: by system call, or by code \
                         the runtime cannot see"
                    } else {
                        m.name.as_str()
                    }
                )
            });
            said.push(format!(
                "warning: {} of the program's memory ({:.1}% of its peak of {}) was outside far \
                 memory and not under -L (memory_unemulated in the stats files): the most in \
                 process {pid} ({}){largest}",
                mb(outside),
                outside as f64 * 100.0 / peak.max(1) as f64,
                mb(peak),
                mb(worst.peak.bytes),
            ));
        }
        said
    }

    /// After a write error: the error, what of the trace reads back, and how the program
    /// ended (it ran to its end untraced).
    fn partial_trace_lines(&self, error: &str, dir: &Path) -> Vec<String> {
        let mut said = vec![format!(
            "error: the trace could not be written completely: {error}"
        )];
        if let Some(stopped) = self.trace_stopped {
            said.push(format!(
                "tracing stopped {:.3} s into the run; the program ran on untraced",
                stopped.as_secs_f64()
            ));
        }
        let kept: Vec<String> = fltrace_trace::files::kept(dir, &self.traced_pids())
            .iter()
            .map(ToString::to_string)
            .collect();
        said.push(format!(
            "kept: {}",
            if kept.is_empty() {
                "nothing".to_owned()
            } else {
                kept.join(", ")
            }
        ));
        match self.ending() {
            Ending::Exited(code) => said.push(format!("the program exited with status {code}")),
            Ending::Killed(signal) => {
                said.push(format!("the program was killed by signal {signal}"))
            }
            Ending::Unknown => {}
        }
        said
    }
}

/// `SIGSEGV` for 11: the name a user looks up, or the number for one without a name here.
pub fn signal_name(signal: i32) -> String {
    let name = match signal {
        libc::SIGHUP => "SIGHUP",
        libc::SIGINT => "SIGINT",
        libc::SIGQUIT => "SIGQUIT",
        libc::SIGILL => "SIGILL",
        libc::SIGTRAP => "SIGTRAP",
        libc::SIGABRT => "SIGABRT",
        libc::SIGBUS => "SIGBUS",
        libc::SIGFPE => "SIGFPE",
        libc::SIGKILL => "SIGKILL",
        libc::SIGUSR1 => "SIGUSR1",
        libc::SIGSEGV => "SIGSEGV",
        libc::SIGUSR2 => "SIGUSR2",
        libc::SIGPIPE => "SIGPIPE",
        libc::SIGALRM => "SIGALRM",
        libc::SIGTERM => "SIGTERM",
        libc::SIGSTKFLT => "SIGSTKFLT",
        libc::SIGXCPU => "SIGXCPU",
        libc::SIGXFSZ => "SIGXFSZ",
        libc::SIGVTALRM => "SIGVTALRM",
        libc::SIGPROF => "SIGPROF",
        libc::SIGSYS => "SIGSYS",
        _ => return format!("signal {signal}"),
    };
    name.to_owned()
}

/// Which running processes `-p` attached to: `attached to 3 processes: 12 (postgres), ...`.
fn attached_line(attached: &[(u32, String)]) -> String {
    let names: Vec<String> = attached
        .iter()
        .map(|(pid, comm)| format!("{pid} ({comm})"))
        .collect();
    format!(
        "attached to {} process{}: {}",
        attached.len(),
        if attached.len() == 1 { "" } else { "es" },
        names.join(", ")
    )
}

/// `64.0 MB` (MiB, as `-L` and `-M` count).
fn mb(bytes: u64) -> String {
    format!("{:.1} MB", bytes as f64 / (1 << 20) as f64)
}

/// `1 fault`, `2 faults`.
fn plural(n: u64, thing: &str) -> String {
    if n == 1 {
        format!("{n} {thing}")
    } else {
        format!("{n} {thing}s")
    }
}

/// `3 faults (1.5%)`: truncated stacks and their share of all faults.
fn truncated_share(truncated: u64, total: u64) -> String {
    let percent = if total == 0 {
        0.0
    } else {
        truncated as f64 * 100.0 / total as f64
    };
    format!(
        "{truncated} fault{} ({percent:.1}%)",
        if truncated == 1 { "" } else { "s" },
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn summary() -> RecordingOutcome {
        RecordingOutcome {
            root_pid: 10,
            pids: vec![10, 11],
            attached: Vec::new(),
            exit_code: Some(0),
            signal: None,
            faults: 200,
            lost: 0,
            lost_late: 0,
            lost_unfiled: 0,
            stacks_truncated: 3,
            far_memory_exhausted: false,
            far_unreached: Vec::new(),
            far_outside: Vec::new(),
            allocs: None,
            access: None,
            trace_error: None,
            trace_stopped: None,
            cache: None,
        }
    }

    fn context(dir: &Path) -> SummaryContext<'_> {
        SummaryContext {
            dir,
            asked_pids: &[],
            quiet: false,
            interrupted: false,
            max_mb: None,
            peak_rss_mb: 42,
        }
    }

    fn said(lines: Vec<SummaryLine>) -> Vec<String> {
        lines
            .into_iter()
            .map(|line| match line {
                SummaryLine::Said(text) => text,
                SummaryLine::Info(text) => format!("(info) {text}"),
            })
            .collect()
    }

    /// A plain run: one line with the counts and where the trace is.
    #[test]
    fn a_plain_run_says_its_counts_and_directory() {
        let dir = Path::new("out");
        assert_eq!(
            said(summary().lines(&context(dir))),
            [
                "200 faults from 2 processes, 0 lost, 3 faults (1.5%) with truncated stacks, recorder peak 42 MiB; trace in out"
            ]
        );
        assert!(
            summary()
                .lines(&SummaryContext {
                    quiet: true,
                    ..context(dir)
                })
                .is_empty()
        );
    }

    /// Far memory: a process the runtime never entered is an error; memory outside the
    /// region is said with its share and its largest mapping, over 1% of the peak only.
    #[test]
    fn far_memory_outside_the_limit_is_said() {
        use crate::unemulated::{Outside, OutsideMapping, OutsidePeak};
        let outside = |bytes, program_peak| OutsidePeak {
            peak: Outside {
                bytes,
                largest: Some(OutsideMapping {
                    range: 0x7f00_0000_0000..0x7f00_0400_0000,
                    bytes: 64 << 20,
                    name: String::new(),
                }),
            },
            program_peak,
        };
        let s = RecordingOutcome {
            far_unreached: vec![(11, "/tmp/static-go".to_owned())],
            far_outside: vec![
                (10, outside(66 << 20, 640 << 20)),
                (11, outside(1 << 20, 1 << 20)),
            ],
            ..summary()
        };
        let lines = said(s.lines(&SummaryContext {
            quiet: true,
            ..context(Path::new("out"))
        }));
        assert_eq!(
            lines,
            [
                "error: far memory was not emulated in process 11 (/tmp/static-go): the runtime was never loaded into it (a statically linked program, or one the kernel runs set-user-ID, ignores LD_PRELOAD), so none of its memory was under -L",
                "warning: 67.0 MB of the program's memory (10.5% of its peak of 641.0 MB) was outside far memory and not under -L (memory_unemulated in the stats files): the most in process 10 (66.0 MB), whose largest such mapping is 64.0 MB at 0x7f0000000000-0x7f0004000000 (anonymous, mapped past the interposer: by system call, or by code the runtime cannot see)",
            ]
        );
        // At 1% or less of the peak: nothing said.
        let small = RecordingOutcome {
            far_outside: vec![(10, outside(6 << 20, 600 << 20))],
            ..summary()
        };
        assert!(said(small.lines(&context(Path::new("out")))).len() == 1);
        assert_eq!(s.record_status(), crate::RECORDING_FAILED);
    }

    /// A command killed by a signal is named by its signal; losses and far memory are warned
    /// about even with -q.
    #[test]
    fn kills_losses_and_far_memory_are_said_even_quiet() {
        let dir = Path::new("out");
        let s = RecordingOutcome {
            exit_code: None,
            signal: Some(libc::SIGSEGV),
            lost: 7,
            far_memory_exhausted: true,
            ..summary()
        };
        let context = SummaryContext {
            quiet: true,
            max_mb: Some(64),
            ..context(dir)
        };
        assert_eq!(
            said(s.lines(&context)),
            [
                "the command was killed by SIGSEGV",
                "error: the program ran out of far memory: it needs more than -M 64 MiB",
                "warning: the kernel dropped 7 fault records; try a larger --buffer-mb",
            ]
        );
        assert_eq!(signal_name(77), "signal 77");
    }

    /// Faults read after their process's files were closed are lost and said apart from
    /// those the kernel dropped, even with -q.
    #[test]
    fn faults_too_late_for_their_process_are_said_apart() {
        let dir = Path::new("out");
        let s = RecordingOutcome {
            lost: 10,
            lost_late: 2,
            lost_unfiled: 3,
            ..summary()
        };
        let quiet = SummaryContext {
            quiet: true,
            ..context(dir)
        };
        assert_eq!(
            said(s.lines(&quiet)),
            [
                "warning: the kernel dropped 5 fault records; try a larger --buffer-mb",
                "warning: 2 faults were read after their process's trace was closed and are not in it",
                "warning: 3 faults are not recorded: their processes got a pid reused more than 511 times within the run",
            ]
        );
    }

    /// A pid reused within the run: the summary names the pids its later processes are
    /// filed as.
    #[test]
    fn reused_pids_are_named_with_their_later_processes() {
        let dir = Path::new("out");
        let limit = fltrace_trace::files::PID_LIMIT;
        let s = RecordingOutcome {
            pids: vec![10, 11, 12, 11 + limit, 12 + limit, 12 + 2 * limit],
            ..summary()
        };
        let lines = said(s.lines(&context(dir)));
        assert_eq!(
            lines[1..3],
            [
                "pid 11 was reused within the run: 1 later process filed as 4194315 (report -p)",
                "pid 12 was reused within the run: 2 later processes filed as 4194316, 8388620 (report -p)",
            ]
        );
    }

    /// Interrupted with -p: the attached process was left running; the attachment is named.
    #[test]
    fn an_interrupted_attach_leaves_the_process_running() {
        let dir = Path::new("out");
        let s = RecordingOutcome {
            attached: vec![(12, "postgres".to_owned())],
            pids: vec![12],
            faults: 1,
            stacks_truncated: 0,
            ..summary()
        };
        let context = SummaryContext {
            asked_pids: &[12],
            interrupted: true,
            ..context(dir)
        };
        assert_eq!(
            said(s.lines(&context)),
            [
                "attached to 1 process: 12 (postgres)",
                "1 fault from 1 process, 0 lost, 0 faults (0.0%) with truncated stacks, recorder peak 42 MiB; trace in out",
                "interrupted; process 12 was left running; the recording is complete",
            ]
        );
    }

    /// A cache that had every file is `-v` information, before the cache's failures.
    #[test]
    fn a_cache_with_nothing_new_is_information() {
        let dir = Path::new("out");
        let s = RecordingOutcome {
            cache: Some(crate::CacheSummary {
                root: "/c".into(),
                files: 5,
                failed: vec!["x: gone".to_owned()],
                open_time: Duration::from_millis(2),
                ..Default::default()
            }),
            ..summary()
        };
        let context = SummaryContext {
            quiet: true,
            ..context(dir)
        };
        assert_eq!(
            said(s.lines(&context)),
            [
                "(info) build-ID cache /c: all 5 files there already",
                "warning: not kept in the build-ID cache: x: gone",
            ]
        );
    }

    /// Allocation figures with their warnings.
    #[test]
    fn allocation_figures_and_their_warnings() {
        let dir = Path::new("out");
        let s = RecordingOutcome {
            allocs: Some(crate::Converted {
                events: 9,
                stacks: 2,
                dropped: 1,
                refused_stacks: 4,
                ..Default::default()
            }),
            ..summary()
        };
        let lines = said(s.lines(&context(dir)));
        assert_eq!(
            lines[1..],
            [
                "9 allocation calls with 2 distinct stacks",
                "warning: 1 allocation records could not be written and 0 log chunks were damaged",
                "warning: 4 allocation stack definitions refused (the stacks kept per process are capped); their calls are kept without a stack",
            ]
        );
    }
}
