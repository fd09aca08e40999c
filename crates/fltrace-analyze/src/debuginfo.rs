//! Which files symbolize a mapped file: the file itself when it still has the build the
//! recording saw, else a copy found by build ID; its DWARF, or a separate debug file found where
//! distributions put them (`.gnu_debuglink`, `.build-id` directories, debuginfod).
//!
//! A file is never symbolized from a different build: when neither the file on disk nor any copy
//! found by build ID matches the recording, its frames stay `lib+offset`.

use std::collections::HashMap;
use std::ffi::OsStr;
use std::fs::File;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use object::read::ReadCache;
use object::{Object, ObjectSection, ObjectSegment};

/// The name of an archive directory beside a recording, used without being asked for.
pub const ARCHIVE_DIR: &str = "fltrace-archive";

/// The largest file fetched from debuginfod unless `DEBUGINFOD_MAXSIZE` says otherwise:
/// above the largest debug files distributions ship (a browser's are 1 to 3 GiB).
pub const DEFAULT_MAX_SIZE: u64 = 8 << 30;

/// Bytes of a response's status line and headers, at most.
const MAX_HEADERS: u64 = 64 << 10;

/// Where debug files are looked for.
#[derive(Debug, Clone, Default)]
pub struct DebugConfig {
    /// Roots of `.build-id/xx/rest.debug` trees and of debug-link mirrors of the file system,
    /// searched in order (by default `/usr/lib/debug`).
    pub debug_dirs: Vec<PathBuf>,
    /// An archive made by `fltrace archive`: `<build id>/executable` and `<build id>/debuginfo`.
    pub archive: Option<PathBuf>,
    /// debuginfod servers, tried in order after every local place.
    pub debuginfod_urls: Vec<String>,
    /// Where files fetched from debuginfod are kept (elfutils' layout: `<build id>/debuginfo`).
    pub debuginfod_cache: Option<PathBuf>,
    /// The longest a connection to, or a read from, a debuginfod server may wait.
    pub timeout: Duration,
    /// The longest one download may take, all told.
    pub max_time: Duration,
    /// The largest file downloaded, in bytes: a larger one is refused, and a body that goes
    /// past it stopped.
    pub max_size: u64,
    /// The build-ID cache `record` keeps the files holding code in
    /// ([`fltrace_trace::BuildIdCache`]), searched after the archive.
    pub build_id_cache: Option<PathBuf>,
    /// The recording's directory, where the perf maps of JIT code were copied.
    pub recording_dir: Option<PathBuf>,
}

impl DebugConfig {
    /// The configuration from the environment: `FLTRACE_DEBUG_DIRS` (colon-separated, searched
    /// before `/usr/lib/debug`), and as elfutils reads them `DEBUGINFOD_URLS` (space-separated),
    /// `DEBUGINFOD_CACHE_PATH` (else `$XDG_CACHE_HOME/debuginfod_client`, else
    /// `~/.cache/debuginfod_client`), `DEBUGINFOD_TIMEOUT` (seconds, default 90),
    /// `DEBUGINFOD_MAXTIME` (seconds a download may take, default ten timeouts) and
    /// `DEBUGINFOD_MAXSIZE` (bytes, default [`DEFAULT_MAX_SIZE`]).
    pub fn from_env() -> DebugConfig {
        let var = |name: &str| std::env::var_os(name).filter(|v| !v.is_empty());
        let mut debug_dirs: Vec<PathBuf> = var("FLTRACE_DEBUG_DIRS")
            .map(|v| std::env::split_paths(&v).collect())
            .unwrap_or_default();
        debug_dirs.push(PathBuf::from("/usr/lib/debug"));
        let debuginfod_urls = var("DEBUGINFOD_URLS")
            .map(|v| {
                v.to_string_lossy()
                    .split_whitespace()
                    .map(|u| u.trim_end_matches('/').to_owned())
                    .collect()
            })
            .unwrap_or_default();
        let debuginfod_cache = var("DEBUGINFOD_CACHE_PATH")
            .map(PathBuf::from)
            .or_else(|| var("XDG_CACHE_HOME").map(|d| Path::new(&d).join("debuginfod_client")))
            .or_else(|| var("HOME").map(|h| Path::new(&h).join(".cache/debuginfod_client")));
        let timeout = var("DEBUGINFOD_TIMEOUT")
            .and_then(|v| v.to_str()?.parse::<u64>().ok())
            .filter(|&s| s > 0)
            .unwrap_or(90);
        let positive = |name: &str| {
            var(name)
                .and_then(|v| v.to_str()?.parse::<u64>().ok())
                .filter(|&n| n > 0)
        };
        let max_time = positive("DEBUGINFOD_MAXTIME")
            .map_or(Duration::from_secs(timeout) * 10, Duration::from_secs);
        DebugConfig {
            debug_dirs,
            archive: None,
            debuginfod_urls,
            debuginfod_cache,
            timeout: Duration::from_secs(timeout),
            max_time,
            max_size: positive("DEBUGINFOD_MAXSIZE").unwrap_or(DEFAULT_MAX_SIZE),
            build_id_cache: fltrace_trace::BuildIdCache::from_env().map(|c| c.root().to_owned()),
            recording_dir: None,
        }
    }
}

