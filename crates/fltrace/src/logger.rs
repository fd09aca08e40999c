//! Messages of the library crates (the `log` facade) on stderr, as `fltrace: warning: ...`:
//! warnings and errors always, information with `-v`, debugging detail with `-vv`.

use std::io::Write;

struct Stderr;

impl log::Log for Stderr {
    fn enabled(&self, metadata: &log::Metadata) -> bool {
        metadata.level() <= log::max_level()
    }

    fn log(&self, record: &log::Record) {
        if self.enabled(record.metadata()) {
            let level = match record.level() {
                log::Level::Error => "error",
                log::Level::Warn => "warning",
                log::Level::Info => "info",
                log::Level::Debug | log::Level::Trace => "debug",
            };
            // Not eprintln!, which panics when stderr is gone.
            let _ = writeln!(
                std::io::stderr().lock(),
                "fltrace: {level}: {}",
                record.args()
            );
        }
    }

    fn flush(&self) {}
}

/// The most verbose level shown for `verbosity` times `-v`.
fn level_filter(verbosity: u8) -> log::LevelFilter {
    match verbosity {
        0 => log::LevelFilter::Warn,
        1 => log::LevelFilter::Info,
        _ => log::LevelFilter::Debug,
    }
}

/// Routes the libraries' messages to stderr, as many levels as `verbosity` (`-v` count) asks.
pub fn init(verbosity: u8) {
    static LOGGER: Stderr = Stderr;
    // Fails only if a logger is already set, which then prints them.
    if log::set_logger(&LOGGER).is_ok() {
        log::set_max_level(level_filter(verbosity));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Quiet by default (warnings only), -v adds information, -vv and more debugging detail.
    #[test]
    fn each_v_shows_one_level_more() {
        assert_eq!(level_filter(0), log::LevelFilter::Warn);
        assert_eq!(level_filter(1), log::LevelFilter::Info);
        assert_eq!(level_filter(2), log::LevelFilter::Debug);
        assert_eq!(level_filter(9), log::LevelFilter::Debug);
    }
}
