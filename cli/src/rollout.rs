//! `watcher-operator rollout status|pause|resume|history|undo WATCHER`: a Watcher's sidecar
//! rollout, as `kubectl rollout` shows and steers a Deployment's. The progress is the
//! `SidecarsUpdated` condition the pod reconciler writes; the history, the Watcher's
//! ControllerRevisions.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use k8s_openapi::api::apps::v1::ControllerRevision;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, ListParams, Patch, PatchParams};
use kube::{Client, ResourceExt};
use serde_json::json;
use watcher_api::{UpdatePolicyType, Watcher, injected_watchers};
use watcher_controller::pods::revisions::{WATCHER_LABEL, injection_of};

/// How `rollout status` ended.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Outcome {
    /// Every pod outside the partition runs the current spec.
    Done(String),
    /// Paused, stuck, or nothing to roll out: the reason.
    Failed(String),
}

/// What `rollout status` makes of a Watcher as it stands: `None` while the rollout goes on
/// (or the pod reconciler has not seen the Watcher's generation yet), with the line to print.
pub(crate) fn judge(watcher: &Watcher) -> (Option<Outcome>, String) {
    let name = watcher.name_any();
    if watcher.spec.update_policy.type_ == UpdatePolicyType::Report {
        let why = format!(
            "watcher {name} has updatePolicy Report: its pods are only counted; set updatePolicy.type to InPlace or Recreate to roll them out"
        );
        return (Some(Outcome::Failed(why.clone())), why);
    }
    let generation = watcher.metadata.generation;
    let condition = watcher
        .status
        .as_ref()
        .and_then(|s| s.conditions.iter().find(|c| c.type_ == "SidecarsUpdated"))
        .filter(|c| c.observed_generation == generation);
    let Some(condition) = condition else {
        return (None, format!("Waiting for the pod reconciler to observe watcher {name}..."));
    };
    let message = &condition.message;
    match condition.reason.as_str() {
        "Complete" => {
            (Some(Outcome::Done(format!("watcher {name} successfully rolled out: {message}"))), String::new())
        }
        "Partitioned" => {
            (Some(Outcome::Done(format!("partitioned roll out complete for watcher {name}: {message}"))), String::new())
        }
        "Paused" => {
            let why = format!(
                "the rollout of watcher {name} is paused ({message}); resume it: kubectl watcher rollout resume {name}"
            );
            (Some(Outcome::Failed(why)), String::new())
        }
        "Stuck" => (Some(Outcome::Failed(format!("the rollout of watcher {name} is stuck: {message}"))), String::new()),
        _ => (None, format!("Waiting for watcher {name} rollout to finish: {message}...")),
    }
}

