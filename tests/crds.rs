//! `deploy/crds/crds.yaml` and the chart's `crds/crds.yaml` are the output of
//! `watcher-operator crds`, byte for byte.

use std::process::Command;

#[test]
fn committed_crds_match_the_generator() {
    let output = Command::new(env!("CARGO_BIN_EXE_watcher-operator")).arg("crds").output().expect("binary runs");
    assert!(output.status.success(), "crds failed: {}", String::from_utf8_lossy(&output.stderr));
    let generated = String::from_utf8(output.stdout).expect("UTF-8 YAML");
    for path in ["deploy/crds/crds.yaml", "charts/watcher-operator/crds/crds.yaml"] {
        let committed = std::fs::read_to_string(format!("{}/{path}", env!("CARGO_MANIFEST_DIR")))
            .unwrap_or_else(|e| panic!("{path}: {e}"));
        assert!(generated == committed, "{path} is stale: regenerate it with\n  cargo run -q -- crds > {path}");
    }
}
