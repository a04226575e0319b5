//! `watcher-operator rollout status|pause|resume|history|undo WATCHER`: a Watcher's sidecar
//! rollout, as `kubectl rollout` shows and steers a Deployment's; `clusterwatcher/NAME`, a
//! ClusterWatcher's, across its namespaces. The progress is the `SidecarsUpdated` condition the
//! pod reconciler writes; the history, the Watcher's ControllerRevisions (a ClusterWatcher's
//! are in the operator's namespace).

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use k8s_openapi::api::apps::v1::ControllerRevision;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, ListParams, Patch, PatchParams};
use kube::{Client, ResourceExt};
use serde_json::json;
use watcher_api::types;
use watcher_api::{ClusterWatcher, UpdatePolicyType, Watcher, annotation};
use watcher_controller::revisions::{CLUSTER_WATCHER_LABEL, WATCHER_LABEL, injection_of, revision_name};

/// What a `rollout` command is about: `NAME` or `watcher/NAME`, a Watcher of the namespace;
/// `clusterwatcher/NAME` (or `clusterwatchers/`, `cwt/`), a ClusterWatcher.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Target {
    /// A Watcher: its namespace and name.
    Watcher(String, String),
    /// A ClusterWatcher, by name.
    Cluster(String),
}

impl Target {
    /// `argument` as a target; `namespace` is a Watcher's.
    pub(crate) fn parse(argument: &str, namespace: &str) -> anyhow::Result<Self> {
        let (kind, name) = argument.split_once('/').unwrap_or(("watcher", argument));
        if name.is_empty() || name.contains('/') {
            bail!("{argument:?} is not a Watcher: NAME, watcher/NAME or clusterwatcher/NAME");
        }
        match kind.to_ascii_lowercase().as_str() {
            "watcher" | "watchers" | "watcher.watcher.dev" | "wt" => {
                Ok(Self::Watcher(namespace.to_owned(), name.into()))
            }
            "clusterwatcher" | "clusterwatchers" | "clusterwatcher.watcher.dev" | "cwt" => {
                Ok(Self::Cluster(name.into()))
            }
            _ => bail!("{argument:?}: rollout is for watcher/NAME and clusterwatcher/NAME"),
        }
    }

    fn name(&self) -> &str {
        match self {
            Self::Watcher(_, name) | Self::Cluster(name) => name,
        }
    }

    /// As kubectl names the object: `watcher.watcher.dev/NAME`.
    fn resource(&self) -> String {
        match self {
            Self::Watcher(_, name) => format!("watcher.{}/{name}", watcher_api::GROUP),
            Self::Cluster(name) => format!("clusterwatcher.{}/{name}", watcher_api::GROUP),
        }
    }

    /// For messages: `watcher NAME in namespace NS`, `clusterwatcher NAME`.
    fn described(&self) -> String {
        match self {
            Self::Watcher(namespace, name) => format!("watcher {name} in namespace {namespace}"),
            Self::Cluster(name) => format!("clusterwatcher {name}"),
        }
    }

    /// The Watcher, or the ClusterWatcher as a Watcher of no namespace, with its
    /// resourceVersion.
    async fn get(&self, client: &Client) -> anyhow::Result<Watcher> {
        let read = || format!("cannot read {}", self.described());
        match self {
            Self::Watcher(namespace, name) => {
                Api::<Watcher>::namespaced(client.clone(), namespace).get(name).await.with_context(read)
            }
            Self::Cluster(name) => {
                let cluster = Api::<ClusterWatcher>::all(client.clone()).get(name).await.with_context(read)?;
                let mut watcher = cluster.across_namespaces();
                watcher.metadata.resource_version = cluster.metadata.resource_version;
                Ok(watcher)
            }
        }
    }

    async fn patch(&self, client: &Client, patch: &Patch<serde_json::Value>) -> anyhow::Result<()> {
        let params = PatchParams::default();
        let update = || format!("cannot update {}", self.described());
        match self {
            Self::Watcher(namespace, name) => {
                Api::<Watcher>::namespaced(client.clone(), namespace).patch(name, &params, patch).await.map(drop)
            }
            Self::Cluster(name) => {
                Api::<ClusterWatcher>::all(client.clone()).patch(name, &params, patch).await.map(drop)
            }
        }
        .with_context(update)
    }
}

