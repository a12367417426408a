//! Tracing (the `tracing` feature): spans and events for the rare paths only, never per record.
//!
//! The events are listed in the crate docs ([Tracing](crate#tracing)).
//!
//! Every event has target `logbus`. Events are emitted with no engine lock held (I6): a tracing
//! subscriber is code of the application's.
//!
//! Without the feature the macro below expands to nothing and its arguments are not evaluated.

/// `event!(level, fields..., "message")`: a `tracing` event with target `logbus`, or nothing.
macro_rules! event {
    ($level:ident, $($arg:tt)+) => {
        #[cfg(feature = "tracing")]
        ::tracing::$level!(target: "logbus", $($arg)+);
    };
}

pub(crate) use event;
