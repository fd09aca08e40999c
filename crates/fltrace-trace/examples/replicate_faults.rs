//! Builds a large recording from a real one, for benchmarking `fltrace report` on more faults
//! than are practical to record: copies every file of recording directory SRC into DST and
//! writes each faults table again with its rows repeated TIMES times (times shifted on by the
//! recording's span each time, so that they still grow), in the recorder's row groups.
//!
//! usage: cargo run --release -p fltrace-trace --example replicate_faults -- SRC DST TIMES

use std::path::{Path, PathBuf};

use fltrace_trace::{FaultRowGroups, FaultWriter, files};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [src, dst, times] = args.as_slice() else {
        return Err("usage: replicate_faults SRC DST TIMES".into());
    };
    let (src, dst) = (PathBuf::from(src), PathBuf::from(dst));
    let times: u64 = times.parse().map_err(|e| format!("TIMES: {e}"))?;
    std::fs::create_dir_all(&dst)?;
    for entry in std::fs::read_dir(&src)? {
        let entry = entry?;
        let name = entry.file_name();
        let Some(name) = name.to_str() else { continue };
        if !entry.file_type()?.is_file() {
            continue;
        }
        match files::pid_of(name, "faults", "parquet") {
            Some(_) => replicate(&entry.path(), &dst.join(name), times)?,
            None => {
                std::fs::copy(entry.path(), dst.join(name))?;
            }
        }
    }
    Ok(())
}

/// Writes the faults of `src` `times` times over into `dst`, with `src`'s footer.
fn replicate(src: &Path, dst: &Path, times: u64) -> Result<(), Box<dyn std::error::Error>> {
    let groups = FaultRowGroups::open(src)?;
    let metadata = groups.metadata();
    let (mut first, mut last) = (u64::MAX, 0);
    for group in groups {
        for fault in group? {
            first = first.min(fault.time_ns);
            last = last.max(fault.time_ns);
        }
    }
    let span = last.saturating_sub(first) + 1;
    let mut writer = FaultWriter::create(dst, &metadata)?;
    for pass in 0..times {
        for group in FaultRowGroups::open(src)? {
            for mut fault in group? {
                fault.time_ns += pass * span;
                writer.push(fault)?;
            }
        }
    }
    writer.finish()?;
    eprintln!(
        "{}: {} faults",
        dst.display(),
        writer_rows(dst).unwrap_or(0)
    );
    Ok(())
}

fn writer_rows(path: &Path) -> Option<u64> {
    FaultRowGroups::open_keys(path).ok().map(|g| g.rows())
}
