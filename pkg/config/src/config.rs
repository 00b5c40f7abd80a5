//! The whole file: `global`, `scrape_configs`, `object_storage`; parsing in three passes and
//! writing back.

use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::de::{self, DeserializeSeed, Deserializer, IgnoredAny, MapAccess, Visitor};
use serde::{Deserialize, Serialize};

use crate::Error;
use crate::alerting::{AlertingConfig, RawAlerting};
use crate::checked::Checked;
use crate::checked::str_then;
use crate::checked::unwrap_list;
use crate::duration;
use crate::error::{invalid_error, syntax_error};
use crate::insights::InsightConfig;
use crate::labels::label_set_opt;
use crate::remote_write::RemoteWriteConfig;
use crate::rules::{RuleFile, load_rules};
use crate::scrape::{DEFAULT_SCRAPE_INTERVAL, JobDefaults, ScrapeConfig, ScrapeConfigsSeed};
use crate::storage::ObjectStorage;

/// A loaded parca.yaml, every default filled in. Compare two with `==` to see what a reload
/// changed (per job: compare the [`ScrapeConfig`]s with the same `job_name`).
#[derive(Debug, Clone, PartialEq, Default, Serialize)]
pub struct Config {
    /// `global`: defaults for every job, and labels for the whole server.
    pub global: GlobalConfig,
    /// `scrape_configs`: the jobs, in file order. Default: none.
    pub scrape_configs: Vec<ScrapeConfig>,
    /// `object_storage`: where blocks are shipped. Default: nowhere.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub object_storage: Option<ObjectStorage>,
    /// `query_stores`: the shards a querier reads beside the bucket, each group written as a
    /// scrape job (`static_configs` and `file_sd_configs` name the shards' addresses; `scheme`,
    /// `tls_config`, `basic_auth`, `authorization`, `oauth2` and proxy settings say how to
    /// reach them; `profiling_config` is not used). Default: none.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub query_stores: Vec<ScrapeConfig>,
    /// `rule_files`: globs of rule files (Prometheus' format, [`crate::parse_rules`]), relative
    /// to the configuration file's folder. Default: none.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub rule_files: Vec<String>,
    /// The rule files that `rule_files` matched, each read and checked, in path order: filled
    /// by [`load`] (a bad rule file fails the load, so a reload keeps the old rules), empty
    /// after [`parse`].
    #[serde(skip)]
    pub rules: Vec<(PathBuf, RuleFile)>,
    /// `alerting`: the Alertmanagers alerts go to. Default: none.
    #[serde(skip_serializing_if = "AlertingConfig::is_empty")]
    pub alerting: AlertingConfig,
    /// `remote_write`: receivers of the recorded series. Default: none.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub remote_write: Vec<RemoteWriteConfig>,
    /// `insights`: deploy insights, each comparing a service's profiles before and after a
    /// label (`version`) changes. Default: none.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub insights: Vec<InsightConfig>,
    /// `span_labels`: the label names whose values are span attributes, stored per sample
    /// rather than as series labels (a series per span would swamp the index), and selected by
    /// matchers on them (`{span_id="…"}`). Distinct valid label names, not `__name__`. `None`:
    /// the server's default, `span_id`, `trace_id` and `profile_id`; an empty list: none.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub span_labels: Option<Vec<String>>,
}

/// How often rule groups are evaluated when neither they nor `global` say: Prometheus' default.
pub const DEFAULT_EVALUATION_INTERVAL: Duration = Duration::from_secs(60);

/// `global` (Prometheus' section).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct GlobalConfig {
    /// `scrape_interval`: the default for jobs. Default 10s.
    #[serde(serialize_with = "duration::serialize")]
    pub scrape_interval: Duration,
    /// `scrape_timeout`: the default for jobs. When not set (`None`), each job's timeout is its
    /// own interval + 3s.
    #[serde(
        skip_serializing_if = "Option::is_none",
        serialize_with = "duration::serialize_opt"
    )]
    pub scrape_timeout: Option<Duration>,
    /// `evaluation_interval`: how often rule groups without their own `interval` are
    /// evaluated. Default 1m, as Prometheus.
    #[serde(serialize_with = "duration::serialize")]
    pub evaluation_interval: Duration,
    /// `external_labels`: labels that describe this server, for federation and for shipped
    /// blocks. Default: none.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub external_labels: BTreeMap<String, String>,
}