/// The files that symbolize one mapped file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DebugFiles {
    /// The mapped file, of the recorded build: its program headers turn file offsets into
    /// addresses.
    pub binary: PathBuf,
    /// A separate file with the symbols and lines, when the binary has no DWARF of its own.
    pub debug: Option<PathBuf>,
    /// The build ID, hex (empty when the file has none).
    pub build_id: String,
    /// The binary's loadable segments: (file offset, address, file size).
    segments: Vec<(u64, u64, u64)>,
}

impl DebugFiles {
    /// The address in the binary of file offset `offset`, as the debug file knows it.
    pub fn address_of(&self, offset: fltrace_trace::FileOffset) -> Option<u64> {
        let offset = offset.get();
        self.segments
            .iter()
            .find(|&&(start, _, size)| (start..start + size).contains(&offset))
            .map(|&(start, addr, _)| offset - start + addr)
    }
}

/// Finds, and remembers, the debug files of mapped files.
#[derive(Debug)]
pub struct DebugResolver {
    config: DebugConfig,
    found: HashMap<(PathBuf, String), Option<DebugFiles>>,
    warnings: Vec<String>,
    /// Servers that could not be reached: not tried again in this run, so that one dead
    /// server costs one timeout rather than one per file.
    unreachable: Vec<String>,
}

impl DebugResolver {
    /// A resolver searching where `config` says.
    pub fn new(config: DebugConfig) -> DebugResolver {
        DebugResolver {
            config,
            found: HashMap::new(),
            warnings: Vec::new(),
            unreachable: Vec::new(),
        }
    }

    /// The configuration.
    pub fn config(&self) -> &DebugConfig {
        &self.config
    }

    /// What was wrong with the files resolved since the last call: one line per file whose
    /// build differs from the recording's or that is gone.
    pub fn take_warnings(&mut self) -> Vec<String> {
        std::mem::take(&mut self.warnings)
    }

    /// Adds a warning for [`DebugResolver::take_warnings`].
    pub fn warn(&mut self, warning: String) {
        self.warnings.push(warning);
    }

    /// The files symbolizing `path` as mapped with build ID `build_id` (hex, empty when the
    /// recording does not know it), or `None` when no file of that build is found.
    pub fn resolve(&mut self, path: &Path, build_id: &str) -> Option<DebugFiles> {
        let key = (path.to_owned(), build_id.to_owned());
        if let Some(found) = self.found.get(&key) {
            return found.clone();
        }
        let found = self.find(path, build_id);
        self.found.insert(key, found.clone());
        found
    }

