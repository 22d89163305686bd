//! `lariat bench rbac`: what RBAC adds to a request. A user bound in one namespace reads a
//! ConfigMap there, timed against the admin's token (`system:masters`, decided before RBAC is
//! asked) doing the same, first on the default roles alone, then with thousands of roles and
//! bindings, a hundred of which are the user's group's: the difference is the authorization
//! cost per request, end to end.

use std::time::{Duration, Instant};

use anyhow::Context as _;
use kube::api::{Api, DynamicObject, PostParams};
use serde_json::json;

use super::{ServerProcess, client_for, load_average, timed};

#[derive(clap::Args)]
pub struct RbacArgs {
    /// RoleBindings created, spread over 100 namespaces.
    #[arg(long, default_value_t = 10_000)]
    bindings: usize,
    /// ClusterRoles created (five rules each), which the bindings refer to.
    #[arg(long, default_value_t = 1_000)]
    roles: usize,
    /// Timed reads per identity and phase.
    #[arg(long, default_value_t = 10_000)]
    gets: usize,
    /// Concurrent client requests.
    #[arg(long, default_value_t = 16)]
    concurrency: usize,
}

fn api(
    client: &kube::Client,
    plural: &str,
    kind: &str,
    namespace: Option<&str>,
) -> Api<DynamicObject> {
    let resource = kube::core::ApiResource {
        group: "rbac.authorization.k8s.io".into(),
        version: "v1".into(),
        api_version: "rbac.authorization.k8s.io/v1".into(),
        kind: kind.into(),
        plural: plural.into(),
    };
    match namespace {
        Some(ns) => Api::namespaced_with(client.clone(), ns, &resource),
        None => Api::all_with(client.clone(), &resource),
    }
}

fn object(value: serde_json::Value) -> DynamicObject {
    serde_json::from_value(value).expect("a well-formed object")
}

/// p50 and p99 of `count` reads of ConfigMap `probe` in `bench-0` through `client`.
async fn reads(
    client: &kube::Client,
    count: usize,
    concurrency: usize,
) -> anyhow::Result<(f64, f64)> {
    let configmaps: Api<k8s_openapi::api::core::v1::ConfigMap> =
        Api::namespaced(client.clone(), "bench-0");
    let mut samples = timed(count, concurrency, move |_| {
        let configmaps = configmaps.clone();
        async move {
            configmaps.get("probe").await?;
            Ok(())
        }
    })
    .await?;
    samples.latencies.sort();
    Ok((
        super::percentile_ms(&samples.latencies, 0.5),
        super::percentile_ms(&samples.latencies, 0.99),
    ))
}

