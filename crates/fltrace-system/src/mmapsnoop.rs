//! `mmapsnoop`: one line per mmap(2), from `syscalls:sys_enter_mmap` (the arguments) and
//! `sys_exit_mmap` (the result), with the file named by the kernel's `mmap2` side-band
//! record of the new mapping: exact even when the program closes the descriptor at once.
//! Failed calls show the error; a mapping without its record shows what /proc/PID/fd says.

use std::collections::HashMap;
use std::io::Write;
use std::sync::atomic::AtomicUsize;
use std::time::Duration;

use crate::Error;
use crate::Scope;
use crate::output::{Column, Printer, Value};
use crate::perf_session::{Options, PerfEvents, Record, Source};

/// The chapter's columns, with a time first and the address in CSV and JSON.
pub const COLUMNS: &[Column] = &[
    Column::new("TIME(s)", "time_s", -12),
    Column::new("PID", "pid", -7),
    Column::new("COMM", "comm", -16),
    Column::new("PROT", "prot", -4),
    Column::new("MAP", "map", -5),
    Column::new("OFFS(KB)", "offset_kb", -8),
    Column::new("SIZE(KB)", "size_kb", -8),
    Column::data("addr"),
    Column::new("FILE", "file", -4),
];

const SOURCES: &[Source] = &[
    Source::tracepoint("syscalls", "sys_enter_mmap"),
    Source::tracepoint("syscalls", "sys_exit_mmap"),
];

/// One call's arguments.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Args {
    /// Length in bytes.
    pub len: u64,
    /// `PROT_*`.
    pub prot: u64,
    /// `MAP_*`.
    pub flags: u64,
    /// Descriptor (-1 for anonymous memory).
    pub fd: i64,
    /// File offset in bytes.
    pub offset: u64,
}

/// `R`, `W`, `E` for PROT_READ, PROT_WRITE, PROT_EXEC, as the chapter prints them.
pub fn prot_text(prot: u64) -> String {
    let bit = |b: i32, c: char| if prot & b as u64 != 0 { c } else { '-' };
    [
        bit(libc::PROT_READ, 'R'),
        bit(libc::PROT_WRITE, 'W'),
        bit(libc::PROT_EXEC, 'E'),
    ]
    .iter()
    .collect()
}

/// `S`, `P`, `F`, `A` for MAP_SHARED, MAP_PRIVATE, MAP_FIXED, MAP_ANONYMOUS.
pub fn map_text(flags: u64) -> String {
    let bit = |b: i32, c: char| if flags & b as u64 != 0 { c } else { '-' };
    [
        bit(libc::MAP_SHARED, 'S'),
        bit(libc::MAP_PRIVATE, 'P'),
        bit(libc::MAP_FIXED, 'F'),
        bit(libc::MAP_ANONYMOUS, 'A'),
    ]
    .iter()
    .collect()
}

/// The open tool.
pub struct MmapSnoop {
    /// Its events.
    pub perf_events: PerfEvents,
}

/// Opens the mmap tracepoints for `scope`.
pub fn open(scope: &Scope) -> Result<MmapSnoop, Error> {
    let options = Options {
        mappings: true,
        ring_pages: 256,
        ..Options::default()
    };
    Ok(MmapSnoop {
        perf_events: PerfEvents::open(SOURCES, scope, options)?,
    })
}

#[derive(Default)]
struct Pending {
    args: Args,
    /// (start, end, path) of the mapping records seen during the call.
    mapped: Vec<(u64, u64, String)>,
}

impl MmapSnoop {
    /// Prints a line per call until stopped.
    pub fn run<W: Write>(
        mut self,
        stop: &AtomicUsize,
        duration: Option<Duration>,
        printer: &mut Printer<W>,
    ) -> Result<Option<std::process::ExitStatus>, Error> {
        let (Some(enter), Some(exit)) = (
            self.perf_events.format(0).cloned(),
            self.perf_events.format(1).cloned(),
        ) else {
            return Ok(None);
        };
        let mut pending: HashMap<u32, Pending> = HashMap::new();
        printer.header()?;
        self.perf_events.run_printing(
            stop,
            duration,
            None,
            |ctx, record| match record {
                Record::Mmap { tid, mapping, .. } => {
                    if let Some(p) = pending.get_mut(&tid) {
                        p.mapped
                            .push((mapping.start.get(), mapping.end.get(), mapping.path));
                    }
                    Ok(())
                }
                Record::Sample(s) if s.source == 0 => {
                    let d = enter.decode(&s.raw);
                    let args = Args {
                        len: d.u64("len").unwrap_or(0),
                        prot: d.u64("prot").unwrap_or(0),
                        flags: d.u64("flags").unwrap_or(0),
                        fd: d.u64("fd").unwrap_or(u64::MAX) as i32 as i64,
                        offset: d.u64("off").unwrap_or(0),
                    };
                    pending.insert(
                        s.tid,
                        Pending {
                            args,
                            mapped: Vec::new(),
                        },
                    );
                    Ok(())
                }
                Record::Sample(s) => {
                    let Some(p) = pending.remove(&s.tid) else {
                        return Ok(());
                    };
                    let ret = exit.decode(&s.raw).i64("ret").unwrap_or(0);
                    let file = file_of(s.pid, &p, ret);
                    let row = [
                        Value::Float(ctx.seconds(s.time_ns), 6),
                        s.pid.into(),
                        ctx.comm(s.tid).into(),
                        prot_text(p.args.prot).into(),
                        map_text(p.args.flags).into(),
                        (p.args.offset / 1024).into(),
                        (p.args.len / 1024).into(),
                        format!("{ret:#x}").into(),
                        file.into(),
                    ];
                    printer.row(&row)
                }
                _ => Ok(()),
            },
            |_, _, _| Ok(()),
        )
    }
}

/// The file of a finished call: the mapping record holding its result, else the descriptor's
/// target in /proc, else nothing (anonymous memory), or the error of a failed call.
fn file_of(pid: u32, p: &Pending, ret: i64) -> String {
    if (-4095..0).contains(&ret) {
        return format!("[error {}]", std::io::Error::from_raw_os_error(-ret as i32));
    }
    let addr = ret as u64;
    if let Some((_, _, path)) = p
        .mapped
        .iter()
        .rev()
        .find(|(start, end, _)| (*start..*end).contains(&addr))
    {
        return if path.starts_with("//anon") {
            String::new()
        } else {
            path.clone()
        };
    }
    if p.args.fd >= 0 && p.args.flags & libc::MAP_ANONYMOUS as u64 == 0 {
        return crate::procfs::fd_target(pid, p.args.fd)
            .map(|t| t.display().to_string())
            .unwrap_or_else(|_| format!("[fd {}]", p.args.fd));
    }
    String::new()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The chapter's letters.
    #[test]
    fn prints_protection_and_flags() {
        assert_eq!(prot_text((libc::PROT_READ | libc::PROT_EXEC) as u64), "R-E");
        assert_eq!(
            map_text((libc::MAP_PRIVATE | libc::MAP_FIXED) as u64),
            "-PF-"
        );
        assert_eq!(
            map_text((libc::MAP_SHARED | libc::MAP_ANONYMOUS) as u64),
            "S--A"
        );
    }
}
