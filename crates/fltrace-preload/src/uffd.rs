//! userfaultfd ABI (include/uapi/linux/userfaultfd.h) and one safe wrapper per ioctl.

use std::io;

const UFFDIO: u64 = 0xAA;

const fn iowr(nr: u64, size: u64) -> u64 {
    (3 << 30) | (size << 16) | (UFFDIO << 8) | nr
}

const fn ior(nr: u64, size: u64) -> u64 {
    (2 << 30) | (size << 16) | (UFFDIO << 8) | nr
}

const UFFD_API: u64 = 0xAA;
const UFFDIO_API: u64 = iowr(0x3F, 24);
const UFFDIO_REGISTER: u64 = iowr(0x00, 32);
const UFFDIO_UNREGISTER: u64 = ior(0x01, 16);
const UFFDIO_WAKE: u64 = ior(0x02, 16);
const UFFDIO_COPY: u64 = iowr(0x03, 40);
const UFFDIO_WRITEPROTECT: u64 = iowr(0x06, 24);
const UFFDIO_MOVE: u64 = iowr(0x05, 40);

/// Report write-protect faults.
pub const FEATURE_PAGEFAULT_FLAG_WP: u64 = 1 << 0;
/// `UFFDIO_MOVE` (Linux 6.8).
pub const FEATURE_MOVE: u64 = 1 << 16;
/// Faults raise SIGBUS in the faulting thread instead of waiting for a handler (Linux 4.14).
pub const FEATURE_SIGBUS: u64 = 1 << 7;
/// Report the faulting thread's id.
pub const FEATURE_THREAD_ID: u64 = 1 << 8;
/// Register for missing-page faults.
pub const REGISTER_MODE_MISSING: u64 = 1 << 0;
/// Register for write-protect faults.
pub const REGISTER_MODE_WP: u64 = 1 << 1;
/// `uffd_msg.event` of a page fault.
pub const EVENT_PAGEFAULT: u8 = 0x12;
/// Page-fault flag: the access was a write.
pub const PAGEFAULT_FLAG_WRITE: u64 = 1 << 0;
/// Page-fault flag: the page was write-protected.
pub const PAGEFAULT_FLAG_WP: u64 = 1 << 1;

/// `struct uffd_msg` for page-fault events (the other events are not enabled).
#[repr(C)]
#[derive(Clone, Copy, Default)]
pub struct Msg {
    /// `UFFD_EVENT_*`.
    pub event: u8,
    reserved1: u8,
    reserved2: u16,
    reserved3: u32,
    /// `UFFD_PAGEFAULT_FLAG_*`.
    pub flags: u64,
    /// The faulting address.
    pub address: u64,
    /// The faulting thread (with `FEATURE_THREAD_ID`).
    pub ptid: u32,
    reserved4: u32,
}

const _: () = assert!(std::mem::size_of::<Msg>() == 32);

#[repr(C)]
struct Api {
    api: u64,
    features: u64,
    ioctls: u64,
}

#[repr(C)]
struct Range {
    start: u64,
    len: u64,
}

#[repr(C)]
struct Register {
    range: Range,
    mode: u64,
    ioctls: u64,
}

#[repr(C)]
struct Copy {
    dst: u64,
    src: u64,
    len: u64,
    mode: u64,
    copy: i64,
}

#[repr(C)]
struct Move {
    dst: u64,
    src: u64,
    len: u64,
    mode: u64,
    moved: i64,
}

/// `UFFDIO_MOVE` mode: leave the threads waiting on the destination asleep.
pub const MOVE_MODE_DONTWAKE: u64 = 1 << 0;
/// `UFFDIO_MOVE` mode: skip source pages that are not there instead of failing.
pub const MOVE_MODE_ALLOW_SRC_HOLES: u64 = 1 << 1;

#[repr(C)]
struct WriteProtect {
    range: Range,
    mode: u64,
}

