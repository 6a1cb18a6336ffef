//! Errors as JSON answers: `{"error": {"kind", "message"}}` with the status that says whose
//! fault it is (docs/server.md lists them).

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::json;

/// An error answer.
#[derive(Clone, Debug)]
pub struct ApiError {
    pub status: StatusCode,
    pub kind: &'static str,
    pub message: String,
    /// Seconds after which a retry may succeed (429, 503).
    pub retry_after: Option<u64>,
}

impl ApiError {
    pub fn new(status: StatusCode, kind: &'static str, message: impl Into<String>) -> Self {
        ApiError {
            status,
            kind,
            message: message.into(),
            retry_after: None,
        }
    }

    pub fn bad_request(message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, "invalid_request", message)
    }

    pub fn not_found(message: impl Into<String>) -> Self {
        Self::new(StatusCode::NOT_FOUND, "not_found", message)
    }

    pub fn busy(message: impl Into<String>, retry_after: u64) -> Self {
        ApiError {
            retry_after: Some(retry_after),
            ..Self::new(StatusCode::SERVICE_UNAVAILABLE, "busy", message)
        }
    }
}

/// The answer to work stopped by the timeout or at shutdown.
pub fn stopped(state: &crate::state::AppState) -> ApiError {
    if state.stopping.load(std::sync::atomic::Ordering::Relaxed) {
        return ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "shutdown",
            "stopped: the server is shutting down; send the request again once it is back",
        );
    }
    ApiError::new(
        StatusCode::GATEWAY_TIMEOUT,
        "timeout",
        format!(
            "stopped after {:.0} s (the server's --timeout)",
            state.limits.timeout.as_secs_f64()
        ),
    )
}

/// An engine error as an answer: an interrupt is the timeout's (or shutdown's) doing.
pub fn engine(e: ns_core::Error, state: &crate::state::AppState) -> ApiError {
    match e {
        ns_core::Error::Interrupted => stopped(state),
        other => other.into(),
    }
}

impl From<ns_core::Error> for ApiError {
    fn from(e: ns_core::Error) -> Self {
        use ns_core::Error as E;
        let (status, kind) = match &e {
            E::Json { .. } => (StatusCode::BAD_REQUEST, "invalid_json"),
            E::InvalidWorkspace(_) => (StatusCode::BAD_REQUEST, "invalid_workspace"),
            E::InvalidModel(_) => (StatusCode::BAD_REQUEST, "invalid_model"),
            E::InvalidInput(_) => (StatusCode::BAD_REQUEST, "invalid_input"),
            E::Patch(_) => (StatusCode::BAD_REQUEST, "patch"),
            E::Operation(_) => (StatusCode::BAD_REQUEST, "operation"),
            E::Device(_) => (StatusCode::BAD_REQUEST, "device"),
            E::Computation(_) => (StatusCode::UNPROCESSABLE_ENTITY, "computation"),
            E::Interrupted => (StatusCode::GATEWAY_TIMEOUT, "interrupted"),
            E::Io { .. } => (StatusCode::BAD_REQUEST, "io"),
        };
        ApiError::new(status, kind, e.to_string())
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let body = json!({"error": {"kind": self.kind, "message": self.message}});
        let mut response = (self.status, axum::Json(body)).into_response();
        if let Some(s) = self.retry_after
            && let Ok(v) = HeaderValue::from_str(&s.to_string())
        {
            response.headers_mut().insert(header::RETRY_AFTER, v);
        }
        response
    }
}
