//! The reclaim step of `triage` (the chapter's vmscan and drsnoop, read from the kernel's own
//! counters): pages scanned and stolen over the interval (/proc/vmstat), the time tasks
//! stalled on memory (/proc/pressure/memory) and the memory cgroups that hit their limit.

use std::path::{Path, PathBuf};

pub use crate::procfs::Pressure;
use crate::procfs::{self, ProcError};

/// Reclaim counters of /proc/vmstat, pages.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ReclaimPages {
    /// Scanned, every reclaimer (`pgscan_anon` + `pgscan_file`: memory cgroup reclaim too).
    pub scanned: u64,
    /// Freed, every reclaimer (`pgsteal_anon` + `pgsteal_file`).
    pub stolen: u64,
    /// Scanned by kswapd (`pgscan_kswapd`).
    pub scanned_kswapd: u64,
    /// Scanned in direct reclaim by allocating tasks, outside cgroup limits (`pgscan_direct`).
    pub scanned_direct: u64,
}

impl ReclaimPages {
    fn read() -> Result<ReclaimPages, ProcError> {
        let vm = procfs::vmstat()?;
        Ok(ReclaimPages {
            scanned: vm.get("pgscan_anon") + vm.get("pgscan_file"),
            stolen: vm.get("pgsteal_anon") + vm.get("pgsteal_file"),
            scanned_kswapd: vm.get("pgscan_kswapd"),
            scanned_direct: vm.get("pgscan_direct"),
        })
    }

    fn since(self, before: ReclaimPages) -> ReclaimPages {
        ReclaimPages {
            scanned: self.scanned.saturating_sub(before.scanned),
            stolen: self.stolen.saturating_sub(before.stolen),
            scanned_kswapd: self.scanned_kswapd.saturating_sub(before.scanned_kswapd),
            scanned_direct: self.scanned_direct.saturating_sub(before.scanned_direct),
        }
    }
}

/// A memory cgroup with a limit, as read at one moment.
#[derive(Debug, Clone, PartialEq, Eq)]
struct GroupReading {
    /// The group's directory.
    dir: PathBuf,
    /// Its name in the hierarchy (`/system.slice/x`), as the kernel's OOM lines give it.
    name: String,
    usage: u64,
    limit: u64,
    /// Times its usage met the limit (v1 `memory.failcnt`, v2 `memory.events` `max`).
    limit_hits: u64,
    /// Times it went over its high mark (v2 `memory.events` `high`; none in v1).
    high_hits: u64,
}

/// A memory cgroup that met its limit during the interval, or is at it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupAtLimit {
    /// Its directory (for `--cgroup`).
    pub dir: PathBuf,
    /// Its name in the hierarchy.
    pub name: String,
    /// Bytes in use at the end.
    pub usage: u64,
    /// Its limit, bytes.
    pub limit: u64,
    /// Times it met the limit during the interval (each a reclaim in the group, or a failure).
    pub limit_hits: u64,
    /// Times it went over its high mark during the interval (cgroup v2).
    pub high_hits: u64,
}

/// Limits at or above this are none (v1's PAGE_COUNTER_MAX in bytes, 2^63 rounded to pages).
const NO_LIMIT: u64 = 1 << 62;

/// The mount points of the memory controller: v1 hierarchies mounted with `memory`, and cgroup2
/// mounts (whose groups have `memory.max` where the controller is enabled).
fn memory_hierarchies() -> Result<Vec<(PathBuf, bool)>, ProcError> {
    Ok(procfs::mounts()?
        .into_iter()
        .filter_map(|m| match m.fstype.as_str() {
            "cgroup2" => Some((m.dir, true)),
            "cgroup" if m.options.iter().any(|o| o == "memory") => Some((m.dir, false)),
            _ => None,
        })
        .collect())
}

fn read_u64(path: &Path) -> Option<u64> {
    std::fs::read_to_string(path).ok()?.trim().parse().ok()
}

/// `key value` of a flat keyed file such as memory.events.
fn keyed(path: &Path, key: &str) -> u64 {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix(key)?.strip_prefix(' ')?.trim().parse().ok())
        .unwrap_or(0)
}

fn read_group(root: &Path, dir: &Path, v2: bool) -> Option<GroupReading> {
    let (usage, limit, limit_hits, high_hits) = if v2 {
        let limit = read_u64(&dir.join("memory.max"))?;
        let events = dir.join("memory.events");
        (
            read_u64(&dir.join("memory.current"))?,
            limit,
            keyed(&events, "max"),
            keyed(&events, "high"),
        )
    } else {
        (
            read_u64(&dir.join("memory.usage_in_bytes"))?,
            read_u64(&dir.join("memory.limit_in_bytes"))?,
            read_u64(&dir.join("memory.failcnt")).unwrap_or(0),
            0,
        )
    };
    if limit >= NO_LIMIT {
        return None;
    }
    let name = dir.strip_prefix(root).ok()?.to_string_lossy().into_owned();
    Some(GroupReading {
        dir: dir.to_owned(),
        name: format!("/{name}"),
        usage,
        limit,
        limit_hits,
        high_hits,
    })
}

