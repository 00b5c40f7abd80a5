//! `insights:`: deploy insights. Each entry names a profile type, the labels that name a
//! service, the label whose change is a deploy (`version`) and the window compared on each side
//! of the change; `pkg/rules` watches the store and compares.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::duration;

/// How long each side of a change is when `window` is not given.
pub const DEFAULT_INSIGHT_WINDOW: Duration = Duration::from_secs(600);

/// The noise floor when `min_change` is not given: one percentage point of the total.
pub const DEFAULT_INSIGHT_MIN_CHANGE: f64 = 0.01;

/// One `insights` entry.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct InsightConfig {
    /// `profile_type`: the profiles compared, e.g.
    /// `process_cpu:cpu:nanoseconds:cpu:nanoseconds:delta`.
    pub profile_type: String,
    /// `by`: the label names whose values name a service (a group); none: the whole store is
    /// one group.
    pub by: Vec<String>,
    /// `change_label`: the label whose new value in a group is a deploy, e.g. `version`.
    pub change_label: String,
    /// `window`: how much of each side is compared: the last `window` of the old value(s)
    /// and the first `window` of the new one. Default 10m.
    #[serde(serialize_with = "duration::serialize")]
    pub window: Duration,
    /// `min_change`: the noise floor, a share of the total (0 to 1): a function is listed
    /// only if its inclusive or its self share moved by at least this much. Default 0.01.
    pub min_change: f64,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawInsight {
    profile_type: Option<String>,
    by: Option<Vec<String>>,
    change_label: Option<String>,
    #[serde(default, deserialize_with = "duration::deserialize_positive_opt")]
    window: Option<Duration>,
    min_change: Option<f64>,
}

impl crate::checked::FromRaw for InsightConfig {
    type Raw = RawInsight;
    const EXPECTING: &'static str =
        "an insight with `profile_type`, `by`, `change_label`, `window` and `min_change`";

    fn from_raw(raw: RawInsight) -> Result<Self, String> {
        let Some(profile_type) = raw.profile_type else {
            return Err("`profile_type` must be set".to_owned());
        };
        if let Err(e) = parca_querylang::ProfileTypeName::parse(&profile_type) {
            return Err(format!("profile_type {profile_type:?}: {e}"));
        }
        let Some(change_label) = raw.change_label else {
            return Err("`change_label` must be set (the label whose change is a deploy, such as `version`)".to_owned());
        };
        let by = raw.by.unwrap_or_default();
        for name in by.iter().chain([&change_label]) {
            if !parca_querylang::is_valid_label_name(name) || name.starts_with("__") {
                return Err(format!(
                    "{name:?} is not a label name a series can carry (letters, digits and `_`, not starting with a digit or `__`)"
                ));
            }
        }
        if let Some(i) = (1..by.len()).find(|&i| by[..i].contains(&by[i])) {
            return Err(format!("`by` names {:?} twice", by[i]));
        }
        if by.contains(&change_label) {
            return Err(format!(
                "`by` names the change_label {change_label:?}: a service's label cannot be the one that changes"
            ));
        }
        let min_change = raw.min_change.unwrap_or(DEFAULT_INSIGHT_MIN_CHANGE);
        if !(min_change > 0.0 && min_change < 1.0) {
            return Err(format!(
                "min_change {min_change} must be a share of the total above 0 and below 1, such as 0.01"
            ));
        }
        Ok(InsightConfig {
            profile_type,
            by,
            change_label,
            window: raw.window.unwrap_or(DEFAULT_INSIGHT_WINDOW),
            min_change,
        })
    }
}

#[cfg(test)]
mod tests {
    use crate::parse;

    #[test]
    fn insights_are_read_with_their_defaults() {
        let config = parse(
            "insights:\n  - profile_type: process_cpu:cpu:nanoseconds:cpu:nanoseconds:delta\n    by: [job]\n    change_label: version\n  - profile_type: memory:alloc_space:bytes:space:bytes\n    by: [namespace, app]\n    change_label: image\n    window: 5m\n    min_change: 0.05\n",
            "parca.yaml",
        )
        .unwrap();
        let [a, b] = &config.insights[..] else {
            panic!("two insights: {:?}", config.insights)
        };
        assert_eq!(
            a.profile_type,
            "process_cpu:cpu:nanoseconds:cpu:nanoseconds:delta"
        );
        assert_eq!(a.by, ["job"]);
        assert_eq!(a.change_label, "version");
        assert_eq!(a.window, super::DEFAULT_INSIGHT_WINDOW);
        assert_eq!(a.min_change, 0.01);
        assert_eq!(b.by, ["namespace", "app"]);
        assert_eq!(b.window.as_secs(), 300);
        assert_eq!(b.min_change, 0.05);
        assert!(config.to_yaml().contains("change_label: image"));
    }

    #[test]
    fn bad_insights_are_located_errors() {
        for (yaml, want) in [
            (
                "insights:\n  - by: [job]\n    change_label: version\n",
                "parca.yaml:2:5: insights[0]: `profile_type` must be set",
            ),
            (
                "insights:\n  - profile_type: cpu\n    change_label: version\n",
                "parca.yaml:2:5: insights[0]: profile_type \"cpu\": ",
            ),
            (
                "insights:\n  - profile_type: a:b:c:d:e\n",
                "parca.yaml:2:5: insights[0]: `change_label` must be set",
            ),
            (
                "insights:\n  - profile_type: a:b:c:d:e\n    by: [job, job]\n    change_label: v\n",
                "parca.yaml:2:5: insights[0]: `by` names \"job\" twice",
            ),
            (
                "insights:\n  - profile_type: a:b:c:d:e\n    by: [version]\n    change_label: version\n",
                "parca.yaml:2:5: insights[0]: `by` names the change_label \"version\"",
            ),
            (
                "insights:\n  - profile_type: a:b:c:d:e\n    change_label: 1x\n",
                "parca.yaml:2:5: insights[0]: \"1x\" is not a label name",
            ),
            (
                "insights:\n  - profile_type: a:b:c:d:e\n    change_label: v\n    min_change: 1.5\n",
                "parca.yaml:2:5: insights[0]: min_change 1.5 must be a share",
            ),
            (
                "insights:\n  - profile_type: a:b:c:d:e\n    change_label: v\n    window: 0s\n",
                "parca.yaml:4:13: insights[0].window: ",
            ),
            (
                "insights:\n  - profile_type: a:b:c:d:e\n    change_label: v\n    windows: 1m\n",
                "parca.yaml:4:5: insights[0]: unknown field `windows`",
            ),
        ] {
            let err = parse(yaml, "parca.yaml").unwrap_err().to_string();
            assert!(err.starts_with(want), "{yaml}: got {err}, want {want}…");
        }
    }
}
