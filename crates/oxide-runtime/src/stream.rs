//! Streams: ordered queues of work on one device (the `cudaStream_t` layer).
//!
//! Every device has a fixed set of streams, as CUDA's runtime does for
//! PyTorch: id 0 is the default stream, ids `1..=POOL_SIZE` are the
//! normal-priority pool and ids `POOL_SIZE + 1..=2 * POOL_SIZE` the
//! high-priority pool. [`Streams::create`] (`torch.Stream()`,
//! `getNewStream`) and [`Streams::from_pool`] (`getStreamFromGlobalPool`)
//! both hand pool streams out round-robin, like `c10::cuda::getStreamFromPool`,
//! so creating streams never grows the runtime: a program that makes a
//! stream per iteration reuses the same few, and device-wide
//! synchronisation walks a fixed array whatever the program's history.
//! An id names the same stream state for the life of the process.
//!
//! Two ways to run work, sharing each stream's sequence numbers:
//! - [`Streams::launch`] runs it at once on the calling thread (after any
//!   queued records of the stream, so order holds). Every kernel of the
//!   extension goes this way today.
//! - [`Streams::enqueue`] appends a [`Record`] to the stream's queue and
//!   returns at once; the stream's worker thread (started on first use, one
//!   per stream, so a bounded stream set means a bounded set of workers)
//!   runs the records in order. A record that fails keeps its error for the
//!   next [`Streams::synchronize`] of the stream, which reports it once: the
//!   stream stays usable (CUDA's asynchronous errors, without stickiness).
//!   Cross-stream order comes only from [`Record::Wait`] (an event wait that
//!   blocks the worker, never the host), and [`Record::Marker`] stamps the
//!   time a stream reached a point (event timing of device execution).
//!   This is the runtime half of asynchronous execution; the extension moves
//!   its kernels onto it once every launch record owns its arguments.

use std::collections::VecDeque;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, OnceLock};
use std::time::{Duration, Instant};

use crossbeam_utils::CachePadded;

use crate::error::{Error, Result};
use crate::graph::{Capture, Graph, Node};

/// Stream handle value; 0 is the default stream.
pub type StreamId = i64;
/// The default (legacy, per-device) stream.
pub const DEFAULT_STREAM: StreamId = 0;
/// Number of pool streams per priority per device (CUDA's `kStreamsPerPool`).
pub const POOL_SIZE: i64 = 32;
/// Number of streams of a device: the default stream and both pools.
pub const STREAMS_PER_DEVICE: usize = 1 + 2 * POOL_SIZE as usize;

/// Priority class of a pool stream. As in CUDA, a lower (negative) priority
/// number means higher priority.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Priority {
    Normal,
    High,
}

impl Priority {
    /// The class of a CUDA-style priority number (negative = high).
    pub fn from_number(priority: i32) -> Priority {
        if priority < 0 {
            Priority::High
        } else {
            Priority::Normal
        }
    }

    fn first_id(self) -> StreamId {
        match self {
            Priority::Normal => 1,
            Priority::High => 1 + POOL_SIZE,
        }
    }
}

/// How long a stream worker keeps polling for the next record before it sleeps.
/// A Python loop launches every few microseconds: polling bridges those gaps, so
/// the launching thread does not pay a wake-up system call per launch, while a
/// worker whose program has gone to do host work or to wait gives its core back
/// within a twentieth of a millisecond.
const WORKER_SPIN: Duration = Duration::from_micros(50);

/// How long a host thread waiting for a stream (a synchronize, `.item()`, an event
/// wait) polls for the completion before it sleeps. Woken from sleep, it waited for
/// the scheduler: on the 2-vCPU VMs a synchronize after one 20 us launch took a median
/// 360 us (`layer_norm` on [512, 256], ARCHITECTURE.md). Polling yields the core, so
/// the kernel it waits for keeps running on it; but it still competes for that core,
/// so a host that shares its CPU with a kernel thread running a task sleeps at once
/// (the `crowding` hook of [`set_wait_hooks`]): on 2 vCPUs, a host polling on the team
/// worker's CPU made a 1 ms 40 MB `mean` take about twice as long
/// (`benchmarks/placement.py`, ARCHITECTURE.md).
const HOST_SPIN: Duration = Duration::from_micros(200);

