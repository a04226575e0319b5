//! The platforms a release is made for, and how each is built and run on this (x86_64) machine.
//!
//! linux/amd64 is built by the toolchain the project builds with (the `cargo` on `PATH`), as
//! the tests run it. linux/arm64 is built by Debian's Rust (`rustc-web` and `cargo-web`, with
//! `libstd-rust-web-dev:arm64`): rustup cannot fetch another target's standard library here,
//! Debian's package holds it. It links with `aarch64-linux-gnu-gcc` (against the sysroot of
//! `libc6-dev-arm64-cross`), and it runs with Debian's arm64 C library, `libc6:arm64`
//! (`/lib/aarch64-linux-gnu`, `/lib/ld-linux-aarch64.so.1`): the operator's image holds those
//! files, and `qemu-aarch64-static -L /` runs the binaries here with them. (Not with the cross
//! sysroot's loader: where `libc6:arm64` is installed beside it, qemu finds that package's
//! newer libc.so.6 first, and a loader and a libc of two builds deadlock at the first thread.)
//! docs/development.md, "arm64".

use std::path::{Path, PathBuf};

use anyhow::{Context, bail};

/// A platform of the release.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Platform {
    /// OCI's `architecture` (`os` is `linux`).
    pub(crate) architecture: &'static str,
    /// Rust's target triple.
    pub(crate) target: &'static str,
}

pub(crate) const AMD64: Platform = Platform { architecture: "amd64", target: "x86_64-unknown-linux-gnu" };
pub(crate) const ARM64: Platform = Platform { architecture: "arm64", target: "aarch64-unknown-linux-gnu" };

/// Every platform of a release, in the order of its images' indexes.
pub(crate) const PLATFORMS: [Platform; 2] = [AMD64, ARM64];

/// `name`'s value, else `default`.
fn setting(name: &str, default: &str) -> String {
    std::env::var(name).ok().filter(|v| !v.is_empty()).unwrap_or_else(|| default.to_owned())
}

impl Platform {
    /// `linux-amd64`: the directory of this platform's binaries under `--binaries`.
    pub(crate) fn dir(&self) -> String {
        format!("linux-{}", self.architecture)
    }

    /// `linux/arm64`.
    pub(crate) fn name(&self) -> String {
        format!("linux/{}", self.architecture)
    }

    /// Where this platform's C library is, for a platform other than this machine's
    /// (`WATCHER_ARM64_ROOT`, default `/`: Debian's `libc6:arm64`), and its multiarch name:
    /// the operator's shared libraries and loader come from there, and qemu finds them there.
    pub(crate) fn foreign_root(&self) -> Option<(PathBuf, &'static str)> {
        (*self == ARM64).then(|| (PathBuf::from(setting("WATCHER_ARM64_ROOT", "/")), "aarch64-linux-gnu"))
    }

    /// The cargo that builds for this platform, with the environment it needs; `target_dir`
    /// for a platform built by another toolchain (its own artefacts, never mixed).
    pub(crate) fn cargo(&self, target_dir: &Path) -> anyhow::Result<std::process::Command> {
        if *self == AMD64 {
            return Ok(std::process::Command::new("cargo"));
        }
        let cargo = setting("WATCHER_ARM64_CARGO", "/usr/bin/cargo");
        let rustc = setting("WATCHER_ARM64_RUSTC", "/usr/bin/rustc");
        for (tool, package) in [(&cargo, "cargo-web"), (&rustc, "rustc-web and libstd-rust-web-dev:arm64")] {
            if !Path::new(tool).is_file() {
                bail!(
                    "{tool} is not here: linux/arm64 is built with Debian's Rust (dpkg --add-architecture arm64; \
                     apt-get install {package} gcc-aarch64-linux-gnu libc6-dev-arm64-cross qemu-user-static), \
                     docs/development.md"
                );
            }
        }
        let mut command = std::process::Command::new(cargo);
        command
            .env("RUSTC", rustc)
            .env("RUSTDOC", setting("WATCHER_ARM64_RUSTDOC", "/usr/bin/rustdoc"))
            .env(
                "CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_LINKER",
                setting("WATCHER_ARM64_LINKER", "aarch64-linux-gnu-gcc"),
            )
            .env("CARGO_TARGET_DIR", target_dir)
            // The settings of the toolchain on PATH (CI's clippy) are not Debian's rustc's.
            .env_remove("RUSTC_WORKSPACE_WRAPPER")
            .env_remove("RUSTC_WRAPPER")
            .env_remove("RUSTFLAGS");
        Ok(command)
    }

    /// Runs `binary` of this platform with `args`: directly, or under qemu with `root` as its
    /// file system's root (an image's files), else [`Platform::foreign_root`]. Its stdout.
    pub(crate) fn run(&self, binary: &Path, args: &[&str], root: Option<&Path>) -> anyhow::Result<String> {
        let binary = binary.display().to_string();
        if *self == AMD64 {
            return crate::cmd::run(&binary, args);
        }
        let qemu = setting("WATCHER_ARM64_RUNNER", "qemu-aarch64-static");
        let root = root.map(Path::to_path_buf).or_else(|| self.foreign_root().map(|r| r.0)).context("a root")?;
        let root = root.display().to_string();
        crate::cmd::run(&qemu, &[&["-L", root.as_str(), binary.as_str()], args].concat())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_platform_names_its_triple_and_directory() {
        assert_eq!(PLATFORMS.map(|p| p.dir()), ["linux-amd64", "linux-arm64"]);
        assert_eq!(ARM64.name(), "linux/arm64");
        assert_eq!(AMD64.foreign_root(), None);
        assert!(ARM64.target.starts_with("aarch64-"));
    }
}
