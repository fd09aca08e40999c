//! Fuzz-style robustness: random and mutated bytes fed to every reader of trace files, of the
//! allocation log and of procfs/tracefs text, asserting that none panics. Seeded, so every run
//! feeds the same inputs; a fixed number of inputs per reader keeps each to a few seconds.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::Path;

use fltrace_trace::files;

use super::util::*;
use fltrace_trace::{CodeAddr, VirtAddr};

/// SplitMix64: small, seedable, good enough to pick mutations.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: usize) -> usize {
        if n == 0 {
            0
        } else {
            (self.next() % n as u64) as usize
        }
    }

    /// `seed` changed the way fuzzers do: bits flipped, bytes set to edge values, ranges
    /// zeroed, duplicated or cut, or bytes that are random throughout.
    fn mutate(&mut self, seed: &[u8]) -> Vec<u8> {
        let mut data = seed.to_vec();
        let rounds = 1 + self.below(4);
        for _ in 0..rounds {
            let len = data.len();
            match self.below(8) {
                0 => {
                    if len > 0 {
                        let i = self.below(len);
                        data[i] ^= 1 << self.below(8);
                    }
                }
                1 => {
                    if len > 0 {
                        let i = self.below(len);
                        data[i] = [0, 0xff, 0x7f, 0x80, b'\n', b' ', b'-', b':'][self.below(8)];
                    }
                }
                2 => data.truncate(self.below(len + 1)),
                3 => {
                    let at = self.below(len + 1);
                    let n = 1 + self.below(16);
                    let bytes: Vec<u8> = (0..n).map(|_| self.next() as u8).collect();
                    data.splice(at..at, bytes);
                }
                4 => {
                    if len > 0 {
                        let start = self.below(len);
                        let end = (start + 1 + self.below(64)).min(len);
                        data[start..end].fill(0);
                    }
                }
                5 => {
                    if len > 0 {
                        let start = self.below(len);
                        let end = (start + 1 + self.below(256)).min(len);
                        let copy = data[start..end].to_vec();
                        let at = self.below(len + 1);
                        data.splice(at..at, copy);
                    }
                }
                6 => {
                    // A little-endian word set to an extreme: lengths, counts and offsets.
                    if len >= 4 {
                        let i = self.below(len - 3);
                        let value: u32 = [0, u32::MAX, i32::MAX as u32, 1 << 31][self.below(4)];
                        data[i..i + 4].copy_from_slice(&value.to_le_bytes());
                    }
                }
                _ => {
                    let n = self.below(512);
                    data = (0..n).map(|_| self.next() as u8).collect();
                }
            }
        }
        data
    }
}

/// Feeds `inputs` mutations of each seed to `read`, failing with the input saved when it
/// panics.
fn fuzz(name: &str, seeds: &[Vec<u8>], inputs: usize, mut read: impl FnMut(&[u8])) {
    assert!(seeds.iter().any(|s| !s.is_empty()), "{name}: no seed");
    let mut rng = Rng(0x5eed_0000
        ^ name
            .bytes()
            .fold(0u64, |h, b| h.wrapping_mul(31) ^ u64::from(b)));
    for i in 0..inputs {
        let seed = &seeds[i % seeds.len()];
        let input = rng.mutate(seed);
        if catch_unwind(AssertUnwindSafe(|| read(&input))).is_err() {
            let saved = std::env::temp_dir().join(format!("fltrace-fuzz-{name}-{i}"));
            let _ = std::fs::write(&saved, &input);
            panic!(
                "{name}: input {i} panicked the reader (saved as {})",
                saved.display()
            );
        }
    }
}

/// Writes `bytes` to `path` and calls `read` on the path.
fn through_file(path: &Path, bytes: &[u8], read: impl FnOnce(&Path)) {
    std::fs::write(path, bytes).expect("write fuzz input");
    read(path);
}

