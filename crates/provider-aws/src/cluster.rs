//! AWSCluster: the infrastructure of a cluster whose control plane runs on EC2 instances (a
//! KubeadmControlPlane's AWSMachines), as Cluster API AWS builds it: the network, the
//! cluster's security groups with their rules, and a classic load balancer in front of the
//! API servers, whose DNS name becomes the control plane's endpoint. Once the spec's changes
//! are walked, a steady pass reads only the load balancer. Deletion waits for the cluster's
//! AWSMachines, then removes the load balancer, the groups and the network, each found by
//! name or tags.

use std::collections::BTreeSet;
use std::ops::ControlFlow;
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

use crate::identity::Session;
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
    let mut pass = match Pass::start(&object, &ctx).await? {
        ControlFlow::Continue(pass) => pass,
        ControlFlow::Break(action) => return Ok(action),
    };
    if object.metadata.deletion_timestamp.is_some() {
        return pass.delete().await;
    }
    if ensure_finalizer(&pass.api, &object, FINALIZER).await? {
        return Ok(Action::await_change());
    }
    if let ControlFlow::Break(action) = pass.steady().await? {
        return Ok(action);
    }
    pass.walk().await
}

/// One reconcile of an AWSCluster core has claimed for its Cluster: the AWS clients of its
/// region and the status conditions it builds.
struct Pass<'a> {
    ctx: &'a Context,
    object: &'a DynamicObject,
    api: Api<DynamicObject>,
    name: String,
    aws_cluster: AWSCluster,
    cluster: String,
    owner: Owner,
    session: Session,
    elb: aws_sdk_elasticloadbalancing::Client,
    balancer_name: String,
    conditions: Vec<Value>,
}

