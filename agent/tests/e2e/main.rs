//! The agent's e2e tests: the `watcher-agent` binary against a real kube-apiserver
//! (`KUBECONFIG`), one module per area, ignored by default:
//! `cargo test -p watcher-agent --test e2e -- --ignored`.

mod events;
