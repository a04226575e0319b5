//! The agent's code laid out by use: the functions it runs placed together at the start of its
//! text, so that the pages the kernel maps around each one it runs (64 KiB at a time) hold code
//! it runs too. Most of a sidecar's resident memory is its binary's code: laid out so, the agent
//! maps 1.8 MiB less in every pod (BENCHMARKS.md, "The agent's code laid out by use").
//!
//! `agent/layout/hot-functions.txt` lists them, in the order they first ran, each by its symbol
//! and its name without hash. `cargo xtask agent-layout` makes that list again: it runs the
//! agent's shipped build under `qemu-x86_64-static -d in_asm` (every block of code it runs,
//! logged once) through what a sidecar does: follow files, count, a histogram that is also a
//! native one with exemplars, scrapes in each format, remote write, a configuration read again,
//! SIGTERM. The release links the agent twice: once, then with the list turned into lld's
//! `--symbol-ordering-file` for that build's symbols ([`ordering_of`]); a function whose symbol
//! changed (another toolchain, a dependency updated) is found by its name.

use std::collections::{HashMap, HashSet};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};

/// The list, from the workspace's root.
pub(crate) const HOT_FUNCTIONS: &str = "agent/layout/hot-functions.txt";

/// Where a shipped agent is loaded by qemu-user (`-d in_asm` logs addresses from there).
const QEMU_BASE: u64 = 0x40_0000_0000;

/// The functions of `binary`: (address, size, symbol, name without hash), by address.
fn functions(binary: &Path) -> anyhow::Result<Vec<(u64, u64, String, String)>> {
    let nm = |demangle: bool| -> anyhow::Result<Vec<String>> {
        let mut nm = Command::new("nm");
        nm.args(["--defined-only", "--numeric-sort", "--print-size"]);
        if demangle {
            nm.arg("--demangle");
        }
        let out = nm.arg(binary).output().context("cannot run nm (binutils)")?;
        if !out.status.success() {
            bail!("nm {}: {}", binary.display(), String::from_utf8_lossy(&out.stderr).trim());
        }
        Ok(String::from_utf8_lossy(&out.stdout).lines().map(str::to_owned).collect())
    };
    let (symbols, names) = (nm(false)?, nm(true)?);
    if symbols.len() != names.len() {
        bail!("nm listed {} symbols, and {} names", symbols.len(), names.len());
    }
    let mut functions = Vec::new();
    for (symbol, name) in symbols.iter().zip(&names) {
        let parts: Vec<&str> = symbol.splitn(4, ' ').collect();
        let [address, size, kind, symbol] = parts[..] else { continue };
        if !matches!(kind, "t" | "T" | "w" | "W") {
            continue;
        }
        let name = name.splitn(4, ' ').nth(3).unwrap_or(symbol).to_owned();
        let parse = |hex: &str| u64::from_str_radix(hex, 16).with_context(|| format!("nm: {hex:?}"));
        functions.push((parse(address)?, parse(size)?, symbol.to_owned(), name));
    }
    Ok(functions)
}

/// Writes to `out` the symbols of `binary` that `hot` (the list) names, in its order: each by
/// its symbol where `binary` has it, else every function of its name. Says how many were
/// found each way, and how many not at all.
pub(crate) fn ordering_of(binary: &Path, hot: &Path, out: &Path) -> anyhow::Result<String> {
    let functions = functions(binary)?;
    let symbols: HashSet<&str> = functions.iter().map(|f| f.2.as_str()).collect();
    let mut by_name: HashMap<&str, Vec<&str>> = HashMap::new();
    for (_, _, symbol, name) in &functions {
        by_name.entry(name).or_default().push(symbol);
    }
    let list = std::fs::read_to_string(hot).with_context(|| format!("cannot read {}", hot.display()))?;
    let (mut exact, mut named, mut missing) = (0, 0, 0);
    let mut placed = HashSet::new();
    let mut text = String::new();
    for line in list.lines().filter(|l| !l.is_empty() && !l.starts_with('#')) {
        let (symbol, name) = line.split_once('\t').unwrap_or((line, line));
        let found: Vec<&str> = if symbols.contains(symbol) {
            exact += 1;
            vec![symbol]
        } else if let Some(all) = by_name.get(name) {
            named += 1;
            all.clone()
        } else {
            missing += 1;
            Vec::new()
        };
        for symbol in found {
            if placed.insert(symbol) {
                text.push_str(symbol);
                text.push('\n');
            }
        }
    }
    std::fs::write(out, text).with_context(|| format!("cannot write {}", out.display()))?;
    Ok(format!("{exact} hot functions found by symbol, {named} by name, {missing} not found"))
}

