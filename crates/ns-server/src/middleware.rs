//! Around every request: API keys (constant-time comparison), per-key rate limits, and the
//! request counters and latencies of `/metrics`.

use std::sync::Arc;
use std::time::Instant;

use axum::extract::{Request, State};
use axum::http::{StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use subtle::ConstantTimeEq;

use crate::error::ApiError;
use crate::state::AppState;

/// The key's index among the configured keys, comparing every key in constant time.
fn key_index(keys: &[String], given: &str) -> Option<usize> {
    let mut found = None;
    for (i, k) in keys.iter().enumerate() {
        if bool::from(k.as_bytes().ct_eq(given.as_bytes())) {
            found = Some(i);
        }
    }
    found
}

/// Token bucket per key: `rate` tokens a second, bursts of up to `rate` (at least one).
fn admit(state: &AppState, key: usize) -> Result<(), ApiError> {
    let rate = state.limits.rate_per_key;
    if rate <= 0.0 {
        return Ok(());
    }
    let mut buckets = state.buckets.lock().unwrap_or_else(|p| p.into_inner());
    let now = Instant::now();
    let burst = rate.max(1.0);
    let (tokens, last) = buckets.entry(key).or_insert((burst, now));
    *tokens = (*tokens + now.duration_since(*last).as_secs_f64() * rate).min(burst);
    *last = now;
    if *tokens >= 1.0 {
        *tokens -= 1.0;
        Ok(())
    } else {
        let wait = ((1.0 - *tokens) / rate).ceil().max(1.0) as u64;
        Err(ApiError {
            retry_after: Some(wait),
            ..ApiError::new(
                StatusCode::TOO_MANY_REQUESTS,
                "rate_limited",
                format!("more than {rate} requests a second with this key"),
            )
        })
    }
}

/// The route a request is counted under (ids replaced by `{id}`; anything unknown is
/// "other", so that stray paths cannot grow the metrics).
fn route_of(path: &str) -> String {
    let parts: Vec<&str> = path.split('/').collect();
    match parts.as_slice() {
        ["", "v1", "models" | "jobs", _] => format!("/v1/{}/{{id}}", parts[2]),
        [
            "",
            "v1",
            "health" | "devices" | "openapi.json" | "models" | "jobs" | "batch",
        ]
        | ["", "metrics"] => path.to_string(),
        ["", "v1", verb] if ns_api::verbs::routed(verb).is_some() => path.to_string(),
        _ => "other".into(),
    }
}

pub async fn guard(State(state): State<Arc<AppState>>, request: Request, next: Next) -> Response {
    let start = Instant::now();
    let route = route_of(request.uri().path());
    let open = matches!(route.as_str(), "/v1/health" | "/metrics");
    let response = if state.keys.is_empty() || open {
        next.run(request).await
    } else {
        let given = request
            .headers()
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "));
        match given.and_then(|g| key_index(&state.keys, g)) {
            None => ApiError::new(
                StatusCode::UNAUTHORIZED,
                "unauthorized",
                "send a valid API key as 'Authorization: Bearer KEY'",
            )
            .into_response(),
            Some(k) => match admit(&state, k) {
                Ok(()) => next.run(request).await,
                Err(e) => e.into_response(),
            },
        }
    };
    state.metrics.observe(
        &route,
        response.status().as_u16(),
        start.elapsed().as_secs_f64(),
    );
    response
}

pub async fn not_found(request: Request) -> ApiError {
    ApiError::not_found(format!(
        "no endpoint {} {} (GET /v1/openapi.json lists them)",
        request.method(),
        request.uri().path()
    ))
}

/// A route that exists, asked with a method it does not take: the JSON error body of every
/// other error (axum's own 405 has none).
pub async fn method_not_allowed(request: Request) -> ApiError {
    ApiError::new(
        axum::http::StatusCode::METHOD_NOT_ALLOWED,
        "method_not_allowed",
        format!(
            "{} does not take {} (GET /v1/openapi.json lists its methods)",
            request.uri().path(),
            request.method()
        ),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_match_exactly() {
        let keys = vec!["alpha".to_string(), "beta".to_string()];
        assert_eq!(key_index(&keys, "beta"), Some(1));
        assert_eq!(key_index(&keys, "bet"), None);
        assert_eq!(key_index(&keys, "betaa"), None);
        assert_eq!(key_index(&keys, ""), None);
    }

    #[test]
    fn routes_are_counted_under_known_names_only() {
        assert_eq!(route_of("/v1/models/abc123"), "/v1/models/{id}");
        assert_eq!(route_of("/v1/jobs/job-7"), "/v1/jobs/{id}");
        assert_eq!(route_of("/v1/hypotest-toys"), "/v1/hypotest-toys");
        assert_eq!(route_of("/v1/teleport"), "other");
        assert_eq!(route_of("/wp-admin/x/y"), "other");
    }
}
