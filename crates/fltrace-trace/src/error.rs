use std::path::PathBuf;

/// What can go wrong reading or writing trace files.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A file could not be opened, created, read or written.
    #[error("{path}")]
    Io {
        /// The file concerned.
        path: PathBuf,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },
    /// A Parquet file is malformed or not one of ours.
    #[error("{path}")]
    Parquet {
        /// The file concerned.
        path: PathBuf,
        /// The underlying error.
        #[source]
        source: parquet::errors::ParquetError,
    },
    /// A file has the right name but not the expected content.
    #[error("{path}: {message}")]
    Format {
        /// The file concerned.
        path: PathBuf,
        /// What is wrong with it.
        message: String,
    },
    /// A recording's faults file cannot be read, and it is the one that would be analysed.
    #[error(
        "{path} cannot be read ({reason}); older recordings beside it are not analysed in its place: remove it or move it away"
    )]
    Unreadable {
        /// The faults file.
        path: PathBuf,
        /// Why, with its causes.
        reason: String,
    },
    /// An output file was not created, to leave what is at its name untouched.
    #[error("refusing to write {path}: {reason}")]
    Refused {
        /// The output file.
        path: PathBuf,
        /// Why, and what to do.
        reason: String,
    },
    /// An output file was created but writing it failed ([`crate::files::write_with`]): the
    /// writer's error (a picture's, a table's) or the final flush's.
    #[error("writing {path}")]
    Write {
        /// The output file.
        path: PathBuf,
        /// What the writer or the flush said.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// A file of a finished recording is not as the recording left it.
    #[error("{path} is corrupt: {detail}")]
    Corrupt {
        /// The file.
        path: PathBuf,
        /// How it differs.
        detail: String,
    },
    /// No recording was found where one was expected.
    #[error("no fltrace recording in {0} (run `fltrace record -- <command>` first)")]
    NoRecording(PathBuf),
    /// A process id was asked for that the recording does not contain.
    #[error("the recording has no process {0}")]
    NoSuchProcess(u32),
}

impl Error {
    pub(crate) fn io(path: impl Into<PathBuf>) -> impl FnOnce(std::io::Error) -> Error {
        let path = path.into();
        move |source| Error::Io { path, source }
    }

    pub(crate) fn parquet(
        path: impl Into<PathBuf>,
    ) -> impl FnOnce(parquet::errors::ParquetError) -> Error {
        let path = path.into();
        move |source| Error::Parquet { path, source }
    }
}

/// `error` and its sources, `: `-separated, on one line.
pub fn error_chain(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}
