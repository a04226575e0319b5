//! The ending controller's decisions over every version of real Job pods, as a real node
//! (kubelet and containerd) reported them through a pod's life (`fixtures/ending/`).

use serde_json::Value;
use watcher_api::annotation;

use super::*;

const IMAGE: &str = "watcher-supervise:0.1.0";

/// Every version of `file`'s pod as the controller decodes it.
fn versions(file: &str) -> Vec<EndingPod> {
    serde_json::from_str(&fixture(file)).expect("pods")
}

fn fixture(file: &str) -> String {
    let path = format!("{}/fixtures/ending/{file}.json", env!("CARGO_MANIFEST_DIR"));
    std::fs::read_to_string(&path).expect("fixture")
}

/// Seconds since the epoch of the pod's `watcher.dev/sidecars-ended`, or of its creation.
fn ended_at(pod: &EndingPod) -> i64 {
    let ended = pod.annotations().get(annotation::SidecarsEnded::KEY).and_then(|t| t.parse::<jiff::Timestamp>().ok());
    ended.or_else(|| pod.metadata.creation_timestamp.as_ref().map(|t| t.0)).expect("a time").as_second()
}

/// One word per decision, to compare whole lives at a glance.
fn word(next: &Next) -> &'static str {
    match next {
        Next::Nothing => "nothing",
        Next::Unmark => "unmark",
        Next::Wait => "wait",
        Next::End { .. } => "end",
        Next::Ending { .. } => "ending",
        Next::Remind { .. } => "remind",
    }
}

/// The decisions over a pod's life, each version judged a second after the sidecars' switch.
fn life(file: &str) -> Vec<&'static str> {
    let pods = versions(file);
    let mut words: Vec<&str> = pods.iter().map(|pod| word(&next(pod, IMAGE, ended_at(pod) + 1))).collect();
    words.dedup();
    words
}

/// The first version of `file` after the mark (and the switch, if any), its sidecar still
/// running, with the time of the mark.
fn after_the_mark(file: &str) -> (EndingPod, i64) {
    let pods = versions(file);
    let pod = pods
        .into_iter()
        .find(|p| matches!(next(p, IMAGE, ended_at(p)), Next::Ending { .. }))
        .unwrap_or_else(|| panic!("{file}: a version after the mark, the sidecar still running"));
    let at = ended_at(&pod);
    (pod, at)
}

#[test]
fn a_job_whose_app_succeeds_has_its_sidecar_ended_once_and_ends() {
    for version in ["1.24", "1.36"] {
        let file = format!("job-{version}-succeeds");
        assert_eq!(life(&file), ["wait", "end", "ending", "nothing"], "{file}");
        let pods = versions(&file);
        let first_end = pods.iter().find_map(|p| match next(p, IMAGE, 0) {
            Next::End { switch, .. } => Some(switch),
            _ => None,
        });
        assert_eq!(first_end, Some(vec![(1, "stubborn".to_owned())]), "{file}");
        let last = pods.last().expect("versions");
        assert_eq!(last.status.as_ref().and_then(|s| s.phase.as_deref()), Some("Succeeded"), "{file}");
    }
}

#[test]
fn a_job_whose_app_fails_under_never_is_ended_too_and_fails() {
    for version in ["1.24", "1.36"] {
        let file = format!("job-{version}-fails");
        assert_eq!(life(&file), ["wait", "end", "ending", "nothing"], "{file}");
        let last = versions(&file).pop().expect("versions");
        assert_eq!(last.status.as_ref().and_then(|s| s.phase.as_deref()), Some("Failed"), "{file}");
    }
}

/// Under `OnFailure` an app container that failed is restarted: the sidecar is left running
/// until the app has succeeded.
#[test]
fn an_app_that_failed_under_on_failure_is_waited_for() {
    for version in ["1.24", "1.36"] {
        let file = format!("job-{version}-onfailure");
        let pods = versions(&file);
        let failed = pods
            .iter()
            .find(|p| {
                let statuses = p.status.as_ref().and_then(|s| s.container_statuses.as_deref()).unwrap_or_default();
                statuses.iter().any(|s| {
                    s.name == "app"
                        && s.state.as_ref().and_then(|s| s.terminated.as_ref()).is_some_and(|t| t.exit_code != 0)
                })
            })
            .expect("a version where the app had failed");
        assert_eq!(next(failed, IMAGE, 0), Next::Wait, "{file}");
        assert_eq!(life(&file), ["wait", "end", "ending", "nothing"], "{file}");
    }
}

