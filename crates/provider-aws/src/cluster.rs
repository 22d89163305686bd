//! AWSCluster: the infrastructure of a cluster whose control plane runs on EC2 instances (a
//! KubeadmControlPlane's AWSMachines), as Cluster API AWS builds it: the network, the
//! cluster's security groups with their rules, and a classic load balancer in front of the
//! API servers, whose DNS name becomes the control plane's endpoint. Once the spec's changes
//! are walked, a steady pass reads only the load balancer. Deletion waits for the cluster's
//! AWSMachines, then removes the load balancer, the groups and the network, each found by
//! name or tags.

use std::collections::BTreeSet;
use std::sync::Arc;

use kube::ResourceExt;
use kube::api::{Api, DynamicObject};
use kube::core::ApiResource;
use kube::runtime::controller::Action;
use lariat_api::aws::AWSCluster;
use lariat_api::aws::network::SecurityGroupRole as Role;
use lariat_controllers::Error;
use lariat_controllers::cache::IndexKey;
use lariat_controllers::conditions::json as conditions;
use lariat_controllers::events::EventType;
use lariat_controllers::object::{ensure_finalizer, patch, patch_status, remove_finalizer};
use serde_json::{Value, json};

use crate::load_balancer::{self, API_SERVER_PORT};
use crate::network::{self, Network};
use crate::tags::Owner;
use crate::{Context, Failure, security_groups};

pub const FINALIZER: &str = "awscluster.infrastructure.cluster.x-k8s.io";

pub fn resource() -> ApiResource {
    ApiResource::erase::<AWSCluster>(&())
}

