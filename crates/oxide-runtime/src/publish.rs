//! Live memory counters of this process for other processes: what `nvidia-smi`
//! shows for CUDA. Device memory is process-local here (each process reserves
//! its own ranges), so another process can only learn it from what this one
//! publishes: a small file in shared memory (`/dev/shm/torch-oxide-<pid>.mem`,
//! or the temporary directory), mapped and updated with relaxed atomic stores
//! whenever the caching allocator's counters change, and removed at exit.
//! `python -m torch_oxide` reads every such file.
//!
//! Layout (native endianness, 64-bit words): a [`Header`], then one
//! [`DeviceCounters`] per device. A process killed before exit leaves its file
//! behind; readers check that the pid still runs and skip (and may remove) it.

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
        let path = directory().join(format!("torch-oxide-{}.mem", std::process::id()));
        let published = Published::create_at(path.clone(), capacities)?;
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
}
