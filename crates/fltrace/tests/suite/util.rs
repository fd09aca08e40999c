//! Building the workloads, running fltrace in a temporary directory, reading its output.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;

use serde_json::Value;

/// The workload sources.
pub fn workloads_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../workloads")
}

/// The built workloads, once per test binary.
pub struct Workloads {
    _dir: tempfile::TempDir,
    /// `faults.c`, gcc -O2 -g without frame pointers.
    pub faults: PathBuf,
    /// `libfault.c` as a shared library.
    pub libfault: PathBuf,
    /// `touch.rs`, rustc -O -g (no frame pointers).
    pub touch_rs: PathBuf,
    /// `faults.c` linked at a fixed address (-no-pie).
    pub faults_no_pie: PathBuf,
    /// `faults.c` without debug info (symbol table only).
    pub faults_stripped: PathBuf,
    /// `scan.c`: write a buffer once, read it in further passes.
    pub scan: PathBuf,
    /// `farmem.c`: far-memory correctness modes.
    pub farmem: PathBuf,
    /// `allocs.c`: allocation calls at known lines.
    pub allocs: PathBuf,
    /// `objects.cpp`: new, new[] and a growing vector, with g++.
    pub objects: PathBuf,
    /// `deep.c`: faults 2,000 calls deep, built as C.
    pub deep_c: PathBuf,
    /// `deep.c` built as C++ by g++.
    pub deep_cpp: PathBuf,
}

