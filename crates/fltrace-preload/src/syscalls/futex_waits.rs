//! Waits on futexes in the program's memory (condition variables, semaphores, barriers,
//! read-write locks, timed mutexes): the kernel reads the futex word; glibc ends the program
//! when that read fails (`futex_fatal_error`).

use std::ffi::{c_int, c_void};

use super::{Buf, held_call, real, region_of};

/// Holds the objects of a wait.
fn with_objects<R>(objects: &[(*const c_void, usize)], call: impl FnOnce() -> R) -> R {
    let mut bufs = [Buf::read(std::ptr::null(), 0); 2];
    for (slot, &(addr, len)) in bufs.iter_mut().zip(objects) {
        // Written: the wait changes the object in user mode around the futex call, and a
        // write-protected page would fault the kernel's futex operations that write.
        *slot = Buf::written(addr.cast_mut(), len);
    }
    held_call(region_of(&bufs), &bufs, call)
}

macro_rules! wait_wrapper {
    ($name:ident, $cname:literal, ($($arg:ident: $ty:ty),*), [$($obj:ident),*]) => {
        /// # Safety
        /// C's function of this name.
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn $name($($arg: $ty),*) -> c_int {
            let Some(f) = real!($cname, unsafe extern "C" fn($($ty),*) -> c_int) else {
                return libc::ENOSYS;
            };
            // SAFETY: C's contract, passed on.
            with_objects(
                &[$(($obj as *const c_void, std::mem::size_of_val(unsafe { &*$obj }))),*],
                || unsafe { f($($arg),*) },
            )
        }
    };
}

wait_wrapper!(pthread_cond_wait, c"pthread_cond_wait",
    (cond: *mut libc::pthread_cond_t, mutex: *mut libc::pthread_mutex_t), [cond, mutex]);
wait_wrapper!(pthread_cond_timedwait, c"pthread_cond_timedwait",
    (cond: *mut libc::pthread_cond_t, mutex: *mut libc::pthread_mutex_t, at: *const libc::timespec),
    [cond, mutex]);
wait_wrapper!(pthread_cond_clockwait, c"pthread_cond_clockwait",
    (cond: *mut libc::pthread_cond_t, mutex: *mut libc::pthread_mutex_t, clock: libc::clockid_t,
     at: *const libc::timespec),
    [cond, mutex]);
wait_wrapper!(pthread_barrier_wait, c"pthread_barrier_wait",
    (barrier: *mut libc::pthread_barrier_t), [barrier]);
wait_wrapper!(pthread_rwlock_rdlock, c"pthread_rwlock_rdlock",
    (lock: *mut libc::pthread_rwlock_t), [lock]);
wait_wrapper!(pthread_rwlock_wrlock, c"pthread_rwlock_wrlock",
    (lock: *mut libc::pthread_rwlock_t), [lock]);
wait_wrapper!(pthread_rwlock_timedrdlock, c"pthread_rwlock_timedrdlock",
    (lock: *mut libc::pthread_rwlock_t, at: *const libc::timespec), [lock]);
wait_wrapper!(pthread_rwlock_timedwrlock, c"pthread_rwlock_timedwrlock",
    (lock: *mut libc::pthread_rwlock_t, at: *const libc::timespec), [lock]);
wait_wrapper!(pthread_mutex_timedlock, c"pthread_mutex_timedlock",
    (mutex: *mut libc::pthread_mutex_t, at: *const libc::timespec), [mutex]);
wait_wrapper!(sem_wait, c"sem_wait", (sem: *mut libc::sem_t), [sem]);
wait_wrapper!(sem_timedwait, c"sem_timedwait",
    (sem: *mut libc::sem_t, at: *const libc::timespec), [sem]);
