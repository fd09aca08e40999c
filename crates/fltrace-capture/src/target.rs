//! Starting the traced command so that tracing is in place before its first instruction.
//!
//! `std::process::Command` cannot be used: its `spawn` waits for the exec, and the child must
//! instead wait for us to open the perf events on its pid. So: fork, let the child block on a
//! pipe, open the events (enabled on exec), release the child, and learn from a close-on-exec
//! pipe whether the exec worked.

use std::ffi::{CString, OsString};
use std::io;
use std::os::fd::{AsRawFd as _, OwnedFd};
use std::os::unix::ffi::{OsStrExt, OsStringExt};

use crate::Error;
use crate::os::{kill_and_reap, pipe_cloexec, reap};
use crate::process_group::CommandGroup;

/// Who the traced command runs as, when fltrace runs as root for a user.
#[derive(Debug, Clone, Copy)]
pub struct Credentials {
    /// User id.
    pub uid: u32,
    /// Group id.
    pub gid: u32,
}

impl Credentials {
    /// Makes the calling process this user, with no supplementary groups: the groups first,
    /// then the group, then the user (after which no id can change). Only system calls, for
    /// a forked child before it execs or exits. False when the kernel refused one (errno
    /// says why).
    ///
    /// # Safety
    /// Only in a child process between `fork` and `exec` or `_exit`: it changes the whole
    /// process's ids.
    pub(crate) unsafe fn take_in_child(self) -> bool {
        // SAFETY: plain system calls on valid arguments (the caller's contract).
        unsafe {
            libc::setgroups(0, std::ptr::null()) == 0
                && libc::setgid(self.gid) == 0
                && libc::setuid(self.uid) == 0
        }
    }
}

/// A forked child waiting to exec the command.
#[derive(Debug)]
pub struct PendingChild {
    pid: i32,
    /// A byte written here lets the child exec; closed without one, it exits.
    go_write: OwnedFd,
    /// The child's errno if its exec (or change of user) failed; closed by a good exec.
    error_read: OwnedFd,
    program: String,
}

impl PendingChild {
    /// Forks a child that will exec `argv` (searched in `PATH`) once released.
    ///
    /// The command is killed (SIGKILL) if fltrace dies before it ends: recording stops with
    /// fltrace, and a command left to run on untraced would have no one to report its exit
    /// status to, nor (under far-memory emulation or `--allocs`) the recorder it expects. A
    /// fltrace that ends by itself (SIGINT, SIGTERM, SIGHUP) waits for the command instead.
    /// The signal is armed by the forking thread: fltrace forks from its main thread.
    pub fn spawn(
        argv: &[OsString],
        credentials: Option<Credentials>,
        extra_env: &[(OsString, OsString)],
    ) -> Result<PendingChild, Error> {
        Self::spawn_with(argv, credentials, extra_env, false, None)
    }

    /// As [`PendingChild::spawn`], the command in a process group of its own whose every
    /// process is killed if fltrace dies: see [`CommandGroup`]. Not when fltrace runs in the
    /// foreground of a terminal: there the command stays in fltrace's job, which the terminal
    /// signals whole (Ctrl-C, hangup) and the shell controls whole (Ctrl-Z, `fg`). Except when
    /// `detached` names a file: the command then reads nothing (`/dev/null`), writes its output
    /// and errors to the end of that file, and has a group of its own wherever fltrace runs
    /// (a full-screen view holds the terminal and ends the command itself).
    pub fn spawn_in_own_group(
        argv: &[OsString],
        credentials: Option<Credentials>,
        extra_env: &[(OsString, OsString)],
        detached: Option<&std::path::Path>,
    ) -> Result<(PendingChild, Option<CommandGroup>), Error> {
        let stdio = match detached {
            Some(output) => Some(detached_stdio(output).map_err(|source| {
                Error::Spawn {
                    program: argv
                        .first()
                        .map(|p| p.to_string_lossy().into_owned())
                        .unwrap_or_default(),
                    source,
                }
            })?),
            None if crate::process_group::owns_terminal() => {
                return Ok((Self::spawn(argv, credentials, extra_env)?, None));
            }
            None => None,
        };
        let child = Self::spawn_with(argv, credentials, extra_env, true, stdio)?;
        match CommandGroup::watch(child.pid) {
            Ok(group) => Ok((child, Some(group))),
            Err(source) => {
                let program = child.program.clone();
                child.abort();
                Err(Error::Spawn { program, source })
            }
        }
    }

