//! `OXIDE_SANITIZE=1`: a debugging mode that reports what silently works on a
//! host-memory device and fails on real hardware. Off by default; while off,
//! each launch pays one load of a cached flag.
//!
//! - **Stream races** (in the spirit of torch.cuda's CSAN): every launch's
//!   operands are noted as reads or writes (the ABI's access modes; a
//!   TensorIterator's outputs are writes) of their allocation. Each allocation
//!   keeps its last writer and the readers since, with their stream, position
//!   in the stream and Python launch site. A launch that reads memory last
//!   written on another stream, or writes memory read or written on another
//!   stream, is refused with both sites unless its stream is ordered after
//!   that access: by an event wait or `wait_stream` (a vector clock per
//!   stream, joined through waits), or by a host thread that saw the access
//!   complete (any host wait for the stream: a stream, event or device
//!   synchronize, a copy to the host, a query that returned true).
//! - **Use after free**: a launch whose operand lies in a block the caching
//!   allocator holds as free is refused, naming the block.
//! - **Uninitialised reads**: every new allocation and every freed block is
//!   filled with [`POISON`] (queued on the block's stream, after the work that
//!   used it), so a kernel that reads memory nobody wrote computes with NaN.
//!
//! Checks run at the call, on the host, as CSAN's do: a refused launch raises
//! a RuntimeError at the offending Python line and does not run. A graph
//! replay is checked as one launch that reads and writes what its capture's
//! launches did (blocks the capture freed, its pool's temporaries, aside).

use std::cell::RefCell;
use std::collections::HashMap;
use std::sync::{Mutex, OnceLock};

use oxide_runtime::{PointerKind, Record, Runtime, StreamId};

use crate::abi::AbiError;
use crate::site::LaunchSite;

/// The fill of fresh and freed device memory, one 64-bit word repeated (little
/// endian): every float dtype reads NaN from it (float64 a signalling NaN,
/// bfloat16 three signalling NaNs in four, float32 one in two; float16 quiet
/// NaNs), and integers read the recognisable 0x7FA0 / 0x7FF4 halves.
pub const POISON: u64 = 0x7FF4_7FA0_7FA0_7FA0;

/// True when `OXIDE_SANITIZE=1` (read once).
pub(crate) fn enabled() -> bool {
    static ON: OnceLock<bool> = OnceLock::new();
    *ON.get_or_init(|| std::env::var("OXIDE_SANITIZE").is_ok_and(|v| v == "1"))
}

thread_local! {
    /// Device addresses the current ABI call's kernel reads (`false`) or writes (`true`).
    static CALL_ACCESSES: RefCell<Vec<(usize, bool)>> = const { RefCell::new(Vec::new()) };
}

/// Forgets the previous ABI call's accesses (at the start of every call).
pub(crate) fn begin_call() {
    if enabled() {
        CALL_ACCESSES.with(|a| a.borrow_mut().clear());
    }
}

/// Notes that the current call's kernel reads or writes device memory at `ptr`.
pub(crate) fn note_access(ptr: usize, write: bool) {
    if enabled() && ptr != 0 {
        CALL_ACCESSES.with(|a| a.borrow_mut().push((ptr, write)));
    }
}

type StreamKey = (usize, StreamId);

/// One launch's access to an allocation.
#[derive(Clone)]
struct Access {
    stream: StreamKey,
    /// The launch's position in its stream (the sequence number it was given).
    seq: u64,
    kernel: &'static str,
    site: Option<LaunchSite>,
}

impl std::fmt::Display for Access {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} on oxide:{} stream {}", self.kernel, self.stream.0, self.stream.1)?;
        match &self.site {
            Some(s) => write!(f, ", launched at {s}"),
            None => write!(f, " (no Python frame)"),
        }
    }
}

#[derive(Default)]
struct History {
    write: Option<Access>,
    /// Reads since the last write, the latest per stream.
    reads: Vec<Access>,
}

#[derive(Default)]
struct State {
    /// Access history per allocation (keyed by the block's address).
    blocks: HashMap<usize, History>,
    /// Per stream, the position of every other stream it is ordered after.
    clocks: HashMap<StreamKey, HashMap<StreamKey, u64>>,
}

impl State {
    /// True when launches on `me` now come after access `a`: same stream, an
    /// event wait for it, or a host thread saw it complete (the runtime notes
    /// every host wait and successful query per stream).
    fn ordered(&self, rt: &Runtime, me: StreamKey, a: &Access) -> bool {
        let waited = self.clocks.get(&me).and_then(|c| c.get(&a.stream)).copied().unwrap_or(0);
        let seen =
            || rt.device(a.stream.0 as i64).and_then(|d| d.streams().state(a.stream.1)).map_or(0, |s| s.host_seen());
        a.stream == me || waited >= a.seq || seen() >= a.seq
    }
}

