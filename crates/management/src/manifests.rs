//! What installs an agent into a cluster: the import manifests (`kubectl apply -f` of
//! `/v3/import/<token>.yaml`, as Rancher's import command), and the image they run.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::{Path, Request, State};
use axum::http::header;
use axum::response::{IntoResponse, Response};
use lariat_api::management::NAMESPACE;
use lariat_apiserver::extension::Handle;
use lariat_apiserver::identity::{Peer, sha256_hex};
use lariat_apiserver::status::ApiError;

use crate::Plane;
use crate::credentials::{create_registration_token, registration_cluster};

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AgentImage {
    pub reference: String,
    pub pull_secret: Option<String>,
}

impl Default for AgentImage {
    fn default() -> AgentImage {
        AgentImage {
            reference: format!("ghcr.io/lariat-dev/lariat:v{}", env!("CARGO_PKG_VERSION")),
            pull_secret: None,
        }
    }
}

impl AgentImage {
    /// Refuses what no container runtime would pull, in one line that says how to write it.
    pub fn check(&self) -> Result<(), String> {
        let reference = &self.reference;
        if let Err(error) = check_reference(reference) {
            return Err(format!(
                "invalid --agent-image {reference:?}: {error}; expected an image reference such as registry.example.com/lariat:v1.2.3 (lowercase repository, optional :tag or @sha256:digest)"
            ));
        }
        if let Some(secret) = &self.pull_secret
            && !lariat_apiserver::objects::is_dns1123_subdomain(secret)
        {
            return Err(format!(
                "invalid --agent-image-pull-secret {secret:?}: expected a Secret name (lowercase letters, digits, '-' and '.')"
            ));
        }
        Ok(())
    }
}

/// The grammar container runtimes parse image references with (distribution/reference's
/// `ReferenceRegexp`, whose `\w` is ASCII, as Go's is), built for the one check and dropped:
/// the oci-spec crate's parser kept a Unicode-aware compilation of it for the process's life,
/// 7 MiB of an idle server's heap.
fn check_reference(reference: &str) -> Result<(), &'static str> {
    const COMPONENT: &str = "[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*";
    const DOMAIN_PART: &str = "(?:[a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9])";
    let domain = format!(r"(?:{DOMAIN_PART}(?:\.{DOMAIN_PART})*|\[[a-fA-F0-9:]+\])(?::[0-9]+)?");
    let path = format!("{COMPONENT}(?:/{COMPONENT})*");
    let tag = r"[\w][\w.-]{0,127}";
    let digest = "[A-Za-z][A-Za-z0-9]*(?:[-_+.][A-Za-z][A-Za-z0-9]*)*:[0-9a-fA-F]{32,}";
    let grammar = regex::RegexBuilder::new(&format!(
        "^(?:({domain})/)?({path})(?::{tag})?(?:@({digest}))?$"
    ))
    .unicode(false)
    .build()
    .expect("the reference grammar compiles");
    let Some(captures) = grammar.captures(reference) else {
        return Err("not an image reference");
    };
    if captures[2].len() > 255 {
        return Err("its repository path is longer than 255 characters");
    }
    // As go-digest parses a digest: a registered algorithm and its length of lowercase hex.
    if let Some(digest) = captures.get(3) {
        let (algorithm, hex) = digest.as_str().split_once(':').unwrap_or_default();
        let length = match algorithm {
            "sha256" => 64,
            "sha384" => 96,
            "sha512" => 128,
            _ => return Err("its digest's algorithm is not sha256, sha384 or sha512"),
        };
        if hex.len() != length || hex.bytes().any(|b| b.is_ascii_uppercase()) {
            return Err("its digest is not the algorithm's length of lowercase hex");
        }
    }
    Ok(())
}

