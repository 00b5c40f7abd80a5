//! Where series go: a store that makes them durable.

use parca_tsdb::Db;

use crate::Series;

/// What became of a batch: how many profiles were stored, and why the others were refused.
#[derive(Debug, Default)]
pub struct WriteOutcome {
    /// Profiles stored and durable.
    pub n_written: usize,
    /// Profiles refused, each with the store's reason (out of order, too many stacks, …).
    pub refused: Vec<parca_tsdb::Error>,
}

/// Stores series durably. `write` blocks until what it stored is durable; call it from a
/// blocking thread.
pub trait Sink: Send + Sync {
    /// Stores the batch: every series that the sink accepts is durable when this returns.
    /// A refused series does not stop the others. An error means nothing may be assumed stored.
    fn write(&self, batch: &[Series]) -> Result<WriteOutcome, parca_tsdb::Error>;
}

impl Sink for Db {
    fn write(&self, batch: &[Series]) -> Result<WriteOutcome, parca_tsdb::Error> {
        let mut appender = self.appender();
        let mut outcome = WriteOutcome::default();
        for series in batch {
            match appender.append(&series.labels, series.timestamp_ms, &series.profile) {
                Ok(()) => outcome.n_written += 1,
                Err(e) if e.is_refusal() => outcome.refused.push(e),
                Err(e) => return Err(e),
            }
        }
        appender.commit()?;
        Ok(outcome)
    }
}
