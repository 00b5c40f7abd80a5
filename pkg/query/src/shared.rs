//! Reads shared by the queries of one evaluation ([`crate::Engine::sharing_reads`]): each
//! selector's stored totals, and its selected profiles, over each window, read once.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use parca_tsdb::{Matcher, SeriesProfiles, SeriesTotals};

/// A read: what it asks for (matchers, span matchers) and its window.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct Key {
    matchers: String,
    window: (i64, i64),
}

impl Key {
    fn new(matchers: &[Matcher], spans: &[Matcher], window: (i64, i64)) -> Key {
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
        }
    }
}

/// What the queries of one evaluation have read.
#[derive(Debug, Default)]
pub(crate) struct SharedReads {
    totals: Mutex<HashMap<Key, Arc<Vec<SeriesTotals>>>>,
    selected: Mutex<HashMap<Key, Arc<Vec<SeriesProfiles>>>>,
}

impl SharedReads {
    /// The totals of a read, from `read` the first time.
    pub(crate) fn totals<E>(
        &self,
        matchers: &[Matcher],
        spans: &[Matcher],
        window: (i64, i64),
        read: impl FnOnce() -> Result<Vec<SeriesTotals>, E>,
    ) -> Result<Arc<Vec<SeriesTotals>>, E> {
        once(&self.totals, Key::new(matchers, spans, window), read)
    }

    /// The selected profiles of a read, from `read` the first time.
    pub(crate) fn selected<E>(
        &self,
        matchers: &[Matcher],
        spans: &[Matcher],
        window: (i64, i64),
        read: impl FnOnce() -> Result<Vec<SeriesProfiles>, E>,
    ) -> Result<Arc<Vec<SeriesProfiles>>, E> {
        once(&self.selected, Key::new(matchers, spans, window), read)
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
