//! `cargo bench -p watcher-agent --profile agent` (the profile the image is built with; plain
//! `cargo bench` measures the release profile): lines per second on one core (the follower reading a file
//! and every rule matched in one pass) for 1, 2 and 8 rules over realistic log lines (200 bytes,
//! 1 in 50 matching), beside `grep -c` and, where `mtail` is installed (Debian's `mtail`), mtail
//! running the same rules on the same file (`agent/benches/mtail-*`); the same lines spread over
//! 1,000 files (the agent with 128 descriptors, as `AGENT_MAX_OPEN_FILES` defaults); then the
//! resident memory of the `watcher-agent` binary (with checkpoints) and of mtail, each following
//! 10 files, then 1,000. Numbers are printed, never asserted: BENCHMARKS.md has them.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use std::sync::{Arc, Mutex};

use watcher_agent::config::{RuleConfig, Start};
use watcher_agent::matching::Rules;
use watcher_agent::metrics::Metrics;
use watcher_agent::parse::fields::Format;
use watcher_agent::pipeline::{Pipeline, Record, Report, Sink};
use watcher_agent::sinks::alerts::AlertBook;
use watcher_agent::tail::files::{Begin, FollowOptions, Follower};

const LINES: usize = 500_000;

const PATTERNS: [(&str, &str); 8] = [
    ("error", r"\bERROR\b"),
    ("timeout", "(?i)timeout"),
    ("panic", "panic:"),
    ("status5xx", r"status=5\d\d"),
    ("oom", "OutOfMemory"),
    ("refused", "connection refused"),
    ("warn", r"\bWARN\b"),
    ("deadline", "deadline exceeded"),
];

/// A log line of 200 bytes (newline included); every 50th is an ERROR.
fn line(i: usize) -> String {
    let level = if i.is_multiple_of(50) { "ERROR" } else { "INFO " };
    let mut line = format!(
        "2026-11-25T10:{:02}:{:02}.{:03}Z {level} [http-nio-8080-exec-{:02}] c.e.shop.OrderController - GET /api/orders/{} status=200 took={}ms user=u-{} trace={:016x}",
        (i / 60_000) % 60,
        (i / 1000) % 60,
        i % 1000,
        i % 32,
        100_000 + i % 90_000,
        i % 500,
        i % 10_000,
        i.wrapping_mul(0x9e37_79b9_7f4a_7c15)
    );
    line.truncate(199);
    while line.len() < 199 {
        line.push(' ');
    }
    line.push('\n');
    line
}

/// Lines `from..from + lines` into a new file at `path` (files of different `from` differ from
/// their first line on: a file that starts as another is taken for its copy).
fn write_log(path: &Path, from: usize, lines: usize) {
    let mut file = std::io::BufWriter::new(std::fs::File::create(path).expect("create"));
    for i in from..from + lines {
        file.write_all(line(i).as_bytes()).expect("write");
    }
    file.flush().expect("flush");
}

fn rules(count: usize) -> Vec<RuleConfig> {
    PATTERNS[..count].iter().map(|(name, pattern)| RuleConfig::counting(name, pattern).expect("a rule")).collect()
}

/// A JSON line of about 250 bytes, 8 fields, one nested: the text line `line(i)` says, as a JSON
/// logger writes it.
fn json_line(i: usize) -> String {
    let level = if i.is_multiple_of(50) { "error" } else { "info" };
    format!(
        concat!(
            r#"{{"ts":"2026-11-25T10:{:02}:{:02}.{:03}Z","level":"{}","thread":"http-nio-8080-exec-{:02}","#,
            r#""logger":"c.e.shop.OrderController","route":"/api/orders/{}","#,
            r#""http":{{"method":"{}","status":200,"ms":{}}},"user":"u-{}","trace":"{:016x}"}}"#,
            "\n"
        ),
        (i / 60_000) % 60,
        (i / 1000) % 60,
        i % 1000,
        level,
        i % 32,
        100_000 + i % 90_000,
        if i.is_multiple_of(7) { "POST" } else { "GET" },
        i % 500,
        i % 10_000,
        i.wrapping_mul(0x9e37_79b9_7f4a_7c15)
    )
}

