//! The labels that mark a provider's CRDs as implementing the Cluster API `v1beta1` contract.
//!
//! Upstream core picks the API version of a referenced kind from the contract label (lariat's
//! core still reads the version the reference names); the provider label tells whose CRD is
//! whose, for `lariat init` and the Cluster's `ProviderNotEnabled` condition. kube-derive's own `label`
//! attribute would also stamp them on every object built with `new()`, so they are added to
//! the generated CRDs here instead.

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;

use crate::capi::labels::{CONTRACT_V1BETA1, PROVIDER_NAME};

/// Labels each CRD with the `v1beta1` contract (valued with its served versions) and with
/// `provider`, e.g. `infrastructure-inmemory`.
pub(crate) fn provider_crds(
    crds: Vec<CustomResourceDefinition>,
    provider: &str,
) -> Vec<CustomResourceDefinition> {
    crds.into_iter()
        .map(|mut crd| {
            let versions: Vec<&str> = crd
                .spec
                .versions
                .iter()
                .filter(|v| v.served)
                .map(|v| v.name.as_str())
                .collect();
            let value = versions.join("_");
            let labels = crd.metadata.labels.get_or_insert_with(Default::default);
            labels.insert(CONTRACT_V1BETA1.to_owned(), value);
            labels.insert(PROVIDER_NAME.to_owned(), provider.to_owned());
            crd
        })
        .collect()
}
