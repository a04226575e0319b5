//! Tailing: the sources. The app's log files ([`files`]: by glob, through rotation and
//! truncation, from a checkpoint) and its stdout and stderr from the API's log stream
//! (`stream`) each cut what they read into lines ([`lines`]), joined into events where
//! configured ([`multiline`]), and hand them to the pipeline as the same [`crate::pipeline::Record`].

pub mod checkpoint;
pub mod files;
pub mod lines;
pub mod multiline;
pub(crate) mod stream;
