//! Sinks: where the alerts go. The alerts' windows and where they stand ([`alerts`]), said as
//! Warning Events on the pod (`events`) and posted to an Alertmanager (`alertmanager`), each
//! a task of its own that never holds up reading; and every series pushed by remote write
//! (`remote_write`).

pub(crate) mod alertmanager;
pub mod alerts;
pub(crate) mod events;
pub(crate) mod remote_write;
