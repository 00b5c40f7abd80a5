//! The scrape manager against real HTTP targets on loopback, storing into a real store.
#![allow(
    clippy::too_many_lines,
    reason = "tests are scenarios read top to bottom; the line budget is for product code"
)]

use std::convert::Infallible;
use std::sync::Arc;
use std::time::{Duration, Instant};

use base64::Engine;
use bytes::Bytes;
use http_body_util::Full;
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;
use parca_scrape::{Health, Manager, ScrapeMetrics};
use parca_tsdb::Db;

fn corpus(path: &str) -> Bytes {
    Bytes::from(
        std::fs::read(format!(
            "{}/../../tests/testdata/pprof/{path}",
            env!("CARGO_MANIFEST_DIR")
        ))
        .expect("corpus file"),
    )
}

/// A Go-like pprof target on a free port; `junk` answers 200 with a body that is not a profile.
async fn target(junk: bool) -> String {
    serve(junk, None).await
}

fn tls_file(name: &str) -> String {
    format!("{}/tests/testdata/tls/{name}", env!("CARGO_MANIFEST_DIR"))
}

/// The same target behind TLS, with a certificate for `profiled.example` only (signed by
/// `testdata/tls/ca.pem`), so that a client must name that server to trust it.
async fn tls_target() -> String {
    use tokio_rustls::rustls::pki_types::pem::PemObject;
    use tokio_rustls::rustls::pki_types::{CertificateDer, PrivateKeyDer};
    let certs = CertificateDer::pem_file_iter(tls_file("server.pem"))
        .expect("server.pem")
        .collect::<Result<Vec<_>, _>>()
        .expect("certificates");
    let key = PrivateKeyDer::from_pem_file(tls_file("server.key")).expect("server.key");
    let config = tokio_rustls::rustls::ServerConfig::builder()
        .with_no_client_auth()
        .with_single_cert(certs, key)
        .expect("certificate and key");
    serve(
        false,
        Some(tokio_rustls::TlsAcceptor::from(Arc::new(config))),
    )
    .await
}

async fn serve(junk: bool, tls: Option<tokio_rustls::TlsAcceptor>) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let address = listener.local_addr().expect("address").to_string();
    tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                return;
            };
            let tls = tls.clone();
            tokio::spawn(async move {
                let service = hyper::service::service_fn(
                    move |request: Request<hyper::body::Incoming>| async move {
                        let body = if junk {
                            Bytes::from_static(b"<html>not a profile</html>")
                        } else {
                            match request.uri().path() {
                                "/debug/pprof/profile" => corpus("go/go-cpu.pb.gz"),
                                "/debug/pprof/allocs" => corpus("go/go-allocs.pb.gz"),
                                "/debug/pprof/block" => corpus("go/go-block.pb.gz"),
                                "/debug/pprof/mutex" => corpus("go/go-mutex.pb.gz"),
                                "/debug/pprof/goroutine" => corpus("go/go-goroutine.pb.gz"),
                                _ => {
                                    let mut r = Response::new(Full::new(Bytes::from_static(
                                        b"404 page not found",
                                    )));
                                    *r.status_mut() = hyper::StatusCode::NOT_FOUND;
                                    return Ok::<_, Infallible>(r);
                                }
                            }
                        };
                        Ok::<_, Infallible>(Response::new(Full::new(body)))
                    },
                );
                let http = hyper::server::conn::http1::Builder::new();
                match tls {
                    None => {
                        let _ = http.serve_connection(TokioIo::new(stream), service).await;
                    }
                    Some(tls) => {
                        if let Ok(stream) = tls.accept(stream).await {
                            let _ = http.serve_connection(TokioIo::new(stream), service).await;
                        }
                    }
                }
            });
        }
    });
    address
}

fn config(good: &str, junk: &str) -> parca_config::Config {
    let yaml = format!(
        r#"
scrape_configs:
  - job_name: go
    scrape_interval: 1s
    static_configs:
      - targets: ["{good}", "{junk}", "127.0.0.1:1"]
"#
    );
    parca_config::parse(&yaml, "test.yaml").expect("valid config")
}

