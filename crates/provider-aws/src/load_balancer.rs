//! The load balancer in front of a control plane that runs on EC2 (an AWSCluster's): a classic
//! ELB, as Cluster API AWS makes one by default. Its name is derived from the cluster's, so a
//! reconcile that died after creating it finds it again; it carries the cluster's tags, and
//! lariat changes or deletes only one that carries them. Control-plane instances are
//! registered with it by the AWSMachine controller.

use aws_sdk_elasticloadbalancing::Client;
use aws_sdk_elasticloadbalancing::types::{
    ConnectionSettings, CrossZoneLoadBalancing, HealthCheck, Instance, Listener,
    LoadBalancerAttributes, LoadBalancerDescription, Tag,
};
use lariat_api::aws::cluster::AWSLoadBalancerSpec;
use serde_json::{Value, json};

use crate::sdk::{AwsError, AwsResult};
use crate::tags::{Owner, pairs};

/// The port the Kubernetes API listens on, behind the load balancer and in front of it.
pub const API_SERVER_PORT: i32 = 6443;
/// Cluster API AWS's idle timeout for the API server's long watches.
const IDLE_TIMEOUT_SECONDS: i32 = 600;
/// ELB's longest name.
const MAX_NAME: usize = 32;

/// What the load balancer should be.
#[derive(Clone, Debug)]
pub struct Wanted {
    pub name: String,
    pub internal: bool,
    pub subnet_ids: Vec<String>,
    pub security_group_ids: Vec<String>,
    pub cross_zone: bool,
    /// `TCP`, or `HTTP`/`HTTPS` to check `/readyz`.
    pub health_check_protocol: String,
}

impl Wanted {
    fn scheme(&self) -> &'static str {
        if self.internal {
            "internal"
        } else {
            "internet-facing"
        }
    }
}

/// The load balancer as it is.
#[derive(Clone, Debug, PartialEq)]
pub struct Balancer {
    pub name: String,
    pub dns_name: Option<String>,
    pub scheme: String,
    pub subnet_ids: Vec<String>,
    pub security_group_ids: Vec<String>,
    pub instance_ids: Vec<String>,
    pub cross_zone: bool,
    pub health_check_target: String,
}

impl Balancer {
    /// As `status.networkStatus.apiServerElb` shows it; `zones` are its subnets' zones.
    pub fn status(&self, zones: &[String]) -> Value {
        json!({
            "name": self.name,
            "dnsName": self.dns_name,
            "scheme": self.scheme,
            "availabilityZones": zones,
            "subnetIds": self.subnet_ids,
            "securityGroupIds": self.security_group_ids,
            "loadBalancerType": "classic",
            "loadBalancerIPAddressType": "ipv4",
            "listeners": [{
                "protocol": "TCP",
                "port": API_SERVER_PORT,
                "instanceProtocol": "TCP",
                "instancePort": API_SERVER_PORT,
            }],
            "healthChecks": {
                "target": self.health_check_target,
                // Go durations, in nanoseconds, as Cluster API AWS's status holds them.
                "interval": 5_000_000_000u64,
                "timeout": 4_000_000_000u64,
                "healthyThreshold": 2,
                "unhealthyThreshold": 6,
            },
            "attributes": {
                "idleTimeout": IDLE_TIMEOUT_SECONDS as u64 * 1_000_000_000,
                "crossZoneLoadBalancing": self.cross_zone,
            },
        })
    }
}