/// The linker's arguments that lay `binary`'s code out as `ordering` (a file [`ordering_of`] wrote)
/// says: lld's, rustc's linker on linux/amd64.
pub(crate) fn link_args(ordering: &Path) -> Vec<String> {
    vec![
        "-C".to_owned(),
        format!("link-arg=-Wl,--symbol-ordering-file={}", ordering.display()),
        "-C".to_owned(),
        "link-arg=-Wl,--no-warn-symbol-ordering".to_owned(),
    ]
}

/// Lines the agent reads: one in 50 an ERROR, a latency and a trace id in each.
fn lines(round: usize, count: usize) -> String {
    (round * count..(round + 1) * count)
        .map(|i| {
            let level = if i % 50 == 0 { "ERROR" } else { "INFO" };
            format!("2026-11-25T10:00:00.000Z {level} GET /api/orders/{i} took={}ms trace={i:016x}\n", i % 900 + 1)
        })
        .collect()
}

/// A remote write receiver that takes every push (204), on a port of its own.
fn receiver() -> anyhow::Result<u16> {
    let listener = TcpListener::bind("127.0.0.1:0").context("a port for the receiver")?;
    let port = listener.local_addr()?.port();
    std::thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            let _ = take_push(stream);
        }
    });
    Ok(port)
}

fn take_push(stream: TcpStream) -> std::io::Result<()> {
    let mut reader = BufReader::new(stream.try_clone()?);
    let mut length = 0;
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line)? == 0 || line == "\r\n" {
            break;
        }
        if let Some((name, value)) = line.split_once(':')
            && name.eq_ignore_ascii_case("content-length")
        {
            length = value.trim().parse().unwrap_or(0);
        }
    }
    let mut body = vec![0; length];
    reader.read_exact(&mut body)?;
    (&stream).write_all(b"HTTP/1.1 204 No Content\r\nConnection: close\r\n\r\n")
}

/// `GET path` of the agent at `port`, asking for `accept`: the status line, or nothing yet.
fn get(port: u16, path: &str, accept: &str) -> Option<String> {
    let mut stream = TcpStream::connect(("127.0.0.1", port)).ok()?;
    stream.set_read_timeout(Some(Duration::from_secs(30))).ok()?;
    let request = format!("GET {path} HTTP/1.1\r\nHost: agent\r\nAccept: {accept}\r\nConnection: close\r\n\r\n");
    stream.write_all(request.as_bytes()).ok()?;
    let mut answer = Vec::new();
    stream.read_to_end(&mut answer).ok()?;
    String::from_utf8_lossy(&answer).lines().next().map(str::to_owned)
}

/// The agent's functions that ran, in the order they first ran, from `trace` (qemu's
/// `-d in_asm` log of `binary`).
fn ran(binary: &Path, trace: &Path) -> anyhow::Result<Vec<(String, String)>> {
    let functions = functions(binary)?;
    let starts: Vec<u64> = functions.iter().map(|f| f.0).collect();
    let log = std::fs::File::open(trace).with_context(|| format!("cannot read {}", trace.display()))?;
    let mut seen = HashSet::new();
    let mut ran = Vec::new();
    for line in BufReader::new(log).lines() {
        let line = line?;
        let Some(hex) = line.strip_prefix("0x").and_then(|l| l.split(':').next()) else { continue };
        let Some(address) = u64::from_str_radix(hex, 16).ok().and_then(|a| a.checked_sub(QEMU_BASE)) else {
            continue;
        };
        let Some(at) = starts.partition_point(|start| *start <= address).checked_sub(1) else { continue };
        let (start, size, symbol, name) = &functions[at];
        if address < start + (*size).max(1) && seen.insert(at) {
            ran.push((symbol.clone(), name.clone()));
        }
    }
    Ok(ran)
}

