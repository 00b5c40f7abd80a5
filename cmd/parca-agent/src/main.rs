//! `parca-agent` (work in progress).
fn main() {}
