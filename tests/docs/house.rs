//! The house rules a reader relies on, checked over the sources: every `watcher.dev/` key is
//! spelled in `api` alone (annotations, labels, condition names), the controllers share one
//! `Context` (no wrapper around it: `ctx.ctx` nowhere) and one `error_policy`; every source of
//! the agent reaches its counting through one pipeline.

use std::path::{Path, PathBuf};

use super::ROOT;

/// The shipped Rust sources of the workspace (tests, benches, fuzz targets and fixtures aside),
/// each with its text up to its `#[cfg(test)]` module.
fn shipped_sources() -> Vec<(PathBuf, String)> {
    fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
        let Ok(entries) = std::fs::read_dir(dir) else { return };
        for entry in entries.flatten() {
            let path = entry.path();
            let name = entry.file_name().to_string_lossy().into_owned();
            if path.is_dir() {
                if !["target", "tests", "benches", "fuzz", "fixtures", ".git"].contains(&name.as_str()) {
                    walk(&path, out);
                }
            } else if name.ends_with(".rs") && name != "tests.rs" && name != "fixtures.rs" {
                out.push(path);
            }
        }
    }
    let mut paths = Vec::new();
    walk(Path::new(ROOT), &mut paths);
    paths.sort();
    paths
        .into_iter()
        .map(|path| {
            let text = std::fs::read_to_string(&path).expect("a source file");
            let shipped = text.find("#[cfg(test)]\nmod tests").map_or(text.as_str(), |at| &text[..at]).to_owned();
            (path, shipped)
        })
        .collect()
}

/// The string literals of Rust source `text` (plain, byte and raw), each with its line; comments
/// and char literals skipped.
fn string_literals(text: &str) -> Vec<(usize, String)> {
    let bytes = text.as_bytes();
    let (mut at, mut line, mut out) = (0, 1, Vec::new());
    let ident = |i: usize| i > 0 && (bytes[i - 1].is_ascii_alphanumeric() || bytes[i - 1] == b'_');
    while at < bytes.len() {
        let rest = &text[at..];
        if rest.starts_with("//") {
            at += rest.find('\n').unwrap_or(rest.len());
        } else if rest.starts_with("/*") {
            let end = rest.find("*/").map_or(rest.len(), |e| e + 2);
            line += rest[..end].matches('\n').count();
            at += end;
        } else if let Some(raw) = rest.strip_prefix("br").or_else(|| rest.strip_prefix('r')).filter(|_| !ident(at)) {
            let hashes = raw.len() - raw.trim_start_matches('#').len();
            if raw[hashes..].starts_with('"') {
                let body = &raw[hashes + 1..];
                let close = format!("\"{}", "#".repeat(hashes));
                let end = body.find(&close).unwrap_or(body.len());
                out.push((line, body[..end].to_owned()));
                let skipped = rest.len() - body.len() + end + close.len();
                line += rest[..skipped.min(rest.len())].matches('\n').count();
                at += skipped;
            } else {
                at += 1;
            }
        } else if rest.starts_with('"') {
            let mut end = 1;
            while end < rest.len() && rest.as_bytes()[end] != b'"' {
                end += if rest.as_bytes()[end] == b'\\' { 2 } else { 1 };
            }
            out.push((line, rest[1..end.min(rest.len())].to_owned()));
            line += rest[..end.min(rest.len())].matches('\n').count();
            at += end + 1;
        } else if rest.starts_with('\'') {
            // A char literal ('"', '\'', '\u{..}'); a lifetime has no closing quote nearby.
            let mut chars = rest.char_indices().skip(1);
            let close = match chars.next() {
                Some((_, '\\')) => rest.get(3..).and_then(|r| r.find('\'')).map(|e| e + 3),
                Some((i, c)) => Some(i + c.len_utf8()),
                None => None,
            };
            match close.filter(|&c| rest.get(c..).is_some_and(|r| r.starts_with('\''))) {
                Some(c) => at += c + 1,
                None => at += 1,
            }
        } else {
            line += usize::from(bytes[at] == b'\n');
            at += rest.chars().next().map_or(1, char::len_utf8);
        }
    }
    out
}

#[test]
fn the_literal_reader_finds_strings_and_skips_comments_and_chars() {
    let text = "// \"watcher.dev/in-a-comment\"\nlet a = '\"'; let b = \"x\\\"y\";\n/* \"no\" */ r#\"raw \"q\"\"#; fn f<'a>() {}\nlet c = ['\\'', 'µ', '\\u{1F600}']; \"end\"";
    let found: Vec<(usize, String)> = string_literals(text);
    assert_eq!(found, [(2, "x\\\"y".to_owned()), (3, "raw \"q\"".to_owned()), (4, "end".to_owned())]);
}

/// Every key of the project's group is spelled in `api` (its `annotation` module for what is
/// written on pods): a crate writes and reads them through those names. watcher-agent does not
/// link `api` (its image stays small); its one such literal is the `reportingController` of its
/// Events, which names the agent, not a key of a pod.
#[test]
fn no_watcher_dev_literal_outside_api() {
    let group = concat!("watcher", ".dev/");
    let mut found = Vec::new();
    for (path, text) in shipped_sources() {
        let relative = path.strip_prefix(ROOT).expect("under the root").to_string_lossy().into_owned();
        if relative.starts_with("api/") {
            continue;
        }
        for (line, literal) in string_literals(&text) {
            let agent_reporter =
                relative == "agent/src/sinks/events.rs" && literal == concat!("watcher", ".dev/watcher-agent");
            if literal.contains(group) && !agent_reporter {
                found.push(format!("{relative}:{line}: {literal:?}"));
            }
        }
    }
    assert!(found.is_empty(), "spell these through watcher_api's names:\n{}", found.join("\n"));
}