    fn find(&mut self, path: &Path, recorded: &str) -> Option<DebugFiles> {
        let on_disk = ElfInfo::read(path);
        let (binary, info) = match on_disk {
            Some(info) if recorded.is_empty() || info.build_id == recorded => {
                (path.to_owned(), info)
            }
            on_disk => {
                if recorded.is_empty() {
                    return None;
                }
                let copy = self.binary_by_build_id(recorded);
                let outcome = match &copy {
                    Some((copy, _)) => format!("using {}", copy.display()),
                    None => "no file of the recorded build found, its frames stay unsymbolized"
                        .to_owned(),
                };
                // fltrace's own preloaded library changes with every fltrace build, and its
                // frames are never a call site (its faults are left out by library name): a
                // warning on every older recording would say nothing about the program.
                let own = fltrace_trace::libraries::is_preload(&path.to_string_lossy());
                if !own {
                    self.warnings.push(match on_disk {
                        Some(info) => format!(
                            "{}: build ID {} on disk, {recorded} when recorded: {outcome}",
                            path.display(),
                            if info.build_id.is_empty() {
                                "(none)"
                            } else {
                                &info.build_id
                            },
                        ),
                        None => format!(
                            "{} (build ID {recorded}) is gone: {outcome}",
                            path.display()
                        ),
                    });
                }
                copy?
            }
        };
        let debug = if info.has_dwarf {
            None
        } else {
            self.debug_file(path, &binary, &info)
        };
        Some(DebugFiles {
            binary,
            debug,
            build_id: info.build_id,
            segments: info.segments,
        })
    }

    /// A copy of the file of build `id`: in the archive, a `.build-id` tree, or debuginfod.
    fn binary_by_build_id(&mut self, id: &str) -> Option<(PathBuf, ElfInfo)> {
        let (head, rest) = split_build_id(id)?;
        let mut candidates: Vec<PathBuf> = Vec::new();
        if let Some(archive) = &self.config.archive {
            candidates.push(archive.join(id).join("executable"));
        }
        if let Some(cache) = &self.config.build_id_cache {
            candidates.push(cache.join(id).join("executable"));
        }
        for dir in &self.config.debug_dirs {
            // Fedora's layout: the binary beside its debug file, as a link.
            candidates.push(dir.join(".build-id").join(head).join(rest));
        }
        if let Some(cache) = &self.config.debuginfod_cache {
            candidates.push(cache.join(id).join("executable"));
        }
        let local = candidates.into_iter().find_map(|c| {
            ElfInfo::read(&c)
                .filter(|i| i.build_id == id)
                .map(|i| (c, i))
        });
        if let (Some((found, _)), Some(cache)) = (&local, &self.config.build_id_cache)
            && found.starts_with(cache)
        {
            // Used: the last to be pruned.
            fltrace_trace::BuildIdCache::at(cache).touch(id);
        }
        local.or_else(|| {
            let fetched = self.fetch(id, "executable")?;
            ElfInfo::read(&fetched)
                .filter(|i| i.build_id == id)
                .map(|i| (fetched, i))
        })
    }

    /// The separate debug file of `binary` (mapped as `path`), which has no DWARF itself.
    fn debug_file(&mut self, path: &Path, binary: &Path, info: &ElfInfo) -> Option<PathBuf> {
        let mut candidates: Vec<PathBuf> = Vec::new();
        let id = info.build_id.as_str();
        if let Some((head, rest)) = split_build_id(id) {
            if let Some(archive) = &self.config.archive {
                candidates.push(archive.join(id).join("debuginfo"));
            }
            for dir in &self.config.debug_dirs {
                candidates.push(
                    dir.join(".build-id")
                        .join(head)
                        .join(format!("{rest}.debug")),
                );
            }
        }
        if let Some(link) = &info.debuglink {
            let link = Path::new(OsStr::from_bytes(link));
            // Both the directory as mapped and its canonical form (`/lib` is often `/usr/lib`).
            let mut dirs: Vec<PathBuf> = Vec::new();
            for file in [path, binary] {
                if let Some(dir) = file.parent() {
                    dirs.push(dir.to_owned());
                    if let Ok(canonical) = dir.canonicalize() {
                        dirs.push(canonical);
                    }
                }
            }
            dirs.dedup();
            for dir in &dirs {
                candidates.push(dir.join(link));
                candidates.push(dir.join(".debug").join(link));
            }
            for root in &self.config.debug_dirs {
                for dir in &dirs {
                    let relative = dir.strip_prefix("/").unwrap_or(dir);
                    candidates.push(root.join(relative).join(link));
                }
            }
        }
        if let Some(cache) = &self.config.debuginfod_cache
            && !id.is_empty()
        {
            candidates.push(cache.join(id).join("debuginfo"));
        }
        let accept = |candidate: &Path| {
            candidate != binary
                && ElfInfo::read(candidate).is_some_and(|c| {
                    // A debug link names a file; only the build ID proves it is the right one.
                    (c.build_id == id || id.is_empty()) && (c.has_dwarf || c.has_symtab)
                })
        };
        if let Some(found) = candidates.into_iter().find(|c| accept(c)) {
            return Some(found);
        }
        if id.is_empty() {
            return None;
        }
        self.fetch(id, "debuginfo").filter(|f| accept(f))
    }

