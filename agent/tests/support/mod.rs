//! What the process tests run the agent against: real files in a temporary directory, a fake
//! kube-apiserver (plain HTTP, named by a kubeconfig) that serves a pod, its log stream as the
//! test scripts it and stores Events as kube-apiserver validates them, and a fake Alertmanager.

#![allow(dead_code)] // each test binary uses part of it

use std::collections::{HashMap, VecDeque};
use std::fs::{self, OpenOptions};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

/// The binary under test: this build's, or the one `WATCHER_AGENT_BIN` names (to run these
/// tests against another build of the agent).
pub(crate) fn agent_binary() -> PathBuf {
    std::env::var_os("WATCHER_AGENT_BIN")
        .map_or_else(|| PathBuf::from(env!("CARGO_BIN_EXE_watcher-agent")), PathBuf::from)
}

/// A fresh directory for one test.
pub(crate) fn dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("watcher-agent-process-{}-{name}", std::process::id()));
    let _ = fs::remove_dir_all(&dir);
    fs::create_dir_all(&dir).expect("directory");
    dir
}

pub(crate) fn free_port() -> SocketAddr {
    TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr()).expect("a free port")
}

/// `GET path` on `addr`: status and body, or `None` while nothing answers.
pub(crate) fn get(addr: SocketAddr, path: &str) -> Option<(u16, String)> {
    let mut stream = TcpStream::connect_timeout(&addr, Duration::from_secs(1)).ok()?;
    stream.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    write!(stream, "GET {path} HTTP/1.1\r\nHost: agent\r\nConnection: close\r\n\r\n").ok()?;
    let mut response = String::new();
    stream.read_to_string(&mut response).ok()?;
    let status = response.split_whitespace().nth(1)?.parse().ok()?;
    let body = response.split_once("\r\n\r\n").map(|(_, b)| b.to_owned()).unwrap_or_default();
    Some((status, body))
}

