//! Memory-access samples from the PMU (`record --access-samples`: Intel PEBS, AMD IBS).

/// One sampled load or store.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AccessRecord {
    /// When, nanoseconds since the Unix epoch (the faults' clock).
    pub time_ns: u64,
    /// Thread id.
    pub tid: u32,
    /// The instruction.
    pub ip: crate::CodeAddr,
    /// The data address.
    pub addr: crate::VirtAddr,
    /// Latency in cycles, 0 where the PMU does not give it.
    pub latency: u64,
    /// `PERF_SAMPLE_DATA_SRC` as the kernel gave it (operation, cache level, hit or miss, TLB).
    pub data_src: u64,
    /// The sample's stack in the access stack table.
    pub stack_id: u32,
}

impl AccessRecord {
    /// Whether the access was a store (`PERF_MEM_OP_STORE` in `data_src`).
    pub fn is_store(&self) -> bool {
        self.data_src & 4 != 0
    }
}
