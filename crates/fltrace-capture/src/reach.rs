//! Whether the far-memory runtime can enter a command before it runs: the runtime is a
//! preloaded library (`LD_PRELOAD`), which a statically linked program never loads and a
//! program the kernel runs set-user-ID or set-group-ID (secure execution) ignores.
//!
//! Only the command itself is judged here (through `#!` interpreters); what it runs later is
//! judged as it runs, from the mappings of each image (see `Process::unreached_images`). A
//! command run as another user (`--user`) also needs to read the library itself
//! ([`library_readable`]).

use std::ffi::{OsStr, OsString};
use std::io::Read as _;
use std::os::unix::ffi::OsStrExt as _;
use std::os::unix::fs::MetadataExt as _;
use std::path::{Path, PathBuf};

/// Why the runtime cannot enter a program.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Unreachable {
    /// An ELF executable without a program interpreter (`PT_INTERP`).
    #[error(
        "{} is statically linked (no program interpreter): far-memory emulation (-L/-M) enters a program as a preloaded library, which a static program never loads, so none of its memory would be under -L; link it dynamically (Go: CGO_ENABLED=1 go build -ldflags=-linkmode=external)",
        .0.display()
    )]
    Static(PathBuf),
    /// Set-user-ID or set-group-ID for another user or group than the command runs as.
    #[error(
        "{} is {which} for another {whose} than the command runs as: the kernel runs it in secure-execution mode, which ignores LD_PRELOAD, so far-memory emulation (-L/-M) could not enter it; run it as its owner (--user) or without -L/-M",
        .program.display()
    )]
    SetId {
        /// The program.
        program: PathBuf,
        /// `set-user-ID` or `set-group-ID`.
        which: &'static str,
        /// `user` or `group`.
        whose: &'static str,
    },
    /// The preloaded library cannot be read by the user the command runs as.
    #[error(
        "the command runs as uid {uid}, who cannot read fltrace's preloaded library {}: {why}, so the program would start without it; install fltrace where that user can read it, or point FLTRACE_RUNTIME at a copy of the library there",
        .library.display()
    )]
    LibraryUnreadable {
        /// The library.
        library: PathBuf,
        /// Whom the command runs as.
        uid: u32,
        /// What stops it: the directory it cannot search or the file it cannot read, with
        /// their mode and owner, else the error of opening it.
        why: String,
    },
}

/// Checks the command `program` (as given: a path, or a name looked up in `path_env`), run
/// with user id `uid` and group id `gid`. A program that cannot be found or read is not judged
/// here: starting it says why.
pub fn check(
    program: &OsStr,
    path_env: Option<&OsStr>,
    uid: u32,
    gid: u32,
) -> Result<(), Unreachable> {
    let mut program = program.to_owned();
    // A script's interpreter, and its interpreter's, a few levels deep as the kernel allows.
    for _ in 0..4 {
        let Some(path) = resolve(&program, path_env) else {
            return Ok(());
        };
        let Ok(metadata) = std::fs::metadata(&path) else {
            return Ok(());
        };
        let mode = metadata.mode();
        if mode & 0o4000 != 0 && metadata.uid() != uid {
            return Err(Unreachable::SetId {
                program: path,
                which: "set-user-ID",
                whose: "user",
            });
        }
        if mode & 0o2000 != 0 && mode & 0o010 != 0 && metadata.gid() != gid {
            return Err(Unreachable::SetId {
                program: path,
                which: "set-group-ID",
                whose: "group",
            });
        }
        let mut head = [0u8; 4096];
        let Ok(n) = std::fs::File::open(&path).and_then(|mut f| f.read(&mut head)) else {
            return Ok(());
        };
        let head = &head[..n];
        match interpreter(head, path_env) {
            Some(next) => program = next,
            None if is_static_elf(head, &path) => return Err(Unreachable::Static(path)),
            None => return Ok(()),
        }
    }
    Ok(())
}

