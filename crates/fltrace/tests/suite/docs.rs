//! The README's and docs/'s commands, run as written: every ```console and ```sh block of
//! README.md and docs/*.md runs in a directory of its own where the bundled workloads are
//! built (`./faults`, `./graph`, ...), with this build's `fltrace` first on the PATH, so
//! that the documentation cannot drift from the tool.
//!
//! - ```console blocks are transcripts: each `$ COMMAND` line runs (in bash, stderr with
//!   stdout) and the lines after it, up to the next `$ `, are its output. They are compared
//!   line by line with runs of spaces counting as one (tables align to their contents);
//!   `[..]` in a line stands for any text, a line `...` for any number of lines, and a last
//!   line `[exit N]` for the exit status (0 otherwise). A command followed by no output line
//!   has only its status checked.
//! - ```sh blocks are lists of commands, each run in turn and required to succeed; the
//!   output is not compared.
//! - ```sh norun blocks are not run: each is named in [`NOT_RUN`] with why.
//! - ```sql blocks are the queries of docs/FORMAT.md, run on DuckDB and Spark by
//!   `engines.rs`; ```toml and ```text blocks hold no commands (a `$ ` line in a text block
//!   is refused: a transcript is a console block).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;
use std::time::Duration;

use super::util::*;

/// The blocks not run, by their first line, with why.
const NOT_RUN: [(&str, &str); 2] = [
    (
        "./scripts/demo.sh",
        "builds fltrace in release and installs packages: CI runs setup.sh and test.sh themselves",
    ),
    (
        "./scripts/setup.sh",
        "installs packages and fltrace into /usr/local",
    ),
];

/// A fenced block of a document.
#[derive(Debug, Clone)]
struct Block {
    /// `README.md:41`: where its fence opens.
    place: String,
    /// The info string's first word.
    lang: String,
    /// The info string's other words.
    flags: Vec<String>,
    /// Its lines, their common indentation removed.
    lines: Vec<String>,
}

