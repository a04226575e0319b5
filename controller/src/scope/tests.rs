use kube::client::Body;
use kube::runtime::reflector;
use kube::runtime::watcher::Event;
use serde_json::{Value, json};

use super::*;
use http::{Method, Request, Response, StatusCode};
use tower_test::mock::{Handle, SendResponse};

const CONFIG_PATH: &str = "/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations/watcher-operator";

type ApiHandle = Handle<Request<Body>, Response<Body>>;

/// The configuration `kubectl apply -k deploy/` creates, as the API server returns it.
fn installed_from_deploy() -> MutatingWebhookConfiguration {
    let mut config: MutatingWebhookConfiguration =
        serde_saphyr::from_str(include_str!("../../../deploy/webhook.yaml")).expect("deploy/webhook.yaml");
    config.metadata.resource_version = Some("41".into());
    config
}

fn by_service() -> Registration {
    Registration::Service { name: "watcher-operator".into(), namespace: "watcher-system".into() }
}

fn watcher(name: &str, spec: Value) -> Watcher {
    let mut spec = spec;
    spec["container"] = json!({"name": name, "image": "busybox:1.36"});
    serde_json::from_value(json!({"apiVersion": "watcher.dev/v1alpha1", "kind": "Watcher",
        "metadata": {"name": name, "namespace": "team-a"}, "spec": spec}))
    .expect("valid Watcher")
}

/// A writer over these Watchers (and no policy), registered by Service, and the mocked API.
fn writer(watchers: Vec<Watcher>) -> (ScopeWriter, ScopeStatus, ApiHandle, reflector::store::Writer<Watcher>) {
    let (service, handle) = tower_test::mock::pair::<Request<Body>, Response<Body>>();
    let client = Client::new(service, "default");
    let (store, mut store_writer) = reflector::store();
    for watcher in watchers {
        store_writer.apply_watcher_event(&Event::Apply(watcher));
    }
    let (cache, _) = WatcherCache::from_store(store);
    let policies = PolicyCache::from_stores(reflector::store().0, reflector::store().0);
    let (writer, status) = ScopeWriter::new(client, by_service(), "watcher-system".into(), cache, policies);
    (writer, status, handle, store_writer)
}

async fn expect(handle: &mut ApiHandle, method: Method, path: &str) -> (Value, SendResponse<Response<Body>>) {
    let (request, send) = handle.next_request().await.unwrap_or_else(|| panic!("{method} {path}"));
    assert_eq!((request.method(), request.uri().path()), (&method, path));
    let bytes = request.into_body().collect_bytes().await.expect("body");
    let body = if bytes.is_empty() { Value::Null } else { serde_json::from_slice(&bytes).expect("JSON") };
    (body, send)
}

fn respond(send: SendResponse<Response<Body>>, status: StatusCode, body: &impl serde::Serialize) {
    let bytes = serde_json::to_vec(body).expect("serialises");
    send.send_response(Response::builder().status(status).body(Body::from(bytes)).expect("response"));
}

/// The installed configuration, taken over by an operator running outside the cluster.
fn registered_by_another_url() -> MutatingWebhookConfiguration {
    let mut configuration = installed_from_deploy();
    let client_config = Registration::Url("https://10.0.0.1:8443/mutate".into()).client_config(&Default::default());
    watcher_certs::registration::set_client_config(&mut configuration, &client_config);
    configuration
}

fn web_selector() -> Value {
    json!({"selector": {"matchLabels": {"app": "web"}}})
}