/// `rollout status`: prints progress lines until the rollout ends or `timeout` passes.
pub(crate) async fn status(
    client: &Client,
    namespace: &str,
    name: &str,
    timeout: Option<Duration>,
) -> anyhow::Result<bool> {
    let api = Api::<Watcher>::namespaced(client.clone(), namespace);
    let started = Instant::now();
    let mut last = String::new();
    loop {
        let watcher =
            api.get(name).await.with_context(|| format!("cannot read watcher {name} in namespace {namespace}"))?;
        let (outcome, line) = judge(&watcher);
        match outcome {
            Some(Outcome::Done(message)) => {
                println!("{message}");
                return Ok(true);
            }
            Some(Outcome::Failed(message)) => {
                eprintln!("error: {message}");
                return Ok(false);
            }
            None => {
                if line != last {
                    println!("{line}");
                    last = line;
                }
            }
        }
        if timeout.is_some_and(|t| started.elapsed() >= t) {
            let progress = progress(&watcher).unwrap_or("no progress reported yet");
            eprintln!("error: timed out waiting for the rollout of watcher {name}: {progress}");
            return Ok(false);
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

/// The Watcher's `SidecarsUpdated` message, for the timeout's line.
fn progress(watcher: &Watcher) -> Option<&str> {
    let conditions = &watcher.status.as_ref()?.conditions;
    conditions.iter().find(|c| c.type_ == "SidecarsUpdated").map(|c| c.message.as_str())
}

/// `rollout pause` and `rollout resume`.
pub(crate) async fn set_paused(client: &Client, namespace: &str, name: &str, paused: bool) -> anyhow::Result<()> {
    let api = Api::<Watcher>::namespaced(client.clone(), namespace);
    let patch = json!({"spec": {"updatePolicy": {"paused": paused}}});
    api.patch(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .with_context(|| format!("cannot update watcher {name} in namespace {namespace}"))?;
    println!("watcher.watcher.dev/{name} {}", if paused { "paused" } else { "resumed" });
    Ok(())
}

/// One line of `rollout history`.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct HistoryLine {
    pub(crate) revision: i64,
    pub(crate) hash: String,
    pub(crate) image: String,
    pub(crate) pods: usize,
    pub(crate) current: bool,
}

/// The history of `watcher` from its revisions and the pods of its namespace, oldest first.
pub(crate) fn history(watcher: &Watcher, revisions: &[ControllerRevision], pods: &[Pod]) -> Vec<HistoryLine> {
    let name = watcher.name_any();
    let current = watcher.spec.spec_hash();
    let mut carried: BTreeMap<String, usize> = BTreeMap::new();
    for pod in pods.iter().filter(|p| p.metadata.deletion_timestamp.is_none()) {
        for (watcher, hash) in injected_watchers(pod.annotations()) {
            if watcher == name {
                *carried.entry(hash.to_owned()).or_default() += 1;
            }
        }
    }
    let prefix = format!("{name}-");
    let mut lines: Vec<HistoryLine> = revisions
        .iter()
        .filter(|r| r.labels().get(WATCHER_LABEL) == Some(&name))
        .map(|r| {
            let hash = r.name_any().strip_prefix(&prefix).unwrap_or_default().to_owned();
            let image = injection_of(r).and_then(|s| s.container.image).unwrap_or_else(|| "?".to_owned());
            HistoryLine {
                revision: r.revision,
                pods: carried.get(&hash).copied().unwrap_or(0),
                current: hash == current,
                hash,
                image,
            }
        })
        .collect();
    lines.sort_by_key(|l| l.revision);
    lines
}

fn history_text(name: &str, lines: &[HistoryLine]) -> String {
    let mut out = format!("watcher.watcher.dev/{name}\nREVISION  SPEC HASH  PODS  IMAGE\n");
    for line in lines {
        let current = if line.current { "  (current)" } else { "" };
        out.push_str(&format!("{:<8}  {:<9}  {:<4}  {}{current}\n", line.revision, line.hash, line.pods, line.image));
    }
    out
}

async fn revisions_and_pods(
    client: &Client,
    namespace: &str,
    name: &str,
) -> anyhow::Result<(Watcher, Vec<ControllerRevision>, Vec<Pod>)> {
    let watcher = Api::<Watcher>::namespaced(client.clone(), namespace)
        .get(name)
        .await
        .with_context(|| format!("cannot read watcher {name} in namespace {namespace}"))?;
    let params = ListParams::default().labels(&format!("{WATCHER_LABEL}={name}"));
    let revisions = Api::<ControllerRevision>::namespaced(client.clone(), namespace)
        .list(&params)
        .await
        .with_context(|| format!("cannot list the revisions of watcher {name}"))?
        .items;
    let pods = Api::<Pod>::namespaced(client.clone(), namespace)
        .list_metadata(&ListParams::default())
        .await
        .with_context(|| format!("cannot list the pods of namespace {namespace}"))?
        .items
        .into_iter()
        .map(|p| Pod { metadata: p.metadata, ..Pod::default() })
        .collect();
    Ok((watcher, revisions, pods))
}

/// `rollout history`.
pub(crate) async fn print_history(client: &Client, namespace: &str, name: &str) -> anyhow::Result<()> {
    let (watcher, revisions, pods) = revisions_and_pods(client, namespace, name).await?;
    print!("{}", history_text(name, &history(&watcher, &revisions, &pods)));
    Ok(())
}

/// Which revision `rollout undo` writes back: `to` by number, else the newest before the
/// current one.
pub(crate) fn undo_target(lines: &[HistoryLine], to: Option<i64>) -> anyhow::Result<&HistoryLine> {
    if let Some(number) = to {
        return lines.iter().find(|l| l.revision == number).with_context(|| format!("no revision {number}"));
    }
    let current = lines.iter().find(|l| l.current).map(|l| l.revision).unwrap_or(i64::MAX);
    match lines.iter().rev().find(|l| l.revision < current && !l.current) {
        Some(line) => Ok(line),
        None => bail!("no earlier revision to go back to"),
    }
}

/// `rollout undo`: writes the chosen revision's container back into the Watcher.
pub(crate) async fn undo(client: &Client, namespace: &str, name: &str, to: Option<i64>) -> anyhow::Result<()> {
    let (watcher, revisions, pods) = revisions_and_pods(client, namespace, name).await?;
    let lines = history(&watcher, &revisions, &pods);
    let target = undo_target(&lines, to)?;
    let revision = revisions
        .iter()
        .find(|r| r.revision == target.revision)
        .and_then(injection_of)
        .with_context(|| format!("revision {} cannot be read", target.revision))?;
    let patch = json!([
        {"op": "test", "path": "/metadata/resourceVersion", "value": watcher.resource_version()},
        {"op": "replace", "path": "/spec/container", "value": revision.container},
    ]);
    let patch: json_patch::Patch = serde_json::from_value(patch)?;
    Api::<Watcher>::namespaced(client.clone(), namespace)
        .patch(name, &PatchParams::default(), &Patch::Json::<()>(patch))
        .await
        .with_context(|| format!("cannot update watcher {name}"))?;
    println!("watcher.watcher.dev/{name} rolled back to revision {} (image {})", target.revision, target.image);
    Ok(())
}

/// `30s`, `5m`, `1h` or plain seconds; `0` waits for ever.
pub(crate) fn parse_timeout(value: &str) -> Result<Duration, String> {
    let (number, unit) = value.split_at(value.find(|c: char| !c.is_ascii_digit()).unwrap_or(value.len()));
    let n: u64 = number.parse().map_err(|_| format!("{value:?} is not a duration (30s, 5m, 1h)"))?;
    let seconds = match unit {
        "" | "s" => n,
        "m" => n * 60,
        "h" => n * 3600,
        _ => return Err(format!("{value:?} is not a duration (30s, 5m, 1h)")),
    };
    Ok(Duration::from_secs(seconds))
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::apps::v1::ControllerRevision;
    use k8s_openapi::api::core::v1::Pod;
    use serde_json::json;
    use watcher_api::Watcher;
    use watcher_controller::pods::revisions::desired_revision;

    use super::{HistoryLine, Outcome, history, history_text, judge, parse_timeout, undo_target};

    fn watcher(image: &str, generation: i64, condition: Option<(&str, &str)>) -> Watcher {
        let mut value = json!({"apiVersion": "watcher.dev/v1alpha1", "kind": "Watcher",
            "metadata": {"name": "log-watcher", "namespace": "team-a", "uid": "w-uid", "generation": generation},
            "spec": {"container": {"name": "log-watcher", "image": image}, "updatePolicy": {"type": "InPlace"}}});
        if let Some((reason, message)) = condition {
            let status = if reason == "Complete" { "True" } else { "False" };
            value["status"] = json!({"conditions": [{"type": "SidecarsUpdated", "status": status, "reason": reason,
                "message": message, "observedGeneration": 2, "lastTransitionTime": "2026-11-21T10:00:00Z"}]});
        }
        serde_json::from_value(value).expect("Watcher")
    }

    #[test]
    fn status_exits_as_kubectl_rollout_status_does() {
        let done = judge(&watcher("b:2", 2, Some(("Complete", "4 of 4 pods on the current spec")))).0;
        assert_eq!(
            done,
            Some(Outcome::Done("watcher log-watcher successfully rolled out: 4 of 4 pods on the current spec".into()))
        );
        let partitioned =
            judge(&watcher("b:2", 2, Some(("Partitioned", "2 of 4 pods on the current spec, 2 kept by partition 2"))))
                .0;
        assert!(matches!(partitioned, Some(Outcome::Done(m)) if m.starts_with("partitioned roll out complete")));
        let (going, line) =
            judge(&watcher("b:2", 2, Some(("Progressing", "1 of 4 pods on the current spec, 1 updating"))));
        assert_eq!(going, None);
        assert_eq!(
            line,
            "Waiting for watcher log-watcher rollout to finish: 1 of 4 pods on the current spec, 1 updating..."
        );
        let paused = judge(&watcher("b:2", 2, Some(("Paused", "0 of 4 pods on the current spec; paused")))).0;
        assert!(matches!(paused, Some(Outcome::Failed(m)) if m.contains("kubectl watcher rollout resume log-watcher")));
        let stuck = judge(&watcher("b:2", 2, Some(("Stuck", "pod web-1 has not run ...")))).0;
        assert!(matches!(stuck, Some(Outcome::Failed(m)) if m.contains("is stuck: pod web-1")));
        // A condition of an older generation says nothing yet of the spec just applied.
        assert_eq!(judge(&watcher("b:2", 3, Some(("Complete", "old")))).0, None);
        let mut report = watcher("b:2", 2, None);
        report.spec.update_policy.type_ = watcher_api::UpdatePolicyType::Report;
        assert!(matches!(judge(&report).0, Some(Outcome::Failed(m)) if m.contains("updatePolicy Report")));
    }

    #[test]
    fn history_counts_the_pods_of_each_revision_and_undo_picks_the_previous() {
        let revisions: Vec<ControllerRevision> = [("b:1", 1), ("b:2", 2), ("b:3", 3)]
            .iter()
            .map(|(image, n)| desired_revision(&watcher(image, 1, None), "team-a", *n).expect("revision"))
            .collect();
        let current = watcher("b:3", 1, None);
        let carrying = |image: &str| -> Pod {
            serde_json::from_value(json!({"metadata": {"name": image, "annotations": {
                "watcher.dev/injected": format!("other@x,log-watcher@{}", watcher(image, 1, None).spec.spec_hash())}}}))
            .expect("pod")
        };
        let pods = [carrying("b:2"), carrying("b:3"), carrying("b:3")];
        let lines = history(&current, &revisions, &pods);
        let summary: Vec<(i64, usize, &str, bool)> =
            lines.iter().map(|l| (l.revision, l.pods, l.image.as_str(), l.current)).collect();
        assert_eq!(summary, [(1, 0, "b:1", false), (2, 1, "b:2", false), (3, 2, "b:3", true)]);
        assert!(history_text("log-watcher", &lines).contains("3         "), "{}", history_text("log-watcher", &lines));
        assert_eq!(undo_target(&lines, None).expect("previous").revision, 2);
        assert_eq!(undo_target(&lines, Some(1)).expect("chosen").image, "b:1");
        assert!(undo_target(&lines, Some(9)).is_err());
        let only: Vec<HistoryLine> = lines.into_iter().filter(|l| l.current).collect();
        assert_eq!(
            undo_target(&only, None).expect_err("nothing before").to_string(),
            "no earlier revision to go back to"
        );
    }

    #[test]
    fn timeouts_read_as_kubectl_writes_them() {
        assert_eq!(parse_timeout("90").map(|d| d.as_secs()), Ok(90));
        assert_eq!(parse_timeout("30s").map(|d| d.as_secs()), Ok(30));
        assert_eq!(parse_timeout("5m").map(|d| d.as_secs()), Ok(300));
        assert_eq!(parse_timeout("1h").map(|d| d.as_secs()), Ok(3600));
        assert!(parse_timeout("soon").is_err() && parse_timeout("5d").is_err() && parse_timeout("").is_err());
    }
}
