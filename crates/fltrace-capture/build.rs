//! Compiles the recorder's BPF object with clang (installed by scripts/setup.sh).

use std::path::PathBuf;
use std::process::Command;

fn main() {
    let source = "bpf/record.bpf.c";
    println!("cargo:rerun-if-changed={source}");
    println!("cargo:rerun-if-env-changed=CLANG");
    let out = PathBuf::from(std::env::var_os("OUT_DIR").expect("cargo sets OUT_DIR"));
    let object = out.join("record.bpf.o");
    let clang = std::env::var("CLANG").unwrap_or_else(|_| "clang".to_owned());
    let status = Command::new(&clang)
        .args([
            "-target", "bpf", "-O2", "-g", "-Wall", "-Werror", "-c", source, "-o",
        ])
        .arg(&object)
        .status();
    match status {
        Ok(s) if s.success() => {}
        Ok(s) => panic!("{clang} failed to compile {source} ({s})"),
        Err(e) => panic!(
            "cannot run {clang} ({e}): the recorder's BPF program is C compiled with clang; \
             run scripts/setup.sh or `apt-get install clang`"
        ),
    }
}
