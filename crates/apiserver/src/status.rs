//! API errors, rendered as Kubernetes `Status` objects with the right code and reason.

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

pub use lariat_api::admission::{Cause, json_type};

/// What a request failed with; every variant maps to one HTTP code and one `Status.reason`.
#[derive(Debug, Clone, thiserror::Error)]
pub enum ApiError {
    #[error("{message}")]
    BadRequest { message: String },
    #[error("Unauthorized")]
    Unauthorized,
    #[error("{message}")]
    Forbidden { message: String },
    #[error("{message}")]
    NotFound {
        message: String,
        target: Option<Target>,
    },
    #[error("{message}")]
    MethodNotAllowed { message: String },
    #[error("{message}")]
    NotAcceptable { message: String },
    #[error("{message}")]
    AlreadyExists { message: String, target: Target },
    #[error("{message}")]
    Conflict {
        message: String,
        target: Option<Target>,
        causes: Vec<Cause>,
    },
    #[error("resourceVersion {message}")]
    Gone { message: String },
    #[error("{message}")]
    TooLarge { message: String },
    #[error("{message}")]
    UnsupportedMediaType { message: String },
    #[error("{message}")]
    Invalid {
        message: String,
        target: Target,
        causes: Vec<Cause>,
    },
    #[error("{message}")]
    TooManyRequests {
        message: String,
        retry_after_seconds: u64,
    },
    #[error("{message}")]
    Internal { message: String },
    #[error("{message}")]
    Unavailable { message: String },
    /// A read or watch from a revision the store has not reached, as kube-apiserver answers
    /// it (504, `Timeout`, cause `ResourceVersionTooLarge`).
    #[error("Too large resource version: {requested}, current: {current}")]
    TooLargeResourceVersion { requested: i64, current: i64 },
}

/// The object a failure is about (`Status.details`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Target {
    pub group: String,
    pub kind: String,
    pub name: String,
}

impl ApiError {
    pub fn bad_request(message: impl Into<String>) -> ApiError {
        ApiError::BadRequest {
            message: message.into(),
        }
    }

    pub fn internal(message: impl Into<String>) -> ApiError {
        ApiError::Internal {
            message: message.into(),
        }
    }

    /// `deployments.apps "web" not found`, as kube-apiserver words it.
    pub fn not_found(resource: &str, group: &str, name: &str) -> ApiError {
        ApiError::NotFound {
            message: format!("{} \"{name}\" not found", qualified(resource, group)),
            target: Some(Target {
                group: group.into(),
                kind: resource.into(),
                name: name.into(),
            }),
        }
    }

    pub fn already_exists(resource: &str, group: &str, name: &str) -> ApiError {
        ApiError::AlreadyExists {
            message: format!("{} \"{name}\" already exists", qualified(resource, group)),
            target: Target {
                group: group.into(),
                kind: resource.into(),
                name: name.into(),
            },
        }
    }

    pub fn conflict(resource: &str, group: &str, name: &str) -> ApiError {
        ApiError::Conflict {
            message: format!(
                "Operation cannot be fulfilled on {} \"{name}\": the object has been modified; please apply your changes to the latest version and try again",
                qualified(resource, group)
            ),
            target: Some(Target {
                group: group.into(),
                kind: resource.into(),
                name: name.into(),
            }),
            causes: vec![],
        }
    }

    /// `Deployment.apps "web" is invalid: [spec.x: ..., spec.y: ...]`.
    pub fn invalid(kind: &str, group: &str, name: &str, causes: Vec<Cause>) -> ApiError {
        let rendered: Vec<String> = causes.iter().map(Cause::render).collect();
        let joined = if rendered.len() == 1 {
            rendered[0].clone()
        } else {
            format!("[{}]", rendered.join(", "))
        };
        ApiError::Invalid {
            message: format!("{} \"{name}\" is invalid: {joined}", qualified(kind, group)),
            target: Target {
                group: group.into(),
                kind: kind.into(),
                name: name.into(),
            },
            causes,
        }
    }

