//! The install manifests as kube-apiserver gets them: `kubectl kustomize deploy/`.
//!
//! These tests run the real tools. Without `kubectl` on the `PATH` they are skipped with a
//! message, unless `WATCHER_REQUIRE_TOOLS=1` (set by `.ci/run`), which makes a missing tool a
//! failure.

use std::path::Path;
use std::process::Command;

use serde_json::Value;

const ROOT: &str = env!("CARGO_MANIFEST_DIR");

/// The output of `program args...`, or `None` (test skipped) when the program is missing and
/// tools are not required.
fn run_tool(program: &str, args: &[&str]) -> Option<String> {
    let output = match Command::new(program).args(args).current_dir(ROOT).output() {
        Ok(output) => output,
        Err(error) if std::env::var_os("WATCHER_REQUIRE_TOOLS").is_none() => {
            eprintln!("skipped: cannot run {program} ({error}); .ci/run installs it");
            return None;
        }
        Err(error) => panic!("cannot run {program}: {error}"),
    };
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{program} {} failed: {stderr}", args.join(" "));
    Some(String::from_utf8(output.stdout).expect("UTF-8 output"))
}

/// The objects of a multi-document YAML stream.
fn documents(yaml: &str) -> Vec<Value> {
    let docs: Vec<Value> = serde_saphyr::from_multiple(yaml).expect("YAML");
    docs.into_iter().filter(|d| !d.is_null()).collect()
}

#[test]
fn deploy_clears_a_url_registration() {
    assert!(Path::new(ROOT).join("deploy/kustomization.yaml").exists());
    let Some(built) = run_tool("kubectl", &["kustomize", "deploy/"]) else { return };
    let objects = documents(&built);
    let config = objects
        .iter()
        .find(|o| o["kind"] == "MutatingWebhookConfiguration")
        .expect("deploy/ installs the webhook configuration");
    let webhooks = config["webhooks"].as_array().expect("webhooks");
    assert!(!webhooks.is_empty());
    for webhook in webhooks {
        let client_config = webhook["clientConfig"].as_object().expect("clientConfig");
        // Present and null: kubectl's apply (either kind) then removes a `url` another writer set.
        assert_eq!(client_config.get("url"), Some(&Value::Null), "{client_config:?}");
        assert_eq!(client_config["service"]["namespace"], "watcher-system");
    }
}
