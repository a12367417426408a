//! Loom models live in `tests/`; this crate only exists to build logbus under `--cfg loom`.
