//! e2e: the agent as a process with a real pod's identity, against a real kube-apiserver
//! (KUBECONFIG): a rule over its threshold puts one Warning Event on the pod, and further matches
//! grow that Event's series (the second occurrence at once, as client-go's events/v1 recorder
//! writes); `kubectl get events` shows it once with a growing count.
//! Run on purpose: `cargo test -p watcher-agent --test e2e events:: -- --ignored`.

use std::fs::OpenOptions;
use std::io::Write;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

fn kubectl(args: &[&str]) -> String {
    let output = Command::new("kubectl").args(args).output().expect("kubectl runs");
    assert!(output.status.success(), "kubectl {}: {}", args.join(" "), String::from_utf8_lossy(&output.stderr));
    String::from_utf8(output.stdout).expect("UTF-8")
}

/// The agent's Events on `pod`: (reason, series count or 1, note).
fn events(namespace: &str, pod: &str) -> Vec<(String, i64, String)> {
    let list: serde_json::Value =
        serde_json::from_str(&kubectl(&["get", "events.v1.events.k8s.io", "-n", namespace, "-o", "json"]))
            .expect("JSON");
    list["items"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|e| e["regarding"]["name"] == pod && e["reportingController"] == "watcher.dev/watcher-agent")
        .map(|e| {
            let count = e["series"]["count"].as_i64().unwrap_or(1);
            (
                e["reason"].as_str().unwrap_or_default().to_owned(),
                count,
                e["note"].as_str().unwrap_or_default().to_owned(),
            )
        })
        .collect()
}

fn wait_for<T>(what: &str, mut get: impl FnMut() -> Option<T>) -> T {
    let start = Instant::now();
    while start.elapsed() < Duration::from_secs(60) {
        if let Some(value) = get() {
            return value;
        }
        std::thread::sleep(Duration::from_millis(500));
    }
    panic!("timed out waiting for {what}");
}

#[test]
#[ignore = "needs a cluster: KUBECONFIG"]
fn an_alert_is_one_event_whose_count_grows() {
    let namespace = format!("watcher-e2e-agent-{}", std::process::id());
    kubectl(&["create", "namespace", &namespace]);
    let pod = serde_json::json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "shop"},
        "spec": {"containers": [{"name": "app", "image": "busybox:1.36", "command": ["sleep", "3600"]}]}});
    let manifest = std::env::temp_dir().join(format!("{namespace}-pod.json"));
    std::fs::write(&manifest, pod.to_string()).expect("manifest");
    kubectl(&["create", "-n", &namespace, "-f", manifest.to_str().expect("path")]);
    let uid = kubectl(&["get", "pod", "shop", "-n", &namespace, "-o", "jsonpath={.metadata.uid}"]);

    let dir = std::env::temp_dir().join(format!("{namespace}-logs"));
    std::fs::create_dir_all(&dir).expect("dir");
    let log = dir.join("app.log");
    std::fs::write(&log, "").expect("log");
    let listen = std::net::TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr()).expect("port");
    let mut agent = Command::new(env!("CARGO_BIN_EXE_watcher-agent"))
        .env("AGENT_FILES", format!("{}/*.log", dir.display()))
        .env("AGENT_RULE_ERROR", r"\bERROR\b")
        .env("AGENT_ALERT_ERROR", "2/1m")
        .env("AGENT_LISTEN", listen.to_string())
        .env("AGENT_POLL", "50ms")
        .env("AGENT_SHUTDOWN_LINGER", "0s")
        .env("POD_NAME", "shop")
        .env("POD_NAMESPACE", &namespace)
        .env("POD_UID", uid.trim())
        .stdout(Stdio::inherit())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("the agent starts");
    std::thread::sleep(Duration::from_secs(2));
    let write = |text: &str| {
        let mut file = OpenOptions::new().append(true).open(&log).expect("open");
        file.write_all(text.as_bytes()).expect("write");
    };
    write("INFO fine\nERROR first\nERROR second: over the threshold\n");
    let first = wait_for("the Event", || events(&namespace, "shop").into_iter().next());
    assert_eq!(first.0, "LogRuleError");
    assert!(first.2.contains("rule error matched 2 times within 2 in 1m; last line: ERROR second"), "{}", first.2);

    // More matches while it fires: the same Event, its count growing (the second occurrence is
    // written at once).
    for i in 0..5 {
        write(&format!("ERROR more {i}\n"));
    }
    let grown = wait_for("the count to grow", || {
        let all = events(&namespace, "shop");
        (all.len() == 1 && all[0].1 > first.1).then_some(all)
    });
    assert_eq!(grown.len(), 1, "one Event, not one per line: {grown:?}");
    let described = kubectl(&["describe", "pod", "shop", "-n", &namespace]);
    assert!(described.contains("LogRuleError"), "{described}");

    let _ = Command::new("kill").args(["-TERM", &agent.id().to_string()]).status();
    let status = agent.wait().expect("exits");
    assert!(status.success(), "exit 0 on SIGTERM: {status:?}");
    kubectl(&["delete", "namespace", &namespace, "--wait=false"]);
}
