//! Which shared libraries are the system's rather than the program's, by file name: the
//! recorder and the analysis agree on this without reading the files.

/// The file name of fltrace's own preloaded library (far-memory runtime, allocation tracer).
pub const PRELOAD: &str = "libfltrace_preload.so";

/// The last component of `path`.
fn file_name(path: &str) -> &str {
    path.rsplit('/').next().unwrap_or(path)
}

/// Whether `path` names fltrace's preloaded library, wherever it lives.
pub fn is_preload(path: &str) -> bool {
    file_name(path) == PRELOAD
}

/// Whether `path` is the C runtime: the C library and the dynamic loader (glibc, musl), and
/// the pieces older glibc split off (`libpthread`, `libdl`, `librt`).
pub fn is_c_runtime(path: &str) -> bool {
    let name = file_name(path);
    [
        "libc.so",
        "libc-",
        "ld-linux",
        "ld64.so",
        "ld-musl",
        "libpthread",
        "libdl.",
        "libdl-",
        "librt.",
    ]
    .iter()
    .any(|prefix| name.starts_with(prefix))
}

/// Whether `path` is a library every program of a language uses without writing it: the C
/// runtime, the math library, the C++ and Rust standard libraries, the compiler's support
/// libraries, the kernel's vDSO, fltrace's own preloaded library, and the malloc
/// replacements programs link instead of libc's allocator (jemalloc, as Debian's redis does;
/// tcmalloc, mimalloc): a fault in their `realloc` copy is the caller's as one in glibc's is.
/// Frames in them are call sites only when nothing else is on the stack.
pub fn is_system_library(path: &str) -> bool {
    let name = file_name(path);
    is_c_runtime(path)
        || is_preload(path)
        || path.starts_with('[')
        || [
            "libm.so",
            "libm-",
            "libmvec",
            "libstdc++",
            "libc++",
            "libgcc_s",
            "libatomic",
            "libunwind",
            "libstd-",
            "libjemalloc",
            "libtcmalloc",
            "libmimalloc",
        ]
        .iter()
        .any(|prefix| name.starts_with(prefix))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_system_libraries() {
        for system in [
            "/usr/lib/x86_64-linux-gnu/libc.so.6",
            "/lib64/ld-linux-x86-64.so.2",
            "/usr/lib/x86_64-linux-gnu/libstdc++.so.6.0.33",
            "/usr/lib/x86_64-linux-gnu/libgcc_s.so.1",
            "/usr/lib/x86_64-linux-gnu/libm.so.6",
            "/somewhere/target/debug/libfltrace_preload.so",
            "/usr/lib/x86_64-linux-gnu/libjemalloc.so.2",
            "/usr/lib/x86_64-linux-gnu/libtcmalloc_minimal.so.4",
            "/usr/lib/x86_64-linux-gnu/libmimalloc.so.2.0",
            "[vdso]",
        ] {
            assert!(is_system_library(system), "{system}");
        }
        for program in [
            "/usr/bin/sqlite3",
            "/usr/lib/x86_64-linux-gnu/libsqlite3.so.0.8.6",
            "/usr/lib/x86_64-linux-gnu/libpython3.11.so.1.0",
            "/tmp/build/libfault.so",
            "/tmp/libcrypto.so.3",
        ] {
            assert!(!is_system_library(program), "{program}");
        }
        assert!(is_c_runtime("/lib/x86_64-linux-gnu/libc.so.6"));
        assert!(!is_c_runtime("/usr/lib/libcrypto.so.3"));
        assert!(is_preload("libfltrace_preload.so"));
    }
}
