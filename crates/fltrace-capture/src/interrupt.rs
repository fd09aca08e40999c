//! Ctrl-C and its kin, counted: the recorder and the samplers finish their files either way.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use crate::Error;

/// Counts SIGINT, SIGTERM, SIGHUP (a closed terminal, a dropped ssh connection) and SIGQUIT,
/// handled alike: the recorder passes the first on (as SIGINT) and kills at the second, and
/// finishes the recording either way.
pub fn interrupt_counter() -> Result<Arc<AtomicUsize>, Error> {
    let stop = Arc::new(AtomicUsize::new(0));
    for signal in [
        signal_hook::consts::SIGINT,
        signal_hook::consts::SIGTERM,
        signal_hook::consts::SIGHUP,
        signal_hook::consts::SIGQUIT,
    ] {
        let stop = stop.clone();
        // SAFETY: the handler only increments an atomic, which is async-signal-safe.
        unsafe {
            signal_hook::low_level::register(signal, move || {
                stop.fetch_add(1, Ordering::Relaxed);
            })
        }
        .map_err(|source| Error::Kernel {
            what: "installing the interrupt handler",
            source,
            hint: "",
        })?;
    }
    Ok(stop)
}
