//! The API served for real on a loopback port, over a real store, asked with a real HTTP client.
#![allow(
    clippy::too_many_lines,
    reason = "tests are scenarios read top to bottom; the line budget is for product code"
)]

use std::collections::BTreeSet;
use std::sync::Arc;

use parca_api::{Api, Control, Options, TargetsReport};
use serde_json::Value;

struct NoScrapes;

impl Control for NoScrapes {
    fn config_yaml(&self) -> String {
        "scrape_configs: []\n".into()
    }
    fn reload(&self) -> Result<(), String> {
        Err("parca.yaml:1:1: unknown field `scrape_config`".into())
    }
    fn targets(&self) -> TargetsReport {
        TargetsReport::default()
    }
    fn quit(&self) {}
}

struct Server {
    base: String,
    api: Arc<Api>,
    _dir: tempfile::TempDir,
    client: reqwest::Client,
}

impl Server {
    /// A server whose store is not set yet (as during WAL replay).
    async fn unready() -> Server {
        // The lifecycle endpoints on, so that reload's answers can be checked.
        Server::unready_with(Options {
            lifecycle: true,
            ..Options::default()
        })
        .await
    }

    async fn unready_with(options: Options) -> Server {
        let dir = tempfile::tempdir().expect("tempdir");
        let api = Arc::new(Api::new(options, Arc::new(NoScrapes), Default::default()));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let base = format!("http://{}", listener.local_addr().expect("address"));
        tokio::spawn(parca_api::serve(
            listener,
            Arc::clone(&api),
            std::future::pending(),
        ));
        Server {
            base,
            api,
            _dir: dir,
            client: reqwest::Client::new(),
        }
    }

    async fn ready() -> Server {
        Server::set_store(Server::unready().await)
    }

    fn set_store(server: Server) -> Server {
        // The tests push recorded profiles, years old: a store without retention keeps them.
        let options = parca_tsdb::Options {
            retention_ms: 0,
            ..Default::default()
        };
        let db = parca_tsdb::Db::open(server._dir.path(), options).expect("open");
        server.api.set_store(Arc::new(db));
        server
    }

    async fn get(&self, path_and_query: &str) -> (u16, String) {
        let response = self
            .client
            .get(format!("{}{path_and_query}", self.base))
            .send()
            .await
            .expect("request");
        let status = response.status().as_u16();
        (status, response.text().await.expect("body"))
    }

    async fn post(&self, path_and_query: &str, body: Vec<u8>) -> (u16, String) {
        self.post_typed(path_and_query, body, "application/octet-stream")
            .await
    }

    async fn post_typed(
        &self,
        path_and_query: &str,
        body: Vec<u8>,
        content_type: &str,
    ) -> (u16, String) {
        let response = self
            .client
            .post(format!("{}{path_and_query}", self.base))
            .header("content-type", content_type)
            .body(body)
            .send()
            .await
            .expect("request");
        let status = response.status().as_u16();
        (status, response.text().await.expect("body"))
    }
}

fn corpus(path: &str) -> Vec<u8> {
    std::fs::read(format!(
        "{}/../../tests/testdata/pprof/{path}",
        env!("CARGO_MANIFEST_DIR")
    ))
    .expect("corpus file")
}

fn json(body: &str) -> Value {
    serde_json::from_str(body).unwrap_or_else(|e| panic!("{e}: {body}"))
}

fn enc(s: &str) -> String {
    form_urlencoded::byte_serialize(s.as_bytes()).collect()
}

const CPU: &str = "process_cpu:cpu:nanoseconds:cpu:nanoseconds:delta";

#[tokio::test]
async fn not_ready_until_the_store_is_set() {
    let server = Server::unready().await;
    assert_eq!(server.get("/-/healthy").await.0, 200);
    let (status, body) = server.get("/-/ready").await;
    assert_eq!(status, 503);
    assert_eq!(json(&body)["errorType"], "unavailable");
    assert_eq!(server.get("/api/v1/labels").await.0, 503);
}

