//! Process-wide configuration read once from the environment.

use crate::error::{Error, Result};

/// Number of devices when `OXIDE_DEVICE_COUNT` is unset.
pub const DEFAULT_DEVICE_COUNT: usize = 2;
/// Capacity of each device when `OXIDE_DEVICE_MEMORY` is unset: 4 GiB, small
/// enough that two devices fit the 24 GiB development machines twice over.
pub const DEFAULT_DEVICE_MEMORY: usize = 4 << 30;
/// Upper bound on the device count, so a typo cannot reserve absurd address space.
pub const MAX_DEVICE_COUNT: usize = 64;

/// Configuration of the emulated devices.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Config {
    /// Number of devices (`OXIDE_DEVICE_COUNT`, 1..=64).
    pub device_count: usize,
    /// Capacity of each device in bytes (`OXIDE_DEVICE_MEMORY`, e.g. `8GiB`, `512MB`, `1048576`).
    pub device_memory: usize,
    /// Kernels run at the call, and raise their errors there (`OXIDE_LAUNCH_BLOCKING=1`).
    pub launch_blocking: bool,
    /// Device addresses are inaccessible to host code outside kernels and
    /// copies (`OXIDE_SANITIZE=1`, the sanitizer's host-access detector; see
    /// [`crate::guard`]).
    pub guard_device_memory: bool,
}

impl Config {
    /// Reads `OXIDE_DEVICE_COUNT` and `OXIDE_DEVICE_MEMORY`.
    ///
    /// Errors: [`Error::Config`] naming the variable when a value does not parse
    /// or is out of range.
    pub fn from_env() -> Result<Config> {
        let count = std::env::var("OXIDE_DEVICE_COUNT").ok();
        let memory = std::env::var("OXIDE_DEVICE_MEMORY").ok();
        let mut config = Self::parse(count.as_deref(), memory.as_deref())?;
        config.launch_blocking = flag("OXIDE_LAUNCH_BLOCKING", std::env::var("OXIDE_LAUNCH_BLOCKING").ok().as_deref())?;
        config.guard_device_memory = flag("OXIDE_SANITIZE", std::env::var("OXIDE_SANITIZE").ok().as_deref())?;
        Ok(config)
    }

    /// Parses the two settings; `None` means "use the default".
    pub fn parse(count: Option<&str>, memory: Option<&str>) -> Result<Config> {
        let device_count = match count.map(str::trim).filter(|s| !s.is_empty()) {
            None => DEFAULT_DEVICE_COUNT,
            Some(s) => {
                let n: usize = s.parse().map_err(|e: std::num::ParseIntError| Error::Config {
                    var: "OXIDE_DEVICE_COUNT",
                    value: s.to_string(),
                    reason: e.to_string(),
                })?;
                if n == 0 || n > MAX_DEVICE_COUNT {
                    return Err(Error::Config {
                        var: "OXIDE_DEVICE_COUNT",
                        value: s.to_string(),
                        reason: format!("must be between 1 and {MAX_DEVICE_COUNT}"),
                    });
                }
                n
            }
        };
        let device_memory = match memory.map(str::trim).filter(|s| !s.is_empty()) {
            None => DEFAULT_DEVICE_MEMORY,
            Some(s) => {
                let bytes = parse_size::parse_size(s).map_err(|e| Error::Config {
                    var: "OXIDE_DEVICE_MEMORY",
                    value: s.to_string(),
                    reason: e.to_string(),
                })?;
                if !(1 << 20..=1 << 46).contains(&bytes) {
                    return Err(Error::Config {
                        var: "OXIDE_DEVICE_MEMORY",
                        value: s.to_string(),
                        reason: "must be between 1 MiB and 64 TiB".into(),
                    });
                }
                bytes as usize
            }
        };
        Ok(Config { device_count, device_memory, launch_blocking: false, guard_device_memory: false })
    }
}

/// A boolean setting: unset, empty or `0` is off, `1` is on (as `CUDA_LAUNCH_BLOCKING`).
fn flag(var: &'static str, value: Option<&str>) -> Result<bool> {
    match value.map(str::trim).unwrap_or("") {
        "" | "0" => Ok(false),
        "1" => Ok(true),
        other => Err(Error::Config { var, value: other.to_string(), reason: "must be 0 or 1".into() }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults() {
        let c = Config::parse(None, None).unwrap();
        assert_eq!(c.device_count, DEFAULT_DEVICE_COUNT);
        assert_eq!(c.device_memory, DEFAULT_DEVICE_MEMORY);
    }

    #[test]
    fn units_and_plain_bytes() {
        assert_eq!(Config::parse(Some("3"), Some("2GiB")).unwrap().device_memory, 2 << 30);
        assert_eq!(Config::parse(None, Some("512 MiB")).unwrap().device_memory, 512 << 20);
        assert_eq!(Config::parse(None, Some("1048576")).unwrap().device_memory, 1 << 20);
        assert_eq!(Config::parse(Some(" 4 "), None).unwrap().device_count, 4);
    }

    #[test]
    fn flags() {
        assert!(!flag("X", None).unwrap() && !flag("X", Some("0")).unwrap() && !flag("X", Some("")).unwrap());
        assert!(flag("X", Some(" 1")).unwrap());
        assert!(matches!(flag("X", Some("yes")), Err(Error::Config { var: "X", .. })));
    }

    #[test]
    fn rejects_bad_values() {
        for (c, m) in
            [(Some("0"), None), (Some("x"), None), (Some("65"), None), (None, Some("lots")), (None, Some("10"))]
        {
            let err = Config::parse(c, m).unwrap_err();
            assert!(matches!(err, Error::Config { .. }), "{err}");
        }
    }
}
