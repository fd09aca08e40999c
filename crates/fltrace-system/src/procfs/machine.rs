//! The machine-wide files of /proc: event counters (vmstat), memory (meminfo), memory
//! pressure, swap areas, mounts, load and kernel symbols. Each reader reads its file once and
//! hands the parsed text back; its parser is public for tests over a fixed text.

use std::collections::HashMap;
use std::path::PathBuf;

use super::ProcError;

fn read(path: &str) -> Result<String, ProcError> {
    std::fs::read_to_string(path).map_err(ProcError::reading(path))
}

/// The event counters of /proc/vmstat at one moment.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Vmstat(HashMap<String, u64>);

impl Vmstat {
    /// The counter `key` (`pswpin`); 0 when this kernel does not count it.
    pub fn get(&self, key: &str) -> u64 {
        self.0.get(key).copied().unwrap_or(0)
    }
}

/// /proc/vmstat now.
pub fn vmstat() -> Result<Vmstat, ProcError> {
    Ok(parse_vmstat(&read("/proc/vmstat")?))
}

/// Parses `key value` lines (/proc/vmstat).
pub fn parse_vmstat(text: &str) -> Vmstat {
    Vmstat(numbers_by_key(text, ' ').collect())
}

/// The lines `KEY<separator> NUMBER ...` of `text` as (KEY, NUMBER).
fn numbers_by_key(text: &str, separator: char) -> impl Iterator<Item = (String, u64)> + '_ {
    text.lines().filter_map(move |l| {
        let (key, rest) = l.split_once(separator)?;
        Some((
            key.to_owned(),
            rest.split_whitespace().next()?.parse().ok()?,
        ))
    })
}

/// The figures of /proc/meminfo, in its order.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Meminfo(Vec<(String, u64)>);

impl Meminfo {
    /// The figure `key` (`MemAvailable`; KiB for all but the `HugePages_*` counts).
    pub fn get(&self, key: &str) -> Option<u64> {
        self.0.iter().find(|(k, _)| k == key).map(|&(_, v)| v)
    }

    /// The figures' names, in the file's order.
    pub fn keys(&self) -> impl Iterator<Item = &str> {
        self.0.iter().map(|(k, _)| k.as_str())
    }
}

/// /proc/meminfo now.
pub fn meminfo() -> Result<Meminfo, ProcError> {
    Ok(parse_meminfo(&read("/proc/meminfo")?))
}

/// Parses `Key:   value kB` lines (/proc/meminfo).
pub fn parse_meminfo(text: &str) -> Meminfo {
    Meminfo(numbers_by_key(text, ':').collect())
}

/// Memory pressure (PSI) of /proc/pressure/memory.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Pressure {
    /// µs during which some task stalled on memory.
    pub some_us: u64,
    /// µs during which every non-idle task stalled on memory.
    pub full_us: u64,
    /// The kernel's 10 s average of `some`, percent.
    pub some_avg10: f64,
    /// The kernel's 10 s average of `full`, percent.
    pub full_avg10: f64,
}

/// /proc/pressure/memory now (missing where the kernel has no PSI: CONFIG_PSI off, `psi=0`).
pub fn pressure() -> Result<Pressure, ProcError> {
    const PATH: &str = "/proc/pressure/memory";
    Pressure::parse(&read(PATH)?).ok_or_else(|| ProcError::Malformed { path: PATH.into() })
}

impl Pressure {
    /// `some avg10=0.31 avg60=0.59 avg300=0.33 total=53533753` and its `full` line.
    pub fn parse(text: &str) -> Option<Pressure> {
        let line = |kind: &str| -> Option<(f64, u64)> {
            let rest = text.lines().find_map(|l| l.strip_prefix(kind))?;
            let field = |name: &str| {
                rest.split_whitespace()
                    .find_map(|kv| kv.strip_prefix(name)?.strip_prefix('='))
            };
            Some((field("avg10")?.parse().ok()?, field("total")?.parse().ok()?))
        };
        let (some_avg10, some_us) = line("some ")?;
        let (full_avg10, full_us) = line("full ")?;
        Some(Pressure {
            some_us,
            full_us,
            some_avg10,
            full_avg10,
        })
    }
}

