//! End-to-end tests: the fltrace binary records the project's workloads (built here from
//! `workloads/`) and its reports must name the exact lines and counts.
//!
//! They need root (perf events on tracepoints, reading other processes' stacks), as on the
//! development and CI machines; without it they fail with fltrace's own error message.

mod suite;
