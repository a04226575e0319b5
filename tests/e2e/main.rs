//! The e2e tests: the operator against a real kube-apiserver (`KUBECONFIG`), one module per
//! area, all ignored by default. `cargo test --test e2e -- --ignored --test-threads=1` runs them
//! all; a module's alone: `cargo test --test e2e webhook:: -- --ignored`. Those of [`node`]
//! need a node that runs pods (`.ci/e2e` runs them with one, the others with
//! `--skip node::`). docs/development.md says how to get a cluster.

mod common;

mod app;
mod at_podset;
mod canary;
mod check;
mod cluster_watcher;
mod helm;
mod images;
mod inplace;
mod install;
mod node;
mod pod_security;
mod pods;
mod resources;
mod rollout;
mod scope;
mod security;
mod sync;
mod validation;
mod watcher;
mod webhook;
