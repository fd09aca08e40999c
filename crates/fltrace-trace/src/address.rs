//! The kinds of address a trace holds, each its own type so that one cannot stand for another:
//! a data address in the traced process ([`VirtAddr`]), an instruction address in its code
//! ([`CodeAddr`]), an offset into a mapped file ([`FileOffset`]) and a physical address
//! ([`PhysAddr`]).
//!
//! Each wraps the raw `u64` the kernel and the file formats use. They are made at the edges (a
//! Parquet column read, a perf sample, a `/proc` line) with `new` and turned back with `get`;
//! only the arithmetic that means something is defined: an address plus or minus a length is
//! an address, the difference of two addresses of one kind is a length.

use std::fmt;
use std::ops::{Add, AddAssign, Sub};

macro_rules! address {
    ($(#[$doc:meta])* $name:ident) => {
        $(#[$doc])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
        #[repr(transparent)]
        pub struct $name(u64);

        impl $name {
            /// Wraps a raw value of this kind.
            pub const fn new(raw: u64) -> Self {
                $name(raw)
            }

            /// The raw value.
            pub const fn get(self) -> u64 {
                self.0
            }

            /// Rounded down to a multiple of `align` (a power of two).
            pub const fn align_down(self, align: u64) -> Self {
                $name(self.0 & !(align - 1))
            }

            /// Rounded up to a multiple of `align` (a power of two), saturating at the top.
            pub const fn align_up(self, align: u64) -> Self {
                $name(self.0.saturating_add(align - 1) & !(align - 1))
            }

            /// `self - length`, or `None` below zero.
            pub const fn checked_sub(self, length: u64) -> Option<Self> {
                match self.0.checked_sub(length) {
                    Some(raw) => Some($name(raw)),
                    None => None,
                }
            }

            /// `self - length`, stopping at zero.
            pub const fn saturating_sub(self, length: u64) -> Self {
                $name(self.0.saturating_sub(length))
            }

            /// `self + length`, stopping at the top.
            pub const fn saturating_add(self, length: u64) -> Self {
                $name(self.0.saturating_add(length))
            }

            /// The length from `earlier` to `self`, zero when `earlier` is not before.
            pub const fn saturating_distance(self, earlier: Self) -> u64 {
                self.0.saturating_sub(earlier.0)
            }
        }

        /// An address moved forward by a length.
        impl Add<u64> for $name {
            type Output = $name;
            fn add(self, length: u64) -> $name {
                $name(self.0 + length)
            }
        }

        impl AddAssign<u64> for $name {
            fn add_assign(&mut self, length: u64) {
                self.0 += length;
            }
        }

        /// An address moved back by a length.
        impl Sub<u64> for $name {
            type Output = $name;
            fn sub(self, length: u64) -> $name {
                $name(self.0 - length)
            }
        }

        /// The length between two addresses of one kind.
        impl Sub<$name> for $name {
            type Output = u64;
            fn sub(self, earlier: $name) -> u64 {
                self.0 - earlier.0
            }
        }

        impl fmt::LowerHex for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                fmt::LowerHex::fmt(&self.0, f)
            }
        }

        impl fmt::UpperHex for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                fmt::UpperHex::fmt(&self.0, f)
            }
        }
    };
}

address!(
    /// A data address in the traced process's address space: a fault's address, a mapping's
    /// bounds, a block the allocator handed out.
    VirtAddr
);

address!(
    /// The address of an instruction in the traced process: a fault's instruction pointer, the
    /// frames of a stack (return addresses but for the innermost).
    CodeAddr
);

address!(
    /// An offset into a mapped file: where a mapping starts in its file, what the symbolizer
    /// looks up.
    FileOffset
);

address!(
    /// A physical address: DAMON's regions in the physical address space, page frames.
    PhysAddr
);

/// Where in the address space an instruction lies: every code address is also a virtual
/// address (the reverse is not true, so there is no conversion back).
impl From<CodeAddr> for VirtAddr {
    fn from(ip: CodeAddr) -> VirtAddr {
        VirtAddr(ip.0)
    }
}

impl CodeAddr {
    /// The offset in `mapping`'s file of this instruction, which `mapping` must contain.
    pub fn file_offset(self, mapping: &crate::Mapping) -> FileOffset {
        mapping.file_offset(VirtAddr::from(self))
    }
}

impl VirtAddr {
    /// The null pointer: what a failed allocation returns, what `free(NULL)` gives back.
    pub const NULL: VirtAddr = VirtAddr(0);

    /// Whether this is the null pointer.
    pub const fn is_null(self) -> bool {
        self.0 == 0
    }
}

impl PhysAddr {
    /// The page frame number of this address with pages of `page_size` bytes.
    pub const fn frame(self, page_size: u64) -> u64 {
        self.0 / page_size
    }

    /// The first address of page frame `frame` with pages of `page_size` bytes.
    pub const fn of_frame(frame: u64, page_size: u64) -> PhysAddr {
        PhysAddr(frame * page_size)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The arithmetic keeps kinds apart and computes as raw integers would.
    #[test]
    fn arithmetic_and_rounding() {
        let a = VirtAddr::new(0x1234);
        assert_eq!((a + 0x10).get(), 0x1244);
        assert_eq!(a - VirtAddr::new(0x1000), 0x234);
        assert_eq!(a.align_down(0x1000), VirtAddr::new(0x1000));
        assert_eq!(a.align_up(0x1000), VirtAddr::new(0x2000));
        assert_eq!(
            VirtAddr::new(0x2000).align_up(0x1000),
            VirtAddr::new(0x2000)
        );
        assert_eq!(VirtAddr::new(u64::MAX).align_up(0x1000).get(), !0xfff);
        assert_eq!(VirtAddr::new(3).checked_sub(4), None);
        assert_eq!(CodeAddr::new(0).saturating_sub(1), CodeAddr::new(0));
        assert_eq!(VirtAddr::new(5).saturating_distance(VirtAddr::new(9)), 0);
        assert_eq!(format!("{a:08x}|{a:#x}"), "00001234|0x1234");
        assert_eq!(PhysAddr::new(0x5432).frame(0x1000), 5);
        assert_eq!(PhysAddr::of_frame(5, 0x1000), PhysAddr::new(0x5000));
    }

    /// An instruction's file offset goes through its mapping's start and file offset.
    #[test]
    fn code_address_to_file_offset() {
        let mapping = crate::Mapping {
            start: VirtAddr::new(0x40_0000),
            end: VirtAddr::new(0x40_3000),
            pgoff: FileOffset::new(0x1000),
            ..crate::Mapping::default()
        };
        assert_eq!(
            CodeAddr::new(0x40_0123).file_offset(&mapping),
            FileOffset::new(0x1123)
        );
    }
}
