//! The renderer's behaviour beyond Helm's golden files: Helm's own functions, `.Files`,
//! and the bounds a chart from a git repository cannot get past.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use lariat_helm::{Bounds, Capabilities, Chart, HelmError, Release, render};
use serde_json::{Map, json};

fn chart(templates: &[(&str, &str)], extra: &[(&str, &str)]) -> Chart {
    let mut files: BTreeMap<String, Vec<u8>> = BTreeMap::new();
    files.insert(
        "Chart.yaml".into(),
        b"apiVersion: v2\nname: demo\nversion: 0.1.0\nappVersion: 1.10\n".to_vec(),
    );
    files.insert(
        "values.yaml".into(),
        b"name: web\nreplicas: 2\nlabels:\n  tier: front\n".to_vec(),
    );
    for (name, text) in templates {
        files.insert(format!("templates/{name}"), text.as_bytes().to_vec());
    }
    for (name, text) in extra {
        files.insert(name.to_string(), text.as_bytes().to_vec());
    }
    Chart::load(&files).unwrap()
}

fn release() -> Release {
    Release {
        name: "rel".into(),
        namespace: "apps".into(),
        revision: 1,
        is_upgrade: false,
        skip_schema_validation: false,
    }
}

fn render_one(chart: &Chart, bounds: &Bounds) -> Result<String, HelmError> {
    let rendered = render(
        chart,
        &Map::new(),
        &release(),
        &Capabilities::default(),
        None,
        bounds,
    )?;
    Ok(rendered
        .files
        .into_values()
        .collect::<Vec<_>>()
        .join("---\n"))
}

#[test]
fn helm_functions_render_as_helm_writes_them() {
    let template = r#"{{- define "demo.labels" -}}
app: {{ .Values.name }}
{{ toYaml .Values.labels }}
{{- end -}}
kind: ConfigMap
metadata:
  name: {{ .Release.Name }}-{{ .Chart.Name }}
  labels:
    {{- include "demo.labels" . | nindent 4 }}
data:
  version: {{ .Chart.AppVersion | quote }}
  replicas: {{ .Values.replicas | quote }}
  greeting: {{ tpl "hello {{ .Values.name }}" . }}
  kube: {{ semverCompare ">=1.19-0" .Capabilities.KubeVersion.GitVersion | quote }}
  apps: {{ .Capabilities.APIVersions.Has "apps/v1" | quote }}
  missing: "{{ .Values.nothing }}"
  joined: {{ list "a" "b" | join "," }}
  file: {{ .Files.Get "files/greeting.txt" | trim }}
  {{- (.Files.Glob "files/*.txt").AsConfig | nindent 2 }}
"#;
    let c = chart(
        &[("cm.yaml", template)],
        &[("files/greeting.txt", "hi there\n")],
    );
    let out = render_one(&c, &Bounds::default()).unwrap();
    let expected = "kind: ConfigMap
metadata:
  name: rel-demo
  labels:
    app: web
    tier: front
data:
  version: \"1.10\"
  replicas: \"2\"
  greeting: hello web
  kube: \"true\"
  apps: \"true\"
  missing: \"\"
  joined: a,b
  file: hi there
  greeting.txt: |
    hi there
";
    assert_eq!(out, expected);
}

#[test]
fn required_names_the_template_and_line() {
    let c = chart(
        &[(
            "cm.yaml",
            "kind: ConfigMap\nname: {{ required \"set .Values.host\" .Values.host }}\n",
        )],
        &[],
    );
    let error = render_one(&c, &Bounds::default()).unwrap_err().to_string();
    assert!(error.contains("demo/templates/cm.yaml:2"), "{error}");
    assert!(error.contains("set .Values.host"), "{error}");
}

#[test]
fn a_template_that_includes_itself_is_stopped() {
    let c = chart(
        &[(
            "loop.yaml",
            "{{- define \"loop\" }}{{ include \"loop\" . }}{{ end }}{{ include \"loop\" . }}",
        )],
        &[],
    );
    let error = render_one(&c, &Bounds::default()).unwrap_err().to_string();
    assert!(error.contains("nest more than"), "{error}");
}

