//! Each system tool as one command, from its options to its exit status: what it says on
//! stderr while it runs, the report it prints on stdout, and the status (3 for events lost,
//! see [`exit_status`]). The binary parses flags into these options and calls one function.

use std::io::Write;
use std::sync::atomic::Ordering;
use std::time::Duration;

use fltrace_render::TableFormat;

use crate::count::{self, By, Count, CountRequest, FieldFilter, Kind, Remarks};
use crate::memleak::{LeakRequest, LeakWatch};
use crate::output;
use crate::triage::Triage;
use crate::{Error, RING_FULL, Scope, Tool, exit_status};
use fltrace_capture::interrupt_counter;

/// How a counting tool runs and prints: whose events, for how long, in which format, and
/// how many rows.
#[derive(Debug, Clone)]
pub struct Counting {
    /// Whose events.
    pub scope: Scope,
    /// Ending after this long (else at Ctrl-C, SIGTERM or the command's exit).
    pub duration: Option<Duration>,
    /// The format of the report.
    pub format: TableFormat,
    /// Stacks as folded lines instead.
    pub folded: bool,
    /// Rows printed at most.
    pub top: usize,
}

/// What `fltrace count` is asked, besides [`Counting`].
#[derive(Debug, Clone, Default)]
pub struct EventCount {
    /// The event (`syscalls:sys_enter_brk`, `vmscan:*`, `page-faults`, `uprobe:PATH:SYMBOL`).
    pub event: Option<String>,
    /// List the events there are (those matching `event`) instead.
    pub list: bool,
    /// `--by`'s keys, as given.
    pub by: Vec<String>,
    /// `--filter`'s expression.
    pub filter: Option<String>,
    /// One sample every this many events.
    pub sample: Option<u64>,
}

fn count_request(counting: &Counting, events: Vec<count::Event>, by: Vec<By>) -> CountRequest {
    CountRequest {
        events,
        by,
        filter: None,
        scope: counting.scope.clone(),
        duration: counting.duration,
        sample: None,
    }
}

/// `fltrace count`: the events counted, or listed; the exit status.
pub fn count(asked: &EventCount, counting: &Counting) -> Result<u8, Error> {
    if asked.list {
        return list(asked.event.as_deref());
    }
    let Some(event) = &asked.event else {
        return Err(Error::Usage(
            "give an event (see fltrace count --list)".into(),
        ));
    };
    let events = count::expand_events(event)?;
    let by = count::grouping(&events, count::parse_by(&asked.by)?);
    let frame_pointers = if by.contains(&By::UStack) {
        ": user stacks follow frame pointers (name processes with -p or a command for DWARF stacks)"
    } else {
        ""
    };
    let request = CountRequest {
        filter: asked
            .filter
            .as_deref()
            .map(FieldFilter::parse)
            .transpose()?,
        sample: asked.sample,
        ..count_request(counting, events, by)
    };
    let count = Count::start(request, false, interrupt_counter()?)?;
    let in_kernel = format!("counting {event}{frame_pointers}; Ctrl-C to end");
    report(count, Kind::Events, &in_kernel, counting)
}

fn list(pattern: Option<&str>) -> Result<u8, Error> {
    let mut out = std::io::stdout().lock();
    for name in count::list(pattern)? {
        writeln!(out, "{name}").map_err(Error::Output)?;
    }
    Ok(0)
}

/// `fltrace faults`: page faults by stack, one sampled every `sample` when given.
pub fn faults(sample: Option<u64>, counting: &Counting) -> Result<u8, Error> {
    let events = count::fault_events_for(&counting.scope);
    let request = CountRequest {
        sample,
        ..count_request(counting, events, count::fault_grouping())
    };
    let count = Count::start(request, true, interrupt_counter()?)?;
    report(
        count,
        Kind::Faults,
        "counting page faults by stack; user stacks follow frame pointers (code built without \
         them shows only its innermost frame; -p PID or a command unwinds them from DWARF); \
         Ctrl-C to end",
        counting,
    )
}

