//! Who owns an AWS resource: Cluster API AWS's tags, so its users' tools (and its own cleanup
//! scripts) recognise lariat's resources, and lariat's namespace tag, because Cluster API
//! AWS's tag names only the cluster and two namespaces may both have a cluster `prod`.
//! Everything lariat creates is found again by these tags, so a crash between a create and
//! the status write that records it leaves nothing behind and duplicates nothing.

use std::collections::BTreeMap;

use aws_sdk_ec2::types::{Filter, ResourceType, Tag, TagSpecification};

/// `sigs.k8s.io/cluster-api-provider-aws/cluster/<cluster>: owned`.
pub const CLUSTER_TAG_PREFIX: &str = "sigs.k8s.io/cluster-api-provider-aws/cluster/";
/// What the resource is for: `common` (VPC, gateways), `public`, `private`, `node-eks-additional`.
pub const ROLE_TAG: &str = "sigs.k8s.io/cluster-api-provider-aws/role";
/// The namespace of the Cluster that owns the resource (lariat's).
pub const NAMESPACE_TAG: &str = "lariat.dev/cluster-namespace";
/// The value of the ownership tag for resources the cluster created and deletes.
pub const OWNED: &str = "owned";

/// The cluster AWS resources belong to.
#[derive(Clone, Debug)]
pub struct Owner {
    pub namespace: String,
    /// The Cluster's name (`cluster.x-k8s.io`), as Cluster API AWS tags it.
    pub cluster: String,
    /// `additionalTags` of the spec, on everything created.
    pub additional: BTreeMap<String, String>,
}

impl Owner {
    pub fn ownership_key(&self) -> String {
        format!("{CLUSTER_TAG_PREFIX}{}", self.cluster)
    }

    /// Every tag of a resource named `name` with `role`: `additionalTags` but for the keys
    /// that say who owns what (admission refuses them; this keeps a stored one from making a
    /// resource look another cluster's, which that cluster's deletion would then delete).
    pub fn tags(&self, name: &str, role: &str) -> BTreeMap<String, String> {
        let mut tags: BTreeMap<String, String> = self
            .additional
            .iter()
            .filter(|(key, _)| lariat_api::aws::reserved_tag_prefix(key).is_none())
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        tags.insert("Name".into(), name.into());
        tags.insert(self.ownership_key(), OWNED.into());
        tags.insert(ROLE_TAG.into(), role.into());
        tags.insert(NAMESPACE_TAG.into(), self.namespace.clone());
        tags
    }

    /// EC2's tag specification of a resource created with its tags (one call: a resource is
    /// never untagged, even for a moment).
    pub fn ec2_tags(&self, resource: ResourceType, name: &str, role: &str) -> TagSpecification {
        TagSpecification::builder()
            .resource_type(resource)
            .set_tags(Some(
                self.tags(name, role)
                    .into_iter()
                    .map(|(k, v)| Tag::builder().key(k).value(v).build())
                    .collect(),
            ))
            .build()
    }

    /// EC2 filters that find this cluster's resources, and nobody else's.
    pub fn ec2_filters(&self) -> Vec<Filter> {
        vec![
            filter(&format!("tag:{}", self.ownership_key()), OWNED),
            filter(&format!("tag:{NAMESPACE_TAG}"), &self.namespace),
        ]
    }

    /// The filters, and the resource's role.
    pub fn ec2_filters_with_role(&self, role: &str) -> Vec<Filter> {
        let mut filters = self.ec2_filters();
        filters.push(filter(&format!("tag:{ROLE_TAG}"), role));
        filters
    }

    /// The cluster (`namespace/name`) that tags say made a resource, if it is another one.
    pub fn owned_by_another<'a>(
        &self,
        tags: impl IntoIterator<Item = (&'a str, &'a str)>,
    ) -> Option<String> {
        let (mut cluster, mut namespace) = (None, None);
        for (k, v) in tags {
            if let Some(name) = k.strip_prefix(CLUSTER_TAG_PREFIX)
                && v == OWNED
            {
                cluster = Some(name.to_owned());
            }
            if k == NAMESPACE_TAG {
                namespace = Some(v.to_owned());
            }
        }
        let cluster = cluster?;
        let namespace = namespace.unwrap_or_default();
        (cluster != self.cluster || namespace != self.namespace)
            .then(|| format!("{namespace}/{cluster}"))
    }

    /// Whether tags (as AWS lists them) say the resource is this cluster's.
    pub fn owns<'a>(&self, tags: impl IntoIterator<Item = (&'a str, &'a str)>) -> bool {
        let key = self.ownership_key();
        let (mut owned, mut here) = (false, false);
        for (k, v) in tags {
            owned |= k == key && v == OWNED;
            here |= k == NAMESPACE_TAG && v == self.namespace;
        }
        owned && here
    }
}

pub fn filter(name: &str, value: &str) -> Filter {
    Filter::builder().name(name).values(value).build()
}

/// A tag as an AWS SDK lists it.
pub trait ListedTag {
    fn pair(&self) -> (&str, &str);
}

impl ListedTag for Tag {
    fn pair(&self) -> (&str, &str) {
        (
            self.key().unwrap_or_default(),
            self.value().unwrap_or_default(),
        )
    }
}

impl ListedTag for aws_sdk_autoscaling::types::TagDescription {
    fn pair(&self) -> (&str, &str) {
        (
            self.key().unwrap_or_default(),
            self.value().unwrap_or_default(),
        )
    }
}

impl ListedTag for aws_sdk_elasticloadbalancing::types::Tag {
    fn pair(&self) -> (&str, &str) {
        (self.key(), self.value().unwrap_or_default())
    }
}

/// Each tag's key and value, as [`Owner::owns`] reads them.
pub fn pairs<T: ListedTag>(tags: &[T]) -> impl Iterator<Item = (&str, &str)> {
    tags.iter().map(ListedTag::pair)
}