/// Cluster API AWS's name for the API server's load balancer of `cluster`: the spec's, else
/// `<cluster>-apiserver`, else (longer than ELB allows) a hash of the cluster's name.
pub fn name(cluster: &str, spec: Option<&AWSLoadBalancerSpec>) -> String {
    if let Some(name) = spec.and_then(|s| s.name.clone()) {
        return name;
    }
    let name = format!("{}-apiserver", cluster.replace('.', "-"));
    if name.len() <= MAX_NAME {
        return name;
    }
    // Cluster API AWS's own hash (BLAKE2b, 28 bytes, each byte a base-36 digit), so lariat
    // names it as Cluster API AWS would.
    use blake2::digest::{Update, VariableOutput};
    let mut hasher = blake2::Blake2bVar::new(28).expect("28 bytes is a valid BLAKE2b length");
    hasher.update(cluster.as_bytes());
    let mut digest = [0u8; 28];
    hasher
        .finalize_variable(&mut digest)
        .expect("the buffer is the digest's length");
    const DIGITS: &[u8] = b"0123456789abcdefghijklmnopqrstuvwxyz";
    let hash: String = digest
        .iter()
        .map(|b| DIGITS[*b as usize % DIGITS.len()] as char)
        .collect();
    format!("{hash}-k8s")
}

/// Finds or makes the load balancer and, if it is the cluster's, brings it to what `wanted`
/// says. One found without the cluster's tags is used as it is.
pub async fn ensure(elb: &Client, owner: &Owner, wanted: &Wanted) -> Result<Balancer, AwsError> {
    let Some(found) = describe(elb, &wanted.name).await? else {
        return create(elb, owner, wanted).await;
    };
    let tags = tags(elb, &wanted.name).await?;
    if let Some(other) = owner.owned_by_another(pairs(&tags)) {
        return Err(AwsError {
            code: "LoadBalancerOwnedByAnother".into(),
            message: format!(
                "load balancer {} belongs to cluster {other}: name another in spec.controlPlaneLoadBalancer.name",
                wanted.name
            ),
        });
    }
    if !owner.owns(pairs(&tags)) {
        // Its DNS name would become the endpoint and lariat's instances would join it.
        return Err(AwsError {
            code: "LoadBalancerNotOwned".into(),
            message: format!(
                "load balancer {} exists without this cluster's tags: lariat uses only load balancers it made; name another in spec.controlPlaneLoadBalancer.name",
                wanted.name
            ),
        });
    }
    let mut balancer = balancer(&found, wanted.cross_zone);
    let missing_subnets: Vec<String> = wanted
        .subnet_ids
        .iter()
        .filter(|s| !balancer.subnet_ids.contains(s))
        .cloned()
        .collect();
    if !missing_subnets.is_empty() {
        elb.attach_load_balancer_to_subnets()
            .load_balancer_name(&wanted.name)
            .set_subnets(Some(missing_subnets))
            .send()
            .await
            .aws()?;
    }
    let mut groups = balancer.security_group_ids.clone();
    groups.sort();
    let mut wanted_groups = wanted.security_group_ids.clone();
    wanted_groups.sort();
    if groups != wanted_groups {
        elb.apply_security_groups_to_load_balancer()
            .load_balancer_name(&wanted.name)
            .set_security_groups(Some(wanted.security_group_ids.clone()))
            .send()
            .await
            .aws()?;
    }
    if found.health_check() != Some(&health_check(wanted)?) {
        configure_health_check(elb, wanted).await?;
    }
    let attributes = elb
        .describe_load_balancer_attributes()
        .load_balancer_name(&wanted.name)
        .send()
        .await
        .aws()?;
    let attributes = attributes.load_balancer_attributes();
    let cross_zone = attributes
        .and_then(|a| a.cross_zone_load_balancing())
        .is_some_and(|c| c.enabled());
    let idle = attributes
        .and_then(|a| a.connection_settings())
        .map(|c| c.idle_timeout());
    if cross_zone != wanted.cross_zone || idle != Some(IDLE_TIMEOUT_SECONDS) {
        set_attributes(elb, wanted).await?;
    }
    balancer = balancer_after(&balancer, wanted);
    Ok(balancer)
}

/// Whether the load balancer named `name` is still there (the one read of a steady state).
pub async fn exists(elb: &Client, name: &str) -> Result<bool, AwsError> {
    Ok(describe(elb, name).await?.is_some())
}

