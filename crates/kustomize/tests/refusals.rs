//! What a build refuses, and the bounds that keep any kustomization's cost in hand.

use lariat_kustomize::{Bounds, Files, build};

fn files(entries: &[(&str, &str)]) -> Files {
    entries
        .iter()
        .map(|(path, content)| (path.to_string(), content.as_bytes().to_vec()))
        .collect()
}

const CONFIG_MAP: &str =
    "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: settings\ndata:\n  color: blue\n";

fn error(entries: &[(&str, &str)], dir: &str) -> String {
    build(&files(entries), dir, Bounds::default())
        .unwrap_err()
        .to_string()
}

#[test]
fn what_kustomize_would_do_and_lariat_does_not_is_refused_by_name() {
    let message = error(&[("kustomization.yaml", "vars:\n- name: X\n")], "");
    assert!(
        message.starts_with("kustomization.yaml: vars is not supported"),
        "{message}"
    );
    let message = error(&[("kustomization.yaml", "helmCharts:\n- name: x\n")], "");
    assert!(message.contains("helm: options (fleet.yaml)"), "{message}");
    let message = error(&[("kustomization.yaml", "resourcez: [a.yaml]\n")], "");
    assert!(message.contains("unknown field `resourcez`"), "{message}");
    let message = error(
        &[(
            "kustomization.yaml",
            "resources:\n- https://github.com/org/repo//base?ref=v1\n",
        )],
        "",
    );
    assert!(
        message.contains("remote resources are not fetched"),
        "{message}"
    );
}

#[test]
fn files_outside_a_kustomizations_directory_or_the_bundle_are_refused() {
    // A base is a directory with its own kustomization; a file must be the kustomization's own.
    let message = error(
        &[
            ("secret.yaml", CONFIG_MAP),
            ("app/kustomization.yaml", "resources:\n- ../secret.yaml\n"),
        ],
        "app",
    );
    assert!(message.contains("rootOnly"), "{message}");
    let message = error(
        &[(
            "kustomization.yaml",
            "configMapGenerator:\n- name: x\n  files:\n  - ../../etc/passwd\n",
        )],
        "",
    );
    assert!(message.contains("leaves the bundle"), "{message}");
    let message = error(&[("kustomization.yaml", "resources:\n- /etc/passwd\n")], "");
    assert!(message.contains("absolute path"), "{message}");
    let message = error(&[("kustomization.yaml", "resources:\n- nosuch\n")], "");
    assert!(message.contains("no such file or directory"), "{message}");
}

#[test]
fn cycles_depth_repetition_and_size_are_bounded() {
    let message = error(
        &[
            ("a/kustomization.yaml", "resources:\n- ../b\n"),
            ("b/kustomization.yaml", "resources:\n- ../a\n"),
        ],
        "a",
    );
    assert!(
        message.contains("includes itself: a -> b -> a"),
        "{message}"
    );
    // Ten levels each including the next twice (with different prefixes, so that nothing
    // collides) would be 1,024 copies of the last: the kustomization count stops it.
    let mut entries = Vec::new();
    for level in 0..10 {
        entries.push((
            format!("l{level}/kustomization.yaml"),
            "resources:\n- x\n- y\n".to_string(),
        ));
        for side in ["x", "y"] {
            entries.push((
                format!("l{level}/{side}/kustomization.yaml"),
                format!("namePrefix: {side}-\nresources:\n- ../../l{}\n", level + 1),
            ));
        }
    }
    entries.push((
        "l10/kustomization.yaml".into(),
        "resources:\n- cm.yaml\n".into(),
    ));
    entries.push(("l10/cm.yaml".into(), CONFIG_MAP.into()));
    let tree: Files = entries
        .iter()
        .map(|(p, c)| (p.clone(), c.clone().into_bytes()))
        .collect();
    let message = build(&tree, "l0", Bounds::default())
        .unwrap_err()
        .to_string();
    assert!(
        message.contains("more than 1000 kustomizations"),
        "{message}"
    );
    // The same tree, three levels deep, builds: eight prefixed copies.
    let built = build(&tree, "l7", Bounds::default()).unwrap();
    assert_eq!(built.len(), 8);
    assert_eq!(built[0]["metadata"]["name"], "x-x-x-settings");
    let bounds = Bounds {
        max_depth: 4,
        ..Bounds::default()
    };
    let message = build(&tree, "l7", bounds).unwrap_err().to_string();
    assert!(message.contains("nest more than 4 deep"), "{message}");
    let bounds = Bounds {
        max_resources: 7,
        ..Bounds::default()
    };
    let message = build(&tree, "l7", bounds).unwrap_err().to_string();
    assert!(message.contains("more than 7 objects"), "{message}");
    let bounds = Bounds {
        max_bytes: 1_000,
        ..Bounds::default()
    };
    let message = build(&tree, "l7", bounds).unwrap_err().to_string();
    assert!(message.contains("more than 1000 bytes"), "{message}");
}