/// The controllers take the shared `Context` itself (with their own fields beside it, never a
/// wrapper around it), and fail alike: one `error_policy`.
#[test]
fn one_context_and_one_error_policy() {
    let sources = shipped_sources();
    let controller = |path: &Path| path.starts_with(Path::new(ROOT).join("controller"));
    let wrapped: Vec<String> = sources
        .iter()
        .filter(|(path, text)| controller(path) && text.contains("ctx.ctx"))
        .map(|(path, _)| path.display().to_string())
        .collect();
    assert!(wrapped.is_empty(), "ctx.ctx in {wrapped:?}");
    let policies: Vec<String> = sources
        .iter()
        .filter(|(_, text)| text.contains("fn error_policy"))
        .map(|(path, _)| path.display().to_string())
        .collect();
    assert_eq!(policies.len(), 1, "error_policy in {policies:?}");
}

/// The agent's sources (the files, the log stream) hand their text to one pipeline: the only
/// `Sink` the agent ships is `Pipeline`, the one way to its counting (`Record` in, through
/// `Sink::take`), and no other module names the counting. A second way in (a source that counts
/// lines itself, an adapter of its own) fails here.
#[test]
fn the_agent_counts_through_one_pipeline() {
    let agent = Path::new(ROOT).join("agent").join("src");
    let pipeline = |path: &Path| path == agent.join("pipeline.rs") || path.starts_with(agent.join("pipeline"));
    let sources: Vec<(PathBuf, String)> =
        shipped_sources().into_iter().filter(|(path, _)| path.starts_with(&agent)).collect();
    assert!(sources.iter().any(|(path, _)| path.ends_with("tail/stream.rs")), "the agent's sources read");
    let sinks: Vec<String> = sources
        .iter()
        .filter(|(_, text)| text.contains("impl Sink for") || text.contains("impl crate::pipeline::Sink for"))
        .map(|(path, _)| path.display().to_string())
        .collect();
    assert_eq!(sinks, [agent.join("pipeline.rs").display().to_string()], "the agent's one Sink is its Pipeline");
    let counting: Vec<String> = sources
        .iter()
        .filter(|(path, text)| !pipeline(path) && text.contains("Counting"))
        .map(|(path, _)| path.display().to_string())
        .collect();
    assert!(counting.is_empty(), "counting reached outside the pipeline, in {counting:?}");
    for source in ["tail/files/disk.rs", "tail/stream.rs"] {
        let (_, text) = sources.iter().find(|(path, _)| path.ends_with(source)).expect(source);
        assert!(text.contains(".take(Record {"), "{source} hands its text to the pipeline as a Record");
    }
}

/// The agent's modules form a tree: no module imports one that imports it back (at the level of
/// the crate's modules, its stages: `tail`, `record`, `pipeline`, `parse`, `matching`,
/// `metrics`, `sinks`, `config`, `reload`, `run`). The values that cross stages live in `record`,
/// which imports none of them.
#[test]
fn the_agents_modules_form_a_tree() {
    let agent = Path::new(ROOT).join("agent").join("src");
    let sources: Vec<(PathBuf, String)> =
        shipped_sources().into_iter().filter(|(path, _)| path.starts_with(&agent)).collect();
    let module_of = |path: &Path| {
        let relative = path.strip_prefix(&agent).expect("under agent/src");
        let first = relative.components().next().expect("a file").as_os_str().to_string_lossy().into_owned();
        match first.trim_end_matches(".rs") {
            "lib" | "main" => "crate".to_owned(),
            module => module.to_owned(),
        }
    };
    let modules: Vec<String> = sources.iter().map(|(path, _)| module_of(path)).collect();
    // Edges: `crate::<module>` in code (comments left out), to a module of the crate's.
    let mut edges: std::collections::BTreeMap<String, std::collections::BTreeMap<String, String>> =
        std::collections::BTreeMap::new();
    for ((path, text), from) in sources.iter().zip(&modules) {
        for line in text.lines().map(|l| l.split("//").next().unwrap_or_default()) {
            for (at, _) in line.match_indices("crate::") {
                let rest = &line[at + "crate::".len()..];
                let to: String = rest.chars().take_while(|c| c.is_ascii_alphanumeric() || *c == '_').collect();
                let to = if modules.contains(&to) { to } else { continue };
                if to != *from {
                    edges.entry(from.clone()).or_default().entry(to).or_insert_with(|| path.display().to_string());
                }
            }
        }
    }
    assert!(edges.get("tail").is_some_and(|e| e.contains_key("record")), "the edges are read: {edges:?}");
    assert!(!edges.contains_key("record"), "record imports no module of the agent: {:?}", edges.get("record"));
    // A cycle: a path from a module back to itself.
    let mut cycles = Vec::new();
    for start in edges.keys() {
        let mut stack = vec![(start.clone(), vec![start.clone()])];
        let mut seen = std::collections::BTreeSet::new();
        while let Some((at, path)) = stack.pop() {
            for (to, file) in edges.get(&at).into_iter().flatten() {
                if to == start {
                    cycles.push(format!("{} -> {start} (in {file})", path.join(" -> ")));
                } else if seen.insert(to.clone()) {
                    stack.push((to.clone(), [path.clone(), vec![to.clone()]].concat()));
                }
            }
        }
    }
    assert!(cycles.is_empty(), "modules that import one another:\n{}", cycles.join("\n"));
}
