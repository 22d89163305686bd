//! The bootstrap data that joins an instance to its EKS cluster, as Cluster API AWS's EKS
//! bootstrap provider writes it, in a Secret named after the config that the infrastructure
//! provider hands to its instances:
//!
//! - EKSConfig: a bash script running Amazon Linux 2's `/etc/eks/bootstrap.sh`;
//! - NodeadmConfig: Amazon Linux 2023's MIME multipart user data, a shell part (its
//!   commands) and nodeadm's `NodeConfig` (the cluster's name, endpoint, CA and service CIDR).
//!
//! A config waits for its cluster's EKS control plane (and, for nodeadm, its kubeconfig, where
//! the CA is). Cloud-init fields (files, users, disks, mounts, NTP) are refused by name: lariat
//! does not render them yet, and dropping them silently would boot other nodes than asked.

use std::sync::Arc;
use std::time::Duration;

use base64::Engine;
use k8s_openapi::api::core::v1::Secret;
use kube::ResourceExt;
use kube::api::{Api, DynamicObject, Patch, PatchParams};
use kube::core::ApiResource;
use kube::runtime::controller::Action;
use lariat_api::aws::{
    AWSManagedControlPlane, EKSConfig, EKSConfigSpec, NodeadmConfig, NodeadmConfigSpec,
};
use lariat_api::capi::Cluster;
use lariat_controllers::Error;
use lariat_controllers::conditions::json as conditions;
use lariat_controllers::object::patch_status;
use serde_json::json;

use crate::Context;

pub fn eks_config_resource() -> ApiResource {
    ApiResource::erase::<EKSConfig>(&())
}

pub fn nodeadm_config_resource() -> ApiResource {
    ApiResource::erase::<NodeadmConfig>(&())
}

/// What a node needs to know of its cluster.
pub struct Join {
    pub eks_cluster: String,
    /// `https://...`, from the control plane.
    pub endpoint: String,
    /// The cluster's CA (base64 PEM), from its kubeconfig; `None` until that is written.
    pub ca: Option<String>,
    /// The Cluster's service CIDR, if it names one.
    pub service_cidr: Option<String>,
}

