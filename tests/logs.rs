//! The operator's log as `kubectl logs` shows it: a pipe, not a terminal.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

/// A kubeconfig naming a server that is not there: the operator starts, logs, and retries.
const NO_SERVER: &str = "apiVersion: v1
kind: Config
clusters:
- name: none
  cluster: {server: \"https://127.0.0.1:1\"}
users:
- name: none
  user: {token: none}
contexts:
- name: none
  context: {cluster: none, user: none}
current-context: none
";

/// Written to a pipe, the log has no colour codes: its first lines, the start and the first
/// retries, are plain text.
#[test]
fn the_log_has_no_colour_codes() {
    let dir = std::env::temp_dir().join(format!("watcher-operator-logs-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("a temporary directory");
    let kubeconfig = dir.join("kubeconfig");
    std::fs::write(&kubeconfig, NO_SERVER).expect("the kubeconfig");
    let mut child = Command::new(env!("CARGO_BIN_EXE_watcher-operator"))
        .env_clear()
        .env("KUBECONFIG", &kubeconfig)
        .args(["--webhook-addr", "127.0.0.1:0", "--metrics-addr", "127.0.0.1:0", "--health-addr", "127.0.0.1:0"])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the operator starts");
    let stderr = child.stderr.take().expect("its standard error");
    let (lines_tx, lines) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            if lines_tx.send(line).is_err() {
                break;
            }
        }
    });
    let mut log = Vec::new();
    while log.len() < 3 {
        let line = lines.recv_timeout(Duration::from_secs(60));
        log.push(line.unwrap_or_else(|error| panic!("{error}: the log so far: {log:?}")));
    }
    child.kill().expect("the operator is stopped");
    child.wait().expect("the operator ends");
    std::fs::remove_dir_all(&dir).ok();
    assert!(log[0].contains("INFO") && log[0].contains("starting"), "{log:?}");
    assert!(log.iter().all(|line| !line.contains('\x1b')), "escape codes in the log: {log:?}");
}
