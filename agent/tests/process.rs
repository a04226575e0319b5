//! The `watcher-agent` binary as a process against real files: configuration refused with the
//! variable named, lines written, rotated by rename and by copytruncate, counted on `/metrics`;
//! SIGTERM answered with a last scrape and exit 0.

use std::fs::{self, OpenOptions};
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const AGENT: &str = env!("CARGO_BIN_EXE_watcher-agent");

fn dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("watcher-agent-process-{}-{name}", std::process::id()));
    let _ = fs::remove_dir_all(&dir);
    fs::create_dir_all(&dir).expect("directory");
    dir
}

fn free_port() -> SocketAddr {
    TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr()).expect("a free port")
}

/// `GET path` on `addr`: status and body, or `None` while nothing answers.
fn get(addr: SocketAddr, path: &str) -> Option<(u16, String)> {
    let mut stream = TcpStream::connect_timeout(&addr, Duration::from_secs(1)).ok()?;
    stream.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    write!(stream, "GET {path} HTTP/1.1\r\nHost: agent\r\nConnection: close\r\n\r\n").ok()?;
    let mut response = String::new();
    stream.read_to_string(&mut response).ok()?;
    let status = response.split_whitespace().nth(1)?.parse().ok()?;
    let body = response.split_once("\r\n\r\n").map(|(_, b)| b.to_owned()).unwrap_or_default();
    Some((status, body))
}

fn wait_for(what: &str, mut check: impl FnMut() -> bool) {
    let start = Instant::now();
    while start.elapsed() < Duration::from_secs(20) {
        if check() {
            return;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    panic!("timed out waiting for {what}");
}

/// The value of `series` in the agent's metrics.
fn value(addr: SocketAddr, series: &str) -> Option<f64> {
    let (_, body) = get(addr, "/metrics")?;
    let line = body.lines().find(|l| l.starts_with(series) && l[series.len()..].starts_with(' '))?;
    line.rsplit(' ').next()?.parse().ok()
}

fn append(path: &Path, text: &str) {
    let mut file = OpenOptions::new().create(true).append(true).open(path).expect("open");
    file.write_all(text.as_bytes()).expect("write");
}

struct Agent(Child, SocketAddr);

impl Drop for Agent {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn start(dir: &Path) -> Agent {
    let addr = free_port();
    let child = Command::new(AGENT)
        .env_clear()
        .env("AGENT_FILES", format!("{}/*.log", dir.display()))
        .env("AGENT_RULE_ERROR", r"\bERROR\b")
        .env("AGENT_RULE_PANIC", "panic:")
        .env("AGENT_LISTEN", addr.to_string())
        .env("AGENT_POLL", "20ms")
        .env("AGENT_EVENTS", "false")
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("the agent starts");
    let agent = Agent(child, addr);
    wait_for("/readyz", || get(addr, "/readyz").is_some_and(|(status, _)| status == 200));
    agent
}

#[test]
fn bad_configuration_exits_non_zero_naming_the_variable() {
    let output = Command::new(AGENT)
        .env_clear()
        .env("AGENT_FILES", "/var/log/*.log")
        .env("AGENT_RULE_ERROR", "(unclosed")
        .output()
        .expect("runs");
    assert_eq!(output.status.code(), Some(1));
    let said = String::from_utf8_lossy(&output.stderr);
    assert!(
        said.starts_with("watcher-agent: invalid configuration: AGENT_RULE_ERROR: not a regular expression"),
        "{said}"
    );

    let check = Command::new(AGENT).arg("check").env_clear().env("AGENT_FILES", "/x/*.log").output().expect("runs");
    assert_eq!(check.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&check.stderr).contains("AGENT_RULE_<NAME>: no rule"));
    let good = Command::new(AGENT)
        .arg("check")
        .env_clear()
        .env("AGENT_FILES", "/x/*.log")
        .env("AGENT_RULE_ERROR", "ERROR")
        .env("AGENT_ALERT_ERROR", "5/1m")
        .output()
        .expect("runs");
    assert!(good.status.success());
    let printed = String::from_utf8_lossy(&good.stdout);
    assert!(
        printed.contains("follows files: /x/*.log\n") && printed.contains("rule error: ERROR; alerts at 5 in 1m\n"),
        "{printed}"
    );
}

#[test]
fn lines_through_rotation_and_truncation_are_counted_once() {
    let dir = dir("rotation");
    let log = dir.join("app.log");
    append(&log, "ERROR before the start: skipped\n");
    let agent = start(&dir);
    let addr = agent.1;
    let errors =
        r#"watcher_agent_matches_total{rule="error",source=""#.to_owned() + &format!("{}/*.log\"}}", dir.display());
    let lines = format!("watcher_agent_lines_total{{source=\"{}/*.log\"}}", dir.display());
    assert_eq!(value(addr, &errors), Some(0.0), "at 0 from the start");

    append(&log, "INFO a\nERROR b\npanic: c\n");
    wait_for("3 lines", || value(addr, &lines) == Some(3.0));
    // Rotation by rename, a last line written to the old file after it.
    fs::rename(&log, dir.join("app.log.1")).expect("rename");
    append(&dir.join("app.log.1"), "ERROR late in the old file\n");
    append(&log, "ERROR in the new file\n");
    wait_for("5 lines", || value(addr, &lines) == Some(5.0));
    // copytruncate.
    fs::copy(&log, dir.join("app.log.2")).expect("copy");
    OpenOptions::new().write(true).open(&log).expect("open").set_len(0).expect("truncate");
    append(&log, "ERROR after the truncation\n");
    wait_for("6 lines", || value(addr, &lines) == Some(6.0));
    // A partial line is not a line until its newline.
    append(&log, "ERROR half");
    std::thread::sleep(Duration::from_millis(200));
    assert_eq!(value(addr, &lines), Some(6.0));
    append(&log, " done\n");
    wait_for("7 lines", || value(addr, &lines) == Some(7.0));
    assert_eq!(value(addr, &errors), Some(5.0));
    let panics = errors.replace("rule=\"error\"", "rule=\"panic\"");
    assert_eq!(value(addr, &panics), Some(1.0));
    let (_, open) = get(addr, "/metrics").expect("metrics");
    assert!(open.contains("# TYPE watcher_agent_lines_total counter"), "Prometheus text by default");
}

#[test]
fn sigterm_answers_a_last_scrape_and_exits_zero() {
    let dir = dir("sigterm");
    let mut agent = start(&dir);
    let addr = agent.1;
    let status = Command::new("kill").args(["-TERM", &agent.0.id().to_string()]).status().expect("kill");
    assert!(status.success());
    std::thread::sleep(Duration::from_millis(200));
    let scrape = get(addr, "/metrics");
    assert!(scrape.is_some_and(|(status, body)| status == 200 && body.contains("watcher_agent_lines_total")));
    let start = Instant::now();
    let code = loop {
        if let Some(status) = agent.0.try_wait().expect("wait") {
            break status.code();
        }
        assert!(start.elapsed() < Duration::from_secs(10), "exits within the grace period");
        std::thread::sleep(Duration::from_millis(50));
    };
    assert_eq!(code, Some(0));
}
