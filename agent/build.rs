//! The agent runs in every watched pod, so its binary's own pages count. On GNU/Linux its
//! relative relocations are packed (`DT_RELR`, glibc 2.36 and later): a few KiB for the loader,
//! or the static binary's own start-up, to read where a full table takes over 300 KiB. A linker
//! that does not know the option says so and links as before.

fn main() {
    let os = std::env::var("CARGO_CFG_TARGET_OS").unwrap_or_default();
    let env = std::env::var("CARGO_CFG_TARGET_ENV").unwrap_or_default();
    if os == "linux" && env == "gnu" {
        println!("cargo:rustc-link-arg-bins=-Wl,-z,pack-relative-relocs");
    }
    println!("cargo:rerun-if-changed=build.rs");
}
