//! How much kernel memory a recording's rings take: one budget for all of them
//! (`--buffer-mb`, [`DEFAULT_BUDGET_MB`] by default), whatever the number of CPUs.
//!
//! The kernel allocates a ring whole when it is made, and the per-CPU perf rings of the
//! earlier design (256 MiB of each CPU's fault samples, sized for 16 KiB stack copies) took
//! 512 MiB of this 2-CPU machine and would take 32 GiB of a 128-CPU one. With the faults in
//! one BPF ring shared by all CPUs, the per-CPU rings carry only the side band (mappings,
//! names, forks, exits, `munmap` and `mremap`): half the budget goes to the shared ring, the
//! other half, less what the BPF program's other maps, its programs and the rings' page tables
//! take ([`RingPlan::fixed`]), is split between the CPUs.

/// The default budget, MiB.
pub const DEFAULT_BUDGET_MB: usize = 64;

/// What carries the faults.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Carrier {
    /// One BPF ring for the faults of every CPU; per-CPU perf rings for the side band.
    SharedRing,
    /// The perf tracepoint samples with their stack copies, one ring per CPU (and one for
    /// the major faults): the fallback without BPF, and `--stack-size`.
    PerCpuRings,
}

/// The rings a recording makes, bytes of data each (a power of two of pages; the kernel adds
/// a page of header to each perf ring, three to the BPF ring: its own, the consumer's and the
/// producer's).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RingPlan {
    /// The BPF ring shared by all CPUs (0 with per-CPU rings).
    pub shared: usize,
    /// Each CPU's perf ring: the side band, or with per-CPU rings the fault samples too.
    pub per_cpu: usize,
    /// Each CPU's major-fault ring (per-CPU rings only; the shared ring carries them else).
    pub per_cpu_major: usize,
    /// The CPUs with rings.
    pub cpus: usize,
    /// The page size.
    pub page: usize,
    /// Kept for the BPF program's other maps (the traced processes, the threads' stack bounds,
    /// the counters), its programs and the rings' page tables: a bound on what the kernel
    /// charges for them ([`bpf_fixed`]; 0 with per-CPU rings).
    pub fixed: usize,
}

impl RingPlan {
    /// The kernel memory of all the rings, headers included, bytes.
    pub fn total(&self) -> usize {
        let shared = if self.shared > 0 {
            self.shared + 3 * self.page
        } else {
            0
        };
        let major = if self.per_cpu_major > 0 {
            self.per_cpu_major + self.page
        } else {
            0
        };
        shared + self.cpus * (self.per_cpu + self.page + major) + self.fixed
    }
}

/// What the BPF program's maps other than its ring (`tgids` and `ns_tgids`, hashes of 16,384
/// and 1,024 entries, `stacks`, an LRU hash of 16,384, the per-CPU counters) and its programs
/// take, bytes, for `cpus` CPUs, with the page tables of the rings of a `budget`: a bound. The
/// kernel charged 2.9 MB for them on 6.18 with 2 CPUs (`memlock` in /proc/PID/fdinfo); each CPU
/// adds a hash's spare elements, an LRU list and the counters (under 1 KiB); every page of a
/// ring takes at most two page pointers.
pub fn bpf_fixed(cpus: usize, budget: usize, page: usize) -> usize {
    const MAPS: usize = 4 << 20;
    const PER_CPU: usize = 1 << 10;
    MAPS + cpus * PER_CPU + budget / page * 16
}

/// The budget cannot hold the smallest rings for this many CPUs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error(
    "--buffer-mb {budget_mb} cannot hold the BPF maps and a ring for each of the {cpus} CPUs: give at least {needed_mb}"
)]
pub struct BudgetTooSmall {
    /// The budget asked for, MiB.
    pub budget_mb: usize,
    /// The CPUs.
    pub cpus: usize,
    /// The smallest budget that works, MiB.
    pub needed_mb: usize,
}

/// The smallest shared ring: a few records of a deep stack.
const MIN_SHARED: usize = 256 << 10;
/// Pages of the major-fault ring of each CPU with per-CPU rings, where the budget allows.
const MAJOR_PAGES: usize = 16;

