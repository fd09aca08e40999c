//! The allocation reports' pass run at record time: the recorder hands each process's calls,
//! in time order, to one of these as it converts them ([`fltrace_trace::PairCalls`]), and
//! writes what it found into the recording, so that `report --allocs` and `--leaks` read that
//! instead of every call (heaptrack's interpreter pairs at record time too).

use fltrace_trace::{AllocEvent, AllocPassSummary, PairCalls, PairingFactory};

use crate::AllocPass;

/// One process's calls paired as they are converted.
pub struct RecordTimePairing {
    pass: AllocPass,
    /// Cleared when an event came out of time order: nothing is written then.
    in_order: bool,
}

impl PairCalls for RecordTimePairing {
    fn exec(&mut self, time_ns: u64) {
        self.pass.exec_at(time_ns);
    }

    fn events(&mut self, events: &[AllocEvent]) {
        if !self.in_order {
            return;
        }
        if self.pass.events(events).is_err() {
            self.in_order = false;
        }
    }

    fn finish(self: Box<Self>) -> Option<AllocPassSummary> {
        if !self.in_order {
            return None;
        }
        let execs = self.pass.execs_applied().to_vec();
        let (totals, _) = self.pass.finish();
        Some(totals.summary(&execs))
    }
}

/// What `record --allocs` pairs each process's calls with.
pub fn record_time_pairing() -> PairingFactory {
    std::sync::Arc::new(|| {
        Box::new(RecordTimePairing {
            pass: AllocPass::new(&[]),
            in_order: true,
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use fltrace_trace::{AllocCall, VirtAddr};

    fn event(time_ns: u64, call: AllocCall, addr: u64, size: u64, stack_id: u32) -> AllocEvent {
        AllocEvent {
            time_ns,
            tid: 1,
            call,
            addr: VirtAddr::new(addr),
            size,
            old_addr: VirtAddr::new(0),
            detail: 0,
            stack_id,
        }
    }

    /// Paired in batches with an exec between them, the summary is what one pass over the
    /// same events with the exec known from the start gives, read back as totals: the block
    /// alive at the exec ends there (not leaked), the one after leaks.
    #[test]
    fn record_time_summary_is_the_pass() {
        let events = [
            event(10, AllocCall::Malloc, 0x1000, 100, 0),
            event(11, AllocCall::Malloc, 0x2000, 50, 1),
            event(12, AllocCall::Free, 0x2000, 0, 1),
            event(30, AllocCall::Malloc, 0x1000, 70, 2),
        ];
        let mut whole = AllocPass::new(&[20]);
        for e in &events {
            whole.event(e).unwrap();
        }
        let (whole, _) = whole.finish();
        let make = record_time_pairing();
        let mut pairing = make();
        pairing.events(&events[..3]);
        pairing.exec(20);
        pairing.events(&events[3..]);
        let summary = pairing.finish().expect("in order");
        assert_eq!(summary.execs, [20]);
        assert_eq!(summary.peak_bytes, 150);
        let read = crate::PassTotals::from_summary(&summary);
        assert_eq!(read.stats(30, 0).stacks, whole.stats(30, 0).stacks);
        let leaked: Vec<(u32, u64)> = summary
            .stacks
            .iter()
            .map(|s| (s.stack_id, s.leaked_bytes))
            .collect();
        assert_eq!(leaked, [(0, 0), (1, 0), (2, 70)]);
        assert_eq!(summary.stacks[1].temporary, 1);
        assert_eq!(summary.stacks[0].most_live_bytes, 100);
        let mut late = make();
        late.events(&events[2..]);
        late.events(&events[..1]);
        assert_eq!(late.finish(), None, "events out of order write nothing");
    }
}

/// What pairing at record time costs a call: `FLTRACE_BENCH_RECORDING=<a recording of
/// record --allocs> cargo test --release -p fltrace-analyze record_time_pairing_time --
/// --ignored --nocapture` reads the first process's calls into memory, then pairs them as
/// the recorder does, with the small live heap blocks in bitmaps (as the recorder) and in the
/// ordered map (as before issue 40), and prints the CPU time per call of each. A
/// measurement: it asserts only that both ways find the same.
#[cfg(test)]
mod timing {
    use super::*;

    #[test]
    #[ignore]
    fn record_time_pairing_time() {
        let Some(dir) = std::env::var_os("FLTRACE_BENCH_RECORDING") else {
            eprintln!("FLTRACE_BENCH_RECORDING names no recording");
            return;
        };
        let recording = fltrace_trace::Recording::latest(std::path::Path::new(&dir)).unwrap();
        let pid = *recording
            .pids()
            .iter()
            .find(|&&p| recording.has_allocs(p))
            .unwrap();
        let groups: Vec<Vec<AllocEvent>> = recording
            .alloc_row_groups(pid)
            .unwrap()
            .map(|group| group.unwrap())
            .collect();
        let events: usize = groups.iter().map(Vec::len).sum();
        for round in 0..3 {
            let mut found = Vec::new();
            for ordered in [false, true] {
                let started = fltrace_trace::thread_cpu();
                let mut pairing = Box::new(RecordTimePairing {
                    pass: AllocPass::new(&[]),
                    in_order: true,
                });
                if ordered {
                    pairing.pass.ordered_heap();
                }
                for group in &groups {
                    pairing.events(group);
                }
                let summary = pairing.finish().unwrap();
                let spent = fltrace_trace::thread_cpu() - started;
                eprintln!(
                    "round {round}: {events} events, {} stacks, pairing {:.1} ns an event{}",
                    summary.stacks.len(),
                    spent.as_nanos() as f64 / events as f64,
                    if ordered {
                        " (heap blocks ordered)"
                    } else {
                        ""
                    }
                );
                found.push(summary);
            }
            assert_eq!(found[0], found[1]);
        }
    }
}