/// One swap area of /proc/swaps.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SwapDevice {
    /// Its path.
    pub name: String,
    /// Size, KiB.
    pub size_kib: u64,
    /// Used, KiB.
    pub used_kib: u64,
}

/// The active swap areas (none on a kernel built without swap, which has no /proc/swaps).
pub fn swaps() -> Result<Vec<SwapDevice>, ProcError> {
    match read("/proc/swaps") {
        Ok(text) => Ok(parse_swaps(&text)),
        Err(e) if e.is_missing() => Ok(Vec::new()),
        Err(e) => Err(e),
    }
}

/// Whether any swap area is active (false too when /proc/swaps cannot be read).
pub fn swap_active() -> bool {
    swaps().is_ok_and(|s| !s.is_empty())
}

/// Parses /proc/swaps: a header, then `Filename Type Size Used Priority` per area.
pub fn parse_swaps(text: &str) -> Vec<SwapDevice> {
    text.lines()
        .skip(1)
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            Some(SwapDevice {
                name: (*f.first()?).to_owned(),
                size_kib: f.get(2)?.parse().ok()?,
                used_kib: f.get(3)?.parse().ok()?,
            })
        })
        .collect()
}

/// One mounted file system of /proc/self/mounts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mount {
    /// Where it is mounted (with the kernel's octal escapes, `\040` for a space).
    pub dir: PathBuf,
    /// Its type (`cgroup2`).
    pub fstype: String,
    /// Its options (`rw`, `memory`...).
    pub options: Vec<String>,
}

/// The file systems mounted in this process's mount namespace.
pub fn mounts() -> Result<Vec<Mount>, ProcError> {
    Ok(parse_mounts(&read("/proc/self/mounts")?))
}

/// Parses `source dir type options dump pass` lines (/proc/self/mounts).
pub fn parse_mounts(text: &str) -> Vec<Mount> {
    text.lines()
        .filter_map(|l| {
            let mut f = l.split_whitespace().skip(1);
            Some(Mount {
                dir: PathBuf::from(f.next()?),
                fstype: f.next()?.to_owned(),
                options: f.next()?.split(',').map(str::to_owned).collect(),
            })
        })
        .collect()
}

/// /proc/loadavg without its newline (`0.52 0.58 0.59 2/755 18643`), empty when unreadable.
pub fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.trim().to_owned())
        .unwrap_or_default()
}

/// The kernel's functions (text and weak symbols) of /proc/kallsyms with their addresses,
/// sorted by address; none unless root (the kernel shows others zero addresses).
pub fn kernel_functions() -> Result<Vec<(u64, String)>, ProcError> {
    Ok(parse_kernel_functions(&read("/proc/kallsyms")?))
}

