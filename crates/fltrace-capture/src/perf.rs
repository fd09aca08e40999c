//! The perf mechanism the recorder shares with the system tools (fltrace-system): events
//! opened per CPU and their rings, uprobes, tracefs, and what stands in the way when perf is
//! refused. One reader for both, so that a fix to the rings, the loss counting or the
//! permissions reaches every tool; the system crate takes it from here only.

pub use crate::perf_abi::{
    PerfEvent, REG_BP, REG_IP, REG_SP, online_cpus, parse_info, perf_permission_obstacle, tracefs,
};
pub use crate::ring::RingBuffer;
pub use crate::uprobes::TracefsUprobes;
