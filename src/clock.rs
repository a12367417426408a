//! Record timestamps: wall-clock nanoseconds since the UNIX epoch.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Now, in nanoseconds since the UNIX epoch (0 before 1970, saturating in 2262).
#[inline]
pub(crate) fn now_nanos() -> u64 {
    to_nanos(SystemTime::now())
}

pub(crate) fn to_nanos(t: SystemTime) -> u64 {
    match t.duration_since(UNIX_EPOCH) {
        Ok(d) => u64::try_from(d.as_nanos())
            .unwrap_or(u64::MAX >> 1)
            .min(u64::MAX >> 1),
        Err(_) => 0,
    }
}

pub(crate) fn from_nanos(n: u64) -> SystemTime {
    UNIX_EPOCH + Duration::from_nanos(n)
}
