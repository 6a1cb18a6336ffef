//! `/metrics`: the server's counters, gauges and latency histograms in Prometheus's text
//! exposition format (version 0.0.4).

use std::sync::Arc;
use std::sync::atomic::Ordering;

use axum::extract::State;
use axum::response::IntoResponse;

use crate::state::AppState;

/// Prometheus text exposition.
pub async fn metrics(State(state): State<Arc<AppState>>) -> impl IntoResponse {
    use std::fmt::Write;
    let mut out = String::new();
    let m = &state.metrics;
    let _ = writeln!(
        out,
        "# HELP nextstat_requests_total Requests answered, by route and status.\n# TYPE nextstat_requests_total counter"
    );
    let all = m.requests.lock().unwrap_or_else(|p| p.into_inner()).clone();
    let mut keys: Vec<_> = all.keys().cloned().collect();
    keys.sort();
    for k in &keys {
        let _ = writeln!(
            out,
            "nextstat_requests_total{{route=\"{}\",status=\"{}\"}} {}",
            k.0, k.1, all[k].count
        );
    }
    let _ = writeln!(
        out,
        "# HELP nextstat_request_seconds Request latency.\n# TYPE nextstat_request_seconds histogram"
    );
    for k in &keys {
        let s = &all[k];
        for (b, le) in s.buckets.iter().zip(crate::state::BUCKETS) {
            let _ = writeln!(
                out,
                "nextstat_request_seconds_bucket{{route=\"{}\",status=\"{}\",le=\"{le}\"}} {b}",
                k.0, k.1
            );
        }
        let _ = writeln!(
            out,
            "nextstat_request_seconds_bucket{{route=\"{}\",status=\"{}\",le=\"+Inf\"}} {}",
            k.0, k.1, s.count
        );
        let _ = writeln!(
            out,
            "nextstat_request_seconds_sum{{route=\"{}\",status=\"{}\"}} {}",
            k.0, k.1, s.sum
        );
        let _ = writeln!(
            out,
            "nextstat_request_seconds_count{{route=\"{}\",status=\"{}\"}} {}",
            k.0, k.1, s.count
        );
    }
    let busy = |c: &std::sync::Mutex<f64>| *c.lock().unwrap_or_else(|p| p.into_inner());
    let models = state.models.lock().unwrap_or_else(|p| p.into_inner()).len();
    for (kind, name, help, value) in [
        (
            "gauge",
            "nextstat_queue_depth",
            "Requests waiting for a worker.",
            state.waiting.load(Ordering::Relaxed) as f64,
        ),
        (
            "gauge",
            "nextstat_device_queue_depth",
            "Requests waiting for a GPU device.",
            state.device_queue_depth() as f64,
        ),
        (
            "counter",
            "nextstat_device_batches_total",
            "Batches run on GPU devices.",
            m.device_batches.load(Ordering::Relaxed) as f64,
        ),
        (
            "counter",
            "nextstat_device_merged_calls_total",
            "Requests that ran in one device batch with others.",
            m.merged_calls.load(Ordering::Relaxed) as f64,
        ),
        (
            "gauge",
            "nextstat_running",
            "Computations running.",
            state.running.load(Ordering::Relaxed) as f64,
        ),
        (
            "gauge",
            "nextstat_models_cached",
            "Models in the cache.",
            models as f64,
        ),
        (
            "counter",
            "nextstat_cache_hits_total",
            "Model lookups answered from the cache.",
            m.cache_hits.load(Ordering::Relaxed) as f64,
        ),
        (
            "counter",
            "nextstat_cache_misses_total",
            "Models loaded.",
            m.cache_misses.load(Ordering::Relaxed) as f64,
        ),
        (
            "counter",
            "nextstat_cpu_busy_seconds_total",
            "Seconds of CPU-device computation.",
            busy(&m.busy_seconds_cpu),
        ),
        (
            "counter",
            "nextstat_gpu_busy_seconds_total",
            "Seconds of GPU-device computation.",
            busy(&m.busy_seconds_gpu),
        ),
    ] {
        let _ = writeln!(
            out,
            "# HELP {name} {help}\n# TYPE {name} {kind}\n{name} {value}"
        );
    }
    (
        [(
            axum::http::header::CONTENT_TYPE,
            "text/plain; version=0.0.4",
        )],
        out,
    )
}
