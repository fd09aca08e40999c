//! The event tools through their one request ([`Tool`]), on real tracepoints of this kernel:
//! each opens its events over a command of `workloads/sysmem.c` that does one known thing,
//! and its rows, notes and the command's exit code come back through the same calls the
//! binary makes.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;
use std::sync::atomic::AtomicUsize;
use std::time::Duration;

use fltrace_capture::shell_status;
use fltrace_render::TableFormat;
use fltrace_system::{Scope, Tool};

/// `workloads/sysmem.c`, built once, without frame pointers.
fn sysmem() -> &'static Path {
    static BUILT: OnceLock<(tempfile::TempDir, PathBuf)> = OnceLock::new();
    let (_, path) = BUILT.get_or_init(|| {
        let dir = tempfile::tempdir().expect("temporary directory");
        let out = dir.path().join("sysmem");
        let source = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../workloads/sysmem.c");
        let status = Command::new("gcc")
            .args(["-O2", "-g", "-fomit-frame-pointer", "-o"])
            .arg(&out)
            .arg(source)
            .status()
            .expect("gcc runs");
        assert!(status.success(), "gcc sysmem.c");
        (dir, out)
    });
    path
}

/// What a tool printed over `command`, its notes, and the exit code it gives.
struct Ran {
    out: String,
    notes: Vec<String>,
    exit_code: u8,
}

fn run_over(tool: Tool, command: &[OsString], format: TableFormat) -> Ran {
    let scope = Scope {
        command: command.to_vec(),
        ..Scope::all()
    };
    let open = tool.open(&scope).expect("the tool opens");
    let notes = open.notes().to_vec();
    let mut out = Vec::new();
    let finished = open
        .run(&AtomicUsize::new(0), None, format, &mut out)
        .expect("the tool runs to the command's end");
    Ran {
        out: String::from_utf8(out).expect("UTF-8 output"),
        notes,
        exit_code: shell_status(finished.status),
    }
}

fn sysmem_command(args: &[&str]) -> Vec<OsString> {
    let mut command = vec![sysmem().as_os_str().to_owned()];
    command.extend(args.iter().map(OsString::from));
    command
}

/// mmapsnoop over `sysmem mmap FILE`, which maps 3 pages of FILE at offset 4096, read-only
/// and shared: its CSV has the tool's columns and that call's row, with the exact size.
#[test]
fn mmapsnoop_over_a_command_sees_its_mapping_with_exact_size() {
    let dir = tempfile::tempdir().expect("temporary directory");
    let file = dir.path().join("mapped");
    std::fs::write(&file, vec![1u8; 16384]).expect("writes the file");
    let file = file.canonicalize().expect("its path");
    let file_text = file.to_str().expect("UTF-8 path");
    let ran = run_over(
        Tool::Mmapsnoop,
        &sysmem_command(&["mmap", file_text]),
        TableFormat::Csv,
    );
    assert_eq!(ran.exit_code, 0);
    assert_eq!(ran.notes, Vec::<String>::new());
    let mut reader = csv::Reader::from_reader(ran.out.as_bytes());
    let header: Vec<String> = reader
        .headers()
        .expect("a header")
        .iter()
        .map(str::to_owned)
        .collect();
    assert_eq!(
        header,
        [
            "time_s",
            "pid",
            "comm",
            "prot",
            "map",
            "offset_kb",
            "size_kb",
            "addr",
            "file"
        ]
    );
    let mapped: Vec<Vec<String>> = reader
        .records()
        .map(|r| r.expect("a row").iter().map(str::to_owned).collect())
        .filter(|row: &Vec<String>| row[8] == file_text)
        .collect();
    assert_eq!(mapped.len(), 1, "one mmap of the file:\n{}", ran.out);
    assert_eq!(
        mapped[0][2..7],
        ["sysmem", "R--", "S---", "4", "12"],
        "comm, prot, map, offset and size in KiB"
    );
}

/// brkstack's `folded` option reaches the tool: over `sysmem brk` (its own command, so
/// stacks are unwound from DWARF and no note says otherwise) the output is folded lines,
/// one through main and grow_break.
#[test]
fn brkstack_folded_over_a_command_folds_the_brk_stack() {
    let ran = run_over(
        Tool::Brkstack { folded: true },
        &sysmem_command(&["brk"]),
        TableFormat::Table,
    );
    assert_eq!(ran.exit_code, 0);
    assert_eq!(ran.notes, Vec::<String>::new());
    assert!(
        ran.out
            .lines()
            .any(|l| l.starts_with("sysmem;") && l.contains(";main;grow_break;")),
        "{}",
        ran.out
    );
    for line in ran.out.lines() {
        let count = line.rsplit_once(' ').map(|(_, count)| count);
        assert!(
            count.is_some_and(|c| c.parse::<u64>().is_ok()),
            "a folded line ends with its count: {line}"
        );
    }
}

/// System-wide, brkstack uses the kernel's frame-pointer stacks and its notes say so.
#[test]
fn brkstack_system_wide_notes_its_frame_pointer_stacks() {
    let open = Tool::Brkstack { folded: false }
        .open(&Scope::all())
        .expect("brkstack opens system-wide");
    assert_eq!(
        open.notes(),
        [
            "system-wide: stacks are the kernel's frame-pointer walk, short in code built without \
          frame pointers; name processes (-p PID or a command) for complete DWARF stacks"
        ]
    );
    let mut out = Vec::new();
    let stopped = AtomicUsize::new(1);
    let finished = open
        .run(&stopped, Some(Duration::ZERO), TableFormat::Csv, &mut out)
        .expect("stops at once");
    assert_eq!(shell_status(finished.status), 0);
}

/// The command's exit code comes through any tool: `sysmem` without a mode exits 1 with its
/// usage, `sh -c 'exit 3'` with 3, one killed by SIGKILL with 137; vmscan's interval option reaches the tool, whose CSV
/// header is its own.
#[test]
fn the_commands_exit_code_comes_through() {
    let ran = run_over(Tool::Hfaults, &sysmem_command(&[]), TableFormat::Csv);
    assert_eq!(ran.exit_code, 1);
    let exit_3: Vec<OsString> = ["sh", "-c", "exit 3"].map(OsString::from).into();
    let ran = run_over(
        Tool::Vmscan {
            interval: Duration::from_millis(100),
        },
        &exit_3,
        TableFormat::Csv,
    );
    assert_eq!(ran.exit_code, 3);
    // Killed by a signal: 128 + its number, as a shell says it (and `fltrace record` exits).
    let killed: Vec<OsString> = ["sh", "-c", "kill -9 $$"].map(OsString::from).into();
    assert_eq!(
        run_over(Tool::Hfaults, &killed, TableFormat::Csv).exit_code,
        137
    );
    assert_eq!(
        ran.out.lines().next(),
        Some(
            "time,s_slab_ms,d_reclaim_ms,m_reclaim_ms,kswapd,writepage,s_slabs,d_reclaims,\
             m_reclaims,m_reclaimed_pages"
        )
    );
}