/// Deletes the load balancer if it is the cluster's. Returns whether one was there.
pub async fn delete(elb: &Client, owner: &Owner, name: &str) -> Result<bool, AwsError> {
    if describe(elb, name).await?.is_none() {
        return Ok(false);
    }
    if !owner.owns(pairs(&tags(elb, name).await?)) {
        return Ok(false);
    }
    elb.delete_load_balancer()
        .load_balancer_name(name)
        .send()
        .await
        .aws()?;
    Ok(true)
}

/// Registers a control-plane instance with the load balancer; returns whether it was not
/// registered before.
pub async fn register(elb: &Client, name: &str, instance: &str) -> Result<bool, AwsError> {
    let Some(found) = describe(elb, name).await? else {
        return Err(AwsError {
            code: "LoadBalancerNotFound".into(),
            message: format!("load balancer {name} does not exist"),
        });
    };
    if holds(&found, instance) {
        return Ok(false);
    }
    elb.register_instances_with_load_balancer()
        .load_balancer_name(name)
        .instances(Instance::builder().instance_id(instance).build())
        .send()
        .await
        .aws()?;
    Ok(true)
}

/// Takes an instance out of the load balancer, before it is terminated (one already gone, or
/// a load balancer already gone, is fine).
pub async fn deregister(elb: &Client, name: &str, instance: &str) -> Result<(), AwsError> {
    let Some(found) = describe(elb, name).await? else {
        return Ok(());
    };
    if !holds(&found, instance) {
        return Ok(());
    }
    match elb
        .deregister_instances_from_load_balancer()
        .load_balancer_name(name)
        .instances(Instance::builder().instance_id(instance).build())
        .send()
        .await
        .aws()
    {
        Err(error) if error.code != "InvalidInstance" && !error.is_not_found() => Err(error),
        _ => Ok(()),
    }
}

fn holds(balancer: &LoadBalancerDescription, instance: &str) -> bool {
    balancer
        .instances()
        .iter()
        .any(|i| i.instance_id() == Some(instance))
}

async fn describe(elb: &Client, name: &str) -> Result<Option<LoadBalancerDescription>, AwsError> {
    let described = elb
        .describe_load_balancers()
        .load_balancer_names(name)
        .send()
        .await
        .aws();
    match described {
        Ok(answer) => Ok(answer.load_balancer_descriptions().first().cloned()),
        Err(error) if error.code == "LoadBalancerNotFound" || error.is_not_found() => Ok(None),
        Err(error) => Err(error),
    }
}

async fn tags(elb: &Client, name: &str) -> Result<Vec<Tag>, AwsError> {
    let described = elb
        .describe_tags()
        .load_balancer_names(name)
        .send()
        .await
        .aws()?;
    Ok(described
        .tag_descriptions()
        .first()
        .map(|d| d.tags().to_vec())
        .unwrap_or_default())
}

async fn create(elb: &Client, owner: &Owner, wanted: &Wanted) -> Result<Balancer, AwsError> {
    let tags: Vec<Tag> = owner
        .tags(&wanted.name, "apiserver")
        .into_iter()
        .map(|(key, value)| Tag::builder().key(key).value(value).build())
        .collect::<Result<_, _>>()
        .map_err(unbuildable)?;
    let listener = Listener::builder()
        .protocol("TCP")
        .load_balancer_port(API_SERVER_PORT)
        .instance_protocol("TCP")
        .instance_port(API_SERVER_PORT)
        .build()
        .map_err(unbuildable)?;
    let created = elb
        .create_load_balancer()
        .load_balancer_name(&wanted.name)
        .listeners(listener)
        .set_subnets(Some(wanted.subnet_ids.clone()))
        .set_security_groups(Some(wanted.security_group_ids.clone()))
        .scheme(wanted.scheme())
        .set_tags(Some(tags))
        .send()
        .await
        .aws()?;
    configure_health_check(elb, wanted).await?;
    set_attributes(elb, wanted).await?;
    Ok(Balancer {
        name: wanted.name.clone(),
        dns_name: created.dns_name,
        scheme: wanted.scheme().into(),
        subnet_ids: wanted.subnet_ids.clone(),
        security_group_ids: wanted.security_group_ids.clone(),
        instance_ids: vec![],
        cross_zone: wanted.cross_zone,
        health_check_target: health_check_target(wanted),
    })
}