pub async fn reconcile(object: Arc<DynamicObject>, ctx: Arc<Context>) -> Result<Action, Error> {
    // Cluster API's paused contract, deletion included (see `object_paused`).
    if lariat_controllers::cluster::object_paused(&ctx.caches, &object.metadata).await? {
        return Ok(lariat_controllers::resync());
    }
    let namespace = object.namespace().unwrap_or_default();
    let name = object.name_any();
    let api: Api<DynamicObject> = Api::namespaced_with(ctx.client.clone(), &namespace, &resource());
    let aws_cluster: AWSCluster = DynamicObject::clone(&object)
        .try_parse()
        .map_err(|e| Error::Invalid(format!("AWSCluster {namespace}/{name}: {e}")))?;
    // The owner reference, or (once it had one: an orphaning delete strips it) the label
    // core set with it, so what was made is still found and deleted.
    let cluster = crate::control_plane::owning_cluster(&object).or_else(|| {
        object
            .labels()
            .get(lariat_api::capi::labels::CLUSTER_NAME)
            .filter(|_| object.finalizers().iter().any(|f| f == FINALIZER))
            .cloned()
    });
    let Some(cluster) = cluster else {
        if object.metadata.deletion_timestamp.is_some() {
            // Never walked (the finalizer comes first): nothing was made.
            remove_finalizer(&api, &object, FINALIZER).await?;
        }
        // Contract: wait until core has set the owner reference (that write wakes this).
        return Ok(Action::await_change());
    };
    let owner = Owner {
        namespace: namespace.clone(),
        cluster: cluster.clone(),
        additional: aws_cluster.spec.additional_tags.clone().unwrap_or_default(),
    };
    let mut status_conditions = conditions::existing(&object.data["status"]);
    let session = match crate::session(
        &ctx,
        &namespace,
        aws_cluster.spec.region.as_deref(),
        aws_cluster.spec.identity_ref.as_ref(),
        &mut status_conditions,
    )
    .await
    {
        Ok(session) => session,
        Err(failure) => return report(&ctx, &api, &object, &mut status_conditions, failure).await,
    };
    let aws = session.aws();
    let elb = aws.elb(&session.config);
    let ec2 = aws.ec2(&session.config);
    let balancer_name = load_balancer::name(
        &cluster,
        aws_cluster.spec.control_plane_load_balancer.as_ref(),
    );
    let settings = aws.settings();

    if object.metadata.deletion_timestamp.is_some() {
        // The cluster's instances go first: they hold the groups and subnets.
        let machines = ctx
            .caches
            .of(&crate::machine::resource())
            .indexed(IndexKey::Cluster {
                namespace: &namespace,
                name: &cluster,
            })
            .await?
            .len();
        if machines > 0 {
            let message = format!("waiting for the cluster's {machines} AWSMachine(s) to go");
            conditions::set(&mut status_conditions, "Ready", false, "Deleting", &message);
            if json!(status_conditions) != object.data["status"]["conditions"] {
                patch_status(&api, &name, json!({"conditions": status_conditions})).await?;
            }
            return Ok(Action::requeue(settings.poll_while_changing));
        }
        let deleted = async {
            if load_balancer::delete(&elb, &owner, &balancer_name).await? {
                // ELB releases its network interfaces, which hold the subnets, a moment later.
                return Ok(true);
            }
            network::delete(&ec2, &owner).await
        }
        .await;
        return match deleted {
            Ok(true) => Ok(Action::requeue(settings.poll_while_changing)),
            Ok(false) => {
                ctx.events
                    .publish(
                        object.as_ref(),
                        "AWSCluster",
                        EventType::Normal,
                        "Deleted",
                        &format!(
                            "the load balancer, security groups and network lariat made for {cluster} are deleted"
                        ),
                    )
                    .await;
                remove_finalizer(&api, &object, FINALIZER).await?;
                Ok(Action::await_change())
            }
            Err(error) => {
                let failure = Failure::new("Ready", &error.code, error.message);
                report(&ctx, &api, &object, &mut status_conditions, failure).await
            }
        };
    }
    if ensure_finalizer(&api, &object, FINALIZER).await? {
        return Ok(Action::await_change());
    }

    // Walked when the spec changed or it is not ready yet; in between, one read says the load
    // balancer (all a control plane needs of this) is still there.
    let steady = object.data["status"]["ready"] == true
        && conditions::is_true(&status_conditions, "Ready")
        && object.annotations().get(OBSERVED_GENERATION)
            == object.metadata.generation.map(|g| g.to_string()).as_ref();
    if steady {
        match load_balancer::exists(&elb, &balancer_name).await {
            Ok(true) => return Ok(Action::requeue(settings.sync_period)),
            Ok(false) => {}
            Err(error) => {
                let failure = Failure::transient("LoadBalancerReady", &error.code, error.message);
                return report(&ctx, &api, &object, &mut status_conditions, failure).await;
            }
        }
    }

    let spec = &aws_cluster.spec;
    let network_spec = spec.network.clone().unwrap_or_default();
    let cni_rules = network_spec
        .cni
        .as_ref()
        .and_then(|c| c.cni_ingress_rules.clone());
    let groups = security_groups::kubeadm_cluster(
        cni_rules.as_deref(),
        network_spec
            .node_port_ingress_rule_cidr_blocks
            .as_deref()
            .unwrap_or_default(),
    );
    let network = match network::ensure(&ec2, &owner, &network_spec, &groups).await {
        Ok(network) => network,
        Err(error) => {
            let failure = Failure::new("VpcReady", &error.code, error.message);
            return report(&ctx, &api, &object, &mut status_conditions, failure).await;
        }
    };
    for condition in [
        "VpcReady",
        "SubnetsReady",
        "InternetGatewayReady",
        "NatGatewaysReady",
        "RouteTablesReady",
        "ClusterSecurityGroupsReady",
    ] {
        conditions::set(&mut status_conditions, condition, true, "", "");
    }

    let balancer_spec = spec.control_plane_load_balancer.clone().unwrap_or_default();
    let internal = balancer_spec.scheme.as_deref() == Some("internal");
    let subnets = match balancer_subnets(&network, internal, balancer_spec.subnets.as_deref()) {
        Ok(subnets) => subnets,
        Err(message) => {
            let failure = Failure::new("LoadBalancerReady", "InvalidSpec", message);
            return report(&ctx, &api, &object, &mut status_conditions, failure).await;
        }
    };
    let mut balancer_groups = balancer_spec
        .additional_security_groups
        .clone()
        .unwrap_or_default();
    balancer_groups.push(network.group_id(Role::ApiserverLb).to_owned());
    let wanted = load_balancer::Wanted {
        name: balancer_name.clone(),
        internal,
        subnet_ids: subnets.iter().map(|(id, _)| id.clone()).collect(),
        security_group_ids: balancer_groups,
        cross_zone: balancer_spec.cross_zone_load_balancing.unwrap_or(false),
        health_check_protocol: balancer_spec
            .health_check_protocol
            .clone()
            .unwrap_or_else(|| "TCP".into()),
    };
    let balancer = match load_balancer::ensure(&elb, &owner, &wanted).await {
        Ok(balancer) => balancer,
        Err(error) => {
            let failure = Failure::new("LoadBalancerReady", &error.code, error.message);
            return report(&ctx, &api, &object, &mut status_conditions, failure).await;
        }
    };
    let Some(dns_name) = balancer.dns_name.clone().filter(|d| !d.is_empty()) else {
        conditions::set(
            &mut status_conditions,
            "LoadBalancerReady",
            false,
            "WaitForDNSName",
            &format!("load balancer {balancer_name} has no DNS name yet"),
        );
        conditions::set(&mut status_conditions, "Ready", false, "WaitForDNSName", "");
        patch_status(&api, &name, json!({"conditions": status_conditions})).await?;
        return Ok(Action::requeue(settings.poll_while_changing));
    };
    conditions::set(&mut status_conditions, "LoadBalancerReady", true, "", "");
    conditions::set(&mut status_conditions, "Ready", true, "", "");

    // The spec records what was found or made, as Cluster API AWS's does, and the endpoint
    // once: a control plane's certificates name it.
    let mut spec_patch = json!({"network": network.spec_record()});
    if spec
        .control_plane_endpoint
        .as_ref()
        .is_none_or(|e| e.host.as_deref().unwrap_or_default().is_empty())
    {
        spec_patch["controlPlaneEndpoint"] = json!({"host": dns_name, "port": API_SERVER_PORT});
    }
    let mut observed_generation = object.metadata.generation;
    if !crate::control_plane::contains(&object.data["spec"], &spec_patch) {
        let recorded = patch(&api, &name, json!({"spec": spec_patch})).await?;
        if recorded.metadata.generation == observed_generation.map(|g| g + 1) {
            observed_generation = recorded.metadata.generation;
        }
    }

    let zones: Vec<String> = subnets
        .iter()
        .map(|(_, zone)| zone.clone())
        .collect::<BTreeSet<_>>()
        .into_iter()
        .collect();
    let failure_domains: serde_json::Map<String, Value> = network
        .subnets
        .iter()
        .filter(|s| s.is_public != Some(true))
        .filter_map(|s| s.availability_zone.clone())
        .map(|zone| {
            let control_plane = zones.contains(&zone);
            (zone, json!({"controlPlane": control_plane}))
        })
        .collect();
    let security_group_status: serde_json::Map<String, Value> = groups
        .iter()
        .filter_map(|wanted| {
            let group = network.security_groups.get(&wanted.role)?;
            let rules = security_groups::status_rules(
                wanted.rules.as_deref().unwrap_or_default(),
                &network.security_groups,
            );
            Some((
                wanted.role.as_str().to_owned(),
                json!({"id": group.id, "name": group.name, "ingressRule": rules}),
            ))
        })
        .collect();
    let stored = conditions::existing(&object.data["status"]);
    conditions::keep_transition_times(&mut status_conditions, &stored);
    let status = json!({
        "ready": true,
        "failureDomains": failure_domains,
        "networkStatus": {
            "securityGroups": security_group_status,
            "apiServerElb": balancer.status(&zones),
            "natGatewaysIPs": network.nat_gateway_ips,
        },
        "conditions": status_conditions,
    });
    if !crate::control_plane::contains(&object.data["status"], &status) {
        patch_status(&api, &name, status).await?;
        if object.data["status"]["ready"] != true {
            ctx.events
                .publish(
                    object.as_ref(),
                    "AWSCluster",
                    EventType::Normal,
                    "InfrastructureReady",
                    &format!(
                        "network, security groups and load balancer {balancer_name} ready: the control plane's endpoint is {dns_name}:{API_SERVER_PORT}"
                    ),
                )
                .await;
        }
    }
    let observed = observed_generation.map(|g| g.to_string());
    if object.annotations().get(OBSERVED_GENERATION) != observed.as_ref() {
        patch(
            &api,
            &name,
            json!({"metadata": {"annotations": {OBSERVED_GENERATION: observed}}}),
        )
        .await?;
    }
    Ok(Action::requeue(settings.sync_period))
}

