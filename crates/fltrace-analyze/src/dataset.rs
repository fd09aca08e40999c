//! `fltrace export`: recordings as a symbolized dataset that SQL engines answer from without
//! re-implementing symbolization. Per recording, in hive partitions
//! `host=<host>/recording=<id>/`, a `faults.parquet` (every fault with its `fault_id` and the
//! address of its call site) and a `frames.parquet` (every stack's frames, each address
//! expanded to its inlined functions, named as reports name them, with the call site marked
//! under the rule of [`crate::call_site`]). Grouping the faults by their call-site frame's
//! function gives `report --by function`'s counts.

use std::path::{Path, PathBuf};

use fltrace_trace::{
    ExportedFault, ExportedFaultWriter, ProcessTrace, Recording, SymbolizedFrame,
    SymbolizedFrameWriter, VirtAddr,
};

use crate::{
    CallSite, FaultCounts, LoadError, ResolvedStacks, Symbolizer, debug_config,
    separate_tracer_counts,
};

/// The file names of the two tables in each recording's partition.
pub const EXPORT_FAULTS: &str = "faults.parquet";
/// See [`EXPORT_FAULTS`].
pub const EXPORT_FRAMES: &str = "frames.parquet";

/// What one recording became.
#[derive(Debug, Clone)]
pub struct ExportedRecording {
    /// The recording id.
    pub recording: String,
    /// Its partition directory.
    pub dir: PathBuf,
    /// Rows written.
    pub faults: u64,
    /// See `faults`.
    pub frames: u64,
}

impl ExportedRecording {
    /// `fltrace export`'s line of it: `ID: N faults, M frames in DIR`.
    pub fn line(&self) -> String {
        format!(
            "{}: {} faults, {} frames in {}",
            self.recording,
            self.faults,
            self.frames,
            self.dir.display()
        )
    }
}

