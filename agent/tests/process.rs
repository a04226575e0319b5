//! The `watcher-agent` binary as a process, against real files, a fake kube-apiserver (the pod,
//! its log stream, Events) and a fake Alertmanager: one test for each way a count can go wrong in
//! production (rotation, truncation, restarts, shutdown, configuration), each counting exactly.

mod support;

use std::fs::{self, OpenOptions};
use std::process::Command;
use std::time::{Duration, SystemTime};

use serde_json::Value;
use support::*;

fn files_agent(dir: &std::path::Path, glob: &str, extra: &[(&str, String)]) -> (Agent, String) {
    let source = format!("{}/{glob}", dir.display());
    let mut vars = vec![
        ("AGENT_FILES", source.clone()),
        ("AGENT_RULE_ERROR", r"\bERROR\b".to_owned()),
        ("AGENT_POLL", "20ms".to_owned()),
        ("AGENT_EVENTS", "false".to_owned()),
    ];
    vars.extend(extra.iter().cloned());
    (Agent::start(&vars), source)
}

#[test]
fn bad_configuration_exits_non_zero_naming_the_variable() {
    let output = Command::new(agent_binary())
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

    let check =
        Command::new(agent_binary()).arg("check").env_clear().env("AGENT_FILES", "/x/*.log").output().expect("runs");
    assert_eq!(check.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&check.stderr).contains("AGENT_RULE_<NAME>: no rule"));
    let good = Command::new(agent_binary())
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

/// The old file of a rename is read until it has been quiet for `AGENT_ROTATE_WAIT`, a time:
/// the app writes to it for 1.5 s after the rename, polled every 10 ms.
#[test]
fn a_renamed_file_is_read_while_the_app_still_writes_to_it() {
    let dir = dir("rename");
    let log = dir.join("app.log");
    append(&log, "");
    let (agent, source) = files_agent(&dir, "*.log", &[("AGENT_POLL", "10ms".into())]);
    append(&log, &errors("before", 1, 10));
    agent.wait_value(&lines_of(&source), 10.0);
    fs::rename(&log, dir.join("app.log.1")).expect("rename");
    for i in 11..=25 {
        append(&dir.join("app.log.1"), &format!("ERROR late {i}\n"));
        std::thread::sleep(Duration::from_millis(100));
    }
    append(&log, &errors("reopened", 26, 30));
    agent.wait_value(&lines_of(&source), 30.0);
    agent.wait_value(&matches_of("error", &source), 30.0);
}

/// copytruncate: five lines written just before the copy are in `app.log.1` only (the glob does
/// not match it): read from the copy.
#[test]
fn copytruncate_loses_nothing_the_copy_holds() {
    let dir = dir("copytruncate");
    let log = dir.join("app.log");
    append(&log, "");
    let (agent, source) = files_agent(&dir, "*.log", &[]);
    append(&log, &errors("a", 1, 20));
    agent.wait_value(&lines_of(&source), 20.0);
    append(&log, &errors("b", 21, 25));
    fs::copy(&log, dir.join("app.log.1")).expect("copy");
    OpenOptions::new().write(true).open(&log).expect("open").set_len(0).expect("truncate");
    append(&log, &errors("c", 26, 30));
    agent.wait_value(&lines_of(&source), 30.0);
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(agent.value(&lines_of(&source)), Some(30.0), "nothing twice");
    assert_eq!(
        agent.value(&format!("watcher_agent_truncations_total{{source=\"{source}\",copy=\"found\"}}")),
        Some(1.0)
    );
}

/// The glob matches the rotated files (`app.log*`): `.1`, renamed `.2`, a compressed `.1.gz`.
#[test]
fn rotated_files_in_the_glob_are_counted_once() {
    let dir = dir("glob-rotations");
    let log = dir.join("app.log");
    append(&log, "");
    let (agent, source) = files_agent(&dir, "app.log*", &[]);
    append(&log, &errors("a", 1, 10));
    agent.wait_value(&lines_of(&source), 10.0);
    fs::rename(&log, dir.join("app.log.1")).expect("rename");
    append(&log, &errors("b", 11, 20));
    agent.wait_value(&lines_of(&source), 20.0);
    fs::rename(dir.join("app.log.1"), dir.join("app.log.2")).expect("rename");
    fs::rename(&log, dir.join("app.log.1")).expect("rename");
    append(&log, &errors("c", 21, 25));
    // A compressed rotation: gzip's magic bytes, then text that is not the log's.
    fs::write(dir.join("app.log.1.gz"), b"\x1f\x8b\x08\x00ERROR not a line\nERROR nor this\n").expect("gz");
    agent.wait_value(&lines_of(&source), 25.0);
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(agent.value(&matches_of("error", &source)), Some(25.0), "25 written, 25 counted");
    assert_eq!(agent.value("watcher_agent_files_skipped_total{reason=\"compressed\"}"), Some(1.0));
}

