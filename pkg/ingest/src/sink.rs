//! Where series go: a store that makes them durable, at once or within its sync interval.

use parca_tsdb::Db;

use crate::Series;

/// What became of a batch: how many profiles were stored, and why the others were refused.
#[derive(Debug, Default)]
pub struct WriteOutcome {
    /// Profiles stored (as durable as the write asked).
    pub n_written: usize,
    /// Profiles refused, each with the store's reason (out of order, too many stacks, …).
    pub refused: Vec<parca_tsdb::Error>,
}

/// How durable a write must be when [`Sink::write`] returns.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Durability {
    /// On disk (fsynced): for pushes, whose sender was promised the profile is stored.
    Synced,
    /// Handed to the operating system, on disk within the store's sync interval: for scrapes,
    /// which a crash of the machine would lose only seconds of, as in Prometheus, and which
    /// would cost an fsync each otherwise.
    Buffered,
}

/// Stores series. `write` blocks until what it stored is as durable as asked; call it from a
/// blocking thread.
pub trait Sink: Send + Sync {
    /// Stores the batch: every series that the sink accepts is `durability` durable when this
    /// returns. A refused series does not stop the others. An error means nothing may be assumed
    /// stored.
    fn write(
        &self,
        batch: &[Series],
        durability: Durability,
    ) -> Result<WriteOutcome, parca_tsdb::Error>;

    /// Stores the batch as [`Durability::Buffered`] if that needs no waiting for others (a
    /// query or a cut into blocks may hold the store for seconds); `None` when it would, and
    /// then nothing was stored. For callers on an async runtime's worker, which must not block:
    /// they try this first and hand the batch to [`Sink::write`] on a blocking thread only when
    /// the store is busy, which saves two thread switches per batch in the common case.
    fn try_write_buffered(
        &self,
        batch: &[Series],
    ) -> Option<Result<WriteOutcome, parca_tsdb::Error>> {
        let _ = batch;
        None
    }
}

/// Appends every series of `batch`, keeping refusals apart from errors.
fn append_all(
    appender: &mut parca_tsdb::Appender<'_>,
    batch: &[Series],
) -> Result<WriteOutcome, parca_tsdb::Error> {
    let mut outcome = WriteOutcome::default();
    for series in batch {
        match appender.append(&series.labels, series.timestamp_ms, &series.profile) {
            Ok(()) => outcome.n_written += 1,
            Err(e) if e.is_refusal() => outcome.refused.push(e),
            Err(e) => return Err(e),
        }
    }
    Ok(outcome)
}

impl Sink for Db {
    fn write(
        &self,
        batch: &[Series],
        durability: Durability,
    ) -> Result<WriteOutcome, parca_tsdb::Error> {
        let mut appender = self.appender();
        let outcome = append_all(&mut appender, batch)?;
        match durability {
            Durability::Synced => appender.commit()?,
            Durability::Buffered => appender.commit_buffered()?,
        }
        Ok(outcome)
    }

    fn try_write_buffered(
        &self,
        batch: &[Series],
    ) -> Option<Result<WriteOutcome, parca_tsdb::Error>> {
        let mut appender = self.appender();
        if !appender.try_hold() {
            return None;
        }
        Some(append_all(&mut appender, batch).and_then(|outcome| {
            appender.commit_buffered()?;
            Ok(outcome)
        }))
    }
}
