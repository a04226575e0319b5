//! What a binary of the project is, as its `--version` says and its `*_build_info` metric
//! exports: the version, the commit it was built from (`-dirty` when the tree differed from
//! it), the cargo profile and the target triple, stamped at build time (build.rs).

/// The version (the workspace's `version`, semver).
pub const VERSION: &str = env!("CARGO_PKG_VERSION");
/// The commit, 12 hex digits, `-dirty` when tracked files differed from it; `unknown` when
/// built without the repository and without `WATCHER_BUILD_REVISION`.
pub const REVISION: &str = env!("WATCHER_BUILD_REVISION");
/// The cargo profile: `dist`, `agent` and `supervise` are what ships, `dev` a developer's build.
pub const PROFILE: &str = env!("WATCHER_BUILD_PROFILE");
/// The target triple, as `rustc --print target-list` names it.
pub const TARGET: &str = env!("WATCHER_BUILD_TARGET");

/// `--version`'s text after the binary's name: `0.2.0 (commit 3d27c0d1a2b3, profile dist,
/// target x86_64-unknown-linux-gnu)`. The version is its first word, for scripts that check it.
pub const LONG_VERSION: &str = concat!(
    env!("CARGO_PKG_VERSION"),
    " (commit ",
    env!("WATCHER_BUILD_REVISION"),
    ", profile ",
    env!("WATCHER_BUILD_PROFILE"),
    ", target ",
    env!("WATCHER_BUILD_TARGET"),
    ")"
);

/// The labels of a `*_build_info` gauge (always 1), as Prometheus' own `prometheus_build_info`
/// carries them.
pub const LABELS: [(&str, &str); 4] =
    [("version", VERSION), ("revision", REVISION), ("profile", PROFILE), ("target", TARGET)];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_long_version_starts_with_the_version_and_names_the_rest() {
        assert_eq!(LONG_VERSION.split_whitespace().next(), Some(VERSION));
        for part in [REVISION, PROFILE, TARGET] {
            assert!(!part.is_empty() && LONG_VERSION.contains(part), "{LONG_VERSION} lacks {part:?}");
        }
        assert!(TARGET.contains('-'), "{TARGET}");
    }

    #[test]
    fn the_revision_is_a_commit_or_says_it_is_unknown() {
        let commit = REVISION.strip_suffix("-dirty").unwrap_or(REVISION);
        assert!(
            commit == "unknown" || (commit.len() == 12 && commit.bytes().all(|b| b.is_ascii_hexdigit())),
            "{REVISION}"
        );
    }
}