/// Checkpoints: the agent killed (OOM) after its checkpoint, ten lines written while it is down,
/// counted once when it is back; a file it had read is not read again.
#[test]
fn a_restarted_agent_counts_what_was_written_while_it_was_down() {
    let dir = dir("restart");
    let (logs, state) = (dir.join("logs"), dir.join("state"));
    fs::create_dir_all(&logs).expect("dir");
    let log = logs.join("app.log");
    append(&log, "");
    let vars = [("AGENT_STATE_DIR", state.display().to_string())];
    let (mut agent, source) = files_agent(&logs, "*.log", &vars);
    append(&log, &errors("before", 1, 5));
    agent.wait_value(&lines_of(&source), 5.0);
    wait_for_checkpoint(&state, &log);
    agent.kill();
    append(&log, &errors("down", 6, 15));
    let (again, _) = files_agent(&logs, "*.log", &vars);
    again.wait_value(&lines_of(&source), 10.0);
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(again.value(&matches_of("error", &source)), Some(10.0), "written while down: once");
}

/// Waits until the checkpoint in `state` says `log` was read to its end.
fn wait_for_checkpoint(state: &std::path::Path, log: &std::path::Path) {
    let size = fs::metadata(log).expect("log").len();
    wait_for("the checkpoint", || {
        let saved: Value = fs::read(state.join("watcher-agent.checkpoint.json"))
            .ok()
            .and_then(|b| serde_json::from_slice(&b).ok())
            .unwrap_or(Value::Null);
        saved["files"][0]["offset"] == size
    });
}

/// Stops the agent with SIGTERM once its checkpoint says `log` was read to its end.
fn stop_after_checkpoint(agent: &mut Agent, state: &std::path::Path, log: &std::path::Path) {
    wait_for_checkpoint(state, log);
    agent.terminate();
    assert_eq!(agent.exit_code(Duration::from_secs(30)), Some(0));
}

/// An agent with checkpoints reads five lines of `app.log` and stops (SIGTERM); five more are
/// written and `rotate` runs while it is down; five more go to `app.log`; the agent started
/// again must count ten.
fn restart_across(name: &str, rotate: impl FnOnce(&std::path::Path)) {
    let dir = dir(name);
    let (logs, state) = (dir.join("logs"), dir.join("state"));
    fs::create_dir_all(&logs).expect("dir");
    let log = logs.join("app.log");
    append(&log, "");
    // No linger at SIGTERM: what is checked is the checkpoint, not the last scrape.
    let vars = [("AGENT_STATE_DIR", state.display().to_string()), ("AGENT_SHUTDOWN_LINGER", "0s".to_owned())];
    let (mut agent, source) = files_agent(&logs, "*.log", &vars);
    append(&log, &errors("before", 1, 5));
    agent.wait_value(&lines_of(&source), 5.0);
    stop_after_checkpoint(&mut agent, &state, &log);
    append(&log, &errors("down", 6, 10));
    rotate(&logs);
    append(&log, &errors("new", 11, 15));
    let (again, _) = files_agent(&logs, "*.log", &vars);
    again.wait_value(&lines_of(&source), 10.0);
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(again.value(&matches_of("error", &source)), Some(10.0), "the rotated file's five, the new five");
}

/// Logrotate ran while the agent was down: `app.log` renamed to `app.log.1` (out of the glob)
/// after five unread lines. At the restart the renamed file is found by its inode in its
/// directory and its unread lines read, then the new file's: ten.
#[test]
fn a_restart_finds_the_file_rotation_renamed() {
    restart_across("restart-renamed", |logs| {
        fs::rename(logs.join("app.log"), logs.join("app.log.1")).expect("rename");
    });
}

/// Copytruncate ran while the agent was down: `app.log` copied to `app.log.1` and truncated
/// after five unread lines. At the restart the copy is found by its fingerprint and the bytes
/// before the checkpoint's offset, and read from there: ten.
#[test]
fn a_restart_finds_the_copy_copytruncate_made() {
    restart_across("restart-copytruncate", |logs| {
        let log = logs.join("app.log");
        fs::copy(&log, logs.join("app.log.1")).expect("copy");
        OpenOptions::new().write(true).open(&log).expect("open").set_len(0).expect("truncate");
    });
}