thread_local! {
    /// True on stream worker threads (they wait for other streams' work, never for the host).
    static ON_WORKER: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
    /// Run work this thread took from a queue to free (see [`Work`]).
    static SPENT: std::cell::RefCell<Vec<Work>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// Host threads (any thread but a stream worker) waiting for a stream right now.
static HOST_WAITERS: AtomicUsize = AtomicUsize::new(0);

/// What a host thread calls while it waits for a stream (see [`set_wait_hooks`]).
#[derive(Clone, Copy)]
struct WaitHooks {
    help: fn(),
    crowding: fn() -> bool,
}

static WAIT_HOOKS: OnceLock<WaitHooks> = OnceLock::new();

/// True when the calling thread is a stream worker.
pub fn on_stream_worker() -> bool {
    ON_WORKER.with(|w| w.get())
}

/// True while some host thread waits for a stream (a synchronisation, a read of
/// device memory, an event wait on the host): its core is free for kernels.
pub fn host_waiting() -> bool {
    HOST_WAITERS.load(Ordering::SeqCst) > 0
}

/// Installs what a host thread calls while it waits for a stream (once per process;
/// later calls are ignored): `help` once before it polls, and `crowding` at each poll,
/// which ends the poll when it returns true. The extension installs the kernel team's
/// helper as `help`, so a waiting host runs the remaining parts of the kernel a stream
/// worker is running instead of idling, and as `crowding` the team's test of whether
/// the host shares its CPU with a kernel thread running a task (polling there would
/// take the CPU from that kernel).
pub fn set_wait_hooks(help: fn(), crowding: fn() -> bool) {
    let _ = WAIT_HOOKS.set(WaitHooks { help, crowding });
}

/// Records a stream holds before a launching thread waits for it to run some
/// ([`Streams::throttle`]).
pub const QUEUE_DEPTH: u64 = 1024;

/// A kernel or copy queued on a stream: `Ok` or a message for the caller.
///
/// The worker runs it and hands the emptied allocation back to the queue, where the
/// next launching thread frees it ([`Streams::enqueue`]). Why: a launch allocated on
/// the host and freed on the worker moved one heap chunk across threads per kernel.
/// glibc's per-thread caches then never balanced (the host's ran dry, the worker's
/// overflowed), and both sides took the main arena's lock at every launch: a
/// `perf` trace of 1-element `add`s found a futex call every seven launches, every
/// one of them that lock (`free` on the worker, `malloc` in `Box::new` on the host).
pub struct Work(Box<dyn Launch>);

/// The closure of a [`Work`], run once; `None` once run (its captures dropped then).
trait Launch: Send {
    fn run(&mut self) -> std::result::Result<(), String>;
}

impl<F: FnOnce() -> std::result::Result<(), String> + Send> Launch for Option<F> {
    fn run(&mut self) -> std::result::Result<(), String> {
        self.take().map_or(Ok(()), |f| f())
    }
}

impl std::fmt::Debug for Work {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Work")
    }
}

impl Work {
    /// Work that runs `f` (once).
    pub fn new(f: impl FnOnce() -> std::result::Result<(), String> + Send + 'static) -> Work {
        Work(Box::new(Some(f)))
    }

    /// Runs the closure; its captures are dropped here, on the running thread. A
    /// second call does nothing.
    pub fn run(&mut self) -> std::result::Result<(), String> {
        self.0.run()
    }
}

/// One entry of a stream's queue.
pub enum Record {
    /// A kernel or copy. Its error (or panic) is kept for the stream's next synchronisation.
    Work(Work),
    /// `cudaStreamWaitEvent`: the stream's worker waits until work `seq` of
    /// `state`'s stream has completed; the host does not wait.
    Wait { state: Arc<StreamState>, seq: u64 },
    /// Stamps the time the stream reaches this point (an event with timing).
    Marker(Arc<OnceLock<Instant>>),
}

impl std::fmt::Debug for Record {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Record::Work(_) => f.write_str("Work"),
            Record::Wait { seq, .. } => write!(f, "Wait({seq})"),
            Record::Marker(_) => f.write_str("Marker"),
        }
    }
}

/// The queue of one stream and the first error its records met.
#[derive(Debug, Default)]
struct Queue {
    records: VecDeque<(u64, Record)>,
    error: Option<String>,
    /// Work the worker has run, for the next launching thread to free (see [`Work`]).
    spent: Vec<Work>,
}

/// Progress counters of one stream (work items enqueued and finished), its
/// queue of records and the signal its worker gives as records complete.
///
/// The launching thread writes `submitted` and the worker writes `completed` at
/// every record: each sits on its own cache line, as does the queue's lock, so
/// that one side's write does not take the line the other side writes next
/// (`perf annotate` put most of a 1-element launch's `enqueue` on such misses).
#[derive(Debug, Default)]
pub struct StreamState {
    submitted: CachePadded<AtomicU64>,
    completed: CachePadded<AtomicU64>,
    queue: CachePadded<Mutex<Queue>>,
    /// A value `completed` had when a launching thread last read it (`throttle`):
    /// completion only grows, so while fewer than [`QUEUE_DEPTH`] launches were
    /// made since, the queue cannot be too deep and the worker's line is not read.
    completed_floor: CachePadded<AtomicU64>,
    /// Signalled when a record is queued while the worker sleeps (it waits on it).
    queued: Condvar,
    /// Set (under the queue's lock) while the worker sleeps on `queued`: an
    /// enqueue wakes it only then, so a launch onto a busy stream makes no system call.
    worker_sleeping: AtomicBool,
    /// Signalled when a record completes (synchronising threads and waiting workers wait on it).
    progressed: Condvar,
    worker_started: AtomicBool,
    /// The smallest sequence number a thread sleeping in `wait_for` waits for (0:
    /// none). `complete` takes the lock and wakes the sleepers only when it reaches
    /// that record: a host waiting for the last of a step's 1,500 launches is woken
    /// once, not at each of them (each wake-up is a system call on the worker and a
    /// context switch that took a core from the kernels: the LSTM step ran 14%
    /// slower queued than at the call).
    awaited: AtomicU64,
    /// The graph capture in progress on this stream (see [`crate::graph`]).
    capture: Mutex<Option<Capture>>,
    /// True while `capture` holds one: read on every launch, without the lock.
    capturing: AtomicBool,
    /// The last record a host thread saw complete (it waited for it, or a query
    /// said so): work the host launches afterwards, on any stream, comes after
    /// it in time (the sanitizer's host synchronisations).
    host_seen: AtomicU64,
}

impl StreamState {
    /// Sequence number of the last work item enqueued on this stream.
    pub fn submitted(&self) -> u64 {
        self.submitted.load(Ordering::Acquire)
    }
    /// True when the work item with sequence `seq` has finished.
    pub fn is_complete(&self, seq: u64) -> bool {
        self.completed.load(Ordering::Acquire) >= seq
    }

