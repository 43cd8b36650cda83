//! The memory history behind `torch.oxide._record_memory_history` and the
//! `device_traces` of `torch.oxide._snapshot()`: allocation and free events of
//! the caching allocator with the Python stack that caused each, in the order
//! and with the field names of `torch.cuda`'s, so `torch.cuda._memory_viz`
//! renders them. Off by default; while off, an allocation pays one atomic load.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{SystemTime, UNIX_EPOCH};

use std::collections::HashMap;

use oxide_runtime::SegmentEvent;

use crate::site::{stack, LaunchSite};

/// Deepest Python stack recorded per event.
const MAX_FRAMES: usize = 64;

static ENABLED: AtomicBool = AtomicBool::new(false);
/// Whether events keep their Python stack (read before taking the GIL to walk it).
static STACKS: AtomicBool = AtomicBool::new(false);

/// One event of a device's trace.
#[derive(Clone)]
pub(crate) struct Event {
    pub action: &'static str,
    pub device: usize,
    pub addr: usize,
    pub size: usize,
    pub stream: i64,
    pub time_us: i64,
    pub frames: Arc<[LaunchSite]>,
}

/// A live allocation recorded while enabled: device, size, stream and the stack.
type Live = (usize, usize, i64, Arc<[LaunchSite]>);

#[derive(Default)]
struct History {
    max_entries: usize,
    events: VecDeque<Event>,
    /// Live allocations recorded while enabled, by address.
    live: HashMap<usize, Live>,
}

static HISTORY: Mutex<Option<History>> = Mutex::new(None);

fn history() -> std::sync::MutexGuard<'static, Option<History>> {
    HISTORY.lock().unwrap_or_else(|e| e.into_inner())
}

/// Starts (clearing what was recorded) or stops recording. `stacks`: record the
/// Python stack of each event; `max_entries`: events kept, the oldest dropped first.
pub(crate) fn record(enabled: bool, stacks: bool, max_entries: usize) {
    let mut h = history();
    if enabled {
        *h = Some(History { max_entries: max_entries.max(1), ..Default::default() });
    } else if let Some(h) = h.as_mut() {
        // Stopped: what was recorded stays for the next snapshot, nothing new is added.
        h.live.clear();
    }
    STACKS.store(stacks, Ordering::Release);
    ENABLED.store(enabled, Ordering::Release);
    drop(h);
    // The allocators keep segment changes for the history only while it records.
    if let Ok(rt) = oxide_runtime::runtime() {
        for d in 0..rt.device_count() {
            if let Ok(device) = rt.device(d as i64) {
                device.allocator().record_segment_events(enabled);
            }
        }
    }
}

/// Moves the segment changes device `device`'s allocator kept into the history,
/// as `segment_alloc` / `segment_free` events with `frames` and `stream`.
fn take_segments(h: &mut History, device: usize, stream: i64, frames: &Arc<[LaunchSite]>) {
    let Ok(d) = oxide_runtime::runtime().and_then(|rt| rt.device(device as i64)) else { return };
    let events = d.allocator().take_segment_events();
    let time_us = now_us();
    for e in events {
        let (action, addr, size) = match e {
            SegmentEvent::Alloc { ptr, size } => ("segment_alloc", ptr, size),
            SegmentEvent::Free { ptr, size } => ("segment_free", ptr, size),
        };
        push(h, Event { action, device, addr, size, stream, time_us, frames: Arc::clone(frames) });
    }
}

/// The calling thread's Python stack, when events keep one (read before the
/// history's lock is taken: reading it may wait for the GIL).
fn frames() -> Arc<[LaunchSite]> {
    if STACKS.load(Ordering::Acquire) {
        stack(MAX_FRAMES).into()
    } else {
        Arc::from(Vec::new())
    }
}

fn now_us() -> i64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_micros() as i64)
}

fn push(h: &mut History, e: Event) {
    if h.events.len() >= h.max_entries {
        h.events.pop_front();
    }
    h.events.push_back(e);
}

/// Records an allocation of `size` bytes at `addr` (a no-op while not recording).
pub(crate) fn on_alloc(device: usize, addr: usize, size: usize, stream: i64) {
    if !ENABLED.load(Ordering::Acquire) || addr == 0 {
        return;
    }
    let frames = frames();
    let mut h = history();
    let Some(h) = h.as_mut() else { return };
    take_segments(h, device, stream, &frames);
    h.live.insert(addr, (device, size, stream, Arc::clone(&frames)));
    push(h, Event { action: "alloc", device, addr, size, stream, time_us: now_us(), frames });
}

/// Records an allocation of `size` bytes that failed with out-of-memory while
/// `device_free` bytes of the device were free (CUDA's `oom` event, whose
/// `device_free` travels in the address field here), after the segments the
/// allocator gave back trying to serve it.
pub(crate) fn on_oom(device: usize, size: usize, device_free: usize, stream: i64) {
    if !ENABLED.load(Ordering::Acquire) {
        return;
    }
    let frames = frames();
    let mut h = history();
    let Some(h) = h.as_mut() else { return };
    take_segments(h, device, stream, &frames);
    push(h, Event { action: "oom", device, addr: device_free, size, stream, time_us: now_us(), frames });
}

/// Records the segments `empty_cache` gave back on every device.
pub(crate) fn on_empty_cache() {
    if !ENABLED.load(Ordering::Acquire) {
        return;
    }
    let frames = frames();
    let mut h = history();
    let Some(h) = h.as_mut() else { return };
    let devices = oxide_runtime::runtime().map_or(0, |rt| rt.device_count());
    for d in 0..devices {
        take_segments(h, d, 0, &frames);
    }
}

/// Records the free of the block at `addr`, if its allocation was recorded:
/// `free_requested`, then `free_completed` (the caching allocator takes it back
/// at once; reuse by other streams waits for their work in the allocator).
pub(crate) fn on_free(addr: usize) {
    if !ENABLED.load(Ordering::Acquire) || addr == 0 {
        return;
    }
    let frames = frames();
    let mut h = history();
    let Some(h) = h.as_mut() else { return };
    let Some((device, size, stream, _)) = h.live.remove(&addr) else { return };
    let time_us = now_us();
    for action in ["free_requested", "free_completed"] {
        push(h, Event { action, device, addr, size, stream, time_us, frames: Arc::clone(&frames) });
    }
}

/// The recorded events, oldest first, and the stacks of the live allocations by address.
pub(crate) fn snapshot() -> (Vec<Event>, HashMap<usize, Arc<[LaunchSite]>>) {
    let h = history();
    let Some(h) = h.as_ref() else { return (Vec::new(), HashMap::new()) };
    let events = h.events.iter().cloned().collect();
    let live = h.live.iter().map(|(&addr, (_, _, _, frames))| (addr, Arc::clone(frames))).collect();
    (events, live)
}
