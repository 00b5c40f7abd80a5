//! What the query benches share: the corpus CPU profile they store.

/// The CPU time of `tests/testdata/pprof/go/go-cpu.pb.gz`, its `pprof.Do` labels dropped so that
/// each stored copy is one series (what they split is summed).
pub fn corpus_cpu_profile() -> parca_profile::Profile {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../tests/testdata/pprof/go/go-cpu.pb.gz"
    );
    let mut profile =
        parca_profile::decode(&std::fs::read(path).expect("corpus"), &Default::default())
            .expect("valid")
            .into_iter()
            .find(|p| p.meta.sample_type.kind == "cpu")
            .expect("cpu");
    profile
        .samples
        .labels
        .fill(parca_profile::tables::LabelSetId::EMPTY);
    parca_profile::merge([&profile]).expect("merge")
}