    /// Blocks until work `seq` has finished. The waiter registers `seq` in
    /// `awaited` before it checks, and `complete` stores before it reads
    /// `awaited` (both sequentially consistent): either the waiter sees the
    /// completion or the completer sees the registration and wakes it under the
    /// lock the waiter holds until it sleeps, so no wakeup is missed. A woken
    /// waiter whose record has not completed registers again.
    ///
    /// A host thread counts in [`host_waiting`] while it waits and first runs the
    /// wait hooks (helping with the kernel running now), polls, then sleeps.
    pub fn wait_for(&self, seq: u64) {
        let host = !on_stream_worker();
        if host {
            // Set before returning: the wait below ends only once `seq` has completed.
            self.saw(seq);
        }
        if self.is_complete(seq) {
            return;
        }
        if host {
            HOST_WAITERS.fetch_add(1, Ordering::SeqCst);
            let hooks = WAIT_HOOKS.get().copied();
            if let Some(h) = hooks {
                (h.help)();
            }
            let start = Instant::now();
            while !self.is_complete(seq) && start.elapsed() < HOST_SPIN {
                if hooks.is_some_and(|h| (h.crowding)()) {
                    break;
                }
                std::thread::yield_now();
            }
        }
        let mut q = self.lock();
        loop {
            let _ =
                self.awaited.fetch_update(Ordering::SeqCst, Ordering::SeqCst, |a| (a == 0 || seq < a).then_some(seq));
            if self.completed.load(Ordering::SeqCst) >= seq {
                break;
            }
            q = self.progressed.wait(q).unwrap_or_else(|e| e.into_inner());
        }
        drop(q);
        if host {
            HOST_WAITERS.fetch_sub(1, Ordering::SeqCst);
        }
    }

    /// The last record a host thread saw complete (see `host_seen`).
    pub fn host_seen(&self) -> u64 {
        self.host_seen.load(Ordering::Acquire)
    }

    /// A host thread saw record `seq` complete (a query that returned true).
    pub fn saw(&self, seq: u64) {
        self.host_seen.fetch_max(seq, Ordering::AcqRel);
    }

    /// The queue, also after a panic elsewhere poisoned its lock (records run outside it).
    fn lock(&self) -> std::sync::MutexGuard<'_, Queue> {
        self.queue.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Marks `seq` finished and wakes the waiters once the first of them is done.
    fn complete(&self, seq: u64) {
        self.completed.fetch_max(seq, Ordering::SeqCst);
        let awaited = self.awaited.load(Ordering::SeqCst);
        if awaited != 0 && seq >= awaited {
            let _q = self.lock();
            self.awaited.store(0, Ordering::SeqCst);
            self.progressed.notify_all();
        }
    }

    /// The worker: runs the records in order, forever (the thread is detached;
    /// process exit ends it). Only this thread pops from the queue.
    fn run_worker(self: Arc<Self>) {
        ON_WORKER.with(|w| w.set(true));
        let mut last = 0;
        let mut spent = None;
        loop {
            self.poll_for_work(last);
            let (seq, record) = {
                let mut q = self.lock();
                q.spent.extend(spent.take());
                loop {
                    if let Some(front) = q.records.pop_front() {
                        break front;
                    }
                    self.worker_sleeping.store(true, Ordering::Relaxed);
                    q = self.queued.wait(q).unwrap_or_else(|e| e.into_inner());
                    self.worker_sleeping.store(false, Ordering::Relaxed);
                }
            };
            match record {
                Record::Work(mut work) => {
                    let failed = match catch_unwind(AssertUnwindSafe(|| work.run())) {
                        Ok(Ok(())) => None,
                        Ok(Err(message)) => Some(message),
                        Err(panic) => Some(panic_message(&panic)),
                    };
                    if let Some(message) = failed {
                        self.lock().error.get_or_insert(message);
                    }
                    spent = Some(work);
                }
                Record::Wait { state, seq } => state.wait_for(seq),
                Record::Marker(at) => {
                    let _ = at.set(Instant::now());
                }
            }
            self.complete(seq);
            last = seq;
        }
    }

    /// Polls, without the lock, until something was submitted after `last` or
    /// [`WORKER_SPIN`] has passed (an inline launch also counts; the worker then
    /// finds the queue empty and sleeps).
    fn poll_for_work(&self, last: u64) {
        let start = Instant::now();
        while self.submitted() <= last && start.elapsed() < WORKER_SPIN {
            // Yielding, not a pure spin: on a machine with as few cores as threads, a
            // worker that shares its core with the launching thread would otherwise
            // take the core from the very thread it waits for.
            std::thread::yield_now();
        }
    }
}

fn panic_message(panic: &Box<dyn std::any::Any + Send>) -> String {
    let what = panic.downcast_ref::<&str>().map(|s| s.to_string()).or_else(|| panic.downcast_ref::<String>().cloned());
    format!("panicked: {}", what.unwrap_or_else(|| "(no message)".into()))
}

/// A point in one stream's work, passed once the stream's work up to `seq`
/// has completed (what the caching allocator waits for before it reuses a
/// block that other streams used).
#[derive(Debug, Clone)]
pub struct Fence {
    state: Arc<StreamState>,
    seq: u64,
}

impl Fence {
    /// True when the stream has run everything enqueued before the fence.
    pub fn passed(&self) -> bool {
        self.state.is_complete(self.seq)
    }

    /// Waits (asleep) until the fence has passed.
    pub fn wait(&self) {
        self.state.wait_for(self.seq);
    }

