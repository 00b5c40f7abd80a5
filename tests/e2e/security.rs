//! The server on a real network: TLS and credentials from a web configuration file, the
//! lifecycle and push gates, and the request limits, asked with curl (a client nobody here
//! wrote) over certificates this test makes.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair};

use crate::server_harness::{Server, outside_target, parca_binary, poll, skip};

/// A CA that signs server and client certificates.
pub(crate) struct Ca {
    pub(crate) pem: String,
    issuer: Issuer<'static, KeyPair>,
}

impl Ca {
    pub(crate) fn new(name: &str) -> Ca {
        let key = KeyPair::generate().expect("generate a key");
        let mut params = CertificateParams::new(Vec::<String>::new()).expect("CA params");
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.distinguished_name.push(DnType::CommonName, name);
        let cert = params.self_signed(&key).expect("self-sign the CA");
        Ca {
            pem: cert.pem(),
            issuer: Issuer::new(params, key),
        }
    }

    /// A certificate for `names` and its key, as PEM; `expired` makes one whose validity ended
    /// in 2020.
    pub(crate) fn issue(&self, names: &[&str], expired: bool) -> (String, String) {
        let key = KeyPair::generate().expect("generate a key");
        let names: Vec<String> = names.iter().map(|n| (*n).to_owned()).collect();
        let mut params = CertificateParams::new(names).expect("leaf params");
        if expired {
            params.not_before = rcgen::date_time_ymd(2019, 1, 1);
            params.not_after = rcgen::date_time_ymd(2020, 1, 1);
        }
        let cert = params.signed_by(&key, &self.issuer).expect("sign");
        (cert.pem(), key.serialize_pem())
    }
}

/// What curl got: the status (0 when it got none, e.g. a refused handshake), headers in lower
/// case, the body, the HTTP version, and curl's exit code.
#[derive(Debug)]
pub(crate) struct Curl {
    pub(crate) status: u16,
    pub(crate) headers: String,
    pub(crate) body: String,
    pub(crate) http_version: String,
    pub(crate) exit: i32,
}

pub(crate) fn curl(dir: &Path, args: &[&str]) -> Curl {
    let headers = dir.join("curl.headers");
    let body = dir.join("curl.body");
    let _ = std::fs::remove_file(&headers);
    let _ = std::fs::remove_file(&body);
    let output = Command::new("curl")
        .args(["-sS", "--max-time", "20", "-D"])
        .arg(&headers)
        .arg("-o")
        .arg(&body)
        .args(["-w", "%{http_code} %{http_version}"])
        .args(args)
        .output()
        .expect("run curl (apt-get install curl)");
    let written = String::from_utf8_lossy(&output.stdout).into_owned();
    let mut parts = written.split_whitespace();
    Curl {
        status: parts.next().and_then(|s| s.parse().ok()).unwrap_or(0),
        http_version: parts.next().unwrap_or("").to_owned(),
        headers: std::fs::read_to_string(&headers)
            .unwrap_or_default()
            .to_ascii_lowercase(),
        body: std::fs::read_to_string(&body).unwrap_or_default(),
        exit: output.status.code().unwrap_or(-1),
    }
}

pub(crate) fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, text).expect("write a test file");
    path
}

/// A CA, and a server certificate for `localhost` and `127.0.0.1` it signed, written into `dir`
/// as `ca.pem`, `server.crt` and `server.key`; returns the CA and the path of `ca.pem`.
pub(crate) fn server_certificate(dir: &Path) -> (Ca, PathBuf) {
    let ca = Ca::new("parca test CA");
    let (cert, key) = ca.issue(&["localhost", "127.0.0.1"], false);
    let ca_file = write(dir, "ca.pem", &ca.pem);
    write(dir, "server.crt", &cert);
    write(dir, "server.key", &key);
    (ca, ca_file)
}

/// A Pyroscope folded push of one stack to the application `name` (query-encoded).
fn folded_push(dir: &Path, base: &str, name: &str) -> Curl {
    curl(
        dir,
        &[
            "--data-binary",
            "main;work 10",
            &format!("{base}/ingest?name={name}&format=folded"),
        ],
    )
}

fn no_scrapes(_: std::net::SocketAddr) -> String {
    "scrape_configs: []\n".into()
}

