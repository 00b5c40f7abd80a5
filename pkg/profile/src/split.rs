//! Splitting profiles by their samples' string labels, which become series labels in the store.

use std::sync::Arc;

use indexmap::IndexMap;
use rustc_hash::{FxBuildHasher, FxHashMap};

use crate::profile::{Profile, Samples};
use crate::tables::{Label, LabelSetId, LabelValue, Tables};

/// The samples of some profiles that share one set of string labels.
#[derive(Debug, Clone)]
pub struct LabelGroup {
    /// The string labels (name, value) every sample of the group carries, sorted by name.
    pub labels: Vec<(String, String)>,
    /// One profile per input profile that has samples in this group, in input order. Their
    /// samples keep only their numeric labels.
    pub profiles: Vec<Profile>,
}

/// Splits profiles by the string labels of their samples (Go's `pprof.Do` labels, an agent's
/// `pid` and `comm`), so that each group can be stored as a series of its own and selected by
/// those labels. Numeric labels (Go's `bytes`) stay on the samples.
///
/// Profiles without string labels come back as one group with no labels and untouched. The
/// input profiles should share their tables (the sample types of one pprof); otherwise the
/// tables of the first are used for all, which is wrong, so it is checked.
///
/// # Panics
///
/// When the profiles do not all share one `Tables`.
#[expect(
    clippy::too_many_lines,
    reason = "one walk over the samples splitting tables and samples together"
)]
pub fn split_by_string_labels(profiles: Vec<Profile>) -> Vec<LabelGroup> {
    let Some(first) = profiles.first() else {
        return Vec::new();
    };
    assert!(
        profiles
            .iter()
            .all(|p| Arc::ptr_eq(&p.tables, &first.tables)),
        "split_by_string_labels takes the profiles of one pprof, which share tables"
    );
    let has_string_labels = profiles.iter().any(|p| {
        p.samples.labels.iter().any(|&set| {
            p.tables
                .label_set(set)
                .iter()
                .any(|l| matches!(l.value, LabelValue::Str(_)))
        })
    });
    if !has_string_labels {
        return vec![LabelGroup {
            labels: Vec::new(),
            profiles,
        }];
    }

    // Take the samples out so that the tables' Arc becomes unique and can be extended without
    // a copy when nothing else holds it.
    let mut parts = Vec::with_capacity(profiles.len());
    let mut shared = None;
    for p in profiles {
        parts.push((p.meta, p.samples));
        shared = Some(p.tables);
    }
    let mut tables: Tables = Arc::unwrap_or_clone(shared.expect("at least one profile"));

    // Per label set: its group and what remains of it (the numeric labels).
    let mut groups: IndexMap<Vec<(String, String)>, (), FxBuildHasher> = IndexMap::default();
    let mut remap: FxHashMap<LabelSetId, (usize, LabelSetId)> = FxHashMap::default();
    for (_, samples) in &parts {
        for &set in &samples.labels {
            if remap.contains_key(&set) {
                continue;
            }
            let mut strings = Vec::new();
            let mut numbers: Vec<Label> = Vec::new();
            for label in tables.label_set(set) {
                match label.value {
                    LabelValue::Str(value) => strings.push((
                        tables.string(label.key).to_owned(),
                        tables.string(value).to_owned(),
                    )),
                    LabelValue::Num { .. } => numbers.push(*label),
                }
            }
            strings.sort();
            let group = groups.insert_full(strings, ()).0;
            let rest = tables.intern_label_set(numbers);
            remap.insert(set, (group, rest));
        }
    }

    let tables = Arc::new(tables);
    let mut out: Vec<LabelGroup> = groups
        .into_keys()
        .map(|labels| LabelGroup {
            labels,
            profiles: Vec::new(),
        })
        .collect();
    for (meta, samples) in parts {
        let mut split: Vec<Samples> = vec![
            Samples {
                diff_base: samples.diff_base.as_ref().map(|_| Vec::new()),
                ..Samples::default()
            };
            out.len()
        ];
        for i in 0..samples.len() {
            let (group, rest) = remap[&samples.labels[i]];
            let dst = &mut split[group];
            dst.stacks.push(samples.stacks[i]);
            dst.labels.push(rest);
            dst.values.push(samples.values[i]);
            if let (Some(dst), Some(src)) = (&mut dst.diff_base, &samples.diff_base) {
                dst.push(src[i]);
            }
        }
        for (group, samples) in split.into_iter().enumerate() {
            if !samples.is_empty() {
                out[group].profiles.push(Profile {
                    tables: Arc::clone(&tables),
                    meta: meta.clone(),
                    samples,
                });
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pprof_with_labels() -> Vec<Profile> {
        use parca_pprof::proto;
        let s = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        let label = |key: i64, str: i64, num: i64| proto::Label {
            key,
            str,
            num,
            ..Default::default()
        };
        let profile = proto::Profile {
            string_table: s(&["", "cpu", "ns", "a", "b", "handler", "api", "bytes", "db"]),
            sample_type: vec![proto::ValueType { r#type: 1, unit: 2 }],
            period_type: Some(proto::ValueType { r#type: 1, unit: 2 }),
            function: vec![
                proto::Function {
                    id: 1,
                    name: 3,
                    ..Default::default()
                },
                proto::Function {
                    id: 2,
                    name: 4,
                    ..Default::default()
                },
            ],
            location: (1..=2)
                .map(|id| proto::Location {
                    id,
                    line: vec![proto::Line {
                        function_id: id,
                        line: 0,
                        column: 0,
                    }],
                    ..Default::default()
                })
                .collect(),
            sample: vec![
                proto::Sample {
                    location_id: vec![1],
                    value: vec![10],
                    label: vec![label(5, 6, 0)],
                },
                proto::Sample {
                    location_id: vec![2],
                    value: vec![20],
                    label: vec![label(5, 6, 0), label(7, 0, 512)],
                },
                proto::Sample {
                    location_id: vec![1],
                    value: vec![5],
                    label: vec![label(5, 8, 0)],
                },
                proto::Sample {
                    location_id: vec![2],
                    value: vec![1],
                    label: vec![],
                },
            ],
            ..Default::default()
        };
        let bytes = parca_pprof::encode(&profile, false);
        crate::decode(&bytes, &Default::default()).expect("valid pprof")
    }

    #[test]
    fn splits_by_string_labels_and_keeps_numeric_ones() {
        let groups = split_by_string_labels(pprof_with_labels());
        let summary: Vec<_> = groups
            .iter()
            .map(|g| (g.labels.clone(), g.profiles[0].total()))
            .collect();
        assert_eq!(
            summary,
            vec![
                (vec![("handler".into(), "api".into())], 30),
                (vec![("handler".into(), "db".into())], 5),
                (vec![], 1),
            ]
        );
        let api = &groups[0].profiles[0];
        let numeric: Vec<_> = api
            .samples
            .labels
            .iter()
            .map(|&set| api.tables.label_set(set).len())
            .collect();
        assert_eq!(
            numeric,
            vec![0, 1],
            "the bytes label stays, the handler label goes"
        );
    }

    #[test]
    fn profiles_without_string_labels_stay_whole() {
        let profiles = crate::test_support::profile(&[("a;b", 3), ("a", 1)]);
        let groups = split_by_string_labels(vec![profiles]);
        assert_eq!(groups.len(), 1);
        assert!(groups[0].labels.is_empty());
        assert_eq!(groups[0].profiles[0].total(), 4);
    }
}