    /// A fence that passes when the returned [`Hold`] is dropped: memory a graph's
    /// replays use (a pinned buffer of a captured copy) stays allocated while the
    /// graph that holds it lives.
    pub fn hold() -> (Fence, Hold) {
        let state = Arc::new(StreamState::default());
        (Fence { state: Arc::clone(&state), seq: 1 }, Hold(state))
    }
}

/// Keeps a [`Fence::hold`] fence from passing until dropped.
#[derive(Debug)]
pub struct Hold(Arc<StreamState>);

impl Drop for Hold {
    fn drop(&mut self) {
        self.0.complete(1);
    }
}

/// All streams of one device.
#[derive(Debug)]
pub struct Streams {
    device: usize,
    /// Round-robin cursors of the normal- and high-priority pools.
    next_normal: AtomicUsize,
    next_high: AtomicUsize,
    /// Counters of every stream, indexed by id; the length never changes.
    states: Box<[Arc<StreamState>]>,
}

impl Streams {
    pub(crate) fn new(device: usize) -> Streams {
        Streams {
            device,
            next_normal: AtomicUsize::new(0),
            next_high: AtomicUsize::new(0),
            states: (0..STREAMS_PER_DEVICE).map(|_| Arc::default()).collect(),
        }
    }

    /// `cudaStreamCreateWithPriority` as PyTorch does it: the next stream of
    /// the pool of `priority`'s class (negative = high priority), round-robin.
    pub fn create(&self, priority: i32) -> StreamId {
        self.from_pool(Priority::from_number(priority))
    }

    /// A pool stream of the given class, round-robin over its `POOL_SIZE` streams.
    pub fn from_pool(&self, priority: Priority) -> StreamId {
        let cursor = match priority {
            Priority::Normal => &self.next_normal,
            Priority::High => &self.next_high,
        };
        priority.first_id() + (cursor.fetch_add(1, Ordering::Relaxed) % POOL_SIZE as usize) as StreamId
    }

    /// Number of streams whose state this device tracks (fixed).
    pub fn len(&self) -> usize {
        self.states.len()
    }

    /// Always false: a device has at least its default stream.
    pub fn is_empty(&self) -> bool {
        false
    }

    /// True when `id` names a stream of this device.
    pub fn is_valid(&self, id: StreamId) -> bool {
        usize::try_from(id).is_ok_and(|i| i < self.states.len())
    }

    /// Priority number of stream `id` as CUDA reports it: 0, or -1 for the high-priority pool.
    ///
    /// Errors: [`Error::InvalidStream`].
    pub fn priority(&self, id: StreamId) -> Result<i32> {
        self.get(id)?;
        Ok(if id >= Priority::High.first_id() { -1 } else { 0 })
    }

    fn get(&self, id: StreamId) -> Result<&Arc<StreamState>> {
        usize::try_from(id)
            .ok()
            .and_then(|i| self.states.get(i))
            .ok_or(Error::InvalidStream { device: self.device, stream: id })
    }

    /// Counters of stream `id`.
    ///
    /// Errors: [`Error::InvalidStream`] for an id that names no stream of this device.
    pub fn state(&self, id: StreamId) -> Result<Arc<StreamState>> {
        self.get(id).cloned()
    }

    /// A fence after the work enqueued on stream `id` so far.
    ///
    /// Errors: [`Error::InvalidStream`].
    pub fn fence(&self, id: StreamId) -> Result<Fence> {
        let state = Arc::clone(self.get(id)?);
        let seq = state.submitted();
        Ok(Fence { state, seq })
    }

    /// Fences after the work enqueued so far on every stream of the device.
    pub fn fences(&self) -> Vec<Fence> {
        self.states.iter().map(|s| Fence { state: Arc::clone(s), seq: s.submitted() }).collect()
    }

    /// `cudaStreamWaitEvent`: work enqueued on stream `id` from now on runs
    /// after work `seq` of `state`'s stream. Never blocks the host: the wait is
    /// a record the stream's worker runs (nothing, when that work is done).
    ///
    /// Errors: [`Error::InvalidStream`].
    pub fn wait(&self, id: StreamId, state: Arc<StreamState>, seq: u64) -> Result<()> {
        let own = self.get(id)?;
        if state.is_complete(seq) || Arc::ptr_eq(own, &state) {
            return Ok(());
        }
        self.refuse_in_capture(id, "waiting for another stream's work (graphs capture one stream)")?;
        self.enqueue(id, Record::Wait { state, seq }).map(|_| ())
    }

    /// `cudaLaunchKernel`, run inline: `work` runs on the calling thread once the
    /// stream's queued records have finished, and has finished on return.
    /// Returns its sequence number and result.
    ///
    /// Errors: [`Error::InvalidStream`]; [`Error::Capture`] on a capturing
    /// stream (work whose result the host needs now cannot be a graph node).
    pub fn launch<R>(&self, id: StreamId, work: impl FnOnce() -> R) -> Result<(u64, R)> {
        self.refuse_in_capture(id, "work that runs at the call (its result is needed on the host now)")?;
        let state = self.get(id)?;
        // Queued records run first (stream order); with none queued this is two atomic loads.
        state.wait_for(state.submitted());
        let seq = state.submitted.fetch_add(1, Ordering::AcqRel) + 1;
        let out = work();
        state.complete(seq);
        Ok((seq, out))
    }

