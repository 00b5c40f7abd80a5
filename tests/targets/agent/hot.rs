//! A known workload for the agent's tests: nearly all time in
//! `agent_rust_hot::main → work → hot_leaf`. Build with
//! `rustc --crate-name agent_rust_hot -C opt-level=1 -C force-frame-pointers=yes -g`.
//! Usage: agent-rust-hot [SECONDS] (default: an hour).

use std::hint::black_box;
use std::time::{Duration, Instant};

#[inline(never)]
fn hot_leaf(mut x: u64) -> u64 {
    for _ in 0..200_000 {
        x = black_box(
            x.wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407),
        );
    }
    x
}

#[inline(never)]
fn work(duration: Duration) {
    let start = Instant::now();
    let mut x = 1;
    while start.elapsed() < duration {
        x = hot_leaf(x);
    }
    black_box(x);
}

fn main() {
    let seconds: f64 = std::env::args()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(3600.0);
    work(Duration::from_secs_f64(seconds));
}
