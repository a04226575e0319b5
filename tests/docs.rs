//! The documentation holds together: every relative link of README.md and docs/ names a file
//! that exists and, with an anchor, a heading of that file; every alert's `runbook_url` is a
//! section of docs/runbooks.md; the crates depend one way, and the house rules hold (`house`).

use std::path::{Path, PathBuf};

const ROOT: &str = env!("CARGO_MANIFEST_DIR");

/// The house rules over the sources (in this binary: one link less).
#[path = "docs/house.rs"]
mod house;

/// The anchor a heading gets (GitHub's: lower case, punctuation dropped, spaces to `-`).
fn anchor(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter(|c| c.is_alphanumeric() || matches!(c, ' ' | '-' | '_'))
        .map(|c| if c == ' ' { '-' } else { c })
        .collect()
}

/// The anchors of a Markdown file's headings (outside code blocks).
fn anchors(text: &str) -> Vec<String> {
    let mut code = false;
    let mut out = Vec::new();
    for line in text.lines() {
        if line.starts_with("```") {
            code = !code;
        } else if !code && line.starts_with('#') {
            out.push(anchor(line.trim_start_matches('#')));
        }
    }
    out
}

/// The `](target)` links of a Markdown text, outside code blocks and inline code.
fn links(text: &str) -> Vec<String> {
    let mut code = false;
    let mut out = Vec::new();
    for line in text.lines() {
        if line.starts_with("```") {
            code = !code;
            continue;
        }
        if code {
            continue;
        }
        // Inline code may hold `](`: drop it.
        let prose: String = line.split('`').step_by(2).collect::<Vec<_>>().join(" ");
        for part in prose.split("](").skip(1) {
            if let Some(end) = part.find(')') {
                out.push(part[..end].to_owned());
            }
        }
    }
    out
}

fn pages() -> Vec<PathBuf> {
    let mut pages = vec![Path::new(ROOT).join("README.md")];
    let mut docs: Vec<PathBuf> =
        std::fs::read_dir(Path::new(ROOT).join("docs")).expect("docs/").flatten().map(|e| e.path()).collect();
    docs.sort();
    pages.extend(docs);
    pages
}

/// What is wrong with the relative links of `page`.
fn broken(page: &Path) -> Vec<String> {
    let text = std::fs::read_to_string(page).expect("page");
    let dir = page.parent().expect("a folder");
    let mut out = Vec::new();
    for link in links(&text) {
        if link.starts_with("http://") || link.starts_with("https://") || link.starts_with("mailto:") {
            continue;
        }
        let (file, fragment) = link.split_once('#').map_or((link.as_str(), None), |(f, a)| (f, Some(a)));
        let target = if file.is_empty() { page.to_path_buf() } else { dir.join(file) };
        if !target.exists() {
            out.push(format!("{}: {link}: no such file", page.display()));
            continue;
        }
        if let Some(fragment) = fragment {
            let heading = std::fs::read_to_string(&target).map(|t| anchors(&t).contains(&fragment.to_owned()));
            if !heading.unwrap_or(false) {
                out.push(format!("{}: {link}: no such heading", page.display()));
            }
        }
    }
    out
}

#[test]
fn every_relative_link_resolves() {
    let mut problems = Vec::new();
    for page in pages() {
        problems.extend(broken(&page));
    }
    assert_eq!(problems, Vec::<String>::new());
}

/// The check finds a missing file and a missing heading, and passes a good link.
#[test]
fn the_link_check_can_fail() {
    let dir = std::env::temp_dir().join(format!("watcher-docs-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    std::fs::write(dir.join("other.md"), "# Other page\n\n## A `code` heading\n").expect("written");
    let page = dir.join("page.md");
    std::fs::write(
        &page,
        "# Page\n[ok](other.md#a-code-heading) [self](#page) [gone](missing.md) [bad](other.md#nope)\n\
         ```\n[not a link](nowhere.md)\n```\n`[inline](nowhere.md)`\n",
    )
    .expect("written");
    let found = broken(&page);
    let _ = std::fs::remove_dir_all(&dir);
    assert_eq!(found.len(), 2, "{found:?}");
    assert!(found[0].ends_with("missing.md: no such file") && found[1].ends_with("other.md#nope: no such heading"));
}

/// Each alert's runbook is a section of docs/runbooks.md, by its anchor.
#[test]
fn every_runbook_url_is_a_section_of_the_runbooks() {
    let runbooks = std::fs::read_to_string(Path::new(ROOT).join("docs/runbooks.md")).expect("runbooks");
    let sections = anchors(&runbooks);
    let rules =
        std::fs::read_to_string(Path::new(ROOT).join("charts/watcher-operator/files/watcher-operator.rules.yaml"))
            .expect("rules");
    let urls: Vec<&str> = rules.lines().filter_map(|l| l.trim().strip_prefix("runbook_url: ")).collect();
    assert!(urls.len() >= 6);
    for url in urls {
        let (page, anchor) = url.split_once('#').expect("an anchor");
        assert_eq!(page, "https://github.com/watcher-dev/watcher-operator/blob/main/docs/runbooks.md");
        assert!(sections.iter().any(|a| a == anchor), "no section #{anchor} in docs/runbooks.md");
    }
}

/// The `watcher-*` crates a crate's manifest names in `section` (`dependencies`,
/// `dev-dependencies`).
fn watcher_crates(dir: &str, section: &str) -> Vec<String> {
    let manifest = std::fs::read_to_string(Path::new(ROOT).join(dir).join("Cargo.toml")).expect("Cargo.toml");
    let mut inside = false;
    let mut out = Vec::new();
    for line in manifest.lines() {
        if line.starts_with('[') {
            inside = line == format!("[{section}]");
        } else if inside && line.starts_with("watcher-") {
            out.extend(line.split(['.', ' ', '=']).next().map(str::to_owned));
        }
    }
    out
}

/// The crates depend one way (docs/development.md's layout): what an admission decides knows no
/// server, cache or controller; the caches know no webhook or controller; nothing in `webhook/`,
/// its benchmark and tests included, knows the controllers. Every crate is in the layout.
#[test]
fn the_crates_depend_one_way_and_the_layout_names_them_all() {
    let never = [
        ("admission", &["watcher-webhook", "watcher-cache", "watcher-controller", "watcher-cli"][..]),
        ("cache", &["watcher-webhook", "watcher-controller", "watcher-cli"][..]),
        ("webhook", &["watcher-controller", "watcher-cli"][..]),
        ("controller", &["watcher-webhook", "watcher-cli"][..]),
    ];
    for (dir, forbidden) in never {
        for section in ["dependencies", "dev-dependencies"] {
            let named = watcher_crates(dir, section);
            assert!(!named.is_empty() || section == "dev-dependencies", "{dir}: no watcher crate read");
            for crate_name in forbidden {
                assert!(!named.iter().any(|n| n == crate_name), "{dir}/Cargo.toml [{section}] names {crate_name}");
            }
        }
    }
    assert!(watcher_crates("webhook", "dev-dependencies").contains(&"watcher-cache".to_owned()));
    let development = std::fs::read_to_string(Path::new(ROOT).join("docs/development.md")).expect("development.md");
    let root = std::fs::read_to_string(Path::new(ROOT).join("Cargo.toml")).expect("Cargo.toml");
    let members = root.lines().find(|l| l.starts_with("members")).expect("members");
    for member in members.split('"').skip(1).step_by(2) {
        assert!(development.contains(&format!("`{member}/`")), "docs/development.md's layout leaves out {member}/");
    }
}
