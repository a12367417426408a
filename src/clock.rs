//! Record timestamps: wall-clock nanoseconds since the UNIX epoch, from a coarse clock.
//!
//! `SystemTime::now()` costs ~34 ns on the 2-core VM we measure on, more than the rest of a publish.
//! On Linux, records are stamped from `CLOCK_REALTIME_COARSE` instead (~5 ns, read from the vDSO
//! without a system call), whose resolution is the kernel tick (4 ms here). Elsewhere the precise
//! clock is used. [`resolution_nanos`] says which; `Start::Timestamp` uses it so that it never
//! skips a record published after the time asked for.

use std::{
    sync::OnceLock,
    time::{Duration, SystemTime, UNIX_EPOCH},
};

/// Now, in nanoseconds since the UNIX epoch (0 before 1970, saturating at 2^63 - 1).
#[inline]
pub(crate) fn now_nanos() -> u64 {
    #[cfg(target_os = "linux")]
    {
        let mut ts = libc::timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        // SAFETY: `ts` is a valid, writable timespec on our stack; the clock id is a constant the
        // kernel has supported since 2.6.32. On failure `ts` stays zero, which is a valid time.
        unsafe { libc::clock_gettime(libc::CLOCK_REALTIME_COARSE, &mut ts) };
        let nanos = (ts.tv_sec.max(0) as u64).saturating_mul(1_000_000_000) + ts.tv_nsec as u64;
        nanos.min(u64::MAX >> 1)
    }
    #[cfg(not(target_os = "linux"))]
    to_nanos(SystemTime::now())
}

/// The resolution of [`now_nanos`], in nanoseconds.
pub(crate) fn resolution_nanos() -> u64 {
    static RES: OnceLock<u64> = OnceLock::new();
    *RES.get_or_init(|| {
        #[cfg(target_os = "linux")]
        {
            let mut ts = libc::timespec {
                tv_sec: 0,
                tv_nsec: 0,
            };
            // SAFETY: as in `now_nanos`.
            let rc = unsafe { libc::clock_getres(libc::CLOCK_REALTIME_COARSE, &mut ts) };
            if rc == 0 {
                return (ts.tv_sec.max(0) as u64) * 1_000_000_000 + ts.tv_nsec as u64;
            }
            10_000_000
        }
        #[cfg(not(target_os = "linux"))]
        0
    })
}

pub(crate) fn to_nanos(t: SystemTime) -> u64 {
    match t.duration_since(UNIX_EPOCH) {
        Ok(d) => u64::try_from(d.as_nanos())
            .unwrap_or(u64::MAX)
            .min(u64::MAX >> 1),
        Err(_) => 0,
    }
}

pub(crate) fn from_nanos(n: u64) -> SystemTime {
    UNIX_EPOCH + Duration::from_nanos(n)
}
