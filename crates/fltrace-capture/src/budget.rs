//! How much kernel memory a recording's rings take: one budget for all of them
//! (`--buffer-mb`, [`DEFAULT_BUDGET_MB`] by default), whatever the number of CPUs.
//!
//! The kernel allocates a ring whole when it is made, and the per-CPU perf rings of the
//! earlier design (256 MiB of each CPU's fault samples, sized for 16 KiB stack copies) took
//! 512 MiB of this 2-CPU machine and would take 32 GiB of a 128-CPU one. With the faults in
//! one BPF ring shared by all CPUs, the per-CPU rings carry only the side band (mappings,
//! names, forks, exits, `munmap` and `mremap`): half the budget goes to the shared ring, the
//! other half is split between the CPUs.

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
        shared + self.cpus * (self.per_cpu + self.page + major)
    }
}

/// The budget cannot hold the smallest rings for this many CPUs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error(
    "--buffer-mb {budget_mb} cannot hold a ring for each of the {cpus} CPUs: give at least {needed_mb}"
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
/// - Shared ring: half the budget, rounded down to a power of two (the kernel's rule for a
///   BPF ring); less where the CPUs' smallest rings need more than the other half.
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
            let mut shared = floor_pow2(budget / 2);
            if shared + 3 * page + smallest > budget {
                shared = floor_pow2(budget.saturating_sub(smallest + 3 * page));
            }
            if shared < MIN_SHARED {
                return Err(too_small(MIN_SHARED + 3 * page + smallest));
            }
            let share = (budget - shared - 3 * page) / cpus;
            let per_cpu = floor_pow2(share.saturating_sub(page)).max(page);
            Ok(RingPlan {
                shared,
                per_cpu,
                per_cpu_major: 0,
                cpus,
                page,
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

    /// The default budget on 2, 64, 256 and 4,096 CPUs: the shared ring keeps 32 MiB, each
    /// CPU's side band gets its share, and the total stays within 64 MiB.
    #[test]
    fn the_default_budget_holds_on_any_number_of_cpus() {
        let plan = |cpus| plan_rings(DEFAULT_BUDGET_MB, cpus, 4096, Carrier::SharedRing).unwrap();
        let expected = [
            (
                2,
                32 * MIB,
                8 * MIB,
                32 * MIB + 12 * KIB + 2 * (8 * MIB + 4 * KIB),
            ),
            (
                64,
                32 * MIB,
                256 * KIB,
                32 * MIB + 12 * KIB + 64 * (260 * KIB),
            ),
            (
                256,
                32 * MIB,
                64 * KIB,
                32 * MIB + 12 * KIB + 256 * (68 * KIB),
            ),
            // The CPUs' smallest rings take half the budget: the shared ring gives way.
            (
                4096,
                16 * MIB,
                4 * KIB,
                16 * MIB + 12 * KIB + 4096 * (8 * KIB),
            ),
        ];
        for (cpus, shared, per_cpu, total) in expected {
            let p = plan(cpus);
            assert_eq!((p.shared, p.per_cpu, p.per_cpu_major), (shared, per_cpu, 0));
            assert_eq!(p.total(), total, "{cpus} CPUs");
            assert!(p.total() <= 64 * MIB, "{cpus} CPUs: {}", p.total());
        }
        // 8,192 CPUs: their smallest rings take 64 MiB, which the budget cannot hold.
        let error = plan_rings(DEFAULT_BUDGET_MB, 8192, 4096, Carrier::SharedRing).unwrap_err();
        assert_eq!(error.needed_mb, 65);
        let p = plan_rings(DEFAULT_BUDGET_MB, 6000, 4096, Carrier::SharedRing).unwrap();
        assert_eq!((p.shared, p.per_cpu), (16 * MIB, 4 * KIB));
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
        let p = plan_rings(1, 2, 4096, Carrier::SharedRing).unwrap();
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
