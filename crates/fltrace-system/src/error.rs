/// What stops a tool.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The kernel lacks a tracepoint or feature the tool needs.
    #[error("this kernel has no {what}{detail}")]
    Missing {
        /// The tracepoint (`group:name`) or feature.
        what: String,
        /// More, empty or starting with a separator.
        detail: String,
    },
    /// The kernel refused a tracing facility.
    #[error("{what}{hint}")]
    Kernel {
        /// The facility.
        what: String,
        /// The kernel's answer.
        #[source]
        source: std::io::Error,
        /// Advice, empty or starting with a separator.
        hint: &'static str,
    },
    /// The kernel refused a tracing facility for lack of privilege; `obstacle` names the
    /// setting in the way, its value, and how to change it.
    #[error("{what} ({obstacle})")]
    Permission {
        /// The facility.
        what: String,
        /// The kernel's answer.
        #[source]
        source: std::io::Error,
        /// The setting that refused it and what removes it.
        obstacle: String,
    },
    /// The command could not be started.
    #[error("cannot run `{program}`")]
    Spawn {
        /// The program as given.
        program: String,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// A process or cgroup named on the command line cannot be used.
    #[error("{what}")]
    Target {
        /// What was asked for and why it fails.
        what: String,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// Starting the command failed.
    #[error(transparent)]
    Capture(#[from] fltrace_capture::Error),
    /// Writing the output failed.
    #[error("writing the output")]
    Output(#[source] std::io::Error),
    /// The in-kernel counters failed.
    #[error(transparent)]
    Bpf(#[from] fltrace_bpf::Error),
    /// Processes and a command both given.
    #[error("give processes (-p, --cgroup) or a command, not both")]
    BothTargets,
    /// A `--by` key that is not one.
    #[error("--by {0}: expected comm, pid, tid, ustack, kstack, probe, field:NAME or none")]
    Grouping(String),
    /// `--sample` where every event is counted, or a period of 0.
    #[error(
        "--sample {0}: sampling applies to counts with the user stacks of named processes \
         (-p or a command, by ustack), with a period of 1 or more; the others count every \
         event in the kernel"
    )]
    Sampling(u64),
}

impl Error {
    /// An error of the kernel on `what`, with advice for the common answers.
    pub(crate) fn kernel(what: impl Into<String>) -> impl FnOnce(std::io::Error) -> Error {
        move |source| {
            let hint = match source.raw_os_error() {
                Some(libc::EACCES | libc::EPERM) => {
                    return Error::Permission {
                        what: what.into(),
                        source,
                        obstacle: fltrace_capture::sys::perf_permission_obstacle(),
                    };
                }
                Some(libc::ENOENT) => " (this kernel lacks the event)",
                _ => "",
            };
            Error::Kernel {
                what: what.into(),
                source,
                hint,
            }
        }
    }
}
