//! Caching device allocator, layered over [`DeviceMemory`] the way PyTorch's
//! CUDA caching allocator is layered over `cudaMalloc`.
//!
//! Memory strategy:
//! - requests are rounded up to 512 bytes; a freed block goes back to a cache
//!   keyed by the stream it was allocated on, and is reused only by a later
//!   request on that same stream (stream order guarantees the earlier user
//!   is done with it);
//! - a cached block serves a request if it is at most 25% larger, so a small
//!   request never pins a huge block;
//! - when the device is full, the cache is released and the request retried
//!   once (`num_alloc_retries`), then out-of-memory is reported with the
//!   requested, allocated, reserved and capacity bytes (`num_ooms`);
//! - `record_stream` marks a block as used by another stream, of this device
//!   or another one (as CUDA allows). Such a block, when freed, waits with a
//!   [`Fence`] per stream (CUDA records an event on each) and returns to the
//!   cache only once every fence has passed;
//! - the cache is released only when the device's queued work has run (the
//!   runtime waits before [`CachingAllocator::empty_cache`] and before the
//!   out-of-memory retry), since queued work may still read a freed block;
//! - private pools (CUDA's graph memory pools): while a stream captures a
//!   graph, its allocations come from the graph's pool ([`CachingAllocator::begin_pool`]),
//!   and blocks of a pool are cached apart, reused only by allocations routed
//!   to that pool and never released by `empty_cache` while a graph holds the
//!   pool ([`CachingAllocator::retain_pool`]): every replay writes the same
//!   addresses, so no other tensor may ever be given them.

use std::collections::BTreeSet;

use rustc_hash::FxHashMap;

use crate::error::{Error, Result};
use crate::memory::{round_up, DeviceMemory};
use crate::stream::{Fence, StreamId};

/// One statistic, as in `c10::CachingDeviceAllocator::Stat`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Stat {
    pub current: i64,
    pub peak: i64,
    pub allocated: i64,
    pub freed: i64,
}

impl Stat {
    fn increase(&mut self, n: i64) {
        self.current += n;
        self.allocated += n;
        self.peak = self.peak.max(self.current);
    }
    fn decrease(&mut self, n: i64) {
        self.current -= n;
        self.freed += n;
    }
    fn reset_peak(&mut self) {
        self.peak = self.current;
    }
    fn reset_accumulated(&mut self) {
        self.allocated = 0;
        self.freed = 0;
    }
}

/// Allocator statistics of one device; byte counts are bytes, the rest are counts.
/// Field names follow `torch.cuda.memory_stats()`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DeviceStats {
    /// Blocks handed to callers.
    pub allocation: Stat,
    /// Blocks obtained from device memory (cached or in use).
    pub segment: Stat,
    /// Bytes of blocks handed to callers (rounded block sizes).
    pub allocated_bytes: Stat,
    /// Bytes obtained from device memory, cached or in use.
    pub reserved_bytes: Stat,
    /// Bytes the callers asked for, before rounding.
    pub requested_bytes: Stat,
    /// Requests that had to release the cache and retry.
    pub num_alloc_retries: i64,
    /// Requests that failed with out-of-memory.
    pub num_ooms: i64,
    /// Calls into device memory `malloc`.
    pub num_device_alloc: i64,
    /// Calls into device memory `free`.
    pub num_device_free: i64,
}

/// A memory pool of a device: 0 is the general pool, others are private
/// pools of graphs (`MempoolId_t`).
pub type PoolId = u64;

/// The general pool.
pub const GENERAL_POOL: PoolId = 0;

/// The cache key of a free block: best fit by (pool, stream, size), then address.
type Key = (PoolId, StreamId, usize, usize);

#[derive(Debug)]
struct Block {
    size: usize,
    requested: usize,
    stream: StreamId,
    pool: PoolId,
    /// Other streams that use the block, as (device, stream).
    recorded_streams: Vec<(usize, StreamId)>,
}

/// Where a block of the caching allocator stands (a memory snapshot's block states).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BlockState {
    /// Held by a tensor.
    Active,
    /// Freed, waiting for work queued on other streams before it is reused.
    PendingFree,
    /// Freed and cached for reuse on its stream.
    Cached,
}