    /// `own_group`: whether the command gets a process group of its own; `stdio`: its
    /// standard input and its output (for standard output and error), else fltrace's.
    fn spawn_with(
        argv: &[OsString],
        credentials: Option<Credentials>,
        extra_env: &[(OsString, OsString)],
        own_group: bool,
        stdio: Option<[OwnedFd; 2]>,
    ) -> Result<PendingChild, Error> {
        let program = argv
            .first()
            .map(|p| p.to_string_lossy().into_owned())
            .ok_or_else(|| Error::Spawn {
                program: String::new(),
                source: io::Error::new(io::ErrorKind::InvalidInput, "no command given"),
            })?;
        let spawn_error = |source| Error::Spawn {
            program: program.clone(),
            source,
        };
        // Everything the child needs is allocated before fork: after it, only
        // async-signal-safe calls are allowed.
        let args: Vec<CString> = argv
            .iter()
            .map(|a| CString::new(a.as_bytes()))
            .collect::<Result<_, _>>()
            .map_err(|_| {
                spawn_error(io::Error::new(
                    io::ErrorKind::InvalidInput,
                    "argument contains a NUL byte",
                ))
            })?;
        let mut arg_ptrs: Vec<*const libc::c_char> = args.iter().map(|a| a.as_ptr()).collect();
        arg_ptrs.push(std::ptr::null());
        let environment: Vec<CString> = std::env::vars_os()
            .filter(|(key, _)| !extra_env.iter().any(|(k, _)| k == key))
            .chain(extra_env.iter().cloned())
            .filter_map(|(key, value)| {
                let mut entry = key.into_vec();
                entry.push(b'=');
                entry.extend(value.into_vec());
                CString::new(entry).ok()
            })
            .collect();
        let mut env_ptrs: Vec<*const libc::c_char> =
            environment.iter().map(|e| e.as_ptr()).collect();
        env_ptrs.push(std::ptr::null());
        let parent = rustix::process::getpid().as_raw_nonzero().get();
        let (go_read, go_write) = pipe_cloexec().map_err(spawn_error)?;
        let (error_read, error_write) = pipe_cloexec().map_err(spawn_error)?;
        let (go_read_fd, error_write_fd) = (go_read.as_raw_fd(), error_write.as_raw_fd());
        let stdio_fds = stdio
            .as_ref()
            .map(|[input, output]| (input.as_raw_fd(), output.as_raw_fd()));

        // libc from fork to exec: rustix has no safe fork, and no execvpe.
        // SAFETY: fork has no preconditions; the child below only calls async-signal-safe
        // functions (read, write, setgid, setuid, execvpe, _exit) on data prepared above.
        let pid = unsafe { libc::fork() };
        if pid < 0 {
            return Err(spawn_error(io::Error::last_os_error()));
        }
        if pid == 0 {
            // SAFETY: in the child, on descriptors and buffers that stay valid until exec.
            unsafe {
                if own_group {
                    libc::setpgid(0, 0);
                }
                // dup2 clears close-on-exec on the copies: the command keeps them.
                if let Some((input, output)) = stdio_fds
                    && (libc::dup2(input, 0) < 0
                        || libc::dup2(output, 1) < 0
                        || libc::dup2(output, 2) < 0)
                {
                    libc::_exit(127);
                }
                let mut byte = 0u8;
                let released = libc::read(go_read_fd, (&mut byte as *mut u8).cast(), 1) == 1;
                if !released {
                    libc::_exit(127);
                }
                if let Some(c) = credentials
                    && !c.take_in_child()
                {
                    let errno = *libc::__errno_location();
                    libc::write(error_write_fd, (&errno as *const i32).cast(), 4);
                    libc::_exit(127);
                }
                // After the change of user, which clears the parent-death signal. Should
                // fltrace have died already, the signal would never come: end here.
                if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0
                    || libc::getppid() != parent
                {
                    libc::_exit(127);
                }
                libc::execvpe(arg_ptrs[0], arg_ptrs.as_ptr(), env_ptrs.as_ptr());
                let errno = *libc::__errno_location();
                libc::write(error_write_fd, (&errno as *const i32).cast(), 4);
                libc::_exit(127);
            }
        }
        drop((go_read, error_write, stdio));
        if own_group {
            // Also here, so that the group exists when this returns, whoever runs first. A
            // failure means the child did it first (or is gone, which release reports).
            let child = crate::os::as_pid(pid);
            let _ = rustix::process::setpgid(child, child);
        }
        Ok(PendingChild {
            pid,
            go_write,
            error_read,
            program,
        })
    }

    /// The child's pid.
    pub fn pid(&self) -> i32 {
        self.pid
    }

    /// Lets the child exec; returns once the exec has happened, or the reason it failed.
    pub fn release(self) -> Result<i32, Error> {
        let PendingChild {
            pid,
            go_write,
            error_read,
            program,
        } = self;
        // A child gone already cannot read it: the read below then finds no errno.
        let _ = rustix::io::write(&go_write, &[1]);
        drop(go_write);
        let mut errno = [0u8; 4];
        let n = read_fully(&error_read, &mut errno);
        drop(error_read);
        if n == 4 {
            // The child exits right after reporting; an error would mean it is reaped.
            let _ = reap(pid, true);
            return Err(Error::Spawn {
                program,
                source: io::Error::from_raw_os_error(i32::from_ne_bytes(errno)),
            });
        }
        Ok(pid)
    }

    /// Kills the child before it runs anything (when setting up tracing failed).
    pub fn abort(self) {
        // Killed, not left to see the go pipe close: the child holds a copy of the pipe's
        // write end itself, so its read would never end and the wait would wait for ever.
        kill_and_reap(self.pid);
    }
}

/// Reads into `buf` until it is full or the pipe ends (interruptions retried): the bytes read.
fn read_fully(fd: &OwnedFd, buf: &mut [u8]) -> usize {
    let mut filled = 0;
    while filled < buf.len() {
        match rustix::io::read(fd, &mut buf[filled..]) {
            Ok(0) => break,
            Ok(n) => filled += n,
            Err(rustix::io::Errno::INTR) => continue,
            Err(_) => break,
        }
    }
    filled
}

/// `/dev/null` to read and `output` to append to (created if need be, never through a
/// symbolic link), both closed on exec: the child's copies are made with dup2.
fn detached_stdio(output: &std::path::Path) -> io::Result<[OwnedFd; 2]> {
    use std::os::unix::fs::OpenOptionsExt as _;
    let input = std::fs::File::open("/dev/null")?;
    let output = std::fs::OpenOptions::new()
        .append(true)
        .create(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(output)?;
    Ok([input.into(), output.into()])
}
