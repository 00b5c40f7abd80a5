//! `parca` (no subcommand): the server. Flags and wiring only: configuration, store, scraping
//! and the HTTP API are libraries; this file connects them and handles signals.

mod control;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, bail};
use parca_api::{Api, Control};
use prometheus_client::registry::Registry;

use control::{ServerControl, apply_span_labels};

/// Flags of the server, with Parca's names.
#[derive(Debug, clap::Args)]
pub struct ServerArgs {
    /// The configuration file (Parca's parca.yaml schema).
    #[arg(long, default_value = "parca.yaml")]
    config_path: PathBuf,
    /// Address to listen on for the HTTP API and the UI; `:7070` means every interface.
    #[arg(long, default_value = ":7070")]
    http_address: String,
    /// Directory of the profile store.
    #[arg(long, default_value = "./data")]
    storage_path: PathBuf,
    /// How long profiles are kept, e.g. 15d.
    #[arg(long, default_value = "15d", value_parser = parse_duration)]
    storage_retention_time: Duration,
    /// Most bytes the store may use on disk (0: no limit), e.g. 10GB or 512MiB.
    #[arg(long, default_value = "0", value_parser = parse_size)]
    storage_retention_size: u64,
    /// How much time one block of the store covers.
    #[arg(long, default_value = "2h", value_parser = parse_duration)]
    storage_block_duration: Duration,
    /// How far before its series' newest profile a profile may still go into the head, e.g. 2h:
    /// within it, profiles of a series arrive in any order. A push older than that (or than the
    /// time already cut into blocks) is stored as a block of its own; a scrape is refused.
    #[arg(long, default_value = "2h", value_parser = parse_duration)]
    storage_out_of_order_window: Duration,
    /// Whether opening the store steps over damage in the middle of its write-ahead log, keeping
    /// every intact record and setting the damaged segments aside in `quarantine/` (true), or
    /// refuses to start (false).
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    storage_wal_repair: bool,
    /// Prometheus' web configuration file (exporter-toolkit format): TLS, client certificates,
    /// basic auth users with bcrypt hashes, rate limit, response headers. It and the files it
    /// names are reread when they change. See documentation/security.md.
    #[arg(long)]
    web_config_file: Option<PathBuf>,
    /// A file of bearer tokens (one per line) that machine clients may send as
    /// `Authorization: Bearer …` instead of a user and password; reread when it changes.
    #[arg(long)]
    web_bearer_token_file: Option<PathBuf>,
    /// Serve `POST /-/reload` and `POST /-/quit` (403 without it), as Prometheus'
    /// --web.enable-lifecycle. SIGHUP reloads either way.
    #[arg(long)]
    web_enable_lifecycle: bool,
    /// Serve the push endpoints (`/api/v1/write`, `/ingest`, Pyroscope's Push); false makes a
    /// query-only server with no write path.
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    web_enable_push: bool,
    /// Serve the server's own profiles at /debug/pprof.
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    web_enable_pprof: bool,
    /// Requests answered at once; more get 429 (health and readiness probes are not counted).
    #[arg(long, default_value_t = 512)]
    web_max_concurrent_requests: usize,
    /// Largest request body, e.g. 64MiB; larger get 413.
    #[arg(long, default_value = "64MiB", value_parser = parse_size)]
    web_max_request_body_size: u64,
    /// Most series one push may write (its samples' labels split a profile into series).
    #[arg(long, default_value_t = 10_000)]
    ingest_max_series_per_push: usize,
    /// Most labels a pushed series may have, `__name__` included.
    #[arg(long, default_value_t = 30)]
    ingest_max_labels_per_series: usize,
    /// Longest label name of a pushed series, in bytes.
    #[arg(long, default_value_t = 1024)]
    ingest_max_label_name_length: usize,
    /// Longest label value of a pushed series, in bytes.
    #[arg(long, default_value_t = 2048)]
    ingest_max_label_value_length: usize,
    /// Queries evaluated at once; more get 429.
    #[arg(long, default_value_t = 20)]
    query_max_concurrency: usize,
    /// Most series one query may read (422 beyond); 0, the default, for no limit: a query's
    /// work is bounded by --query-max-samples and --query-max-points.
    #[arg(long, default_value_t = parca_query::Limits::default().max_series)]
    query_max_series: usize,
    /// Most values (series × steps) one selector of a range query may produce (422 beyond):
    /// the bound on a range query's memory, about 32 bytes a value.
    #[arg(long, default_value_t = parca_query::Limits::default().max_points)]
    query_max_points: usize,
    /// Most (stack, value) pairs one query may merge (422 beyond): the bound on its work.
    #[arg(long, default_value_t = parca_query::Limits::default().max_samples)]
    query_max_samples: usize,
    /// Most steps of a range query (422 beyond).
    #[arg(long, default_value_t = parca_query::Limits::default().max_steps)]
    query_max_steps: i64,
    /// How long a query may run before it is answered 422, e.g. 2m.
    #[arg(long, default_value = "2m", value_parser = parse_duration)]
    query_timeout: Duration,
    /// How far back a series-valued instant query (and a selector without a range in
    /// /api/v1/query) looks for profiles: the window a series' value is computed over, as
    /// Prometheus' --query.lookback-delta. Delta types sum the profiles in it; snapshot types
    /// take the latest.
    #[arg(long, default_value = "5m", value_parser = parse_lookback)]
    query_lookback_delta: Duration,
    /// The URL this server is reached at, e.g. `https://parca.example.com/`: alert templates'
    /// `$externalURL` and the links of alerts. Default: `http://HOSTNAME:PORT/`.
    #[arg(long)]
    web_external_url: Option<String>,
    /// The link from a span's profile to its trace in a tracing UI, e.g.
    /// `http://jaeger:16686/trace/{trace_id}` or Grafana's Explore URL: the web UI shows it
    /// where a profile or an exemplar carries a `trace_id` (`{span_id}` may be used too).
    #[arg(long, value_parser = parca_api::parse_trace_url_template)]
    web_trace_url_template: Option<String>,
    /// How long before a firing alert is sent to Alertmanager again, as Prometheus'
    /// --rules.alert.resend-delay.
    #[arg(long, default_value = "1m", value_parser = parse_duration)]
    rules_alert_resend_delay: Duration,
    /// After a restart, alerts last seen active longer ago than this start over instead of
    /// keeping their `for` clock (kept in `alerts_for_state.json` in the store's directory),
    /// as Prometheus' --rules.alert.for-outage-tolerance.
    #[arg(long, default_value = "1h", value_parser = parse_duration)]
    rules_alert_for_outage_tolerance: Duration,
    /// After a restart, a restored alert fires no sooner than this (unless it was firing), and
    /// rules whose `for` is shorter are not restored, as Prometheus'
    /// --rules.alert.for-grace-period.
    #[arg(long, default_value = "10m", value_parser = parse_duration)]
    rules_alert_for_grace_period: Duration,
    /// Origins whose pages may call the API from a browser, comma-separated (`*`: any), as
    /// Parca's --cors-allowed-origins.
    #[arg(long, value_delimiter = ',')]
    cors_allowed_origins: Vec<String>,
    /// Least severe log level shown: error, warn, info or debug.
    #[arg(long, default_value = "info")]
    log_level: tracing::Level,
    /// `all`: scrape, take pushes, store, ship and serve. `query`: a stateless reader of the
    /// object store (`object_storage`): it serves every block of the bucket and nothing else:
    /// no scrapes, no pushes, no shipping; `--storage-path` is only its cache.
    #[arg(long, default_value = "all", value_parser = ["all", "query"])]
    mode: String,
    /// Shards to read beside the object store, comma-separated base URLs, e.g.
    /// `http://shard-1:7070`: each is asked for its own profiles after what it has shipped.
    /// parca.yaml's `query_stores` names shards too, with TLS and credentials.
    #[arg(long, value_delimiter = ',')]
    query_store: Vec<String>,
    /// A file of shards' base URLs, one per line (`#` starts a comment), read again every
    /// 15 s: shards added or removed without a restart.
    #[arg(long)]
    query_store_file: Vec<PathBuf>,
    /// How long one read of a shard may take before the answer goes on without it (marked
    /// partial).
    #[arg(long, default_value = "1m", value_parser = parse_duration)]
    query_store_timeout: Duration,
    /// Run the object store's compactor and retention in this server. Exactly one process per
    /// bucket may: two would merge the same blocks twice.
    #[arg(long)]
    objstore_compactor: bool,
    /// How often the compactor passes over the bucket.
    #[arg(long, default_value = "5m", value_parser = parse_duration)]
    objstore_compaction_interval: Duration,
    /// Bytes of the object store's block indexes and symbols kept on local disk (in
    /// `--storage-path`), e.g. 10GiB; the least recently read blocks are let go past it and
    /// fetched again when a query needs them. 0: no bound.
    #[arg(long, default_value = "10GiB", value_parser = parse_size)]
    objstore_cache_size: u64,
    #[command(flatten)]
    objstore: ObjstoreArgs,
    /// Log line format.
    #[arg(long, default_value = "logfmt", value_parser = ["logfmt", "json"])]
    log_format: String,
    /// Every flag above as given or defaulted, by long name, for `/api/v1/status/flags`
    /// (filled from the command line by [`ServerArgs::with_flag_values`]).
    #[arg(skip)]
    flag_values: std::collections::BTreeMap<String, String>,
}