/// One block of the caching allocator (each block is its own segment of device
/// memory: the allocator reuses blocks whole and never splits them).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BlockInfo {
    pub ptr: usize,
    pub size: usize,
    /// Bytes the allocation asked for (0 for a cached block).
    pub requested: usize,
    pub stream: StreamId,
    pub state: BlockState,
    /// The pool the block belongs to ([`GENERAL_POOL`] or a graph's).
    pub pool: PoolId,
}

/// A segment of device memory obtained or given back (`cudaMalloc` / `cudaFree`
/// under CUDA's caching allocator): a memory history's `segment_alloc` / `segment_free`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SegmentEvent {
    Alloc { ptr: usize, size: usize },
    Free { ptr: usize, size: usize },
}

/// The caching allocator of one device.
pub struct CachingAllocator {
    memory: DeviceMemory,
    active: FxHashMap<usize, Block>,
    /// Freed blocks waiting for other streams' work, and the fences.
    pending: Vec<(Key, Vec<Fence>)>,
    /// Cached free blocks ordered by (pool, stream, size, ptr) for best-fit lookup.
    cached: BTreeSet<Key>,
    /// Private pools and the number of graphs (and captures) holding each.
    pools: FxHashMap<PoolId, usize>,
    /// Streams whose allocations go to a private pool (captures in progress).
    routes: Vec<(StreamId, PoolId)>,
    stats: DeviceStats,
    /// The most bytes the allocator may reserve (`set_per_process_memory_fraction`).
    limit: Option<usize>,
    /// Segment changes not taken yet, while a memory history records them.
    segment_events: Option<Vec<SegmentEvent>>,
}

impl CachingAllocator {
    pub(crate) fn new(memory: DeviceMemory) -> CachingAllocator {
        CachingAllocator {
            memory,
            active: FxHashMap::default(),
            pending: Vec::new(),
            cached: BTreeSet::new(),
            pools: FxHashMap::default(),
            routes: Vec::new(),
            stats: DeviceStats::default(),
            limit: None,
            segment_events: None,
        }
    }

    /// The underlying device memory.
    pub fn memory(&self) -> &DeviceMemory {
        &self.memory
    }

    /// The underlying device memory, for mapping other processes' memory into its range.
    pub fn memory_mut(&mut self) -> &mut DeviceMemory {
        &mut self.memory
    }

    /// Allocates at least `bytes` for use on `stream`; 0 bytes gives a null pointer.
    ///
    /// Errors: [`Error::OutOfMemory`] with requested/allocated/reserved/capacity bytes.
    pub fn allocate(&mut self, bytes: usize, stream: StreamId) -> Result<usize> {
        self.allocate_with(bytes, stream, || ())
    }

    /// [`Self::allocate`] where `wait_idle` waits for the device's queued work:
    /// when the device is full it is called before the cache is released for
    /// the one retry (queued work may still read a freed, cached block).
    ///
    /// Errors: [`Error::OutOfMemory`].
    pub fn allocate_with(&mut self, bytes: usize, stream: StreamId, wait_idle: impl FnOnce()) -> Result<usize> {
        if bytes == 0 {
            return Ok(0);
        }
        self.reclaim();
        let size = round_up(bytes);
        let limit = size + size / 4;
        let pool = self.routes.iter().find(|r| r.0 == stream).map_or(GENERAL_POOL, |r| r.1);
        // The smallest cached block of the pool and stream that is large enough,
        // taken if it is at most 25% larger. An open-ended range: a bounded one
        // descends the tree a second time for its upper end (callgrind: 555 to 507
        // instructions per allocation).
        let hit = self
            .cached
            .range((pool, stream, size, 0)..)
            .next()
            .copied()
            .filter(|&(p, s, block, _)| p == pool && s == stream && block <= limit);
        let (ptr, block_size) = match hit {
            Some(key) => {
                self.cached.remove(&key);
                (key.3, key.2)
            }
            None => (self.device_malloc(bytes, size, wait_idle)?, size),
        };
        self.active
            .insert(ptr, Block { size: block_size, requested: bytes, stream, pool, recorded_streams: Vec::new() });
        self.stats.allocation.increase(1);
        self.stats.allocated_bytes.increase(block_size as i64);
        self.stats.requested_bytes.increase(bytes as i64);
        Ok(ptr)
    }