#[test]
fn templates_that_multiply_through_include_are_bounded() {
    // Each level includes the next twice: 2^40 renders unless something stops it.
    let mut helpers = String::new();
    for level in 0..40 {
        helpers.push_str(&format!(
            "{{{{- define \"l{level}\" }}}}{{{{ include \"l{next}\" . }}}}{{{{ include \"l{next}\" . }}}}{{{{ end }}}}\n",
            next = level + 1
        ));
    }
    helpers.push_str("{{- define \"l40\" }}xxxxxxxxxxxxxxxx{{ end }}\n");
    let c = chart(
        &[
            ("_helpers.tpl", &helpers),
            ("boom.yaml", "{{ include \"l0\" . }}"),
        ],
        &[],
    );
    let bounds = Bounds {
        time: Duration::from_secs(2),
        output_bytes: 1 << 20,
    };
    let started = Instant::now();
    let error = render_one(&c, &bounds).unwrap_err().to_string();
    assert!(
        error.contains("more than") || error.contains("time"),
        "{error}"
    );
    assert!(
        started.elapsed() < Duration::from_secs(30),
        "took {:?}",
        started.elapsed()
    );
}

#[test]
fn user_values_reach_the_templates_and_a_null_deletes_a_default() {
    let c = chart(
        &[(
            "cm.yaml",
            "name: {{ .Values.name }}\nlabels: {{ .Values.labels | toJson }}\n",
        )],
        &[],
    );
    let user = json!({"name": "api", "labels": {"tier": null, "team": "a"}});
    let rendered = render(
        &c,
        user.as_object().unwrap(),
        &release(),
        &Capabilities::default(),
        None,
        &Bounds::default(),
    )
    .unwrap();
    assert_eq!(
        rendered.files["demo/templates/cm.yaml"],
        "name: api\nlabels: {\"team\":\"a\"}\n"
    );
}

#[test]
fn a_chart_without_a_name_or_with_a_bad_values_file_is_refused_with_the_file() {
    let mut files = BTreeMap::new();
    files.insert(
        "Chart.yaml".to_string(),
        b"apiVersion: v2\nversion: 1.0.0\n".to_vec(),
    );
    assert_eq!(
        Chart::load(&files).unwrap_err().to_string(),
        "Chart.yaml: name is required"
    );
    files.insert(
        "Chart.yaml".to_string(),
        b"apiVersion: v2\nname: x\nversion: 1.0.0\n".to_vec(),
    );
    files.insert("values.yaml".to_string(), b"- a list\n".to_vec());
    assert_eq!(
        Chart::load(&files).unwrap_err().to_string(),
        "values.yaml: values must be a YAML mapping"
    );
}

#[test]
fn a_value_built_without_end_is_refused_not_a_crash() {
    // 90,000 levels of dict in dict: refused (gtmpl-ng allows a function's result 128
    // levels), an error rather than a stack overflow in toYaml or in its drop.
    let template = "{{ $x := dict }}{{ range until 300 }}{{ range until 300 }}{{ $x = dict \"a\" $x }}{{ end }}{{ end }}{{ toYaml $x }}";
    let c = chart(&[("deep.yaml", template)], &[]);
    let error = render_one(&c, &Bounds::default()).unwrap_err().to_string();
    assert!(
        error.contains("deep.yaml:1") && error.contains("nested deeper"),
        "{error}"
    );
}

#[test]
fn files_range_and_count_as_go_templates_see_them() {
    let template = r#"count: {{ len (.Files.Glob "conf/*") }}
{{- range $path, $_ := .Files.Glob "conf/*" }}
{{ $path }}: {{ $.Files.Get $path | trim }}
{{- end }}
lines: {{ .Files.Lines "conf/b.txt" | join "," }}
secrets:
  {{- (.Files.Glob "conf/a.txt").AsSecrets | nindent 2 }}
has: {{ .Capabilities.APIVersions.Has "apps/v1" }} {{ .Capabilities.APIVersions.Has "nope/v1" }}
"#;
    let c = chart(
        &[("list.yaml", template)],
        &[
            ("conf/a.txt", "alpha\n"),
            ("conf/b.txt", "one\ntwo\n"),
            ("other/c.txt", "x"),
        ],
    );
    let out = render_one(&c, &Bounds::default()).unwrap();
    assert_eq!(
        out,
        "count: 2\nconf/a.txt: alpha\nconf/b.txt: one\ntwo\nlines: one,two\nsecrets:\n  a.txt: YWxwaGEK\nhas: true false\n"
    );
}

