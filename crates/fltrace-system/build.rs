//! Compiles the system tools' BPF object with clang (the build shared with fltrace-capture).

include!("../fltrace-capture/bpf/clang.rs");

fn main() {
    println!("cargo:rerun-if-changed=../fltrace-capture/bpf/clang.rs");
    compile_bpf(
        "bpf/fltrace.bpf.c",
        "fltrace.bpf.o",
        "../fltrace-capture/bpf",
    );
}
