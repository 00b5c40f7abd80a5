//! The retention horizon: the oldest profile time a store keeps, so writers refuse what
//! retention would delete at once instead of acknowledging it and losing it.

use std::path::Path;

use crate::Error;
use crate::block::parse_meta;
use crate::labels::Labels;

/// The oldest profile time a store keeps: its retention time (`--storage-retention-time`)
/// counted back from now, or from the newest profile it holds if that is later, as retention
/// counts (`compact.rs`'s `apply_retention`). A profile older than this would be deleted by the
/// next pass of retention, seconds after its writer was told it was stored.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetentionHorizon {
    /// Profiles older than this (ms since the epoch) are refused.
    pub horizon_ms: i64,
    /// The retention time it was counted with, named in refusals.
    pub retention_ms: i64,
}

impl RetentionHorizon {
    /// The horizon of a store that keeps `retention_ms` and whose newest profile is at
    /// `newest_ms` (`i64::MIN` for an empty store); `None` when retention by time is off (0).
    pub fn new(retention_ms: i64, newest_ms: i64) -> Option<RetentionHorizon> {
        if retention_ms <= 0 {
            return None;
        }
        let now_ms = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as i64);
        Some(RetentionHorizon {
            horizon_ms: now_ms.max(newest_ms).saturating_sub(retention_ms),
            retention_ms,
        })
    }

    /// The horizon of the store in `dir` (which a server may be running on), as far as its
    /// blocks tell: for writers that add blocks beside a store (`parca import`). A directory
    /// that is not a readable block is passed over; a missing `dir` is an empty store.
    pub fn of_store_dir(dir: &Path, retention_ms: i64) -> Option<RetentionHorizon> {
        let newest_ms = std::fs::read_dir(dir)
            .into_iter()
            .flatten()
            .flatten()
            .filter_map(|entry| {
                let name = entry.file_name().into_string().ok()?;
                let bytes = std::fs::read(entry.path().join("meta.json")).ok()?;
                parse_meta(&name, &bytes).ok()
            })
            .map(|meta| meta.max_time_ms - 1)
            .max()
            .unwrap_or(i64::MIN);
        RetentionHorizon::new(retention_ms, newest_ms)
    }

    /// Refuses ([`Error::PastRetention`]) a profile of series `labels` at `timestamp_ms` older
    /// than the horizon.
    pub fn check(&self, labels: &Labels, timestamp_ms: i64) -> Result<(), Error> {
        if timestamp_ms < self.horizon_ms {
            return Err(Error::PastRetention {
                labels: labels.to_string(),
                timestamp_ms,
                horizon_ms: self.horizon_ms,
                retention_ms: self.retention_ms,
            });
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const DAY_MS: i64 = 24 * 3600 * 1000;

    fn labels() -> Labels {
        Labels::new([("__name__", "cpu"), ("job", "api")]).expect("valid labels")
    }

    #[test]
    fn off_without_retention_time() {
        assert_eq!(RetentionHorizon::new(0, i64::MIN), None);
    }

    #[test]
    fn counts_back_from_now_or_from_a_newer_profile() {
        let now = jiff::Timestamp::now().as_millisecond();
        let empty = RetentionHorizon::new(15 * DAY_MS, i64::MIN).expect("retention on");
        assert!((empty.horizon_ms - (now - 15 * DAY_MS)).abs() < 60_000);
        let future = now + 30 * DAY_MS;
        let ahead = RetentionHorizon::new(15 * DAY_MS, future).expect("retention on");
        assert_eq!(ahead.horizon_ms, future - 15 * DAY_MS);
    }

    #[test]
    fn refuses_older_profiles_naming_the_flag_and_the_time() {
        let horizon = RetentionHorizon {
            horizon_ms: 1_700_000_000_000,
            retention_ms: 15 * DAY_MS,
        };
        assert!(horizon.check(&labels(), 1_700_000_000_000).is_ok());
        let refused = horizon
            .check(&labels(), 1_650_000_000_000)
            .expect_err("older than the horizon");
        assert!(refused.is_refusal());
        let message = refused.to_string();
        assert!(message.contains("--storage-retention-time"), "{message}");
        assert!(message.contains("15d"), "{message}");
        assert!(message.contains("2022-04-15T05:20:00Z"), "{message}");
    }

    #[test]
    fn a_store_directory_without_blocks_counts_from_now() {
        let dir = tempfile::tempdir().expect("temporary directory");
        let empty = RetentionHorizon::of_store_dir(dir.path(), DAY_MS).expect("retention on");
        let now = jiff::Timestamp::now().as_millisecond();
        assert!((empty.horizon_ms - (now - DAY_MS)).abs() < 60_000);
        assert_eq!(
            RetentionHorizon::of_store_dir(&dir.path().join("missing"), 0),
            None
        );
    }
}