/// The repository's root.
fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The documents whose commands run: README.md and docs/*.md.
fn documents() -> Vec<PathBuf> {
    let mut docs: Vec<PathBuf> = std::fs::read_dir(repo().join("docs"))
        .expect("docs/")
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|e| e == "md"))
        .collect();
    docs.sort();
    docs.insert(0, repo().join("README.md"));
    docs
}

/// The fenced blocks of `path` (fences may be indented, as in a list item).
fn blocks(path: &Path) -> Vec<Block> {
    let text = std::fs::read_to_string(path).expect("document");
    let name = path
        .file_name()
        .expect("name")
        .to_string_lossy()
        .into_owned();
    let lines: Vec<&str> = text.lines().collect();
    let mut blocks = Vec::new();
    let mut i = 0;
    while i < lines.len() {
        let trimmed = lines[i].trim_start();
        let Some(info) = trimmed.strip_prefix("```") else {
            i += 1;
            continue;
        };
        let indent = lines[i].len() - trimmed.len();
        let mut words = info.split_whitespace().map(str::to_owned);
        let lang = words.next().unwrap_or_default();
        let flags: Vec<String> = words.collect();
        let start = i;
        i += 1;
        let mut body = Vec::new();
        while i < lines.len() && lines[i].trim() != "```" {
            let line = lines[i];
            body.push(
                line.get(indent.min(line.len() - line.trim_start().len())..)
                    .unwrap_or(line)
                    .to_owned(),
            );
            i += 1;
        }
        blocks.push(Block {
            place: format!("{name}:{}", start + 1),
            lang,
            flags,
            lines: body,
        });
        i += 1;
    }
    blocks
}

/// The bundled workloads the documents run, built once: name in the sandbox, source, flags.
const PROGRAMS: [(&str, &str, &[&str]); 9] = [
    ("faults", "faults.c", &["-ldl", "-lpthread"]),
    ("graph", "graph.c", &["-fopenmp"]),
    ("scan", "scan.c", &[]),
    ("allocs", "allocs.c", &["-ldl", "-lpthread"]),
    ("farmem", "farmem.c", &["-lpthread"]),
    ("memtools", "memtools.c", &[]),
    ("sysmem", "sysmem.c", &[]),
    ("threads2", "threads2.c", &["-lpthread"]),
    ("loop", "loop.c", &[]),
];

/// The directory holding the built workloads.
fn built() -> &'static Path {
    static BUILT: OnceLock<tempfile::TempDir> = OnceLock::new();
    BUILT
        .get_or_init(|| {
            let dir = tempfile::tempdir().expect("temp dir");
            for (name, source, extra) in PROGRAMS {
                let out = Command::new("gcc")
                    .args(["-O2", "-g", "-fomit-frame-pointer", "-o"])
                    .arg(dir.path().join(name))
                    .arg(workloads_dir().join(source))
                    .args(extra)
                    .output()
                    .expect("gcc runs");
                assert!(
                    out.status.success(),
                    "{source}: {}",
                    String::from_utf8_lossy(&out.stderr)
                );
            }
            dir
        })
        .path()
}

/// A fresh directory for one block: the workloads, `workloads/` (their sources) and a home.
fn sandbox() -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("temp dir");
    for (name, _, _) in PROGRAMS {
        std::fs::copy(built().join(name), dir.path().join(name)).expect("workload copied");
    }
    std::os::unix::fs::symlink(workloads_dir(), dir.path().join("workloads")).expect("link");
    std::fs::create_dir(dir.path().join(".home")).expect("home");
    dir
}

/// Runs `command` in `dir` as a shell would, stderr with stdout; its status and lines.
fn run(dir: &Path, command: &str) -> (i32, Vec<String>) {
    let fltrace = Path::new(env!("CARGO_BIN_EXE_fltrace"));
    let path = format!(
        "{}:{}",
        fltrace.parent().expect("bin dir").display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let out = output_within(
        Command::new("bash")
            .arg("-c")
            .arg(format!("exec 2>&1\n{command}"))
            .current_dir(dir)
            .env_clear()
            .env("PATH", path)
            .env("HOME", dir.join(".home"))
            .env("LANG", "C.UTF-8")
            .stdin(std::process::Stdio::null()),
        Duration::from_secs(600),
    );
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let lines = text.lines().map(str::to_owned).collect();
    (out.status.code().unwrap_or(-1), lines)
}

/// `line` with runs of spaces as one, trailing ones gone.
fn collapsed(line: &str) -> String {
    line.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// Whether `actual` reads as `expected`, whose `[..]` stands for any text.
fn line_matches(expected: &str, actual: &str) -> bool {
    let (expected, actual) = (collapsed(expected), collapsed(actual));
    let parts: Vec<&str> = expected.split("[..]").collect();
    if parts.len() == 1 {
        return expected == actual;
    }
    let mut rest = actual.as_str();
    for (i, part) in parts.iter().enumerate() {
        if i == 0 {
            match rest.strip_prefix(part) {
                Some(after) => rest = after,
                None => return false,
            }
        } else if i == parts.len() - 1 {
            return rest.ends_with(part);
        } else {
            match rest.find(part) {
                Some(at) => rest = &rest[at + part.len()..],
                None => return false,
            }
        }
    }
    true
}

/// Whether `actual` reads as `expected`, whose `...` lines stand for any number of lines.
fn lines_match(expected: &[String], actual: &[String]) -> bool {
    match expected.split_first() {
        None => actual.is_empty(),
        Some((first, rest)) if first.trim() == "..." => {
            (0..=actual.len()).any(|skip| lines_match(rest, &actual[skip..]))
        }
        Some((first, rest)) => actual
            .split_first()
            .is_some_and(|(line, others)| line_matches(first, line) && lines_match(rest, others)),
    }
}

/// A command of a transcript, its expected output lines and status.
struct Step {
    command: String,
    output: Vec<String>,
    status: i32,
}

/// The steps of a console block.
fn steps(block: &Block) -> Vec<Step> {
    let mut steps: Vec<Step> = Vec::new();
    for line in &block.lines {
        if let Some(command) = line.strip_prefix("$ ") {
            steps.push(Step {
                command: command.to_owned(),
                output: Vec::new(),
                status: 0,
            });
        } else if let Some(step) = steps.last_mut() {
            match line
                .trim()
                .strip_prefix("[exit ")
                .and_then(|s| s.strip_suffix(']'))
            {
                Some(code) => step.status = code.parse().expect("[exit N]"),
                None => step.output.push(line.clone()),
            }
        } else {
            panic!("{}: output before any `$ ` command", block.place);
        }
    }
    steps
}

/// What is wrong with running `block`, if anything.
fn check(block: &Block) -> Option<String> {
    let dir = sandbox();
    match block.lang.as_str() {
        "console" => {
            for step in steps(block) {
                let (status, output) = run(dir.path(), &step.command);
                let output_ok = step.output.iter().all(|l| l.trim().is_empty())
                    || lines_match(&step.output, &output);
                if status != step.status || !output_ok {
                    return Some(format!(
                        "{}: `{}` exited {status} (expected {}){}\n--- output:\n{}",
                        block.place,
                        step.command,
                        step.status,
                        if output_ok {
                            String::new()
                        } else {
                            format!("\n--- expected:\n{}", step.output.join("\n"))
                        },
                        output.join("\n")
                    ));
                }
            }
            None
        }
        "sh" => {
            for line in &block.lines {
                let command = line.trim();
                if command.is_empty() || command.starts_with('#') {
                    continue;
                }
                let (status, output) = run(dir.path(), command);
                if status != 0 {
                    return Some(format!(
                        "{}: `{command}` exited {status}\n{}",
                        block.place,
                        output.join("\n")
                    ));
                }
            }
            None
        }
        _ => None,
    }
}

/// Every block is of a known kind, commands only where they run: a `$ ` line outside a
/// console block, an unknown language or a `norun` block not in [`NOT_RUN`] is refused.
#[test]
fn every_command_block_is_one_the_runner_runs() {
    let mut not_run = Vec::new();
    for doc in documents() {
        for block in blocks(&doc) {
            match block.lang.as_str() {
                "console" => assert!(
                    block.lines.first().is_some_and(|l| l.starts_with("$ ")),
                    "{}: a console block starts with a `$ ` command",
                    block.place
                ),
                "sh" if block.flags.iter().any(|f| f == "norun") => {
                    let first = block.lines.first().map_or("", |l| l.trim());
                    assert!(
                        NOT_RUN.iter().any(|(start, _)| first.starts_with(start)),
                        "{}: a norun block must be named in NOT_RUN with why",
                        block.place
                    );
                    not_run.push(first.to_owned());
                }
                "sh" => {}
                "sql" | "toml" => {}
                "text" => assert!(
                    !block.lines.iter().any(|l| l.starts_with("$ ")),
                    "{}: commands go in a console block, which runs",
                    block.place
                ),
                other => panic!(
                    "{}: a block of `{other}`: say console, sh, sql, toml or text",
                    block.place
                ),
            }
        }
    }
    assert_eq!(not_run.len(), NOT_RUN.len(), "{not_run:?}");
}

/// The runner's own matching: spaces collapsed, `[..]` any text, `...` any lines.
#[test]
fn transcripts_match_as_documented() {
    assert!(line_matches("1    300 [..]%  write", "1 300 85.23% write"));
    assert!(!line_matches("1 300 [..] read", "1 300 85.23% write"));
    assert!(line_matches("[..] faults", "352 faults"));
    let lines = |s: &[&str]| s.iter().map(|l| (*l).to_owned()).collect::<Vec<_>>();
    assert!(lines_match(
        &lines(&["a", "...", "z"]),
        &lines(&["a", "b", "c", "z"])
    ));
    assert!(lines_match(&lines(&["a", "...", "z"]), &lines(&["a", "z"])));
    assert!(!lines_match(&lines(&["a", "z"]), &lines(&["a", "b", "z"])));
}

/// Every console and sh block of README.md and docs/*.md runs as written; where a
/// transcript shows output, the command printed it.
#[test]
fn readme_and_docs_run_as_written() {
    let mut failures = Vec::new();
    let mut ran = 0;
    for doc in documents() {
        for block in blocks(&doc) {
            if block.flags.iter().any(|f| f == "norun") {
                continue;
            }
            if matches!(block.lang.as_str(), "console" | "sh") {
                ran += 1;
                failures.extend(check(&block));
            }
        }
    }
    assert!(ran >= 10, "only {ran} blocks ran");
    assert!(
        failures.is_empty(),
        "{} of {ran} blocks:\n\n{}",
        failures.len(),
        failures.join("\n\n")
    );
}

/// Every file the repository holds below `dir` (its path from the root), `target/` left out.
fn files_below(dir: &Path, out: &mut Vec<String>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        if path.is_dir() {
            if path.file_name().is_some_and(|n| n != "target") {
                files_below(&path, out);
            }
        } else if let Ok(relative) = path.strip_prefix(repo()) {
            out.push(relative.to_string_lossy().into_owned());
        }
    }
}

/// What `token` cites, if it is a path: `None` if it exists. A path from the root
/// (`crates/...`, `bench/...`, `scripts/...`, `workloads/...`, `docs/...`) must exist as
/// written; a source file named from inside its crate (`recorder/setup.rs`, `hints.rs`) must
/// end the path of some file of the repository.
fn missing_citation(token: &str, files: &[String]) -> Option<String> {
    const ROOTS: [&str; 5] = ["crates/", "bench/", "scripts/", "workloads/", "docs/"];
    const SOURCES: [&str; 5] = [".rs", ".c", ".sh", ".toml", ".py"];
    if ROOTS.iter().any(|root| token.starts_with(root)) {
        return (!repo().join(token).exists()).then(|| token.to_owned());
    }
    if !SOURCES.iter().any(|ext| token.ends_with(ext)) {
        return None;
    }
    let found = files
        .iter()
        .any(|f| f == token || f.ends_with(&format!("/{token}")));
    (!found).then(|| token.to_owned())
}

/// docs/ARCHITECTURE.md sends readers only to paths that exist (issue 42): a file moved or
/// renamed without the document fails here, with the citations that went stale.
#[test]
fn architecture_cites_only_existing_paths() {
    let text = std::fs::read_to_string(repo().join("docs/ARCHITECTURE.md")).expect("document");
    let mut files = Vec::new();
    for dir in ["crates", "bench", "scripts", "workloads", "docs"] {
        files_below(&repo().join(dir), &mut files);
    }
    // The root's own files (`clippy.toml`, `Cargo.toml`).
    files.extend(
        std::fs::read_dir(repo())
            .expect("the repository")
            .flatten()
            .filter(|e| e.path().is_file())
            .map(|e| e.file_name().to_string_lossy().into_owned()),
    );
    assert!(
        files.iter().any(|f| f == "crates/fltrace/src/main.rs"),
        "the repository's files are listed"
    );
    let tokens: Vec<&str> = text
        .split(|c: char| !(c.is_ascii_alphanumeric() || "_./-".contains(c)))
        .map(|t| t.trim_end_matches('.'))
        .filter(|t| !t.is_empty())
        .collect();
    let cited: Vec<&str> = tokens
        .iter()
        .copied()
        .filter(|t| t.contains('/') || t.ends_with(".rs"))
        .collect();
    // The check sees the citations it is meant for (the crates' own paths among them).
    assert!(
        cited.contains(&"crates/fltrace-capture/src/process/mod.rs")
            && cited.contains(&"recorder/setup.rs"),
        "citations found: {cited:?}"
    );
    let mut missing: Vec<String> = tokens
        .iter()
        .filter_map(|t| missing_citation(t, &files))
        .collect();
    missing.sort();
    missing.dedup();
    assert!(
        missing.is_empty(),
        "docs/ARCHITECTURE.md cites paths that do not exist: {missing:?}"
    );
}

/// The check itself: a path that is not there is caught, one that is passes.
#[test]
fn a_stale_citation_is_caught() {
    let files = vec![
        "crates/fltrace-capture/src/process.rs".to_owned(),
        "crates/fltrace-capture/src/recorder/setup.rs".to_owned(),
    ];
    assert_eq!(missing_citation("recorder/setup.rs", &files), None);
    assert_eq!(missing_citation("process.rs", &files), None);
    assert_eq!(
        missing_citation("process/process.rs", &files),
        Some("process/process.rs".to_owned())
    );
    assert_eq!(
        missing_citation("crates/fltrace-capture/src/nowhere.rs", &files),
        Some("crates/fltrace-capture/src/nowhere.rs".to_owned())
    );
    assert_eq!(missing_citation("capture::perf", &files), None);
}