fn ioctl<T>(fd: i32, request: u64, arg: &mut T) -> io::Result<()> {
    // SAFETY: `arg` is the repr(C) struct the kernel expects for `request` (sizes are encoded
    // in the request number and match the structs above).
    let ret = unsafe { libc::ioctl(fd, request as libc::c_ulong, arg as *mut T) };
    if ret < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    }
}

/// Creates a userfaultfd. `user_only` limits it to faults from user mode, which unprivileged
/// processes may ask for when `vm.unprivileged_userfaultfd` is 0.
pub fn create(user_only: bool) -> io::Result<i32> {
    let flags = libc::O_CLOEXEC | if user_only { 1 } else { 0 };
    // SAFETY: userfaultfd takes flags and returns a descriptor or -1.
    let fd = unsafe { libc::syscall(libc::SYS_userfaultfd, flags) };
    if fd < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(fd as i32)
    }
}

/// The API handshake, asking for `features`.
pub fn api(fd: i32, features: u64) -> io::Result<()> {
    let mut api = Api {
        api: UFFD_API,
        features,
        ioctls: 0,
    };
    ioctl(fd, UFFDIO_API, &mut api)
}

/// Registers `[start, start + len)` with `mode`.
pub fn register(fd: i32, start: u64, len: u64, mode: u64) -> io::Result<()> {
    let mut reg = Register {
        range: Range { start, len },
        mode,
        ioctls: 0,
    };
    ioctl(fd, UFFDIO_REGISTER, &mut reg)
}

/// Unregisters `[start, start + len)`: its pages become the kernel's plain memory again, and
/// threads waiting on faults there are woken.
pub fn unregister(fd: i32, start: u64, len: u64) -> io::Result<()> {
    let mut range = Range { start, len };
    ioctl(fd, UFFDIO_UNREGISTER, &mut range)
}

/// Fills `[dst, dst + len)` from `src` only if it is missing: `Ok(false)`, with nothing
/// changed and nobody woken, when a page is there already.
pub fn copy_if_missing(fd: i32, dst: u64, src: u64, len: u64, wp: bool) -> io::Result<bool> {
    let mut copy = Copy {
        dst,
        src,
        len,
        mode: if wp { 1 << 1 } else { 0 },
        copy: 0,
    };
    match ioctl(fd, UFFDIO_COPY, &mut copy) {
        Ok(()) => Ok(true),
        Err(e) if e.raw_os_error() == Some(libc::EEXIST) => Ok(false),
        Err(e) => Err(e),
    }
}

/// Atomically fills a missing page at `dst` with the page at `src`, write-protected if `wp`,
/// and wakes the threads waiting on it. A page already present is not an error (EEXIST):
/// another path resolved it first.
pub fn copy(fd: i32, dst: u64, src: u64, len: u64, wp: bool) -> io::Result<()> {
    let mut copy = Copy {
        dst,
        src,
        len,
        mode: if wp { 1 << 1 } else { 0 },
        copy: 0,
    };
    match ioctl(fd, UFFDIO_COPY, &mut copy) {
        Err(e) if e.raw_os_error() == Some(libc::EEXIST) => wake(fd, dst, len),
        other => other,
    }
}

/// Moves the pages of `[src, src + len)` to `dst` (which must be in a registered range and
/// not present), remapping them without a copy, and wakes the threads waiting on `dst`.
/// Returns the bytes moved, which may be fewer than `len` with the error that stopped it
/// (`EBUSY`: a page shared with another process, `ENOENT`: a hole in the source, `EEXIST`: a
/// destination page already there).
pub fn move_pages(fd: i32, dst: u64, src: u64, len: u64, mode: u64) -> (u64, Option<io::Error>) {
    let mut arg = Move {
        dst,
        src,
        len,
        mode,
        moved: 0,
    };
    let (reported, error) = match ioctl(fd, UFFDIO_MOVE, &mut arg) {
        Ok(()) => return (len, None),
        // Partial progress: `moved` holds the bytes moved (EAGAIN), else the negated errno.
        Err(e) if arg.moved > 0 => (arg.moved as u64, e),
        Err(e) => (0, e),
    };
    // Linux 6.18 can report less than it moved when a move stops early (EAGAIN with pages
    // of the last batch moved but not counted): taken as unmoved, they would stay counted at
    // the source while they sit at the destination, where the next move finds them (EEXIST).
    // The pages that left the source for the destination count as moved.
    let moved = reported + moved_beyond(dst + reported, src + reported, len - reported);
    wake_uncounted(fd, dst, reported, moved, mode);
    if moved >= len {
        (len, None)
    } else {
        (moved, Some(error))
    }
}