fn https(server: &Server, path: &str) -> String {
    format!("https://127.0.0.1:{}{path}", server.addr.port())
}

/// Waits until the server answers `args` (curl's) with anything but a connection failure.
fn wait_ready(server: &mut Server, dir: &Path, args: &[&str]) {
    poll(
        "the server to answer",
        Duration::from_secs(30),
        Duration::from_millis(100),
        || {
            server.process.assert_running();
            let got = curl(dir, args);
            if got.status == 200 {
                Ok(())
            } else {
                Err(format!("{got:?}"))
            }
        },
    );
}

#[test]
fn tls_basic_auth_and_tokens_with_curl() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let (_ca, ca_file) = server_certificate(d);
    let hash = bcrypt::hash("s3cret", 6).unwrap();
    let web = write(
        d,
        "web.yml",
        &format!(
            "tls_server_config:\n  cert_file: server.crt\n  key_file: server.key\n\
             http_server_config:\n  headers:\n    X-Frame-Options: deny\n\
             basic_auth_users:\n  alice: {hash}\n"
        ),
    );
    let tokens = write(d, "tokens", "# one per line\nmachine-token-1\n");
    let binary = parca_binary(false);
    let mut server = Server::spawn(
        &binary,
        None,
        &[
            &format!("--web-config-file={}", web.display()),
            &format!("--web-bearer-token-file={}", tokens.display()),
        ],
        no_scrapes,
    );
    let ca_arg = ca_file.to_str().unwrap();
    let labels = https(&server, "/api/v1/labels");
    wait_ready(
        &mut server,
        d,
        &["--cacert", ca_arg, "-u", "alice:s3cret", &labels],
    );

    // Right credentials, either kind, over HTTP/2; the configured header on the answer.
    let ok = curl(
        d,
        &["--http2", "--cacert", ca_arg, "-u", "alice:s3cret", &labels],
    );
    assert_eq!((ok.status, ok.http_version.as_str()), (200, "2"), "{ok:?}");
    assert!(ok.headers.contains("x-frame-options: deny"), "{ok:?}");
    let token = curl(
        d,
        &[
            "--cacert",
            ca_arg,
            "-H",
            "Authorization: Bearer machine-token-1",
            &labels,
        ],
    );
    assert_eq!(token.status, 200, "{token:?}");

    // Wrong password, unknown user, wrong token, none: the same 401, the same words.
    let answers: Vec<Curl> = [
        vec!["-u", "alice:wrong"],
        vec!["-u", "mallory:s3cret"],
        vec!["-H", "Authorization: Bearer guessed"],
        vec![],
    ]
    .into_iter()
    .map(|extra| {
        let mut args = vec!["--cacert", ca_arg];
        args.extend(extra);
        args.push(&labels);
        curl(d, &args)
    })
    .collect();
    for answer in &answers {
        assert_eq!(answer.status, 401, "{answer:?}");
        assert!(
            answer.headers.contains("www-authenticate: basic"),
            "{answer:?}"
        );
        assert_eq!(
            answer.body, answers[0].body,
            "401s must not say what was wrong"
        );
    }
    // The UI is behind the same gate.
    assert_eq!(
        curl(d, &["--cacert", ca_arg, &https(&server, "/")]).status,
        401
    );

    // Plain HTTP to the TLS port: Go's 400, not a handshake error.
    let plain = curl(
        d,
        &[&format!(
            "http://127.0.0.1:{}/api/v1/labels",
            server.addr.port()
        )],
    );
    assert_eq!(plain.status, 400, "{plain:?}");
    assert!(
        plain.body.contains("HTTP request to an HTTPS server"),
        "{plain:?}"
    );

    // Lifecycle endpoints are off without --web-enable-lifecycle, even for a good user.
    let reload = curl(
        d,
        &[
            "--cacert",
            ca_arg,
            "-u",
            "alice:s3cret",
            "-X",
            "POST",
            &https(&server, "/-/reload"),
        ],
    );
    assert_eq!(reload.status, 403, "{reload:?}");
    assert!(reload.body.contains("--web-enable-lifecycle"), "{reload:?}");

    // A renewed certificate (from another CA) is served to the next connection, no restart.
    let next_ca = Ca::new("renewed CA");
    let (cert, key) = next_ca.issue(&["localhost", "127.0.0.1"], false);
    let next_ca_file = write(d, "next-ca.pem", &next_ca.pem);
    write(d, "server.key", &key);
    write(d, "server.crt", &cert);
    let next = next_ca_file.to_str().unwrap();
    let renewed = curl(d, &["--cacert", next, "-u", "alice:s3cret", &labels]);
    assert_eq!(renewed.status, 200, "{renewed:?}");
    let old = curl(d, &["--cacert", ca_arg, "-u", "alice:s3cret", &labels]);
    assert_eq!(
        old.status, 0,
        "the old CA must no longer verify the server: {old:?}"
    );
    server.process.assert_running();
}