/// Runs a count to its end: says how it counts, then the remarks the count makes (a rate each
/// second, a summary) around its top rows. `in_kernel` is what a count in the kernel says it
/// counts; one in user space names the processes whose stacks it unwinds from DWARF.
fn report(mut count: Count, kind: Kind, in_kernel: &str, counting: &Counting) -> Result<u8, Error> {
    let remarks = Remarks::new(kind, count.dwarf(), counting.format, counting.folded);
    if count.dwarf() {
        let whom = match count.child_pid() {
            Some(pid) => format!("the command (pid {pid})"),
            None => format!("{:?}", counting.scope.pids),
        };
        eprintln!(
            "fltrace: counting the events of {whom} with user stacks unwound from DWARF \
             (complete without frame pointers); Ctrl-C to end"
        );
    } else {
        eprintln!("fltrace: {in_kernel}");
    }
    let counted = count.run(|per_second| {
        if let Some(line) = remarks.each_second(per_second) {
            eprintln!("fltrace: {line}");
        }
    })?;
    count::write_rows(
        &mut std::io::stdout().lock(),
        counted.top(counting.top),
        counting.format,
        counting.folded,
        counted.loss_footer(),
    )
    .map_err(Error::Output)?;
    match remarks.summary(&counted) {
        Some(line) => eprintln!("fltrace: {line}"),
        // CSV, JSON and folded stacks keep stdout clean: what was lost is said here.
        None if counted.lost_any() || counted.sample_period > 1 => eprintln!(
            "fltrace: {} events{}{}{}{}",
            counted.events,
            count::sampled_note(counted.sample_period),
            output::table_full_note(counted.dropped),
            output::ring_full_note(counted.lost),
            output::stack_table_full_note(counted.stacks_lost)
        ),
        None => {}
    }
    Ok(exit_status(0, u64::from(counted.lost_any())))
}

/// `fltrace ffaults`: faults on files by file (and task name with `by_comm`).
pub fn ffaults(by_comm: bool, counting: &Counting) -> Result<u8, Error> {
    let mut count = Count::file_faults(
        &counting.scope,
        counting.duration,
        by_comm,
        interrupt_counter()?,
    )?;
    eprintln!("fltrace: counting faults on files; Ctrl-C to end");
    let mut files = count.run_by_file()?;
    files.truncate(counting.top);
    crate::ffaults::write_file_faults(&mut std::io::stdout().lock(), &files, counting.format)
        .map_err(Error::Output)?;
    Ok(0)
}

/// `fltrace memleak`: outstanding allocations by stack, every interval.
pub fn memleak(request: LeakRequest, format: TableFormat, folded: bool) -> Result<u8, Error> {
    if request.min_size > request.max_size {
        return Err(Error::Usage(format!(
            "-z {} is above -Z {}: no block could be kept",
            request.min_size, request.max_size
        )));
    }
    let mut leaks = LeakWatch::start(request, interrupt_counter()?)?;
    eprintln!(
        "fltrace: attached to {}; Ctrl-C to end",
        crate::memleak::describe_leak_target(leaks.target(), leaks.tgids())
    );
    let mut lost = 0;
    while let Some(snapshot) = leaks.next_report()? {
        crate::memleak::write_leaks(
            &mut std::io::stdout().lock(),
            &snapshot,
            format,
            folded,
            &crate::clock::local_time_now(),
        )
        .map_err(Error::Output)?;
        lost = snapshot.dropped;
        // CSV and folded stacks have no place for the loss or the blocks left out: said here.
        if folded || format == TableFormat::Csv {
            if lost > 0 {
                eprintln!(
                    "fltrace: {} allocations seen, {lost} lost: {}",
                    snapshot.allocs, snapshot.why
                );
            }
            if snapshot.replaced > 0 {
                eprintln!(
                    "fltrace: {} allocations left out: their images were replaced by an exec, \
                     with their heaps",
                    snapshot.replaced
                );
            }
        }
    }
    leaks.finish()?;
    Ok(exit_status(0, lost))
}