/// The rings for `budget_mb` MiB over `cpus` CPUs: the sizing rule.
///
/// - The BPF program's other maps, its programs and the rings' page tables: [`bpf_fixed`].
/// - Shared ring: half the budget, rounded down to a power of two (the kernel's rule for a
///   BPF ring); less where the CPUs' smallest rings and the fixed part need more than the
///   other half.
/// - Each CPU's side-band ring: what is left divided by the CPUs, less its header page,
///   rounded down to a power of two of pages, at least one page.
/// - Per-CPU rings (no BPF, or `--stack-size`): each CPU's share of the whole budget, less the
///   major-fault ring (16 pages where the share is at least 1 MiB, else 1) and the headers,
///   rounded down to a power of two of pages.
///
/// The total ([`RingPlan::total`]) never exceeds the budget.
pub fn plan_rings(
    budget_mb: usize,
    cpus: usize,
    page: usize,
    carrier: Carrier,
) -> Result<RingPlan, BudgetTooSmall> {
    let budget = budget_mb.saturating_mul(1 << 20);
    let cpus = cpus.max(1);
    let too_small = |needed: usize| BudgetTooSmall {
        budget_mb,
        cpus,
        needed_mb: needed.div_ceil(1 << 20),
    };
    match carrier {
        Carrier::SharedRing => {
            // Each CPU's ring at its smallest: one data page and its header.
            let smallest = cpus * 2 * page;
            let fixed = bpf_fixed(cpus, budget, page);
            let mut shared = floor_pow2(budget / 2);
            if shared + 3 * page + smallest + fixed > budget {
                shared = floor_pow2(budget.saturating_sub(smallest + 3 * page + fixed));
            }
            if shared < MIN_SHARED {
                // The least budget whose fixed part leaves room for the smallest rings (the
                // page tables' term grows with the budget by 1/256 of it: a few rounds settle).
                let least = MIN_SHARED + 3 * page + smallest;
                let mut needed = least;
                for _ in 0..4 {
                    needed = least + bpf_fixed(cpus, needed, page);
                }
                return Err(too_small(needed));
            }
            let share = (budget - fixed - shared - 3 * page) / cpus;
            let per_cpu = floor_pow2(share.saturating_sub(page)).max(page);
            Ok(RingPlan {
                shared,
                per_cpu,
                per_cpu_major: 0,
                cpus,
                page,
                fixed,
            })
        }
        Carrier::PerCpuRings => {
            let share = budget / cpus;
            let major = if share >= 1 << 20 {
                MAJOR_PAGES * page
            } else {
                page
            };
            let rest = share.saturating_sub(major + 2 * page);
            if rest < page {
                return Err(too_small(cpus * (major + 3 * page)));
            }
            Ok(RingPlan {
                shared: 0,
                per_cpu: floor_pow2(rest),
                per_cpu_major: major,
                cpus,
                page,
                fixed: 0,
            })
        }
    }
}

