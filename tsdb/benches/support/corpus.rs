//! What the store's benchmarks share: profiles from the project's corpus.

use std::path::Path;

/// The profile of `sample_type` in the corpus file `rel` (under `tests/testdata/pprof`).
pub fn profile(rel: &str, sample_type: &str) -> parca_profile::Profile {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../tests/testdata/pprof")
        .join(rel);
    let profiles =
        parca_profile::decode(&std::fs::read(&path).expect("corpus"), &Default::default())
            .expect("decodes");
    parca_profile::select_sample_type(profiles, Some(sample_type), None).expect("sample type")
}
