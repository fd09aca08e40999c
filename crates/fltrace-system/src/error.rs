use std::io;
use std::path::PathBuf;

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
    /// Options that contradict each other, or one missing.
    #[error("{0}")]
    Usage(String),
    /// A tool could not be opened: which one.
    #[error("{name}")]
    Tool {
        /// The tool's command name.
        name: &'static str,
        /// Why.
        #[source]
        source: Box<Error>,
    },
    /// Writing the output failed.
    #[error("writing the output")]
    Output(#[source] std::io::Error),
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
    // What setting up or reading the in-kernel counters can meet.
    /// The event name is not a tracepoint, software event or uprobe this machine has.
    #[error("unknown event {0:?} (see `fltrace count --list`)")]
    UnknownEvent(String),
    /// A field named in `--by field:NAME` or `--filter` is not in the event's format.
    #[error("{event} has no field {field:?} (it has: {known})")]
    NoField {
        /// The event.
        event: String,
        /// The field asked for.
        field: String,
        /// The fields it has.
        known: String,
    },
    /// A `--filter` expression that does not parse.
    #[error("bad filter {0:?}: expected FIELD OP VALUE with OP one of == != < <= > >= &")]
    BadFilter(String),
    /// The event does not support what was asked (fields of a software event...).
    #[error("{0}")]
    Unsupported(String),
    /// A file of /proc or tracefs could not be read.
    #[error("reading {path}: {reason}")]
    Io {
        /// The file.
        path: PathBuf,
        /// Why, said in the message (not a `source`, which would say it twice).
        reason: io::Error,
    },
    /// The kernel refused the BPF object for lack of privilege: what is missing.
    #[error("{0}")]
    NotPermitted(String),
    /// The kernel refused the BPF object (its reason in the message, not a `source`, which
    /// would say it twice).
    #[error("loading the BPF object: {0}")]
    Load(Box<aya::EbpfError>),
    /// A program could not be loaded or attached.
    #[error("BPF program {name}: {reason}")]
    Program {
        /// The program.
        name: &'static str,
        /// Why, said in the message (not a `source`, which would say it twice).
        reason: Box<aya::programs::ProgramError>,
    },
    /// A map could not be read or written.
    #[error("BPF map {name}: {reason}")]
    Map {
        /// The map.
        name: &'static str,
        /// Why, said in the message (not a `source`, which would say it twice).
        reason: Box<aya::maps::MapError>,
    },
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
                        obstacle: fltrace_capture::perf::perf_permission_obstacle(),
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

    pub(crate) fn io(path: impl Into<PathBuf>) -> impl FnOnce(io::Error) -> Error {
        let path = path.into();
        move |reason| Error::Io { path, reason }
    }

    pub(crate) fn map(name: &'static str) -> impl FnOnce(aya::maps::MapError) -> Error {
        move |reason| Error::Map {
            name,
            reason: Box::new(reason),
        }
    }

    pub(crate) fn program(name: &'static str) -> impl FnOnce(aya::programs::ProgramError) -> Error {
        move |reason| Error::Program {
            name,
            reason: Box::new(reason),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The binary prints an error and then its chain of sources: a reason the message already
    /// says must not come again as a source ("reading /proc/vmstat: No such file or directory
    /// (os error 2): No such file or directory (os error 2)").
    #[test]
    fn reasons_are_said_once() {
        let missing = || io::Error::from(io::ErrorKind::NotFound);
        let errors = [
            Error::io("/proc/vmstat")(missing()),
            crate::procfs::ProcError::Read {
                path: "/proc/1/maps".into(),
                reason: missing(),
            }
            .into(),
        ];
        for error in errors {
            assert_eq!(
                fltrace_trace::error_chain(&error)
                    .matches("entity not found")
                    .count(),
                1,
                "{error}"
            );
        }
    }
}
