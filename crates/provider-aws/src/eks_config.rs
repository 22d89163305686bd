//! EKSConfig (bootstrap.cluster.x-k8s.io): the user data that joins an instance to its EKS
//! cluster, as Cluster API AWS's EKS bootstrap provider writes it for Amazon Linux 2's
//! `/etc/eks/bootstrap.sh`, in a Secret named after the config that the infrastructure
//! provider hands to its instances. The config waits for its cluster's EKS control plane.

use std::sync::Arc;
use std::time::Duration;

use base64::Engine;
use k8s_openapi::api::core::v1::Secret;
use kube::ResourceExt;
use kube::api::{Api, DynamicObject, Patch, PatchParams};
use kube::core::ApiResource;
use kube::runtime::controller::Action;
use lariat_api::aws::{AWSManagedControlPlane, EKSConfig, EKSConfigSpec};
use lariat_api::capi::Cluster;
use lariat_controllers::Error;
use lariat_controllers::conditions::json as conditions;
use lariat_controllers::object::patch_status;
use serde_json::json;

use crate::Context;

pub fn resource() -> ApiResource {
    ApiResource::erase::<EKSConfig>(&())
}

/// What `bootstrap.sh` runs when the config does not override it.
const BOOTSTRAP_COMMAND: &str = "/etc/eks/bootstrap.sh";

/// The user data: a bash script running `bootstrap.sh` for `eks_cluster` with the config's
/// arguments, between its pre- and post-bootstrap commands. The config's cloud-init fields
/// (files, users, disks, mounts, NTP) are refused by name: lariat does not render them yet,
/// and dropping them silently would boot nodes other than the ones asked for.
pub fn user_data(spec: &EKSConfigSpec, eks_cluster: &str) -> Result<String, String> {
    let unsupported = [
        ("diskSetup", spec.disk_setup.is_some()),
        ("files", spec.files.as_ref().is_some_and(|f| !f.is_empty())),
        (
            "mounts",
            spec.mounts.as_ref().is_some_and(|m| !m.is_empty()),
        ),
        ("ntp", spec.ntp.is_some()),
        ("users", spec.users.as_ref().is_some_and(|u| !u.is_empty())),
    ];
    if let Some((field, _)) = unsupported.iter().find(|(_, set)| *set) {
        return Err(format!(
            "spec.{field} is not supported by lariat yet: move it into preBootstrapCommands or remove it"
        ));
    }
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

pub async fn reconcile(object: Arc<DynamicObject>, ctx: Arc<Context>) -> Result<Action, Error> {
    let namespace = object.namespace().unwrap_or_default();
    let name = object.name_any();
    let api: Api<DynamicObject> = Api::namespaced_with(ctx.client.clone(), &namespace, &resource());
    if object.metadata.deletion_timestamp.is_some() {
        return Ok(Action::await_change());
    }
    let config: EKSConfig = DynamicObject::clone(&object)
        .try_parse()
        .map_err(|e| Error::Invalid(format!("EKSConfig {namespace}/{name}: {e}")))?;
    // Core labels the config with its Cluster once a MachinePool or Machine claims it.
    let Some(cluster_name) = object
        .labels()
        .get(lariat_api::capi::labels::CLUSTER_NAME)
        .cloned()
    else {
        return Ok(Action::await_change());
    };
    let mut status_conditions = conditions::existing(&object.data["status"]);
    let control_plane = match ctx
        .caches
        .typed::<Cluster>()
        .get(&namespace, &cluster_name)
        .await?
        .and_then(|c| c.spec.control_plane_ref.clone())
    {
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
                "EKSConfig joins EKS clusters; Cluster {cluster_name}'s control plane is a {}",
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
        cp.status
            .as_ref()
            .is_some_and(|s| s.ready)
            .then(|| cp.spec.eks_cluster_name.clone())
            .flatten()
    });
    let Some(eks_cluster) = ready_cluster else {
        conditions::set(
            &mut status_conditions,
            "DataSecretAvailable",
            false,
            "WaitingForControlPlane",
            "the EKS control plane is not ready yet",
        );
        if status_conditions != conditions::existing(&object.data["status"]) {
            patch_status(&api, &name, json!({"conditions": status_conditions})).await?;
        }
        return Ok(Action::requeue(
            ctx.identities.aws().settings().poll_while_changing,
        ));
    };
    let script = match user_data(&config.spec, &eks_cluster) {
        Ok(script) => script,
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
    let secret: Secret = serde_json::from_value(json!({
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": {lariat_api::capi::labels::CLUSTER_NAME: cluster_name},
            "ownerReferences": [{"apiVersion": "bootstrap.cluster.x-k8s.io/v1beta2", "kind": "EKSConfig",
                                 "name": name, "uid": object.uid().unwrap_or_default(), "controller": true}],
        },
        "type": "cluster.x-k8s.io/secret",
        "data": {"value": base64::engine::general_purpose::STANDARD.encode(&script)},
    }))
    .map_err(|e| Error::Invalid(e.to_string()))?;
    Api::<Secret>::namespaced(ctx.client.clone(), &namespace)
        .patch(
            &name,
            &PatchParams::apply("lariat-eks-bootstrap").force(),
            &Patch::Apply(&secret),
        )
        .await?;
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
    fn user_data_is_bootstrap_sh_with_the_configs_arguments() {
        let spec: EKSConfigSpec = serde_json::from_value(json!({
            "kubeletExtraArgs": {"node-labels": "pool=a", "max-pods": "20"},
            "containerRuntime": "containerd",
            "apiRetryAttempts": 3,
            "preBootstrapCommands": ["echo before"],
            "postBootstrapCommands": ["echo after"],
        }))
        .unwrap();
        assert_eq!(
            user_data(&spec, "team-a_prod").unwrap(),
            "#!/bin/bash\nset -o errexit\nset -o pipefail\nset -o nounset\necho before\n/etc/eks/bootstrap.sh 'team-a_prod' --kubelet-extra-args '--max-pods=20 --node-labels=pool=a' --container-runtime 'containerd' --aws-api-retry-attempts 3\necho after\n"
        );
        // Quotes in values cannot end the argument.
        let spec: EKSConfigSpec =
            serde_json::from_value(json!({"dnsClusterIP": "x'; rm -rf /; '"})).unwrap();
        assert!(
            user_data(&spec, "c")
                .unwrap()
                .contains(r"--dns-cluster-ip 'x'\''; rm -rf /; '\'''")
        );
        let spec: EKSConfigSpec =
            serde_json::from_value(json!({"users": [{"name": "ops"}]})).unwrap();
        assert_eq!(
            user_data(&spec, "c").unwrap_err(),
            "spec.users is not supported by lariat yet: move it into preBootstrapCommands or remove it"
        );
    }
}
