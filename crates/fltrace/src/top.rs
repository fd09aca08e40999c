//! `fltrace top`: records as `record` does, and shows every interval what the faults of the
//! interval add up to, full screen in a terminal or as plain tables (`--batch`).
//!
//! The recorder runs on this thread; the view (counting, symbolizing, drawing, keys) on one of
//! its own, fed by the recorder's live batches. The view asks the recording to stop as Ctrl-C
//! does (`q`, `-n`), and ends once the recording is finished and every batch is in.

use std::io::{IsTerminal, Write};
use std::path::Path;
use std::process::ExitCode;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc::{RecvTimeoutError, TryRecvError};
use std::time::{Duration, Instant};

use anyhow::Context as _;
use fltrace_analyze::{CallSite, FrameRules, LiveTop, TopOptions, TopSnapshot, TopSort, TopView};
use fltrace_capture::{LiveBatch, LiveReceiver, Target, interrupt_counter, live_feed_holding};

use crate::cli::TopArgs;

mod screen;

/// Where the command's output goes while the screen is the view's, in the recording's
/// directory.
pub const OUTPUT_FILE: &str = "fltrace-top-output.txt";

/// Milliseconds the view sleeps after each batch it takes, with a channel of
/// [`SLOW_VIEW_CAPACITY`] batches: a view that falls behind, for tests.
pub const SLOW_VIEW_ENV: &str = "FLTRACE_TOP_SLOW_VIEW_MS";
const SLOW_VIEW_CAPACITY: usize = 4;

/// Rows of a plain table.
const TABLE_ROWS: usize = 20;

/// How the view ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Ended {
    /// The user quit (`q`) or the intervals asked for were shown: the command was stopped.
    Stopped,
    /// The traced processes ended (or a signal stopped the recording).
    Finished,
}

pub fn run(args: TopArgs) -> anyhow::Result<ExitCode> {
    let batch = args.batch || !std::io::stdout().is_terminal();
    // Without -o, a directory of its own, removed at the end.
    let (dir, temporary) = match &args.dir {
        Some(dir) => (dir.clone(), None),
        None => {
            let temp = tempfile::Builder::new()
                .prefix("fltrace-top-")
                .tempdir()
                .context("making a temporary directory for the recording")?;
            (temp.path().to_owned(), Some(temp))
        }
    };
    let (target, mut options) = crate::record::prepare(&args.recorder, &dir, &args.command)?;
    // A view made slow on purpose, for the tests of what a view that falls behind is told.
    let slow_view = std::env::var(SLOW_VIEW_ENV)
        .ok()
        .and_then(|ms| ms.parse().ok())
        .map(Duration::from_millis);
    let (feed, batches) = live_feed_holding(if slow_view.is_some() {
        SLOW_VIEW_CAPACITY
    } else {
        fltrace_capture::live::CAPACITY
    });
    options.live = Some(feed);
    let started_command = matches!(target, Target::Command(_));
    if !batch && started_command {
        options.detached_output = Some(dir.join(OUTPUT_FILE));
    }
    let view = ViewOptions {
        delay: Duration::from_secs_f64(args.delay),
        iterations: args.iterations,
        title: match &target {
            Target::Command(argv) => argv
                .iter()
                .map(|a| a.to_string_lossy())
                .collect::<Vec<_>>()
                .join(" "),
            Target::Pids { pids, .. } => format!(
                "-p {}",
                pids.iter()
                    .map(i32::to_string)
                    .collect::<Vec<_>>()
                    .join(",")
            ),
        },
        top: TopOptions {
            call_site: CallSite::Program,
            frame_rules: FrameRules::with_config(None, None)?,
            include_tracer: false,
            debug: fltrace_analyze::debug_config(&dir, None),
            allocs: args.recorder.allocs,
        },
        slow: slow_view,
    };

    let stop = interrupt_counter()?;
    let viewer = {
        let stop = stop.clone();
        std::thread::Builder::new()
            .name("fltrace-top".into())
            .spawn(move || {
                let started = Instant::now();
                let shown = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                    if batch {
                        batch_view(&batches, &stop, &view)
                    } else {
                        screen::run(&batches, &stop, &view)
                    }
                }));
                if !matches!(shown, Ok(Ok(_))) {
                    // The recording must not go on unseen: stopped as Ctrl-C stops it.
                    stop.fetch_add(1, Ordering::Relaxed);
                    // Whatever is left is read, so the recorder's batches go somewhere.
                    while batches.recv().is_some() {}
                }
                // What the view cost, for bench/top.sh.
                log::info!(
                    "the view used {:.3} s of CPU in {:.3} s",
                    thread_cpu_seconds(),
                    started.elapsed().as_secs_f64()
                );
                shown
            })
            .context("starting the view's thread")?
    };
    let recorded = fltrace_capture::record(&target, &options, &stop, |_| {});
    // The feed's last copy: the view sees the end once every batch is read.
    drop(options);
    let shown = viewer.join();
    let summary = recorded?;
    let ended = match shown {
        Ok(Ok(Ok(ended))) => ended,
        Ok(Ok(Err(e))) => return Err(e.context("the view failed; the recording was finished")),
        Ok(Err(_)) | Err(_) => {
            anyhow::bail!("the view failed (a bug of fltrace); the recording was finished")
        }
    };
    if !batch && started_command {
        show_output_tail(&dir.join(OUTPUT_FILE), temporary.is_none());
    }
    crate::record::say_summary(
        &summary,
        &fltrace_capture::SummaryContext {
            dir: &dir,
            asked_pids: &args.recorder.pid,
            quiet: false,
            interrupted: stop.load(Ordering::Relaxed) > 0,
            max_mb: args.recorder.max_mb,
            peak_rss_mb: fltrace_capture::procfs::own_peak_rss_mb(),
        },
    );
    if let Some(temp) = temporary {
        let path = temp.path().to_owned();
        temp.close()
            .with_context(|| format!("removing the recording in {}", path.display()))?;
        eprintln!(
            "fltrace: the recording in {} is removed (top -o DIR keeps it)",
            path.display()
        );
    }
    Ok(match ended {
        _ if summary.trace_error.is_some() => ExitCode::from(fltrace_capture::RECORDING_FAILED),
        // Ended on purpose, as asked: not the command's failure.
        Ended::Stopped => ExitCode::SUCCESS,
        Ended::Finished => ExitCode::from(summary.record_status()),
    })
}

