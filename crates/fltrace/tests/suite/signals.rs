//! Stacks that pass through a signal handler's frame.

use super::util::*;

/// Faults inside a signal handler, in code without frame pointers: the stack goes through the
/// handler, the kernel's signal frame (libc's `__restore_rt`, named `[signal]`) and the
/// interrupted code, out to `main` and `_start`.
#[test]
fn handler_stacks_go_through_the_signal_frame_to_main() {
    let built = Dir::new();
    let workload = build_c_workload(built.path(), "signal.c");
    // The kernel's signal frame holds the FPU state (about 3 KiB with AVX-512): past a 2 KiB
    // copy its registers and the frames beyond are read from the live process, which exits
    // right after its faults (nothing holds it at exit yet), so the copy must hold them: the
    // live stack by default, or a fixed copy large enough.
    for flags in [&["-q"][..], &["-q", "--stack-size", "16384"][..]] {
        let dir = Dir::new();
        dir.record_with(flags, &[&workload], &["40"]);
        let line = site("signal.c", "touch_in_handler");
        let by_line = dir.report_json(&["--by", "line"]);
        assert_eq!(count_at(&by_line, "signal.c", line), 40);

        let by_stack = dir.report_json(&["--by", "stack"]);
        let stack = stack_at(&by_stack, "signal.c", line);
        let names: Vec<&str> = stack.iter().map(|(f, _, _)| f.as_str()).collect();
        let ours: Vec<&str> = stack
            .iter()
            .filter(|(_, file, _)| file == "signal.c")
            .map(|(f, _, _)| f.as_str())
            .collect();
        assert_eq!(
            ours,
            ["touch_pages", "on_signal", "send_signal", "main"],
            "{names:?}"
        );
        // Between the handler and the code it interrupted: the signal frame, named so.
        let handler = names.iter().position(|&f| f == "on_signal");
        let sender = names.iter().position(|&f| f == "send_signal");
        let signal = names.iter().position(|&f| f == "[signal]");
        assert!(
            matches!((handler, signal, sender), (Some(h), Some(s), Some(r)) if s == h + 1 && r > s),
            "{names:?}"
        );
        assert_eq!(names.last(), Some(&"_start"), "{names:?}");
    }
}
