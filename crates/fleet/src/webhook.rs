//! Fleet's git webhooks (`POST /v3/fleet/webhook`): a push announced by GitHub or GitLab makes
//! the GitRepos that follow that repository and branch fetch now, instead of at their next
//! polling interval. A delivery counts only for the GitRepos whose webhook secret it proves it
//! knows: GitHub's HMAC-SHA256 signature of the body (`X-Hub-Signature-256`), GitLab's token
//! (`X-Gitlab-Token`), checked against the `github` or `gitlab` key of the Secret the GitRepo's
//! `webhookSecret` names (in its namespace), or else of `gitjob-webhook` in `lariat-system`
//! (Fleet's `gitjob-webhook` Secret). A GitRepo with neither is never triggered by a webhook.
//!
//! A delivery triggers by writing `status.webhookCommit` and `status.lastWebhookTime` on the
//! GitRepo, as Fleet does; the GitRepo controller, woken by that change, fetches.

use hmac::{Hmac, Mac};
use http::StatusCode;
use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, ApiResource, DynamicObject, ListParams, Patch, PatchParams};
use serde_json::{Value, json};
use sha2::Sha256;
use subtle::ConstantTimeEq;

/// The path the server serves the webhook at, unauthenticated: a delivery proves itself.
pub const PATH: &str = "/v3/fleet/webhook";

/// The Secret every GitRepo without a `webhookSecret` of its own is checked against.
pub const SHARED_SECRET: &str = "gitjob-webhook";

/// Which service sent a delivery, from its event header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Provider {
    GitHub,
    GitLab,
}

impl Provider {
    /// The key of the webhook Secret that holds this provider's secret.
    fn key(self) -> &'static str {
        match self {
            Provider::GitHub => "github",
            Provider::GitLab => "gitlab",
        }
    }
}

/// Why a delivery was refused.
#[derive(Debug, thiserror::Error)]
pub enum Refused {
    /// Not a delivery lariat can read.
    #[error("{0}")]
    BadRequest(String),
    /// It matches GitRepos but proves none of their secrets.
    #[error("the delivery proves no webhook secret of the GitRepos that follow its repository")]
    Unproven,
    #[error("{0}")]
    Internal(String),
}

impl Refused {
    /// The HTTP status the delivery is answered with.
    pub fn code(&self) -> StatusCode {
        match self {
            Refused::BadRequest(_) => StatusCode::BAD_REQUEST,
            Refused::Unproven => StatusCode::UNAUTHORIZED,
            Refused::Internal(_) => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }
}

/// Handles one HTTP delivery to [`PATH`]: which service sent it from its event header, then
/// [`deliver`]. Answers what to reply with: the outcome as JSON, or why it was refused.
pub async fn handle(
    client: kube::Client,
    headers: &http::HeaderMap,
    body: &[u8],
) -> Result<Value, Refused> {
    let header = |name: &str| headers.get(name).and_then(|v| v.to_str().ok());
    let (provider, event) = match (header("x-github-event"), header("x-gitlab-event")) {
        (Some(event), _) => (Provider::GitHub, event),
        (None, Some(event)) => (Provider::GitLab, event),
        _ => {
            return Err(Refused::BadRequest(
                "not a webhook lariat knows: GitHub sends X-GitHub-Event, GitLab X-Gitlab-Event"
                    .into(),
            ));
        }
    };
    let delivery = Delivery {
        provider,
        event,
        signature: header("x-hub-signature-256"),
        token: header("x-gitlab-token"),
        body,
    };
    Ok(match deliver(&client, delivery).await? {
        Outcome::Ignored(message) => json!({"message": message}),
        Outcome::Triggered(repos) => json!({"triggered": repos}),
    })
}

/// Whether two secrets are equal, in time that does not depend on where they differ.
fn same_secret(a: &[u8], b: &[u8]) -> bool {
    a.ct_eq(b).into()
}

/// One delivery, as the HTTP layer read it.
pub struct Delivery<'a> {
    pub provider: Provider,
    /// `X-GitHub-Event` or `X-Gitlab-Event`.
    pub event: &'a str,
    /// GitHub's `X-Hub-Signature-256` (`sha256=<hex>`).
    pub signature: Option<&'a str>,
    /// GitLab's `X-Gitlab-Token`.
    pub token: Option<&'a str>,
    pub body: &'a [u8],
}