/// Polls `check` until it holds or 20 s pass.
async fn eventually(what: &str, mut check: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while !check() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scrapes_stores_deltas_and_reports_health() {
    let good = target(false).await;
    let junk = target(true).await;
    let dir = tempfile::tempdir().expect("tempdir");
    let db = Arc::new(Db::open(dir.path(), Default::default()).expect("open"));
    let mut registry = prometheus_client::registry::Registry::default();
    let manager = Manager::new(
        db.clone(),
        Default::default(),
        ScrapeMetrics::register(&mut registry),
    );
    let config = config(&good, &junk);
    manager.apply(&config);

    let health_of = |address: &str| {
        let (active, _) = manager.targets();
        active
            .iter()
            .find(|t| t.target.relabeled["__address__"] == address)
            .map(|t| t.profiles.clone())
            .unwrap_or_default()
    };
    let wanted = [
        "process_cpu:cpu:nanoseconds:cpu:nanoseconds:delta",
        "memory:alloc_space:bytes:space:bytes",
        "memory:alloc_space:bytes:space:bytes:delta",
        "memory:inuse_space:bytes:space:bytes",
        "block:delay:nanoseconds:contentions:count:delta",
        "mutex:delay:nanoseconds:contentions:count:delta",
        "goroutine:goroutine:count:goroutine:count",
    ];
    // Deltas of cumulative profiles need two scrapes.
    eventually("every type, deltas included, from the good target", || {
        let profiles = health_of(&good);
        let names = db
            .querier(i64::MIN, i64::MAX)
            .label_values("__name__", &[])
            .expect("query");
        profiles.len() == 5
            && profiles.iter().all(|p| p.health == Health::Up)
            && wanted.iter().all(|w| names.iter().any(|n| n == w))
    })
    .await;
    eventually("the junk and the closed targets down", || {
        let junk = health_of(&junk);
        let closed = health_of("127.0.0.1:1");
        junk.iter().all(|p| p.health == Health::Down)
            && closed.iter().all(|p| p.health == Health::Down)
            && !junk.is_empty()
            && !closed.is_empty()
    })
    .await;
    let junk_error = health_of(&junk)[0].last_error.clone().expect("an error");
    assert!(junk_error.starts_with("invalid profile:"), "{junk_error}");
    let closed_error = health_of("127.0.0.1:1")[0]
        .last_error
        .clone()
        .expect("an error");
    assert!(
        closed_error.starts_with("request failed:"),
        "{closed_error}"
    );

    // What was stored carries the target's labels and Parca's type names.
    let querier = db.querier(i64::MIN, i64::MAX);
    assert_eq!(
        querier.label_values("instance", &[]).expect("query"),
        vec![good.clone()]
    );
    drop(querier);

    // A reload with the same configuration keeps the loops (and their last scrape).
    let before = health_of(&good)[0].last_scrape;
    manager.apply(&config);
    assert_eq!(health_of(&good)[0].last_scrape, before);
    // Dropping the job stops its loops.
    manager.apply(&parca_config::parse("scrape_configs: []", "empty.yaml").unwrap());
    assert!(manager.targets().0.is_empty());
    manager.stop().await;

    let mut metrics = String::new();
    prometheus_client::encoding::text::encode(&mut metrics, &registry).unwrap();
    assert!(
        metrics
            .contains("parca_scrapes_total{job=\"go\",profile=\"process_cpu\",result=\"success\"}"),
        "{metrics}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_server_name_names_the_server_while_connecting_to_the_target() {
    let address = tls_target().await;
    let dir = tempfile::tempdir().expect("tempdir");
    let db = Arc::new(Db::open(dir.path(), Default::default()).expect("open"));
    let manager = Manager::new(
        db.clone(),
        Default::default(),
        ScrapeMetrics::register(&mut prometheus_client::registry::Registry::default()),
    );
    // Two jobs on the same target: one names the server its certificate is for, one does not
    // (and so checks the certificate against 127.0.0.1, which it is not for).
    let yaml = format!(
        r#"
scrape_configs:
  - job_name: named
    scrape_interval: 1s
    scheme: https
    tls_config: {{ ca_file: "{ca}", server_name: profiled.example }}
    profiling_config: {{ pprof_config: {{ memory: {{ enabled: false }}, block: {{ enabled: false }}, mutex: {{ enabled: false }}, goroutine: {{ enabled: false }} }} }}
    static_configs: [{{ targets: ["{address}"] }}]
  - job_name: unnamed
    scrape_interval: 1s
    scheme: https
    tls_config: {{ ca_file: "{ca}" }}
    profiling_config: {{ pprof_config: {{ memory: {{ enabled: false }}, block: {{ enabled: false }}, mutex: {{ enabled: false }}, goroutine: {{ enabled: false }} }} }}
    static_configs: [{{ targets: ["{address}"] }}]
"#,
        ca = tls_file("ca.pem"),
    );
    manager.apply(&parca_config::parse(&yaml, "tls.yaml").expect("valid config"));
    let health_of = |job: &str| {
        let (active, _) = manager.targets();
        active
            .iter()
            .find(|t| t.target.relabeled["job"] == job)
            .and_then(|t| t.profiles.first().cloned())
    };
    eventually("both jobs scraped once", || {
        ["named", "unnamed"]
            .iter()
            .all(|job| health_of(job).is_some_and(|p| p.health != Health::Unknown))
    })
    .await;
    let named = health_of("named").unwrap();
    assert_eq!(named.health, Health::Up, "{:?}", named.last_error);
    let unnamed = health_of("unnamed").unwrap();
    assert_eq!(unnamed.health, Health::Down);
    let error = unnamed.last_error.unwrap_or_default();
    assert!(error.contains("certificate"), "{error}");
    let querier = db.querier(i64::MIN, i64::MAX);
    assert_eq!(
        querier.label_values("job", &[]).expect("query"),
        vec!["named".to_owned()]
    );
    assert_eq!(
        querier.label_values("instance", &[]).expect("query"),
        vec![address]
    );
    drop(querier);
    manager.stop().await;
}

/// Scrapes store on the async workers when the store is free; while a query holds the store,
/// they must wait on the blocking pool instead, so that the workers (and every other loop,
/// and the target served from the same runtime here) keep running.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_busy_store_does_not_stall_scraping() {
    let good = target(false).await;
    let yaml = format!(
        "scrape_configs:\n  - job_name: go\n    scrape_interval: 1s\n    static_configs: [{{ targets: [\"{good}\"] }}]\n"
    );
    let (manager, db, _dir) = scraping(&yaml);
    let stored_between = |from_ms: i64, to_ms: i64| {
        db.querier(from_ms, to_ms)
            .totals(&[])
            .expect("query")
            .iter()
            .map(|s| s.points.len())
            .sum::<usize>()
    };
    eventually("a first scrape stored", || {
        stored_between(i64::MIN, i64::MAX) > 0
    })
    .await;

    // A query holds the head for four seconds: five loops at 1 s scrape about twenty times.
    let holder_db = Arc::clone(&db);
    let (held_tx, held_rx) = std::sync::mpsc::channel();
    let holder = std::thread::spawn(move || {
        let querier = holder_db.querier(i64::MIN, i64::MAX);
        let from = std::time::SystemTime::now();
        held_tx.send(()).expect("test waits");
        std::thread::sleep(Duration::from_secs(4));
        let to = std::time::SystemTime::now();
        drop(querier);
        (from, to)
    });
    held_rx.recv().expect("holder started");
    let (from, to) = tokio::task::spawn_blocking(move || holder.join().expect("holder"))
        .await
        .expect("join");
    let ms = |t: std::time::SystemTime| {
        t.duration_since(std::time::UNIX_EPOCH).unwrap().as_millis() as i64
    };
    // Scrapes started while the head was held are stored once it is free.
    let mut during = 0;
    eventually("the scrapes made while the store was busy stored", || {
        during = stored_between(ms(from), ms(to));
        during >= 8
    })
    .await;
    manager.stop().await;
}

/// An HTTP server on a free port answering every request with `answer` (method, URI as sent,
/// headers → status, headers, body).
async fn serve_with<F>(answer: F) -> String
where
    F: Fn(
            &hyper::Method,
            &hyper::Uri,
            &hyper::HeaderMap,
        ) -> (u16, Vec<(&'static str, String)>, Bytes)
        + Send
        + Sync
        + 'static,
{
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let address = listener.local_addr().expect("address").to_string();
    let answer = Arc::new(answer);
    tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                return;
            };
            let answer = Arc::clone(&answer);
            tokio::spawn(async move {
                let service =
                    hyper::service::service_fn(move |request: Request<hyper::body::Incoming>| {
                        let (status, headers, body) =
                            answer(request.method(), request.uri(), request.headers());
                        let mut response = Response::new(Full::new(body));
                        *response.status_mut() = hyper::StatusCode::from_u16(status).unwrap();
                        for (name, value) in headers {
                            response.headers_mut().insert(
                                name,
                                hyper::header::HeaderValue::from_str(&value).unwrap(),
                            );
                        }
                        async move { Ok::<_, Infallible>(response) }
                    });
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), service)
                    .await;
            });
        }
    });
    address
}