/// Checks that `library` can be opened by user `uid` with group `gid` and no other groups, as
/// the dynamic loader will once the command has dropped to them: a library in a mode-0700
/// directory (a home, `mktemp -d`) would be skipped with a warning the program prints, and
/// nothing traced. The kernel answers (a child process takes those ids and opens the file:
/// symbolic links and access control lists count); the mode bits then name what stops it.
/// root reads all; a check that cannot run (no fork) leaves the answer to the loader.
pub fn library_readable(library: &Path, uid: u32, gid: u32) -> Result<(), Unreachable> {
    if uid == 0 {
        return Ok(());
    }
    let Ok(path) = std::ffi::CString::new(library.as_os_str().as_bytes()) else {
        return Ok(());
    };
    // Only a refusal of access is judged here: a library missing or broken is left to the
    // loader to report, as for root.
    match open_errno_as(&path, uid, gid) {
        Some(errno @ (libc::EACCES | libc::EPERM)) => Err(Unreachable::LibraryUnreadable {
            library: library.to_path_buf(),
            uid,
            why: blocker(library, uid, gid).unwrap_or_else(|| {
                format!(
                    "opening it fails ({})",
                    std::io::Error::from_raw_os_error(errno)
                )
            }),
        }),
        _ => Ok(()),
    }
}

/// The errno of opening `path` for reading as `uid`/`gid` with no other groups (0: it
/// opens), from a child process; `None` if the child could not run or take the ids.
fn open_errno_as(path: &std::ffi::CStr, uid: u32, gid: u32) -> Option<i32> {
    const NO_IDS: i32 = 255;
    // SAFETY: the child makes only system calls, then `_exit`s.
    let pid = unsafe { libc::fork() };
    if pid < 0 {
        return None;
    }
    if pid == 0 {
        // SAFETY: plain system calls on valid arguments; nothing returns from `_exit`.
        unsafe {
            // The same change of user as the command's child makes (`target.rs`).
            let user = crate::Credentials { uid, gid };
            let code = if !user.take_in_child() {
                NO_IDS
            } else if libc::open(path.as_ptr(), libc::O_RDONLY | libc::O_CLOEXEC) >= 0 {
                0
            } else {
                std::io::Error::last_os_error()
                    .raw_os_error()
                    .unwrap_or(libc::EACCES)
                    .clamp(1, NO_IDS - 1)
            };
            libc::_exit(code);
        }
    }
    let reaped = crate::os::reap(pid, true).ok()??;
    let code = reaped.status.code()?;
    (code != NO_IDS).then_some(code)
}

/// What the mode bits say stops `uid`/`gid` (no other groups) from reading `library`: the
/// first directory, from the root down, of the path as given and then as resolved, that the
/// user's class (owner, group, other) may not search, or the file it may not read.
fn blocker(library: &Path, uid: u32, gid: u32) -> Option<String> {
    let given = std::path::absolute(library).ok()?;
    let resolved = library.canonicalize().ok()?;
    let dirs = |path: &Path| -> Vec<PathBuf> {
        let mut dirs: Vec<PathBuf> = path.ancestors().skip(1).map(Path::to_path_buf).collect();
        dirs.reverse();
        dirs
    };
    let needed = dirs(&given)
        .into_iter()
        .chain(dirs(&resolved))
        .map(|dir| (dir, 0o1))
        .chain([(resolved.clone(), 0o4)]);
    for (path, bit) in needed {
        let metadata = std::fs::metadata(&path).ok()?;
        let mode = metadata.mode() & 0o7777;
        let shift = if metadata.uid() == uid {
            6
        } else if metadata.gid() == gid {
            3
        } else {
            0
        };
        if (mode >> shift) & bit == 0 {
            return Some(format!(
                "{} is mode {mode:o}, owned by uid {}",
                path.display(),
                metadata.uid()
            ));
        }
    }
    None
}

/// The file `program` names: itself if it has a slash, else the first executable file of that
/// name in `path_env`'s directories.
fn resolve(program: &OsStr, path_env: Option<&OsStr>) -> Option<PathBuf> {
    if program.as_bytes().contains(&b'/') {
        return Some(PathBuf::from(program));
    }
    std::env::split_paths(path_env?)
        .map(|dir| dir.join(program))
        .find(|candidate| {
            std::fs::metadata(candidate).is_ok_and(|m| m.is_file() && m.mode() & 0o111 != 0)
        })
}