/// What a delivery did.
#[derive(Debug, PartialEq, Eq)]
pub enum Outcome {
    /// An event other than a push (GitHub's `ping`, a GitLab issue): nothing to do.
    Ignored(String),
    /// The GitRepos (`namespace/name`) told to fetch.
    Triggered(Vec<String>),
}

/// A pushed branch: the repository's URLs, the branch and its new commit.
#[derive(Debug, PartialEq, Eq)]
struct Push {
    urls: Vec<String>,
    branch: String,
    commit: String,
}

fn parse(provider: Provider, body: &[u8]) -> Result<Push, Refused> {
    let payload: Value = serde_json::from_slice(body)
        .map_err(|e| Refused::BadRequest(format!("the webhook body is not JSON: {e}")))?;
    let (repository, url_fields, commit_fields): (&Value, &[&str], &[&str]) = match provider {
        Provider::GitHub => (
            &payload["repository"],
            &["clone_url", "html_url", "ssh_url", "git_url", "url"],
            &["after"],
        ),
        Provider::GitLab => (
            &payload["project"],
            &[
                "git_http_url",
                "git_ssh_url",
                "web_url",
                "http_url",
                "ssh_url",
            ],
            &["checkout_sha", "after"],
        ),
    };
    let urls: Vec<String> = url_fields
        .iter()
        .filter_map(|f| repository[*f].as_str())
        .map(normalize)
        .collect();
    let branch = payload["ref"]
        .as_str()
        .and_then(|r| r.strip_prefix("refs/heads/"))
        .map(String::from);
    // A commit is a SHA-1 or SHA-256 in hex, nothing else (it is stored and logged).
    let commit = commit_fields
        .iter()
        .find_map(|f| payload[*f].as_str().filter(|c| !c.is_empty()))
        .filter(|c| matches!(c.len(), 40 | 64) && c.bytes().all(|b| b.is_ascii_hexdigit()))
        .map(String::from);
    // A branch name (git forbids control characters in one) that is logged as it is.
    let branch = branch.filter(|b| !b.chars().any(char::is_control));
    match (urls.is_empty(), branch, commit) {
        (false, Some(branch), Some(commit)) => Ok(Push {
            urls,
            branch,
            commit,
        }),
        (no_url, branch, commit) => {
            let missing: Vec<&str> = [
                no_url.then_some("repository URL"),
                branch.is_none().then_some("branch (ref refs/heads/...)"),
                commit.is_none().then_some("commit (a hex SHA)"),
            ]
            .into_iter()
            .flatten()
            .collect();
            Err(Refused::BadRequest(format!(
                "the push names no {}",
                missing.join(", no ")
            )))
        }
    }
}

/// A repository URL reduced to `host/path` in lower case, without a scheme, credentials,
/// port, trailing slash or `.git`, so `https://github.com/Org/Repo.git` and
/// `git@github.com:org/repo` are the same repository.
pub fn normalize(url: &str) -> String {
    let url = url.trim();
    let rest = match url.split_once("://") {
        Some((_, rest)) => rest.to_string(),
        // scp-like `user@host:path`.
        None => url.replacen(':', "/", 1),
    };
    let rest = rest.rsplit_once('@').map_or(rest.as_str(), |(_, r)| r);
    let (host, path) = rest.split_once('/').unwrap_or((rest, ""));
    let host = host.split(':').next().unwrap_or(host);
    let path = path.trim_end_matches('/');
    let path = path.strip_suffix(".git").unwrap_or(path);
    format!("{host}/{path}").to_lowercase()
}

