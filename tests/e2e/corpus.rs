//! Every file of the corpus decodes, and its totals equal those an independent decoder
//! (pprof-format, recorded in MANIFEST.jsonl) found.

use parca_pprof::DecodeOptions;

use crate::support::{corpus_dir, corpus_files, read};

#[test]
fn every_corpus_file_decodes_with_the_manifest_totals() {
    let manifest = std::fs::read_to_string(corpus_dir().join("MANIFEST.jsonl")).expect("manifest");
    let mut checked = 0;
    for line in manifest.lines() {
        let entry: serde_json::Value = serde_json::from_str(line).expect("manifest line is JSON");
        let file = entry["file"].as_str().expect("file");
        let Some(totals) = entry["totals"].as_array() else {
            continue;
        };
        let path = corpus_dir().join(file);
        let profiles = parca_profile::decode(&read(&path), &DecodeOptions::default())
            .unwrap_or_else(|e| panic!("{file}: {e}"));
        let ours: Vec<String> = profiles.iter().map(|p| p.total().to_string()).collect();
        let theirs: Vec<String> = totals
            .iter()
            .map(|t| t.as_str().expect("total is a string").to_owned())
            .collect();
        assert_eq!(ours, theirs, "{file}: totals per sample type");
        checked += 1;
    }
    assert!(checked >= 40, "only {checked} manifest entries checked");
}

#[test]
fn every_corpus_file_survives_export_and_decode() {
    for (name, path) in corpus_files() {
        let profiles = parca_profile::decode(&read(&path), &DecodeOptions::default())
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        for profile in &profiles {
            let bytes = parca_pprof::encode(&parca_profile::to_pprof(profile), true);
            let again = parca_profile::decode(&bytes, &DecodeOptions::default())
                .unwrap_or_else(|e| panic!("{name}: our own export does not decode: {e}"));
            assert_eq!(again.len(), 1);
            assert_eq!(
                parca_profile::TopTable::build(&again[0]),
                parca_profile::TopTable::build(profile),
                "{name} {}: export changed the numbers",
                profile.meta.sample_type
            );
        }
    }
}

#[test]
fn legacy_go_cpu_format_decodes() {
    let path = corpus_dir().join("published/google-pprof/gobench.cpu");
    let profiles =
        parca_profile::decode(&read(&path), &DecodeOptions::default()).expect("legacy format");
    assert_eq!(profiles.len(), 2);
    assert_eq!(profiles[0].meta.sample_type.kind, "samples");
    assert!(profiles[0].total() > 0);
}

#[test]
fn truncated_corpus_file_says_where() {
    let path = corpus_dir().join("go/go-cpu.pb.gz");
    let raw = parca_pprof::decompress(&read(&path), &DecodeOptions::default())
        .expect("gzip")
        .into_owned();
    let err = parca_pprof::decode(&raw[..raw.len() / 2], &DecodeOptions::default())
        .expect_err("truncated");
    let message = err.to_string();
    assert!(message.contains("runs past the end"), "{message}");
}
