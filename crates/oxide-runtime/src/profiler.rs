//! Activity records of device work for a profiler (the layer of CUPTI's
//! activity API): while recording is on, every kernel and copy launched on a
//! stream leaves one [`Activity`] with its name, device, stream, the time the
//! host spent launching it and the time the stream ran it, and the
//! correlation id of the operator that launched it.
//!
//! The profiler that reads them (the extension's Kineto child profiler) pushes
//! the id of each operator as it starts on a thread ([`push_correlation`]),
//! as PyTorch's profiler pushes external correlation ids into CUPTI; a launch
//! takes the innermost one of its thread. Times are nanoseconds of
//! `CLOCK_REALTIME`, the clock of `c10::getTime()` and so of the profiler's
//! CPU operators, so host and device events share one time line.
//!
//! When recording is off a launch pays one relaxed atomic load ([`Launch::begin`]).

use std::cell::{Cell, RefCell};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;

use crate::stream::StreamId;

/// What a stream ran.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ActivityKind {
    /// A kernel (CUPTI's `CONCURRENT_KERNEL`).
    Kernel,
    /// A copy between host and device or within a device (`MEMCPY`).
    Memcpy,
}

/// One kernel or copy, launched and run while recording was on.
#[derive(Debug, Clone)]
pub struct Activity {
    pub kind: ActivityKind,
    /// The kernel's entry point or the copy's direction, as CUDA names copies.
    pub name: &'static str,
    pub device: usize,
    pub stream: StreamId,
    /// The innermost operator's id on the launching thread; 0 outside any operator.
    pub correlation: u64,
    /// OS thread id (`gettid`) of the launching thread.
    pub thread: i64,
    /// The host's side of the launch: from the call to the record's submission.
    pub launch_start_ns: i64,
    pub launch_end_ns: i64,
    /// The stream's side: from the start to the end of the work.
    pub start_ns: i64,
    pub end_ns: i64,
}

static RECORDING: AtomicBool = AtomicBool::new(false);
static ACTIVITIES: Mutex<Vec<Activity>> = Mutex::new(Vec::new());

thread_local! {
    /// Correlation ids of the operators running on this thread, innermost last.
    static CORRELATION: RefCell<Vec<u64>> = const { RefCell::new(Vec::new()) };
    static THREAD_ID: Cell<i64> = const { Cell::new(0) };
}

/// True while activities are recorded.
#[inline]
pub fn recording() -> bool {
    RECORDING.load(Ordering::Relaxed)
}

/// Starts recording, dropping what an earlier recording left.
pub fn start() {
    lock().clear();
    RECORDING.store(true, Ordering::Release);
}

/// Stops recording. Work launched while recording was on still adds its
/// activity when it runs: a caller that wants all of them waits for the
/// streams first.
pub fn stop() {
    RECORDING.store(false, Ordering::Release);
}

/// Takes the recorded activities, in the order they finished.
pub fn take() -> Vec<Activity> {
    std::mem::take(&mut *lock())
}

/// An operator with id `id` starts on this thread.
pub fn push_correlation(id: u64) {
    // try_with: a thread that is exiting has no operators left to attribute.
    let _ = CORRELATION.try_with(|c| c.borrow_mut().push(id));
}

/// The innermost operator of this thread has ended; nothing when none is open.
pub fn pop_correlation() {
    let _ = CORRELATION.try_with(|c| c.borrow_mut().pop());
}

/// Nanoseconds since the Unix epoch (`CLOCK_REALTIME`, as `c10::getTime()`).
pub fn now_ns() -> i64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos() as i64)
}

fn lock() -> std::sync::MutexGuard<'static, Vec<Activity>> {
    ACTIVITIES.lock().unwrap_or_else(|e| e.into_inner())
}

fn thread_id() -> i64 {
    THREAD_ID.with(|t| {
        if t.get() == 0 {
            // SAFETY: gettid has no preconditions.
            t.set(unsafe { libc::gettid() } as i64);
        }
        t.get()
    })
}

/// A launch being recorded: made on the launching thread, completed by
/// [`Launch::run`] where the stream runs the work.
#[derive(Debug)]
pub struct Launch(Activity);

impl Launch {
    /// The record of a launch starting now, or `None` when recording is off.
    /// `name` is called only when recording.
    #[inline]
    pub fn begin(
        kind: ActivityKind,
        name: impl FnOnce() -> &'static str,
        device: usize,
        stream: StreamId,
    ) -> Option<Launch> {
        if !recording() {
            return None;
        }
        let now = now_ns();
        Some(Launch(Activity {
            kind,
            name: name(),
            device,
            stream,
            correlation: CORRELATION.with(|c| c.borrow().last().copied().unwrap_or(0)),
            thread: thread_id(),
            launch_start_ns: now,
            launch_end_ns: now,
            start_ns: 0,
            end_ns: 0,
        }))
    }

    /// The launch is handed to the stream now.
    pub fn submitted(&mut self) {
        self.0.launch_end_ns = now_ns();
    }

    /// Runs `work` and records its activity.
    pub fn run<R>(mut self, work: impl FnOnce() -> R) -> R {
        self.0.start_ns = now_ns();
        let r = work();
        self.0.end_ns = now_ns();
        lock().push(self.0);
        r
    }
}

/// Runs `work`, recording it as `launch`'s activity when there is one.
#[inline]
pub fn traced<R>(launch: Option<Launch>, work: impl FnOnce() -> R) -> R {
    match launch {
        Some(l) => l.run(work),
        None => work(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // One test: recording is process-wide state.
    #[test]
    fn records_launches_with_their_operator() {
        assert!(Launch::begin(ActivityKind::Kernel, || "off", 0, 0).is_none());
        start();
        push_correlation(7);
        push_correlation(9);
        let mut l = Launch::begin(ActivityKind::Kernel, || "k", 1, 3).unwrap();
        pop_correlation();
        l.submitted();
        let out = std::thread::spawn(move || traced(Some(l), || 5)).join().unwrap();
        assert_eq!(out, 5);
        let l = Launch::begin(ActivityKind::Memcpy, || "m", 0, 0).unwrap();
        pop_correlation();
        pop_correlation();
        traced(Some(l), || ());
        stop();
        let acts = take();
        assert_eq!(acts.len(), 2);
        let k = &acts[0];
        assert_eq!((k.name, k.device, k.stream, k.correlation, k.kind), ("k", 1, 3, 9, ActivityKind::Kernel));
        assert!(k.launch_start_ns <= k.launch_end_ns && k.launch_end_ns <= k.start_ns && k.start_ns <= k.end_ns);
        assert_eq!(k.thread, thread_id());
        assert_eq!(acts[1].correlation, 7);
        assert!(take().is_empty());
    }
}
