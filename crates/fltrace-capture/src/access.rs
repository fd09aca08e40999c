//! Hardware memory-access samples (Intel PEBS `mem-loads`/`mem-stores`, AMD IBS op): finding
//! the events in sysfs, capturing them for the traced processes, decoding the samples and
//! writing `fltrace-data-access-<pid>.parquet`. Decoding and writing need no PMU, so they are
//! tested with sample records built by the tests; capture needs one, and the development
//! machines have none.
//!
//! Stacks are the kernel's user callchains (frame pointers): the PMU interrupt gives no time
//! for the DWARF unwinding faults get, and they are complete only in code built with frame
//! pointers.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use perf_event_open_sys::bindings::{
    PERF_RECORD_LOST, PERF_RECORD_SAMPLE, PERF_RECORD_THROTTLE, PERF_SAMPLE_ADDR,
    PERF_SAMPLE_CALLCHAIN, PERF_SAMPLE_DATA_SRC, PERF_SAMPLE_IP, PERF_SAMPLE_TID, PERF_SAMPLE_TIME,
    PERF_SAMPLE_WEIGHT, perf_event_attr,
};

use fltrace_trace::{
    AccessRecord, AccessWriter, CodeAddr, Origin, Stack, StackWriter, VirtAddr, files,
};

use crate::Error;
use crate::perf_abi::{self, PerfEvent};
use crate::pid_filing::UNFILED;
use crate::reader::ReaderThread;
use crate::ring::RingBuffer;

/// Whether a sampled access was a load or a store, from `perf_mem_data_src.mem_op`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AccessOp {
    /// A load.
    Load,
    /// A store.
    Store,
    /// A prefetch, an instruction fetch or unknown.
    Other,
}

/// Where the data came from, from `perf_mem_data_src` (include/uapi/linux/perf_event.h).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DataSource {
    /// Load, store or other.
    pub op: AccessOp,
    /// The memory level name: `L1`, `LFB`, `L2`, `L3`, `RAM`, `remote RAM`, `remote cache`,
    /// `I/O`, `uncached` or `unknown`.
    pub level: &'static str,
    /// Whether the level was a hit (false: a miss, or not reported).
    pub hit: bool,
    /// Whether the address translation missed the TLB.
    pub tlb_miss: bool,
}

impl DataSource {
    /// Decodes the bits of `PERF_SAMPLE_DATA_SRC`.
    pub fn from_bits(bits: u64) -> DataSource {
        let op = (bits & 0x1f) as u32;
        let lvl = ((bits >> 5) & 0x3fff) as u32;
        let dtlb = ((bits >> 26) & 0x7f) as u32;
        let op = if op & 2 != 0 {
            AccessOp::Load
        } else if op & 4 != 0 {
            AccessOp::Store
        } else {
            AccessOp::Other
        };
        let level = [
            (0x8, "L1"),
            (0x10, "LFB"),
            (0x20, "L2"),
            (0x40, "L3"),
            (0x80, "RAM"),
            (0x300, "remote RAM"),
            (0xc00, "remote cache"),
            (0x1000, "I/O"),
            (0x2000, "uncached"),
        ]
        .into_iter()
        .find(|(mask, _)| lvl & mask != 0)
        .map_or("unknown", |(_, name)| name);
        DataSource {
            op,
            level,
            hit: lvl & 2 != 0,
            tlb_miss: dtlb & 4 != 0,
        }
    }
}

/// One sampled access.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AccessSample {
    /// Instruction address.
    pub ip: CodeAddr,
    /// Process id.
    pub pid: u32,
    /// Thread id.
    pub tid: u32,
    /// Kernel time, ns.
    pub time_ns: u64,
    /// Data address.
    pub addr: VirtAddr,
    /// Latency in cycles (`PERF_SAMPLE_WEIGHT`), 0 when not given.
    pub latency: u64,
    /// Where the data came from.
    pub source: DataSource,
    /// `perf_mem_data_src` as the kernel gave it.
    pub data_src: u64,
    /// The user callchain, innermost first (the sampled instruction's caller first).
    pub stack: Vec<CodeAddr>,
}

/// The `sample_type` that [`decode_sample`] reads.
pub const SAMPLE_TYPE: u32 = PERF_SAMPLE_IP
    | PERF_SAMPLE_TID
    | PERF_SAMPLE_TIME
    | PERF_SAMPLE_ADDR
    | PERF_SAMPLE_CALLCHAIN
    | PERF_SAMPLE_WEIGHT
    | PERF_SAMPLE_DATA_SRC;

