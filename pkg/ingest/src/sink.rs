//! Where series go: a store that makes them durable, at once or within its sync interval.

use parca_tsdb::{Commit, Db};

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
    /// On disk (fsynced): for pushes, whose sender was promised the profile is stored. The
    /// store writes profiles older than its head takes (past the out-of-order window) as
    /// blocks of their own rather than refusing them, but refuses those older than its
    /// retention keeps ([`Db::retention_horizon`]), which would be deleted once acknowledged.
    Synced,
    /// Handed to the operating system, on disk within the store's sync interval: for scrapes,
    /// which a crash of the machine would lose only seconds of, as in Prometheus, and which
    /// would cost an fsync each otherwise. A profile older than the head takes is refused: a
    /// scrape is stamped with the time it ran, so an old one is a clock gone wrong.
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

    /// Stores the batch as [`Durability::Synced`] but for the wait for the disk, if that is
    /// nothing but appends to the store's head (no profile older than the head takes, none past
    /// retention) and nobody holds the head now: returns what was stored and a [`Commit`] that
    /// resolves once it is on disk (or with the error that leaves none of it stored). `None`
    /// otherwise, and then nothing was stored: the caller calls [`Sink::write`]. Appends may
    /// wait for the WAL's lock, which its sync thread holds while it hands buffered records to
    /// the operating system (briefly) and while it syncs a full segment it closes (once per
    /// segment): an async caller may call this on its worker if such a stall is acceptable,
    /// and then awaits the commit, which holds no thread while the store syncs every waiting
    /// commit with one fsync.
    fn try_write_synced(
        &self,
        batch: &[Series],
    ) -> Option<Result<(WriteOutcome, Commit), parca_tsdb::Error>> {
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

/// A push: the profiles the head takes are appended and committed; those older than it takes
/// (past the out-of-order window, or before the time cut into blocks) are written as blocks of
/// their own, synced before the commit and renamed into place after it. One the store holds
/// already (the same series and time, in a block) is refused as a duplicate, as the head
/// refuses its own. So an error leaves
/// nothing of the push stored (staged blocks are removed, the head's part is taken out by the
/// store's healing), but for a failed rename after a successful commit; and a success means
/// all of it is on disk.
///
/// Profiles older than the store keeps ([`Db::retention_horizon`]) are refused first: stored,
/// they would be deleted by retention within seconds of being acknowledged.
fn write_synced(db: &Db, batch: &[Series]) -> Result<WriteOutcome, parca_tsdb::Error> {
    let mut outcome = WriteOutcome::default();
    let horizon = db.retention_horizon();
    let kept = batch.iter().filter(|s| match &horizon {
        Some(horizon) => match horizon.check(&s.labels, s.timestamp_ms) {
            Ok(()) => true,
            Err(refusal) => {
                outcome.refused.push(refusal);
                false
            }
        },
        None => true,
    });
    let (old, fresh): (Vec<&Series>, Vec<&Series>) =
        kept.partition(|s| !db.head_takes(&s.labels, s.timestamp_ms));
    let mut new = Vec::with_capacity(old.len());
    for s in old {
        if db.holds(&s.labels, s.timestamp_ms)? {
            outcome.refused.push(parca_tsdb::Error::Duplicate {
                labels: s.labels.to_string(),
                timestamp_ms: s.timestamp_ms,
            });
        } else {
            new.push(s);
        }
    }
    let old = new;
    let mut staged = Vec::new();
    let mut stage = |series: &[&Series], outcome: &mut WriteOutcome| {
        if series.is_empty() {
            return Ok(());
        }
        let (blocks, refused) = db.stage_backfill(
            series
                .iter()
                .map(|s| (&s.labels, s.timestamp_ms, &s.profile)),
        )?;
        outcome.refused.extend(refused);
        staged.push(blocks);
        Ok::<(), parca_tsdb::Error>(())
    };
    stage(&old, &mut outcome)?;
    let mut appender = db.appender();
    // A cut between the look above and the append may make a profile too old for the head:
    // staged too, before the commit. (Should that staging fail, the head's part, appended but
    // not committed, may still reach the disk: the one case where an error answer leaves part
    // of a push stored, a cut racing a push at the edge of the window and a disk failing.)
    let mut late = Vec::new();
    for series in fresh {
        match appender.append(&series.labels, series.timestamp_ms, &series.profile) {
            Ok(()) => outcome.n_written += 1,
            Err(e) if e.is_too_old() => late.push(series),
            Err(e) if e.is_refusal() => outcome.refused.push(e),
            Err(e) => return Err(e),
        }
    }
    stage(&late, &mut outcome)?;
    appender.commit()?;
    for blocks in staged {
        let n = blocks.n_profiles();
        blocks.publish()?;
        outcome.n_written += n;
    }
    Ok(outcome)
}

impl Sink for Db {
    fn write(
        &self,
        batch: &[Series],
        durability: Durability,
    ) -> Result<WriteOutcome, parca_tsdb::Error> {
        match durability {
            Durability::Synced => write_synced(self, batch),
            Durability::Buffered => {
                let mut appender = self.appender();
                let outcome = append_all(&mut appender, batch)?;
                appender.commit_buffered()?;
                Ok(outcome)
            }
        }
    }

    fn try_write_synced(
        &self,
        batch: &[Series],
    ) -> Option<Result<(WriteOutcome, Commit), parca_tsdb::Error>> {
        let mut appender = self.appender();
        if !appender.try_hold() {
            return None;
        }
        // Refusals by retention and profiles for blocks of their own are `write_synced`'s.
        // Asked of the held head: no lock is waited for (a worker waiting for a head lock
        // whose holder the machine preempted would stall every connection it serves), and no
        // cut can make a profile too old before the commit.
        if !batch
            .iter()
            .all(|s| appender.held_head_takes(&s.labels, s.timestamp_ms) == Some(true))
        {
            return None;
        }
        Some(append_all(&mut appender, batch).map(|outcome| (outcome, appender.commit_async())))
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

#[cfg(test)]
mod tests {
    use super::*;
    use parca_tsdb::{Labels, Options};

    const DAY_MS: i64 = 24 * 3600 * 1000;

    /// A CPU profile of one sample, from the corpus.
    fn cpu_series(job: &str, timestamp_ms: i64) -> Series {
        let path = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../tests/testdata/pprof/go/go-cpu.pb.gz"
        );
        let bytes = std::fs::read(path).expect("corpus file");
        let profiles = parca_profile::decode(&bytes, &Default::default()).expect("decodes");
        let labels = Labels::new([("job", job)]).expect("valid labels");
        crate::to_series("process_cpu", &labels, profiles, 0)
            .expect("series")
            .into_iter()
            .next()
            .map(|s| Series { timestamp_ms, ..s })
            .expect("a sample type")
    }

    #[test]
    fn a_push_stores_what_retention_keeps_and_refuses_the_rest() {
        let dir = tempfile::tempdir().expect("temporary directory");
        let db = Db::open(
            dir.path(),
            Options {
                retention_ms: 15 * DAY_MS,
                ..Options::default()
            },
        )
        .expect("store opens");
        let now_ms = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .expect("after 1970")
            .as_millis() as i64;
        let batch = [
            cpu_series("fresh", now_ms),
            cpu_series("old", now_ms - 16 * DAY_MS),
            // Past the out-of-order window, within retention: stored as a block of its own.
            cpu_series("fresh", now_ms - 10 * DAY_MS),
        ];
        let outcome = db.write(&batch, Durability::Synced).expect("written");
        assert_eq!(outcome.n_written, 2);
        assert_eq!(outcome.refused.len(), 1);
        let refusal = outcome.refused[0].to_string();
        assert!(
            refusal.contains("job=\"old\"") && refusal.contains("--storage-retention-time"),
            "{refusal}"
        );
        assert!(
            !db.holds(&batch[1].labels, batch[1].timestamp_ms)
                .expect("read")
        );
        assert!(
            db.holds(&batch[2].labels, batch[2].timestamp_ms)
                .expect("read")
        );
    }
}