    /// Appends `record` to stream `id`'s queue and returns its sequence number
    /// at once; the stream's worker runs it after everything queued before it.
    ///
    /// Errors: [`Error::InvalidStream`].
    pub fn enqueue(&self, id: StreamId, record: Record) -> Result<u64> {
        self.refuse_in_capture(id, "work queued outside the graph")?;
        let state = self.get(id)?;
        // Read first: a swap at every launch would write the line each time.
        if !state.worker_started.load(Ordering::Acquire) && !state.worker_started.swap(true, Ordering::AcqRel) {
            let worker = Arc::clone(state);
            let spawned = std::thread::Builder::new()
                .name(format!("oxide{}-stream{id}", self.device))
                .spawn(move || worker.run_worker());
            if let Err(e) = spawned {
                // Nothing was queued: the next enqueue tries to start the worker again.
                state.worker_started.store(false, Ordering::Release);
                return Err(Error::WorkerStart { device: self.device, stream: id, message: e.to_string() });
            }
        }
        let mut q = state.lock();
        // Numbered under the lock, so the queue is in sequence order.
        let seq = state.submitted.fetch_add(1, Ordering::AcqRel) + 1;
        q.records.push_back((seq, record));
        // Both sides read and write the flag under the lock, so no wake-up is missed.
        if state.worker_sleeping.load(Ordering::Relaxed) {
            state.queued.notify_one();
        }
        // Work the worker has run moves to this thread's list and is freed once the
        // lock is released; the two lists trade buffers, so neither allocates for them.
        // (During thread exit the list is gone: the work waits for the next launch.)
        let with_spent = |f: &mut dyn FnMut(&mut Vec<Work>)| {
            let _ = SPENT.try_with(|s| s.try_borrow_mut().map(|mut s| f(&mut s)));
        };
        with_spent(&mut |spent| std::mem::swap(&mut q.spent, spent));
        drop(q);
        with_spent(&mut |spent| spent.clear());
        Ok(seq)
    }

    /// Keeps stream `id`'s queue about as deep as CUDA's launch queue: when more
    /// than [`QUEUE_DEPTH`] records are still to run, waits (and, waiting, helps)
    /// until half of them have, instead of letting a host that runs far ahead grow
    /// the queue without bound. Half, so that a host kept ahead waits once per
    /// `QUEUE_DEPTH / 2` launches, not at every launch. Called by launching threads
    /// before they enqueue a kernel, holding no lock a record could need.
    ///
    /// Errors: [`Error::InvalidStream`].
    pub fn throttle(&self, id: StreamId) -> Result<()> {
        let state = self.get(id)?;
        let submitted = state.submitted();
        if submitted < QUEUE_DEPTH || state.completed_floor.load(Ordering::Relaxed) >= submitted - QUEUE_DEPTH {
            return Ok(());
        }
        state.completed_floor.fetch_max(state.completed.load(Ordering::Acquire), Ordering::Relaxed);
        if !state.is_complete(submitted - QUEUE_DEPTH) {
            state.wait_for(submitted - QUEUE_DEPTH / 2);
        }
        Ok(())
    }

    /// `cudaStreamQuery`: true when all work enqueued on `id` has finished,
    /// the record running now included.
    pub fn query(&self, id: StreamId) -> Result<bool> {
        // As cudaStreamQuery: a capturing stream has no completion to report.
        self.refuse_in_capture(id, "querying the capturing stream")?;
        let s = self.get(id)?;
        let seq = s.submitted();
        let done = s.is_complete(seq);
        if done {
            s.saw(seq);
        }
        Ok(done)
    }

    /// `cudaStreamSynchronize`: waits until all work enqueued on `id` has
    /// finished, then reports the first error a queued record met since the
    /// last synchronisation (once).
    ///
    /// Errors: [`Error::InvalidStream`], [`Error::Deferred`].
    pub fn synchronize(&self, id: StreamId) -> Result<()> {
        self.refuse_in_capture(id, "synchronizing the capturing stream")?;
        let state = self.get(id)?;
        state.wait_for(state.submitted());
        match state.lock().error.take() {
            Some(message) => Err(Error::Deferred { device: self.device, stream: id, message }),
            None => Ok(()),
        }
    }

    /// `cudaDeviceSynchronize`: waits for every stream of the device; reports
    /// the first deferred error found (the others stay for their streams).
    pub fn synchronize_all(&self) -> Result<()> {
        for id in 0..self.states.len() as StreamId {
            self.refuse_in_capture(id, "synchronizing the device of a capturing stream")?;
        }
        for s in self.states.iter() {
            s.wait_for(s.submitted());
        }
        for id in 0..self.states.len() as StreamId {
            self.synchronize(id)?;
        }
        Ok(())
    }
}

/// Graph capture (see [`crate::graph`]).
impl Streams {
    fn capture_error(&self, id: StreamId, message: String) -> Error {
        Error::Capture { device: self.device, stream: id, message }
    }

