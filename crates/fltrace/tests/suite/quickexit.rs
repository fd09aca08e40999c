//! A process that exits right after faulting keeps the outer frames of its stacks.

use std::process::Command;

use super::util::*;

/// 200 faults about 10 KiB below `main`, then an immediate exit: by default all 200 stacks
/// reach `main` and `_start` (the outer frames cannot be read from the process afterwards).
#[test]
fn quick_exit_keeps_every_stack_to_main() {
    let dir = Dir::new();
    let workload = dir.path().join("quickexit");
    let built = Command::new("gcc")
        .args(["-O2", "-g", "-fomit-frame-pointer", "-o"])
        .arg(&workload)
        .arg(workloads_dir().join("quickexit.c"))
        .output()
        .expect("gcc runs");
    assert!(
        built.status.success(),
        "{}",
        String::from_utf8_lossy(&built.stderr)
    );
    dir.record(&[&workload], &["200"]);
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
    assert_eq!(total, 200);
    // One stack for all of them: main -> descend x 101 -> touch, out to _start.
    assert_eq!(at_site.len(), 1);
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