fn build(cmd: &mut Command) {
    let out = cmd.output().expect("compiler runs");
    assert!(
        out.status.success(),
        "{cmd:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Builds one C workload of workloads/ as the suite builds them all (gcc -O2 -g, no frame
/// pointers), into `dir`, for tests that need a program of their own.
pub fn build_c_workload(dir: &Path, source: &str) -> PathBuf {
    let name = source.strip_suffix(".c").unwrap_or(source);
    let out = dir.join(name);
    build(
        Command::new("gcc")
            .args(["-O2", "-g", "-fomit-frame-pointer", "-o"])
            .arg(&out)
            .arg(workloads_dir().join(source)),
    );
    out
}

pub fn workloads() -> &'static Workloads {
    static BUILT: OnceLock<Workloads> = OnceLock::new();
    BUILT.get_or_init(|| {
        let dir = tempfile::tempdir().expect("temp dir");
        let src = workloads_dir();
        let out = |name: &str| dir.path().join(name);
        // All C workloads without frame pointers: stacks must come from DWARF CFI.
        let gcc = |output: &Path, source: &str, extra: &[&str]| {
            build(
                Command::new("gcc")
                    .args(["-O2", "-g", "-fomit-frame-pointer"])
                    .args(extra)
                    .arg("-o")
                    .arg(output)
                    .arg(src.join(source))
                    .args(["-ldl", "-lpthread"]),
            )
        };
        let faults = out("faults");
        gcc(&faults, "faults.c", &[]);
        let faults_no_pie = out("faults-no-pie");
        gcc(&faults_no_pie, "faults.c", &["-no-pie"]);
        let libfault = out("libfault.so");
        gcc(&libfault, "libfault.c", &["-shared", "-fPIC"]);
        let scan = out("scan");
        gcc(&scan, "scan.c", &[]);
        let farmem = out("farmem");
        gcc(&farmem, "farmem.c", &[]);
        let allocs = out("allocs");
        gcc(&allocs, "allocs.c", &[]);
        let objects = out("objects");
        build(
            Command::new("g++")
                .args(["-O2", "-g", "-fomit-frame-pointer", "-o"])
                .arg(&objects)
                .arg(src.join("objects.cpp")),
        );
        let deep_c = out("deep_c");
        gcc(&deep_c, "deep.c", &[]);
        let deep_cpp = out("deep_cpp");
        build(
            Command::new("g++")
                .args(["-x", "c++", "-O2", "-g", "-fomit-frame-pointer", "-o"])
                .arg(&deep_cpp)
                .arg(src.join("deep.c")),
        );
        let faults_stripped = out("faults-stripped");
        build(
            Command::new("strip")
                .args(["--strip-debug", "-o"])
                .arg(&faults_stripped)
                .arg(&faults),
        );
        let touch_rs = out("touch_rs");
        build(
            Command::new("rustc")
                .args(["-C", "opt-level=2", "-g", "--edition", "2021", "-o"])
                .arg(&touch_rs)
                .arg(src.join("touch.rs")),
        );
        Workloads {
            _dir: dir,
            faults,
            libfault,
            touch_rs,
            faults_no_pie,
            faults_stripped,
            scan,
            farmem,
            allocs,
            objects,
            deep_c,
            deep_cpp,
        }
    })
}

/// The line of the `SITE:<name>` marker in a workload source.
pub fn site(file: &str, name: &str) -> u32 {
    let text = std::fs::read_to_string(workloads_dir().join(file)).expect("workload source");
    let marker = format!("SITE:{name} ");
    let marker_end = format!("SITE:{name}");
    text.lines()
        .position(|l| l.contains(&marker) || l.trim_end().ends_with(&marker_end))
        .map(|i| i as u32 + 1)
        .unwrap_or_else(|| panic!("no SITE:{name} in {file}"))
}

/// A temporary directory to record in.
pub struct Dir(pub tempfile::TempDir);

/// The perf maps the recorded JITs wrote in /tmp go with the recording: left there, one
/// would lie under a pid the machine gives to a later test's process.
impl Drop for Dir {
    fn drop(&mut self) {
        let Ok(entries) = std::fs::read_dir(self.path()) else {
            return;
        };
        for entry in entries.flatten() {
            let name = entry.file_name();
            let pid = name
                .to_str()
                .and_then(|n| fltrace_trace::files::pid_of(n, "faults", "parquet"));
            if let Some(pid) = pid {
                let (pid, _) = fltrace_trace::files::reused_pid(pid);
                let _ = std::fs::remove_file(format!("/tmp/perf-{pid}.map"));
            }
        }
    }
}

impl Dir {
    pub fn new() -> Dir {
        Dir(tempfile::tempdir().expect("temp dir"))
    }

    pub fn path(&self) -> &Path {
        self.0.path()
    }

    /// `fltrace <args>` run in this directory with a clean environment.
    pub fn fltrace(&self) -> Command {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_fltrace"));
        cmd.current_dir(self.path())
            .env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap_or_default());
        cmd
    }

    /// Runs fltrace with `args`. An allocation report (`report --allocs`, `--leaks`, `--by
    /// alloc-site`) or picture (`visualize`, `heatmap --allocs`) runs twice, streamed and from
    /// the whole tables held in memory (the oracle), and must come out the same, byte for
    /// byte, the files it names on stdout too.
    pub fn run(&self, args: &[&str]) -> Output {
        let out = self.fltrace().args(args).output().expect("fltrace runs");
        let allocation_report = args.first() == Some(&"report")
            && args
                .iter()
                .any(|a| matches!(*a, "--allocs" | "--leaks" | "alloc-site"));
        // A map of faults outlines allocations unless `--allocs 0` says not to.
        let allocation_picture = args.first() == Some(&"visualize")
            || (args.first() == Some(&"heatmap") && !args.contains(&"--from"));
        if allocation_report || allocation_picture {
            assert!(
                carries_oracle(),
                "fltrace under test lacks the whole-table oracle ({}): build it through cargo \
                 test, whose dev-dependencies turn on fltrace-analyze's `oracle` feature",
                fltrace_analyze::WHOLE_TABLE_ENV
            );
            let written = self.written(&out);
            let whole = self
                .fltrace()
                .env(fltrace_analyze::WHOLE_TABLE_ENV, "1")
                .args(args)
                .output()
                .expect("fltrace runs");
            // The first run converts a killed recorder's spool and says so; the second finds
            // it converted.
            let stderr = |out: &Output| {
                String::from_utf8_lossy(&out.stderr)
                    .lines()
                    .filter(|l| !l.contains("from the spool of a killed recorder"))
                    .collect::<Vec<_>>()
                    .join("\n")
            };
            assert_eq!(
                (
                    out.status.code(),
                    String::from_utf8_lossy(&out.stdout),
                    stderr(&out)
                ),
                (
                    whole.status.code(),
                    String::from_utf8_lossy(&whole.stdout),
                    stderr(&whole)
                ),
                "streamed and whole-table reports differ: fltrace {args:?}"
            );
            assert!(
                self.written(&whole) == written,
                "streamed and whole-table files differ: fltrace {args:?}"
            );
        }
        out
    }

    /// The files a command named on stdout (one a line), with their bytes.
    fn written(&self, out: &Output) -> Vec<(String, Vec<u8>)> {
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .filter_map(|line| {
                let path = self.path().join(line.trim());
                let bytes = std::fs::read(&path).ok()?;
                Some((line.to_owned(), bytes))
            })
            .collect()
    }

    /// Records `command` and checks that fltrace succeeded.
    pub fn record(&self, command: &[&Path], args: &[&str]) -> Output {
        self.record_with(&["-q"], command, args)
    }

    /// Records `command` with `record` flags `flags` and checks that fltrace succeeded.
    pub fn record_with(&self, flags: &[&str], command: &[&Path], args: &[&str]) -> Output {
        let out = self
            .fltrace()
            .arg("record")
            .args(flags)
            .arg("--")
            .args(command)
            .args(args)
            .output()
            .expect("fltrace runs");
        assert!(
            out.status.success(),
            "record failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        out
    }

    /// `fltrace report --format json` with extra arguments, parsed.
    pub fn report_json(&self, extra: &[&str]) -> Value {
        let out = self.run(&[&["report", "--format", "json", "--top", "0"], extra].concat());
        assert!(
            out.status.success(),
            "report failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        serde_json::from_slice(&out.stdout).expect("report prints JSON")
    }

    /// The pids of the files of kind `kind` in the directory.
    pub fn pids(&self, kind: &str, ext: &str) -> Vec<u32> {
        let mut pids: Vec<u32> = std::fs::read_dir(self.path())
            .expect("dir")
            .filter_map(|e| fltrace_trace::files::pid_of(e.ok()?.file_name().to_str()?, kind, ext))
            .collect();
        pids.sort_unstable();
        pids
    }
}

/// The count of the group at `file:line` in a `--by line` JSON report (0 if none).
/// The figure of `record`'s summary line: the faults with truncated stacks.
pub fn summary_truncated(stderr: &str) -> u64 {
    stderr
        .lines()
        .find_map(|line| {
            line.split(", ")
                .find(|part| part.ends_with("with truncated stacks"))
        })
        .and_then(|part| part.split(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no truncated-stack figure in: {stderr}"))
}

pub fn count_at(report: &Value, file: &str, line: u32) -> u64 {
    groups(report)
        .filter(|g| g["file"].as_str().is_some_and(|f| f.ends_with(file)) && g["line"] == line)
        .map(|g| g["count"].as_u64().unwrap_or(0))
        .sum()
}

pub fn groups(report: &Value) -> impl Iterator<Item = &Value> {
    report["groups"].as_array().into_iter().flatten()
}

/// `function@file:line` frames of the largest `--by stack` group whose call site is `line` of `file`.
pub fn stack_at(report: &Value, file: &str, line: u32) -> Vec<(String, String, u64)> {
    let group = groups(report)
        .find(|g| g["file"].as_str().is_some_and(|f| f.ends_with(file)) && g["line"] == line)
        .unwrap_or_else(|| panic!("no stack with a call site at {file}:{line}"));
    group["stack"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|f| {
            (
                f["function"].as_str().unwrap_or("").to_owned(),
                f["file"]
                    .as_str()
                    .unwrap_or("")
                    .rsplit('/')
                    .next()
                    .unwrap_or("")
                    .to_owned(),
                f["line"].as_u64().unwrap_or(0),
            )
        })
        .collect()
}

/// The sum of `field` over the `--by stack` groups whose stack has `function` at `line`.
pub fn sum_through(report: &Value, function: &str, line: u32, field: &str) -> u64 {
    groups(report)
        .filter(|g| {
            g["stack"]
                .as_array()
                .into_iter()
                .flatten()
                .any(|f| f["line"] == line && f["function"] == function)
        })
        .map(|g| g[field].as_u64().unwrap_or(0))
        .sum()
}

/// The rows of a CSV report (no quoted commas in the fields read), as header-keyed maps.
pub fn csv_rows(text: &str) -> Vec<std::collections::HashMap<String, String>> {
    let mut lines = text.lines();
    let header: Vec<&str> = lines.next().unwrap_or_default().split(',').collect();
    lines
        .map(|l| {
            header
                .iter()
                .zip(l.split(','))
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect()
        })
        .collect()
}

/// A copy of fltrace's preloaded library in `dir`, readable by every user, for commands run
/// as another user (`--user`, `--drop-privileges`) with `-L` or `--allocs`: fltrace refuses
/// them when that user cannot read the library, as in a checkout under a mode-700 directory
/// (`mktemp -d`). Pass it as `FLTRACE_RUNTIME`; `dir` must be searchable by that user.
pub fn readable_runtime(dir: &Path) -> PathBuf {
    use std::os::unix::fs::PermissionsExt;
    let library = Path::new(env!("CARGO_BIN_EXE_fltrace")).with_file_name("libfltrace_preload.so");
    let copy = dir.join("libfltrace_preload.so");
    std::fs::copy(&library, &copy).expect("copy of the preloaded library");
    std::fs::set_permissions(&copy, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    copy
}

/// Runs `cmd` to completion like `Command::output`, but kills it and fails the test if it
/// takes longer than `limit`: a deadlock in the traced program must not hang the suite.
pub fn output_within(cmd: &mut Command, limit: std::time::Duration) -> Output {
    output_and_pid_within(cmd, limit).0
}

/// [`output_within`], and the pid the command ran as.
pub fn output_and_pid_within(cmd: &mut Command, limit: std::time::Duration) -> (Output, u32) {
    use std::io::Read;
    use std::process::Stdio;
    let mut child = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("command starts");
    // Read both pipes meanwhile, or a chatty command blocks on a full pipe.
    let drain = |pipe: Option<Box<dyn Read + Send>>| {
        std::thread::spawn(move || {
            let mut bytes = Vec::new();
            if let Some(mut pipe) = pipe {
                let _ = pipe.read_to_end(&mut bytes);
            }
            bytes
        })
    };
    let stdout = drain(
        child
            .stdout
            .take()
            .map(|p| Box::new(p) as Box<dyn Read + Send>),
    );
    let stderr = drain(
        child
            .stderr
            .take()
            .map(|p| Box::new(p) as Box<dyn Read + Send>),
    );
    let started = std::time::Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().expect("wait") {
            break status;
        }
        if started.elapsed() > limit {
            let _ = child.kill();
            let _ = child.wait();
            panic!("{cmd:?} still running after {limit:?}: killed");
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    };
    let output = Output {
        status,
        stdout: stdout.join().unwrap_or_default(),
        stderr: stderr.join().unwrap_or_default(),
    };
    (output, child.id())
}

/// A free loopback port: taken from the kernel, then let go for a server.
pub fn free_port() -> String {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port()
        .to_string()
}

/// Waits for a spawned child with piped output, killing it and failing the test past `limit`.
pub fn wait_within(mut child: std::process::Child, limit: std::time::Duration) -> Output {
    let started = std::time::Instant::now();
    while child.try_wait().expect("wait").is_none() {
        if started.elapsed() > limit {
            let _ = child.kill();
            panic!("fltrace did not end within {limit:?}");
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    child.wait_with_output().expect("output")
}

/// Debian's PostgreSQL 15 run as user postgres in a fresh cluster under `dir`, its postmaster
/// recorded by `fltrace record FLAGS --user postgres --`, on a free port and a socket in `dir`.
pub struct Postgres {
    pub data: PathBuf,
    socket: String,
    port: String,
    /// The recorder, its stderr piped.
    recorder: std::process::Child,
}

impl Postgres {
    const BIN: &str = "/usr/lib/postgresql/15/bin";

    /// Makes the cluster, starts the recorded server and waits until it answers.
    pub fn start(dir: &Dir, flags: &[&str]) -> Postgres {
        use std::time::Duration;
        // The server, running as postgres, writes its cluster and socket here.
        std::fs::set_permissions(
            dir.path(),
            std::os::unix::fs::PermissionsExt::from_mode(0o777),
        )
        .expect("chmod");
        let data = dir.path().join("data");
        let socket = dir.path().to_str().expect("utf-8 path").to_string();
        let initdb = output_within(
            Self::as_postgres("initdb")
                .arg("-D")
                .arg(&data)
                .args(["-A", "trust"]),
            Duration::from_secs(120),
        );
        assert!(initdb.status.success(), "{initdb:?}");
        let port = free_port();
        let recorder = dir
            .fltrace()
            .env("FLTRACE_RUNTIME", readable_runtime(dir.path()))
            .arg("record")
            .args(flags)
            .args(["--user", "postgres", "--"])
            .arg(Path::new(Self::BIN).join("postgres"))
            .arg("-D")
            .arg(&data)
            .args(["-p", &port, "-k", &socket, "-c", "listen_addresses="])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("fltrace runs");
        let server = Postgres {
            data,
            socket,
            port,
            recorder,
        };
        let started = std::time::Instant::now();
        while !server.client("pg_isready", &[]).status.success() {
            assert!(
                started.elapsed() < Duration::from_secs(60),
                "postgres did not start"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
        server
    }

    /// `program` of PostgreSQL's, run as user postgres.
    fn as_postgres(program: &str) -> Command {
        let mut cmd = Command::new("runuser");
        cmd.args(["-u", "postgres", "--"])
            .arg(Path::new(Self::BIN).join(program));
        cmd
    }

    /// A client program (`pg_isready`, `pgbench`) against this server, ended within 2 minutes.
    fn client(&self, program: &str, args: &[&str]) -> Output {
        output_within(
            Self::as_postgres(program)
                .args(["-h", &self.socket, "-p", &self.port])
                .args(args),
            std::time::Duration::from_secs(120),
        )
    }

    /// `pgbench ARGS postgres` against this server.
    pub fn pgbench(&self, args: &[&str]) -> Output {
        let mut args = args.to_vec();
        args.push("postgres");
        self.client("pgbench", &args)
    }

    /// The postmaster's pid, from its lock file while it runs.
    pub fn postmaster(&self) -> u32 {
        std::fs::read_to_string(self.data.join("postmaster.pid"))
            .expect("postmaster.pid")
            .lines()
            .next()
            .and_then(|l| l.trim().parse().ok())
            .expect("a pid")
    }

    /// Stops the server (`pg_ctl stop -m fast`, which must succeed) and returns the
    /// recorder's output once it ended.
    pub fn stop(self) -> Output {
        let stop = output_within(
            Self::as_postgres("pg_ctl")
                .arg("-D")
                .arg(&self.data)
                .args(["stop", "-m", "fast"]),
            std::time::Duration::from_secs(60),
        );
        let out = wait_within(self.recorder, std::time::Duration::from_secs(120));
        assert!(
            stop.status.success(),
            "{stop:?}\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        out
    }
}

/// Whether the fltrace under test carries the whole-table oracle's switch (fltrace-analyze's
/// `oracle` feature, which this crate's dev-dependencies turn on and a plain build leaves
/// out): without it the second run of [`Dir::run`] would be the one pass again, and the
/// comparison would prove nothing.
fn carries_oracle() -> bool {
    static CARRIES: OnceLock<bool> = OnceLock::new();
    *CARRIES.get_or_init(|| {
        let binary = std::fs::read(env!("CARGO_BIN_EXE_fltrace")).expect("the fltrace binary");
        let name = fltrace_analyze::WHOLE_TABLE_ENV.as_bytes();
        binary.windows(name.len()).any(|w| w == name)
    })
}
