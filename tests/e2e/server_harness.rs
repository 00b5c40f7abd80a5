//! What the server's end-to-end tests (and the load benchmark, which includes this file) need
//! around a real `parca` process: finding or building the binary, starting it and the targets
//! as child processes that die with the test, a small blocking HTTP client, and polling with a
//! deadline.
//!
//! Outside tools (Go, Python with pypprof, Debian's prometheus) come from
//! `tests/tools/targets.sh`. A test that cannot have one says so on stderr and skips it, except
//! when `PARCA_REQUIRE_TARGETS=1` (CI), where a missing tool is a failure.

// The bench binary includes this file too and uses only part of it.
#![allow(dead_code)]

use std::fs::File;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The tests crate's directory (`tests/`).
pub fn tests_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// Whether a missing target must fail the test rather than skip it (`PARCA_REQUIRE_TARGETS=1`).
pub fn targets_required() -> bool {
    std::env::var_os("PARCA_REQUIRE_TARGETS").is_some_and(|v| v != "0" && !v.is_empty())
}

/// Says loudly that `what` is skipped and why; panics instead under `PARCA_REQUIRE_TARGETS=1`.
pub fn skip(what: &str, why: &str) {
    assert!(
        !targets_required(),
        "PARCA_REQUIRE_TARGETS is set but {what} is not available: {why}"
    );
    #[allow(clippy::print_stderr)]
    {
        eprintln!("SKIP: {what}: {why} (run tests/tools/targets.sh as root to install it)");
    }
}

/// Runs `tests/tools/targets.sh WHICH` and returns the path it prints, or why it failed.
pub fn outside_target(which: &str) -> Result<PathBuf, String> {
    let script = tests_dir().join("tools/targets.sh");
    let output = Command::new("bash")
        .arg(&script)
        .arg(which)
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("cannot run {}: {e}", script.display()))?;
    if !output.status.success() {
        return Err(format!(
            "{} {which} failed: {}",
            script.display(),
            String::from_utf8_lossy(&output.stderr).trim()
        ));
    }
    let path = String::from_utf8_lossy(&output.stdout).trim().to_owned();
    Ok(PathBuf::from(path))
}

/// Function → (flat, cum) of a `format=top` answer's `data`.
pub fn top_rows(data: &serde_json::Value) -> std::collections::BTreeMap<String, (i64, i64)> {
    data["rows"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|r| {
            Some((
                r["name"].as_str()?.to_owned(),
                (r["flat"].as_i64()?, r["cum"].as_i64()?),
            ))
        })
        .collect()
}

/// The total of a `format=top` answer's `data`: the sum of its rows' flat values.
pub fn top_total(data: &serde_json::Value) -> i64 {
    top_rows(data).values().map(|(flat, _)| flat).sum()
}

/// Runs the target script `script` (a path under `tests/targets/`) with `python` and `args`,
/// and returns the one line of JSON it prints; panics with its output when it fails.
pub fn run_json_script(python: &Path, script: &str, args: &[String]) -> serde_json::Value {
    let output = Command::new(python)
        .arg(tests_dir().join("targets").join(script))
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("cannot run {script}: {e}"));
    assert!(
        output.status.success(),
        "{script} {args:?} failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_slice(&output.stdout).unwrap_or_else(|e| {
        panic!(
            "{script} printed no JSON ({e}): {}",
            String::from_utf8_lossy(&output.stdout)
        )
    })
}

/// The `parca` binary: `$PARCA_BIN`, else built now with the cargo that builds this crate
/// (`--release` when `release`, for the benchmark; the tests use the dev profile).
pub fn parca_binary(release: bool) -> PathBuf {
    if let Some(path) = std::env::var_os("PARCA_BIN") {
        let path = PathBuf::from(path);
        assert!(path.exists(), "PARCA_BIN={} does not exist", path.display());
        return path;
    }
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let mut command = Command::new(cargo);
    command
        .current_dir(tests_dir())
        .args(["build", "--quiet", "-p", "parca", "--bin", "parca"])
        .arg("--message-format=json-render-diagnostics")
        .stderr(Stdio::inherit());
    if release {
        command.arg("--release");
    }
    let output = command.output().expect("run cargo build -p parca");
    assert!(output.status.success(), "cargo build -p parca failed");
    String::from_utf8_lossy(&output.stdout)
        .lines()
        .filter_map(|line| serde_json::from_str::<serde_json::Value>(line).ok())
        .filter(|m| m["reason"] == "compiler-artifact" && m["target"]["name"] == "parca")
        .find_map(|m| m["executable"].as_str().map(PathBuf::from))
        .expect("cargo build reported the parca executable")
}

