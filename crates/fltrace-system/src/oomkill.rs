//! `oomkill`: one line per OOM kill, from `oom:mark_victim` (the chapter's tool used a kprobe
//! on `oom_kill_process()`). The tracepoint fires in the task whose allocation failed, so the
//! sample's process is the trigger and the fields name the victim; its memory figures come
//! from the tracepoint (kB) where it has them, else from /proc while the victim is still
//! there. The memory cgroup whose limit was hit comes from the kernel's `oom-kill:` log line,
//! else from the victim's /proc/PID/cgroup.

use std::io::Write;
use std::sync::atomic::AtomicUsize;
use std::time::Duration;

use fltrace_render::TableFormat;

use crate::Error;
use crate::Scope;
use crate::output::{Column, Printer, Value};
use crate::perf_session::{Options, PerfEvents, Record, Source};
use crate::procfs::{self, Kmsg};

/// The columns of CSV and JSON.
pub const COLUMNS: &[Column] = &[
    Column::data("time"),
    Column::data("trigger_pid"),
    Column::data("trigger_comm"),
    Column::data("victim_pid"),
    Column::data("victim_comm"),
    Column::data("total_vm_pages"),
    Column::data("rss_pages"),
    Column::data("loadavg"),
    Column::data("memcg"),
];

const SOURCES: &[Source] = &[Source::tracepoint("oom", "mark_victim")];

/// One OOM kill.
#[derive(Debug, Clone, PartialEq)]
pub struct Kill {
    /// `HH:MM:SS`.
    pub time: String,
    /// The process whose allocation failed.
    pub trigger_pid: u32,
    /// Its name.
    pub trigger_comm: String,
    /// The process killed.
    pub victim_pid: u32,
    /// Its name.
    pub victim_comm: String,
    /// Its virtual size in pages.
    pub total_vm_pages: u64,
    /// Its resident pages (anon + file + shmem).
    pub rss_pages: u64,
    /// /proc/loadavg at the time.
    pub loadavg: String,
    /// The memory cgroup that hit its limit (`/` for the whole system), or empty.
    pub memcg: String,
}

impl Kill {
    /// The chapter's line, with the cgroup.
    pub fn sentence(&self) -> String {
        format!(
            "{} Triggered by PID {} (\"{}\"), OOM kill of PID {} (\"{}\"), {} pages, rss {} pages, loadavg: {}, memcg {}",
            self.time,
            self.trigger_pid,
            self.trigger_comm,
            self.victim_pid,
            self.victim_comm,
            self.total_vm_pages,
            self.rss_pages,
            self.loadavg,
            if self.memcg.is_empty() {
                "?"
            } else {
                &self.memcg
            }
        )
    }

    fn values(&self) -> Vec<Value> {
        vec![
            self.time.as_str().into(),
            self.trigger_pid.into(),
            self.trigger_comm.as_str().into(),
            self.victim_pid.into(),
            self.victim_comm.as_str().into(),
            self.total_vm_pages.into(),
            self.rss_pages.into(),
            self.loadavg.as_str().into(),
            self.memcg.as_str().into(),
        ]
    }
}

/// The open tool.
pub struct OomKill {
    /// Its events.
    pub perf_events: PerfEvents,
    kmsg: Kmsg,
}

/// Opens `oom:mark_victim` for `scope` (the trigger's scope: a cgroup or process filter
/// applies to the process whose allocation failed).
pub fn open(scope: &Scope) -> Result<OomKill, Error> {
    // The log is opened first so that a kill right after the tracepoint opens is in it.
    let kmsg = Kmsg::open();
    let perf_events = PerfEvents::open(SOURCES, scope, Options::default())?;
    Ok(OomKill { perf_events, kmsg })
}

/// Memory figures of a process from /proc/PID/status, in kB: (VmSize, VmRSS); none once it
/// is gone.
fn status_kb(pid: u32) -> Option<(u64, u64)> {
    let status = procfs::status(pid).ok()?;
    Some((status.vm_size_kb?, status.rss_kb.unwrap_or(0)))
}

impl OomKill {
    /// Prints a line per OOM kill until stopped.
    pub fn run<W: Write>(
        mut self,
        stop: &AtomicUsize,
        duration: Option<Duration>,
        printer: &mut Printer<W>,
    ) -> Result<Option<std::process::ExitStatus>, Error> {
        let Some(format) = self.perf_events.format(0).cloned() else {
            return Ok(None);
        };
        let page_kb = fltrace_capture::page_size() as u64 / 1024;
        let kmsg = &mut self.kmsg;
        self.perf_events.run_printing(
            stop,
            duration,
            None,
            |ctx, record| {
                let Record::Sample(sample) = record else {
                    return Ok(());
                };
                let d = format.decode(&sample.raw);
                let victim_pid = d.i64("pid").unwrap_or(0) as u32;
                let (total_kb, rss_kb) = match (d.u64("total_vm"), d.u64("anon_rss")) {
                    (Some(total), Some(anon)) => (
                        total,
                        anon + d.u64("file_rss").unwrap_or(0) + d.u64("shmem_rss").unwrap_or(0),
                    ),
                    _ => status_kb(victim_pid).unwrap_or((0, 0)),
                };
                // The log line is printed before the victim is marked; give it a moment.
                let mut memcg = kmsg.oom_memcg(victim_pid);
                for _ in 0..10 {
                    if memcg.is_some() {
                        break;
                    }
                    std::thread::sleep(Duration::from_millis(10));
                    memcg = kmsg.oom_memcg(victim_pid);
                }
                let memcg = memcg
                    .or_else(|| procfs::cgroup_of(victim_pid, "memory"))
                    .unwrap_or_default();
                let kill = Kill {
                    time: crate::clock::local_time(ctx.wall_ns(sample.time_ns)),
                    trigger_pid: sample.pid,
                    trigger_comm: ctx.comm(sample.tid),
                    victim_pid,
                    victim_comm: d.str("comm").unwrap_or_default(),
                    total_vm_pages: total_kb / page_kb.max(1),
                    rss_pages: rss_kb / page_kb.max(1),
                    loadavg: procfs::loadavg(),
                    memcg,
                };
                match printer.format() {
                    TableFormat::Table => printer.line(&kill.sentence()),
                    _ => printer.row(&kill.values()),
                }
            },
            |_, _, _| Ok(()),
        )
    }
}