    /// Moves pending blocks whose fences have all passed into the cache.
    fn reclaim(&mut self) {
        if self.pending.is_empty() {
            return;
        }
        let (done, waiting): (Vec<_>, Vec<_>) =
            std::mem::take(&mut self.pending).into_iter().partition(|(_, fences)| fences.iter().all(Fence::passed));
        self.pending = waiting;
        self.cached.extend(done.into_iter().map(|(key, _)| key));
    }

    /// True when the cache holds blocks that releasing could give back.
    pub fn has_cached(&self) -> bool {
        !self.cached.is_empty() || !self.pending.is_empty()
    }

    /// Every block the allocator holds, by address: what `torch.cuda.memory_snapshot` lists.
    pub fn blocks(&self) -> Vec<BlockInfo> {
        let active = self.active.iter().map(|(&ptr, b)| BlockInfo {
            ptr,
            size: b.size,
            requested: b.requested,
            stream: b.stream,
            state: BlockState::Active,
            pool: b.pool,
        });
        let pending = self.pending.iter().map(|&((pool, stream, size, ptr), _)| BlockInfo {
            ptr,
            size,
            requested: 0,
            stream,
            state: BlockState::PendingFree,
            pool,
        });
        let cached = self.cached.iter().map(|&(pool, stream, size, ptr)| BlockInfo {
            ptr,
            size,
            requested: 0,
            stream,
            state: BlockState::Cached,
            pool,
        });
        let mut all: Vec<BlockInfo> = active.chain(pending).chain(cached).collect();
        all.sort_by_key(|b| b.ptr);
        all
    }

    /// Sets the most bytes the allocator may reserve (`None`: the device's capacity):
    /// `torch.cuda.set_per_process_memory_fraction`. Blocks reserved already stay.
    pub fn set_limit(&mut self, limit: Option<usize>) {
        self.limit = limit;
    }

    /// The limit [`Self::set_limit`] set.
    pub fn limit(&self) -> Option<usize> {
        self.limit
    }

    /// A new segment from device memory, within the limit.
    fn segment(&mut self, bytes: usize, size: usize) -> Result<usize> {
        match self.limit {
            Some(limit) if self.memory.used() + size > limit => Err(Error::OutOfMemory {
                device: self.memory.device(),
                requested: bytes,
                allocated: 0,
                reserved: self.memory.used(),
                capacity: self.memory.capacity(),
                largest_free_block: None,
                limit: Some(limit),
            }),
            _ => self.memory.malloc(size),
        }
    }

    fn device_malloc(&mut self, bytes: usize, size: usize, wait_idle: impl FnOnce()) -> Result<usize> {
        let ptr = match self.segment(bytes, size) {
            Ok(p) => p,
            Err(Error::OutOfMemory { .. }) if self.has_cached() => {
                self.stats.num_alloc_retries += 1;
                wait_idle();
                self.empty_cache();
                self.segment(bytes, size).map_err(|e| self.oom(e, bytes))?
            }
            Err(e) => return Err(self.oom(e, bytes)),
        };
        self.stats.num_device_alloc += 1;
        self.stats.segment.increase(1);
        self.stats.reserved_bytes.increase(size as i64);
        if let Some(events) = self.segment_events.as_mut() {
            events.push(SegmentEvent::Alloc { ptr, size });
        }
        Ok(ptr)
    }

    /// Starts (`true`) or stops keeping [`SegmentEvent`]s for [`Self::take_segment_events`].
    pub fn record_segment_events(&mut self, on: bool) {
        self.segment_events = on.then(Vec::new);
    }

    /// The segment changes since the last call, oldest first.
    pub fn take_segment_events(&mut self) -> Vec<SegmentEvent> {
        self.segment_events.as_mut().map(std::mem::take).unwrap_or_default()
    }

    fn oom(&mut self, e: Error, bytes: usize) -> Error {
        match e {
            Error::OutOfMemory { device, capacity, largest_free_block, .. } => {
                self.stats.num_ooms += 1;
                Error::OutOfMemory {
                    device,
                    requested: bytes,
                    allocated: self.stats.allocated_bytes.current as usize,
                    reserved: self.stats.reserved_bytes.current as usize,
                    capacity,
                    largest_free_block,
                    limit: self.limit,
                }
            }
            other => other,
        }
    }