#[test]
fn client_certificates_and_lifecycle() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let (ca, ca_file) = server_certificate(d);
    let (client, client_key) = ca.issue(&["client.example"], false);
    write(d, "client.crt", &client);
    write(d, "client.key", &client_key);
    let (expired, expired_key) = ca.issue(&["client.example"], true);
    write(d, "expired.crt", &expired);
    write(d, "expired.key", &expired_key);
    let stranger = Ca::new("someone else's CA");
    let (foreign, foreign_key) = stranger.issue(&["client.example"], false);
    write(d, "foreign.crt", &foreign);
    write(d, "foreign.key", &foreign_key);
    let web = write(
        d,
        "web.yml",
        "tls_server_config:\n  cert_file: server.crt\n  key_file: server.key\n  \
         client_auth_type: RequireAndVerifyClientCert\n  client_ca_file: ca.pem\n  \
         min_version: TLS12\n",
    );
    let binary = parca_binary(false);
    let mut server = Server::spawn(
        &binary,
        None,
        &[
            &format!("--web-config-file={}", web.display()),
            "--web-enable-lifecycle",
        ],
        no_scrapes,
    );
    let ca_arg = ca_file.to_str().unwrap();
    let with = |name: &str| -> Vec<String> {
        vec![
            "--cacert".into(),
            ca_arg.into(),
            "--cert".into(),
            d.join(format!("{name}.crt")).display().to_string(),
            "--key".into(),
            d.join(format!("{name}.key")).display().to_string(),
        ]
    };
    let ready = https(&server, "/-/ready");
    let mut args = with("client");
    args.push(ready.clone());
    let args_ref: Vec<&str> = args.iter().map(String::as_str).collect();
    wait_ready(&mut server, d, &args_ref);

    for (who, expect_ok) in [("client", true), ("expired", false), ("foreign", false)] {
        let mut args = with(who);
        args.push(ready.clone());
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let got = curl(d, &args);
        assert_eq!(got.status == 200, expect_ok, "{who}: {got:?}");
        assert_eq!(got.exit == 0, expect_ok, "curl's exit code, {who}: {got:?}");
    }
    let none = curl(d, &["--cacert", ca_arg, &ready]);
    assert_eq!(
        none.status, 0,
        "no client certificate must be refused: {none:?}"
    );

    // With the flag, /-/reload and /-/quit answer, and /-/quit stops the server.
    let mut reload = with("client");
    reload.extend(["-X".into(), "POST".into(), https(&server, "/-/reload")]);
    let reload: Vec<&str> = reload.iter().map(String::as_str).collect();
    assert_eq!(curl(d, &reload).status, 200);
    let mut quit = with("client");
    quit.extend(["-X".into(), "POST".into(), https(&server, "/-/quit")]);
    let quit: Vec<&str> = quit.iter().map(String::as_str).collect();
    let answer = curl(d, &quit);
    assert_eq!(answer.status, 200, "{answer:?}");
    let status = poll(
        "the server to exit after /-/quit",
        Duration::from_secs(30),
        Duration::from_millis(100),
        || {
            server
                .process
                .exited()
                .ok_or_else(|| "still running".to_owned())
        },
    );
    assert!(status.success(), "{status}: {}", server.process.log_tail());
}

