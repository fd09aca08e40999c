//! Function names as people read them: demangled by the scheme their prefix shows, and
//! recognised as standard-library code.

use std::borrow::Cow;

/// `name` demangled by the scheme its prefix shows: Rust v0 (`_R`), Rust legacy
/// (`_ZN...17h<hash>E`, shown without the hash) or C++ Itanium (`_Z`). Anything else is a
/// plain (C) name and is returned as it is: a C++ demangler would read `f` as `float`.
pub fn demangle(name: &str) -> Cow<'_, str> {
    if (name.starts_with("_R") || is_rust_legacy(name))
        && let Ok(demangled) = rustc_demangle::try_demangle(name)
    {
        // `{:#}` leaves out the hash.
        return Cow::Owned(format!("{demangled:#}"));
    }
    if name.starts_with("_Z")
        && let Ok(symbol) = cpp_demangle::Symbol::new(name)
        && let Ok(demangled) = symbol.demangle()
    {
        return Cow::Owned(demangled);
    }
    Cow::Borrowed(name)
}

/// Whether `name` is a legacy Rust symbol: an Itanium nested name whose last component is
/// `h` and 16 hex digits (`17h0123456789abcdefE`), possibly followed by an LLVM suffix.
fn is_rust_legacy(name: &str) -> bool {
    let Some(inner) = name.strip_prefix("_ZN") else {
        return false;
    };
    let inner = inner.split('.').next().unwrap_or(inner);
    let Some(path) = inner.strip_suffix('E') else {
        return false;
    };
    path.len() > 19
        && path.is_char_boundary(path.len() - 19)
        && path[path.len() - 19..].starts_with("17h")
        && path[path.len() - 16..]
            .bytes()
            .all(|b| b.is_ascii_hexdigit())
}

/// Whether a demangled function name is standard-library code (Rust's `core`, `alloc` and
/// `std`, C++'s `std` and `__gnu_cxx`, the C start-up files): the program uses it rather than
/// writes it. For frames without a source file, which would otherwise tell.
pub fn is_std_function(name: &str) -> bool {
    // The C start-up and tear-down code the compiler links into every program (crt1.o,
    // crti.o, crtbegin.o): the outermost frames, not the program's.
    const CRT: [&str; 7] = [
        "_start",
        "_init",
        "_fini",
        "frame_dummy",
        "register_tm_clones",
        "deregister_tm_clones",
        "__do_global_dtors_aux",
    ];
    if CRT.contains(&name) {
        return true;
    }
    let name = name.strip_prefix('<').unwrap_or(name);
    ["std::", "core::", "alloc::", "__gnu_cxx::", "__rust_"]
        .iter()
        .any(|prefix| name.starts_with(prefix))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn demangles_by_scheme_only() {
        assert_eq!(demangle("f"), "f");
        assert_eq!(demangle("d"), "d");
        assert_eq!(demangle("St"), "St");
        assert_eq!(demangle("main"), "main");
        assert_eq!(
            demangle("_ZN2ns5Table4fillEm"),
            "ns::Table::fill(unsigned long)"
        );
        assert_eq!(
            demangle("_ZN5touch4fill17h0123456789abcdefE"),
            "touch::fill"
        );
        assert_eq!(
            demangle("_ZN5touch4fill17h0123456789abcdefE.llvm.1234"),
            "touch::fill"
        );
        assert_eq!(demangle("_RNvCs1234_5touch4fill"), "touch::fill");
        assert!(is_std_function("alloc::raw_vec::finish_grow"));
        assert!(is_std_function(
            "<alloc::vec::Vec<T> as core::clone::Clone>::clone"
        ));
        assert!(is_std_function(
            "std::vector<int, std::allocator<int> >::push_back(int)"
        ));
        assert!(!is_std_function("St"));
        assert!(is_std_function("_start"));
        assert!(!is_std_function("<touch::Page as core::fmt::Debug>::fmt"));
    }
}
