//! `fltrace top` in a terminal: the full-screen view (ratatui over crossterm) and its keys.
//!
//! The terminal is restored on every way out: the guard's drop on a return or an error,
//! ratatui's panic hook on a panic.

use std::sync::atomic::AtomicUsize;
use std::time::Duration;

use fltrace_analyze::{TopRow, TopSnapshot, TopSort, TopView};
use fltrace_render::top::{cells, columns, figure_columns, figures, headline};
use ratatui::crossterm::event::{self, Event, KeyCode, KeyEventKind, KeyModifiers};
use ratatui::layout::{Constraint, Layout};
use ratatui::style::{Modifier, Style};
use ratatui::text::Line;
use ratatui::widgets::{Cell, Paragraph, Row, Table};
use ratatui::{DefaultTerminal, Frame};

use super::{Ended, Intervals, ViewOptions};

/// How long a key is waited for before batches are read again: the view keeps up with the
/// recorder between keys.
const KEY_POLL: Duration = Duration::from_millis(20);

/// Leaves the full screen when dropped.
struct Restore;

impl Drop for Restore {
    fn drop(&mut self) {
        ratatui::restore();
    }
}

/// What the person chose: view, order, filter, scroll, pause.
#[derive(Debug, Default)]
struct Choices {
    view: TopView,
    sort: TopSort,
    filter: String,
    /// The filter being typed after `/`, until Enter or Esc.
    typing: Option<String>,
    scroll: usize,
    paused: bool,
}

/// Runs the view until the recording is finished (`q` asks it to stop first).
pub(super) fn run(
    batches: &fltrace_capture::LiveReceiver,
    stop: &AtomicUsize,
    options: &ViewOptions,
) -> anyhow::Result<Ended> {
    let mut terminal = ratatui::try_init()?;
    let _restore = Restore;
    let mut intervals = Intervals::new(batches, stop, options);
    let mut choices = Choices::default();
    // The screen shown: the last interval's, kept while paused.
    let mut shown: Option<TopSnapshot> = None;
    let mut warning: Option<String> = None;
    let mut quit = false;
    let mut dirty = true;
    loop {
        intervals.drain(Duration::from_millis(50));
        if let Some(snapshot) = intervals.ended() {
            if let Some(last) = intervals.top.take_warnings().pop() {
                warning = Some(last);
            }
            let finished = snapshot.finished;
            if !choices.paused || shown.is_none() || finished {
                shown = Some(snapshot);
                dirty = true;
            }
            if finished {
                break;
            }
        }
        if dirty {
            draw(
                &mut terminal,
                options,
                &intervals,
                &choices,
                shown.as_ref(),
                warning.as_deref(),
            )?;
            dirty = false;
        }
        if event::poll(KEY_POLL)? {
            match event::read()? {
                Event::Key(key) if key.kind != KeyEventKind::Release => {
                    let rows = shown.as_ref().map_or(0, |s| {
                        s.rows(choices.view, choices.sort, &choices.filter).len()
                    });
                    let allocs = options.top.allocs;
                    if key_pressed(&mut choices, key.code, key.modifiers, rows, allocs) {
                        quit = true;
                        intervals.request_stop();
                    }
                    dirty = true;
                }
                Event::Resize(..) => dirty = true,
                _ => {}
            }
        }
    }
    // The last screen, as the recording finished, for a moment unless the person quit.
    if !quit {
        draw(
            &mut terminal,
            options,
            &intervals,
            &choices,
            shown.as_ref(),
            warning.as_deref(),
        )?;
    }
    Ok(if intervals.stopping {
        Ended::Stopped
    } else {
        Ended::Finished
    })
}

/// Acts on a key; returns whether it asks to quit.
/// `allocs`: allocations are traced, and `v` goes through their view too.
fn key_pressed(
    choices: &mut Choices,
    code: KeyCode,
    modifiers: KeyModifiers,
    rows: usize,
    allocs: bool,
) -> bool {
    if let Some(typed) = &mut choices.typing {
        match code {
            KeyCode::Enter => {
                choices.filter = std::mem::take(typed);
                choices.typing = None;
                choices.scroll = 0;
            }
            KeyCode::Esc => choices.typing = None,
            KeyCode::Backspace => {
                typed.pop();
            }
            KeyCode::Char('c') if modifiers.contains(KeyModifiers::CONTROL) => return true,
            KeyCode::Char(c) => typed.push(c),
            _ => {}
        }
        return false;
    }
    const PAGE: usize = 10;
    let last = rows.saturating_sub(1);
    match code {
        KeyCode::Char('q') | KeyCode::Esc => return true,
        KeyCode::Char('c') if modifiers.contains(KeyModifiers::CONTROL) => return true,
        KeyCode::Char('p') => choices.paused = !choices.paused,
        KeyCode::Char('s') => choices.sort = choices.sort.next(),
        KeyCode::Char('v') => {
            choices.view = choices.view.next(allocs);
            choices.scroll = 0;
        }
        KeyCode::Char('/') => choices.typing = Some(choices.filter.clone()),
        KeyCode::Down => choices.scroll = (choices.scroll + 1).min(last),
        KeyCode::Up => choices.scroll = choices.scroll.saturating_sub(1),
        KeyCode::PageDown => choices.scroll = (choices.scroll + PAGE).min(last),
        KeyCode::PageUp => choices.scroll = choices.scroll.saturating_sub(PAGE),
        KeyCode::Home => choices.scroll = 0,
        KeyCode::End => choices.scroll = last,
        _ => {}
    }
    false
}

