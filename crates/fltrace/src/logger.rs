//! Warnings of the library crates (the `log` facade) on stderr, as `fltrace: warning: ...`.

use std::io::Write;

struct Stderr;

impl log::Log for Stderr {
    fn enabled(&self, metadata: &log::Metadata) -> bool {
        metadata.level() <= log::Level::Warn
    }

    fn log(&self, record: &log::Record) {
        if self.enabled(record.metadata()) {
            let level = match record.level() {
                log::Level::Error => "error",
                _ => "warning",
            };
            let _ = writeln!(
                std::io::stderr().lock(),
                "fltrace: {level}: {}",
                record.args()
            );
        }
    }

    fn flush(&self) {}
}

/// Routes warnings and errors to stderr; quieter levels stay silent.
pub fn init() {
    static LOGGER: Stderr = Stderr;
    // Fails only if a logger is already set, which then prints them.
    if log::set_logger(&LOGGER).is_ok() {
        log::set_max_level(log::LevelFilter::Warn);
    }
}
