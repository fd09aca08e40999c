//! Binding a run to NUMA nodes: its memory with `set_mempolicy(MPOL_BIND)`, its CPUs with
//! `sched_setaffinity`, both set in the child between fork and exec and inherited by
//! everything it starts.

use std::path::Path;

use crate::Error;

const NODES: &str = "/sys/devices/system/node";
/// Nodes a binding can name: the mask passed to the kernel.
const MASK_WORDS: usize = 16;
const MPOL_BIND: libc::c_int = 2;

/// A binding prepared before fork, so that the child only makes system calls.
#[derive(Clone)]
pub struct Binding {
    mem_mask: Option<[libc::c_ulong; MASK_WORDS]>,
    cpus: Option<libc::cpu_set_t>,
}

impl std::fmt::Debug for Binding {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Binding")
            .field("mem", &self.mem_mask.is_some())
            .field("cpus", &self.cpus.is_some())
            .finish()
    }
}

/// The nodes this machine has, from sysfs.
pub fn online_nodes() -> Vec<u32> {
    std::fs::read_to_string(Path::new(NODES).join("online"))
        .ok()
        .and_then(|s| parse_list(&s))
        .unwrap_or_default()
}

/// Checks that `node` exists.
pub fn check_node(node: u32, what: &str) -> Result<(), Error> {
    if Path::new(NODES).join(format!("node{node}")).is_dir() {
        return Ok(());
    }
    let nodes = online_nodes();
    Err(Error::Invalid(format!(
        "{what} = {node}: this machine has no NUMA node {node} (nodes: {})",
        if nodes.is_empty() {
            "none found in /sys/devices/system/node".to_owned()
        } else {
            format_list(&nodes)
        }
    )))
}

impl Binding {
    /// The binding to `mem_node` for memory and to `cpu_node`'s CPUs; nodes are checked.
    pub fn new(mem_node: Option<u32>, cpu_node: Option<u32>) -> Result<Binding, Error> {
        let mem_mask = match mem_node {
            None => None,
            Some(node) => {
                check_node(node, "mem_node")?;
                if node as usize >= MASK_WORDS * 64 {
                    return Err(Error::Invalid(format!("mem_node {node} is out of range")));
                }
                let mut mask = [0; MASK_WORDS];
                mask[node as usize / 64] |= 1 << (node % 64);
                Some(mask)
            }
        };
        let cpus = match cpu_node {
            None => None,
            Some(node) => {
                check_node(node, "cpu_node")?;
                let path = Path::new(NODES).join(format!("node{node}/cpulist"));
                let text = std::fs::read_to_string(&path).map_err(Error::io(&path))?;
                let list = parse_list(&text).filter(|l| !l.is_empty()).ok_or_else(|| {
                    Error::Invalid(format!(
                        "cpu_node = {node}: the node has no CPUs ({text:?})"
                    ))
                })?;
                // SAFETY: cpu_set_t is a plain bit array; all zeroes is the empty set.
                let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
                for cpu in list {
                    if cpu as usize >= 8 * std::mem::size_of::<libc::cpu_set_t>() {
                        return Err(Error::Invalid(format!(
                            "cpu_node = {node}: CPU {cpu} is beyond what fltrace can bind"
                        )));
                    }
                    // SAFETY: the CPU is within the set, checked above.
                    unsafe { libc::CPU_SET(cpu as usize, &mut set) };
                }
                Some(set)
            }
        };
        Ok(Binding { mem_mask, cpus })
    }

    /// Whether anything is bound.
    pub fn is_empty(&self) -> bool {
        self.mem_mask.is_none() && self.cpus.is_none()
    }

    /// Applies the binding to the calling process. Async-signal-safe (system calls only), for
    /// a `pre_exec` hook.
    pub fn apply(&self) -> std::io::Result<()> {
        if let Some(mask) = &self.mem_mask {
            // SAFETY: the mask outlives the call; maxnode counts its bits plus the one the
            // kernel's historic off-by-one takes away.
            let rc = unsafe {
                libc::syscall(
                    libc::SYS_set_mempolicy,
                    MPOL_BIND,
                    mask.as_ptr(),
                    (MASK_WORDS * 64 + 1) as libc::c_ulong,
                )
            };
            if rc != 0 {
                return Err(std::io::Error::last_os_error());
            }
        }
        if let Some(set) = &self.cpus {
            // SAFETY: a valid cpu_set_t of the size given.
            let rc =
                unsafe { libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), set) };
            if rc != 0 {
                return Err(std::io::Error::last_os_error());
            }
        }
        Ok(())
    }
}

/// Parses a kernel list such as `0-3,8,10-11`.
pub fn parse_list(text: &str) -> Option<Vec<u32>> {
    let mut out = Vec::new();
    for part in text.trim().split(',').filter(|p| !p.is_empty()) {
        match part.split_once('-') {
            Some((a, b)) => {
                let (a, b): (u32, u32) = (a.parse().ok()?, b.parse().ok()?);
                if a > b || b - a > 1 << 16 {
                    return None;
                }
                out.extend(a..=b);
            }
            None => out.push(part.parse().ok()?),
        }
    }
    Some(out)
}

fn format_list(items: &[u32]) -> String {
    items
        .iter()
        .map(u32::to_string)
        .collect::<Vec<_>>()
        .join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kernel_lists_parse() {
        assert_eq!(
            parse_list("0-3,8,10-11\n"),
            Some(vec![0, 1, 2, 3, 8, 10, 11])
        );
        assert_eq!(parse_list("0"), Some(vec![0]));
        assert_eq!(parse_list("\n"), Some(vec![]));
        assert_eq!(parse_list("3-1"), None);
        assert_eq!(parse_list("x"), None);
    }

    #[test]
    fn a_missing_node_is_refused_by_name() {
        let err = Binding::new(Some(999), None).unwrap_err().to_string();
        assert!(
            err.contains("mem_node = 999: this machine has no NUMA node 999"),
            "{err}"
        );
    }
}
