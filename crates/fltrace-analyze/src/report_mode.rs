//! What `fltrace report` is about, from its flags: those that do not go together refused as
//! typed errors, and how much of the recording each kind of report holds.

use crate::{AllocStacks, CallOrder, FaultsHeld, GroupBy, LoadOptions, ThreadBy};

/// `report --by`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReportBy {
    /// Faults (or with `--allocs`, allocations) by a place of their own stacks.
    Group(GroupBy),
    /// Faults by where the memory they hit was allocated.
    AllocSite,
    /// Faults by process, thread or thread name.
    Thread(ThreadBy),
}

impl ReportBy {
    /// How faults are grouped by a place of their own stacks; `alloc-site` and the threads'
    /// group by no such place.
    pub fn group_by(self) -> Option<GroupBy> {
        match self {
            ReportBy::Group(by) => Some(by),
            _ => None,
        }
    }
}

/// `--by`: one flat list of values over the three kinds of grouping.
#[cfg(feature = "clap")]
impl clap::ValueEnum for ReportBy {
    fn value_variants<'a>() -> &'a [ReportBy] {
        &[
            ReportBy::Group(GroupBy::Stack),
            ReportBy::Group(GroupBy::Function),
            ReportBy::Group(GroupBy::Line),
            ReportBy::Group(GroupBy::Dso),
            ReportBy::AllocSite,
            ReportBy::Thread(ThreadBy::Comm),
            ReportBy::Thread(ThreadBy::Pid),
            ReportBy::Thread(ThreadBy::Tid),
        ]
    }

    fn to_possible_value(&self) -> Option<clap::builder::PossibleValue> {
        let (name, help) = match self {
            ReportBy::Group(GroupBy::Stack) => {
                ("stack", "The whole stack (and, for faults, their kind)")
            }
            ReportBy::Group(GroupBy::Function) => ("function", "The function of the call site"),
            ReportBy::Group(GroupBy::Line) => (
                "line",
                "The file:line of the call site: the innermost line of the program's own code",
            ),
            ReportBy::Group(GroupBy::Dso) => ("dso", "The library or executable"),
            ReportBy::AllocSite => (
                "alloc-site",
                "Faults by where the memory they hit was allocated (needs record --allocs)",
            ),
            ReportBy::Thread(ThreadBy::Comm) => {
                ("comm", "Faults by thread name (`comm`), over every process")
            }
            ReportBy::Thread(ThreadBy::Pid) => ("pid", "Faults by process"),
            ReportBy::Thread(ThreadBy::Tid) => ("tid", "Faults by thread"),
        };
        Some(clap::builder::PossibleValue::new(name).help(help))
    }
}

/// The flags that choose a report.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ReportFlags {
    /// `--by`.
    pub by: Option<ReportBy>,
    /// `-g`.
    pub call_graph: Option<CallOrder>,
    /// `--allocs`.
    pub allocs: bool,
    /// `--leaks`.
    pub leaks: bool,
    /// `--format csv`.
    pub csv: bool,
    /// `--time` given.
    pub time: bool,
    /// `--older-ms` given.
    pub older_ms: bool,
}

/// What a report is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReportMode {
    /// Faults by their own stacks.
    Faults(GroupBy),
    /// Allocations (`--allocs`).
    Allocs(GroupBy),
    /// Memory still allocated at the end (`--leaks`).
    Leaks,
    /// Faults by the allocation site of the memory they hit (`--by alloc-site`).
    AllocSite,
    /// Faults by process, thread or thread name (`--by pid|tid|comm`).
    Threads(ThreadBy),
    /// Faults on a call tree (`-g`).
    CallTree(CallOrder),
}

