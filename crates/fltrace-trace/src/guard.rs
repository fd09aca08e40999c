//! The Parquet decoder asserts on some malformed input (found by the fuzz test: `assertion
//! failed: size <= src.len()` in its bit reader) instead of returning an error, so the table
//! reader opens files and decodes columns behind `catch_unwind`: a corrupt file is an
//! [`Error::Format`] naming it, never a crash of the program reading it.

use std::any::Any;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::Path;

use crate::Error;

pub(crate) fn guarded<T>(path: &Path, read: impl FnOnce() -> Result<T, Error>) -> Result<T, Error> {
    catch_unwind(AssertUnwindSafe(read)).unwrap_or_else(|panic| {
        Err(Error::Format {
            path: path.into(),
            message: format!(
                "corrupt data (the Parquet decoder stopped: {})",
                panic_text(panic.as_ref())
            ),
        })
    })
}

fn panic_text(panic: &(dyn Any + Send)) -> &str {
    panic
        .downcast_ref::<&str>()
        .copied()
        .or_else(|| panic.downcast_ref::<String>().map(String::as_str))
        .unwrap_or("a panic")
}
