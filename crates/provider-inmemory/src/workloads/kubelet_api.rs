//! What a simulated cluster's API answers for a Pod's `log`, `exec`, `attach` and
//! `portforward`, which a real kube-apiserver hands to the kubelet of the Pod's Node. The
//! checks are kube-apiserver's and the kubelet's, with their words (a container that is
//! waiting to start, a completed Pod, a container name that is not the Pod's). Past them, no
//! container runs here: a log is empty, as a container's that wrote nothing, and a stream
//! into a container is refused with a Status that says why, never a 404 for an unknown path.

// The generic server's `ApiError` is a Kubernetes Status with its causes, as large as it must
// be; its answers are returned as the server's own are.
#![allow(clippy::result_large_err)]

use std::collections::HashMap;

use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use lariat_api::admission::Cause;
use lariat_apiserver::extension::{Connect, Connection, Extension, Handle};
use lariat_apiserver::status::{ApiError, ApiResult};
use serde_json::{Value, json};

/// Answers the connect subresources of Pods, as the simulated Nodes' kubelets.
pub struct KubeletApi;

#[async_trait::async_trait]
impl Extension for KubeletApi {
    fn connects(&self, group: &str, plural: &str, subresource: &str) -> Option<Connect> {
        if !group.is_empty() || plural != "pods" {
            return None;
        }
        match subresource {
            "log" => Some(Connect::Read),
            "exec" | "attach" | "portforward" => Some(Connect::Run),
            _ => None,
        }
    }

    async fn connect(&self, _server: &Handle, connection: Connection<'_>) -> ApiResult<Response> {
        let pod = &connection.object;
        match connection.subresource {
            "log" => log(pod, connection.query),
            stream => Err(refuse_stream(stream, pod, connection.query)),
        }
    }
}

/// `GET pods/NAME/log`: an empty log once the container has run, kubelet's reasons before.
fn log(pod: &Value, query: &HashMap<String, String>) -> ApiResult<Response> {
    let name = pod["metadata"]["name"].as_str().unwrap_or_default();
    let previous = log_options(name, query)?;
    let container = container(pod, query)?;
    // A Pod on no Node yet has no kubelet to ask: kube-apiserver answers an empty stream.
    if pod["spec"]["nodeName"]
        .as_str()
        .is_some_and(|n| !n.is_empty())
    {
        log_status(pod, name, &container, previous)?;
    }
    Ok((
        StatusCode::OK,
        [(header::CONTENT_TYPE, "text/plain")],
        String::new(),
    )
        .into_response())
}

/// Checks `PodLogOptions` as kube-apiserver validates them; whether `previous` is asked.
fn log_options(name: &str, query: &HashMap<String, String>) -> ApiResult<bool> {
    let mut causes = Vec::new();
    let mut number = |field: &str, least: i64| -> Option<i64> {
        let text = query.get(field)?;
        match text.parse::<i64>() {
            Ok(n) if n >= least => Some(n),
            Ok(n) => {
                causes.push(Cause::invalid(
                    field,
                    &json!(n),
                    format!("must be greater than or equal to {least}"),
                ));
                None
            }
            Err(_) => {
                causes.push(Cause::invalid(field, &json!(text), "must be an integer"));
                None
            }
        }
    };
    number("tailLines", 0);
    number("limitBytes", 1);
    let since = number("sinceSeconds", 1);
    if let Some(time) = query.get("sinceTime")
        && chrono::DateTime::parse_from_rfc3339(time).is_err()
    {
        causes.push(Cause::invalid(
            "sinceTime",
            &json!(time),
            "must be a time in RFC 3339 form",
        ));
    }
    if since.is_some() && query.contains_key("sinceTime") {
        causes.push(Cause::forbidden(
            "sinceSeconds",
            "at most one of `sinceTime` or `sinceSeconds` may be specified",
        ));
    }
    let mut flag = |field: &str| match query.get(field).map(String::as_str) {
        None | Some("false" | "0") => false,
        Some("true" | "1") => true,
        Some(other) => {
            causes.push(Cause::invalid(
                field,
                &json!(other),
                "must be true or false",
            ));
            false
        }
    };
    let previous = flag("previous");
    flag("follow");
    flag("timestamps");
    if causes.is_empty() {
        Ok(previous)
    } else {
        Err(ApiError::invalid("PodLogOptions", "", name, causes))
    }
}

