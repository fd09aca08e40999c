//! The fault rows of one process that later records can still change, kept in front of the
//! append-only faults table: a row is settled, complete, before the table sees it.

use std::collections::VecDeque;

use fltrace_trace::{Fault, FaultWriter};

use crate::live::{LiveFault, LiveTap};

/// The oldest rows settle this many at a time once the window holds twice as many: a row
/// group of the faults table each.
const SETTLE_ROWS: usize = 1 << 16;

/// The newest fault rows of a process, open to flags learnt after the fault: a major-fault
/// event (read from its own ring a moment later), a far-memory fetch or fill (read from the
/// runtime's log a round or two later). A row settles when a checkpoint after the one that
/// followed it comes, or when [`2 × SETTLE_ROWS`](SETTLE_ROWS) newer rows pushed it out.
pub(super) struct FaultWindow {
    open: VecDeque<Fault>,
    /// Rows given to the table: the row number of `open[0]`.
    settled: u64,
    /// Rows pushed before the previous checkpoint: they settle at the next one.
    settle_at_checkpoint: u64,
    table: FaultWriter,
    /// What a live view is told of the rows (and of the process: see [`LiveTap`]), when one
    /// is: a push per row appended or changed, nothing without a view.
    tap: Option<LiveTap>,
}

impl FaultWindow {
    /// A window in front of `table`; `live`: a live view is told of every row.
    pub(super) fn new(table: FaultWriter, live: bool) -> FaultWindow {
        FaultWindow {
            open: VecDeque::new(),
            settled: 0,
            settle_at_checkpoint: 0,
            table,
            tap: live.then(LiveTap::default),
        }
    }

    /// What the live view is to be told, when there is one.
    pub(super) fn tap(&mut self) -> Option<&mut LiveTap> {
        self.tap.as_mut()
    }

    /// The row number the next row pushed gets.
    pub(super) fn next_row(&self) -> u64 {
        self.settled + self.open.len() as u64
    }

    /// The oldest row still open: rows below it are in the table, unchangeable.
    pub(super) fn first_open(&self) -> u64 {
        self.settled
    }

    /// Appends a row; settles the oldest ones when the window is full.
    pub(super) fn push(&mut self, fault: Fault) -> Result<(), fltrace_trace::Error> {
        if let Some(tap) = &mut self.tap {
            tap.faults.push(live_row(&fault, false));
        }
        self.open.push_back(fault);
        if self.open.len() >= 2 * SETTLE_ROWS {
            self.settle(SETTLE_ROWS)?;
        }
        Ok(())
    }

    /// The newest of the last `limit` open rows that `wanted` picks.
    pub(super) fn find_recent(&self, limit: usize, wanted: impl Fn(&Fault) -> bool) -> Option<u64> {
        let newest = self.open.len();
        let back = self.open.iter().rev().take(limit).position(wanted)?;
        Some(self.settled + (newest - 1 - back) as u64)
    }

    /// Whether row `row` is still open to changes.
    pub(super) fn is_open(&self, row: u64) -> bool {
        row >= self.settled && row < self.next_row()
    }

    /// Changes row `row` with `change` if it is still open; the live view, if any, is told
    /// of a change of its stack or flags. Returns whether the row was open.
    pub(super) fn amend(&mut self, row: u64, change: impl FnOnce(&mut Fault)) -> bool {
        let Some(index) = row
            .checked_sub(self.settled)
            .and_then(|i| usize::try_from(i).ok())
        else {
            return false;
        };
        let Some(fault) = self.open.get_mut(index) else {
            return false;
        };
        let before = *fault;
        change(fault);
        if let Some(tap) = &mut self.tap
            && (before.stack_id, before.flags) != (fault.stack_id, fault.flags)
        {
            tap.faults.push(live_row(&before, true));
            tap.faults.push(live_row(fault, false));
        }
        true
    }

    /// Sets footer value `key` of the table, for its next checkpoint and its final footer.
    pub(super) fn set_metadata(&mut self, key: &str, value: String) {
        self.table.set_metadata(key, value);
    }

    /// Settles the rows pushed before the previous checkpoint and makes every settled row
    /// readable should the recorder die; the rows pushed since stay open a checkpoint longer.
    pub(super) fn checkpoint(&mut self) -> Result<(), fltrace_trace::Error> {
        let count = self.settle_at_checkpoint.saturating_sub(self.settled);
        self.settle(usize::try_from(count).unwrap_or(usize::MAX))?;
        self.table.checkpoint()?;
        self.settle_at_checkpoint = self.next_row();
        Ok(())
    }

    /// Settles every row and writes the table's footer.
    pub(super) fn finish(mut self) -> Result<(), fltrace_trace::Error> {
        self.settle(usize::MAX)?;
        self.table.finish()
    }