/// Runs `binary` (the agent's shipped build, linux/amd64) under qemu through what a sidecar
/// does, and writes the functions it ran to `out`.
pub(crate) fn profile(binary: &Path, out: &Path) -> anyhow::Result<()> {
    let dir = std::env::temp_dir().join(format!("watcher-agent-layout-{}", std::process::id()));
    let (logs, config, state) = (dir.join("logs"), dir.join("config"), dir.join("state"));
    for d in [&logs, &config, &state] {
        std::fs::create_dir_all(d).with_context(|| format!("cannot create {}", d.display()))?;
    }
    for f in 0..10 {
        std::fs::write(logs.join(format!("app-{f}.log")), "")?;
    }
    let listen = TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
    let push = receiver()?;
    let glob = format!("{}/*.log", logs.display());
    let url = format!("http://127.0.0.1:{push}/api/v1/write");
    let vars = [
        ("AGENT_FILES", glob.as_str()),
        ("AGENT_RULE_ERROR", r"\bERROR\b"),
        ("AGENT_RULE_TIMEOUT", "(?i)timeout"),
        ("AGENT_RULE_LATENCY", r"took=(?P<ms>\d+)ms trace=(?P<trace>[0-9a-f]+)"),
        ("AGENT_VALUE_LATENCY", "ms"),
        ("AGENT_METRIC_LATENCY", "histogram"),
        ("AGENT_NATIVE_LATENCY", "1.1"),
        ("AGENT_EXEMPLAR_LATENCY", "trace"),
        ("AGENT_REMOTE_WRITE_URL", url.as_str()),
        ("AGENT_REMOTE_WRITE_INTERVAL", "1s"),
    ];
    // As in a pod: the variables in its environment, and in AGENT_CONFIG_DIR to be read again.
    for (name, value) in vars {
        std::fs::write(config.join(name), value)?;
    }
    let trace = dir.join("in_asm.log");
    let listen_at = format!("127.0.0.1:{listen}");
    let mut agent = Command::new("qemu-x86_64-static")
        .args(["-d", "in_asm,nochain", "-D"])
        .arg(&trace)
        .arg(binary)
        .env_clear()
        .envs(vars)
        .env("AGENT_CONFIG_DIR", &config)
        .env("AGENT_STATE_DIR", &state)
        .env("AGENT_LISTEN", &listen_at)
        .env("AGENT_EVENTS", "false")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .context("cannot run qemu-x86_64-static (Debian's qemu-user-static)")?;
    let result = drive(listen, &logs, &config);
    let _ = Command::new("kill").args(["-TERM", &agent.id().to_string()]).status();
    let deadline = Instant::now() + Duration::from_secs(60);
    while agent.try_wait()?.is_none() {
        if Instant::now() > deadline {
            let _ = agent.kill();
            bail!("the agent did not end within 60 s of SIGTERM");
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    result?;
    let ran = ran(binary, &trace)?;
    let mut text = String::from(
        "# The agent's functions in the order they first ran, each by its symbol and its name without\n\
         # hash: made by `cargo xtask agent-layout` (xtask/src/layout.rs), read by `cargo xtask release`.\n",
    );
    for (symbol, name) in &ran {
        text.push_str(&format!("{symbol}\t{name}\n"));
    }
    std::fs::write(out, text).with_context(|| format!("cannot write {}", out.display()))?;
    eprintln!("{} functions ran: written to {}", ran.len(), out.display());
    let _ = std::fs::remove_dir_all(&dir);
    Ok(())
}

/// What the agent is taken through: ready, lines in 4 rounds with scrapes in each format, a
/// configuration read again, pushes.
fn drive(listen: u16, logs: &Path, config: &Path) -> anyhow::Result<()> {
    let deadline = Instant::now() + Duration::from_secs(120);
    while get(listen, "/readyz", "*/*").is_none_or(|status| !status.contains(" 200 ")) {
        if Instant::now() > deadline {
            bail!("the agent was not ready within 120 s under qemu");
        }
        std::thread::sleep(Duration::from_millis(500));
    }
    let accepts = [
        "application/vnd.google.protobuf;proto=io.prometheus.client.MetricFamily;encoding=delimited",
        "application/openmetrics-text;version=1.0.0",
        "text/plain;version=0.0.4",
    ];
    for round in 0..4 {
        for f in 0..10 {
            let path: PathBuf = logs.join(format!("app-{f}.log"));
            let mut file = std::fs::OpenOptions::new().append(true).open(&path)?;
            file.write_all(lines(round * 10 + f, 200).as_bytes())?;
        }
        if round == 2 {
            std::fs::write(config.join("AGENT_RULE_TIMEOUT"), "(?i)timed? ?out")?;
        }
        std::thread::sleep(Duration::from_secs(2));
        for accept in accepts {
            get(listen, "/metrics", accept);
        }
    }
    Ok(())
}

/// Links the agent `built` by `cargo args` again, its code laid out by use (xtask/src/layout.rs):
/// lld's ordering made of agent/layout/hot-functions.txt for this build's symbols.
pub(crate) fn laid_out(
    root: &Path,
    args: &[&str],
    built: &Path,
    mut cargo: std::process::Command,
) -> anyhow::Result<()> {
    let ordering = root.join("target/agent-layout.txt");
    let found = ordering_of(built, &root.join(HOT_FUNCTIONS), &ordering)?;
    eprintln!("laying out watcher-agent's code by use: {found}");
    let mut args: Vec<String> = args.iter().map(|a| (*a).to_owned()).collect();
    args.extend(link_args(&ordering));
    let status = cargo.args(&args).current_dir(root).status().context("cannot run cargo")?;
    if !status.success() {
        bail!("linking watcher-agent laid out by use failed ({status})");
    }
    Ok(())
}

/// `cargo xtask agent`: the agent for this machine's platform, as the release builds it.
pub(crate) fn build_agent() -> anyhow::Result<PathBuf> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).parent().context("the workspace")?.to_owned();
    let image = crate::release::IMAGES.iter().find(|i| i.name == "watcher-agent").context("the agent's image")?;
    let cargo = || {
        let mut cargo = std::process::Command::new(std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into()));
        cargo.current_dir(&root);
        cargo
    };
    let status = cargo().args(image.build).status().context("cannot run cargo")?;
    if !status.success() {
        bail!("building watcher-agent failed ({status})");
    }
    let built = root.join("target").join(image.built);
    // rustc links with lld on linux/amd64 only; elsewhere the code stays as built.
    if cfg!(all(target_arch = "x86_64", target_os = "linux")) {
        laid_out(&root, image.build, &built, cargo())?;
    }
    Ok(built)
}

