//! Finding targets: `static_configs` and `file_sd_configs` groups, relabeled.

use std::collections::BTreeMap;
use std::path::Path;

use parca_config::ScrapeConfig;
use serde::Deserialize;

use crate::target::{Target, discovered_labels};

/// A group of targets sharing labels, as in a file_sd file.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileGroup {
    targets: Vec<String>,
    #[serde(default)]
    labels: BTreeMap<String, String>,
}

/// What discovery found for one job.
#[derive(Debug, Default)]
pub(crate) struct Discovered {
    /// Targets to scrape, in a stable order, without duplicates.
    pub active: Vec<Target>,
    /// Discovered labels of targets that relabeling dropped.
    pub dropped: Vec<BTreeMap<String, String>>,
}

/// Reads every target group of a job (static ones and the files of file_sd), relabels each
/// target and splits them into active and dropped. A file that cannot be read or parsed is
/// logged and skipped; the other groups still count.
pub(crate) fn discover(config: &ScrapeConfig) -> Discovered {
    let mut groups: Vec<(Vec<String>, BTreeMap<String, String>)> = config
        .static_configs
        .iter()
        .map(|g| (g.targets.clone(), g.labels.clone()))
        .collect();
    for sd in &config.file_sd_configs {
        for pattern in &sd.files {
            let paths = match glob::glob(pattern) {
                Ok(paths) => paths.filter_map(Result::ok).collect::<Vec<_>>(),
                Err(e) => {
                    tracing::warn!(job = config.job_name, pattern, error = %e, "invalid file_sd pattern");
                    continue;
                }
            };
            for path in paths {
                match read_file(&path) {
                    Ok(file_groups) => {
                        for g in file_groups {
                            let mut labels = g.labels;
                            labels.insert("__meta_filepath".into(), path.display().to_string());
                            groups.push((g.targets, labels));
                        }
                    }
                    Err(why) => tracing::warn!(
                        job = config.job_name,
                        file = %path.display(),
                        error = %why,
                        "cannot read file_sd targets; keeping the other groups"
                    ),
                }
            }
        }
    }
    let mut out = Discovered::default();
    for (targets, labels) in groups {
        for address in targets {
            let discovered = discovered_labels(config, &address, &labels);
            match parca_config::relabel(&discovered, &config.relabel_configs) {
                Some(mut relabeled)
                    if relabeled.get("__address__").is_some_and(|a| !a.is_empty()) =>
                {
                    if !relabeled.contains_key("instance") {
                        let address = relabeled["__address__"].clone();
                        relabeled.insert("instance".into(), address);
                    }
                    let target = Target {
                        job: config.job_name.clone(),
                        discovered,
                        relabeled,
                    };
                    if !out.active.contains(&target) {
                        out.active.push(target);
                    }
                }
                _ => out.dropped.push(discovered),
            }
        }
    }
    out
}

/// A file_sd file: a list of groups, in JSON or YAML by its extension.
fn read_file(path: &Path) -> Result<Vec<FileGroup>, String> {
    let text = std::fs::read_to_string(path).map_err(|e| e.to_string())?;
    let is_json = path.extension().is_some_and(|e| e == "json");
    if is_json {
        serde_json::from_str(&text).map_err(|e| e.to_string())
    } else {
        serde_yaml::from_str(&text).map_err(|e| e.to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn static_and_file_targets_are_relabeled() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(
            dir.path().join("t.json"),
            r#"[{"targets": ["b:2", "drop:1"], "labels": {"env": "prod"}}]"#,
        )
        .unwrap();
        let yaml = format!(
            r#"
scrape_configs:
  - job_name: api
    static_configs:
      - targets: ["a:1"]
    file_sd_configs:
      - files: ["{}/*.json"]
    relabel_configs:
      - source_labels: [__address__]
        regex: "drop:.*"
        action: drop
"#,
            dir.path().display()
        );
        let config = parca_config::parse(&yaml, "test.yaml").unwrap();
        let found = discover(&config.scrape_configs[0]);
        let instances: Vec<_> = found.active.iter().map(|t| t.series_labels()).collect();
        assert_eq!(instances.len(), 2);
        assert_eq!(instances[0]["instance"], "a:1");
        assert_eq!(instances[1]["instance"], "b:2");
        assert_eq!(instances[1]["env"], "prod");
        assert_eq!(instances[1]["job"], "api");
        assert_eq!(found.dropped.len(), 1);
        assert_eq!(found.dropped[0]["__address__"], "drop:1");
    }
}