impl Default for GlobalConfig {
    fn default() -> Self {
        GlobalConfig {
            scrape_interval: DEFAULT_SCRAPE_INTERVAL,
            scrape_timeout: None,
            evaluation_interval: DEFAULT_EVALUATION_INTERVAL,
            external_labels: BTreeMap::new(),
        }
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawGlobal {
    #[serde(default, deserialize_with = "duration::deserialize_positive_opt")]
    scrape_interval: Option<Duration>,
    #[serde(default, deserialize_with = "duration::deserialize_positive_opt")]
    scrape_timeout: Option<Duration>,
    #[serde(default, deserialize_with = "duration::deserialize_positive_opt")]
    evaluation_interval: Option<Duration>,
    #[serde(default, deserialize_with = "label_set_opt")]
    external_labels: Option<BTreeMap<String, String>>,
}

impl RawGlobal {
    fn resolve(self) -> GlobalConfig {
        GlobalConfig {
            scrape_interval: self.scrape_interval.unwrap_or(DEFAULT_SCRAPE_INTERVAL),
            scrape_timeout: self.scrape_timeout,
            evaluation_interval: self
                .evaluation_interval
                .unwrap_or(DEFAULT_EVALUATION_INTERVAL),
            external_labels: self.external_labels.unwrap_or_default(),
        }
    }
}

/// Pass 2 reads `global` before the jobs, wherever it is in the file.
#[derive(Deserialize)]
struct GlobalOnly {
    global: Option<RawGlobal>,
}

/// Parses parca.yaml text. `source_name` (usually the file name) starts every error message.
///
/// Unknown keys, values of the wrong type and broken rules are errors that give the line, the
/// column and the key path. An empty text is a valid, empty configuration.
///
/// ```
/// let config = parca_config::parse("scrape_configs: [{job_name: a}]", "parca.yaml").unwrap();
/// assert_eq!(config.scrape_configs[0].scrape_interval.as_secs(), 10);
///
/// let text = "scrape_configs:\n  - job_name: a\n    scrape_intervall: 1s\n";
/// let err = parca_config::parse(text, "parca.yaml").unwrap_err().to_string();
/// assert!(err.starts_with(
///     "parca.yaml:3:5: scrape_configs[0]: unknown field `scrape_intervall`, expected one of `job_name`, "
/// ));
/// ```
pub fn parse(yaml: &str, source_name: &str) -> Result<Config, Error> {
    // Pass 1: is it YAML at all? Separates syntax errors from schema errors.
    serde_yaml::Deserializer::from_str(yaml)
        .deserialize_ignored_any(IgnoredAny)
        .map_err(|e| syntax_error(&e, source_name))?;

    // Pass 2: `global`, whose defaults the jobs need.
    // Other errors met on the way are left for pass 3, which reports them in file order.
    let global = match decode::<Option<GlobalOnly>>(yaml, source_name) {
        Ok(g) => g
            .and_then(|g| g.global)
            .map(RawGlobal::resolve)
            .unwrap_or_default(),
        Err(e @ Error::Invalid { .. }) if e.is_under("global") => return Err(e),
        Err(_) => GlobalConfig::default(),
    };
    let defaults = JobDefaults {
        scrape_interval: global.scrape_interval,
        scrape_timeout: global.scrape_timeout,
    };

    // Pass 3: everything, checked where it is written.
    let mut track = serde_path_to_error::Track::new();
    let de = serde_path_to_error::Deserializer::new(
        serde_yaml::Deserializer::from_str(yaml),
        &mut track,
    );
    match (ConfigSeed {
        defaults: &defaults,
    })
    .deserialize(de)
    {
        Ok(config) => Ok(config),
        Err(e) => Err(invalid_error(
            serde_path_to_error::Error::new(track.path(), e),
            source_name,
        )),
    }
}

fn decode<T: for<'de> Deserialize<'de>>(yaml: &str, source_name: &str) -> Result<T, Error> {
    serde_path_to_error::deserialize(serde_yaml::Deserializer::from_str(yaml))
        .map_err(|e| invalid_error(e, source_name))
}

/// Reads and parses a file. File paths in the configuration (`password_file`,
/// `credentials_file`, `tls_config` files, `file_sd_configs` files) that are relative are made
/// relative to the file's folder, as Prometheus does.
pub fn load(path: impl AsRef<Path>) -> Result<Config, Error> {
    let path = path.as_ref();
    let text = std::fs::read_to_string(path).map_err(|source| Error::Read {
        path: path.to_owned(),
        source,
    })?;
    let mut config = parse(&text, &path.display().to_string())?;
    let dir = path.parent().unwrap_or(Path::new(""));
    if !dir.as_os_str().is_empty() {
        for job in &mut config.scrape_configs {
            job.set_directory(dir);
        }
        for am in &mut config.alerting.alertmanagers {
            am.set_directory(dir);
        }
        for rw in &mut config.remote_write {
            rw.set_directory(dir);
        }
    }
    config.rules = read_rule_files(&config.rule_files, dir, &path.display().to_string())?;
    Ok(config)
}

/// The rule files matched by `globs` (relative ones under `dir`), each read and checked, in
/// path order, each file once.
fn read_rule_files(
    globs: &[String],
    dir: &Path,
    source_name: &str,
) -> Result<Vec<(PathBuf, RuleFile)>, Error> {
    let mut paths = std::collections::BTreeSet::new();
    for pattern in globs {
        let full = if Path::new(pattern).is_absolute() || dir.as_os_str().is_empty() {
            pattern.clone()
        } else {
            dir.join(pattern).display().to_string()
        };
        // The pattern compiled when parsed; the folder's name may hold glob characters.
        let matches = glob::glob(&full).map_err(|e| Error::Invalid {
            source_name: source_name.to_owned(),
            location: None,
            path: "rule_files".into(),
            message: format!("invalid glob {full:?}: {e}"),
        })?;
        paths.extend(matches.filter_map(Result::ok).filter(|p| p.is_file()));
    }
    paths
        .into_iter()
        .map(|path| load_rules(&path).map(|file| (path, file)))
        .collect()
}

impl Config {
    /// The configuration as YAML, every default written out and secrets shown as `<secret>`
    /// (for `/api/v1/status/config`). Parsing it again gives the same configuration, secrets
    /// aside.
    pub fn to_yaml(&self) -> String {
        serde_yaml::to_string(self)
            // Serializing these types cannot fail: keys are strings, paths are written lossily.
            .unwrap_or_else(|e| format!("# the configuration cannot be shown: {e}\n"))
    }
}

struct ConfigSeed<'a> {
    defaults: &'a JobDefaults,
}

#[derive(Deserialize)]
#[serde(field_identifier, rename_all = "snake_case")]
enum TopKey {
    Global,
    ScrapeConfigs,
    ObjectStorage,
    QueryStores,
    RuleFiles,
    Alerting,
    RemoteWrite,
    Insights,
    SpanLabels,
}

impl<'de> DeserializeSeed<'de> for ConfigSeed<'_> {
    type Value = Config;

