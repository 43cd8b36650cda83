//! Device memory shared between processes: the runtime half of sending oxide
//! tensors through `torch.multiprocessing` (what CUDA's IPC memory handles and
//! `torch.multiprocessing`'s reference-count file do for CUDA tensors).
//!
//! - **Export** ([`crate::Runtime::ipc_export`]): every device's bytes live in a
//!   memory file (see [`crate::memory`]), so a device address is named by that
//!   file and an offset in it. The caller sends the file descriptor (Python's
//!   `multiprocessing` duplicates it into the receiver).
//! - **Open** ([`crate::Runtime::ipc_open`]): the receiver maps that range of the
//!   file into a free extent of its own device range: a device address of its
//!   own, the same bytes. Until [`crate::Runtime::ipc_close`] the extent is a
//!   live allocation for its copies and kernels. A received range cannot be
//!   exported again (CUDA refuses it too): the receiver does not own it.
//! - **Reference counts** ([`RefCounts`]): the sender must not reuse the memory
//!   while a receiver has it mapped. Each sent block has a count in a small
//!   shared counter file: one more per send, one less when a receiver closes
//!   it (or finds it already open). A sent block freed by its tensors while the
//!   count is above zero (its storage deleted or resized) is not freed but kept
//!   aside, as CUDA's sent-data limbo does, until [`crate::Runtime::ipc_collect`]
//!   finds the count at zero. A receiver
//!   that exits with blocks still open gives their counts back at exit
//!   (`atexit`); one killed before that leaves its counts, as with CUDA: the
//!   sender then keeps those blocks until it exits.

use std::collections::HashMap;
use std::sync::atomic::{AtomicI64, Ordering};

use crate::error::{Error, Result};

/// Counters per counter file: sends outstanding at once from one process.
pub const COUNTER_SLOTS: usize = 1 << 16;

fn ipc_error(reason: impl Into<String>) -> Error {
    Error::Ipc { reason: reason.into() }
}

/// A shared file of [`COUNTER_SLOTS`] 64-bit counters, mapped read-write.
struct CounterFile {
    fd: libc::c_int,
    base: usize,
}

impl CounterFile {
    fn create() -> Result<CounterFile> {
        // SAFETY: a NUL-terminated name and valid flags; the result is checked.
        let fd = unsafe { libc::memfd_create(c"oxide-ipc-counts".as_ptr(), libc::MFD_CLOEXEC) };
        if fd < 0 {
            return Err(ipc_error(format!("memfd_create: {}", std::io::Error::last_os_error())));
        }
        let len = COUNTER_SLOTS * size_of::<AtomicI64>();
        // SAFETY: fd is the memory file just created.
        if unsafe { libc::ftruncate(fd, len as libc::off_t) } != 0 {
            let e = std::io::Error::last_os_error();
            // SAFETY: closing the file we opened.
            unsafe { libc::close(fd) };
            return Err(ipc_error(format!("ftruncate: {e}")));
        }
        match Self::map(fd) {
            Ok(base) => Ok(CounterFile { fd, base }),
            Err(e) => {
                // SAFETY: closing the file we opened.
                unsafe { libc::close(fd) };
                Err(e)
            }
        }
    }

    /// Maps a counter file (ours or another process's); the mapping outlives `fd`.
    fn map(fd: libc::c_int) -> Result<usize> {
        let len = COUNTER_SLOTS * size_of::<AtomicI64>();
        // SAFETY: a shared mapping of a file at an address of the kernel's choosing; checked.
        let p = unsafe {
            libc::mmap(std::ptr::null_mut(), len, libc::PROT_READ | libc::PROT_WRITE, libc::MAP_SHARED, fd, 0)
        };
        if p == libc::MAP_FAILED {
            return Err(ipc_error(format!("mapping a counter file: {}", std::io::Error::last_os_error())));
        }
        Ok(p as usize)
    }

    fn counter(base: usize, slot: usize) -> &'static AtomicI64 {
        assert!(slot < COUNTER_SLOTS, "counter slot {slot} out of range");
        // SAFETY: base maps COUNTER_SLOTS aligned 64-bit words for the rest of the
        // process (counter mappings are never unmapped), and every process touches
        // them only atomically.
        unsafe { &*((base + slot * size_of::<AtomicI64>()) as *const AtomicI64) }
    }
}

