//! Requests served, counted as kube-apiserver's `apiserver_request_total` counts them (by verb,
//! group, resource, subresource and status code), with the management API's and the simulated
//! workload clusters' apart (`api`). `lariat bench lifecycle` divides them per machine.

use std::sync::LazyLock;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::registry::Registry;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct Request {
    api: &'static str,
    verb: &'static str,
    group: String,
    resource: String,
    subresource: String,
    code: u16,
}

static REQUESTS: LazyLock<Family<Request, Counter>> = LazyLock::new(Family::default);

/// What a request was, in kube-apiserver's verbs.
pub(crate) struct Served<'a> {
    /// Which API served it (`management`, or `workload` for a simulated cluster's).
    pub api: &'static str,
    pub method: &'a axum::http::Method,
    pub content_type: Option<&'a str>,
    pub query: Option<&'a str>,
    /// `(group, plural, name, subresource)` of a resource path; `None` for any other path.
    pub resource: Option<(&'a str, &'a str, Option<&'a str>, Option<&'a str>)>,
}

impl Served<'_> {
    fn verb(&self) -> &'static str {
        let named = self.resource.is_some_and(|(_, _, name, _)| name.is_some());
        let watch = self.query.is_some_and(|q| {
            q.split('&')
                .any(|pair| pair == "watch=true" || pair == "watch=1")
        });
        match (self.method.as_str(), named) {
            ("GET", _) if watch => "WATCH",
            ("GET", true) => "GET",
            ("GET", false) if self.resource.is_some() => "LIST",
            ("GET", false) => "GET",
            ("POST", _) => "POST",
            ("PUT", _) => "PUT",
            ("PATCH", _) if self.content_type == Some("application/apply-patch+yaml") => "APPLY",
            ("PATCH", _) => "PATCH",
            ("DELETE", true) => "DELETE",
            ("DELETE", false) => "DELETECOLLECTION",
            _ => "OTHER",
        }
    }

    pub fn record(&self, code: u16) {
        let (group, resource, _, subresource) = self.resource.unwrap_or_default();
        REQUESTS
            .get_or_create(&Request {
                api: self.api,
                verb: self.verb(),
                group: group.to_string(),
                resource: resource.to_string(),
                subresource: subresource.unwrap_or_default().to_string(),
                code,
            })
            .inc();
    }
}

/// The counters in Prometheus' text format, without the closing `# EOF` (other families
/// follow them on `/metrics`).
pub fn render() -> String {
    let mut registry = Registry::default();
    registry.register(
        "apiserver_request",
        "Requests served, by API (management or a simulated workload cluster), verb, group, resource, subresource and HTTP status code",
        REQUESTS.clone(),
    );
    let mut text = String::new();
    prometheus_client::encoding::text::encode(&mut text, &registry)
        .expect("writing to a String cannot fail");
    text.trim_end().trim_end_matches("# EOF").to_string()
}

#[cfg(test)]
mod tests {
    use super::Served;

    #[test]
    fn verbs_are_kube_apiservers() {
        let cases = [
            (
                "GET",
                None,
                Some(("apps", "deployments", Some("x"), None)),
                "GET",
            ),
            (
                "GET",
                None,
                Some(("apps", "deployments", None, None)),
                "LIST",
            ),
            (
                "GET",
                Some("watch=true&resourceVersion=3"),
                Some(("", "pods", None, None)),
                "WATCH",
            ),
            (
                "GET",
                Some("watch=1"),
                Some(("", "pods", None, None)),
                "WATCH",
            ),
            ("GET", None, None, "GET"),
            ("POST", None, Some(("", "pods", None, None)), "POST"),
            (
                "PUT",
                None,
                Some(("", "pods", Some("p"), Some("status"))),
                "PUT",
            ),
            (
                "DELETE",
                None,
                Some(("", "pods", None, None)),
                "DELETECOLLECTION",
            ),
            (
                "DELETE",
                None,
                Some(("", "pods", Some("p"), None)),
                "DELETE",
            ),
        ];
        for (method, query, resource, verb) in cases {
            let method: axum::http::Method = method.parse().unwrap();
            let served = Served {
                api: "management",
                method: &method,
                content_type: None,
                query,
                resource,
            };
            assert_eq!(served.verb(), verb, "{method} {query:?} {resource:?}");
        }
        let method = axum::http::Method::PATCH;
        let apply = Served {
            api: "workload",
            method: &method,
            content_type: Some("application/apply-patch+yaml"),
            query: None,
            resource: Some(("", "pods", Some("p"), None)),
        };
        assert_eq!(apply.verb(), "APPLY");
        apply.record(200);
        let text = super::render();
        assert!(
            text.contains(r#"apiserver_request_total{api="workload",verb="APPLY",group="",resource="pods",subresource="",code="200"} 1"#),
            "{text}"
        );
        assert!(!text.contains("# EOF"));
    }
}
