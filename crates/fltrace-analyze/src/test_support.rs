//! Values the unit tests of several modules build alike.

use crate::Location;

/// A frame in the program's own `a.c`, not a system library.
pub(crate) fn loc(function: &str, line: u32) -> Location {
    Location {
        function: function.into(),
        file: "a.c".into(),
        line,
        lib: "a.out".into(),
        system: false,
    }
}
