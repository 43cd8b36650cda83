//! The runtime's error type. Every variant carries the structured fields a
//! caller needs to build an actionable message (device, bytes, handles).

/// Errors returned by every fallible runtime call.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Error {
    /// A device index outside `0..device_count` (cudaErrorInvalidDevice).
    #[error("invalid device index {index}: oxide has {count} device(s), valid indices are 0 to {}; set OXIDE_DEVICE_COUNT to change", count.saturating_sub(1))]
    InvalidDevice { index: i64, count: usize },

    /// A device allocation that does not fit (cudaErrorMemoryAllocation).
    /// All sizes are in bytes. `largest_free_block` is set when the request
    /// is within the free capacity but no free extent of the device's address
    /// range is large enough (fragmentation).
    #[error(
        "oxide out of memory: tried to allocate {requested} bytes on oxide:{device}; device capacity {capacity} bytes, of which {} bytes are free; {allocated} bytes allocated by tensors, {reserved} bytes reserved by the caching allocator{}{} (set OXIDE_DEVICE_MEMORY to change the capacity)",
        capacity.saturating_sub(*reserved),
        limit_note(*limit),
        fragmentation_note(*largest_free_block)
    )]
    OutOfMemory {
        device: usize,
        requested: usize,
        allocated: usize,
        reserved: usize,
        capacity: usize,
        largest_free_block: Option<usize>,
        /// The process's limit on reserved bytes (`set_per_process_memory_fraction`), when set.
        limit: Option<usize>,
    },

    /// A pinned host allocation the operating system refused.
    #[error(
        "out of pinned host memory: tried to allocate {requested} bytes; {pinned} bytes of pinned host memory in use"
    )]
    HostOutOfMemory { requested: usize, pinned: usize },

    /// A pointer that is not the start of a live device allocation.
    #[error("pointer {ptr:#x} is not a live allocation on any oxide device")]
    InvalidPointer { ptr: usize },

    /// A copy whose source or destination range leaves the memory it names.
    #[error("invalid {kind} copy of {bytes} bytes from {src:#x} to {dst:#x}: {reason}")]
    InvalidCopy { kind: &'static str, bytes: usize, src: usize, dst: usize, reason: &'static str },

    /// A stream handle that does not name a stream of the given device.
    #[error("invalid stream id {stream} on oxide:{device}")]
    InvalidStream { device: usize, stream: i64 },

    /// `elapsed_time` on events that were not created with timing, or were not recorded.
    #[error("invalid event: {reason}")]
    InvalidEvent { reason: &'static str },

    /// A queued launch record that failed when its stream ran it; reported at
    /// the next synchronisation of that stream (CUDA's asynchronous errors,
    /// but not sticky: the stream stays usable).
    #[error("oxide:{device} stream {stream}: a kernel launched earlier failed: {message} (kernel errors are reported asynchronously, at the next synchronization; set OXIDE_LAUNCH_BLOCKING=1 to raise them at the launching call)")]
    Deferred { device: usize, stream: i64, message: String },

    /// The operating system refused to start a stream's worker thread; the
    /// launch was not queued (the next launch on the stream tries again).
    #[error("oxide:{device} stream {stream}: could not start the stream's worker thread: {message}")]
    WorkerStart { device: usize, stream: i64, message: String },

    /// Stream capture (graphs): work that cannot be captured on a capturing
    /// stream (cudaErrorStreamCaptureUnsupported), a capture that an earlier
    /// such error invalidated (cudaErrorStreamCaptureInvalidated), or a capture
    /// call out of order.
    #[error("oxide:{device} stream {stream}: {message}")]
    Capture { device: usize, stream: i64, message: String },

    /// Device memory shared with another process (`torch.multiprocessing`)
    /// that cannot be exported or mapped.
    #[error("sharing oxide memory between processes: {reason}")]
    Ipc { reason: String },

    /// Any use of the runtime in a process forked after it was initialised.
    #[error("the oxide runtime cannot be used in a forked subprocess after it was initialised in the parent; use the 'spawn' start method for multiprocessing")]
    Forked,

    /// An environment variable with a value the runtime cannot use.
    #[error("invalid value {value:?} for {var}: {reason}")]
    Config { var: &'static str, value: String, reason: String },

    /// The operating system refused to reserve a device's address range.
    #[error("could not reserve {bytes} bytes of address space for oxide:{device}: {reason}")]
    Reserve { device: usize, bytes: usize, reason: String },
}

fn limit_note(limit: Option<usize>) -> String {
    match limit {
        Some(l) => format!("; this process may reserve at most {l} bytes (set_per_process_memory_fraction)"),
        None => String::new(),
    }
}

fn fragmentation_note(largest_free_block: Option<usize>) -> String {
    match largest_free_block {
        Some(b) => format!("; the largest free block is {b} bytes: the device's address range is fragmented"),
        None => String::new(),
    }
}

/// Shorthand used throughout the runtime.
pub type Result<T> = std::result::Result<T, Error>;
