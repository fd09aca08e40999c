//! The trace readers as the crate exports them: the Parquet decoder asserts on some malformed
//! input (found by the fuzz test: `assertion failed: size <= src.len()` in its bit reader)
//! instead of returning an error, so each reader runs behind `catch_unwind` and a corrupt
//! file is an [`Error::Format`] naming it, never a crash of the program reading it.

use std::any::Any;
use std::panic::{AssertUnwindSafe, catch_unwind, resume_unwind};
use std::path::Path;

use crate::parquet_io;
use crate::{AccessRecord, AllocEvent, Error, Fault, Mapping, Metadata, Origin, Stack};

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

/// Reads a fault table and its metadata.
pub fn read_faults(path: &Path) -> Result<(Vec<Fault>, Metadata), Error> {
    guarded(path, || parquet_io::read_faults(path))
}

/// Reads a stack table (fault, allocation or access stacks).
pub fn read_stacks(path: &Path) -> Result<Vec<Stack>, Error> {
    guarded(path, || parquet_io::read_stacks(path))
}

/// Reads a mapping table.
pub fn read_mappings(path: &Path) -> Result<Vec<Mapping>, Error> {
    guarded(path, || parquet_io::read_mappings(path))
}

/// Reads an allocation table.
pub fn read_allocs(path: &Path) -> Result<Vec<AllocEvent>, Error> {
    guarded(path, || parquet_io::read_allocs(path))
}

/// Reads an access-sample table.
pub fn read_access(path: &Path) -> Result<Vec<AccessRecord>, Error> {
    guarded(path, || parquet_io::read_access(path))
}

/// Reads the recording and process a table belongs to, if it says.
pub fn read_origin(path: &Path) -> Result<Option<Origin>, Error> {
    guarded(path, || parquet_io::read_origin(path))
}

/// Calls `each` with the faults of each row group in turn. A panic of `each` itself goes on
/// as a panic; only the decoder's become errors.
pub fn for_each_fault_group(path: &Path, mut each: impl FnMut(&[Fault])) -> Result<(), Error> {
    let mut callback_panic = None;
    let result = guarded(path, || {
        parquet_io::for_each_fault_group(path, |faults| {
            if callback_panic.is_none()
                && let Err(panic) = catch_unwind(AssertUnwindSafe(|| each(faults)))
            {
                callback_panic = Some(panic);
            }
        })
    });
    if let Some(panic) = callback_panic {
        resume_unwind(panic);
    }
    result
}