impl ServerArgs {
    /// These flags with `matches`' values of them kept as text, as Prometheus serves its own:
    /// each long name (`web-trace-url-template`) to its value, several joined by commas, an
    /// unset one empty.
    pub fn with_flag_values(mut self, command: &clap::Command, matches: &clap::ArgMatches) -> Self {
        for arg in command.get_arguments() {
            use clap::ArgAction::{Help, HelpLong, HelpShort, Version};
            if matches!(arg.get_action(), Help | HelpLong | HelpShort | Version) {
                continue;
            }
            let (Some(long), Ok(raw)) =
                (arg.get_long(), matches.try_get_raw(arg.get_id().as_str()))
            else {
                continue;
            };
            // An unset optional flag is listed empty, as Prometheus lists it.
            let values: Vec<_> = raw
                .into_iter()
                .flatten()
                .map(|v| v.to_string_lossy().into_owned())
                .collect();
            self.flag_values.insert(long.to_owned(), values.join(","));
        }
        self
    }
}

/// How the object store (`object_storage`) is kept: its retention and compaction, applied by
/// exactly one process per bucket (the server with `--objstore-compactor`, or `parca compact`).
#[derive(Debug, Clone, clap::Args)]
pub struct ObjstoreArgs {
    /// How long the object store keeps blocks (0: forever), e.g. 365d.
    #[arg(long, default_value = "0s", value_parser = parse_duration)]
    pub objstore_retention_time: Duration,
    /// How long a block replaced by compaction or past retention stays readable before the
    /// compactor deletes it (queries that opened it finish).
    #[arg(long, default_value = "30m", value_parser = parse_duration)]
    pub objstore_delete_delay: Duration,
    /// The windows of the object store's compaction levels, smallest first.
    #[arg(long, default_value = "1d,14d", value_delimiter = ',', value_parser = parse_duration)]
    pub objstore_compaction_ranges: Vec<Duration>,
}

