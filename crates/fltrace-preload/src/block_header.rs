//! The header the library's two heaps (the far-memory one, `managed_malloc`, and the
//! file-backed one, `backed`) put right before every block they hand out: where the block's
//! allocation starts and how much of it is usable. Each heap tags `offset` with a magic value
//! of its own, so that a pointer is recognized as its own.

/// Bytes of the header before each block (and the blocks' least alignment).
pub(crate) const HEADER: usize = 16;

/// What precedes each block.
#[repr(C)]
pub(crate) struct Header {
    /// Bytes from the allocation's start to the pointer handed out, tagged with the heap's
    /// magic value.
    pub(crate) offset: usize,
    /// Bytes usable from the pointer.
    pub(crate) usable: usize,
}

/// The header of block `ptr`.
///
/// # Safety
/// `ptr` must be a live block of the heap that reads the header.
pub(crate) unsafe fn header(ptr: *mut u8) -> *mut Header {
    // SAFETY: every block has its header right before the pointer.
    unsafe { ptr.sub(HEADER).cast() }
}