    /// Returns the block at `ptr` to the cache of the stream it was allocated on.
    ///
    /// Errors: [`Error::InvalidPointer`] when `ptr` is not a live block of this allocator.
    pub fn free(&mut self, ptr: usize) -> Result<()> {
        self.free_after(ptr, Vec::new())
    }

    /// [`Self::free`] for a block other streams used: it goes to the cache
    /// once every fence has passed (at once when there are none).
    ///
    /// Errors: [`Error::InvalidPointer`] when `ptr` is not a live block of this allocator.
    pub fn free_after(&mut self, ptr: usize, fences: Vec<Fence>) -> Result<()> {
        if ptr == 0 {
            return Ok(());
        }
        let block = self.active.remove(&ptr).ok_or(Error::InvalidPointer { ptr })?;
        self.stats.allocation.decrease(1);
        self.stats.allocated_bytes.decrease(block.size as i64);
        self.stats.requested_bytes.decrease(block.requested as i64);
        // A block of a pool no graph holds any more is an ordinary block again.
        let pool = if self.pools.contains_key(&block.pool) { block.pool } else { GENERAL_POOL };
        let key = (pool, block.stream, block.size, ptr);
        if fences.iter().all(Fence::passed) {
            self.cached.insert(key);
        } else {
            self.pending.push((key, fences));
        }
        Ok(())
    }

    /// `recordStream`: the block at `ptr` is also used by `stream` of `device`
    /// (any device: a peer copy reads it from there).
    ///
    /// Errors: [`Error::InvalidPointer`] when `ptr` is not the start of a live block.
    pub fn record_stream(&mut self, ptr: usize, device: usize, stream: StreamId) -> Result<()> {
        let own = self.memory.device();
        let block = self.active.get_mut(&ptr).ok_or(Error::InvalidPointer { ptr })?;
        let use_ = (device, stream);
        if use_ != (own, block.stream) && !block.recorded_streams.contains(&use_) {
            block.recorded_streams.push(use_);
        }
        Ok(())
    }

    /// Streams recorded on the live block at `ptr` with [`Self::record_stream`], as (device, stream).
    pub fn recorded_streams(&self, ptr: usize) -> Option<&[(usize, StreamId)]> {
        self.active.get(&ptr).map(|b| b.recorded_streams.as_slice())
    }

    /// `emptyCache`: gives every cached block back to device memory (the
    /// caller has waited for the device's queued work; blocks still waiting
    /// for other devices' streams stay pending).
    pub fn empty_cache(&mut self) {
        self.reclaim();
        // Private pools keep their blocks: a graph replays into them.
        let general = self.cached.range(..(GENERAL_POOL + 1, StreamId::MIN, 0, 0)).copied().collect::<Vec<_>>();
        for key in general {
            self.cached.remove(&key);
            let (_, _, size, ptr) = key;
            if self.memory.free(ptr).is_ok() {
                self.stats.num_device_free += 1;
                self.stats.segment.decrease(1);
                self.stats.reserved_bytes.decrease(size as i64);
                if let Some(events) = self.segment_events.as_mut() {
                    events.push(SegmentEvent::Free { ptr, size });
                }
            }
        }
    }

    /// A graph (or capture) takes hold of private pool `pool`, creating it if
    /// new ([`GENERAL_POOL`] is not a private pool and is ignored).
    pub fn retain_pool(&mut self, pool: PoolId) {
        if pool != GENERAL_POOL {
            *self.pools.entry(pool).or_insert(0) += 1;
        }
    }

    /// A graph lets go of `pool`. When nothing holds it any more, its cached
    /// blocks join the general cache (so `empty_cache` can release them), and
    /// its blocks still in use join it when freed.
    pub fn release_pool(&mut self, pool: PoolId) {
        self.release_pool_after(pool, Vec::new());
    }

    /// [`Self::release_pool`] while replays may still be queued: the pool's
    /// cached blocks wait for `fences` (the device's streams at release)
    /// before another allocation may take them.
    pub fn release_pool_after(&mut self, pool: PoolId, fences: Vec<Fence>) {
        let Some(uses) = self.pools.get_mut(&pool) else { return };
        *uses -= 1;
        if *uses > 0 {
            return;
        }
        self.pools.remove(&pool);
        let moved: Vec<Key> =
            self.cached.range((pool, StreamId::MIN, 0, 0)..(pool + 1, StreamId::MIN, 0, 0)).copied().collect();
        let wait = !fences.iter().all(Fence::passed);
        for key in moved {
            self.cached.remove(&key);
            let key = (GENERAL_POOL, key.1, key.2, key.3);
            if wait {
                self.pending.push((key, fences.clone()));
            } else {
                self.cached.insert(key);
            }
        }
        for (key, _) in self.pending.iter_mut().filter(|(k, _)| k.0 == pool) {
            key.0 = GENERAL_POOL;
        }
    }

