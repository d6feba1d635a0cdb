//! The stack a spawn's child runs on between `clone` and `execve`: one buffer in static memory, lent
//! to one clone at a time. On the spawning thread's stack it sat in a frame inlined into the request
//! dispatcher, so every request, even `/healthz`, probed and kept its pages resident (32 KiB of idle
//! RSS when it was 32 KiB); here only the page the child touches is resident.

use std::sync::{Mutex, MutexGuard, PoisonError};

/// Bytes of the child's stack. The child makes only raw system calls: it reached 176 bytes deep in
/// a release build and 1,048 in a debug build (stack filled with a pattern, every set-up path; the
/// `child_stack_depth_stays_far_below_its_size` test keeps measuring it).
pub(crate) const SIZE: usize = 8 * 1024;

static MEM: Mutex<[u8; SIZE]> = Mutex::new([0; SIZE]);

/// The deepest any child reached into its stack, in bytes (tests only: the stack is filled with a
/// pattern when lent and scanned when given back).
#[cfg(test)]
pub(crate) static DEEPEST: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

#[cfg(test)]
const PATTERN: u8 = 0xa5;

/// The stack, lent to one clone; hold it until the child has exec'd or exited.
pub(super) struct Lease(MutexGuard<'static, [u8; SIZE]>);

/// Takes the stack, waiting while another clone holds it.
pub(super) fn take() -> Lease {
    #[allow(unused_mut)] // filled with the pattern in tests only
    let mut stack = MEM.lock().unwrap_or_else(PoisonError::into_inner);
    #[cfg(test)]
    stack.fill(PATTERN);
    Lease(stack)
}

impl Lease {
    /// Where the child starts: the stack grows down, so its top, 16-byte aligned as the ABI wants.
    pub(super) fn top(&mut self) -> *mut libc::c_void {
        ((self.0.as_mut_ptr() as usize + SIZE) & !15) as *mut libc::c_void
    }
}

#[cfg(test)]
impl Drop for Lease {
    fn drop(&mut self) {
        let untouched = self.0.iter().take_while(|&&b| b == PATTERN).count();
        DEEPEST.fetch_max(SIZE - untouched, std::sync::atomic::Ordering::Relaxed);
    }
}
