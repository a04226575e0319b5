//! The configuration as files: the Watcher's ConfigMap mounted as a volume (`AGENT_CONFIG_DIR`),
//! one file a variable. The kubelet writes a new version of it into a directory of its own and
//! swaps the `..data` link to it at once, so a read through `..data` sees one version whole;
//! another directory (made by hand) is read as it is, each regular file whose name does not
//! start with a dot.

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::path::Path;

/// The variables a directory holds, by name.
pub type Files = BTreeMap<String, String>;

/// The kubelet's link to the version of a ConfigMap volume it wrote last.
const DATA_LINK: &str = "..data";
/// The most a configuration file is read (a ConfigMap holds at most 1 MiB).
const MAX_FILE: u64 = 1 << 20;

/// Why a configuration directory could not be read.
#[derive(Clone, Debug, thiserror::Error, PartialEq, Eq)]
pub enum DirError {
    /// The directory (or its `..data`) cannot be listed.
    #[error("AGENT_CONFIG_DIR {dir}: cannot be read: {error}")]
    Unlisted {
        /// The directory.
        dir: String,
        /// Why.
        error: String,
    },
    /// A file cannot be read, or is not UTF-8 text.
    #[error("{name}: the file {path} cannot be read: {error}")]
    Unreadable {
        /// The variable.
        name: String,
        /// The file.
        path: String,
        /// Why.
        error: String,
    },
}

/// The variables in `dir`; `None` where it does not exist (no configuration as files).
pub fn read(dir: &Path) -> Option<Result<Files, DirError>> {
    if !dir.exists() {
        return None;
    }
    let linked = dir.join(DATA_LINK);
    let base = if linked.exists() { linked } else { dir.to_owned() };
    Some(read_files(&base))
}

fn read_files(base: &Path) -> Result<Files, DirError> {
    let unlisted =
        |error: std::io::Error| DirError::Unlisted { dir: base.display().to_string(), error: error.to_string() };
    let mut files = Files::new();
    for entry in std::fs::read_dir(base).map_err(unlisted)? {
        let entry = entry.map_err(unlisted)?;
        let Ok(name) = entry.file_name().into_string() else { continue };
        let path = entry.path();
        if name.starts_with('.') || !std::fs::metadata(&path).is_ok_and(|m| m.is_file()) {
            continue;
        }
        let unreadable =
            |error: String| DirError::Unreadable { name: name.clone(), path: path.display().to_string(), error };
        let length = std::fs::metadata(&path).map(|m| m.len()).unwrap_or_default();
        if length > MAX_FILE {
            return Err(unreadable(format!("{length} bytes, more than a ConfigMap holds")));
        }
        let bytes = std::fs::read(&path).map_err(|e| unreadable(e.to_string()))?;
        let text = String::from_utf8(bytes).map_err(|_| unreadable("not UTF-8 text".to_owned()))?;
        files.insert(name, text);
    }
    Ok(files)
}

/// Where the variables come from: the container's own (its `env`, which wins, as the kubelet
/// has it), then the directory's. The environment the agent started with holds both: a variable
/// whose value is the one the directory had then came from the ConfigMap (`envFrom`), and
/// follows the directory from then on.
#[derive(Clone, Debug, Default)]
pub struct Sources {
    own: Vec<(OsString, OsString)>,
}

impl Sources {
    /// The sources of `environment`, as the directory held `files` when it was read.
    pub fn new(environment: impl IntoIterator<Item = (OsString, OsString)>, files: &Files) -> Self {
        let from_files = |(name, value): &(OsString, OsString)| {
            let (Some(name), Some(value)) = (name.to_str(), value.to_str()) else { return false };
            files.get(name).is_some_and(|file| file == value)
        };
        Self { own: environment.into_iter().filter(|var| !from_files(var)).collect() }
    }

    /// The variables with the directory holding `files`.
    pub fn vars(&self, files: &Files) -> Vec<(OsString, OsString)> {
        let own = |name: &str| self.own.iter().any(|(n, _)| n == name);
        let mut vars = self.own.clone();
        vars.extend(files.iter().filter(|(name, _)| !own(name)).map(|(n, v)| (n.into(), v.into())));
        vars
    }
}