    /// Routes the allocations of `stream` to private pool `pool` (a capture
    /// begins), holding the pool until [`Self::end_pool`].
    pub fn begin_pool(&mut self, stream: StreamId, pool: PoolId) {
        self.retain_pool(pool);
        self.routes.retain(|r| r.0 != stream);
        self.routes.push((stream, pool));
    }

    /// Ends the routing of `stream` (a capture ends) and lets go of its pool.
    pub fn end_pool(&mut self, stream: StreamId) {
        if let Some(at) = self.routes.iter().position(|r| r.0 == stream) {
            let (_, pool) = self.routes.swap_remove(at);
            self.release_pool(pool);
        }
    }

    /// Number of graphs and captures holding `pool` (0 for an unknown or dead pool).
    pub fn pool_uses(&self, pool: PoolId) -> usize {
        self.pools.get(&pool).copied().unwrap_or(0)
    }

    /// Stream, size and whether other streams were recorded on the active block at `ptr`.
    pub fn block_use(&self, ptr: usize) -> Option<(StreamId, usize, bool)> {
        self.active.get(&ptr).map(|b| (b.stream, b.size, !b.recorded_streams.is_empty()))
    }

    /// Size of the active block at `ptr` (its requested size rounded up), if it is one.
    pub fn block_size(&self, ptr: usize) -> Option<usize> {
        self.active.get(&ptr).map(|b| b.size)
    }

    /// True when `ptr` is the start of a block handed to a caller.
    pub fn is_active(&self, ptr: usize) -> bool {
        self.active.contains_key(&ptr)
    }

    /// Current statistics.
    pub fn stats(&self) -> DeviceStats {
        self.stats
    }

    /// `resetPeakStats`: every peak becomes the current value.
    pub fn reset_peak_stats(&mut self) {
        let s = &mut self.stats;
        for st in
            [&mut s.allocation, &mut s.segment, &mut s.allocated_bytes, &mut s.reserved_bytes, &mut s.requested_bytes]
        {
            st.reset_peak();
        }
    }

