//! Tests of parsing, defaults and error messages.
#![allow(
    clippy::too_many_lines,
    reason = "tests are scenarios read top to bottom; the line budget is for product code"
)]

use std::collections::BTreeMap;
use std::time::Duration;

use super::*;
use crate::{Action, Authorization, BucketType, ConfigValue, SampleType, Scheme, Secret};

const REPO_CONFIG: &str = include_str!("../../../../parca.yaml");

fn ok(yaml: &str) -> Config {
    parse(yaml, "parca.yaml").unwrap_or_else(|e| panic!("{e}"))
}

fn err(yaml: &str) -> String {
    parse(yaml, "parca.yaml").unwrap_err().to_string()
}

fn secs(n: u64) -> Duration {
    Duration::from_secs(n)
}

/// (name, path, delta, enabled) of each endpoint.
fn endpoints(job: &ScrapeConfig) -> Vec<(&str, &str, bool, bool)> {
    job.endpoints
        .iter()
        .map(|e| (e.name.as_str(), e.path.as_str(), e.delta, e.enabled))
        .collect()
}

const DEFAULTS: [(&str, &str, bool, bool); 5] = [
    ("memory", "/debug/pprof/allocs", false, true),
    ("block", "/debug/pprof/block", false, true),
    ("goroutine", "/debug/pprof/goroutine", false, true),
    ("mutex", "/debug/pprof/mutex", false, true),
    ("process_cpu", "/debug/pprof/profile", true, true),
];

#[test]
fn the_repository_parca_yaml_loads() {
    let config = ok(REPO_CONFIG);
    assert_eq!(config.global.scrape_interval, secs(10));
    assert_eq!(config.global.scrape_timeout, None);
    assert_eq!(config.global.evaluation_interval, secs(60));
    assert_eq!(config.scrape_configs.len(), 1);
    let job = &config.scrape_configs[0];
    assert_eq!(job.job_name, "parca");
    assert_eq!(job.scrape_interval, secs(10));
    assert_eq!(job.scrape_timeout, secs(13));
    assert_eq!(job.scheme, Scheme::Http);
    assert_eq!(job.static_configs[0].targets, ["127.0.0.1:7070"]);
    // The server serves its CPU and heap profiles: the file turns Go's other defaults off.
    assert_eq!(
        endpoints(job),
        [
            ("memory", "/debug/pprof/heap", false, true),
            ("block", "/debug/pprof/block", false, false),
            ("goroutine", "/debug/pprof/goroutine", false, false),
            ("mutex", "/debug/pprof/mutex", false, false),
            ("process_cpu", "/debug/pprof/profile", true, true),
        ]
    );
    let bucket = &config.object_storage.as_ref().unwrap().bucket;
    assert_eq!(bucket.kind, BucketType::Filesystem);
    assert_eq!(bucket.get_str("directory"), Some("./data"));
}

#[test]
fn the_commented_agent_job_in_parca_yaml_loads_too() {
    // The file shows a parca-agent job in comments; uncommented, it must be valid.
    let uncommented: String = REPO_CONFIG
        .lines()
        .map(|l| match l.strip_prefix("  # ") {
            Some(rest) if rest.starts_with('-') || rest.starts_with("  ") => format!("  {rest}"),
            _ => l.to_owned(),
        })
        .collect::<Vec<_>>()
        .join("\n");
    let config = ok(&uncommented);
    let agent = &config.scrape_configs[1];
    assert_eq!(agent.job_name, "parca-agent");
    let enabled: Vec<&str> = agent.enabled_endpoints().map(|e| e.name.as_str()).collect();
    assert_eq!(enabled, ["parca_agent", "parca_agent_off_cpu"]);
}

#[test]
fn an_empty_file_is_an_empty_config() {
    for text in ["", "\n", "# nothing\n", "~\n", "{}\n"] {
        assert_eq!(ok(text), Config::default(), "{text:?}");
    }
    let c = Config::default();
    assert_eq!(c.global.scrape_interval, secs(10));
    assert!(c.scrape_configs.is_empty());
    assert!(c.object_storage.is_none());
}

#[test]
fn a_bare_job_gets_every_default() {
    let config = ok("scrape_configs:\n  - job_name: app\n");
    let job = &config.scrape_configs[0];
    assert_eq!(job.scrape_interval, secs(10));
    assert_eq!(job.scrape_timeout, secs(13));
    assert_eq!(job.scheme, Scheme::Http);
    assert!(job.params.is_empty());
    assert!(job.static_configs.is_empty());
    assert!(job.file_sd_configs.is_empty());
    assert!(job.relabel_configs.is_empty());
    assert_eq!(job.basic_auth, None);
    assert_eq!(job.authorization, None);
    assert_eq!(job.tls_config, Default::default());
    assert_eq!(endpoints(job), DEFAULTS);
    assert!(job.endpoints.iter().all(|e| e.keep_sample_type.is_empty()));
}