/// The container a request names, or the Pod's only one: kube-apiserver's choice and words.
fn container(pod: &Value, query: &HashMap<String, String>) -> ApiResult<String> {
    let name = pod["metadata"]["name"].as_str().unwrap_or_default();
    let names = |list: &str| -> Vec<String> {
        pod["spec"][list]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|c| c["name"].as_str().map(String::from))
            .collect()
    };
    let (containers, init) = (names("containers"), names("initContainers"));
    match query.get("container").filter(|c| !c.is_empty()) {
        Some(asked) => {
            let ephemeral = names("ephemeralContainers");
            if [&containers, &init, &ephemeral]
                .iter()
                .any(|list| list.contains(asked))
            {
                Ok(asked.clone())
            } else {
                Err(ApiError::bad_request(format!(
                    "container {asked} is not valid for pod {name}"
                )))
            }
        }
        None => match containers.as_slice() {
            [only] => Ok(only.clone()),
            [] => Err(ApiError::bad_request(format!(
                "a container name must be specified for pod {name}"
            ))),
            several => {
                let mut message = format!(
                    "a container name must be specified for pod {name}, choose one of: [{}]",
                    several.join(" ")
                );
                if !init.is_empty() {
                    message += &format!(" or one of the init containers: [{}]", init.join(" "));
                }
                Err(ApiError::bad_request(message))
            }
        },
    }
}

/// A container's status among the Pod's (app, init and ephemeral containers).
fn container_status<'a>(pod: &'a Value, container: &str) -> Option<&'a Value> {
    [
        "containerStatuses",
        "initContainerStatuses",
        "ephemeralContainerStatuses",
    ]
    .iter()
    .flat_map(|list| pod["status"][list].as_array().into_iter().flatten())
    .find(|status| status["name"] == container)
}

/// Whether the kubelet has a log for `container`, in its words when not.
fn log_status(pod: &Value, name: &str, container: &str, previous: bool) -> ApiResult<()> {
    let not = |what: String| {
        Err(ApiError::bad_request(format!(
            "container \"{container}\" in pod \"{name}\" {what}"
        )))
    };
    let Some(status) = container_status(pod, container) else {
        return not("is not available".into());
    };
    let state = &status["state"];
    let last_terminated = !status["lastState"]["terminated"].is_null();
    if previous {
        return if last_terminated {
            Ok(())
        } else {
            Err(ApiError::bad_request(format!(
                "previous terminated container \"{container}\" in pod \"{name}\" not found"
            )))
        };
    }
    if !state["running"].is_null() || !state["terminated"].is_null() || last_terminated {
        return Ok(());
    }
    match state["waiting"]["reason"].as_str() {
        Some("ErrImagePull") => not("is waiting to start: image can't be pulled".into()),
        Some("ImagePullBackOff") => {
            not("is waiting to start: trying and failing to pull image".into())
        }
        Some(reason) => not(format!("is waiting to start: {reason}")),
        None => not("is waiting to start - no logs yet".into()),
    }
}

