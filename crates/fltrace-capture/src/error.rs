/// What can stop a recording.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The command could not be started.
    #[error("cannot run `{program}`")]
    Spawn {
        /// The program name as given.
        program: String,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The kernel refused a tracing facility.
    #[error("{what}{hint}")]
    Kernel {
        /// The facility.
        what: &'static str,
        /// The kernel's answer.
        #[source]
        source: std::io::Error,
        /// Advice for the user, empty or starting with a separator.
        hint: &'static str,
    },
    /// The kernel refused a tracing facility for lack of privilege; `obstacle` names the
    /// setting in the way, its value, and how to change it.
    #[error("{what} ({obstacle})")]
    Permission {
        /// The facility.
        what: &'static str,
        /// The kernel's answer.
        #[source]
        source: std::io::Error,
        /// The setting that refused it and what removes it.
        obstacle: String,
    },
    /// The process to attach to does not exist or cannot be read.
    #[error("cannot attach to process {pid}")]
    Attach {
        /// The pid asked for.
        pid: i32,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// Writing the trace failed.
    #[error(transparent)]
    Trace(#[from] fltrace_trace::Error),
}

impl Error {
    pub(crate) fn kernel(what: &'static str) -> impl FnOnce(std::io::Error) -> Error {
        move |source| {
            let hint = match source.raw_os_error() {
                Some(libc::EACCES | libc::EPERM) => {
                    return Error::Permission {
                        what,
                        source,
                        obstacle: crate::sys::perf_permission_obstacle(),
                    };
                }
                Some(libc::ENOENT) => " (this kernel lacks the event)",
                Some(libc::ENOMEM) => " (try a smaller --buffer-mb)",
                _ => "",
            };
            Error::Kernel { what, source, hint }
        }
    }
}