/// The generation whose spec the AWS resources were last walked for (Cluster API AWS's status
/// has no `observedGeneration`).
const OBSERVED_GENERATION: &str = "lariat.dev/observed-generation";

/// The load balancer's subnets, with their zones: the spec's, else the first public (or, for
/// an internal one, private) subnet of each zone, as Cluster API AWS picks them; or what is
/// wrong.
fn balancer_subnets(
    network: &Network,
    internal: bool,
    named: Option<&[String]>,
) -> Result<Vec<(String, String)>, String> {
    if let Some(unknown) = named
        .into_iter()
        .flatten()
        .find(|id| !network.subnets.iter().any(|s| &s.id == *id))
    {
        return Err(format!(
            "spec.controlPlaneLoadBalancer.subnets names {unknown}, which is not a subnet of the cluster's network (spec.network.subnets)"
        ));
    }
    let mut zones = BTreeSet::new();
    let subnets: Vec<(String, String)> = network
        .subnets
        .iter()
        .filter(|s| match named {
            Some(named) => named.contains(&s.id),
            None => (s.is_public == Some(true)) != internal,
        })
        .filter(|s| named.is_some() || zones.insert(s.availability_zone.clone()))
        .map(|s| {
            (
                s.id.clone(),
                s.availability_zone.clone().unwrap_or_default(),
            )
        })
        .collect();
    if subnets.is_empty() {
        return Err(format!(
            "the cluster's network has no {} subnet for the load balancer: mark one in spec.network.subnets (isPublic), or name them in spec.controlPlaneLoadBalancer.subnets",
            if internal { "private" } else { "public" }
        ));
    }
    Ok(subnets)
}

async fn report(
    ctx: &Context,
    api: &Api<DynamicObject>,
    object: &DynamicObject,
    status_conditions: &mut Vec<Value>,
    failure: Failure,
) -> Result<Action, Error> {
    let wait =
        crate::report_failure(ctx, api, object, status_conditions, failure, json!({})).await?;
    Ok(Action::requeue(wait))
}