/// Callchain entries at or above this are context markers (`PERF_CONTEXT_USER`...).
const PERF_CONTEXT_MAX: u64 = -4095i64 as u64;

/// Decodes a sample record body of [`SAMPLE_TYPE`]: IP, TID, TIME, ADDR, CALLCHAIN, WEIGHT,
/// DATA_SRC, in the kernel's fixed order.
pub fn decode_sample(body: &[u8]) -> Option<AccessSample> {
    let u64_at = |o: usize| Some(u64::from_ne_bytes(body.get(o..o + 8)?.try_into().ok()?));
    let u32_at = |o: usize| Some(u32::from_ne_bytes(body.get(o..o + 4)?.try_into().ok()?));
    let frames = usize::try_from(u64_at(32)?).ok()?;
    if frames > 4096 {
        return None;
    }
    let stack: Vec<CodeAddr> = (0..frames)
        .map(|i| u64_at(40 + 8 * i))
        .collect::<Option<Vec<u64>>>()?
        .into_iter()
        .filter(|&ip| ip < PERF_CONTEXT_MAX)
        .map(CodeAddr::new)
        .collect();
    let after = 40 + 8 * frames;
    let data_src = u64_at(after + 8)?;
    Some(AccessSample {
        ip: CodeAddr::new(u64_at(0)?),
        pid: u32_at(8)?,
        tid: u32_at(12)?,
        time_ns: u64_at(16)?,
        addr: VirtAddr::new(u64_at(24)?),
        latency: u64_at(after)?,
        source: DataSource::from_bits(data_src),
        data_src,
        stack,
    })
}

/// A PMU event to open for access sampling: `perf_event_attr` type, config and config1.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PmuEvent {
    /// `perf_event_attr.type`.
    pub pmu_type: u32,
    /// `perf_event_attr.config`.
    pub config: u64,
    /// `perf_event_attr.config1` (the load-latency threshold on Intel).
    pub config1: u64,
}

/// Resolves a sysfs event such as `cpu/events/mem-loads` (`event=0xcd,umask=0x1,ldlat=3`)
/// through the PMU's `format/` files (`event` = `config:0-7`) into attr values.
pub fn resolve_event(pmu_dir: &Path, event: &str) -> Option<PmuEvent> {
    let pmu_type = std::fs::read_to_string(pmu_dir.join("type"))
        .ok()?
        .trim()
        .parse()
        .ok()?;
    let spec = std::fs::read_to_string(pmu_dir.join("events").join(event)).ok()?;
    let (mut config, mut config1) = (0u64, 0u64);
    for term in spec.trim().split(',') {
        let (name, value) = term.split_once('=').unwrap_or((term, "1"));
        let value = value
            .strip_prefix("0x")
            .map_or_else(|| value.parse().ok(), |h| u64::from_str_radix(h, 16).ok())?;
        let format = std::fs::read_to_string(pmu_dir.join("format").join(name)).ok()?;
        let (field, bits) = format.trim().split_once(':')?;
        let (low, high) = bits.split_once('-').unwrap_or((bits, bits));
        let (low, high): (u32, u32) = (low.parse().ok()?, high.parse().ok()?);
        let mask = if high - low >= 63 {
            u64::MAX
        } else {
            (1u64 << (high - low + 1)) - 1
        };
        let placed = (value & mask) << low;
        match field {
            "config" => config |= placed,
            "config1" => config1 |= placed,
            _ => return None,
        }
    }
    Some(PmuEvent {
        pmu_type,
        config,
        config1,
    })
}

/// What this machine offers for sampling memory accesses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Availability {
    /// Intel PEBS: the load and (if present) store events.
    Pebs(PmuEvent, Option<PmuEvent>),
    /// AMD IBS op sampling.
    Ibs(PmuEvent),
    /// Neither.
    None,
}

/// Looks for PEBS (`cpu/events/mem-loads` with precise sampling) or IBS (`ibs_op`) in sysfs.
pub fn availability() -> Availability {
    let devices = Path::new("/sys/bus/event_source/devices");
    if let Some(pmu_type) = std::fs::read_to_string(devices.join("ibs_op/type"))
        .ok()
        .and_then(|t| t.trim().parse().ok())
    {
        return Availability::Ibs(PmuEvent {
            pmu_type,
            config: 0,
            config1: 0,
        });
    }
    let cpu = devices.join("cpu");
    let precise: u32 = std::fs::read_to_string(cpu.join("caps/max_precise"))
        .ok()
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0);
    match resolve_event(&cpu, "mem-loads") {
        Some(loads) if precise > 0 => Availability::Pebs(loads, resolve_event(&cpu, "mem-stores")),
        _ => Availability::None,
    }
}

