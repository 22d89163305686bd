//! The same server on etcd (`--datastore-endpoint`): kubectl works unchanged, data outlives
//! the server process, and two servers sharing one etcd see each other's writes.

mod common;

use common::{SEED_CLUSTER, TestServer, eventually};
use lariat_store::etcd_process::EtcdProcess;

#[test]
fn kubectl_against_a_server_on_etcd() {
    let etcd = EtcdProcess::start().expect("start etcd (apt-get install -y etcd-server)");
    let endpoint = etcd.endpoint();
    let mut server = TestServer::start_with(&["--datastore-endpoint", &endpoint]);
    assert!(
        server
            .apply_ok(&["apply", "-f", "-"], SEED_CLUSTER)
            .contains("created")
    );
    server.kubectl_ok(&["create", "namespace", "team-b"]);
    server.apply_ok(
        &["apply", "--server-side", "-n", "team-b", "-f", "-"],
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: c\ndata:\n  a: b\n",
    );

    // A second server on the same etcd serves the same objects.
    let other = TestServer::start_with(&["--datastore-endpoint", &endpoint]);
    assert!(
        other
            .kubectl_ok(&["get", "clusters", "-o", "name"])
            .contains("prod-us-east")
    );
    other.apply_ok(&["apply", "-f", "-"], GADGET_CRD);
    eventually(
        "a CRD created through one server is served by the other",
        || {
            server
                .kubectl(&["get", "gadgets.example.com"])
                .status
                .success()
        },
    );
    other.kubectl_ok(&["delete", "namespace", "team-b"]);
    eventually(
        "the namespace deletion is visible through the first server",
        || {
            !server
                .kubectl(&["get", "namespace", "team-b"])
                .status
                .success()
        },
    );

    server.kill9();
    server.launch();
    assert!(
        server
            .kubectl_ok(&["get", "clusters"])
            .contains("prod-us-east")
    );
}

const GADGET_CRD: &str = "apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: gadgets.example.com
spec:
  group: example.com
  scope: Namespaced
  names: {plural: gadgets, singular: gadget, kind: Gadget}
  versions:
  - name: v1
    served: true
    storage: true
    schema:
      openAPIV3Schema: {type: object, x-kubernetes-preserve-unknown-fields: true}
";
