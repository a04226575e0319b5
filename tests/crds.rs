//! `deploy/crds/crds.yaml` is the output of `watcher-operator crds`, byte for byte.

use std::process::Command;

#[test]
fn deploy_crds_match_the_generator() {
    let output = Command::new(env!("CARGO_BIN_EXE_watcher-operator")).arg("crds").output().expect("binary runs");
    assert!(output.status.success(), "crds failed: {}", String::from_utf8_lossy(&output.stderr));
    let generated = String::from_utf8(output.stdout).expect("UTF-8 YAML");
    let committed = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/deploy/crds/crds.yaml"))
        .expect("deploy/crds/crds.yaml exists");
    assert!(
        generated == committed,
        "deploy/crds/crds.yaml is stale: regenerate it with\n  cargo run -q -- crds > deploy/crds/crds.yaml"
    );
}
