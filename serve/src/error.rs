//! Errors as OpenAI sends them: an HTTP status and `{"error":{"message":…,"type":…}}`, so
//! clients written for OpenAI show the message instead of failing to parse the body.

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde_json::json;

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ApiError {
    pub status: StatusCode,
    pub message: String,
    /// OpenAI's error type: invalid_request_error, not_found_error, server_error, ….
    pub kind: &'static str,
    /// OpenAI's machine-readable code where it has one (model_not_found,
    /// context_length_exceeded); null otherwise.
    pub code: Option<&'static str>,
}

impl ApiError {
    /// A request the server cannot run as given (400).
    pub fn bad_request(message: impl Into<String>) -> ApiError {
        ApiError {
            status: StatusCode::BAD_REQUEST,
            message: message.into(),
            kind: "invalid_request_error",
            code: None,
        }
    }

    pub fn with_code(mut self, code: &'static str) -> ApiError {
        self.code = Some(code);
        self
    }

    pub fn not_found(message: impl Into<String>) -> ApiError {
        ApiError {
            status: StatusCode::NOT_FOUND,
            message: message.into(),
            kind: "not_found_error",
            code: None,
        }
    }

    /// The queue is full (503): the client may retry later.
    pub fn busy(queue: usize) -> ApiError {
        ApiError {
            status: StatusCode::SERVICE_UNAVAILABLE,
            message: format!(
                "the server is busy: {queue} request(s) are already waiting; retry later"
            ),
            kind: "server_busy",
            code: None,
        }
    }

    /// No or the wrong API key (401).
    pub fn unauthorized() -> ApiError {
        ApiError {
            status: StatusCode::UNAUTHORIZED,
            message:
                "invalid API key: send `Authorization: Bearer KEY` with the server's --api-key"
                    .into(),
            kind: "authentication_error",
            code: Some("invalid_api_key"),
        }
    }

    /// A body over the server's limit (413), refused before it is parsed.
    pub fn too_large(limit: usize) -> ApiError {
        ApiError {
            status: StatusCode::PAYLOAD_TOO_LARGE,
            message: format!(
                "the request body is larger than the server's limit of {limit} bytes \
                 (--max-body-mib)"
            ),
            kind: "invalid_request_error",
            code: None,
        }
    }

    /// The model failed while running (a device error): not the client's fault.
    pub fn internal(message: impl Into<String>) -> ApiError {
        ApiError {
            status: StatusCode::INTERNAL_SERVER_ERROR,
            message: message.into(),
            kind: "server_error",
            code: None,
        }
    }

    pub fn body(&self) -> serde_json::Value {
        json!({"error": {"message": self.message, "type": self.kind, "code": self.code}})
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let mut r = (self.status, axum::Json(self.body())).into_response();
        if self.status == StatusCode::SERVICE_UNAVAILABLE {
            // One request's time is the wait a client should try: a second is a fair guess
            // for the short answers agents ask for.
            r.headers_mut().insert(
                axum::http::header::RETRY_AFTER,
                axum::http::HeaderValue::from_static("1"),
            );
        }
        if self.status == StatusCode::UNAUTHORIZED {
            r.headers_mut().insert(
                axum::http::header::WWW_AUTHENTICATE,
                axum::http::HeaderValue::from_static("Bearer"),
            );
        }
        r
    }
}