#[test]
fn tpl_reaches_the_charts_named_templates() {
    let c = chart(
        &[
            (
                "_helpers.tpl",
                "{{- define \"demo.name\" -}}web-{{ .Values.name }}{{- end -}}",
            ),
            (
                "cm.yaml",
                "a: {{ tpl \"{{ template \\\"demo.name\\\" . }}\" . }}\nb: {{ tpl \"{{ include \\\"demo.name\\\" . | upper }}\" . }}\n",
            ),
        ],
        &[],
    );
    assert_eq!(
        render_one(&c, &Bounds::default()).unwrap(),
        "a: web-web\nb: WEB-WEB\n"
    );
}

#[test]
fn import_values_bring_a_subcharts_exports_under_the_parents_own() {
    let mut files: BTreeMap<String, Vec<u8>> = BTreeMap::new();
    let parent = "apiVersion: v2\nname: app\nversion: 1.0.0\ndependencies:\n- name: db\n  version: 1.x\n  import-values:\n  - data\n  - child: settings\n    parent: imported.db\n";
    files.insert("Chart.yaml".into(), parent.as_bytes().to_vec());
    files.insert("values.yaml".into(), b"port: 8080\n".to_vec());
    files.insert(
        "templates/cm.yaml".into(),
        b"port: {{ .Values.port }}\nuser: {{ .Values.user }}\nsize: {{ .Values.imported.db.size }}\n".to_vec(),
    );
    files.insert(
        "charts/db/Chart.yaml".into(),
        b"apiVersion: v2\nname: db\nversion: 1.2.0\n".to_vec(),
    );
    files.insert(
        "charts/db/values.yaml".into(),
        b"exports:\n  data:\n    user: admin\n    port: 5432\nsettings:\n  size: 10Gi\n".to_vec(),
    );
    let c = Chart::load(&files).unwrap();
    // The parent's own port wins over the imported one.
    assert_eq!(
        render_one(&c, &Bounds::default()).unwrap(),
        "port: 8080\nuser: admin\nsize: 10Gi\n"
    );
}

#[test]
fn a_binary_file_is_encoded_whole_by_as_secrets_and_refused_as_text() {
    let mut files: BTreeMap<String, Vec<u8>> = BTreeMap::new();
    files.insert(
        "Chart.yaml".into(),
        b"apiVersion: v2\nname: ks\nversion: 1.0.0\n".to_vec(),
    );
    files.insert(
        "files/keystore.jks".into(),
        vec![0xfe, 0xed, 0xfe, 0xed, 0x00, 0xff],
    );
    files.insert(
        "templates/secret.yaml".into(),
        b"data:\n  {{- (.Files.Glob \"files/*\").AsSecrets | nindent 2 }}\n".to_vec(),
    );
    let c = Chart::load(&files).unwrap();
    assert_eq!(
        render_one(&c, &Bounds::default()).unwrap(),
        "data:\n  keystore.jks: /u3+7QD/\n"
    );
    files.insert(
        "templates/secret.yaml".into(),
        b"x: {{ .Files.Get \"files/keystore.jks\" }}\n".to_vec(),
    );
    let c = Chart::load(&files).unwrap();
    let error = render_one(&c, &Bounds::default()).unwrap_err().to_string();
    assert!(error.contains("files/keystore.jks is binary"), "{error}");
}