    pub fn code(&self) -> StatusCode {
        match self {
            ApiError::BadRequest { .. } => StatusCode::BAD_REQUEST,
            ApiError::Unauthorized => StatusCode::UNAUTHORIZED,
            ApiError::Forbidden { .. } => StatusCode::FORBIDDEN,
            ApiError::NotFound { .. } => StatusCode::NOT_FOUND,
            ApiError::MethodNotAllowed { .. } => StatusCode::METHOD_NOT_ALLOWED,
            ApiError::NotAcceptable { .. } => StatusCode::NOT_ACCEPTABLE,
            ApiError::AlreadyExists { .. } | ApiError::Conflict { .. } => StatusCode::CONFLICT,
            ApiError::Gone { .. } => StatusCode::GONE,
            ApiError::TooLarge { .. } => StatusCode::PAYLOAD_TOO_LARGE,
            ApiError::UnsupportedMediaType { .. } => StatusCode::UNSUPPORTED_MEDIA_TYPE,
            ApiError::Invalid { .. } => StatusCode::UNPROCESSABLE_ENTITY,
            ApiError::TooManyRequests { .. } => StatusCode::TOO_MANY_REQUESTS,
            ApiError::Internal { .. } => StatusCode::INTERNAL_SERVER_ERROR,
            ApiError::Unavailable { .. } => StatusCode::SERVICE_UNAVAILABLE,
            ApiError::TooLargeResourceVersion { .. } => StatusCode::GATEWAY_TIMEOUT,
        }
    }

    pub fn reason(&self) -> &'static str {
        match self {
            ApiError::BadRequest { .. } => "BadRequest",
            ApiError::Unauthorized => "Unauthorized",
            ApiError::Forbidden { .. } => "Forbidden",
            ApiError::NotFound { .. } => "NotFound",
            ApiError::MethodNotAllowed { .. } => "MethodNotAllowed",
            ApiError::NotAcceptable { .. } => "NotAcceptable",
            ApiError::AlreadyExists { .. } => "AlreadyExists",
            ApiError::Conflict { .. } => "Conflict",
            ApiError::Gone { .. } => "Expired",
            ApiError::TooLarge { .. } => "RequestEntityTooLarge",
            ApiError::UnsupportedMediaType { .. } => "UnsupportedMediaType",
            ApiError::Invalid { .. } => "Invalid",
            ApiError::TooManyRequests { .. } => "TooManyRequests",
            ApiError::Internal { .. } => "InternalError",
            ApiError::Unavailable { .. } => "ServiceUnavailable",
            ApiError::TooLargeResourceVersion { .. } => "Timeout",
        }
    }

    /// The `Status` object for this error.
    pub fn to_status(&self) -> Value {
        let mut status = json!({
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.to_string(),
            "reason": self.reason(),
            "code": self.code().as_u16(),
        });
        let (target, causes) = match self {
            ApiError::NotFound { target, .. } => (target.clone(), vec![]),
            ApiError::AlreadyExists { target, .. } => (Some(target.clone()), vec![]),
            ApiError::Conflict { target, causes, .. } => (target.clone(), causes.clone()),
            ApiError::Invalid { target, causes, .. } => (Some(target.clone()), causes.clone()),
            ApiError::TooManyRequests {
                retry_after_seconds,
                ..
            } => {
                status["details"] = json!({ "retryAfterSeconds": retry_after_seconds });
                (None, vec![])
            }
            ApiError::TooLargeResourceVersion { .. } => {
                status["details"] = json!({
                    "causes": [{"reason": "ResourceVersionTooLarge", "message": "Too large resource version"}],
                    "retryAfterSeconds": 1,
                });
                (None, vec![])
            }
            _ => (None, vec![]),
        };
        if let Some(target) = target {
            let mut details = json!({ "name": target.name, "kind": target.kind });
            if !target.group.is_empty() {
                details["group"] = json!(target.group);
            }
            if !causes.is_empty() {
                details["causes"] = causes
                    .iter()
                    .map(|c| json!({ "reason": c.reason, "message": c.message, "field": c.field }))
                    .collect();
            }
            status["details"] = details;
        }
        status
    }
}

fn qualified(resource: &str, group: &str) -> String {
    if group.is_empty() {
        resource.to_string()
    } else {
        format!("{resource}.{group}")
    }
}

impl From<lariat_store::Error> for ApiError {
    fn from(error: lariat_store::Error) -> ApiError {
        use lariat_store::Error;
        match error {
            Error::Compacted {
                requested,
                compacted,
            } => ApiError::Gone {
                message: format!("{requested} is too old (the oldest available is {compacted})"),
            },
            Error::Unavailable(message) => ApiError::Unavailable {
                message: format!("storage unavailable: {message}"),
            },
            other => ApiError::internal(other.to_string()),
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let code = self.code();
        if code.is_server_error() && !matches!(self, ApiError::TooLargeResourceVersion { .. }) {
            tracing::error!(code = code.as_u16(), error = %self, "request failed");
        }
        let mut response = (code, axum::Json(self.to_status())).into_response();
        if let ApiError::TooManyRequests {
            retry_after_seconds,
            ..
        } = self
        {
            response.headers_mut().insert(
                "retry-after",
                axum::http::HeaderValue::from(retry_after_seconds),
            );
        }
        response
    }
}

pub type ApiResult<T> = Result<T, ApiError>;