/// Wakes the threads waiting on the pages a move to `dst` took without counting them
/// (`[dst + reported, dst + moved)`): the kernel wakes those of the pages it reported only
/// (none when it failed the call), so a thread faulting on such a page would sleep for good
/// on a page that is there (a fetch on the handler-thread path, where pages move).
fn wake_uncounted(fd: i32, dst: u64, reported: u64, moved: u64, mode: u64) {
    if moved > reported && mode & MOVE_MODE_DONTWAKE == 0 {
        let _ = wake(fd, dst + reported, moved - reported);
    }
}

/// Bytes of the leading pages of `[src, src + len)` that are no longer there and whose
/// counterparts at `dst` are: pages a move took without saying so.
fn moved_beyond(dst: u64, src: u64, len: u64) -> u64 {
    const PAGE: u64 = 4096;
    const CHUNK: usize = 64;
    let (mut at_dst, mut at_src) = ([0u8; CHUNK], [0u8; CHUNK]);
    let mut done = 0;
    while done < len {
        let pages = ((len - done) / PAGE).min(CHUNK as u64) as usize;
        if pages == 0 {
            break;
        }
        // SAFETY: mincore writes one byte per page into arrays of CHUNK bytes; both ranges
        // are mapped (the move's own).
        let ok = unsafe {
            libc::mincore(
                (dst + done) as *mut libc::c_void,
                pages * PAGE as usize,
                at_dst.as_mut_ptr(),
            ) == 0
                && libc::mincore(
                    (src + done) as *mut libc::c_void,
                    pages * PAGE as usize,
                    at_src.as_mut_ptr(),
                ) == 0
        };
        if !ok {
            break;
        }
        let taken = (0..pages)
            .take_while(|&i| at_dst[i] & 1 != 0 && at_src[i] & 1 == 0)
            .count();
        done += taken as u64 * PAGE;
        if taken < pages {
            break;
        }
    }
    done
}

/// Sets (`protect`) or clears write protection on a range; clearing wakes waiting threads.
pub fn write_protect(fd: i32, start: u64, len: u64, protect: bool) -> io::Result<()> {
    let mut wp = WriteProtect {
        range: Range { start, len },
        mode: u64::from(protect),
    };
    ioctl(fd, UFFDIO_WRITEPROTECT, &mut wp)
}

/// Clears write protection on a range and wakes the threads waiting there; when the kernel
/// refuses (`EAGAIN` while the address space changes, for one), it wakes them anyway: they
/// retry the access and fault again, instead of sleeping on a wake that never comes.
pub fn unprotect(fd: i32, start: u64, len: u64) -> io::Result<()> {
    let cleared = write_protect(fd, start, len, false);
    if cleared.is_err() {
        let _ = wake(fd, start, len);
    }
    cleared
}

/// Wakes threads waiting on faults in a range, to retry them.
pub fn wake(fd: i32, start: u64, len: u64) -> io::Result<()> {
    let mut range = Range { start, len };
    ioctl(fd, UFFDIO_WAKE, &mut range)
}

