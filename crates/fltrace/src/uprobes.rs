//! What `record --allocs -p PID` can do on this kernel.

use std::path::Path;

/// One line on allocation tracing of a running process.
pub fn attach_allocs_status() -> String {
    if Path::new("/sys/bus/event_source/devices/uprobe").is_dir() {
        "--allocs with -p is not supported yet: tracing a running process's allocations needs uprobes on its allocator (as bcc memleak does); start the program under `fltrace record --allocs -- <command>` instead".into()
    } else {
        "--allocs with -p needs uprobes on the running process's allocator, and this kernel has none (CONFIG_UPROBE_EVENTS); start the program under `fltrace record --allocs -- <command>` instead".into()
    }
}