fn state() -> std::sync::MutexGuard<'static, State> {
    static STATE: OnceLock<Mutex<State>> = OnceLock::new();
    STATE.get_or_init(Mutex::default).lock().unwrap_or_else(|e| e.into_inner())
}

/// The allocation holding `ptr`: its device and block address, and whether the
/// caching allocator has it in use (false: a freed, cached block). Memory
/// received from another process is in use while it is mapped.
fn block_of(rt: &Runtime, ptr: usize) -> Option<(usize, usize, usize, bool)> {
    let PointerKind::Device(d) = rt.pointer_kind(ptr) else { return None };
    let alloc = rt.device(d as i64).ok()?.allocator();
    let (start, len) = alloc.memory().allocation_of(ptr)?;
    Some((d, start, len, alloc.is_active(start) || alloc.memory().is_imported(start)))
}

/// Device addresses read (`false`) or written (`true`) by some launches.
type Accesses = Vec<(usize, bool)>;

/// Accesses of the launches captured so far, per capturing stream.
fn captured() -> std::sync::MutexGuard<'static, HashMap<StreamKey, Accesses>> {
    static CAPTURED: OnceLock<Mutex<HashMap<StreamKey, Accesses>>> = OnceLock::new();
    CAPTURED.get_or_init(Mutex::default).lock().unwrap_or_else(|e| e.into_inner())
}

/// The current call's launch is captured on `stream` of `device`: its accesses
/// become the graph's, checked at each replay ([`check_replay`]).
pub(crate) fn note_captured(device: usize, stream: StreamId) {
    if enabled() {
        let accesses = CALL_ACCESSES.with(|a| std::mem::take(&mut *a.borrow_mut()));
        captured().entry((device, stream)).or_default().extend(accesses);
    }
}

/// The accesses captured on `stream` of `device` since the capture began (empty when off).
pub(crate) fn take_captured(device: usize, stream: StreamId) -> Vec<(usize, bool)> {
    if !enabled() {
        return Vec::new();
    }
    let mut all = captured().remove(&(device, stream)).unwrap_or_default();
    all.sort_unstable();
    all.dedup();
    all
}

/// Checks a graph replay on `stream` of `device` as one launch with the
/// graph's accesses, so eager work on other streams is ordered with it. Blocks
/// the capture freed (temporaries in the graph's pool) are skipped.
pub(crate) fn check_replay(
    rt: &Runtime,
    device: usize,
    stream: StreamId,
    accesses: &[(usize, bool)],
) -> Result<(), AbiError> {
    if !enabled() || accesses.is_empty() {
        return Ok(());
    }
    let live: Vec<(usize, bool)> =
        accesses.iter().copied().filter(|&(p, _)| block_of(rt, p).is_some_and(|b| b.3)).collect();
    CALL_ACCESSES.with(|a| *a.borrow_mut() = live);
    check_launch(rt, device, stream, "oxide_graph_replay")
}

/// Checks the current call's accesses as a launch `kernel` on `stream` of
/// `device`, and records them. Refuses a launch that races with an earlier
/// access or touches freed memory.
pub(crate) fn check_launch(
    rt: &Runtime,
    device: usize,
    stream: StreamId,
    kernel: &'static str,
) -> Result<(), AbiError> {
    let accesses = CALL_ACCESSES.with(|a| std::mem::take(&mut *a.borrow_mut()));
    if accesses.is_empty() {
        return Ok(());
    }
    let seq = rt.device(device as i64)?.streams().state(stream)?.submitted() + 1;
    let me = (device, stream);
    let now = Access { stream: me, seq, kernel, site: crate::site::capture() };
    // One access per allocation, a write if any operand in it is written.
    let mut blocks: Vec<(usize, usize, usize, bool)> = Vec::new();
    for (ptr, write) in accesses {
        let Some((d, start, len, active)) = block_of(rt, ptr) else { continue };
        if !active {
            return Err(AbiError::Sanitizer(format!(
                "oxide sanitizer: {now} {} freed memory at {ptr:#x} (a block of {len} bytes at {start:#x} on oxide:{d} that the caching allocator holds as free): a use after free",
                if write { "writes" } else { "reads" }
            )));
        }
        match blocks.iter_mut().find(|b| b.0 == start) {
            Some(b) => b.3 |= write,
            None => blocks.push((start, len, d, write)),
        }
    }
    let mut st = state();
    for &(start, len, d, write) in &blocks {
        let Some(h) = st.blocks.get(&start) else { continue };
        let conflict = match &h.write {
            Some(w) if !st.ordered(rt, me, w) => Some(("last written by", w)),
            _ if write => h.reads.iter().find(|r| !st.ordered(rt, me, r)).map(|r| ("read by", r)),
            _ => None,
        };
        if let Some((what, earlier)) = conflict {
            return Err(AbiError::Sanitizer(format!(
                "oxide sanitizer: stream race on oxide:{d} memory at {start:#x} ({len} bytes): {now} {} it, {what} {earlier}, with no event wait or synchronization in between. Order the streams (torch.Stream.wait_stream, wait_event) before using memory across them",
                if write { "writes" } else { "reads" }
            )));
        }
    }
    for (start, _, _, write) in blocks {
        let h = st.blocks.entry(start).or_default();
        if write {
            h.write = Some(now.clone());
            h.reads.clear();
        } else {
            h.reads.retain(|r| r.stream != me);
            h.reads.push(now.clone());
        }
    }
    Ok(())
}