#[test]
fn limits_and_gates_name_their_flags() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let binary = parca_binary(false);
    let server = Server::start(
        &binary,
        &[
            "--web-max-request-body-size=1KiB",
            "--ingest-max-labels-per-series=3",
            "--ingest-max-label-value-length=8",
            "--web-max-concurrent-requests=1",
            "--query-timeout=0s",
        ],
        no_scrapes,
    );
    let base = format!("http://{}", server.addr);
    let big = write(d, "big.bin", &"x".repeat(4096));
    let big_arg = format!("@{}", big.display());

    // Over the body limit, declared or chunked: 413 naming the flag.
    for extra in [vec![], vec!["-H", "Transfer-Encoding: chunked"]] {
        let mut args = vec!["--data-binary", &big_arg];
        args.extend(extra);
        let url = format!("{base}/api/v1/write?__name__=x");
        args.push(&url);
        let got = curl(d, &args);
        assert_eq!(got.status, 413, "{got:?}");
        assert!(got.body.contains("--web-max-request-body-size"), "{got:?}");
    }

    // Too many labels for one series: 400 naming the flag (a Pyroscope folded push).
    let labeled = folded_push(d, &base, "app.cpu%7Ba%3D1,b%3D2,c%3D3%7D");
    assert_eq!(labeled.status, 400, "{labeled:?}");
    assert!(
        labeled.body.contains("--ingest-max-labels-per-series"),
        "{labeled:?}"
    );

    // A label value over its length: 400 naming the flag.
    let long = folded_push(d, &base, "app.cpu%7Ba%3D0123456789%7D");
    assert_eq!(long.status, 400, "{long:?}");
    assert!(
        long.body.contains("--ingest-max-label-value-length"),
        "{long:?}"
    );

    // A query past its time: 422 naming the flag.
    let stored = folded_push(d, &base, "app.cpu");
    assert_eq!(stored.status, 200, "{stored:?}");
    let types = server.api("/api/v1/profile_types").unwrap();
    let now_s = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    let t = &types[0];
    let mut name = [
        "name",
        "sample_type",
        "sample_unit",
        "period_type",
        "period_unit",
    ]
    .map(|k| t[k].as_str().unwrap_or_default())
    .join(":");
    if t["delta"] == true {
        name.push_str(":delta");
    }
    let slow = curl(
        d,
        &[&format!(
            "{base}/api/v1/query_range?query={}&start={}&end={}&step=10s",
            crate::server_harness::encode(&format!("sum({name})")),
            now_s - 86_400,
            now_s
        )],
    );
    assert_eq!(slow.status, 422, "{slow:?}");
    assert!(slow.body.contains("--query-timeout"), "{slow:?}");

    // A second request while one is answered: 429 naming the flag; probes still answer.
    // The refused query above may hold its place until its work stops: wait for the place.
    poll(
        "the timed-out query to free its place",
        Duration::from_secs(20),
        Duration::from_millis(50),
        || {
            let got = curl(d, &[&format!("{base}/api/v1/labels")]);
            if got.status == 200 {
                Ok(())
            } else {
                Err(format!("{got:?}"))
            }
        },
    );
    // A request held open for as long as the test wants: a chunked body fed from a pipe the
    // test keeps open (the server admits a request before it reads the body). The probes below
    // must not come before it is admitted, or one of them takes the place and the held request
    // is the one refused: it is given time to be admitted, and started again if it was not.
    let hold = || {
        let mut held = Command::new("curl")
            .args(["-sS", "-o", "/dev/null", "-w", "%{http_code}"])
            // `-T -` streams stdin as it comes (`--data-binary @-` would read it all first).
            .args(["-T", "-", "-X", "POST"])
            .arg(format!("{base}/api/v1/write?__name__=x"))
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .spawn()
            .expect("run curl");
        use std::io::Write as _;
        let stdin = held.stdin.as_mut().expect("piped");
        stdin
            .write_all(b"not yet a profile")
            .expect("write to curl");
        stdin.flush().expect("flush");
        held
    };
    let mut held = poll(
        "a request to hold its place",
        Duration::from_secs(20),
        Duration::from_millis(10),
        || {
            let mut held = hold();
            std::thread::sleep(Duration::from_millis(300));
            match held.try_wait() {
                Ok(None) => Ok(held),
                other => Err(format!("it ended: {other:?}")),
            }
        },
    );
    let busy = poll(
        "a request to be refused while another is answered",
        Duration::from_secs(20),
        Duration::from_millis(50),
        || {
            if let Ok(Some(status)) = held.try_wait() {
                let mut code = String::new();
                if let Some(mut out) = held.stdout.take() {
                    use std::io::Read as _;
                    let _ = out.read_to_string(&mut code);
                }
                // A probe admitted before it took the place, and it was refused: hold again.
                if code == "429" {
                    held = hold();
                    return Err("the held request lost its place to a probe".into());
                }
                panic!(
                    "the held request ended early ({status}, HTTP {code}): it must hold its place"
                );
            }
            let got = curl(d, &[&format!("{base}/api/v1/labels")]);
            if got.status == 429 {
                Ok(got)
            } else {
                Err(format!("{got:?}"))
            }
        },
    );
    assert!(
        busy.body.contains("--web-max-concurrent-requests"),
        "{busy:?}"
    );
    assert_eq!(curl(d, &[&format!("{base}/-/healthy")]).status, 200);
    // Ending the body ends the held request (it is no profile: 400), and frees its place.
    drop(held.stdin.take());
    let output = held.wait_with_output().expect("curl ends");
    assert_eq!(String::from_utf8_lossy(&output.stdout), "400");
    assert_eq!(curl(d, &[&format!("{base}/api/v1/labels")]).status, 200);

    // A query-only server: pushes, lifecycle and its own profiles off.
    let readonly = Server::start(
        &binary,
        &["--web-enable-push=false", "--web-enable-pprof=false"],
        no_scrapes,
    );
    let base = format!("http://{}", readonly.addr);
    let push = curl(
        d,
        &[
            "--data-binary",
            "x",
            &format!("{base}/api/v1/write?__name__=x"),
        ],
    );
    assert_eq!(push.status, 403, "{push:?}");
    assert!(push.body.contains("--web-enable-push"), "{push:?}");
    assert_eq!(curl(d, &[&format!("{base}/debug/pprof/heap")]).status, 403);
    assert_eq!(
        curl(d, &["-X", "POST", &format!("{base}/-/quit")]).status,
        403
    );
    assert_eq!(curl(d, &[&format!("{base}/api/v1/labels")]).status, 200);
}

