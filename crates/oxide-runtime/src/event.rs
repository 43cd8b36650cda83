//! Events: markers recorded on a stream (the `cudaEvent_t` layer).
//!
//! Recording captures the work enqueued on the stream so far (its sequence
//! number). A timing event also needs the time the stream got there: on an
//! idle stream that is now; on a busy one a [`Record::Marker`] is queued and
//! the stream's worker stamps it when it reaches it, so `elapsed_time`
//! measures device execution, not host enqueue time.

use std::sync::{Arc, OnceLock};
use std::time::Instant;

use crate::error::{Error, Result};
use crate::stream::{Record, StreamId, StreamState, Streams};

/// Where and when an event was last recorded.
#[derive(Debug, Clone)]
struct Recorded {
    device: usize,
    stream: StreamId,
    state: Arc<StreamState>,
    seq: u64,
    /// Set when the stream reaches the record (for timing events).
    at: Arc<OnceLock<Instant>>,
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

    /// The stream state and sequence number the event waits for, if recorded.
    pub fn fence(&self) -> Option<(Arc<StreamState>, u64)> {
        self.recorded.as_ref().map(|r| (Arc::clone(&r.state), r.seq))
    }

    /// `cudaEventRecord`: captures the work enqueued so far on `stream` of
    /// `streams` (device `device`). Never waits for that work.
    ///
    /// Errors: [`Error::InvalidStream`]; [`Error::Capture`] on a capturing stream.
    pub fn record(&mut self, device: usize, streams: &Streams, stream: StreamId) -> Result<()> {
        // The captured work never runs at the call, so an event recorded after it
        // could not stand for it (CUDA would add an event node; oxide graphs keep one stream).
        streams.refuse_in_capture(stream, "recording an event on the capturing stream")?;
        let state = streams.state(stream)?;
        let at = Arc::new(OnceLock::new());
        let submitted = state.submitted();
        let seq = if !self.enable_timing {
            submitted
        } else if state.is_complete(submitted) {
            // An idle stream is at this point now.
            let _ = at.set(Instant::now());
            submitted
        } else {
            streams.enqueue(stream, Record::Marker(Arc::clone(&at)))?
        };
        self.recorded = Some(Recorded { device, stream, state, seq, at });
        Ok(())
    }

    /// `cudaEventQuery`: true when the recorded work has finished (or the event was never recorded).
    pub fn query(&self) -> bool {
        self.recorded.as_ref().is_none_or(|r| {
            let done = r.state.is_complete(r.seq);
            if done {
                r.state.saw(r.seq);
            }
            done
        })
    }

    /// `cudaEventSynchronize`: waits (asleep) for the recorded work.
    pub fn synchronize(&self) {
        if let Some(r) = &self.recorded {
            r.state.wait_for(r.seq);
        }
    }

    /// `cudaEventElapsedTime`: milliseconds from `self` to `end`, once both have completed.
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
        // Stamped by the worker before it marked the marker complete, or at record time.
        let (Some(&ta), Some(&tb)) = (a.at.get(), b.at.get()) else {
            return Err(Error::InvalidEvent { reason: "an event's timestamp is missing" });
        };
        let ms = if tb >= ta { (tb - ta).as_secs_f64() * 1e3 } else { -((ta - tb).as_secs_f64() * 1e3) };
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
        a.record(0, &streams, 0).unwrap();
        streams.launch(0, || std::thread::sleep(std::time::Duration::from_millis(20))).unwrap();
        b.record(0, &streams, 0).unwrap();
        assert!(b.query());
        let ms = a.elapsed_ms(&b).unwrap();
        assert!((19.0..2000.0).contains(&ms), "{ms}");
        assert_eq!(b.recorded_on(), Some((0, 0)));
    }

    #[test]
    fn queued_work_is_timed_on_the_stream() {
        use crate::stream::Record;
        use std::time::Duration;
        let streams = Streams::new(0);
        let (mut a, mut b) = (Event::new(true), Event::new(true));
        // A queued record keeps the stream busy: the events become markers.
        let sleep = |ms| {
            Record::Work(crate::stream::Work::new(move || {
                std::thread::sleep(Duration::from_millis(ms));
                Ok(())
            }))
        };
        streams.enqueue(1, sleep(30)).unwrap();
        a.record(0, &streams, 1).unwrap();
        streams.enqueue(1, sleep(20)).unwrap();
        b.record(0, &streams, 1).unwrap();
        assert!(!b.query(), "recording does not wait for the stream");
        b.synchronize();
        assert!(a.query() && b.query());
        let ms = a.elapsed_ms(&b).unwrap();
        // The host recorded both within microseconds; the stream took the 20 ms sleep between them.
        assert!((19.0..2000.0).contains(&ms), "{ms}");
    }

    #[test]
    fn timing_errors() {
        let (a, b) = (Event::new(false), Event::new(true));
        assert!(matches!(a.elapsed_ms(&b), Err(Error::InvalidEvent { .. })));
        assert!(matches!(b.elapsed_ms(&Event::new(true)), Err(Error::InvalidEvent { .. })));
        let (s0, s1) = (Streams::new(0), Streams::new(1));
        let (mut x, mut y) = (Event::new(true), Event::new(true));
        x.record(0, &s0, 0).unwrap();
        y.record(1, &s1, 0).unwrap();
        assert!(matches!(x.elapsed_ms(&y), Err(Error::InvalidEvent { reason }) if reason.contains("same device")));
    }
}
