//! What `memleak` prints: a report per interval as bcc's memleak prints it, CSV, JSON lines,
//! and folded stacks weighed by bytes.

use std::io::{self, Write};

use serde_json::json;

use fltrace_render::TableFormat;

use super::{LeakSnapshot, LeakTarget};
use crate::bpf::Frame;
use crate::output::stack_cell;

/// What memleak is attached to, for its first line.
pub fn describe_leak_target(target: &LeakTarget, tgids: &[u32]) -> String {
    match target {
        LeakTarget::Kernel => "the kernel's allocations (kmalloc, kmem_cache, pages)".to_owned(),
        target => format!(
            "the C library allocator of {tgids:?} ({})",
            if matches!(target, LeakTarget::Attached) {
                "stacks unwound from DWARF"
            } else {
                "stacks follow frame pointers"
            }
        ),
    }
}

/// Writes one memleak report; a table is headed by the time of day (`clock`, HH:MM:SS).
pub fn write_leaks(
    out: &mut impl Write,
    snapshot: &LeakSnapshot,
    format: TableFormat,
    folded: bool,
    clock: &str,
) -> io::Result<()> {
    if folded {
        for s in &snapshot.stacks {
            let mut parts = vec![s.comm.clone()];
            parts.extend(s.stack.iter().rev().map(|f| f.function.clone()));
            writeln!(out, "{} {}", parts.join(";"), s.bytes)?;
        }
        return Ok(());
    }
    match format {
        TableFormat::Json => {
            let stacks: Vec<_> = snapshot
                .stacks
                .iter()
                .map(|s| {
                    let mut stack = json!({
                        "pid": s.pid,
                        "comm": s.comm,
                        "bytes": s.bytes,
                        "allocations": s.allocations,
                        "stack": s.stack.iter().map(Frame::describe).collect::<Vec<_>>(),
                    });
                    if !s.addresses.is_empty() {
                        stack["blocks"] = s
                            .addresses
                            .iter()
                            .map(|&(addr, size)| json!({"addr": addr, "size": size}))
                            .collect();
                    }
                    stack
                })
                .collect();
            let mut report = json!({
                "allocs": snapshot.allocs,
                "frees": snapshot.frees,
                "dropped": snapshot.dropped,
                "seen": snapshot.allocs,
                "lost": snapshot.dropped,
                "why": if snapshot.dropped > 0 { snapshot.why } else { "" },
                "stacks": stacks,
            });
            if snapshot.sampled > 1 {
                report["sampled"] = snapshot.sampled.into();
            }
            if snapshot.replaced > 0 {
                report["replaced_by_exec"] = snapshot.replaced.into();
            }
            if snapshot.behind {
                report["behind"] = true.into();
            }
            serde_json::to_writer(&mut *out, &report)?;
            writeln!(out)?;
        }
        TableFormat::Csv => {
            let mut csv = csv::Writer::from_writer(&mut *out);
            csv.write_record(["bytes", "allocations", "pid", "comm", "stack"])?;
            for s in &snapshot.stacks {
                csv.write_record([
                    s.bytes.to_string(),
                    s.allocations.to_string(),
                    s.pid.map(|p| p.to_string()).unwrap_or_default(),
                    s.comm.clone(),
                    stack_cell(&s.stack),
                ])?;
            }
            csv.flush()?;
        }
        TableFormat::Table => {
            let sampled = if snapshot.sampled > 1 {
                format!(
                    " (1 allocation in {} sampled: figures scaled, estimates)",
                    snapshot.sampled
                )
            } else {
                String::new()
            };
            writeln!(
                out,
                "[{clock}] Top {} stacks with outstanding allocations{sampled}:",
                snapshot.stacks.len()
            )?;
            for s in &snapshot.stacks {
                writeln!(
                    out,
                    "\t{} bytes in {} allocations from stack ({}{})",
                    s.bytes,
                    s.allocations,
                    s.comm,
                    s.pid.map(|p| format!(" pid {p}")).unwrap_or_default()
                )?;
                for f in &s.stack {
                    writeln!(out, "\t\t{}", f.describe())?;
                }
                for (addr, size) in &s.addresses {
                    writeln!(out, "\t\taddr = {addr:x} size = {size}")?;
                }
            }
            if snapshot.dropped > 0 {
                writeln!(
                    out,
                    "{} allocations seen, {} lost: {}",
                    snapshot.allocs, snapshot.dropped, snapshot.why
                )?;
            }
            if snapshot.replaced > 0 {
                writeln!(
                    out,
                    "{} allocations left out: their images were replaced by an exec, with their \
                     heaps",
                    snapshot.replaced
                )?;
            }
            if snapshot.behind {
                writeln!(
                    out,
                    "the reader had not read every call made before this report: it is behind"
                )?;
            }
        }
    }
    out.flush()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frame(function: &str, file_line: Option<&str>) -> Frame {
        Frame {
            function: function.into(),
            file_line: file_line.map(Into::into),
            lib: "prog".into(),
        }
    }

    fn written(write: impl FnOnce(&mut Vec<u8>) -> io::Result<()>) -> String {
        let mut out = Vec::new();
        write(&mut out).expect("writing to memory");
        String::from_utf8(out).expect("UTF-8")
    }

    #[test]
    fn leaks_folded_weigh_stacks_by_bytes() {
        let snapshot = LeakSnapshot {
            stacks: vec![super::super::Outstanding {
                pid: Some(9),
                comm: "prog".into(),
                bytes: 4096,
                allocations: 2,
                stack: vec![frame("malloc", None), frame("main", Some("m.c:5"))],
                addresses: Vec::new(),
            }],
            allocs: 3,
            frees: 1,
            dropped: 0,
            why: "",
            sampled: 1,
            behind: false,
            replaced: 0,
        };
        assert_eq!(
            written(|o| write_leaks(o, &snapshot, TableFormat::Table, true, "")),
            "prog;main;malloc 4096\n"
        );
        assert_eq!(
            written(|o| write_leaks(o, &snapshot, TableFormat::Table, false, "01:02:03")),
            "[01:02:03] Top 1 stacks with outstanding allocations:\n\
             \t4096 bytes in 2 allocations from stack (prog pid 9)\n\
             \t\tmalloc (prog)\n\t\tmain (m.c:5)\n"
        );
        // Sampled, each block listed, and calls lost: said in the header, rows and last line.
        let mut sampled = snapshot.clone();
        sampled.sampled = 4;
        sampled.dropped = 7;
        sampled.why = "the ring was full";
        sampled.replaced = 5;
        sampled.stacks[0].addresses = vec![(0x1000, 2048), (0x2000, 2048)];
        assert_eq!(
            written(|o| write_leaks(o, &sampled, TableFormat::Table, false, "01:02:03")),
            "[01:02:03] Top 1 stacks with outstanding allocations (1 allocation in 4 sampled: \
             figures scaled, estimates):\n\
             \t4096 bytes in 2 allocations from stack (prog pid 9)\n\
             \t\tmalloc (prog)\n\t\tmain (m.c:5)\n\
             \t\taddr = 1000 size = 2048\n\t\taddr = 2000 size = 2048\n\
             3 allocations seen, 7 lost: the ring was full\n\
             5 allocations left out: their images were replaced by an exec, with their heaps\n"
        );
        let json: serde_json::Value = serde_json::from_str(&written(|o| {
            write_leaks(o, &sampled, TableFormat::Json, false, "")
        }))
        .expect("JSON");
        assert_eq!(
            (
                &json["seen"],
                &json["lost"],
                &json["why"],
                &json["sampled"],
                &json["replaced_by_exec"]
            ),
            (
                &3.into(),
                &7.into(),
                &"the ring was full".into(),
                &4.into(),
                &5.into()
            )
        );
        assert_eq!(json["stacks"][0]["blocks"][1]["addr"], 0x2000);
    }
}
