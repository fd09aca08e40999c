//! What `fltrace runs` is asked to do: read a catalog (`--list`, `--stat`, `--run`) or run a
//! series, decided from its arguments as plain values.

use std::path::PathBuf;

/// `fltrace runs`' arguments.
#[derive(Debug, Clone, Default)]
pub struct RunsRequest {
    /// The catalog (a positional argument).
    pub catalog: Option<PathBuf>,
    /// `--list`.
    pub list: bool,
    /// `--stat`.
    pub stat: bool,
    /// `--run ID`.
    pub run: Option<i64>,
    /// `-o`: the series' directory, or the file of `--run`'s page.
    pub output: Option<PathBuf>,
    /// The workloads after `--`.
    pub commands: Vec<String>,
}

/// What to do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RunsAction {
    /// Write the page of run `id` of `catalog` to `output`, a new file.
    Page {
        /// The catalog.
        catalog: PathBuf,
        /// The run's catalog id.
        id: i64,
        /// The page's file: `-o`, else `run-ID.html`.
        output: PathBuf,
    },
    /// List the catalog's runs.
    List(PathBuf),
    /// The catalog's run time statistics.
    Stat(PathBuf),
    /// Run (or resume) the series in `dir`.
    Series {
        /// The series' directory.
        dir: PathBuf,
        /// The workloads, one command line each.
        commands: Vec<String>,
    },
}

/// Why the arguments say nothing to do.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum RunsRequestError {
    /// A catalog question without a catalog.
    #[error("--list, --stat and --run need a catalog: fltrace runs --stat runs.sqlite")]
    NoCatalog,
    /// A catalog without a question.
    #[error("a catalog was given without --list or --stat; workloads go after `--`")]
    CatalogUnasked,
    /// A series without its directory.
    #[error("give the series' directory: fltrace runs -o DIR [-n REPS] -- 'CMD 1' 'CMD 2' ...")]
    NoSeriesDir,
    /// A series without workloads.
    #[error("no workloads given: fltrace runs -o DIR -- 'CMD 1' 'CMD 2' ...")]
    NoWorkloads,
}

/// The file `--run ID` writes without `-o`.
pub fn default_page_path(id: i64) -> PathBuf {
    PathBuf::from(format!("run-{id}.html"))
}

impl RunsRequest {
    /// The action the arguments ask for: a catalog question if one is asked, else a series.
    pub fn action(&self) -> Result<RunsAction, RunsRequestError> {
        if self.list || self.stat || self.run.is_some() {
            let catalog = self.catalog.clone().ok_or(RunsRequestError::NoCatalog)?;
            return Ok(match self.run {
                Some(id) => RunsAction::Page {
                    catalog,
                    id,
                    output: self.output.clone().unwrap_or_else(|| default_page_path(id)),
                },
                None if self.list => RunsAction::List(catalog),
                None => RunsAction::Stat(catalog),
            });
        }
        if self.catalog.is_some() {
            return Err(RunsRequestError::CatalogUnasked);
        }
        let dir = self.output.clone().ok_or(RunsRequestError::NoSeriesDir)?;
        if self.commands.is_empty() {
            return Err(RunsRequestError::NoWorkloads);
        }
        Ok(RunsAction::Series {
            dir,
            commands: self.commands.clone(),
        })
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;

    fn catalog() -> Option<PathBuf> {
        Some(PathBuf::from("runs.sqlite"))
    }

    #[test]
    fn catalog_questions_need_a_catalog() {
        for request in [
            RunsRequest {
                list: true,
                ..RunsRequest::default()
            },
            RunsRequest {
                stat: true,
                ..RunsRequest::default()
            },
            RunsRequest {
                run: Some(1),
                ..RunsRequest::default()
            },
        ] {
            assert_eq!(
                request.action().unwrap_err().to_string(),
                "--list, --stat and --run need a catalog: fltrace runs --stat runs.sqlite"
            );
        }
    }

    #[test]
    fn a_catalog_answers_the_question_asked() {
        let list = RunsRequest {
            catalog: catalog(),
            list: true,
            ..RunsRequest::default()
        };
        assert_eq!(
            list.action(),
            Ok(RunsAction::List(PathBuf::from("runs.sqlite")))
        );
        let stat = RunsRequest {
            catalog: catalog(),
            stat: true,
            ..RunsRequest::default()
        };
        assert_eq!(
            stat.action(),
            Ok(RunsAction::Stat(PathBuf::from("runs.sqlite")))
        );
        let page = RunsRequest {
            catalog: catalog(),
            run: Some(7),
            ..RunsRequest::default()
        };
        assert_eq!(
            page.action(),
            Ok(RunsAction::Page {
                catalog: PathBuf::from("runs.sqlite"),
                id: 7,
                output: PathBuf::from("run-7.html"),
            })
        );
        let page_to = RunsRequest {
            output: Some(PathBuf::from("/tmp/p.html")),
            ..page
        };
        assert!(matches!(
            page_to.action(),
            Ok(RunsAction::Page { output, .. }) if output == Path::new("/tmp/p.html")
        ));
    }

    #[test]
    fn a_catalog_without_a_question_is_refused() {
        let request = RunsRequest {
            catalog: catalog(),
            output: Some(PathBuf::from("series")),
            commands: vec!["true".to_owned()],
            ..RunsRequest::default()
        };
        assert_eq!(
            request.action().unwrap_err().to_string(),
            "a catalog was given without --list or --stat; workloads go after `--`"
        );
    }

    #[test]
    fn a_series_needs_a_directory_and_workloads() {
        let mut request = RunsRequest {
            commands: vec!["true".to_owned()],
            ..RunsRequest::default()
        };
        assert_eq!(
            request.action().unwrap_err().to_string(),
            "give the series' directory: fltrace runs -o DIR [-n REPS] -- 'CMD 1' 'CMD 2' ..."
        );
        request.output = Some(PathBuf::from("series"));
        assert_eq!(
            request.action(),
            Ok(RunsAction::Series {
                dir: PathBuf::from("series"),
                commands: vec!["true".to_owned()],
            })
        );
        request.commands.clear();
        assert_eq!(
            request.action().unwrap_err().to_string(),
            "no workloads given: fltrace runs -o DIR -- 'CMD 1' 'CMD 2' ..."
        );
    }
}