/// Threads waiting on faults of `fd` whose messages were read, from the kernel's
/// `/proc/self/fdinfo/<fd>` (`total:` counts every waiting thread, `pending:` those whose
/// message is unread). Read without allocating: the handler threads call it.
pub fn read_waiting(fd: i32) -> Option<u64> {
    const PREFIX: &[u8] = b"/proc/self/fdinfo/";
    let mut path = [0u8; PREFIX.len() + 21];
    let mut digits = [0u8; 20];
    let digits = crate::sys::decimal(u64::try_from(fd).ok()?, &mut digits);
    path[..PREFIX.len()].copy_from_slice(PREFIX);
    path[PREFIX.len()..PREFIX.len() + digits.len()].copy_from_slice(digits);
    let mut text = [0u8; 512];
    // SAFETY: a NUL-terminated path (the array's zeros end it).
    let file = unsafe { libc::open(path.as_ptr().cast(), libc::O_RDONLY | libc::O_CLOEXEC) };
    if file < 0 {
        return None;
    }
    // SAFETY: reading into our buffer, then closing our own descriptor.
    let n = unsafe { crate::sys::read(file, text.as_mut_ptr(), text.len()) };
    unsafe { libc::close(file) };
    let text = text.get(..usize::try_from(n).ok()?)?;
    let field = |name: &[u8]| {
        let line = text.split(|&b| b == b'\n').find(|l| l.starts_with(name))?;
        line[name.len()..]
            .iter()
            .filter(|b| b.is_ascii_digit())
            .try_fold(0u64, |n, &b| {
                n.checked_mul(10)?.checked_add(u64::from(b - b'0'))
            })
    };
    Some(field(b"total:")?.saturating_sub(field(b"pending:")?))
}