/// The app's first lines: with `AGENT_STATE_DIR` and no checkpoint yet (the first start in the
/// pod), files already there are read from their beginning.
#[test]
fn the_first_start_in_a_pod_reads_the_apps_first_lines() {
    let dir = dir("first-lines");
    let (logs, state) = (dir.join("logs"), dir.join("state"));
    fs::create_dir_all(&logs).expect("dir");
    append(&logs.join("app.log"), "starting\nERROR cannot open the database\n");
    let (agent, source) = files_agent(&logs, "*.log", &[("AGENT_STATE_DIR", state.display().to_string())]);
    agent.wait_value(&lines_of(&source), 2.0);
    assert_eq!(agent.value(&matches_of("error", &source)), Some(1.0));
}

/// The container log is plain text: the kubelet keeps what the agent writes as it is, and
/// `kubectl logs` would show colour codes as escape sequences.
#[test]
fn the_log_has_no_colour_codes() {
    let dir = dir("plain-log");
    append(&dir.join("app.log"), &errors("logged", 1, 2));
    let addr = free_port();
    let child = Command::new(agent_binary())
        .env_clear()
        .env("AGENT_FILES", format!("{}/*.log", dir.display()))
        .env("AGENT_RULE_ERROR", r"\bERROR\b")
        .env("AGENT_LISTEN", addr.to_string())
        .env("AGENT_EVENTS", "false")
        .env("AGENT_LOG", "info")
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("the agent starts");
    wait_for("/readyz", || get(addr, "/readyz").is_some_and(|(status, _)| status == 200));
    let status = Command::new("kill").args(["-TERM", &child.id().to_string()]).status().expect("kill");
    assert!(status.success());
    let output = child.wait_with_output().expect("the agent ends");
    let log = String::from_utf8_lossy(&output.stdout);
    assert!(log.contains("INFO") && log.contains("following"), "{log}");
    assert!(!log.contains('\x1b'), "escape codes in the log: {log:?}");
}

/// A native sidecar is stopped after the app: the app's last lines, written just before
/// SIGTERM, are read and served to the last scrape.
#[test]
fn the_apps_last_lines_before_sigterm_are_counted() {
    let dir = dir("last-lines");
    let log = dir.join("app.log");
    append(&log, "");
    let (mut agent, source) = files_agent(&dir, "*.log", &[("AGENT_POLL", "1m".into())]);
    append(&log, &errors("last words", 1, 7));
    agent.terminate();
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(agent.value(&lines_of(&source)), Some(7.0), "the last scrape sees them");
    assert_eq!(agent.exit_code(Duration::from_secs(30)), Some(0));
}

/// `AGENT_START: beginning` over a file last written an hour ago, five errors, alert 3/1m: the
/// five are counted, nothing fires (the lines are an hour old), no Event.
#[test]
fn an_old_backlog_is_counted_and_fires_nothing() {
    let dir = dir("backlog");
    let api = FakeApi::start(&dir);
    let logs = dir.join("logs");
    fs::create_dir_all(&logs).expect("dir");
    let log = logs.join("app.log");
    append(&log, &errors("an hour ago", 1, 5));
    let file = OpenOptions::new().append(true).open(&log).expect("open");
    file.set_modified(SystemTime::now() - Duration::from_secs(3600)).expect("mtime");
    let mut vars = api.vars();
    vars.extend([
        ("AGENT_START", "beginning".to_owned()),
        ("AGENT_ALERT_ERROR", "3/1m".to_owned()),
        ("AGENT_EVENTS", "true".to_owned()),
    ]);
    let (agent, source) = files_agent(&logs, "*.log", &vars);
    agent.wait_value(&matches_of("error", &source), 5.0);
    std::thread::sleep(Duration::from_secs(2)); // two alert ticks
    assert_eq!(agent.value("watcher_agent_alert_firing{rule=\"error\"}"), Some(0.0));
    assert!(api.event_calls().is_empty(), "{:?}", api.event_calls());
}

/// A rule written as a YAML block scalar (`|`) ends in a newline: trimmed, it matches.
#[test]
fn a_rule_from_a_yaml_block_scalar_matches() {
    let dir = dir("block-scalar");
    let log = dir.join("app.log");
    append(&log, "");
    let (agent, source) = files_agent(&dir, "*.log", &[("AGENT_RULE_ERROR", "\\bERROR\\b\n".into())]);
    append(&log, &errors("x", 1, 4));
    agent.wait_value(&matches_of("error", &source), 4.0);
}

