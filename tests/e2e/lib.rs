//! Nothing here: the end-to-end tests live in `e2e/main.rs` and its modules.
