//! Tailing: the sources. The app's log files ([`files`]: by glob, through rotation and
//! truncation, from a checkpoint) and its stdout and stderr from the API's log stream
//! (`stream`) each cut what they read into lines ([`lines`]), joined into events where
//! configured ([`multiline`]), and hand them to the pipeline as the same [`crate::record::Record`].

pub mod checkpoint;
pub mod files;
pub mod glob;
pub mod lines;
pub mod multiline;
pub(crate) mod stream;

/// Where to start reading the files present when the agent starts (files that appear later
/// are always read from their beginning).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Start {
    /// Only what is written from now on.
    End,
    /// Everything already in them.
    Beginning,
}