/// The manifests `kubectl apply -f` installs an agent with, into any cluster: its namespace,
/// a service account bound to cluster-admin, a Secret with what it needs to dial home, and
/// the agent Deployment, whose pod reads its in-cluster configuration.
pub fn import_manifest(server: &str, token: &str, ca_checksum: &str, image: &AgentImage) -> String {
    let reference = &image.reference;
    let pull_secrets = match &image.pull_secret {
        Some(secret) => format!("\n      imagePullSecrets: [{{name: {secret}}}]"),
        None => String::new(),
    };
    format!(
        r#"apiVersion: v1
kind: Namespace
metadata:
  name: {NAMESPACE}
---
apiVersion: v1
kind: ServiceAccount
metadata:
  name: lariat-agent
  namespace: {NAMESPACE}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata:
  name: lariat-agent
roleRef:
  apiGroup: rbac.authorization.k8s.io
  kind: ClusterRole
  name: cluster-admin
subjects:
- kind: ServiceAccount
  name: lariat-agent
  namespace: {NAMESPACE}
---
apiVersion: v1
kind: Secret
metadata:
  name: lariat-agent
  namespace: {NAMESPACE}
type: Opaque
stringData:
  server: "{server}"
  token: "{token}"
  ca-checksum: "{ca_checksum}"
---
apiVersion: apps/v1
kind: Deployment
metadata:
  name: lariat-agent
  namespace: {NAMESPACE}
  labels: {{app: lariat-agent}}
spec:
  replicas: 1
  strategy: {{type: Recreate}}
  selector:
    matchLabels: {{app: lariat-agent}}
  template:
    metadata:
      labels: {{app: lariat-agent}}
    spec:
      serviceAccountName: lariat-agent{pull_secrets}
      securityContext:
        runAsNonRoot: true
        seccompProfile: {{type: RuntimeDefault}}
      containers:
      - name: agent
        image: "{reference}"
        args: ["agent"]
        resources:
          requests: {{cpu: 10m, memory: 32Mi}}
          limits: {{memory: 256Mi}}
        securityContext:
          allowPrivilegeEscalation: false
          readOnlyRootFilesystem: true
          capabilities: {{drop: [ALL]}}
        env:
        - {{name: LARIAT_SERVER, valueFrom: {{secretKeyRef: {{name: lariat-agent, key: server}}}}}}
        - {{name: LARIAT_TOKEN, valueFrom: {{secretKeyRef: {{name: lariat-agent, key: token}}}}}}
        - {{name: LARIAT_CA_CHECKSUM, valueFrom: {{secretKeyRef: {{name: lariat-agent, key: ca-checksum}}}}}}
"#
    )
}

/// `GET /v3/import/<token>.yaml`: the agent manifests for the Cluster the token registers.
pub(crate) async fn serve(
    State((plane, server)): State<(Plane, Handle)>,
    Path(file): Path<String>,
    request: Request,
) -> Response {
    let Some(token) = file.strip_suffix(".yaml") else {
        return ApiError::NotFound {
            message: format!(
                "the server could not find the requested resource (/v3/import/{file})"
            ),
            target: None,
        }
        .into_response();
    };
    // Guessing tokens here is limited per address as at /v3/connect.
    let address = Peer::ip_of(request.extensions());
    let attempt = match server.failed_proofs().attempt(address, "failed attempts") {
        Ok(attempt) => attempt,
        Err(refusal) => return refusal.into_response(),
    };
    if let Err(e) = registration_cluster(&server.client(), token).await {
        if let ApiError::Forbidden { .. } = &e {
            attempt.refused("/v3/import");
        }
        return e.into_response();
    }
    drop(attempt);
    // The advertised address; else the address the caller used (a load balancer's, say), if
    // it is a plain host[:port].
    let host = server.advertised_address().unwrap_or_else(|| {
        request
            .headers()
            .get(header::HOST)
            .and_then(|h| h.to_str().ok())
            .filter(|h| {
                h.chars()
                    .all(|c| c.is_ascii_alphanumeric() || ".-:[]".contains(c))
            })
            .unwrap_or(server.server_address())
    });
    (
        [(header::CONTENT_TYPE, "application/yaml")],
        import_manifest(
            &format!("https://{host}"),
            token,
            &sha256_hex(server.ca_pem()),
            &plane.image,
        ),
    )
        .into_response()
}

/// Makes the import manifests of a Cluster, with a registration token of its own.
pub type ImportManifests = dyn Fn(String, String) -> Pin<Box<dyn Future<Output = Result<String, String>> + Send>>
    + Send
    + Sync;

