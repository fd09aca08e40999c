//! A process that exits right after faulting keeps the outer frames of its stacks.

use super::util::*;

/// 200 faults about 10 KiB below `main`, then an immediate exit, so the outer frames cannot be
/// read from the process afterwards. By default (the live stack copied whole) and with a fixed
/// copy that holds the stack (`--stack-size 16384`), all 200 share one stack out to `_start`,
/// with the preloaded library as without; the summary's truncated figure equals the data's.
#[test]
fn quick_exit_keeps_every_stack_to_main() {
    let dir = Dir::new();
    let workload = build_c_workload(dir.path(), "quickexit.c");
    let out = dir.record_with(&[], &[&workload], &["200"]);
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    let summary = summary_truncated(&stderr);
    let report = dir.report_json(&[]);
    assert_eq!(report["truncated_stack_faults"], summary, "{stderr}");

    // With the preloaded library (`--allocs`) as without: its exit hooks change nothing.
    for flags in [
        &["-q"][..],
        &["-q", "--allocs"][..],
        &["-q", "--stack-size", "16384"][..],
        &["-q", "--stack-size", "16384", "--allocs"][..],
    ] {
        let dir = Dir::new();
        dir.record_with(flags, &[&workload], &["200"]);
        let line = site("quickexit.c", "quick_touch");
        let by_stack = dir.report_json(&["--by", "stack"]);
        let at_site: Vec<&serde_json::Value> = groups(&by_stack)
            .filter(|g| {
                g["file"]
                    .as_str()
                    .is_some_and(|f| f.ends_with("quickexit.c"))
                    && g["line"] == line
            })
            .collect();
        let total: u64 = at_site
            .iter()
            .map(|g| g["count"].as_u64().unwrap_or(0))
            .sum();
        assert_eq!(total, 200, "{flags:?}");
        // One stack for all of them: main -> descend x 101 -> touch, out to _start.
        assert_eq!(at_site.len(), 1, "{flags:?}");
        let stack = stack_at(&by_stack, "quickexit.c", line);
        let names: Vec<&str> = stack.iter().map(|(f, _, _)| f.as_str()).collect();
        assert_eq!(
            names.iter().filter(|&&f| f == "descend").count(),
            101,
            "{names:?}"
        );
        assert!(names.contains(&"main"), "{names:?}");
        assert_eq!(names.last(), Some(&"_start"), "{names:?}");
    }
}
