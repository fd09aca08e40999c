// Compiling a BPF object with clang (installed by scripts/setup.sh): shared by the build
// scripts of fltrace-capture and fltrace-system, which `include!` it.

/// Compiles `source` (relative to the crate) into `OUT_DIR/<object>`, with the shared header's
/// directory `include` on the include path.
fn compile_bpf(source: &str, object: &str, include: &str) {
    println!("cargo:rerun-if-changed={source}");
    println!("cargo:rerun-if-changed={include}/fltrace_bpf.h");
    println!("cargo:rerun-if-env-changed=CLANG");
    let out = std::path::PathBuf::from(std::env::var_os("OUT_DIR").expect("cargo sets OUT_DIR"));
    let clang = std::env::var("CLANG").unwrap_or_else(|_| "clang".to_owned());
    let status = std::process::Command::new(&clang)
        .args(["-target", "bpf", "-O2", "-g", "-Wall", "-Werror", "-I", include, "-c", source, "-o"])
        .arg(out.join(object))
        .status();
    match status {
        Ok(s) if s.success() => {}
        Ok(s) => panic!("{clang} failed to compile {source} ({s})"),
        Err(e) => panic!(
            "cannot run {clang} ({e}): fltrace's BPF programs are C compiled with clang; \
             run scripts/setup.sh or `apt-get install clang`"
        ),
    }
}