/// The largest power of two not above `n` (0 for 0).
fn floor_pow2(n: usize) -> usize {
    if n == 0 { 0 } else { 1 << n.ilog2() }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: usize = 1 << 20;
    const KIB: usize = 1 << 10;

    /// The default budget on 2, 64, 256 and 4,096 CPUs: the shared ring keeps 32 MiB, the
    /// maps and programs their 4 MiB, 1 KiB a CPU and the page tables' 256 KiB, each CPU's side
    /// band gets its share, and the total stays within 64 MiB.
    #[test]
    fn the_default_budget_holds_on_any_number_of_cpus() {
        let plan = |cpus| plan_rings(DEFAULT_BUDGET_MB, cpus, 4096, Carrier::SharedRing).unwrap();
        let fixed = |cpus: usize| 4 * MIB + cpus * KIB + 256 * KIB;
        let expected = [
            (
                2,
                32 * MIB,
                8 * MIB,
                32 * MIB + 12 * KIB + 2 * (8 * MIB + 4 * KIB) + fixed(2),
            ),
            (
                64,
                32 * MIB,
                256 * KIB,
                32 * MIB + 12 * KIB + 64 * (260 * KIB) + fixed(64),
            ),
            (
                256,
                32 * MIB,
                64 * KIB,
                32 * MIB + 12 * KIB + 256 * (68 * KIB) + fixed(256),
            ),
            // The CPUs' smallest rings take half the budget: the shared ring gives way.
            (
                4096,
                16 * MIB,
                4 * KIB,
                16 * MIB + 12 * KIB + 4096 * (8 * KIB) + fixed(4096),
            ),
        ];
        for (cpus, shared, per_cpu, total) in expected {
            let p = plan(cpus);
            assert_eq!((p.shared, p.per_cpu, p.per_cpu_major), (shared, per_cpu, 0));
            assert_eq!(p.fixed, fixed(cpus), "{cpus} CPUs");
            assert_eq!(p.total(), total, "{cpus} CPUs");
            assert!(p.total() <= 64 * MIB, "{cpus} CPUs: {}", p.total());
        }
        // 8,192 CPUs: their smallest rings take 64 MiB, which the budget cannot hold; the
        // least budget that can is what the error says.
        let error = plan_rings(DEFAULT_BUDGET_MB, 8192, 4096, Carrier::SharedRing).unwrap_err();
        assert_eq!(error.needed_mb, 77);
        let p = plan_rings(77, 8192, 4096, Carrier::SharedRing).unwrap();
        assert!(p.total() <= 77 * MIB, "{p:?}");
        let p = plan_rings(DEFAULT_BUDGET_MB, 6000, 4096, Carrier::SharedRing).unwrap();
        assert_eq!((p.shared, p.per_cpu), (4 * MIB, 4 * KIB));
        assert!(p.total() <= 64 * MIB);
    }

    /// A larger budget, asked for, grows every ring; a tiny one still makes rings.
    #[test]
    fn the_budget_asked_for_is_what_the_rings_take() {
        for budget in [1, 3, 16, 64, 100, 512, 4096] {
            for cpus in [1, 2, 3, 64, 256] {
                for carrier in [Carrier::SharedRing, Carrier::PerCpuRings] {
                    let p = match plan_rings(budget, cpus, 4096, carrier) {
                        Ok(p) => p,
                        Err(e) => {
                            assert!(e.needed_mb > budget, "{budget} MiB, {cpus} CPUs: {e}");
                            let p = plan_rings(e.needed_mb, cpus, 4096, carrier);
                            assert!(p.is_ok(), "{budget} MiB, {cpus} CPUs: {e}");
                            continue;
                        }
                    };
                    assert!(
                        p.total() <= budget * MIB,
                        "{budget} {cpus} {carrier:?} {p:?}"
                    );
                    assert!(p.per_cpu.is_power_of_two() && p.per_cpu >= 4096, "{p:?}");
                    assert!(p.shared == 0 || p.shared.is_power_of_two(), "{p:?}");
                }
            }
        }
        let p = plan_rings(512, 2, 4096, Carrier::SharedRing).unwrap();
        assert_eq!((p.shared, p.per_cpu), (256 * MIB, 64 * MIB));
        // The least budget for 2 CPUs: the maps' 4 MiB and the smallest rings.
        let error = plan_rings(1, 2, 4096, Carrier::SharedRing).unwrap_err();
        assert_eq!(error.needed_mb, 5);
        let p = plan_rings(5, 2, 4096, Carrier::SharedRing).unwrap();
        assert_eq!((p.shared, p.per_cpu), (512 * KIB, 128 * KIB));
    }

    /// Per-CPU rings (no BPF, or `--stack-size`) share the same budget: each CPU's fault ring
    /// and major-fault ring within its part.
    #[test]
    fn per_cpu_rings_share_the_budget() {
        let plan = |cpus| plan_rings(DEFAULT_BUDGET_MB, cpus, 4096, Carrier::PerCpuRings).unwrap();
        let p = plan(2);
        assert_eq!((p.per_cpu, p.per_cpu_major), (16 * MIB, 64 * KIB));
        let p = plan(256);
        assert_eq!((p.per_cpu, p.per_cpu_major), (128 * KIB, 4 * KIB));
        assert!(p.total() <= 64 * MIB);
    }
}