/// How `judge` names a Watcher (`watcher NAME`) or a ClusterWatcher (`clusterwatcher NAME`),
/// and the argument that names it to `rollout`.
fn noun_and_argument(watcher: &Watcher) -> (String, String) {
    let name = watcher.name_any();
    match watcher.cluster_watcher() {
        Some(_) => (format!("clusterwatcher {name}"), format!("clusterwatcher/{name}")),
        None => (format!("watcher {name}"), name),
    }
}

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
    let (noun, argument) = noun_and_argument(watcher);
    if watcher.spec.update_policy.type_ == UpdatePolicyType::Report {
        let why = format!(
            "{noun} has updatePolicy Report: its pods are only counted; set updatePolicy.type to InPlace or Recreate to roll them out"
        );
        return (Some(Outcome::Failed(why.clone())), why);
    }
    let generation = watcher.metadata.generation;
    let condition = watcher
        .status
        .as_ref()
        .and_then(|s| s.conditions.iter().find(|c| c.type_ == types::SIDECARS_UPDATED))
        .filter(|c| c.observed_generation == generation);
    let Some(condition) = condition else {
        return (None, format!("Waiting for the pod reconciler to observe {noun}..."));
    };
    let mut message = condition.message.clone();
    if let Some(stable) = held_on(watcher) {
        message.push_str(&format!("; new pods outside the canary group get the stable revision {stable}"));
    }
    match condition.reason.as_str() {
        "Complete" => (Some(Outcome::Done(format!("{noun} successfully rolled out: {message}"))), String::new()),
        "Partitioned" => {
            (Some(Outcome::Done(format!("partitioned roll out complete for {noun}: {message}"))), String::new())
        }
        "Paused" => {
            let why = format!(
                "the rollout of {noun} is paused ({message}); resume it: kubectl watcher rollout resume {argument}"
            );
            (Some(Outcome::Failed(why)), String::new())
        }
        "Stuck" => (Some(Outcome::Failed(format!("the rollout of {noun} is stuck: {message}"))), String::new()),
        _ => (None, format!("Waiting for {noun} rollout to finish: {message}...")),
    }
}

/// The stable revision new pods get outside the canary group, while the rollout holds them
/// on it (`newPods: Stable`) and it is not the current one.
fn held_on(watcher: &Watcher) -> Option<&str> {
    if !watcher.spec.update_policy.holds_new_pods() {
        return None;
    }
    let stable = watcher.status.as_ref()?.stable_revision.as_deref()?;
    (stable != revision_name(&watcher.name_any(), watcher.spec.spec_hash())).then_some(stable)
}

/// `rollout status`: prints progress lines until the rollout ends or `timeout` passes.
pub(crate) async fn status(client: &Client, target: &Target, timeout: Option<Duration>) -> anyhow::Result<bool> {
    let started = Instant::now();
    let mut last = String::new();
    loop {
        let watcher = target.get(client).await?;
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
            eprintln!("error: timed out waiting for the rollout of {}: {progress}", target.described());
            return Ok(false);
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

/// The Watcher's `SidecarsUpdated` message, for the timeout's line.
fn progress(watcher: &Watcher) -> Option<&str> {
    let conditions = &watcher.status.as_ref()?.conditions;
    conditions.iter().find(|c| c.type_ == types::SIDECARS_UPDATED).map(|c| c.message.as_str())
}

/// `rollout pause` and `rollout resume`.
pub(crate) async fn set_paused(client: &Client, target: &Target, paused: bool) -> anyhow::Result<()> {
    target.patch(client, &Patch::Merge(json!({"spec": {"updatePolicy": {"paused": paused}}}))).await?;
    println!("{} {}", target.resource(), if paused { "paused" } else { "resumed" });
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
    /// The stable revision of a rollout that holds new pods on it (`newPods: Stable`).
    pub(crate) stable: bool,
}

/// The history of `watcher` from its revisions and the pods of its namespace, oldest first.
pub(crate) fn history(watcher: &Watcher, revisions: &[ControllerRevision], pods: &[Pod]) -> Vec<HistoryLine> {
    let name = watcher.name_any();
    let current = watcher.spec.spec_hash();
    let mut carried: BTreeMap<String, usize> = BTreeMap::new();
    for pod in pods.iter().filter(|p| p.metadata.deletion_timestamp.is_none()) {
        for (watcher, hash) in annotation::Injected::read(pod.annotations()) {
            if watcher == name {
                *carried.entry(hash.to_owned()).or_default() += 1;
            }
        }
    }
    let prefix = format!("{name}-");
    let holding = watcher.spec.update_policy.holds_new_pods();
    let stable = watcher.status.as_ref().and_then(|s| s.stable_revision.as_deref()).filter(|_| holding);
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
                stable: stable == Some(r.name_any().as_str()) && hash != current,
                hash,
                image,
            }
        })
        .collect();
    lines.sort_by_key(|l| l.revision);
    lines
}

