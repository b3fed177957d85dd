//! Names the kind of build in weir's version (`weir_core::VERSION`, shown by `weir --version`
//! and in `weir lab`'s reports), so that a figure's binary says which build it was:
//! `0.1.0+pgo` for the build laid out by a profile (`scripts/build-pgo`,
//! docs/design/build.md), `0.1.0+instrumented` for the build that writes that profile, and
//! `0.1.0` for any other. The flags apply to every crate of a build, so this crate sees the
//! same ones as the binary; cargo rebuilds it when they change.

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    let flags = std::env::var("CARGO_ENCODED_RUSTFLAGS").unwrap_or_default();
    let kind = if flags.contains("profile-use") {
        "+pgo"
    } else if flags.contains("profile-generate") {
        "+instrumented"
    } else {
        ""
    };
    let version = std::env::var("CARGO_PKG_VERSION").unwrap_or_default();
    println!("cargo:rustc-env=WEIR_VERSION={version}{kind}");
}