impl ObjstoreArgs {
    /// The compactor's options.
    pub fn compactor_options(&self) -> parca_objstore::CompactorOptions {
        parca_objstore::CompactorOptions {
            retention: (!self.objstore_retention_time.is_zero())
                .then_some(self.objstore_retention_time),
            delete_delay: self.objstore_delete_delay,
            ranges: self.objstore_compaction_ranges.clone(),
        }
    }
}

/// A duration flag as Prometheus writes them (`15d`, `1h30m`, `0`).
pub(crate) fn parse_duration(text: &str) -> Result<Duration, parca_vocab::duration::DurationError> {
    parca_vocab::duration::parse(text)
}

/// A lookback: a duration of at least 1 ms (a zero window would hold no profile).
fn parse_lookback(text: &str) -> Result<Duration, String> {
    let lookback = parse_duration(text).map_err(|e| e.to_string())?;
    if lookback.is_zero() {
        return Err(format!(
            "`{text}` is no window: the lookback must be longer than zero, such as 5m"
        ));
    }
    Ok(lookback)
}

/// `10GB`, `512MiB`, `1024` (bytes).
fn parse_size(text: &str) -> Result<u64, String> {
    let digits = text.bytes().take_while(u8::is_ascii_digit).count();
    let (number, unit) = text.split_at(digits);
    let number: u64 = number
        .parse()
        .map_err(|_| format!("`{text}` is not a size such as 10GB, 512MiB or 1024"))?;
    let scale: u64 = match unit.trim() {
        "" | "B" => 1,
        "KB" => 1_000,
        "MB" => 1_000_000,
        "GB" => 1_000_000_000,
        "TB" => 1_000_000_000_000,
        "KiB" => 1 << 10,
        "MiB" => 1 << 20,
        "GiB" => 1 << 30,
        "TiB" => 1 << 40,
        other => {
            return Err(format!(
                "unknown size unit `{other}`: use B, KB, MB, GB, TB, KiB, MiB, GiB or TiB"
            ));
        }
    };
    number
        .checked_mul(scale)
        .ok_or_else(|| format!("size `{text}` is too large"))
}