/// Alertmanager: the firing alert carries `startsAt` (its first match, not in the future) and
/// the pod; its resolution `endsAt`.
#[test]
fn alertmanager_is_told_when_the_firing_began_and_ended() {
    let dir = dir("alertmanager");
    let am = FakeAlertmanager::start();
    let log = dir.join("app.log");
    append(&log, "");
    let vars = [
        ("AGENT_ALERT_ERROR", "2/2s".to_owned()),
        ("AGENT_ALERTMANAGER_URL", am.url.clone()),
        ("POD_NAME", "shop".to_owned()),
        ("POD_NAMESPACE", "team-a".to_owned()),
    ];
    let (_agent, _) = files_agent(&dir, "*.log", &vars);
    let before = k8s_openapi::jiff::Timestamp::now();
    append(&log, &errors("x", 1, 2));
    wait_for("the firing alert", || !am.alerts().is_empty());
    let firing = am.alerts()[0].clone();
    assert_eq!(firing["labels"]["pod"], "shop");
    assert_eq!(firing["labels"]["namespace"], "team-a");
    let starts: k8s_openapi::jiff::Timestamp = firing["startsAt"].as_str().expect("startsAt").parse().expect("time");
    let ends: k8s_openapi::jiff::Timestamp = firing["endsAt"].as_str().expect("endsAt").parse().expect("time");
    assert!(
        starts >= before.saturating_sub(k8s_openapi::jiff::SignedDuration::from_secs(1)).expect("time"),
        "{firing}"
    );
    assert!(starts <= k8s_openapi::jiff::Timestamp::now() && ends > starts, "{firing}");
    wait_for("the resolution", || am.alerts().iter().any(|a| a["endsAt"].as_str() < firing["endsAt"].as_str()));
}

/// Misspelt variables, rules that differ by case: refused, named; the kubelet's Service
/// variables: not rules.
#[test]
fn configuration_mistakes_are_refused_and_service_links_ignored() {
    let run = |vars: &[(&str, &str)]| {
        let mut command = Command::new(agent_binary());
        command.arg("check").env_clear().env("AGENT_FILES", "/x/*.log").env("AGENT_RULE_ERROR", "ERROR");
        for (k, v) in vars {
            command.env(k, v);
        }
        command.output().expect("runs")
    };
    for (vars, said) in [
        (vec![("AGENT_RULES_PANIC", "panic:")], "AGENT_RULES_PANIC: unknown variable (did you mean AGENT_RULE_PANIC?)"),
        (vec![("AGENT_POLL_INTERVAL", "1s")], "AGENT_POLL_INTERVAL: unknown variable (did you mean AGENT_POLL?)"),
        (vec![("AGENT_RULE_Error", "Error")], "names the same rule (error)"),
    ] {
        let output = run(&vars);
        assert_eq!(output.status.code(), Some(1), "{vars:?}");
        assert!(String::from_utf8_lossy(&output.stderr).contains(said), "{}", String::from_utf8_lossy(&output.stderr));
    }
    let links = run(&[("AGENT_RULE_X_SERVICE_HOST", "10.0.0.7"), ("AGENT_RULE_X_PORT", "tcp://10.0.0.7:80")]);
    assert!(links.status.success(), "{}", String::from_utf8_lossy(&links.stderr));
    let printed = String::from_utf8_lossy(&links.stdout);
    assert!(!printed.contains("rule x_"), "{printed}");
}

/// `AGENT_IGNORE_OLDER`: date-named logs that stay in the glob are closed once idle, and opened
/// again where they were left when written to.
#[test]
fn idle_files_are_closed() {
    let dir = dir("idle");
    for day in 1..=3 {
        append(&dir.join(format!("app-2026-11-0{day}.log")), "");
    }
    let (agent, source) = files_agent(&dir, "*.log", &[("AGENT_IGNORE_OLDER", "1s".into())]);
    wait_for("idle files closed", || agent.value("watcher_agent_open_files") == Some(0.0));
    assert_eq!(agent.value("watcher_agent_files_closed_total{reason=\"idle\"}"), Some(3.0));
    append(&dir.join("app-2026-11-03.log"), "ERROR again\n");
    agent.wait_value(&lines_of(&source), 1.0);
}

/// More files than `AGENT_MAX_OPEN_FILES` (300 date-named files, the limit at 128), each written
/// an ERROR line three times, 300 ms apart: every line counted, never more than 128 open.
#[test]
fn more_files_than_descriptors_lose_no_line() {
    let dir = dir("many-files");
    let name = |i: usize| dir.join(format!("job-2026-11-26-{i:03}.log"));
    for i in 0..300 {
        append(&name(i), "");
    }
    let (agent, source) = files_agent(&dir, "job-*.log", &[("AGENT_MAX_OPEN_FILES", "128".into())]);
    wait_for("every file followed", || agent.value("watcher_agent_open_files").is_some());
    let mut most_open = 0.0_f64;
    for round in 1..=3 {
        for i in 0..300 {
            append(&name(i), &format!("ERROR job {i} round {round}\n"));
        }
        most_open = most_open.max(agent.value("watcher_agent_open_files").unwrap_or_default());
        std::thread::sleep(Duration::from_millis(300));
    }
    agent.wait_value(&matches_of("error", &source), 900.0);
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(agent.value(&matches_of("error", &source)), Some(900.0), "nothing twice");
    most_open = most_open.max(agent.value("watcher_agent_open_files").unwrap_or_default());
    assert!(most_open <= 128.0, "{most_open} open, the limit 128");
}

