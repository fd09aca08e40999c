//! What `fltrace heatmap` draws over a process's faults besides the faults: the largest
//! allocation blocks over their lifetimes, labelled with their allocation sites (Heimdallr
//! draws allocations over its access map the same way).

use fltrace_trace::ProcessTrace;

use crate::{Lifetimes, Location, ResolvedStacks, call_site, largest_blocks};

/// An allocation block over its lifetime, labelled with its allocation site.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LabelledBlock {
    /// When it came to life.
    pub start_ns: u64,
    /// When it ended (the end of the trace for a block still alive then).
    pub end_ns: u64,
    /// First address.
    pub addr: u64,
    /// Bytes.
    pub size: u64,
    /// `function file:line` of its allocation site, else the function, else `?`.
    pub label: String,
}

/// The label of an allocation site: `function file:line`, the function without a line, `?`
/// without a site.
pub fn site_label(site: Option<&Location>) -> String {
    match site {
        Some(l) if l.has_line() => format!("{} {}:{}", l.function, l.short_file(), l.line),
        Some(l) => l.function.to_string(),
        None => "?".into(),
    }
}

/// The `count` largest blocks of `trace`, largest first, labelled with their allocation site
/// among `stacks` (the trace's allocation stacks, resolved).
pub fn largest_labelled_blocks(
    trace: &ProcessTrace,
    stacks: &ResolvedStacks,
    count: usize,
) -> Vec<LabelledBlock> {
    let lifetimes = Lifetimes::of_trace(trace);
    let end = trace.end_ns();
    largest_blocks(&lifetimes, count)
        .into_iter()
        .map(|b| LabelledBlock {
            start_ns: b.start_ns,
            end_ns: b.end_ns.unwrap_or(end),
            addr: b.addr,
            size: b.size,
            label: site_label(call_site(stacks.get(b.stack_id))),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn location(function: &str, file: &str, line: u32) -> Location {
        Location {
            function: function.into(),
            file: file.into(),
            line,
            lib: "prog".into(),
            system: false,
        }
    }

    #[test]
    fn site_labels_say_as_much_as_is_known() {
        assert_eq!(
            site_label(Some(&location("make_table", "/src/tables.c", 42))),
            "make_table tables.c:42"
        );
        assert_eq!(
            site_label(Some(&location("make_table", "", 0))),
            "make_table"
        );
        assert_eq!(site_label(None), "?");
    }
}