/// `fltrace triage`: the memory checklist after the counters ran for `duration`.
pub fn triage(duration: Duration) -> Result<u8, Error> {
    let stop = interrupt_counter()?;
    let started = || {
        eprintln!(
            "fltrace: watching faults, brk/mmap and reclaim for {:.0} s",
            duration.as_secs_f64()
        )
    };
    let report = Triage::run(duration, &|| stop.load(Ordering::Relaxed) > 0, &started)?;
    crate::triage::write_triage(&mut std::io::stdout().lock(), &report).map_err(Error::Output)?;
    Ok(exit_status(0, report.lost()))
}

/// An event tool (`oomkill`, `mmapsnoop`, ...): says what it cannot see and that it is ready,
/// as bcc's tools do, prints its rows until the end, then says on stderr what CSV and folded
/// stacks have no room for on stdout. The status is the command's, or 3 for events lost.
pub fn event_tool(
    tool: Tool,
    scope: &Scope,
    duration: Option<Duration>,
    format: TableFormat,
) -> Result<u8, Error> {
    let stop = interrupt_counter()?;
    let open = tool.open(scope).map_err(|source| Error::Tool {
        name: tool.name(),
        source: Box::new(source),
    })?;
    let mut err = std::io::stderr().lock();
    for note in open.notes() {
        let _ = writeln!(err, "fltrace: {note}");
    }
    let _ = writeln!(err, "Tracing {}... Hit Ctrl-C to end.", tool.traces());
    drop(err);
    let finished = open.run(&stop, duration, format, std::io::stdout().lock())?;
    let on_stderr = format == TableFormat::Csv || tool.folded();
    if finished.lost > 0 && on_stderr {
        eprintln!(
            "fltrace: {} events seen, {} lost: {RING_FULL}",
            finished.seen, finished.lost
        );
    }
    if finished.unseen > 0 && on_stderr {
        eprintln!(
            "fltrace: {} events not judged: {}",
            finished.unseen,
            crate::hfaults::UNCLASSIFIED
        );
    }
    Ok(exit_status(
        fltrace_capture::shell_status(finished.status),
        finished.lost + finished.unseen,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn counting() -> Counting {
        Counting {
            scope: Scope::default(),
            duration: None,
            format: TableFormat::Table,
            folded: false,
            top: 10,
        }
    }

    /// `count` without an event or --list says what to give, before opening anything.
    #[test]
    fn count_without_an_event_asks_for_one() {
        let error = count(&EventCount::default(), &counting()).unwrap_err();
        assert_eq!(
            error.to_string(),
            "give an event (see fltrace count --list)"
        );
    }

    /// A size window that keeps no block is refused before any probe is attached.
    #[test]
    fn memleak_refuses_a_minimum_above_the_maximum() {
        let request = LeakRequest {
            scope: Scope::default(),
            interval: None,
            count: None,
            top: 10,
            older: Duration::from_millis(500),
            duration: None,
            sample: 1,
            min_size: 4097,
            max_size: 4096,
            addresses: false,
            combined: false,
        };
        let error = memleak(request, TableFormat::Table, false).unwrap_err();
        assert_eq!(
            error.to_string(),
            "-z 4097 is above -Z 4096: no block could be kept"
        );
    }

    /// A tool that cannot open says which tool, then why, as `fltrace: brkstack: ...`.
    #[test]
    fn an_event_tool_that_cannot_open_is_named() {
        let scope = Scope {
            cgroup: Some("/nonexistent-fltrace-cgroup".into()),
            ..Scope::default()
        };
        let tool = Tool::Brkstack { folded: false };
        let error = event_tool(tool, &scope, None, TableFormat::Table).unwrap_err();
        assert_eq!(error.to_string(), "brkstack");
        let cause = std::error::Error::source(&error).map(ToString::to_string);
        assert_eq!(
            cause.as_deref(),
            Some("cannot open cgroup /nonexistent-fltrace-cgroup")
        );
    }
}