    #[expect(
        clippy::too_many_lines,
        reason = "serde's visitor of parca.yaml's top level: one arm per key"
    )]
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Config, D::Error> {
        struct V<'a>(&'a JobDefaults);
        impl<'de> Visitor<'de> for V<'_> {
            type Value = Config;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(
                    "a mapping with `global`, `scrape_configs`, `object_storage`, `query_stores`, `rule_files`, `alerting`, `remote_write`, `insights` or `span_labels`",
                )
            }
            fn visit_none<E: de::Error>(self) -> Result<Config, E> {
                Ok(Config::default())
            }
            fn visit_unit<E: de::Error>(self) -> Result<Config, E> {
                Ok(Config::default())
            }
            fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<Config, D::Error> {
                d.deserialize_map(self)
            }
            #[expect(
                clippy::too_many_lines,
                reason = "one arm per top-level key of parca.yaml"
            )]
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Config, A::Error> {
                let mut global: Option<GlobalConfig> = None;
                let mut scrape_configs: Option<Vec<ScrapeConfig>> = None;
                let mut object_storage: Option<Option<ObjectStorage>> = None;
                let mut query_stores: Option<Vec<ScrapeConfig>> = None;
                let mut rule_files: Option<Vec<String>> = None;
                let mut alerting: Option<AlertingConfig> = None;
                let mut remote_write: Option<Vec<RemoteWriteConfig>> = None;
                let mut insights: Option<Vec<InsightConfig>> = None;
                let mut span_labels: Option<Option<Vec<SpanLabel>>> = None;
                while let Some(key) = map.next_key::<TopKey>()? {
                    match key {
                        TopKey::Global => {
                            if global.is_some() {
                                return Err(de::Error::duplicate_field("global"));
                            }
                            let raw: Option<RawGlobal> = map.next_value()?;
                            global = Some(raw.map(RawGlobal::resolve).unwrap_or_default());
                        }
                        TopKey::ScrapeConfigs => {
                            if scrape_configs.is_some() {
                                return Err(de::Error::duplicate_field("scrape_configs"));
                            }
                            scrape_configs = Some(map.next_value_seed(ScrapeConfigsSeed(self.0))?);
                        }
                        TopKey::ObjectStorage => {
                            if object_storage.is_some() {
                                return Err(de::Error::duplicate_field("object_storage"));
                            }
                            let o: Option<Checked<ObjectStorage>> = map.next_value()?;
                            object_storage = Some(o.map(|c| c.0));
                        }
                        TopKey::QueryStores => {
                            if query_stores.is_some() {
                                return Err(de::Error::duplicate_field("query_stores"));
                            }
                            query_stores = Some(map.next_value_seed(ScrapeConfigsSeed(self.0))?);
                        }
                        TopKey::RuleFiles => {
                            if rule_files.is_some() {
                                return Err(de::Error::duplicate_field("rule_files"));
                            }
                            let globs: Option<Vec<RuleGlob>> = map.next_value()?;
                            rule_files =
                                Some(globs.unwrap_or_default().into_iter().map(|g| g.0).collect());
                        }
                        TopKey::Alerting => {
                            if alerting.is_some() {
                                return Err(de::Error::duplicate_field("alerting"));
                            }
                            let raw: Option<RawAlerting> = map.next_value()?;
                            alerting = Some(raw.map(RawAlerting::resolve).unwrap_or_default());
                        }
                        TopKey::RemoteWrite => {
                            if remote_write.is_some() {
                                return Err(de::Error::duplicate_field("remote_write"));
                            }
                            remote_write = Some(unwrap_list(map.next_value()?));
                        }
                        TopKey::Insights => {
                            if insights.is_some() {
                                return Err(de::Error::duplicate_field("insights"));
                            }
                            insights = Some(unwrap_list(map.next_value()?));
                        }
                        TopKey::SpanLabels => {
                            if span_labels.is_some() {
                                return Err(de::Error::duplicate_field("span_labels"));
                            }
                            span_labels = Some(map.next_value()?);
                        }
                    }
                }
                Ok(Config {
                    global: global.unwrap_or_default(),
                    scrape_configs: scrape_configs.unwrap_or_default(),
                    object_storage: object_storage.flatten(),
                    query_stores: query_stores.unwrap_or_default(),
                    rule_files: rule_files.unwrap_or_default(),
                    rules: Vec::new(),
                    alerting: alerting.unwrap_or_default(),
                    remote_write: remote_write.unwrap_or_default(),
                    insights: insights.unwrap_or_default(),
                    span_labels: span_label_names(span_labels.flatten())?,
                })
            }
        }
        d.deserialize_option(V(self.defaults))
    }
}

