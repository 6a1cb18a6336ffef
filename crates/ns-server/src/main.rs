//! `nextstat-server`: the engine as an HTTP/JSON service (docs/server.md). One endpoint per verb
//! taking the engine's call JSON, a model cache, background jobs, API keys, limits, Prometheus
//! metrics and an OpenAPI document. CPU work runs on a bounded pool of workers, GPU work through
//! a queue per device that merges compatible requests into one device batch; nothing is
//! serialised behind a global lock.

mod device_queue;
mod error;
mod metrics;
mod middleware;
mod openapi;
mod routes;
mod state;

use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use axum::Router;
use axum::extract::DefaultBodyLimit;
use axum::routing::{get, post};
use clap::Parser;

use state::{AppState, Limits};

/// nextstat-server: fits, limits, toys and rankings over HTTP.
#[derive(Parser, Debug)]
#[command(version, about)]
struct Args {
    /// Address to listen on. Without --api-key-file only loopback addresses are allowed.
    #[arg(long, default_value = "127.0.0.1")]
    host: IpAddr,
    #[arg(long, default_value_t = 8750)]
    port: u16,
    /// API keys, one a line (blank lines and lines starting with # ignored); clients send
    /// `Authorization: Bearer KEY`.
    #[arg(long)]
    api_key_file: Option<PathBuf>,
    /// Computations at once (default: the number of CPU threads).
    #[arg(long)]
    workers: Option<usize>,
    /// Requests that may wait for a worker before new ones get 503.
    #[arg(long, default_value_t = 64)]
    queue: usize,
    /// Largest request body, MiB.
    #[arg(long, default_value_t = 64)]
    max_body_mb: usize,
    /// Memory the model cache may hold, MiB (estimated).
    #[arg(long, default_value_t = 2048)]
    cache_mb: usize,
    /// Seconds one request or job may compute before it is stopped.
    #[arg(long, default_value_t = 600.0)]
    timeout: f64,
    /// The most toys one request may ask for.
    #[arg(long, default_value_t = 100_000)]
    max_toys: usize,
    /// Seconds a finished job's result is kept.
    #[arg(long, default_value_t = 3600.0)]
    job_ttl: f64,
    /// Requests per second per API key (0: unlimited).
    #[arg(long, default_value_t = 0.0)]
    rate_limit: f64,
    /// Batches one GPU runs at once: 1 gathers the most compatible requests into each batch;
    /// 2 overlaps one batch's host work with another's device work (requests of many models).
    #[arg(long, default_value_t = 1)]
    gpu_runners: usize,
    /// Serve HTTPS with this certificate chain (PEM; with --tls-key).
    #[arg(long, requires = "tls_key")]
    tls_cert: Option<PathBuf>,
    /// The certificate's private key (PEM).
    #[arg(long, requires = "tls_cert")]
    tls_key: Option<PathBuf>,
}

fn read_keys(path: &PathBuf) -> Result<Vec<String>, String> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| format!("--api-key-file {}: {e}", path.display()))?;
    let keys: Vec<String> = text
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .map(String::from)
        .collect();
    if keys.is_empty() {
        return Err(format!("--api-key-file {} holds no key", path.display()));
    }
    Ok(keys)
}

/// The longest --timeout and --job-ttl: thirty days.
const MAX_SECONDS: f64 = 30.0 * 86_400.0;
/// The largest --max-body-mb and --cache-mb: 1 TiB.
const MAX_MIB: usize = 1 << 20;
/// The most --gpu-runners.
const MAX_GPU_RUNNERS: usize = 64;

fn seconds(what: &str, v: f64) -> Result<Duration, String> {
    if !(v > 0.0 && v <= MAX_SECONDS) {
        return Err(format!(
            "{what} must be a number of seconds above 0 and at most {MAX_SECONDS} (30 days), not {v:?}"
        ));
    }
    Ok(Duration::from_secs_f64(v))
}

/// A size in MiB as bytes, within 1 MiB and [`MAX_MIB`].
fn mebibytes(what: &str, mib: usize) -> Result<usize, String> {
    if !(1..=MAX_MIB).contains(&mib) {
        return Err(format!(
            "{what} must be between 1 and {MAX_MIB} (MiB), not {mib}"
        ));
    }
    Ok(mib << 20)
}

pub fn app(state: Arc<AppState>, max_body: usize) -> Router {
    Router::new()
        .route("/v1/health", get(routes::health))
        .route("/v1/devices", get(routes::devices))
        .route("/v1/openapi.json", get(openapi::document))
        .route("/metrics", get(metrics::metrics))
        .route("/v1/models", post(routes::upload_model))
        .route(
            "/v1/models/{id}",
            get(routes::get_model).delete(routes::delete_model),
        )
        .route("/v1/jobs", post(routes::submit_job))
        .route(
            "/v1/jobs/{id}",
            get(routes::get_job).delete(routes::cancel_job),
        )
        .route("/v1/batch", post(routes::batch))
        .route("/v1/{verb}", post(routes::verb))
        .fallback(middleware::not_found)
        .method_not_allowed_fallback(middleware::method_not_allowed)
        .layer(axum::middleware::from_fn_with_state(
            state.clone(),
            middleware::guard,
        ))
        .layer(DefaultBodyLimit::max(max_body))
        .with_state(state)
}

