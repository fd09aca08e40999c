//! Hardware memory-access samples (Intel PEBS `mem-loads`/`mem-stores`, AMD IBS op): finding
//! the events in sysfs and decoding the samples. Decoding needs no PMU, so it is tested with
//! sample records built by the tests; capture needs one, and this machine has none.

use std::path::Path;

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
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AccessSample {
    /// Instruction address.
    pub ip: u64,
    /// Process id.
    pub pid: u32,
    /// Thread id.
    pub tid: u32,
    /// Kernel time, ns.
    pub time_ns: u64,
    /// Data address.
    pub addr: u64,
    /// Latency in cycles (`PERF_SAMPLE_WEIGHT`), 0 when not given.
    pub latency: u64,
    /// Where the data came from.
    pub source: DataSource,
}

/// Decodes a sample record body with `sample_type` = IP | TID | TIME | ADDR | WEIGHT |
/// DATA_SRC, the fields in the kernel's fixed order.
pub fn decode_sample(body: &[u8]) -> Option<AccessSample> {
    let u64_at = |o: usize| Some(u64::from_ne_bytes(body.get(o..o + 8)?.try_into().ok()?));
    let u32_at = |o: usize| Some(u32::from_ne_bytes(body.get(o..o + 4)?.try_into().ok()?));
    Some(AccessSample {
        ip: u64_at(0)?,
        pid: u32_at(8)?,
        tid: u32_at(12)?,
        time_ns: u64_at(16)?,
        addr: u64_at(24)?,
        latency: u64_at(32)?,
        source: DataSource::from_bits(u64_at(40)?),
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
        body.extend_from_slice(&180u64.to_ne_bytes());
        // mem_op LOAD (2), mem_lvl HIT|L3 (0x42 << 5), mem_dtlb MISS (4 << 26).
        let data_src = 2 | (0x42 << 5) | (4 << 26);
        body.extend_from_slice(&(data_src as u64).to_ne_bytes());
        let sample = decode_sample(&body).unwrap();
        assert_eq!(
            (
                sample.ip,
                sample.pid,
                sample.tid,
                sample.addr,
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
            decode_sample(&body[..40]),
            None,
            "a short record is refused"
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
}