/// A real recording (faults, stacks, mappings, allocations) mutated: every table reader, the
/// recording loader, the stats and procmaps readers.
#[test]
fn trace_file_readers_survive_mutations() {
    let dir = Dir::new();
    // --allocs adds the allocation tables to the faults, stacks and mappings.
    let out = dir
        .fltrace()
        .args(["record", "-q", "--allocs", "--"])
        .arg(&workloads().allocs)
        .arg("sites")
        .output()
        .expect("fltrace runs");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let pid = *dir
        .pids("allocs", "parquet")
        .last()
        .expect("an allocation table");
    let seed = |path: std::path::PathBuf| vec![std::fs::read(path).expect("recorded file")];

    let scratch = Dir::new();
    let target = |kind: &str, ext: &str| files::path(scratch.path(), kind, 7, ext);
    type Reader = fn(&Path);
    let tables: [(&str, Reader); 5] = [
        ("faults", |p| drop(fltrace_trace::read_faults(p))),
        ("stacks", |p| drop(fltrace_trace::read_stacks(p))),
        ("mmaps", |p| drop(fltrace_trace::read_mappings(p))),
        ("allocs", |p| drop(fltrace_trace::read_allocs(p))),
        ("allocstacks", |p| drop(fltrace_trace::read_stacks(p))),
    ];
    for (kind, read) in tables {
        let seeds = seed(files::path(dir.path(), kind, pid, "parquet"));
        let path = target(kind, "parquet");
        fuzz(kind, &seeds, 300, |bytes| {
            through_file(&path, bytes, |p| {
                read(p);
                drop(fltrace_trace::read_origin(p));
            })
        });
    }
    // The access table has no recording here: a written one is the seed.
    let access = target("access", "parquet");
    let mut writer = fltrace_trace::AccessWriter::create(&access).expect("access table");
    for i in 0..20u64 {
        writer
            .push(fltrace_trace::AccessRecord {
                time_ns: 1_000_000 + i,
                tid: 7,
                ip: CodeAddr::new(0x401000) + i,
                addr: VirtAddr::new(0x1000_0000) + 64 * i,
                latency: i,
                data_src: i & 4,
                stack_id: 0,
            })
            .expect("row");
    }
    writer.finish().expect("finish");
    let seeds = vec![std::fs::read(&access).expect("access table")];
    fuzz("access", &seeds, 200, |bytes| {
        through_file(&access, bytes, |p| drop(fltrace_trace::read_access(p)))
    });

    let stats = seed(files::stats(dir.path(), pid));
    let stats_path = files::stats(scratch.path(), 7);
    fuzz("stats", &stats, 500, |bytes| {
        through_file(&stats_path, bytes, |p| {
            drop(fltrace_trace::stats::last_value(p, "memory_used"));
        });
        for line in String::from_utf8_lossy(bytes).lines() {
            drop(fltrace_trace::stats::parse_line(line));
        }
    });
    let procmaps = seed(files::procmaps(dir.path(), pid));
    fuzz("procmaps", &procmaps, 500, |bytes| {
        for line in String::from_utf8_lossy(bytes).lines() {
            drop(fltrace_trace::parse_procmaps_line(line));
        }
    });

    // The whole recording, one file mutated at a time, through the loader analyses use.
    let kinds = ["faults", "stacks", "mmaps", "allocs", "allocstacks"];
    let originals: Vec<Vec<u8>> = kinds
        .iter()
        .map(|k| std::fs::read(files::path(dir.path(), k, pid, "parquet")).expect("table"))
        .collect();
    let whole = Dir::new();
    for (kind, bytes) in kinds.iter().zip(&originals) {
        std::fs::write(files::path(whole.path(), kind, pid, "parquet"), bytes).expect("copy");
    }
    let mut rng = Rng(0x10ad);
    for i in 0..100 {
        let k = i % kinds.len();
        let path = files::path(whole.path(), kinds[k], pid, "parquet");
        std::fs::write(&path, rng.mutate(&originals[k])).expect("mutated table");
        let loaded = catch_unwind(|| {
            if let Ok(recording) = fltrace_trace::Recording::latest(whole.path()) {
                for &p in recording.pids() {
                    drop(recording.load(p));
                    drop(recording.load_allocs(p));
                }
            }
        });
        assert!(
            loaded.is_ok(),
            "loading with {} mutated ({i}) panicked",
            kinds[k]
        );
        std::fs::write(&path, &originals[k]).expect("restore");
    }
}