/// The attr of one access-sampling event at `freq` samples per second.
fn sample_attr(
    event: &PmuEvent,
    precise: bool,
    freq: u64,
    enable_on_exec: bool,
) -> perf_event_attr {
    let mut attr = perf_event_attr {
        size: std::mem::size_of::<perf_event_attr>() as u32,
        ..Default::default()
    };
    attr.type_ = event.pmu_type;
    attr.config = event.config;
    attr.__bindgen_anon_3.config1 = event.config1;
    attr.__bindgen_anon_1.sample_freq = freq;
    attr.set_freq(1);
    attr.sample_type = u64::from(SAMPLE_TYPE);
    if precise {
        attr.set_precise_ip(2);
    }
    attr.set_disabled(1);
    attr.set_inherit(1);
    attr.set_enable_on_exec(u64::from(enable_on_exec));
    attr.set_exclude_kernel(1);
    attr.set_exclude_hv(1);
    attr.set_exclude_callchain_kernel(1);
    attr.set_use_clockid(1);
    attr.clockid = libc::CLOCK_MONOTONIC;
    attr
}

/// Access sampling of the traced processes, drained in a thread of its own.
pub struct AccessCapture(ReaderThread<AccessSummary>);

/// What a capture wrote.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct AccessSummary {
    /// Samples written.
    pub samples: u64,
    /// Times the kernel throttled sampling (too high a rate for its interrupt budget).
    pub throttled: u64,
    /// Samples the kernel dropped, and those of processes not filed (a pid reused more than
    /// 511 times).
    pub lost: u64,
}

impl AccessCapture {
    /// Opens the machine's access events for `tasks` on every CPU (`enable_on_exec` for a
    /// command fltrace starts) and drains them into `tables` until [`Self::finish`], each
    /// sample filed by `filing`.
    pub(crate) fn start(
        availability: Availability,
        freq: u64,
        tasks: &[i32],
        enable_on_exec: bool,
        tables: AccessTables,
        mono_offset: u64,
        filing: crate::pid_filing::PidFiling,
    ) -> Result<AccessCapture, Error> {
        let (events, precise): (Vec<PmuEvent>, bool) = match availability {
            Availability::Pebs(loads, stores) => {
                (std::iter::once(loads).chain(stores).collect(), true)
            }
            Availability::Ibs(op) => (vec![op], false),
            Availability::None => {
                return Err(Error::Kernel {
                    what: "hardware memory-access sampling",
                    source: std::io::Error::from_raw_os_error(libc::ENODEV),
                    hint: " (needs Intel PEBS or AMD IBS)",
                });
            }
        };
        let mut opened = Vec::new();
        let mut rings = Vec::new();
        for cpu in perf_abi::online_cpus().map_err(Error::kernel("online CPUs"))? {
            let mut leader: Option<usize> = None;
            for event in &events {
                let attr = sample_attr(event, precise, freq, enable_on_exec);
                for &task in tasks {
                    let perf = PerfEvent::open(&attr, task, cpu)
                        .map_err(Error::kernel("a PMU memory-access event"))?;
                    match leader {
                        Some(l) => perf
                            .set_output(&opened[l])
                            .map_err(Error::kernel("sharing an access-sample ring"))?,
                        None => {
                            rings.push(
                                RingBuffer::map(&perf, 1024)
                                    .map_err(Error::kernel("mapping an access-sample ring"))?,
                            );
                            leader = Some(opened.len());
                        }
                    }
                    opened.push(perf);
                }
            }
        }
        if !enable_on_exec {
            for event in &opened {
                event
                    .enable()
                    .map_err(Error::kernel("enabling access sampling"))?;
            }
        }
        ReaderThread::spawn("fltrace-access", "the access-sample reader", move |stop| {
            let _events = opened;
            drain(rings, stop, tables, mono_offset, filing)
        })
        .map(AccessCapture)
    }

    /// Stops, writes the tables and says what they hold.
    pub fn finish(self) -> Result<AccessSummary, Error> {
        self.0.finish()
    }
}