/// What the view shows and when.
pub(crate) struct ViewOptions {
    pub(crate) delay: Duration,
    pub(crate) iterations: Option<u64>,
    /// What is traced, as the screen's title says it.
    pub(crate) title: String,
    pub(crate) top: TopOptions,
    /// [`SLOW_VIEW_ENV`]'s sleep after each batch.
    pub(crate) slow: Option<Duration>,
}

/// The intervals, counted and ended, as both views step through them: batches applied as
/// they come, an interval ended every `delay`; at the last one asked for, the recording is
/// stopped and that interval ends with it.
pub(crate) struct Intervals<'a> {
    batches: &'a LiveReceiver,
    stop: &'a AtomicUsize,
    pub(crate) top: LiveTop,
    delay: Duration,
    iterations: Option<u64>,
    /// When the interval ends (from the first batch on).
    next: Option<Instant>,
    shown: u64,
    /// The recording was asked to stop by the view.
    pub(crate) stopping: bool,
    slow: Option<Duration>,
    /// Every batch is in.
    pub(crate) finished: bool,
}

impl<'a> Intervals<'a> {
    pub(crate) fn new(
        batches: &'a LiveReceiver,
        stop: &'a AtomicUsize,
        options: &ViewOptions,
    ) -> Intervals<'a> {
        Intervals {
            batches,
            stop,
            top: LiveTop::new(options.top.clone()),
            delay: options.delay,
            iterations: options.iterations,
            next: None,
            shown: 0,
            stopping: false,
            finished: false,
            slow: options.slow,
        }
    }

    /// Applies every batch waiting, for at most `budget` (so that keys are read meanwhile).
    pub(crate) fn drain(&mut self, budget: Duration) {
        let until = Instant::now() + budget;
        while !self.finished && Instant::now() < until {
            match self.batches.try_recv() {
                Ok(batch) => self.apply(batch),
                Err(TryRecvError::Empty) => break,
                Err(TryRecvError::Disconnected) => self.finished = true,
            }
        }
    }

    /// Waits at most `wait` for a batch, applying it.
    pub(crate) fn wait(&mut self, wait: Duration) {
        if self.finished {
            return;
        }
        match self.batches.recv_timeout(wait) {
            Ok(batch) => self.apply(batch),
            Err(RecvTimeoutError::Timeout) => {}
            Err(RecvTimeoutError::Disconnected) => self.finished = true,
        }
    }

    fn apply(&mut self, batch: LiveBatch) {
        let now = Instant::now();
        // The first batch starts the clock: setting the recording up took its time.
        self.next.get_or_insert(now + self.delay);
        self.top.apply(batch, now);
        if let Some(slow) = self.slow {
            std::thread::sleep(slow);
        }
    }

    /// How long until the interval ends (an interval's length before the first batch).
    pub(crate) fn until_next(&self) -> Duration {
        self.next.map_or(self.delay, |next| {
            next.saturating_duration_since(Instant::now())
        })
    }

    /// The interval that ended, if one did: the last one once every batch is in. At the
    /// last interval asked for, the recording is asked to stop first, and the interval ends
    /// with it.
    pub(crate) fn ended(&mut self) -> Option<TopSnapshot> {
        if self.finished {
            return Some(self.top.tick(Instant::now(), true));
        }
        let next = self.next.as_mut()?;
        // Once the traced processes are gone, the next table is the last, covering them to
        // their end: an interval ending meanwhile would leave it empty, without their memory.
        if self.stopping || Instant::now() < *next || self.top.ended() {
            return None;
        }
        if self.iterations.is_some_and(|n| self.shown + 1 >= n) {
            self.stopping = true;
            self.stop.fetch_add(1, Ordering::Relaxed);
            return None;
        }
        // Intervals keep their length even when one was drawn late.
        while *next <= Instant::now() {
            *next += self.delay;
        }
        self.shown += 1;
        Some(self.top.tick(Instant::now(), false))
    }

    /// Asks the recording to stop as Ctrl-C does (once).
    pub(crate) fn request_stop(&mut self) {
        if !self.stopping {
            self.stopping = true;
            self.stop.fetch_add(1, Ordering::Relaxed);
        }
    }
}