/// A free port on 127.0.0.1 for a process the test starts, which binds it soon after.
///
/// Ports come from outside the kernel's ephemeral range (`ip_local_port_range`: below it, or
/// above it where it starts low), never from binding port 0: a port of that range, free when
/// asked, may be handed to one of the many outgoing connections the tests make before the
/// child binds it (the agent once failed with "Address already in use" so). Within this
/// process each port is handed out once; a port some other program listens on is skipped.
pub fn free_port() -> u16 {
    use std::sync::atomic::{AtomicU32, Ordering};
    static NEXT: AtomicU32 = AtomicU32::new(0);
    let ephemeral: Vec<u32> = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .unwrap_or_default()
        .split_whitespace()
        .filter_map(|s| s.parse().ok())
        .collect();
    let (first, last) = match ephemeral[..] {
        [first, last] => (first, last),
        _ => (32768, 60999),
    };
    let (low, high) = if first >= 11_000 {
        (10_000, first)
    } else {
        (last.saturating_add(1).min(65_535), 65_536)
    };
    let span = high.saturating_sub(low).max(1);
    let start = std::process::id().wrapping_mul(7919) % span;
    for _ in 0..span {
        let port = (low + (start + NEXT.fetch_add(1, Ordering::Relaxed)) % span) as u16;
        if TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return port;
        }
    }
    panic!("no free port on 127.0.0.1 between {low} and {high}")
}

/// A child process that is killed (SIGKILL) and reaped when this is dropped, its output in a log
/// file that a failing test prints.
pub struct Process {
    /// What it is, for messages.
    pub name: String,
    child: Child,
    log: PathBuf,
}

impl Process {
    /// Starts `command` with stdout and stderr into `log`.
    pub fn start(name: &str, mut command: Command, log: &Path) -> Process {
        let out = File::create(log).expect("create log file");
        let err = out.try_clone().expect("clone log file");
        let child = command
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {name} ({command:?}): {e}"));
        Process {
            name: name.to_owned(),
            child,
            log: log.to_owned(),
        }
    }

    /// The process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Panics if the process has exited, showing its log.
    pub fn assert_running(&mut self) {
        if let Ok(Some(status)) = self.child.try_wait() {
            panic!(
                "{} exited ({status}); its log:\n{}",
                self.name,
                self.log_tail()
            );
        }
    }

    /// Its exit status, once it has exited.
    pub fn exited(&mut self) -> Option<std::process::ExitStatus> {
        self.child.try_wait().ok().flatten()
    }

    /// Waits until its output says `text` (a program's "ready" or "loaded"), up to 30 s;
    /// panics if it exits first.
    pub fn wait_for_output(&mut self, text: &str) {
        let what = format!("{} to say `{text}`", self.name);
        poll(
            &what,
            Duration::from_secs(30),
            Duration::from_millis(50),
            || {
                self.assert_running();
                let log = std::fs::read_to_string(&self.log).unwrap_or_default();
                if log.contains(text) { Ok(()) } else { Err(log) }
            },
        );
    }

    /// The last lines of its log.
    pub fn log_tail(&self) -> String {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(40)..].join("\n")
    }
}

impl Drop for Process {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Polls `check` every `every` until it gives `Some`, or panics after `timeout` with `what` and
/// the last reason `check` gave.
pub fn poll<T>(
    what: &str,
    timeout: Duration,
    every: Duration,
    mut check: impl FnMut() -> Result<T, String>,
) -> T {
    let deadline = Instant::now() + timeout;
    loop {
        match check() {
            Ok(value) => return value,
            Err(why) if Instant::now() >= deadline => {
                panic!("timed out after {timeout:?} waiting for {what}: {why}")
            }
            Err(_) => std::thread::sleep(every),
        }
    }
}

/// An HTTP answer.
#[derive(Debug)]
pub struct Response {
    /// The status code.
    pub status: u16,
    /// Header names in lower case, with their values.
    pub headers: Vec<(String, String)>,
    /// The body, de-chunked.
    pub body: Vec<u8>,
}

impl Response {
    /// A header's value.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }

    /// The body as text (lossy).
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }
}

/// `GET http://addr{path_and_query}` over a fresh connection, HTTP/1.1 with `Connection: close`,
/// within `timeout` for connecting and for each read.
pub fn http_get(
    addr: SocketAddr,
    path_and_query: &str,
    timeout: Duration,
) -> Result<Response, String> {
    http_request(addr, "GET", path_and_query, &[], timeout)
}

/// `method http://addr{path_and_query}` with `body` (sent with a `Content-Length` when not
/// empty), as [`http_get`] does it.
pub fn http_request(
    addr: SocketAddr,
    method: &str,
    path_and_query: &str,
    body: &[u8],
    timeout: Duration,
) -> Result<Response, String> {
    let mut stream =
        TcpStream::connect_timeout(&addr, timeout).map_err(|e| format!("connect {addr}: {e}"))?;
    stream
        .set_read_timeout(Some(timeout))
        .and_then(|()| stream.set_write_timeout(Some(timeout)))
        .map_err(|e| e.to_string())?;
    let length = if body.is_empty() {
        String::new()
    } else {
        format!("Content-Length: {}\r\n", body.len())
    };
    write!(
        stream,
        "{method} {path_and_query} HTTP/1.1\r\nHost: {addr}\r\nAccept-Encoding: identity\r\n{length}Connection: close\r\n\r\n"
    )
    .and_then(|()| stream.write_all(body))
    .map_err(|e| format!("send to {addr}: {e}"))?;
    let mut reader = BufReader::new(stream);
    let mut line = String::new();
    reader
        .read_line(&mut line)
        .map_err(|e| format!("read from {addr}: {e}"))?;
    let status: u16 = line
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| format!("not an HTTP status line: {line:?}"))?;
    let mut headers = Vec::new();
    loop {
        line.clear();
        reader
            .read_line(&mut line)
            .map_err(|e| format!("read headers from {addr}: {e}"))?;
        let header = line.trim_end();
        if header.is_empty() {
            break;
        }
        if let Some((name, value)) = header.split_once(':') {
            headers.push((name.trim().to_ascii_lowercase(), value.trim().to_owned()));
        }
    }
    let chunked = headers
        .iter()
        .any(|(n, v)| n == "transfer-encoding" && v.eq_ignore_ascii_case("chunked"));
    let mut body = Vec::new();
    if chunked {
        loop {
            line.clear();
            reader.read_line(&mut line).map_err(|e| e.to_string())?;
            let size = usize::from_str_radix(line.trim().split(';').next().unwrap_or(""), 16)
                .map_err(|_| format!("bad chunk size {line:?}"))?;
            if size == 0 {
                break;
            }
            let start = body.len();
            body.resize(start + size, 0);
            reader
                .read_exact(&mut body[start..])
                .map_err(|e| e.to_string())?;
            line.clear();
            reader.read_line(&mut line).map_err(|e| e.to_string())?;
        }
    } else {
        reader
            .read_to_end(&mut body)
            .map_err(|e| format!("read body from {addr}: {e}"))?;
    }
    Ok(Response {
        status,
        headers,
        body,
    })
}

