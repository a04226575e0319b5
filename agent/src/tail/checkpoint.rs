//! Checkpoints (`AGENT_STATE_DIR`): where each file was read to (by what it holds: its
//! fingerprint, and the bytes before that offset), and the log stream's last time and the lines
//! of its last second, so that an agent that restarts (OOM, liveness, a node's kubelet
//! restarting it) counts what was written while it was down, once. Written whole to a temporary
//! file and renamed over the last (never a half-written checkpoint), at most once a second and
//! at exit. No checkpoint in the directory means the agent starts for the first time in this
//! pod.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};

/// The checkpoint's file name in `AGENT_STATE_DIR`.
pub const FILE_NAME: &str = "watcher-agent.checkpoint.json";
/// Checkpoints are written at most this often.
pub const EVERY: Duration = Duration::from_secs(1);
/// The version of the checkpoint's format this agent writes, and the newest it reads. A
/// checkpoint without one is version 1 (the format before versions: the same fields).
pub const VERSION: u32 = 1;

/// What a checkpoint holds.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Checkpoint {
    /// Its format's version ([`VERSION`]).
    #[serde(default = "first_version")]
    pub version: u32,
    /// When it was written (seconds since the epoch).
    pub written: u64,
    /// The files read, and where to.
    #[serde(default)]
    pub files: Vec<FileMark>,
    /// The log stream.
    #[serde(default)]
    pub stream: Option<StreamMark>,
}

impl Default for Checkpoint {
    fn default() -> Self {
        Self { version: VERSION, written: 0, files: Vec::new(), stream: None }
    }
}

fn first_version() -> u32 {
    1
}

/// Where a file was read to: resumed at `offset` where a file starts with the same first line
/// (`fingerprint`) and holds the same bytes before `offset` (`tail`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct FileMark {
    /// Its path when last seen (for people; a file is known by what it holds).
    pub path: String,
    /// Device and inode when last seen.
    pub dev: u64,
    /// Inode.
    pub ino: u64,
    /// Hash of its first line (or first bytes).
    pub fingerprint: u64,
    /// Bytes read, up to the end of the last whole line.
    pub offset: u64,
    /// Hash of the bytes just before `offset`.
    pub tail: u64,
    /// Its modification time when last seen (seconds since the epoch).
    pub modified: u64,
}

/// Where the log stream was read to.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct StreamMark {
    /// The container's restart count when it was read.
    pub restart_count: Option<i32>,
    /// The latest timestamp read (RFC 3339).
    pub last: Option<String>,
    /// The lines of the last second read (timestamp, hash of the text): a stream asked again
    /// from that second sends them again.
    #[serde(default)]
    pub recent: Vec<(String, u64)>,
}

/// Why a checkpoint cannot be read or written.
#[derive(Debug, thiserror::Error)]
pub enum CheckpointError {
    /// Reading, writing or renaming it failed.
    #[error("{path}: {source}")]
    Io {
        /// The checkpoint's path.
        path: PathBuf,
        /// What failed.
        source: std::io::Error,
    },
    /// It is not a checkpoint (damaged, or not JSON).
    #[error("{path}: {source}")]
    Damaged {
        /// The checkpoint's path.
        path: PathBuf,
        /// What is wrong with it.
        source: serde_json::Error,
    },
    /// A newer agent wrote it, in a format this one does not know.
    #[error("{path}: version {version}, written by a newer agent (this one reads up to {VERSION})")]
    Newer {
        /// The checkpoint's path.
        path: PathBuf,
        /// Its version.
        version: u32,
    },
}

/// The checkpoint in `dir`: `Ok(None)` where there is none (the first start in this pod).
pub fn read(dir: &Path) -> Result<Option<Checkpoint>, CheckpointError> {
    let path = dir.join(FILE_NAME);
    let bytes = match std::fs::read(&path) {
        Ok(bytes) => bytes,
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(source) => return Err(CheckpointError::Io { path, source }),
    };
    let checkpoint: Checkpoint = match serde_json::from_slice(&bytes) {
        Ok(checkpoint) => checkpoint,
        Err(source) => return Err(CheckpointError::Damaged { path, source }),
    };
    if checkpoint.version > VERSION {
        return Err(CheckpointError::Newer { path, version: checkpoint.version });
    }
    Ok(Some(checkpoint))
}

