//! The names of a process's threads by generation: as the kernel names them, else as /proc
//! says, kept in the faults file's footer.

use fltrace_trace::keys;

use super::Process;
use crate::live::LiveEvent;

impl Process {
    /// The kernel named thread `tid` `name` (at exec, by `prctl`, or as the thread that
    /// made it).
    pub fn set_thread_name(&mut self, tid: u32, name: &str) {
        let key = (self.generation, tid);
        if self.out.thread_names.get(&key).map(String::as_str) != Some(name) {
            self.out.thread_names.insert(key, name.to_owned());
            self.out.thread_names_changed = true;
            let (pid, os_pid) = (self.pid, self.os_pid);
            self.tell(|| LiveEvent::ThreadNamed {
                pid,
                os_pid,
                tid,
                name: name.to_owned(),
            });
        }
    }

    /// The name of thread `tid` in the current generation, if known.
    pub fn thread_name(&self, tid: u32) -> Option<&str> {
        self.out
            .thread_names
            .get(&(self.generation, tid))
            .map(String::as_str)
    }

    /// Names a thread seen without a name record (a process attached to, a thread the
    /// recording missed being made): as /proc says while it lives, else as the main thread.
    pub(super) fn name_unnamed_thread(&mut self, tid: u32) {
        // Once per thread and generation: a thread /proc no longer has stays unnamed.
        if self.thread_name(tid).is_some() || !self.name_lookups.insert((self.generation, tid)) {
            return;
        }
        let proc_name = crate::procfs::task_comm(self.os_pid, tid);
        if let Some(name) = proc_name.or_else(|| self.thread_name(self.os_pid).map(str::to_owned)) {
            self.set_thread_name(tid, &name);
        }
    }

    /// Gives the faults file's footer the threads' names, if they changed.
    pub(super) fn store_thread_names(&mut self) {
        if std::mem::take(&mut self.out.thread_names_changed) {
            let text = fltrace_trace::format_thread_names(
                self.out
                    .thread_names
                    .iter()
                    .map(|(&(generation, tid), name)| (generation, tid, name.as_str())),
            );
            self.out.faults.set_metadata(keys::THREADS, text);
        }
    }
}