/// The README's agent, a sidecar with no command: ended by the same switch.
#[test]
fn the_agent_is_ended_with_its_app() {
    for version in ["1.24", "1.36"] {
        let file = format!("job-{version}-agent");
        assert_eq!(life(&file), ["wait", "end", "ending", "nothing"], "{file}");
        let end = versions(&file).iter().find_map(|p| match next(p, IMAGE, 0) {
            Next::End { switch, .. } => Some(switch),
            _ => None,
        });
        assert_eq!(end, Some(vec![(1, "app-watcher".to_owned())]), "{file}");
    }
}

/// Switched sidecars that still run past the pod's grace period and a margin are overdue: the
/// pod is reported as kept from ending, and looked at again.
#[test]
fn a_sidecar_still_running_long_after_the_switch_is_overdue() {
    let (switched, at) = after_the_mark("job-1.24-succeeds");
    let Next::Ending { running, overdue, recheck } = next(&switched, IMAGE, at + 1) else { panic!("ending") };
    assert_eq!((running, overdue), (vec!["stubborn".to_owned()], false));
    assert_eq!(recheck, Duration::from_secs(30 + 30 - 1), "the grace period and the margin, less the second gone");
    let Next::Ending { overdue, recheck, .. } = next(&switched, IMAGE, at + 60) else { panic!("ending") };
    assert!(overdue);
    assert_eq!(recheck, ENDING_MARGIN);
}