    /// Gives the oldest `count` open rows (at most all) to the table.
    fn settle(&mut self, count: usize) -> Result<(), fltrace_trace::Error> {
        for _ in 0..count {
            let Some(fault) = self.open.pop_front() else {
                break;
            };
            self.settled += 1;
            self.table.push(fault)?;
        }
        Ok(())
    }
}

/// The live view's copy of a row.
fn live_row(fault: &Fault, undo: bool) -> LiveFault {
    LiveFault {
        pid: fault.pid,
        tid: fault.tid,
        stack_id: fault.stack_id,
        flags: fault.flags,
        undo,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use fltrace_trace::{CodeAddr, FaultFlags, VirtAddr, files, read_faults};

    fn fault(i: u64) -> Fault {
        Fault {
            time_ns: 1000 + i,
            pid: 1,
            tid: 1,
            ip: CodeAddr::new(0x40_0000),
            addr: VirtAddr::new(0x10_0000 + i * 4096),
            flags: FaultFlags(0),
            stack_id: 0,
        }
    }

    /// A row stays open through the checkpoint after it and settles at the next one; the
    /// table, read as a killed recorder leaves it, holds exactly the settled rows, with the
    /// flags added while they were open.
    #[test]
    fn rows_settle_a_checkpoint_after_they_are_pushed() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = files::faults(dir.path(), 1);
        let mut window = FaultWindow::new(FaultWriter::create(&path, &[]).expect("table"), false);
        for i in 0..10 {
            window.push(fault(i)).expect("pushed");
        }
        window.checkpoint().expect("checkpoint");
        assert_eq!(window.first_open(), 0);
        assert!(window.amend(3, |f| f.flags.0 |= FaultFlags::MAJOR));
        for i in 10..15 {
            window.push(fault(i)).expect("pushed");
        }
        window.checkpoint().expect("checkpoint");
        assert_eq!((window.first_open(), window.next_row()), (10, 15));
        assert!(!window.amend(9, |_| {}));
        assert!(window.amend(14, |f| f.flags.0 |= FaultFlags::FETCH));
        // The recorder dies here: the table holds the ten settled rows.
        let (rows, _) = read_faults(&path).expect("recovered");
        let flagged: Vec<u16> = rows.iter().map(|f| f.flags.0).collect();
        let mut expected = vec![0; 10];
        expected[3] = FaultFlags::MAJOR;
        assert_eq!(flagged, expected);
        window.finish().expect("finished");
        let (rows, _) = read_faults(&path).expect("finished table");
        assert_eq!(rows.len(), 15);
        assert_eq!(rows[14].flags.0, FaultFlags::FETCH);
        assert_eq!(rows[14].time_ns, 1014);
    }

    /// Without checkpoints the window holds at most 2 × SETTLE_ROWS rows: the oldest
    /// SETTLE_ROWS settle together.
    #[test]
    fn a_full_window_settles_its_oldest_rows() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = files::faults(dir.path(), 1);
        let mut window = FaultWindow::new(FaultWriter::create(&path, &[]).expect("table"), false);
        for i in 0..2 * SETTLE_ROWS as u64 - 1 {
            window.push(fault(i)).expect("pushed");
        }
        assert_eq!(window.first_open(), 0);
        window.push(fault(0)).expect("pushed");
        assert_eq!(window.first_open(), SETTLE_ROWS as u64);
        assert!(!window.is_open(SETTLE_ROWS as u64 - 1));
        assert!(window.is_open(SETTLE_ROWS as u64));
    }

    /// With a live view, every row pushed is told, and a change of an open row's stack or
    /// flags is told as the old row taken back and the new one added; a change of nothing,
    /// or of a settled row, is not told.
    #[test]
    fn a_live_view_is_told_of_rows_and_their_changes() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = files::faults(dir.path(), 1);
        let mut window = FaultWindow::new(FaultWriter::create(&path, &[]).expect("table"), true);
        for i in 0..3 {
            window.push(fault(i)).expect("pushed");
        }
        assert!(window.amend(1, |f| f.flags.0 |= FaultFlags::MAJOR));
        assert!(window.amend(2, |f| f.tid = 1));
        window.checkpoint().expect("checkpoint");
        window.checkpoint().expect("checkpoint");
        assert!(!window.amend(0, |f| f.stack_id = 9));
        let mut batch = crate::live::LiveBatch::default();
        window.tap().expect("a tap").drain_into(&mut batch);
        let told: Vec<(u16, bool)> = batch.faults.iter().map(|f| (f.flags.0, f.undo)).collect();
        assert_eq!(
            told,
            [
                (0, false),
                (0, false),
                (0, false),
                (0, true),
                (FaultFlags::MAJOR, false)
            ]
        );
        let mut quiet = FaultWindow::new(
            FaultWriter::create(&files::faults(dir.path(), 2), &[]).expect("table"),
            false,
        );
        quiet.push(fault(0)).expect("pushed");
        assert!(quiet.tap().is_none());
    }
}
