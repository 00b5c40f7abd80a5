//! A profile acknowledged to a writer survives `kill -9`: a real writer process is killed at
//! random moments, many times, and every reopen must find every acknowledged profile, intact,
//! and nothing half-written. Every other round the writer uses 25 ms blocks, so kills also land
//! while the head is cut into blocks, the WAL checkpointed and blocks compacted; in half the
//! rounds it commits buffered, as scrapes do (no fsync; a killed process must lose nothing).

use std::collections::BTreeSet;
use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};

use parca_tsdb::{Db, Options};

use crate::support::corpus_dir;

/// A small deterministic generator, so a failing run can be repeated from its seed.
struct Lcg(u64);

impl Lcg {
    fn below(&mut self, n: u64) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (self.0 >> 33) % n
    }
}

#[test]
fn acknowledged_profiles_survive_sigkill() {
    let dir = tempfile::tempdir().expect("tempdir");
    // A real but small profile: every reopen replays the whole WAL, in a debug build.
    let profile_file = corpus_dir().join("go/go-goroutine.pb.gz");
    let expected_total = {
        let profiles = parca_profile::decode(
            &std::fs::read(&profile_file).expect("read"),
            &Default::default(),
        )
        .expect("decodes");
        parca_profile::select_sample_type(profiles, None, None)
            .expect("a sample type")
            .total()
    };
    let seed = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock")
        .as_nanos() as u64;
    let mut rng = Lcg(seed);
    let mut acked: BTreeSet<(String, i64)> = BTreeSet::new();
    for round in 0..20 {
        let mut writer = Command::new(env!("CARGO_BIN_EXE_tsdb-crash-writer"));
        writer.arg(dir.path()).arg(&profile_file);
        if round % 2 == 1 {
            writer.arg("25");
        }
        if round % 4 >= 2 {
            writer.arg("buffered");
        }
        let mut child = writer
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("start writer");
        let kill_after = 1 + rng.below(300);
        let mut lines = BufReader::new(child.stdout.take().expect("stdout")).lines();
        for _ in 0..kill_after {
            let line = lines
                .next()
                .expect("writer died on its own")
                .expect("read ack");
            let (instance, ts) = line.split_once(' ').expect("`instance ts`");
            acked.insert((instance.to_owned(), ts.parse().expect("timestamp")));
        }
        child.kill().expect("SIGKILL"); // std sends SIGKILL on Unix
        child.wait().expect("reap");
        // Acks already in the pipe when the kill landed are acknowledgments too.
        for line in lines.map_while(Result::ok) {
            if let Some((instance, ts)) = line.split_once(' ')
                && let Ok(ts) = ts.parse()
            {
                acked.insert((instance.to_owned(), ts));
            }
        }

        let options = Options {
            block_duration_ms: if round % 2 == 1 { 25 } else { 2 * 3_600_000 },
            ..Options::default()
        };
        let db = Db::open(dir.path(), options)
            .unwrap_or_else(|e| panic!("round {round} (seed {seed}): reopen failed: {e}"));
        db.compact()
            .unwrap_or_else(|e| panic!("round {round} (seed {seed}): compaction failed: {e}"));
        assert!(
            db.quarantined().is_empty(),
            "round {round} (seed {seed}): a block was quarantined: {:?}",
            db.quarantined()
        );
        let mut stored: BTreeSet<(String, i64)> = BTreeSet::new();
        for series in db.querier(i64::MIN, i64::MAX).select(&[]).expect("query") {
            let instance = series.labels.get("instance").expect("instance").to_owned();
            for (ts, profile) in &series.profiles {
                assert_eq!(
                    profile.total(),
                    expected_total,
                    "round {round} (seed {seed}): half-written profile {instance} {ts}"
                );
                stored.insert((instance.clone(), *ts));
            }
        }
        let lost: Vec<_> = acked.difference(&stored).collect();
        assert!(
            lost.is_empty(),
            "round {round} (seed {seed}): acknowledged but lost: {lost:?}"
        );
    }
    assert!(
        acked.len() >= 20,
        "the writer acknowledged only {} profiles",
        acked.len()
    );
}