/// The hash of the agent's variables among `vars` (`AGENT_`, and the pod's `POD_`): what
/// `watcher_agent_config_info` names the configuration that runs by. 16 hex digits (FNV-1a).
pub fn hash(vars: &[(OsString, OsString)]) -> String {
    let mut ours: Vec<(&OsString, &OsString)> = vars
        .iter()
        .filter(|(name, _)| name.to_str().is_some_and(|n| n.starts_with(super::PREFIX)))
        .map(|(n, v)| (n, v))
        .collect();
    ours.sort();
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for (name, value) in ours {
        for byte in name.as_encoded_bytes().iter().chain(b"=").chain(value.as_encoded_bytes()).chain(b"\n") {
            hash ^= u64::from(*byte);
            hash = hash.wrapping_mul(0x0100_0000_01b3);
        }
    }
    format!("{hash:016x}")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vars(pairs: &[(&str, &str)]) -> Vec<(OsString, OsString)> {
        pairs.iter().map(|(n, v)| ((*n).into(), (*v).into())).collect()
    }

    /// A new, empty directory of this test's own.
    fn scratch(name: &str) -> std::path::PathBuf {
        let dir = std::env::temp_dir().join(format!("watcher-agent-config-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("a directory");
        dir
    }

    fn files(pairs: &[(&str, &str)]) -> Files {
        pairs.iter().map(|(n, v)| ((*n).to_owned(), (*v).to_owned())).collect()
    }

    /// A ConfigMap volume as the kubelet writes it: a version's directory, `..data` linking to
    /// it, and a link per key; a new version swapped in through `..data`.
    #[test]
    fn a_config_map_volume_is_read_through_its_data_link() {
        let dir = scratch("volume");
        let write = |version: &str, pairs: &[(&str, &str)]| {
            let versioned = dir.as_path().join(version);
            std::fs::create_dir(&versioned).expect("a version");
            for (name, value) in pairs {
                std::fs::write(versioned.join(name), value).expect("a file");
            }
            let link = dir.as_path().join("..data_tmp");
            std::os::unix::fs::symlink(version, &link).expect("a link");
            std::fs::rename(&link, dir.as_path().join(DATA_LINK)).expect("swapped");
        };
        write("..2026_12_07_00_00_00.1", &[("AGENT_RULE_ERROR", "ERROR"), ("AGENT_FILES", "/var/log/*.log")]);
        for name in ["AGENT_RULE_ERROR", "AGENT_FILES"] {
            std::os::unix::fs::symlink(format!("..data/{name}"), dir.as_path().join(name)).expect("a key's link");
        }
        let read1 = read(dir.as_path()).expect("there").expect("read");
        assert_eq!(read1, files(&[("AGENT_FILES", "/var/log/*.log"), ("AGENT_RULE_ERROR", "ERROR")]));
        write("..2026_12_07_00_01_00.2", &[("AGENT_RULE_ERROR", "ERROR|FATAL"), ("AGENT_FILES", "/var/log/*.log")]);
        let read2 = read(dir.as_path()).expect("there").expect("read");
        assert_eq!(read2["AGENT_RULE_ERROR"], "ERROR|FATAL");
        assert!(read(&dir.as_path().join("absent")).is_none());
    }

    /// A directory made by hand: its regular files, dot files left out; a file that is not text
    /// is an error naming it.
    #[test]
    fn a_directory_made_by_hand_is_read_as_it_is() {
        let dir = scratch("by-hand");
        std::fs::write(dir.as_path().join("AGENT_RULE_X"), "x").expect("a file");
        std::fs::write(dir.as_path().join(".swp"), "half").expect("a file");
        std::fs::create_dir(dir.as_path().join("sub")).expect("a directory");
        assert_eq!(read(dir.as_path()).expect("there"), Ok(files(&[("AGENT_RULE_X", "x")])));
        std::fs::write(dir.as_path().join("AGENT_RULE_Y"), [0xff, 0xfe]).expect("a file");
        let error = read(dir.as_path()).expect("there").expect_err("not text");
        assert!(error.to_string().starts_with("AGENT_RULE_Y: the file "), "{error}");
    }

    /// The container's own `env` wins; a variable the ConfigMap gave follows the directory, and
    /// goes with it.
    #[test]
    fn the_containers_own_variables_win_and_the_rest_follow_the_directory() {
        let at_start =
            files(&[("AGENT_RULE_ERROR", "ERROR"), ("AGENT_RULE_OLD", "old"), ("AGENT_LISTEN", "0.0.0.0:1")]);
        let environment = vars(&[
            ("AGENT_RULE_ERROR", "ERROR"),
            ("AGENT_RULE_OLD", "old"),
            ("AGENT_LISTEN", "0.0.0.0:9102"),
            ("POD_NAME", "shop"),
        ]);
        let sources = Sources::new(environment, &at_start);
        let now = files(&[("AGENT_RULE_ERROR", "ERROR|FATAL"), ("AGENT_LISTEN", "0.0.0.0:2")]);
        let mut got = sources.vars(&now);
        got.sort();
        assert_eq!(
            got,
            vars(&[("AGENT_LISTEN", "0.0.0.0:9102"), ("AGENT_RULE_ERROR", "ERROR|FATAL"), ("POD_NAME", "shop")])
        );
        assert_eq!(hash(&got), hash(&got.iter().rev().cloned().collect::<Vec<_>>()), "in any order");
        assert_ne!(hash(&got), hash(&vars(&[("AGENT_RULE_ERROR", "ERROR")])));
    }
}
