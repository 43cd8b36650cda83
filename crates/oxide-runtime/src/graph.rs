//! Graphs: a stream's launches captured as values and replayed (the
//! `cudaStreamBeginCapture` / `cudaGraphLaunch` layer).
//!
//! A launch is already a value (a record that owns everything its kernel
//! reads), so capturing is keeping those values instead of queuing them:
//! while a stream captures ([`crate::Streams::begin_capture`]), the extension
//! hands each launch aimed at it to [`crate::Streams::capture`] as a [`Node`],
//! a record that can run more than once. [`crate::Streams::end_capture`]
//! returns the nodes as a [`Graph`], and a replay queues one record that runs
//! them all in capture order, so a replay costs one launch whatever the
//! number of kernels.
//!
//! What cannot be a node fails at once and invalidates the capture (CUDA's
//! `cudaErrorStreamCaptureUnsupported`, then `...Invalidated`): work that runs
//! at the call because the host needs its result (a data-dependent output
//! size, a copy to pageable host memory), synchronising the capturing stream or
//! its device, recording an event on it or making it wait for another stream.
//! An invalidated capture refuses every later node with the first error and
//! ends with it, so no half-captured graph is ever replayed.

use std::sync::{Arc, Mutex};

/// One captured launch: a kernel or copy that can run once per replay.
pub type Node = Box<dyn FnMut() -> std::result::Result<(), String> + Send>;

/// The capture in progress on a stream.
#[derive(Default)]
pub(crate) struct Capture {
    pub(crate) nodes: Vec<Node>,
    /// What each node launches (an ABI entry point), for `debug_dump`.
    pub(crate) names: Vec<&'static str>,
    /// The first error met during the capture; set, the capture takes no more nodes.
    pub(crate) invalidated: Option<String>,
}

impl std::fmt::Debug for Capture {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Capture").field("nodes", &self.nodes.len()).field("invalidated", &self.invalidated).finish()
    }
}

/// A captured graph: its nodes in capture order. Clones share the nodes (a
/// replay record holds one while it is queued).
#[derive(Clone)]
pub struct Graph {
    nodes: Arc<Mutex<Vec<Node>>>,
    names: Arc<[&'static str]>,
}

impl std::fmt::Debug for Graph {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Graph({} nodes)", self.len())
    }
}

impl Graph {
    pub(crate) fn new(nodes: Vec<Node>, names: Vec<&'static str>) -> Graph {
        Graph { nodes: Arc::new(Mutex::new(nodes)), names: names.into() }
    }

    /// What each node launches, in replay order.
    pub fn names(&self) -> &[&'static str] {
        &self.names
    }

    /// Number of captured launches.
    pub fn len(&self) -> usize {
        self.names.len()
    }

    /// True for a capture that launched nothing.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<Node>> {
        self.nodes.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Runs every node in capture order on the calling thread (a stream's
    /// worker, from a replay record). Stops at the first failure, since later
    /// nodes would read what the failed one did not write, and returns it with
    /// its position.
    pub fn run(&self) -> std::result::Result<(), String> {
        let mut nodes = self.lock();
        let n = nodes.len();
        for (i, node) in nodes.iter_mut().enumerate() {
            node().map_err(|e| format!("in a graph replay, launch {} of {n}: {e}", i + 1))?;
        }
        Ok(())
    }
}
