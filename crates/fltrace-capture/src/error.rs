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
    /// The process to attach to has no user program to trace.
    #[error("cannot attach to process {pid}: {why}")]
    NotTraceable {
        /// The pid asked for.
        pid: i32,
        /// What it is instead.
        why: &'static str,
    },
    /// Writing the trace failed.
    #[error(transparent)]
    Trace(#[from] fltrace_trace::Error),
    /// The user to run the command as is not in the user database.
    #[error("no such user: {0}")]
    NoSuchUser(String),
    /// The user database could not be read.
    #[error("looking up user {user}")]
    UserDatabase {
        /// The user asked for.
        user: String,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// `--drop-privileges` without the variables sudo sets.
    #[error("--drop-privileges needs {variable} {problem}")]
    NoSudoUser {
        /// `SUDO_UID` or `SUDO_GID`.
        variable: &'static str,
        /// What is wrong with it.
        problem: &'static str,
    },
    /// Waiting for a command fltrace started failed.
    #[error("waiting for the command")]
    Wait(#[source] std::io::Error),
    /// The running executable could not be found, to find the preloaded library beside it.
    #[error("locating the fltrace binary")]
    CurrentExe(#[source] std::io::Error),
    /// The preloaded library is neither beside the binary nor where an installation puts it.
    #[error(
        "the preloaded library libfltrace_preload.so is not beside {} (build it with `cargo build --release`, or set FLTRACE_RUNTIME)",
        exe.display()
    )]
    PreloadMissing {
        /// The fltrace binary.
        exe: std::path::PathBuf,
    },
    /// The ring budget cannot hold the rings of this machine's CPUs.
    #[error(transparent)]
    Budget(#[from] crate::budget::BudgetTooSmall),
    /// More far memory asked for than the machine has available.
    #[error(
        "-M {max_mb} MiB is more than the {available_mb} MiB of memory available: the program's far memory must fit in this machine's"
    )]
    FarMemoryTooLarge {
        /// The far memory asked for, MiB.
        max_mb: u64,
        /// `MemAvailable`, MiB.
        available_mb: u64,
    },
}

impl Error {
    pub(crate) fn kernel(what: &'static str) -> impl FnOnce(std::io::Error) -> Error {
        move |source| {
            let hint = match source.raw_os_error() {
                Some(libc::EACCES | libc::EPERM) => {
                    return Error::Permission {
                        what,
                        source,
                        obstacle: crate::perf_abi::perf_permission_obstacle(),
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