/// The JSON line's text twin: the same fields, as a text logger writes them.
fn text_twin(i: usize) -> String {
    let level = if i.is_multiple_of(50) { "ERROR" } else { "INFO " };
    format!(
        "2026-11-25T10:{:02}:{:02}.{:03}Z {level} [http-nio-8080-exec-{:02}] c.e.shop.OrderController - {} /api/orders/{} status=200 ms={} user=u-{} trace={:016x}\n",
        (i / 60_000) % 60,
        (i / 1000) % 60,
        i % 1000,
        i % 32,
        if i.is_multiple_of(7) { "POST" } else { "GET" },
        100_000 + i % 90_000,
        i % 500,
        i % 10_000,
        i.wrapping_mul(0x9e37_79b9_7f4a_7c15)
    )
}

/// `LINES` lines where one log entry in five is an exception with a 30-frame Java stack trace.
fn java_log(path: &Path) {
    let mut file = std::io::BufWriter::new(std::fs::File::create(path).expect("create"));
    let mut written = 0;
    let mut entry = 0;
    while written < LINES {
        if entry % 5 == 4 {
            file.write_all(format!("java.lang.IllegalStateException: order {entry} failed: ERROR\n").as_bytes())
                .expect("write");
            written += 1;
            for frame in 0..30 {
                if written == LINES {
                    break;
                }
                let text =
                    format!("\tat com.example.shop.OrderService.step{frame}(OrderService.java:{})\n", 100 + frame);
                file.write_all(text.as_bytes()).expect("write");
                written += 1;
            }
        } else {
            file.write_all(line(entry).as_bytes()).expect("write");
            written += 1;
        }
        entry += 1;
    }
    file.flush().expect("flush");
}

/// Writes `LINES` lines made by `make` to `path`.
fn write_lines(path: &Path, make: impl Fn(usize) -> String) -> u64 {
    let mut file = std::io::BufWriter::new(std::fs::File::create(path).expect("create"));
    for i in 0..LINES {
        file.write_all(make(i).as_bytes()).expect("write");
    }
    file.flush().expect("flush");
    std::fs::metadata(path).map(|m| m.len()).unwrap_or_default()
}

/// The lines read, through the pipeline as the agent's files' thread has them; a source that
/// cannot be read ends the bench.
struct Counted<'a>(&'a mut Pipeline);

impl Sink for Counted<'_> {
    fn take(&mut self, record: Record<'_>) {
        self.0.take(record);
    }
    fn report(&mut self, report: Report<'_>) {
        if let Report::Error { detail, .. } = report {
            panic!("cannot read: {detail}");
        }
        self.0.report(report);
    }
}

/// Lines per second through the follower and the rules, on this thread; and the matches. With
/// `checkpoints`, where every file was read to is taken and written to a checkpoint after every
/// poll (8 MiB), where the agent does it once a second: the most they can cost.
fn agent_throughput(glob: &str, rules: &[RuleConfig], checkpoints: Option<&Path>) -> (f64, u64) {
    agent_reading(glob, rules, checkpoints, Format::Text, None)
}

/// The configuration `vars` give (the agent's own reading), for the benches of values, fields
/// and events.
fn configured(vars: &[(&str, &str)]) -> watcher_agent::config::Config {
    let mut all = vec![("AGENT_FILES", "/bench/*.log")];
    all.extend_from_slice(vars);
    watcher_agent::config::Config::from_vars(all.iter().map(|(k, v)| (k.to_string(), v.to_string()))).expect("config")
}

/// As [`agent_throughput`], lines read as `format`, joined as `multiline` says.
fn agent_reading(
    glob: &str,
    rules: &[RuleConfig],
    checkpoints: Option<&Path>,
    format: Format,
    multiline: Option<Arc<watcher_agent::tail::multiline::Multiline>>,
) -> (f64, u64) {
    let mut best = f64::MAX;
    let mut matched = 0;
    for _ in 0..3 {
        let mut registry = watcher_agent::metrics::Registry::default();
        let metrics = Arc::new(Metrics::register(&mut registry, &["bench".into()], rules, 100));
        let alerts = Arc::new(Mutex::new(AlertBook::new(rules)));
        let compiled = Rules::new(rules).expect("rules");
        let mut pipeline = Pipeline::reading(&compiled, vec![format], 16_384, metrics.clone(), alerts);
        let mut follower = Follower::new(follow_options(glob, multiline.clone()), Begin::Fresh);
        let start = Instant::now();
        loop {
            let more = follower.poll(&mut Counted(&mut pipeline));
            pipeline.flush();
            if let Some(dir) = checkpoints {
                let checkpoint =
                    watcher_agent::tail::checkpoint::Checkpoint { files: follower.marks(), ..Default::default() };
                watcher_agent::tail::checkpoint::write(dir, &checkpoint).expect("checkpoint");
            }
            if !more {
                break;
            }
        }
        best = best.min(start.elapsed().as_secs_f64());
        matched = metrics.rules[0].matches[0].get();
    }
    (LINES as f64 / best, matched)
}

