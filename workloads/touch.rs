// Rust workload: a release build (no frame pointers, as rustc makes them by default) that
// writes one byte per page of a fresh zeroed buffer. usage: touch_rs <pages>
#[inline(never)]
fn fill_pages(buf: *mut u8, len: usize) {
    for offset in (0..len).step_by(4096) {
        // SAFETY: `offset` is inside the allocation of `len` bytes made by `run`.
        unsafe { buf.add(offset).write_volatile(1) }; // SITE:rust_fill
    }
}

#[inline(never)]
fn run(pages: usize) -> usize {
    // A page-aligned allocation this large comes straight from mmap, untouched: each page's
    // first touch is in fill_pages (alloc_zeroed would memset it instead).
    let layout = std::alloc::Layout::from_size_align(pages * 4096, 4096).expect("layout");
    // SAFETY: the layout has a non-zero size.
    let buf = unsafe { std::alloc::alloc(layout) }; // SITE:rust_alloc
    assert!(!buf.is_null());
    fill_pages(buf, layout.size());
    // SAFETY: allocated above with this layout.
    unsafe { std::alloc::dealloc(buf, layout) };
    layout.size()
}

fn main() {
    let pages = std::env::args().nth(1).and_then(|a| a.parse().ok()).unwrap_or(1024);
    println!("{}", run(pages));
}
