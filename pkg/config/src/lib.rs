//! parca.yaml: its schema, defaults, validation with precise errors, and Prometheus relabeling.
//!
//! [`parse`] turns the text into a [`Config`] whose every default is filled in: durations are
//! [`std::time::Duration`]s, each job's `scrape_timeout` is resolved, and each job's
//! `profiling_config.pprof_config` is the ordered list [`ScrapeConfig::endpoints`] with Parca's
//! five default endpoints merged in. [`Config::to_yaml`] writes it back (for
//! `/api/v1/status/config`), and [`relabel`] applies a job's `relabel_configs` to a target's
//! labels. The user's reference is `documentation/configuration.md`.
//!
//! The schema is Parca's (`scrape_configs` with `profiling_config`, `object_storage`) plus
//! Prometheus' `global:` section, relabeling and HTTP client settings.
//!
//! # Design constraints
//!
//! - **Every mistake names its place.** Unknown keys, wrong types and broken rules are errors of
//!   the form `parca.yaml:12:5: scrape_configs[0].scrape_interval: invalid duration "10x": …`.
//!   To get the line and column, rules are checked while decoding, inside the mapping they
//!   concern (see `checked.rs`): serde_yaml stamps an error with the position of the value being
//!   decoded. Rules about a whole job need `global`, so parsing reads `global` first (a second
//!   pass over the text) and hands its defaults down with serde seeds.
//! - **Compatible where it matters.** A file that Parca accepts is accepted here, except for
//!   the keys we do not implement (they are errors, never silently ignored) and three stricter
//!   rules, each documented where it is checked: static targets must be `host:port` even with
//!   `relabel_configs`, a `static_configs` item needs at least one target, and a custom
//!   `pprof_config` entry needs a `path`. Relabeling follows Prometheus'
//!   `model/relabel/relabel.go`, including its hash for `hashmod`, so servers shard targets as
//!   Prometheus servers do.
//! - **The model is plain data.** [`Config`] is `Clone + PartialEq` so the server can compare
//!   old and new on reload; no type from serde_yaml or regex appears in the public API except
//!   through [`Regexp`]'s methods.
//! - **No I/O** except reading the file in [`load`]; no async.
//!
//! # Example
//!
//! ```
//! use std::time::Duration;
//!
//! let config = parca_config::parse(
//!     r#"
//! global:
//!   scrape_interval: 15s
//! scrape_configs:
//!   - job_name: app
//!     static_configs:
//!       - targets: ["127.0.0.1:6060"]
//!         labels: { env: prod }
//!     profiling_config:
//!       pprof_config:
//!         goroutine: { enabled: false }
//!         fgprof: { path: /debug/fgprof, delta: true }
//! "#,
//!     "parca.yaml",
//! )?;
//! let job = &config.scrape_configs[0];
//! assert_eq!(job.scrape_interval, Duration::from_secs(15));
//! assert_eq!(job.scrape_timeout, Duration::from_secs(18)); // interval + 3s
//! let enabled: Vec<_> = job.enabled_endpoints().map(|e| (e.name.as_str(), e.path.as_str())).collect();
//! assert_eq!(
//!     enabled,
//!     [
//!         ("memory", "/debug/pprof/allocs"),
//!         ("block", "/debug/pprof/block"),
//!         ("mutex", "/debug/pprof/mutex"),
//!         ("process_cpu", "/debug/pprof/profile"),
//!         ("fgprof", "/debug/fgprof"),
//!     ]
//! );
//!
//! let err = parca_config::parse("global:\n  scrape_interval: 10x\n", "parca.yaml").unwrap_err();
//! assert_eq!(
//!     err.to_string(),
//!     r#"parca.yaml:2:20: global.scrape_interval: invalid duration "10x": unknown duration unit `x`: use ms, s, m, h, d, w or y"#
//! );
//! # Ok::<(), parca_config::Error>(())
//! ```

mod alerting;
mod checked;
mod config;
mod duration;
mod error;
mod http_client;
mod insights;
mod labels;
mod relabel;
mod remote_write;
mod rules;
mod scrape;
mod secret;
mod storage;
mod tls;

pub use alerting::{AlertingConfig, AlertmanagerConfig, DEFAULT_ALERTMANAGER_TIMEOUT};
pub use config::{Config, DEFAULT_EVALUATION_INTERVAL, GlobalConfig, load, parse};
pub use duration::{format_duration, parse_duration};
pub use error::{Error, Location};
pub use http_client::{HttpUrl, OAuth2, ProxyConfig};
pub use insights::{DEFAULT_INSIGHT_MIN_CHANGE, DEFAULT_INSIGHT_WINDOW, InsightConfig};
pub use relabel::{Action, Regexp, RelabelConfig, relabel, relabel_in_place};
pub use remote_write::{QueueConfig, RemoteWriteConfig};
pub use rules::{Rule, RuleFile, RuleGroup, RuleKind, load_rules, parse_rules};
pub use scrape::{
    Authorization, BasicAuth, DEFAULT_ENDPOINTS, DEFAULT_FILE_SD_REFRESH_INTERVAL,
    DEFAULT_SCRAPE_INTERVAL, FileSdConfig, ProfileEndpoint, SCRAPE_TIMEOUT_MARGIN, SampleType,
    Scheme, ScrapeConfig, StaticConfig,
};
pub use secret::{REDACTED, Secret};
pub use storage::{BucketConfig, BucketType, ConfigValue, ObjectStorage};
pub use tls::TlsConfig;
