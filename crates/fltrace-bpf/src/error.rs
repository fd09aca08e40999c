use std::io;
use std::path::PathBuf;

/// What can go wrong setting up or reading the in-kernel counters.
#[derive(Debug, thiserror::Error)]
pub enum Error {
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
    #[error("reading {path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// Why.
        source: io::Error,
    },
    /// The kernel refused the BPF object for lack of privilege: what is missing.
    #[error("{0}")]
    NotPermitted(String),
    /// The kernel refused the BPF object.
    #[error("loading the BPF object: {0}")]
    Load(#[from] Box<aya::EbpfError>),
    /// A program could not be loaded or attached.
    #[error("BPF program {name}: {source}")]
    Program {
        /// The program.
        name: &'static str,
        /// Why.
        source: Box<aya::programs::ProgramError>,
    },
    /// A map could not be read or written.
    #[error("BPF map {name}: {source}")]
    Map {
        /// The map.
        name: &'static str,
        /// Why.
        source: Box<aya::maps::MapError>,
    },
    /// The uprobes with DWARF-unwound stacks (`memleak -p`) could not be placed or read.
    #[error(transparent)]
    Capture(#[from] fltrace_capture::Error),
}

impl Error {
    pub(crate) fn io(path: impl Into<PathBuf>) -> impl FnOnce(io::Error) -> Error {
        let path = path.into();
        move |source| Error::Io { path, source }
    }

    pub(crate) fn map(name: &'static str) -> impl FnOnce(aya::maps::MapError) -> Error {
        move |source| Error::Map {
            name,
            source: Box::new(source),
        }
    }

    pub(crate) fn program(name: &'static str) -> impl FnOnce(aya::programs::ProgramError) -> Error {
        move |source| Error::Program {
            name,
            source: Box::new(source),
        }
    }
}
