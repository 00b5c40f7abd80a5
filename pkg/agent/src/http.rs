//! The agent's HTTP endpoints on hyper: `/debug/pprof/profile`, `/debug/pprof/off_cpu`, `/`,
//! `/metrics`, `/healthy`.

use std::fmt::Write as _;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::mpsc::Sender;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::header::{
    AUTHORIZATION, CONTENT_DISPOSITION, CONTENT_TYPE, HeaderName, HeaderValue, WWW_AUTHENTICATE,
};
use hyper::{Method, Request, Response, StatusCode};
use parca_symbolize::Symbolizer;
use parca_webconfig::Security;
use tokio::net::TcpListener;
use tokio::sync::oneshot;

use crate::collector::{Command, Shared};
use crate::metrics::Snapshot;
use crate::profile::{BuildOptions, Filter, ProfileKind, RawProfile, build};

/// Longest window a request may ask for.
const MAX_SECONDS: u64 = 3600;
/// Go's default for `/debug/pprof/profile`.
const DEFAULT_SECONDS: u64 = 30;
/// Profile requests collecting at once; each holds its samples until it ends.
const MAX_REQUESTS: usize = 16;

/// What the handlers need.
pub(crate) struct HttpState {
    pub shared: Arc<Shared>,
    pub commands: Mutex<Sender<Command>>,
    pub symbolizer: Arc<Mutex<Symbolizer>>,
    /// The symbolizer's figures when `/metrics` last found it free.
    pub symbolizer_stats: Mutex<parca_symbolize::Stats>,
    pub build: BuildOptions,
    pub last_window: Mutex<Option<Arc<RawProfile>>>,
    pub n_cpus: usize,
    pub frequency_hz: u64,
    pub window_length: Duration,
    /// Profile requests in progress.
    pub requests: std::sync::atomic::AtomicUsize,
}

type Body = Full<Bytes>;

fn text(status: StatusCode, body: impl Into<String>) -> Response<Body> {
    Response::builder()
        .status(status)
        .header(CONTENT_TYPE, "text/plain; charset=utf-8")
        .body(Full::new(Bytes::from(body.into() + "\n")))
        .expect("static response parts are valid")
}

/// Serves until `shutdown` completes, then lets open requests finish for up to 5 seconds;
/// every connection and request goes through `security` (TLS, credentials, rate limit and
/// headers of `--web-config-file`).
pub(crate) async fn serve(
    listener: TcpListener,
    state: Arc<HttpState>,
    security: Arc<Security>,
    shutdown: impl std::future::Future<Output = ()>,
) {
    let checks = Arc::clone(&security);
    let answer_request = move |request| {
        let state = Arc::clone(&state);
        let security = Arc::clone(&checks);
        async move { answer(&state, &security, request).await }
    };
    parca_httpserve::serve(
        listener,
        security,
        answer_request,
        shutdown,
        Duration::from_secs(5),
    )
    .await;
}

/// A request after the web configuration's checks, with its headers on the answer.
async fn answer(
    state: &Arc<HttpState>,
    security: &Security,
    request: Request<Incoming>,
) -> Response<Body> {
    let mut response = if security.rate_limited() {
        text(
            StatusCode::TOO_MANY_REQUESTS,
            "over the request rate allowed by rate_limit in the web configuration file",
        )
    } else {
        let authorization = request.headers().get(AUTHORIZATION).map(|v| v.as_bytes());
        match security.authorize(authorization).await {
            Ok(()) => handle(state, request).await,
            Err(denied) => {
                let mut response = text(StatusCode::UNAUTHORIZED, "Unauthorized");
                response
                    .headers_mut()
                    .insert(WWW_AUTHENTICATE, HeaderValue::from_static(denied.challenge));
                response
            }
        }
    };
    for (name, value) in security.response_headers().iter() {
        if let (Ok(name), Ok(value)) = (
            HeaderName::from_bytes(name.as_bytes()),
            HeaderValue::from_str(value),
        ) {
            response.headers_mut().insert(name, value);
        }
    }
    response
}

async fn handle(state: &Arc<HttpState>, request: Request<Incoming>) -> Response<Body> {
    if request.method() != Method::GET && request.method() != Method::HEAD {
        return text(StatusCode::METHOD_NOT_ALLOWED, "only GET is served");
    }
    let query = request.uri().query().unwrap_or("").to_owned();
    match request.uri().path() {
        "/healthy" => text(StatusCode::OK, "ok"),
        "/metrics" => metrics(state),
        "/" => index(state),
        "/debug/pprof/profile" => profile(state, &query, ProfileKind::Cpu).await,
        "/debug/pprof/off_cpu" if state.shared.off_cpu_threshold > 0.0 => {
            profile(state, &query, ProfileKind::OffCpu).await
        }
        "/debug/pprof/off_cpu" => text(
            StatusCode::NOT_FOUND,
            "off-CPU profiling is off: start the agent with --off-cpu-threshold=P (the \
             probability, up to 1, that a switch-out is recorded)",
        ),
        path => text(
            StatusCode::NOT_FOUND,
            format!(
                "no endpoint `{path}`: try /, /debug/pprof/profile?seconds=N, \
                 /debug/pprof/off_cpu?seconds=N, /metrics or /healthy"
            ),
        ),
    }
}

