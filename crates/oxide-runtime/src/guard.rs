//! The host-access detector of the sanitizer (`OXIDE_SANITIZE=1`).
//!
//! On a discrete accelerator a device pointer is not a host address: host code
//! that dereferences one (a C++ extension reading `tensor.data_ptr()`, a library
//! handed a device pointer as if it were host memory) crashes there, while on a
//! device whose memory is host memory it silently works. With guarded device
//! memory ([`crate::memory`]) the device addresses stay inaccessible
//! (`PROT_NONE`) and only the runtime's kernels and copies reach the bytes,
//! through the host alias ([`crate::Runtime::host_address`]). Any other access
//! faults, and the `SIGSEGV` handler installed here recognises a fault inside a
//! device range and says so on stderr: the device address, read or write, and
//! the faulting instruction with the shared object and symbol `dladdr` finds
//! for it. It then hands the fault on to the handler that was there before
//! (Python's `faulthandler`, which prints the Python stack, or the default
//! action): the process still dies, as it would on the hardware, but with the
//! culprit named.
//!
//! Limits: only a dereference faults. Code that copies a device pointer's bytes
//! through the runtime is right and is not reported; code that merely compares
//! or prints addresses is not touched. A handler installed after this one that
//! does not chain to it hides the message (Python's `faulthandler` enabled after
//! the runtime starts still prints its stack, then ends the process).

use std::fmt::Write as _;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::OnceLock;

/// Device ranges the handler recognises (start, length), at most one per device.
const MAX_RANGES: usize = crate::config::MAX_DEVICE_COUNT;
static STARTS: [AtomicUsize; MAX_RANGES] = [const { AtomicUsize::new(0) }; MAX_RANGES];
static LENGTHS: [AtomicUsize; MAX_RANGES] = [const { AtomicUsize::new(0) }; MAX_RANGES];

/// The `SIGSEGV` action that was installed before ours.
static PREVIOUS: OnceLock<libc::sigaction> = OnceLock::new();

/// Installs the handler for the device ranges `(start, length)`, once per process.
pub(crate) fn install(ranges: &[(usize, usize)]) {
    for (k, &(start, len)) in ranges.iter().take(MAX_RANGES).enumerate() {
        STARTS[k].store(start, Ordering::Relaxed);
        LENGTHS[k].store(len, Ordering::Release);
    }
    PREVIOUS.get_or_init(|| {
        // SAFETY: sigaction with a zeroed struct we fill; the previous action is read back
        // into `old`, a plain C struct.
        unsafe {
            let mut ours: libc::sigaction = std::mem::zeroed();
            ours.sa_sigaction = on_fault as *const () as usize;
            ours.sa_flags = libc::SA_SIGINFO | libc::SA_ONSTACK | libc::SA_NODEFER;
            libc::sigemptyset(&mut ours.sa_mask);
            let mut old: libc::sigaction = std::mem::zeroed();
            libc::sigaction(libc::SIGSEGV, &ours, &mut old);
            old
        }
    });
}

/// The device and offset of `addr`, when it lies in a guarded device range.
fn device_of(addr: usize) -> Option<(usize, usize)> {
    (0..MAX_RANGES).find_map(|k| {
        let len = LENGTHS[k].load(Ordering::Acquire);
        let start = STARTS[k].load(Ordering::Relaxed);
        (len > 0 && addr >= start && addr - start < len).then(|| (k, addr - start))
    })
}

/// A fixed buffer for the report: the handler must not allocate.
struct Buffer {
    bytes: [u8; 1024],
    len: usize,
}

impl std::fmt::Write for Buffer {
    fn write_str(&mut self, s: &str) -> std::fmt::Result {
        let n = s.len().min(self.bytes.len() - self.len);
        self.bytes[self.len..self.len + n].copy_from_slice(&s.as_bytes()[..n]);
        self.len += n;
        Ok(())
    }
}

/// The faulting instruction and whether the access was a write, from the signal context.
///
/// # Safety
/// `ctx` is the `ucontext_t` the kernel passed to a `SA_SIGINFO` handler.
#[cfg(all(target_os = "linux", target_arch = "x86_64"))]
unsafe fn fault_site(ctx: *mut libc::c_void) -> (usize, Option<bool>) {
    // SAFETY: the caller's contract.
    let gregs = unsafe { &(*(ctx as *const libc::ucontext_t)).uc_mcontext.gregs };
    // Bit 1 of the page-fault error code is set for a write.
    (gregs[libc::REG_RIP as usize] as usize, Some(gregs[libc::REG_ERR as usize] & 2 != 0))
}

/// # Safety
/// `ctx` is the `ucontext_t` the kernel passed to a `SA_SIGINFO` handler.
#[cfg(all(target_os = "linux", target_arch = "aarch64"))]
unsafe fn fault_site(ctx: *mut libc::c_void) -> (usize, Option<bool>) {
    // SAFETY: the caller's contract.
    (unsafe { (*(ctx as *const libc::ucontext_t)).uc_mcontext.pc } as usize, None)
}