/// `waiter` is ordered after the first `seq` launches of `other` (an event
/// wait): it inherits what `other` was ordered after, too.
pub(crate) fn on_wait(waiter: StreamKey, other: StreamKey, seq: u64) {
    if !enabled() || waiter == other {
        return;
    }
    let mut st = state();
    let inherited: Vec<(StreamKey, u64)> =
        st.clocks.get(&other).map(|c| c.iter().map(|(k, v)| (*k, *v)).collect()).unwrap_or_default();
    let clock = st.clocks.entry(waiter).or_default();
    for (k, v) in inherited.into_iter().chain([(other, seq)]) {
        let e = clock.entry(k).or_insert(0);
        *e = (*e).max(v);
    }
}

/// Fills the block at `ptr` (`bytes` long, its whole rounded size) with
/// [`POISON`] after the work queued on `stream`. A freed block's history is
/// forgotten; a new allocation's starts with the fill as a write on its
/// stream, so a first use on another stream that is not ordered after the
/// allocation is a race (it is on CUDA too: the block's previous users on the
/// allocating stream may still be running). Nothing while the stream captures
/// a graph (the fill would become part of the graph).
///
/// A freed block keeps its history (unless [`forget`] is called: other streams
/// were recorded on it, and the allocator waited for them), and an allocation
/// that receives it is refused when another stream's access to its previous
/// tensor is not ordered before the allocating stream: the tensor was freed
/// while that stream could still use it, without `record_stream` (CUDA's
/// caching allocator hands such a block out early in the same way).
pub(crate) fn poison(
    rt: &Runtime,
    device: usize,
    stream: StreamId,
    ptr: usize,
    bytes: usize,
    allocated: bool,
) -> Result<(), AbiError> {
    let d = rt.device(device as i64)?;
    let streams = d.streams();
    let capturing = streams.is_capturing(stream);
    if allocated {
        let mut st = state();
        let me = (device, stream);
        let seq = streams.state(stream).map_or(0, |s| s.submitted() + 1);
        let fill = Access { stream: me, seq, kernel: "the allocation's fill", site: crate::site::capture() };
        if let Some(h) = st.blocks.get(&ptr) {
            let earlier = h.write.iter().chain(&h.reads).find(|a| !st.ordered(rt, me, a)).cloned();
            if let Some(earlier) = earlier {
                st.blocks.remove(&ptr);
                return Err(AbiError::Sanitizer(format!(
                    "oxide sanitizer: stream race on oxide:{device} memory at {ptr:#x} ({bytes} bytes): {fill} receives a block whose previous tensor was freed while {earlier} could still use it. Call tensor.record_stream(stream) for a tensor used on another stream, or order the streams, before freeing it"
                )));
            }
        }
        st.blocks.remove(&ptr);
        if !capturing {
            st.blocks.insert(ptr, History { write: Some(fill), reads: Vec::new() });
        }
    }
    if bytes == 0 || capturing {
        return Ok(());
    }
    let at = rt.host_address(ptr);
    let fill = move || {
        // SAFETY: the block is a caching-allocator block of `bytes` bytes, 512-byte
        // aligned and a multiple of 512 bytes long, reached through its host address,
        // and stream order puts this fill after every launch that used it before and
        // before every launch that uses it next.
        unsafe { std::slice::from_raw_parts_mut(at as *mut u64, bytes / 8) }.fill(POISON);
        Ok(())
    };
    let _ = if rt.launch_blocking() {
        streams.launch(stream, fill).map(|_| ())
    } else {
        streams.enqueue(stream, Record::Work(oxide_runtime::Work::new(fill))).map(|_| ())
    };
    Ok(())
}

/// Forgets the access history of the block at `ptr` (freed after the streams
/// recorded on it: the allocator orders its reuse after them).
pub(crate) fn forget(ptr: usize) {
    state().blocks.remove(&ptr);
}