    /// Fetches `<url>/buildid/<id>/<kind>` from the first debuginfod server that has it, into
    /// the cache as elfutils lays it out.
    fn fetch(&mut self, id: &str, kind: &str) -> Option<PathBuf> {
        let cache = self.config.debuginfod_cache.clone()?;
        let urls = self.config.debuginfod_urls.clone();
        for url in urls {
            if self.unreachable.contains(&url) {
                continue;
            }
            let dir = cache.join(id);
            let target = dir.join(kind);
            let limits = Limits {
                timeout: self.config.timeout,
                max_time: self.config.max_time,
                max_size: self.config.max_size,
            };
            match http_get_to(&format!("{url}/buildid/{id}/{kind}"), &dir, &target, limits) {
                Ok(true) => return Some(target),
                Ok(false) => {}
                Err(err) => {
                    self.warnings.push(format!("debuginfod {url}: {err}"));
                    if matches!(err, FetchError::Io(_) | FetchError::Unsupported(_)) {
                        self.unreachable.push(url);
                    }
                }
            }
        }
        None
    }
}

/// `ab`, `cdef...` of build ID `abcdef...`; `None` for IDs too short to be real.
fn split_build_id(id: &str) -> Option<(&str, &str)> {
    (id.len() >= 8 && id.bytes().all(|b| b.is_ascii_hexdigit())).then(|| id.split_at(2))
}

/// What the search needs to know of an ELF file.
#[derive(Debug)]
struct ElfInfo {
    build_id: String,
    has_dwarf: bool,
    has_symtab: bool,
    debuglink: Option<Vec<u8>>,
    segments: Vec<(u64, u64, u64)>,
}

impl ElfInfo {
    /// Reads the headers of the ELF file at `path` (only the parts needed), `None` if it is
    /// not one.
    fn read(path: &Path) -> Option<ElfInfo> {
        let file = File::open(path).ok()?;
        if !file.metadata().ok()?.is_file() {
            return None;
        }
        let cache = ReadCache::new(file);
        let elf = object::File::parse(&cache).ok()?;
        let has_data = |name: &str| {
            elf.section_by_name(name)
                .and_then(|s| s.file_range())
                .is_some_and(|(_, size)| size > 0)
        };
        Some(ElfInfo {
            build_id: elf.build_id().ok().flatten().map(hex).unwrap_or_default(),
            has_dwarf: has_data(".debug_info") && has_data(".debug_line"),
            has_symtab: has_data(".symtab"),
            debuglink: elf.gnu_debuglink().ok().flatten().map(|(n, _)| n.to_vec()),
            segments: elf
                .segments()
                .map(|s| {
                    let (offset, size) = s.file_range();
                    (offset, s.address(), size)
                })
                .collect(),
        })
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Why a download failed.
#[derive(Debug)]
enum FetchError {
    Unsupported(String),
    Io(std::io::Error),
    Http(String),
}

impl std::fmt::Display for FetchError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            FetchError::Unsupported(what) => write!(f, "{what}"),
            FetchError::Io(err) => write!(f, "{err}"),
            FetchError::Http(what) => write!(f, "{what}"),
        }
    }
}

impl From<std::io::Error> for FetchError {
    fn from(err: std::io::Error) -> Self {
        FetchError::Io(err)
    }
}

