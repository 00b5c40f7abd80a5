//! Any bytes into the pprof decoder: no panic, no hang, no unbounded allocation; whatever
//! decodes also normalizes, exports, re-decodes to the same numbers, and renders.
#![no_main]

use libfuzzer_sys::fuzz_target;
use parca_pprof::DecodeOptions;

fuzz_target!(|data: &[u8]| {
    // A small limit keeps each run fast; the limit itself is what is under test for gzip bombs.
    let options = DecodeOptions { max_decompressed_bytes: 1 << 20 };
    let Ok(profiles) = parca_profile::decode(data, &options) else { return };
    for profile in &profiles {
        let exported = parca_pprof::encode(&parca_profile::to_pprof(profile), false);
        let again = parca_profile::decode(&exported, &DecodeOptions::default()).expect("our own export decodes");
        assert_eq!(again[0].total(), profile.total());
        let mut sink = Vec::new();
        parca_profile::FlameGraph::build(profile).write_folded(&mut sink).expect("write to vec");
        let _ = parca_profile::TopTable::build(profile);
        let _ = parca_profile::merge([profile, &again[0]]);
    }
});