    /// `resetAccumulatedStats`: allocated/freed totals and event counters go to 0.
    pub fn reset_accumulated_stats(&mut self) {
        let s = &mut self.stats;
        for st in
            [&mut s.allocation, &mut s.segment, &mut s.allocated_bytes, &mut s.reserved_bytes, &mut s.requested_bytes]
        {
            st.reset_accumulated();
        }
        s.num_alloc_retries = 0;
        s.num_ooms = 0;
        s.num_device_alloc = 0;
        s.num_device_free = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn alloc(cap: usize) -> CachingAllocator {
        CachingAllocator::new(DeviceMemory::reserve(0, cap).unwrap())
    }

    #[test]
    fn private_pools_keep_their_blocks_for_their_graphs() {
        let mut a = alloc(1 << 20);
        let before = a.allocate(1000, 0).unwrap();
        a.free(before).unwrap();
        a.begin_pool(0, 7);
        let x = a.allocate(1000, 0).unwrap();
        assert_ne!(x, before, "a capture does not take blocks of the general cache");
        a.free(x).unwrap();
        let y = a.allocate(1000, 0).unwrap();
        assert_eq!(y, x, "blocks freed during the capture are reused within its pool");
        assert_eq!(a.allocate(1000, 3).map(|p| a.blocks().iter().find(|b| b.ptr == p).unwrap().pool), Ok(GENERAL_POOL));
        a.retain_pool(7); // the graph
        a.end_pool(0);
        a.free(y).unwrap();
        assert_ne!(a.allocate(1000, 0).unwrap(), y, "after the capture, the pool's blocks are the graph's");
        a.empty_cache();
        assert!(
            a.blocks().iter().any(|b| b.ptr == y && b.state == BlockState::Cached),
            "empty_cache keeps a live pool"
        );
        a.begin_pool(0, 7); // a second graph shares the pool
        assert_eq!(a.allocate(1000, 0).unwrap(), y);
        a.end_pool(0);
        assert_eq!(a.pool_uses(7), 1);
        a.release_pool(7);
        assert_eq!(a.pool_uses(7), 0);
        a.free(y).unwrap();
        assert_eq!(a.blocks().iter().find(|b| b.ptr == y).map(|b| b.pool), Some(GENERAL_POOL));
        let used = a.memory().used();
        a.empty_cache();
        assert!(a.memory().used() < used, "a dead pool's blocks are released");
    }

    #[test]
    fn segment_events_while_recorded() {
        let mut a = alloc(1 << 20);
        let p = a.allocate(1000, 0).unwrap();
        assert!(a.take_segment_events().is_empty()); // not recording
        a.record_segment_events(true);
        let q = a.allocate(5000, 0).unwrap();
        a.free(q).unwrap();
        a.free(p).unwrap();
        a.empty_cache();
        let events = a.take_segment_events();
        assert_eq!(events[0], SegmentEvent::Alloc { ptr: q, size: round_up(5000) });
        let mut freed: Vec<_> = events[1..].to_vec();
        freed.sort_by_key(|e| matches!(e, SegmentEvent::Free { ptr, .. } if *ptr == q));
        assert_eq!(
            freed,
            [SegmentEvent::Free { ptr: p, size: round_up(1000) }, SegmentEvent::Free { ptr: q, size: round_up(5000) }]
        );
        assert!(a.take_segment_events().is_empty());
        a.record_segment_events(false);
        a.allocate(100, 0).unwrap();
        assert!(a.take_segment_events().is_empty());
    }

    #[test]
    fn a_limit_refuses_segments_past_it_and_releases_the_cache_first() {
        const MIB: usize = 1 << 20;
        let mut a = CachingAllocator::new(DeviceMemory::reserve(0, 8 * MIB).unwrap());
        a.set_limit(Some(3 * MIB));
        let x = a.allocate(2 * MIB, 0).unwrap();
        match a.allocate(2 * MIB, 0) {
            Err(Error::OutOfMemory { limit: Some(l), reserved, .. }) => assert_eq!((l, reserved), (3 * MIB, 2 * MIB)),
            other => panic!("expected an out-of-memory error at the limit, got {other:?}"),
        }
        // A cached block is released for the retry, so a request that fits once the cache is empty succeeds.
        a.free(x).unwrap();
        let y = a.allocate(3 * MIB, 1).unwrap();
        assert_eq!(a.memory().used(), 3 * MIB);
        a.set_limit(None);
        let z = a.allocate(4 * MIB, 1).unwrap();
        assert!(a.free(y).is_ok() && a.free(z).is_ok());
        assert_eq!(a.stats().num_ooms, 1);
    }

    #[test]
    fn blocks_lists_active_and_cached_blocks_by_address() {
        let mut a = CachingAllocator::new(DeviceMemory::reserve(0, 1 << 20).unwrap());
        let x = a.allocate(1000, 0).unwrap();
        let y = a.allocate(3000, 2).unwrap();
        a.free(x).unwrap();
        let blocks = a.blocks();
        assert_eq!(blocks.len(), 2);
        assert_eq!((blocks[0].ptr, blocks[0].size, blocks[0].state), (x, 1024, BlockState::Cached));
        assert_eq!(
            (blocks[1].ptr, blocks[1].requested, blocks[1].stream, blocks[1].state),
            (y, 3000, 2, BlockState::Active)
        );
        assert_eq!(blocks.iter().map(|b| b.size).sum::<usize>(), a.memory().used());
    }

    #[test]
    fn caches_per_stream_and_counts() {
        let mut a = alloc(1 << 20);
        let p = a.allocate(1000, 0).unwrap();
        assert_eq!(a.stats().allocated_bytes.current, 1024);
        assert_eq!(a.stats().requested_bytes.current, 1000);
        a.free(p).unwrap();
        assert_eq!(a.stats().allocated_bytes.current, 0);
        assert_eq!(a.stats().reserved_bytes.current, 1024);
        let other_stream = a.allocate(1000, 5).unwrap();
        assert_ne!(other_stream, p, "a block cached for stream 0 is not reused on stream 5");
        let q = a.allocate(900, 0).unwrap();
        assert_eq!(q, p, "same stream, fitting size: reuse");
        assert_eq!(a.stats().num_device_alloc, 2);
        assert_eq!(a.stats().allocated_bytes.peak, 2048);
        assert_eq!(a.allocate(0, 0).unwrap(), 0);
        a.free(0).unwrap();
        assert!(matches!(a.free(12345), Err(Error::InvalidPointer { .. })));
    }

    #[test]
    fn small_requests_do_not_take_large_blocks() {
        let mut a = alloc(1 << 20);
        let big = a.allocate(64 << 10, 0).unwrap();
        a.free(big).unwrap();
        let small = a.allocate(512, 0).unwrap();
        assert_ne!(small, big);
    }

    #[test]
    fn oom_retries_after_emptying_cache_then_reports() {
        let mut a = alloc(1 << 20);
        let p = a.allocate(600 << 10, 0).unwrap();
        a.free(p).unwrap();
        let q = a.allocate(700 << 10, 0).unwrap();
        assert_eq!(a.stats().num_alloc_retries, 1);
        match a.allocate(700 << 10, 0) {
            Err(Error::OutOfMemory { requested, allocated, reserved, capacity, .. }) => {
                assert_eq!((requested, allocated, reserved, capacity), (700 << 10, 700 << 10, 700 << 10, 1 << 20));
            }
            other => panic!("expected OOM, got {other:?}"),
        }
        assert_eq!(a.stats().num_ooms, 1);
        a.free(q).unwrap();
        a.empty_cache();
        assert_eq!(a.stats().reserved_bytes.current, 0);
        assert_eq!(a.memory().used(), 0);
    }

    #[test]
    fn peak_and_accumulated_resets() {
        let mut a = alloc(1 << 20);
        let p = a.allocate(4096, 0).unwrap();
        a.record_stream(p, 0, 3).unwrap();
        a.free(p).unwrap();
        a.reset_peak_stats();
        assert_eq!(a.stats().allocated_bytes.peak, 0);
        a.reset_accumulated_stats();
        assert_eq!(a.stats().allocated_bytes.allocated, 0);
        assert_eq!(a.stats().num_device_alloc, 0);
    }

    #[test]
    fn record_stream_accepts_other_devices() {
        let mut a = alloc(1 << 20);
        let p = a.allocate(4096, 2).unwrap();
        a.record_stream(p, 0, 2).unwrap();
        a.record_stream(p, 1, 2).unwrap();
        a.record_stream(p, 1, 2).unwrap();
        a.record_stream(p, 0, 5).unwrap();
        assert_eq!(a.recorded_streams(p).unwrap(), &[(1, 2), (0, 5)], "own stream skipped, duplicates once");
        assert!(matches!(a.record_stream(p + 512, 0, 1), Err(Error::InvalidPointer { .. })));
        a.free(p).unwrap();
    }

    #[test]
    fn freed_middle_block_does_not_cause_false_oom() {
        const MIB: usize = 1 << 20;
        let mut a = alloc(64 * MIB);
        let x = a.allocate(16 * MIB, 0).unwrap();
        let y = a.allocate(16 * MIB, 0).unwrap();
        let z = a.allocate(16 * MIB, 0).unwrap();
        a.free(y).unwrap();
        a.empty_cache();
        assert_eq!(a.memory().capacity() - a.memory().used(), 32 * MIB);
        let w = a.allocate(24 * MIB, 0).unwrap();
        assert_eq!(a.stats().num_ooms, 0);
        // A real out-of-memory names every number a user needs.
        let err = a.allocate(40 * MIB, 0).unwrap_err();
        let msg = err.to_string();
        for part in [
            "tried to allocate 41943040 bytes on oxide:0",
            "device capacity 67108864 bytes",
            "8388608 bytes are free",
            "58720256 bytes allocated by tensors",
            "58720256 bytes reserved",
        ] {
            assert!(msg.contains(part), "{part:?} missing from {msg}");
        }
        assert!(!msg.contains("fragment"), "{msg}");
        assert_eq!(a.stats().num_ooms, 1);
        for p in [x, z, w] {
            assert!(a.is_active(p), "an out-of-memory error leaves live blocks alone");
            a.free(p).unwrap();
        }
    }
}