/// A manager scraping `yaml`'s jobs into a fresh store (which lives as long as the directory).
fn scraping(yaml: &str) -> (Arc<Manager>, Arc<Db>, tempfile::TempDir) {
    let dir = tempfile::tempdir().expect("tempdir");
    let db = Arc::new(Db::open(dir.path(), Default::default()).expect("open"));
    let manager = Manager::new(
        db.clone(),
        Default::default(),
        ScrapeMetrics::register(&mut prometheus_client::registry::Registry::default()),
    );
    manager.apply(&parca_config::parse(yaml, "test.yaml").expect("valid config"));
    (manager, db, dir)
}

fn health_of_job(manager: &Manager, job: &str) -> Option<parca_scrape::ProfileStatus> {
    let (active, _) = manager.targets();
    active
        .iter()
        .find(|t| t.target.relabeled["job"] == job)
        .and_then(|t| t.profiles.first().cloned())
        .filter(|p| p.health != Health::Unknown)
}

const CPU_ONLY: &str = "profiling_config: { pprof_config: { memory: { enabled: false }, block: { enabled: false }, mutex: { enabled: false }, goroutine: { enabled: false } } }";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn oauth2_client_credentials_token_is_fetched_once_and_sent() {
    use std::sync::atomic::{AtomicUsize, Ordering};
    let token_requests = Arc::new(AtomicUsize::new(0));
    let counted = Arc::clone(&token_requests);
    // The token endpoint wants the client's credentials in Basic auth (form-URL-encoded first).
    let auth = format!(
        "Basic {}",
        base64::engine::general_purpose::STANDARD.encode(b"parca:s3cret%2Fx")
    );
    let token_server = serve_with(move |method, _, headers| {
        if method != hyper::Method::POST || headers.get("authorization").is_none_or(|v| *v != *auth)
        {
            return (
                401,
                vec![],
                Bytes::from_static(b"{\"error\":\"invalid_client\"}"),
            );
        }
        counted.fetch_add(1, Ordering::SeqCst);
        (
            200,
            vec![("content-type", "application/json".to_owned())],
            Bytes::from_static(
                b"{\"access_token\":\"tok\",\"token_type\":\"bearer\",\"expires_in\":3600}",
            ),
        )
    })
    .await;
    let target = serve_with(|_, uri, headers| {
        if headers
            .get("authorization")
            .is_none_or(|v| v != "Bearer tok")
        {
            return (401, vec![], Bytes::from_static(b"no token"));
        }
        assert_eq!(uri.path(), "/debug/pprof/profile");
        (200, vec![], corpus("go/go-cpu.pb.gz"))
    })
    .await;
    let yaml = format!(
        "scrape_configs:\n  - job_name: oauth\n    scrape_interval: 1s\n    {CPU_ONLY}\n    oauth2: {{ client_id: parca, client_secret: s3cret/x, token_url: 'http://{token_server}/token', scopes: [a, b] }}\n    static_configs: [{{ targets: ['{target}'] }}]\n"
    );
    let (manager, _db, _dir) = scraping(&yaml);
    let mut scrapes = Vec::new();
    eventually("three scrapes with the token", || {
        if let Some(p) = health_of_job(&manager, "oauth") {
            assert_eq!(p.health, Health::Up, "{:?}", p.last_error);
            if scrapes.last() != Some(&p.last_scrape) {
                scrapes.push(p.last_scrape);
            }
        }
        scrapes.len() >= 3
    })
    .await;
    assert_eq!(
        token_requests.load(Ordering::SeqCst),
        1,
        "the token is kept"
    );
    manager.stop().await;

    // A token endpoint that refuses: the scrape names it.
    let refusing = serve_with(|_, _, _| {
        (
            401,
            vec![],
            Bytes::from_static(b"{\"error\":\"invalid_client\"}"),
        )
    })
    .await;
    let yaml = format!(
        "scrape_configs:\n  - job_name: refused\n    scrape_interval: 1s\n    {CPU_ONLY}\n    oauth2: {{ client_id: parca, client_secret: wrong, token_url: 'http://{refusing}/token' }}\n    static_configs: [{{ targets: ['{target}'] }}]\n"
    );
    let (manager, _db, _dir) = scraping(&yaml);
    eventually("the refused token reported", || {
        health_of_job(&manager, "refused").is_some()
    })
    .await;
    let error = health_of_job(&manager, "refused")
        .unwrap()
        .last_error
        .unwrap();
    assert_eq!(
        error,
        format!(
            "oauth2 token from `http://{refusing}/token`: the token endpoint answered HTTP 401: {{\"error\":\"invalid_client\"}}"
        )
    );
    manager.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_go_through_proxy_url_with_its_headers() {
    // A forward proxy: it gets the target's absolute URL, here of a host that does not resolve.
    let proxy = serve_with(|_, uri, headers| {
        let ok = uri.host() == Some("profiled.invalid")
            && headers
                .get("proxy-authorization")
                .is_some_and(|v| v == "Basic cGFyY2E6cHc=");
        if ok {
            (200, vec![], corpus("go/go-cpu.pb.gz"))
        } else {
            (502, vec![], Bytes::from(format!("proxy refused {uri}")))
        }
    })
    .await;
    let yaml = format!(
        "scrape_configs:\n  - job_name: proxied\n    scrape_interval: 1s\n    {CPU_ONLY}\n    proxy_url: http://{proxy}\n    proxy_connect_header: {{ Proxy-Authorization: [Basic cGFyY2E6cHc=] }}\n    static_configs: [{{ targets: ['profiled.invalid:6060'] }}]\n"
    );
    let (manager, _db, _dir) = scraping(&yaml);
    eventually("the proxied target scraped", || {
        health_of_job(&manager, "proxied").is_some()
    })
    .await;
    let status = health_of_job(&manager, "proxied").unwrap();
    assert_eq!(status.health, Health::Up, "{:?}", status.last_error);
    manager.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redirects_are_followed_unless_follow_redirects_is_false() {
    let target = serve_with(|_, uri, _| match uri.path() {
        "/debug/pprof/profile" => (
            302,
            vec![("location", "/moved/profile".to_owned())],
            Bytes::new(),
        ),
        "/moved/profile" => (200, vec![], corpus("go/go-cpu.pb.gz")),
        _ => (404, vec![], Bytes::new()),
    })
    .await;
    let yaml = format!(
        "scrape_configs:\n  - job_name: follows\n    scrape_interval: 1s\n    {CPU_ONLY}\n    static_configs: [{{ targets: ['{target}'] }}]\n  - job_name: stays\n    scrape_interval: 1s\n    {CPU_ONLY}\n    follow_redirects: false\n    enable_http2: false\n    static_configs: [{{ targets: ['{target}'] }}]\n"
    );
    let (manager, _db, _dir) = scraping(&yaml);
    eventually("both jobs scraped", || {
        health_of_job(&manager, "follows").is_some() && health_of_job(&manager, "stays").is_some()
    })
    .await;
    let follows = health_of_job(&manager, "follows").unwrap();
    assert_eq!(follows.health, Health::Up, "{:?}", follows.last_error);
    let stays = health_of_job(&manager, "stays").unwrap();
    assert_eq!(
        stays.last_error.as_deref(),
        Some("server returned HTTP 302")
    );
    manager.stop().await;
}
