//! DWARF CFI unwinding of sampled user stacks with framehop, and the ELF files it needs.
//!
//! Each executable mapping becomes a framehop module whose unwind sections are read from the
//! mapped file ([`elf_cache`]: files are parsed once per recording and shared between
//! processes). The unwinder ([`unwinder`]) walks a sample's stack copy ([`stack_copy`]),
//! checks each caller or searches for it ([`caller_search`], by the calls [`calls`] decodes),
//! completes the stack from the thread's previous one ([`known_frames`]) or from the live
//! process ([`live_stack`]).

mod caller_search;
mod calls;
mod elf_cache;
mod known_frames;
mod live_stack;
mod stack_copy;
mod unwinder;

pub use elf_cache::{ElfCache, SectionBytes, VDSO, mapped_file};
pub use known_frames::KnownFrames;
pub use live_stack::LiveStack;
pub use stack_copy::{Holes, MAX_HOLES, StackBytes};
pub use unwinder::{AddressSpaceUnwinder, MAX_FRAMES, ThreadStack, UnwindEnd};

#[cfg(test)]
mod tests;