/// Flags of `fltrace report` that do not go together.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum ReportFlagsError {
    /// `-g` with `--by`, `--allocs` or `--leaks`.
    #[error("-g draws the faults' call tree: not with --by, --allocs or --leaks")]
    TreeWithOthers,
    /// `-g --format csv`.
    #[error("-g draws a tree: --format table or json, not csv")]
    TreeAsCsv,
    /// `--allocs --by alloc-site`.
    #[error(
        "--by alloc-site groups faults; --allocs groups allocations by stack, function, line or dso"
    )]
    AllocsByAllocSite,
    /// `--allocs --by comm|pid|tid`.
    #[error(
        "--by comm, pid and tid group faults; --allocs groups allocations by stack, function, line or dso"
    )]
    AllocsByThread,
    /// `--leaks --by`.
    #[error("--leaks lists whole stacks: --by does not apply")]
    LeaksBy,
    /// `--time` with `--allocs` or `--leaks`.
    #[error("--time selects faults; --allocs and --leaks cover the whole recording")]
    TimeOfAllocs,
    /// `--older-ms` without `--allocs` or `--leaks`.
    #[error("--older-ms applies to --leaks and --allocs")]
    OlderWithoutAllocs,
    /// `--legacy-csv` with `--format folded|pprof`.
    #[error("--legacy-csv goes with the tables, not --format folded or pprof")]
    LegacyCsvOfExport,
    /// `--format folded|pprof` with `--allocs` or `--leaks`.
    #[error("--format folded and pprof export the faults' stacks: not with --allocs or --leaks")]
    ExportOfAllocs,
    /// `--format folded|pprof` with `--by`.
    #[error("--format folded and pprof export whole stacks: --by does not apply")]
    ExportBy,
}

impl ReportFlags {
    /// Whether the flags go with `--format folded|pprof` (every fault's whole stack, for
    /// other tools); `legacy_csv`: whether `--legacy-csv` is given.
    pub fn check_export(&self, legacy_csv: bool) -> Result<(), ReportFlagsError> {
        if legacy_csv {
            Err(ReportFlagsError::LegacyCsvOfExport)
        } else if self.allocs || self.leaks {
            Err(ReportFlagsError::ExportOfAllocs)
        } else if self.by.is_some() {
            Err(ReportFlagsError::ExportBy)
        } else {
            Ok(())
        }
    }
}

impl ReportMode {
    /// The report `flags` ask for, or why they do not go together.
    pub fn of(flags: &ReportFlags) -> Result<ReportMode, ReportFlagsError> {
        if let Some(order) = flags.call_graph {
            if flags.allocs || flags.leaks || flags.by.is_some() {
                return Err(ReportFlagsError::TreeWithOthers);
            }
            if flags.csv {
                return Err(ReportFlagsError::TreeAsCsv);
            }
            return Ok(ReportMode::CallTree(order));
        }
        let group_by = |by: Option<ReportBy>| match by {
            Some(ReportBy::Group(by)) => by,
            _ => GroupBy::Line,
        };
        let mode = match (flags.allocs, flags.leaks, flags.by) {
            (true, _, Some(ReportBy::AllocSite)) => {
                return Err(ReportFlagsError::AllocsByAllocSite);
            }
            (true, _, Some(ReportBy::Thread(_))) => return Err(ReportFlagsError::AllocsByThread),
            (true, _, by) => ReportMode::Allocs(group_by(by)),
            (_, true, Some(_)) => return Err(ReportFlagsError::LeaksBy),
            (_, true, None) => ReportMode::Leaks,
            (false, false, Some(ReportBy::AllocSite)) => ReportMode::AllocSite,
            (false, false, Some(ReportBy::Thread(by))) => ReportMode::Threads(by),
            (false, false, by) => ReportMode::Faults(group_by(by)),
        };
        let whole_recording = matches!(mode, ReportMode::Allocs(_) | ReportMode::Leaks);
        if whole_recording && flags.time {
            return Err(ReportFlagsError::TimeOfAllocs);
        }
        if !whole_recording && flags.older_ms {
            return Err(ReportFlagsError::OlderWithoutAllocs);
        }
        Ok(mode)
    }