/// Writes `checkpoint` into `dir`: a temporary file, synced, renamed over the last.
pub fn write(dir: &Path, checkpoint: &Checkpoint) -> Result<(), CheckpointError> {
    let path = dir.join(FILE_NAME);
    let temporary: PathBuf = dir.join(format!(".{FILE_NAME}.tmp"));
    let bytes = match serde_json::to_vec(checkpoint) {
        Ok(bytes) => bytes,
        Err(source) => return Err(CheckpointError::Damaged { path, source }),
    };
    let write = || -> std::io::Result<()> {
        let mut file = std::fs::File::create(&temporary)?;
        file.write_all(&bytes)?;
        file.sync_data()?;
        std::fs::rename(&temporary, &path)
    };
    write().map_err(|source| CheckpointError::Io { path, source })
}

/// Seconds since the epoch of `time`.
pub fn seconds(time: SystemTime) -> u64 {
    time.duration_since(UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or_default()
}

/// FNV-1a of `bytes`: fingerprints and tails.
pub fn hash(bytes: &[u8]) -> u64 {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for byte in bytes {
        hash ^= u64::from(*byte);
        hash = hash.wrapping_mul(0x0000_0100_0000_01b3);
    }
    hash
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_checkpoint_is_written_whole_and_read_back() {
        let dir = std::env::temp_dir().join(format!("watcher-agent-checkpoint-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("dir");
        assert!(matches!(read(&dir), Ok(None)), "none: the first start");
        let checkpoint = Checkpoint {
            version: VERSION,
            written: 1_800_000_000,
            files: vec![FileMark { path: "/logs/app.log".into(), offset: 42, fingerprint: 7, ..FileMark::default() }],
            stream: Some(StreamMark {
                restart_count: Some(1),
                last: Some("2026-11-26T10:00:00Z".into()),
                recent: vec![],
            }),
        };
        write(&dir, &checkpoint).expect("written");
        assert_eq!(read(&dir).expect("read"), Some(checkpoint));
        assert!(!dir.join(format!(".{FILE_NAME}.tmp")).exists(), "renamed over");
        std::fs::write(dir.join(FILE_NAME), b"{half").expect("write");
        assert!(matches!(read(&dir), Err(CheckpointError::Damaged { .. })), "a damaged checkpoint is said");
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// A checkpoint as agents wrote it before the format had a version reads as version 1.
    #[test]
    fn a_checkpoint_without_a_version_is_read() {
        let dir = std::env::temp_dir().join(format!("watcher-agent-checkpoint-v0-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("dir");
        let before = r#"{"written":1795687200,"files":[{"path":"/var/log/app/app.log","dev":2049,"ino":1311,"fingerprint":1470109328540939617,"offset":420,"tail":9027133711312553457,"modified":1795687199}],"stream":{"restart_count":0,"last":"2026-11-26T10:00:00.123456789Z","recent":[["2026-11-26T10:00:00.123456789Z",42]]}}"#;
        std::fs::write(dir.join(FILE_NAME), before).expect("write");
        let read = read(&dir).expect("read").expect("a checkpoint");
        assert_eq!(read.version, 1);
        assert_eq!(read.files[0].offset, 420);
        assert_eq!(read.files[0].tail, 9_027_133_711_312_553_457);
        assert_eq!(
            read.stream.and_then(|s| s.recent.first().cloned()),
            Some(("2026-11-26T10:00:00.123456789Z".into(), 42))
        );
        // One from a newer agent is refused, not misread.
        std::fs::write(dir.join(FILE_NAME), r#"{"version":2,"written":1,"files":[]}"#).expect("write");
        assert!(matches!(read_newer(&dir), Some(2)));
        let _ = std::fs::remove_dir_all(&dir);
    }

    fn read_newer(dir: &Path) -> Option<u32> {
        match super::read(dir) {
            Err(CheckpointError::Newer { version, .. }) => Some(version),
            _ => None,
        }
    }
}
