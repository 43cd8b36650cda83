//! FFT plans, cached per (length, direction, precision).
//!
//! A rustfft plan (`Arc<dyn Fft<T>>`) is `Send + Sync` and costs far more to
//! make than to use once, so every thread shares one table of them. rustfft's
//! planner itself is not `Sync` (it caches sub-plans in a way that needs
//! `&mut self`), so a miss is planned by the calling thread's own planner and
//! then published in the shared table.

use std::cell::RefCell;
use std::collections::HashMap;
use std::sync::{Arc, LazyLock, Mutex};

use rustfft::{Fft, FftDirection, FftNum, FftPlanner};

/// Plans the table keeps before it starts over: a program uses a handful of
/// lengths, but a sweep over sizes should not grow the table without bound
/// (cuFFT's plan cache has a limit for the same reason).
const MAX_PLANS: usize = 1024;

type Table<T> = Mutex<HashMap<(usize, bool), Arc<dyn Fft<T>>>>;

/// A precision the kernels transform in (f32 for complex64, f64 for complex128):
/// where its plans are kept.
pub trait Precision: FftNum {
    /// The shared table of this precision's plans.
    fn table() -> &'static Table<Self>;
    /// Runs `f` with the calling thread's planner of this precision.
    fn with_planner<R>(f: impl FnOnce(&mut FftPlanner<Self>) -> R) -> R;
}

macro_rules! precision {
    ($t:ty, $table:ident, $planner:ident) => {
        static $table: LazyLock<Table<$t>> = LazyLock::new(|| Mutex::new(HashMap::new()));
        thread_local! {
            static $planner: RefCell<FftPlanner<$t>> = RefCell::new(FftPlanner::new());
        }
        impl Precision for $t {
            fn table() -> &'static Table<$t> {
                &$table
            }
            fn with_planner<R>(f: impl FnOnce(&mut FftPlanner<$t>) -> R) -> R {
                $planner.with(|p| f(&mut p.borrow_mut()))
            }
        }
    };
}

precision!(f32, PLANS_F32, PLANNER_F32);
precision!(f64, PLANS_F64, PLANNER_F64);

/// The plan of a `len`-point transform, forward (`e^{-2 pi i jk/n}`, unscaled)
/// or backward (`e^{+2 pi i jk/n}`, unscaled), from the shared table.
pub fn plan<T: Precision>(len: usize, forward: bool) -> Arc<dyn Fft<T>> {
    let key = (len, forward);
    if let Some(p) = T::table().lock().unwrap_or_else(|e| e.into_inner()).get(&key) {
        return Arc::clone(p);
    }
    // Planned outside the lock: planning a large prime length takes a while, and
    // two threads planning the same length at once only waste a little work.
    let direction = if forward { FftDirection::Forward } else { FftDirection::Inverse };
    let p = T::with_planner(|planner| planner.plan_fft(len, direction));
    let mut table = T::table().lock().unwrap_or_else(|e| e.into_inner());
    if table.len() >= MAX_PLANS {
        table.clear();
    }
    Arc::clone(table.entry(key).or_insert(p))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plans_are_shared_per_length_and_direction() {
        let a = plan::<f32>(12, true);
        let b = plan::<f32>(12, true);
        assert!(Arc::ptr_eq(&a, &b));
        assert!(!Arc::ptr_eq(&a, &plan::<f32>(12, false)));
        assert_eq!(plan::<f64>(17, false).len(), 17);
        // From another thread: the same table.
        let c = std::thread::spawn(|| plan::<f32>(12, true)).join().unwrap();
        assert!(Arc::ptr_eq(&a, &c));
    }
}