/// What one download may take.
#[derive(Debug, Clone, Copy)]
struct Limits {
    /// Each connect and read.
    timeout: Duration,
    /// The whole transfer.
    max_time: Duration,
    /// Bytes of the body.
    max_size: u64,
}

/// A connection whose reads end at `deadline`: each waits at most `timeout`, and none
/// starts after it, so a server that sends a byte at a time cannot hold a download longer.
struct Bounded {
    stream: TcpStream,
    timeout: Duration,
    deadline: Instant,
}

impl Read for Bounded {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let left = self.deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(std::io::Error::other(PastDeadline));
        }
        self.stream.set_read_timeout(Some(left.min(self.timeout)))?;
        match self.stream.read(buf) {
            // A read cut short by the deadline is the deadline's error.
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) && Instant::now() >= self.deadline =>
            {
                Err(std::io::Error::other(PastDeadline))
            }
            result => result,
        }
    }
}

/// The error of a read after a download's deadline.
#[derive(Debug)]
struct PastDeadline;

impl std::fmt::Display for PastDeadline {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "took too long")
    }
}

impl std::error::Error for PastDeadline {}

/// A read error, unless the download passed its deadline: that is said with the limit.
fn read_error(url: &str, max_time: Duration) -> impl Fn(std::io::Error) -> FetchError + '_ {
    move |err| {
        if err.get_ref().is_some_and(|e| e.is::<PastDeadline>()) {
            FetchError::Http(format!(
                "{url}: took more than {} s (DEBUGINFOD_MAXTIME); not downloaded",
                max_time.as_secs()
            ))
        } else {
            FetchError::Io(err)
        }
    }
}

/// Reads one line of the status and headers, counting it against `left` bytes.
fn header_line(
    reader: &mut BufReader<Bounded>,
    left: &mut u64,
    url: &str,
    max_time: Duration,
) -> Result<String, FetchError> {
    let mut line = Vec::new();
    let n = reader
        .by_ref()
        .take(*left)
        .read_until(b'\n', &mut line)
        .map_err(read_error(url, max_time))?;
    *left -= n as u64;
    if n > 0 && line.last() != Some(&b'\n') && *left == 0 {
        return Err(FetchError::Http(format!(
            "{url}: headers longer than {MAX_HEADERS} bytes"
        )));
    }
    Ok(String::from_utf8_lossy(&line).into_owned())
}