// ---------------------------------------------------------------------------------------------
// The log stream, through the fake kube-apiserver.

fn stream_agent(api: &FakeApi, extra: &[(&str, String)]) -> Agent {
    let mut vars = api.vars();
    vars.extend([
        ("AGENT_LOGS_CONTAINER", "app".to_owned()),
        ("AGENT_RULE_ERROR", r"\bERROR\b".to_owned()),
        ("AGENT_START", "beginning".to_owned()),
        ("AGENT_EVENTS", "false".to_owned()),
    ]);
    vars.extend(extra.iter().cloned());
    Agent::start(&vars)
}

const STDOUT: &str = "stdout";

/// stdout and stderr are stamped apart: a line earlier than the one before it is counted; a
/// stream asked again sends its last second again: skipped, and only that.
#[test]
fn stream_lines_out_of_order_are_counted_and_repeats_are_not() {
    let dir = dir("out-of-order");
    let api = FakeApi::start(&dir);
    api.state().log_answers.extend([
        LogAnswer::lines(&[
            "2026-11-26T10:00:00.5Z ERROR one",
            "2026-11-26T10:00:01.7Z ERROR two",
            "2026-11-26T10:00:01.2Z ERROR stderr, earlier",
        ]),
        LogAnswer::lines(&[
            "2026-11-26T10:00:01.2Z ERROR stderr, earlier",
            "2026-11-26T10:00:01.7Z ERROR two",
            "2026-11-26T10:00:01.1Z ERROR late, and new",
            "2026-11-26T10:00:02Z ERROR three",
        ]),
    ]);
    let agent = stream_agent(&api, &[]);
    agent.wait_value(&matches_of("error", STDOUT), 5.0);
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(agent.value(&lines_of(STDOUT)), Some(5.0));
    assert!(api.log_requests()[1].contains("sinceTime=2026-11-26T10%3A00%3A01Z"), "{:?}", api.log_requests());
}

/// The container restarted while the stream was down: the previous container's last lines
/// (its panic) are read, then the new container's.
#[test]
fn a_restarted_containers_last_lines_are_read() {
    let dir = dir("previous");
    let api = FakeApi::start(&dir);
    {
        let mut state = api.state();
        state.restarts.extend([0, 1]);
        state.log_answers.extend([
            LogAnswer::lines(&["2026-11-26T10:00:00Z starting", "2026-11-26T10:00:01Z ERROR slow"]),
            LogAnswer::lines(&["2026-11-26T10:00:01Z ERROR slow", "2026-11-26T10:00:02Z ERROR panic: out of memory"]),
            LogAnswer::lines(&["2026-11-26T10:00:05Z starting again"]),
        ]);
    }
    let agent = stream_agent(&api, &[]);
    agent.wait_value(&lines_of(STDOUT), 4.0);
    assert_eq!(agent.value(&matches_of("error", STDOUT)), Some(2.0));
    let requests = api.log_requests();
    assert!(requests[1].contains("previous=true"), "{requests:?}");
    assert_eq!(agent.value("watcher_agent_stream_reconnects_total{reason=\"restarted\"}"), Some(1.0));
}

/// A half-open stream (headers, a line, then nothing, never an end) is asked again after
/// `AGENT_STREAM_IDLE`, and said in a metric.
#[test]
fn a_silent_stream_is_asked_again() {
    let dir = dir("half-open");
    let api = FakeApi::start(&dir);
    api.state().log_answers.extend([
        LogAnswer { lines: vec![(Duration::ZERO, "2026-11-26T10:00:00Z ERROR one".into())], hang: true },
        LogAnswer::lines(&["2026-11-26T10:00:00Z ERROR one", "2026-11-26T10:00:03Z ERROR two"]),
    ]);
    let agent = stream_agent(&api, &[("AGENT_STREAM_IDLE", "2s".into())]);
    agent.wait_value(&matches_of("error", STDOUT), 2.0);
    assert!(agent.value("watcher_agent_stream_reconnects_total{reason=\"idle\"}") >= Some(1.0));
}

