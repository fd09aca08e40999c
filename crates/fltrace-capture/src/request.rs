//! What a recording is asked for, as plain values (`fltrace record`'s flags), and the rules
//! that decide which combinations can be recorded: a [`Request`] becomes the [`Target`] and
//! [`Options`] of [`record`](crate::record), or a [`RequestError`] saying why not.

use std::ffi::OsString;
use std::path::PathBuf;

use crate::{
    AllocTracing, Credentials, Error, EvictionPolicy, FarMemory, FaultPath, HeapBacking, Options,
    Target,
};

/// A recording as asked for.
#[derive(Debug, Clone)]
pub struct Request {
    /// Where the trace files go (`-o`).
    pub dir: PathBuf,
    /// Running processes to attach to (`-p PID,PID`), instead of a command.
    pub pids: Vec<i32>,
    /// With `pids`: attach to their existing descendants too (off: `--no-children`).
    pub children: bool,
    /// The command to start and its arguments.
    pub command: Vec<OsString>,
    /// Far memory: local memory in MiB (`-L`).
    pub local_mb: Option<u64>,
    /// Far memory: local plus far memory in MiB (`-M`).
    pub max_mb: Option<u64>,
    /// Far memory: the runtime's eviction policy (`--policy`).
    pub policy: EvictionPolicy,
    /// Far memory: userfaultfd handler threads (`-C`).
    pub handlers: u32,
    /// Far memory: handlers spin instead of blocking (`--busy-poll`).
    pub busy_poll: bool,
    /// Far memory: where faults are served (`--fault-path`); `None`: the runtime's default.
    pub fault_path: Option<FaultPath>,
    /// A fixed copy of this many bytes of user stack with each fault (`--stack-size`),
    /// rounded down to a multiple of 8, instead of the live stack.
    pub stack_bytes: Option<u32>,
    /// The most of the live stack copied with each fault (`--max-stack-copy`), bytes.
    pub stack_cap: Option<u32>,
    /// The kernel memory of all the rings, MiB (`--buffer-mb`); by default
    /// [`crate::DEFAULT_BUDGET_MB`] ([`crate::budget::plan_rings`]).
    pub buffer_mb: Option<usize>,
    /// Unwind only over the copied stack (`--exact-stacks`).
    pub exact_stacks: bool,
    /// Run the command as this user (`--user`).
    pub user: Option<String>,
    /// Run the command as the user who invoked sudo (`--drop-privileges`).
    pub drop_privileges: bool,
    /// Trace allocations (`--allocs`).
    pub allocs: bool,
    /// Sample memory accesses, this many per second (`--access-samples --freq`).
    pub access_samples: Option<u64>,
    /// Back the command's heap with files of this directory (`--backing-dir`).
    pub backing_dir: Option<PathBuf>,
}

/// What the machine offers that the rules depend on; each is asked only when a rule needs it.
pub trait Facilities {
    /// Whether the PMU samples memory accesses (Intel PEBS or AMD IBS op).
    fn access_sampling(&self) -> bool;
    /// Whether the kernel has uprobes.
    fn uprobes(&self) -> bool;
    /// The kernel's limit of samples per second, if it says.
    fn max_sample_rate(&self) -> Option<u64>;
    /// Memory available to a new program, MiB, if known.
    fn mem_available_mb(&self) -> Option<u64>;
    /// The preloaded library (far memory, allocation tracing, heap backing).
    fn preload_library(&self) -> Result<PathBuf, Error>;
    /// Whether unprivileged processes may handle kernel-mode faults with userfaultfd
    /// (`vm.unprivileged_userfaultfd`), if the kernel says.
    fn unprivileged_userfaultfd(&self) -> Option<bool>;
}

/// The machine fltrace runs on.
#[derive(Debug, Clone, Copy, Default)]
pub struct ThisMachine;

