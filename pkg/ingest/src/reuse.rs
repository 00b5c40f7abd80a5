//! Decoding pushes into tables kept from one push to the next.

use std::sync::{Arc, Mutex};

use parca_profile::{Profile, Tables};

/// Tables that are not reused past this many entries (strings, functions, locations and
/// stacks): they hold every symbol and stack of the pushes decoded into them, so without a
/// bound they would grow with the fleet. A few tens of MiB at most.
const MAX_ENTRIES: usize = 1 << 19;

/// Idle tables kept: about as many as pushes are decoded at once (one per async worker, and a
/// few waiting for the head).
const MAX_IDLE: usize = 4;

/// Tables that decoding reuses from push to push, so that a push of symbols and stacks seen
/// before costs one lookup per symbol: in these tables while decoding, and none when the
/// store's head imports them, whose importer remembers what each id of these tables became.
/// Decoding into new tables each time interns every symbol twice, once into them and once into
/// the head's.
///
/// Pushes from one fleet share most symbols, so a few tables shared by all pushes serve them
/// all; tables that grow past a bound are dropped, and fresh ones take their place.
#[derive(Debug, Default)]
pub struct TablesPool {
    idle: Mutex<Vec<Arc<Tables>>>,
}

impl TablesPool {
    /// An empty pool.
    pub fn new() -> Self {
        TablesPool::default()
    }

    /// Decodes pprof bytes (gzipped or not) into one profile per sample type, as
    /// [`parca_profile::decode`] does, into tables of the pool. Give the tables back with
    /// [`TablesPool::recycle`] once the profiles are stored.
    pub fn decode(
        &self,
        bytes: &[u8],
        options: &parca_pprof::DecodeOptions,
    ) -> Result<Vec<Profile>, parca_profile::Error> {
        let pprof = parca_pprof::decode(bytes, options)?;
        let mut tables = self
            .idle
            .lock()
            .expect("tables pool lock poisoned")
            .pop()
            .unwrap_or_default();
        // The profiles hold the tables; this handle goes, so that a split by sample labels
        // can take them over without a copy.
        parca_profile::from_pprof_into(&pprof, &mut tables)
    }

    /// Keeps `tables` for the next decode if nothing else holds them any more (the profiles
    /// decoded into them are stored and dropped) and they are not too large.
    pub fn recycle(&self, tables: Arc<Tables>) {
        let entries =
            tables.n_strings() + tables.n_functions() + tables.n_locations() + tables.n_stacks();
        if Arc::strong_count(&tables) != 1 || entries > MAX_ENTRIES {
            return;
        }
        let mut idle = self.idle.lock().expect("tables pool lock poisoned");
        if idle.len() < MAX_IDLE {
            idle.push(tables);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn corpus(rel: &str) -> Vec<u8> {
        std::fs::read(
            std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("../../tests/testdata/pprof")
                .join(rel),
        )
        .expect("corpus file")
    }

    #[test]
    fn tables_come_back_grown_and_decode_as_fresh_ones_do() {
        let pool = TablesPool::new();
        let options = parca_pprof::DecodeOptions::default();
        let mut identity = None;
        for rel in ["go/go-cpu.pb.gz", "go/go-heap.pb.gz", "go/go-cpu.pb.gz"] {
            let bytes = corpus(rel);
            let reused = pool.decode(&bytes, &options).expect("decodes");
            let fresh = parca_profile::decode(&bytes, &options).expect("decodes");
            assert_eq!(reused.len(), fresh.len());
            for (r, f) in reused.iter().zip(&fresh) {
                assert_eq!(r.meta, f.meta);
                assert_eq!(r.total(), f.total());
                // A frame is its source lines, or its object file and address when it has
                // none: what makes two locations one (the address of a symbolized location is
                // the first one seen with its lines, which tables kept from earlier pushes may
                // have seen elsewhere).
                let frame = |p: &Profile, l| {
                    let t = &p.tables;
                    match t.lines(l) {
                        [] => t.location_display_name(l),
                        lines => lines
                            .iter()
                            .map(|line| {
                                let f = t.function(line.function);
                                format!("{}:{}", t.string(f.name), line.line)
                            })
                            .collect::<Vec<_>>()
                            .join(" "),
                    }
                };
                let folded = |p: &Profile| {
                    let mut rows: Vec<(Vec<String>, i64)> = (0..p.samples.len())
                        .map(|i| {
                            let stack = p.tables.stack(p.samples.stacks[i]);
                            let frames = stack.iter().map(|&l| frame(p, l)).collect();
                            (frames, p.samples.values[i])
                        })
                        .collect();
                    rows.sort();
                    rows
                };
                assert_eq!(folded(r), folded(f), "{rel}");
            }
            let tables = Arc::clone(&reused[0].tables);
            // Reused from the second decode on: the same tables, grown.
            if let Some(before) = identity {
                assert_eq!(tables.identity(), before, "{rel}");
            }
            identity = Some(tables.identity());
            drop(reused);
            pool.recycle(tables);
        }
    }

    #[test]
    fn tables_still_held_are_not_reused() {
        let pool = TablesPool::new();
        let bytes = corpus("go/go-cpu.pb.gz");
        let options = parca_pprof::DecodeOptions::default();
        let held = pool.decode(&bytes, &options).expect("decodes");
        pool.recycle(Arc::clone(&held[0].tables));
        let next = pool.decode(&bytes, &options).expect("decodes");
        assert_ne!(next[0].tables.identity(), held[0].tables.identity());
    }
}