async fn run(args: Args) -> Result<(), String> {
    let keys = match &args.api_key_file {
        Some(p) => read_keys(p)?,
        None => Vec::new(),
    };
    if keys.is_empty() && !args.host.is_loopback() {
        return Err(format!(
            "--host {} is not a loopback address: give --api-key-file to serve beyond this machine",
            args.host
        ));
    }
    if !(args.rate_limit >= 0.0 && args.rate_limit.is_finite()) {
        return Err(format!(
            "--rate-limit must be a non-negative number, not {:?}",
            args.rate_limit
        ));
    }
    if args.rate_limit > 0.0 && keys.is_empty() {
        return Err(
            "--rate-limit limits the requests of each API key: give --api-key-file too".into(),
        );
    }
    if !(1..=MAX_GPU_RUNNERS).contains(&args.gpu_runners) {
        return Err(format!(
            "--gpu-runners must be between 1 and {MAX_GPU_RUNNERS}, not {}",
            args.gpu_runners
        ));
    }
    let max_body = mebibytes("--max-body-mb", args.max_body_mb)?;
    let limits = Limits {
        workers: args
            .workers
            .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()))
            .max(1),
        queue: args.queue,
        cache_bytes: mebibytes("--cache-mb", args.cache_mb)?,
        timeout: seconds("--timeout", args.timeout)?,
        max_toys: args.max_toys,
        job_ttl: seconds("--job-ttl", args.job_ttl)?,
        rate_per_key: args.rate_limit,
        gpu_runners: args.gpu_runners,
    };
    let state = Arc::new(AppState::new(limits, keys)?);
    let tls = match (&args.tls_cert, &args.tls_key) {
        (Some(cert), Some(key)) => Some(
            axum_server::tls_rustls::RustlsConfig::from_pem_file(cert, key)
                .await
                .map_err(|e| {
                    format!(
                        "--tls-cert {} / --tls-key {}: {e}",
                        cert.display(),
                        key.display()
                    )
                })?,
        ),
        _ => None,
    };
    let addr = SocketAddr::new(args.host, args.port);
    let listener =
        std::net::TcpListener::bind(addr).map_err(|e| format!("cannot listen on {addr}: {e}"))?;
    let bound = listener.local_addr().map_err(|e| e.to_string())?;
    listener.set_nonblocking(true).map_err(|e| e.to_string())?;
    // One line scripts can wait for (the port is the bound one when --port 0).
    let scheme = if tls.is_some() { "https" } else { "http" };
    println!("nextstat-server listening on {scheme}://{bound}");
    let stopping = state.stopping.clone();
    let handle = axum_server::Handle::new();
    let on_signal = handle.clone();
    let shutdown = async move {
        let ctrl_c = tokio::signal::ctrl_c();
        #[cfg(unix)]
        let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
            .expect("a SIGTERM handler");
        #[cfg(unix)]
        tokio::select! { _ = ctrl_c => {}, _ = term.recv() => {} }
        #[cfg(not(unix))]
        let _ = ctrl_c.await;
        eprintln!("nextstat-server: shutting down (running work is stopped)");
        stopping.store(true, Ordering::SeqCst);
        on_signal.graceful_shutdown(Some(Duration::from_secs(30)));
    };
    tokio::spawn(shutdown);
    let service = app(state.clone(), max_body).into_make_service();
    let served = match tls {
        Some(config) => {
            axum_server::from_tcp_rustls(listener, config)
                .map_err(|e| e.to_string())?
                .handle(handle)
                .serve(service)
                .await
        }
        None => {
            axum_server::from_tcp(listener)
                .map_err(|e| e.to_string())?
                .handle(handle)
                .serve(service)
                .await
        }
    };
    // Running computations were told to stop (their watchers see `stopping`); wait for them
    // while the runtime is alive, so that none is left running when the process ends.
    while state.running.load(Ordering::SeqCst) > 0 {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    served.map_err(|e| e.to_string())
}

fn main() {
    let args = Args::parse();
    ns_core::settings::install(ns_core::settings::Settings::from_environment());
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => {
            eprintln!("error: cannot start the async runtime: {e}");
            std::process::exit(1);
        }
    };
    if let Err(e) = runtime.block_on(run(args)) {
        eprintln!("error: {e}");
        std::process::exit(2);
    }
}