/// The import manifests for a Cluster, each with a new registration token valid for `ttl`:
/// what `/v3/import` serves, for lariat to install its agent into the clusters it provisions
/// (`lariat_controllers::agent_install`). Those clusters are elsewhere, so without an
/// advertised address a loopback listener is refused, with how to fix it.
pub(crate) fn for_provisioned(
    plane: &Plane,
    server: Handle,
    ttl: Duration,
) -> Arc<ImportManifests> {
    let image = plane.image.clone();
    Arc::new(move |namespace, name| {
        let server = server.clone();
        let image = image.clone();
        Box::pin(async move {
            let host = match server.advertised_address() {
                Some(host) => host.to_string(),
                None if server.server_address().starts_with("127.")
                    || server.server_address().starts_with("[::1]") =>
                {
                    return Err(format!(
                        "lariat server listens on loopback ({}) and has no --advertise-url: a cluster elsewhere cannot reach it; restart it with --advertise-url https://HOST:PORT",
                        server.server_address()
                    ));
                }
                None => server.server_address().to_string(),
            };
            let token = create_registration_token(&server.client(), &namespace, &name, ttl)
                .await
                .map_err(|e| format!("cannot create a registration token: {e}"))?;
            Ok(import_manifest(
                &format!("https://{host}"),
                &token,
                &sha256_hex(server.ca_pem()),
                &image,
            ))
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn agent_images_are_references_a_runtime_pulls() {
        let image = |reference: &str, secret: Option<&str>| AgentImage {
            reference: reference.into(),
            pull_secret: secret.map(String::from),
        };
        for ok in [
            "ghcr.io/lariat-dev/lariat:v0.1.0",
            "registry.internal:5000/mirror/lariat:v0.1.0",
            "lariat",
            "registry.internal/lariat@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef",
            "Registry.Example.com/lariat:V1",
            "[fd00::1]:5000/lariat:v1",
            "a__b/c-d--e.f:v_1.2-3",
        ] {
            assert_eq!(image(ok, Some("regcred")).check(), Ok(()), "{ok}");
        }
        for bad in [
            "",
            "Registry/Lariat:v1",
            "lariat:v1 --privileged",
            "https://registry/lariat",
            "lariat:",
            "lariat@sha256:abc",
            "lariat:v1:evil",
            "lariat:v1\"",
            "lariat:-v1",
            "lariat:vé",
            "[::1/lariat",
        ] {
            assert!(image(bad, None).check().is_err(), "{bad}");
        }
        assert!(image("lariat", Some("Reg_Cred")).check().is_err());
        // The path is limited, not the registry's name.
        let path = format!("registry.example.com/{}", "a".repeat(240));
        assert_eq!(image(&path, None).check(), Ok(()));
        let long = format!("registry.example.com/{}", "a".repeat(256));
        assert!(image(&long, None).check().unwrap_err().contains("255"));
        for digest in [
            "sha256:0123456789abcdef0123456789abcdef",
            "sha256:0123456789ABCDEF0123456789ABCDEF0123456789ABCDEF0123456789ABCDEF",
            "md5:0123456789abcdef0123456789abcdef",
        ] {
            assert!(
                image(&format!("lariat@{digest}"), None).check().is_err(),
                "{digest}"
            );
        }
        let manifest = import_manifest(
            "https://lariat.example.com",
            "abcdef.0123456789abcdef",
            "00",
            &image("registry.internal:5000/lariat:v0.1.0", Some("regcred")),
        );
        let documents: Vec<serde_json::Value> = manifest
            .split("\n---\n")
            .map(|d| serde_yaml_ng::from_str(d).expect("each document is YAML"))
            .collect();
        let pod = &documents.last().unwrap()["spec"]["template"]["spec"];
        assert_eq!(
            pod["containers"][0]["image"],
            "registry.internal:5000/lariat:v0.1.0"
        );
        assert_eq!(pod["imagePullSecrets"][0]["name"], "regcred");
        let default = import_manifest("https://x", "t", "c", &AgentImage::default());
        assert!(default.contains(&format!(
            "image: \"ghcr.io/lariat-dev/lariat:v{}\"",
            env!("CARGO_PKG_VERSION")
        )));
        assert!(!default.contains("imagePullSecrets"));
    }
}