/// A stream that ends after delivering lines (a kubelet that closes streams often) is asked again
/// at once, not after a growing backoff: twelve streams of one line each, counted promptly.
#[test]
fn a_stream_that_ended_with_lines_is_asked_again_at_once() {
    let dir = dir("ended");
    let api = FakeApi::start(&dir);
    api.state()
        .log_answers
        .extend((0..12).map(|i| LogAnswer::lines(&[&format!("2026-11-26T10:00:{i:02}Z ERROR {i}")])));
    let agent = stream_agent(&api, &[]);
    agent.wait_value(&matches_of("error", STDOUT), 12.0);
}

/// SIGTERM while the app still writes its last lines to stdout: the stream is read until it
/// ends (within a short deadline), then the last scrape.
#[test]
fn the_stream_is_drained_at_sigterm() {
    let dir = dir("drain");
    let api = FakeApi::start(&dir);
    api.state().log_answers.push_back(LogAnswer {
        lines: vec![
            (Duration::ZERO, "2026-11-26T10:00:00Z ERROR first".into()),
            (Duration::from_millis(1500), "2026-11-26T10:00:01Z ERROR shutting down".into()),
            (Duration::from_millis(100), "2026-11-26T10:00:01.1Z ERROR last words".into()),
        ],
        hang: false,
    });
    let mut agent = stream_agent(&api, &[]);
    agent.wait_value(&matches_of("error", STDOUT), 1.0);
    agent.terminate();
    agent.wait_value(&matches_of("error", STDOUT), 3.0);
    assert_eq!(agent.exit_code(Duration::from_secs(30)), Some(0));
}

// ---------------------------------------------------------------------------------------------
// Events.

fn alerting_agent(
    dir: &std::path::Path,
    api: &FakeApi,
    rule: &str,
    extra: &[(&str, String)],
) -> (Agent, std::path::PathBuf) {
    let log = dir.join("app.log");
    append(&log, "");
    let mut vars = api.vars();
    vars.extend([("AGENT_FILES", format!("{}/*.log", dir.display())), ("AGENT_POLL", "20ms".to_owned())]);
    vars.push((Box::leak(format!("AGENT_RULE_{rule}").into_boxed_str()), r"\bERROR\b".to_owned()));
    vars.push((Box::leak(format!("AGENT_ALERT_{rule}").into_boxed_str()), "2/1m".to_owned()));
    vars.extend(extra.iter().cloned());
    (Agent::start(&vars), log)
}

fn notes(api: &FakeApi) -> Vec<String> {
    api.event_calls().iter().map(|(_, _, body)| body["note"].as_str().unwrap_or_default().to_owned()).collect()
}

/// Every Event says the rule and the last line: one created after a failed create, and one
/// created again after it expired.
#[test]
fn an_event_always_has_its_note() {
    let dir = dir("notes");
    let api = FakeApi::start(&dir);
    api.state().event_answers.push_back(EventAnswer::Status(500));
    let (_agent, log) = alerting_agent(&dir, &api, "ERROR", &[]);
    append(&log, &errors("x", 1, 2));
    wait_for("the Event after a failed create", || api.state().events.len() == 1);
    api.state().events.clear(); // expired
    append(&log, &errors("y", 3, 3));
    wait_for("the Event created again", || api.state().events.len() == 1);
    let calls = api.event_calls();
    let methods: Vec<&str> = calls.iter().map(|(m, _, _)| m.as_str()).collect();
    assert_eq!(methods, ["POST", "POST", "PATCH", "POST"], "{calls:?}");
    for note in notes(&api).iter().filter(|n| !n.is_empty()) {
        assert!(note.starts_with("rule error matched 2 times within 2 in 1m; last line: ERROR "), "{note}");
    }
    let posts: Vec<&Value> = calls.iter().filter(|(m, _, _)| m == "POST").map(|(_, _, b)| b).collect();
    assert!(posts.iter().all(|b| b["note"].as_str().is_some_and(|n| !n.is_empty())), "{posts:?}");
}

/// Errors logged for 6 s while the alert fires: one create, one patch at the second occurrence;
/// nothing more until the 30-minute heartbeat (or the series closes; `events::tests` follows a
/// series to its heartbeat on a clock of its own).
#[test]
fn a_firing_alert_writes_as_client_go_does() {
    let dir = dir("cadence");
    let api = FakeApi::start(&dir);
    let (_agent, log) = alerting_agent(&dir, &api, "ERROR", &[]);
    append(&log, &errors("x", 1, 2));
    wait_for("the Event", || !api.event_calls().is_empty());
    for i in 0..24 {
        append(&log, &format!("ERROR {i}\n"));
        std::thread::sleep(Duration::from_millis(250));
    }
    std::thread::sleep(Duration::from_secs(1));
    let calls = api.event_calls();
    let methods: Vec<&str> = calls.iter().map(|(m, _, _)| m.as_str()).collect();
    assert_eq!(methods, ["POST", "PATCH"]);
    assert!(calls[0].2.get("series").is_none(), "the first occurrence: {:?}", calls[0].2);
    assert_eq!(calls[1].2["series"]["count"].as_i64().map(|c| c >= 2), Some(true), "{:?}", calls[1].2);
}

