//! Reads shared by the queries of one evaluation ([`crate::Engine::sharing_reads`]): each
//! selector's stored totals, and its selected profiles, over each window, read once. Selected
//! profiles are kept while their samples fit in one query's sample limit
//! (`Limits::max_samples`), so sharing at most doubles what an evaluation holds at once.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use parca_tsdb::{Matcher, SeriesProfiles, SeriesTotals};

/// A read: what it asks for (matchers, span matchers) and its window.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct Key {
    matchers: String,
    window: (i64, i64),
    /// The coarsest summaries the read takes (0: none).
    summaries_ms: i64,
}

impl Key {
    fn new(matchers: &[Matcher], spans: &[Matcher], window: (i64, i64), summaries_ms: i64) -> Key {
        let mut text = String::new();
        for m in matchers {
            text.push_str(&m.to_string());
            text.push(',');
        }
        text.push('|');
        for m in spans {
            text.push_str(&m.to_string());
            text.push(',');
        }
        Key {
            matchers: text,
            window,
            summaries_ms,
        }
    }
}

/// What the queries of one evaluation have read.
#[derive(Debug, Default)]
pub(crate) struct SharedReads {
    totals: Mutex<HashMap<Key, Arc<Vec<SeriesTotals>>>>,
    selected: Mutex<HashMap<Key, Arc<Vec<SeriesProfiles>>>>,
    /// Samples of the selected profiles kept.
    n_samples: Mutex<usize>,
}

impl SharedReads {
    /// The totals of a read, from `read` the first time.
    pub(crate) fn totals<E>(
        &self,
        matchers: &[Matcher],
        spans: &[Matcher],
        window: (i64, i64),
        summaries_ms: i64,
        read: impl FnOnce() -> Result<Vec<SeriesTotals>, E>,
    ) -> Result<Arc<Vec<SeriesTotals>>, E> {
        once(
            &self.totals,
            Key::new(matchers, spans, window, summaries_ms),
            read,
        )
    }

    /// The selected profiles of a read, from `read` the first time. A read of `n_samples`
    /// that would take the samples kept past `budget` is not kept.
    pub(crate) fn selected<E>(
        &self,
        matchers: &[Matcher],
        spans: &[Matcher],
        window: (i64, i64),
        summaries_ms: i64,
        (n_samples, budget): (usize, usize),
        read: impl FnOnce() -> Result<Vec<SeriesProfiles>, E>,
    ) -> Result<Arc<Vec<SeriesProfiles>>, E> {
        let key = Key::new(matchers, spans, window, summaries_ms);
        if let Some(found) = self.selected.lock().expect("shared reads lock").get(&key) {
            return Ok(Arc::clone(found));
        }
        {
            let mut kept = self.n_samples.lock().expect("shared reads lock");
            if kept.saturating_add(n_samples) > budget {
                return read().map(Arc::new);
            }
            *kept += n_samples;
        }
        once(&self.selected, key, read)
    }
}

/// The value under `key`, made by `read` if there is none. The lock is not held while reading
/// (queries of one evaluation run one after another; two racing reads both read, one keeps).
fn once<T, E>(
    map: &Mutex<HashMap<Key, Arc<T>>>,
    key: Key,
    read: impl FnOnce() -> Result<T, E>,
) -> Result<Arc<T>, E> {
    if let Some(found) = map.lock().expect("shared reads lock").get(&key) {
        return Ok(Arc::clone(found));
    }
    let value = Arc::new(read()?);
    Ok(Arc::clone(
        map.lock()
            .expect("shared reads lock")
            .entry(key)
            .or_insert(value),
    ))
}
