//! `fltrace report -g`: faults on a tree of calls, as `perf report -g` prints samples. From the
//! callers (the process, then `main`, down to the function that faulted) by default, or from
//! the callees (the function that faulted, up to its callers).

use rustc_hash::FxHashMap;

use crate::export::{CountedSource, process_name_in, without_parameters};
use crate::{Location, TRUNCATED_FRAME};

/// Which end of the stacks the tree starts from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
pub enum CallOrder {
    /// The process's name at the root, then the outermost frame, down to the faulting one
    /// (perf's default, `caller`).
    #[default]
    #[cfg_attr(
        feature = "clap",
        value(help = "The process, then `main`, down to the faulting function")
    )]
    Caller,
    /// The faulting function at the root, then its callers, up to the process's name.
    #[cfg_attr(
        feature = "clap",
        value(help = "The faulting function, up to its callers")
    )]
    Callee,
}

/// One function on the tree: its faults (those of every stack through it at this place) and
/// its callees (or callers, in [`CallOrder::Callee`]), most faults first.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CallNode {
    /// The function, without its parameter list; `lib+0xADDR` where no symbol covers it.
    pub name: String,
    /// The faults of the stacks through this node.
    pub count: u64,
    /// The next frames, most faults first, then by name.
    pub children: Vec<CallNode>,
}

/// Faults on a tree of calls.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CallTree {
    /// Which end the tree starts from.
    pub order: CallOrder,
    /// Every fault counted.
    pub total: u64,
    /// The roots, most faults first.
    pub roots: Vec<CallNode>,
}

/// A node being built: children by name.
#[derive(Default)]
struct Building {
    count: u64,
    children: FxHashMap<String, Building>,
}

impl Building {
    fn add(&mut self, path: impl Iterator<Item = String>, count: u64) {
        let mut node = self;
        node.count += count;
        for name in path {
            node = node.children.entry(name).or_default();
            node.count += count;
        }
    }

    fn finish(self) -> Vec<CallNode> {
        let mut nodes: Vec<CallNode> = self
            .children
            .into_iter()
            .map(|(name, node)| CallNode {
                name,
                count: node.count,
                children: node.finish(),
            })
            .collect();
        nodes.sort_by(|a, b| b.count.cmp(&a.count).then_with(|| a.name.cmp(&b.name)));
        nodes
    }
}

/// A frame's name on the tree: the function without its parameter list.
fn node_name(location: &Location) -> String {
    without_parameters(&location.function)
}

/// The faults of `sources` on a tree of calls in `order`; each process's stacks start (or, by
/// callee, end) at its name in the exec they ran in, and a truncated stack at
/// [`TRUNCATED_FRAME`] below it.
pub fn call_tree<'a>(
    sources: impl IntoIterator<Item = CountedSource<'a>>,
    order: CallOrder,
) -> CallTree {
    let mut root = Building::default();
    for (trace, stacks, counts) in sources {
        for (stack_id, count) in counts.per_stack() {
            let generation = trace.stack(stack_id).map_or(0, |s| s.generation);
            // Outermost first.
            let mut path = vec![process_name_in(trace, generation)];
            if stacks.truncated(stack_id) {
                path.push(TRUNCATED_FRAME.to_owned());
            }
            path.extend(stacks.get(stack_id).iter().rev().map(node_name));
            match order {
                CallOrder::Caller => root.add(path.into_iter(), count),
                CallOrder::Callee => root.add(path.into_iter().rev(), count),
            }
        }
    }
    CallTree {
        order,
        total: root.count,
        roots: root.finish(),
    }
}

#[cfg(test)]
mod tests {
    use fltrace_trace::{CodeAddr, Fault, FaultFlags, ProcessTrace, VirtAddr};

    use super::*;
    use crate::test_support::loc;
    use crate::{FaultCounts, ResolvedStacks};

    fn faults(stack_id: u32, n: usize) -> Vec<Fault> {
        let fault = Fault {
            time_ns: 1,
            pid: 7,
            tid: 7,
            ip: CodeAddr::new(0),
            addr: VirtAddr::new(0x1000),
            flags: FaultFlags(FaultFlags::WRITE),
            stack_id,
        };
        vec![fault; n]
    }

    fn names(nodes: &[CallNode]) -> Vec<(&str, u64)> {
        nodes.iter().map(|n| (n.name.as_str(), n.count)).collect()
    }

    /// `main` calls `fill` (60 faults) and `scan` (30), and `scan` calls `fill` (10): by caller
    /// the process, `main`, then its two callees; by callee `fill` with its two callers.
    #[test]
    fn callers_and_callees() {
        let mut stacks = ResolvedStacks::default();
        stacks.insert(
            0,
            vec![loc("fill(int)", 10), loc("main", 3)],
            [0x10, 0x30].map(CodeAddr::new).to_vec(),
        );
        stacks.insert(
            1,
            vec![loc("scan", 20), loc("main", 4)],
            [0x20, 0x40].map(CodeAddr::new).to_vec(),
        );
        stacks.insert(
            2,
            vec![loc("fill(int)", 11), loc("scan", 21), loc("main", 4)],
            [0x11, 0x21, 0x40].map(CodeAddr::new).to_vec(),
        );
        stacks.mark_truncated(2);
        let all: Vec<Fault> = [(0, 60), (1, 30), (2, 10)]
            .into_iter()
            .flat_map(|(id, n)| faults(id, n))
            .collect();
        let trace = ProcessTrace {
            pid: 7,
            faults: Vec::new(),
            stacks: Vec::new(),
            mappings: Vec::new(),
            metadata: Vec::new(),
            allocs: Vec::new(),
            alloc_stacks: Vec::new(),
        };
        let counts = FaultCounts::of(&all);

        let tree = call_tree([(&trace, &stacks, &counts)], CallOrder::Caller);
        assert_eq!(tree.total, 100);
        assert_eq!(names(&tree.roots), [("[7]", 100)]);
        let process = &tree.roots[0];
        assert_eq!(
            names(&process.children),
            [("main", 90), ("[truncated]", 10)]
        );
        let main = &process.children[0];
        assert_eq!(names(&main.children), [("fill", 60), ("scan", 30)]);
        assert!(main.children[1].children.is_empty());

        let tree = call_tree([(&trace, &stacks, &counts)], CallOrder::Callee);
        assert_eq!(names(&tree.roots), [("fill", 70), ("scan", 30)]);
        assert_eq!(names(&tree.roots[0].children), [("main", 60), ("scan", 10)]);
        assert_eq!(names(&tree.roots[0].children[1].children), [("main", 10)]);
        assert_eq!(
            names(&tree.roots[0].children[1].children[0].children),
            [("[truncated]", 10)]
        );
    }
}
