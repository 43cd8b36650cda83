//! Bookkeeping of the CPU fallback: how often each operator ran on the CPU
//! instead of natively, and what a fallback is allowed to do
//! (`OXIDE_FALLBACK=warn|silent|error`, default `warn`: warn once per operator).

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::Mutex;

use crate::abi::runtime::{OXIDE_FALLBACK_ERROR, OXIDE_FALLBACK_RUN, OXIDE_FALLBACK_WARN};

/// What a fallback does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    Silent = 1,
    Warn = 2,
    Error = 3,
}

impl Mode {
    /// Parses `silent`, `warn` or `error` (case-insensitive).
    pub fn parse(s: &str) -> Option<Mode> {
        match s.trim().to_ascii_lowercase().as_str() {
            "silent" => Some(Mode::Silent),
            "warn" => Some(Mode::Warn),
            "error" => Some(Mode::Error),
            _ => None,
        }
    }
    /// The mode's name as `OXIDE_FALLBACK` spells it.
    pub fn name(self) -> &'static str {
        match self {
            Mode::Silent => "silent",
            Mode::Warn => "warn",
            Mode::Error => "error",
        }
    }
}

/// 0 = not read from the environment yet.
static MODE: AtomicU8 = AtomicU8::new(0);
static COUNTS: Mutex<BTreeMap<String, u64>> = Mutex::new(BTreeMap::new());

/// The current mode; the first call reads `OXIDE_FALLBACK` (unset or unknown: `warn`;
/// the Python frontend rejects an unknown value with a ValueError at import).
pub fn mode() -> Mode {
    match MODE.load(Ordering::Relaxed) {
        1 => Mode::Silent,
        2 => Mode::Warn,
        3 => Mode::Error,
        _ => {
            let m = std::env::var("OXIDE_FALLBACK").ok().and_then(|v| Mode::parse(&v)).unwrap_or(Mode::Warn);
            let _ = MODE.compare_exchange(0, m as u8, Ordering::Relaxed, Ordering::Relaxed);
            mode()
        }
    }
}

/// Sets the mode for the rest of the process.
pub fn set_mode(m: Mode) {
    MODE.store(m as u8, Ordering::Relaxed);
}

/// Counts one fallback of `op` and returns the `OXIDE_FALLBACK_*` action.
/// In `error` mode the refused call is counted too, so reports show what was attempted.
pub fn record(op: &str) -> i32 {
    let mut counts = COUNTS.lock().unwrap_or_else(|e| e.into_inner());
    let n = counts.entry(op.to_string()).or_insert(0);
    *n += 1;
    match mode() {
        Mode::Error => OXIDE_FALLBACK_ERROR,
        Mode::Warn if *n == 1 => OXIDE_FALLBACK_WARN,
        _ => OXIDE_FALLBACK_RUN,
    }
}

/// Per-operator counts, sorted by operator name.
pub fn counts() -> BTreeMap<String, u64> {
    COUNTS.lock().unwrap_or_else(|e| e.into_inner()).clone()
}

/// Forgets all counts (warnings are given again after a reset).
pub fn reset() {
    COUNTS.lock().unwrap_or_else(|e| e.into_inner()).clear();
}
