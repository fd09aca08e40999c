//! What to type instead, under clap's usage errors: the mistakes a perf user makes with
//! fltrace's grammar, each answered with the right form.

use std::path::Path;

use clap::error::{ContextKind, ContextValue, ErrorKind};

/// The commands that run a program after their own flags.
const RUNS_A_COMMAND: [&str; 5] = ["record", "top", "wss", "sweep", "runs"];

/// The commands that read one recording (by position, `-d` or `-i`).
const READS_A_RECORDING: [&str; 7] = [
    "report",
    "script",
    "visualize",
    "heatmap",
    "archive",
    "list",
    "export",
];

/// A line saying what to type instead of `args` (fltrace's arguments, without the program
/// name), for the usage error `error`.
pub fn hint(error: &clap::Error, args: &[String]) -> Option<String> {
    let command = args.iter().find(|a| !a.starts_with('-'))?.as_str();
    let invalid = |kind: ContextKind| match error.get(kind) {
        Some(ContextValue::String(value)) => Some(value.clone()),
        _ => None,
    };
    match error.kind() {
        // `fltrace record ls -l`: the program's flags read as fltrace's.
        ErrorKind::UnknownArgument
            if RUNS_A_COMMAND.contains(&command) && !args.iter().any(|a| a == "--") =>
        {
            Some(format!(
                "hint: put `--` before the program to run, so that its flags stay its own: fltrace {command} [OPTIONS] -- PROGRAM [ARGS]"
            ))
        }
        // `fltrace report r1 r2`.
        ErrorKind::UnknownArgument if READS_A_RECORDING.contains(&command) => {
            let value = invalid(ContextKind::InvalidArg)?;
            (!value.starts_with('-')).then(|| {
                format!(
                    "hint: `{command}` reads one recording, named once (`fltrace {command} DIR`, `-d DIR` or `-i DIR`); `fltrace diff A B` compares two"
                )
            })
        }
        // `fltrace diff -d A B`, `fltrace diff A`.
        ErrorKind::UnknownArgument | ErrorKind::MissingRequiredArgument
            if command == "diff" =>
        {
            Some(
                "hint: diff names its two recordings by position, the baseline first: fltrace diff A B (each a directory or an archive file)"
                    .to_owned(),
            )
        }
        // `fltrace report -g r1`: `-g` takes an optional order, so the recording was read as it.
        ErrorKind::InvalidValue => {
            let arg = invalid(ContextKind::InvalidArg)?;
            let value = invalid(ContextKind::InvalidValue)?;
            (arg.starts_with("--call-graph") && Path::new(&value).exists()).then(|| {
                format!(
                    "hint: -g takes caller or callee; name the recording before it or with -d: fltrace {command} {value} -g"
                )
            })
        }
        // `fltrace report r1 -d r2`.
        ErrorKind::ArgumentConflict if READS_A_RECORDING.contains(&command) => Some(format!(
            "hint: name the recording once: `fltrace {command} DIR`, `-d DIR` or `-i DIR` say the same"
        )),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;
    use crate::cli::Cli;

    /// The hint for `fltrace ARGS`, or none.
    fn hint_of(args: &[&str]) -> Option<String> {
        let error = Cli::try_parse_from(["fltrace"].iter().chain(args)).expect_err("refused");
        let args: Vec<String> = args.iter().map(|a| (*a).to_owned()).collect();
        hint(&error, &args)
    }

    /// Each mistake gets the form to type instead.
    #[test]
    fn mistakes_get_the_right_form() {
        let hint = hint_of(&["record", "ls", "-l"]).expect("a hint");
        assert!(
            hint.contains("fltrace record [OPTIONS] -- PROGRAM"),
            "{hint}"
        );
        let hint = hint_of(&["report", "r1", "r2"]).expect("a hint");
        assert!(hint.contains("fltrace diff A B"), "{hint}");
        let hint = hint_of(&["report", "r1", "-d", "r2"]).expect("a hint");
        assert!(hint.contains("name the recording once"), "{hint}");
        let hint = hint_of(&["diff", "a"]).expect("a hint");
        assert!(hint.contains("fltrace diff A B"), "{hint}");
        let hint = hint_of(&["diff", "-d", "a", "b"]).expect("a hint");
        assert!(hint.contains("by position"), "{hint}");
        let hint = hint_of(&["report", "-g", "."]).expect("a hint");
        assert!(hint.contains("fltrace report . -g"), "{hint}");
        assert_eq!(hint_of(&["report", "--by", "nothing"]), None);
    }
}