/// `cargo xtask agent-layout`: agent/layout/hot-functions.txt made again from what `binary`
/// (else the agent built as the release builds it) runs.
pub(crate) fn agent_layout(binary: Option<PathBuf>) -> anyhow::Result<()> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).parent().context("the workspace")?.to_owned();
    let binary = match binary {
        Some(binary) => binary,
        None => build_agent()?,
    };
    profile(&binary, &root.join(HOT_FUNCTIONS))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A listed function is found by its symbol; one whose symbol changed (another hash), by its
    /// name; one gone, said. Each symbol is placed once, in the list's order.
    #[test]
    fn the_list_becomes_this_builds_symbols() {
        let binary = std::env::current_exe().expect("the test binary");
        let functions = functions(&binary).expect("nm reads the test binary");
        let unique = |f: &&(u64, u64, String, String)| {
            f.2.starts_with("_ZN") && f.2 != f.3 && functions.iter().filter(|g| g.3 == f.3).count() == 1
        };
        let mut found = functions.iter().filter(unique);
        let (exact, renamed) = (found.next().expect("a function"), found.next().expect("another"));
        let dir = std::env::temp_dir().join(format!("xtask-layout-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("a directory");
        let hot = dir.join("hot.txt");
        let list = format!(
            "# a comment\n{}\t{}\n_ZN4gone17h0000000000000000E\t{}\n_ZN5never17h0000000000000000E\tnever::was\n{}\t{}\n",
            exact.2, exact.3, renamed.3, exact.2, exact.3
        );
        std::fs::write(&hot, list).expect("the list");
        let out = dir.join("ordering.txt");
        let said = ordering_of(&binary, &hot, &out).expect("an ordering");
        assert_eq!(said, "2 hot functions found by symbol, 1 by name, 1 not found");
        let written = std::fs::read_to_string(&out).expect("the ordering");
        assert_eq!(written, format!("{}\n{}\n", exact.2, renamed.2));
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn the_linker_is_given_the_ordering_and_quiet_on_symbols_it_lacks() {
        let args = link_args(Path::new("/t/order.txt"));
        assert_eq!(
            args,
            ["-C", "link-arg=-Wl,--symbol-ordering-file=/t/order.txt", "-C", "link-arg=-Wl,--no-warn-symbol-ordering"]
        );
    }
}