/// Every memory cgroup with a limit (`memory.max` of v2 reads as text "max" when none, and
/// fails to parse: left out).
fn groups_with_limits() -> Result<Vec<GroupReading>, ProcError> {
    let mut out = Vec::new();
    for (root, v2) in memory_hierarchies()? {
        let mut pending = vec![root.clone()];
        while let Some(dir) = pending.pop() {
            if dir != root
                && let Some(group) = read_group(&root, &dir, v2)
            {
                out.push(group);
            }
            if let Ok(entries) = std::fs::read_dir(&dir) {
                pending.extend(
                    entries
                        .flatten()
                        .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
                        .map(|e| e.path()),
                );
            }
        }
    }
    Ok(out)
}

/// Usage at or above this share of the limit counts as at the limit (percent).
const AT_LIMIT_PERCENT: u64 = 95;

/// The groups that met their limit between `before` and `after`, or are at it now, most hits
/// first.
fn at_limit(before: &[GroupReading], after: Vec<GroupReading>) -> Vec<GroupAtLimit> {
    let mut out: Vec<GroupAtLimit> = after
        .into_iter()
        .filter_map(|now| {
            let then = before.iter().find(|g| g.dir == now.dir);
            // A group made during the interval started from nothing.
            let (hits0, high0) = then.map_or((0, 0), |g| (g.limit_hits, g.high_hits));
            let limit_hits = now.limit_hits.saturating_sub(hits0);
            let high_hits = now.high_hits.saturating_sub(high0);
            let full = now.usage.saturating_mul(100) >= now.limit.saturating_mul(AT_LIMIT_PERCENT);
            (limit_hits > 0 || high_hits > 0 || full).then_some(GroupAtLimit {
                dir: now.dir,
                name: now.name,
                usage: now.usage,
                limit: now.limit,
                limit_hits,
                high_hits,
            })
        })
        .collect();
    out.sort_by_key(|g| std::cmp::Reverse((g.limit_hits, g.high_hits, g.usage)));
    out
}

/// What reclaim did during the interval.
#[derive(Debug, Clone, Default)]
pub struct Reclaim {
    /// Pages scanned and freed.
    pub pages: ReclaimPages,
    /// Stall time during the interval (`some_us`, `full_us`) and the kernel's averages at its
    /// end; None when the kernel has no PSI (CONFIG_PSI off or `psi=0`).
    pub pressure: Option<Pressure>,
    /// Why there is no pressure figure.
    pub pressure_error: Option<String>,
    /// Memory cgroups at their limit.
    pub groups: Vec<GroupAtLimit>,
}

/// The counters read at the interval's start.
pub struct ReclaimWatch {
    pages: ReclaimPages,
    pressure: Result<Pressure, String>,
    groups: Vec<GroupReading>,
}

/// The pressure now, or why there is none (the kernel has no PSI, or its file reads oddly).
fn pressure() -> Result<Pressure, String> {
    procfs::pressure().map_err(|e| e.to_string())
}

impl ReclaimWatch {
    /// Reads the counters now.
    pub fn start() -> Result<ReclaimWatch, ProcError> {
        Ok(ReclaimWatch {
            pages: ReclaimPages::read()?,
            pressure: pressure(),
            groups: groups_with_limits()?,
        })
    }

    /// What changed since the start.
    pub fn finish(self) -> Result<Reclaim, ProcError> {
        let pressure = match (pressure(), self.pressure) {
            (Ok(now), Ok(then)) => Ok(Pressure {
                some_us: now.some_us.saturating_sub(then.some_us),
                full_us: now.full_us.saturating_sub(then.full_us),
                ..now
            }),
            (Err(e), _) | (_, Err(e)) => Err(e),
        };
        Ok(Reclaim {
            pages: ReclaimPages::read()?.since(self.pages),
            pressure_error: pressure.as_ref().err().cloned(),
            pressure: pressure.ok(),
            groups: at_limit(&self.groups, groups_with_limits()?),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reading(name: &str, usage: u64, limit: u64, hits: u64) -> GroupReading {
        GroupReading {
            dir: PathBuf::from(format!("/sys/fs/cgroup/memory{name}")),
            name: name.into(),
            usage,
            limit,
            limit_hits: hits,
            high_hits: 0,
        }
    }

    /// A group is at its limit when it met it during the interval (though emptied since) or
    /// is within 5% of it now; hits before the interval do not count.
    #[test]
    fn groups_at_limit_are_those_that_met_it_or_are_full() {
        let before = [reading("/a", 0, 100, 10), reading("/b", 0, 100, 3)];
        let after = vec![
            reading("/a", 1, 100, 10),
            reading("/b", 1, 100, 9),
            reading("/c", 96, 100, 0),
            reading("/d", 94, 100, 0),
            reading("/new", 1, 100, 2),
        ];
        let names: Vec<(String, u64)> = at_limit(&before, after)
            .into_iter()
            .map(|g| (g.name, g.limit_hits))
            .collect();
        assert_eq!(
            names,
            [("/b".into(), 6), ("/new".into(), 2), ("/c".into(), 0)]
        );
    }
}
