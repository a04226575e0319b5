//! The result of `watcher-operator check`: one line per check, grouped, with a hint for what
//! failed; as text for people, as JSON for machines.

use serde::Serialize;

/// How one check came out.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum Status {
    Passed,
    Warning,
    Failed,
}

/// One check: `{"group", "name", "status", "message", "hint"}`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub(crate) struct Check {
    pub(crate) group: &'static str,
    pub(crate) name: String,
    pub(crate) status: Status,
    pub(crate) message: String,
    pub(crate) hint: Option<String>,
}

/// Every check of one run, in order.
#[derive(Debug, Default, Serialize)]
pub(crate) struct Report {
    pub(crate) checks: Vec<Check>,
}

/// The title of a group in the text output.
fn title(group: &str) -> &str {
    match group {
        "cluster" => "Cluster",
        "permissions" => "Permissions to install",
        "crds" => "CustomResourceDefinitions",
        "registration" => "Certificates and registration",
        "operator" => "Operator",
        "admission" => "Admission",
        other => other,
    }
}

impl Report {
    pub(crate) fn push(
        &mut self,
        group: &'static str,
        name: impl Into<String>,
        status: Status,
        message: impl Into<String>,
        hint: Option<String>,
    ) {
        self.checks.push(Check { group, name: name.into(), status, message: message.into(), hint });
    }

    pub(crate) fn pass(&mut self, group: &'static str, name: impl Into<String>, message: impl Into<String>) {
        self.push(group, name, Status::Passed, message, None);
    }

    pub(crate) fn warn(
        &mut self,
        group: &'static str,
        name: impl Into<String>,
        message: impl Into<String>,
        hint: &str,
    ) {
        self.push(group, name, Status::Warning, message, Some(hint.to_owned()));
    }

    pub(crate) fn fail(
        &mut self,
        group: &'static str,
        name: impl Into<String>,
        message: impl Into<String>,
        hint: &str,
    ) {
        self.push(group, name, Status::Failed, message, Some(hint.to_owned()));
    }

    /// Whether no check failed (warnings allowed).
    pub(crate) fn ok(&self) -> bool {
        self.checks.iter().all(|c| c.status != Status::Failed)
    }

    /// The check named `name`, if it ran.
    #[cfg(test)]
    pub(crate) fn get(&self, name: &str) -> Option<&Check> {
        self.checks.iter().find(|c| c.name == name)
    }

    /// `{"ok": bool, "checks": [...]}`.
    pub(crate) fn json(&self) -> serde_json::Value {
        serde_json::json!({"ok": self.ok(), "checks": self.checks})
    }

    /// Grouped lines, `√` passed, `‼` warning, `×` failed, each hint under its check, and a
    /// closing line.
    pub(crate) fn text(&self) -> String {
        let mut out = String::new();
        let mut group = "";
        for check in &self.checks {
            if check.group != group {
                if !group.is_empty() {
                    out.push('\n');
                }
                group = check.group;
                out.push_str(title(group));
                out.push('\n');
                out.push_str(&"-".repeat(title(group).chars().count()));
                out.push('\n');
            }
            let mark = match check.status {
                Status::Passed => "√",
                Status::Warning => "‼",
                Status::Failed => "×",
            };
            out.push_str(&format!("{mark} {}: {}\n", check.name, check.message));
            if let Some(hint) = check.hint.as_deref().filter(|_| check.status != Status::Passed) {
                out.push_str(&format!("    hint: {hint}\n"));
            }
        }
        let count = |status| self.checks.iter().filter(|c| c.status == status).count();
        let (failed, warned) = (count(Status::Failed), count(Status::Warning));
        let plural = |n: usize, word: &str| format!("{n} {word}{}", if n == 1 { "" } else { "s" });
        out.push('\n');
        out.push_str(&match (failed, warned) {
            (0, 0) => "Status: √ every check passed\n".to_owned(),
            (0, w) => format!("Status: √ no check failed ({})\n", plural(w, "warning")),
            (f, 0) => format!("Status: × {} failed: see the hints above\n", plural(f, "check")),
            (f, w) => {
                format!("Status: × {} failed, {}: see the hints above\n", plural(f, "check"), plural(w, "warning"))
            }
        });
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_groups_checks_and_shows_hints_of_failures_only() {
        let mut report = Report::default();
        report.pass("cluster", "API server", "Kubernetes v1.36.2");
        report.warn("cluster", "native sidecars", "not supported", "upgrade");
        report.fail("crds", "watchers.watcher.dev", "not found", "apply them");
        assert_eq!(
            report.text(),
            "Cluster\n-------\n√ API server: Kubernetes v1.36.2\n‼ native sidecars: not supported\n    hint: upgrade\n\n\
             CustomResourceDefinitions\n-------------------------\n× watchers.watcher.dev: not found\n    hint: apply them\n\n\
             Status: × 1 check failed, 1 warning: see the hints above\n"
        );
        assert!(!report.ok());
        let json = report.json();
        assert_eq!(json["ok"], false);
        assert_eq!(
            json["checks"][2],
            serde_json::json!({"group": "crds", "name": "watchers.watcher.dev", "status": "failed",
                               "message": "not found", "hint": "apply them"})
        );
        assert_eq!(json["checks"][0]["hint"], serde_json::Value::Null);
    }
}