/// Wakes the threads of `[start, start + len)` left waiting on faults whose messages were
/// read, if there are any, and returns how many there were. Called by an idle handler: by
/// then every message read has been served, and a wake lost on some path would leave its
/// thread asleep for good (seen twice in one loaded run of the suite). A thread woken whose
/// page is not there yet faults again, with a new message.
pub fn wake_if_waiting(fd: i32, start: u64, len: u64) -> u64 {
    match read_waiting(fd) {
        Some(waiting) if waiting > 0 => {
            let _ = wake(fd, start, len);
            waiting
        }
        _ => 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const PAGE: usize = 4096;

    /// A thread waiting on a fault whose message was read and whose page was then placed
    /// without a wake: a lost wake, for the tests of what releases it.
    struct LostWake {
        fd: i32,
        page: usize,
        source: usize,
        reader: std::thread::JoinHandle<u8>,
    }

    impl LostWake {
        /// The page's bytes are `fill` once placed.
        fn new(fill: u8) -> LostWake {
            let fd = create(true).expect("a userfaultfd (root, or vm.unprivileged_userfaultfd)");
            api(fd, 0).expect("the API handshake");
            let (page, source) = (
                crate::sys::map_anonymous(PAGE, 0) as usize,
                crate::sys::map_anonymous(PAGE, 0) as usize,
            );
            assert!(page != 0 && source != 0, "two pages mapped");
            // SAFETY: the source page is ours and mapped.
            unsafe { (source as *mut u8).write_bytes(fill, PAGE) };
            register(fd, page as u64, PAGE as u64, REGISTER_MODE_MISSING).expect("registered");
            assert_eq!(read_waiting(fd), Some(0));
            // SAFETY: the page stays mapped until the thread is joined.
            let reader = std::thread::spawn(move || unsafe { (page as *const u8).read_volatile() });
            let mut msg = Msg::default();
            // SAFETY: reading one whole message into a value of its type (blocks until it
            // comes).
            let n =
                unsafe { crate::sys::read(fd, (&raw mut msg).cast(), std::mem::size_of::<Msg>()) };
            assert_eq!(n as usize, std::mem::size_of::<Msg>());
            assert_eq!((msg.event, msg.address), (EVENT_PAGEFAULT, page as u64));
            // Placed with DONTWAKE, as a path that forgot the wake would leave it.
            let mut placed = Copy {
                dst: page as u64,
                src: source as u64,
                len: PAGE as u64,
                mode: 1 << 0,
                copy: 0,
            };
            ioctl(fd, UFFDIO_COPY, &mut placed).expect("placed");
            assert_eq!(read_waiting(fd), Some(1));
            LostWake {
                fd,
                page,
                source,
                reader,
            }
        }

        /// What the reader read, once nothing waits any more (checked first: a join would
        /// hang on a thread left asleep).
        fn read(self) -> u8 {
            assert_eq!(read_waiting(self.fd), Some(0));
            let read = self.reader.join().expect("the reader ends");
            // SAFETY: closing our descriptor and unmapping our pages.
            unsafe {
                libc::close(self.fd);
                libc::munmap(self.page as *mut libc::c_void, PAGE);
                libc::munmap(self.source as *mut libc::c_void, PAGE);
            }
            read
        }
    }

    /// A thread whose fault was read and whose page was placed without a wake (a lost wake)
    /// is counted as waiting, woken, and reads the page; nothing waits afterwards.
    #[test]
    fn a_thread_left_waiting_is_counted_and_woken() {
        let lost = LostWake::new(7);
        let (fd, page) = (lost.fd, lost.page as u64);
        assert_eq!(wake_if_waiting(fd, page, PAGE as u64), 1);
        assert_eq!(wake_if_waiting(fd, page, PAGE as u64), 0);
        assert_eq!(lost.read(), 7);
    }

    /// A page a move took without counting it (placed here without a wake, as the kernel
    /// leaves it) has its waiting thread woken, unless the move asked for no wake.
    #[test]
    fn a_thread_waiting_on_a_page_moved_uncounted_is_woken() {
        let lost = LostWake::new(9);
        let (fd, page) = (lost.fd, lost.page as u64);
        // Counted by the kernel, or asked not to wake: nothing to do here.
        wake_uncounted(fd, page, PAGE as u64, PAGE as u64, 0);
        wake_uncounted(fd, page, 0, PAGE as u64, MOVE_MODE_DONTWAKE);
        assert_eq!(read_waiting(fd), Some(1));
        wake_uncounted(fd, page, 0, PAGE as u64, MOVE_MODE_ALLOW_SRC_HOLES);
        assert_eq!(lost.read(), 9);
    }

    /// A failed clearing of write protection still wakes the threads waiting on the range
    /// (here it fails because the range is registered without write protection).
    #[test]
    fn a_refused_unprotect_wakes_the_waiting_threads() {
        let lost = LostWake::new(5);
        assert!(unprotect(lost.fd, lost.page as u64, PAGE as u64).is_err());
        assert_eq!(lost.read(), 5);
    }

    /// The pages that left the source and sit at the destination count as moved, from the
    /// first one on and no further than the first that did not move.
    #[test]
    fn counts_pages_a_move_took_without_saying() {
        let map = |len| {
            // SAFETY: a fresh private anonymous mapping.
            let p = unsafe {
                libc::mmap(
                    std::ptr::null_mut(),
                    len,
                    libc::PROT_READ | libc::PROT_WRITE,
                    libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                    -1,
                    0,
                )
            };
            assert_ne!(p, libc::MAP_FAILED);
            p.cast::<u8>()
        };
        let (src, dst) = (map(8 * PAGE), map(8 * PAGE));
        // Pages 0-2 "moved" (at the destination, gone from the source), page 3 not (still at
        // the source), page 4 moved again: only the first three count.
        // SAFETY: writes within the two mappings.
        unsafe {
            for i in [0, 1, 2, 4] {
                *dst.add(i * PAGE) = 1;
            }
            *src.add(3 * PAGE) = 1;
        }
        let moved = moved_beyond(dst as u64, src as u64, 8 * PAGE as u64);
        assert_eq!(moved, 3 * PAGE as u64);
        // Nothing at the destination: nothing moved.
        assert_eq!(
            moved_beyond(src as u64 + 5 * PAGE as u64, dst as u64, PAGE as u64),
            0
        );
    }
}