/// How the benches follow `glob`: from the beginning, as the agent's defaults say otherwise.
fn follow_options(glob: &str, multiline: Option<Arc<watcher_agent::tail::multiline::Multiline>>) -> FollowOptions {
    FollowOptions {
        globs: vec![watcher_agent::tail::glob::Glob::new(glob).expect("a glob")],
        start: Start::Beginning,
        max_line: 16_384,
        rotate_wait: Duration::from_secs(5),
        ignore_older: None,
        max_open: 128,
        multiline,
    }
}

/// Seconds `command` takes, best of three; `None` when it cannot run.
fn time_command(program: &str, args: &[&str]) -> Option<f64> {
    let mut best = f64::MAX;
    for _ in 0..3 {
        let start = Instant::now();
        // Output to a pipe, read: GNU grep stops at the first match when its output is /dev/null.
        let output = Command::new(program).args(args).stderr(Stdio::null()).output().ok()?;
        if !output.status.success() {
            return None;
        }
        best = best.min(start.elapsed().as_secs_f64());
    }
    Some(best)
}

/// Resident memory of `pid` in MiB, from /proc: all of it (`VmRSS`), and the anonymous part
/// (`RssAnon`: heap and stacks, without the pages of the binary and libraries mapped from files).
fn rss_mib(pid: u32) -> Option<(f64, f64)> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let field = |name: &str| -> Option<f64> {
        let kib: f64 = status.lines().find(|l| l.starts_with(name))?.split_whitespace().nth(1)?.parse().ok()?;
        Some(kib / 1024.0)
    };
    Some((field("VmRSS:")?, field("RssAnon:")?))
}

/// Starts `command`, lets it follow the `files` files of `dir` while 200,000 lines in all are
/// appended to them, and reads its resident memory once it caught up.
fn rss_following(mut command: Command, dir: &Path, files: usize) -> Option<(f64, f64)> {
    let mut child = command.stdout(Stdio::null()).stderr(Stdio::null()).spawn().ok()?;
    std::thread::sleep(Duration::from_secs(2));
    let per_file = 50_000 / files;
    for round in 0..4 {
        for f in 0..files {
            let mut file =
                std::fs::OpenOptions::new().append(true).open(dir.join(format!("app-{f}.log"))).expect("open");
            let text: String = (0..per_file).map(|i| line(round * per_file + i)).collect();
            file.write_all(text.as_bytes()).expect("append");
        }
        std::thread::sleep(Duration::from_millis(500));
    }
    std::thread::sleep(Duration::from_secs(files.div_ceil(100) as u64 + 2));
    let rss = rss_mib(child.id());
    let _ = child.kill();
    let _ = child.wait();
    rss
}

#[path = "support/receiver.rs"]
mod receiver;
use receiver::receiver;

