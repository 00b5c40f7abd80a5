//! One profile as a block's index records it ([`BlockProfile`]): the header every part of the
//! store passes around (the writer, the readers, the summaries, the shards' answers), in a
//! file of its own so that they need not reach into the block's reader and writer for it.

/// A profile as the index records it; its samples lie in a chunk.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct BlockProfile {
    pub timestamp_ms: i64,
    pub duration_nanos: i64,
    pub period: i64,
    /// The capture it came from (0 in version 1 blocks: unknown).
    pub capture_id: u64,
    pub total: i64,
    pub n_samples: u32,
    /// Bytes of its encoded samples in the chunk's raw data.
    pub len: u32,
    /// The stored profiles it stands for: 1, or those a summary sums ([`crate::summary`]).
    pub merged: u32,
    /// The total of the latest profile it stands for (its own `total` when it stands for one).
    pub latest_total: i64,
}