/// A request the SDK could not build: a required field lariat left out.
fn unbuildable(error: aws_sdk_elasticloadbalancing::error::BuildError) -> AwsError {
    AwsError {
        code: "InvalidRequest".into(),
        message: error.to_string(),
    }
}

/// Cluster API AWS's target: `/readyz` over HTTP(S), else the port (TCP, SSL).
fn health_check_target(wanted: &Wanted) -> String {
    match wanted.health_check_protocol.as_str() {
        protocol @ ("HTTP" | "HTTPS") => format!("{protocol}:{API_SERVER_PORT}/readyz"),
        protocol => format!("{protocol}:{API_SERVER_PORT}"),
    }
}

/// Cluster API AWS's health check of the API servers.
fn health_check(wanted: &Wanted) -> Result<HealthCheck, AwsError> {
    HealthCheck::builder()
        .target(health_check_target(wanted))
        .interval(5)
        .timeout(4)
        .healthy_threshold(2)
        .unhealthy_threshold(6)
        .build()
        .map_err(unbuildable)
}

async fn configure_health_check(elb: &Client, wanted: &Wanted) -> Result<(), AwsError> {
    let check = health_check(wanted)?;
    elb.configure_health_check()
        .load_balancer_name(&wanted.name)
        .health_check(check)
        .send()
        .await
        .aws()?;
    Ok(())
}

async fn set_attributes(elb: &Client, wanted: &Wanted) -> Result<(), AwsError> {
    let attributes = LoadBalancerAttributes::builder()
        .cross_zone_load_balancing(
            CrossZoneLoadBalancing::builder()
                .enabled(wanted.cross_zone)
                .build(),
        )
        .connection_settings(
            ConnectionSettings::builder()
                .idle_timeout(IDLE_TIMEOUT_SECONDS)
                .build()
                .map_err(unbuildable)?,
        )
        .build();
    elb.modify_load_balancer_attributes()
        .load_balancer_name(&wanted.name)
        .load_balancer_attributes(attributes)
        .send()
        .await
        .aws()?;
    Ok(())
}

fn balancer(found: &LoadBalancerDescription, cross_zone: bool) -> Balancer {
    Balancer {
        name: found.load_balancer_name().unwrap_or_default().to_owned(),
        dns_name: found.dns_name().map(str::to_owned),
        scheme: found.scheme().unwrap_or("internet-facing").to_owned(),
        subnet_ids: found.subnets().to_vec(),
        security_group_ids: found.security_groups().to_vec(),
        instance_ids: found
            .instances()
            .iter()
            .filter_map(|i| i.instance_id().map(str::to_owned))
            .collect(),
        cross_zone,
        health_check_target: found
            .health_check()
            .map(|h| h.target().to_owned())
            .unwrap_or_default(),
    }
}

/// The balancer as the changes just made leave it.
fn balancer_after(found: &Balancer, wanted: &Wanted) -> Balancer {
    let mut subnets = found.subnet_ids.clone();
    subnets.extend(
        wanted
            .subnet_ids
            .iter()
            .filter(|s| !found.subnet_ids.contains(s))
            .cloned(),
    );
    Balancer {
        subnet_ids: subnets,
        security_group_ids: wanted.security_group_ids.clone(),
        cross_zone: wanted.cross_zone,
        health_check_target: health_check_target(wanted),
        ..found.clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_cluster_api_aws_s() {
        assert_eq!(name("prod", None), "prod-apiserver");
        assert_eq!(name("a.b", None), "a-b-apiserver");
        let spec = AWSLoadBalancerSpec {
            name: Some("mine".into()),
            ..Default::default()
        };
        assert_eq!(name("prod", Some(&spec)), "mine");
        let long = name("a-cluster-name-long-enough-to-hash", None);
        assert_eq!(long.len(), 32);
        assert!(long.ends_with("-k8s"));
        assert_ne!(long, name("a-cluster-name-long-enough-to-hasH", None));
    }
}