/// The first cloud-init field set that the renderers do not support, as an error.
fn unsupported(fields: [(&'static str, bool); 5]) -> Result<(), String> {
    match fields.iter().find(|(_, set)| *set) {
        Some((field, _)) => Err(format!(
            "spec.{field} is not supported by lariat yet: move it into the config's commands or remove it"
        )),
        None => Ok(()),
    }
}

/// What `bootstrap.sh` runs when the config does not override it.
const BOOTSTRAP_COMMAND: &str = "/etc/eks/bootstrap.sh";

/// EKSConfig's user data: a bash script running `bootstrap.sh` for `eks_cluster` with the
/// config's arguments, between its pre- and post-bootstrap commands.
pub fn bootstrap_sh(spec: &EKSConfigSpec, eks_cluster: &str) -> Result<String, String> {
    unsupported([
        ("diskSetup", spec.disk_setup.is_some()),
        ("files", spec.files.as_ref().is_some_and(|f| !f.is_empty())),
        (
            "mounts",
            spec.mounts.as_ref().is_some_and(|m| !m.is_empty()),
        ),
        ("ntp", spec.ntp.is_some()),
        ("users", spec.users.as_ref().is_some_and(|u| !u.is_empty())),
    ])?;
    let quote = |text: &str| format!("'{}'", text.replace('\'', r"'\''"));
    let mut arguments = vec![quote(eks_cluster)];
    if let Some(extra) = spec.kubelet_extra_args.as_ref().filter(|a| !a.is_empty()) {
        let flags: Vec<String> = extra.iter().map(|(k, v)| format!("--{k}={v}")).collect();
        arguments.push(format!("--kubelet-extra-args {}", quote(&flags.join(" "))));
    }
    if let Some(runtime) = &spec.container_runtime {
        arguments.push(format!("--container-runtime {}", quote(runtime)));
    }
    if let Some(cidr) = &spec.service_ipv6_cidr {
        arguments.push(format!(
            "--ip-family ipv6 --service-ipv6-cidr {}",
            quote(cidr)
        ));
    }
    if let Some(use_max_pods) = spec.use_max_pods {
        arguments.push(format!("--use-max-pods {use_max_pods}"));
    }
    if let Some(attempts) = spec.api_retry_attempts {
        arguments.push(format!("--aws-api-retry-attempts {attempts}"));
    }
    if let Some(docker) = &spec.docker_config_json {
        arguments.push(format!("--docker-config-json {}", quote(docker)));
    }
    if let Some(ip) = &spec.dns_cluster_ip {
        arguments.push(format!("--dns-cluster-ip {}", quote(ip)));
    }
    if let Some(pause) = &spec.pause_container {
        arguments.push(format!(
            "--pause-container-account {} --pause-container-version {}",
            quote(&pause.account_number),
            quote(&pause.version)
        ));
    }
    let command = spec
        .boostrap_command_override
        .as_deref()
        .unwrap_or(BOOTSTRAP_COMMAND);
    let mut script = String::from("#!/bin/bash\nset -o errexit\nset -o pipefail\nset -o nounset\n");
    for line in spec.pre_bootstrap_commands.iter().flatten() {
        script.push_str(line);
        script.push('\n');
    }
    script.push_str(&format!("{command} {}\n", arguments.join(" ")));
    for line in spec.post_bootstrap_commands.iter().flatten() {
        script.push_str(line);
        script.push('\n');
    }
    Ok(script)
}

/// The MIME boundary of nodeadm's multipart user data.
const BOUNDARY: &str = "//";
/// EKS's service CIDR when the Cluster names none (Cluster API AWS's default too).
const DEFAULT_SERVICE_CIDR: &str = "172.20.0.0/16";

/// NodeadmConfig's user data: a MIME multipart document of a shell part (the config's
/// commands) and nodeadm's NodeConfig, which needs the cluster's endpoint and CA.
pub fn nodeadm(spec: &NodeadmConfigSpec, join: &Join) -> Result<String, String> {
    unsupported([
        ("diskSetup", spec.disk_setup.is_some()),
        ("files", spec.files.as_ref().is_some_and(|f| !f.is_empty())),
        (
            "mounts",
            spec.mounts.as_ref().is_some_and(|m| !m.is_empty()),
        ),
        ("ntp", spec.ntp.is_some()),
        ("users", spec.users.as_ref().is_some_and(|u| !u.is_empty())),
    ])?;
    let ca = join
        .ca
        .as_deref()
        .ok_or("the cluster's CA is not known yet")?;
    let mut node = json!({
        "apiVersion": "node.eks.aws/v1alpha1",
        "kind": "NodeConfig",
        "spec": {"cluster": {
            "name": join.eks_cluster,
            "apiServerEndpoint": join.endpoint,
            "certificateAuthority": ca,
            "cidr": join.service_cidr.as_deref().unwrap_or(DEFAULT_SERVICE_CIDR),
        }},
    });
    if let Some(gates) = spec.feature_gates.as_ref().filter(|g| !g.is_empty()) {
        node["spec"]["featureGates"] = json!(gates);
    }
    if let Some(kubelet) = &spec.kubelet {
        if let Some(config) = &kubelet.config {
            node["spec"]["kubelet"]["config"] = config.clone();
        }
        if let Some(flags) = kubelet.flags.as_ref().filter(|f| !f.is_empty()) {
            node["spec"]["kubelet"]["flags"] = json!(flags);
        }
    }
    if let Some(containerd) = &spec.containerd {
        if let Some(config) = &containerd.config {
            node["spec"]["containerd"]["config"] = json!(config);
        }
        if let Some(runtime) = &containerd.base_runtime_spec {
            node["spec"]["containerd"]["baseRuntimeSpec"] = runtime.clone();
        }
    }
    let node = serde_yaml_ng::to_string(&node).map_err(|e| e.to_string())?;
    let mut commands =
        String::from("#!/bin/bash\nset -o errexit\nset -o pipefail\nset -o nounset\n");
    for line in spec.pre_nodeadm_commands.iter().flatten() {
        commands.push_str(line);
        commands.push('\n');
    }
    Ok(format!(
        "MIME-Version: 1.0\nContent-Type: multipart/mixed; boundary=\"{BOUNDARY}\"\n\n\
         --{BOUNDARY}\nContent-Type: text/x-shellscript; charset=\"us-ascii\"\n\n{commands}\n\
         --{BOUNDARY}\nContent-Type: application/node.eks.aws\n\n---\n{node}\n\
         --{BOUNDARY}--\n"
    ))
}

pub async fn reconcile_eks_config(
    object: Arc<DynamicObject>,
    ctx: Arc<Context>,
) -> Result<Action, Error> {
    reconcile(object, ctx, eks_config_resource(), |object, join| {
        let config: EKSConfig = DynamicObject::clone(object)
            .try_parse()
            .map_err(|e| e.to_string())?;
        bootstrap_sh(&config.spec, &join.eks_cluster)
    })
    .await
}

pub async fn reconcile_nodeadm_config(
    object: Arc<DynamicObject>,
    ctx: Arc<Context>,
) -> Result<Action, Error> {
    reconcile(object, ctx, nodeadm_config_resource(), |object, join| {
        let config: NodeadmConfig = DynamicObject::clone(object)
            .try_parse()
            .map_err(|e| e.to_string())?;
        nodeadm(&config.spec, join)
    })
    .await
}

/// The CA (base64 PEM) in a `<cluster>-kubeconfig` Secret.
fn kubeconfig_ca(secret: &DynamicObject) -> Option<String> {
    let value = secret.data["data"]["value"].as_str()?;
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(value)
        .ok()?;
    let kubeconfig: serde_json::Value =
        serde_yaml_ng::from_str(std::str::from_utf8(&bytes).ok()?).ok()?;
    kubeconfig["clusters"][0]["cluster"]["certificate-authority-data"]
        .as_str()
        .map(str::to_owned)
}

async fn reconcile(
    object: Arc<DynamicObject>,
    ctx: Arc<Context>,
    resource: ApiResource,
    render: impl Fn(&DynamicObject, &Join) -> Result<String, String>,
) -> Result<Action, Error> {
    let namespace = object.namespace().unwrap_or_default();
    let name = object.name_any();
    let kind = resource.kind.clone();
    let api: Api<DynamicObject> = Api::namespaced_with(ctx.client.clone(), &namespace, &resource);
    if object.metadata.deletion_timestamp.is_some() {
        return Ok(Action::await_change());
    }
    // Core labels the config with its Cluster once a MachinePool or Machine claims it.
    let Some(cluster_name) = object
        .labels()
        .get(lariat_api::capi::labels::CLUSTER_NAME)
        .cloned()
    else {
        return Ok(Action::await_change());
    };
    let mut status_conditions = conditions::existing(&object.data["status"]);
    let cluster = ctx
        .caches
        .typed::<Cluster>()
        .get(&namespace, &cluster_name)
        .await?;
    let service_cidr = cluster
        .as_ref()
        .and_then(|c| c.spec.cluster_network.as_ref())
        .and_then(|n| n.services.as_ref())
        .and_then(|s| s.cidr_blocks.first().cloned());
    let control_plane = match cluster.and_then(|c| c.spec.control_plane_ref.clone()) {
        Some(reference) if reference.kind.as_deref() == Some("AWSManagedControlPlane") => ctx
            .caches
            .of(&crate::control_plane::resource())
            .get(&namespace, reference.name.as_deref().unwrap_or_default())
            .await?
            .map(|cp| DynamicObject::clone(&cp).try_parse::<AWSManagedControlPlane>())
            .transpose()
            .map_err(|e| Error::Invalid(e.to_string()))?,
        Some(reference) => {
            let message = format!(
                "{kind} joins EKS clusters; Cluster {cluster_name}'s control plane is a {}",
                reference.kind.unwrap_or_default()
            );
            return report(
                &api,
                &object,
                &mut status_conditions,
                "InvalidClusterType",
                &message,
            )
            .await;
        }
        None => None,
    };
    let ready_cluster = control_plane.as_ref().and_then(|cp| {
        let ready = cp.status.as_ref().is_some_and(|s| s.ready);
        let endpoint = cp.spec.control_plane_endpoint.as_ref()?.host.clone()?;
        ready.then(|| Some((cp.spec.eks_cluster_name.clone()?, endpoint)))?
    });
    let Some((eks_cluster, endpoint)) = ready_cluster else {
        let waiting = "the EKS control plane is not ready yet";
        return wait(
            &ctx,
            &api,
            &object,
            status_conditions,
            "WaitingForControlPlane",
            waiting,
        )
        .await;
    };
    let ca = ctx
        .caches
        .secrets()
        .get(&namespace, &format!("{cluster_name}-kubeconfig"))
        .await?
        .and_then(|secret| kubeconfig_ca(&secret));
    let join = Join {
        eks_cluster,
        endpoint: format!("https://{endpoint}"),
        ca,
        service_cidr,
    };
    let script = match render(&object, &join) {
        Ok(script) => script,
        Err(message) if join.ca.is_none() && message.contains("CA") => {
            // Written with the control plane's kubeconfig, in a moment.
            let reason = "WaitingForKubeconfig";
            return wait(&ctx, &api, &object, status_conditions, reason, &message).await;
        }
        Err(message) => {
            return report(
                &api,
                &object,
                &mut status_conditions,
                "InvalidSpec",
                &message,
            )
            .await;
        }
    };
    write_secret(&ctx, &object, &kind, &cluster_name, &script).await?;
    conditions::set(&mut status_conditions, "DataSecretAvailable", true, "", "");
    let status = json!({
        "ready": true,
        "dataSecretName": name,
        "conditions": status_conditions,
        "observedGeneration": object.metadata.generation,
    });
    if object.data["status"]["ready"] != true
        || object.data["status"]["dataSecretName"] != status["dataSecretName"]
        || object.data["status"]["conditions"] != status["conditions"]
        || object.data["status"]["observedGeneration"] != status["observedGeneration"]
    {
        patch_status(&api, &name, status).await?;
    }
    Ok(Action::await_change())
}

/// Waits for what rendering needs: the condition says what, and the config looks again
/// shortly.
async fn wait(
    ctx: &Context,
    api: &Api<DynamicObject>,
    object: &DynamicObject,
    mut status_conditions: Vec<serde_json::Value>,
    reason: &str,
    message: &str,
) -> Result<Action, Error> {
    conditions::set(
        &mut status_conditions,
        "DataSecretAvailable",
        false,
        reason,
        message,
    );
    if status_conditions != conditions::existing(&object.data["status"]) {
        let status = json!({"conditions": status_conditions});
        patch_status(api, &object.name_any(), status).await?;
    }
    Ok(Action::requeue(
        ctx.identities.aws().settings().poll_while_changing,
    ))
}

/// Writes the rendered script into the config's data Secret (named as the config, owned by
/// it), as Cluster API's bootstrap contract asks.
async fn write_secret(
    ctx: &Context,
    object: &DynamicObject,
    kind: &str,
    cluster_name: &str,
    script: &str,
) -> Result<(), Error> {
    let (namespace, name) = (object.namespace().unwrap_or_default(), object.name_any());
    let secret: Secret = serde_json::from_value(json!({
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": {lariat_api::capi::labels::CLUSTER_NAME: cluster_name},
            "ownerReferences": [{"apiVersion": "bootstrap.cluster.x-k8s.io/v1beta2", "kind": kind,
                                 "name": name, "uid": object.uid().unwrap_or_default(), "controller": true}],
        },
        "type": "cluster.x-k8s.io/secret",
        "data": {"value": base64::engine::general_purpose::STANDARD.encode(script)},
    }))
    .map_err(|e| Error::Invalid(e.to_string()))?;
    Api::<Secret>::namespaced(ctx.client.clone(), &namespace)
        .patch(
            &name,
            &PatchParams::apply("lariat-eks-bootstrap").force(),
            &Patch::Apply(&secret),
        )
        .await?;
    Ok(())
}

/// A config that cannot be rendered: the condition says why; a change of the config wakes it.
async fn report(
    api: &Api<DynamicObject>,
    object: &DynamicObject,
    status_conditions: &mut Vec<serde_json::Value>,
    reason: &str,
    message: &str,
) -> Result<Action, Error> {
    conditions::set(
        status_conditions,
        "DataSecretAvailable",
        false,
        reason,
        message,
    );
    if *status_conditions != conditions::existing(&object.data["status"]) {
        patch_status(
            api,
            &object.name_any(),
            json!({"ready": false, "conditions": status_conditions}),
        )
        .await?;
    }
    Ok(Action::requeue(Duration::from_secs(600)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn eks_config_is_bootstrap_sh_with_the_configs_arguments() {
        let spec: EKSConfigSpec = serde_json::from_value(json!({
            "kubeletExtraArgs": {"node-labels": "pool=a", "max-pods": "20"},
            "containerRuntime": "containerd",
            "apiRetryAttempts": 3,
            "preBootstrapCommands": ["echo before"],
            "postBootstrapCommands": ["echo after"],
        }))
        .unwrap();
        assert_eq!(
            bootstrap_sh(&spec, "team-a_prod").unwrap(),
            "#!/bin/bash\nset -o errexit\nset -o pipefail\nset -o nounset\necho before\n/etc/eks/bootstrap.sh 'team-a_prod' --kubelet-extra-args '--max-pods=20 --node-labels=pool=a' --container-runtime 'containerd' --aws-api-retry-attempts 3\necho after\n"
        );
        // Quotes in values cannot end the argument.
        let spec: EKSConfigSpec =
            serde_json::from_value(json!({"dnsClusterIP": "x'; rm -rf /; '"})).unwrap();
        assert!(
            bootstrap_sh(&spec, "c")
                .unwrap()
                .contains(r"--dns-cluster-ip 'x'\''; rm -rf /; '\'''")
        );
        let spec: EKSConfigSpec =
            serde_json::from_value(json!({"users": [{"name": "ops"}]})).unwrap();
        assert_eq!(
            bootstrap_sh(&spec, "c").unwrap_err(),
            "spec.users is not supported by lariat yet: move it into the config's commands or remove it"
        );
    }

    #[test]
    fn nodeadm_config_is_mime_with_a_node_config() {
        let spec: NodeadmConfigSpec = serde_json::from_value(json!({
            "kubelet": {"flags": ["--node-labels=pool=a"], "config": {"maxPods": 20}},
            "preNodeadmCommands": ["echo before"],
        }))
        .unwrap();
        let join = Join {
            eks_cluster: "team-a_prod".into(),
            endpoint: "https://ABC.gr7.us-east-1.eks.amazonaws.com".into(),
            ca: Some("Q0E=".into()),
            service_cidr: None,
        };
        let data = nodeadm(&spec, &join).unwrap();
        assert!(
            data.starts_with("MIME-Version: 1.0\nContent-Type: multipart/mixed; boundary=\"//\"\n"),
            "{data}"
        );
        assert!(
            data.contains(
                "#!/bin/bash\nset -o errexit\nset -o pipefail\nset -o nounset\necho before\n"
            ),
            "{data}"
        );
        let node = data
            .split("Content-Type: application/node.eks.aws\n\n---\n")
            .nth(1)
            .and_then(|rest| rest.split("\n--//--").next())
            .unwrap();
        let node: serde_json::Value = serde_yaml_ng::from_str(node).unwrap();
        assert_eq!(
            node["spec"],
            json!({
                "cluster": {"name": "team-a_prod", "apiServerEndpoint": "https://ABC.gr7.us-east-1.eks.amazonaws.com",
                            "certificateAuthority": "Q0E=", "cidr": "172.20.0.0/16"},
                "kubelet": {"config": {"maxPods": 20}, "flags": ["--node-labels=pool=a"]},
            })
        );
        assert!(data.ends_with("--//--\n"));
        let waiting = Join { ca: None, ..join };
        assert_eq!(
            nodeadm(&spec, &waiting).unwrap_err(),
            "the cluster's CA is not known yet"
        );
    }
}