/// A Watcher selecting by label: one write, with the resourceVersion read, that sets the scope
/// condition and nothing else; the next pass finds it in place and writes nothing. The
/// Watcher is covered once the write is done, and not before.
#[tokio::test]
async fn conditions_are_written_once_per_change_and_never_in_a_steady_state() {
    let web = watcher("web", web_selector());
    let (writer, status, mut api, _store) = writer(vec![web.clone()]);
    let metrics = crate::Metrics::register(&mut prometheus_client::registry::Registry::default());
    let mut writer = writer.with_metrics(metrics.clone());
    assert_eq!(status.covers(&web), None, "not known before the first pass");
    assert_eq!(metrics.scope(), Some(("pending", "")));
    let server = tokio::spawn(async move {
        let (_, send) = expect(&mut api, Method::GET, CONFIG_PATH).await;
        respond(send, StatusCode::OK, &installed_from_deploy());
        let (body, send) = expect(&mut api, Method::PUT, CONFIG_PATH).await;
        assert_eq!(body["metadata"]["resourceVersion"], "41", "optimistic concurrency");
        let conditions = &body["webhooks"][0]["matchConditions"];
        assert_eq!(conditions.as_array().map(Vec::len), Some(1), "{conditions}");
        assert_eq!(conditions[0]["name"], SCOPE_CONDITION);
        assert!(conditions[0]["expression"].as_str().is_some_and(|e| e.contains("'team-a/web'")));
        // Nothing else of the installed configuration changes.
        let mut expected = serde_json::to_value(installed_from_deploy()).expect("JSON");
        expected["webhooks"][0]["matchConditions"] = conditions.clone();
        assert_eq!(body, expected);
        assert_eq!(body["webhooks"].as_array().map(Vec::len), Some(1), "no required Watcher, no second webhook");
        let mut stored = body.clone();
        stored["metadata"]["resourceVersion"] = json!("42");
        respond(send, StatusCode::OK, &stored);
        // Covered once kube-apiserver sends a pod the new condition selects: a dry run of one
        // with the Watcher's labels, not sent yet (the pod as created), then sent (probed).
        for sent in [false, true] {
            let (request, send) = api.next_request().await.expect("the probe");
            assert_eq!((request.method(), request.uri().path()), (&Method::POST, "/api/v1/namespaces/team-a/pods"));
            assert_eq!(request.uri().query(), Some("&dryRun=All&fieldManager=watcher-operator"));
            let bytes = request.into_body().collect_bytes().await.expect("body");
            let mut probe: Value = serde_json::from_slice(&bytes).expect("JSON");
            assert_eq!(probe["metadata"]["labels"], json!({"app": "web"}));
            assert_eq!(probe["metadata"]["annotations"], json!({"watcher.dev/scope-probe": "true"}));
            if sent {
                probe["metadata"]["annotations"]["watcher.dev/probed"] = json!("0.1.0");
            }
            respond(send, StatusCode::CREATED, &probe);
        }
        // The second pass: read, nothing to write.
        let (_, send) = expect(&mut api, Method::GET, CONFIG_PATH).await;
        respond(send, StatusCode::OK, &stored);
        api
    });
    assert!(matches!(writer.pass(true).await, Ok(Pass::Done)));
    assert_eq!(status.covers(&web), Some(true));
    assert_eq!(metrics.scope(), Some(("applied", "")), "exported as applied");
    assert!(matches!(writer.pass(true).await, Ok(Pass::Done)));
    let mut api = server.await.expect("scenario");
    // A change that computes the same conditions (the Watcher's status, say) reads nothing.
    assert!(matches!(writer.pass(false).await, Ok(Pass::Done)));
    drop(writer);
    assert!(api.next_request().await.is_none(), "no write in a steady state, and no read");
}

/// A required Watcher: `required.watcher.dev` is added, copied from `inject.watcher.dev` but
/// failing closed, and `inject.watcher.dev` leaves its pods to it. A user's own condition is
/// kept on both.
#[tokio::test]
async fn a_required_watcher_adds_the_webhook_that_fails_closed() {
    let audit = watcher("audit", json!({"failurePolicy": "Fail"}));
    let (mut writer, status, mut api, _store) = writer(vec![audit.clone()]);
    let mut installed = installed_from_deploy();
    let theirs =
        MatchCondition { name: "exclude-jobs".into(), expression: "!has(object.metadata.ownerReferences)".into() };
    installed.webhooks.as_mut().expect("webhooks")[0].match_conditions = Some(vec![theirs.clone()]);
    let server = tokio::spawn(async move {
        let (_, send) = expect(&mut api, Method::GET, CONFIG_PATH).await;
        respond(send, StatusCode::OK, &installed);
        let (body, send) = expect(&mut api, Method::PUT, CONFIG_PATH).await;
        let written: MutatingWebhookConfiguration = serde_json::from_value(body.clone()).expect("configuration");
        let webhooks = written.webhooks.clone().expect("webhooks");
        let (inject, required) = (&webhooks[0], &webhooks[1]);
        assert_eq!((inject.name.as_str(), required.name.as_str()), (INJECT_WEBHOOK, REQUIRED_WEBHOOK));
        assert_eq!(inject.failure_policy.as_deref(), Some("Ignore"), "as installed");
        assert_eq!(required.failure_policy.as_deref(), Some("Fail"));
        assert_eq!(
            (&required.rules, &required.namespace_selector, required.timeout_seconds, &required.client_config),
            (&inject.rules, &inject.namespace_selector, inject.timeout_seconds, &inject.client_config)
        );
        let names = |w: &k8s_openapi::api::admissionregistration::v1::MutatingWebhook| {
            w.match_conditions.iter().flatten().map(|c| c.name.clone()).collect::<Vec<_>>()
        };
        assert_eq!(names(inject), ["exclude-jobs", SCOPE_CONDITION, NOT_REQUIRED_CONDITION]);
        assert_eq!(names(required), ["exclude-jobs", REQUIRED_CONDITION]);
        let required_expression = &required.match_conditions.as_ref().expect("conditions")[1].expression;
        assert_eq!(
            inject.match_conditions.as_ref().expect("conditions")[2].expression,
            format!("!({required_expression})")
        );
        respond(send, StatusCode::OK, &body);
    });
    assert!(matches!(writer.pass(true).await, Ok(Pass::Done)));
    server.await.expect("scenario");
    assert_eq!(status.covers(&audit), Some(true));
}

