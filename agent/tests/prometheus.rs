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

/// A Prometheus of its own, scraping one agent every second or receiving its pushes; killed
/// when dropped.
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
    /// Prometheus scraping `target` (none: a receiver of remote write only), its files in `dir`,
    /// ready; `None` where it is not installed (and the tools are not required).
    fn start(dir: &Path, target: Option<SocketAddr>) -> Option<Self> {
        if !installed() {
            return None;
        }
        // A port found free can be taken before Prometheus binds it: it exits, and starts again
        // on another.
        for _ in 0..5 {
            if let Some(prometheus) = Self::start_on(dir, target, free_port()) {
                return Some(prometheus);
            }
        }
        panic!("Prometheus exited at every start")
    }

    /// Prometheus listening on `addr`, ready; `None` where it exited (its port taken).
    fn start_on(dir: &Path, target: Option<SocketAddr>, addr: SocketAddr) -> Option<Self> {
        let config = dir.join("prometheus.yml");
        let scrape = target.map_or_else(String::new, |target| {
            format!("scrape_configs:\n  - job_name: agent\n    static_configs: [{{targets: [\"{target}\"]}}]\n")
        });
        std::fs::write(&config, format!("global: {{scrape_interval: 1s, scrape_timeout: 900ms}}\n{scrape}"))
            .expect("the configuration");
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
                return None;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        panic!("Prometheus not ready within 30 s")
    }

    /// Its remote write receiver.
    fn write_url(&self) -> String {
        format!("http://{}/api/v1/write", self.addr)
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

/// Whether Debian's `prometheus` is here; where it is not, a failure if the tools are required.
fn installed() -> bool {
    if Command::new("prometheus").arg("--version").output().is_ok() {
        return true;
    }
    assert!(
        std::env::var_os("WATCHER_REQUIRE_TOOLS").is_none(),
        "prometheus is not installed (Debian's package `prometheus`)"
    );
    eprintln!("prometheus is not installed: not tested");
    false
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
    let Some(prometheus) = Prometheus::start(&dir, Some(agent.addr)) else { return };
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
    let Some(prometheus) = Prometheus::start(&dir, Some(agent.addr)) else { return };
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

/// An agent that nobody scrapes pushes by remote write: its counts exact, each series with the
/// pod's `namespace` and `pod`, its native histogram whole (count exact, p99 within the factor).
/// Another, pushing every 10 minutes, is stopped by SIGTERM right after reading lines: its last
/// push carries them.
#[test]
fn an_agent_nobody_scrapes_pushes_its_counts_and_its_last_ones_when_it_ends() {
    let dir = dir("prometheus-remote-write");
    let Some(prometheus) = Prometheus::start(&dir, None) else { return };
    let log = dir.join("app.log");
    append(&log, "");
    let pushing = |pod: &str, every: &str, rules: &[(&str, &str)]| {
        let mut vars = vec![
            ("AGENT_REMOTE_WRITE_URL", prometheus.write_url()),
            ("AGENT_REMOTE_WRITE_INTERVAL", every.to_owned()),
            ("POD_NAMESPACE", "shop".to_owned()),
            ("POD_NAME", pod.to_owned()),
            ("AGENT_RULE_ERRORS", "ERROR".to_owned()),
        ];
        vars.extend(rules.iter().map(|(k, v)| (*k, (*v).to_owned())));
        files_agent(&dir, &vars.iter().map(|(k, v)| (*k, v.as_str())).collect::<Vec<_>>())
    };
    let agent = pushing(
        "cart-0",
        "1s",
        &[
            ("AGENT_RULE_LATENCY", r"took=(?P<ms>\d+)ms"),
            ("AGENT_VALUE_LATENCY", "ms"),
            ("AGENT_METRIC_LATENCY", "histogram"),
            ("AGENT_UNIT_LATENCY", "ms"),
            ("AGENT_NATIVE_LATENCY", "1.1"),
        ],
    );
    let last = pushing("cart-1", "10m", &[]);
    let lines: String = (1..=1000).map(|i| format!("GET /cart took={}ms\n", (i * 337) % 1000 + 1)).collect();
    append(&log, &format!("{}{lines}", errors("db", 1, 25)));
    let errors_of = |pod: &str| format!(r#"watcher_agent_matches_total{{rule="errors",namespace="shop",pod="{pod}"}}"#);
    prometheus.wait_value(&errors_of("cart-0"), 25.0);
    let latency = r#"watcher_agent_latency_seconds{rule="latency",namespace="shop",pod="cart-0"}"#;
    prometheus.wait_value(&format!("histogram_count({latency})"), 1000.0);
    let p99 = prometheus.query(&format!("histogram_quantile(0.99, {latency})")).expect("a p99");
    assert!((p99 / 0.99 - 1.0).abs() <= 0.1, "p99 {p99} s, the true one 0.99 s");
    let bucket = r#"watcher_agent_latency_seconds_bucket{rule="latency",le="+Inf",pod="cart-0"}"#;
    prometheus.wait_value(bucket, 1000.0);
    eprintln!("pushed: 25 errors, a native histogram of 1000 (p99 {p99} s), the classic buckets beside it");

    // The agent pushing every 10 minutes pushed once, at its start; the lines it reads next
    // reach Prometheus only by its last push.
    last.wait_value(&matches_of("errors", &format!("{}/*.log", dir.display())), 25.0);
    assert_eq!(prometheus.query(&errors_of("cart-1")), Some(0.0), "its first push, before the lines");
    append(&log, &errors("db", 26, 30));
    last.wait_value(&matches_of("errors", &format!("{}/*.log", dir.display())), 30.0);
    last.terminate();
    let mut last = last;
    assert_eq!(last.exit_code(Duration::from_secs(20)), Some(0));
    prometheus.wait_value(&errors_of("cart-1"), 30.0);
    let dropped = r#"watcher_agent_remote_write_samples_total{result="dropped",pod="cart-0"}"#;
    assert_eq!(prometheus.query(dropped), Some(0.0));
    drop(agent);
}

/// A receiver down for a while: the pushes wait in the queue and are tried again with backoff;
/// once it is back, it gets them in order and the value exact, from the same agent process.
#[test]
fn a_receiver_down_for_a_while_then_back_gets_every_push_and_the_exact_value() {
    if !installed() {
        return;
    }
    let dir = dir("prometheus-remote-write-down");
    let log = dir.join("app.log");
    append(&log, "");
    let addr = free_port();
    let url = format!("http://{addr}/api/v1/write");
    let mut agent = files_agent(
        &dir,
        &[
            ("AGENT_REMOTE_WRITE_URL", url.as_str()),
            ("AGENT_REMOTE_WRITE_INTERVAL", "1s"),
            ("POD_NAMESPACE", "shop"),
            ("POD_NAME", "cart-0"),
            ("AGENT_RULE_ERRORS", "ERROR"),
        ],
    );
    let source = format!("{}/*.log", dir.display());
    append(&log, &errors("db", 1, 40));
    agent.wait_value(&matches_of("errors", &source), 40.0);
    let down = Instant::now();
    wait_for("pushes queued", || agent.value("watcher_agent_remote_write_queue_samples").is_some_and(|v| v > 0.0));
    std::thread::sleep(Duration::from_secs(5));
    append(&log, &errors("db", 41, 42));
    let held = agent.value("watcher_agent_remote_write_queue_samples").expect("the queue's gauge");
    let prometheus = Prometheus::start_on(&dir, None, addr).expect("Prometheus on the receiver's port");
    let series = r#"watcher_agent_matches_total{rule="errors",namespace="shop",pod="cart-0"}"#;
    prometheus.wait_value(series, 42.0);
    assert!(agent.child.try_wait().expect("wait").is_none(), "the same agent, never restarted");
    let stored = prometheus.query(&format!("count_over_time({series}[10m])")).expect("samples");
    let seconds = down.elapsed().as_secs_f64();
    assert!(stored >= 5.0, "the pushes of the {seconds:.0} s it was down, stored: {stored}");
    assert_eq!(agent.value(r#"watcher_agent_remote_write_samples_total{result="dropped"}"#), Some(0.0));
    eprintln!("receiver down {seconds:.0} s: {held} samples held, then {stored} pushes of the series stored, 42 exact");
    agent.kill();
}

/// Exemplars (`AGENT_EXEMPLAR_<NAME>`) scraped by Prometheus with exemplar storage on: its
/// `/api/v1/query_exemplars` answers with the trace ids the log gave, on the histogram's buckets
/// and on the counter of matches.
#[test]
fn exemplars_are_queryable_with_the_trace_ids_from_the_log() {
    let dir = dir("prometheus-exemplars");
    let log = dir.join("app.log");
    append(&log, "");
    let agent = files_agent(
        &dir,
        &[
            ("AGENT_RULE_LATENCY", r"took=(?P<ms>\d+)ms trace_id=(?P<trace>[0-9a-f]+)"),
            ("AGENT_VALUE_LATENCY", "ms"),
            ("AGENT_METRIC_LATENCY", "histogram"),
            ("AGENT_UNIT_LATENCY", "ms"),
            ("AGENT_BUCKETS_LATENCY", "0.1,1"),
            ("AGENT_EXEMPLAR_LATENCY", "trace"),
        ],
    );
    let Some(prometheus) = Prometheus::start(&dir, Some(agent.addr)) else { return };
    append(&log, "GET /cart took=40ms trace_id=4bf92f3577b34da6\nGET /pay took=734ms trace_id=a3ce929d0e0e4736\n");
    prometheus.wait_value(r#"watcher_agent_matches_total{rule="latency"}"#, 2.0);
    let ids = |query: &str| -> Vec<String> {
        let path = format!("/api/v1/query_exemplars?query={}&start=0&end=4102444800", encoded(query));
        let Some((200, body)) = get(prometheus.addr, &path) else { return Vec::new() };
        let (Some(start), Some(end)) = (body.find('{'), body.rfind('}')) else { return Vec::new() };
        let answer: Value = serde_json::from_str(&body[start..=end]).unwrap_or_default();
        let mut ids: Vec<String> = answer["data"]
            .as_array()
            .into_iter()
            .flatten()
            .flat_map(|series| series["exemplars"].as_array().cloned().unwrap_or_default())
            .filter_map(|e| e["labels"]["trace_id"].as_str().map(str::to_owned))
            .collect();
        ids.sort();
        ids.dedup();
        ids
    };
    let both = ["4bf92f3577b34da6".to_owned(), "a3ce929d0e0e4736".to_owned()];
    wait_for("exemplars on the buckets", || ids("watcher_agent_latency_seconds_bucket") == both);
    wait_for("the latest on the counter", || ids("watcher_agent_matches_total") == both[1..]);
    eprintln!("exemplars in Prometheus: buckets {both:?}, counter {:?}", &both[1..]);
}