/// `--batch`: a plain table on stdout every interval, the last one once the recording is
/// finished.
fn batch_view(
    batches: &LiveReceiver,
    stop: &AtomicUsize,
    options: &ViewOptions,
) -> anyhow::Result<Ended> {
    let mut intervals = Intervals::new(batches, stop, options);
    let width = fltrace_render::report::faults::terminal_width();
    let mut out = std::io::stdout().lock();
    loop {
        intervals.drain(Duration::from_millis(100));
        if let Some(snapshot) = intervals.ended() {
            let table = fltrace_render::top::table(
                &snapshot,
                TopView::Sites,
                TopSort::Rate,
                TABLE_ROWS,
                width,
            );
            // A reader gone (`| head`) stops nothing: the recording is finished all the same.
            let _ = out.write_all(table.as_bytes()).and_then(|()| out.flush());
            for warning in intervals.top.take_warnings() {
                eprintln!("fltrace: warning: {warning}");
            }
            if snapshot.finished {
                break;
            }
        }
        let wait = if intervals.stopping {
            Duration::from_millis(100)
        } else {
            intervals.until_next()
        };
        intervals.wait(wait);
    }
    Ok(if intervals.stopping {
        Ended::Stopped
    } else {
        Ended::Finished
    })
}

/// The last lines the command wrote while the screen was the view's; `kept`: the file stays.
fn show_output_tail(path: &Path, kept: bool) {
    const LINES: usize = 20;
    let Ok(text) = fltrace_trace::files::read_tail(path, 64 * 1024) else {
        return;
    };
    let text = String::from_utf8_lossy(&text);
    let lines: Vec<&str> = text.lines().collect();
    if lines.is_empty() {
        return;
    }
    let shown = &lines[lines.len().saturating_sub(LINES)..];
    let all = if kept {
        format!("; all of it in {}", path.display())
    } else {
        String::new()
    };
    eprintln!(
        "fltrace: the command's output (its last {} lines{all}):",
        shown.len()
    );
    let mut err = std::io::stderr().lock();
    for line in shown {
        let _ = writeln!(err, "{line}");
    }
}

/// The CPU time of the calling thread, in seconds.
fn thread_cpu_seconds() -> f64 {
    fltrace_trace::thread_cpu().as_secs_f64()
}