/// kube-apiserver refuses the conditions: the operator falls back to sending every pod (its
/// conditions removed, the reason in the annotation), and does not try the same ones again.
#[tokio::test]
async fn refused_conditions_fall_back_to_every_pod() {
    let web = watcher("web", web_selector());
    let (writer, status, mut api, _store) = writer(vec![web.clone()]);
    let metrics = crate::Metrics::register(&mut prometheus_client::registry::Registry::default());
    let mut writer = writer.with_metrics(metrics.clone());
    let mut stale = installed_from_deploy();
    stale.webhooks.as_mut().expect("webhooks")[0].match_conditions =
        Some(vec![MatchCondition { name: SCOPE_CONDITION.into(), expression: "false".into() }]);
    let server = tokio::spawn(async move {
        let (_, send) = expect(&mut api, Method::GET, CONFIG_PATH).await;
        respond(send, StatusCode::OK, &stale);
        let (_, send) = expect(&mut api, Method::PUT, CONFIG_PATH).await;
        let refusal = json!({"kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": "Invalid", "code": 422,
            "message": "webhooks[0].matchConditions[0].expression: Invalid value: cost limit exceeded"});
        respond(send, StatusCode::UNPROCESSABLE_ENTITY, &refusal);
        let (body, send) = expect(&mut api, Method::PUT, CONFIG_PATH).await;
        assert!(body["webhooks"][0].get("matchConditions").is_none(), "every pod is sent: {body}");
        let why = body["metadata"]["annotations"][SCOPE_ANNOTATION].as_str().expect("the reason is recorded");
        assert!(why.contains("refused") && why.contains("cost limit exceeded"), "{why}");
        respond(send, StatusCode::OK, &body);
        // The next pass computes the same conditions: not tried again.
        let (_, send) = expect(&mut api, Method::GET, CONFIG_PATH).await;
        respond(send, StatusCode::OK, &body);
        api
    });
    assert!(matches!(writer.pass(true).await, Ok(Pass::Done)));
    assert_eq!(status.covers(&web), Some(true), "every pod is sent: nothing to wait for");
    assert_eq!(metrics.scope(), Some(("fallback", "refused")));
    assert!(matches!(writer.pass(false).await, Ok(Pass::Done)), "a change computing the same: nothing read");
    assert!(matches!(writer.pass(true).await, Ok(Pass::Done)));
    let mut api = server.await.expect("scenario");
    drop(writer);
    assert!(api.next_request().await.is_none());
}