fn draw(
    terminal: &mut DefaultTerminal,
    options: &ViewOptions,
    intervals: &Intervals<'_>,
    choices: &Choices,
    shown: Option<&TopSnapshot>,
    warning: Option<&str>,
) -> anyhow::Result<()> {
    terminal.draw(|frame| screen(frame, options, intervals, choices, shown, warning))?;
    Ok(())
}

/// The whole screen: title, headline, the view's line, the table, the status line.
fn screen(
    frame: &mut Frame<'_>,
    options: &ViewOptions,
    intervals: &Intervals<'_>,
    choices: &Choices,
    shown: Option<&TopSnapshot>,
    warning: Option<&str>,
) {
    let mut top_lines: Vec<Line<'_>> = Vec::new();
    let state = if intervals.finished {
        "  [finished]"
    } else if intervals.stopping {
        "  [stopping: finishing the recording]"
    } else if choices.paused {
        "  [paused]"
    } else {
        ""
    };
    let title = match shown {
        Some(s) => format!(
            "fltrace top: {}  {:.0} s  interval {:.1} s{state}",
            options.title,
            s.elapsed.as_secs_f64(),
            s.interval.as_secs_f64()
        ),
        None => format!("fltrace top: {}  starting{state}", options.title),
    };
    top_lines.push(Line::styled(
        title,
        Style::new().add_modifier(Modifier::BOLD),
    ));
    if let Some(snapshot) = shown {
        top_lines.extend(headline(snapshot).into_iter().map(Line::from));
    }
    let filter = match &choices.typing {
        Some(typed) => format!("  filter: {typed}_"),
        None if !choices.filter.is_empty() => format!("  filter: {}", choices.filter),
        None => String::new(),
    };
    top_lines.push(Line::from(format!(
        "view: {} (v)  sort: {} (s){filter}  / filter  p pause  arrows scroll  q quit",
        choices.view.name(),
        choices.sort.name_in(choices.view)
    )));
    let area = frame.area();
    let [head, body, status] = Layout::vertical([
        Constraint::Length(top_lines.len() as u16),
        Constraint::Min(1),
        Constraint::Length(1),
    ])
    .areas(area);
    frame.render_widget(Paragraph::new(top_lines), head);

    let rows: Vec<&TopRow> = shown.map_or_else(Vec::new, |s| {
        s.rows(choices.view, choices.sort, &choices.filter)
    });
    let first = choices.scroll.min(rows.len().saturating_sub(1));
    let headings = columns(choices.view);
    let numbers = |texts: [String; 3]| texts.map(|t| Cell::from(Line::from(t).right_aligned()));
    let [rate_heading, total_heading] = figure_columns(choices.view);
    let header = Row::new(
        numbers(["#".into(), rate_heading.into(), total_heading.into()])
            .into_iter()
            .chain(headings.iter().enumerate().map(|(i, h)| {
                // Over an allocation site's bytes and blocks alive, as over numbers.
                if choices.view == TopView::Allocations && i < 2 {
                    Cell::from(Line::from(*h).right_aligned())
                } else {
                    Cell::from(*h)
                }
            })),
    )
    .style(Style::new().add_modifier(Modifier::REVERSED));
    let body_rows = rows
        .iter()
        .enumerate()
        .skip(first)
        .take(usize::from(body.height.saturating_sub(1)))
        .map(|(i, row)| {
            let [rate, total] = figures(row);
            let figures = numbers([(i + 1).to_string(), rate, total]);
            // An allocation site's bytes and blocks alive are numbers too.
            let right = if row.alloc.is_some() { 2 } else { 0 };
            let cells = cells(row, choices.view)
                .into_iter()
                .enumerate()
                .map(move |(i, text)| {
                    if i < right {
                        Cell::from(Line::from(text).right_aligned())
                    } else {
                        Cell::from(text)
                    }
                });
            Row::new(figures.into_iter().chain(cells))
        });
    let mut widths = vec![
        Constraint::Length(4),
        Constraint::Length(10),
        Constraint::Length(11),
    ];
    widths.extend(match choices.view {
        // live, blocks
        TopView::Allocations => [Constraint::Length(11), Constraint::Length(9)],
        // kind, type
        _ => [Constraint::Length(9), Constraint::Length(7)],
    });
    widths.extend(match choices.view {
        TopView::Sites | TopView::Allocations => vec![
            Constraint::Fill(3),
            Constraint::Fill(2),
            Constraint::Fill(1),
        ],
        TopView::Processes | TopView::Threads => vec![Constraint::Fill(2), Constraint::Length(16)],
        TopView::Libraries => vec![Constraint::Fill(1)],
    });
    frame.render_widget(Table::new(body_rows, widths).header(header), body);

    let status_text = match (warning, shown) {
        (Some(w), _) => format!("warning: {w}"),
        (None, Some(s)) => format!(
            "{} of {} {} shown from {}; recorded {} faults",
            rows.len()
                .saturating_sub(first)
                .min(usize::from(body.height.saturating_sub(1))),
            rows.len(),
            choices.view.name(),
            first + 1,
            s.recorded.faults
        ),
        (None, None) => "waiting for the first faults".to_owned(),
    };
    frame.render_widget(Paragraph::new(status_text), status);
}
