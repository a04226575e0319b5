//! Stamps the build: the commit (`git describe`-free: the commit id, `-dirty` when tracked files
//! differ from it), the profile (the directory cargo builds into: `dist`, `agent`, `supervise`,
//! `debug` for dev) and the target triple.
//!
//! Where there is no repository (a source archive, `docker build` with `.git` ignored), the
//! commit comes from `WATCHER_BUILD_REVISION` (deploy/Dockerfile's `REVISION` argument), else
//! it is `unknown`.

use std::path::{Path, PathBuf};
use std::process::Command;

fn main() {
    println!("cargo:rerun-if-env-changed=WATCHER_BUILD_REVISION");
    let manifest = PathBuf::from(std::env::var_os("CARGO_MANIFEST_DIR").unwrap_or_default());
    let root = manifest.parent().map(Path::to_path_buf).unwrap_or(manifest);
    let revision = match std::env::var("WATCHER_BUILD_REVISION") {
        Ok(given) if !given.is_empty() => given,
        _ => git_revision(&root).unwrap_or_else(|| "unknown".to_owned()),
    };
    let profile = profile_of(&std::env::var("OUT_DIR").unwrap_or_default());
    let target = std::env::var("TARGET").unwrap_or_else(|_| "unknown".to_owned());
    println!("cargo:rustc-env=WATCHER_BUILD_REVISION={revision}");
    println!("cargo:rustc-env=WATCHER_BUILD_PROFILE={profile}");
    println!("cargo:rustc-env=WATCHER_BUILD_TARGET={target}");
}

/// The commit of the work tree at `root`, `-dirty` when a tracked file differs from it; `None`
/// without git or a repository.
fn git_revision(root: &Path) -> Option<String> {
    let git = |args: &[&str]| {
        let output = Command::new("git").arg("-C").arg(root).args(args).output().ok()?;
        output.status.success().then(|| String::from_utf8_lossy(&output.stdout).trim().to_owned())
    };
    let commit = git(&["rev-parse", "--short=12", "HEAD"])?;
    // A new commit, a checkout, a staged change: the stamp is made again. A source file
    // edited since is seen through the crates' own directories below. Only files that exist
    // are named: cargo runs a build script again at every build while a file it names is
    // missing (a checkout has no `packed-refs` until refs are packed; a packed branch has no
    // file of its own), and every crate that uses the stamp would be compiled again with it.
    if let Some(dir) = git(&["rev-parse", "--absolute-git-dir"]) {
        let mut files = vec!["HEAD".to_owned(), "index".to_owned(), "packed-refs".to_owned()];
        files.extend(git(&["symbolic-ref", "-q", "HEAD"]));
        for file in files {
            let path = Path::new(&dir).join(file);
            if path.exists() {
                println!("cargo:rerun-if-changed={}", path.display());
            }
        }
    }
    for entry in std::fs::read_dir(root).ok()?.flatten() {
        let path = entry.path();
        let name = entry.file_name();
        let skipped = name == "target" || name == ".git" || name == "fuzz";
        if !skipped
            && (path.join("Cargo.toml").is_file() || name == "src" || name == "Cargo.toml" || name == "Cargo.lock")
        {
            println!("cargo:rerun-if-changed={}", path.display());
        }
    }
    // `--no-optional-locks`: the index is read, never refreshed and written, which would be a
    // change to the file named above.
    let dirty = git(&["--no-optional-locks", "status", "--porcelain", "--untracked-files=no"])
        .is_some_and(|changes| !changes.is_empty());
    Some(if dirty { format!("{commit}-dirty") } else { commit })
}

/// The profile's name from the directory cargo builds it in (`target/[TRIPLE/]DIR/build/…`):
/// `debug` is the dev profile's, `release` the release profile's, any other a custom profile's.
fn profile_of(out_dir: &str) -> String {
    let parts: Vec<&str> = Path::new(out_dir).iter().filter_map(|p| p.to_str()).collect();
    let dir = parts.iter().rposition(|p| *p == "build").and_then(|i| i.checked_sub(1)).map(|i| parts[i]);
    match dir {
        Some("debug") => "dev".to_owned(),
        Some(dir) => dir.to_owned(),
        None => "unknown".to_owned(),
    }
}
