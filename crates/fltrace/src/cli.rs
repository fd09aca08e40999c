//! The command line, as the original fltrace accepted it (`-L=140` and `-L 140` alike).

use std::ffi::OsString;
use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};

/// Which code touches which memory, when, and what it costs when memory is short.
#[derive(Debug, Parser)]
#[command(name = "fltrace", version, about)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run a command (or attach to a process) and record every page fault with its stack.
    Record(RecordArgs),
}

#[derive(Debug, Args)]
pub struct RecordArgs {
    /// Local memory limit in MB (far-memory emulation; accepted, not yet enforced).
    #[arg(short = 'L', long = "local-mem", value_name = "MB", value_parser = positive_mb)]
    pub local_mb: Option<u64>,
    /// Maximum memory in MB (far-memory emulation; accepted, not yet enforced).
    #[arg(short = 'M', long = "max-mem", value_name = "MB", value_parser = positive_mb)]
    pub max_mb: Option<u64>,
    /// Directory for the trace files.
    #[arg(short = 'o', long = "output", value_name = "DIR", default_value = ".")]
    pub dir: PathBuf,
    /// Attach to a running process instead of starting a command; stop with Ctrl-C.
    #[arg(
        short = 'p',
        long = "pid",
        value_name = "PID",
        conflicts_with = "command"
    )]
    pub pid: Option<i32>,
    /// Bytes of user stack copied with each fault for unwinding.
    #[arg(long, value_name = "BYTES", default_value_t = 16384, value_parser = clap::value_parser!(u32).range(64..=65528))]
    pub stack_size: u32,
    /// Ring buffer per CPU, in MiB.
    #[arg(long, value_name = "MB", default_value_t = 64, value_parser = clap::value_parser!(u64).range(1..=4096))]
    pub buffer_mb: u64,
    /// Run the command as this user (name or uid); by default the user who ran sudo, if any,
    /// when --drop-privileges is given.
    #[arg(long, value_name = "USER")]
    pub user: Option<String>,
    /// Run the command as the user who invoked sudo (SUDO_UID/SUDO_GID).
    #[arg(long)]
    pub drop_privileges: bool,
    /// No progress line.
    #[arg(short, long)]
    pub quiet: bool,
    /// The command to run and its arguments.
    #[arg(last = true, value_name = "COMMAND")]
    pub command: Vec<OsString>,
}

fn positive_mb(s: &str) -> Result<u64, String> {
    match s.parse::<u64>() {
        Ok(0) => Err("must be a positive number of MB".into()),
        Ok(v) => Ok(v),
        Err(_) => Err(format!("`{s}` is not a whole number of MB")),
    }
}