/// The range traces of `fltrace wss` (CSV) mutated.
#[test]
fn range_trace_reader_survives_mutations() {
    let scratch = Dir::new();
    let seeds = vec![
        b"time_s,start,end,referenced_bytes,rss_bytes,path\n\
          0.100,0x1000,0x3000,4096,8192,[heap]\n0.200,0x1000,0x3000,0,8192,[heap]\n"
            .to_vec(),
        b"time_s,start,end,nr_accesses\n0.1,0x7f00,0x7fff,3\n1.5,0x7f0000,0x7f2000,7\n".to_vec(),
    ];
    for kind in ["wss", "damon"] {
        let path = files::path(scratch.path(), kind, 7, "csv");
        fuzz(kind, &seeds, 500, |bytes| {
            through_file(&path, bytes, |p| drop(fltrace_trace::read_range_trace(p)))
        });
    }
}

/// The allocation log the preloaded tracer writes: the chunk decoder, and the recorder's
/// conversion of whole log files.
#[test]
fn allocation_log_readers_survive_mutations() {
    use fltrace_runtime_abi::alloclog::{
        CHUNK_SIZE, CallRecord, Cursor, Decoder, HEADER_SIZE, MAX_FRAMES, call,
    };
    let mut chunk = vec![0u8; 4096];
    let mut pos = 0;
    let mut cursor = Cursor::default();
    cursor.put_time(&mut chunk, &mut pos, 1_000_000);
    cursor.put_stack(
        &mut chunk,
        &mut pos,
        0,
        &[0x401000, 0x402000, 0x7f00_0000_1000],
    );
    for (i, c) in [call::MALLOC, call::FREE, call::MMAP, call::MUNMAP]
        .iter()
        .enumerate()
    {
        cursor.put_call(
            &mut chunk,
            &mut pos,
            &CallRecord {
                call: *c,
                addr: 0x1000_0000 + i as u64 * 64,
                size: 64 << i,
                old_addr: 0,
                detail: 0,
                stack_id: 0,
            },
        );
    }
    cursor.put_time(&mut chunk, &mut pos, 2_000_000);
    chunk.truncate(pos);
    let mut frames = [0u64; MAX_FRAMES];
    fuzz("alloclog-chunk", &[chunk], 5000, |bytes| {
        let mut decoder = Decoder::new(bytes);
        // Each record consumes input, and an error ends the chunk: this ends.
        while let Some(Ok(_)) = decoder.next(&mut frames) {}
    });

    // Whole log files: the log of the workload run under the tracer is the seed.
    let out_dir = Dir::new();
    let mut logs = fltrace_capture::AllocLogs::create(out_dir.path(), None).expect("spool");
    let (variable, prefix) = logs.environment();
    let status = std::process::Command::new(&workloads().allocs)
        .arg("sites")
        .env("LD_PRELOAD", preload_library())
        .env(variable, &prefix)
        .stdout(std::process::Stdio::null())
        .status()
        .expect("workload runs");
    assert!(status.success());
    let prefix = prefix.to_string_lossy().into_owned();
    let spool = Path::new(&prefix).parent().expect("spool directory");
    let recorded: Vec<Vec<u8>> = std::fs::read_dir(spool)
        .expect("spool")
        .filter_map(|e| e.ok())
        .filter(|e| e.file_name().to_string_lossy().ends_with(".0"))
        .filter_map(|e| std::fs::read(e.path()).ok())
        .collect();
    assert!(
        !recorded.is_empty(),
        "the tracer wrote no log in {}",
        spool.display()
    );
    // Only the used part of the file: the rest is zeros the mutations would mostly hit.
    let seeds: Vec<Vec<u8>> = recorded
        .into_iter()
        .map(|mut log| {
            let used = log.iter().rposition(|&b| b != 0).map_or(0, |i| i + 1);
            let chunks = used.saturating_sub(HEADER_SIZE).div_ceil(CHUNK_SIZE).max(1);
            log.truncate((HEADER_SIZE + chunks * CHUNK_SIZE).min(log.len()));
            log
        })
        .collect();
    let log_path = format!("{prefix}-4242.0");
    let mut converted = 0;
    fuzz("alloclog-file", &seeds, 150, |bytes| {
        std::fs::write(&log_path, bytes).expect("log");
        converted += usize::from(logs.convert(4242, 0, out_dir.path(), 0, "fuzz").is_ok());
    });
    assert!(converted > 0, "no mutated log converted at all");
}

