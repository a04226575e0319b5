//! The chart as a release ships it: `charts/watcher-operator` with `version` and `appVersion`
//! the release's, and its default images the release's repositories (their tag is the
//! appVersion), packed by `helm package` from files stamped with the commit's time (the same
//! tree, the same archive).

use std::path::{Path, PathBuf};

use anyhow::{Context, bail};

/// The chart in the tree.
pub(crate) const SOURCE: &str = "charts/watcher-operator";

/// The values lines that name the release's images, and the image each names.
const IMAGE_LINES: [(&str, &str); 3] = [
    ("  repository: watcher-operator\n", "watcher-operator"),
    ("    repository: watcher-agent\n", "watcher-agent"),
    ("    repository: watcher-supervise\n", "watcher-supervise"),
];

/// `Chart.yaml` with `version` and `appVersion` set to `version`.
pub(crate) fn chart_yaml(text: &str, version: &str) -> anyhow::Result<String> {
    let mut found = (false, false);
    let lines: Vec<String> = text
        .lines()
        .map(|line| {
            if line.starts_with("version:") {
                found.0 = true;
                format!("version: {version}")
            } else if line.starts_with("appVersion:") {
                found.1 = true;
                format!("appVersion: \"{version}\"")
            } else {
                line.to_owned()
            }
        })
        .collect();
    if found != (true, true) {
        bail!("{SOURCE}/Chart.yaml has no top-level version or appVersion line");
    }
    Ok(lines.join("\n") + "\n")
}

/// `values.yaml` with the images' repositories under `repository(name)`.
pub(crate) fn values_yaml(text: &str, repository: impl Fn(&str) -> String) -> anyhow::Result<String> {
    let mut values = text.to_owned();
    for (line, image) in IMAGE_LINES {
        if values.matches(line).count() != 1 {
            bail!("{SOURCE}/values.yaml: expected the line {:?} once (the release rewrites it)", line.trim());
        }
        let indent = &line[..line.len() - line.trim_start().len()];
        values = values.replacen(line, &format!("{indent}repository: {}\n", repository(image)), 1);
    }
    Ok(values)
}

/// The chart of the release in `work`, packed into `out`: the archive's path.
pub(crate) fn package(
    root: &Path,
    work: &Path,
    out: &Path,
    version: &str,
    mtime: std::time::SystemTime,
    repository: impl Fn(&str) -> String,
) -> anyhow::Result<PathBuf> {
    let source = root.join(SOURCE);
    let chart = work.join("watcher-operator");
    if chart.exists() {
        std::fs::remove_dir_all(&chart)?;
    }
    copy_tree(&source, &chart)?;
    let read = |name: &str| std::fs::read_to_string(chart.join(name)).with_context(|| format!("{SOURCE}/{name}"));
    std::fs::write(chart.join("Chart.yaml"), chart_yaml(&read("Chart.yaml")?, version)?)?;
    std::fs::write(chart.join("values.yaml"), values_yaml(&read("values.yaml")?, repository)?)?;
    stamp(&chart, mtime)?;
    std::fs::create_dir_all(out)?;
    crate::cmd::run("helm", &["package".as_ref(), chart.as_os_str(), "-d".as_ref(), out.as_os_str()])?;
    let archive = out.join(format!("watcher-operator-{version}.tgz"));
    if !archive.is_file() {
        bail!("helm package wrote no {}", archive.display());
    }
    Ok(archive)
}

fn copy_tree(from: &Path, to: &Path) -> anyhow::Result<()> {
    std::fs::create_dir_all(to)?;
    for entry in std::fs::read_dir(from).with_context(|| format!("cannot read {}", from.display()))? {
        let entry = entry?;
        let target = to.join(entry.file_name());
        if entry.file_type()?.is_dir() {
            copy_tree(&entry.path(), &target)?;
        } else {
            std::fs::copy(entry.path(), &target)?;
        }
    }
    Ok(())
}

/// Every file under `dir` stamped `mtime` (helm's archive records files' times).
fn stamp(dir: &Path, mtime: std::time::SystemTime) -> anyhow::Result<()> {
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        if entry.file_type()?.is_dir() {
            stamp(&entry.path(), mtime)?;
        } else {
            std::fs::File::options().write(true).open(entry.path())?.set_modified(mtime)?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tree_file(name: &str) -> String {
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("..").join(SOURCE).join(name))
            .expect("chart file")
    }

    #[test]
    fn the_release_sets_the_charts_versions() {
        let yaml = chart_yaml(&tree_file("Chart.yaml"), "0.3.0-rc.1").expect("rewritten");
        assert!(yaml.contains("\nversion: 0.3.0-rc.1\n") && yaml.contains("\nappVersion: \"0.3.0-rc.1\"\n"), "{yaml}");
        assert!(chart_yaml("name: x\n", "1.0.0").is_err());
    }

    #[test]
    fn the_releases_images_are_the_charts_defaults() {
        let values = values_yaml(&tree_file("values.yaml"), |name| format!("r.example/w/{name}")).expect("rewritten");
        for name in ["watcher-operator", "watcher-agent", "watcher-supervise"] {
            assert!(values.contains(&format!("repository: r.example/w/{name}\n")), "{name}");
        }
        // A chart whose values no longer carry the lines is caught, not released with the
        // tree's image names.
        assert!(values_yaml("image: {}\n", |n| n.to_owned()).is_err());
    }
}