fn history_text(resource: &str, lines: &[HistoryLine]) -> String {
    let mut out = format!("{resource}\nREVISION  SPEC HASH  PODS  IMAGE\n");
    for line in lines {
        let current = match (line.current, line.stable) {
            (true, _) => "  (current)",
            (false, true) => "  (stable: pods created outside the canary group during the held rollout)",
            (false, false) => "",
        };
        out.push_str(&format!("{:<8}  {:<9}  {:<4}  {}{current}\n", line.revision, line.hash, line.pods, line.image));
    }
    out
}

/// The Watcher, its revisions, and the pods that may carry them: a Watcher's namespace's; for a
/// ClusterWatcher, those of every namespace where it applies.
async fn revisions_and_pods(
    client: &Client,
    target: &Target,
) -> anyhow::Result<(Watcher, Vec<ControllerRevision>, Vec<Pod>)> {
    let watcher = target.get(client).await?;
    let name = target.name();
    let (revisions, pods) = match target {
        Target::Watcher(namespace, _) => (
            Api::<ControllerRevision>::namespaced(client.clone(), namespace),
            Api::<Pod>::namespaced(client.clone(), namespace),
        ),
        Target::Cluster(_) => (Api::<ControllerRevision>::all(client.clone()), Api::<Pod>::all(client.clone())),
    };
    let label = match target {
        Target::Watcher(..) => format!("{WATCHER_LABEL}={name},!{CLUSTER_WATCHER_LABEL}"),
        Target::Cluster(_) => format!("{CLUSTER_WATCHER_LABEL}={name}"),
    };
    let revisions = revisions
        .list(&ListParams::default().labels(&label))
        .await
        .with_context(|| format!("cannot list the revisions of {}", target.described()))?
        .items;
    let pods = pods_metadata(&pods).await.with_context(|| format!("cannot list the pods of {}", target.described()))?;
    Ok((watcher, revisions, pods))
}

/// The metadata of every pod `api` lists, in pages of 500 as kubectl lists (a ClusterWatcher's
/// are those of the whole cluster).
async fn pods_metadata(api: &Api<Pod>) -> kube::Result<Vec<Pod>> {
    let mut params = ListParams::default().limit(500);
    let mut pods = Vec::new();
    loop {
        let page = api.list_metadata(&params).await?;
        pods.extend(page.items.into_iter().map(|p| Pod { metadata: p.metadata, ..Pod::default() }));
        match page.metadata.continue_.filter(|token| !token.is_empty()) {
            Some(token) => params = params.continue_token(&token),
            None => return Ok(pods),
        }
    }
}

