//! Packaged charts: unpacked as Helm unpacks them, and within bounds whatever they hold.

use std::collections::BTreeMap;

use lariat_helm::archive::{self, Budget};
use lariat_helm::chart::Chart;

/// A gzipped tar of `entries` (path, content), as `helm package` writes one.
fn tgz(entries: &[(&str, &[u8])]) -> Vec<u8> {
    let mut builder = tar::Builder::new(flate2::write::GzEncoder::new(
        Vec::new(),
        flate2::Compression::default(),
    ));
    for (path, data) in entries {
        let mut header = tar::Header::new_gnu();
        header.set_size(data.len() as u64);
        header.set_mode(0o644);
        header.set_entry_type(tar::EntryType::Regular);
        // Written raw: `set_path` itself refuses `..`, which an attacker's archive need not.
        header.as_old_mut().name[..path.len()].copy_from_slice(path.as_bytes());
        header.set_cksum();
        builder.append(&header, *data).unwrap();
    }
    builder.into_inner().unwrap().finish().unwrap()
}

#[test]
fn a_packaged_subchart_is_a_subchart() {
    let sub = tgz(&[
        (
            "db/Chart.yaml",
            b"apiVersion: v2\nname: db\nversion: 1.0.0\n",
        ),
        ("db/values.yaml", b"port: 5432\n"),
        ("db/templates/cm.yaml", b"kind: ConfigMap\n"),
    ]);
    let mut files = BTreeMap::new();
    files.insert(
        "Chart.yaml".to_string(),
        b"apiVersion: v2\nname: app\nversion: 1.0.0\n".to_vec(),
    );
    files.insert("charts/db-1.0.0.tgz".to_string(), sub);
    let chart = Chart::load(&files).unwrap();
    assert_eq!(chart.dependencies.len(), 1);
    assert_eq!(chart.dependencies[0].name(), "db");
    assert_eq!(chart.dependencies[0].values["port"], 5432);
}

#[test]
fn archives_that_climb_out_or_inflate_are_refused() {
    let climbing = tgz(&[
        ("db/Chart.yaml", b"name: db\n"),
        ("db/../../etc/passwd", b"x"),
    ]);
    let error = archive::unpack("charts/db.tgz", &climbing, &mut Budget::default()).unwrap_err();
    assert!(error.to_string().contains("outside the chart"), "{error}");
    // 6 MiB of zeros gzip to a few KiB; Helm's limit per file is 5 MiB.
    let zeros = vec![0u8; 6 * 1024 * 1024];
    let bomb = tgz(&[("db/Chart.yaml", b"name: db\n"), ("db/big", &zeros)]);
    assert!(bomb.len() < 64 * 1024);
    let error = archive::unpack("charts/db.tgz", &bomb, &mut Budget::default()).unwrap_err();
    assert!(
        error.to_string().contains("more than 5242880 bytes"),
        "{error}"
    );
    // Many files within the per-file limit draw on one budget for the whole chart.
    let four = vec![0u8; 4 * 1024 * 1024];
    let wide = tgz(&[
        ("db/Chart.yaml", b"name: db\n"),
        ("db/a", &four),
        ("db/b", &four),
    ]);
    let mut budget = Budget {
        left: 6 * 1024 * 1024,
    };
    let error = archive::unpack("charts/db.tgz", &wide, &mut budget).unwrap_err();
    assert!(
        error.to_string().contains("decompresses to more than"),
        "{error}"
    );
    let error = archive::unpack("charts/db.tgz", b"not gzip", &mut Budget::default()).unwrap_err();
    assert!(error.to_string().contains("not a gzipped tar"), "{error}");
    let empty = tgz(&[("db/values.yaml", b"a: 1\n")]);
    let error = archive::unpack("charts/db.tgz", &empty, &mut Budget::default()).unwrap_err();
    assert!(error.to_string().contains("no Chart.yaml"), "{error}");
}

#[test]
fn a_long_name_header_cannot_inflate_past_the_budget() {
    // A GNU long-name entry whose name is 8 MiB: tar reads it whole before any entry.
    let mut raw = Vec::new();
    let mut header = tar::Header::new_gnu();
    let name = vec![b'a'; 8 * 1024 * 1024];
    header.as_old_mut().name[..13].copy_from_slice(b"././@LongLink");
    header.set_entry_type(tar::EntryType::GNULongName);
    header.set_size(name.len() as u64);
    header.set_cksum();
    raw.extend_from_slice(header.as_bytes());
    raw.extend_from_slice(&name);
    raw.resize(raw.len().div_ceil(512) * 512, 0);
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    std::io::Write::write_all(&mut gz, &raw).unwrap();
    let archive = gz.finish().unwrap();
    let mut budget = Budget { left: 1024 * 1024 };
    let error = archive::unpack("charts/x.tgz", &archive, &mut budget).unwrap_err();
    assert!(
        error.to_string().contains("decompresses to more than"),
        "{error}"
    );
}