/// # Safety
/// No requirement: nothing is read on other targets.
#[cfg(not(all(target_os = "linux", any(target_arch = "x86_64", target_arch = "aarch64"))))]
unsafe fn fault_site(_ctx: *mut libc::c_void) -> (usize, Option<bool>) {
    (0, None)
}

/// Writes `pc`'s shared object and nearest symbol, as `dladdr` knows them.
fn describe_code(out: &mut Buffer, pc: usize) {
    if pc == 0 {
        return;
    }
    let _ = write!(out, " by the instruction at {pc:#x}");
    // SAFETY: dladdr only reads the loader's tables; `info` is a plain C struct it fills.
    let mut info: libc::Dl_info = unsafe { std::mem::zeroed() };
    // SAFETY: as above.
    if unsafe { libc::dladdr(pc as *const libc::c_void, &mut info) } == 0 {
        return;
    }
    let text = |p: *const libc::c_char| {
        // SAFETY: dladdr's strings are NUL-terminated and live as long as the object is loaded.
        (!p.is_null()).then(|| unsafe { std::ffi::CStr::from_ptr(p) }.to_str().unwrap_or("?"))
    };
    if let Some(file) = text(info.dli_fname) {
        let _ = write!(out, " in {file}");
    }
    if let Some(symbol) = text(info.dli_sname) {
        let _ = write!(out, " ({symbol}+{:#x})", pc.wrapping_sub(info.dli_saddr as usize));
    }
}

extern "C" fn on_fault(signal: libc::c_int, info: *mut libc::siginfo_t, ctx: *mut libc::c_void) {
    // SAFETY: the kernel passes a valid siginfo to a SA_SIGINFO handler; si_addr is meaningful
    // for a fault it raised (si_code > 0), not for a SIGSEGV sent with kill or raise.
    let (code, addr) = unsafe { ((*info).si_code, (*info).si_addr() as usize) };
    let Some(previous) = PREVIOUS.get() else { return };
    match (code > 0).then(|| device_of(addr)).flatten() {
        Some((device, offset)) => {
            // SAFETY: the same context the kernel passed in.
            let (pc, write) = unsafe { fault_site(ctx) };
            let mut out = Buffer { bytes: [0; 1024], len: 0 };
            let access = match write {
                Some(true) => "a write to",
                Some(false) => "a read of",
                None => "an access to",
            };
            let _ = write!(
                out,
                "\noxide sanitizer: host access to device memory: {access} oxide:{device} address {addr:#x} \
                 (offset {offset:#x} in the device's range)"
            );
            describe_code(&mut out, pc);
            let _ = write!(
                out,
                ".\nHost code dereferenced a device pointer (for example an oxide tensor's data_ptr()), which \
                 crashes on a real accelerator. Read device memory through oxide's operators and copies \
                 (tensor.cpu(), tensor.item()). The fault goes on to the previous handler.\n"
            );
            // SAFETY: write(2) is async-signal-safe and `out` holds `len` initialised bytes.
            unsafe { libc::write(2, out.bytes.as_ptr() as *const libc::c_void, out.len) };
            // Restore the previous action and return: the access repeats and faults again
            // into it (Python's faulthandler prints the stack; the default action ends the process).
            // SAFETY: reinstalling the action sigaction gave us at install time.
            unsafe { libc::sigaction(libc::SIGSEGV, previous, std::ptr::null_mut()) };
        }
        None => chain(previous, signal, info, ctx),
    }
}

/// Hands a fault that is not ours to the previous action.
fn chain(previous: &libc::sigaction, signal: libc::c_int, info: *mut libc::siginfo_t, ctx: *mut libc::c_void) {
    let handler = previous.sa_sigaction;
    if handler == libc::SIG_DFL || handler == libc::SIG_IGN {
        // SAFETY: reinstalling the previous action; returning repeats the fault into it.
        unsafe { libc::sigaction(libc::SIGSEGV, previous, std::ptr::null_mut()) };
    } else if previous.sa_flags & libc::SA_SIGINFO != 0 {
        // SAFETY: the previous handler is a SA_SIGINFO handler installed by the process.
        let f: extern "C" fn(libc::c_int, *mut libc::siginfo_t, *mut libc::c_void) =
            unsafe { std::mem::transmute(handler) };
        f(signal, info, ctx);
    } else {
        // SAFETY: the previous handler is a plain handler installed by the process.
        let f: extern "C" fn(libc::c_int) = unsafe { std::mem::transmute(handler) };
        f(signal);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_addresses_inside_a_guarded_range_are_recognised() {
        install(&[(0x1000_0000, 0x1000)]);
        assert_eq!(device_of(0x1000_0000), Some((0, 0)));
        assert_eq!(device_of(0x1000_0fff), Some((0, 0xfff)));
        assert_eq!(device_of(0x1000_1000), None);
        assert_eq!(device_of(0x0fff_ffff), None);
    }

    #[test]
    fn the_report_names_the_code() {
        let mut out = Buffer { bytes: [0; 1024], len: 0 };
        describe_code(&mut out, libc::write as *const () as usize + 1);
        let text = std::str::from_utf8(&out.bytes[..out.len]).unwrap();
        assert!(text.contains("libc") && text.contains("write"), "{text}");
    }
}