/// Go's net/http client (`tests/targets/go-client`) POSTs `body` to `url` `n` times over
/// HTTP/2 with TLS; what it read each time: (status, protocol, error), or why it could not run.
fn go_posts(
    url: &str,
    ca: &Path,
    body: &Path,
    credentials: Option<(&str, &str)>,
    n: usize,
) -> Result<Vec<(u16, String, String)>, String> {
    let client = outside_target("go-client")?;
    let mut command = Command::new(client);
    command
        .args(["-url", url, "-n", &n.to_string(), "-ca"])
        .arg(ca)
        .arg("-body")
        .arg(body);
    if let Some((user, password)) = credentials {
        command.args(["-user", user, "-password", password]);
    }
    let output = command.output().map_err(|e| e.to_string())?;
    if !output.status.success() {
        return Err(String::from_utf8_lossy(&output.stderr).into_owned());
    }
    Ok(String::from_utf8_lossy(&output.stdout)
        .lines()
        .map(|line| {
            let v: serde_json::Value = serde_json::from_str(line).expect("a JSON line");
            (
                v["status"].as_u64().unwrap_or(0) as u16,
                v["proto"].as_str().unwrap_or_default().to_owned(),
                v["error"].as_str().unwrap_or_default().to_owned(),
            )
        })
        .collect())
}

