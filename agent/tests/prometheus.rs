//! The `watcher-agent` binary scraped by a real Prometheus: Debian's `prometheus` (2.42, which
//! `.ci/run` installs), started by the test with the features the agent's newer series need, and
//! asked through its HTTP API what it stored. Without `prometheus` on the `PATH` each test says so
//! and passes, unless `WATCHER_REQUIRE_TOOLS=1` (set by `.ci/run`), which makes it a failure.

mod support;

use std::net::SocketAddr;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;
use support::*;

/// A Prometheus of its own, scraping one agent every second; killed when dropped.
struct Prometheus {
    child: Child,
    addr: SocketAddr,
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Prometheus {
    /// Prometheus scraping `target`, its files in `dir`, ready; `None` where it is not installed
    /// (and the tools are not required).
    fn start(dir: &Path, target: SocketAddr) -> Option<Self> {
        if Command::new("prometheus").arg("--version").output().is_err() {
            assert!(
                std::env::var_os("WATCHER_REQUIRE_TOOLS").is_none(),
                "prometheus is not installed (Debian's package `prometheus`)"
            );
            eprintln!("prometheus is not installed: not tested");
            return None;
        }
        let config = dir.join("prometheus.yml");
        std::fs::write(
            &config,
            format!(
                "global: {{scrape_interval: 1s, scrape_timeout: 900ms}}\n\
                 scrape_configs:\n  - job_name: agent\n    static_configs: [{{targets: [\"{target}\"]}}]\n"
            ),
        )
        .expect("the configuration");
        // A port found free can be taken before Prometheus binds it: it exits, and starts again
        // on another.
        for _ in 0..5 {
            let addr = free_port();
            let child = Command::new("prometheus")
                .arg(format!("--config.file={}", config.display()))
                .arg(format!("--storage.tsdb.path={}", dir.join("data").display()))
                .arg(format!("--web.listen-address={addr}"))
                .args(["--enable-feature=native-histograms,exemplar-storage", "--web.enable-remote-write-receiver"])
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .expect("prometheus starts");
            let mut prometheus = Self { child, addr };
            let start = Instant::now();
            while start.elapsed() < Duration::from_secs(30) {
                if get(addr, "/-/ready").is_some_and(|(status, _)| status == 200) {
                    return Some(prometheus);
                }
                if prometheus.child.try_wait().ok().flatten().is_some() {
                    break;
                }
                std::thread::sleep(Duration::from_millis(50));
            }
            assert!(prometheus.child.try_wait().ok().flatten().is_some(), "Prometheus not ready within 30 s");
        }
        panic!("Prometheus exited at every start")
    }

    /// The value of the instant query `expr` now (its one series), `None` while it has none.
    fn query(&self, expr: &str) -> Option<f64> {
        let (status, body) = get(self.addr, &format!("/api/v1/query?query={}", encoded(expr)))?;
        // The JSON document, whether the body came whole or in chunks.
        let (start, end) = (body.find('{')?, body.rfind('}')?);
        let answer: Value = serde_json::from_str(&body[start..=end]).ok().filter(|_| status == 200)?;
        let result = answer["data"]["result"].as_array()?;
        (result.len() == 1).then(|| result[0]["value"][1].as_str()?.parse().ok()).flatten()
    }

    /// Waits (at most 30 s) until `expr` is `expected`.
    fn wait_value(&self, expr: &str, expected: f64) {
        let start = Instant::now();
        let mut last = None;
        while start.elapsed() < Duration::from_secs(30) {
            last = self.query(expr);
            if last == Some(expected) {
                return;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        panic!("{expr}: {last:?} in Prometheus, not {expected}");
    }
}

/// The agent following `dir/*.log` with `rule` (its variables), read every 20 ms, no Events.
fn files_agent(dir: &Path, rule: &[(&str, &str)]) -> Agent {
    let mut vars = vec![
        ("AGENT_FILES", format!("{}/*.log", dir.display())),
        ("AGENT_POLL", "20ms".to_owned()),
        ("AGENT_EVENTS", "false".to_owned()),
    ];
    vars.extend(rule.iter().map(|(k, v)| (*k, (*v).to_owned())));
    Agent::start(&vars)
}

/// `text` as a URL's query value.
fn encoded(text: &str) -> String {
    text.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// An app that logs its running total and restarts once: Prometheus stores each total as it was
/// logged and sees the restart as one counter reset (`AGENT_METRIC_<NAME>=cumulative`).
#[test]
fn a_running_total_is_stored_as_logged_and_its_restart_is_one_reset() {
    let dir = dir("prometheus-cumulative");
    let log = dir.join("app.log");
    append(&log, "");
    let agent = files_agent(
        &dir,
        &[
            ("AGENT_RULE_REQUESTS", r"requests_total=(?P<n>\d+)"),
            ("AGENT_VALUE_REQUESTS", "n"),
            ("AGENT_METRIC_REQUESTS", "cumulative"),
        ],
    );
    let Some(prometheus) = Prometheus::start(&dir, agent.addr) else { return };
    let series = r#"watcher_agent_requests_total{rule="requests"}"#;
    for total in [100, 250, 40, 90] {
        append(&log, &format!("GET /cart served, requests_total={total}\n"));
        prometheus.wait_value(series, f64::from(total));
    }
    assert_eq!(prometheus.query(&format!("resets({series}[5m])")), Some(1.0), "the app's restart, once");
    assert_eq!(prometheus.query(&format!("max_over_time({series}[5m])")), Some(250.0));
}

/// A native histogram (`AGENT_NATIVE_<NAME>=1.1`) scraped by Prometheus with native histograms
/// on: it asks for the protobuf exposition, and stores the histogram whole. Its count is exact
/// and its p99 within the factor's error of the true p99 of the values written; a scraper that
/// asks for text still gets the classic buckets.
#[test]
fn a_native_histogram_is_scraped_in_protobuf_and_its_p99_is_within_the_factor() {
    let dir = dir("prometheus-native");
    let log = dir.join("app.log");
    append(&log, "");
    let agent = files_agent(
        &dir,
        &[
            ("AGENT_RULE_LATENCY", r"took=(?P<ms>\d+)ms"),
            ("AGENT_VALUE_LATENCY", "ms"),
            ("AGENT_METRIC_LATENCY", "histogram"),
            ("AGENT_UNIT_LATENCY", "ms"),
            ("AGENT_NATIVE_LATENCY", "1.1"),
        ],
    );
    let Some(prometheus) = Prometheus::start(&dir, agent.addr) else { return };
    // 1 ms to 1000 ms, each once, in a shuffled order: the true p99 is 990 ms.
    let values: Vec<u32> = (1..=1000).map(|i| (i * 337) % 1000 + 1).collect();
    let lines: String = values.iter().map(|ms| format!("GET /cart took={ms}ms\n")).collect();
    append(&log, &lines);
    let series = r#"watcher_agent_latency_seconds{rule="latency"}"#;
    prometheus.wait_value(&format!("histogram_count({series})"), 1000.0);
    let p99 = prometheus.query(&format!("histogram_quantile(0.99, {series})")).expect("a p99");
    assert!((p99 / 0.99 - 1.0).abs() <= 0.1, "p99 {p99} s, the true one 0.99 s");
    let sum = prometheus.query(&format!("histogram_sum({series})")).expect("a sum");
    assert!((sum - 500.5).abs() < 1e-6, "{sum}");
    eprintln!("native histogram in Prometheus: count 1000, p99 {p99} s (true 0.99 s), sum {sum} s");
    let (_, text) = get(agent.addr, "/metrics").expect("/metrics");
    assert!(text.contains(r#"watcher_agent_latency_seconds_bucket{le="1.0",rule="latency""#), "{text}");
}