/// Another operator's registration stands (a run by URL): this one never writes, and its
/// Watcher is covered only once the conditions in place are what it computes.
#[tokio::test]
async fn another_operators_registration_writes_the_conditions() {
    let web = watcher("web", web_selector());
    let (mut writer, status, mut api, _store) = writer(vec![web.clone()]);
    let mut by_url = registered_by_another_url();
    let mut scoped = by_url.clone();
    let scope = writer.compute();
    apply(&mut scoped, &scope.conditions(), None);
    // What the other operator wrote before the Watcher changed.
    apply(&mut by_url, &Conditions { scope: Some("false".into()), required: None }, None);
    let server = tokio::spawn(async move {
        let (_, send) = expect(&mut api, Method::GET, CONFIG_PATH).await;
        respond(send, StatusCode::OK, &by_url);
        let (_, send) = expect(&mut api, Method::GET, CONFIG_PATH).await;
        respond(send, StatusCode::OK, &scoped);
        api
    });
    assert!(matches!(writer.pass(true).await, Ok(Pass::Done)));
    assert_eq!(status.covers(&web), None, "not covered until the other operator writes");
    assert!(matches!(writer.pass(true).await, Ok(Pass::Done)));
    assert_eq!(status.covers(&web), Some(true));
    let mut api = server.await.expect("scenario");
    drop(writer);
    assert!(api.next_request().await.is_none(), "never a write");
}

/// Another operator's registration without any condition (an older operator, or before its
/// first write): every pod is sent, so nothing waits, and nothing is written.
#[tokio::test]
async fn another_registration_without_conditions_sends_every_pod() {
    let web = watcher("web", web_selector());
    let (mut writer, status, mut api, _store) = writer(vec![web.clone()]);
    let by_url = registered_by_another_url();
    let server = tokio::spawn(async move {
        let (_, send) = expect(&mut api, Method::GET, CONFIG_PATH).await;
        respond(send, StatusCode::OK, &by_url);
        api
    });
    assert!(matches!(writer.pass(true).await, Ok(Pass::Done)));
    assert_eq!(status.covers(&web), Some(true));
    let mut api = server.await.expect("scenario");
    drop(writer);
    assert!(api.next_request().await.is_none(), "never a write");
}

/// Before 1.28 nothing is read or written, and nothing waits for conditions.
#[tokio::test]
async fn nothing_is_written_before_1_28() {
    let web = watcher("web", web_selector());
    let (writer, status, mut api, _store) = writer(vec![web.clone()]);
    let metrics = crate::Metrics::register(&mut prometheus_client::registry::Registry::default());
    let writer = writer.with_metrics(metrics.clone());
    let server = tokio::spawn(async move {
        let (_, send) = expect(&mut api, Method::GET, "/version").await;
        let version = json!({"major": "1", "minor": "27", "gitVersion": "v1.27.16", "gitCommit": "", "gitTreeState": "clean",
            "buildDate": "2024-07-17T00:00:00Z", "goVersion": "go1.22.5", "compiler": "gc", "platform": "linux/amd64"});
        respond(send, StatusCode::OK, &version);
        api
    });
    writer.run().await;
    let mut api = server.await.expect("scenario");
    assert!(api.next_request().await.is_none(), "nothing after the version");
    assert_eq!(status.covers(&web), Some(true));
    assert_eq!(metrics.scope(), Some(("unsupported", "before_1_28")));
}

/// The size limit: an expression over it is left out, with the reason.
#[test]
fn expressions_over_the_limit_are_left_out() {
    let long = "x".repeat(MAX_EXPRESSION_LEN + 1);
    let (kept, why) = within_limits(Conditions { scope: Some(long.clone()), required: Some("true".into()) });
    assert_eq!(kept, Conditions { scope: None, required: Some("true".into()) });
    assert!(why.is_some_and(|w| w.contains("every pod")));
    let (kept, why) = within_limits(Conditions { scope: Some("true".into()), required: Some(long) });
    assert_eq!(kept.required, None);
    assert!(why.is_some_and(|w| w.contains(INJECT_WEBHOOK)));
}

/// Taking back every condition of the operator's leaves the installed configuration exactly.
#[test]
fn applying_no_conditions_restores_the_installed_configuration() {
    let installed = installed_from_deploy();
    let mut config = installed.clone();
    let conditions = Conditions { scope: Some("true".into()), required: Some("false".into()) };
    assert!(apply(&mut config, &conditions, None));
    assert!(!apply(&mut config, &conditions, None), "unchanged the second time");
    assert_eq!(in_place(&config), conditions);
    assert!(apply(&mut config, &Conditions::default(), None));
    assert_eq!(config, installed);
}