fn metrics(state: &HttpState) -> Response<Body> {
    let (processes, objects_open, process_reads) = {
        let table = state.shared.processes.lock().expect("process table lock");
        (table.len(), table.n_objects(), table.reads())
    };
    let snapshot = Snapshot {
        // A profile being built holds the symbolizer for a while: never wait for it here (this
        // runs on the async worker); show the figures of the last time it was free.
        symbolizer: match state.symbolizer.try_lock() {
            Ok(symbolizer) => {
                let stats = symbolizer.stats();
                *state.symbolizer_stats.lock().expect("stats lock") = stats.clone();
                stats
            }
            Err(_) => state.symbolizer_stats.lock().expect("stats lock").clone(),
        },
        processes,
        objects_open,
        debuginfod: state
            .build
            .debuginfod
            .as_ref()
            .map(|d| *d.stats.lock().expect("debuginfod lock")),
        process_reads,
        n_cpus: state.n_cpus,
        frequency_hz: state.frequency_hz,
        window_length: state.window_length,
    };
    Response::builder()
        .header(
            CONTENT_TYPE,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
        )
        .body(Full::new(Bytes::from(
            state.shared.metrics.render(&snapshot),
        )))
        .expect("static response parts are valid")
}

/// The request's parameters for `/debug/pprof/profile` and `/debug/pprof/off_cpu`.
pub(crate) fn parse_profile_query(query: &str) -> Result<(u64, Filter), String> {
    let mut seconds = DEFAULT_SECONDS;
    let mut filter = Filter::default();
    for (k, v) in form_urlencoded::parse(query.as_bytes()) {
        match &*k {
            "seconds" => {
                seconds = v
                    .parse::<u64>()
                    .ok()
                    .filter(|s| (1..=MAX_SECONDS).contains(s))
                    .ok_or_else(|| {
                        format!(
                            "`seconds` must be a whole number from 1 to {MAX_SECONDS}, got `{v}`"
                        )
                    })?;
            }
            "pid" => {
                filter.pid = Some(
                    v.parse()
                        .map_err(|_| format!("`pid` must be a process id, got `{v}`"))?,
                );
            }
            "comm" => filter.comm = Some(v.into_owned()),
            _ => {}
        }
    }
    Ok((seconds, filter))
}

/// Gives back a request's place in [`MAX_REQUESTS`] however the request ends.
struct RequestSlot<'a>(&'a std::sync::atomic::AtomicUsize);

impl Drop for RequestSlot<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Relaxed);
    }
}

/// Cancels a request's collection when its client goes away before the end.
struct Subscription<'a> {
    id: u64,
    commands: &'a Mutex<Sender<Command>>,
    done: bool,
}

impl Drop for Subscription<'_> {
    fn drop(&mut self) {
        if !self.done
            && let Ok(commands) = self.commands.lock()
        {
            commands.send(Command::Cancel(self.id)).ok();
        }
    }
}

/// Sends a command to the sampling thread; `false` when it has stopped.
fn send(state: &HttpState, command: Command) -> bool {
    state
        .commands
        .lock()
        .expect("command sender lock")
        .send(command)
        .is_ok()
}

fn stopped() -> Response<Body> {
    text(StatusCode::SERVICE_UNAVAILABLE, "the sampler has stopped")
}