/// `rollout history`.
pub(crate) async fn print_history(client: &Client, target: &Target) -> anyhow::Result<()> {
    let (watcher, revisions, pods) = revisions_and_pods(client, target).await?;
    print!("{}", history_text(&target.resource(), &history(&watcher, &revisions, &pods)));
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
pub(crate) async fn undo(client: &Client, to_undo: &Target, to: Option<i64>) -> anyhow::Result<()> {
    let (watcher, revisions, pods) = revisions_and_pods(client, to_undo).await?;
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
    to_undo.patch(client, &Patch::Json(patch)).await?;
    println!("{} rolled back to revision {} (image {})", to_undo.resource(), target.revision, target.image);
    Ok(())
}

/// `30s`, `5m`, `1h` or plain seconds; `0` waits for ever.
pub(crate) fn parse_timeout(value: &str) -> Result<Duration, String> {
    let with_unit = if value.bytes().all(|b| b.is_ascii_digit()) { format!("{value}s") } else { value.to_owned() };
    watcher_base::parse_duration(&with_unit).map_err(|error| match error {
        watcher_base::DurationError::Syntax => format!("{value:?} is not a duration (30s, 5m, 1h)"),
        watcher_base::DurationError::TooLong => format!("{value:?} is longer than any wait (use 0 to wait for ever)"),
    })
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::apps::v1::ControllerRevision;
    use k8s_openapi::api::core::v1::Pod;
    use serde_json::json;
    use watcher_api::{ClusterWatcher, Watcher};
    use watcher_controller::revisions::desired_revision;

    use super::{HistoryLine, Outcome, Target, history, history_text, judge, parse_timeout, undo_target};

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

    /// The pods are listed in pages of 500, each with the previous page's continue token, until
    /// a page has none.
    #[tokio::test]
    async fn pods_are_listed_in_pages() {
        use http::{Request, Response};
        use kube::client::Body;
        let (service, mut handle) = tower_test::mock::pair::<Request<Body>, Response<Body>>();
        let server = tokio::spawn(async move {
            let mut queries = Vec::new();
            for (token, name) in [("next-page", "web-1"), ("", "web-2")] {
                let (request, send) = handle.next_request().await.expect("a page asked for");
                queries.push(request.uri().query().unwrap_or_default().to_owned());
                let page = json!({"apiVersion": "meta.k8s.io/v1", "kind": "PartialObjectMetadataList",
                    "metadata": {"resourceVersion": "7", "continue": token},
                    "items": [{"apiVersion": "meta.k8s.io/v1", "kind": "PartialObjectMetadata",
                               "metadata": {"name": name, "namespace": "team-a"}}]});
                send.send_response(Response::new(Body::from(serde_json::to_vec(&page).expect("JSON"))));
            }
            queries
        });
        let api = kube::Api::<Pod>::all(kube::Client::new(service, "default"));
        let pods = super::pods_metadata(&api).await.expect("listed");
        let names: Vec<_> = pods.iter().map(|p| p.metadata.name.clone().unwrap_or_default()).collect();
        assert_eq!(names, ["web-1", "web-2"]);
        let queries = server.await.expect("server");
        assert!(queries[0].contains("limit=500") && !queries[0].contains("continue="), "{queries:?}");
        assert!(queries[1].contains("limit=500") && queries[1].contains("continue=next-page"), "{queries:?}");
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
        let text = history_text("watcher.watcher.dev/log-watcher", &lines);
        assert!(text.contains("3         "), "{text}");
        assert_eq!(undo_target(&lines, None).expect("previous").revision, 2);
        assert_eq!(undo_target(&lines, Some(1)).expect("chosen").image, "b:1");
        assert!(undo_target(&lines, Some(9)).is_err());
        let only: Vec<HistoryLine> = lines.into_iter().filter(|l| l.current).collect();
        assert_eq!(
            undo_target(&only, None).expect_err("nothing before").to_string(),
            "no earlier revision to go back to"
        );
    }

    /// A canary held with `newPods: Stable`: status says where new pods go, history marks the
    /// stable revision and why its pods are on it.
    #[test]
    fn a_held_canary_names_its_stable_revision() {
        let old = desired_revision(&watcher("b:1", 1, None), "team-a", 1).expect("revision");
        let new = desired_revision(&watcher("b:2", 1, None), "team-a", 2).expect("revision");
        let stable = old.metadata.name.clone().expect("name");
        let mut held =
            watcher("b:2", 2, Some(("Partitioned", "1 of 4 pods on the current spec, 3 kept by partition 3")));
        held.spec.update_policy.partition = 3;
        held.spec.update_policy.new_pods = watcher_api::NewPods::Stable;
        held.status.as_mut().expect("status").stable_revision = Some(stable.clone());
        let Some(Outcome::Done(message)) = judge(&held).0 else { panic!("partitioned") };
        assert!(message.ends_with(&format!("new pods outside the canary group get the stable revision {stable}")));
        let lines = history(&held, &[old.clone(), new.clone()], &[]);
        let text = history_text("watcher.watcher.dev/log-watcher", &lines);
        assert!(
            text.contains("b:1  (stable: pods created outside the canary group during the held rollout)"),
            "{text}"
        );
        assert!(text.contains("b:2  (current)"), "{text}");
        // Released: nothing is held on it, and nothing is said.
        held.spec.update_policy.partition = 0;
        let Some(Outcome::Done(message)) = judge(&held).0 else { panic!("partitioned") };
        assert!(!message.contains("stable"), "{message}");
        assert!(history(&held, &[old, new], &[]).iter().all(|l| !l.stable));
    }

    #[test]
    fn a_target_is_a_watcher_of_the_namespace_or_a_cluster_watcher() {
        let watcher = Target::Watcher("team-a".into(), "log-watcher".into());
        assert_eq!(Target::parse("log-watcher", "team-a").expect("name"), watcher);
        assert_eq!(Target::parse("watcher/log-watcher", "team-a").expect("kind/name"), watcher);
        assert_eq!(
            Target::parse("clusterwatcher/log-agent", "team-a").expect("cluster"),
            Target::Cluster("log-agent".into())
        );
        assert_eq!(Target::parse("cwt/log-agent", "x").expect("short name"), Target::Cluster("log-agent".into()));
        for wrong in ["deployment/web", "clusterwatcher/", "a/b/c"] {
            assert!(Target::parse(wrong, "team-a").is_err(), "{wrong}");
        }
        // A ClusterWatcher is judged and named as one, its resume hint included.
        let cluster: ClusterWatcher = serde_json::from_value(json!({"apiVersion": "watcher.dev/v1alpha1",
            "kind": "ClusterWatcher", "metadata": {"name": "log-agent", "generation": 2},
            "spec": {"container": {"name": "log-agent", "image": "b:2"}, "updatePolicy": {"type": "InPlace"}},
            "status": {"conditions": [{"type": "SidecarsUpdated", "status": "False", "reason": "Paused",
                "message": "1 of 3 pods on the current spec; paused", "observedGeneration": 2,
                "lastTransitionTime": "2026-11-24T10:00:00Z"}]}}))
        .expect("ClusterWatcher");
        let Some(Outcome::Failed(message)) = judge(&cluster.across_namespaces()).0 else { panic!("paused") };
        assert_eq!(
            message,
            "the rollout of clusterwatcher log-agent is paused (1 of 3 pods on the current spec; paused); resume it: \
             kubectl watcher rollout resume clusterwatcher/log-agent"
        );
    }

    #[test]
    fn timeouts_read_as_kubectl_writes_them() {
        assert_eq!(parse_timeout("90").map(|d| d.as_secs()), Ok(90));
        assert_eq!(parse_timeout("30s").map(|d| d.as_secs()), Ok(30));
        assert_eq!(parse_timeout("5m").map(|d| d.as_secs()), Ok(300));
        assert_eq!(parse_timeout("1h").map(|d| d.as_secs()), Ok(3600));
        assert!(parse_timeout("soon").is_err() && parse_timeout("5d").is_err() && parse_timeout("").is_err());
        // Minutes and hours past what milliseconds can count are refused, never wrapped or a panic.
        let huge = format!("{}h", u64::MAX / 3_600_000 + 1);
        assert!(parse_timeout(&huge).is_err_and(|e| e.contains("longer than any wait")), "{huge}");
        assert!(parse_timeout(&format!("{}m", u64::MAX)).is_err());
        assert_eq!(
            parse_timeout(&format!("{}h", u64::MAX / 3_600_000)).map(|d| d.as_secs() / 3600),
            Ok(u64::MAX / 3_600_000)
        );
    }
}