/// Early refusals (401, 403, 413, 429) arrive as answers over HTTP/2 with TLS, request after
/// request, while the client is still sending its body: curl and Go's net/http read the status,
/// never a reset stream ("Stream error in the HTTP/2 framing layer"), and gRPC reads its status.
#[test]
fn refusals_are_answers_over_http2_for_curl_go_and_grpc() {
    const TRIES: usize = 20;
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let (_ca, ca_file) = server_certificate(d);
    let ca_arg = ca_file.to_str().unwrap();
    let hash = bcrypt::hash("s3cret", 4).unwrap();
    let tls = "tls_server_config:\n  cert_file: server.crt\n  key_file: server.key\n";
    let web = write(
        d,
        "web.yml",
        &format!("{tls}basic_auth_users:\n  alice: {hash}\n"),
    );
    let binary = parca_binary(false);
    let mut server = Server::spawn(
        &binary,
        None,
        &[
            &format!("--web-config-file={}", web.display()),
            "--web-max-request-body-size=4KiB",
        ],
        no_scrapes,
    );
    let ready = https(&server, "/-/ready");
    wait_ready(
        &mut server,
        d,
        &["--cacert", ca_arg, "-u", "alice:s3cret", &ready],
    );
    // Prometheus' own CPU profile: 16 KB, more than one HTTP/2 frame and the limit above.
    let profile = crate::support::corpus_dir().join("prometheus/prometheus-cpu.pb.gz");
    let body_arg = format!("@{}", profile.display());
    let write_url = https(&server, "/api/v1/write?__name__=process_cpu");
    let reload_url = https(&server, "/-/reload");
    let alice = Some(("alice", "s3cret"));
    let cases = [
        ("no credentials", &write_url, None, 401, "Unauthorized"),
        (
            "lifecycle off",
            &reload_url,
            alice,
            403,
            "--web-enable-lifecycle",
        ),
        (
            "over the body limit",
            &write_url,
            alice,
            413,
            "--web-max-request-body-size",
        ),
    ];
    let go_missing = |why: &str| skip("Go's net/http client (tests/targets/go-client)", why);
    for (what, url, credentials, status, words) in cases {
        for _ in 0..TRIES {
            let mut args = vec!["--http2", "--cacert", ca_arg, "--data-binary", &body_arg];
            let user = credentials.map(|(u, p)| format!("{u}:{p}"));
            if let Some(user) = &user {
                args.extend(["-u", user.as_str()]);
            }
            args.push(url);
            let got = curl(d, &args);
            assert_eq!(
                (got.exit, got.status, got.http_version.as_str()),
                (0, status, "2"),
                "{what}: {got:?}"
            );
            assert!(got.body.contains(words), "{what}: {got:?}");
        }
        match go_posts(url, &ca_file, &profile, credentials, TRIES) {
            Ok(answers) => {
                assert_eq!(answers.len(), TRIES, "{what}: {answers:?}");
                for answer in answers {
                    assert_eq!(answer, (status, "HTTP/2.0".into(), String::new()), "{what}");
                }
            }
            Err(why) => go_missing(&why),
        }
    }
    // gRPC without credentials: its status, call after call on one channel.
    match outside_target("python-otlp") {
        Ok(python) => {
            let address = format!("localhost:{}", server.addr.port());
            let n = TRIES.to_string();
            let args = ["grpc-tls", address.as_str(), ca_arg, n.as_str()].map(String::from);
            let answer =
                crate::server_harness::run_json_script(&python, "python-otlp/send.py", &args);
            assert_eq!(
                answer,
                serde_json::json!({"codes": vec!["UNAUTHENTICATED"; TRIES]})
            );
        }
        Err(why) => skip("grpcio (tests/tools/targets.sh python-otlp)", &why),
    }
    server.process.assert_running();

    // Over the request rate: 429, the body still on its way.
    let limited = write(
        d,
        "limited.yml",
        &format!("{tls}rate_limit:\n  burst: 1\n  interval: 1h\n"),
    );
    let mut server = Server::spawn(
        &binary,
        None,
        &[&format!("--web-config-file={}", limited.display())],
        no_scrapes,
    );
    // The one token goes to the first request answered, whatever its answer (a 503 while the
    // store opens, say): wait for any answer.
    let ready = https(&server, "/-/ready");
    poll(
        "the server to answer",
        Duration::from_secs(30),
        Duration::from_millis(100),
        || {
            server.process.assert_running();
            match curl(d, &["--cacert", ca_arg, &ready]) {
                got if got.status == 0 => Err(format!("{got:?}")),
                _ => Ok(()),
            }
        },
    );
    let url = https(&server, "/api/v1/write?__name__=process_cpu");
    for _ in 0..TRIES {
        let got = curl(
            d,
            &[
                "--http2",
                "--cacert",
                ca_arg,
                "--data-binary",
                &body_arg,
                &url,
            ],
        );
        assert_eq!(
            (got.exit, got.status, got.http_version.as_str()),
            (0, 429, "2"),
            "{got:?}"
        );
        assert!(got.body.contains("rate_limit"), "{got:?}");
    }
    match go_posts(&url, &ca_file, &profile, None, TRIES) {
        Ok(answers) => {
            for answer in answers {
                assert_eq!(answer, (429, "HTTP/2.0".into(), String::new()));
            }
        }
        Err(why) => go_missing(&why),
    }
}