/// The program a `#!` line runs (through `env` to the program it names), if `head` has one.
fn interpreter(head: &[u8], path_env: Option<&OsStr>) -> Option<OsString> {
    let line = head.strip_prefix(b"#!")?;
    let line = &line[..line.iter().position(|&b| b == b'\n').unwrap_or(line.len())];
    let mut words = line
        .split(|b| b.is_ascii_whitespace())
        .filter(|w| !w.is_empty());
    let first = OsStr::from_bytes(words.next()?);
    if Path::new(first).file_name() == Some(OsStr::new("env")) {
        // `env [-S] [VAR=value]... program`: the program is the first other word.
        let program = words.find(|w| !w.starts_with(b"-") && !w.contains(&b'='))?;
        return resolve(OsStr::from_bytes(program), path_env).map(PathBuf::into_os_string);
    }
    Some(first.to_owned())
}

/// Whether `head`, the start of the file at `path`, is an ELF executable without a program
/// interpreter. The program headers are read from the file where they lie beyond `head`.
fn is_static_elf(head: &[u8], path: &Path) -> bool {
    if head.len() < 64 || &head[..4] != b"\x7fELF" || head[5] != 1 {
        // Not ELF, or big-endian: not judged.
        return false;
    }
    let wide = head[4] == 2;
    let u16_at = |at: usize| u16::from_le_bytes([head[at], head[at + 1]]) as u64;
    let u32_at =
        |at: usize| u32::from_le_bytes([head[at], head[at + 1], head[at + 2], head[at + 3]]) as u64;
    let (phoff, phentsize, phnum) = if wide {
        (
            u32_at(0x20) | u32_at(0x24) << 32,
            u16_at(0x36),
            u16_at(0x38),
        )
    } else {
        (u32_at(0x1c), u16_at(0x2a), u16_at(0x2c))
    };
    let bytes = phentsize * phnum;
    if phentsize < 4 || bytes == 0 || bytes > 1 << 20 {
        return false;
    }
    let table = if phoff + bytes <= head.len() as u64 {
        head[phoff as usize..(phoff + bytes) as usize].to_vec()
    } else {
        let mut table = vec![0; bytes as usize];
        let read = std::fs::File::open(path).and_then(|file| {
            use std::os::unix::fs::FileExt as _;
            file.read_exact_at(&mut table, phoff)
        });
        if read.is_err() {
            return false;
        }
        table
    };
    const PT_INTERP: u32 = 3;
    !table
        .chunks_exact(phentsize as usize)
        .any(|entry| u32::from_le_bytes([entry[0], entry[1], entry[2], entry[3]]) == PT_INTERP)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn uid_gid() -> (u32, u32) {
        // SAFETY: getuid and getgid have no preconditions.
        unsafe { (libc::geteuid(), libc::getegid()) }
    }

    /// A library under a directory of mode 0700 is refused for another user, naming the
    /// outermost such directory; once the directories open, the file's own bits decide, by
    /// the user's class; a symbolic link through a closed directory is refused too.
    #[test]
    fn a_library_another_user_cannot_read_is_refused_naming_why() {
        use std::os::unix::fs::PermissionsExt as _;
        let set = |path: &Path, mode: u32| {
            std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).expect("chmod")
        };
        let top = tempfile::tempdir().expect("temp dir");
        set(top.path(), 0o755);
        let outer = top.path().join("outer");
        let private = outer.join("private");
        std::fs::create_dir_all(&private).expect("dirs");
        let library = private.join("libx.so");
        std::fs::write(&library, b"\x7fELF").expect("library");
        set(&outer, 0o711);
        set(&private, 0o700);
        set(&library, 0o644);
        let (owner, group) = uid_gid();
        let (stranger, strangers) = (owner + 4_000_001, group + 4_000_001);
        let why = |uid, gid| match library_readable(&library, uid, gid) {
            Ok(()) => None,
            Err(Unreachable::LibraryUnreadable { why, .. }) => Some(why),
            Err(other) => panic!("{other}"),
        };
        let private_closed = format!("{} is mode 700, owned by uid {owner}", private.display());
        assert_eq!(why(stranger, strangers), Some(private_closed.clone()));
        let refused = library_readable(&library, stranger, strangers).expect_err("refused");
        assert!(refused.to_string().starts_with(&format!(
            "the command runs as uid {stranger}, who cannot read fltrace's preloaded library {}: {private_closed}, so",
            library.display()
        )));
        // The outermost closed directory is the one named.
        set(&outer, 0o700);
        assert_eq!(
            why(stranger, strangers),
            Some(format!(
                "{} is mode 700, owned by uid {owner}",
                outer.display()
            ))
        );
        set(&outer, 0o711);
        // The group's bits, for a member of the directory's group only.
        set(&private, 0o710);
        assert_eq!(why(stranger, group), None);
        assert!(why(stranger, strangers).is_some());
        set(&private, 0o701);
        assert!(why(stranger, group).is_some(), "group bits, not other's");
        set(&private, 0o711);
        assert_eq!(why(stranger, strangers), None);
        // The file itself: unreadable by others.
        set(&library, 0o640);
        assert_eq!(
            why(stranger, strangers),
            Some(format!(
                "{} is mode 640, owned by uid {owner}",
                library.display()
            ))
        );
        assert_eq!(why(stranger, group), None);
        set(&library, 0o644);
        // A symbolic link to the library through a closed directory.
        let hidden = top.path().join("hidden");
        std::fs::create_dir(&hidden).expect("dir");
        let link = hidden.join("libx.so");
        std::os::unix::fs::symlink(&library, &link).expect("symlink");
        set(&hidden, 0o700);
        assert!(matches!(
            library_readable(&link, stranger, strangers),
            Err(Unreachable::LibraryUnreadable { why, .. }) if why.starts_with(&hidden.display().to_string())
        ));
        // A library that is not there is the loader's to report, not a refusal of access.
        assert_eq!(
            library_readable(&private.join("missing.so"), stranger, group),
            Ok(())
        );
        // root reads it; so does the directory's owner, by the owner's bits only.
        assert_eq!(library_readable(&library, 0, strangers), Ok(()));
        set(&private, 0o700);
        std::os::unix::fs::chown(&private, Some(stranger), None).expect("chown");
        assert_eq!(why(stranger, strangers), None);
        set(&private, 0o077);
        assert!(
            why(stranger, strangers).is_some(),
            "owner bits, not other's"
        );
    }

    /// A dynamically linked program passes; a static one is refused, also behind a `#!`
    /// line through env; a script of a dynamic interpreter passes.
    #[test]
    fn static_programs_are_refused_through_their_scripts() {
        let dir = tempfile::tempdir().expect("temp dir");
        let (uid, gid) = uid_gid();
        let path = std::env::var_os("PATH");
        assert_eq!(check(OsStr::new("sh"), path.as_deref(), uid, gid), Ok(()));
        let source = dir.path().join("s.c");
        std::fs::write(&source, "int main(void) { return 0; }\n").expect("source");
        let program = dir.path().join("static-prog");
        let built = std::process::Command::new("gcc")
            .args(["-static", "-o"])
            .arg(&program)
            .arg(&source)
            .status()
            .expect("gcc runs");
        assert!(built.success());
        assert_eq!(
            check(program.as_os_str(), path.as_deref(), uid, gid),
            Err(Unreachable::Static(program.clone()))
        );
        let script = dir.path().join("script");
        std::fs::write(&script, "#!/usr/bin/env static-prog\n").expect("script");
        let path_with_dir = std::env::join_paths(
            std::iter::once(dir.path().to_path_buf())
                .chain(std::env::split_paths(path.as_deref().unwrap_or_default())),
        )
        .expect("PATH");
        assert_eq!(
            check(script.as_os_str(), Some(&path_with_dir), uid, gid),
            Err(Unreachable::Static(program))
        );
        std::fs::write(&script, "#!/bin/sh\ntrue\n").expect("script");
        assert_eq!(check(script.as_os_str(), path.as_deref(), uid, gid), Ok(()));
        // Not found: starting it will say so.
        assert_eq!(
            check(OsStr::new("no-such-program-x"), path.as_deref(), uid, gid),
            Ok(())
        );
    }

    /// A program set-user-ID for another user than the command's is refused; for the same
    /// user it runs as any other.
    #[test]
    fn set_id_programs_of_other_users_are_refused() {
        let dir = tempfile::tempdir().expect("temp dir");
        let program = dir.path().join("suid");
        std::fs::copy("/bin/true", &program).expect("copy");
        use std::os::unix::fs::PermissionsExt as _;
        std::fs::set_permissions(&program, std::fs::Permissions::from_mode(0o4755)).expect("chmod");
        let (uid, gid) = uid_gid();
        assert_eq!(check(program.as_os_str(), None, uid, gid), Ok(()));
        assert_eq!(
            check(program.as_os_str(), None, uid + 1, gid),
            Err(Unreachable::SetId {
                program,
                which: "set-user-ID",
                whose: "user",
            })
        );
    }
}
