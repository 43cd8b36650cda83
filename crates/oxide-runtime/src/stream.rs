//! Streams: ordered queues of work on one device (the `cudaStream_t` layer).
//!
//! Ids follow CUDA's split: id 0 is the default stream, ids
//! `1..=POOL_SIZE` are the pool streams that `getStreamFromGlobalPool` hands
//! out round-robin, larger ids are streams made by [`Streams::create`].
//! Execution is currently inline: [`Streams::launch`] runs the work at once
//! on the calling thread. The API is stream-ordered all the same (every
//! piece of work names its stream and bumps that stream's sequence
//! numbers), so an asynchronous worker per stream can replace the inline
//! path without changing any caller.

use std::collections::HashMap;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use crate::error::{Error, Result};

/// Stream handle value; 0 is the default stream.
pub type StreamId = i64;
/// The default (legacy, per-device) stream.
pub const DEFAULT_STREAM: StreamId = 0;
/// Number of pool streams per device (CUDA uses 32 per priority).
pub const POOL_SIZE: i64 = 32;

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
    next_created: AtomicI64,
    next_pool: AtomicI64,
    /// The default stream's counters, outside the map: nearly every launch goes to
    /// it, and this way it costs no lock or hash lookup.
    default: Arc<StreamState>,
    /// Every other stream that has been used.
    states: Mutex<HashMap<StreamId, Arc<StreamState>>>,
}

impl Streams {
    pub(crate) fn new(device: usize) -> Streams {
        Streams {
            device,
            next_created: AtomicI64::new(POOL_SIZE + 1),
            next_pool: AtomicI64::new(0),
            default: Arc::default(),
            states: Mutex::new(HashMap::new()),
        }
    }

    /// `cudaStreamCreate`: a fresh stream that no one else is handed.
    pub fn create(&self) -> StreamId {
        self.next_created.fetch_add(1, Ordering::Relaxed)
    }

    /// A pool stream, round-robin over `1..=POOL_SIZE`.
    pub fn from_pool(&self) -> StreamId {
        1 + self.next_pool.fetch_add(1, Ordering::Relaxed) % POOL_SIZE
    }

    /// True when `id` names a stream that exists (or may exist) on this device.
    pub fn is_valid(&self, id: StreamId) -> bool {
        id >= 0 && id < self.next_created.load(Ordering::Relaxed)
    }

    /// Counters of stream `id`.
    ///
    /// Errors: [`Error::InvalidStream`] for an id this device never handed out.
    pub fn state(&self, id: StreamId) -> Result<Arc<StreamState>> {
        if id == DEFAULT_STREAM {
            return Ok(self.default.clone());
        }
        if !self.is_valid(id) {
            return Err(Error::InvalidStream { device: self.device, stream: id });
        }
        let mut states = self.states.lock().unwrap_or_else(|e| e.into_inner());
        Ok(states.entry(id).or_default().clone())
    }

    /// `cudaLaunchKernel`: enqueue `work` on stream `id` and return its
    /// sequence number. Inline execution: `work` has finished on return.
    pub fn launch<R>(&self, id: StreamId, work: impl FnOnce() -> R) -> Result<(u64, R)> {
        let other;
        let state = if id == DEFAULT_STREAM {
            &self.default
        } else {
            other = self.state(id)?;
            &other
        };
        let seq = state.submitted.fetch_add(1, Ordering::AcqRel) + 1;
        let out = work();
        state.completed.fetch_max(seq, Ordering::AcqRel);
        Ok((seq, out))
    }

    /// `cudaStreamQuery`: true when all work enqueued on `id` has finished.
    pub fn query(&self, id: StreamId) -> Result<bool> {
        let s = self.state(id)?;
        Ok(s.is_complete(s.submitted()))
    }

    /// `cudaStreamSynchronize`: wait until all work enqueued on `id` has finished.
    pub fn synchronize(&self, id: StreamId) -> Result<()> {
        let s = self.state(id)?;
        let target = s.submitted();
        while !s.is_complete(target) {
            std::thread::yield_now();
        }
        Ok(())
    }

    /// `cudaDeviceSynchronize`: wait for every stream of the device.
    pub fn synchronize_all(&self) -> Result<()> {
        let ids: Vec<StreamId> = self.states.lock().unwrap_or_else(|e| e.into_inner()).keys().copied().collect();
        std::iter::once(DEFAULT_STREAM).chain(ids).try_for_each(|id| self.synchronize(id))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_and_pool() {
        let s = Streams::new(0);
        let pool: Vec<_> = (0..POOL_SIZE + 1).map(|_| s.from_pool()).collect();
        assert_eq!(pool[0], 1);
        assert_eq!(pool[POOL_SIZE as usize], 1, "pool wraps round-robin");
        let a = s.create();
        let b = s.create();
        assert!(a > POOL_SIZE && b == a + 1);
        assert!(s.is_valid(DEFAULT_STREAM) && s.is_valid(b) && !s.is_valid(b + 1) && !s.is_valid(-1));
        assert!(matches!(s.query(b + 5), Err(Error::InvalidStream { .. })));
    }

    #[test]
    fn launch_is_ordered_and_complete() {
        let s = Streams::new(0);
        let id = s.create();
        let (seq1, v) = s.launch(id, || 41 + 1).unwrap();
        let (seq2, _) = s.launch(id, || ()).unwrap();
        assert_eq!((seq1, seq2, v), (1, 2, 42));
        assert!(s.query(id).unwrap());
        s.synchronize(id).unwrap();
        s.synchronize_all().unwrap();
    }
}
