//! `fltrace count` and `faults` (and the counting under `ffaults`): which counter counts, and
//! for how long. Named processes grouped by user stack are counted in user space with
//! DWARF-unwound stacks ([`dwarf`], on perf events); everything else in the kernel (the BPF
//! object), with user stacks that follow frame pointers.

use std::sync::Arc;
use std::sync::atomic::AtomicUsize;
use std::time::{Duration, Instant};

use fltrace_render::TableFormat;

use crate::bpf::watch::{POLL, Prepared, Watch};
use crate::bpf::{Counter, CounterSpec, StackNames};
use crate::ffaults::FileFaults;
use crate::output::{ring_full_note, stack_table_full_note, table_full_note};
use crate::{Error, Scope};
use dwarf::{UnwoundCount, UnwoundSpec};

pub(crate) mod dwarf;
mod print;

pub use crate::bpf::event::list;
pub use crate::bpf::{By, Event, FieldFilter, Frame, Row, expand_events, fault_events_for};
pub use print::{folded_line, write_rows};

/// What a count is asked.
#[derive(Debug, Clone)]
pub struct CountRequest {
    /// The events.
    pub events: Vec<Event>,
    /// The grouping (see [`grouping`]).
    pub by: Vec<By>,
    /// Only events whose field compares so.
    pub filter: Option<FieldFilter>,
    /// Whose events.
    pub scope: Scope,
    /// Ending after this long (else at an interrupt or the processes' end).
    pub duration: Option<Duration>,
    /// One sample every this many events, counts scaled (DWARF counts only; None: every
    /// event).
    pub sample: Option<u64>,
}

/// `--by`'s keys: `none` for one total, `comm` when none is given.
pub fn parse_by(list: &[String]) -> Result<Vec<By>, Error> {
    if list.is_empty() {
        return Ok(vec![By::Comm]);
    }
    list.iter()
        .filter(|item| *item != "none")
        .map(|item| By::parse(item).ok_or_else(|| Error::Grouping(item.clone())))
        .collect()
}

/// The grouping of a count of `events`: several events are told apart by probe first.
pub fn grouping(events: &[Event], mut by: Vec<By>) -> Vec<By> {
    if events.len() > 1 && !by.contains(&By::Probe) {
        by.insert(0, By::Probe);
    }
    by
}

/// The grouping of `fltrace faults`: by task, process, user and kernel stack.
pub fn fault_grouping() -> Vec<By> {
    vec![By::Comm, By::Pid, By::UStack, By::KStack]
}

/// What a count found.
#[derive(Debug, Clone, Default)]
pub struct Counted {
    /// The groups, most counted first.
    pub rows: Vec<Row>,
    /// Events counted in all.
    pub events: u64,
    /// Since counting started.
    pub elapsed: Duration,
    /// Samples lost because the ring was full (user-space counts).
    pub lost: u64,
    /// Events not counted because the kernel's table was full (in-kernel counts).
    pub dropped: u64,
    /// Events counted without their user stack because the kernel's stack table was full
    /// (in-kernel counts).
    pub stacks_lost: u64,
    /// One sample every this many events (1: every event counted): counts are estimates
    /// when above 1.
    pub sample_period: u64,
}

impl Counted {
    /// Events per second.
    pub fn rate(&self) -> f64 {
        self.events as f64 / self.elapsed.as_secs_f64().max(1e-9)
    }

    /// Whether anything was lost: samples, events or user stacks.
    pub fn lost_any(&self) -> bool {
        self.lost + self.dropped + self.stacks_lost > 0
    }

    /// What a JSON array ends with when its counts are not all exact:
    /// `{"seen":..,"lost":..,"why":..}` (with `"sampled": N` for a sampled count), the fields of
    /// the system tools' loss line; None when every event was counted.
    pub fn loss_footer(&self) -> Option<serde_json::Value> {
        if !self.lost_any() && self.sample_period <= 1 {
            return None;
        }
        let why: Vec<String> = [
            ring_full_note(self.lost),
            table_full_note(self.dropped),
            stack_table_full_note(self.stacks_lost),
        ]
        .into_iter()
        .filter(|note| !note.is_empty())
        // Each note is " (N ...: why)": the reason alone, without its parentheses.
        .map(|note| {
            note.trim()
                .trim_start_matches('(')
                .trim_end_matches(')')
                .to_owned()
        })
        .collect();
        let mut footer = serde_json::json!({
            "seen": self.events,
            "lost": self.lost + self.dropped + self.stacks_lost,
            "why": why.join("; "),
        });
        if self.sample_period > 1 {
            footer["sampled"] = self.sample_period.into();
        }
        Some(footer)
    }

