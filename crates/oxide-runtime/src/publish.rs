//! Live memory counters of this process for other processes: what `nvidia-smi`
//! shows for CUDA. Device memory is process-local here (each process reserves
//! its own ranges), so another process can only learn it from what this one
//! publishes: a small file in shared memory (`/dev/shm/torch-oxide-<pid>.mem`,
//! or the temporary directory), mapped and updated with relaxed atomic stores
//! whenever the caching allocator's counters change, and removed at exit.
//! `python -m torch_oxide` reads every such file.
//!
//! Layout (native endianness, 64-bit words): a [`Header`], then one
//! [`DeviceCounters`] per device. A process ended by SIGTERM (how
//! `multiprocessing` and torchrun stop workers) removes its file in a signal
//! handler, installed where SIGTERM still has its default action, before dying of
//! the signal as it would have. A process killed outright (SIGKILL) leaves its file
//! behind: readers skip a file whose pid no longer runs, and every process that
//! publishes removes such files first.

use std::fs::OpenOptions;
use std::os::fd::AsRawFd;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;

use crate::allocator::DeviceStats;

/// "OXIDEMEM" as a little-endian word.
pub const MAGIC: u64 = u64::from_le_bytes(*b"OXIDEMEM");
/// Bumped when the layout changes.
pub const VERSION: u64 = 1;

#[repr(C)]
struct Header {
    magic: AtomicU64,
    version: AtomicU64,
    pid: AtomicU64,
    devices: AtomicU64,
}

#[repr(C)]
struct DeviceCounters {
    capacity: AtomicU64,
    allocated: AtomicU64,
    reserved: AtomicU64,
    peak_allocated: AtomicU64,
}

/// The mapped file of this process.
pub struct Published {
    path: PathBuf,
    header: &'static Header,
    devices: &'static [DeviceCounters],
}

static PATH: OnceLock<PathBuf> = OnceLock::new();

/// The directory the files live in: `OXIDE_SHM_DIR`, else `/dev/shm` where it
/// exists, else the temporary directory.
pub fn directory() -> PathBuf {
    if let Some(d) = std::env::var_os("OXIDE_SHM_DIR") {
        return d.into();
    }
    let shm = PathBuf::from("/dev/shm");
    if shm.is_dir() {
        shm
    } else {
        std::env::temp_dir()
    }
}

impl Published {
    /// Creates and maps this process's file for devices of `capacities`;
    /// `None` when it cannot (no writable directory): publishing is a
    /// convenience, never a reason for the runtime to fail.
    pub fn create(capacities: &[usize]) -> Option<Published> {
        let dir = directory();
        remove_stale(&dir);
        let path = dir.join(format!("torch-oxide-{}.mem", std::process::id()));
        let published = Published::create_at(path.clone(), capacities)?;
        if let Ok(c) = std::ffi::CString::new(path.as_os_str().as_encoded_bytes()) {
            let _ = PATH_C.set(c);
            OWNER.store(std::process::id(), Ordering::Relaxed);
            install_sigterm_handler();
        }
        let _ = PATH.set(path);
        // SAFETY: registering a plain extern "C" function with no captured state.
        unsafe { libc::atexit(remove_at_exit) };
        Some(published)
    }

    fn create_at(path: PathBuf, capacities: &[usize]) -> Option<Published> {
        let pid = std::process::id();
        let len = size_of::<Header>() + capacities.len() * size_of::<DeviceCounters>();
        let file = OpenOptions::new().read(true).write(true).create(true).truncate(true).open(&path).ok()?;
        file.set_len(len as u64).ok()?;
        // SAFETY: a fresh shared mapping of a file of `len` bytes; nothing else in this
        // process maps it, and it is never unmapped, so the references below live for
        // the whole process.
        let raw = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                file.as_raw_fd(),
                0,
            )
        };
        if raw == libc::MAP_FAILED {
            let _ = std::fs::remove_file(&path);
            return None;
        }
        // SAFETY: the mapping is page-aligned, `len` bytes long, zero-filled by set_len,
        // and both types are atomics of 64-bit words, valid for any bit pattern.
        let (header, devices) = unsafe {
            let header = &*(raw as *const Header);
            let first = (raw as *const u8).add(size_of::<Header>()) as *const DeviceCounters;
            (header, std::slice::from_raw_parts(first, capacities.len()))
        };
        for (d, &c) in devices.iter().zip(capacities) {
            d.capacity.store(c as u64, Ordering::Relaxed);
        }
        header.pid.store(pid as u64, Ordering::Relaxed);
        header.devices.store(capacities.len() as u64, Ordering::Relaxed);
        header.version.store(VERSION, Ordering::Relaxed);
        // Last, so a reader never takes a half-written file for a valid one.
        header.magic.store(MAGIC, Ordering::Release);
        Some(Published { path, header, devices })
    }

    /// The file's path.
    pub fn path(&self) -> &std::path::Path {
        &self.path
    }

    /// Publishes device `device`'s current counters.
    pub fn update(&self, device: usize, stats: &DeviceStats) {
        if let Some(d) = self.devices.get(device) {
            d.allocated.store(stats.allocated_bytes.current.max(0) as u64, Ordering::Relaxed);
            d.reserved.store(stats.reserved_bytes.current.max(0) as u64, Ordering::Relaxed);
            d.peak_allocated.store(stats.allocated_bytes.peak.max(0) as u64, Ordering::Relaxed);
        }
    }

    /// The published pid (this process's).
    pub fn pid(&self) -> u64 {
        self.header.pid.load(Ordering::Relaxed)
    }
}

