//! The answer for people: the pod, its exclusion, one line per Watcher, the images.

use super::Explanation;

impl Explanation {
    /// For people: the pod, its exclusion, one line per Watcher, the images.
    pub(crate) fn text(&self) -> String {
        let mut out = format!("Pod {}/{}\n", self.namespace, self.pod);
        if let Some(excluded) = &self.excluded {
            out.push_str(&format!("× excluded ({:?}): {}\n", excluded.reason, excluded.message));
        } else {
            match self.webhook {
                Some(webhook) => out.push_str(&format!("→ sent to webhook {webhook}\n")),
                None => out.push_str(
                    "× not sent to the webhook: it asks for no Watcher, none selects it and no ImagePolicy \
                     applies to its namespace (the webhook's matchConditions)\n",
                ),
            }
        }
        for note in &self.notes {
            out.push_str(&format!("! {note}\n"));
        }
        if self.watchers.is_empty() {
            out.push_str(&format!("  no Watcher in namespace {}\n", self.namespace));
        }
        for line in &self.watchers {
            let mark = match (line.injected, line.up_to_date) {
                (true, Some(false)) => "‼",
                (true, _) => "√",
                (false, _) if matches!(line.reason, "NotAsked") => "-",
                (false, _) => "×",
            };
            let state = if line.injected { "injected" } else { "not injected" };
            let kind = if line.cluster { " (ClusterWatcher)" } else { "" };
            out.push_str(&format!("{mark} {}{kind}: {state} ({}): {}\n", line.name, line.reason, line.message));
            let below = [&line.sees, &line.pod_security, &line.resources, &line.agent, &line.ending];
            for seen in below.into_iter().flatten() {
                out.push_str(&format!("    {seen}\n"));
            }
        }
        for line in self.cluster_watchers.iter().filter(|l| !l.applies) {
            out.push_str(&format!(
                "- {} (ClusterWatcher): does not apply ({}): {}\n",
                line.name, line.reason, line.message
            ));
        }
        for image in &self.images {
            let policy = if image.policy.is_empty() {
                "no policy matches it now".to_owned()
            } else {
                format!("ImagePolicy {}", image.policy)
            };
            out.push_str(&format!("  image of {}: {} → {} ({policy})\n", image.container, image.from, image.to));
        }
        out
    }
}