/// Why the `host=` partition has no name.
#[derive(Debug, thiserror::Error)]
pub enum HostError {
    /// The machine's host name could not be read.
    #[error("reading the host name (give --host)")]
    Read(#[source] std::io::Error),
    /// The name given or read cannot name a partition.
    #[error("--host {0:?}: a partition name needs no `/` or `=` and is not empty")]
    Invalid(String),
}

/// The `host=` partition: `host` if given, else this machine's host name (from
/// `hostname_file`, /proc/sys/kernel/hostname), refused empty or with `/` or `=`.
pub fn export_host(host: Option<String>, hostname_file: &Path) -> Result<String, HostError> {
    let host = match host {
        Some(host) => host,
        None => std::fs::read_to_string(hostname_file)
            .map_err(HostError::Read)?
            .trim()
            .to_owned(),
    };
    if host.is_empty() || host.contains(['/', '=']) {
        return Err(HostError::Invalid(host));
    }
    Ok(host)
}

/// Writes every recording in `dir` under `output/host=<host>/recording=<id>/`.
pub fn export_dataset(
    dir: &Path,
    output: &Path,
    host: &str,
) -> Result<(Vec<ExportedRecording>, Vec<String>), LoadError> {
    let recordings = Recording::list(dir)?;
    let mut symbolizer = Symbolizer::with_debug_config(debug_config(dir, None));
    let mut done = Vec::with_capacity(recordings.len());
    for recording in &recordings {
        let id = &recording.session.id;
        let part = output
            .join(format!("host={host}"))
            .join(format!("recording={id}"));
        std::fs::create_dir_all(&part).map_err(|source| fltrace_trace::Error::Io {
            path: part.clone(),
            source,
        })?;
        let mut faults = ExportedFaultWriter::create(&part.join(EXPORT_FAULTS))?;
        let mut frames = SymbolizedFrameWriter::create(&part.join(EXPORT_FRAMES))?;
        let mut rows = (0u64, 0u64);
        for &pid in recording.pids() {
            // Its allocation events are not exported: not read.
            let trace = recording
                .load_without_alloc_events(pid)
                .map_err(|source| LoadError::Process { pid, source })?;
            let mut stacks = symbolizer.resolve_stacks(&trace);
            stacks.call_site = CallSite::Program;
            // As `report` does: the preloaded library's frames leave the program's stacks,
            // and become the call sites of fltrace's own faults.
            let mut counts = FaultCounts::of(&trace.faults);
            separate_tracer_counts(&mut counts, &mut stacks, true);
            let mut sites: rustc_hash::FxHashMap<u32, u64> = Default::default();
            for row in stack_rows(&trace, &stacks) {
                if row.call_site {
                    sites.insert(row.stack_id, row.address);
                }
                frames.push(row)?;
                rows.1 += 1;
            }
            for (i, fault) in trace.faults.iter().enumerate() {
                faults.push(ExportedFault {
                    fault: *fault,
                    fault_id: i as u64,
                    call_site: sites.get(&fault.stack_id).copied().unwrap_or(0),
                })?;
                rows.0 += 1;
            }
        }
        faults.finish()?;
        frames.finish()?;
        done.push(ExportedRecording {
            recording: id.clone(),
            dir: part,
            faults: rows.0,
            frames: rows.1,
        });
    }
    let warnings = symbolizer.take_warnings();
    Ok((done, warnings))
}

/// The frames rows of every stack of `trace`: one per location of each frame, and for a stack
/// without any location one `[unknown]` row holding its call site, as reports count it.
fn stack_rows(trace: &ProcessTrace, stacks: &ResolvedStacks) -> Vec<SymbolizedFrame> {
    let mut rows = Vec::new();
    for stack in &trace.stacks {
        let locations = stacks.get(stack.id);
        let site = crate::call_site(locations).map(|l| l as *const _);
        let mut any = false;
        for (frame, resolved) in stacks.frames(stack.id).iter().enumerate() {
            let build_id = trace
                .mapping_at(stack.generation, VirtAddr::from(resolved.address))
                .map(|m| m.build_id.clone())
                .unwrap_or_default();
            for (depth, location) in resolved.locations.iter().enumerate() {
                any = true;
                rows.push(SymbolizedFrame {
                    pid: trace.pid,
                    stack_id: stack.id,
                    frame: frame as u32,
                    inline_depth: depth as u32,
                    address: resolved.address.get(),
                    build_id: build_id.clone(),
                    function: location.function.to_string(),
                    file: location.file.to_string(),
                    line: location.line,
                    library: location.lib.to_string(),
                    call_site: site == Some(location as *const _),
                });
            }
        }
        if !any {
            rows.push(SymbolizedFrame {
                pid: trace.pid,
                stack_id: stack.id,
                frame: 0,
                inline_depth: 0,
                address: stack.frames.first().map_or(0, |a| a.get()),
                build_id: String::new(),
                function: "[unknown]".into(),
                file: String::new(),
                line: 0,
                library: "[unknown]".into(),
                call_site: true,
            });
        }
    }
    rows
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The host given, else the machine's, trimmed; a name no partition can have is refused.
    #[test]
    fn host_partition_names() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("hostname");
        std::fs::write(&file, "db1\n").unwrap();
        assert_eq!(export_host(None, &file).unwrap(), "db1");
        assert_eq!(export_host(Some("h".into()), &file).unwrap(), "h");
        for bad in ["a/b", "x=y", ""] {
            assert!(matches!(
                export_host(Some(bad.into()), &file),
                Err(HostError::Invalid(_))
            ));
        }
        let missing = export_host(None, &dir.path().join("none")).unwrap_err();
        assert_eq!(missing.to_string(), "reading the host name (give --host)");
    }

    /// Each exported recording is said with its rows and partition.
    #[test]
    fn an_exported_recording_is_one_line() {
        let exported = ExportedRecording {
            recording: "r1".to_owned(),
            dir: PathBuf::from("x/host=h/recording=r1"),
            faults: 12,
            frames: 40,
        };
        assert_eq!(
            exported.line(),
            "r1: 12 faults, 40 frames in x/host=h/recording=r1"
        );
    }
}
