//! Launch sites: the Python line that launched a kernel, kept in the launch
//! record of a kernel that checks the values of its operands (an index in
//! range, a divisor not zero). Such a kernel fails after its launching call
//! has returned, and its error, raised at the next synchronisation, names the
//! line that launched it, not the line that synchronised.
//!
//! Reading the Python stack takes the GIL (PyTorch's own memory history does
//! the same). Only value-checking kernels pay for it, and a thread with no
//! Python state (autograd's device threads) pays nothing and records no site.

use std::sync::OnceLock;

use pyo3::prelude::*;

/// Where a kernel was launched from (or memory allocated): one Python frame.
#[derive(Debug, Clone)]
pub(crate) struct LaunchSite {
    pub file: String,
    pub line: i64,
    pub function: String,
}

impl std::fmt::Display for LaunchSite {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}:{} (in {})", self.file, self.line, self.function)
    }
}

/// Directories of torch's and torch_oxide's own Python files: frames there are
/// library code (`F.cross_entropy`), and the site is the caller's line.
fn library_dirs(py: Python<'_>) -> &'static [String] {
    static DIRS: OnceLock<Vec<String>> = OnceLock::new();
    DIRS.get_or_init(|| {
        ["torch", "torch_oxide"]
            .iter()
            .filter_map(|m| {
                let file: String = py.import(*m).ok()?.getattr("__file__").ok()?.extract().ok()?;
                let dir = std::path::Path::new(&file).parent()?.to_str()?.to_string();
                Some(format!("{dir}{}", std::path::MAIN_SEPARATOR))
            })
            .collect()
    })
}

/// The innermost Python frame of the calling thread outside torch and
/// torch_oxide (the innermost frame when every frame is library code), or
/// `None` when the thread runs no Python code.
pub(crate) fn capture() -> Option<LaunchSite> {
    // SAFETY: reads the calling thread's own interpreter state pointer; no GIL needed.
    if unsafe { pyo3::ffi::Py_IsInitialized() } == 0 || unsafe { pyo3::ffi::PyGILState_GetThisThreadState() }.is_null()
    {
        return None;
    }
    Python::attach(|py| {
        // SAFETY: the GIL is held; the frame is borrowed and only used while it is held.
        let innermost = unsafe { Bound::from_borrowed_ptr_or_opt(py, pyo3::ffi::PyEval_GetFrame().cast()) }?;
        let dirs = library_dirs(py);
        let describe = |frame: &Bound<'_, PyAny>| -> Option<LaunchSite> {
            let code = frame.getattr("f_code").ok()?;
            Some(LaunchSite {
                file: code.getattr("co_filename").ok()?.extract().ok()?,
                line: frame.getattr("f_lineno").ok()?.extract().unwrap_or(0),
                function: code.getattr("co_name").ok()?.extract().ok()?,
            })
        };
        let mut frame = innermost.clone();
        loop {
            let site = describe(&frame)?;
            if !dirs.iter().any(|d| site.file.starts_with(d.as_str())) {
                return Some(site);
            }
            match frame.getattr("f_back") {
                Ok(back) if !back.is_none() => frame = back,
                _ => return describe(&innermost),
            }
        }
    })
}

/// Every Python frame of the calling thread, innermost first (at most `max`), for
/// the memory history; empty when the thread runs no Python code.
pub(crate) fn stack(max: usize) -> Vec<LaunchSite> {
    // SAFETY: as in `capture`.
    if unsafe { pyo3::ffi::Py_IsInitialized() } == 0 || unsafe { pyo3::ffi::PyGILState_GetThisThreadState() }.is_null()
    {
        return Vec::new();
    }
    Python::attach(|py| {
        let mut out = Vec::new();
        // SAFETY: the GIL is held; the frame is borrowed and only used while it is held.
        let Some(mut frame) = (unsafe { Bound::from_borrowed_ptr_or_opt(py, pyo3::ffi::PyEval_GetFrame().cast()) })
        else {
            return out;
        };
        while out.len() < max {
            let Ok(code) = frame.getattr("f_code") else { break };
            out.push(LaunchSite {
                file: code.getattr("co_filename").and_then(|f| f.extract()).unwrap_or_default(),
                line: frame.getattr("f_lineno").and_then(|l| l.extract()).unwrap_or(0),
                function: code.getattr("co_name").and_then(|f| f.extract()).unwrap_or_default(),
            });
            match frame.getattr("f_back") {
                Ok(back) if !back.is_none() => frame = back,
                _ => break,
            }
        }
        out
    })
}
