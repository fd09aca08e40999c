//! `shmsnoop`: System V shared memory calls (shmget, shmat, shmdt, shmctl) with their
//! arguments and results, from the `syscalls:sys_enter_*`/`sys_exit_*` pairs of each thread.

use std::collections::HashMap;
use std::io::Write;
use std::sync::atomic::AtomicUsize;
use std::time::Duration;

use crate::Error;
use crate::Scope;
use crate::output::{Column, Printer, Value};
use crate::perf_session::{Options, PerfEvents, Record, Source};
use crate::tracefs::Decoded;

/// The chapter's columns, with a time first.
pub const COLUMNS: &[Column] = &[
    Column::new("TIME(s)", "time_s", -12),
    Column::new("PID", "pid", -7),
    Column::new("COMM", "comm", -16),
    Column::new("SYS", "sys", 6),
    Column::new("RET", "ret", 14),
    Column::new("ARGs", "args", -4),
];

const CALLS: [&str; 4] = ["shmget", "shmat", "shmdt", "shmctl"];

const SOURCES: &[Source] = &[
    Source::tracepoint("syscalls", "sys_enter_shmget"),
    Source::tracepoint("syscalls", "sys_enter_shmat"),
    Source::tracepoint("syscalls", "sys_enter_shmdt"),
    Source::tracepoint("syscalls", "sys_enter_shmctl"),
    Source::tracepoint("syscalls", "sys_exit_shmget"),
    Source::tracepoint("syscalls", "sys_exit_shmat"),
    Source::tracepoint("syscalls", "sys_exit_shmdt"),
    Source::tracepoint("syscalls", "sys_exit_shmctl"),
];

/// `IPC_CREAT|IPC_EXCL|0600` style text of shmget's flags, as bcc prints them.
pub fn shmget_flags(flags: u64) -> String {
    let mut parts = Vec::new();
    for (bit, name) in [
        (libc::IPC_CREAT, "IPC_CREAT"),
        (libc::IPC_EXCL, "IPC_EXCL"),
        (libc::SHM_HUGETLB, "SHM_HUGETLB"),
        (libc::SHM_NORESERVE, "SHM_NORESERVE"),
    ] {
        if flags & bit as u64 != 0 {
            parts.push(name.to_owned());
        }
    }
    parts.push(format!("{:04o}", flags & 0o777));
    parts.join("|")
}

fn shmat_flags(flags: u64) -> String {
    let mut parts = Vec::new();
    for (bit, name) in [
        (libc::SHM_RDONLY, "SHM_RDONLY"),
        (libc::SHM_RND, "SHM_RND"),
        (libc::SHM_REMAP, "SHM_REMAP"),
        (libc::SHM_EXEC, "SHM_EXEC"),
    ] {
        if flags & bit as u64 != 0 {
            parts.push(name);
        }
    }
    parts.join("|")
}

/// The ARGs text of call `call` (an index into shmget, shmat, shmdt, shmctl).
pub fn args_text(call: usize, d: &Decoded<'_>) -> String {
    let u = |name: &str| d.u64(name).unwrap_or(0);
    match call {
        0 => format!(
            "key: {:#x}, size: {}, shmflg: {:#x} ({})",
            u("key") as u32,
            u("size"),
            u("shmflg") as u32,
            shmget_flags(u("shmflg"))
        ),
        1 => {
            let flags = u("shmflg") as u32;
            let names = shmat_flags(u64::from(flags));
            format!(
                "shmid: {:#x}, shmaddr: {:#x}, shmflg: {flags:#x}{}",
                u("shmid") as u32,
                u("shmaddr"),
                if names.is_empty() {
                    String::new()
                } else {
                    format!(" ({names})")
                }
            )
        }
        2 => format!("shmaddr: {:#x}", u("shmaddr")),
        _ => format!(
            "shmid: {:#x}, cmd: {}, buf: {:#x}",
            u("shmid") as u32,
            u("cmd") as u32 as i32,
            u("buf")
        ),
    }
}

/// The open tool.
pub struct ShmSnoop {
    /// Its events.
    pub perf_events: PerfEvents,
}

/// Opens the shared memory call tracepoints for `scope`.
pub fn open(scope: &Scope) -> Result<ShmSnoop, Error> {
    Ok(ShmSnoop {
        perf_events: PerfEvents::open(SOURCES, scope, Options::default())?,
    })
}

impl ShmSnoop {
    /// Prints a line per call until stopped.
    pub fn run<W: Write>(
        mut self,
        stop: &AtomicUsize,
        duration: Option<Duration>,
        printer: &mut Printer<W>,
    ) -> Result<Option<std::process::ExitStatus>, Error> {
        let formats: Vec<_> = (0..SOURCES.len())
            .map(|i| self.perf_events.format(i).cloned())
            .collect();
        // Per thread: the call entered and its argument text.
        let mut pending: HashMap<u32, (usize, String)> = HashMap::new();
        printer.header()?;
        self.perf_events.run_printing(
            stop,
            duration,
            None,
            |ctx, record| {
                let Record::Sample(s) = record else {
                    return Ok(());
                };
                let Some(format) = formats.get(s.source).and_then(Option::as_ref) else {
                    return Ok(());
                };
                let d = format.decode(&s.raw);
                if s.source < CALLS.len() {
                    pending.insert(s.tid, (s.source, args_text(s.source, &d)));
                    return Ok(());
                }
                let call = s.source - CALLS.len();
                let Some((entered, args)) = pending.remove(&s.tid) else {
                    return Ok(());
                };
                if entered != call {
                    return Ok(());
                }
                let ret = d.i64("ret").unwrap_or(0);
                let ret_text = if ret < 0 {
                    ret.to_string()
                } else {
                    format!("{ret:x}")
                };
                let row = [
                    Value::Float(ctx.seconds(s.time_ns), 6),
                    s.pid.into(),
                    ctx.comm(s.tid).into(),
                    CALLS[call].to_uppercase().into(),
                    ret_text.into(),
                    args.into(),
                ];
                printer.row(&row)
            },
            |_, _, _| Ok(()),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// bcc's flag text.
    #[test]
    fn names_shmget_flags() {
        assert_eq!(shmget_flags(0o1000 | 0o600), "IPC_CREAT|0600");
    }
}