#[tokio::test]
async fn push_then_query_in_every_format() {
    let server = Server::ready().await;
    let (status, body) = server
        .post(
            "/api/v1/write?__name__=process_cpu&job=go&instance=a",
            corpus("go/go-cpu.pb.gz"),
        )
        .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(json(&body)["status"], "success");

    let (_, body) = server.get("/api/v1/profile_types").await;
    let types = json(&body)["data"].as_array().expect("list").len();
    assert_eq!(types, 2);
    let (_, body) = server
        .get(&format!(
            "/api/v1/label/instance/values?match[]={}",
            enc("{job=\"go\"}")
        ))
        .await;
    assert_eq!(json(&body)["data"], serde_json::json!(["a"]));

    let query = enc(&format!("merge({CPU}{{job=\"go\"}})"));
    let window = "start=0&end=4000000000";
    let (status, body) = server
        .get(&format!(
            "/api/v1/query?query={query}&{window}&format=top&limit=3"
        ))
        .await;
    assert_eq!(status, 200, "{body}");
    let top = json(&body);
    assert_eq!(top["data"]["rows"].as_array().expect("rows").len(), 3);
    assert_eq!(top["data"]["rows"][0]["name"], "main.(*counter).inc");

    let (status, body) = server
        .get(&format!("/api/v1/query?query={query}&{window}"))
        .await;
    assert_eq!(status, 200);
    // The tree nests deeper than serde_json's default limit: check its head as text.
    assert!(
        body.starts_with(
            r#"{"status":"success","data":{"sample_type":"cpu","unit":"nanoseconds","#
        ),
        "{}",
        &body[..200]
    );
    assert!(body.contains(r#""total":5310000000,"root":{"name":"root","value":5310000000,"#));

    // The compact layout: magic, header, columns; the same total, and every node of the tree.
    let response = server
        .client
        .get(format!(
            "{}/api/v1/query?query={query}&{window}&format=columns",
            server.base
        ))
        .send()
        .await
        .expect("request");
    assert_eq!(
        response.headers()["content-type"],
        "application/vnd.parca.flamegraph-columns"
    );
    let bytes = response.bytes().await.expect("body");
    let (header, _) = columns_header(&bytes);
    assert_eq!(header["graphs"][0]["total"], 5310000000i64);
    assert_eq!(
        header["graphs"][0]["nodes"].as_u64(),
        Some(body.matches(r#"{"name":"#).count() as u64)
    );
    let response = server
        .client
        .get(format!(
            "{}/api/v1/query?query={query}&{window}&format=columns&min_share=0.01",
            server.base
        ))
        .send()
        .await
        .expect("request");
    let (cut, _) = columns_header(&response.bytes().await.expect("body"));
    assert_eq!(cut["graphs"][0]["total"], 5310000000i64);
    assert!(cut["graphs"][0]["nodes"].as_u64() < header["graphs"][0]["nodes"].as_u64());
    assert!(cut["graphs"][0]["omitted_nodes"].as_u64() > Some(0));

    let (_, folded) = server
        .get(&format!(
            "/api/v1/query?query={query}&{window}&format=folded"
        ))
        .await;
    assert!(folded.lines().any(|l| l.contains("crypto/sha256.block")));
    let (_, svg) = server
        .get(&format!("/api/v1/query?query={query}&{window}&format=svg"))
        .await;
    assert!(svg.contains("<svg") && svg.contains("sha256"));

    let response = server
        .client
        .get(format!(
            "{}/api/v1/query?query={query}&{window}&format=pprof",
            server.base
        ))
        .send()
        .await
        .expect("request");
    let bytes = response.bytes().await.expect("body");
    let profiles = parca_profile::decode(&bytes, &Default::default()).expect("valid pprof");
    assert_eq!(
        profiles[0].total(),
        top["data"]["total"].as_i64().expect("total")
    );

    // Hidden frames: gone from every format, the total unchanged.
    let (status, hidden) = server
        .get(&format!(
            "/api/v1/query?query={query}&{window}&format=folded&hide={}",
            enc(r"^runtime\.|SHA256")
        ))
        .await;
    assert_eq!(status, 200, "{hidden}");
    assert!(!hidden.contains("runtime.") && !hidden.contains("sha256"));
    assert!(hidden.lines().any(|l| l.contains("main.(*counter).inc")));
    let response = server
        .client
        .get(format!(
            "{}/api/v1/query?query={query}&{window}&format=pprof&hide={}",
            server.base,
            enc(r"^runtime\.")
        ))
        .send()
        .await
        .expect("request");
    let bytes = response.bytes().await.expect("body");
    let hidden = &parca_profile::decode(&bytes, &Default::default()).expect("valid pprof")[0];
    assert_eq!(hidden.total(), profiles[0].total());
    assert!(
        hidden.tables.n_functions() < profiles[0].tables.n_functions(),
        "runtime functions are gone"
    );

    let (status, body) = server
        .get(&format!(
            "/api/v1/query_range?query={}&start=0&end=4000000000&step=30d",
            enc(&format!("sum({CPU})"))
        ))
        .await;
    assert_eq!(status, 200, "{body}");
    let matrix = json(&body);
    assert_eq!(matrix["data"]["resultType"], "matrix");
    assert_eq!(matrix["data"]["result"][0]["unit"], "nanoseconds");
}

/// The JSON header of a `format=columns` answer and where it starts.
fn columns_header(bytes: &[u8]) -> (Value, usize) {
    assert_eq!(&bytes[..8], b"PARCACOL");
    let at = u64::from_le_bytes(bytes[8..16].try_into().expect("8 bytes")) as usize;
    let header = serde_json::from_slice(&bytes[at..]).expect("JSON header");
    (header, at)
}

/// A CPU profile whose flame graph has `1 + width + width²` nodes: `width` functions under
/// the root, each calling the `width` others of a second set, one sample per (caller, callee)
/// with its own value.
fn wide_profile(width: u64) -> Vec<u8> {
    let mut b = parca_pprof::ProfileBuilder::new();
    let cpu = b.value_type("cpu", "nanoseconds");
    let locations: Vec<u64> = (0..2 * width)
        .map(|i| {
            let level = if i < width { "caller" } else { "callee" };
            let f = b.function(&format!("pkg.{level}{i}"), "", "src/pkg.go", 0);
            b.add_location(0, 0, &[(f, 1 + i as i64)])
        })
        .collect();
    for caller in 0..width {
        for callee in 0..width {
            let value = 1_000_000 * (1 + ((caller * width + callee) % 7) as i64);
            b.sample(
                vec![
                    locations[(width + callee) as usize],
                    locations[caller as usize],
                ],
                vec![value],
                vec![],
            );
        }
    }
    let p = parca_pprof::proto::Profile {
        sample_type: vec![cpu],
        period_type: Some(cpu),
        period: 10_000_000,
        time_nanos: 1_700_000_000_000_000_000,
        duration_nanos: 10_000_000_000,
        ..b.finish()
    };
    parca_pprof::encode(&p, true)
}

#[tokio::test]
async fn a_flame_graph_of_a_million_nodes_is_served_whole_by_default() {
    let server = Server::ready().await;
    let width = 1000u64;
    let (status, body) = server
        .post(
            "/api/v1/write?__name__=process_cpu&job=wide",
            wide_profile(width),
        )
        .await;
    assert_eq!(status, 200, "{body}");
    let query = enc(&format!("merge({CPU}{{job=\"wide\"}})"));
    let window = "start=1699999990&end=1700000020";
    let response = server
        .client
        .get(format!(
            "{}/api/v1/query?query={query}&{window}&format=columns",
            server.base
        ))
        .send()
        .await
        .expect("request");
    assert_eq!(response.status(), 200);
    let bytes = response.bytes().await.expect("body");
    let (header, _) = columns_header(&bytes);
    let graph = &header["graphs"][0];
    // Every node, none folded into an "other" bucket, and the exact total.
    assert_eq!(graph["nodes"].as_u64(), Some(1 + width + width * width));
    assert!(graph.get("omitted_nodes").is_none(), "{graph}");
    let total: i64 = (0..width * width)
        .map(|i| 1_000_000 * (1 + (i % 7) as i64))
        .sum();
    assert_eq!(graph["total"].as_i64(), Some(total));
}

#[tokio::test]
async fn merge_by_gives_one_graph_per_group_in_columns() {
    let server = Server::ready().await;
    for (instance, file) in [("a", "go/go-cpu.pb.gz"), ("b", "go/go-cpu-b.pb.gz")] {
        let path = format!("/api/v1/write?__name__=process_cpu&job=go&instance={instance}");
        assert_eq!(server.post(&path, corpus(file)).await.0, 200);
    }
    let query = enc(&format!("merge by (instance) ({CPU}{{job=\"go\"}})"));
    let response = server
        .client
        .get(format!(
            "{}/api/v1/query?query={query}&start=0&end=4000000000&format=columns",
            server.base
        ))
        .send()
        .await
        .expect("request");
    assert_eq!(response.status(), 200);
    let (header, _) = columns_header(&response.bytes().await.expect("body"));
    let graphs = header["graphs"].as_array().expect("graphs");
    assert_eq!(graphs.len(), 2);
    assert_eq!(graphs[0]["labels"], serde_json::json!({"instance": "a"}));
    assert!(graphs[1]["profiles"].as_u64() >= Some(1));
    let (_, json_body) = server
        .get(&format!(
            "/api/v1/query?query={query}&start=0&end=4000000000"
        ))
        .await;
    assert!(
        json_body.contains(&format!(r#""total":{},"#, graphs[1]["total"])),
        "{} in {}",
        graphs[1]["total"],
        &json_body[..300]
    );
}

#[tokio::test]
async fn bad_requests_say_what_is_wrong() {
    let server = Server::ready().await;
    let cases: Vec<(&str, u16, &str)> = vec![
        ("/api/v1/query?query=merge(", 400, "line 1, column 7"),
        ("/api/v1/query", 400, "parameter `query` is required"),
        (
            "/api/v1/query?query=memory:inuse_space:bytes:space:bytes&time=yesterday",
            400,
            "invalid parameter `time`",
        ),
        (
            "/api/v1/query_range?query=memory:inuse_space:bytes:space:bytes&start=0&end=1&step=0",
            400,
            "zero or negative query resolution step",
        ),
        ("/api/v1/nothing", 404, "no endpoint at /api/v1/nothing"),
        ("/api/v1/series", 400, "no `match[]`"),
        (
            "/api/v1/query?query=memory:inuse_space:bytes:space:bytes&hide=(",
            400,
            "parameter `hide` or `hide_binary` is not a valid regex: `(`",
        ),
        (
            "/api/v1/query?query=memory:inuse_space:bytes:space:bytes&format=columns&min_share=2",
            400,
            "`min_share` must be a number from 0 to 1",
        ),
        (
            "/api/v1/query?query=memory:inuse_space:bytes:space:bytes&format=json&min_share=0.1",
            400,
            "applies to `format=columns` only",
        ),
    ];
    for (path, status, message) in cases {
        let (got, body) = server.get(path).await;
        assert_eq!(got, status, "{path}: {body}");
        let body = json(&body);
        assert_eq!(body["status"], "error");
        assert!(
            body["error"].as_str().expect("message").contains(message),
            "{path}: {body}"
        );
    }
    let (status, body) = server
        .post("/api/v1/write?__name__=memory", b"not a profile".to_vec())
        .await;
    assert_eq!(status, 400);
    assert!(
        json(&body)["error"]
            .as_str()
            .expect("message")
            .starts_with("invalid pprof body")
    );
    let (status, _) = server.post("/api/v1/targets", Vec::new()).await;
    assert_eq!(status, 405);
    let (status, body) = server.post("/-/reload", Vec::new()).await;
    assert_eq!(status, 400);
    assert!(body.contains("unknown field `scrape_config`"));
}

#[tokio::test]
async fn a_duplicate_push_is_refused_and_metrics_count_it() {
    let server = Server::ready().await;
    let path = "/api/v1/write?__name__=memory&job=batch";
    assert_eq!(server.post(path, corpus("go/go-heap.pb.gz")).await.0, 200);
    let (status, body) = server.post(path, corpus("go/go-heap.pb.gz")).await;
    assert_eq!(status, 400);
    assert!(
        body.contains("is stored already (at the same time)"),
        "{body}"
    );
    let (_, metrics) = server.get("/metrics").await;
    assert!(
        metrics.contains("parca_ingest_refused_profiles_total{protocol=\"write\"} 4"),
        "{metrics}"
    );
    assert!(metrics.contains("parca_tsdb_head_series 4"));
}

/// A `multipart/form-data` body as Go's `mime/multipart` writes it for `CreateFormFile`, which is
/// what Pyroscope's Go SDK sends to `/ingest`.
fn go_sdk_form(boundary: &str, parts: &[(&str, &str, &[u8])]) -> Vec<u8> {
    let mut body = Vec::new();
    for (name, file, data) in parts {
        body.extend_from_slice(
            format!(
                "--{boundary}\r\nContent-Disposition: form-data; name=\"{name}\"; \
                 filename=\"{file}\"\r\nContent-Type: application/octet-stream\r\n\r\n"
            )
            .as_bytes(),
        );
        body.extend_from_slice(data);
        body.extend_from_slice(b"\r\n");
    }
    body.extend_from_slice(format!("--{boundary}--\r\n").as_bytes());
    body
}

#[tokio::test]
async fn pyroscope_go_sdk_multipart_ingest() {
    let server = Server::ready().await;
    let boundary = "a1b2c3d4e5f60718293a4b5c6d7e8f90a1b2c3d4e5f60718293a4b5c6d7e";
    let content_type = format!("multipart/form-data; boundary={boundary}");
    let config = br#"{"alloc_objects":{"units":"objects"},"alloc_space":{"units":"bytes"},"inuse_space":{"units":"bytes","aggregation":"average"},"inuse_objects":{"units":"objects","aggregation":"average"}}"#;
    let heap = corpus("go/go-heap.pb.gz");
    let body = go_sdk_form(
        boundary,
        &[
            ("profile", "profile.pprof", &heap),
            ("sample_type_config", "sample_type_config.json", config),
        ],
    );
    // Times in nanoseconds, as the Go SDK sends them.
    let from = 1_700_000_000_000_000_000_i64;
    let path = format!(
        "/ingest?name={}&from={from}&until={}&spyName=gospy&sampleRate=100&units=&aggregationType=",
        enc("shop{env=prod}"),
        from + 10_000_000_000
    );
    let (status, answer) = server.post_typed(&path, body, &content_type).await;
    assert_eq!(status, 200, "{answer}");
    let (_, names) = server
        .get("/api/v1/label/__name__/values?start=1699999990&end=1700000020")
        .await;
    let names = json(&names);
    for name in [
        "memory:alloc_space:bytes:space:bytes:delta",
        "memory:inuse_space:bytes:space:bytes",
    ] {
        assert!(
            names["data"].as_array().unwrap().iter().any(|n| n == name),
            "{name} in {names}"
        );
    }
    let (_, series) = server
        .get(&format!(
            "/api/v1/series?match[]={}&start=1699999990&end=1700000020",
            enc("memory:alloc_space:bytes:space:bytes:delta")
        ))
        .await;
    let series = json(&series);
    assert_eq!(series["data"][0]["service_name"], "shop", "{series}");
    assert_eq!(series["data"][0]["env"], "prod", "{series}");
    assert_eq!(series["data"][0]["spy_name"], "gospy", "{series}");

    // A form without the profile, and one that is not a form at all, are named.
    let no_profile = go_sdk_form(boundary, &[("sample_type_config", "c.json", config)]);
    let (status, answer) = server.post_typed(&path, no_profile, &content_type).await;
    assert_eq!(status, 400);
    assert!(answer.contains("no `profile` part"), "{answer}");
    let (status, answer) = server
        .post_typed(&path, b"junk".to_vec(), &content_type)
        .await;
    assert_eq!(status, 400);
    assert!(answer.contains("invalid multipart body"), "{answer}");
}

/// Regression (a py-spy profile is listed but its type cannot be selected): pprof allows an
/// empty period type, py-spy writes one, and the type is stored as
/// `bar:samples:count::milliseconds:delta`. The name `/api/v1/profile_types` lists must select
/// the series, bare, as it is written.
#[tokio::test]
async fn a_type_with_an_empty_period_type_is_queryable_as_listed() {
    use parca_pprof::proto;
    let server = Server::ready().await;
    let strings = ["", "samples", "count", "milliseconds", "main", "hot"];
    let pprof = proto::Profile {
        sample_type: vec![proto::ValueType { r#type: 1, unit: 2 }],
        period_type: Some(proto::ValueType { r#type: 0, unit: 3 }),
        period: 10,
        duration_nanos: 10_000_000_000,
        ..one_line_functions(&strings, 4, &[(&[2, 1], 7)])
    };
    let body = parca_pprof::encode(&pprof, true);
    let (status, text) = server
        .post("/api/v1/write?__name__=bar&job=pyspy", body)
        .await;
    assert_eq!(status, 200, "{text}");
    let (_, types) = server.get("/api/v1/profile_types").await;
    let listed = &json(&types)["data"][0];
    let name = format!(
        "{}:{}:{}:{}:{}{}",
        listed["name"].as_str().expect("name"),
        listed["sample_type"].as_str().expect("type"),
        listed["sample_unit"].as_str().expect("unit"),
        listed["period_type"].as_str().expect("period type"),
        listed["period_unit"].as_str().expect("period unit"),
        if listed["delta"] == true {
            ":delta"
        } else {
            ""
        },
    );
    assert_eq!(name, "bar:samples:count::milliseconds:delta");
    let (status, text) = server
        .get(&format!(
            "/api/v1/query?format=top&query={}",
            enc(&format!("merge({name})"))
        ))
        .await;
    assert_eq!(status, 200, "{text}");
    assert!(text.contains("hot"), "{text}");
}

/// Regression: the web UI read the place of a parse error and "no profiles" out of the message
/// text. The envelope carries them as documented fields.
#[tokio::test]
async fn errors_carry_position_and_reason_fields() {
    let server = Server::ready().await;
    let (status, body) = server
        .get(&format!(
            "/api/v1/query?query={}",
            enc("merge(\n  memory:inuse_space:bytes:space:bytes{job=}")
        ))
        .await;
    assert_eq!(status, 400, "{body}");
    let error = json(&body);
    assert_eq!(
        error["position"],
        serde_json::json!({"line": 2, "column": 44}),
        "{body}"
    );
    let (status, body) = server
        .post(
            "/api/v1/write?__name__=memory&job=api",
            corpus("go/go-heap.pb.gz"),
        )
        .await;
    assert_eq!(status, 200, "{body}");
    let (status, body) = server
        .get(&format!(
            "/api/v1/query?query={}&time=1",
            enc("merge(memory:inuse_space:bytes:space:bytes{job=\"api\"}[1m])")
        ))
        .await;
    assert_eq!(status, 422, "{body}");
    assert_eq!(json(&body)["reason"], "no_profiles", "{body}");
}

#[tokio::test]
async fn dotted_names_are_selectable_quoted_or_as_stored() {
    let server = Server::ready().await;
    let from = 1_700_000_000_i64;
    let path = format!(
        "/ingest?name={}&from={from}&until={}&format=folded",
        enc("shop.api.cpu{service.version=1.2}"),
        from + 10
    );
    let (status, answer) = server.post(&path, b"main;work 10\n".to_vec()).await;
    assert_eq!(status, 200, "{answer}");
    let window = format!("start={}&end={}", from - 10, from + 20);
    let (_, labels) = server.get(&format!("/api/v1/labels?{window}")).await;
    let labels = json(&labels);
    assert!(
        labels["data"]
            .as_array()
            .unwrap()
            .iter()
            .any(|n| n == "service_version"),
        "{labels}"
    );
    let (_, types) = server
        .get(&format!("/api/v1/label/__name__/values?{window}"))
        .await;
    // Pyroscope's `app.cpu` naming: the application is the `service_name` value, dots kept.
    let stored_type = json(&types)["data"][0].as_str().unwrap().to_owned();
    assert!(stored_type.starts_with("process_cpu:"), "{stored_type}");
    // Each spelling selects the one series, in `match[]` and in queries.
    for selector in [
        r#"{service_version="1.2"}"#.to_owned(),
        r#"{"service.version"="1.2"}"#.to_owned(),
        format!(r#"{{"{stored_type}", "service.version"="1.2", service_name="shop.api"}}"#),
    ] {
        let (status, series) = server
            .get(&format!(
                "/api/v1/series?match[]={}&{window}",
                enc(&selector)
            ))
            .await;
        assert_eq!(status, 200, "{selector}: {series}");
        assert_eq!(
            json(&series)["data"].as_array().unwrap().len(),
            1,
            "{selector}"
        );
    }
    let (status, body) = server
        .get(&format!(
            "/api/v1/query?format=top&time={}&query={}",
            from + 20,
            enc(&format!(
                r#"merge by ("service.version") ({{"{stored_type}"}}[1h])"#
            ))
        ))
        .await;
    assert_eq!(status, 200, "{body}");
    let (status, body) = server
        .get(&format!(
            "/api/v1/series?match[]={}&{window}",
            enc(r#"{service.version="1.2"}"#)
        ))
        .await;
    assert_eq!(status, 400, "{body}");
    assert!(body.contains("service_version"), "{body}");
}

#[tokio::test]
async fn parca_http_routes_answer_as_parcas_gateway() {
    let server = Server::ready().await;
    let from = 1_700_000_000_i64;
    let path = format!(
        "/ingest?name={}&from={from}&until={}&format=folded",
        enc("shop.cpu{env=prod}"),
        from + 10
    );
    let (status, answer) = server
        .post(&path, b"main;work 10\nmain;idle 5\n".to_vec())
        .await;
    assert_eq!(status, 200, "{answer}");
    let window = "start=2023-11-14T22:00:00Z&end=2023-11-14T23:00:00Z";

    let (status, types) = server.get(&format!("/profiles/types?{window}")).await;
    assert_eq!(status, 200, "{types}");
    let types = json(&types);
    let t = &types["types"][0];
    assert_eq!(t["name"], "process_cpu", "{types}");
    assert_eq!(t["sampleType"], "samples", "{types}");
    assert_eq!(t["periodUnit"], "nanoseconds", "{types}");

    let (_, labels) = server.get(&format!("/profiles/labels?{window}")).await;
    let labels = json(&labels);
    assert!(
        labels["labelNames"]
            .as_array()
            .unwrap()
            .iter()
            .any(|n| n == "env"),
        "{labels}"
    );
    let (_, values) = server
        .get(&format!(
            "/profiles/labels/service_name/values?match={}&{window}",
            enc("{env=\"prod\"}")
        ))
        .await;
    assert_eq!(
        json(&values)["labelValues"],
        serde_json::json!(["shop"]),
        "{values}"
    );

    let query = format!(
        "{}:{}:{}:{}:{}:delta",
        t["name"].as_str().unwrap(),
        t["sampleType"].as_str().unwrap(),
        t["sampleUnit"].as_str().unwrap(),
        t["periodType"].as_str().unwrap(),
        t["periodUnit"].as_str().unwrap()
    );
    // The gateway is the gRPC method: as Parca, a delta type's series are summed (one per
    // `sumBy` group) and CPU sample counts are given in the period's unit.
    let (status, range) = server
        .get(&format!(
            "/profiles/query_range?query={}&{window}&step=60s&sumBy=env",
            enc(&query)
        ))
        .await;
    assert_eq!(status, 200, "{range}");
    let range = json(&range);
    let series = &range["series"][0];
    assert_eq!(series["sampleType"]["type"], "cpu", "{range}");
    assert_eq!(series["sampleType"]["unit"], "nanoseconds", "{range}");
    let labels = series["labelset"]["labels"].as_array().unwrap();
    assert!(
        labels
            .iter()
            .any(|l| l["name"] == "env" && l["value"] == "prod"),
        "{range}"
    );
    let sample = &series["samples"][0];
    assert_eq!(sample["value"], "150000000", "{range}");
    assert_eq!(sample["valuePerSecond"], 2_500_000.0, "{range}");
    assert!(
        sample["timestamp"].as_str().unwrap().ends_with('Z'),
        "{range}"
    );

    // Query: a merged TOP report and a PPROF one, the totals equal to our own API's.
    let (status, top) = server
        .get(&format!(
            "/profiles/query?mode=MODE_MERGE&merge.query={}&merge.start=2023-11-14T22:00:00Z&merge.end=2023-11-14T23:00:00Z&reportType=REPORT_TYPE_TOP",
            enc(&query)
        ))
        .await;
    assert_eq!(status, 200, "{top}");
    let top = json(&top);
    assert_eq!(top["total"], "15", "{top}");
    let names: Vec<&str> = top["top"]["list"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|r| r["meta"]["function"]["name"].as_str())
        .collect();
    assert!(names.contains(&"work") && names.contains(&"idle"), "{top}");
    let (_, ours) = server
        .get(&format!(
            "/api/v1/query?format=top&start=1699999200&end=1700002800&query={}",
            enc(&query)
        ))
        .await;
    let ours = json(&ours);
    let our_total: i64 = ours["data"]["rows"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["flat"].as_i64().unwrap())
        .sum();
    assert_eq!(our_total, 15, "{ours}");
    let (status, pprof) = server
        .get(&format!(
            "/profiles/query?mode=MODE_MERGE&merge.query={}&merge.start=2023-11-14T22:00:00Z&merge.end=2023-11-14T23:00:00Z&reportType=REPORT_TYPE_PPROF",
            enc(&query)
        ))
        .await;
    assert_eq!(status, 200, "{pprof}");
    let bytes = {
        use base64::Engine as _;
        base64::engine::general_purpose::STANDARD
            .decode(json(&pprof)["pprof"].as_str().unwrap())
            .unwrap()
    };
    let decoded = parca_profile::decode(&bytes, &Default::default()).unwrap();
    assert_eq!(decoded[0].total(), 15);

    // Every mode and report of Query is served by the gateway, as the gRPC method serves it:
    // a diff of the window against itself, and a bad parameter named.
    let side = |s: &str| {
        format!(
            "diff.{s}.mode=MODE_MERGE&diff.{s}.merge.query={}&diff.{s}.merge.start=2023-11-14T22:00:00Z&diff.{s}.merge.end=2023-11-14T23:00:00Z",
            enc(&query)
        )
    };
    let (status, diff) = server
        .get(&format!(
            "/profiles/query?mode=MODE_DIFF&{}&{}&reportType=REPORT_TYPE_TOP&diff.absolute=true",
            side("a"),
            side("b")
        ))
        .await;
    assert_eq!(status, 200, "{diff}");
    let diff = json(&diff);
    let work = diff["top"]["list"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["meta"]["function"]["name"] == "work")
        .cloned()
        .unwrap_or_default();
    assert_eq!(work["diff"], "0", "{diff}");
    let (status, body) = server
        .get("/profiles/query?mode=MODE_MERGE&merge.qury=x")
        .await;
    assert_eq!(status, 400, "{body}");
    assert_eq!(
        json(&body)["message"],
        "parameter `merge.qury`: MergeProfile has no field `qury`"
    );
    let (status, body) = server.get("/profiles/has_profile_data").await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(json(&body)["hasData"], true, "{body}");

    // Unknown paths under API prefixes: JSON 404s, never the UI's page.
    for path in [
        "/profiles/nope",
        "/api/v2/anything",
        "/v1development/x",
        "/parca.query.v1alpha1.QueryService/Nope",
    ] {
        let (status, body) = server.get(path).await;
        assert_eq!(status, 404, "{path}: {body}");
        assert!(
            serde_json::from_str::<Value>(&body).is_ok(),
            "{path}: {body}"
        );
    }
    let (_, body) = server.get("/profiles/nope").await;
    assert_eq!(json(&body)["code"], 5, "{body}");
    let (status, body) = server.get("/profiles/query_range?query=nonsense(").await;
    assert_eq!(status, 400, "{body}");
    assert_eq!(json(&body)["code"], 3, "{body}");
}

#[tokio::test]
async fn cors_lets_allowed_origins_call_the_api() {
    let server = Server::set_store(
        Server::unready_with(Options {
            cors_allowed_origins: vec!["https://app.example".into()],
            ..Options::default()
        })
        .await,
    );
    let preflight = server
        .client
        .request(
            reqwest::Method::OPTIONS,
            format!("{}/profiles/types", server.base),
        )
        .header("origin", "https://app.example")
        .header("access-control-request-method", "GET")
        .header("access-control-request-headers", "authorization")
        .send()
        .await
        .unwrap();
    assert_eq!(preflight.status(), 204);
    let h = preflight.headers();
    assert_eq!(h["access-control-allow-origin"], "https://app.example");
    assert_eq!(h["access-control-allow-headers"], "authorization");
    let get = server
        .client
        .get(format!("{}/api/v1/labels", server.base))
        .header("origin", "https://app.example")
        .send()
        .await
        .unwrap();
    assert_eq!(
        get.headers()["access-control-allow-origin"],
        "https://app.example"
    );
    let other = server
        .client
        .get(format!("{}/api/v1/labels", server.base))
        .header("origin", "https://evil.example")
        .send()
        .await
        .unwrap();
    assert!(!other.headers().contains_key("access-control-allow-origin"));
}

#[tokio::test]
async fn queries_over_the_concurrency_limit_are_refused_naming_the_flag() {
    // No query may run at all: every query meets a full limit, deterministically.
    let server = Server::set_store(
        Server::unready_with(Options {
            max_concurrent_queries: 0,
            ..Options::default()
        })
        .await,
    );
    let (status, body) = server
        .get("/api/v1/query_range?query=process_cpu:samples:count:cpu:nanoseconds:delta&start=0&end=60&step=10")
        .await;
    assert_eq!(status, 429, "{body}");
    assert!(body.contains("--query-max-concurrency"), "{body}");
    assert_eq!(json(&body)["errorType"], "too_many_requests", "{body}");
    // Metadata does not count as a query.
    let (status, _) = server.get("/api/v1/labels").await;
    assert_eq!(status, 200);
}

/// A pprof's `drop_frames` matching frames in the middle of its stacks (an allocator under
/// the user's code) is applied at ingest as google/pprof applies it, and kept in what
/// `format=pprof` returns.
#[tokio::test]
async fn drop_frames_are_applied_at_ingest_and_kept_in_pprof() {
    use parca_pprof::proto;
    let server = Server::ready().await;
    // Functions 1..=5: main, work, malloc, mmap_inner, other.
    let strings = [
        "",
        "space",
        "bytes",
        "main",
        "work",
        "malloc",
        "mmap_inner",
        "other",
        "malloc|mmap_.*",
    ];
    let pprof = proto::Profile {
        sample_type: vec![proto::ValueType { r#type: 1, unit: 2 }],
        period_type: Some(proto::ValueType { r#type: 1, unit: 2 }),
        period: 1,
        time_nanos: 1_700_000_000_000_000_000,
        drop_frames: 8,
        ..one_line_functions(&strings, 3, &[(&[4, 3, 2, 1], 5), (&[5, 1], 3)])
    };
    let (status, text) = server
        .post(
            "/api/v1/write?__name__=memory&job=alloc",
            parca_pprof::encode(&pprof, true),
        )
        .await;
    assert_eq!(status, 200, "{text}");
    let query = enc("merge(memory:space:bytes:space:bytes{job=\"alloc\"}[1h])");
    let time = "time=1700000001";
    let (status, top) = server
        .get(&format!("/api/v1/query?format=top&{time}&query={query}"))
        .await;
    assert_eq!(status, 200, "{top}");
    let top = json(&top);
    let flat: Vec<(String, i64)> = top["data"]["rows"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            (
                r["name"].as_str().unwrap().to_owned(),
                r["flat"].as_i64().unwrap(),
            )
        })
        .filter(|(_, flat)| *flat != 0)
        .collect();
    // The allocator's frames give way to their caller: `work` holds the 5 bytes.
    assert_eq!(
        flat,
        [("work".to_owned(), 5), ("other".to_owned(), 3)],
        "{top}"
    );
    let response = server
        .client
        .get(format!(
            "{}/api/v1/query?format=pprof&{time}&query={query}",
            server.base
        ))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let bytes = response.bytes().await.unwrap();
    let back = parca_pprof::decode(&bytes, &Default::default())
        .unwrap()
        .to_proto();
    assert_eq!(
        back.string_table[back.drop_frames as usize],
        "malloc|mmap_.*"
    );
}

/// A merge's duration is the sum of the durations of the captures merged, however many series
/// each was split into by its sample labels (go-cpu.pb.gz splits into several): google/pprof's
/// merge of the same files says the same (`tests/e2e/pprof_oracle.rs` asks it).
#[tokio::test]
async fn merged_durations_count_each_capture_once() {
    let server = Server::ready().await;
    let cpu = corpus("go/go-cpu.pb.gz");
    let file = &parca_profile::decode(&cpu, &Default::default()).unwrap()[0];
    let (file_duration, file_time) = (file.meta.duration_nanos, file.meta.time_nanos);
    for instance in ["a", "b", "c", "d"] {
        let (status, text) = server
            .post(
                &format!("/api/v1/write?__name__=process_cpu&job=dur&instance={instance}"),
                cpu.clone(),
            )
            .await;
        assert_eq!(status, 200, "{text}");
    }
    let (_, series) = server
        .get(&format!(
            "/api/v1/series?match[]={}",
            enc("{job=\"dur\",instance=\"a\"}")
        ))
        .await;
    let n_series = json(&series)["data"].as_array().unwrap().len();
    assert!(
        n_series > 1,
        "the file splits into series by its labels: {series}"
    );
    let time = file_time / 1_000_000_000 + 1;
    for (selector, captures) in [(r#"{job="dur",instance="a"}"#, 1), (r#"{job="dur"}"#, 4)] {
        let query = enc(&format!(
            "merge(process_cpu:cpu:nanoseconds:cpu:nanoseconds:delta{selector}[1h])"
        ));
        let response = server
            .client
            .get(format!(
                "{}/api/v1/query?format=pprof&time={time}&query={query}",
                server.base
            ))
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 200);
        let bytes = response.bytes().await.unwrap();
        let merged = parca_pprof::decode(&bytes, &Default::default()).unwrap();
        assert_eq!(
            merged.header().duration_nanos,
            captures * file_duration,
            "{selector}: {n_series} series per capture"
        );
    }
}

/// Regression (a folder of an incident's profiles pushed in any order but time order lost
/// some): within the out-of-order window, a series takes profiles older than its last.
#[tokio::test]
async fn profiles_pushed_out_of_time_order_are_all_stored() {
    let server = Server::ready().await;
    let start = 1_700_000_000_i64;
    for offset in [300, 100, 200, 0] {
        let from = start + offset;
        let path = format!(
            "/ingest?name={}&from={from}&until={}&format=folded",
            enc("incident.cpu{host=h1}"),
            from + 10
        );
        let (status, answer) = server.post(&path, b"main;work 10\n".to_vec()).await;
        assert_eq!(status, 200, "{offset}: {answer}");
    }
    let (status, range) = server
        .get(&format!(
            "/api/v1/query_range?query={}&start={}&end={}&step=100",
            enc("sum(process_cpu:samples:count:cpu:nanoseconds:delta{service_name=\"incident\"})"),
            start,
            start + 399
        ))
        .await;
    assert_eq!(status, 200, "{range}");
    let points = json(&range)["data"]["result"][0]["values"]
        .as_array()
        .unwrap()
        .len();
    assert_eq!(points, 4, "{range}");
}

/// A push older than the out-of-order window (2 h behind its series' newest) is stored as a
/// block of its own, durable and queryable when answered; pushed again, it is refused as a
/// duplicate, as one in the head is; and it counts once.
#[tokio::test]
async fn a_push_older_than_the_out_of_order_window_is_stored_as_a_block() {
    let server = Server::ready().await;
    let path = "/api/v1/write?__name__=process_cpu&job=late";
    let file = corpus("go/go-cpu.pb.gz");
    let mut old = parca_pprof::decode(&file, &Default::default())
        .unwrap()
        .to_proto();
    let newest_ms = old.time_nanos / 1_000_000;
    old.time_nanos -= 5 * 3_600_000_000_000;
    let old = parca_pprof::encode(&old, true);
    let (status, answer) = server.post(path, file.clone()).await;
    assert_eq!(status, 200, "{answer}");
    let (status, answer) = server.post(path, old.clone()).await;
    assert_eq!(status, 200, "past the window: {answer}");
    let stored = json(&answer)["data"]["profiles"].as_u64().unwrap();
    assert!(stored > 2, "{answer}");
    let (status, status_tsdb) = server.get("/api/v1/status/tsdb").await;
    assert_eq!(status, 200);
    assert!(
        json(&status_tsdb)["data"]["blocks"].as_u64().unwrap() >= 1,
        "{status_tsdb}"
    );
    // Pushed again: a duplicate of what the block holds.
    let (status, answer) = server.post(path, old).await;
    assert_eq!(status, 400, "{answer}");
    assert!(answer.contains("is stored already"), "{answer}");
    let (status, range) = server
        .get(&format!(
            "/api/v1/query_range?query={}&start={}&end={}&step=3600",
            enc(&format!("sum({CPU}{{job=\"late\"}})")),
            (newest_ms - 6 * 3_600_000) / 1000,
            newest_ms / 1000 + 3600
        ))
        .await;
    assert_eq!(status, 200, "{range}");
    let values = json(&range)["data"]["result"][0]["values"].clone();
    let points: Vec<f64> = values
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v[1].as_str().unwrap().parse().unwrap())
        .collect();
    let total = parca_profile::select_sample_type(
        parca_profile::decode(&file, &Default::default()).unwrap(),
        Some("cpu"),
        None,
    )
    .unwrap()
    .total() as f64;
    // One point for the old push, one for the newest: each the file's total, counted once.
    assert_eq!(points, [total, total], "{range}");
}

/// A pprof whose functions are `strings[first_name..]` in order (function `i` named by string
/// `first_name + i - 1`), one location per function with the same id, and `samples` as
/// (location ids leaf first, value). The caller sets the types.
fn one_line_functions(
    strings: &[&str],
    first_name: i64,
    samples: &[(&[u64], i64)],
) -> parca_pprof::proto::Profile {
    use parca_pprof::proto;
    let n = strings.len() as u64 - first_name as u64;
    proto::Profile {
        sample: samples
            .iter()
            .map(|(stack, value)| proto::Sample {
                location_id: stack.to_vec(),
                value: vec![*value],
                label: vec![],
            })
            .collect(),
        location: (1..=n)
            .map(|id| proto::Location {
                id,
                line: vec![proto::Line {
                    function_id: id,
                    line: 1,
                    column: 0,
                }],
                ..Default::default()
            })
            .collect(),
        function: (1..=n)
            .map(|id| proto::Function {
                id,
                name: first_name - 1 + id as i64,
                ..Default::default()
            })
            .collect(),
        string_table: strings.iter().map(|s| (*s).to_owned()).collect(),
        ..Default::default()
    }
}

/// A pprof of CPU time taken at `time_s` over 10 s, with one sample per pod (label `pod`), pod
/// `i` having spent `i + 1` ms on `main;work`.
fn fleet_pprof(n_pods: usize, time_s: i64) -> Vec<u8> {
    use parca_pprof::proto;
    let mut strings: Vec<String> = ["", "cpu", "nanoseconds", "main", "work", "pod"]
        .map(String::from)
        .to_vec();
    let mut profile = one_line_functions(&["", "", "", "main", "work"], 3, &[]);
    let samples = (0..n_pods)
        .map(|i| {
            strings.push(format!("pod-{i}"));
            proto::Sample {
                location_id: vec![2, 1],
                value: vec![(i as i64 + 1) * 1_000_000],
                label: vec![proto::Label {
                    key: 5,
                    str: strings.len() as i64 - 1,
                    ..Default::default()
                }],
            }
        })
        .collect();
    profile.sample = samples;
    profile.string_table = strings;
    profile.sample_type = vec![proto::ValueType { r#type: 1, unit: 2 }];
    profile.period_type = Some(proto::ValueType { r#type: 1, unit: 2 });
    profile.period = 10_000_000;
    profile.time_nanos = time_s * 1_000_000_000;
    profile.duration_nanos = 10_000_000_000;
    parca_pprof::encode(&profile, true)
}

/// 14,814 pods, each its own series, as the issue measured: before, the first screen's two
/// queries were refused ("the query selects 14814 series, more than the limit of 10000").
#[tokio::test]
async fn a_fleet_of_fifteen_thousand_series_merges_and_graphs_its_top_series() {
    const PODS: usize = 14_814;
    let mut options = Options::default();
    options.push_limits.max_series = PODS;
    let server = Server::set_store(Server::unready_with(options).await);
    let t = 1_700_000_000_i64;
    for i in 0..3 {
        let (status, text) = server
            .post(
                "/api/v1/write?__name__=process_cpu&job=fleet",
                fleet_pprof(PODS, t + 10 * i),
            )
            .await;
        assert_eq!(status, 200, "{text}");
    }
    let pod_ms = |i: usize| (i as f64 + 1.0) * 1e6;
    let all: f64 = (0..PODS).map(pod_ms).sum::<f64>() * 3.0;
    let selector = r#"process_cpu:cpu:nanoseconds:cpu:nanoseconds:delta{job="fleet"}"#;

    // The merge of every pod's profile.
    let (status, top) = server
        .get(&format!(
            "/api/v1/query?format=top&time={}&query={}",
            t + 30,
            enc(&format!("merge({selector}[1m])"))
        ))
        .await;
    assert_eq!(status, 200, "{top}");
    let total = json(&top)["data"]["total"].as_f64().unwrap();
    assert_eq!(total, all, "{top}");

    // The graph: the 20 biggest pods, the rest summed.
    let (status, range) = server
        .get(&format!(
            "/api/v1/query_range?limit=20&step=10&start={t}&end={}&query={}",
            t + 20,
            enc(selector)
        ))
        .await;
    assert_eq!(status, 200, "{}", &range[..range.len().min(500)]);
    let data = &json(&range)["data"];
    let result = data["result"].as_array().unwrap();
    assert_eq!(result.len(), 20);
    let shown: BTreeSet<&str> = result
        .iter()
        .map(|s| s["metric"]["pod"].as_str().unwrap())
        .collect();
    let biggest: BTreeSet<String> = (PODS - 20..PODS).map(|i| format!("pod-{i}")).collect();
    assert_eq!(
        shown,
        biggest.iter().map(String::as_str).collect::<BTreeSet<_>>()
    );
    assert_eq!(data["omitted"]["series"], PODS - 20);
    let sum = |values: &Value| -> f64 {
        values
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v[1].as_str().unwrap().parse::<f64>().unwrap())
            .sum()
    };
    let drawn: f64 = result.iter().map(|s| sum(&s["values"])).sum();
    assert_eq!(drawn + sum(&data["omitted"]["values"]), all);

    // A bad limit is named.
    let (status, text) = server
        .get(&format!(
            "/api/v1/query_range?limit=0&step=10&start={t}&end={}&query={}",
            t + 20,
            enc(selector)
        ))
        .await;
    assert_eq!(status, 400, "{text}");
    assert!(text.contains("`limit`"), "{text}");
}

#[tokio::test]
async fn range_queries_past_the_points_limit_are_refused_naming_the_flag() {
    let mut options = Options::default();
    options.limits.max_points = 100;
    let server = Server::set_store(Server::unready_with(options).await);
    let (status, text) = server
        .post(
            "/api/v1/write?__name__=process_cpu&job=fleet",
            fleet_pprof(60, 1_700_000_000),
        )
        .await;
    assert_eq!(status, 200, "{text}");
    let query = enc(r#"process_cpu:cpu:nanoseconds:cpu:nanoseconds:delta{job="fleet"}"#);
    let (status, text) = server
        .get(&format!(
            "/api/v1/query_range?step=10&start=1700000000&end=1700000020&query={query}"
        ))
        .await;
    assert_eq!(status, 422, "{text}");
    assert!(text.contains("--query-max-points"), "{text}");
    assert!(text.contains("60 series × 3 steps"), "{text}");
}

/// google/pprof's legacy formats are taken by `/api/v1/write` as by `parca profile`: each was
/// refused ("field scalar has wire type 1, expected a varint at byte 3"), and the answer to a
/// body in no format names what was tried.
#[tokio::test]
async fn pushes_of_google_pprofs_legacy_formats_are_stored() {
    let server = Server::ready().await;
    for file in [
        "cppbench.heap",
        "cppbench.contention",
        "cppbench.thread",
        "gobench.heap",
        "go.godoc.thread",
        "java.heap",
        "java.cpu",
        "java.contention",
    ] {
        let body = corpus(&format!("published/google-pprof/legacy/{file}"));
        let expected = parca_profile::decode(&body, &Default::default())
            .unwrap_or_else(|e| panic!("{file}: {e}"));
        let job = file.replace('.', "_");
        let (status, text) = server
            .post(&format!("/api/v1/write?__name__=legacy&job={job}"), body)
            .await;
        assert_eq!(status, 200, "{file}: {text}");
        let (_, types) = server
            .get(&format!(
                "/api/v1/series?match[]={}",
                enc(&format!("{{job=\"{job}\"}}"))
            ))
            .await;
        let n = json(&types)["data"].as_array().map_or(0, Vec::len);
        assert!(n >= expected.len().min(1), "{file}: {types}");
    }
    let (status, text) = server
        .post(
            "/api/v1/write?__name__=legacy&job=junk",
            b"\x08\x01junk".to_vec(),
        )
        .await;
    assert_eq!(status, 400, "{text}");
    assert!(text.contains("legacy formats"), "{text}");
}

#[tokio::test]
async fn parse_query_says_where_a_querys_selector_and_its_parts_are() {
    let server = Server::ready().await;
    let ask = |q: &str, lenient: bool| {
        format!(
            "/api/v1/parse_query?query={}{}",
            enc(q),
            if lenient { "&lenient=true" } else { "" }
        )
    };
    // Offsets count characters: `é` is one, though two bytes.
    let q = r#"a:b:c:d:e{who="é", job="a[p]i", x=~"y"}[5m] offset 1h |= "main""#;
    let (status, body) = server.get(&ask(q, false)).await;
    assert_eq!(status, 200, "{body}");
    let data = &json(&body)["data"];
    assert_eq!(data["value_type"], "profile_set", "{body}");
    let s = &data["selectors"][0];
    let chars: Vec<char> = q.chars().collect();
    let slice = |a: &Value, b: &Value| -> String {
        chars[a.as_u64().unwrap() as usize..b.as_u64().unwrap() as usize]
            .iter()
            .collect()
    };
    assert_eq!(
        slice(&s["start"], &s["end"]),
        r#"a:b:c:d:e{who="é", job="a[p]i", x=~"y"}[5m]"#
    );
    assert_eq!(
        slice(&s["start"], &s["body_end"]),
        r#"a:b:c:d:e{who="é", job="a[p]i", x=~"y"}"#
    );
    assert_eq!(
        slice(&s["braces"]["start"], &s["braces"]["end"]),
        r#"{who="é", job="a[p]i", x=~"y"}"#
    );
    assert_eq!(s["profile_type"], "a:b:c:d:e");
    assert_eq!(s["range"], "5m");
    let m = &s["matchers"][2];
    assert_eq!(
        (m["name"].as_str(), m["op"].as_str(), m["value"].as_str()),
        (Some("x"), Some("=~"), Some("y"))
    );
    assert_eq!(slice(&m["start"], &m["end"]), r#"x=~"y""#);

    // A profile, a series set, and a type named by `__name__`.
    let (_, body) = server
        .get(&ask(r#"diff(a:b:c:d:e, {__name__="f:g:h:i:j"})"#, false))
        .await;
    let data = &json(&body)["data"];
    assert_eq!(data["value_type"], "profile");
    assert_eq!(data["selectors"][0]["braces"], Value::Null);
    assert_eq!(data["selectors"][1]["profile_type"], "f:g:h:i:j");
    let (_, body) = server.get(&ask("sum by (job) (a:b:c:d:e)", false)).await;
    assert_eq!(json(&body)["data"]["value_type"], "series_set");

    // Strict: a fault is a 400 with its position, as a query's is.
    let (status, body) = server.get(&ask("merge(a:b:c:d:e{job=}", false)).await;
    assert_eq!(status, 400, "{body}");
    assert_eq!(
        json(&body)["position"],
        serde_json::json!({"line": 1, "column": 21})
    );
    // Lenient: what a half-typed query would be, and its errors as fields.
    let (status, body) = server.get(&ask(r#"sum(a:b:c:d:e{job="ap"#, true)).await;
    assert_eq!(status, 200, "{body}");
    let data = &json(&body)["data"];
    assert_eq!(data["selectors"][0]["profile_type"], "a:b:c:d:e", "{body}");
    assert_eq!(data["selectors"][0]["matchers"][0]["value"], "ap", "{body}");
    assert_eq!(data["errors"][0]["position"]["column"], 19, "{body}");
    let (status, body) = server.get(&ask("x", true).replace("true", "maybe")).await;
    assert_eq!(status, 400, "{body}");
    assert!(body.contains("`lenient` is true or false"), "{body}");
}