/// `:7070` (every interface), `127.0.0.1:7070` or `[::1]:7070`.
fn listen_address(text: &str) -> anyhow::Result<SocketAddr> {
    let full = if text.starts_with(':') {
        format!("0.0.0.0{text}")
    } else {
        text.to_owned()
    };
    full.parse()
        .with_context(|| format!("--http-address `{text}` is not of the form host:port or :port"))
}

fn init_logging(args: &ServerArgs) {
    let builder = tracing_subscriber::fmt()
        .with_max_level(args.log_level)
        .with_writer(std::io::stderr);
    if args.log_format == "json" {
        builder.json().flatten_event(true).init();
    } else {
        builder
            .event_format(tracing_logfmt::EventsFormatter::default())
            .fmt_fields(tracing_logfmt::FieldsFormatter::default())
            .init();
    }
}

/// Runs the server until SIGTERM or SIGINT.
pub fn run(args: ServerArgs) -> anyhow::Result<()> {
    init_logging(&args);
    let address = listen_address(&args.http_address)?;
    // A bad file at start is fatal; on reload it only keeps the old configuration.
    let config = parca_config::load(&args.config_path).context("cannot load the configuration")?;
    apply_span_labels(&config);
    if args.storage_block_duration < Duration::from_secs(60) {
        bail!("--storage-block-duration must be at least 1m");
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .thread_name("parca")
        .build()
        .context("cannot start the async runtime")?;
    runtime.block_on(serve(args, address, config))
}

async fn serve(
    args: ServerArgs,
    address: SocketAddr,
    config: parca_config::Config,
) -> anyhow::Result<()> {
    let security = parca_webconfig::Security::load(
        args.web_config_file.as_deref(),
        args.web_bearer_token_file.as_deref(),
    )
    .context("cannot use the web configuration")?;
    let listener = tokio::net::TcpListener::bind(address)
        .await
        .with_context(|| format!("cannot listen on {address}"))?;
    let mut registry = Registry::default();
    let control = ServerControl::new(&args.config_path, config, &mut registry);
    let limits = query_limits(&args);
    let options = api_options(&args, &control, limits, security);
    let scrape_metrics = parca_scrape::ScrapeMetrics::register(&mut registry);
    let rule_metrics = parca_rules::RuleMetrics::register(&mut registry);
    let bucket = parca_objstore::shipping_bucket(&control.config(), &args.storage_path)
        .context("cannot set up object_storage")?;
    let query_mode = args.mode == "query";
    if args.objstore_compactor && bucket.is_none() {
        tracing::warn!(
            "--objstore-compactor has no bucket to compact: parca.yaml has no object_storage (or it names the store's own directory)"
        );
    }
    let shards = start_shards(&args, &control, bucket.is_some(), &mut registry).await?;
    let bucket_metrics = bucket.as_ref().map(|_| {
        (
            parca_objstore::ShipperMetrics::register(&mut registry),
            parca_objstore::ReaderMetrics::register(&mut registry),
        )
    });
    let (api_tls, api_auth) = (
        options.security.tls_enabled(),
        options.security.auth_required(),
    );
    let api = Arc::new(Api::new(options, control.clone(), registry));
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let mut http_stop = stop_rx.clone();
    let http = tokio::spawn(parca_api::serve(listener, Arc::clone(&api), async move {
        let _ = http_stop.wait_for(|stop| *stop).await;
    }));
    tracing::info!(%address, tls = api_tls, auth = api_auth, "listening");

    let db = open_store(&args, bucket.is_some()).await?;
    if let Some(shards) = shards {
        db.set_peers(Arc::clone(&shards) as Arc<dyn parca_tsdb::Peers>);
        let _ = control.shards.set(shards);
    }
    api.set_store(Arc::clone(&db));
    tracing::info!(path = %args.storage_path.display(), "store ready");
    let rules = start_rules(&args, &control, &db, limits, address, rule_metrics)?;
    api.set_rules(Arc::clone(&rules));
    let insights = start_insights(&args, &control, &db, limits).await?;
    api.set_insights(Arc::clone(&insights));
    if let (Some(bucket), Some((shipper_metrics, reader_metrics))) = (bucket, bucket_metrics) {
        start_object_store(
            &args,
            &control,
            &db,
            bucket,
            shipper_metrics,
            reader_metrics,
        )?;
    }
    let scrape = parca_scrape::Manager::new(db.clone(), Default::default(), scrape_metrics);
    if !query_mode {
        scrape.apply(&control.config());
        let _ = control.scrape.set(Arc::clone(&scrape));
    }

    wait_for_signals(&control).await?;
    tracing::info!("shutting down: stopping scrapes, then the HTTP server");
    scrape.stop().await;
    rules.stop();
    insights.stop();
    let _ = stop_tx.send(true);
    let _ = http.await;
    drop(api);
    tracing::info!("stopped");
    Ok(())
}

/// What one query may cost, from the `--query-*` flags.
fn query_limits(args: &ServerArgs) -> parca_query::Limits {
    parca_query::Limits {
        max_series: args.query_max_series,
        max_samples: args.query_max_samples,
        max_points: args.query_max_points,
        max_steps: args.query_max_steps,
        lookback_ms: i64::try_from(args.query_lookback_delta.as_millis()).unwrap_or(i64::MAX),
    }
}

/// The API's options, from the flags and the configuration in force.
fn api_options(
    args: &ServerArgs,
    control: &ServerControl,
    limits: parca_query::Limits,
    security: parca_webconfig::Security,
) -> parca_api::Options {
    parca_api::Options {
        build: parca_api::BuildInfo {
            version: env!("CARGO_PKG_VERSION").to_owned(),
            revision: option_env!("PARCA_REVISION")
                .unwrap_or("unknown")
                .to_owned(),
        },
        heap_profile: Some(parca_selfprof::heap_profile),
        security: Arc::new(security),
        lifecycle: args.web_enable_lifecycle,
        push: args.web_enable_push && args.mode != "query",
        self_pprof: args.web_enable_pprof,
        max_concurrent_requests: args.web_max_concurrent_requests.max(1),
        max_body_bytes: usize::try_from(args.web_max_request_body_size).unwrap_or(usize::MAX),
        push_limits: parca_api::PushLimits {
            max_series: args.ingest_max_series_per_push,
            max_labels: args.ingest_max_labels_per_series,
            max_name_bytes: args.ingest_max_label_name_length,
            max_value_bytes: args.ingest_max_label_value_length,
        },
        max_concurrent_queries: args.query_max_concurrency.max(1),
        query_timeout: args.query_timeout,
        limits,
        cors_allowed_origins: args.cors_allowed_origins.clone(),
        external_labels: control.config().global.external_labels.clone(),
        flags: args.flag_values.clone(),
        ..Default::default()
    }
}

/// The shards of `--query-store`, `--query-store-file` and `query_stores`, started, or none;
/// `--mode=query` refuses to start with neither shards nor a bucket to serve.
async fn start_shards(
    args: &ServerArgs,
    control: &ServerControl,
    has_bucket: bool,
    registry: &mut Registry,
) -> anyhow::Result<Option<Arc<parca_fanout::Shards>>> {
    let query_stores = control.config().query_stores.clone();
    let has_shards = !args.query_store.is_empty()
        || !args.query_store_file.is_empty()
        || !query_stores.is_empty();
    if args.mode == "query" && !has_bucket && !has_shards {
        anyhow::bail!(
            "--mode=query serves the blocks of object_storage and the shards of --query-store, and `{}` names no object_storage (or names the store's own directory) and there is no --query-store nor query_stores",
            args.config_path.display()
        );
    }
    for url in &args.query_store {
        if !(url.starts_with("http://") || url.starts_with("https://")) {
            anyhow::bail!(
                "--query-store `{url}` is not a URL: write it as http://host:port or https://host:port"
            );
        }
    }
    if !has_shards {
        return Ok(None);
    }
    let shards = parca_fanout::Shards::start(
        parca_fanout::Options {
            urls: args.query_store.clone(),
            files: args.query_store_file.clone(),
            reads_bucket: has_bucket,
            timeout: args.query_store_timeout,
            ..Default::default()
        },
        &query_stores,
        registry,
    )
    .await
    .map_err(anyhow::Error::msg)
    .context("cannot read the shards")?;
    tracing::info!(shards = ?shards.addresses(), "reading shards beside the object store");
    Ok(Some(shards))
}

/// The store in `--storage-path`, opened (its WAL replayed) off the async workers.
async fn open_store(args: &ServerArgs, ship_blocks: bool) -> anyhow::Result<Arc<parca_tsdb::Db>> {
    let storage_path = args.storage_path.clone();
    let storage_options = parca_tsdb::Options {
        block_duration_ms: args.storage_block_duration.as_millis() as i64,
        retention_ms: args.storage_retention_time.as_millis() as i64,
        retention_bytes: args.storage_retention_size,
        wal_repair: args.storage_wal_repair,
        out_of_order_window_ms: args.storage_out_of_order_window.as_millis() as i64,
        ship_blocks,
        ..Default::default()
    };
    let db =
        tokio::task::spawn_blocking(move || parca_tsdb::Db::open(&storage_path, storage_options))
            .await
            .context("store task failed")?
            .with_context(|| {
                format!("cannot open the store in `{}`", args.storage_path.display())
            })?;
    Ok(Arc::new(db))
}

/// The rule groups of the configuration in force, evaluating over `db`.
fn start_rules(
    args: &ServerArgs,
    control: &ServerControl,
    db: &Arc<parca_tsdb::Db>,
    limits: parca_query::Limits,
    address: SocketAddr,
    metrics: parca_rules::RuleMetrics,
) -> anyhow::Result<Arc<parca_rules::Manager>> {
    let rules = parca_rules::Manager::new(
        parca_query::Engine::new(Arc::clone(db), limits),
        parca_rules::Options {
            external_url: external_url(args.web_external_url.as_deref(), address),
            notifier: Some(parca_rules::Notifier::start()),
            remote_writer: Some(parca_rules::RemoteWriter::new()),
            metrics,
            resend_delay: args.rules_alert_resend_delay,
            state_dir: Some(args.storage_path.clone()),
            restore: parca_rules::RestoreOptions {
                outage_tolerance: args.rules_alert_for_outage_tolerance,
                grace_period: args.rules_alert_for_grace_period,
            },
        },
    );
    let config = control.config();
    rules
        .update(&config)
        .map_err(anyhow::Error::msg)
        .context("cannot evaluate the rules")?;
    if !config.rules.is_empty() {
        tracing::info!(
            groups = rules.groups().len(),
            rules = config.rules.iter().map(|(_, f)| f.n_rules()).sum::<usize>(),
            "evaluating rules"
        );
    }
    drop(config);
    let _ = control.rules.set(Arc::clone(&rules));
    Ok(rules)
}

/// The deploy insights of the configuration in force, their state kept under the store.
async fn start_insights(
    args: &ServerArgs,
    control: &ServerControl,
    db: &Arc<parca_tsdb::Db>,
    limits: parca_query::Limits,
) -> anyhow::Result<Arc<parca_rules::Insights>> {
    let (engine, path) = (
        parca_query::Engine::new(Arc::clone(db), limits),
        args.storage_path.clone(),
    );
    let insights = tokio::task::spawn_blocking(move || parca_rules::Insights::open(engine, &path))
        .await
        .context("insights task failed")?
        .map_err(anyhow::Error::msg)?;
    insights.update(&control.config().insights);
    let _ = control.insights.set(Arc::clone(&insights));
    Ok(insights)
}

/// The object store's loops: its blocks served beside the local ones (and compacted, with
/// `--objstore-compactor`), and, unless in query mode, the store's blocks shipped to it.
fn start_object_store(
    args: &ServerArgs,
    control: &ServerControl,
    db: &Arc<parca_tsdb::Db>,
    bucket: parca_objstore::Bucket,
    shipper_metrics: Arc<parca_objstore::ShipperMetrics>,
    reader_metrics: Arc<parca_objstore::ReaderMetrics>,
) -> anyhow::Result<()> {
    let reader = parca_objstore::BucketReader::new(
        bucket.clone(),
        parca_objstore::cache_dir(&args.storage_path),
        args.objstore_cache_size,
        reader_metrics,
    )
    .context("cannot start reading the object store")?;
    let compactor = args.objstore_compactor.then(|| parca_objstore::Compacting {
        bucket: bucket.clone(),
        scratch: parca_objstore::scratch_dir(&args.storage_path),
        options: args.objstore.compactor_options(),
        every: args.objstore_compaction_interval,
    });
    if compactor.is_some() {
        tracing::info!(
            bucket = bucket.description,
            "compacting the object store and applying its retention"
        );
    }
    tokio::spawn(parca_objstore::serve_bucket(
        reader,
        Arc::clone(db),
        compactor,
    ));
    if args.mode == "query" {
        tracing::info!(
            bucket = bucket.description,
            "query mode: serving the object store's blocks; no scrapes, pushes or shipping"
        );
        return Ok(());
    }
    let labels = control.config().global.external_labels.clone();
    let shipper = parca_objstore::Shipper::new(bucket, &args.storage_path, labels, shipper_metrics)
        .context("cannot start shipping blocks")?;
    tracing::info!(
        bucket = shipper.bucket().description,
        shipped_before = shipper.shipped().count(),
        "shipping blocks to the object store; local compaction is off"
    );
    tokio::spawn(parca_objstore::ship_blocks(shipper, Arc::clone(db)));
    Ok(())
}

/// The URL the server is reached at: `--web-external-url`, or Prometheus' default,
/// `http://HOSTNAME:PORT/`.
fn external_url(flag: Option<&str>, address: SocketAddr) -> String {
    if let Some(url) = flag {
        return url.to_owned();
    }
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_owned())
        .ok()
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "localhost".to_owned());
    format!("http://{host}:{}/", address.port())
}