    /// The `top` most counted groups (all of them when there are fewer).
    pub fn top(&self, top: usize) -> &[Row] {
        &self.rows[..self.rows.len().min(top)]
    }
}

/// The command a count answers, which decides what it says besides its rows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// `fltrace count`: events of any kind.
    Events,
    /// `fltrace faults`: page faults, with their rate each second.
    Faults,
}

/// What a count says on stderr besides its rows: a rate each second and a summary at the
/// end, only beside a table (CSV, JSON and folded stacks stay clean for the next program).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Remarks {
    kind: Kind,
    dwarf: bool,
    shown: bool,
}

impl Remarks {
    /// The remarks of a count of `kind` printed in `format` (or `folded`), by a count in user space
    /// with DWARF stacks (`dwarf`, [`Count::dwarf`]) or in the kernel.
    pub fn new(kind: Kind, dwarf: bool, format: TableFormat, folded: bool) -> Remarks {
        Remarks {
            kind,
            dwarf,
            shown: format == TableFormat::Table && !folded,
        }
    }

    /// The line for one second's rate (`120 faults/s`): `faults` says it, `count` does not.
    pub fn each_second(&self, per_second: f64) -> Option<String> {
        (self.shown && self.kind == Kind::Faults).then(|| format!("{per_second:.0} faults/s"))
    }

    /// The closing line: what was counted in how long, the rate where the count is of faults
    /// or made in user space, and what was lost (samples of a full ring in user space, events
    /// of a full table in the kernel).
    pub fn summary(&self, counted: &Counted) -> Option<String> {
        if !self.shown {
            return None;
        }
        let what = if self.kind == Kind::Faults && !self.dwarf {
            "faults"
        } else {
            "events"
        };
        let rate = if self.kind == Kind::Faults || self.dwarf {
            format!(" ({:.0}/s)", counted.rate())
        } else {
            String::new()
        };
        Some(format!(
            "{} {what} in {:.1} s{rate}{}{}{}{}",
            counted.events,
            counted.elapsed.as_secs_f64(),
            sampled_note(counted.sample_period),
            table_full_note(counted.dropped),
            ring_full_note(counted.lost),
            stack_table_full_note(counted.stacks_lost)
        ))
    }
}

/// The note of a sampled count (empty when every event was counted).
pub fn sampled_note(period: u64) -> String {
    if period > 1 {
        format!(" (sampled 1 in {period}: every count is {period} x its samples, an estimate)")
    } else {
        String::new()
    }
}

/// A count running. A command it started runs on to its end when it is dropped.
pub enum Count {
    /// In user space, with DWARF-unwound user stacks (taken when it runs).
    Unwound(Option<UnwoundCount>, Option<Duration>, Arc<AtomicUsize>),
    /// In the kernel.
    InKernel(Counter, Watch),
}

impl Count {
    /// Opens the counters (starting the command once they are in place). `keep_maps` keeps
    /// the mappings of the processes seen by the kernel, for naming their stacks after they
    /// end.
    pub fn start(
        request: CountRequest,
        keep_maps: bool,
        stop: Arc<AtomicUsize>,
    ) -> Result<Count, Error> {
        let dwarf = request.by.contains(&By::UStack) && request.scope.names_processes();
        if let Some(period) = request.sample
            && (!dwarf || period == 0)
        {
            return Err(Error::Sampling(period));
        }
        if dwarf {
            let counter = UnwoundCount::open(UnwoundSpec {
                events: request.events,
                by: request.by,
                filter: request.filter,
                scope: request.scope.clone(),
                sample_period: request.sample.unwrap_or(1),
            })?;
            return Ok(Count::Unwound(Some(counter), request.duration, stop));
        }
        let scope = request.scope.clone();
        let duration = request.duration;
        Self::in_kernel(&scope, duration, stop, |processes| CounterSpec {
            events: request.events,
            by: request.by,
            second_field: None,
            filter: request.filter,
            processes,
            keep_maps,
        })
    }