/// Whether the delivery proves it knows `secret`.
fn verified(delivery: &Delivery<'_>, secret: &[u8]) -> bool {
    if secret.is_empty() {
        return false;
    }
    match delivery.provider {
        Provider::GitHub => {
            let Some(hex) = delivery.signature.and_then(|s| s.strip_prefix("sha256=")) else {
                return false;
            };
            let Ok(mut mac) = Hmac::<Sha256>::new_from_slice(secret) else {
                return false;
            };
            mac.update(delivery.body);
            let expected: String = mac
                .finalize()
                .into_bytes()
                .iter()
                .map(|b| format!("{b:02x}"))
                .collect();
            same_secret(expected.as_bytes(), hex.to_ascii_lowercase().as_bytes())
        }
        Provider::GitLab => delivery
            .token
            .is_some_and(|token| same_secret(token.as_bytes(), secret)),
    }
}

fn git_repos() -> ApiResource {
    ApiResource {
        group: lariat_api::fleet::GROUP.into(),
        version: lariat_api::fleet::VERSION.into(),
        api_version: lariat_api::fleet::API_VERSION.into(),
        kind: "GitRepo".into(),
        plural: "gitrepos".into(),
    }
}

/// The webhook secret of `provider` a GitRepo is checked against, if it has one.
async fn secret_of(
    client: &kube::Client,
    repo: &DynamicObject,
    provider: Provider,
) -> Result<Option<Vec<u8>>, Refused> {
    let (namespace, name) = match repo.data["spec"]["webhookSecret"].as_str() {
        Some(name) => (repo.metadata.namespace.clone().unwrap_or_default(), name),
        None => (lariat_api::management::NAMESPACE.to_string(), SHARED_SECRET),
    };
    let secrets: Api<Secret> = Api::namespaced(client.clone(), &namespace);
    let secret = secrets
        .get_opt(name)
        .await
        .map_err(|e| Refused::Internal(format!("cannot read webhook secret: {e}")))?;
    Ok(secret
        .and_then(|s| s.data)
        .and_then(|mut data| data.remove(provider.key()))
        .map(|value| value.0))
}