/// A rule named `ERROR_`: its Event's name is still a DNS subdomain, created once.
#[test]
fn event_names_are_valid_whatever_the_rule() {
    let dir = dir("names");
    let api = FakeApi::start(&dir);
    let (_agent, log) = alerting_agent(&dir, &api, "ERROR_", &[]);
    append(&log, &errors("x", 1, 2));
    wait_for("the Event", || api.state().events.len() == 1);
    std::thread::sleep(Duration::from_secs(2));
    let calls = api.event_calls();
    assert_eq!(calls.len(), 1, "created once: {calls:?}");
    assert_eq!(calls[0].2["reason"], "LogRuleError");
}

/// kube-apiserver hangs on Events: Alertmanager is still told, and SIGTERM ends the agent within
/// the pod's grace period.
#[test]
fn a_hung_api_server_holds_up_nothing() {
    let dir = dir("hung");
    let api = FakeApi::start(&dir);
    api.state().event_answers.extend([EventAnswer::Hang; 8]);
    let am = FakeAlertmanager::start();
    let (mut agent, log) = alerting_agent(
        &dir,
        &api,
        "ERROR",
        &[("AGENT_ALERTMANAGER_URL", am.url.clone()), ("AGENT_SHUTDOWN_LINGER", "0s".into())],
    );
    append(&log, &errors("x", 1, 2));
    wait_for("the Event call", || !api.event_calls().is_empty());
    wait_for("Alertmanager told", || !am.alerts().is_empty());
    agent.terminate();
    assert_eq!(agent.exit_code(Duration::from_secs(30)), Some(0));
}