/// A profile of the next `seconds` (the `kind` asked for), built when they are over.
async fn profile(state: &Arc<HttpState>, query: &str, kind: ProfileKind) -> Response<Body> {
    let (seconds, filter) = match parse_profile_query(query) {
        Ok(parsed) => parsed,
        Err(message) => return text(StatusCode::BAD_REQUEST, message),
    };
    if state.requests.fetch_add(1, Relaxed) >= MAX_REQUESTS {
        state.requests.fetch_sub(1, Relaxed);
        return text(
            StatusCode::SERVICE_UNAVAILABLE,
            format!("{MAX_REQUESTS} profile requests are in progress already: try again later"),
        );
    }
    let _slot = RequestSlot(&state.requests);
    let (tx, rx) = oneshot::channel();
    if !send(state, Command::Subscribe(tx)) {
        return stopped();
    }
    let Ok(id) = rx.await else {
        return stopped();
    };
    let mut subscription = Subscription {
        id,
        commands: &state.commands,
        done: false,
    };
    tokio::time::sleep(Duration::from_secs(seconds)).await;
    let (tx, rx) = oneshot::channel();
    subscription.done = true;
    if !send(state, Command::Finish(id, tx)) {
        return stopped();
    }
    let Ok(raw) = rx.await else {
        return stopped();
    };
    let state2 = state.clone();
    let built = tokio::task::spawn_blocking(move || {
        let mut symbolizer = state2.symbolizer.lock().expect("symbolizer lock");
        let profile = build(&raw, kind, &filter, &mut symbolizer, &state2.build);
        parca_pprof::encode(&profile, true)
    })
    .await;
    match built {
        Ok(bytes) => {
            state.shared.metrics.profiles_served.fetch_add(1, Relaxed);
            Response::builder()
                .header(CONTENT_TYPE, "application/octet-stream")
                .header(CONTENT_DISPOSITION, "attachment; filename=\"profile\"")
                .body(Full::new(Bytes::from(bytes)))
                .expect("static response parts are valid")
        }
        Err(e) => text(
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("building the profile failed: {e}"),
        ),
    }
}

fn escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

fn index(state: &HttpState) -> Response<Body> {
    let last = state.last_window.lock().expect("last window lock").clone();
    let mut html = String::from(
        "<!doctype html><html><head><meta charset=\"utf-8\"><title>parca-agent</title>\
         <style>body{font-family:sans-serif}td,th{padding:2px 8px;text-align:left}\
         td.n{text-align:right}</style></head><body><h1>parca-agent</h1>",
    );
    write!(
        html,
        "<p>Sampling {} CPUs at {} Hz; windows of {} s. Endpoints: \
         <a href=\"/debug/pprof/profile?seconds=10\">/debug/pprof/profile?seconds=N</a> \
         (filters <code>pid=</code>, <code>comm=</code>), <a href=\"/metrics\">/metrics</a>, \
         <a href=\"/healthy\">/healthy</a>.</p>",
        state.n_cpus,
        state.frequency_hz,
        state.window_length.as_secs_f64()
    )
    .ok();
    if state.shared.off_cpu_threshold > 0.0 {
        write!(
            html,
            "<p>Off-CPU time: each switch-out recorded with probability {}: \
             <a href=\"/debug/pprof/off_cpu?seconds=10\">/debug/pprof/off_cpu?seconds=N</a> \
             (same filters).</p>",
            state.shared.off_cpu_threshold
        )
        .ok();
    }
    match last {
        None => html.push_str("<p>No window has completed yet.</p>"),
        Some(window) => {
            let rows = window.per_process();
            let secs = window
                .end
                .duration_since(window.start)
                .unwrap_or_default()
                .as_secs_f64();
            write!(
                html,
                "<h2>Processes in the last window ({} samples over {secs:.1} s)</h2><table>\
                 <tr><th>pid</th><th>comm</th><th>executable</th><th>systemd_unit</th>\
                 <th>container_id</th><th>cgroup</th><th>samples</th></tr>",
                window.total()
            )
            .ok();
            for (p, n) in rows {
                let cell = |v: Option<&str>| escape(v.unwrap_or(""));
                write!(
                    html,
                    "<tr><td class=n><a href=\"/debug/pprof/profile?seconds=10&amp;pid={pid}\">{pid}</a></td>\
                     <td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td class=n>{n}</td></tr>",
                    escape(&p.comm),
                    cell(p.executable.as_deref()),
                    cell(p.systemd_unit.as_deref()),
                    cell(p.container_id.as_deref()),
                    cell(p.cgroup.as_deref()),
                    pid = p.pid,
                )
                .ok();
            }
            html.push_str("</table>");
        }
    }
    html.push_str("</body></html>\n");
    Response::builder()
        .header(CONTENT_TYPE, "text/html; charset=utf-8")
        .body(Full::new(Bytes::from(html)))
        .expect("static response parts are valid")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn profile_query() {
        assert_eq!(parse_profile_query("").unwrap(), (30, Filter::default()));
        let (s, f) = parse_profile_query("seconds=9&pid=42&comm=my%20app").unwrap();
        assert_eq!((s, f.pid, f.comm.as_deref()), (9, Some(42), Some("my app")));
        for bad in [
            "seconds=0",
            "seconds=x",
            "seconds=3601",
            "pid=-1",
            "pid=abc",
        ] {
            assert!(parse_profile_query(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn escapes_html() {
        assert_eq!(
            escape("<a href=\"x\">&"),
            "&lt;a href=&quot;x&quot;&gt;&amp;"
        );
    }
}