/// `exec`, `attach` or `portforward`: refused with kube-apiserver's and the kubelet's words
/// where a real cluster refuses too, and past them because no process runs here.
fn refuse_stream(stream: &str, pod: &Value, query: &HashMap<String, String>) -> ApiError {
    let name = pod["metadata"]["name"].as_str().unwrap_or_default();
    let phase = pod["status"]["phase"].as_str().unwrap_or("Pending");
    let doing = match stream {
        "exec" => "exec into",
        "attach" => "attach to",
        _ => {
            return ApiError::bad_request(format!(
                "pod {name} runs in a simulated cluster: no process listens on its ports (lariat's in-memory provider runs no containers)"
            ));
        }
    };
    if matches!(phase, "Succeeded" | "Failed") {
        return ApiError::bad_request(format!(
            "cannot {doing} a container in a completed pod; current phase is {phase}"
        ));
    }
    let container = match container(pod, query) {
        Ok(container) => container,
        Err(refusal) => return refusal,
    };
    if pod["spec"]["nodeName"].as_str().is_none_or(str::is_empty) {
        return ApiError::bad_request(format!("pod {name} does not have a host assigned"));
    }
    let running =
        container_status(pod, &container).is_some_and(|s| !s["state"]["running"].is_null());
    if !running {
        return ApiError::bad_request(format!("container not found (\"{container}\")"));
    }
    ApiError::bad_request(format!(
        "cannot {doing} container \"{container}\" in pod \"{name}\": the pod runs in a simulated cluster, where no process runs (lariat's in-memory provider runs no containers)"
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn query(pairs: &[(&str, &str)]) -> HashMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    fn message(result: ApiResult<impl std::fmt::Debug>) -> String {
        result.expect_err("refused").to_string()
    }

    fn pod(waiting: Option<&str>) -> Value {
        let state = match waiting {
            Some(reason) => json!({"waiting": {"reason": reason}}),
            None => json!({"running": {"startedAt": "2026-12-07T00:00:00Z"}}),
        };
        json!({
            "metadata": {"name": "web-1"},
            "spec": {"nodeName": "n1", "containers": [{"name": "app"}, {"name": "proxy"}],
                     "initContainers": [{"name": "init"}]},
            "status": {"phase": "Running", "containerStatuses": [
                {"name": "app", "state": state},
                {"name": "proxy", "state": {"running": {}}}]},
        })
    }

    #[test]
    fn a_container_is_chosen_as_kube_apiserver_chooses_it() {
        assert_eq!(
            message(container(&pod(None), &query(&[]))),
            "a container name must be specified for pod web-1, choose one of: [app proxy] or one of the init containers: [init]"
        );
        assert_eq!(
            message(container(&pod(None), &query(&[("container", "db")]))),
            "container db is not valid for pod web-1"
        );
        assert_eq!(
            container(&pod(None), &query(&[("container", "init")])).unwrap(),
            "init"
        );
    }

    #[test]
    fn logs_say_why_a_container_has_none_yet() {
        let refused = |reason| {
            let pod = pod(Some(reason));
            message(log(&pod, &query(&[("container", "app")])))
        };
        assert_eq!(
            refused("ImagePullBackOff"),
            "container \"app\" in pod \"web-1\" is waiting to start: trying and failing to pull image"
        );
        assert_eq!(
            refused("ContainerCreating"),
            "container \"app\" in pod \"web-1\" is waiting to start: ContainerCreating"
        );
        let running = log(&pod(None), &query(&[("container", "app")])).expect("a log");
        assert_eq!(running.status(), StatusCode::OK);
        assert_eq!(
            message(log(
                &pod(None),
                &query(&[("container", "app"), ("previous", "true")])
            )),
            "previous terminated container \"app\" in pod \"web-1\" not found"
        );
        let mut unscheduled = pod(Some("ContainerCreating"));
        unscheduled["spec"]["nodeName"] = Value::Null;
        assert!(log(&unscheduled, &query(&[("container", "app")])).is_ok());
    }

    #[test]
    fn bad_log_options_are_invalid_with_their_fields() {
        let refusal = log(
            &pod(None),
            &query(&[
                ("container", "app"),
                ("tailLines", "-1"),
                ("sinceSeconds", "5"),
                ("sinceTime", "yesterday"),
                ("follow", "maybe"),
            ]),
        )
        .expect_err("invalid");
        let ApiError::Invalid { causes, .. } = &refusal else {
            panic!("{refusal:?}")
        };
        let fields: Vec<&str> = causes.iter().map(|c| c.field.as_str()).collect();
        assert_eq!(fields, ["tailLines", "sinceTime", "sinceSeconds", "follow"]);
    }

    #[test]
    fn streams_are_refused_with_a_reason() {
        let exec = |pod: &Value, container| {
            refuse_stream("exec", pod, &query(&[("container", container)])).to_string()
        };
        assert_eq!(
            exec(&pod(Some("CrashLoopBackOff")), "app"),
            "container not found (\"app\")"
        );
        assert!(exec(&pod(None), "app").contains("no process runs"));
        let mut pending = pod(Some("ContainerCreating"));
        pending["spec"]["nodeName"] = Value::Null;
        assert_eq!(
            exec(&pending, "app"),
            "pod web-1 does not have a host assigned"
        );
        let mut done = pod(None);
        done["status"]["phase"] = json!("Succeeded");
        assert_eq!(
            exec(&done, "app"),
            "cannot exec into a container in a completed pod; current phase is Succeeded"
        );
    }
}