impl<'a> Pass<'a> {
    /// Finds the Cluster and a session in its region; ends the reconcile while either is
    /// missing.
    async fn start(
        object: &'a DynamicObject,
        ctx: &'a Context,
    ) -> Result<ControlFlow<Action, Pass<'a>>, Error> {
        let namespace = object.namespace().unwrap_or_default();
        let name = object.name_any();
        let api: Api<DynamicObject> =
            Api::namespaced_with(ctx.client.clone(), &namespace, &resource());
        let aws_cluster: AWSCluster = lariat_controllers::object::parse(object)?;
        // The owner reference, or (once it had one: an orphaning delete strips it) the label
        // core set with it, so what was made is still found and deleted.
        let cluster = crate::control_plane::owning_cluster(object).or_else(|| {
            object
                .labels()
                .get(lariat_api::capi::labels::CLUSTER_NAME)
                .filter(|_| object.finalizers().iter().any(|f| f == FINALIZER))
                .cloned()
        });
        let Some(cluster) = cluster else {
            if object.metadata.deletion_timestamp.is_some() {
                // Never walked (the finalizer comes first): nothing was made.
                remove_finalizer(&api, object, FINALIZER).await?;
            }
            // Contract: wait until core has set the owner reference (that write wakes this).
            return Ok(ControlFlow::Break(Action::await_change()));
        };
        let owner = Owner {
            namespace: namespace.clone(),
            cluster: cluster.clone(),
            additional: aws_cluster.spec.additional_tags.clone().unwrap_or_default(),
        };
        let mut status_conditions = conditions::existing(&object.data["status"]);
        let session = match crate::session(
            ctx,
            &namespace,
            aws_cluster.spec.region.as_deref(),
            aws_cluster.spec.identity_ref.as_ref(),
            &mut status_conditions,
        )
        .await
        {
            Ok(session) => session,
            Err(failure) => {
                let action = report(ctx, &api, object, &mut status_conditions, failure).await?;
                return Ok(ControlFlow::Break(action));
            }
        };
        let elb = session.aws().elb(&session.config);
        let balancer_name = load_balancer::name(
            &cluster,
            aws_cluster.spec.control_plane_load_balancer.as_ref(),
        );
        Ok(ControlFlow::Continue(Pass {
            ctx,
            object,
            api,
            name,
            aws_cluster,
            cluster,
            owner,
            session,
            elb,
            balancer_name,
            conditions: status_conditions,
        }))
    }

    fn poll(&self) -> std::time::Duration {
        self.session.aws().settings().poll_while_changing
    }

    /// Reports a failure; the reconcile ends with its retry.
    async fn fail(&mut self, failure: Failure) -> Result<Action, Error> {
        report(
            self.ctx,
            &self.api,
            self.object,
            &mut self.conditions,
            failure,
        )
        .await
    }

    /// Deletes what was made once the cluster's instances are gone (they hold the groups and
    /// subnets): the load balancer, then the network.
    async fn delete(&mut self) -> Result<Action, Error> {
        let machines = self
            .ctx
            .caches
            .of(&crate::machine::resource())
            .indexed(IndexKey::Cluster {
                namespace: &self.owner.namespace,
                name: &self.cluster,
            })
            .await?
            .len();
        if machines > 0 {
            let message = format!("waiting for the cluster's {machines} AWSMachine(s) to go");
            conditions::set(&mut self.conditions, "Ready", false, "Deleting", &message);
            if json!(self.conditions) != self.object.data["status"]["conditions"] {
                patch_status(
                    &self.api,
                    &self.name,
                    json!({"conditions": self.conditions}),
                )
                .await?;
            }
            return Ok(Action::requeue(self.poll()));
        }
        let ec2 = self.session.aws().ec2(&self.session.config);
        let deleted = async {
            if load_balancer::delete(&self.elb, &self.owner, &self.balancer_name).await? {
                // ELB releases its network interfaces, which hold the subnets, a moment later.
                return Ok(true);
            }
            network::delete(&ec2, &self.owner).await
        }
        .await;
        match deleted {
            Ok(true) => Ok(Action::requeue(self.poll())),
            Ok(false) => {
                let message = format!(
                    "the load balancer, security groups and network lariat made for {} are deleted",
                    self.cluster
                );
                self.event("Deleted", &message).await;
                remove_finalizer(&self.api, self.object, FINALIZER).await?;
                Ok(Action::await_change())
            }
            Err(error) => {
                let failure = Failure::new("Ready", &error.code, error.message);
                self.fail(failure).await
            }
        }
    }

    async fn event(&self, reason: &str, message: &str) {
        self.ctx
            .events
            .publish(
                self.object,
                "AWSCluster",
                EventType::Normal,
                reason,
                message,
            )
            .await;
    }

    /// Walked when the spec changed or it is not ready yet; in between, one read says the
    /// load balancer (all a control plane needs of this) is still there.
    async fn steady(&mut self) -> Result<ControlFlow<Action>, Error> {
        let steady = self.object.data["status"]["ready"] == true
            && conditions::is_true(&self.conditions, "Ready")
            && self.object.annotations().get(OBSERVED_GENERATION)
                == self
                    .object
                    .metadata
                    .generation
                    .map(|g| g.to_string())
                    .as_ref();
        if !steady {
            return Ok(ControlFlow::Continue(()));
        }
        match load_balancer::exists(&self.elb, &self.balancer_name).await {
            Ok(true) => Ok(ControlFlow::Break(Action::requeue(
                self.session.aws().settings().sync_period,
            ))),
            Ok(false) => Ok(ControlFlow::Continue(())),
            Err(error) => {
                let failure = Failure::transient("LoadBalancerReady", &error.code, error.message);
                Ok(ControlFlow::Break(self.fail(failure).await?))
            }
        }
    }

    /// Makes (or finds) the network, the security groups and the load balancer the spec
    /// asks for, records them in the spec and reports them in the status.
    async fn walk(&mut self) -> Result<Action, Error> {
        let network_spec = self.aws_cluster.spec.network.clone().unwrap_or_default();
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
        let ec2 = self.session.aws().ec2(&self.session.config);
        let network = match network::ensure(&ec2, &self.owner, &network_spec, &groups).await {
            Ok(network) => network,
            Err(error) => {
                let failure = Failure::new("VpcReady", &error.code, error.message);
                return self.fail(failure).await;
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
            conditions::set(&mut self.conditions, condition, true, "", "");
        }
        let (balancer, subnets) = match self.balancer(&network).await? {
            ControlFlow::Continue(found) => found,
            ControlFlow::Break(action) => return Ok(action),
        };
        let Some(dns_name) = balancer.dns_name.clone().filter(|d| !d.is_empty()) else {
            conditions::set(
                &mut self.conditions,
                "LoadBalancerReady",
                false,
                "WaitForDNSName",
                &format!("load balancer {} has no DNS name yet", self.balancer_name),
            );
            conditions::set(&mut self.conditions, "Ready", false, "WaitForDNSName", "");
            patch_status(
                &self.api,
                &self.name,
                json!({"conditions": self.conditions}),
            )
            .await?;
            return Ok(Action::requeue(self.poll()));
        };
        conditions::set(&mut self.conditions, "LoadBalancerReady", true, "", "");
        conditions::set(&mut self.conditions, "Ready", true, "", "");
        let observed_generation = self.record(&network, &dns_name).await?;
        let zones: Vec<String> = subnets
            .iter()
            .map(|(_, zone)| zone.clone())
            .collect::<BTreeSet<_>>()
            .into_iter()
            .collect();
        self.report_ready(&network, &groups, &balancer, &zones, &dns_name)
            .await?;
        let observed = observed_generation.map(|g| g.to_string());
        if self.object.annotations().get(OBSERVED_GENERATION) != observed.as_ref() {
            patch(
                &self.api,
                &self.name,
                json!({"metadata": {"annotations": {OBSERVED_GENERATION: observed}}}),
            )
            .await?;
        }
        Ok(Action::requeue(self.session.aws().settings().sync_period))
    }

    /// The load balancer in front of the API servers, in the subnets it spans (`(id, zone)`).
    async fn balancer(
        &mut self,
        network: &Network,
    ) -> Result<ControlFlow<Action, (load_balancer::Balancer, Vec<(String, String)>)>, Error> {
        let balancer_spec = self
            .aws_cluster
            .spec
            .control_plane_load_balancer
            .clone()
            .unwrap_or_default();
        let internal = balancer_spec.scheme.as_deref() == Some("internal");
        let subnets = match balancer_subnets(network, internal, balancer_spec.subnets.as_deref()) {
            Ok(subnets) => subnets,
            Err(message) => {
                let failure = Failure::new("LoadBalancerReady", "InvalidSpec", message);
                return Ok(ControlFlow::Break(self.fail(failure).await?));
            }
        };
        let mut balancer_groups = balancer_spec
            .additional_security_groups
            .clone()
            .unwrap_or_default();
        balancer_groups.push(network.group_id(Role::ApiserverLb).to_owned());
        let wanted = load_balancer::Wanted {
            name: self.balancer_name.clone(),
            internal,
            subnet_ids: subnets.iter().map(|(id, _)| id.clone()).collect(),
            security_group_ids: balancer_groups,
            cross_zone: balancer_spec.cross_zone_load_balancing.unwrap_or(false),
            health_check_protocol: balancer_spec
                .health_check_protocol
                .clone()
                .unwrap_or_else(|| "TCP".into()),
        };
        match load_balancer::ensure(&self.elb, &self.owner, &wanted).await {
            Ok(balancer) => Ok(ControlFlow::Continue((balancer, subnets))),
            Err(error) => {
                let failure = Failure::new("LoadBalancerReady", &error.code, error.message);
                Ok(ControlFlow::Break(self.fail(failure).await?))
            }
        }
    }

    /// Records what was found or made in the spec, as Cluster API AWS's does, and the
    /// endpoint once (a control plane's certificates name it); the generation walked.
    async fn record(&self, network: &Network, dns_name: &str) -> Result<Option<i64>, Error> {
        let mut spec_patch = json!({"network": network.spec_record()});
        if self
            .aws_cluster
            .spec
            .control_plane_endpoint
            .as_ref()
            .is_none_or(|e| e.host.as_deref().unwrap_or_default().is_empty())
        {
            spec_patch["controlPlaneEndpoint"] = json!({"host": dns_name, "port": API_SERVER_PORT});
        }
        let mut observed_generation = self.object.metadata.generation;
        if !crate::control_plane::contains(&self.object.data["spec"], &spec_patch) {
            let recorded = patch(&self.api, &self.name, json!({"spec": spec_patch})).await?;
            if recorded.metadata.generation == observed_generation.map(|g| g + 1) {
                observed_generation = recorded.metadata.generation;
            }
        }
        Ok(observed_generation)
    }

    /// The status of a walked cluster: ready, its failure domains (the private subnets'
    /// zones; the load balancer's may host control-plane machines), its groups and balancer.
    async fn report_ready(
        &mut self,
        network: &Network,
        groups: &[security_groups::Wanted],
        balancer: &load_balancer::Balancer,
        zones: &[String],
        dns_name: &str,
    ) -> Result<(), Error> {
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
        let stored = conditions::existing(&self.object.data["status"]);
        conditions::keep_transition_times(&mut self.conditions, &stored);
        let status = json!({
            "ready": true,
            "failureDomains": failure_domains,
            "networkStatus": {
                "securityGroups": security_group_status,
                "apiServerElb": balancer.status(zones),
                "natGatewaysIPs": network.nat_gateway_ips,
            },
            "conditions": self.conditions,
        });
        if crate::control_plane::contains(&self.object.data["status"], &status) {
            return Ok(());
        }
        patch_status(&self.api, &self.name, status).await?;
        if self.object.data["status"]["ready"] != true {
            let message = format!(
                "network, security groups and load balancer {} ready: the control plane's endpoint is {dns_name}:{API_SERVER_PORT}",
                self.balancer_name
            );
            self.event("InfrastructureReady", &message).await;
        }
        Ok(())
    }
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