#[test]
fn jobs_take_their_defaults_from_global() {
    let config = ok("
global:
  scrape_interval: 1m
  evaluation_interval: 15s
  external_labels: { region: eu, replica: a }
scrape_configs:
  - job_name: a
  - job_name: b
    scrape_interval: 20s
");
    assert_eq!(config.global.scrape_interval, secs(60));
    assert_eq!(config.global.evaluation_interval, secs(15));
    assert_eq!(
        config.global.external_labels,
        BTreeMap::from([
            ("region".into(), "eu".into()),
            ("replica".into(), "a".into())
        ])
    );
    let [a, b] = &config.scrape_configs[..] else {
        panic!()
    };
    assert_eq!((a.scrape_interval, a.scrape_timeout), (secs(60), secs(63)));
    // Without `global.scrape_timeout`, the timeout follows the job's own interval.
    assert_eq!((b.scrape_interval, b.scrape_timeout), (secs(20), secs(23)));
}

#[test]
fn global_is_read_first_wherever_it_is() {
    let config = ok("
scrape_configs:
  - job_name: a
global:
  scrape_interval: 30s
  scrape_timeout: 45s
");
    let a = &config.scrape_configs[0];
    assert_eq!((a.scrape_interval, a.scrape_timeout), (secs(30), secs(45)));
    assert_eq!(config.global.scrape_timeout, Some(secs(45)));
}

#[test]
fn a_job_timeout_beats_the_global_one() {
    let config = ok("
global: { scrape_timeout: 45s }
scrape_configs:
  - job_name: a
    scrape_timeout: 15s
");
    assert_eq!(config.scrape_configs[0].scrape_timeout, secs(15));
}

#[test]
fn without_a_delta_endpoint_the_timeout_may_be_shorter_than_the_interval() {
    let config = ok("
scrape_configs:
  - job_name: a
    scrape_interval: 1m
    scrape_timeout: 10s
    profiling_config:
      pprof_config:
        process_cpu: { enabled: false }
");
    assert_eq!(config.scrape_configs[0].scrape_timeout, secs(10));
}

#[test]
fn pprof_config_merges_with_parca_defaults() {
    let config = ok("
scrape_configs:
  - job_name: a
    profiling_config:
      pprof_config:
        fgprof: { path: /debug/fgprof, delta: true }
        memory:
          path: /debug/pprof/heap
          keep_sample_type:
            - { type: inuse_space, unit: bytes }
        goroutine: { enabled: false }
        process_cpu: { enabled: true }
        custom_off: { path: /x, enabled: false }
");
    let job = &config.scrape_configs[0];
    assert_eq!(
        endpoints(job),
        [
            ("memory", "/debug/pprof/heap", false, true),
            ("block", "/debug/pprof/block", false, true),
            ("goroutine", "/debug/pprof/goroutine", false, false),
            ("mutex", "/debug/pprof/mutex", false, true),
            // Naming a default without `delta` keeps the default's delta (Parca would drop it).
            ("process_cpu", "/debug/pprof/profile", true, true),
            ("fgprof", "/debug/fgprof", true, true),
            ("custom_off", "/x", false, false),
        ]
    );
    assert_eq!(
        job.endpoints[0].keep_sample_type,
        [SampleType {
            kind: "inuse_space".into(),
            unit: "bytes".into()
        }]
    );
    let enabled: Vec<&str> = job.enabled_endpoints().map(|e| e.name.as_str()).collect();
    assert_eq!(
        enabled,
        ["memory", "block", "mutex", "process_cpu", "fgprof"]
    );
}

#[test]
fn path_prefix_goes_in_front_of_every_path() {
    let config = ok("
scrape_configs:
  - job_name: a
    profiling_config:
      path_prefix: /app/
      pprof_config:
        fgprof: { path: /debug/fgprof }
");
    let paths: Vec<&str> = config.scrape_configs[0]
        .endpoints
        .iter()
        .map(|e| e.path.as_str())
        .collect();
    assert_eq!(
        paths,
        [
            "/app/debug/pprof/allocs",
            "/app/debug/pprof/block",
            "/app/debug/pprof/goroutine",
            "/app/debug/pprof/mutex",
            "/app/debug/pprof/profile",
            "/app/debug/fgprof",
        ]
    );
}

#[test]
fn every_key_of_a_job() {
    let config = ok(r#"
scrape_configs:
  - job_name: full
    scrape_interval: 15s
    scrape_timeout: 20s
    scheme: https
    params: { debug: ["0"], gc: ["1", "2"] }
    static_configs:
      - targets: ["a:1", "[::1]:2", "b"]
        labels: { env: prod, port: 8080 }
    file_sd_configs:
      - files: [targets/*.json, more.yaml]
        refresh_interval: 1m
      - files: [x.yml]
    relabel_configs:
      - source_labels: [__address__]
        target_label: instance
    basic_auth: { username: u, password_file: pw.txt }
    tls_config:
      ca_file: ca.pem
      cert_file: c.pem
      key_file: k.pem
      server_name: example.com
      insecure_skip_verify: true
"#);
    let job = &config.scrape_configs[0];
    assert_eq!(job.scrape_interval, secs(15));
    assert_eq!(job.scrape_timeout, secs(20));
    assert_eq!(job.scheme, Scheme::Https);
    assert_eq!(job.params["gc"], ["1", "2"]);
    assert_eq!(job.static_configs[0].targets, ["a:1", "[::1]:2", "b"]);
    assert_eq!(job.static_configs[0].labels["port"], "8080");
    assert_eq!(
        job.file_sd_configs[0].files,
        ["targets/*.json", "more.yaml"]
    );
    assert_eq!(job.file_sd_configs[0].refresh_interval, secs(60));
    assert_eq!(job.file_sd_configs[1].refresh_interval, secs(300));
    assert_eq!(job.relabel_configs[0].action, Action::Replace);
    let auth = job.basic_auth.as_ref().unwrap();
    assert_eq!(auth.username, "u");
    assert_eq!(auth.password, None);
    assert_eq!(
        auth.password_file.as_deref(),
        Some(std::path::Path::new("pw.txt"))
    );
    assert_eq!(job.tls_config.server_name.as_deref(), Some("example.com"));
    assert!(job.tls_config.insecure_skip_verify);
}

#[test]
fn authorization_and_the_older_bearer_token() {
    let config = ok("
scrape_configs:
  - job_name: a
    authorization: { credentials: s3cret }
  - job_name: b
    authorization: { type: Token, credentials_file: /run/token }
  - job_name: c
    bearer_token: tok
  - job_name: d
    bearer_token_file: /run/tok
");
    let auth: Vec<&Authorization> = config
        .scrape_configs
        .iter()
        .map(|j| j.authorization.as_ref().unwrap())
        .collect();
    assert_eq!(auth[0].kind, "Bearer");
    assert_eq!(
        auth[0].credentials.as_ref().map(Secret::expose),
        Some("s3cret")
    );
    assert_eq!(auth[1].kind, "Token");
    assert_eq!(
        auth[1].credentials_file.as_deref(),
        Some(std::path::Path::new("/run/token"))
    );
    assert_eq!(auth[2].kind, "Bearer");
    assert_eq!(
        auth[2].credentials.as_ref().map(Secret::expose),
        Some("tok")
    );
    assert_eq!(
        auth[3].credentials_file.as_deref(),
        Some(std::path::Path::new("/run/tok"))
    );
    // Secrets stay out of Debug output.
    assert!(!format!("{:?}", auth[0]).contains("s3cret"));
}

#[test]
fn object_storage_types() {
    let config = ok("
object_storage:
  bucket:
    type: s3
    prefix: parca
    config:
      bucket: profiles
      endpoint: s3.example.com
      access_key: AK
      secret_key: SK
      insecure: true
      part_size: 67108864
      http_config: { idle_conn_timeout: 90s }
");
    let bucket = &config.object_storage.as_ref().unwrap().bucket;
    assert_eq!(bucket.kind, BucketType::S3);
    assert_eq!(bucket.prefix, "parca");
    assert_eq!(bucket.get_str("endpoint"), Some("s3.example.com"));
    assert_eq!(bucket.config["insecure"], ConfigValue::Bool(true));
    assert_eq!(bucket.config["part_size"], ConfigValue::Integer(67_108_864));
    let yaml = config.to_yaml();
    assert!(yaml.contains("secret_key: <secret>"), "{yaml}");
    assert!(!yaml.contains("SK"), "{yaml}");
    for t in ["GCS", "AZURE"] {
        let text = format!("object_storage: {{bucket: {{type: {t}, config: {{}}}}}}");
        assert!(parse(&text, "x").is_err(), "{t}");
    }
    ok("object_storage: {bucket: {type: GCS, config: {bucket: b}}}");
    ok("object_storage: {bucket: {type: AZURE, config: {storage_account: a, container: c}}}");
    ok("object_storage: {bucket: {type: SWIFT, config: {anything: 1}}}");
}

#[test]
fn to_yaml_round_trips() {
    let text = r#"
global:
  scrape_interval: 15s
  external_labels: { region: eu }
scrape_configs:
  - job_name: full
    scrape_interval: 1m30s
    scheme: https
    params: { debug: ["0"] }
    static_configs:
      - targets: ["a:1"]
        labels: { env: prod }
    file_sd_configs:
      - files: [targets/*.json]
    relabel_configs:
      - source_labels: [__address__, env]
        separator: "/"
        regex: "(.*):.*/(.*)"
        target_label: host
        replacement: "$1-$2"
      - action: hashmod
        source_labels: [__address__]
        modulus: 4
        target_label: __tmp_hash
      - action: keep
        source_labels: [__tmp_hash]
        regex: "0"
      - action: labeldrop
        regex: "__tmp_.*"
      - action: labelmap
        regex: "__meta_(.*)"
      - action: keepequal
        source_labels: [a]
        target_label: b
    basic_auth: { username: u, password_file: /pw }
    tls_config: { ca_file: /ca.pem, insecure_skip_verify: true }
    proxy_url: http://proxy.internal:3128
    no_proxy: localhost,10.0.0.0/8
    follow_redirects: false
    enable_http2: false
    profiling_config:
      path_prefix: /app
      pprof_config:
        memory: { keep_sample_type: [{ type: alloc_space, unit: bytes }] }
        mutex: { enabled: false }
        fgprof: { path: /debug/fgprof, delta: true }
  - job_name: minimal
  - job_name: oauth
    oauth2:
      client_id: parca
      client_secret_file: /secret
      scopes: [profiles.read, b]
      token_url: https://auth.example.com/token
      endpoint_params: { audience: targets }
      tls_config: { ca_file: /auth-ca.pem }
      proxy_from_environment: true
object_storage:
  bucket: { type: FILESYSTEM, config: { directory: /data } }
"#;
    let config = ok(text);
    let yaml = config.to_yaml();
    let again = parse(&yaml, "to_yaml").unwrap_or_else(|e| panic!("{e}\n{yaml}"));
    assert_eq!(again, config, "{yaml}");
    // Every default is written out.
    assert!(yaml.contains("scrape_timeout: 1m33s"), "{yaml}");
    assert!(yaml.contains("path: /app/debug/pprof/goroutine"), "{yaml}");
}

#[test]
fn to_yaml_hides_secrets() {
    let config = ok("
scrape_configs:
  - job_name: a
    basic_auth: { username: u, password: hunter2 }
  - job_name: b
    bearer_token: tok3n
");
    let yaml = config.to_yaml();
    assert!(
        !yaml.contains("hunter2") && !yaml.contains("tok3n"),
        "{yaml}"
    );
    assert!(yaml.contains("password: <secret>"), "{yaml}");
    assert!(yaml.contains("credentials: <secret>"), "{yaml}");
}

#[test]
fn http_client_settings() {
    let config = ok(r#"
scrape_configs:
  - job_name: a
    oauth2:
      client_id: parca
      client_secret: hunter2
      token_url: http://auth:8080/token
    proxy_url: socks5://proxy:1080
    proxy_connect_header: { Proxy-Authorization: [Basic cGFyY2E6cHc=] }
  - job_name: b
"#);
    let a = &config.scrape_configs[0];
    let oauth2 = a.oauth2.as_ref().unwrap();
    assert_eq!(oauth2.client_id, "parca");
    assert_eq!(oauth2.token_url.as_str(), "http://auth:8080/token");
    assert_eq!(
        a.proxy.proxy_url.as_ref().map(|u| u.as_str()),
        Some("socks5://proxy:1080")
    );
    let b = &config.scrape_configs[1];
    assert!(b.proxy.is_default() && b.follow_redirects && b.enable_http2 && b.oauth2.is_none());
    let yaml = config.to_yaml();
    assert!(
        !yaml.contains("hunter2") && !yaml.contains("cGFyY2E6cHc="),
        "{yaml}"
    );
    assert!(yaml.contains("client_secret: <secret>"), "{yaml}");
}

#[test]
fn reload_sees_which_jobs_changed() {
    let old = ok("scrape_configs: [{job_name: a}, {job_name: b}]");
    let new = ok("scrape_configs: [{job_name: a}, {job_name: b, scrape_interval: 5s}]");
    assert_ne!(old, new);
    assert_eq!(old.scrape_configs[0], new.scrape_configs[0]);
    assert_ne!(old.scrape_configs[1], new.scrape_configs[1]);
    // A changed password is a change too, though it is never shown.
    let p1 = ok("scrape_configs: [{job_name: a, basic_auth: {password: x}}]");
    let p2 = ok("scrape_configs: [{job_name: a, basic_auth: {password: y}}]");
    assert_ne!(p1, p2);
}

#[test]
fn load_reads_the_file_and_resolves_relative_paths() {
    let dir = std::env::temp_dir().join(format!("parca-config-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("parca.yaml");
    std::fs::write(
        &path,
        "scrape_configs:
  - job_name: a
    file_sd_configs: [{ files: [sd/*.json, /abs/x.json] }]
    authorization: { credentials_file: token }
    tls_config: { ca_file: /etc/ca.pem, cert_file: c.pem, key_file: k.pem }
",
    )
    .unwrap();
    let config = load(&path).unwrap();
    let job = &config.scrape_configs[0];
    let sd = dir.join("sd/*.json").to_string_lossy().into_owned();
    assert_eq!(job.file_sd_configs[0].files, [sd.as_str(), "/abs/x.json"]);
    assert_eq!(
        job.authorization.as_ref().unwrap().credentials_file,
        Some(dir.join("token"))
    );
    assert_eq!(job.tls_config.ca_file, Some("/etc/ca.pem".into()));
    assert_eq!(job.tls_config.cert_file, Some(dir.join("c.pem")));

    std::fs::write(&path, "global:\n  scrape_interval: 10x\n").unwrap();
    let message = load(&path).unwrap_err().to_string();
    assert_eq!(
        message,
        format!(
            "{}:2:20: global.scrape_interval: invalid duration \"10x\": unknown duration unit `x`: use ms, s, m, h, d, w or y",
            path.display()
        )
    );
    std::fs::remove_dir_all(&dir).unwrap();

    let missing = load(dir.join("missing.yaml")).unwrap_err();
    assert_eq!(
        missing.to_string(),
        format!(
            "cannot read config file `{}`",
            dir.join("missing.yaml").display()
        )
    );
    assert!(std::error::Error::source(&missing).is_some());
}

#[test]
fn errors_carry_their_parts() {
    let e = parse(
        "scrape_configs:\n  - job_name: a\n    scrape_interval: 10x\n",
        "p.yaml",
    )
    .unwrap_err();
    let Error::Invalid {
        source_name,
        location,
        path,
        message,
    } = e
    else {
        panic!("{e:?}")
    };
    assert_eq!(source_name, "p.yaml");
    assert_eq!(
        location,
        Some(crate::Location {
            line: 3,
            column: 22
        })
    );
    assert_eq!(path, "scrape_configs[0].scrape_interval");
    assert_eq!(
        message,
        r#"invalid duration "10x": unknown duration unit `x`: use ms, s, m, h, d, w or y"#
    );
}

/// Each kind of mistake, with the exact message users see.
#[test]
fn error_messages() {
    let cases: &[(&str, &str)] = &[
        // YAML itself.
        (
            "global: [\n",
            "parca.yaml:2:1: invalid YAML: did not find expected node content, while parsing a flow node",
        ),
        (
            "a: 1\n---\nb: 2\n",
            "parca.yaml: invalid YAML: deserializing from YAML containing more than one document is not supported",
        ),
        (
            "- a\n",
            "parca.yaml:1:1: invalid type: sequence, expected a mapping with `global`, `scrape_configs`, `object_storage`, `query_stores`, `rule_files`, `alerting`, `remote_write`, `insights` or `span_labels`",
        ),
        // Unknown keys, at every level.
        (
            "foo: 1\n",
            "parca.yaml:1:1: unknown field `foo`, expected one of `global`, `scrape_configs`, `object_storage`, `query_stores`, `rule_files`, `alerting`, `remote_write`, `insights`, `span_labels`",
        ),
        (
            "global:\n  scrape_intervall: 1s\n",
            "parca.yaml:2:3: global: unknown field `scrape_intervall`, expected one of `scrape_interval`, `scrape_timeout`, `evaluation_interval`, `external_labels`",
        ),
        (
            "scrape_configs:\n  - job_name: a\n    scrape_intervall: 1s\n",
            "parca.yaml:3:5: scrape_configs[0]: unknown field `scrape_intervall`, expected one of `job_name`, `scrape_interval`, `scrape_timeout`, `scheme`, `params`, `static_configs`, `file_sd_configs`, `relabel_configs`, `basic_auth`, `authorization`, `bearer_token`, `bearer_token_file`, `oauth2`, `tls_config`, `proxy_url`, `no_proxy`, `proxy_from_environment`, `proxy_connect_header`, `follow_redirects`, `enable_http2`, `profiling_config`",
        ),
        (
            "scrape_configs:\n  - job_name: a\n    profiling_config:\n      pprof_config:\n        memory: { enable: false }\n",
            "parca.yaml:5:19: scrape_configs[0].profiling_config.pprof_config.memory: unknown field `enable`, expected one of `enabled`, `path`, `delta`, `keep_sample_type`",
        ),
        (
            "scrape_configs:\n  - job_name: a\n    relabel_configs:\n      - targetlabel: x\n",
            "parca.yaml:4:9: scrape_configs[0].relabel_configs[0]: unknown field `targetlabel`, expected one of `source_labels`, `separator`, `regex`, `modulus`, `target_label`, `replacement`, `action`",
        ),
        (
            "global:\n  scrape_interval: 1m\n  scrape_interval: 2m\n",
            "parca.yaml:2:3: global: duplicate field `scrape_interval`",
        ),
        (
            "global: {}\nglobal: {}\n",
            "parca.yaml:1:1: duplicate field `global`",
        ),
        // Missing keys and wrong types.
        (
            "scrape_configs:\n  - scrape_interval: 1s\n",
            "parca.yaml:2:5: scrape_configs[0]: missing field `job_name`",
        ),
        (
            "scrape_configs: 3\n",
            "parca.yaml:1:17: scrape_configs: invalid type: integer `3`, expected a list of scrape configs",
        ),
        (
            "scrape_configs:\n  - job_name: a\n    static_configs: [{targets: x:1}]\n",
            "parca.yaml:3:32: scrape_configs[0].static_configs[0].targets: invalid type: string \"x:1\", expected a sequence",
        ),
        (
            "scrape_configs:\n  - job_name: a\n    relabel_configs: [~]\n",
            "parca.yaml:3:23: scrape_configs[0].relabel_configs[0]: invalid type: unit value, expected a relabeling rule",
        ),
        // Durations.
        (
            "scrape_configs:\n  - job_name: a\n    scrape_interval: 10x\n",
            "parca.yaml:3:22: scrape_configs[0].scrape_interval: invalid duration \"10x\": unknown duration unit `x`: use ms, s, m, h, d, w or y",
        ),
        (
            "global:\n  scrape_timeout: 0s\n",
            "parca.yaml:2:19: global.scrape_timeout: invalid duration \"0s\": must be greater than zero",
        ),
        (
            "scrape_configs:\n  - job_name: a\n    file_sd_configs: [{files: [a.json], refresh_interval: 5}]\n",
            "parca.yaml:3:59: scrape_configs[0].file_sd_configs[0].refresh_interval: invalid duration \"5\": `5` needs a unit (ms, s, m, h, d, w or y), such as 5m",
        ),
        // Rules about a job.
        (
            "scrape_configs:\n  - job_name: ''\n",
            "parca.yaml:2:5: scrape_configs[0]: `job_name` is empty",
        ),
        (
            "scrape_configs:\n  - job_name: a\n  - job_name: b\n  - job_name: a\n",
            "parca.yaml:4:5: scrape_configs[2]: job_name \"a\" is already used by scrape_configs[0]",
        ),
        (
            "scrape_configs:\n  - job_name: a\n    scrape_timeout: 10s\n",
            "parca.yaml:2:5: scrape_configs[0]: `scrape_timeout` (10s) must be greater than `scrape_interval` (10s): the delta profile `process_cpu` is asked for a window as long as the interval",
        ),
        (
            "global: { scrape_timeout: 5s }\nscrape_configs:\n  - job_name: a\n",
            "parca.yaml:3:5: scrape_configs[0]: `scrape_timeout` (5s, from `global.scrape_timeout`) must be greater than `scrape_interval` (10s): the delta profile `process_cpu` is asked for a window as long as the interval",
        ),
        (
            "scrape_configs:\n  - job_name: a\n    scheme: ftp\n",
            "parca.yaml:3:13: scrape_configs[0].scheme: unknown variant `ftp`, expected `http` or `https`",
        ),
        (
            "scrape_configs:\n  - job_name: a\n    basic_auth: {username: u}\n    bearer_token: t\n",
            "parca.yaml:2:5: scrape_configs[0]: at most one of `basic_auth`, `authorization` (or `bearer_token`) and `oauth2` may be set",
        ),
        (
            "scrape_configs:\n  - job_name: a\n    bearer_token: t\n    bearer_token_file: f\n",
            "parca.yaml:2:5: scrape_configs[0]: at most one of `bearer_token` and `bearer_token_file` may be set",
        ),
        (
            "scrape_configs:\n  - job_name: a\n    authorization: {credentials: c}\n    bearer_token: t\n",
            "parca.yaml:2:5: scrape_configs[0]: `authorization` cannot be combined with `bearer_token` or `bearer_token_file`",
        ),
        (
            "scrape_configs:\n  - job_name: a\n    basic_auth: {username: u, password: p, password_file: f}\n",
            "parca.yaml:3:17: scrape_configs[0].basic_auth: at most one of `password` and `password_file` may be set",
        ),
        (
            "scrape_configs:\n  - job_name: a\n    authorization: {type: Basic, credentials: c}\n",
            "parca.yaml:3:20: scrape_configs[0].authorization: authorization `type` cannot be `Basic`: use `basic_auth` instead",
        ),
        (
            "scrape_configs:\n  - job_name: a\n    authorization: {credentials: c, credentials_file: f}\n",
            "parca.yaml:3:20: scrape_configs[0].authorization: at most one of `credentials` and `credentials_file` may be set",
        ),
        (
            "scrape_configs:\n  - job_name: a\n    basic_auth: {username: u}\n    oauth2: {client_id: i, token_url: 'http://t/token'}\n",
            "parca.yaml:2:5: scrape_configs[0]: at most one of `basic_auth`, `authorization` (or `bearer_token`) and `oauth2` may be set",
        ),
        (
            "scrape_configs:\n  - job_name: a\n    oauth2: {client_id: i}\n",
            "parca.yaml:3:13: scrape_configs[0].oauth2: `token_url` is required: where the client-credentials token is fetched",
        ),
        (
            "scrape_configs:\n  - job_name: a\n    oauth2: {client_id: i, token_url: 'file:///t'}\n",
            "parca.yaml:3:39: scrape_configs[0].oauth2.token_url: invalid URL \"file:///t\": the scheme must be `http` or `https`, not `file`",
        ),
        (
            "scrape_configs:\n  - job_name: a\n    oauth2: {token_url: 'http://t/token', client_secret: s, client_secret_file: f, client_id: i}\n",
            "parca.yaml:3:13: scrape_configs[0].oauth2: at most one of `client_secret` and `client_secret_file` may be set",
        ),
        (
            "scrape_configs:\n  - job_name: a\n    proxy_url: proxy:3128\n",
            "parca.yaml:3:16: scrape_configs[0].proxy_url: invalid URL \"proxy:3128\": expected scheme://host[:port][/path]",
        ),
        (
            "scrape_configs:\n  - job_name: a\n    no_proxy: localhost\n",
            "parca.yaml:2:5: scrape_configs[0]: `no_proxy` needs `proxy_url`",
        ),
        (
            "scrape_configs:\n  - job_name: a\n    follow_redirects: maybe\n",
            "parca.yaml:3:23: scrape_configs[0].follow_redirects: invalid type: string \"maybe\", expected a boolean",
        ),
        (
            "scrape_configs:\n  - job_name: a\n    tls_config: {cert_file: c}\n",
            "parca.yaml:3:17: scrape_configs[0].tls_config: `cert_file` and `key_file` must be set together",
        ),
        // Targets and labels.
        (
            "scrape_configs:\n  - job_name: a\n    static_configs:\n      - targets: []\n",
            "parca.yaml:4:9: scrape_configs[0].static_configs[0]: `targets` must list at least one target",
        ),
        (
            "scrape_configs:\n  - job_name: a\n    static_configs:\n      - targets: [a:1, 'http://b:2/x']\n",
            "parca.yaml:4:24: scrape_configs[0].static_configs[0].targets[1]: invalid target address \"http://b:2/x\": write host:port, without a scheme or path (set `scheme` and `path_prefix` instead)",
        ),
        (
            "scrape_configs:\n  - job_name: a\n    static_configs:\n      - targets: ['']\n",
            "parca.yaml:4:19: scrape_configs[0].static_configs[0].targets[0]: invalid target address \"\": it is empty",
        ),
        (
            "scrape_configs:\n  - job_name: a\n    static_configs:\n      - targets: [a:1]\n        labels: {0a: b}\n",
            "parca.yaml:5:18: scrape_configs[0].static_configs[0].labels: invalid label name \"0a\": use letters, digits and `_`, not starting with a digit",
        ),
        (
            "global:\n  external_labels: {a: b, a: c}\n",
            "parca.yaml:2:20: global.external_labels: key `a` is given twice",
        ),
        (
            "global:\n  external_labels: {a-b: c}\n",
            "parca.yaml:2:21: global.external_labels: invalid label name \"a-b\": use letters, digits and `_`, not starting with a digit",
        ),
        (
            "scrape_configs:\n  - job_name: a\n    file_sd_configs: [{files: []}]\n",
            "parca.yaml:3:23: scrape_configs[0].file_sd_configs[0]: `files` must list at least one file",
        ),
        (
            "scrape_configs:\n  - job_name: a\n    file_sd_configs: [{files: [targets.txt]}]\n",
            "parca.yaml:3:23: scrape_configs[0].file_sd_configs[0]: files[0]: \"targets.txt\" is not valid for file discovery: it must end in .json, .yml or .yaml, with `*` only in the last path element",
        ),
        // Profiles.
        (
            "scrape_configs:\n  - job_name: a\n    profiling_config:\n      pprof_config:\n        fgprof: {enabled: true}\n",
            "parca.yaml:5:17: scrape_configs[0].profiling_config.pprof_config.fgprof: profile `fgprof` needs a `path`: only Parca's defaults (memory, block, goroutine, mutex, process_cpu) have one",
        ),
        (
            "scrape_configs:\n  - job_name: a\n    profiling_config:\n      pprof_config:\n        memory: {path: debug/heap}\n",
            "parca.yaml:5:17: scrape_configs[0].profiling_config.pprof_config.memory: `path` \"debug/heap\" must start with `/`",
        ),
        (
            "scrape_configs:\n  - job_name: a\n    profiling_config:\n      pprof_config:\n        'cpu:x': {path: /x}\n",
            "parca.yaml:5:9: scrape_configs[0].profiling_config.pprof_config: invalid profile name \"cpu:x\": use letters, digits and `_`, not starting with a digit",
        ),
        (
            "scrape_configs:\n  - job_name: a\n    profiling_config:\n      pprof_config:\n        memory: {}\n        memory: {}\n",
            "parca.yaml:5:9: scrape_configs[0].profiling_config.pprof_config: profile `memory` is given twice",
        ),
        (
            "scrape_configs:\n  - job_name: a\n    profiling_config:\n      pprof_config:\n        memory: {keep_sample_type: [{type: x}]}\n",
            "parca.yaml:5:37: scrape_configs[0].profiling_config.pprof_config.memory.keep_sample_type[0]: missing field `unit`",
        ),
        // Relabeling (the rules themselves are tested in relabel/tests.rs).
        (
            "scrape_configs:\n  - job_name: a\n    relabel_configs:\n      - action: foo\n",
            "parca.yaml:4:17: scrape_configs[0].relabel_configs[0].action: unknown relabel action \"foo\", expected one of replace, keep, drop, keepequal, dropequal, hashmod, labelmap, labeldrop, labelkeep, lowercase, uppercase",
        ),
        (
            "scrape_configs:\n  - job_name: a\n    relabel_configs:\n      - regex: '('\n",
            "parca.yaml:4:16: scrape_configs[0].relabel_configs[0].regex: invalid regex \"(\": unclosed group",
        ),
        (
            "scrape_configs:\n  - job_name: a\n    relabel_configs:\n      - source_labels: [a, 'b c']\n        target_label: x\n",
            "parca.yaml:4:28: scrape_configs[0].relabel_configs[0].source_labels[1]: invalid label name \"b c\": use letters, digits and `_`, not starting with a digit",
        ),
        (
            "scrape_configs:\n  - job_name: a\n    relabel_configs:\n      - action: hashmod\n        target_label: x\n",
            "parca.yaml:4:9: scrape_configs[0].relabel_configs[0]: action `hashmod` requires a non-zero `modulus`",
        ),
        // Object storage.
        (
            "object_storage: {}\n",
            "parca.yaml:1:17: object_storage: missing field `bucket`",
        ),
        (
            "object_storage:\n  bucket:\n    type: FOO\n",
            "parca.yaml:3:11: object_storage.bucket.type: unknown bucket type \"FOO\", expected one of FILESYSTEM, S3, GCS, AZURE, SWIFT, COS, ALIYUNOSS, BOS, OCI, OBS",
        ),
        (
            "object_storage:\n  bucket:\n    type: FILESYSTEM\n    config: {}\n",
            "parca.yaml:3:5: object_storage.bucket: bucket type FILESYSTEM needs `config.directory`",
        ),
        (
            "object_storage:\n  bucket:\n    type: FILESYSTEM\n    config: {directory: /d, dir: /e}\n",
            "parca.yaml:3:5: object_storage.bucket: unknown key `config.dir` for bucket type FILESYSTEM, expected `directory`",
        ),
        (
            "object_storage:\n  bucket:\n    type: S3\n    config: {bucket: b, endpoint: e, access_key: a}\n",
            "parca.yaml:3:5: object_storage.bucket: bucket type S3 needs both `config.access_key` and `config.secret_key`, or neither",
        ),
        (
            "object_storage:\n  bucket:\n    type: S3\n    config: {bucket: b}\n",
            "parca.yaml:3:5: object_storage.bucket: bucket type S3 needs `config.endpoint`",
        ),
    ];
    let mut failures = Vec::new();
    for (yaml, want) in cases {
        let got = err(yaml);
        if got != *want {
            failures.push(format!("{yaml:?}\n  want: {want}\n   got: {got}"));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn to_yaml_of_the_repository_config() {
    let want = "\
global:
  scrape_interval: 10s
  evaluation_interval: 1m
scrape_configs:
- job_name: parca
  scrape_interval: 10s
  scrape_timeout: 13s
  scheme: http
  static_configs:
  - targets:
    - 127.0.0.1:7070
  follow_redirects: true
  enable_http2: true
  profiling_config:
    pprof_config:
      memory:
        enabled: true
        path: /debug/pprof/heap
        delta: false
      block:
        enabled: false
        path: /debug/pprof/block
        delta: false
      goroutine:
        enabled: false
        path: /debug/pprof/goroutine
        delta: false
      mutex:
        enabled: false
        path: /debug/pprof/mutex
        delta: false
      process_cpu:
        enabled: true
        path: /debug/pprof/profile
        delta: true
object_storage:
  bucket:
    type: FILESYSTEM
    config:
      directory: ./data
";
    assert_eq!(ok(REPO_CONFIG).to_yaml(), want);
}

/// Every YAML example of the user documentation is valid (fragments are put inside a job).
#[test]
fn the_examples_in_the_documentation_parse() {
    let doc = include_str!("../../../../documentation/configuration.md");
    let mut n_examples = 0;
    for block in doc.split("```yaml\n").skip(1) {
        let example = block.split("```").next().unwrap_or_default();
        let first = example.lines().next().unwrap_or_default();
        let text = if [
            "global:",
            "scrape_configs:",
            "object_storage:",
            "query_stores:",
            "rule_files:",
            "alerting:",
            "remote_write:",
            "insights:",
            "span_labels:",
        ]
        .iter()
        .any(|k| first.starts_with(k))
        {
            example.to_owned()
        } else if first.starts_with("  - job_name:") {
            format!("scrape_configs:\n{example}")
        } else {
            let indented: String = example.lines().map(|l| format!("    {l}\n")).collect();
            format!("scrape_configs:\n  - job_name: doc\n{indented}")
        };
        if let Err(e) = parse(&text, "configuration.md") {
            panic!("{e}\n{text}");
        }
        n_examples += 1;
    }
    assert!(n_examples >= 9, "{n_examples}");
}

#[test]
fn query_stores_are_scrape_jobs_naming_shards() {
    let config = ok(
        "query_stores:\n  - job_name: shards\n    scheme: https\n    basic_auth: {username: q, password: p}\n    static_configs: [{targets: [\"a:7070\"]}]\n",
    );
    assert_eq!(config.query_stores.len(), 1);
    let shards = &config.query_stores[0];
    assert_eq!(shards.job_name, "shards");
    assert_eq!(shards.static_configs[0].targets, ["a:7070"]);
    assert!(shards.basic_auth.is_some());
    assert!(config.to_yaml().contains("query_stores:"));
    let e = parse(
        "query_stores:\n  - job_name: s\n    sheme: https\n",
        "parca.yaml",
    )
    .unwrap_err();
    assert!(e.to_string().contains("sheme"), "{e}");
}

#[test]
fn span_labels_default_to_the_server_s_and_are_checked() {
    assert_eq!(ok("global: {}\n").span_labels, None);
    assert_eq!(
        ok("span_labels: [span_id, request_id]\n").span_labels,
        Some(vec!["span_id".to_owned(), "request_id".to_owned()])
    );
    assert_eq!(ok("span_labels: []\n").span_labels, Some(Vec::new()));
    let e = err("span_labels: [span_id, span_id]\n");
    assert!(e.contains("span_labels names \"span_id\" twice"), "{e}");
    let e = err("span_labels: [\"span-id\"]\n");
    assert!(e.contains("\"span-id\" is not a label name"), "{e}");
    let e = err("span_labels: [__name__]\n");
    assert!(e.contains("is not a label name"), "{e}");
}