    /// `options` holding what this report needs: only the reports of faults by their own
    /// stacks stream the faults into counts; the others need each fault's address and time
    /// (to find the block it landed in, or its thread).
    pub fn load_options(self, options: &LoadOptions) -> LoadOptions {
        match self {
            ReportMode::Faults(_) | ReportMode::CallTree(_) => {
                options.holding(FaultsHeld::Counted, AllocStacks::Skip)
            }
            ReportMode::Threads(_) => options.holding(FaultsHeld::All, AllocStacks::Skip),
            _ => options.for_allocs(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mode(flags: ReportFlags) -> Result<ReportMode, ReportFlagsError> {
        ReportMode::of(&flags)
    }

    /// An export takes whole fault stacks: no --legacy-csv, --allocs, --leaks or --by, the
    /// first refused first.
    #[test]
    fn exports_refuse_what_they_cannot_say() {
        let none = ReportFlags::default();
        assert!(none.check_export(false).is_ok());
        let leaks_by = ReportFlags {
            leaks: true,
            by: Some(ReportBy::Group(GroupBy::Line)),
            ..none
        };
        assert!(matches!(
            leaks_by.check_export(true),
            Err(ReportFlagsError::LegacyCsvOfExport)
        ));
        assert!(matches!(
            leaks_by.check_export(false),
            Err(ReportFlagsError::ExportOfAllocs)
        ));
        let by = ReportFlags {
            leaks: false,
            ..leaks_by
        };
        assert_eq!(
            by.check_export(false).unwrap_err().to_string(),
            "--format folded and pprof export whole stacks: --by does not apply"
        );
    }

    /// The flags choose what the report is about; those that do not go together are refused,
    /// each with its own reason.
    #[test]
    fn modes_of_the_flags() {
        let none = ReportFlags::default();
        let by = |by| ReportFlags {
            by: Some(by),
            ..none
        };
        let allocs = ReportFlags {
            allocs: true,
            ..none
        };
        let leaks = ReportFlags {
            leaks: true,
            ..none
        };
        let tree = ReportFlags {
            call_graph: Some(CallOrder::Callee),
            ..none
        };
        assert_eq!(mode(none), Ok(ReportMode::Faults(GroupBy::Line)));
        let dso = ReportBy::Group(GroupBy::Dso);
        assert_eq!(mode(by(dso)), Ok(ReportMode::Faults(GroupBy::Dso)));
        assert_eq!(mode(allocs), Ok(ReportMode::Allocs(GroupBy::Line)));
        let stack = ReportBy::Group(GroupBy::Stack);
        assert_eq!(
            mode(ReportFlags {
                by: Some(stack),
                ..allocs
            }),
            Ok(ReportMode::Allocs(GroupBy::Stack))
        );
        let older = ReportFlags {
            older_ms: true,
            ..leaks
        };
        assert_eq!(mode(older), Ok(ReportMode::Leaks));
        assert_eq!(mode(by(ReportBy::AllocSite)), Ok(ReportMode::AllocSite));
        let tid = ReportBy::Thread(ThreadBy::Tid);
        assert_eq!(mode(by(tid)), Ok(ReportMode::Threads(ThreadBy::Tid)));
        assert_eq!(mode(tree), Ok(ReportMode::CallTree(CallOrder::Callee)));
        let refused = [
            (
                ReportFlags {
                    by: Some(ReportBy::AllocSite),
                    ..allocs
                },
                ReportFlagsError::AllocsByAllocSite,
            ),
            (
                ReportFlags {
                    by: Some(tid),
                    ..allocs
                },
                ReportFlagsError::AllocsByThread,
            ),
            (
                ReportFlags {
                    by: Some(dso),
                    ..leaks
                },
                ReportFlagsError::LeaksBy,
            ),
            (
                ReportFlags {
                    time: true,
                    ..allocs
                },
                ReportFlagsError::TimeOfAllocs,
            ),
            (
                ReportFlags {
                    older_ms: true,
                    ..none
                },
                ReportFlagsError::OlderWithoutAllocs,
            ),
            (
                ReportFlags {
                    by: Some(dso),
                    ..tree
                },
                ReportFlagsError::TreeWithOthers,
            ),
            (
                ReportFlags {
                    allocs: true,
                    ..tree
                },
                ReportFlagsError::TreeWithOthers,
            ),
            (
                ReportFlags { csv: true, ..tree },
                ReportFlagsError::TreeAsCsv,
            ),
        ];
        for (flags, why) in refused {
            assert_eq!(mode(flags), Err(why), "{flags:?}");
        }
    }

    /// Reports by stack stream the faults; by thread they hold them; of allocations they
    /// require them.
    #[test]
    fn each_report_loads_what_it_needs() {
        let options = LoadOptions::new("d".into(), Default::default());
        let faults = ReportMode::Faults(GroupBy::Line).load_options(&options);
        assert_eq!(
            (faults.faults, faults.alloc_stacks),
            (FaultsHeld::Counted, AllocStacks::Skip)
        );
        let threads = ReportMode::Threads(ThreadBy::Pid).load_options(&options);
        assert_eq!(threads.faults, FaultsHeld::All);
        let leaks = ReportMode::Leaks.load_options(&options);
        assert_eq!(leaks.alloc_stacks, AllocStacks::Required);
    }
}