/// A stack trace is one event, and a latency a histogram's observation, through a restart: the
/// agent killed while an event waits for its end resumes at the event's first line (its
/// checkpoint says so), reads it whole, and counts it once.
#[test]
fn an_event_cut_by_a_restart_is_counted_once() {
    let dir = dir("event-restart");
    let (logs, state) = (dir.join("logs"), dir.join("state"));
    fs::create_dir_all(&logs).expect("dir");
    let log = logs.join("app.log");
    append(&log, "");
    let vars = |wait: &str| {
        vec![
            ("AGENT_STATE_DIR", state.display().to_string()),
            ("AGENT_MULTILINE_START", "java".to_owned()),
            ("AGENT_MULTILINE_WAIT", wait.to_owned()),
            ("AGENT_RULE_LATENCY", r"latency=(?P<ms>\S+)".to_owned()),
            ("AGENT_VALUE_LATENCY", "ms".to_owned()),
            ("AGENT_METRIC_LATENCY", "histogram".to_owned()),
            ("AGENT_UNIT_LATENCY", "ms".to_owned()),
            ("AGENT_BUCKETS_LATENCY", "0.01,0.1,1".to_owned()),
        ]
    };
    let (mut agent, source) = files_agent(&logs, "*.log", &vars("30s"));
    let first = "INFO start latency=5ms\n";
    append(&log, first);
    append(&log, "ERROR boom latency=700\n\tat com.example.App.run(App.java:10)\n");
    // The first line is an event once the second begins; the second waits for its end.
    agent.wait_value(&lines_of(&source), 1.0);
    wait_for("the checkpoint at the waiting event's start", || {
        let saved: Value = fs::read(state.join("watcher-agent.checkpoint.json"))
            .ok()
            .and_then(|b| serde_json::from_slice(&b).ok())
            .unwrap_or(Value::Null);
        saved["files"][0]["offset"] == first.len()
    });
    agent.kill();
    append(&log, "\tat com.example.App.main(App.java:5)\nINFO next latency=20\n");
    let (again, _) = files_agent(&logs, "*.log", &vars("100ms"));
    again.wait_value(&lines_of(&source), 4.0);
    again.wait_value(&format!(r#"watcher_agent_events_total{{source="{source}"}}"#), 2.0);
    assert_eq!(again.value(&matches_of("error", &source)), Some(1.0), "the trace: one match");
    let histogram =
        |suffix: &str| format!(r#"watcher_agent_latency_seconds_{suffix}{{rule="latency",source="{source}"}}"#);
    assert_eq!(again.value(&histogram("count")), Some(2.0));
    assert_eq!(
        again.value(&format!(r#"watcher_agent_latency_seconds_bucket{{le="0.1",rule="latency",source="{source}"}}"#)),
        Some(1.0)
    );
    assert_eq!(
        again.value(&format!(r#"watcher_agent_latency_seconds_bucket{{le="1.0",rule="latency",source="{source}"}}"#)),
        Some(2.0)
    );
    let sum = again.value(&histogram("sum")).expect("sum");
    assert!((sum - 0.72).abs() < 1e-9, "{sum}");
}

/// Writes `pairs` as a new version of a ConfigMap volume in `dir`, as the kubelet does: a
/// directory of its own, then the `..data` link swapped to it at once.
fn config_map_version(dir: &std::path::Path, version: u32, pairs: &[(&str, &str)]) {
    let versioned = dir.join(format!("..2026_12_07_00_00_{version:02}.{version}"));
    fs::create_dir_all(&versioned).expect("a version");
    for (name, value) in pairs {
        fs::write(versioned.join(name), value).expect("a file");
        let link = dir.join(name);
        if fs::symlink_metadata(&link).is_err() {
            std::os::unix::fs::symlink(format!("..data/{name}"), &link).expect("a key's link");
        }
    }
    let link = dir.join("..data_tmp");
    std::os::unix::fs::symlink(versioned.file_name().expect("a name"), &link).expect("a link");
    fs::rename(&link, dir.join("..data")).expect("swapped");
}

/// README's Watcher as the webhook injects it: `envFrom` its ConfigMap and the same ConfigMap
/// mounted at AGENT_CONFIG_DIR. A rule added is counted by the same process within the reload's
/// poll, the unchanged rule's counter going on; a pattern that does not compile leaves the last
/// good configuration counting; each is said by the metrics and an Event on the pod.
#[test]
fn a_configuration_changed_is_taken_without_a_restart() {
    let dir = dir("reload");
    let (logs, config) = (dir.join("logs"), dir.join("config"));
    fs::create_dir_all(&logs).expect("logs");
    let glob = format!("{}/*.log", logs.display());
    let first = [("AGENT_FILES", glob.as_str()), ("AGENT_RULE_ERROR", r"\bERROR\b")];
    config_map_version(&config, 1, &first);
    let api = FakeApi::start(&dir);
    let mut vars: Vec<(&str, String)> = first.iter().map(|(n, v)| (*n, (*v).to_owned())).collect();
    vars.extend([("AGENT_POLL", "20ms".to_owned()), ("AGENT_CONFIG_DIR", config.display().to_string())]);
    vars.extend(api.vars());
    let agent = Agent::start(&vars);
    let log = logs.join("app.log");
    append(&log, &errors("before", 1, 5));
    agent.wait_value(&matches_of("error", &glob), 5.0);
    let reloads = |result: &str| format!("watcher_agent_config_reloads_total{{result=\"{result}\"}}");
    assert_eq!(agent.value(&reloads("applied")), Some(0.0), "the directory as the environment had it");

    config_map_version(
        &config,
        2,
        &[("AGENT_FILES", &glob), ("AGENT_RULE_ERROR", "ERROR"), ("AGENT_RULE_PANIC", "panic")],
    );
    agent.wait_value(&reloads("applied"), 1.0);
    // A line read after the swap: the reader has taken the new configuration at its flush.
    append(&log, "a line\n");
    agent.wait_value(&lines_of(&glob), 6.0);
    append(&log, &format!("{}panic: at the disco\n", errors("after", 1, 3)));
    agent.wait_value(&matches_of("panic", &glob), 1.0);
    agent.wait_value(&matches_of("error", &glob), 8.0);

    config_map_version(
        &config,
        3,
        &[("AGENT_FILES", &glob), ("AGENT_RULE_ERROR", "ERROR"), ("AGENT_RULE_PANIC", "(panic")],
    );
    agent.wait_value(&reloads("refused"), 1.0);
    append(&log, "panic: again\nERROR once more\n");
    agent.wait_value(&lines_of(&glob), 12.0);
    agent.wait_value(&matches_of("panic", &glob), 2.0);
    agent.wait_value(&matches_of("error", &glob), 9.0);

    let events: Vec<Value> = api.state().events.values().cloned().collect();
    let said = |reason: &str| events.iter().find(|e| e["reason"] == reason).cloned();
    let applied = said("ConfigApplied").expect("an Event of the configuration applied");
    assert_eq!(applied["type"], "Normal");
    assert_eq!(applied["regarding"]["name"], "shop");
    let refused = said("ConfigRefused").expect("an Event of the configuration refused");
    assert_eq!(refused["type"], "Warning");
    assert!(refused["note"].as_str().is_some_and(|n| n.contains("AGENT_RULE_PANIC")), "{refused}");
    let mut agent = agent;
    assert_eq!(agent.child.try_wait().expect("alive"), None, "the same process throughout");
    agent.kill();
}
