//! The binary packs its relative relocations (`-z pack-relative-relocs`, DT_RELR): packed they
//! take kilobytes where `.rela.dyn` took 4 MB of it. Only glibc 2.36 and later apply them: a
//! static build (the release's) in the start code it takes from the build machine's `libc.a`, a
//! dynamic one in the loader of the machine it runs on, for `cargo install` the build machine.
//! So they are packed only when building for this machine and its glibc is new enough; a cross
//! build links another machine's glibc, which this script cannot ask.
use std::process::Command;

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    let target = |var: &str, value: &str| {
        std::env::var(var).is_ok_and(|values| values.split(',').any(|v| v == value))
    };
    let native = std::env::var("HOST").ok() == std::env::var("TARGET").ok();
    if native
        && target("CARGO_CFG_TARGET_OS", "linux")
        && target("CARGO_CFG_TARGET_ENV", "gnu")
        && host_glibc_applies_relr()
    {
        println!("cargo:rustc-link-arg-bins=-Wl,-z,pack-relative-relocs");
    }
}

/// Whether this machine's glibc is 2.36 or later (`getconf` prints "glibc 2.36").
fn host_glibc_applies_relr() -> bool {
    let Ok(output) = Command::new("getconf").arg("GNU_LIBC_VERSION").output() else {
        return false;
    };
    let printed = String::from_utf8_lossy(&output.stdout);
    let mut version = printed.trim().trim_start_matches("glibc ").split('.');
    let mut part = || version.next().and_then(|p| p.parse::<u32>().ok());
    matches!((part(), part()), (Some(major), Some(minor)) if (major, minor) >= (2, 36))
}