fn drain(
    mut rings: Vec<RingBuffer>,
    stop: &AtomicBool,
    mut tables: AccessTables,
    mono_offset: u64,
    filing: crate::pid_filing::PidFiling,
) -> Result<AccessSummary, Error> {
    let mut summary = AccessSummary::default();
    let mut last_checkpoint = std::time::Instant::now();
    let mut samples = Vec::new();
    loop {
        let stopping = stop.load(Ordering::Relaxed);
        for ring in &mut rings {
            ring.drain(|record| match record.kind {
                PERF_RECORD_SAMPLE => {
                    if let Some(sample) = decode_sample(&record.data.as_slice()) {
                        samples.push(sample);
                    }
                }
                PERF_RECORD_THROTTLE => summary.throttled += 1,
                PERF_RECORD_LOST => {
                    summary.lost += record
                        .data
                        .get(8..16)
                        .and_then(|d| d.as_slice().as_ref().try_into().ok())
                        .map_or(0, u64::from_ne_bytes);
                }
                _ => {}
            });
        }
        // The records' reader stops after the program ended and before this thread does.
        for sample in file_read(&mut samples, &filing, stopping) {
            if sample.pid == UNFILED {
                summary.lost += 1;
                continue;
            }
            tables.push(sample, mono_offset)?;
            summary.samples += 1;
        }
        if stopping {
            break;
        }
        // As the faults table does: what was read survives the recorder's death.
        if last_checkpoint.elapsed() >= Duration::from_secs(1) {
            tables.checkpoint()?;
            last_checkpoint = std::time::Instant::now();
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    tables.finish()?;
    Ok(summary)
}

/// Takes from `samples` those the records' reader has read up to (all when `stopping`), in
/// time order, each with the pid its process is filed as (a later process that reused a pid
/// has one of its own); the newer wait, since their process's fork may not be read yet.
fn file_read(
    samples: &mut Vec<AccessSample>,
    filing: &crate::pid_filing::PidFiling,
    stopping: bool,
) -> Vec<AccessSample> {
    samples.sort_by_key(|s| s.time_ns);
    let read_ns = filing.read_ns();
    let ready = if stopping {
        samples.len()
    } else {
        samples.partition_point(|s| s.time_ns <= read_ns)
    };
    let mut ready: Vec<AccessSample> = samples.drain(..ready).collect();
    for sample in &mut ready {
        sample.pid = filing.filed(sample.pid, sample.time_ns);
    }
    ready
}

/// One process's access table, its stack table and the ids of the stacks written.
type ProcessTables = (AccessWriter, StackWriter, HashMap<Vec<CodeAddr>, u32>);

/// Per process, the access table and its stacks.
pub struct AccessTables {
    dir: PathBuf,
    recording: String,
    open: HashMap<u32, ProcessTables>,
}

impl AccessTables {
    /// Tables of recording `recording` written into `dir` as samples of each process arrive.
    pub fn new(dir: PathBuf, recording: String) -> AccessTables {
        AccessTables {
            dir,
            recording,
            open: HashMap::new(),
        }
    }

    /// Appends a sample to its process's tables; `mono_offset` turns its time into the
    /// faults' clock.
    pub fn push(&mut self, sample: AccessSample, mono_offset: u64) -> Result<(), Error> {
        let pid = sample.pid;
        if !self.open.contains_key(&pid) {
            let origin = Origin::new(self.recording.clone(), pid);
            let tables = (
                AccessWriter::create_for(&files::access(&self.dir, pid), origin.clone())?,
                StackWriter::create_for(&files::access_stacks(&self.dir, pid), origin)?,
                HashMap::new(),
            );
            self.open.insert(pid, tables);
        }
        let Some((access, stacks, ids)) = self.open.get_mut(&pid) else {
            return Ok(());
        };
        let stack_id = match ids.get(&sample.stack) {
            Some(&id) => id,
            None => {
                let id = ids.len() as u32;
                stacks.push(Stack {
                    end: fltrace_trace::StackEnd::Unknown,
                    id,
                    generation: 0,
                    frames: sample.stack.clone(),
                })?;
                ids.insert(sample.stack, id);
                id
            }
        };
        access.push(AccessRecord {
            time_ns: sample.time_ns.wrapping_add(mono_offset),
            tid: sample.tid,
            ip: sample.ip,
            addr: sample.addr,
            latency: sample.latency,
            data_src: sample.data_src,
            stack_id,
        })?;
        Ok(())
    }

    /// Makes every sample so far readable should the recorder die: the stacks first, so
    /// that every sample readable has its stack.
    pub fn checkpoint(&mut self) -> Result<(), Error> {
        for (access, stacks, _) in self.open.values_mut() {
            stacks.checkpoint()?;
            access.checkpoint()?;
        }
        Ok(())
    }

    /// Writes every table's footer.
    pub fn finish(self) -> Result<(), Error> {
        for (_, (access, stacks, _)) in self.open {
            access.finish()?;
            stacks.finish()?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A record as the kernel writes it for a PEBS load from L3 that missed the TLB.
    #[test]
    fn decodes_a_load_sample() {
        let mut body = Vec::new();
        body.extend_from_slice(&0x5555_0000_1234u64.to_ne_bytes());
        body.extend_from_slice(&42u32.to_ne_bytes());
        body.extend_from_slice(&43u32.to_ne_bytes());
        body.extend_from_slice(&1_000u64.to_ne_bytes());
        body.extend_from_slice(&0x7f00_0000_0040u64.to_ne_bytes());
        // Callchain: the user-context marker, then two return addresses.
        body.extend_from_slice(&3u64.to_ne_bytes());
        body.extend_from_slice(&(-512i64 as u64).to_ne_bytes());
        body.extend_from_slice(&0x5555_0000_2000u64.to_ne_bytes());
        body.extend_from_slice(&0x5555_0000_3000u64.to_ne_bytes());
        body.extend_from_slice(&180u64.to_ne_bytes());
        // mem_op LOAD (2), mem_lvl HIT|L3 (0x42 << 5), mem_dtlb MISS (4 << 26).
        let data_src = 2 | (0x42 << 5) | (4 << 26);
        body.extend_from_slice(&(data_src as u64).to_ne_bytes());
        let sample = decode_sample(&body).unwrap();
        assert_eq!(
            (
                sample.ip.get(),
                sample.pid,
                sample.tid,
                sample.addr.get(),
                sample.latency
            ),
            (0x5555_0000_1234, 42, 43, 0x7f00_0000_0040, 180)
        );
        assert_eq!(
            sample.source,
            DataSource {
                op: AccessOp::Load,
                level: "L3",
                hit: true,
                tlb_miss: true
            }
        );
        assert_eq!(
            sample.stack,
            [0x5555_0000_2000, 0x5555_0000_3000].map(CodeAddr::new)
        );
        assert_eq!(
            decode_sample(&body[..body.len() - 1]),
            None,
            "a short record is refused"
        );

        // Written to the process's tables and read back on the faults' clock.
        let dir = tempfile::tempdir().unwrap();
        let mut tables = AccessTables::new(dir.path().to_owned(), "42-1".to_owned());
        tables.push(sample.clone(), 5_000).unwrap();
        tables.push(sample, 6_000).unwrap();
        tables.finish().unwrap();
        let rows = fltrace_trace::read_access(&files::access(dir.path(), 42)).unwrap();
        assert_eq!(rows.len(), 2);
        assert_eq!(
            (
                rows[0].time_ns,
                rows[0].addr.get(),
                rows[0].latency,
                rows[0].stack_id,
                rows[1].stack_id
            ),
            (6_000, 0x7f00_0000_0040, 180, 0, 0)
        );
        assert!(!rows[0].is_store());
        let stacks = fltrace_trace::read_stacks(&files::access_stacks(dir.path(), 42)).unwrap();
        assert_eq!(
            stacks[0].frames,
            [0x5555_0000_2000, 0x5555_0000_3000].map(CodeAddr::new)
        );
    }

    /// Stores and remote memory decode too.
    #[test]
    fn decodes_store_and_remote_sources() {
        let store = DataSource::from_bits(4 | (0x100 << 5));
        assert_eq!(
            (store.op, store.level, store.hit),
            (AccessOp::Store, "remote RAM", false)
        );
        assert_eq!(DataSource::from_bits(0).level, "unknown");
    }

    /// Intel's mem-loads resolves through the format files into config and config1.
    #[test]
    fn resolves_sysfs_events() {
        let dir = std::env::temp_dir().join(format!("fltrace-pmu-{}", std::process::id()));
        std::fs::create_dir_all(dir.join("events")).unwrap();
        std::fs::create_dir_all(dir.join("format")).unwrap();
        std::fs::write(dir.join("type"), "4\n").unwrap();
        std::fs::write(
            dir.join("events/mem-loads"),
            "event=0xcd,umask=0x1,ldlat=3\n",
        )
        .unwrap();
        std::fs::write(dir.join("format/event"), "config:0-7\n").unwrap();
        std::fs::write(dir.join("format/umask"), "config:8-15\n").unwrap();
        std::fs::write(dir.join("format/ldlat"), "config1:0-15\n").unwrap();
        let event = resolve_event(&dir, "mem-loads").unwrap();
        assert_eq!(
            event,
            PmuEvent {
                pmu_type: 4,
                config: 0x1cd,
                config1: 3
            }
        );
        assert_eq!(resolve_event(&dir, "mem-stores"), None);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// Samples of a reused pid go to the process that held it at their time, and wait while
    /// the records' reader is behind them (the later process's fork may not be read yet).
    /// Before, every sample was filed by the kernel's pid: the later process's in the first
    /// one's table.
    #[test]
    fn samples_of_a_reused_pid_are_filed_under_the_process_that_held_it() {
        const L: u32 = files::PID_LIMIT;
        let sample = |pid: u32, time_ns: u64| AccessSample {
            ip: CodeAddr::new(0x40_1000),
            pid,
            tid: pid,
            time_ns,
            addr: VirtAddr::new(0x7f00_0000_0000),
            latency: 0,
            source: DataSource::from_bits(2),
            data_src: 2,
            stack: Vec::new(),
        };
        let filing = crate::pid_filing::PidFiling::default();
        let mut samples = vec![
            sample(6, 300),
            sample(6, 50),
            sample(6, 120),
            sample(9, 120),
        ];
        let filed = |ready: Vec<AccessSample>| -> Vec<(u64, u32)> {
            ready.iter().map(|s| (s.time_ns, s.pid)).collect()
        };
        // Nothing read yet: every sample waits.
        assert_eq!(filed(file_read(&mut samples, &filing, false)), []);
        filing.reused(6, 100, 6 + L);
        filing.read_until(150);
        assert_eq!(
            filed(file_read(&mut samples, &filing, false)),
            [(50, 6), (120, 6 + L), (120, 9)]
        );
        // The next process on pid 6 is beyond what the tables can file.
        filing.reused(6, 200, UNFILED);
        assert_eq!(samples.len(), 1);
        assert_eq!(
            filed(file_read(&mut samples, &filing, true)),
            [(300, UNFILED)]
        );
        assert!(samples.is_empty());
    }

    /// A recorder killed after a checkpoint leaves the samples up to it readable, each with
    /// its stack; what came after is lost, not garbled.
    #[test]
    fn checkpointed_samples_survive_a_writer_that_never_finishes() {
        let dir = tempfile::tempdir().expect("temporary directory");
        let mut tables = AccessTables::new(dir.path().to_owned(), "rec".into());
        let sample = |n: u64| AccessSample {
            ip: CodeAddr::new(0x40_1000 + n),
            pid: 7,
            tid: 8,
            time_ns: 1_000 * n,
            addr: VirtAddr::new(0x7f00_0000_0000 + 4096 * n),
            latency: n,
            source: DataSource::from_bits(2),
            data_src: 2,
            stack: [0x40_2000, 0x40_3000 + n % 2].map(CodeAddr::new).to_vec(),
        };
        for n in 0..3 {
            tables.push(sample(n), 0).expect("push");
        }
        tables.checkpoint().expect("checkpoint");
        tables.push(sample(3), 0).expect("push");
        // The recorder dies: no footer is ever written.
        std::mem::forget(tables);

        let samples = fltrace_trace::read_access(&files::access(dir.path(), 7)).expect("recovered");
        let addrs: Vec<u64> = samples.iter().map(|s| s.addr.get()).collect();
        assert_eq!(
            addrs,
            [0x7f00_0000_0000, 0x7f00_0000_1000, 0x7f00_0000_2000]
        );
        let stacks =
            fltrace_trace::read_stacks(&files::access_stacks(dir.path(), 7)).expect("stacks");
        for s in &samples {
            let stack = stacks
                .iter()
                .find(|st| st.id == s.stack_id)
                .expect("its stack");
            assert_eq!(
                stack.frames,
                [0x40_2000, 0x40_3000 + (s.ip.get() - 0x40_1000) % 2].map(CodeAddr::new)
            );
        }
    }
}