/// Handles one delivery: the GitRepos following the pushed repository and branch whose secret
/// it proves are told to fetch. A push that matches GitRepos but proves none of their secrets
/// is refused (401), so a wrong secret is seen in the sender's delivery log.
pub async fn deliver(client: &kube::Client, delivery: Delivery<'_>) -> Result<Outcome, Refused> {
    let push_event = match delivery.provider {
        Provider::GitHub => delivery.event == "push",
        Provider::GitLab => delivery.event == "Push Hook",
    };
    if !push_event {
        return Ok(Outcome::Ignored(format!(
            "{:?} event {:?} is not a push: nothing to fetch",
            delivery.provider, delivery.event
        )));
    }
    let push = parse(delivery.provider, delivery.body)?;
    let repos: Api<DynamicObject> = Api::all_with(client.clone(), &git_repos());
    let all = repos
        .list(&ListParams::default())
        .await
        .map_err(|e| Refused::Internal(format!("cannot list GitRepos: {e}")))?;
    let mut matched = 0;
    let mut triggered = Vec::new();
    for repo in all.items {
        let spec = &repo.data["spec"];
        let follows = spec["repo"]
            .as_str()
            .is_some_and(|url| push.urls.contains(&normalize(url)))
            && spec["revision"].is_null()
            && spec["branch"].as_str().unwrap_or("master") == push.branch;
        if !follows {
            continue;
        }
        matched += 1;
        let Some(secret) = secret_of(client, &repo, delivery.provider).await? else {
            continue;
        };
        if !verified(&delivery, &secret) {
            continue;
        }
        let namespace = repo.metadata.namespace.clone().unwrap_or_default();
        let name = repo.metadata.name.clone().unwrap_or_default();
        let now = chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
        Api::<DynamicObject>::namespaced_with(client.clone(), &namespace, &git_repos())
            .patch_status(
                &name,
                &PatchParams::default(),
                &Patch::Merge(
                    json!({"status": {"webhookCommit": push.commit, "lastWebhookTime": now}}),
                ),
            )
            .await
            .map_err(|e| Refused::Internal(format!("cannot record the webhook: {e}")))?;
        triggered.push(format!("{namespace}/{name}"));
    }
    if matched > 0 && triggered.is_empty() {
        return Err(Refused::Unproven);
    }
    if !triggered.is_empty() {
        tracing::info!(repos = ?triggered, branch = ?push.branch, commit = %push.commit, "webhook: fetching");
    }
    Ok(Outcome::Triggered(triggered))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn repository_urls_compare_by_host_and_path() {
        let same = [
            "https://github.com/Org/Repo.git",
            "https://github.com/org/repo",
            "https://user:pass@github.com/org/repo/",
            "git@github.com:org/repo.git",
            "ssh://git@github.com:22/org/repo.git",
            "git://github.com/org/repo.git",
        ];
        for url in same {
            assert_eq!(normalize(url), "github.com/org/repo", "{url}");
        }
        assert_ne!(
            normalize("https://github.com/org/repo2"),
            "github.com/org/repo"
        );
    }

    #[test]
    fn github_signatures_and_gitlab_tokens_are_checked() {
        let body = br#"{"ref":"refs/heads/main"}"#;
        // The signature GitHub sends for this body with secret "s3cret".
        let mut mac = Hmac::<Sha256>::new_from_slice(b"s3cret").unwrap();
        mac.update(body);
        let hex: String = mac
            .finalize()
            .into_bytes()
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        let signature: &'static str = Box::leak(format!("sha256={hex}").into_boxed_str());
        let github = |signature: Option<&'static str>| Delivery {
            provider: Provider::GitHub,
            event: "push",
            signature,
            token: None,
            body,
        };
        assert!(verified(&github(Some(signature)), b"s3cret"));
        assert!(!verified(&github(Some(signature)), b"other"));
        assert!(!verified(&github(Some("sha256=00")), b"s3cret"));
        assert!(!verified(&github(None), b"s3cret"));
        assert!(
            !verified(&github(Some(signature)), b""),
            "an empty secret proves nothing"
        );
        let gitlab = |token: Option<&'static str>| Delivery {
            provider: Provider::GitLab,
            event: "Push Hook",
            signature: None,
            token,
            body,
        };
        assert!(verified(&gitlab(Some("s3cret")), b"s3cret"));
        assert!(!verified(&gitlab(Some("s3cre")), b"s3cret"));
        assert!(!verified(&gitlab(None), b"s3cret"));
    }

    #[test]
    fn pushes_name_the_repository_branch_and_commit() {
        let sha = "0123456789abcdef0123456789abcdef01234567";
        let github = format!(
            r#"{{"ref":"refs/heads/main","after":"{sha}","repository":{{"clone_url":"https://github.com/org/repo.git","ssh_url":"git@github.com:org/repo.git"}}}}"#
        );
        let push = parse(Provider::GitHub, github.as_bytes()).unwrap();
        assert_eq!(push.branch, "main");
        assert_eq!(push.commit, sha);
        // Anything but a hex SHA as the commit is refused: it would be stored and logged.
        let forged = github.replace(sha, "abc\\n2026-12-01T00:00:00Z INFO forged");
        assert!(parse(Provider::GitHub, forged.as_bytes()).is_err());
        assert!(push.urls.contains(&"github.com/org/repo".to_string()));
        let gitlab = format!(
            r#"{{"ref":"refs/heads/dev","checkout_sha":"{sha}","project":{{"git_http_url":"https://gitlab.com/group/app.git"}}}}"#
        );
        let push = parse(Provider::GitLab, gitlab.as_bytes()).unwrap();
        assert_eq!((push.branch.as_str(), push.commit.as_str()), ("dev", sha));
        // A tag push names no branch.
        let tag = br#"{"ref":"refs/tags/v1","after":"abc","repository":{"clone_url":"https://github.com/o/r"}}"#;
        assert!(parse(Provider::GitHub, tag).is_err());
        // What is missing is named, and only that.
        let no_commit =
            br#"{"ref":"refs/heads/main","repository":{"clone_url":"https://github.com/o/r"}}"#;
        let refused = parse(Provider::GitHub, no_commit).unwrap_err().to_string();
        assert!(
            refused.ends_with("the push names no commit (a hex SHA)"),
            "{refused}"
        );
        assert!(parse(Provider::GitHub, b"not json").is_err());
    }
}