/// Waits (at most 30 s) until `check` holds.
pub(crate) fn wait_for(what: &str, mut check: impl FnMut() -> bool) {
    let start = Instant::now();
    while start.elapsed() < Duration::from_secs(30) {
        if check() {
            return;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    panic!("timed out waiting for {what}");
}

/// The value of `series` in the agent's metrics.
pub(crate) fn value(addr: SocketAddr, series: &str) -> Option<f64> {
    let (_, body) = get(addr, "/metrics")?;
    let line = body.lines().find(|l| l.starts_with(series) && l[series.len()..].starts_with(' '))?;
    line.rsplit(' ').next()?.parse().ok()
}

pub(crate) fn append(path: &Path, text: &str) {
    let mut file = OpenOptions::new().create(true).append(true).open(path).expect("open");
    file.write_all(text.as_bytes()).expect("write");
}

/// `count` lines `ERROR <label> <i>`.
pub(crate) fn errors(label: &str, from: usize, to: usize) -> String {
    (from..=to).map(|i| format!("ERROR {label} {i}\n")).collect()
}

/// The running agent; killed when dropped.
pub(crate) struct Agent {
    pub(crate) child: Child,
    pub(crate) addr: SocketAddr,
}

impl Drop for Agent {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Agent {
    /// The agent with `vars` (and a port of its own), ready. A port found free can be taken by
    /// another process before the agent binds it (the agent then exits, saying so): it is
    /// started again on another.
    pub(crate) fn start(vars: &[(&str, String)]) -> Self {
        for _ in 0..5 {
            let mut agent = Self::spawn(vars);
            let addr = agent.addr;
            let start = Instant::now();
            while start.elapsed() < Duration::from_secs(30) {
                if get(addr, "/readyz").is_some_and(|(status, _)| status == 200) {
                    return agent;
                }
                if agent.child.try_wait().ok().flatten().is_some() {
                    break;
                }
                std::thread::sleep(Duration::from_millis(50));
            }
            assert!(agent.child.try_wait().ok().flatten().is_some(), "timed out waiting for /readyz");
        }
        panic!("the agent exited at every start (its port taken each time?)");
    }

    /// The agent with `vars`, not waited for.
    pub(crate) fn spawn(vars: &[(&str, String)]) -> Self {
        let addr = free_port();
        let mut command = Command::new(agent_binary());
        command.env_clear().env("AGENT_LISTEN", addr.to_string()).env("AGENT_LOG", "info");
        for (key, value) in vars {
            command.env(key, value);
        }
        let child = command.stdout(Stdio::null()).stderr(Stdio::inherit()).spawn().expect("the agent starts");
        Self { child, addr }
    }

    pub(crate) fn value(&self, series: &str) -> Option<f64> {
        value(self.addr, series)
    }

    /// Waits until `series` is `expected`.
    pub(crate) fn wait_value(&self, series: &str, expected: f64) {
        let mut last = None;
        let start = Instant::now();
        while start.elapsed() < Duration::from_secs(30) {
            last = self.value(series);
            if last == Some(expected) {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        panic!("{series}: {last:?}, not {expected}");
    }

    pub(crate) fn terminate(&self) {
        let status = Command::new("kill").args(["-TERM", &self.child.id().to_string()]).status().expect("kill");
        assert!(status.success());
    }

    pub(crate) fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// Waits for the exit (at most `within`): its code.
    pub(crate) fn exit_code(&mut self, within: Duration) -> Option<i32> {
        let start = Instant::now();
        loop {
            if let Some(status) = self.child.try_wait().expect("wait") {
                return status.code();
            }
            assert!(start.elapsed() < within, "exits within {within:?}");
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

/// `watcher_agent_<name>_total{source="<glob>"}` and the like.
pub(crate) fn lines_of(source: &str) -> String {
    format!("watcher_agent_lines_total{{source=\"{source}\"}}")
}

pub(crate) fn matches_of(rule: &str, source: &str) -> String {
    format!("watcher_agent_matches_total{{rule=\"{rule}\",source=\"{source}\"}}")
}

// ---------------------------------------------------------------------------------------------
// HTTP, as much of it as the fakes need.

pub(crate) struct Request {
    pub(crate) method: String,
    pub(crate) target: String,
    pub(crate) body: Vec<u8>,
}

fn read_request(reader: &mut BufReader<TcpStream>) -> Option<Request> {
    let mut line = String::new();
    if reader.read_line(&mut line).ok()? == 0 {
        return None;
    }
    let mut parts = line.split_whitespace();
    let (method, target) = (parts.next()?.to_owned(), parts.next()?.to_owned());
    let mut length = 0;
    loop {
        let mut header = String::new();
        reader.read_line(&mut header).ok()?;
        let header = header.trim_end();
        if header.is_empty() {
            break;
        }
        if let Some((name, value)) = header.split_once(':')
            && name.eq_ignore_ascii_case("content-length")
        {
            length = value.trim().parse().ok()?;
        }
    }
    let mut body = vec![0; length];
    reader.read_exact(&mut body).ok()?;
    Some(Request { method, target, body })
}

fn respond(stream: &mut TcpStream, status: u16, body: &Value) -> std::io::Result<()> {
    let body = body.to_string();
    write!(
        stream,
        "HTTP/1.1 {status} X\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    )
}

fn status(code: u16, message: &str) -> Value {
    json!({"kind": "Status", "apiVersion": "v1", "status": "Failure", "code": code, "message": message})
}

/// Serves each connection of `listener` on a thread of its own with `handle`.
/// Answers one request; `false`: the connection is done.
type Handler = Arc<dyn Fn(Request, &mut TcpStream) -> bool + Send + Sync>;

fn serve(listener: TcpListener, handle: Handler) {
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(stream) = stream else { return };
            let handle = handle.clone();
            std::thread::spawn(move || {
                let Ok(clone) = stream.try_clone() else { return };
                let mut reader = BufReader::new(clone);
                let mut stream = stream;
                while let Some(request) = read_request(&mut reader) {
                    if !handle(request, &mut stream) {
                        return;
                    }
                }
            });
        }
    });
}

// ---------------------------------------------------------------------------------------------
// The fake kube-apiserver.

/// How the fake answers one log request.
#[derive(Clone, Debug, Default)]
pub(crate) struct LogAnswer {
    /// Lines (with their time stamps) and the pause before each.
    pub(crate) lines: Vec<(Duration, String)>,
    /// After the lines: keep the connection open, sending nothing (a half-open stream).
    pub(crate) hang: bool,
}

impl LogAnswer {
    /// `lines` at once, then the end of the stream.
    pub(crate) fn lines(lines: &[&str]) -> Self {
        Self { lines: lines.iter().map(|l| (Duration::ZERO, (*l).to_owned())).collect(), hang: false }
    }
}

/// How the fake answers one Event call.
#[derive(Clone, Copy, Debug)]
pub(crate) enum EventAnswer {
    /// As kube-apiserver would.
    Normal,
    /// This status, storing nothing.
    Status(u16),
    /// Never.
    Hang,
}

#[derive(Default)]
pub(crate) struct ApiState {
    /// Each request: method and target.
    pub(crate) requests: Vec<(String, String)>,
    /// Each Event call: method, target, body.
    pub(crate) event_calls: Vec<(String, String, Value)>,
    /// The Events stored, by name.
    pub(crate) events: HashMap<String, Value>,
    pub(crate) event_answers: VecDeque<EventAnswer>,
    pub(crate) log_answers: VecDeque<LogAnswer>,
    /// The app container's restart counts, one per pod GET (the last one stays).
    pub(crate) restarts: VecDeque<i32>,
}

#[derive(Clone)]
pub(crate) struct FakeApi {
    pub(crate) state: Arc<Mutex<ApiState>>,
    pub(crate) kubeconfig: PathBuf,
}

impl FakeApi {
    pub(crate) fn start(dir: &Path) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
        let addr = listener.local_addr().expect("addr");
        let state: Arc<Mutex<ApiState>> = Arc::default();
        let kubeconfig = dir.join("kubeconfig");
        let config = format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: fake\n  cluster:\n    server: http://{addr}\n\
             contexts:\n- name: fake\n  context:\n    cluster: fake\n    user: fake\n    namespace: team-a\n\
             current-context: fake\nusers:\n- name: fake\n  user: {{}}\n"
        );
        fs::write(&kubeconfig, config).expect("kubeconfig");
        let shared = state.clone();
        serve(listener, Arc::new(move |request, stream| handle(&shared, request, stream)));
        Self { state, kubeconfig }
    }

    pub(crate) fn state(&self) -> MutexGuard<'_, ApiState> {
        self.state.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The variables that give the agent this API server and a pod in it.
    pub(crate) fn vars(&self) -> Vec<(&'static str, String)> {
        vec![
            ("KUBECONFIG", self.kubeconfig.display().to_string()),
            ("POD_NAME", "shop".into()),
            ("POD_NAMESPACE", "team-a".into()),
            ("POD_UID", "uid-1".into()),
        ]
    }

    pub(crate) fn event_calls(&self) -> Vec<(String, String, Value)> {
        self.state().event_calls.clone()
    }

    pub(crate) fn log_requests(&self) -> Vec<String> {
        self.state().requests.iter().filter(|(_, t)| t.contains("/log")).map(|(_, t)| t.clone()).collect()
    }
}

fn handle(state: &Mutex<ApiState>, request: Request, stream: &mut TcpStream) -> bool {
    let lock = || state.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    lock().requests.push((request.method.clone(), request.target.clone()));
    let path = request.target.split('?').next().unwrap_or_default().to_owned();
    if path == "/api/v1/namespaces/team-a/pods/shop" {
        let restarts = {
            let mut state = lock();
            let restarts = state.restarts.front().copied().unwrap_or(0);
            if state.restarts.len() > 1 {
                state.restarts.pop_front();
            }
            restarts
        };
        let pod = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "shop", "namespace": "team-a"},
            "status": {"containerStatuses": [{"name": "app", "restartCount": restarts, "ready": true,
            "image": "app", "imageID": ""}]}});
        return respond(stream, 200, &pod).is_ok();
    }
    if path == "/api/v1/namespaces/team-a/pods/shop/log" {
        let answer = lock().log_answers.pop_front();
        return stream_log(stream, answer);
    }
    if path.starts_with("/apis/events.k8s.io/v1/namespaces/team-a/events") {
        let body: Value = serde_json::from_slice(&request.body).unwrap_or(Value::Null);
        let answer = {
            let mut state = lock();
            state.event_calls.push((request.method.clone(), request.target.clone(), body.clone()));
            state.event_answers.pop_front().unwrap_or(EventAnswer::Normal)
        };
        let (code, reply) = match answer {
            EventAnswer::Hang => {
                std::thread::sleep(Duration::from_secs(3600));
                return false;
            }
            EventAnswer::Status(code) => (code, status(code, "as the test says")),
            EventAnswer::Normal => event(&mut lock(), &request.method, &path, body),
        };
        return respond(stream, code, &reply).is_ok();
    }
    respond(stream, 404, &status(404, "not served by the fake")).is_ok()
}

/// An Event call as kube-apiserver answers it: names and notes validated, PATCH merged.
fn event(state: &mut ApiState, method: &str, path: &str, body: Value) -> (u16, Value) {
    match method {
        "POST" => {
            let name = body["metadata"]["name"].as_str().unwrap_or_default().to_owned();
            if !is_dns_subdomain(&name) {
                return (422, status(422, &format!("metadata.name: Invalid value: {name:?}: a DNS-1123 subdomain")));
            }
            if body["note"].as_str().is_some_and(|n| n.len() > 1024) {
                return (422, status(422, "note: Too long"));
            }
            if body["series"]["count"].as_i64().is_some_and(|c| c < 2) {
                return (422, status(422, "series.count: must be at least 2"));
            }
            if state.events.contains_key(&name) {
                return (409, status(409, "already exists"));
            }
            state.events.insert(name, body.clone());
            (201, body)
        }
        "PATCH" => {
            let name = path.rsplit('/').next().unwrap_or_default();
            let Some(stored) = state.events.get_mut(name) else { return (404, status(404, "not found")) };
            // kube-apiserver's ValidateEventUpdate: all but the series is immutable.
            for field in ["note", "reason", "regarding", "reportingController", "reportingInstance", "action", "type"] {
                if body.get(field).is_some_and(|v| stored.get(field) != Some(v)) {
                    return (422, status(422, &format!("{field}: Invalid value: field is immutable")));
                }
            }
            merge(stored, &body);
            (200, stored.clone())
        }
        _ => (405, status(405, "method")),
    }
}

fn merge(target: &mut Value, patch: &Value) {
    match (target, patch) {
        (Value::Object(target), Value::Object(patch)) => {
            for (key, value) in patch {
                match target.get_mut(key) {
                    Some(existing) if value.is_object() => merge(existing, value),
                    _ => {
                        target.insert(key.clone(), value.clone());
                    }
                }
            }
        }
        (target, patch) => *target = patch.clone(),
    }
}

fn is_dns_subdomain(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 253
        && name.split('.').all(|label| {
            !label.is_empty()
                && label.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
                && !label.starts_with('-')
                && !label.ends_with('-')
        })
}

/// A log stream, chunked: the scripted lines, then the end (or nothing, for ever).
fn stream_log(stream: &mut TcpStream, answer: Option<LogAnswer>) -> bool {
    let head = "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nTransfer-Encoding: chunked\r\n\r\n";
    if stream.write_all(head.as_bytes()).is_err() {
        return false;
    }
    let answer = answer.unwrap_or(LogAnswer { lines: Vec::new(), hang: true });
    for (pause, line) in &answer.lines {
        std::thread::sleep(*pause);
        let chunk = format!("{line}\n");
        if write!(stream, "{:x}\r\n{chunk}\r\n", chunk.len()).is_err() {
            return false;
        }
        let _ = stream.flush();
    }
    if answer.hang {
        // Half-open: nothing more, never the end; until the agent lets go.
        let mut byte = [0_u8; 1];
        let _ = stream.set_read_timeout(Some(Duration::from_secs(600)));
        let _ = stream.read(&mut byte);
        return false;
    }
    stream.write_all(b"0\r\n\r\n").is_ok()
}

// ---------------------------------------------------------------------------------------------
// The fake Alertmanager.

#[derive(Clone)]
pub(crate) struct FakeAlertmanager {
    pub(crate) posts: Arc<Mutex<Vec<Value>>>,
    pub(crate) url: String,
}

impl FakeAlertmanager {
    pub(crate) fn start() -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
        let url = format!("http://{}", listener.local_addr().expect("addr"));
        let posts: Arc<Mutex<Vec<Value>>> = Arc::default();
        let shared = posts.clone();
        serve(
            listener,
            Arc::new(move |request, stream| {
                if request.method == "POST" && request.target == "/api/v2/alerts" {
                    let body = serde_json::from_slice(&request.body).unwrap_or(Value::Null);
                    shared.lock().unwrap_or_else(std::sync::PoisonError::into_inner).push(body);
                    respond(stream, 200, &json!({})).is_ok()
                } else {
                    respond(stream, 404, &json!({})).is_ok()
                }
            }),
        );
        Self { posts, url }
    }

    /// Every alert posted, in order.
    pub(crate) fn alerts(&self) -> Vec<Value> {
        let posts = self.posts.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        posts.iter().flat_map(|p| p.as_array().cloned().unwrap_or_default()).collect()
    }
}
