//! Link flags for the `weir` binary, each to hold less memory at start
//! (docs/design/code-order.md):
//!
//! - **Relative relocations packed** (`-z pack-relative-relocs`, DT_RELR). The binary is
//!   position-independent, and its ~44,000 relative relocations (vtables, tables of
//!   pointers) take 1 MiB as ordinary RELA entries, which the loader reads, so holds, at
//!   every start. Packed they take 12 KiB. glibc reads them from 2.36 on, so the flag is
//!   given only where the glibc that builds weir is that recent.
//! - **The code weir serve runs, together** (`--symbol-ordering-file code-order.txt`, in
//!   release builds). The kernel maps a binary's code 64 KiB around each page first
//!   touched, so 2 MiB of functions spread over 19 MiB of code kept about 10 MiB of it
//!   resident. Listed first, they fill a few MiB. The list is written by
//!   `scripts/code-order`; a function it names that the build no longer has is skipped,
//!   so a stale list costs memory, never correctness. It needs LLD, the linker Rust uses
//!   for x86_64-unknown-linux-gnu from 1.90 on; `WEIR_CODE_ORDER=0` leaves it out.

use std::process::Command;

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-env-changed=WEIR_CODE_ORDER");
    println!("cargo:rerun-if-env-changed=RUSTC_LINKER");
    let env = |name: &str| std::env::var(name).unwrap_or_default();
    let native = env("TARGET") == env("HOST");
    if env("CARGO_CFG_TARGET_OS") == "linux"
        && env("CARGO_CFG_TARGET_ENV") == "gnu"
        // A cross build links against another glibc, whose version this cannot read.
        && native
        && glibc_version().is_some_and(|version| version >= (2, 36))
    {
        println!("cargo:rustc-link-arg-bins=-Wl,-z,pack-relative-relocs");
    }

    let order = format!("{}/code-order.txt", env("CARGO_MANIFEST_DIR"));
    println!("cargo:rerun-if-changed={order}");
    let lld_by_default = env("TARGET") == "x86_64-unknown-linux-gnu"
        && rustc_minor().is_some_and(|minor| minor >= 90)
        // A linker of the user's choosing may not be LLD.
        && std::env::var_os("RUSTC_LINKER").is_none()
        && !env("CARGO_ENCODED_RUSTFLAGS").contains("link");
    let wanted = env("PROFILE") == "release" && env("WEIR_CODE_ORDER") != "0";
    if wanted && lld_by_default && std::path::Path::new(&order).is_file() {
        println!("cargo:rustc-link-arg-bins=-Wl,--symbol-ordering-file={order}");
        println!("cargo:rustc-link-arg-bins=-Wl,--no-warn-symbol-ordering");
    }
}

/// The build machine's glibc version (`getconf GNU_LIBC_VERSION`: "glibc 2.36").
fn glibc_version() -> Option<(u32, u32)> {
    let output = Command::new("getconf")
        .arg("GNU_LIBC_VERSION")
        .output()
        .ok()?;
    let text = String::from_utf8(output.stdout).ok()?;
    let mut parts = text.split_whitespace().nth(1)?.split('.');
    Some((parts.next()?.parse().ok()?, parts.next()?.parse().ok()?))
}

/// The minor version of the compiler building weir (`rustc --version`: "rustc 1.95.0 …").
fn rustc_minor() -> Option<u32> {
    let rustc = std::env::var_os("RUSTC")?;
    let output = Command::new(rustc).arg("--version").output().ok()?;
    let text = String::from_utf8(output.stdout).ok()?;
    let version = text.split_whitespace().nth(1)?;
    let mut parts = version.split('.');
    (parts.next()? == "1").then_some(())?;
    parts.next()?.parse().ok()
}