/// This process's file as a C string, for the signal handler (set once, before
/// the handler is installed; never freed).
static PATH_C: OnceLock<std::ffi::CString> = OnceLock::new();
/// The pid that created the file: a forked child (another pid) leaves it alone.
static OWNER: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);

/// Installs [`on_sigterm`] if SIGTERM still has its default action (a handler the
/// program installed is left in place).
fn install_sigterm_handler() {
    // SAFETY: sigaction with a zeroed struct to read the current action, then a
    // handler that only calls async-signal-safe functions (getpid, unlink,
    // sigaction, raise).
    unsafe {
        let mut current: libc::sigaction = std::mem::zeroed();
        if libc::sigaction(libc::SIGTERM, std::ptr::null(), &mut current) != 0 || current.sa_sigaction != libc::SIG_DFL
        {
            return;
        }
        let mut action: libc::sigaction = std::mem::zeroed();
        action.sa_sigaction = on_sigterm as *const () as libc::sighandler_t;
        libc::sigemptyset(&mut action.sa_mask);
        action.sa_flags = libc::SA_RESETHAND;
        libc::sigaction(libc::SIGTERM, &action, std::ptr::null_mut());
    }
}

/// Removes the file, then dies of the signal with the default action
/// (`SA_RESETHAND` restored it), so the exit status is what it would have been.
extern "C" fn on_sigterm(sig: libc::c_int) {
    // SAFETY: async-signal-safe calls only; PATH_C is set before the handler is
    // installed and never changes, so reading it is a plain load.
    unsafe {
        if let Some(path) = PATH_C.get() {
            if OWNER.load(Ordering::Relaxed) == libc::getpid() as u32 {
                libc::unlink(path.as_ptr());
            }
        }
        libc::raise(sig);
    }
}

/// Removes the files of processes that no longer run (killed before they could
/// remove their own) from `dir`.
fn remove_stale(dir: &std::path::Path) {
    let Ok(entries) = std::fs::read_dir(dir) else { return };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(pid) = name
            .to_str()
            .and_then(|n| n.strip_prefix("torch-oxide-"))
            .and_then(|n| n.strip_suffix(".mem"))
            .and_then(|n| n.parse::<libc::pid_t>().ok())
        else {
            continue;
        };
        if pid > 0 && !is_running(pid) {
            let _ = std::fs::remove_file(entry.path());
        }
    }
}

/// Whether a process `pid` exists (kill with signal 0: ESRCH means it does not;
/// EPERM means it runs under another user).
pub fn is_running(pid: libc::pid_t) -> bool {
    // SAFETY: signal 0 sends nothing; it only checks that the pid exists.
    let r = unsafe { libc::kill(pid, 0) };
    r == 0 || std::io::Error::last_os_error().raw_os_error() != Some(libc::ESRCH)
}

/// Removes this process's file; a forked child (another pid) leaves its parent's alone.
extern "C" fn remove_at_exit() {
    remove_now();
}

/// Removes this process's file now (a process about to end without `atexit`:
/// a `multiprocessing` child that leaves with `os._exit`).
pub fn remove_now() {
    if let Some(path) = PATH.get() {
        if path.file_name().and_then(|n| n.to_str()) == Some(&format!("torch-oxide-{}.mem", std::process::id())) {
            let _ = std::fs::remove_file(path);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn publishes_counters_in_the_documented_layout() {
        // Not the process's own file: the runtime of other tests in this process publishes there.
        let path = std::env::temp_dir().join(format!("torch-oxide-test-{}.mem", std::process::id()));
        let p = Published::create_at(path, &[1000, 2000]).expect("a writable temporary directory");
        let mut stats = DeviceStats::default();
        stats.allocated_bytes.current = 512;
        stats.allocated_bytes.peak = 1024;
        stats.reserved_bytes.current = 4096;
        p.update(1, &stats);
        p.update(7, &stats); // no such device: ignored
        let bytes = std::fs::read(p.path()).unwrap();
        let words: Vec<u64> = bytes.chunks(8).map(|c| u64::from_ne_bytes(c.try_into().unwrap())).collect();
        assert_eq!(words[..4], [MAGIC, VERSION, std::process::id() as u64, 2]);
        assert_eq!(words[4..8], [1000, 0, 0, 0]);
        assert_eq!(words[8..12], [2000, 512, 4096, 1024]);
        assert_eq!(p.pid(), std::process::id() as u64);
        std::fs::remove_file(p.path()).unwrap();
    }

    #[test]
    fn files_of_processes_that_no_longer_run_are_removed() {
        let dir = std::env::temp_dir().join(format!("oxide-publish-stale-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        // A child that has exited and been reaped: its pid runs no longer.
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let dead = child.id();
        child.wait().unwrap();
        let mine = format!("torch-oxide-{}.mem", std::process::id());
        for name in [format!("torch-oxide-{dead}.mem"), mine.clone(), "torch-oxide-x.mem".into(), "other".into()] {
            std::fs::write(dir.join(name), b"").unwrap();
        }
        remove_stale(&dir);
        let mut left: Vec<String> =
            std::fs::read_dir(&dir).unwrap().map(|e| e.unwrap().file_name().into_string().unwrap()).collect();
        left.sort();
        assert_eq!(left, ["other".to_string(), mine, "torch-oxide-x.mem".into()]);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