/// The sending side: this process's counter file and which slots are in use.
pub struct RefCounts {
    file: CounterFile,
    free: Vec<usize>,
    next: usize,
    token: String,
}

impl RefCounts {
    fn create() -> Result<RefCounts> {
        let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos());
        Ok(RefCounts {
            file: CounterFile::create()?,
            free: Vec::new(),
            next: 0,
            token: format!("{}-{nanos}", std::process::id()),
        })
    }

    /// Names this process's counter file for receivers (they map each sender's file once).
    pub fn token(&self) -> &str {
        &self.token
    }

    /// The counter file's descriptor, owned by this object.
    pub fn fd(&self) -> libc::c_int {
        self.file.fd
    }

    /// A slot whose count is zero, for one sent block.
    ///
    /// Errors: [`Error::Ipc`] when [`COUNTER_SLOTS`] blocks are out at once.
    pub fn acquire(&mut self) -> Result<usize> {
        if let Some(s) = self.free.pop() {
            return Ok(s);
        }
        if self.next == COUNTER_SLOTS {
            return Err(ipc_error(format!(
                "{COUNTER_SLOTS} oxide storages are shared with other processes and not yet released by them"
            )));
        }
        self.next += 1;
        Ok(self.next - 1)
    }

    /// Adds `delta` to `slot`'s count; returns the new count.
    pub fn add(&self, slot: usize, delta: i64) -> i64 {
        CounterFile::counter(self.file.base, slot).fetch_add(delta, Ordering::AcqRel) + delta
    }

    /// The current count of `slot`.
    pub fn count(&self, slot: usize) -> i64 {
        CounterFile::counter(self.file.base, slot).load(Ordering::Acquire)
    }

    /// Gives back a slot whose count is zero.
    pub fn release(&mut self, slot: usize) {
        CounterFile::counter(self.file.base, slot).store(0, Ordering::Release);
        self.free.push(slot);
    }
}

/// The process's sharing state: its own counter file (created on the first
/// send) and the counter files of the senders it received from.
#[derive(Default)]
pub struct Ipc {
    counts: Option<RefCounts>,
    /// Blocks this process sent, by block address: their counter slot, and
    /// whether their tensors have freed them (the block waits for its count).
    sent: HashMap<usize, Sent>,
    senders: HashMap<String, usize>,
    /// Blocks this process opened and has not closed: their senders' counts.
    opened: HashMap<usize, &'static AtomicI64>,
    exit_hook: bool,
}

#[derive(Debug, Clone, Copy)]
struct Sent {
    slot: usize,
    freed: bool,
}

/// Gives back the counts of every block still open when the process exits
/// normally, so that the senders can reuse the memory.
extern "C" fn release_opened_at_exit() {
    if let Ok(rt) = crate::runtime() {
        rt.ipc().release_all_opened();
    }
}

impl Ipc {
    /// This process's counter file, created on first use.
    ///
    /// Errors: [`Error::Ipc`] when the OS refuses the file.
    pub fn counts(&mut self) -> Result<&mut RefCounts> {
        if self.counts.is_none() {
            self.counts = Some(RefCounts::create()?);
        }
        Ok(self.counts.as_mut().expect("just created"))
    }

    /// Counts one more send of the block at `block` (its counter slot is taken
    /// on the first); returns the slot.
    ///
    /// Errors: [`Error::Ipc`] when the counter file cannot be made or is full.
    pub fn note_send(&mut self, block: usize) -> Result<usize> {
        let slot = match self.sent.get(&block) {
            Some(s) => s.slot,
            None => {
                let slot = self.counts()?.acquire()?;
                self.sent.insert(block, Sent { slot, freed: false });
                slot
            }
        };
        self.counts()?.add(slot, 1);
        Ok(slot)
    }