/// A controller gated on the scope sees nothing while it is pending, then its stream whole; the
/// change that makes the scope known is not a change of its own (one pass, not two), later
/// ones are.
#[tokio::test]
async fn gated_streams_wait_for_the_scope_and_changes_start_after_it() {
    use futures::FutureExt;
    let state = watch::Sender::new(Registered::Pending);
    let status = ScopeStatus(state.subscribe());
    let mut gated = Box::pin(status.gate(futures::stream::iter([1, 2])));
    let mut changes = Box::pin(status.changes());
    tokio::task::yield_now().await;
    assert_eq!(gated.next().now_or_never(), None, "pending: nothing yet");
    assert_eq!(changes.next().now_or_never(), None);

    state.send_replace(Registered::EveryPod("no configuration".into()));
    assert_eq!(gated.next().await, Some(1));
    assert_eq!(gated.next().await, Some(2));
    assert_eq!(gated.next().await, None);
    assert_eq!(changes.next().now_or_never(), None, "becoming known is not a change");

    state.send_replace(Registered::Scoped(Arc::new(watcher_admission::Scope::default())));
    assert_eq!(changes.next().await, Some(()));
    drop(state);
    assert_eq!(changes.next().await, None, "the writer gone: no more changes");
}

/// A change of what is registered reconciles only the Watchers whose coverage it changed: not
/// a plain Watcher (always covered), not one covered before and after.
#[tokio::test]
async fn a_change_reconciles_only_the_watchers_whose_coverage_it_changed() {
    use futures::FutureExt;
    let plain = watcher("plain", json!({}));
    let web = watcher("web", web_selector());
    let api = watcher("api", json!({"selector": {"matchLabels": {"app": "api"}}}));
    let (store, mut cache) = reflector::store();
    for w in [&plain, &web, &api] {
        cache.apply_watcher_event(&Event::Apply(w.clone()));
    }
    let labels = std::collections::BTreeMap::from([("kubernetes.io/metadata.name".to_owned(), "team-a".to_owned())]);
    let scope_of = |watchers: &[&Watcher]| {
        let none: &[watcher_api::CompiledPolicy] = &[];
        Registered::Scoped(Arc::new(Scope::compute(
            watchers.iter().copied(),
            none,
            [("team-a", &labels)],
            "watcher-system",
        )))
    };
    let state = watch::Sender::new(Registered::Pending);
    let status = ScopeStatus(state.subscribe());
    let mut changes = Box::pin(status.coverage_changes(store));
    state.send_replace(scope_of(&[]));
    tokio::task::yield_now().await;
    assert_eq!(changes.next().now_or_never(), None, "becoming known is not a change");

    state.send_replace(scope_of(&[&web]));
    assert_eq!(changes.next().await, Some(ObjectRef::from(&web)));
    state.send_replace(scope_of(&[&web, &api]));
    assert_eq!(changes.next().await, Some(ObjectRef::from(&api)), "web stays covered: not again");
    state.send_replace(Registered::EveryPod("refused".into()));
    state.send_replace(scope_of(&[]));
    let mut both = vec![changes.next().await.expect("one"), changes.next().await.expect("two")];
    both.sort_by_key(|r| r.name.clone());
    assert_eq!(both, [ObjectRef::from(&api), ObjectRef::from(&web)], "both lost their conditions; plain never");
    drop(state);
    assert_eq!(changes.next().await, None);
}

/// A probe that cannot be made (another admission plugin refuses the pod, or no access) holds
/// nothing back: the Watcher is covered once the conditions are written, as before, and the
/// operator says why it could not confirm.
#[tokio::test]
async fn a_probe_that_cannot_be_made_holds_nothing_back() {
    let web = watcher("web", web_selector());
    let (mut writer, status, mut api, _store) = writer(vec![web.clone()]);
    let server = tokio::spawn(async move {
        let (_, send) = expect(&mut api, Method::GET, CONFIG_PATH).await;
        respond(send, StatusCode::OK, &installed_from_deploy());
        let (body, send) = expect(&mut api, Method::PUT, CONFIG_PATH).await;
        respond(send, StatusCode::OK, &body);
        let (_, send) = expect(&mut api, Method::POST, "/api/v1/namespaces/team-a/pods").await;
        let forbidden = json!({"kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": "Forbidden",
            "code": 403, "message": "pods \"watcher-scope-probe-\" is forbidden: violates PodSecurity"});
        respond(send, StatusCode::FORBIDDEN, &forbidden);
        api
    });
    assert!(matches!(writer.pass(true).await, Ok(Pass::Done)));
    assert_eq!(status.covers(&web), Some(true));
    let mut api = server.await.expect("scenario");
    drop(writer);
    assert!(api.next_request().await.is_none(), "one probe, not retried");
}