#[test]
fn a_secret_generator_encodes_and_hashes_and_references_follow() {
    let built = build(
        &files(&[
            (
                "kustomization.yaml",
                "namePrefix: p-\nresources:\n- pod.yaml\nsecretGenerator:\n- name: creds\n  literals:\n  - password=s3cret\n  type: kubernetes.io/basic-auth\n",
            ),
            (
                "pod.yaml",
                "apiVersion: v1\nkind: Pod\nmetadata:\n  name: web\nspec:\n  containers:\n  - name: web\n    image: nginx:1.25\n    envFrom:\n    - secretRef:\n        name: creds\n",
            ),
        ]),
        ".",
        Bounds::default(),
    )
    .unwrap();
    let secret = &built[1];
    assert_eq!(secret["type"], "kubernetes.io/basic-auth");
    assert_eq!(secret["data"]["password"], "czNjcmV0");
    let name = secret["metadata"]["name"].as_str().unwrap();
    assert!(
        name.starts_with("p-creds-") && name.len() == "p-creds-".len() + 10,
        "{name}"
    );
    assert_eq!(
        built[0]["spec"]["containers"][0]["envFrom"][0]["secretRef"]["name"],
        name
    );
}

#[test]
fn json_patches_cannot_grow_an_object_past_the_budget_or_nest_it_without_end() {
    // Each copy doubles /data: forty would make 2^40 of it.
    let mut operations = String::from("[");
    for i in 0..40 {
        operations.push_str(&format!(
            r#"{{"op":"copy","from":"/data","path":"/data/k{i}"}},"#
        ));
    }
    operations.push_str(r#"{"op":"add","path":"/data/x","value":"y"}]"#);
    let kustomization = format!(
        "resources:\n- cm.yaml\npatches:\n- target: {{kind: ConfigMap}}\n  patch: '{operations}'\n"
    );
    let message = error(
        &[
            ("kustomization.yaml", &kustomization),
            ("cm.yaml", CONFIG_MAP),
        ],
        "",
    );
    assert!(message.contains("more than 67108864 bytes"), "{message}");
    // Copying a map into itself nests it one level deeper each time.
    let mut operations = String::from("[");
    let mut path = String::from("/data");
    for _ in 0..200 {
        operations.push_str(&format!(
            r#"{{"op":"add","path":"{path}/d","value":{{}}}},"#
        ));
        path.push_str("/d");
    }
    operations.push_str(r#"{"op":"add","path":"/data/z","value":"y"}]"#);
    let kustomization = format!(
        "resources:\n- cm.yaml\npatches:\n- target: {{kind: ConfigMap}}\n  patch: '{operations}'\n"
    );
    let message = error(
        &[
            ("kustomization.yaml", &kustomization),
            ("cm.yaml", CONFIG_MAP),
        ],
        "",
    );
    assert!(message.contains("more than 128 deep"), "{message}");
    // A patch that leaves an object without its metadata is an error, not a crash.
    for patch in [
        r#"'[{"op":"replace","path":"/metadata","value":1}]'"#,
        "|\n    apiVersion: v1\n    kind: ConfigMap\n    metadata: x\n",
    ] {
        let kustomization = format!(
            "namespace: x\nresources:\n- cm.yaml\npatches:\n- target: {{kind: ConfigMap}}\n  patch: {patch}\n"
        );
        let message = error(
            &[
                ("kustomization.yaml", &kustomization),
                ("cm.yaml", CONFIG_MAP),
            ],
            "",
        );
        assert!(message.contains("without metadata.name"), "{message}");
    }
}

#[test]
fn kustomizations_read_as_kustomize_reads_them() {
    const DEPLOYMENT: &str = "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: web\nspec:\n  template:\n    spec:\n      containers:\n      - name: web\n        image: nginx\n        env:\n        - {name: A, value: a}\n";
    const RULE: &str = "apiVersion: monitoring.coreos.com/v1\nkind: PrometheusRule\nmetadata:\n  name: rules\nspec:\n  groups:\n  - name: a\n    rules: []\n  - name: b\n    rules: []\n";
    let built = build(
        &files(&[
            (
                "kustomization.yaml",
                "resources:\n- web.yaml\n- rule.yaml\n# - old.yaml\ncommonLabels:\npatches:\n- target: {kind: Deployment|StatefulSet}\n  patch: |\n    apiVersion: apps/v1\n    kind: Deployment\n    metadata: {name: any}\n    spec:\n      template:\n        spec:\n          containers:\n          - name: web\n            env:\n            - {name: B, value: b}\n- patch: |\n    apiVersion: monitoring.coreos.com/v1\n    kind: PrometheusRule\n    metadata: {name: rules}\n    spec:\n      groups:\n      - name: a\n        rules: [{alert: x}]\nreplicas:\n- name: web\n  count: 3\n",
            ),
            ("web.yaml", DEPLOYMENT),
            ("rule.yaml", RULE),
        ]),
        "",
        Bounds::default(),
    )
    .unwrap();
    // A Deployment's env is merged by name; a custom kind's list is replaced whole.
    let env = &built[0]["spec"]["template"]["spec"]["containers"][0]["env"];
    assert_eq!(env.as_array().unwrap().len(), 2, "{env}");
    assert_eq!(built[0]["spec"]["replicas"], 3);
    let groups = built[1]["spec"]["groups"].as_array().unwrap();
    assert_eq!(groups.len(), 1, "{groups:?}");
    let message = error(
        &[
            (
                "kustomization.yaml",
                "resources:\n- web.yaml\nreplicas:\n- name: nosuch\n  count: 2\n",
            ),
            ("web.yaml", DEPLOYMENT),
        ],
        "",
    );
    assert!(message.contains("replicas: no Deployment"), "{message}");
}

#[test]
fn a_merging_generator_takes_the_bases_place_with_its_own_type() {
    let built = build(
        &files(&[
            (
                "base/kustomization.yaml",
                "secretGenerator:\n- name: tls\n  type: kubernetes.io/tls\n  literals: [tls.crt=a, tls.key=b]\n",
            ),
            (
                "overlay/kustomization.yaml",
                "namePrefix: o-\nresources: [../base]\nsecretGenerator:\n- name: tls\n  behavior: merge\n  literals: [tls.crt=c]\n",
            ),
        ]),
        "overlay",
        Bounds::default(),
    )
    .unwrap();
    let secret = &built[0];
    assert_eq!(secret["type"], "Opaque", "{secret}");
    assert_eq!(secret["data"]["tls.crt"], "Yw==", "{secret}");
    assert_eq!(secret["data"]["tls.key"], "Yg==", "{secret}");
    assert!(
        secret["metadata"]["name"]
            .as_str()
            .unwrap()
            .starts_with("o-tls-")
    );
}
