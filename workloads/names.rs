// Faults in a Rust function with a known path, built with legacy and with v0 symbol mangling
// and without debug info: its name must come out demangled, without the legacy hash.
use std::hint::black_box;

mod pages {
    #[inline(never)]
    pub fn fill(buf: &mut [u8]) {
        for i in (0..buf.len()).step_by(4096) {
            buf[i] = 1;
        }
    }
}

fn main() {
    const PAGES: usize = 30;
    let layout = std::alloc::Layout::from_size_align(PAGES * 4096, 4096).expect("layout");
    // SAFETY: a non-zero size; the memory is only written through the slice.
    let ptr = unsafe { std::alloc::alloc(layout) };
    assert!(!ptr.is_null());
    // SAFETY: `ptr` holds PAGES * 4096 bytes, allocated above.
    let buf = unsafe { std::slice::from_raw_parts_mut(ptr, PAGES * 4096) };
    pages::fill(black_box(buf));
}
