//! Compiles the recorder's BPF object with clang.

include!("bpf/clang.rs");

fn main() {
    println!("cargo:rerun-if-changed=bpf/clang.rs");
    compile_bpf("bpf/record.bpf.c", "record.bpf.o", "bpf");
}