/// A `rule_files` entry: a glob pattern, checked where it is written.
struct RuleGlob(String);

impl<'de> Deserialize<'de> for RuleGlob {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        str_then(d, "a file path or glob", |text| {
            glob::Pattern::new(text)
                .map(|_| RuleGlob(text.to_owned()))
                .map_err(|e| format!("invalid glob {text:?}: {e}"))
        })
    }
}

/// A `span_labels` entry: a label name a series could have.
struct SpanLabel(String);

impl<'de> Deserialize<'de> for SpanLabel {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        str_then(d, "a label name", |text| {
            if !parca_querylang::is_valid_label_name(text) || text.starts_with("__") {
                return Err(format!(
                    "{text:?} is not a label name a sample can carry (letters, digits and `_`, \
                     not starting with a digit or `__`)"
                ));
            }
            Ok(SpanLabel(text.to_owned()))
        })
    }
}

/// `span_labels` checked for repeats.
fn span_label_names<E: de::Error>(names: Option<Vec<SpanLabel>>) -> Result<Option<Vec<String>>, E> {
    let Some(names) = names else {
        return Ok(None);
    };
    let mut out: Vec<String> = Vec::with_capacity(names.len());
    for SpanLabel(name) in names {
        if out.contains(&name) {
            return Err(E::custom(format!("span_labels names {name:?} twice")));
        }
        out.push(name);
    }
    Ok(Some(out))
}

#[cfg(test)]
mod tests;