pub async fn run(args: RbacArgs) -> anyhow::Result<()> {
    println!(
        "lariat bench rbac: {} roles, {} bindings, concurrency {}, load average {}",
        args.roles,
        args.bindings,
        args.concurrency,
        load_average()
    );
    let server = ServerProcess::without_controllers(None)?;
    let admin = server.client().await?;
    let namespaces: Api<DynamicObject> = Api::all_with(
        admin.clone(),
        &kube::core::ApiResource::erase::<k8s_openapi::api::core::v1::Namespace>(&()),
    );
    for i in 0..100 {
        namespaces
            .create(&PostParams::default(), &object(json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": format!("bench-{i}")}})))
            .await?;
    }
    let configmaps: Api<DynamicObject> = Api::namespaced_with(
        admin.clone(),
        "bench-0",
        &kube::core::ApiResource::erase::<k8s_openapi::api::core::v1::ConfigMap>(&()),
    );
    configmaps
        .create(&PostParams::default(), &object(json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "probe"}, "data": {"a": "b"}})))
        .await?;
    api(&admin, "rolebindings", "RoleBinding", Some("bench-0"))
        .create(&PostParams::default(), &object(json!({
            "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
            "metadata": {"name": "reader", "namespace": "bench-0"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "view"},
            "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": "bench-user"}],
        })))
        .await?;

    // The user's credential, made as `lariat token create` makes it.
    let (id, secret, hash) = lariat_management::credentials::new_token_parts();
    let tokens: Api<DynamicObject> =
        Api::all_with(admin.clone(), &lariat_api::management::token_resource());
    let expires = (chrono::Utc::now() + chrono::Duration::hours(1))
        .to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
    tokens
        .create(&PostParams::default(), &object(json!({
            "apiVersion": lariat_api::management::API_VERSION, "kind": "Token",
            "metadata": {"name": format!("token-{id}")},
            "spec": {"user": "bench-user", "groups": ["bench-team"], "tokenHash": hash, "expirationTimestamp": expires},
        })))
        .await?;
    let user_kubeconfig = server.dir.path().join("bench-user.yaml");
    std::fs::write(
        &user_kubeconfig,
        crate::token::kubeconfig_with_token(
            Some(&server.kubeconfig),
            "bench-user",
            &format!("token-{id}:{secret}"),
        )?,
    )?;
    let user = client_for(&user_kubeconfig).await?;
    // Let the binding reach the index before timing.
    let started = Instant::now();
    while reads(&user, 1, 1).await.is_err() {
        anyhow::ensure!(
            started.elapsed() < Duration::from_secs(10),
            "the user's binding never took effect"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }

    let phase = |name: &str, admin: (f64, f64), user: (f64, f64)| {
        println!(
            "  {name:<32} admin p50 {:>6.2} ms p99 {:>6.2} ms | user p50 {:>6.2} ms p99 {:>6.2} ms | added p50 {:>+6.2} ms p99 {:>+6.2} ms",
            admin.0,
            admin.1,
            user.0,
            user.1,
            user.0 - admin.0,
            user.1 - admin.1
        );
    };
    // The admin reads with its bearer token, as the user does: the difference is RBAC's alone,
    // not a certificate's check against a token's.
    let admin = client_for(&server.dir.path().join("kubeconfig-token.yaml")).await?;
    reads(&admin, 500, args.concurrency).await?;
    reads(&user, 500, args.concurrency).await?;
    let before = (
        reads(&admin, args.gets, args.concurrency).await?,
        reads(&user, args.gets, args.concurrency).await?,
    );
    phase("default roles only", before.0, before.1);

    let admin_for = admin.clone();
    let created = timed(args.roles, args.concurrency, move |i| {
        let roles = api(&admin_for, "clusterroles", "ClusterRole", None);
        async move {
            let rules: Vec<serde_json::Value> = (0..5)
                .map(|r| json!({"apiGroups": [format!("g{r}.example.com")], "resources": [format!("things{i}")], "verbs": ["get", "list"]}))
                .collect();
            roles
                .create(&PostParams::default(), &object(json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "metadata": {"name": format!("bench-role-{i}")}, "rules": rules})))
                .await?;
            Ok(())
        }
    })
    .await?;
    let roles = args.roles.max(1);
    let admin_for = admin.clone();
    let bound = timed(args.bindings, args.concurrency, move |i| {
        let namespace = format!("bench-{}", i % 100);
        let bindings = api(&admin_for, "rolebindings", "RoleBinding", Some(&namespace));
        // One binding in a hundred is the user's group's: its grants are what a decision walks.
        let subject = if i % 100 == 0 {
            json!({"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": "bench-team"})
        } else {
            json!({"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": format!("u-{}", i % 1000)})
        };
        async move {
            bindings
                .create(&PostParams::default(), &object(json!({
                    "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
                    "metadata": {"name": format!("bench-{i}"), "namespace": namespace},
                    "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": format!("bench-role-{}", i % roles)},
                    "subjects": [subject],
                })))
                .await?;
            Ok(())
        }
    })
    .await
    .context("create the bindings")?;
    println!(
        "  created {} ClusterRoles at {:.0}/s and {} RoleBindings at {:.0}/s",
        args.roles,
        args.roles as f64 / created.elapsed.as_secs_f64(),
        args.bindings,
        args.bindings as f64 / bound.elapsed.as_secs_f64()
    );
    // The index catches up with the last writes before the reads are timed.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let after = (
        reads(&admin, args.gets, args.concurrency).await?,
        reads(&user, args.gets, args.concurrency).await?,
    );
    phase(
        &format!("{} roles, {} bindings", args.roles, args.bindings),
        after.0,
        after.1,
    );
    Ok(())
}