/// The preload library of this build.
fn preload_library() -> std::path::PathBuf {
    Path::new(env!("CARGO_BIN_EXE_fltrace")).with_file_name("libfltrace_preload.so")
}

/// procfs and tracefs text: smaps, maps, kernel log lines, tracepoint formats, event specs.
#[test]
fn procfs_and_tracefs_parsers_survive_mutations() {
    let own = |path: &str| std::fs::read(path).unwrap_or_default();
    let smaps = vec![own("/proc/self/smaps"), own("/proc/1/smaps")];
    fuzz("smaps", &smaps, 400, |bytes| {
        let text = String::from_utf8_lossy(bytes);
        drop(fltrace_system::procfs::parse_smaps(&text));
        drop(fltrace_capture::wss::parse_smaps(&text));
    });
    let maps = vec![own("/proc/self/maps")];
    fuzz("maps", &maps, 400, |bytes| {
        for line in String::from_utf8_lossy(bytes).lines() {
            drop(fltrace_trace::parse_procmaps_line(line));
        }
    });
    let oom = vec![
        b"<3>[ 123.456] Out of memory: Killed process 4242 (allocs) total-vm:1000kB, \
          anon-rss:900kB, file-rss:0kB, shmem-rss:0kB, UID:0 pgtables:40kB oom_score_adj:0"
            .to_vec(),
        b"6,1234,5678,-;oom-kill:constraint=CONSTRAINT_MEMCG,nodemask=(null),cpuset=/,\
          mems_allowed=0,oom_memcg=/t,task_memcg=/t,task=allocs,pid=4242,uid=0"
            .to_vec(),
    ];
    fuzz("oom", &oom, 2000, |bytes| {
        for line in String::from_utf8_lossy(bytes).lines() {
            drop(fltrace_system::procfs::parse_oom_line(line, 4242));
        }
    });
    let format = vec![
        own("/sys/kernel/tracing/events/exceptions/page_fault_user/format"),
        own("/sys/kernel/tracing/events/kmem/mm_page_alloc/format"),
        own("/sys/kernel/tracing/events/syscalls/sys_enter_mmap/format"),
    ];
    fuzz("tracepoint-format", &format, 1000, |bytes| {
        let text = String::from_utf8_lossy(bytes);
        drop(fltrace_system::tracefs::parse_fields(&text));
    });
    let events = vec![
        b"exceptions:page_fault_user".to_vec(),
        b"kmem:mm_page_alloc order>=2".to_vec(),
        b"u:/lib/x86_64-linux-gnu/libc.so.6:malloc".to_vec(),
        b"page-faults".to_vec(),
    ];
    fuzz("event-spec", &events, 3000, |bytes| {
        let text = String::from_utf8_lossy(bytes);
        drop(fltrace_system::count::Event::parse(&text));
        drop(fltrace_system::count::FieldFilter::parse(&text));
    });
}