    /// Counts faults on files by file (ffaults), in the kernel.
    pub fn file_faults(
        scope: &Scope,
        duration: Option<Duration>,
        by_comm: bool,
        stop: Arc<AtomicUsize>,
    ) -> Result<Count, Error> {
        Self::in_kernel(scope, duration, stop, |processes| {
            crate::ffaults::spec(processes, by_comm)
        })
    }

    fn in_kernel(
        scope: &Scope,
        duration: Option<Duration>,
        stop: Arc<AtomicUsize>,
        spec: impl FnOnce(crate::bpf::ProcessFilter) -> CounterSpec,
    ) -> Result<Count, Error> {
        let prepared = Prepared::new(scope)?;
        let (counter, prepared) =
            prepared.set_up(|processes| Counter::start(spec(processes.clone())))?;
        let maps = Some(counter.process_maps().clone());
        let watch = prepared.start(stop, duration, maps, &scope.pids)?;
        Ok(Count::InKernel(counter, watch))
    }

    /// Whether user stacks are unwound from DWARF (else they follow frame pointers).
    pub fn dwarf(&self) -> bool {
        matches!(self, Count::Unwound(..))
    }

    /// The pid of the command started here, where the count in user space started one.
    pub fn child_pid(&self) -> Option<u32> {
        match self {
            Count::Unwound(counter, ..) => counter.as_ref()?.child_pid(),
            Count::InKernel(..) => None,
        }
    }

    /// Counts until the end; `each_second` is told the events per second of the last one.
    pub fn run(&mut self, mut each_second: impl FnMut(f64)) -> Result<Counted, Error> {
        let mut names = StackNames::new();
        match self {
            Count::Unwound(counter, duration, stop) => {
                let counter = counter.take().ok_or_else(already_run)?;
                let counts = counter.run(
                    stop,
                    *duration,
                    |events, elapsed| each_second(events as f64 / elapsed.as_secs_f64()),
                    &mut names,
                )?;
                Ok(Counted {
                    rows: counts.rows,
                    events: counts.events,
                    elapsed: counts.elapsed,
                    lost: counts.lost,
                    dropped: 0,
                    stacks_lost: 0,
                    sample_period: counts.sample_period,
                })
            }
            Count::InKernel(counter, watch) => {
                let mut last = (Instant::now(), 0u64);
                while !watch.over() {
                    std::thread::sleep(POLL);
                    if last.0.elapsed() >= Duration::from_secs(1) {
                        let events = counter.events();
                        each_second((events - last.1) as f64 / last.0.elapsed().as_secs_f64());
                        last = (Instant::now(), events);
                    }
                }
                let snapshot = counter.snapshot(&mut names)?;
                Ok(Counted {
                    rows: snapshot.rows,
                    events: snapshot.events,
                    elapsed: snapshot.elapsed,
                    lost: 0,
                    dropped: snapshot.dropped,
                    stacks_lost: snapshot.ustacks_lost,
                    sample_period: 1,
                })
            }
        }
    }

    /// Counts until the end, by file (a count started with [`Count::file_faults`]).
    pub fn run_by_file(&mut self) -> Result<Vec<FileFaults>, Error> {
        match self {
            Count::InKernel(counter, watch) => {
                watch.wait();
                let snapshot = counter.snapshot(&mut StackNames::new())?;
                Ok(crate::ffaults::by_file(&snapshot, counter.process_maps()))
            }
            Count::Unwound(..) => Err(Error::Missing {
                what: "file faults counted in user space".into(),
                detail: String::new(),
            }),
        }
    }
}

