//! Events: markers recorded on a stream (the `cudaEvent_t` layer).

use std::sync::Arc;
use std::time::Instant;

use crate::error::{Error, Result};
use crate::stream::{StreamId, StreamState};

/// Where and when an event was last recorded.
#[derive(Debug, Clone)]
struct Recorded {
    device: usize,
    stream: StreamId,
    state: Arc<StreamState>,
    seq: u64,
    at: Instant,
}

/// An event. `enable_timing` mirrors `cudaEventCreate` without `cudaEventDisableTiming`.
#[derive(Debug, Clone)]
pub struct Event {
    enable_timing: bool,
    recorded: Option<Recorded>,
}

impl Event {
    /// `cudaEventCreateWithFlags`.
    pub fn new(enable_timing: bool) -> Event {
        Event { enable_timing, recorded: None }
    }

    /// True when the event was created with timing enabled.
    pub fn enable_timing(&self) -> bool {
        self.enable_timing
    }

    /// Device and stream of the last record, if recorded.
    pub fn recorded_on(&self) -> Option<(usize, StreamId)> {
        self.recorded.as_ref().map(|r| (r.device, r.stream))
    }

    /// `cudaEventRecord`: captures the work enqueued so far on the stream.
    /// The timestamp is taken when that work has completed (immediately with
    /// inline streams, which is also when a GPU would write it).
    pub fn record(&mut self, device: usize, stream: StreamId, state: Arc<StreamState>) {
        let seq = state.submitted();
        while !state.is_complete(seq) {
            std::thread::yield_now();
        }
        self.recorded = Some(Recorded { device, stream, state, seq, at: Instant::now() });
    }

    /// `cudaEventQuery`: true when the recorded work has finished (or the event was never recorded).
    pub fn query(&self) -> bool {
        self.recorded.as_ref().is_none_or(|r| r.state.is_complete(r.seq))
    }

    /// `cudaEventSynchronize`: waits for the recorded work.
    pub fn synchronize(&self) {
        while !self.query() {
            std::thread::yield_now();
        }
    }

    /// `cudaEventElapsedTime`: milliseconds from `self` to `end`.
    ///
    /// Errors: [`Error::InvalidEvent`] when either event lacks timing or was never recorded.
    pub fn elapsed_ms(&self, end: &Event) -> Result<f64> {
        if !self.enable_timing || !end.enable_timing {
            return Err(Error::InvalidEvent { reason: "both events must be created with enable_timing=True" });
        }
        let (Some(a), Some(b)) = (&self.recorded, &end.recorded) else {
            return Err(Error::InvalidEvent { reason: "both events must be recorded before elapsed_time" });
        };
        if a.device != b.device {
            return Err(Error::InvalidEvent { reason: "both events must be recorded on the same device" });
        }
        self.synchronize();
        end.synchronize();
        let ms = if b.at >= a.at { (b.at - a.at).as_secs_f64() * 1e3 } else { -((a.at - b.at).as_secs_f64() * 1e3) };
        Ok(ms)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stream::Streams;

    #[test]
    fn timing_measures_real_time() {
        let streams = Streams::new(0);
        let (mut a, mut b) = (Event::new(true), Event::new(true));
        assert!(a.query(), "unrecorded events are complete");
        a.record(0, 0, streams.state(0).unwrap());
        streams.launch(0, || std::thread::sleep(std::time::Duration::from_millis(20))).unwrap();
        b.record(0, 0, streams.state(0).unwrap());
        assert!(b.query());
        let ms = a.elapsed_ms(&b).unwrap();
        assert!((19.0..2000.0).contains(&ms), "{ms}");
        assert_eq!(b.recorded_on(), Some((0, 0)));
    }

    #[test]
    fn timing_errors() {
        let (a, b) = (Event::new(false), Event::new(true));
        assert!(matches!(a.elapsed_ms(&b), Err(Error::InvalidEvent { .. })));
        assert!(matches!(b.elapsed_ms(&Event::new(true)), Err(Error::InvalidEvent { .. })));
        let (s0, s1) = (Streams::new(0), Streams::new(1));
        let (mut x, mut y) = (Event::new(true), Event::new(true));
        x.record(0, 0, s0.state(0).unwrap());
        y.record(1, 0, s1.state(0).unwrap());
        assert!(matches!(x.elapsed_ms(&y), Err(Error::InvalidEvent { reason }) if reason.contains("same device")));
    }
}