/// Reloads on SIGHUP; returns on SIGTERM or SIGINT.
async fn wait_for_signals(control: &Arc<ServerControl>) -> anyhow::Result<()> {
    use tokio::signal::unix::{SignalKind, signal};
    let mut hangup = signal(SignalKind::hangup()).context("cannot watch SIGHUP")?;
    let mut terminate = signal(SignalKind::terminate()).context("cannot watch SIGTERM")?;
    let mut interrupt = signal(SignalKind::interrupt()).context("cannot watch SIGINT")?;
    loop {
        tokio::select! {
            _ = hangup.recv() => {
                let control = Arc::clone(control);
                match tokio::task::spawn_blocking(move || control.reload()).await {
                    Ok(Ok(())) => {}
                    Ok(Err(why)) => tracing::error!(error = %why, "configuration not reloaded; the old one stays in force"),
                    Err(e) => tracing::error!(error = %e, "reload task failed"),
                }
            }
            _ = control.quit.notified() => return Ok(()),
            _ = terminate.recv() => return Ok(()),
            _ = interrupt.recv() => return Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes() {
        assert_eq!(parse_size("0"), Ok(0));
        assert_eq!(parse_size("10GB"), Ok(10_000_000_000));
        assert_eq!(parse_size("512MiB"), Ok(512 << 20));
        assert!(
            parse_size("10XB")
                .unwrap_err()
                .contains("unknown size unit")
        );
    }

    #[test]
    fn listen_addresses() {
        assert_eq!(listen_address(":7070").unwrap().to_string(), "0.0.0.0:7070");
        assert_eq!(listen_address("[::1]:1").unwrap().to_string(), "[::1]:1");
        assert!(listen_address("localhost").is_err());
    }
}
