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
//! Execution is currently inline: [`Streams::launch`] runs the work at once
//! on the calling thread. The API is stream-ordered all the same (every
//! piece of work names its stream and bumps that stream's sequence
//! numbers), so an asynchronous worker per stream can replace the inline
//! path without changing any caller; a bounded stream set then means a
//! bounded set of workers.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;

use crate::error::{Error, Result};

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

/// Progress counters of one stream: work items enqueued and finished.
#[derive(Debug, Default)]
pub struct StreamState {
    submitted: AtomicU64,
    completed: AtomicU64,
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

    /// `cudaLaunchKernel`: enqueue `work` on stream `id` and return its
    /// sequence number. Inline execution: `work` has finished on return.
    pub fn launch<R>(&self, id: StreamId, work: impl FnOnce() -> R) -> Result<(u64, R)> {
        let state = self.get(id)?;
        let seq = state.submitted.fetch_add(1, Ordering::AcqRel) + 1;
        let out = work();
        state.completed.fetch_max(seq, Ordering::AcqRel);
        Ok((seq, out))
    }

    /// `cudaStreamQuery`: true when all work enqueued on `id` has finished.
    pub fn query(&self, id: StreamId) -> Result<bool> {
        let s = self.get(id)?;
        Ok(s.is_complete(s.submitted()))
    }

    /// `cudaStreamSynchronize`: wait until all work enqueued on `id` has finished.
    pub fn synchronize(&self, id: StreamId) -> Result<()> {
        wait(self.get(id)?);
        Ok(())
    }

    /// `cudaDeviceSynchronize`: wait for every stream of the device.
    pub fn synchronize_all(&self) -> Result<()> {
        self.states.iter().for_each(wait);
        Ok(())
    }
}

fn wait(s: &Arc<StreamState>) {
    let target = s.submitted();
    while !s.is_complete(target) {
        std::thread::yield_now();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
}