/// Sprig's functions as Sprig orders their arguments (the value a pipeline passes comes
/// last), where gtmpl-ng's differ, and Bitnami's fullname, which uses two of them.
#[test]
fn sprig_functions_take_sprigs_arguments_in_sprigs_order() {
    let template = r#"{{- $d := dict "a" (dict "x" 1) "e" "" -}}
{{- $_ := set $d "k" "v" -}}
{{- $_ := unset $d "gone" -}}
{{- $m := merge (dict "a" (dict "y" 2) "e" "filled" "b" 1) $d -}}
{{- $o := mergeOverwrite (dict "a" (dict "y" 2) "b" 1) (dict "a" (dict "x" 3) "b" "") -}}
set: {{ $d.k }}
merge: {{ toJson $m }}
mergeOverwrite: {{ toJson $o }}
dig: {{ dig "a" "x" "none" $d }} {{ dig "a" "q" "none" $d }}
pluck: {{ pluck "b" (dict "b" 1) (dict "c" 2) (dict "b" 3) | toJson }}
get: [{{ get $d "nope" }}]
title: {{ title "hello wide-world" }} {{ untitle "Hello World" }}
trim: {{ trimSuffix "-" "foo--" }} {{ trimPrefix "-" "--foo" }} {{ trimAll "$-" "$-x-$" }}
quote: {{ quote "a\"b" "c" .Values.nothing }} {{ squote "a" "b" }} [{{ cat "a" .Values.nothing "b" }}]
substr: {{ substr 0 63 "short" }} {{ substr 2 -1 "hello" }} {{ substr -1 2 "hello" }}
int: {{ int 3.7 }} {{ int "abc" }} {{ int "010" }} {{ int "0x1f" }} {{ int "4.00" }} {{ float64 "2.5" }} {{ float64 5 }} {{ atoi " 5" }}
first: [{{ first (list) }}] {{ last (list 1 2) }} {{ compact (list "a" "" 0 "b") | toJson }}
kinds: {{ kindOf (list 1) }} {{ kindIs "map" $d }} {{ typeOf "s" }} {{ kindIs "invalid" .Values.nothing }} {{ toString .Values.nothing }}
keys: {{ keys (dict "b" 1) (dict "a" 2) | toJson }}
has: {{ list "a" "b" | has "b" }} {{ has "c" (list "a") }} {{ has "x" .Values.nothing }} {{ has (dict "p" 1 "q" 2 "r" 3 "s" 4) (list (dict "s" 4 "r" 3 "q" 2 "p" 1)) }}
replace: {{ regexReplaceAll "(-?[^a-z\\d\\-])+-?" (lower "My_Release") "-" }}
expand: {{ regexReplaceAll "a(x*)b" "-ab-axxb-" "${1}W" }}
literal: {{ regexReplaceAllLiteral "a(x*)b" "-ab-axxb-" "${1}" }}
semver: {{ $v := semver "1.29.1-debian-12+b1" }}{{ printf "%d.%d.%d %s %s" $v.Major $v.Minor $v.Patch $v.Prerelease $v.Metadata }}
"#;
    let out = render_one(&chart(&[("t.yaml", template)], &[]), &Bounds::default()).unwrap();
    assert_eq!(
        out,
        "set: v\nmerge: {\"a\":{\"x\":1,\"y\":2},\"b\":1,\"e\":\"filled\",\"k\":\"v\"}\nmergeOverwrite: {\"a\":{\"x\":3,\"y\":2},\"b\":\"\"}\ndig: 1 none\npluck: [1,3]\nget: []\ntitle: Hello Wide-World hello world\ntrim: foo- -foo x\nquote: \"a\\\"b\" \"c\" 'a' 'b' [a b]\nsubstr: short llo he\nint: 3 0 8 31 4 2.5 5 0\nfirst: [] 2 [\"a\",\"b\"]\nkinds: slice true string true <nil>\nkeys: [\"a\",\"b\"]\nhas: true false false true\nreplace: my-release\nexpand: -W-xxW-\nliteral: -${1}-${1}-\nsemver: 1.29.1 debian-12 b1\n"
    );
    // A replacement that would grow past the output limit stops as it grows.
    let blowup = r#"{{ regexReplaceAll "" (repeat 100000 "a") (repeat 10000 "b") }}"#;
    let error = render_one(&chart(&[("t.yaml", blowup)], &[]), &Bounds::default()).unwrap_err();
    assert!(error.to_string().contains("regexReplaceAll"), "{error}");
}