impl Facilities for ThisMachine {
    fn access_sampling(&self) -> bool {
        crate::access::availability() != crate::access::Availability::None
    }
    fn uprobes(&self) -> bool {
        crate::uprobes_available()
    }
    fn max_sample_rate(&self) -> Option<u64> {
        crate::perf_abi::max_sample_rate()
    }
    fn mem_available_mb(&self) -> Option<u64> {
        crate::runtime::mem_available_mb()
    }
    fn preload_library(&self) -> Result<PathBuf, Error> {
        crate::find_preload_library()
    }
    fn unprivileged_userfaultfd(&self) -> Option<bool> {
        let value: String = crate::procfs::sysctl("vm/unprivileged_userfaultfd")?;
        Some(value != "0")
    }
}

/// Why a request cannot be recorded.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RequestError {
    /// `--access-samples` on a machine without a PMU that samples accesses.
    #[error(
        "no hardware memory-access sampling on this machine: --access-samples needs Intel PEBS (mem-loads/mem-stores) or AMD IBS op, and neither is available"
    )]
    NoAccessSampling,
    /// `-L` above `-M`.
    #[error("-L ({local_mb} MiB) must not exceed -M ({max_mb} MiB)")]
    LocalAboveMax {
        /// `-L`, MiB.
        local_mb: u64,
        /// `-M`, MiB.
        max_mb: u64,
    },
    /// One of `-L` and `-M` without the other.
    #[error("-L and -M go together: give both or neither")]
    LocalMaxApart,
    /// Neither a command nor a process.
    #[error("no command given: fltrace record [OPTIONS] -- <command> [args...]")]
    NoCommand,
    /// The output directory is not there.
    #[error("output directory {} does not exist", .0.display())]
    NoOutputDir(PathBuf),
    /// Far memory asked for a process fltrace does not start.
    #[error("-L/-M apply to a command fltrace starts, not to a running process (-p)")]
    FarMemoryAttached,
    /// A sampling rate the kernel would refuse or throttle.
    #[error(
        "--freq {freq} is above this kernel's limit of {limit} samples per second (kernel.perf_event_max_sample_rate)"
    )]
    FreqAboveLimit {
        /// The rate asked for.
        freq: u64,
        /// `kernel.perf_event_max_sample_rate`.
        limit: u64,
    },
    /// Allocation tracing of a running process on a kernel without uprobes.
    #[error(
        "--allocs with -p needs uprobes on the running process's allocator, and this kernel has none (CONFIG_UPROBE_EVENTS); start the program under `fltrace record --allocs -- <command>` instead"
    )]
    NoUprobes,
    /// Heap backing and far memory at once.
    #[error("--backing-dir and -L/-M both serve the heap: give one of them")]
    BackingWithFarMemory,
    /// Heap backing asked for a process fltrace does not start.
    #[error("--backing-dir applies to a command fltrace starts, not to a running process (-p)")]
    BackingAttached,
    /// The backing directory is not there.
    #[error("backing directory {} does not exist", .0.display())]
    NoBackingDir(PathBuf),
    /// The backing directory's absolute path could not be found.
    #[error("resolving {}", .path.display())]
    ResolveBackingDir {
        /// The directory as given.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// Far memory for a command run unprivileged where the kernel lets such a process catch
    /// only user-mode faults: its system calls on evicted memory would fail with EFAULT.
    #[error(
        "-L/-M with the command run as uid {uid}: vm.unprivileged_userfaultfd=0 lets an unprivileged program's runtime catch only user-mode faults, so its system calls on evicted memory would fail (EFAULT); run `sysctl vm.unprivileged_userfaultfd=1` first, or leave out --user/--drop-privileges"
    )]
    UnprivilegedUserfaultfd {
        /// The user the command would run as.
        uid: u32,
    },
    /// Far memory for a program the runtime cannot enter (static, set-user-ID).
    #[error(transparent)]
    Unreachable(#[from] crate::reach::Unreachable),
    /// A setting the recorder refused (the preloaded library, far memory, the user).
    #[error(transparent)]
    Capture(#[from] Error),
}

impl Request {
    /// What to trace and how, or the first rule the request breaks (in a fixed order, so that
    /// the same request always gets the same answer).
    pub fn resolve(&self, machine: &impl Facilities) -> Result<(Target, Options), RequestError> {
        if self.access_samples.is_some() && !machine.access_sampling() {
            return Err(RequestError::NoAccessSampling);
        }
        let far_memory = match (self.local_mb, self.max_mb) {
            (Some(local_mb), Some(max_mb)) if local_mb > max_mb => {
                return Err(RequestError::LocalAboveMax { local_mb, max_mb });
            }
            (Some(_), None) | (None, Some(_)) => return Err(RequestError::LocalMaxApart),
            (Some(local_mb), Some(max_mb)) => Some(FarMemory {
                fault_path: self.fault_path,
                ..FarMemory::within(
                    machine.preload_library()?,
                    local_mb,
                    max_mb,
                    self.policy,
                    self.handlers,
                    self.busy_poll,
                    machine.mem_available_mb(),
                )?
            }),
            (None, None) => None,
        };
        let target = match (self.pids.is_empty(), self.command.is_empty()) {
            (false, _) => Target::Pids {
                pids: self.pids.clone(),
                children: self.children,
            },
            (true, false) => Target::Command(self.command.clone()),
            (true, true) => return Err(RequestError::NoCommand),
        };
        if !self.dir.is_dir() {
            return Err(RequestError::NoOutputDir(self.dir.clone()));
        }
        let mut options = Options::new(self.dir.clone());
        options.stack = match (self.stack_bytes, self.stack_cap) {
            (Some(bytes), _) => crate::StackCopy::Fixed(bytes & !7),
            (None, Some(cap)) => crate::StackCopy::Live { cap: cap & !7 },
            (None, None) => options.stack,
        };
        options.buffer_mb = self.buffer_mb.unwrap_or(crate::DEFAULT_BUDGET_MB);
        options.read_live_stacks = !self.exact_stacks;
        if far_memory.is_some() && !self.pids.is_empty() {
            return Err(RequestError::FarMemoryAttached);
        }
        options.far_memory = far_memory;
        if let Some(freq) = self.access_samples {
            // The kernel caps sampling rates; above the cap it would refuse or throttle.
            let limit = machine.max_sample_rate().unwrap_or(u64::MAX);
            if freq > limit {
                return Err(RequestError::FreqAboveLimit { freq, limit });
            }
        }
        options.access_samples = self.access_samples;
        if self.allocs {
            options.allocs = Some(if !self.pids.is_empty() {
                if !machine.uprobes() {
                    return Err(RequestError::NoUprobes);
                }
                AllocTracing::Uprobes
            } else {
                AllocTracing::Preload(machine.preload_library()?)
            });
        }
        if let Some(dir) = &self.backing_dir {
            if options.far_memory.is_some() {
                return Err(RequestError::BackingWithFarMemory);
            }
            if !self.pids.is_empty() {
                return Err(RequestError::BackingAttached);
            }
            if !dir.is_dir() {
                return Err(RequestError::NoBackingDir(dir.clone()));
            }
            options.heap_backing = Some(HeapBacking {
                library: machine.preload_library()?,
                dir: dir
                    .canonicalize()
                    .map_err(|source| RequestError::ResolveBackingDir {
                        path: dir.clone(),
                        source,
                    })?,
            });
        }
        options.credentials = match (&self.user, self.drop_privileges) {
            (Some(user), _) => Some(Credentials::of_user(user)?),
            (None, true) => Some(Credentials::of_sudo_user()?),
            (None, false) => None,
        };
        // The dynamic loader opens the preloaded library as the user the command runs as.
        if let Some(credentials) = options.credentials {
            let libraries = [
                options.far_memory.as_ref().map(|far| &far.library),
                match &options.allocs {
                    Some(AllocTracing::Preload(library)) => Some(library),
                    _ => None,
                },
                options
                    .heap_backing
                    .as_ref()
                    .map(|backing| &backing.library),
            ];
            for library in libraries.into_iter().flatten() {
                crate::reach::library_readable(library, credentials.uid, credentials.gid)?;
            }
        }
        // The runtime falls back to user-mode faults only (UFFD_USER_MODE_ONLY) where it may
        // not have more, and then a read(2) into an evicted page fails: refuse before the
        // program starts, rather than let it fail later for no reason it can tell.
        if let (Some(_), Some(credentials)) = (&options.far_memory, options.credentials)
            && credentials.uid != 0
            && machine.unprivileged_userfaultfd() == Some(false)
        {
            return Err(RequestError::UnprivilegedUserfaultfd {
                uid: credentials.uid,
            });
        }
        // A program the runtime cannot enter is refused before it runs: it would run with none
        // of its memory under -L, looking emulated.
        if options.far_memory.is_some()
            && let Target::Command(command) = &target
            && let Some(program) = command.first()
        {
            // SAFETY: geteuid and getegid have no preconditions.
            let own = unsafe { (libc::geteuid(), libc::getegid()) };
            let (uid, gid) = options.credentials.map_or(own, |c| (c.uid, c.gid));
            crate::reach::check(program, std::env::var_os("PATH").as_deref(), uid, gid)?;
        }
        Ok((target, options))
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;

    /// A machine whose facilities the test sets.
    struct Machine {
        access_sampling: bool,
        uprobes: bool,
        max_sample_rate: Option<u64>,
        mem_available_mb: Option<u64>,
        unprivileged_userfaultfd: Option<bool>,
    }

    impl Facilities for Machine {
        fn access_sampling(&self) -> bool {
            self.access_sampling
        }
        fn uprobes(&self) -> bool {
            self.uprobes
        }
        fn max_sample_rate(&self) -> Option<u64> {
            self.max_sample_rate
        }
        fn mem_available_mb(&self) -> Option<u64> {
            self.mem_available_mb
        }
        fn preload_library(&self) -> Result<PathBuf, Error> {
            Ok(PathBuf::from("/lib/fltrace/libfltrace_preload.so"))
        }
        fn unprivileged_userfaultfd(&self) -> Option<bool> {
            self.unprivileged_userfaultfd
        }
    }

    /// Everything there: PMU, uprobes, a limit of 10,000 samples/s, 4 GiB available.
    const FULL: Machine = Machine {
        access_sampling: true,
        uprobes: true,
        max_sample_rate: Some(10_000),
        mem_available_mb: Some(4096),
        unprivileged_userfaultfd: Some(false),
    };

    /// `fltrace record -o DIR -- true` with the flags' defaults.
    fn request(dir: &Path) -> Request {
        Request {
            dir: dir.to_path_buf(),
            pids: Vec::new(),
            children: true,
            command: vec!["true".into()],
            local_mb: None,
            max_mb: None,
            policy: EvictionPolicy::Fifo,
            handlers: 1,
            busy_poll: false,
            fault_path: None,
            stack_bytes: Some(2048),
            stack_cap: None,
            buffer_mb: None,
            exact_stacks: false,
            user: None,
            drop_privileges: false,
            allocs: false,
            access_samples: None,
            backing_dir: None,
        }
    }

    fn refusal(request: &Request, machine: &Machine) -> String {
        match request.resolve(machine) {
            Ok(_) => panic!("{request:?} accepted"),
            Err(e) => e.to_string(),
        }
    }

    #[test]
    fn local_and_max_go_together_and_local_fits() {
        let dir = tempfile::tempdir().unwrap();
        let mut r = request(dir.path());
        r.local_mb = Some(10);
        assert_eq!(
            refusal(&r, &FULL),
            "-L and -M go together: give both or neither"
        );
        r.local_mb = None;
        r.max_mb = Some(10);
        assert_eq!(
            refusal(&r, &FULL),
            "-L and -M go together: give both or neither"
        );
        r.local_mb = Some(20);
        assert_eq!(
            refusal(&r, &FULL),
            "-L (20 MiB) must not exceed -M (10 MiB)"
        );
        r.local_mb = Some(10);
        let (_, options) = r.resolve(&FULL).unwrap();
        let far = options.far_memory.unwrap();
        assert_eq!((far.local_mb, far.max_mb), (10, 10));
        assert_eq!(far.library, Path::new("/lib/fltrace/libfltrace_preload.so"));
        // The fault path asked for reaches the runtime's environment; none asked, none set.
        let path_in = |far: &FarMemory| {
            far.environment(Path::new("/dev/shm/x"))
                .into_iter()
                .find(|(name, _)| name == "FLTRACE_RT_FAULT_PATH")
                .map(|(_, value)| value)
        };
        assert_eq!(path_in(&far), None);
        r.fault_path = Some(FaultPath::InThread);
        let far = r.resolve(&FULL).unwrap().1.far_memory.unwrap();
        assert_eq!(path_in(&far), Some("signal".into()));
        r.fault_path = Some(FaultPath::Threads);
        let far = r.resolve(&FULL).unwrap().1.far_memory.unwrap();
        assert_eq!(path_in(&far), Some("thread".into()));
    }

    #[test]
    fn far_memory_fits_the_machine() {
        let dir = tempfile::tempdir().unwrap();
        let mut r = request(dir.path());
        (r.local_mb, r.max_mb) = (Some(10), Some(5000));
        assert_eq!(
            refusal(&r, &FULL),
            "-M 5000 MiB is more than the 4096 MiB of memory available: the program's far memory must fit in this machine's"
        );
    }

    #[test]
    fn far_memory_and_backing_dir_need_a_started_command() {
        let dir = tempfile::tempdir().unwrap();
        let mut r = request(dir.path());
        (r.pids, r.command) = (vec![1], Vec::new());
        (r.local_mb, r.max_mb) = (Some(10), Some(20));
        assert_eq!(
            refusal(&r, &FULL),
            "-L/-M apply to a command fltrace starts, not to a running process (-p)"
        );
        (r.local_mb, r.max_mb) = (None, None);
        r.backing_dir = Some(dir.path().to_path_buf());
        assert_eq!(
            refusal(&r, &FULL),
            "--backing-dir applies to a command fltrace starts, not to a running process (-p)"
        );
    }

    #[test]
    fn backing_dir_is_not_far_memory_and_exists() {
        let dir = tempfile::tempdir().unwrap();
        let mut r = request(dir.path());
        (r.local_mb, r.max_mb) = (Some(10), Some(20));
        r.backing_dir = Some(dir.path().to_path_buf());
        assert_eq!(
            refusal(&r, &FULL),
            "--backing-dir and -L/-M both serve the heap: give one of them"
        );
        (r.local_mb, r.max_mb) = (None, None);
        let missing = dir.path().join("missing");
        r.backing_dir = Some(missing.clone());
        assert_eq!(
            refusal(&r, &FULL),
            format!("backing directory {} does not exist", missing.display())
        );
        r.backing_dir = Some(dir.path().join("."));
        let (_, options) = r.resolve(&FULL).unwrap();
        let backing = options.heap_backing.unwrap();
        assert_eq!(backing.dir, dir.path().canonicalize().unwrap());
    }

    #[test]
    fn allocs_of_a_running_process_need_uprobes() {
        let dir = tempfile::tempdir().unwrap();
        let mut r = request(dir.path());
        (r.pids, r.command, r.allocs) = (vec![1], Vec::new(), true);
        let no_uprobes = Machine {
            uprobes: false,
            ..FULL
        };
        assert_eq!(
            refusal(&r, &no_uprobes),
            "--allocs with -p needs uprobes on the running process's allocator, and this kernel has none (CONFIG_UPROBE_EVENTS); start the program under `fltrace record --allocs -- <command>` instead"
        );
        let (target, options) = r.resolve(&FULL).unwrap();
        assert!(matches!(
            target,
            Target::Pids { ref pids, children: true } if pids == &[1]
        ));
        assert!(matches!(options.allocs, Some(AllocTracing::Uprobes)));
        // A started command is traced by the preloaded library, uprobes or not.
        (r.pids, r.command) = (Vec::new(), vec!["true".into()]);
        let (_, options) = r.resolve(&no_uprobes).unwrap();
        assert!(matches!(options.allocs, Some(AllocTracing::Preload(_))));
    }

    #[test]
    fn access_samples_need_a_pmu_and_a_rate_within_the_limit() {
        let dir = tempfile::tempdir().unwrap();
        let mut r = request(dir.path());
        r.access_samples = Some(10_001);
        let no_pmu = Machine {
            access_sampling: false,
            ..FULL
        };
        assert_eq!(
            refusal(&r, &no_pmu),
            "no hardware memory-access sampling on this machine: --access-samples needs Intel PEBS (mem-loads/mem-stores) or AMD IBS op, and neither is available"
        );
        assert_eq!(
            refusal(&r, &FULL),
            "--freq 10001 is above this kernel's limit of 10000 samples per second (kernel.perf_event_max_sample_rate)"
        );
        r.access_samples = Some(10_000);
        assert_eq!(r.resolve(&FULL).unwrap().1.access_samples, Some(10_000));
        // A kernel that states no limit takes any rate.
        let no_limit = Machine {
            max_sample_rate: None,
            ..FULL
        };
        r.access_samples = Some(1_000_000);
        assert!(r.resolve(&no_limit).is_ok());
    }

    #[test]
    fn a_command_or_a_process_and_an_output_directory() {
        let dir = tempfile::tempdir().unwrap();
        let mut r = request(dir.path());
        r.command.clear();
        assert_eq!(
            refusal(&r, &FULL),
            "no command given: fltrace record [OPTIONS] -- <command> [args...]"
        );
        let missing = dir.path().join("missing");
        let r = request(&missing);
        assert_eq!(
            refusal(&r, &FULL),
            format!("output directory {} does not exist", missing.display())
        );
    }

    /// The first rule broken answers, in the order the rules are listed.
    #[test]
    fn the_first_rule_broken_answers() {
        let missing = Path::new("/nonexistent/fltrace-request-test");
        let mut r = request(missing);
        r.command.clear();
        r.local_mb = Some(1);
        r.access_samples = Some(1);
        let no_pmu = Machine {
            access_sampling: false,
            ..FULL
        };
        assert!(refusal(&r, &no_pmu).starts_with("no hardware memory-access sampling"));
        assert_eq!(
            refusal(&r, &FULL),
            "-L and -M go together: give both or neither"
        );
        r.local_mb = None;
        assert!(refusal(&r, &FULL).starts_with("no command given"));
    }

    #[test]
    fn stack_bytes_round_down_to_whole_words() {
        let dir = tempfile::tempdir().unwrap();
        let mut r = request(dir.path());
        (r.stack_bytes, r.buffer_mb, r.exact_stacks) = (Some(1001), Some(8), true);
        let (target, options) = r.resolve(&FULL).unwrap();
        assert!(matches!(target, Target::Command(c) if c == ["true"]));
        assert_eq!(options.stack, crate::StackCopy::Fixed(1000));
        assert_eq!(options.buffer_mb, 8);
        // Without --stack-size, the live stack, bounded as asked, in the default budget.
        (r.stack_bytes, r.stack_cap, r.buffer_mb) = (None, Some(100_001), None);
        let (_, options) = r.resolve(&FULL).unwrap();
        assert_eq!(options.stack, crate::StackCopy::Live { cap: 100_000 });
        assert_eq!(options.buffer_mb, crate::DEFAULT_BUDGET_MB);
        assert!(!options.read_live_stacks);
        assert!(options.far_memory.is_none() && options.allocs.is_none());
        assert!(options.heap_backing.is_none() && options.credentials.is_none());
    }

    #[test]
    fn far_memory_as_another_user_needs_unprivileged_userfaultfd() {
        let dir = tempfile::tempdir().unwrap();
        let mut r = request(dir.path());
        (r.local_mb, r.max_mb, r.user) = (Some(10), Some(20), Some("65534".to_owned()));
        assert_eq!(
            refusal(&r, &FULL),
            "-L/-M with the command run as uid 65534: vm.unprivileged_userfaultfd=0 lets an unprivileged program's runtime catch only user-mode faults, so its system calls on evicted memory would fail (EFAULT); run `sysctl vm.unprivileged_userfaultfd=1` first, or leave out --user/--drop-privileges"
        );
        let allowed = Machine {
            unprivileged_userfaultfd: Some(true),
            ..FULL
        };
        assert!(r.resolve(&allowed).is_ok());
        // Root keeps every fault; without far memory nothing needs userfaultfd.
        r.user = Some("0".to_owned());
        assert!(r.resolve(&FULL).is_ok());
        (r.local_mb, r.max_mb, r.user) = (None, None, Some("65534".to_owned()));
        assert!(r.resolve(&FULL).is_ok());
    }
}