/// Parses `address type name [module]` lines (/proc/kallsyms) into the functions at nonzero
/// addresses, sorted.
pub fn parse_kernel_functions(text: &str) -> Vec<(u64, String)> {
    let mut symbols: Vec<(u64, String)> = text
        .lines()
        .filter_map(|line| {
            let mut parts = line.split_whitespace();
            let addr = u64::from_str_radix(parts.next()?, 16).ok()?;
            let kind = parts.next()?;
            let name = parts.next()?;
            (addr != 0 && matches!(kind, "t" | "T" | "w" | "W")).then(|| (addr, name.to_owned()))
        })
        .collect();
    symbols.sort_unstable();
    symbols
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn vmstat_counters_by_name() {
        let vm = parse_vmstat("nr_free_pages 123\npswpin 7\npswpout 9\npgscan_kswapd 4096\n");
        assert_eq!(vm.get("pswpin"), 7);
        assert_eq!(vm.get("pswpout"), 9);
        assert_eq!(vm.get("pgscan_kswapd"), 4096);
        // A counter this kernel lacks (pgscan_anon before 5.8) counts nothing.
        assert_eq!(vm.get("pgscan_anon"), 0);
    }

    #[test]
    fn meminfo_figures_in_order() {
        let info = parse_meminfo(
            "MemTotal:       16303308 kB\nMemFree:          512000 kB\n\
             HugePages_Total:       0\nHugetlb:               0 kB\n",
        );
        assert_eq!(info.get("MemTotal"), Some(16_303_308));
        assert_eq!(info.get("MemFree"), Some(512_000));
        assert_eq!(info.get("HugePages_Total"), Some(0));
        assert_eq!(info.get("MemAvailable"), None);
        assert_eq!(
            info.keys().collect::<Vec<_>>(),
            ["MemTotal", "MemFree", "HugePages_Total", "Hugetlb"]
        );
    }

    /// Every figure of triage's meminfo section is in kB in /proc/meminfo, as the table
    /// prints it, and this kernel gives them all.
    #[test]
    fn triage_meminfo_figures_are_kilobytes() {
        let text = read("/proc/meminfo").expect("/proc/meminfo");
        for key in crate::triage::MEMINFO_KEYS {
            let line = text
                .lines()
                .find(|l| l.strip_prefix(key).is_some_and(|r| r.starts_with(':')))
                .unwrap_or_else(|| panic!("{key} in /proc/meminfo"));
            assert!(line.ends_with(" kB"), "{line}");
        }
        let info = parse_meminfo(&text);
        assert!(
            crate::triage::MEMINFO_KEYS
                .iter()
                .all(|k| info.get(k).is_some())
        );
    }

    #[test]
    fn reads_pressure_lines() {
        let text = "some avg10=0.31 avg60=0.59 avg300=0.33 total=53533753\n\
                    full avg10=0.01 avg60=0.05 avg300=0.00 total=11510126\n";
        assert_eq!(
            Pressure::parse(text),
            Some(Pressure {
                some_us: 53_533_753,
                full_us: 11_510_126,
                some_avg10: 0.31,
                full_avg10: 0.01,
            })
        );
        assert_eq!(Pressure::parse("some avg10=0.31\n"), None);
    }

    #[test]
    fn swap_areas_after_the_header() {
        let text = "Filename\t\t\t\tType\t\tSize\t\tUsed\t\tPriority\n\
                    /dev/zram0                              partition\t4194300\t\t1024\t\t100\n";
        assert_eq!(
            parse_swaps(text),
            [SwapDevice {
                name: "/dev/zram0".into(),
                size_kib: 4_194_300,
                used_kib: 1024,
            }]
        );
        assert_eq!(parse_swaps("Filename Type Size Used Priority\n"), []);
    }

    #[test]
    fn mounts_with_type_and_options() {
        let text = "cgroup2 /sys/fs/cgroup cgroup2 rw,nosuid,nodev,noexec,relatime 0 0\n\
                    cgroup /sys/fs/cgroup/memory cgroup rw,relatime,memory 0 0\n";
        assert_eq!(
            parse_mounts(text),
            [
                Mount {
                    dir: "/sys/fs/cgroup".into(),
                    fstype: "cgroup2".into(),
                    options: ["rw", "nosuid", "nodev", "noexec", "relatime"]
                        .map(String::from)
                        .into(),
                },
                Mount {
                    dir: "/sys/fs/cgroup/memory".into(),
                    fstype: "cgroup".into(),
                    options: ["rw", "relatime", "memory"].map(String::from).into(),
                },
            ]
        );
    }

    #[test]
    fn kernel_functions_sorted_without_data_or_hidden_addresses() {
        let text = "ffffffff81000200 T _text\nffffffff81000100 t early_idt\n\
                    ffffffff82000000 D jiffies\n0000000000000000 T hidden\n\
                    ffffffffc0001000 t nf_hook\t[nf_tables]\n";
        assert_eq!(
            parse_kernel_functions(text),
            [
                (0xffff_ffff_8100_0100, "early_idt".to_owned()),
                (0xffff_ffff_8100_0200, "_text".to_owned()),
                (0xffff_ffff_c000_1000, "nf_hook".to_owned()),
            ]
        );
    }
}