    fn capture_lock(&self, id: StreamId) -> Result<std::sync::MutexGuard<'_, Option<Capture>>> {
        Ok(self.get(id)?.capture.lock().unwrap_or_else(|e| e.into_inner()))
    }

    /// `cudaStreamBeginCapture`: from now on, launches aimed at stream `id`
    /// are kept as graph nodes ([`Self::capture`]) instead of running. Work
    /// queued before keeps running; replays are queued after it.
    ///
    /// Errors: [`Error::InvalidStream`]; [`Error::Capture`] when the stream captures already.
    pub fn begin_capture(&self, id: StreamId) -> Result<()> {
        let mut capture = self.capture_lock(id)?;
        if capture.is_some() {
            return Err(self.capture_error(id, "the stream is already capturing a graph".into()));
        }
        *capture = Some(Capture::default());
        self.get(id)?.capturing.store(true, Ordering::Release);
        Ok(())
    }

    /// True while stream `id` captures (`cudaStreamIsCapturing`; false for an invalid id).
    pub fn is_capturing(&self, id: StreamId) -> bool {
        self.get(id).is_ok_and(|s| s.capturing.load(Ordering::Acquire))
    }

    /// Adds `node` to the capture of stream `id`.
    ///
    /// Errors: [`Error::Capture`] when the stream is not capturing, or its
    /// capture was invalidated (the node is dropped: the graph will not be replayed).
    pub fn capture(&self, id: StreamId, name: &'static str, node: Node) -> Result<()> {
        let mut capture = self.capture_lock(id)?;
        match capture.as_mut() {
            None => Err(self.capture_error(id, "the stream is not capturing a graph".into())),
            Some(Capture { invalidated: Some(reason), .. }) => Err(self.capture_error(
                id,
                format!("the graph capture was invalidated by an earlier error ({reason}); end it and capture again"),
            )),
            Some(c) => {
                c.nodes.push(node);
                c.names.push(name);
                Ok(())
            }
        }
    }

    /// `cudaStreamEndCapture`: stops capturing on stream `id` and returns the graph.
    ///
    /// Errors: [`Error::Capture`] when the stream was not capturing, or when the
    /// capture was invalidated (its nodes are dropped).
    pub fn end_capture(&self, id: StreamId) -> Result<Graph> {
        let mut capture = self.capture_lock(id)?;
        let taken = capture.take();
        self.get(id)?.capturing.store(false, Ordering::Release);
        match taken {
            None => Err(self.capture_error(id, "the stream is not capturing a graph".into())),
            Some(Capture { invalidated: Some(reason), .. }) => {
                Err(self.capture_error(id, format!("the graph capture was invalidated: {reason}")))
            }
            Some(c) => Ok(Graph::new(c.nodes, c.names)),
        }
    }

    /// Refuses `action` on a capturing stream: it invalidates the capture (the
    /// first refusal is what the capture ends with) and returns the error.
    ///
    /// Errors: [`Error::Capture`] while stream `id` captures.
    pub fn refuse_in_capture(&self, id: StreamId, action: &str) -> Result<()> {
        if !self.is_capturing(id) {
            return Ok(());
        }
        let reason = format!("{action} cannot be captured in a graph");
        if let Some(c) = self.capture_lock(id)?.as_mut() {
            c.invalidated.get_or_insert_with(|| reason.clone());
        }
        Err(self.capture_error(id, format!("{reason}; the capture is invalidated")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn capture_keeps_launches_and_replays_them_in_order() {
        let s = Streams::new(0);
        let log = Arc::new(Mutex::new(Vec::new()));
        s.begin_capture(7).unwrap();
        assert!(s.is_capturing(7) && !s.is_capturing(6));
        assert!(s.begin_capture(7).is_err(), "one capture per stream");
        for k in 0..3 {
            let l = Arc::clone(&log);
            s.capture(
                7,
                "log",
                Box::new(move || {
                    l.lock().unwrap().push(k);
                    Ok(())
                }),
            )
            .unwrap();
        }
        assert!(log.lock().unwrap().is_empty(), "capturing runs nothing");
        assert!(s.synchronize(6).is_ok(), "other streams are not affected");
        let g = s.end_capture(7).unwrap();
        assert!(!s.is_capturing(7) && g.len() == 3);
        for _ in 0..2 {
            let g = g.clone();
            s.enqueue(7, Record::Work(Work::new(move || g.run()))).unwrap();
        }
        s.synchronize(7).unwrap();
        assert_eq!(*log.lock().unwrap(), [0, 1, 2, 0, 1, 2]);
        assert!(s.end_capture(7).is_err(), "not capturing any more");
    }

    #[test]
    fn what_cannot_be_captured_invalidates_the_capture() {
        let s = Streams::new(0);
        s.begin_capture(3).unwrap();
        s.capture(3, "nothing", Box::new(|| Ok(()))).unwrap();
        let e = s.synchronize(3).unwrap_err().to_string();
        assert!(e.contains("synchronizing the capturing stream cannot be captured"), "{e}");
        assert!(s.launch(3, || ()).is_err());
        let e = s.capture(3, "nothing", Box::new(|| Ok(()))).unwrap_err().to_string();
        assert!(e.contains("invalidated by an earlier error (synchronizing"), "{e}");
        assert!(s.synchronize_all().is_err());
        let e = s.end_capture(3).unwrap_err().to_string();
        assert!(e.contains("invalidated: synchronizing the capturing stream"), "{e}");
        // The stream is usable again, and nothing captured runs.
        s.synchronize(3).unwrap();
        assert_eq!(s.launch(3, || 5).unwrap().1, 5);
    }

    #[test]
    fn a_failing_node_stops_the_replay_and_is_reported() {
        let s = Streams::new(0);
        let ran = Arc::new(AtomicUsize::new(0));
        s.begin_capture(2).unwrap();
        s.capture(2, "fails", Box::new(|| Err("index 9 is out of bounds".into()))).unwrap();
        let r = Arc::clone(&ran);
        s.capture(
            2,
            "counts",
            Box::new(move || {
                r.fetch_add(1, Ordering::SeqCst);
                Ok(())
            }),
        )
        .unwrap();
        let g = s.end_capture(2).unwrap();
        s.enqueue(2, Record::Work(Work::new(move || g.run()))).unwrap();
        let e = s.synchronize(2).unwrap_err().to_string();
        assert!(e.contains("launch 1 of 2: index 9 is out of bounds"), "{e}");
        assert_eq!(ran.load(Ordering::SeqCst), 0);
    }

    #[test]
    fn ids_and_pools() {
        let s = Streams::new(0);
        let pool: Vec<_> = (0..POOL_SIZE + 1).map(|_| s.from_pool(Priority::Normal)).collect();
        assert_eq!(pool[0], 1);
        assert_eq!(pool[POOL_SIZE as usize - 1], POOL_SIZE);
        assert_eq!(pool[POOL_SIZE as usize], 1, "pool wraps round-robin");
        let high = s.create(-1);
        assert_eq!(high, POOL_SIZE + 1, "negative priority takes the high-priority pool");
        assert_eq!((s.priority(high).unwrap(), s.priority(3).unwrap(), s.priority(0).unwrap()), (-1, 0, 0));
        let created = s.create(0);
        assert_eq!(created, 2, "create continues the normal pool's round-robin");
        assert!(s.is_valid(DEFAULT_STREAM) && s.is_valid(2 * POOL_SIZE));
        assert!(!s.is_valid(2 * POOL_SIZE + 1) && !s.is_valid(-1));
        assert!(matches!(s.query(2 * POOL_SIZE + 1), Err(Error::InvalidStream { .. })));
        assert!(matches!(s.priority(-3), Err(Error::InvalidStream { .. })));
    }

    #[test]
    fn creating_streams_does_not_grow_the_device() {
        let s = Streams::new(0);
        let before = s.len();
        let mut seen = std::collections::BTreeSet::new();
        for i in 0..10_000 {
            let id = s.create(if i % 2 == 0 { 0 } else { -1 });
            s.launch(id, || ()).unwrap();
            seen.insert(id);
        }
        assert_eq!(s.len(), before);
        assert_eq!(s.len(), STREAMS_PER_DEVICE);
        assert_eq!(seen.len(), 2 * POOL_SIZE as usize, "ids repeat: every pool stream was handed out");
        assert_eq!(*seen.first().unwrap(), 1);
        assert_eq!(*seen.last().unwrap(), 2 * POOL_SIZE);
        s.synchronize_all().unwrap();
    }

    #[test]
    fn launch_is_ordered_and_complete() {
        let s = Streams::new(0);
        let id = s.create(0);
        let (seq1, v) = s.launch(id, || 41 + 1).unwrap();
        let (seq2, _) = s.launch(id, || ()).unwrap();
        assert_eq!((seq1, seq2, v), (1, 2, 42));
        assert!(s.query(id).unwrap());
        s.synchronize(id).unwrap();
        s.synchronize_all().unwrap();
        let again = (0..POOL_SIZE).map(|_| s.create(0)).find(|&x| x == id).unwrap();
        assert_eq!(s.launch(again, || ()).unwrap().0, 3, "a reused id names the same stream and keeps its order");
    }

    use std::sync::atomic::AtomicU32;
    use std::time::Duration;

    fn work(f: impl FnOnce() + Send + 'static) -> Record {
        Record::Work(Work::new(move || {
            f();
            Ok(())
        }))
    }

    #[test]
    fn enqueue_returns_before_the_work_has_run() {
        let s = Streams::new(0);
        let gate = Arc::new(AtomicBool::new(false));
        let g = Arc::clone(&gate);
        let seq = s
            .enqueue(
                1,
                work(move || {
                    while !g.load(Ordering::Acquire) {
                        std::thread::sleep(Duration::from_millis(1));
                    }
                }),
            )
            .unwrap();
        assert_eq!(seq, 1);
        assert!(!s.query(1).unwrap(), "the record is still running");
        gate.store(true, Ordering::Release);
        s.synchronize(1).unwrap();
        assert!(s.query(1).unwrap());
        assert!(s.query(0).unwrap(), "other streams are unaffected");
    }

    #[test]
    fn throttle_keeps_the_queue_at_most_queue_depth_deep() {
        let s = Streams::new(0);
        let gate = Arc::new(AtomicBool::new(false));
        let g = Arc::clone(&gate);
        s.enqueue(
            5,
            work(move || {
                while !g.load(Ordering::Acquire) {
                    std::thread::sleep(Duration::from_millis(1));
                }
            }),
        )
        .unwrap();
        // Up to QUEUE_DEPTH records behind a blocked one: no launch waits.
        for _ in 1..QUEUE_DEPTH {
            s.throttle(5).unwrap();
            s.enqueue(5, work(|| {})).unwrap();
        }
        let host = Instant::now();
        s.throttle(5).unwrap();
        assert!(host.elapsed() < Duration::from_millis(25), "a queue of QUEUE_DEPTH records does not block");
        s.enqueue(5, work(|| {})).unwrap();
        // One more would make it deeper: throttle waits until half the queue has run.
        let opener = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(60));
            gate.store(true, Ordering::Release);
        });
        let host = Instant::now();
        s.throttle(5).unwrap();
        assert!(host.elapsed() >= Duration::from_millis(40), "throttle waited for the blocked record");
        let state = s.state(5).unwrap();
        assert!(state.is_complete(state.submitted() - QUEUE_DEPTH / 2), "half the queue has run");
        opener.join().unwrap();
        s.synchronize(5).unwrap();
    }

    #[test]
    fn records_run_in_stream_order_and_inline_launches_wait_for_them() {
        let s = Streams::new(0);
        let log = Arc::new(Mutex::new(Vec::new()));
        for k in 0..200 {
            let l = Arc::clone(&log);
            s.enqueue(2, work(move || l.lock().unwrap().push(k))).unwrap();
        }
        // An inline launch is ordered after the queued records.
        let (seq, len) = s.launch(2, || log.lock().unwrap().len()).unwrap();
        assert_eq!((seq, len), (201, 200));
        assert_eq!(*log.lock().unwrap(), (0..200).collect::<Vec<_>>());
    }

    #[test]
    fn wait_orders_streams_without_blocking_the_host() {
        let s = Streams::new(0);
        let flag = Arc::new(AtomicU32::new(0));
        let f = Arc::clone(&flag);
        let seq = s
            .enqueue(
                3,
                work(move || {
                    std::thread::sleep(Duration::from_millis(30));
                    f.store(7, Ordering::Release);
                }),
            )
            .unwrap();
        let host = Instant::now();
        s.enqueue(4, Record::Wait { state: s.state(3).unwrap(), seq }).unwrap();
        let seen = Arc::new(AtomicU32::new(0));
        let (f, out) = (Arc::clone(&flag), Arc::clone(&seen));
        s.enqueue(4, work(move || out.store(f.load(Ordering::Acquire), Ordering::Release))).unwrap();
        assert!(host.elapsed() < Duration::from_millis(25), "enqueueing a wait does not block the host");
        s.synchronize(4).unwrap();
        assert_eq!(seen.load(Ordering::Acquire), 7, "stream 4 ran after stream 3's record");
    }

    #[test]
    fn run_work_drops_its_captures_at_once_and_its_allocation_at_the_next_launch() {
        let s = Streams::new(0);
        let held = Arc::new(());
        let h = Arc::clone(&held);
        s.enqueue(6, work(move || assert!(Arc::strong_count(&h) == 2))).unwrap();
        s.synchronize(6).unwrap();
        // What a kernel captured (a tensor's storage, say) is released when it runs,
        // not when its emptied allocation is freed.
        assert_eq!(Arc::strong_count(&held), 1);
        let state = s.state(6).unwrap();
        // The worker hands it back when it next takes the lock (after its poll).
        let start = Instant::now();
        while state.lock().spent.is_empty() && start.elapsed() < Duration::from_secs(5) {
            std::thread::sleep(Duration::from_millis(1));
        }
        assert_eq!(state.lock().spent.len(), 1, "the worker hands the run work back");
        // The next launch waits on a gate, so the worker cannot run it and hand it
        // back before the assert looks, however long this thread is descheduled.
        let gate = Arc::new(AtomicBool::new(false));
        let g = Arc::clone(&gate);
        s.enqueue(
            6,
            work(move || {
                while !g.load(Ordering::Acquire) {
                    std::thread::yield_now();
                }
            }),
        )
        .unwrap();
        assert!(state.lock().spent.is_empty(), "the next launch takes it");
        gate.store(true, Ordering::Release);
        s.synchronize(6).unwrap();
        let mut w = Work::new(|| Err("once".into()));
        assert!(w.run().is_err());
        assert!(w.run().is_ok(), "a second run does nothing");
    }

    #[test]
    fn errors_are_reported_at_the_next_synchronisation_once() {
        let s = Streams::new(0);
        s.enqueue(5, Record::Work(Work::new(|| Err("index 9 is out of bounds for size 3".into())))).unwrap();
        s.enqueue(5, Record::Work(Work::new(|| panic!("kernel bug")))).unwrap();
        let ran = Arc::new(AtomicBool::new(false));
        let r = Arc::clone(&ran);
        s.enqueue(5, work(move || r.store(true, Ordering::Release))).unwrap();
        let e = s.synchronize(5).unwrap_err();
        assert!(matches!(&e, Error::Deferred { stream: 5, message, .. } if message.contains("out of bounds")), "{e}");
        assert!(ran.load(Ordering::Acquire), "records after a failed one still run");
        s.synchronize(5).unwrap();
        // The panicking record did not kill the worker: the stream still runs work.
        s.enqueue(5, work(|| ())).unwrap();
        s.synchronize(5).unwrap();
    }

    #[test]
    fn waiters_for_different_records_each_wake_when_theirs_completes() {
        // Sleepers are woken only when the first record any of them waits for
        // completes; the others must register again and still be woken.
        let s = Arc::new(Streams::new(0));
        let done = Arc::new(AtomicU32::new(0));
        for _ in 0..120 {
            let d = Arc::clone(&done);
            s.enqueue(
                7,
                work(move || {
                    std::thread::sleep(Duration::from_micros(200));
                    d.fetch_add(1, Ordering::SeqCst);
                }),
            )
            .unwrap();
        }
        let state = s.state(7).unwrap();
        let waiters: Vec<_> = [120u64, 5, 60, 30, 119, 1, 90, 61]
            .into_iter()
            .map(|seq| {
                let (state, done) = (Arc::clone(&state), Arc::clone(&done));
                std::thread::spawn(move || {
                    state.wait_for(seq);
                    assert!(done.load(Ordering::SeqCst) as u64 >= seq, "woken before record {seq} completed");
                })
            })
            .collect();
        for w in waiters {
            w.join().unwrap();
        }
        s.synchronize(7).unwrap();
    }

    #[test]
    fn markers_time_the_stream_not_the_host() {
        let s = Streams::new(0);
        let (a, b) = (Arc::new(OnceLock::new()), Arc::new(OnceLock::new()));
        s.enqueue(6, Record::Marker(Arc::clone(&a))).unwrap();
        s.enqueue(6, work(|| std::thread::sleep(Duration::from_millis(20)))).unwrap();
        s.enqueue(6, Record::Marker(Arc::clone(&b))).unwrap();
        s.synchronize_all().unwrap();
        let ms = b.get().unwrap().duration_since(*a.get().unwrap()).as_secs_f64() * 1e3;
        assert!((19.0..2000.0).contains(&ms), "{ms}");
    }
}