fn main() {
    let dir: PathBuf = std::env::temp_dir().join(format!("watcher-agent-bench-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("bench directory");
    let log = dir.join("app.log");
    write_log(&log, 0, LINES);
    let programs = concat!(env!("CARGO_MANIFEST_DIR"), "/benches");
    // `cargo bench -p watcher-agent --profile agent --bench agent -- values`: only values, fields
    // and events; `-- memory`: only memory, following 10 files.
    if std::env::args().any(|a| a == "values") {
        values_fields_and_events(&dir, &log.display().to_string(), programs);
        let _ = std::fs::remove_dir_all(&dir);
        return;
    }
    // `... -- reloads`: counting with a new configuration every 100 ms against without, and the
    // time a reload of 32 rules takes.
    if std::env::args().any(|a| a == "reloads") {
        reloads(&dir);
        let _ = std::fs::remove_dir_all(&dir);
        return;
    }
    // `... -- scrape`: a scrape of 100 series in each format.
    if std::env::args().any(|a| a == "scrape") {
        scrape();
        let _ = std::fs::remove_dir_all(&dir);
        return;
    }
    // `... -- memory`: only the memory rows, following 10 files.
    if std::env::args().any(|a| a == "memory") {
        memory(&dir, programs, &[10]);
        let _ = std::fs::remove_dir_all(&dir);
        return;
    }
    let bytes = std::fs::metadata(&log).map(|m| m.len()).unwrap_or_default();
    println!("{LINES} lines, {:.0} MB, 1 in 50 matching", bytes as f64 / 1e6);
    println!("{:<44} {:>14} {:>10}", "one core", "lines/s", "MB/s");
    let mb = |lines_per_second: f64| lines_per_second * 200.0 / 1e6;
    let log_path = log.display().to_string();
    for count in [1, 2, 8] {
        let (rate, matched) = agent_throughput(&log_path, &rules(count), None);
        assert_eq!(matched, (LINES / 50) as u64, "every ERROR line counted once");
        println!("{:<44} {rate:>14.0} {:>10.0}", format!("watcher-agent, {count} rule(s)"), mb(rate));
    }
    let state = dir.join("state");
    std::fs::create_dir_all(&state).expect("state directory");
    let (rate, matched) = agent_throughput(&log_path, &rules(2), Some(&state));
    assert_eq!(matched, (LINES / 50) as u64, "every ERROR line counted once");
    println!("{:<44} {rate:>14.0} {:>10.0}", "watcher-agent, 2 rules, checkpoint every 8 MiB", mb(rate));
    if let Some(seconds) = time_command("grep", &["-c", "ERROR", &log_path]) {
        let rate = LINES as f64 / seconds;
        println!("{:<44} {rate:>14.0} {:>10.0}", "grep -c ERROR (for scale)", mb(rate));
    }
    mtail_throughput(programs, &log_path, "");
    values_fields_and_events(&dir, &log_path, programs);

    // The same lines in 1,000 files.
    let thousand = dir.join("thousand");
    std::fs::create_dir_all(&thousand).expect("dir");
    for f in 0..1000 {
        write_log(&thousand.join(format!("app-{f}.log")), f * (LINES / 1000), LINES / 1000);
    }
    let thousand_glob = format!("{}/*.log", thousand.display());
    let (rate, matched) = agent_throughput(&thousand_glob, &rules(2), None);
    println!("{:<44} {rate:>14.0} {:>10.0}", "watcher-agent, 2 rules, 1,000 files", mb(rate));
    if matched != (LINES / 50) as u64 {
        println!("  but {matched} ERROR lines counted of {}", LINES / 50);
    }
    mtail_throughput(programs, &thousand_glob, ", 1,000 files");

    memory(&dir, programs, &[10, 1000]);
    let _ = std::fs::remove_dir_all(&dir);
}

/// Beyond counting: a histogram of a logged value beside mtail's; JSON lines against their text
/// twin; Java stack traces joined into events.
fn values_fields_and_events(dir: &Path, log: &str, programs: &str) {
    println!("{:<44} {:>14} {:>10}", "values, fields, events (one core)", "lines/s", "ratio");
    let histogram_vars = [
        ("AGENT_RULE_ERROR", r"\bERROR\b"),
        ("AGENT_RULE_TIMEOUT", "(?i)timeout"),
        ("AGENT_RULE_LATENCY", r"took=(?P<ms>\d+)ms"),
        ("AGENT_VALUE_LATENCY", "ms"),
        ("AGENT_METRIC_LATENCY", "histogram"),
        ("AGENT_UNIT_LATENCY", "ms"),
    ];
    let histogram = configured(&histogram_vars);
    let (rate, matched) = agent_reading(log, &histogram.rules, None, Format::Text, None);
    assert_eq!(matched, (LINES / 50) as u64, "every ERROR line counted once");
    let mtail = time_command(
        "mtail",
        &[
            "--one_shot",
            "--one_shot_format=prometheus",
            "--progs",
            &format!("{programs}/mtail-histogram"),
            "--logs",
            log,
        ],
    );
    let ratio = mtail.map_or("(no mtail)".to_owned(), |s| format!("{:.0}x mtail", rate * s / LINES as f64));
    println!("{:<44} {rate:>14.0} {ratio:>10}", "text: 2 rules + a histogram");
    if let Some(seconds) = mtail {
        println!("{:<44} {:>14.0}", "mtail --one_shot, 2 rules + a histogram", LINES as f64 / seconds);
    }
    // The same histogram, also a native one: both from one observation.
    let native = configured(&[&histogram_vars[..], &[("AGENT_NATIVE_LATENCY", "1.1")]].concat());
    let (native_rate, matched) = agent_reading(log, &native.rules, None, Format::Text, None);
    assert_eq!(matched, (LINES / 50) as u64, "every ERROR line counted once");
    println!("{:<44} {native_rate:>14.0} {:>10.2}", "text: 2 rules + a native histogram (1.1)", native_rate / rate);

    let json = dir.join("json.log");
    let twin = dir.join("twin.log");
    let json_bytes = write_lines(&json, json_line);
    write_lines(&twin, text_twin);
    let structured = configured(&[
        ("AGENT_FORMAT", "json"),
        ("AGENT_MATCH_ERROR", "level=^error$"),
        ("AGENT_MATCH_LATENCY", "http.ms=."),
        ("AGENT_VALUE_LATENCY", "http.ms"),
        ("AGENT_METRIC_LATENCY", "histogram"),
        ("AGENT_UNIT_LATENCY", "ms"),
        ("AGENT_LABELS_LATENCY", "method:http.method"),
    ]);
    let text = configured(&[
        ("AGENT_RULE_ERROR", r"\bERROR\b"),
        ("AGENT_RULE_LATENCY", r"(?P<method>GET|POST) \S+ status=\d+ ms=(?P<ms>\d+)"),
        ("AGENT_VALUE_LATENCY", "ms"),
        ("AGENT_METRIC_LATENCY", "histogram"),
        ("AGENT_UNIT_LATENCY", "ms"),
    ]);
    let (text_rate, matched) = agent_reading(&twin.display().to_string(), &text.rules, None, Format::Text, None);
    assert_eq!(matched, (LINES / 50) as u64, "every ERROR line counted once");
    let (json_rate, matched) = agent_reading(&json.display().to_string(), &structured.rules, None, Format::Json, None);
    assert_eq!(matched, (LINES / 50) as u64, "every error line counted once");
    println!("{:<44} {text_rate:>14.0} {:>10}", "text twin: error + histogram with a label", "1");
    println!(
        "{:<44} {json_rate:>14.0} {:>10.2}",
        format!("JSON ({} bytes a line): the same", json_bytes / LINES as u64),
        json_rate / text_rate
    );

    let java = dir.join("java.log");
    java_log(&java);
    let events = configured(&[
        ("AGENT_RULE_ERROR", r"\bERROR\b"),
        ("AGENT_RULE_TIMEOUT", "(?i)timeout"),
        ("AGENT_MULTILINE_START", "java"),
    ]);
    let multiline = events.multiline.as_ref().map(watcher_agent::config::MultilineConfig::build);
    let (rate, matched) = agent_reading(&java.display().to_string(), &events.rules, None, Format::Text, multiline);
    println!("{:<44} {rate:>14.0} {:>10}", "java preset: 1 entry in 5 a 30-frame trace", format!("{matched} ERROR"));
}

/// mtail `--one_shot` over the files of `glob`, 2 and 8 rules (and `what` in the row's name).
fn mtail_throughput(programs: &str, glob: &str, what: &str) {
    let mb = |lines_per_second: f64| lines_per_second * 200.0 / 1e6;
    for count in [2, 8] {
        let progs = format!("{programs}/mtail-{count}");
        let args = ["--one_shot", "--one_shot_format=prometheus", "--progs", &progs, "--logs", glob];
        match time_command("mtail", &args) {
            Some(seconds) => {
                let rate = LINES as f64 / seconds;
                println!("{:<44} {rate:>14.0} {:>10.0}", format!("mtail --one_shot, {count} rules{what}"), mb(rate));
            }
            None => println!("mtail, {count} rules: not run (install Debian's mtail: apt-get install mtail)"),
        }
    }
}

/// Resident memory, each binary following `counts` files (10, then 1,000) while 200,000 lines
/// are appended to them: the agent (this build's, or the one `WATCHER_AGENT_BINARY` names: a
/// build of other settings) in each mode, and mtail.
fn memory(dir: &Path, programs: &str, counts: &[usize]) {
    let binary = std::env::var_os("WATCHER_AGENT_BINARY")
        .map_or_else(|| PathBuf::from(env!("CARGO_BIN_EXE_watcher-agent")), PathBuf::from);
    if let Ok(size) = std::fs::metadata(&binary).map(|m| m.len()) {
        println!("{}: {:.2} MB", binary.display(), size as f64 / 1e6);
    }
    for &files in counts {
        let followed = dir.join(format!("following-{files}"));
        std::fs::create_dir_all(&followed).expect("dir");
        for f in 0..files {
            write_log(&followed.join(format!("app-{f}.log")), f * 10, 10);
        }
        let glob = format!("{}/*.log", followed.display());
        // The agent with the two rules, and `vars`.
        let agent_with = |vars: &[(&str, &str)]| {
            let mut agent = Command::new(&binary);
            agent
                .env_clear()
                .env("AGENT_FILES", &glob)
                .env("AGENT_RULE_ERROR", r"\bERROR\b")
                .env("AGENT_RULE_TIMEOUT", "(?i)timeout")
                .env("AGENT_LISTEN", "127.0.0.1:0")
                .env("AGENT_EVENTS", "false")
                .envs(vars.iter().copied());
            agent
        };
        let state = dir.join(format!("agent-state-{files}")).display().to_string();
        let agent = agent_with(&[("AGENT_STATE_DIR", &state)]);
        println!("{:<44} {:>14} {:>10}", format!("resident memory, following {files} files"), "MiB", "anon MiB");
        match rss_following(agent, &followed, files) {
            Some((rss, anon)) => println!("{:<44} {rss:>14.1} {anon:>10.1}", "watcher-agent, 2 rules"),
            None => println!("watcher-agent: could not be measured"),
        }
        // The same, following its configuration as files, as in a pod (AGENT_CONFIG_DIR).
        let config = dir.join(format!("agent-config-{files}"));
        std::fs::create_dir_all(&config).expect("dir");
        for (name, value) in
            [("AGENT_FILES", glob.as_str()), ("AGENT_RULE_ERROR", r"\bERROR\b"), ("AGENT_RULE_TIMEOUT", "(?i)timeout")]
        {
            std::fs::write(config.join(name), value).expect("a configuration file");
        }
        let config = config.display().to_string();
        let agent = agent_with(&[("AGENT_STATE_DIR", &state), ("AGENT_CONFIG_DIR", &config)]);
        match rss_following(agent, &followed, files) {
            Some((rss, anon)) => {
                println!("{:<44} {rss:>14.1} {anon:>10.1}", "watcher-agent, 2 rules, AGENT_CONFIG_DIR")
            }
            None => println!("watcher-agent with AGENT_CONFIG_DIR: could not be measured"),
        }
        // The same agent reading values, JSON fields and events: each mode's memory.
        // Today's Prometheus: a native histogram with exemplars beside the two rules, every
        // series pushed by remote write every second to a receiver that takes each push.
        let (url, pushes) = receiver();
        let pushing = [
            ("AGENT_RULE_LATENCY", r"took=(?P<ms>\d+)ms user=\S+ trace=(?P<trace>[0-9a-f]+)"),
            ("AGENT_VALUE_LATENCY", "ms"),
            ("AGENT_METRIC_LATENCY", "histogram"),
            ("AGENT_NATIVE_LATENCY", "1.1"),
            ("AGENT_EXEMPLAR_LATENCY", "trace"),
            ("AGENT_REMOTE_WRITE_URL", url.as_str()),
            ("AGENT_REMOTE_WRITE_INTERVAL", "1s"),
        ];
        // The two rules as mtail's, pushed: the like of mtail's row with remote write on.
        let pushed = [("AGENT_REMOTE_WRITE_URL", url.as_str()), ("AGENT_REMOTE_WRITE_INTERVAL", "1s")];
        let modes: [(&str, &[(&str, &str)]); 5] = [
            (
                "watcher-agent, 2 rules + a histogram",
                &[
                    ("AGENT_RULE_LATENCY", r"took=(?P<ms>\d+)ms"),
                    ("AGENT_VALUE_LATENCY", "ms"),
                    ("AGENT_METRIC_LATENCY", "histogram"),
                ],
            ),
            (
                "watcher-agent, auto format + fields",
                &[("AGENT_FORMAT", "auto"), ("AGENT_MATCH_LEVEL", "level=error"), ("AGENT_LABELS_LEVEL", "user")],
            ),
            ("watcher-agent, 2 rules, java events", &[("AGENT_MULTILINE_START", "java")]),
            ("watcher-agent, 2 rules, push 1s", &pushed),
            ("watcher-agent, native, exemplars, push 1s", &pushing),
        ];
        for (name, vars) in modes {
            match rss_following(agent_with(vars), &followed, files) {
                Some((rss, anon)) => println!("{name:<44} {rss:>14.1} {anon:>10.1}"),
                None => println!("{name}: could not be measured"),
            }
        }
        println!("{:<44} {:>14}", "  pushes the receiver took", pushes.load(std::sync::atomic::Ordering::Relaxed));
        let mut mtail = Command::new("mtail");
        mtail.args(["--progs", &format!("{programs}/mtail-2"), "--logs", &glob, "--port", "0", "--logtostderr"]);
        match rss_following(mtail, &followed, files) {
            Some((rss, anon)) => println!("{:<44} {rss:>14.1} {anon:>10.1}", "mtail, 2 rules"),
            None => println!("mtail: not run (install Debian's mtail: apt-get install mtail)"),
        }
    }
}

/// The configuration of the reload bench: two counting rules and a histogram of `took=`; `flip`
/// writes the `error` rule's pattern another way (its series go on).
fn reload_vars(flip: bool) -> Vec<(String, String)> {
    let error = if flip { "ERROR" } else { r"\bERROR\b" };
    [
        ("AGENT_FILES", "/bench/*.log"),
        ("AGENT_RULE_ERROR", error),
        ("AGENT_RULE_TIMEOUT", "(?i)timeout"),
        ("AGENT_RULE_LATENCY", r"took=(?P<ms>\d+)ms"),
        ("AGENT_VALUE_LATENCY", "ms"),
        ("AGENT_UNIT_LATENCY", "ms"),
        ("AGENT_METRIC_LATENCY", "histogram"),
    ]
    .iter()
    .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
    .collect()
}

/// Reads `glob` to its end through a pipeline over a live configuration, a new one swapped in
/// every `every` (never, with `None`): lines per second, and the ERROR lines and lines counted.
fn counted_with_reloads(glob: &str, lines: usize, every: Option<Duration>) -> (f64, u64, u64, u64) {
    use watcher_agent::pipeline::{Compiled, Live};
    let (config, rules) = watcher_agent::compile(reload_vars(false)).expect("a configuration");
    let mut registry = watcher_agent::metrics::Registry::default();
    let metrics = Arc::new(Metrics::register(&mut registry, &["bench".into()], &config.rules, 100));
    let alerts = Arc::new(Mutex::new(AlertBook::new(&config.rules)));
    let live = Live::new(Compiled { config, rules, metrics: metrics.clone() }, alerts);
    let done = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let swapper = every.map(|every| {
        let (live, done) = (live.clone(), done.clone());
        std::thread::spawn(move || {
            let mut swaps = 0_u64;
            while !done.load(std::sync::atomic::Ordering::Acquire) {
                std::thread::sleep(every);
                let (config, rules) =
                    watcher_agent::compile(reload_vars(swaps.is_multiple_of(2))).expect("a configuration");
                let metrics = Arc::new(live.current().metrics.reconfigured(&config.rules));
                live.swap(Compiled { config, rules, metrics });
                swaps += 1;
            }
            swaps
        })
    });
    let mut pipeline = Pipeline::live(&live);
    let mut follower = Follower::new(follow_options(glob, None), Begin::Fresh);
    let start = Instant::now();
    while follower.poll(&mut Counted(&mut pipeline)) {
        pipeline.flush();
    }
    pipeline.flush();
    let seconds = start.elapsed().as_secs_f64();
    done.store(true, std::sync::atomic::Ordering::Release);
    let swaps = swapper.map_or(0, |s| s.join().expect("the swapper"));
    let current = live.current();
    let errors = current.metrics.rules[0].matches[0].get();
    let read = current.metrics.lines[0].get();
    (lines as f64 / seconds, errors, read, swaps)
}

/// Counting with a new configuration every 100 ms against without, alternated three times each,
/// over 5 M lines; then a reload of 32 rules (judged, compiled, its metrics made, swapped in).
fn reloads(dir: &Path) {
    const MANY: usize = 5_000_000;
    let log = dir.join("many.log");
    write_log(&log, 0, MANY);
    let glob = log.display().to_string();
    println!("{:<48} {:>14} {:>10}", "5 M lines, two rules and a histogram", "lines/s", "reloads");
    for round in 1..=3 {
        for every in [None, Some(Duration::from_millis(100))] {
            let (rate, errors, read, swaps) = counted_with_reloads(&glob, MANY, every);
            assert_eq!((errors, read), ((MANY / 50) as u64, MANY as u64), "every line counted once");
            let what = if every.is_some() { "a new configuration every 100 ms" } else { "no reload" };
            println!("{:<48} {rate:>14.0} {swaps:>10}", format!("round {round}: {what}"));
        }
    }
    let many: Vec<(String, String)> = std::iter::once(("AGENT_FILES".to_owned(), "/bench/*.log".to_owned()))
        .chain((0..32).map(|i| (format!("AGENT_RULE_R{i}"), format!(r"\b(?:ERROR|WARN)\b.*code={i}\b"))))
        .collect();
    let (config, rules) = watcher_agent::compile(many.clone()).expect("32 rules");
    let mut registry = watcher_agent::metrics::Registry::default();
    let metrics = Arc::new(Metrics::register(&mut registry, &["bench".into()], &config.rules, 100));
    let alerts = Arc::new(Mutex::new(AlertBook::new(&config.rules)));
    let live = watcher_agent::pipeline::Live::new(watcher_agent::pipeline::Compiled { config, rules, metrics }, alerts);
    let mut best = Duration::MAX;
    for _ in 0..10 {
        let start = Instant::now();
        let (config, rules) = watcher_agent::compile(many.clone()).expect("32 rules");
        let metrics = Arc::new(live.current().metrics.reconfigured(&config.rules));
        live.swap(watcher_agent::pipeline::Compiled { config, rules, metrics });
        best = best.min(start.elapsed());
    }
    println!("{:<48} {:>11.1} ms", "a reload of 32 rules, best of 10", best.as_secs_f64() * 1e3);
}

/// A scrape in each format `/metrics` serves, of 100 rule series (90 counters of a rule with a
/// label, 10 sources of a histogram that is also a native one) beside the agent's own: the time
/// a scrape takes to encode, best of 5 rounds of 2,000.
fn scrape() {
    let configured = configured(&[
        ("AGENT_RULE_STATUS", r"status=(?P<code>\d+)"),
        ("AGENT_RULE_LATENCY", r"took=(?P<ms>\d+)ms"),
        ("AGENT_VALUE_LATENCY", "ms"),
        ("AGENT_METRIC_LATENCY", "histogram"),
        ("AGENT_UNIT_LATENCY", "ms"),
        ("AGENT_NATIVE_LATENCY", "1.1"),
    ]);
    let sources: Vec<String> = (0..10).map(|s| format!("/var/log/app-{s}/*.log")).collect();
    let mut registry = watcher_agent::metrics::Registry::default();
    let metrics = Metrics::register(&mut registry, &sources, &configured.rules, 1000);
    let rules = Rules::new(&configured.rules).expect("rules");
    let alerts = Arc::new(Mutex::new(AlertBook::new(&configured.rules)));
    let mut pipeline = Pipeline::reading(&rules, vec![Format::Text; 10], 16_384, Arc::new(metrics), alerts);
    let written = std::time::SystemTime::now();
    for source in 0..10 {
        let lines: String = (0..9).map(|code| format!("status={} took={}ms\n", 200 + code, 3 + code * 40)).collect();
        let record = Record { source, piece: watcher_agent::record::Piece::Run(lines.as_bytes()), written };
        pipeline.take(record);
    }
    pipeline.flush();
    let series = watcher_agent::metrics::prometheus_text(&registry)
        .lines()
        .filter(|l| {
            l.starts_with("watcher_agent_matches_total{rule=\"status\"")
                || l.starts_with("watcher_agent_latency_seconds_count")
        })
        .count();
    println!("{:<44} {:>14} {:>10}", format!("a scrape of {series} rule series, encoded"), "µs", "bytes");
    let time = |encode: &dyn Fn() -> usize| {
        let mut best = f64::MAX;
        let mut bytes = 0;
        for _ in 0..5 {
            let start = Instant::now();
            for _ in 0..2000 {
                bytes = encode();
            }
            best = best.min(start.elapsed().as_secs_f64() / 2000.0);
        }
        (best * 1e6, bytes)
    };
    let (text, text_bytes) = time(&|| watcher_agent::metrics::prometheus_text(&registry).len());
    let (open, open_bytes) = time(&|| watcher_agent::metrics::openmetrics(&registry).len());
    let (protobuf, protobuf_bytes) = time(&|| watcher_agent::metrics::protobuf(&registry).len());
    println!("{:<44} {text:>14.1} {text_bytes:>10}", "text 0.0.4");
    println!("{:<44} {open:>14.1} {open_bytes:>10}", "OpenMetrics text");
    println!("{:<44} {protobuf:>14.1} {protobuf_bytes:>10}", "protobuf (delimited MetricFamily)");
    println!("{:<44} {:>14.2}", "protobuf against text 0.0.4 (time)", protobuf / text);
}