/// Percent-encodes a query parameter value.
pub fn encode(s: &str) -> String {
    let mut out = String::with_capacity(s.len() * 3);
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || b"-_.~".contains(&b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// A running `parca` server with its own store in a temporary directory.
pub struct Server {
    /// The process.
    pub process: Process,
    /// Where it listens.
    pub addr: SocketAddr,
    /// Its store, config and log (removed on drop).
    pub dir: tempfile::TempDir,
}

impl Server {
    /// Starts `binary` on a free port with the parca.yaml that `config` writes for that address,
    /// and waits until `/-/ready` answers.
    pub fn start(
        binary: &Path,
        extra_args: &[&str],
        config: impl FnOnce(SocketAddr) -> String,
    ) -> Server {
        Server::start_with_storage(binary, None, extra_args, config)
    }

    /// [`Server::start`] with the store in `storage` (else in the server's temporary directory).
    pub fn start_with_storage(
        binary: &Path,
        storage: Option<&Path>,
        extra_args: &[&str],
        config: impl FnOnce(SocketAddr) -> String,
    ) -> Server {
        let mut server = Server::spawn(binary, storage, extra_args, config);
        poll(
            "the server to be ready",
            Duration::from_secs(30),
            Duration::from_millis(50),
            || {
                server.process.assert_running();
                match server.get("/-/ready") {
                    Ok(r) if r.status == 200 => Ok(()),
                    Ok(r) => Err(format!("HTTP {}", r.status)),
                    Err(e) => Err(e),
                }
            },
        );
        server
    }

    /// Starts the server as [`Server::start_with_storage`] does, without waiting for it (for
    /// servers that plain HTTP cannot ask, behind TLS or credentials).
    pub fn spawn(
        binary: &Path,
        storage: Option<&Path>,
        extra_args: &[&str],
        config: impl FnOnce(SocketAddr) -> String,
    ) -> Server {
        let dir = tempfile::tempdir().expect("tempdir");
        let addr: SocketAddr = ([127, 0, 0, 1], free_port()).into();
        let config_path = dir.path().join("parca.yaml");
        std::fs::write(&config_path, config(addr)).expect("write parca.yaml");
        let storage = storage.map_or_else(|| dir.path().join("data"), Path::to_owned);
        let mut command = Command::new(binary);
        command
            .arg(format!("--config-path={}", config_path.display()))
            .arg(format!("--storage-path={}", storage.display()))
            .arg(format!("--http-address={addr}"))
            .args(extra_args);
        // The tests push and import recorded profiles, some years old: a server keeps them
        // when its retention is off. Tests of retention give their own.
        if !extra_args
            .iter()
            .any(|a| a.starts_with("--storage-retention-time"))
        {
            command.arg("--storage-retention-time=0");
        }
        let process = Process::start("parca", command, &dir.path().join("parca.log"));
        Server { process, addr, dir }
    }

    /// `GET path_and_query` with a generous timeout.
    pub fn get(&self, path_and_query: &str) -> Result<Response, String> {
        http_get(self.addr, path_and_query, Duration::from_secs(30))
    }

    /// `GET` of a JSON endpoint that must answer 200 with `status: success`; returns `data`.
    pub fn api(&self, path_and_query: &str) -> Result<serde_json::Value, String> {
        let r = self.get(path_and_query)?;
        let json: serde_json::Value = serde_json::from_slice(&r.body).map_err(|e| {
            format!(
                "{path_and_query}: HTTP {}, not JSON ({e}): {}",
                r.status,
                r.text()
            )
        })?;
        if r.status != 200 || json["status"] != "success" {
            return Err(format!("{path_and_query}: HTTP {}: {json}", r.status));
        }
        Ok(json["data"].clone())
    }
}

/// The corpus profile `rel` (under `testdata/pprof`) stamped at `ms`, gzipped.
pub fn corpus_profile_at(rel: &str, ms: i64) -> Vec<u8> {
    let bytes = std::fs::read(tests_dir().join("testdata/pprof").join(rel)).expect("read");
    let mut profile = parca_pprof::decode(&bytes, &Default::default())
        .expect("decodes")
        .to_proto();
    profile.time_nanos = ms * 1_000_000;
    parca_pprof::encode(&profile, true)
}

/// CPU seconds (user + system) the process has used so far, from `/proc/PID/stat`.
pub fn cpu_seconds(pid: u32) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).expect("read /proc/PID/stat");
    // Fields after the command name (which is in parentheses and may hold spaces): state is
    // field 3, utime 14 and stime 15, in clock ticks.
    let rest = &stat[stat.rfind(')').expect("comm") + 2..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let ticks: f64 =
        fields[11].parse::<f64>().expect("utime") + fields[12].parse::<f64>().expect("stime");
    ticks / clock_ticks_per_second()
}

fn clock_ticks_per_second() -> f64 {
    std::process::Command::new("getconf")
        .arg("CLK_TCK")
        .output()
        .ok()
        .and_then(|o| String::from_utf8_lossy(&o.stdout).trim().parse().ok())
        .unwrap_or(100.0)
}