fn already_run() -> Error {
    Error::Missing {
        what: "a count that has not run yet".into(),
        detail: String::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn by_defaults_to_comm_and_none_means_one_total() {
        assert_eq!(parse_by(&[]).ok(), Some(vec![By::Comm]));
        assert_eq!(parse_by(&["none".into()]).ok(), Some(vec![]));
        assert_eq!(
            parse_by(&["pid".into(), "ustack".into(), "field:len".into()]).ok(),
            Some(vec![By::Pid, By::UStack, By::Field("len".into())])
        );
        let wrong = parse_by(&["stack".into()]).expect_err("not a key");
        assert_eq!(
            wrong.to_string(),
            "--by stack: expected comm, pid, tid, ustack, kstack, probe, field:NAME or none"
        );
    }

    fn counted(rows: u64, events: u64, millis: u64, lost: u64, dropped: u64) -> Counted {
        Counted {
            rows: (0..rows)
                .map(|i| Row {
                    pid: None,
                    tid: None,
                    comm: None,
                    probe: None,
                    field: None,
                    field2: None,
                    ustack: None,
                    kstack: None,
                    count: rows - i,
                })
                .collect(),
            events,
            elapsed: Duration::from_millis(millis),
            lost,
            dropped,
            stacks_lost: 0,
            sample_period: 1,
        }
    }

    #[test]
    fn json_arrays_end_with_what_was_lost_or_sampled() {
        assert_eq!(counted(1, 10, 1, 0, 0).loss_footer(), None);
        let mut lossy = counted(1, 2500, 2000, 3, 7);
        assert_eq!(
            lossy.loss_footer(),
            Some(serde_json::json!({
                "seen": 2500,
                "lost": 10,
                "why": "3 samples lost: the ring was full; fewer processes or --by without \
                        ustack lose none; 7 not counted: the table was full",
            }))
        );
        lossy.lost = 0;
        lossy.dropped = 0;
        lossy.sample_period = 16;
        assert_eq!(
            lossy.loss_footer(),
            Some(serde_json::json!({"seen": 2500, "lost": 0, "why": "", "sampled": 16}))
        );
    }

    #[test]
    fn top_takes_the_first_rows_or_all() {
        let five = counted(5, 15, 1000, 0, 0);
        let counts = |rows: &[Row]| rows.iter().map(|r| r.count).collect::<Vec<_>>();
        assert_eq!(counts(five.top(2)), [5, 4]);
        assert_eq!(counts(five.top(9)), [5, 4, 3, 2, 1]);
        assert_eq!(five.top(0).len(), 0);
    }

    /// The three summaries `count` and `faults` print, and the rate lines only `faults` does.
    #[test]
    fn remarks_are_a_tables_and_say_what_each_count_is() {
        let table = |kind, dwarf| Remarks::new(kind, dwarf, TableFormat::Table, false);
        let in_kernel = counted(1, 2500, 2000, 0, 7);
        let unwound = counted(1, 2500, 2000, 3, 0);
        assert_eq!(
            table(Kind::Events, false).summary(&in_kernel).as_deref(),
            Some("2500 events in 2.0 s (7 not counted: the table was full)")
        );
        assert_eq!(
            table(Kind::Faults, false).summary(&in_kernel).as_deref(),
            Some("2500 faults in 2.0 s (1250/s) (7 not counted: the table was full)")
        );
        let lost = " (3 samples lost: the ring was full; fewer processes or --by without \
                    ustack lose none)";
        for kind in [Kind::Events, Kind::Faults] {
            assert_eq!(
                table(kind, true).summary(&unwound),
                Some(format!("2500 events in 2.0 s (1250/s){lost}"))
            );
        }
        assert_eq!(
            table(Kind::Events, false)
                .summary(&counted(0, 0, 0, 0, 0))
                .as_deref(),
            Some("0 events in 0.0 s")
        );
        assert_eq!(
            table(Kind::Faults, true).each_second(99.6).as_deref(),
            Some("100 faults/s")
        );
        assert_eq!(table(Kind::Events, true).each_second(99.6), None);
        assert_eq!(table(Kind::Events, false).each_second(99.6), None);
        for quiet in [
            Remarks::new(Kind::Faults, false, TableFormat::Csv, false),
            Remarks::new(Kind::Faults, true, TableFormat::Json, false),
            Remarks::new(Kind::Faults, false, TableFormat::Table, true),
        ] {
            assert_eq!(quiet.each_second(10.0), None);
            assert_eq!(quiet.summary(&in_kernel), None);
        }
    }

    #[test]
    fn several_events_are_told_apart_by_probe() {
        let event = |name: &str| Event::Tracepoint {
            category: "kmem".into(),
            name: name.into(),
        };
        let one = vec![event("kmalloc")];
        let two = vec![event("kmalloc"), event("kfree")];
        assert_eq!(grouping(&one, vec![By::Comm]), [By::Comm]);
        assert_eq!(grouping(&two, vec![By::Comm]), [By::Probe, By::Comm]);
        assert_eq!(
            grouping(&two, vec![By::Comm, By::Probe]),
            [By::Comm, By::Probe]
        );
    }
}