/// Another supervisor image than the one the sidecars run: they are switched to it.
#[test]
fn sidecars_are_switched_to_the_configured_image() {
    let pods = versions("job-1.24-succeeds");
    let switched = pods.iter().rev().find(|p| p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running"));
    let mut pod = switched.expect("a running version").clone();
    // The same pod, its sidecar still running (as the kubelet reported it before the switch).
    pod.status = pods.iter().find(|p| matches!(next(p, IMAGE, 0), Next::End { .. })).and_then(|p| p.status.clone());
    assert_eq!(
        next(&pod, "mirror.example/watcher-supervise:0.1.0", 0),
        Next::End { own: vec![], switch: vec![(1, "stubborn".to_owned())] }
    );
}

#[test]
fn pods_not_meant_to_end_or_naming_no_sidecar_are_left_alone() {
    let plain = versions("job-1.24-succeeds").into_iter().find(|p| matches!(next(p, IMAGE, 0), Next::End { .. }));
    // The same pod, its restart policy or its annotation otherwise (as no capture has them).
    let plain = plain.expect("a version to end");
    let mut always = plain.clone();
    always.spec.as_mut().expect("spec").restart_policy = Some("Always".into());
    assert_eq!(next(&always, IMAGE, 0), Next::Nothing);
    let mut unnamed = plain.clone();
    unnamed.metadata.annotations.as_mut().expect("annotations").remove(annotation::EndSidecars::KEY);
    assert_eq!(next(&unnamed, IMAGE, 0), Next::Nothing);
}

/// A Job whose `backoffLimit` (0) an `OnFailure` pod's first failure exhausts: the Job
/// controller deletes the pod, which is left to its deletion, whatever its containers report.
#[test]
fn a_pod_being_deleted_is_left_alone() {
    let pods = versions("job-1.36-onfailure-deleted");
    let deleted: Vec<&EndingPod> = pods.iter().filter(|p| p.metadata.deletion_timestamp.is_some()).collect();
    assert!(!deleted.is_empty(), "the capture has the pod's deletion");
    for pod in deleted {
        assert_eq!(next(pod, IMAGE, 0), Next::Nothing);
    }
    assert_eq!(life("job-1.36-onfailure-deleted"), ["wait", "nothing"]);
}

/// A pod marked as kept from ending that has ended after all (or is being deleted) is unmarked,
/// once: then left alone.
#[test]
fn an_ended_pod_that_was_marked_is_unmarked() {
    for file in ["job-1.24-succeeds", "job-1.36-fails", "job-1.36-onfailure-deleted"] {
        let mut pod = versions(file).pop().expect("versions");
        assert_eq!(next(&pod, IMAGE, 0), Next::Nothing, "{file}");
        let annotations = pod.metadata.annotations.get_or_insert_default();
        annotations.insert(annotation::SidecarsCannotEnd::KEY.into(), "stubborn".into());
        assert_eq!(next(&pod, IMAGE, 0), Next::Unmark, "{file}");
    }
}

/// The patch tests each container's name before it switches the image, and records the time.
#[test]
fn the_patch_switches_only_the_containers_it_names() {
    let pod = versions("job-1.24-succeeds").into_iter().find(|p| matches!(next(p, IMAGE, 0), Next::End { .. }));
    let pod = pod.expect("a version to end");
    let Next::End { switch: sidecars, .. } = next(&pod, IMAGE, 0) else { panic!("end") };
    let ops = end_patch(&sidecars, IMAGE, "2026-11-26T10:00:00Z");
    let mut value = serde_json::to_value(&pod).expect("pod");
    json_patch::patch(&mut value, &ops).expect("applies to the pod");
    let images: Vec<&str> = value["spec"]["containers"]
        .as_array()
        .expect("containers")
        .iter()
        .filter_map(|c| c["image"].as_str())
        .collect();
    assert_eq!(images, ["busybox:1.36", IMAGE]);
    assert_eq!(value["metadata"]["annotations"][annotation::SidecarsEnded::KEY], Value::from("2026-11-26T10:00:00Z"));
    // The containers in another order (a stale index): the test fails, nothing is written.
    let mut other = serde_json::to_value(&pod).expect("pod");
    other["spec"]["containers"].as_array_mut().expect("containers").reverse();
    assert!(json_patch::patch(&mut other, &ops).is_err());
}

/// The switch goes to the image the pod's own supervisor ran with (an ImagePolicy's mirror),
/// the flag's only where the pod has no supervisor (a sidecar running its entrypoint).
#[test]
fn the_switch_uses_the_pods_own_supervisor_image() {
    for version in ["1.24", "1.36"] {
        let file = format!("job-{version}-succeeds");
        let mut pod = versions(&file).remove(0);
        let init = pod.spec.as_mut().and_then(|s| s.init_containers.as_mut()).expect("the supervisor");
        let supervisor = init.iter_mut().find(|c| c.name == SUPERVISOR_NAME).expect("the supervisor");
        assert_eq!(supervisor.image.as_deref(), Some(IMAGE), "{file}");
        supervisor.image = Some("mirror.internal/watcher-supervise:0.1.0".into());
        assert_eq!(supervisor_image(&pod, IMAGE), "mirror.internal/watcher-supervise:0.1.0", "{file}");
        pod.spec.as_mut().expect("spec").init_containers = None;
        assert_eq!(supervisor_image(&pod, IMAGE), IMAGE, "{file}: no supervisor, the flag's");
    }
}

/// Pods admitted with the ended file (a command under the supervisor, the agent): the mark is
/// written once, nothing is switched, and the sidecars end by themselves with no restart, under
/// `OnFailure` too (the app's own failure restarted, the sidecar left running until the app has
/// succeeded).
#[test]
fn sidecars_that_read_the_ended_file_are_marked_not_switched() {
    for (file, sidecar) in
        [("job-1.24-onfailure-ends-itself", "stubborn"), ("job-1.24-agent-ends-itself", "app-watcher")]
    {
        assert_eq!(life(file), ["wait", "end", "ending", "nothing"], "{file}");
        let pods = versions(file);
        let end = pods.iter().find_map(|p| match next(p, IMAGE, 0) {
            Next::End { own, switch } => Some((own, switch)),
            _ => None,
        });
        assert_eq!(end, Some((vec![sidecar.to_owned()], vec![])), "{file}");
        // Marked: the same version is not ended twice.
        let marked =
            pods.iter().find(|p| p.annotations().contains_key(annotation::SidecarsEnded::KEY)).expect("marked");
        assert!(!matches!(next(marked, IMAGE, ended_at(marked)), Next::End { .. }), "{file}");
        let last = pods.last().expect("versions");
        let status = last.status.as_ref().expect("status");
        assert_eq!(status.phase.as_deref(), Some("Succeeded"), "{file}");
        let statuses = status.container_statuses.as_deref().unwrap_or_default();
        let ended = statuses.iter().find(|s| s.name == sidecar).expect("the sidecar's status");
        let reported: Vec<Value> = serde_json::from_str(&fixture(file)).expect("pods");
        let restarts = reported.last().and_then(|pod| {
            let statuses = pod["status"]["containerStatuses"].as_array()?;
            statuses.iter().find(|s| s["name"] == *sidecar)?["restartCount"].as_i64()
        });
        assert_eq!(ended.name, sidecar, "{file}");
        assert_eq!(restarts, Some(0), "{file}: ended by itself, no restart");
        let image = last.spec.as_ref().and_then(|s| s.containers.iter().find(|c| c.name == sidecar)?.image.clone());
        assert_ne!(image.as_deref(), Some(IMAGE), "{file}: its image was never switched");
    }
}

/// A sidecar that reads the ended file and still runs [`REMIND_AFTER`] s after the mark (the
/// kubelet has not refreshed the volume) is told again, once: the mark written anew, which the
/// kubelet refreshes on that change of the pod; until then, the next look is at that time.
/// Switched sidecars are never told again: a restart ends them.
#[test]
fn a_sidecar_that_reads_the_mark_and_runs_on_is_told_again_once() {
    let (marked, at) = after_the_mark("job-1.24-onfailure-ends-itself");
    let Next::Ending { running, overdue, recheck } = next(&marked, IMAGE, at + 1) else { panic!("ending") };
    assert_eq!((running, overdue), (vec!["stubborn".to_owned()], false));
    assert_eq!(recheck, Duration::from_secs(REMIND_AFTER.unsigned_abs() - 1), "looked at again when due");
    assert_eq!(next(&marked, IMAGE, at + REMIND_AFTER), Next::Remind { running: vec!["stubborn".to_owned()] });

    // The mark as the reminder writes it: not told a third time, and overdue as from then.
    let reminded_at = jiff::Timestamp::from_second(at + REMIND_AFTER).expect("a time");
    let mut reminded = marked.clone();
    reminded
        .annotations_mut()
        .insert(annotation::SidecarsEnded::KEY.to_owned(), annotation::SidecarsEnded::encode(reminded_at));
    let now = at + REMIND_AFTER + 1;
    let Next::Ending { overdue, recheck, .. } = next(&reminded, IMAGE, now) else { panic!("ending") };
    assert!(!overdue);
    assert_eq!(recheck, Duration::from_secs(30 + 30 - 1), "the grace period and the margin from the reminder");

    let (switched, at) = after_the_mark("job-1.24-succeeds");
    assert!(matches!(next(&switched, IMAGE, at + REMIND_AFTER), Next::Ending { .. }), "a switched sidecar");
}

/// `EndsWithoutRestart` before any pod: `False` only for a sidecar that runs another image's
/// entrypoint and can be a regular container; none for a command, the agent, `Always`.
#[test]
fn a_sidecar_ended_by_a_restart_is_said_on_its_watcher() {
    let spec = |container: Value, native: &str| -> watcher_api::WatcherSpec {
        serde_json::from_value(serde_json::json!({"container": container, "nativeSidecar": native})).expect("spec")
    };
    let looper = serde_json::json!({"name": "looper", "image": "e2e-looper:0.1.0"});
    let condition = restart_condition(&spec(looper.clone(), "Auto"), Some(3)).expect("said");
    assert_eq!((condition.type_.as_str(), condition.status.as_str()), ("EndsWithoutRestart", "False"));
    assert_eq!(condition.reason, "ImageSwitch");
    assert!(condition.message.contains("backoffLimit of 1 more"), "{}", condition.message);
    assert!(condition.message.contains("before Kubernetes 1.29"), "{}", condition.message);
    let never = restart_condition(&spec(looper.clone(), "Never"), None).expect("said");
    assert!(never.message.contains("nativeSidecar: Never"), "{}", never.message);
    for (container, native) in [
        (looper, "Always"),
        (serde_json::json!({"name": "agent", "image": "registry.example/mirror/watcher-agent:0.1.0"}), "Never"),
        (serde_json::json!({"name": "tail", "image": "busybox:1.36", "command": ["tail", "-F", "/x"]}), "Never"),
    ] {
        assert_eq!(restart_condition(&spec(container.clone(), native), None), None, "{container} {native}");
    }
    // Taken away once the spec ends by itself.
    let mut conditions = vec![condition];
    let fixed = spec(serde_json::json!({"name": "looper", "image": "e2e-looper:0.1.0", "command": ["loop"]}), "Auto");
    set_restart_condition(&mut conditions, &fixed, Some(4));
    assert!(conditions.is_empty());
}

/// Every version of every real Job pod, decoded as the controller decodes it and kept as the
/// cache keeps it ([`strip`]): the same decision at every moment of its life as decoded whole,
/// the same supervisor image; and a fraction of the pod's size.
#[test]
fn a_stripped_pod_is_decided_as_the_whole_one() {
    let mut whole_bytes = 0;
    let mut kept_bytes = 0;
    let mut count = 0;
    for entry in std::fs::read_dir(format!("{}/fixtures/ending", env!("CARGO_MANIFEST_DIR"))).expect("fixtures") {
        let path = entry.expect("an entry").path();
        if path.extension().is_none_or(|e| e != "json") {
            continue;
        }
        let file = path.file_stem().expect("a name").to_string_lossy().into_owned();
        let whole: Vec<Value> = serde_json::from_str(&fixture(&file)).expect("pods");
        for (pod, whole) in versions(&file).into_iter().zip(whole) {
            let mut kept = pod.clone();
            strip(&mut kept);
            for offset in [0, 1, 11, 61, 3600] {
                let now = ended_at(&pod) + offset;
                assert_eq!(next(&kept, IMAGE, now), next(&pod, IMAGE, now), "{file} at +{offset} s");
            }
            assert_eq!(supervisor_image(&kept, IMAGE), supervisor_image(&pod, IMAGE), "{file}");
            whole_bytes += serde_json::to_vec(&whole).expect("JSON").len();
            kept_bytes += serde_json::to_vec(&kept).expect("JSON").len();
            count += 1;
        }
    }
    assert!(count >= 30, "{count} versions");
    let (whole, kept) = (whole_bytes / count, kept_bytes / count);
    eprintln!("a Job's pod: {whole} bytes as JSON, {kept} kept ({count} versions)");
    assert!(kept * 4 < whole && kept < 1024, "{kept} of {whole} bytes kept");
}

/// What the cache keeps of a pod's annotations: the three the controller reads, apart from the
/// metadata (no map node per pod), each read as on the pod decoded whole.
#[test]
fn the_marks_are_kept_apart_and_read_alike() {
    let keys = [annotation::EndSidecars::KEY, annotation::SidecarsEnded::KEY, annotation::SidecarsCannotEnd::KEY];
    let mut found = [0; 3];
    for file in ["job-1.36-agent", "job-1.36-cannot-end", "job-1.24-agent"] {
        for pod in versions(file) {
            let mut kept = pod.clone();
            strip(&mut kept);
            assert_eq!(kept.metadata.annotations, None, "{file}");
            for (key, found) in keys.iter().zip(&mut found) {
                let whole = pod.annotations().get(*key).map(String::as_str);
                assert_eq!(kept.mark(key), whole, "{file}: {key}");
                assert_eq!(pod.mark(key), whole, "{file}: {key}, decoded whole");
                *found += usize::from(whole.is_some());
            }
        }
    }
    assert!(found.iter().all(|n| *n > 0), "each annotation is on some version: {found:?}");
}