/// Downloads `url` (plain `http://`) into `target` through a temporary file in `dir`.
/// `Ok(false)` when the server does not have it.
///
/// HTTP/1.0 keeps the client small (no chunked bodies, the server closes the connection);
/// every connect and read is bounded by the timeout, the whole transfer by `max_time`, the
/// headers by [`MAX_HEADERS`] and the body by `max_size`.
fn http_get_to(url: &str, dir: &Path, target: &Path, limits: Limits) -> Result<bool, FetchError> {
    let rest = url.strip_prefix("http://").ok_or_else(|| {
        FetchError::Unsupported(
            "only http:// servers are supported (fltrace has no TLS client)".into(),
        )
    })?;
    let (authority, path) = match rest.find('/') {
        Some(i) => rest.split_at(i),
        None => (rest, "/"),
    };
    let host_port = if authority.contains(':') {
        authority.to_owned()
    } else {
        format!("{authority}:80")
    };
    let addr = host_port
        .to_socket_addrs()?
        .next()
        .ok_or_else(|| FetchError::Http(format!("{authority}: no address")))?;
    let mut stream = TcpStream::connect_timeout(&addr, limits.timeout)?;
    stream.set_read_timeout(Some(limits.timeout))?;
    stream.set_write_timeout(Some(limits.timeout))?;
    write!(
        stream,
        "GET {path} HTTP/1.0\r\nHost: {authority}\r\nUser-Agent: fltrace\r\nAccept: */*\r\n\r\n"
    )?;
    let mut reader = BufReader::new(Bounded {
        stream,
        timeout: limits.timeout,
        deadline: Instant::now() + limits.max_time,
    });
    let mut header_bytes = MAX_HEADERS;
    let status = header_line(&mut reader, &mut header_bytes, url, limits.max_time)?;
    let code = status.split_whitespace().nth(1).unwrap_or("");
    let mut length: Option<u64> = None;
    loop {
        let header = header_line(&mut reader, &mut header_bytes, url, limits.max_time)?;
        if header.trim().is_empty() {
            break;
        }
        if let Some((name, value)) = header.split_once(':')
            && name.eq_ignore_ascii_case("content-length")
        {
            length = value.trim().parse().ok();
        }
    }
    match code {
        "200" => {}
        "404" => return Ok(false),
        _ => return Err(FetchError::Http(format!("{url}: {}", status.trim()))),
    }
    let too_large = || {
        FetchError::Http(format!(
            "{url}: larger than the {} bytes allowed (DEBUGINFOD_MAXSIZE); not downloaded",
            limits.max_size
        ))
    };
    if length.is_some_and(|l| l > limits.max_size) {
        return Err(too_large());
    }
    std::fs::create_dir_all(dir)?;
    let temp = dir.join(format!(".fltrace-{}.tmp", std::process::id()));
    let _ = std::fs::remove_file(&temp);
    let mut out = fltrace_trace::files::create_new(&temp).map_err(|e| match e {
        fltrace_trace::Error::Io { source, .. } => source,
        other => std::io::Error::other(other.to_string()),
    })?;
    // One byte past the cap tells a body that goes on from one that ends there.
    let copied = std::io::copy(&mut reader.by_ref().take(limits.max_size + 1), &mut out)
        .map_err(read_error(url, limits.max_time));
    let result = match copied {
        Ok(total) if total > limits.max_size => Err(too_large()),
        Ok(total) if length.is_none_or(|l| l == total) => {
            std::fs::rename(&temp, target)?;
            return Ok(true);
        }
        Ok(total) => Err(FetchError::Http(format!(
            "{url}: got {total} of {} bytes",
            length.unwrap_or(0)
        ))),
        Err(err) => Err(err),
    };
    let _ = std::fs::remove_file(&temp);
    result
}

#[cfg(test)]
mod tests {
    use super::*;
    use fltrace_trace::FileOffset;

    /// Build IDs split as `.build-id` trees name them; short or non-hex IDs are refused.
    /// A file rebuilt since the recording gets one warning, unless it is fltrace's own
    /// preloaded library, rebuilt with every fltrace (after an upgrade, every report of an
    /// older `record --allocs` warned about it).
    #[test]
    fn rebuilt_preload_library_is_not_warned_about() {
        let dir = tempfile::tempdir().expect("temp dir");
        // No debug roots, archive or servers: only the file itself could be of the build.
        let mut resolver = DebugResolver::new(DebugConfig::default());
        let elf = std::env::current_exe().expect("the test binary");
        for (name, warnings) in [("libfltrace_preload.so", 0), ("libprogram.so", 1)] {
            let copy = dir.path().join(name);
            std::fs::copy(&elf, &copy).expect("copy");
            assert!(resolver.resolve(&copy, "00112233445566778899").is_none());
            assert_eq!(resolver.take_warnings().len(), warnings, "{name}");
        }
    }

    #[test]
    fn build_id_paths() {
        assert_eq!(split_build_id("abcdef0123"), Some(("ab", "cdef0123")));
        assert_eq!(split_build_id("abc"), None);
        assert_eq!(split_build_id("../../etc"), None);
    }

    /// File offsets map to addresses through the segment that holds them.
    #[test]
    fn offsets_to_addresses() {
        let files = DebugFiles {
            binary: PathBuf::from("/x"),
            debug: None,
            build_id: String::new(),
            segments: vec![
                (0, 0, 0x618),
                (0x1000, 0x1000, 0x181),
                (0x2dd0, 0x3dd0, 0x248),
            ],
        };
        assert_eq!(files.address_of(FileOffset::new(0x1050)), Some(0x1050));
        assert_eq!(files.address_of(FileOffset::new(0x2de0)), Some(0x3de0));
        assert_eq!(files.address_of(FileOffset::new(0x1200)), None);
    }
}