    /// Called when the block at `block` is freed: true when it was sent and a
    /// receiver may still have it (the caller must not free it now).
    pub fn defer_free(&mut self, block: usize) -> bool {
        let Some(sent) = self.sent.get(&block).copied() else { return false };
        let busy = self.counts.as_ref().is_some_and(|c| c.count(sent.slot) > 0);
        if busy {
            self.sent.insert(block, Sent { freed: true, ..sent });
        } else {
            self.sent.remove(&block);
            if let Some(c) = self.counts.as_mut() {
                c.release(sent.slot);
            }
        }
        busy
    }

    /// Forgets the sent blocks every receiver has released; returns the
    /// addresses of those their tensors had freed meanwhile (the caller frees them).
    pub fn collect(&mut self) -> Vec<usize> {
        let Some(counts) = self.counts.as_mut() else { return Vec::new() };
        let done: Vec<(usize, Sent)> =
            self.sent.iter().filter(|(_, s)| counts.count(s.slot) <= 0).map(|(&b, &s)| (b, s)).collect();
        let mut freed = Vec::new();
        for (block, sent) in done {
            self.sent.remove(&block);
            counts.release(sent.slot);
            if sent.freed {
                freed.push(block);
            }
        }
        freed
    }

    /// Sent blocks not yet released by every receiver (or not yet collected).
    pub fn sent_count(&self) -> usize {
        self.sent.len()
    }

    /// Notes that the block opened at `ptr` holds one of `count`'s sends.
    pub fn note_opened(&mut self, ptr: usize, count: &'static AtomicI64) {
        if !self.exit_hook {
            self.exit_hook = true;
            // SAFETY: registering a plain extern "C" function with no captured state.
            unsafe { libc::atexit(release_opened_at_exit) };
        }
        self.opened.insert(ptr, count);
    }

    /// Forgets the block opened at `ptr` and gives its sender's count back; false
    /// when it was not open (or the exit hook gave it back already).
    pub fn release_opened(&mut self, ptr: usize) -> bool {
        match self.opened.remove(&ptr) {
            Some(count) => {
                count.fetch_sub(1, Ordering::AcqRel);
                true
            }
            None => false,
        }
    }

    /// Gives back the senders' counts of every block still open, for a process
    /// about to exit (the blocks stay mapped until then). Returns how many.
    pub fn release_all_opened(&mut self) -> usize {
        let n = self.opened.len();
        for (_, count) in self.opened.drain() {
            count.fetch_sub(1, Ordering::AcqRel);
        }
        n
    }

    /// The count `slot` in the counter file of the sender `token` (whose
    /// descriptor in this process is `fd`, used only the first time).
    ///
    /// Errors: [`Error::Ipc`] when the file cannot be mapped or `slot` is out of range.
    pub fn sender_count(&mut self, token: &str, fd: libc::c_int, slot: usize) -> Result<&'static AtomicI64> {
        if slot >= COUNTER_SLOTS {
            return Err(ipc_error(format!("counter slot {slot} out of range")));
        }
        let base = match self.senders.get(token) {
            Some(&b) => b,
            None => {
                let b = CounterFile::map(fd)?;
                self.senders.insert(token.to_owned(), b);
                b
            }
        };
        Ok(CounterFile::counter(base, slot))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_are_shared_through_the_file() {
        let mut ipc = Ipc::default();
        let counts = ipc.counts().unwrap();
        let (a, b) = (counts.acquire().unwrap(), counts.acquire().unwrap());
        assert_ne!(a, b);
        assert_eq!(counts.add(b, 2), 2);
        let (token, fd) = (counts.token().to_owned(), counts.fd());
        // A receiver maps the same file: its decrements are the sender's counts.
        let mut receiver = Ipc::default();
        let c = receiver.sender_count(&token, fd, b).unwrap();
        c.fetch_sub(1, Ordering::AcqRel);
        assert_eq!(ipc.counts().unwrap().count(b), 1);
        c.fetch_sub(1, Ordering::AcqRel);
        let counts = ipc.counts().unwrap();
        assert_eq!(counts.count(b), 0);
        counts.release(b);
        assert_eq!(counts.acquire().unwrap(), b, "a released slot is reused");
        assert!(receiver.sender_count(&token, fd, COUNTER_SLOTS).is_err());
    }
}
