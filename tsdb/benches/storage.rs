//! Placeholder until the storage benchmark lands.
fn main() {}
