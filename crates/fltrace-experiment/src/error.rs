use std::path::PathBuf;

/// What can go wrong planning, running or cataloguing a series.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A file or directory could not be read, created or written.
    #[error("{path}")]
    Io {
        /// The file concerned.
        path: PathBuf,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },
    /// The configuration file is not valid TOML of the expected shape (the parser's words
    /// follow as the source, said once).
    #[error("{path}")]
    ConfigSyntax {
        /// The configuration file.
        path: PathBuf,
        /// What the parser said.
        source: Box<toml::de::Error>,
    },
    /// A configuration, workload or option is not usable as given.
    #[error("{0}")]
    Invalid(String),
    /// A run record or series file is malformed.
    #[error("{path}: {reason}")]
    Json {
        /// The file concerned.
        path: PathBuf,
        /// What the parser said, in the message (not a `source`, which would say it twice).
        reason: serde_json::Error,
    },
    /// The catalog could not be written or read.
    #[error("catalog: {0}")]
    Sqlite(rusqlite::Error),
    /// A trace file of a run could not be read.
    #[error(transparent)]
    Trace(#[from] fltrace_trace::Error),
    /// Recording a run in-process (a sweep's) failed.
    #[error(transparent)]
    Capture(#[from] fltrace_capture::Error),
    /// The page of a catalogued run could not be made.
    #[error("run {id} in {}", dir.display())]
    RunPage {
        /// The run's catalog id.
        id: i64,
        /// The run's directory.
        dir: PathBuf,
        /// Why.
        #[source]
        source: Box<Error>,
    },
    /// An output file could not be created.
    #[error("creating {}", path.display())]
    Create {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: fltrace_trace::Error,
    },
    /// An output file could not be written.
    #[error("writing {}", path.display())]
    Write {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// A run ended without a usable recording: what happened, and where.
    #[error("{0}")]
    RunFailed(String),
    /// A directory could not be made.
    #[error("creating {}", path.display())]
    CreateDir {
        /// The directory.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// A run's recording could not be loaded.
    #[error(transparent)]
    Load(#[from] fltrace_analyze::LoadError),
    /// The user's allocator list (its configuration file) is not usable.
    #[error(transparent)]
    Rules(#[from] fltrace_analyze::RulesError),
    /// Ctrl-C (or SIGTERM) between two runs of a sweep; the next run resumes it.
    #[error("interrupted; run the same command again to resume")]
    Interrupted,
}

impl Error {
    /// A closure wrapping an I/O error with its path, for `map_err`.
    pub(crate) fn io(path: impl Into<PathBuf>) -> impl FnOnce(std::io::Error) -> Error {
        let path = path.into();
        move |source| Error::Io { path, source }
    }
}

#[cfg(test)]
mod tests {
    /// A parser's reason is in the message once, not again as the error's source.
    #[test]
    fn json_reasons_are_said_once() {
        let reason = serde_json::from_str::<u32>("x").unwrap_err();
        let said = reason.to_string();
        let error = super::Error::Json {
            path: "run.json".into(),
            reason,
        };
        assert_eq!(
            fltrace_trace::error_chain(&error),
            format!("run.json: {said}")
        );
    }
}
