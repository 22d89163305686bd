//! The binary packs its relative relocations (`-z pack-relative-relocs`, DT_RELR): packed they
//! take kilobytes where `.rela.dyn` took 4 MB of it. A static build (the release's) applies them
//! in its own start code, which glibc has done since 2.36. A dynamic build leaves them to the
//! loader of the machine it runs on, so it packs them only when the build machine's glibc, the
//! one `cargo install` builds for, loads them.
use std::process::Command;

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    let target = |var: &str, value: &str| {
        std::env::var(var).is_ok_and(|values| values.split(',').any(|v| v == value))
    };
    if !(target("CARGO_CFG_TARGET_OS", "linux") && target("CARGO_CFG_TARGET_ENV", "gnu")) {
        return;
    }
    let native = std::env::var("HOST").ok() == std::env::var("TARGET").ok();
    if target("CARGO_CFG_TARGET_FEATURE", "crt-static") || (native && host_glibc_loads_relr()) {
        println!("cargo:rustc-link-arg-bins=-Wl,-z,pack-relative-relocs");
    }
}

/// Whether this machine's glibc is 2.36 or later (`getconf` prints "glibc 2.36").
fn host_glibc_loads_relr() -> bool {
    let Ok(output) = Command::new("getconf").arg("GNU_LIBC_VERSION").output() else {
        return false;
    };
    let printed = String::from_utf8_lossy(&output.stdout);
    let mut version = printed.trim().trim_start_matches("glibc ").split('.');
    let mut part = || version.next().and_then(|p| p.parse::<u32>().ok());
    matches!((part(), part()), (Some(major), Some(minor)) if (major, minor) >= (2, 36))
}
